//! `cargo run -p fluidos-crdgen [-- DIR]`: regenerate the CRD manifests (default `deploy/crds`).

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds"));
    for name in fluidos_crdgen::write_all(&dir)? {
        println!("wrote {}", dir.join(name).display());
    }
    Ok(())
}

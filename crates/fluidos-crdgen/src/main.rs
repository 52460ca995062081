//! `cargo run -p fluidos-crdgen [-- DIR...]`: regenerate the CRD manifests
//! (default: `deploy/crds` and the Helm chart's copy,
//! `deploy/helm/fluidos-node/crds`, which a chart test checks are identical).

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        dirs = vec![deploy.join("crds"), deploy.join("helm/fluidos-node/crds")];
    }
    for dir in dirs {
        for name in fluidos_crdgen::write_all(&dir)? {
            println!("wrote {}", dir.join(name).display());
        }
    }
    Ok(())
}

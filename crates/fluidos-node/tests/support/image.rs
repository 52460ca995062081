//! The fluidos-node image as `deploy/Containerfile` describes it
//! (`fluidos_testenv::real_cluster::NodeImage`), and the static binary a
//! test run is given.

use std::path::{Path, PathBuf};

use fluidos_testenv::real_cluster::NodeImage;
use fluidos_testenv::skip;

pub use fluidos_testenv::real_cluster::ImageLayout;

/// The image's repository and tag in the real clusters.
pub const REAL_IMAGE_REPOSITORY: &str = fluidos_testenv::real_cluster::REAL_IMAGE_REPOSITORY;
pub const REAL_IMAGE_TAG: &str = fluidos_testenv::real_cluster::REAL_IMAGE_TAG;

/// Reads the layout out of the Containerfile's text.
pub fn image_layout(containerfile: &str) -> ImageLayout {
    fluidos_testenv::real_cluster::image_layout(containerfile).unwrap()
}

/// The static binary to check; `None` after saying why this run cannot.
///
/// Without `FLUIDOS_STATIC_BINARY` the test is deferred in CI, not failed:
/// CI's first pass (`cargo test --workspace`) runs before the binary is
/// built, and its second pass sets the variable, runs this test again and
/// checks that it ran (`.ci/run`). Outside CI it skips. Without root it
/// skips, or fails in CI (`fluidos_testenv::skip`).
pub fn static_binary() -> Option<PathBuf> {
    let Some(bin) = std::env::var_os("FLUIDOS_STATIC_BINARY").filter(|b| !b.is_empty()) else {
        let why = "FLUIDOS_STATIC_BINARY is unset (tools/image/build-static.sh prints the path)";
        if skip::in_ci() {
            skip::deferred(format!(
                "{why}; CI's second pass sets it once the static build is done and runs this \
                 test then"
            ));
        } else {
            skip::unavailable(why);
        }
        return None;
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if !root {
        skip::unavailable("chroot needs root");
        return None;
    }
    // Relative to the workspace, where CI and the docs run it from (a test
    // runs in its package's directory).
    Some(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(bin),
    )
}

/// The binary, checked static, and the Containerfile's layout.
pub fn read_image(bin: &Path) -> (Vec<u8>, ImageLayout) {
    let image = NodeImage::load(bin).unwrap();
    println!(
        "static binary: {} bytes ({} MiB)",
        image.size(),
        image.size() >> 20
    );
    // The glibc fallback (no musl build on this machine) lands elsewhere:
    // noted by hand, refused in CI, which must check the image's binary.
    if !image.is_the_containerfiles() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is not the Containerfile's {}",
            bin.display(),
            image.layout().source
        );
        println!(
            "NOTE: {} is not the Containerfile's {}",
            bin.display(),
            image.layout().source
        );
    }
    let elf = std::fs::read(bin).unwrap();
    let layout = fluidos_testenv::real_cluster::image_layout(&containerfile()).unwrap();
    (elf, layout)
}

fn containerfile() -> String {
    std::fs::read_to_string(fluidos_testenv::workspace_root().join("deploy/Containerfile")).unwrap()
}

/// The image `deploy/Containerfile` describes, built here from the static
/// binary (`fluidos_testenv::real_cluster::NodeImage`).
pub fn node_image(bin: &Path) -> fluidos_testenv::ImageSpec {
    NodeImage::load(bin).unwrap().spec().unwrap()
}

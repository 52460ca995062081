//! Liqo as an operator installs it on a real cluster: its own Helm chart
//! (from the Liqo module in the Go module cache) running images made here of
//! the binaries `tools/liqo/build.sh` built, under the names and tag the
//! chart expects, so only `pullPolicy` needs saying.
//!
//! Upstream's images (`build/common/Dockerfile`) hold `/usr/bin/<component>`,
//! a link `/usr/bin/liqo-component` to it (the entrypoint; the chart names
//! the binary itself as `command`), CA certificates and alpine's `/tmp`
//! (the virtual kubelet writes its serving certificate there); the chart
//! runs them as uid 1000. These do the same.

use std::path::PathBuf;

use crate::liqo::LiqoBinaries;
use crate::oci_image::ImageSpec;
use crate::{Error, workspace_root};

/// The components the chart runs with networking, the metric agent, the
/// proxy and telemetry off: the controller manager, the CRD replicator, the
/// webhook, the virtual kubelet (a Deployment per VirtualNode, made by the
/// controller manager) and the uninstaller (its pre-delete hook).
pub const LIQO_CHART_COMPONENTS: &[&str] = &[
    "liqo-controller-manager",
    "crd-replicator",
    "webhook",
    "virtual-kubelet",
    "uninstaller",
];

/// Where the chart's images come from, as the chart names them.
const LIQO_IMAGE_REGISTRY: &str = "ghcr.io/liqotech";
/// The CA bundle the images carry (Debian's `ca-certificates`).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// `LIQO_VERSION` of `tools/liqo/versions.env`, the chart's image tag.
pub fn liqo_version() -> Result<String, Error> {
    let path = workspace_root().join("tools/liqo/versions.env");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    text.lines()
        .find_map(|line| line.strip_prefix("LIQO_VERSION="))
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| Error::LiqoUnavailable(format!("no LIQO_VERSION= in {}", path.display())))
}

impl LiqoBinaries {
    /// Liqo's chart, `deployments/liqo` of the module the binaries were built from.
    pub fn chart_dir(&self) -> PathBuf {
        self.module_dir().join("deployments/liqo")
    }

    /// The images of [`LIQO_CHART_COMPONENTS`], named as the chart names them
    /// (`ghcr.io/liqotech/<component>:<version>`).
    pub fn chart_images(&self) -> Result<Vec<ImageSpec>, Error> {
        let version = liqo_version()?;
        let ca = std::fs::read(CA_BUNDLE).unwrap_or_default();
        LIQO_CHART_COMPONENTS
            .iter()
            .map(|component| {
                let binary = self.dir().join(component);
                if !binary.is_file() {
                    return Err(Error::LiqoUnavailable(format!(
                        "{} is missing: run tools/liqo/build.sh",
                        binary.display()
                    )));
                }
                Ok(
                    ImageSpec::new(format!("{LIQO_IMAGE_REGISTRY}/{component}:{version}"))
                        .executable(&format!("usr/bin/{component}"), binary)
                        .symlink("usr/bin/liqo-component", component)
                        .file("etc/ssl/certs/ca-certificates.crt", ca.clone())
                        // The virtual kubelet keeps its serving certificate
                        // in /tmp/certs, as upstream's alpine base allows.
                        .directory("tmp", 0o1777)
                        .entrypoint(&["/usr/bin/liqo-component"])
                        .user("1000"),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_version_is_read() {
        assert!(liqo_version().unwrap().starts_with('v'));
    }
}

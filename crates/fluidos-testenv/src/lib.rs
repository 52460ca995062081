//! Test support: starts a real, isolated Kubernetes control plane (etcd +
//! kube-apiserver, optionally kube-controller-manager, kube-scheduler and
//! kwok) on loopback, so integration tests talk to genuine Kubernetes
//! semantics instead of mocks.
//!
//! Binaries come from `FLUIDOS_CP_BIN_DIR`, or else from
//! `tools/control-plane/build.sh` (run once per process; it caches its output).
//!
//! With [`ControlPlaneOptions::real_node`] the cluster gets one [`RealNode`]
//! instead of kwok: a kubelet with containerd, runc, the bridge CNI and
//! kube-proxy in a network namespace of its own, running real containers
//! from images built here ([`ImageSpec`]), with CoreDNS as the cluster DNS.
//!
//! [`Liqo`] adds the real Liqo controllers to a control plane (binaries from
//! `FLUIDOS_LIQO_BIN_DIR`, built by `tools/liqo/build.sh`), and
//! [`rabbitmq::RabbitMq`] runs a real TLS-only RabbitMQ for broker discovery.

#![warn(missing_docs)]

mod binaries;
mod certs;
mod cluster_dns;
mod control_plane;
mod crds;
pub mod fixtures;
pub mod go_rear_standin;
mod kubeconfig;
pub mod liqo;
mod liqo_chart;
pub mod liqo_gateway;
mod node_slot;
mod oci_image;
mod ports;
mod process;
pub mod rabbitmq;
pub mod real_cluster;
mod real_node;
pub mod skip;
#[cfg(test)]
mod versions;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use control_plane::{ControlPlane, ControlPlaneOptions, SERVICE_CLUSTER_IP_RANGE};
pub use liqo::{Liqo, LiqoBinaries, LiqoOptions};
pub use liqo_chart::{LIQO_CHART_COMPONENTS, liqo_version};
pub use oci_image::ImageSpec;
pub use real_node::{BUSYBOX_IMAGE, PAUSE_IMAGE, RealNode, real_node_prerequisites};

/// Everything that can go wrong while starting or driving a test control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A control-plane binary is not where the binary directory says it is.
    #[error(
        "control-plane binary {name} not found in {dir} (set FLUIDOS_CP_BIN_DIR or run tools/control-plane/build.sh)"
    )]
    BinaryMissing {
        /// Binary name, e.g. `kube-apiserver`.
        name: String,
        /// Directory that was searched.
        dir: PathBuf,
    },
    /// The Liqo binaries are not available (`FLUIDOS_LIQO_BIN_DIR` unset, or
    /// not a `tools/liqo/build.sh` output); the message says what to run.
    #[error("Liqo unavailable: {0}")]
    LiqoUnavailable(String),
    /// `tools/control-plane/build.sh` failed or printed no directory.
    #[error("building the control-plane binaries failed: {0}")]
    BuildFailed(String),
    /// A fixture object could not be built.
    #[error("fixture: {0}")]
    Fixture(String),
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Generating the test PKI failed.
    #[error("generating test certificates failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A control-plane process exited while it should have been running.
    #[error("{name} exited early ({status}); last lines of {log}:\n{log_tail}")]
    ProcessExited {
        /// Process name, e.g. `etcd`.
        name: String,
        /// Its exit status.
        status: String,
        /// Path of its captured stdout/stderr.
        log: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },
    /// Something did not become ready in time.
    #[error("{what} not ready after {waited:?}; last error: {last_error}\n{log_tail}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The last error seen while polling.
        last_error: String,
        /// The last lines of the relevant process logs.
        log_tail: String,
    },
    /// The generated kubeconfig could not be turned into a client config.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A Kubernetes API call failed.
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    /// A CRD manifest could not be read or is not a CustomResourceDefinition.
    #[error("CRD manifest {path}: {message}")]
    InvalidCrd {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// kube-apiserver refused to apply a CRD (e.g. an invalid schema or CEL rule).
    #[error("applying CRD {name} from {path}: {source}")]
    CrdRejected {
        /// The CRD name.
        name: String,
        /// The manifest file it came from.
        path: PathBuf,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A real node could not be set up (a host tool missing, a namespace or
    /// containerd command refused); the message says which and how to fix it.
    #[error("real node: {0}")]
    RealNode(String),
    /// `helm` is not available; the message says what to run.
    #[error("helm unavailable: {0}")]
    HelmUnavailable(String),
    /// `helm` failed.
    #[error("helm {args} failed:\n{output}")]
    Helm {
        /// Its arguments.
        args: String,
        /// Its stdout and stderr.
        output: String,
    },
    /// An image could not be made (a layout or a binary refused).
    #[error("image: {0}")]
    Image(String),
    /// A watch for another controller's object failed.
    #[error("watch: {0}")]
    Watch(#[from] kube::runtime::wait::Error),
    /// The process-wide spawner thread is not available.
    #[error("process spawner unavailable: {0}")]
    Spawner(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Ports are picked by binding port 0 and releasing it, so another process
    /// may grab one before our child binds it; such failures are retried.
    pub(crate) fn is_port_collision(&self) -> bool {
        match self {
            Error::ProcessExited { log_tail, .. } | Error::Timeout { log_tail, .. } => {
                log_tail.contains("address already in use")
            }
            _ => false,
        }
    }
}

/// The workspace root (the directory holding the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest_dir.to_path_buf())
}

/// `<workspace root>/../shared/reference` if it exists, else `None`.
pub fn shared_reference_dir() -> Option<PathBuf> {
    let dir = workspace_root().join("..").join("shared").join("reference");
    dir.is_dir().then_some(dir)
}

/// `<workspace root>/deploy/crds`, where the project's generated CRDs live.
pub fn crds_dir() -> PathBuf {
    workspace_root().join("deploy").join("crds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"));
        assert!(root.join("tools/control-plane/build.sh").is_file());
    }

    #[test]
    fn crds_dir_is_under_deploy() {
        assert!(crds_dir().ends_with("deploy/crds"));
    }

    #[test]
    fn port_collisions_are_recognised_from_the_log() {
        let exited = |tail: &str| Error::ProcessExited {
            name: "etcd".into(),
            status: "exit status: 1".into(),
            log: PathBuf::from("/tmp/etcd.log"),
            log_tail: tail.into(),
        };
        assert!(
            exited("listen tcp 127.0.0.1:1234: bind: address already in use").is_port_collision()
        );
        assert!(!exited("some other failure").is_port_collision());
        assert!(!Error::BuildFailed("x".into()).is_port_collision());
    }
}

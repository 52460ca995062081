//! Real clusters as an operator sets them up: a [`ControlPlane`] with a
//! [`crate::RealNode`], the fluidos-node image built from the static binary
//! as `deploy/Containerfile` lays it out, Liqo installed by its own chart and
//! fluidos-node by `deploy/helm/fluidos-node`, each rolled out before the
//! next step. Shared by the real-cluster tests and `cargo run -p
//! fluidos-demo`; every step returns an [`Error`] saying what failed.
//!
//! [`ControlPlane`]: crate::ControlPlane
//! [`Error`]: crate::Error

mod helm;
mod install;
mod node_image;
pub mod samples;
mod watch;

pub use helm::{HELM_BIN_DIR_ENV, Helm, chart_dir};
pub use install::{
    NS, install_fluidos, install_liqo, install_pair, provider_fingerprint, sell_node, start,
    wait_rolled_out,
};
pub use node_image::{
    ImageLayout, NodeImage, REAL_IMAGE_REPOSITORY, REAL_IMAGE_TAG, has_interpreter, image_layout,
};
pub use watch::{first_matching, offload_namespace, ready_virtual_node, running};

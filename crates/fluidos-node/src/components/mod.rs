//! The four components `--components` selects from, one module each.

pub mod local_resource_manager;
pub mod network_manager;
pub mod rear_gateway;
pub mod rear_manager;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cli::Component;
use crate::context::Context;

/// Why a component stopped before it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API server request or watch failed for good.
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    /// The component could not be set up.
    #[error("setup: {0}")]
    Setup(String),
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs `component` until `shutdown` is cancelled.
pub async fn run(
    component: Component,
    ctx: Arc<Context>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    match component {
        Component::LocalResourceManager => local_resource_manager::run(ctx, shutdown).await,
        Component::RearGateway => rear_gateway::run(ctx, shutdown).await,
        Component::RearManager => rear_manager::run(ctx, shutdown).await,
        Component::NetworkManager => network_manager::run(ctx, shutdown).await,
    }
}

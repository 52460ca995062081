//! Local resource manager: turns labelled Kubernetes nodes into Flavors
//! (Go `local-resource-manager`).
//!
//! Placeholder until the issue implementing this component lands: it only
//! logs that it started, reports ready and waits for shutdown.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::Component;
use crate::context::Context;

/// Runs the local resource manager until `shutdown` is cancelled (placeholder: does nothing yet).
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    super::placeholder(Component::LocalResourceManager, &ctx, shutdown).await
}

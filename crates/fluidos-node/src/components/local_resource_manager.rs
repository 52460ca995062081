//! Local resource manager: publishes K8Slice flavors from the labelled nodes
//! and Service flavors from ServiceBlueprints (Go `local-resource-manager`).

use std::sync::Arc;

use fluidos_lrm::LrmConfig;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::Component;
use crate::context::Context;

/// The LRM configuration from the Go-named flags.
pub fn lrm_config(ctx: &Context) -> LrmConfig {
    let f = ctx.flavor();
    let mut cfg = LrmConfig::new(ctx.identity.clone());
    cfg.enable_auto_discovery = f.enable_auto_discovery;
    cfg.node_resource_label = f.node_resource_label.clone();
    cfg.price = f.price();
    cfg.cpu_min = f.cpu_min.0.clone();
    cfg.memory_min = f.memory_min.0.clone();
    cfg.pods_min = f.pods_min.0.clone();
    cfg.gpu_min = f.gpu_min.0.clone();
    cfg.cpu_step = f.cpu_step.0.clone();
    cfg.memory_step = f.memory_step.0.clone();
    cfg.pods_step = f.pods_step.0.clone();
    cfg.gpu_step = f.gpu_step.0.clone();
    cfg.namespace = ctx.namespace().to_owned();
    cfg.metrics = ctx.metrics.clone();
    cfg
}

/// Runs the flavor controllers until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let readiness = fluidos_lrm::Readiness::new();
    let report = {
        let (ctx, readiness) = (ctx.clone(), readiness.clone());
        tokio::spawn(async move {
            readiness.wait().await;
            ctx.readiness.mark_ready(Component::LocalResourceManager);
        })
    };
    tracing::info!(component = %Component::LocalResourceManager, "component started");
    let result = fluidos_lrm::run_with_readiness(
        ctx.client.clone(),
        lrm_config(&ctx),
        readiness,
        async move { shutdown.cancelled().await },
    )
    .await
    .map_err(|e| Error::Setup(e.to_string()));
    report.abort();
    tracing::info!(component = %Component::LocalResourceManager, "component stopped");
    result
}

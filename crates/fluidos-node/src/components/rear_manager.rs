//! REAR manager: drives Solvers, Discoveries and Reservations, the consumer
//! side (Go `rear-manager` plus the Discovery and Reservation controllers Go
//! runs in `rear-controller`).

use std::sync::Arc;
use std::time::Duration;

use fluidos_consumer::{ConsumerConfig, Context as ConsumerContext};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_rear_client::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::Component;
use crate::context::Context;

/// Runs the consumer controllers until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let mut cfg = ConsumerConfig::new(ctx.namespace(), ctx.identity.clone());
    cfg.static_peers = ctx.args.peers.clone();
    cfg.peer_timeout = Duration::from_millis(ctx.args.peer_timeout_ms);
    let rear = ClientConfig {
        list_timeout: cfg.peer_timeout,
        reserve_timeout: Duration::from_millis(ctx.args.reserve_timeout_ms),
        purchase_timeout: Duration::from_millis(ctx.args.purchase_timeout_ms),
        ..ClientConfig::default()
    };
    let consumer = ConsumerContext::new(ctx.client.clone(), cfg, rear, ctx.metrics.clone())
        .map_err(|e| Error::Setup(e.to_string()))?;
    // Ready once every consumer controller has listed its objects: a Solver
    // created after /readyz says 200 is acted on at once (the first list of a
    // freshly installed CRD can wait out a 429 from the API server).
    let ready = ReadinessGate::new();
    let report = {
        let (ctx, ready) = (ctx.clone(), ready.clone());
        tokio::spawn(async move {
            ready.wait().await;
            ctx.readiness.mark_ready(Component::RearManager);
        })
    };
    tracing::info!(component = %Component::RearManager, "component started");
    fluidos_consumer::run_with_readiness(consumer, ready, async move {
        shutdown.cancelled().await;
    })
    .await;
    report.abort();
    tracing::info!(component = %Component::RearManager, "component stopped");
    Ok(())
}

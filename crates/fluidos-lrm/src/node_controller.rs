//! Node controller: one K8Slice flavor per labelled node, kept in step with
//! the node and the pods bound to it (fetch → build → apply).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::context::{Context, Ensured};
use crate::error::Error;
use crate::k8slice;

/// Reconciles the flavor of one labelled node.
#[tracing::instrument(skip_all, fields(node = %node.name_any()))]
pub(crate) async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.caches_ready().await;
    if !ctx.publisher.selects(&node) {
        // The node cache only holds labelled nodes; the lifecycle controller
        // retires flavors of nodes that left it.
        return Ok(Action::await_change());
    }
    let name = node.name_any();
    // fetch
    let usage = ctx.metrics.usage(&name).await;
    let load = ctx.pods.load(&name);
    // build (pure)
    let desired = k8slice::build(&node, &load, usage.as_ref(), &ctx.publisher)?;
    // apply
    let Ensured { change, ledger } = ctx.ensure(&desired, true).await?;
    tracing::debug!(
        node = name,
        flavor = desired.name,
        ?change,
        "node reconciled"
    );
    // Usage moves without watch events, and an expiring hold frees capacity.
    let mut next = ledger.next_expiry;
    if usage.is_some() {
        next = Some(next.map_or(ctx.metrics_resync, |n| n.min(ctx.metrics_resync)));
    }
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

//! The provider lets a consumer's Liqo Tenant go once nothing is sold to that
//! consumer any more.
//!
//! A consumer that unpeers deletes its Tenant here itself
//! ([`crate::allocation`]'s teardown). One that does not (its Contracts
//! expired, were deleted, or it vanished) would keep its Tenant, and with it
//! the RoleBindings Liqo gave its control-plane certificate, which stays
//! valid for a year. So when this node has no Contract sold to cluster `C`,
//! the Tenant in `liqo-tenant-C` goes, with the ResourceSlices replicated
//! there and the nonce Secret: Liqo's finalizer unbinds the cluster-wide
//! roles, the garbage collector the namespaced ones (the Tenant owns them).
//! Only tenant namespaces the REAR gateway made for a buyer are looked at: a
//! Tenant of a peering its admin made by hand is none of our business.
//!
//! A consumer that buys again finds its Identity bound to nothing here and
//! authenticates again (see [`crate::allocation::machine`]).

use std::future::Future;
use std::sync::Arc;

use fluidos_api::{Contract, NodeIdentity};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::{Metrics, ReconcileError, Reconciler};
use fluidos_liqo_api::{ResourceSlice, Tenant};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::objects;
use crate::slice_class::REPLICATED_LABEL;

/// Controller name in logs and metrics.
const CONTROLLER: &str = "tenant-cleanup";

/// The label the REAR gateway puts on the tenant namespaces it makes.
pub const GATEWAY_MANAGED: (&str, &str) = ("app.kubernetes.io/managed-by", "fluidos-rear-gateway");

/// What becomes of one consumer's Tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantFate {
    /// Something is sold to it, it is not ours to judge, or it is going.
    Keep,
    /// Nothing is sold to it any more: remove it.
    Remove,
}

/// The fate of the Tenant of `consumer` (pure): removed only when its
/// namespace is one the gateway made, it is not already being deleted, and
/// none of `contracts` is this node's sale to it (expired ones count until
/// the gateway deletes them).
pub fn decide(
    consumer: &str,
    namespace_made_by_gateway: bool,
    deleting: bool,
    contracts: &[Contract],
    me: &NodeIdentity,
) -> TenantFate {
    let sold_to_it = contracts.iter().any(|c| {
        c.spec.buyer_cluster_id == consumer
            && c.spec.seller.node_id == me.node_id
            && c.spec.seller.domain == me.domain
    });
    if namespace_made_by_gateway && !deleting && !sold_to_it {
        TenantFate::Remove
    } else {
        TenantFate::Keep
    }
}

/// What the controller needs to know.
#[derive(Clone, Debug)]
pub struct TenantCleanupConfig {
    /// Namespace of this node's Contracts.
    pub namespace: String,
    /// This node's identity: only its own sales keep a Tenant.
    pub identity: NodeIdentity,
}

/// One reconcile's failure: one variant per step, keeping the source.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct Error {
    step: &'static str,
    #[source]
    source: kube::Error,
}

impl ReconcileError for Error {
    fn step(&self) -> &'static str {
        self.step
    }
    fn api_error(&self) -> Option<&kube::Error> {
        Some(&self.source)
    }
}

fn kube_step(step: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error { step, source }
}

struct Context {
    client: kube::Client,
    cfg: TenantCleanupConfig,
    reconciler: Reconciler,
}

/// Runs the controller until `shutdown`; `ready` is set once the Tenants
/// are listed.
pub async fn run(
    client: kube::Client,
    cfg: TenantCleanupConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::WatchStreamExt;
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let (cache, writer) = kube::runtime::reflector::store();
    let tenants = watcher::watcher(
        Api::<Tenant>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .inspect_ok(move |event| {
        if matches!(event, watcher::Event::InitDone) {
            ready.set_ready();
        }
    })
    .applied_objects();
    // A Contract ending (or a new one) changes the fate of its buyer's Tenant.
    let contracts = watcher::watcher(
        Api::<Contract>::namespaced(client.clone(), &cfg.namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects();
    let ctx = Arc::new(Context {
        client,
        cfg,
        reconciler: reconciler.clone(),
    });
    let policy = reconciler.clone();
    let stream = Controller::for_stream(tenants, cache)
        .watches_stream(contracts, |c: Contract| {
            let consumer = &c.spec.buyer_cluster_id;
            (!consumer.is_empty())
                .then(|| ObjectRef::new(consumer).within(&objects::tenant_namespace(consumer)))
        })
        .graceful_shutdown_on(shutdown)
        .run(
            |t, ctx| async move {
                let r = ctx.reconciler.clone();
                r.observe(t.as_ref(), reconcile(t.clone(), ctx)).await
            },
            move |t, err, _| policy.error_policy(t.as_ref(), err),
            ctx,
        );
    fluidos_controller::reconcile::drain(reconciler, stream.boxed()).await;
}

async fn reconcile(t: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action, Error> {
    let consumer = t.name_any();
    let ns = t.namespace().unwrap_or_default();
    if ns != objects::tenant_namespace(&consumer) {
        return Ok(Action::await_change());
    }
    let namespace = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&ns)
        .await
        .map_err(kube_step("get_tenant_namespace"))?;
    let made_by_gateway = namespace.is_some_and(|n| {
        n.labels().get(GATEWAY_MANAGED.0).map(String::as_str) == Some(GATEWAY_MANAGED.1)
    });
    // A consistent read: a Contract just sold must keep its Tenant.
    let contracts = Api::<Contract>::namespaced(ctx.client.clone(), &ctx.cfg.namespace)
        .list(&ListParams::default())
        .await
        .map_err(kube_step("list_contracts"))?
        .items;
    let fate = decide(
        &consumer,
        made_by_gateway,
        t.metadata.deletion_timestamp.is_some(),
        &contracts,
        &ctx.cfg.identity,
    );
    if fate == TenantFate::Keep {
        return Ok(Action::await_change());
    }
    // The replicated slices first: without the Tenant Liqo no longer looks
    // after them. Then the Tenant, only as read (one touched meanwhile is
    // decided again), then the nonce.
    let slices = Api::<ResourceSlice>::namespaced(ctx.client.clone(), &ns);
    let replicated = slices
        .list(&ListParams::default().labels(&format!("{REPLICATED_LABEL}=true")))
        .await
        .map_err(kube_step("list_replicated_slices"))?;
    for s in &replicated.items {
        gone(slices.delete(&s.name_any(), &DeleteParams::default()).await)
            .map_err(kube_step("delete_replicated_slice"))?;
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: t.uid(),
            resource_version: t.resource_version(),
        }),
        ..DeleteParams::default()
    };
    gone(
        Api::<Tenant>::namespaced(ctx.client.clone(), &ns)
            .delete(&consumer, &dp)
            .await,
    )
    .map_err(kube_step("delete_tenant"))?;
    gone(
        Api::<Secret>::namespaced(ctx.client.clone(), &ns)
            .delete(objects::NONCE_SECRET, &DeleteParams::default())
            .await,
    )
    .map_err(kube_step("delete_nonce"))?;
    tracing::info!(
        %consumer,
        slices = replicated.items.len(),
        "nothing is sold to this cluster any more: its Liqo Tenant is removed"
    );
    Ok(Action::await_change())
}

/// A delete that found nothing is as good as done.
fn gone<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(e) if fluidos_controller::api_error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn me() -> NodeIdentity {
        NodeIdentity {
            domain: "d".into(),
            node_id: "provider".into(),
            ..Default::default()
        }
    }

    fn sold(to: &str, by: &NodeIdentity) -> Contract {
        let mut spec = crate::objects::tests::contract(None);
        spec.buyer_cluster_id = to.to_owned();
        spec.seller = by.clone();
        Contract::new("c", spec)
    }

    #[test]
    fn a_tenant_goes_only_when_nothing_is_sold_to_it_and_the_gateway_made_its_namespace() {
        let other = NodeIdentity {
            node_id: "someone-else".into(),
            ..me()
        };
        assert_eq!(decide("c1", true, false, &[], &me()), TenantFate::Remove);
        assert_eq!(
            decide("c1", true, false, &[sold("c1", &me())], &me()),
            TenantFate::Keep
        );
        // Sales to others, or by others (this node bought), do not count.
        assert_eq!(
            decide(
                "c1",
                true,
                false,
                &[sold("c2", &me()), sold("c1", &other)],
                &me()
            ),
            TenantFate::Remove
        );
        // A peering made by hand, or one already going, is left alone.
        assert_eq!(decide("c1", false, false, &[], &me()), TenantFate::Keep);
        assert_eq!(decide("c1", true, true, &[], &me()), TenantFate::Keep);
    }
}

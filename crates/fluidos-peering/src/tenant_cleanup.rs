//! The provider lets a consumer's Liqo Tenant go once nothing is sold to that
//! consumer any more.
//!
//! A consumer that unpeers deletes its Tenant here itself
//! ([`crate::allocation`]'s teardown). One that does not (its Contracts
//! expired, were deleted, or it vanished) would keep its Tenant, and with it
//! the RoleBindings Liqo gave its control-plane certificate, which stays
//! valid for a year, and its virtual kubelets' rights in the namespaces it
//! offloaded here. So when this node has no Contract sold to cluster `C` and
//! no reservation of it, the Tenant in `liqo-tenant-C` is drained the way
//! Liqo drains (`tenantCondition: Drained`: Liqo unbinds the roles it gave
//! `C`'s certificates, then deletes the ResourceSlices and NamespaceMaps
//! replicated from `C`, and with them the offloaded namespaces); once Liqo
//! has, what `C`'s Liqo networking phase made here (its GatewayServer,
//! PublicKey and Configuration, unless this cluster consumes from `C` too),
//! the nonce Secret and the Tenant go. Rights first, so that `C`'s
//! replicator cannot put back what is deleted.
//! Only tenant namespaces the REAR gateway made for a buyer are looked at: a
//! Tenant of a peering its admin made by hand is none of our business.
//!
//! A consumer that buys again finds its Identity bound to nothing here and
//! authenticates again (see [`crate::allocation::machine`]).

use std::future::Future;
use std::sync::Arc;

use fluidos_api::{Contract, NodeIdentity, Transaction};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::{Metrics, ReconcileError, Reconciler};
use fluidos_liqo_api::generated::tenant::TenantTenantCondition;
use fluidos_liqo_api::{ResourceSlice, Tenant};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use serde_json::json;

use crate::objects;
use crate::slice_class::REPLICATED_LABEL;

/// Controller name in logs and metrics.
const CONTROLLER: &str = "tenant-cleanup";

/// The label the REAR gateway puts on the tenant namespaces it makes.
pub const GATEWAY_MANAGED: (&str, &str) = ("app.kubernetes.io/managed-by", "fluidos-rear-gateway");

/// Annotation on a Tenant this controller drained, with the time it last
/// asked Liqo to drain it. Such a Tenant is always removed: Liqo's
/// replicator on the consumer drops what it could not write while the
/// rights were gone and does not try again for hours, so an undrained
/// Tenant would leave the consumer's offloading broken. The consumer reads
/// the annotation as "being removed" and authenticates again afterwards.
pub const DRAINED_BY_CLEANUP: &str = objects::DRAINED_FOR_REMOVAL;

/// How long Liqo may take to delete what it replicated before it is asked
/// to drain again (its drain runs once per Tenant change, and something
/// recreated in the moment the rights went would stay).
const DRAIN_NUDGE_SECS: i64 = 30;

/// What is known of one consumer's Tenant and what Liqo left of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantFacts {
    /// Its namespace is one the REAR gateway made for a buyer.
    pub namespace_made_by_gateway: bool,
    /// It is being deleted.
    pub deleting: bool,
    /// `spec.tenantCondition` is `Drained`.
    pub drained: bool,
    /// This controller drained it ([`DRAINED_BY_CLEANUP`]).
    pub drained_by_cleanup: bool,
    /// Seconds since this controller last asked Liqo to drain it.
    pub drain_asked_secs_ago: i64,
    /// ResourceSlices and NamespaceMaps replicated from the consumer still
    /// in its namespace.
    pub leftovers: usize,
}

/// The next step for one consumer's Tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantStep {
    /// Something is sold to it, it is not ours to judge, or it is going.
    Keep,
    /// Nothing is sold to it: have Liqo drain it (Liqo unbinds the roles it
    /// gave the consumer's certificates, then deletes the slices and
    /// NamespaceMaps, and so the offloaded namespaces, replicated from it).
    Drain,
    /// Drained; Liqo is still deleting what was replicated.
    WaitForLiqo,
    /// Drained long ago and something replicated is still there: ask Liqo
    /// to drain again.
    NudgeLiqo,
    /// Drained and emptied: delete the nonce and the Tenant.
    Remove,
}

/// True when `c` is a Service this node bought from `cluster` and delivered
/// by Liqo: `cluster` peers here as Liqo's consumer to offload it.
fn offloads_here(c: &Contract, cluster: &str, me: &NodeIdentity) -> bool {
    fluidos_api::service_delivery::bought_by_liqo(c)
        && c.spec.peering_target_credentials.liqo_id == cluster
        && c.spec.buyer.node_id == me.node_id
        && c.spec.buyer.domain == me.domain
}

/// The next step for the Tenant of `consumer` (pure). It is kept while any
/// of `contracts` is this node's sale to it (or a Service bought from it and
/// delivered by Liqo) (expired ones count until the
/// gateway deletes them) or a reservation of it is held (`holds`), and when
/// its namespace is not one the gateway made. One this controller drained
/// goes on to removal whatever happens meanwhile (see
/// [`DRAINED_BY_CLEANUP`]); one an admin drained goes once nothing is sold.
pub fn decide(
    consumer: &str,
    facts: TenantFacts,
    contracts: &[Contract],
    holds: usize,
    me: &NodeIdentity,
) -> TenantStep {
    if !facts.namespace_made_by_gateway || facts.deleting {
        return TenantStep::Keep;
    }
    let sold_to_it = contracts.iter().any(|c| {
        (c.spec.buyer_cluster_id == consumer
            && c.spec.seller.node_id == me.node_id
            && c.spec.seller.domain == me.domain)
            || offloads_here(c, consumer, me)
    });
    let busy = sold_to_it || holds > 0;
    match (facts.drained, facts.drained_by_cleanup, busy) {
        // An admin's drain of a Tenant something is sold to: the admin's.
        (true, false, true) | (false, false, true) => TenantStep::Keep,
        (true, _, _) if facts.leftovers == 0 => TenantStep::Remove,
        (true, _, _) if facts.drain_asked_secs_ago >= DRAIN_NUDGE_SECS => TenantStep::NudgeLiqo,
        (true, _, _) => TenantStep::WaitForLiqo,
        // Nothing sold, or ours but set back to active by someone: drain.
        (false, _, _) => TenantStep::Drain,
    }
}

/// What the controller needs to know.
#[derive(Clone, Debug)]
pub struct TenantCleanupConfig {
    /// Namespace of this node's Contracts.
    pub namespace: String,
    /// This node's identity: only its own sales keep a Tenant.
    pub identity: NodeIdentity,
    /// Where the watches of Liqo's kinds say which are not served.
    pub liqo: crate::liqo_watch::LiqoPresence,
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
    let tenants = crate::liqo_watch::quiet(
        "Tenant",
        cfg.liqo.clone(),
        watcher::watcher(
            Api::<Tenant>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
    )
    .reflect(writer)
    .inspect_ok(move |event| {
        if matches!(event, watcher::Event::InitDone) {
            ready.set_ready();
        }
    })
    .applied_objects();
    // A Contract or a reservation ending (or a new one) changes the fate of
    // its buyer's Tenant.
    let contracts = watcher::watcher(
        Api::<Contract>::namespaced(client.clone(), &cfg.namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .touched_objects();
    let transactions = watcher::watcher(
        Api::<Transaction>::namespaced(client.clone(), &cfg.namespace),
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
            // A sale: its buyer's Tenant; a Service bought and delivered by
            // Liqo: its seller's too.
            let seller = fluidos_api::service_delivery::bought_by_liqo(&c)
                .then(|| tenant_of(&c.spec.peering_target_credentials.liqo_id))
                .flatten();
            tenant_of(&c.spec.buyer_cluster_id)
                .into_iter()
                .chain(seller)
        })
        .watches_stream(transactions, |t: Transaction| tenant_of(&t.spec.cluster_id))
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

/// The Tenant of cluster `consumer`, if named.
fn tenant_of(consumer: &str) -> Option<ObjectRef<Tenant>> {
    (!consumer.is_empty())
        .then(|| ObjectRef::new(consumer).within(&objects::tenant_namespace(consumer)))
}

/// How soon a Tenant Liqo is draining is looked at again (what Liqo deletes
/// is not watched here).
const DRAIN_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

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
    if !made_by_gateway {
        return Ok(Action::await_change());
    }
    let drained = t.spec.tenant_condition == Some(TenantTenantCondition::Drained);
    let leftovers = if drained {
        replicated_leftovers(&ctx.client, &ns).await?
    } else {
        0
    };
    // Consistent reads, Transactions first: a purchase turns its
    // Transaction into a Contract, so one in between is seen at least once.
    let holds = Api::<Transaction>::namespaced(ctx.client.clone(), &ctx.cfg.namespace)
        .list(&ListParams::default())
        .await
        .map_err(kube_step("list_transactions"))?
        .items
        .iter()
        .filter(|tx| tx.spec.cluster_id == consumer)
        .count();
    let contracts = Api::<Contract>::namespaced(ctx.client.clone(), &ctx.cfg.namespace)
        .list(&ListParams::default())
        .await
        .map_err(kube_step("list_contracts"))?
        .items;
    let asked = t.annotations().get(DRAINED_BY_CLEANUP);
    let facts = TenantFacts {
        namespace_made_by_gateway: made_by_gateway,
        deleting: t.metadata.deletion_timestamp.is_some(),
        drained,
        drained_by_cleanup: asked.is_some(),
        drain_asked_secs_ago: asked
            .and_then(|at| fluidos_controller::time::seconds_since(at))
            .unwrap_or(i64::MAX),
        leftovers,
    };
    let tenants = Api::<Tenant>::namespaced(ctx.client.clone(), &ns);
    let step = decide(&consumer, facts, &contracts, holds, &ctx.cfg.identity);
    match step {
        TenantStep::Keep => Ok(Action::await_change()),
        TenantStep::Drain | TenantStep::NudgeLiqo => {
            if step == TenantStep::NudgeLiqo {
                tracing::warn!(%consumer, leftovers, "Liqo has not deleted what it replicated from this cluster: asking it to drain again");
            }
            // Any change of the Tenant makes Liqo handle the drain (again).
            let patch = json!({
                "metadata": {
                    "annotations": {DRAINED_BY_CLEANUP: fluidos_controller::time::now_string()},
                    "resourceVersion": t.resource_version(),
                },
                "spec": {"tenantCondition": "Drained"},
            });
            match tenants
                .patch(&consumer, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {}
                // Changed since read: decide again.
                Err(e) if fluidos_controller::api_error::is_conflict(&e) => {
                    return Ok(Action::requeue(DRAIN_RECHECK));
                }
                Err(e) => return Err(kube_step("drain_tenant")(e)),
            }
            tracing::info!(%consumer, "nothing is sold to this cluster any more: its Tenant is drained");
            Ok(Action::requeue(DRAIN_RECHECK))
        }
        TenantStep::WaitForLiqo => Ok(Action::requeue(DRAIN_RECHECK)),
        TenantStep::Remove => remove(&ctx.client, &tenants, &t).await,
    }
}

/// Deletes what the consumer's networking phase made here (unless this
/// cluster also consumes from it, through the same tunnel), the nonce, then
/// the Tenant as read (one touched meanwhile is decided again).
async fn remove(client: &kube::Client, tenants: &Api<Tenant>, t: &Tenant) -> Result<Action, Error> {
    let consumer = t.name_any();
    let ns = t.namespace().unwrap_or_default();
    if !crate::allocation::peer_has_role(
        client,
        &consumer,
        crate::allocation::PeerRole::ProvidesToUs,
    )
    .await
    .map_err(kube_step("get_foreign_cluster"))?
    {
        delete_network(client, &ns, &consumer).await?;
    }
    gone(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .delete(objects::NONCE_SECRET, &DeleteParams::default())
            .await,
    )
    .map_err(kube_step("delete_nonce"))?;
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: t.uid(),
            resource_version: t.resource_version(),
        }),
        ..DeleteParams::default()
    };
    match tenants.delete(&consumer, &dp).await {
        Ok(_) => {}
        Err(e) if fluidos_controller::api_error::is_not_found(&e) => {}
        Err(e) if fluidos_controller::api_error::is_conflict(&e) => {
            return Ok(Action::requeue(DRAIN_RECHECK));
        }
        Err(e) => return Err(kube_step("delete_tenant")(e)),
    }
    tracing::info!(%consumer, "nothing is sold to this cluster any more: its Tenant is removed");
    Ok(Action::await_change())
}

/// Deletes the GatewayServer (Liqo then removes the gateway it runs for
/// it), the PublicKey and the Configuration named after `consumer` in its
/// tenant namespace `ns`: a consumer whose credentials were revoked before
/// it unpeered cannot delete them itself.
async fn delete_network(client: &kube::Client, ns: &str, consumer: &str) -> Result<(), Error> {
    use fluidos_liqo_api::{Configuration, GatewayServer, PublicKey};
    let dp = DeleteParams::background();
    gone(
        Api::<GatewayServer>::namespaced(client.clone(), ns)
            .delete(consumer, &dp)
            .await,
    )
    .map_err(kube_step("delete_gateway_server"))?;
    gone(
        Api::<PublicKey>::namespaced(client.clone(), ns)
            .delete(consumer, &dp)
            .await,
    )
    .map_err(kube_step("delete_public_key"))?;
    gone(
        Api::<Configuration>::namespaced(client.clone(), ns)
            .delete(consumer, &dp)
            .await,
    )
    .map_err(kube_step("delete_configuration"))
}

/// How many ResourceSlices and NamespaceMaps replicated from the consumer
/// are still in `ns`.
async fn replicated_leftovers(client: &kube::Client, ns: &str) -> Result<usize, Error> {
    let replicated = ListParams::default().labels(&format!("{REPLICATED_LABEL}=true"));
    let slices = Api::<ResourceSlice>::namespaced(client.clone(), ns)
        .list_metadata(&replicated)
        .await
        .map_err(kube_step("list_replicated_slices"))?;
    let maps = namespace_maps(client, ns)
        .list_metadata(&replicated)
        .await
        .map_err(kube_step("list_replicated_namespace_maps"))?;
    Ok(slices.items.len() + maps.items.len())
}

/// Liqo's NamespaceMaps in `ns` (no generated type: only listed here).
fn namespace_maps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceMap");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "namespacemaps"),
    )
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

    fn ours(drained: bool, leftovers: usize) -> TenantFacts {
        TenantFacts {
            namespace_made_by_gateway: true,
            drained,
            drained_by_cleanup: drained,
            drain_asked_secs_ago: if drained { 1 } else { i64::MAX },
            leftovers,
            ..TenantFacts::default()
        }
    }

    #[test]
    fn nothing_sold_drains_then_waits_for_liqo_then_removes() {
        assert_eq!(
            decide("c1", ours(false, 0), &[], 0, &me()),
            TenantStep::Drain
        );
        assert_eq!(
            decide("c1", ours(true, 2), &[], 0, &me()),
            TenantStep::WaitForLiqo
        );
        // Liqo's drain runs once per change: a slow one is asked again.
        let slow = TenantFacts {
            drain_asked_secs_ago: DRAIN_NUDGE_SECS,
            ..ours(true, 2)
        };
        assert_eq!(decide("c1", slow, &[], 0, &me()), TenantStep::NudgeLiqo);
        assert_eq!(
            decide("c1", ours(true, 0), &[], 0, &me()),
            TenantStep::Remove
        );
    }

    #[test]
    fn a_service_bought_and_delivered_by_liqo_keeps_its_sellers_tenant() {
        let bought = |from: &str, by_liqo: bool| {
            let mut spec = crate::objects::tests::contract(None);
            spec.buyer = me();
            spec.peering_target_credentials.liqo_id = from.to_owned();
            spec.flavor.spec.flavor_type = serde_json::from_value(
                serde_json::json!({"typeIdentifier": "Service", "typeData": {}}),
            )
            .unwrap();
            spec.extra_information = Some(fluidos_api::service_delivery::extra_information());
            let mut c = Contract::new("c", spec);
            if by_liqo {
                c.labels_mut().insert(
                    fluidos_api::service_delivery::DELIVERY_LABEL.into(),
                    fluidos_api::service_delivery::LIQO.into(),
                );
            }
            c
        };
        assert_eq!(
            decide("s1", ours(false, 0), &[bought("s1", true)], 0, &me()),
            TenantStep::Keep
        );
        for other in [bought("s2", true), bought("s1", false)] {
            assert_eq!(
                decide("s1", ours(false, 0), &[other], 0, &me()),
                TenantStep::Drain
            );
        }
    }

    #[test]
    fn a_sale_or_a_reservation_keeps_the_tenant_but_not_one_we_drained() {
        let other = NodeIdentity {
            node_id: "someone-else".into(),
            ..me()
        };
        let sale = [sold("c1", &me())];
        assert_eq!(
            decide("c1", ours(false, 0), &sale, 0, &me()),
            TenantStep::Keep
        );
        assert_eq!(
            decide("c1", ours(false, 0), &[], 1, &me()),
            TenantStep::Keep
        );
        // Drained by us, it goes on to removal: the consumer authenticates
        // again after (its replicator dropped what it could not write).
        assert_eq!(
            decide("c1", ours(true, 0), &sale, 0, &me()),
            TenantStep::Remove
        );
        // Marked by us but set back to active: drained again.
        let set_back = TenantFacts {
            drained: false,
            ..ours(true, 0)
        };
        assert_eq!(decide("c1", set_back, &sale, 0, &me()), TenantStep::Drain);
        // An admin's drain of a Tenant with a sale is the admin's.
        let admin_drained = TenantFacts {
            drained_by_cleanup: false,
            drain_asked_secs_ago: i64::MAX,
            ..ours(true, 0)
        };
        assert_eq!(
            decide("c1", admin_drained, &sale, 0, &me()),
            TenantStep::Keep
        );
        assert_eq!(
            decide("c1", admin_drained, &[], 0, &me()),
            TenantStep::Remove
        );
        // Sales to others, or by others (this node bought), do not count.
        assert_eq!(
            decide(
                "c1",
                ours(false, 0),
                &[sold("c2", &me()), sold("c1", &other)],
                0,
                &me()
            ),
            TenantStep::Drain
        );
    }

    #[test]
    fn a_peering_made_by_hand_or_a_tenant_going_is_left_alone() {
        let by_hand = TenantFacts {
            namespace_made_by_gateway: false,
            ..ours(false, 0)
        };
        assert_eq!(decide("c1", by_hand, &[], 0, &me()), TenantStep::Keep);
        let going = TenantFacts {
            deleting: true,
            ..ours(true, 0)
        };
        assert_eq!(decide("c1", going, &[], 0, &me()), TenantStep::Keep);
    }
}

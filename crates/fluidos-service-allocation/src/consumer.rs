//! Consumer side: the buyer's Allocation of a Service Contract gets the
//! service's endpoints and credentials from the provider over REAR and
//! keeps them in the Secret `credentials-<contract>` next to it.

pub mod machine;

use std::future::Future;
use std::sync::Arc;

use fluidos_api::rear::ServiceAccess;
use fluidos_api::service_delivery::{self, OffloadingGrant, OffloadingIssuer};
use fluidos_api::{Allocation, Contract, NodeIdentity};
use fluidos_controller::api_error::ok_if_not_found;
use fluidos_controller::{Metrics, ReadinessGate, Reconciler};
use fluidos_rear_client::{ClientConfig, NodeKey, ProviderAddress, RearClient, RearError};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::{CONSUMER_FINALIZER, Error, MANAGER, Step};
use machine::{Effect, Input};

/// Controller name in logs and metrics.
pub const CONTROLLER: &str = "service-allocation-consumer";

/// What the consumer controller needs to know.
#[derive(Clone)]
pub struct ConsumerConfig {
    /// Namespace of Allocations and Contracts (the Solvers').
    pub namespace: String,
    /// This node (the buyer of the contracts it handles).
    pub identity: NodeIdentity,
    /// Timeouts of the REAR calls.
    pub rear: ClientConfig,
    /// This node's REAR key, presented to pinned providers; `None`: pinned
    /// calls are anonymous.
    pub node_key: Option<Arc<NodeKey>>,
    /// Set when this node buys Services delivered by Liqo: grants each
    /// seller the peering-user rights in its tenant namespace here once its
    /// Contract names its Liqo cluster ID (re-asserted at every reconcile).
    pub offloading: Option<OffloadingIssuer>,
}

impl std::fmt::Debug for ConsumerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerConfig")
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .field("offloading", &self.offloading.is_some())
            .finish_non_exhaustive()
    }
}

struct Ctx {
    client: kube::Client,
    cfg: ConsumerConfig,
    rear: RearClient,
    recorder: kube::runtime::events::Recorder,
    reconciler: Reconciler,
}

/// Runs the consumer controller until `shutdown`; `ready` opens once the Allocation watch has listed.
pub async fn run(
    client: kube::Client,
    cfg: ConsumerConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let rear = match &cfg.node_key {
        Some(key) => RearClient::with_key(cfg.rear.clone(), key.clone()),
        None => RearClient::new(cfg.rear.clone()),
    }
    .map_err(|e| Error::Object {
        step: Step::FetchAccess,
        message: format!("building the REAR client: {e}"),
    })?;
    let allocations: Api<Allocation> = Api::namespaced(client.clone(), &cfg.namespace);
    let (store, objects) = crate::watched(allocations, ready);
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let ctx = Arc::new(Ctx {
        recorder: fluidos_controller::events::recorder(client.clone(), MANAGER),
        client: client.clone(),
        rear,
        reconciler: reconciler.clone(),
        cfg: cfg.clone(),
    });
    let offloaded = {
        let store = store.clone();
        // A credentials Secret Liqo reflected (delivery by Liqo) wakes the
        // Allocation of the Contract its namespace is named after.
        move |s: Secret| {
            let ns = s.namespace().unwrap_or_default();
            store
                .state()
                .iter()
                .filter(|a| {
                    a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(ns.as_str())
                })
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let mut controller = Controller::for_stream(objects, store).owns(
        Api::<Secret>::namespaced(client.clone(), &cfg.namespace),
        watcher::Config::default().labels(fluidos_blueprint::CONTRACT_LABEL),
    );
    // Only a buyer asking for delivery by Liqo gets such Secrets (and holds
    // the right to watch them everywhere).
    if cfg.offloading.is_some() {
        use kube::runtime::WatchStreamExt;
        controller = controller.watches_stream(
            watcher::watcher(
                Api::<Secret>::all(client),
                watcher::Config::default()
                    .labels(&format!("{}=true", service_delivery::CREDENTIALS_LABEL)),
            )
            .default_backoff()
            .touched_objects(),
            offloaded,
        );
    }
    let controller = controller.graceful_shutdown_on(shutdown);
    let policy = reconciler.clone();
    let stream = controller.run(
        |allocation, ctx: Arc<Ctx>| async move {
            ctx.reconciler
                .observe(
                    allocation.as_ref(),
                    reconcile(allocation.clone(), ctx.clone()),
                )
                .await
        },
        move |allocation, err, _| policy.error_policy(allocation.as_ref(), err),
        ctx,
    );
    fluidos_controller::reconcile::drain(reconciler, stream).await;
    Ok(())
}

/// A Service contract bought by this node from another one.
fn is_ours(contract: &Contract, me: &NodeIdentity) -> bool {
    let bought =
        contract.spec.buyer.node_id == me.node_id && contract.spec.buyer.domain == me.domain;
    let sold =
        contract.spec.seller.node_id == me.node_id && contract.spec.seller.domain == me.domain;
    bought
        && !sold
        && contract.spec.flavor.spec.flavor_type.identifier()
            == Some(fluidos_api::FlavorTypeIdentifier::Service)
}

/// Where the seller of `contract` is called: its `host:port`, pinned to the
/// key in the Contract's `fluidos.eu/provider-fingerprint` annotation (set
/// when it was bought from a pinned provider); a malformed annotation is an
/// error that says so.
pub fn seller_address(contract: &Contract) -> Result<ProviderAddress, RearError> {
    let address = &contract.spec.seller.ip;
    let annotation = contract
        .annotations()
        .get(fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION)
        .map(String::as_str);
    ProviderAddress::with_optional_fingerprint(address.clone(), annotation).map_err(|e| {
        RearError::Invalid {
            address: address.clone(),
            message: format!(
                "Contract {} has a malformed annotation {}: {e}",
                contract.name_any(),
                fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION
            ),
        }
    })
}

/// Asks the seller of `contract` how to reach its service, proving the
/// purchase with the contract's transaction ID.
async fn fetch(ctx: &Ctx, contract: &Contract) -> Result<ServiceAccess, RearError> {
    let seller = seller_address(contract)?;
    ctx.rear
        .service_access(
            &seller,
            &contract.name_any(),
            &ctx.cfg.identity.node_id,
            &contract.spec.transaction_id,
        )
        .await
}

#[tracing::instrument(skip_all, fields(allocation = %cached.name_any()))]
async fn reconcile(cached: Arc<Allocation>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = cached
        .namespace()
        .unwrap_or_else(|| ctx.cfg.namespace.clone());
    let api: Api<Allocation> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(allocation) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(Error::kube(Step::ReadAllocation))?
        // Provider-side Allocations are the provider controller's.
        .filter(|a| !crate::is_provider_side(a))
    else {
        return Ok(Action::await_change());
    };
    let Some(contract_ref) = allocation.spec.contract.clone() else {
        return Ok(Action::await_change());
    };
    let contract_name = contract_ref.name.clone().unwrap_or_default();
    let contract = Api::<Contract>::namespaced(
        ctx.client.clone(),
        contract_ref.namespace.as_deref().unwrap_or(&ns),
    )
    .get_opt(&contract_name)
    .await
    .map_err(Error::kube(Step::ReadContract))?;
    let ours = allocation
        .finalizers()
        .iter()
        .any(|f| f == CONSUMER_FINALIZER);
    match &contract {
        Some(c) if !is_ours(c, &ctx.cfg.identity) => return Ok(Action::await_change()),
        None if !ours => return Ok(Action::await_change()),
        _ => {}
    }
    if let Some(c) = contract.as_ref().filter(|c| {
        service_delivery::by_liqo(&c.spec)
            && c.labels().contains_key(service_delivery::DELIVERY_LABEL)
    }) {
        return offloaded(&ctx, &api, &allocation, c).await;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret = secrets
        .get_opt(&machine::secret_name(&contract_name))
        .await
        .map_err(Error::kube(Step::ReadSecret))?;
    let fetched = match &contract {
        Some(c) if machine::needs_fetch(&allocation, true) => Some(fetch(&ctx, c).await),
        _ => None,
    };
    let plan = machine::plan(&Input {
        allocation: &allocation,
        contract_name: &contract_name,
        contract_exists: contract.is_some(),
        secret: secret.as_ref(),
        fetched: fetched.as_ref(),
        now: fluidos_controller::time::now_string(),
    });
    let name = allocation.name_any();
    let (rv, removed) = execute(
        &ctx,
        &api,
        &secrets,
        &allocation,
        &contract_name,
        plan.effects,
    )
    .await?;
    if !removed && allocation.status.as_ref() != Some(&plan.status) {
        crate::save_status(&api, &name, rv.as_deref(), &plan.status).await?;
    }
    Ok(plan.next.action())
}

/// Makes the plan's writes in order; returns the resourceVersion to write
/// the status with and whether the finalizer was removed.
async fn execute(
    ctx: &Ctx,
    api: &Api<Allocation>,
    secrets: &Api<Secret>,
    allocation: &Allocation,
    contract_name: &str,
    effects: Vec<Effect>,
) -> Result<(Option<String>, bool), Error> {
    let name = allocation.name_any();
    let mut rv = allocation.resource_version();
    let mut removed = false;
    for effect in effects {
        match effect {
            Effect::AddFinalizer => {
                rv = crate::write_finalizers(
                    api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(allocation, CONSUMER_FINALIZER, true),
                )
                .await?;
            }
            Effect::RemoveFinalizer => {
                crate::write_finalizers(
                    api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(allocation, CONSUMER_FINALIZER, false),
                )
                .await?;
                removed = true;
            }
            Effect::ApplySecret(s) => {
                secrets
                    .patch(
                        &machine::secret_name(contract_name),
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&s),
                    )
                    .await
                    .map_err(Error::kube(Step::ApplySecret))?;
            }
            Effect::DeleteSecret(s) => {
                ok_if_not_found(secrets.delete(&s, &DeleteParams::default()).await)
                    .map_err(Error::kube(Step::DeleteSecret))?;
            }
            Effect::Event {
                warning,
                reason,
                note,
            } => crate::publish(&ctx.recorder, allocation, warning, reason, note).await,
        }
    }
    Ok((rv, removed))
}

/// The buyer's Allocation of a Service the seller delivers by Liqo: its
/// status follows the credentials Secret Liqo reflects into the namespace
/// named after the Contract (watched, by its label).
async fn offloaded(
    ctx: &Ctx,
    api: &Api<Allocation>,
    allocation: &Allocation,
    contract: &Contract,
) -> Result<Action, Error> {
    let name = contract.name_any();
    let seller_key = contract
        .annotations()
        .get(fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION);
    let seller_cluster = &contract.spec.peering_target_credentials.liqo_id;
    let live = !contract
        .spec
        .expiration_time
        .as_deref()
        .is_some_and(fluidos_controller::time::is_past);
    // Still delivering: this node's label says so until the delivery ends.
    let delivering = live && service_delivery::bought_by_liqo(contract);
    if let (Some(issue), Some(key)) = (&ctx.cfg.offloading, seller_key)
        && delivering
        && !seller_cluster.is_empty()
        && allocation.metadata.deletion_timestamp.is_none()
    {
        // The seller's rights in its tenant namespace here (its account was
        // made at the purchase); free once in place (watch caches).
        issue(OffloadingGrant {
            seller_node_id: service_delivery::seller_node_id(contract).to_owned(),
            seller_key: key.clone(),
            seller_cluster_id: Some(seller_cluster.clone()),
        })
        .await
        .map_err(|message| Error::Object {
            step: Step::Offload,
            message,
        })?;
    }
    let namespace_exists = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&name)
        .await
        .map_err(Error::kube(Step::ReadSecret))?
        // Liqo's, for this seller (not any namespace of that name); being
        // deleted: the seller's Liqo is taking it back.
        .is_some_and(|n| {
            n.metadata.deletion_timestamp.is_none() && machine::offloaded_by(&n, seller_cluster)
        });
    let listed = Api::<Secret>::namespaced(ctx.client.clone(), &name)
        .list(
            &ListParams::default().labels(&format!("{}=true", service_delivery::CREDENTIALS_LABEL)),
        )
        .await
        .map_err(Error::kube(Step::ReadSecret))?
        .items;
    let status = machine::offloaded_status(
        allocation.status.as_ref(),
        &name,
        delivering,
        namespace_exists,
        namespace_exists
            .then(|| machine::reflected_credentials(&listed, &name, seller_cluster))
            .flatten(),
        &fluidos_controller::time::now_string(),
    );
    if allocation.status.as_ref() != Some(&status) {
        if status.status == Some(fluidos_api::allocation::AllocationState::Active) {
            crate::publish(
                &ctx.recorder,
                allocation,
                false,
                "ServiceReady",
                format!("credentials reflected by Liqo into namespace {name}"),
            )
            .await;
        }
        crate::save_status(
            api,
            &allocation.name_any(),
            allocation.resource_version().as_deref(),
            &status,
        )
        .await?;
    }
    if status.status == Some(fluidos_api::allocation::AllocationState::Released)
        && service_delivery::bought_by_liqo(contract)
    {
        // Ended: the seller's account, slice and Tenant here are kept no
        // longer (they key on this label), even if the Contract stays.
        let patch = serde_json::json!({"metadata": {"labels": {
            service_delivery::DELIVERY_LABEL: service_delivery::ENDED,
        }}});
        Api::<Contract>::namespaced(
            ctx.client.clone(),
            &contract.namespace().unwrap_or_default(),
        )
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(Error::kube(Step::Offload))?;
    }
    // The Secret's watch wakes it; a namespace is not watched, so a
    // delivery still waited for is looked at again now and then.
    Ok(match status.status {
        Some(
            fluidos_api::allocation::AllocationState::Active
            | fluidos_api::allocation::AllocationState::Released,
        ) => Action::await_change(),
        _ => Action::requeue(std::time::Duration::from_secs(10)),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn contract(fingerprint: Option<&str>) -> Contract {
        let identity = json!({"domain": "d", "nodeID": "p", "ip": "10.0.0.1:30000"});
        let mut c = json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "contract-x", "namespace": "fluidos"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": "Service", "typeData": {}},
                    "owner": identity, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t", "buyer": identity, "buyerClusterID": "b",
                "seller": identity,
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}});
        if let Some(fp) = fingerprint {
            c["metadata"]["annotations"] =
                json!({fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION: fp});
        }
        serde_json::from_value(c).unwrap()
    }

    #[test]
    fn the_seller_is_pinned_when_the_contract_names_its_key() {
        assert_eq!(
            seller_address(&contract(None)).unwrap(),
            ProviderAddress::plain("10.0.0.1:30000")
        );
        assert_eq!(
            seller_address(&contract(Some(FP))).unwrap(),
            ProviderAddress::pinned("10.0.0.1:30000", FP.parse().unwrap())
        );
        let e = seller_address(&contract(Some("sha256:nope"))).unwrap_err();
        assert!(matches!(e, RearError::Invalid { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains(
                "Contract contract-x has a malformed annotation fluidos.eu/provider-fingerprint"
            ),
            "{text}"
        );
        assert!(text.contains("expected sha256:"), "{text}");
    }
}

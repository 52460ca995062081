//! Consumer side: the buyer's Allocation of a Service Contract gets the
//! service's endpoints and credentials from the provider over REAR and
//! keeps them in the Secret `credentials-<contract>` next to it.

pub mod machine;

use std::future::Future;
use std::sync::Arc;

use fluidos_api::rear::ServiceAccess;
use fluidos_api::{Allocation, Contract, NodeIdentity};
use fluidos_controller::api_error::ok_if_not_found;
use fluidos_controller::{Metrics, ReadinessGate, Reconciler};
use fluidos_rear_client::{ClientConfig, NodeKey, ProviderAddress, RearClient, RearError};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::{CONSUMER_FINALIZER, Error, MANAGER, Step};
use machine::{Effect, Input};

/// Controller name in logs and metrics.
pub const CONTROLLER: &str = "service-allocation-consumer";

/// What the consumer controller needs to know.
#[derive(Clone, Debug)]
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
    let controller = Controller::for_stream(objects, store)
        .owns(
            Api::<Secret>::namespaced(client, &cfg.namespace),
            watcher::Config::default().labels(fluidos_blueprint::CONTRACT_LABEL),
        )
        .graceful_shutdown_on(shutdown);
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
    let mut rv = allocation.resource_version();
    let mut removed = false;
    for effect in plan.effects {
        match effect {
            Effect::AddFinalizer => {
                rv = crate::write_finalizers(
                    &api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(&allocation, CONSUMER_FINALIZER, true),
                )
                .await?;
            }
            Effect::RemoveFinalizer => {
                crate::write_finalizers(
                    &api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(&allocation, CONSUMER_FINALIZER, false),
                )
                .await?;
                removed = true;
            }
            Effect::ApplySecret(s) => {
                secrets
                    .patch(
                        &machine::secret_name(&contract_name),
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
            } => crate::publish(&ctx.recorder, &allocation, warning, reason, note).await,
        }
    }
    if !removed && allocation.status.as_ref() != Some(&plan.status) {
        crate::save_status(&api, &name, rv.as_deref(), &plan.status).await?;
    }
    Ok(plan.next.action())
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

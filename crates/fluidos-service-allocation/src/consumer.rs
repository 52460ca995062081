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
use fluidos_rear_client::{ClientConfig, RearClient, RearError};
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
    let rear = RearClient::new(cfg.rear.clone()).map_err(|e| Error::Object {
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

/// Asks the seller of `contract` how to reach its service, proving the
/// purchase with the contract's transaction ID.
async fn fetch(ctx: &Ctx, contract: &Contract) -> Result<ServiceAccess, RearError> {
    ctx.rear
        .service_access(
            &contract.spec.seller.ip,
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

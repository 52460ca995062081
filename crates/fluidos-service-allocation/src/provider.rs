//! Provider side: instantiates, exposes and watches the service of a Service
//! Contract sold by this node, on the provider's Allocation.

pub mod machine;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::common::HostingPolicy;
use fluidos_api::{Allocation, Contract, Flavor, NodeIdentity, ServiceBlueprint};
use fluidos_blueprint::{
    CONTRACT_LABEL, ENDPOINT_LABEL, OsRandom, RandomSource, RandomUnavailable,
};
use fluidos_controller::api_error::ok_if_not_found;
use fluidos_controller::{Metrics, ReadinessGate, Reconciler};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::exposure::{Exposure, host_of};
use crate::offloading;
use crate::prepare::{self, PrepareError};
use crate::{EXTERNAL_ENDPOINTS_ANNOTATION, Error, MANAGER, PROVIDER_FINALIZER, Step};
use machine::{Effect, Input, Observed};

/// Controller name in logs and metrics.
pub const CONTROLLER: &str = "service-allocation-provider";

/// What the provider controller needs to know.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// Namespace of Allocations, Contracts, Flavors and ServiceBlueprints.
    pub namespace: String,
    /// This node (the seller of the contracts it handles).
    pub identity: NodeIdentity,
    /// How endpoint Services are exposed.
    pub exposure: Exposure,
    /// Longest wait for a service namespace to go.
    pub teardown_timeout: Duration,
}

impl ProviderConfig {
    /// NodePort exposure, default teardown timeout.
    pub fn new(namespace: impl Into<String>, identity: NodeIdentity) -> Self {
        ProviderConfig {
            namespace: namespace.into(),
            identity,
            exposure: Exposure::default(),
            teardown_timeout: crate::DEFAULT_TEARDOWN_TIMEOUT,
        }
    }
}

struct Ctx {
    client: kube::Client,
    cfg: ProviderConfig,
    recorder: kube::runtime::events::Recorder,
    reconciler: Reconciler,
}

/// The Allocations (in `store`) of contract `contract`.
fn allocations_of(
    store: &Store<Allocation>,
    contract: Option<&String>,
) -> Vec<ObjectRef<Allocation>> {
    let Some(contract) = contract else {
        return Vec::new();
    };
    store
        .state()
        .iter()
        .filter(|a| a.spec.contract.as_ref().and_then(|c| c.name.as_ref()) == Some(contract))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Runs the provider controller until `shutdown`; `ready` opens once the Allocation watch has listed.
pub async fn run(
    client: kube::Client,
    cfg: ProviderConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let allocations: Api<Allocation> = Api::namespaced(client.clone(), &cfg.namespace);
    let (store, objects) = crate::watched(allocations, ready);
    let labelled = watcher::Config::default().labels(CONTRACT_LABEL);
    let (s1, s2, s3, s4) = (store.clone(), store.clone(), store.clone(), store.clone());
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let ctx = Arc::new(Ctx {
        recorder: fluidos_controller::events::recorder(client.clone(), MANAGER),
        client: client.clone(),
        cfg,
        reconciler: reconciler.clone(),
    });
    let controller = Controller::for_stream(objects, store)
        .watches(
            Api::<Deployment>::all(client.clone()),
            labelled.clone(),
            move |d| allocations_of(&s1, d.labels().get(CONTRACT_LABEL)),
        )
        .watches(
            Api::<StatefulSet>::all(client.clone()),
            labelled.clone(),
            move |s| allocations_of(&s2, s.labels().get(CONTRACT_LABEL)),
        )
        .watches(Api::<Namespace>::all(client.clone()), labelled, move |n| {
            allocations_of(&s3, n.labels().get(CONTRACT_LABEL))
        })
        // The gateway creates a sale's Contract and Allocation concurrently:
        // an Allocation first seen without its Contract is looked at again
        // when the Contract appears.
        .watches(
            Api::<Contract>::namespaced(client, &ctx.cfg.namespace),
            watcher::Config::default(),
            move |c| allocations_of(&s4, Some(&c.name_any())),
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
}

/// Why a contract is (not) ours to allocate.
enum Ours {
    /// A Service contract sold by this node.
    Service(
        Box<Contract>,
        Option<Result<fluidos_api::flavor::ServiceFlavor, PrepareError>>,
    ),
    /// The contract is gone, and the Allocation carries our finalizer.
    Ended,
    /// Not ours (another seller, another flavor type, never handled).
    No,
}

fn is_seller(contract: &Contract, me: &NodeIdentity) -> bool {
    contract.spec.seller.node_id == me.node_id && contract.spec.seller.domain == me.domain
}

async fn classify(ctx: &Ctx, allocation: &Allocation, contract_name: &str) -> Result<Ours, Error> {
    let ns = allocation
        .spec
        .contract
        .as_ref()
        .and_then(|c| c.namespace.clone())
        .unwrap_or_else(|| ctx.cfg.namespace.clone());
    let contract = Api::<Contract>::namespaced(ctx.client.clone(), &ns)
        .get_opt(contract_name)
        .await
        .map_err(Error::kube(Step::ReadContract))?;
    let ours = allocation
        .finalizers()
        .iter()
        .any(|f| f == PROVIDER_FINALIZER);
    Ok(match contract {
        None if ours => Ours::Ended,
        None => Ours::No,
        Some(c) if !is_seller(&c, &ctx.cfg.identity) => Ours::No,
        Some(c) => match prepare::service_flavor(&c) {
            Ok(None) => Ours::No,
            Ok(Some(f)) => Ours::Service(Box::new(c), Some(Ok(f))),
            Err(e) => Ours::Service(Box::new(c), Some(Err(e))),
        },
    })
}

/// The blueprint of the contract's flavor: named by the LRM's label, else
/// the live Flavor's owner.
async fn blueprint(ctx: &Ctx, contract: &Contract) -> Result<Option<ServiceBlueprint>, Error> {
    let ns = &ctx.cfg.namespace;
    let name = match prepare::blueprint_name(contract) {
        Some(n) => Some(n.to_owned()),
        None => Api::<Flavor>::namespaced(ctx.client.clone(), ns)
            .get_opt(contract.spec.flavor.id())
            .await
            .map_err(Error::kube(Step::ReadBlueprint))?
            .and_then(|f| {
                f.owner_references()
                    .iter()
                    .find(|o| o.kind == "ServiceBlueprint")
                    .map(|o| o.name.clone())
            }),
    };
    let Some(name) = name else {
        return Ok(None);
    };
    Api::<ServiceBlueprint>::namespaced(ctx.client.clone(), ns)
        .get_opt(&name)
        .await
        .map_err(Error::kube(Step::ReadBlueprint))
}

async fn observe(ctx: &Ctx, ns: &str) -> Result<Observed, Error> {
    let c = &ctx.client;
    let e = Error::kube(Step::ObserveService);
    let Some(namespace) = Api::<Namespace>::all(c.clone())
        .get_opt(ns)
        .await
        .map_err(e)?
    else {
        return Ok(Observed::default());
    };
    let all = ListParams::default();
    let endpoint = ListParams::default().labels(&format!("{ENDPOINT_LABEL}=true"));
    let (svc, sec, dep, sts, pod) = (
        Api::<Service>::namespaced(c.clone(), ns),
        Api::<Secret>::namespaced(c.clone(), ns),
        Api::<Deployment>::namespaced(c.clone(), ns),
        Api::<StatefulSet>::namespaced(c.clone(), ns),
        Api::<Pod>::namespaced(c.clone(), ns),
    );
    let secret_name = fluidos_api::naming::credentials_secret_name(ns);
    let (services, credentials, random, deployments, statefulsets, pods) = tokio::join!(
        svc.list(&endpoint),
        sec.get_opt(&secret_name),
        sec.get_opt(machine::RANDOM_SECRET),
        dep.list(&all),
        sts.list(&all),
        pod.list(&all),
    );
    let e = || Error::kube(Step::ObserveService);
    Ok(Observed {
        endpoint_service: machine::chosen_endpoint(&namespace, services.map_err(e())?.items),
        namespace: Some(namespace),
        credentials: credentials.map_err(e())?,
        random: random.map_err(e())?,
        deployments: deployments.map_err(e())?.items,
        statefulsets: statefulsets.map_err(e())?.items,
        pods: pods.map_err(e())?.items,
    })
}

#[tracing::instrument(skip_all, fields(allocation = %cached.name_any()))]
async fn reconcile(cached: Arc<Allocation>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<Allocation> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let Some(allocation) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(Error::kube(Step::ReadAllocation))?
    else {
        return Ok(Action::await_change());
    };
    // Only the Allocations the REAR gateway made for a sale: the buyer's
    // are the consumer controller's.
    let (true, Some(contract_name)) = (
        crate::is_provider_side(&allocation),
        allocation
            .spec
            .contract
            .as_ref()
            .and_then(|c| c.name.clone()),
    ) else {
        return Ok(Action::await_change());
    };
    let (contract, flavor) = match classify(&ctx, &allocation, &contract_name).await? {
        Ours::No => return Ok(Action::await_change()),
        Ours::Ended => (None, None),
        Ours::Service(c, f) => (Some(c), f),
    };
    let observed = observe(&ctx, &contract_name).await?;
    // A render retried (after a failed status write, a crash) replays the
    // random bytes recorded by the first one: same passwords.
    let replay =
        machine::replayed_random(&observed, &contract_name, &machine::owner_of(&allocation));
    let drawn = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut hosting_policy = HostingPolicy::Provider;
    let prepared = match (&contract, flavor) {
        (Some(c), Some(f)) if machine::needs_instance(&allocation, true, &observed) => {
            Some(match f {
                Err(e) => Err(e),
                Ok(f) => {
                    let bp = blueprint(&ctx, c).await?;
                    hosting_policy = hosting_policy_of(c, bp.as_ref());
                    let random = Replay::new(replay, drawn.clone());
                    prepare_bounded(c, f, bp, random).await
                }
            })
        }
        _ => None,
    };
    let random_drawn = drawn.lock().map(|d| d.clone()).unwrap_or_default();
    let node_host = host_of(&ctx.cfg.identity.ip).to_owned();
    let plan = machine::plan(
        &Input {
            allocation: &allocation,
            contract_name: &contract_name,
            contract_exists: contract.is_some(),
            prepared: prepared.as_ref(),
            hosting_policy,
            offloaded: contract.as_deref().is_some_and(offloading::by_liqo),
            random_drawn: &random_drawn,
            exposure: &ctx.cfg.exposure,
            node_host: &node_host,
            teardown_timeout: ctx.cfg.teardown_timeout,
            deleting_for: allocation
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(crate::seconds_since),
            now: fluidos_controller::time::now_string(),
        },
        &observed,
    );
    let done = execute(&ctx, &api, &allocation, &contract_name, plan.effects).await?;
    let refused = done.refused.is_some();
    let (status, next) = match done.refused {
        Some(message) => (
            fluidos_api::allocation::AllocationStatus {
                status: Some(fluidos_api::allocation::AllocationState::Error),
                message: Some(message),
                last_update_time: Some(fluidos_controller::time::now_string()),
                ..plan.status
            },
            crate::Next::AwaitChange,
        ),
        None => (plan.status, plan.next),
    };
    if !done.removed && allocation.status.as_ref() != Some(&status) {
        crate::save_status(
            &api,
            &allocation.name_any(),
            done.resource_version.as_deref(),
            &status,
        )
        .await?;
    }
    // After the status: a failure here is retried, and never keeps the
    // service's own state from being said.
    if let Some(c) = contract.as_deref()
        && allocation.metadata.deletion_timestamp.is_none()
        && !refused
        && !done.removed
        && offload(&ctx, c, observed.namespace.as_ref()).await? == Offload::Pending
    {
        // Nothing watched here says when the reverse peering is up.
        return Ok(crate::Next::Requeue(machine::RECHECK).action());
    }
    Ok(next.action())
}

/// Where the service's pods run: delivered by Liqo, the Contract's policy
/// (the one the NamespaceOffloading and both sides' slice follow); else
/// the provider's reading, which falls back on the blueprint.
fn hosting_policy_of(contract: &Contract, blueprint: Option<&ServiceBlueprint>) -> HostingPolicy {
    if offloading::by_liqo(contract) {
        fluidos_api::service_delivery::hosting_policy(&contract.spec)
    } else {
        prepare::hosting_policy(contract, blueprint)
    }
}

/// Where a delivery by Liqo stands, for the controller.
#[derive(Debug, PartialEq, Eq)]
enum Offload {
    /// Nothing (more) to do: not delivered by Liqo, ended, or offloaded.
    Done,
    /// Waiting for the service namespace or the reverse peering.
    Pending,
}

/// Delivery by Liqo: the companion Allocation that peers with the buyer,
/// and once the service namespace exists (and is not going) and that
/// peering is up (the companion `Active`: this buyer's key, not whichever
/// cluster answers to the ID it gave), its NamespaceOffloading; both
/// create-or-adopt.
async fn offload(
    ctx: &Ctx,
    contract: &Contract,
    namespace: Option<&Namespace>,
) -> Result<Offload, Error> {
    let ended = contract
        .spec
        .expiration_time
        .as_deref()
        .is_some_and(fluidos_controller::time::is_past);
    if !offloading::by_liqo(contract) || ended {
        return Ok(Offload::Done);
    }
    let e = || Error::kube(Step::Offload);
    let Some(companion) = offloading::companion_allocation(contract) else {
        return Ok(Offload::Pending);
    };
    let allocations = Api::<Allocation>::namespaced(
        ctx.client.clone(),
        &companion
            .namespace()
            .unwrap_or_else(|| ctx.cfg.namespace.clone()),
    );
    let live = match allocations
        .get_opt(&companion.name_any())
        .await
        .map_err(e())?
    {
        Some(live) => live,
        None => {
            ok_if_exists(allocations.create(&PostParams::default(), &companion).await)
                .map_err(e())?;
            return Ok(Offload::Pending);
        }
    };
    let peered = live.status.as_ref().and_then(|s| s.status.as_ref())
        == Some(&fluidos_api::allocation::AllocationState::Active);
    let Some(ns) = namespace.filter(|n| n.metadata.deletion_timestamp.is_none()) else {
        return Ok(Offload::Pending);
    };
    let ns = ns.name_any();
    let api = Api::<DynamicObject>::namespaced_with(
        ctx.client.clone(),
        &ns,
        &offloading::namespace_offloading_resource(),
    );
    if api
        .get_opt(fluidos_api::service_delivery::OFFLOADING_NAME)
        .await
        .map_err(e())?
        .is_some()
    {
        return Ok(Offload::Done);
    }
    if !peered {
        return Ok(Offload::Pending);
    }
    let policy = fluidos_api::service_delivery::hosting_policy(&contract.spec);
    let offloading = offloading::namespace_offloading(&ns, &contract.spec.buyer_cluster_id, policy);
    tracing::info!(
        namespace = %ns,
        buyer = %contract.spec.buyer_cluster_id,
        hosting_policy = ?policy,
        "offloading the service namespace to the buyer"
    );
    ok_if_exists(api.create(&PostParams::default(), &offloading).await).map_err(e())?;
    Ok(Offload::Done)
}

/// `Ok` for an object that exists already (create-or-adopt).
fn ok_if_exists<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if fluidos_controller::api_error::is_already_exists(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the writes in order; returns whether the finalizer was removed
/// (the Allocation may then be gone) and the resourceVersion to write the
/// status with.
async fn execute(
    ctx: &Ctx,
    api: &Api<Allocation>,
    allocation: &Allocation,
    contract_name: &str,
    effects: Vec<Effect>,
) -> Result<Executed, Error> {
    let name = allocation.name_any();
    let mut rv = allocation.resource_version();
    let mut removed = false;
    let mut refused = None;
    for effect in effects {
        match effect {
            Effect::AddFinalizer => {
                rv = crate::write_finalizers(
                    api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(allocation, PROVIDER_FINALIZER, true),
                )
                .await?;
            }
            Effect::RemoveFinalizer => {
                crate::write_finalizers(
                    api,
                    &name,
                    rv.as_deref(),
                    crate::finalizers_with(allocation, PROVIDER_FINALIZER, false),
                )
                .await?;
                removed = true;
            }
            Effect::Apply(objects) => {
                if let Some(why) = apply_all(&ctx.client, &objects).await? {
                    // Nothing half-made is left: the namespace is this
                    // Allocation's (the plan applies only over its own).
                    ok_if_not_found(
                        Api::<Namespace>::all(ctx.client.clone())
                            .delete(contract_name, &DeleteParams::background())
                            .await,
                    )
                    .map_err(Error::kube(Step::DeleteNamespace))?;
                    let message = format!("Error when applying the service's objects: {why}");
                    crate::publish(
                        &ctx.recorder,
                        allocation,
                        true,
                        "AllocationFailed",
                        message.clone(),
                    )
                    .await;
                    refused = Some(message);
                    break;
                }
            }
            Effect::AnnotateCredentials(endpoints) => {
                Api::<Secret>::namespaced(ctx.client.clone(), contract_name)
                    .patch(
                        &fluidos_api::naming::credentials_secret_name(contract_name),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {EXTERNAL_ENDPOINTS_ANNOTATION: endpoints}}})),
                    )
                    .await
                    .map_err(Error::kube(Step::AnnotateCredentials))?;
            }
            Effect::ReportState { state, message } => {
                Api::<Secret>::namespaced(ctx.client.clone(), contract_name)
                    .patch(
                        &fluidos_api::naming::credentials_secret_name(contract_name),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {
                            fluidos_api::service_delivery::SERVICE_STATE_ANNOTATION: state,
                            fluidos_api::service_delivery::SERVICE_MESSAGE_ANNOTATION: message,
                        }}})),
                    )
                    .await
                    .map_err(Error::kube(Step::AnnotateCredentials))?;
            }
            Effect::DeleteNamespace(ns) => {
                tracing::info!(namespace = ns, "deleting the service namespace");
                ok_if_not_found(
                    Api::<Namespace>::all(ctx.client.clone())
                        .delete(&ns, &DeleteParams::background())
                        .await,
                )
                .map_err(Error::kube(Step::DeleteNamespace))?;
            }
            Effect::Event {
                warning,
                reason,
                note,
            } => crate::publish(&ctx.recorder, allocation, warning, reason, note).await,
        }
    }
    Ok(Executed {
        removed,
        resource_version: rv,
        refused,
    })
}

/// What [`execute`] did.
struct Executed {
    /// The finalizer was removed (the Allocation may be gone).
    removed: bool,
    /// The resourceVersion to write the status with.
    resource_version: Option<String>,
    /// The API server refused an object for good: the Error message (the
    /// effects after it were not made).
    refused: Option<String>,
}

/// The random source of a render: replays `replay` first, then draws from
/// the OS; records everything it gives in `drawn` (to be kept).
struct Replay {
    replay: Vec<u8>,
    next: usize,
    drawn: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Replay {
    fn new(replay: Vec<u8>, drawn: Arc<std::sync::Mutex<Vec<u8>>>) -> Self {
        Replay {
            replay,
            next: 0,
            drawn,
        }
    }
}

impl RandomSource for Replay {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        let from_replay = buf.len().min(self.replay.len() - self.next);
        let (old, fresh) = buf.split_at_mut(from_replay);
        old.copy_from_slice(&self.replay[self.next..self.next + from_replay]);
        self.next += from_replay;
        if !fresh.is_empty() {
            OsRandom.fill(fresh)?;
        }
        self.drawn
            .lock()
            .map_err(|e| RandomUnavailable(e.to_string()))?
            .extend_from_slice(buf);
        Ok(())
    }
}

/// Longest a blueprint may take to render.
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(10);

/// [`prepare::prepare`] on a blocking thread, given up after
/// [`RENDER_TIMEOUT`]: a template the engine cannot finish must end the
/// Allocation in Error, not hold a runtime worker forever.
async fn prepare_bounded(
    contract: &Contract,
    flavor: fluidos_api::flavor::ServiceFlavor,
    blueprint: Option<ServiceBlueprint>,
    random: Replay,
) -> Result<fluidos_blueprint::ServiceInstance, PrepareError> {
    let name = blueprint
        .as_ref()
        .and_then(|b| b.metadata.name.clone())
        .unwrap_or_default();
    let contract = contract.clone();
    let work = tokio::task::spawn_blocking(move || {
        prepare::prepare(&contract, &flavor, blueprint.as_ref(), random)
    });
    match tokio::time::timeout(RENDER_TIMEOUT, work).await {
        Ok(Ok(prepared)) => prepared,
        Ok(Err(join)) => Err(PrepareError::RenderPanicked(name, join.to_string())),
        Err(_) => {
            tracing::error!(
                blueprint = name,
                "rendering did not finish; its thread is left running"
            );
            Err(PrepareError::RenderTimeout(name, RENDER_TIMEOUT.as_secs()))
        }
    }
}

/// The API of a rendered object (its namespace when it has one).
fn dynamic_api(
    client: &kube::Client,
    object: &Value,
) -> Result<(Api<DynamicObject>, String), Error> {
    let bad = |m: &str| Error::Object {
        step: Step::ApplyObjects,
        message: m.to_owned(),
    };
    let api_version = object["apiVersion"]
        .as_str()
        .ok_or_else(|| bad("object without apiVersion"))?;
    let kind = object["kind"]
        .as_str()
        .ok_or_else(|| bad("object without kind"))?;
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("object without metadata.name"))?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api = match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    Ok((api, name.to_owned()))
}

/// Server-side applies `objects` in order (create-or-adopt: forced, our
/// field manager). `Ok(Some(why))` when the API server refuses an object
/// for good (see [`refused_for_good`]): applying again would fail the same.
async fn apply_all(client: &kube::Client, objects: &[Value]) -> Result<Option<String>, Error> {
    let params = PatchParams::apply(MANAGER).force();
    for object in objects {
        let (api, name) = match dynamic_api(client, object) {
            Ok(found) => found,
            Err(Error::Object { message, .. }) => return Ok(Some(message)),
            Err(e) => return Err(e),
        };
        match api.patch(&name, &params, &Patch::Apply(object)).await {
            Ok(_) => {}
            Err(e) if refused_for_good(&e) => {
                let kind = object["kind"].as_str().unwrap_or("object");
                return Ok(Some(format!(
                    "the API server refused {kind} {name}: {}",
                    fluidos_controller::reconcile::error_chain(&e)
                )));
            }
            Err(e) => return Err(Error::kube(Step::ApplyObjects)(e)),
        }
    }
    Ok(None)
}

/// An apply the API server will refuse again however often it is retried:
/// invalid (400, 422). A 404 is not counted: besides a kind it does not
/// serve it is also a namespace finishing its deletion, which a retry
/// gets past. Conflicts, throttling and server errors are retried.
fn refused_for_good(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if matches!(s.code, 400 | 422))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_render_retried_replays_the_recorded_bytes_then_draws_fresh_ones() {
        let first = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut r = Replay::new(Vec::new(), first.clone());
        let mut a = [0u8; 48];
        r.fill(&mut a[..16]).unwrap();
        r.fill(&mut a[16..]).unwrap();
        assert_eq!(
            *first.lock().unwrap(),
            a.to_vec(),
            "everything drawn recorded"
        );

        let again = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut r = Replay::new(a.to_vec(), again.clone());
        let mut b = [0u8; 64];
        r.fill(&mut b[..40]).unwrap();
        r.fill(&mut b[40..]).unwrap();
        assert_eq!(b[..48], a, "the recorded bytes first, across calls");
        assert_eq!(*again.lock().unwrap(), b.to_vec());
    }
}

//! The Allocation controller for K8Slice Contracts, both sides.
//!
//! Consumer: peers with the Contract's provider through Liqo as `liqoctl
//! peer` does, with networking (`--liqo-networking`, `allocation/networking.rs`) or
//! without, as `--networking-disabled` (see [`crate::objects`]):
//! authentication with the Contract's kubeconfig (nonce, signed nonce,
//! Tenant, control-plane Identity), then a ResourceSlice named after the
//! Contract carrying exactly the contracted resources, then the wait for the
//! virtual Node. Every write is create-or-adopt and every decision is taken
//! from the objects as they are now, so a retry or a restart anywhere
//! resumes where the peering stands. Local progress is watched (Secrets,
//! Identities, ResourceSlices, Nodes, ForeignClusters); the provider is not
//! watched, so while waiting on it the Allocation is looked at again every
//! [`REMOTE_POLL`].
//!
//! Provider: follows the buyer's ForeignCluster (Go §3.7) to `Active` once
//! the buyer authenticated.
//!
//! Allocations of other flavor types (Service) are left alone.

pub mod machine;
mod networking;
pub mod teardown;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::allocation::AllocationStatus;
use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::peering_credentials::{self, KubeconfigSource};
use fluidos_api::service_delivery;
use fluidos_api::{Allocation, Contract, GenericRef, NodeIdentity};
use fluidos_controller::api_error;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::{Metrics, ReconcileError, Reconciler};
use fluidos_liqo_api::generated::foreign_cluster::{
    ForeignClusterStatusModulesAuthenticationConditionsStatus as FcStatus,
    ForeignClusterStatusModulesAuthenticationConditionsType as FcType,
};
use fluidos_liqo_api::generated::resource_slice::{
    ResourceSliceStatusConditionsStatus, ResourceSliceStatusConditionsType,
};
use fluidos_liqo_api::{ForeignCluster, ForeignClusterStatusRole, Identity, ResourceSlice, Tenant};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;

use crate::network_objects::GatewayServiceType;
use crate::objects::{self, BuildError, ClusterKeys, TenantGrant};
use crate::slice_class;
use machine::{
    ConsumerView, Effect, IncomingPeering, ObjectVersion, Plan, Remote, Side, SignedNonce, Verdict,
    Wait,
};
use teardown::{OtherSlices, TeardownEffect, TeardownView};

/// Controller name in logs and metrics.
const CONTROLLER: &str = "allocation-k8slice";
/// How soon an Allocation waiting on the provider is looked at again; after
/// [`machine::SLOW_WAIT_SECS`] on the same step, [`REMOTE_POLL_SLOW`].
pub const REMOTE_POLL: Duration = Duration::from_millis(250);
/// How soon an Allocation that has waited long on the provider is looked at
/// again (a LoadBalancer address, a gateway that does not connect): about
/// fifteen reads a second at [`REMOTE_POLL`] would go on for minutes.
pub const REMOTE_POLL_SLOW: Duration = Duration::from_secs(5);
/// Safety net while waiting on a watched local object.
const LOCAL_RECHECK: Duration = Duration::from_secs(30);

/// What the controller needs to know about this node.
#[derive(Clone, Debug)]
pub struct PeeringConfig {
    /// Namespace of Allocations and Contracts.
    pub namespace: String,
    /// This node's identity (to tell provider from consumer).
    pub identity: NodeIdentity,
    /// This cluster's Liqo cluster ID.
    pub local_cluster_id: String,
    /// Liqo's networking phase before authentication; `None` peers as
    /// `liqoctl peer --networking-disabled`.
    pub networking: Option<NetworkingConfig>,
    /// Where the watches of Liqo's kinds say which are not served.
    pub liqo: crate::liqo_watch::LiqoPresence,
}

/// The consumer's settings for Liqo's networking phase.
#[derive(Clone, Debug)]
pub struct NetworkingConfig {
    /// Service type of the GatewayServer the consumer creates on the provider.
    pub server_service_type: GatewayServiceType,
}

/// One reconcile's failure: one variant per step, keeping the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call on this cluster failed.
    #[error("{step}: {source}")]
    Local {
        /// The step.
        step: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An API call on the provider, with the Contract's credentials, failed.
    #[error("{step} (on the provider): {source}")]
    Remote {
        /// The step.
        step: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Tenant could not be built from the cluster's keys.
    #[error("building the Tenant: {0}")]
    Build(#[source] BuildError),
}

impl ReconcileError for Error {
    fn step(&self) -> &'static str {
        match self {
            Error::Local { step, .. } | Error::Remote { step, .. } => step,
            Error::Build(_) => "build_tenant",
        }
    }
    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Local { source, .. } | Error::Remote { source, .. } => Some(source),
            Error::Build(_) => None,
        }
    }
}

fn local(step: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Local { step, source }
}

fn remote(step: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Remote { step, source }
}

/// Most provider clients kept at once (one per Contract kubeconfig).
const MAX_REMOTE_CLIENTS: usize = 128;

/// Shared state of the controller.
pub struct Context {
    client: kube::Client,
    cfg: PeeringConfig,
    reconciler: Reconciler,
    /// Provider clients, by the kubeconfig text they were built from.
    remotes: Mutex<HashMap<String, kube::Client>>,
}

/// Runs the Allocation controller until `shutdown`; `ready` is set once the
/// Allocations are listed.
pub async fn run(
    client: kube::Client,
    cfg: PeeringConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let api: Api<Allocation> = Api::namespaced(client.clone(), &cfg.namespace);
    let (cache, writer) = kube::runtime::reflector::store();
    let allocations = {
        use futures::TryStreamExt;
        use kube::runtime::WatchStreamExt;
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .inspect_ok(move |event| {
                if matches!(event, watcher::Event::InitDone) {
                    ready.set_ready();
                }
            })
            .applied_objects()
    };
    // Every Liqo change re-examines every Allocation: there are few, and the
    // decision is cheap (reads are by name).
    let all = {
        let cache = cache.clone();
        move || {
            cache
                .state()
                .iter()
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let by_label = |selector: &str| watcher::Config::default().labels(selector);
    let ctx = Arc::new(Context {
        client: client.clone(),
        cfg,
        reconciler: reconciler.clone(),
        remotes: Mutex::default(),
    });
    let policy = reconciler.clone();
    let liqo = ctx.cfg.liqo.clone();
    let (a1, a2, a3, a4, a5, a6) = (
        all.clone(),
        all.clone(),
        all.clone(),
        all.clone(),
        all.clone(),
        all,
    );
    // Liqo's watches back off (a cluster without Liqo yet answers 404).
    let stream = Controller::for_stream(allocations, cache)
        .watches_stream(
            watcher_stream(watcher::watcher(
                Api::<Secret>::all(client.clone()),
                by_label(objects::SIGNED_NONCE_LABEL),
            )),
            move |_| a1(),
        )
        .watches_stream(
            liqo_stream("Identity", &liqo, Api::<Identity>::all(client.clone())),
            move |_| a2(),
        )
        .watches_stream(
            liqo_stream(
                "ResourceSlice",
                &liqo,
                Api::<ResourceSlice>::all(client.clone()),
            ),
            move |_| a3(),
        )
        .watches_stream(
            watcher_stream(watcher::watcher(
                Api::<Node>::all(client.clone()),
                by_label("liqo.io/type=virtual-node"),
            )),
            move |_| a4(),
        )
        .watches_stream(
            liqo_stream(
                "ForeignCluster",
                &liqo,
                Api::<ForeignCluster>::all(client.clone()),
            ),
            move |_| a5(),
        )
        // The gateway creates a sale's Contract and Allocation concurrently:
        // an Allocation first seen without its Contract is looked at again
        // when the Contract appears (or ends).
        .watches_stream(
            watcher_stream(watcher::watcher(
                Api::<Contract>::all(client.clone()),
                watcher::Config::default(),
            )),
            move |_| a6(),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            |a, ctx| async move {
                let r = ctx.reconciler.clone();
                r.observe(a.as_ref(), reconcile(a.clone(), ctx)).await
            },
            move |a, err, _| policy.error_policy(a.as_ref(), err),
            ctx,
        );
    fluidos_controller::reconcile::drain(reconciler, stream.boxed()).await;
}

#[tracing::instrument(skip_all, fields(allocation = %a.name_any()))]
async fn reconcile(a: Arc<Allocation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let allocations: Api<Allocation> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let current = a.status.as_ref().and_then(|s| s.status.clone());
    let Some(contract_ref) = a.spec.contract.as_ref().and_then(|c| c.name.clone()) else {
        return Ok(Action::await_change());
    };
    let contract_ns = a
        .spec
        .contract
        .as_ref()
        .and_then(|c| c.namespace.clone())
        .unwrap_or_else(|| ctx.cfg.namespace.clone());
    let contract = Api::<Contract>::namespaced(ctx.client.clone(), &contract_ns)
        .get_opt(&contract_ref)
        .await
        .map_err(local("get_contract"))?;
    // Our finalizer marks a consumer Allocation whose peering we drive.
    let ours = a.finalizers().iter().any(|f| f == teardown::FINALIZER);
    let ended = contract
        .as_ref()
        .and_then(|c| c.spec.expiration_time.as_deref())
        .is_some_and(fluidos_controller::time::is_past);
    if ours && (a.metadata.deletion_timestamp.is_some() || contract.is_none() || ended) {
        return release(&ctx, &allocations, &a, &contract_ref, contract.as_ref()).await;
    }
    let Some(contract) = contract else {
        // Not knowing the flavor type, do not claim the Allocation for K8Slice
        // unless it is still fresh: the Go node calls this an error. A
        // Released one stays so: its Contract going later is no error.
        if current
            .as_ref()
            .is_some_and(|s| *s != fluidos_api::allocation::AllocationState::Released)
        {
            write(
                &allocations,
                &a,
                &plan_error(machine::MSG_NO_CONTRACT),
                None,
            )
            .await?;
        }
        return Ok(Action::await_change());
    };
    let offloading = a
        .annotations()
        .contains_key(service_delivery::OFFLOADING_FOR_ANNOTATION);
    if offloading {
        // The seller's companion Allocation of a Service delivered by Liqo:
        // this node peers with the buyer as Liqo's consumer.
        if !reverse(&contract)
            || machine::side(&contract.spec.seller, &ctx.cfg.identity) != Side::Provider
        {
            return Ok(Action::await_change());
        }
        return consumer(&ctx, &allocations, &a, current.as_ref(), &contract).await;
    }
    if contract.spec.flavor.spec.flavor_type.identifier() != Some(FlavorTypeIdentifier::K8Slice) {
        return Ok(Action::await_change());
    }
    match machine::side(&contract.spec.seller, &ctx.cfg.identity) {
        Side::Provider => {
            let buyer = buyer_liqo_id(&contract);
            let incoming = match buyer {
                Some(id) => Api::<ForeignCluster>::all(ctx.client.clone())
                    .get_opt(&id)
                    .await
                    .map_err(local("get_foreign_cluster"))?
                    .map(|fc| incoming(&fc)),
                None => None,
            };
            let plan = machine::provider(current.as_ref(), incoming);
            write(&allocations, &a, &plan, None).await?;
            Ok(match plan.status {
                Some(_) if plan.status.as_ref().map(|s| &s.state) != current.as_ref() => {
                    Action::requeue(Duration::ZERO)
                }
                _ => Action::requeue(LOCAL_RECHECK),
            })
        }
        Side::Consumer => consumer(&ctx, &allocations, &a, current.as_ref(), &contract).await,
    }
}

/// A trigger stream with the default backoff on errors.
fn watcher_stream<K, S>(
    stream: S,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    stream.default_backoff().touched_objects()
}

/// [`watcher_stream`] for a Liqo kind, quiet while Liqo is not installed
/// ([`crate::liqo_watch`]).
fn liqo_stream<K>(
    kind: &'static str,
    presence: &crate::liqo_watch::LiqoPresence,
    api: Api<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    let events = watcher::watcher(api, watcher::Config::default()).default_backoff();
    crate::liqo_watch::quiet(kind, presence.clone(), events).touched_objects()
}

/// True for a Service Contract delivered by Liqo: its peering is the
/// reverse one, driven by the seller as Liqo's consumer of the buyer.
fn reverse(contract: &Contract) -> bool {
    contract.spec.flavor.spec.flavor_type.identifier() == Some(FlavorTypeIdentifier::Service)
        && service_delivery::by_liqo(&contract.spec)
}

/// The Liqo provider this node peers with for `contract`: the seller of a
/// K8Slice bought, the buyer of a Service delivered by Liqo.
fn peer_cluster(contract: &Contract) -> &str {
    if reverse(contract) {
        &contract.spec.buyer_cluster_id
    } else {
        &contract.spec.peering_target_credentials.liqo_id
    }
}

/// The key the peer of `contract` is known by here: the one this node
/// bought with pinned, or (reverse) the one the buyer bought with.
fn peer_key(contract: &Contract) -> Option<&String> {
    let key = if reverse(contract) {
        fluidos_api::BUYER_KEY_ANNOTATION
    } else {
        fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION
    };
    contract.annotations().get(key)
}

/// The tenant namespace to make for `provider`: the reverse peering's
/// records the buyer's key.
fn tenant_namespace_for(provider: &str, contract: &Contract) -> Namespace {
    if reverse(contract) {
        objects::reverse_tenant_namespace_object(provider, peer_key(contract).map(String::as_str))
    } else {
        objects::seller_tenant_namespace_object(provider, peer_key(contract).map(String::as_str))
    }
}

fn buyer_liqo_id(contract: &Contract) -> Option<String> {
    Some(contract.spec.buyer_cluster_id.clone()).filter(|s| !s.is_empty())
}

fn plan_error(message: &str) -> Plan {
    Plan {
        effects: Vec::new(),
        status: Some(machine::Status {
            state: fluidos_api::allocation::AllocationState::Error,
            message: message.to_owned(),
        }),
        wait: Wait::Nothing,
    }
}

fn fc_condition_ready(fc: &ForeignCluster, type_: &FcType) -> bool {
    fc.status
        .as_ref()
        .and_then(|s| s.modules.as_ref())
        .and_then(|m| m.authentication.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| &c.r#type == type_ && c.status == FcStatus::Ready)
        })
}

fn incoming(fc: &ForeignCluster) -> IncomingPeering {
    let role = fc.status.as_ref().map(|s| &s.role);
    IncomingPeering {
        consumer: matches!(
            role,
            Some(
                ForeignClusterStatusRole::Consumer | ForeignClusterStatusRole::ConsumerAndProvider
            )
        ),
        authenticated: fc_condition_ready(fc, &FcType::AuthTenantStatus),
    }
}

/// Why this node must not peer with `provider` for `contract` through
/// its tenant namespace `ns` (`identity`: this node's authentication is in
/// it already), if it must not (pure).
///
/// Before this node writes its authentication there (an Identity made
/// already is left alone: an existing peering is not broken), the
/// namespace must not be a peer's ([`objects::foreign_tenant_namespace`]).
/// Not an Error, which is final: the namespace may be mended, or its owner
/// recorded by the gateway's next sale to that buyer. The reverse peering
/// (a Service delivered by Liqo) is checked always: another buyer stating
/// the same cluster ID must not be served through the peering made for
/// the first. So is another provider's cluster ID
/// ([`objects::claimed_by_another_seller`]), an Identity made already
/// included: it is the other provider's.
fn tenant_namespace_refusal(
    ns: &Namespace,
    identity: bool,
    contract: &Contract,
    provider: &str,
) -> Option<String> {
    let key = peer_key(contract);
    if (!identity || reverse(contract))
        && let Some(why) = objects::foreign_tenant_namespace(ns, key, provider)
    {
        return Some(why);
    }
    if reverse(contract) {
        return None;
    }
    objects::claimed_by_another_seller(ns, key, provider)
}

async fn consumer(
    ctx: &Context,
    allocations: &Api<Allocation>,
    a: &Allocation,
    current: Option<&fluidos_api::allocation::AllocationState>,
    contract: &Contract,
) -> Result<Action, Error> {
    let provider = peer_cluster(contract).to_owned();
    let slice_name = contract.name_any();
    if !provider.is_empty() && provider == ctx.cfg.local_cluster_id {
        let message = format!(
            "the peer of Contract {slice_name} states this cluster's own Liqo cluster ID ({provider}): this node does not peer with itself"
        );
        write(allocations, a, &plan_error(&message), None).await?;
        return Ok(Action::await_change());
    }
    // The first transitions need no observation.
    if !matches!(
        current,
        Some(
            fluidos_api::allocation::AllocationState::Peering
                | fluidos_api::allocation::AllocationState::Active
                | fluidos_api::allocation::AllocationState::Provisioning
                | fluidos_api::allocation::AllocationState::ResourceCreation
        )
    ) {
        let plan = machine::consumer(current, &provider, &slice_name, &ConsumerView::default());
        write(allocations, a, &plan, None).await?;
        return Ok(Action::await_change());
    }
    if a.metadata.deletion_timestamp.is_some() {
        // Deleted before the peering started: nothing of ours to take down.
        return Ok(Action::await_change());
    }
    if !a.finalizers().iter().any(|f| f == teardown::FINALIZER) {
        // Before the first Liqo object: deleting the Allocation (or its
        // Solver) then always unpeers.
        add_finalizer(allocations, a, &provider).await?;
        return Ok(Action::await_change());
    }
    let ns = objects::tenant_namespace(&provider);
    let c = &ctx.client;
    let (mut view, namespace) = observe_local(c, &ns, &provider, &slice_name).await?;
    if let Some(why) = namespace
        .as_ref()
        .and_then(|n| tenant_namespace_refusal(n, view.identity.is_some(), contract, &provider))
    {
        return still_peering(allocations, a, &why).await;
    }
    if ctx.cfg.networking.is_some() {
        view.network = Some(networking::observe_local(c, &provider).await?);
    }
    remember(a, &mut view);
    let mut remote_client = None;
    if view.needs_remote() && view.identity == Some(true) {
        remote_client = ctx.observe_provider_if_possible(contract, &mut view).await;
    } else if view.needs_remote() {
        let kubeconfig = match ctx.kubeconfig(contract).await? {
            Ok(kubeconfig) => kubeconfig,
            // Not an Error, which is final: the Secret is not watched, so it
            // is looked for again now and then, in case it is put back, and
            // the peering then goes on.
            Err(message) => return still_peering(allocations, a, &message).await,
        };
        let client = match ctx.remote_client(&kubeconfig).await {
            Ok(client) => client,
            Err(message) => {
                write(allocations, a, &plan_error(message), None).await?;
                return Ok(Action::await_change());
            }
        };
        let own_key = own_public_key(&ctx.client).await;
        view.remote =
            Some(observe_remote(&client, &ctx.cfg.local_cluster_id, own_key.as_deref()).await?);
        remote_client = Some(client);
    }
    if let (Some(network), Some(p)) = (view.network.as_mut(), remote_client.as_ref()) {
        network.remote = Some(networking::observe_remote(p, &ctx.cfg.local_cluster_id).await?);
    }
    let plan = machine::consumer(current, &provider, &slice_name, &view);
    if plan
        .effects
        .iter()
        .any(|e| matches!(e, Effect::DeleteRemoteTenant(_) | Effect::DeleteIdentity))
    {
        tracing::warn!(%provider, restarts = view.tenant_restarts, "authenticating with the provider again");
    }
    if let Some(refused) =
        make_all(ctx, allocations, a, remote_client.as_ref(), contract, &plan).await?
    {
        return Ok(refused);
    }
    let fc_ref = GenericRef {
        name: Some(provider.clone()),
        namespace: None,
        api_version: Some("core.liqo.io/v1beta1".into()),
        kind: Some("ForeignCluster".into()),
    };
    let resource_ref = plan
        .status
        .as_ref()
        .filter(|s| s.state == fluidos_api::allocation::AllocationState::Active)
        .map(|_| fc_ref);
    write(allocations, a, &plan, resource_ref).await?;
    Ok(match plan.wait {
        Wait::Remote if machine::waited_long(view.stored_status.as_ref(), plan.status.as_ref()) => {
            Action::requeue(REMOTE_POLL_SLOW)
        }
        Wait::Remote => Action::requeue(REMOTE_POLL),
        Wait::Local | Wait::Nothing => Action::requeue(LOCAL_RECHECK),
    })
}

/// Makes the plan's effects in order; `Some` (after saying so on the
/// Allocation) when this cluster's Liqo key is one a provider refuses.
async fn make_all(
    ctx: &Context,
    allocations: &Api<Allocation>,
    a: &Allocation,
    remote_client: Option<&kube::Client>,
    contract: &Contract,
    plan: &Plan,
) -> Result<Option<Action>, Error> {
    for effect in &plan.effects {
        let made = make(ctx, allocations, a, remote_client, contract, effect).await;
        if let Err(e @ Error::Build(BuildError::KeyRefusedByLiqo)) = made {
            // Not transient: say so on the Allocation, and look again now
            // and then (the key is not watched) in case it was replaced.
            let refused = Plan {
                effects: Vec::new(),
                status: Some(machine::Status {
                    state: fluidos_api::allocation::AllocationState::Peering,
                    message: format!("{}: {e}", machine::MSG_PEERING),
                }),
                wait: Wait::Nothing,
            };
            write(allocations, a, &refused, None).await?;
            return Ok(Some(Action::requeue(REMOTE_POLL_SLOW)));
        }
        made?;
    }
    Ok(None)
}

/// Keeps `a` in `Peering`, saying `why` it does not go on, and looks again
/// in [`LOCAL_RECHECK`] (what it waits for is not watched).
async fn still_peering(
    allocations: &Api<Allocation>,
    a: &Allocation,
    why: &str,
) -> Result<Action, Error> {
    let waiting = Plan {
        effects: Vec::new(),
        status: Some(machine::Status {
            state: fluidos_api::allocation::AllocationState::Peering,
            message: format!("{}: {why}", machine::MSG_PEERING),
        }),
        wait: Wait::Nothing,
    };
    write(allocations, a, &waiting, None).await?;
    Ok(Action::requeue(LOCAL_RECHECK))
}

/// Puts the teardown finalizer on `a`, with the provider it peers with.
async fn add_finalizer(
    allocations: &Api<Allocation>,
    a: &Allocation,
    provider: &str,
) -> Result<(), Error> {
    let mut finalizers = a.finalizers().to_vec();
    finalizers.push(teardown::FINALIZER.to_owned());
    allocations
        .patch(
            &a.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "finalizers": finalizers,
                // Unpeering must find the provider even if the Contract
                // is gone before anything else says it.
                "annotations": {teardown::PROVIDER_ANNOTATION: provider},
                "resourceVersion": a.resource_version(),
            }})),
        )
        .await
        .map(drop)
        .map_err(local("add_finalizer"))
}

/// Makes one effect of the consumer's plan, where it belongs.
async fn make(
    ctx: &Context,
    allocations: &Api<Allocation>,
    a: &Allocation,
    provider_client: Option<&kube::Client>,
    contract: &Contract,
    effect: &Effect,
) -> Result<(), Error> {
    let provider = peer_cluster(contract);
    if let Effect::RecordTenantRestart(n) = effect {
        return record_tenant_restart(allocations, a, *n).await;
    }
    let networking_effect = networking::apply(
        &ctx.client,
        provider_client,
        ctx.cfg.networking.as_ref(),
        &ctx.cfg.local_cluster_id,
        provider,
        effect,
    )
    .await?;
    if networking_effect {
        return Ok(());
    }
    apply(ctx, provider_client, provider, contract, effect).await
}

/// What the Allocation remembers for the machine: its status and age, and
/// its handshake restarts.
fn remember(a: &Allocation, view: &mut ConsumerView) {
    view.tenant_restarts = a
        .annotations()
        .get(machine::TENANT_RESTARTS_ANNOTATION)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    view.stored_status = a.status.as_ref().and_then(|s| {
        Some(machine::StoredStatus {
            age_secs: fluidos_controller::time::seconds_since(s.last_update_time.as_deref()?)?,
            message: s.message.clone()?,
        })
    });
}

/// Counts a handshake restart on the Allocation.
async fn record_tenant_restart(
    allocations: &Api<Allocation>,
    a: &Allocation,
    restarts: u32,
) -> Result<(), Error> {
    allocations
        .patch(
            &a.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                machine::TENANT_RESTARTS_ANNOTATION: restarts.to_string()
            }}})),
        )
        .await
        .map(drop)
        .map_err(local("record_tenant_restart"))
}

impl Context {
    /// Authenticated: the provider is read only to notice a Tenant it
    /// dropped (into `view.remote`); when it cannot be read, the slice goes
    /// on without it.
    async fn observe_provider_if_possible(
        &self,
        contract: &Contract,
        view: &mut ConsumerView,
    ) -> Option<kube::Client> {
        let kubeconfig = match self.kubeconfig(contract).await {
            Ok(Ok(kubeconfig)) => kubeconfig,
            Ok(Err(message)) => {
                tracing::debug!(message, "provider's Tenant not read");
                return None;
            }
            Err(e) => {
                tracing::debug!(error = %e, "provider's Tenant not read");
                return None;
            }
        };
        let client = match self.remote_client(&kubeconfig).await {
            Ok(client) => client,
            Err(message) => {
                tracing::debug!(message, "provider's Tenant not read");
                return None;
            }
        };
        let own_key = own_public_key(&self.client).await;
        match observe_remote(&client, &self.cfg.local_cluster_id, own_key.as_deref()).await {
            Ok(remote) => view.remote = Some(remote),
            Err(e) => tracing::debug!(error = %e, "provider's Tenant not read"),
        }
        Some(client)
    }

    /// A client for the provider while tearing down, if the Contract and
    /// usable credentials are left: without them (their Secret gone too),
    /// what this cluster made there is left to the provider, as with a
    /// revoked kubeconfig.
    async fn teardown_client(
        &self,
        contract: Option<&Contract>,
    ) -> Result<Option<kube::Client>, Error> {
        let Some(contract) = contract else {
            return Ok(None);
        };
        let Ok(kubeconfig) = self.kubeconfig(contract).await? else {
            return Ok(None);
        };
        Ok(self.remote_client(&kubeconfig).await.ok())
    }

    /// The peering kubeconfig of `contract` (base64 of its YAML): in the
    /// Secret its annotation names, in its namespace (ours since the
    /// kubeconfig left the Contract), else in its spec (a Contract stored by
    /// an earlier version or a Go node). A failed read is an error, retried;
    /// a missing or empty Secret is the status message saying so.
    async fn kubeconfig(&self, contract: &Contract) -> Result<Result<String, String>, Error> {
        let reverse_secret;
        let source = if reverse(contract) {
            // The buyer's kubeconfig, which the gateway stored at the sale.
            reverse_secret = service_delivery::buyer_credentials_secret(&contract.name_any());
            KubeconfigSource::Secret(&reverse_secret)
        } else {
            peering_credentials::kubeconfig_source(contract)
        };
        match source {
            KubeconfigSource::Spec(kubeconfig) => Ok(Ok(kubeconfig.to_owned())),
            KubeconfigSource::Secret(name) => {
                let ns = contract
                    .namespace()
                    .unwrap_or_else(|| self.cfg.namespace.clone());
                let secret = Api::<Secret>::namespaced(self.client.clone(), &ns)
                    .get_opt(name)
                    .await
                    .map_err(local("get_credentials_secret"))?;
                Ok(machine::kubeconfig_from_secret(name, secret.as_ref()))
            }
        }
    }

    /// A client for the provider from the Contract's kubeconfig, or the Go
    /// node's message saying why not.
    async fn remote_client(&self, kubeconfig_b64: &str) -> Result<kube::Client, &'static str> {
        if let Some(c) = self.remotes.lock().await.get(kubeconfig_b64) {
            return Ok(c.clone());
        }
        let kubeconfig = objects::decode_kubeconfig(kubeconfig_b64).map_err(|e| {
            tracing::warn!(error = %e, "the contract's kubeconfig is unusable");
            machine::MSG_BAD_KUBECONFIG
        })?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "the contract's kubeconfig is unusable");
                machine::MSG_BAD_KUBECONFIG
            })?;
        let client = kube::Client::try_from(config).map_err(|e| {
            tracing::warn!(error = %e, "no client for the provider");
            machine::MSG_NO_REMOTE_CLIENT
        })?;
        let mut remotes = self.remotes.lock().await;
        // Kubeconfigs of ended Contracts are never asked for again: the
        // cache starts over rather than keep their clients and tokens.
        if remotes.len() >= MAX_REMOTE_CLIENTS {
            remotes.clear();
        }
        remotes.insert(kubeconfig_b64.to_owned(), client.clone());
        Ok(client)
    }
}

fn verdict(slice: &ResourceSlice, type_: &ResourceSliceStatusConditionsType) -> Option<Verdict> {
    let c = slice
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| &c.r#type == type_)?;
    Some(match c.status {
        // A FLUIDOS-rs provider whose side of the Contract ended grants
        // zero of everything, still "Accepted": nothing is left to use.
        ResourceSliceStatusConditionsStatus::Accepted
            if c.reason.as_deref() == Some(slice_class::REASON_REVOKED) =>
        {
            Verdict::Denied(format!(
                "the provider ended its side of the Contract and grants nothing any more ({})",
                c.message.as_deref().unwrap_or_default()
            ))
        }
        ResourceSliceStatusConditionsStatus::Accepted => Verdict::Accepted,
        ResourceSliceStatusConditionsStatus::Denied => {
            Verdict::Denied(c.message.clone().unwrap_or_default())
        }
    })
}

async fn observe_local(
    c: &kube::Client,
    ns: &str,
    provider: &str,
    slice_name: &str,
) -> Result<(ConsumerView, Option<Namespace>), Error> {
    let namespace = Api::<Namespace>::all(c.clone())
        .get_opt(ns)
        .await
        .map_err(local("get_tenant_namespace"))?;
    let identity = Api::<Identity>::namespaced(c.clone(), ns)
        .get_opt(&objects::control_plane_identity_name(provider))
        .await
        .map_err(local("get_identity"))?;
    let signed = Api::<Secret>::namespaced(c.clone(), ns)
        .get_opt(objects::SIGNED_NONCE_SECRET)
        .await
        .map_err(local("get_signed_nonce"))?;
    let slice = Api::<ResourceSlice>::namespaced(c.clone(), ns)
        .get_opt(slice_name)
        .await
        .map_err(local("get_resource_slice"))?;
    let node = Api::<Node>::all(c.clone())
        .get_opt(slice_name)
        .await
        .map_err(local("get_virtual_node"))?;
    let view = ConsumerView {
        tenant_namespace: namespace.is_some(),
        identity: identity.map(|i| {
            i.status
                .and_then(|s| s.kubeconfig_secret_ref)
                .and_then(|r| r.name)
                .is_some()
        }),
        signed_nonce: signed.map(|s| SignedNonce {
            nonce: objects::secret_value(&s, objects::NONCE_KEY).map(<[u8]>::to_vec),
            signature: objects::secret_value(&s, objects::SIGNED_NONCE_KEY).map(<[u8]>::to_vec),
        }),
        remote: None,
        network: None,
        slice: slice.map(|s| {
            (
                verdict(&s, &ResourceSliceStatusConditionsType::Authentication),
                verdict(&s, &ResourceSliceStatusConditionsType::Resources),
            )
        }),
        node_ready: node.is_some_and(|n| node_is_ready(&n)),
        stored_status: None,
        tenant_restarts: 0,
    };
    Ok((view, namespace))
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn observe_remote(
    p: &kube::Client,
    consumer_id: &str,
    own_key: Option<&[u8]>,
) -> Result<Remote, Error> {
    let ns = objects::tenant_namespace(consumer_id);
    let nonce = Api::<Secret>::namespaced(p.clone(), &ns)
        .get_opt(objects::NONCE_SECRET)
        .await
        .map_err(remote("get_nonce"))?;
    let tenant = Api::<Tenant>::namespaced(p.clone(), &ns)
        .get_opt(consumer_id)
        .await
        .map_err(remote("get_tenant"))?;
    // Being deleted, or drained by the provider for removal (nothing is
    // sold to this cluster there any more): on its way out either way.
    let deleting = tenant.as_ref().is_some_and(|t| {
        t.metadata.deletion_timestamp.is_some()
            || (t.spec.tenant_condition
                == Some(fluidos_liqo_api::generated::tenant::TenantTenantCondition::Drained)
                && t.annotations().contains_key(objects::DRAINED_FOR_REMOVAL))
    });
    Ok(Remote {
        nonce: nonce.map(|s| objects::secret_value(&s, objects::NONCE_KEY).map(<[u8]>::to_vec)),
        // A Tenant on its way out grants nothing, whatever its status says.
        tenant: tenant
            .as_ref()
            .map(|t| TenantGrant::of(t).filter(|_| !deleting)),
        tenant_version: tenant.as_ref().and_then(|t| {
            Some(ObjectVersion {
                uid: t.metadata.uid.clone()?,
                resource_version: t.metadata.resource_version.clone()?,
            })
        }),
        tenant_deleting: deleting,
        tenant_other_key: match (&tenant, own_key) {
            (Some(t), Some(own)) => t
                .spec
                .public_key
                .as_deref()
                .and_then(|k| {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(k).ok()
                })
                .is_some_and(|k| k != own),
            _ => false,
        },
    })
}

/// This cluster's raw Liqo public key, when its key Secret can be read
/// (without it, a Tenant's key is not compared).
async fn own_public_key(c: &kube::Client) -> Option<Vec<u8>> {
    let secret = Api::<Secret>::namespaced(c.clone(), objects::LIQO_NAMESPACE)
        .get_opt(objects::AUTH_KEYS_SECRET)
        .await
        .ok()??;
    ClusterKeys::from_secret(&secret)
        .ok()
        .map(|k| k.public_key_raw().to_vec())
}

/// Creates `obj`; an existing one is adopted as it is.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(e) if api_error::is_already_exists(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes `name`; one already gone is fine.
async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if api_error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes this cluster's Tenant on the provider, conditioned on the
/// version read: if Liqo wrote it since (it may just have accepted it), the
/// delete fails with a conflict and the next reconcile decides again.
async fn delete_remote_tenant(
    p: &kube::Client,
    me: &str,
    version: &ObjectVersion,
) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(version.uid.clone()),
            resource_version: Some(version.resource_version.clone()),
        }),
        ..DeleteParams::default()
    };
    match Api::<Tenant>::namespaced(p.clone(), &objects::tenant_namespace(me))
        .delete(me, &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api_error::is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

#[tracing::instrument(skip_all, fields(?effect))]
async fn apply(
    ctx: &Context,
    provider_client: Option<&kube::Client>,
    provider: &str,
    contract: &Contract,
    effect: &Effect,
) -> Result<(), Error> {
    let c = &ctx.client;
    let me = &ctx.cfg.local_cluster_id;
    let ns = objects::tenant_namespace(provider);
    let no_remote = || Error::Build(BuildError::NotK8Slice("no provider client".into()));
    match effect {
        Effect::CreateTenantNamespace => create(
            &Api::<Namespace>::all(c.clone()),
            &tenant_namespace_for(provider, contract),
        )
        .await
        .map_err(local("create_tenant_namespace")),
        Effect::CreateRemoteNonce => {
            let p = provider_client.ok_or_else(no_remote)?;
            create(
                &Api::<Secret>::namespaced(p.clone(), &objects::tenant_namespace(me)),
                &objects::nonce_secret(me),
            )
            .await
            .map_err(remote("create_nonce"))
        }
        Effect::CreateSignedNonce(nonce) => create(
            &Api::<Secret>::namespaced(c.clone(), &ns),
            &objects::signed_nonce_secret(provider, nonce),
        )
        .await
        .map_err(local("create_signed_nonce")),
        Effect::DeleteSignedNonce => delete_if_present(
            &Api::<Secret>::namespaced(c.clone(), &ns),
            objects::SIGNED_NONCE_SECRET,
        )
        .await
        .map_err(local("delete_signed_nonce")),
        Effect::DeleteRemoteNonce => {
            let p = provider_client.ok_or_else(no_remote)?;
            delete_if_present(
                &Api::<Secret>::namespaced(p.clone(), &objects::tenant_namespace(me)),
                objects::NONCE_SECRET,
            )
            .await
            .map_err(remote("delete_nonce"))
        }
        Effect::DeleteRemoteTenant(version) => {
            let p = provider_client.ok_or_else(no_remote)?;
            delete_remote_tenant(p, me, version)
                .await
                .map_err(remote("delete_tenant"))
        }
        // Written by the caller, on the Allocation.
        Effect::RecordTenantRestart(_) => Ok(()),
        Effect::DeleteIdentity => delete_if_present(
            &Api::<Identity>::namespaced(c.clone(), &ns),
            &objects::control_plane_identity_name(provider),
        )
        .await
        .map_err(local("delete_identity")),
        Effect::CreateTenant(signature) => {
            create_tenant(c, provider_client.ok_or_else(no_remote)?, me, signature).await
        }
        Effect::CreateIdentity(grant) => create(
            &Api::<Identity>::namespaced(c.clone(), &ns),
            &objects::control_plane_identity(provider, grant),
        )
        .await
        .map_err(local("create_identity")),
        Effect::CreateResourceSlice => {
            // The reverse peering asks for the buyer's FLUIDOS class, which
            // grants the offloading slice whatever is asked.
            let (resources, class) = if reverse(contract) {
                (
                    service_delivery::offloading_resources(service_delivery::hosting_policy(
                        &contract.spec,
                    )),
                    slice_class::FLUIDOS_CLASS,
                )
            } else {
                (
                    objects::contracted_resources(&contract.spec).map_err(Error::Build)?,
                    slice_class::class_for(&contract.spec),
                )
            };
            create(
                &Api::<ResourceSlice>::namespaced(c.clone(), &ns),
                &objects::resource_slice(&contract.name_any(), provider, class, &resources),
            )
            .await
            .map_err(local("create_resource_slice"))
        }
        // Made by `networking::apply`.
        Effect::CreateLocalConfiguration(_)
        | Effect::CreateRemoteConfiguration(_)
        | Effect::CreateGatewayServer
        | Effect::CreateGatewayClient(_)
        | Effect::UpdateGatewayClientEndpoint(_)
        | Effect::CreateLocalPublicKey(..)
        | Effect::CreateRemotePublicKey(..)
        | Effect::DeleteLocalPublicKey
        | Effect::DeleteRemotePublicKey => Ok(()),
    }
}

/// Builds this cluster's Tenant from its Liqo keys and `signature`, and
/// creates it on the provider `p`.
async fn create_tenant(
    c: &kube::Client,
    p: &kube::Client,
    me: &str,
    signature: &[u8],
) -> Result<(), Error> {
    let keys_secret = Api::<Secret>::namespaced(c.clone(), objects::LIQO_NAMESPACE)
        .get(objects::AUTH_KEYS_SECRET)
        .await
        .map_err(local("get_authentication_keys"))?;
    let keys = ClusterKeys::from_secret(&keys_secret).map_err(Error::Build)?;
    let tenant = objects::tenant(me, &keys, signature).map_err(Error::Build)?;
    create(
        &Api::<Tenant>::namespaced(p.clone(), &objects::tenant_namespace(me)),
        &tenant,
    )
    .await
    .map_err(remote("create_tenant"))
}

/// Writes the plan's status when it differs from the stored one.
async fn write(
    api: &Api<Allocation>,
    a: &Allocation,
    plan: &Plan,
    resource_ref: Option<GenericRef>,
) -> Result<(), Error> {
    let Some(next) = &plan.status else {
        return Ok(());
    };
    let stored = a.status.clone().unwrap_or_default();
    if stored.status.as_ref() == Some(&next.state)
        && stored.message.as_deref() == Some(next.message.as_str())
        && (resource_ref.is_none() || stored.resource_ref == resource_ref)
    {
        return Ok(());
    }
    let status = AllocationStatus {
        status: Some(next.state.clone()),
        last_update_time: Some(fluidos_controller::time::now_string()),
        message: Some(next.message.clone()),
        resource_ref: resource_ref.or(stored.resource_ref),
    };
    tracing::info!(state = %next.state, message = %next.message, "allocation status");
    api.patch_status(
        &a.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(drop)
    .map_err(local("write_status"))
}

/// Sets the finalizers of `a`, only if it has not changed since it was read
/// (its `resourceVersion` travels with the patch).
async fn set_finalizers(
    api: &Api<Allocation>,
    a: &Allocation,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    api.patch(
        &a.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": a.resource_version(),
        }})),
    )
    .await
    .map(drop)
}

/// Takes the peering of a consumer Allocation down, a step per reconcile
/// ([`teardown::teardown`]), then lets the Allocation go (or marks it
/// `Released` when only its Contract ended).
async fn release(
    ctx: &Context,
    allocations: &Api<Allocation>,
    a: &Allocation,
    slice_name: &str,
    contract: Option<&Contract>,
) -> Result<Action, Error> {
    let c = &ctx.client;
    let (slice, provider) = find_peering(c, a, slice_name, contract).await?;
    let view_and_plan = match &provider {
        Some(provider) => {
            let mut view =
                observe_teardown(c, provider, slice_name, slice.is_some(), contract.is_some())
                    .await?;
            // Another Contract with the same provider still peering (no
            // slice of its own yet) uses the same authentication and tunnel.
            if view.other_slices != OtherSlices::Live
                && sibling_still_peering(ctx, allocations, a, provider).await?
            {
                view.other_slices = OtherSlices::Live;
            }
            Some((
                provider.clone(),
                teardown::teardown(provider, slice_name, &view),
            ))
        }
        // Never peered (or nothing of it can be found): nothing to take down.
        None => None,
    };
    if let Some((provider, plan)) = &view_and_plan {
        let ns = objects::tenant_namespace(provider);
        let patience_over = remote_patience_over(a, contract);
        for effect in &plan.effects {
            tear(
                ctx,
                contract,
                &ns,
                provider,
                slice_name,
                *effect,
                patience_over,
            )
            .await?;
        }
        if let Some(left) = &plan.left {
            write(
                allocations,
                a,
                &Plan {
                    effects: Vec::new(),
                    status: Some(machine::Status {
                        state: fluidos_api::allocation::AllocationState::Released,
                        message: format!("Releasing the peering with {provider}: {left}"),
                    }),
                    wait: Wait::Local,
                },
                None,
            )
            .await?;
            return Ok(Action::requeue(LOCAL_RECHECK));
        }
    }
    let released = a.status.as_ref().is_some_and(|st| {
        st.status == Some(fluidos_api::allocation::AllocationState::Released)
            && st.message.as_deref() == Some(teardown::MSG_RELEASED)
    });
    if a.metadata.deletion_timestamp.is_none() && !released {
        write(
            allocations,
            a,
            &Plan {
                effects: Vec::new(),
                status: Some(machine::Status {
                    state: fluidos_api::allocation::AllocationState::Released,
                    message: teardown::MSG_RELEASED.to_owned(),
                }),
                wait: Wait::Nothing,
            },
            None,
        )
        .await?;
        // The write changed the version: the finalizer goes on the next
        // reconcile, which the write's watch event brings.
        return Ok(Action::requeue(LOCAL_RECHECK));
    }
    tracing::info!(provider = ?view_and_plan.as_ref().map(|(p, _)| p), "peering released");
    let finalizers = a
        .finalizers()
        .iter()
        .filter(|f| *f != teardown::FINALIZER)
        .cloned()
        .collect();
    match set_finalizers(allocations, a, finalizers).await {
        Ok(()) => Ok(Action::await_change()),
        Err(e) if api_error::is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => Err(local("remove_finalizer")(e)),
    }
}

/// A list of Liqo objects on a cluster without Liqo's CRDs (404) is empty:
/// an Allocation made before Liqo was installed must still be deletable.
fn no_liqo<K: Clone>(e: kube::Error) -> Result<Vec<K>, kube::Error> {
    if api_error::is_not_found(&e) {
        Ok(Vec::new())
    } else {
        Err(e)
    }
}

/// How long teardown keeps retrying a provider it cannot reach before it
/// lets the Allocation go without deleting its Tenant there.
const REMOTE_TEARDOWN_PATIENCE: Duration = Duration::from_secs(300);

/// This consumer-side slice of the Contract (named after it; found anywhere,
/// it also says the provider when the Contract is gone) and the provider:
/// from the Contract, else the slice, else the Allocation's ForeignCluster.
async fn find_peering(
    c: &kube::Client,
    a: &Allocation,
    slice_name: &str,
    contract: Option<&Contract>,
) -> Result<(Option<ResourceSlice>, Option<String>), Error> {
    let slice = Api::<ResourceSlice>::all(c.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={slice_name}")))
        .await
        .map(|l| l.items)
        .or_else(no_liqo)
        .map_err(local("find_resource_slice"))?
        .into_iter()
        .find(|s| {
            s.labels()
                .get(objects::REPLICATION_LABEL)
                .is_some_and(|v| v == "true")
        });
    let provider = contract
        .map(|c| peer_cluster(c).to_owned())
        .filter(|p| !p.is_empty())
        .or_else(|| {
            slice
                .as_ref()
                .and_then(|s| s.labels().get(objects::REMOTE_CLUSTER_ID).cloned())
        })
        .or_else(|| a.annotations().get(teardown::PROVIDER_ANNOTATION).cloned())
        .or_else(|| {
            a.status
                .as_ref()
                .and_then(|s| s.resource_ref.as_ref())
                .and_then(|r| r.name.clone())
        });
    Ok((slice, provider))
}

/// True once the teardown has been due (since the deletion, or the
/// Contract's end) for longer than [`REMOTE_TEARDOWN_PATIENCE`].
fn remote_patience_over(a: &Allocation, contract: Option<&Contract>) -> bool {
    let since = a
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| {
            contract
                .and_then(|c| c.spec.expiration_time.as_deref())
                .and_then(fluidos_controller::time::parse)
        });
    since.is_some_and(|t| {
        jiff::Timestamp::now().duration_since(t).unsigned_abs() > REMOTE_TEARDOWN_PATIENCE
    })
}

/// True when `b`, another Allocation than `me`, is a consumer Allocation
/// peering with `provider` that is not being released (its Contract is
/// live): it needs the authentication and the tunnel `me` would take down.
fn peers_with(b: &Allocation, me: &Allocation, provider: &str, contract_live: bool) -> bool {
    b.metadata.uid != me.metadata.uid
        && b.metadata.deletion_timestamp.is_none()
        && b.finalizers().iter().any(|f| f == teardown::FINALIZER)
        && b.annotations()
            .get(teardown::PROVIDER_ANNOTATION)
            .is_some_and(|p| p == provider)
        && contract_live
}

/// Whether another consumer Allocation of this node still peers with
/// `provider` (see [`peers_with`]); its Contract is read only for the
/// Allocations that could.
async fn sibling_still_peering(
    ctx: &Context,
    allocations: &Api<Allocation>,
    me: &Allocation,
    provider: &str,
) -> Result<bool, Error> {
    let all = allocations
        .list(&ListParams::default())
        .await
        .map_err(local("list_allocations"))?;
    for b in &all.items {
        if !peers_with(b, me, provider, true) {
            continue;
        }
        let Some(name) = b.spec.contract.as_ref().and_then(|c| c.name.clone()) else {
            continue;
        };
        let ns = b
            .spec
            .contract
            .as_ref()
            .and_then(|c| c.namespace.clone())
            .unwrap_or_else(|| ctx.cfg.namespace.clone());
        let contract = Api::<Contract>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(local("get_sibling_contract"))?;
        let live = contract.is_some_and(|c| {
            !c.spec
                .expiration_time
                .as_deref()
                .is_some_and(fluidos_controller::time::is_past)
        });
        if peers_with(b, me, provider, live) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What is left of the peering of `slice_name` with `provider`.
async fn observe_teardown(
    c: &kube::Client,
    provider: &str,
    slice_name: &str,
    slice: bool,
    remote: bool,
) -> Result<TeardownView, Error> {
    let ns = objects::tenant_namespace(provider);
    let others = Api::<ResourceSlice>::namespaced(c.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .or_else(no_liqo)
        .map_err(local("list_resource_slices"))?;
    // Only this cluster's own slices (not replicas of the provider consuming
    // from us, in a two-way peering) use this side's authentication.
    let others: Vec<_> = others
        .iter()
        .filter(|s| {
            s.name_any() != slice_name
                && s.labels()
                    .get(objects::REPLICATION_LABEL)
                    .is_some_and(|v| v == "true")
        })
        .collect();
    let other_slices = if others.is_empty() {
        OtherSlices::None
    } else if others.iter().all(|s| s.meta().deletion_timestamp.is_some()) {
        OtherSlices::Terminating
    } else {
        OtherSlices::Live
    };
    Ok(TeardownView {
        slice,
        node: Api::<Node>::all(c.clone())
            .get_opt(slice_name)
            .await
            .map_err(local("get_virtual_node"))?
            .is_some(),
        other_slices,
        identity: Api::<Identity>::namespaced(c.clone(), &ns)
            .get_opt(&objects::control_plane_identity_name(provider))
            .await
            .map_err(local("get_identity"))?
            .is_some(),
        signed_nonce: Api::<Secret>::namespaced(c.clone(), &ns)
            .get_opt(objects::SIGNED_NONCE_SECRET)
            .await
            .map_err(local("get_signed_nonce"))?
            .is_some(),
        remote,
        // As `liqoctl unpeer`: a tunnel the provider also consumes through
        // (it peers with this cluster the other way too) stays.
        network: !peer_has_role(c, provider, PeerRole::ConsumesFromUs)
            .await
            .map_err(local("get_foreign_cluster"))?
            && networking::any_left(c, provider)
                .await
                .map_err(local("get_networking_objects"))?,
    })
}

/// Which way a peering with a cluster goes, as this cluster's ForeignCluster
/// of it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerRole {
    /// The peer consumes from this cluster (it has a Tenant here).
    ConsumesFromUs,
    /// This cluster consumes from the peer (it has an Identity for it).
    ProvidesToUs,
}

/// Whether this cluster's ForeignCluster of `peer` has the peer in `role`
/// (`ConsumerAndProvider` has both). Liqo derives the role from the
/// Identities and Tenants there are, so it is read for the side that stays:
/// on a consumer taking its peering down (its Identity already deleted),
/// whether the peer still consumes from it; on a provider removing a
/// consumer's Tenant, whether it consumes from that consumer. Then the
/// tunnel is shared, and stays.
pub(crate) async fn peer_has_role(
    c: &kube::Client,
    peer: &str,
    role: PeerRole,
) -> Result<bool, kube::Error> {
    let fc = match Api::<ForeignCluster>::all(c.clone()).get_opt(peer).await {
        Ok(fc) => fc,
        // Without the right to read them: no peering of this node's.
        Err(e) if api_error::is_forbidden(&e) => None,
        Err(e) => return Err(e),
    };
    Ok(fc
        .and_then(|fc| fc.status)
        .is_some_and(|s| role_includes(&s.role, role)))
}

/// Whether a ForeignCluster `role` has the peer in `role` (pure).
fn role_includes(fc_role: &ForeignClusterStatusRole, role: PeerRole) -> bool {
    matches!(
        (role, fc_role),
        (
            PeerRole::ConsumesFromUs,
            ForeignClusterStatusRole::Consumer | ForeignClusterStatusRole::ConsumerAndProvider
        ) | (
            PeerRole::ProvidesToUs,
            ForeignClusterStatusRole::Provider | ForeignClusterStatusRole::ConsumerAndProvider
        )
    )
}

/// A deletion on the provider during teardown: gone is done; refused
/// credentials (revoked) or a provider unreachable past the patience leave
/// the object to the provider.
fn remote_teardown_result(
    r: Result<(), kube::Error>,
    provider: &str,
    patience_over: bool,
) -> Result<(), Error> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if api_error::is_not_found(&e) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 401 || e.code == 403 => {
            tracing::info!(
                provider,
                "the provider no longer accepts this Contract's credentials: what is left there is left to it"
            );
            Ok(())
        }
        Err(e) if patience_over => {
            tracing::warn!(
                provider,
                error = %e,
                "the provider stayed unreachable: what this cluster made there is left there"
            );
            Ok(())
        }
        Err(e) => Err(remote("delete_on_the_provider")(e)),
    }
}

/// One teardown deletion; a missing object counts as deleted, and a
/// provider that no longer accepts the Contract's credentials has revoked
/// them (what is left there is its to remove).
async fn tear(
    ctx: &Context,
    contract: Option<&Contract>,
    ns: &str,
    provider: &str,
    slice_name: &str,
    effect: TeardownEffect,
    patience_over: bool,
) -> Result<(), Error> {
    let c = &ctx.client;
    let dp = DeleteParams::background();
    let gone = |r: Result<(), kube::Error>, step: &'static str| match r {
        Ok(()) => Ok(()),
        Err(e) if api_error::is_not_found(&e) => Ok(()),
        Err(e) => Err(local(step)(e)),
    };
    match effect {
        TeardownEffect::DeleteResourceSlice => gone(
            Api::<ResourceSlice>::namespaced(c.clone(), ns)
                .delete(slice_name, &dp)
                .await
                .map(drop),
            "delete_resource_slice",
        ),
        TeardownEffect::DeleteIdentity => gone(
            Api::<Identity>::namespaced(c.clone(), ns)
                .delete(&objects::control_plane_identity_name(provider), &dp)
                .await
                .map(drop),
            "delete_identity",
        ),
        TeardownEffect::DeleteSignedNonce => gone(
            Api::<Secret>::namespaced(c.clone(), ns)
                .delete(objects::SIGNED_NONCE_SECRET, &dp)
                .await
                .map(drop),
            "delete_signed_nonce",
        ),
        TeardownEffect::DeleteNetwork => networking::delete_local(c, provider)
            .await
            .map_err(local("delete_networking_objects")),
        TeardownEffect::DeleteRemoteNetwork => {
            let Some(p) = ctx.teardown_client(contract).await? else {
                return Ok(());
            };
            for r in networking::delete_remote(&p, &ctx.cfg.local_cluster_id).await {
                remote_teardown_result(r, provider, patience_over)?;
            }
            Ok(())
        }
        TeardownEffect::DeleteRemoteAuthentication => {
            let Some(p) = ctx.teardown_client(contract).await? else {
                return Ok(());
            };
            let me = &ctx.cfg.local_cluster_id;
            let remote_ns = objects::tenant_namespace(me);
            let results = [
                Api::<Tenant>::namespaced(p.clone(), &remote_ns)
                    .delete(me, &dp)
                    .await
                    .map(drop),
                Api::<Secret>::namespaced(p.clone(), &remote_ns)
                    .delete(objects::NONCE_SECRET, &dp)
                    .await
                    .map(drop),
            ];
            for r in results {
                remote_teardown_result(r, provider, patience_over)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod role_tests {
    use super::*;

    #[test]
    fn a_shared_tunnel_is_told_by_the_side_that_stays() {
        use ForeignClusterStatusRole as R;
        // A consumer whose Identity is gone: the provider still consumes
        // from it (Liqo now says Consumer), so the tunnel stays.
        assert!(role_includes(&R::Consumer, PeerRole::ConsumesFromUs));
        assert!(role_includes(
            &R::ConsumerAndProvider,
            PeerRole::ConsumesFromUs
        ));
        assert!(!role_includes(&R::Provider, PeerRole::ConsumesFromUs));
        // A provider removing a consumer's Tenant: it consumes from that
        // consumer too (Provider), so the tunnel stays.
        assert!(role_includes(&R::Provider, PeerRole::ProvidesToUs));
        assert!(!role_includes(&R::Consumer, PeerRole::ProvidesToUs));
        assert!(!role_includes(&R::Unknown, PeerRole::ProvidesToUs));
    }
}

#[cfg(test)]
mod sibling_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn allocation(uid: &str, provider: &str) -> Allocation {
        let mut a: Allocation = serde_json::from_value(json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Allocation",
            "metadata": {"name": uid, "namespace": "fluidos", "uid": uid,
                "finalizers": [teardown::FINALIZER],
                "annotations": {teardown::PROVIDER_ANNOTATION: provider}},
            "spec": {"contract": {"name": format!("contract-{uid}"), "namespace": "fluidos"}}
        }))
        .unwrap();
        a.metadata.namespace = Some("fluidos".into());
        a
    }

    #[test]
    fn a_grant_revoked_by_the_provider_is_no_acceptance() {
        let slice = |reason: &str| -> ResourceSlice {
            serde_json::from_value(json!({
                "apiVersion": "authentication.liqo.io/v1beta1", "kind": "ResourceSlice",
                "metadata": {"name": "s", "namespace": "liqo-tenant-p"},
                "spec": {},
                "status": {"conditions": [{"type": "Resources", "status": "Accepted",
                    "reason": reason, "message": "m"}]}
            }))
            .unwrap()
        };
        let t = ResourceSliceStatusConditionsType::Resources;
        assert_eq!(
            verdict(&slice("ContractGranted"), &t),
            Some(Verdict::Accepted)
        );
        let Some(Verdict::Denied(why)) = verdict(&slice(slice_class::REASON_REVOKED), &t) else {
            panic!("a revoked grant is accepted");
        };
        assert!(why.contains("ended its side of the Contract"), "{why}");
    }

    #[test]
    fn a_sibling_still_peering_with_the_provider_keeps_the_authentication() {
        let me = allocation("a", "p");
        let b = allocation("b", "p");
        assert!(peers_with(&b, &me, "p", true));
        // Not itself, another provider, a Contract that ended, one being
        // deleted, or one whose peering never started (no finalizer).
        assert!(!peers_with(&me, &me, "p", true));
        assert!(!peers_with(&allocation("b", "q"), &me, "p", true));
        assert!(!peers_with(&b, &me, "p", false));
        let mut deleting = b.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(!peers_with(&deleting, &me, "p", true));
        let mut unstarted = b.clone();
        unstarted.metadata.finalizers = None;
        assert!(!peers_with(&unstarted, &me, "p", true));
    }
}

//! Consumer side of a FLUIDOS node: the Solver, Discovery and Reservation
//! controllers that turn a user's intent into a purchased Contract.
//!
//! All state lives in Kubernetes objects (phases, transaction IDs, contract
//! references), so a restart at any point resumes where it stopped: a
//! reservation whose transaction ID is recorded is never reserved again, and a
//! purchase is idempotent on the provider for the same transaction.

pub mod credentials_sweep;
pub mod discovery;
pub mod purchase;
pub mod ranking;
pub mod reservation;
pub mod solver;
mod status;

#[cfg(test)]
mod fixtures;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::NodeIdentity;
pub use fluidos_controller::metrics::Metrics;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::reconcile::{ReconcileError, Reconciler};
use fluidos_rear_client::{ClientConfig, NodeKey, ProviderAddress, RearClient, RearError};

/// Field manager for server-side apply.
pub const MANAGER: &str = "fluidos-consumer";

/// What the consumer controllers need to know.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Namespace of Solvers, Discoveries, candidates, reservations.
    pub namespace: String,
    /// This node, with its Liqo cluster ID in `additionalInformation`.
    pub identity: NodeIdentity,
    /// Providers always queried, besides KnownClusters (`host:port`, or
    /// `host:port#sha256:<64 hex>` to call one over TLS pinned to its key).
    pub static_peers: Vec<ProviderAddress>,
    /// Per-provider timeout of one discovery query.
    pub peer_timeout: Duration,
    /// Providers asked at once, by all Discoveries together: a listing in
    /// flight holds up to [`fluidos_rear_client::MAX_LIST_BYTES`] and what
    /// it decodes to, so a thousand known providers (or many Discoveries)
    /// must not all answer into memory together.
    pub discovery_concurrency: usize,
    /// How long a Solver may stay in one running phase (upstream: 2 min).
    pub phase_timeout: Duration,
    /// How long the peering phase may take (upstream: 5 min).
    pub peering_timeout: Duration,
    /// This node's REAR key, presented to pinned providers (which then know
    /// the buyer by its fingerprint); `None`: pinned calls are anonymous.
    pub node_key: Option<Arc<NodeKey>>,
}

impl ConsumerConfig {
    /// Upstream's timers for this identity and namespace.
    pub fn new(namespace: impl Into<String>, identity: NodeIdentity) -> Self {
        ConsumerConfig {
            namespace: namespace.into(),
            identity,
            static_peers: Vec::new(),
            peer_timeout: Duration::from_secs(3),
            discovery_concurrency: 8,
            phase_timeout: Duration::from_secs(120),
            peering_timeout: Duration::from_secs(300),
            node_key: None,
        }
    }
}

pub use fluidos_api::service_delivery::{OffloadingGrant, OffloadingIssuer};

/// Shared by the three reconcilers.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Configuration.
    pub cfg: ConsumerConfig,
    /// REAR client.
    pub rear: RearClient,
    /// The node's metrics.
    pub metrics: Metrics,
    /// Whether the API server serves streaming lists, once probed by
    /// [`run_with_readiness`]; list-then-watch until then.
    streaming_lists: std::sync::OnceLock<bool>,
    /// Set when Services are bought to be delivered by Liqo: each Service
    /// PURCHASE to a pinned seller then carries a kubeconfig of this
    /// cluster for it. `None`: delivery over REAR.
    offloading: Option<OffloadingIssuer>,
    /// One permit per discovery query in flight, shared by all Discoveries
    /// (`cfg.discovery_concurrency` of them).
    discovery_slots: Arc<tokio::sync::Semaphore>,
}

/// A step of a reconcile, named in errors, logs and the failure metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Reading the Solver.
    ReadSolver,
    /// Listing PeeringCandidates.
    ListCandidates,
    /// Reading the Solver's Discovery.
    ReadDiscovery,
    /// Reading a Reservation.
    ReadReservation,
    /// Listing Allocations.
    ListAllocations,
    /// Deleting a child (left by an earlier Solver of the same name, or a
    /// finished Discovery to search again).
    DeleteChild,
    /// Creating the Discovery.
    CreateDiscovery,
    /// Adding the Solver to a candidate's interested solvers.
    MarkInterest,
    /// Deleting a Reservation whose candidate was refused.
    DeleteRefusedReservation,
    /// Applying the Reservation.
    ApplyReservation,
    /// Applying the Allocation.
    ApplyAllocation,
    /// Writing the Solver status.
    WriteSolverStatus,
    /// Reading the PeeringCandidate a Reservation names.
    ReadCandidate,
    /// Marking the candidate held or free.
    UpdateCandidate,
    /// The REAR reserve call.
    Reserve,
    /// The REAR purchase call.
    Purchase,
    /// Applying the consumer's Transaction record.
    ApplyTransaction,
    /// Applying the Secret holding the Contract's peering kubeconfig.
    ApplyCredentials,
    /// Applying the consumer's Contract.
    ApplyContract,
    /// Making the Contract own its credentials Secret.
    OwnCredentials,
    /// Deleting the spent Transaction record.
    DeleteTransaction,
    /// Writing the Reservation status.
    WriteReservationStatus,
    /// Listing KnownClusters.
    ListKnownClusters,
    /// Creating or refreshing a PeeringCandidate.
    UpsertCandidate,
    /// Marking a candidate its provider no longer lists.
    WithdrawCandidate,
    /// Writing the Discovery status.
    WriteDiscoveryStatus,
}

impl Step {
    /// snake_case name, the `reason` label of the failure metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::ReadSolver => "read_solver",
            Step::ListCandidates => "list_candidates",
            Step::ReadDiscovery => "read_discovery",
            Step::ReadReservation => "read_reservation",
            Step::ListAllocations => "list_allocations",
            Step::DeleteChild => "delete_child",
            Step::CreateDiscovery => "create_discovery",
            Step::MarkInterest => "mark_interest",
            Step::DeleteRefusedReservation => "delete_refused_reservation",
            Step::ApplyReservation => "apply_reservation",
            Step::ApplyAllocation => "apply_allocation",
            Step::WriteSolverStatus => "write_solver_status",
            Step::ReadCandidate => "read_candidate",
            Step::UpdateCandidate => "update_candidate",
            Step::Reserve => "reserve",
            Step::Purchase => "purchase",
            Step::ApplyTransaction => "apply_transaction",
            Step::ApplyCredentials => "apply_credentials",
            Step::ApplyContract => "apply_contract",
            Step::OwnCredentials => "own_credentials",
            Step::DeleteTransaction => "delete_transaction",
            Step::WriteReservationStatus => "write_reservation_status",
            Step::ListKnownClusters => "list_known_clusters",
            Step::UpsertCandidate => "upsert_candidate",
            Step::WithdrawCandidate => "withdraw_candidate",
            Step::WriteDiscoveryStatus => "write_discovery_status",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can go wrong in a reconcile; every variant says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API-server call failed; retried with backoff (at once after a conflict).
    #[error("{step}: kubernetes API")]
    Kube {
        /// The step.
        step: Step,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A provider could not be reached; retried with backoff.
    #[error("{step}: provider {provider}")]
    Rear {
        /// The step.
        step: Step,
        /// The provider's `host:port`.
        provider: String,
        /// The REAR error.
        #[source]
        source: RearError,
    },
    /// A PeeringCandidate kept changing under our writes.
    #[error("upsert_candidate: {0} still changing after 5 conflicting writes")]
    UnstableCandidate(String),
    /// An object is missing a name or namespace.
    #[error("object has no {0}")]
    Incomplete(&'static str),
    /// Could not build the REAR client.
    #[error("setup: {0}")]
    Setup(String),
    /// The kubeconfig for a Service seller delivering by Liqo could not be
    /// issued; retried with backoff.
    #[error("purchase: issuing the seller's kubeconfig: {0}")]
    Offloading(String),
}

impl Error {
    /// Wraps an API error of `step` (for `map_err`).
    pub fn kube(step: Step) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { step, source }
    }
}

impl ReconcileError for Error {
    fn step(&self) -> &'static str {
        match self {
            Error::Kube { step, .. } | Error::Rear { step, .. } => step.as_str(),
            Error::UnstableCandidate(_) => Step::UpsertCandidate.as_str(),
            Error::Incomplete(_) => "read_object",
            Error::Setup(_) => "setup",
            Error::Offloading(_) => "issue_offloading_kubeconfig",
        }
    }

    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Kube { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Context {
    /// A context with a REAR client using `rear_cfg`, presenting
    /// `cfg.node_key` to pinned providers.
    pub fn new(
        client: kube::Client,
        cfg: ConsumerConfig,
        rear_cfg: ClientConfig,
        metrics: Metrics,
    ) -> Result<Arc<Self>, Error> {
        Self::with_offloading(client, cfg, rear_cfg, metrics, None)
    }

    /// [`Context::new`], buying Services to be delivered by Liqo when
    /// `offloading` issues the sellers' kubeconfigs.
    pub fn with_offloading(
        client: kube::Client,
        cfg: ConsumerConfig,
        rear_cfg: ClientConfig,
        metrics: Metrics,
        offloading: Option<OffloadingIssuer>,
    ) -> Result<Arc<Self>, Error> {
        let rear = match &cfg.node_key {
            Some(key) => RearClient::with_key(rear_cfg, key.clone()),
            None => RearClient::new(rear_cfg),
        }
        .map_err(|e| Error::Setup(e.to_string()))?;
        let discovery_slots = Arc::new(tokio::sync::Semaphore::new(
            cfg.discovery_concurrency
                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        ));
        Ok(Arc::new(Context {
            discovery_slots,
            client,
            cfg,
            rear,
            metrics,
            streaming_lists: std::sync::OnceLock::new(),
            offloading,
        }))
    }

    /// The permits of discovery queries in flight.
    pub(crate) fn discovery_slots(&self) -> &tokio::sync::Semaphore {
        &self.discovery_slots
    }

    /// Reconcile bookkeeping (metrics, backoff, logs) for one controller.
    pub(crate) fn reconciler(&self, controller: &'static str) -> Reconciler {
        Reconciler::new(controller, &self.metrics)
    }
}

/// Runs the Solver, Discovery and Reservation controllers until `shutdown`.
///
/// On shutdown the controllers are dropped mid-flight: every reconcile is
/// idempotent and all state is in the API server, so nothing is lost.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + 'static) {
    run_with_readiness(ctx, ReadinessGate::new(), shutdown).await;
}

/// [`run`], opening `ready` once every controller has listed its objects
/// (its watch is established): a Solver created after that is acted on at
/// once.
pub async fn run_with_readiness(
    ctx: Arc<Context>,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let never = || futures::future::pending::<()>();
    let streaming = probe_streaming_lists(&ctx.client, &ctx.cfg.namespace).await;
    tracing::info!(
        streaming,
        "probed whether watches can start with streaming lists"
    );
    let _ = ctx.streaming_lists.set(streaming);
    // Solvers (and the three kinds a Solver owns), Discoveries, Reservations.
    let gates: [ReadinessGate; 6] = std::array::from_fn(|_| ReadinessGate::new());
    let report = {
        let gates = gates.clone();
        let client = ctx.client.clone();
        let ns = ctx.cfg.namespace.clone();
        async move {
            for gate in &gates {
                gate.wait().await;
            }
            first_lists(&client, &ns).await;
            first_writes(&client, &ns).await;
            tracing::info!("consumer controllers' watches established");
            ready.set_ready();
            futures::future::pending::<()>().await;
        }
    };
    let [
        solvers,
        owned_discoveries,
        owned_reservations,
        owned_allocations,
        discoveries,
        reservations,
    ] = gates;
    let controllers = async {
        tokio::join!(
            solver::run_gated(
                ctx.clone(),
                solver::Gates {
                    solvers,
                    discoveries: owned_discoveries,
                    reservations: owned_reservations,
                    allocations: owned_allocations,
                },
                never()
            ),
            discovery::run(ctx.clone(), discoveries, never()),
            credentials_sweep::run(ctx.client.clone(), ctx.cfg.namespace.clone()),
            reservation::run(ctx, reservations, never()),
            report,
        )
    };
    tokio::select! {
        _ = controllers => {}
        _ = shutdown => {}
    }
}

/// Lists once every kind the controllers read but do not watch, before the
/// consumer says it is ready: the API server answers the first list of a
/// freshly installed custom resource with 429 and `Retry-After: 1`, and that
/// second belongs to startup, not to the first Solver.
async fn first_lists(client: &kube::Client, ns: &str) {
    use fluidos_api::{Allocation, Contract, KnownCluster, PeeringCandidate, Transaction};
    use kube::api::{Api, ListParams};
    let params = ListParams::default().limit(1);
    let (pcs, known, txs, contracts, allocations) = (
        Api::<PeeringCandidate>::namespaced(client.clone(), ns),
        Api::<KnownCluster>::namespaced(client.clone(), ns),
        Api::<Transaction>::namespaced(client.clone(), ns),
        Api::<Contract>::namespaced(client.clone(), ns),
        Api::<Allocation>::namespaced(client.clone(), ns),
    );
    let (pcs, known, txs, contracts, allocations) = tokio::join!(
        pcs.list_metadata(&params),
        known.list_metadata(&params),
        txs.list_metadata(&params),
        contracts.list_metadata(&params),
        allocations.list_metadata(&params),
    );
    for (kind, outcome) in [
        ("PeeringCandidate", pcs.err()),
        ("KnownCluster", known.err()),
        ("Transaction", txs.err()),
        ("Contract", contracts.err()),
        ("Allocation", allocations.err()),
    ] {
        // Only a warm-up: a failure here shows again where it matters.
        if let Some(e) = outcome {
            tracing::debug!(kind, error = %e, "first list failed");
        }
    }
}

/// Creates with `dryRun=All` one object of each kind the consumer creates
/// before the consumer says it is ready: a fresh API server readies a kind's
/// write path on its first write, which cost the first Solver of a fresh
/// node about 300 ms. Only kinds the consumer creates itself: a dry run is
/// authorized like a real create, and least-privilege RBAC (the Helm chart)
/// grants nothing more (so not Solvers, which users create).
async fn first_writes(client: &kube::Client, ns: &str) {
    use fluidos_api::probe;
    use fluidos_controller::warm_up::dry_run_create;
    tokio::join!(
        dry_run_create(client, probe::discovery(ns)),
        dry_run_create(client, probe::peering_candidate(ns)),
        dry_run_create(client, probe::reservation(ns)),
        dry_run_create(client, probe::transaction(ns)),
        dry_run_create(client, probe::contract(ns)),
        dry_run_create(client, probe::allocation(ns)),
    );
}

/// How the consumer's watches start: with a streaming list (the initial
/// objects sent on the watch itself) where the API server offers it, so
/// "listed" also means the watch is open. With a separate list, a watch of a
/// freshly installed custom resource can hang for a second after the list
/// succeeded (the API server's watch cache catching up), and an event in
/// that second is only seen when the watch is retried. Servers without
/// streaming lists (before 1.27, or with the WatchList gate off) list first.
pub(crate) fn watch_config(ctx: &Context) -> kube::runtime::watcher::Config {
    let config = kube::runtime::watcher::Config::default();
    if ctx.streaming_lists.get().copied().unwrap_or(false) {
        config.streaming_lists()
    } else {
        config
    }
}

/// Whether the API server answers a streaming list (a watch that sends the
/// initial objects and then a bookmark marking their end) for Solvers in
/// `ns`, within a few seconds.
async fn probe_streaming_lists(client: &kube::Client, ns: &str) -> bool {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let api = kube::Api::<kube::core::PartialObjectMeta<fluidos_api::Solver>>::namespaced(
        client.clone(),
        ns,
    );
    let probe = async {
        let Ok(events) = api
            .watch_metadata(&WatchParams::streaming_lists().timeout(5), "")
            .await
        else {
            return false;
        };
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Bookmark(b)) => {
                    return b
                        .metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .is_some_and(|v| v == "true");
                }
                Ok(WatchEvent::Added(_)) => {}
                Ok(_) | Err(_) => return false,
            }
        }
        false
    };
    tokio::time::timeout(std::time::Duration::from_secs(6), probe)
        .await
        .unwrap_or(false)
}

/// The metadata of the `K`s in `ns`, for a controller that owns them:
/// changes wake the owner, and `ready` opens once the watch has sent its
/// initial objects.
pub(crate) fn owned<K>(
    ctx: &Context,
    ns: &str,
    ready: ReadinessGate,
) -> impl futures::Stream<Item = Result<kube::core::PartialObjectMeta<K>, kube::runtime::watcher::Error>>
+ Send
+ 'static
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::TryStreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let api = kube::Api::<kube::core::PartialObjectMeta<K>>::namespaced(ctx.client.clone(), ns);
    watcher::watcher(api, watch_config(ctx))
        .default_backoff()
        .inspect_ok(move |event| {
            if matches!(event, Event::InitDone) {
                ready.set_ready();
            }
        })
        .touched_objects()
}

/// The objects of `api` for a controller: its cache and the stream feeding
/// it, opening `ready` once the first complete list is in the cache.
///
/// Not `Store::wait_until_ready`: it wakes only the last of several
/// concurrent waiters, and the controller's own runner is one of them.
pub(crate) fn watched<K>(
    ctx: &Context,
    api: kube::Api<K>,
    ready: ReadinessGate,
) -> (
    kube::runtime::reflector::Store<K>,
    impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use futures::TryStreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = watcher::watcher(api, watch_config(ctx))
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |event| {
            // After `reflect`: the cache already holds the list.
            if matches!(event, Event::InitDone) {
                ready.set_ready();
            }
        })
        .applied_objects();
    (reader, stream)
}

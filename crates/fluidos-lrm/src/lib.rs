//! FLUIDOS local resource manager (Go `local-resource-manager`, fluidos-node.md §3.1–3.2).
//!
//! Publishes what this cluster sells as `Flavor` objects and keeps them in step:
//!
//! * **K8Slice flavors**, one per Kubernetes Node labelled
//!   `<node resource label>=true`: allocatable minus the effective requests of
//!   the pods bound to the node (and minus measured usage when metrics.k8s.io
//!   is served), recomputed whenever the node, its pods or the flavor's ledger
//!   change. Named `<domain>-k8slice-<sha256(node uid)[..16]>` (see
//!   [`names::NAME_HASH_HEX`]), owned by the core `v1` Node.
//! * **Service flavors**, one per valid `ServiceBlueprint`, with the category's
//!   configuration template or the blueprint's own `spec.configurationSchema`;
//!   the blueprint's status says `Ready` or why not.
//! * **Never under a live contract**: a flavor whose `status.ledger` (written by
//!   the REAR gateway) has live holds or sales is never shrunk below what they
//!   take and never deleted; it carries the finalizer
//!   `nodecore.fluidos.eu/ledger` while they exist, turns `availability: false`
//!   when its source goes, and is deleted once the ledger empties.
//!
//! # Structure
//!
//! Three kube-runtime controllers share one watch per kind (nodes with the
//! resource label, flavors labelled `app.kubernetes.io/managed-by=fluidos-lrm`,
//! blueprints, and bound unfinished pods), each feeding a reflector cache and
//! triggering the others through `reconcile_on`:
//!
//! | controller | primary | also triggered by |
//! |---|---|---|
//! | node | labelled Node | its pods (node → load index), its flavor |
//! | blueprint | ServiceBlueprint | its flavor |
//! | lifecycle | managed Flavor | its Node or ServiceBlueprint (including their deletion) |
//!
//! Pods are not cached: an index keeps per pod only its node and
//! effective request, so one pod event reconciles exactly one node and a pod
//! status update reconciles none. Every reconcile is fetch → build (pure
//! functions in [`k8slice`] and [`service`]) → server-side apply (only when
//! something differs) → status/events.
//!
//! Events (`events.k8s.io`, reporter `fluidos-local-resource-manager`):
//! `FlavorCreated`, `FlavorUpdated`, `FlavorDeleted`, `FlavorWithdrawn`
//! (Normal, regarding the Flavor, related to its Node or ServiceBlueprint), and
//! for an invalid blueprint a Warning regarding the blueprint with the reason of
//! its `Ready=False` condition (`UnknownCategory`, `InvalidConfigurationSchema`,
//! `InvalidTemplate`).

mod blueprint_controller;
pub mod config;
mod context;
pub mod error;
pub mod k8slice;
mod lifecycle_controller;
pub mod metrics;
pub mod names;
mod node_controller;
pub mod owner;
mod pod_index;
pub mod requests;
pub mod service;

use std::future::Future;
use std::sync::Arc;

use fluidos_api::Flavor;
use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::service_blueprint::ServiceBlueprint;
use fluidos_controller::reconcile::{Reconciler, drain};
use fluidos_controller::{ReadinessGate, events};
use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, NodeStatus, Pod};
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

pub use blueprint_controller::{PUBLISHED, READY};
pub use config::LrmConfig;
pub use error::{BuildError, ConfigError, Error};

use context::{Context, Gate, Synced};
use k8slice::Publisher;
use owner::SourceKind;
use pod_index::PodIndex;

/// How long shutdown waits for queued events to be published.
const EVENT_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// Readiness of the manager: true once every cache has its first full list
/// (nodes, pods, flavors, blueprints), i.e. once decisions are made on
/// complete data. With auto-discovery disabled it is ready at once.
pub type Readiness = ReadinessGate;

/// Runs both controllers (K8Slice flavors from nodes, Service flavors from
/// blueprints) until `shutdown` completes.
///
/// Fails at once on an invalid configuration; API errors during operation are
/// retried, never fatal. Needs RBAC: nodes, pods (cluster-wide) get/list/watch;
/// nodes.metrics.k8s.io get (optional); flavors and serviceblueprints in
/// `cfg.namespace` get/list/watch/patch/delete, serviceblueprints/status patch;
/// events.k8s.io events create/patch.
pub async fn run(
    client: Client,
    cfg: LrmConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    run_with_readiness(client, cfg, Readiness::new(), shutdown).await
}

/// [`run`], reporting readiness through `readiness`.
#[expect(
    clippy::too_many_lines,
    reason = "wiring: four watches feeding three controllers through shared caches and triggers; split up, the data flow between them no longer reads in one place"
)]
pub async fn run_with_readiness(
    client: Client,
    cfg: LrmConfig,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let publisher = Publisher::new(&cfg)?;
    if !cfg.enable_auto_discovery {
        tracing::info!("auto-discovery disabled: no flavor is published or maintained");
        readiness.set_ready();
        shutdown.await;
        return Ok(());
    }
    let shutdown = shutdown.boxed().shared();
    let ns = publisher.namespace.clone();
    let domain = publisher.identity.domain.clone();

    let (node_reader, node_writer) = reflector::store::<Node>();
    let (flavor_reader, flavor_writer) = reflector::store::<Flavor>();
    let (bp_reader, bp_writer) = reflector::store::<ServiceBlueprint>();
    let pods = Arc::new(PodIndex::default());
    let synced = Synced::default();

    let (to_node, node_triggers) = mpsc::unbounded::<ObjectRef<Node>>();
    let (to_bp, bp_triggers) = mpsc::unbounded::<ObjectRef<ServiceBlueprint>>();
    let (to_flavor, flavor_triggers) = mpsc::unbounded::<ObjectRef<Flavor>>();

    let flavor_of = {
        let (ns, domain) = (ns.clone(), domain.clone());
        move |kind: FlavorTypeIdentifier, uid: &str| {
            ObjectRef::<Flavor>::new(&names::flavor_name(&domain, kind, uid)).within(&ns)
        }
    };

    // Labelled nodes; a node losing the label leaves the cache like a deleted one.
    let nodes = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default()
            .labels(&format!("{}=true", publisher.node_resource_label))
            .any_semantic(),
    )
    .default_backoff()
    .modify(strip_node)
    .reflect(node_writer)
    .inspect_ok(open_on_sync(&synced.nodes))
    .inspect_err(|e| tracing::warn!(error = %e, "nodes watch failed; retrying"))
    .touched_objects()
    .inspect_ok({
        let (to_flavor, flavor_of) = (to_flavor.clone(), flavor_of.clone());
        move |n| {
            if let Some(uid) = n.uid() {
                let _ = to_flavor.unbounded_send(flavor_of(FlavorTypeIdentifier::K8Slice, &uid));
            }
        }
    });

    let flavors = watcher(
        Api::<Flavor>::namespaced(client.clone(), &ns),
        watcher::Config::default()
            .labels(&format!(
                "{}={}",
                names::MANAGED_BY_LABEL,
                names::MANAGED_BY
            ))
            .any_semantic(),
    )
    .default_backoff()
    .modify(|f| f.metadata.managed_fields = None)
    .reflect(flavor_writer)
    .inspect_ok(open_on_sync(&synced.flavors))
    .inspect_err(|e| tracing::warn!(error = %e, "flavors watch failed; retrying"))
    .touched_objects()
    .inspect_ok({
        let ns = ns.clone();
        move |f| {
            for o in f.owner_references() {
                match SourceKind::of(o) {
                    Some(SourceKind::Node) => {
                        let _ = to_node.unbounded_send(ObjectRef::new(&o.name));
                    }
                    Some(SourceKind::ServiceBlueprint) => {
                        let _ = to_bp.unbounded_send(ObjectRef::new(&o.name).within(&ns));
                    }
                    None => {}
                }
            }
        }
    });

    let blueprints = watcher(
        Api::<ServiceBlueprint>::namespaced(client.clone(), &ns),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(|b| b.metadata.managed_fields = None)
    .reflect(bp_writer)
    .inspect_ok(open_on_sync(&synced.blueprints))
    .inspect_err(|e| tracing::warn!(error = %e, "blueprints watch failed; retrying"))
    .touched_objects()
    .inspect_ok(move |b| {
        if let Some(uid) = b.uid() {
            let _ = to_flavor.unbounded_send(flavor_of(FlavorTypeIdentifier::Service, &uid));
        }
    });

    // Bound, unfinished pods → per-node load; each change triggers its node.
    let pod_triggers = watcher(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default()
            .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
            .any_semantic(),
    )
    .default_backoff()
    .filter_map({
        let (pods, node_reader) = (pods.clone(), node_reader.clone());
        move |ev| {
            let refs: Vec<ObjectRef<Node>> = match ev {
                Ok(ev) => pods
                    .apply(&ev)
                    .into_iter()
                    .map(|n| ObjectRef::new(&n))
                    .filter(|r| node_reader.get(r).is_some())
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "pod watch failed; retrying");
                    Vec::new()
                }
            };
            std::future::ready((!refs.is_empty()).then(|| stream::iter(refs)))
        }
    })
    .flatten();

    let (event_sink, event_queue) = mpsc::unbounded();
    let events = tokio::spawn(context::publish_events(
        events::recorder(client.clone(), names::REPORTER),
        event_queue,
    ));
    let ctx = Arc::new(Context {
        client: client.clone(),
        flavors_api: Api::namespaced(client.clone(), &ns),
        publisher,
        nodes: node_reader.clone(),
        flavors: flavor_reader.clone(),
        blueprints: bp_reader.clone(),
        pods,
        events: event_sink,
        metrics: metrics::MetricsProbe::new(client),
        metrics_resync: cfg.metrics_resync,
        synced,
    });
    let config = controller::Config::default().concurrency(cfg.concurrency);

    let node_controller = Controller::for_stream(nodes, node_reader)
        .with_config(config.clone())
        .reconcile_on(pod_triggers)
        .reconcile_on(node_triggers)
        .graceful_shutdown_on(shutdown.clone());
    let node_controller = {
        let rec = Reconciler::new("node", &cfg.metrics);
        drain(
            rec.clone(),
            node_controller.run(
                observed(&rec, node_controller::reconcile),
                move |n, e, _| rec.error_policy(n.as_ref(), e),
                ctx.clone(),
            ),
        )
    };
    let blueprint_controller = Controller::for_stream(blueprints, bp_reader)
        .with_config(config.clone())
        .reconcile_on(bp_triggers)
        .graceful_shutdown_on(shutdown.clone());
    let blueprint_controller = {
        let rec = Reconciler::new("serviceblueprint", &cfg.metrics);
        drain(
            rec.clone(),
            blueprint_controller.run(
                observed(&rec, blueprint_controller::reconcile),
                move |b, e, _| rec.error_policy(b.as_ref(), e),
                ctx.clone(),
            ),
        )
    };
    let lifecycle_controller = Controller::for_stream(flavors, flavor_reader)
        .with_config(config)
        .reconcile_on(flavor_triggers)
        .graceful_shutdown_on(shutdown.clone());
    let lifecycle_controller = {
        let rec = Reconciler::new("flavor-lifecycle", &cfg.metrics);
        drain(
            rec.clone(),
            lifecycle_controller.run(
                observed(&rec, lifecycle_controller::reconcile),
                move |f, e, _| rec.error_policy(f.as_ref(), e),
                ctx.clone(),
            ),
        )
    };
    let ready = async {
        tokio::select! {
            () = ctx.caches_ready() => {
                tracing::info!(pods = ctx.pods.pods(), "local resource manager ready");
                readiness.set_ready();
            }
            () = shutdown.clone() => {}
        }
    };
    tracing::info!(
        namespace = ctx.namespace(),
        label = ctx.publisher.node_resource_label,
        "local resource manager started"
    );
    futures::join!(
        node_controller,
        blueprint_controller,
        lifecycle_controller,
        ready
    );
    // Flush the events still queued (bounded: the API server may be gone).
    drop(ctx);
    if tokio::time::timeout(EVENT_FLUSH, events).await.is_err() {
        tracing::warn!("unpublished events dropped at shutdown");
    }
    tracing::info!("local resource manager stopped");
    Ok(())
}

/// Opens `gate` once the watch has delivered its first full list (the
/// reflector has stored it by then).
fn open_on_sync<K>(gate: &Gate) -> impl FnMut(&watcher::Event<K>) + use<K> {
    let gate = gate.clone();
    move |ev| {
        if matches!(ev, watcher::Event::InitDone) {
            gate.open();
        }
    }
}

/// Keeps from a Node only what a flavor is computed from (the cache holds
/// every labelled node; `status.images` alone is often tens of kilobytes).
fn strip_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    n.metadata.annotations = None;
    n.spec = None;
    if let Some(s) = n.status.as_mut() {
        *s = NodeStatus {
            allocatable: s.allocatable.take(),
            capacity: s.capacity.take(),
            node_info: s.node_info.take(),
            ..Default::default()
        };
    }
}

/// `reconcile` counted, timed and its backoff reset through `rec`.
fn observed<K, F, Fut>(
    rec: &Reconciler,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> BoxFuture<'static, Result<controller::Action, Error>>
+ use<K, F, Fut>
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<controller::Action, Error>> + Send + 'static,
{
    let rec = rec.clone();
    move |obj, ctx| {
        let rec = rec.clone();
        let run = reconcile(obj.clone(), ctx);
        async move { rec.observe(obj.as_ref(), run).await }.boxed()
    }
}

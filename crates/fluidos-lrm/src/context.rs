//! State shared by the three controllers, and the flavor writes they all use.

use std::sync::Arc;
use std::time::Duration;

use fluidos_api::Flavor;
use fluidos_api::flavor::{FlavorSpec, FlavorType, FlavorTypeData};
use fluidos_api::ledger::{self, LedgerState, Resources};
use fluidos_api::service_blueprint::ServiceBlueprint;
use fluidos_controller::{api_error, time};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::error::{Error, Step};
use crate::k8slice::{self, DesiredFlavor, Publisher};
use crate::metrics::MetricsProbe;
use crate::names::{
    BLUEPRINT_LABEL, FIELD_MANAGER, LEDGER_FINALIZER, MANAGED_BY_LABEL, NODE_LABEL,
};
use crate::owner::SourceKind;
use crate::pod_index::PodIndex;

/// Everything a reconcile needs: client, caches, configuration, event recorder.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) publisher: Publisher,
    pub(crate) flavors_api: Api<Flavor>,
    pub(crate) nodes: Store<Node>,
    pub(crate) flavors: Store<Flavor>,
    pub(crate) blueprints: Store<ServiceBlueprint>,
    pub(crate) pods: Arc<PodIndex>,
    pub(crate) events: EventSink,
    pub(crate) metrics: MetricsProbe,
    pub(crate) metrics_resync: Duration,
    pub(crate) synced: Synced,
}

/// Events waiting to be published.
pub(crate) type EventSink = futures::channel::mpsc::UnboundedSender<(Event, ObjectReference)>;

/// How many events are published at once. Events are informational; keeping
/// them to a trickle leaves the API server's write capacity to the flavors
/// (a cold start publishes one event per flavor).
const EVENTS_IN_FLIGHT: usize = 2;

/// Publishes queued events until every sender is gone.
pub(crate) async fn publish_events(
    recorder: Recorder,
    queue: futures::channel::mpsc::UnboundedReceiver<(Event, ObjectReference)>,
) {
    use futures::StreamExt;
    queue
        .for_each_concurrent(EVENTS_IN_FLIGHT, |(ev, regarding)| {
            let recorder = recorder.clone();
            async move {
                if let Err(e) = recorder.publish(&ev, &regarding).await {
                    tracing::warn!(reason = ev.reason, error = %e, "publishing an event failed");
                }
            }
        })
        .await;
}

/// A flag raised once and awaited by any number of tasks.
///
/// (`Store::wait_until_ready` wakes only the last of several concurrent
/// waiters, so reconciles waiting on another controller's cache would hang.)
#[derive(Clone, Debug, Default)]
pub(crate) struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    /// Raises the flag.
    pub(crate) fn open(&self) {
        self.0.send_replace(true);
    }

    /// Waits until the flag is raised.
    pub(crate) async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

/// One gate per cache, opened when its first full list is in.
#[derive(Clone, Debug, Default)]
pub(crate) struct Synced {
    pub nodes: Gate,
    pub flavors: Gate,
    pub blueprints: Gate,
}

/// What the ledger of a flavor says now.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LedgerView {
    /// Some sale or unexpired hold exists.
    pub live: bool,
    /// What live entries take.
    pub committed: Resources,
    /// Time until the earliest live hold expires.
    pub next_expiry: Option<Duration>,
}

/// Reads the ledger of `flavor` at `now` (pure).
pub(crate) fn ledger_view(flavor: Option<&Flavor>, now: Timestamp) -> Result<LedgerView, Error> {
    let entries = flavor
        .and_then(|f| f.status.as_ref())
        .and_then(|s| s.ledger.as_deref())
        .unwrap_or_default();
    let now_s = time::format(now);
    let committed = ledger::committed(entries, &now_s).map_err(|e| Error::Ledger {
        flavor: flavor.map(|f| f.name_any()).unwrap_or_default(),
        message: e.to_string(),
    })?;
    let live: Vec<_> = entries
        .iter()
        .filter(|e| ledger::is_live(e, &now_s))
        .collect();
    let next_expiry = live
        .iter()
        .filter(|e| e.state == LedgerState::Held)
        .filter_map(|e| e.expiration_time.as_deref()?.parse::<Timestamp>().ok())
        .map(|exp| exp.as_second().saturating_sub(now.as_second()))
        .min()
        .map(|secs| Duration::from_secs(u64::try_from(secs.max(0)).unwrap_or(0) + 1));
    Ok(LedgerView {
        live: !live.is_empty(),
        committed,
        next_expiry,
    })
}

/// True when our finalizer is on the flavor.
pub(crate) fn has_finalizer(f: &Flavor) -> bool {
    f.finalizers().iter().any(|x| x == LEDGER_FINALIZER)
}

/// Raises a K8Slice spec's characteristics to at least `committed` (pure).
pub(crate) fn clamp_spec(
    spec: &mut FlavorSpec,
    committed: &Resources,
) -> Result<Vec<&'static str>, Error> {
    let Ok(FlavorTypeData::K8Slice(mut slice)) = spec.flavor_type.parse() else {
        return Ok(Vec::new());
    };
    let raised = k8slice::clamp_to_committed(&mut slice.characteristics, committed)?;
    if !raised.is_empty() {
        spec.flavor_type = FlavorType::k8slice(&slice);
    }
    Ok(raised)
}

/// The server-side apply body of a flavor (pure).
///
/// `resource_version` makes the apply conditional: a ledger write by the REAR
/// gateway in between fails it with 409 instead of being decided on stale data.
pub(crate) fn apply_body(
    namespace: &str,
    d: &DesiredFlavor,
    spec: &FlavorSpec,
    finalizer: bool,
    resource_version: Option<&str>,
) -> serde_json::Value {
    let mut metadata = json!({
        "name": d.name,
        "namespace": namespace,
        "labels": d.labels,
        "ownerReferences": [d.owner],
    });
    if finalizer {
        metadata["finalizers"] = json!([LEDGER_FINALIZER]);
    }
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "apiVersion": Flavor::api_version(&()),
        "kind": Flavor::kind(&()),
        "metadata": metadata,
        "spec": spec,
    })
}

/// True when `current` already is what we would apply (pure).
pub(crate) fn up_to_date(
    current: &Flavor,
    d: &DesiredFlavor,
    spec: &FlavorSpec,
    finalizer: bool,
) -> bool {
    let labels = current.labels();
    current.spec == *spec
        && d.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && current.owner_references().contains(&d.owner)
        && has_finalizer(current) == finalizer
}

/// What [`Context::ensure`] did, and the ledger it decided on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ensured {
    /// What was written.
    pub change: Change,
    /// The flavor's ledger as read for the decision.
    pub ledger: LedgerView,
}

/// What [`Context::ensure`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The flavor did not exist and was created.
    Created,
    /// Its spec changed.
    Updated,
    /// Only its finalizer, labels or owner references changed.
    Metadata,
    /// Nothing to do.
    Unchanged,
}

/// An object reference to a flavor.
pub(crate) fn flavor_ref(namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(Flavor::api_version(&()).into_owned()),
        kind: Some(Flavor::kind(&()).into_owned()),
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        uid,
        ..Default::default()
    }
}

/// How many times a write is retried after a conflict, on a fresh read.
const CONFLICT_ATTEMPTS: usize = 3;

impl Context {
    pub(crate) fn namespace(&self) -> &str {
        &self.publisher.namespace
    }

    /// The cached flavor named `name`.
    pub(crate) fn cached_flavor(&self, name: &str) -> Option<Arc<Flavor>> {
        self.flavors
            .get(&ObjectRef::new(name).within(self.namespace()))
    }

    /// Waits for the caches every decision depends on.
    pub(crate) async fn caches_ready(&self) {
        self.synced.nodes.wait().await;
        self.synced.flavors.wait().await;
        self.synced.blueprints.wait().await;
        self.pods.wait_ready().await;
    }

    /// Queues an event; a background task publishes it (see [`EventSink`]).
    pub(crate) fn event(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: related,
        };
        if self.events.unbounded_send((ev, regarding)).is_err() {
            tracing::debug!(reason, "event dropped: publisher stopped");
        }
    }

    /// Makes the flavor `d` exist as desired: spec (clamped to the ledger's
    /// commitments when `clamp`), labels, owner, and the ledger finalizer
    /// exactly while live entries exist. Writes only when something differs.
    pub(crate) async fn ensure(&self, d: &DesiredFlavor, clamp: bool) -> Result<Ensured, Error> {
        let mut current = self.cached_flavor(&d.name).map(|f| (*f).clone());
        let mut attempt = 1;
        loop {
            let view = ledger_view(current.as_ref(), Timestamp::now())?;
            let mut spec = d.spec.clone();
            if clamp && view.live {
                let raised = clamp_spec(&mut spec, &view.committed)?;
                if !raised.is_empty() {
                    tracing::info!(flavor = d.name, ?raised, committed = %view.committed,
                        "keeping characteristics at what the ledger has committed");
                }
            }
            let result = match &current {
                Some(cur) if cur.metadata.deletion_timestamp.is_some() => {
                    // Being deleted: no new finalizer may be added and a spec
                    // change is pointless; release ours once nothing is live.
                    if !view.live && has_finalizer(cur) {
                        self.remove_finalizer(cur).await.map(|()| Change::Metadata)
                    } else {
                        Ok(Change::Unchanged)
                    }
                }
                Some(cur) if up_to_date(cur, d, &spec, view.live) => Ok(Change::Unchanged),
                _ => {
                    let rv = current.as_ref().and_then(|c| c.resource_version());
                    let body = apply_body(self.namespace(), d, &spec, view.live, rv.as_deref());
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    match self
                        .flavors_api
                        .patch(&d.name, &params, &Patch::Apply(&body))
                        .await
                    {
                        Ok(written) => {
                            let change = match &current {
                                None => Change::Created,
                                Some(cur) if cur.spec != spec => Change::Updated,
                                Some(_) => Change::Metadata,
                            };
                            self.announce(d, change, written.uid());
                            Ok(change)
                        }
                        Err(e) => Err(Error::kube(Step::ApplyFlavor)(e)),
                    }
                }
            };
            match result {
                Err(e) if e.is_conflict() && attempt < CONFLICT_ATTEMPTS => {
                    attempt += 1;
                    tracing::debug!(flavor = d.name, "conflict; retrying on a fresh read");
                    current = self
                        .flavors_api
                        .get_opt(&d.name)
                        .await
                        .map_err(Error::kube(Step::ReadFlavor))?;
                }
                other => {
                    return other.map(|change| Ensured {
                        change,
                        ledger: view,
                    });
                }
            }
        }
    }

    fn announce(&self, d: &DesiredFlavor, change: Change, uid: Option<String>) {
        let (reason, action, verb) = match change {
            Change::Created => ("FlavorCreated", "Create", "created"),
            Change::Updated => ("FlavorUpdated", "Update", "updated"),
            Change::Metadata | Change::Unchanged => {
                tracing::debug!(flavor = d.name, ?change, "flavor metadata synced");
                return;
            }
        };
        tracing::info!(
            flavor = d.name,
            source = d.owner.name,
            kind = d.owner.kind,
            "flavor {verb}"
        );
        let source = ObjectReference {
            api_version: Some(d.owner.api_version.clone()),
            kind: Some(d.owner.kind.clone()),
            name: Some(d.owner.name.clone()),
            uid: Some(d.owner.uid.clone()),
            namespace: SourceKind::of(&d.owner)
                .is_none_or(SourceKind::is_namespaced)
                .then(|| self.namespace().to_owned()),
            ..Default::default()
        };
        self.event(
            EventType::Normal,
            reason,
            action,
            format!(
                "Flavor {} {verb} from {} {}",
                d.name, d.owner.kind, d.owner.name
            ),
            flavor_ref(self.namespace(), &d.name, uid),
            Some(source),
        );
    }

    /// Removes our finalizer, conditional on the flavor being unchanged since read
    /// (a merge patch carrying `resourceVersion` is refused with 409 otherwise).
    pub(crate) async fn remove_finalizer(&self, f: &Flavor) -> Result<(), Error> {
        if !has_finalizer(f) {
            return Ok(());
        }
        let rest: Vec<&String> = f
            .finalizers()
            .iter()
            .filter(|x| *x != LEDGER_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "resourceVersion": f.resource_version(),
            "finalizers": rest,
        }});
        self.flavors_api
            .patch(
                &f.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error::kube(Step::RemoveFinalizer))?;
        tracing::info!(flavor = f.name_any(), "ledger empty; finalizer released");
        Ok(())
    }

    /// Deletes a flavor unless it changed since read.
    pub(crate) async fn delete_flavor(&self, f: &Flavor) -> Result<bool, Error> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: f.resource_version(),
                uid: f.uid(),
            }),
            ..Default::default()
        };
        match self.flavors_api.delete(&f.name_any(), &dp).await {
            Ok(_) => Ok(true),
            Err(e) if api_error::is_not_found(&e) => Ok(false),
            Err(e) => Err(Error::kube(Step::DeleteFlavor)(e)),
        }
    }

    /// Marks a flavor unsellable and pins it with the finalizer (its source is gone
    /// but sales or holds on it are live). Returns true when something was written.
    pub(crate) async fn withdraw(&self, f: &Flavor) -> Result<bool, Error> {
        let terminating = f.metadata.deletion_timestamp.is_some();
        let pinned = has_finalizer(f);
        if !f.spec.availability && (pinned || terminating) {
            return Ok(false);
        }
        let ours = |o: &&OwnerReference| SourceKind::of(o).is_some();
        let Some(owner) = f.owner_references().iter().find(ours).cloned() else {
            return Ok(false);
        };
        let mut spec = f.spec.clone();
        spec.availability = false;
        // Only the labels this crate sets: applying others would claim them.
        let labels = f
            .labels()
            .iter()
            .filter(|(k, _)| [MANAGED_BY_LABEL, NODE_LABEL, BLUEPRINT_LABEL].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let d = DesiredFlavor {
            name: f.name_any(),
            labels,
            owner,
            spec: spec.clone(),
        };
        // A terminating object takes no new finalizer: keep whatever it has.
        let finalizer = pinned || !terminating;
        let body = apply_body(
            self.namespace(),
            &d,
            &spec,
            finalizer,
            f.resource_version().as_deref(),
        );
        self.flavors_api
            .patch(
                &d.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(Error::kube(Step::WithdrawFlavor))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LrmConfig;
    use crate::requests::NodeLoad;
    use fluidos_api::NodeIdentity;
    use fluidos_api::flavor::FlavorStatus;
    use fluidos_api::ledger::{LedgerEntry, LedgerResources};
    use k8s_openapi::api::core::v1::{Node, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn desired() -> DesiredFlavor {
        let publisher = Publisher::new(&LrmConfig::new(NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "n1".into(),
            ip: "1.2.3.4:1".into(),
            additional_information: None,
        }))
        .unwrap();
        let node = Node {
            metadata: ObjectMeta {
                name: Some("w".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(
                    [("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), Quantity(v.into())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        k8slice::build(&node, &NodeLoad::default(), None, &publisher).unwrap()
    }

    fn entry(state: LedgerState, cpu: &str, exp: Option<&str>) -> LedgerEntry {
        LedgerEntry {
            transaction_id: "t".into(),
            buyer_id: "b".into(),
            buyer_key: None,
            buyer_address: None,
            source_peer: None,
            state,
            resources: Some(LedgerResources {
                cpu: cpu.into(),
                memory: "1Gi".into(),
                pods: "1".into(),
                gpu: None,
                storage: None,
            }),
            expiration_time: exp.map(Into::into),
            contract: None,
        }
    }

    fn flavor(d: &DesiredFlavor, ledger: Vec<LedgerEntry>) -> Flavor {
        let mut f = Flavor::new(&d.name, d.spec.clone());
        f.metadata.labels = Some(d.labels.clone());
        f.metadata.owner_references = Some(vec![d.owner.clone()]);
        f.status = Some(FlavorStatus {
            ledger: Some(ledger),
            ..Default::default()
        });
        f
    }

    #[test]
    fn ledger_view_counts_live_entries_and_next_expiry() {
        let d = desired();
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let f = flavor(
            &d,
            vec![
                entry(LedgerState::Sold, "1", None),
                entry(LedgerState::Held, "500m", Some("2026-11-30T10:00:30Z")),
                entry(LedgerState::Held, "2", Some("2026-11-30T09:59:00Z")),
            ],
        );
        let v = ledger_view(Some(&f), now).unwrap();
        assert!(v.live);
        assert_eq!(v.committed.cpu.to_string(), "1500m");
        assert_eq!(v.next_expiry, Some(Duration::from_secs(31)));
        let empty = ledger_view(Some(&flavor(&d, vec![])), now).unwrap();
        assert!(!empty.live && empty.next_expiry.is_none());
        assert!(!ledger_view(None, now).unwrap().live);
        let expired = flavor(
            &d,
            vec![entry(LedgerState::Held, "1", Some("2026-11-30T09:00:00Z"))],
        );
        assert!(!ledger_view(Some(&expired), now).unwrap().live);
    }

    #[test]
    fn clamp_and_up_to_date() {
        let d = desired();
        let mut f = flavor(&d, vec![]);
        assert!(up_to_date(&f, &d, &d.spec, false));
        assert!(!up_to_date(&f, &d, &d.spec, true), "finalizer missing");
        f.metadata.finalizers = Some(vec![LEDGER_FINALIZER.into()]);
        assert!(up_to_date(&f, &d, &d.spec, true));

        let mut spec = d.spec.clone();
        let committed = Resources::of_entry(&LedgerResources {
            cpu: "6".into(),
            memory: "1Gi".into(),
            pods: "1".into(),
            gpu: None,
            storage: None,
        })
        .unwrap();
        assert_eq!(clamp_spec(&mut spec, &committed).unwrap(), vec!["cpu"]);
        assert_eq!(spec.flavor_type.type_data["characteristics"]["cpu"], "6");
        assert!(!up_to_date(&f, &d, &spec, true), "spec differs");
    }

    #[test]
    fn apply_body_is_conditional_and_carries_the_finalizer_only_when_asked() {
        let d = desired();
        let b = apply_body("fluidos", &d, &d.spec, true, Some("42"));
        assert_eq!(b["apiVersion"], "nodecore.fluidos.eu/v1alpha1");
        assert_eq!(b["kind"], "Flavor");
        assert_eq!(b["metadata"]["resourceVersion"], "42");
        assert_eq!(b["metadata"]["finalizers"], json!([LEDGER_FINALIZER]));
        assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(b["metadata"]["ownerReferences"][0]["apiVersion"], "v1");
        let b = apply_body("fluidos", &d, &d.spec, false, None);
        assert!(b["metadata"].get("finalizers").is_none());
        assert!(b["metadata"].get("resourceVersion").is_none());
        assert_eq!(b["spec"]["flavorType"]["typeIdentifier"], "K8Slice");
    }
}

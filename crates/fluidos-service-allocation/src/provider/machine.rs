//! The provider's decisions on a Service Allocation, as a pure function of
//! what was read: which writes to make and the status to write.
//!
//! ```text
//! (none) ──prepare fails──────────────────────────────▶ Error "<why>" (nothing created)
//!   │ prepared: namespace + objects + credentials applied
//!   ▼
//! ResourceCreation "Waiting…" / "Service degraded: …" ◀──▶ Active
//!   │ Contract gone                      │ Allocation deleted (finalizer)
//!   ▼                                    ▼
//! Released "Contract … ended…"      namespace deleted, finalizer removed
//! ```

use std::time::Duration;

use fluidos_api::Allocation;
use fluidos_api::allocation::{AllocationState, AllocationStatus};
use fluidos_api::common::HostingPolicy;
use fluidos_api::service_delivery;
use fluidos_blueprint::{CONTRACT_LABEL, ServiceInstance};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::exposure::{Exposure, expose, external_endpoints};
use crate::health::{Health, assess};
use crate::prepare::PrepareError;
use crate::{EXTERNAL_ENDPOINTS_ANNOTATION, Next, PROVIDER_FINALIZER};

/// The Go node's message once the service is up.
pub const ACTIVE_MESSAGE: &str =
    "Allocation has created the namespace and applied the manifests, now is Active";
/// Right after the objects are applied.
pub const CREATED_MESSAGE: &str = "Allocation has created the namespace and applied the manifests, waiting for the service to become available";

/// How often an unavailable service is looked at again (pods are not watched).
pub const RECHECK: Duration = Duration::from_secs(3);
/// Status message while the objects of a service whose pods may run on the
/// buyer wait for Liqo to enable its namespace for remote scheduling.
pub const AWAITING_OFFLOADING_MESSAGE: &str = "Allocation has created the namespace and waits for the reverse peering with the buyer's cluster (its companion Allocation Active) and Liqo's offloading of the namespace (NamespaceOffloading offloading) before applying the manifests: the hosting policy puts the service's pods there";
/// How often an Active service is looked at again besides the watches.
pub const ACTIVE_RECHECK: Duration = Duration::from_secs(60);

/// Annotation on the service namespace naming the Allocation that made it
/// (`<namespace>/<name>`): only that Allocation deletes it.
pub const ALLOCATION_ANNOTATION: &str = "fluidos.eu/service-allocation";
/// Annotation on the service namespace listing what the render made that
/// must stay (`Deployment/<name>`, `StatefulSet/<name>`, comma-separated):
/// one found missing is made again (or, if it cannot be, reported).
pub const PARTS_ANNOTATION: &str = "fluidos.eu/service-workloads";
/// Annotation on the service namespace naming the endpoint Service the
/// render chose (a blueprint may label several; the last one is exposed).
pub const ENDPOINT_ANNOTATION: &str = "fluidos.eu/service-endpoint";
/// Secret in the service namespace keeping the random bytes drawn to render
/// the blueprint (key [`RANDOM_KEY`]): a render retried after a failure or
/// a crash replays them, so generated passwords never change once applied.
pub const RANDOM_SECRET: &str = "fluidos-service-render-random";
/// Key of [`RANDOM_SECRET`] holding the bytes.
pub const RANDOM_KEY: &str = "bytes";

/// What the executor read.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The service namespace (named after the contract).
    pub namespace: Option<Namespace>,
    /// The live [`RANDOM_SECRET`] of the service namespace.
    pub random: Option<Secret>,
    /// The live endpoint Service.
    pub endpoint_service: Option<Service>,
    /// The live `credentials-<contract>` Secret.
    pub credentials: Option<Secret>,
    /// Deployments of the service namespace.
    pub deployments: Vec<Deployment>,
    /// StatefulSets of the service namespace.
    pub statefulsets: Vec<StatefulSet>,
    /// Pods of the service namespace.
    pub pods: Vec<Pod>,
}

/// Everything the decision depends on.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The Allocation, freshly read.
    pub allocation: &'a Allocation,
    /// The Contract's name.
    pub contract_name: &'a str,
    /// False when the Contract is gone (ended).
    pub contract_exists: bool,
    /// The prepared instance, when [`needs_instance`] said so.
    pub prepared: Option<&'a Result<ServiceInstance, PrepareError>>,
    /// Where the buyer asked the service to run (read with `prepared`).
    pub hosting_policy: HostingPolicy,
    /// The service is delivered by Liqo: its namespace is offloaded to the
    /// buyer's cluster, where its pods may then run.
    pub offloaded: bool,
    /// The random bytes drawn to render `prepared` (the replayed ones first,
    /// see [`replayed_random`]).
    pub random_drawn: &'a [u8],
    /// How the endpoint Service is exposed.
    pub exposure: &'a Exposure,
    /// This node's address (host of its REAR gateway).
    pub node_host: &'a str,
    /// Longest a teardown waits before giving up (and saying what is left).
    pub teardown_timeout: Duration,
    /// Seconds since the Allocation's deletion was requested, if it was.
    pub deleting_for: Option<i64>,
    /// The current time (RFC 3339) for `lastUpdateTime`.
    pub now: String,
}

/// A write.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Add our finalizer to the Allocation.
    AddFinalizer,
    /// Remove our finalizer from the Allocation.
    RemoveFinalizer,
    /// Server-side apply these objects, in order (namespace first).
    Apply(Vec<Value>),
    /// Record the external endpoints on the credentials Secret.
    AnnotateCredentials(String),
    /// Delivered by Liqo: record this Allocation's state and message on the
    /// credentials Secret, which Liqo reflects to the buyer.
    ReportState {
        /// The state (`Active`, `ResourceCreation`, ...).
        state: String,
        /// The message, bounded.
        message: String,
    },
    /// Delete the service namespace (and so everything in it).
    DeleteNamespace(String),
    /// Publish an event on the Allocation.
    Event {
        /// Warning rather than Normal.
        warning: bool,
        /// CamelCase reason.
        reason: &'static str,
        /// The note.
        note: String,
    },
}

/// The decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Writes, in order.
    pub effects: Vec<Effect>,
    /// The status to write (unchanged when equal to the current one).
    pub status: AllocationStatus,
    /// When to look again.
    pub next: Next,
}

fn state(a: &Allocation) -> Option<AllocationState> {
    a.status.as_ref().and_then(|s| s.status.clone())
}

fn has_finalizer(a: &Allocation) -> bool {
    a.finalizers().iter().any(|f| f == PROVIDER_FINALIZER)
}

/// True when the decision needs the prepared instance: the objects are not
/// (known to be) applied yet. A render repeated before the status says so
/// (status write lost, crash) replays the random bytes kept in the service
/// namespace ([`replayed_random`]), so random values (`randAlphaNum`) are
/// drawn once.
pub fn needs_instance(allocation: &Allocation, contract_exists: bool, observed: &Observed) -> bool {
    if allocation.metadata.deletion_timestamp.is_some() || !contract_exists {
        return false;
    }
    // Nothing rendered is applied while the namespace waits to be
    // offloaded: a fresh draw is safe even without the random bytes.
    if allocation
        .status
        .as_ref()
        .and_then(|s| s.message.as_deref())
        == Some(AWAITING_OFFLOADING_MESSAGE)
    {
        return true;
    }
    match state(allocation) {
        Some(AllocationState::Error | AllocationState::Released) => false,
        // Made already: again only if the namespace or a part of it is
        // gone, and never without the random bytes of the first render
        // (generated passwords would change).
        Some(AllocationState::Active | AllocationState::ResourceCreation) => {
            observed.namespace.is_none()
                || (!missing_parts(observed).is_empty() && observed.random.is_some())
        }
        _ => true,
    }
}

/// Who made a service namespace: `<namespace>/<name>` of the Allocation.
pub fn owner_of(allocation: &Allocation) -> String {
    format!(
        "{}/{}",
        allocation.namespace().unwrap_or_default(),
        allocation.name_any()
    )
}

/// True when `ns` is the service namespace of `contract` made by the
/// Allocation `owner` (see [`owner_of`]): labelled with the contract and
/// annotated with the Allocation. Any other namespace is never deleted.
pub fn owns_namespace(ns: &Namespace, contract: &str, owner: &str) -> bool {
    ns.labels().get(CONTRACT_LABEL).map(String::as_str) == Some(contract)
        && ns
            .annotations()
            .get(ALLOCATION_ANNOTATION)
            .map(String::as_str)
            == Some(owner)
}

/// The random bytes to replay when rendering again: those recorded in the
/// service namespace, if it is ours (empty otherwise: fresh ones are drawn).
pub fn replayed_random(observed: &Observed, contract: &str, owner: &str) -> Vec<u8> {
    match (&observed.namespace, &observed.random) {
        (Some(ns), Some(secret)) if owns_namespace(ns, contract, owner) => secret
            .data
            .as_ref()
            .and_then(|d| d.get(RANDOM_KEY))
            .map(|b| b.0.clone())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// What the render made that is no longer in the service namespace: the
/// workloads its [`PARTS_ANNOTATION`] lists, and the credentials Secret
/// (pure; empty without a namespace, or for one made by an earlier
/// version, which lists nothing).
pub fn missing_parts(observed: &Observed) -> Vec<String> {
    let Some(ns) = &observed.namespace else {
        return Vec::new();
    };
    let Some(parts) = ns.annotations().get(PARTS_ANNOTATION) else {
        return Vec::new();
    };
    let present = |kind: &str, name: &str| match kind {
        "Deployment" => observed.deployments.iter().any(|d| d.name_any() == name),
        "StatefulSet" => observed.statefulsets.iter().any(|d| d.name_any() == name),
        _ => true,
    };
    let mut missing: Vec<String> = parts
        .split(',')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            p.split_once('/')
                .is_some_and(|(kind, name)| !present(kind, name))
        })
        .map(str::to_owned)
        .collect();
    if observed.credentials.is_none() {
        missing.push(format!(
            "Secret/{}",
            fluidos_api::naming::credentials_secret_name(&ns.name_any())
        ));
    }
    missing
}

/// The workloads of `instance` as [`PARTS_ANNOTATION`] lists them.
fn parts_of(instance: &ServiceInstance) -> String {
    instance
        .objects
        .iter()
        .filter(|o| matches!(o.kind(), Some("Deployment" | "StatefulSet")))
        .filter_map(|o| Some(format!("{}/{}", o.kind()?, o.name()?)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The namespace object: named after the contract, labelled with it,
/// annotated with the Allocation `owner` making it and the workloads
/// `parts` it must keep.
pub fn namespace_object(contract: &str, owner: &str, parts: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": contract,
            "labels": {CONTRACT_LABEL: contract},
            "annotations": {ALLOCATION_ANNOTATION: owner, PARTS_ANNOTATION: parts},
        },
    })
}

/// The endpoint Service among `labelled` (those with the endpoint label):
/// the one the service namespace's [`ENDPOINT_ANNOTATION`] names, else the
/// only or last one (pure).
pub fn chosen_endpoint(namespace: &Namespace, mut labelled: Vec<Service>) -> Option<Service> {
    match namespace.annotations().get(ENDPOINT_ANNOTATION) {
        Some(name) => labelled.into_iter().find(|s| s.name_any() == *name),
        None => labelled.pop(),
    }
}

/// The [`RANDOM_SECRET`] keeping `drawn`.
pub fn random_secret_object(contract: &str, drawn: &[u8]) -> Value {
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(RANDOM_SECRET.to_owned()),
            namespace: Some(contract.to_owned()),
            labels: Some([(CONTRACT_LABEL.to_owned(), contract.to_owned())].into()),
            ..Default::default()
        },
        data: Some(
            [(
                RANDOM_KEY.to_owned(),
                k8s_openapi::ByteString(drawn.to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let mut v = serde_json::to_value(secret).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), json!("v1"));
        o.insert("kind".into(), json!("Secret"));
    }
    v
}

/// Everything to apply for `instance`, in order: the namespace (annotated
/// with the Allocation `owner`), the random bytes `drawn` to render it,
/// the rendered objects (the endpoint Service given the exposure's type),
/// the credentials Secret (labelled with the contract too). The random
/// bytes are kept before anything made with them, so a retry after a crash
/// at any point renders the same values.
pub fn objects_to_apply(
    instance: &ServiceInstance,
    contract: &str,
    owner: &str,
    drawn: &[u8],
    exposure: &Exposure,
) -> Vec<Value> {
    let endpoint = fluidos_blueprint::endpoint_service(&instance.objects)
        .map(|o| (o.kind().map(str::to_owned), o.name().map(str::to_owned)));
    let mut namespace = namespace_object(contract, owner, &parts_of(instance));
    if let (Some((_, Some(name))), Some(annotations)) = (
        &endpoint,
        namespace
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut),
    ) {
        annotations.insert(ENDPOINT_ANNOTATION.to_owned(), Value::String(name.clone()));
    }
    let mut out = vec![namespace, random_secret_object(contract, drawn)];
    for o in &instance.objects {
        let mut v = o.object.clone();
        if endpoint == Some((o.kind().map(str::to_owned), o.name().map(str::to_owned))) {
            expose(&mut v, exposure.mode);
        }
        out.push(v);
    }
    let mut secret = instance.credentials_secret.clone();
    if let Some(labels) = secret
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.insert(
            CONTRACT_LABEL.to_owned(),
            Value::String(contract.to_owned()),
        );
    }
    out.push(secret);
    out
}

struct Machine<'a> {
    input: &'a Input<'a>,
    observed: &'a Observed,
    effects: Vec<Effect>,
    status: AllocationStatus,
}

impl Machine<'_> {
    fn set(&mut self, state: AllocationState, message: impl Into<String>) {
        let message = message.into();
        if self.status.status.as_ref() != Some(&state)
            || self.status.message.as_deref() != Some(message.as_str())
        {
            self.status.status = Some(state);
            self.status.message = Some(message);
            self.status.last_update_time = Some(self.input.now.clone());
        }
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: String) {
        self.effects.push(Effect::Event {
            warning,
            reason,
            note,
        });
    }

    /// Why the namespace named after the contract is not ours to delete, if
    /// it exists and is not.
    fn not_ours(&self) -> Option<String> {
        let owner = owner_of(self.input.allocation);
        let c = self.input.contract_name;
        self.observed
            .namespace
            .as_ref()
            .filter(|ns| !owns_namespace(ns, c, &owner))
            .map(|_| {
                format!(
                    "namespace {c} is not this Allocation's (it needs the label {CONTRACT_LABEL}={c} and the annotation {ALLOCATION_ANNOTATION}={owner}): left alone"
                )
            })
    }

    /// Deletes the namespace if present and ours; true once it is gone (or
    /// is not ours, said in an event: never deleted).
    fn remove_namespace(&mut self) -> bool {
        if let Some(note) = self.not_ours() {
            let said = self
                .input
                .allocation
                .status
                .as_ref()
                .and_then(|s| s.message.as_deref());
            if said != Some(note.as_str()) {
                self.event(true, "NamespaceNotDeleted", note);
            }
            return true;
        }
        match &self.observed.namespace {
            None => true,
            Some(ns) => {
                if ns.metadata.deletion_timestamp.is_none() {
                    self.effects
                        .push(Effect::DeleteNamespace(self.input.contract_name.to_owned()));
                }
                false
            }
        }
    }

    fn deleted(&mut self, for_secs: i64) -> Next {
        if !has_finalizer(self.input.allocation) {
            return Next::AwaitChange;
        }
        let ns = self.input.contract_name;
        let not_ours = self.not_ours().is_some();
        if self.remove_namespace() {
            self.effects.push(Effect::RemoveFinalizer);
            if !not_ours {
                self.event(
                    false,
                    "ServiceRemoved",
                    format!("service namespace {ns} removed"),
                );
            }
            return Next::AwaitChange;
        }
        let limit = i64::try_from(self.input.teardown_timeout.as_secs()).unwrap_or(i64::MAX);
        if for_secs >= limit {
            self.effects.push(Effect::RemoveFinalizer);
            self.event(
                true,
                "TeardownIncomplete",
                format!(
                    "service namespace {ns} still terminating after {for_secs} s; left behind (delete it by hand if it stays)"
                ),
            );
            return Next::AwaitChange;
        }
        self.set(
            AllocationState::Released,
            format!("Allocation deleted: service namespace {ns} terminating ({for_secs} s)"),
        );
        Next::Requeue(RECHECK.min(Duration::from_secs(
            u64::try_from(limit - for_secs).unwrap_or(1),
        )))
    }

    fn contract_ended(&mut self) -> Next {
        let ns = self.input.contract_name;
        let not_ours = self.not_ours();
        if self.remove_namespace() {
            let removed = not_ours.is_none();
            let message =
                not_ours.unwrap_or_else(|| format!("Contract {ns} ended: service removed"));
            if removed && self.status.message.as_deref() != Some(message.as_str()) {
                self.event(false, "ServiceRemoved", message.clone());
            }
            self.set(AllocationState::Released, message);
            Next::AwaitChange
        } else {
            self.set(
                AllocationState::Released,
                format!("Contract {ns} ended: service namespace {ns} terminating"),
            );
            Next::Requeue(RECHECK)
        }
    }

    fn create(&mut self, prepared: &Result<ServiceInstance, PrepareError>) -> Next {
        match prepared {
            Err(e) => {
                let message = e.to_string();
                self.event(true, "AllocationFailed", message.clone());
                self.set(AllocationState::Error, message);
                Next::AwaitChange
            }
            Ok(_)
                if self.observed.namespace.as_ref().is_some_and(|ns| {
                    !owns_namespace(
                        ns,
                        self.input.contract_name,
                        &owner_of(self.input.allocation),
                    )
                }) =>
            {
                let message = format!(
                    "namespace {} exists and was not made by this Allocation; nothing applied",
                    self.input.contract_name
                );
                self.event(true, "AllocationFailed", message.clone());
                self.set(AllocationState::Error, message);
                Next::AwaitChange
            }
            Ok(instance) => {
                let mut objects = objects_to_apply(
                    instance,
                    self.input.contract_name,
                    &owner_of(self.input.allocation),
                    self.input.random_drawn,
                    self.input.exposure,
                );
                if self.awaits_offloading() {
                    // Liqo places only pods created once the namespace is
                    // enabled for remote scheduling: the namespace (and the
                    // render's random bytes, so the render after is the
                    // same) first; the provider controller then offloads it.
                    objects.truncate(2);
                    self.effects.push(Effect::Apply(objects));
                    self.set(
                        AllocationState::ResourceCreation,
                        AWAITING_OFFLOADING_MESSAGE,
                    );
                    return Next::Requeue(RECHECK);
                }
                self.effects.push(Effect::Apply(objects));
                let gone = missing_parts(self.observed);
                let applied_before = matches!(
                    state(self.input.allocation),
                    Some(AllocationState::Active | AllocationState::ResourceCreation)
                ) && self
                    .input
                    .allocation
                    .status
                    .as_ref()
                    .and_then(|s| s.message.as_deref())
                    != Some(AWAITING_OFFLOADING_MESSAGE);
                if applied_before && !gone.is_empty() {
                    // Made before, partly removed since: made again, said.
                    self.event(
                        true,
                        "ServiceRepaired",
                        format!("{} had been removed: applied again", gone.join(", ")),
                    );
                    self.set(AllocationState::ResourceCreation, CREATED_MESSAGE);
                    return Next::Requeue(RECHECK);
                }
                if self.input.hosting_policy != HostingPolicy::Provider && !self.input.offloaded {
                    self.event(
                        true,
                        "HostingPolicyNotHonoured",
                        hosting_note(self.input.hosting_policy),
                    );
                }
                self.event(
                    false,
                    "ServiceCreated",
                    format!(
                        "namespace {} and {} objects applied",
                        instance.namespace,
                        instance.objects.len() + 1
                    ),
                );
                self.set(AllocationState::ResourceCreation, CREATED_MESSAGE);
                Next::Requeue(RECHECK)
            }
        }
    }

    /// A service whose pods may run on the buyer, delivered by Liqo, whose
    /// namespace Liqo has not enabled for remote scheduling yet.
    fn awaits_offloading(&self) -> bool {
        self.input.offloaded
            && service_delivery::pods_on_buyer(self.input.hosting_policy)
            && !self
                .observed
                .namespace
                .as_ref()
                .is_some_and(crate::offloading::remote_scheduling_enabled)
    }

    /// [`Machine::assess_health`], then (delivered by Liqo) the state it
    /// says recorded where the buyer sees it.
    fn health(&mut self) -> Next {
        let next = self.assess_health();
        self.report_state();
        next
    }

    /// Keeps the buyer told, through the credentials Secret Liqo reflects to
    /// it, of this Allocation's state: written only when it changed.
    fn report_state(&mut self) {
        let (true, Some(secret), Some(state)) = (
            self.input.offloaded,
            &self.observed.credentials,
            self.status.status.as_ref(),
        ) else {
            return;
        };
        let state = state.to_string();
        let message =
            service_delivery::bounded_message(self.status.message.as_deref().unwrap_or_default())
                .to_owned();
        let annotations = secret.annotations();
        if annotations.get(service_delivery::SERVICE_STATE_ANNOTATION) != Some(&state)
            || annotations.get(service_delivery::SERVICE_MESSAGE_ANNOTATION) != Some(&message)
        {
            self.effects.push(Effect::ReportState { state, message });
        }
    }

    fn assess_health(&mut self) -> Next {
        let o = self.observed;
        let gone = missing_parts(o);
        if !gone.is_empty() {
            // needs_instance said no: the render's random bytes are gone.
            let message = format!(
                "Service degraded: {} removed, and not made again: the random bytes of its render (Secret {RANDOM_SECRET}) are gone too, and a new render would change its generated values",
                gone.join(", ")
            );
            if self.status.message.as_deref() != Some(message.as_str()) {
                self.event(true, "ServiceDegraded", message.clone());
            }
            self.set(AllocationState::ResourceCreation, message);
            return Next::Requeue(RECHECK);
        }
        let endpoints = match &o.endpoint_service {
            None => Err("no endpoint Service (label nodecore.fluidos.eu/flavor-service-endpoint=true) in the namespace".to_owned()),
            Some(s) => external_endpoints(self.input.exposure, s, self.input.node_host),
        };
        if let (Ok(e), Some(secret)) = (&endpoints, &o.credentials)
            && secret.annotations().get(EXTERNAL_ENDPOINTS_ANNOTATION) != Some(e)
        {
            self.effects.push(Effect::AnnotateCredentials(e.clone()));
        }
        let was_active = state(self.input.allocation) == Some(AllocationState::Active);
        match (assess(&o.deployments, &o.statefulsets, &o.pods), endpoints) {
            (Health::Available, Ok(e)) => {
                if !was_active {
                    self.event(
                        false,
                        "ServiceAvailable",
                        format!("service available at {e}"),
                    );
                }
                self.set(AllocationState::Active, ACTIVE_MESSAGE);
                Next::Requeue(ACTIVE_RECHECK)
            }
            (Health::Available, Err(why)) => {
                self.set(
                    AllocationState::ResourceCreation,
                    format!("Waiting for the service's external address: {why}"),
                );
                Next::Requeue(RECHECK)
            }
            (Health::Progressing(why), _) => {
                self.set(
                    AllocationState::ResourceCreation,
                    format!("Waiting for the service to become available: {why}"),
                );
                Next::Requeue(RECHECK)
            }
            (Health::Degraded(why), _) => {
                let message = format!("Service degraded: {why}");
                if self.status.message.as_deref() != Some(message.as_str()) {
                    self.event(true, "ServiceDegraded", why);
                }
                self.set(AllocationState::ResourceCreation, message);
                Next::Requeue(RECHECK)
            }
        }
    }
}

/// Why a `Consumer` or `Shared` hosting policy is served from the provider:
/// running the service's pods on the buyer's cluster needs delivery by Liqo
/// namespace offloading, which this node does not do yet.
pub fn hosting_note(policy: HostingPolicy) -> String {
    format!(
        "hosting policy {policy:?} asks for service pods on the buyer's cluster, which needs \
         delivery by Liqo (--service-delivery liqo on both nodes); this sale is delivered over \
         REAR, so the service runs on the provider and the buyer reaches it at its endpoints"
    )
}

/// Decides what to do with a provider-side Service Allocation (pure).
pub fn plan(input: &Input<'_>, observed: &Observed) -> Plan {
    let mut m = Machine {
        input,
        observed,
        effects: Vec::new(),
        status: input.allocation.status.clone().unwrap_or_default(),
    };
    let next = if let Some(for_secs) = input.deleting_for {
        m.deleted(for_secs)
    } else {
        if !has_finalizer(input.allocation) {
            m.effects.push(Effect::AddFinalizer);
        }
        if !input.contract_exists {
            m.contract_ended()
        } else {
            match state(input.allocation) {
                Some(AllocationState::Error | AllocationState::Released) => Next::AwaitChange,
                _ => match input.prepared {
                    Some(prepared) => m.create(prepared),
                    None if observed.namespace.is_some() => match m.not_ours() {
                        None => m.health(),
                        Some(why) => {
                            m.set(AllocationState::Error, why);
                            Next::AwaitChange
                        }
                    },
                    // needs_instance said no but the namespace is gone: look again.
                    None => Next::Requeue(RECHECK),
                },
            }
        }
    };
    Plan {
        effects: m.effects,
        status: m.status,
        next,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use fluidos_api::GenericRef;
    use fluidos_api::allocation::AllocationSpec;
    use fluidos_api::service_blueprint::ServiceTemplate;
    use fluidos_blueprint::RepeatingBytes;

    const C: &str = "contract-x";
    const OWNER: &str = "fluidos/allocation-x";
    const DRAWN: &[u8] = &[7, 7];

    /// A namespace named after the contract but not made by this Allocation.
    fn foreign_namespace(labelled: bool) -> Namespace {
        let mut n = namespace(false);
        if labelled {
            n.metadata.annotations =
                Some([(ALLOCATION_ANNOTATION.into(), "x/other".into())].into());
        } else {
            n.metadata.labels = None;
            n.metadata.annotations = None;
        }
        n
    }

    fn allocation(state: Option<AllocationState>, finalizer: bool) -> Allocation {
        let mut a = Allocation::new(
            "allocation-x",
            AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef::named("fluidos", C)),
            },
        );
        a.metadata.namespace = Some("fluidos".into());
        if finalizer {
            a.metadata.finalizers = Some(vec![PROVIDER_FINALIZER.to_owned()]);
        }
        a.status = state.map(|s| AllocationStatus {
            status: Some(s),
            message: Some("m".into()),
            ..Default::default()
        });
        a
    }

    fn instance() -> ServiceInstance {
        let t = |name: &str, data: Value| ServiceTemplate {
            name: name.into(),
            description: None,
            service_data: data,
        };
        fluidos_blueprint::instantiate(
            &[
                t("svc", json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "db", "labels": {"nodecore.fluidos.eu/flavor-service-endpoint": "true"}},
                    "spec": {"ports": [{"port": 3306}]}})),
                t("dep", json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"},
                    "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "mysql", "env": [{"name": "P", "value": "{{ .password }}"}]}]}}}})),
            ],
            "database",
            &json!({"username": "u", "password": "p", "database": "d"}),
            C,
            RepeatingBytes::new([1]),
        )
        .unwrap()
    }

    fn namespace(terminating: bool) -> Namespace {
        let mut n: Namespace = serde_json::from_value(namespace_object(C, OWNER, "")).unwrap();
        if terminating {
            n.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        n
    }

    fn live_service(node_port: bool) -> Service {
        let port = if node_port {
            json!({"port": 3306, "nodePort": 31000})
        } else {
            json!({"port": 3306})
        };
        serde_json::from_value(
            json!({"metadata": {"name": "db"}, "spec": {"type": "NodePort", "ports": [port]}}),
        )
        .unwrap()
    }

    fn deployment(available: i32) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "db", "generation": 1},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "availableReplicas": available, "updatedReplicas": available}}))
        .unwrap()
    }

    fn running(available: i32) -> Observed {
        Observed {
            namespace: Some(namespace(false)),
            endpoint_service: Some(live_service(true)),
            credentials: Some(
                serde_json::from_value(json!({"metadata": {"name": "credentials-contract-x"}}))
                    .unwrap(),
            ),
            deployments: vec![deployment(available)],
            ..Default::default()
        }
    }

    struct Case {
        allocation: Allocation,
        contract_exists: bool,
        prepared: Option<Result<ServiceInstance, PrepareError>>,
        hosting_policy: HostingPolicy,
        offloaded: bool,
        deleting_for: Option<i64>,
    }

    fn case(allocation: Allocation) -> Case {
        Case {
            allocation,
            contract_exists: true,
            prepared: None,
            hosting_policy: HostingPolicy::Provider,
            offloaded: false,
            deleting_for: None,
        }
    }

    fn run(c: &Case, observed: &Observed) -> Plan {
        let exposure = Exposure::default();
        plan(
            &Input {
                allocation: &c.allocation,
                contract_name: C,
                contract_exists: c.contract_exists,
                prepared: c.prepared.as_ref(),
                hosting_policy: c.hosting_policy,
                offloaded: c.offloaded,
                random_drawn: DRAWN,
                exposure: &exposure,
                node_host: "192.0.2.10",
                teardown_timeout: Duration::from_secs(60),
                deleting_for: c.deleting_for,
                now: "2026-01-01T00:00:00Z".into(),
            },
            observed,
        )
    }

    fn state_of(p: &Plan) -> (Option<AllocationState>, String) {
        (
            p.status.status.clone(),
            p.status.message.clone().unwrap_or_default(),
        )
    }

    fn has(p: &Plan, f: impl Fn(&Effect) -> bool) -> bool {
        p.effects.iter().any(f)
    }

    #[test]
    fn the_endpoint_service_looked_at_is_the_one_exposed() {
        let objects = objects_to_apply(&instance(), C, OWNER, DRAWN, &Exposure::default());
        assert_eq!(objects[0]["kind"], "Namespace");
        assert_eq!(
            objects[0]["metadata"]["annotations"][ENDPOINT_ANNOTATION],
            "db"
        );
        let ns: Namespace = serde_json::from_value(objects[0].clone()).unwrap();
        let named = |n: &str| -> Service {
            serde_json::from_value(json!({"metadata": {"name": n}})).unwrap()
        };
        // Listed by name, "db" before "zz": the named one, not the last.
        let chosen = chosen_endpoint(&ns, vec![named("db"), named("zz")]).unwrap();
        assert_eq!(chosen.name_any(), "db");
        assert!(chosen_endpoint(&ns, vec![named("zz")]).is_none());
        // A namespace of an earlier version names none: the last one.
        let old = namespace(false);
        let chosen = chosen_endpoint(&old, vec![named("db"), named("zz")]).unwrap();
        assert_eq!(chosen.name_any(), "zz");
    }

    #[test]
    fn a_removed_part_is_made_again_from_the_same_render_or_reported() {
        // The namespace lists the Deployment the render made.
        let listed = |o: &mut Observed| {
            o.namespace = Some(
                serde_json::from_value(namespace_object(C, OWNER, &parts_of(&instance()))).unwrap(),
            );
        };
        assert_eq!(parts_of(&instance()), "Deployment/db");
        let mut whole = running(1);
        listed(&mut whole);
        assert!(missing_parts(&whole).is_empty());
        let active = allocation(Some(AllocationState::Active), true);
        assert!(!needs_instance(&active, true, &whole));

        // Deployment and credentials deleted by hand, random bytes kept:
        // rendered again (replaying them) and applied, with a warning.
        let mut gone = whole.clone();
        gone.deployments.clear();
        gone.credentials = None;
        gone.random = Some(Secret::default());
        assert_eq!(
            missing_parts(&gone),
            ["Deployment/db", "Secret/credentials-contract-x"]
        );
        assert!(needs_instance(&active, true, &gone));
        let mut c = case(active.clone());
        c.prepared = Some(Ok(instance()));
        let p = run(&c, &gone);
        assert!(
            has(&p, |e| matches!(e, Effect::Apply(_))),
            "{:?}",
            p.effects
        );
        assert!(has(&p, |e| matches!(
            e,
            Effect::Event {
                warning: true,
                reason: "ServiceRepaired",
                ..
            }
        )));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                CREATED_MESSAGE.into()
            )
        );

        // Without the random bytes: not rendered again (passwords would
        // change), and never Active with a part missing.
        gone.random = None;
        assert!(!needs_instance(&active, true, &gone));
        let p = run(&case(active), &gone);
        assert!(!has(&p, |e| matches!(e, Effect::Apply(_))));
        let (state, message) = state_of(&p);
        assert_eq!(state, Some(AllocationState::ResourceCreation));
        assert!(
            message.starts_with(
                "Service degraded: Deployment/db, Secret/credentials-contract-x removed"
            ),
            "{message}"
        );
    }

    #[test]
    fn instance_needed_only_until_applied() {
        let o = Observed::default();
        assert!(needs_instance(&allocation(None, false), true, &o));
        assert!(needs_instance(
            &allocation(Some(AllocationState::Inactive), true),
            true,
            &o
        ));
        assert!(
            !needs_instance(&allocation(None, false), false, &o),
            "contract gone"
        );
        for s in [AllocationState::Error, AllocationState::Released] {
            assert!(!needs_instance(&allocation(Some(s), true), true, &o));
        }
        // Applied, and the namespace is there: never rendered again.
        let with_ns = running(1);
        assert!(!needs_instance(
            &allocation(Some(AllocationState::Active), true),
            true,
            &with_ns
        ));
        assert!(!needs_instance(
            &allocation(Some(AllocationState::ResourceCreation), true),
            true,
            &with_ns
        ));
        // The namespace vanished: instantiate again.
        assert!(needs_instance(
            &allocation(Some(AllocationState::Active), true),
            true,
            &o
        ));
        let mut deleting = allocation(None, true);
        deleting.metadata.deletion_timestamp = namespace(true).metadata.deletion_timestamp;
        assert!(!needs_instance(&deleting, true, &o));
    }

    #[test]
    fn first_reconcile_adds_the_finalizer_and_applies_everything_exposed() {
        let mut c = case(allocation(None, false));
        c.prepared = Some(Ok(instance()));
        let p = run(&c, &Observed::default());
        assert_eq!(p.effects[0], Effect::AddFinalizer);
        let Some(Effect::Apply(objects)) = p.effects.iter().find(|e| matches!(e, Effect::Apply(_)))
        else {
            panic!("no apply: {:?}", p.effects);
        };
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["Namespace", "Secret", "Service", "Deployment", "Secret"]
        );
        assert_eq!(objects[0]["metadata"]["name"], C);
        assert_eq!(objects[0]["metadata"]["labels"][CONTRACT_LABEL], C);
        assert_eq!(
            objects[0]["metadata"]["annotations"][ALLOCATION_ANNOTATION],
            OWNER
        );
        // The random bytes are kept before anything made with them.
        assert_eq!(objects[1]["metadata"]["name"], RANDOM_SECRET);
        assert_eq!(objects[1]["data"][RANDOM_KEY], "Bwc=");
        assert_eq!(
            objects[2]["spec"]["type"], "NodePort",
            "endpoint Service exposed"
        );
        for o in &objects[1..] {
            assert_eq!(o["metadata"]["namespace"], C);
            assert_eq!(o["metadata"]["labels"][CONTRACT_LABEL], C);
        }
        assert_eq!(objects[4]["metadata"]["name"], "credentials-contract-x");
        assert_eq!(objects[4]["stringData"]["password"], "p");
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                CREATED_MESSAGE.into()
            )
        );
        assert_eq!(
            p.status.last_update_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert!(!has(&p, |e| matches!(
            e,
            Effect::Event {
                reason: "HostingPolicyNotHonoured",
                ..
            }
        )));
        // A Consumer hosting policy is served from the provider, and says so.
        c.hosting_policy = HostingPolicy::Consumer;
        let p = run(&c, &Observed::default());
        assert!(has(
            &p,
            |e| matches!(e, Effect::Event { warning: true, reason: "HostingPolicyNotHonoured", note }
            if note.contains("Consumer") && note.contains("runs on the provider"))
        ));
        assert!(has(&p, |e| matches!(e, Effect::Apply(_))));
        assert_eq!(p.next, Next::Requeue(RECHECK));
    }

    #[test]
    fn pods_for_the_buyer_wait_for_the_offloaded_namespace() {
        let mut c = case(allocation(None, true));
        c.prepared = Some(Ok(instance()));
        c.hosting_policy = HostingPolicy::Consumer;
        c.offloaded = true;
        // The namespace and the render's random bytes only, until Liqo
        // enables it for remote scheduling.
        let p = run(&c, &Observed::default());
        let Some(Effect::Apply(objects)) = p.effects.iter().find(|e| matches!(e, Effect::Apply(_)))
        else {
            panic!("no apply: {:?}", p.effects);
        };
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["Namespace", "Secret"]);
        assert_eq!(objects[1]["metadata"]["name"], RANDOM_SECRET);
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                AWAITING_OFFLOADING_MESSAGE.into()
            )
        );
        assert_eq!(p.next, Next::Requeue(RECHECK));
        // Still waiting: the next reconcile renders again (the random bytes
        // are kept) and applies the same.
        let mut waiting = allocation(Some(AllocationState::ResourceCreation), true);
        waiting.status.as_mut().unwrap().message = Some(AWAITING_OFFLOADING_MESSAGE.into());
        let mut ns = namespace(false);
        ns.annotations_mut()
            .insert(PARTS_ANNOTATION.into(), "Deployment/db".into());
        let random: Secret = serde_json::from_value(random_secret_object(C, DRAWN)).unwrap();
        let mut o = Observed {
            namespace: Some(ns),
            random: Some(random),
            ..Observed::default()
        };
        assert!(needs_instance(&waiting, true, &o));
        // Enabled: everything, as a first creation (no repair said), and
        // the policy is honoured (no warning).
        o.namespace
            .as_mut()
            .unwrap()
            .labels_mut()
            .insert(crate::offloading::SCHEDULING_LABEL.into(), "true".into());
        c.allocation = waiting;
        let p = run(&c, &o);
        let Some(Effect::Apply(objects)) = p.effects.iter().find(|e| matches!(e, Effect::Apply(_)))
        else {
            panic!("no apply: {:?}", p.effects);
        };
        assert_eq!(objects.len(), 5);
        assert!(has(&p, |e| matches!(
            e,
            Effect::Event {
                reason: "ServiceCreated",
                ..
            }
        )));
        assert!(!has(&p, |e| matches!(
            e,
            Effect::Event {
                reason: "ServiceRepaired" | "HostingPolicyNotHonoured",
                ..
            }
        )));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                CREATED_MESSAGE.into()
            )
        );
        // Pods kept on the provider (Provider) need no wait.
        let mut c = case(allocation(None, true));
        c.prepared = Some(Ok(instance()));
        c.offloaded = true;
        let p = run(&c, &Observed::default());
        assert!(has(
            &p,
            |e| matches!(e, Effect::Apply(objects) if objects.len() == 5)
        ));
    }

    #[test]
    fn a_preparation_failure_ends_in_error_with_nothing_applied() {
        let mut c = case(allocation(None, true));
        c.prepared = Some(Err(PrepareError::Schema(
            "\"database\" is a required property".into(),
        )));
        let p = run(&c, &Observed::default());
        assert!(!has(&p, |e| matches!(e, Effect::Apply(_))));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::Error),
                "configurationData does not match the flavor's configurationTemplate: \"database\" is a required property".into()
            )
        );
        assert!(has(&p, |e| matches!(
            e,
            Effect::Event {
                warning: true,
                reason: "AllocationFailed",
                ..
            }
        )));
        assert_eq!(p.next, Next::AwaitChange);
        // Error is terminal.
        let p = run(
            &case(allocation(Some(AllocationState::Error), true)),
            &Observed::default(),
        );
        assert!(p.effects.is_empty());
        assert_eq!(p.next, Next::AwaitChange);
    }

    #[test]
    fn active_only_when_available_and_reachable() {
        let created = allocation(Some(AllocationState::ResourceCreation), true);
        let p = run(&case(created.clone()), &running(0));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                "Waiting for the service to become available: Deployment db: 0/1 available".into()
            )
        );
        assert!(
            has(&p, |e| *e
                == Effect::AnnotateCredentials("192.0.2.10:31000".into())),
            "external endpoints recorded as soon as known"
        );
        let p = run(&case(created.clone()), &running(1));
        assert_eq!(
            state_of(&p),
            (Some(AllocationState::Active), ACTIVE_MESSAGE.into())
        );
        assert!(has(&p, |e| matches!(
            e,
            Effect::Event {
                reason: "ServiceAvailable",
                ..
            }
        )));
        assert_eq!(p.next, Next::Requeue(ACTIVE_RECHECK));
        // No node port yet: not Active.
        let mut o = running(1);
        o.endpoint_service = Some(live_service(false));
        let p = run(&case(created.clone()), &o);
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                "Waiting for the service's external address: Service db has no node port yet"
                    .into()
            )
        );
        // Annotation already there: not written again.
        let mut o = running(1);
        o.credentials.as_mut().unwrap().metadata.annotations = Some(
            [(
                EXTERNAL_ENDPOINTS_ANNOTATION.to_owned(),
                "192.0.2.10:31000".to_owned(),
            )]
            .into(),
        );
        let p = run(&case(created), &o);
        assert!(!has(&p, |e| matches!(e, Effect::AnnotateCredentials(_))));
    }

    #[test]
    fn active_goes_degraded_with_the_reason() {
        let mut o = running(0);
        o.pods = vec![serde_json::from_value(json!({"metadata": {"name": "db-1"},
            "status": {"containerStatuses": [{"name": "c", "image": "mysql", "imageID": "", "ready": false,
                "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}))
        .unwrap()];
        let p = run(&case(allocation(Some(AllocationState::Active), true)), &o);
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::ResourceCreation),
                "Service degraded: pod db-1 container c: CrashLoopBackOff (Deployment db: 0/1 available)".into()
            )
        );
        assert!(has(&p, |e| matches!(
            e,
            Effect::Event {
                warning: true,
                reason: "ServiceDegraded",
                ..
            }
        )));
        assert_eq!(p.next, Next::Requeue(RECHECK));
    }

    #[test]
    fn delivered_by_liqo_the_state_is_reported_on_the_credentials() {
        let reported = |p: &Plan| {
            p.effects.iter().find_map(|e| match e {
                Effect::ReportState { state, message } => Some((state.clone(), message.clone())),
                _ => None,
            })
        };
        let mut c = case(allocation(Some(AllocationState::ResourceCreation), true));
        // Over REAR: nothing reported on the Secret.
        assert_eq!(reported(&run(&c, &running(1))), None);
        c.offloaded = true;
        let p = run(&c, &running(1));
        assert_eq!(
            reported(&p),
            Some(("Active".to_owned(), ACTIVE_MESSAGE.to_owned()))
        );
        // Already there: not written again.
        let mut o = running(1);
        o.credentials.as_mut().unwrap().metadata.annotations = Some(
            [
                (
                    EXTERNAL_ENDPOINTS_ANNOTATION.to_owned(),
                    "192.0.2.10:31000".to_owned(),
                ),
                (
                    service_delivery::SERVICE_STATE_ANNOTATION.to_owned(),
                    "Active".to_owned(),
                ),
                (
                    service_delivery::SERVICE_MESSAGE_ANNOTATION.to_owned(),
                    ACTIVE_MESSAGE.to_owned(),
                ),
            ]
            .into(),
        );
        assert_eq!(reported(&run(&c, &o)), None);
        // Degraded: said, with the reason.
        let p = run(&c, &running(0));
        let (state, message) = reported(&p).unwrap();
        assert_eq!(state, "ResourceCreation");
        assert!(message.contains("0/1 available"), "{message}");
    }

    #[test]
    fn contract_end_removes_the_namespace_then_releases() {
        let mut c = case(allocation(Some(AllocationState::Active), true));
        c.contract_exists = false;
        let p = run(&c, &running(1));
        assert!(has(&p, |e| *e == Effect::DeleteNamespace(C.into())));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::Released),
                format!("Contract {C} ended: service namespace {C} terminating")
            )
        );
        let mut o = running(1);
        o.namespace = Some(namespace(true));
        let p = run(&c, &o);
        assert!(
            !has(&p, |e| matches!(e, Effect::DeleteNamespace(_))),
            "already terminating"
        );
        let p = run(&c, &Observed::default());
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::Released),
                format!("Contract {C} ended: service removed")
            )
        );
        assert_eq!(p.next, Next::AwaitChange);
    }

    #[test]
    fn deletion_waits_for_the_namespace_within_a_bound() {
        let mut c = case(allocation(Some(AllocationState::Active), true));
        c.deleting_for = Some(5);
        let p = run(&c, &running(1));
        assert!(has(&p, |e| *e == Effect::DeleteNamespace(C.into())));
        assert!(!has(&p, |e| *e == Effect::RemoveFinalizer));
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::Released),
                format!("Allocation deleted: service namespace {C} terminating (5 s)")
            )
        );
        // Gone: finalizer removed.
        let p = run(&c, &Observed::default());
        assert!(has(&p, |e| *e == Effect::RemoveFinalizer));
        // Not gone after the bound: finalizer removed anyway, with a warning naming what is left.
        c.deleting_for = Some(60);
        let mut o = running(1);
        o.namespace = Some(namespace(true));
        let p = run(&c, &o);
        assert!(has(&p, |e| *e == Effect::RemoveFinalizer));
        assert!(has(
            &p,
            |e| matches!(e, Effect::Event { warning: true, reason: "TeardownIncomplete", note } if note.contains(C))
        ));
        // Not ours (no finalizer): nothing.
        let mut c = case(allocation(None, false));
        c.deleting_for = Some(1);
        assert!(run(&c, &running(1)).effects.is_empty());
    }

    #[test]
    fn a_retried_render_replays_the_bytes_kept_in_our_namespace_only() {
        let a = allocation(None, true);
        assert_eq!(owner_of(&a), OWNER);
        let kept: Secret = serde_json::from_value(random_secret_object(C, &[1, 2, 3])).unwrap();
        let mut o = Observed {
            namespace: Some(namespace(false)),
            random: Some(kept),
            ..Default::default()
        };
        // A status write lost (409, crash) after the apply: rendered again,
        // with the same bytes, so the same passwords.
        assert!(needs_instance(&a, true, &o));
        assert_eq!(replayed_random(&o, C, OWNER), [1, 2, 3]);
        o.namespace = Some(foreign_namespace(true));
        assert!(replayed_random(&o, C, OWNER).is_empty());
        o.namespace = None;
        assert!(replayed_random(&o, C, OWNER).is_empty());
    }

    #[test]
    fn a_namespace_not_made_by_this_allocation_is_never_deleted_nor_applied_over() {
        for labelled in [true, false] {
            let o = Observed {
                namespace: Some(foreign_namespace(labelled)),
                ..Default::default()
            };
            // Deleted Allocation: finalizer removed, the namespace left, said.
            let mut c = case(allocation(Some(AllocationState::Active), true));
            c.deleting_for = Some(1);
            let p = run(&c, &o);
            assert!(!has(&p, |e| matches!(e, Effect::DeleteNamespace(_))));
            assert!(has(&p, |e| *e == Effect::RemoveFinalizer));
            assert!(has(
                &p,
                |e| matches!(e, Effect::Event { warning: true, reason: "NamespaceNotDeleted", note } if note.contains(OWNER))
            ));
            // Contract ended: Released saying why, nothing deleted.
            let mut c = case(allocation(Some(AllocationState::Active), true));
            c.contract_exists = false;
            let p = run(&c, &o);
            assert!(!has(&p, |e| matches!(e, Effect::DeleteNamespace(_))));
            let (state, message) = state_of(&p);
            assert_eq!(state, Some(AllocationState::Released));
            assert!(message.contains("left alone"), "{message}");
            // Creating: nothing applied over it.
            let mut c = case(allocation(None, true));
            c.prepared = Some(Ok(instance()));
            let p = run(&c, &o);
            assert!(!has(&p, |e| matches!(e, Effect::Apply(_))));
            assert_eq!(state_of(&p).0, Some(AllocationState::Error));
            // Active on it: no health check, no write into it.
            let c = case(allocation(Some(AllocationState::Active), true));
            let p = run(&c, &o);
            assert!(!has(&p, |e| matches!(e, Effect::AnnotateCredentials(_))));
            assert_eq!(state_of(&p).0, Some(AllocationState::Error));
        }
    }
}

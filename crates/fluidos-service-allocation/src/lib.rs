//! Service allocation without Liqo (delivery mode b, the default).
//!
//! - **Provider** ([`provider`]): on the provider's Allocation of a Service
//!   Contract, the ServiceBlueprint is instantiated for the buyer: a
//!   namespace named after the contract, the rendered objects server-side
//!   applied (field manager [`MANAGER`]) and labelled
//!   `reservation.fluidos.eu/contract`, the endpoint Service exposed
//!   (NodePort, LoadBalancer, or a configured external host) and the
//!   `credentials-<contract>` Secret. Everything is checked — flavor,
//!   configuration against the flavor's schema, templates, kinds — before
//!   anything is applied; a failure ends the Allocation in `Error` with the
//!   reason and nothing created. The Allocation is `Active` only while the
//!   service's Deployments and StatefulSets are available (re-checked when
//!   they change); otherwise `ResourceCreation` with what it waits for, or
//!   `Service degraded: <reason>` (image pull failure, crash loop,
//!   unschedulable).
//! - **Consumer** ([`consumer`]): on the buyer's Allocation of a Service
//!   Contract, the endpoints and credentials are fetched over REAR
//!   (`GET /api/v2/contracts/{contractID}/service`) once the provider says
//!   they are ready, written into the Secret `credentials-<contract>` in the
//!   Allocation's namespace (the Solver's), and `status.resourceRef` points
//!   at it.
//! - **Sides**: the provider controller handles only the Allocations the
//!   REAR gateway created for a sale (label [`SIDE_LABEL`]`=`[`PROVIDER_SIDE`])
//!   of a contract this node sold; the consumer controller only the others,
//!   of a contract this node bought. Each has its own finalizer
//!   ([`PROVIDER_FINALIZER`], [`CONSUMER_FINALIZER`]), so neither removes the
//!   other's nor writes the other's status.
//! - **Teardown**: a finalizer on both Allocations; deleting one (or its
//!   Contract ending) removes the service namespace on the provider and the
//!   Secret on the consumer, waiting at most a bounded time and saying in
//!   the status (and an event) what is left.
//!
//! Decisions are pure functions (`*/machine.rs`, unit-tested transition by
//! transition); the executors read, make the writes asked for, and write the
//! status once per reconcile.

pub mod consumer;
pub mod exposure;
pub mod health;
pub mod offloading;
pub mod prepare;
pub mod provider;

use std::time::Duration;

use fluidos_controller::reconcile::ReconcileError;
use fluidos_rear_client::RearError;

/// Field manager of everything this crate applies.
pub const MANAGER: &str = "fluidos-service-allocation";
/// Finalizer on provider-side Service Allocations until their service namespace is gone.
pub const PROVIDER_FINALIZER: &str = "fluidos.eu/service-allocation-provider";
/// Finalizer on consumer-side Service Allocations until their Secret is gone.
pub const CONSUMER_FINALIZER: &str = "fluidos.eu/service-allocation-consumer";
/// Label the REAR gateway puts on what it creates for a sale (its `labels::SIDE`).
pub const SIDE_LABEL: &str = "fluidos.eu/rear-side";
/// Value of [`SIDE_LABEL`] on provider-side Allocations.
pub const PROVIDER_SIDE: &str = "provider";

/// True for an Allocation the REAR gateway created for a sale (provider side).
pub fn is_provider_side(allocation: &fluidos_api::Allocation) -> bool {
    use kube::ResourceExt;
    allocation.labels().get(SIDE_LABEL).map(String::as_str) == Some(PROVIDER_SIDE)
}
/// Annotation on the provider's credentials Secret: the external endpoints.
pub const EXTERNAL_ENDPOINTS_ANNOTATION: &str = "fluidos.eu/external-endpoints";
/// Default longest wait for a teardown before giving up and saying what is left.
pub const DEFAULT_TEARDOWN_TIMEOUT: Duration = Duration::from_secs(120);

/// When to look at an object again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Only when something watched changes.
    AwaitChange,
    /// After this long (or earlier on a change).
    Requeue(Duration),
}

impl Next {
    /// As a kube controller action.
    pub fn action(self) -> kube::runtime::controller::Action {
        match self {
            Next::AwaitChange => kube::runtime::controller::Action::await_change(),
            Next::Requeue(d) => kube::runtime::controller::Action::requeue(d),
        }
    }
}

/// A step of a reconcile, named in errors, logs and the failure metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Reading the Allocation.
    ReadAllocation,
    /// Reading the Contract.
    ReadContract,
    /// Reading the ServiceBlueprint (or the Flavor naming it).
    ReadBlueprint,
    /// Reading the service namespace and what is in it.
    ObserveService,
    /// Adding or removing the finalizer.
    WriteFinalizer,
    /// Applying the service's objects.
    ApplyObjects,
    /// Annotating the credentials Secret with the external endpoints.
    AnnotateCredentials,
    /// Deleting the service namespace.
    DeleteNamespace,
    /// Fetching the service's endpoints and credentials over REAR.
    FetchAccess,
    /// Reading the consumer's Secret.
    ReadSecret,
    /// Applying the consumer's Secret.
    ApplySecret,
    /// Deleting the consumer's Secret.
    DeleteSecret,
    /// Writing the Allocation status.
    WriteStatus,
    /// Making the companion Allocation or the NamespaceOffloading of a
    /// delivery by Liqo.
    Offload,
}

impl Step {
    /// snake_case name, the `reason` label of the failure metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::ReadAllocation => "read_allocation",
            Step::ReadContract => "read_contract",
            Step::ReadBlueprint => "read_blueprint",
            Step::ObserveService => "observe_service",
            Step::WriteFinalizer => "write_finalizer",
            Step::ApplyObjects => "apply_objects",
            Step::AnnotateCredentials => "annotate_credentials",
            Step::DeleteNamespace => "delete_namespace",
            Step::FetchAccess => "fetch_access",
            Step::ReadSecret => "read_secret",
            Step::ApplySecret => "apply_secret",
            Step::DeleteSecret => "delete_secret",
            Step::WriteStatus => "write_status",
            Step::Offload => "offload",
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
    /// A rendered object could not be turned into an API call.
    #[error("{step}: {message}")]
    Object {
        /// The step.
        step: Step,
        /// What is wrong.
        message: String,
    },
    /// The provider could not be asked; retried with backoff.
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
            Error::Kube { step, .. } | Error::Object { step, .. } | Error::Rear { step, .. } => {
                step.as_str()
            }
        }
    }

    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Kube { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Seconds since `t` (0 if in the future).
pub(crate) fn seconds_since(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    jiff::Timestamp::now().duration_since(t.0).as_secs().max(0)
}

/// The objects of `api` for a controller: its cache and the stream feeding
/// it, opening `ready` once the first complete list is in the cache.
pub(crate) fn watched<K>(
    api: kube::Api<K>,
    ready: fluidos_controller::ReadinessGate,
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
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .inspect_ok(move |event| {
            if matches!(event, Event::InitDone) {
                ready.set_ready();
            }
        })
        .applied_objects();
    (reader, stream)
}

/// Publishes an event about `allocation`; a failure is only logged.
pub(crate) async fn publish(
    recorder: &kube::runtime::events::Recorder,
    allocation: &fluidos_api::Allocation,
    warning: bool,
    reason: &str,
    note: String,
) {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType};
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(note),
        action: "AllocateService".to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &allocation.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "publishing an event failed");
    }
}

/// Writes `status` with the resourceVersion read as a precondition (a 409
/// means someone wrote since: retried with fresh data).
pub(crate) async fn save_status(
    api: &kube::Api<fluidos_api::Allocation>,
    name: &str,
    resource_version: Option<&str>,
    status: &fluidos_api::allocation::AllocationStatus,
) -> Result<(), Error> {
    use kube::api::{Patch, PatchParams};
    let mut body = serde_json::json!({
        "metadata": {"resourceVersion": resource_version},
        "status": status,
    });
    // A merge patch keeps what it does not name: a reference taken back
    // (the credentials gone) is removed by naming it null.
    if status.resource_ref.is_none() {
        body["status"]["resourceRef"] = serde_json::Value::Null;
    }
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(Error::kube(Step::WriteStatus))?;
    Ok(())
}

/// Sets the Allocation's finalizers to `finalizers` (resourceVersion as a
/// precondition); returns the new resourceVersion.
pub(crate) async fn write_finalizers(
    api: &kube::Api<fluidos_api::Allocation>,
    name: &str,
    resource_version: Option<&str>,
    finalizers: Vec<String>,
) -> Result<Option<String>, Error> {
    use kube::api::{Patch, PatchParams};
    let body = serde_json::json!({
        "metadata": {"resourceVersion": resource_version, "finalizers": finalizers},
    });
    let a = api
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(Error::kube(Step::WriteFinalizer))?;
    Ok(a.metadata.resource_version)
}

/// The Allocation's finalizers with `finalizer` added (`add`) or removed.
pub(crate) fn finalizers_with(
    allocation: &fluidos_api::Allocation,
    finalizer: &str,
    add: bool,
) -> Vec<String> {
    use kube::ResourceExt;
    let mut f: Vec<String> = allocation
        .finalizers()
        .iter()
        .filter(|f| f.as_str() != finalizer)
        .cloned()
        .collect();
    if add {
        f.push(finalizer.to_owned());
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_has_its_own_finalizer_and_allocations() {
        let mut a = fluidos_api::Allocation::new("a", Default::default());
        assert!(!is_provider_side(&a), "the buyer's (made by a Solver)");
        a.metadata.labels = Some([(SIDE_LABEL.into(), PROVIDER_SIDE.into())].into());
        assert!(is_provider_side(&a), "made by the REAR gateway for a sale");
        assert_ne!(PROVIDER_FINALIZER, CONSUMER_FINALIZER);
        a.metadata.finalizers = Some(vec![
            PROVIDER_FINALIZER.into(),
            CONSUMER_FINALIZER.into(),
            "other".into(),
        ]);
        assert_eq!(
            finalizers_with(&a, CONSUMER_FINALIZER, false),
            [PROVIDER_FINALIZER, "other"],
            "removing the consumer's keeps the provider's"
        );
        assert_eq!(
            finalizers_with(&a, PROVIDER_FINALIZER, false),
            [CONSUMER_FINALIZER, "other"]
        );
        a.metadata.finalizers = None;
        assert_eq!(
            finalizers_with(&a, PROVIDER_FINALIZER, true),
            [PROVIDER_FINALIZER]
        );
    }
}

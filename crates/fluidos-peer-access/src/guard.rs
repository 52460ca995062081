//! The executor that keeps the peer guard in place: the admission policies
//! of [`crate::workload_policy`] and the Pod Security labels of
//! [`crate::remote_namespace`].
//!
//! Two loops, both woken by watches:
//! - the policies are applied (server-side, forced) until they are in
//!   place, then watched by their label: a policy or binding deleted or
//!   edited by anyone but this node is applied again at once, and all of
//!   them after every (re)list of the watch, which covers changes made while
//!   it was down;
//! - every namespace that holds a peer's workloads is labelled with the
//!   configured Pod Security level as it appears (a controller over the
//!   namespaces Liqo labels with a remote cluster ID).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::{Metrics, ReconcileError, Reconciler};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::remote_namespace;
use crate::workload_policy::{self, Guarded, NAMES, POLICY_LABEL, PolicyInputs};

/// Field manager of everything the guard writes.
pub const FIELD_MANAGER: &str = "fluidos-peer-guard";
/// Controller name in logs and metrics.
const CONTROLLER: &str = "peer-namespaces";

/// What the guard keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// The policies' inputs (the Pod Security level among them).
    pub inputs: PolicyInputs,
}

/// A step that failed, with its API error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{step}: {source}")]
    Kube {
        /// The step.
        step: Step,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be encoded (never expected: our own types).
    #[error("encoding {what}: {source}")]
    Encode {
        /// The object.
        what: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// The guard's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Applying an admission policy.
    ApplyPolicy,
    /// Applying an admission policy's binding.
    ApplyBinding,
    /// Labelling a peer namespace.
    LabelNamespace,
}

impl Step {
    /// snake_case, the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::ApplyPolicy => "apply_policy",
            Step::ApplyBinding => "apply_binding",
            Step::LabelNamespace => "label_namespace",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ReconcileError for Error {
    fn step(&self) -> &'static str {
        match self {
            Error::Kube { step, .. } => step.as_str(),
            Error::Encode { .. } => "encode",
        }
    }
    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Kube { source, .. } => Some(source),
            Error::Encode { .. } => None,
        }
    }
}

/// Runs the guard until `shutdown`; `ready` is set once the API server
/// enforces the policies (the node does not report ready before).
pub async fn run(
    client: kube::Client,
    cfg: GuardConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let plan = workload_policy::plan(cfg.inputs.clone());
    tokio::select! {
        () = keep_policies(client.clone(), plan, ready) => {}
        () = label_namespaces(client, cfg, metrics) => {}
        () = shutdown => {}
    }
}

/// Server-side applies `obj` (typed, our own) under [`FIELD_MANAGER`],
/// returning the resourceVersion written.
async fn apply<K>(api: &Api<K>, name: &str, obj: &K, step: Step) -> Result<Option<String>, Error>
where
    K: Resource<DynamicType = ()>
        + Serialize
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut value = serde_json::to_value(obj).map_err(|source| Error::Encode {
        what: format!("{} {name}", K::kind(&())),
        source,
    })?;
    if let Some(m) = value.as_object_mut() {
        m.insert("apiVersion".into(), K::api_version(&()).into());
        m.insert("kind".into(), K::kind(&()).into());
    }
    let written = api
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(value),
        )
        .await
        .map_err(|source| Error::Kube { step, source })?;
    Ok(written.resource_version())
}

/// The resourceVersions this node wrote last, by kind and name: an event of
/// one of them is this node's own write, not a change to undo.
type Written = HashMap<(&'static str, String), String>;

async fn apply_one(client: &kube::Client, g: &Guarded, written: &mut Written) -> Result<(), Error> {
    let name = g.policy.name_any();
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone());
    if let Some(rv) = apply(&policies, &name, &g.policy, Step::ApplyPolicy).await? {
        written.insert(("policy", name.clone()), rv);
    }
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    if let Some(rv) = apply(&bindings, &name, &g.binding, Step::ApplyBinding).await? {
        written.insert(("binding", name), rv);
    }
    Ok(())
}

/// Applies every policy, retrying with backoff until all are in place.
async fn apply_all(client: &kube::Client, plan: &[Guarded], written: &mut Written) {
    let mut failures: u32 = 0;
    loop {
        let mut result = Ok(());
        for g in plan {
            result = apply_one(client, g, written).await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(policies = ?NAMES, "peer guard admission policies in place");
                }
                return;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::error!(
                    error = %fluidos_controller::reconcile::error_chain(&e),
                    "could not apply the peer guard admission policies (retrying): until they are in place, a peer's Liqo may run privileged pods here, and this node is not ready"
                );
                tokio::time::sleep(fluidos_controller::reconcile::backoff_delay(failures)).await;
            }
        }
    }
}

/// One watch event on a guarded object, reduced to what the guard does.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// The watch (re)listed: apply everything (changes while it was down).
    Relisted,
    /// One of ours deleted, or changed by someone else: apply it again.
    Changed(String),
    /// Our own write, or nothing of ours.
    Nothing,
}

fn seen<K: Resource<DynamicType = ()>>(
    kind: &'static str,
    event: &watcher::Event<K>,
    written: &Written,
) -> Seen {
    let ours = |o: &K| {
        let name = o.meta().name.clone().unwrap_or_default();
        NAMES.contains(&name.as_str()).then_some(name)
    };
    match event {
        watcher::Event::InitDone => Seen::Relisted,
        watcher::Event::Delete(o) => ours(o).map_or(Seen::Nothing, Seen::Changed),
        watcher::Event::Apply(o) => match ours(o) {
            Some(name)
                if written.get(&(kind, name.clone())) != o.meta().resource_version.as_ref() =>
            {
                Seen::Changed(name)
            }
            _ => Seen::Nothing,
        },
        watcher::Event::Init | watcher::Event::InitApply(_) => Seen::Nothing,
    }
}

/// Name of the namespace the enforcement probe asks to create (dry run).
const PROBE: &str = "fluidos-peer-guard-probe";
/// How often the probe asks while the API server has not loaded the policies.
const PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether the API server enforces the policies yet: a dry-run create of a
/// namespace the namespace policy refuses (one a NamespaceMap of tenant
/// `no-such-peer` would make under a name not derived for it). Policies are loaded by the API
/// server's admission a moment after they are written, and nothing can be
/// watched for that.
async fn enforced(client: &kube::Client) -> Result<bool, kube::Error> {
    let probe: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": PROBE,
            "labels": {remote_namespace::REMOTE_CLUSTER_ID_LABEL: "no-such-peer"},
            "annotations": {remote_namespace::MANAGED_BY_ANNOTATION: "liqo-tenant-no-such-peer/probe"},
        }
    }))
    .unwrap_or_default();
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&params, &probe)
        .await
    {
        Err(kube::Error::Api(s)) if s.message.contains("FLUIDOS peer guard") => Ok(true),
        Ok(_) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits until the API server enforces the policies (see [`enforced`]).
async fn until_enforced(client: &kube::Client) {
    let mut logged = false;
    loop {
        match enforced(client).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) if !logged => {
                logged = true;
                tracing::warn!(error = %e, "cannot check that the peer guard policies are enforced (retrying)");
            }
            Err(_) => {}
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

async fn keep_policies(client: kube::Client, plan: Vec<Guarded>, ready: ReadinessGate) {
    let mut written = Written::new();
    apply_all(&client, &plan, &mut written).await;
    until_enforced(&client).await;
    tracing::info!(policies = ?NAMES, "peer guard admission policies enforced");
    ready.set_ready();
    let config =
        watcher::Config::default().labels(&format!("{}={}", POLICY_LABEL.0, POLICY_LABEL.1));
    let mut policies = watcher::watcher(
        Api::<ValidatingAdmissionPolicy>::all(client.clone()),
        config.clone(),
    )
    .default_backoff()
    .boxed();
    let mut bindings = watcher::watcher(
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone()),
        config,
    )
    .default_backoff()
    .boxed();
    loop {
        let what = tokio::select! {
            Some(e) = policies.next() => e.map(|e| seen("policy", &e, &written)),
            Some(e) = bindings.next() => e.map(|e| seen("binding", &e, &written)),
            else => return,
        };
        match what {
            Ok(Seen::Relisted) => apply_all(&client, &plan, &mut written).await,
            Ok(Seen::Changed(name)) => {
                tracing::warn!(policy = %name, "a peer guard admission policy was deleted or changed: putting it back");
                apply_all(&client, &plan, &mut written).await;
            }
            Ok(Seen::Nothing) => {}
            Err(e) => tracing::warn!(
                error = %e,
                "watching the peer guard admission policies failed; retrying"
            ),
        }
    }
}

struct Context {
    client: kube::Client,
    cfg: GuardConfig,
    reconciler: Reconciler,
}

async fn label_namespaces(client: kube::Client, cfg: GuardConfig, metrics: &Metrics) {
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let namespaces = Api::<Namespace>::all(client.clone());
    let ctx = Arc::new(Context {
        client,
        cfg,
        reconciler: reconciler.clone(),
    });
    let policy = reconciler.clone();
    let stream = Controller::new(
        namespaces,
        watcher::Config::default().labels(&remote_namespace::selector()),
    )
    .run(
        |ns, ctx| async move {
            let r = ctx.reconciler.clone();
            r.observe(ns.as_ref(), label_one(ns.clone(), ctx)).await
        },
        move |ns, err, _| policy.error_policy(ns.as_ref(), err),
        ctx,
    );
    fluidos_controller::reconcile::drain(reconciler, stream.boxed()).await;
}

async fn label_one(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(labels) = remote_namespace::labels_to_apply(&ns, ctx.cfg.inputs.level) else {
        return Ok(Action::await_change());
    };
    let name = ns.name_any();
    tracing::info!(namespace = %name, level = %ctx.cfg.inputs.level, "enforcing Pod Security on a peer's namespace");
    let patch = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    });
    Api::<Namespace>::all(ctx.client.clone())
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
        .map_err(|source| Error::Kube {
            step: Step::LabelNamespace,
            source,
        })?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn policy(name: &str, rv: &str) -> ValidatingAdmissionPolicy {
        ValidatingAdmissionPolicy {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_others_changes_and_deletions_are_undone() {
        let mut written = Written::new();
        written.insert(("policy", workload_policy::PODS.to_owned()), "7".into());
        let ours = |rv| watcher::Event::Apply(policy(workload_policy::PODS, rv));
        assert_eq!(seen("policy", &ours("7"), &written), Seen::Nothing);
        assert_eq!(
            seen("policy", &ours("8"), &written),
            Seen::Changed(workload_policy::PODS.to_owned())
        );
        // Same name and version, but the binding's record: another object.
        assert_eq!(
            seen("binding", &ours("7"), &written),
            Seen::Changed(workload_policy::PODS.to_owned())
        );
        assert_eq!(
            seen(
                "policy",
                &watcher::Event::Delete(policy(workload_policy::SHADOWPODS, "9")),
                &written
            ),
            Seen::Changed(workload_policy::SHADOWPODS.to_owned())
        );
        assert_eq!(
            seen(
                "policy",
                &watcher::Event::Delete(policy("someone-elses", "1")),
                &written
            ),
            Seen::Nothing
        );
        assert_eq!(
            seen::<ValidatingAdmissionPolicy>("policy", &watcher::Event::InitDone, &written),
            Seen::Relisted
        );
    }
}

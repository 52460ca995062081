//! The provider's ResourceSlice class: what a consumer gets is what its
//! Contract sold, whatever its ResourceSlice asks for.
//!
//! Liqo v1.0's built-in `default` class grants every ResourceSlice what it
//! requests, and the consumer writes the request (`liqo-peering.md` §4). A
//! consumer of a FLUIDOS provider instead asks for the class this node
//! serves ([`FLUIDOS_CLASS`], named to it in the Contract's
//! `extraInformation` under [`CLASS_KEY`]); Liqo then only authenticates the
//! slice, and this controller writes its grant: `status.resources` = the
//! quantities of the Contract named like the slice and sold to the consumer
//! whose tenant namespace holds it, re-asserted on every change (a consumer
//! that edits its slice, or forges its status, gets the Contract's
//! quantities back). A slice without such a Contract is `Denied`.
//!
//! Liqo v1.0 cannot switch the `default` class off, so the node also keeps a
//! ValidatingAdmissionPolicy ([`admission_policy`]) that refuses replicated
//! ResourceSlices of any other class, and status writes by Liqo's peer
//! control-plane users.
//!
//! [`decide`] and [`desired_status`] are pure; [`run`] reads and writes.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::service_delivery;
use fluidos_api::{Contract, NodeIdentity};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_controller::{Metrics, ReconcileError, Reconciler};
use fluidos_liqo_api::generated::resource_slice::{
    ResourceSliceStatus, ResourceSliceStatusConditions, ResourceSliceStatusConditionsStatus,
    ResourceSliceStatusConditionsType,
};
use fluidos_liqo_api::generated::tenant::TenantTenantCondition;
use fluidos_liqo_api::{ResourceSlice, Tenant};
use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::objects;

pub use fluidos_api::reservation::{
    FLUIDOS_RESOURCE_SLICE_CLASS as FLUIDOS_CLASS, RESOURCE_SLICE_CLASS_KEY as CLASS_KEY,
};
/// Label Liqo's replicator puts on the provider's copy of a consumer's slice.
pub const REPLICATED_LABEL: &str = "liqo.io/replicated";
/// Name of the admission policy and of its binding.
pub const POLICY_NAME: &str = "fluidos-resourceslice-class";
/// Group of the certificates Liqo issues to a peer's control plane.
pub const LIQO_PEER_GROUP: &str = "liqo.io";
/// Reason of the `Resources` condition this controller writes.
const REASON_GRANTED: &str = "ContractGranted";
const REASON_DENIED: &str = "NoContract";
/// Reason of a `Resources` condition granting nothing because the Contract
/// ended on the provider (the consumer reads it as a denial).
pub(crate) const REASON_REVOKED: &str = "ContractEnded";
/// Controller name in logs and metrics.
const CONTROLLER: &str = "resourceslice-class";
/// How often the admission policy is applied again once in place.
const POLICY_REAPPLY: Duration = Duration::from_secs(300);
/// Field manager of the admission policy.
const FIELD_MANAGER: &str = "fluidos-resourceslice-class";

/// The class the consumer asks for in a Contract's ResourceSlice: the one
/// the provider named (when it is a plausible class name), else Liqo's
/// `default` (a Go provider names none and serves only that).
pub fn class_for(contract: &fluidos_api::reservation::ContractSpec) -> &str {
    contract
        .extra_information
        .as_ref()
        .and_then(|x| x.get(CLASS_KEY))
        .map(String::as_str)
        .filter(|c| {
            !c.is_empty()
                && c.len() <= 63
                && c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-')
        })
        .unwrap_or(objects::DEFAULT_CLASS)
}

/// What the provider grants one replicated ResourceSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Another class: Liqo's or another controller's business.
    NotOurs,
    /// Liqo has not authenticated the slice yet.
    WaitForAuthentication,
    /// The Contract's quantities.
    Accept {
        /// The Contract the grant comes from.
        contract: String,
        /// `status.resources`.
        resources: BTreeMap<String, String>,
    },
    /// No grant, and why: the slice was never granted anything.
    Deny(String),
    /// A grant taken back (the Contract ended or is gone): zero of each
    /// resource, `Accepted`, so that Liqo shrinks the Quota it made from the
    /// earlier grant (a `Denied` slice leaves the old Quota in place).
    Revoke {
        /// Why.
        reason: String,
        /// The resource names granted before, each now zero.
        keys: Vec<String>,
    },
    /// A grant is due but the consumer's Tenant is cordoned or drained: the
    /// decision is Liqo's (refusals are written regardless).
    TenantNotActive,
}

/// The consumer whose tenant namespace `namespace` is (`liqo-tenant-<id>`).
fn consumer_of(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix("liqo-tenant-")
        .filter(|id| !id.is_empty())
}

fn authenticated(slice: &ResourceSlice) -> bool {
    condition(
        slice.status.as_ref(),
        &ResourceSliceStatusConditionsType::Authentication,
    )
    .is_some_and(|c| c.status == ResourceSliceStatusConditionsStatus::Accepted)
}

fn condition<'a>(
    status: Option<&'a ResourceSliceStatus>,
    type_: &ResourceSliceStatusConditionsType,
) -> Option<&'a ResourceSliceStatusConditions> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| &c.r#type == type_)
}

/// The grant of `slice` (in its namespace on this provider), given the
/// Contract of this node named like it, if any, at time `now`.
///
/// The consumer is read from the namespace, which only the provider makes
/// (the peer's credentials cannot create namespaces), never from the slice.
pub fn decide(
    slice: &ResourceSlice,
    class: &str,
    contract: Option<&Contract>,
    seller: &NodeIdentity,
    tenant_active: bool,
    now: jiff::Timestamp,
) -> Grant {
    if slice.spec.class.as_deref() != Some(class) {
        return Grant::NotOurs;
    }
    let name = slice.name_any();
    let namespace = slice.namespace().unwrap_or_default();
    let Some(consumer) = consumer_of(&namespace) else {
        return Grant::Deny(format!(
            "namespace {namespace} is not a Liqo tenant namespace"
        ));
    };
    if !authenticated(slice) {
        return Grant::WaitForAuthentication;
    }
    // A refusal takes back what an earlier grant gave.
    let refuse = |reason: String| match slice.status.as_ref().and_then(|s| s.resources.as_ref()) {
        Some(granted) if !granted.is_empty() => Grant::Revoke {
            reason,
            keys: granted.keys().cloned().collect(),
        },
        _ => Grant::Deny(reason),
    };
    let Some(contract) = contract else {
        return refuse(format!("no Contract {name} was sold to cluster {consumer}"));
    };
    let spec = &contract.spec;
    // A Service this node bought and its seller delivers by Liqo: the
    // seller peers here as Liqo's consumer to offload the service.
    let offloading = service_delivery::bought_by_liqo(contract);
    if offloading {
        if spec.peering_target_credentials.liqo_id != consumer
            || spec.buyer.node_id != seller.node_id
            || spec.buyer.domain != seller.domain
        {
            return refuse(format!(
                "no Contract {name} was bought from cluster {consumer}"
            ));
        }
    } else if spec.buyer_cluster_id != consumer
        || spec.seller.node_id != seller.node_id
        || spec.seller.domain != seller.domain
    {
        return refuse(format!("no Contract {name} was sold to cluster {consumer}"));
    }
    if let Some(end) = spec.expiration_time.as_deref()
        && fluidos_controller::time::is_past_at(end, now)
    {
        return refuse(format!("Contract {name} expired at {end}"));
    }
    let resources = if offloading {
        Ok(service_delivery::offloading_resources(
            service_delivery::hosting_policy(spec),
        ))
    } else {
        objects::contracted_resources(spec)
    };
    match resources {
        // Only a grant waits on a cordoned or drained Tenant (the provider's
        // admin, and Liqo, decide); a refusal never does, as the consumer
        // can write its own Tenant.
        Ok(_) if !tenant_active => Grant::TenantNotActive,
        Ok(resources) => Grant::Accept {
            contract: name,
            resources,
        },
        Err(e) => refuse(format!("Contract {name}: {e}")),
    }
}

/// True when two resource maps hold the same quantities (`1Gi` = `1024Mi`):
/// Liqo rewrites quantities in canonical form when it writes the status.
fn same_quantities(
    a: Option<&BTreeMap<String, IntOrString>>,
    b: Option<&BTreeMap<String, IntOrString>>,
) -> bool {
    let text = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    let amount = |v: &IntOrString| {
        fluidos_api::quantity::Amount::of(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            text(v),
        ))
        .ok()
    };
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().all(|(k, va)| {
                    b.get(k).is_some_and(|vb| match (amount(va), amount(vb)) {
                        (Some(x), Some(y)) => x == y,
                        _ => text(va) == text(vb),
                    })
                })
        }
        _ => false,
    }
}

/// The status `slice` must have under `grant`, or `None` when it already
/// has it (or the grant is not this controller's to write). Liqo's
/// conditions and authentication parameters are kept as they are.
pub fn desired_status(
    current: Option<&ResourceSliceStatus>,
    grant: &Grant,
    now: &str,
) -> Option<ResourceSliceStatus> {
    let (resources, verdict, reason, message) = match grant {
        Grant::NotOurs | Grant::WaitForAuthentication | Grant::TenantNotActive => return None,
        Grant::Revoke { reason, keys } => (
            Some(
                keys.iter()
                    .map(|k| (k.clone(), IntOrString::String("0".to_owned())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ResourceSliceStatusConditionsStatus::Accepted,
            REASON_REVOKED,
            format!("nothing granted: {reason}"),
        ),
        Grant::Accept {
            contract,
            resources,
        } => (
            Some(
                resources
                    .iter()
                    .map(|(k, v)| (k.clone(), IntOrString::String(v.clone())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ResourceSliceStatusConditionsStatus::Accepted,
            REASON_GRANTED,
            format!("granted what Contract {contract} sold"),
        ),
        Grant::Deny(why) => (
            None,
            ResourceSliceStatusConditionsStatus::Denied,
            REASON_DENIED,
            why.clone(),
        ),
    };
    let mut next = current.cloned().unwrap_or_default();
    let old = condition(current, &ResourceSliceStatusConditionsType::Resources);
    let unchanged = same_quantities(next.resources.as_ref(), resources.as_ref())
        && old.is_some_and(|c| {
            c.status == verdict
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message.as_str())
        });
    if unchanged {
        return None;
    }
    let transition = match old {
        Some(c) if c.status == verdict => c.last_transition_time.clone(),
        _ => Some(now.to_owned()),
    };
    next.resources = resources;
    let mut conditions: Vec<_> = next
        .conditions
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.r#type != ResourceSliceStatusConditionsType::Resources)
        .collect();
    conditions.push(ResourceSliceStatusConditions {
        r#type: ResourceSliceStatusConditionsType::Resources,
        status: verdict,
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: transition,
    });
    next.conditions = Some(conditions);
    Some(next)
}

/// The admission policy that keeps the `default` class (and any class but
/// `class`) out of this provider's tenant namespaces, and the peers' Liqo
/// control planes out of ResourceSlice statuses. Denials are `Forbidden`, on
/// which Liqo's replicator stops instead of retrying.
pub fn admission_policy(
    class: &str,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let meta = || ObjectMeta {
        name: Some(POLICY_NAME.to_owned()),
        labels: Some(
            [(
                objects::MANAGED_BY.0.to_owned(),
                objects::MANAGED_BY.1.to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_owned()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec!["authentication.liqo.io".to_owned()]),
                    api_versions: Some(vec!["*".to_owned()]),
                    operations: Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()]),
                    resources: Some(vec![
                        "resourceslices".to_owned(),
                        "resourceslices/status".to_owned(),
                    ]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            variables: Some(vec![
                Variable {
                    name: "status".to_owned(),
                    expression: "has(request.subResource) && request.subResource == 'status'"
                        .to_owned(),
                },
                Variable {
                    name: "peer".to_owned(),
                    expression: format!(
                        "has(request.userInfo.groups) && '{LIQO_PEER_GROUP}' in request.userInfo.groups"
                    ),
                },
                Variable {
                    name: "replicated".to_owned(),
                    expression: format!(
                        "has(object.metadata.labels) \
                         && '{REPLICATED_LABEL}' in object.metadata.labels \
                         && object.metadata.labels['{REPLICATED_LABEL}'] == 'true'"
                    ),
                },
            ]),
            validations: Some(vec![
                // A peer's Liqo (or any replica) brings only the served class,
                // and only as a replica (which this node's controller sees).
                Validation {
                    expression: format!(
                        "variables.status || !(variables.peer || variables.replicated) \
                         || ((variables.replicated || !variables.peer) \
                             && has(object.spec.class) && object.spec.class == '{class}')"
                    ),
                    message: Some(format!(
                        "this FLUIDOS provider grants resources only to replicated ResourceSlices of class {class:?}, sized by the Contract"
                    )),
                    reason: Some("Forbidden".to_owned()),
                    ..Default::default()
                },
                // The grant is the provider's to write.
                Validation {
                    expression: "!variables.status || !variables.peer".to_owned(),
                    message: Some(
                        "a peer may not write the status of a ResourceSlice: the provider grants it"
                            .to_owned(),
                    ),
                    reason: Some("Forbidden".to_owned()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(POLICY_NAME.to_owned()),
            validation_actions: Some(vec!["Deny".to_owned()]),
            // Not in the tenant namespaces of unmodified Go consumers the
            // gateway granted peering (`--rear-go-peering-grant`): they ask
            // for Liqo's `default` class, which Liqo sizes by their request,
            // as upstream (the README says what that setting gives away).
            match_resources: Some(MatchResources {
                namespace_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: fluidos_api::reservation::GO_PEERING_NAMESPACE_LABEL.to_owned(),
                        operator: "NotIn".to_owned(),
                        values: Some(vec!["true".to_owned()]),
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// What the controller needs to know.
#[derive(Clone, Debug)]
pub struct SliceClassConfig {
    /// Namespace of this node's Contracts.
    pub namespace: String,
    /// This node's identity: only its own sales are granted.
    pub identity: NodeIdentity,
    /// The class served ([`FLUIDOS_CLASS`]).
    pub class: String,
    /// Where the watches of Liqo's kinds say which are not served.
    pub liqo: crate::liqo_watch::LiqoPresence,
}

/// One reconcile's failure: one variant per step, keeping the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{step}: {source}")]
    Kube {
        /// The step.
        step: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn step(&self) -> &'static str {
        match self {
            Error::Kube { step, .. } => step,
        }
    }
    fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Kube { source, .. } => Some(source),
        }
    }
}

fn kube_step(step: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { step, source }
}

struct Context {
    client: kube::Client,
    cfg: SliceClassConfig,
    reconciler: Reconciler,
}

/// Applies the admission policy and its binding (server-side apply).
pub async fn apply_admission_policy(client: &kube::Client, class: &str) -> Result<(), kube::Error> {
    let (policy, binding) = admission_policy(class);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let typed = |v: serde_json::Value, kind: &str| {
        let mut v = v;
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "apiVersion".into(),
                "admissionregistration.k8s.io/v1".into(),
            );
            m.insert("kind".into(), kind.into());
        }
        v
    };
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .patch(
            POLICY_NAME,
            &pp,
            &Patch::Apply(typed(
                serde_json::to_value(&policy).unwrap_or_default(),
                "ValidatingAdmissionPolicy",
            )),
        )
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .patch(
            POLICY_NAME,
            &pp,
            &Patch::Apply(typed(
                serde_json::to_value(&binding).unwrap_or_default(),
                "ValidatingAdmissionPolicyBinding",
            )),
        )
        .await?;
    Ok(())
}

/// Runs the class controller until `shutdown`: applies the admission policy
/// (logging, not failing, when this node may not), then grants every
/// replicated ResourceSlice of the class; `ready` is set once the slices are
/// listed.
pub async fn run(
    client: kube::Client,
    cfg: SliceClassConfig,
    metrics: &Metrics,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    // Aborted with this future, however it ends (dropped at shutdown too).
    let _policy_task = AbortOnDrop(tokio::spawn(keep_admission_policy(
        client.clone(),
        cfg.class.clone(),
    )));
    let reconciler = Reconciler::new(CONTROLLER, metrics);
    let slices = Api::<ResourceSlice>::all(client.clone());
    let (cache, writer) = kube::runtime::reflector::store();
    let stream = {
        use futures::TryStreamExt;
        use kube::runtime::WatchStreamExt;
        crate::liqo_watch::quiet(
            "ResourceSlice",
            cfg.liqo.clone(),
            watcher::watcher(
                slices,
                watcher::Config::default().labels(&format!("{REPLICATED_LABEL}=true")),
            )
            .default_backoff(),
        )
        .reflect(writer)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                ready.set_ready();
            }
        })
        .applied_objects()
    };
    let contracts = {
        use kube::runtime::WatchStreamExt;
        watcher::watcher(
            Api::<Contract>::namespaced(client.clone(), &cfg.namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects()
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        cfg,
        reconciler: reconciler.clone(),
    });
    let policy = reconciler.clone();
    // A Tenant cordoned, drained or active again changes what a slice of its
    // namespace may be granted.
    let tenants = {
        use kube::runtime::WatchStreamExt;
        crate::liqo_watch::quiet(
            "Tenant",
            ctx.cfg.liqo.clone(),
            watcher::watcher(
                Api::<Tenant>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .touched_objects()
    };
    let slices_of = cache.clone();
    let stream = Controller::for_stream(stream, cache)
        .watches_stream(contracts, |c: Contract| {
            (!c.spec.buyer_cluster_id.is_empty()).then(|| {
                ObjectRef::new(&c.name_any())
                    .within(&objects::tenant_namespace(&c.spec.buyer_cluster_id))
            })
        })
        .watches_stream(tenants, move |t: Tenant| {
            let ns = t.namespace();
            slices_of
                .state()
                .iter()
                .filter(|s| s.namespace() == ns)
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(
            |s, ctx| async move {
                let r = ctx.reconciler.clone();
                r.observe(s.as_ref(), reconcile(s.clone(), ctx)).await
            },
            move |s, err, _| policy.error_policy(s.as_ref(), err),
            ctx,
        );
    use futures::StreamExt;
    fluidos_controller::reconcile::drain(reconciler, stream.boxed()).await;
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Applies the admission policy until it is in place (retrying with
/// backoff), then again every [`POLICY_REAPPLY`], so that a deleted or
/// edited policy comes back.
async fn keep_admission_policy(client: kube::Client, class: String) {
    let mut failures: u32 = 0;
    loop {
        let wait = match apply_admission_policy(&client, &class).await {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!("ResourceSlice class admission policy applied");
                }
                failures = 0;
                POLICY_REAPPLY
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::error!(
                    error = %e,
                    "could not apply the ResourceSlice class admission policy (retrying): until it is in place, a peer's Liqo may ask the default class for more than it bought"
                );
                fluidos_controller::reconcile::backoff_delay(failures)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[tracing::instrument(skip_all, fields(slice = %s.name_any(), namespace = ?s.namespace()))]
async fn reconcile(s: Arc<ResourceSlice>, ctx: Arc<Context>) -> Result<Action, Error> {
    if s.spec.class.as_deref() != Some(ctx.cfg.class.as_str()) {
        return Ok(Action::await_change());
    }
    let contract = Api::<Contract>::namespaced(ctx.client.clone(), &ctx.cfg.namespace)
        .get_opt(&s.name_any())
        .await
        .map_err(kube_step("get_contract"))?;
    let ns = s.namespace().unwrap_or_default();
    // The consumer's Tenant here is named after it; cordoned or drained by
    // this provider's admin, Liqo decides.
    let tenant_active = match ns.strip_prefix("liqo-tenant-") {
        Some(consumer) => Api::<Tenant>::namespaced(ctx.client.clone(), &ns)
            .get_opt(consumer)
            .await
            .map_err(kube_step("get_tenant"))?
            .is_none_or(|t| {
                t.spec
                    .tenant_condition
                    .as_ref()
                    .is_none_or(|c| *c == TenantTenantCondition::Active)
            }),
        None => true,
    };
    let now = jiff::Timestamp::now();
    let grant = decide(
        &s,
        &ctx.cfg.class,
        contract.as_ref(),
        &ctx.cfg.identity,
        tenant_active,
        now,
    );
    let Some(status) = desired_status(
        s.status.as_ref(),
        &grant,
        &fluidos_controller::time::format(now),
    ) else {
        return Ok(requeue_at_expiry(&grant, contract.as_ref(), now));
    };
    match &grant {
        Grant::Accept { resources, .. } => {
            tracing::info!(?resources, "granting the contracted resources");
        }
        Grant::Deny(why) => tracing::warn!(reason = %why, "ResourceSlice denied"),
        Grant::Revoke { reason, .. } => {
            tracing::info!(%reason, "taking back a ResourceSlice's grant");
        }
        Grant::NotOurs | Grant::WaitForAuthentication | Grant::TenantNotActive => {}
    }
    let mut next = (*s).clone();
    next.status = Some(status);
    // Written over the version read: a concurrent write by Liqo (its
    // authentication half) makes this a conflict and a fresh decision. The
    // whole status travels: the types are Liqo v1.0.0's, the pinned version.
    Api::<ResourceSlice>::namespaced(ctx.client.clone(), &ns)
        .replace_status(&s.name_any(), &PostParams::default(), &next)
        .await
        .map_err(kube_step("write_status"))?;
    Ok(requeue_at_expiry(&grant, contract.as_ref(), now))
}

/// An accepted slice is looked at again when its Contract ends.
fn requeue_at_expiry(grant: &Grant, contract: Option<&Contract>, now: jiff::Timestamp) -> Action {
    let end = contract
        .and_then(|c| c.spec.expiration_time.as_deref())
        .and_then(fluidos_controller::time::parse);
    match (grant, end) {
        (Grant::Accept { .. }, Some(end)) => {
            let left = end.duration_since(now).unsigned_abs();
            Action::requeue(left.min(Duration::from_secs(3600)) + Duration::from_secs(1))
        }
        _ => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use fluidos_api::common::HostingPolicy;
    use fluidos_liqo_api::generated::resource_slice::{
        ResourceSliceSpec, ResourceSliceStatusAuthParams,
    };

    const NOW: &str = "2026-12-01T10:00:00Z";

    fn now() -> jiff::Timestamp {
        fluidos_controller::time::parse(NOW).unwrap()
    }

    fn seller() -> NodeIdentity {
        crate::objects::tests::contract(None).seller
    }

    /// Contract `name` sold by `p` to cluster `cons`: 1 CPU, 1Gi, 110 pods.
    fn contract(name: &str) -> Contract {
        let mut spec = crate::objects::tests::contract(Some(("1", "1Gi", "110")));
        spec.expiration_time = Some("2026-12-02T10:00:00Z".into());
        Contract::new(name, spec)
    }

    fn condition(
        type_: ResourceSliceStatusConditionsType,
        status: ResourceSliceStatusConditionsStatus,
    ) -> ResourceSliceStatusConditions {
        ResourceSliceStatusConditions {
            r#type: type_,
            status,
            last_transition_time: Some("2026-12-01T09:00:00Z".into()),
            message: None,
            reason: None,
        }
    }

    /// The provider's replica of consumer `cons`'s slice `name`, asking for
    /// `cpu`, authenticated by Liqo.
    fn slice(name: &str, class: &str, cpu: &str) -> ResourceSlice {
        let mut s = ResourceSlice::new(
            name,
            ResourceSliceSpec {
                class: Some(class.into()),
                consumer_cluster_id: Some("cons".into()),
                provider_cluster_id: Some("prov".into()),
                resources: Some([("cpu".to_owned(), IntOrString::String(cpu.into()))].into()),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("liqo-tenant-cons".into());
        s.status = Some(ResourceSliceStatus {
            auth_params: Some(ResourceSliceStatusAuthParams {
                signed_crt: Some("Y3J0".into()),
                ..Default::default()
            }),
            conditions: Some(vec![condition(
                ResourceSliceStatusConditionsType::Authentication,
                ResourceSliceStatusConditionsStatus::Accepted,
            )]),
            ..Default::default()
        });
        s
    }

    fn accepted(name: &str) -> Grant {
        Grant::Accept {
            contract: name.into(),
            resources: [
                ("cpu".to_owned(), "1".to_owned()),
                ("memory".to_owned(), "1Gi".to_owned()),
                ("pods".to_owned(), "110".to_owned()),
            ]
            .into(),
        }
    }

    #[test]
    fn the_consumer_asks_for_the_class_its_provider_names() {
        let mut spec = crate::objects::tests::contract(None);
        assert_eq!(class_for(&spec), "default", "a Go provider names none");
        spec.extra_information = Some([(CLASS_KEY.to_owned(), "fluidos".to_owned())].into());
        assert_eq!(class_for(&spec), "fluidos");
        for hostile in ["", "Fluidos", "a b", &"x".repeat(64)] {
            spec.extra_information = Some([(CLASS_KEY.to_owned(), hostile.to_owned())].into());
            assert_eq!(class_for(&spec), "default", "{hostile:?}");
        }
    }

    #[test]
    fn a_slice_gets_what_its_contract_sold_whatever_it_asks() {
        let c = contract("contract-a");
        for asked in ["1", "100", "0"] {
            let s = slice("contract-a", FLUIDOS_CLASS, asked);
            assert_eq!(
                decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
                accepted("contract-a"),
                "asked for {asked}"
            );
        }
    }

    /// Service `name` this node (`p`) bought from the cluster `cons`.
    fn bought_service(name: &str, by_liqo: bool) -> Contract {
        let mut spec = crate::objects::tests::contract(None);
        spec.flavor.spec.flavor_type = serde_json::from_value(
            serde_json::json!({"typeIdentifier": "Service", "typeData": {}}),
        )
        .unwrap();
        spec.buyer = seller();
        spec.seller.node_id = "s".into();
        spec.buyer_cluster_id = "prov".into();
        spec.peering_target_credentials.liqo_id = "cons".into();
        spec.expiration_time = Some("2026-12-02T10:00:00Z".into());
        spec.extra_information = Some(service_delivery::extra_information());
        let mut c = Contract::new(name, spec);
        // The buyer's own mark: it asked for the delivery by Liqo.
        if by_liqo {
            c.labels_mut().insert(
                service_delivery::DELIVERY_LABEL.into(),
                service_delivery::LIQO.into(),
            );
        }
        c
    }

    #[test]
    fn the_seller_of_a_service_delivered_by_liqo_gets_the_offloading_slice() {
        let s = slice("contract-s", FLUIDOS_CLASS, "100");
        let offloading = Grant::Accept {
            contract: "contract-s".into(),
            resources: service_delivery::offloading_resources(HostingPolicy::Provider),
        };
        let c = bought_service("contract-s", true);
        assert_eq!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            offloading
        );
        // A service whose pods run here (the flavor's default policy is
        // Consumer): the Go node's service slice.
        let mut c = bought_service("contract-s", true);
        c.spec.flavor.spec.flavor_type.type_data = serde_json::json!({
            "name": "mq", "description": "", "category": "message-queue", "tags": [],
            "hostingPolicies": ["Consumer"], "configurationTemplate": {}
        });
        assert_eq!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::Accept {
                contract: "contract-s".into(),
                resources: service_delivery::offloading_resources(HostingPolicy::Consumer),
            }
        );
        // The seller's word alone (this node sent no kubeconfig): nothing.
        let c = bought_service("contract-s", false);
        assert!(matches!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::Deny(_)
        ));
        // Bought from another cluster than the slice's, or by another node.
        let mut c = bought_service("contract-s", true);
        c.spec.peering_target_credentials.liqo_id = "other".into();
        let g = decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now());
        assert!(
            matches!(&g, Grant::Deny(why) if why.contains("bought from cluster cons")),
            "{g:?}"
        );
        let mut c = bought_service("contract-s", true);
        c.spec.buyer.node_id = "x".into();
        assert!(matches!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::Deny(_)
        ));
        // Ended: nothing.
        let mut c = bought_service("contract-s", true);
        c.spec.expiration_time = Some("2026-12-01T09:00:00Z".into());
        assert!(matches!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::Deny(_)
        ));
    }

    #[test]
    fn other_classes_and_unauthenticated_slices_are_left_alone() {
        let c = contract("contract-a");
        let s = slice("contract-a", "default", "100");
        assert_eq!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::NotOurs
        );
        let mut s = slice("contract-a", FLUIDOS_CLASS, "1");
        s.status = None;
        assert_eq!(
            decide(&s, FLUIDOS_CLASS, Some(&c), &seller(), true, now()),
            Grant::WaitForAuthentication
        );
    }

    #[test]
    fn a_slice_without_its_own_contract_is_denied() {
        let s = slice("contract-a", FLUIDOS_CLASS, "1");
        let denied = |g: Grant| matches!(g, Grant::Deny(_));
        assert!(denied(decide(
            &s,
            FLUIDOS_CLASS,
            None,
            &seller(),
            true,
            now()
        )));

        // Another consumer's Contract of that name.
        let mut other = contract("contract-a");
        other.spec.buyer_cluster_id = "someone-else".into();
        assert!(denied(decide(
            &s,
            FLUIDOS_CLASS,
            Some(&other),
            &seller(),
            true,
            now()
        )));

        // A Contract this node bought, not sold.
        let mut bought = contract("contract-a");
        bought.spec.seller.node_id = "another-provider".into();
        assert!(denied(decide(
            &s,
            FLUIDOS_CLASS,
            Some(&bought),
            &seller(),
            true,
            now()
        )));

        // An ended Contract.
        let mut ended = contract("contract-a");
        ended.spec.expiration_time = Some("2026-12-01T09:59:59Z".into());
        let g = decide(&s, FLUIDOS_CLASS, Some(&ended), &seller(), true, now());
        assert_eq!(
            g,
            Grant::Deny("Contract contract-a expired at 2026-12-01T09:59:59Z".into())
        );

        // Outside a tenant namespace.
        let mut stray = s.clone();
        stray.metadata.namespace = Some("default".into());
        assert!(denied(decide(
            &stray,
            FLUIDOS_CLASS,
            Some(&contract("contract-a")),
            &seller(),
            true,
            now()
        )));
    }

    #[test]
    fn an_ended_grant_is_taken_back_to_zero_and_a_drained_tenant_is_liqos() {
        let granted = {
            let s = slice("contract-a", FLUIDOS_CLASS, "1");
            let mut s2 = s.clone();
            s2.status = desired_status(s.status.as_ref(), &accepted("contract-a"), NOW);
            s2
        };
        let mut ended = contract("contract-a");
        ended.spec.expiration_time = Some("2026-12-01T09:00:00Z".into());
        let g = decide(
            &granted,
            FLUIDOS_CLASS,
            Some(&ended),
            &seller(),
            true,
            now(),
        );
        let Grant::Revoke { keys, .. } = &g else {
            panic!("{g:?}")
        };
        assert_eq!(keys, &["cpu", "memory", "pods"]);
        let next = desired_status(granted.status.as_ref(), &g, NOW).unwrap();
        assert!(
            next.resources
                .as_ref()
                .unwrap()
                .values()
                .all(|v| *v == IntOrString::String("0".into()))
        );
        let res =
            super::condition(Some(&next), &ResourceSliceStatusConditionsType::Resources).unwrap();
        assert_eq!(res.status, ResourceSliceStatusConditionsStatus::Accepted);
        assert_eq!(res.reason.as_deref(), Some("ContractEnded"));
        // A deleted Contract too.
        assert!(matches!(
            decide(&granted, FLUIDOS_CLASS, None, &seller(), true, now()),
            Grant::Revoke { .. }
        ));
        // Cordoned or drained: a refusal is still written ...
        assert!(matches!(
            decide(
                &granted,
                FLUIDOS_CLASS,
                Some(&ended),
                &seller(),
                false,
                now()
            ),
            Grant::Revoke { .. }
        ));
        // ... a grant is Liqo's call.
        let g = decide(
            &granted,
            FLUIDOS_CLASS,
            Some(&contract("contract-a")),
            &seller(),
            false,
            now(),
        );
        assert_eq!(g, Grant::TenantNotActive);
        assert_eq!(desired_status(granted.status.as_ref(), &g, NOW), None);
    }

    #[test]
    fn quantities_compare_by_value() {
        let m = |v: &str| -> BTreeMap<String, IntOrString> {
            [("memory".to_owned(), IntOrString::String(v.into()))].into()
        };
        assert!(same_quantities(Some(&m("1Gi")), Some(&m("1024Mi"))));
        assert!(!same_quantities(Some(&m("1Gi")), Some(&m("1G"))));
        assert!(!same_quantities(Some(&m("1Gi")), None));
        assert!(same_quantities(None, None));
    }

    #[test]
    fn the_status_carries_the_grant_and_keeps_liqos_part() {
        let s = slice("contract-a", FLUIDOS_CLASS, "100");
        let next = desired_status(s.status.as_ref(), &accepted("contract-a"), NOW).unwrap();
        let r = next.resources.as_ref().unwrap();
        assert_eq!(r["cpu"], IntOrString::String("1".into()));
        assert_eq!(r["memory"], IntOrString::String("1Gi".into()));
        assert_eq!(next.auth_params, s.status.as_ref().unwrap().auth_params);
        let conditions = next.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 2);
        let auth = super::condition(
            Some(&next),
            &ResourceSliceStatusConditionsType::Authentication,
        )
        .unwrap();
        assert_eq!(auth.status, ResourceSliceStatusConditionsStatus::Accepted);
        let res =
            super::condition(Some(&next), &ResourceSliceStatusConditionsType::Resources).unwrap();
        assert_eq!(res.status, ResourceSliceStatusConditionsStatus::Accepted);
        assert_eq!(res.last_transition_time.as_deref(), Some(NOW));

        // Idempotent: nothing to write the second time.
        assert_eq!(
            desired_status(Some(&next), &accepted("contract-a"), NOW),
            None
        );

        // A forged status is put back, keeping the transition time.
        let mut forged = next.clone();
        forged
            .resources
            .as_mut()
            .unwrap()
            .insert("cpu".into(), IntOrString::String("64".into()));
        let restored = desired_status(Some(&forged), &accepted("contract-a"), "later").unwrap();
        assert_eq!(restored.resources, next.resources);
        let res = super::condition(
            Some(&restored),
            &ResourceSliceStatusConditionsType::Resources,
        )
        .unwrap();
        assert_eq!(res.last_transition_time.as_deref(), Some(NOW));

        // Denied: no resources at all.
        let denied = desired_status(Some(&next), &Grant::Deny("no".into()), "later").unwrap();
        assert_eq!(denied.resources, None);
        let res =
            super::condition(Some(&denied), &ResourceSliceStatusConditionsType::Resources).unwrap();
        assert_eq!(res.status, ResourceSliceStatusConditionsStatus::Denied);
        assert_eq!(res.message.as_deref(), Some("no"));
        assert_eq!(res.last_transition_time.as_deref(), Some("later"));

        for silent in [Grant::NotOurs, Grant::WaitForAuthentication] {
            assert_eq!(desired_status(s.status.as_ref(), &silent, NOW), None);
        }
    }

    #[test]
    fn the_admission_policy_names_the_class_and_forbids() {
        let (policy, binding) = admission_policy("fluidos");
        let spec = policy.spec.unwrap();
        let validations = spec.validations.unwrap();
        assert_eq!(validations.len(), 2);
        assert!(
            validations[0]
                .expression
                .contains("object.spec.class == 'fluidos'")
        );
        assert_eq!(
            validations[1].expression,
            "!variables.status || !variables.peer"
        );
        let variables = spec.variables.unwrap();
        assert!(variables.iter().any(|v| {
            v.name == "peer"
                && v.expression
                    .contains("'liqo.io' in request.userInfo.groups")
        }));
        assert!(
            validations
                .iter()
                .all(|v| v.reason.as_deref() == Some("Forbidden"))
        );
        let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
        assert_eq!(
            rules[0].resources.as_deref().unwrap(),
            ["resourceslices", "resourceslices/status"]
        );
        let b = binding.spec.unwrap();
        assert_eq!(b.policy_name.as_deref(), Some(POLICY_NAME));
        assert_eq!(b.validation_actions.as_deref().unwrap(), ["Deny"]);
        // Everywhere but the tenant namespaces of Go consumers granted
        // peering (they ask for Liqo's default class, as upstream).
        let selector = b.match_resources.unwrap().namespace_selector.unwrap();
        let requirement = &selector.match_expressions.unwrap()[0];
        assert_eq!(
            (
                requirement.key.as_str(),
                requirement.operator.as_str(),
                requirement.values.as_deref().unwrap()
            ),
            (
                fluidos_api::reservation::GO_PEERING_NAMESPACE_LABEL,
                "NotIn",
                &["true".to_owned()][..]
            )
        );
    }
}

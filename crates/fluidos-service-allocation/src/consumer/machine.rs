//! The buyer's decisions on a Service Allocation, as a pure function of what
//! was read and what the provider answered.
//!
//! ```text
//! (none) ─ provider: not ready (409/429/5xx/unreachable) ─▶ Provisioning "Waiting for the provider: …"
//!   │ provider: 200                                    │ 404 / 410 / 403 / 400 (a Go node's unrouted 404 too)
//!   ▼                                                  ▼
//! Active "Credentials secret found…" (Secret written)  Error "<provider's reason>"
//!   │ Contract gone here, Allocation deleted, or 404 / 410 from the provider
//!   ▼
//! Secret deleted; Released (or finalizer removed)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use fluidos_api::allocation::{AllocationState, AllocationStatus};
use fluidos_api::rear::ServiceAccess;
use fluidos_api::service_delivery;
use fluidos_api::{Allocation, GenericRef};
use fluidos_blueprint::{CONTRACT_LABEL, CREDENTIALS_LABEL};
use fluidos_rear_client::RearError;
use k8s_openapi::api::core::v1::Secret;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::{CONSUMER_FINALIZER, Next};

/// The Go node's message once the credentials are there.
pub const ACTIVE_MESSAGE: &str = "Credentials secret found, Allocation is now Active";
/// The body of the Go REAR gateway's 404 for a path it has no route for
/// (gorilla/mux's `http.NotFound`, trimmed); ours always answers JSON.
pub const GO_UNROUTED: &str = "404 page not found";
/// Why a Service bought from a Go node is not delivered.
pub const NOT_A_FLUIDOS_RS_SELLER: &str = "The provider has no route for the service's endpoints \
     (GET /api/v2/contracts/{contractID}/service answered \"404 page not found\"): it is a Go \
     FLUIDOS node, which delivers a Service only by a Liqo peering the buyer drives with \
     near-cluster-admin rights on the provider; this node does not, see \
     docs/service-offloading.md. Buy the Service from a fluidos-rs provider, or end the Contract";
/// How often the provider is asked while the service is not ready.
pub const POLL: Duration = Duration::from_secs(1);
/// How often the provider is asked when it could not be reached.
pub const UNREACHABLE_POLL: Duration = Duration::from_secs(5);
/// How often an Active service is checked with the provider.
pub const ACTIVE_POLL: Duration = Duration::from_secs(30);

/// Everything the decision depends on.
#[derive(Debug)]
pub struct Input<'a> {
    /// The Allocation, freshly read.
    pub allocation: &'a Allocation,
    /// The Contract's name.
    pub contract_name: &'a str,
    /// False when the Contract is gone (ended).
    pub contract_exists: bool,
    /// The consumer's credentials Secret, as read.
    pub secret: Option<&'a Secret>,
    /// The provider's answer, when [`needs_fetch`] said to ask.
    pub fetched: Option<&'a Result<ServiceAccess, RearError>>,
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
    /// Server-side apply the credentials Secret.
    ApplySecret(Value),
    /// Delete the credentials Secret.
    DeleteSecret(String),
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

/// True when the provider should be asked (pure).
pub fn needs_fetch(allocation: &Allocation, contract_exists: bool) -> bool {
    allocation.metadata.deletion_timestamp.is_none()
        && contract_exists
        && !matches!(
            state(allocation),
            Some(AllocationState::Error | AllocationState::Released)
        )
}

/// The Secret name: `credentials-<contract>`, as the provider's.
pub fn secret_name(contract: &str) -> String {
    fluidos_api::naming::credentials_secret_name(contract)
}

/// The consumer's credentials Secret: `endpoints` (reachable from here) and
/// the credentials, owned by the Allocation, labelled like the provider's.
pub fn secret_object(allocation: &Allocation, contract: &str, access: &ServiceAccess) -> Value {
    use base64::Engine as _;
    let mut data: BTreeMap<String, String> = access.credentials.clone();
    data.insert("endpoints".to_owned(), access.endpoints.clone());
    // `data`, not `stringData`: an apply prunes the keys it no longer
    // names only from the fields it owns, and `stringData` is not kept.
    let data: BTreeMap<String, String> = data
        .into_iter()
        .map(|(k, v)| (k, base64::engine::general_purpose::STANDARD.encode(v)))
        .collect();
    let owner = allocation.controller_owner_ref(&());
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(contract),
            "namespace": allocation.namespace(),
            "labels": {CONTRACT_LABEL: contract, CREDENTIALS_LABEL: "true"},
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "type": "Opaque",
        "data": data,
    })
}

/// The most a provider's answer may put into the buyer's Secret (keys and
/// values); a Secret holds at most 1 MiB, and credentials are small.
pub const MAX_CREDENTIALS_BYTES: usize = 64 * 1024;

/// Why the provider's answer cannot go into a Secret, if it cannot (pure).
pub fn unstorable(access: &ServiceAccess) -> Option<String> {
    if let Some(key) = access
        .credentials
        .keys()
        .find(|k| !fluidos_blueprint::is_secret_key(k))
    {
        let shown: String = key.chars().take(64).collect();
        return Some(format!(
            "credential key {shown:?} is not a valid Secret key ([-._a-zA-Z0-9]+, at most 253 characters)"
        ));
    }
    let size = access.endpoints.len()
        + access
            .credentials
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    (size > MAX_CREDENTIALS_BYTES).then(|| {
        format!("the credentials take {size} bytes, over the {MAX_CREDENTIALS_BYTES} a buyer keeps")
    })
}

/// True when `secret` is this Allocation's: labelled with its Contract and
/// controlled by it. Another Secret of that name is never written nor deleted.
fn is_ours(secret: &Secret, allocation: &Allocation, contract: &str) -> bool {
    let labelled = secret
        .labels()
        .get(CONTRACT_LABEL)
        .is_some_and(|c| c == contract);
    let owned = allocation.metadata.uid.as_deref().is_some_and(|uid| {
        secret
            .owner_references()
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true))
    });
    labelled && owned
}

/// True when `secret` already holds exactly `access`.
fn holds(secret: &Secret, access: &ServiceAccess) -> bool {
    let mut want: BTreeMap<String, String> = access.credentials.clone();
    want.insert("endpoints".to_owned(), access.endpoints.clone());
    let have: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    have == want
}

struct Machine<'a> {
    input: &'a Input<'a>,
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

    /// A warning Event, unless the status already says `message`.
    fn warn_once(&mut self, reason: &'static str, message: &str) {
        let was = self.input.allocation.status.as_ref();
        if was.and_then(|s| s.message.as_deref()) != Some(message) {
            self.event(true, reason, message.to_owned());
        }
    }

    fn event(&mut self, warning: bool, reason: &'static str, note: String) {
        self.effects.push(Effect::Event {
            warning,
            reason,
            note,
        });
    }

    /// The service was delivered: the Allocation was Active, or points at
    /// its Secret, or its own Secret is there.
    fn delivered_before(&self) -> bool {
        state(self.input.allocation) == Some(AllocationState::Active)
            || self
                .input
                .allocation
                .status
                .as_ref()
                .is_some_and(|s| s.resource_ref.is_some())
            || self.own_secret().is_some()
    }

    /// The Secret read, when it is this Allocation's.
    fn own_secret(&self) -> Option<&Secret> {
        self.input
            .secret
            .filter(|s| is_ours(s, self.input.allocation, self.input.contract_name))
    }

    fn remove_secret(&mut self) {
        if self.own_secret().is_some() {
            self.effects
                .push(Effect::DeleteSecret(secret_name(self.input.contract_name)));
        }
    }

    /// The provider answered: the Secret written (if ours to write), Active.
    fn delivered(&mut self, access: &ServiceAccess) -> Next {
        let was_active = state(self.input.allocation) == Some(AllocationState::Active);
        if self.input.secret.is_some() && self.own_secret().is_none() {
            let message = format!(
                "Secret {} exists and is not this Allocation's (it lacks the {CONTRACT_LABEL} label or this Allocation as its controller): not overwritten; delete or rename it",
                secret_name(self.input.contract_name)
            );
            self.warn_once("SecretConflict", &message);
            self.set(AllocationState::Provisioning, message);
            return Next::Requeue(UNREACHABLE_POLL);
        }
        // A peer's answer: checked before anything is written.
        if let Some(why) = unstorable(access) {
            let message = format!("Cannot use the provider's answer: {why}");
            self.warn_once("ProviderAnswerInvalid", &message);
            self.set(AllocationState::Provisioning, message);
            return Next::Requeue(UNREACHABLE_POLL);
        }
        if !self.input.secret.is_some_and(|s| holds(s, access)) {
            self.effects.push(Effect::ApplySecret(secret_object(
                self.input.allocation,
                self.input.contract_name,
                access,
            )));
        }
        if !was_active {
            self.event(
                false,
                "ServiceReady",
                format!("service reachable at {}", access.endpoints),
            );
        }
        self.status.resource_ref = Some(GenericRef {
            name: Some(secret_name(self.input.contract_name)),
            namespace: self.input.allocation.namespace(),
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
        });
        self.set(AllocationState::Active, ACTIVE_MESSAGE);
        Next::Requeue(ACTIVE_POLL)
    }

    fn fetched(&mut self, answer: &Result<ServiceAccess, RearError>) -> Next {
        match answer {
            Ok(access) => self.delivered(access),
            // Not the provider that sold it (another key answers there), or
            // a Contract that says nothing callable: said as such, with a
            // warning Event when it starts, not as a plain wait. Not an
            // Error, which is final (the Solver fails on it, and an Error is
            // not fetched again): the right provider may answer again, or
            // the Contract be mended, and the Solver's timeout still bounds it.
            Err(e @ (RearError::WrongKey { .. } | RearError::Invalid { .. })) => {
                let message = format!("Cannot ask the provider for the service: {e}");
                let was = self.input.allocation.status.as_ref();
                if was.and_then(|s| s.message.as_deref()) != Some(message.as_str()) {
                    self.event(true, "ProviderNotTrusted", message.clone());
                }
                self.set(AllocationState::Provisioning, message);
                Next::Requeue(UNREACHABLE_POLL)
            }
            // gorilla/mux's answer to a path it does not route: the seller
            // is a Go node, which never serves this route (it delivers a
            // Service only through a peering the buyer drives). Final, as a
            // refusal: waiting would only run out the Solver's timeout.
            Err(RearError::Rejected {
                status: 404,
                message,
                ..
            }) if message == GO_UNROUTED => {
                let message = NOT_A_FLUIDOS_RS_SELLER.to_owned();
                self.event(true, "AllocationFailed", message.clone());
                self.set(AllocationState::Error, message);
                Next::AwaitChange
            }
            // The provider reads its Contract from its API server: a 404 is
            // a Contract it no longer has (ended there: expiry, release),
            // a 410 a service it removed. Once delivered, the credentials
            // are dead: removed, and the Allocation is Released.
            Err(
                e @ RearError::Rejected {
                    status: 404 | 410,
                    message,
                    ..
                },
            ) if self.delivered_before() => {
                self.remove_secret();
                self.status.resource_ref = None;
                let message = format!(
                    "The provider ended the service of Contract {} ({}: {message}): credentials Secret removed",
                    self.input.contract_name,
                    e.status().unwrap_or_default()
                );
                if self.status.message.as_deref() != Some(message.as_str()) {
                    self.event(true, "ServiceRemoved", message.clone());
                }
                self.set(AllocationState::Released, message);
                Next::AwaitChange
            }
            Err(e) => match e.status() {
                Some(400 | 403 | 404 | 410) => {
                    let message = match e {
                        RearError::Rejected { message, .. } => message.clone(),
                        other => other.to_string(),
                    };
                    let message = format!("Provider refused the service: {message}");
                    self.event(true, "AllocationFailed", message.clone());
                    self.set(AllocationState::Error, message);
                    Next::AwaitChange
                }
                Some(_) => {
                    let (message, retry_after) = match e {
                        RearError::Rejected {
                            message,
                            retry_after,
                            ..
                        } => (message.clone(), *retry_after),
                        other => (other.to_string(), None),
                    };
                    self.set(
                        AllocationState::Provisioning,
                        format!("Waiting for the provider: {message}"),
                    );
                    // A provider's Retry-After (429, 503) is honoured; the
                    // client caps it.
                    Next::Requeue(retry_after.map_or(POLL, |r| r.max(POLL)))
                }
                None => {
                    self.set(
                        AllocationState::Provisioning,
                        format!("Waiting for the provider: {e}"),
                    );
                    Next::Requeue(UNREACHABLE_POLL)
                }
            },
        }
    }
}

/// Decides what to do with a buyer-side Service Allocation (pure).
pub fn plan(input: &Input<'_>) -> Plan {
    let mut m = Machine {
        input,
        effects: Vec::new(),
        status: input.allocation.status.clone().unwrap_or_default(),
    };
    let has_finalizer = input
        .allocation
        .finalizers()
        .iter()
        .any(|f| f == CONSUMER_FINALIZER);
    let next = if input.allocation.metadata.deletion_timestamp.is_some() {
        if has_finalizer {
            m.remove_secret();
            m.effects.push(Effect::RemoveFinalizer);
        }
        Next::AwaitChange
    } else {
        if !has_finalizer {
            m.effects.push(Effect::AddFinalizer);
        }
        if !input.contract_exists {
            m.remove_secret();
            let message = format!(
                "Contract {} ended: credentials Secret removed",
                input.contract_name
            );
            if m.status.message.as_deref() != Some(message.as_str()) {
                m.event(false, "ServiceRemoved", message.clone());
            }
            m.status.resource_ref = None;
            m.set(AllocationState::Released, message);
            Next::AwaitChange
        } else {
            match input.fetched {
                Some(answer) => m.fetched(answer),
                None => Next::AwaitChange,
            }
        }
    };
    Plan {
        effects: m.effects,
        status: m.status,
        next,
    }
}

/// Message of a buyer's Allocation whose service Liqo delivered.
pub const OFFLOADED_MESSAGE: &str =
    "Service delivered through Liqo: credentials reflected by the seller's offloading";

/// Message of a delivered service whose reflected Secret went while its
/// namespace stays (deleted by hand, or the seller is ending the delivery).
pub const REFLECTED_AGAIN_MESSAGE: &str =
    "The credentials Secret reflected by Liqo is gone: waiting for Liqo to reflect it again";

/// Liqo's label on a namespace it made for a peer's offloading: the peer.
const LIQO_REMOTE_CLUSTER_LABEL: &str = "liqo.io/remote-cluster-id";
/// Liqo's annotation on a namespace it made for a peer's offloading.
const LIQO_NAMESPACE_MAP_ANNOTATION: &str = "liqo.io/managed-by-namespace-map";
/// Liqo's label on an object its virtual kubelet reflected: where from.
const LIQO_ORIGIN_LABEL: &str = "offloading.liqo.io/origin";

/// True when `namespace` is one Liqo made here for `seller`'s offloading
/// (not one that merely has the Contract's name).
pub fn offloaded_by(namespace: &k8s_openapi::api::core::v1::Namespace, seller: &str) -> bool {
    namespace
        .labels()
        .get(LIQO_REMOTE_CLUSTER_LABEL)
        .map(String::as_str)
        == Some(seller)
        && namespace
            .annotations()
            .contains_key(LIQO_NAMESPACE_MAP_ANNOTATION)
}

/// The credentials Secret `seller`'s Liqo reflected into `namespace` (the
/// one named after the Contract), among `secrets` listed there.
pub fn reflected_credentials<'s>(
    secrets: &'s [Secret],
    namespace: &str,
    seller: &str,
) -> Option<&'s Secret> {
    secrets.iter().find(|s| {
        s.namespace().as_deref() == Some(namespace)
            && s.labels().get(CREDENTIALS_LABEL).map(String::as_str) == Some("true")
            && s.labels().get(LIQO_ORIGIN_LABEL).map(String::as_str) == Some(seller)
    })
}

/// What the seller reports on the reflected credentials Secret when its
/// service is not available (its Allocation not `Active`), bounded; `None`
/// when it is, or when the seller reports nothing (an earlier version:
/// delivered is then taken as available, as before).
fn seller_reports_unavailable(secret: &Secret) -> Option<String> {
    let annotations = secret.annotations();
    let state = annotations.get(service_delivery::SERVICE_STATE_ANNOTATION)?;
    if state == "Active" {
        return None;
    }
    let message = annotations
        .get(service_delivery::SERVICE_MESSAGE_ANNOTATION)
        .map(|m| service_delivery::bounded_message(m).to_owned())
        .unwrap_or_default();
    Some(format!(
        "Credentials delivered through Liqo; the seller reports the service {}: {message}",
        service_delivery::bounded_message(state)
    ))
}

/// The status of the buyer's Allocation of a Service delivered by Liqo
/// (pure): `Released` once the Contract is gone or over; `Active`, pointing
/// at the reflected credentials Secret, once Liqo has put it in the
/// namespace named after the Contract; `Provisioning` until then. Nothing
/// is written on this side: Liqo makes and removes the namespace.
pub fn offloaded_status(
    current: Option<&AllocationStatus>,
    contract: &str,
    contract_live: bool,
    namespace_exists: bool,
    reflected: Option<&Secret>,
    now: &str,
) -> AllocationStatus {
    // Remembered by the status alone: Active with its Secret, Released, or
    // waiting for a Secret that was there.
    let delivered_before = current.is_some_and(|s| {
        s.status == Some(AllocationState::Released)
            || s.resource_ref.is_some()
            || s.message.as_deref() == Some(REFLECTED_AGAIN_MESSAGE)
    });
    let released = current.filter(|s| s.status == Some(AllocationState::Released));
    let (state, message, resource_ref) = match (contract_live, reflected) {
        // Released stays as it was said.
        (false, _) if let Some(m) = released.and_then(|s| s.message.clone()) => {
            (AllocationState::Released, m, None)
        }
        (false, _) => (
            AllocationState::Released,
            format!("Contract {contract} ended: the seller removes the offloaded namespace"),
            None,
        ),
        // Delivered, then the namespace went: only the seller's Liqo removes
        // it, when the seller ends the Contract on its side.
        (true, None) if delivered_before && !namespace_exists => (
            AllocationState::Released,
            format!(
                "The seller ended the delivery: namespace {contract} is no longer offloaded here"
            ),
            None,
        ),
        (true, Some(secret)) => {
            let reference = Some(GenericRef {
                name: Some(secret.name_any()),
                namespace: secret.namespace(),
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
            });
            match seller_reports_unavailable(secret) {
                // The credentials stay usable; the service is not (yet).
                Some(why) => (AllocationState::Provisioning, why, reference),
                None => (
                    AllocationState::Active,
                    OFFLOADED_MESSAGE.to_owned(),
                    reference,
                ),
            }
        }
        (true, None) if delivered_before => (
            AllocationState::Provisioning,
            REFLECTED_AGAIN_MESSAGE.to_owned(),
            None,
        ),
        (true, None) => (
            AllocationState::Provisioning,
            format!(
                "Waiting for the seller to offload namespace {contract} here through Liqo, with its credentials Secret"
            ),
            None,
        ),
    };
    let mut next = current.cloned().unwrap_or_default();
    if next.status.as_ref() != Some(&state) || next.message.as_deref() != Some(message.as_str()) {
        next.status = Some(state);
        next.message = Some(message);
        next.last_update_time = Some(now.to_owned());
    }
    next.resource_ref = resource_ref;
    next
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fluidos_api::allocation::AllocationSpec;

    const C: &str = "contract-x";

    fn allocation(state: Option<AllocationState>, finalizer: bool) -> Allocation {
        let mut a = Allocation::new(
            "allocation-x",
            AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef::named("fluidos", C)),
            },
        );
        a.metadata.namespace = Some("fluidos".into());
        a.metadata.uid = Some("uid-1".into());
        if finalizer {
            a.metadata.finalizers = Some(vec![CONSUMER_FINALIZER.to_owned()]);
        }
        a.status = state.map(|s| AllocationStatus {
            status: Some(s),
            message: Some("m".into()),
            ..Default::default()
        });
        a
    }

    fn access() -> ServiceAccess {
        ServiceAccess {
            contract_id: C.into(),
            endpoints: "192.0.2.10:31000".into(),
            cluster_endpoints: "db.contract-x.svc.cluster.local:3306".into(),
            credentials: [
                ("username".to_owned(), "admin".to_owned()),
                ("password".to_owned(), "admin".to_owned()),
                ("database".to_owned(), "mydb".to_owned()),
            ]
            .into(),
        }
    }

    /// The buyer's Secret as this Allocation (UID `uid-1`) writes it, with `data`.
    fn own_secret(data: Value) -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "credentials-contract-x", "labels": {CONTRACT_LABEL: C},
                "ownerReferences": [{"apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Allocation",
                    "name": "allocation-x", "uid": "uid-1", "controller": true}]},
            "data": data
        }))
        .unwrap()
    }

    fn rejected(status: u16) -> RearError {
        RearError::Rejected {
            address: "p:3004".into(),
            status,
            message: "why".into(),
            retry_after: None,
        }
    }

    fn run(
        a: &Allocation,
        contract_exists: bool,
        secret: Option<&Secret>,
        fetched: Option<Result<ServiceAccess, RearError>>,
    ) -> Plan {
        plan(&Input {
            allocation: a,
            contract_name: C,
            contract_exists,
            secret,
            fetched: fetched.as_ref(),
            now: "2026-01-01T00:00:00Z".into(),
        })
    }

    fn state_of(p: &Plan) -> (Option<AllocationState>, String) {
        (
            p.status.status.clone(),
            p.status.message.clone().unwrap_or_default(),
        )
    }

    #[test]
    fn fetch_only_while_live() {
        assert!(needs_fetch(&allocation(None, false), true));
        assert!(needs_fetch(
            &allocation(Some(AllocationState::Active), true),
            true
        ));
        assert!(!needs_fetch(&allocation(None, true), false));
        assert!(!needs_fetch(
            &allocation(Some(AllocationState::Error), true),
            true
        ));
        assert!(!needs_fetch(
            &allocation(Some(AllocationState::Released), true),
            true
        ));
    }

    #[test]
    fn ready_provider_gives_a_secret_and_active() {
        let a = allocation(None, false);
        let p = run(&a, true, None, Some(Ok(access())));
        assert_eq!(p.effects[0], Effect::AddFinalizer);
        let Some(Effect::ApplySecret(s)) = p
            .effects
            .iter()
            .find(|e| matches!(e, Effect::ApplySecret(_)))
        else {
            panic!("{:?}", p.effects);
        };
        assert_eq!(s["metadata"]["name"], "credentials-contract-x");
        assert_eq!(s["metadata"]["namespace"], "fluidos");
        assert_eq!(s["metadata"]["labels"][CONTRACT_LABEL], C);
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(
            s["data"],
            json!({"endpoints": "MTkyLjAuMi4xMDozMTAwMA==", "username": "YWRtaW4=", "password": "YWRtaW4=", "database": "bXlkYg=="})
        );
        assert_eq!(
            state_of(&p),
            (Some(AllocationState::Active), ACTIVE_MESSAGE.into())
        );
        assert_eq!(
            p.status.resource_ref,
            Some(GenericRef {
                name: Some("credentials-contract-x".into()),
                namespace: Some("fluidos".into()),
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
            })
        );
        assert_eq!(p.next, Next::Requeue(ACTIVE_POLL));
        // Already written: nothing to apply.
        let secret = own_secret(
            json!({"endpoints": "MTkyLjAuMi4xMDozMTAwMA==", "username": "YWRtaW4=", "password": "YWRtaW4=", "database": "bXlkYg=="}),
        );
        let p = run(
            &allocation(Some(AllocationState::Active), true),
            true,
            Some(&secret),
            Some(Ok(access())),
        );
        assert!(p.effects.is_empty(), "{:?}", p.effects);
    }

    #[test]
    fn a_service_the_provider_ended_is_released_and_its_credentials_removed() {
        let secret: Secret = own_secret(json!({}));
        let mut active = allocation(Some(AllocationState::Active), true);
        active.status.as_mut().unwrap().resource_ref = Some(GenericRef::named("fluidos", "s"));
        for code in [404, 410] {
            let p = run(&active, true, Some(&secret), Some(Err(rejected(code))));
            let (state, message) = state_of(&p);
            assert_eq!(state, Some(AllocationState::Released));
            assert_eq!(
                message,
                format!(
                    "The provider ended the service of Contract {C} ({code}: why): credentials Secret removed"
                )
            );
            assert!(p.status.resource_ref.is_none());
            assert!(
                p.effects
                    .contains(&Effect::DeleteSecret("credentials-contract-x".into())),
                "{:?}",
                p.effects
            );
            assert_eq!(p.next, Next::AwaitChange);
            // Released is not asked again.
            let mut released = active.clone();
            released.status = Some(p.status.clone());
            assert!(!needs_fetch(&released, true));
        }
    }

    #[test]
    fn a_secret_of_that_name_not_ours_is_neither_written_nor_deleted() {
        let theirs: Secret = serde_json::from_value(
            json!({"metadata": {"name": "credentials-contract-x"}, "data": {"k": "dg=="}}),
        )
        .unwrap();
        let a = allocation(Some(AllocationState::Provisioning), true);
        let p = run(&a, true, Some(&theirs), Some(Ok(access())));
        assert!(
            !p.effects
                .iter()
                .any(|e| matches!(e, Effect::ApplySecret(_) | Effect::DeleteSecret(_))),
            "{:?}",
            p.effects
        );
        let (state, message) = state_of(&p);
        assert_eq!(state, Some(AllocationState::Provisioning));
        assert!(message.contains("is not this Allocation's"), "{message}");
        // Nor deleted when the Contract ends.
        let p = run(&a, false, Some(&theirs), None);
        assert!(
            !p.effects
                .iter()
                .any(|e| matches!(e, Effect::DeleteSecret(_))),
            "{:?}",
            p.effects
        );
    }

    #[test]
    fn an_answer_that_cannot_be_a_secret_is_not_written() {
        let a = allocation(None, true);
        let mut bad_key = access();
        bad_key.credentials.insert("a/b".into(), "x".into());
        let mut too_big = access();
        too_big
            .credentials
            .insert("big".into(), "x".repeat(MAX_CREDENTIALS_BYTES));
        for (answer, says) in [
            (bad_key, "\"a/b\" is not a valid Secret key"),
            (too_big, "bytes, over the 65536"),
        ] {
            let p = run(&a, true, None, Some(Ok(answer)));
            assert!(
                !p.effects
                    .iter()
                    .any(|e| matches!(e, Effect::ApplySecret(_))),
                "{:?}",
                p.effects
            );
            let (state, message) = state_of(&p);
            assert_eq!(state, Some(AllocationState::Provisioning));
            assert!(
                message.starts_with("Cannot use the provider's answer: ") && message.contains(says),
                "{message}"
            );
        }
    }

    #[test]
    fn a_providers_retry_after_is_honoured() {
        let a = allocation(None, true);
        let busy = RearError::Rejected {
            address: "p:3004".into(),
            status: 429,
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            run(&a, true, None, Some(Err(busy))).next,
            Next::Requeue(Duration::from_secs(7))
        );
    }

    #[test]
    fn a_go_sellers_unrouted_404_is_final_and_says_why() {
        let a = allocation(None, true);
        let go = RearError::Rejected {
            address: "p:3004".into(),
            status: 404,
            message: GO_UNROUTED.into(),
            retry_after: None,
        };
        let p = run(&a, true, None, Some(Err(go)));
        assert_eq!(
            state_of(&p),
            (Some(AllocationState::Error), NOT_A_FLUIDOS_RS_SELLER.into())
        );
        assert_eq!(p.next, Next::AwaitChange);
        assert!(matches!(
            &p.effects[..],
            [Effect::Event {
                warning: true,
                reason: "AllocationFailed",
                ..
            }]
        ));
    }

    #[test]
    fn not_ready_waits_and_refusals_fail() {
        let a = allocation(None, true);
        for code in [409, 429, 503] {
            let p = run(&a, true, None, Some(Err(rejected(code))));
            assert_eq!(
                state_of(&p),
                (
                    Some(AllocationState::Provisioning),
                    "Waiting for the provider: why".into()
                )
            );
            assert_eq!(p.next, Next::Requeue(POLL));
        }
        let unreachable = RearError::Unreachable {
            address: "p:3004".into(),
            message: "refused".into(),
            timed_out: false,
        };
        let p = run(&a, true, None, Some(Err(unreachable)));
        assert_eq!(p.status.status, Some(AllocationState::Provisioning));
        assert_eq!(p.next, Next::Requeue(UNREACHABLE_POLL));
        for code in [400, 403, 404, 410] {
            let p = run(&a, true, None, Some(Err(rejected(code))));
            assert_eq!(
                state_of(&p),
                (
                    Some(AllocationState::Error),
                    "Provider refused the service: why".into()
                )
            );
            assert_eq!(p.next, Next::AwaitChange);
        }
        // Another key at the provider's address, or an address that cannot
        // be called: said at once (with one warning Event), still looked at.
        let wrong_key = RearError::WrongKey {
            address: "p:3004".into(),
            expected: fluidos_rear_client::Fingerprint::of_public_key(b"pinned"),
            presented: fluidos_rear_client::Fingerprint::of_public_key(b"other"),
        };
        let invalid = RearError::Invalid {
            address: "p".into(),
            message: "not host:port".into(),
        };
        for e in [wrong_key, invalid] {
            let shown = e.to_string();
            let p = run(&a, true, None, Some(Err(e)));
            let (state, message) = state_of(&p);
            assert_eq!(state, Some(AllocationState::Provisioning));
            assert_eq!(
                message,
                format!("Cannot ask the provider for the service: {shown}")
            );
            assert_eq!(p.next, Next::Requeue(UNREACHABLE_POLL));
            assert!(matches!(
                &p.effects[..],
                [Effect::Event {
                    warning: true,
                    reason: "ProviderNotTrusted",
                    ..
                }]
            ));
            // Asked again on the next reconcile; the same answer makes no
            // second Event.
            let mut asked = a.clone();
            asked.status = Some(p.status.clone());
            assert!(needs_fetch(&asked, true));
            let again = run(
                &asked,
                true,
                None,
                Some(Err(RearError::Invalid {
                    address: "p".into(),
                    message: "not host:port".into(),
                })),
            );
            if shown.contains("not host:port") {
                assert!(again.effects.is_empty(), "{:?}", again.effects);
            }
        }
        // A degraded service after Active: back to Provisioning, Secret kept.
        let p = run(
            &allocation(Some(AllocationState::Active), true),
            true,
            None,
            Some(Err(rejected(409))),
        );
        assert_eq!(p.status.status, Some(AllocationState::Provisioning));
        assert!(
            !p.effects
                .iter()
                .any(|e| matches!(e, Effect::DeleteSecret(_)))
        );
    }

    #[test]
    fn contract_end_and_deletion_remove_the_secret() {
        let secret = own_secret(json!({}));
        let p = run(
            &allocation(Some(AllocationState::Active), true),
            false,
            Some(&secret),
            None,
        );
        assert!(
            p.effects
                .contains(&Effect::DeleteSecret("credentials-contract-x".into()))
        );
        assert_eq!(
            state_of(&p),
            (
                Some(AllocationState::Released),
                format!("Contract {C} ended: credentials Secret removed")
            )
        );
        assert_eq!(p.status.resource_ref, None);
        let mut deleting = allocation(Some(AllocationState::Active), true);
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let p = run(&deleting, true, Some(&secret), None);
        assert_eq!(
            p.effects,
            vec![
                Effect::DeleteSecret("credentials-contract-x".into()),
                Effect::RemoveFinalizer
            ]
        );
        deleting.metadata.finalizers = None;
        assert!(run(&deleting, true, Some(&secret), None).effects.is_empty());
    }

    #[test]
    fn an_offloaded_service_is_active_once_liqo_reflects_its_credentials() {
        let listed = [
            secret("c", None, "s"),
            secret("other", Some("true"), "s"),
            // Not reflected from the seller: somebody else's.
            secret("c", Some("true"), "x"),
        ];
        assert!(reflected_credentials(&listed, "c", "s").is_none());
        let listed = [secret("c", Some("true"), "s")];
        let found = reflected_credentials(&listed, "c", "s");
        let mut ns = k8s_openapi::api::core::v1::Namespace::default();
        ns.metadata.labels = Some([(LIQO_REMOTE_CLUSTER_LABEL.to_owned(), "s".to_owned())].into());
        assert!(!offloaded_by(&ns, "s"), "Liqo's annotation too");
        ns.metadata.annotations =
            Some([(LIQO_NAMESPACE_MAP_ANNOTATION.to_owned(), "t/n".to_owned())].into());
        assert!(offloaded_by(&ns, "s"));
        assert!(!offloaded_by(&ns, "x"));
        let waiting = offloaded_status(None, "c", true, false, None, "t0");
        assert_eq!(waiting.status, Some(AllocationState::Provisioning));
        assert!(waiting.message.as_deref().unwrap().contains("namespace c"));
        let active = offloaded_status(Some(&waiting), "c", true, true, found, "t1");
        assert_eq!(active.status, Some(AllocationState::Active));
        assert_eq!(active.last_update_time.as_deref(), Some("t1"));
        let r = active.resource_ref.clone().unwrap();
        assert_eq!(
            (r.name.as_deref(), r.namespace.as_deref()),
            (Some("credentials-c"), Some("c"))
        );
        // Unchanged: the same time, so no write.
        assert_eq!(
            offloaded_status(Some(&active), "c", true, true, found, "t2"),
            active
        );
        let released = offloaded_status(Some(&active), "c", false, true, found, "t3");
        assert_eq!(released.status, Some(AllocationState::Released));
        assert!(released.resource_ref.is_none());
        // The Secret gone while the namespace stays: waiting again.
        let again = offloaded_status(Some(&active), "c", true, true, None, "t4");
        assert_eq!(again.status, Some(AllocationState::Provisioning));
        assert_eq!(again.message.as_deref(), Some(REFLECTED_AGAIN_MESSAGE));
        // Then the namespace goes too: ended, as from Active.
        let gone = offloaded_status(Some(&again), "c", true, false, None, "t4");
        assert_eq!(gone.status, Some(AllocationState::Released));
        // The namespace gone after delivery: the seller ended it; and it
        // stays so.
        let ended = offloaded_status(Some(&active), "c", true, false, None, "t5");
        assert_eq!(ended.status, Some(AllocationState::Released));
        assert!(ended.message.as_deref().unwrap().contains("seller ended"));
        assert_eq!(
            offloaded_status(Some(&ended), "c", true, false, None, "t6"),
            ended
        );
        // Never delivered and no namespace yet: waiting.
        let fresh = offloaded_status(Some(&waiting), "c", true, false, None, "t7");
        assert_eq!(fresh, waiting);
    }

    /// A credentials Secret `credentials-c` in `ns`, labelled `label`,
    /// reflected by Liqo from cluster `origin`.
    fn secret(ns: &str, label: Option<&str>, origin: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("credentials-c".into());
        s.metadata.namespace = Some(ns.into());
        let mut labels = BTreeMap::from([(LIQO_ORIGIN_LABEL.to_owned(), origin.to_owned())]);
        if let Some(v) = label {
            labels.insert(CREDENTIALS_LABEL.to_owned(), v.to_owned());
        }
        s.metadata.labels = Some(labels);
        s
    }

    #[test]
    fn the_sellers_reported_state_shows_on_the_buyer() {
        let with = |state: Option<&str>, message: &str| {
            let mut s = secret("c", Some("true"), "s");
            if let Some(state) = state {
                s.metadata.annotations = Some(
                    [
                        (
                            service_delivery::SERVICE_STATE_ANNOTATION.to_owned(),
                            state.to_owned(),
                        ),
                        (
                            service_delivery::SERVICE_MESSAGE_ANNOTATION.to_owned(),
                            message.to_owned(),
                        ),
                    ]
                    .into(),
                );
            }
            s
        };
        // Reported available, or nothing reported (an earlier seller): Active.
        for s in [with(Some("Active"), "Service is running"), with(None, "")] {
            let a = offloaded_status(None, "c", true, true, Some(&s), "t0");
            assert_eq!(a.status, Some(AllocationState::Active));
        }
        // Degraded: Provisioning, saying why, the credentials still named.
        let degraded = with(
            Some("ResourceCreation"),
            "Service degraded: pod db-1: Unschedulable",
        );
        let active = offloaded_status(None, "c", true, true, Some(&with(None, "")), "t0");
        let d = offloaded_status(Some(&active), "c", true, true, Some(&degraded), "t1");
        assert_eq!(d.status, Some(AllocationState::Provisioning));
        let m = d.message.clone().unwrap();
        assert!(
            m.contains("ResourceCreation") && m.contains("Unschedulable"),
            "{m}"
        );
        assert!(d.resource_ref.is_some());
        // Delivered before: the namespace going now is the seller's end.
        let ended = offloaded_status(Some(&d), "c", true, false, None, "t2");
        assert_eq!(ended.status, Some(AllocationState::Released));
        // A seller's message is bounded.
        let huge = with(Some("ResourceCreation"), &"x".repeat(100_000));
        let h = offloaded_status(None, "c", true, true, Some(&huge), "t3");
        assert!(h.message.unwrap().len() < 2 * service_delivery::SERVICE_MESSAGE_MAX);
    }
}

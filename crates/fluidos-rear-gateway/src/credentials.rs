//! Peering credentials handed to a buyer in the REAR Contract's
//! `peeringTargetCredentials` (kept, provider side, in a Secret: see
//! `peering_secret`).
//!
//! Upstream shares one near-cluster-admin ServiceAccount with every peer and
//! never revokes it. Here each buyer gets its own ServiceAccount
//! `fluidos-peer-<buyerID>` and a bounded token from the TokenRequest API (no
//! long-lived token Secret). The account has no rights of its own: a K8Slice
//! sale binds it, by a RoleBinding to the namespaced Role `fluidos-peer`
//! carrying only what Liqo 1.0's own minimal "peering user" needs (see
//! [`peer_rules`]), in the buyer's Liqo tenant namespace and nowhere else
//! (unless a compatibility namespace is configured), plus, by a RoleBinding
//! to the Role [`PEER_NETWORK_ROLE`] in Liqo's namespace, the reading of this
//! cluster's pod and external CIDRs there ([`peer_network_rules`]) that
//! Liqo's networking phase needs. Revoking a buyer is deleting its
//! ServiceAccount and its RoleBindings.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use fluidos_controller::api_error;
use fluidos_peer_access::effective_grant;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{
    DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::Mutex;

use crate::go_peering;

/// How long a Go consumer's purchase waits for the Go grant's admission
/// policy to be applied (at the gateway's start) before it is answered 503.
const GO_GUARD_WAIT: Duration = Duration::from_secs(10);
/// Prefix of every peer ServiceAccount's name ([`service_account_name`]).
pub const SERVICE_ACCOUNT_PREFIX: &str = "fluidos-peer-";
/// Name of the Role, in each buyer's tenant namespace, the buyer is bound to.
pub const PEER_ROLE: &str = "fluidos-peer";
/// Name of the nonce Secret a consumer creates in its tenant namespace on
/// the provider, which Liqo fills (Liqo v1.0.0's `liqo-nonce`).
pub const LIQO_NONCE_SECRET: &str = "liqo-nonce";
/// Name of the shared Role, in Liqo's namespace
/// ([`go_peering::LIQO_NAMESPACE`]), through which K8Slice buyers read this
/// cluster's pod and external CIDRs ([`peer_network_rules`]).
pub const PEER_NETWORK_ROLE: &str = "fluidos-peer-network";
/// Field manager of the server-side applies.
const FIELD_MANAGER: &str = "fluidos-rear-gateway";
/// Label on everything this module creates.
pub const MANAGED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "fluidos-rear-gateway");
/// ServiceAccount annotation naming the buyer it was issued for (names may
/// be hashed, so the buyer cannot always be read back from the name).
pub const BUYER_ANNOTATION: &str = crate::labels::BUYER;
/// ServiceAccount annotation: the peer its credentials belong to, the key
/// fingerprint of a TLS buyer or [`PLAIN_HTTP_OWNER`]. A buyer ID is the
/// buyer's word: without this, a peer naming another's buyer ID would be
/// handed that buyer's token.
pub const OWNER_ANNOTATION: &str = "fluidos.eu/buyer-owner";
/// [`OWNER_ANNOTATION`] of accounts bought over plain HTTP.
pub const PLAIN_HTTP_OWNER: &str = "plain-http";
/// RoleBinding annotation: the UID of the ServiceAccount it was made for. A
/// binding of an earlier account of the same name (revoked since) does not
/// count as a grant of the new one.
pub const ACCOUNT_UID_ANNOTATION: &str = "fluidos.eu/service-account-uid";
/// ServiceAccount annotation set when a revocation is pending (RFC 3339 time).
///
/// Revocation is two-phase so that no replica hands out a token that is about
/// to die: the account is marked, every replica stops reusing cached tokens
/// of a marked account (issuing anew clears the mark, which changes the
/// account's `resourceVersion`), and only after a grace period is the account
/// deleted, with a `resourceVersion` precondition that fails if anybody
/// issued credentials since.
pub const REVOKING_ANNOTATION: &str = "fluidos.eu/revoking-since";

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A Kubernetes call failed (e.g. missing RBAC to create Roles, or a
    /// server without the TokenRequest API).
    #[error("{step}: {source}")]
    Kube {
        /// Which step failed.
        step: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The TokenRequest answer had no token.
    #[error("the TokenRequest for {0} returned no token")]
    NoToken(String),
    /// The TokenRequest answer was not JSON of the expected shape.
    #[error("reading the TokenRequest answer for {account}: {source}")]
    TokenAnswer {
        /// The ServiceAccount.
        account: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The kubeconfig could not be serialized.
    #[error("serializing the kubeconfig: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// The Liqo tenant namespace of the cluster ID the buyer stated exists
    /// and was not made by this gateway for this buyer: another buyer (or
    /// a peering made outside FLUIDOS) owns it.
    #[error(
        "the Liqo tenant namespace {namespace} belongs to another peer; a buyer must state its own Liqo cluster ID"
    )]
    TenantTaken {
        /// `liqo-tenant-<cluster ID>`.
        namespace: String,
    },
    /// The Go-consumer grant is on but its admission policy is not in place
    /// yet (or could not be applied): no cluster-wide rights are handed out
    /// unconfined.
    #[error(
        "the Go consumers' peering grant is not in place yet on this provider (its admission policy is being applied); retry later"
    )]
    GoPeeringGuardNotReady,
    /// The buyer ID's credentials belong to another peer (another key, or
    /// plain HTTP against a key).
    #[error(
        "buyer ID {buyer} holds peering credentials of another peer on this provider (a buyer ID stays with the first key, or plain HTTP, that bought with it, until its last Contract ends); use your own node ID"
    )]
    OwnerMismatch {
        /// The buyer ID.
        buyer: String,
    },
    /// The buyer ID's account was deleted, made again or claimed while
    /// this sale checked it: the buyer retries, and the check is made anew.
    #[error(
        "the peering account of buyer ID {buyer} changed during this sale (revoked or claimed at the same time); retry"
    )]
    AccountChanged {
        /// The buyer ID.
        buyer: String,
    },
}

/// A buyer ID's account as a sale checked it: whose it is decides nothing
/// after this point; writes to it are conditioned on it being this one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CheckedAccount {
    /// UID of the account: a write names it, so that an account deleted and
    /// made again (by another owner) meanwhile is not written.
    uid: String,
    /// `resourceVersion` as checked.
    resource_version: String,
    /// Whether it records the caller as its owner (false: an account of an
    /// earlier version, without an owner, which the caller may claim).
    owned: bool,
}

impl CheckedAccount {
    fn of(sa: &ServiceAccount) -> Option<CheckedAccount> {
        Some(CheckedAccount {
            uid: sa.metadata.uid.clone()?,
            resource_version: sa.metadata.resource_version.clone()?,
            owned: sa.annotations().contains_key(OWNER_ANNOTATION),
        })
    }
}

/// What a K8Slice sale grants the buyer in Liqo's objects on this cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeeringGrant<'a> {
    /// Liqo's peering-user rights in the tenant namespace of this Liqo
    /// cluster ID, which the gateway prepares (a FLUIDOS-rs consumer).
    TenantNamespace(&'a str),
    /// The unmodified Go consumer's rights for this Liqo cluster ID
    /// ([`crate::go_peering`]).
    GoConsumer(&'a str),
}

/// Whether `id` can name a Liqo tenant namespace (`liqo-tenant-<id>` is a
/// DNS label).
pub fn valid_cluster_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63 - go_peering::TENANT_PREFIX.len()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

/// Where credentials point and how long they live.
#[derive(Clone, Debug)]
pub struct CredentialsConfig {
    /// Namespace of the ServiceAccounts.
    pub namespace: String,
    /// A namespace where peers are granted [`liqo_peering_user_rules`] besides their
    /// Liqo tenant namespace, for consumers that act elsewhere; none by
    /// default (least privilege: nothing in the node's own namespace).
    pub role_namespace: Option<String>,
    /// `server:` of the kubeconfig.
    pub api_server_url: String,
    /// PEM of the API server's CA, inlined as `certificate-authority-data`.
    pub ca_pem: Option<String>,
    /// Requested token lifetime (the API server may grant another: what
    /// it granted decides when a cached kubeconfig is renewed).
    pub token_ttl: Duration,
    /// Whether unmodified Go consumers may be granted peering rights
    /// ([`crate::go_peering`]); its cluster-wide objects are applied then.
    pub go_peering: bool,
    /// Whether to mend, at start, the peer grants of earlier versions:
    /// remove those made in the node's namespace (without
    /// [`Self::role_namespace`]) and narrow the peer Roles of tenant
    /// namespaces ([`peer_role_rules_for`]). The gateway's job; the
    /// rear-manager issuing for sellers leaves it (and holds no right to it).
    pub remove_stale_grants: bool,
}

struct Cached {
    kubeconfig_b64: String,
    refresh_at: Instant,
    /// UID of the ServiceAccount the token was minted for.
    sa_uid: String,
}

/// Key of a cached kubeconfig: the buyer, the peer it belongs to and the
/// provider identity it names.
fn cache_key(buyer_id: &str, owner: &str, provider_liqo_id: &str) -> String {
    format!("{buyer_id}\u{0}{owner}\u{0}{provider_liqo_id}")
}

/// Issues (and caches) per-buyer kubeconfigs.
pub struct Credentials {
    client: kube::Client,
    cfg: CredentialsConfig,
    cache: Mutex<HashMap<String, Cached>>,
    /// Watch cache of the peer ServiceAccounts: a cached token is reused only
    /// while its account still exists, so a revocation by another replica is
    /// seen here within the watch's latency.
    accounts: Store<ServiceAccount>,
    /// Watch caches of the peer Roles and RoleBindings this gateway made, in
    /// every namespace: a buyer's tenant grant is written once, then only
    /// checked against these (three API calls less on each K8Slice sale).
    roles: Store<Role>,
    bindings: Store<RoleBinding>,
    /// Set once the Go-consumer grant's ClusterRole, Role and admission
    /// policy are applied ([`Credentials::run_go_peering`]).
    go_guard: tokio::sync::watch::Sender<bool>,
}

/// True when `role` and `binding` (as the watch caches see them in a tenant
/// namespace) already grant [`peer_rules`] to the ServiceAccount `sa` of
/// `sa_namespace`, bound for `buyer_id`. A binding of ours exists in a tenant
/// namespace only after the namespace was claimed for that same buyer
/// ([`Credentials::grant_tenant_namespace`]), and goes away with it.
pub fn tenant_grant_is_current(
    (role, rules): (Option<&Role>, &[PolicyRule]),
    binding: Option<&RoleBinding>,
    buyer_id: &str,
    sa: &str,
    sa_uid: &str,
    sa_namespace: &str,
) -> bool {
    role_has(role, rules)
        && binding.is_some_and(|b| binds(b, PEER_ROLE, buyer_id, sa, sa_uid, sa_namespace))
}

/// True when `role` and `binding` (as the watch caches see them in Liqo's
/// namespace) already grant [`peer_network_rules`] to the ServiceAccount `sa`
/// of `sa_namespace` (UID `sa_uid`), bound for `buyer_id`: the Role
/// [`PEER_NETWORK_ROLE`] and the account's binding to it.
pub fn network_grant_is_current(
    role: Option<&Role>,
    binding: Option<&RoleBinding>,
    buyer_id: &str,
    sa: &str,
    sa_uid: &str,
    sa_namespace: &str,
) -> bool {
    role_has(role, &peer_network_rules())
        && binding.is_some_and(|b| binds(b, PEER_NETWORK_ROLE, buyer_id, sa, sa_uid, sa_namespace))
}

/// True when `role` exists, is not being deleted and carries exactly `rules`.
fn role_has(role: Option<&Role>, rules: &[PolicyRule]) -> bool {
    role.is_some_and(|r| {
        r.metadata.deletion_timestamp.is_none() && r.rules.as_deref() == Some(rules)
    })
}

/// True when `binding` binds the Role `role` to the ServiceAccount `sa` of
/// `sa_namespace` alone, made by this gateway for `buyer_id` and for the
/// account of UID `sa_uid` (not an earlier one of the same name), and is
/// not being deleted.
fn binds(
    binding: &RoleBinding,
    role: &str,
    buyer_id: &str,
    sa: &str,
    sa_uid: &str,
    sa_namespace: &str,
) -> bool {
    binding.metadata.deletion_timestamp.is_none()
        && binding
            .annotations()
            .get(BUYER_ANNOTATION)
            .map(String::as_str)
            == Some(buyer_id)
        && !sa_uid.is_empty()
        && binding
            .annotations()
            .get(ACCOUNT_UID_ANNOTATION)
            .map(String::as_str)
            == Some(sa_uid)
        && binding.role_ref.kind == "Role"
        && binding.role_ref.name == role
        && binding.subjects.as_deref().is_some_and(|subjects| {
            matches!(subjects, [s] if s.kind == "ServiceAccount"
                && s.name == sa
                && s.namespace.as_deref() == Some(sa_namespace))
        })
}

/// A rule of `verbs` on `resources` of the API `groups`.
pub(crate) fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| (*s).to_owned()).collect()),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

/// The rules of [`PEER_NETWORK_ROLE`], in Liqo's namespace: `get` and `list`
/// of Liqo's IPAM Networks, where a consumer's networking phase finds this
/// cluster's pod and external CIDRs (listed by the label
/// `ipam.liqo.io/network-type`). The part of Liqo 1.0's
/// `liqo-peering-user-liqo-ns` a FLUIDOS-rs consumer uses: not its
/// ConfigMaps (the Contract names this cluster's Liqo ID) nor the gateway
/// templates (each cluster reads its own).
pub fn peer_network_rules() -> Vec<PolicyRule> {
    vec![rule(&["ipam.liqo.io"], &["networks"], &["get", "list"])]
}

/// The Role rules a FLUIDOS-rs buyer of Liqo cluster ID `cluster_id` gets
/// in its tenant namespace `liqo-tenant-<cluster_id>`: Liqo 1.0's
/// `liqo-peering-user-tenant-ns` ClusterRole plus the read-only part of
/// `liqo-peering-user-liqo-ns`, namespaced, except that of Secrets it may
/// create (its nonce: the peer guard admits no other), read and delete its
/// nonce ([`LIQO_NONCE_SECRET`]), and read the keys of the tunnel's gateway
/// on this side (`gw-<cluster_id>`, the name Liqo gives the keys of the
/// GatewayServer the consumer makes here, named after it: its networking
/// phase needs the public key; the Secret holds the private one too, as
/// Liqo's own peering user reads it). Liqo keeps one tenant namespace per peer for both
/// directions: when this node also buys from that peer, this node's
/// Identity and its kubeconfig Secret, which carries this cluster's Liqo
/// private key, are in the same namespace; Liqo's own peering user may list
/// them. A FLUIDOS-rs consumer reads nothing else (it gets by name). No
/// `patch`, no cluster scope.
pub fn peer_rules(cluster_id: &str) -> Vec<PolicyRule> {
    let named = |names: Vec<String>, verbs: &[&str]| PolicyRule {
        resource_names: Some(names),
        ..rule(&[""], &["secrets"], verbs)
    };
    peering_user_rules_with(vec![
        // A name cannot restrict a creation (the authorizer does not know
        // it yet): the peer guard admits a peer's nonce Secret only.
        rule(&[""], &["secrets"], &["create"]),
        named(vec![LIQO_NONCE_SECRET.to_owned()], &["delete", "get"]),
        // Read only: deleting it would reset this side of the tunnel.
        named(vec![format!("gw-{cluster_id}")], &["get"]),
    ])
}

/// Liqo 1.0's peering user's rules, Secrets listed: what an unmodified Go
/// consumer gets in the tenant namespace it made and this gateway adopted
/// (`--rear-go-peering-grant`), since Liqo's library finds its nonce by
/// listing Secrets (`GetNonceSecretByClusterID`), and what every peer gets
/// in [`CredentialsConfig::role_namespace`]. A Go consumer's namespace
/// therefore never holds this node's own Liqo credentials: this node does
/// not peer with that cluster there (`fluidos-peering` refuses and says
/// why), and the gateway never adopts a namespace this node's peering made.
pub fn liqo_peering_user_rules() -> Vec<PolicyRule> {
    peering_user_rules_with(vec![rule(
        &[""],
        &["secrets"],
        &["create", "delete", "get", "list"],
    )])
}

/// Liqo 1.0's `liqo-peering-user-tenant-ns` ClusterRole plus the read-only
/// part of `liqo-peering-user-liqo-ns`, namespaced, without `patch`, with
/// `secrets` for its rules on Secrets.
fn peering_user_rules_with(secrets: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut rules = vec![
        rule(&[""], &["configmaps"], &["get", "list", "watch"]),
        rule(&[""], &["services"], &["get"]),
        rule(&["apps"], &["deployments"], &["get"]),
    ];
    rules.extend(secrets);
    rules.extend([
        rule(
            &["authentication.liqo.io"],
            &["tenants"],
            &["create", "delete", "get", "list", "update"],
        ),
        rule(
            &["ipam.liqo.io"],
            &["ips"],
            &["create", "delete", "get", "update"],
        ),
        rule(
            &["networking.liqo.io"],
            &[
                "configurations",
                "gatewayclients",
                "gatewayservers",
                "publickeies",
            ],
            &["create", "delete", "get", "list", "update"],
        ),
        rule(&["networking.liqo.io"], &["connections"], &["get", "list"]),
        rule(
            &["networking.liqo.io"],
            &["gatewayservers/status", "gatewayclients/status"],
            &["get"],
        ),
        rule(
            &["networking.liqo.io"],
            &["wggatewayclienttemplates", "wggatewayservertemplates"],
            &["get", "list"],
        ),
        rule(&["ipam.liqo.io"], &["networks"], &["get", "list"]),
    ]);
    rules
}

/// The rules the peer Role in the tenant namespace `ns` is to hold (pure):
/// Liqo's peering user's where a Go consumer's namespace was adopted, the
/// named Secrets of [`peer_rules`] in any other tenant namespace; `None`
/// outside tenant namespaces.
pub fn peer_role_rules_for(ns: &Namespace) -> Option<Vec<PolicyRule>> {
    let cluster_id = ns
        .metadata
        .name
        .as_deref()?
        .strip_prefix(go_peering::TENANT_PREFIX)?;
    if ns.labels().contains_key(go_peering::NAMESPACE_LABEL) {
        Some(liqo_peering_user_rules())
    } else {
        Some(peer_rules(cluster_id))
    }
}

/// Puts the rules of [`peer_role_rules_for`] into the peer Roles of tenant
/// namespaces that hold others: earlier versions let every buyer list the
/// Secrets of its tenant namespace. Each write is conditioned on the Role
/// as listed (a sale or an adoption writing it meanwhile wins); the list is
/// retried a few times; `skip` is the compatibility namespace, whose Role
/// keeps Liqo's rules. Best effort: logged.
async fn narrow_peer_roles(client: &kube::Client, skip: Option<&str>) {
    let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
    let roles_api = Api::<Role>::all(client.clone());
    let mut roles = None;
    for attempt in 0..5u32 {
        match roles_api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => {
                roles = Some(list.items);
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "could not list the peer Roles to narrow those of earlier versions");
                tokio::time::sleep(Duration::from_secs(2u64.pow(attempt))).await;
            }
        }
    }
    let Some(roles) = roles else { return };
    let namespaces = Api::<Namespace>::all(client.clone());
    for role in roles.iter().filter(|r| r.name_any() == PEER_ROLE) {
        let Some(ns) = role.namespace() else { continue };
        if skip == Some(ns.as_str()) {
            continue;
        }
        let rules = match namespaces.get_opt(&ns).await {
            Ok(Some(found)) => peer_role_rules_for(&found),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "could not read a peer's tenant namespace");
                None
            }
        };
        let Some(rules) = rules.filter(|r| role.rules.as_deref() != Some(r)) else {
            continue;
        };
        let narrowed = Role {
            metadata: ObjectMeta {
                name: Some(PEER_ROLE.to_owned()),
                namespace: Some(ns.clone()),
                labels: labels(),
                resource_version: role.metadata.resource_version.clone(),
                ..Default::default()
            },
            rules: Some(rules),
        };
        match Api::<Role>::namespaced(client.clone(), &ns)
            .patch(
                PEER_ROLE,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(with_type(&narrowed, "rbac.authorization.k8s.io/v1", "Role")),
            )
            .await
        {
            Ok(_) => tracing::info!(namespace = ns, "narrowed a peer Role of an earlier version"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(
                    namespace = ns,
                    "a peer Role changed while it was narrowed: the newer write stands"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "could not narrow a peer Role of an earlier version");
            }
        }
    }
}

/// Deletes the peer Role and RoleBindings this gateway made in `ns`
/// (best effort: logged).
async fn remove_grants_in(client: &kube::Client, ns: &str) {
    let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
    let lp = ListParams::default().labels(&selector);
    if let Err(e) = Api::<RoleBinding>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &lp)
        .await
    {
        tracing::warn!(error = %e, namespace = ns, "could not remove the peers' old RoleBindings");
    }
    match Api::<Role>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &lp)
        .await
    {
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, namespace = ns, "could not remove the peers' old Role");
        }
    }
}

/// Keeps `writer` in step with a watch of `api`, logging (not ending on) errors.
async fn reflect_forever<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    what: &'static str,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let stream = watcher(api, config).default_backoff().reflect(writer);
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            tracing::warn!(error = %e, "{what} watch error; retrying");
        }
    }
}

/// The ServiceAccount UID a token from the TokenRequest API is bound to
/// (its JWT's `kubernetes.io.serviceaccount.uid` claim); `None` when the
/// token carries none. The token comes from our API server: its signature
/// is that server's business, only its claims are read.
fn token_account_uid(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&claims).ok()?;
    claims
        .pointer("/kubernetes.io/serviceaccount/uid")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// `fluidos-peer-<buyer>` as a valid object name (DNS label, ≤ 63 characters).
pub fn service_account_name(buyer_id: &str) -> String {
    let clean: String = buyer_id
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let clean = clean.trim_matches('-');
    let name = format!("{SERVICE_ACCOUNT_PREFIX}{clean}");
    if name.len() <= 63 && clean == buyer_id {
        return name;
    }
    // Lossy cleaning could make two buyers collide: a hash keeps them apart.
    let hash = fluidos_api::naming::hash_prefix(buyer_id, 8);
    let keep = clean.len().min(63 - "fluidos-peer--".len() - hash.len());
    let prefix = clean[..keep].trim_end_matches('-');
    format!("{SERVICE_ACCOUNT_PREFIX}{prefix}-{hash}")
}

fn labels() -> Option<std::collections::BTreeMap<String, String>> {
    Some([(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned())].into())
}

/// True when `account` records an owner other than `owner` (an account
/// without one, made by an earlier version, goes to the first that asks).
fn owned_by_another(account: Option<&ServiceAccount>, owner: &str) -> bool {
    account
        .and_then(|a| a.annotations().get(OWNER_ANNOTATION))
        .is_some_and(|recorded| recorded != owner)
}

/// Refuses `owner` credentials of `buyer_id` when `account` belongs to
/// another peer.
fn refuse_another_owner(
    account: Option<&ServiceAccount>,
    buyer_id: &str,
    owner: &str,
) -> Result<(), CredentialsError> {
    if owned_by_another(account, owner) {
        return Err(CredentialsError::OwnerMismatch {
            buyer: buyer_id.to_owned(),
        });
    }
    Ok(())
}

/// True when a write naming an account's UID was refused because the
/// account is not that one any more: 409 (gone, or changed since the
/// `resourceVersion` it named) or 422 on `metadata.uid` (another account of
/// that name). Any other refusal is the API server's to explain.
fn account_changed(e: &kube::Error) -> bool {
    let kube::Error::Api(status) = e else {
        return false;
    };
    match status.code {
        409 => status.reason != "AlreadyExists",
        422 => status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        _ => false,
    }
}

/// A kubeconfig YAML with cluster, user and context named `name`.
pub fn kubeconfig_yaml(
    name: &str,
    server: &str,
    ca_pem: Option<&str>,
    token: &str,
) -> Result<String, serde_yaml::Error> {
    let mut cluster = serde_json::Map::new();
    if let Some(ca) = ca_pem {
        cluster.insert(
            "certificate-authority-data".into(),
            base64::engine::general_purpose::STANDARD
                .encode(ca.as_bytes())
                .into(),
        );
    }
    cluster.insert("server".into(), server.into());
    // Keys in client-go's (alphabetical) order.
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "clusters": [{"cluster": cluster, "name": name}],
        "contexts": [{"context": {"cluster": name, "user": name}, "name": name}],
        "current-context": name,
        "kind": "Config",
        "preferences": {},
        "users": [{"name": name, "user": {"token": token}}],
    });
    serde_yaml::to_string(&doc)
}

impl Credentials {
    /// Credentials issued with `client`; the returned future removes grants
    /// left in the node's namespace by earlier versions, then drives the
    /// watches of the peer ServiceAccounts, Roles and RoleBindings, and must
    /// be spawned.
    pub fn new(
        client: kube::Client,
        cfg: CredentialsConfig,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &cfg.namespace);
        let (accounts, writer) = reflector::store();
        let (roles, roles_writer) = reflector::store();
        let (bindings, bindings_writer) = reflector::store();
        let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
        let config = watcher::Config::default().labels(&selector);
        let driver = futures::future::join3(
            // Without these watches, cached tokens are simply not reused and
            // tenant grants are written at every sale.
            reflect_forever(api, config.clone(), writer, "peer ServiceAccount"),
            reflect_forever(
                Api::<Role>::all(client.clone()),
                config.clone(),
                roles_writer,
                "peer Role",
            ),
            reflect_forever(
                Api::<RoleBinding>::all(client.clone()),
                config,
                bindings_writer,
                "peer RoleBinding",
            ),
        );
        // Earlier versions bound every peer in the node's namespace: without
        // a compatibility namespace those grants go.
        let stale = (cfg.remove_stale_grants && cfg.role_namespace.is_none())
            .then(|| (client.clone(), cfg.namespace.clone()));
        let narrow = cfg
            .remove_stale_grants
            .then(|| (client.clone(), cfg.role_namespace.clone()));
        let driver = async move {
            if let Some((client, ns)) = stale {
                remove_grants_in(&client, &ns).await;
            }
            let narrow = async move {
                if let Some((client, skip)) = narrow {
                    narrow_peer_roles(&client, skip.as_deref()).await;
                }
            };
            futures::future::join(narrow, driver).await;
        };
        let credentials = Credentials {
            client,
            cfg,
            cache: Mutex::new(HashMap::new()),
            accounts,
            roles,
            bindings,
            go_guard: tokio::sync::watch::Sender::new(false),
        };
        (credentials, driver)
    }

    /// True while the ServiceAccount `name` exists with `uid` and no
    /// revocation is pending on it, as the watch sees it.
    fn account_is(&self, name: &str, uid: &str) -> bool {
        self.accounts
            .get(&ObjectRef::new(name).within(&self.cfg.namespace))
            .is_some_and(|sa| {
                sa.uid().as_deref() == Some(uid)
                    && !sa.annotations().contains_key(REVOKING_ANNOTATION)
            })
    }

    /// Sets or clears the revocation mark of `buyer_id`'s account; with
    /// `resource_version`, only if the account has not changed since.
    pub async fn set_revoking(
        &self,
        buyer_id: &str,
        since: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), kube::Error> {
        let mut meta = serde_json::json!({"annotations": {REVOKING_ANNOTATION: since}});
        if let Some(rv) = resource_version {
            meta["resourceVersion"] = rv.into();
        }
        Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .patch(
                &service_account_name(buyer_id),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": meta })),
            )
            .await
            .map(|_| ())
    }

    /// Base64 (std, padded) kubeconfig for `buyer_id`, named after
    /// `provider_liqo_id` (reused while more than half of its token
    /// lifetime is left), with `grant` (a K8Slice sale) the buyer's rights in
    /// Liqo's objects here: its grant in its Liqo tenant namespace
    /// ([`Credentials::grant_tenant_namespace`]), or an unmodified Go
    /// consumer's ([`Credentials::grant_go_consumer`]). New credentials mint
    /// the token and write the grant at the same time, both needing only the
    /// ServiceAccount: a first sale to a buyer waits for one of the two
    /// instead of both.
    pub async fn issue(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
        grant: Option<PeeringGrant<'_>>,
    ) -> Result<String, CredentialsError> {
        let checked = self.check_owner(buyer_id, owner).await?;
        let grant = match grant {
            Some(PeeringGrant::GoConsumer(cluster)) if !valid_cluster_id(cluster) => {
                tracing::warn!(
                    buyer = buyer_id,
                    cluster_id = cluster,
                    "the buyer's Liqo cluster ID is not a DNS label: no Go peering grant"
                );
                None
            }
            other => other,
        };
        let go_cluster = match grant {
            Some(PeeringGrant::GoConsumer(cluster)) => Some(cluster),
            _ => None,
        };
        if let Some(PeeringGrant::TenantNamespace(cluster)) = grant
            && cluster == provider_liqo_id
        {
            // This cluster's own ID names no tenant of it.
            return Err(CredentialsError::TenantTaken {
                namespace: format!("liqo-tenant-{cluster}"),
            });
        }
        if let Some(cluster) = go_cluster {
            if cluster == provider_liqo_id {
                // This cluster's own ID names no tenant of it.
                return Err(CredentialsError::TenantTaken {
                    namespace: format!("{}{cluster}", go_peering::TENANT_PREFIX),
                });
            }
            // Before the account records the claim: a refused claim must
            // leave none behind (the namespace watcher acts on claims).
            self.check_go_claim(buyer_id, cluster).await?;
        }
        let apply_grant = |sa_uid: String| async move {
            match grant {
                Some(PeeringGrant::TenantNamespace(cluster)) => {
                    self.grant_tenant_namespace(buyer_id, owner, &sa_uid, cluster)
                        .await
                }
                Some(PeeringGrant::GoConsumer(cluster)) => {
                    self.grant_go_consumer(buyer_id, &sa_uid, cluster).await
                }
                None => Ok(()),
            }
        };
        // A Go consumer's account must carry its claim, so it is applied
        // at every such sale, cached token or not.
        if go_cluster.is_none()
            && let Some((b64, sa_uid)) = self.cached(buyer_id, owner, provider_liqo_id).await
        {
            apply_grant(sa_uid).await?;
            return Ok(b64);
        }
        let sa = service_account_name(buyer_id);
        let checked = self.claim(buyer_id, owner, checked).await?;
        let sa_uid = match self
            .ensure_rbac(&sa, buyer_id, owner, go_cluster, &checked.uid)
            .await
        {
            // The watch may lag behind a revocation: once more, as the API
            // server has the account now.
            Err(CredentialsError::AccountChanged { .. }) => {
                let live = self.read_owned_account(buyer_id, owner).await?;
                let checked = self
                    .claim(buyer_id, owner, live.as_ref().and_then(CheckedAccount::of))
                    .await?;
                self.ensure_rbac(&sa, buyer_id, owner, go_cluster, &checked.uid)
                    .await?
            }
            other => other?,
        };
        if let Some((b64, _)) = self.cached(buyer_id, owner, provider_liqo_id).await {
            apply_grant(sa_uid).await?;
            return Ok(b64);
        }
        let (b64, ()) = tokio::try_join!(
            self.mint(buyer_id, owner, provider_liqo_id, &sa_uid),
            apply_grant(sa_uid.clone())
        )?;
        Ok(b64)
    }

    /// The cached kubeconfig and account UID for `buyer_id`, while fresh and
    /// its account still exists.
    async fn cached(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
    ) -> Option<(String, String)> {
        let key = cache_key(buyer_id, owner, provider_liqo_id);
        let sa = service_account_name(buyer_id);
        let cache = self.cache.lock().await;
        let c = cache.get(&key)?;
        (Instant::now() < c.refresh_at && self.account_is(&sa, &c.sa_uid))
            .then(|| (c.kubeconfig_b64.clone(), c.sa_uid.clone()))
    }

    /// A new token for `buyer_id`'s ServiceAccount (UID `sa_uid`, applied
    /// already), as a base64 kubeconfig, cached for half the lifetime the
    /// API server granted.
    async fn mint(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
        sa_uid: &str,
    ) -> Result<String, CredentialsError> {
        // Measured before the request: the token cannot have been issued
        // earlier, so half its lifetime from here never overshoots.
        let (issued, issued_at) = (Instant::now(), jiff::Timestamp::now());
        let (token, expiration) = self.token(&service_account_name(buyer_id)).await?;
        // A token is for whichever account has the name when it is minted:
        // one deleted and made again by another sale since the check gets a
        // token bound to the other account's UID, which this buyer must not
        // be handed.
        if token_account_uid(&token).is_some_and(|uid| uid != sa_uid) {
            return Err(CredentialsError::AccountChanged {
                buyer: buyer_id.to_owned(),
            });
        }
        let reuse = reuse_for(issued_at, expiration.as_deref(), self.cfg.token_ttl);
        let yaml = kubeconfig_yaml(
            provider_liqo_id,
            &self.cfg.api_server_url,
            self.cfg.ca_pem.as_deref(),
            &token,
        )?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(yaml.as_bytes());
        self.cache.lock().await.insert(
            cache_key(buyer_id, owner, provider_liqo_id),
            Cached {
                kubeconfig_b64: b64.clone(),
                refresh_at: issued + reuse,
                sa_uid: sa_uid.to_owned(),
            },
        );
        Ok(b64)
    }

    /// Server-side applies the ServiceAccount, with `go_cluster` the Liqo
    /// cluster ID its Go consumer may peer as (without, a claim it has stays),
    /// and, in the compatibility namespace if one is
    /// configured, the peer Role and the buyer's RoleBinding; returns the
    /// ServiceAccount's UID. The account must still be the one of UID `uid`
    /// whose owner the sale checked: one deleted meanwhile (a revocation)
    /// is not made again, and one made again by another sale not written.
    async fn ensure_rbac(
        &self,
        sa: &str,
        buyer_id: &str,
        owner: &str,
        go_cluster: Option<&str>,
        uid: &str,
    ) -> Result<String, CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let mut annotations: std::collections::BTreeMap<String, String> = [
            (BUYER_ANNOTATION.to_owned(), buyer_id.to_owned()),
            (OWNER_ANNOTATION.to_owned(), owner.to_owned()),
        ]
        .into();
        // A claim stays with the account until it is revoked: a sale of
        // another kind (a service) to the same Go consumer keeps it, as does
        // its first time, with which adoption compares namespaces' creation.
        let current = self.go_claims().into_iter().find(|c| c.account == sa);
        let claim = match (go_cluster, current) {
            (Some(cluster), Some(c)) if c.cluster_id == cluster && !c.claimed_at.is_empty() => {
                Some((c.cluster_id, c.claimed_at))
            }
            (Some(cluster), _) => Some((cluster.to_owned(), jiff::Timestamp::now().to_string())),
            (None, current) => current.map(|c| (c.cluster_id, c.claimed_at)),
        };
        if let Some((cluster, since)) = claim {
            annotations.insert(go_peering::CLUSTER_ID_ANNOTATION.to_owned(), cluster);
            annotations.insert(go_peering::CLAIMED_AT_ANNOTATION.to_owned(), since);
        }
        let sa_obj = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(sa.to_owned()),
                namespace: Some(self.cfg.namespace.clone()),
                // A precondition: the API server refuses the apply (409 when
                // the account is gone, 422 when it is another) rather than
                // make or take over an account whose owner was not checked.
                uid: Some(uid.to_owned()),
                labels: labels(),
                annotations: Some(annotations),
                ..Default::default()
            },
            ..Default::default()
        };
        let applied = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .patch(
                sa,
                &pp,
                &Patch::Apply(with_type(&sa_obj, "v1", "ServiceAccount")),
            )
            .await
            .map_err(|source| {
                if account_changed(&source) {
                    CredentialsError::AccountChanged {
                        buyer: buyer_id.to_owned(),
                    }
                } else {
                    CredentialsError::Kube {
                        step: "applying the peer ServiceAccount",
                        source,
                    }
                }
            })?;
        if let Some(extra) = &self.cfg.role_namespace {
            let uid = applied.uid().unwrap_or_default();
            self.bind_peer_rules(extra, liqo_peering_user_rules(), sa, &uid, buyer_id)
                .await?;
        }
        if applied.annotations().contains_key(REVOKING_ANNOTATION) {
            // Issuing cancels a pending revocation; the write also changes
            // the resourceVersion the revoker's delete is conditioned on.
            // The UID again: the revoker may have won meanwhile.
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
                .patch(
                    sa,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {
                        "uid": uid,
                        "annotations": {REVOKING_ANNOTATION: null},
                    }})),
                )
                .await
                .map_err(|source| {
                    if account_changed(&source) || api_error::is_not_found(&source) {
                        CredentialsError::AccountChanged {
                            buyer: buyer_id.to_owned(),
                        }
                    } else {
                        CredentialsError::Kube {
                            step: "cancelling a pending revocation of the peer ServiceAccount",
                            source,
                        }
                    }
                })?;
        }
        Ok(applied.uid().unwrap_or_default())
    }

    /// A bound token for `sa` from the TokenRequest API, and the
    /// `status.expirationTimestamp` of the answer, as it came (the answer is
    /// read untyped: a missing or odd timestamp must not lose the token).
    async fn token(&self, sa: &str) -> Result<(String, Option<String>), CredentialsError> {
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(
                    i64::try_from(self.cfg.token_ttl.as_secs()).unwrap_or(i64::MAX),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer: serde_json::Value =
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
                .create_subresource("token", sa, &PostParams::default(), &req)
                .await
                .map_err(|source| CredentialsError::Kube {
                    step: "requesting a ServiceAccount token (TokenRequest API)",
                    source,
                })?;
        let status: TokenAnswerStatus = serde_json::from_value(
            answer.get("status").cloned().unwrap_or_default(),
        )
        .map_err(|source| CredentialsError::TokenAnswer {
            account: sa.to_owned(),
            source,
        })?;
        let token = status
            .token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| CredentialsError::NoToken(sa.to_owned()))?;
        Ok((token, status.expiration_timestamp))
    }

    /// Creates `ns` for `buyer_id`, or accepts it when this gateway already
    /// made it for that buyer. The cluster ID is the buyer's word: without
    /// this check, a buyer naming another peer's cluster ID would be bound
    /// into that peer's tenant namespace (and would take over its labels).
    async fn claim_tenant_namespace(
        &self,
        ns: &str,
        buyer_id: &str,
        owner: &str,
        buyer_cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        let api = Api::<Namespace>::all(self.client.clone());
        // The buyer ID and, once recorded, the key: after a revocation
        // another key buying with that buyer ID is not bound into the
        // namespace its first owner's Liqo objects may still be in.
        // Not a Go consumer's (adopted with Liqo's wider rules, which a
        // FLUIDOS-rs buyer's grant would narrow under it).
        let ours = |n: &Namespace| {
            namespace_buyer(n) == Some(buyer_id)
                && n.annotations()
                    .get(OWNER_ANNOTATION)
                    .is_none_or(|o| o == owner)
                && !n.labels().contains_key(go_peering::NAMESPACE_LABEL)
        };
        let taken = || CredentialsError::TenantTaken {
            namespace: ns.to_owned(),
        };
        // A Go consumer's claim holds the namespace before it exists (it
        // creates it itself).
        if self
            .go_claims()
            .iter()
            .any(|c| c.cluster_id == buyer_cluster_id && c.buyer != buyer_id)
        {
            return Err(taken());
        }
        let existing = self.read_tenant_namespace(ns).await?;
        if let Some(existing) = existing {
            if !ours(&existing) {
                return Err(taken());
            }
            // Made by an earlier version: the owner recorded now (this
            // node's own peering checks it before using the namespace).
            self.record_namespace_owner(ns, owner).await?;
            return Ok(());
        }
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.to_owned()),
                labels: Some(
                    [
                        (
                            "liqo.io/remote-cluster-id".to_owned(),
                            buyer_cluster_id.to_owned(),
                        ),
                        ("liqo.io/tenant-namespace".to_owned(), "true".to_owned()),
                        (MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned()),
                    ]
                    .into(),
                ),
                // The owner too: this node, buying from the cluster of that
                // ID itself, peers in this namespace only if its seller is
                // that owner (fluidos-peering checks it).
                annotations: Some(
                    [
                        (BUYER_ANNOTATION.to_owned(), buyer_id.to_owned()),
                        (OWNER_ANNOTATION.to_owned(), owner.to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        match api
            .create(&kube::api::PostParams::default(), &namespace)
            .await
        {
            Ok(_) => Ok(()),
            // Made concurrently: ours only if by the same buyer.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = self.read_tenant_namespace(ns).await?;
                if existing.as_ref().is_some_and(ours) {
                    Ok(())
                } else {
                    Err(taken())
                }
            }
            Err(source) => Err(CredentialsError::Kube {
                step: "creating the buyer's Liqo tenant namespace",
                source,
            }),
        }
    }

    /// Lets the buyer's ServiceAccount authenticate with this cluster's Liqo:
    /// pre-creates Liqo's tenant namespace for the buyer's Liqo cluster ID
    /// (`liqo-tenant-<id>`, labelled as Liqo finds it; a peering user may not
    /// create namespaces) and binds the peer rules ([`peer_rules`]) there, in
    /// that one namespace only; and lets it read this cluster's CIDRs in
    /// Liqo's namespace ([`Credentials::grant_liqo_networks`]). Idempotent.
    pub async fn grant_tenant_namespace(
        &self,
        buyer_id: &str,
        owner: &str,
        sa_uid: &str,
        buyer_cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        if !valid_cluster_id(buyer_cluster_id) {
            tracing::warn!(
                buyer = buyer_id,
                cluster_id = buyer_cluster_id,
                "the buyer's Liqo cluster ID is not a DNS label: no tenant namespace granted"
            );
            return Ok(());
        }
        let ns = format!("liqo-tenant-{buyer_cluster_id}");
        let sa = service_account_name(buyer_id);
        let rules = peer_rules(buyer_cluster_id);
        if tenant_grant_is_current(
            (
                self.roles
                    .get(&ObjectRef::new(PEER_ROLE).within(&ns))
                    .as_deref(),
                &rules,
            ),
            self.bindings
                .get(&ObjectRef::new(&sa).within(&ns))
                .as_deref(),
            buyer_id,
            &sa,
            sa_uid,
            &self.cfg.namespace,
        ) {
            // The tenant namespace is this buyer's (a binding of ours there
            // exists only after the claim), so the CIDRs may be granted. A
            // namespace made by an earlier version gets its owner recorded.
            self.record_namespace_owner(&ns, owner).await?;
            return self.grant_liqo_networks(&sa, sa_uid, buyer_id).await;
        }
        // The claim first: a buyer stating another peer's cluster ID gets
        // nothing at all. Then both grants at once (independent objects).
        self.claim_tenant_namespace(&ns, buyer_id, owner, buyer_cluster_id)
            .await?;
        tokio::try_join!(
            self.bind_peer_rules(&ns, rules, &sa, sa_uid, buyer_id),
            self.grant_liqo_networks(&sa, sa_uid, buyer_id)
        )
        .map(|_| ())
    }

    /// Lets the buyer's ServiceAccount `sa` (UID `sa_uid`) read this
    /// cluster's pod and external CIDRs, which a consumer's Liqo networking
    /// phase needs (as Liqo's `liqo-peering-user-liqo-ns` grants): applies the
    /// Role [`PEER_NETWORK_ROLE`] in Liqo's namespace and binds the account to
    /// it there. Nothing is written while the watch caches show the grant in
    /// place, or the account's Go-consumer binding there (it lists the
    /// Networks too, and a RoleBinding's role cannot change). Without Liqo's
    /// namespace (no Liqo here, so nothing to peer with), or without the
    /// rights to write the Role (a gateway deployed without peering), it
    /// logs and grants nothing: the sale goes on, its tenant grant suffices
    /// for a peering without networking.
    async fn grant_liqo_networks(
        &self,
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let ns = go_peering::LIQO_NAMESPACE;
        let binding = self.bindings.get(&ObjectRef::new(sa).within(ns));
        let binding = binding.as_deref();
        let sa_namespace = self.cfg.namespace.as_str();
        if binding
            .is_some_and(|b| binds(b, go_peering::LIQO_ROLE, buyer_id, sa, sa_uid, sa_namespace))
            || network_grant_is_current(
                self.roles
                    .get(&ObjectRef::new(PEER_NETWORK_ROLE).within(ns))
                    .as_deref(),
                binding,
                buyer_id,
                sa,
                sa_uid,
                sa_namespace,
            )
        {
            return Ok(());
        }
        // Asked first when the Role is not there yet: a write into a
        // namespace that does not exist waits 50 ms in the API server's
        // namespace admission before it is refused, a read does not.
        if self
            .roles
            .get(&ObjectRef::new(PEER_NETWORK_ROLE).within(ns))
            .is_none()
            && !self.namespace_may_exist(ns).await?
        {
            tracing::info!(
                buyer = buyer_id,
                namespace = ns,
                "no Liqo namespace on this cluster: the buyer is not granted its CIDRs"
            );
            return Ok(());
        }
        let role = Role {
            metadata: ObjectMeta {
                name: Some(PEER_NETWORK_ROLE.to_owned()),
                namespace: Some(ns.to_owned()),
                labels: labels(),
                ..Default::default()
            },
            rules: Some(peer_network_rules()),
        };
        match apply_rbac(
            Api::<Role>::namespaced(self.client.clone(), ns),
            PEER_NETWORK_ROLE,
            &role,
            "Role",
        )
        .await
        {
            Ok(()) => {}
            Err(e) if api_error::is_not_found(&e) => {
                tracing::info!(
                    buyer = buyer_id,
                    namespace = ns,
                    "no Liqo namespace on this cluster: the buyer is not granted its CIDRs"
                );
                return Ok(());
            }
            Err(e) if api_error::is_forbidden(&e) => {
                tracing::warn!(
                    buyer = buyer_id,
                    namespace = ns,
                    error = %e,
                    "the gateway may not grant the reading of Liqo's Networks (it must hold get and list of networks.ipam.liqo.io there): the buyer's Liqo networking will fail"
                );
                return Ok(());
            }
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: "applying the peer Role in Liqo's namespace (the gateway needs get and list of networks.ipam.liqo.io there)",
                    source,
                });
            }
        }
        self.bind_account(Some(ns), ("Role", PEER_NETWORK_ROLE), sa, sa_uid, buyer_id)
            .await?;
        self.wait_in_force(ns, sa, "ipam.liqo.io", "networks", "get")
            .await;
        Ok(())
    }

    /// Waits until the API server authorizes the grant just written (see
    /// [`effective_grant`]): a peer handed its kubeconfig before would see
    /// 403s. Best effort, never fails.
    async fn wait_in_force(&self, ns: &str, sa: &str, group: &str, resource: &str, verb: &str) {
        effective_grant::wait_in_force(
            &self.client,
            effective_grant::Access {
                account_namespace: &self.cfg.namespace,
                account: sa,
                namespace: ns,
                group,
                resource,
                verb,
            },
        )
        .await;
    }

    /// False when the namespace `ns` does not exist or is being deleted;
    /// true when it does, or when this gateway may not read it (the write
    /// that follows says).
    async fn namespace_may_exist(&self, ns: &str) -> Result<bool, CredentialsError> {
        match Api::<Namespace>::all(self.client.clone()).get_opt(ns).await {
            Ok(found) => Ok(found.is_some_and(|n| n.metadata.deletion_timestamp.is_none())),
            Err(e) if api_error::is_forbidden(&e) => Ok(true),
            Err(source) => Err(CredentialsError::Kube {
                step: "reading Liqo's namespace",
                source,
            }),
        }
    }

    /// Deletes this gateway's binding named `sa` to [`PEER_NETWORK_ROLE`] in
    /// Liqo's namespace, if the watch cache shows one (of this account or
    /// of an earlier one of the same name): an unmodified Go consumer's
    /// binding there has the same name and another role, which a
    /// RoleBinding cannot change.
    async fn unbind_network_role(&self, sa: &str) -> Result<(), CredentialsError> {
        let ns = go_peering::LIQO_NAMESPACE;
        // The cache holds only bindings with this gateway's label.
        let Some(binding) = self.bindings.get(&ObjectRef::new(sa).within(ns)) else {
            return Ok(());
        };
        if binding.role_ref.kind != "Role" || binding.role_ref.name != PEER_NETWORK_ROLE {
            return Ok(());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: binding.uid(),
                resource_version: binding.resource_version(),
            }),
            ..Default::default()
        };
        match Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .delete(sa, &dp)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => Ok(()),
            Err(source) => Err(CredentialsError::Kube {
                step: "deleting the peer's Networks RoleBinding in Liqo's namespace",
                source,
            }),
        }
    }

    /// Server-side applies the peer Role of `rules` in `ns` and binds the
    /// buyer's ServiceAccount `sa` to it.
    async fn bind_peer_rules(
        &self,
        ns: &str,
        rules: Vec<PolicyRule>,
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let role = Role {
            metadata: ObjectMeta {
                name: Some(PEER_ROLE.to_owned()),
                namespace: Some(ns.to_owned()),
                labels: labels(),
                ..Default::default()
            },
            rules: Some(rules),
        };
        Api::<Role>::namespaced(self.client.clone(), ns)
            .patch(
                PEER_ROLE,
                &pp,
                &Patch::Apply(with_type(&role, "rbac.authorization.k8s.io/v1", "Role")),
            )
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "applying the peer Role (the gateway needs the rules it grants, or `bind`/`escalate`)",
                source,
            })?;
        self.bind_account(Some(ns), ("Role", PEER_ROLE), sa, sa_uid, buyer_id)
            .await?;
        // Liqo's peering user first creates its nonce Secret there.
        self.wait_in_force(ns, sa, "", "secrets", "create").await;
        Ok(())
    }

    /// Server-side applies the binding named `sa` of the buyer's
    /// ServiceAccount `sa` to `role` (kind and name): a RoleBinding in
    /// `namespace`, or a ClusterRoleBinding without one.
    async fn bind_account(
        &self,
        namespace: Option<&str>,
        role: (&str, &str),
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let metadata = ObjectMeta {
            name: Some(sa.to_owned()),
            namespace: namespace.map(str::to_owned),
            labels: labels(),
            annotations: Some(
                [
                    (BUYER_ANNOTATION.to_owned(), buyer_id.to_owned()),
                    (ACCOUNT_UID_ANNOTATION.to_owned(), sa_uid.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        };
        let role_ref = RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: role.0.into(),
            name: role.1.into(),
        };
        let subjects = Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: sa.to_owned(),
            namespace: Some(self.cfg.namespace.clone()),
            ..Default::default()
        }]);
        let applied = match namespace {
            Some(ns) => {
                let binding = RoleBinding {
                    metadata,
                    role_ref,
                    subjects,
                };
                apply_rbac(
                    Api::namespaced(self.client.clone(), ns),
                    sa,
                    &binding,
                    "RoleBinding",
                )
                .await
            }
            None => {
                let binding = ClusterRoleBinding {
                    metadata,
                    role_ref,
                    subjects,
                };
                apply_rbac(
                    Api::all(self.client.clone()),
                    sa,
                    &binding,
                    "ClusterRoleBinding",
                )
                .await
            }
        };
        applied.map_err(|source| CredentialsError::Kube {
            step: if namespace.is_some() {
                "applying the peer RoleBinding"
            } else {
                "applying the Go peer ClusterRoleBinding"
            },
            source,
        })
    }

    /// Refuses `owner` credentials of `buyer_id` when its account belongs to
    /// another peer. Read from the API server when the watch has not seen
    /// the account (a replica may have made it just now); an account of an
    /// earlier version, without an owner, goes to the first peer that asks.
    /// Returns the account as checked, if there is one.
    async fn check_owner(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<Option<CheckedAccount>, CredentialsError> {
        let seen = self
            .accounts
            .get(&ObjectRef::new(&service_account_name(buyer_id)).within(&self.cfg.namespace))
            .map(|a| (*a).clone());
        let account = match seen {
            Some(a) => {
                refuse_another_owner(Some(&a), buyer_id, owner)?;
                Some(a)
            }
            None => self.read_owned_account(buyer_id, owner).await?,
        };
        Ok(account.as_ref().and_then(CheckedAccount::of))
    }

    /// `buyer_id`'s account as the API server has it, refused when another
    /// peer owns it.
    async fn read_owned_account(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<Option<ServiceAccount>, CredentialsError> {
        let account = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .get_opt(&service_account_name(buyer_id))
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "reading the peer ServiceAccount",
                source,
            })?;
        refuse_another_owner(account.as_ref(), buyer_id, owner)?;
        Ok(account)
    }

    /// The account `checked` found, owned by `owner`: as it is when it
    /// already is, claimed when it has no owner, created when there is none.
    async fn claim(
        &self,
        buyer_id: &str,
        owner: &str,
        checked: Option<CheckedAccount>,
    ) -> Result<CheckedAccount, CredentialsError> {
        match checked {
            Some(a) if a.owned => Ok(a),
            Some(unowned) => self.claim_unowned(buyer_id, owner, &unowned).await,
            None => self.claim_account(buyer_id, owner).await,
        }
    }

    /// Creates `buyer_id`'s account owned by `owner`, or, when another sale
    /// created it first, refuses `owner` unless that sale was its own: of
    /// two first sales to one buyer ID by different peers at the same time,
    /// only one gets the account.
    async fn claim_account(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<CheckedAccount, CredentialsError> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace);
        let name = service_account_name(buyer_id);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: labels(),
                annotations: Some(
                    [
                        (BUYER_ANNOTATION.to_owned(), buyer_id.to_owned()),
                        (OWNER_ANNOTATION.to_owned(), owner.to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let changed = || CredentialsError::AccountChanged {
            buyer: buyer_id.to_owned(),
        };
        let existing = match api.create(&PostParams::default(), &sa).await {
            Ok(created) => return CheckedAccount::of(&created).ok_or_else(changed),
            Err(e) if api_error::is_already_exists(&e) => {
                self.read_owned_account(buyer_id, owner).await?
            }
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: "creating the peer ServiceAccount",
                    source,
                });
            }
        };
        match existing.as_ref().and_then(CheckedAccount::of) {
            Some(a) if a.owned => Ok(a),
            Some(unowned) => self.claim_unowned(buyer_id, owner, &unowned).await,
            // Gone again already (revoked): the buyer's retry starts over.
            None => Err(changed()),
        }
    }

    /// Records `owner` on `buyer_id`'s account of an earlier version, which
    /// has none, if it is still as `checked` saw it: of two peers claiming
    /// it at once, the second is refused.
    async fn claim_unowned(
        &self,
        buyer_id: &str,
        owner: &str,
        checked: &CheckedAccount,
    ) -> Result<CheckedAccount, CredentialsError> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace);
        let name = service_account_name(buyer_id);
        let changed = || CredentialsError::AccountChanged {
            buyer: buyer_id.to_owned(),
        };
        let mut checked = checked.clone();
        // Twice at most: a stale read, or a revocation mark written
        // meanwhile, moves the resourceVersion without a claim.
        for _ in 0..2 {
            let patch = serde_json::json!({"metadata": {
                "uid": checked.uid,
                "resourceVersion": checked.resource_version,
                "annotations": {OWNER_ANNOTATION: owner},
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(claimed) => return CheckedAccount::of(&claimed).ok_or_else(changed),
                Err(e) if api_error::is_conflict(&e) => {
                    let now = self.read_owned_account(buyer_id, owner).await?;
                    match now.as_ref().and_then(CheckedAccount::of) {
                        // Claimed by a sale of this same owner.
                        Some(a) if a.owned && a.uid == checked.uid => return Ok(a),
                        Some(a) if !a.owned && a.uid == checked.uid => checked = a,
                        _ => return Err(changed()),
                    }
                }
                Err(e) if account_changed(&e) || api_error::is_not_found(&e) => {
                    return Err(changed());
                }
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: "claiming the peer ServiceAccount",
                        source,
                    });
                }
            }
        }
        Err(changed())
    }

    /// The Go consumers' claims, as the watch of the peer accounts sees them.
    fn go_claims(&self) -> Vec<go_peering::Claim> {
        self.accounts
            .state()
            .iter()
            .filter_map(|sa| go_peering::Claim::of(sa))
            .collect()
    }

    /// The Liqo tenant namespace `ns`, if it exists.
    /// Records `owner` on the tenant namespace `ns` if it names none.
    async fn record_namespace_owner(&self, ns: &str, owner: &str) -> Result<(), CredentialsError> {
        let Some(existing) = self.read_tenant_namespace(ns).await? else {
            return Ok(());
        };
        if existing.annotations().contains_key(OWNER_ANNOTATION) {
            return Ok(());
        }
        match Api::<Namespace>::all(self.client.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(
                    serde_json::json!({"metadata": {"annotations": {OWNER_ANNOTATION: owner}}}),
                ),
            )
            .await
        {
            Ok(_) => Ok(()),
            // The rear-manager issuing for sellers may not patch namespaces
            // (the chart grants it no such right): a namespace an earlier
            // version made keeps no owner until the gateway records it.
            Err(e) if api_error::is_forbidden(&e) => {
                tracing::info!(
                    namespace = ns,
                    "not allowed to record the owner of a Liqo tenant namespace made by an earlier version; the REAR gateway records it"
                );
                Ok(())
            }
            Err(source) => Err(CredentialsError::Kube {
                step: "recording the owner of the buyer's Liqo tenant namespace",
                source,
            }),
        }
    }

    async fn read_tenant_namespace(
        &self,
        ns: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::Namespace>, CredentialsError> {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .get_opt(ns)
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "reading the buyer's Liqo tenant namespace",
                source,
            })
    }

    /// Whether `buyer_id`'s account claims `cluster_id` for a Go consumer
    /// (as the watch sees it).
    pub fn has_go_claim(&self, buyer_id: &str, cluster_id: &str) -> bool {
        self.accounts
            .get(&ObjectRef::new(&service_account_name(buyer_id)).within(&self.cfg.namespace))
            .as_deref()
            .and_then(go_peering::Claim::of)
            .is_some_and(|c| c.buyer == buyer_id && c.cluster_id == cluster_id)
    }

    /// Refuses an unmodified Go consumer's claim on `cluster_id` when
    /// another buyer's account claims it, or when its tenant namespace
    /// exists and is not this buyer's (made outside FLUIDOS, or another
    /// buyer's). A namespace made after this buyer's earlier claim and not
    /// adopted yet counts as this buyer's.
    async fn check_go_claim(
        &self,
        buyer_id: &str,
        cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        let ns = format!("{}{cluster_id}", go_peering::TENANT_PREFIX);
        let taken = || CredentialsError::TenantTaken {
            namespace: ns.clone(),
        };
        let claims: Vec<go_peering::Claim> = self
            .go_claims()
            .into_iter()
            .filter(|c| c.cluster_id == cluster_id)
            .collect();
        if claims.iter().any(|c| c.buyer != buyer_id) {
            return Err(taken());
        }
        let existing = self.read_tenant_namespace(&ns).await?;
        let Some(existing) = existing else {
            return Ok(());
        };
        match namespace_buyer(&existing) {
            Some(b) if b == buyer_id => Ok(()),
            // Made by this buyer's Go consumer after its earlier claim, and
            // not adopted yet: never one managed by anyone (this node's own
            // peering's holds its Liqo credentials).
            None if go_peering::may_adopt(&existing)
                && claims.iter().any(|c| c.made_after_claim(&existing)) =>
            {
                Ok(())
            }
            _ => Err(taken()),
        }
    }

    /// Grants an unmodified Go consumer its peering rights
    /// ([`crate::go_peering`]): the cluster-wide ClusterRole and the Role in
    /// Liqo's namespace, and, if it made its tenant namespace already, the
    /// namespace and the peer Role there. Its account must carry the claim
    /// ([`Credentials::ensure_rbac`]) and the admission policy must be in
    /// place: without it, nothing is granted.
    pub async fn grant_go_consumer(
        &self,
        buyer_id: &str,
        sa_uid: &str,
        cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        // Right after the gateway starts the guard may still be on its way.
        let mut guard = self.go_guard.subscribe();
        if !matches!(
            tokio::time::timeout(GO_GUARD_WAIT, guard.wait_for(|applied| *applied)).await,
            Ok(Ok(_))
        ) {
            return Err(CredentialsError::GoPeeringGuardNotReady);
        }
        let sa = service_account_name(buyer_id);
        // An earlier FLUIDOS-rs sale to this account bound it there under
        // the same name; the Go Role lists the Networks too.
        self.unbind_network_role(&sa).await?;
        self.bind_account(
            Some(go_peering::LIQO_NAMESPACE),
            ("Role", go_peering::LIQO_ROLE),
            &sa,
            sa_uid,
            buyer_id,
        )
        .await?;
        self.bind_account(
            None,
            ("ClusterRole", go_peering::CLUSTER_ROLE),
            &sa,
            sa_uid,
            buyer_id,
        )
        .await?;
        let ns = format!("{}{cluster_id}", go_peering::TENANT_PREFIX);
        match self.read_tenant_namespace(&ns).await? {
            None => {}
            // Already this buyer's: adopted before if bound there (an
            // adoption binds only after it looked for this node's peering).
            Some(n) if namespace_buyer(&n) == Some(buyer_id) => {
                // (A list by name: the gateway may list RoleBindings, not get them.)
                let bound = !Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
                    .list_metadata(&ListParams::default().fields(&format!("metadata.name={sa}")))
                    .await
                    .map_err(|source| CredentialsError::Kube {
                        step: "reading the Go consumer's binding in its tenant namespace",
                        source,
                    })?
                    .items
                    .is_empty();
                self.adopt_go_namespace(&ns, (&sa, sa_uid), buyer_id, bound)
                    .await?;
            }
            // Its Go consumer's, not yet adopted (made since its claim:
            // `check_go_claim`).
            Some(n) if go_peering::may_adopt(&n) => {
                self.adopt_go_namespace(&ns, (&sa, sa_uid), buyer_id, false)
                    .await?;
            }
            // Managed by someone else meanwhile (this node's own peering).
            Some(_) => return Err(CredentialsError::TenantTaken { namespace: ns }),
        }
        Ok(())
    }

    /// Adopts the Go consumer's tenant namespace `ns` for `buyer_id` and
    /// binds the peer Role there for its account `sa`.
    async fn adopt_go_namespace(
        &self,
        ns: &str,
        (sa, sa_uid): (&str, &str),
        buyer_id: &str,
        adopted_before: bool,
    ) -> Result<(), CredentialsError> {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .patch(
                ns,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(go_peering::adoption_patch(ns, buyer_id)),
            )
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "adopting the Go consumer's Liqo tenant namespace",
                source,
            })?;
        // Labelled first, then looked into: this node's own peering writes
        // its signed nonce there before it reads the namespace again (and
        // refuses a Go consumer's), so one of the two sees the other, and a
        // Go consumer's rights, which list Secrets, never reach this node's
        // Liqo credentials.
        // Adopted before (bound then, when none of this node's peering was
        // there): the labels stay, so this node's peering, which reads them
        // before it writes its credentials, refuses to go on there.
        if !adopted_before && self.holds_own_peering(ns).await? {
            tracing::warn!(
                namespace = ns,
                buyer = buyer_id,
                "not adopting a Go consumer's Liqo tenant namespace: this node's own peering with that cluster is there"
            );
            // The apply drops this manager's labels and annotations but
            // this mark, which keeps the namespace from being taken again.
            Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
                .patch(
                    ns,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(go_peering::refusal_patch(ns)),
                )
                .await
                .map_err(|source| CredentialsError::Kube {
                    step: "giving back a Liqo tenant namespace this node peers in",
                    source,
                })?;
            return Err(CredentialsError::TenantTaken {
                namespace: ns.to_owned(),
            });
        }
        self.bind_peer_rules(ns, liqo_peering_user_rules(), sa, sa_uid, buyer_id)
            .await
    }

    /// Whether the tenant namespace `ns` holds this node's own peering with
    /// its cluster (as that cluster's consumer): the signed nonce or the
    /// control-plane kubeconfig Liqo writes for it.
    async fn holds_own_peering(&self, ns: &str) -> Result<bool, CredentialsError> {
        let cluster = ns.strip_prefix(go_peering::TENANT_PREFIX).unwrap_or(ns);
        let secrets =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), ns);
        for name in [
            "liqo-signed-nonce".to_owned(),
            format!("kubeconfig-controlplane-{cluster}"),
        ] {
            let found =
                secrets
                    .get_metadata_opt(&name)
                    .await
                    .map_err(|source| CredentialsError::Kube {
                        step: "looking for this node's own peering in a Liqo tenant namespace",
                        source,
                    })?;
            if found.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Applies the Go-consumer grant's ClusterRole, Role and admission
    /// policy with its binding.
    async fn apply_go_guard(&self) -> Result<(), CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let kube = |step: &'static str| move |source| CredentialsError::Kube { step, source };
        let (policy, binding) = go_peering::admission_policy(&self.cfg.namespace);
        let name = go_peering::policy_name(&self.cfg.namespace);
        let admission = "admissionregistration.k8s.io/v1";
        // The policy first: the rights it confines are granted only after.
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
            self.client.clone(),
        )
        .patch(
            &name,
            &pp,
            &Patch::Apply(with_type(&policy, admission, "ValidatingAdmissionPolicy")),
        )
        .await
        .map_err(kube("applying the Go peers' admission policy"))?;
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
            self.client.clone(),
        )
        .patch(
            &name,
            &pp,
            &Patch::Apply(with_type(
                &binding,
                admission,
                "ValidatingAdmissionPolicyBinding",
            )),
        )
        .await
        .map_err(kube("applying the Go peers' admission policy binding"))?;
        apply_rbac(
            Api::<ClusterRole>::all(self.client.clone()),
            go_peering::CLUSTER_ROLE,
            &go_peering::cluster_role(),
            "ClusterRole",
        )
        .await
        .map_err(kube("applying the Go peers' ClusterRole"))?;
        apply_rbac(
            Api::<Role>::namespaced(self.client.clone(), go_peering::LIQO_NAMESPACE),
            go_peering::LIQO_ROLE,
            &go_peering::liqo_role(),
            "Role",
        )
        .await
        .map_err(kube("applying the Go peers' Role in Liqo's namespace"))?;
        self.wait_go_guard_enforced().await
    }

    /// Waits until the API server enforces the Go peers' admission policy
    /// (it loads policies and bindings asynchronously; rights granted before
    /// would be unconfined): its probe, a dry-run creation the policy
    /// refuses, is refused. Nothing here can be watched, so it asks again
    /// every 100 ms, for at most a minute.
    async fn wait_go_guard_enforced(&self) -> Result<(), CredentialsError> {
        let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            self.client.clone(),
            &self.cfg.namespace,
        );
        let mut probe = k8s_openapi::api::core::v1::Secret::default();
        probe.metadata.name = Some(go_peering::PROBE_SECRET.to_owned());
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let policy = go_peering::policy_name(&self.cfg.namespace);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match secrets.create(&dry_run, &probe).await {
                // Refused by the policy: by its probe check, or, while no
                // peer account exists, for want of a parameter.
                Err(kube::Error::Api(e))
                    if (e.code == 403 || e.code == 422) && e.message.contains(&policy) =>
                {
                    tracing::info!(policy = %policy, waited = ?(Instant::now() + Duration::from_secs(60) - deadline), "the Go peers' admission policy is enforced");
                    return Ok(());
                }
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(_) => {
                    return Err(CredentialsError::GoPeeringGuardNotReady);
                }
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: "probing the Go peers' admission policy (a dry-run Secret creation)",
                        source,
                    });
                }
            }
        }
    }

    /// Runs the Go-consumer grant while the gateway runs: applies its
    /// cluster-wide objects (again every 30 s until that succeeds), then
    /// adopts each Liqo tenant namespace a Go consumer creates for the one
    /// buyer that claimed its cluster ID, binding the peer Role there (the
    /// Go consumer's first read in it comes 5 s after it made it). Returns
    /// at once when the grant is off.
    pub async fn run_go_peering(&self) {
        use k8s_openapi::api::core::v1::Namespace;
        if !self.cfg.go_peering {
            return;
        }
        loop {
            match self.apply_go_guard().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "the Go consumers' peering grant cannot be set up; their K8Slice purchases answer 503 until it is (retrying in 30 s)");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
        self.go_guard.send_replace(true);
        let namespaces = watcher(
            Api::<Namespace>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects();
        futures::pin_mut!(namespaces);
        while let Some(event) = namespaces.next().await {
            let ns = match event {
                Ok(ns) => ns,
                Err(e) => {
                    tracing::warn!(error = %e, "watching namespaces for Go consumers' tenant namespaces");
                    continue;
                }
            };
            let name = ns.name_any();
            let Some(cluster) = go_peering::cluster_of_namespace(&name) else {
                continue;
            };
            if !go_peering::may_adopt(&ns) {
                continue;
            }
            let claims = self.go_claims();
            let Some(claim) = go_peering::sole_claimant(&claims, cluster) else {
                continue;
            };
            if !claim.made_after_claim(&ns) {
                // Made before the claim (e.g. this node's own tenant
                // namespace of a provider it buys from): not the buyer's.
                tracing::warn!(namespace = %name, buyer = %claim.buyer, "a Go consumer claims a Liqo tenant namespace made before its claim; not adopted");
                continue;
            }
            match self
                .adopt_go_namespace(&name, (&claim.account, &claim.uid), &claim.buyer, false)
                .await
            {
                Ok(()) => {
                    tracing::info!(namespace = %name, buyer = %claim.buyer, "adopted a Go consumer's Liqo tenant namespace")
                }
                Err(e) => {
                    tracing::warn!(namespace = %name, error = %e, "cannot adopt a Go consumer's Liqo tenant namespace")
                }
            }
        }
    }

    /// Deletes the Go peer ClusterRoleBinding of the account `sa` (UID
    /// `uid`), if this gateway made it for that account.
    async fn unbind_go_consumer(&self, sa: &str, uid: &str) -> Result<(), CredentialsError> {
        let api = Api::<ClusterRoleBinding>::all(self.client.clone());
        let found = api
            .get_opt(sa)
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "reading the Go peer ClusterRoleBinding",
                source,
            })?;
        let Some(binding) = found else {
            return Ok(());
        };
        let ours = binding.labels().get(MANAGED_LABEL.0).map(String::as_str)
            == Some(MANAGED_LABEL.1)
            && binding
                .annotations()
                .get(ACCOUNT_UID_ANNOTATION)
                .is_none_or(|u| u == uid);
        if !ours {
            return Ok(());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: binding.uid(),
                resource_version: binding.resource_version(),
            }),
            ..Default::default()
        };
        match api.delete(sa, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => Ok(()),
            Err(source) => Err(CredentialsError::Kube {
                step: "deleting the Go peer ClusterRoleBinding",
                source,
            }),
        }
    }

    /// Deletes the RoleBindings made for the buyer's account (by UID), then
    /// the account, which invalidates every token issued for it, unless it
    /// changed since `resource_version` (somebody issued credentials:
    /// `Ok(false)`), then its cached kubeconfigs.
    pub async fn revoke(
        &self,
        buyer_id: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<bool, CredentialsError> {
        let sa = service_account_name(buyer_id);
        // Its bindings first, wherever they are (its tenant namespaces, and
        // the compatibility namespace if one is configured): RBAC binds by
        // name, so a binding left behind would grant a later account of the
        // same name. A failure here leaves the account for the next sweep to
        // revoke again; should the account be reissued meanwhile (the delete
        // below then fails), the next sale grants it again.
        let all = Api::<RoleBinding>::all(self.client.clone());
        let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
        let bindings = all
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|source| CredentialsError::Kube {
                step: "listing the peer RoleBindings",
                source,
            })?;
        let made_for_it = |b: &RoleBinding| {
            b.name_any() == sa
                && b.annotations()
                    .get(ACCOUNT_UID_ANNOTATION)
                    .is_none_or(|u| u == uid)
                && b.subjects.as_deref().is_some_and(|subjects| {
                    subjects.iter().all(|s| {
                        s.kind == "ServiceAccount"
                            && s.name == sa
                            && s.namespace.as_deref() == Some(self.cfg.namespace.as_str())
                    })
                })
        };
        for binding in bindings.items.iter().filter(|b| made_for_it(b)) {
            let Some(ns) = binding.namespace() else {
                continue;
            };
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: binding.uid(),
                    resource_version: binding.resource_version(),
                }),
                ..Default::default()
            };
            match Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
                .delete(&sa, &dp)
                .await
            {
                Ok(_) => {}
                // Gone, or re-made for a new account since: not ours to delete.
                Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => {}
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: "deleting a peer RoleBinding",
                        source,
                    });
                }
            }
        }
        match self.unbind_go_consumer(&sa, uid).await {
            // With the grant off the gateway may not read ClusterRoleBindings
            // (the chart grants that only with it on); one made while it was
            // on is then the operator's to remove (docs/deploy.md).
            Err(CredentialsError::Kube { source, .. })
                if !self.cfg.go_peering && api_error::is_forbidden(&source) => {}
            other => other?,
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: Some(resource_version.to_owned()),
            }),
            ..Default::default()
        };
        match Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .delete(&sa, &dp)
            .await
        {
            Ok(_) => {}
            Err(e) if api_error::is_conflict(&e) => return Ok(false),
            Err(e) if api_error::is_not_found(&e) => {}
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: "deleting the peer ServiceAccount",
                    source,
                });
            }
        }
        let prefix = format!("{buyer_id}\u{0}");
        self.cache
            .lock()
            .await
            .retain(|k, _| !k.starts_with(&prefix));
        Ok(true)
    }
}

/// The buyer this gateway made (or adopted) the namespace `ns` for: its
/// label and buyer annotation; `None` for a namespace it does not manage.
pub fn namespace_buyer(ns: &k8s_openapi::api::core::v1::Namespace) -> Option<&str> {
    let managed = ns
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_LABEL.0))
        .is_some_and(|v| v == MANAGED_LABEL.1);
    managed
        .then(|| ns.metadata.annotations.as_ref()?.get(BUYER_ANNOTATION))
        .flatten()
        .map(String::as_str)
}

/// Server-side applies the RBAC object `obj` of `kind`, named `name`.
async fn apply_rbac<K>(api: Api<K>, name: &str, obj: &K, kind: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(with_type(obj, "rbac.authorization.k8s.io/v1", kind)),
    )
    .await
    .map(|_| ())
}

/// The part of a TokenRequest answer's `status` this gateway reads; both
/// optional, so that a missing timestamp falls back instead of failing.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenAnswerStatus {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expiration_timestamp: Option<String>,
}

/// How long a kubeconfig whose token was requested at `issued` is reused:
/// half the lifetime the API server granted (`expiration`, the answer's
/// `status.expirationTimestamp`, RFC 3339), which may be shorter than
/// `requested` (a `--service-account-max-token-expiration` cap) or longer
/// (`--service-account-extend-token-expiration`); half of `requested` when
/// the timestamp is missing or does not parse. A token already expired by
/// our clock is not reused at all.
pub fn reuse_for(
    issued: jiff::Timestamp,
    expiration: Option<&str>,
    requested: Duration,
) -> Duration {
    let granted = expiration
        .and_then(|e| e.parse::<jiff::Timestamp>().ok())
        .map_or(requested, |exp| {
            Duration::try_from(exp.duration_since(issued)).unwrap_or(Duration::ZERO)
        });
    granted / 2
}

/// The object as JSON with `apiVersion`/`kind`, which server-side apply requires.
fn with_type<T: serde::Serialize>(obj: &T, api_version: &str, kind: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_tokens_account_uid_is_read_from_its_claims() {
        use base64::Engine as _;
        let jwt = |claims: &serde_json::Value| {
            let b = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
            format!(
                "{}.{}.{}",
                b(br#"{"alg":"RS256"}"#),
                b(claims.to_string().as_bytes()),
                b(b"sig")
            )
        };
        let claims = serde_json::json!({"kubernetes.io": {"serviceaccount": {"name": "fluidos-peer-a", "uid": "u-1"}}});
        assert_eq!(token_account_uid(&jwt(&claims)).as_deref(), Some("u-1"));
        assert_eq!(
            token_account_uid(&jwt(&serde_json::json!({"sub": "x"}))),
            None
        );
        assert_eq!(token_account_uid("not-a-jwt"), None);
        assert_eq!(token_account_uid("a.%%%.c"), None);
    }

    #[test]
    fn a_namespace_is_a_buyers_only_with_this_gateways_label_and_annotation() {
        let ns = |labels: &[(&str, &str)], buyer: Option<&str>| {
            let mut n = k8s_openapi::api::core::v1::Namespace::default();
            n.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            n.metadata.annotations =
                buyer.map(|b| [(BUYER_ANNOTATION.to_owned(), b.to_owned())].into());
            n
        };
        assert_eq!(namespace_buyer(&ns(&[MANAGED_LABEL], Some("a"))), Some("a"));
        assert_eq!(
            namespace_buyer(&ns(&[], Some("a"))),
            None,
            "not managed here"
        );
        assert_eq!(
            namespace_buyer(&ns(&[(MANAGED_LABEL.0, "someone-else")], Some("a"))),
            None
        );
        assert_eq!(namespace_buyer(&ns(&[MANAGED_LABEL], None)), None);
    }

    #[test]
    fn service_account_names_are_valid_and_distinct() {
        assert_eq!(
            service_account_name("rd5ks7x9yz"),
            "fluidos-peer-rd5ks7x9yz"
        );
        let a = service_account_name("Node.A");
        let b = service_account_name("node-a");
        assert_ne!(a, b);
        let long = service_account_name(&"x".repeat(200));
        assert!(long.len() <= 63, "{long}");
        for n in [a, b, long, service_account_name("--")] {
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{n}"
            );
            assert!(!n.ends_with('-'), "{n}");
        }
    }

    fn granted(buyer: &str, sa: &str, sa_ns: &str) -> (Role, RoleBinding) {
        let role = Role {
            rules: Some(peer_rules("liqo-b")),
            ..Default::default()
        };
        let binding = RoleBinding {
            metadata: ObjectMeta {
                annotations: Some(
                    [
                        (BUYER_ANNOTATION.to_owned(), buyer.to_owned()),
                        (ACCOUNT_UID_ANNOTATION.to_owned(), "uid-1".to_owned()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: PEER_ROLE.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: sa.into(),
                namespace: Some(sa_ns.into()),
                ..Default::default()
            }]),
        };
        (role, binding)
    }

    #[test]
    fn a_tenant_grant_is_skipped_only_when_it_is_exactly_in_place() {
        let (role, binding) = granted("b", "fluidos-peer-b", "fluidos");
        let rules = peer_rules("liqo-b");
        let current = |r: Option<&Role>, b: Option<&RoleBinding>| {
            tenant_grant_is_current((r, &rules), b, "b", "fluidos-peer-b", "uid-1", "fluidos")
        };
        assert!(current(Some(&role), Some(&binding)));
        assert!(!current(None, Some(&binding)), "no Role yet");
        assert!(!current(Some(&role), None), "no binding yet");

        let mut other_buyer = binding.clone();
        other_buyer
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(BUYER_ANNOTATION.to_owned(), "a".to_owned());
        assert!(!current(Some(&role), Some(&other_buyer)));

        // Made for an earlier (revoked) account of the same name.
        assert!(!tenant_grant_is_current(
            (Some(&role), &rules),
            Some(&binding),
            "b",
            "fluidos-peer-b",
            "uid-2",
            "fluidos"
        ));

        let mut other_subject = binding.clone();
        other_subject.subjects.as_mut().unwrap()[0].namespace = Some("elsewhere".into());
        assert!(!current(Some(&role), Some(&other_subject)));

        let mut two_subjects = binding.clone();
        let first = two_subjects.subjects.as_ref().unwrap()[0].clone();
        two_subjects.subjects.as_mut().unwrap().push(first);
        assert!(!current(Some(&role), Some(&two_subjects)));

        let mut old_rules = role.clone();
        old_rules.rules.as_mut().unwrap().pop();
        assert!(
            !current(Some(&old_rules), Some(&binding)),
            "rules changed since"
        );
        let wide = Role {
            rules: Some(liqo_peering_user_rules()),
            ..Default::default()
        };
        assert!(
            !current(Some(&wide), Some(&binding)),
            "a Role of an earlier version, which listed every Secret"
        );
        let another_peers = Role {
            rules: Some(peer_rules("liqo-c")),
            ..Default::default()
        };
        assert!(!current(Some(&another_peers), Some(&binding)));

        let mut going = binding.clone();
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
        assert!(!current(Some(&role), Some(&going)), "being deleted");
    }

    #[test]
    fn a_network_grant_is_skipped_only_when_it_is_exactly_in_place() {
        let (_, mut binding) = granted("b", "fluidos-peer-b", "fluidos");
        binding.role_ref.name = PEER_NETWORK_ROLE.into();
        let role = Role {
            rules: Some(peer_network_rules()),
            ..Default::default()
        };
        let current = |r: Option<&Role>, b: Option<&RoleBinding>, uid: &str| {
            network_grant_is_current(r, b, "b", "fluidos-peer-b", uid, "fluidos")
        };
        assert!(current(Some(&role), Some(&binding), "uid-1"));
        assert!(!current(None, Some(&binding), "uid-1"), "no Role yet");
        assert!(!current(Some(&role), None, "uid-1"), "no binding yet");
        assert!(
            !current(Some(&role), Some(&binding), "uid-2"),
            "made for an earlier account"
        );
        let (tenant_role, tenant_binding) = granted("b", "fluidos-peer-b", "fluidos");
        assert!(
            !current(Some(&role), Some(&tenant_binding), "uid-1"),
            "a binding of the tenant Role"
        );
        assert!(
            !current(Some(&tenant_role), Some(&binding), "uid-1"),
            "the Role has other rules"
        );
        let rules = peer_network_rules();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get", "list"]);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["networks".to_owned()][..])
        );
    }

    #[test]
    fn kubeconfig_shape() {
        let y = kubeconfig_yaml("prov", "https://h:6443", Some("PEM"), "tok").unwrap();
        let v: serde_yaml::Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(v["current-context"], "prov");
        assert_eq!(v["clusters"][0]["cluster"]["server"], "https://h:6443");
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(v["users"][0]["user"]["token"], "tok");
        assert!(kube::config::Kubeconfig::from_yaml(&y).is_ok());
    }

    #[test]
    fn cached_kubeconfigs_live_half_the_granted_lifetime() {
        let issued: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let day = Duration::from_secs(24 * 3600);
        let hour = Duration::from_secs(3600);
        // As requested.
        assert_eq!(
            reuse_for(issued, Some("2026-01-02T00:00:00Z"), day),
            day / 2
        );
        // Shortened by the API server (a maximum token lifetime).
        assert_eq!(
            reuse_for(issued, Some("2026-01-01T01:00:00Z"), day),
            hour / 2
        );
        // Extended by the API server.
        assert_eq!(
            reuse_for(issued, Some("2027-01-01T00:00:00Z"), day),
            365 * day / 2
        );
        // Other offsets parse too.
        assert_eq!(
            reuse_for(issued, Some("2026-01-01T02:00:00+01:00"), day),
            hour / 2
        );
        // Missing or unparsable: the configured lifetime.
        assert_eq!(reuse_for(issued, None, day), day / 2);
        assert_eq!(reuse_for(issued, Some("tomorrow"), day), day / 2);
        assert_eq!(reuse_for(issued, Some(""), day), day / 2);
        // Expired already (clock skew): never reused.
        assert_eq!(
            reuse_for(issued, Some("2025-12-31T23:00:00Z"), day),
            Duration::ZERO
        );
    }

    #[test]
    fn token_answers_parse_without_a_timestamp() {
        let s: TokenAnswerStatus =
            serde_json::from_value(serde_json::json!({"token": "t"})).unwrap();
        assert_eq!(
            (s.token.as_deref(), s.expiration_timestamp),
            (Some("t"), None)
        );
        let s: TokenAnswerStatus = serde_json::from_value(serde_json::json!({
            "token": "t", "expirationTimestamp": "2026-01-01T00:00:00Z"}))
        .unwrap();
        assert_eq!(
            s.expiration_timestamp.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
    }

    #[test]
    fn rules_have_no_patch_and_no_wildcards() {
        for r in peer_rules("liqo-b")
            .into_iter()
            .chain(liqo_peering_user_rules())
            .chain(peer_network_rules())
        {
            assert!(!r.verbs.iter().any(|v| v == "patch" || v == "*"));
            assert!(!r.resources.unwrap().iter().any(|x| x == "*"));
        }
    }

    #[test]
    fn a_fluidos_buyer_reads_only_its_own_secrets_by_name() {
        let secrets: Vec<_> = peer_rules("liqo-b")
            .into_iter()
            .filter(|r| r.resources.as_ref().unwrap().iter().any(|x| x == "secrets"))
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let found: Vec<_> = secrets
            .iter()
            .map(|r| {
                (
                    r.verbs.clone(),
                    r.resource_names.clone().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                (s(&["create"]), Vec::new()),
                (s(&["delete", "get"]), s(&["liqo-nonce"])),
                (s(&["get"]), s(&["gw-liqo-b"])),
            ]
        );
        // The rest is Liqo's peering user's, as the Go consumer gets it.
        let others = |rules: Vec<PolicyRule>| -> Vec<PolicyRule> {
            rules
                .into_iter()
                .filter(|r| !r.resources.as_ref().unwrap().iter().any(|x| x == "secrets"))
                .collect()
        };
        assert_eq!(
            others(peer_rules("liqo-b")),
            others(liqo_peering_user_rules())
        );
    }

    fn api_status(code: u16, reason: &str, uid_cause: bool) -> kube::Error {
        let causes = if uid_cause {
            serde_json::json!([{"field": "metadata.uid", "reason": "FieldValueInvalid"}])
        } else {
            serde_json::json!([])
        };
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": "refused",
            "details": {"causes": causes},
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn only_a_refusal_about_the_account_itself_says_it_changed() {
        // Gone (uid mismatch on apply) or changed since its resourceVersion.
        assert!(account_changed(&api_status(409, "Conflict", false)));
        // Another account of that name (metadata.uid is immutable).
        assert!(account_changed(&api_status(422, "Invalid", true)));
        // A name taken is not a change; an admission policy's 422 or a 400
        // is the API server's to explain, as is anything else.
        assert!(!account_changed(&api_status(409, "AlreadyExists", false)));
        assert!(!account_changed(&api_status(422, "Invalid", false)));
        assert!(!account_changed(&api_status(400, "BadRequest", false)));
        assert!(!account_changed(&api_status(403, "Forbidden", false)));
        assert!(!account_changed(&api_status(404, "NotFound", false)));
    }
}

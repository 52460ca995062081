//! What a buyer is granted here, as objects (pure): the names and marks of
//! a peer's ServiceAccount, Roles and RoleBindings, the rules each Role
//! carries, the objects a grant applies, and whether what the watch caches
//! see is that grant already.
//!
//! Each buyer gets its own ServiceAccount `fluidos-peer-<buyerID>`
//! ([`service_account_name`]), with no rights of its own. A K8Slice sale
//! binds it to the Role [`PEER_ROLE`] in the buyer's Liqo tenant namespace
//! ([`peer_rules`]: Liqo 1.0's minimal peering user, Secrets by name) and to
//! the Role [`PEER_NETWORK_ROLE`] in Liqo's namespace
//! ([`peer_network_rules`]); an unmodified Go consumer's adopted namespace
//! gets Liqo's own peering-user rules ([`liqo_peering_user_rules`],
//! [`peer_role_rules_for`]). The executor [`crate::credentials`] applies
//! these objects and mints the tokens: the REAR gateway's for its buyers,
//! the rear-manager's for the sellers of Services delivered by Liqo.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::ResourceExt;
use kube::api::ObjectMeta;

use crate::remote_namespace::{LIQO_NAMESPACE, TENANT_PREFIX};

/// Prefix of every peer ServiceAccount's name ([`service_account_name`]).
pub const SERVICE_ACCOUNT_PREFIX: &str = "fluidos-peer-";

/// Name of the Role, in each buyer's tenant namespace, the buyer is bound to.
pub const PEER_ROLE: &str = "fluidos-peer";

/// Name of the nonce Secret a consumer creates in its tenant namespace on
/// the provider, which Liqo fills (Liqo v1.0.0's `liqo-nonce`).
pub const LIQO_NONCE_SECRET: &str = "liqo-nonce";

/// Name of the shared Role, in Liqo's namespace
/// ([`LIQO_NAMESPACE`]), through which K8Slice buyers read this
/// cluster's pod and external CIDRs ([`peer_network_rules`]).
pub const PEER_NETWORK_ROLE: &str = "fluidos-peer-network";

/// Label on every object a grant makes (whichever component applies it:
/// the value names the REAR gateway, which made them first, and stays so
/// that objects made by earlier versions are still this node's).
pub const MANAGED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "fluidos-rear-gateway");

/// ServiceAccount annotation naming the buyer it was issued for (names may
/// be hashed, so the buyer cannot always be read back from the name).
pub const BUYER_ANNOTATION: &str = "fluidos.eu/buyer-id";

/// ServiceAccount annotation: the peer its credentials belong to, the key
/// fingerprint of a TLS buyer or [`PLAIN_HTTP_OWNER`]. A buyer ID is the
/// buyer's word: without this, a peer naming another's buyer ID would be
/// handed that buyer's token.
pub const OWNER_ANNOTATION: &str = "fluidos.eu/buyer-owner";

/// [`OWNER_ANNOTATION`] of accounts bought over plain HTTP.
pub const PLAIN_HTTP_OWNER: &str = "plain-http";

/// The annotations that say whom a grant's objects are for: the buyer ID
/// ([`BUYER_ANNOTATION`]) and the peer it belongs to ([`OWNER_ANNOTATION`]).
pub fn buyer_marks(buyer_id: &str, owner: &str) -> BTreeMap<String, String> {
    [
        (BUYER_ANNOTATION.to_owned(), buyer_id.to_owned()),
        (OWNER_ANNOTATION.to_owned(), owner.to_owned()),
    ]
    .into()
}

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

/// Where a peer ServiceAccount is in its revocation ([`REVOKING_ANNOTATION`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccountPhase {
    /// It exists and no revocation is pending: its tokens may be reused.
    Live,
    /// A revocation is pending since this time (RFC 3339, as written): no
    /// replica reuses its tokens; a sale clears the mark, a sweep past the
    /// grace period deletes it.
    Revoking {
        /// When the mark was set.
        since: String,
    },
    /// There is no such account (never made, or revoked).
    Gone,
}

impl AccountPhase {
    /// The phase of `account` as observed (`None`: not there).
    pub fn of(account: Option<&ServiceAccount>) -> AccountPhase {
        match account.map(|a| a.annotations().get(REVOKING_ANNOTATION)) {
            None => AccountPhase::Gone,
            Some(None) => AccountPhase::Live,
            Some(Some(since)) => AccountPhase::Revoking {
                since: since.clone(),
            },
        }
    }
}

/// What a K8Slice sale grants the buyer in Liqo's objects on this cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeeringGrant<'a> {
    /// Liqo's peering-user rights in the tenant namespace of this Liqo
    /// cluster ID, which the gateway prepares (a FLUIDOS-rs consumer).
    TenantNamespace(&'a str),
    /// The unmodified Go consumer's rights for this Liqo cluster ID
    /// ([`crate::go_grant`]).
    GoConsumer(&'a str),
}

/// Whether `id` can name a Liqo tenant namespace (`liqo-tenant-<id>` is a
/// DNS label).
pub fn valid_cluster_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63 - TENANT_PREFIX.len()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

/// True when `role` and `binding` (as the watch caches see them in a tenant
/// namespace) already grant [`peer_rules`] to the ServiceAccount `sa` of
/// `sa_namespace`, bound for `buyer_id`. A binding of ours exists in a tenant
/// namespace only after the namespace was claimed for that same buyer
/// ([`crate::credentials::Credentials::grant_tenant_namespace`]), and goes away with it.
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
pub(crate) fn role_has(role: Option<&Role>, rules: &[PolicyRule]) -> bool {
    role.is_some_and(|r| {
        r.metadata.deletion_timestamp.is_none() && r.rules.as_deref() == Some(rules)
    })
}

/// True when `binding` binds the Role `role` to the ServiceAccount `sa` of
/// `sa_namespace` alone, made by this node for `buyer_id` and for the
/// account of UID `sa_uid` (not an earlier one of the same name), and is
/// not being deleted.
pub(crate) fn binds(
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
/// consumer gets in the tenant namespace it made and this node adopted
/// (`--rear-go-peering-grant`), since Liqo's library finds its nonce by
/// listing Secrets (`GetNonceSecretByClusterID`), and what every peer gets
/// in the gateway's compatibility namespace (`CredentialsConfig::role_namespace`). A Go consumer's namespace
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
    let cluster_id = ns.metadata.name.as_deref()?.strip_prefix(TENANT_PREFIX)?;
    if ns
        .labels()
        .contains_key(fluidos_api::reservation::GO_PEERING_NAMESPACE_LABEL)
    {
        Some(liqo_peering_user_rules())
    } else {
        Some(peer_rules(cluster_id))
    }
}

/// The ServiceAccount UID a token from the TokenRequest API is bound to
/// (its JWT's `kubernetes.io.serviceaccount.uid` claim); `None` when the
/// token carries none. The token comes from our API server: its signature
/// is that server's business, only its claims are read.
pub(crate) fn token_account_uid(token: &str) -> Option<String> {
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

/// The labels of everything the grant makes ([`MANAGED_LABEL`]).
pub(crate) fn managed_labels() -> Option<BTreeMap<String, String>> {
    Some([(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned())].into())
}

/// True when `account` records an owner other than `owner` (an account
/// without one, made by an earlier version, goes to the first that asks).
pub(crate) fn owned_by_another(account: Option<&ServiceAccount>, owner: &str) -> bool {
    account
        .and_then(|a| a.annotations().get(OWNER_ANNOTATION))
        .is_some_and(|recorded| recorded != owner)
}

/// The buyer this node made (or adopted) the namespace `ns` for: its
/// label and buyer annotation; `None` for a namespace it does not manage.
pub(crate) fn namespace_buyer(ns: &Namespace) -> Option<&str> {
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

/// How long a kubeconfig whose token was requested at `issued` is reused:
/// half the lifetime the API server granted (`expiration`, the answer's
/// `status.expirationTimestamp`, RFC 3339), which may be shorter than
/// `requested` (a `--service-account-max-token-expiration` cap) or longer
/// (`--service-account-extend-token-expiration`); half of `requested` when
/// the timestamp is missing or does not parse. A token already expired by
/// our clock is not reused at all.
pub(crate) fn reuse_for(
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
pub(crate) fn with_type<T: serde::Serialize>(
    obj: &T,
    api_version: &str,
    kind: &str,
) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
    v
}

/// The peer Role `PEER_ROLE` of `rules` in `namespace`.
pub fn peer_role(namespace: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(PEER_ROLE.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: managed_labels(),
            ..Default::default()
        },
        rules: Some(rules),
    }
}

/// The Role [`PEER_NETWORK_ROLE`] in Liqo's namespace, shared by every
/// K8Slice buyer ([`peer_network_rules`]).
pub fn peer_network_role() -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(PEER_NETWORK_ROLE.to_owned()),
            namespace: Some(LIQO_NAMESPACE.to_owned()),
            labels: managed_labels(),
            ..Default::default()
        },
        rules: Some(peer_network_rules()),
    }
}

/// Who a binding of the grant is for: the buyer's ServiceAccount `name` of
/// `namespace` (UID `uid`), issued for `buyer_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grantee<'a> {
    /// The ServiceAccount's name ([`service_account_name`]).
    pub name: &'a str,
    /// Its namespace (the node's).
    pub namespace: &'a str,
    /// Its UID: a binding names it, so that one made for an earlier account
    /// of the same name does not count ([`ACCOUNT_UID_ANNOTATION`]).
    pub uid: &'a str,
    /// The buyer it was issued for.
    pub buyer_id: &'a str,
}

impl Grantee<'_> {
    /// The binding's metadata, named after the account, in `namespace`
    /// (`None`: a cluster-scoped binding).
    fn binding_meta(&self, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(self.name.to_owned()),
            namespace: namespace.map(str::to_owned),
            labels: managed_labels(),
            annotations: Some(
                [
                    (BUYER_ANNOTATION.to_owned(), self.buyer_id.to_owned()),
                    (ACCOUNT_UID_ANNOTATION.to_owned(), self.uid.to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    fn subjects(&self) -> Option<Vec<Subject>> {
        Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: self.name.to_owned(),
            namespace: Some(self.namespace.to_owned()),
            ..Default::default()
        }])
    }

    /// The RoleBinding, in `namespace`, of this account to the Role `role`.
    pub fn role_binding(&self, namespace: &str, role: &str) -> RoleBinding {
        RoleBinding {
            metadata: self.binding_meta(Some(namespace)),
            role_ref: role_ref("Role", role),
            subjects: self.subjects(),
        }
    }

    /// The ClusterRoleBinding of this account to the ClusterRole `role`.
    pub fn cluster_role_binding(&self, role: &str) -> ClusterRoleBinding {
        ClusterRoleBinding {
            metadata: self.binding_meta(None),
            role_ref: role_ref("ClusterRole", role),
            subjects: self.subjects(),
        }
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// The RBAC authorizer's answer for one request under `rules` (for the
/// rows the tests check: no aggregation, no subresource wildcards, no
/// non-resource URLs): what a SubjectAccessReview answers for an account
/// bound to them alone. An empty `resourceNames` list matches every name,
/// as in Kubernetes.
#[cfg(test)]
pub(crate) fn permits(
    rules: &[PolicyRule],
    verb: &str,
    group: &str,
    resource: &str,
    name: &str,
) -> bool {
    let any = |items: &Option<Vec<String>>, want: &str| {
        items
            .as_deref()
            .is_some_and(|i| i.iter().any(|x| x == want || x == "*"))
    };
    rules.iter().any(|r| {
        r.verbs.iter().any(|v| v == verb || v == "*")
            && any(&r.api_groups, group)
            && any(&r.resources, resource)
            && r.resource_names
                .as_deref()
                .is_none_or(|names| names.is_empty() || names.iter().any(|n| n == name))
    })
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

    #[test]
    fn the_objects_a_grant_applies_are_what_its_check_takes_for_it() {
        let account = Grantee {
            name: "fluidos-peer-b",
            namespace: "fluidos",
            uid: "uid-1",
            buyer_id: "b",
        };
        let rules = peer_rules("c1");
        let role = peer_role("liqo-tenant-c1", rules.clone());
        let binding = account.role_binding("liqo-tenant-c1", PEER_ROLE);
        assert!(tenant_grant_is_current(
            (Some(&role), &rules),
            Some(&binding),
            "b",
            "fluidos-peer-b",
            "uid-1",
            "fluidos"
        ));
        // Another account of that name (a new UID) is not granted by it.
        assert!(!tenant_grant_is_current(
            (Some(&role), &rules),
            Some(&binding),
            "b",
            "fluidos-peer-b",
            "uid-2",
            "fluidos"
        ));
        let network = account.role_binding(LIQO_NAMESPACE, PEER_NETWORK_ROLE);
        assert!(network_grant_is_current(
            Some(&peer_network_role()),
            Some(&network),
            "b",
            "fluidos-peer-b",
            "uid-1",
            "fluidos"
        ));
        let cluster = account.cluster_role_binding("a-cluster-role");
        assert_eq!(cluster.role_ref.kind, "ClusterRole");
        assert_eq!(cluster.metadata.namespace, None);
        assert_eq!(cluster.subjects, binding.subjects);
    }

    /// Every grant of a FLUIDOS-rs buyer the gateway's integration tests
    /// check with a SubjectAccessReview on a real API server
    /// (`tests/tenant_namespace.rs`), stated against the rules bound in each
    /// namespace: its tenant namespace and Liqo's (nothing is bound
    /// cluster-wide, and a request where nothing is bound is refused, which
    /// the integration tests check). The Go consumer's are `go_grant`'s.
    #[test]
    fn what_a_buyers_grant_permits_and_refuses() {
        let tenant = peer_rules("liqo-a");
        let liqo = peer_network_rules();
        let permitted: &[(&[PolicyRule], &str, &str, &str, &str)] = &[
            // Liqo's peering user in its tenant namespace, its own Secrets
            // by name ...
            (&tenant, "create", "authentication.liqo.io", "tenants", ""),
            (&tenant, "create", "", "secrets", ""),
            (&tenant, "list", "", "configmaps", ""),
            (&tenant, "get", "", "secrets", LIQO_NONCE_SECRET),
            (&tenant, "delete", "", "secrets", LIQO_NONCE_SECRET),
            (&tenant, "get", "", "secrets", "gw-liqo-a"),
            (&tenant, "get", "networking.liqo.io", "gatewayservers", ""),
            (&tenant, "create", "networking.liqo.io", "publickeies", ""),
            (&tenant, "update", "ipam.liqo.io", "ips", ""),
            // ... and this cluster's CIDRs in Liqo's namespace.
            (&liqo, "list", "ipam.liqo.io", "networks", ""),
            (&liqo, "get", "ipam.liqo.io", "networks", ""),
        ];
        for (rules, verb, group, resource, name) in permitted {
            assert!(
                permits(rules, verb, group, resource, name),
                "{verb} {group}/{resource} {name:?} must be granted"
            );
        }
        let refused: &[(&[PolicyRule], &str, &str, &str, &str)] = &[
            // Secrets of its tenant namespace by name only: not this node's
            // own Liqo credentials kept there when it buys from that peer.
            (&tenant, "list", "", "secrets", ""),
            (&tenant, "watch", "", "secrets", ""),
            (
                &tenant,
                "get",
                "",
                "secrets",
                "kubeconfig-controlplane-liqo-a",
            ),
            (&tenant, "delete", "", "secrets", "gw-liqo-a"),
            (&tenant, "get", "", "secrets", "gw-liqo-b"),
            (&tenant, "patch", "", "secrets", LIQO_NONCE_SECRET),
            (
                &tenant,
                "create",
                "rbac.authorization.k8s.io",
                "rolebindings",
                "",
            ),
            (
                &tenant,
                "update",
                "authentication.liqo.io",
                "resourceslices",
                "",
            ),
            (&tenant, "create", "", "namespaces", ""),
            // In Liqo's namespace the Networks only, and only read.
            (&liqo, "list", "", "secrets", ""),
            (&liqo, "get", "", "secrets", ""),
            (&liqo, "list", "", "configmaps", ""),
            (
                &liqo,
                "list",
                "networking.liqo.io",
                "wggatewayservertemplates",
                "",
            ),
            (&liqo, "watch", "ipam.liqo.io", "networks", ""),
            (&liqo, "create", "ipam.liqo.io", "networks", ""),
            (&liqo, "update", "ipam.liqo.io", "networks", ""),
        ];
        for (rules, verb, group, resource, name) in refused {
            assert!(
                !permits(rules, verb, group, resource, name),
                "{verb} {group}/{resource} {name:?} must be refused"
            );
        }
    }

    #[test]
    fn an_accounts_phase_is_read_from_its_mark() {
        let mut sa = ServiceAccount::default();
        assert_eq!(AccountPhase::of(None), AccountPhase::Gone);
        assert_eq!(AccountPhase::of(Some(&sa)), AccountPhase::Live);
        sa.metadata.annotations = Some(
            [(
                REVOKING_ANNOTATION.to_owned(),
                "2026-01-01T00:00:00Z".to_owned(),
            )]
            .into(),
        );
        assert_eq!(
            AccountPhase::of(Some(&sa)),
            AccountPhase::Revoking {
                since: "2026-01-01T00:00:00Z".to_owned()
            }
        );
    }
}

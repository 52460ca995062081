//! The compatibility grant for unmodified Go consumers' Liqo peering
//! (`--rear-go-peering-grant`, off by default).
//!
//! A FLUIDOS-rs consumer peers as `liqoctl peer` does, inside the tenant
//! namespace this provider prepares and binds at the sale
//! ([`crate::credentials::Credentials::grant_tenant_namespace`]). An
//! unmodified Go consumer cannot: it creates Liqo's objects on the provider
//! itself (`fluidos-node.md` §4.3–4.4), starting with its tenant namespace
//! `liqo-tenant-<its cluster ID>`, whose creation fails when the namespace
//! exists, so nothing can be prepared or bound there before it peers. Upstream
//! gives every peer near cluster-admin rights for that. This grant gives
//! exactly the calls the Go consumer makes, and confines its writes:
//!
//! - the ClusterRole [`CLUSTER_ROLE`] ([`cluster_role`]): `create` of
//!   namespaces, Secrets, Configurations, GatewayServers, PublicKeys and
//!   Tenants, and `list` of Connections (the Go consumer lists them in all
//!   namespaces), cluster-wide because the namespace does not exist yet;
//! - the Role [`LIQO_ROLE`] in Liqo's namespace ([`liqo_role`]): `list`
//!   of ConfigMaps (Liqo's cluster ID) and of IPAM Networks (the CIDRs);
//! - the admission policy [`admission_policy`]: a peer that may create
//!   namespaces writes only in, or creates only, `liqo-tenant-<the cluster ID
//!   recorded on its ServiceAccount>` ([`CLUSTER_ID_ANNOTATION`]; the
//!   ServiceAccount is the policy's parameter, so a peer whose account lacks
//!   it may write nothing), it creates that namespace labelled for that
//!   cluster ID ([`GO_CONSUMER_NAMESPACE_LABELS`]) and with no ownership
//!   marks of its own making, and no peer creates a ServiceAccount-token
//!   Secret;
//! - when its tenant namespace appears, the gateway adopts it for the buyer
//!   ([`adoption_patch`]) and binds the usual peer Role there, which carries
//!   the reads the Go consumer makes in it (its GatewayServer, its gateway's
//!   key Secret, its nonce, its Tenant). The Go consumer's first such read
//!   comes 5 s after it creates the namespace (its polling tick).
//!
//! This module is the grant's objects and decisions (pure); the setting of
//! who gets it is the gateway's (`GoPeeringGrant`), its executor
//! [`crate::credentials`].
//!
//! Applies only to plain-HTTP buyers (the Go client speaks only `http://`)
//! and only to K8Slice sales; a TLS buyer is a FLUIDOS-rs node and never
//! needs it.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ParamKind, ParamRef,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ObjectMeta;

use crate::grant::{
    BUYER_ANNOTATION, MANAGED_LABEL, OWNER_ANNOTATION, PLAIN_HTTP_OWNER, SERVICE_ACCOUNT_PREFIX,
    rule,
};

/// Liqo's namespace, where the Go consumer reads Liqo's cluster ID and
/// CIDRs (it assumes this name, `fluidos-node.md` §4.1).
pub use crate::remote_namespace::LIQO_NAMESPACE;
/// ClusterRole of the Go consumers' cluster-wide rights.
pub const CLUSTER_ROLE: &str = "fluidos-go-peer";
/// Role, in [`LIQO_NAMESPACE`], of the Go consumers' reads there.
pub const LIQO_ROLE: &str = "fluidos-go-peer";
/// ServiceAccount annotation: when the account first claimed its cluster ID
/// (RFC 3339). Only a tenant namespace made since is adopted for it.
pub const CLAIMED_AT_ANNOTATION: &str = "fluidos.eu/go-peer-claimed-at";
/// Seconds a namespace may seem to predate its claim and still be the
/// claimant's: the claim is dated by the gateway's clock, the namespace by
/// the API server's.
pub const CLOCK_SKEW: i64 = 5;
/// ServiceAccount annotation: the Liqo cluster ID whose tenant namespace
/// the account's Go consumer may create and write in.
pub const CLUSTER_ID_ANNOTATION: &str = "fluidos.eu/go-peer-cluster-id";
/// Label on a tenant namespace adopted for a Go consumer. The ResourceSlice
/// class policy of `fluidos-peering` does not apply there: a Go consumer asks
/// for Liqo's `default` class, as upstream.
pub const NAMESPACE_LABEL: &str = fluidos_api::reservation::GO_PEERING_NAMESPACE_LABEL;
/// Name of the Secret the gateway asks to create (dry run) in its own
/// namespace to learn that the API server enforces [`admission_policy`],
/// which refuses it: until then, no grant is handed out.
pub const PROBE_SECRET: &str = "fluidos-go-peer-policy-probe";
/// Prefix of Liqo tenant namespaces.
pub use crate::remote_namespace::TENANT_PREFIX;
fn managed_meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some([(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned())].into()),
        ..Default::default()
    }
}

/// The Go consumer's cluster-wide rights (its remote calls, `fluidos-node.md`
/// §4.3–4.4, rows that name no existing namespace): creations, confined by
/// [`admission_policy`], and the Connection list.
pub fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: managed_meta(CLUSTER_ROLE, None),
        rules: Some(vec![
            rule(&[""], &["namespaces", "secrets"], &["create"]),
            rule(
                &["networking.liqo.io"],
                &["configurations", "gatewayservers", "publickeies"],
                &["create"],
            ),
            rule(&["authentication.liqo.io"], &["tenants"], &["create"]),
            rule(&["networking.liqo.io"], &["connections"], &["list"]),
        ]),
        aggregation_rule: None,
    }
}

/// The Go consumer's reads in Liqo's namespace: the cluster-ID ConfigMap and
/// the IPAM Networks, both found by label (so `list`, and not by name).
pub fn liqo_role() -> Role {
    Role {
        metadata: managed_meta(LIQO_ROLE, Some(LIQO_NAMESPACE)),
        rules: Some(vec![
            rule(&[""], &["configmaps"], &["list"]),
            rule(&["ipam.liqo.io"], &["networks"], &["list"]),
        ]),
    }
}

/// Name of the admission policy (and its binding) for the node in `namespace`.
pub fn policy_name(namespace: &str) -> String {
    format!("fluidos-go-peer.{namespace}.fluidos.eu")
}

/// The policy that confines the writes of peers holding [`cluster_role`]
/// (those that may create namespaces) to their own tenant namespace, and
/// refuses ServiceAccount-token Secrets from every peer of this node. Its
/// parameters are the node's peer ServiceAccounts in `namespace`: each is
/// evaluated, and the one of the requester must name the namespace.
pub fn admission_policy(
    namespace: &str,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let name = policy_name(namespace);
    let peers = format!("system:serviceaccount:{namespace}:");
    let probe = probe_expression(namespace);
    let ops = || {
        ["CREATE", "UPDATE", "DELETE"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
    };
    let rules = |group: &str, resources: &[&str]| NamedRuleWithOperations {
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec!["*".to_owned()]),
        operations: Some(ops()),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: managed_meta(&name, None),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_owned()),
            param_kind: Some(ParamKind {
                api_version: Some("v1".to_owned()),
                kind: Some("ServiceAccount".to_owned()),
            }),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![
                    rules("", &["namespaces", "secrets"]),
                    rules(
                        "networking.liqo.io",
                        &[
                            "configurations",
                            "gatewayservers",
                            "gatewayclients",
                            "publickeies",
                        ],
                    ),
                    rules("authentication.liqo.io", &["tenants"]),
                ]),
                ..Default::default()
            }),
            match_conditions: Some(vec![MatchCondition {
                name: "node-peer-or-probe".to_owned(),
                expression: format!(
                    "request.userInfo.username.startsWith('{peers}{SERVICE_ACCOUNT_PREFIX}') \
                     || ({probe})"
                ),
            }]),
            variables: Some(vec![
                Variable {
                    name: "target".to_owned(),
                    expression: "request.resource.resource == 'namespaces' \
                                 ? (request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name) \
                                 : request.namespace"
                        .to_owned(),
                },
                Variable {
                    name: "mine".to_owned(),
                    expression: format!(
                        "request.userInfo.username == '{peers}' + params.metadata.name"
                    ),
                },
            ]),
            validations: Some(validations(&probe)),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: managed_meta(&name, None),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.clone()),
            param_ref: Some(ParamRef {
                namespace: Some(namespace.to_owned()),
                selector: Some(LabelSelector {
                    match_labels: Some(
                        [(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned())].into(),
                    ),
                    ..Default::default()
                }),
                parameter_not_found_action: Some("Deny".to_owned()),
                ..Default::default()
            }),
            validation_actions: Some(vec!["Deny".to_owned()]),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// CEL: the request is the gateway's enforcement probe ([`PROBE_SECRET`]).
fn probe_expression(namespace: &str) -> String {
    format!(
        "request.resource.resource == 'secrets' && request.namespace == '{namespace}' \
         && request.name == '{PROBE_SECRET}'"
    )
}

/// The policy's checks: the requester's own account (the parameter named
/// like it) names the one tenant namespace a peer that may create namespaces
/// writes in; no peer creates a ServiceAccount-token Secret, nor a
/// namespace with labels or annotations beyond Liqo's; the probe is
/// refused (which tells the gateway that the policy is enforced).
fn validations(probe: &str) -> Vec<Validation> {
    vec![
        Validation {
            expression: format!("!({probe})"),
            message: Some(format!(
                "{PROBE_SECRET}: the Go peers' admission policy is enforced"
            )),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
        Validation {
            expression: format!(
                "!variables.mine \
                 || !authorizer.group('').resource('namespaces').check('create').allowed() \
                 || (has(params.metadata.annotations) \
                     && '{CLUSTER_ID_ANNOTATION}' in params.metadata.annotations \
                     && variables.target == '{TENANT_PREFIX}' + params.metadata.annotations['{CLUSTER_ID_ANNOTATION}'])"
            ),
            message: Some(
                "a Go consumer's peering rights on this FLUIDOS provider reach only its own Liqo tenant namespace (liqo-tenant-<the Liqo cluster ID it bought with>)"
                    .to_owned(),
            ),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
        // Two buyers claiming one cluster ID (a race of two sales): neither
        // writes there.
        Validation {
            expression: format!(
                "variables.mine \
                 || !authorizer.group('').resource('namespaces').check('create').allowed() \
                 || !has(params.metadata.annotations) \
                 || !('{CLUSTER_ID_ANNOTATION}' in params.metadata.annotations) \
                 || variables.target != '{TENANT_PREFIX}' + params.metadata.annotations['{CLUSTER_ID_ANNOTATION}']"
            ),
            message: Some(
                "another buyer claims this Liqo tenant namespace on this FLUIDOS provider".to_owned(),
            ),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
        Validation {
            expression: "request.resource.resource != 'secrets' || request.operation == 'DELETE' \
                         || !has(object.type) || object.type != 'kubernetes.io/service-account-token'"
                .to_owned(),
            message: Some(
                "a peer may not create ServiceAccount-token Secrets on this FLUIDOS provider"
                    .to_owned(),
            ),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
        // Ownership marks (whose buyer, whose key a namespace is) are this
        // gateway's to set: one forged at creation would make this node,
        // buying later from the cluster it names, keep its Liqo Identity
        // where the peer reads Secrets. Keys only: labels or annotations a
        // cluster's own mutating admission adds stay allowed.
        Validation {
            expression: format!(
                "request.resource.resource != 'namespaces' || request.operation != 'CREATE' \
                 || (!object.metadata.?labels.orValue({{}}).exists(k, k.startsWith('fluidos.eu/') \
                        || k == 'app.kubernetes.io/managed-by' \
                        || (k.startsWith('liqo.io/') && !(k in [{liqo}]))) \
                     && !object.metadata.?annotations.orValue({{}}).exists(k, \
                        k.startsWith('fluidos.eu/') || k.startsWith('liqo.io/')))",
                liqo = quoted(&GO_CONSUMER_NAMESPACE_LABELS),
            ),
            message: Some(
                "a Go consumer creates its Liqo tenant namespace with Liqo's labels \
                 liqo.io/remote-cluster-id and liqo.io/tenant-namespace only, and no fluidos.eu/, \
                 liqo.io/ or app.kubernetes.io/managed-by marks: whose namespace it is, this \
                 FLUIDOS provider records"
                    .to_owned(),
            ),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
        // Liqo finds a cluster's tenant namespace by these two labels: one
        // naming another cluster would take (or break) that cluster's.
        Validation {
            expression: format!(
                "request.resource.resource != 'namespaces' || request.operation != 'CREATE' \
                 || !variables.mine \
                 || (object.metadata.?labels.orValue({{}})[?'{REMOTE}'].orValue('') \
                        == params.metadata.?annotations.orValue({{}})[?'{CLUSTER_ID_ANNOTATION}'].orValue('') \
                     && object.metadata.?labels.orValue({{}})[?'{TENANT}'].orValue('') == 'true')",
                REMOTE = GO_CONSUMER_NAMESPACE_LABELS[0],
                TENANT = GO_CONSUMER_NAMESPACE_LABELS[1],
            ),
            message: Some(
                "a Go consumer's Liqo tenant namespace is labelled liqo.io/remote-cluster-id with \
                 the Liqo cluster ID it bought with and liqo.io/tenant-namespace: \"true\""
                    .to_owned(),
            ),
            reason: Some("Forbidden".to_owned()),
            ..Default::default()
        },
    ]
}

fn quoted(items: &[&str]) -> String {
    items
        .iter()
        .map(|l| format!("'{l}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The labels an unmodified Go consumer puts on the tenant namespace it
/// creates (`fluidos-node.md` §4.3), by which Liqo finds it.
pub const GO_CONSUMER_NAMESPACE_LABELS: [&str; 2] =
    ["liqo.io/remote-cluster-id", "liqo.io/tenant-namespace"];

/// The Liqo cluster ID whose tenant namespace `namespace` is, if it is one.
pub fn cluster_of_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(TENANT_PREFIX)
        .filter(|id| !id.is_empty())
}

/// A peer ServiceAccount's claim: its name, UID, buyer and cluster ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The ServiceAccount's name.
    pub account: String,
    /// Its UID.
    pub uid: String,
    /// The buyer it was issued for.
    pub buyer: String,
    /// The Liqo cluster ID it may peer as.
    pub cluster_id: String,
    /// When it first claimed it (RFC 3339; empty when not recorded).
    pub claimed_at: String,
}

impl Claim {
    /// The claim a ServiceAccount carries, if any.
    pub fn of(sa: &k8s_openapi::api::core::v1::ServiceAccount) -> Option<Claim> {
        let annotations = sa.metadata.annotations.as_ref()?;
        Some(Claim {
            account: sa.metadata.name.clone()?,
            uid: sa.metadata.uid.clone().unwrap_or_default(),
            buyer: annotations.get(BUYER_ANNOTATION)?.clone(),
            cluster_id: annotations.get(CLUSTER_ID_ANNOTATION)?.clone(),
            claimed_at: annotations
                .get(CLAIMED_AT_ANNOTATION)
                .cloned()
                .unwrap_or_default(),
        })
    }

    /// Whether `namespace` was made since the claim (to the second, as the
    /// API server records creation, and allowing [`CLOCK_SKEW`] between the
    /// gateway's clock, which dates the claim, and the API server's); never
    /// when either time is unknown.
    pub fn made_after_claim(&self, namespace: &k8s_openapi::api::core::v1::Namespace) -> bool {
        let Ok(claimed) = self.claimed_at.parse::<jiff::Timestamp>() else {
            return false;
        };
        namespace
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|created| created.0.as_second() >= claimed.as_second() - CLOCK_SKEW)
    }
}

/// The one claim on `cluster_id` among `claims` (live accounts only);
/// `None` when there is none, or more than one (two buyers raced for one
/// cluster ID: neither is given the namespace).
pub fn sole_claimant<'a>(
    claims: impl IntoIterator<Item = &'a Claim>,
    cluster_id: &str,
) -> Option<&'a Claim> {
    let mut found = claims.into_iter().filter(|c| c.cluster_id == cluster_id);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// Whether `namespace` may be adopted for a Go consumer's claim (pure):
/// not being deleted, and managed by no one (no `app.kubernetes.io/managed-by`
/// label). The tenant namespaces this node's own peering makes for the
/// providers it buys from carry `fluidos-peering` there, and hold this
/// node's Liqo credentials: a Go consumer's rights list Secrets.
pub fn may_adopt(namespace: &k8s_openapi::api::core::v1::Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace
            .metadata
            .labels
            .as_ref()
            .is_none_or(|l| !l.contains_key(MANAGED_LABEL.0))
        && namespace
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(REFUSED_ANNOTATION))
}

/// Annotation the gateway leaves on a tenant namespace it gave back
/// because this node's own peering is there: it is never adopted again
/// (delete the annotation once that peering is gone, to let a Go
/// consumer peer there).
pub const REFUSED_ANNOTATION: &str = "fluidos.eu/go-adoption-refused";

/// The server-side apply that gives back a tenant namespace: this
/// gateway's labels and buyer annotations go (they were this manager's),
/// [`REFUSED_ANNOTATION`] stays.
pub fn refusal_patch(namespace: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "annotations": {
                REFUSED_ANNOTATION: "this node's own Liqo peering with that cluster is in this namespace",
            },
        },
    })
}

/// The server-side apply body that adopts a Go consumer's tenant namespace
/// for `buyer`: this gateway's label, buyer and owner annotations (so that
/// it counts as that buyer's, as the namespaces the gateway makes do, and
/// as bought over plain HTTP: never a TLS seller's) and [`NAMESPACE_LABEL`].
/// The labels the Go consumer set stay its own.
pub fn adoption_patch(namespace: &str, buyer: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                MANAGED_LABEL.0: MANAGED_LABEL.1,
                NAMESPACE_LABEL: "true",
            },
            "annotations": {
                BUYER_ANNOTATION: buyer,
                OWNER_ANNOTATION: PLAIN_HTTP_OWNER,
            },
        },
    })
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    #[test]
    fn the_grant_creates_and_lists_but_never_reads_or_changes() {
        let verbs: Vec<String> = cluster_role()
            .rules
            .unwrap()
            .into_iter()
            .flat_map(|r| r.verbs)
            .collect();
        assert!(
            verbs.iter().all(|v| v == "create" || v == "list"),
            "{verbs:?}"
        );
        // The only cluster-wide list is of Connections (no secrets in them).
        let lists: Vec<Vec<String>> = cluster_role()
            .rules
            .unwrap()
            .into_iter()
            .filter(|r| r.verbs.contains(&"list".to_owned()))
            .map(|r| r.resources.unwrap())
            .collect();
        assert_eq!(lists, vec![vec!["connections".to_owned()]]);
        let role = liqo_role();
        assert_eq!(role.metadata.namespace.as_deref(), Some(LIQO_NAMESPACE));
        assert!(role.rules.unwrap().iter().all(|r| {
            r.verbs == ["list"]
                && !r
                    .resources
                    .as_ref()
                    .unwrap()
                    .contains(&"secrets".to_owned())
        }));
    }

    #[test]
    fn the_policy_takes_the_namespace_from_the_requesters_account() {
        let (policy, binding) = admission_policy("fluidos");
        let spec = policy.spec.unwrap();
        let condition = &spec.match_conditions.unwrap()[0].expression;
        assert!(
            condition.contains("'system:serviceaccount:fluidos:fluidos-peer-'"),
            "{condition}"
        );
        let confine = &spec.validations.as_ref().unwrap()[1].expression;
        assert!(confine.contains(CLUSTER_ID_ANNOTATION), "{confine}");
        assert!(confine.contains("'liqo-tenant-' + params"), "{confine}");
        let binding = binding.spec.unwrap();
        assert_eq!(binding.policy_name, Some(policy_name("fluidos")));
        let param = binding.param_ref.unwrap();
        assert_eq!(param.parameter_not_found_action.as_deref(), Some("Deny"));
        assert_eq!(param.namespace.as_deref(), Some("fluidos"));
    }

    #[test]
    fn one_claimant_per_cluster_id() {
        let claim = |account: &str, cluster: &str| Claim {
            account: account.into(),
            uid: "u".into(),
            buyer: account.into(),
            cluster_id: cluster.into(),
            claimed_at: "2026-12-02T04:00:00Z".into(),
        };
        let claims = [claim("a", "c1"), claim("b", "c2"), claim("c", "c2")];
        assert_eq!(sole_claimant(&claims, "c1").unwrap().account, "a");
        assert_eq!(sole_claimant(&claims, "c2"), None, "two buyers raced");
        assert_eq!(sole_claimant(&claims, "c3"), None);
        assert_eq!(cluster_of_namespace("liqo-tenant-c1"), Some("c1"));
        assert_eq!(cluster_of_namespace("liqo-tenant-"), None);
        assert_eq!(cluster_of_namespace("default"), None);
    }

    #[test]
    fn only_namespaces_made_since_the_claim_are_the_buyers() {
        let claim = Claim {
            account: "fluidos-peer-a".into(),
            uid: "u".into(),
            buyer: "a".into(),
            cluster_id: "c1".into(),
            claimed_at: "2026-12-02T04:00:00.5Z".into(),
        };
        let made = |at: &str| {
            let mut ns = k8s_openapi::api::core::v1::Namespace::default();
            ns.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.parse().unwrap()),
            );
            ns
        };
        assert!(
            claim.made_after_claim(&made("2026-12-02T04:00:00Z")),
            "same second"
        );
        assert!(claim.made_after_claim(&made("2026-12-02T04:01:00Z")));
        assert!(
            claim.made_after_claim(&made("2026-12-02T03:59:56Z")),
            "clock skew"
        );
        assert!(!claim.made_after_claim(&made("2026-12-02T03:59:54Z")));
        let unknown = Claim {
            claimed_at: String::new(),
            ..claim
        };
        assert!(!unknown.made_after_claim(&made("2026-12-02T04:01:00Z")));
    }

    #[test]
    fn a_namespace_managed_by_anyone_is_never_adopted() {
        let ns = |labels: &[(&str, &str)]| k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some("liqo-tenant-x".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let liqo = [
            ("liqo.io/remote-cluster-id", "x"),
            ("liqo.io/tenant-namespace", "true"),
        ];
        assert!(may_adopt(&ns(&liqo)), "a Go consumer's, as it makes it");
        // This node's own peering's (fluidos-peering `tenant_namespace_object`).
        let mut ours = liqo.to_vec();
        ours.push(("app.kubernetes.io/managed-by", "fluidos-peering"));
        assert!(!may_adopt(&ns(&ours)));
        let mut gateways = liqo.to_vec();
        gateways.push(MANAGED_LABEL);
        assert!(!may_adopt(&ns(&gateways)));
        let mut refused = ns(&liqo);
        refused.metadata.annotations =
            Some([(REFUSED_ANNOTATION.to_owned(), "x".to_owned())].into());
        assert!(!may_adopt(&refused), "given back once: never again");
        let mut going = ns(&liqo);
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
        assert!(!may_adopt(&going));
    }

    #[test]
    fn adoption_keeps_the_go_consumers_labels_out_of_the_patch() {
        let patch = adoption_patch("liqo-tenant-c1", "buyer-1");
        let labels = patch["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels[NAMESPACE_LABEL], "true");
        assert_eq!(
            patch["metadata"]["annotations"][BUYER_ANNOTATION],
            "buyer-1"
        );
        // Set, never kept from the Go consumer: bought over plain HTTP.
        assert_eq!(
            patch["metadata"]["annotations"][OWNER_ANNOTATION],
            PLAIN_HTTP_OWNER
        );
    }

    /// Every grant of an unmodified Go consumer the gateway's integration
    /// tests check with a SubjectAccessReview (`tests/go_peering_grant.rs`),
    /// against all the rules bound where the request is made: its
    /// ClusterRole everywhere, plus Liqo's peering user in the tenant
    /// namespace it made (once adopted) and [`liqo_role`] in Liqo's.
    #[test]
    fn what_the_go_grant_permits_and_refuses() {
        use crate::grant::{liqo_peering_user_rules, permits};
        use k8s_openapi::api::rbac::v1::PolicyRule;
        let cluster = cluster_role().rules.unwrap();
        let tenant = [liqo_peering_user_rules(), cluster.clone()].concat();
        let liqo = [liqo_role().rules.unwrap(), cluster.clone()].concat();
        let permitted: &[(&[PolicyRule], &str, &str, &str)] = &[
            (&tenant, "list", "", "secrets"),
            (&tenant, "get", "networking.liqo.io", "gatewayservers"),
            (&liqo, "list", "", "configmaps"),
            (&liqo, "list", "ipam.liqo.io", "networks"),
            (&cluster, "create", "", "namespaces"),
            (&cluster, "create", "", "secrets"),
            (&cluster, "create", "authentication.liqo.io", "tenants"),
            (&cluster, "list", "networking.liqo.io", "connections"),
        ];
        for (rules, verb, group, resource) in permitted {
            assert!(
                permits(rules, verb, group, resource, ""),
                "{verb} {group}/{resource} must be granted"
            );
        }
        let refused: &[(&[PolicyRule], &str, &str, &str)] = &[
            // It reads nothing cluster-wide, changes nothing it did not
            // make, and reads no Secrets in Liqo's namespace.
            (&liqo, "list", "", "secrets"),
            (&liqo, "get", "", "secrets"),
            (&cluster, "update", "", "namespaces"),
            (&cluster, "delete", "", "namespaces"),
            (&cluster, "list", "authentication.liqo.io", "tenants"),
            (&cluster, "get", "", "secrets"),
            (
                &cluster,
                "create",
                "rbac.authorization.k8s.io",
                "rolebindings",
            ),
            (&tenant, "patch", "", "secrets"),
            (
                &tenant,
                "create",
                "rbac.authorization.k8s.io",
                "rolebindings",
            ),
        ];
        for (rules, verb, group, resource) in refused {
            assert!(
                !permits(rules, verb, group, resource, ""),
                "{verb} {group}/{resource} must be refused"
            );
        }
    }
}

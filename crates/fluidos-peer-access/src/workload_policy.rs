//! The admission policies that confine what peers run here (pure).
//!
//! Eight ValidatingAdmissionPolicies, each with a binding of the same name:
//!
//! | policy | matches | refuses |
//! |---|---|---|
//! | [`SHADOWPODS`] | ShadowPods (create, update) in peer namespaces | what a pod of the level may not do, naming the field under `spec.pod` |
//! | [`PODS`] | Pods (create, ephemeral containers) in peer namespaces | the same under `spec`, and any pod before the namespace enforces the level |
//! | [`SERVICES`] | Services (create, update) in peer namespaces | `spec.externalIPs`, `spec.loadBalancerIP`, a `spec.type` not allowed ([`crate::peer_exposure`]), a LoadBalancer's address annotations |
//! | [`VOLUME_CLAIMS`] | PersistentVolumeClaims (create, update) in peer namespaces | `spec.volumeName` (but from the volume controller), `spec.selector`, `storageClassName: ""` |
//! | [`NAMESPACES`] | Namespaces made by a NamespaceMap (create) | names Liqo does not derive for that tenant |
//! | [`PEER_SECRETS`] | Secrets (create, update) by the accounts this node issues to peers | ones Liqo would sign with this cluster's key (`liqo.io/signed-nonce`), ServiceAccount tokens |
//! | [`INGRESSES`] | Ingresses (create, update) in peer namespaces | all, unless allowed; then annotations but Liqo's, a `spec.defaultBackend`, a rule without a host or with a wildcard one |
//! | [`ENDPOINT_SLICES`] | ShadowEndpointSlices (create, update) in peer namespaces | `FQDN` endpoints, addresses that are not global unicast (loopback, link-local such as 169.254.169.254), endpoints naming a node |
//!
//! The ShadowPod policy answers the peer itself: its virtual kubelet (or a
//! hostile peer with the same credentials) is told which field it may not
//! set. The Pod policy is the floor under it: Liqo's shadowpod controller
//! copies `spec.pod` verbatim, and the Pod Security label of the namespace
//! ([`crate::remote_namespace`]) may not be there yet when the first Pod
//! comes, so a Pod waits (Liqo retries) until it is. Peer namespaces are
//! the ones Liqo labels with the peer's cluster ID, minus tenant
//! namespaces (Liqo's own objects, and its networking pods).
//!
//! The Service and Ingress policies close the other ways a peer's objects
//! reach beyond its namespace: a Service with `externalIPs` makes every
//! node here route traffic for those addresses to the peer's pods
//! (CVE-2020-8554), and one with `loadBalancerIP` takes an address this
//! cluster's admin may have set aside (Liqo's reflection sets neither). A
//! `NodePort`, `LoadBalancer` or `ExternalName` Service, and any Ingress,
//! are refused unless the operator allows that kind of exposure
//! ([`crate::peer_exposure`]); an allowed LoadBalancer carries none of the
//! annotations by which load balancers let a Service choose or share an
//! address; an allowed Ingress carries no annotations but Liqo's (ingress
//! controllers are configured by them), names its hosts, none a wildcard,
//! and is not the default backend. Its hosts, class and TLS Secrets are
//! not confined further: allow `ingress` for peers you trust.
//!
//! The endpoint policy refuses what Liqo's reflection never sends in a
//! ShadowEndpointSlice (which Liqo turns into an EndpointSlice here): FQDN
//! endpoints, addresses that are not global unicast (the API server
//! refuses loopback and link-local ones in the EndpointSlice too, later and
//! less clearly), and endpoints naming a node other than the peer's
//! cluster. It does not keep a peer's Services pointing at its own pods:
//! an address of this cluster's nodes, pods or Services passes, which with
//! an exposure allowed is the case of CVE-2021-25740 (outside traffic
//! forwarded past other tenants' NetworkPolicies). Confining addresses to
//! the CIDRs Liqo's networking remapped for that peer is not done.
//!
//! Every policy evaluates creations and the updates that change `spec` or
//! the annotations; objects made before the guard are not re-examined.
//!
//! The claim policy keeps a peer's storage to what is provisioned for it:
//! a claim that names a volume (`volumeName`) or selects volumes by label
//! (`selector`) would bind a PersistentVolume this cluster's admin made for
//! someone else, with its data; Liqo's storage reflection sets neither.
//! Nor may it ask for the empty class (only pre-made volumes have it), or
//! set `volumeName` later: only the volume controller does, when it binds.
//!
//! The namespace policy confines the names: a peer's NamespaceMap may ask
//! Liqo here for any name (`EnforceSameName`, `SelectedName`), so it could
//! take a name another tenant, or this cluster's admin, will need. Only
//! `<its namespace>-<its cluster ID>` (Liqo's `DefaultName`, checked
//! against the namespace's `liqo.io/original-name`) is allowed, and, on a
//! node that buys Services delivered by Liqo, the `contract-<...>` names
//! its sellers' service namespaces have (upstream offloads them with
//! `EnforceSameName`). The peer chooses `<its namespace>` too, so its
//! cluster ID must be distinctive
//! ([`crate::remote_namespace::distinctive_cluster_id`]): a peer named
//! `system` would otherwise get `longhorn-system` before Longhorn does.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;

use crate::peer_exposure::{self, PeerExposure};
use crate::pod_security::{ENFORCE_LABEL, PodSecurityLevel};
use crate::remote_namespace::{
    MANAGED_BY_ANNOTATION, ORIGINAL_NAME_ANNOTATION, REMOTE_CLUSTER_ID_LABEL,
    TENANT_NAMESPACE_LABEL, TENANT_PREFIX,
};

/// The ShadowPod policy's name (and its binding's).
pub const SHADOWPODS: &str = "fluidos-peer-shadowpods";
/// The Pod policy's name (and its binding's).
pub const PODS: &str = "fluidos-peer-pods";
/// The Service policy's name (and its binding's).
pub const SERVICES: &str = "fluidos-peer-services";
/// The PersistentVolumeClaim policy's name (and its binding's).
pub const VOLUME_CLAIMS: &str = "fluidos-peer-volume-claims";
/// The namespace-name policy's name (and its binding's).
pub const NAMESPACES: &str = "fluidos-peer-namespaces";
/// The peer accounts' Secret policy's name (and its binding's).
pub const PEER_SECRETS: &str = "fluidos-peer-secrets";
/// The Ingress policy's name (and its binding's).
pub const INGRESSES: &str = "fluidos-peer-ingresses";
/// The ShadowEndpointSlice policy's name (and its binding's).
pub const ENDPOINT_SLICES: &str = "fluidos-peer-endpoint-slices";
/// Every policy this crate keeps, in the order they are applied.
pub const NAMES: [&str; 8] = [
    SHADOWPODS,
    PODS,
    SERVICES,
    VOLUME_CLAIMS,
    NAMESPACES,
    PEER_SECRETS,
    INGRESSES,
    ENDPOINT_SLICES,
];
/// Label Liqo's nonce signer looks for: it signs the `nonce` of every such
/// Secret in a tenant namespace with this cluster's Liqo private key.
pub const SIGNED_NONCE_LABEL: &str = "liqo.io/signed-nonce";
/// Label on the policies and bindings, by which the guard watches them.
pub const POLICY_LABEL: (&str, &str) = ("fluidos.eu/peer-guard", "true");
/// Prefix of the service namespaces a seller offloads with `EnforceSameName`.
pub const SERVICE_NAMESPACE_PREFIX: &str = "contract-";

/// What the policies are made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInputs {
    /// The Pod Security level of peers' pods.
    pub level: PodSecurityLevel,
    /// Allow the `contract-*` names of sellers' service namespaces (this
    /// node buys Services delivered by Liqo).
    pub service_namespaces: bool,
    /// The user name prefix of the accounts this node issues to peers
    /// (`system:serviceaccount:<namespace>:fluidos-peer-`).
    pub peer_accounts: String,
    /// The ways a peer's workloads may be reached from outside this
    /// cluster (none by default).
    pub exposure: BTreeSet<PeerExposure>,
}

/// One policy and its binding.
#[derive(Clone, Debug, PartialEq)]
pub struct Guarded {
    /// The policy.
    pub policy: ValidatingAdmissionPolicy,
    /// Its binding (same name).
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// The policies ([`NAMES`]) with their bindings, for `inputs` (pure).
pub fn plan(inputs: PolicyInputs) -> Vec<Guarded> {
    vec![
        guarded(Parts {
            name: SHADOWPODS,
            rules: vec![rule(
                "offloading.liqo.io",
                "shadowpods",
                &["CREATE", "UPDATE"],
            )],
            variables: pod_variables("object.spec.pod"),
            // An update that leaves the pod spec as it was (labels, the
            // finalizer removed at deletion) is let through, so a ShadowPod
            // made before the guard can still go.
            only_if: Some(
                "request.operation == 'CREATE' || !has(oldObject.spec) \
                 || oldObject.spec.?pod != object.spec.?pod"
                    .to_owned(),
            ),
            validations: workload_validations("spec.pod", inputs.level, false),
            namespaces: Some(peer_namespaces()),
        }),
        guarded(Parts {
            name: PODS,
            rules: vec![
                rule("", "pods", &["CREATE"]),
                rule("", "pods/ephemeralcontainers", &["UPDATE"]),
            ],
            variables: pod_variables("object.spec"),
            only_if: None,
            validations: workload_validations("spec", inputs.level, true),
            namespaces: Some(peer_namespaces()),
        }),
        guarded(Parts {
            name: SERVICES,
            rules: vec![rule("", "services", &["CREATE", "UPDATE"])],
            variables: Vec::new(),
            only_if: Some(SPEC_CHANGED.to_owned()),
            validations: service_validations(&inputs.exposure),
            namespaces: Some(peer_namespaces()),
        }),
        guarded(Parts {
            name: VOLUME_CLAIMS,
            rules: vec![rule("", "persistentvolumeclaims", &["CREATE", "UPDATE"])],
            variables: Vec::new(),
            only_if: None,
            validations: volume_claim_validations(),
            namespaces: Some(peer_namespaces()),
        }),
        guarded(Parts {
            name: NAMESPACES,
            // Creation only: Liqo never renames, and a namespace made before
            // the guard must still be updatable (finalizers at deletion).
            rules: vec![rule("", "namespaces", &["CREATE"])],
            variables: namespace_variables(),
            // Every other namespace is none of this policy's business, and
            // is not evaluated at all.
            only_if: Some(format!(
                "has(object.metadata.annotations) && '{MANAGED_BY_ANNOTATION}' in object.metadata.annotations"
            )),
            validations: namespace_validations(inputs.service_namespaces),
            namespaces: None,
        }),
        guarded(Parts {
            name: PEER_SECRETS,
            rules: vec![rule("", "secrets", &["CREATE", "UPDATE"])],
            variables: Vec::new(),
            // The accounts this node issues to peers, whatever namespace
            // they write in; every other requester is not evaluated.
            only_if: Some(format!(
                "request.userInfo.username.startsWith('{}')",
                inputs.peer_accounts
            )),
            validations: peer_secret_validations(),
            namespaces: None,
        }),
        guarded(Parts {
            name: INGRESSES,
            rules: vec![rule(
                "networking.k8s.io",
                "ingresses",
                &["CREATE", "UPDATE"],
            )],
            variables: Vec::new(),
            only_if: Some(SPEC_CHANGED.to_owned()),
            validations: ingress_validations(inputs.exposure.contains(&PeerExposure::Ingress)),
            namespaces: Some(peer_namespaces()),
        }),
        guarded(Parts {
            name: ENDPOINT_SLICES,
            rules: vec![rule(
                "offloading.liqo.io",
                "shadowendpointslices",
                &["CREATE", "UPDATE"],
            )],
            variables: Vec::new(),
            only_if: Some(SPEC_CHANGED.to_owned()),
            validations: endpoint_slice_validations(),
            namespaces: Some(peer_namespaces()),
        }),
    ]
}

/// A match condition: a creation, or an update that changes `spec` or the
/// annotations (load balancers and ingress controllers read theirs). An
/// update that leaves both as they were (labels, a finalizer removed at
/// deletion, such as the service controller's on a load balancer) is let
/// through, so an object made before the guard can still go.
const SPEC_CHANGED: &str = "request.operation == 'CREATE' || !has(oldObject.spec) \
     || oldObject.spec != object.spec \
     || oldObject.metadata.?annotations.orValue({}) != object.metadata.?annotations.orValue({})";

/// Annotation prefixes by which load balancer implementations let a
/// Service choose or share an address (MetalLB, Cilium's LB IPAM,
/// kube-vip, the clouds' `service.beta.kubernetes.io/...`): Liqo copies a
/// peer's annotations as they are.
const LOAD_BALANCER_ANNOTATION_PREFIXES: [&str; 6] = [
    "metallb.io/",
    "metallb.universe.tf/",
    "lbipam.cilium.io/",
    "io.cilium/",
    "kube-vip.io/",
    "service.beta.kubernetes.io/",
];

/// The only annotations a peer's Ingress may carry: Liqo's own and
/// kubectl's. Ingress controllers take their configuration from
/// annotations (ingress-nginx's snippets, external auth URLs: the way of
/// CVE-2021-25742 and CVE-2025-1974), which Liqo copies as they are.
const INGRESS_ANNOTATION_PREFIXES: [&str; 2] = [
    "liqo.io/",
    "kubectl.kubernetes.io/last-applied-configuration",
];

fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checks on a peer's Service: no addresses of its choosing, and only
/// the types `exposure` allows besides `ClusterIP`.
fn service_validations(exposure: &BTreeSet<PeerExposure>) -> Vec<Validation> {
    let types = peer_exposure::service_types(exposure);
    let listed = types
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let not_allowed = PeerExposure::ALL
        .into_iter()
        .filter(|e| e.service_type().is_some() && !exposure.contains(e))
        .map(PeerExposure::as_str)
        .collect::<Vec<_>>();
    let opt_in = if not_allowed.is_empty() {
        String::new()
    } else {
        format!(
            "; this node's --peer-exposure may allow {}",
            not_allowed.join(", ")
        )
    };
    vec![
        deny(
            "size(object.spec.?externalIPs.orValue([])) == 0".to_owned(),
            "spec.externalIPs: a peer's Service may not claim external IPs \
             (every node here would send it the traffic for them), FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            "object.spec.?loadBalancerIP.orValue('') == ''".to_owned(),
            "spec.loadBalancerIP: a peer's Service may not choose its load balancer's address \
             (it could take one this cluster's admin set aside), FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            format!("object.spec.?type.orValue('ClusterIP') in [{listed}]"),
            format!(
                "spec.type: a peer's Service here may be {} only (a NodePort opens its port on \
                 every node here, a LoadBalancer asks this cluster for an address, an ExternalName \
                 puts the peer's name into this cluster's DNS){opt_in}, FLUIDOS peer guard",
                types.join(" or ")
            ),
        ),
        deny(
            format!(
                "object.spec.?type.orValue('ClusterIP') != 'LoadBalancer' \
                 || !object.metadata.?annotations.orValue({{}}).exists(k, [{}].exists(p, k.startsWith(p)))",
                quoted_list(&LOAD_BALANCER_ANNOTATION_PREFIXES)
            ),
            format!(
                "metadata.annotations: a peer's LoadBalancer Service may not carry a load balancer's \
                 annotations ({}), by which it could choose or share an address this cluster's admin \
                 set aside, FLUIDOS peer guard",
                LOAD_BALANCER_ANNOTATION_PREFIXES.join(", ")
            ),
        ),
    ]
}

/// The checks on a peer's Ingress: none at all unless `allowed`; then it
/// names its hosts and is never the controller's default backend.
fn ingress_validations(allowed: bool) -> Vec<Validation> {
    if !allowed {
        return vec![deny(
            "false".to_owned(),
            "a peer may not make Ingresses here: they claim host names and paths on this \
             cluster's ingress controllers; this node's --peer-exposure may allow ingress, \
             FLUIDOS peer guard"
                .to_owned(),
        )];
    }
    vec![
        deny(
            format!(
                "object.metadata.?annotations.orValue({{}}).all(k, [{}].exists(p, k.startsWith(p)))",
                quoted_list(&INGRESS_ANNOTATION_PREFIXES)
            ),
            format!(
                "metadata.annotations: a peer's Ingress carries no annotations but {} (an ingress \
                 controller takes its configuration from them), FLUIDOS peer guard",
                INGRESS_ANNOTATION_PREFIXES.join(" and ")
            ),
        ),
        deny(
            "!has(object.spec.defaultBackend)".to_owned(),
            "spec.defaultBackend: a peer's Ingress may not take the traffic no other rule \
             matches, FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            "object.spec.?rules.orValue([]).all(r, !r.?host.orValue('*').startsWith('*'))".to_owned(),
            "spec.rules[*].host: a peer's Ingress names the host of each rule, not a wildcard \
             (a rule without one, or with *.<domain>, matches names others serve here), FLUIDOS peer guard"
                .to_owned(),
        ),
    ]
}

/// The checks on a peer's ShadowEndpointSlice: IP endpoints at global
/// unicast addresses only, as Liqo's reflection makes them.
fn endpoint_slice_validations() -> Vec<Validation> {
    let peer = format!("namespaceObject.metadata.labels['{REMOTE_CLUSTER_ID_LABEL}']");
    vec![
        deny(
            "object.spec.?template.?addressType.orValue('') != 'FQDN'".to_owned(),
            "spec.template.addressType: a peer's endpoints are IP addresses (Liqo reflects no \
             FQDN endpoints), FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            "object.spec.?template.?endpoints.orValue([]).all(e, \
             e.?addresses.orValue([]).all(a, isIP(a) && ip(a).isGlobalUnicast()))"
                .to_owned(),
            "spec.template.endpoints[*].addresses: a peer's endpoints are unicast addresses of \
             its pods, never loopback, link-local (a cloud's metadata service at 169.254.169.254), \
             multicast or unspecified ones, which only this cluster's nodes reach, FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            format!(
                "object.spec.?template.?endpoints.orValue([]).all(e, e.?nodeName.orValue({peer}) == {peer})"
            ),
            format!(
                "spec.template.endpoints[*].nodeName: a peer's endpoint names no node here but its \
                 cluster (Liqo's reflection sets the peer's cluster ID, {REMOTE_CLUSTER_ID_LABEL}), FLUIDOS peer guard"
            ),
        ),
    ]
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(
            [
                (POLICY_LABEL.0, POLICY_LABEL.1),
                ("app.kubernetes.io/managed-by", "fluidos-node"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        ..Default::default()
    }
}

fn rule(group: &str, resource: &str, operations: &[&str]) -> NamedRuleWithOperations {
    NamedRuleWithOperations {
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec!["*".to_owned()]),
        operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
        resources: Some(vec![resource.to_owned()]),
        ..Default::default()
    }
}

/// Namespaces Liqo made for a remote cluster, not its tenant namespaces.
fn peer_namespaces() -> LabelSelector {
    let req = |key: &str, operator: &str| LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: None,
    };
    LabelSelector {
        match_expressions: Some(vec![
            req(REMOTE_CLUSTER_ID_LABEL, "Exists"),
            req(TENANT_NAMESPACE_LABEL, "DoesNotExist"),
        ]),
        ..Default::default()
    }
}

/// What one policy is made of.
struct Parts {
    name: &'static str,
    rules: Vec<NamedRuleWithOperations>,
    variables: Vec<Variable>,
    /// A match condition: requests it is false for are not evaluated.
    only_if: Option<String>,
    validations: Vec<Validation>,
    /// The namespaces the binding selects (`None`: cluster-scoped objects).
    namespaces: Option<LabelSelector>,
}

fn variable(name: &str, expression: String) -> Variable {
    Variable {
        name: name.to_owned(),
        expression,
    }
}

/// `spec` (the pod spec at `subject`) and `containers` (all of its
/// containers); `?.`/`orValue` because every field may be absent.
fn pod_variables(subject: &str) -> Vec<Variable> {
    vec![
        variable("spec", subject.to_owned()),
        variable(
            "containers",
            format!(
                "{subject}.?containers.orValue([]) + {subject}.?initContainers.orValue([]) \
                 + {subject}.?ephemeralContainers.orValue([])"
            ),
        ),
    ]
}

/// `peer`: the peer named by the tenant namespace of the NamespaceMap that
/// made the namespace (`liqo-tenant-<peer>/<name>`), "" for any other;
/// `original`: the peer's namespace it was made for, "" when not said.
fn namespace_variables() -> Vec<Variable> {
    let n = TENANT_PREFIX.len();
    vec![
        variable(
            "tenant",
            format!("object.metadata.annotations['{MANAGED_BY_ANNOTATION}'].split('/')[0]"),
        ),
        variable(
            "peer",
            format!(
                "variables.tenant.startsWith('{TENANT_PREFIX}') ? variables.tenant.substring({n}) : ''"
            ),
        ),
        variable(
            "original",
            format!("object.metadata.annotations[?'{ORIGINAL_NAME_ANNOTATION}'].orValue('')"),
        ),
    ]
}

fn guarded(parts: Parts) -> Guarded {
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(parts.name),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_owned()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(parts.rules),
                ..Default::default()
            }),
            match_conditions: parts.only_if.map(|expression| {
                vec![MatchCondition {
                    name: "in-scope".to_owned(),
                    expression,
                }]
            }),
            variables: Some(parts.variables),
            validations: Some(parts.validations),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(parts.name),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(parts.name.to_owned()),
            validation_actions: Some(vec!["Deny".to_owned()]),
            match_resources: parts.namespaces.map(|selector| MatchResources {
                namespace_selector: Some(selector),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    Guarded { policy, binding }
}

fn deny(expression: String, message: String) -> Validation {
    Validation {
        expression,
        message: Some(message),
        reason: Some("Forbidden".to_owned()),
        ..Default::default()
    }
}

/// The checks on a pod spec at `path` (`spec.pod` or `spec`): each names
/// the field it refuses. `pods`: also refuse any pod until the namespace
/// enforces `level`.
fn workload_validations(path: &str, level: PodSecurityLevel, pods: bool) -> Vec<Validation> {
    let why = "a peer's workload here runs under the Pod Security level";
    let mut out = Vec::new();
    if let Some(addable) = level.addable_capabilities() {
        let any = |field: &str| {
            format!("!variables.containers.exists(c, c.?securityContext.?{field}.orValue(false))")
        };
        let host = |field: &str| format!("!variables.spec.?{field}.orValue(false)");
        let allowed = addable
            .iter()
            .map(|c| format!("'{c}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let checks: Vec<(String, String)> = vec![
            (
                any("privileged"),
                format!("{path}.containers[*].securityContext.privileged: privileged containers are not allowed"),
            ),
            (
                any("allowPrivilegeEscalation"),
                format!("{path}.containers[*].securityContext.allowPrivilegeEscalation: privilege escalation is not allowed"),
            ),
            (host("hostNetwork"), format!("{path}.hostNetwork: the host's network namespace is not allowed")),
            (host("hostPID"), format!("{path}.hostPID: the host's PID namespace is not allowed")),
            (host("hostIPC"), format!("{path}.hostIPC: the host's IPC namespace is not allowed")),
            (
                "!variables.spec.?volumes.orValue([]).exists(v, has(v.hostPath))".to_owned(),
                format!("{path}.volumes[*].hostPath: host paths are not allowed"),
            ),
            (
                "!variables.containers.exists(c, c.?ports.orValue([]).exists(p, p.?hostPort.orValue(0) != 0))"
                    .to_owned(),
                format!("{path}.containers[*].ports[*].hostPort: host ports are not allowed"),
            ),
            (
                "variables.spec.?nodeName.orValue('') == ''".to_owned(),
                format!("{path}.nodeName: a peer may not choose the node its workload runs on"),
            ),
            (
                format!(
                    "!variables.containers.exists(c, c.?securityContext.?capabilities.?add.orValue([]).exists(cap, !(cap in [{allowed}])))"
                ),
                format!(
                    "{path}.containers[*].securityContext.capabilities.add: only {allowed} may be added at level {level}"
                ),
            ),
            (
                "!variables.containers.exists(c, c.?securityContext.?procMount.orValue('Default') != 'Default')"
                    .to_owned(),
                format!("{path}.containers[*].securityContext.procMount: only the Default proc mount is allowed"),
            ),
            (
                "variables.spec.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined' \
                 && !variables.containers.exists(c, c.?securityContext.?seccompProfile.?type.orValue('') == 'Unconfined')"
                    .to_owned(),
                format!("{path}.securityContext.seccompProfile.type: Unconfined is not allowed (pod or container)"),
            ),
            priority_check(path, pods),
            (
                "!variables.spec.?securityContext.?windowsOptions.?hostProcess.orValue(false) \
                 && !variables.containers.exists(c, c.?securityContext.?windowsOptions.?hostProcess.orValue(false))"
                    .to_owned(),
                format!("{path}.securityContext.windowsOptions.hostProcess: host processes are not allowed"),
            ),
        ];
        out.extend(
            checks
                .into_iter()
                .map(|(e, m)| deny(e, format!("{m} ({why} {level}, FLUIDOS peer guard)"))),
        );
    }
    if pods {
        out.push(deny(
            format!(
                "has(namespaceObject.metadata.labels) && '{ENFORCE_LABEL}' in namespaceObject.metadata.labels \
                 && namespaceObject.metadata.labels['{ENFORCE_LABEL}'] == '{level}'"
            ),
            format!(
                "the namespace does not enforce Pod Security level {level} yet ({ENFORCE_LABEL}): \
                 the FLUIDOS node labels each namespace Liqo makes for a peer before its pods may run"
            ),
        ));
    }
    out
}

/// The priority a peer's workload may have: a peer may not choose one at
/// all in a ShadowPod (Liqo's virtual kubelet never forwards it), so it
/// cannot preempt this cluster's pods; the Pods made from them may have
/// only what admission gives (the cluster's default class), never a
/// `system-*` class, which outranks and survives eviction of everything
/// else here.
fn priority_check(path: &str, pods: bool) -> (String, String) {
    if pods {
        (
            "!variables.spec.?priorityClassName.orValue('').startsWith('system-')".to_owned(),
            format!("{path}.priorityClassName: system priority classes are not allowed"),
        )
    } else {
        (
            "variables.spec.?priorityClassName.orValue('') == '' && !has(variables.spec.priority)"
                .to_owned(),
            format!(
                "{path}.priorityClassName, {path}.priority: a peer may not choose its workload's priority here"
            ),
        )
    }
}

/// The checks on a peer's PersistentVolumeClaim: it gets a volume
/// provisioned for it, never one that already exists here: no volume named
/// or selected at creation, no class `""` (which binds only pre-made
/// volumes), and `volumeName` set later only by the volume controller. (A
/// copy from another namespace's claim, `dataSourceRef.namespace`, needs a
/// ReferenceGrant there, which a peer cannot make.)
fn volume_claim_validations() -> Vec<Validation> {
    let why = "a peer's claim may not bind a PersistentVolume of this cluster, FLUIDOS peer guard";
    let create = |check: &str| format!("request.operation != 'CREATE' || {check}");
    let binders = VOLUME_BINDERS
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        deny(
            create("object.spec.?volumeName.orValue('') == ''"),
            format!("spec.volumeName: {why}"),
        ),
        deny(
            create("!has(object.spec.selector)"),
            format!("spec.selector: {why}"),
        ),
        deny(
            create("object.spec.?storageClassName.orValue('-') != ''"),
            format!(
                "spec.storageClassName: the empty class binds only volumes made beforehand; {why}"
            ),
        ),
        deny(
            format!(
                "request.operation != 'UPDATE' || oldObject.spec.?volumeName.orValue('') != '' \
                 || object.spec.?volumeName.orValue('') == '' || request.userInfo.username in [{binders}]"
            ),
            format!("spec.volumeName: only the volume controller binds a claim; {why}"),
        ),
    ]
}

/// Who binds claims to volumes: kube-controller-manager's volume
/// controller, as itself or (`--use-service-account-credentials`) as its
/// account.
const VOLUME_BINDERS: [&str; 2] = [
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:persistent-volume-binder",
];

/// Name of the one Secret a peer creates here: its nonce, which this
/// cluster's Liqo fills (Liqo v1.0.0's `liqo-nonce`).
pub const PEER_NONCE_SECRET: &str = "liqo-nonce";
/// The labels a peer's nonce Secret may carry (Liqo's nonce creator finds
/// it by them).
pub const PEER_NONCE_LABELS: [&str; 2] = ["liqo.io/nonce", REMOTE_CLUSTER_ID_LABEL];

/// The checks on a Secret a peer's account writes: never one this
/// cluster's Liqo would sign (a peer that could have its own nonce signed
/// here would hold this cluster's signature over a nonce another provider
/// issued to it, and peer there as this cluster; this node's own peering
/// makes those Secrets with its own credentials), never a ServiceAccount
/// token (a way out of the peer's rights), and its nonce only. Liqo
/// trusts Secrets by their labels (the crd-replicator starts reflecting
/// with any kubeconfig Secret labelled `liqo.io/identity-type`, the
/// gateways take keys labelled `networking.liqo.io/gateway-resource`,
/// the nonce signer signs `liqo.io/signed-nonce`), so a peer that may
/// create Secrets must not choose their names, labels or annotations.
fn peer_secret_validations() -> Vec<Validation> {
    let allowed_labels = PEER_NONCE_LABELS
        .iter()
        .map(|l| format!("'{l}'"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        // In this order: the first refusal is the one the peer is told.
        deny(
            format!(
                "!(object.metadata.?labels.orValue({{}}).exists(k, k == '{SIGNED_NONCE_LABEL}'))"
            ),
            format!(
                "metadata.labels[{SIGNED_NONCE_LABEL}]: a peer may not have this cluster's Liqo sign a nonce, FLUIDOS peer guard"
            ),
        ),
        deny(
            "object.?type.orValue('') != 'kubernetes.io/service-account-token'".to_owned(),
            "type: a peer may not create ServiceAccount-token Secrets, FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            format!("object.metadata.name == '{PEER_NONCE_SECRET}'"),
            format!(
                "metadata.name: a peer may create only its nonce Secret {PEER_NONCE_SECRET} here, FLUIDOS peer guard"
            ),
        ),
        deny(
            format!("object.metadata.?labels.orValue({{}}).all(k, k in [{allowed_labels}])"),
            format!(
                "metadata.labels: a peer's nonce Secret carries only {} (Liqo trusts Secrets by their labels), FLUIDOS peer guard",
                PEER_NONCE_LABELS.join(" and ")
            ),
        ),
        deny(
            format!(
                "!('{REMOTE_CLUSTER_ID_LABEL}' in object.metadata.?labels.orValue({{}})) \
                 || request.namespace == '{TENANT_PREFIX}' + object.metadata.labels['{REMOTE_CLUSTER_ID_LABEL}']"
            ),
            format!(
                "metadata.labels[{REMOTE_CLUSTER_ID_LABEL}]: a peer's nonce Secret names the cluster of its tenant namespace, FLUIDOS peer guard"
            ),
        ),
        deny(
            "size(object.metadata.?annotations.orValue({})) == 0".to_owned(),
            "metadata.annotations: a peer's nonce Secret carries none, FLUIDOS peer guard"
                .to_owned(),
        ),
    ]
}

/// Name prefixes no namespace made for a peer may have.
const RESERVED_NAMESPACE_PREFIXES: [&str; 2] = ["kube-", "liqo-"];

/// The checks on a namespace a NamespaceMap made.
fn namespace_validations(service_namespaces: bool) -> Vec<Validation> {
    let (same_name, allowed) = if service_namespaces {
        (
            format!(
                " || (object.metadata.name == variables.original \
                 && object.metadata.name.startsWith('{SERVICE_NAMESPACE_PREFIX}'))"
            ),
            format!(
                "<namespace>-<peer cluster ID>, or {SERVICE_NAMESPACE_PREFIX}<...> as on the peer"
            ),
        )
    } else {
        (String::new(), "<namespace>-<peer cluster ID>".to_owned())
    };
    vec![
        deny(
            format!(
                "variables.peer != '' && variables.original != '' \
                 && (object.metadata.name == variables.original + '-' + variables.peer{same_name})"
            ),
            format!(
                "metadata.name: a namespace Liqo makes for a peer is named {allowed} \
                 (Liqo's DefaultName mapping of metadata.annotations[{ORIGINAL_NAME_ANNOTATION}]), FLUIDOS peer guard"
            ),
        ),
        deny(
            format!(
                "![{}].exists(p, object.metadata.name.startsWith(p))",
                RESERVED_NAMESPACE_PREFIXES
                    .iter()
                    .map(|p| format!("'{p}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "metadata.name: names starting with {} are Kubernetes' and Liqo's (a peer's \
                 liqo-<...> namespace could pass for a tenant namespace), FLUIDOS peer guard",
                RESERVED_NAMESPACE_PREFIXES.join(" or ")
            ),
        ),
        deny(
            "variables.peer.contains('-') || variables.peer.matches('[0-9]')".to_owned(),
            "metadata.annotations[liqo.io/managed-by-namespace-map]: the peer's cluster ID is one word \
             without a digit, so the names Liqo derives from it (<namespace>-<cluster ID>) could take \
             one this cluster will need (like longhorn-system); a peer's cluster ID must contain a \
             hyphen or a digit, FLUIDOS peer guard"
                .to_owned(),
        ),
        deny(
            format!(
                "has(object.metadata.labels) && '{REMOTE_CLUSTER_ID_LABEL}' in object.metadata.labels \
                 && object.metadata.labels['{REMOTE_CLUSTER_ID_LABEL}'] == variables.peer"
            ),
            format!(
                "metadata.labels[{REMOTE_CLUSTER_ID_LABEL}]: a namespace Liqo makes for a peer names the peer of its NamespaceMap's tenant namespace, FLUIDOS peer guard"
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn inputs(level: PodSecurityLevel) -> PolicyInputs {
        PolicyInputs {
            level,
            service_namespaces: false,
            peer_accounts: "system:serviceaccount:fluidos:fluidos-peer-".to_owned(),
            exposure: BTreeSet::new(),
        }
    }

    fn messages(g: &Guarded) -> Vec<String> {
        g.policy
            .spec
            .as_ref()
            .unwrap()
            .validations
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| v.message.clone().unwrap())
            .collect()
    }

    #[test]
    fn eight_policies_each_with_its_binding_and_label() {
        let plan = plan(inputs(PodSecurityLevel::Restricted));
        let names: Vec<_> = plan
            .iter()
            .map(|g| g.policy.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, NAMES);
        for g in &plan {
            let binding = g.binding.spec.as_ref().unwrap();
            assert_eq!(binding.policy_name, g.policy.metadata.name);
            assert_eq!(
                binding.validation_actions.as_deref(),
                Some(&["Deny".to_owned()][..])
            );
            assert_eq!(
                g.policy.metadata.labels.as_ref().unwrap()[POLICY_LABEL.0],
                POLICY_LABEL.1
            );
            assert_eq!(
                g.policy.spec.as_ref().unwrap().failure_policy.as_deref(),
                Some("Fail")
            );
        }
    }

    #[test]
    fn workload_policies_bind_peer_namespaces_only_and_name_each_field() {
        let plan = plan(inputs(PodSecurityLevel::Restricted));
        for (g, path) in plan[..2].iter().zip(["spec.pod", "spec"]) {
            let selector = g
                .binding
                .spec
                .as_ref()
                .unwrap()
                .match_resources
                .as_ref()
                .unwrap()
                .namespace_selector
                .as_ref()
                .unwrap();
            let exprs: Vec<_> = selector
                .match_expressions
                .as_ref()
                .unwrap()
                .iter()
                .map(|r| (r.key.as_str(), r.operator.as_str()))
                .collect();
            assert_eq!(
                exprs,
                [
                    (REMOTE_CLUSTER_ID_LABEL, "Exists"),
                    (TENANT_NAMESPACE_LABEL, "DoesNotExist")
                ]
            );
            let msgs = messages(g);
            for field in [
                "securityContext.privileged",
                "allowPrivilegeEscalation",
                "hostNetwork",
                "hostPID",
                "hostIPC",
                "hostPath",
                "hostPort",
                "nodeName",
                "capabilities.add",
                "procMount",
                "seccompProfile",
                "hostProcess",
                "priorityClassName",
            ] {
                assert!(
                    msgs.iter()
                        .any(|m| m.starts_with(&format!("{path}.")) && m.contains(field)),
                    "{path}: no message names {field}: {msgs:?}"
                );
            }
        }
        // Services: no external IPs, in peer namespaces only.
        assert!(messages(&plan[2])[0].starts_with("spec.externalIPs"));
        assert!(
            plan[2]
                .binding
                .spec
                .as_ref()
                .unwrap()
                .match_resources
                .as_ref()
                .is_some_and(|m| m.namespace_selector.is_some())
        );
        // Claims: no binding of an existing volume, in peer namespaces only;
        // on update only the volume controller writes volumeName.
        let claims = messages(&plan[3]);
        for field in ["spec.volumeName", "spec.selector", "spec.storageClassName"] {
            assert!(
                claims.iter().any(|m| m.starts_with(field)),
                "{field}: {claims:?}"
            );
        }
        let constraints = plan[3]
            .policy
            .spec
            .as_ref()
            .unwrap()
            .match_constraints
            .as_ref()
            .unwrap();
        let ops = constraints.resource_rules.as_ref().unwrap()[0]
            .operations
            .clone()
            .unwrap();
        assert_eq!(ops, ["CREATE", "UPDATE"]);
        assert!(
            plan[3]
                .binding
                .spec
                .as_ref()
                .unwrap()
                .match_resources
                .as_ref()
                .is_some_and(|m| m.namespace_selector.is_some())
        );
        // Only Pods wait for the namespace's Pod Security label.
        assert!(messages(&plan[1]).iter().any(|m| m.contains(ENFORCE_LABEL)));
        assert!(!messages(&plan[0]).iter().any(|m| m.contains(ENFORCE_LABEL)));
    }

    #[test]
    fn the_level_sets_the_capabilities_and_privileged_keeps_only_the_label() {
        let caps = |level| {
            let plan = plan(inputs(level));
            plan[0]
                .policy
                .spec
                .clone()
                .unwrap()
                .validations
                .unwrap()
                .into_iter()
                .find(|v| v.message.as_deref().unwrap().contains("capabilities.add"))
                .map(|v| v.expression)
        };
        let restricted = caps(PodSecurityLevel::Restricted).unwrap();
        assert!(restricted.contains("['NET_BIND_SERVICE']"), "{restricted}");
        let baseline = caps(PodSecurityLevel::Baseline).unwrap();
        assert!(baseline.contains("'CHOWN'"), "{baseline}");
        let privileged = plan(inputs(PodSecurityLevel::Privileged));
        assert!(messages(&privileged[0]).is_empty());
        let pods = messages(&privileged[1]);
        assert_eq!(pods.len(), 1);
        assert!(pods[0].contains("level privileged"), "{pods:?}");
    }

    #[test]
    fn namespace_names_are_liqos_default_unless_service_namespaces_are_bought() {
        let plain = plan(inputs(PodSecurityLevel::Restricted));
        let spec = plain[4].policy.spec.as_ref().unwrap();
        let expr = &spec.validations.as_ref().unwrap()[0].expression;
        assert!(
            expr.contains("object.metadata.name == variables.original + '-' + variables.peer"),
            "{expr}"
        );
        let vars = spec.variables.as_ref().unwrap();
        assert!(vars[1].expression.contains(".substring(12)"), "{vars:?}");
        assert!(
            vars[2].expression.contains(ORIGINAL_NAME_ANNOTATION),
            "{vars:?}"
        );
        let reserved = &spec.validations.as_ref().unwrap()[1].expression;
        assert!(reserved.contains("'liqo-'"), "{reserved}");
        let distinctive = &spec.validations.as_ref().unwrap()[2].expression;
        assert!(distinctive.contains("matches('[0-9]')"), "{distinctive}");
        let only = &spec.match_conditions.as_ref().unwrap()[0].expression;
        assert!(only.contains(MANAGED_BY_ANNOTATION), "{only}");
        assert!(!expr.contains(SERVICE_NAMESPACE_PREFIX), "{expr}");
        assert!(
            plain[4]
                .binding
                .spec
                .as_ref()
                .unwrap()
                .match_resources
                .is_none()
        );
        let buyer = plan(PolicyInputs {
            service_namespaces: true,
            ..inputs(PodSecurityLevel::Restricted)
        });
        let expr = &buyer[4]
            .policy
            .spec
            .as_ref()
            .unwrap()
            .validations
            .as_ref()
            .unwrap()[0]
            .expression;
        assert!(expr.contains("startsWith('contract-')"), "{expr}");
        assert!(
            expr.contains("object.metadata.name == variables.original &&"),
            "{expr}"
        );
    }

    fn expressions(g: &Guarded) -> Vec<String> {
        g.policy
            .spec
            .as_ref()
            .unwrap()
            .validations
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| v.expression.clone())
            .collect()
    }

    #[test]
    fn services_are_cluster_ip_unless_exposure_is_allowed() {
        let none = plan(inputs(PodSecurityLevel::Restricted));
        let msgs = messages(&none[2]);
        assert!(msgs[1].starts_with("spec.loadBalancerIP"), "{msgs:?}");
        assert!(msgs[2].starts_with("spec.type"), "{msgs:?}");
        assert!(
            msgs[2].contains("ClusterIP only")
                && msgs[2].contains("may allow node-port, load-balancer, external-name"),
            "{msgs:?}"
        );
        assert_eq!(
            expressions(&none[2])[2],
            "object.spec.?type.orValue('ClusterIP') in ['ClusterIP']"
        );
        let some = plan(PolicyInputs {
            exposure: BTreeSet::from([PeerExposure::NodePort, PeerExposure::Ingress]),
            ..inputs(PodSecurityLevel::Restricted)
        });
        assert_eq!(
            expressions(&some[2])[2],
            "object.spec.?type.orValue('ClusterIP') in ['ClusterIP', 'NodePort']"
        );
        assert!(messages(&some[2])[2].contains("may allow load-balancer, external-name"));
        assert!(messages(&some[2])[3].starts_with("metadata.annotations"));
        assert!(expressions(&some[2])[3].contains("'metallb.io/'"));
        // Updates that leave the spec alone (a finalizer removed) pass.
        let only = &none[2]
            .policy
            .spec
            .as_ref()
            .unwrap()
            .match_conditions
            .as_ref()
            .unwrap()[0];
        assert_eq!(only.expression, SPEC_CHANGED);
    }

    #[test]
    fn ingresses_are_refused_unless_allowed_and_then_name_their_hosts() {
        let none = plan(inputs(PodSecurityLevel::Restricted));
        assert_eq!(none[6].policy.metadata.name.as_deref(), Some(INGRESSES));
        assert_eq!(expressions(&none[6]), ["false"]);
        assert!(messages(&none[6])[0].contains("--peer-exposure may allow ingress"));
        let allowed = plan(PolicyInputs {
            exposure: BTreeSet::from([PeerExposure::Ingress]),
            ..inputs(PodSecurityLevel::Restricted)
        });
        let msgs = messages(&allowed[6]);
        assert!(msgs[0].starts_with("metadata.annotations"), "{msgs:?}");
        assert!(msgs[1].starts_with("spec.defaultBackend"), "{msgs:?}");
        assert!(msgs[2].starts_with("spec.rules[*].host"), "{msgs:?}");
        assert!(expressions(&allowed[6])[0].contains("'liqo.io/'"));
        assert!(
            allowed[6]
                .binding
                .spec
                .as_ref()
                .unwrap()
                .match_resources
                .as_ref()
                .is_some_and(|m| m.namespace_selector.is_some())
        );
    }

    #[test]
    fn endpoint_slices_point_at_global_unicast_addresses_only() {
        let g = &plan(inputs(PodSecurityLevel::Restricted))[7];
        assert_eq!(g.policy.metadata.name.as_deref(), Some(ENDPOINT_SLICES));
        let msgs = messages(g);
        assert!(msgs[0].starts_with("spec.template.addressType"), "{msgs:?}");
        assert!(msgs[1].contains("169.254.169.254"), "{msgs:?}");
        assert!(
            msgs[2].starts_with("spec.template.endpoints[*].nodeName"),
            "{msgs:?}"
        );
        assert!(expressions(g)[1].contains("isIP(a) && ip(a).isGlobalUnicast()"));
        let rule = &g
            .policy
            .spec
            .as_ref()
            .unwrap()
            .match_constraints
            .as_ref()
            .unwrap()
            .resource_rules
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            rule.api_groups.as_deref(),
            Some(&["offloading.liqo.io".to_owned()][..])
        );
    }

    #[test]
    fn peer_accounts_may_not_have_nonces_signed_nor_make_tokens() {
        let plan = plan(inputs(PodSecurityLevel::Restricted));
        let g = &plan[5];
        let spec = g.policy.spec.as_ref().unwrap();
        let only = &spec.match_conditions.as_ref().unwrap()[0].expression;
        assert!(
            only.contains("startsWith('system:serviceaccount:fluidos:fluidos-peer-')"),
            "{only}"
        );
        let msgs = messages(g);
        assert!(
            msgs[0].starts_with("metadata.labels[liqo.io/signed-nonce]"),
            "{msgs:?}"
        );
        assert!(msgs[1].starts_with("type:"), "{msgs:?}");
        // Whatever namespace the peer writes in.
        assert!(g.binding.spec.as_ref().unwrap().match_resources.is_none());
    }
}

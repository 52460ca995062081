//! Pure builders of the Liqo v1.0.0 objects a consumer creates to peer with
//! a provider as `liqoctl peer --networking-disabled` does
//! (`liqo-peering.md` §2.2–2.3): same names, labels and specs.
//!
//! | object | cluster | name | namespace |
//! |---|---|---|---|
//! | tenant Namespace | consumer | `liqo-tenant-<P>` | - |
//! | nonce Secret | provider | `liqo-nonce` | `liqo-tenant-<C>` |
//! | signed-nonce Secret | consumer | `liqo-signed-nonce` | `liqo-tenant-<P>` |
//! | Tenant | provider | `<C>` | `liqo-tenant-<C>` |
//! | control-plane Identity | consumer | `controlplane-<P>` | `liqo-tenant-<P>` |
//! | ResourceSlice | consumer | the Contract's name | `liqo-tenant-<P>` |
//!
//! One difference from liqoctl: the ResourceSlice is named after the Contract
//! (as the Go FLUIDOS node does), not after the provider, so a second
//! Contract with the same provider gets a second slice and a second virtual
//! node.

use std::collections::BTreeMap;

use base64::Engine as _;
use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::configuration::ConfigurationData;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::reservation::{ContractSpec, GO_PEERING_NAMESPACE_LABEL};
use fluidos_liqo_api::generated::identity::{IdentityAuthParams, IdentityType};
use fluidos_liqo_api::generated::tenant::TenantStatusAuthParams;
use fluidos_liqo_api::{
    Identity, IdentitySpec, ResourceSlice, ResourceSliceSpec, Tenant, TenantSpec,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

/// Liqo's namespace.
pub const LIQO_NAMESPACE: &str = "liqo";
/// Label naming the peer cluster (as seen from where the object lives).
pub const REMOTE_CLUSTER_ID: &str = "liqo.io/remote-cluster-id";
/// Label of tenant namespaces.
pub const TENANT_NAMESPACE_LABEL: &str = "liqo.io/tenant-namespace";
/// Label of the provider's nonce Secret.
pub const NONCE_LABEL: &str = "liqo.io/nonce";
/// Label of the consumer's signed-nonce Secret.
pub const SIGNED_NONCE_LABEL: &str = "liqo.io/signed-nonce";
/// Name of the provider's nonce Secret.
pub const NONCE_SECRET: &str = "liqo-nonce";
/// Name of the consumer's signed-nonce Secret.
pub const SIGNED_NONCE_SECRET: &str = "liqo-signed-nonce";
/// Nonce Secret key (both Secrets).
pub const NONCE_KEY: &str = "nonce";
/// Signed-nonce Secret key holding the Ed25519 signature.
pub const SIGNED_NONCE_KEY: &str = "signedNonce";
/// Secret Liqo keeps the cluster's Ed25519 key pair in.
pub const AUTH_KEYS_SECRET: &str = "authentication-keys";
/// Organization of control-plane certificates.
pub const CONTROL_PLANE_ORGANIZATION: &str = "liqo.io";
/// ResourceSlice replication labels.
pub const REPLICATION_LABEL: &str = "liqo.io/replication";
/// ResourceSlice replication destination label.
pub const REMOTE_ID_LABEL: &str = "liqo.io/remoteID";
/// ResourceSlice annotation asking for a VirtualNode.
pub const CREATE_VIRTUAL_NODE: &str = "liqo.io/create-virtual-node";
/// The class served by Liqo's built-in handler.
pub const DEFAULT_CLASS: &str = "default";
/// Label put on what this crate creates, besides Liqo's own.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "fluidos-peering");
/// Annotation a provider puts on a consumer's Tenant it drained because
/// nothing is sold to that consumer any more: the Tenant is on its way out
/// (see `tenant_cleanup`), and a consumer reading it waits, then
/// authenticates again.
pub const DRAINED_FOR_REMOVAL: &str = "fluidos.eu/drained-because-nothing-is-sold";

/// Why a peering object could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `liqo/authentication-keys` has no usable `privateKey`.
    #[error("Secret liqo/{AUTH_KEYS_SECRET} has no privateKey")]
    NoPrivateKey,
    /// The private key is not a PEM Ed25519 PKCS#8 key.
    #[error("reading the cluster's Ed25519 key: {0}")]
    Key(#[source] rcgen::Error),
    /// The CSR could not be made.
    #[error("building the control-plane CSR: {0}")]
    Csr(#[source] rcgen::Error),
    /// The contract's kubeconfig is not base64.
    #[error("the contract's kubeconfig is not base64: {0}")]
    KubeconfigBase64(#[source] base64::DecodeError),
    /// The contract's kubeconfig is not a kubeconfig.
    #[error("the contract's kubeconfig is not a kubeconfig: {0}")]
    KubeconfigYaml(#[source] kube::config::KubeconfigError),
    /// The peer's kubeconfig uses what a peer may not hand over (a command,
    /// a file, a proxy, plain HTTP; `fluidos_controller::peer_kubeconfig`).
    #[error("the peer's kubeconfig is refused: {0}")]
    KubeconfigRefused(String),
    /// The Contract's flavor or configuration does not describe a K8Slice.
    #[error("the Contract does not describe a K8Slice: {0}")]
    NotK8Slice(String),
    /// The cluster's public key ends in a zero byte, which Liqo refuses.
    #[error(
        "this cluster's Liqo authentication key cannot peer as a consumer: its public key ends \
         in a zero byte, which Liqo v1.0.0 providers refuse (\"Invalid CSR for the Tenant: \
         invalid public key\": their CSR check drops a trailing zero from the key). Delete \
         Secret liqo/{AUTH_KEYS_SECRET} and restart liqo-controller-manager to make a new key \
         pair; peering then resumes by itself"
    )]
    KeyRefusedByLiqo,
}

/// The REAR gateway's label value on what it makes (a buyer's tenant
/// namespace among them; `fluidos-rear-gateway`'s `MANAGED_LABEL`).
const GATEWAY_MANAGER: &str = "fluidos-rear-gateway";
/// The gateway's annotations on a buyer's tenant namespace: the buyer's
/// node ID and whom its credentials belong to (`fluidos-rear-gateway`'s
/// `BUYER_ANNOTATION`, `OWNER_ANNOTATION`).
const GATEWAY_BUYER: &str = "fluidos.eu/buyer-id";
const GATEWAY_OWNER: &str = "fluidos.eu/buyer-owner";
/// Liqo's annotation on the namespaces its NamespaceMap controller makes for
/// a peer's offloaded namespaces.
const NAMESPACE_MAP_ANNOTATION: &str = "liqo.io/managed-by-namespace-map";

/// Why this node must not peer with `provider` in the tenant namespace `ns`,
/// if it must not (pure). Liqo keeps one tenant namespace per remote
/// cluster for both directions: one this node's REAR gateway made for a
/// buyer that stated `provider`'s cluster ID is fine only if that buyer is
/// `provider` (its key is the one this node bought with); any other buyer
/// bound there could read the credentials this node's peering keeps in it.
pub fn foreign_tenant_namespace(
    ns: &Namespace,
    peer_key: Option<&String>,
    provider: &str,
) -> Option<String> {
    use kube::ResourceExt as _;
    // Made by Liqo for a peer's NamespaceMap (a peer asked for this name):
    // the peer's workloads and rights are there, never this node's keys.
    if ns.annotations().contains_key(NAMESPACE_MAP_ANNOTATION) {
        return Some(format!(
            "not peering with cluster {provider}: namespace {} was made by Liqo for a peer's offloaded namespace ({NAMESPACE_MAP_ANNOTATION}), not as a tenant namespace; peering there would let that peer read this node's credentials for {provider}. Delete it (after ending that peer's Contracts) and peer again",
            ns.name_any()
        ));
    }
    // Adopted by this node's gateway for an unmodified Go consumer, which
    // may list every Secret there (Liqo's library finds its nonce so).
    if ns.labels().contains_key(GO_PEERING_NAMESPACE_LABEL) {
        return Some(format!(
            "not peering with cluster {provider}: namespace {} is the tenant namespace of a Go consumer this node sells to ({GO_PEERING_NAMESPACE_LABEL}), whose Liqo peering rights there include listing Secrets; Liqo keeps one tenant namespace per peer for both directions, so this node's Liqo credentials for {provider}, which carry this cluster's Liqo private key, would be readable by {provider}. End {provider}'s Contracts with this node (its namespace then goes) before buying from it",
            ns.name_any()
        ));
    }
    let made_by_gateway = ns
        .labels()
        .get(MANAGED_BY.0)
        .is_some_and(|m| m == GATEWAY_MANAGER);
    let owner = ns.annotations().get(GATEWAY_OWNER);
    // Made by the peering for a buyer's reverse peering (a Service
    // delivered by Liqo), with that buyer's key: the same rule.
    if !made_by_gateway && owner.is_none() {
        return None;
    }
    let seller = peer_key;
    if owner.is_some() && owner == seller {
        return None;
    }
    let buyer = ns
        .annotations()
        .get(GATEWAY_BUYER)
        .map_or("?", String::as_str);
    Some(format!(
        "not peering with cluster {provider}: namespace {} was made by this node's REAR gateway for buyer {buyer} ({}), which is not {provider} as this node bought from it ({}); peering there would let that buyer read this node's credentials for {provider}. End that buyer's Contracts and delete the namespace, or buy from {provider} over TLS with its key",
        ns.name_any(),
        owner.map_or("no key recorded", String::as_str),
        seller.map_or("no key pinned", String::as_str),
    ))
}

/// Annotation on a tenant namespace this node's peering made to buy from a
/// provider: the key the provider sold with (pinned at discovery). A Liqo
/// cluster ID is the provider's word: without it, another provider stating
/// the same ID would be served through the first one's peering.
pub const SELLER_KEY: &str = "fluidos.eu/seller-key";

/// Why this node must not buy from `provider` with a Contract sold under
/// `seller_key` through the tenant namespace `ns`, if it must not (pure):
/// the namespace records that another key peered under that cluster ID
/// ([`SELLER_KEY`]). A namespace that records no key (made by an earlier
/// version, or by the gateway for a buyer) is none of this check's
/// business.
pub fn claimed_by_another_seller(
    ns: &Namespace,
    seller_key: Option<&String>,
    provider: &str,
) -> Option<String> {
    use kube::ResourceExt as _;
    let recorded = ns.annotations().get(SELLER_KEY)?;
    (seller_key != Some(recorded)).then(|| {
        format!(
            "not peering with cluster {provider}: this node peers with cluster {provider} as the provider of key {recorded} (namespace {}, {SELLER_KEY}), and this Contract's seller {} states the same Liqo cluster ID; a provider may not take another's cluster ID. If {provider} changed its key, end the Contracts bought from it and delete the namespace, then buy again",
            ns.name_any(),
            seller_key.map_or("pinned no key".to_owned(), |k| format!("sold with key {k}")),
        )
    })
}

/// [`tenant_namespace_object`] for buying from `peer` with a Contract sold
/// under `seller_key`, which it records ([`SELLER_KEY`]).
pub fn seller_tenant_namespace_object(peer: &str, seller_key: Option<&str>) -> Namespace {
    let mut ns = tenant_namespace_object(peer);
    if let Some(key) = seller_key {
        ns.metadata.annotations = Some(BTreeMap::from([(SELLER_KEY.to_owned(), key.to_owned())]));
    }
    ns
}

/// `liqo-tenant-<peer>`, the tenant namespace each side keeps for the other.
pub fn tenant_namespace(peer: &str) -> String {
    format!("liqo-tenant-{peer}")
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// [`tenant_namespace_object`] for the reverse peering of a Service sold
/// to be delivered by Liqo: it records the key the buyer bought with, so
/// that another buyer stating the same cluster ID is not served through it
/// ([`foreign_tenant_namespace`]).
pub fn reverse_tenant_namespace_object(peer: &str, buyer_key: Option<&str>) -> Namespace {
    let mut ns = tenant_namespace_object(peer);
    if let Some(key) = buyer_key {
        ns.metadata.annotations =
            Some(BTreeMap::from([(GATEWAY_OWNER.to_owned(), key.to_owned())]));
    }
    ns
}

/// The tenant namespace for `peer`, with the two labels Liqo finds it by
/// and [`MANAGED_BY`]: the REAR gateway never adopts a namespace labelled
/// as managed for a Go consumer (whose rights there would read this node's
/// credentials).
pub fn tenant_namespace_object(peer: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(tenant_namespace(peer)),
            labels: labels(&[
                (REMOTE_CLUSTER_ID, peer),
                (TENANT_NAMESPACE_LABEL, "true"),
                MANAGED_BY,
            ]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The empty nonce Secret the consumer creates on the provider (in
/// `liqo-tenant-<consumer>`); Liqo's nonce creator fills `data.nonce`.
pub fn nonce_secret(consumer_id: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(NONCE_SECRET.to_owned()),
            namespace: Some(tenant_namespace(consumer_id)),
            labels: labels(&[(NONCE_LABEL, "true"), (REMOTE_CLUSTER_ID, consumer_id)]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The signed-nonce Secret on the consumer (in `liqo-tenant-<provider>`)
/// holding the provider's nonce; Liqo's nonce signer adds `signedNonce`.
pub fn signed_nonce_secret(provider_id: &str, nonce: &[u8]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(SIGNED_NONCE_SECRET.to_owned()),
            namespace: Some(tenant_namespace(provider_id)),
            labels: labels(&[
                (SIGNED_NONCE_LABEL, "true"),
                (REMOTE_CLUSTER_ID, provider_id),
            ]),
            ..Default::default()
        },
        data: Some([(NONCE_KEY.to_owned(), ByteString(nonce.to_vec()))].into()),
        ..Default::default()
    }
}

/// `data[key]` of a Secret, if present and non-empty.
pub fn secret_value<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty())
}

/// The cluster's Ed25519 key pair, from Secret `liqo/authentication-keys`.
pub struct ClusterKeys(rcgen::KeyPair);

impl std::fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKeys(..)")
    }
}

impl ClusterKeys {
    /// Reads `privateKey` (PEM PKCS#8 Ed25519) from the Secret.
    pub fn from_secret(secret: &Secret) -> Result<Self, BuildError> {
        let pem = secret_value(secret, "privateKey").ok_or(BuildError::NoPrivateKey)?;
        let pem = std::str::from_utf8(pem).map_err(|_| BuildError::NoPrivateKey)?;
        Self::from_pem(pem)
    }

    /// From a PEM PKCS#8 Ed25519 private key.
    pub fn from_pem(pem: &str) -> Result<Self, BuildError> {
        rcgen::KeyPair::from_pem(pem)
            .map(ClusterKeys)
            .map_err(BuildError::Key)
    }

    /// The raw 32-byte public key.
    pub fn public_key_raw(&self) -> &[u8] {
        self.0.public_key_raw()
    }

    /// Whether a Liqo v1.0.0 provider accepts this key in a Tenant or a
    /// ResourceSlice: its `checkCSR` drops a trailing zero byte from the key
    /// it is given before comparing it with the CSR's, so one key in 256
    /// never matches (`pkg/liqo-controller-manager/authentication/csr.go`).
    pub fn liqo_accepts(&self) -> bool {
        liqo_accepts_public_key(self.public_key_raw())
    }

    /// The PEM CSR of the control-plane certificate: CN = the cluster ID,
    /// O = `liqo.io`, signed with the cluster's key (Liqo's
    /// `GenerateCSRForControlPlane`), encoded as Go's `crypto/x509` encodes
    /// it: O before CN, each a PrintableString when it can be one. Ed25519
    /// signatures are deterministic, so the CSR is byte for byte liqoctl's
    /// (`tests/liqoctl_objects.rs` checks it).
    pub fn control_plane_csr(&self, cluster_id: &str) -> Result<String, BuildError> {
        let go_string = |s: &str| match rcgen::string::PrintableString::try_from(s) {
            Ok(p) => rcgen::DnValue::PrintableString(p),
            Err(_) => rcgen::DnValue::Utf8String(s.to_owned()),
        };
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(BuildError::Csr)?;
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(
            rcgen::DnType::OrganizationName,
            go_string(CONTROL_PLANE_ORGANIZATION),
        );
        dn.push(rcgen::DnType::CommonName, go_string(cluster_id));
        params.distinguished_name = dn;
        params
            .serialize_request(&self.0)
            .and_then(|csr| csr.pem())
            .map_err(BuildError::Csr)
    }
}

/// Whether Liqo v1.0.0 accepts the raw Ed25519 public key `raw` from a
/// consumer (see [`ClusterKeys::liqo_accepts`]).
pub fn liqo_accepts_public_key(raw: &[u8]) -> bool {
    raw.last().is_some_and(|b| *b != 0)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The Tenant the consumer `consumer_id` applies on the provider (Liqo's
/// `GenerateTenant`): name and label = the consumer's ID, its public key, a
/// control-plane CSR and the nonce `signature` made by its Liqo.
pub fn tenant(
    consumer_id: &str,
    keys: &ClusterKeys,
    signature: &[u8],
) -> Result<Tenant, BuildError> {
    if !keys.liqo_accepts() {
        return Err(BuildError::KeyRefusedByLiqo);
    }
    let csr = keys.control_plane_csr(consumer_id)?;
    let mut tenant = Tenant::new(
        consumer_id,
        TenantSpec {
            cluster_id: Some(consumer_id.to_owned()),
            public_key: Some(b64(keys.public_key_raw())),
            csr: Some(b64(csr.as_bytes())),
            signature: Some(b64(signature)),
            ..Default::default()
        },
    );
    tenant.metadata.namespace = Some(tenant_namespace(consumer_id));
    tenant.metadata.labels = labels(&[(REMOTE_CLUSTER_ID, consumer_id)]);
    Ok(tenant)
}

/// What the provider's Tenant status hands back, once complete.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantGrant {
    /// `status.authParams`.
    pub auth_params: TenantStatusAuthParams,
    /// `status.tenantNamespace`: where the consumer may write on the provider.
    pub tenant_namespace: String,
}

impl TenantGrant {
    /// The grant, when the Tenant's status has both `authParams` and `tenantNamespace`.
    pub fn of(tenant: &Tenant) -> Option<TenantGrant> {
        let status = tenant.status.as_ref()?;
        Some(TenantGrant {
            auth_params: status.auth_params.clone()?,
            tenant_namespace: status.tenant_namespace.clone().filter(|n| !n.is_empty())?,
        })
    }
}

/// `controlplane-<provider>`.
pub fn control_plane_identity_name(provider_id: &str) -> String {
    format!("controlplane-{provider_id}")
}

/// The consumer's control-plane Identity for `provider_id` (Liqo's
/// `GenerateIdentityControlPlane`).
pub fn control_plane_identity(provider_id: &str, grant: &TenantGrant) -> Identity {
    let a = &grant.auth_params;
    let mut identity = Identity::new(
        &control_plane_identity_name(provider_id),
        IdentitySpec {
            auth_params: Some(IdentityAuthParams {
                api_server: a.api_server.clone(),
                aws_config: None,
                ca: a.ca.clone(),
                proxy_url: a.proxy_url.clone(),
                signed_crt: a.signed_crt.clone(),
            }),
            cluster_id: Some(provider_id.to_owned()),
            namespace: Some(grant.tenant_namespace.clone()),
            r#type: Some(IdentityType::ControlPlane),
        },
    );
    identity.metadata.namespace = Some(tenant_namespace(provider_id));
    identity.metadata.labels = labels(&[(REMOTE_CLUSTER_ID, provider_id)]);
    identity
}

/// The resources a K8Slice Contract sold: its configuration's cpu, memory and
/// pods, or, without a configuration (the whole flavor was bought), the
/// flavor's. Storage and GPUs are not requested from Liqo.
pub fn contracted_resources(
    contract: &ContractSpec,
) -> Result<BTreeMap<String, String>, BuildError> {
    let flavor_type = &contract.flavor.spec.flavor_type;
    if flavor_type.identifier() != Some(FlavorTypeIdentifier::K8Slice) {
        return Err(BuildError::NotK8Slice(format!(
            "flavor type {:?}",
            flavor_type.type_identifier
        )));
    }
    let (cpu, memory, pods) = match &contract.configuration {
        Some(configuration) => match configuration.parse("spec.configuration") {
            Ok(ConfigurationData::K8Slice(c)) => (c.cpu, c.memory, c.pods),
            Ok(_) => return Err(BuildError::NotK8Slice("configuration type".into())),
            Err(e) => return Err(BuildError::NotK8Slice(e.to_string())),
        },
        None => match flavor_type.parse() {
            Ok(FlavorTypeData::K8Slice(k)) => (
                k.characteristics.cpu,
                k.characteristics.memory,
                k.characteristics.pods,
            ),
            Ok(_) => return Err(BuildError::NotK8Slice("flavor data".into())),
            Err(e) => return Err(BuildError::NotK8Slice(e.to_string())),
        },
    };
    Ok([("cpu", cpu), ("memory", memory), ("pods", pods)]
        .into_iter()
        .filter(|(_, q)| !q.0.is_empty())
        .map(|(k, q)| (k.to_owned(), q.0))
        .collect())
}

/// The consumer's ResourceSlice `name` asking `provider_id` for exactly
/// `resources` (Liqo's `forge.ResourceSlice` + `MutateResourceSlice`, with a
/// VirtualNode).
pub fn resource_slice(
    name: &str,
    provider_id: &str,
    class: &str,
    resources: &BTreeMap<String, String>,
) -> ResourceSlice {
    let mut slice = ResourceSlice::new(
        name,
        ResourceSliceSpec {
            class: Some(class.to_owned()),
            provider_cluster_id: Some(provider_id.to_owned()),
            resources: Some(
                resources
                    .iter()
                    .map(|(k, v)| (k.clone(), IntOrString::String(v.clone())))
                    .collect(),
            ),
            ..Default::default()
        },
    );
    slice.metadata.namespace = Some(tenant_namespace(provider_id));
    slice.metadata.labels = labels(&[
        (REPLICATION_LABEL, "true"),
        (REMOTE_ID_LABEL, provider_id),
        (REMOTE_CLUSTER_ID, provider_id),
    ]);
    slice.metadata.annotations = labels(&[(CREATE_VIRTUAL_NODE, "true")]);
    slice
}

/// Decodes `peeringTargetCredentials.kubeconfig` (base64 of a kubeconfig YAML).
pub fn decode_kubeconfig(b64_text: &str) -> Result<kube::config::Kubeconfig, BuildError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64_text.trim())
        .map_err(BuildError::KubeconfigBase64)?;
    let text = String::from_utf8_lossy(&bytes);
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&text).map_err(BuildError::KubeconfigYaml)?;
    match fluidos_controller::peer_kubeconfig::refusal(&kubeconfig) {
        Some(why) => Err(BuildError::KubeconfigRefused(why)),
        None => Ok(kubeconfig),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use fluidos_api::Configuration;
    use fluidos_api::configuration::K8SliceConfiguration;
    use fluidos_api::flavor::{FlavorType, K8Slice, K8SliceCharacteristics};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    /// A new Ed25519 PKCS#8 key, as Liqo stores it, that Liqo accepts (or
    /// refuses) in a Tenant.
    fn keys_liqo(accepts: bool) -> ClusterKeys {
        loop {
            let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
            let k = ClusterKeys::from_pem(&kp.serialize_pem()).unwrap();
            if k.liqo_accepts() == accepts {
                return k;
            }
        }
    }

    fn keys() -> ClusterKeys {
        keys_liqo(true)
    }

    fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
        meta.labels.as_ref()?.get(key).map(String::as_str)
    }

    #[test]
    fn tenant_namespaces_carry_liqo_labels() {
        let ns = tenant_namespace_object("prov");
        assert_eq!(ns.metadata.name.as_deref(), Some("liqo-tenant-prov"));
        assert_eq!(label(&ns.metadata, REMOTE_CLUSTER_ID), Some("prov"));
        assert_eq!(label(&ns.metadata, TENANT_NAMESPACE_LABEL), Some("true"));
        // What the gateway's Go-consumer adoption leaves alone.
        assert_eq!(label(&ns.metadata, MANAGED_BY.0), Some(MANAGED_BY.1));
    }

    #[test]
    fn nonce_secrets_as_liqoctl_makes_them() {
        let n = nonce_secret("cons");
        assert_eq!(n.metadata.name.as_deref(), Some("liqo-nonce"));
        assert_eq!(n.metadata.namespace.as_deref(), Some("liqo-tenant-cons"));
        assert_eq!(label(&n.metadata, NONCE_LABEL), Some("true"));
        assert_eq!(label(&n.metadata, REMOTE_CLUSTER_ID), Some("cons"));
        assert!(n.data.is_none());

        let s = signed_nonce_secret("prov", b"abc");
        assert_eq!(s.metadata.name.as_deref(), Some("liqo-signed-nonce"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("liqo-tenant-prov"));
        assert_eq!(label(&s.metadata, SIGNED_NONCE_LABEL), Some("true"));
        assert_eq!(label(&s.metadata, REMOTE_CLUSTER_ID), Some("prov"));
        assert_eq!(secret_value(&s, NONCE_KEY), Some(&b"abc"[..]));
        assert_eq!(secret_value(&s, SIGNED_NONCE_KEY), None);
    }

    #[test]
    fn tenant_has_key_csr_and_signature() {
        let k = keys();
        let t = tenant("cons", &k, &[7u8; 64]).unwrap();
        assert_eq!(t.metadata.name.as_deref(), Some("cons"));
        assert_eq!(t.metadata.namespace.as_deref(), Some("liqo-tenant-cons"));
        assert_eq!(label(&t.metadata, REMOTE_CLUSTER_ID), Some("cons"));
        assert_eq!(t.spec.cluster_id.as_deref(), Some("cons"));
        let dec = |s: &Option<String>| {
            base64::engine::general_purpose::STANDARD
                .decode(s.as_deref().unwrap())
                .unwrap()
        };
        assert_eq!(dec(&t.spec.public_key), k.public_key_raw());
        assert_eq!(k.public_key_raw().len(), 32);
        assert_eq!(dec(&t.spec.signature), vec![7u8; 64]);
        let csr = String::from_utf8(dec(&t.spec.csr)).unwrap();
        assert!(
            csr.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
            "{csr}"
        );
        // No authz policy and no tenant condition: Liqo's defaults apply.
        assert!(t.spec.authz_policy.is_none() && t.spec.tenant_condition.is_none());
    }

    #[test]
    fn a_tenant_namespace_made_for_another_buyer_is_refused() {
        let fp = format!("sha256:{}", "a".repeat(64));
        let ns = |managed: Option<&str>, owner: Option<&str>| -> Namespace {
            let mut n = tenant_namespace_object("prov");
            if let Some(m) = managed {
                n.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(MANAGED_BY.0.into(), m.into());
            }
            let mut annotations = BTreeMap::from([(GATEWAY_BUYER.to_owned(), "b".to_owned())]);
            if let Some(o) = owner {
                annotations.insert(GATEWAY_OWNER.into(), o.into());
            }
            n.metadata.annotations = Some(annotations);
            n
        };
        let mut c = fluidos_api::Contract::new("contract-x", contract(None));
        c.metadata.annotations = Some(BTreeMap::from([(
            fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION.to_owned(),
            fp.clone(),
        )]));
        let key = |c: &fluidos_api::Contract| {
            kube::ResourceExt::annotations(c)
                .get(fluidos_api::PROVIDER_FINGERPRINT_ANNOTATION)
                .cloned()
        };
        // Our own (fluidos-peering's) or Liqo's: fine.
        assert!(foreign_tenant_namespace(&ns(None, None), key(&c).as_ref(), "prov").is_none());
        // One Liqo made for a peer's NamespaceMap (a squatted name): never.
        let mut squatted = ns(None, None);
        squatted.metadata.annotations = Some(BTreeMap::from([(
            NAMESPACE_MAP_ANNOTATION.to_owned(),
            "liqo-tenant-x/x".to_owned(),
        )]));
        let why = foreign_tenant_namespace(&squatted, key(&c).as_ref(), "prov").unwrap();
        assert!(why.contains(NAMESPACE_MAP_ANNOTATION), "{why}");
        assert!(
            foreign_tenant_namespace(&ns(Some("fluidos-peering"), None), key(&c).as_ref(), "prov")
                .is_none()
        );
        // The gateway's, for the provider's own key (two-way peering): fine.
        assert!(
            foreign_tenant_namespace(
                &ns(Some(GATEWAY_MANAGER), Some(&fp)),
                key(&c).as_ref(),
                "prov"
            )
            .is_none()
        );
        // A Go consumer's, adopted by the gateway, whose Liqo rights there
        // list Secrets: never, whatever its recorded owner.
        let mut go = ns(Some(GATEWAY_MANAGER), Some(&fp));
        go.metadata
            .labels
            .get_or_insert_default()
            .insert(GO_PEERING_NAMESPACE_LABEL.into(), "true".into());
        let why = foreign_tenant_namespace(&go, key(&c).as_ref(), "prov").unwrap();
        assert!(
            why.contains("listing Secrets") && why.contains("private key"),
            "{why}"
        );
        // Made by the peering for a buyer's reverse peering: its key.
        let reverse = reverse_tenant_namespace_object("prov", Some(&fp));
        assert!(foreign_tenant_namespace(&reverse, key(&c).as_ref(), "prov").is_none());
        let other_buyer = reverse_tenant_namespace_object("prov", Some("sha256:other"));
        assert!(foreign_tenant_namespace(&other_buyer, key(&c).as_ref(), "prov").is_some());
        // For another key, none recorded, or nothing pinned: refused.
        let other = format!("sha256:{}", "b".repeat(64));
        let why = foreign_tenant_namespace(
            &ns(Some(GATEWAY_MANAGER), Some(&other)),
            key(&c).as_ref(),
            "prov",
        )
        .unwrap();
        assert!(
            why.contains("for buyer b") && why.contains("read this node's credentials"),
            "{why}"
        );
        assert!(
            foreign_tenant_namespace(&ns(Some(GATEWAY_MANAGER), None), key(&c).as_ref(), "prov")
                .is_some()
        );
        c.metadata.annotations = None;
        assert!(
            foreign_tenant_namespace(
                &ns(Some(GATEWAY_MANAGER), Some(&fp)),
                key(&c).as_ref(),
                "prov"
            )
            .is_some()
        );
    }

    #[test]
    fn a_key_ending_in_zero_makes_no_tenant_and_says_why() {
        assert!(liqo_accepts_public_key(&[0, 1]));
        assert!(!liqo_accepts_public_key(&[1, 0]));
        assert!(!liqo_accepts_public_key(&[]));
        let err = tenant("cons", &keys_liqo(false), &[7u8; 64]).unwrap_err();
        assert!(matches!(err, BuildError::KeyRefusedByLiqo));
        let message = err.to_string();
        assert!(
            message.contains("zero byte") && message.contains("liqo/authentication-keys"),
            "{message}"
        );
    }

    #[test]
    fn identity_from_tenant_grant() {
        let grant = TenantGrant {
            auth_params: TenantStatusAuthParams {
                api_server: Some("https://127.0.0.1:1".into()),
                ca: Some("Q0E=".into()),
                signed_crt: Some("Q1JU".into()),
                ..Default::default()
            },
            tenant_namespace: "liqo-tenant-cons".into(),
        };
        let i = control_plane_identity("prov", &grant);
        assert_eq!(i.metadata.name.as_deref(), Some("controlplane-prov"));
        assert_eq!(i.metadata.namespace.as_deref(), Some("liqo-tenant-prov"));
        assert_eq!(label(&i.metadata, REMOTE_CLUSTER_ID), Some("prov"));
        assert_eq!(i.spec.cluster_id.as_deref(), Some("prov"));
        assert_eq!(i.spec.r#type, Some(IdentityType::ControlPlane));
        assert_eq!(i.spec.namespace.as_deref(), Some("liqo-tenant-cons"));
        let a = i.spec.auth_params.unwrap();
        assert_eq!(a.signed_crt.as_deref(), Some("Q1JU"));
        assert_eq!(a.api_server.as_deref(), Some("https://127.0.0.1:1"));
    }

    #[test]
    fn tenant_grant_needs_both_fields() {
        let mut t = Tenant::new("c", TenantSpec::default());
        assert!(TenantGrant::of(&t).is_none());
        t.status = Some(fluidos_liqo_api::TenantStatus {
            auth_params: Some(TenantStatusAuthParams::default()),
            tenant_namespace: None,
        });
        assert!(TenantGrant::of(&t).is_none());
        t.status.as_mut().unwrap().tenant_namespace = Some("ns".into());
        assert!(TenantGrant::of(&t).is_some());
    }

    pub(crate) fn contract(configuration: Option<(&str, &str, &str)>) -> ContractSpec {
        let flavor = K8Slice {
            characteristics: K8SliceCharacteristics {
                architecture: "amd64".into(),
                cpu: Quantity("8".into()),
                memory: Quantity("16Gi".into()),
                pods: Quantity("110".into()),
                gpu: None,
                storage: Some(Quantity("100Gi".into())),
            },
            ..Default::default()
        };
        let mut spec: ContractSpec = serde_json::from_value(serde_json::json!({
            "flavor": {"metadata": {"name": "f1"}, "spec": {
                "providerID": "p", "flavorType": FlavorType::k8slice(&flavor),
                "owner": {"domain": "d", "nodeID": "p", "ip": "1.2.3.4"},
                "price": {"amount": "1", "currency": "EUR", "period": "hourly"},
                "availability": true}},
            "transactionID": "t",
            "buyer": {"domain": "d", "nodeID": "c", "ip": "1.2.3.5"},
            "buyerClusterID": "cons",
            "seller": {"domain": "d", "nodeID": "p", "ip": "1.2.3.4"},
            "peeringTargetCredentials": {"liqoID": "prov", "kubeconfig": ""}
        }))
        .unwrap();
        spec.configuration = configuration.map(|(cpu, memory, pods)| {
            Configuration::k8slice(&K8SliceConfiguration {
                cpu: Quantity(cpu.into()),
                memory: Quantity(memory.into()),
                pods: Quantity(pods.into()),
                gpu: None,
                storage: Some(Quantity("1Gi".into())),
            })
        });
        spec
    }

    #[test]
    fn contracted_resources_are_the_configuration_or_the_flavor() {
        let bought = contracted_resources(&contract(Some(("1", "1Gi", "110")))).unwrap();
        assert_eq!(
            bought,
            [("cpu", "1"), ("memory", "1Gi"), ("pods", "110")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into()
        );
        let whole = contracted_resources(&contract(None)).unwrap();
        assert_eq!(whole["cpu"], "8");
        assert_eq!(whole["memory"], "16Gi");
        assert_eq!(whole.len(), 3, "storage is not requested: {whole:?}");
    }

    #[test]
    fn resource_slice_as_liqoctl_makes_it() {
        let r: BTreeMap<String, String> = [("cpu".to_owned(), "1".to_owned())].into();
        let s = resource_slice("contract-x-1234", "prov", DEFAULT_CLASS, &r);
        assert_eq!(s.metadata.name.as_deref(), Some("contract-x-1234"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("liqo-tenant-prov"));
        assert_eq!(label(&s.metadata, REPLICATION_LABEL), Some("true"));
        assert_eq!(label(&s.metadata, REMOTE_ID_LABEL), Some("prov"));
        assert_eq!(label(&s.metadata, REMOTE_CLUSTER_ID), Some("prov"));
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()[CREATE_VIRTUAL_NODE],
            "true"
        );
        assert_eq!(s.spec.class.as_deref(), Some("default"));
        assert_eq!(s.spec.provider_cluster_id.as_deref(), Some("prov"));
        assert!(s.spec.consumer_cluster_id.is_none() && s.spec.csr.is_none());
        assert_eq!(
            s.spec.resources.unwrap()["cpu"],
            IntOrString::String("1".into())
        );
    }

    #[test]
    fn kubeconfigs_decode_or_say_why_not() {
        let yaml = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n";
        let b = base64::engine::general_purpose::STANDARD.encode(yaml);
        assert!(decode_kubeconfig(&b).is_ok());
        assert!(matches!(
            decode_kubeconfig("%%%"),
            Err(BuildError::KubeconfigBase64(_))
        ));
        // A peer's kubeconfig running a command here: refused, never built.
        let exec = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers:\n- name: u\n  user:\n    exec: {command: sh, apiVersion: client.authentication.k8s.io/v1}\n";
        let b = base64::engine::general_purpose::STANDARD.encode(exec);
        assert!(matches!(
            decode_kubeconfig(&b),
            Err(BuildError::KubeconfigRefused(why)) if why.contains("exec")
        ));
    }

    #[test]
    fn a_cluster_id_is_the_first_sellers_key_it_was_bought_under() {
        let k1 = format!("sha256:{}", "1".repeat(64));
        let k2 = format!("sha256:{}", "2".repeat(64));
        let ns = seller_tenant_namespace_object("prov", Some(&k1));
        assert_eq!(
            kube::ResourceExt::annotations(&ns).get(SELLER_KEY),
            Some(&k1)
        );
        // The same seller: fine.
        assert!(claimed_by_another_seller(&ns, Some(&k1), "prov").is_none());
        // Another key, or none pinned, stating the same cluster ID: refused.
        let why = claimed_by_another_seller(&ns, Some(&k2), "prov").unwrap();
        assert!(
            why.contains(&k1) && why.contains(&k2) && why.contains("another's cluster ID"),
            "{why}"
        );
        assert!(claimed_by_another_seller(&ns, None, "prov").is_some());
        // No key recorded (an earlier version's, or made for a buyer): not
        // this check's business.
        assert!(
            claimed_by_another_seller(&tenant_namespace_object("prov"), Some(&k2), "prov")
                .is_none()
        );
        assert!(
            kube::ResourceExt::annotations(&seller_tenant_namespace_object("prov", None))
                .is_empty()
        );
    }
}

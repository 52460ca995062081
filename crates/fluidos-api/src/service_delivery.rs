//! How a sold Service reaches its buyer, and the names both sides of a
//! delivery by Liqo (mode a, `docs/service-offloading.md`) agree on.
//!
//! - **REAR** (mode b, the default): the buyer fetches the endpoints and
//!   credentials over REAR.
//! - **Liqo** (mode a): the buyer hands the seller, at PURCHASE, a kubeconfig
//!   of its own cluster with Liqo's peering-user rights in
//!   `liqo-tenant-<seller's cluster ID>` only; the seller peers with the
//!   buyer as Liqo's consumer (the reverse peering, driven by a companion
//!   Allocation of its own, [`OFFLOADING_FOR_ANNOTATION`]), offloads the
//!   service namespace to it, and Liqo reflects the credentials Secret into
//!   the buyer's namespace of the same name.
//!
//! The seller decides per sale and says so in the Contract's
//! `extraInformation` ([`EXTRA_KEY`]): Liqo only when it is configured so
//! and the buyer sent a kubeconfig. Unmodified Go nodes ignore the key.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::Contract;
use crate::common::{Configuration, FlavorTypeIdentifier, HostingPolicy};
use crate::configuration::ConfigurationData;
use crate::flavor::{FlavorType, FlavorTypeData};
use crate::naming::hash_prefix;
use crate::reservation::ContractSpec;

/// `extraInformation` key of a Contract delivered by Liqo; its value is [`LIQO`].
pub const EXTRA_KEY: &str = "fluidos.eu/service-delivery";
/// Value of [`EXTRA_KEY`] (and of [`DELIVERY_LABEL`]) for a delivery by Liqo.
pub const LIQO: &str = "liqo";
/// Label on the buyer's copy of a Contract delivered by Liqo: its gateway
/// keeps the seller's credentials on this cluster while one is live.
pub const DELIVERY_LABEL: &str = "fluidos.eu/service-delivery";
/// Value of [`DELIVERY_LABEL`] once the delivery ended (the seller took
/// the namespace back, or the Contract ended): nothing is granted any more.
pub const ENDED: &str = "ended";
/// Annotation on the seller's Allocation driving the reverse peering: the
/// Contract (same namespace) whose service it delivers.
pub const OFFLOADING_FOR_ANNOTATION: &str = "fluidos.eu/offloading-for";
/// Label the Go node puts on a service's credentials Secret (the one Liqo
/// reflects to the buyer).
pub const CREDENTIALS_LABEL: &str = "nodecore.fluidos.eu/flavor-service-credentials";
/// Annotation the seller keeps on the credentials Secret of a service
/// delivered by Liqo: the state of its own Allocation (`Active` once the
/// service's workloads are available). Liqo reflects it to the buyer with
/// the Secret, which is how the buyer learns the service's health.
pub const SERVICE_STATE_ANNOTATION: &str = "fluidos.eu/service-state";
/// With [`SERVICE_STATE_ANNOTATION`]: the seller's status message (why it is
/// not available), at most [`SERVICE_MESSAGE_MAX`] bytes.
pub const SERVICE_MESSAGE_ANNOTATION: &str = "fluidos.eu/service-message";
/// The longest [`SERVICE_MESSAGE_ANNOTATION`] either side writes or shows.
pub const SERVICE_MESSAGE_MAX: usize = 512;

/// `message` cut to at most [`SERVICE_MESSAGE_MAX`] bytes, on a character
/// boundary.
pub fn bounded_message(message: &str) -> &str {
    if message.len() <= SERVICE_MESSAGE_MAX {
        return message;
    }
    let mut end = SERVICE_MESSAGE_MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// Name of the NamespaceOffloading in a service namespace (upstream's).
pub const OFFLOADING_NAME: &str = "offloading";
/// Key of the kubeconfig YAML in the seller's copy of the buyer's credentials.
pub const KUBECONFIG_KEY: &str = "kubeconfig";

/// Longest object name (a DNS subdomain) and namespace-scoped label-like
/// names cut with a hash, as `peering_credentials::secret_name` does.
const MAX_NAME: usize = 253;
const HASH_LEN: usize = 16;

/// Whom this cluster lets peer as Liqo's consumer to deliver a Service it
/// bought: the seller's account here, named after its node ID and owned by
/// its REAR key; with its Liqo cluster ID, the peering-user rights in its
/// tenant namespace (known only once the Contract is, from its
/// `peeringTargetCredentials`: flavors do not carry it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadingGrant {
    /// The seller's node ID.
    pub seller_node_id: String,
    /// The seller's REAR key fingerprint.
    pub seller_key: String,
    /// The seller's Liqo cluster ID, once known.
    pub seller_cluster_id: Option<String>,
}

/// Issues the base64 kubeconfig of this cluster for an [`OffloadingGrant`]
/// (the same one while it is fresh), or says why not.
pub type OffloadingIssuer = std::sync::Arc<
    dyn Fn(
            OffloadingGrant,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send>>
        + Send
        + Sync,
>;

/// How this node delivers the Services it sells and asks for the ones it buys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceDelivery {
    /// Endpoints and credentials over REAR (mode b).
    #[default]
    Rear,
    /// The service namespace offloaded to the buyer by Liqo (mode a).
    Liqo,
}

impl fmt::Display for ServiceDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceDelivery::Rear => "rear",
            ServiceDelivery::Liqo => LIQO,
        })
    }
}

impl FromStr for ServiceDelivery {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rear" => Ok(ServiceDelivery::Rear),
            LIQO => Ok(ServiceDelivery::Liqo),
            other => Err(format!(
                "{other:?} is no service delivery: expected `rear` or `liqo`"
            )),
        }
    }
}

/// True when the seller delivers this Contract's service by Liqo.
pub fn by_liqo(spec: &ContractSpec) -> bool {
    spec.extra_information
        .as_ref()
        .and_then(|x| x.get(EXTRA_KEY))
        .is_some_and(|v| v == LIQO)
}

/// True for this node's copy of a Service it bought and asked to be
/// delivered by Liqo, which its seller agreed to: the buyer's own label
/// ([`DELIVERY_LABEL`], set at the purchase only when this node sent a
/// kubeconfig, taken back when the delivery ends) besides the seller's
/// word. Everything the buyer grants the seller keys on this.
pub fn bought_by_liqo(contract: &Contract) -> bool {
    use kube::ResourceExt as _;
    contract.spec.flavor.spec.flavor_type.identifier() == Some(FlavorTypeIdentifier::Service)
        && by_liqo(&contract.spec)
        && contract
            .labels()
            .get(DELIVERY_LABEL)
            .is_some_and(|v| v == LIQO)
}

/// The node ID the buyer's account for the seller of `contract` is named
/// after: the flavor's owner, as the purchase saw it (else the seller).
pub fn seller_node_id(contract: &Contract) -> &str {
    let owner = &contract.spec.flavor.spec.owner.node_id;
    if owner.is_empty() {
        &contract.spec.seller.node_id
    } else {
        owner
    }
}

/// The `extraInformation` entry of a Contract delivered by Liqo.
pub fn extra_information() -> BTreeMap<String, String> {
    BTreeMap::from([(EXTRA_KEY.to_owned(), LIQO.to_owned())])
}

/// `<prefix><contract>`, cut with a hash of the whole contract name when
/// longer than an object name may be.
fn derived_name(prefix: &str, contract: &str) -> String {
    let name = format!("{prefix}{contract}");
    if name.len() <= MAX_NAME {
        return name;
    }
    let keep = MAX_NAME - prefix.len() - 1 - HASH_LEN;
    let head = contract.get(..keep).unwrap_or_default();
    let head = head.trim_end_matches(['-', '.']);
    format!("{prefix}{head}-{}", hash_prefix(contract, HASH_LEN))
}

/// The seller's Secret holding the kubeconfig the buyer sent for `contract`.
pub fn buyer_credentials_secret(contract: &str) -> String {
    derived_name("buyer-credentials-", contract)
}

/// The seller's Allocation driving the reverse peering of `contract`.
pub fn offloading_allocation(contract: &str) -> String {
    derived_name("offloading-", contract)
}

/// Where the pods of the Service sold in `spec` run: the buyer's
/// `hostingPolicy`, else the flavor's first policy, else `Provider` (the Go
/// node's `ForgeHostingPolicyFromContract`, which reads the blueprint the
/// flavor is made from; the flavor lists the blueprint's policies). Both
/// sides read it from their copy of the Contract, so they agree on the
/// slice the seller's pods get.
pub fn hosting_policy(spec: &ContractSpec) -> HostingPolicy {
    policy_from(
        spec.configuration.as_ref(),
        Some(&spec.flavor.spec.flavor_type),
    )
}

/// The hosting policy of a service `configuration` for a flavor of type
/// `flavor_type` (unknown: `None`): the configuration's, else the flavor's
/// first, else `Provider`. The buyer checks with it that a seller's
/// Contract says what it bought.
pub fn policy_from(
    configuration: Option<&Configuration>,
    flavor_type: Option<&FlavorType>,
) -> HostingPolicy {
    asked_hosting_policy(configuration)
        .or_else(|| match flavor_type.map(FlavorType::parse) {
            Some(Ok(FlavorTypeData::Service(s))) => s.hosting_policies.first().copied(),
            _ => None,
        })
        .unwrap_or(HostingPolicy::Provider)
}

/// The hosting policy a buyer's service configuration asks for, if any.
pub fn asked_hosting_policy(configuration: Option<&Configuration>) -> Option<HostingPolicy> {
    configuration
        .and_then(|c| c.parse("configuration").ok())
        .and_then(|c| match c {
            ConfigurationData::Service(s) => s.hosting_policy,
            ConfigurationData::K8Slice(_) | ConfigurationData::Unparsed(_) => None,
        })
}

/// Liqo's `podOffloadingStrategy` for a hosting policy (upstream's mapping):
/// the service's pods on the seller, on the buyer, or on either.
pub fn pod_offloading_strategy(policy: HostingPolicy) -> &'static str {
    match policy {
        HostingPolicy::Provider => "Local",
        HostingPolicy::Consumer => "Remote",
        HostingPolicy::Shared => "LocalAndRemote",
    }
}

/// Whether the service's pods may run on the buyer's cluster.
pub fn pods_on_buyer(policy: HostingPolicy) -> bool {
    policy != HostingPolicy::Provider
}

/// What the buyer's cluster grants the seller's slice for a service of
/// `policy`, whatever the seller asks for (the seller asks for the same).
/// `Provider`: the pods stay on the seller, so the virtual node only needs
/// to exist; it is still a grant of compute (the seller, Liqo's consumer
/// here, could offload pods of its own up to it), so it is the least a
/// virtual node is made with. `Consumer`, `Shared`: the service's pods run
/// here, within the Go node's fixed slice for services (800m CPU, 800M,
/// 10 pods): a service asking more stays unschedulable, and its Allocation
/// says so.
pub fn offloading_resources(policy: HostingPolicy) -> BTreeMap<String, String> {
    let (cpu, memory, pods) = if pods_on_buyer(policy) {
        ("800m", "800M", "10")
    } else {
        ("100m", "128Mi", "1")
    };
    BTreeMap::from([
        ("cpu".to_owned(), cpu.to_owned()),
        ("memory".to_owned(), memory.to_owned()),
        ("pods".to_owned(), pods.to_owned()),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_mode_reads_and_prints_as_the_flag_takes_it() {
        for m in [ServiceDelivery::Rear, ServiceDelivery::Liqo] {
            assert_eq!(m.to_string().parse::<ServiceDelivery>().unwrap(), m);
        }
        assert!(
            "Liqo"
                .parse::<ServiceDelivery>()
                .unwrap_err()
                .contains("`liqo`")
        );
    }

    fn contract(service: bool, extra: bool, label: Option<&str>) -> Contract {
        let type_id = if service { "Service" } else { "K8Slice" };
        let mut c: Contract = serde_json::from_value(serde_json::json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "c"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": type_id, "typeData": {}},
                    "owner": {"domain": "d", "nodeID": "owner", "ip": "i"}, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                "buyerClusterID": "b", "seller": {"domain": "d", "nodeID": "s", "ip": "i"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}}))
        .unwrap();
        if extra {
            c.spec.extra_information = Some(extra_information());
        }
        if let Some(v) = label {
            c.metadata.labels = Some([(DELIVERY_LABEL.to_owned(), v.to_owned())].into());
        }
        c
    }

    #[test]
    fn the_buyer_keys_on_its_own_mark_besides_the_sellers_word() {
        assert!(bought_by_liqo(&contract(true, true, Some(LIQO))));
        // The seller's word alone, the delivery ended, or no Service.
        assert!(!bought_by_liqo(&contract(true, true, None)));
        assert!(!bought_by_liqo(&contract(true, true, Some(ENDED))));
        assert!(!bought_by_liqo(&contract(true, false, Some(LIQO))));
        assert!(!bought_by_liqo(&contract(false, true, Some(LIQO))));
        // The account is named after the flavor's owner, as at the purchase.
        let mut c = contract(true, true, None);
        assert_eq!(seller_node_id(&c), "owner");
        c.spec.flavor.spec.owner.node_id.clear();
        assert_eq!(seller_node_id(&c), "s");
    }

    #[test]
    fn the_hosting_policy_is_the_buyers_else_the_flavors_first_else_provider() {
        let mut c = contract(true, true, Some(LIQO));
        assert_eq!(hosting_policy(&c.spec), HostingPolicy::Provider);
        c.spec.flavor.spec.flavor_type.type_data = serde_json::json!({
            "name": "mq", "description": "", "category": "message-queue", "tags": [],
            "hostingPolicies": ["Consumer", "Provider"], "configurationTemplate": {}
        });
        assert_eq!(hosting_policy(&c.spec), HostingPolicy::Consumer);
        c.spec.configuration = Some(Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"hostingPolicy": "Shared", "configurationData": {}}),
        });
        assert_eq!(hosting_policy(&c.spec), HostingPolicy::Shared);
        // A configuration without a policy leaves the flavor's default.
        c.spec.configuration = Some(Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"configurationData": {}}),
        });
        assert_eq!(hosting_policy(&c.spec), HostingPolicy::Consumer);
    }

    #[test]
    fn pods_on_the_buyer_get_the_go_nodes_service_slice_and_the_strategy() {
        assert_eq!(pod_offloading_strategy(HostingPolicy::Provider), "Local");
        assert_eq!(pod_offloading_strategy(HostingPolicy::Consumer), "Remote");
        assert_eq!(
            pod_offloading_strategy(HostingPolicy::Shared),
            "LocalAndRemote"
        );
        assert_eq!(offloading_resources(HostingPolicy::Provider)["pods"], "1");
        for p in [HostingPolicy::Consumer, HostingPolicy::Shared] {
            let r = offloading_resources(p);
            assert_eq!(
                (r["cpu"].as_str(), r["memory"].as_str(), r["pods"].as_str()),
                ("800m", "800M", "10")
            );
        }
    }

    #[test]
    fn reported_messages_are_bounded_on_a_character() {
        assert_eq!(bounded_message("short"), "short");
        let long = "é".repeat(SERVICE_MESSAGE_MAX);
        let cut = bounded_message(&long);
        assert!(cut.len() <= SERVICE_MESSAGE_MAX && cut.len() >= SERVICE_MESSAGE_MAX - 1);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn derived_names_stay_object_names() {
        assert_eq!(offloading_allocation("c-1"), "offloading-c-1");
        assert_eq!(buyer_credentials_secret("c-1"), "buyer-credentials-c-1");
        let long = "a".repeat(250);
        let a = offloading_allocation(&long);
        let b = offloading_allocation(&format!("{}b", "a".repeat(249)));
        assert!(a.len() <= MAX_NAME && b.len() <= MAX_NAME);
        assert_ne!(a, b);
    }
}

//! Delivery by Liqo (mode a), the seller's part: for a Service sold to be
//! delivered by Liqo (`fluidos_api::service_delivery`), besides the service
//! itself, the provider controller makes
//! - the companion Allocation `offloading-<contract>`, which the peering
//!   controller (`fluidos-peering`) drives as Liqo's consumer of the buyer
//!   with the kubeconfig the buyer sent, and releases when the Contract
//!   ends; owned by the Contract, so it goes with it;
//! - the NamespaceOffloading `offloading` in the service namespace (Liqo
//!   mirrors the namespace into the buyer's cluster and reflects its
//!   Services and Secrets there): the namespace keeps its name, towards the
//!   buyer's cluster only, the pods where the hosting policy says. It goes
//!   with the service namespace. When the pods may run on the buyer, the
//!   service's objects are applied only once Liqo has enabled the
//!   namespace for remote scheduling ([`SCHEDULING_LABEL`]): Liqo places
//!   only the pods created after that.
//!
//! The objects are built here (pure); the provider controller creates them
//! (create-or-adopt).

use fluidos_api::allocation::AllocationSpec;
use fluidos_api::common::HostingPolicy;
use fluidos_api::service_delivery::{self, OFFLOADING_FOR_ANNOTATION, OFFLOADING_NAME};
use fluidos_api::{Allocation, Contract, GenericRef};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// Liqo's label naming a virtual node's remote cluster.
const REMOTE_CLUSTER_ID_LABEL: &str = "liqo.io/remote-cluster-id";
/// The label Liqo puts on a namespace whose NamespaceOffloading lets pods
/// run remotely; its pod webhook places only pods of namespaces so labelled.
pub const SCHEDULING_LABEL: &str = "liqo.io/scheduling-enabled";

/// Whether Liqo has enabled `namespace` for remote scheduling.
pub fn remote_scheduling_enabled(namespace: &k8s_openapi::api::core::v1::Namespace) -> bool {
    namespace
        .labels()
        .get(SCHEDULING_LABEL)
        .is_some_and(|v| v == "true")
}

/// True for a Contract whose service this node delivers by Liqo.
pub fn by_liqo(contract: &Contract) -> bool {
    service_delivery::by_liqo(&contract.spec)
}

/// The companion Allocation driving the reverse peering of `contract`
/// (which must have its UID, to own it).
pub fn companion_allocation(contract: &Contract) -> Option<Allocation> {
    let name = contract.name_any();
    let uid = contract.uid()?;
    let namespace = contract.namespace();
    Some(Allocation {
        metadata: ObjectMeta {
            name: Some(service_delivery::offloading_allocation(&name)),
            namespace: namespace.clone(),
            annotations: Some([(OFFLOADING_FOR_ANNOTATION.to_owned(), name.clone())].into()),
            owner_references: Some(vec![fluidos_api::peering_credentials::owner_reference(
                &name, &uid,
            )]),
            ..Default::default()
        },
        spec: AllocationSpec {
            forwarding: Some(false),
            contract: Some(GenericRef {
                name: Some(name),
                namespace,
                api_version: Some(Contract::api_version(&()).into_owned()),
                kind: Some(Contract::kind(&()).into_owned()),
            }),
        },
        status: None,
    })
}

/// The API resource of Liqo's NamespaceOffloading.
pub fn namespace_offloading_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceOffloading"),
        "namespaceoffloadings",
    )
}

/// The NamespaceOffloading of the service namespace `namespace`, towards
/// the buyer's cluster `buyer_cluster` only, its pods placed as the hosting
/// policy says (upstream's mapping: `Provider` keeps them here, `Consumer`
/// puts them on the buyer's virtual node only, `Shared` on either).
pub fn namespace_offloading(
    namespace: &str,
    buyer_cluster: &str,
    policy: HostingPolicy,
) -> DynamicObject {
    let mut o =
        DynamicObject::new(OFFLOADING_NAME, &namespace_offloading_resource()).within(namespace);
    o.data = json!({"spec": {
        "namespaceMappingStrategy": "EnforceSameName",
        "podOffloadingStrategy": service_delivery::pod_offloading_strategy(policy),
        "clusterSelector": {"nodeSelectorTerms": [{"matchExpressions": [{
            "key": REMOTE_CLUSTER_ID_LABEL,
            "operator": "In",
            "values": [buyer_cluster],
        }]}]},
    }});
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn contract(uid: Option<&str>) -> Contract {
        let identity = json!({"domain": "d", "nodeID": "p", "ip": "10.0.0.1:30000"});
        let mut c: Contract = serde_json::from_value(json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "contract-x", "namespace": "fluidos"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": "Service", "typeData": {}},
                    "owner": identity, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t", "buyer": identity, "buyerClusterID": "buyer-1",
                "seller": identity,
                "extraInformation": {"fluidos.eu/service-delivery": "liqo"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}}))
        .unwrap();
        c.metadata.uid = uid.map(str::to_owned);
        c
    }

    #[test]
    fn the_companion_allocation_names_its_contract_and_goes_with_it() {
        assert!(by_liqo(&contract(None)));
        assert!(companion_allocation(&contract(None)).is_none());
        let a = companion_allocation(&contract(Some("u-1"))).unwrap();
        assert_eq!(a.name_any(), "offloading-contract-x");
        assert_eq!(a.namespace().as_deref(), Some("fluidos"));
        assert_eq!(
            a.annotations()
                .get(OFFLOADING_FOR_ANNOTATION)
                .map(String::as_str),
            Some("contract-x")
        );
        assert_eq!(a.owner_references()[0].uid, "u-1");
        assert_eq!(a.owner_references()[0].kind, "Contract");
        let c = a.spec.contract.unwrap();
        assert_eq!(c.name.as_deref(), Some("contract-x"));
        // Not the gateway's: the provider controller leaves it alone.
        assert!(!crate::is_provider_side(
            &companion_allocation(&contract(Some("u"))).unwrap()
        ));
    }

    #[test]
    fn the_offloading_keeps_the_name_and_selects_the_buyer_only() {
        let o = namespace_offloading("contract-x", "buyer-1", HostingPolicy::Provider);
        assert_eq!(o.name_any(), "offloading");
        assert_eq!(o.namespace().as_deref(), Some("contract-x"));
        assert_eq!(
            o.data["spec"]["namespaceMappingStrategy"],
            "EnforceSameName"
        );
        assert_eq!(o.data["spec"]["podOffloadingStrategy"], "Local");
        let term =
            &o.data["spec"]["clusterSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0];
        assert_eq!(term["key"], REMOTE_CLUSTER_ID_LABEL);
        assert_eq!(term["values"], json!(["buyer-1"]));
        for (policy, strategy) in [
            (HostingPolicy::Consumer, "Remote"),
            (HostingPolicy::Shared, "LocalAndRemote"),
        ] {
            let o = namespace_offloading("contract-x", "buyer-1", policy);
            assert_eq!(o.data["spec"]["podOffloadingStrategy"], strategy);
        }
    }
}

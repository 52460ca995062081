//! `Flavor` (nodecore.fluidos.eu/v1alpha1) and its typed payloads.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{FlavorTypeIdentifier, HostingPolicy, Location, NodeIdentity, Price};
use crate::error::DecodeError;
use crate::quantity;
use crate::raw::{self, RawObject};

/// What a node offers for sale: a K8Slice compute slice or a Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "nodecore.fluidos.eu",
    version = "v1alpha1",
    kind = "Flavor",
    namespaced,
    status = "FlavorStatus",
    shortname = "fl",
    doc = "Flavor is the Schema for the flavors API.",
    printcolumn(name = "Provider ID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".spec.flavorType.typeIdentifier"
    ),
    printcolumn(
        name = "Owner Name",
        type_ = "string",
        json_path = ".spec.owner.nodeID",
        priority = 1
    ),
    printcolumn(
        name = "Available",
        type_ = "boolean",
        json_path = ".spec.availability"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Kubernetes Node Owner",
        type_ = "string",
        json_path = ".metadata.ownerReferences[0].name"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FlavorSpec {
    /// NodeID of the node that sells the flavor.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Discriminated union of the flavor's type and payload.
    pub flavor_type: FlavorType,
    /// Identity of the owning node.
    pub owner: NodeIdentity,
    /// Price model.
    pub price: Price,
    /// True while the flavor can be sold.
    pub availability: bool,
    /// Network property type (upstream writes the constant `networkProperty`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_property_type: Option<String>,
    /// Where the resources are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

/// Flavor status; upstream never writes it, but embedded copies carry all three keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorStatus {
    /// When the flavor stops being valid.
    pub expiration_time: String,
    /// When the flavor was created.
    pub creation_time: String,
    /// When the flavor was last updated.
    pub last_update_time: String,
    /// Holds and sales against this flavor (beyond upstream; see [`crate::ledger`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Vec<crate::ledger::LedgerEntry>>,
}

/// `flavorType`: a type identifier and its raw payload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorType {
    /// `K8Slice`, `Service` (`VM`, `Sensor` exist upstream but are rejected).
    // An `enum` rather than a CEL rule: the same check, but CEL costs the API
    // server about a millisecond on every write of a Flavor (and of the
    // Contracts and candidates embedding one), which sits on REAR's hot path.
    #[schemars(extend("enum" = ["K8Slice", "Service"]))]
    pub type_identifier: String,
    /// Payload selected by `typeIdentifier`.
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub type_data: RawObject,
}

/// A decoded `flavorType`.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // decoded once per use; boxing buys nothing
pub enum FlavorTypeData {
    /// A compute slice.
    K8Slice(K8Slice),
    /// A software service.
    Service(ServiceFlavor),
}

impl FlavorType {
    /// A K8Slice flavor type.
    pub fn k8slice(data: &K8Slice) -> Self {
        FlavorType {
            type_identifier: FlavorTypeIdentifier::K8Slice.as_str().to_owned(),
            type_data: serde_json::to_value(data).unwrap_or_else(|_| raw::empty_object()),
        }
    }

    /// A Service flavor type.
    pub fn service(data: &ServiceFlavor) -> Self {
        FlavorType {
            type_identifier: FlavorTypeIdentifier::Service.as_str().to_owned(),
            type_data: serde_json::to_value(data).unwrap_or_else(|_| raw::empty_object()),
        }
    }

    /// The identifier, when it is one of the four known ones.
    pub fn identifier(&self) -> Option<FlavorTypeIdentifier> {
        FlavorTypeIdentifier::from_crd(&self.type_identifier)
    }

    /// Decodes `typeData` as upstream's `ParseFlavorType` does, with field-naming errors.
    pub fn parse(&self) -> Result<FlavorTypeData, DecodeError> {
        const FIELD: &str = "spec.flavorType.typeData";
        match self.identifier() {
            Some(FlavorTypeIdentifier::K8Slice) => {
                let k: K8Slice = raw::decode(FIELD, &self.type_data)?;
                k.validate(FIELD)?;
                Ok(FlavorTypeData::K8Slice(k))
            }
            Some(FlavorTypeIdentifier::Service) => {
                let s: ServiceFlavor = raw::decode(FIELD, &self.type_data)?;
                if !s.configuration_template.is_object() {
                    return Err(DecodeError::new(
                        format!("{FIELD}.configurationTemplate"),
                        "must be a JSON Schema object",
                    ));
                }
                Ok(FlavorTypeData::Service(s))
            }
            Some(other) => Err(DecodeError::new(
                "spec.flavorType.typeIdentifier",
                format!("flavor type {other} is not supported"),
            )),
            None => Err(DecodeError::new(
                "spec.flavorType.typeIdentifier",
                format!("unknown flavor type {:?}", self.type_identifier),
            )),
        }
    }
}

/// K8Slice payload: characteristics, properties and policies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct K8Slice {
    /// Resources offered.
    pub characteristics: K8SliceCharacteristics,
    /// Non-resource properties; may be `{}`.
    #[serde(default)]
    pub properties: Properties,
    /// Partitionability rules.
    #[serde(default)]
    pub policies: Policies,
}

impl K8Slice {
    /// Checks that every quantity parses and every network intent selector is known.
    pub fn validate(&self, field: &str) -> Result<(), DecodeError> {
        let c = &self.characteristics;
        let base = format!("{field}.characteristics");
        let mut quantities = vec![("cpu", &c.cpu), ("memory", &c.memory), ("pods", &c.pods)];
        if let Some(s) = &c.storage {
            quantities.push(("storage", s));
        }
        if let Some(g) = &c.gpu {
            quantities.push(("gpu.cores", &g.cores));
            quantities.push(("gpu.memory", &g.memory));
        }
        for (name, q) in quantities {
            quantity::Amount::of(q)
                .map_err(|e| DecodeError::new(format!("{base}.{name}"), e.to_string()))?;
        }
        let p = &self.policies.partitionability;
        for (name, q) in p.named() {
            quantity::Amount::of(q).map_err(|e| {
                DecodeError::new(
                    format!("{field}.policies.partitionability.{name}"),
                    e.to_string(),
                )
            })?;
        }
        if let Some(auth) = &self.properties.network_authorizations {
            for (list, intents) in [
                ("deniedCommunications", &auth.denied_communications),
                ("mandatoryCommunications", &auth.mandatory_communications),
            ] {
                for (i, intent) in intents.iter().flatten().enumerate() {
                    let at = format!("{field}.properties.networkAuthorizations.{list}[{i}]");
                    intent
                        .source
                        .resource_selector
                        .parse(&format!("{at}.source"))?;
                    intent
                        .destination
                        .resource_selector
                        .parse(&format!("{at}.destination"))?;
                }
            }
        }
        Ok(())
    }
}

/// Resources offered by a K8Slice flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct K8SliceCharacteristics {
    /// CPU architecture, e.g. `amd64`.
    pub architecture: String,
    /// Available CPU.
    #[serde(deserialize_with = "quantity::lenient")]
    pub cpu: Quantity,
    /// Available memory.
    #[serde(deserialize_with = "quantity::lenient")]
    pub memory: Quantity,
    /// Available pod slots.
    #[serde(deserialize_with = "quantity::lenient")]
    pub pods: Quantity,
    /// GPU offered, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// Storage offered, if any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "quantity::lenient_opt"
    )]
    pub storage: Option<Quantity>,
}

/// GPU characteristics.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Gpu {
    /// GPU model name.
    #[serde(default)]
    pub model: String,
    /// GPU cores (count of GPUs upstream).
    #[serde(deserialize_with = "quantity::lenient")]
    pub cores: Quantity,
    /// GPU memory.
    #[serde(deserialize_with = "quantity::lenient")]
    pub memory: Quantity,
}

/// Non-resource properties of a K8Slice.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Properties {
    /// Latency in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<i64>,
    /// Security standards met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_standards: Option<Vec<String>>,
    /// Carbon footprint; the CRD key has a hyphen (the wire key does not).
    #[serde(
        rename = "carbon-footprint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub carbon_footprint: Option<CarbonFootprint>,
    /// Allowed and required network communications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_authorizations: Option<NetworkAuthorizations>,
    /// Free-form extra properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_properties: Option<BTreeMap<String, serde_json::Value>>,
}

/// Carbon footprint of the hardware.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CarbonFootprint {
    /// Embodied emissions.
    #[serde(default)]
    pub embodied: i64,
    /// Operational emissions per period.
    #[serde(default)]
    pub operational: Option<Vec<i64>>,
}

/// Network intents attached to a K8Slice.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAuthorizations {
    /// Communications that must be denied.
    #[serde(default)]
    pub denied_communications: Option<Vec<NetworkIntent>>,
    /// Communications that must be allowed.
    #[serde(default)]
    pub mandatory_communications: Option<Vec<NetworkIntent>>,
}

/// One network intent (CRD form).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkIntent {
    /// Intent name.
    #[serde(default)]
    pub name: String,
    /// Where traffic comes from.
    #[serde(default)]
    pub source: SourceDestination,
    /// Where traffic goes.
    #[serde(default)]
    pub destination: SourceDestination,
    /// Destination port.
    #[serde(default)]
    pub destination_port: String,
    /// Protocol, e.g. `TCP`.
    #[serde(default)]
    pub protocol_type: String,
}

/// One end of a network intent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceDestination {
    /// True when this end is the hot cluster.
    #[serde(default)]
    pub is_hot_cluster: bool,
    /// Which pods or addresses this end is.
    #[serde(default)]
    pub resource_selector: ResourceSelector,
}

/// Discriminated union selecting pods/namespaces or a CIDR.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// `PodNamespaceSelector` or `CIDRSelector`.
    #[serde(default)]
    pub type_identifier: String,
    /// Payload selected by `typeIdentifier`.
    #[serde(default)]
    pub selector: serde_json::Value,
}

/// A decoded resource selector.
#[derive(Clone, Debug, PartialEq)]
pub enum ResourceSelectorData {
    /// Pods and namespaces by labels.
    PodNamespace {
        /// Pod labels.
        pod: BTreeMap<String, String>,
        /// Namespace labels.
        namespace: BTreeMap<String, String>,
    },
    /// A CIDR such as `10.0.0.0/16`.
    Cidr(String),
}

impl ResourceSelector {
    /// Decodes the selector; an unknown `typeIdentifier` is an error, as upstream.
    pub fn parse(&self, field: &str) -> Result<ResourceSelectorData, DecodeError> {
        #[derive(Deserialize)]
        struct PodNs {
            #[serde(default)]
            pod: BTreeMap<String, String>,
            #[serde(default)]
            namespace: BTreeMap<String, String>,
        }
        let at = format!("{field}.resourceSelector.selector");
        match self.type_identifier.as_str() {
            "PodNamespaceSelector" => {
                let p: PodNs = raw::decode(&at, &self.selector)?;
                Ok(ResourceSelectorData::PodNamespace {
                    pod: p.pod,
                    namespace: p.namespace,
                })
            }
            "CIDRSelector" => Ok(ResourceSelectorData::Cidr(raw::decode(
                &at,
                &self.selector,
            )?)),
            other => Err(DecodeError::new(
                format!("{field}.resourceSelector.typeIdentifier"),
                format!("unknown resource selector type {other:?}"),
            )),
        }
    }
}

/// Policies of a K8Slice.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// How the slice may be split when sold.
    #[serde(default)]
    pub partitionability: Partitionability,
}

/// Minimum and step of each resource a buyer may take.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Partitionability {
    /// Minimum CPU per purchase.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub cpu_min: Quantity,
    /// Minimum memory per purchase.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub memory_min: Quantity,
    /// Minimum pods per purchase.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub pods_min: Quantity,
    /// Minimum GPUs per purchase.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub gpu_min: Quantity,
    /// CPU granularity.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub cpu_step: Quantity,
    /// Memory granularity.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub memory_step: Quantity,
    /// Pods granularity.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub pods_step: Quantity,
    /// GPU granularity.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub gpu_step: Quantity,
}

fn zero() -> Quantity {
    Quantity("0".into())
}

impl Default for Partitionability {
    fn default() -> Self {
        Partitionability {
            cpu_min: zero(),
            memory_min: zero(),
            pods_min: zero(),
            gpu_min: zero(),
            cpu_step: zero(),
            memory_step: zero(),
            pods_step: zero(),
            gpu_step: zero(),
        }
    }
}

impl Partitionability {
    /// Each quantity with its JSON key.
    pub fn named(&self) -> [(&'static str, &Quantity); 8] {
        [
            ("cpuMin", &self.cpu_min),
            ("memoryMin", &self.memory_min),
            ("podsMin", &self.pods_min),
            ("gpuMin", &self.gpu_min),
            ("cpuStep", &self.cpu_step),
            ("memoryStep", &self.memory_step),
            ("podsStep", &self.pods_step),
            ("gpuStep", &self.gpu_step),
        ]
    }
}

/// Service payload: what a ServiceBlueprint offers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceFlavor {
    /// Blueprint `spec.name`.
    pub name: String,
    /// Human description.
    pub description: String,
    /// Category, e.g. `database`, `message-queue`.
    pub category: String,
    /// Tags used by filters.
    pub tags: Vec<String>,
    /// Allowed hosting policies; the first is the default.
    pub hosting_policies: Vec<HostingPolicy>,
    /// JSON Schema (draft-07) of the allowed `configurationData`.
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub configuration_template: RawObject,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k8slice_json() -> serde_json::Value {
        serde_json::json!({
            "characteristics": {"architecture": "amd64", "cpu": "3876543211n",
                "memory": "6765433Ki", "pods": 110,
                "gpu": {"model": "", "cores": "0", "memory": "0"}, "storage": "0"},
            "properties": {},
            "policies": {"partitionability": {"cpuMin": "0", "memoryMin": "0", "podsMin": "0",
                "gpuMin": "0", "cpuStep": "1", "memoryStep": "100Mi", "podsStep": "0", "gpuStep": "0"}}
        })
    }

    #[test]
    fn decodes_k8slice_type_data() {
        let ft = FlavorType {
            type_identifier: "K8Slice".into(),
            type_data: k8slice_json(),
        };
        let FlavorTypeData::K8Slice(k) = ft.parse().unwrap() else {
            panic!("not a K8Slice")
        };
        assert_eq!(k.characteristics.pods.0, "110");
        assert_eq!(k.policies.partitionability.memory_step.0, "100Mi");
    }

    #[test]
    fn decode_errors_name_the_field() {
        let mut v = k8slice_json();
        v["characteristics"]["cpu"] = serde_json::json!({"oops": 1});
        let ft = FlavorType {
            type_identifier: "K8Slice".into(),
            type_data: v,
        };
        let err = ft.parse().unwrap_err();
        assert_eq!(err.field, "spec.flavorType.typeData.characteristics.cpu");

        let mut v = k8slice_json();
        v["characteristics"]["memory"] = serde_json::json!("lots");
        let err = FlavorType {
            type_identifier: "K8Slice".into(),
            type_data: v,
        }
        .parse()
        .unwrap_err();
        assert_eq!(err.field, "spec.flavorType.typeData.characteristics.memory");
        assert!(err.message.contains("invalid quantity"), "{err}");
    }

    #[test]
    fn vm_and_unknown_types_are_rejected() {
        for t in ["VM", "Sensor", "Toaster"] {
            let err = FlavorType {
                type_identifier: t.into(),
                type_data: serde_json::json!({}),
            }
            .parse()
            .unwrap_err();
            assert_eq!(err.field, "spec.flavorType.typeIdentifier");
        }
    }

    #[test]
    fn unknown_network_selector_is_rejected() {
        let mut v = k8slice_json();
        v["properties"] = serde_json::json!({"networkAuthorizations": {
            "deniedCommunications": [{"name": "x",
                "source": {"isHotCluster": false, "resourceSelector": {"typeIdentifier": "Bogus", "selector": {}}},
                "destination": {"isHotCluster": false, "resourceSelector": {"typeIdentifier": "CIDRSelector", "selector": "10.0.0.0/16"}},
                "destinationPort": "80", "protocolType": "TCP"}],
            "mandatoryCommunications": null}});
        let err = FlavorType {
            type_identifier: "K8Slice".into(),
            type_data: v,
        }
        .parse()
        .unwrap_err();
        assert!(
            err.field
                .ends_with("deniedCommunications[0].source.resourceSelector.typeIdentifier"),
            "{err}"
        );
    }

    #[test]
    fn service_type_data_round_trips() {
        let s = ServiceFlavor {
            name: "db".into(),
            description: "d".into(),
            category: "database".into(),
            tags: vec!["mysql".into()],
            hosting_policies: vec![HostingPolicy::Provider],
            configuration_template: serde_json::json!({"type": "object"}),
        };
        let ft = FlavorType::service(&s);
        assert_eq!(ft.parse().unwrap(), FlavorTypeData::Service(s));
    }
}

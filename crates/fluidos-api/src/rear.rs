//! REAR wire models: the JSON FLUIDOS nodes exchange over HTTP.
//!
//! These differ from the CRD types in key names (`ID`/`IP`, `buyerID`,
//! `clusterID`, lower-case type names, the `charateristics` typo, `altitude`
//! for the country). Field order is the Go node's, so `serde_json` output is
//! byte-compatible with it; the payloads under `type.data` and
//! `configuration.data` are typed by their sibling type name for the same
//! reason ([`WireFlavorData`], [`WireConfigurationData`]). Readers also
//! accept the corrected spellings. See `docs/rear-quirks.md` for each decision.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::common::{
    Configuration, FlavorTypeIdentifier, LiqoCredentials, Location, NodeIdentity,
    NodeIdentityAdditionalInfo, Price, TelemetryServer,
};
use crate::configuration::{ConfigurationData, K8SliceConfiguration, ServiceConfiguration};
use crate::embedded::{EmbeddedFlavor, EmbeddedObjectMeta};
use crate::error::DecodeError;
use crate::flavor::{
    CarbonFootprint, FlavorSpec, FlavorType, FlavorTypeData, Gpu, K8Slice, K8SliceCharacteristics,
    NetworkAuthorizations, NetworkIntent, Partitionability, Policies, Properties, ResourceSelector,
    ResourceSelectorData, ServiceFlavor, SourceDestination,
};
use crate::quantity;
use crate::raw::{self, RawObject};
use crate::reservation::ContractSpec;

/// Node identity on the wire: `ID`, `IP`, `domain`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WireNodeIdentity {
    /// Node ID.
    #[serde(rename = "ID", alias = "id", alias = "nodeID", default)]
    pub id: String,
    /// `host:port` of the REAR gateway.
    #[serde(rename = "IP", alias = "ip", default)]
    pub ip: String,
    /// FLUIDOS domain.
    #[serde(default)]
    pub domain: String,
    /// Liqo ID and, at RESERVE, the buyer's kubeconfig.
    #[serde(
        rename = "additionalInformation",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub additional_information: Option<WireAdditionalInfo>,
}

/// `additionalInformation` on the wire.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WireAdditionalInfo {
    /// Liqo cluster ID.
    #[serde(rename = "liqoID", default, skip_serializing_if = "Option::is_none")]
    pub liqo_id: Option<String>,
    /// Base64 kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
}

impl From<&NodeIdentity> for WireNodeIdentity {
    /// CR → wire copies only the Liqo ID, never a kubeconfig.
    fn from(n: &NodeIdentity) -> Self {
        WireNodeIdentity {
            id: n.node_id.clone(),
            ip: n.ip.clone(),
            domain: n.domain.clone(),
            additional_information: n.liqo_id().map(|l| WireAdditionalInfo {
                liqo_id: Some(l.to_owned()),
                kubeconfig: None,
            }),
        }
    }
}

impl WireNodeIdentity {
    /// Wire → CR keeps only the Liqo ID.
    pub fn to_crd(&self) -> NodeIdentity {
        NodeIdentity {
            domain: self.domain.clone(),
            node_id: self.id.clone(),
            ip: self.ip.clone(),
            additional_information: self.liqo_id().map(|l| NodeIdentityAdditionalInfo {
                liqo_id: Some(l.to_owned()),
            }),
        }
    }

    /// The Liqo ID, when present and non-empty.
    pub fn liqo_id(&self) -> Option<&str> {
        self.additional_information
            .as_ref()
            .and_then(|a| a.liqo_id.as_deref())
            .filter(|s| !s.is_empty())
    }
}

/// Location on the wire; the country travels under `altitude` (upstream quirk).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WireLocation {
    /// Latitude.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latitude: String,
    /// Longitude.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub longitude: String,
    /// The country (sic).
    #[serde(default, skip_serializing_if = "String::is_empty", alias = "country")]
    pub altitude: String,
    /// City.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub city: String,
    /// Notes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub additional_notes: String,
}

impl From<&Location> for WireLocation {
    fn from(l: &Location) -> Self {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        WireLocation {
            latitude: s(&l.latitude),
            longitude: s(&l.longitude),
            altitude: s(&l.country),
            city: s(&l.city),
            additional_notes: s(&l.additional_notes),
        }
    }
}

impl WireLocation {
    fn to_crd(&self) -> Location {
        let o = |s: &String| (!s.is_empty()).then(|| s.clone());
        Location {
            latitude: o(&self.latitude),
            longitude: o(&self.longitude),
            country: o(&self.altitude),
            city: o(&self.city),
            additional_notes: o(&self.additional_notes),
        }
    }
}

/// `type` of a wire flavor: lower-case name plus payload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(from = "UntypedFlavorType")]
pub struct WireFlavorType {
    /// `k8slice`, `vm`, `service`, `sensor`.
    pub name: String,
    /// The payload, typed by `name`.
    pub data: WireFlavorData,
}

/// `type.data` of a wire flavor.
///
/// Typed rather than a `serde_json::Value` so that serde writes the Go node's
/// field order (`charateristics, properties, policies`) instead of sorted keys.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per listed flavor, serialized once and cached; boxing buys nothing"
)]
pub enum WireFlavorData {
    /// `k8slice`.
    K8Slice(WireK8Slice),
    /// `service`.
    Service(ServiceFlavor),
    /// Another type, or a payload that does not decode: kept as received, so
    /// [`WireFlavor::parse_type`] can name the failing field.
    Raw(RawObject),
}

impl WireFlavorData {
    /// Types `data` by the sibling type name; anything else stays raw.
    pub fn decode(name: &str, data: RawObject) -> Self {
        let typed = match FlavorTypeIdentifier::from_wire(name) {
            Some(FlavorTypeIdentifier::K8Slice) => {
                WireK8Slice::deserialize(&data).map(WireFlavorData::K8Slice)
            }
            Some(FlavorTypeIdentifier::Service) => {
                ServiceFlavor::deserialize(&data).map(WireFlavorData::Service)
            }
            _ => return WireFlavorData::Raw(data),
        };
        // Typed only when nothing is lost: a key we do not model, or a
        // value the typed form would rewrite (`1` → `"1"`), keeps the
        // payload as sent.
        match typed {
            Ok(t) if to_raw(&t) == data => t,
            _ => WireFlavorData::Raw(data),
        }
    }

    /// The payload as a JSON value.
    pub fn to_raw(&self) -> RawObject {
        match self {
            WireFlavorData::Raw(v) => v.clone(),
            typed => to_raw(typed),
        }
    }
}

/// A wire flavor type before `data` is typed by `name`.
///
/// `Deserialize` goes through this because the payload's type is a sibling
/// field, which an untagged enum cannot see.
#[derive(Deserialize)]
struct UntypedFlavorType {
    name: String,
    #[serde(default = "raw::empty_object")]
    data: RawObject,
}

impl From<UntypedFlavorType> for WireFlavorType {
    fn from(u: UntypedFlavorType) -> Self {
        WireFlavorType {
            data: WireFlavorData::decode(&u.name, u.data),
            name: u.name,
        }
    }
}

/// A flavor as REAR lists it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireFlavor {
    /// The Flavor's name.
    #[serde(rename = "flavorID", alias = "flavorId")]
    pub flavor_id: String,
    /// Seller's node ID.
    #[serde(rename = "providerID", alias = "providerId", default)]
    pub provider_id: String,
    /// Type and payload.
    #[serde(rename = "type")]
    pub type_: WireFlavorType,
    /// Network property type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_property_type: Option<String>,
    /// Creation time, RFC 3339.
    #[serde(default)]
    pub timestamp: String,
    /// Location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<WireLocation>,
    /// Price.
    #[serde(default)]
    pub price: Price,
    /// Owner identity.
    #[serde(default)]
    pub owner: WireNodeIdentity,
    /// Can be sold.
    #[serde(default)]
    pub availability: bool,
}

/// K8Slice payload on the wire (`charateristics`, no GPU partitionability).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct WireK8Slice {
    /// Resources (the key is misspelled on the wire).
    #[serde(rename = "charateristics", alias = "characteristics")]
    pub characteristics: K8SliceCharacteristics,
    /// Properties.
    #[serde(default)]
    pub properties: WireProperties,
    /// Policies.
    #[serde(default)]
    pub policies: WirePolicies,
}

/// Properties on the wire (`carbonFootprint`, wire network intents).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireProperties {
    /// Latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<i64>,
    /// Security standards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_standards: Option<Vec<String>>,
    /// Carbon footprint.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "carbon-footprint"
    )]
    pub carbon_footprint: Option<CarbonFootprint>,
    /// Network intents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_authorizations: Option<WireNetworkAuthorizations>,
    /// Free-form properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_properties: Option<BTreeMap<String, serde_json::Value>>,
}

/// Network authorizations on the wire; both keys always written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireNetworkAuthorizations {
    /// Denied communications.
    #[serde(default)]
    pub denied_communications: Option<Vec<WireNetworkIntent>>,
    /// Mandatory communications.
    #[serde(default)]
    pub mandatory_communications: Option<Vec<WireNetworkIntent>>,
}

/// A network intent on the wire.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireNetworkIntent {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Source end.
    #[serde(default)]
    pub source: WireSourceDestination,
    /// Destination end.
    #[serde(default)]
    pub destination: WireSourceDestination,
    /// Port.
    #[serde(default)]
    pub destination_port: String,
    /// Protocol.
    #[serde(default)]
    pub protocol_type: String,
}

/// One end of a wire network intent (`resourceSelectors`, plural).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireSourceDestination {
    /// Hot cluster flag.
    #[serde(default)]
    pub is_hot_cluster: bool,
    /// Selector.
    #[serde(default, alias = "resourceSelector")]
    pub resource_selectors: ResourceSelector,
}

/// `{key, value}` pair of a wire PodNamespaceSelector.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// Label key.
    pub key: String,
    /// Label value.
    pub value: String,
}

/// Policies on the wire.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct WirePolicies {
    /// Partitionability without GPU fields.
    #[serde(default)]
    pub partitionability: WirePartitionability,
}

/// Partitionability on the wire: upstream drops `gpuMin`/`gpuStep`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WirePartitionability {
    /// Minimum CPU.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub cpu_min: Quantity,
    /// Minimum memory.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub memory_min: Quantity,
    /// Minimum pods.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub pods_min: Quantity,
    /// CPU step.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub cpu_step: Quantity,
    /// Memory step.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub memory_step: Quantity,
    /// Pods step.
    #[serde(default = "zero", deserialize_with = "quantity::lenient")]
    pub pods_step: Quantity,
}

impl Default for WirePartitionability {
    fn default() -> Self {
        WirePartitionability::from(&Partitionability::default())
    }
}

fn zero() -> Quantity {
    Quantity("0".into())
}

impl From<&Partitionability> for WirePartitionability {
    fn from(p: &Partitionability) -> Self {
        WirePartitionability {
            cpu_min: p.cpu_min.clone(),
            memory_min: p.memory_min.clone(),
            pods_min: p.pods_min.clone(),
            cpu_step: p.cpu_step.clone(),
            memory_step: p.memory_step.clone(),
            pods_step: p.pods_step.clone(),
        }
    }
}

fn intents_to_wire(list: &Option<Vec<NetworkIntent>>) -> Option<Vec<WireNetworkIntent>> {
    list.as_ref()
        .map(|l| l.iter().map(intent_to_wire).collect())
}

fn end_to_wire(e: &SourceDestination) -> WireSourceDestination {
    // Upstream mislabels PodNamespace selectors as CIDR and keeps the map shape;
    // we send the wire's list shape under the right label.
    let selector = match e.resource_selector.parse("") {
        Ok(ResourceSelectorData::PodNamespace { pod, namespace }) => {
            let kv = |m: BTreeMap<String, String>| {
                m.into_iter()
                    .map(|(key, value)| KeyValue { key, value })
                    .collect::<Vec<_>>()
            };
            ResourceSelector {
                type_identifier: "PodNamespaceSelector".into(),
                selector: serde_json::json!({ "pod": kv(pod), "namespace": kv(namespace) }),
            }
        }
        _ => e.resource_selector.clone(),
    };
    WireSourceDestination {
        is_hot_cluster: e.is_hot_cluster,
        resource_selectors: selector,
    }
}

fn intent_to_wire(i: &NetworkIntent) -> WireNetworkIntent {
    WireNetworkIntent {
        name: i.name.clone(),
        source: end_to_wire(&i.source),
        destination: end_to_wire(&i.destination),
        destination_port: i.destination_port.clone(),
        protocol_type: i.protocol_type.clone(),
    }
}

fn end_to_crd(e: &WireSourceDestination) -> SourceDestination {
    let sel = &e.resource_selectors;
    // Lists of {key, value} become maps; a map under either label (what Go
    // nodes emit) is taken as the PodNamespace selector it really is.
    let to_map = |v: &serde_json::Value| -> Option<BTreeMap<String, String>> {
        match v {
            serde_json::Value::Array(items) => Some(
                items
                    .iter()
                    .filter_map(|kv| serde_json::from_value::<KeyValue>(kv.clone()).ok())
                    .map(|kv| (kv.key, kv.value))
                    .collect(),
            ),
            serde_json::Value::Object(_) => serde_json::from_value(v.clone()).ok(),
            serde_json::Value::Null => Some(BTreeMap::new()),
            _ => None,
        }
    };
    let resource_selector = if sel.selector.is_object() {
        match (
            to_map(&sel.selector["pod"]),
            to_map(&sel.selector["namespace"]),
        ) {
            (Some(pod), Some(namespace)) => ResourceSelector {
                type_identifier: "PodNamespaceSelector".into(),
                selector: serde_json::json!({ "pod": pod, "namespace": namespace }),
            },
            _ => sel.clone(),
        }
    } else {
        sel.clone()
    };
    SourceDestination {
        is_hot_cluster: e.is_hot_cluster,
        resource_selector,
    }
}

fn intents_to_crd(list: &Option<Vec<WireNetworkIntent>>) -> Option<Vec<NetworkIntent>> {
    list.as_ref().map(|l| {
        l.iter()
            .map(|i| NetworkIntent {
                name: i.name.clone(),
                source: end_to_crd(&i.source),
                destination: end_to_crd(&i.destination),
                destination_port: i.destination_port.clone(),
                protocol_type: i.protocol_type.clone(),
            })
            .collect()
    })
}

impl From<&K8Slice> for WireK8Slice {
    fn from(k: &K8Slice) -> Self {
        let p = &k.properties;
        WireK8Slice {
            characteristics: k.characteristics.clone(),
            properties: WireProperties {
                latency: p.latency,
                security_standards: p.security_standards.clone(),
                carbon_footprint: p.carbon_footprint.clone(),
                network_authorizations: p.network_authorizations.as_ref().map(|n| {
                    WireNetworkAuthorizations {
                        denied_communications: intents_to_wire(&n.denied_communications),
                        mandatory_communications: intents_to_wire(&n.mandatory_communications),
                    }
                }),
                additional_properties: p.additional_properties.clone(),
            },
            policies: WirePolicies {
                partitionability: WirePartitionability::from(&k.policies.partitionability),
            },
        }
    }
}

impl WireK8Slice {
    /// Wire → CR; GPU partitionability, absent on the wire, becomes `0`.
    pub fn to_crd(&self) -> K8Slice {
        let p = &self.properties;
        let w = &self.policies.partitionability;
        K8Slice {
            characteristics: self.characteristics.clone(),
            properties: Properties {
                latency: p.latency,
                security_standards: p.security_standards.clone(),
                carbon_footprint: p.carbon_footprint.clone(),
                network_authorizations: p.network_authorizations.as_ref().map(|n| {
                    NetworkAuthorizations {
                        denied_communications: intents_to_crd(&n.denied_communications),
                        mandatory_communications: intents_to_crd(&n.mandatory_communications),
                    }
                }),
                additional_properties: p.additional_properties.clone(),
            },
            policies: Policies {
                partitionability: Partitionability {
                    cpu_min: w.cpu_min.clone(),
                    memory_min: w.memory_min.clone(),
                    pods_min: w.pods_min.clone(),
                    cpu_step: w.cpu_step.clone(),
                    memory_step: w.memory_step.clone(),
                    pods_step: w.pods_step.clone(),
                    ..Partitionability::default()
                },
            },
        }
    }
}

impl WireFlavor {
    /// CR → wire, as the provider lists it. `timestamp` is the creation time.
    pub fn from_crd(
        name: &str,
        spec: &FlavorSpec,
        timestamp: String,
    ) -> Result<WireFlavor, DecodeError> {
        let (type_name, data) = match spec.flavor_type.parse()? {
            FlavorTypeData::K8Slice(k) => (
                FlavorTypeIdentifier::K8Slice,
                WireFlavorData::K8Slice(WireK8Slice::from(&k)),
            ),
            FlavorTypeData::Service(s) => {
                (FlavorTypeIdentifier::Service, WireFlavorData::Service(s))
            }
        };
        Ok(WireFlavor {
            flavor_id: name.to_owned(),
            provider_id: spec.provider_id.clone(),
            type_: WireFlavorType {
                name: type_name.wire_name().to_owned(),
                data,
            },
            network_property_type: spec.network_property_type.clone(),
            timestamp,
            location: spec.location.as_ref().map(WireLocation::from),
            price: spec.price.clone(),
            owner: WireNodeIdentity::from(&spec.owner),
            availability: spec.availability,
        })
    }

    /// Decodes the payload by `type.name`.
    pub fn parse_type(&self) -> Result<FlavorTypeData, DecodeError> {
        const FIELD: &str = "flavor.type.data";
        let data = &self.type_.data;
        match FlavorTypeIdentifier::from_wire(&self.type_.name) {
            Some(FlavorTypeIdentifier::K8Slice) => {
                let k = match data {
                    WireFlavorData::K8Slice(w) => w.to_crd(),
                    _ => raw::decode::<WireK8Slice>(FIELD, &data.to_raw())?.to_crd(),
                };
                k.validate(FIELD)?;
                Ok(FlavorTypeData::K8Slice(k))
            }
            Some(FlavorTypeIdentifier::Service) => Ok(FlavorTypeData::Service(match data {
                WireFlavorData::Service(s) => s.clone(),
                _ => raw::decode(FIELD, &data.to_raw())?,
            })),
            _ => Err(DecodeError::new(
                "flavor.type.name",
                format!("flavor type {:?} is not supported", self.type_.name),
            )),
        }
    }

    /// Wire → the Flavor snapshot a consumer stores (PeeringCandidate, Contract).
    ///
    /// Unlike upstream this keeps the wire `providerID` (falling back to the
    /// owner) and a Service's `hostingPolicies`.
    pub fn to_embedded(&self, namespace: &str) -> Result<EmbeddedFlavor, DecodeError> {
        let flavor_type = match self.parse_type()? {
            FlavorTypeData::K8Slice(k) => FlavorType::k8slice(&k),
            FlavorTypeData::Service(s) => FlavorType::service(&s),
        };
        let owner = NodeIdentity {
            additional_information: None,
            ..self.owner.to_crd()
        };
        Ok(EmbeddedFlavor {
            api_version: Some("nodecore.fluidos.eu/v1alpha1".into()),
            kind: Some("Flavor".into()),
            metadata: EmbeddedObjectMeta {
                name: Some(self.flavor_id.clone()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            spec: FlavorSpec {
                provider_id: if self.provider_id.is_empty() {
                    owner.node_id.clone()
                } else {
                    self.provider_id.clone()
                },
                flavor_type,
                owner,
                price: self.price.clone(),
                availability: self.availability,
                network_property_type: self.network_property_type.clone(),
                location: self.location.as_ref().map(WireLocation::to_crd),
            },
            status: None,
        })
    }
}

fn to_raw<T: Serialize>(v: &T) -> RawObject {
    serde_json::to_value(v).unwrap_or_else(|_| raw::empty_object())
}

/// Configuration on the wire: lower-case `type`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(from = "UntypedConfiguration")]
pub struct WireConfiguration {
    /// `k8slice` or `service`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The payload, typed by `type`.
    pub data: WireConfigurationData,
}

/// `data` of a wire configuration, typed (like [`WireFlavorData`]) so that
/// serde writes the Go node's field order.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum WireConfigurationData {
    /// `k8slice`.
    K8Slice(K8SliceConfiguration),
    /// `service`.
    Service(ServiceConfiguration),
    /// Another type, or a payload that does not decode: kept as received, so
    /// [`WireConfiguration::to_crd`] can name the failing field.
    Raw(RawObject),
}

impl WireConfigurationData {
    /// Types `data` by the configuration's type; anything else stays raw.
    pub fn decode(t: Option<FlavorTypeIdentifier>, data: RawObject) -> Self {
        let typed = match t {
            Some(FlavorTypeIdentifier::K8Slice) => {
                K8SliceConfiguration::deserialize(&data).map(WireConfigurationData::K8Slice)
            }
            Some(FlavorTypeIdentifier::Service) => {
                ServiceConfiguration::deserialize(&data).map(WireConfigurationData::Service)
            }
            _ => return WireConfigurationData::Raw(data),
        };
        // Typed only when nothing is lost (see `WireFlavorData::decode`).
        match typed {
            Ok(c) if to_raw(&c) == data => c,
            _ => WireConfigurationData::Raw(data),
        }
    }

    /// The payload as a JSON value.
    pub fn to_raw(&self) -> RawObject {
        match self {
            WireConfigurationData::Raw(v) => v.clone(),
            typed => to_raw(typed),
        }
    }
}

/// A wire configuration before `data` is typed by `type` (see [`UntypedFlavorType`]).
#[derive(Deserialize)]
struct UntypedConfiguration {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default = "raw::empty_object")]
    data: RawObject,
}

impl From<UntypedConfiguration> for WireConfiguration {
    fn from(u: UntypedConfiguration) -> Self {
        WireConfiguration {
            data: WireConfigurationData::decode(FlavorTypeIdentifier::from_wire(&u.type_), u.data),
            type_: u.type_,
        }
    }
}

impl WireConfiguration {
    /// CR → wire.
    pub fn from_crd(c: &Configuration) -> Result<Self, DecodeError> {
        let t = FlavorTypeIdentifier::from_crd(&c.type_).ok_or_else(|| {
            DecodeError::new("configuration.type", format!("unknown type {:?}", c.type_))
        })?;
        Ok(WireConfiguration {
            type_: t.wire_name().to_owned(),
            data: WireConfigurationData::decode(Some(t), c.data.clone()),
        })
    }

    /// Wire → CR, validating the payload for its type.
    pub fn to_crd(&self) -> Result<(Configuration, ConfigurationData), DecodeError> {
        let t = FlavorTypeIdentifier::from_wire(&self.type_).ok_or_else(|| {
            DecodeError::new(
                "configuration.type",
                format!("configuration type {:?} not supported", self.type_),
            )
        })?;
        let crd = Configuration {
            type_: t.as_str().to_owned(),
            data: self.data.to_raw(),
        }
        .with_canonical_quantities("configuration")?;
        let parsed = crd.parse("configuration")?;
        Ok((crd, parsed))
    }
}

/// Body of `POST /api/v2/reservations`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReserveRequest {
    /// Flavor to reserve.
    #[serde(rename = "flavorID", alias = "flavorId")]
    pub flavor_id: String,
    /// The buyer (a whole identity under `buyerID`).
    #[serde(rename = "buyerID", alias = "buyer")]
    pub buyer: WireNodeIdentity,
    /// What to reserve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<WireConfiguration>,
}

/// A reservation held by the provider (RESERVE response).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireTransaction {
    /// `<32 hex>-<unix nanos>`.
    #[serde(rename = "transactionID")]
    pub transaction_id: String,
    /// The flavor reserved.
    #[serde(rename = "flavorID")]
    pub flavor_id: String,
    /// What was reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<WireConfiguration>,
    /// The buyer.
    #[serde(default)]
    pub buyer: WireNodeIdentity,
    /// The buyer's Liqo ID.
    #[serde(rename = "clusterID", default)]
    pub cluster_id: String,
    /// RFC 3339 expiry.
    #[serde(default)]
    pub expiration_time: String,
}

/// Body of `POST /api/v2/transactions/{id}/purchase`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseRequest {
    /// Buyer's credentials (sent for Service flavors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liqo_credentials: Option<WireLiqoCredentials>,
    /// Consumer's telemetry ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_telemetry_endpoint: Option<WireTelemetryServer>,
}

/// Liqo credentials on the wire (`clusterID`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WireLiqoCredentials {
    /// Liqo cluster ID.
    #[serde(rename = "clusterID", alias = "liqoID", default)]
    pub cluster_id: String,
    /// Base64 kubeconfig.
    #[serde(default)]
    pub kubeconfig: String,
}

/// Telemetry endpoint on the wire: `intents` is `null` when unset.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WireTelemetryServer {
    /// URL.
    #[serde(default)]
    pub endpoint: String,
    /// Intents.
    #[serde(default)]
    pub intents: Option<Vec<String>>,
}

impl From<&TelemetryServer> for WireTelemetryServer {
    fn from(t: &TelemetryServer) -> Self {
        WireTelemetryServer {
            endpoint: t.endpoint.clone(),
            intents: t.intents.clone(),
        }
    }
}

impl From<&WireTelemetryServer> for TelemetryServer {
    fn from(t: &WireTelemetryServer) -> Self {
        TelemetryServer {
            endpoint: t.endpoint.clone(),
            intents: t.intents.clone(),
        }
    }
}

/// A sale (PURCHASE response).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireContract {
    /// Provider Contract name.
    #[serde(rename = "contractID")]
    pub contract_id: String,
    /// Transaction bought.
    #[serde(rename = "transactionID")]
    pub transaction_id: String,
    /// Flavor snapshot.
    pub flavor: WireFlavor,
    /// The buyer (key `buyerID`).
    #[serde(rename = "buyerID", alias = "buyer")]
    pub buyer: WireNodeIdentity,
    /// Buyer's Liqo ID.
    #[serde(rename = "buyerClusterID", default)]
    pub buyer_cluster_id: String,
    /// The seller.
    pub seller: WireNodeIdentity,
    /// Provider's cluster ID and kubeconfig.
    #[serde(default)]
    pub peering_target_credentials: WireLiqoCredentials,
    /// RFC 3339 end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_information: Option<BTreeMap<String, String>>,
    /// What was bought.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<WireConfiguration>,
    /// The CRD's `networkRequests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_authorizations: Option<String>,
    /// Telemetry endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_telemetry_endpoint: Option<WireTelemetryServer>,
}

impl WireContract {
    /// CR → wire; `flavor_timestamp` is the sold flavor's creation time.
    pub fn from_crd(
        name: &str,
        spec: &ContractSpec,
        flavor_timestamp: String,
    ) -> Result<Self, DecodeError> {
        Ok(WireContract {
            contract_id: name.to_owned(),
            transaction_id: spec.transaction_id.clone(),
            flavor: WireFlavor::from_crd(spec.flavor.id(), &spec.flavor.spec, flavor_timestamp)?,
            buyer: WireNodeIdentity::from(&spec.buyer),
            buyer_cluster_id: spec.buyer_cluster_id.clone(),
            seller: WireNodeIdentity::from(&spec.seller),
            peering_target_credentials: WireLiqoCredentials {
                cluster_id: spec.peering_target_credentials.liqo_id.clone(),
                kubeconfig: spec.peering_target_credentials.kubeconfig.clone(),
            },
            expiration_time: spec.expiration_time.clone(),
            extra_information: spec.extra_information.clone(),
            configuration: spec
                .configuration
                .as_ref()
                .map(WireConfiguration::from_crd)
                .transpose()?,
            network_authorizations: spec.network_requests.clone().filter(|s| !s.is_empty()),
            ingress_telemetry_endpoint: spec
                .ingress_telemetry_endpoint
                .as_ref()
                .map(WireTelemetryServer::from),
        })
    }

    /// Wire → the consumer's Contract spec.
    pub fn to_crd(&self, namespace: &str) -> Result<ContractSpec, DecodeError> {
        Ok(ContractSpec {
            flavor: self.flavor.to_embedded(namespace)?,
            transaction_id: self.transaction_id.clone(),
            configuration: self
                .configuration
                .as_ref()
                .map(|c| c.to_crd().map(|(crd, _)| crd))
                .transpose()?,
            buyer: self.buyer.to_crd(),
            buyer_cluster_id: self.buyer_cluster_id.clone(),
            seller: self.seller.to_crd(),
            peering_target_credentials: LiqoCredentials {
                liqo_id: self.peering_target_credentials.cluster_id.clone(),
                kubeconfig: self.peering_target_credentials.kubeconfig.clone(),
            },
            expiration_time: self.expiration_time.clone(),
            extra_information: self.extra_information.clone(),
            network_requests: self.network_authorizations.clone(),
            ingress_telemetry_endpoint: self
                .ingress_telemetry_endpoint
                .as_ref()
                .map(TelemetryServer::from),
        })
    }
}

/// Characteristics constructor used by tests and the flavor builder.
pub fn characteristics(arch: &str, cpu: &str, memory: &str, pods: &str) -> K8SliceCharacteristics {
    K8SliceCharacteristics {
        architecture: arch.into(),
        cpu: Quantity(cpu.into()),
        memory: Quantity(memory.into()),
        pods: Quantity(pods.into()),
        gpu: None,
        storage: None,
    }
}

/// A zero GPU, as upstream writes when a node has none.
pub fn no_gpu() -> Gpu {
    Gpu {
        model: String::new(),
        cores: zero(),
        memory: zero(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The K8Slice wire example of fluidos-node.md §2.5, key for key.
    const K8SLICE_WIRE: &str = r#"{"charateristics":{"architecture":"amd64","cpu":"3876543211n","memory":"6765433Ki","pods":"110","gpu":{"model":"","cores":"0","memory":"0"},"storage":"0"},"properties":{},"policies":{"partitionability":{"cpuMin":"0","memoryMin":"0","podsMin":"0","cpuStep":"1","memoryStep":"100Mi","podsStep":"0"}}}"#;

    #[test]
    fn k8slice_wire_is_byte_identical_after_a_round_trip() {
        let w: WireK8Slice = serde_json::from_str(K8SLICE_WIRE).unwrap();
        let crd = w.to_crd();
        assert_eq!(crd.policies.partitionability.gpu_min.0, "0");
        let back = WireK8Slice::from(&crd);
        assert_eq!(serde_json::to_string(&back).unwrap(), K8SLICE_WIRE);
    }

    #[test]
    fn reserve_request_keys() {
        let body = r#"{"flavorID":"fluidos.eu-k8slice-3f9a","buyerID":{"ID":"rd5ks7x9yz","IP":"172.19.0.5:30000","domain":"fluidos.eu","additionalInformation":{"liqoID":"fluidos-consumer-1","kubeconfig":"a2NmZw=="}},"configuration":{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"110"}}}"#;
        let r: ReserveRequest = serde_json::from_str(body).unwrap();
        assert_eq!(r.buyer.liqo_id(), Some("fluidos-consumer-1"));
        assert_eq!(serde_json::to_string(&r).unwrap(), body);
        let (crd, parsed) = r.configuration.unwrap().to_crd().unwrap();
        assert_eq!(crd.type_, "K8Slice");
        assert!(matches!(parsed, ConfigurationData::K8Slice(_)));
    }

    #[test]
    fn transaction_and_purchase_keys() {
        let t = r#"{"transactionID":"9f0c-1","flavorID":"f","configuration":{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"110"}},"buyer":{"ID":"b","IP":"1.2.3.4:1","domain":"d"},"clusterID":"c","expirationTime":"2025-05-18T11:00:00Z"}"#;
        let tx: WireTransaction = serde_json::from_str(t).unwrap();
        assert_eq!(serde_json::to_string(&tx).unwrap(), t);
        let p = r#"{"liqoCredentials":{"clusterID":"c","kubeconfig":"k"},"ingressTelemetryEndpoint":{"endpoint":"http://t","intents":null}}"#;
        let pr: PurchaseRequest = serde_json::from_str(p).unwrap();
        assert_eq!(serde_json::to_string(&pr).unwrap(), p);
        assert_eq!(
            serde_json::to_string(&PurchaseRequest::default()).unwrap(),
            "{}"
        );
    }

    fn flavor_spec() -> FlavorSpec {
        let k = WireK8Slice {
            characteristics: characteristics("amd64", "2", "4Gi", "110"),
            ..Default::default()
        }
        .to_crd();
        FlavorSpec {
            provider_id: "prov".into(),
            flavor_type: FlavorType::k8slice(&k),
            owner: NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "prov".into(),
                ip: "127.0.0.1:3004".into(),
                additional_information: None,
            },
            price: Price::default(),
            availability: true,
            network_property_type: Some("networkProperty".into()),
            location: Some(Location {
                country: Some("Italy".into()),
                city: Some("Turin".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn flavor_wire_keys_and_order() {
        let w = WireFlavor::from_crd(
            "fluidos.eu-k8slice-3f9a",
            &flavor_spec(),
            "2025-05-18T10:00:00Z".into(),
        )
        .unwrap();
        let s = serde_json::to_string(&w).unwrap();
        let keys: Vec<&str> = [
            "\"flavorID\"",
            "\"providerID\"",
            "\"type\"",
            "\"networkPropertyType\"",
            "\"timestamp\"",
            "\"location\"",
            "\"price\"",
            "\"owner\"",
            "\"availability\"",
        ]
        .to_vec();
        let positions: Vec<usize> = keys.iter().map(|k| s.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{s}");
        assert!(
            s.contains(r#""type":{"name":"k8slice","data":{"charateristics""#),
            "{s}"
        );
        assert!(s.contains(r#""altitude":"Italy""#), "{s}");
        assert!(
            s.contains(r#""owner":{"ID":"prov","IP":"127.0.0.1:3004","domain":"fluidos.eu"}"#),
            "{s}"
        );
        let back = w.to_embedded("fluidos").unwrap();
        assert_eq!(back.spec, flavor_spec());
        assert_eq!(back.id(), "fluidos.eu-k8slice-3f9a");
    }

    #[test]
    fn pod_namespace_intents_round_trip() {
        let mut k = K8Slice {
            characteristics: characteristics("amd64", "1", "1Gi", "10"),
            ..Default::default()
        };
        let end = SourceDestination {
            is_hot_cluster: true,
            resource_selector: ResourceSelector {
                type_identifier: "PodNamespaceSelector".into(),
                selector: serde_json::json!({"pod": {"app": "db"}, "namespace": {"team": "a"}}),
            },
        };
        let intent = NetworkIntent {
            name: "allow".into(),
            source: end.clone(),
            destination: end,
            destination_port: "5432".into(),
            protocol_type: "TCP".into(),
        };
        k.properties.network_authorizations = Some(NetworkAuthorizations {
            denied_communications: None,
            mandatory_communications: Some(vec![intent]),
        });
        let wire = WireK8Slice::from(&k);
        let v = serde_json::to_value(&wire).unwrap();
        let sel = &v["properties"]["networkAuthorizations"]["mandatoryCommunications"][0]["source"]
            ["resourceSelectors"];
        assert_eq!(sel["typeIdentifier"], "PodNamespaceSelector");
        assert_eq!(
            sel["selector"]["pod"][0],
            serde_json::json!({"key": "app", "value": "db"})
        );
        assert_eq!(wire.to_crd(), k);
    }

    #[test]
    fn payloads_that_do_not_decode_stay_raw() {
        // Keys sorted, as a raw Value writes them, so the bytes round-trip.
        let f = concat!(
            r#"{"flavorID":"f","providerID":"p","type":{"name":"k8slice","data":{"charateristics":{"cpu":"1"},"x":[1]}},"#,
            r#""timestamp":"t","price":{"amount":"","currency":"","period":""},"#,
            r#""owner":{"ID":"p","IP":"i","domain":"d"},"availability":true}"#
        );
        let w: WireFlavor = serde_json::from_str(f).unwrap();
        assert!(matches!(w.type_.data, WireFlavorData::Raw(_)));
        assert_eq!(serde_json::to_string(&w).unwrap(), f);
        let e = w.parse_type().unwrap_err();
        assert_eq!(e.field, "flavor.type.data.charateristics", "{e}");

        let vm = r#"{"name":"vm","data":{"b":1,"a":2}}"#;
        let t: WireFlavorType = serde_json::from_str(vm).unwrap();
        assert_eq!(
            t.data,
            WireFlavorData::Raw(serde_json::json!({"a": 2, "b": 1}))
        );

        let c: WireConfiguration =
            serde_json::from_str(r#"{"type":"k8slice","data":{"cpu":"1"}}"#).unwrap();
        assert!(matches!(c.data, WireConfigurationData::Raw(_)));
        let e = c.to_crd().unwrap_err();
        assert_eq!(e.field, "configuration.data", "{e}");
        assert!(e.message.contains("memory"), "{e}");
    }

    #[test]
    fn typed_payloads_decode_by_their_sibling_type() {
        let c: WireConfiguration = serde_json::from_str(
            r#"{"data":{"pods":"1","memory":"1Gi","cpu":"1"},"type":"k8slice"}"#,
        )
        .unwrap();
        let WireConfigurationData::K8Slice(k) = &c.data else {
            panic!("{c:?}")
        };
        assert_eq!(k.cpu.0, "1");
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"1"}}"#
        );
        let (crd, _) = c.to_crd().unwrap();
        assert_eq!(crd.type_, "K8Slice");
        assert_eq!(
            crd.data,
            serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1"})
        );
    }

    #[test]
    fn payloads_the_typed_form_would_alter_are_kept_as_sent() {
        // A number where Go writes a string, and a key this node does not
        // model: typing them would rewrite or drop something. The stored
        // (CRD) form keeps the key and spells the quantities canonically.
        let stored = serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1"});
        for (data, crd) in [
            (
                serde_json::json!({"cpu": 1, "memory": "1Gi", "pods": "1"}),
                stored.clone(),
            ),
            (
                serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1", "newField": "x"}),
                serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1", "newField": "x"}),
            ),
        ] {
            let c: WireConfiguration =
                serde_json::from_value(serde_json::json!({"type": "k8slice", "data": data}))
                    .unwrap();
            assert_eq!(c.data, WireConfigurationData::Raw(data.clone()));
            assert_eq!(c.to_crd().unwrap().0.data, crd);
            assert_eq!(serde_json::to_value(&c).unwrap()["data"], data);
        }
        // Typed (nothing lost), forwarded as sent, stored canonically.
        let data = serde_json::json!({"cpu": " 1000m", "memory": "1024Mi", "pods": "1"});
        let c: WireConfiguration =
            serde_json::from_value(serde_json::json!({"type": "k8slice", "data": data})).unwrap();
        assert_eq!(c.to_crd().unwrap().0.data, stored);
        assert_eq!(serde_json::to_value(&c).unwrap()["data"], data);
    }

    #[test]
    fn contract_round_trip() {
        let spec = ContractSpec {
            flavor: EmbeddedFlavor {
                api_version: Some("nodecore.fluidos.eu/v1alpha1".into()),
                kind: Some("Flavor".into()),
                metadata: EmbeddedObjectMeta {
                    name: Some("fluidos.eu-k8slice-3f9a".into()),
                    namespace: Some("fluidos".into()),
                    ..Default::default()
                },
                spec: flavor_spec(),
                status: None,
            },
            transaction_id: "t-1".into(),
            configuration: Some(Configuration {
                type_: "K8Slice".into(),
                data: serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "10"}),
            }),
            buyer: NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "buyer".into(),
                ip: "127.0.0.1:3005".into(),
                additional_information: Some(NodeIdentityAdditionalInfo {
                    liqo_id: Some("liqo-b".into()),
                }),
            },
            buyer_cluster_id: "liqo-b".into(),
            seller: flavor_spec().owner,
            peering_target_credentials: LiqoCredentials {
                liqo_id: "liqo-p".into(),
                kubeconfig: "a2NmZw==".into(),
            },
            expiration_time: Some("2026-05-18T10:00:00Z".into()),
            extra_information: None,
            network_requests: None,
            ingress_telemetry_endpoint: None,
        };
        let wire =
            WireContract::from_crd("contract-x", &spec, "2025-05-18T10:00:00Z".into()).unwrap();
        let s = serde_json::to_string(&wire).unwrap();
        assert!(
            s.starts_with(r#"{"contractID":"contract-x","transactionID":"t-1","flavor":{"#),
            "{s}"
        );
        assert!(s.contains(r#""buyerID":{"ID":"buyer""#), "{s}");
        assert!(s.contains(
            r#""peeringTargetCredentials":{"clusterID":"liqo-p","kubeconfig":"a2NmZw=="}"#
        ));
        assert!(s.contains(r#""configuration":{"type":"k8slice""#));
        assert_eq!(wire.to_crd("fluidos").unwrap(), spec);
    }
}

/// Header carrying the contract's `transactionID` on
/// `GET /api/v2/contracts/{contractID}/service`: the buyer proves it bought
/// the contract with this 128-bit secret (contract names are guessable and
/// node IDs are public).
pub const TRANSACTION_ID_HEADER: &str = "X-Fluidos-Transaction-Id";

/// How the buyer of a Service contract reaches its service (not in the Go
/// node's REAR: `GET /api/v2/contracts/{contractID}/service`, answered to the
/// contract's buyer only once the provider's Allocation is `Active`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccess {
    /// The contract.
    #[serde(rename = "contractID")]
    pub contract_id: String,
    /// `host:port` addresses reachable from outside the provider's cluster, comma-joined.
    pub endpoints: String,
    /// The in-cluster addresses (`<svc>.<ns>.svc.cluster.local:<port>`), comma-joined, as the Go node's Secret has them.
    #[serde(default)]
    pub cluster_endpoints: String,
    /// The credentials Secret's keys other than `endpoints` (e.g. `username`, `password`, `database`).
    #[serde(default)]
    pub credentials: BTreeMap<String, String>,
}

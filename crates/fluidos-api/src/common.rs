//! Types shared by several kinds (`apis/nodecore/v1alpha1/common.go` upstream).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::raw::{self, RawObject};

/// Lifecycle phase string shared by Solver, Discovery, Reservation and Contract.
///
/// The strings are byte-identical to the Go node's (`Timed Out` has a space):
/// external tools poll them. Unknown strings are kept, not rejected.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// `Solved`
    Solved,
    /// `Failed`
    Failed,
    /// `Running`
    Running,
    /// `Allocating`
    Allocating,
    /// `Idle`
    Idle,
    /// `Timed Out`
    TimedOut,
    /// `Active`
    Active,
    /// `Pending`
    Pending,
    /// `Inactive`
    Inactive,
    /// The empty string: no phase yet.
    #[default]
    Unset,
    /// A value this version does not know, preserved as written.
    Other(String),
}

impl Phase {
    /// The wire string of this phase.
    pub fn as_str(&self) -> &str {
        match self {
            Phase::Solved => "Solved",
            Phase::Failed => "Failed",
            Phase::Running => "Running",
            Phase::Allocating => "Allocating",
            Phase::Idle => "Idle",
            Phase::TimedOut => "Timed Out",
            Phase::Active => "Active",
            Phase::Pending => "Pending",
            Phase::Inactive => "Inactive",
            Phase::Unset => "",
            Phase::Other(s) => s,
        }
    }

    /// True for phases after which nothing more happens.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Phase::Solved | Phase::Failed | Phase::TimedOut)
    }
}

impl From<&str> for Phase {
    fn from(s: &str) -> Self {
        match s {
            "Solved" => Phase::Solved,
            "Failed" => Phase::Failed,
            "Running" => Phase::Running,
            "Allocating" => Phase::Allocating,
            "Idle" => Phase::Idle,
            "Timed Out" => Phase::TimedOut,
            "Active" => Phase::Active,
            "Pending" => Phase::Pending,
            "Inactive" => Phase::Inactive,
            "" => Phase::Unset,
            other => Phase::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Phase {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(Phase::from(s.as_str()))
    }
}

impl JsonSchema for Phase {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Phase".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
    fn inline_schema() -> bool {
        true
    }
}

/// Phase plus human message and timestamps (`PhaseStatus` upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PhaseStatus {
    /// Current phase; always serialized, as upstream.
    pub phase: Phase,
    /// Why the object is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time the object first entered `Running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time of the last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_time: Option<String>,
    /// RFC 3339 time of the last phase change (upstream sets it on every change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
}

/// Reference to another object by name (`GenericRef` upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenericRef {
    /// Name of the referenced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the referenced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// API version of the referenced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referenced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl GenericRef {
    /// A reference by namespace and name.
    pub fn named(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        GenericRef {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        }
    }
}

/// Identity of a FLUIDOS node as stored in custom resources.
///
/// `ip` is really `"<host>:<port>"` of the node's REAR gateway.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeIdentity {
    /// FLUIDOS domain, e.g. `fluidos.eu`.
    pub domain: String,
    /// Node ID: 10 lower-case alphanumerics upstream.
    #[serde(rename = "nodeID")]
    pub node_id: String,
    /// `host:port` of the node's REAR gateway.
    pub ip: String,
    /// Optional extra facts, such as the Liqo cluster ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_information: Option<NodeIdentityAdditionalInfo>,
}

impl NodeIdentity {
    /// The Liqo cluster ID, when known.
    pub fn liqo_id(&self) -> Option<&str> {
        self.additional_information
            .as_ref()
            .and_then(|a| a.liqo_id.as_deref())
            .filter(|s| !s.is_empty())
    }
}

/// Extra identity facts (`NodeIdentityAdditionalInfo` upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NodeIdentityAdditionalInfo {
    /// Liqo cluster ID of the node.
    #[serde(rename = "liqoID", default, skip_serializing_if = "Option::is_none")]
    pub liqo_id: Option<String>,
}

/// Price model of a flavor; all three keys always serialized, usually empty.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Price {
    /// Amount, as a decimal string.
    pub amount: String,
    /// Currency code.
    pub currency: String,
    /// Billing period.
    pub period: String,
}

/// Where the flavor's resources are.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    /// Latitude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latitude: Option<String>,
    /// Longitude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longitude: Option<String>,
    /// Country.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// City.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    /// Free-form notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_notes: Option<String>,
}

/// The four flavor type identifiers upstream defines.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FlavorTypeIdentifier {
    /// A compute slice of a Kubernetes cluster.
    K8Slice,
    /// A virtual machine (not implemented upstream).
    VM,
    /// A software service instantiated from a ServiceBlueprint.
    Service,
    /// A sensor (not implemented upstream).
    Sensor,
}

impl FlavorTypeIdentifier {
    /// The CRD spelling (`K8Slice`).
    pub fn as_str(self) -> &'static str {
        match self {
            FlavorTypeIdentifier::K8Slice => "K8Slice",
            FlavorTypeIdentifier::VM => "VM",
            FlavorTypeIdentifier::Service => "Service",
            FlavorTypeIdentifier::Sensor => "Sensor",
        }
    }

    /// The REAR wire spelling (`k8slice`).
    pub fn wire_name(self) -> &'static str {
        match self {
            FlavorTypeIdentifier::K8Slice => "k8slice",
            FlavorTypeIdentifier::VM => "vm",
            FlavorTypeIdentifier::Service => "service",
            FlavorTypeIdentifier::Sensor => "sensor",
        }
    }

    /// Parses the CRD spelling.
    pub fn from_crd(s: &str) -> Option<Self> {
        [Self::K8Slice, Self::VM, Self::Service, Self::Sensor]
            .into_iter()
            .find(|t| t.as_str() == s)
    }

    /// Parses the wire spelling; the CRD spelling is accepted too.
    pub fn from_wire(s: &str) -> Option<Self> {
        [Self::K8Slice, Self::VM, Self::Service, Self::Sensor]
            .into_iter()
            .find(|t| t.wire_name() == s || t.as_str() == s)
    }
}

impl fmt::Display for FlavorTypeIdentifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Purchase parameters: a discriminated union on `type` with raw `data`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct Configuration {
    /// `K8Slice`, `Service`, `VM` or `Sensor`; kept as a string so unknown values survive.
    #[serde(rename = "type")]
    pub type_: String,
    /// The payload selected by `type`.
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub data: RawObject,
}

/// Credentials to reach the cluster that gives resources (CRD form).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LiqoCredentials {
    /// Liqo cluster ID of the peering target.
    #[serde(rename = "liqoID")]
    pub liqo_id: String,
    /// Base64 (standard, padded) of a kubeconfig YAML.
    pub kubeconfig: String,
}

/// Where the consumer's telemetry ingress is (metadata for external tools).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TelemetryServer {
    /// URL of the ingress endpoint.
    pub endpoint: String,
    /// Intents the endpoint serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intents: Option<Vec<String>>,
}

/// Who hosts a service instance.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum HostingPolicy {
    /// On the provider's cluster.
    Provider,
    /// On the consumer's cluster.
    Consumer,
    /// Split between the two.
    Shared,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_byte_identical() {
        for s in [
            "Solved",
            "Failed",
            "Running",
            "Allocating",
            "Idle",
            "Timed Out",
            "Active",
            "Pending",
            "Inactive",
            "",
            "Something New",
        ] {
            let p: Phase = serde_json::from_value(serde_json::json!(s)).unwrap();
            assert_eq!(serde_json::to_value(&p).unwrap(), serde_json::json!(s));
        }
        assert_eq!(Phase::from("Timed Out"), Phase::TimedOut);
        assert!(Phase::TimedOut.is_terminal());
    }

    #[test]
    fn flavor_type_spellings() {
        assert_eq!(
            FlavorTypeIdentifier::from_wire("k8slice"),
            Some(FlavorTypeIdentifier::K8Slice)
        );
        assert_eq!(
            FlavorTypeIdentifier::from_wire("Service"),
            Some(FlavorTypeIdentifier::Service)
        );
        assert_eq!(FlavorTypeIdentifier::from_crd("k8slice"), None);
    }

    #[test]
    fn node_identity_keys_match_the_crd() {
        let id = NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "abc".into(),
            ip: "1.2.3.4:30000".into(),
            additional_information: Some(NodeIdentityAdditionalInfo {
                liqo_id: Some("liqo-1".into()),
            }),
        };
        assert_eq!(
            serde_json::to_value(&id).unwrap(),
            serde_json::json!({"domain":"fluidos.eu","nodeID":"abc","ip":"1.2.3.4:30000",
                "additionalInformation":{"liqoID":"liqo-1"}})
        );
        assert_eq!(id.liqo_id(), Some("liqo-1"));
    }
}

//! `ServiceBlueprint` (nodecore.fluidos.eu/v1alpha1): a software service a provider offers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::HostingPolicy;
use crate::flavor::ServiceFlavor;
use crate::raw::{self, RawObject};

/// Describes a service (database, message queue, ...) and the manifests that deploy it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "nodecore.fluidos.eu",
    version = "v1alpha1",
    kind = "ServiceBlueprint",
    namespaced,
    status = "ServiceBlueprintStatus",
    shortname = "sbp",
    doc = "ServiceBlueprint is the Schema for the serviceblueprints API.",
    printcolumn(name = "Name", type_ = "string", json_path = ".spec.name"),
    printcolumn(
        name = "Description",
        type_ = "string",
        json_path = ".spec.description"
    ),
    printcolumn(name = "Category", type_ = "string", json_path = ".spec.category"),
    printcolumn(name = "Tags", type_ = "string", json_path = ".spec.tags"),
    printcolumn(
        name = "ServiceFlavors",
        type_ = "string",
        json_path = ".status.serviceFlavors"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBlueprintSpec {
    /// Service name.
    pub name: String,
    /// Human description.
    pub description: String,
    /// Category (`database`, `message-queue`, or one with its own `configurationSchema`).
    pub category: String,
    /// Tags for filters.
    pub tags: Vec<String>,
    /// Allowed hosting policies; empty means `Provider`; the first is the default.
    pub hosting_policies: Vec<HostingPolicy>,
    /// Manifests instantiated for each purchase.
    pub templates: Vec<ServiceTemplate>,
    /// JSON Schema of `configurationData`, for categories the node does not know (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub configuration_schema: Option<RawObject>,
}

/// One manifest of a blueprint; string values may hold template actions.
///
/// That it names `apiVersion` and `kind` is checked by the blueprint controller:
/// CEL cannot see inside a preserve-unknown-fields object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceTemplate {
    /// Template name.
    pub name: String,
    /// Human description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// One Kubernetes manifest.
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub service_data: RawObject,
}

/// What the node made of the blueprint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceBlueprintStatus {
    /// The service flavors published for this blueprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_flavors: Option<Vec<ServiceFlavor>>,
    /// Standard conditions (`Ready`, ...), each with `observedGeneration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

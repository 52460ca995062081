//! `Allocation` (nodecore.fluidos.eu/v1alpha1): turning a Contract into a peering or a service.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::GenericRef;

/// Allocates what a Contract bought.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "nodecore.fluidos.eu",
    version = "v1alpha1",
    kind = "Allocation",
    namespaced,
    status = "AllocationStatus",
    shortname = "alloc",
    shortname = "allocs",
    doc = "Allocation is the Schema for the allocations API.",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(
        name = "Status Message",
        type_ = "string",
        json_path = ".status.message"
    ),
    printcolumn(
        name = "Resource Reference",
        type_ = "string",
        json_path = ".status.resourceRef.name",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AllocationSpec {
    /// Unused upstream (always false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarding: Option<bool>,
    /// The Contract to allocate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<GenericRef>,
}

/// Allocation progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllocationStatus {
    /// `Active`, `Provisioning`, `ResourceCreation`, `Peering`, `Released`, `Inactive`, `Error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// RFC 3339 time of the last update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// Human message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the allocation produced (ForeignCluster or credentials Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ref: Option<GenericRef>,
}

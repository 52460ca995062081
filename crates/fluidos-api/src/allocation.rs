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
    pub status: Option<AllocationState>,
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

crate::string_enum::string_enum! {
    /// Allocation `status.status`, with the Go node's strings (fluidos-node.md Appendix F).
    pub enum AllocationState {
        /// Delivered and in use.
        Active => "Active",
        /// Resources held for the buyer, delivery not started.
        Provisioning => "Provisioning",
        /// The peering is up; the provider is creating the granted resources.
        ResourceCreation => "ResourceCreation",
        /// The consumer is establishing the peering.
        Peering => "Peering",
        /// Given back.
        Released => "Released",
        /// Created, nothing done yet.
        Inactive => "Inactive",
        /// Failed; terminal.
        Error => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_state_keeps_go_strings_and_unknown_values() {
        for s in [
            "Active",
            "Provisioning",
            "ResourceCreation",
            "Peering",
            "Released",
            "Inactive",
            "Error",
        ] {
            let state = AllocationState::from(s);
            assert!(!matches!(state, AllocationState::Other(_)), "{s}");
            assert_eq!(serde_json::to_value(&state).unwrap(), serde_json::json!(s));
        }
        let odd: AllocationState = serde_json::from_str("\"Reserved\"").unwrap();
        assert_eq!(odd, AllocationState::Other("Reserved".into()));
        assert_eq!(serde_json::to_string(&odd).unwrap(), "\"Reserved\"");
    }
}

//! Objects embedded in other objects, with the trimmed metadata controller-gen
//! emits for them (`generateEmbeddedObjectMeta=true`).

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::flavor::{Flavor, FlavorSpec, FlavorStatus};

/// The metadata an embedded object keeps: name, namespace, labels, annotations, finalizers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
pub struct EmbeddedObjectMeta {
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Finalizers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
}

/// A Flavor snapshot inside a PeeringCandidate, Contract or Discovery status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedFlavor {
    /// `nodecore.fluidos.eu/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `Flavor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (the flavor ID) and namespace.
    #[serde(default)]
    pub metadata: EmbeddedObjectMeta,
    /// The flavor's spec.
    pub spec: FlavorSpec,
    /// Status: absent, or all three keys (upstream's required set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FlavorStatus>,
}

impl EmbeddedFlavor {
    /// The flavor ID (its name).
    pub fn id(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

impl From<&Flavor> for EmbeddedFlavor {
    fn from(f: &Flavor) -> Self {
        EmbeddedFlavor {
            api_version: Some("nodecore.fluidos.eu/v1alpha1".into()),
            kind: Some("Flavor".into()),
            metadata: EmbeddedObjectMeta {
                name: f.metadata.name.clone(),
                namespace: f.metadata.namespace.clone(),
                labels: f.metadata.labels.clone(),
                annotations: f.metadata.annotations.clone(),
                finalizers: None,
            },
            spec: f.spec.clone(),
            // The ledger is the provider's private book-keeping, and upstream
            // CRDs would prune it from a snapshot anyway.
            status: f.status.clone().map(|s| FlavorStatus { ledger: None, ..s }),
        }
    }
}

//! The objects a managed flavor is derived from, recognised by its owner
//! reference through the API types (not by spelling their group and kind).

use fluidos_api::service_blueprint::ServiceBlueprint;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

/// The kind of object a managed flavor comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A core `v1` Node (K8Slice flavors).
    Node,
    /// A `ServiceBlueprint` (Service flavors).
    ServiceBlueprint,
}

impl SourceKind {
    /// The source kind `o` refers to, if it is one (pure).
    pub fn of(o: &OwnerReference) -> Option<Self> {
        if o.api_version == Node::api_version(&()) && o.kind == Node::kind(&()) {
            Some(SourceKind::Node)
        } else if o.api_version == ServiceBlueprint::api_version(&())
            && o.kind == ServiceBlueprint::kind(&())
        {
            Some(SourceKind::ServiceBlueprint)
        } else {
            None
        }
    }

    /// True for a namespaced source (a blueprint; nodes are cluster-scoped).
    pub fn is_namespaced(self) -> bool {
        self == SourceKind::ServiceBlueprint
    }

    /// An owner reference to a source of this kind.
    pub fn owner_ref(self, name: &str, uid: &str) -> OwnerReference {
        let (api_version, kind) = match self {
            SourceKind::Node => (Node::api_version(&()), Node::kind(&())),
            SourceKind::ServiceBlueprint => (
                ServiceBlueprint::api_version(&()),
                ServiceBlueprint::kind(&()),
            ),
        };
        OwnerReference {
            api_version: api_version.into_owned(),
            kind: kind.into_owned(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_sources_by_api_version_and_kind() {
        let node = SourceKind::Node.owner_ref("w", "u");
        assert_eq!(
            (node.api_version.as_str(), node.kind.as_str()),
            ("v1", "Node")
        );
        assert_eq!(SourceKind::of(&node), Some(SourceKind::Node));
        let bp = SourceKind::ServiceBlueprint.owner_ref("db", "u");
        assert_eq!(bp.api_version, "nodecore.fluidos.eu/v1alpha1");
        assert_eq!(SourceKind::of(&bp), Some(SourceKind::ServiceBlueprint));
        let other = OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Node".into(),
            ..node
        };
        assert_eq!(SourceKind::of(&other), None);
        assert!(SourceKind::ServiceBlueprint.is_namespaced() && !SourceKind::Node.is_namespaced());
    }
}

//! Names, labels, finalizers and field managers of the flavors this crate writes.

use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::naming::hash_prefix;

/// Label on every flavor this crate manages; the lifecycle controller acts on no other flavor.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "fluidos-lrm";
/// Label naming the Kubernetes node a K8Slice flavor describes (informational).
pub const NODE_LABEL: &str = "nodecore.fluidos.eu/node";
/// Label naming the ServiceBlueprint a Service flavor comes from (informational).
pub const BLUEPRINT_LABEL: &str = "nodecore.fluidos.eu/service-blueprint";
/// Finalizer kept on a flavor while its ledger has live entries.
pub const LEDGER_FINALIZER: &str = "nodecore.fluidos.eu/ledger";
/// Server-side apply field manager.
pub const FIELD_MANAGER: &str = "fluidos-lrm";
/// Event reporting controller name.
pub const REPORTER: &str = "fluidos-local-resource-manager";

/// Hex characters of SHA-256 in a flavor name.
///
/// Upstream appends 4 random hex characters (16 bits): by the birthday bound
/// two of a few hundred flavors already collide with a probability of tens of
/// percent (300 names: ~50%), and flavor names are the REAR flavor IDs that
/// every consumer sees from every provider of a domain. 16 hex characters
/// (64 bits) keep the collision probability below 10^-9 up to ~190,000
/// flavors, and, being derived from the source object's UID, give the same
/// name after every restart so the controllers converge instead of creating
/// duplicates.
pub const NAME_HASH_HEX: usize = 16;

/// `<domain>-<type>-<sha256(uid)[..16]>`, lower-cased (the upstream pattern with a deterministic suffix).
pub fn flavor_name(domain: &str, kind: FlavorTypeIdentifier, source_uid: &str) -> String {
    fluidos_api::naming::flavor_name(
        kind.wire_name(),
        domain,
        &hash_prefix(source_uid, NAME_HASH_HEX),
    )
}

/// True when `v` may be a label value (at most 63 characters, alphanumeric ends, `-_.` inside).
pub fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    if b.is_empty() {
        return true;
    }
    b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_lower_case() {
        let a = flavor_name(
            "Fluidos.EU",
            FlavorTypeIdentifier::K8Slice,
            "6f1c2d1e-0000-4000-8000-000000000001",
        );
        let b = flavor_name(
            "fluidos.eu",
            FlavorTypeIdentifier::K8Slice,
            "6f1c2d1e-0000-4000-8000-000000000001",
        );
        assert_eq!(a, b);
        assert!(a.starts_with("fluidos.eu-k8slice-"), "{a}");
        assert_eq!(a.len(), "fluidos.eu-k8slice-".len() + NAME_HASH_HEX);
        let s = flavor_name("fluidos.eu", FlavorTypeIdentifier::Service, "u");
        assert_eq!(s, format!("fluidos.eu-service-{}", hash_prefix("u", 16)));
        assert_ne!(
            flavor_name("fluidos.eu", FlavorTypeIdentifier::K8Slice, "u1"),
            flavor_name("fluidos.eu", FlavorTypeIdentifier::K8Slice, "u2")
        );
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("worker-1.example"));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(!is_label_value("-x"));
    }
}

//! Object names, byte-identical to the Go node's (`pkg/utils/namings`).

use sha2::{Digest, Sha256};

/// First `n` hex characters of SHA-256 of `s`.
pub fn hash_prefix(s: &str, n: usize) -> String {
    let digest = hex::encode(Sha256::digest(s.as_bytes()));
    digest[..n.min(digest.len())].to_owned()
}

/// A Kubernetes object name (DNS-1123 subdomain): 1–253 characters of
/// `[a-z0-9.-]`, each dot-separated part starting and ending alphanumeric
/// (pure). Anything else never reaches an API-server URL (`?watch=true`,
/// `a/status`, `..`).
pub fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// `<domain>-<type>-<4 hex>`, lower-cased; `random4` supplies the 4 hex characters.
pub fn flavor_name(type_wire_name: &str, domain: &str, random4: &str) -> String {
    format!("{domain}-{type_wire_name}-{random4}").to_lowercase()
}

/// `contract-<flavorID>-<sha256(flavorID)[:4]>`, every `.` replaced by `-`.
pub fn contract_name(flavor_id: &str) -> String {
    format!("contract-{flavor_id}-{}", hash_prefix(flavor_id, 4)).replace('.', "-")
}

/// `allocation-<flavorID>-<sha256(flavorID)[:4]>` (dots kept).
pub fn allocation_name(flavor_id: &str) -> String {
    format!("allocation-{flavor_id}-{}", hash_prefix(flavor_id, 4))
}

/// A buyer's Allocation of Contract `contract` for flavor `flavor_id`:
/// `allocation-<flavorID>-<hash of the Contract>`, as the Go node's form but
/// one per Contract (two purchases of one flavor, a remainder sold under the
/// same ID, each get their own).
pub fn consumer_allocation_name(flavor_id: &str, contract: &str) -> String {
    format!("allocation-{flavor_id}-{}", hash_prefix(contract, 4))
}

/// `peeringcandidate-<flavorID>`.
pub fn peering_candidate_name(flavor_id: &str) -> String {
    format!("peeringcandidate-{flavor_id}")
}

/// `reservation-<solver>`.
pub fn reservation_name(solver: &str) -> String {
    format!("reservation-{solver}")
}

/// `discovery-<solver>`.
pub fn discovery_name(solver: &str) -> String {
    format!("discovery-{solver}")
}

/// `knowncluster-<nodeID>`.
pub fn known_cluster_name(node_id: &str) -> String {
    format!("knowncluster-{node_id}")
}

/// `credentials-<contract>`: the Secret a Service purchase delivers.
pub fn credentials_secret_name(contract: &str) -> String {
    format!("credentials-{contract}")
}

/// `<32 hex>-<unix nanos>`, the transaction ID format.
pub fn transaction_id(random16: &[u8; 16], unix_nanos: u128) -> String {
    format!("{}-{unix_nanos}", hex::encode(random16))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyers_allocations_of_one_flavor_differ_by_contract() {
        let a = consumer_allocation_name("fluidos.eu-k8slice-3f9a", "contract-a");
        let b = consumer_allocation_name("fluidos.eu-k8slice-3f9a", "contract-b");
        assert_ne!(a, b);
        assert!(a.starts_with("allocation-fluidos.eu-k8slice-3f9a-") && is_object_name(&a));
    }

    #[test]
    fn object_names_are_dns_subdomains() {
        for ok in ["a", "fluidos.eu-k8slice-3f9a", "0ff0", &"a".repeat(253)] {
            assert!(is_object_name(ok), "{ok}");
        }
        for bad in [
            "",
            "?watch=true",
            "a/status",
            "..",
            "A",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a b",
            "é",
            &"a".repeat(254),
        ] {
            assert!(!is_object_name(bad), "{bad}");
        }
    }

    #[test]
    fn names_match_go() {
        // sha256("fluidos.eu-k8slice-3f9a") starts with these 4 hex characters.
        let h = hash_prefix("fluidos.eu-k8slice-3f9a", 4);
        assert_eq!(h.len(), 4);
        assert_eq!(
            contract_name("fluidos.eu-k8slice-3f9a"),
            format!("contract-fluidos-eu-k8slice-3f9a-{h}")
        );
        assert_eq!(
            allocation_name("fluidos.eu-k8slice-3f9a"),
            format!("allocation-fluidos.eu-k8slice-3f9a-{h}")
        );
        assert_eq!(
            flavor_name("k8slice", "Fluidos.EU", "3F9A"),
            "fluidos.eu-k8slice-3f9a"
        );
        assert_eq!(
            transaction_id(&[0xab; 16], 1715790000123456789),
            "abababababababababababababababab-1715790000123456789"
        );
        assert_eq!(hash_prefix("", 8), "e3b0c442");
    }
}

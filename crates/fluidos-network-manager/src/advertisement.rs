//! The multicast advertisement: its JSON form (the Go node's `NodeIdentity`
//! in CRD form) and the checks a datagram passes before it is believed.

use serde::{Deserialize, Serialize};

/// Largest datagram accepted, in bytes. The Go receiver reads into a
/// 1024-byte buffer (and silently truncates anything longer), so nothing a
/// Go node can parse is longer, and nothing we send is either.
pub const MAX_ADVERTISEMENT_BYTES: usize = 1024;

/// Longest node ID accepted: `knowncluster-<nodeID>` must stay a valid
/// DNS-1123 label-ish name (63 characters) for tools that treat it as one.
const MAX_NODE_ID_LEN: usize = 63 - "knowncluster-".len();

/// Longest host part of `ip` (a DNS name is at most 253 characters).
const MAX_HOST_LEN: usize = 253;

/// Longest `domain` accepted.
const MAX_DOMAIN_LEN: usize = 253;

/// Prefix of a key fingerprint.
const FINGERPRINT_PREFIX: &str = "sha256:";

/// What a node multicasts every interval:
/// `{"domain":"fluidos.eu","nodeID":"4ahrqttvng","ip":"172.19.0.4:30001"}`.
///
/// `fingerprint` is the node's REAR key: `sha256:<64 lower-case hex>` of its
/// public key (DER SubjectPublicKeyInfo). It is omitted when absent (a node
/// without a key sends byte-for-byte what Go sends), and Go listeners ignore
/// it when present (`encoding/json` skips unknown keys). Listeners record it
/// in the KnownCluster's `spec.fingerprint`, so that REAR calls pin the key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Advertisement {
    /// FLUIDOS domain, e.g. `fluidos.eu`.
    pub domain: String,
    /// The advertising node's ID; names its KnownCluster.
    #[serde(rename = "nodeID")]
    pub node_id: String,
    /// `host:port` of the advertising node's REAR gateway.
    pub ip: String,
    /// `sha256:<hex>` of the node's REAR key; absent from Go nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// Why a datagram was not taken as an advertisement.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// Longer than [`MAX_ADVERTISEMENT_BYTES`].
    #[error("datagram of {len} bytes exceeds {MAX_ADVERTISEMENT_BYTES}")]
    TooLarge {
        /// Bytes received (at least; a bigger datagram may have been cut).
        len: usize,
    },
    /// Not a JSON object with string `domain`, `nodeID` and `ip`.
    #[error("not an advertisement: {0}")]
    Malformed(#[source] serde_json::Error),
    /// `nodeID` empty, too long, or not lower-case letters, digits and '-'.
    #[error("invalid nodeID {0:?}")]
    NodeId(String),
    /// `ip` is not `host:port`.
    #[error("invalid ip {0:?} (want host:port)")]
    Address(String),
    /// `domain` too long or holding control characters.
    #[error("invalid domain")]
    Domain,
    /// `fingerprint` present but not `sha256:<64 hex>`.
    #[error("invalid fingerprint")]
    Fingerprint,
}

impl Rejection {
    /// Short, fixed metric label for this rejection.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::TooLarge { .. } => "too_large",
            Rejection::Malformed(_) => "malformed",
            Rejection::NodeId(_) => "node_id",
            Rejection::Address(_) => "address",
            Rejection::Domain => "domain",
            Rejection::Fingerprint => "fingerprint",
        }
    }
}

impl Advertisement {
    /// The advertisement of a node with this identity, without a key
    /// fingerprint (add one with [`Advertisement::with_fingerprint`]).
    pub fn of(identity: &fluidos_api::NodeIdentity) -> Self {
        Advertisement {
            domain: identity.domain.clone(),
            node_id: identity.node_id.clone(),
            ip: identity.ip.clone(),
            fingerprint: None,
        }
    }

    /// The same advertisement carrying `fingerprint` (the node's REAR key),
    /// or none.
    #[must_use]
    pub fn with_fingerprint(
        mut self,
        fingerprint: Option<&fluidos_rear_identity::Fingerprint>,
    ) -> Self {
        self.fingerprint = fingerprint.map(ToString::to_string);
        self
    }

    /// The datagram to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a struct of strings cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Parses and validates one datagram.
pub fn parse(datagram: &[u8]) -> Result<Advertisement, Rejection> {
    if datagram.len() > MAX_ADVERTISEMENT_BYTES {
        return Err(Rejection::TooLarge {
            len: datagram.len(),
        });
    }
    let ad: Advertisement = serde_json::from_slice(datagram).map_err(Rejection::Malformed)?;
    validate(ad)
}

/// Checks the fields of an advertisement however it arrived (a multicast
/// datagram, or an announcement through the broker): the node ID must be
/// name-safe, `ip` a `host:port`, `domain` printable, a fingerprint well formed.
pub fn validate(ad: Advertisement) -> Result<Advertisement, Rejection> {
    if !valid_node_id(&ad.node_id) {
        return Err(Rejection::NodeId(ad.node_id));
    }
    if !valid_address(&ad.ip) {
        return Err(Rejection::Address(ad.ip));
    }
    if ad.domain.len() > MAX_DOMAIN_LEN || ad.domain.chars().any(char::is_control) {
        return Err(Rejection::Domain);
    }
    if let Some(f) = &ad.fingerprint
        && !valid_fingerprint(f)
    {
        return Err(Rejection::Fingerprint);
    }
    Ok(ad)
}

/// Whether `ad` is this node's own (multicast loopback delivers it back).
// Go compares only `ip`; the node ID is the stronger key, and `ip` is kept
// so two IDs behind one gateway address are not mistaken for a peer either.
pub fn is_own(ad: &Advertisement, own: &fluidos_api::NodeIdentity) -> bool {
    ad.node_id == own.node_id || ad.ip == own.ip
}

/// It becomes part of an object name, so only name-safe characters.
fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_NODE_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

/// `host:port` with a non-zero port; host a name, IPv4, or `[IPv6]`.
fn valid_address(addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= MAX_HOST_LEN
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    };
    port_ok && host_ok
}

fn valid_fingerprint(f: &str) -> bool {
    f.strip_prefix(FINGERPRINT_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GO_DATAGRAM: &[u8] =
        br#"{"domain":"fluidos.eu","nodeID":"4ahrqttvng","ip":"172.19.0.4:30001"}"#;

    fn identity(node_id: &str, ip: &str) -> fluidos_api::NodeIdentity {
        fluidos_api::NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: node_id.into(),
            ip: ip.into(),
            additional_information: None,
        }
    }

    #[test]
    fn go_datagram_parses_and_ours_is_byte_identical() {
        let ad = parse(GO_DATAGRAM).unwrap();
        assert_eq!(ad.node_id, "4ahrqttvng");
        assert_eq!(ad.ip, "172.19.0.4:30001");
        assert_eq!(ad.fingerprint, None);
        let ours = Advertisement::of(&identity("4ahrqttvng", "172.19.0.4:30001"));
        assert_eq!(ours.to_bytes(), GO_DATAGRAM);
    }

    #[test]
    fn the_node_key_fingerprint_is_sent_in_the_form_listeners_accept() {
        let fp = fluidos_rear_identity::Fingerprint::of_public_key(b"a key");
        let me = identity("4ahrqttvng", "172.19.0.4:30001");
        let ad = Advertisement::of(&me).with_fingerprint(Some(&fp));
        let bytes = ad.to_bytes();
        assert!(bytes.len() <= MAX_ADVERTISEMENT_BYTES);
        let got = parse(&bytes).unwrap();
        assert_eq!(got.fingerprint, Some(fp.to_string()));
        // A Go listener reads the same three fields and skips the new key.
        let mut sent: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let removed = sent.as_object_mut().unwrap().remove("fingerprint");
        assert_eq!(removed, Some(serde_json::Value::String(fp.to_string())));
        let go: serde_json::Value = serde_json::from_slice(GO_DATAGRAM).unwrap();
        assert_eq!(sent, go, "the Go fields are unchanged");
        // Without a key: exactly Go's datagram.
        assert_eq!(
            Advertisement::of(&me).with_fingerprint(None).to_bytes(),
            GO_DATAGRAM
        );
    }

    #[test]
    fn the_largest_advertisement_with_a_fingerprint_fits_a_go_buffer() {
        let fp = fluidos_rear_identity::Fingerprint::of_public_key(b"a key");
        let me = fluidos_api::NodeIdentity {
            domain: "d".repeat(MAX_DOMAIN_LEN),
            node_id: "a".repeat(MAX_NODE_ID_LEN),
            ip: format!("{}:65535", "h".repeat(MAX_HOST_LEN)),
            additional_information: None,
        };
        let bytes = Advertisement::of(&me)
            .with_fingerprint(Some(&fp))
            .to_bytes();
        assert!(bytes.len() <= MAX_ADVERTISEMENT_BYTES, "{}", bytes.len());
        assert!(parse(&bytes).is_ok());
    }

    #[test]
    fn unknown_keys_are_ignored_like_go_does() {
        let ad = parse(
            br#"{"domain":"fluidos.eu","nodeID":"a1","ip":"10.0.0.1:30000","additionalInformation":{"liqoID":"x"},"future":1}"#,
        )
        .unwrap();
        assert_eq!(ad.node_id, "a1");
    }

    #[test]
    fn fingerprint_round_trips_and_is_checked() {
        let fp = format!("sha256:{}", "ab".repeat(32));
        let mut ad = Advertisement::of(&identity("a1", "10.0.0.1:1"));
        ad.fingerprint = Some(fp.clone());
        assert_eq!(parse(&ad.to_bytes()).unwrap().fingerprint, Some(fp));
        for bad in [
            "md5:00",
            "sha256:XYZ",
            &format!("sha256:{}", "AB".repeat(32)),
        ] {
            ad.fingerprint = Some(bad.into());
            assert!(
                matches!(parse(&ad.to_bytes()), Err(Rejection::Fingerprint)),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_datagrams_are_rejected_with_a_reason() {
        let huge = vec![b' '; MAX_ADVERTISEMENT_BYTES + 1];
        let cases: Vec<(&[u8], &str)> = vec![
            (&huge, "too_large"),
            (b"", "malformed"),
            (b"\xff\xfe garbage", "malformed"),
            (b"[1,2]", "malformed"),
            (br#"{"domain":"d","ip":"1.2.3.4:5"}"#, "malformed"),
            (
                br#"{"domain":"d","nodeID":7,"ip":"1.2.3.4:5"}"#,
                "malformed",
            ),
            (br#"{"domain":"d","nodeID":"","ip":"1.2.3.4:5"}"#, "node_id"),
            (
                br#"{"domain":"d","nodeID":"Up","ip":"1.2.3.4:5"}"#,
                "node_id",
            ),
            (
                br#"{"domain":"d","nodeID":"a/b","ip":"1.2.3.4:5"}"#,
                "node_id",
            ),
            (
                br#"{"domain":"d","nodeID":"-a","ip":"1.2.3.4:5"}"#,
                "node_id",
            ),
            (br#"{"domain":"d","nodeID":"a","ip":"1.2.3.4"}"#, "address"),
            (
                br#"{"domain":"d","nodeID":"a","ip":"1.2.3.4:0"}"#,
                "address",
            ),
            (br#"{"domain":"d","nodeID":"a","ip":":80"}"#, "address"),
            (br#"{"domain":"d","nodeID":"a","ip":"a b:80"}"#, "address"),
            (br#"{"domain":"d\n","nodeID":"a","ip":"h:80"}"#, "domain"),
        ];
        for (datagram, reason) in cases {
            let got = parse(datagram).unwrap_err();
            assert_eq!(
                got.reason(),
                reason,
                "{:?}: {got}",
                String::from_utf8_lossy(datagram)
            );
        }
        let long_id = format!(
            r#"{{"domain":"d","nodeID":"{}","ip":"h:1"}}"#,
            "a".repeat(51)
        );
        assert_eq!(parse(long_id.as_bytes()).unwrap_err().reason(), "node_id");
    }

    #[test]
    fn accepted_addresses() {
        for ok in ["172.19.0.4:30001", "node-a.example:3004", "[::1]:3004"] {
            assert!(valid_address(ok), "{ok}");
        }
    }

    #[test]
    fn own_advertisements_are_recognised_by_id_or_address() {
        let me = identity("me", "10.0.0.1:30000");
        let mut ad = Advertisement::of(&me);
        assert!(is_own(&ad, &me));
        ad.node_id = "other".into();
        assert!(is_own(&ad, &me), "same gateway address");
        ad.ip = "10.0.0.2:30000".into();
        assert!(!is_own(&ad, &me));
    }
}

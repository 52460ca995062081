//! The broker messages, as the Go node and the FLUIDOS broker's router
//! exchange them. Pure.
//!
//! * Announcement (exchange `announcements_exchange`): `spec.metric`'s JSON
//!   object with this node's `ip`, `domain` and `nodeID` added (they win over
//!   metric keys of the same name), e.g.
//!   `{"bandwidth":1,"domain":"fluidos.eu","ip":"10.0.0.1:30000","latency":10,"nodeID":"a1"}`,
//!   and its REAR key's `fingerprint` when it has one (as in the multicast
//!   advertisement; Go subscribers unmarshal into a `NodeIdentity` and skip
//!   it, and the router routes on metric keys only).
//! * Rule (exchange `rules_exchange`): `spec.rule`'s JSON object as is. Go
//!   sends it JSON-encoded a second time (a JSON string holding the object,
//!   §8.2 bug 28); the router decodes until it has an object, so both forms
//!   route alike and the single encoding is what the router means.

use serde_json::{Map, Value};

use crate::advertisement::{self, Advertisement, Rejection};

/// A `spec.metric` or `spec.rule` that makes no message.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// `spec.metric` is not JSON.
    #[error("spec.metric is not JSON: {0}")]
    Metric(#[source] serde_json::Error),
    /// `spec.metric` is JSON but not an object.
    #[error("spec.metric must be a JSON object")]
    MetricNotObject,
    /// `spec.rule` is not JSON.
    #[error("spec.rule is not JSON: {0}")]
    Rule(#[source] serde_json::Error),
    /// `spec.rule` is JSON but not an object (nor a string holding one).
    #[error("spec.rule must be a JSON object")]
    RuleNotObject,
    /// A message would exceed what receivers accept.
    #[error("the {what} would be {len} bytes, more than the {MAX_MESSAGE_BYTES} receivers accept")]
    TooLarge {
        /// `announcement` or `rule`.
        what: &'static str,
        /// Its size.
        len: usize,
    },
}

/// Largest message accepted from a broker, and published to one: far more
/// than an announcement with metrics needs (Go's are about 200 bytes), far
/// less than RabbitMQ's own limit (128 MiB by default).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The announcement body of `identity` with `metric` (empty: no metrics)
/// and `fingerprint`, the node's REAR key. A `fingerprint` key of the
/// metric is never sent: receivers would pin it (or, not a string, drop
/// the announcement as malformed).
pub fn announcement(
    metric: &str,
    identity: &fluidos_api::NodeIdentity,
    fingerprint: Option<&fluidos_rear_identity::Fingerprint>,
) -> Result<Vec<u8>, MessageError> {
    let mut object = if metric.trim().is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(metric).map_err(MessageError::Metric)? {
            Value::Object(m) => m,
            _ => return Err(MessageError::MetricNotObject),
        }
    };
    object.insert("ip".into(), Value::String(identity.ip.clone()));
    object.insert("domain".into(), Value::String(identity.domain.clone()));
    object.insert("nodeID".into(), Value::String(identity.node_id.clone()));
    match fingerprint {
        Some(f) => object.insert("fingerprint".into(), Value::String(f.to_string())),
        None => object.remove("fingerprint"),
    };
    let body = serde_json::to_vec(&Value::Object(object)).map_err(MessageError::Metric)?;
    check_size("announcement", body)
}

/// The rule body: `rule`'s JSON object (an empty rule is `{}`). A rule
/// written as a JSON string holding the object (Go's encoding) is
/// unwrapped once.
pub fn rule(rule: &str) -> Result<Vec<u8>, MessageError> {
    if rule.trim().is_empty() {
        return Ok(b"{}".to_vec());
    }
    let value = match serde_json::from_str::<Value>(rule).map_err(MessageError::Rule)? {
        Value::String(inner) => {
            serde_json::from_str::<Value>(&inner).map_err(MessageError::Rule)?
        }
        v => v,
    };
    if !value.is_object() {
        return Err(MessageError::RuleNotObject);
    }
    let body = serde_json::to_vec(&value).map_err(MessageError::Rule)?;
    check_size("rule", body)
}

fn check_size(what: &'static str, body: Vec<u8>) -> Result<Vec<u8>, MessageError> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::TooLarge {
            what,
            len: body.len(),
        });
    }
    Ok(body)
}

/// Why a message from the broker was not taken as an announcement.
#[derive(Debug, thiserror::Error)]
pub enum Dropped {
    /// Longer than [`MAX_MESSAGE_BYTES`].
    #[error("message of {0} bytes exceeds {MAX_MESSAGE_BYTES}")]
    TooLarge(usize),
    /// Not a valid announcement (the multicast checks: JSON object with
    /// string `domain`, `nodeID`, `ip`, each well formed).
    #[error(transparent)]
    Invalid(#[from] Rejection),
}

impl Dropped {
    /// Short, fixed metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Dropped::TooLarge(_) => "too_large",
            Dropped::Invalid(r) => r.reason(),
        }
    }
}

/// Parses an announcement received from the broker. Metric keys are
/// ignored (as Go does: it unmarshals into a `NodeIdentity`).
pub fn parse_announcement(body: &[u8]) -> Result<Advertisement, Dropped> {
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(Dropped::TooLarge(body.len()));
    }
    let ad: Advertisement = serde_json::from_slice(body).map_err(Rejection::Malformed)?;
    Ok(advertisement::validate(ad)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn identity() -> fluidos_api::NodeIdentity {
        fluidos_api::NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "4ahrqttvng".into(),
            ip: "172.19.0.4:30001".into(),
            additional_information: None,
        }
    }

    #[test]
    fn announcement_is_the_metric_object_with_the_identity() {
        let body = announcement(
            r#"{"bandwidth":1,"latency":10,"location":"K","foo":"bar","nodeID":"forged"}"#,
            &identity(),
            None,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "bandwidth": 1, "latency": 10, "location": "K", "foo": "bar",
                "ip": "172.19.0.4:30001", "domain": "fluidos.eu", "nodeID": "4ahrqttvng",
            })
        );
        // And it is what a receiver (Go or ours) reads as the node.
        let ad = parse_announcement(&body).unwrap();
        assert_eq!(ad, Advertisement::of(&identity()));
    }

    #[test]
    fn the_node_key_is_announced_and_read_back_and_never_taken_from_the_metric() {
        let fp = fluidos_rear_identity::Fingerprint::of_public_key(b"a key");
        let forged = format!("sha256:{}", "ab".repeat(32));
        let metric = format!(r#"{{"bandwidth":1,"fingerprint":"{forged}"}}"#);
        let body = announcement(&metric, &identity(), Some(&fp)).unwrap();
        let ad = parse_announcement(&body).unwrap();
        assert_eq!(ad.fingerprint, Some(fp.to_string()));
        assert_eq!(
            ad,
            Advertisement::of(&identity()).with_fingerprint(Some(&fp)),
            "the same as the multicast advertisement"
        );
        // Without a key none is announced, whatever the metric says, and
        // a non-string one does not make the announcement malformed.
        let body = announcement(&metric, &identity(), None).unwrap();
        assert_eq!(parse_announcement(&body).unwrap().fingerprint, None);
        let body = announcement(r#"{"fingerprint":7}"#, &identity(), None).unwrap();
        assert_eq!(parse_announcement(&body).unwrap().fingerprint, None);
        // What a Go node announces (no key) reads as keyless.
        let go = br#"{"bandwidth":1,"domain":"fluidos.eu","ip":"172.19.0.4:30001","nodeID":"4ahrqttvng"}"#;
        assert_eq!(parse_announcement(go).unwrap().fingerprint, None);
        // A malformed key drops the announcement, as in multicast.
        let bad = br#"{"domain":"d","nodeID":"a","ip":"h:1","fingerprint":"sha256:AB"}"#;
        assert_eq!(parse_announcement(bad).unwrap_err().reason(), "fingerprint");
    }

    #[test]
    fn empty_metric_announces_the_identity_alone() {
        let body = announcement("  ", &identity(), None).unwrap();
        assert_eq!(parse_announcement(&body).unwrap().node_id, "4ahrqttvng");
    }

    #[test]
    fn bad_metric_is_refused_not_sent_empty() {
        // Go published an empty body (§8.2 bug 28).
        assert!(matches!(
            announcement("{", &identity(), None),
            Err(MessageError::Metric(_))
        ));
        assert!(matches!(
            announcement("3", &identity(), None),
            Err(MessageError::MetricNotObject)
        ));
        let huge = format!(r#"{{"k":"{}"}}"#, "x".repeat(MAX_MESSAGE_BYTES));
        assert!(matches!(
            announcement(&huge, &identity(), None),
            Err(MessageError::TooLarge { .. })
        ));
    }

    #[test]
    fn rule_is_encoded_once() {
        let sample =
            r#"{"MAXlatency":1000,"MINbandwidth":1,"locations":["K","J","Z"],"example":"aAbB12"}"#;
        let body = rule(sample).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(v.is_object(), "an object, not Go's string: {v}");
        assert_eq!(v, serde_json::from_str::<Value>(sample).unwrap());
        // Go's double-encoded form, written by hand, is unwrapped once.
        let go = serde_json::to_string(sample).unwrap();
        assert_eq!(rule(&go).unwrap(), body);
        assert_eq!(rule("").unwrap(), b"{}");
        assert!(matches!(rule("[1]"), Err(MessageError::RuleNotObject)));
        assert!(matches!(rule("{"), Err(MessageError::Rule(_))));
    }

    #[test]
    fn received_messages_are_bounded_and_checked() {
        let huge = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(parse_announcement(&huge).unwrap_err().reason(), "too_large");
        assert_eq!(parse_announcement(b"").unwrap_err().reason(), "malformed");
        assert_eq!(
            parse_announcement(br#""{\"nodeID\":\"a\"}""#)
                .unwrap_err()
                .reason(),
            "malformed"
        );
        assert_eq!(
            parse_announcement(br#"{"domain":"d","nodeID":"A/B","ip":"h:1"}"#)
                .unwrap_err()
                .reason(),
            "node_id"
        );
        assert_eq!(
            parse_announcement(br#"{"domain":"d","nodeID":"a","ip":"h"}"#)
                .unwrap_err()
                .reason(),
            "address"
        );
        // Bigger than a multicast datagram is fine here.
        let metric = format!(r#"{{"pad":"{}"}}"#, "x".repeat(4000));
        let body = announcement(&metric, &identity(), None).unwrap();
        assert!(body.len() > crate::advertisement::MAX_ADVERTISEMENT_BYTES);
        assert!(parse_announcement(&body).is_ok());
    }
}

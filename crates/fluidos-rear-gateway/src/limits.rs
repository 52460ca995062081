//! Bounds on what a buyer may make the provider store or look up: sizes and
//! formats of every request field that ends up in a Transaction, a ledger
//! entry, a Contract or an API-server URL (pure; the answer is a 400 naming
//! the field). Wire-compatible with the Go node: its buyers send IDs of ten
//! lower-case characters, `host:port` addresses, DNS domains, Liqo cluster
//! IDs that are DNS labels, and kubeconfigs of a few KiB.

use fluidos_api::rear::{PurchaseRequest, ReserveRequest, WireNodeIdentity};

use crate::error::ApiError;

/// Longest node ID (`buyerID.ID`): a DNS label's length.
pub const MAX_NODE_ID: usize = 63;
/// Longest Liqo cluster ID: a DNS label's length.
pub const MAX_LIQO_ID: usize = 63;
/// Longest `IP` (`host:port`): a DNS name, a colon and a port, with room for an IPv6 literal.
pub const MAX_ADDRESS: usize = 261;
/// Longest FLUIDOS domain: a DNS name's length.
pub const MAX_DOMAIN: usize = 253;
/// Longest kubeconfig a buyer may send (stored only for a Service delivered
/// by Liqo, in the Contract's `buyer-credentials-` Secret).
pub const MAX_KUBECONFIG: usize = 128 * 1024;
/// Largest `configuration.data`, as compact JSON (stored in the Transaction and the Contract).
pub const MAX_CONFIGURATION_BYTES: usize = 16 * 1024;
/// Deepest nesting of `configuration.data` (arrays and objects).
pub const MAX_CONFIGURATION_DEPTH: usize = 32;
/// Longest quantity string of a K8Slice configuration (`cpu`, `memory`, ...).
pub const MAX_QUANTITY: usize = 64;
/// Longest telemetry endpoint URL (stored in the Contract).
pub const MAX_ENDPOINT: usize = 2048;
/// Most telemetry intents (stored in the Contract).
pub const MAX_INTENTS: usize = 32;
/// Longest telemetry intent.
pub const MAX_INTENT: usize = 253;

pub use fluidos_api::naming::is_object_name;

/// An identifier of `[A-Za-z0-9._-]`, 1..=`max` bytes (pure).
fn is_identifier(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A `host[:port]` (names, IPv4, bracketed IPv6 with a zone): at most
/// [`MAX_ADDRESS`] bytes; empty is allowed, as the Go node sends it (pure).
fn is_address(s: &str) -> bool {
    s.len() <= MAX_ADDRESS
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']' | b'%')
        })
}

/// Printable ASCII without spaces, at most `max` bytes (pure).
fn is_visible(s: &str, max: usize) -> bool {
    s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

/// Nesting depth of a JSON value (a scalar is 0) (pure).
fn depth(v: &serde_json::Value) -> usize {
    // Iterative, so a deep value cannot exhaust the stack here.
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            serde_json::Value::Object(m) => stack.extend(m.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Checks a flavor ID (`flavorID`) before it is looked up.
pub fn check_flavor_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() {
        return Err(ApiError::bad_request("flavorID is required").field("flavorID"));
    }
    if !is_object_name(id) {
        return Err(ApiError::bad_request(
            "flavorID must be a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253 characters)",
        )
        .field("flavorID"));
    }
    Ok(())
}

/// Checks the buyer identity of a RESERVE (everything of it that is stored or echoed).
fn check_buyer(b: &WireNodeIdentity) -> Result<(), ApiError> {
    if b.id.is_empty() {
        return Err(ApiError::bad_request("the buyer's ID is required").field("buyerID.ID"));
    }
    if !is_identifier(&b.id, MAX_NODE_ID) {
        return Err(ApiError::bad_request(format!(
            "the buyer's ID must be 1 to {MAX_NODE_ID} characters of letters, digits, '.', '_' and '-'"
        ))
        .field("buyerID.ID"));
    }
    if !is_address(&b.ip) {
        return Err(ApiError::bad_request(format!(
            "the buyer's IP must be host:port, at most {MAX_ADDRESS} characters"
        ))
        .field("buyerID.IP"));
    }
    if !(b.domain.is_empty() || is_identifier(&b.domain, MAX_DOMAIN)) {
        return Err(ApiError::bad_request(format!(
            "the buyer's domain must be a DNS name, at most {MAX_DOMAIN} characters"
        ))
        .field("buyerID.domain"));
    }
    let info = b.additional_information.as_ref();
    if let Some(liqo) = info.and_then(|i| i.liqo_id.as_deref())
        && !liqo.is_empty()
        && !is_identifier(liqo, MAX_LIQO_ID)
    {
        return Err(ApiError::bad_request(format!(
            "the buyer's Liqo cluster ID must be 1 to {MAX_LIQO_ID} characters of letters, digits, '.', '_' and '-'"
        ))
        .field("buyerID.additionalInformation.liqoID"));
    }
    if info
        .and_then(|i| i.kubeconfig.as_deref())
        .is_some_and(|k| k.len() > MAX_KUBECONFIG)
    {
        return Err(ApiError::bad_request(format!(
            "the buyer's kubeconfig is over {MAX_KUBECONFIG} bytes"
        ))
        .field("buyerID.additionalInformation.kubeconfig"));
    }
    Ok(())
}

/// Checks the stored fields of a RESERVE body: the flavor ID, the buyer and
/// the size and depth of the configuration.
pub fn check_reserve(req: &ReserveRequest) -> Result<(), ApiError> {
    check_flavor_id(&req.flavor_id)?;
    check_buyer(&req.buyer)?;
    if let Some(c) = &req.configuration {
        if c.type_.len() > 32 {
            return Err(ApiError::bad_request("configuration type not supported")
                .field("configuration.type"));
        }
        let data = c.data.to_raw();
        if depth(&data) > MAX_CONFIGURATION_DEPTH {
            return Err(ApiError::bad_request(format!(
                "configuration.data is nested deeper than {MAX_CONFIGURATION_DEPTH} levels"
            ))
            .field("configuration.data"));
        }
        let size = serde_json::to_vec(&data).map_or(usize::MAX, |v| v.len());
        if size > MAX_CONFIGURATION_BYTES {
            return Err(ApiError::bad_request(format!(
                "configuration.data is {size} bytes; at most {MAX_CONFIGURATION_BYTES} are accepted"
            ))
            .field("configuration.data"));
        }
        if fluidos_api::FlavorTypeIdentifier::from_wire(&c.type_)
            == Some(fluidos_api::FlavorTypeIdentifier::K8Slice)
            && let Some(long) = data.as_object().and_then(|m| {
                m.iter()
                    .find(|(_, v)| v.as_str().is_some_and(|s| s.len() > MAX_QUANTITY))
            })
        {
            return Err(ApiError::bad_request(format!(
                "a quantity is at most {MAX_QUANTITY} characters"
            ))
            .field(format!("configuration.data.{}", long.0)));
        }
    }
    Ok(())
}

/// Checks the stored (and echoed) fields of a PURCHASE body.
pub fn check_purchase(req: &PurchaseRequest) -> Result<(), ApiError> {
    if let Some(c) = &req.liqo_credentials {
        if !(c.cluster_id.is_empty() || is_identifier(&c.cluster_id, MAX_LIQO_ID)) {
            return Err(ApiError::bad_request(format!(
                "clusterID must be 1 to {MAX_LIQO_ID} characters of letters, digits, '.', '_' and '-'"
            ))
            .field("liqoCredentials.clusterID"));
        }
        if c.kubeconfig.len() > MAX_KUBECONFIG {
            return Err(ApiError::bad_request(format!(
                "the kubeconfig is over {MAX_KUBECONFIG} bytes"
            ))
            .field("liqoCredentials.kubeconfig"));
        }
    }
    if let Some(t) = &req.ingress_telemetry_endpoint {
        if !is_visible(&t.endpoint, MAX_ENDPOINT) {
            return Err(ApiError::bad_request(format!(
                "the telemetry endpoint must be a URL of at most {MAX_ENDPOINT} characters"
            ))
            .field("ingressTelemetryEndpoint.endpoint"));
        }
        let intents = t.intents.as_deref().unwrap_or_default();
        if intents.len() > MAX_INTENTS {
            return Err(ApiError::bad_request(format!(
                "at most {MAX_INTENTS} telemetry intents are accepted"
            ))
            .field("ingressTelemetryEndpoint.intents"));
        }
        if let Some(i) = intents.iter().position(|s| !is_visible(s, MAX_INTENT)) {
            return Err(ApiError::bad_request(format!(
                "a telemetry intent must be at most {MAX_INTENT} visible characters"
            ))
            .field(format!("ingressTelemetryEndpoint.intents[{i}]")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn reserve(v: serde_json::Value) -> ReserveRequest {
        serde_json::from_value(v).unwrap()
    }

    fn field_of(r: Result<(), ApiError>) -> Option<String> {
        r.err().and_then(|e| {
            assert_eq!(e.status, 400, "{e:?}");
            e.body.field
        })
    }

    fn buyer(id: &str) -> serde_json::Value {
        serde_json::json!({"ID": id, "IP": "10.0.0.1:30000", "domain": "fluidos.eu",
            "additionalInformation": {"liqoID": "a1b2c3d4-0000-4000-8000-000000000000", "kubeconfig": "a2NmZw=="}})
    }

    #[test]
    fn go_node_requests_pass() {
        let go = reserve(serde_json::json!({"flavorID": "fluidos.eu-k8slice-3f9a",
            "buyerID": buyer("4ahrqttvng"),
            "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "10"}}}));
        check_reserve(&go).unwrap();
        let v6 = reserve(serde_json::json!({"flavorID": "f",
            "buyerID": {"ID": "b_1.x", "IP": "[fe80::1%eth0]:3004", "domain": ""}}));
        check_reserve(&v6).unwrap();
        let p: PurchaseRequest = serde_json::from_value(serde_json::json!({
            "liqoCredentials": {"clusterID": "liqo-c", "kubeconfig": "a2NmZw=="},
            "ingressTelemetryEndpoint": {"endpoint": "https://t.example:4317/v1", "intents": ["latency"]}}))
        .unwrap();
        check_purchase(&p).unwrap();
        check_purchase(&PurchaseRequest::default()).unwrap();
    }

    #[test]
    fn oversized_or_malformed_reserve_fields_are_named() {
        let long = "x".repeat(300);
        let cases = [
            (
                serde_json::json!({"flavorID": "?watch=true", "buyerID": buyer("b")}),
                "flavorID",
            ),
            (
                serde_json::json!({"flavorID": "a/status", "buyerID": buyer("b")}),
                "flavorID",
            ),
            (
                serde_json::json!({"flavorID": "", "buyerID": buyer("b")}),
                "flavorID",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": buyer(&"b".repeat(64))}),
                "buyerID.ID",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": buyer("b c")}),
                "buyerID.ID",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": {"ID": "b", "IP": long}}),
                "buyerID.IP",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": {"ID": "b", "IP": "a b:1"}}),
                "buyerID.IP",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": {"ID": "b", "domain": long}}),
                "buyerID.domain",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": {"ID": "b", "additionalInformation": {"liqoID": "x".repeat(64)}}}),
                "buyerID.additionalInformation.liqoID",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": {"ID": "b", "additionalInformation": {"kubeconfig": "k".repeat(MAX_KUBECONFIG + 1)}}}),
                "buyerID.additionalInformation.kubeconfig",
            ),
            (
                serde_json::json!({"flavorID": "f", "buyerID": buyer("b"),
                "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1", "junk": "j".repeat(MAX_CONFIGURATION_BYTES)}}}),
                "configuration.data",
            ),
        ];
        for (body, field) in cases {
            assert_eq!(
                field_of(check_reserve(&reserve(body.clone()))).as_deref(),
                Some(field),
                "{body}"
            );
        }
        let body = reserve(serde_json::json!({"flavorID": "f", "buyerID": buyer("b"),
            "configuration": {"type": "k8slice", "data": {"cpu": "9".repeat(65), "memory": "1Gi", "pods": "1"}}}));
        assert_eq!(
            field_of(check_reserve(&body)).as_deref(),
            Some("configuration.data.cpu")
        );
        let mut deep = serde_json::json!(1);
        for _ in 0..=MAX_CONFIGURATION_DEPTH {
            deep = serde_json::json!([deep]);
        }
        let body = reserve(serde_json::json!({"flavorID": "f", "buyerID": buyer("b"),
            "configuration": {"type": "service", "data": {"configurationData": deep}}}));
        assert_eq!(
            field_of(check_reserve(&body)).as_deref(),
            Some("configuration.data")
        );
    }

    #[test]
    fn oversized_or_malformed_purchase_fields_are_named() {
        let purchase =
            |v: serde_json::Value| -> PurchaseRequest { serde_json::from_value(v).unwrap() };
        let cases = [
            (
                serde_json::json!({"liqoCredentials": {"clusterID": "a/b"}}),
                "liqoCredentials.clusterID",
            ),
            (
                serde_json::json!({"liqoCredentials": {"kubeconfig": "k".repeat(MAX_KUBECONFIG + 1)}}),
                "liqoCredentials.kubeconfig",
            ),
            (
                serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "e".repeat(MAX_ENDPOINT + 1)}}),
                "ingressTelemetryEndpoint.endpoint",
            ),
            (
                serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "e", "intents": vec!["i"; MAX_INTENTS + 1]}}),
                "ingressTelemetryEndpoint.intents",
            ),
            (
                serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "e", "intents": ["ok", "not ok"]}}),
                "ingressTelemetryEndpoint.intents[1]",
            ),
        ];
        for (body, field) in cases {
            assert_eq!(
                field_of(check_purchase(&purchase(body.clone()))).as_deref(),
                Some(field),
                "{body}"
            );
        }
    }

    #[test]
    fn depth_counts_nesting_without_recursion() {
        assert_eq!(depth(&serde_json::json!(1)), 0);
        assert_eq!(depth(&serde_json::json!({"a": [1, {"b": 2}]})), 3);
    }
}

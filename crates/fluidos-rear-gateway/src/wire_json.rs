//! Wire JSON with the Go node's key order inside raw payloads.
//!
//! `fluidos-api` keeps `type.data` and `configuration.data` as
//! `serde_json::Value`, whose objects serialize with sorted keys
//! (`charateristics, policies, properties`), while Go marshals the typed
//! structs in field order (`charateristics, properties, policies`). Here the
//! payload is re-serialized through its typed struct and spliced back in
//! place of the sorted text, which the same serializer wrote byte for byte.

use fluidos_api::FlavorTypeIdentifier;
use fluidos_api::configuration::{K8SliceConfiguration, ServiceConfiguration};
use fluidos_api::flavor::ServiceFlavor;
use fluidos_api::rear::{
    WireConfiguration, WireContract, WireFlavor, WireK8Slice, WireTransaction,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn retyped<T: DeserializeOwned + Serialize>(v: &serde_json::Value) -> Option<String> {
    let typed: T = serde_json::from_value(v.clone()).ok()?;
    serde_json::to_string(&typed).ok()
}

/// Replaces `<prefix><sorted>}` by `<prefix><typed>}` (first occurrence).
fn splice(json: &mut String, prefix: &str, data: &serde_json::Value, typed: Option<String>) {
    let (Some(typed), Ok(sorted)) = (typed, serde_json::to_string(data)) else {
        return;
    };
    if typed == sorted {
        return;
    }
    let pattern = format!("{prefix}{sorted}}}");
    if let Some(at) = json.find(&pattern) {
        let start = at + prefix.len();
        json.replace_range(start..start + sorted.len(), &typed);
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn fix_flavor(json: &mut String, f: &WireFlavor) {
    let typed = match FlavorTypeIdentifier::from_wire(&f.type_.name) {
        Some(FlavorTypeIdentifier::K8Slice) => retyped::<WireK8Slice>(&f.type_.data),
        Some(FlavorTypeIdentifier::Service) => retyped::<ServiceFlavor>(&f.type_.data),
        _ => None,
    };
    let prefix = format!("\"type\":{{\"name\":{},\"data\":", json_str(&f.type_.name));
    splice(json, &prefix, &f.type_.data, typed);
}

fn fix_configuration(json: &mut String, c: &WireConfiguration) {
    let typed = match FlavorTypeIdentifier::from_wire(&c.type_) {
        Some(FlavorTypeIdentifier::K8Slice) => retyped::<K8SliceConfiguration>(&c.data),
        Some(FlavorTypeIdentifier::Service) => retyped::<ServiceConfiguration>(&c.data),
        _ => None,
    };
    let prefix = format!(
        "\"configuration\":{{\"type\":{},\"data\":",
        json_str(&c.type_)
    );
    splice(json, &prefix, &c.data, typed);
}

/// A wire flavor as the Go node writes it.
pub(crate) fn flavor(f: &WireFlavor) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string(f)?;
    fix_flavor(&mut s, f);
    Ok(s)
}

/// A wire transaction as the Go node writes it.
pub(crate) fn transaction(t: &WireTransaction) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string(t)?;
    if let Some(c) = &t.configuration {
        fix_configuration(&mut s, c);
    }
    Ok(s)
}

/// A wire contract as the Go node writes it.
pub(crate) fn contract(c: &WireContract) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string(c)?;
    fix_flavor(&mut s, &c.flavor);
    if let Some(cfg) = &c.configuration {
        fix_configuration(&mut s, cfg);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn k8slice_payload_in_go_field_order() {
        let data = serde_json::json!({
            "charateristics": {"architecture": "amd64", "cpu": "1", "memory": "1Gi", "pods": "10",
                "gpu": {"model": "", "cores": "0", "memory": "0"}, "storage": "0"},
            "properties": {},
            "policies": {"partitionability": {"cpuMin": "0", "memoryMin": "0", "podsMin": "0",
                "cpuStep": "1", "memoryStep": "100Mi", "podsStep": "0"}}
        });
        let f = WireFlavor {
            flavor_id: "f".into(),
            provider_id: "p".into(),
            type_: fluidos_api::rear::WireFlavorType {
                name: "k8slice".into(),
                data,
            },
            network_property_type: None,
            timestamp: "t".into(),
            location: None,
            price: Default::default(),
            owner: Default::default(),
            availability: true,
        };
        let s = flavor(&f).unwrap();
        assert!(
            s.contains(r#""data":{"charateristics":{"architecture":"amd64","cpu":"1","memory":"1Gi","pods":"10","gpu":{"model":"","cores":"0","memory":"0"},"storage":"0"},"properties":{},"policies":{"partitionability":{"cpuMin":"0","memoryMin":"0","podsMin":"0","cpuStep":"1","memoryStep":"100Mi","podsStep":"0"}}}"#),
            "{s}"
        );
        let back: WireFlavor = serde_json::from_str(&s).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn configuration_payload_in_go_field_order() {
        let t = WireTransaction {
            transaction_id: "t".into(),
            flavor_id: "f".into(),
            configuration: Some(WireConfiguration {
                type_: "k8slice".into(),
                data: serde_json::json!({"storage": "1Gi", "pods": "1", "memory": "1Gi", "cpu": "1"}),
            }),
            buyer: Default::default(),
            cluster_id: "c".into(),
            expiration_time: "e".into(),
        };
        let s = transaction(&t).unwrap();
        assert!(
            s.contains(r#""configuration":{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"1","storage":"1Gi"}}"#),
            "{s}"
        );
    }
}

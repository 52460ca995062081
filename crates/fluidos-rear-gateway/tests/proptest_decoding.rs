//! Arbitrary query strings and request bodies never panic the decoders, and
//! every rejection names something.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fluidos_api::FlavorTypeIdentifier;
use fluidos_api::rear::{PurchaseRequest, ReserveRequest};
use fluidos_rear_gateway::{decode, query};
use proptest::prelude::*;

/// Pieces of the grammar, so generated queries get past the first check often.
fn key_part() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("filter".to_owned()),
        Just("[cpu]".to_owned()),
        Just("[memory]".to_owned()),
        Just("[pods]".to_owned()),
        Just("[storage]".to_owned()),
        Just("[gpu]".to_owned()),
        Just("[architecture]".to_owned()),
        Just("[category]".to_owned()),
        Just("[tags]".to_owned()),
        Just("[match]".to_owned()),
        Just("[range]".to_owned()),
        Just("[min]".to_owned()),
        Just("[max]".to_owned()),
        Just("[regex]".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("%5B".to_owned()),
        "[a-z%\\[\\]]{0,6}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1".to_owned()),
        Just("500m".to_owned()),
        Just("1Gi".to_owned()),
        Just("-3".to_owned()),
        Just("1e400".to_owned()),
        Just("99999999999999999999999999Ei".to_owned()),
        Just("amd64".to_owned()),
        Just("%ff%fe".to_owned()),
        ".{0,12}",
    ]
}

fn query_string() -> impl Strategy<Value = String> {
    prop::collection::vec((prop::collection::vec(key_part(), 0..5), value()), 0..6).prop_map(
        |pairs| {
            pairs
                .into_iter()
                .map(|(k, v)| format!("{}={v}", k.concat()))
                .collect::<Vec<_>>()
                .join("&")
        },
    )
}

/// JSON-ish bodies: mutations of valid ones plus arbitrary bytes.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let valid = r#"{"flavorID":"f","buyerID":{"ID":"b","IP":"1:2","domain":"d","additionalInformation":{"liqoID":"l"}},"configuration":{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"1"}}}"#;
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (0..valid.len(), any::<u8>()).prop_map(move |(i, b)| {
            let mut v = valid.as_bytes().to_vec();
            v[i] = b;
            v
        }),
        (0..valid.len()).prop_map(move |i| valid.as_bytes()[..i].to_vec()),
        "\\{(\"[a-zA-Z]{1,12}\":(null|1|\"x\"|\\{\\}|\\[\\]),?){0,6}\\}"
            .prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn query_parsing_never_panics(q in query_string(), raw in ".{0,64}") {
        for t in [FlavorTypeIdentifier::K8Slice, FlavorTypeIdentifier::Service, FlavorTypeIdentifier::VM] {
            for input in [q.as_str(), raw.as_str()] {
                if let Err(e) = query::parse(input, t) {
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn body_decoding_never_panics(b in body()) {
        match decode::json::<ReserveRequest>(&b) {
            Ok(r) => {
                // A decoded configuration converts or fails with a named field.
                if let Some(Err(e)) = r.configuration.map(|c| c.to_crd()) {
                    prop_assert!(e.field.starts_with("configuration"));
                }
            }
            Err(e) => {
                prop_assert_eq!(e.status.as_u16(), 400);
                prop_assert!(!e.body.error.is_empty());
            }
        }
        if let Err(e) = decode::json_or_default::<PurchaseRequest>(&b) {
            prop_assert_eq!(e.status.as_u16(), 400);
        }
    }
}

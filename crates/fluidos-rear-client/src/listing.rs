//! A flavor listing decoded within bounds.
//!
//! A provider is a stranger: its listing is read up to
//! [`MAX_LIST_BYTES`], then walked element by element as raw JSON borrowed
//! from that buffer (no tree of the whole answer is ever built), and only the
//! first [`MAX_LISTED_FLAVORS`] flavors of at most [`MAX_LISTED_FLAVOR_BYTES`]
//! each are decoded, while what they hold stays within [`MAX_DECODED_BYTES`].
//! The rest is counted, not kept, so the memory one answer can cost is the
//! buffer plus that budget, whatever the provider sends. Four hostile
//! providers answering 16 MiB listings used to take a consumer past 400 MB.
//!
//! What a flavor holds is estimated, not its JSON length: JSON of small
//! elements (`[{"":0},...]`) decodes to many times its size, a map of one
//! entry being a B-tree node of hundreds of bytes. So each element or key
//! is charged [`ELEMENT_BYTES`] before decoding, and a payload kept as a
//! JSON value (an untyped `type.data`) is charged what its tree holds.

use std::borrow::Cow;
use std::fmt;

use fluidos_api::rear::{WireFlavor, WireFlavorData};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// The largest listing read: a thousand upstream flavors (about 1.5 KiB
/// each) fit more than twice over.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// Flavors decoded from one listing; later ones are counted, not read.
pub const MAX_LISTED_FLAVORS: usize = 1024;
/// A flavor whose JSON is larger is not decoded (upstream's are a few KiB;
/// discovery keeps none over 32 KiB).
pub const MAX_LISTED_FLAVOR_BYTES: usize = 32 * 1024;
/// Estimated bytes the flavors decoded from one listing may hold in all
/// (a thousand typed upstream flavors fit; the consumer keeps at most 256
/// of one provider).
pub const MAX_DECODED_BYTES: usize = 4 * 1024 * 1024;
/// Charged per element, key or value separator of a flavor's JSON: a
/// decoded element of a vector takes a slot of up to this much (a
/// `String`, with room for the vector's growth); maps of untyped payloads
/// are charged on top, by what their trees hold.
pub const ELEMENT_BYTES: usize = 32;
/// Charged per map of a payload kept as a JSON value, per few entries: a
/// B-tree node of eleven `String` keys and values.
const MAP_NODE_BYTES: usize = 11 * (size_of::<String>() + size_of::<serde_json::Value>()) + 32;
/// IDs of unread flavors kept to name in statuses.
const MAX_UNREAD_IDS: usize = 10;
/// Characters of an unread flavor's ID kept.
const MAX_ID_CHARS: usize = 253;

/// What a provider listed, within bounds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlavorListing {
    /// The flavors decoded, in the provider's order.
    pub flavors: Vec<WireFlavor>,
    /// Flavors listed but not decoded (each too large, or past the count or
    /// byte budget of one listing).
    pub unread: usize,
    /// The first few of those, by ID (when they had a readable one).
    pub unread_ids: Vec<String>,
}

impl FlavorListing {
    /// Why some flavors were not read, for a status; `None` when all were.
    pub fn unread_reason(&self) -> Option<String> {
        (self.unread > 0).then(|| {
            format!(
                "{} listed flavors not read: a listing is read up to {MAX_LISTED_FLAVORS} flavors \
                 holding an estimated {MAX_DECODED_BYTES} bytes, each at most {MAX_LISTED_FLAVOR_BYTES} bytes of JSON",
                self.unread
            )
        })
    }
}

impl From<Vec<WireFlavor>> for FlavorListing {
    fn from(flavors: Vec<WireFlavor>) -> Self {
        FlavorListing {
            flavors,
            ..FlavorListing::default()
        }
    }
}

/// Decodes a listing body: a JSON array of flavors, or `null`.
pub(crate) fn decode(bytes: &[u8]) -> Result<FlavorListing, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let listing = de.deserialize_option(ListingVisitor)?;
    de.end()?;
    Ok(listing)
}

struct ListingVisitor;

impl<'de> Visitor<'de> for ListingVisitor {
    type Value = FlavorListing;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of flavors or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<FlavorListing, E> {
        Ok(FlavorListing::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<FlavorListing, E> {
        Ok(FlavorListing::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<FlavorListing, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FlavorListing, A::Error> {
        let mut out = FlavorListing::default();
        let mut decoded_bytes = 0;
        // Once a decoded flavor did not fit, the rest are not decoded: a
        // provider sizing them just under the first check would otherwise
        // have each one built and thrown away.
        let mut spent = false;
        loop {
            if out.flavors.len() >= MAX_LISTED_FLAVORS {
                // Past the count: skipped without allocating.
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    break;
                }
                out.unread += 1;
                continue;
            }
            // Borrowed from the buffer: nothing is built for it yet.
            let Some(raw) = seq.next_element::<&'de RawValue>()? else {
                break;
            };
            let size = raw.get().len();
            let charged = size + ELEMENT_BYTES * elements(raw.get());
            if spent
                || size > MAX_LISTED_FLAVOR_BYTES
                || decoded_bytes + charged > MAX_DECODED_BYTES
            {
                out.unread(raw);
                continue;
            }
            let flavor = WireFlavor::deserialize(raw).map_err(de::Error::custom)?;
            let held = charged + payload_bytes(&flavor);
            if decoded_bytes + held > MAX_DECODED_BYTES {
                // Dropped as soon as it is decoded: one flavor at a time.
                out.unread(raw);
                spent = true;
                continue;
            }
            decoded_bytes += held;
            out.flavors.push(flavor);
        }
        Ok(out)
    }
}

impl FlavorListing {
    /// Counts a flavor not read, naming the first few.
    fn unread(&mut self, raw: &RawValue) {
        self.unread += 1;
        if self.unread_ids.len() < MAX_UNREAD_IDS
            && let Some(id) = flavor_id(raw)
        {
            self.unread_ids.push(id);
        }
    }
}

/// Elements, keys and values in `json` at most: its separators and
/// openings (counted inside strings too, which only overestimates).
fn elements(json: &str) -> usize {
    json.bytes()
        .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
        .count()
}

/// What a flavor's `type.data` holds beyond its slot: the tree of a payload
/// kept as a JSON value, and, for a typed one, the tree of its JSON form
/// (typed payloads keep JSON values too: a service's configuration
/// template, additional properties, selectors), an overestimate for the
/// rest of it.
fn payload_bytes(flavor: &WireFlavor) -> usize {
    match &flavor.type_.data {
        WireFlavorData::Raw(value) => tree_bytes(value),
        typed => tree_bytes(&typed.to_raw()),
    }
}

/// What a JSON value's tree holds on the heap (estimated).
fn tree_bytes(value: &Value) -> usize {
    let mut held = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => held += s.capacity(),
            Value::Array(items) => {
                held += items.capacity() * size_of::<Value>();
                stack.extend(items);
            }
            Value::Object(map) => {
                // Nodes are at least half full but for the root.
                held += map.len().div_ceil(5).max(1) * MAP_NODE_BYTES;
                held += map.keys().map(String::capacity).sum::<usize>();
                stack.extend(map.values());
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    held
}

/// The `flavorID` of an unread flavor, cut to [`MAX_ID_CHARS`], read
/// without decoding the rest (borrowed unless it has escapes).
fn flavor_id(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(rename = "flavorID", alias = "flavorId", borrow)]
        flavor_id: Cow<'a, str>,
    }
    serde_json::from_str::<IdOnly<'_>>(raw.get())
        .ok()
        .map(|i| i.flavor_id.chars().take(MAX_ID_CHARS).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn flavor(id: &str, pad: usize) -> String {
        format!(
            r#"{{"flavorID":"{id}","providerID":"p","type":{{"name":"Other","data":{{"pad":"{}"}}}},"timestamp":"","price":{{"amount":"1","currency":"EUR","period":"hourly"}},"owner":{{"domain":"d","nodeID":"p","ip":"h:1"}},"availability":true}}"#,
            "x".repeat(pad)
        )
    }

    #[test]
    fn null_and_empty_lists_are_empty() {
        assert_eq!(decode(b"null").unwrap(), FlavorListing::default());
        assert_eq!(decode(b"[]").unwrap(), FlavorListing::default());
        assert!(decode(b"{}").is_err());
        assert!(decode(b"[] x").is_err());
    }

    #[test]
    fn flavors_past_the_count_are_counted_not_decoded() {
        let n = MAX_LISTED_FLAVORS + 5;
        let body = format!(
            "[{}]",
            (0..n)
                .map(|i| flavor(&format!("f{i}"), 0))
                .collect::<Vec<_>>()
                .join(",")
        );
        let listing = decode(body.as_bytes()).unwrap();
        assert_eq!(listing.flavors.len(), MAX_LISTED_FLAVORS);
        assert_eq!(listing.flavors[0].flavor_id, "f0");
        assert_eq!(listing.unread, 5);
        assert!(
            listing
                .unread_reason()
                .unwrap()
                .starts_with("5 listed flavors not read")
        );
        // Past the count even malformed elements cost nothing but a count.
        let body = format!(
            "[{}]",
            (0..MAX_LISTED_FLAVORS)
                .map(|i| flavor(&format!("f{i}"), 0))
                .chain(std::iter::once(r#"{"nested":[[[1]]]}"#.to_owned()))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(decode(body.as_bytes()).unwrap().unread, 1);
    }

    #[test]
    fn large_flavors_and_the_byte_budget_leave_flavors_unread_by_id() {
        let big = flavor("big", MAX_LISTED_FLAVOR_BYTES);
        let body = format!("[{},{big},{}]", flavor("a", 0), flavor("b", 0));
        let listing = decode(body.as_bytes()).unwrap();
        let ids: Vec<_> = listing
            .flavors
            .iter()
            .map(|f| f.flavor_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(
            (listing.unread, listing.unread_ids.clone()),
            (1, vec!["big".to_owned()])
        );

        // Flavors just under the per-flavor size: the budget stops them.
        let each = MAX_LISTED_FLAVOR_BYTES - 1024;
        let fit = MAX_DECODED_BYTES / (each + 300);
        let body = format!(
            "[{}]",
            (0..fit + 3)
                .map(|i| flavor(&format!("f{i}"), each))
                .collect::<Vec<_>>()
                .join(",")
        );
        let listing = decode(body.as_bytes()).unwrap();
        assert!(
            listing.flavors.len() <= fit + 1,
            "{}",
            listing.flavors.len()
        );
        assert_eq!(listing.flavors.len() + listing.unread, fit + 3);
        assert!(listing.unread >= 2);
    }

    /// Small elements decode to many times their JSON: what they hold is
    /// charged, not their length.
    #[test]
    fn payloads_that_decode_to_large_trees_are_charged_what_they_hold() {
        let tiny_maps = |id: &str| {
            let maps = vec![r#"{"":0}"#; 4000].join(",");
            format!(
                r#"{{"flavorID":"{id}","providerID":"p","type":{{"name":"Other","data":{{"a":[{maps}]}}}},"timestamp":"","price":{{"amount":"1","currency":"EUR","period":"hourly"}},"owner":{{"domain":"d","nodeID":"p","ip":"h:1"}},"availability":true}}"#
            )
        };
        let one = tiny_maps("t0");
        assert!(one.len() < MAX_LISTED_FLAVOR_BYTES);
        let n = 40;
        let body = format!(
            "[{}]",
            (0..n)
                .map(|i| tiny_maps(&format!("t{i}")))
                .collect::<Vec<_>>()
                .join(",")
        );
        // 40 such flavors are about 1.1 MiB of JSON, each holding over
        // 2.5 MiB once decoded: one fits the budget.
        let listing = decode(body.as_bytes()).unwrap();
        assert_eq!(listing.flavors.len(), 1, "{}", listing.unread);
        assert_eq!(listing.unread, n - 1);
        assert!(payload_bytes(&listing.flavors[0]) > 4000 * MAP_NODE_BYTES);
    }

    /// A typed payload holding a JSON value (K8Slice properties'
    /// additionalProperties) is charged that value's tree too.
    #[test]
    fn typed_payloads_holding_json_values_are_charged_their_trees() {
        let mut data = serde_json::to_value(fluidos_api::rear::WireK8Slice {
            characteristics: fluidos_api::rear::characteristics("amd64", "4", "8Gi", "110"),
            ..Default::default()
        })
        .unwrap();
        let maps: Vec<Value> = (0..4000).map(|_| serde_json::json!({"": 0})).collect();
        data["properties"]["additionalProperties"] = serde_json::json!({ "a": maps });
        let one = serde_json::json!({
            "flavorID": "k", "providerID": "p", "type": {"name": "k8slice", "data": data},
            "timestamp": "", "price": {"amount": "1", "currency": "EUR", "period": "hourly"},
            "owner": {"domain": "d", "nodeID": "p", "ip": "h:1"}, "availability": true,
        });
        let body = serde_json::to_vec(&vec![one; 40]).unwrap();
        let listing = decode(&body).unwrap();
        assert!(
            matches!(listing.flavors[0].type_.data, WireFlavorData::K8Slice(_)),
            "typed"
        );
        assert!(payload_bytes(&listing.flavors[0]) > 4000 * MAP_NODE_BYTES);
        assert_eq!(listing.flavors.len(), 1, "{}", listing.unread);
        assert_eq!(listing.unread, 39);
    }

    #[test]
    fn a_bad_flavor_within_bounds_is_an_error() {
        assert!(decode(br#"[{"flavorID":1}]"#).is_err());
    }
}

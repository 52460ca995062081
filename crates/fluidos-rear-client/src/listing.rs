//! A flavor listing decoded within bounds.
//!
//! A provider is a stranger: its listing is read up to
//! [`MAX_LIST_BYTES`], then walked element by element as raw JSON borrowed
//! from that buffer (no tree of the whole answer is ever built), and only the
//! first [`MAX_LISTED_FLAVORS`] flavors of at most [`MAX_LISTED_FLAVOR_BYTES`]
//! each are decoded. The rest is counted, not kept, so the memory one answer
//! can cost is the buffer plus what those flavors decode to, whatever the
//! provider sends. Four hostile providers answering 16 MiB listings used to
//! take a consumer past 400 MB.

use std::fmt;

use fluidos_api::rear::WireFlavor;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The largest listing read: a thousand upstream flavors (about 1.5 KiB
/// each) fit more than twice over.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// Flavors decoded from one listing; later ones are counted, not read.
pub const MAX_LISTED_FLAVORS: usize = 1024;
/// A flavor whose JSON is larger is not decoded (upstream's are a few KiB).
pub const MAX_LISTED_FLAVOR_BYTES: usize = 64 * 1024;
/// Bytes of flavor JSON decoded from one listing in all.
pub const MAX_DECODED_BYTES: usize = 1024 * 1024;
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
                 and {MAX_DECODED_BYTES} bytes of flavors, each at most {MAX_LISTED_FLAVOR_BYTES} bytes",
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
            if size > MAX_LISTED_FLAVOR_BYTES || decoded_bytes + size > MAX_DECODED_BYTES {
                out.unread += 1;
                if out.unread_ids.len() < MAX_UNREAD_IDS
                    && let Some(id) = flavor_id(raw)
                {
                    out.unread_ids.push(id.chars().take(MAX_ID_CHARS).collect());
                }
                continue;
            }
            decoded_bytes += size;
            let flavor = WireFlavor::deserialize(raw).map_err(de::Error::custom)?;
            out.flavors.push(flavor);
        }
        Ok(out)
    }
}

/// The `flavorID` of an unread flavor, read without decoding the rest.
fn flavor_id(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct IdOnly {
        #[serde(rename = "flavorID", alias = "flavorId")]
        flavor_id: String,
    }
    serde_json::from_str::<IdOnly>(raw.get())
        .ok()
        .map(|i| i.flavor_id)
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

    #[test]
    fn a_bad_flavor_within_bounds_is_an_error() {
        assert!(decode(br#"[{"flavorID":1}]"#).is_err());
    }
}

//! The query-string filter grammar of `GET /api/v2/flavors/{k8slice,service}`.
//!
//! Keys, as the Go node accepts them (`pkg/rear-controller/gateway/utils.go`):
//!
//! - K8Slice: `filter[<res>][match]=<v>`, `filter[<res>][range][min|max]=<q>`
//!   with `<res>` one of `architecture`, `cpu`, `memory`, `pods`, `storage`
//!   (plus `gpu` here, matched against the GPU count);
//! - Service: `filter[category][match]=<s>`, `filter[tags][match]=<s>`.
//!
//! Differences from upstream, each a fix: the `filter` prefix may be missing
//! (the Go client sends `[storage][range][min]`), `filter[cpu][range]` without
//! `[min]`/`[max]` is a 400 instead of a handler panic, and a range whose min
//! exceeds its max is a 400.

use std::collections::HashSet;

use fluidos_api::solver::{
    FlavorSelector, K8SliceSelector, QuantityFilter, ServiceSelector, StringFilter,
};
use fluidos_api::{FlavorTypeIdentifier, quantity::Amount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A query key or value the grammar rejects; `key` is the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("query parameter {key:?}: {message}")]
pub struct QueryError {
    /// The query key at fault.
    pub key: String,
    /// Why it was rejected.
    pub message: String,
}

impl QueryError {
    fn new(key: &str, message: impl Into<String>) -> Self {
        QueryError {
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// A parsed selector plus the GPU filter upstream's grammar lacks.
#[derive(Debug, Clone, PartialEq)]
pub struct QuerySelector {
    /// Filters of the upstream grammar.
    pub selector: FlavorSelector,
    /// `filter[gpu][...]`, on the GPU count (K8Slice only).
    pub gpu: Option<QuantityFilter>,
}

impl QuerySelector {
    /// True when a decoded flavor (with remaining amounts) passes every filter.
    pub fn matches(&self, flavor: &fluidos_api::flavor::FlavorTypeData) -> bool {
        use fluidos_api::flavor::FlavorTypeData;
        if !self.selector.matches(flavor) {
            return false;
        }
        match (&self.gpu, flavor) {
            (None, _) => true,
            // Like storage: a flavor without a GPU never matches a GPU filter.
            (Some(f), FlavorTypeData::K8Slice(k)) => k
                .characteristics
                .gpu
                .as_ref()
                .is_some_and(|g| f.matches(&g.cores)),
            (Some(_), _) => false,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Res {
    Architecture,
    Cpu,
    Memory,
    Pods,
    Gpu,
    Storage,
    Category,
    Tags,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bound {
    Min,
    Max,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Match,
    Range(Bound),
}

/// What one resource's keys have set so far.
#[derive(Default)]
struct Slot {
    matched: Option<String>,
    min: Option<String>,
    max: Option<String>,
}

/// Splits `filter[a][b][c]` (or `[a][b][c]`) into its bracketed segments.
fn segments(key: &str) -> Option<Vec<&str>> {
    let rest = key.strip_prefix("filter").unwrap_or(key);
    let mut out = Vec::new();
    let mut rest = rest;
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[')?;
        let end = inner.find(']')?;
        let seg = &inner[..end];
        if seg.contains('[') {
            return None;
        }
        out.push(seg);
        rest = &inner[end + 1..];
    }
    (!out.is_empty()).then_some(out)
}

fn parse_key(key: &str, t: FlavorTypeIdentifier) -> Result<(Res, Op), QueryError> {
    let unknown = || {
        QueryError::new(
            key,
            match t {
                FlavorTypeIdentifier::Service => {
                    "not a filter key; use filter[category|tags][match]"
                }
                _ => {
                    "not a filter key; use filter[architecture|cpu|memory|pods|gpu|storage][match] or filter[<resource>][range][min|max]"
                }
            },
        )
    };
    let segs = segments(key).ok_or_else(unknown)?;
    let res = match (t, segs[0]) {
        (FlavorTypeIdentifier::Service, "category") => Res::Category,
        (FlavorTypeIdentifier::Service, "tags") => Res::Tags,
        (FlavorTypeIdentifier::Service, _) => return Err(unknown()),
        (_, "architecture") => Res::Architecture,
        (_, "cpu") => Res::Cpu,
        (_, "memory") => Res::Memory,
        (_, "pods") => Res::Pods,
        (_, "gpu") => Res::Gpu,
        (_, "storage") => Res::Storage,
        _ => return Err(unknown()),
    };
    let op = match (segs.get(1).copied(), segs.get(2).copied(), segs.len()) {
        // Upstream ignores a third segment after `match` (and the service
        // grammar has none); we keep accepting it for the K8Slice grammar.
        (Some("match"), None, 2) => Op::Match,
        (Some("match"), Some("min" | "max" | "regex"), 3) if t != FlavorTypeIdentifier::Service => {
            Op::Match
        }
        (Some("range"), _, _) if t == FlavorTypeIdentifier::Service => return Err(unknown()),
        (Some("range"), _, _) if res == Res::Architecture => {
            return Err(QueryError::new(
                key,
                "architecture supports only [match] in the query grammar",
            ));
        }
        (Some("range"), Some("min"), 3) => Op::Range(Bound::Min),
        (Some("range"), Some("max"), 3) => Op::Range(Bound::Max),
        (Some("range"), Some("regex"), 3) => {
            return Err(QueryError::new(
                key,
                "[range][regex] is not supported for quantities",
            ));
        }
        (Some("range"), None, 2) => {
            return Err(QueryError::new(key, "[range] needs [min] or [max]"));
        }
        _ => return Err(unknown()),
    };
    Ok((res, op))
}

fn quantity(key: &str, v: &str) -> Result<Quantity, QueryError> {
    Amount::parse(v)
        .map(|_| Quantity(v.to_owned()))
        .map_err(|e| QueryError::new(key, e.to_string()))
}

/// Parses a raw (still URL-encoded) query string for flavors of type `t`.
///
/// Only `K8Slice` and `Service` have a grammar; any other type is an error.
pub fn parse(raw_query: &str, t: FlavorTypeIdentifier) -> Result<QuerySelector, QueryError> {
    let mut seen_keys = HashSet::new();
    let mut slots: Vec<(Res, Slot, String)> = Vec::new();
    for (key, value) in form_urlencoded::parse(raw_query.as_bytes()) {
        // `a&&b` and a trailing `&` produce empty pairs; Go ignores them too.
        if key.is_empty() && value.is_empty() {
            continue;
        }
        // Go merges repeated keys and reads the first value only.
        if !seen_keys.insert(key.clone().into_owned()) {
            continue;
        }
        let (res, op) = parse_key(&key, t)?;
        let idx = match slots.iter().position(|(r, _, _)| *r == res) {
            Some(i) => i,
            None => {
                slots.push((res, Slot::default(), key.clone().into_owned()));
                slots.len() - 1
            }
        };
        let slot = &mut slots[idx].1;
        let v = value.into_owned();
        match op {
            Op::Match => {
                if slot.matched.is_some() {
                    return Err(QueryError::new(&key, "a second [match] for the same field"));
                }
                if slot.min.is_some() || slot.max.is_some() {
                    return Err(QueryError::new(
                        &key,
                        "[match] and [range] on the same field",
                    ));
                }
                slot.matched = Some(v);
            }
            Op::Range(b) => {
                if slot.matched.is_some() {
                    return Err(QueryError::new(
                        &key,
                        "[range] and [match] on the same field",
                    ));
                }
                let target = match b {
                    Bound::Min => &mut slot.min,
                    Bound::Max => &mut slot.max,
                };
                if target.is_some() {
                    return Err(QueryError::new(&key, "duplicate range bound"));
                }
                *target = Some(v);
            }
        }
    }
    build(slots, t)
}

fn quantity_filter(key: &str, slot: Slot) -> Result<QuantityFilter, QueryError> {
    if let Some(v) = slot.matched {
        return Ok(QuantityFilter::Match(quantity(key, &v)?));
    }
    let min = slot.min.map(|v| quantity(key, &v)).transpose()?;
    let max = slot.max.map(|v| quantity(key, &v)).transpose()?;
    if let (Some(lo), Some(hi)) = (&min, &max) {
        let (lo, hi) = (Amount::of(lo), Amount::of(hi));
        if let (Ok(lo), Ok(hi)) = (lo, hi)
            && lo > hi
        {
            return Err(QueryError::new(key, "range min is greater than max"));
        }
    }
    Ok(QuantityFilter::Range { min, max })
}

fn string_filter(key: &str, slot: Slot) -> Result<StringFilter, QueryError> {
    slot.matched
        .map(StringFilter::Match)
        .ok_or_else(|| QueryError::new(key, "only [match] is supported"))
}

fn build(
    slots: Vec<(Res, Slot, String)>,
    t: FlavorTypeIdentifier,
) -> Result<QuerySelector, QueryError> {
    match t {
        FlavorTypeIdentifier::K8Slice => {
            let mut sel = K8SliceSelector::default();
            let mut gpu = None;
            for (res, slot, key) in slots {
                match res {
                    Res::Architecture => sel.architecture = Some(string_filter(&key, slot)?),
                    Res::Cpu => sel.cpu = Some(quantity_filter(&key, slot)?),
                    Res::Memory => sel.memory = Some(quantity_filter(&key, slot)?),
                    Res::Pods => sel.pods = Some(quantity_filter(&key, slot)?),
                    Res::Storage => sel.storage = Some(quantity_filter(&key, slot)?),
                    Res::Gpu => gpu = Some(quantity_filter(&key, slot)?),
                    Res::Category | Res::Tags => {
                        return Err(QueryError::new(&key, "not a K8Slice filter"));
                    }
                }
            }
            Ok(QuerySelector {
                selector: FlavorSelector::K8Slice(sel),
                gpu,
            })
        }
        FlavorTypeIdentifier::Service => {
            let mut sel = ServiceSelector::default();
            for (res, slot, key) in slots {
                match res {
                    Res::Category => sel.category = Some(string_filter(&key, slot)?),
                    Res::Tags => sel.tags = Some(string_filter(&key, slot)?),
                    _ => return Err(QueryError::new(&key, "not a Service filter")),
                }
            }
            Ok(QuerySelector {
                selector: FlavorSelector::Service(sel),
                gpu: None,
            })
        }
        other => Err(QueryError::new(
            "",
            format!("no filter grammar for {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn k8s(q: &str) -> Result<K8SliceSelector, QueryError> {
        match parse(q, FlavorTypeIdentifier::K8Slice)?.selector {
            FlavorSelector::K8Slice(k) => Ok(k),
            FlavorSelector::Service(_) => panic!("wrong type"),
        }
    }

    fn qf_match(v: &str) -> Option<QuantityFilter> {
        Some(QuantityFilter::Match(Quantity(v.into())))
    }

    #[test]
    fn empty_query_is_the_type_gate_only() {
        assert_eq!(k8s("").unwrap(), K8SliceSelector::default());
        assert_eq!(k8s("&&").unwrap(), K8SliceSelector::default());
    }

    #[test]
    fn match_and_range_keys() {
        let s = k8s("filter[architecture][match]=amd64&filter[cpu][match]=1&filter[memory][range][min]=1Gi&filter[memory][range][max]=8Gi&filter[pods][range][max]=110")
            .unwrap();
        assert_eq!(s.architecture, Some(StringFilter::Match("amd64".into())));
        assert_eq!(s.cpu, qf_match("1"));
        assert_eq!(
            s.memory,
            Some(QuantityFilter::Range {
                min: Some(Quantity("1Gi".into())),
                max: Some(Quantity("8Gi".into()))
            })
        );
        assert_eq!(
            s.pods,
            Some(QuantityFilter::Range {
                min: None,
                max: Some(Quantity("110".into()))
            })
        );
    }

    #[test]
    fn percent_encoded_brackets_are_decoded() {
        let s = k8s("filter%5Bcpu%5D%5Bmatch%5D=500m").unwrap();
        assert_eq!(s.cpu, qf_match("500m"));
    }

    #[test]
    fn storage_without_filter_prefix_is_accepted() {
        // Upstream bug 2: the Go client drops the `filter` prefix for storage.
        let s = k8s("[storage][range][min]=10Gi").unwrap();
        assert_eq!(
            s.storage,
            Some(QuantityFilter::Range {
                min: Some(Quantity("10Gi".into())),
                max: None
            })
        );
        let s = k8s("filter[storage][range][min]=10Gi").unwrap();
        assert!(s.storage.is_some());
    }

    #[test]
    fn third_segment_after_match_is_ignored_as_upstream() {
        assert_eq!(k8s("filter[cpu][match][min]=1").unwrap().cpu, qf_match("1"));
    }

    #[test]
    fn repeated_identical_key_uses_the_first_value() {
        assert_eq!(
            k8s("filter[cpu][match]=1&filter[cpu][match]=2")
                .unwrap()
                .cpu,
            qf_match("1")
        );
    }

    #[test]
    fn gpu_extension() {
        let q = parse("filter[gpu][range][min]=1", FlavorTypeIdentifier::K8Slice).unwrap();
        assert!(q.gpu.is_some());
    }

    /// Every rejection of fluidos-node.md §2.3, plus ours.
    #[test]
    fn rejections() {
        let cases = [
            ("foo=bar", "foo"),
            ("filter[disk][match]=1", "filter[disk][match]"),
            ("filter[cpu][equals]=1", "filter[cpu][equals]"),
            ("filter[cpu]=1", "filter[cpu]"),
            ("filter[cpu][match]x=1", "filter[cpu][match]x"),
            // A second match for the same resource.
            (
                "filter[cpu][match]=1&filter[cpu][match][min]=2",
                "filter[cpu][match][min]",
            ),
            // Range after match, and match after range.
            (
                "filter[cpu][match]=1&filter[cpu][range][min]=1",
                "filter[cpu][range][min]",
            ),
            (
                "filter[cpu][range][max]=1&filter[cpu][match]=1",
                "filter[cpu][match]",
            ),
            // [range][regex] on a quantity.
            (
                "filter[memory][range][regex]=G",
                "filter[memory][range][regex]",
            ),
            // String range is not in the query grammar.
            (
                "filter[architecture][range][regex]=amd",
                "filter[architecture][range][regex]",
            ),
            (
                "filter[architecture][range][min]=a",
                "filter[architecture][range][min]",
            ),
            // Upstream panics here.
            ("filter[cpu][range]=1", "filter[cpu][range]"),
            // Quantity parse errors.
            ("filter[cpu][match]=lots", "filter[cpu][match]"),
            ("filter[cpu][match]=", "filter[cpu][match]"),
            ("filter[pods][range][min]=1x", "filter[pods][range][min]"),
            // min > max.
            (
                "filter[cpu][range][min]=4&filter[cpu][range][max]=2",
                "filter[cpu][range][min]",
            ),
            // Service keys on the K8Slice route.
            ("filter[category][match]=db", "filter[category][match]"),
        ];
        for (q, key) in cases {
            let err = k8s(q).expect_err(q);
            assert_eq!(err.key, key, "{q}: {err}");
        }
    }

    #[test]
    fn service_grammar() {
        let q = parse(
            "filter[category][match]=database&filter[tags][match]=mysql",
            FlavorTypeIdentifier::Service,
        )
        .unwrap();
        let FlavorSelector::Service(s) = q.selector else {
            panic!()
        };
        assert_eq!(s.category, Some(StringFilter::Match("database".into())));
        assert_eq!(s.tags, Some(StringFilter::Match("mysql".into())));
        for bad in [
            "filter[category][range][min]=a",
            "filter[tags][match][min]=a",
            "filter[cpu][match]=1",
            "filter[category]=db",
        ] {
            assert!(parse(bad, FlavorTypeIdentifier::Service).is_err(), "{bad}");
        }
        assert!(parse("", FlavorTypeIdentifier::VM).is_err());
    }
}

//! `Solver` (nodecore.fluidos.eu/v1alpha1), its selector and filter grammar.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{FlavorTypeIdentifier, Phase, PhaseStatus};
use crate::error::DecodeError;
use crate::quantity::{self, Amount};
use crate::raw::{self, RawObject};

/// A user's request for a flavor: what to find, whether to buy it and peer.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "nodecore.fluidos.eu",
    version = "v1alpha1",
    kind = "Solver",
    namespaced,
    status = "SolverStatus",
    shortname = "sol",
    doc = "Solver is the Schema for the solvers API.",
    printcolumn(name = "Intent ID", type_ = "string", json_path = ".spec.intentID"),
    printcolumn(
        name = "Find Candidate",
        type_ = "boolean",
        json_path = ".spec.findCandidate"
    ),
    printcolumn(
        name = "Reserve and Buy",
        type_ = "boolean",
        json_path = ".spec.reserveAndBuy"
    ),
    printcolumn(
        name = "Peering",
        type_ = "boolean",
        json_path = ".spec.establishPeering"
    ),
    printcolumn(
        name = "Candidate Phase",
        type_ = "string",
        json_path = ".status.findCandidate",
        priority = 1
    ),
    printcolumn(
        name = "Reserving Phase",
        type_ = "string",
        json_path = ".status.reserveAndBuy",
        priority = 1
    ),
    printcolumn(
        name = "Peering Phase",
        type_ = "string",
        json_path = ".status.peering",
        priority = 1
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.solverPhase.phase"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.solverPhase.message"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SolverSpec {
    /// Flavor requirements; absent means any flavor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
    /// Opaque link to the orchestrator's intent.
    #[serde(rename = "intentID")]
    pub intent_id: String,
    /// Search for candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_candidate: Option<bool>,
    /// Reserve and purchase the chosen candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_and_buy: Option<bool>,
    /// Allocate (peer with) what was bought.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub establish_peering: Option<bool>,
}

/// Solver progress, with the Go node's field names and phase strings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SolverStatus {
    /// Phase of the candidate search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_candidate: Option<Phase>,
    /// Phase of reservation and purchase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_and_buy: Option<Phase>,
    /// Phase of the peering / allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peering: Option<Phase>,
    /// Phase of the Discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_phase: Option<Phase>,
    /// Phase of the Reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_phase: Option<Phase>,
    /// Never written upstream; kept for compatibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consume_phase: Option<Phase>,
    /// Overall phase and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver_phase: Option<PhaseStatus>,
    /// Which candidate was chosen and why (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_candidate: Option<ChosenCandidate>,
}

/// The candidate the Solver picked and the ranking reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChosenCandidate {
    /// PeeringCandidate name.
    pub name: String,
    /// Why it ranked first.
    pub reason: String,
    /// Candidates tried before it and refused as not available (at most a
    /// few: the Solver then stops trying others).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

/// Flavor type plus raw filters, shared by Solver and Discovery.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// `K8Slice` or `Service`.
    #[schemars(extend("enum" = ["K8Slice", "Service"]))]
    pub flavor_type: String,
    /// `K8SliceSelector` or `ServiceSelector`, by `flavorType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "raw::preserve_unknown_object")]
    pub filters: Option<RawObject>,
}

/// A decoded selector.
#[derive(Clone, Debug, PartialEq)]
pub enum FlavorSelector {
    /// K8Slice filters (all optional).
    K8Slice(K8SliceSelector),
    /// Service filters (all optional).
    Service(ServiceSelector),
}

impl FlavorSelector {
    /// The flavor type this selector gates on.
    pub fn flavor_type(&self) -> FlavorTypeIdentifier {
        match self {
            FlavorSelector::K8Slice(_) => FlavorTypeIdentifier::K8Slice,
            FlavorSelector::Service(_) => FlavorTypeIdentifier::Service,
        }
    }
}

impl FlavorSelector {
    /// True when a decoded flavor passes every present filter (upstream's `FilterFlavor`).
    ///
    /// A K8Slice without storage never matches a storage filter (upstream panics there).
    pub fn matches(&self, flavor: &crate::flavor::FlavorTypeData) -> bool {
        use crate::flavor::FlavorTypeData;
        match (self, flavor) {
            (FlavorSelector::K8Slice(sel), FlavorTypeData::K8Slice(k)) => {
                let c = &k.characteristics;
                sel.architecture
                    .as_ref()
                    .is_none_or(|f| f.matches(&c.architecture))
                    && sel.cpu.as_ref().is_none_or(|f| f.matches(&c.cpu))
                    && sel.memory.as_ref().is_none_or(|f| f.matches(&c.memory))
                    && sel.pods.as_ref().is_none_or(|f| f.matches(&c.pods))
                    && sel
                        .storage
                        .as_ref()
                        .is_none_or(|f| c.storage.as_ref().is_some_and(|s| f.matches(s)))
            }
            (FlavorSelector::Service(sel), FlavorTypeData::Service(s)) => {
                sel.category.as_ref().is_none_or(|f| f.matches(&s.category))
                    && sel
                        .tags
                        .as_ref()
                        .is_none_or(|f| s.tags.iter().any(|t| f.matches(t)))
            }
            _ => false,
        }
    }
}

impl Selector {
    /// Decodes and validates the filters, as upstream's `ParseSolverSelector`.
    pub fn parse(&self) -> Result<FlavorSelector, DecodeError> {
        const FIELD: &str = "spec.selector.filters";
        let filters = self.filters.clone().unwrap_or_else(raw::empty_object);
        match FlavorTypeIdentifier::from_crd(&self.flavor_type) {
            Some(FlavorTypeIdentifier::K8Slice) => {
                let raw: RawK8SliceSelector = raw::decode(FIELD, &filters)?;
                Ok(FlavorSelector::K8Slice(raw.parse(FIELD)?))
            }
            Some(FlavorTypeIdentifier::Service) => {
                let raw: RawServiceSelector = raw::decode(FIELD, &filters)?;
                Ok(FlavorSelector::Service(raw.parse(FIELD)?))
            }
            _ => Err(DecodeError::new(
                "spec.selector.flavorType",
                format!(
                    "flavor type {:?} is not supported (use K8Slice or Service)",
                    self.flavor_type
                ),
            )),
        }
    }
}

/// `{name, data}` as written in YAML; decoded into [`QuantityFilter`] / [`StringFilter`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RawFilter {
    /// `Match` or `Range`.
    pub name: String,
    /// Payload selected by `name`.
    #[serde(default)]
    pub data: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawK8SliceSelector {
    architecture_filter: Option<RawFilter>,
    cpu_filter: Option<RawFilter>,
    memory_filter: Option<RawFilter>,
    pods_filter: Option<RawFilter>,
    storage_filter: Option<RawFilter>,
}

impl RawK8SliceSelector {
    fn parse(self, field: &str) -> Result<K8SliceSelector, DecodeError> {
        let q = |f: Option<RawFilter>, key: &str| {
            f.map(|f| QuantityFilter::parse(&f, &format!("{field}.{key}")))
                .transpose()
        };
        Ok(K8SliceSelector {
            architecture: self
                .architecture_filter
                .map(|f| StringFilter::parse(&f, &format!("{field}.architectureFilter")))
                .transpose()?,
            cpu: q(self.cpu_filter, "cpuFilter")?,
            memory: q(self.memory_filter, "memoryFilter")?,
            pods: q(self.pods_filter, "podsFilter")?,
            storage: q(self.storage_filter, "storageFilter")?,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawServiceSelector {
    category_filter: Option<RawFilter>,
    tags_filter: Option<RawFilter>,
}

impl RawServiceSelector {
    fn parse(self, field: &str) -> Result<ServiceSelector, DecodeError> {
        let s = |f: Option<RawFilter>, key: &str| {
            f.map(|f| StringFilter::parse(&f, &format!("{field}.{key}")))
                .transpose()
        };
        Ok(ServiceSelector {
            category: s(self.category_filter, "categoryFilter")?,
            tags: s(self.tags_filter, "tagsFilter")?,
        })
    }
}

/// K8Slice filters; every present filter must pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct K8SliceSelector {
    /// On `characteristics.architecture`.
    pub architecture: Option<StringFilter>,
    /// On `characteristics.cpu`.
    pub cpu: Option<QuantityFilter>,
    /// On `characteristics.memory`.
    pub memory: Option<QuantityFilter>,
    /// On `characteristics.pods`.
    pub pods: Option<QuantityFilter>,
    /// On `characteristics.storage` (a flavor without storage does not match).
    pub storage: Option<QuantityFilter>,
}

/// Service filters; every present filter must pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceSelector {
    /// On `category`.
    pub category: Option<StringFilter>,
    /// On `tags` (any tag may match).
    pub tags: Option<StringFilter>,
}

/// A quantity filter: exact match or inclusive range.
#[derive(Clone, Debug, PartialEq)]
pub enum QuantityFilter {
    /// Numerically equal (`1000m` == `1`).
    Match(Quantity),
    /// `min <= v <= max`, either bound optional but not both absent.
    Range {
        /// Lower bound.
        min: Option<Quantity>,
        /// Upper bound.
        max: Option<Quantity>,
    },
}

impl QuantityFilter {
    /// Decodes `{name, data}`, with upstream's validation rules.
    pub fn parse(raw: &RawFilter, field: &str) -> Result<Self, DecodeError> {
        #[derive(Deserialize)]
        struct MatchData {
            #[serde(deserialize_with = "quantity::lenient")]
            value: Quantity,
        }
        #[derive(Deserialize)]
        struct RangeData {
            #[serde(default, deserialize_with = "quantity::lenient_opt")]
            min: Option<Quantity>,
            #[serde(default, deserialize_with = "quantity::lenient_opt")]
            max: Option<Quantity>,
        }
        let data_field = format!("{field}.data");
        let check = |q: &Quantity, key: &str| {
            Amount::of(q)
                .map_err(|e| DecodeError::new(format!("{data_field}.{key}"), e.to_string()))
        };
        match raw.name.as_str() {
            "Match" => {
                let d: MatchData = raw::decode(&data_field, &raw.data)?;
                check(&d.value, "value")?;
                Ok(QuantityFilter::Match(d.value))
            }
            "Range" => {
                let d: RangeData = raw::decode(&data_field, &raw.data)?;
                let min = d.min.as_ref().map(|q| check(q, "min")).transpose()?;
                let max = d.max.as_ref().map(|q| check(q, "max")).transpose()?;
                match (min, max) {
                    (None, None) => {
                        return Err(DecodeError::new(
                            data_field,
                            "a Range filter needs min, max or both",
                        ));
                    }
                    (Some(lo), Some(hi)) if lo > hi => {
                        return Err(DecodeError::new(data_field, "min is greater than max"));
                    }
                    _ => {}
                }
                Ok(QuantityFilter::Range {
                    min: d.min,
                    max: d.max,
                })
            }
            other => Err(DecodeError::new(
                format!("{field}.name"),
                format!("unknown filter type {other:?} (use Match or Range)"),
            )),
        }
    }

    /// True when `value` passes; an unparsable value never passes.
    pub fn matches(&self, value: &Quantity) -> bool {
        let Ok(v) = Amount::of(value) else {
            return false;
        };
        let bound = |q: &Option<Quantity>| q.as_ref().map(Amount::of).transpose();
        match self {
            QuantityFilter::Match(q) => Amount::of(q).is_ok_and(|q| q == v),
            QuantityFilter::Range { min, max } => match (bound(min), bound(max)) {
                (Ok(lo), Ok(hi)) => lo.is_none_or(|lo| v >= lo) && hi.is_none_or(|hi| v <= hi),
                _ => false,
            },
        }
    }
}

/// A string filter: exact match, or an unanchored regular expression.
#[derive(Clone, Debug)]
pub enum StringFilter {
    /// Exact, case-sensitive equality.
    Match(String),
    /// Unanchored search, as Go's `regexp.MatchString`.
    Range(regex::Regex),
}

impl PartialEq for StringFilter {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StringFilter::Match(a), StringFilter::Match(b)) => a == b,
            (StringFilter::Range(a), StringFilter::Range(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl StringFilter {
    /// Decodes `{name, data}`: `Match` takes `value`, `Range` takes `regex`.
    pub fn parse(raw: &RawFilter, field: &str) -> Result<Self, DecodeError> {
        #[derive(Deserialize)]
        struct MatchData {
            value: String,
        }
        #[derive(Deserialize)]
        struct RangeData {
            regex: String,
        }
        let data_field = format!("{field}.data");
        match raw.name.as_str() {
            "Match" => Ok(StringFilter::Match(
                raw::decode::<MatchData>(&data_field, &raw.data)?.value,
            )),
            "Range" => {
                let d: RangeData = raw::decode(&data_field, &raw.data)?;
                if d.regex.is_empty() {
                    return Err(DecodeError::new(
                        format!("{data_field}.regex"),
                        "must not be empty",
                    ));
                }
                regex::Regex::new(&d.regex)
                    .map(StringFilter::Range)
                    .map_err(|e| DecodeError::new(format!("{data_field}.regex"), e.to_string()))
            }
            other => Err(DecodeError::new(
                format!("{field}.name"),
                format!("unknown filter type {other:?} (use Match or Range)"),
            )),
        }
    }

    /// True when `value` passes.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            StringFilter::Match(v) => v == value,
            StringFilter::Range(r) => r.is_match(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(t: &str, filters: serde_json::Value) -> Selector {
        Selector {
            flavor_type: t.into(),
            filters: Some(filters),
        }
    }

    #[test]
    fn parses_the_upstream_sample() {
        let s = selector(
            "K8Slice",
            serde_json::json!({
                "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                "memoryFilter": {"name": "Range", "data": {"min": "1Gi", "max": "100Gi"}},
                "podsFilter": {"name": "Match", "data": {"value": 110}}
            }),
        );
        let FlavorSelector::K8Slice(k) = s.parse().unwrap() else {
            panic!()
        };
        assert_eq!(k.architecture, Some(StringFilter::Match("amd64".into())));
        assert_eq!(k.pods, Some(QuantityFilter::Match(Quantity("110".into()))));
        let mem = k.memory.unwrap();
        assert!(mem.matches(&Quantity("2Gi".into())));
        assert!(!mem.matches(&Quantity("512Mi".into())));
        assert!(!mem.matches(&Quantity("101Gi".into())));
        assert!(k.cpu.unwrap().matches(&Quantity("1".into())));
    }

    #[test]
    fn invalid_filters_name_their_field() {
        let cases = [
            (
                serde_json::json!({"cpuFilter": {"name": "Between", "data": {}}}),
                "spec.selector.filters.cpuFilter.name",
            ),
            (
                serde_json::json!({"cpuFilter": {"name": "Range", "data": {}}}),
                "spec.selector.filters.cpuFilter.data",
            ),
            (
                serde_json::json!({"memoryFilter": {"name": "Range", "data": {"min": "2Gi", "max": "1Gi"}}}),
                "spec.selector.filters.memoryFilter.data",
            ),
            (
                serde_json::json!({"podsFilter": {"name": "Match", "data": {"value": "many"}}}),
                "spec.selector.filters.podsFilter.data.value",
            ),
            (
                serde_json::json!({"architectureFilter": {"name": "Range", "data": {"regex": "("}}}),
                "spec.selector.filters.architectureFilter.data.regex",
            ),
        ];
        for (filters, field) in cases {
            let err = selector("K8Slice", filters).parse().unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let err = selector("VM", serde_json::json!({})).parse().unwrap_err();
        assert_eq!(err.field, "spec.selector.flavorType");
    }

    #[test]
    fn service_filters_and_unanchored_regex() {
        let s = selector(
            "Service",
            serde_json::json!({
                "categoryFilter": {"name": "Match", "data": {"value": "database"}},
                "tagsFilter": {"name": "Range", "data": {"regex": "sql"}}
            }),
        );
        let FlavorSelector::Service(sel) = s.parse().unwrap() else {
            panic!()
        };
        assert!(sel.tags.unwrap().matches("mysql"));
        assert!(sel.category.unwrap().matches("database"));
    }

    #[test]
    fn matches_flavors_by_type_and_filters() {
        use crate::flavor::{FlavorTypeData, K8Slice, ServiceFlavor};
        let k = FlavorTypeData::K8Slice(K8Slice {
            characteristics: crate::rear::characteristics("amd64", "4", "8Gi", "110"),
            ..Default::default()
        });
        let svc = FlavorTypeData::Service(ServiceFlavor {
            category: "database".into(),
            tags: vec!["db".into(), "mysql".into()],
            ..Default::default()
        });
        let sel = selector(
            "K8Slice",
            serde_json::json!({"cpuFilter": {"name": "Range", "data": {"min": "2", "max": "4"}},
                "architectureFilter": {"name": "Match", "data": {"value": "amd64"}}}),
        )
        .parse()
        .unwrap();
        assert!(sel.matches(&k));
        assert!(!sel.matches(&svc), "type gate");
        let storage = selector(
            "K8Slice",
            serde_json::json!({"storageFilter": {"name": "Range", "data": {"min": "1Gi"}}}),
        )
        .parse()
        .unwrap();
        assert!(
            !storage.matches(&k),
            "no storage never matches a storage filter"
        );
        let tags = selector(
            "Service",
            serde_json::json!({"tagsFilter": {"name": "Match", "data": {"value": "mysql"}}}),
        )
        .parse()
        .unwrap();
        assert!(tags.matches(&svc));
    }

    #[test]
    fn no_filters_is_an_empty_selector() {
        let s = Selector {
            flavor_type: "K8Slice".into(),
            filters: None,
        };
        assert_eq!(
            s.parse().unwrap(),
            FlavorSelector::K8Slice(K8SliceSelector::default())
        );
    }
}

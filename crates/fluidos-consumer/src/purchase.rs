//! What the Solver asks to buy: the configuration sent with a reservation.

use fluidos_api::Configuration;
use fluidos_api::configuration::{K8SliceConfiguration, ServiceConfiguration};
use fluidos_api::flavor::{FlavorTypeData, ServiceFlavor};
use fluidos_api::quantity::Amount;
use fluidos_api::solver::{FlavorSelector, QuantityFilter};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

/// Why no configuration could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigurationError {
    /// A Service category with neither a known default nor a usable schema.
    #[error(
        "no default configuration for service category {0:?}: create the Reservation by hand with configurationData"
    )]
    UnknownCategory(String),
    /// The selector's type does not match the flavor's.
    #[error("the selector is for {selector} but the candidate is a {flavor} flavor")]
    TypeMismatch {
        /// Selector type.
        selector: &'static str,
        /// Flavor type.
        flavor: &'static str,
    },
}

/// The amount a quantity filter asks for, given what the flavor offers.
///
/// Match → the value; Range → `min`, or the offer capped at `max` when only a
/// maximum is given (upstream asks for 0 there); no filter → the whole offer.
fn wanted(filter: &Option<QuantityFilter>, offered: &Quantity) -> Quantity {
    match filter {
        Some(QuantityFilter::Match(v)) => v.clone(),
        Some(QuantityFilter::Range { min: Some(min), .. }) => min.clone(),
        Some(QuantityFilter::Range {
            min: None,
            max: Some(max),
        }) => match (Amount::of(offered), Amount::of(max)) {
            (Ok(o), Ok(m)) if m < o => max.clone(),
            _ => offered.clone(),
        },
        _ => offered.clone(),
    }
}

/// The configuration to reserve for a candidate flavor, as upstream's Solver builds it.
///
/// `None` means "no configuration": the whole flavor (K8Slice without filters, or no selector).
pub fn configuration_for(
    selector: Option<&FlavorSelector>,
    flavor: &FlavorTypeData,
) -> Result<Option<Configuration>, ConfigurationError> {
    match (selector, flavor) {
        (None, _) => Ok(None),
        (Some(FlavorSelector::K8Slice(sel)), FlavorTypeData::K8Slice(k)) => {
            if sel == &Default::default() {
                return Ok(None);
            }
            let c = &k.characteristics;
            Ok(Some(Configuration::k8slice(&K8SliceConfiguration {
                cpu: wanted(&sel.cpu, &c.cpu),
                memory: wanted(&sel.memory, &c.memory),
                pods: wanted(&sel.pods, &c.pods),
                gpu: None,
                storage: sel
                    .storage
                    .as_ref()
                    .and_then(|_| c.storage.as_ref().map(|s| wanted(&sel.storage, s))),
            })))
        }
        (Some(FlavorSelector::Service(_)), FlavorTypeData::Service(s)) => {
            Ok(Some(Configuration::service(&ServiceConfiguration {
                hosting_policy: None,
                configuration_data: default_service_data(s)?,
            })))
        }
        (Some(sel), flavor) => Err(ConfigurationError::TypeMismatch {
            selector: sel.flavor_type().as_str(),
            flavor: match flavor {
                FlavorTypeData::K8Slice(_) => "K8Slice",
                FlavorTypeData::Service(_) => "Service",
            },
        }),
    }
}

/// Upstream's per-category defaults; other categories take each schema
/// property's `default` (or an empty object when the schema requires nothing).
pub fn default_service_data(s: &ServiceFlavor) -> Result<serde_json::Value, ConfigurationError> {
    match s.category.as_str() {
        "database" => Ok(json!({"username": "admin", "password": "admin", "database": "mydb"})),
        "message-queue" => Ok(json!({"username": "admin", "password": "adminpassword"})),
        other => {
            let schema = &s.configuration_template;
            let mut data = serde_json::Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (k, v) in props {
                    if let Some(d) = v.get("default") {
                        data.insert(k.clone(), d.clone());
                    }
                }
            }
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            if required
                .iter()
                .filter_map(|r| r.as_str())
                .all(|r| data.contains_key(r))
            {
                Ok(serde_json::Value::Object(data))
            } else {
                Err(ConfigurationError::UnknownCategory(other.to_owned()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluidos_api::configuration::ConfigurationData;
    use fluidos_api::flavor::K8Slice;
    use fluidos_api::solver::Selector;

    fn k8slice() -> FlavorTypeData {
        FlavorTypeData::K8Slice(K8Slice {
            characteristics: fluidos_api::rear::characteristics("amd64", "4", "8Gi", "110"),
            ..Default::default()
        })
    }

    fn sel(t: &str, f: serde_json::Value) -> FlavorSelector {
        Selector {
            flavor_type: t.into(),
            filters: Some(f),
        }
        .parse()
        .unwrap()
    }

    #[test]
    fn the_sample_solver_asks_for_1_cpu_1gi_110_pods() {
        let s = sel(
            "K8Slice",
            json!({
                "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                "memoryFilter": {"name": "Range", "data": {"min": "1Gi", "max": "100Gi"}},
                "podsFilter": {"name": "Match", "data": {"value": 110}}
            }),
        );
        let cfg = configuration_for(Some(&s), &k8slice()).unwrap().unwrap();
        let ConfigurationData::K8Slice(k) = cfg.parse("c").unwrap() else {
            panic!()
        };
        assert_eq!(
            (k.cpu.0.as_str(), k.memory.0.as_str(), k.pods.0.as_str()),
            ("1000m", "1Gi", "110")
        );
        assert_eq!(k.storage, None);
    }

    #[test]
    fn range_with_only_max_takes_the_offer_capped() {
        let s = sel(
            "K8Slice",
            json!({"cpuFilter": {"name": "Range", "data": {"max": "2"}},
            "memoryFilter": {"name": "Range", "data": {"max": "100Gi"}}}),
        );
        let cfg = configuration_for(Some(&s), &k8slice()).unwrap().unwrap();
        let ConfigurationData::K8Slice(k) = cfg.parse("c").unwrap() else {
            panic!()
        };
        assert_eq!(k.cpu.0, "2");
        assert_eq!(k.memory.0, "8Gi", "offer below the max: take the offer");
        assert_eq!(k.pods.0, "110", "no filter: the whole offer");
    }

    #[test]
    fn no_filters_or_no_selector_buys_the_whole_flavor() {
        let empty = Selector {
            flavor_type: "K8Slice".into(),
            filters: None,
        }
        .parse()
        .unwrap();
        assert_eq!(configuration_for(Some(&empty), &k8slice()).unwrap(), None);
        assert_eq!(configuration_for(None, &k8slice()).unwrap(), None);
    }

    #[test]
    fn service_defaults_by_category() {
        let mut s = ServiceFlavor {
            category: "database".into(),
            ..Default::default()
        };
        let d = default_service_data(&s).unwrap();
        assert_eq!(d["database"], "mydb");
        s.category = "cache".into();
        s.configuration_template = json!({"type": "object",
            "properties": {"size": {"type": "string", "default": "1Gi"}}, "required": ["size"]});
        assert_eq!(default_service_data(&s).unwrap(), json!({"size": "1Gi"}));
        s.configuration_template = json!({"type": "object", "required": ["password"]});
        assert!(matches!(
            default_service_data(&s),
            Err(ConfigurationError::UnknownCategory(_))
        ));
    }

    #[test]
    fn type_mismatch_is_an_error() {
        let s = sel("Service", json!({}));
        assert!(configuration_for(Some(&s), &k8slice()).is_err());
    }
}

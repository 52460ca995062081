//! Typed purchase configurations (`Configuration.data`).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::common::{Configuration, FlavorTypeIdentifier, HostingPolicy};
use crate::error::DecodeError;
use crate::flavor::Gpu;
use crate::quantity::{self, Amount};
use crate::raw::{self, RawObject};

/// The partition of a K8Slice being bought.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct K8SliceConfiguration {
    /// CPU.
    #[serde(deserialize_with = "quantity::lenient")]
    pub cpu: Quantity,
    /// Memory.
    #[serde(deserialize_with = "quantity::lenient")]
    pub memory: Quantity,
    /// Pod slots.
    #[serde(deserialize_with = "quantity::lenient")]
    pub pods: Quantity,
    /// GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// Storage.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "quantity::lenient_opt"
    )]
    pub storage: Option<Quantity>,
}

/// Parameters of a Service being bought.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceConfiguration {
    /// Where the instance runs; the flavor's first policy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosting_policy: Option<HostingPolicy>,
    /// Values for the blueprint's templates, checked against `configurationTemplate`.
    #[serde(default = "raw::empty_object")]
    pub configuration_data: RawObject,
}

/// A decoded configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigurationData {
    /// A K8Slice partition.
    K8Slice(K8SliceConfiguration),
    /// Service parameters.
    Service(ServiceConfiguration),
    /// `VM` / `Sensor`: accepted without parsing, as upstream.
    Unparsed(FlavorTypeIdentifier),
}

impl Configuration {
    /// A K8Slice configuration.
    pub fn k8slice(c: &K8SliceConfiguration) -> Self {
        Configuration {
            type_: FlavorTypeIdentifier::K8Slice.as_str().into(),
            data: serde_json::to_value(c).unwrap_or_else(|_| raw::empty_object()),
        }
    }

    /// A Service configuration.
    pub fn service(c: &ServiceConfiguration) -> Self {
        Configuration {
            type_: FlavorTypeIdentifier::Service.as_str().into(),
            data: serde_json::to_value(c).unwrap_or_else(|_| raw::empty_object()),
        }
    }

    /// The same configuration with a K8Slice's quantities (`cpu`, `memory`,
    /// `pods`, `storage`, `gpu.cores`, `gpu.memory`) in their canonical
    /// Kubernetes spelling: `" 1"` and `1000m` are `1`, `0.5` is `500m`,
    /// `1024Mi` is `1Gi`, as Kubernetes canonicalizes (each in the notation
    /// the peer used: decimal, binary or exponent). What a peer sends is
    /// then stored as one value for one spelling's variants, and two
    /// requests for the same amount in the same notation compare equal.
    /// Other types and other fields are kept as sent; a quantity that
    /// does not parse is refused naming it (`field` is where this
    /// configuration sits).
    pub fn with_canonical_quantities(self, field: &str) -> Result<Self, DecodeError> {
        self.map_quantities(field, |amount| amount.to_string())
    }

    /// Whether `self` and `other` ask for the same: the same type and data,
    /// with a K8Slice's quantities compared by value, so that `1Gi` and
    /// `1073741824` (which canonical spelling keeps apart, each in its own
    /// notation) are one request. A quantity that does not parse compares
    /// as written.
    pub fn same_request(&self, other: &Configuration) -> bool {
        let by_value = |c: &Configuration| {
            c.clone()
                .map_quantities("configuration", |amount| format!("{}n", amount.nanos))
                .unwrap_or_else(|_| c.clone())
        };
        by_value(self) == by_value(other)
    }

    /// The same configuration with each K8Slice quantity replaced by
    /// `spell(its amount)`; other types and fields kept; a quantity that
    /// does not parse refused naming it.
    fn map_quantities(
        mut self,
        field: &str,
        spell: impl Fn(Amount) -> String,
    ) -> Result<Self, DecodeError> {
        if FlavorTypeIdentifier::from_crd(&self.type_) != Some(FlavorTypeIdentifier::K8Slice) {
            return Ok(self);
        }
        let respell = |value: &mut RawObject, at: String| -> Result<(), DecodeError> {
            let text = match value {
                RawObject::String(s) => s.clone(),
                RawObject::Number(n) => n.to_string(),
                // Not a quantity: `parse` names what is wrong with it.
                _ => return Ok(()),
            };
            let amount = Amount::parse(&text).map_err(|e| DecodeError::new(at, e.to_string()))?;
            *value = RawObject::String(spell(amount));
            Ok(())
        };
        let data_field = format!("{field}.data");
        for key in ["cpu", "memory", "pods", "storage"] {
            if let Some(value) = self.data.get_mut(key) {
                respell(value, format!("{data_field}.{key}"))?;
            }
        }
        if let Some(gpu) = self.data.get_mut("gpu") {
            for key in ["cores", "memory"] {
                if let Some(value) = gpu.get_mut(key) {
                    respell(value, format!("{data_field}.gpu.{key}"))?;
                }
            }
        }
        Ok(self)
    }

    /// Decodes `data` by `type`; `field` is where this configuration sits (e.g. `spec.configuration`).
    pub fn parse(&self, field: &str) -> Result<ConfigurationData, DecodeError> {
        let data_field = format!("{field}.data");
        match FlavorTypeIdentifier::from_crd(&self.type_) {
            Some(FlavorTypeIdentifier::K8Slice) => {
                let c: K8SliceConfiguration = raw::decode(&data_field, &self.data)?;
                let gpu = c.gpu.as_ref().map_or(Vec::new(), |g| {
                    vec![("gpu.cores", &g.cores), ("gpu.memory", &g.memory)]
                });
                for (key, q) in [("cpu", &c.cpu), ("memory", &c.memory), ("pods", &c.pods)]
                    .into_iter()
                    .chain(c.storage.as_ref().map(|s| ("storage", s)))
                    .chain(gpu)
                {
                    let a = Amount::of(q).map_err(|e| {
                        DecodeError::new(format!("{data_field}.{key}"), e.to_string())
                    })?;
                    if a.nanos < 0 {
                        return Err(DecodeError::new(
                            format!("{data_field}.{key}"),
                            "must not be negative",
                        ));
                    }
                }
                Ok(ConfigurationData::K8Slice(c))
            }
            Some(FlavorTypeIdentifier::Service) => Ok(ConfigurationData::Service(raw::decode(
                &data_field,
                &self.data,
            )?)),
            Some(t) => Ok(ConfigurationData::Unparsed(t)),
            None => Err(DecodeError::new(
                format!("{field}.type"),
                format!("partition type {:?} not supported", self.type_),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_reservation_sample_configuration() {
        let c = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"cpu": "1000m", "memory": "1Gi", "pods": "110"}),
        };
        let ConfigurationData::K8Slice(k) = c.parse("spec.configuration").unwrap() else {
            panic!()
        };
        assert_eq!(k.memory.0, "1Gi");
    }

    #[test]
    fn k8slice_quantities_are_stored_in_their_canonical_spelling() {
        let c = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({
                "cpu": " 1000m", "memory": "1024Mi", "pods": 3, "storage": "0.5",
                "gpu": {"model": "x", "cores": "1", "memory": "2048Mi"},
                "extra": " 1"
            }),
        }
        .with_canonical_quantities("configuration")
        .unwrap();
        assert_eq!(
            c.data,
            serde_json::json!({
                "cpu": "1", "memory": "1Gi", "pods": "3", "storage": "500m",
                "gpu": {"model": "x", "cores": "1", "memory": "2Gi"},
                "extra": " 1"
            })
        );
        let bad = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"cpu": "1", "memory": "lots", "pods": "1"}),
        };
        assert_eq!(
            bad.with_canonical_quantities("configuration")
                .unwrap_err()
                .field,
            "configuration.data.memory"
        );
        let service = Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"configurationData": {"size": " 1"}}),
        };
        assert_eq!(
            service.clone().with_canonical_quantities("c").unwrap(),
            service
        );
    }

    #[test]
    fn the_same_amount_in_another_notation_is_the_same_request() {
        let k8s = |cpu: &str, memory: &str| Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"cpu": cpu, "memory": memory, "pods": "1"}),
        };
        assert!(k8s("1", "1Gi").same_request(&k8s("1000m", "1073741824")));
        assert!(k8s("0.5", "1024Mi").same_request(&k8s("500m", "1Gi")));
        assert!(!k8s("1", "1Gi").same_request(&k8s("1", "1G")));
        assert!(!k8s("1", "1Gi").same_request(&k8s("2", "1Gi")));
        // Unparsable amounts compare as written.
        assert!(k8s("x", "1Gi").same_request(&k8s("x", "1Gi")));
        assert!(!k8s("x", "1Gi").same_request(&k8s("y", "1Gi")));
        let service = |size: &str| Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"configurationData": {"size": size}}),
        };
        assert!(!service("1").same_request(&service("1000m")));
    }

    #[test]
    fn errors_name_the_field() {
        let c = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"cpu": "x", "memory": "1Gi", "pods": "1"}),
        };
        assert_eq!(
            c.parse("spec.configuration").unwrap_err().field,
            "spec.configuration.data.cpu"
        );
        let c = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"memory": "1Gi", "pods": "1"}),
        };
        let err = c.parse("spec.configuration").unwrap_err();
        assert_eq!(err.field, "spec.configuration.data");
        assert!(err.message.contains("cpu"), "{err}");
        let c = Configuration {
            type_: "Toaster".into(),
            data: serde_json::json!({}),
        };
        assert_eq!(
            c.parse("spec.configuration").unwrap_err().field,
            "spec.configuration.type"
        );
        // A negative GPU amount is refused like any other.
        let c = Configuration {
            type_: "K8Slice".into(),
            data: serde_json::json!({"cpu": "1", "memory": "1Gi", "pods": "1",
                "gpu": {"model": "x", "cores": "-1", "memory": "1Gi"}}),
        };
        let err = c.parse("spec.configuration").unwrap_err();
        assert_eq!(err.field, "spec.configuration.data.gpu.cores");
        assert!(err.message.contains("negative"), "{err}");
    }

    #[test]
    fn service_configuration() {
        let c = Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"configurationData": {"database": "mydb"}}),
        };
        let ConfigurationData::Service(s) = c.parse("spec.configuration").unwrap() else {
            panic!()
        };
        assert_eq!(s.hosting_policy, None);
        assert_eq!(s.configuration_data["database"], "mydb");
    }
}

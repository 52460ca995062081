//! What the local resource manager is told at startup.

use std::time::Duration;

use fluidos_api::flavor::Partitionability;
use fluidos_api::quantity::Amount;
use fluidos_api::{NodeIdentity, Price};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::ConfigError;

/// Configuration of both controllers.
///
/// Mapping from the Go `local-resource-manager` flags (the `fluidos-node`
/// binary's `FlavorConfig` carries the same names):
///
/// | Go flag | field | Go default |
/// |---|---|---|
/// | `--enable-auto-discovery` | [`enable_auto_discovery`](Self::enable_auto_discovery) | `true` |
/// | `--node-resource-label` | [`node_resource_label`](Self::node_resource_label) | `node-role.fluidos.eu/resources` |
/// | `--amount`, `--currency`, `--period` | [`price`](Self::price) | `""` each |
/// | `--cpu-min`, `--memory-min`, `--pods-min` | [`cpu_min`](Self::cpu_min), [`memory_min`](Self::memory_min), [`pods_min`](Self::pods_min) | `"0"` |
/// | `--cpu-step`, `--memory-step`, `--pods-step` | [`cpu_step`](Self::cpu_step), [`memory_step`](Self::memory_step), [`pods_step`](Self::pods_step) | `"0"` |
/// | (none upstream: GPU min/step are always 0) | [`gpu_min`](Self::gpu_min), [`gpu_step`](Self::gpu_step) | `"0"` |
/// | (hard-coded `fluidos`) | [`namespace`](Self::namespace) | `fluidos` |
/// | (ConfigMap `fluidos-node-identity`, read by the caller) | [`identity`](Self::identity) | — |
/// | `--resources-types`, `--min-count`, `--max-count` | — (unused upstream too) | |
///
/// Upstream turns an unparsable min/step into `0`; here [`crate::run`] refuses
/// to start with [`ConfigError`] instead.
#[derive(Clone, Debug)]
pub struct LrmConfig {
    /// When false, neither controller publishes anything (Go: both controllers return at once).
    pub enable_auto_discovery: bool,
    /// Label key whose value `"true"` marks the nodes that produce K8Slice flavors.
    pub node_resource_label: String,
    /// `price` of every flavor.
    pub price: Price,
    /// Partitionability minimum for CPU (a Kubernetes quantity).
    pub cpu_min: String,
    /// Partitionability minimum for memory.
    pub memory_min: String,
    /// Partitionability minimum for pods.
    pub pods_min: String,
    /// Partitionability minimum for GPUs.
    pub gpu_min: String,
    /// Partitionability step for CPU.
    pub cpu_step: String,
    /// Partitionability step for memory.
    pub memory_step: String,
    /// Partitionability step for pods.
    pub pods_step: String,
    /// Partitionability step for GPUs.
    pub gpu_step: String,
    /// Namespace of the flavors and of the ServiceBlueprints watched.
    pub namespace: String,
    /// This node's identity: `providerID`/`owner` of every flavor, `domain` prefixes flavor names.
    pub identity: NodeIdentity,
    /// How often a node flavor is recomputed while metrics.k8s.io is served
    /// (usage changes without any watch event). Go never recomputes.
    pub metrics_resync: Duration,
    /// Reconciles running at once per controller.
    pub concurrency: u16,
    /// Where reconcile counts, failures and durations are recorded (the node's one registry).
    pub metrics: fluidos_controller::Metrics,
}

impl LrmConfig {
    /// The Go defaults, with `identity` as given.
    pub fn new(identity: NodeIdentity) -> Self {
        LrmConfig {
            enable_auto_discovery: true,
            node_resource_label: fluidos_api::DEFAULT_NODE_RESOURCE_LABEL.to_owned(),
            price: Price::default(),
            cpu_min: "0".into(),
            memory_min: "0".into(),
            pods_min: "0".into(),
            gpu_min: "0".into(),
            cpu_step: "0".into(),
            memory_step: "0".into(),
            pods_step: "0".into(),
            gpu_step: "0".into(),
            namespace: fluidos_api::DEFAULT_NAMESPACE.to_owned(),
            identity,
            metrics_resync: Duration::from_secs(60),
            concurrency: 32,
            metrics: fluidos_controller::Metrics::default(),
        }
    }

    /// The partitionability every K8Slice flavor carries, in canonical quantity spelling.
    pub fn partitionability(&self) -> Result<Partitionability, ConfigError> {
        let q = |flag: &'static str, v: &str| -> Result<Quantity, ConfigError> {
            Amount::parse(v.trim())
                .map(Amount::to_quantity)
                .map_err(|e| ConfigError::Quantity {
                    flag,
                    value: v.to_owned(),
                    message: e.to_string(),
                })
        };
        Ok(Partitionability {
            cpu_min: q("cpu-min", &self.cpu_min)?,
            memory_min: q("memory-min", &self.memory_min)?,
            pods_min: q("pods-min", &self.pods_min)?,
            gpu_min: q("gpu-min", &self.gpu_min)?,
            cpu_step: q("cpu-step", &self.cpu_step)?,
            memory_step: q("memory-step", &self.memory_step)?,
            pods_step: q("pods-step", &self.pods_step)?,
            gpu_step: q("gpu-step", &self.gpu_step)?,
        })
    }

    /// Checks everything [`crate::run`] needs before it starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.partitionability()?;
        if self.identity.domain.is_empty() || self.identity.node_id.is_empty() {
            return Err(ConfigError::Identity);
        }
        if self.node_resource_label.is_empty() {
            return Err(ConfigError::Label);
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::Namespace);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> NodeIdentity {
        NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "abcdefghij".into(),
            ip: "10.0.0.1:30000".into(),
            additional_information: None,
        }
    }

    #[test]
    fn partitionability_is_canonical_and_rejects_garbage() {
        let mut cfg = LrmConfig::new(id());
        cfg.cpu_step = "1000m".into();
        cfg.memory_step = "100Mi".into();
        let p = cfg.partitionability().unwrap();
        assert_eq!(p.cpu_step.0, "1");
        assert_eq!(p.memory_step.0, "100Mi");
        assert_eq!(p.gpu_min.0, "0");
        cfg.pods_min = "lots".into();
        let err = cfg.validate().unwrap_err();
        assert!(err.to_string().contains("pods-min"), "{err}");
    }

    #[test]
    fn identity_is_required() {
        let mut cfg = LrmConfig::new(id());
        assert!(cfg.validate().is_ok());
        cfg.identity.domain.clear();
        assert!(matches!(cfg.validate(), Err(ConfigError::Identity)));
    }
}

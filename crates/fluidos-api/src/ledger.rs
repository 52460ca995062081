//! The capacity ledger a provider keeps on each Flavor's status.
//!
//! Every hold (a live reservation) and every sale is an entry of
//! `status.ledger`, written with optimistic concurrency on the Flavor object:
//! two concurrent reservations cannot both see the same spare capacity,
//! because the second write fails on a stale `resourceVersion` and is retried
//! against the first one's entry. The arithmetic here is pure.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::configuration::K8SliceConfiguration;
use crate::flavor::{K8SliceCharacteristics, Partitionability};
use crate::quantity::{Amount, Format, QuantityError};

/// Whether an entry holds capacity for a reservation or records a sale.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum LedgerState {
    /// Reserved until `expirationTime`; returns to the pool when it passes.
    Held,
    /// Sold under a Contract; returns only when the contract ends.
    Sold,
}

/// One hold or sale against a flavor.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    /// The REAR transaction that made this entry.
    #[serde(rename = "transactionID")]
    pub transaction_id: String,
    /// Buyer node ID.
    #[serde(rename = "buyerID")]
    pub buyer_id: String,
    /// Fingerprint of the key the buyer reserved with over TLS
    /// (`sha256:<hex>`); absent for a plain-HTTP buyer. The per-buyer hold
    /// cap counts by it, so one key cannot spread holds over invented IDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buyer_key: Option<String>,
    /// The address a plain-HTTP buyer reserved from (absent over TLS, and
    /// on holds made before addresses were recorded): a plain-HTTP hold is
    /// renewed only from the address that made it, so writing another
    /// buyer's ID from elsewhere neither finds nor reveals its transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buyer_address: Option<String>,
    /// The peer a hold was reserved from, over TLS or plain HTTP, as the
    /// provider's per-address limits count peers: an IPv4 address, or the
    /// first address of an IPv6 /64. The per-address hold cap counts by it,
    /// since keys cost nothing. Absent on holds of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_peer: Option<String>,
    /// Held or sold.
    pub state: LedgerState,
    /// Resources taken (absent for Service flavors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<LedgerResources>,
    /// RFC 3339 expiry of a hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Contract name of a sale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
}

/// Quantities one entry takes from a K8Slice flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
pub struct LedgerResources {
    /// CPU.
    pub cpu: String,
    /// Memory.
    pub memory: String,
    /// Pods.
    pub pods: String,
    /// GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
}

impl From<&K8SliceConfiguration> for LedgerResources {
    fn from(c: &K8SliceConfiguration) -> Self {
        LedgerResources {
            cpu: c.cpu.0.clone(),
            memory: c.memory.0.clone(),
            pods: c.pods.0.clone(),
            gpu: c.gpu.as_ref().map(|g| g.cores.0.clone()),
            storage: c.storage.as_ref().map(|s| s.0.clone()),
        }
    }
}

/// Exact amounts of the five K8Slice resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resources {
    /// CPU.
    pub cpu: Amount,
    /// Memory.
    pub memory: Amount,
    /// Pods.
    pub pods: Amount,
    /// GPUs (cores).
    pub gpu: Amount,
    /// Storage.
    pub storage: Amount,
}

impl Resources {
    /// All zero, with the formats Kubernetes uses for each resource.
    pub fn zero() -> Self {
        Resources {
            cpu: Amount::ZERO,
            memory: Amount {
                nanos: 0,
                format: Format::BinarySI,
            },
            pods: Amount::ZERO,
            gpu: Amount::ZERO,
            storage: Amount {
                nanos: 0,
                format: Format::BinarySI,
            },
        }
    }

    /// What a flavor's characteristics offer.
    pub fn of_characteristics(c: &K8SliceCharacteristics) -> Result<Self, QuantityError> {
        Ok(Resources {
            cpu: Amount::of(&c.cpu)?,
            memory: Amount::of(&c.memory)?,
            pods: Amount::of(&c.pods)?,
            gpu: c
                .gpu
                .as_ref()
                .map(|g| Amount::of(&g.cores))
                .transpose()?
                .unwrap_or(Amount::ZERO),
            storage: c
                .storage
                .as_ref()
                .map(Amount::of)
                .transpose()?
                .unwrap_or(Resources::zero().storage),
        })
    }

    /// What a configuration asks for.
    pub fn of_configuration(c: &K8SliceConfiguration) -> Result<Self, QuantityError> {
        Resources::of_entry(&LedgerResources::from(c))
    }

    /// What a ledger entry takes.
    pub fn of_entry(r: &LedgerResources) -> Result<Self, QuantityError> {
        let opt = |s: &Option<String>, zero: Amount| {
            s.as_deref()
                .map(Amount::parse)
                .transpose()
                .map(|a| a.unwrap_or(zero))
        };
        let z = Resources::zero();
        Ok(Resources {
            cpu: Amount::parse(&r.cpu)?,
            memory: Amount::parse(&r.memory)?,
            pods: Amount::parse(&r.pods)?,
            gpu: opt(&r.gpu, z.gpu)?,
            storage: opt(&r.storage, z.storage)?,
        })
    }

    /// Component-wise sum.
    pub fn plus(self, o: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_add(o.cpu),
            memory: self.memory.saturating_add(o.memory),
            pods: self.pods.saturating_add(o.pods),
            gpu: self.gpu.saturating_add(o.gpu),
            storage: self.storage.saturating_add(o.storage),
        }
    }

    /// Component-wise difference, floored at zero: never a negative quantity.
    pub fn minus(self, o: Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_sub(o.cpu),
            memory: self.memory.saturating_sub(o.memory),
            pods: self.pods.saturating_sub(o.pods),
            gpu: self.gpu.saturating_sub(o.gpu),
            storage: self.storage.saturating_sub(o.storage),
        }
    }

    /// The names of the resources where `self` exceeds `limit`.
    pub fn exceeding(self, limit: Resources) -> Vec<&'static str> {
        [
            ("cpu", self.cpu, limit.cpu),
            ("memory", self.memory, limit.memory),
            ("pods", self.pods, limit.pods),
            ("gpu", self.gpu, limit.gpu),
            ("storage", self.storage, limit.storage),
        ]
        .into_iter()
        .filter(|(_, want, have)| want > have)
        .map(|(name, _, _)| name)
        .collect()
    }

    /// Writes these amounts into characteristics (GPU and storage only where present).
    pub fn apply_to(self, c: &mut K8SliceCharacteristics) {
        c.cpu = self.cpu.to_quantity();
        c.memory = self.memory.to_quantity();
        c.pods = self.pods.to_quantity();
        if let Some(g) = c.gpu.as_mut() {
            g.cores = self.gpu.to_quantity();
        }
        if c.storage.is_some() {
            c.storage = Some(self.storage.to_quantity());
        }
    }
}

/// Why a requested partition cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// A quantity did not parse.
    #[error(transparent)]
    Quantity(#[from] QuantityError),
    /// A requested amount is negative.
    #[error("{0} must not be negative")]
    Negative(&'static str),
    /// Below the flavor's minimum.
    #[error("{resource} {requested} is below the minimum {min}")]
    BelowMinimum {
        /// Resource name.
        resource: &'static str,
        /// Requested amount.
        requested: String,
        /// Flavor minimum.
        min: String,
    },
    /// More than what remains.
    #[error("not enough {resources:?} left: requested {requested}, remaining {remaining}")]
    Insufficient {
        /// Which resources are short.
        resources: Vec<&'static str>,
        /// Requested amounts.
        requested: String,
        /// Remaining amounts.
        remaining: String,
    },
}

impl std::fmt::Display for Resources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cpu={} memory={} pods={} gpu={} storage={}",
            self.cpu, self.memory, self.pods, self.gpu, self.storage
        )
    }
}

/// Sum of what live entries take; holds expired at `now_rfc3339` are ignored.
///
/// RFC 3339 timestamps in UTC (`...Z`) compare correctly as strings.
pub fn committed(ledger: &[LedgerEntry], now_rfc3339: &str) -> Result<Resources, QuantityError> {
    ledger
        .iter()
        .filter(|e| is_live(e, now_rfc3339))
        .filter_map(|e| e.resources.as_ref())
        .try_fold(Resources::zero(), |acc, r| {
            Ok(acc.plus(Resources::of_entry(r)?))
        })
}

/// True for sales and for holds that have not expired.
pub fn is_live(e: &LedgerEntry, now_rfc3339: &str) -> bool {
    match e.state {
        LedgerState::Sold => true,
        LedgerState::Held => e
            .expiration_time
            .as_deref()
            .is_none_or(|exp| exp > now_rfc3339),
    }
}

/// Checks a requested partition against the flavor's minimums and what
/// remains.
///
/// Steps are advertised, not enforced, as by the Go node: the Go chart's
/// default memory step (100Mi) would otherwise refuse the upstream samples'
/// `1Gi`, which is no multiple of it.
pub fn check_partition(
    requested: Resources,
    remaining: Resources,
    p: &Partitionability,
) -> Result<(), PartitionError> {
    let rules = [
        ("cpu", requested.cpu, &p.cpu_min),
        ("memory", requested.memory, &p.memory_min),
        ("pods", requested.pods, &p.pods_min),
    ];
    for (resource, want, min) in rules {
        if want.nanos < 0 {
            return Err(PartitionError::Negative(resource));
        }
        if want < Amount::of(min)? {
            return Err(PartitionError::BelowMinimum {
                resource,
                requested: want.to_string(),
                min: min.0.clone(),
            });
        }
    }
    if requested.gpu.nanos < 0 || requested.storage.nanos < 0 {
        return Err(PartitionError::Negative("gpu/storage"));
    }
    let short = requested.exceeding(remaining);
    if !short.is_empty() {
        return Err(PartitionError::Insufficient {
            resources: short,
            requested: requested.to_string(),
            remaining: remaining.to_string(),
        });
    }
    Ok(())
}

/// A quantity for tests and builders.
pub fn q(s: &str) -> Quantity {
    Quantity(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpu: &str, mem: &str, pods: &str) -> Resources {
        Resources::of_entry(&LedgerResources {
            cpu: cpu.into(),
            memory: mem.into(),
            pods: pods.into(),
            gpu: None,
            storage: None,
        })
        .unwrap()
    }

    fn hold(tx: &str, cpu: &str, exp: &str) -> LedgerEntry {
        LedgerEntry {
            transaction_id: tx.into(),
            buyer_id: "b".into(),
            buyer_key: None,
            buyer_address: None,
            source_peer: None,
            state: LedgerState::Held,
            resources: Some(LedgerResources {
                cpu: cpu.into(),
                memory: "1Gi".into(),
                pods: "1".into(),
                gpu: None,
                storage: None,
            }),
            expiration_time: Some(exp.into()),
            contract: None,
        }
    }

    #[test]
    fn expired_holds_do_not_count() {
        let now = "2026-11-30T10:00:00Z";
        let ledger = vec![
            hold("a", "1", "2026-11-30T10:00:01Z"),
            hold("b", "2", "2026-11-30T09:59:59Z"),
            LedgerEntry {
                state: LedgerState::Sold,
                expiration_time: None,
                ..hold("c", "500m", "")
            },
        ];
        let c = committed(&ledger, now).unwrap();
        assert_eq!(c.cpu, Amount::parse("1500m").unwrap());
        assert_eq!(c.memory.to_string(), "2Gi");
    }

    #[test]
    fn partition_rules() {
        let p = Partitionability {
            cpu_min: q("1"),
            cpu_step: q("500m"),
            memory_min: q("1Gi"),
            memory_step: q("0"),
            ..Default::default()
        };
        let remaining = res("4", "8Gi", "110");
        assert!(check_partition(res("1500m", "2Gi", "10"), remaining, &p).is_ok());
        assert!(matches!(
            check_partition(res("500m", "2Gi", "10"), remaining, &p),
            Err(PartitionError::BelowMinimum {
                resource: "cpu",
                ..
            })
        ));
        // Off the step grid: accepted, as by the Go node.
        assert!(check_partition(res("1200m", "2Gi", "10"), remaining, &p).is_ok());
        // The upstream sample's 1Gi under the Go chart's 100Mi memory step.
        let go_chart = Partitionability {
            cpu_step: q("1000m"),
            memory_step: q("100Mi"),
            ..Default::default()
        };
        assert!(
            check_partition(
                res("1000m", "1Gi", "110"),
                res("4", "8Gi", "110"),
                &go_chart
            )
            .is_ok()
        );
        let err = check_partition(res("4", "9Gi", "10"), remaining, &p).unwrap_err();
        assert!(
            matches!(&err, PartitionError::Insufficient { resources, .. } if resources == &vec!["memory"])
        );
        assert!(err.to_string().contains("memory"), "{err}");
    }

    #[test]
    fn remaining_never_goes_negative() {
        let left = res("1", "1Gi", "1").minus(res("2", "2Gi", "5"));
        assert!(left.cpu.is_zero() && left.memory.is_zero() && left.pods.is_zero());
    }
}

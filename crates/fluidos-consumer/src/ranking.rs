//! Choosing among PeeringCandidates: lowest price, then most spare capacity,
//! then lowest latency when known, then name (so the choice is stable).
//!
//! The Go node takes the first available candidate in list order.

use std::cmp::Ordering;

use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::quantity::Amount;

/// Spare capacity of a K8Slice candidate, in nano-units; more CPU ranks
/// first, then more memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Spare {
    /// CPU, in nano-cores.
    pub cpu_nanos: i128,
    /// Memory, in nano-bytes.
    pub memory_nanos: i128,
}

/// What ranking needs to know of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateFacts {
    /// PeeringCandidate name.
    pub name: String,
    /// Price amount, when it parses as a decimal number.
    pub price: Option<f64>,
    /// Spare CPU and memory (K8Slice).
    pub spare: Option<Spare>,
    /// Advertised latency in milliseconds.
    pub latency: Option<i64>,
}

impl CandidateFacts {
    /// Facts from a candidate's name, price amount and decoded flavor.
    pub fn new(name: &str, price_amount: &str, flavor: &FlavorTypeData) -> Self {
        let (spare, latency) = match flavor {
            FlavorTypeData::K8Slice(k) => {
                let c = &k.characteristics;
                let spare = match (Amount::of(&c.cpu), Amount::of(&c.memory)) {
                    (Ok(cpu), Ok(mem)) => Some(Spare {
                        cpu_nanos: cpu.nanos,
                        memory_nanos: mem.nanos,
                    }),
                    _ => None,
                };
                (spare, k.properties.latency)
            }
            FlavorTypeData::Service(_) => (None, None),
        };
        CandidateFacts {
            name: name.to_owned(),
            price: price_amount
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite()),
            spare,
            latency,
        }
    }
}

/// `Some` first, smaller first (unknown values rank last).
fn known_low_first<T: PartialOrd>(a: &Option<T>, b: &Option<T>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// What decided between two candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Criterion {
    /// The lower price.
    Price,
    /// More spare capacity.
    Spare,
    /// Lower latency.
    Latency,
    /// Nothing else differed: the name.
    Name,
}

impl Criterion {
    /// How the reason reads.
    pub fn as_str(self) -> &'static str {
        match self {
            Criterion::Price => "lowest price",
            Criterion::Spare => "most spare capacity",
            Criterion::Latency => "lowest latency",
            Criterion::Name => "first by name among equal candidates",
        }
    }
}

/// Candidates best first, and why the first one won.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranking {
    /// Best first.
    pub ordered: Vec<CandidateFacts>,
    /// Why the first ranked first (empty without candidates).
    pub reason: String,
}

fn compare(a: &CandidateFacts, b: &CandidateFacts) -> (Ordering, Criterion) {
    let by_price = known_low_first(&a.price, &b.price);
    if by_price != Ordering::Equal {
        return (by_price, Criterion::Price);
    }
    // More spare capacity first: compare b against a.
    let by_spare = match (&a.spare, &b.spare) {
        (Some(x), Some(y)) => y.cmp(x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    if by_spare != Ordering::Equal {
        return (by_spare, Criterion::Spare);
    }
    let by_latency = known_low_first(&a.latency, &b.latency);
    if by_latency != Ordering::Equal {
        return (by_latency, Criterion::Latency);
    }
    (a.name.cmp(&b.name), Criterion::Name)
}

/// Sorts candidates best first and says why the first one won.
pub fn rank(mut candidates: Vec<CandidateFacts>) -> Ranking {
    candidates.sort_by(|a, b| compare(a, b).0);
    let reason = match candidates.as_slice() {
        [] => String::new(),
        [only] => format!("{} is the only matching candidate", only.name),
        [first, second, ..] => {
            let (_, why) = compare(first, second);
            let detail = match why {
                Criterion::Price => first
                    .price
                    .map(|p| {
                        format!(
                            " ({p} vs {})",
                            second.price.map_or("unknown".into(), |q| q.to_string())
                        )
                    })
                    .unwrap_or_default(),
                Criterion::Spare => first
                    .spare
                    .map(
                        |Spare {
                             cpu_nanos: cpu,
                             memory_nanos: mem,
                         }| {
                            format!(
                                " (cpu {}, memory {})",
                                Amount {
                                    nanos: cpu,
                                    format: fluidos_api::quantity::Format::DecimalSI
                                },
                                Amount {
                                    nanos: mem,
                                    format: fluidos_api::quantity::Format::BinarySI
                                }
                            )
                        },
                    )
                    .unwrap_or_default(),
                Criterion::Latency => first
                    .latency
                    .map(|l| format!(" ({l} ms)"))
                    .unwrap_or_default(),
                Criterion::Name => String::new(),
            };
            format!(
                "{} ranked first of {}: {}{detail}",
                first.name,
                candidates.len(),
                why.as_str()
            )
        }
    };
    Ranking {
        ordered: candidates,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(
        name: &str,
        price: Option<f64>,
        spare: Option<(i128, i128)>,
        latency: Option<i64>,
    ) -> CandidateFacts {
        CandidateFacts {
            name: name.into(),
            price,
            spare: spare.map(|(cpu_nanos, memory_nanos)| Spare {
                cpu_nanos,
                memory_nanos,
            }),
            latency,
        }
    }

    #[test]
    fn price_wins_over_capacity() {
        let Ranking {
            ordered: ranked,
            reason: why,
        } = rank(vec![
            c("big", Some(10.0), Some((8, 8)), None),
            c("cheap", Some(2.0), Some((1, 1)), None),
            c("unpriced", None, Some((99, 99)), None),
        ]);
        assert_eq!(ranked[0].name, "cheap");
        assert_eq!(ranked[2].name, "unpriced", "unknown prices rank last");
        assert!(why.contains("lowest price"), "{why}");
    }

    #[test]
    fn capacity_then_latency_then_name() {
        let Ranking {
            ordered: ranked,
            reason: why,
        } = rank(vec![
            c("a", None, Some((1, 5)), Some(5)),
            c("b", None, Some((2, 1)), Some(50)),
        ]);
        assert_eq!(ranked[0].name, "b");
        assert!(why.contains("most spare capacity"), "{why}");

        let Ranking {
            ordered: ranked,
            reason: why,
        } = rank(vec![
            c("slow", None, Some((1, 1)), Some(50)),
            c("fast", None, Some((1, 1)), Some(5)),
            c("unknown", None, Some((1, 1)), None),
        ]);
        assert_eq!(
            ranked.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["fast", "slow", "unknown"]
        );
        assert!(why.contains("lowest latency (5 ms)"), "{why}");

        let Ranking {
            ordered: ranked,
            reason: why,
        } = rank(vec![c("z", None, None, None), c("m", None, None, None)]);
        assert_eq!(ranked[0].name, "m");
        assert!(why.contains("by name"), "{why}");
    }

    #[test]
    fn single_and_empty() {
        assert_eq!(rank(vec![]).reason, "");
        assert!(rank(vec![c("x", None, None, None)]).reason.contains("only"));
    }

    #[test]
    fn facts_from_flavors() {
        let k = FlavorTypeData::K8Slice(fluidos_api::flavor::K8Slice {
            characteristics: fluidos_api::rear::characteristics("amd64", "2", "4Gi", "10"),
            ..Default::default()
        });
        let f = CandidateFacts::new("pc", " 3.5 ", &k);
        assert_eq!(f.price, Some(3.5));
        assert_eq!(
            f.spare,
            Some(Spare {
                cpu_nanos: 2_000_000_000,
                memory_nanos: 4 * 1024 * 1024 * 1024 * 1_000_000_000
            })
        );
        assert_eq!(CandidateFacts::new("pc", "", &k).price, None);
    }
}

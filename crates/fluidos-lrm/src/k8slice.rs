//! The K8Slice flavor a node offers (pure: no I/O, unit tested).

use std::collections::BTreeMap;

use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::flavor::{
    FlavorSpec, FlavorType, Gpu, K8Slice, K8SliceCharacteristics, Partitionability, Policies,
    Properties,
};
use fluidos_api::ledger::Resources;
use fluidos_api::quantity::{Amount, Format};
use fluidos_api::{Location, NodeIdentity, Price};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::config::LrmConfig;
use crate::error::{BuildError, ConfigError};
use crate::names;
use crate::requests::{GPU_RESOURCE, NodeLoad, STORAGE_RESOURCE};

/// Node label with the GPU model (NVIDIA GPU feature discovery), e.g. `NVIDIA-A100-SXM4-40GB`.
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Node label with the memory of one GPU in MiB (NVIDIA GPU feature discovery), e.g. `40960`.
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// `networkPropertyType` of every generated flavor (upstream constant).
pub const NETWORK_PROPERTY_TYPE: &str = "networkProperty";

/// The hard-coded location upstream gives every generated flavor (Turin).
pub fn upstream_location() -> Location {
    Location {
        latitude: Some("10".into()),
        longitude: Some("58".into()),
        country: Some("Italy".into()),
        city: Some("Turin".into()),
        additional_notes: Some("None".into()),
    }
}

/// The parts of every flavor that come from configuration, checked once.
#[derive(Clone, Debug, PartialEq)]
pub struct Publisher {
    /// This node: `providerID`, `owner`, and the domain of flavor names.
    pub identity: NodeIdentity,
    /// Flavor price.
    pub price: Price,
    /// K8Slice partitionability.
    pub partitionability: Partitionability,
    /// Namespace of the flavors.
    pub namespace: String,
    /// Label key (value `"true"`) of the nodes that produce flavors.
    pub node_resource_label: String,
}

impl Publisher {
    /// Validates `cfg` into a publisher.
    pub fn new(cfg: &LrmConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Publisher {
            identity: cfg.identity.clone(),
            price: cfg.price.clone(),
            partitionability: cfg.partitionability()?,
            namespace: cfg.namespace.clone(),
            node_resource_label: cfg.node_resource_label.clone(),
        })
    }

    /// A flavor spec of this node with the given type data.
    pub fn spec(&self, flavor_type: FlavorType) -> FlavorSpec {
        FlavorSpec {
            provider_id: self.identity.node_id.clone(),
            flavor_type,
            owner: self.identity.clone(),
            price: self.price.clone(),
            availability: true,
            network_property_type: Some(NETWORK_PROPERTY_TYPE.to_owned()),
            location: Some(upstream_location()),
        }
    }

    /// True when `node` carries the resource label with value `"true"`.
    pub fn selects(&self, node: &Node) -> bool {
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&self.node_resource_label))
            .is_some_and(|v| v == "true")
    }
}

/// A flavor as this crate wants it to be.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredFlavor {
    /// Object name.
    pub name: String,
    /// Labels this crate sets.
    pub labels: BTreeMap<String, String>,
    /// The one owner reference (the source object).
    pub owner: OwnerReference,
    /// The spec.
    pub spec: FlavorSpec,
}

fn meta<'a>(value: &'a Option<String>, field: &'static str) -> Result<&'a str, BuildError> {
    value
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or(BuildError::MissingMetadata {
            kind: "Node",
            field,
        })
}

fn amount(
    map: Option<&BTreeMap<String, Quantity>>,
    name: &str,
    field: &str,
) -> Result<Option<Amount>, BuildError> {
    map.and_then(|m| m.get(name))
        .map(|q| {
            Amount::of(q).map_err(|e| BuildError::Quantity {
                field: format!("{field}.{name}"),
                value: q.0.clone(),
                message: e.to_string(),
            })
        })
        .transpose()
}

/// `allocatable − taken`, floored at zero, in the spelling family of `allocatable`.
fn available(allocatable: Option<Amount>, taken: i128, zero_format: Format) -> Quantity {
    let alloc = allocatable.unwrap_or(Amount {
        nanos: 0,
        format: zero_format,
    });
    Amount {
        nanos: (alloc.nanos - taken).max(0),
        format: alloc.format,
    }
    .to_quantity()
}

/// The K8Slice flavor of `node`, given what its pods take and, when metrics.k8s.io
/// is served, its measured `usage` (`NodeMetrics.usage`).
///
/// cpu and memory: allocatable − max(requests, usage); pods: allocatable −
/// bound pods; storage: allocatable ephemeral-storage − its requests; gpu:
/// allocatable `nvidia.com/gpu` − its requests, model and per-GPU memory from
/// the GPU feature discovery labels (memory = free GPUs × per-GPU memory).
/// A node without GPUs gets the zero gpu object upstream always writes.
pub fn build(
    node: &Node,
    load: &NodeLoad,
    usage: Option<&BTreeMap<String, Quantity>>,
    publisher: &Publisher,
) -> Result<DesiredFlavor, BuildError> {
    let name = meta(&node.metadata.name, "name")?;
    let uid = meta(&node.metadata.uid, "uid")?;
    let status = node.status.as_ref();
    let alloc_map = status.and_then(|s| s.allocatable.as_ref());
    let cap_map = status.and_then(|s| s.capacity.as_ref());
    // Allocatable, falling back to capacity for a resource it does not list.
    let alloc = |res: &str| -> Result<Option<Amount>, BuildError> {
        match amount(alloc_map, res, "status.allocatable")? {
            Some(a) => Ok(Some(a)),
            None => amount(cap_map, res, "status.capacity"),
        }
    };
    let used = |res: &str| -> Result<i128, BuildError> {
        Ok(amount(usage, res, "NodeMetrics.usage")?.map_or(0, |a| a.nanos))
    };
    let r = load.requests;
    let cpu = available(alloc("cpu")?, r.cpu.max(used("cpu")?), Format::DecimalSI);
    let memory = available(
        alloc("memory")?,
        r.memory.max(used("memory")?),
        Format::BinarySI,
    );
    let pods = available(
        alloc("pods")?,
        load.pods.saturating_mul(1_000_000_000),
        Format::DecimalSI,
    );
    let storage = available(alloc(STORAGE_RESOURCE)?, r.storage, Format::BinarySI);
    let gpu_free = available(alloc(GPU_RESOURCE)?, r.gpu, Format::DecimalSI);
    let labels = node.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let per_gpu_mib: i128 = label(GPU_MEMORY_LABEL)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let free_gpus = Amount::of(&gpu_free).map_or(0, |a| a.nanos);
    let gpu = Gpu {
        model: label(GPU_PRODUCT_LABEL).unwrap_or_default().to_owned(),
        cores: gpu_free,
        memory: Amount {
            nanos: per_gpu_mib
                .saturating_mul(1 << 20)
                .saturating_mul(free_gpus),
            format: Format::BinarySI,
        }
        .to_quantity(),
    };
    let characteristics = K8SliceCharacteristics {
        architecture: status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.architecture.clone())
            .unwrap_or_default(),
        cpu,
        memory,
        pods,
        gpu: Some(gpu),
        storage: Some(storage),
    };
    let slice = K8Slice {
        characteristics,
        properties: Properties::default(),
        policies: Policies {
            partitionability: publisher.partitionability.clone(),
        },
    };
    let mut labels = BTreeMap::from([(
        names::MANAGED_BY_LABEL.to_owned(),
        names::MANAGED_BY.to_owned(),
    )]);
    if names::is_label_value(name) {
        labels.insert(names::NODE_LABEL.to_owned(), name.to_owned());
    }
    Ok(DesiredFlavor {
        name: names::flavor_name(
            &publisher.identity.domain,
            FlavorTypeIdentifier::K8Slice,
            uid,
        ),
        labels,
        owner: node_owner_ref(name, uid),
        spec: publisher.spec(FlavorType::k8slice(&slice)),
    })
}

/// Owner reference to a core `v1` Node, so the garbage collector resolves it
/// (upstream writes `nodecore.fluidos.eu/v1alpha1`, which it cannot).
pub fn node_owner_ref(name: &str, uid: &str) -> OwnerReference {
    crate::owner::SourceKind::Node.owner_ref(name, uid)
}

/// Raises every characteristic below `committed` up to it, so a flavor never
/// offers less than what is already held or sold from it. Returns the names
/// of the raised characteristics.
pub fn clamp_to_committed(
    c: &mut K8SliceCharacteristics,
    committed: &Resources,
) -> Result<Vec<&'static str>, BuildError> {
    fn raise(
        q: &mut Quantity,
        floor: Amount,
        name: &'static str,
        raised: &mut Vec<&'static str>,
    ) -> Result<(), BuildError> {
        let have = Amount::of(q).map_err(|e| BuildError::Quantity {
            field: format!("characteristics.{name}"),
            value: q.0.clone(),
            message: e.to_string(),
        })?;
        if have < floor {
            *q = Amount {
                nanos: floor.nanos,
                format: have.format,
            }
            .to_quantity();
            raised.push(name);
        }
        Ok(())
    }
    let mut raised = Vec::new();
    raise(&mut c.cpu, committed.cpu, "cpu", &mut raised)?;
    raise(&mut c.memory, committed.memory, "memory", &mut raised)?;
    raise(&mut c.pods, committed.pods, "pods", &mut raised)?;
    if let Some(g) = c.gpu.as_mut() {
        raise(&mut g.cores, committed.gpu, "gpu", &mut raised)?;
    }
    if let Some(s) = c.storage.as_mut() {
        raise(s, committed.storage, "storage", &mut raised)?;
    }
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::Requests;
    use fluidos_api::flavor::FlavorTypeData;
    use k8s_openapi::api::core::v1::{NodeStatus, NodeSystemInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn publisher() -> Publisher {
        let mut cfg = LrmConfig::new(NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "4ahrqttvng".into(),
            ip: "172.19.0.4:30001".into(),
            additional_information: None,
        });
        cfg.cpu_step = "1".into();
        cfg.memory_step = "100Mi".into();
        cfg.price = Price {
            amount: "10".into(),
            currency: "EUR".into(),
            period: "hourly".into(),
        };
        Publisher::new(&cfg).unwrap()
    }

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn node(alloc: &[(&str, &str)], labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("worker-1".into()),
                uid: Some("0b7e3c1a-1111-4222-8333-444455556666".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(alloc.iter().map(|(k, v)| ((*k).to_owned(), q(v))).collect()),
                node_info: Some(NodeSystemInfo {
                    architecture: "amd64".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn n(s: &str) -> i128 {
        Amount::parse(s).unwrap().nanos
    }

    fn chars(d: &DesiredFlavor) -> K8SliceCharacteristics {
        match d.spec.flavor_type.parse().unwrap() {
            FlavorTypeData::K8Slice(k) => k.characteristics,
            other => panic!("{other:?}"),
        }
    }

    const ALLOC: &[(&str, &str)] = &[
        ("cpu", "4"),
        ("memory", "8032832Ki"),
        ("pods", "110"),
        ("ephemeral-storage", "50Gi"),
    ];

    #[test]
    fn subtracts_requests_with_canonical_strings() {
        let load = NodeLoad {
            requests: Requests {
                cpu: n("1500m"),
                memory: n("1Gi"),
                storage: n("1Gi"),
                gpu: 0,
            },
            pods: 3,
        };
        let d = build(&node(ALLOC, &[]), &load, None, &publisher()).unwrap();
        let c = chars(&d);
        assert_eq!(c.architecture, "amd64");
        assert_eq!(c.cpu.0, "2500m");
        assert_eq!(c.memory.0, "6984256Ki");
        assert_eq!(c.pods.0, "107");
        assert_eq!(c.storage.as_ref().unwrap().0, "49Gi");
        assert_eq!(
            c.gpu,
            Some(Gpu {
                model: String::new(),
                cores: q("0"),
                memory: q("0")
            }),
            "upstream's zero gpu object"
        );
        assert_eq!(
            d.name,
            format!(
                "fluidos.eu-k8slice-{}",
                fluidos_api::naming::hash_prefix("0b7e3c1a-1111-4222-8333-444455556666", 16)
            )
        );
        assert_eq!(d.owner.api_version, "v1");
        assert_eq!(d.owner.kind, "Node");
        assert_eq!(d.owner.uid, "0b7e3c1a-1111-4222-8333-444455556666");
        assert_eq!(d.labels[names::NODE_LABEL], "worker-1");
        assert_eq!(d.labels[names::MANAGED_BY_LABEL], names::MANAGED_BY);
    }

    #[test]
    fn spec_matches_the_upstream_shape() {
        let d = build(&node(ALLOC, &[]), &NodeLoad::default(), None, &publisher()).unwrap();
        let v = serde_json::to_value(&d.spec).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "providerID": "4ahrqttvng",
                "flavorType": {"typeIdentifier": "K8Slice", "typeData": {
                    "characteristics": {"architecture": "amd64", "cpu": "4", "memory": "8032832Ki",
                        "pods": "110", "gpu": {"model": "", "cores": "0", "memory": "0"},
                        "storage": "50Gi"},
                    "properties": {},
                    "policies": {"partitionability": {"cpuMin": "0", "memoryMin": "0", "podsMin": "0",
                        "gpuMin": "0", "cpuStep": "1", "memoryStep": "100Mi", "podsStep": "0",
                        "gpuStep": "0"}}}},
                "owner": {"domain": "fluidos.eu", "nodeID": "4ahrqttvng", "ip": "172.19.0.4:30001"},
                "price": {"amount": "10", "currency": "EUR", "period": "hourly"},
                "availability": true,
                "networkPropertyType": "networkProperty",
                "location": {"latitude": "10", "longitude": "58", "country": "Italy",
                    "city": "Turin", "additionalNotes": "None"}
            })
        );
    }

    #[test]
    fn usage_counts_when_larger_than_requests() {
        let load = NodeLoad {
            requests: Requests {
                cpu: n("500m"),
                memory: n("2Gi"),
                ..Default::default()
            },
            pods: 1,
        };
        let usage = BTreeMap::from([
            ("cpu".to_owned(), q("123456789n")),
            ("memory".to_owned(), q("3Gi")),
        ]);
        let c = chars(&build(&node(ALLOC, &[]), &load, Some(&usage), &publisher()).unwrap());
        assert_eq!(c.cpu.0, "3500m", "requests 500m > usage 0.12");
        assert_eq!(c.memory.0, "4887104Ki", "usage 3Gi > requests 2Gi");
        // Upstream's own example: 4 − 123456789n.
        let c = chars(
            &build(
                &node(ALLOC, &[]),
                &NodeLoad::default(),
                Some(&usage),
                &publisher(),
            )
            .unwrap(),
        );
        assert_eq!(c.cpu.0, "3876543211n");
    }

    #[test]
    fn gpus_from_allocatable_and_feature_discovery_labels() {
        let mut alloc = ALLOC.to_vec();
        alloc.push(("nvidia.com/gpu", "4"));
        let labels = [
            (GPU_PRODUCT_LABEL, "NVIDIA-A100-SXM4-40GB"),
            (GPU_MEMORY_LABEL, "40960"),
        ];
        let load = NodeLoad {
            requests: Requests {
                gpu: n("1"),
                ..Default::default()
            },
            pods: 1,
        };
        let c = chars(&build(&node(&alloc, &labels), &load, None, &publisher()).unwrap());
        assert_eq!(
            c.gpu,
            Some(Gpu {
                model: "NVIDIA-A100-SXM4-40GB".into(),
                cores: q("3"),
                memory: q("120Gi"),
            })
        );
    }

    #[test]
    fn never_negative_and_bad_quantities_are_errors() {
        let load = NodeLoad {
            requests: Requests {
                cpu: n("8"),
                ..Default::default()
            },
            pods: 200,
        };
        let c = chars(&build(&node(ALLOC, &[]), &load, None, &publisher()).unwrap());
        assert_eq!((c.cpu.0.as_str(), c.pods.0.as_str()), ("0", "0"));

        let err = build(&node(&[("cpu", "four")], &[]), &load, None, &publisher()).unwrap_err();
        assert!(
            matches!(&err, BuildError::Quantity { field, .. } if field == "status.allocatable.cpu")
        );
        let mut no_uid = node(ALLOC, &[]);
        no_uid.metadata.uid = None;
        assert_eq!(
            build(&no_uid, &load, None, &publisher()).unwrap_err(),
            BuildError::MissingMetadata {
                kind: "Node",
                field: "uid"
            }
        );
    }

    #[test]
    fn missing_allocatable_falls_back_to_capacity() {
        let mut nd = node(&[("cpu", "2")], &[]);
        if let Some(s) = nd.status.as_mut() {
            s.capacity = Some(BTreeMap::from([("pods".to_owned(), q("30"))]));
        }
        let c = chars(&build(&nd, &NodeLoad::default(), None, &publisher()).unwrap());
        assert_eq!((c.cpu.0.as_str(), c.pods.0.as_str()), ("2", "30"));
        assert_eq!(c.memory.0, "0");
        assert_eq!(c.storage.unwrap().0, "0");
    }

    #[test]
    fn clamp_keeps_what_is_committed() {
        let d = build(
            &node(ALLOC, &[]),
            &NodeLoad {
                requests: Requests {
                    cpu: n("3500m"),
                    memory: n("7Gi"),
                    ..Default::default()
                },
                pods: 100,
            },
            None,
            &publisher(),
        )
        .unwrap();
        let mut c = chars(&d);
        assert_eq!((c.cpu.0.as_str(), c.pods.0.as_str()), ("500m", "10"));
        let committed = Resources::of_entry(&fluidos_api::ledger::LedgerResources {
            cpu: "2".into(),
            memory: "1Gi".into(),
            pods: "20".into(),
            gpu: None,
            storage: None,
        })
        .unwrap();
        let raised = clamp_to_committed(&mut c, &committed).unwrap();
        assert_eq!(raised, vec!["cpu", "memory", "pods"]);
        assert_eq!(c.cpu.0, "2");
        assert_eq!(c.memory.0, "1Gi", "1Gi > 8032832Ki − 7Gi = 692800Ki");
        assert_eq!(c.pods.0, "20");
        assert_eq!(c.storage.as_ref().unwrap().0, "50Gi", "untouched");
    }

    #[test]
    fn selects_only_label_true() {
        let p = publisher();
        assert!(p.selects(&node(
            ALLOC,
            &[(fluidos_api::DEFAULT_NODE_RESOURCE_LABEL, "true")]
        )));
        assert!(!p.selects(&node(
            ALLOC,
            &[(fluidos_api::DEFAULT_NODE_RESOURCE_LABEL, "yes")]
        )));
        assert!(!p.selects(&node(ALLOC, &[])));
    }
}

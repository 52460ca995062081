//! What the pods bound to a node take from it (pure).
//!
//! The effective request of a pod follows the Kubernetes scheduler
//! (`k8s.io/component-helpers/resource.PodRequests`): the sum of the app
//! containers plus restartable init containers (sidecars), or the largest
//! one-at-a-time init container (plus the sidecars started before it) if that
//! is larger; pod-level `spec.resources.requests` replace the container
//! aggregate for the resources they name; `spec.overhead` is added on top.

use std::collections::BTreeMap;

use fluidos_api::quantity::Amount;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::error::BuildError;

/// Resource name of NVIDIA GPUs (device plugin extended resource).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Resource name of ephemeral storage, published as the flavor's `storage`.
pub const STORAGE_RESOURCE: &str = "ephemeral-storage";

/// Amounts of the four divisible resources a flavor tracks, in nano-units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// CPU.
    pub cpu: i128,
    /// Memory.
    pub memory: i128,
    /// Ephemeral storage.
    pub storage: i128,
    /// NVIDIA GPUs.
    pub gpu: i128,
}

impl Requests {
    fn zip(self, o: Requests, f: impl Fn(i128, i128) -> i128) -> Requests {
        Requests {
            cpu: f(self.cpu, o.cpu),
            memory: f(self.memory, o.memory),
            storage: f(self.storage, o.storage),
            gpu: f(self.gpu, o.gpu),
        }
    }

    /// Component-wise sum.
    pub fn plus(self, o: Requests) -> Requests {
        self.zip(o, i128::saturating_add)
    }

    /// Component-wise difference (may be negative; used for incremental totals).
    pub fn minus(self, o: Requests) -> Requests {
        self.zip(o, i128::saturating_sub)
    }

    /// Component-wise maximum.
    pub fn max(self, o: Requests) -> Requests {
        self.zip(o, i128::max)
    }

    /// Reads the tracked resources of a `requests`-style map.
    pub fn of_map(
        map: Option<&BTreeMap<String, Quantity>>,
        field: &str,
    ) -> Result<Requests, BuildError> {
        let Some(map) = map else {
            return Ok(Requests::default());
        };
        let get = |name: &str| -> Result<i128, BuildError> {
            map.get(name)
                .map(|q| {
                    Amount::of(q)
                        .map(|a| a.nanos)
                        .map_err(|e| BuildError::Quantity {
                            field: format!("{field}.{name}"),
                            value: q.0.clone(),
                            message: e.to_string(),
                        })
                })
                .transpose()
                .map(Option::unwrap_or_default)
        };
        Ok(Requests {
            cpu: get("cpu")?,
            memory: get("memory")?,
            storage: get(STORAGE_RESOURCE)?,
            gpu: get(GPU_RESOURCE)?,
        })
    }
}

/// What the pods of one node take: summed requests and the number of pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// Summed effective requests.
    pub requests: Requests,
    /// Number of pods occupying a pod slot.
    pub pods: i128,
}

impl NodeLoad {
    /// The load of one pod.
    pub fn of_pod(requests: Requests) -> Self {
        NodeLoad { requests, pods: 1 }
    }

    /// Sum of two loads.
    pub fn plus(self, o: NodeLoad) -> NodeLoad {
        NodeLoad {
            requests: self.requests.plus(o.requests),
            pods: self.pods + o.pods,
        }
    }

    /// Difference of two loads.
    pub fn minus(self, o: NodeLoad) -> NodeLoad {
        NodeLoad {
            requests: self.requests.minus(o.requests),
            pods: self.pods - o.pods,
        }
    }

    /// True when nothing is taken.
    pub fn is_empty(&self) -> bool {
        *self == NodeLoad::default()
    }
}

fn container_requests(c: &Container, field: &str) -> Result<Requests, BuildError> {
    Requests::of_map(
        c.resources.as_ref().and_then(|r| r.requests.as_ref()),
        &format!("{field}[{}].resources.requests", c.name),
    )
}

/// The effective request of a pod spec, as the scheduler computes it.
pub fn pod_requests(spec: &PodSpec) -> Result<Requests, BuildError> {
    let mut reqs = Requests::default();
    for c in &spec.containers {
        reqs = reqs.plus(container_requests(c, "spec.containers")?);
    }
    let mut sidecars = Requests::default();
    let mut init_max = Requests::default();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c, "spec.initContainers")?;
        let effective = if c.restart_policy.as_deref() == Some("Always") {
            reqs = reqs.plus(own);
            sidecars = sidecars.plus(own);
            sidecars
        } else {
            own.plus(sidecars)
        };
        init_max = init_max.max(effective);
    }
    reqs = reqs.max(init_max);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let p = Requests::of_map(Some(pod_level), "spec.resources.requests")?;
        // Pod-level resources support cpu and memory only.
        if pod_level.contains_key("cpu") {
            reqs.cpu = p.cpu;
        }
        if pod_level.contains_key("memory") {
            reqs.memory = p.memory;
        }
    }
    Ok(reqs.plus(Requests::of_map(spec.overhead.as_ref(), "spec.overhead")?))
}

/// The node a pod occupies: bound (`spec.nodeName`) and not finished.
pub fn bound_node(pod: &Pod) -> Option<&str> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodStatus, ResourceRequirements};

    fn nanos(s: &str) -> i128 {
        Amount::parse(s).unwrap().nanos
    }

    fn container(name: &str, cpu: &str, mem: &str, restart: Option<&str>) -> Container {
        Container {
            name: name.into(),
            restart_policy: restart.map(Into::into),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cpu.into())),
                    ("memory".to_owned(), Quantity(mem.into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sums_containers_and_adds_overhead() {
        let spec = PodSpec {
            containers: vec![
                container("a", "100m", "128Mi", None),
                container("b", "250m", "64Mi", None),
                Container {
                    name: "none".into(),
                    ..Default::default()
                },
            ],
            overhead: Some(BTreeMap::from([("cpu".to_owned(), Quantity("10m".into()))])),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.cpu, nanos("360m"));
        assert_eq!(r.memory, nanos("192Mi"));
        assert_eq!(r.gpu, 0);
    }

    #[test]
    fn init_containers_follow_the_scheduler_rule() {
        // app 100m; sidecar 50m (counts for the whole life); a big init 500m
        // that runs after the sidecar started: max(100+50, 500+50) = 550m.
        let spec = PodSpec {
            containers: vec![container("app", "100m", "100Mi", None)],
            init_containers: Some(vec![
                container("sidecar", "50m", "10Mi", Some("Always")),
                container("migrate", "500m", "50Mi", None),
            ]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.cpu, nanos("550m"));
        assert_eq!(r.memory, nanos("110Mi"), "app+sidecar 110Mi > init 60Mi");
    }

    #[test]
    fn pod_level_requests_replace_cpu_and_memory() {
        let spec = PodSpec {
            containers: vec![container("app", "100m", "100Mi", None)],
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity("1".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.cpu, nanos("1"));
        assert_eq!(r.memory, nanos("100Mi"));
    }

    #[test]
    fn gpu_and_storage_are_tracked_and_garbage_is_an_error() {
        let mut c = container("a", "1", "1Gi", None);
        let reqs = c
            .resources
            .as_mut()
            .and_then(|r| r.requests.as_mut())
            .unwrap();
        reqs.insert(GPU_RESOURCE.into(), Quantity("2".into()));
        reqs.insert(STORAGE_RESOURCE.into(), Quantity("1Gi".into()));
        let spec = PodSpec {
            containers: vec![c.clone()],
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!((r.gpu, r.storage), (nanos("2"), nanos("1Gi")));

        let mut bad = c;
        bad.resources
            .as_mut()
            .and_then(|r| r.requests.as_mut())
            .unwrap()
            .insert("cpu".into(), Quantity("lots".into()));
        let err = pod_requests(&PodSpec {
            containers: vec![bad],
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("spec.containers[a].resources.requests.cpu"),
            "{err}"
        );
    }

    #[test]
    fn only_bound_unfinished_pods_count() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(bound_node(&pod), Some("n1"));
        for (phase, counts) in [
            ("Pending", true),
            ("Running", true),
            ("Unknown", true),
            ("Succeeded", false),
            ("Failed", false),
        ] {
            pod.status = Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            assert_eq!(bound_node(&pod).is_some(), counts, "{phase}");
        }
        pod.status = None;
        pod.spec = Some(PodSpec::default());
        assert_eq!(bound_node(&pod), None);
    }
}

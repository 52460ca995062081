//! Per-node totals of what bound pods take, kept from one Pod watch.
//!
//! Instead of caching Pod objects (kilobytes each) this keeps, per pod, only
//! its node and effective request, and per node the running sum, updated
//! exactly (integer nano-units) on every event. A pod event whose node and
//! request are unchanged (status updates, label edits) triggers nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::requests::{NodeLoad, bound_node, pod_requests};

type Entry = (Arc<str>, NodeLoad);

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    totals: HashMap<Arc<str>, NodeLoad>,
    relist: Option<HashMap<String, Entry>>,
}

/// Node → load index fed by Pod watch events.
pub struct PodIndex {
    inner: Mutex<Inner>,
    ready: watch::Sender<bool>,
}

impl Default for PodIndex {
    fn default() -> Self {
        PodIndex {
            inner: Mutex::default(),
            ready: watch::Sender::new(false),
        }
    }
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// The node a pod occupies and what it takes there.
fn entry(pod: &Pod) -> Option<Entry> {
    let node = bound_node(pod)?;
    let requests = pod
        .spec
        .as_ref()
        .map(pod_requests)
        .transpose()
        .unwrap_or_else(|e| {
            // The API server validates quantities, so this is not expected;
            // the pod still occupies a slot.
            tracing::warn!(pod = %key(pod), error = %e, "pod requests unreadable; counting the pod only");
            None
        })
        .unwrap_or_default();
    Some((Arc::from(node), NodeLoad::of_pod(requests)))
}

fn add(totals: &mut HashMap<Arc<str>, NodeLoad>, (node, load): &Entry) {
    let t = totals.entry(node.clone()).or_default();
    *t = t.plus(*load);
}

fn sub(totals: &mut HashMap<Arc<str>, NodeLoad>, (node, load): &Entry) {
    if let Some(t) = totals.get_mut(node) {
        *t = t.minus(*load);
        if t.is_empty() {
            totals.remove(node);
        }
    }
}

impl PodIndex {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every
        // update is computed before it is written), so poisoning is ignored.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the pods bound to `node` take.
    pub fn load(&self, node: &str) -> NodeLoad {
        self.lock().totals.get(node).copied().unwrap_or_default()
    }

    /// Number of pods counted (all nodes).
    pub fn pods(&self) -> usize {
        self.lock().pods.len()
    }

    /// True once the first full list has been seen.
    #[cfg(test)]
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the first full list has been seen.
    pub async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        // The sender lives in `self`, so this cannot fail while we wait.
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Applies one watch event; returns the nodes whose load changed.
    pub fn apply(&self, event: &Event<Pod>) -> Vec<Arc<str>> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        match event {
            Event::Apply(pod) => {
                let k = key(pod);
                let new = entry(pod);
                let old = inner.pods.get(&k);
                if old == new.as_ref() {
                    return Vec::new();
                }
                let mut changed = Vec::with_capacity(2);
                if let Some(old) = inner.pods.remove(&k) {
                    sub(&mut inner.totals, &old);
                    changed.push(old.0);
                }
                if let Some(new) = new {
                    add(&mut inner.totals, &new);
                    if !changed.contains(&new.0) {
                        changed.push(new.0.clone());
                    }
                    inner.pods.insert(k, new);
                }
                changed
            }
            Event::Delete(pod) => match inner.pods.remove(&key(pod)) {
                Some(old) => {
                    sub(&mut inner.totals, &old);
                    vec![old.0]
                }
                None => Vec::new(),
            },
            Event::Init => {
                inner.relist = Some(HashMap::new());
                Vec::new()
            }
            Event::InitApply(pod) => {
                if let (Some(buf), Some(e)) = (inner.relist.as_mut(), entry(pod)) {
                    buf.insert(key(pod), e);
                }
                Vec::new()
            }
            Event::InitDone => {
                let pods = inner.relist.take().unwrap_or_default();
                let mut totals = HashMap::new();
                for e in pods.values() {
                    add(&mut totals, e);
                }
                let mut changed: Vec<Arc<str>> = totals
                    .iter()
                    .filter(|(n, t)| inner.totals.get(*n) != Some(*t))
                    .map(|(n, _)| n.clone())
                    .collect();
                changed.extend(
                    inner
                        .totals
                        .keys()
                        .filter(|n| !totals.contains_key(*n))
                        .cloned(),
                );
                inner.pods = pods;
                inner.totals = totals;
                self.ready.send_replace(true);
                changed
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::requests::Requests;
    use fluidos_api::quantity::Amount;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod(name: &str, node: Option<&str>, cpu: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity(cpu.into()))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    fn total(loads: &[NodeLoad]) -> Requests {
        loads
            .iter()
            .fold(Requests::default(), |acc, l| acc.plus(l.requests))
    }

    fn cpu(i: &PodIndex, node: &str) -> (i128, i128) {
        let l = i.load(node);
        (l.requests.cpu / 1_000_000, l.pods)
    }

    fn names(v: Vec<Arc<str>>) -> Vec<String> {
        v.into_iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn incremental_updates_trigger_only_real_changes() {
        let i = PodIndex::default();
        assert!(!i.is_ready());
        assert!(i.apply(&Event::Init).is_empty());
        i.apply(&Event::InitApply(pod("a", Some("n1"), "100m", "Running")));
        i.apply(&Event::InitApply(pod("b", Some("n1"), "200m", "Running")));
        i.apply(&Event::InitApply(pod("c", None, "1", "Pending")));
        assert_eq!(cpu(&i, "n1"), (0, 0), "nothing visible before InitDone");
        assert_eq!(names(i.apply(&Event::InitDone)), vec!["n1"]);
        assert!(i.is_ready());
        assert_eq!(cpu(&i, "n1"), (300, 2));

        // Same request (a status update): no trigger.
        assert!(
            i.apply(&Event::Apply(pod("a", Some("n1"), "100m", "Running")))
                .is_empty()
        );
        // Binding a pending pod.
        assert_eq!(
            names(i.apply(&Event::Apply(pod("c", Some("n2"), "1", "Pending")))),
            vec!["n2"]
        );
        assert_eq!(cpu(&i, "n2"), (1000, 1));
        // Finishing frees the node.
        assert_eq!(
            names(i.apply(&Event::Apply(pod("c", Some("n2"), "1", "Succeeded")))),
            vec!["n2"]
        );
        assert_eq!(cpu(&i, "n2"), (0, 0));
        assert_eq!(
            names(i.apply(&Event::Delete(pod("b", Some("n1"), "200m", "Running")))),
            vec!["n1"]
        );
        assert_eq!(cpu(&i, "n1"), (100, 1));
        assert!(
            i.apply(&Event::Delete(pod("zzz", Some("n1"), "1", "Running")))
                .is_empty()
        );
    }

    #[test]
    fn relist_reports_nodes_that_changed_or_emptied() {
        let i = PodIndex::default();
        i.apply(&Event::Init);
        i.apply(&Event::InitApply(pod("a", Some("n1"), "100m", "Running")));
        i.apply(&Event::InitApply(pod("b", Some("n2"), "100m", "Running")));
        i.apply(&Event::InitDone);
        // Relist after a watch desync: a gone, b unchanged, d new on n3.
        i.apply(&Event::Init);
        i.apply(&Event::InitApply(pod("b", Some("n2"), "100m", "Running")));
        i.apply(&Event::InitApply(pod("d", Some("n3"), "1", "Running")));
        let mut changed = names(i.apply(&Event::InitDone));
        changed.sort();
        assert_eq!(changed, vec!["n1", "n3"]);
        assert_eq!(cpu(&i, "n1"), (0, 0));
        assert_eq!(i.pods(), 2);
        assert_eq!(
            total(&[i.load("n2"), i.load("n3")]).cpu,
            Amount::parse("1100m").unwrap().nanos
        );
    }
}

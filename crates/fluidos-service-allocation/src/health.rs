//! Whether a service's workloads are available, and if not, why (pure).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// The health of a service instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every Deployment and StatefulSet has all its replicas available.
    Available,
    /// Not available yet, and nothing is known to be wrong.
    Progressing(String),
    /// Not available, and a pod says why: image pull failure, crash loop, unschedulable...
    Degraded(String),
}

/// Container waiting reasons that mean the workload will not come up by itself.
const FAILING_WAIT_REASONS: [&str; 6] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
];

fn deployment_gap(d: &Deployment) -> Option<String> {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let available = st.available_replicas.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let observed = st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0);
    if observed && available >= want && updated >= want {
        return None;
    }
    Some(format!(
        "Deployment {}: {available}/{want} available",
        d.name_any()
    ))
}

fn deployment_failure(d: &Deployment) -> Option<String> {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| {
            (c.type_ == "Progressing" && c.status == "False")
                || (c.type_ == "ReplicaFailure" && c.status == "True")
        })
        .map(|c| {
            format!(
                "Deployment {}: {}: {}",
                d.name_any(),
                c.reason.as_deref().unwrap_or(&c.type_),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

fn statefulset_gap(s: &StatefulSet) -> Option<String> {
    let want = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = s.status.clone().unwrap_or_default();
    let ready = st
        .available_replicas
        .unwrap_or(0)
        .max(0)
        .min(st.ready_replicas.unwrap_or(0));
    let observed = st.observed_generation.unwrap_or(0) >= s.metadata.generation.unwrap_or(0);
    if observed && ready >= want {
        return None;
    }
    Some(format!(
        "StatefulSet {}: {ready}/{want} available",
        s.name_any()
    ))
}

fn pod_failure(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?;
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in statuses {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && let Some(reason) = w.reason.as_deref()
            && FAILING_WAIT_REASONS.contains(&reason)
        {
            let message = w.message.as_deref().unwrap_or_default();
            return Some(format!(
                "pod {} container {}: {reason}{}{message}",
                p.name_any(),
                c.name,
                if message.is_empty() { "" } else { ": " }
            ));
        }
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| {
            format!(
                "pod {}: Unschedulable: {}",
                p.name_any(),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

/// The health of a service from its Deployments, StatefulSets and the pods
/// of its namespace (pure). With no workload at all, it is available (a
/// blueprint may deliver only a Service and a Secret).
pub fn assess(deployments: &[Deployment], statefulsets: &[StatefulSet], pods: &[Pod]) -> Health {
    let gaps: Vec<String> = deployments
        .iter()
        .filter_map(deployment_gap)
        .chain(statefulsets.iter().filter_map(statefulset_gap))
        .collect();
    if gaps.is_empty() {
        return Health::Available;
    }
    let failures: Vec<String> = pods
        .iter()
        .filter_map(pod_failure)
        .chain(deployments.iter().filter_map(deployment_failure))
        .collect();
    if failures.is_empty() {
        Health::Progressing(gaps.join("; "))
    } else {
        Health::Degraded(format!("{} ({})", failures.join("; "), gaps.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn dep(replicas: i32, available: i32) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "db", "generation": 1},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "availableReplicas": available, "updatedReplicas": available}}))
        .unwrap()
    }

    fn sts(replicas: i32, ready: i32) -> StatefulSet {
        serde_json::from_value(json!({"metadata": {"name": "mq", "generation": 2},
            "spec": {"replicas": replicas, "selector": {}, "template": {}, "serviceName": "mq"},
            "status": {"observedGeneration": 2, "replicas": replicas, "readyReplicas": ready, "availableReplicas": ready}}))
        .unwrap()
    }

    fn waiting_pod(reason: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "db-1"},
            "status": {"containerStatuses": [{"name": "mysql", "image": "mysql", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": "boom"}}}]}}))
        .unwrap()
    }

    #[test]
    fn available_when_every_workload_is() {
        assert_eq!(assess(&[dep(1, 1)], &[sts(2, 2)], &[]), Health::Available);
        assert_eq!(assess(&[], &[], &[]), Health::Available);
    }

    #[test]
    fn progressing_names_the_workloads_short_of_replicas() {
        assert_eq!(
            assess(&[dep(1, 0)], &[sts(2, 1)], &[]),
            Health::Progressing(
                "Deployment db: 0/1 available; StatefulSet mq: 1/2 available".into()
            )
        );
        // A generation not yet observed is not available, whatever the counts.
        let mut d = dep(1, 1);
        d.metadata.generation = Some(2);
        assert!(matches!(assess(&[d], &[], &[]), Health::Progressing(_)));
    }

    #[test]
    fn degraded_says_why() {
        for reason in ["ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff"] {
            assert_eq!(
                assess(&[dep(1, 0)], &[], &[waiting_pod(reason)]),
                Health::Degraded(format!(
                    "pod db-1 container mysql: {reason}: boom (Deployment db: 0/1 available)"
                ))
            );
        }
        // Waiting for a normal reason is only progress.
        assert!(matches!(
            assess(&[dep(1, 0)], &[], &[waiting_pod("ContainerCreating")]),
            Health::Progressing(_)
        ));
        let unschedulable: Pod = serde_json::from_value(json!({"metadata": {"name": "db-2"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available"}]}}))
        .unwrap();
        assert_eq!(
            assess(&[dep(1, 0)], &[], &[unschedulable]),
            Health::Degraded(
                "pod db-2: Unschedulable: 0/1 nodes are available (Deployment db: 0/1 available)"
                    .into()
            )
        );
        // A pod failing while the workloads are available does not matter.
        assert_eq!(
            assess(&[dep(1, 1)], &[], &[waiting_pod("CrashLoopBackOff")]),
            Health::Available
        );
    }

    #[test]
    fn deadline_exceeded_is_degraded() {
        let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "db", "generation": 1},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}}))
        .unwrap();
        assert_eq!(
            assess(&[d], &[], &[]),
            Health::Degraded(
                "Deployment db: ProgressDeadlineExceeded: too slow (Deployment db: 0/1 available)"
                    .into()
            )
        );
    }
}

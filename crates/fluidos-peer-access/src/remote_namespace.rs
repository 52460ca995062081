//! Which namespaces are a peer's, and the labels they must carry (pure).
//!
//! Liqo's NamespaceMap controller makes, on the cluster that runs a peer's
//! workloads, one namespace per namespace the peer offloads. It labels each
//! [`REMOTE_CLUSTER_ID_LABEL`]` = <peer's cluster ID>` and annotates it
//! [`MANAGED_BY_ANNOTATION`]` = liqo-tenant-<peer>/<NamespaceMap>`. Liqo's
//! tenant namespaces carry the cluster-ID label too, with
//! [`TENANT_NAMESPACE_LABEL`]: they hold Liqo's own objects for the peer
//! (and, with networking, its gateway pods), not the peer's workloads.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;

use crate::pod_security::{ENFORCE_LABEL, ENFORCE_VERSION_LABEL, GUARDED_LABEL, PodSecurityLevel};

/// Label Liqo puts on the namespaces it makes for a remote cluster.
pub const REMOTE_CLUSTER_ID_LABEL: &str = "liqo.io/remote-cluster-id";
/// Label of Liqo's tenant namespaces.
pub const TENANT_NAMESPACE_LABEL: &str = "liqo.io/tenant-namespace";
/// Annotation naming the NamespaceMap (`<tenant namespace>/<name>`) that
/// made a namespace.
pub const MANAGED_BY_ANNOTATION: &str = "liqo.io/managed-by-namespace-map";
/// Annotation naming the peer's namespace a namespace was made for (the
/// key of the NamespaceMap's desired mapping).
pub const ORIGINAL_NAME_ANNOTATION: &str = "liqo.io/original-name";
/// Prefix of a peer's Liqo tenant namespace (`liqo-tenant-<cluster ID>`).
pub const TENANT_PREFIX: &str = "liqo-tenant-";
/// Liqo's namespace: where its controllers and its IPAM Networks live, the
/// name Liqo's chart is installed in by default and the one an unmodified
/// Go consumer assumes.
pub const LIQO_NAMESPACE: &str = "liqo";

/// Whether a peer with cluster ID `id` may have namespaces made for it
/// here: Liqo names them `<its namespace>-<id>`, and the peer chooses both
/// parts, so a one-word ID (`system`, `operator`, `nginx`) would let it take
/// a name this cluster's admin will need later (`longhorn-system`,
/// `gpu-operator`, `ingress-nginx`), and Liqo would give the peer's
/// credentials the right to read what is installed there. An ID with a
/// hyphen or a digit is as Liqo generates them (`quiet-smoke`) and as
/// FLUIDOS clusters are named (`fluidos-consumer-1`). The namespace policy
/// checks the same in CEL ([`crate::workload_policy`]).
pub fn distinctive_cluster_id(id: &str) -> bool {
    id.contains('-') || id.chars().any(|c| c.is_ascii_digit())
}

/// The label selector of the namespaces that hold peers' workloads.
pub fn selector() -> String {
    format!("{REMOTE_CLUSTER_ID_LABEL},!{TENANT_NAMESPACE_LABEL}")
}

/// True when `ns` holds a peer's workloads (made by Liqo for a remote
/// cluster, and not a tenant namespace).
pub fn holds_peer_workloads(ns: &Namespace) -> bool {
    let labels = ns.metadata.labels.as_ref();
    labels.is_some_and(|l| {
        l.contains_key(REMOTE_CLUSTER_ID_LABEL) && !l.contains_key(TENANT_NAMESPACE_LABEL)
    })
}

/// The labels this node applies to a peer namespace at `level`.
pub fn pod_security_labels(level: PodSecurityLevel) -> BTreeMap<String, String> {
    [
        (ENFORCE_LABEL, level.as_str()),
        (ENFORCE_VERSION_LABEL, "latest"),
        (GUARDED_LABEL, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The labels to apply to `ns`, or `None` when it already carries them, is
/// going, or is no peer namespace.
pub fn labels_to_apply(
    ns: &Namespace,
    level: PodSecurityLevel,
) -> Option<BTreeMap<String, String>> {
    if !holds_peer_workloads(ns) || ns.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let want = pod_security_labels(level);
    let have = ns.metadata.labels.as_ref();
    let in_place = want
        .iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v));
    (!in_place).then_some(want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn ns(labels: &[(&str, &str)]) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("app-consumer".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_namespace_liqo_made_for_a_peer_gets_the_level_once() {
        let peer = ns(&[(REMOTE_CLUSTER_ID_LABEL, "consumer")]);
        let want = labels_to_apply(&peer, PodSecurityLevel::Restricted).expect("labels");
        assert_eq!(want[ENFORCE_LABEL], "restricted");
        assert_eq!(want[ENFORCE_VERSION_LABEL], "latest");
        let mut labelled: Vec<(&str, &str)> = vec![(REMOTE_CLUSTER_ID_LABEL, "consumer")];
        labelled.extend(want.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let done = ns(&labelled);
        assert_eq!(labels_to_apply(&done, PodSecurityLevel::Restricted), None);
        // Another level configured: relabelled.
        assert_eq!(
            labels_to_apply(&done, PodSecurityLevel::Baseline).map(|l| l[ENFORCE_LABEL].clone()),
            Some("baseline".to_owned())
        );
        // Somebody lowered it: put back.
        let lowered = ns(&[
            (REMOTE_CLUSTER_ID_LABEL, "consumer"),
            (ENFORCE_LABEL, "privileged"),
        ]);
        assert!(labels_to_apply(&lowered, PodSecurityLevel::Restricted).is_some());
    }

    #[test]
    fn tenant_namespaces_others_and_going_ones_are_left_alone() {
        let tenant = ns(&[
            (REMOTE_CLUSTER_ID_LABEL, "consumer"),
            (TENANT_NAMESPACE_LABEL, "true"),
        ]);
        assert_eq!(labels_to_apply(&tenant, PodSecurityLevel::Restricted), None);
        assert_eq!(
            labels_to_apply(&ns(&[]), PodSecurityLevel::Restricted),
            None
        );
        let mut going = ns(&[(REMOTE_CLUSTER_ID_LABEL, "consumer")]);
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(labels_to_apply(&going, PodSecurityLevel::Restricted), None);
        assert_eq!(
            selector(),
            "liqo.io/remote-cluster-id,!liqo.io/tenant-namespace"
        );
    }

    #[test]
    fn one_word_cluster_ids_are_not_distinctive() {
        for id in [
            "fluidos-consumer",
            "quiet-smoke",
            "consumer1",
            "a1b2c3d4-0000",
        ] {
            assert!(distinctive_cluster_id(id), "{id}");
        }
        for id in ["system", "operator", "nginx", ""] {
            assert!(!distinctive_cluster_id(id), "{id}");
        }
    }
}

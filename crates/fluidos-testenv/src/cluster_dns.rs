//! The cluster DNS of a real-node cluster: CoreDNS (built by
//! `tools/control-plane/build.sh` with only the plugins a cluster's own
//! names need) as a Deployment in `kube-system` behind the `kube-dns`
//! Service, as kubeadm sets it up, and the kubelet pointing pods at it.
//!
//! Unlike kubeadm's it listens on unprivileged ports (the Service maps 53
//! to them), so its pod runs at Pod Security `restricted`; and it answers
//! for `cluster.local` and reverse lookups only: a node's network namespace
//! has no upstream resolver to forward other names to.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use crate::{Error, ImageSpec};

/// The `kube-dns` Service's address, in the static band of
/// `SERVICE_CLUSTER_IP_RANGE` (its first 16 addresses, which dynamic
/// allocation takes only once the rest is full; the Service is made first).
pub(crate) const CLUSTER_DNS_IP: &str = "10.0.0.10";
/// The cluster's DNS domain.
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";

const NAMESPACE: &str = "kube-system";
const NAME: &str = "coredns";
/// The pinned version (`tools/control-plane/versions.env`), which names the
/// binary the build script makes.
const VERSIONS_ENV: &str = include_str!("../../../tools/control-plane/versions.env");
/// Where CoreDNS listens in its pod (unprivileged; the Service maps 53).
const DNS_PORT: u16 = 1053;
const HEALTH_PORT: u16 = 8080;
const READY_PORT: u16 = 8181;
/// How long CoreDNS may take to be Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn versions_env(key: &str) -> Result<&'static str, Error> {
    VERSIONS_ENV
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
        .ok_or_else(|| Error::Fixture(format!("tools/control-plane/versions.env has no {key}")))
}

/// `COREDNS_VERSION` from `versions.env`.
pub(crate) fn version() -> Result<&'static str, Error> {
    versions_env("COREDNS_VERSION")
}

/// The binary's name in the control plane's binary directory, as
/// `build.sh` names it: the version and the build recipe (its plugin list).
pub(crate) fn binary_name() -> Result<String, Error> {
    Ok(format!(
        "coredns-{}-r{}",
        version()?,
        versions_env("COREDNS_RECIPE")?
    ))
}

fn image_name() -> Result<String, Error> {
    Ok(format!("fluidos.test/coredns:{}", version()?))
}

/// CoreDNS's image: the static binary alone, run as `nonroot`.
pub(crate) fn image(binary: &std::path::Path) -> Result<ImageSpec, Error> {
    Ok(ImageSpec::new(image_name()?)
        .executable("coredns", binary)
        .entrypoint(&["/coredns"])
        .user("65532:65532"))
}

/// The kubelet's configuration lines that point pods at the cluster DNS.
pub(crate) fn kubelet_config_lines() -> String {
    format!("clusterDNS:\n- {CLUSTER_DNS_IP}\nclusterDomain: {CLUSTER_DOMAIN}\n")
}

fn corefile() -> String {
    format!(
        ".:{DNS_PORT} {{
    errors
    health :{HEALTH_PORT}
    ready :{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
    }}
    cache 30
    loadbalance
    reload
}}
"
    )
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Fixture(format!("CoreDNS objects: {e}")))
}

fn deployment() -> Result<Deployment, Error> {
    from_json(json!({
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "serviceAccountName": NAME,
                    "dnsPolicy": "Default",
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {
                        "runAsNonRoot": true,
                        "seccompProfile": {"type": "RuntimeDefault"}
                    },
                    "containers": [{
                        "name": "coredns",
                        "image": image_name()?,
                        "imagePullPolicy": "Never",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "ports": [
                            {"name": "dns", "containerPort": DNS_PORT, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"}
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": READY_PORT}, "periodSeconds": 1},
                        // As upstream's: a busy machine must not restart it.
                        "livenessProbe": {
                            "httpGet": {"path": "/health", "port": HEALTH_PORT},
                            "initialDelaySeconds": 60,
                            "timeoutSeconds": 5,
                            "periodSeconds": 10,
                            "failureThreshold": 5
                        },
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"memory": "128Mi"}
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": true
                        },
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": true}]
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": NAME}}]
                }
            }
        }
    }))
}

/// Creates CoreDNS's account, grants, Corefile, Deployment and the
/// `kube-dns` Service, and waits (watching) until it rolled out (Ready:
/// its `ready` plugin answers).
pub(crate) async fn deploy(client: &kube::Client) -> Result<(), Error> {
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create(&pp, &from_json(json!({"metadata": {"name": NAME}}))?)
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .create(
            &pp,
            &from_json(json!({
                "metadata": {"name": "system:coredns"},
                "rules": [
                    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
                ]
            }))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(
            &pp,
            &from_json(json!({
                "metadata": {"name": "system:coredns"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
            }))?,
        )
        .await?;
    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .create(
            &pp,
            &from_json(json!({"metadata": {"name": NAME}, "data": {"Corefile": corefile()}}))?,
        )
        .await?;
    Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(
            &pp,
            &from_json(json!({
                "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "clusterIP": CLUSTER_DNS_IP,
                    "selector": {"k8s-app": "kube-dns"},
                    "ports": [
                        {"name": "dns", "port": 53, "targetPort": DNS_PORT, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": 53, "targetPort": DNS_PORT, "protocol": "TCP"}
                    ]
                }
            }))?,
        )
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    deployments.create(&pp, &deployment()?).await?;
    tokio::time::timeout(
        READY_TIMEOUT,
        await_condition(deployments, NAME, conditions::is_deployment_completed()),
    )
    .await
    .map_err(|_| Error::Timeout {
        what: "CoreDNS (kube-system/coredns) Ready".into(),
        waited: READY_TIMEOUT,
        last_error: "not rolled out".into(),
        log_tail: String::new(),
    })??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_env_pins_a_version_and_a_recipe() {
        let v = version().unwrap();
        assert!(v.starts_with('v'), "{v}");
        assert!(
            binary_name()
                .unwrap()
                .starts_with(&format!("coredns-{v}-r"))
        );
        assert!(image_name().unwrap().ends_with(v));
    }

    #[test]
    fn the_address_is_in_the_static_band_of_the_service_range() {
        let (base, bits) = crate::SERVICE_CLUSTER_IP_RANGE.split_once('/').unwrap();
        let base: std::net::Ipv4Addr = base.parse().unwrap();
        let size = 1u32 << (32 - bits.parse::<u32>().unwrap());
        let band = (size / 16).clamp(16, 256);
        let ip: std::net::Ipv4Addr = CLUSTER_DNS_IP.parse().unwrap();
        let offset = u32::from(ip) - u32::from(base);
        assert!(
            offset > 1 && offset < band,
            "{ip} is not in the first {band} of the range"
        );
    }

    #[test]
    fn the_objects_are_well_formed() {
        let d = deployment().unwrap();
        let pod = d.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.dns_policy.as_deref(), Some("Default"));
        let container = &pod.containers[0];
        let ports: Vec<i32> = container
            .ports
            .iter()
            .flatten()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [i32::from(DNS_PORT); 2]);
        assert!(corefile().starts_with(&format!(".:{DNS_PORT} ")));
        let probe_port = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref()
                .and_then(|p| p.http_get.as_ref())
                .map(|h| h.port.clone())
        };
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int;
        assert_eq!(
            probe_port(&container.readiness_probe),
            Some(Int(i32::from(READY_PORT)))
        );
        assert_eq!(
            probe_port(&container.liveness_probe),
            Some(Int(i32::from(HEALTH_PORT)))
        );
        assert!(corefile().contains(&format!("ready :{READY_PORT}")));
        assert!(corefile().contains(&format!("health :{HEALTH_PORT}")));
        assert!(kubelet_config_lines().contains(CLUSTER_DNS_IP));
    }
}

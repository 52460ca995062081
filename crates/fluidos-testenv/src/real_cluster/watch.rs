//! Waiting for what another controller makes, by watching it.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::wait::await_condition;

use crate::{ControlPlane, Error};

/// Waits (watching, never polling) for the first object of `api` that
/// matches `labels` and `accept`, for at most `timeout`; else
/// [`Error::Timeout`] naming `what`.
pub async fn first_matching<K>(
    api: Api<K>,
    labels: Option<&str>,
    what: &str,
    timeout: Duration,
    mut accept: impl FnMut(&K) -> bool,
) -> Result<K, Error>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let mut config = kube::runtime::watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let mut last_error = String::from("none matched");
    let mut matching = Box::pin(
        kube::runtime::watcher(api, config)
            .default_backoff()
            .applied_objects()
            .filter_map(|object| {
                let object = match object {
                    Ok(o) => Some(o).filter(|o| accept(o)),
                    Err(e) => {
                        last_error = e.to_string();
                        None
                    }
                };
                async move { object }
            }),
    );
    let found = tokio::time::timeout(timeout, matching.next()).await;
    drop(matching);
    match found {
        Ok(Some(object)) => Ok(object),
        _ => Err(Error::Timeout {
            what: what.to_owned(),
            waited: timeout,
            last_error,
            log_tail: String::new(),
        }),
    }
}

/// Whether a pod runs.
pub fn running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        == Some("Running")
}

/// Creates namespace `name` on the consumer and offloads it as `liqoctl
/// offload namespace` does (remote pods only); watches the
/// NamespaceOffloading until Ready and returns the provider's namespace.
pub async fn offload_namespace(consumer: &ControlPlane, name: &str) -> Result<String, Error> {
    let waited = Duration::from_secs(120);
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .map_err(|e| Error::Fixture(e.to_string()))?;
    Api::<Namespace>::all(consumer.client())
        .create(&PostParams::default(), &namespace)
        .await?;
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceOffloading");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "namespaceoffloadings");
    let offloadings: Api<DynamicObject> = Api::namespaced_with(consumer.client(), name, &resource);
    offloadings
        .create(
            &PostParams::default(),
            &crate::liqo::namespace_offloading(name),
        )
        .await?;
    let ready = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data.pointer("/status/offloadingPhase"))
            .and_then(|p| p.as_str())
            == Some("Ready")
    };
    let offloading =
        tokio::time::timeout(waited, await_condition(offloadings, "offloading", ready))
            .await
            .map_err(|_| Error::Timeout {
                what: format!("NamespaceOffloading {name}/offloading Ready"),
                waited,
                last_error: String::new(),
                log_tail: String::new(),
            })??;
    offloading
        .as_ref()
        .and_then(|o| o.data.pointer("/status/remoteNamespaceName"))
        .and_then(|n| n.as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            Error::RealNode(format!(
                "NamespaceOffloading {name}/offloading names no remote namespace"
            ))
        })
}

/// Waits (watching) for the first virtual node Liqo makes on `consumer` to
/// be Ready, for at most `timeout`.
pub async fn ready_virtual_node(
    consumer: &ControlPlane,
    timeout: Duration,
) -> Result<k8s_openapi::api::core::v1::Node, Error> {
    use k8s_openapi::api::core::v1::Node;
    first_matching(
        Api::<Node>::all(consumer.client()),
        Some("liqo.io/type=virtual-node"),
        "a Ready virtual node on the consumer",
        timeout,
        |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        },
    )
    .await
}

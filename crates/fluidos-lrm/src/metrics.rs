//! Node usage from `metrics.k8s.io/v1beta1` NodeMetrics, when that API is served.
//!
//! Upstream requires metrics-server and fails every reconcile without it;
//! here its absence (or any failure) only means "requests only".

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, Client, Resource};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// `metrics.k8s.io/v1beta1` NodeMetrics (only what is read).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct NodeMetrics {
    /// Standard metadata; the name is the node's.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Measured usage, e.g. `cpu`, `memory`.
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

impl Resource for NodeMetrics {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "NodeMetrics".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "metrics.k8s.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1beta1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How long a "served or not" answer is trusted.
const DISCOVERY_TTL: Duration = Duration::from_secs(60);

/// Caches whether the metrics API is served and reads node usage.
pub struct MetricsProbe {
    client: Client,
    served: Mutex<Option<(Instant, bool)>>,
}

impl MetricsProbe {
    /// A probe asking through `client`.
    pub fn new(client: Client) -> Self {
        MetricsProbe {
            client,
            served: Mutex::new(None),
        }
    }

    /// True when `metrics.k8s.io/v1beta1` serves `nodes` (checked at most once a minute).
    pub async fn served(&self) -> bool {
        let mut cached = self.served.lock().await;
        if let Some((at, served)) = *cached
            && at.elapsed() < DISCOVERY_TTL
        {
            return served;
        }
        let served = match self
            .client
            .list_api_group_resources("metrics.k8s.io/v1beta1")
            .await
        {
            Ok(list) => list.resources.iter().any(|r| r.name == "nodes"),
            Err(e) => {
                tracing::debug!(error = %e, "metrics.k8s.io not served; using requests only");
                false
            }
        };
        if cached.is_none_or(|(_, before)| before != served) {
            tracing::info!(served, "metrics.k8s.io NodeMetrics availability");
        }
        *cached = Some((Instant::now(), served));
        served
    }

    /// The usage of `node`, or `None` when unknown (API absent, node not scraped yet, error).
    pub async fn usage(&self, node: &str) -> Option<BTreeMap<String, Quantity>> {
        if !self.served().await {
            return None;
        }
        match Api::<NodeMetrics>::all(self.client.clone())
            .get_opt(node)
            .await
        {
            Ok(m) => m.map(|m| m.usage),
            Err(e) => {
                tracing::debug!(node, error = %e, "reading NodeMetrics failed; using requests only");
                None
            }
        }
    }
}

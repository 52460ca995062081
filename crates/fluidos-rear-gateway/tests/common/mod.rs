//! Shared helpers of the integration tests: a real control plane, flavors
//! built with fluidos-api types, gateways served on loopback ports.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use fluidos_api::common::{
    HostingPolicy, Location, NodeIdentity, NodeIdentityAdditionalInfo, Price,
};
use fluidos_api::flavor::{
    FlavorSpec, FlavorType, Gpu, K8Slice, K8SliceCharacteristics, Partitionability, ServiceFlavor,
};
use fluidos_api::ledger::q;
use fluidos_api::{Flavor, Transaction};
use fluidos_rear_gateway::{Gateway, GatewayConfig};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const PROVIDER_LIQO: &str = "fluidos-provider-1";

/// Logs of the gateway under test (`RUST_LOG`, default `warn`).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

pub async fn control_plane() -> ControlPlane {
    init_tracing();
    ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .expect("control plane")
}

pub async fn namespace(client: &kube::Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

pub fn provider_identity() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "4ahrqttvng".into(),
        ip: "127.0.0.1:30001".into(),
        additional_information: None,
    }
}

/// A gateway configuration for these tests, whose clients speak plain
/// HTTP as the Go node's do: plain-HTTP sales are on (the Go-compatibility
/// setting; `tests/tls_buyers.rs` covers TLS and the setting off).
pub fn config(cp: &ControlPlane, ns: &str) -> GatewayConfig {
    let mut cfg = GatewayConfig::new(ns, provider_identity(), cp.server_url());
    cfg.plain_http_sales = fluidos_rear_gateway::PlainHttpSales::All;
    cfg.liqo_cluster_id = Some(PROVIDER_LIQO.into());
    cfg.api_server_ca_pem = cp
        .kubeconfig()
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.as_ref())
        .map(|b64| {
            use base64::Engine;
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap(),
            )
            .unwrap()
        });
    cfg
}

/// A served gateway; dropping it (or `stop`) stops serving and its tasks.
pub struct Served {
    pub base: String,
    task: JoinHandle<()>,
}

impl Served {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Simulates a crash: the serving task and the gateway's background tasks die.
    pub fn stop(self) {
        self.task.abort();
    }

    /// Stops serving and waits until the gateway is gone (before the control plane stops).
    pub async fn shutdown(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(client: &kube::Client, cfg: GatewayConfig) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let gw = Gateway::start(client.clone(), cfg);
    gw.wait_ready(Duration::from_secs(20)).await.unwrap();
    let task = tokio::spawn(async move {
        gw.serve(listener, std::future::pending()).await.unwrap();
    });
    Served { base, task }
}

pub fn partition(cpu: (&str, &str), memory: (&str, &str), pods: (&str, &str)) -> Partitionability {
    Partitionability {
        cpu_min: q(cpu.0),
        cpu_step: q(cpu.1),
        memory_min: q(memory.0),
        memory_step: q(memory.1),
        pods_min: q(pods.0),
        pods_step: q(pods.1),
        ..Default::default()
    }
}

pub fn k8slice(
    arch: &str,
    cpu: &str,
    memory: &str,
    pods: &str,
    storage: Option<&str>,
    gpu: Option<&str>,
    p: Partitionability,
) -> K8Slice {
    let mut k = K8Slice {
        characteristics: K8SliceCharacteristics {
            architecture: arch.into(),
            cpu: q(cpu),
            memory: q(memory),
            pods: q(pods),
            gpu: gpu.map(|g| Gpu {
                model: "nvidia-t4".into(),
                cores: q(g),
                memory: q("16Gi"),
            }),
            storage: storage.map(q),
        },
        ..Default::default()
    };
    k.policies.partitionability = p;
    k
}

pub fn spec(flavor_type: FlavorType, available: bool) -> FlavorSpec {
    FlavorSpec {
        provider_id: provider_identity().node_id,
        flavor_type,
        owner: provider_identity(),
        price: Price {
            amount: "10".into(),
            currency: "EUR".into(),
            period: "hourly".into(),
        },
        availability: available,
        network_property_type: Some("networkProperty".into()),
        location: Some(Location {
            latitude: Some("45.07".into()),
            longitude: Some("7.68".into()),
            country: Some("Italy".into()),
            city: Some("Turin".into()),
            additional_notes: None,
        }),
    }
}

pub fn service(
    category: &str,
    tags: &[&str],
    policies: &[HostingPolicy],
    template: serde_json::Value,
) -> ServiceFlavor {
    ServiceFlavor {
        name: format!("{category}-service"),
        description: format!("a {category}"),
        category: category.into(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        hosting_policies: policies.to_vec(),
        configuration_template: template,
    }
}

pub async fn create_flavor(
    client: &kube::Client,
    ns: &str,
    name: &str,
    spec: FlavorSpec,
) -> Flavor {
    let f = Flavor {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec,
        status: None,
    };
    Api::<Flavor>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &f)
        .await
        .unwrap()
}

/// A wire buyer identity with a Liqo ID and (as the Go consumer sends) a kubeconfig.
pub fn buyer(id: &str) -> serde_json::Value {
    serde_json::json!({
        "ID": id, "IP": "127.0.0.1:30000", "domain": "fluidos.eu",
        "additionalInformation": {"liqoID": format!("liqo-{id}"), "kubeconfig": "a2NmZw=="}
    })
}

pub fn k8s_reserve(
    flavor: &str,
    buyer_id: &str,
    cpu: &str,
    memory: &str,
    pods: &str,
) -> serde_json::Value {
    serde_json::json!({
        "flavorID": flavor,
        "buyerID": buyer(buyer_id),
        "configuration": {"type": "k8slice", "data": {"cpu": cpu, "memory": memory, "pods": pods}}
    })
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(16)
        .build()
        .unwrap()
}

pub async fn post(c: &reqwest::Client, url: &str, body: &serde_json::Value) -> (u16, String) {
    let r = c.post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

pub async fn get(c: &reqwest::Client, url: &str) -> (u16, String) {
    let r = c.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

pub async fn transactions(client: &kube::Client, ns: &str) -> Vec<Transaction> {
    Api::<Transaction>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
}

pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !f().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A JSON value whose objects keep their key order, to check wire key order.
#[derive(Debug, Clone)]
pub enum Ordered {
    Object(Vec<(String, Ordered)>),
    Array(Vec<Ordered>),
    Scalar(serde_json::Value),
}

impl Ordered {
    pub fn parse(s: &str) -> Ordered {
        serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
    }

    pub fn keys(&self) -> Vec<&str> {
        match self {
            Ordered::Object(m) => m.iter().map(|(k, _)| k.as_str()).collect(),
            other => panic!("not an object: {other:?}"),
        }
    }

    pub fn get(&self, key: &str) -> &Ordered {
        match self {
            Ordered::Object(m) => m
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no key {key} in {:?}", self.keys())),
            other => panic!("not an object: {other:?}"),
        }
    }

    pub fn items(&self) -> &[Ordered] {
        match self {
            Ordered::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Ordered>()? {
                    out.push((k, v));
                }
                Ok(Ordered::Object(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = s.next_element::<Ordered>()? {
                    out.push(v);
                }
                Ok(Ordered::Array(out))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(serde_json::Value::Null))
            }
        }
        d.deserialize_any(V)
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

pub fn buyer_identity(id: &str) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: id.into(),
        ip: "127.0.0.1:30000".into(),
        additional_information: Some(NodeIdentityAdditionalInfo {
            liqo_id: Some(format!("liqo-{id}")),
        }),
    }
}

/// What the real RBAC authorizer answers for `user` doing `verb` on
/// `group`/`resource` in `namespace` (cluster scope when `None`).
pub async fn allowed(
    client: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!(
                    "system:serviceaccounts:{}",
                    user.split(':').nth(2).unwrap_or_default()
                ),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// A client acting with the peering kubeconfig the provider keeps for
/// `contract` in its credentials Secret (written just after the sale's
/// answer: waited for).
pub async fn peer_client(client: &kube::Client, ns: &str, contract: &str) -> kube::Client {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let name = format!("peering-credentials-{contract}");
    wait_until(
        &format!("the credentials Secret of {contract}"),
        Duration::from_secs(10),
        || async { secrets.get_opt(&name).await.unwrap().is_some() },
    )
    .await;
    let secret = secrets.get(&name).await.unwrap();
    let yaml = &secret.data.unwrap()["kubeconfig"].0;
    let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(yaml).unwrap()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// The consumer's own REAR client, without retries, with `key` (TLS client
/// certificate) or none.
pub fn rear_client(
    key: Option<&std::sync::Arc<fluidos_rear_identity::NodeKey>>,
) -> fluidos_rear_client::RearClient {
    let config = fluidos_rear_client::ClientConfig {
        retries: 0,
        ..fluidos_rear_client::ClientConfig::default()
    };
    match key {
        Some(k) => fluidos_rear_client::RearClient::with_key(config, k.clone()).unwrap(),
        None => fluidos_rear_client::RearClient::new(config).unwrap(),
    }
}

/// The status and text of a refusal; panics on a success.
pub fn refusal_of(
    r: Result<impl std::fmt::Debug, fluidos_rear_client::RearError>,
) -> (u16, String) {
    match r {
        Err(e) => (e.status().unwrap_or(0), e.to_string()),
        Ok(v) => panic!("expected a refusal, got {v:?}"),
    }
}

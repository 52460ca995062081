//! Service allocation without Liqo on a real control plane (with
//! kube-controller-manager, kube-scheduler and kwok, so Deployments really
//! become available): the provider instantiates the upstream database
//! blueprint for a Contract, the REAR route serves its endpoints and
//! credentials to the buyer only, the buyer's controller writes them into a
//! Secret, a forbidden kind ends in Error with nothing created, and deleting
//! the Allocations leaves nothing behind. The upstream message-queue
//! blueprint likewise, ended by the provider (the buyer removes its
//! credentials); a configuration failing the schema ends in Error.
//!
//! Provider (namespace `fluidos`) and buyer (namespace `buyer`) share one
//! control plane: each controller only handles contracts where its node is
//! the seller (provider) or the buyer (consumer).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, NodeIdentity, ServiceBlueprint};
use fluidos_controller::{Metrics, ReadinessGate};
use fluidos_rear_client::{ClientConfig, ProviderAddress, RearClient};
use fluidos_rear_gateway::{Gateway, GatewayConfig, PlainHttpSales};
use fluidos_service_allocation::{consumer, provider};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const PROVIDER: &str = "fluidos";
const BUYER: &str = "buyer";

fn identity(node: &str, ip: &str) -> NodeIdentity {
    serde_json::from_value(json!({"domain": "fluidos.eu", "nodeID": node, "ip": ip})).unwrap()
}

/// A database contract (the upstream category's schema and default configuration).
fn contract(name: &str, ns: &str, blueprint: &str, gateway: &str) -> Contract {
    contract_for(
        name,
        ns,
        blueprint,
        gateway,
        &json!({"name": "db", "description": "d", "category": "database", "tags": ["database", "mysql"],
            "hostingPolicies": ["Provider", "Consumer"],
            "configurationTemplate": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "properties": {"username": {"type": "string"}, "password": {"type": "string"}, "database": {"type": "string"}},
                "required": ["username", "password", "database"]}}),
        &json!({"username": "admin", "password": "admin", "database": "mydb"}),
    )
}

/// A message-queue contract as the upstream Solver buys it (§5.2 of the
/// reference: schema and the Solver's default configuration).
fn mq_contract(name: &str, ns: &str, gateway: &str) -> Contract {
    contract_for(
        name,
        ns,
        "mq-rabbitmq",
        gateway,
        &json!({"name": "mq", "description": "d", "category": "message-queue",
            "tags": ["message-queue", "rabbitmq", "mqtt"], "hostingPolicies": ["Consumer"],
            "configurationTemplate": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "properties": {"username": {"type": "string"}, "password": {"type": "string"}},
                "required": ["username", "password"]}}),
        &json!({"username": "admin", "password": "adminpassword"}),
    )
}

fn contract_for(
    name: &str,
    ns: &str,
    blueprint: &str,
    gateway: &str,
    type_data: &serde_json::Value,
    configuration: &serde_json::Value,
) -> Contract {
    serde_json::from_value(json!({
        "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "flavor": {"metadata": {"name": format!("flavor-{name}"),
                    "labels": {"nodecore.fluidos.eu/service-blueprint": blueprint}},
                "spec": {
                "flavorType": {"typeIdentifier": "Service", "typeData": type_data},
                "owner": {"domain": "fluidos.eu", "nodeID": "provider-node", "ip": gateway},
                "providerID": "provider-node",
                "price": {"amount": "", "currency": "", "period": ""},
                "availability": true, "networkPropertyType": "networkProperty",
                "location": {"latitude": "", "longitude": "", "country": "", "city": "", "additionalNotes": ""}}},
            "transactionID": format!("tx-{name}"),
            "configuration": {"type": "Service", "data": {"configurationData": configuration}},
            "buyer": {"domain": "fluidos.eu", "nodeID": "buyer-node", "ip": "127.0.0.1:1"},
            "buyerClusterID": "buyer-cluster",
            "seller": {"domain": "fluidos.eu", "nodeID": "provider-node", "ip": gateway},
            "peeringTargetCredentials": {"liqoID": "provider-cluster", "kubeconfig": ""}}}))
    .unwrap()
}

fn allocation(name: &str, ns: &str, contract: &str, provider_side: bool) -> Allocation {
    let labels = if provider_side {
        json!({"fluidos.eu/rear-side": "provider"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "Allocation",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"forwarding": false, "contract": {"name": contract, "namespace": ns}}}))
    .unwrap()
}

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        let last = match f().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        assert!(
            start.elapsed() < timeout,
            "{what}: not within {timeout:?}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn state(api: &Api<Allocation>, name: &str) -> Result<(AllocationState, String), String> {
    let a = api.get(name).await.map_err(|e| e.to_string())?;
    let s = a.status.unwrap_or_default();
    match s.status {
        Some(st) => Ok((st, s.message.unwrap_or_default())),
        None => Err("no status yet".into()),
    }
}

// One scenario, start to teardown, on one control plane (starting one is the slow part).
#[expect(clippy::too_many_lines)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_service_end_to_end_without_liqo() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference not found (the upstream database blueprint)",
        );
        return;
    };
    let text = std::fs::read_to_string(reference.join("fluidos-samples/service-blueprint-db.yaml"))
        .unwrap();
    let mut blueprint: ServiceBlueprint = serde_yaml::from_str(&text).unwrap();
    blueprint.metadata.namespace = Some(PROVIDER.into());
    let text = std::fs::read_to_string(reference.join("fluidos-samples/service-blueprint-mq.yaml"))
        .unwrap();
    let mut mq_blueprint: ServiceBlueprint = serde_yaml::from_str(&text).unwrap();
    mq_blueprint.metadata.namespace = Some(PROVIDER.into());

    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: true,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    for ns in [PROVIDER, BUYER] {
        fixtures::namespace(&cp, ns).await.unwrap();
    }
    fixtures::worker_node(&cp, "kwok-node-0", "8", "16Gi")
        .await
        .unwrap();
    Api::<ServiceBlueprint>::namespaced(client.clone(), PROVIDER)
        .create(&PostParams::default(), &blueprint)
        .await
        .unwrap();
    let bad: ServiceBlueprint = serde_json::from_value(json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "ServiceBlueprint",
        "metadata": {"name": "bad", "namespace": PROVIDER},
        "spec": {"name": "bad", "description": "d", "category": "database", "tags": [], "hostingPolicies": ["Provider"],
            "templates": [
                {"name": "fine", "serviceData": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}},
                {"name": "forbidden", "serviceData": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"}}}]}}))
    .unwrap();
    let broken: ServiceBlueprint = serde_json::from_value(json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "ServiceBlueprint",
        "metadata": {"name": "broken", "namespace": PROVIDER},
        "spec": {"name": "broken", "description": "d", "category": "database", "tags": [], "hostingPolicies": ["Provider"],
            "templates": [{"name": "config", "serviceData": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c"}, "data": {"k": "{{ .password | nosuchfunction }}"}}}]}}))
    .unwrap();
    // Its Deployment can never be scheduled: no node matches.
    let mut stuck = blueprint.clone();
    stuck.metadata.name = Some("stuck".into());
    for t in &mut stuck.spec.templates {
        if t.service_data["kind"] == "Deployment" {
            t.service_data["spec"]["template"]["spec"]["nodeSelector"] =
                json!({"no-such-label": "x"});
        }
    }
    // Valid to the render, refused by the API server (an object name that
    // is not a DNS name), after a first object was applied.
    let refused: ServiceBlueprint = serde_json::from_value(json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "ServiceBlueprint",
        "metadata": {"name": "refused", "namespace": PROVIDER},
        "spec": {"name": "refused", "description": "d", "category": "database", "tags": [], "hostingPolicies": ["Provider"],
            "templates": [
                {"name": "fine", "serviceData": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}},
                {"name": "bad-name", "serviceData": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_DNS_Name"}}}]}}))
    .unwrap();
    for bp in [&bad, &broken, &stuck, &mq_blueprint, &refused] {
        Api::<ServiceBlueprint>::namespaced(client.clone(), PROVIDER)
            .create(&PostParams::default(), bp)
            .await
            .unwrap();
    }

    // The provider: gateway + service allocation controller.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gateway_addr = listener.local_addr().unwrap().to_string();
    // A provider without a known key: plain HTTP.
    let gateway_peer = ProviderAddress::plain(gateway_addr.clone());
    let seller = identity("provider-node", &gateway_addr);
    // The buyer calls without a key (plain HTTP, as towards a Go node):
    // the provider lets plain-HTTP peers buy and fetch their services.
    let mut gateway_cfg = GatewayConfig::new(PROVIDER, seller.clone(), cp.server_url());
    gateway_cfg.plain_http_sales = PlainHttpSales::All;
    let gateway = Gateway::start(client.clone(), gateway_cfg);
    gateway.wait_ready(Duration::from_secs(30)).await.unwrap();
    tokio::spawn(gateway.serve(listener, futures::future::pending()));
    let metrics = Metrics::new();
    let mut cfg = provider::ProviderConfig::new(PROVIDER, seller);
    cfg.teardown_timeout = Duration::from_secs(60);
    let ready = ReadinessGate::new();
    tokio::spawn({
        let (client, metrics, ready) = (client.clone(), metrics.clone(), ready.clone());
        async move { provider::run(client, cfg, &metrics, ready, futures::future::pending()).await }
    });
    ready.wait().await;
    // The buyer's controller.
    let ready = ReadinessGate::new();
    tokio::spawn({
        let (client, metrics, ready) = (client.clone(), metrics.clone(), ready.clone());
        let cfg = consumer::ConsumerConfig {
            namespace: BUYER.into(),
            identity: identity("buyer-node", "127.0.0.1:1"),
            rear: ClientConfig::default(),
            node_key: None,
            offloading: None,
        };
        async move { consumer::run(client, cfg, &metrics, ready, futures::future::pending()).await }
    });
    ready.wait().await;

    let started = Instant::now();
    let c = "contract-db";
    for ns in [PROVIDER, BUYER] {
        Api::<Contract>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &contract(c, ns, "db-mysql", &gateway_addr),
            )
            .await
            .unwrap();
    }
    // As if an earlier run had crashed halfway: the namespace (applied first,
    // so labelled and annotated as this Allocation's) and one object exist
    // already, with stale content. Everything is adopted, not refused.
    let crashed: Namespace = serde_json::from_value(provider::machine::namespace_object(
        c,
        &format!("{PROVIDER}/alloc-db"),
        "Deployment/db",
    ))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &crashed)
        .await
        .unwrap();
    let stale: Secret = serde_json::from_value(json!({"metadata": {"name": "db-credentials"},
        "stringData": {"password": "stale", "leftover": "x"}}))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), c)
        .create(&PostParams::default(), &stale)
        .await
        .unwrap();
    let provider_allocs: Api<Allocation> = Api::namespaced(client.clone(), PROVIDER);
    let buyer_allocs: Api<Allocation> = Api::namespaced(client.clone(), BUYER);
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-db", PROVIDER, c, true),
        )
        .await
        .unwrap();
    buyer_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-db", BUYER, c, false),
        )
        .await
        .unwrap();

    // Provider: Active once the Deployment is available on the kwok node.
    eventually(
        "provider Allocation Active",
        Duration::from_secs(120),
        || async {
            match state(&provider_allocs, "alloc-db").await? {
                (AllocationState::Active, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let adopted = Api::<Secret>::namespaced(client.clone(), c)
        .get("db-credentials")
        .await
        .unwrap();
    assert_eq!(
        adopted.data.unwrap()["password"].0,
        b"admin",
        "the crashed run's object was adopted and brought up to date"
    );
    let svc: k8s_openapi::api::core::v1::Service = Api::namespaced(client.clone(), c)
        .get("db-service")
        .await
        .unwrap();
    assert_eq!(
        svc.spec.as_ref().unwrap().type_.as_deref(),
        Some("NodePort")
    );
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        Api::namespaced(client.clone(), c).get("db").await.unwrap();
    assert_eq!(
        deployment.metadata.labels.unwrap()["reservation.fluidos.eu/contract"],
        c
    );
    assert!(
        deployment
            .metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|m| m.manager.as_deref() == Some("fluidos-service-allocation")),
        "applied server-side by our field manager"
    );

    // Buyer: the Secret with the Go node's keys, and an Active Allocation pointing at it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), BUYER);
    let secret = eventually("buyer Secret", Duration::from_secs(60), || async {
        secrets
            .get_opt("credentials-contract-db")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no Secret yet".to_owned())
    })
    .await;
    println!("Allocation to buyer Secret: {:.1?}", started.elapsed());
    let data: std::collections::BTreeMap<String, String> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["database", "endpoints", "password", "username"]);
    assert_eq!(data["username"], "admin");
    assert_eq!(data["database"], "mydb");
    let node_port = svc.spec.unwrap().ports.unwrap()[0].node_port.unwrap();
    assert_eq!(data["endpoints"], format!("127.0.0.1:{node_port}"));
    eventually(
        "buyer Allocation Active",
        Duration::from_secs(30),
        || async {
            let a = buyer_allocs
                .get("alloc-db")
                .await
                .map_err(|e| e.to_string())?;
            let st = a.status.unwrap_or_default();
            match (st.status, st.resource_ref) {
                (Some(AllocationState::Active), Some(r))
                    if r.name.as_deref() == Some("credentials-contract-db") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // The route answers the buyer only.
    let rear = RearClient::new(ClientConfig::default()).unwrap();
    let tx = format!("tx-{c}");
    let ok = rear
        .service_access(&gateway_peer, c, "buyer-node", &tx)
        .await
        .unwrap();
    assert_eq!(ok.credentials["password"], "admin");
    // Another buyer, the buyer without the transaction ID and an unknown
    // contract all get the same 404.
    let unknown = rear
        .service_access(&gateway_peer, "nope", "buyer-node", &tx)
        .await
        .unwrap_err();
    assert_eq!(unknown.status(), Some(404), "{unknown}");
    for (buyer, tx) in [
        ("intruder", tx.as_str()),
        ("buyer-node", "tx-guess"),
        ("buyer-node", ""),
    ] {
        let refused = rear
            .service_access(&gateway_peer, c, buyer, tx)
            .await
            .unwrap_err();
        assert_eq!(refused.status(), Some(404), "{refused}");
        assert_eq!(
            refused.to_string().replace(c, "nope"),
            unknown.to_string(),
            "same answer as an unknown contract"
        );
    }

    // The Deployment deleted by hand (drift): the provider makes it again
    // from the same render (same password) and is Active again, not Active
    // with nothing running.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), c);
    let old_uid = deployments.get("db").await.unwrap().metadata.uid;
    deployments
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the deleted Deployment made again, Active",
        Duration::from_secs(90),
        || async {
            let d = deployments
                .get_opt("db")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "Deployment not made again yet".to_owned())?;
            if d.metadata.uid == old_uid {
                return Err("the old Deployment is still there".into());
            }
            match state(&provider_allocs, "alloc-db").await? {
                (AllocationState::Active, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let again = Api::<Secret>::namespaced(client.clone(), c)
        .get("db-credentials")
        .await
        .unwrap();
    assert_eq!(again.data.unwrap()["password"].0, b"admin");

    // The upstream message-queue blueprint, bought with the Solver's default
    // configuration: its hosting policy (Consumer) needs Liqo offloading, so
    // it runs on the provider and a warning says so; the buyer gets the
    // category's keys (no `database`), both ports of the endpoint Service.
    // The provider's Allocation is created before its Contract (the gateway
    // creates both at once, so either may come first): it is taken up when
    // the Contract appears.
    let mq_c = "contract-mq";
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-mq", PROVIDER, mq_c, true),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for ns in [PROVIDER, BUYER] {
        Api::<Contract>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &mq_contract(mq_c, ns, &gateway_addr),
            )
            .await
            .unwrap();
    }
    buyer_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-mq", BUYER, mq_c, false),
        )
        .await
        .unwrap();
    let mq_secret = eventually("buyer MQ Secret", Duration::from_secs(90), || async {
        secrets
            .get_opt("credentials-contract-mq")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no Secret yet".to_owned())
    })
    .await;
    let mq_data: std::collections::BTreeMap<String, String> = mq_secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect();
    let keys: Vec<&str> = mq_data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["endpoints", "password", "username"]);
    assert_eq!(mq_data["username"], "admin");
    assert_eq!(mq_data["password"], "adminpassword");
    let mq_svc: k8s_openapi::api::core::v1::Service = Api::namespaced(client.clone(), mq_c)
        .get("mq-service")
        .await
        .unwrap();
    let node_ports: Vec<String> = mq_svc
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.node_port.unwrap()))
        .collect();
    assert_eq!(mq_data["endpoints"], node_ports.join(","));
    for (side, allocs) in [("provider", &provider_allocs), ("buyer", &buyer_allocs)] {
        eventually(
            &format!("{side} MQ Allocation Active"),
            Duration::from_secs(60),
            || async {
                match state(allocs, "alloc-mq").await? {
                    (AllocationState::Active, _) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), PROVIDER);
    let warned = eventually(
        "hosting policy warning",
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("HostingPolicyNotHonoured")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("alloc-mq")
                })
                .ok_or_else(|| "no HostingPolicyNotHonoured event yet".to_owned())
        },
    )
    .await;
    assert!(
        warned.note.unwrap_or_default().contains("Consumer"),
        "the warning names the policy"
    );

    // The provider ends the Contract (as its expiry does, deleting it): the
    // buyer, asking again, is told 404, removes the dead credentials and is
    // Released. An Active service is asked about every 30 s; a change to
    // the Allocation makes the buyer ask now.
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .delete(mq_c, &DeleteParams::default())
        .await
        .unwrap();
    buyer_allocs
        .patch(
            "alloc-mq",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"test.fluidos.eu/ask": "now"}}})),
        )
        .await
        .unwrap();
    let released = eventually(
        "buyer MQ Allocation Released",
        Duration::from_secs(60),
        || async {
            match state(&buyer_allocs, "alloc-mq").await? {
                (AllocationState::Released, m) => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        released.starts_with("The provider ended the service of Contract contract-mq"),
        "{released}"
    );
    assert!(
        secrets
            .get_opt("credentials-contract-mq")
            .await
            .unwrap()
            .is_none(),
        "the dead credentials are removed"
    );

    // A configuration that fails the flavor's schema: Error naming the
    // missing key, nothing created, the buyer told 410.
    let invalid_c = "contract-invalid";
    let mut invalid = contract(invalid_c, PROVIDER, "db-mysql", &gateway_addr);
    invalid.spec.configuration = serde_json::from_value(json!({"type": "Service",
        "data": {"configurationData": {"username": "admin", "password": "admin"}}}))
    .unwrap();
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .create(&PostParams::default(), &invalid)
        .await
        .unwrap();
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-invalid", PROVIDER, invalid_c, true),
        )
        .await
        .unwrap();
    let message = eventually(
        "invalid Allocation in Error",
        Duration::from_secs(30),
        || async {
            match state(&provider_allocs, "alloc-invalid").await? {
                (AllocationState::Error, m) => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        message.contains("configurationTemplate") && message.contains("database"),
        "{message}"
    );
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(invalid_c)
            .await
            .unwrap()
            .is_none(),
        "nothing created for a configuration failing the schema"
    );
    let refused = rear
        .service_access(
            &gateway_peer,
            invalid_c,
            "buyer-node",
            &format!("tx-{invalid_c}"),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(410), "{refused}");

    // A forbidden kind: Error with the reason, nothing created.
    let bad_c = "contract-bad";
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .create(
            &PostParams::default(),
            &contract(bad_c, PROVIDER, "bad", &gateway_addr),
        )
        .await
        .unwrap();
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-bad", PROVIDER, bad_c, true),
        )
        .await
        .unwrap();
    let (_, message) = eventually(
        "bad Allocation in Error",
        Duration::from_secs(30),
        || async {
            match state(&provider_allocs, "alloc-bad").await? {
                (AllocationState::Error, m) => Ok(((), m)),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(message.contains("ClusterRole"), "{message}");
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(bad_c)
            .await
            .unwrap()
            .is_none(),
        "nothing created for a refused blueprint"
    );
    let refused = rear
        .service_access(&gateway_peer, bad_c, "buyer-node", &format!("tx-{bad_c}"))
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(410), "{refused}");

    // A template error: Error naming the template, nothing created.
    let broken_c = "contract-broken";
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .create(
            &PostParams::default(),
            &contract(broken_c, PROVIDER, "broken", &gateway_addr),
        )
        .await
        .unwrap();
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-broken", PROVIDER, broken_c, true),
        )
        .await
        .unwrap();
    let message = eventually(
        "broken Allocation in Error",
        Duration::from_secs(30),
        || async {
            match state(&provider_allocs, "alloc-broken").await? {
                (AllocationState::Error, m) => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        message.contains("config") && message.contains("nosuchfunction"),
        "{message}"
    );
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(broken_c)
            .await
            .unwrap()
            .is_none()
    );

    // An object the API server refuses for good: Error naming it, and the
    // namespace with what was applied before it removed (not retried forever).
    let refused_c = "contract-refused";
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .create(
            &PostParams::default(),
            &contract(refused_c, PROVIDER, "refused", &gateway_addr),
        )
        .await
        .unwrap();
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-refused", PROVIDER, refused_c, true),
        )
        .await
        .unwrap();
    let message = eventually(
        "refused Allocation in Error",
        Duration::from_secs(30),
        || async {
            match state(&provider_allocs, "alloc-refused").await? {
                (AllocationState::Error, m) => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        message.starts_with(
            "Error when applying the service's objects: the API server refused ConfigMap Not_A_DNS_Name"
        ),
        "{message}"
    );
    eventually(
        "the refused service's namespace removed",
        Duration::from_secs(60),
        || async {
            match Api::<Namespace>::all(client.clone())
                .get_opt(refused_c)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(ns) if ns.metadata.deletion_timestamp.is_some() => Ok(()),
                Some(_) => Err("the namespace is still there".to_owned()),
            }
        },
    )
    .await;
    provider_allocs
        .delete("alloc-refused", &DeleteParams::default())
        .await
        .unwrap();

    // A workload that never becomes available: not Active, and says why; the buyer is told 409.
    let stuck_c = "contract-stuck";
    Api::<Contract>::namespaced(client.clone(), PROVIDER)
        .create(
            &PostParams::default(),
            &contract(stuck_c, PROVIDER, "stuck", &gateway_addr),
        )
        .await
        .unwrap();
    provider_allocs
        .create(
            &PostParams::default(),
            &allocation("alloc-stuck", PROVIDER, stuck_c, true),
        )
        .await
        .unwrap();
    let message = eventually(
        "stuck Allocation degraded",
        Duration::from_secs(60),
        || async {
            match state(&provider_allocs, "alloc-stuck").await? {
                (AllocationState::ResourceCreation, m) if m.contains("Unschedulable") => Ok(m),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        message.starts_with("Service degraded: pod db-"),
        "{message}"
    );
    let waiting = rear
        .service_access(
            &gateway_peer,
            stuck_c,
            "buyer-node",
            &format!("tx-{stuck_c}"),
        )
        .await
        .unwrap_err();
    assert_eq!(waiting.status(), Some(409), "{waiting}");
    provider_allocs
        .delete("alloc-stuck", &DeleteParams::default())
        .await
        .unwrap();

    // Teardown: nothing left on either side.
    for (allocs, name) in [
        (&buyer_allocs, "alloc-mq"),
        (&provider_allocs, "alloc-mq"),
        (&provider_allocs, "alloc-invalid"),
    ] {
        allocs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    buyer_allocs
        .delete("alloc-db", &DeleteParams::default())
        .await
        .unwrap();
    provider_allocs
        .delete("alloc-db", &DeleteParams::default())
        .await
        .unwrap();
    eventually("teardown", Duration::from_secs(90), || async {
        let secret = secrets
            .get_opt("credentials-contract-db")
            .await
            .map_err(|e| e.to_string())?;
        let ns = Api::<Namespace>::all(client.clone())
            .get_opt(c)
            .await
            .map_err(|e| e.to_string())?;
        let allocs = (
            provider_allocs
                .get_opt("alloc-db")
                .await
                .map_err(|e| e.to_string())?,
            buyer_allocs
                .get_opt("alloc-db")
                .await
                .map_err(|e| e.to_string())?,
        );
        let stuck = (
            Api::<Namespace>::all(client.clone())
                .get_opt("contract-stuck")
                .await
                .map_err(|e| e.to_string())?,
            provider_allocs
                .get_opt("alloc-stuck")
                .await
                .map_err(|e| e.to_string())?,
        );
        if stuck.0.is_some() || stuck.1.is_some() {
            return Err("the stuck service is not gone yet".into());
        }
        let mq = (
            Api::<Namespace>::all(client.clone())
                .get_opt(mq_c)
                .await
                .map_err(|e| e.to_string())?,
            secrets
                .get_opt("credentials-contract-mq")
                .await
                .map_err(|e| e.to_string())?,
            provider_allocs
                .get_opt("alloc-mq")
                .await
                .map_err(|e| e.to_string())?,
            buyer_allocs
                .get_opt("alloc-mq")
                .await
                .map_err(|e| e.to_string())?,
            provider_allocs
                .get_opt("alloc-invalid")
                .await
                .map_err(|e| e.to_string())?,
        );
        if mq.0.is_some() || mq.1.is_some() || mq.2.is_some() || mq.3.is_some() || mq.4.is_some() {
            return Err("the message queue or the invalid Allocation is not gone yet".into());
        }
        match (secret, ns, allocs) {
            (None, None, (None, None)) => Ok(()),
            (s, n, a) => Err(format!(
                "left: secret {}, namespace {:?}, allocations {}/{}",
                s.is_some(),
                n.and_then(|n| n.status).and_then(|s| s.phase),
                a.0.is_some(),
                a.1.is_some()
            )),
        }
    })
    .await;
}

//! A replay of what an unmodified Go consumer (fluidos-node.md §2.10,
//! §3.3–3.5, §5.3) sends to our gateway, byte for byte where it matters, and of
//! the objects it then writes into its own cluster from our answers.
//!
//! The requests are written on a raw TCP socket as Go's `net/http` client
//! writes them for the Go consumer: `Connection: close` (it sets
//! `req.Close`), selector queries unescaped (`filter[cpu][range][min]=1`,
//! brackets included), `{}` as a K8Slice purchase body, `liqoCredentials` only
//! for a Service, and the buyer's kubeconfig in `buyerID`.
//!
//! The Go consumer's own cluster is a second API server with the **upstream**
//! CRDs (`../shared/reference/fluidos-crds`, not ours), where the objects the
//! Go consumer creates from our answers are created with its names:
//! `peeringcandidate-<flavorID>`, the Transaction named after the transaction
//! ID, the Contract named after `contractID`, `allocation-<flavorID>-<hash4>`.
//! An answer of ours that the Go consumer could not store (a name the API
//! server refuses, a field of the wrong type for its schema) fails here. The
//! wire-to-CR conversion used is ours (`fluidos_api::rear`), which follows the
//! Go consumer's (§2.5); the upstream schema is what judges its output.
//!
//! Flows, all under the Go chart's default flavor policies (cpu step 1000m,
//! memory step 100Mi, minimums 0, §6):
//! - the upstream sample Solver (`solver.yaml`): list with its selector,
//!   reserve the partition `ForgeK8SliceConfiguration` derives from it, buy;
//! - a second purchase of the same flavor by the same Go consumer: a new
//!   transaction and a new contract name (the Go provider's deterministic
//!   contract name makes its second sale fail with 500; ours must not, and
//!   the flavor keeps its ID so the Go consumer's names stay stable);
//! - a Solver without filters: the typed route with an empty query
//!   (`/api/v2/flavors/k8slice?`), a reservation without a configuration
//!   (the whole flavor), bought;
//! - the upstream Service Solver (`solver-service.yaml`): the service route
//!   with category and tag, the category's default configuration, a purchase
//!   with `liqoCredentials`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "the replay reads top to bottom as the Go consumer's sequence of requests"
)]

mod common;

use std::time::Duration;

use common::*;
use fluidos_api::common::HostingPolicy;
use fluidos_api::flavor::FlavorType;
use fluidos_api::naming::{allocation_name, peering_candidate_name};
use fluidos_api::rear::{WireContract, WireFlavor, WireTransaction};
use fluidos_api::reservation::TransactionSpec;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The provider's node namespace, also the Go consumer's (`fluidos`).
const NS: &str = "fluidos";
/// The Go consumer's node ID and Liqo cluster ID.
const GO_CONSUMER: &str = "rd5ks7x9yz";
const GO_CONSUMER_LIQO: &str = "fluidos-consumer-1";
/// A base64 kubeconfig, as the Go consumer sends its own.
const GO_CONSUMER_KUBECONFIG: &str = "YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnCg==";

/// A status and body read from one `Connection: close` exchange.
struct GoAnswer {
    status: u16,
    body: String,
}

/// One request as Go's `http.Client{}` sends it for the Go consumer's
/// `client.go`: HTTP/1.1, `Connection: close`, the target written as given
/// (Go does not escape the selector query), `Content-Type` on POST only.
async fn go_request(base: &str, method: &str, target: &str, body: Option<&str>) -> GoAnswer {
    let addr = base.trim_start_matches("http://");
    let mut head =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: Go-http-client/1.1\r\n");
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("Connection: close\r\n");
    if body.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str("Accept-Encoding: gzip\r\n\r\n");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    if let Some(b) = body {
        stream.write_all(b.as_bytes()).await.unwrap();
    }
    let mut raw = Vec::new();
    // The server must close after answering: Go's client waits for it.
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the gateway closes a Connection: close exchange")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line: {head}"));
    let lower = head.to_ascii_lowercase();
    assert!(
        !lower.contains("content-encoding"),
        "Go's transparent gzip needs no encoding we do not send: {head}"
    );
    let body = if lower.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    GoAnswer { status, body }
}

/// Decodes an HTTP/1.1 chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
}

/// The Go consumer's ReserveRequest, keys in Go's struct order.
fn reserve_body(flavor_id: &str, configuration: Option<&str>) -> String {
    let buyer = format!(
        r#"{{"ID":"{GO_CONSUMER}","IP":"127.0.0.1:30000","domain":"fluidos.eu","additionalInformation":{{"liqoID":"{GO_CONSUMER_LIQO}","kubeconfig":"{GO_CONSUMER_KUBECONFIG}"}}}}"#
    );
    match configuration {
        Some(c) => format!(r#"{{"flavorID":"{flavor_id}","buyerID":{buyer},"configuration":{c}}}"#),
        None => format!(r#"{{"flavorID":"{flavor_id}","buyerID":{buyer}}}"#),
    }
}

/// RESERVE then PURCHASE (with `purchase_body`) as the Go consumer sends
/// them; both must answer 200 with a non-empty transaction ID (an empty one
/// makes the Go consumer retry).
async fn go_buys(
    base: &str,
    flavor_id: &str,
    configuration: Option<&str>,
    purchase_body: &str,
) -> (WireTransaction, WireContract) {
    let r = go_request(
        base,
        "POST",
        "/api/v2/reservations",
        Some(&reserve_body(flavor_id, configuration)),
    )
    .await;
    assert_eq!(r.status, 200, "reserving {flavor_id}: {}", r.body);
    let tx: WireTransaction = serde_json::from_str(&r.body).unwrap();
    assert!(!tx.transaction_id.is_empty(), "{}", r.body);
    let p = go_request(
        base,
        "POST",
        &format!("/api/v2/transactions/{}/purchase", tx.transaction_id),
        Some(purchase_body),
    )
    .await;
    assert_eq!(p.status, 200, "buying {flavor_id}: {}", p.body);
    let contract: WireContract = serde_json::from_str(&p.body).unwrap();
    assert_eq!(contract.transaction_id, tx.transaction_id);
    assert_eq!(contract.flavor.flavor_id, flavor_id);
    (tx, contract)
}

/// The upstream CRDs' resources the Go consumer writes.
fn upstream(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

/// Creates what the Go consumer creates in its cluster; the upstream schema
/// judges it.
async fn go_consumer_creates(
    client: &kube::Client,
    resource: &ApiResource,
    name: &str,
    spec: serde_json::Value,
) {
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, resource)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("the Go consumer cannot store {} {name}: {e}", resource.kind));
}

/// The Go consumer's bookkeeping of one sale in its own cluster, from our
/// Transaction and Contract answers (§3.4, §3.5).
async fn go_consumer_records_sale(
    go: &kube::Client,
    tx: &WireTransaction,
    contract: &WireContract,
) {
    // Transaction CR named after the ID; the Go consumer leaves clusterID empty.
    let (configuration, _) = match &tx.configuration {
        Some(c) => {
            let (crd, data) = c.to_crd().unwrap();
            (Some(crd), Some(data))
        }
        None => (None, None),
    };
    let spec = TransactionSpec {
        flavor_id: tx.flavor_id.clone(),
        buyer: tx.buyer.to_crd(),
        cluster_id: String::new(),
        configuration,
        expiration_time: Some(tx.expiration_time.clone()),
    };
    go_consumer_creates(
        go,
        &upstream("reservation.fluidos.eu", "Transaction", "transactions"),
        &tx.transaction_id,
        serde_json::to_value(&spec).unwrap(),
    )
    .await;
    // Contract CR named after contractID (an AlreadyExists would be taken as
    // this sale by the Go consumer: names must differ between sales).
    go_consumer_creates(
        go,
        &upstream("reservation.fluidos.eu", "Contract", "contracts"),
        &contract.contract_id,
        serde_json::to_value(contract.to_crd(NS).unwrap()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_consumers_requests_and_names_work_against_our_gateway() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (the upstream CRDs and samples come from there)",
        );
        return;
    };
    let cp = control_plane().await;
    let go_cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![reference.join("fluidos-crds")],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    let go = go_cp.client();
    namespace(&client, NS).await;
    namespace(&go, NS).await;

    // Flavors as our LRM publishes them under the Go chart's defaults.
    let go_chart = partition(("0", "1000m"), ("0", "100Mi"), ("0", "0"));
    let sample_fit = k8slice("amd64", "4", "8Gi", "110", None, None, go_chart.clone());
    create_flavor(
        &client,
        NS,
        "fluidos.eu-k8slice-3f9a",
        spec(FlavorType::k8slice(&sample_fit), true),
    )
    .await;
    let wide = k8slice("amd64", "8", "16Gi", "200", None, None, go_chart.clone());
    create_flavor(
        &client,
        NS,
        "fluidos.eu-k8slice-77aa",
        spec(FlavorType::k8slice(&wide), true),
    )
    .await;
    let small = k8slice("arm64", "2", "2Gi", "20", None, None, go_chart);
    create_flavor(
        &client,
        NS,
        "fluidos.eu-k8slice-5b5b",
        spec(FlavorType::k8slice(&small), true),
    )
    .await;
    // The database category's template (§5.2).
    let db = service(
        "database",
        &["mysql", "sql"],
        &[HostingPolicy::Provider],
        serde_json::json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"username": {"type": "string"}, "password": {"type": "string"}, "database": {"type": "string"}},
            "required": ["username", "password", "database"]}),
    );
    create_flavor(
        &client,
        NS,
        "fluidos.eu-service-db01",
        spec(FlavorType::service(&db), true),
    )
    .await;
    let gw = serve(&client, config(&cp, NS)).await;
    let base = gw.base.clone();
    let pc = upstream(
        "advertisement.fluidos.eu",
        "PeeringCandidate",
        "peeringcandidates",
    );
    let allocation = upstream("nodecore.fluidos.eu", "Allocation", "allocations");

    // ---- The upstream sample Solver: its selector as Go's encoder writes it
    // (struct order, canonical quantities, no escaping).
    let sample: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(reference.join("fluidos-samples/solver.yaml")).unwrap(),
    )
    .unwrap();
    let filters = &sample["spec"]["selector"]["filters"];
    assert_eq!(filters["cpuFilter"]["data"]["min"], "1000m");
    let query = "filter[architecture][match]=amd64&filter[cpu][range][min]=1\
                 &filter[memory][range][min]=1Gi&filter[memory][range][max]=100Gi\
                 &filter[pods][match]=110";
    let listed = go_request(
        &base,
        "GET",
        &format!("/api/v2/flavors/k8slice?{query}"),
        None,
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let flavors: Vec<WireFlavor> = serde_json::from_str(&listed.body).unwrap();
    let ids: Vec<&str> = flavors.iter().map(|f| f.flavor_id.as_str()).collect();
    assert_eq!(
        ids,
        ["fluidos.eu-k8slice-3f9a"],
        "only the flavor the sample selects"
    );
    // Discovery: one PeeringCandidate per flavor, named after the flavor ID.
    for f in &flavors {
        go_consumer_creates(
            &go,
            &pc,
            &peering_candidate_name(&f.flavor_id),
            serde_json::json!({
                "flavor": serde_json::to_value(f.to_embedded(NS).unwrap()).unwrap(),
                "available": true,
                "interestedSolverIDs": ["solver-sample"],
            }),
        )
        .await;
    }
    // ForgeK8SliceConfiguration: Range -> min, Match -> value.
    let sample_cfg = r#"{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"110"}}"#;
    let (tx, first) = go_buys(&base, "fluidos.eu-k8slice-3f9a", Some(sample_cfg), "{}").await;
    assert_eq!(tx.buyer.id, GO_CONSUMER);
    assert_eq!(first.buyer_cluster_id, GO_CONSUMER_LIQO);
    assert_eq!(first.peering_target_credentials.cluster_id, PROVIDER_LIQO);
    assert!(!first.peering_target_credentials.kubeconfig.is_empty());
    go_consumer_records_sale(&go, &tx, &first).await;
    go_consumer_creates(
        &go,
        &allocation,
        &allocation_name(&first.flavor.flavor_id),
        serde_json::json!({"forwarding": false, "contract": {"name": first.contract_id, "namespace": NS}}),
    )
    .await;

    // ---- A second purchase of the same flavor by the same Go consumer (a
    // smaller partition so that it fits what is left): a new transaction, a
    // new contract name, the same flavor ID.
    let listed = go_request(
        &base,
        "GET",
        "/api/v2/flavors/k8slice?filter[architecture][match]=amd64&filter[cpu][range][min]=1",
        None,
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let again: Vec<WireFlavor> = serde_json::from_str(&listed.body).unwrap();
    assert!(
        again
            .iter()
            .any(|f| f.flavor_id == "fluidos.eu-k8slice-77aa"),
        "{}",
        listed.body
    );
    let second_cfg = r#"{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"10"}}"#;
    let mut contracts = vec![first.contract_id.clone()];
    for _ in 0..2 {
        let (tx, c) = go_buys(&base, "fluidos.eu-k8slice-77aa", Some(second_cfg), "{}").await;
        assert!(
            !contracts.contains(&c.contract_id),
            "a new sale gets a new contract name: {contracts:?} {}",
            c.contract_id
        );
        contracts.push(c.contract_id.clone());
        go_consumer_records_sale(&go, &tx, &c).await;
    }
    // The flavor is still listed under its ID, with what is left.
    wait_until(
        "the twice-sold flavor listed with its remainder",
        Duration::from_secs(5),
        || {
            let base = base.clone();
            async move {
                let l = go_request(
                    &base,
                    "GET",
                    "/api/v2/flavors/k8slice?filter[architecture][match]=amd64",
                    None,
                )
                .await;
                let fl: Vec<WireFlavor> = serde_json::from_str(&l.body).unwrap_or_default();
                fl.iter().any(|f| {
                    f.flavor_id == "fluidos.eu-k8slice-77aa"
                        && serde_json::to_value(&f.type_.data).unwrap()["charateristics"]["cpu"]
                            == "6"
                })
            }
        },
    )
    .await;

    // ---- A Solver without filters: the typed route with an empty query,
    // then a reservation without a configuration (the whole flavor).
    let listed = go_request(&base, "GET", "/api/v2/flavors/k8slice?", None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let all: Vec<WireFlavor> = serde_json::from_str(&listed.body).unwrap();
    assert!(
        all.iter().any(|f| f.flavor_id == "fluidos.eu-k8slice-5b5b"),
        "{}",
        listed.body
    );
    assert!(
        all.iter()
            .all(|f| f.type_.name == "k8slice" && f.availability),
        "{}",
        listed.body
    );
    let (whole_tx, whole) = go_buys(&base, "fluidos.eu-k8slice-5b5b", None, "{}").await;
    assert!(whole_tx.configuration.is_none(), "{whole_tx:?}");
    assert!(whole.configuration.is_none(), "the whole flavor: {whole:?}");
    go_consumer_records_sale(&go, &whole_tx, &whole).await;
    wait_until(
        "the wholly sold flavor to leave the list",
        Duration::from_secs(5),
        || {
            let base = base.clone();
            async move {
                let l = go_request(&base, "GET", "/api/v2/flavors", None).await;
                !l.body.contains("fluidos.eu-k8slice-5b5b")
            }
        },
    )
    .await;

    // ---- The upstream Service Solver: category and tag on the service
    // route, the category's default configuration, liqoCredentials sent.
    let sample: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(reference.join("fluidos-samples/solver-service.yaml")).unwrap(),
    )
    .unwrap();
    let f = &sample["spec"]["selector"]["filters"];
    let target = format!(
        "/api/v2/flavors/service?filter[category][match]={}&filter[tags][match]={}",
        f["categoryFilter"]["data"]["value"].as_str().unwrap(),
        f["tagsFilter"]["data"]["value"].as_str().unwrap()
    );
    let listed = go_request(&base, "GET", &target, None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let services: Vec<WireFlavor> = serde_json::from_str(&listed.body).unwrap();
    assert_eq!(services.len(), 1, "{}", listed.body);
    go_consumer_creates(
        &go,
        &pc,
        &peering_candidate_name(&services[0].flavor_id),
        serde_json::json!({
            "flavor": serde_json::to_value(services[0].to_embedded(NS).unwrap()).unwrap(),
            "available": true,
            "interestedSolverIDs": ["solver-sample-service"],
        }),
    )
    .await;
    let db_default = r#"{"type":"service","data":{"configurationData":{"username":"admin","password":"admin","database":"mydb"}}}"#;
    let creds = format!(
        r#"{{"liqoCredentials":{{"clusterID":"{GO_CONSUMER_LIQO}","kubeconfig":"{GO_CONSUMER_KUBECONFIG}"}}}}"#
    );
    let (svc_tx, svc) = go_buys(&base, &services[0].flavor_id, Some(db_default), &creds).await;
    assert_eq!(svc.flavor.type_.name, "service");
    go_consumer_records_sale(&go, &svc_tx, &svc).await;
    go_consumer_creates(
        &go,
        &allocation,
        &allocation_name(&svc.flavor.flavor_id),
        serde_json::json!({"forwarding": false, "contract": {"name": svc.contract_id, "namespace": NS}}),
    )
    .await;

    // ---- An error is a status the Go consumer reads as one (non-200), never
    // a dropped connection: an unknown transaction, a bad body.
    let p = go_request(
        &base,
        "POST",
        "/api/v2/transactions/0123456789abcdef0123456789abcdef-1/purchase",
        Some("{}"),
    )
    .await;
    assert_eq!(p.status, 404, "{}", p.body);
    let r = go_request(&base, "POST", "/api/v2/reservations", Some("{nope")).await;
    assert_eq!(r.status, 400, "{}", r.body);

    gw.shutdown().await;
    go_cp.stop().await;
    cp.stop().await;
}

/// With plain-HTTP sales off (the node's default), an unmodified Go
/// consumer still lists, and its RESERVE gets a 403 whose JSON `error` says
/// what the provider's operator sets to let it buy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_consumer_is_told_how_to_be_allowed_when_plain_sales_are_off() {
    let cp = control_plane().await;
    let client = cp.client();
    namespace(&client, NS).await;
    let go_chart = partition(("0", "1000m"), ("0", "100Mi"), ("0", "0"));
    let k = k8slice("amd64", "4", "8Gi", "110", None, None, go_chart);
    create_flavor(
        &client,
        NS,
        "fluidos.eu-k8slice-3f9a",
        spec(FlavorType::k8slice(&k), true),
    )
    .await;
    let mut cfg = config(&cp, NS);
    cfg.plain_http_sales = fluidos_rear_gateway::PlainHttpSales::Off;
    let served = serve(&client, cfg).await;

    let listed = go_request(&served.base, "GET", "/api/v2/flavors", None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let refused = go_request(
        &served.base,
        "POST",
        "/api/v2/reservations",
        Some(&reserve_body(
            "fluidos.eu-k8slice-3f9a",
            Some(r#"{"type":"k8slice","data":{"cpu":"1","memory":"1Gi","pods":"1"}}"#),
        )),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let error: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    let text = error["error"].as_str().unwrap();
    assert!(
        text.contains("--rear-plain-http-sales=all") && text.contains("127.0.0.1"),
        "{text}"
    );
    served.shutdown().await;
}

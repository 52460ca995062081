//! Every REAR route on a real kube-apiserver over loopback HTTP: golden wire
//! keys (fluidos-node.md §2.5), filters, RESERVE/PURCHASE, and the 4xx answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use base64::Engine;
use common::*;
use fluidos_api::common::HostingPolicy;
use fluidos_api::flavor::FlavorType;
use fluidos_api::ledger::LedgerState;
use fluidos_api::{Allocation, Contract, Flavor};
use fluidos_rear_gateway::contract_name;
use kube::Api;

const NS: &str = "rear-routes";

const FLAVOR_KEYS: [&str; 9] = [
    "flavorID",
    "providerID",
    "type",
    "networkPropertyType",
    "timestamp",
    "location",
    "price",
    "owner",
    "availability",
];

fn ids(body: &str) -> Vec<String> {
    Ordered::parse(body)
        .items()
        .iter()
        .map(|f| match f.get("flavorID") {
            Ordered::Scalar(serde_json::Value::String(s)) => s.clone(),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

async fn setup(client: &kube::Client) {
    namespace(client, NS).await;
    let p = partition(("1", "1"), ("1Gi", "1Gi"), ("1", "1"));
    let a = k8slice(
        "amd64",
        "4",
        "8Gi",
        "110",
        Some("100Gi"),
        Some("1"),
        p.clone(),
    );
    create_flavor(
        client,
        NS,
        "fluidos.eu-k8slice-aaaa",
        spec(FlavorType::k8slice(&a), true),
    )
    .await;
    let b = k8slice("arm64", "2", "4Gi", "50", None, None, p.clone());
    create_flavor(
        client,
        NS,
        "fluidos.eu-k8slice-bbbb",
        spec(FlavorType::k8slice(&b), true),
    )
    .await;
    create_flavor(
        client,
        NS,
        "fluidos.eu-k8slice-0ff0",
        spec(FlavorType::k8slice(&b), false),
    )
    .await;
    let db = service(
        "database",
        &["mysql", "sql"],
        &[HostingPolicy::Provider, HostingPolicy::Consumer],
        serde_json::json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"database": {"type": "string"}, "replicas": {"type": "integer", "minimum": 1}},
            "additionalProperties": false}),
    );
    create_flavor(
        client,
        NS,
        "fluidos.eu-service-db01",
        spec(FlavorType::service(&db), true),
    )
    .await;
    let mq = service(
        "message-queue",
        &["rabbitmq"],
        &[HostingPolicy::Provider],
        serde_json::json!({"type": "object", "required": ["vhost"], "properties": {"vhost": {"type": "string"}}}),
    );
    create_flavor(
        client,
        NS,
        "fluidos.eu-service-mq01",
        spec(FlavorType::service(&mq), true),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rear_routes_on_a_real_api_server() {
    let cp = control_plane().await;
    let client = cp.client();
    setup(&client).await;
    namespace(&client, "rear-empty").await;
    let gw = serve(&client, config(&cp, NS)).await;
    let empty = serve(&client, config(&cp, "rear-empty")).await;
    let c = http();

    // ---- Listing: 204 vs [] exactly as upstream.
    assert_eq!(get(&c, &empty.url("/api/v2/flavors")).await.0, 204);
    assert_eq!(
        get(&c, &empty.url("/api/v2/flavors/k8slice")).await,
        (200, "[]".into())
    );

    let (status, body) = get(&c, &gw.url("/api/v2/flavors")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        ids(&body),
        [
            "fluidos.eu-k8slice-aaaa",
            "fluidos.eu-k8slice-bbbb",
            "fluidos.eu-service-db01",
            "fluidos.eu-service-mq01"
        ],
        "the unavailable flavor is not listed"
    );
    let list = Ordered::parse(&body);
    let a = &list.items()[0];
    assert_eq!(a.keys(), FLAVOR_KEYS);
    assert_eq!(a.get("type").keys(), ["name", "data"]);
    assert_eq!(
        a.get("type").get("data").keys(),
        ["charateristics", "properties", "policies"]
    );
    assert_eq!(
        a.get("type").get("data").get("charateristics").keys(),
        ["architecture", "cpu", "memory", "pods", "gpu", "storage"]
    );
    assert_eq!(
        a.get("type")
            .get("data")
            .get("policies")
            .get("partitionability")
            .keys(),
        [
            "cpuMin",
            "memoryMin",
            "podsMin",
            "cpuStep",
            "memoryStep",
            "podsStep"
        ]
    );
    assert_eq!(
        a.get("location").keys(),
        ["latitude", "longitude", "altitude", "city"]
    );
    assert_eq!(a.get("price").keys(), ["amount", "currency", "period"]);
    assert_eq!(a.get("owner").keys(), ["ID", "IP", "domain"]);
    let svc = &list.items()[2];
    assert_eq!(svc.keys(), FLAVOR_KEYS);
    assert_eq!(
        svc.get("type").get("data").keys(),
        [
            "name",
            "description",
            "category",
            "tags",
            "hostingPolicies",
            "configurationTemplate"
        ]
    );
    let v = json(&body);
    assert_eq!(v[0]["type"]["name"], "k8slice");
    assert_eq!(v[2]["type"]["name"], "service");
    assert_eq!(v[0]["location"]["altitude"], "Italy");
    assert_eq!(v[0]["type"]["data"]["charateristics"]["cpu"], "4");

    // ---- Typed routes return only their type (upstream bug 1 fixed).
    let (s, body) = get(&c, &gw.url("/api/v2/flavors/k8slice")).await;
    assert_eq!(s, 200);
    assert_eq!(
        ids(&body),
        ["fluidos.eu-k8slice-aaaa", "fluidos.eu-k8slice-bbbb"]
    );
    let (s, body) = get(&c, &gw.url("/api/v2/flavors/service")).await;
    assert_eq!(s, 200);
    assert_eq!(
        ids(&body),
        ["fluidos.eu-service-db01", "fluidos.eu-service-mq01"]
    );

    // ---- Filters.
    let k = |q: &str| gw.url(&format!("/api/v2/flavors/k8slice?{q}"));
    let s = |q: &str| gw.url(&format!("/api/v2/flavors/service?{q}"));
    for (url, expect) in [
        (
            k("filter[architecture][match]=amd64"),
            vec!["fluidos.eu-k8slice-aaaa"],
        ),
        (k("filter[cpu][match]=2"), vec!["fluidos.eu-k8slice-bbbb"]),
        (
            k("filter[cpu][match]=2000m"),
            vec!["fluidos.eu-k8slice-bbbb"],
        ),
        (
            k("filter[memory][range][min]=5Gi"),
            vec!["fluidos.eu-k8slice-aaaa"],
        ),
        (
            k("filter[pods][range][max]=60"),
            vec!["fluidos.eu-k8slice-bbbb"],
        ),
        (
            k("filter[cpu][range][min]=3&filter[cpu][range][max]=4"),
            vec!["fluidos.eu-k8slice-aaaa"],
        ),
        (
            k("[storage][range][min]=10Gi"),
            vec!["fluidos.eu-k8slice-aaaa"],
        ),
        (
            k("filter[storage][range][min]=10Gi"),
            vec!["fluidos.eu-k8slice-aaaa"],
        ),
        (k("filter[gpu][match]=1"), vec!["fluidos.eu-k8slice-aaaa"]),
        (k("filter[architecture][match]=riscv"), vec![]),
        (
            k("filter%5Bcpu%5D%5Brange%5D%5Bmin%5D=1"),
            vec!["fluidos.eu-k8slice-aaaa", "fluidos.eu-k8slice-bbbb"],
        ),
        (
            s("filter[category][match]=database"),
            vec!["fluidos.eu-service-db01"],
        ),
        (
            s("filter[tags][match]=rabbitmq"),
            vec!["fluidos.eu-service-mq01"],
        ),
        (
            s("filter[tags][match]=sql"),
            vec!["fluidos.eu-service-db01"],
        ),
        (
            s("filter[category][match]=database&filter[tags][match]=rabbitmq"),
            vec![],
        ),
    ] {
        let (status, body) = get(&c, &url).await;
        assert_eq!(status, 200, "{url}: {body}");
        assert_eq!(ids(&body), expect, "{url}");
    }
    for (url, field) in [
        (k("filter[cpu][range]=1"), "filter[cpu][range]"),
        (k("filter[disk][match]=1"), "filter[disk][match]"),
        (k("filter[cpu][match]=lots"), "filter[cpu][match]"),
        (
            k("filter[architecture][range][regex]=amd"),
            "filter[architecture][range][regex]",
        ),
        (s("filter[cpu][match]=1"), "filter[cpu][match]"),
    ] {
        let (status, body) = get(&c, &url).await;
        assert_eq!(status, 400, "{url}: {body}");
        assert_eq!(json(&body)["field"], field, "{url}: {body}");
        assert!(
            json(&body)["error"].as_str().unwrap().contains("selector"),
            "{body}"
        );
    }

    // ---- Unregistered routes and methods, the OpenAPI document.
    for path in [
        "/api/v2/flavors/vm",
        "/api/v2/flavors/sensors",
        "/api/v3/flavors",
    ] {
        let (status, body) = get(&c, &gw.url(path)).await;
        assert_eq!(status, 404, "{path}");
        assert!(json(&body)["error"].is_string());
    }
    let r = c.delete(gw.url("/api/v2/flavors")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let (status, body) = get(&c, &gw.url("/api/v2/openapi.json")).await;
    assert_eq!(status, 200);
    let doc = json(&body);
    for p in [
        "/api/v2/flavors",
        "/api/v2/flavors/k8slice",
        "/api/v2/flavors/service",
        "/api/v2/reservations",
        "/api/v2/transactions/{transactionID}/purchase",
    ] {
        assert!(
            doc["paths"][p].is_object(),
            "{p} missing from the OpenAPI document"
        );
    }
    assert!(doc["components"]["schemas"]["Contract"]["properties"]["buyerID"].is_object());

    // ---- RESERVE: client mistakes.
    let reserve = gw.url("/api/v2/reservations");
    let r = c
        .post(&reserve)
        .body("{\"flavorID\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        json(&r.text().await.unwrap())["error"]
            .as_str()
            .unwrap()
            .contains("JSON")
    );
    let bad_cases = [
        (
            serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": {"ID": 7}}),
            400,
            "buyerID.ID",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": {"ID": "x", "IP": "", "domain": ""}}),
            400,
            "buyerID.additionalInformation.liqoID",
        ),
        (k8s_reserve("nope", "b1", "1", "1Gi", "1"), 404, "flavorID"),
        (
            k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "lots", "1Gi", "1"),
            400,
            "configuration.data.cpu",
        ),
        (
            k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "500m", "1Gi", "1"),
            400,
            "configuration.data.cpu",
        ),
        (
            // Below the 1Gi minimum (an off-step 1.5Gi is accepted, as by Go).
            k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "1", "512Mi", "1"),
            400,
            "configuration.data.memory",
        ),
        (
            k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "-1", "1Gi", "1"),
            400,
            "configuration.data.cpu",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": buyer("b1"),
            "configuration": {"type": "k8slice", "data": {"memory": "1Gi", "pods": "1"}}}),
            400,
            "configuration.data",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": buyer("b1"),
            "configuration": {"type": "service", "data": {}}}),
            400,
            "configuration.type",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": buyer("b1"),
            "configuration": {"type": "vm", "data": {}}}),
            400,
            "configuration.type",
        ),
        (
            k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "5", "1Gi", "1"),
            409,
            "",
        ),
        (
            k8s_reserve("fluidos.eu-k8slice-0ff0", "b1", "1", "1Gi", "1"),
            409,
            "",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-service-mq01", "buyerID": buyer("b1")}),
            400,
            "configuration.data.configurationData",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-service-db01", "buyerID": buyer("b1"),
            "configuration": {"type": "service", "data": {"configurationData": {"replicas": 0}}}}),
            400,
            "configuration.data.configurationData.replicas",
        ),
        (
            serde_json::json!({"flavorID": "fluidos.eu-service-db01", "buyerID": buyer("b1"),
            "configuration": {"type": "service", "data": {"hostingPolicy": "Shared"}}}),
            400,
            "configuration.data.hostingPolicy",
        ),
    ];
    for (body, status, field) in bad_cases {
        let (s, answer) = post(&c, &reserve, &body).await;
        assert_eq!(s, status, "{body}: {answer}");
        let v = json(&answer);
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{answer}"
        );
        if !field.is_empty() {
            assert_eq!(v["field"], field, "{body}: {answer}");
        }
    }
    let huge = "x".repeat(2 << 20);
    let r = c.post(&reserve).body(huge).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(
        r.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..]),
        "an unread body leaves the connection unusable: say so"
    );
    assert!(json(&r.text().await.unwrap())["error"].is_string());
    // Only a POST may carry a body of any size: a GET's is cut at 1 KiB,
    // so idle GETs cannot make the gateway hold a MiB each.
    let flavors = reserve.replace("/api/v2/reservations", "/api/v2/flavors");
    let r = c
        .get(&flavors)
        .body("x".repeat(64 << 10))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(
        json(&r.text().await.unwrap())["error"]
            .as_str()
            .is_some_and(|e| e.contains("over 1024 bytes"))
    );

    // ---- RESERVE a partition: golden Transaction, idempotent re-reserve.
    let (s, body) = post(
        &c,
        &reserve,
        &k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "1", "2Gi", "10"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx = Ordered::parse(&body);
    assert_eq!(
        tx.keys(),
        [
            "transactionID",
            "flavorID",
            "configuration",
            "buyer",
            "clusterID",
            "expirationTime"
        ]
    );
    assert_eq!(tx.get("configuration").keys(), ["type", "data"]);
    assert_eq!(
        tx.get("buyer").keys(),
        ["ID", "IP", "domain", "additionalInformation"]
    );
    let txv = json(&body);
    let tx_id = txv["transactionID"].as_str().unwrap().to_owned();
    let (hex, nanos) = tx_id.split_once('-').unwrap();
    assert!(
        hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
        "{tx_id}"
    );
    assert!(nanos.parse::<u128>().is_ok(), "{tx_id}");
    assert_eq!(txv["clusterID"], "liqo-b1");
    assert_eq!(txv["configuration"]["type"], "k8slice");
    assert_eq!(
        txv["buyer"]["additionalInformation"]["kubeconfig"],
        "a2NmZw=="
    );
    let (s, again) = post(
        &c,
        &reserve,
        &k8s_reserve("fluidos.eu-k8slice-aaaa", "b1", "1", "2Gi", "10"),
    )
    .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(
        json(&again)["transactionID"],
        tx_id.as_str(),
        "re-reserve is idempotent"
    );

    // The Transaction is persisted with upstream's spec (clusterID = buyer liqoID).
    let stored = transactions(&client, NS).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].spec.cluster_id, "liqo-b1");
    assert_eq!(stored[0].spec.buyer.node_id, "b1");
    assert_eq!(
        stored[0].spec.configuration.as_ref().unwrap().type_,
        "K8Slice"
    );

    // The list now shows what remains.
    let expect_remaining = |body: &str| {
        let v = json(body);
        let a = v
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["flavorID"] == "fluidos.eu-k8slice-aaaa")
            .cloned()
            .unwrap();
        let ch = &a["type"]["data"]["charateristics"];
        (
            ch["cpu"].as_str().unwrap().to_owned(),
            ch["memory"].as_str().unwrap().to_owned(),
            ch["pods"].as_str().unwrap().to_owned(),
        )
    };
    wait_until(
        "the list to show the hold",
        std::time::Duration::from_secs(5),
        || async {
            let (_, body) = get(&c, &gw.url("/api/v2/flavors/k8slice")).await;
            expect_remaining(&body) == ("3".into(), "6Gi".into(), "100".into())
        },
    )
    .await;
    // Whole-flavor reservation of a partly held flavor is refused.
    let whole = serde_json::json!({"flavorID": "fluidos.eu-k8slice-aaaa", "buyerID": buyer("b9")});
    assert_eq!(post(&c, &reserve, &whole).await.0, 409);

    // Service reservations (upstream bug 4 fixed: no configuration / a hostingPolicy work).
    let svc_plain =
        serde_json::json!({"flavorID": "fluidos.eu-service-db01", "buyerID": buyer("s1")});
    let (s, body) = post(&c, &reserve, &svc_plain).await;
    assert_eq!(s, 200, "{body}");
    let svc_tx = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let svc_hosting = serde_json::json!({"flavorID": "fluidos.eu-service-db01", "buyerID": buyer("s2"),
        "configuration": {"type": "service", "data": {"hostingPolicy": "Provider", "configurationData": {"database": "orders", "replicas": 2}}}});
    let (s, body) = post(&c, &reserve, &svc_hosting).await;
    assert_eq!(s, 200, "{body}");
    // Offered, but needing Liqo offloading this provider does not do: a
    // clear 400 up front, not a service silently run elsewhere.
    let svc_consumer = serde_json::json!({"flavorID": "fluidos.eu-service-db01", "buyerID": buyer("s3"),
        "configuration": {"type": "service", "data": {"hostingPolicy": "Consumer", "configurationData": {"database": "orders", "replicas": 2}}}});
    let (s, body) = post(&c, &reserve, &svc_consumer).await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(json(&body)["field"], "configuration.data.hostingPolicy");

    // ---- PURCHASE.
    let purchase = |id: &str| gw.url(&format!("/api/v2/transactions/{id}/purchase"));
    let r = c.post(purchase(&tx_id)).body("{nope").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let (s, body) = post(
        &c,
        &purchase("0123456789abcdef0123456789abcdef-1"),
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(s, 404, "{body}");
    assert_eq!(json(&body)["field"], "transactionID");
    assert_eq!(
        post(&c, &purchase("..%2F..%2Fsecrets"), &serde_json::json!({}))
            .await
            .0,
        404
    );
    let (s, body) = post(&c, &purchase(&svc_tx), &serde_json::json!({})).await;
    assert_eq!(s, 400, "service purchase needs liqoCredentials: {body}");
    assert_eq!(json(&body)["field"], "liqoCredentials");

    let telemetry = serde_json::json!({"ingressTelemetryEndpoint": {"endpoint": "http://telemetry.example:8080/ingest", "intents": ["intent-a"]}});
    let (s, body) = post(&c, &purchase(&tx_id), &telemetry).await;
    assert_eq!(s, 200, "{body}");
    let contract = Ordered::parse(&body);
    assert_eq!(
        contract.keys(),
        [
            "contractID",
            "transactionID",
            "flavor",
            "buyerID",
            "buyerClusterID",
            "seller",
            "peeringTargetCredentials",
            "expirationTime",
            "extraInformation",
            "configuration",
            "ingressTelemetryEndpoint"
        ]
    );
    // A K8Slice Contract names the ResourceSlice class this provider serves
    // (in Go's own optional map, where a Go consumer keeps and ignores it).
    assert_eq!(
        json(&body)["extraInformation"],
        serde_json::json!({"fluidos.eu/resourceslice-class": "fluidos"})
    );
    assert_eq!(contract.get("flavor").keys(), FLAVOR_KEYS);
    assert_eq!(
        contract.get("peeringTargetCredentials").keys(),
        ["clusterID", "kubeconfig"]
    );
    assert_eq!(
        contract.get("buyerID").keys(),
        ["ID", "IP", "domain", "additionalInformation"]
    );
    assert_eq!(
        contract.get("seller").keys(),
        ["ID", "IP", "domain", "additionalInformation"]
    );
    assert_eq!(
        contract.get("ingressTelemetryEndpoint").keys(),
        ["endpoint", "intents"]
    );
    let cv = json(&body);
    let name = contract_name("fluidos.eu-k8slice-aaaa", &tx_id, 4);
    assert_eq!(cv["contractID"], name.as_str());
    assert_eq!(cv["transactionID"], tx_id.as_str());
    assert_eq!(
        cv["buyerID"]["additionalInformation"],
        serde_json::json!({"liqoID": "liqo-b1"})
    );
    assert_eq!(cv["buyerClusterID"], "liqo-b1");
    assert_eq!(cv["seller"]["ID"], "4ahrqttvng");
    assert_eq!(
        cv["seller"]["additionalInformation"]["liqoID"],
        PROVIDER_LIQO
    );
    assert_eq!(cv["peeringTargetCredentials"]["clusterID"], PROVIDER_LIQO);
    assert_eq!(cv["configuration"]["data"]["cpu"], "1");
    assert_eq!(
        cv["ingressTelemetryEndpoint"]["intents"],
        serde_json::json!(["intent-a"])
    );

    // Purchasing again returns the same contract.
    let (s, body2) = post(&c, &purchase(&tx_id), &serde_json::json!({})).await;
    assert_eq!(s, 200, "{body2}");
    assert_eq!(json(&body2)["contractID"], name.as_str());

    // Contract, Allocation beside it, Transaction gone, ledger entry Sold.
    let contracts: Api<Contract> = Api::namespaced(client.clone(), NS);
    let stored = contracts.get(&name).await.unwrap();
    assert_eq!(stored.spec.buyer_cluster_id, "liqo-b1");
    assert_eq!(stored.spec.flavor.id(), "fluidos.eu-k8slice-aaaa");
    assert!(
        stored
            .spec
            .flavor
            .status
            .as_ref()
            .is_none_or(|s| s.ledger.is_none())
    );
    let allocs = Api::<Allocation>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(allocs.items.len(), 1);
    assert_eq!(
        allocs.items[0]
            .spec
            .contract
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some(name.as_str())
    );
    wait_until(
        "the Transaction to be consumed",
        std::time::Duration::from_secs(5),
        || async {
            transactions(&client, NS)
                .await
                .iter()
                .all(|t| t.metadata.name.as_deref() != Some(tx_id.as_str()))
        },
    )
    .await;
    let flavor = Api::<Flavor>::namespaced(client.clone(), NS)
        .get("fluidos.eu-k8slice-aaaa")
        .await
        .unwrap();
    let ledger = flavor.status.unwrap().ledger.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].state, LedgerState::Sold);
    assert_eq!(ledger[0].contract.as_deref(), Some(name.as_str()));

    // The sold flavor stays purchasable for its remainder.
    let (s, body) = post(
        &c,
        &reserve,
        &k8s_reserve("fluidos.eu-k8slice-aaaa", "b2", "3", "6Gi", "100"),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let tx2 = json(&body)["transactionID"].as_str().unwrap().to_owned();
    let (s, body) = post(&c, &purchase(&tx2), &serde_json::json!({})).await;
    assert_eq!(s, 200, "{body}");
    assert_ne!(json(&body)["contractID"], name.as_str());
    wait_until(
        "the exhausted flavor to leave the list",
        std::time::Duration::from_secs(5),
        || async {
            let (_, body) = get(&c, &gw.url("/api/v2/flavors/k8slice")).await;
            ids(&body) == ["fluidos.eu-k8slice-bbbb"]
        },
    )
    .await;

    // Service purchase with credentials.
    let creds =
        serde_json::json!({"liqoCredentials": {"clusterID": "liqo-s1", "kubeconfig": "a2NmZw=="}});
    let (s, body) = post(&c, &purchase(&svc_tx), &creds).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(json(&body)["flavor"]["type"]["name"], "service");

    // ---- The peering kubeconfig works, with least privilege.
    let kubeconfig = base64::engine::general_purpose::STANDARD
        .decode(
            cv["peeringTargetCredentials"]["kubeconfig"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    let kc =
        kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&kubeconfig).unwrap()).unwrap();
    assert_eq!(kc.current_context.as_deref(), Some(PROVIDER_LIQO));
    let peer_cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let peer = kube::Client::try_from(peer_cfg).unwrap();
    let tenant = format!("liqo-tenant-{}", cv["buyerClusterID"].as_str().unwrap());
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(peer.clone(), &tenant)
        .list(&Default::default())
        .await
        .expect("the peer may read configmaps in its tenant namespace");
    let denied = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(peer.clone(), NS)
        .list(&Default::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(s)) if s.code == 403),
        "nothing in the node's namespace"
    );
    let denied = Api::<Flavor>::namespaced(peer.clone(), NS)
        .list(&Default::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(s)) if s.code == 403),
        "flavors must be forbidden"
    );
    let denied = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(peer, "default")
        .list(&Default::default())
        .await;
    assert!(
        matches!(denied, Err(kube::Error::Api(s)) if s.code == 403),
        "other namespaces must be forbidden"
    );
    gw.shutdown().await;
    empty.shutdown().await;
    cp.stop().await;
}

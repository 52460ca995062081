//! Round trips on real kube-apiservers.
//!
//! 1. Every Kubernetes object in the Go node's samples
//!    (`../shared/reference/fluidos-samples`) applies unchanged against our
//!    generated CRDs and reads back into the Rust types without loss.
//! 2. Objects our types write (Flavors embedded in PeeringCandidates,
//!    Contracts and Discovery status included) are accepted by the *upstream*
//!    CRDs on a second control plane and come back unpruned, which proves
//!    every key we write is one upstream knows.
//!
//! Needs `../shared/reference` (upstream's files, not copied here); skips with a
//! message when it is absent, except in CI, where it fails
//! (`fluidos_testenv::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report
#![allow(
    clippy::too_many_lines,
    reason = "each test is one scenario read top to bottom"
)]

use std::collections::BTreeMap;
use std::path::Path;

use fluidos_api::advertisement::{
    DiscoverySpec, DiscoveryStatus, EmbeddedPeeringCandidate, EmbeddedPeeringCandidateList,
    PeeringCandidateSpec, PeeringCandidateStatus,
};
use fluidos_api::allocation::{AllocationSpec, AllocationStatus};
use fluidos_api::configuration::{ConfigurationData, K8SliceConfiguration, ServiceConfiguration};
use fluidos_api::embedded::EmbeddedFlavor;
use fluidos_api::flavor::{FlavorSpec, FlavorStatus, FlavorType, K8Slice, ServiceFlavor};
use fluidos_api::network::{BrokerSpec, KnownClusterSpec, KnownClusterStatus};
use fluidos_api::reservation::{
    ContractSpec, ContractStatus, ReservationSpec, ReservationStatus, TransactionSpec,
};
use fluidos_api::service_blueprint::{ServiceBlueprintSpec, ServiceTemplate};
use fluidos_api::solver::{Selector, SolverSpec, SolverStatus};
use fluidos_api::*;
use fluidos_testenv::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NS: &str = "fluidos";

async fn ensure_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| v.is_object())
        .collect()
}

async fn api_for(
    client: &kube::Client,
    obj: &Value,
) -> (Api<DynamicObject>, kube::discovery::ApiCapabilities) {
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap().to_owned(),
        ),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
    (Api::namespaced_with(client.clone(), ns, &ar), caps)
}

/// Reads `name` as the typed `K` and checks that re-serializing it gives the
/// stored JSON back (no field lost or added by our types).
async fn typed_read_back<K>(client: &kube::Client, stored: &DynamicObject) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + Serialize
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), NS);
    let typed = api.get(&stored.name_any()).await.unwrap();
    let ours = serde_json::to_value(&typed).unwrap();
    for key in ["spec", "status"] {
        assert_eq!(
            ours.get(key),
            stored.data.get(key),
            "{} {}: {key} changed when read through the Rust type",
            K::kind(&()),
            stored.name_any()
        );
    }
    typed
}

#[tokio::test]
async fn samples_apply_unchanged_and_read_back_without_loss() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent; this test applies the Go node's samples from there",
        );
        return;
    };
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    eprintln!(
        "real kube-apiserver at {} with our generated CRDs",
        cp.server_url()
    );
    let client = cp.client();
    ensure_namespace(&client, NS).await;

    let mut files: Vec<_> = std::fs::read_dir(reference.join("fluidos-samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut applied = 0;
    for file in &files {
        for doc in docs(file) {
            let (api, caps) = api_for(&client, &doc).await;
            let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
            let created = api
                .create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("{} rejected: {e}", file.display()));
            // Status is a subresource: set it the way a controller would.
            if let Some(status) = doc.get("status") {
                assert!(caps.subresources.iter().any(|(r, _)| r.plural == "status"));
                api.patch_status(
                    &created.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await
                .unwrap();
            }
            let stored = api.get(&created.name_any()).await.unwrap();
            // Built-in kinds get server-side defaults; ours must come back as sent.
            let ours = doc["apiVersion"].as_str().unwrap().contains(".fluidos.eu/");
            for key in ["spec", "status"] {
                if let Some(v) = doc.get(key).filter(|_| ours) {
                    assert_eq!(
                        Some(v),
                        stored.data.get(key),
                        "{}: the API server changed {key} (pruned or defaulted)",
                        file.display()
                    );
                }
            }
            match doc["kind"].as_str().unwrap() {
                "Solver" => {
                    let s: Solver = typed_read_back(&client, &stored).await;
                    if let Some(sel) = &s.spec.selector {
                        sel.parse()
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                    }
                }
                "Reservation" => {
                    let r: Reservation = typed_read_back(&client, &stored).await;
                    let cfg = r.spec.configuration.as_ref().unwrap();
                    cfg.parse("spec.configuration").unwrap();
                }
                "ServiceBlueprint" => {
                    let b: ServiceBlueprint = typed_read_back(&client, &stored).await;
                    assert!(!b.spec.templates.is_empty());
                }
                "Allocation" => {
                    typed_read_back::<Allocation>(&client, &stored).await;
                }
                "KnownCluster" => {
                    let k: KnownCluster = typed_read_back(&client, &stored).await;
                    assert!(
                        k.status.is_some(),
                        "status survived through the subresource"
                    );
                }
                "Broker" => {
                    typed_read_back::<Broker>(&client, &stored).await;
                }
                "Deployment" => {}
                other => panic!("sample kind {other} has no typed check"),
            }
            eprintln!("applied {} ({})", file.display(), doc["kind"]);
            // Two samples share a name; each is checked on its own.
            api.delete(&created.name_any(), &Default::default())
                .await
                .unwrap();
            applied += 1;
        }
    }
    assert!(applied >= 13, "only {applied} sample objects applied");
    cp.stop().await;
}

fn identity(id: &str, liqo: Option<&str>) -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: id.into(),
        ip: "127.0.0.1:3004".into(),
        additional_information: liqo.map(|l| NodeIdentityAdditionalInfo {
            liqo_id: Some(l.into()),
        }),
    }
}

fn k8slice_flavor_spec() -> FlavorSpec {
    let k = K8Slice {
        characteristics: fluidos_api::rear::characteristics(
            "amd64",
            "3876543211n",
            "6765433Ki",
            "110",
        ),
        ..Default::default()
    };
    FlavorSpec {
        provider_id: "prov".into(),
        flavor_type: FlavorType::k8slice(&k),
        owner: identity("prov", None),
        price: Price::default(),
        availability: true,
        network_property_type: Some("networkProperty".into()),
        location: Some(Location {
            latitude: Some("10".into()),
            longitude: Some("58".into()),
            country: Some("Italy".into()),
            city: Some("Turin".into()),
            additional_notes: Some("None".into()),
        }),
    }
}

fn service_flavor() -> ServiceFlavor {
    ServiceFlavor {
        name: "db".into(),
        description: "A database".into(),
        category: "database".into(),
        tags: vec!["database".into(), "mysql".into()],
        hosting_policies: vec![HostingPolicy::Provider, HostingPolicy::Consumer],
        configuration_template: json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
    }
}

fn embedded(name: &str, spec: FlavorSpec) -> EmbeddedFlavor {
    let mut f = Flavor::new(name, spec);
    f.metadata.namespace = Some(NS.into());
    f.status = Some(FlavorStatus::default());
    EmbeddedFlavor::from(&f)
}

/// Objects with their status, as our controllers write them.
fn objects_our_types_write() -> Vec<(Value, Option<Value>)> {
    fn pair<K: Resource + Serialize>(
        obj: K,
        status: Option<impl Serialize>,
    ) -> (Value, Option<Value>) {
        let mut v = serde_json::to_value(&obj).unwrap();
        v["metadata"]["namespace"] = json!(NS);
        v.as_object_mut().unwrap().remove("status");
        (v, status.map(|s| serde_json::to_value(s).unwrap()))
    }
    let phase = |p: Phase, msg: &str| PhaseStatus {
        phase: p,
        message: Some(msg.into()),
        start_time: Some("2026-11-30T10:00:00Z".into()),
        last_change_time: Some("2026-11-30T10:00:01Z".into()),
        end_time: Some("2026-11-30T10:00:01Z".into()),
    };
    let k8s_flavor = embedded("fluidos.eu-k8slice-3f9a", k8slice_flavor_spec());
    let svc_spec = FlavorSpec {
        flavor_type: FlavorType::service(&service_flavor()),
        ..k8slice_flavor_spec()
    };
    let pc_spec = PeeringCandidateSpec {
        interested_solver_ids: vec!["solver-a".into()],
        flavor: k8s_flavor.clone(),
        available: true,
    };
    let pc_status = PeeringCandidateStatus {
        creation_time: "2026-11-30T10:00:00Z".into(),
        last_update_time: String::new(),
    };
    let k8s_cfg = Configuration::k8slice(&K8SliceConfiguration {
        cpu: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        memory: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
        pods: k8s_openapi::apimachinery::pkg::api::resource::Quantity("10".into()),
        gpu: None,
        storage: None,
    });
    let svc_cfg = Configuration::service(&ServiceConfiguration {
        hosting_policy: Some(HostingPolicy::Provider),
        configuration_data: json!({"database": "mydb"}),
    });
    let selector = Selector {
        flavor_type: "K8Slice".into(),
        filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "1"}}})),
    };
    vec![
        pair(
            Flavor::new("fluidos.eu-k8slice-3f9a", k8slice_flavor_spec()),
            None::<()>,
        ),
        pair(
            Flavor::new("fluidos.eu-service-5b1c", svc_spec.clone()),
            None::<()>,
        ),
        pair(
            PeeringCandidate::new("peeringcandidate-fluidos.eu-k8slice-3f9a", pc_spec.clone()),
            Some(pc_status.clone()),
        ),
        pair(
            Contract::new(
                &naming::contract_name("fluidos.eu-k8slice-3f9a"),
                ContractSpec {
                    flavor: k8s_flavor.clone(),
                    transaction_id: "abababababababababababababababab-1".into(),
                    configuration: Some(k8s_cfg.clone()),
                    buyer: identity("buyer", Some("liqo-buyer")),
                    buyer_cluster_id: "liqo-buyer".into(),
                    seller: identity("prov", Some("liqo-prov")),
                    peering_target_credentials: LiqoCredentials {
                        liqo_id: "liqo-prov".into(),
                        kubeconfig: "a2NmZw==".into(),
                    },
                    expiration_time: Some("2027-11-30T10:00:00Z".into()),
                    extra_information: Some(BTreeMap::from([("k".into(), "v".into())])),
                    network_requests: None,
                    ingress_telemetry_endpoint: Some(TelemetryServer {
                        endpoint: "http://telemetry:8080".into(),
                        intents: Some(vec!["intent-a".into()]),
                    }),
                },
            ),
            Some(ContractStatus {
                phase: phase(Phase::Active, "sold"),
            }),
        ),
        pair(
            Contract::new(
                &naming::contract_name("fluidos.eu-service-5b1c"),
                ContractSpec {
                    flavor: embedded("fluidos.eu-service-5b1c", svc_spec),
                    transaction_id: "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd-2".into(),
                    configuration: Some(svc_cfg),
                    buyer: identity("buyer", Some("liqo-buyer")),
                    buyer_cluster_id: "liqo-buyer".into(),
                    seller: identity("prov", Some("liqo-prov")),
                    peering_target_credentials: LiqoCredentials::default(),
                    expiration_time: None,
                    extra_information: None,
                    network_requests: None,
                    ingress_telemetry_endpoint: None,
                },
            ),
            None::<()>,
        ),
        pair(
            Discovery::new(
                "discovery-solver-a",
                DiscoverySpec {
                    solver_id: "solver-a".into(),
                    selector: Some(selector.clone()),
                    subscribe: false,
                },
            ),
            Some(DiscoveryStatus {
                phase: phase(Phase::Solved, "Discovery Solved: Peering Candidate found"),
                peering_candidate_list: Some(EmbeddedPeeringCandidateList {
                    api_version: None,
                    kind: None,
                    metadata: None,
                    items: vec![EmbeddedPeeringCandidate {
                        api_version: Some("advertisement.fluidos.eu/v1alpha1".into()),
                        kind: Some("PeeringCandidate".into()),
                        metadata: fluidos_api::embedded::EmbeddedObjectMeta {
                            name: Some("peeringcandidate-fluidos.eu-k8slice-3f9a".into()),
                            namespace: Some(NS.into()),
                            ..Default::default()
                        },
                        spec: pc_spec,
                        status: Some(pc_status),
                    }],
                }),
                providers: None,
            }),
        ),
        pair(
            Solver::new(
                "solver-a",
                SolverSpec {
                    selector: Some(selector),
                    intent_id: "intent-a".into(),
                    find_candidate: Some(true),
                    reserve_and_buy: Some(true),
                    establish_peering: Some(false),
                },
            ),
            Some(SolverStatus {
                find_candidate: Some(Phase::Solved),
                reserve_and_buy: Some(Phase::Running),
                peering: Some(Phase::Idle),
                discovery_phase: Some(Phase::Solved),
                reservation_phase: Some(Phase::Running),
                consume_phase: None,
                solver_phase: Some(phase(Phase::Running, "Solver is running")),
                chosen_candidate: None,
            }),
        ),
        pair(
            Reservation::new(
                "reservation-solver-a",
                ReservationSpec {
                    solver_id: "solver-a".into(),
                    buyer: identity("buyer", None),
                    seller: identity("prov", None),
                    configuration: Some(k8s_cfg.clone()),
                    reserve: Some(true),
                    purchase: Some(true),
                    peering_candidate: Some(GenericRef::named(
                        NS,
                        "peeringcandidate-fluidos.eu-k8slice-3f9a",
                    )),
                    ingress_telemetry_endpoint: None,
                },
            ),
            Some(ReservationStatus {
                phase: phase(Phase::Solved, "Reservation solved"),
                reserve_phase: Some(Phase::Solved),
                purchase_phase: Some(Phase::Solved),
                transaction_id: Some("abababababababababababababababab-1".into()),
                contract: Some(GenericRef::named(NS, "contract-x")),
                purchase_attempted_at: None,
            }),
        ),
        pair(
            Transaction::new(
                "abababababababababababababababab-1",
                TransactionSpec {
                    flavor_id: "fluidos.eu-k8slice-3f9a".into(),
                    buyer: identity("buyer", Some("liqo-buyer")),
                    cluster_id: String::new(),
                    configuration: Some(k8s_cfg),
                    expiration_time: Some("2026-11-30T11:00:00Z".into()),
                },
            ),
            None::<()>,
        ),
        pair(
            Allocation::new(
                &naming::allocation_name("fluidos.eu-k8slice-3f9a"),
                AllocationSpec {
                    forwarding: Some(false),
                    contract: Some(GenericRef::named(NS, "contract-x")),
                },
            ),
            Some(AllocationStatus {
                status: Some("Active".into()),
                last_update_time: Some("2026-11-30T10:00:00Z".into()),
                message: Some("Outgoing peering ready".into()),
                resource_ref: Some(GenericRef::named("liqo", "fc")),
            }),
        ),
        pair(
            KnownCluster::new(
                "knowncluster-prov",
                KnownClusterSpec {
                    address: "127.0.0.1:3004".into(),
                    // Go's CRD has no fingerprint (it would be pruned there):
                    // see `known_cluster_fingerprints_are_checked_at_admission`.
                    fingerprint: None,
                },
            ),
            Some(KnownClusterStatus {
                expiration_time: "2026-11-30T10:00:10Z".into(),
                last_update_time: "2026-11-30T10:00:00Z".into(),
            }),
        ),
        pair(
            Broker::new(
                "broker-a",
                BrokerSpec {
                    address: "broker.example".into(),
                    name: "broker-a".into(),
                    clcert: "cl".into(),
                    cacert: "ca".into(),
                    role: "both".into(),
                    rule: "{}".into(),
                    metric: "{}".into(),
                },
            ),
            None::<()>,
        ),
        pair(
            ServiceBlueprint::new(
                "db-mysql",
                ServiceBlueprintSpec {
                    name: "db".into(),
                    description: "A database".into(),
                    category: "database".into(),
                    tags: vec!["database".into()],
                    hosting_policies: vec![HostingPolicy::Provider],
                    templates: vec![ServiceTemplate {
                        name: "secret".into(),
                        description: Some("credentials".into()),
                        service_data: json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": "db"}, "stringData": {"password": "{{ .password }}"}}),
                    }],
                    configuration_schema: None,
                },
            ),
            Some(fluidos_api::service_blueprint::ServiceBlueprintStatus {
                service_flavors: Some(vec![service_flavor()]),
                conditions: None,
                observed_generation: None,
            }),
        ),
    ]
}

async fn create_and_compare(client: &kube::Client, label: &str) {
    for (obj, status) in objects_our_types_write() {
        let kind = obj["kind"].as_str().unwrap().to_owned();
        let (api, _) = api_for(client, &obj).await;
        let dynamic: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        let created = api
            .create(&PostParams::default(), &dynamic)
            .await
            .unwrap_or_else(|e| panic!("{label} CRDs rejected our {kind}: {e}"));
        if let Some(status) = &status {
            api.patch_status(
                &created.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("{label} CRDs rejected our {kind} status: {e}"));
        }
        let stored = api.get(&created.name_any()).await.unwrap();
        assert_eq!(
            stored.data.get("spec"),
            obj.get("spec"),
            "{label} CRDs pruned or changed our {kind} spec"
        );
        assert_eq!(
            stored.data.get("status"),
            status.as_ref(),
            "{label} CRDs pruned or changed our {kind} status"
        );
        eprintln!("{label} CRDs accept our {kind} unchanged");
    }
}

#[tokio::test]
async fn objects_we_write_are_accepted_by_upstream_and_our_crds() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent; this test installs the upstream CRDs from there",
        );
        return;
    };
    // Two control planes side by side: upstream's CRDs and ours.
    let (upstream, ours) = tokio::join!(
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![reference.join("fluidos-crds")],
            ..Default::default()
        }),
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        }),
    );
    let (upstream, ours) = (upstream.unwrap(), ours.unwrap());
    eprintln!(
        "upstream CRDs on {}, ours on {}",
        upstream.server_url(),
        ours.server_url()
    );
    for (cp, label) in [(&upstream, "upstream"), (&ours, "our")] {
        ensure_namespace(&cp.client(), NS).await;
        create_and_compare(&cp.client(), label).await;
    }
    // And the typed decoders read back what was stored.
    let contracts: Api<Contract> = Api::namespaced(upstream.client(), NS);
    for c in contracts.list(&Default::default()).await.unwrap() {
        c.spec.flavor.spec.flavor_type.parse().unwrap();
        if let Some(cfg) = &c.spec.configuration {
            assert!(!matches!(
                cfg.parse("spec.configuration").unwrap(),
                ConfigurationData::Unparsed(_)
            ));
        }
    }
    upstream.stop().await;
    ours.stop().await;
}

/// The checks that replace upstream's validating webhooks refuse bad objects
/// at admission, with an error that names the field.
#[tokio::test]
async fn admission_refuses_unimplemented_types_and_reservations_without_candidate() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    ensure_namespace(&client, NS).await;
    let refused = |r: Result<DynamicObject, kube::Error>| match r {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        other => panic!("expected a 422, got {other:?}"),
    };

    let flavors: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::discovery::ApiResource::erase::<Flavor>(&()),
    );
    let mut vm = serde_json::to_value(Flavor::new("vm", k8slice_flavor_spec())).unwrap();
    vm["spec"]["flavorType"]["typeIdentifier"] = json!("VM");
    let msg = refused(
        flavors
            .create(&PostParams::default(), &serde_json::from_value(vm).unwrap())
            .await,
    );
    assert!(
        msg.contains("spec.flavorType.typeIdentifier") && msg.contains("\"K8Slice\""),
        "{msg}"
    );
    let ok = serde_json::to_value(Flavor::new("k8s", k8slice_flavor_spec())).unwrap();
    flavors
        .create(&PostParams::default(), &serde_json::from_value(ok).unwrap())
        .await
        .unwrap();

    let solvers: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::discovery::ApiResource::erase::<Solver>(&()),
    );
    let solver = json!({
        "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "Solver",
        "metadata": {"name": "sensor"},
        "spec": {"intentID": "i", "findCandidate": true,
                 "selector": {"flavorType": "Sensor"}}
    });
    let msg = refused(
        solvers
            .create(
                &PostParams::default(),
                &serde_json::from_value(solver).unwrap(),
            )
            .await,
    );
    assert!(msg.contains("spec.selector.flavorType"), "{msg}");

    let reservations: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &kube::discovery::ApiResource::erase::<Reservation>(&()),
    );
    let reservation = json!({
        "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "no-candidate"},
        "spec": {"solverID": "s", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                 "seller": {"domain": "d", "nodeID": "s", "ip": "i"},
                 "reserve": true, "purchase": true}
    });
    let msg = refused(
        reservations
            .create(
                &PostParams::default(),
                &serde_json::from_value(reservation).unwrap(),
            )
            .await,
    );
    assert!(
        msg.contains("spec.peeringCandidate.name is required"),
        "{msg}"
    );
    cp.stop().await;
}

/// The objects a node dry-run creates at start (`fluidos_api::probe`) are
/// admitted: a probe the API server refused would warm nothing, and its
/// error is only logged at debug level.
#[tokio::test]
async fn the_startup_probe_objects_are_admitted() {
    use fluidos_api::probe;
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    ensure_namespace(&client, NS).await;
    async fn admitted<K>(client: &kube::Client, obj: K)
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + Serialize
            + DeserializeOwned,
    {
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        Api::<K>::namespaced(client.clone(), NS)
            .create(&dry, &obj)
            .await
            .unwrap_or_else(|e| panic!("probe {} refused: {e}", K::kind(&())));
        // Dry run: nothing stored.
        assert!(
            Api::<K>::namespaced(client.clone(), NS)
                .get_opt(probe::PROBE_NAME)
                .await
                .unwrap()
                .is_none()
        );
    }
    admitted(&client, probe::flavor(NS)).await;
    admitted(&client, probe::solver(NS)).await;
    admitted(&client, probe::discovery(NS)).await;
    admitted(&client, probe::peering_candidate(NS)).await;
    admitted(&client, probe::reservation(NS)).await;
    admitted(&client, probe::transaction(NS)).await;
    admitted(&client, probe::contract(NS)).await;
    admitted(&client, probe::allocation(NS)).await;
    cp.stop().await;
}

/// A KnownCluster's fingerprint is stored as written when it is one, and
/// refused at admission otherwise (our CRDs only; Go's prune the field).
#[tokio::test]
async fn known_cluster_fingerprints_are_checked_at_admission() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    ensure_namespace(&client, NS).await;
    let api: Api<KnownCluster> = Api::namespaced(client, NS);
    let good = format!("sha256:{}", "0a".repeat(32));
    let with = |name: &str, fingerprint: &str| {
        KnownCluster::new(
            name,
            KnownClusterSpec {
                address: "127.0.0.1:3004".into(),
                fingerprint: Some(fingerprint.to_owned()),
            },
        )
    };
    let stored = api
        .create(&PostParams::default(), &with("pinned", &good))
        .await
        .unwrap();
    assert_eq!(stored.spec.fingerprint.as_deref(), Some(good.as_str()));
    for bad in [
        "sha256:0A".to_owned(),
        good.to_uppercase(),
        format!("{good}00"),
        "md5:00".to_owned(),
    ] {
        match api.create(&PostParams::default(), &with("bad", &bad)).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "{bad}: {e:?}");
                assert!(
                    e.message.contains("spec.fingerprint"),
                    "{bad}: {}",
                    e.message
                );
            }
            other => panic!("{bad}: expected a 422, got {other:?}"),
        }
    }
    cp.stop().await;
}

//! Service delivery by Liqo (mode a) end to end, with the real Liqo v1.0.0
//! controllers on both control planes: the upstream `solver-service.yaml`
//! Solver on the buyer's cluster buys the upstream database blueprint from
//! the seller, both nodes run `--service-delivery liqo`. The buyer's
//! purchase carries a kubeconfig of its cluster (Liqo's peering-user rights
//! in the seller's tenant namespace only); the seller peers with the buyer
//! as Liqo's consumer (its companion Allocation), the buyer's ResourceSlice
//! class grants the offloading slice, the seller offloads the service
//! namespace, and Liqo reflects the credentials Secret into the buyer's
//! namespace of the same name, which the buyer's Allocation points at.
//! Ending the Contract on the seller takes it all down: the service and
//! offloaded namespaces, the reverse peering, the buyer's Allocation
//! `Released`. The virtual-kubelet pod is played by its stand-in
//! (`Liqo::start_virtual_kubelet`, the real binary).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_api::allocation::AllocationState;
use fluidos_api::service_delivery::{CREDENTIALS_LABEL, OFFLOADING_FOR_ANNOTATION};
use fluidos_api::{Allocation, Contract, ServiceBlueprint, Solver};
use fluidos_testenv::fixtures;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};

mod support;

use support::peering::{
    CONSUMER_ID, PROVIDER_ID, Phases, TwoClusters, dynamic, ready_virtual_node, say, skip_reason,
    until,
};
use support::{NS, NodeProcess};

/// The Allocation of `cp` that is not a companion, with its state.
async fn service_allocation(cp: &kube::Client) -> Result<Allocation, String> {
    Api::<Allocation>::namespaced(cp.clone(), NS)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .find(|a| !a.annotations().contains_key(OFFLOADING_FOR_ANNOTATION))
        .ok_or_else(|| "no Allocation yet".to_owned())
}

fn state(a: &Allocation) -> Option<AllocationState> {
    a.status.as_ref().and_then(|s| s.status.clone())
}

/// The upstream sample blueprint and Solver (`fluidos-samples/<file>`), or
/// `None` after saying why the test is skipped (no Liqo binaries, no
/// `../shared/reference`).
fn samples(blueprint: &str, solver: &str) -> Option<(ServiceBlueprint, Solver)> {
    if let Some(why) = skip_reason() {
        fluidos_testenv::skip::unavailable(why);
        return None;
    }
    let Some(dir) = fluidos_testenv::shared_reference_dir().map(|d| d.join("fluidos-samples"))
    else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (blueprint and Solver samples come from there)",
        );
        return None;
    };
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
    Some((
        serde_yaml::from_str(&read(blueprint)).unwrap(),
        serde_yaml::from_str(&read(solver)).unwrap(),
    ))
}

/// The seller's node (TwoClusters' provider): the LRM, the gateway and the
/// REAR manager, delivering Services by Liqo.
fn seller_node(stage: &TwoClusters) -> NodeProcess {
    NodeProcess::spawn(
        &stage.provider,
        stage.provider_port(),
        "local-resource-manager,rear-gateway,rear-manager",
        "0",
        &[
            "--liqo-cluster-id",
            PROVIDER_ID,
            "--service-delivery",
            "liqo",
        ],
    )
}

/// The buyer's node (TwoClusters' consumer): the gateway (it issues the
/// seller's credentials) and the REAR manager, buying by Liqo. The
/// upstream message-queue blueprint's RabbitMQ runs as root (it meets the
/// `baseline` Pod Security level, not `restricted`, the default): a buyer
/// that hosts it (`Consumer` policy) says so with `--peer-pod-security
/// baseline`; under the default its pod is refused on the buyer.
fn buyer_node(stage: &TwoClusters) -> NodeProcess {
    NodeProcess::spawn(
        &stage.consumer,
        stage.consumer_port(),
        "rear-gateway,rear-manager",
        "0",
        &[
            "--liqo-cluster-id",
            CONSUMER_ID,
            "--service-delivery",
            "liqo",
            "--peer-pod-security",
            "baseline",
            "--peer-timeout-ms",
            "10000",
        ],
    )
}

/// Once the seller publishes its Service flavor, creates `solver` on the
/// buyer; returns the Contract the seller sold, which says it is delivered
/// by Liqo.
async fn buy(stage: &TwoClusters, nodes: &[&NodeProcess], solver: &Solver) -> Contract {
    let (seller, buyer) = (&stage.provider, &stage.consumer);
    until("the seller's Service flavor", nodes, &mut [], || async {
        let flavors = Api::<fluidos_api::Flavor>::namespaced(seller.client(), NS)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        flavors
            .items
            .iter()
            .any(|f| f.spec.flavor_type.type_identifier == "Service")
            .then_some(())
            .ok_or_else(|| "no Service flavor yet".to_owned())
    })
    .await;
    Api::<Solver>::namespaced(buyer.client(), NS)
        .create(&PostParams::default(), solver)
        .await
        .unwrap();
    let contract = until("the seller's Contract", nodes, &mut [], || async {
        Api::<Contract>::namespaced(seller.client(), NS)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .next()
            .ok_or_else(|| "no Contract yet".to_owned())
    })
    .await;
    assert!(
        fluidos_api::service_delivery::by_liqo(&contract.spec),
        "{:?}",
        contract.spec.extra_information
    );
    assert_eq!(contract.spec.buyer_cluster_id, CONSUMER_ID);
    contract
}

/// Waits until Liqo deletes the virtual-kubelet Deployment `deployment` in
/// the seller's `tenant` namespace (unpeering), then ends its stand-in, as
/// the pod would end (its credentials go with the peering, so it may die
/// first: no Liqo process is checked meanwhile).
async fn virtual_kubelet_gone(
    stage: &TwoClusters,
    seller_liqo: &mut fluidos_testenv::Liqo,
    nodes: &[&NodeProcess],
    tenant: &str,
    deployment: &str,
) {
    until(
        "the virtual-kubelet Deployment gone",
        nodes,
        &mut [],
        || async {
            match Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
                stage.provider.client(),
                tenant,
            )
            .get_opt(deployment)
            .await
            .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err("the Deployment is still there".to_owned()),
            }
        },
    )
    .await;
    seller_liqo.stop_virtual_kubelet(deployment).await;
}

/// Cordons (or uncordons) Node `name` of `cp`.
async fn set_unschedulable(cp: &fluidos_testenv::ControlPlane, name: &str, cordoned: bool) {
    Api::<k8s_openapi::api::core::v1::Node>::all(cp.client())
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"unschedulable": cordoned}})),
        )
        .await
        .unwrap();
}

/// `Ok` once namespace `name` is gone from both clusters, and the buyer's
/// service Allocation is `Released`.
async fn service_gone(stage: &TwoClusters, name: &str) -> Result<(), String> {
    for (side, cp) in [("seller", &stage.provider), ("buyer", &stage.consumer)] {
        if Api::<Namespace>::all(cp.client())
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .is_some()
        {
            return Err(format!("namespace {name} still on the {side}"));
        }
    }
    let a = service_allocation(&stage.consumer.client()).await?;
    (state(&a) == Some(AllocationState::Released))
        .then_some(())
        .ok_or_else(|| format!("buyer's Allocation {:?}", a.status))
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "two clusters, two nodes, one purchase delivered and ended: the scenario reads top to bottom"
)]
async fn a_service_bought_is_delivered_by_liqo_offloading_and_taken_down_with_its_contract() {
    let Some((blueprint, solver)) = samples("service-blueprint-db.yaml", "solver-service.yaml")
    else {
        return;
    };
    let mut phases = Phases::new();
    // The seller is TwoClusters' provider, the buyer its consumer; in the
    // reverse peering the seller is Liqo's consumer.
    let (stage, mut buyer_liqo, mut seller_liqo) = TwoClusters::start(0).await;
    let (seller, buyer) = (&stage.provider, &stage.consumer);
    // A kwok-run worker for the service's pods (kept by the seller: the
    // blueprint's hosting policy is the default, Provider).
    fixtures::worker_node(seller, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    Api::<ServiceBlueprint>::namespaced(seller.client(), NS)
        .create(&PostParams::default(), &blueprint)
        .await
        .unwrap();
    phases.mark("two control planes, Liqo on both, the blueprint");

    let (s_node, b_node) = (seller_node(&stage), buyer_node(&stage));
    let nodes = [&s_node, &b_node];
    // The sale, delivered by Liqo: the seller's Contract says so, and it
    // keeps the buyer's kubeconfig.
    let contract = buy(&stage, &nodes, &solver).await;
    let name = contract.name_any();
    phases.mark("Service sold, to be delivered by Liqo");
    // Both nodes crash in the middle (SIGKILL) and start again: everything
    // is in the API servers, so the delivery goes on.
    s_node.kill().await;
    b_node.kill().await;
    let (s_node, b_node) = (seller_node(&stage), buyer_node(&stage));
    let nodes = [&s_node, &b_node];

    // The reverse peering: the seller's slice in its tenant namespace for
    // the buyer, granted by the buyer's class; then the virtual node.
    let s_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let (node, deployment) = ready_virtual_node(
        seller,
        &mut seller_liqo,
        &mut buyer_liqo,
        &nodes,
        &s_tenant,
        &name,
    )
    .await;
    let allocatable = node.status.unwrap().allocatable.unwrap();
    // The offloading slice, not what the seller's slice asks for.
    assert_eq!(allocatable["cpu"].0, "100m", "{allocatable:?}");
    assert_eq!(allocatable["pods"].0, "1", "{allocatable:?}");
    phases.mark("reverse peering: the buyer's virtual node on the seller");

    // The offloaded namespace and the reflected credentials on the buyer.
    let allocation = until(
        "the buyer's Allocation Active",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            let a = service_allocation(&buyer.client()).await?;
            match state(&a) {
                Some(AllocationState::Active) => Ok(a),
                other => Err(format!(
                    "{other:?}: {:?}",
                    a.status.as_ref().and_then(|s| s.message.clone())
                )),
            }
        },
    )
    .await;
    let r = allocation.status.unwrap().resource_ref.unwrap();
    assert_eq!(r.namespace.as_deref(), Some(name.as_str()));
    let reflected = Api::<Secret>::namespaced(buyer.client(), &name)
        .get(r.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        reflected
            .labels()
            .get(CREDENTIALS_LABEL)
            .map(String::as_str),
        Some("true")
    );
    let original = Api::<Secret>::namespaced(seller.client(), &name)
        .get(&reflected.name_any())
        .await
        .unwrap();
    let data = reflected.data.clone().unwrap();
    for key in ["username", "password", "database"] {
        assert!(data.contains_key(key), "no {key} in {:?}", data.keys());
    }
    assert_eq!(reflected.data, original.data);
    phases.mark("buyer: credentials reflected into the offloaded namespace");

    // The kubeconfig the buyer gave the seller: Liqo's peering-user rights
    // in the seller's tenant namespace on the buyer, nothing in the node's.
    let given = Api::<Secret>::namespaced(seller.client(), NS)
        .get(&fluidos_api::service_delivery::buyer_credentials_secret(
            &name,
        ))
        .await
        .unwrap();
    let yaml = given.data.unwrap().remove("kubeconfig").unwrap().0;
    let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&yaml).unwrap()).unwrap();
    let as_seller = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let b_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let sellers = Api::<Secret>::namespaced(as_seller.clone(), &b_tenant);
    sellers.get_opt("liqo-nonce").await.unwrap();
    // Its own Secrets there by name only (the namespace Liqo shares with
    // the buyer's own peering with it, were it to buy a K8Slice there).
    let refused = sellers.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(e) if e.code == 403),
        "{refused}"
    );
    for ns in [NS, name.as_str()] {
        let refused = Api::<Secret>::namespaced(as_seller.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, kube::Error::Api(e) if e.code == 403),
            "{ns}: {refused:?}"
        );
    }

    // The seller's service Allocation is Active too (its workloads run on
    // its own worker: hosting policy Provider, pods Local).
    until(
        "the seller's Allocation Active",
        &nodes,
        &mut [],
        || async {
            let a = service_allocation(&seller.client()).await?;
            (state(&a) == Some(AllocationState::Active))
                .then_some(())
                .ok_or_else(|| format!("{:?}", a.status))
        },
    )
    .await;

    // Health reaches the buyer through Liqo: the seller's worker cordoned
    // and the database's pod deleted, its replacement cannot be scheduled;
    // the seller says so on the credentials Secret, Liqo reflects it, and
    // the buyer's Allocation shows it (credentials kept). Uncordoned, both
    // are Active again.
    set_unschedulable(seller, "worker-1", true).await;
    let s_pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(seller.client(), &name);
    s_pods
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let degraded = until(
        "the buyer's Allocation showing the seller's degraded service",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            let a = service_allocation(&buyer.client()).await?;
            let status = a.status.clone().unwrap_or_default();
            match (&status.status, status.message.as_deref()) {
                (Some(AllocationState::Provisioning), Some(m)) if m.contains("seller reports") => {
                    Ok(status)
                }
                _ => Err(format!("{status:?}")),
            }
        },
    )
    .await;
    assert!(degraded.resource_ref.is_some(), "{degraded:?}");
    phases.mark("buyer: the seller's degraded service shown");
    set_unschedulable(seller, "worker-1", false).await;
    until(
        "both Allocations Active again",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            for (side, cp) in [("seller", seller), ("buyer", buyer)] {
                let a = service_allocation(&cp.client()).await?;
                if state(&a) != Some(AllocationState::Active) {
                    return Err(format!("{side}'s {:?}", a.status));
                }
            }
            Ok(())
        },
    )
    .await;
    phases.mark("service available again, on both sides");

    // Ending the Contract on the seller takes it all down.
    Api::<Contract>::namespaced(seller.client(), NS)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    virtual_kubelet_gone(&stage, &mut seller_liqo, &nodes, &s_tenant, &deployment).await;
    until(
        "the service gone from both clusters",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            service_gone(&stage, &name).await?;
            let slices = dynamic(
                &seller.client(),
                "authentication.liqo.io",
                "ResourceSlice",
                "resourceslices",
                &s_tenant,
            );
            if slices
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err("the seller's ResourceSlice is still there".into());
            }
            let companions = Api::<Allocation>::namespaced(seller.client(), NS)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter(|a| a.annotations().contains_key(OFFLOADING_FOR_ANNOTATION))
                .count();
            if companions > 0 {
                return Err("the seller's companion Allocation is still there".into());
            }
            Ok(())
        },
    )
    .await;
    phases.mark("Contract ended: offloading, peering and namespaces gone");
    // The buyer's copy of the Contract stays (it ends at its own expiry),
    // but says the delivery ended; the buyer's gateway then revokes the
    // seller's account there.
    let copy = Api::<Contract>::namespaced(buyer.client(), NS)
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        copy.labels()
            .get(fluidos_api::service_delivery::DELIVERY_LABEL)
            .map(String::as_str),
        Some(fluidos_api::service_delivery::ENDED)
    );
    let account = fluidos_peer_access::grant::service_account_name("provider01");
    until(
        "the seller's account on the buyer revoked",
        &nodes,
        &mut [],
        || async {
            match Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(buyer.client(), NS)
                .get_opt(&account)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(_) => Err(format!("{account} is still there")),
            }
        },
    )
    .await;
    phases.mark("buyer: the seller's account revoked");
    say("service delivered by Liqo and taken down");
    phases.summary();
}

/// The hosting policy `Consumer` (the upstream message-queue blueprint's
/// only one), delivered by Liqo: the seller offloads the service namespace
/// with pods `Remote`, its reverse slice is the Go node's service slice
/// (800m, 800M, 10 pods), the seller's scheduler places the queue's pod on
/// the buyer's virtual node, the virtual kubelet reflects it into the
/// buyer's cluster, where it runs (kwok), and its status comes back: both
/// Allocations are Active with no seller Node able to run it. Ending the
/// Contract takes the pod and both namespaces away.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "two clusters, two nodes, one purchase whose pods run on the buyer: the scenario reads top to bottom"
)]
async fn a_consumer_hosted_service_runs_its_pods_on_the_buyers_cluster() {
    use k8s_openapi::api::core::v1::Pod;
    let Some((blueprint, solver)) = samples("service-blueprint-mq.yaml", "solver-service-mq.yaml")
    else {
        return;
    };
    assert_eq!(
        blueprint.spec.hosting_policies,
        [fluidos_api::common::HostingPolicy::Consumer]
    );
    let mut phases = Phases::new();
    let (stage, mut buyer_liqo, mut seller_liqo) = TwoClusters::start(0).await;
    let (seller, buyer) = (&stage.provider, &stage.consumer);
    // The only Node that runs pods is the buyer's: the seller has none.
    Api::<k8s_openapi::api::core::v1::Node>::all(buyer.client())
        .create(
            &PostParams::default(),
            &fluidos_testenv::liqo::kwok_node("buyer-kwok"),
        )
        .await
        .unwrap();
    Api::<ServiceBlueprint>::namespaced(seller.client(), NS)
        .create(&PostParams::default(), &blueprint)
        .await
        .unwrap();
    let (s_node, b_node) = (seller_node(&stage), buyer_node(&stage));
    let nodes = [&s_node, &b_node];
    let contract = buy(&stage, &nodes, &solver).await;
    let name = contract.name_any();
    phases.mark("two control planes, Liqo on both; message queue sold, by Liqo");

    // The reverse peering, with the service slice.
    let s_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let (node, deployment) = ready_virtual_node(
        seller,
        &mut seller_liqo,
        &mut buyer_liqo,
        &nodes,
        &s_tenant,
        &name,
    )
    .await;
    let virtual_node = node.name_any();
    let allocatable = node.status.unwrap().allocatable.unwrap();
    assert_eq!(allocatable["cpu"].0, "800m", "{allocatable:?}");
    assert_eq!(allocatable["pods"].0, "10", "{allocatable:?}");
    // Made once the reverse peering is up (the companion Active).
    let offloadings = dynamic(
        &seller.client(),
        "offloading.liqo.io",
        "NamespaceOffloading",
        "namespaceoffloadings",
        &name,
    );
    let offloading = until(
        "the seller's NamespaceOffloading",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            offloadings
                .get_opt("offloading")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no NamespaceOffloading yet".to_owned())
        },
    )
    .await;
    assert_eq!(offloading.data["spec"]["podOffloadingStrategy"], "Remote");
    phases.mark("reverse peering: the buyer's virtual node on the seller, pods Remote");

    // The queue's pod: on the virtual node on the seller, running on the
    // buyer's kwok Node in the offloaded namespace.
    let s_pods = Api::<Pod>::namespaced(seller.client(), &name);
    let b_pods = Api::<Pod>::namespaced(buyer.client(), &name);
    let running =
        |pod: &Pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let (s_pod, b_pod) = until(
        "the queue's pod Running on the buyer and on the virtual node",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            let s = s_pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .next()
                .ok_or("no pod on the seller yet")?;
            let b = b_pods
                .get_opt(&s.name_any())
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no pod on the buyer yet")?;
            if running(&s) && running(&b) {
                Ok((s, b))
            } else {
                Err(format!(
                    "seller pod {:?} on {:?}, buyer pod {:?}",
                    s.status.as_ref().and_then(|s| s.phase.clone()),
                    s.spec.as_ref().and_then(|s| s.node_name.clone()),
                    b.status.as_ref().and_then(|s| s.phase.clone())
                ))
            }
        },
    )
    .await;
    assert_eq!(
        s_pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(virtual_node.as_str())
    );
    assert_eq!(
        b_pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("buyer-kwok")
    );
    phases.mark("the queue's pod runs on the buyer's cluster");

    // Both Allocations Active; the buyer's points at the reflected
    // credentials.
    let allocation = until(
        "both Allocations Active",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || async {
            let s = service_allocation(&seller.client()).await?;
            if state(&s) != Some(AllocationState::Active) {
                return Err(format!("seller's {:?}", s.status));
            }
            let b = service_allocation(&buyer.client()).await?;
            match state(&b) {
                Some(AllocationState::Active) => Ok(b),
                _ => Err(format!("buyer's {:?}", b.status)),
            }
        },
    )
    .await;
    let r = allocation.status.unwrap().resource_ref.unwrap();
    let reflected = Api::<Secret>::namespaced(buyer.client(), &name)
        .get(r.name.as_deref().unwrap())
        .await
        .unwrap();
    let data = reflected.data.unwrap();
    for key in ["endpoints", "username", "password"] {
        assert!(data.contains_key(key), "no {key} in {:?}", data.keys());
    }
    // Honoured: no warning saying otherwise on the seller's Allocation.
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(seller.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let reasons: Vec<_> = events
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    assert!(reasons.iter().any(|r| r == "ServiceCreated"), "{reasons:?}");
    assert!(
        !reasons.iter().any(|r| r == "HostingPolicyNotHonoured"),
        "{reasons:?}"
    );
    phases.mark("both Allocations Active");

    // Ending the Contract takes the pod and both namespaces away.
    Api::<Contract>::namespaced(seller.client(), NS)
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    virtual_kubelet_gone(&stage, &mut seller_liqo, &nodes, &s_tenant, &deployment).await;
    until(
        "the service gone from both clusters",
        &nodes,
        &mut [&mut seller_liqo, &mut buyer_liqo],
        || service_gone(&stage, &name),
    )
    .await;
    phases.mark("Contract ended: pod, offloading and namespaces gone");
    say("consumer-hosted service ran on the buyer and was taken down");
    phases.summary();
}

//! K8Slice allocation end to end with the real Liqo v1.0.0 controllers: two
//! control planes (kube-controller-manager signs Liqo's certificates), Liqo on
//! both (networking off), a provider `fluidos-node` (LRM, REAR gateway,
//! Allocation controller) and a consumer one (REAR manager with the
//! Allocation controller). The upstream Solver sample with `establishPeering:
//! true` must end `Solved`, with both Allocations `Active` and a Ready virtual
//! node offering exactly the contracted resources. The virtual-kubelet pod is
//! played by its stand-in (`Liqo::start_virtual_kubelet`, the real binary).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Phase, Solver};
use fluidos_testenv::{ControlPlane, Liqo};
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};

mod support;

use support::peering::{
    CONSUMER_ID, PROVIDER_ID, Phases, TwoClusters, allocation_state, dynamic, new_contract,
    offload_a_pod, ready_virtual_node, say, skip_reason, unpeer, until, wait_active,
    wait_authenticated,
};
use support::{NS, NodeProcess};

/// A client acting on the provider as the consumer's Liqo control plane
/// does: the certificate Liqo issued to it (group `liqo.io`), read from the
/// kubeconfig Secret of its control-plane Identity.
async fn consumer_control_plane_on_provider(
    consumer: &ControlPlane,
    c_tenant: &str,
) -> kube::Client {
    let identity = dynamic(
        &consumer.client(),
        "authentication.liqo.io",
        "Identity",
        "identities",
        c_tenant,
    )
    .get(&format!("controlplane-{PROVIDER_ID}"))
    .await
    .unwrap();
    let secret = identity
        .data
        .pointer("/status/kubeconfigSecretRef/name")
        .and_then(|v| v.as_str())
        .unwrap()
        .to_owned();
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(consumer.client(), c_tenant)
        .get(&secret)
        .await
        .unwrap();
    let yaml = secret.data.unwrap().remove("kubeconfig").unwrap().0;
    let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&yaml).unwrap()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// The seed's hole, closed: the consumer asks for the provider's class, the
/// provider grants what the Contract sold whatever the slice asks for, and
/// the peer's Liqo can neither bring a `default`-class slice nor write a
/// slice's status (the admission policy, evaluated by the real API server).
#[expect(
    clippy::too_many_lines,
    reason = "one attack after the other, each with its evidence"
)]
async fn over_request_is_refused(
    consumer: &ControlPlane,
    provider: &ControlPlane,
    liqos: &mut [&mut Liqo],
    nodes: &[&NodeProcess],
    slice: &str,
    sold_cpu: &str,
) {
    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let p_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let slices = |client: &kube::Client, ns: &str| {
        dynamic(
            client,
            "authentication.liqo.io",
            "ResourceSlice",
            "resourceslices",
            ns,
        )
    };
    let (mine, replicas) = (
        slices(&consumer.client(), &c_tenant),
        slices(&provider.client(), &p_tenant),
    );
    let theirs = mine.get(slice).await.unwrap();
    assert_eq!(
        theirs.data.pointer("/spec/class").and_then(|v| v.as_str()),
        Some("fluidos"),
        "the consumer asks for the class its provider named in the Contract"
    );
    // The consumer edits its slice to ask for 64 CPUs: the edit reaches the
    // provider's replica, the grant stays the Contract's.
    mine.patch(
        slice,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"resources": {"cpu": "64"}}})),
    )
    .await
    .unwrap();
    let granted = until(
        "the edited request replicated to the provider",
        nodes,
        liqos,
        || async {
            let r = replicas.get(slice).await.map_err(|e| e.to_string())?;
            let asked = r
                .data
                .pointer("/spec/resources/cpu")
                .and_then(|v| v.as_str());
            if asked == Some("64") {
                Ok(r)
            } else {
                Err(format!("replica asks for {asked:?}"))
            }
        },
    )
    .await;
    let amount = |q: &str| {
        fluidos_api::quantity::Amount::of(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            q.to_owned(),
        ))
        .unwrap()
    };
    let granted_cpu = granted
        .data
        .pointer("/status/resources/cpu")
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("no CPU granted: {:?}", granted.data.pointer("/status")));
    assert_eq!(
        amount(granted_cpu),
        amount(sold_cpu),
        "the provider grants what was sold ({sold_cpu}), not 64: {granted_cpu}"
    );
    let resources_condition = granted
        .data
        .pointer("/status/conditions")
        .and_then(|v| v.as_array())
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Resources"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        resources_condition["status"], "Accepted",
        "{resources_condition}"
    );
    assert_eq!(
        resources_condition["reason"], "ContractGranted",
        "{resources_condition}"
    );

    // As the consumer's Liqo control plane (what its replicator uses): a
    // default-class slice, and a forged grant, are both Forbidden.
    let peer = consumer_control_plane_on_provider(consumer, &c_tenant).await;
    let as_peer = slices(&peer, &p_tenant);
    let bypass: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.liqo.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": "bypass", "namespace": p_tenant, "labels": {
            "liqo.io/replicated": "true", "liqo.io/originID": CONSUMER_ID,
            "liqo.io/remote-cluster-id": CONSUMER_ID}},
        "spec": {"class": "default", "consumerClusterID": CONSUMER_ID,
            "providerClusterID": PROVIDER_ID, "resources": {"cpu": "64"}}
    }))
    .unwrap();
    // Without the replica labels too: the peer's group is enough.
    let mut unlabelled = bypass.clone();
    unlabelled.metadata.labels = None;
    for attempt in [&bypass, &unlabelled] {
        match as_peer.create(&PostParams::default(), attempt).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 403, "{e:?}");
                assert!(e.message.contains("class \"fluidos\""), "{}", e.message);
            }
            other => panic!("a default-class slice was not refused: {other:?}"),
        }
    }
    // A merge patch: the write must meet the policy, not a stale version.
    let forged = serde_json::json!({"status": {"resources": {"cpu": "64"}}});
    match as_peer
        .patch_status(
            slice,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&forged),
        )
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 403, "{e:?}");
            assert!(
                e.message.contains("may not write the status"),
                "{}",
                e.message
            );
        }
        other => panic!("a peer wrote a slice's status: {other:?}"),
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, phase by phase; splitting it hides the order"
)]
async fn solver_with_peering_gets_a_virtual_node_of_the_contracted_size() {
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let mut phases = Phases::new();
    // Two worker nodes, two flavors: the sample takes all 110 pods of one,
    // so the second purchase is of the other (same provider).
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start(2).await;
    phases.mark("two control planes, Liqo on both");
    let provider_node = stage.provider_node();
    let consumer_node = stage.consumer_node();
    stage.wait_serving(&provider_node, &consumer_node, 2).await;
    phases.mark("nodes started, flavors published");
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    let nodes = [&provider_node, &consumer_node];
    // The upstream sample, unchanged.
    let solver = TwoClusters::sample_solver();
    assert_eq!(solver.spec.establish_peering, Some(true));
    let name = solver.name_any();
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    solvers
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();

    let contract = until(
        "the consumer's Contract",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            match new_contract(consumer, &[]).await {
                Ok(c) => Ok(c),
                Err(e) => {
                    let st = solvers.get(&name).await.map(|s| s.status);
                    Err(format!("{e}; Solver status: {st:?}"))
                }
            }
        },
    )
    .await;
    let slice = contract.name_any();
    phases.mark("Solver -> Contract (discovery, reserve, purchase)");

    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    wait_authenticated(consumer, &nodes, &mut [&mut c_liqo, &mut p_liqo]).await;
    phases.mark("authenticated (nonce, Tenant signed, Identity kubeconfig)");

    let (node, deployment) = ready_virtual_node(
        consumer,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &c_tenant,
        &slice,
    )
    .await;
    phases.mark("slice accepted, VirtualNode, stand-in: virtual Node Ready");

    let (state, message) = until(
        "the consumer's Allocation Active",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            let (s, m) = allocation_state(consumer, &slice).await?;
            if s == AllocationState::Active {
                Ok((s, m))
            } else {
                Err(format!("{s}: {m}"))
            }
        },
    )
    .await;
    assert_eq!(
        message, "Outgoing peering ready, Allocation is Active",
        "{state}"
    );
    let (phase, message) = until(
        "the Solver Solved",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            let s = solvers.get(&name).await.map_err(|e| e.to_string())?;
            let p = s.status.and_then(|s| s.solver_phase).unwrap_or_default();
            match p.phase {
                Phase::Solved
                    if p.message.as_deref() == Some("Solver has completed all the phases") =>
                {
                    Ok((p.phase, p.message.unwrap_or_default()))
                }
                Phase::Failed | Phase::TimedOut => {
                    panic!("Solver ended {:?}: {:?}", p.phase, p.message)
                }
                _ => Err(format!("{:?}: {:?}", p.phase, p.message)),
            }
        },
    )
    .await;
    say(&format!("Solver {name}: {phase:?} {message:?}"));
    let (p_state, p_message) = until(
        "the provider's Allocation Active",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            let (s, m) = allocation_state(provider, &slice).await?;
            if s == AllocationState::Active {
                Ok((s, m))
            } else {
                Err(format!("{s}: {m}"))
            }
        },
    )
    .await;
    say(&format!("provider Allocation: {p_state} {p_message:?}"));
    phases.mark("Allocations Active on both sides, Solver Solved");

    // The virtual node offers exactly what the Contract sold.
    let sold = fluidos_peering::objects::contracted_resources(&contract.spec).unwrap();
    say(&format!("contracted {sold:?}"));
    let allocatable = node.status.unwrap().allocatable.unwrap_or_default();
    say(&format!("virtual node {slice} allocatable {allocatable:?}"));
    for (key, want) in &sold {
        let got = allocatable
            .get(key)
            .map(|q| q.0.clone())
            .unwrap_or_default();
        assert_eq!(
            fluidos_api::quantity::Amount::of(
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity(got.clone())
            )
            .unwrap(),
            fluidos_api::quantity::Amount::of(
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity(want.clone())
            )
            .unwrap(),
            "{key}: virtual node {got}, contract {want}"
        );
    }
    over_request_is_refused(
        consumer,
        provider,
        &mut [&mut c_liqo, &mut p_liqo],
        &nodes,
        &slice,
        &sold["cpu"],
    )
    .await;
    phases.mark("over-request refused (edited slice, default class, forged status)");

    // The virtual node is usable: a pod in an offloaded namespace runs on
    // the provider through it.
    offload_a_pod(
        consumer,
        provider,
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        (&slice, &sold["cpu"]),
    )
    .await;
    phases.mark("pod offloaded through the virtual node: Running on both sides, then removed");

    // A second purchase from the same provider: already authenticated, the
    // consumer only adds a second ResourceSlice and gets a second node.
    let mut second: Solver = solver.clone();
    second.metadata.name = Some(format!("{name}-2"));
    second.metadata.resource_version = None;
    solvers
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    let contract2 = until(
        "the second Contract",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            if let Ok(c) = new_contract(consumer, std::slice::from_ref(&slice)).await {
                return Ok(Some(c));
            }
            let st = solvers
                .get(&format!("{name}-2"))
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|s| s.solver_phase);
            match st {
                // Fail at once, saying what the provider offered.
                Some(p) if p.phase == Phase::Failed => Ok(None),
                other => Err(format!("no second Contract yet; Solver {other:?}")),
            }
        },
    )
    .await;
    let Some(contract2) = contract2 else {
        let flavors = Api::<fluidos_api::Flavor>::namespaced(provider.client(), NS)
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|f| (f.name_any(), f.spec.flavor_type.type_data))
                    .collect::<Vec<_>>()
            });
        panic!("the second Solver found no candidate; provider flavors: {flavors:?}");
    };
    let slice2 = contract2.name_any();
    assert_ne!(slice2, slice);
    let (node2, deployment2) = ready_virtual_node(
        consumer,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &c_tenant,
        &slice2,
    )
    .await;
    wait_active(consumer, &slice2, &nodes, &mut [&mut c_liqo, &mut p_liqo]).await;
    assert!(
        node2
            .metadata
            .labels
            .as_ref()
            .is_some_and(
                |l| l.get("liqo.io/remote-cluster-id").map(String::as_str) == Some(PROVIDER_ID)
            ),
        "the second virtual node is the same provider's"
    );
    phases.mark("second Contract, same provider: second slice, node Ready, Active");

    // Unpeering: deleting a Solver takes its peering down through its
    // Allocation's finalizer; the provider's other Contract keeps its own.
    unpeer(
        consumer,
        provider,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &format!("{name}-2"),
        &slice2,
        &deployment2,
        true,
    )
    .await;
    phases.mark("second Solver deleted: its slice, virtual node, Allocation gone");
    unpeer(
        consumer,
        provider,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &name,
        &slice,
        &deployment,
        false,
    )
    .await;
    phases.mark("last Solver deleted: unauthenticated on both sides");

    phases.summary();
    drop(c_liqo);
    drop(p_liqo);
}

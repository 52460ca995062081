//! A node killed (SIGKILL) in the middle of a K8Slice peering, at every
//! step, converges to exactly one peering once it runs again: with the real
//! Liqo v1.0.0 on two control planes, the consumer node is killed and
//! restarted each time its Allocation reports a new peering step, then the
//! provider node once the peering is up. Liqo's networking module runs on
//! both (the gateway pods played by the testenv's stand-in), so the
//! networking steps are among those killed at. All peering state lives in
//! the API servers, so every step is create-or-adopt.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

mod support;

use fluidos_api::Solver;
use fluidos_api::allocation::AllocationState;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use support::NS;
use support::peering::{
    CONSUMER_ID, PROVIDER_ID, TwoClusters, allocation_state, dynamic, new_contract,
    ready_virtual_node, say, skip_reason, until, wait_active,
};

/// How many objects of a Liqo kind are in `ns` (Identities: of the
/// control-plane type; Liqo makes one more per ResourceSlice).
async fn count(client: &kube::Client, kind: &str, plural: &str, ns: &str) -> usize {
    dynamic(client, "authentication.liqo.io", kind, plural, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|o| {
            kind != "Identity"
                || o.data.pointer("/spec/type").and_then(|t| t.as_str()) == Some("ControlPlane")
        })
        .count()
}

/// While the consumer node is down, puts on the provider a Tenant for the
/// consumer whose nonce signature is wrong (after deleting any Tenant the
/// consumer sent): Liqo refuses it and does not retry, so the consumer must
/// notice and start the handshake again. Returns the planted Tenant's uid.
async fn plant_refused_tenant(provider: &fluidos_testenv::ControlPlane) -> String {
    // ByteString serializes as base64, as the CRD's byte fields are.
    let b64 = |b: &[u8]| serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap();
    let ns = format!("liqo-tenant-{CONSUMER_ID}");
    let tenants = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        &ns,
    );
    let _ = tenants.delete(CONSUMER_ID, &Default::default()).await;
    let mut planted: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.liqo.io/v1beta1",
        "kind": "Tenant",
        "metadata": {"name": CONSUMER_ID, "namespace": ns},
        "spec": {
            "clusterID": CONSUMER_ID,
            "publicKey": b64(&[1u8; 32]),
            "csr": b64(b"not a CSR"),
            "signature": b64(&[0u8; 64]),
        },
    }))
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let uid = loop {
        match tenants.create(&PostParams::default(), &planted).await {
            Ok(created) => break created.metadata.uid.unwrap(),
            // The consumer's Tenant is still being deleted (Liqo's finalizer).
            Err(e) if std::time::Instant::now() < deadline => {
                say(&format!("planting the refused Tenant: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                planted.metadata.resource_version = None;
            }
            Err(e) => panic!("could not plant the refused Tenant: {e}"),
        }
    };
    say("planted a Tenant with a wrong signature on the provider");
    uid
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, kill after kill; splitting it hides the order"
)]
async fn nodes_killed_at_every_peering_step_converge_to_one_peering() {
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    // Two flavors: one for the first Contract, one for the second. Liqo's
    // networking module on both, so the networking steps are killed at too.
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start_with(2, true).await;
    let mut p_node = stage.provider_node();
    let mut c_node = stage.consumer_node();
    stage.wait_serving(&p_node, &c_node, 2).await;

    let solver = TwoClusters::sample_solver();
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();
    let contract = until(
        "the consumer's Contract",
        &[&p_node, &c_node],
        &mut [&mut c_liqo, &mut p_liqo],
        || async { new_contract(consumer, &[]).await },
    )
    .await;
    let slice = contract.name_any();

    // Kill the consumer node each time its Allocation reports a new step,
    // until the slice is accepted (the virtual node needs the stand-in).
    let mut seen: Vec<String> = Vec::new();
    let mut kills = 0;
    let mut planted = None;
    loop {
        let (state, message) = until(
            "a new peering step",
            &[&p_node, &c_node],
            &mut [&mut c_liqo, &mut p_liqo],
            || async {
                let (s, m) = allocation_state(consumer, &slice).await?;
                if seen.contains(&m) {
                    Err(format!("still {s}: {m}"))
                } else {
                    Ok((s, m))
                }
            },
        )
        .await;
        seen.push(message.clone());
        if message.contains("waiting for virtual node") || state == AllocationState::Active {
            break;
        }
        assert_ne!(state, AllocationState::Error, "{message}");
        say(&format!(
            "kill -9 of the consumer node at: {state}: {message}"
        ));
        c_node.kill().await;
        kills += 1;
        // Once the nonce is asked for (the consumer has sent no Tenant yet),
        // a Tenant Liqo refuses takes its place.
        if planted.is_none() && message.contains("nonce") {
            planted = Some(plant_refused_tenant(provider).await);
        }
        c_node = stage.consumer_node();
    }
    assert!(kills >= 3, "killed at only {kills} steps: {seen:?}");
    let planted = planted.expect("a nonce step was seen, and the Tenant planted then");

    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    let nodes = [&p_node, &c_node];
    ready_virtual_node(
        consumer,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &c_tenant,
        &slice,
    )
    .await;
    wait_active(consumer, &slice, &nodes, &mut [&mut c_liqo, &mut p_liqo]).await;

    // Then the provider node: killed and restarted, it keeps its side.
    say("kill -9 of the provider node with the peering up");
    p_node.kill().await;
    p_node = stage.provider_node();
    let nodes = [&p_node, &c_node];
    let p_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let replicas = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        &p_tenant,
    );
    until(
        "the provider's Allocation Active and the grant in place",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            let (s, m) = allocation_state(provider, &slice).await?;
            if s != AllocationState::Active {
                return Err(format!("provider Allocation {s}: {m}"));
            }
            let r = replicas.get(&slice).await.map_err(|e| e.to_string())?;
            match r.data.pointer("/status/resources/pods") {
                Some(_) => Ok(()),
                None => Err("no grant".into()),
            }
        },
    )
    .await;

    // Exactly one peering: one of each object, on each side.
    assert_eq!(
        count(&consumer.client(), "Identity", "identities", &c_tenant).await,
        1
    );
    assert_eq!(
        count(
            &consumer.client(),
            "ResourceSlice",
            "resourceslices",
            &c_tenant
        )
        .await,
        1
    );
    assert_eq!(
        count(&provider.client(), "Tenant", "tenants", &p_tenant).await,
        1
    );
    // One tunnel: one of each networking object, on each side.
    for (cp, ns, kind, plural) in [
        (provider, &p_tenant, "GatewayServer", "gatewayservers"),
        (provider, &p_tenant, "PublicKey", "publickeies"),
        (provider, &p_tenant, "Configuration", "configurations"),
        (consumer, &c_tenant, "GatewayClient", "gatewayclients"),
        (consumer, &c_tenant, "PublicKey", "publickeies"),
        (consumer, &c_tenant, "Configuration", "configurations"),
    ] {
        let n = dynamic(&cp.client(), "networking.liqo.io", kind, plural, ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        assert_eq!(n, 1, "{kind}s in {ns}");
    }
    // The consumer adopts a Tenant it finds; only the restart after the
    // refusal replaces the planted one.
    let tenant = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        &p_tenant,
    )
    .get(CONSUMER_ID)
    .await
    .unwrap();
    assert_ne!(
        tenant.metadata.uid.as_deref(),
        Some(planted.as_str()),
        "the refused Tenant was replaced"
    );
    assert_eq!(
        count(
            &provider.client(),
            "ResourceSlice",
            "resourceslices",
            &p_tenant
        )
        .await,
        1
    );
    let (state, _) = allocation_state(consumer, &slice).await.unwrap();
    assert_eq!(state, AllocationState::Active);
    say(&format!(
        "converged after {kills} kills of the consumer and one of the provider; steps seen: {seen:?}"
    ));
    a_dropped_tenant_is_replaced(&stage, &mut c_liqo, &mut p_liqo, &nodes, &slice).await;
    nothing_sold_removes_the_tenant(&stage, &mut c_liqo, &mut p_liqo, &nodes).await;
    c_liqo.stop().await;
    p_liqo.stop().await;
}

/// The provider drops the consumer's Tenant (as an admin may, or Liqo after
/// a reinstall) while the consumer keeps its Identity: the consumer's next
/// Contract must notice and authenticate again instead of sending a slice
/// the provider will never accept.
async fn a_dropped_tenant_is_replaced(
    stage: &TwoClusters,
    c_liqo: &mut fluidos_testenv::Liqo,
    p_liqo: &mut fluidos_testenv::Liqo,
    nodes: &[&support::NodeProcess],
    first_slice: &str,
) {
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    let p_tenants = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        &format!("liqo-tenant-{CONSUMER_ID}"),
    );
    let dropped = p_tenants.get(CONSUMER_ID).await.unwrap().metadata.uid;
    p_tenants
        .delete(CONSUMER_ID, &Default::default())
        .await
        .unwrap();
    until(
        "the provider's Tenant gone",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            match support::peering::exists(&p_tenants, CONSUMER_ID).await? {
                false => Ok(()),
                true => Err("Tenant still there".to_owned()),
            }
        },
    )
    .await;
    say("the provider dropped the consumer's Tenant");

    let mut second = TwoClusters::sample_solver();
    second.metadata.name = Some(format!("{}-2", second.name_any()));
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    let contract = until(
        "the second Contract",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async { new_contract(consumer, &[first_slice.to_owned()]).await },
    )
    .await;
    let slice = contract.name_any();
    ready_virtual_node(
        consumer,
        c_liqo,
        p_liqo,
        nodes,
        &format!("liqo-tenant-{PROVIDER_ID}"),
        &slice,
    )
    .await;
    wait_active(consumer, &slice, nodes, &mut [&mut *c_liqo, &mut *p_liqo]).await;
    let replaced = p_tenants.get(CONSUMER_ID).await.unwrap().metadata.uid;
    assert_ne!(dropped, replaced, "a new Tenant, from a new handshake");
    say("the second Contract authenticated again and is Active");
}

/// The provider's Contracts end while the consumer keeps its peering (it
/// never unpeers): with nothing sold to the consumer any more, the provider
/// has Liqo drain its Tenant (the RoleBindings and ClusterRoleBindings Liqo
/// gave the consumer's certificates, the slices and NamespaceMaps
/// replicated from it) and then removes the Tenant and the nonce.
async fn nothing_sold_removes_the_tenant(
    stage: &TwoClusters,
    c_liqo: &mut fluidos_testenv::Liqo,
    p_liqo: &mut fluidos_testenv::Liqo,
    nodes: &[&support::NodeProcess],
) {
    use fluidos_api::Contract;
    let provider = stage.provider.client();
    let before = consumer_traces(&provider).await.unwrap();
    say(&format!(
        "the consumer's traces on the provider: {before:?}"
    ));
    for kind in [
        "Tenant",
        "ClusterRoleBindings",
        "RoleBindings",
        "NamespaceMaps",
        "nonce",
        "GatewayServer",
        "PublicKey",
        "Configuration",
    ] {
        assert!(
            before.get(kind).is_some_and(|n| *n > 0),
            "no {kind} to start with"
        );
    }
    let contracts = Api::<Contract>::namespaced(provider.clone(), NS);
    for c in contracts.list(&ListParams::default()).await.unwrap() {
        contracts
            .delete(&c.name_any(), &Default::default())
            .await
            .unwrap();
    }
    say("the provider's Contracts are deleted; the consumer does not unpeer");
    until(
        "the consumer's traces on the provider gone",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let left = consumer_traces(&provider).await?;
            if left.values().all(|n| *n == 0) {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    say("nothing sold: the consumer's Tenant, grants and replicas are gone");
}

/// What the consumer has on the provider, by kind: its Tenant, Liqo's
/// bindings for its certificates, what it replicated, the nonce.
async fn consumer_traces(
    provider: &kube::Client,
) -> Result<std::collections::BTreeMap<&'static str, usize>, String> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    let ns = format!("liqo-tenant-{CONSUMER_ID}");
    let e = |e: kube::Error| e.to_string();
    let all = ListParams::default();
    let bound = all
        .clone()
        .labels(&format!("liqo.io/remote-cluster-id={CONSUMER_ID}"));
    let replicated = all.clone().labels("liqo.io/replicated=true");
    let liqo = |group, kind, plural| dynamic(provider, group, kind, plural, &ns);
    let mut traces = std::collections::BTreeMap::new();
    // Objects named after the consumer (the nonce Secret: by its name).
    for (trace, group, kind, plural, name) in [
        (
            "Tenant",
            "authentication.liqo.io",
            "Tenant",
            "tenants",
            CONSUMER_ID,
        ),
        ("nonce", "", "Secret", "secrets", "liqo-nonce"),
        (
            "GatewayServer",
            "networking.liqo.io",
            "GatewayServer",
            "gatewayservers",
            CONSUMER_ID,
        ),
        (
            "PublicKey",
            "networking.liqo.io",
            "PublicKey",
            "publickeies",
            CONSUMER_ID,
        ),
        (
            "Configuration",
            "networking.liqo.io",
            "Configuration",
            "configurations",
            CONSUMER_ID,
        ),
    ] {
        let api = if group.is_empty() {
            Api::<DynamicObject>::namespaced_with(
                provider.clone(),
                &ns,
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
            )
        } else {
            liqo(group, kind, plural)
        };
        traces.insert(
            trace,
            usize::from(support::peering::exists(&api, name).await?),
        );
    }
    traces.insert(
        "ClusterRoleBindings",
        Api::<ClusterRoleBinding>::all(provider.clone())
            .list(&bound)
            .await
            .map_err(e)?
            .items
            .len(),
    );
    traces.insert(
        "RoleBindings",
        Api::<RoleBinding>::namespaced(provider.clone(), &ns)
            .list(&bound)
            .await
            .map_err(e)?
            .items
            .len(),
    );
    traces.insert(
        "ResourceSlices",
        liqo("authentication.liqo.io", "ResourceSlice", "resourceslices")
            .list(&replicated)
            .await
            .map_err(e)?
            .items
            .len(),
    );
    traces.insert(
        "NamespaceMaps",
        liqo("offloading.liqo.io", "NamespaceMap", "namespacemaps")
            .list(&replicated)
            .await
            .map_err(e)?
            .items
            .len(),
    );
    Ok(traces)
}

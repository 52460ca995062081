//! A node killed (SIGKILL) in the middle of a K8Slice peering, at every
//! step, converges to exactly one peering once it runs again: with the real
//! Liqo v1.0.0 on two control planes, the consumer node is killed and
//! restarted each time its Allocation reports a new peering step, then the
//! provider node once the peering is up. All peering state lives in the API
//! servers, so every step is create-or-adopt.

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
/// consumer sent): Liqo refuses it once and never looks at it again, so the
/// consumer must notice and start the handshake again.
async fn plant_refused_tenant(provider: &fluidos_testenv::ControlPlane) {
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
    loop {
        match tenants.create(&PostParams::default(), &planted).await {
            Ok(_) => break,
            // The consumer's Tenant is still being deleted (Liqo's finalizer).
            Err(e) if std::time::Instant::now() < deadline => {
                say(&format!("planting the refused Tenant: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                planted.metadata.resource_version = None;
            }
            Err(e) => panic!("could not plant the refused Tenant: {e}"),
        }
    }
    say("planted a Tenant with a wrong signature on the provider");
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario, kill after kill; splitting it hides the order"
)]
async fn nodes_killed_at_every_peering_step_converge_to_one_peering() {
    if let Some(reason) = skip_reason() {
        say(&format!("SKIP: {reason}"));
        return;
    }
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start(1).await;
    let mut p_node = stage.provider_node();
    let mut c_node = stage.consumer_node();
    stage.wait_serving(&p_node, &c_node, 1).await;

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
        if kills == 1 {
            plant_refused_tenant(provider).await;
        }
        c_node = stage.consumer_node();
    }
    assert!(kills >= 3, "killed at only {kills} steps: {seen:?}");
    assert!(
        seen.iter().any(|m| m.ends_with("authenticating again")),
        "the refused Tenant did not start the handshake again: {seen:?}"
    );

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
    c_liqo.stop().await;
    p_liqo.stop().await;
}

//! End to end, delivery without Liqo: the upstream `solver-service.yaml`
//! Solver on a consumer cluster buys the upstream database blueprint from a
//! provider cluster (with kube-controller-manager, kube-scheduler and kwok,
//! so its Deployment really becomes available), and ends with the Secret
//! `credentials-<contract>` on the consumer holding `endpoints`,
//! `username`, `password` and `database`, an Active Allocation on both
//! sides, and the Solver solved through them — with the provider, then the
//! consumer, killed (SIGKILL) and restarted in the middle.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::{Duration, Instant};

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Solver};
use fluidos_testenv::ControlPlane;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};

mod support;

use support::service::ServiceStage;
use support::{NS, eventually};

async fn allocation_state(cp: &ControlPlane) -> Option<(AllocationState, Allocation)> {
    let list = Api::<Allocation>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .ok()?;
    let a = list.items.into_iter().next()?;
    Some((a.status.clone()?.status?, a))
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "two clusters, two nodes, one purchase: the scenario reads top to bottom"
)]
async fn service_solver_gets_working_credentials_without_liqo() {
    let Some(stage) = ServiceStage::start("8", "16Gi").await else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (blueprint and Solver samples come from there)",
        );
        return;
    };
    let (provider, consumer, solver) = (&stage.provider, &stage.consumer, &stage.solver);
    let provider_node = stage.provider_node();
    let consumer_node = stage.consumer_node();
    let logs = [&provider_node, &consumer_node];
    // The provider publishes its Service flavor before the Solver asks.
    stage.wait_service_flavor(&logs).await;

    let started = Instant::now();
    Api::<Solver>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), solver)
        .await
        .unwrap();

    // A crash of the provider in the middle: as soon as it has started on
    // the service (its Allocation has a status), SIGKILL and start it again.
    eventually(
        "the provider Allocation started",
        Duration::from_secs(60),
        &logs,
        || async { allocation_state(provider).await.map(|_| ()) },
    )
    .await;
    provider_node.kill().await;
    let provider_node = stage.provider_node();
    let logs = [&provider_node, &consumer_node];
    // And of the consumer, as soon as its Allocation has a status.
    eventually(
        "the consumer Allocation started",
        Duration::from_secs(60),
        &logs,
        || async { allocation_state(consumer).await.map(|_| ()) },
    )
    .await;
    consumer_node.kill().await;
    let consumer_node = stage.consumer_node();
    let logs = [&provider_node, &consumer_node];

    let secret = eventually(
        "the consumer's credentials Secret",
        Duration::from_secs(120),
        &logs,
        || async {
            let secrets = Api::<Secret>::namespaced(consumer.client(), NS)
                .list(
                    &ListParams::default()
                        .labels("nodecore.fluidos.eu/flavor-service-credentials=true"),
                )
                .await
                .ok()?;
            secrets.items.into_iter().next()
        },
    )
    .await;
    eprintln!(
        "Solver created -> consumer Secret: {:.1?}",
        started.elapsed()
    );
    let data: std::collections::BTreeMap<String, String> = secret
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["database", "endpoints", "password", "username"]);
    assert_eq!(
        (
            data["username"].as_str(),
            data["password"].as_str(),
            data["database"].as_str()
        ),
        ("admin", "admin", "mydb"),
        "the Solver's default configuration for a database"
    );
    assert!(
        data["endpoints"].starts_with("127.0.0.1:"),
        "{}",
        data["endpoints"]
    );

    for (side, cp) in [("provider", &provider), ("consumer", &consumer)] {
        let (state, a) = eventually(
            &format!("the {side} Allocation Active"),
            Duration::from_secs(60),
            &logs,
            || async {
                allocation_state(cp)
                    .await
                    .filter(|(s, _)| *s == AllocationState::Active)
            },
        )
        .await;
        assert_eq!(state, AllocationState::Active, "{side}: {a:?}");
        if side == "consumer" {
            let r = a.status.unwrap().resource_ref.unwrap();
            assert_eq!(r.name.as_deref(), secret.metadata.name.as_deref());
            assert_eq!(r.kind.as_deref(), Some("Secret"));
        }
    }
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    eventually(
        "the Solver solved",
        Duration::from_secs(30),
        &logs,
        || async {
            let s = solvers.get("solver-sample-service").await.ok()?.status?;
            (s.peering == Some(fluidos_api::Phase::Solved)
                && s.solver_phase.as_ref()?.phase == fluidos_api::Phase::Solved)
                .then_some(())
        },
    )
    .await;
}

//! The Helm chart's least-privilege RBAC suffices for a K8Slice peering and
//! its teardown, on both sides: two control planes with the real Liqo
//! v1.0.0 controllers (networking off), the chart (`deploy/helm/fluidos-node`,
//! peering on: its default) rendered and installed on each, and every
//! component the sale and the peering need run out of cluster as its chart
//! ServiceAccount (a TokenRequest token) through a recording proxy: on the
//! provider the local resource manager, the REAR gateway (sale, peer
//! credentials, contract end and revocation) and the REAR manager
//! (provider-side Allocation controller, ResourceSlice class controller,
//! Tenant cleanup); on the consumer the REAR manager (Solver, reservation,
//! purchase, the Allocation controller that peers and unpeers). The
//! network manager is not needed (the consumer's KnownCluster is made by
//! the test) and does not run.
//!
//! The upstream `solver.yaml` (`establishPeering: true`) must end `Solved`
//! with both Allocations `Active` and the virtual node Ready; then the
//! peering ends both ways (see the test). No call is refused but those
//! refused by design (see `refused_by_design`), every call is covered by
//! the chart's grants, and no component logs a refusal.
//!
//! With `serviceDelivery: liqo` on both charts, the same holds for a
//! Service delivered by Liqo (`chart_rbac_suffices_for_a_service_delivered_by_liqo`):
//! the buyer's gateway and rear-manager, the seller's three components.
//!
//! Needs `FLUIDOS_HELM_BIN_DIR`, `FLUIDOS_LIQO_BIN_DIR`,
//! `FLUIDOS_CP_BIN_DIR` and `../shared/reference`; without them the test
//! prints `SKIP: ...` and passes, except in CI, where it fails
//! (`fluidos_testenv::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fluidos_api::{Allocation, Contract, Phase, Solver};
use fluidos_peer_access::grant::{MANAGED_LABEL, service_account_name};
use fluidos_testenv::{ControlPlane, Liqo};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

mod support;

use support::helm::{self, Access, Grant, Running};
use support::peering::{
    CONSUMER_ID, PROVIDER_ID, Phases, TwoClusters, dynamic, exists, new_contract,
    ready_virtual_node, skip_reason, unpeer, until, wait_active, wait_authenticated,
};
use support::{NS, NodeProcess};

/// The chart rendered for a test node with peering on (the default values):
/// its identity on loopback, REAR on `rear_port`, with more `--set`s.
fn render(bin: &Path, node_id: &str, rear_port: u16, extra: &[&str]) -> Vec<Value> {
    let sets: Vec<String> = [
        "common.configMaps.nodeIdentity.ip=127.0.0.1".to_owned(),
        format!("common.configMaps.nodeIdentity.nodeID={node_id}"),
        "rearController.service.gateway.type=ClusterIP".to_owned(),
        format!("rearController.service.gateway.port={rear_port}"),
        format!("rearController.service.gateway.targetPort={rear_port}"),
        "logLevel=info\\,kube=warn".to_owned(),
        // The components run out of cluster (below); pods of the chart's
        // Deployments on the worker would take from the flavor what the
        // sample asks for (all its 110 pods).
        "localResourceManager.replicas=0".to_owned(),
        "rearController.replicas=0".to_owned(),
        "rearManager.replicas=0".to_owned(),
        "networkManager.replicas=0".to_owned(),
    ]
    .into_iter()
    .chain(extra.iter().map(|s| (*s).to_owned()))
    .collect();
    helm::template(bin, &sets, &[])
}

/// The API calls refused by design, per component (each expected, and
/// handled without a word in the log, by the code that makes it):
fn refused_by_design(component: &str, a: &Access) -> bool {
    match component {
        // peer-access credentials/go_consumer.rs `unbind_go_consumer`: revoking a buyer's
        // credentials also looks for the ClusterRoleBinding of the Go
        // consumers' grant, which the chart lets the gateway read only with
        // `rearController.goPeeringGrant` on (off here: nothing to unbind).
        // fluidos-peer-access guard.rs `enforced`: the peer guard's probe, a
        // dry-run create of a namespace its own admission policy refuses
        // (403 from the policy, not from RBAC: the gateway may create
        // namespaces), until the API server enforces the policies.
        "rear-gateway" => {
            (a.scope == "cluster"
                && a.group == "rbac.authorization.k8s.io"
                && a.resource == "clusterrolebindings"
                && a.verb == "get")
                || (a.scope == "cluster"
                    && a.group.is_empty()
                    && a.resource == "namespaces"
                    && a.verb == "create"
                    && a.dry_run)
        }
        // allocation/networking.rs `any_left`: unpeering looks for what
        // Liqo's networking phase made for the provider (the GatewayClient
        // first: refused, it looks no further), which the chart lets the
        // rear-manager read only with `peering.networking` on (off here: it
        // made none).
        // (Both directions: the seller of a Service delivered by Liqo
        // unpeers from its buyer's cluster the same way.)
        "rear-manager" => {
            a.scope.starts_with("liqo-tenant-")
                && a.group == "networking.liqo.io"
                && a.resource == "gatewayclients"
                && a.verb == "get"
        }
        _ => false,
    }
}

/// What one component did, over one process or more (a restart).
struct Seen {
    component: &'static str,
    calls: BTreeMap<Access, BTreeSet<u16>>,
    log: String,
}

impl Seen {
    fn of(runs: &[&Running]) -> Seen {
        let mut calls: BTreeMap<Access, BTreeSet<u16>> = BTreeMap::new();
        for r in runs {
            for (a, codes) in r.calls.all() {
                calls.entry(a).or_default().extend(codes);
            }
        }
        Seen {
            component: runs[0].component,
            calls,
            log: runs
                .iter()
                .map(|r| r.node.log())
                .collect::<Vec<_>>()
                .join("\n--- restarted\n"),
        }
    }
}

/// `side`'s components: no call refused but by design, each one covered by
/// a grant of the chart (`objects`); the grants left unused are reported.
fn check_calls(side: &str, seen: &[Seen], objects: &[Value], report: &mut String) {
    let grants: Vec<Grant> = helm::grants(objects);
    for Seen {
        component,
        calls,
        log,
    } in seen
    {
        for (access, codes) in calls {
            assert!(
                !codes.contains(&403) || refused_by_design(component, access),
                "{side} {component}: {access:?} was forbidden\n{log}"
            );
            if codes.iter().all(|c| *c == 403) {
                continue;
            }
            assert!(
                grants
                    .iter()
                    .any(|g| g.component == *component && g.covers(access)),
                "{side} {component}: {access:?} succeeded without a grant of the chart"
            );
        }
        let refused: Vec<String> = calls
            .iter()
            .filter(|(_, codes)| codes.contains(&403))
            .map(|(a, _)| format!("{a:?}"))
            .collect();
        let lower = log.to_lowercase();
        assert!(
            !lower.contains("forbidden") && !lower.contains(" 403"),
            "{side} {component}: refused calls in its log:\n{log}"
        );
        let unused: Vec<String> = grants
            .iter()
            .filter(|g| g.component == *component)
            .filter(|g| !calls.keys().any(|a| g.covers(a)))
            // Checked within the Role/RoleBinding writes, not requests of
            // their own.
            .filter(|g| g.verb != "bind" && g.verb != "escalate")
            .map(ToString::to_string)
            .collect();
        report.push_str(&format!(
            "{side} {component}: {} distinct calls, all granted; refused by design: {refused:?}; \
             granted but not used:\n  {}\n",
            calls.len(),
            unused.join("\n  ")
        ));
    }
}

/// Waits for every component's `/readyz`, as the chart's readiness probes.
async fn wait_ready(running: &[&Running]) {
    let logs: Vec<&NodeProcess> = running.iter().map(|r| &r.node).collect();
    for r in running {
        until(
            &format!("{} ready (/readyz)", r.component),
            &logs,
            &mut [],
            || async {
                if helm::ready(r.health_port).await {
                    Ok(())
                } else {
                    Err("not ready".to_owned())
                }
            },
        )
        .await;
    }
}

/// A client of the provider's API server acting with the token of the
/// peering kubeconfig sold with Contract `contract` (its Secret there).
async fn sold_kubeconfig_client(provider: &ControlPlane, contract: &str) -> kube::Client {
    let secret = Api::<Secret>::namespaced(provider.client(), NS)
        .get(&format!("peering-credentials-{contract}"))
        .await
        .unwrap();
    let yaml = &secret.data.unwrap()["kubeconfig"].0;
    let sold = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(yaml).unwrap()).unwrap();
    // As sold: the API server itself, with its CA (handed out by the gateway).
    let config = kube::Config::from_custom_kubeconfig(sold, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Creates `solver` on the consumer and waits until it is `Solved`, its
/// Allocations `Active` on both sides and its virtual node Ready; returns
/// its Contract's name and the virtual kubelet's Deployment. `known`: the
/// consumer's Contracts before.
async fn buy(
    (consumer, provider): (&ControlPlane, &ControlPlane),
    (c_liqo, p_liqo): (&mut Liqo, &mut Liqo),
    nodes: &[&NodeProcess],
    solver: &Solver,
    known: &[String],
) -> (String, String) {
    let name = solver.name_any();
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    solvers
        .create(&PostParams::default(), solver)
        .await
        .unwrap();
    let flavors = Api::<fluidos_api::Flavor>::namespaced(provider.client(), NS);
    let contract = until(
        "the consumer's Contract",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            match new_contract(consumer, known).await {
                Ok(c) => Ok(c),
                Err(e) => {
                    let st = solvers.get(&name).await.map(|s| s.status);
                    let discovery =
                        Api::<fluidos_api::Discovery>::namespaced(consumer.client(), NS)
                            .get_opt(&format!("discovery-{name}"))
                            .await
                            .map(|d| d.map(|d| d.status));
                    let offered = flavors.list(&ListParams::default()).await.map(|l| {
                        l.items
                            .into_iter()
                            .map(|f| (f.spec.flavor_type.type_data, f.status))
                            .collect::<Vec<_>>()
                    });
                    Err(format!(
                        "{e}; Solver status: {st:?}; discovery: {discovery:?}; flavors: {offered:?}"
                    ))
                }
            }
        },
    )
    .await;
    let slice = contract.name_any();
    let c_tenant = format!("liqo-tenant-{PROVIDER_ID}");
    wait_authenticated(consumer, nodes, &mut [&mut *c_liqo, &mut *p_liqo]).await;
    let (_node, deployment) =
        ready_virtual_node(consumer, c_liqo, p_liqo, nodes, &c_tenant, &slice).await;
    let message = wait_active(consumer, &slice, nodes, &mut [&mut *c_liqo, &mut *p_liqo]).await;
    assert_eq!(message, "Outgoing peering ready, Allocation is Active");
    until(
        "the Solver Solved",
        nodes,
        &mut [&mut *c_liqo, &mut *p_liqo],
        || async {
            let s = solvers.get(&name).await.map_err(|e| e.to_string())?;
            let p = s.status.and_then(|s| s.solver_phase).unwrap_or_default();
            match p.phase {
                Phase::Solved => Ok(()),
                Phase::Failed | Phase::TimedOut => {
                    panic!("Solver ended {:?}: {:?}", p.phase, p.message)
                }
                _ => Err(format!("{:?}: {:?}", p.phase, p.message)),
            }
        },
    )
    .await;
    wait_active(provider, &slice, nodes, &mut [&mut *c_liqo, &mut *p_liqo]).await;
    (slice, deployment)
}

/// Ends Contract `contract` on the provider (deleted, as `kubectl fluidos
/// release` there does last: the gateway deletes its Allocation and returns
/// the capacity) and waits until, the buyer having nothing left, its
/// credentials are revoked: its ServiceAccount and RoleBindings gone and
/// `buyer` (a client with the sold token) refused.
async fn end_on_provider(
    provider: &ControlPlane,
    liqos: &mut [&mut Liqo],
    nodes: &[&NodeProcess],
    contract: &str,
    buyer: kube::Client,
) {
    Api::<Contract>::namespaced(provider.client(), NS)
        .delete(contract, &DeleteParams::background())
        .await
        .unwrap();
    let account = service_account_name("consumer01");
    let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
    until(
        "the provider's Allocation gone and the buyer's credentials revoked",
        nodes,
        liqos,
        || async {
            let mut left = Vec::new();
            let allocations = Api::<Allocation>::namespaced(provider.client(), NS)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            if allocations
                .items
                .iter()
                .any(|a| a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract))
            {
                left.push("Allocation".to_owned());
            }
            if exists(
                &Api::<Contract>::namespaced(provider.client(), NS),
                contract,
            )
            .await?
            {
                left.push("Contract".to_owned());
            }
            if exists(
                &Api::<ServiceAccount>::namespaced(provider.client(), NS),
                &account,
            )
            .await?
            {
                left.push(format!("ServiceAccount {account}"));
            }
            for b in Api::<RoleBinding>::all(provider.client())
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?
                .items
            {
                left.push(format!(
                    "RoleBinding {}/{}",
                    b.namespace().unwrap_or_default(),
                    b.name_any()
                ));
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    match Api::<Secret>::namespaced(buyer, &format!("liqo-tenant-{CONSUMER_ID}"))
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 401 => {}
        other => panic!("the revoked token still works: {other:?}"),
    }
}

/// Both orders of a K8Slice peering's end, under the chart's RBAC:
/// 1. the consumer unpeers (Solver deleted), then the provider ends its
///    Contract and revokes the buyer's credentials;
/// 2. bought again, the consumer's rear-manager is gone (stopped) when the
///    provider ends the Contract: the provider alone revokes the
///    credentials and takes the consumer's Tenant down (`tenant_cleanup`:
///    drained, Liqo removes the replica, then the nonce and the Tenant go);
///    restarted, the consumer unpeers with credentials the provider no
///    longer accepts.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, run, peer, unpeer, end, check: the scenario reads top to bottom"
)]
async fn chart_rbac_suffices_for_a_k8slice_peering_and_its_teardown() {
    let Some(bin) = helm::helm_bin() else { return };
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let mut phases = Phases::new();
    // One worker: one flavor, which the sample buys whole (110 pods).
    let (stage, mut c_liqo, mut p_liqo) = TwoClusters::start(1).await;
    phases.mark("two control planes, Liqo on both");
    let (provider, consumer) = (&stage.provider, &stage.consumer);
    let (pport, cport) = (stage.provider_port(), stage.consumer_port());
    // Same node identities as the stage made (the chart's ConfigMap
    // replaces its own); the cluster IDs come from Liqo's ConfigMap.
    let provider_objects = render(&bin, "provider01", pport, &[]);
    let consumer_objects = render(
        &bin,
        "consumer01",
        cport,
        // Liqo and the virtual kubelet share the cores with the nodes.
        &["rearManager.pod.extraArgs[0]=--peer-timeout-ms=10000"],
    );
    helm::install(provider, &provider_objects).await;
    helm::install(consumer, &consumer_objects).await;
    // A directory per side: the kubeconfigs are named after the component.
    let (p_dir, c_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let run = async |cp, objects, component, port, dir: &tempfile::TempDir| {
        helm::run_component_with(cp, objects, component, port, dir.path(), true)
            .await
            .0
    };
    let lrm = run(
        provider,
        &provider_objects,
        "local-resource-manager",
        pport,
        &p_dir,
    )
    .await;
    let gateway = run(provider, &provider_objects, "rear-gateway", pport, &p_dir).await;
    let p_manager = run(provider, &provider_objects, "rear-manager", pport, &p_dir).await;
    let c_manager = run(consumer, &consumer_objects, "rear-manager", cport, &c_dir).await;
    let nodes = [&lrm.node, &gateway.node, &p_manager.node, &c_manager.node];
    wait_ready(&[&lrm, &gateway, &p_manager, &c_manager]).await;
    let flavors = Api::<fluidos_api::Flavor>::namespaced(provider.client(), NS);
    until("the provider's flavor", &nodes, &mut [], || async {
        match flavors.list(&ListParams::default()).await {
            Ok(l) if !l.items.is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    phases.mark("charts installed, components ready as their ServiceAccounts");

    // 1. The upstream sample, unchanged; the consumer unpeers first.
    let solver = TwoClusters::sample_solver();
    assert_eq!(solver.spec.establish_peering, Some(true));
    let name = solver.name_any();
    let (slice, deployment) = buy(
        (consumer, provider),
        (&mut c_liqo, &mut p_liqo),
        &nodes,
        &solver,
        &[],
    )
    .await;
    phases.mark("sample Solver Solved, both Allocations Active, virtual node Ready");
    let buyer = sold_kubeconfig_client(provider, &slice).await;
    let p_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let buyer_secrets = Api::<Secret>::namespaced(buyer.clone(), &p_tenant);
    buyer_secrets
        .get_opt("liqo-nonce")
        .await
        .expect("the sold kubeconfig works in the buyer's tenant namespace");
    // Its own Secrets there by name only: not those this node keeps there.
    match buyer_secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("the buyer must not list Secrets: {:?}", other.map(|_| ())),
    }
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
    phases.mark("Solver deleted: peering gone on both sides, unauthenticated");
    end_on_provider(
        provider,
        &mut [&mut c_liqo, &mut p_liqo],
        &nodes,
        &slice,
        buyer,
    )
    .await;
    phases.mark("provider's Contract ended: Allocation gone, credentials revoked");

    // 2. Bought again (its capacity is back); the provider ends the
    // Contract while the consumer's rear-manager is away.
    let mut again = solver.clone();
    again.metadata.name = Some(format!("{name}-2"));
    again.metadata.resource_version = None;
    let (slice2, deployment2) = buy(
        (consumer, provider),
        (&mut c_liqo, &mut p_liqo),
        &nodes,
        &again,
        std::slice::from_ref(&slice),
    )
    .await;
    phases.mark("bought again: Solved, Active, virtual node Ready");
    let buyer = sold_kubeconfig_client(provider, &slice2).await;
    let c_manager_before = Seen::of(&[&c_manager]);
    c_manager.node.kill().await;
    let nodes = [&lrm.node, &gateway.node, &p_manager.node];
    end_on_provider(
        provider,
        &mut [&mut c_liqo, &mut p_liqo],
        &nodes,
        &slice2,
        buyer,
    )
    .await;
    let replicas = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "ResourceSlice",
        "resourceslices",
        &p_tenant,
    );
    let tenants = dynamic(
        &provider.client(),
        "authentication.liqo.io",
        "Tenant",
        "tenants",
        &p_tenant,
    );
    let p_secrets = Api::<Secret>::namespaced(provider.client(), &p_tenant);
    until(
        "the consumer's Tenant, replica and nonce gone from the provider",
        &nodes,
        &mut [&mut c_liqo, &mut p_liqo],
        || async {
            let mut left = Vec::new();
            if exists(&replicas, &slice2).await? {
                left.push("ResourceSlice replica");
            }
            if exists(&tenants, CONSUMER_ID).await? {
                left.push("Tenant");
            }
            if exists(&p_secrets, "liqo-nonce").await? {
                left.push("nonce Secret");
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    phases.mark("consumer away, Contract ended: revoked, Tenant taken down by the provider");
    let c_manager = run(consumer, &consumer_objects, "rear-manager", cport, &c_dir).await;
    wait_ready(&[&c_manager]).await;
    let nodes = [&lrm.node, &gateway.node, &p_manager.node, &c_manager.node];
    unpeer(
        consumer,
        provider,
        &mut c_liqo,
        &mut p_liqo,
        &nodes,
        &format!("{name}-2"),
        &slice2,
        &deployment2,
        false,
    )
    .await;
    let log = c_manager.node.log();
    assert!(
        log.contains("the provider no longer accepts this Contract's credentials"),
        "the consumer's teardown met the revoked credentials:\n{log}"
    );
    phases.mark("consumer back, Solver deleted: its side unpeered, revoked credentials");

    // No call refused (but by design), every one granted by the chart.
    let mut report = String::new();
    check_calls(
        "provider",
        &[
            Seen::of(&[&lrm]),
            Seen::of(&[&gateway]),
            Seen::of(&[&p_manager]),
        ],
        &provider_objects,
        &mut report,
    );
    let mut c_seen = Seen::of(&[&c_manager]);
    for (a, codes) in c_manager_before.calls {
        c_seen.calls.entry(a).or_default().extend(codes);
    }
    c_seen.log = format!("{}\n--- restarted\n{}", c_manager_before.log, c_seen.log);
    check_calls("consumer", &[c_seen], &consumer_objects, &mut report);
    eprintln!("{report}");
    phases.summary();
    for r in [lrm, gateway, p_manager, c_manager] {
        r.node.kill().await;
    }
    drop(c_liqo);
    drop(p_liqo);
}

/// The Allocation of `cp` that is not a seller's companion, with its state.
async fn service_allocation(cp: &ControlPlane) -> Result<(Allocation, String), String> {
    let a = Api::<Allocation>::namespaced(cp.client(), NS)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .find(|a| {
            !a.annotations()
                .contains_key(fluidos_api::service_delivery::OFFLOADING_FOR_ANNOTATION)
        })
        .ok_or_else(|| "no Allocation yet".to_owned())?;
    let state = a
        .status
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .map(ToString::to_string)
        .unwrap_or_default();
    Ok((a, state))
}

/// Service delivery by Liqo (`serviceDelivery: liqo` on both charts), under
/// the charts' RBAC: the upstream message-queue blueprint (hosting policy
/// `Consumer`) bought by the upstream `solver-service-mq.yaml`. The buyer's
/// rear-manager issues the seller's credentials; the seller's gateway sells
/// and stores them, its rear-manager peers with the buyer as Liqo's consumer
/// (the reverse peering) and its gateway's service controller offloads the
/// namespace; the queue's pod runs on the buyer's cluster; both Allocations
/// are `Active`. Ending the Contract on the seller takes it all down, and the
/// buyer's gateway revokes the seller's account. No call is refused (but by
/// design) and every one is covered by the chart's grants.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, run, buy, deliver, end, check: the scenario reads top to bottom"
)]
async fn chart_rbac_suffices_for_a_service_delivered_by_liqo() {
    use fluidos_api::ServiceBlueprint;
    let Some(bin) = helm::helm_bin() else { return };
    if let Some(reason) = skip_reason() {
        fluidos_testenv::skip::unavailable(reason);
        return;
    }
    let Some(samples) = fluidos_testenv::shared_reference_dir().map(|d| d.join("fluidos-samples"))
    else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent (blueprint and Solver samples come from there)",
        );
        return;
    };
    let read = |file: &str| std::fs::read_to_string(samples.join(file)).unwrap();
    let blueprint: ServiceBlueprint =
        serde_yaml::from_str(&read("service-blueprint-mq.yaml")).unwrap();
    let solver: Solver = serde_yaml::from_str(&read("solver-service-mq.yaml")).unwrap();
    let mut phases = Phases::new();
    // The seller is TwoClusters' provider, the buyer its consumer.
    let (stage, mut b_liqo, mut s_liqo) = TwoClusters::start(0).await;
    let (seller, buyer) = (&stage.provider, &stage.consumer);
    let (sport, bport) = (stage.provider_port(), stage.consumer_port());
    // The queue's pod runs on the buyer (hosting policy Consumer).
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
    phases.mark("two control planes, Liqo on both, the blueprint");
    let seller_objects = render(&bin, "provider01", sport, &["serviceDelivery=liqo"]);
    let buyer_objects = render(
        &bin,
        "consumer01",
        bport,
        &[
            "serviceDelivery=liqo",
            "rearManager.pod.extraArgs[0]=--peer-timeout-ms=10000",
            // The upstream message-queue blueprint's RabbitMQ runs as root:
            // a buyer that hosts it sets the `baseline` Pod Security level.
            "peering.podSecurity=baseline",
        ],
    );
    helm::install(seller, &seller_objects).await;
    helm::install(buyer, &buyer_objects).await;
    let (s_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let run = async |cp, objects, component, port, dir: &tempfile::TempDir| {
        helm::run_component_with(cp, objects, component, port, dir.path(), true)
            .await
            .0
    };
    let lrm = run(
        seller,
        &seller_objects,
        "local-resource-manager",
        sport,
        &s_dir,
    )
    .await;
    let s_gateway = run(seller, &seller_objects, "rear-gateway", sport, &s_dir).await;
    let s_manager = run(seller, &seller_objects, "rear-manager", sport, &s_dir).await;
    let b_gateway = run(buyer, &buyer_objects, "rear-gateway", bport, &b_dir).await;
    let b_manager = run(buyer, &buyer_objects, "rear-manager", bport, &b_dir).await;
    let nodes = [
        &lrm.node,
        &s_gateway.node,
        &s_manager.node,
        &b_gateway.node,
        &b_manager.node,
    ];
    wait_ready(&[&lrm, &s_gateway, &s_manager, &b_gateway, &b_manager]).await;
    let flavors = Api::<fluidos_api::Flavor>::namespaced(seller.client(), NS);
    until("the seller's Service flavor", &nodes, &mut [], || async {
        match flavors.list(&ListParams::default()).await {
            Ok(l) if !l.items.is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    phases.mark("charts installed, components ready as their ServiceAccounts");

    Api::<Solver>::namespaced(buyer.client(), NS)
        .create(&PostParams::default(), &solver)
        .await
        .unwrap();
    let contract = until(
        "the seller's Contract",
        &nodes,
        &mut [&mut b_liqo, &mut s_liqo],
        || async { new_contract(seller, &[]).await },
    )
    .await;
    let name = contract.name_any();
    assert!(fluidos_api::service_delivery::by_liqo(&contract.spec));
    let s_tenant = format!("liqo-tenant-{CONSUMER_ID}");
    let (_node, deployment) =
        ready_virtual_node(seller, &mut s_liqo, &mut b_liqo, &nodes, &s_tenant, &name).await;
    until(
        "both Allocations Active",
        &nodes,
        &mut [&mut b_liqo, &mut s_liqo],
        || async {
            for (side, cp) in [("seller", seller), ("buyer", buyer)] {
                let (a, state) = service_allocation(cp).await?;
                if state != "Active" {
                    return Err(format!("{side}'s {:?}", a.status));
                }
            }
            Ok(())
        },
    )
    .await;
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(buyer.client(), &name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        pods.items
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("buyer-kwok")),
        "the queue's pod runs on the buyer"
    );
    phases.mark("delivered by Liqo: both Allocations Active, the pod on the buyer");

    // The seller ends the Contract: the delivery goes, and the buyer's
    // gateway revokes the seller's account.
    Api::<Contract>::namespaced(seller.client(), NS)
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    until(
        "the virtual-kubelet Deployment gone",
        &nodes,
        &mut [],
        || async {
            let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
                seller.client(),
                &s_tenant,
            );
            match exists(&d, &deployment).await? {
                false => Ok(()),
                true => Err("the Deployment is still there".to_owned()),
            }
        },
    )
    .await;
    s_liqo.stop_virtual_kubelet(&deployment).await;
    let account = service_account_name("provider01");
    until(
        "the delivery gone and the seller's account revoked",
        &nodes,
        &mut [&mut b_liqo, &mut s_liqo],
        || async {
            let mut left = Vec::new();
            for (side, cp) in [("seller", seller), ("buyer", buyer)] {
                let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(cp.client());
                if exists(&namespaces, &name).await? {
                    left.push(format!("namespace on the {side}"));
                }
            }
            let (a, state) = service_allocation(buyer).await?;
            if state != "Released" {
                left.push(format!("buyer's Allocation {:?}", a.status));
            }
            if exists(
                &Api::<ServiceAccount>::namespaced(buyer.client(), NS),
                &account,
            )
            .await?
            {
                left.push(format!("{account} on the buyer"));
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("left: {left:?}"))
            }
        },
    )
    .await;
    phases.mark("Contract ended: delivery gone, the seller's account revoked");

    let mut report = String::new();
    check_calls(
        "seller",
        &[
            Seen::of(&[&lrm]),
            Seen::of(&[&s_gateway]),
            Seen::of(&[&s_manager]),
        ],
        &seller_objects,
        &mut report,
    );
    check_calls(
        "buyer",
        &[Seen::of(&[&b_gateway]), Seen::of(&[&b_manager])],
        &buyer_objects,
        &mut report,
    );
    eprintln!("{report}");
    phases.summary();
    for r in [lrm, s_gateway, s_manager, b_gateway, b_manager] {
        r.node.kill().await;
    }
    drop(b_liqo);
    drop(s_liqo);
}

//! The light stage, where this machine cannot run real containers: two
//! real control planes whose nodes are kwok's (nothing runs on them), a
//! provider `fluidos-node` (local resource manager + REAR gateway) and a
//! consumer `fluidos-node` (REAR manager) as host processes, and a K8Slice
//! Solver and a Service Solver followed phase by phase until the Contracts
//! exist on both sides. Without Liqo's controllers and a kubelet there is
//! no peering, pod or service to show.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fluidos_api::network::KnownClusterSpec;
use fluidos_api::service_blueprint::{ServiceBlueprintSpec, ServiceTemplate};
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{Contract, Flavor, HostingPolicy, KnownCluster, ServiceBlueprint, Solver};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::process::{Child, Command};

const NS: &str = "fluidos";

/// The `fluidos-node` binary: next to this one, built on demand.
fn node_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let dir = me.parent().context("no directory for the demo binary")?;
    let node = dir.join("fluidos-node");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = dir.ends_with("release");
    println!("building fluidos-node ...");
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "-q", "-p", "fluidos-node"]);
    if release {
        build.arg("--release");
    }
    if !build.status().context("running cargo build")?.success() {
        bail!("cargo build -p fluidos-node failed");
    }
    Ok(node)
}

fn spawn_node(
    bin: &PathBuf,
    cp: &ControlPlane,
    port: u16,
    components: &str,
    liqo: &str,
    log: &str,
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log)?;
    let child = Command::new(bin)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "info,kube=warn")
        .args([
            "--namespace",
            NS,
            "--components",
            components,
            "--liqo-cluster-id",
            liqo,
        ])
        .args([
            "--rear-bind-address",
            "127.0.0.1",
            "--http-port",
            &port.to_string(),
        ])
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{}", fixtures::free_port()?),
        ])
        .args(["--metrics-bind-address", "0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    Ok(child)
}

fn solver(name: &str, flavor_type: &str, filters: serde_json::Value) -> Solver {
    let mut s = Solver::new(
        name,
        SolverSpec {
            selector: Some(Selector {
                flavor_type: flavor_type.into(),
                filters: Some(filters),
            }),
            intent_id: format!("intent-{name}"),
            find_candidate: Some(true),
            reserve_and_buy: Some(true),
            establish_peering: Some(false),
        },
    );
    s.metadata.namespace = Some(NS.into());
    s
}

/// A PostgreSQL service offer, written for this demo.
fn blueprint() -> ServiceBlueprint {
    let mut b = ServiceBlueprint::new(
        "db-postgres",
        ServiceBlueprintSpec {
            name: "postgres".into(),
            description: "A PostgreSQL database".into(),
            category: "database".into(),
            tags: vec!["database".into(), "postgres".into()],
            hosting_policies: vec![HostingPolicy::Provider],
            templates: vec![ServiceTemplate {
                name: "secret".into(),
                description: Some("credentials".into()),
                service_data: json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "pg-credentials"},
                    "stringData": {"username": "{{ .username }}", "password": "{{ .password }}"}}),
            }],
            configuration_schema: None,
        },
    );
    b.metadata.namespace = Some(NS.into());
    b
}

/// Runs the light stage; with `keep`, leaves everything up until Ctrl-C.
#[expect(
    clippy::too_many_lines,
    reason = "the demo is a script: clusters, nodes, Solvers and the progress view in the order a reader follows them"
)]
pub async fn run(keep: bool) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let node = node_binary()?;
    println!(
        "starting two control planes (provider and consumer; the first run builds Kubernetes, about 12 minutes) ..."
    );
    let (provider, consumer) = tokio::join!(
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        }),
        ControlPlane::start(ControlPlaneOptions {
            workloads: false,
            crd_dirs: vec![fluidos_testenv::crds_dir()],
            ..Default::default()
        }),
    );
    let (provider, consumer) = (provider?, consumer?);
    println!("  provider cluster: {}", provider.server_url());
    println!("  consumer cluster: {}", consumer.server_url());

    let (pport, cport) = (fixtures::free_port()?, fixtures::free_port()?);
    for (cp, id, port) in [
        (&provider, "provider01", pport),
        (&consumer, "consumer01", cport),
    ] {
        fixtures::namespace(cp, NS).await?;
        fixtures::node_identity(cp, NS, id, "127.0.0.1", port).await?;
    }
    fixtures::worker_node(&provider, "worker-1", "8", "32Gi").await?;
    fixtures::worker_node(&provider, "worker-2", "4", "16Gi").await?;
    Api::<ServiceBlueprint>::namespaced(provider.client(), NS)
        .create(&PostParams::default(), &blueprint())
        .await?;
    let rear = format!("127.0.0.1:{pport}");
    // The provider's REAR key, made now as the node would on first start:
    // the consumer pins it and buys over TLS.
    let provider_key =
        fluidos_rear_identity::secret::node_fingerprint(&provider.client(), NS, "provider01")
            .await?
            .to_string();
    println!("  provider REAR key: {provider_key}");
    Api::<KnownCluster>::namespaced(consumer.client(), NS)
        .create(
            &PostParams::default(),
            &KnownCluster::new(
                "knowncluster-provider01",
                KnownClusterSpec {
                    address: rear.clone(),
                    fingerprint: Some(provider_key),
                },
            ),
        )
        .await?;

    let logs = std::env::temp_dir();
    let (plog, clog) = (
        logs.join("fluidos-demo-provider.log"),
        logs.join("fluidos-demo-consumer.log"),
    );
    let mut pnode = spawn_node(
        &node,
        &provider,
        pport,
        "local-resource-manager,rear-gateway",
        "liqo-provider",
        &plog.to_string_lossy(),
    )?;
    let mut cnode = spawn_node(
        &node,
        &consumer,
        cport,
        "rear-manager",
        "liqo-consumer",
        &clog.to_string_lossy(),
    )?;
    println!(
        "provider node: REAR gateway on http://{rear} (log {})",
        plog.display()
    );
    println!(
        "consumer node: Solver/Discovery/Reservation controllers (log {})",
        clog.display()
    );

    let flavors: Api<Flavor> = Api::namespaced(provider.client(), NS);
    // Two worker nodes' K8Slices and the blueprint's Service.
    let mut published = std::collections::BTreeSet::new();
    fluidos_testenv::real_cluster::first_matching(
        flavors.clone(),
        None,
        "three Flavors published by the provider",
        Duration::from_secs(30),
        |f: &Flavor| {
            published.insert(f.name_any());
            published.len() >= 3
        },
    )
    .await
    .with_context(|| format!("see {}", plog.display()))?;
    for f in flavors.list(&ListParams::default()).await? {
        println!(
            "  provider flavor {} ({})",
            f.name_any(),
            f.spec.flavor_type.type_identifier
        );
    }

    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let wanted = [
        solver(
            "demo-k8slice",
            "K8Slice",
            json!({
                "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                "cpuFilter": {"name": "Range", "data": {"min": "2"}},
                "memoryFilter": {"name": "Range", "data": {"min": "4Gi"}}
            }),
        ),
        solver(
            "demo-service",
            "Service",
            json!({"categoryFilter": {"name": "Match", "data": {"value": "database"}}}),
        ),
    ];
    let created = Instant::now();
    for s in &wanted {
        solvers.create(&PostParams::default(), s).await?;
        println!(
            "[{:7.3}s] created Solver {}",
            created.elapsed().as_secs_f64(),
            s.name_any()
        );
    }
    let names: Vec<String> = wanted.iter().map(ResourceExt::name_any).collect();
    crate::progress::follow_solvers(solvers, &names, created, Duration::from_secs(60))
        .await
        .with_context(|| format!("see {} and {}", plog.display(), clog.display()))?;
    for (side, cp) in [("provider", &provider), ("consumer", &consumer)] {
        for c in Api::<Contract>::namespaced(cp.client(), NS)
            .list(&ListParams::default())
            .await?
        {
            println!(
                "  {side} Contract {} — flavor {} bought by {} from {}",
                c.name_any(),
                c.spec.flavor.id(),
                c.spec.buyer.node_id,
                c.spec.seller.node_id
            );
        }
    }
    if keep {
        crate::keep::until_interrupted(&[("provider", &provider), ("consumer", &consumer)]).await;
    }
    println!("stopping ...");
    let _ = pnode.kill().await;
    let _ = cnode.kill().await;
    provider.stop().await;
    consumer.stop().await;
    println!("done in {:.1}s", t0.elapsed().as_secs_f64());
    Ok(())
}

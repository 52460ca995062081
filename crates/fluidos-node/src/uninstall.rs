//! `fluidos-node uninstall`: what the chart's pre-delete hook runs, so that
//! `helm uninstall` ends every sale through the node's own teardown and
//! leaves nothing behind: no finalizer holding a namespace, no peer account
//! or grant, no admission policy.
//!
//! ```text
//!  Solvers, Allocations deleted ──▶ the components' finalizers tear down
//!        │                          (peering, service), then let go
//!        │ all gone, or --teardown-timeout
//!        ▼
//!  Contracts deleted (no finalizer; the provider stops selling)
//!        ▼
//!  the release's Deployments scaled to 0 ──▶ its pods gone (--stop-timeout)
//!        ▼
//!  our finalizers lifted from what is left (a Warning Event on each says
//!  what its teardown would have removed), Flavors' ledger included
//!        ▼
//!  what the node made outside the chart deleted (sweep.rs)
//! ```
//!
//! Each step is idempotent: a hook killed at any point and run again (Helm
//! re-creates it on the next `helm uninstall`) goes on from what is there.
//! Helm then deletes the chart's own objects; the CRDs stay, as Helm leaves
//! the CRDs of `crds/`.

pub mod finalizers;
pub mod sweep;

use std::fmt::Debug;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use fluidos_api::{Allocation, Contract, Flavor, Solver};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::wait::await_condition;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// The components whose Deployments the uninstall stops.
const COMPONENTS: &str = "app.kubernetes.io/component in (local-resource-manager,rear-gateway,rear-manager,network-manager)";

/// `fluidos-node uninstall` flags.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "fluidos-node uninstall",
    about = "Ends every sale through the node's teardown, stops the node and deletes what it made outside its Helm chart (the chart's pre-delete hook)."
)]
pub struct UninstallArgs {
    /// Namespace of the node's FLUIDOS resources and Deployments.
    #[arg(long, env = "FLUIDOS_NAMESPACE", default_value = fluidos_api::DEFAULT_NAMESPACE)]
    pub namespace: String,

    /// Helm release whose Deployments run the node
    /// (`app.kubernetes.io/instance`).
    #[arg(long, env = "FLUIDOS_RELEASE")]
    pub release: String,

    /// How long the components may take to tear down the Allocations
    /// (unpeer, remove a service) before their finalizers are lifted.
    #[arg(long, default_value_t = 120)]
    pub teardown_timeout_seconds: u64,

    /// How long the node's pods may take to stop once scaled to zero.
    #[arg(long, default_value_t = 60)]
    pub stop_timeout_seconds: u64,

    /// Kubeconfig file; default: KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Parses `argv` (after `uninstall`) and runs; what it did goes to stdout,
/// one line a step, for `kubectl logs` of the hook's Job.
pub async fn main(argv: impl IntoIterator<Item = std::ffi::OsString>) -> std::process::ExitCode {
    let args = match UninstallArgs::try_parse_from(
        std::iter::once("fluidos-node uninstall".into()).chain(argv),
    ) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fluidos-node uninstall: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn client(args: &UninstallArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        None => kube::Config::infer().await?,
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
    };
    Ok(kube::Client::try_from(config)?)
}

/// The whole uninstall; see the module doc.
pub async fn run(args: &UninstallArgs) -> anyhow::Result<()> {
    let client = client(args).await?;
    let ns = args.namespace.as_str();
    let recorder = fluidos_controller::events::recorder(client.clone(), "fluidos-node-uninstall");
    let teardown = Duration::from_secs(args.teardown_timeout_seconds);

    let solvers = delete_all(&Api::<Solver>::namespaced(client.clone(), ns)).await?;
    let allocations_api = Api::<Allocation>::namespaced(client.clone(), ns);
    let allocations = delete_all(&allocations_api).await?;
    let started = std::time::Instant::now();
    let stuck = wait_gone(&allocations_api, &allocations, teardown).await;
    println!(
        "deleted {} Solvers and {} Allocations; {} torn down by the node in {:.1?}{}",
        solvers.len(),
        allocations.len(),
        allocations.len() - stuck.len(),
        started.elapsed(),
        if stuck.is_empty() {
            String::new()
        } else {
            format!(
                ", {} not within {teardown:?}: {}",
                stuck.len(),
                stuck.join(", ")
            )
        }
    );
    let contracts = delete_all(&Api::<Contract>::namespaced(client.clone(), ns)).await?;
    println!("deleted {} Contracts", contracts.len());

    let started = std::time::Instant::now();
    let stopped = stop_node(&client, ns, &args.release, args.stop_timeout_seconds).await?;
    println!("{stopped} in {:.1?}", started.elapsed());

    // A purchase the gateway answered during the teardown may have made an
    // Allocation since: with the node stopped, none gets a teardown, so it
    // is deleted here and its finalizer lifted below like a stuck one.
    let late = delete_all(&allocations_api).await?;
    if !late.is_empty() {
        let names: Vec<&str> = late.iter().map(|(n, _)| n.as_str()).collect();
        println!(
            "deleted {} Allocations made during the uninstall: {}",
            late.len(),
            names.join(", ")
        );
    }
    let why = if stuck.is_empty() && late.is_empty() {
        "the node is stopped".to_owned()
    } else {
        format!("the teardown did not finish within {teardown:?} and the node is stopped")
    };
    let mut lifted = lift(&allocations_api, &recorder, &why).await?;
    lifted += lift(
        &Api::<Flavor>::namespaced(client.clone(), ns),
        &recorder,
        "the node is stopped",
    )
    .await?;
    lifted += lift(
        &Api::<Contract>::namespaced(client.clone(), ns),
        &recorder,
        "the node is stopped",
    )
    .await?;
    println!("lifted this node's finalizers from {lifted} objects");

    for kind in sweep::Kind::ALL {
        if kind == sweep::Kind::PolicyBinding {
            // The peers' guards go only once no peer can act here.
            sweep::until_no_peer_left(&client, Duration::from_secs(args.stop_timeout_seconds))
                .await?;
        }
        let deleted = sweep::sweep(&client, ns, kind).await?;
        if !deleted.is_empty() {
            println!(
                "deleted {} {}: {}",
                deleted.len(),
                kind.plural(),
                deleted.join(", ")
            );
        }
    }
    println!("done: what the node made outside its chart is deleted");
    Ok(())
}

/// Deletes every object in `api`'s namespace; returns them as (name, uid).
async fn delete_all<K>(api: &Api<K>) -> anyhow::Result<Vec<(String, Option<String>)>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let items = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}s", K::kind(&())))?
        .items;
    let mut deleted = Vec::new();
    for obj in items {
        let name = obj.name_any();
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("deleting {} {name}", K::kind(&())));
            }
        }
        deleted.push((name, obj.uid()));
    }
    Ok(deleted)
}

/// Watches each object until it is gone, for at most `timeout` in all;
/// returns the names of those still there.
async fn wait_gone<K>(
    api: &Api<K>,
    objects: &[(String, Option<String>)],
    timeout: Duration,
) -> Vec<String>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let waits = objects.iter().map(|(name, uid)| {
        let api = api.clone();
        async move {
            let gone = tokio::time::timeout(
                timeout,
                await_condition(api, name, move |o: Option<&K>| match (o, uid) {
                    (None, _) => true,
                    // Another object of the same name is not this one.
                    (Some(o), Some(uid)) => o.meta().uid.as_ref() != Some(uid),
                    (Some(_), None) => false,
                }),
            )
            .await;
            (name.clone(), matches!(gone, Ok(Ok(_))))
        }
    });
    futures::future::join_all(waits)
        .await
        .into_iter()
        .filter_map(|(name, gone)| (!gone).then_some(name))
        .collect()
}

/// Scales the release's Deployments to zero and watches their pods until
/// they are gone (at most `timeout_seconds`): a component still running
/// would put back what the sweep deletes.
async fn stop_node(
    client: &kube::Client,
    ns: &str,
    release: &str,
    timeout_seconds: u64,
) -> anyhow::Result<String> {
    let selector = format!("app.kubernetes.io/instance={release},{COMPONENTS}");
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let listed = deployments
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the node's Deployments")?
        .items;
    let zero = Patch::Merge(serde_json::json!({"spec": {"replicas": 0}}));
    for d in &listed {
        deployments
            .patch(&d.name_any(), &PatchParams::default(), &zero)
            .await
            .with_context(|| format!("scaling Deployment {} to zero", d.name_any()))?;
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let running: Vec<(String, Option<String>)> = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the node's pods")?
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid()))
        .collect();
    let timeout = Duration::from_secs(timeout_seconds);
    let left = wait_gone(&pods, &running, timeout).await;
    if left.is_empty() {
        Ok(format!(
            "scaled {} Deployments to zero; their {} pods are gone",
            listed.len(),
            running.len()
        ))
    } else {
        anyhow::bail!(
            "scaled {} Deployments to zero, but pods {} still run after {timeout:?}: they would put back what the uninstall deletes; run it again once they stopped",
            listed.len(),
            left.join(", ")
        )
    }
}

/// Lifts this node's finalizers from every object in `api`'s namespace,
/// keeping any other's, each with a Warning Event saying what may be left.
/// Returns how many objects it changed.
async fn lift<K>(api: &Api<K>, recorder: &Recorder, why: &str) -> anyhow::Result<usize>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let kind = K::kind(&());
    let mut changed = 0;
    let listed = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {kind}s"))?
        .items;
    for obj in listed {
        let name = obj.name_any();
        if let Some(lifted) = lift_one(api, obj)
            .await
            .with_context(|| format!("lifting the finalizers of {kind} {name}"))?
        {
            changed += 1;
            let event = Event {
                type_: EventType::Warning,
                reason: "FinalizerLifted".into(),
                note: Some(finalizers::note(&lifted.1, why)),
                action: "Uninstall".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &lifted.0).await {
                println!("could not record an Event on {kind} {name}: {e}");
            }
        }
    }
    Ok(changed)
}

/// How often a finalizer write that lost a race is tried again.
const LIFT_ATTEMPTS: usize = 5;

/// Lifts this node's finalizers from `obj`. The write names the
/// resourceVersion read, so another controller's finalizer added meanwhile
/// is never dropped: on a conflict the object is read again.
async fn lift_one<K>(
    api: &Api<K>,
    mut obj: K,
) -> Result<
    Option<(
        k8s_openapi::api::core::v1::ObjectReference,
        Vec<finalizers::Ours>,
    )>,
    kube::Error,
>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let name = obj.name_any();
    let mut attempt = 0;
    loop {
        let Some(stripped) = finalizers::strip(obj.finalizers()) else {
            return Ok(None);
        };
        // The write is conditioned on the version read; an object read
        // without one is read again (never an unconditional write).
        if obj.resource_version().is_none() {
            match api.get_opt(&name).await? {
                Some(fresh) if fresh.resource_version().is_some() => {
                    obj = fresh;
                    continue;
                }
                Some(_) | None => return Ok(None),
            }
        }
        let patch = Patch::Merge(serde_json::json!({
            "metadata": {
                "resourceVersion": obj.resource_version(),
                "finalizers": stripped.kept,
            }
        }));
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(Some((obj.object_ref(&()), stripped.lifted))),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt + 1 < LIFT_ATTEMPTS => {
                attempt += 1;
                match api.get_opt(&name).await? {
                    Some(fresh) => obj = fresh,
                    None => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

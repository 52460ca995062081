//! A real cluster (`fluidos_testenv::RealNode`) with the fluidos-node
//! image imported, and the chart installed on it as an operator would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fluidos_testenv::{ControlPlane, ImageSpec};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::runtime::wait::await_condition;

use super::NS;
use super::helm;
use super::image::{ImageLayout, read_image, static_binary};
use fluidos_testenv::real_cluster;

/// `GET url` from the host, as a client outside the cluster would make it,
/// to an address kube-proxy serves (a NodePort) or a pod's. kube-proxy
/// programs a Service's rules a moment after its endpoints are ready and
/// publishes no sign of having done so, so a refused connection is tried
/// again a bounded number of times; every attempt has a timeout.
pub async fn get_from_host(url: &str) -> reqwest::Response {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut last = String::new();
    for _ in 0..40 {
        match client.get(url).send().await {
            Ok(response) => return response,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("GET {url} failed for 10s: {last}");
}

/// What a test on real clusters with the image needs.
pub struct Prerequisites {
    /// The static binary the image is made of.
    pub bin: PathBuf,
    /// `deploy/Containerfile`'s layout.
    pub layout: ImageLayout,
    /// The helm binary.
    pub helm_bin: PathBuf,
}

/// The static binary, root and the real-node packages, and helm; `None`
/// after saying why where one is missing. Without the binary the test is
/// deferred in CI (it is built only for CI's second pass, which `.ci/run`
/// checks ran the test; [`static_binary`]); any other missing one skips,
/// or fails in CI (`fluidos_testenv::skip`).
pub fn prerequisites() -> Option<Prerequisites> {
    let bin = static_binary()?;
    if let Err(e) = fluidos_testenv::real_node_prerequisites() {
        fluidos_testenv::skip::unavailable(e);
        return None;
    }
    let helm_bin = helm::helm_bin()?;
    let (_, layout) = read_image(&bin);
    Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    })
}

/// `--kubeconfig=<admin>` of `cp`, for helm.
pub fn kubeconfig_flag(cp: &ControlPlane) -> String {
    format!("--kubeconfig={}", cp.kubeconfig_path().display())
}

/// `helm install` of the chart on this real cluster
/// (`fluidos_testenv::real_cluster::install_fluidos`); its four
/// components rolled out.
pub async fn install_chart(helm_bin: &Path, cp: &ControlPlane, extra_sets: &[String]) {
    let deployments = real_cluster::install_fluidos(&helm_of(helm_bin), cp, extra_sets)
        .await
        .unwrap();
    assert_eq!(deployments, 4);
}

fn helm_of(helm_bin: &Path) -> real_cluster::Helm {
    real_cluster::Helm::in_dir(helm_bin.parent().unwrap()).unwrap()
}

/// The provider's chart (its node sold), then the consumer's, pinned to the
/// provider's address and key (`fluidos_testenv::real_cluster::install_pair`).
pub async fn install_pair(
    helm_bin: &Path,
    provider: &ControlPlane,
    consumer: &ControlPlane,
    extra_sets: &[String],
) {
    real_cluster::install_pair(&helm_of(helm_bin), provider, consumer, extra_sets)
        .await
        .unwrap();
}

/// Starts a cluster with one real node and the fluidos-node image built
/// from `bin` imported, plus `images`.
pub async fn start(bin: &Path, _layout: &ImageLayout, images: Vec<ImageSpec>) -> ControlPlane {
    let image = real_cluster::NodeImage::load(bin).unwrap();
    real_cluster::start(&image, images).await.unwrap()
}

/// Labels the real node as one whose resources are sold.
pub async fn sell_node(cp: &ControlPlane) {
    real_cluster::sell_node(cp).await.unwrap();
}

/// Waits (watching) until Deployment `name` has rolled out.
pub async fn wait_available(cp: &ControlPlane, _deployments: &Api<Deployment>, name: &str) {
    real_cluster::wait_rolled_out(cp, NS, name).await.unwrap();
}

/// [`wait_available`] in namespace `ns`.
pub async fn wait_available_in(
    cp: &ControlPlane,
    _deployments: &Api<Deployment>,
    ns: &str,
    name: &str,
) {
    real_cluster::wait_rolled_out(cp, ns, name).await.unwrap();
}

/// Waits (watching, never polling) for the first object of `api` that
/// matches `labels` and `accept`, for at most `timeout`; fails naming `what`.
pub async fn first_matching<K>(
    api: Api<K>,
    labels: Option<&str>,
    what: &str,
    timeout: Duration,
    accept: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    real_cluster::first_matching(api, labels, what, timeout, accept)
        .await
        .unwrap()
}

/// What an operator would look at when a real cluster is stuck: the FLUIDOS
/// and Liqo objects, every pod, and the logs of the release's components.
pub async fn dump(cp: &ControlPlane, side: &str) -> String {
    let mut out = format!("===== {side} =====\n");
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        async move {
            let mut kubectl = cp.kubectl().await.unwrap();
            kubectl.args(&args);
            let o = kubectl.output().unwrap();
            format!(
                "$ kubectl {}\n{}{}\n",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        }
    };
    out += &run(&["get", "pods", "-A", "-o", "wide"]).await;
    out += &run(&[
        "get",
        "solvers,allocations,contracts,reservations",
        "-A",
        "-o",
        "yaml",
    ])
    .await;
    out += &run(&[
        "get",
        "foreignclusters,virtualnodes,resourceslices,tenants,namespaceoffloadings",
        "-A",
        "-o",
        "yaml",
    ])
    .await;
    out += &run(&["get", "events", "-A", "--sort-by=.lastTimestamp"]).await;
    for component in ["rear-manager", "rear-gateway"] {
        let selector = format!("app.kubernetes.io/component={component}");
        out += &run(&["-n", NS, "logs", "-l", &selector, "--tail=80"]).await;
    }
    out += &run(&[
        "-n",
        "liqo",
        "logs",
        "deployment/liqo-controller-manager",
        "--tail=80",
    ])
    .await;
    out
}

/// Waits (watching) for the first Flavor the LRM publishes.
pub async fn first_flavor(cp: &ControlPlane) -> fluidos_api::Flavor {
    let flavors: Api<fluidos_api::Flavor> = Api::namespaced(cp.client(), NS);
    first_matching(
        flavors,
        None,
        "Flavor of the real node",
        Duration::from_secs(60),
        |_| true,
    )
    .await
}

/// `helm install` of Liqo's own chart on this real cluster
/// (`fluidos_testenv::real_cluster::install_liqo`).
pub async fn install_liqo(
    helm_bin: &Path,
    cp: &ControlPlane,
    liqo: &fluidos_testenv::LiqoBinaries,
    cluster_id: &str,
) {
    real_cluster::install_liqo(&helm_of(helm_bin), cp, liqo, cluster_id)
        .await
        .unwrap();
}

/// `helm uninstall <release>` as an operator runs it, then deletes the
/// namespace it was installed in (Helm leaves namespaces it created) and
/// watches it until it is gone: a namespace stuck Terminating fails here.
pub async fn uninstall(helm_bin: &Path, cp: &ControlPlane, release: &str, namespace: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let kubeconfig = kubeconfig_flag(cp);
    // The chart's uninstall hook reports each step; its Job is deleted once
    // it succeeded, so its log is followed from the start.
    let hook_log = (release == "fluidos")
        .then(|| tokio::spawn(follow_uninstall_hook(cp.client(), namespace.to_owned())));
    let started = std::time::Instant::now();
    let args: Vec<String> = [
        "uninstall",
        release,
        "--namespace",
        namespace,
        "--wait",
        &kubeconfig,
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let bin = helm_bin.to_owned();
    // Off the runtime's thread: the log above is read meanwhile.
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        helm::helm(&bin, &args)
    })
    .await
    .unwrap();
    let helm_took = started.elapsed();
    if let Some(log) = hook_log {
        match tokio::time::timeout(Duration::from_secs(10), log).await {
            Ok(Ok(lines)) => lines
                .iter()
                .for_each(|l| eprintln!("  uninstall hook: {l}")),
            _ => eprintln!("  uninstall hook: its log could not be read"),
        }
    }
    let namespaces: Api<Namespace> = Api::all(cp.client());
    match namespaces.delete(namespace, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => panic!("deleting namespace {namespace}: {e}"),
    }
    let gone = until_gone(namespaces.clone(), namespace, Duration::from_secs(120)).await;
    eprintln!(
        "helm uninstall {release} -n {namespace}: {helm_took:.1?}, namespace gone {:.1?} later",
        started.elapsed() - helm_took
    );
    if !gone {
        let left = namespaces.get_opt(namespace).await.unwrap();
        panic!(
            "namespace {namespace} is stuck Terminating after helm uninstall {release}: {:?}\n{}",
            left.and_then(|n| n.status),
            leftovers(cp, &[]).await.join("\n")
        );
    }
}

/// What is left on a cluster of FLUIDOS and Liqo, one line each: every
/// namespace but Kubernetes' own and `keep`, every object of a `liqo.io` or
/// `fluidos.eu` CRD, every ServiceAccount, Role, ClusterRole and binding
/// whose name says `fluidos` or `liqo`, every webhook configuration and
/// every ValidatingAdmissionPolicy and binding (this cluster has none of
/// its own).
pub async fn leftovers(cp: &ControlPlane, keep: &[&str]) -> Vec<String> {
    let mut left = leftover_namespaces_and_custom_objects(cp, keep).await;
    left.extend(leftover_accounts_and_admission(cp).await);
    left
}

/// Objects of `api` whose name passes `ours`, as `Kind [namespace/]name`.
async fn names<K>(api: Api<K>, kind: &str, ours: impl Fn(&str) -> bool) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::ResourceExt;
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|o| ours(&o.name_any()))
        .map(|o| match o.namespace() {
            Some(ns) => format!("{kind} {ns}/{}", o.name_any()),
            None => format!("{kind} {}", o.name_any()),
        })
        .collect()
}

async fn leftover_namespaces_and_custom_objects(cp: &ControlPlane, keep: &[&str]) -> Vec<String> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::ResourceExt;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let client = cp.client();
    let kubernetes = ["default", "kube-system", "kube-public", "kube-node-lease"];
    let mut left = Vec::new();
    for ns in Api::<Namespace>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
    {
        let name = ns.name_any();
        if !kubernetes.contains(&name.as_str()) && !keep.contains(&name.as_str()) {
            let phase = ns.status.and_then(|s| s.phase).unwrap_or_default();
            left.push(format!("Namespace {name} ({phase})"));
        }
    }
    for crd in Api::<CustomResourceDefinition>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items
    {
        let spec = &crd.spec;
        if !(spec.group.ends_with("liqo.io") || spec.group.ends_with("fluidos.eu")) {
            continue;
        }
        let Some(version) = spec.versions.iter().find(|v| v.served) else {
            continue;
        };
        let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        left.extend(names(api, &spec.names.kind, |_| true).await);
    }
    left
}

async fn leftover_accounts_and_admission(cp: &ControlPlane) -> Vec<String> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration as Mutating, ValidatingAdmissionPolicy as Policy,
        ValidatingAdmissionPolicyBinding as PolicyBinding,
        ValidatingWebhookConfiguration as Validating,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let c = cp.client();
    // Test support's own binding (the API server's kubelet client) aside.
    let named = |n: &str| {
        (n.contains("fluidos") || n.contains("liqo")) && !n.starts_with("fluidos-testenv:")
    };
    let any = |_: &str| true;
    [
        names(
            Api::<ServiceAccount>::all(c.clone()),
            "ServiceAccount",
            named,
        )
        .await,
        names(Api::<Role>::all(c.clone()), "Role", named).await,
        names(Api::<RoleBinding>::all(c.clone()), "RoleBinding", named).await,
        names(Api::<ClusterRole>::all(c.clone()), "ClusterRole", named).await,
        names(
            Api::<ClusterRoleBinding>::all(c.clone()),
            "ClusterRoleBinding",
            named,
        )
        .await,
        names(
            Api::<Validating>::all(c.clone()),
            "ValidatingWebhookConfiguration",
            any,
        )
        .await,
        names(
            Api::<Mutating>::all(c.clone()),
            "MutatingWebhookConfiguration",
            any,
        )
        .await,
        names(
            Api::<Policy>::all(c.clone()),
            "ValidatingAdmissionPolicy",
            any,
        )
        .await,
        names(
            Api::<PolicyBinding>::all(c.clone()),
            "ValidatingAdmissionPolicyBinding",
            any,
        )
        .await,
    ]
    .concat()
}

/// Watches `name` in `api` until it is gone, for at most `timeout`; false
/// if it is still there then. (kube's `is_deleted` compares UIDs, so the
/// UID of the object there now is read first.)
pub async fn until_gone<K>(api: Api<K>, name: &str, timeout: Duration) -> bool
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    use kube::ResourceExt;
    use kube::runtime::wait::conditions;
    let Some(uid) = api.get_opt(name).await.unwrap().and_then(|o| o.uid()) else {
        return true;
    };
    tokio::time::timeout(
        timeout,
        await_condition(api, name, conditions::is_deleted(&uid)),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

/// The upstream sample Solver (`fluidos-samples/solver.yaml`, a K8Slice with
/// `establishPeering: true`) without its `podsFilter: Match 110`: that holds
/// only where a flavor's pods are the node's allocatable pods whatever runs
/// there, which the Go LRM publishes (the reference's bug 23, "pods usage
/// not subtracted"); this LRM subtracts the pods bound to the node, and a
/// real node always runs some (Liqo's, ours), so the filter would exclude
/// every real flavor. Without it the Solver takes the flavor's pods, as
/// upstream does.
pub fn upstream_k8slice_solver(reference: &Path) -> fluidos_api::Solver {
    let mut solver: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(reference.join("fluidos-samples/solver.yaml")).unwrap(),
    )
    .unwrap();
    solver["spec"]["selector"]["filters"]
        .as_object_mut()
        .unwrap()
        .remove("podsFilter");
    serde_json::from_value(solver).unwrap()
}

/// A restricted busybox pod `web` in `namespace` answering HTTP with its
/// own name (`fluidos_testenv::real_cluster::samples::offloaded_pod`).
pub fn offloaded_pod(namespace: &str) -> k8s_openapi::api::core::v1::Pod {
    real_cluster::samples::offloaded_pod(namespace).unwrap()
}

/// Whether a pod runs.
pub fn running(pod: Option<&k8s_openapi::api::core::v1::Pod>) -> bool {
    real_cluster::running(pod)
}

/// Creates namespace `name` on the consumer and offloads it; the provider's
/// namespace (`fluidos_testenv::real_cluster::offload_namespace`).
pub async fn offload_namespace(consumer: &ControlPlane, name: &str) -> String {
    real_cluster::offload_namespace(consumer, name)
        .await
        .unwrap()
}

/// The log of the chart's uninstall hook, followed from its pod's start.
async fn follow_uninstall_hook(client: kube::Client, namespace: String) -> Vec<String> {
    use futures::{AsyncBufReadExt, TryStreamExt};
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let pod = first_matching(
        pods.clone(),
        Some("app.kubernetes.io/component=uninstall"),
        "uninstall hook pod",
        Duration::from_secs(120),
        |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase != "Pending")
        },
    )
    .await;
    let params = kube::api::LogParams {
        follow: true,
        ..Default::default()
    };
    match pods.log_stream(&pod.name_any(), &params).await {
        Ok(stream) => stream.lines().try_collect().await.unwrap_or_default(),
        Err(e) => vec![format!("(no log: {e})")],
    }
}

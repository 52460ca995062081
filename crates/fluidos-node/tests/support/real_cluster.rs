//! A real cluster (`fluidos_testenv::RealNode`) with the fluidos-node
//! image imported, and the chart installed on it as an operator would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fluidos_testenv::{ControlPlane, ControlPlaneOptions, ImageSpec};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;

use super::NS;
use super::helm;
use super::image::{
    ImageLayout, REAL_IMAGE_REPOSITORY, REAL_IMAGE_TAG, node_image, read_image, static_binary,
};

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
/// after printing `SKIP: ...` where one is missing (outside CI for the
/// packages and helm; the binary is built only for CI's second run, which
/// `.ci/run` checks did not skip).
pub fn prerequisites() -> Option<Prerequisites> {
    let bin = match static_binary() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("SKIP: {why}");
            return None;
        }
    };
    if let Err(e) = fluidos_testenv::real_node_prerequisites() {
        assert!(std::env::var_os("CI").is_none(), "{e}");
        eprintln!("SKIP: {e}");
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

/// `helm install` of the chart as an operator would run it on this real
/// cluster: the local image, never pulled; services only (no Liqo here
/// yet); the node's own address as its identity and the API server URL
/// peers can reach; `extra_sets` after those. Then waits (watching) until
/// every component has rolled out.
pub async fn install_chart(helm_bin: &Path, cp: &ControlPlane, extra_sets: &[String]) {
    let node = cp.real_node().expect("a real-node cluster");
    let chart = helm::chart_dir();
    let kubeconfig = kubeconfig_flag(cp);
    let mut sets = vec![
        format!("image.repository={REAL_IMAGE_REPOSITORY}"),
        format!("tag={REAL_IMAGE_TAG}"),
        "pullPolicy=Never".to_owned(),
        format!("common.configMaps.nodeIdentity.ip={}", node.node_ip()),
        format!("apiServer.address={}", cp.server_url()),
    ];
    sets.extend_from_slice(extra_sets);
    let mut install = vec![
        "install",
        "fluidos",
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        &kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm::helm(helm_bin, &install);
    let deployments: Api<Deployment> = Api::namespaced(cp.client(), NS);
    let names: Vec<String> = deployments
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for name in &names {
        wait_available(cp, &deployments, name).await;
    }
}

/// The provider's chart (its node sold), then the consumer's, pinned to the
/// provider's address and key as the provider's NOTES tell its operator;
/// `extra_sets` on both.
pub async fn install_pair(
    helm_bin: &Path,
    provider: &ControlPlane,
    consumer: &ControlPlane,
    extra_sets: &[String],
) {
    let provider_ip = provider.real_node().unwrap().node_ip().to_string();
    sell_node(provider).await;
    install_chart(helm_bin, provider, extra_sets).await;
    let fingerprints: Api<ConfigMap> = Api::namespaced(provider.client(), NS);
    let has_fingerprint = |cm: Option<&ConfigMap>| {
        cm.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.contains_key("fingerprint"))
    };
    let fingerprint = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(
            fingerprints,
            "fluidos-node-rear-fingerprint",
            has_fingerprint,
        ),
    )
    .await
    .expect("the provider published no REAR fingerprint")
    .unwrap()
    .and_then(|cm| cm.data)
    .and_then(|mut d| d.remove("fingerprint"))
    .unwrap();
    install_chart(
        helm_bin,
        consumer,
        &[
            extra_sets,
            &[format!(
                "rearManager.peers={{{provider_ip}:30000#{fingerprint}}}"
            )],
        ]
        .concat(),
    )
    .await;
}

/// Starts a cluster with one real node and the fluidos-node image built
/// from `bin` imported, plus `images`.
pub async fn start(bin: &Path, layout: &ImageLayout, images: Vec<ImageSpec>) -> ControlPlane {
    let mut all = vec![node_image(bin, layout)];
    all.extend(images);
    ControlPlane::start(ControlPlaneOptions {
        real_node: true,
        images: all,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Labels the real node as one whose resources are sold (the chart's
/// default `nodeResourceLabel`).
pub async fn sell_node(cp: &ControlPlane) {
    let node = cp.real_node().expect("a real-node cluster");
    Api::<Node>::all(cp.client())
        .patch(
            node.name(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"node-role.fluidos.eu/resources": "true"}}
            })),
        )
        .await
        .unwrap();
}

/// Waits (watching) until Deployment `name` has rolled out; else fails with
/// every pod's state and logs and the node's.
pub async fn wait_available(cp: &ControlPlane, deployments: &Api<Deployment>, name: &str) {
    wait_available_in(cp, deployments, NS, name).await;
}

/// [`wait_available`] in namespace `ns`.
pub async fn wait_available_in(
    cp: &ControlPlane,
    deployments: &Api<Deployment>,
    ns: &str,
    name: &str,
) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::wait::{await_condition, conditions};
    let available = await_condition(
        deployments.clone(),
        name,
        conditions::is_deployment_completed(),
    );
    if tokio::time::timeout(Duration::from_secs(180), available)
        .await
        .is_ok()
    {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(cp.client(), ns);
    let mut report = String::new();
    for pod in pods.list(&Default::default()).await.unwrap().items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let logs = pods
            .logs(&pod_name, &Default::default())
            .await
            .unwrap_or_else(|e| e.to_string());
        let statuses = pod.status.map(|s| s.container_statuses);
        report.push_str(&format!("--- {pod_name}: {statuses:?}\n{logs}\n"));
    }
    let node = cp.real_node().map(fluidos_testenv::RealNode::log_tail);
    panic!("Deployment {name} not available:\n{report}\n{node:?}");
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
    let mut config = kube::runtime::watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let applied =
        kube::runtime::WatchStreamExt::applied_objects(kube::runtime::watcher(api, config));
    let matching = futures::StreamExt::filter_map(applied, |object| {
        let object = object.ok().filter(|o| accept(o));
        async move { object }
    });
    futures::pin_mut!(matching);
    tokio::time::timeout(timeout, futures::StreamExt::next(&mut matching))
        .await
        .unwrap_or_else(|_| panic!("no {what} after {timeout:?}"))
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

/// `helm install` of Liqo's own chart on this real cluster, as its docs
/// give it with networking disabled (no WireGuard or Geneve in this kernel),
/// and the metric agent, proxy and telemetry off (each needs an image of
/// its own); the images are the local ones (`LiqoBinaries::chart_images`,
/// imported at the cluster's start), never pulled. Waits until it rolled out.
pub async fn install_liqo(
    helm_bin: &Path,
    cp: &ControlPlane,
    liqo: &fluidos_testenv::LiqoBinaries,
    cluster_id: &str,
) {
    let chart = liqo.chart_dir();
    let kubeconfig = kubeconfig_flag(cp);
    let sets = [
        format!("tag={}", fluidos_testenv::liqo_version().unwrap()),
        "pullPolicy=Never".to_owned(),
        "networking.enabled=false".to_owned(),
        "metricAgent.enabled=false".to_owned(),
        "proxy.enabled=false".to_owned(),
        "telemetry.enabled=false".to_owned(),
        format!("discovery.config.clusterID={cluster_id}"),
        // What `liqoctl install` finds out by itself.
        format!(
            "ipam.podCIDR={}",
            cp.real_node().expect("a real node").pod_cidr()
        ),
        format!(
            "ipam.serviceCIDR={}",
            fluidos_testenv::SERVICE_CLUSTER_IP_RANGE
        ),
        format!("apiServer.address={}", cp.server_url()),
    ];
    let mut install = vec![
        "install",
        "liqo",
        chart.to_str().unwrap(),
        "--namespace",
        "liqo",
        "--create-namespace",
        &kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm::helm(helm_bin, &install);
    let deployments: Api<Deployment> = Api::namespaced(cp.client(), "liqo");
    for d in deployments.list(&Default::default()).await.unwrap().items {
        wait_available_in(cp, &deployments, "liqo", &d.metadata.name.unwrap()).await;
    }
    liqo_webhook_serving(cp).await;
}

/// Waits until kube-apiserver can call Liqo's admission webhooks. The
/// webhook makes its serving certificate at start and writes its CA into
/// the webhook configurations, so its pod is Ready a moment before a call
/// verifies; a dry-run create of a ResourceSlice (which its validating
/// webhook sees) is the only sign, tried a bounded number of times. The
/// webhook's own verdict on the object, either way, means it answered.
async fn liqo_webhook_serving(cp: &ControlPlane) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let gvk = GroupVersionKind::gvk("authentication.liqo.io", "v1beta1", "ResourceSlice");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "resourceslices");
    let slices: Api<DynamicObject> = Api::namespaced_with(cp.client(), "default", &resource);
    let mut probe = DynamicObject::new("fluidos-testenv-webhook-probe", &resource);
    probe.data = serde_json::json!({"spec": {"class": "default"}});
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut last = String::new();
    for _ in 0..120 {
        match slices.create(&dry_run, &probe).await {
            Ok(_) => return,
            Err(e) if !e.to_string().contains("failed calling webhook") => return,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("Liqo's webhooks never answered kube-apiserver: {last}");
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
/// own name, asking for a part of the contracted slice.
pub fn offloaded_pod(namespace: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "web",
                "image": fluidos_testenv::BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c",
                    // Ends on SIGTERM as a well-behaved server does (as PID 1,
                    // httpd would ignore it and wait out the grace period).
                    "echo \"offloaded $POD_NAME\" > /www/index.html; trap 'exit 0' TERM; busybox httpd -f -v -p 8080 -h /www & wait"],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "www", "mountPath": "/www"}]
            }],
            "volumes": [{"name": "www", "emptyDir": {}}]
        }
    }))
    .unwrap()
}

/// Whether a pod runs.
pub fn running(pod: Option<&k8s_openapi::api::core::v1::Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        == Some("Running")
}

/// Creates namespace `name` on the consumer and offloads it as `liqoctl
/// offload namespace` does (remote pods only); watches the
/// NamespaceOffloading until Ready and returns the provider's namespace.
pub async fn offload_namespace(consumer: &ControlPlane, name: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(consumer.client())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceOffloading");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "namespaceoffloadings");
    let offloadings: Api<DynamicObject> = Api::namespaced_with(consumer.client(), name, &resource);
    offloadings
        .create(
            &PostParams::default(),
            &fluidos_testenv::liqo::namespace_offloading(name),
        )
        .await
        .unwrap();
    let ready = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data.pointer("/status/offloadingPhase"))
            .and_then(|p| p.as_str())
            == Some("Ready")
    };
    let offloading = tokio::time::timeout(
        Duration::from_secs(120),
        await_condition(offloadings, "offloading", ready),
    )
    .await
    .expect("the NamespaceOffloading never became Ready")
    .unwrap()
    .unwrap();
    offloading.data["status"]["remoteNamespaceName"]
        .as_str()
        .unwrap()
        .to_owned()
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

//! The Helm chart under test (`deploy/helm/fluidos-node`): running `helm`,
//! applying what it renders, running `fluidos-node` as a chart
//! ServiceAccount, and recording which API calls it makes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fluidos_testenv::ControlPlane;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde_json::Value;

use super::{NodeProcess, node_command};

/// Set by `.ci/run` to the directory `tools/helm/build.sh` prints.
pub const HELM_BIN_DIR_ENV: &str = fluidos_testenv::real_cluster::HELM_BIN_DIR_ENV;

/// The `helm` binary; `None` (the caller skips) when `FLUIDOS_HELM_BIN_DIR`
/// is unset outside CI. In CI a missing helm fails the test
/// (`fluidos_testenv::skip`; `.ci/run` builds it with tools/helm/build.sh),
/// and anywhere a set directory without helm does.
pub fn helm_bin() -> Option<PathBuf> {
    match fluidos_testenv::real_cluster::Helm::from_env() {
        Ok(helm) => Some(helm.bin().to_path_buf()),
        Err(e @ fluidos_testenv::Error::HelmUnavailable(_))
            if std::env::var_os(HELM_BIN_DIR_ENV).is_none_or(|d| d.is_empty()) =>
        {
            fluidos_testenv::skip::unavailable(e);
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    fluidos_testenv::real_cluster::chart_dir()
}

/// Runs `helm args...` with its config and caches in a temporary home;
/// returns stdout, panicking with stderr on failure.
pub fn helm(bin: &Path, args: &[&str]) -> String {
    fluidos_testenv::real_cluster::Helm::in_dir(bin.parent().unwrap())
        .unwrap()
        .run(args)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `helm template` of the chart in namespace `fluidos` with `--set`s and
/// values files; the rendered objects, as JSON.
pub fn template(bin: &Path, sets: &[String], values_files: &[PathBuf]) -> Vec<Value> {
    let chart = chart_dir();
    let mut args: Vec<String> = [
        "template",
        "fluidos",
        chart.to_str().unwrap(),
        "--namespace",
        super::NS,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for f in values_files {
        args.push("--values".into());
        args.push(f.to_str().unwrap().to_owned());
    }
    for s in sets {
        args.push("--set".into());
        args.push(s.clone());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    parse_documents(&helm(bin, &refs))
}

/// The objects of a multi-document YAML stream (empty documents dropped).
pub fn parse_documents(yaml: &str) -> Vec<Value> {
    let mut docs = vec![String::new()];
    for line in yaml.lines() {
        if line == "---" {
            docs.push(String::new());
        } else if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.iter()
        .map(|d| serde_yaml::from_str::<Value>(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// `kind/name` of an object.
pub fn kind_name(o: &Value) -> String {
    format!(
        "{}/{}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Server-side applies `objects` (as `helm install` would create them),
/// `dry_run` or for real; panics with the object and the API's answer.
pub async fn apply(client: &kube::Client, objects: &[Value], dry_run: bool) {
    let mut params = PatchParams::apply("fluidos-chart-test").force();
    params.dry_run = dry_run;
    for o in objects {
        let (group, version) = o["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit_once('/')
            .unwrap_or(("", o["apiVersion"].as_str().unwrap()));
        let gvk = GroupVersionKind::gvk(group, version, o["kind"].as_str().unwrap());
        let (ar, caps) = discovery::pinned_kind(client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{}: kind not served: {e}", kind_name(o)));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                o["metadata"]["namespace"].as_str().unwrap_or(super::NS),
                &ar,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        let name = o["metadata"]["name"].as_str().unwrap();
        if let Err(e) = api.patch(name, &params, &Patch::Apply(o)).await {
            panic!(
                "applying {} (dry run: {dry_run}) failed: {e}\n{}",
                kind_name(o),
                serde_yaml::to_string(o).unwrap()
            );
        }
    }
}

/// A bounded token of ServiceAccount `ns/name` (TokenRequest API).
pub async fn service_account_token(client: &kube::Client, ns: &str, name: &str) -> String {
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// One API call as RBAC sees it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// `cluster` for a cluster-scoped or all-namespaces call, else the namespace.
    pub scope: String,
    /// API group (`""`: core).
    pub group: String,
    /// Resource, with `/subresource`.
    pub resource: String,
    /// RBAC verb.
    pub verb: String,
    /// A `dryRun=All` request (authorized like the real one, stores nothing).
    pub dry_run: bool,
}

/// What the recording proxy saw: every resource call and its status code.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<BTreeMap<Access, BTreeSet<u16>>>>);

impl Calls {
    /// Every call made, with the status codes it got.
    pub fn all(&self) -> BTreeMap<Access, BTreeSet<u16>> {
        self.0.lock().unwrap().clone()
    }
}

/// Classifies a request the way the API server's RequestInfo does.
pub fn access_of(method: &str, path: &str, query: &str) -> Option<Access> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] => ("", rest),
        ["apis", g, _v, rest @ ..] => (*g, rest),
        _ => return None,
    };
    if rest.is_empty() {
        return None;
    }
    // /namespaces/<ns>/<resource>... is namespaced; /namespaces/<name> is the Namespace.
    let (scope, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => ((*ns).to_owned(), tail),
        _ => ("cluster".to_owned(), rest),
    };
    let (resource, named) = match rest {
        [r] => ((*r).to_owned(), false),
        [r, _name] => ((*r).to_owned(), true),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), true),
        [] => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let dry_run = query.split('&').any(|kv| kv == "dryRun=All");
    let verb = match (method, named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(Access {
        scope,
        group: group.to_owned(),
        resource,
        verb: verb.to_owned(),
        dry_run,
    })
}

/// A plain-HTTP reverse proxy on loopback in front of `cp`'s API server
/// that passes each request's own credentials through and records what it
/// asked for and what it got. Returns its URL.
pub async fn recording_proxy(cp: &ControlPlane, calls: Calls) -> String {
    // A client with the API server's CA and no credentials of its own:
    // each request keeps the Authorization header the node sent.
    let mut kubeconfig = cp.kubeconfig().clone();
    for a in &mut kubeconfig.auth_infos {
        a.auth_info = Some(kube::config::AuthInfo::default());
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let upstream = kube::Client::try_from(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let (upstream, calls) = (upstream.clone(), calls.clone());
        async move { forward(&upstream, &calls, req).await }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn forward(
    upstream: &kube::Client,
    calls: &Calls,
    req: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let access = access_of(
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
    );
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut out = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(path_and_query);
    for (k, v) in &parts.headers {
        if k != axum::http::header::HOST && k != axum::http::header::CONTENT_LENGTH {
            out = out.header(k, v);
        }
    }
    let out = out.body(kube::client::Body::from(bytes.to_vec())).unwrap();
    match upstream.send(out).await {
        Ok(resp) => {
            if let Some(a) = access {
                let status = resp.status().as_u16();
                let mut calls = calls.0.lock().unwrap();
                // A server-side apply that created the object was also
                // authorized as a create (201).
                if a.verb == "patch" && status == 201 {
                    let created = Access {
                        verb: "create".into(),
                        ..a.clone()
                    };
                    calls.entry(created).or_default().insert(status);
                }
                calls.entry(a).or_default().insert(status);
            }
            let (parts, body) = resp.into_parts();
            axum::response::Response::from_parts(parts, axum::body::Body::new(body))
        }
        Err(e) => axum::response::Response::builder()
            .status(502)
            .body(axum::body::Body::from(format!("proxy: {e}")))
            .unwrap(),
    }
}

/// A kubeconfig file (in `dir`) for `server` with a bearer `token`.
pub fn token_kubeconfig(dir: &Path, name: &str, server: &str, token: &str) -> PathBuf {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         users:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    \
         cluster: c\n    user: {name}\ncurrent-context: c\n"
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The container of the rendered Deployment of `component`.
pub fn container<'a>(objects: &'a [Value], component: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == "Deployment"
                && o["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .map(|d| &d["spec"]["template"]["spec"]["containers"][0])
        .unwrap_or_else(|| panic!("no Deployment for {component}"))
}

/// The ServiceAccount the chart runs `component` as.
pub fn service_account(objects: &[Value], component: &str) -> String {
    objects
        .iter()
        .find(|o| {
            o["kind"] == "Deployment"
                && o["metadata"]["labels"]["app.kubernetes.io/component"] == component
        })
        .and_then(|d| d["spec"]["template"]["spec"]["serviceAccountName"].as_str())
        .unwrap()
        .to_owned()
}

/// Starts `fluidos-node` as the chart's Deployment of `component` would
/// (its rendered arguments and environment), out of cluster with
/// `kubeconfig`; only the listening addresses are made loopback ones.
/// Returns the process and the port of its `/healthz` and `/readyz`.
pub fn spawn_as_chart(
    objects: &[Value],
    component: &str,
    kubeconfig: &Path,
    rear_port: u16,
    api_server_url: &str,
) -> (NodeProcess, u16) {
    let c = container(objects, component);
    let health_port = super::free_port();
    let own = [
        "--health-probe-bind-address",
        "--metrics-bind-address",
        "--http-port",
        "--log-format",
    ];
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| !own.iter().any(|o| a.starts_with(o)))
        .collect();
    let mut cmd = node_command();
    // Only what the chart sets (below) decides the log level.
    cmd.env_remove("RUST_LOG");
    for e in c["env"].as_array().into_iter().flatten() {
        cmd.env(e["name"].as_str().unwrap(), e["value"].as_str().unwrap());
    }
    cmd.env("KUBECONFIG", kubeconfig)
        .args(&args)
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health_port}"),
        ])
        .args(["--metrics-bind-address", "0"])
        .args(["--rear-bind-address", "127.0.0.1"])
        .args(["--http-port", &rear_port.to_string()])
        // Peering kubeconfigs name the real API server, not the proxy.
        .args(["--api-server-url", api_server_url])
        .args(["--log-format", "text"]);
    (NodeProcess::start(cmd), health_port)
}

/// Whether `/readyz` on `port` answers 200.
pub async fn ready(port: u16) -> bool {
    reqwest::get(format!("http://127.0.0.1:{port}/readyz"))
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// One RBAC permission of a component, flattened from a rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The component whose ServiceAccount holds it.
    pub component: String,
    /// `cluster` (a ClusterRole) or the Role's namespace.
    pub scope: String,
    /// API group (`""`: core).
    pub group: String,
    /// Resource, with `/subresource`.
    pub resource: String,
    /// Verb.
    pub verb: String,
    /// `resourceNames` of the rule (empty: any name).
    pub names: Vec<String>,
}

impl Grant {
    /// Whether this grant allows `a` (names aside: the recording does not
    /// see names of creates, and a call outside the names would be a 403).
    pub fn covers(&self, a: &Access) -> bool {
        (self.scope == "cluster" || self.scope == a.scope)
            && self.group == a.group
            && self.resource == a.resource
            && self.verb == a.verb
    }
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{} {} {group} {} {}",
            self.component, self.scope, self.resource, self.verb
        )?;
        if !self.names.is_empty() {
            write!(f, " names={}", self.names.join(","))?;
        }
        Ok(())
    }
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// Every permission the rendered chart grants, by component.
pub fn grants(objects: &[Value]) -> Vec<Grant> {
    // (kind, namespace of a Role, name) -> the component bound to it.
    let mut bound: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for b in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        let role_ns = if b["roleRef"]["kind"] == "Role" {
            b["metadata"]["namespace"].as_str().unwrap_or_default()
        } else {
            ""
        };
        let subjects = b["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), 1, "{}: one subject", kind_name(b));
        let sa = subjects[0]["name"].as_str().unwrap();
        let component = objects
            .iter()
            .find(|o| o["kind"] == "ServiceAccount" && name_of(o) == sa)
            .and_then(|o| o["metadata"]["labels"]["app.kubernetes.io/component"].as_str())
            .unwrap_or_else(|| panic!("{} binds {sa}, not a chart ServiceAccount", kind_name(b)));
        bound.insert(
            (
                b["roleRef"]["kind"].as_str().unwrap().to_owned(),
                role_ns.to_owned(),
                b["roleRef"]["name"].as_str().unwrap().to_owned(),
            ),
            component.to_owned(),
        );
    }
    let mut out = Vec::new();
    for r in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        let ns = r["metadata"]["namespace"].as_str().unwrap_or_default();
        let key = (
            r["kind"].as_str().unwrap().to_owned(),
            ns.to_owned(),
            name_of(r).to_owned(),
        );
        let component = bound
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} is bound to nobody"));
        let scope = if ns.is_empty() { "cluster" } else { ns };
        for rule in r["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        out.push(Grant {
                            component: component.clone(),
                            scope: scope.to_owned(),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            names: strings(&rule["resourceNames"]),
                        });
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// Installs the chart's objects (dry run first) on `cp`.
pub async fn install(cp: &ControlPlane, objects: &[Value]) {
    fluidos_testenv::fixtures::namespace(cp, super::NS)
        .await
        .unwrap();
    // CRDs come from crds/ (installed by the control plane, as `helm install` would).
    apply(&cp.client(), objects, true).await;
    // Hooks run at their own events (the uninstall hook at `helm
    // uninstall`), never at install: a dry run checks them, no more.
    let installed: Vec<Value> = objects
        .iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .cloned()
        .collect();
    apply(&cp.client(), &installed, false).await;
}

/// A component run as the chart runs it, through its own recording proxy.
pub struct Running {
    /// The component, as `--components` names it.
    pub component: &'static str,
    /// What it asked the API server, and the answers.
    pub calls: Calls,
    /// The `fluidos-node` process.
    pub node: NodeProcess,
    /// The port of its `/healthz` and `/readyz`.
    pub health_port: u16,
}

/// Runs `component` of the rendered chart `objects` on `cp` as its chart
/// ServiceAccount (a TokenRequest token), through a recording proxy of its
/// own; returns it and the token.
pub async fn run_component(
    cp: &ControlPlane,
    objects: &[Value],
    component: &'static str,
    rear_port: u16,
    dir: &Path,
) -> (Running, String) {
    run_component_with(cp, objects, component, rear_port, dir, false).await
}

/// [`run_component`]; with `api_server_ca`, its kubeconfig also names the
/// API server's CA (as an in-cluster one does), although it talks to the
/// plain-HTTP proxy: the REAR gateway hands that CA out in the peering
/// kubeconfigs it sells, which the buyer's node and Liqo then use against
/// the API server itself (`--api-server-url`).
pub async fn run_component_with(
    cp: &ControlPlane,
    objects: &[Value],
    component: &'static str,
    rear_port: u16,
    dir: &Path,
    api_server_ca: bool,
) -> (Running, String) {
    let sa = service_account(objects, component);
    let token = service_account_token(&cp.client(), super::NS, &sa).await;
    let calls = Calls::default();
    let proxy = recording_proxy(cp, calls.clone()).await;
    let kubeconfig = if api_server_ca {
        let ca = cp
            .kubeconfig()
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.certificate_authority_data.clone())
            .expect("the admin kubeconfig has the API server's CA");
        token_kubeconfig_with_ca(dir, component, &proxy, &token, &ca)
    } else {
        token_kubeconfig(dir, component, &proxy, &token)
    };
    let (node, health_port) =
        spawn_as_chart(objects, component, &kubeconfig, rear_port, cp.server_url());
    (
        Running {
            component,
            calls,
            node,
            health_port,
        },
        token,
    )
}

/// [`token_kubeconfig`] that also names a CA (`ca_data`: base64 of its PEM).
pub fn token_kubeconfig_with_ca(
    dir: &Path,
    name: &str,
    server: &str,
    token: &str,
    ca_data: &str,
) -> PathBuf {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n\
         \x20   certificate-authority-data: {ca_data}\n\
         users:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    \
         cluster: c\n    user: {name}\ncurrent-context: c\n"
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, yaml).unwrap();
    path
}

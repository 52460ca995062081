//! Starting, using and stopping one isolated control plane.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tempfile::TempDir;

use crate::binaries::{
    self, ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_PROXY, KUBE_SCHEDULER, KUBELET, KWOK,
};
use crate::certs::{KUBELET_CLIENT_USER, Pki};
use crate::kubeconfig::{admin_kubeconfig_yaml, random_token, token_file_line};
use crate::node_slot::NodeSlot;
use crate::oci_image::ImageSpec;
use crate::ports::free_port;
use crate::process::ManagedProcess;
use crate::real_node::{ClusterAccess, RealNode, RealNodeBinaries};
use crate::{Error, crds, kubeconfig};

/// How often a start is retried when a picked port was taken meanwhile.
const START_ATTEMPTS: usize = 4;
/// Upper bound for kube-apiserver (and, in workloads mode, the controllers)
/// to become usable; a healthy start takes a few seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// One readiness request; kube's own timeouts are far longer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long `stop` lets a process shut down after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// `--service-cluster-ip-range` of every test control plane.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.0.0.0/24";
const ADMIN_USER: &str = "fluidos-testenv-admin";

/// What to start besides etcd and kube-apiserver.
#[derive(Debug, Clone, Default)]
pub struct ControlPlaneOptions {
    /// Also start kube-controller-manager, kube-scheduler and kwok, so that
    /// Deployments get Pods that are scheduled and reported Running/Ready.
    /// kwok manages every Node object created in this cluster (no annotation
    /// needed) except Liqo virtual nodes (label `liqo.io/type`), whose
    /// kubelet is Liqo's virtual kubelet.
    pub workloads: bool,
    /// Every `*.yaml`/`*.yml` CRD in these directories is applied and waited
    /// for Established before `start` returns.
    pub crd_dirs: Vec<PathBuf>,
    /// One real Node instead of kwok ([`RealNode`]): a kubelet with
    /// containerd, runc, the bridge CNI and kube-proxy in a network namespace
    /// of its own, running real containers. Implies the controllers and the
    /// scheduler of `workloads`; kube-apiserver then listens on the host end
    /// of that namespace instead of loopback, so the node and its pods reach it.
    pub real_node: bool,
    /// Images imported into the real node's containerd besides
    /// [`crate::PAUSE_IMAGE`] and [`crate::BUSYBOX_IMAGE`].
    pub images: Vec<ImageSpec>,
}

/// A running, isolated control plane on loopback; killed on drop.
pub struct ControlPlane {
    // Declared before `dir` so that, should Drop ever be removed, the
    // processes still die before their working directory is deleted.
    processes: Vec<ManagedProcess>,
    client: kube::Client,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    server_url: String,
    node: Option<RealNode>,
    dir: TempDir,
}

struct Binaries {
    etcd: PathBuf,
    kube_apiserver: PathBuf,
    workloads: Option<WorkloadBinaries>,
}

struct WorkloadBinaries {
    kube_controller_manager: PathBuf,
    kube_scheduler: PathBuf,
    nodes: NodeBinaries,
}

/// Who runs the cluster's pods.
enum NodeBinaries {
    Kwok(PathBuf),
    Real(RealNodeBinaries),
}

impl Binaries {
    async fn locate(opts: &ControlPlaneOptions) -> Result<Binaries, Error> {
        let dir = binaries::bin_dir().await?;
        let workloads = if opts.workloads || opts.real_node {
            Some(WorkloadBinaries {
                kube_controller_manager: binaries::require(&dir, KUBE_CONTROLLER_MANAGER)?,
                kube_scheduler: binaries::require(&dir, KUBE_SCHEDULER)?,
                nodes: if opts.real_node {
                    NodeBinaries::Real(RealNodeBinaries {
                        kubelet: binaries::require(&dir, KUBELET)?,
                        kube_proxy: binaries::require(&dir, KUBE_PROXY)?,
                        coredns: binaries::require(&dir, &crate::cluster_dns::binary_name()?)?,
                    })
                } else {
                    NodeBinaries::Kwok(binaries::require(&dir, KWOK)?)
                },
            })
        } else {
            None
        };
        Ok(Binaries {
            etcd: binaries::require(&dir, ETCD)?,
            kube_apiserver: binaries::require(&dir, KUBE_APISERVER)?,
            workloads,
        })
    }
}

/// What a readiness poll checks.
#[derive(Clone, Copy)]
enum Probe {
    Readyz,
    DefaultNamespace,
    DefaultServiceAccount,
}

impl Probe {
    fn describe(self) -> &'static str {
        match self {
            Probe::Readyz => "kube-apiserver /readyz",
            Probe::DefaultNamespace => "namespace default",
            Probe::DefaultServiceAccount => "serviceaccount default/default",
        }
    }

    async fn check(self, client: &kube::Client) -> Result<(), String> {
        match self {
            Probe::Readyz => {
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .map_err(|e| e.to_string())?;
                let body = client
                    .request_text(request)
                    .await
                    .map_err(|e| e.to_string())?;
                if body.trim() == "ok" {
                    Ok(())
                } else {
                    Err(body)
                }
            }
            Probe::DefaultNamespace => Api::<Namespace>::all(client.clone())
                .get("default")
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Probe::DefaultServiceAccount => {
                Api::<ServiceAccount>::namespaced(client.clone(), "default")
                    .get("default")
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

/// Polls `probe` until it passes, failing fast if any process exits.
async fn wait_for(
    processes: &mut [ManagedProcess],
    client: &kube::Client,
    probe: Probe,
) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        for process in processes.iter_mut() {
            process.ensure_running()?;
        }
        let last_error = match tokio::time::timeout(PROBE_TIMEOUT, probe.check(client)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
        };
        if started.elapsed() >= READY_TIMEOUT {
            return Err(Error::Timeout {
                what: probe.describe().to_owned(),
                waited: started.elapsed(),
                last_error,
                log_tail: processes
                    .iter()
                    .map(ManagedProcess::log_tail)
                    .collect::<Vec<_>>()
                    .join("\n"),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn flag(name: &str, value: impl fmt::Display) -> String {
    format!("--{name}={value}")
}

fn etcd_args(data_dir: &Path, client_port: u16) -> Vec<String> {
    let client_url = format!("http://127.0.0.1:{client_port}");
    vec![
        flag("data-dir", data_dir.display()),
        flag("listen-client-urls", &client_url),
        flag("advertise-client-urls", &client_url),
        // A single member never talks to peers; port 0 spares a reservation.
        flag("listen-peer-urls", "http://127.0.0.1:0"),
        // Durability is pointless for a throw-away test store and fsync is
        // most of etcd's write latency.
        "--unsafe-no-fsync".to_owned(),
        flag("log-level", "warn"),
    ]
}

struct ApiserverFiles<'a> {
    cert_dir: &'a Path,
    ca_cert: &'a Path,
    ca_key: &'a Path,
    serving_cert: &'a Path,
    serving_key: &'a Path,
    sa_key: &'a Path,
    sa_pub: &'a Path,
    tokens: &'a Path,
    kubelet_client_cert: &'a Path,
    kubelet_client_key: &'a Path,
}

/// Where kube-apiserver listens and who it serves besides the tests.
struct ApiserverNetwork {
    /// `127.0.0.1`, or the host end of a real node's namespace.
    address: std::net::Ipv4Addr,
    /// A real node's kubelet is served: the Node authorizer for its
    /// credentials, and a client certificate for `logs`/`exec` on it.
    real_node: bool,
}

fn apiserver_args(
    files: &ApiserverFiles<'_>,
    etcd_port: u16,
    port: u16,
    workloads: bool,
    network: &ApiserverNetwork,
) -> Vec<String> {
    let address = network.address;
    let mut args = vec![
        flag("etcd-servers", format!("http://127.0.0.1:{etcd_port}")),
        flag("cert-dir", files.cert_dir.display()),
        flag("tls-cert-file", files.serving_cert.display()),
        flag("tls-private-key-file", files.serving_key.display()),
        flag("client-ca-file", files.ca_cert.display()),
        flag("secure-port", port),
        flag("bind-address", address),
        flag("advertise-address", address),
        flag("service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE),
        flag("allow-privileged", true),
        flag(
            "authorization-mode",
            if network.real_node {
                "Node,RBAC"
            } else {
                "RBAC"
            },
        ),
        flag("token-auth-file", files.tokens.display()),
        flag(
            "service-account-issuer",
            format!("https://{address}:{port}/"),
        ),
        flag("service-account-key-file", files.sa_pub.display()),
        flag("service-account-signing-key-file", files.sa_key.display()),
        flag("profiling", false),
    ];
    if network.real_node {
        args.extend([
            flag(
                "kubelet-client-certificate",
                files.kubelet_client_cert.display(),
            ),
            flag("kubelet-client-key", files.kubelet_client_key.display()),
            flag("kubelet-preferred-address-types", "InternalIP"),
            // kube-apiserver runs on the host, where no kube-proxy programs
            // Service addresses (the node's runs in its namespace), and two
            // clusters share one Service range: webhooks and aggregated APIs
            // are called at their pods' addresses, which the host routes.
            flag("enable-aggregator-routing", true),
        ]);
    }
    if !workloads {
        // Without kube-controller-manager nobody creates the default
        // ServiceAccount, and the plugin would reject every Pod.
        args.push(flag("disable-admission-plugins", "ServiceAccount"));
    }
    args
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver (plus the workload components if asked),
    /// waits until they serve, and installs `opts.crd_dirs`.
    pub async fn start(opts: ControlPlaneOptions) -> Result<ControlPlane, Error> {
        let binaries = Binaries::locate(&opts).await?;
        let mut attempt = 1;
        let control_plane = loop {
            match Self::start_once(&binaries, &opts.images).await {
                Err(e) if e.is_port_collision() && attempt < START_ATTEMPTS => {
                    eprintln!("fluidos-testenv: port collision, retrying start: {e}");
                    attempt += 1;
                }
                other => break other?,
            }
        };
        for dir in &opts.crd_dirs {
            control_plane.install_crds(dir).await?;
        }
        Ok(control_plane)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one start read top to bottom: files, processes, probes, the node"
    )]
    async fn start_once(binaries: &Binaries, images: &[ImageSpec]) -> Result<ControlPlane, Error> {
        let started = Instant::now();
        let real_node = binaries.workloads.as_ref().and_then(|w| match &w.nodes {
            NodeBinaries::Real(real) => Some(real),
            NodeBinaries::Kwok(_) => None,
        });
        // Taken first: it decides where kube-apiserver listens.
        let slot = real_node.map(|_| NodeSlot::acquire()).transpose()?;
        let network = ApiserverNetwork {
            address: slot
                .as_ref()
                .map_or(std::net::Ipv4Addr::LOCALHOST, NodeSlot::host_ip),
            real_node: slot.is_some(),
        };
        let dir = tempfile::Builder::new()
            .prefix("fluidos-testenv-")
            .tempdir()
            .map_err(|e| Error::io("creating the control plane's temp dir", e))?;
        let path = |name: &str| dir.path().join(name);

        let etcd_port = free_port()?;
        let apiserver_port = free_port()?;
        let server_url = format!("https://{}:{apiserver_port}", network.address);

        let pki = Pki::generate(slot.as_ref().map(NodeSlot::host_ip))?;
        let token = random_token()?;
        let node_token = random_token()?;
        let proxy_token = random_token()?;
        let node_name = slot.as_ref().map(RealNode::name_for);
        let files = ApiserverFiles {
            cert_dir: &path("apiserver-certs"),
            ca_cert: &path("ca.crt"),
            ca_key: &path("ca.key"),
            serving_cert: &path("apiserver.crt"),
            serving_key: &path("apiserver.key"),
            sa_key: &path("sa.key"),
            sa_pub: &path("sa.pub"),
            tokens: &path("tokens.csv"),
            kubelet_client_cert: &path("kubelet-client.crt"),
            kubelet_client_key: &path("kubelet-client.key"),
        };
        write_file(files.ca_cert, &pki.ca_cert_pem)?;
        write_file(files.ca_key, &pki.ca_key_pem)?;
        write_file(files.serving_cert, &pki.serving_cert_pem)?;
        write_file(files.serving_key, &pki.serving_key_pem)?;
        write_file(files.sa_key, &pki.service_account_key_pem)?;
        write_file(files.sa_pub, &pki.service_account_pub_pem)?;
        write_file(files.kubelet_client_cert, &pki.kubelet_client_cert_pem)?;
        write_file(files.kubelet_client_key, &pki.kubelet_client_key_pem)?;
        let mut tokens = token_file_line(&token, ADMIN_USER, &["system:masters"]);
        if let Some(node) = &node_name {
            tokens.push_str(&node_token_lines(node, &node_token, &proxy_token));
        }
        write_file(files.tokens, &tokens)?;
        let kubeconfig_yaml = admin_kubeconfig_yaml(&server_url, &pki.ca_cert_pem, &token);
        let kubeconfig = kubeconfig::parse(&kubeconfig_yaml)?;
        let kubeconfig_path = path("kubeconfig");
        write_file(&kubeconfig_path, &kubeconfig_yaml)?;

        // Both start at once: kube-apiserver retries etcd until it listens.
        let mut processes = vec![
            ManagedProcess::spawn(
                ETCD,
                &binaries.etcd,
                &etcd_args(&path("etcd-data"), etcd_port),
                &[],
                path("etcd.log"),
            )?,
            ManagedProcess::spawn(
                KUBE_APISERVER,
                &binaries.kube_apiserver,
                &apiserver_args(
                    &files,
                    etcd_port,
                    apiserver_port,
                    binaries.workloads.is_some(),
                    &network,
                ),
                &[],
                path("kube-apiserver.log"),
            )?,
        ];

        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default())
                .await?;
        let client = kube::Client::try_from(config)?;

        wait_for(&mut processes, &client, Probe::Readyz).await?;
        // /readyz does not cover the namespace bootstrap, and tests reach for
        // `default` first.
        wait_for(&mut processes, &client, Probe::DefaultNamespace).await?;

        if let Some(workloads) = &binaries.workloads {
            processes.extend(spawn_workloads(workloads, &files, &kubeconfig_path, &path)?);
            wait_for(&mut processes, &client, Probe::DefaultServiceAccount).await?;
        }
        let node = match (slot, real_node) {
            (Some(slot), Some(binaries)) => {
                let credentials = NodeCredentials {
                    server_url: &server_url,
                    ca_cert_pem: &pki.ca_cert_pem,
                    ca_cert_path: files.ca_cert,
                    node_token: &node_token,
                    proxy_token: &proxy_token,
                };
                Some(start_real_node(slot, binaries, &credentials, &client, images).await?)
            }
            _ => None,
        };

        // Written to the process's stderr directly, not through `eprintln!`,
        // which the test harness captures: CI logs should show that every
        // integration test ran against a real kube-apiserver.
        let line = format!(
            "fluidos-testenv: real kube-apiserver ready at {server_url} in {:.1?} ({}; logs in {})\n",
            started.elapsed(),
            processes
                .iter()
                .map(ManagedProcess::name)
                .collect::<Vec<_>>()
                .join(", "),
            dir.path().display()
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        Ok(ControlPlane {
            processes,
            client,
            kubeconfig,
            kubeconfig_path,
            server_url,
            node,
            dir,
        })
    }

    /// `kubectl --kubeconfig <admin>` of the same version (from the
    /// control-plane binaries), for what the Rust client does not speak
    /// here, e.g. `exec`.
    pub async fn kubectl(&self) -> Result<std::process::Command, Error> {
        let kubectl = binaries::require(&binaries::bin_dir().await?, binaries::KUBECTL)?;
        let mut command = std::process::Command::new(kubectl);
        command.arg(format!("--kubeconfig={}", self.kubeconfig_path.display()));
        Ok(command)
    }

    /// The real Node of a `real_node` control plane.
    pub fn real_node(&self) -> Option<&RealNode> {
        self.node.as_ref()
    }

    /// A client authenticated as a `system:masters` admin.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The admin kubeconfig (server URL, inline CA, bearer token).
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// The admin kubeconfig as a file, e.g. for a child process's `KUBECONFIG`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The directory holding this control plane's files and process logs
    /// (`<name>.log`); it is deleted when the control plane is dropped.
    pub fn log_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kube-apiserver URL, `https://127.0.0.1:<port>` (with a real node,
    /// the host end of its namespace instead of loopback).
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// Server-side applies every CRD YAML file in `dir` and waits until each is Established.
    pub async fn install_crds(&self, dir: &Path) -> Result<(), Error> {
        crds::install(&self.client, dir).await
    }

    /// Stops all processes (SIGTERM, then SIGKILL) and deletes the temp dir.
    pub async fn stop(mut self) {
        if let Some(node) = self.node.take() {
            node.stop();
        }
        for process in self.processes.iter_mut().rev() {
            process.terminate(STOP_GRACE).await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The node first: its kubelet would otherwise log a dead API server.
        drop(self.node.take());
        for process in self.processes.iter_mut().rev() {
            process.kill();
        }
    }
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server_url", &self.server_url)
            .field("dir", &self.dir.path())
            .field(
                "processes",
                &self
                    .processes
                    .iter()
                    .map(ManagedProcess::name)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What a real node's kubelet and kube-proxy authenticate with.
struct NodeCredentials<'a> {
    server_url: &'a str,
    ca_cert_pem: &'a str,
    ca_cert_path: &'a Path,
    node_token: &'a str,
    proxy_token: &'a str,
}

/// The kubelet's and kube-proxy's own identities in `--token-auth-file`, as
/// kubeadm gives them: the Node authorizer and the bootstrap
/// `system:node-proxier` binding grant what they need.
fn node_token_lines(node: &str, node_token: &str, proxy_token: &str) -> String {
    token_file_line(
        node_token,
        &format!("system:node:{node}"),
        &["system:nodes"],
    ) + &token_file_line(proxy_token, "system:kube-proxy", &[])
}

async fn start_real_node(
    slot: NodeSlot,
    binaries: &RealNodeBinaries,
    credentials: &NodeCredentials<'_>,
    client: &kube::Client,
    images: &[ImageSpec],
) -> Result<RealNode, Error> {
    let kubeconfig =
        |token: &str| admin_kubeconfig_yaml(credentials.server_url, credentials.ca_cert_pem, token);
    let access = ClusterAccess {
        server_url: credentials.server_url,
        ca_cert_pem: credentials.ca_cert_pem,
        ca_cert_path: credentials.ca_cert_path,
        kubelet_kubeconfig_yaml: kubeconfig(credentials.node_token),
        kube_proxy_kubeconfig_yaml: kubeconfig(credentials.proxy_token),
        client,
    };
    bind_kubelet_api_admin(client).await?;
    let node = RealNode::start(slot, binaries, access, images).await?;
    crate::cluster_dns::deploy(client).await?;
    Ok(node)
}

/// Lets kube-apiserver's kubelet client certificate use the kubelet API
/// (`logs`, `exec`, `port-forward`), which the kubelet authorizes by
/// SubjectAccessReview, as kubeadm binds it.
async fn bind_kubelet_api_admin(client: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("fluidos-testenv:kubelet-api-admin".to_owned()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: "system:kubelet-api-admin".to_owned(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "User".to_owned(),
            name: KUBELET_CLIENT_USER.to_owned(),
            namespace: None,
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&kube::api::PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Workload, namespace, ServiceAccount and RBAC aggregation controllers;
/// storage, cloud and IPAM ones have nothing to act on with fake nodes and
/// only slow the start.
const KUBE_CONTROLLER_MANAGER_CONTROLLERS: &[&str] = &[
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "disruption-controller",
    "clusterrole-aggregation-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "endpointslice-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    // Liqo issues its peers' identities (and the virtual kubelet its serving
    // certificate) through CertificateSigningRequests, which this signs with
    // the cluster CA (`--cluster-signing-*-file`).
    "certificatesigningrequest-signing-controller",
];

/// The Nodes kwok fakes: all but Liqo virtual nodes.
const KWOK_NODE_SELECTOR: &str = "!liqo.io/type";

/// Starts kube-controller-manager, kube-scheduler and kwok against the API server.
fn spawn_workloads(
    workloads: &WorkloadBinaries,
    files: &ApiserverFiles<'_>,
    kubeconfig_path: &Path,
    path: &dyn Fn(&str) -> PathBuf,
) -> Result<Vec<ManagedProcess>, Error> {
    let mut out = Vec::new();
    let kubeconfig_flag = flag("kubeconfig", kubeconfig_path.display());
    out.push(ManagedProcess::spawn(
        KUBE_CONTROLLER_MANAGER,
        &workloads.kube_controller_manager,
        &[
            kubeconfig_flag.clone(),
            flag("leader-elect", false),
            flag("bind-address", "127.0.0.1"),
            flag("secure-port", free_port()?),
            flag("service-account-private-key-file", files.sa_key.display()),
            flag("root-ca-file", files.ca_cert.display()),
            // The CA that kube-apiserver trusts for client certificates, so
            // the certificates it signs authenticate.
            flag("cluster-signing-cert-file", files.ca_cert.display()),
            flag("cluster-signing-key-file", files.ca_key.display()),
            flag("use-service-account-credentials", false),
            flag("service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE),
            flag("controllers", KUBE_CONTROLLER_MANAGER_CONTROLLERS.join(",")),
        ],
        &[],
        path("kube-controller-manager.log"),
    )?);
    out.push(ManagedProcess::spawn(
        KUBE_SCHEDULER,
        &workloads.kube_scheduler,
        &[
            kubeconfig_flag.clone(),
            flag("leader-elect", false),
            flag("bind-address", "127.0.0.1"),
            flag("secure-port", free_port()?),
        ],
        &[],
        path("kube-scheduler.log"),
    )?);
    // A real node's kubelet runs the pods itself.
    let NodeBinaries::Kwok(kwok) = &workloads.nodes else {
        return Ok(out);
    };
    // kwok reads ~/.kwok/kwok.yaml if present; a private HOME keeps a
    // developer's configuration out of the tests.
    let kwok_home = path("kwok-home");
    std::fs::create_dir_all(&kwok_home)
        .map_err(|e| Error::io(format!("creating {}", kwok_home.display()), e))?;
    out.push(ManagedProcess::spawn(
        KWOK,
        kwok,
        &[
            kubeconfig_flag,
            // A Liqo virtual node has its own kubelet (the virtual kubelet);
            // kwok reporting it Ready too would hide whether that one works.
            flag("manage-nodes-with-label-selector", KWOK_NODE_SELECTOR),
        ],
        &[("HOME", kwok_home.as_path())],
        path("kwok.log"),
    )?);
    // The ServiceAccount admission plugin is on in this mode, so Pods
    // are only accepted once kube-controller-manager made this account.
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> ApiserverFiles<'static> {
        ApiserverFiles {
            cert_dir: Path::new("/t/certs"),
            ca_cert: Path::new("/t/ca.crt"),
            ca_key: Path::new("/t/ca.key"),
            serving_cert: Path::new("/t/apiserver.crt"),
            serving_key: Path::new("/t/apiserver.key"),
            sa_key: Path::new("/t/sa.key"),
            sa_pub: Path::new("/t/sa.pub"),
            tokens: Path::new("/t/tokens.csv"),
            kubelet_client_cert: Path::new("/t/kubelet-client.crt"),
            kubelet_client_key: Path::new("/t/kubelet-client.key"),
        }
    }

    #[test]
    fn apiserver_disables_serviceaccount_admission_only_without_controllers() {
        let loopback = ApiserverNetwork {
            address: std::net::Ipv4Addr::LOCALHOST,
            real_node: false,
        };
        let plain = apiserver_args(&files(), 2379, 6443, false, &loopback);
        assert!(plain.contains(&"--disable-admission-plugins=ServiceAccount".to_owned()));
        let with_workloads = apiserver_args(&files(), 2379, 6443, true, &loopback);
        assert!(
            !with_workloads
                .iter()
                .any(|a| a.starts_with("--disable-admission-plugins"))
        );
        assert!(plain.contains(&"--etcd-servers=http://127.0.0.1:2379".to_owned()));
        assert!(plain.contains(&"--secure-port=6443".to_owned()));
        assert!(plain.contains(&"--authorization-mode=RBAC".to_owned()));
        assert!(plain.contains(&"--token-auth-file=/t/tokens.csv".to_owned()));
    }

    #[test]
    fn etcd_is_loopback_only_and_unsynced() {
        let args = etcd_args(Path::new("/t/etcd"), 1234);
        assert!(args.contains(&"--listen-client-urls=http://127.0.0.1:1234".to_owned()));
        assert!(args.contains(&"--unsafe-no-fsync".to_owned()));
        assert!(args.iter().all(|a| !a.contains("0.0.0.0")));
    }
}

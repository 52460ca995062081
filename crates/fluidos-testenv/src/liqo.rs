//! The real Liqo controllers (the version pinned in `tools/liqo/versions.env`)
//! run as local processes against a test control plane, the way a Helm
//! install would run them as pods.
//!
//! What runs: `liqo-controller-manager` (authentication and offloading
//! modules; networking only if asked), `crd-replicator`, and Liqo's admission
//! `webhook` (registered with the API server by URL on loopback). What the
//! chart would also install and is set up here instead: Liqo's CRDs (read from
//! the Liqo module in the Go module cache, the same version the binaries were
//! built from), namespace `liqo`, the cluster-ID ConfigMap, the ClusterRoles
//! Liqo binds to its peers and virtual kubelets (rules read from the chart's
//! `files/`), and the default `VkOptionsTemplate`.
//!
//! Not started: the networking data plane (gateway, fabric, IPAM pods). The
//! virtual-kubelet pod that the VirtualNode controller deploys cannot run
//! either (nothing runs pods here); [`Liqo::start_virtual_kubelet`] is its
//! stand-in, running the real binary as a process. See `docs/liqo-in-tests.md`.
//!
//! Binaries come from `FLUIDOS_LIQO_BIN_DIR`, the directory that
//! `tools/liqo/build.sh` prints. There is no automatic build: the first one
//! takes many minutes, so tests skip when the variable is unset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::kubeconfig::{admin_kubeconfig_yaml, random_token};
use crate::ports::free_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error, crds};

/// Environment variable naming the directory with the Liqo binaries
/// (the last line printed by `tools/liqo/build.sh`).
pub const LIQO_BIN_DIR_ENV: &str = "FLUIDOS_LIQO_BIN_DIR";
/// The namespace Liqo is installed in (Liqo's `DefaultLiqoNamespace`).
pub const LIQO_NAMESPACE: &str = "liqo";
/// File in the binary directory naming the Liqo module directory in the Go
/// module cache (written by `tools/liqo/build.sh`).
const MODULE_DIR_FILE: &str = "liqo-module-dir";

const CONTROLLER_MANAGER: &str = "liqo-controller-manager";
const CRD_REPLICATOR: &str = "crd-replicator";
const WEBHOOK: &str = "webhook";
const LIQOCTL: &str = "liqoctl";
const VIRTUAL_KUBELET: &str = "virtual-kubelet";
/// The Secret holding the cluster's Ed25519 key pair (Liqo's `AuthKeysSecretName`).
const AUTH_KEYS_SECRET: &str = "authentication-keys";
/// Liqo key pairs made before giving up on one it accepts from consumers.
const MAX_KEY_ATTEMPTS: u32 = 8;

/// Upper bound for each Liqo process to serve; a healthy start takes seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// One readiness request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long `stop` lets a process shut down after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);
const FIELD_MANAGER: &str = "fluidos-testenv-liqo";
/// The Helm chart's `offloading.defaultNodeResources`, passed the way the
/// chart passes them, so a slice that asks for nothing gets what an installed
/// Liqo would grant.
const DEFAULT_NODE_RESOURCES: &str = "cpu=4,memory=8Gi,pods=110,ephemeral-storage=20Gi";
/// Name of the default `VkOptionsTemplate` (chart: `virtual-kubelet-default`).
const VK_OPTIONS_TEMPLATE: &str = "virtual-kubelet-default";
/// The chart's `ipam.podCIDR` default; the webhook writes it into the virtual
/// kubelet's arguments.
const POD_CIDR: &str = "10.100.0.0/16";

/// Where the Liqo binaries and Liqo's own manifests are.
#[derive(Debug, Clone)]
pub struct LiqoBinaries {
    dir: PathBuf,
    module_dir: PathBuf,
}

impl LiqoBinaries {
    /// Reads `FLUIDOS_LIQO_BIN_DIR`; [`Error::LiqoUnavailable`] (with what to
    /// run) when it is unset or the directory is not a `tools/liqo/build.sh` output.
    pub fn from_env() -> Result<LiqoBinaries, Error> {
        let dir = std::env::var_os(LIQO_BIN_DIR_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| {
                Error::LiqoUnavailable(format!(
                    "{LIQO_BIN_DIR_ENV} is not set; build Liqo with `tools/liqo/build.sh` \
                     (many minutes the first time, cached afterwards) and set \
                     {LIQO_BIN_DIR_ENV} to the directory it prints on its last line"
                ))
            })?;
        LiqoBinaries::in_dir(&dir)
    }

    /// The binaries in `dir`, which must hold what `tools/liqo/build.sh` writes.
    pub fn in_dir(dir: &Path) -> Result<LiqoBinaries, Error> {
        let module_file = dir.join(MODULE_DIR_FILE);
        let module_dir = std::fs::read_to_string(&module_file)
            .map_err(|e| {
                Error::LiqoUnavailable(format!(
                    "{} is unreadable ({e}); is {} a tools/liqo/build.sh output directory?",
                    module_file.display(),
                    dir.display()
                ))
            })
            .map(|text| PathBuf::from(text.trim()))?;
        let binaries = LiqoBinaries {
            dir: dir.to_path_buf(),
            module_dir,
        };
        for name in [
            CONTROLLER_MANAGER,
            CRD_REPLICATOR,
            WEBHOOK,
            LIQOCTL,
            VIRTUAL_KUBELET,
        ] {
            binaries.require(name)?;
        }
        if !binaries.crds_dir().is_dir() {
            return Err(Error::LiqoUnavailable(format!(
                "no Liqo CRDs at {} (run tools/liqo/build.sh again: it re-downloads the module)",
                binaries.crds_dir().display()
            )));
        }
        Ok(binaries)
    }

    fn require(&self, name: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::LiqoUnavailable(format!(
                "Liqo binary {name} not found in {} (run tools/liqo/build.sh)",
                self.dir.display()
            )))
        }
    }

    /// The directory holding the binaries.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `liqoctl`, for tests that peer the way a user would.
    pub fn liqoctl(&self) -> PathBuf {
        self.dir.join(LIQOCTL)
    }

    /// Runs `liqoctl peer --networking-disabled` from `consumer` to
    /// `provider` as a user would (admin kubeconfigs, `HOME` = `home`),
    /// within 4 minutes; its output, whatever the exit status.
    pub async fn liqoctl_peer(
        &self,
        consumer: &ControlPlane,
        provider: &ControlPlane,
        home: &Path,
    ) -> Result<std::process::Output, Error> {
        // The WireGuard gateways would be pods; nothing runs pods here.
        self.run_liqoctl_peer(consumer, provider, home, &["--networking-disabled"])
            .await
    }

    /// [`LiqoBinaries::liqoctl_peer`] with the networking phase, for Liqos
    /// started with [`LiqoOptions::networking`] and a
    /// [`crate::liqo_gateway::GatewayStandIn`] on each side: the server's
    /// Service is a ClusterIP one (a NodePort would need a Node address of
    /// the gateway pod's, a LoadBalancer a load balancer).
    pub async fn liqoctl_peer_with_networking(
        &self,
        consumer: &ControlPlane,
        provider: &ControlPlane,
        home: &Path,
    ) -> Result<std::process::Output, Error> {
        self.run_liqoctl_peer(
            consumer,
            provider,
            home,
            &["--gw-server-service-type=ClusterIP"],
        )
        .await
    }

    async fn run_liqoctl_peer(
        &self,
        consumer: &ControlPlane,
        provider: &ControlPlane,
        home: &Path,
        extra: &[&str],
    ) -> Result<std::process::Output, Error> {
        let mut command = tokio::process::Command::new(self.liqoctl());
        command
            .arg("peer")
            .arg(format!(
                "--kubeconfig={}",
                consumer.kubeconfig_path().display()
            ))
            .arg(format!(
                "--remote-kubeconfig={}",
                provider.kubeconfig_path().display()
            ))
            .args(extra)
            .arg("--timeout=3m")
            .env("HOME", home)
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        match tokio::time::timeout(Duration::from_secs(240), command.output()).await {
            Ok(output) => output.map_err(|e| Error::io("running liqoctl peer".to_owned(), e)),
            Err(_) => Err(Error::Fixture(
                "liqoctl peer did not finish within 4 minutes".to_owned(),
            )),
        }
    }

    /// `virtual-kubelet`, for tests that run it in place of its pod.
    pub fn virtual_kubelet(&self) -> PathBuf {
        self.dir.join(VIRTUAL_KUBELET)
    }

    /// The `github.com/liqotech/liqo` module directory in the Go module cache.
    pub fn module_dir(&self) -> &Path {
        &self.module_dir
    }

    /// Liqo's CRD manifests, inside the module.
    pub fn crds_dir(&self) -> PathBuf {
        self.module_dir
            .join("deployments/liqo/charts/liqo-crds/crds")
    }

    /// The chart's plain files (RBAC rules), inside the module.
    fn chart_files_dir(&self) -> PathBuf {
        self.module_dir.join("deployments/liqo/files")
    }
}

/// How to start Liqo on one control plane.
#[derive(Debug, Clone)]
pub struct LiqoOptions {
    /// This cluster's Liqo cluster ID (a DNS-1123 label); empty picks a random one.
    pub cluster_id: String,
    /// Run the networking module, with what Liqo's chart installs for it
    /// ([`crate::liqo_gateway`]). Off by default: its data plane (gateway and
    /// fabric pods) cannot run on a test control plane; with it on, a
    /// [`crate::liqo_gateway::GatewayStandIn`] plays the gateway pods, and
    /// the control plane must run workloads on a kwok node.
    pub networking: bool,
    /// Run Liqo's admission webhooks. On by default: without the VirtualNode
    /// mutating webhook a VirtualNode never gets its virtual-kubelet template.
    pub webhooks: bool,
    /// Appended to `liqo-controller-manager`'s arguments (e.g.
    /// `--default-limits-enforcement=Hard`).
    pub extra_controller_manager_args: Vec<String>,
    /// Appended to the webhook's arguments (e.g.
    /// `--enable-resource-enforcement`).
    pub extra_webhook_args: Vec<String>,
}

impl Default for LiqoOptions {
    fn default() -> Self {
        LiqoOptions {
            cluster_id: String::new(),
            networking: false,
            webhooks: true,
            extra_controller_manager_args: Vec::new(),
            extra_webhook_args: Vec::new(),
        }
    }
}

/// Why a test that needs Liqo and the control plane cannot run here (the
/// variable to set), or `None`.
pub fn skip_reason() -> Option<String> {
    for var in ["FLUIDOS_LIQO_BIN_DIR", "FLUIDOS_CP_BIN_DIR"] {
        if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
            return Some(format!(
                "{var} is not set (build with tools/liqo/build.sh and tools/control-plane/build.sh, \
                 and set each variable to the directory the script prints)"
            ));
        }
    }
    None
}

/// A NamespaceOffloading `offloading` of `namespace`, as `liqoctl offload
/// namespace` makes it: same name remotely, pods remote only, every peer.
pub fn namespace_offloading(namespace: &str) -> DynamicObject {
    let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "NamespaceOffloading");
    let mut o = DynamicObject::new(
        "offloading",
        &ApiResource::from_gvk_with_plural(&gvk, "namespaceoffloadings"),
    )
    .within(namespace);
    o.data = serde_json::json!({"spec": {
        "namespaceMappingStrategy": "DefaultName",
        "podOffloadingStrategy": "Remote",
        "clusterSelector": {"nodeSelectorTerms": []}
    }});
    o
}

/// A Node `name` (8 CPUs, 16Gi, 110 pods) that kwok runs pods on, for the
/// pods a provider's Liqo makes from ShadowPods.
pub fn kwok_node(name: &str) -> k8s_openapi::api::core::v1::Node {
    let resources = serde_json::json!({"cpu": "8", "memory": "16Gi", "pods": "110"});
    k8s_openapi::api::core::v1::Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("kubernetes.io/hostname".to_owned(), name.to_owned())].into()),
            ..Default::default()
        },
        status: serde_json::from_value(serde_json::json!({
            "capacity": resources, "allocatable": resources
        }))
        .ok(),
        ..Default::default()
    }
}

/// Real Liqo controllers running against one control plane; killed on drop.
pub struct Liqo {
    processes: Vec<ManagedProcess>,
    cluster_id: String,
    binaries: LiqoBinaries,
    phases: Vec<(String, Duration)>,
    // kube-controller-manager's log on the same control plane: it signs
    // Liqo's certificates, so its problems are Liqo's too.
    controller_manager_log: PathBuf,
    // Holds the webhook's serving certificate; deleted after the processes die.
    _webhook_dir: Option<TempDir>,
}

impl Liqo {
    /// Installs Liqo on `control_plane` and starts its controllers, returning
    /// once each serves (health endpoint, and for the controller manager its
    /// first visible work: Secret `liqo/authentication-keys`).
    ///
    /// The control plane should run kube-controller-manager
    /// (`ControlPlaneOptions::workloads`): Liqo's identities are certificates
    /// that its CSR signer issues, and unpeering needs its garbage collector.
    pub async fn start(control_plane: &ControlPlane, opts: LiqoOptions) -> Result<Liqo, Error> {
        let binaries = LiqoBinaries::from_env()?;
        Liqo::start_with(control_plane, &binaries, opts).await
    }

    /// [`Liqo::start`] with binaries located by the caller.
    pub async fn start_with(
        control_plane: &ControlPlane,
        binaries: &LiqoBinaries,
        opts: LiqoOptions,
    ) -> Result<Liqo, Error> {
        let cluster_id = if opts.cluster_id.is_empty() {
            format!("cluster-{}", &random_token()?[..10])
        } else {
            opts.cluster_id.clone()
        };
        let client = control_plane.client();
        let mut phases = Vec::new();
        let mut phase_start = Instant::now();
        let mut phase = |name: &str, phases: &mut Vec<(String, Duration)>| {
            phases.push((name.to_owned(), phase_start.elapsed()));
            phase_start = Instant::now();
        };

        crds::install(&client, &binaries.crds_dir()).await?;
        phase("CRDs established", &mut phases);

        install_prerequisites(&client, binaries, &cluster_id, opts.webhooks).await?;
        phase("namespace, cluster ID, ClusterRoles", &mut phases);
        if opts.networking {
            crate::liqo_gateway::install_network_prerequisites(&client).await?;
            phase(
                "networks, gateway templates, liqo-proxy Service",
                &mut phases,
            );
        }

        let mut liqo = Liqo {
            processes: Vec::new(),
            cluster_id: cluster_id.clone(),
            binaries: binaries.clone(),
            phases: Vec::new(),
            controller_manager_log: control_plane.log_dir().join("kube-controller-manager.log"),
            _webhook_dir: None,
        };
        let kubeconfig = control_plane.kubeconfig_path();
        let logs = control_plane.log_dir();

        if opts.webhooks {
            let webhook = start_webhook(&mut liqo, binaries, control_plane, &opts)?;
            liqo.wait_ready("Liqo webhook", || async {
                http_ok(webhook.health_port, "/readyz").await?;
                // The TLS listener is a separate runnable; the API server
                // must not call it before it accepts connections.
                tcp_accepts(webhook.port).await
            })
            .await?;
            register_webhooks(&client, webhook.port, &webhook.ca_pem).await?;
            phase("webhook serving and registered", &mut phases);
        }

        // Liqo v1.0.0 providers refuse a consumer whose public key ends in a
        // zero byte (`checkCSR` drops it before comparing; fluidos-peering's
        // `ClusterKeys::liqo_accepts`). Liqo makes the key at random, so a
        // cluster with such a key (1 in 256) is given a new one the way an
        // operator would: its Secret deleted, liqo-controller-manager
        // restarted.
        let mut attempts = 0;
        while !liqo
            .start_controller_manager(control_plane, binaries, &opts)
            .await?
        {
            attempts += 1;
            if attempts == MAX_KEY_ATTEMPTS {
                return Err(Error::Fixture(format!(
                    "Liqo made {attempts} authentication keys ending in a zero byte"
                )));
            }
        }
        phase("liqo-controller-manager ready", &mut phases);

        let metrics_port = free_port()?;
        liqo.spawn(
            CRD_REPLICATOR,
            &binaries.require(CRD_REPLICATOR)?,
            &[
                format!("--cluster-id={cluster_id}"),
                // crd-replicator has no health endpoint; its metrics server
                // starts with its manager.
                format!("--metrics-address=127.0.0.1:{metrics_port}"),
            ],
            kubeconfig,
            logs,
            &[],
        )?;
        liqo.wait_ready("crd-replicator /metrics", || {
            http_ok(metrics_port, "/metrics")
        })
        .await?;
        phase("crd-replicator ready", &mut phases);

        liqo.phases = phases;
        Ok(liqo)
    }

    /// This cluster's Liqo cluster ID.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The binaries this instance runs.
    pub fn binaries(&self) -> &LiqoBinaries {
        &self.binaries
    }

    /// How long each start-up phase took, in order.
    pub fn startup_phases(&self) -> &[(String, Duration)] {
        &self.phases
    }

    /// `Err(ProcessExited)` with its log tail if a Liqo process has died.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        for process in &mut self.processes {
            process.ensure_running()?;
        }
        Ok(())
    }

    /// The last log lines of every Liqo process, for failure messages.
    pub fn log_tails(&self) -> String {
        self.processes
            .iter()
            .map(ManagedProcess::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The last klog error and warning lines of every Liqo process and of
    /// the kube-controller-manager that signs its certificates, for the top
    /// of failure messages (CI shows only the start and end of a failure).
    pub fn problem_lines(&self, lines: usize) -> String {
        let mut out: Vec<String> = self
            .processes
            .iter()
            .map(|p| p.problem_lines(lines))
            .collect();
        out.push(format!(
            "--- kube-controller-manager problems ---\n{}",
            crate::process::problem_lines_in(&self.controller_manager_log, lines)
        ));
        out.join("\n")
    }

    /// **Stand-in** for the virtual-kubelet pod of Deployment
    /// `namespace/deployment` (created by Liqo's VirtualNode controller, but
    /// nothing runs pods on a test control plane): runs the real
    /// `virtual-kubelet` binary as a process with that pod's container
    /// arguments and environment, authenticated as the pod's ServiceAccount
    /// (a TokenRequest token, as a projected token would be), with the pod IP
    /// `127.0.0.1`, a free listen port instead of 10250 and a self-signed
    /// serving certificate. It is checked and killed with the other Liqo
    /// processes.
    pub async fn start_virtual_kubelet(
        &mut self,
        control_plane: &ControlPlane,
        namespace: &str,
        deployment: &str,
    ) -> Result<(), Error> {
        let client = control_plane.client();
        let found = Api::<Deployment>::namespaced(client.clone(), namespace)
            .get(deployment)
            .await?;
        let pod = found
            .spec
            .and_then(|s| s.template.spec)
            .ok_or_else(|| Error::Fixture(format!("Deployment {deployment} has no pod spec")))?;
        let container =
            pod.containers.first().cloned().ok_or_else(|| {
                Error::Fixture(format!("Deployment {deployment} has no container"))
            })?;
        let service_account = pod.service_account_name.clone().unwrap_or_default();

        let token = Api::<ServiceAccount>::namespaced(client, namespace)
            .create_token_request(
                &service_account,
                &PostParams::default(),
                &TokenRequest {
                    spec: TokenRequestSpec {
                        audiences: Vec::new(),
                        expiration_seconds: Some(3600),
                        bound_object_ref: None,
                    },
                    ..Default::default()
                },
            )
            .await?
            .status
            .map(|s| s.token)
            .ok_or_else(|| Error::Fixture("TokenRequest returned no token".into()))?;
        let ca_pem = control_plane_ca_pem(control_plane)?;
        let kubeconfig = control_plane
            .log_dir()
            .join(format!("{}-{deployment}.kubeconfig", self.cluster_id));
        std::fs::write(
            &kubeconfig,
            admin_kubeconfig_yaml(control_plane.server_url(), &ca_pem, &token),
        )
        .map_err(|e| Error::io(format!("writing {}", kubeconfig.display()), e))?;

        let pod_name = format!("{deployment}-standin");
        let env = pod_env(
            container.env.as_deref().unwrap_or_default(),
            &pod_name,
            namespace,
        );
        let mut args: Vec<String> = container
            .args
            .unwrap_or_default()
            .iter()
            .map(|a| expand_env_refs(a, &env))
            .collect();
        // Several virtual kubelets (and other users) share this host.
        args.push(format!("--listen-port={}", free_port()?));
        // With the default `kubelet` type the serving certificate is kept in
        // the hard-coded /tmp/certs: private in a pod, but shared here by
        // every run and cluster (a later run loads an earlier run's
        // certificate). A self-signed one stays in memory; kube-apiserver
        // does not verify kubelet certificates here (no
        // --kubelet-certificate-authority).
        args.push("--certificate-type=self-signed".to_owned());
        let env_paths: Vec<(&str, &Path)> = env
            .iter()
            .map(|(k, v)| (k.as_str(), Path::new(v.as_str())))
            .collect();
        let program = self.binaries.require(VIRTUAL_KUBELET)?;
        self.spawn(
            &format!("{VIRTUAL_KUBELET}-{deployment}"),
            &program,
            &args,
            &kubeconfig,
            control_plane.log_dir(),
            &env_paths,
        )
    }

    /// Stops the stand-in of `deployment`'s virtual-kubelet pod, as deleting
    /// the Deployment (which Liqo does when it removes a VirtualNode) would
    /// end the pod in a cluster. No-op when it is not running.
    pub async fn stop_virtual_kubelet(&mut self, deployment: &str) {
        let name = format!("{VIRTUAL_KUBELET}-{deployment}");
        if let Some(i) = self.processes.iter().position(|p| p.name() == name) {
            let mut process = self.processes.remove(i);
            process.terminate(STOP_GRACE).await;
        }
    }

    /// Stops the Liqo processes (SIGTERM, then SIGKILL).
    pub async fn stop(mut self) {
        for process in self.processes.iter_mut().rev() {
            process.terminate(STOP_GRACE).await;
        }
    }

    /// Starts liqo-controller-manager and waits until it has made the
    /// cluster's key pair; `false` (after stopping it and deleting the
    /// Secret) when Liqo would refuse that key from a consumer.
    async fn start_controller_manager(
        &mut self,
        control_plane: &ControlPlane,
        binaries: &LiqoBinaries,
        opts: &LiqoOptions,
    ) -> Result<bool, Error> {
        let client = control_plane.client();
        let kubeconfig = control_plane.kubeconfig_path();
        let logs = control_plane.log_dir();
        let cluster_id = self.cluster_id.clone();
        let health_port = free_port()?;
        let args = controller_manager_args(&cluster_id, opts, health_port, control_plane)?;
        self.spawn(
            CONTROLLER_MANAGER,
            &binaries.require(CONTROLLER_MANAGER)?,
            &args,
            kubeconfig,
            logs,
            &[],
        )?;
        self.wait_ready("liqo-controller-manager /readyz", || {
            http_ok(health_port, "/readyz")
        })
        .await?;
        // /readyz is a bare ping; the authentication module creating the
        // cluster's key pair shows that its controllers really run.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), LIQO_NAMESPACE);
        self.wait_ready("Secret liqo/authentication-keys", || {
            let secrets = secrets.clone();
            async move {
                match secrets.get_opt(AUTH_KEYS_SECRET).await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err("not created yet".to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await?;
        let secret = secrets.get(AUTH_KEYS_SECRET).await?;
        if !auth_key_ends_in_zero(&secret)? {
            return Ok(true);
        }
        eprintln!("Liqo of {cluster_id} made a key it refuses from consumers; making another");
        if let Some(i) = self
            .processes
            .iter()
            .position(|p| p.name() == CONTROLLER_MANAGER)
        {
            let mut process = self.processes.remove(i);
            process.terminate(STOP_GRACE).await;
        }
        secrets
            .delete(AUTH_KEYS_SECRET, &kube::api::DeleteParams::default())
            .await?;
        Ok(false)
    }

    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        kubeconfig: &Path,
        log_dir: &Path,
        extra_env: &[(&str, &Path)],
    ) -> Result<(), Error> {
        // controller-runtime and client-go read KUBECONFIG.
        let mut envs = vec![("KUBECONFIG", kubeconfig)];
        envs.extend_from_slice(extra_env);
        let log = log_dir.join(format!("{}-{name}.log", self.cluster_id));
        self.processes
            .push(ManagedProcess::spawn(name, program, args, &envs, log)?);
        Ok(())
    }

    /// Polls `probe` until it passes, failing fast if a Liqo process exits.
    async fn wait_ready<F, Fut>(&mut self, what: &str, mut probe: F) -> Result<(), Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let started = Instant::now();
        loop {
            self.ensure_running()?;
            let last_error = match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
            };
            if started.elapsed() >= READY_TIMEOUT {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    waited: started.elapsed(),
                    last_error,
                    log_tail: self.log_tails(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

impl Drop for Liqo {
    fn drop(&mut self) {
        for process in self.processes.iter_mut().rev() {
            process.kill();
        }
    }
}

impl std::fmt::Debug for Liqo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liqo")
            .field("cluster_id", &self.cluster_id)
            .field(
                "processes",
                &self
                    .processes
                    .iter()
                    .map(ManagedProcess::name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Whether the public key in Liqo's key-pair Secret ends in a zero byte,
/// read from its PKCS#8 `privateKey` as Liqo reads it.
fn auth_key_ends_in_zero(secret: &Secret) -> Result<bool, Error> {
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get("privateKey"))
        .and_then(|b| std::str::from_utf8(&b.0).ok())
        .ok_or_else(|| {
            Error::Fixture(format!("Secret liqo/{AUTH_KEYS_SECRET} has no privateKey"))
        })?;
    let key = KeyPair::from_pem(pem)?;
    Ok(key.public_key_raw().last() == Some(&0))
}

/// The CA PEM of the control plane's admin kubeconfig.
fn control_plane_ca_pem(control_plane: &ControlPlane) -> Result<String, Error> {
    use base64::Engine as _;
    let data = control_plane
        .kubeconfig()
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .ok_or_else(|| Error::Fixture("the admin kubeconfig has no CA".into()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| Error::Fixture(format!("kubeconfig CA: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Fixture(format!("kubeconfig CA: {e}")))
}

/// The container environment a kubelet would give the pod: literal values,
/// and the downward-API fields the virtual kubelet uses.
fn pod_env(vars: &[EnvVar], pod_name: &str, namespace: &str) -> Vec<(String, String)> {
    vars.iter()
        .filter_map(|var| {
            let value = match (&var.value, &var.value_from) {
                (Some(value), _) => value.clone(),
                (None, Some(from)) => match from.field_ref.as_ref()?.field_path.as_str() {
                    // The stand-in's "pod" is this host.
                    "status.podIP" => "127.0.0.1".to_owned(),
                    "metadata.name" => pod_name.to_owned(),
                    "metadata.namespace" => namespace.to_owned(),
                    _ => return None,
                },
                (None, None) => String::new(),
            };
            Some((var.name.clone(), value))
        })
        .collect()
}

/// Kubernetes' `$(VAR)` expansion of container arguments.
fn expand_env_refs(arg: &str, env: &[(String, String)]) -> String {
    env.iter().fold(arg.to_owned(), |arg, (name, value)| {
        arg.replace(&format!("$({name})"), value)
    })
}

fn object_meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The ClusterRoles of the chart that Liqo's controllers bind at run time:
/// (object name, `app.kubernetes.io/name` label Liqo selects them by).
const CLUSTER_ROLES: &[(&str, &str)] = &[
    // Bound to a peer's control-plane user in its tenant namespace.
    ("liqo-remote-controlplane", "remote-controlplane"),
    // Bound cluster-wide to a peer's control-plane user.
    (
        "liqo-virtual-kubelet-remote-clusterwide",
        "virtual-kubelet-remote-clusterwide",
    ),
    // Bound (by name) in namespaces offloaded from a peer.
    ("liqo-virtual-kubelet-remote", "virtual-kubelet-remote"),
    // Bound (by name) to each virtual kubelet's local ServiceAccount.
    ("liqo-virtual-kubelet-local", "virtual-kubelet-local"),
];

/// What the Helm chart would create before the controllers start.
async fn install_prerequisites(
    client: &kube::Client,
    binaries: &LiqoBinaries,
    cluster_id: &str,
    webhooks: bool,
) -> Result<(), Error> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let namespace = Namespace {
        metadata: object_meta(LIQO_NAMESPACE, &[]),
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .patch(LIQO_NAMESPACE, &apply, &Patch::Apply(&namespace))
        .await?;

    // Liqo (and liqoctl) find the cluster ID by this label, not by name.
    let configmap = ConfigMap {
        metadata: object_meta(
            "liqo-clusterid-configmap",
            &[("app.kubernetes.io/name", "clusterid-configmap")],
        ),
        data: Some(BTreeMap::from([(
            "CLUSTER_ID".to_owned(),
            cluster_id.to_owned(),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), LIQO_NAMESPACE)
        .patch(
            "liqo-clusterid-configmap",
            &apply,
            &Patch::Apply(&configmap),
        )
        .await?;

    let roles: Api<ClusterRole> = Api::all(client.clone());
    for (name, app_name) in CLUSTER_ROLES {
        let path = binaries
            .chart_files_dir()
            .join(format!("{name}-ClusterRole.yaml"));
        let role = ClusterRole {
            metadata: object_meta(name, &[("app.kubernetes.io/name", app_name)]),
            rules: Some(chart_rules(&path)?),
            ..Default::default()
        };
        roles.patch(name, &apply, &Patch::Apply(&role)).await?;
    }

    if webhooks {
        // The webhook fills each VirtualNode's virtual-kubelet Deployment
        // from this template (chart: liqo-vk-options-template.yaml, defaults).
        let gvk = GroupVersionKind::gvk("offloading.liqo.io", "v1beta1", "VkOptionsTemplate");
        let resource = ApiResource::from_gvk(&gvk);
        let template: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VkOptionsTemplate",
            "metadata": {"name": VK_OPTIONS_TEMPLATE, "namespace": LIQO_NAMESPACE},
            "spec": {
                "replicas": 1,
                "createNode": true,
                "disableNetworkCheck": false,
                // Never pulled: nothing runs the Deployment's pods here.
                "containerImage": format!("ghcr.io/liqotech/virtual-kubelet:{}", liqo_version_of(binaries)),
                "metricsEnabled": false,
                "extraArgs": ["--enable-apiserver-support=true", "--disable-ip-reflection"],
            },
        }))
        .map_err(|e| Error::Fixture(format!("VkOptionsTemplate: {e}")))?;
        Api::<DynamicObject>::namespaced_with(client.clone(), LIQO_NAMESPACE, &resource)
            .patch(VK_OPTIONS_TEMPLATE, &apply, &Patch::Apply(&template))
            .await?;
    }
    Ok(())
}

/// `liqo-controller-manager`'s arguments for this test control plane.
fn controller_manager_args(
    cluster_id: &str,
    opts: &LiqoOptions,
    health_port: u16,
    control_plane: &ControlPlane,
) -> Result<Vec<String>, Error> {
    let mut args = vec![
        format!("--cluster-id={cluster_id}"),
        format!("--liqo-namespace={LIQO_NAMESPACE}"),
        format!("--networking-enabled={}", opts.networking),
        "--authentication-enabled=true".to_owned(),
        "--offloading-enabled=true".to_owned(),
        format!("--health-probe-address=127.0.0.1:{health_port}"),
        // "0" disables the metrics server: nothing scrapes it here.
        "--metrics-address=0".to_owned(),
        // Webhooks are served by the `webhook` process and none is
        // registered here, so nothing binds this; a free port keeps the
        // shared default 9443 out of the way should that change.
        format!("--webhook-port={}", free_port()?),
        // No liqo-proxy runs here to remap the API server's IP.
        "--enable-api-server-ip-remapping=false".to_owned(),
        // Otherwise Liqo derives the URL from a control-plane Node's IP
        // and port 6443; peers must reach this loopback API server.
        format!(
            "--api-server-address-override={}",
            control_plane.server_url()
        ),
        format!("--default-node-resources={DEFAULT_NODE_RESOURCES}"),
    ];
    if opts.networking {
        // The chart passes these: without them the gateway operators
        // never see their WireGuard gateways' status change.
        args.push(
            "--gateway-server-resources=networking.liqo.io/v1beta1/wggatewayservers".to_owned(),
        );
        args.push(
            "--gateway-client-resources=networking.liqo.io/v1beta1/wggatewayclients".to_owned(),
        );
    }
    args.extend(opts.extra_controller_manager_args.iter().cloned());
    Ok(args)
}

/// The Liqo version in the module directory name (`.../liqo@v1.0.0`).
fn liqo_version_of(binaries: &LiqoBinaries) -> String {
    binaries
        .module_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.rsplit_once('@'))
        .map_or_else(|| "latest".to_owned(), |(_, v)| v.to_owned())
}

/// The `rules:` of one of the chart's `files/*-ClusterRole.yaml`.
fn chart_rules(path: &Path) -> Result<Vec<PolicyRule>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    parse_rules(&text).map_err(|e| Error::Fixture(format!("{}: {e}", path.display())))
}

fn parse_rules(text: &str) -> Result<Vec<PolicyRule>, String> {
    #[derive(serde::Deserialize)]
    struct Rules {
        rules: Vec<PolicyRule>,
    }
    serde_yaml::from_str::<Rules>(text)
        .map(|r| r.rules)
        .map_err(|e| e.to_string())
}

struct WebhookEndpoint {
    port: u16,
    health_port: u16,
    ca_pem: String,
}

/// Starts Liqo's webhook with a serving certificate for 127.0.0.1.
fn start_webhook(
    liqo: &mut Liqo,
    binaries: &LiqoBinaries,
    control_plane: &ControlPlane,
    opts: &LiqoOptions,
) -> Result<WebhookEndpoint, Error> {
    let cluster_id = liqo.cluster_id.clone();
    let (kubeconfig, logs) = (control_plane.kubeconfig_path(), control_plane.log_dir());
    // controller-runtime reads the serving certificate from
    // $TMPDIR/k8s-webhook-server/serving-certs; a private TMPDIR keeps two
    // clusters' webhooks (and other users of /tmp) apart. `--secret-name` is
    // not passed: it would make Liqo write certificates to a fixed /tmp path.
    let tmp = tempfile::Builder::new()
        .prefix("fluidos-testenv-liqo-webhook-")
        .tempdir()
        .map_err(|e| Error::io("creating the webhook's temp dir", e))?;
    let cert_dir = tmp.path().join("k8s-webhook-server/serving-certs");
    std::fs::create_dir_all(&cert_dir)
        .map_err(|e| Error::io(format!("creating {}", cert_dir.display()), e))?;
    let serving = serving_certificate()?;
    for (file, contents) in [
        ("tls.crt", &serving.cert_pem),
        ("tls.key", &serving.key_pem),
    ] {
        let path = cert_dir.join(file);
        std::fs::write(&path, contents)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    let port = free_port()?;
    let health_port = free_port()?;
    let tmp_path = tmp.path().to_path_buf();
    liqo._webhook_dir = Some(tmp);
    let mut args = vec![
        format!("--cluster-id={cluster_id}"),
        format!("--liqo-namespace={LIQO_NAMESPACE}"),
        format!("--webhook-port={port}"),
        format!("--health-probe-address=127.0.0.1:{health_port}"),
        "--metrics-address=0".to_owned(),
        format!("--podcidr={POD_CIDR}"),
        format!("--vk-options-default-template={LIQO_NAMESPACE}/{VK_OPTIONS_TEMPLATE}"),
    ];
    args.extend(opts.extra_webhook_args.iter().cloned());
    liqo.spawn(
        WEBHOOK,
        &binaries.require(WEBHOOK)?,
        &args,
        kubeconfig,
        logs,
        &[("TMPDIR", tmp_path.as_path())],
    )?;
    Ok(WebhookEndpoint {
        port,
        health_port,
        ca_pem: serving.ca_pem,
    })
}

struct ServingCertificate {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A throw-away CA and a serving certificate for 127.0.0.1 signed by it.
fn serving_certificate() -> Result<ServingCertificate, Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "fluidos-testenv-liqo-webhook-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    params
        .distinguished_name
        .push(DnType::CommonName, "liqo-webhook");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok(ServingCertificate {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// One webhook of the chart: (name, path, API group, resource, operations).
type WebhookSpec = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

/// The chart's `templates/webhooks/liqo-mutating-webhook.yaml`, in order.
const MUTATING_WEBHOOKS: &[WebhookSpec] = &[
    ("pod.mutate.liqo.io", "/mutate/pod", "", "pods", &["CREATE"]),
    (
        "shadowpod.mutate.liqo.io",
        "/mutate/shadowpods",
        "offloading.liqo.io",
        "shadowpods",
        &["CREATE", "UPDATE", "DELETE"],
    ),
    (
        "fc.mutate.liqo.io",
        "/mutate/foreign-cluster",
        "core.liqo.io",
        "foreignclusters",
        &["CREATE", "UPDATE"],
    ),
    (
        "virtualnode.mutate.liqo.io",
        "/mutate/virtualnodes",
        "offloading.liqo.io",
        "virtualnodes",
        &["CREATE", "UPDATE"],
    ),
    (
        "firewallconfiguration.mutate.liqo.io",
        "/mutate/firewallconfigurations",
        "networking.liqo.io",
        "firewallconfigurations",
        &["CREATE", "UPDATE"],
    ),
    (
        "tenant.validate.liqo.io",
        "/mutate/tenants",
        "authentication.liqo.io",
        "tenants",
        &["CREATE", "UPDATE"],
    ),
];

/// The chart's `templates/webhooks/liqo-validating-webhook.yaml`, in order.
const VALIDATING_WEBHOOKS: &[WebhookSpec] = &[
    (
        "nsoff.validate.liqo.io",
        "/validate/namespace-offloading",
        "offloading.liqo.io",
        "namespaceoffloadings",
        &["CREATE", "UPDATE"],
    ),
    (
        "shadowpod.validate.liqo.io",
        "/validate/shadowpods",
        "offloading.liqo.io",
        "shadowpods",
        &["CREATE", "UPDATE", "DELETE"],
    ),
    (
        "firewallconfiguration.validate.liqo.io",
        "/validate/firewallconfigurations",
        "networking.liqo.io",
        "firewallconfigurations",
        &["CREATE", "UPDATE"],
    ),
    (
        "routeconfiguration.validate.liqo.io",
        "/validate/routeconfigurations",
        "networking.liqo.io",
        "routeconfigurations",
        &["CREATE", "UPDATE"],
    ),
    (
        "resourceslice.validate.liqo.io",
        "/validate/resourceslices",
        "authentication.liqo.io",
        "resourceslices",
        &["CREATE", "UPDATE"],
    ),
    (
        "tenant.validate.liqo.io",
        "/validate/tenants",
        "authentication.liqo.io",
        "tenants",
        &["CREATE", "UPDATE"],
    ),
];

struct WebhookParts {
    name: String,
    client_config: WebhookClientConfig,
    rules: Vec<RuleWithOperations>,
    namespace_selector: Option<LabelSelector>,
}

fn webhook_parts(spec: &WebhookSpec, port: u16, ca_pem: &str) -> WebhookParts {
    let (name, path, group, resource, operations) = *spec;
    let version = if group.is_empty() { "v1" } else { "v1beta1" };
    WebhookParts {
        name: name.to_owned(),
        // By URL instead of the chart's Service: nothing routes Services here.
        client_config: WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:{port}{path}")),
            ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
            service: None,
        },
        rules: vec![RuleWithOperations {
            api_groups: Some(vec![group.to_owned()]),
            api_versions: Some(vec![version.to_owned()]),
            operations: Some(operations.iter().map(|o| (*o).to_owned()).collect()),
            resources: Some(vec![resource.to_owned()]),
            scope: None,
        }],
        // As in the chart: only Pods of namespaces offloaded by Liqo.
        namespace_selector: (resource == "pods").then(|| LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "liqo.io/scheduling-enabled".to_owned(),
                "true".to_owned(),
            )])),
            ..Default::default()
        }),
    }
}

/// Registers the chart's mutating and validating webhooks, pointing at the
/// webhook process on loopback (failure policy `Fail`, the chart's default).
async fn register_webhooks(client: &kube::Client, port: u16, ca_pem: &str) -> Result<(), Error> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let versions = vec!["v1".to_owned(), "v1beta1".to_owned()];
    let mutating = MutatingWebhookConfiguration {
        metadata: object_meta("liqo-webhook", &[("liqo.io/webhook", "true")]),
        webhooks: Some(
            MUTATING_WEBHOOKS
                .iter()
                .map(|spec| {
                    let parts = webhook_parts(spec, port, ca_pem);
                    MutatingWebhook {
                        name: parts.name,
                        admission_review_versions: versions.clone(),
                        client_config: parts.client_config,
                        rules: Some(parts.rules),
                        namespace_selector: parts.namespace_selector,
                        side_effects: "None".to_owned(),
                        failure_policy: Some("Fail".to_owned()),
                        ..Default::default()
                    }
                })
                .collect(),
        ),
    };
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch("liqo-webhook", &apply, &Patch::Apply(&mutating))
        .await?;
    let validating = ValidatingWebhookConfiguration {
        metadata: object_meta("liqo-webhook", &[("liqo.io/webhook", "true")]),
        webhooks: Some(
            VALIDATING_WEBHOOKS
                .iter()
                .map(|spec| {
                    let parts = webhook_parts(spec, port, ca_pem);
                    ValidatingWebhook {
                        name: parts.name,
                        admission_review_versions: versions.clone(),
                        client_config: parts.client_config,
                        rules: Some(parts.rules),
                        namespace_selector: parts.namespace_selector,
                        side_effects: "None".to_owned(),
                        failure_policy: Some("Fail".to_owned()),
                        ..Default::default()
                    }
                })
                .collect(),
        ),
    };
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch("liqo-webhook", &apply, &Patch::Apply(&validating))
        .await?;
    Ok(())
}

/// `Ok` if `GET http://127.0.0.1:<port><path>` answers 200.
async fn http_ok(port: u16, path: &str) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // Only the status line matters; metrics bodies can be large.
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < head.len() {
        let n = stream
            .read(&mut head[read..])
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        read += n;
        if head[..read].contains(&b'\n') {
            break;
        }
    }
    let status_line = String::from_utf8_lossy(&head[..read]);
    let status_line = status_line.lines().next().unwrap_or_default();
    if status_line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        Err(format!("GET {path}: {status_line}"))
    }
}

/// `Ok` once something accepts TCP connections on 127.0.0.1:`port`.
async fn tcp_accepts(port: u16) -> Result<(), String> {
    tokio::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port))
        .await
        .map(drop)
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_chart_rule_files() {
        let text = "# comment\nrules:\n- apiGroups:\n  - authentication.liqo.io\n  resources:\n  - resourceslices\n  verbs:\n  - get\n  - list\n";
        let rules = parse_rules(text).unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get", "list"]);
        assert!(parse_rules("kind: Nothing\n").is_err());
    }

    #[test]
    fn webhooks_point_at_loopback_with_the_ca() {
        let parts = webhook_parts(&MUTATING_WEBHOOKS[3], 9443, "CA");
        assert_eq!(parts.name, "virtualnode.mutate.liqo.io");
        assert_eq!(
            parts.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/mutate/virtualnodes")
        );
        assert_eq!(
            parts.client_config.ca_bundle,
            Some(ByteString(b"CA".to_vec()))
        );
        assert!(parts.namespace_selector.is_none());
        let pods = webhook_parts(&MUTATING_WEBHOOKS[0], 1, "CA");
        assert_eq!(
            pods.rules[0].api_versions.as_deref(),
            Some(&["v1".to_owned()][..])
        );
        assert!(pods.namespace_selector.is_some());
    }

    #[test]
    fn version_comes_from_the_module_dir() {
        let binaries = LiqoBinaries {
            dir: PathBuf::from("/bin"),
            module_dir: PathBuf::from("/go/pkg/mod/github.com/liqotech/liqo@v1.0.0"),
        };
        assert_eq!(liqo_version_of(&binaries), "v1.0.0");
        assert!(binaries.crds_dir().ends_with("liqo-crds/crds"));
    }

    #[test]
    fn unset_bin_dir_says_how_to_build() {
        let err = LiqoBinaries::in_dir(Path::new("/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("tools/liqo/build.sh"), "{err}");
    }

    #[test]
    fn pod_env_fills_the_downward_api_and_expands_args() {
        use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
        let field = |path: &str| EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                api_version: None,
            }),
            ..Default::default()
        };
        let vars = vec![
            EnvVar {
                name: "POD_IP".into(),
                value_from: Some(field("status.podIP")),
                ..Default::default()
            },
            EnvVar {
                name: "POD_NAMESPACE".into(),
                value_from: Some(field("metadata.namespace")),
                ..Default::default()
            },
            EnvVar {
                name: "VIRTUALNODE_NAME".into(),
                value: Some("p".into()),
                ..Default::default()
            },
            EnvVar {
                name: "UNKNOWN".into(),
                value_from: Some(field("spec.nodeName")),
                ..Default::default()
            },
        ];
        let env = pod_env(&vars, "vk-standin", "tenant");
        assert_eq!(
            env,
            [
                ("POD_IP".to_owned(), "127.0.0.1".to_owned()),
                ("POD_NAMESPACE".to_owned(), "tenant".to_owned()),
                ("VIRTUALNODE_NAME".to_owned(), "p".to_owned()),
            ]
        );
        assert_eq!(
            expand_env_refs("--node-ip=$(POD_IP)", &env),
            "--node-ip=127.0.0.1"
        );
        assert_eq!(expand_env_refs("--x=$(NOPE)", &env), "--x=$(NOPE)");
    }

    #[test]
    fn serving_certificate_is_pem() {
        let cert = serving_certificate().unwrap();
        assert!(cert.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        KeyPair::from_pem(&cert.key_pem).unwrap();
    }

    #[tokio::test]
    async fn http_probe_reads_the_status_line() {
        let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for status in ["200 OK", "500 Internal Server Error"] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 256];
                let _ = socket.read(&mut buf).await.unwrap();
                socket
                    .write_all(format!("HTTP/1.1 {status}\r\n\r\nbody").as_bytes())
                    .await
                    .unwrap();
            }
        });
        assert_eq!(http_ok(port, "/readyz").await, Ok(()));
        let err = http_ok(port, "/readyz").await.unwrap_err();
        assert!(err.contains("500"), "{err}");
        server.await.unwrap();
    }
}

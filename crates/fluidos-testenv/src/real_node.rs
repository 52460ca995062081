//! A real Node for a test control plane: Debian's containerd and runc run the
//! pods, the bridge CNI gives them addresses, kube-proxy programs Service
//! addresses, and a kubelet built from the Go module proxy registers the Node.
//! Everything runs in the node's own network namespace ([`NodeSlot`]), so two
//! clusters' kube-proxies and bridges never meet.
//!
//! There is no registry: the images pods use are built here
//! ([`ImageSpec`]) and imported into this node's containerd before the
//! kubelet starts. `imagePullPolicy: Never` (or `IfNotPresent`) uses them.
//!
//! What this machine needs and why (measured; `shared/reference/real-cluster-here.md`):
//! cgroup v1 needs the kubelet's `failCgroupV1: false`, there are no systemd
//! slices (cgroupfs driver, no QoS cgroups), and a negative `oom_score_adj` is
//! refused, so containerd must not ask for one (`restrict_oom_score_adj`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::wait::await_condition;

use crate::Error;
use crate::node_slot::NodeSlot;
use crate::oci_image::ImageSpec;
use crate::process::ManagedProcess;

/// The sandbox ("pause") image every pod starts with; built from busybox.
pub const PAUSE_IMAGE: &str = "fluidos.test/pause:1";
/// A busybox image for test workloads (`httpd`, `nc`, `sh`), running as 1000.
pub const BUSYBOX_IMAGE: &str = "fluidos.test/busybox:1";
/// Debian's `busybox-static`, which both images are made from.
const BUSYBOX: &str = "/bin/busybox";
const CONTAINERD: &str = "containerd";
const CTR: &str = "ctr";
/// Where Debian's `containernetworking-plugins` installs the CNI plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";
const KUBELET_PORT: u16 = 10250;
/// A kubelet that registers and reports Ready takes a few seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);

/// Debian's containerd, runc and CNI plugins, and the kubelet, kube-proxy
/// and CoreDNS of `tools/control-plane/build.sh`.
#[derive(Debug, Clone)]
pub(crate) struct RealNodeBinaries {
    pub(crate) kubelet: PathBuf,
    pub(crate) kube_proxy: PathBuf,
    /// The cluster DNS (`crate::cluster_dns`).
    pub(crate) coredns: PathBuf,
}

/// What the node needs from its control plane.
pub(crate) struct ClusterAccess<'a> {
    /// kube-apiserver's URL on the slot's host address.
    pub(crate) server_url: &'a str,
    pub(crate) ca_cert_pem: &'a str,
    pub(crate) ca_cert_path: &'a Path,
    /// A kubeconfig for `system:node:<name>` (group `system:nodes`).
    pub(crate) kubelet_kubeconfig_yaml: String,
    /// A kubeconfig for `system:kube-proxy` (bound to `system:node-proxier`).
    pub(crate) kube_proxy_kubeconfig_yaml: String,
    pub(crate) client: &'a kube::Client,
}

/// A running real node; dropping it kills its processes and containers and
/// removes its namespace, mounts and files.
pub struct RealNode {
    // Before `slot`: the processes die before the slot's clean-up runs.
    processes: Vec<ManagedProcess>,
    name: String,
    slot: NodeSlot,
}

impl RealNode {
    /// The Node's name: `real-node-<slot>`.
    pub(crate) fn name_for(slot: &NodeSlot) -> String {
        format!(
            "real-node-{}",
            slot.netns().trim_start_matches("fluidos-testenv-")
        )
    }

    /// Starts containerd, imports the images, starts the kubelet and
    /// kube-proxy, and returns once the Node is Ready.
    pub(crate) async fn start(
        slot: NodeSlot,
        binaries: &RealNodeBinaries,
        access: ClusterAccess<'_>,
        images: &[ImageSpec],
    ) -> Result<RealNode, Error> {
        real_node_prerequisites()?;
        let started = Instant::now();
        let name = Self::name_for(&slot);
        let dir = slot.dir().to_path_buf();
        let sub = |p: &str| dir.join(p);
        for d in [
            "containerd/root",
            "containerd/state",
            "cni/conf",
            "kubelet",
            "kubelet-pki",
            "images",
        ] {
            create_dir(&sub(d))?;
        }
        let mut node = RealNode {
            processes: Vec::new(),
            name,
            slot,
        };
        let netns = node.slot.netns_path();
        let socket = sub("containerd/containerd.sock");

        let containerd_config = sub("containerd/config.toml");
        write(&containerd_config, &containerd_config_toml(&dir, &socket))?;
        write(
            &sub("cni/conf/10-bridge.conflist"),
            &cni_conflist(&node.slot.pod_cidr(), &sub("cni/ipam")),
        )?;
        node.processes.push(spawn_in(
            &netns,
            CONTAINERD,
            Path::new(CONTAINERD),
            &[
                "--config".to_owned(),
                containerd_config.display().to_string(),
            ],
            sub("containerd.log"),
        )?);
        node.wait_for_containerd(&socket).await?;

        import_images(&socket, &sub("images"), binaries, images)?;

        let kubelet_kubeconfig = sub("kubelet.kubeconfig");
        write(&kubelet_kubeconfig, &access.kubelet_kubeconfig_yaml)?;
        let kubelet_config = sub("kubelet.yaml");
        write(
            &kubelet_config,
            &kubelet_config_yaml(&node.slot, &socket, access.ca_cert_path),
        )?;
        node.processes.push(spawn_in(
            &netns,
            "kubelet",
            &binaries.kubelet,
            &[
                format!("--config={}", kubelet_config.display()),
                format!("--kubeconfig={}", kubelet_kubeconfig.display()),
                format!("--hostname-override={}", node.name),
                format!("--node-ip={}", node.slot.node_ip()),
                format!("--root-dir={}", sub("kubelet").display()),
                format!("--cert-dir={}", sub("kubelet-pki").display()),
            ],
            sub("kubelet.log"),
        )?);

        let proxy_kubeconfig = sub("kube-proxy.kubeconfig");
        write(&proxy_kubeconfig, &access.kube_proxy_kubeconfig_yaml)?;
        let proxy_config = sub("kube-proxy.yaml");
        write(
            &proxy_config,
            &kube_proxy_config_yaml(&node.name, &node.slot.pod_cidr(), &proxy_kubeconfig),
        )?;
        node.processes.push(spawn_in(
            &netns,
            "kube-proxy",
            &binaries.kube_proxy,
            &[format!("--config={}", proxy_config.display())],
            sub("kube-proxy.log"),
        )?);

        node.wait_ready(access.client).await?;
        let line = format!(
            "fluidos-testenv: real node {} Ready at {} in {:.1?} (containerd, kubelet, kube-proxy in netns {}; API server {}; logs in {}; CA {} bytes)\n",
            node.name,
            node.slot.node_ip(),
            started.elapsed(),
            node.slot.netns(),
            access.server_url,
            dir.display(),
            access.ca_cert_pem.len(),
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        Ok(node)
    }

    /// The Node object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Node's InternalIP, inside its network namespace.
    pub fn node_ip(&self) -> std::net::Ipv4Addr {
        self.slot.node_ip()
    }

    /// The pod network (`10.244.N.0/24`); the host routes to it directly.
    pub fn pod_cidr(&self) -> String {
        self.slot.pod_cidr()
    }

    /// `/run/netns/...`: run a command in the node's network with
    /// `nsenter --net=<this>`.
    pub fn netns_path(&self) -> PathBuf {
        self.slot.netns_path()
    }

    /// This node's scratch directory (containerd's root and state, the
    /// kubelet's root, logs): nothing is mounted under it once the cluster
    /// has stopped.
    pub fn scratch_dir(&self) -> &std::path::Path {
        self.slot.dir()
    }

    /// The last lines of the kubelet's, containerd's and kube-proxy's logs.
    pub fn log_tail(&self) -> String {
        self.processes
            .iter()
            .map(ManagedProcess::log_tail)
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn wait_for_containerd(&mut self, socket: &Path) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            for process in &mut self.processes {
                process.ensure_running()?;
            }
            // A process start, not another controller: polled like
            // kube-apiserver's /readyz.
            let last_error = match ctr(socket, &["version"]) {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= SOCKET_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("containerd at {}", socket.display()),
                    waited: started.elapsed(),
                    last_error,
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_ready(&mut self, client: &kube::Client) -> Result<(), Error> {
        let nodes: Api<Node> = Api::all(client.clone());
        let ready = await_condition(nodes, &self.name, |node: Option<&Node>| {
            node.and_then(|n| n.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        let outcome = tokio::time::timeout(READY_TIMEOUT, ready).await;
        for process in &mut self.processes {
            process.ensure_running()?;
        }
        match outcome {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Error::RealNode(format!("watching Node {}: {e}", self.name))),
            Err(_) => Err(Error::Timeout {
                what: format!("Node {} Ready", self.name),
                waited: READY_TIMEOUT,
                last_error: "the kubelet did not report Ready".to_owned(),
                log_tail: self
                    .processes
                    .iter()
                    .map(|p| p.problem_lines(20))
                    .collect::<Vec<_>>()
                    .join("\n"),
            }),
        }
    }

    /// Kills the node's processes and containers and removes what it made.
    pub(crate) fn stop(mut self) {
        self.kill_processes();
    }

    fn kill_processes(&mut self) {
        // kube-proxy and the kubelet before containerd (the reverse of their
        // start), so the kubelet restarts nothing while the rest goes.
        for process in self.processes.iter_mut().rev() {
            process.kill();
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.kill_processes();
        // `slot` drops next and removes containers, mounts and the namespace.
    }
}

impl std::fmt::Debug for RealNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNode")
            .field("name", &self.name)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

/// Imports the images every real node has (pause, busybox, CoreDNS) and
/// `images` into the node's containerd, from archives written to `dir`.
fn import_images(
    socket: &Path,
    dir: &Path,
    binaries: &RealNodeBinaries,
    images: &[ImageSpec],
) -> Result<(), Error> {
    let mut all_images = vec![
        pause_image(),
        busybox_image(),
        crate::cluster_dns::image(&binaries.coredns)?,
    ];
    all_images.extend(images.iter().cloned());
    for image in &all_images {
        let archive = dir.join(format!("{}.tar", image.name().replace(['/', ':'], "_")));
        image.write_archive(&archive)?;
        ctr(
            socket,
            &["images", "import", &archive.display().to_string()],
        )?;
    }
    Ok(())
}

/// The pause image: busybox sleeping, as the sandbox only holds namespaces.
fn pause_image() -> ImageSpec {
    ImageSpec::new(PAUSE_IMAGE)
        .executable("bin/busybox", BUSYBOX)
        .entrypoint(&["/bin/busybox", "sleep", "2147483647"])
}

/// Busybox for workloads, as user 1000 so `restricted` pods may run it.
fn busybox_image() -> ImageSpec {
    ImageSpec::new(BUSYBOX_IMAGE)
        .executable("bin/busybox", BUSYBOX)
        .executable("bin/sh", BUSYBOX)
        .entrypoint(&["/bin/busybox"])
        .user("1000")
}

/// Whether this machine can run a real node: root (network namespaces,
/// mounts, cgroups) and the host tools, each missing one named with its
/// Debian package. Tests that need a real node skip outside CI on an error.
pub fn real_node_prerequisites() -> Result<(), Error> {
    #[allow(unsafe_code)]
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(Error::RealNode(
            "a real node needs root (network namespaces, mounts, cgroups)".to_owned(),
        ));
    }
    check_host_tools()
}

/// Refuses, naming the Debian package, when a host tool is missing.
fn check_host_tools() -> Result<(), Error> {
    let missing = |what: &str, package: &str| {
        Error::RealNode(format!(
            "{what} is missing: install Debian's {package} (tools/node-runtime/install.sh)"
        ))
    };
    for (tool, package) in [
        (CONTAINERD, "containerd"),
        (CTR, "containerd"),
        ("runc", "runc"),
        ("nsenter", "util-linux"),
        ("ip", "iproute2"),
        ("iptables", "iptables"),
    ] {
        if which(tool).is_none() {
            return Err(missing(tool, package));
        }
    }
    // A pod reaching another pod on the same bridge through a Service (the
    // cluster DNS) gets its answer translated back only if bridged traffic
    // goes through iptables.
    let bridge_nf = "/proc/sys/net/bridge/bridge-nf-call-iptables";
    if std::fs::read_to_string(bridge_nf)
        .ok()
        .as_deref()
        .map(str::trim)
        != Some("1")
    {
        return Err(Error::RealNode(format!(
            "{bridge_nf} is not 1: load br_netfilter and turn it on (modprobe br_netfilter; \
             sysctl -w net.bridge.bridge-nf-call-iptables=1; tools/node-runtime/install.sh does both)"
        )));
    }
    if !Path::new(CNI_BIN_DIR).join("bridge").is_file() {
        return Err(missing(
            "the bridge CNI plugin",
            "containernetworking-plugins",
        ));
    }
    let busybox = std::fs::read(BUSYBOX).map_err(|_| missing(BUSYBOX, "busybox-static"))?;
    // A dynamically linked busybox (Debian's `busybox`) names its loader.
    if busybox
        .windows(b"/lib64/ld-linux".len())
        .any(|w| w == b"/lib64/ld-linux")
    {
        return Err(missing("a static /bin/busybox", "busybox-static"));
    }
    Ok(())
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(tool))
            .find(|candidate| candidate.is_file())
    })
}

/// Starts `program` inside the network namespace at `netns` (only the
/// network: `ip netns exec` would also remount `/sys`, which hides the cgroup
/// mounts from the kubelet).
fn spawn_in(
    netns: &Path,
    name: &str,
    program: &Path,
    args: &[String],
    log: PathBuf,
) -> Result<ManagedProcess, Error> {
    let mut all = vec![
        format!("--net={}", netns.display()),
        "--".to_owned(),
        program.display().to_string(),
    ];
    all.extend_from_slice(args);
    ManagedProcess::spawn(name, Path::new("nsenter"), &all, &[], log)
}

/// `ctr --address SOCKET --namespace k8s.io ARGS`, failing with its stderr.
fn ctr(socket: &Path, args: &[&str]) -> Result<(), Error> {
    let out = Command::new(CTR)
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io"])
        .args(args)
        .output()
        .map_err(|e| Error::io("running ctr (containerd)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::RealNode(format!(
            "ctr {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// containerd 1.6's configuration: its own root, state and socket; the pause
/// image local; pod network namespaces under its state directory, so the
/// slot's clean-up finds them; no negative `oom_score_adj`.
fn containerd_config_toml(dir: &Path, socket: &Path) -> String {
    let root = dir.join("containerd/root");
    let state = dir.join("containerd/state");
    let cni_conf = dir.join("cni/conf");
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
"#,
        root = root.display(),
        state = state.display(),
        socket = socket.display(),
        cni_conf = cni_conf.display(),
    )
}

/// A bridge with masquerade for traffic leaving the pod network, and hairpin
/// mode so a pod reaches itself through its own Service.
fn cni_conflist(pod_cidr: &str, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "fluidos-testenv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": ipam_dir,
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

/// The kubelet: cgroupfs without QoS cgroups (no systemd here), cgroup v1
/// allowed, no eviction or image GC thresholds (a test machine's disk is not
/// the node's business), client certificates from the cluster CA (kube-apiserver
/// for `logs`/`exec`) authorized by SubjectAccessReview.
fn kubelet_config_yaml(slot: &NodeSlot, socket: &Path, ca_cert: &Path) -> String {
    // Its own pod log directory: a kubelet removes the log directories of
    // pods it does not know, so two kubelets sharing /var/log/pods delete
    // each other's logs.
    let pod_logs = slot.dir().join("pod-logs");
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://{socket}
address: {node_ip}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
failSwapOn: false
resolvConf: \"\"
imageGCHighThresholdPercent: 100
evictionHard: {{}}
serializeImagePulls: false
localStorageCapacityIsolation: false
podLogsDir: {pod_logs}
{cluster_dns}",
        cluster_dns = crate::cluster_dns::kubelet_config_lines(),
        pod_logs = pod_logs.display(),
        socket = socket.display(),
        node_ip = slot.node_ip(),
        ca = ca_cert.display(),
    )
}

/// kube-proxy in iptables mode, in the node's namespace (its chains are that
/// namespace's alone); conntrack sizing left to the host.
fn kube_proxy_config_yaml(node: &str, pod_cidr: &str, kubeconfig: &Path) -> String {
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {node}
mode: iptables
clusterCIDR: {pod_cidr}
conntrack:
  maxPerCore: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
nodePortAddresses: [primary]
",
        kubeconfig = kubeconfig.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_keeps_everything_under_the_slot() {
        let toml = containerd_config_toml(Path::new("/s"), Path::new("/s/c.sock"));
        assert!(toml.contains("root = \"/s/containerd/root\""));
        assert!(toml.contains("state = \"/s/containerd/state\""));
        assert!(toml.contains("address = \"/s/c.sock\""));
        assert!(toml.contains("restrict_oom_score_adj = true"));
        assert!(toml.contains("netns_mounts_under_state_dir = true"));
        assert!(toml.contains(PAUSE_IMAGE));
    }

    #[test]
    fn cni_gives_the_slot_pod_network() {
        let conf: serde_json::Value =
            serde_json::from_str(&cni_conflist("10.244.3.0/24", Path::new("/s/ipam"))).unwrap();
        let bridge = &conf["plugins"][0];
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.244.3.0/24");
        assert_eq!(bridge["ipam"]["dataDir"], "/s/ipam");
        assert_eq!(bridge["hairpinMode"], true);
    }
}

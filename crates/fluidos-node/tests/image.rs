//! The image's premise, checked on the static release binary that
//! `deploy/Containerfile` copies (no container engine runs here, so the
//! image itself is built elsewhere). Laid out in an otherwise empty root as
//! the Containerfile lays it out (the binary and the Go binaries' names
//! linked to it; distroless/static adds no libc), one root per pod, and run
//! there by `chroot` as the Containerfile's numeric user under the Go
//! chart's commands (`/usr/bin/local-resource-manager`,
//! `/usr/bin/rear-controller`) and, for the REAR manager, as our chart runs
//! it (the entrypoint with `--components`), with our chart's arguments and
//! environment, its ServiceAccounts and the in-cluster configuration a pod
//! gets (token, CA and namespace files, `KUBERNETES_SERVICE_*`): all three
//! become ready, the gateway creates the node's identity, and the flavor the
//! LRM makes of a worker is served over REAR. Nothing in a root is writable by that user,
//! as with the chart's read-only root file system.
//!
//! Then the image itself: built from that binary as the Containerfile lays it
//! out (an OCI archive, `fluidos_testenv::ImageSpec`), imported into a real
//! node's containerd, and installed by `helm install` of the chart; every
//! component runs as a real container and the gateway answers on the node's
//! address through its NodePort.
//!
//! Needs the binary in `FLUIDOS_STATIC_BINARY` (`tools/image/build-static.sh`
//! prints its path; CI builds it and runs this test), root (for `chroot`)
//! and `FLUIDOS_HELM_BIN_DIR` (the real cluster also the packages of
//! `tools/node-runtime/install.sh`); without them it prints `SKIP: ...` and passes
//! (`.ci/run` fails if its own run of this file, after the build, skips).

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::Value;
use tokio::process::Command;

mod support;

use fluidos_testenv::fixtures;
use support::helm;
use support::{NS, NodeProcess, cluster, eventually, free_port};

/// What `deploy/Containerfile` puts in the image, read from the file itself
/// so that this test follows it.
#[derive(Debug, PartialEq, Eq)]
struct ImageLayout {
    /// Where the build context holds the binary
    /// (`tools/image/build-static.sh` puts it there).
    source: String,
    /// Where the binary lands, e.g. `/usr/bin/fluidos-node`.
    binary: String,
    /// The names linked to it in the same directory (the Go binaries').
    links: Vec<String>,
    /// `USER`, as `uid:gid`.
    user: String,
    /// `ENTRYPOINT`'s program.
    entrypoint: String,
}

/// Reads the layout out of the Containerfile's text.
fn image_layout(containerfile: &str) -> ImageLayout {
    let lines: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let copy: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("COPY target/"))
        .expect("a `COPY target/... /out/...` line")
        .split_whitespace()
        .collect();
    let source = copy[1].to_owned();
    let binary = copy[2]
        .strip_prefix("/out")
        .expect("the links stage copies into /out")
        .to_owned();
    let links = lines
        .iter()
        .find_map(|l| l.strip_prefix("for name in "))
        .and_then(|rest| rest.split(';').next())
        .expect("a `for name in ...;` line")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line")
        .trim()
        .to_owned();
    let entrypoint = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .and_then(|json| serde_json::from_str::<Vec<String>>(json).ok())
        .and_then(|argv| argv.into_iter().next())
        .expect("an ENTRYPOINT in exec form");
    ImageLayout {
        source,
        binary,
        links,
        user,
        entrypoint,
    }
}

/// Whether an ELF file asks for a program interpreter (a dynamic loader),
/// which an image without libc does not have.
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = usize::try_from(u64_at(0x20)).unwrap();
    let (phentsize, phnum) = (usize::from(u16_at(0x36)), usize::from(u16_at(0x38)));
    (0..phnum).any(|i| u32_at(phoff + i * phentsize) == PT_INTERP)
}

/// The static binary to check, or why this run cannot.
fn static_binary() -> Result<PathBuf, String> {
    // CI runs this file a second time once the binary is built, and checks
    // that it did not skip then.
    let Some(bin) = std::env::var_os("FLUIDOS_STATIC_BINARY") else {
        return Err(
            "FLUIDOS_STATIC_BINARY is unset (tools/image/build-static.sh prints the path)".into(),
        );
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return Err("chroot needs root".into());
    }
    // Relative to the workspace, where CI and the docs run it from (a test
    // runs in its package's directory).
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(bin))
}

/// Creates `path` (and its parents) in the root, owned by root and
/// readable by anyone, as an image layer's directories are.
fn dir(root: &Path, path: &str) -> PathBuf {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(&p).unwrap();
    let mut d = p.as_path();
    while d != root {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d = d.parent().unwrap();
    }
    p
}

/// Writes a read-only file into the root.
fn file(root: &Path, path: &str, contents: &[u8], mode: u32) {
    let p = root.join(path.trim_start_matches('/'));
    dir(
        root,
        p.parent()
            .unwrap()
            .strip_prefix(root)
            .unwrap()
            .to_str()
            .unwrap(),
    );
    std::fs::write(&p, contents).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_containerfile_layout_is_read_from_the_file() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Containerfile"),
    )
    .unwrap();
    let layout = image_layout(&text);
    assert_eq!(
        layout,
        ImageLayout {
            source: "target/static/x86_64-unknown-linux-musl/release/fluidos-node".into(),
            binary: "/usr/bin/fluidos-node".into(),
            links: [
                "local-resource-manager",
                "rear-controller",
                "rear-manager",
                "network-manager"
            ]
            .map(String::from)
            .to_vec(),
            user: "65532:65532".into(),
            entrypoint: "/usr/bin/fluidos-node".into(),
        }
    );
}

#[tokio::test]
async fn the_static_binary_runs_the_chart_from_an_empty_root_as_the_image_user() {
    let bin = match static_binary() {
        Ok(bin) => bin,
        Err(why) => return eprintln!("SKIP: {why}"),
    };
    let Some(helm_bin) = helm::helm_bin() else {
        return;
    };
    let (elf, layout) = read_image(&bin);
    let cp = cluster().await;
    fixtures::worker_node(&cp, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    let rear_port = free_port();
    let objects = helm::template(
        &helm_bin,
        &[
            "peering.enabled=false".to_owned(),
            "common.configMaps.nodeIdentity.ip=127.0.0.1".to_owned(),
            "common.configMaps.nodeIdentity.nodeID=imagenode1".to_owned(),
            "rearController.service.gateway.type=ClusterIP".to_owned(),
            format!("rearController.service.gateway.port={rear_port}"),
            format!("rearController.service.gateway.targetPort={rear_port}"),
        ],
        &[],
    );
    fixtures::namespace(&cp, NS).await.unwrap();
    helm::apply(&cp.client(), &objects, false).await;
    let server = url_host_port(cp.server_url());
    // One root per pod: each holds its own ServiceAccount's token.
    let mut roots = Vec::new();
    let mut nodes = Vec::new();
    // Two as the Go chart runs them (by name), one as ours (the entrypoint).
    for (component, go_name) in [
        ("local-resource-manager", Some("local-resource-manager")),
        ("rear-gateway", Some("rear-controller")),
        ("rear-manager", None),
    ] {
        let root = pod_root(&cp, &layout, &elf, &objects, component).await;
        nodes.push(spawn_in_root(
            root.path(),
            &layout,
            &objects,
            (component, go_name),
            &server,
            rear_port,
        ));
        roots.push(root);
    }
    let running: Vec<&NodeProcess> = nodes.iter().map(|(n, _)| n).collect();
    for (_, health_port) in &nodes {
        eventually("/readyz", Duration::from_secs(60), &running, || async {
            helm::ready(*health_port).await.then_some(())
        })
        .await;
    }
    // The gateway made its identity key with its in-cluster credentials,
    // and serves the flavor the LRM made of the worker.
    Api::<Secret>::namespaced(cp.client(), NS)
        .get("fluidos-node-identity")
        .await
        .unwrap();
    let list = format!("http://127.0.0.1:{rear_port}/api/v2/flavors");
    let flavors: Value = eventually(
        "a flavor over REAR",
        Duration::from_secs(30),
        &running,
        || async {
            let r = reqwest::get(&list).await.ok()?;
            if r.status() != 200 {
                return None;
            }
            r.json::<Value>().await.ok()
        },
    )
    .await;
    assert_eq!(flavors.as_array().map(Vec::len), Some(1), "{flavors}");
    for node in &running {
        let log = node.log();
        assert!(
            !log.contains("panicked")
                && !log.contains("Read-only")
                && !log.contains("ermission denied"),
            "{log}"
        );
    }
    for (node, _) in nodes {
        node.kill().await;
    }
}

/// The binary, checked static, and the Containerfile's layout.
fn read_image(bin: &Path) -> (Vec<u8>, ImageLayout) {
    let elf = std::fs::read(bin).unwrap();
    assert!(
        !has_interpreter(&elf),
        "{} asks for a dynamic loader: not a static binary",
        bin.display()
    );
    println!(
        "static binary: {} bytes ({} MiB)",
        elf.len(),
        elf.len() >> 20
    );
    let containerfile = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Containerfile"),
    )
    .unwrap();
    let layout = image_layout(&containerfile);
    // The glibc fallback (no musl build on this machine) lands elsewhere:
    // noted by hand, refused in CI, which must check the image's binary.
    if !bin.ends_with(&layout.source) {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is not the Containerfile's {}",
            bin.display(),
            layout.source
        );
        println!(
            "NOTE: {} is not the Containerfile's {}",
            bin.display(),
            layout.source
        );
    }

    (elf, layout)
}

/// A pod's root for `component`: the image's files laid out as the
/// Containerfile says, and what Kubernetes mounts into a pod of the chart's
/// ServiceAccount for it (a token, the cluster's CA, the namespace).
/// Everything is root's, so the image's user can write nowhere.
async fn pod_root(
    cp: &fluidos_testenv::ControlPlane,
    layout: &ImageLayout,
    elf: &[u8],
    objects: &[Value],
    component: &str,
) -> tempfile::TempDir {
    let root_dir = tempfile::tempdir().unwrap();
    let root = root_dir.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    file(root, &layout.binary, elf, 0o755);
    let binary = Path::new(&layout.binary);
    let bin_dir = dir(root, binary.parent().unwrap().to_str().unwrap());
    for name in &layout.links {
        symlink(binary.file_name().unwrap(), bin_dir.join(name)).unwrap();
    }
    let account = "/var/run/secrets/kubernetes.io/serviceaccount";
    let sa = helm::service_account(objects, component);
    let token = helm::service_account_token(&cp.client(), NS, &sa).await;
    let ca = cp.kubeconfig().clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .unwrap();
    file(root, &format!("{account}/token"), token.as_bytes(), 0o644);
    file(root, &format!("{account}/ca.crt"), &ca, 0o644);
    file(root, &format!("{account}/namespace"), NS.as_bytes(), 0o644);
    root_dir
}

/// `https://host:port` → (`host`, `port`).
fn url_host_port(url: &str) -> (String, String) {
    let rest = url.trim_start_matches("https://").trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':').unwrap();
    (host.to_owned(), port.to_owned())
}

/// Runs the chart's container of `component` in `root` as the image's user,
/// with our chart's arguments and environment and in-cluster
/// configuration: as the Go chart does, by the Go binary's name
/// (`/usr/bin/<go_name>`, which stands for `--components`), or as our chart
/// does, by the image's entrypoint. Only the listening addresses are
/// loopback ones. Returns the process and its health port.
fn spawn_in_root(
    root: &Path,
    layout: &ImageLayout,
    objects: &[Value],
    (component, go_name): (&str, Option<&str>),
    (host, port): &(String, String),
    rear_port: u16,
) -> (NodeProcess, u16) {
    let c = helm::container(objects, component);
    let health_port = free_port();
    let mut own = vec![
        "--health-probe-bind-address",
        "--metrics-bind-address",
        "--http-port",
    ];
    let command = match go_name {
        Some(name) => {
            // The Go command's name stands for `--components`.
            own.push("--components");
            format!(
                "{}/{name}",
                Path::new(&layout.binary).parent().unwrap().display()
            )
        }
        None => layout.entrypoint.clone(),
    };
    let args = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .filter(|a| !own.iter().any(|o| a.starts_with(o)));
    // Found on this PATH: the node gets an empty environment.
    let chroot = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("chroot"))
        .find(|p| p.is_file())
        .expect("chroot on PATH (coreutils)");
    let mut cmd = Command::new(chroot);
    cmd.env_clear()
        .arg(format!("--userspec={}", layout.user))
        .arg(root)
        .arg(command)
        .args(args)
        .args([
            "--health-probe-bind-address",
            &format!("127.0.0.1:{health_port}"),
        ])
        .args(["--metrics-bind-address", "0"])
        .args(["--rear-bind-address", "127.0.0.1"])
        .args(["--http-port", &rear_port.to_string()]);
    for e in c["env"].as_array().into_iter().flatten() {
        cmd.env(e["name"].as_str().unwrap(), e["value"].as_str().unwrap());
    }
    cmd.env("KUBERNETES_SERVICE_HOST", host)
        .env("KUBERNETES_SERVICE_PORT", port);
    (NodeProcess::start(cmd), health_port)
}

/// The image `deploy/Containerfile` describes, built here from the static
/// binary: the binary and its links where the Containerfile puts them, the
/// `nonroot` user distroless/static has, and the CA bundle it ships.
fn node_image(bin: &Path, layout: &ImageLayout) -> fluidos_testenv::ImageSpec {
    let binary = layout.binary.trim_start_matches('/');
    let (dir, name) = binary.rsplit_once('/').unwrap();
    let mut image = fluidos_testenv::ImageSpec::new(format!("{REAL_IMAGE_REPOSITORY}:{REAL_IMAGE_TAG}"))
        .executable(binary, bin)
        .file(
            "etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )
        .file("etc/group", "root:x:0:\nnonroot:x:65532:\n")
        .file(
            "etc/ssl/certs/ca-certificates.crt",
            std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default(),
        )
        .entrypoint(&[layout.entrypoint.as_str()])
        .user(&layout.user);
    for link in &layout.links {
        image = image.symlink(&format!("{dir}/{link}"), name);
    }
    image
}

const REAL_IMAGE_REPOSITORY: &str = "fluidos.test/fluidos-node";
const REAL_IMAGE_TAG: &str = "ci";

/// The whole node as an operator installs it: the image above imported into
/// a real node's containerd, `helm install` of the chart, every component a
/// real container under the chart's security context, the LRM publishing the
/// real Node's spare capacity, and the REAR gateway answering on the node's
/// address through its NodePort, as a peer dials it. `helm uninstall` then
/// leaves no pod, and the namespace goes.
#[tokio::test]
async fn the_image_installed_by_its_chart_runs_in_a_real_cluster() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
    use kube::runtime::wait::{await_condition, conditions};

    let bin = match static_binary() {
        Ok(bin) => bin,
        Err(why) => return eprintln!("SKIP: {why}"),
    };
    if let Err(e) = fluidos_testenv::real_node_prerequisites() {
        assert!(std::env::var_os("CI").is_none(), "{e}");
        return eprintln!("SKIP: {e}");
    }
    let Some(helm_bin) = helm::helm_bin() else {
        return;
    };
    let (_, layout) = read_image(&bin);
    let cp = fluidos_testenv::ControlPlane::start(fluidos_testenv::ControlPlaneOptions {
        real_node: true,
        images: vec![node_image(&bin, &layout)],
        ..Default::default()
    })
    .await
    .unwrap();
    let node = cp.real_node().unwrap();
    let node_ip = node.node_ip().to_string();
    // The node whose resources are sold (the chart's default label).
    Api::<Node>::all(cp.client())
        .patch(
            node.name(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({
                "metadata": {"labels": {"node-role.fluidos.eu/resources": "true"}}
            })),
        )
        .await
        .unwrap();

    let kubeconfig = format!("--kubeconfig={}", cp.kubeconfig_path().display());
    install_chart(&helm_bin, &kubeconfig, &node_ip, cp.server_url());

    let deployments: Api<Deployment> = Api::namespaced(cp.client(), NS);
    let pods: Api<Pod> = Api::namespaced(cp.client(), NS);
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
        wait_available(&cp, &deployments, name).await;
    }
    for pod in pods.list(&Default::default()).await.unwrap().items {
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(node.name()));
        for container in &spec.containers {
            assert_eq!(
                container.image.as_deref(),
                Some(format!("{REAL_IMAGE_REPOSITORY}:{REAL_IMAGE_TAG}").as_str())
            );
        }
    }

    // As a peer dials the gateway: the node's address and the NodePort.
    let list = format!("http://{node_ip}:30000/api/v2/flavors");
    let client = reqwest::Client::new();
    first_flavor(&cp).await;
    let flavors: Value = client
        .get(&list)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let flavors = flavors.as_array().unwrap();
    assert_eq!(flavors.len(), 1, "{flavors:?}");
    // The real Node's capacity, sold under the identity peers dial back.
    let flavor = &flavors[0];
    let cpu = &flavor["type"]["data"]["charateristics"]["cpu"];
    assert!(cpu.as_str().is_some_and(|c| !c.is_empty()), "{flavor}");
    assert_eq!(
        flavor["owner"]["IP"],
        format!("{node_ip}:30000"),
        "{flavor}"
    );
    println!(
        "real cluster: the chart's 4 components run as containers of {REAL_IMAGE_REPOSITORY}:{REAL_IMAGE_TAG} on {}; REAR at {list} sells {} (cpu {cpu})",
        node.name(),
        flavor["flavorID"]
    );

    helm::helm(
        &helm_bin,
        &["uninstall", "fluidos", "--namespace", NS, &kubeconfig],
    );
    let namespaces: Api<Namespace> = Api::all(cp.client());
    namespaces.delete(NS, &Default::default()).await.unwrap();
    let gone = await_condition(namespaces, NS, conditions::is_deleted(""));
    tokio::time::timeout(Duration::from_secs(120), gone)
        .await
        .expect("the release namespace is stuck Terminating after helm uninstall")
        .unwrap();
    cp.stop().await;
}

/// Waits (watching) until Deployment `name` has rolled out; else fails with
/// every pod's state and logs and the node's.
async fn wait_available(
    cp: &fluidos_testenv::ControlPlane,
    deployments: &Api<k8s_openapi::api::apps::v1::Deployment>,
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
    let pods: Api<Pod> = Api::namespaced(cp.client(), NS);
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

/// Waits (watching) for the first Flavor the LRM publishes.
async fn first_flavor(cp: &fluidos_testenv::ControlPlane) {
    let flavors: Api<fluidos_api::Flavor> = Api::namespaced(cp.client(), NS);
    let applied = kube::runtime::WatchStreamExt::applied_objects(kube::runtime::watcher(
        flavors,
        kube::runtime::watcher::Config::default(),
    ));
    let first = futures::StreamExt::filter_map(applied, |f| async move { f.ok() });
    futures::pin_mut!(first);
    tokio::time::timeout(
        Duration::from_secs(60),
        futures::StreamExt::next(&mut first),
    )
    .await
    .expect("the LRM published no Flavor of the real node")
    .unwrap();
}

/// `helm install` of the chart as an operator would run it on this cluster:
/// the local image, never pulled; services only (no Liqo here yet); the
/// node's own address as its identity and the API server peers can reach.
fn install_chart(helm_bin: &Path, kubeconfig: &str, node_ip: &str, api_server: &str) {
    let chart = helm::chart_dir();
    let sets = [
        format!("image.repository={REAL_IMAGE_REPOSITORY}"),
        format!("tag={REAL_IMAGE_TAG}"),
        "pullPolicy=Never".to_owned(),
        "peering.enabled=false".to_owned(),
        format!("common.configMaps.nodeIdentity.ip={node_ip}"),
        format!("apiServer.address={}", api_server),
    ];
    let mut install = vec![
        "install",
        "fluidos",
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--create-namespace",
        kubeconfig,
    ];
    for set in &sets {
        install.extend(["--set", set.as_str()]);
    }
    helm::helm(helm_bin, &install);
}

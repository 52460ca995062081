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
//! `tools/node-runtime/install.sh`); without them it prints `SKIP: ...` and
//! passes, except in CI, where it fails (`fluidos_testenv::skip`). Without
//! the binary in CI it prints `DEFERRED: ...` and passes: CI's first pass runs
//! before the binary is built, and `.ci/run` checks that its second pass,
//! after the build, ran the tests.

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
use support::image::{
    ImageLayout, REAL_IMAGE_REPOSITORY, REAL_IMAGE_TAG, image_layout, read_image, static_binary,
};
use support::real_cluster::{self, Prerequisites};
use support::{NS, NodeProcess, cluster, eventually, free_port};

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
    let Some(bin) = static_binary() else {
        return;
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

/// The whole node as an operator installs it: the image above imported into
/// a real node's containerd, `helm install` of the chart, every component a
/// real container under the chart's security context, the LRM publishing the
/// real Node's spare capacity, and the REAR gateway answering on the node's
/// address through its NodePort, as a peer dials it. `helm uninstall` (its
/// pre-delete hook lifting the Flavors' ledger finalizer) then lets the
/// namespace go, and nothing of FLUIDOS is left.
#[tokio::test]
async fn the_image_installed_by_its_chart_runs_in_a_real_cluster() {
    use k8s_openapi::api::core::v1::Pod;

    let Some(Prerequisites {
        bin,
        layout,
        helm_bin,
    }) = real_cluster::prerequisites()
    else {
        return;
    };
    let cp = real_cluster::start(&bin, &layout, Vec::new()).await;
    let node = cp.real_node().unwrap();
    let node_ip = node.node_ip().to_string();
    real_cluster::sell_node(&cp).await;
    real_cluster::install_chart(&helm_bin, &cp, &["peering.enabled=false".to_owned()]).await;
    let pods: Api<Pod> = Api::namespaced(cp.client(), NS);
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
    real_cluster::first_flavor(&cp).await;
    let flavors: Value = real_cluster::get_from_host(&list)
        .await
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

    real_cluster::uninstall(&helm_bin, &cp, "fluidos", NS).await;
    let left = real_cluster::leftovers(&cp, &[]).await;
    assert!(left.is_empty(), "left after helm uninstall: {left:#?}");
    cp.stop().await;
}

//! The Helm chart (`deploy/helm/fluidos-node`): `helm lint` and `helm
//! template` with the default values and with a values file shaped like the
//! Go node chart's; its CRDs are the generated ones; its RBAC is the
//! committed list (`deploy/helm/rbac-grants.txt`, so any widening is a
//! visible diff) with no wildcards; and, on two real control planes, the
//! rendered manifests apply (server-side dry run, then for real) and
//! `fluidos-node`, run out of cluster as each component's ServiceAccount
//! (a TokenRequest token) through a recording proxy, completes a K8Slice and
//! a Service sale with no call refused (but the read of Liqo's cluster ID,
//! which the chart leaves ungranted on purpose: see `liqo_id_read`),
//! every call it made covered by the chart, and the peer-Role guard refusing
//! what the gateway's `escalate` would otherwise allow.
//!
//! Needs `FLUIDOS_HELM_BIN_DIR` (`tools/helm/build.sh`); without it the tests
//! print `SKIP: ...` and pass, except in CI, where they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fluidos_api::network::KnownClusterSpec;
use fluidos_api::solver::{Selector, SolverSpec};
use fluidos_api::{Flavor, KnownCluster, Phase, ServiceBlueprint, Solver};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::Role;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod support;

use support::helm::{self, Calls, Grant};
use support::{NS, NodeProcess, cluster, eventually, free_port};

/// The committed list of every permission the chart grants with its default values.
fn grants_file() -> PathBuf {
    fluidos_testenv::workspace_root().join("deploy/helm/rbac-grants.txt")
}

fn go_style_values() -> PathBuf {
    helm::chart_dir().join("ci/go-style-values.yaml")
}

fn args_of(objects: &[Value], component: &str) -> Vec<String> {
    helm::container(objects, component)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The chart's components, as `--components` names them.
const COMPONENTS: [&str; 4] = [
    "local-resource-manager",
    "rear-gateway",
    "rear-manager",
    "network-manager",
];

#[test]
fn chart_lints_and_renders_with_default_values() {
    let Some(bin) = helm::helm_bin() else { return };
    let chart = helm::chart_dir();
    let chart = chart.to_str().unwrap();
    helm::helm(&bin, &["lint", "--strict", chart]);

    // Every optional part on at once.
    let everything = [
        "serviceMonitor.enabled=true",
        "networkPolicy.enabled=true",
        "leaderElection.enabled=true",
        "networkManager.config.enableLocalDiscovery=true",
        "networkManager.config.broker.enabled=true",
        "rearController.replicas=2",
        "rearController.plainHttpSales=10.0.0.0/8",
        "rearController.k8sliceBuyers=known\\,10.0.0.0/8",
        "apiServer.address=https://203.0.113.10:6443",
        "rearController.goPeeringGrant=10.0.0.0/8",
        "peering.networking=true",
        "peering.gatewayServiceType=LoadBalancer",
    ]
    .map(|s| ["--set", s])
    .concat();
    helm::helm(
        &bin,
        &[&["lint", "--strict", chart][..], &everything].concat(),
    );

    let default = helm::template(&bin, &[], &[]);
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for o in &default {
        *kinds
            .entry(o["kind"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
    assert_eq!(
        kinds.join(" "),
        // One each of ClusterRole, ClusterRoleBinding, Job, Role, RoleBinding
        // and ServiceAccount are the uninstall hook's.
        "ClusterRole=5 ClusterRoleBinding=5 ConfigMap=1 Deployment=4 Job=1 Role=13 RoleBinding=13 \
         Service=1 ServiceAccount=5 ValidatingAdmissionPolicy=2 ValidatingAdmissionPolicyBinding=2",
        "objects rendered with the default values"
    );
    for component in COMPONENTS {
        let c = helm::container(&default, component);
        assert_eq!(
            c["readinessProbe"]["httpGet"]["path"], "/readyz",
            "{component}"
        );
        assert_eq!(
            c["livenessProbe"]["httpGet"]["path"], "/healthz",
            "{component}"
        );
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{component}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{component}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{component}");
        assert!(
            c["resources"]["requests"]["memory"].is_string(),
            "{component}"
        );
        assert!(
            c["resources"]["limits"]["memory"].is_string(),
            "{component}"
        );
        let args = args_of(&default, component);
        assert!(
            args.contains(&format!("--components={component}")),
            "{component}: {args:?}"
        );
    }
    assert_args_parse(&default);
    // Liqo's networking phase: the rear-manager's flags, which parse.
    let networking = helm::template(
        &bin,
        &[
            "peering.networking=true".into(),
            "peering.gatewayServiceType=LoadBalancer".into(),
        ],
        &[],
    );
    let args = args_of(&networking, "rear-manager");
    for flag in [
        "--liqo-networking=true",
        "--liqo-gateway-service-type=LoadBalancer",
    ] {
        assert!(args.contains(&flag.to_owned()), "{flag} in {args:?}");
    }
    assert!(
        !args_of(&default, "rear-manager")
            .iter()
            .any(|a| a.starts_with("--liqo-")),
        "networking is off by default"
    );
    assert_args_parse(&networking);
    let pod = default
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"]["spec"])
        .unwrap();
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
}

/// Under GitOps (`helm template` at every sync) nothing may change between
/// renders: no node ID is drawn by the chart (the node draws its own and
/// keeps it, `identity.rs`), so the ConfigMap and every checksum are the
/// same each time.
#[test]
fn chart_renders_the_same_every_time() {
    let Some(bin) = helm::helm_bin() else { return };
    let first = helm::template(&bin, &[], &[]);
    let second = helm::template(&bin, &[], &[]);
    assert_eq!(first, second, "two renders of the same values differ");
    let identity = first
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "fluidos-node-identity")
        .unwrap();
    assert_eq!(identity["data"]["nodeID"], "", "left to the node");
}

/// Holds are counted by source address only where the gateway's Service
/// keeps client addresses: behind kube-proxy's rewrite every buyer entering
/// through one node would share one cap.
#[test]
fn chart_counts_holds_by_address_only_where_it_keeps_addresses() {
    let Some(bin) = helm::helm_bin() else { return };
    let service = |objects: &[Value]| {
        objects
            .iter()
            .find(|o| o["kind"] == "Service")
            .map(|s| s["spec"]["externalTrafficPolicy"].clone())
            .unwrap()
    };
    let default = helm::template(&bin, &[], &[]);
    assert!(
        args_of(&default, "rear-gateway").contains(&"--rear-max-holds-per-address=0".to_owned())
    );
    assert_eq!(service(&default), Value::Null);
    for set in [
        "rearController.plainHttpSales=10.0.0.0/8",
        "rearController.k8sliceBuyers=known\\,10.0.0.0/8",
    ] {
        let kept = helm::template(
            &bin,
            &[set.into(), "rearController.maxHoldsPerAddress=64".into()],
            &[],
        );
        assert_eq!(service(&kept), "Local", "{set}");
        assert!(
            args_of(&kept, "rear-gateway").contains(&"--rear-max-holds-per-address=64".to_owned()),
            "{set}"
        );
        assert_args_parse(&kept);
    }
    // Keys and KnownClusters only: no address needed.
    let keys = helm::template(&bin, &["rearController.k8sliceBuyers=known".into()], &[]);
    assert_eq!(service(&keys), Value::Null);
}

/// `values.schema.json`: a value of the wrong kind refuses to render,
/// naming its key; `rearManager.peers` reaches the rear-manager.
#[test]
fn chart_refuses_bad_values_naming_the_key_and_passes_peers() {
    let Some(bin) = helm::helm_bin() else { return };
    let chart = helm::chart_dir();
    for (set, key) in [
        ("peering.podSecurity=root", "peering.podSecurity must be"),
        ("peering.podSecurity=true", "/peering/podSecurity"),
        (
            "rearController.maxHoldsPerAddress=-1",
            "/rearController/maxHoldsPerAddress",
        ),
        ("apiServer.address=https://a b", "/apiServer/address"),
        (
            "common.configMaps.nodeIdentity.nodeID=Not_An_ID",
            "/common/configMaps/nodeIdentity/nodeID",
        ),
        (
            "serviceDelivery=carrier-pigeon",
            "serviceDelivery must be rear or liqo",
        ),
        ("peering.enabled=yes", "/peering/enabled"),
        (
            "uninstall.teardownTimeoutSeconds=0",
            "/uninstall/teardownTimeoutSeconds",
        ),
    ] {
        let out = std::process::Command::new(&bin)
            .args(["template", "t", chart.to_str().unwrap(), "--set", set])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} rendered");
        assert!(err.contains(key), "{set}: {err}");
    }
    // What is valid renders: an IPv6 API server address, an all-digit
    // node ID (a number to --set), a per-address cap of 0 (off).
    let valid = helm::template(
        &bin,
        &[
            "apiServer.address=https://[2001:db8::1]:6443".into(),
            "common.configMaps.nodeIdentity.nodeID=1234567890".into(),
            "rearController.plainHttpSales=all".into(),
            "rearController.maxHoldsPerAddress=0".into(),
        ],
        &[],
    );
    assert!(args_of(&valid, "rear-gateway").contains(&"--rear-max-holds-per-address=0".to_owned()));
    assert_args_parse(&valid);
    let peers = helm::template(
        &bin,
        &["rearManager.peers={10.0.0.7:30001,10.0.0.8:30001#sha256:0123}".into()],
        &[],
    );
    assert!(
        args_of(&peers, "rear-manager")
            .contains(&"--peers=10.0.0.7:30001,10.0.0.8:30001#sha256:0123".to_owned())
    );
    assert!(
        !args_of(&peers, "rear-gateway")
            .iter()
            .any(|a| a.starts_with("--peers"))
    );
    assert_args_parse(&peers);
}

#[test]
fn chart_hands_peers_the_api_server_address_it_is_given() {
    let Some(bin) = helm::helm_bin() else { return };
    let default = helm::template(&bin, &[], &[]);
    // Where peers reach the API server: given to both issuers of peer
    // kubeconfigs, and to no one by default (the node then says why it
    // sells no K8Slice).
    let api = helm::template(
        &bin,
        &["apiServer.address=https://203.0.113.10:6443".into()],
        &[],
    );
    for component in ["rear-gateway", "rear-manager"] {
        assert!(
            args_of(&api, component)
                .contains(&"--api-server-url=https://203.0.113.10:6443".to_owned()),
            "{component}"
        );
        assert!(
            !args_of(&default, component)
                .iter()
                .any(|a| a.starts_with("--api-server-url")),
            "{component}"
        );
    }
    assert_args_parse(&api);
    // The CA to hand out with it, as Liqo's apiServer.ca and trustedCA.
    let ca = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/test-ca.pem"
    ))
    .unwrap();
    let ca_b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&ca)
    };
    let with_ca = helm::template(&bin, &[format!("apiServer.ca={ca_b64}")], &[]);
    let trusted = helm::template(&bin, &["apiServer.trustedCA=true".into()], &[]);
    for component in ["rear-gateway", "rear-manager"] {
        assert!(args_of(&with_ca, component).contains(&format!("--api-server-ca={ca_b64}")));
        assert!(args_of(&trusted, component).contains(&"--api-server-trusted-ca=true".to_owned()));
    }
    assert_args_parse(&with_ca);
    assert_args_parse(&trusted);
    let out = std::process::Command::new(&bin)
        .args(["template", "t", helm::chart_dir().to_str().unwrap()])
        .args([
            "--set",
            &format!("apiServer.ca={ca_b64}"),
            "--set",
            "apiServer.trustedCA=true",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "both apiServer.ca and trustedCA rendered"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("apiServer.ca and apiServer.trustedCA"));
}

/// `helm uninstall` runs `fluidos-node uninstall` first (a pre-delete
/// hook): the Job after its own account and RBAC (hook weights), all
/// deleted once it succeeded, its flags ones the binary accepts, its pod
/// as locked down as the node's; `uninstall.hook=false` renders none of it.
#[test]
fn uninstall_hook_runs_the_node_binary_under_its_own_account() {
    let Some(bin) = helm::helm_bin() else { return };
    let objects = helm::template(&bin, &[], &[]);
    let hooks: Vec<&Value> = objects
        .iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .collect();
    let kinds: Vec<String> = hooks.iter().map(|o| helm::kind_name(o)).collect();
    assert_eq!(hooks.len(), 6, "{kinds:?}");
    for hook in &hooks {
        let annotations = &hook["metadata"]["annotations"];
        let job = hook["kind"] == "Job";
        assert_eq!(
            annotations["helm.sh/hook-weight"],
            if job { "0" } else { "-10" },
            "{}",
            helm::kind_name(hook)
        );
        // A failed Job stays for its logs; its account never outlives it.
        assert_eq!(
            annotations["helm.sh/hook-delete-policy"],
            if job {
                "before-hook-creation,hook-succeeded"
            } else {
                "before-hook-creation,hook-succeeded,hook-failed"
            }
        );
        assert_eq!(
            hook["metadata"]["labels"]["app.kubernetes.io/component"],
            "uninstall"
        );
    }
    let job = hooks.iter().find(|o| o["kind"] == "Job").unwrap();
    let pod = &job["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "uninstall");
    assert!(args.contains(&format!("--namespace={NS}")), "{args:?}");
    assert!(args.contains(&"--release=fluidos".to_owned()), "{args:?}");
    use clap::Parser as _;
    fluidos_node::uninstall::UninstallArgs::try_parse_from(
        std::iter::once("fluidos-node uninstall".to_owned()).chain(args[1..].iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    // Its pod is not one of the node's: the uninstall stops those and waits
    // for them, never for itself.
    assert!(
        pod["serviceAccountName"]
            .as_str()
            .unwrap()
            .ends_with("-uninstall")
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "uninstall"
    );
    let off = helm::template(&bin, &["uninstall.hook=false".into()], &[]);
    assert!(
        off.iter()
            .all(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null()),
        "uninstall.hook=false still renders a hook"
    );
}

/// Every argument of every component parses with `fluidos-node`'s own CLI.
fn assert_args_parse(objects: &[Value]) {
    for component in COMPONENTS {
        let args = args_of(objects, component);
        let argv = std::iter::once("fluidos-node".to_owned()).chain(args.iter().cloned());
        fluidos_node::cli::Args::parse_invocation(argv)
            .unwrap_or_else(|e| panic!("{component}: {args:?}: {e}"));
    }
}

/// Every label, annotation, selector and ConfigMap value of every object
/// `path` reaches is a YAML string: an unquoted template value that comes out
/// all digits (a release named `1234`, a checksum whose 16 hex characters
/// happen to be digits, as one did in CI) parses as a number, and the API
/// server refuses the whole object ("expected string").
fn assert_string_maps(value: &Value, path: &str, bad: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let here = format!("{path}.{key}");
                let string_map = matches!(
                    key.as_str(),
                    "labels" | "annotations" | "matchLabels" | "nodeSelector" | "data"
                );
                match v {
                    Value::Object(entries) if string_map => {
                        for (k, e) in entries {
                            if !e.is_string() {
                                bad.push(format!("{here}.{k} = {e}"));
                            }
                        }
                    }
                    _ => assert_string_maps(v, &here, bad),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                assert_string_maps(v, &format!("{path}[{i}]"), bad);
            }
        }
        _ => {}
    }
}

#[test]
fn chart_renders_every_label_and_annotation_as_a_string() {
    let Some(bin) = helm::helm_bin() else { return };
    let chart = helm::chart_dir();
    // A release whose name is all digits (valid for Helm), with every
    // optional part on, under several node IDs (the identity checksum
    // changes with each).
    for node_id in ["1234567890", "0000000000", "abcdefghij"] {
        let out = helm::helm(
            &bin,
            &[
                "template",
                "1234",
                chart.to_str().unwrap(),
                "--namespace",
                support::NS,
                "--set-string",
                &format!("common.configMaps.nodeIdentity.nodeID={node_id}"),
                "--set",
                "serviceMonitor.enabled=true",
                "--set",
                "networkPolicy.enabled=true",
                "--set",
                "rearController.plainHttpSales=10.0.0.0/8",
                "--set",
                "rearController.goPeeringGrant=10.0.0.0/8",
            ],
        );
        let objects = helm::parse_documents(&out);
        assert!(!objects.is_empty());
        let mut bad = Vec::new();
        for o in &objects {
            assert_string_maps(o, &helm::kind_name(o), &mut bad);
        }
        assert!(bad.is_empty(), "values that are not strings: {bad:#?}");
    }
}

#[test]
fn chart_takes_a_go_chart_values_file() {
    let Some(bin) = helm::helm_bin() else { return };
    let chart = helm::chart_dir();
    let go = go_style_values();
    helm::helm(
        &bin,
        &[
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--values",
            go.to_str().unwrap(),
        ],
    );
    // Same identity, ports, flavor and discovery settings as the Go chart.
    let go_objects = helm::template(&bin, &[], &[go]);
    let identity = go_objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .unwrap();
    assert_eq!(
        identity["data"],
        json!({"domain": "fluidos.eu", "nodeID": "4ahrqttvng", "ip": "172.18.0.2", "port": "30001"})
    );
    let service = go_objects.iter().find(|o| o["kind"] == "Service").unwrap();
    assert_eq!(service["spec"]["type"], "NodePort");
    assert_eq!(service["spec"]["ports"][0]["nodePort"], 30001);
    assert_eq!(service["spec"]["ports"][0]["port"], 3004);
    let lrm = args_of(&go_objects, "local-resource-manager");
    for flag in [
        "--cpu-step=1000m",
        "--memory-step=100Mi",
        "--enable-auto-discovery=true",
    ] {
        assert!(lrm.contains(&flag.to_owned()), "{flag} in {lrm:?}");
    }
    let nm = helm::container(&go_objects, "network-manager");
    let nm_args = args_of(&go_objects, "network-manager");
    assert!(nm_args.contains(&"--enable-local-discovery=true".to_owned()));
    // Broker discovery needs the chart's Secret grant, off by default.
    assert!(
        nm_args.contains(&"--enable-broker-discovery=false".to_owned()),
        "{nm_args:?}"
    );
    assert_eq!(
        nm["env"],
        json!([{"name": "RUST_LOG", "value": "info"}, {"name": "MULTICAST_ADDRESS", "value": "239.11.11.1:4000"}])
    );
    assert_args_parse(&go_objects);
}

#[test]
fn chart_crds_are_the_generated_ones() {
    let generated = fluidos_testenv::crds_dir();
    let chart = helm::chart_dir().join("crds");
    let list = |dir: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(list(&chart), list(&generated), "the same files");
    for name in list(&generated) {
        assert!(
            std::fs::read(chart.join(&name)).unwrap()
                == std::fs::read(generated.join(&name)).unwrap(),
            "deploy/helm/fluidos-node/crds/{name} differs from deploy/crds/{name}: \
             cp deploy/crds/*.yaml deploy/helm/fluidos-node/crds/"
        );
    }
}

#[test]
fn chart_rbac_is_the_committed_list_without_wildcards() {
    let Some(bin) = helm::helm_bin() else { return };
    let grants = helm::grants(&helm::template(&bin, &[], &[]));
    let rendered: String = grants.iter().map(|g| format!("{g}\n")).collect();
    let committed = std::fs::read_to_string(grants_file()).unwrap_or_default();
    let committed: String = committed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        rendered == committed,
        "the chart's RBAC differs from {}; if the change is intended, put this there:\n{rendered}",
        grants_file().display()
    );
    for g in &grants {
        assert!(
            !g.verb.contains('*') && !g.resource.contains('*') && !g.group.contains('*'),
            "wildcard: {g}"
        );
    }
    // Cluster-wide writes of Secrets: only what selling a service (its
    // Secrets in the service's own namespace) and Liqo peering (nonce
    // Secrets in tenant namespaces) need; never update or deletecollection,
    // and delete only by name.
    let writes: Vec<String> = grants
        .iter()
        .filter(|g| {
            g.scope == "cluster"
                && g.group.is_empty()
                && g.resource == "secrets"
                && !["get", "list", "watch"].contains(&g.verb.as_str())
        })
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        writes,
        [
            "rear-gateway cluster core secrets create",
            "rear-gateway cluster core secrets patch",
            "rear-manager cluster core secrets create",
            "rear-manager cluster core secrets delete names=liqo-signed-nonce,liqo-nonce",
        ]
    );
    // Without peering, no Liqo permissions at all and no Secret writes by the consumer.
    let no_peering = helm::grants(&helm::template(
        &bin,
        &["peering.enabled=false".into()],
        &[],
    ));
    assert!(
        no_peering.iter().all(|g| !g.group.ends_with("liqo.io")
            && g.scope != "liqo"
            && !(g.component == "rear-manager" && g.scope == "cluster" && g.resource == "secrets")),
        "{no_peering:#?}"
    );
}

fn k8slice_solver(name: &str) -> Solver {
    let mut s = Solver::new(
        name,
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: Some(json!({
                    "architectureFilter": {"name": "Match", "data": {"value": "amd64"}},
                    "cpuFilter": {"name": "Range", "data": {"min": "1000m"}},
                    // No maximum: kwok may report its own (large) capacity for the worker.
                    "memoryFilter": {"name": "Range", "data": {"min": "1Gi"}}
                })),
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

/// The chart rendered for a test node: no Liqo, REAR on a loopback port.
fn render(bin: &std::path::Path, node_id: &str, rear_port: u16) -> Vec<Value> {
    render_with(bin, node_id, rear_port, &[])
}

/// [`render`] with more `--set`s.
fn render_with(bin: &std::path::Path, node_id: &str, rear_port: u16, extra: &[&str]) -> Vec<Value> {
    let sets: Vec<String> = [
        "peering.enabled=false".to_owned(),
        "common.configMaps.nodeIdentity.ip=127.0.0.1".to_owned(),
        format!("common.configMaps.nodeIdentity.nodeID={node_id}"),
        "rearController.service.gateway.type=ClusterIP".to_owned(),
        format!("rearController.service.gateway.port={rear_port}"),
        format!("rearController.service.gateway.targetPort={rear_port}"),
        "logLevel=info\\,kube=warn".to_owned(),
    ]
    .into_iter()
    .chain(extra.iter().map(|s| (*s).to_owned()))
    .collect();
    helm::template(bin, &sets, &[])
}

/// A client acting with the peering kubeconfig the provider holds for the
/// Contract whose buyer's tenant namespace is `tenant` (its token, against
/// the API server itself).
async fn peer_client_of_contract(provider: &ControlPlane, tenant: &str) -> kube::Client {
    let cluster = tenant.trim_start_matches("liqo-tenant-");
    let contracts = Api::<fluidos_api::Contract>::namespaced(provider.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let contract = contracts
        .items
        .iter()
        .find(|c| c.spec.buyer_cluster_id == cluster)
        .unwrap();
    let name = format!(
        "peering-credentials-{}",
        contract.metadata.name.as_deref().unwrap()
    );
    let secret = Api::<Secret>::namespaced(provider.client(), NS)
        .get(&name)
        .await
        .unwrap();
    let yaml = &secret.data.unwrap()["kubeconfig"].0;
    let handed_out =
        kube::config::Kubeconfig::from_yaml(std::str::from_utf8(yaml).unwrap()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(provider.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    config.auth_info = handed_out.auth_infos[0].auth_info.clone().unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The one refusal expected with `peering.enabled=false`: every component
/// still tries Liqo's cluster-ID ConfigMap first (`identity.rs`
/// `liqo_cluster_id`, so that a services-only node on a cluster with Liqo
/// uses the real ID), is refused (no Liqo namespace, no grant), logs it and
/// falls back to `fluidos-<nodeID>`.
fn liqo_id_read() -> helm::Access {
    helm::Access {
        scope: "liqo".into(),
        group: String::new(),
        resource: "configmaps".into(),
        verb: "get".into(),
        dry_run: false,
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, run, buy, check: the scenario reads top to bottom"
)]
async fn chart_rbac_suffices_for_a_full_sale_and_refuses_the_rest() {
    let Some(bin) = helm::helm_bin() else { return };
    let started = Instant::now();
    let provider_cp = async {
        ControlPlane::start(ControlPlaneOptions {
            workloads: true,
            crd_dirs: vec![helm::chart_dir().join("crds")],
            ..Default::default()
        })
        .await
        .unwrap()
    };
    let (provider, consumer) = tokio::join!(provider_cp, cluster());
    let (pport, cport) = (free_port(), free_port());
    let provider_objects = render(&bin, "provider01", pport);
    let consumer_objects = render(&bin, "consumer01", cport);
    helm::install(&provider, &provider_objects).await;
    helm::install(&consumer, &consumer_objects).await;
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    let samples = fluidos_testenv::shared_reference_dir().map(|d| d.join("fluidos-samples"));
    let service_solver: Option<Solver> = samples
        .as_ref()
        .map(|s| {
            let bp: ServiceBlueprint = serde_yaml::from_str(
                &std::fs::read_to_string(s.join("service-blueprint-db.yaml")).unwrap(),
            )
            .unwrap();
            let sol = serde_yaml::from_str(
                &std::fs::read_to_string(s.join("solver-service.yaml")).unwrap(),
            )
            .unwrap();
            (bp, sol)
        })
        .map(|(bp, sol)| {
            let client = provider.client();
            tokio::spawn(async move {
                Api::<ServiceBlueprint>::namespaced(client, NS)
                    .create(&PostParams::default(), &bp)
                    .await
                    .unwrap();
            });
            sol
        });
    if service_solver.is_none() {
        fluidos_testenv::skip::unavailable(
            "the Service sale: ../shared/reference is absent; the blueprint sample comes from there",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (lrm, _) = helm::run_component(
        &provider,
        &provider_objects,
        "local-resource-manager",
        pport,
        dir.path(),
    )
    .await;
    let (gateway, gateway_token) = helm::run_component(
        &provider,
        &provider_objects,
        "rear-gateway",
        pport,
        dir.path(),
    )
    .await;
    let (manager, _) = helm::run_component(
        &consumer,
        &consumer_objects,
        "rear-manager",
        cport,
        dir.path(),
    )
    .await;
    let (network, _) = helm::run_component(
        &provider,
        &provider_objects,
        "network-manager",
        pport,
        dir.path(),
    )
    .await;
    // The consumer pins the key the provider created on first start, under
    // its chart ServiceAccounts.
    let secrets = Api::<Secret>::namespaced(provider.client(), NS);
    let provider_key = eventually(
        "the provider's REAR key",
        Duration::from_secs(60),
        &[&gateway.node, &network.node],
        || {
            let secrets = secrets.clone();
            async move {
                secrets
                    .get_opt(fluidos_rear_identity::secret::DEFAULT_SECRET_NAME)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| s.metadata.annotations)
                    .and_then(|a| a.get("fluidos.eu/key-fingerprint").cloned())
            }
        },
    )
    .await;
    let known = KnownCluster::new(
        "knowncluster-provider01",
        KnownClusterSpec {
            address: format!("127.0.0.1:{pport}"),
            fingerprint: Some(provider_key),
        },
    );
    Api::<KnownCluster>::namespaced(consumer.client(), NS)
        .create(&PostParams::default(), &known)
        .await
        .unwrap();
    let running = [&lrm, &gateway, &manager, &network];
    let logs: Vec<&NodeProcess> = running.iter().map(|r| &r.node).collect();

    let flavors: Api<Flavor> = Api::namespaced(provider.client(), NS);
    eventually(
        "the provider's flavors",
        Duration::from_secs(60),
        &logs,
        || async {
            let list = flavors.list(&ListParams::default()).await.ok()?;
            let types: Vec<&str> = list
                .items
                .iter()
                .map(|f| f.spec.flavor_type.type_identifier.as_str())
                .collect();
            (types.contains(&"K8Slice") && (service_solver.is_none() || types.contains(&"Service")))
                .then_some(())
        },
    )
    .await;

    // Every component ready, as the chart's readiness probes would wait for.
    for r in &running {
        eventually(
            &format!("{} ready (/readyz)", r.component),
            Duration::from_secs(60),
            &logs,
            || async { helm::ready(r.health_port).await.then_some(()) },
        )
        .await;
    }

    // A K8Slice sale (no peering: Liqo is not in this scenario).
    let solvers: Api<Solver> = Api::namespaced(consumer.client(), NS);
    let solve = async |solver: &Solver| {
        let name = solver.metadata.name.clone().unwrap();
        solvers
            .create(&PostParams::default(), solver)
            .await
            .unwrap();
        let phase = eventually(
            &format!("Solver {name} to end"),
            Duration::from_secs(120),
            &logs,
            || async {
                let phase = solvers.get(&name).await.ok()?.status?.solver_phase?;
                matches!(phase.phase, Phase::Solved | Phase::Failed | Phase::TimedOut)
                    .then_some(phase)
            },
        )
        .await;
        if phase.phase != Phase::Solved {
            let discovery = Api::<fluidos_api::Discovery>::namespaced(consumer.client(), NS)
                .get_opt(&format!("discovery-{name}"))
                .await
                .unwrap();
            let offered = flavors.list(&ListParams::default()).await.unwrap();
            let all: Vec<String> = logs.iter().map(|n| n.log()).collect();
            panic!(
                "Solver {name}: {phase:?}\ndiscovery: {discovery:#?}\nprovider flavors: {:#?}\n--- logs\n{}",
                offered.items,
                all.join("\n---\n")
            );
        }
    };
    solve(&k8slice_solver("solver-k8s")).await;
    // The sale granted the buyer's peer rules in its Liqo tenant namespace:
    // the gateway's bind/escalate on `fluidos-peer`, through the guard policy.
    let tenant = "liqo-tenant-fluidos-consumer01";
    Api::<Role>::namespaced(provider.client(), tenant)
        .get("fluidos-peer")
        .await
        .unwrap_or_else(|e| panic!("no peer Role in {tenant}: {e}\n{}", gateway.node.log()));

    // The buyer's kubeconfig may make Secrets in its tenant namespace, but
    // not a ServiceAccount token there (the chart's token guard).
    let peer = peer_client_of_contract(&provider, tenant).await;
    let mut token = Secret::default();
    token.metadata.name = Some("token".into());
    token.type_ = Some("kubernetes.io/service-account-token".into());
    token.metadata.annotations = Some(
        [(
            "kubernetes.io/service-account.name".to_owned(),
            "default".to_owned(),
        )]
        .into(),
    );
    let err = Api::<Secret>::namespaced(peer, tenant)
        .create(&PostParams::default(), &token)
        .await
        .expect_err("a ServiceAccount-token Secret made by a peer");
    assert!(
        err.to_string().contains("fluidos-peer-token-guard"),
        "refused by the token guard, not {err}"
    );

    // A Service sale, delivered without Liqo (namespace, blueprint objects,
    // credentials Secret on both sides).
    if let Some(s) = &service_solver {
        solve(s).await;
    }
    eprintln!(
        "install + both sales as the chart's ServiceAccounts: {:.1?}",
        started.elapsed()
    );

    // What the gateway's `escalate` alone would allow, the guard refuses
    // (asked with the gateway's token, through a proxy of its own: these
    // refusals are the point, not a failure of the node).
    let direct = helm::recording_proxy(&provider, Calls::default()).await;
    let gateway_kubeconfig =
        helm::token_kubeconfig(dir.path(), "gateway-direct", &direct, &gateway_token);
    let gateway_client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&gateway_kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let evil = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "fluidos-peer", "namespace": "kube-system"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]
    });
    let wild = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "fluidos-peer", "namespace": tenant},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    });
    for (what, ns, role) in [
        ("outside a tenant namespace", "kube-system", evil),
        ("with wildcards", tenant, wild),
    ] {
        let err = Api::<Role>::namespaced(gateway_client.clone(), ns)
            .patch(
                "fluidos-peer",
                &PatchParams::apply("evil").force(),
                &Patch::Apply(&role),
            )
            .await
            .expect_err(what);
        assert!(
            err.to_string().contains("fluidos-peer-guard"),
            "{what}: refused by the guard policy, not {err}"
        );
    }

    // Nothing was refused, and every call is one the chart grants.
    let grants: Vec<Grant> = helm::grants(&provider_objects);
    let mut report = String::new();
    for r in running {
        let calls = r.calls.all();
        let log = r.node.log();
        for (access, codes) in &calls {
            if *access == liqo_id_read() {
                continue;
            }
            // Warm-ups (`fluidos_controller::warm_up`, dry-run creates
            // before saying ready) are authorized like real creates: each
            // component warms only kinds it creates, so none is refused.
            assert!(
                !codes.contains(&403),
                "{}: {access:?} was forbidden\n{log}",
                r.component
            );
            assert!(
                grants
                    .iter()
                    .any(|g| g.component == r.component && g.covers(access)),
                "{}: {access:?} succeeded without a grant of the chart",
                r.component
            );
        }
        let lower = log.to_lowercase();
        assert!(
            !lower.contains("forbidden") && !lower.contains(" 403"),
            "{}: refused calls in its log:\n{log}",
            r.component
        );
        // What it holds and did not use in this scenario (peering, contract
        // end, revocation, teardown): printed, for review.
        let unused: Vec<String> = grants
            .iter()
            .filter(|g| g.component == r.component)
            .filter(|g| !calls.keys().any(|a| g.covers(a)))
            // Checked within the Role/RoleBinding writes, not requests of
            // their own; the peer Role found above shows they were used.
            .filter(|g| g.verb != "bind" && g.verb != "escalate")
            .map(ToString::to_string)
            .collect();
        report.push_str(&format!(
            "{}: {} distinct calls, all granted; granted but not used in this sale:\n  {}\n",
            r.component,
            calls.len(),
            unused.join("\n  ")
        ));
    }
    eprintln!("{report}");
    for r in [lrm, gateway, manager, network] {
        r.node.kill().await;
    }
}

/// With `rearController.goPeeringGrant`, the gateway under the chart's RBAC
/// sets up the Go consumers' grant (ClusterRole, Role in `liqo`, admission
/// policy, through the peer-Role guard) and grants it at a Go-style
/// plain-HTTP K8Slice sale: the buyer creates its tenant namespace, which
/// the gateway adopts, and is refused another one. No call of the gateway
/// is refused, and every one is covered by the chart.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, run, buy as a Go consumer, check: the scenario reads top to bottom"
)]
async fn chart_rbac_suffices_for_the_go_peering_grant() {
    let Some(bin) = helm::helm_bin() else { return };
    let Some(liqo_crds) = fluidos_testenv::shared_reference_dir()
        .map(|d| d.join("liqo-v1.0.0-crds"))
        .filter(|d| d.is_dir())
    else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/liqo-v1.0.0-crds is absent (Liqo's CRDs)",
        );
        return;
    };
    let provider = ControlPlane::start(ControlPlaneOptions {
        workloads: true,
        crd_dirs: vec![helm::chart_dir().join("crds"), liqo_crds],
        ..Default::default()
    })
    .await
    .unwrap();
    let port = free_port();
    let objects = render_with(
        &bin,
        "provider01",
        port,
        &[
            "rearController.plainHttpSales=all",
            "rearController.goPeeringGrant=all",
        ],
    );
    assert!(args_of(&objects, "rear-gateway").contains(&"--rear-go-peering-grant=all".to_owned()));
    helm::install(&provider, &objects).await;
    fixtures::namespace(&provider, "liqo").await.unwrap();
    fixtures::worker_node(&provider, "worker-1", "8", "16Gi")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (lrm, _) = helm::run_component(
        &provider,
        &objects,
        "local-resource-manager",
        port,
        dir.path(),
    )
    .await;
    let (gateway, _) =
        helm::run_component(&provider, &objects, "rear-gateway", port, dir.path()).await;
    let logs = [&lrm.node, &gateway.node];
    for r in [&lrm, &gateway] {
        eventually(
            &format!("{} ready", r.component),
            Duration::from_secs(60),
            &logs,
            || async { helm::ready(r.health_port).await.then_some(()) },
        )
        .await;
    }
    let flavors: Api<Flavor> = Api::namespaced(provider.client(), NS);
    let flavor = eventually(
        "the provider's K8Slice flavor",
        Duration::from_secs(60),
        &logs,
        || async {
            flavors
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|f| f.spec.flavor_type.type_identifier == "K8Slice")
        },
    )
    .await;

    // The Go consumer's sale, over plain HTTP.
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}/api/v2");
    let reserve = json!({
        "flavorID": flavor.metadata.name.as_deref().unwrap(),
        "buyerID": {"ID": "gonode", "IP": "127.0.0.1:30000", "domain": "fluidos.eu",
            "additionalInformation": {"liqoID": "liqo-gonode", "kubeconfig": "a2NmZw=="}},
        "configuration": {"type": "k8slice", "data": {"cpu": "1", "memory": "1Gi", "pods": "1"}}
    });
    let answer = http
        .post(format!("{base}/reservations"))
        .json(&reserve)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let tx: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(status, 200, "{tx}\n{}", gateway.node.log());
    let tx = tx["transactionID"].as_str().unwrap();
    let answer = http
        .post(format!("{base}/transactions/{tx}/purchase"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let contract: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(status, 200, "{contract}\n{}", gateway.node.log());
    let kubeconfig = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        contract["peeringTargetCredentials"]["kubeconfig"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    // Its token, against the API server (the kubeconfig names the proxy
    // the gateway runs behind here, and that proxy's CA).
    let handed_out =
        kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&kubeconfig).unwrap()).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(provider.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    config.auth_info = handed_out.auth_infos[0].auth_info.clone().unwrap();
    let peer = kube::Client::try_from(config).unwrap();
    let namespace = |name: &str| {
        serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(
            json!({"metadata": {"name": name, "labels": {"liqo.io/remote-cluster-id": "liqo-gonode", "liqo.io/tenant-namespace": "true"}}}),
        )
        .unwrap()
    };
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(peer.clone());
    namespaces
        .create(
            &PostParams::default(),
            &namespace("liqo-tenant-liqo-gonode"),
        )
        .await
        .unwrap();
    eventually(
        "the Go consumer's namespace adopted and bound",
        Duration::from_secs(5),
        &logs,
        || async {
            Api::<Role>::namespaced(provider.client(), "liqo-tenant-liqo-gonode")
                .get_opt("fluidos-peer")
                .await
                .ok()
                .flatten()
        },
    )
    .await;
    let err = namespaces
        .create(
            &PostParams::default(),
            &namespace("liqo-tenant-someone-else"),
        )
        .await
        .expect_err("another tenant namespace");
    assert!(
        err.to_string().contains("fluidos-go-peer"),
        "refused by the Go peers' policy: {err}"
    );

    let grants: Vec<Grant> = helm::grants(&objects);
    // The policy's enforcement probe: a dry-run Secret creation the policy
    // refuses (peer-access go_grant.rs PROBE_SECRET), which the chart grants.
    let probe = helm::Access {
        scope: NS.into(),
        group: String::new(),
        resource: "secrets".into(),
        verb: "create".into(),
        dry_run: true,
    };
    for (access, codes) in gateway.calls.all() {
        if access == liqo_id_read() || access == probe {
            continue;
        }
        assert!(
            !codes.contains(&403),
            "{access:?} was forbidden\n{}",
            gateway.node.log()
        );
        assert!(
            grants
                .iter()
                .any(|g| g.component == "rear-gateway" && g.covers(&access)),
            "{access:?} succeeded without a grant of the chart"
        );
    }
    for r in [lrm, gateway] {
        r.node.kill().await;
    }
}

/// Whether the RBAC authorizer lets `user` (a ServiceAccount) `verb`
/// `group`/`resource` in `namespace`.
async fn sar_allows(
    admin: &kube::Client,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{NS}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// With peering on (the default values), the gateway's credentials code,
/// run as the chart's rear-gateway ServiceAccount, grants a K8Slice buyer the
/// reading of IPAM Networks in Liqo's namespace (the Role
/// `fluidos-peer-network`, which the gateway holds, and a binding the guard
/// lets through) and revokes it; the guard refuses the Role `fluidos-peer`,
/// or a binding of it, there, and the chart's RBAC a wider Networks Role.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, grant, check, revoke, refuse: the scenario reads top to bottom"
)]
async fn chart_rbac_lets_the_gateway_grant_the_cidrs_in_liqo() {
    use fluidos_peer_access::credentials::{Credentials, CredentialsConfig};
    use fluidos_peer_access::grant::{PLAIN_HTTP_OWNER, PeeringGrant};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::RoleBinding;

    let Some(bin) = helm::helm_bin() else { return };
    let provider = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![helm::chart_dir().join("crds")],
        ..Default::default()
    })
    .await
    .unwrap();
    let admin = provider.client();
    let objects = helm::template(&bin, &[], &[]);
    // The chart's Roles in the Liqo namespace need it first.
    fixtures::namespace(&provider, "liqo").await.unwrap();
    helm::install(&provider, &objects).await;
    let sa = helm::service_account(&objects, "rear-gateway");
    let token = helm::service_account_token(&admin, NS, &sa).await;
    let mut config =
        kube::Config::from_custom_kubeconfig(provider.kubeconfig().clone(), &Default::default())
            .await
            .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let gateway = kube::Client::try_from(config).unwrap();

    let (credentials, driver) = Credentials::new(
        gateway.clone(),
        CredentialsConfig {
            namespace: NS.into(),
            role_namespace: None,
            api_server_url: provider.server_url().to_owned(),
            ca_pem: None,
            token_ttl: Duration::from_secs(3600),
            go_peering: false,
            remove_stale_grants: true,
        },
    );
    let driver = tokio::spawn(driver);
    credentials
        .issue(
            "buyer-1",
            PLAIN_HTTP_OWNER,
            "provider-liqo-id",
            Some(PeeringGrant::TenantNamespace("consumer-1")),
        )
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), "liqo");
    let binding = bindings.get("fluidos-peer-buyer-1").await.unwrap();
    assert_eq!(binding.role_ref.name, "fluidos-peer-network");
    let buyer = format!("system:serviceaccount:{NS}:fluidos-peer-buyer-1");
    for verb in ["get", "list"] {
        assert!(sar_allows(&admin, &buyer, verb, "ipam.liqo.io", "networks", "liqo").await);
    }
    assert!(!sar_allows(&admin, &buyer, "list", "", "secrets", "liqo").await);

    // Revocation removes the binding in Liqo's namespace too.
    let account = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .get("fluidos-peer-buyer-1")
        .await
        .unwrap();
    let revoked = credentials
        .revoke(
            "buyer-1",
            account.metadata.uid.as_deref().unwrap(),
            account.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap();
    assert!(revoked);
    assert!(
        bindings
            .get_opt("fluidos-peer-buyer-1")
            .await
            .unwrap()
            .is_none()
    );
    assert!(!sar_allows(&admin, &buyer, "list", "ipam.liqo.io", "networks", "liqo").await);
    driver.abort();

    // What the guard (or the gateway's own rights) refuses in Liqo's namespace.
    let role = |name: &str, group: &str, resource: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": "liqo"},
            "rules": [{"apiGroups": [group], "resources": [resource], "verbs": ["get", "list"]}]
        })
    };
    let binding_of = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "fluidos-peer-evil", "namespace": "liqo"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "fluidos-peer-evil", "namespace": NS}]
        })
    };
    // Dry runs: admission and RBAC answer the same, nothing is written.
    let mut pp = PatchParams::apply("evil").force();
    pp.dry_run = true;
    let roles = Api::<Role>::namespaced(gateway.clone(), "liqo");
    // The API server loads admission policies asynchronously: asked until
    // the guard answers (or 10 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match roles
            .patch(
                "fluidos-peer",
                &pp,
                &Patch::Apply(role("fluidos-peer", "", "secrets")),
            )
            .await
        {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(_) => panic!("the peer Role in liqo was let through"),
        }
    };
    assert!(err.to_string().contains("fluidos-peer-guard"), "{err}");
    roles
        .patch(
            "fluidos-peer-network",
            &pp,
            &Patch::Apply(role("fluidos-peer-network", "", "configmaps")),
        )
        .await
        .expect_err("ConfigMaps through the Networks Role");
    let err = Api::<RoleBinding>::namespaced(gateway.clone(), "liqo")
        .patch(
            "fluidos-peer-evil",
            &pp,
            &Patch::Apply(binding_of("fluidos-peer")),
        )
        .await
        .expect_err("a binding of the peer Role in liqo");
    assert!(err.to_string().contains("fluidos-peer-guard"), "{err}");
}

/// The rights `serviceDelivery=liqo` adds to the defaults, committed.
fn liqo_delivery_grants_file() -> PathBuf {
    fluidos_testenv::workspace_root().join("deploy/helm/rbac-grants-service-delivery-liqo.txt")
}

/// The lines of a committed grants file, comments and blank lines dropped.
fn committed_grants(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}

/// With `serviceDelivery=liqo`, only the rear-gateway and the rear-manager
/// are started with `--service-delivery=liqo` (it parses), and they get
/// exactly the rights committed in
/// deploy/helm/rbac-grants-service-delivery-liqo.txt on top of the
/// defaults, without wildcards; the chart refuses to render it without
/// peering, and any other value.
#[test]
fn chart_service_delivery_by_liqo_adds_the_committed_rights() {
    use std::collections::BTreeSet;
    let Some(bin) = helm::helm_bin() else { return };
    let default = helm::template(&bin, &[], &[]);
    let liqo = helm::template(&bin, &["serviceDelivery=liqo".into()], &[]);
    assert_args_parse(&liqo);
    for component in COMPONENTS {
        let args = args_of(&liqo, component);
        let wanted = matches!(component, "rear-gateway" | "rear-manager");
        assert_eq!(
            args.contains(&"--service-delivery=liqo".to_owned()),
            wanted,
            "{component}: {args:?}"
        );
        let argv = std::iter::once("fluidos-node".to_owned()).chain(args.iter().cloned());
        let parsed = fluidos_node::cli::Args::parse_invocation(argv).unwrap();
        assert_eq!(
            parsed.service_delivery == fluidos_api::service_delivery::ServiceDelivery::Liqo,
            wanted,
            "{component}"
        );
        assert!(
            !args_of(&default, component)
                .iter()
                .any(|a| a.starts_with("--service-delivery")),
            "{component}: the default (rear) is not passed"
        );
    }
    let strings = |objects: &[Value]| -> BTreeSet<String> {
        helm::grants(objects)
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let (before, after) = (strings(&default), strings(&liqo));
    assert!(
        before.is_subset(&after),
        "serviceDelivery=liqo drops {:?}",
        before.difference(&after).collect::<Vec<_>>()
    );
    let added: String = after
        .difference(&before)
        .map(|g| format!("{g}\n"))
        .collect();
    assert!(
        added == committed_grants(&liqo_delivery_grants_file()),
        "serviceDelivery=liqo adds other rights than {}; if the change is intended, put this there:\n{added}",
        liqo_delivery_grants_file().display()
    );
    assert!(!added.contains('*'), "wildcard: {added}");
    for (sets, why) in [
        (
            vec![
                "serviceDelivery=liqo".to_owned(),
                "peering.enabled=false".to_owned(),
            ],
            "serviceDelivery=liqo needs peering.enabled",
        ),
        (
            vec!["serviceDelivery=ftp".to_owned()],
            "serviceDelivery must be rear or liqo, not ftp",
        ),
        // Checked whichever components run.
        (
            vec![
                "serviceDelivery=ftp".to_owned(),
                "rearController.enabled=false".to_owned(),
                "rearManager.enabled=false".to_owned(),
            ],
            "serviceDelivery must be rear or liqo, not ftp",
        ),
        // Nothing would revoke the sellers' accounts.
        (
            vec![
                "serviceDelivery=liqo".to_owned(),
                "rearController.enabled=false".to_owned(),
            ],
            "serviceDelivery=liqo needs rearController.enabled",
        ),
    ] {
        let refused = std::panic::catch_unwind(|| helm::template(&bin, &sets, &[]))
            .expect_err("the chart rendered");
        let message = refused
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains(why), "{sets:?}: {message}");
    }
}

/// With `serviceDelivery=liqo`, the rear-manager's offloading issuer (the
/// gateway's credentials code, as `rear_manager.rs` builds it), run as the
/// chart's rear-manager ServiceAccount, gives a seller its account, a token
/// that works, and Liqo's peering-user rights in the seller's tenant
/// namespace only; the peer-Role guard holds the manager to the gateway's
/// rules. The gateway may create and read NamespaceOffloadings and list
/// Reservations.
#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "install, issue, use, refuse: the scenario reads top to bottom"
)]
async fn chart_rbac_lets_the_manager_issue_a_sellers_credentials() {
    use fluidos_peer_access::credentials::{Credentials, CredentialsConfig};
    use fluidos_peer_access::grant::PeeringGrant;
    use k8s_openapi::api::rbac::v1::RoleBinding;

    let Some(bin) = helm::helm_bin() else { return };
    let buyer = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![helm::chart_dir().join("crds")],
        ..Default::default()
    })
    .await
    .unwrap();
    let admin = buyer.client();
    let objects = helm::template(&bin, &["serviceDelivery=liqo".into()], &[]);
    fixtures::namespace(&buyer, "liqo").await.unwrap();
    helm::install(&buyer, &objects).await;
    let as_component = |component: &'static str| {
        let (admin, objects, kubeconfig) =
            (admin.clone(), objects.clone(), buyer.kubeconfig().clone());
        async move {
            let sa = helm::service_account(&objects, component);
            let token = helm::service_account_token(&admin, NS, &sa).await;
            let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap();
            config.auth_info = kube::config::AuthInfo {
                token: Some(token.into()),
                ..Default::default()
            };
            (kube::Client::try_from(config).unwrap(), sa)
        }
    };
    let (manager, _) = as_component("rear-manager").await;
    let ca_pem = buyer
        .kubeconfig()
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
        .map(|b64| {
            String::from_utf8(
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).unwrap(),
            )
            .unwrap()
        });
    let (credentials, driver) = Credentials::new(
        manager.clone(),
        CredentialsConfig {
            namespace: NS.into(),
            role_namespace: None,
            api_server_url: buyer.server_url().to_owned(),
            ca_pem,
            token_ttl: Duration::from_secs(3600),
            go_peering: false,
            // As rear_manager.rs `offloading_issuer`: the gateway's job.
            remove_stale_grants: false,
        },
    );
    let driver = tokio::spawn(driver);
    let seller_key = format!("sha256:{}", "ab".repeat(32));
    let kubeconfig = credentials
        .issue(
            "seller0001",
            &seller_key,
            "buyer-liqo-id",
            Some(PeeringGrant::TenantNamespace("seller-liqo-id")),
        )
        .await
        .unwrap();
    let tenant = "liqo-tenant-seller-liqo-id";
    let binding = Api::<RoleBinding>::namespaced(admin.clone(), tenant)
        .get("fluidos-peer-seller0001")
        .await
        .unwrap();
    assert_eq!(binding.role_ref.name, "fluidos-peer");
    // And the reading of this cluster's CIDRs in Liqo's namespace, which
    // the manager holds to grant.
    let network = Api::<RoleBinding>::namespaced(admin.clone(), "liqo")
        .get("fluidos-peer-seller0001")
        .await
        .unwrap();
    assert_eq!(network.role_ref.name, "fluidos-peer-network");
    // The seller's kubeconfig (base64, as REAR carries it) works, in its
    // tenant namespace only.
    let kubeconfig = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, kubeconfig).unwrap(),
    )
    .unwrap();
    let seller = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let secret = |ns: &str| {
        serde_json::from_value::<Secret>(json!({
            "metadata": {"name": "probe", "namespace": ns},
            "stringData": {"k": "v"}
        }))
        .unwrap()
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    Api::<Secret>::namespaced(seller.clone(), tenant)
        .create(&dry, &secret(tenant))
        .await
        .unwrap();
    Api::<Secret>::namespaced(seller.clone(), NS)
        .create(&dry, &secret(NS))
        .await
        .expect_err("a seller's Secret in the node's namespace");
    driver.abort();

    // The guard holds the manager to the peer rules (dry runs: admission and
    // RBAC answer the same, nothing is written). The API server loads
    // admission policies asynchronously: asked until the guard answers.
    let mut pp = PatchParams::apply("evil").force();
    pp.dry_run = true;
    let evil_role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "fluidos-peer", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match Api::<Role>::namespaced(manager.clone(), "default")
            .patch("fluidos-peer", &pp, &Patch::Apply(&evil_role))
            .await
        {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(_) => panic!("the manager wrote the peer Role outside a tenant namespace"),
        }
    };
    assert!(err.to_string().contains("fluidos-peer-guard"), "{err}");
    let evil_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "fluidos-peer-evil", "namespace": tenant},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fluidos-peer"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}]
    });
    let err = Api::<RoleBinding>::namespaced(manager.clone(), tenant)
        .patch("fluidos-peer-evil", &pp, &Patch::Apply(&evil_binding))
        .await
        .expect_err("a binding of the peer Role to another account");
    assert!(err.to_string().contains("fluidos-peer-guard"), "{err}");

    // Tokens for the peers' accounts only: not the gateway's own (the
    // guard), and no namespace patches (the gateway records owners).
    let gateway_sa = helm::service_account(&objects, "rear-gateway");
    let token_request: k8s_openapi::api::authentication::v1::TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 600}}))
            .unwrap();
    let err = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(manager.clone(), NS)
        .create_token_request(&gateway_sa, &PostParams::default(), &token_request)
        .await
        .expect_err("a token for the gateway's account");
    assert!(
        err.to_string().contains("fluidos-peer-tokenrequest-guard"),
        "{err}"
    );
    let manager_user = format!(
        "system:serviceaccount:{NS}:{}",
        helm::service_account(&objects, "rear-manager")
    );
    for (verb, resource) in [("patch", "namespaces"), ("delete", "serviceaccounts")] {
        assert!(
            !sar_allows(&admin, &manager_user, verb, "", resource, tenant).await,
            "{verb} {resource}"
        );
    }

    // The gateway's extra rights: the NamespaceOffloading of a sold
    // service's namespace, and the Reservations.
    let gateway = format!(
        "system:serviceaccount:{NS}:{}",
        helm::service_account(&objects, "rear-gateway")
    );
    for verb in ["get", "create"] {
        assert!(
            sar_allows(
                &admin,
                &gateway,
                verb,
                "offloading.liqo.io",
                "namespaceoffloadings",
                "contract-x"
            )
            .await
        );
    }
    assert!(
        !sar_allows(
            &admin,
            &gateway,
            "delete",
            "offloading.liqo.io",
            "namespaceoffloadings",
            "contract-x"
        )
        .await
    );
    assert!(
        sar_allows(
            &admin,
            &gateway,
            "list",
            "reservation.fluidos.eu",
            "reservations",
            NS
        )
        .await
    );
}

/// `peering.exposure` reaches the rear-gateway as `--peer-exposure` (none
/// by default), and a kind the node does not know refuses to render.
#[test]
fn chart_peer_exposure_is_the_gateways_and_none_by_default() {
    let Some(bin) = helm::helm_bin() else { return };
    let exposure_of = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        let objects = helm::template(&bin, &sets, &[]);
        assert_args_parse(&objects);
        let args = args_of(&objects, "rear-gateway");
        let argv = std::iter::once("fluidos-node".to_owned()).chain(args.iter().cloned());
        fluidos_node::cli::Args::parse_invocation(argv)
            .unwrap()
            .peer_exposure
    };
    use fluidos_peer_access::PeerExposure as E;
    assert!(exposure_of(&[]).is_empty());
    assert_eq!(
        exposure_of(&["peering.exposure={node-port,ingress}"]),
        [E::NodePort, E::Ingress]
    );
    let refused = std::panic::catch_unwind(|| {
        helm::template(&bin, &["peering.exposure={host-port}".to_owned()], &[])
    })
    .expect_err("the chart rendered");
    let message = refused
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("peering.exposure"), "{message}");
}

/// `peering.podSecurity` reaches the rear-gateway as `--peer-pod-security`
/// (default `restricted`), `privileged` renders only with its opt-in (and
/// passes it on), and a value that is no level refuses to render.
#[test]
fn chart_peer_pod_security_is_the_gateways_level_and_privileged_needs_its_opt_in() {
    let Some(bin) = helm::helm_bin() else { return };
    let level_of = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| (*s).to_owned()).collect();
        let objects = helm::template(&bin, &sets, &[]);
        assert_args_parse(&objects);
        let args = args_of(&objects, "rear-gateway");
        let argv = std::iter::once("fluidos-node".to_owned()).chain(args.iter().cloned());
        let parsed = fluidos_node::cli::Args::parse_invocation(argv).unwrap();
        for other in ["local-resource-manager", "rear-manager", "network-manager"] {
            assert!(
                !args_of(&objects, other)
                    .iter()
                    .any(|a| a.starts_with("--peer-pod-security")),
                "{other} keeps no guard"
            );
        }
        (
            parsed.peer_pod_security,
            parsed.peer_pod_security_allow_privileged,
        )
    };
    use fluidos_peer_access::PodSecurityLevel as L;
    assert_eq!(level_of(&[]), (L::Restricted, false));
    assert_eq!(
        level_of(&["peering.podSecurity=baseline"]),
        (L::Baseline, false)
    );
    assert_eq!(
        level_of(&[
            "peering.podSecurity=privileged",
            "peering.podSecurityAllowPrivileged=true"
        ]),
        (L::Privileged, true)
    );
    for (sets, why) in [
        (
            vec!["peering.podSecurity=privileged".to_owned()],
            "needs peering.podSecurityAllowPrivileged=true",
        ),
        (
            vec!["peering.podSecurity=open".to_owned()],
            "peering.podSecurity must be restricted, baseline or privileged, not open",
        ),
    ] {
        let refused = std::panic::catch_unwind(|| helm::template(&bin, &sets, &[]))
            .expect_err("the chart rendered");
        let message = refused
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains(why), "{sets:?}: {message}");
    }
}

/// The gateway may write every admission policy and binding its peer guard
/// keeps (the chart names them one by one): a policy added to the guard
/// but not to the chart leaves a node that never becomes ready.
#[test]
fn chart_lets_the_gateway_keep_every_peer_guard_policy() {
    let grants = std::fs::read_to_string(grants_file()).unwrap();
    for resource in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        for verb in ["get", "patch"] {
            let prefix = format!(
                "rear-gateway cluster admissionregistration.k8s.io {resource} {verb} names="
            );
            let line = grants
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no grant {prefix}"));
            let names: Vec<&str> = line[prefix.len()..].split(',').collect();
            for policy in fluidos_peer_access::workload_policy::NAMES {
                assert!(
                    names.contains(&policy),
                    "{resource} {verb}: {policy} missing from {line}"
                );
            }
        }
    }
}

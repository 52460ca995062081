//! What the real stage needs, built on the first run with progress:
//! Kubernetes, Liqo and helm from the Go module proxy (cached under
//! `~/.cache/fluidos-rs`, reused afterwards), and the static fluidos-node
//! the image is made of (`tools/image/build-static.sh`, in `target/static`).
//! Each is taken from its environment variable where set, as CI sets them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::AsyncReadExt as _;

/// What the real stage runs.
pub struct Built {
    /// Liqo's binaries and chart.
    pub liqo: fluidos_testenv::LiqoBinaries,
    /// helm.
    pub helm: fluidos_testenv::real_cluster::Helm,
    /// The static fluidos-node.
    pub node: PathBuf,
}

/// One build: its environment variable, its script, what it is, how long
/// the first build takes on two cores.
struct Step {
    env: &'static str,
    script: &'static str,
    what: &'static str,
    first_time: &'static str,
}

const CONTROL_PLANE: Step = Step {
    env: "FLUIDOS_CP_BIN_DIR",
    script: "tools/control-plane/build.sh",
    what: "Kubernetes (etcd, kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl, kwok) and CoreDNS",
    first_time: "about 12 minutes",
};
const LIQO: Step = Step {
    env: "FLUIDOS_LIQO_BIN_DIR",
    script: "tools/liqo/build.sh",
    what: "Liqo v1.0.0 (controller manager, CRD replicator, webhook, virtual kubelet, liqoctl)",
    first_time: "about 6 minutes",
};
const HELM: Step = Step {
    env: "FLUIDOS_HELM_BIN_DIR",
    script: "tools/helm/build.sh",
    what: "helm",
    first_time: "about 2 minutes",
};
const STATIC_NODE: Step = Step {
    env: "FLUIDOS_STATIC_BINARY",
    script: "tools/image/build-static.sh",
    what: "the static fluidos-node of the image (release build)",
    first_time: "6 to 15 minutes",
};

/// Builds (or finds) everything, one step after the other.
pub async fn all() -> anyhow::Result<Built> {
    // The control plane's directory: ControlPlane::start runs the same
    // script again, which then only finds its cache.
    step(&CONTROL_PLANE, &[]).await?;
    let liqo = step(&LIQO, &[]).await?;
    let liqo = fluidos_testenv::LiqoBinaries::in_dir(&liqo)?;
    let helm = step(&HELM, &[]).await?;
    let helm = fluidos_testenv::real_cluster::Helm::in_dir(&helm)?;
    // Once: rustup's musl target and Debian's musl-tools, where missing.
    if std::env::var_os(STATIC_NODE.env).is_none() {
        run(STATIC_NODE.script, &["--prepare"], "the musl toolchain").await?;
    }
    let node = step(&STATIC_NODE, &[]).await?;
    Ok(Built { liqo, helm, node })
}

/// The path `step.env` names, or the last line its script prints.
async fn step(step: &Step, args: &[&str]) -> anyhow::Result<PathBuf> {
    if let Some(set) = std::env::var_os(step.env).filter(|v| !v.is_empty()) {
        let path = fluidos_testenv::workspace_root().join(set);
        println!("  {}: {} (from {})", step.what, path.display(), step.env);
        return Ok(path);
    }
    println!(
        "  {}: {} (the first time {}; cached afterwards) ...",
        step.what, step.script, step.first_time
    );
    let out = run(step.script, args, step.what).await?;
    let last = out.lines().last().map(str::trim).unwrap_or_default();
    if last.is_empty() {
        bail!("{} printed no path", step.script);
    }
    Ok(fluidos_testenv::workspace_root().join(last))
}

/// Runs `script args` from the workspace, its stderr into a log file whose
/// last line is shown every 30 s; its stdout.
async fn run(script: &str, args: &[&str], what: &str) -> anyhow::Result<String> {
    let root = fluidos_testenv::workspace_root();
    let log_path = std::env::temp_dir().join(format!(
        "fluidos-demo-{}.log",
        Path::new(script)
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new("bash")
        .arg(root.join(script))
        .args(args)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {script}"))?;
    let mut stdout = child.stdout.take().context("the script's stdout")?;
    let mut out = String::new();
    let read = stdout.read_to_string(&mut out);
    tokio::pin!(read);
    let mut heartbeat = tokio::time::interval(Duration::from_secs(30));
    heartbeat.tick().await;
    loop {
        tokio::select! {
            r = &mut read => { r.with_context(|| format!("reading {script}'s output"))?; break; }
            _ = heartbeat.tick() => {
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
                println!("    {:4.0}s  {}", started.elapsed().as_secs_f64(), last.chars().take(100).collect::<String>());
            }
        }
    }
    let status = child
        .wait()
        .await
        .with_context(|| format!("waiting for {script}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(20).collect();
        bail!(
            "{script} failed ({status}) building {what}; the end of {}:\n{}",
            log_path.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    println!("    done in {:.0}s", started.elapsed().as_secs_f64());
    Ok(out)
}

//! `fluidos-node`: runs the selected FLUIDOS components against the cluster
//! in KUBECONFIG (or the Pod's service account).
//!
//! Exit codes: 0 after SIGTERM/SIGINT, 2 when startup checks fail (and for
//! flag errors, as clap does), 1 when a component fails while running or
//! (`--leader-elect`) the leadership is lost.
//!
//! `fluidos-node uninstall` is the Helm chart's pre-delete hook
//! ([`fluidos_node::uninstall`]): 0 when everything the node made is gone,
//! 1 with the reason on stderr otherwise.

use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use fluidos_node::cli::{Args, Component, LogFormat};
use fluidos_node::context::Context;
use fluidos_node::leader_election::{self, Elector, Ended, Leadership};
use fluidos_node::{components, health, identity, startup};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// How long components get to stop after SIGTERM; Kubernetes waits 30 s by
/// default before SIGKILL, so this leaves room to log what hung.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

const EXIT_STARTUP: u8 = 2;
const EXIT_RUNTIME: u8 = 1;

#[tokio::main]
async fn main() -> ExitCode {
    // `fluidos-node uninstall …`: the chart's pre-delete hook, flags of its own.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new("uninstall")) {
        return fluidos_node::uninstall::main(std::env::args_os().skip(2)).await;
    }
    let args = match Args::parse_invocation(std::env::args_os()) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    init_tracing(args.log_format, args.go.zap_log_level.as_deref());
    raise_open_files_limit();
    for (flag, why) in args.go.ignored() {
        tracing::warn!(flag, "Go node flag accepted and ignored: {why}");
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));

    // A signal during startup (e.g. while the API server is unreachable)
    // is a normal stop, not a failure.
    let started = tokio::select! {
        started = startup::start(args) => started,
        () = shutdown.cancelled() => return ExitCode::SUCCESS,
    };
    match started {
        Ok(started) => run(started, shutdown).await,
        Err(e) => {
            // One plain paragraph on stderr, whatever the log format: this is
            // read by a person fixing a deployment, not by a log pipeline.
            eprintln!("fluidos-node: cannot start: {e}");
            ExitCode::from(EXIT_STARTUP)
        }
    }
}

/// Open files the node wants at least: the REAR gateway's connections
/// (`fluidos_rear_gateway::DEFAULT_MAX_CONNECTIONS`) plus the API-server
/// connections, watches and sockets of the other components.
const WANTED_OPEN_FILES: u64 = 4096;

/// Raises the soft limit of open files as far as the hard limit allows:
/// with the usual soft limit of 1024, a gateway serving its 1024 allowed
/// connections would see its accepts fail.
fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) if n < WANTED_OPEN_FILES => tracing::warn!(
            open_files = n,
            wanted = WANTED_OPEN_FILES,
            "the open-files limit is low (raise the container's nofile ulimit); connections beyond it are refused"
        ),
        Ok(n) => tracing::debug!(open_files = n, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
    }
}

/// RUST_LOG wins; else the Go chart's `--zap-log-level`; else `info`.
fn init_tracing(format: LogFormat, zap_level: Option<&str>) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(zap_level.unwrap_or("info")));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
    }
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let name = wait_for_signal().await;
    tracing::info!(signal = name, "shutting down");
    shutdown.cancel();
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the node");
            return match tokio::signal::ctrl_c().await {
                Ok(()) => "SIGINT",
                Err(_) => std::future::pending().await,
            };
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        Ok(()) = tokio::signal::ctrl_c() => "SIGINT",
    }
}

/// A task the node runs, for log messages.
#[derive(Clone, Copy)]
enum Task {
    Component(Component),
    Server(&'static str),
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Task::Component(c) => write!(f, "component {c}"),
            Task::Server(name) => write!(f, "{name} server"),
        }
    }
}

/// Runs servers and components until shutdown or the first failure.
async fn run(started: startup::Started, shutdown: CancellationToken) -> ExitCode {
    let startup::Started {
        context,
        probes,
        metrics,
        elector,
    } = started;
    let ctx = Arc::new(context);
    let selected = ctx.args.selected_components();
    tracing::info!(
        namespace = %ctx.namespace(),
        node_id = %ctx.identity.node_id,
        domain = %ctx.identity.domain,
        ip = %ctx.identity.ip,
        components = ?selected.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "fluidos-node starting"
    );

    let mut tasks: JoinSet<(Task, anyhow::Result<()>)> = JoinSet::new();
    if let Ok(addr) = probes.local_addr() {
        tracing::info!(%addr, "serving /healthz and /readyz");
    }
    let router = health::probe_router(ctx.readiness.clone());
    let stop = shutdown.clone();
    tasks.spawn(async move {
        let result = health::serve(probes, router, stop).await;
        (Task::Server("probe"), result.context("serving probes"))
    });
    if let Some(metrics) = metrics {
        if let Ok(addr) = metrics.local_addr() {
            tracing::info!(%addr, "serving /metrics");
        }
        let router = health::metrics_router(ctx.readiness.clone(), ctx.metrics.clone());
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let result = health::serve(metrics, router, stop).await;
            (Task::Server("metrics"), result.context("serving metrics"))
        });
    }
    let ctx = match with_liqo_cluster_id(ctx, &selected, &shutdown).await {
        Some(ctx) => ctx,
        None => {
            tracing::info!("fluidos-node stopped before Liqo published its cluster ID");
            return ExitCode::SUCCESS;
        }
    };
    let (ctx, election) = campaign(ctx, &selected, elector);
    for component in selected {
        let ctx = ctx.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let mut leadership = ctx.leadership.clone();
            if leader_election::leader_only(component) {
                let leading = tokio::select! {
                    leading = leadership.wait() => leading,
                    () = stop.cancelled() => false,
                };
                if !leading {
                    return (Task::Component(component), Ok(()));
                }
                if leadership.is_elected() {
                    ctx.readiness.mark_not_ready(component);
                }
            }
            let result = components::run(component, ctx, stop).await;
            (
                Task::Component(component),
                result.map_err(anyhow::Error::from),
            )
        });
    }

    let failed = match election {
        None => supervise(&mut tasks, &shutdown).await,
        Some(election) => match supervise_leading(&mut tasks, &shutdown, election).await {
            Some(failed) => failed,
            None => return ExitCode::from(EXIT_RUNTIME),
        },
    };
    if failed {
        ExitCode::from(EXIT_RUNTIME)
    } else {
        tracing::info!("fluidos-node stopped");
        ExitCode::SUCCESS
    }
}

/// The context with this cluster's Liqo ID: as it is when known; else (a
/// peering node whose Liqo has not published it) waits for Liqo's ConfigMap,
/// saying so in `/readyz` and answering every REAR request with 503 (as the
/// Go node does) meanwhile. `None` on shutdown.
async fn with_liqo_cluster_id(
    ctx: Arc<Context>,
    selected: &[Component],
    shutdown: &CancellationToken,
) -> Option<Arc<Context>> {
    if ctx.identity.liqo_id().is_some() {
        return Some(ctx);
    }
    // Nothing is served until then: loud, as a node that used to run
    // without Liqo needs --peering=false now.
    tracing::error!("{}", identity::WAITING_FOR_LIQO);
    ctx.readiness
        .set_waiting(Some(identity::WAITING_FOR_LIQO.to_owned()));
    let stop_503 = CancellationToken::new();
    let answering_503 = selected.contains(&Component::RearGateway).then(|| {
        let addr = ctx.args.rear_gateway_address();
        let stop = stop_503.clone();
        tokio::spawn(async move {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => {
                    let router = axum::Router::new().fallback(|| async {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            [(axum::http::header::CONTENT_TYPE, "application/json")],
                            r#"{"error":"this node's Liqo cluster ID is not known yet (Liqo not installed?); retry later"}"#,
                        )
                    });
                    if let Err(e) = health::serve(listener, router, stop).await {
                        tracing::warn!(error = %e, "serving 503 on the REAR port");
                    }
                }
                Err(e) => tracing::warn!(error = %e, %addr, "cannot bind the REAR port"),
            }
        })
    });
    // A watch error (the API server restarting, a 410) is retried, never
    // taken for the end.
    let wait = async {
        let mut failures: u32 = 0;
        loop {
            match identity::wait_for_liqo_cluster_id(&ctx.client).await {
                Ok(id) if !id.is_empty() => return id,
                Ok(_) => {}
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, "watching Liqo's cluster ID ConfigMap; retrying");
                }
            }
            tokio::time::sleep(fluidos_controller::reconcile::backoff_delay(failures)).await;
        }
    };
    let id = tokio::select! {
        id = wait => id,
        () = shutdown.cancelled() => {
            stop_503.cancel();
            return None;
        }
    };
    stop_503.cancel();
    if let Some(task) = answering_503 {
        // The listener is closed at once; a client holding a connection
        // open must not keep the real gateway from starting.
        if tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .is_err()
        {
            tracing::info!("a REAR client still holds a 503 connection; starting anyway");
        }
    }
    tracing::info!(liqo_cluster_id = %id, "Liqo published this cluster's ID");
    let mut context = (*ctx).clone();
    context.identity.additional_information =
        Some(fluidos_api::NodeIdentityAdditionalInfo { liqo_id: Some(id) });
    ctx.readiness.set_waiting(None);
    Some(Arc::new(context))
}

/// A running election: its task and what stops it.
struct Election {
    task: JoinHandle<Ended>,
    stop: CancellationToken,
}

/// Without an elector, `ctx` as it is (this process leads). With one, starts
/// campaigning: the leader-only components stand by (ready, see
/// `Readiness::mark_standby`) until this replica holds the Lease.
fn campaign(
    ctx: Arc<Context>,
    selected: &[Component],
    elector: Option<Elector>,
) -> (Arc<Context>, Option<Election>) {
    let Some(elector) = elector else {
        ctx.leader.set(1);
        return (ctx, None);
    };
    for component in selected {
        if leader_election::leader_only(*component) {
            ctx.readiness.mark_standby(*component);
        }
    }
    let (elected, leadership) = watch::channel(false);
    let mut context = (*ctx).clone();
    context.leadership = Leadership::elected(leadership);
    let stop = CancellationToken::new();
    let task = tokio::spawn(elector.run(elected, ctx.leader.clone(), stop.clone()));
    (Arc::new(context), Some(Election { task, stop }))
}

/// [`supervise`], keeping the Lease until every task has stopped and then
/// releasing it; `None` when the leadership was lost: the tasks are then
/// aborted at once (no drain: another replica may already be starting the
/// same controllers) and the node exits 1, as controller-runtime does.
async fn supervise_leading(
    tasks: &mut JoinSet<(Task, anyhow::Result<()>)>,
    shutdown: &CancellationToken,
    mut election: Election,
) -> Option<bool> {
    let ended = tokio::select! {
        failed = supervise(tasks, shutdown) => {
            election.stop.cancel();
            if let Err(e) = (&mut election.task).await {
                tracing::warn!(error = %e, "leader election task panicked");
            }
            return Some(failed);
        }
        ended = &mut election.task => ended,
    };
    let reason = match ended {
        Ok(Ended::Lost(reason)) => reason,
        Ok(Ended::Stopped) => "the election stopped".to_owned(),
        Err(e) => format!("the election task failed: {e}"),
    };
    tracing::error!(
        reason,
        "leader election: leadership lost; stopping the controllers and exiting so that \
         this replica restarts as a standby"
    );
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    None
}

/// Waits for every task; the first to stop triggers shutdown of the rest.
/// Returns whether anything failed or hung.
async fn supervise(
    tasks: &mut JoinSet<(Task, anyhow::Result<()>)>,
    shutdown: &CancellationToken,
) -> bool {
    let mut failed = false;
    let mut deadline = None;
    loop {
        let joined = match deadline {
            None => tokio::select! {
                joined = tasks.join_next() => joined,
                () = shutdown.cancelled() => {
                    deadline = Some(tokio::time::Instant::now() + DRAIN_TIMEOUT);
                    continue;
                }
            },
            Some(deadline) => match tokio::time::timeout_at(deadline, tasks.join_next()).await {
                Ok(joined) => joined,
                Err(_) => {
                    tracing::error!(
                        remaining = tasks.len(),
                        "tasks did not stop within {DRAIN_TIMEOUT:?}; aborting them"
                    );
                    tasks.abort_all();
                    return true;
                }
            },
        };
        let Some(joined) = joined else {
            return failed;
        };
        match joined {
            Ok((task, Ok(()))) if shutdown.is_cancelled() => {
                tracing::debug!(%task, "stopped");
            }
            // Components and servers run until told to stop; returning on
            // their own means something is wrong even without an error.
            Ok((task, Ok(()))) => {
                tracing::error!(%task, "stopped unexpectedly; shutting down");
                failed = true;
                shutdown.cancel();
            }
            Ok((task, Err(e))) => {
                tracing::error!(%task, error = format!("{e:#}"), "failed; shutting down");
                failed = true;
                shutdown.cancel();
            }
            Err(e) => {
                tracing::error!(error = %e, "task panicked; shutting down");
                failed = true;
                shutdown.cancel();
            }
        }
    }
}

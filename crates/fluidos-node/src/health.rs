//! Liveness, readiness and metrics endpoints, and the readiness registry behind them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use fluidos_controller::Metrics;
use fluidos_controller::metrics;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cli::Component;

/// A component starting (or stopped).
const STARTING: u8 = 0;
/// A component serving.
const READY: u8 = 1;
/// A leader-only component on a replica that does not lead: counts as
/// ready (the replica is healthy and its REAR gateway serves), but is not
/// reported as a ready component in the metrics.
const STANDBY: u8 = 2;

/// Which selected components have reported ready; cheap to clone and share.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    // The key set is fixed at construction, so states need no lock: probes
    // never wait on a component that is busy reporting.
    components: Arc<BTreeMap<Component, AtomicU8>>,
    /// What the node as a whole waits for before starting its components.
    waiting: Arc<std::sync::Mutex<Option<String>>>,
    /// What the node, ready, cannot do (said by `/readyz`, still 200), by
    /// the component that says it.
    degraded: Arc<std::sync::Mutex<BTreeMap<Component, String>>>,
}

impl Readiness {
    /// A registry tracking `components`, none of them ready yet.
    pub fn new(components: impl IntoIterator<Item = Component>) -> Self {
        Readiness {
            components: Arc::new(
                components
                    .into_iter()
                    .map(|c| (c, AtomicU8::new(STARTING)))
                    .collect(),
            ),
            waiting: Arc::default(),
            degraded: Arc::default(),
        }
    }

    /// Records what `component` cannot do while it serves (`None`:
    /// nothing); `/readyz` says it and stays 200: the rest works.
    pub fn set_degraded(&self, component: Component, reason: Option<String>) {
        if let Ok(mut d) = self.degraded.lock() {
            match reason {
                Some(why) => d.insert(component, why),
                None => d.remove(&component),
            };
        }
    }

    /// What the node cannot do, if anything: each component's, named.
    pub fn degraded(&self) -> Option<String> {
        let d = self.degraded.lock().ok()?;
        (!d.is_empty()).then(|| {
            d.iter()
                .map(|(c, why)| format!("{c}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Records what the node waits for before its components start (`None`:
    /// nothing); `/readyz` says it.
    pub fn set_waiting(&self, reason: Option<String>) {
        if let Ok(mut w) = self.waiting.lock() {
            *w = reason;
        }
    }

    /// What the node waits for, if anything.
    pub fn waiting(&self) -> Option<String> {
        self.waiting.lock().ok().and_then(|w| w.clone())
    }

    /// Records that `component` is serving; ignored for components not tracked.
    pub fn mark_ready(&self, component: Component) {
        self.set(component, READY);
    }

    /// Records that `component` stopped serving, e.g. after losing its watch
    /// (or is starting, after standing by).
    pub fn mark_not_ready(&self, component: Component) {
        self.set(component, STARTING);
    }

    /// Records that `component` waits for this replica to lead (leader
    /// election): the replica counts as ready meanwhile.
    pub fn mark_standby(&self, component: Component) {
        self.set(component, STANDBY);
    }

    fn set(&self, component: Component, state: u8) {
        match self.components.get(&component) {
            Some(flag) => flag.store(state, Ordering::Release),
            None => tracing::debug!(%component, "readiness change for a component not running"),
        }
    }

    /// True once every tracked component is ready or standing by.
    pub fn is_ready(&self) -> bool {
        self.waiting().is_none() && self.pending().is_empty()
    }

    /// Tracked components not ready yet (nor standing by), in start order.
    pub fn pending(&self) -> Vec<Component> {
        self.in_state(STARTING)
    }

    /// Tracked components waiting for this replica to lead, in start order.
    pub fn standing_by(&self) -> Vec<Component> {
        self.in_state(STANDBY)
    }

    fn in_state(&self, state: u8) -> Vec<Component> {
        self.components
            .iter()
            .filter_map(|(c, flag)| (flag.load(Ordering::Acquire) == state).then_some(*c))
            .collect()
    }

    /// Every tracked component with whether it serves, in start order (a
    /// component standing by does not).
    pub fn snapshot(&self) -> Vec<(Component, bool)> {
        self.components
            .iter()
            .map(|(c, flag)| (*c, flag.load(Ordering::Acquire) == READY))
            .collect()
    }
}

/// Routes `/healthz` and `/readyz`.
pub fn probe_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// What `/metrics` reports: the node's registry, plus component readiness.
#[derive(Clone, Debug)]
struct MetricsState {
    readiness: Readiness,
    metrics: Metrics,
}

/// Routes `/metrics` (OpenMetrics text format).
pub fn metrics_router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(MetricsState { readiness, metrics })
}

/// Serves `router` on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Answers as long as the process can serve HTTP at all.
async fn healthz() -> &'static str {
    "ok"
}

/// 200 once every selected component is ready (or standing by for the
/// leadership), else 503 naming the others.
async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    if let Some(reason) = readiness.waiting() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        );
    }
    let pending = readiness.pending();
    if pending.is_empty() {
        let standing_by = readiness.standing_by();
        let degraded = readiness
            .degraded()
            .map(|why| format!(" (degraded: {why})"))
            .unwrap_or_default();
        if standing_by.is_empty() {
            (StatusCode::OK, format!("ok{degraded}"))
        } else {
            let names: Vec<&str> = standing_by.iter().map(|c| c.as_str()).collect();
            (
                StatusCode::OK,
                format!(
                    "ok (not the leader; standing by: {}){degraded}",
                    names.join(", ")
                ),
            )
        }
    } else {
        let names: Vec<&str> = pending.iter().map(|c| c.as_str()).collect();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", names.join(", ")),
        )
    }
}

/// Every metric in OpenMetrics text; readiness is read at scrape time.
async fn serve_metrics(State(st): State<MetricsState>) -> impl IntoResponse {
    for (component, ready) in st.readiness.snapshot() {
        st.metrics.components.set_ready(component.as_str(), ready);
    }
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        st.metrics.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_tracked_component_is() {
        let r = Readiness::new([Component::RearGateway, Component::RearManager]);
        assert!(!r.is_ready());
        assert_eq!(
            r.pending(),
            vec![Component::RearGateway, Component::RearManager]
        );

        // Untracked components neither count nor get added.
        r.mark_ready(Component::NetworkManager);
        assert_eq!(r.snapshot().len(), 2);

        let shared = r.clone();
        shared.mark_ready(Component::RearManager);
        assert_eq!(r.pending(), vec![Component::RearGateway]);
        r.mark_ready(Component::RearGateway);
        assert!(shared.is_ready());

        r.mark_not_ready(Component::RearManager);
        assert!(!shared.is_ready());
        assert_eq!(shared.pending(), vec![Component::RearManager]);
    }

    #[tokio::test]
    async fn a_standby_is_ready_but_its_waiting_components_do_not_serve() {
        let r = Readiness::new([Component::RearGateway, Component::RearManager]);
        r.mark_standby(Component::RearManager);
        assert_eq!(r.pending(), vec![Component::RearGateway]);
        r.mark_ready(Component::RearGateway);
        assert!(r.is_ready());
        assert_eq!(r.standing_by(), vec![Component::RearManager]);
        assert_eq!(
            r.snapshot(),
            vec![
                (Component::RearGateway, true),
                (Component::RearManager, false)
            ]
        );
        assert_eq!(
            readyz(State(r.clone())).await,
            (
                StatusCode::OK,
                "ok (not the leader; standing by: rear-manager)".to_owned()
            )
        );
        // Elected: starting until its controllers report.
        r.mark_not_ready(Component::RearManager);
        assert_eq!(
            readyz(State(r.clone())).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        r.mark_ready(Component::RearManager);
        assert_eq!(readyz(State(r)).await, (StatusCode::OK, "ok".to_owned()));
    }

    #[tokio::test]
    async fn a_degraded_node_is_ready_and_says_what_it_cannot_do() {
        let r = Readiness::new([Component::RearGateway]);
        r.mark_ready(Component::RearGateway);
        r.set_degraded(
            Component::RearGateway,
            Some("sells no K8Slice: set --api-server-url".into()),
        );
        assert_eq!(
            readyz(State(r.clone())).await,
            (
                StatusCode::OK,
                "ok (degraded: rear-gateway: sells no K8Slice: set --api-server-url)".to_owned()
            )
        );
        // Each component's own reason: one clears only its own.
        r.set_degraded(Component::RearManager, Some("no Liqo".into()));
        assert_eq!(
            r.degraded().as_deref(),
            Some("rear-gateway: sells no K8Slice: set --api-server-url; rear-manager: no Liqo")
        );
        r.set_degraded(Component::RearGateway, None);
        assert_eq!(r.degraded().as_deref(), Some("rear-manager: no Liqo"));
        r.set_degraded(Component::RearManager, None);
        assert_eq!(readyz(State(r)).await, (StatusCode::OK, "ok".to_owned()));
    }

    #[test]
    fn no_components_is_trivially_ready() {
        assert!(Readiness::new([]).is_ready());
    }

    #[tokio::test]
    async fn readyz_is_503_until_ready() {
        let r = Readiness::new([Component::LocalResourceManager, Component::RearGateway]);
        let (code, body) = readyz(State(r.clone())).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: local-resource-manager, rear-gateway");
        r.mark_ready(Component::LocalResourceManager);
        r.mark_ready(Component::RearGateway);
        assert_eq!(readyz(State(r)).await, (StatusCode::OK, "ok".to_owned()));
    }

    #[tokio::test]
    async fn readyz_says_what_the_node_waits_for() {
        let r = Readiness::new([Component::RearGateway]);
        r.mark_ready(Component::RearGateway);
        r.set_waiting(Some("waiting for Liqo".into()));
        assert!(!r.is_ready());
        let (code, body) = readyz(State(r.clone())).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: waiting for Liqo");
        r.set_waiting(None);
        assert_eq!(readyz(State(r)).await, (StatusCode::OK, "ok".to_owned()));
    }

    #[tokio::test]
    async fn probes_are_served_over_http() {
        let r = Readiness::new([Component::RearGateway]);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, probe_router(r.clone()), stop.clone()));

        assert_eq!(http_status(addr, "/healthz").await, 200);
        assert_eq!(http_status(addr, "/readyz").await, 503);
        r.mark_ready(Component::RearGateway);
        assert_eq!(http_status(addr, "/readyz").await, 200);
        assert_eq!(http_status(addr, "/nope").await, 404);

        stop.cancel();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_report_each_component() {
        let r = Readiness::new([Component::RearGateway, Component::NetworkManager]);
        r.mark_ready(Component::NetworkManager);
        let state = MetricsState {
            readiness: r,
            metrics: Metrics::new(),
        };
        let response = serve_metrics(State(state)).await.into_response();
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            metrics::CONTENT_TYPE
        );
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        assert!(text.contains("fluidos_node_component_ready{component=\"rear-gateway\"} 0\n"));
        assert!(text.contains("fluidos_node_component_ready{component=\"network-manager\"} 1\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// Minimal HTTP/1.0 GET returning the status code, to avoid an HTTP client dependency.
    async fn http_status(addr: std::net::SocketAddr, path: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap()
    }
}

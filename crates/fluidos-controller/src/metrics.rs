//! Every metric the node exports, registered once in one prometheus-client
//! [`Registry`] and encoded as OpenMetrics text for `/metrics`.
//!
//! Labels are bounded: controller names and failure steps are static
//! strings, REAR routes are route templates (never raw paths), discovery
//! outcomes and contract states are small fixed sets.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A histogram family whose histograms all use the same latency buckets.
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latency buckets from 1 ms to about 131 s (doubling), which covers a
/// cached REAR list, a reconcile waiting on a slow API server, and one
/// waiting out a 60 s purchase.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Labels of the per-controller metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// Controller name, e.g. `node`.
    pub controller: String,
}

/// Labels of the reconcile failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// Controller name.
    pub controller: String,
    /// The step that failed ([`crate::ReconcileError::step`]).
    pub reason: String,
}

/// Labels of the REAR request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Matched route template, e.g. `/api/v2/reservations/{id}`.
    pub route: String,
    /// HTTP method.
    pub method: String,
    /// HTTP status code.
    pub status: String,
}

/// Labels of the REAR latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Matched route template.
    pub route: String,
    /// HTTP method.
    pub method: String,
}

/// A single `type` label (flavor type).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct TypeLabels {
    /// Flavor type, e.g. `K8Slice`.
    pub flavor_type: String,
}

// By hand: the label is `type`, a keyword the derive would encode as `r#type`.
impl EncodeLabelSet for TypeLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        [("type", self.flavor_type.as_str())].encode(encoder)
    }
}

/// A single `state` label (contract state).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `active` or `expired`.
    pub state: String,
}

/// A single `outcome` label (per-provider discovery outcome).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The outcome the consumer writes: `Answered`, `Failed` or `TimedOut`.
    pub outcome: String,
}

/// A single `component` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    /// Component name, e.g. `rear-gateway`.
    pub component: String,
}

/// Reconcile counts, failures by step, and durations, per controller.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    reconciles: Family<ControllerLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: HistogramFamily<ControllerLabels>,
}

impl ControllerMetrics {
    fn new() -> Self {
        ControllerMetrics {
            reconciles: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_controller_reconciles",
            "Reconciles run, per controller",
            self.reconciles.clone(),
        );
        r.register(
            "fluidos_controller_reconcile_failures",
            "Reconciles failed, per controller and failing step",
            self.failures.clone(),
        );
        r.register(
            "fluidos_controller_reconcile_duration_seconds",
            "Reconcile duration in seconds, per controller",
            self.duration.clone(),
        );
    }

    /// Counts one reconcile of `controller` that took `elapsed`.
    pub fn reconciled(&self, controller: &str, elapsed: Duration) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one failed reconcile of `controller` at step `reason`.
    pub fn failed(&self, controller: &str, reason: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                controller: controller.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }
}

/// REAR requests by route, method and status, and their latency.
#[derive(Clone, Debug)]
pub struct RearMetrics {
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily<RouteLabels>,
}

impl RearMetrics {
    fn new() -> Self {
        RearMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        }
    }

    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_rear_requests",
            "REAR requests served, per route template, method and status code",
            self.requests.clone(),
        );
        r.register(
            "fluidos_rear_request_duration_seconds",
            "REAR request latency in seconds, per route template and method",
            self.duration.clone(),
        );
    }

    /// Records one request: `route` must be the matched route template.
    pub fn observe(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                method: method.to_owned(),
                status: status.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&RouteLabels {
                route: route.to_owned(),
                method: method.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }
}

/// Compare-and-swap retries on Flavor ledger writes.
#[derive(Clone, Debug, Default)]
pub struct LedgerMetrics {
    conflicts: Counter,
}

impl LedgerMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_ledger_conflicts",
            "Flavor ledger writes retried after a 409 Conflict (compare-and-swap lost)",
            self.conflicts.clone(),
        );
    }

    /// Counts one ledger write lost to a concurrent writer.
    pub fn conflict(&self) {
        self.conflicts.inc();
    }
}

/// What the provider has on the market right now.
#[derive(Clone, Debug, Default)]
pub struct MarketMetrics {
    flavors: Family<TypeLabels, Gauge>,
    holds: Gauge,
    sales: Gauge,
    contracts: Family<StateLabels, Gauge>,
}

impl MarketMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_flavors_published",
            "Available flavors this provider publishes, per flavor type",
            self.flavors.clone(),
        );
        r.register(
            "fluidos_ledger_holds",
            "Live (unexpired) reservation holds on this provider's flavor ledgers",
            self.holds.clone(),
        );
        r.register(
            "fluidos_ledger_sales",
            "Sales recorded on this provider's flavor ledgers",
            self.sales.clone(),
        );
        r.register(
            "fluidos_contracts",
            "Contracts this provider sold, per state (active, expired)",
            self.contracts.clone(),
        );
    }

    /// Sets how many flavors of type `ty` are published.
    pub fn set_flavors(&self, ty: &str, n: usize) {
        self.flavors
            .get_or_create(&TypeLabels {
                flavor_type: ty.to_owned(),
            })
            .set(gauge_value(n));
    }

    /// Sets how many live holds the ledgers carry.
    pub fn set_holds(&self, n: usize) {
        self.holds.set(gauge_value(n));
    }

    /// Sets how many sales the ledgers carry.
    pub fn set_sales(&self, n: usize) {
        self.sales.set(gauge_value(n));
    }

    /// Sets how many contracts are in `state` (`active` or `expired`).
    pub fn set_contracts(&self, state: &str, n: usize) {
        self.contracts
            .get_or_create(&StateLabels {
                state: state.to_owned(),
            })
            .set(gauge_value(n));
    }
}

/// Discovery: peers known, and per-provider query outcomes.
#[derive(Clone, Debug, Default)]
pub struct DiscoveryMetrics {
    known_peers: Gauge,
    queries: Family<OutcomeLabels, Counter>,
}

impl DiscoveryMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_discovery_known_peers",
            "Providers discovery would query now",
            self.known_peers.clone(),
        );
        r.register(
            "fluidos_discovery_queries",
            "Per-provider discovery queries, per outcome",
            self.queries.clone(),
        );
    }

    /// Counts one provider queried with `outcome` (`Answered`, `Failed` or `TimedOut`).
    pub fn query(&self, outcome: &str) {
        self.queries
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Sets how many providers are known.
    pub fn set_known_peers(&self, n: usize) {
        self.known_peers.set(gauge_value(n));
    }
}

/// Readiness of the node's components.
#[derive(Clone, Debug, Default)]
pub struct ComponentMetrics {
    ready: Family<ComponentLabels, Gauge>,
}

impl ComponentMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "fluidos_node_component_ready",
            "1 when the component is ready, 0 otherwise",
            self.ready.clone(),
        );
    }

    /// Sets whether `component` is ready.
    pub fn set_ready(&self, component: &str, ready: bool) {
        self.ready
            .get_or_create(&ComponentLabels {
                component: component.to_owned(),
            })
            .set(i64::from(ready));
    }
}

/// A count as a gauge value (saturating; counts never get near `i64::MAX`).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every metric the node exports, in one prometheus-client Registry; Clone (Arc inside), Default, Debug.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Per-controller reconcile metrics.
    pub controllers: ControllerMetrics,
    /// Per-route REAR request metrics.
    pub rear: RearMetrics,
    /// Ledger compare-and-swap conflicts.
    pub ledger: LedgerMetrics,
    /// Market gauges.
    pub market: MarketMetrics,
    /// Discovery metrics.
    pub discovery: DiscoveryMetrics,
    /// Component readiness.
    pub components: ComponentMetrics,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of metrics, all registered.
    pub fn new() -> Self {
        Self::with_extra(|_| {})
    }

    /// A fresh set of metrics plus those `extra` registers: metrics of a
    /// crate this one does not know (the network manager's) served on the
    /// same `/metrics`.
    pub fn with_extra(extra: impl FnOnce(&mut Registry)) -> Self {
        let controllers = ControllerMetrics::new();
        let rear = RearMetrics::new();
        let ledger = LedgerMetrics::default();
        let market = MarketMetrics::default();
        let discovery = DiscoveryMetrics::default();
        let components = ComponentMetrics::default();
        let mut registry = Registry::default();
        controllers.register(&mut registry);
        rear.register(&mut registry);
        ledger.register(&mut registry);
        market.register(&mut registry);
        discovery.register(&mut registry);
        components.register(&mut registry);
        extra(&mut registry);
        // Both states exist from the start, so a dashboard sees 0, not "no data".
        for state in ["active", "expired"] {
            market.set_contracts(state, 0);
        }
        Metrics {
            controllers,
            rear,
            ledger,
            market,
            discovery,
            components,
            registry: Arc::new(registry),
        }
    }

    /// OpenMetrics text ([`CONTENT_TYPE`]), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a label encoder error would be a bug here.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding metrics failed");
            out.clear();
            out.push_str("# EOF\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect()
    }

    #[test]
    fn fresh_registry_names_unlabelled_families_and_ends_with_eof() {
        let text = Metrics::new().encode();
        // A labelled family appears with its first label set; the others at once.
        assert_eq!(
            families(&text),
            vec![
                "fluidos_ledger_conflicts",
                "fluidos_ledger_holds",
                "fluidos_ledger_sales",
                "fluidos_contracts",
                "fluidos_discovery_known_peers",
            ],
            "{text}"
        );
        assert!(
            text.contains(r#"fluidos_contracts{state="expired"} 0"#),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_family_once_used() {
        let m = Metrics::new();
        m.controllers.reconciled("node", Duration::from_millis(1));
        m.controllers.failed("node", "build");
        m.rear.observe("/a", "GET", 200, Duration::from_millis(1));
        m.market.set_flavors("K8Slice", 1);
        m.discovery.query("Answered");
        m.components.set_ready("rear-gateway", false);
        let text = m.encode();
        let mut found = families(&text);
        found.sort_unstable();
        assert_eq!(
            found,
            vec![
                "fluidos_contracts",
                "fluidos_controller_reconcile_duration_seconds",
                "fluidos_controller_reconcile_failures",
                "fluidos_controller_reconciles",
                "fluidos_discovery_known_peers",
                "fluidos_discovery_queries",
                "fluidos_flavors_published",
                "fluidos_ledger_conflicts",
                "fluidos_ledger_holds",
                "fluidos_ledger_sales",
                "fluidos_node_component_ready",
                "fluidos_rear_request_duration_seconds",
                "fluidos_rear_requests",
            ],
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn clones_share_values() {
        let m = Metrics::new();
        let c = m.clone();
        c.rear
            .observe("/api/v2/flavors", "GET", 200, Duration::from_millis(3));
        c.ledger.conflict();
        c.market.set_flavors("K8Slice", 2);
        c.controllers.reconciled("node", Duration::from_millis(5));
        c.controllers.failed("node", "apply_flavor");
        c.components.set_ready("rear-gateway", true);
        let text = m.encode();
        assert!(text.contains(
            r#"fluidos_rear_requests_total{route="/api/v2/flavors",method="GET",status="200"} 1"#
        ), "{text}");
        assert!(text.contains("fluidos_ledger_conflicts_total 1"), "{text}");
        assert!(
            text.contains(r#"fluidos_flavors_published{type="K8Slice"} 2"#),
            "{text}"
        );
        assert!(text.contains(
            r#"fluidos_controller_reconcile_failures_total{controller="node",reason="apply_flavor"} 1"#
        ), "{text}");
        assert!(text.contains(
            r#"fluidos_controller_reconcile_duration_seconds_bucket{le="0.008",controller="node"} 1"#
        ), "{text}");
        assert!(
            text.contains(r#"fluidos_node_component_ready{component="rear-gateway"} 1"#),
            "{text}"
        );
    }
}

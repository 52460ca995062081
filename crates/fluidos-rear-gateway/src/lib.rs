//! The REAR gateway: the provider side of the FLUIDOS REAR protocol.
//!
//! - `GET /api/v2/flavors[/k8slice|/service]` answers from a watch cache of
//!   the namespace's Flavors, showing for each K8Slice what remains for sale.
//! - `POST /api/v2/reservations` holds capacity atomically on the flavor's
//!   ledger (`status.ledger`, compare-and-swap on `resourceVersion`) and
//!   persists a Transaction, so reservations survive restarts and replicas.
//! - `POST /api/v2/transactions/{id}/purchase` turns the hold into a sale and
//!   creates the Contract and Allocation, idempotently.
//! - `GET /api/v2/contracts/{contractID}/service?buyerID=` gives the buyer of
//!   a Service contract its endpoints and credentials once the service is up.
//!
//! Every stored field is bounded (`limits`), each buyer's live holds are
//! capped in number and age, each peer's request rate is limited, and
//! connections are bounded in number, head, body and handling time (see
//! `GatewayConfig` and `docs/rear-quirks.md`, "Limits").
//!
//! The JSON is the Go node's, key for key (see `docs/rear-quirks.md`).

mod body_permits;
mod book;
pub mod buyer;
mod catalog;
mod contract_end;
pub mod decode;
mod error;
pub mod go_peering;
mod http;
pub mod limits;
mod openapi;
mod peering_secret;
mod purchase;
pub mod query;
mod rate_limit;
mod recent;
mod reserve;
pub mod sale_policy;
mod server;
mod service_access;
mod sweeper;
mod time;
mod wire_json;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::{Allocation, Contract, Flavor, NodeIdentity, Transaction};
use fluidos_controller::Metrics;
use kube::Api;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use buyer::{Caller, PlainHttpSales};
pub use error::{ApiError, Error, ErrorBody};
pub use go_peering::GoPeeringGrant;
pub use http::ApiDoc;
pub use purchase::{allocation_name, contract_name};
pub use rate_limit::RateLimit;
pub use sale_policy::K8SliceBuyers;

use crate::book::Book;
use crate::catalog::Catalog;
use fluidos_peer_access::credentials::{Credentials, CredentialsConfig};

/// Labels and annotations the gateway puts on what it creates.
pub mod labels {
    /// Which side of REAR created the object; ours say `provider`.
    pub const SIDE: &str = "fluidos.eu/rear-side";
    /// Value of [`SIDE`] on provider-side objects.
    pub const PROVIDER: &str = "provider";
    /// The transaction a Contract or Allocation comes from.
    pub const TRANSACTION: &str = "fluidos.eu/transaction-id";
    /// Contract annotation: the sold flavor's creation time (the wire `timestamp`).
    pub const FLAVOR_TIMESTAMP: &str = "fluidos.eu/flavor-timestamp";
    /// Contract (and peer ServiceAccount) annotation: the buyer's node ID.
    pub const BUYER: &str = fluidos_peer_access::grant::BUYER_ANNOTATION;
    /// Transaction and Contract annotation: the fingerprint of the key the
    /// buyer reserved with over TLS (`sha256:<hex>`); absent on a sale made
    /// over plain HTTP. Only that key may buy, renew or read the sale.
    pub const BUYER_KEY: &str = fluidos_api::BUYER_KEY_ANNOTATION;
    /// Transaction and Contract annotation: the address a plain-HTTP buyer
    /// reserved from. Only a plain-HTTP caller from there may buy, renew or
    /// read the sale (one without it was made by an earlier version).
    pub const BUYER_ADDRESS: &str = "fluidos.eu/buyer-address";
    /// Annotation on a service's credentials Secret: the `host:port`
    /// addresses reachable from outside this cluster, comma-joined (written
    /// by the service allocation controller, served to the buyer).
    pub const EXTERNAL_ENDPOINTS: &str = "fluidos.eu/external-endpoints";
    /// Provider-side Contract annotation: the Secret (in the Contract's
    /// namespace) holding the buyer's peering kubeconfig, which the
    /// Contract's spec no longer carries (see `peering_secret`); the
    /// consumer's Contracts carry it too.
    pub const CREDENTIALS_SECRET: &str = fluidos_api::peering_credentials::ANNOTATION;

    /// Selects the provider-side objects of this gateway.
    pub(crate) fn provider() -> kube::api::ListParams {
        kube::api::ListParams::default().labels(&format!("{SIDE}={PROVIDER}"))
    }

    /// Selects the provider-side objects made for the sale of `tx`.
    pub(crate) fn sale(tx: &str) -> kube::api::ListParams {
        kube::api::ListParams::default().labels(&format!("{TRANSACTION}={tx},{SIDE}={PROVIDER}"))
    }
}

/// Upstream's transaction lifetime (1 h).
pub const DEFAULT_TRANSACTION_TTL: Duration = Duration::from_secs(3600);
/// Upstream's contract lifetime (365 days).
pub const DEFAULT_CONTRACT_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default time a revocation stays pending before the account is deleted.
pub const DEFAULT_REVOKE_GRACE: Duration = Duration::from_secs(10);
/// Shortest token lifetime the TokenRequest API grants.
const MIN_TOKEN_TTL: Duration = Duration::from_secs(600);
/// Default request body limit (1 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;
/// Reporting controller of the gateway's Events.
const REPORTER: &str = "fluidos-rear-gateway";
/// Default interval of the expiry sweeper.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Default cap on one buyer's live holds, over all flavors.
pub const DEFAULT_MAX_HOLDS_PER_BUYER: usize = 32;
/// Default of [`GatewayConfig::max_holds_per_address`]: four buyers' worth.
pub const DEFAULT_MAX_HOLDS_PER_ADDRESS: usize = 128;
/// Default longest life of a hold, however often it is renewed (2 h: two
/// upstream transaction lifetimes).
pub const DEFAULT_MAX_HOLD_AGE: Duration = Duration::from_secs(2 * 3600);
/// Default time a client has to send a whole request head; also how long a
/// keep-alive connection may sit idle. Longer than the 90 s for which
/// reqwest and Go's net/http keep idle connections: a server closing one
/// first races with the client reusing it (a request lost on a closed
/// connection, which a Go client does not replay for a POST).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(100);
/// Default time a client has to send a whole request body.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a write of a response may stall (the client not reading)
/// before the connection is closed: far more than a slow network needs to
/// take a few kilobytes, far less than a connection slot is worth.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a request may take once read (API-server calls included).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of [`GatewayConfig::max_connections_per_peer`]: far above what a
/// consumer opens (a few pooled connections), far below
/// [`DEFAULT_MAX_CONNECTIONS`], so one address cannot hold every slot.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 64;

/// Everything the gateway needs to know besides a Kubernetes client.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Address to listen on (upstream: `:3004`).
    pub bind: SocketAddr,
    /// Namespace of Flavors, Transactions, Contracts, Allocations.
    pub namespace: String,
    /// This node's identity (seller when a flavor has no owner).
    pub identity: NodeIdentity,
    /// This cluster's Liqo ID; purchases answer 503 until it is known.
    pub liqo_cluster_id: Option<String>,
    /// How long a reservation holds capacity.
    pub transaction_ttl: Duration,
    /// Lifetime of a sold Contract (and of the peering token).
    pub contract_ttl: Duration,
    /// API server URL written into the peering kubeconfig.
    pub api_server_url: String,
    /// PEM of the API server CA for the peering kubeconfig, if known.
    pub api_server_ca_pem: Option<String>,
    /// A namespace where peers also get the peer Role, for consumers that
    /// act outside their Liqo tenant namespace (default: none, so a peering
    /// kubeconfig grants nothing in the node's own namespace).
    pub peering_namespace: Option<String>,
    /// Largest accepted request body; larger ones get 413.
    pub body_limit: usize,
    /// How long a revocation stays pending (marked) before the buyer's
    /// ServiceAccount is deleted; longer than a purchase takes and than the
    /// replicas' watch latency.
    pub revoke_grace: Duration,
    /// How often expired holds and Transactions are cleaned up, and ended
    /// Contracts settled (capacity released, credentials revoked).
    pub sweep_interval: Duration,
    /// Where REAR requests, ledger conflicts and market gauges are recorded
    /// (the node's one registry).
    pub metrics: Metrics,
    /// Most live holds one buyer may have over all flavors; one more
    /// RESERVE of a new flavor is a 409 naming `buyerID.ID` (a capacity hog
    /// cannot hold every flavor). Counted on this replica's view of the
    /// ledgers, so replicas racing may let a buyer exceed it briefly.
    pub max_holds_per_buyer: usize,
    /// Most live holds reserved from one peer address (an IPv4 address, an
    /// IPv6 /64) over all flavors, whatever keys and buyer IDs: keys cost
    /// nothing. One more RESERVE is a 429. Behind a load balancer that
    /// rewrites source addresses, all buyers share one address; `0`: off.
    pub max_holds_per_address: usize,
    /// Longest life of a hold: a repeated RESERVE extends it by
    /// `transaction_ttl`, but never past this age (from the Transaction's
    /// creation); then it expires and the capacity is contested again.
    pub max_hold_age: Duration,
    /// Per-peer (per remote IP) request rate; `None` for no limit. Over it,
    /// 429 with `Retry-After`.
    pub rate_limit: Option<RateLimit>,
    /// Time a client has to send a request head (the connection is closed
    /// after it); also the longest a keep-alive connection may sit idle.
    pub header_read_timeout: Duration,
    /// Time a client has to send a whole body (408, connection closed).
    pub body_read_timeout: Duration,
    /// Time a write to the client may make no progress (a client that
    /// stops reading its answers) before the connection is closed.
    pub write_timeout: Duration,
    /// Time a request may take once read (503 with `Retry-After` after it;
    /// every sale step is idempotent, so the buyer retries).
    pub request_timeout: Duration,
    /// Connections served at once; more wait for one to close.
    pub max_connections: usize,
    /// Connections one peer (IPv4 address, IPv6 /64) may hold open at once;
    /// one more is closed at once, without a response.
    pub max_connections_per_peer: usize,
    /// TLS on the REAR port (connections that open with a handshake), with
    /// client certificates naming buyers; `None`: plain HTTP only.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Which plain-HTTP peers may reserve and buy (unmodified Go nodes
    /// speak only `http://`); listing flavors is open to all.
    pub plain_http_sales: PlainHttpSales,
    /// Why this gateway sells no K8Slice, if it sells none: the API server
    /// address its peering kubeconfigs would name is one peers cannot reach
    /// (a RESERVE of a K8Slice is a 503 saying so).
    pub k8slice_refusal: Option<String>,
    /// Who may buy K8Slices ([`sale_policy`]): open to every buyer the
    /// transport admits by default.
    pub k8slice_buyers: K8SliceBuyers,
    /// Which plain-HTTP buyers of K8Slices (unmodified Go consumers) get the
    /// rights the Go node's peering needs on this cluster, confined to their
    /// tenant namespace ([`go_peering`]); off by default.
    pub go_peering_grant: GoPeeringGrant,
    /// How sold Services are delivered: over REAR (default), or by Liqo to
    /// buyers that send a kubeconfig of their cluster at PURCHASE
    /// ([`fluidos_api::service_delivery`]).
    pub service_delivery: fluidos_api::service_delivery::ServiceDelivery,
}

impl GatewayConfig {
    /// A configuration with upstream's defaults (port 3004, 1 h, 365 d, 1 MiB)
    /// and this gateway's limits (`DEFAULT_*`).
    pub fn new(
        namespace: impl Into<String>,
        identity: NodeIdentity,
        api_server_url: impl Into<String>,
    ) -> Self {
        GatewayConfig {
            bind: SocketAddr::from(([0, 0, 0, 0], 3004)),
            namespace: namespace.into(),
            identity,
            liqo_cluster_id: None,
            transaction_ttl: DEFAULT_TRANSACTION_TTL,
            contract_ttl: DEFAULT_CONTRACT_TTL,
            api_server_url: api_server_url.into(),
            api_server_ca_pem: None,
            peering_namespace: None,
            body_limit: DEFAULT_BODY_LIMIT,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            revoke_grace: DEFAULT_REVOKE_GRACE,
            metrics: Metrics::default(),
            max_holds_per_buyer: DEFAULT_MAX_HOLDS_PER_BUYER,
            max_holds_per_address: DEFAULT_MAX_HOLDS_PER_ADDRESS,
            max_hold_age: DEFAULT_MAX_HOLD_AGE,
            rate_limit: Some(RateLimit::DEFAULT),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            tls: None,
            plain_http_sales: PlainHttpSales::Off,
            k8slice_buyers: K8SliceBuyers::Open,
            k8slice_refusal: None,
            go_peering_grant: GoPeeringGrant::OFF,
            service_delivery: fluidos_api::service_delivery::ServiceDelivery::Rear,
        }
    }

    /// Serves TLS with this node key next to plain HTTP: a client that
    /// presents a certificate buys as its key's fingerprint.
    pub fn with_node_key(
        mut self,
        key: &fluidos_rear_identity::NodeKey,
    ) -> Result<Self, fluidos_rear_identity::tls::TlsConfigError> {
        self.tls = Some(Arc::new(fluidos_rear_identity::tls::server_config(
            key, false,
        )?));
        Ok(self)
    }

    /// What the peer credentials this gateway issues are made of: also
    /// what the consumer issues with for the sellers of Services it buys
    /// delivered by Liqo (the same accounts, which this gateway revokes).
    pub fn credentials(&self) -> CredentialsConfig {
        CredentialsConfig {
            namespace: self.namespace.clone(),
            role_namespace: self.peering_namespace.clone(),
            api_server_url: self.api_server_url.clone(),
            ca_pem: self.api_server_ca_pem.clone(),
            // The TokenRequest API refuses lifetimes under 10 minutes;
            // a shorter contract is ended by revocation instead.
            token_ttl: self.contract_ttl.max(MIN_TOKEN_TTL),
            go_peering: self.go_peering_grant.is_on(),
            remove_stale_grants: true,
        }
    }

    /// Takes the API server URL and CA from a kube client configuration.
    pub fn with_kube_config(mut self, config: &kube::Config) -> Self {
        self.api_server_url = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        if let Some(certs) = &config.root_cert {
            let pem: String = certs.iter().map(|der| der_to_pem(der)).collect();
            if !pem.is_empty() {
                self.api_server_ca_pem = Some(pem);
            }
        }
        self
    }
}

fn der_to_pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Shared state of the handlers.
pub(crate) struct State {
    cfg: GatewayConfig,
    catalog: Arc<Catalog>,
    book: Book,
    transactions: Api<Transaction>,
    contracts: Api<Contract>,
    allocations: Api<Allocation>,
    /// The sold Contracts' credentials Secrets (in the node's namespace).
    secrets: Api<k8s_openapi::api::core::v1::Secret>,
    credentials: Credentials,
    client: kube::Client,
    /// Publishes the Events of contract endings.
    recorder: kube::runtime::events::Recorder,
    /// Sweeps done so far (some checks run every few sweeps only).
    sweeps: std::sync::atomic::AtomicU64,
    recent: recent::Recent,
    ready: watch::Receiver<bool>,
    /// Flavor types published so far (their gauge drops to 0, not away).
    published_types: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Per-peer request rate limit, if configured.
    limiter: Option<rate_limit::PeerLimiter>,
    /// New holds being taken right now, per buyer (for the per-buyer cap).
    reserving: reserve::InFlight,
    /// Request bodies being buffered at once (each up to `body_limit`), in
    /// all and per peer address.
    body_permits: body_permits::BodyPermits,
    /// Who may buy K8Slices.
    sale_policy: sale_policy::SalePolicy,
}

/// Forwards the catalog's readiness to `ready`, the first time only after a
/// dry-run create of each kind a sale creates (Transaction, Contract,
/// Allocation): a fresh API server readies a kind's write path on its first
/// write, which the first sale of a fresh provider paid for. (Not Flavors:
/// the gateway only writes their status, and a dry run is authorized like a
/// real create, which least-privilege RBAC does not grant it.)
async fn ready_after_first_writes(
    client: kube::Client,
    ns: String,
    mut catalog_ready: watch::Receiver<bool>,
    ready: watch::Sender<bool>,
) {
    use fluidos_api::probe;
    use fluidos_controller::warm_up::dry_run_create;
    if catalog_ready.wait_for(|r| *r).await.is_err() {
        return;
    }
    tokio::join!(
        dry_run_create(&client, probe::transaction(&ns)),
        dry_run_create(&client, probe::contract(&ns)),
        dry_run_create(&client, probe::allocation(&ns)),
    );
    loop {
        ready.send_replace(*catalog_ready.borrow_and_update());
        if catalog_ready.changed().await.is_err() {
            break;
        }
    }
}

/// A started gateway: watch cache and sweeper running, routes ready to serve.
///
/// Dropping it stops its background tasks.
pub struct Gateway {
    state: Arc<State>,
    tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Starts the Flavor watch and the expiry sweeper (needs a Tokio runtime).
    pub fn start(client: kube::Client, cfg: GatewayConfig) -> Gateway {
        let (catalog_ready_tx, catalog_ready) = watch::channel(false);
        let (ready_tx, ready) = watch::channel(false);
        let (catalog, driver) = Catalog::start(client.clone(), &cfg.namespace, catalog_ready_tx);
        let warm_up = tokio::spawn(ready_after_first_writes(
            client.clone(),
            cfg.namespace.clone(),
            catalog_ready,
            ready_tx,
        ));
        let ns = cfg.namespace.as_str();
        let client_for_events = client.clone();
        let (credentials, accounts_driver) = Credentials::new(client.clone(), cfg.credentials());
        let (sale_policy, known_clusters) =
            sale_policy::SalePolicy::new(&client, ns, cfg.k8slice_buyers.clone());
        let state = Arc::new(State {
            book: Book::new(
                Api::<Flavor>::namespaced(client.clone(), ns),
                catalog.clone(),
                cfg.metrics.ledger.clone(),
            ),
            transactions: Api::namespaced(client.clone(), ns),
            contracts: Api::namespaced(client.clone(), ns),
            allocations: Api::namespaced(client.clone(), ns),
            secrets: Api::namespaced(client.clone(), ns),
            client,
            sweeps: Default::default(),
            recorder: fluidos_controller::events::recorder(client_for_events, REPORTER),
            catalog,
            credentials,
            recent: recent::Recent::default(),
            published_types: Default::default(),
            ready,
            limiter: cfg.rate_limit.map(rate_limit::PeerLimiter::new),
            reserving: reserve::InFlight::default(),
            body_permits: body_permits::BodyPermits::new(
                body_permits::MAX_BODIES_READ_AT_ONCE,
                body_permits::MAX_BODIES_PER_PEER,
            ),
            sale_policy,
            cfg,
        });
        let sweep = tokio::spawn(sweeper::run(state.clone(), state.cfg.sweep_interval));
        let go_peering = {
            let state = state.clone();
            tokio::spawn(async move { state.credentials.run_go_peering().await })
        };
        let mut tasks = vec![
            tokio::spawn(driver),
            go_peering,
            tokio::spawn(accounts_driver),
            sweep,
            warm_up,
        ];
        tasks.extend(known_clusters.map(tokio::spawn));
        Gateway { tasks, state }
    }

    /// The REAR routes, for serving or for in-process tests.
    pub fn router(&self) -> axum::Router {
        http::router(self.state.clone())
    }

    /// Turns `true` once the Flavor watch cache has synced and the first-write
    /// warm-up (`ready_after_first_writes`) is done.
    pub fn readiness(&self) -> watch::Receiver<bool> {
        self.state.ready.clone()
    }

    /// Waits until [`Gateway::readiness`] turns `true`, at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), Error> {
        let mut rx = self.readiness();
        match tokio::time::timeout(timeout, rx.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::WatchNeverSynced("the watch task stopped".into())),
            Err(_) => Err(Error::WatchNeverSynced(format!(
                "not synced after {timeout:?}"
            ))),
        }
    }

    /// Runs one expiry sweep now (the background sweeper also does, periodically).
    pub async fn sweep_now(&self) {
        // Failures are logged; the caller sees their effects.
        let _ = self.state.sweep().await;
    }

    /// Serves the routes on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let addr = listener.local_addr().map_err(|source| Error::Io {
            context: "reading the listener's address".into(),
            source,
        })?;
        let cfg = &self.state.cfg;
        tracing::info!(%addr, namespace = %cfg.namespace, tls = cfg.tls.is_some(),
            plain_http_sales = %cfg.plain_http_sales,
            k8slice_buyers = %self.state.sale_policy.setting(), "REAR gateway serving");
        let limits = server::ConnectionLimits {
            header_read_timeout: cfg.header_read_timeout,
            write_timeout: cfg.write_timeout,
            max_connections: cfg.max_connections,
            max_connections_per_peer: cfg.max_connections_per_peer,
        };
        let tls = cfg.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        server::serve(listener, self.router(), limits, tls, shutdown).await;
        Ok(())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts a gateway and serves it on an already bound listener (port 0 in tests).
pub async fn serve(
    listener: TcpListener,
    client: kube::Client,
    cfg: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    Gateway::start(client, cfg).serve(listener, shutdown).await
}

/// Binds `cfg.bind` and serves until `shutdown` completes.
pub async fn run(
    client: kube::Client,
    cfg: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = TcpListener::bind(cfg.bind)
        .await
        .map_err(|source| Error::Io {
            context: format!("binding {}", cfg.bind),
            source,
        })?;
    serve(listener, client, cfg, shutdown).await
}

/// Like [`run`], reporting readiness ([`Gateway::readiness`]) on `ready`.
pub async fn run_with_readiness(
    client: kube::Client,
    cfg: GatewayConfig,
    ready: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = TcpListener::bind(cfg.bind)
        .await
        .map_err(|source| Error::Io {
            context: format!("binding {}", cfg.bind),
            source,
        })?;
    let gateway = Gateway::start(client, cfg);
    let mut rx = gateway.readiness();
    let forward = tokio::spawn(async move {
        loop {
            ready.send_replace(*rx.borrow_and_update());
            if rx.changed().await.is_err() {
                break;
            }
        }
    });
    let result = gateway.serve(listener, shutdown).await;
    forward.abort();
    result
}

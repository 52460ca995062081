//! Consumer side of a FLUIDOS node: the Solver, Discovery and Reservation
//! controllers that turn a user's intent into a purchased Contract.
//!
//! All state lives in Kubernetes objects (phases, transaction IDs, contract
//! references), so a restart at any point resumes where it stopped: a
//! reservation whose transaction ID is recorded is never reserved again, and a
//! purchase is idempotent on the provider for the same transaction.

pub mod discovery;
pub mod purchase;
pub mod ranking;
pub mod reservation;
pub mod solver;
mod status;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::NodeIdentity;
use fluidos_rear_client::{ClientConfig, RearClient, RearError};
use futures::StreamExt;

/// Field manager for server-side apply.
pub const MANAGER: &str = "fluidos-consumer";

/// What the consumer controllers need to know.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Namespace of Solvers, Discoveries, candidates, reservations.
    pub namespace: String,
    /// This node, with its Liqo cluster ID in `additionalInformation`.
    pub identity: NodeIdentity,
    /// Providers always queried, besides KnownClusters (`host:port`).
    pub static_peers: Vec<String>,
    /// Per-provider timeout of one discovery query.
    pub peer_timeout: Duration,
    /// How long a Solver may stay in one running phase (upstream: 2 min).
    pub phase_timeout: Duration,
    /// How long the peering phase may take (upstream: 5 min).
    pub peering_timeout: Duration,
}

impl ConsumerConfig {
    /// Upstream's timers for this identity and namespace.
    pub fn new(namespace: impl Into<String>, identity: NodeIdentity) -> Self {
        ConsumerConfig {
            namespace: namespace.into(),
            identity,
            static_peers: Vec::new(),
            peer_timeout: Duration::from_secs(3),
            phase_timeout: Duration::from_secs(120),
            peering_timeout: Duration::from_secs(300),
        }
    }
}

/// Shared by the three reconcilers.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Configuration.
    pub cfg: ConsumerConfig,
    /// REAR client.
    pub rear: RearClient,
}

/// What can go wrong in a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Talking to the API server failed; retried with backoff.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Talking to a provider failed; retried with backoff.
    #[error(transparent)]
    Rear(#[from] RearError),
    /// An object is missing a name or namespace.
    #[error("object has no {0}")]
    Incomplete(&'static str),
    /// Could not build the REAR client.
    #[error("setup: {0}")]
    Setup(String),
}

impl Context {
    /// A context with a REAR client using `rear_cfg`.
    pub fn new(
        client: kube::Client,
        cfg: ConsumerConfig,
        rear_cfg: ClientConfig,
    ) -> Result<Arc<Self>, Error> {
        let rear = RearClient::new(rear_cfg).map_err(|e| Error::Setup(e.to_string()))?;
        Ok(Arc::new(Context { client, cfg, rear }))
    }
}

/// Retry transient failures with a short backoff: the API server or a
/// provider may be briefly unavailable.
pub(crate) fn backoff(err: &Error) -> kube::runtime::controller::Action {
    // A write conflict only means our read was stale: retry at once.
    if let Error::Kube(kube::Error::Api(e)) = err
        && e.code == 409
    {
        tracing::debug!(error = %err, "write conflict; retrying with fresh data");
        return kube::runtime::controller::Action::requeue(Duration::from_millis(20));
    }
    tracing::warn!(error = %err, "reconcile failed; retrying");
    kube::runtime::controller::Action::requeue(Duration::from_secs(2))
}

/// Runs the Solver, Discovery and Reservation controllers until `shutdown`.
///
/// On shutdown the controllers are dropped mid-flight: every reconcile is
/// idempotent and all state is in the API server, so nothing is lost.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let never = || futures::future::pending::<()>();
    let controllers = async {
        tokio::join!(
            solver::run(ctx.clone(), never()),
            discovery::run(ctx.clone(), never()),
            reservation::run(ctx, never()),
        )
    };
    tokio::select! {
        _ = controllers => {}
        _ = shutdown => {}
    }
}

/// Drains a controller stream, logging failed reconciles at debug level
/// (the reconcilers already record failures on the objects).
pub(crate) async fn drain<S, T, E>(stream: S)
where
    S: futures::Stream<Item = Result<T, E>>,
    E: std::fmt::Debug,
{
    stream
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = ?e, "controller event");
            }
            futures::future::ready(())
        })
        .await;
}

//! Everything that must succeed before any component starts.
//!
//! Each failure here is a deployment mistake an operator fixes by hand, so
//! the binary reports it once and exits instead of retrying.

use std::net::SocketAddr;

use fluidos_controller::Metrics;
use kube::Client;
use tokio::net::TcpListener;

use crate::cli::{Args, Component};
use crate::context::Context;
use crate::health::Readiness;
use crate::identity::{self, IdentityError};
use crate::leader_election::{self, ElectionConfig, Elector, Leadership};
use crate::preflight::{self, PreflightError};

/// A startup step that failed.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// No usable kubeconfig or in-cluster configuration.
    #[error(
        "cannot configure a Kubernetes client: {0}. Set KUBECONFIG to a kubeconfig file \
         (or provide ~/.kube/config), or run the node in a Pod with a service account"
    )]
    Client(#[source] kube::Error),
    /// The kubeconfig named by `--kubeconfig` is unusable.
    #[error("cannot use the kubeconfig {} (--kubeconfig): {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The FLUIDOS CRDs are not usable.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The node identity is missing or incomplete.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// `--peer-pod-security privileged` without its opt-in.
    #[error("{0}")]
    PeerPodSecurity(String),
    /// The leader-election flags do not fit together.
    #[error("leader election: {0}")]
    LeaderElectionFlags(#[from] leader_election::ConfigError),
    /// The node's REAR key could not be read or created.
    #[error("the node's REAR identity: {0}")]
    NodeKey(#[from] fluidos_rear_identity::secret::SecretError),
    /// The published fingerprint of the node's REAR key is not usable.
    #[error("the node's REAR identity: {0}")]
    Fingerprint(#[from] fluidos_rear_identity::published::PublishedError),
    /// The leader-election Lease is not usable.
    #[error(transparent)]
    LeaderElection(#[from] leader_election::ElectionError),
    /// A listening socket could not be opened.
    #[error("cannot listen for {what} on {addr} (change {flag}): {source}")]
    Bind {
        /// What the socket serves.
        what: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The flag that sets it.
        flag: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The outcome of a successful startup: shared context and bound sockets.
#[derive(Debug)]
pub struct Started {
    /// Context for the components.
    pub context: Context,
    /// Listener for `/healthz` and `/readyz`.
    pub probes: TcpListener,
    /// Listener for `/metrics`, unless disabled.
    pub metrics: Option<TcpListener>,
    /// The leader elector, with `--leader-elect`.
    pub elector: Option<Elector>,
}

/// Connects, checks CRDs, loads the identity and binds the probe sockets.
pub async fn start(args: Args) -> Result<Started, StartupError> {
    // Flags first: a mistake there is reported before anything else.
    fluidos_peer_access::PodSecurityLevel::checked(
        args.peer_pod_security,
        args.peer_pod_security_allow_privileged,
    )
    .map_err(StartupError::PeerPodSecurity)?;
    let lease_timeout =
        ElectionConfig::from_args(&args, String::new())?.map(|election| election.request_timeout());
    let mut config = client_config(&args).await?;
    // kube's default is no read timeout: a request the API server never
    // answers would hold its reconcile (and so its object) forever. Longer
    // than the server's own 290 s watch timeout, so quiet watches are not cut.
    config.read_timeout = Some(API_READ_TIMEOUT);
    // The Lease's own client: a renewal must fail (and the node stop leading)
    // before the Lease can expire, never hang for minutes.
    let lease_client = match lease_timeout {
        Some(timeout) => {
            let mut lease_config = config.clone();
            lease_config.connect_timeout = Some(timeout);
            lease_config.read_timeout = Some(timeout);
            lease_config.write_timeout = Some(timeout);
            Some(Client::try_from(lease_config).map_err(StartupError::Client)?)
        }
        None => None,
    };
    let client = Client::try_from(config).map_err(StartupError::Client)?;
    let lease_client = lease_client.unwrap_or_else(|| client.clone());
    start_with_clients(client, lease_client, args).await
}

/// The API-server client configuration: `--kubeconfig`, else KUBECONFIG,
/// `~/.kube/config` or the Pod's service account.
pub async fn client_config(args: &Args) -> Result<kube::Config, StartupError> {
    match &args.go.kubeconfig {
        None => kube::Config::infer()
            .await
            .map_err(|e| StartupError::Client(kube::Error::InferConfig(e))),
        Some(path) => config_from(path).await,
    }
}

/// How long a network manager started alone waits for the REAR key another
/// component creates.
const KEY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Longest wait for any API-server response.
pub const API_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(295);

/// The client configuration of the kubeconfig file at `path` (its current context).
async fn config_from(path: &std::path::Path) -> Result<kube::Config, StartupError> {
    let kubeconfig_error = |e| StartupError::Kubeconfig {
        path: path.to_owned(),
        source: kube::Error::InferKubeconfig(e),
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(kubeconfig_error)
}

/// [`start`] with a ready-made client, for tests (Lease requests use it too).
pub async fn start_with_client(client: Client, args: Args) -> Result<Started, StartupError> {
    start_with_clients(client.clone(), client, args).await
}

/// [`start`] with ready-made clients: `lease_client` for leader election.
async fn start_with_clients(
    client: Client,
    lease_client: Client,
    args: Args,
) -> Result<Started, StartupError> {
    // Flags first: a mistake there is reported before any API call.
    let election = ElectionConfig::from_args(&args, leader_election::holder_identity_from_env())?;
    preflight::check(&client).await?;
    let mut identity = identity::load(&client, &args.namespace).await?;
    let liqo_id = identity::liqo_cluster_id(
        &client,
        args.liqo_cluster_id.as_deref(),
        args.peering,
        &identity,
    )
    .await;
    // Unknown yet (peering, Liqo not there): the node waits for it before
    // starting its components.
    identity.additional_information =
        liqo_id.map(|id| fluidos_api::NodeIdentityAdditionalInfo { liqo_id: Some(id) });

    // The REAR components use the key (and create it on first start), and
    // publish its fingerprint; the network manager only announces the
    // fingerprint, so it reads that once one of them has published it, and
    // may read no Secret of the key.
    let selected = args.selected_components();
    let uses_key = selected
        .iter()
        .any(|c| matches!(c, Component::RearGateway | Component::RearManager));
    let secret = fluidos_rear_identity::secret::DEFAULT_SECRET_NAME;
    let (node_key, rear_fingerprint) = if uses_key {
        let key = fluidos_rear_identity::secret::load_or_create(
            &client,
            &args.namespace,
            secret,
            &identity.node_id,
        )
        .await?;
        fluidos_rear_identity::published::publish(&client, &args.namespace, key.fingerprint())
            .await?;
        let fingerprint = key.fingerprint();
        (Some(std::sync::Arc::new(key)), Some(fingerprint))
    } else if selected.contains(&Component::NetworkManager) {
        let fingerprint =
            fluidos_rear_identity::published::wait_for(&client, &args.namespace, KEY_WAIT).await?;
        if fingerprint.is_none() {
            tracing::warn!(
                configmap = fluidos_rear_identity::published::CONFIGMAP_NAME,
                "no REAR fingerprint after {KEY_WAIT:?} (the rear-gateway or rear-manager publishes it): \
                 advertisements carry no fingerprint, so peers will call this node over plain HTTP"
            );
        }
        (None, fingerprint)
    } else {
        (None, None)
    };
    if let Some(fingerprint) = &rear_fingerprint {
        tracing::info!(%fingerprint, "REAR identity");
    }

    let probes = bind(
        "health probes",
        args.health_probe_bind_address,
        "--health-probe-bind-address",
    )
    .await?;
    let metrics = match args.metrics_bind_address {
        Some(addr) => Some(bind("metrics", addr, "--metrics-bind-address").await?),
        None => None,
    };

    let elector = match election {
        Some(election) => Some(Elector::connect(lease_client, election).await?),
        None => None,
    };

    let readiness = Readiness::new(args.selected_components());
    let network_metrics = fluidos_network_manager::NetworkMetrics::default();
    let leader = prometheus_client::metrics::gauge::Gauge::default();
    let registry = Metrics::with_extra(|r| {
        network_metrics.register(r);
        r.register(
            "fluidos_leader",
            "1 while this replica runs the controllers: it holds the leader-election Lease, \
             or runs without --leader-elect",
            leader.clone(),
        );
    });
    Ok(Started {
        context: Context {
            client,
            identity,
            args,
            readiness,
            metrics: registry,
            network_metrics,
            leadership: Leadership::always(),
            leader,
            node_key,
            rear_fingerprint,
        },
        probes,
        metrics,
        elector,
    })
}

async fn bind(
    what: &'static str,
    addr: SocketAddr,
    flag: &'static str,
) -> Result<TcpListener, StartupError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartupError::Bind {
            what,
            addr,
            flag,
            source,
        })
}

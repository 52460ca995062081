//! Leader election (`--leader-elect`): of several replicas selecting the
//! same components, only the holder of one `coordination.k8s.io/v1` Lease
//! runs the controllers; every replica serves REAR.
//!
//! The Lease is driven by `kube-lease-manager`. What this module adds is the
//! node's policy (docs/leader-election.md):
//! - the Lease's name follows the component set, so two Deployments running
//!   different components never wait on each other ([`lease_name`]);
//! - a holder that fails to renew gives the leadership up at once: the node
//!   exits non-zero (as controller-runtime does) rather than keep running
//!   controllers that another replica may start any moment;
//! - every Lease request has a timeout shorter than the margin between the
//!   renewal and the Lease's expiry, so a hung request is noticed before
//!   another replica can take over.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli::{Args, Component};

/// Lease name when every component is selected.
pub const DEFAULT_LEASE_NAME: &str = "fluidos-node";

/// Settings of the election, checked ([`ElectionConfig::from_args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (seconds).
    pub lease_duration: u64,
    /// When, after a renewal, the holder renews again; a failed renewal ends
    /// the leadership (seconds, less than `lease_duration`).
    pub renew_deadline: u64,
    /// Timeout of each Lease request, and the wait before a standby retries
    /// after an error (seconds, less than `lease_duration - renew_deadline`).
    pub retry_period: u64,
}

/// Leader-election flags that cannot work together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration is zero.
    #[error("{flag} must be at least 1 second")]
    Zero {
        /// The flag.
        flag: &'static str,
    },
    /// The renewal would come after the Lease expired.
    #[error(
        "--leader-election-renew-deadline-seconds ({renew}) must be less than \
         --leader-election-lease-duration-seconds ({lease}): the leader renews that long after \
         its last renewal, and the difference is the margin for clock skew"
    )]
    RenewAfterExpiry {
        /// Renew deadline.
        renew: u64,
        /// Lease duration.
        lease: u64,
    },
    /// A hung renewal could outlive the Lease.
    #[error(
        "--leader-election-retry-period-seconds ({retry}) must be less than the lease duration \
         minus the renew deadline ({margin}): it is the timeout of a renewal, which must fail \
         before the Lease expires"
    )]
    RetryTooLong {
        /// Retry period.
        retry: u64,
        /// Lease duration minus renew deadline.
        margin: u64,
    },
}

impl ElectionConfig {
    /// The election settings of `args`, or `None` without `--leader-elect`;
    /// `identity` is this replica's holder identity ([`holder_identity`]).
    pub fn from_args(args: &Args, identity: String) -> Result<Option<Self>, ConfigError> {
        if !args.leader_elect {
            return Ok(None);
        }
        let e = &args.leader_election;
        let config = ElectionConfig {
            namespace: e
                .namespace
                .clone()
                .unwrap_or_else(|| args.namespace.clone()),
            lease_name: e
                .lease_name
                .clone()
                .unwrap_or_else(|| lease_name(&args.selected_components())),
            identity,
            lease_duration: e.lease_duration_seconds,
            renew_deadline: e.renew_deadline_seconds,
            retry_period: e.retry_period_seconds,
        };
        config.validate()?;
        Ok(Some(config))
    }

    /// Checks that the durations cannot let two leaders overlap.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (lease, renew, retry) = (self.lease_duration, self.renew_deadline, self.retry_period);
        for (value, flag) in [
            (lease, "--leader-election-lease-duration-seconds"),
            (renew, "--leader-election-renew-deadline-seconds"),
            (retry, "--leader-election-retry-period-seconds"),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { flag });
            }
        }
        if renew >= lease {
            return Err(ConfigError::RenewAfterExpiry { renew, lease });
        }
        let margin = lease - renew;
        if retry >= margin {
            return Err(ConfigError::RetryTooLong { retry, margin });
        }
        Ok(())
    }

    /// The timeout of one Lease request.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.retry_period)
    }
}

/// The default Lease name of a component set: `fluidos-node` for all four,
/// else `fluidos-node-` and the components in start order. Replicas running
/// the same components share it (whatever the order of `--components`);
/// Deployments running different ones (the Go chart's one per component)
/// each elect their own leader.
pub fn lease_name(selected: &[Component]) -> String {
    let selected: Vec<Component> = Component::ALL
        .into_iter()
        .filter(|c| selected.contains(c))
        .collect();
    if selected.len() == Component::ALL.len() {
        return DEFAULT_LEASE_NAME.to_owned();
    }
    let mut name = DEFAULT_LEASE_NAME.to_owned();
    for c in selected {
        name.push('-');
        name.push_str(c.as_str());
    }
    name
}

/// This replica's holder identity: the Pod's name (`POD_NAME`, else
/// `HOSTNAME`, else `fluidos-node`) and a random suffix, so a restarted Pod
/// of the same name (a StatefulSet's) is a new holder, as in controller-runtime.
pub fn holder_identity(pod_name: Option<&str>, hostname: Option<&str>, suffix: u64) -> String {
    let pod = [pod_name, hostname]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or(DEFAULT_LEASE_NAME);
    format!("{pod}_{:08x}", suffix & 0xffff_ffff)
}

/// [`holder_identity`] from the environment and a random suffix.
pub fn holder_identity_from_env() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is keyed from the OS's randomness: enough to tell two
    // processes of the same Pod name apart, with no RNG dependency.
    let suffix = std::hash::RandomState::new().build_hasher().finish();
    let env = |k| std::env::var(k).ok();
    holder_identity(
        env("POD_NAME").as_deref(),
        env("HOSTNAME").as_deref(),
        suffix,
    )
}

/// Which parts of `component` run on the leader only; the REAR gateway's
/// HTTP server (and its expiry sweeper) runs on every replica.
pub fn leader_only(component: Component) -> bool {
    match component {
        Component::LocalResourceManager | Component::RearManager | Component::NetworkManager => {
            true
        }
        // Its service allocation controller waits for the leadership; the
        // HTTP server does not.
        Component::RearGateway => false,
    }
}

/// A step of the election that failed.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The settings do not fit together.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Lease could not be read or created at startup.
    #[error(
        "cannot use the Lease {namespace}/{name} for leader election (needs get, create and \
         patch on coordination.k8s.io leases): {source}"
    )]
    Setup {
        /// Namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Why.
        #[source]
        source: LeaseManagerError,
    },
}

/// A lease manager on the Lease of `config`, created if missing.
async fn lease_manager(
    client: &Client,
    config: &ElectionConfig,
) -> Result<LeaseManager, ElectionError> {
    config.validate()?;
    let params = LeaseParams::new(
        config.identity.clone(),
        config.lease_duration,
        // Validated: 0 < renew < lease, so the grace is in 1..lease
        // (LeaseParams::new panics otherwise).
        config.lease_duration - config.renew_deadline,
    );
    LeaseManager::new(
        client.clone(),
        config.lease_name.clone(),
        config.namespace.clone(),
        params,
        LeaseCreateMode::AutoCreate,
    )
    .await
    .map_err(|source| ElectionError::Setup {
        namespace: config.namespace.clone(),
        name: config.lease_name.clone(),
        source,
    })
}

/// Whether this replica may run the leader-only controllers; cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership(Option<watch::Receiver<bool>>);

impl Leadership {
    /// No election: this process always leads.
    pub fn always() -> Self {
        Leadership(None)
    }

    /// Leading once `elected` says `true`.
    pub fn elected(elected: watch::Receiver<bool>) -> Self {
        Leadership(Some(elected))
    }

    /// Whether an election decides (`--leader-elect`).
    pub fn is_elected(&self) -> bool {
        self.0.is_some()
    }

    /// Waits until this replica leads; `false` if the election ended first.
    pub async fn wait(&mut self) -> bool {
        match &mut self.0 {
            None => true,
            Some(rx) => rx.wait_for(|leading| *leading).await.is_ok(),
        }
    }
}

/// How the election of this replica ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// Stopped on request; the Lease was released if held.
    Stopped,
    /// The leadership was lost: the controllers must stop at once.
    Lost(String),
}

/// A connected elector, not campaigning yet.
pub struct Elector {
    client: Client,
    manager: LeaseManager,
    config: ElectionConfig,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// Reads (or creates) the Lease with `client`, whose requests should
    /// time out after [`ElectionConfig::request_timeout`].
    pub async fn connect(client: Client, config: ElectionConfig) -> Result<Self, ElectionError> {
        let manager = lease_manager(&client, &config).await?;
        Ok(Elector {
            client,
            manager,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// Campaigns until `stop`: stands by until the Lease is free, then
    /// sends `true` on `elected`, sets `gauge` to 1 and renews. Returns
    /// [`Ended::Lost`] as soon as a renewal fails or another replica holds
    /// the Lease; on `stop`, releases it (so a standby takes over at once)
    /// and returns [`Ended::Stopped`].
    pub async fn run(
        mut self,
        elected: watch::Sender<bool>,
        gauge: Gauge,
        stop: CancellationToken,
    ) -> Ended {
        let c = self.config.clone();
        tracing::info!(
            lease = %format!("{}/{}", c.namespace, c.lease_name),
            identity = %c.identity,
            "leader election: standing by until this replica holds the Lease"
        );
        loop {
            let changed = tokio::select! {
                changed = self.manager.changed() => changed,
                () = stop.cancelled() => return self.release().await,
            };
            match changed {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease; retrying");
                    // Deleted (by hand?): the manager only creates it when
                    // built, so build it again.
                    if matches!(e, LeaseManagerError::NonexistentLease(_)) {
                        match lease_manager(&self.client, &c).await {
                            Ok(manager) => self.manager = manager,
                            Err(e) => {
                                tracing::warn!(error = %e, "leader election: recreating the Lease")
                            }
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(c.retry_period)) => {}
                        () = stop.cancelled() => return self.release().await,
                    }
                }
            }
        }
        tracing::info!(
            lease = %format!("{}/{}", c.namespace, c.lease_name),
            identity = %c.identity,
            "leader election: this replica leads; starting the controllers"
        );
        gauge.set(1);
        elected.send_replace(true);
        let reason = loop {
            let changed = tokio::select! {
                changed = self.manager.changed() => changed,
                () = stop.cancelled() => return self.release().await,
            };
            match changed {
                // Renewed: changed() only returns on a change, but be sure.
                Ok(true) => {}
                Ok(false) => break "another replica holds the Lease".to_owned(),
                Err(e) => break format!("renewing the Lease failed: {e}"),
            }
        };
        gauge.set(0);
        elected.send_replace(false);
        Ended::Lost(reason)
    }

    /// Releases the Lease if this replica holds it (a standby's release
    /// leaves another holder's Lease alone).
    async fn release(self) -> Ended {
        let timeout = self.config.request_timeout().saturating_mul(2);
        match tokio::time::timeout(timeout, self.manager.release()).await {
            Ok(Ok(())) => tracing::info!("leader election: Lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election: releasing the Lease"),
            Err(_) => tracing::warn!("leader election: releasing the Lease timed out"),
        }
        Ended::Stopped
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn args(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("fluidos-node").chain(flags.iter().copied()))
            .unwrap_or_else(|e| panic!("{flags:?}: {e}"))
    }

    fn config(flags: &[&str]) -> Result<Option<ElectionConfig>, ConfigError> {
        ElectionConfig::from_args(&args(flags), "me".into())
    }

    #[test]
    fn off_unless_asked() {
        assert_eq!(config(&[]), Ok(None));
        assert_eq!(config(&["--leader-elect=false"]), Ok(None));
    }

    #[test]
    fn defaults_are_controller_runtimes() {
        let c = config(&["--leader-elect", "--namespace", "ns1"])
            .unwrap()
            .unwrap();
        assert_eq!(
            c,
            ElectionConfig {
                namespace: "ns1".into(),
                lease_name: "fluidos-node".into(),
                identity: "me".into(),
                lease_duration: 15,
                renew_deadline: 10,
                retry_period: 2,
            }
        );
        assert_eq!(c.request_timeout(), Duration::from_secs(2));
        let c = config(&[
            "--leader-elect",
            "--leader-election-namespace",
            "leases",
            "--leader-election-lease-name",
            "mine",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (c.namespace.as_str(), c.lease_name.as_str()),
            ("leases", "mine")
        );
    }

    #[test]
    fn durations_that_could_overlap_two_leaders_are_refused() {
        let timing = |lease: &str, renew: &str, retry: &str| {
            config(&[
                "--leader-elect",
                "--leader-election-lease-duration-seconds",
                lease,
                "--leader-election-renew-deadline-seconds",
                renew,
                "--leader-election-retry-period-seconds",
                retry,
            ])
        };
        assert!(timing("8", "5", "2").unwrap().is_some());
        assert_eq!(
            timing("10", "10", "1"),
            Err(ConfigError::RenewAfterExpiry {
                renew: 10,
                lease: 10
            })
        );
        assert_eq!(
            timing("15", "10", "5"),
            Err(ConfigError::RetryTooLong {
                retry: 5,
                margin: 5
            })
        );
        assert_eq!(
            timing("15", "0", "1"),
            Err(ConfigError::Zero {
                flag: "--leader-election-renew-deadline-seconds"
            })
        );
    }

    #[test]
    fn lease_name_follows_the_component_set() {
        use Component::*;
        assert_eq!(lease_name(&Component::ALL), "fluidos-node");
        assert_eq!(
            lease_name(&[RearManager, LocalResourceManager]),
            "fluidos-node-local-resource-manager-rear-manager"
        );
        assert_eq!(
            lease_name(&[LocalResourceManager, RearManager]),
            lease_name(&[RearManager, LocalResourceManager])
        );
        assert_eq!(lease_name(&[RearGateway]), "fluidos-node-rear-gateway");
        assert_ne!(lease_name(&[RearGateway]), lease_name(&[RearManager]));
        // The default lease name is used with --components' defaults.
        let c = config(&["--leader-elect", "--components", "network-manager"])
            .unwrap()
            .unwrap();
        assert_eq!(c.lease_name, "fluidos-node-network-manager");
    }

    #[test]
    fn identity_is_the_pod_name_and_a_suffix() {
        assert_eq!(
            holder_identity(Some("node-7f9c"), Some("host"), 0xdead_beef),
            "node-7f9c_deadbeef"
        );
        assert_eq!(holder_identity(None, Some("host"), 1), "host_00000001");
        assert_eq!(holder_identity(Some(" "), None, 1), "fluidos-node_00000001");
        assert_ne!(holder_identity_from_env(), holder_identity_from_env());
    }

    #[test]
    fn only_the_gateway_serves_on_standbys() {
        assert!(!leader_only(Component::RearGateway));
        for c in [
            Component::LocalResourceManager,
            Component::RearManager,
            Component::NetworkManager,
        ] {
            assert!(leader_only(c), "{c}");
        }
    }

    #[tokio::test]
    async fn leadership_waits_for_the_election() {
        assert!(Leadership::always().wait().await);
        assert!(!Leadership::always().is_elected());
        let (tx, rx) = watch::channel(false);
        let mut l = Leadership::elected(rx);
        assert!(l.is_elected());
        let waiting = tokio::spawn(async move { l.wait().await });
        tx.send_replace(true);
        assert!(waiting.await.unwrap());
        let (tx, rx) = watch::channel(false);
        drop(tx);
        assert!(!Leadership::elected(rx).wait().await);
    }
}

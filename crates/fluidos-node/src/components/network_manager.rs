//! Network manager: finds other nodes on the LAN by multicast and keeps a
//! `knowncluster-<nodeID>` for each (Go `network-manager`), which the
//! consumer's Discovery queries. It advertises the node's REAR key
//! fingerprint, and records each peer's in its KnownCluster. The AMQP broker
//! client is not here yet.

use std::sync::Arc;
use std::time::Duration;

use fluidos_network_manager::{MulticastSettings, NetworkManager, Settings, SettingsError, config};
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::{Args, Component};
use crate::context::Context;

/// Runs the network manager until `shutdown` is cancelled. It reports ready
/// once its multicast sockets are bound and joined (at once with LAN
/// discovery off); a missing interface or a bad multicast address stops
/// the node with the reason.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let settings = settings(&ctx.args).map_err(|e| Error::Setup(e.to_string()))?;
    let discovery = settings.multicast.clone();
    let metrics = ctx.network_metrics.clone();
    // Advertised with the node's REAR key, so that peers pin it; without a
    // key the advertisement is exactly a Go node's.
    let fingerprint = ctx.node_key.as_ref().map(|k| k.fingerprint());
    let manager =
        NetworkManager::bind(settings, ctx.identity.clone(), fingerprint, metrics.clone())
            .map_err(|e| Error::Setup(format!("network manager: {e}")))?;
    ctx.readiness.mark_ready(Component::NetworkManager);
    match &discovery {
        Some(m) => tracing::info!(
            component = %Component::NetworkManager,
            group = %m.group,
            interface = m.interface.as_deref().unwrap_or("(routing)"),
            "component started"
        ),
        None => tracing::info!(
            component = %Component::NetworkManager,
            "component started (LAN discovery off: only expiring KnownClusters)"
        ),
    }
    manager.run(ctx.client.clone(), shutdown).await;
    tracing::info!(
        component = %Component::NetworkManager,
        received = metrics.received_count(),
        sent = metrics.sent_count(),
        api_writes = metrics.total_writes(),
        "component stopped"
    );
    Ok(())
}

/// The network manager's settings from the command line.
fn settings(args: &Args) -> Result<Settings, SettingsError> {
    let multicast = if args.enable_local_discovery {
        let address = args
            .multicast_address
            .as_deref()
            .unwrap_or(config::DEFAULT_MULTICAST_ADDRESS);
        Some(MulticastSettings {
            group: config::parse_multicast_address(address)?,
            interface: args.cni_interface.clone().filter(|i| !i.is_empty()),
            interval: Duration::from_millis(args.multicast_interval_ms),
        })
    } else {
        None
    };
    let settings = Settings {
        namespace: args.namespace.clone(),
        multicast,
        ttl: Duration::from_millis(args.known_cluster_ttl_ms),
        housekeeping_interval: Duration::from_millis(args.known_cluster_housekeeping_ms),
    };
    settings.validate()?;
    Ok(settings)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser;

    use super::*;

    fn args(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("fluidos-node").chain(flags.iter().copied())).unwrap()
    }

    #[test]
    fn discovery_off_needs_no_valid_multicast_address() {
        let s = settings(&args(&[
            "--enable-local-discovery=false",
            "--multicast-address",
            "not-an-address",
        ]))
        .unwrap();
        assert_eq!(s.multicast, None);
    }

    #[test]
    fn discovery_on_checks_the_address_and_timings() {
        let s = settings(&args(&[
            "--multicast-address",
            "239.11.11.1:4000",
            "--cni-interface",
            "lo",
        ]))
        .unwrap();
        let m = s.multicast.unwrap();
        assert_eq!(m.group, "239.11.11.1:4000".parse().unwrap());
        assert_eq!(m.interface.as_deref(), Some("lo"));
        assert!(settings(&args(&["--multicast-address", "10.0.0.1:4000"])).is_err());
        assert!(
            settings(&args(&[
                "--multicast-address",
                "239.11.11.1:4000",
                "--known-cluster-ttl-ms",
                "6000"
            ]))
            .is_err(),
            "TTL shorter than three intervals"
        );
    }
}

//! Network manager: finds other nodes on the LAN by multicast and through
//! AMQP brokers, and keeps a `knowncluster-<nodeID>` for each (Go
//! `network-manager`), which the consumer's Discovery queries. It announces
//! the node's REAR key fingerprint both ways, and records each peer's in its
//! KnownCluster.

use std::sync::Arc;
use std::time::Duration;

use fluidos_network_manager::broker::{self, BrokerConnections, BrokerSettings, LocalNode};
use fluidos_network_manager::{MulticastSettings, NetworkManager, Settings, SettingsError, config};
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::{Args, Component};
use crate::context::Context;
use crate::health::Readiness;

/// Runs the network manager until `shutdown` is cancelled. It reports ready
/// while its multicast sockets are bound and joined (at once with LAN
/// discovery off) and, with broker discovery on, the Broker list is read and
/// every Broker is connected; a missing interface or a bad multicast
/// address stops the node with the reason.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let settings = settings(&ctx.args).map_err(|e| Error::Setup(e.to_string()))?;
    let discovery = settings.multicast.clone();
    let metrics = ctx.network_metrics.clone();
    // Advertised with the node's REAR key, so that peers pin it; without a
    // key the advertisement is exactly a Go node's.
    let fingerprint = ctx.rear_fingerprint;
    let manager =
        NetworkManager::bind(settings, ctx.identity.clone(), fingerprint, metrics.clone())
            .map_err(|e| Error::Setup(format!("network manager: {e}")))?;
    // The broker tasks stop with the node, or with the manager if it ever
    // ends first (a child token: cancelling it stops nothing else).
    let brokers_stop = shutdown.child_token();
    let brokers = ctx.args.enable_broker_discovery.then(|| {
        let connections = BrokerConnections::new();
        let task = tokio::spawn(broker::run(
            ctx.client.clone(),
            BrokerSettings::new(&ctx.args.namespace),
            LocalNode {
                identity: ctx.identity.clone(),
                fingerprint,
            },
            metrics.clone(),
            manager.peer_sink(),
            connections.clone(),
            brokers_stop.clone(),
        ));
        let reporter = tokio::spawn(report_readiness(
            connections,
            ctx.readiness.clone(),
            brokers_stop.clone(),
        ));
        (task, reporter)
    });
    if brokers.is_none() {
        ctx.readiness.mark_ready(Component::NetworkManager);
    }
    tracing::info!(
        component = %Component::NetworkManager,
        lan_group = %discovery.as_ref().map_or_else(|| "(LAN discovery off)".to_owned(), |m| m.group.to_string()),
        interface = discovery.as_ref().and_then(|m| m.interface.as_deref()).unwrap_or("(routing)"),
        brokers = if brokers.is_some() { "on" } else { "off" },
        "component started"
    );
    manager.run(ctx.client.clone(), shutdown.clone()).await;
    if let Some((task, reporter)) = brokers {
        brokers_stop.cancel();
        let _ = tokio::join!(task, reporter);
    }
    tracing::info!(
        component = %Component::NetworkManager,
        received = metrics.received_count(),
        sent = metrics.sent_count(),
        api_writes = metrics.total_writes(),
        "component stopped"
    );
    Ok(())
}

/// Keeps the network manager's readiness in step with its broker
/// connections (the multicast sockets are bound before this starts), and
/// logs each change with the reason.
async fn report_readiness(
    connections: BrokerConnections,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    let mut table = connections.subscribe();
    let mut last: Option<Option<String>> = None;
    loop {
        let reason = table.borrow_and_update().not_ready_reason();
        if last.as_ref() != Some(&reason) {
            match &reason {
                None => {
                    readiness.mark_ready(Component::NetworkManager);
                    tracing::info!(component = %Component::NetworkManager, "broker discovery up: ready");
                }
                Some(why) => {
                    readiness.mark_not_ready(Component::NetworkManager);
                    tracing::info!(component = %Component::NetworkManager, reason = %why, "not ready");
                }
            }
            last = Some(reason);
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = table.changed() => if changed.is_err() { return },
        }
    }
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

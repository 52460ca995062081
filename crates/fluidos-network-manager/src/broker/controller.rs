//! Keeps one client per Broker object of the node's namespace: started when
//! the Broker appears, restarted only when its spec changes (Go reconnected
//! on every reconcile), stopped when it is deleted. Brokers are keyed by
//! object name (Go compared `metadata.name` with `spec.name`, so a Broker
//! whose two names differed was never stopped), and the node never deletes
//! a Broker (Go deleted the user's object on any error, and a second Broker
//! of the same address).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use fluidos_api::network::{Broker, BrokerSpec};
use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::client::{self, Shared};
use super::{BrokerConnections, BrokerSettings, LocalNode};
use crate::manager::PeerSink;
use crate::metrics::NetworkMetrics;

/// A running client and what it was started for.
struct Running {
    uid: Option<String>,
    spec: BrokerSpec,
    stop: CancellationToken,
}

/// What to do with a Broker seen by the watch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// No client yet: start one.
    Start,
    /// Its spec changed, or it is another object of the same name: restart.
    Restart,
    /// Status or metadata only: leave the connection alone.
    Keep,
}

/// Decides what a watched Broker means for its running client, if any.
pub(crate) fn change(running: Option<(&Option<String>, &BrokerSpec)>, seen: &Broker) -> Change {
    match running {
        None => Change::Start,
        Some((uid, spec)) if *uid == seen.metadata.uid && *spec == seen.spec => Change::Keep,
        Some(_) => Change::Restart,
    }
}

/// True when a watch error says Brokers cannot be listed at all here:
/// 401/403 (no RBAC) or 404 (no Broker CRD), as opposed to an API server
/// briefly failing.
pub(crate) fn cannot_list_here(e: &watcher::Error) -> bool {
    let api = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => return false,
    };
    matches!(api, kube::Error::Api(s) if matches!(s.code, 401 | 403 | 404))
}

/// Runs a client for every Broker in `settings.namespace` until `shutdown`.
///
/// Announcements heard go to `peers` (the network manager's KnownCluster
/// writer, [`crate::NetworkManager::peer_sink`]), so broker-learned
/// KnownClusters follow the same cap, address- and key-conflict rules,
/// refresh and expiry as multicast ones. Announcements carry `node`'s
/// fingerprint, its REAR key, when it has one. Secrets are read from the
/// same namespace. `connections` follows which Brokers are connected (the
/// node's readiness).
/// Watch errors are logged and the watch resumes with backoff.
pub async fn run(
    client: kube::Client,
    settings: BrokerSettings,
    node: LocalNode,
    metrics: NetworkMetrics,
    peers: PeerSink,
    connections: BrokerConnections,
    shutdown: CancellationToken,
) {
    let api: Api<Broker> = Api::namespaced(client.clone(), &settings.namespace);
    let namespace = settings.namespace.clone();
    let shared = Arc::new(Shared {
        client,
        settings,
        identity: node.identity,
        fingerprint: node.fingerprint,
        metrics,
        peers,
        connections,
    });
    let mut running: HashMap<String, Running> = HashMap::new();
    let mut tasks = JoinSet::new();
    let mut relisted: Option<HashSet<String>> = None;
    let mut events = Box::pin(watcher::watcher(api, watcher::Config::default()));
    tracing::info!(namespace = %namespace, "broker controller started");
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            // Reap finished clients (they only end when stopped).
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            e = events.next() => e,
        };
        match event {
            None => break,
            Some(Err(e)) => {
                if cannot_list_here(&e) && !shared.connections.snapshot().is_listed() {
                    // No Broker CRD or no RBAC for it (a chart with broker
                    // discovery off, an older chart): nothing to connect
                    // to, so the node's readiness must not wait for it.
                    tracing::warn!(error = %e, "Brokers cannot be listed here: broker discovery unavailable (enable it in the chart, or --enable-broker-discovery=false); retrying");
                    shared.connections.listed();
                } else {
                    tracing::warn!(error = %e, "watching Brokers failed; retrying");
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Some(Ok(watcher::Event::Init)) => relisted = Some(HashSet::new()),
            Some(Ok(watcher::Event::InitApply(b))) => {
                if let Some(seen) = relisted.as_mut() {
                    seen.insert(b.name_any());
                }
                upsert(&shared, &mut running, &mut tasks, b);
            }
            Some(Ok(watcher::Event::InitDone)) => {
                if let Some(seen) = relisted.take() {
                    let gone: Vec<String> = running
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        remove(&shared, &mut running, &name);
                    }
                }
                shared.connections.listed();
            }
            Some(Ok(watcher::Event::Apply(b))) => upsert(&shared, &mut running, &mut tasks, b),
            Some(Ok(watcher::Event::Delete(b))) => remove(&shared, &mut running, &b.name_any()),
        }
    }
    for r in running.values() {
        r.stop.cancel();
    }
    // Clients close their connections on stop; give them a moment.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
}

fn upsert(
    shared: &Arc<Shared>,
    running: &mut HashMap<String, Running>,
    tasks: &mut JoinSet<()>,
    broker: Broker,
) {
    let name = broker.name_any();
    let current = running.get(&name).map(|r| (&r.uid, &r.spec));
    match change(current, &broker) {
        Change::Keep => return,
        Change::Restart => {
            tracing::info!(broker = %name, "Broker changed; reconnecting");
            remove(shared, running, &name);
        }
        Change::Start => {}
    }
    let stop = CancellationToken::new();
    let row = shared.connections.track(&name);
    running.insert(
        name,
        Running {
            uid: broker.metadata.uid.clone(),
            spec: broker.spec.clone(),
            stop: stop.clone(),
        },
    );
    tasks.spawn(client::run(shared.clone(), broker, row, stop));
}

fn remove(shared: &Shared, running: &mut HashMap<String, Running>, name: &str) {
    if let Some(r) = running.remove(name) {
        tracing::info!(broker = %name, "Broker gone; disconnecting");
        r.stop.cancel();
        shared.connections.forget(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(uid: &str, address: &str) -> Broker {
        let mut b = Broker::new(
            "b",
            BrokerSpec {
                address: address.into(),
                ..BrokerSpec::default()
            },
        );
        b.metadata.uid = Some(uid.into());
        b
    }

    #[test]
    fn no_rbac_or_no_crd_means_unavailable_a_failing_server_does_not() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(
                serde_json::from_value(serde_json::json!({"code": code, "status": "Failure"}))
                    .unwrap_or_default(),
            ))
        };
        for code in [401, 403, 404] {
            assert!(
                cannot_list_here(&watcher::Error::InitialListFailed(api(code))),
                "{code}"
            );
        }
        for code in [429, 500, 503] {
            assert!(
                !cannot_list_here(&watcher::Error::InitialListFailed(api(code))),
                "{code}"
            );
        }
        assert!(!cannot_list_here(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn only_a_new_spec_or_object_reconnects() {
        let b = broker("u1", "h");
        assert_eq!(change(None, &b), Change::Start);
        let uid = Some("u1".to_owned());
        assert_eq!(change(Some((&uid, &b.spec)), &b), Change::Keep);
        let mut relabelled = b.clone();
        relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
        assert_eq!(change(Some((&uid, &b.spec)), &relabelled), Change::Keep);
        assert_eq!(
            change(Some((&uid, &b.spec)), &broker("u1", "other")),
            Change::Restart
        );
        assert_eq!(
            change(Some((&uid, &b.spec)), &broker("u2", "h")),
            Change::Restart,
            "deleted and created again under the same name"
        );
    }
}

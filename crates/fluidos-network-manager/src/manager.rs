//! The network manager as a whole: sockets opened up front (so readiness
//! means "listening"), then the send, receive and KnownCluster loops.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use fluidos_rear_identity::Fingerprint;

use crate::Error;
use crate::advertisement::Advertisement;
use crate::config::Settings;
use crate::known_clusters::{KnownClusters, maintain};
use crate::metrics::NetworkMetrics;
use crate::multicast::MulticastSockets;

/// Advertisements buffered between the socket and the API writer; beyond
/// this they are dropped and counted (`backlog`), as every peer repeats.
const BACKLOG: usize = 1024;

/// A network manager whose sockets are open.
#[derive(Debug)]
pub struct NetworkManager {
    settings: Settings,
    identity: fluidos_api::NodeIdentity,
    fingerprint: Option<Fingerprint>,
    sockets: Option<MulticastSockets>,
    metrics: NetworkMetrics,
    tx: mpsc::Sender<Advertisement>,
    rx: mpsc::Receiver<Advertisement>,
}

/// Where other sources of peers (the AMQP broker client) hand their
/// advertisements to the network manager's one KnownCluster writer, so
/// that its cap, address-conflict rule and sparse refreshes apply to every
/// peer however it was learned. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct PeerSink {
    tx: mpsc::Sender<Advertisement>,
}

impl PeerSink {
    /// Queues `ad` for the KnownCluster writer; `false` (and nothing
    /// queued) when the writer is behind (1024 queued) or
    /// stopped: peers repeat, so the next announcement retries.
    pub fn offer(&self, ad: Advertisement) -> bool {
        self.tx.try_send(ad).is_ok()
    }
}

impl NetworkManager {
    /// Checks `settings` and, with LAN discovery on, resolves the interface,
    /// binds and joins the group. Must run inside a Tokio runtime.
    ///
    /// Every advertisement sent is `identity` with `fingerprint`, the
    /// node's REAR key (`None`: sent without one, exactly as a Go node).
    pub fn bind(
        settings: Settings,
        identity: fluidos_api::NodeIdentity,
        fingerprint: Option<Fingerprint>,
        metrics: NetworkMetrics,
    ) -> Result<Self, Error> {
        settings.validate()?;
        let sockets = match &settings.multicast {
            Some(m) => Some(MulticastSockets::open(m)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel::<Advertisement>(BACKLOG);
        Ok(NetworkManager {
            settings,
            identity,
            fingerprint,
            sockets,
            metrics,
            tx,
            rx,
        })
    }

    /// Where the broker client hands the peers it learns (see [`PeerSink`]).
    pub fn peer_sink(&self) -> PeerSink {
        PeerSink {
            tx: self.tx.clone(),
        }
    }

    /// The REAR key fingerprint this node advertises, if any.
    pub fn fingerprint(&self) -> Option<&Fingerprint> {
        self.fingerprint.as_ref()
    }

    /// The open sockets, `None` with LAN discovery off.
    pub fn sockets(&self) -> Option<&MulticastSockets> {
        self.sockets.as_ref()
    }

    /// Advertises, listens and maintains KnownClusters until `shutdown`.
    /// With LAN discovery off only expired KnownClusters are removed (as Go
    /// does for broker-learned ones).
    pub async fn run(self, client: kube::Client, shutdown: CancellationToken) {
        let known = KnownClusters::new(
            client,
            &self.settings.namespace,
            self.settings.ttl,
            self.metrics.clone(),
        );
        // `tx` lives until this function returns, so with discovery off the
        // channel stays open and `maintain` keeps sweeping.
        let (tx, rx) = (self.tx, self.rx);
        let housekeeping = maintain(
            known,
            rx,
            self.settings.housekeeping_interval,
            shutdown.clone(),
        );
        let (Some(sockets), Some(multicast)) = (self.sockets, &self.settings.multicast) else {
            housekeeping.await;
            return;
        };
        let own = Advertisement::of(&self.identity).with_fingerprint(self.fingerprint.as_ref());
        tracing::info!(
            group = %sockets.group(),
            interface = %sockets.interface(),
            fingerprint = own.fingerprint.as_deref().unwrap_or("none"),
            "LAN discovery started"
        );
        let (receiver, sender) = sockets.split();
        tokio::join!(
            housekeeping,
            receiver.listen(&self.identity, &tx, &self.metrics, &shutdown),
            sender.advertise(&own, multicast.interval, &self.metrics, &shutdown),
        );
    }
}

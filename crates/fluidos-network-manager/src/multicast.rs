//! The UDP multicast sockets, and the send and receive loops around them.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::advertisement::{self, Advertisement, MAX_ADVERTISEMENT_BYTES};
use crate::config::{MulticastSettings, interface_address};
use crate::metrics::NetworkMetrics;

/// Receive buffer: larger than [`MAX_ADVERTISEMENT_BYTES`] so that an
/// oversized datagram is seen as such (and counted) rather than cut to a
/// prefix that might parse.
const RECEIVE_BUFFER: usize = 4 * MAX_ADVERTISEMENT_BYTES;
/// Pause after a failed receive.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The two sockets of LAN discovery, bound and joined.
#[derive(Debug)]
pub struct MulticastSockets {
    receiver: UdpSocket,
    sender: UdpSocket,
    group: SocketAddrV4,
    interface: Ipv4Addr,
}

impl MulticastSockets {
    /// Resolves the interface, joins the group and binds both sockets.
    /// Must run inside a Tokio runtime.
    pub fn open(settings: &MulticastSettings) -> Result<Self, Error> {
        let interface = match &settings.interface {
            None => Ipv4Addr::UNSPECIFIED,
            Some(name) => resolve_interface(name)?,
        };
        let group = settings.group;
        let receiver = open_receiver(group, interface).map_err(|source| Error::OpenReceiver {
            group,
            interface,
            source,
        })?;
        let sender =
            open_sender(interface).map_err(|source| Error::OpenSender { interface, source })?;
        Ok(MulticastSockets {
            receiver,
            sender,
            group,
            interface,
        })
    }

    /// The group and port joined.
    pub fn group(&self) -> SocketAddrV4 {
        self.group
    }

    /// The interface address used (`0.0.0.0`: chosen by routing).
    pub fn interface(&self) -> Ipv4Addr {
        self.interface
    }

    /// Splits into the receiving and the sending half.
    pub fn split(self) -> (Receiver, Sender) {
        (
            Receiver {
                socket: self.receiver,
            },
            Sender {
                socket: self.sender,
                group: self.group,
            },
        )
    }
}

/// The receiving socket.
#[derive(Debug)]
pub struct Receiver {
    socket: UdpSocket,
}

/// The sending socket, connected in spirit to the group.
#[derive(Debug)]
pub struct Sender {
    socket: UdpSocket,
    group: SocketAddrV4,
}

impl Sender {
    /// Sends one datagram to the group.
    pub async fn send(&self, datagram: &[u8]) -> std::io::Result<usize> {
        self.socket
            .send_to(datagram, SocketAddr::V4(self.group))
            .await
    }

    /// Sends `ad` now and then every `interval` until `shutdown`; a failed
    /// send is logged and counted, never ends the loop.
    pub async fn advertise(
        &self,
        ad: &Advertisement,
        interval: Duration,
        metrics: &NetworkMetrics,
        shutdown: &CancellationToken,
    ) {
        let datagram = ad.to_bytes();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match self.send(&datagram).await {
                Ok(_) => metrics.sent(),
                Err(e) => {
                    metrics.send_failed();
                    tracing::warn!(error = %e, group = %self.group, "sending the advertisement failed; will retry");
                }
            }
        }
    }
}

impl Receiver {
    /// Receives until `shutdown`, passing every valid advertisement that is
    /// not `own` to `out`. Invalid or oversized datagrams, own ones, and
    /// ones `out` has no room for are dropped and counted; nothing a peer
    /// sends ends the loop.
    pub async fn listen(
        &self,
        own: &fluidos_api::NodeIdentity,
        out: &mpsc::Sender<Advertisement>,
        metrics: &NetworkMetrics,
        shutdown: &CancellationToken,
    ) {
        let mut buf = vec![0u8; RECEIVE_BUFFER];
        loop {
            let received = tokio::select! {
                () = shutdown.cancelled() => return,
                r = self.socket.recv_from(&mut buf) => r,
            };
            let (len, from) = match received {
                Ok(r) => r,
                Err(e) => {
                    // E.g. ICMP-induced errors; the socket stays usable. The
                    // pause keeps a persistent error from spinning the loop.
                    tracing::warn!(error = %e, "multicast receive failed");
                    tokio::time::sleep(RECEIVE_ERROR_PAUSE).await;
                    continue;
                }
            };
            metrics.received();
            let Some(datagram) = buf.get(..len) else {
                continue;
            };
            let ad = match advertisement::parse(datagram) {
                Ok(ad) => ad,
                Err(rejection) => {
                    metrics.dropped(rejection.reason());
                    tracing::debug!(%from, reason = %rejection, "dropped a multicast datagram");
                    continue;
                }
            };
            if advertisement::is_own(&ad, own) {
                metrics.dropped("own");
                continue;
            }
            if out.try_send(ad).is_err() {
                // The writer is behind; the peer advertises again soon.
                metrics.dropped("backlog");
            }
        }
    }
}

fn resolve_interface(name: &str) -> Result<Ipv4Addr, Error> {
    let list = if name.parse::<Ipv4Addr>().is_ok() {
        Vec::new()
    } else {
        if_addrs::get_if_addrs()
            .map_err(Error::ListInterfaces)?
            .into_iter()
            .filter_map(|i| match i.ip() {
                std::net::IpAddr::V4(v4) => Some((i.name, v4)),
                std::net::IpAddr::V6(_) => None,
            })
            .collect()
    };
    interface_address(name, &list).ok_or_else(|| Error::NoSuchInterface(name.to_owned()))
}

fn open_receiver(group: SocketAddrV4, interface: Ipv4Addr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // Several listeners per host (replicas, nodes sharing a host in tests)
    // each get every datagram.
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    // Bound to the group, not 0.0.0.0: only this group's datagrams arrive,
    // as with Go's ListenMulticastUDP.
    socket.bind(&SocketAddr::V4(group).into())?;
    socket.set_multicast_all_v4(false)?;
    socket.join_multicast_v4(group.ip(), &interface)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket.into())
}

fn open_sender(interface: Ipv4Addr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    if !interface.is_unspecified() {
        // Go only binds to the interface's address; IP_MULTICAST_IF states
        // the egress interface explicitly.
        socket.set_multicast_if_v4(&interface)?;
    }
    socket.bind(&SocketAddr::V4(SocketAddrV4::new(interface, 0)).into())?;
    // Loopback on, TTL 1: the OS defaults Go relies on, set explicitly so
    // nodes sharing a host hear each other and nothing leaves the LAN.
    socket.set_multicast_loop_v4(true)?;
    socket.set_multicast_ttl_v4(1)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket.into())
}

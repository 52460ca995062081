//! The HTTP/1.1 server loop: what `axum::serve` does, plus the connection
//! limits it does not offer.
//!
//! - At most `max_connections` connections are served at once; further
//!   ones wait in the kernel's accept backlog until one closes. One peer
//!   (IPv4 address, IPv6 /64, as the rate limit counts them) may hold at
//!   most `max_connections_per_peer` of them: one more is closed at once,
//!   so a single client cannot take every slot and starve the others.
//! - A request head must arrive whole within `header_read_timeout`, counted
//!   from the moment the connection is ready for it: a slow-drip client
//!   (a header byte now and then) and an idle keep-alive connection are
//!   both closed when it runs out (hyper starts the timer whenever it
//!   waits for a request head).
//! - A write that makes no progress for `write_timeout` (a client that sends
//!   requests but does not read the answers, so the socket buffers fill)
//!   closes the connection: hyper has no write timeout of its own, and such
//!   a connection would otherwise keep its slot as long as it likes.
//! - Each request carries the peer's address (`ConnectInfo`) for the
//!   per-peer rate limit, and what its connection proves about the sender
//!   ([`Caller`]).
//! - TLS and plain HTTP share the port, as the Go node's `http://` clients
//!   and our TLS clients both know only one REAR address: a connection
//!   whose first byte is a TLS handshake record (0x16, which no HTTP
//!   request line starts with) is served over TLS when the gateway has a
//!   key, anything else as plain HTTP. The first byte and the handshake
//!   must arrive within the header timeout, like a request head.
//!
//! HTTP/1.1 only, as the Go node serves REAR: no HTTP/2 stream multiplexing
//! to police.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_io_timeout::TimeoutStream;
use tower::Service;

use crate::buyer::Caller;

/// Largest request head (request line and headers) a connection buffers.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long open connections may take to finish after shutdown was asked.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// First byte of a TLS record carrying a handshake message (a ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Connection-level limits of the server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    /// See the module documentation.
    pub header_read_timeout: Duration,
    /// See the module documentation.
    pub write_timeout: Duration,
    /// See the module documentation.
    pub max_connections: usize,
    /// See the module documentation.
    pub max_connections_per_peer: usize,
}

/// Open connections per peer key ([`crate::rate_limit::peer_key`]).
#[derive(Clone, Default)]
struct PeerConnections {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a peer; counted down when dropped.
struct PeerSlot {
    connections: PeerConnections,
    key: IpAddr,
}

impl PeerConnections {
    /// A slot for one more connection of `peer`, or `None` when it already
    /// holds `cap`.
    fn try_open(&self, peer: IpAddr, cap: usize) -> Option<PeerSlot> {
        let key = crate::rate_limit::peer_key(peer);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(key).or_insert(0);
        if *n >= cap.max(1) {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            connections: self.clone(),
            key,
        })
    }

    #[cfg(test)]
    fn peers(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .connections
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The map holds only peers with connections open: bounded by
        // `max_connections`.
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// How a connection is served, decided from its first byte (pure).
#[derive(Debug, PartialEq, Eq)]
enum Transport {
    Tls,
    Plain,
}

fn transport_of(first_byte: u8, tls_configured: bool) -> Transport {
    if tls_configured && first_byte == TLS_HANDSHAKE_RECORD {
        Transport::Tls
    } else {
        Transport::Plain
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open
/// connections finish (at most [`DRAIN_TIMEOUT`]). With `tls`, connections
/// that open with a TLS handshake are served over it.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let per_peer = PeerConnections::default();
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a REAR connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(peer_slot) = per_peer.try_open(peer.ip(), limits.max_connections_per_peer) else {
            tracing::debug!(peer = %peer.ip(), cap = limits.max_connections_per_peer,
                "closing a REAR connection: its peer holds the most connections allowed");
            drop(tcp);
            continue;
        };
        // Small request/response pairs: Nagle's delay would dominate latency.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::trace!(error = %e, "TCP_NODELAY");
        }
        let connection = Connection {
            router: router.clone(),
            http: http.clone(),
            watcher: graceful.watcher(),
            peer,
        };
        let tls = tls.clone();
        let handshake_timeout = limits.header_read_timeout;
        let write_timeout = limits.write_timeout;
        tokio::spawn(async move {
            connection
                .run(tcp, tls, handshake_timeout, write_timeout)
                .await;
            drop(peer_slot);
            drop(slot);
        });
    }
    drop(listener);
    // A connection still in its TLS handshake is waited for too (at most
    // the handshake timeout).
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("REAR connections still open after {DRAIN_TIMEOUT:?}; dropping them");
    }
}

/// A connection once its transport is known.
enum Opened {
    /// TLS established; the caller as its certificate names it.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, Caller),
    /// Plain HTTP.
    Plain(TcpStream),
    /// Closed before its first byte.
    Closed,
}

/// Reads (without consuming) the first byte and, for a TLS handshake with
/// TLS configured, completes it.
async fn open(tcp: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>) -> std::io::Result<Opened> {
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await? == 0 {
        return Ok(Opened::Closed);
    }
    match (transport_of(first[0], tls.is_some()), tls) {
        (Transport::Tls, Some(acceptor)) => {
            let stream = acceptor.accept(tcp).await?;
            let caller = match fluidos_rear_identity::tls::peer_fingerprint(stream.get_ref().1) {
                Some(fp) => Caller::Key(fp),
                None => Caller::AnonymousTls,
            };
            Ok(Opened::Tls(Box::new(stream), caller))
        }
        _ => Ok(Opened::Plain(tcp)),
    }
}

/// `io` whose writes fail with `TimedOut` once one makes no progress for
/// `timeout` (boxed: the timer makes the stream `!Unpin`).
fn with_write_timeout<IO>(io: IO, timeout: Duration) -> Pin<Box<TimeoutStream<IO>>>
where
    IO: AsyncRead + AsyncWrite,
{
    let mut stream = TimeoutStream::new(io);
    stream.set_write_timeout(Some(timeout));
    Box::pin(stream)
}

/// One accepted connection, before its transport is known.
struct Connection {
    router: Router,
    http: hyper::server::conn::http1::Builder,
    watcher: Watcher,
    peer: std::net::SocketAddr,
}

impl Connection {
    /// Sniffs the transport, completes a TLS handshake if it is one (both
    /// within one `handshake_timeout`), and serves HTTP/1.1 on the result,
    /// closing it when a write stalls for `write_timeout`.
    async fn run(
        self,
        tcp: TcpStream,
        tls: Option<tokio_rustls::TlsAcceptor>,
        handshake_timeout: Duration,
        write_timeout: Duration,
    ) {
        let peer = self.peer;
        match tokio::time::timeout(handshake_timeout, open(tcp, tls)).await {
            Ok(Ok(Opened::Tls(stream, caller))) => {
                self.serve(with_write_timeout(stream, write_timeout), caller)
                    .await;
            }
            Ok(Ok(Opened::Plain(tcp))) => {
                self.serve(
                    with_write_timeout(tcp, write_timeout),
                    Caller::Plain(Some(peer.ip())),
                )
                .await;
            }
            Ok(Ok(Opened::Closed)) => {}
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "REAR connection failed before HTTP"),
            Err(_) => {
                tracing::debug!(%peer, "REAR connection sent no request or handshake in time")
            }
        }
    }

    async fn serve<IO>(self, io: IO, caller: Caller)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            router,
            http,
            watcher,
            peer,
        } = self;
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(caller);
            let mut router = router.clone();
            async move { router.call(req.map(Body::new)).await }
        });
        let connection = watcher.watch(http.serve_connection(TokioIo::new(io), service));
        if let Err(e) = connection.await {
            // Header timeouts, resets and malformed requests end here.
            tracing::debug!(%peer, error = %e, "REAR connection ended");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_handshake_record_is_served_as_tls_and_only_with_a_key() {
        assert_eq!(transport_of(0x16, true), Transport::Tls);
        assert_eq!(transport_of(0x16, false), Transport::Plain);
        for first in [b'G', b'P', b'D', 0x80, 0x00] {
            assert_eq!(transport_of(first, true), Transport::Plain, "{first:#x}");
        }
    }

    #[test]
    fn a_peer_holds_at_most_its_cap_and_gets_slots_back() {
        let c = PeerConnections::default();
        let a: IpAddr = [10, 0, 0, 1].into();
        let held: Vec<PeerSlot> = (0..3).filter_map(|_| c.try_open(a, 3)).collect();
        assert_eq!(held.len(), 3);
        assert!(c.try_open(a, 3).is_none(), "a fourth is refused");
        assert!(
            c.try_open([10, 0, 0, 2].into(), 3).is_some(),
            "others are not"
        );
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0; 4]));
        let same_64: Vec<PeerSlot> = ["2001:db8::1", "2001:db8::2", "2001:db8::3"]
            .iter()
            .filter_map(|s| c.try_open(v6(s), 3))
            .collect();
        assert_eq!(same_64.len(), 3);
        assert!(
            c.try_open(v6("2001:db8::4"), 3).is_none(),
            "one /64, one peer"
        );
        drop(held);
        assert!(
            c.try_open(a, 3).is_some(),
            "closed connections free their slots"
        );
        drop(same_64);
        assert_eq!(c.peers(), 0, "peers without connections are forgotten");
    }
}

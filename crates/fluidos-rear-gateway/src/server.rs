//! The HTTP/1.1 server loop: what `axum::serve` does, plus the connection
//! limits it does not offer.
//!
//! - At most `max_connections` connections are served at once; further
//!   ones wait in the kernel's accept backlog until one closes.
//! - A request head must arrive whole within `header_read_timeout`, counted
//!   from the moment the connection is ready for it: a slow-drip client
//!   (a header byte now and then) and an idle keep-alive connection are
//!   both closed when it runs out (hyper starts the timer whenever it
//!   waits for a request head).
//! - Each request carries the peer's address (`ConnectInfo`) for the
//!   per-peer rate limit.
//!
//! HTTP/1.1 only, as the Go node serves REAR: no HTTP/2 stream multiplexing
//! to police.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Service;

/// Largest request head (request line and headers) a connection buffers.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long open connections may take to finish after shutdown was asked.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Connection-level limits of the server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    /// See the module documentation.
    pub header_read_timeout: Duration,
    /// See the module documentation.
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open
/// connections finish (at most [`DRAIN_TIMEOUT`]).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
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
        // Small request/response pairs: Nagle's delay would dominate latency.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::trace!(error = %e, "TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            async move { router.call(req.map(Body::new)).await }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // Header timeouts, resets and malformed requests end here.
                tracing::debug!(%peer, error = %e, "REAR connection ended");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("REAR connections still open after {DRAIN_TIMEOUT:?}; dropping them");
    }
}

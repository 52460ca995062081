//! Watches of Liqo's kinds on a cluster that may not have Liqo (yet).
//!
//! A node with peering on whose cluster lacks Liqo's CRDs gets a 404 for
//! every list of a Liqo kind; the watches back off and retry, and each
//! retry used to be logged as a failed watch, forever, while nothing said
//! what was wrong. [`quiet`] wraps such a watch: the first 404 of a kind is
//! said once, as an error naming the kind and what to do; the retries after
//! are not logged (the backoff goes on, so peering starts as soon as Liqo is
//! installed, without a restart); the first list that succeeds is said too.
//! [`LiqoPresence`] holds the kinds not served, for the node to show in
//! `/readyz`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fluidos_controller::api_error::is_not_found;
use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::watch;

/// The Liqo kinds this node's watches found not served, shared by them.
#[derive(Clone)]
pub struct LiqoPresence(Arc<watch::Sender<BTreeSet<&'static str>>>);

impl Default for LiqoPresence {
    fn default() -> Self {
        LiqoPresence(Arc::new(watch::Sender::new(BTreeSet::new())))
    }
}

impl fmt::Debug for LiqoPresence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LiqoPresence")
            .field(&*self.0.borrow())
            .finish()
    }
}

impl LiqoPresence {
    /// The kinds not served now, and every change after.
    pub fn subscribe(&self) -> watch::Receiver<BTreeSet<&'static str>> {
        self.0.subscribe()
    }

    fn set(&self, kind: &'static str, missing: bool) {
        self.0.send_if_modified(|kinds| {
            if missing {
                kinds.insert(kind)
            } else {
                kinds.remove(kind)
            }
        });
    }
}

/// What `/readyz` and the log say while `kinds` are not served (pure).
pub fn unavailable(kinds: &BTreeSet<&'static str>) -> Option<String> {
    (!kinds.is_empty()).then(|| {
        format!(
            "K8Slice peering is not available: the API server does not serve Liqo's {} \
             (is Liqo v1.0 installed?); it starts as soon as Liqo is, or run with --peering=false",
            kinds.iter().copied().collect::<Vec<_>>().join(", ")
        )
    })
}

/// `events` (a watch of the Liqo `kind`, with its backoff) with its 404s
/// said once and then left out (see the module doc); every other event and
/// error passes.
pub fn quiet<K, S>(
    kind: &'static str,
    presence: LiqoPresence,
    events: S,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let missing = Arc::new(AtomicBool::new(false));
    events.filter_map(move |item| {
        let (missing, presence) = (missing.clone(), presence.clone());
        async move {
            match item {
                Err(e) if not_served(&e) => {
                    if !missing.swap(true, Ordering::AcqRel) {
                        presence.set(kind, true);
                        tracing::error!(
                            kind,
                            error = %e,
                            "{}",
                            unavailable(&BTreeSet::from([kind])).unwrap_or_default()
                        );
                    }
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    if missing.swap(false, Ordering::AcqRel) {
                        presence.set(kind, false);
                        tracing::info!(
                            kind,
                            "Liqo's {kind} is served now: K8Slice peering goes on"
                        );
                    }
                    Some(Ok(watcher::Event::InitDone))
                }
                other => Some(other),
            }
        }
    })
}

/// True for a watch that failed because the kind is not served (404).
fn not_served(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => {
            is_not_found(e)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn not_found() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404),
        )))
    }

    #[tokio::test]
    async fn a_missing_kind_is_said_once_left_out_and_cleared_when_served() {
        let presence = LiqoPresence::default();
        let mut seen = presence.subscribe();
        let events: Vec<Result<watcher::Event<ConfigMap>, watcher::Error>> = vec![
            Err(not_found()),
            Err(not_found()),
            Err(watcher::Error::NoResourceVersion),
        ];
        let out: Vec<_> = quiet(
            "ForeignCluster",
            presence.clone(),
            futures::stream::iter(events),
        )
        .collect()
        .await;
        // The 404s are left out; another error passes.
        assert_eq!(out.len(), 1);
        assert!(matches!(out[0], Err(watcher::Error::NoResourceVersion)));
        assert!(seen.has_changed().unwrap());
        assert_eq!(
            *seen.borrow_and_update(),
            BTreeSet::from(["ForeignCluster"])
        );
        let msg = unavailable(&seen.borrow()).unwrap();
        assert!(
            msg.contains("Liqo's ForeignCluster") && msg.contains("--peering=false"),
            "{msg}"
        );

        // Liqo installed: the first list clears it.
        let events: Vec<Result<watcher::Event<ConfigMap>, watcher::Error>> = vec![
            Err(not_found()),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
        ];
        let out: Vec<_> = quiet(
            "ForeignCluster",
            presence.clone(),
            futures::stream::iter(events),
        )
        .collect()
        .await;
        assert_eq!(out.len(), 2);
        assert!(seen.borrow().is_empty());
        assert_eq!(unavailable(&seen.borrow()), None);
    }
}

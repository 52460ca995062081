//! Atomic edits of `Flavor.status.ledger`: read, decide, write with the read
//! `resourceVersion`, and on 409 Conflict re-read and decide again.
//!
//! This compare-and-swap on the Flavor object is the only thing that makes
//! concurrent reservations (from any number of gateway replicas) unable to
//! hold more than exists: a decision is written only if nobody wrote since it
//! was taken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fluidos_api::Flavor;
use fluidos_api::flavor::FlavorStatus;
use fluidos_api::ledger::LedgerEntry;
use kube::api::PostParams;
use kube::{Api, ResourceExt};

use crate::catalog::{Catalog, creation_timestamp};
use fluidos_controller::api_error::{is_conflict, is_not_found};
use fluidos_controller::metrics::LedgerMetrics;

use crate::error::ApiError;
use crate::time;

/// Upper bound of compare-and-swap rounds before answering 503.
const MAX_ATTEMPTS: u32 = 64;

/// What a decision on the ledger leads to.
pub(crate) enum Decision<T> {
    /// Write the edited ledger, then return the value.
    Write(T),
    /// Nothing to write; return the value.
    Keep(T),
}

impl Decision<bool> {
    /// Keeps only the entries `keep` accepts: `Write(true)` if any went,
    /// else `Keep(false)`.
    pub(crate) fn retain(
        entries: &mut Vec<LedgerEntry>,
        keep: impl FnMut(&LedgerEntry) -> bool,
    ) -> Decision<bool> {
        let before = entries.len();
        entries.retain(keep);
        if entries.len() == before {
            Decision::Keep(false)
        } else {
            Decision::Write(true)
        }
    }
}

/// Ledger access for one namespace.
#[derive(Clone)]
pub(crate) struct Book {
    api: Api<Flavor>,
    catalog: Arc<Catalog>,
    /// The last copy of each flavor this process wrote or read: newer than
    /// the watch cache until the watch catches up, which spares a doomed
    /// write (409) or a re-read right after our own write.
    latest: Arc<Mutex<HashMap<String, Arc<Flavor>>>>,
    /// Counts the compare-and-swap rounds lost to another writer.
    metrics: LedgerMetrics,
}

/// The numeric `resourceVersion` (etcd revision), when it is one.
fn revision(f: &Flavor) -> Option<u64> {
    f.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

/// A small random delay so colliding writers do not collide again in lockstep.
fn jitter(attempt: u32) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::fill(&mut b).map_or(0, |()| u16::from_le_bytes(b));
    let cap_us = (500 * u64::from(attempt)).min(20_000);
    Duration::from_micros(u64::from(r) % cap_us.max(1))
}

impl Book {
    /// Ledger access through `api`, reading from `catalog` first.
    pub(crate) fn new(api: Api<Flavor>, catalog: Arc<Catalog>, metrics: LedgerMetrics) -> Self {
        Book {
            api,
            catalog,
            latest: Arc::default(),
            metrics,
        }
    }

    fn note(&self, f: &Flavor) {
        if let Ok(mut m) = self.latest.lock() {
            m.insert(f.name_any(), Arc::new(f.clone()));
        }
    }

    /// Every flavor the watch cache knows, each in its newest local copy
    /// (the cache's, or our last write when that is newer).
    pub(crate) fn newest_all(&self) -> Vec<Arc<Flavor>> {
        let cached = self.catalog.all();
        let Ok(ours) = self.latest.lock() else {
            return cached;
        };
        cached
            .into_iter()
            .map(
                |c| match ours.get(c.metadata.name.as_deref().unwrap_or_default()) {
                    Some(o) if revision(o) > revision(&c) => o.clone(),
                    _ => c,
                },
            )
            .collect()
    }

    /// The flavor from the API server (fresh), 404 when absent.
    pub(crate) async fn fetch(&self, name: &str) -> Result<Flavor, ApiError> {
        match self.api.get(name).await {
            Ok(f) => {
                self.note(&f);
                Ok(f)
            }
            Err(e) if is_not_found(&e) => {
                Err(ApiError::not_found(format!("flavor {name:?} not found")).field("flavorID"))
            }
            Err(e) => Err(ApiError::kube("reading the flavor", &e)),
        }
    }

    /// The newest local copy (watch cache or our last write), else from the API server.
    pub(crate) async fn cached_or_fetch(&self, name: &str) -> Result<Flavor, ApiError> {
        let ours = self.latest.lock().ok().and_then(|m| m.get(name).cloned());
        let cached = self.catalog.get(name);
        let newest = match (cached, ours) {
            (Some(c), Some(o)) => match (revision(&c), revision(&o)) {
                (Some(rc), Some(ro)) if ro > rc => Some(o),
                _ => Some(c),
            },
            (c, o) => c.or(o),
        };
        match newest {
            Some(f) => Ok((*f).clone()),
            None => self.fetch(name).await,
        }
    }

    /// Runs `decide` on the flavor and its ledger until its write wins.
    ///
    /// `decide` gets the flavor, a mutable copy of its ledger and the current
    /// time; it may be called several times and must be free of side effects.
    pub(crate) async fn update<T>(
        &self,
        name: &str,
        decide: impl FnMut(&Flavor, &mut Vec<LedgerEntry>, &str) -> Result<Decision<T>, ApiError>,
    ) -> Result<T, ApiError> {
        let start = self.cached_or_fetch(name).await?;
        self.update_from(name, start, decide).await
    }

    /// Like [`Book::update`], deciding first on `start`: a copy known to
    /// contain what `decide` looks for (the watch cache may lag behind it).
    pub(crate) async fn update_from<T>(
        &self,
        name: &str,
        start: Flavor,
        mut decide: impl FnMut(&Flavor, &mut Vec<LedgerEntry>, &str) -> Result<Decision<T>, ApiError>,
    ) -> Result<T, ApiError> {
        let mut flavor = start;
        for attempt in 1..=MAX_ATTEMPTS {
            let now = time::now_string();
            let mut entries = flavor
                .status
                .as_ref()
                .and_then(|s| s.ledger.clone())
                .unwrap_or_default();
            let value = match decide(&flavor, &mut entries, &now)? {
                Decision::Keep(v) => return Ok(v),
                Decision::Write(v) => v,
            };
            let mut updated = flavor.clone();
            // Absent managedFields are kept as they are by the API server,
            // which then need not decode and compare them: a cheaper write.
            updated.metadata.managed_fields = None;
            let status = updated.status.get_or_insert_with(|| FlavorStatus {
                creation_time: creation_timestamp(&flavor),
                ..FlavorStatus::default()
            });
            status.last_update_time = now;
            status.ledger = Some(entries);
            match self
                .api
                .replace_status(&flavor.name_any(), &PostParams::default(), &updated)
                .await
            {
                Ok(written) => {
                    self.note(&written);
                    return Ok(value);
                }
                Err(e) if is_conflict(&e) => {
                    self.metrics.conflict();
                    tracing::debug!(flavor = name, attempt, "ledger write conflict; re-reading");
                    tokio::time::sleep(jitter(attempt)).await;
                    flavor = self.fetch(name).await?;
                }
                Err(e) if is_not_found(&e) => {
                    return Err(
                        ApiError::not_found(format!("flavor {name:?} not found")).field("flavorID")
                    );
                }
                Err(e) => return Err(ApiError::kube("writing the flavor ledger", &e)),
            }
        }
        Err(ApiError::unavailable(format!(
            "flavor {name:?} is under heavy contention; retry"
        )))
    }
}

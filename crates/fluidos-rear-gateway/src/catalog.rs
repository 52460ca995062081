//! The flavor catalog: a reflector (watch cache) of the namespace's Flavors
//! and, derived from it, the pre-serialized wire flavors the list routes send.
//!
//! Listing never calls the API server. The wire JSON of each flavor is built
//! once per change of the store (or when a hold expires, which changes what
//! remains) and the list answers are concatenations of those bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use fluidos_api::Flavor;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::ledger::{self, LedgerEntry, LedgerState, Resources};
use fluidos_api::quantity::Amount;
use fluidos_api::rear::WireFlavor;
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use crate::query::QuerySelector;
use crate::time;

/// One sellable flavor, ready to list and filter.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Decoded type data with the K8Slice characteristics set to what remains.
    pub data: FlavorTypeData,
    /// The wire JSON of the flavor (remaining amounts).
    pub json: Bytes,
}

/// Everything listable at one store generation.
#[derive(Debug)]
struct Snapshot {
    generation: u64,
    /// The earliest expiry of a live hold: what remains grows at that instant.
    valid_until: Option<String>,
    flavors: Vec<Prepared>,
    /// `GET /api/v2/flavors` body; `None` means 204.
    all: Option<Bytes>,
}

/// The watch cache plus the derived snapshot.
pub(crate) struct Catalog {
    namespace: String,
    store: Store<Flavor>,
    generation: Arc<AtomicU64>,
    snapshot: RwLock<Option<Arc<Snapshot>>>,
}

/// What is left of a K8Slice flavor, or why it cannot be sold.
pub(crate) fn remaining(
    k: &fluidos_api::flavor::K8Slice,
    ledger: &[LedgerEntry],
    now: &str,
) -> Result<Resources, String> {
    let total = Resources::of_characteristics(&k.characteristics).map_err(|e| e.to_string())?;
    let used = ledger::committed(ledger, now).map_err(|e| e.to_string())?;
    Ok(total.minus(used))
}

/// True when no valid partition fits in `left`: cpu, memory or pods is zero
/// or below the flavor's minimum.
pub(crate) fn exhausted(left: &Resources, p: &fluidos_api::flavor::Partitionability) -> bool {
    let below = |have: Amount, min: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        have.is_zero() || Amount::of(min).is_ok_and(|m| have < m)
    };
    below(left.cpu, &p.cpu_min)
        || below(left.memory, &p.memory_min)
        || below(left.pods, &p.pods_min)
}

/// The wire form of a stored flavor as listed now, or `None` when it is not for sale.
fn prepare(f: &Flavor, now: &str) -> Option<(Prepared, Option<String>)> {
    if !f.spec.availability {
        return None;
    }
    let name = f.name_any();
    let data = match f.spec.flavor_type.parse() {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(flavor = %name, error = %e, "not listing an undecodable flavor");
            return None;
        }
    };
    let ledger_entries: &[LedgerEntry] = f
        .status
        .as_ref()
        .and_then(|s| s.ledger.as_deref())
        .unwrap_or_default();
    let next_expiry = ledger_entries
        .iter()
        .filter(|e| e.state == LedgerState::Held && ledger::is_live(e, now))
        .filter_map(|e| e.expiration_time.clone())
        .min();
    let mut spec = f.spec.clone();
    let data = match data {
        FlavorTypeData::K8Slice(mut k) => {
            let left = match remaining(&k, ledger_entries, now) {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!(flavor = %name, error = %e, "not listing a flavor with a bad ledger");
                    return None;
                }
            };
            if exhausted(&left, &k.policies.partitionability) {
                return None;
            }
            left.apply_to(&mut k.characteristics);
            spec.flavor_type = fluidos_api::flavor::FlavorType::k8slice(&k);
            FlavorTypeData::K8Slice(k)
        }
        other => other,
    };
    let timestamp = creation_timestamp(f);
    let wire = WireFlavor::from_crd(&name, &spec, timestamp).ok()?;
    let json = serde_json::to_string(&wire).ok()?;
    Some((
        Prepared {
            data,
            json: Bytes::from(json),
        },
        next_expiry,
    ))
}

/// The flavor's creation time as the wire `timestamp` (RFC 3339).
pub(crate) fn creation_timestamp(f: &Flavor) -> String {
    f.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| time::format(t.0))
        .unwrap_or_default()
}

fn json_array<'a>(items: impl Iterator<Item = &'a Bytes>) -> Bytes {
    let mut out = Vec::with_capacity(4096);
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    Bytes::from(out)
}

impl Catalog {
    /// Starts watching Flavors in `namespace`; the returned future drives the watch.
    pub(crate) fn start(
        client: kube::Client,
        namespace: &str,
        ready: watch::Sender<bool>,
    ) -> (Arc<Catalog>, impl Future<Output = ()> + Send + 'static) {
        let api: Api<Flavor> = Api::namespaced(client, namespace);
        let (store, writer) = reflector::store();
        let generation = Arc::new(AtomicU64::new(0));
        let catalog = Arc::new(Catalog {
            namespace: namespace.to_owned(),
            store: store.clone(),
            generation: generation.clone(),
            snapshot: RwLock::new(None),
        });
        let driver = async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer);
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(ev) => {
                        generation.fetch_add(1, Ordering::AcqRel);
                        if matches!(ev, watcher::Event::InitDone) {
                            ready.send_replace(true);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "Flavor watch error; retrying"),
                }
            }
        };
        (catalog, driver)
    }

    /// The cached flavor named `name`, if the watch has seen it.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Flavor>> {
        self.store
            .get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// Every cached flavor.
    pub(crate) fn all(&self) -> Vec<Arc<Flavor>> {
        self.store.state()
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        let generation = self.generation.load(Ordering::Acquire);
        let now = time::now_string();
        let fresh = |s: &Snapshot| {
            s.generation == generation && s.valid_until.as_deref().is_none_or(|v| now.as_str() < v)
        };
        if let Ok(guard) = self.snapshot.read()
            && let Some(s) = guard.as_ref()
            && fresh(s)
        {
            return s.clone();
        }
        let mut flavors: Vec<Arc<Flavor>> = self.store.state();
        flavors.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut valid_until: Option<String> = None;
        let mut prepared = Vec::with_capacity(flavors.len());
        for f in &flavors {
            if let Some((p, exp)) = prepare(f, &now) {
                if let Some(exp) = exp {
                    valid_until = Some(match valid_until {
                        Some(v) if v <= exp => v,
                        _ => exp,
                    });
                }
                prepared.push(p);
            }
        }
        let all = (!prepared.is_empty()).then(|| json_array(prepared.iter().map(|p| &p.json)));
        let snap = Arc::new(Snapshot {
            generation,
            valid_until,
            flavors: prepared,
            all,
        });
        if let Ok(mut guard) = self.snapshot.write() {
            // A concurrent rebuild at a newer generation wins.
            if guard.as_ref().is_none_or(|s| s.generation <= generation) {
                *guard = Some(snap.clone());
            }
        }
        snap
    }

    /// Body of `GET /api/v2/flavors`; `None` when nothing is for sale (204).
    pub(crate) fn list_all(&self) -> Option<Bytes> {
        self.snapshot().all.clone()
    }

    /// Body of a filtered list: the flavors passing `selector` (maybe `[]`).
    pub(crate) fn list_matching(&self, selector: &QuerySelector) -> Bytes {
        let snap = self.snapshot();
        json_array(
            snap.flavors
                .iter()
                .filter(|p| selector.matches(&p.data))
                .map(|p| &p.json),
        )
    }
}

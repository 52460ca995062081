//! KnownCluster writes and the expiry sweep: the API-server edge of the
//! lifecycle decided in [`crate::lifecycle`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use fluidos_api::{KnownCluster, naming};
use jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::advertisement::Advertisement;
use crate::config::FIELD_MANAGER;
use crate::lifecycle::{self, Entry, Observed, Refresh, Verdict};
use crate::metrics::NetworkMetrics;

/// Prefix of the KnownClusters named after a node ID.
const NAME_PREFIX: &str = "knowncluster-";

/// What an advertisement did to its KnownCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No write: the expiry was far enough away.
    Unchanged,
    /// Spec and status written (new peer, or an expired one taken over).
    Created,
    /// Spec and status written: a live entry without a key pinned the one
    /// its node now advertises (see [`lifecycle::plan_refresh`]).
    Adopted,
    /// Only the status (expiry) written.
    Refreshed,
    /// Not recorded, and counted as dropped for this reason: another live
    /// address holds the node ID (`address_conflict`), the live entry has
    /// pinned another key than the one advertised, or the advertisement
    /// carries none (`fingerprint_conflict`), or there are [`MAX_PEERS`]
    /// entries already (`capacity`), or [`MAX_PEERS_PER_HOST`] live ones at
    /// the advertised host (`host_capacity`).
    Ignored(&'static str),
}

/// Most KnownClusters this manager keeps (hand-made ones count): beyond
/// it, advertisements of new node IDs are dropped until entries expire.
pub const MAX_PEERS: usize = 1000;

/// Most live KnownClusters at one host (the host of `spec.address`): one
/// LAN peer or broker client announcing node ID after node ID for its own
/// address cannot take all of [`MAX_PEERS`] from the real nodes. A host
/// runs one FLUIDOS node as a rule; a few behind one address still fit.
pub const MAX_PEERS_PER_HOST: usize = 16;

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// KnownClusters deleted as expired.
    pub deleted: usize,
    /// KnownClusters left in place.
    pub kept: usize,
    /// Deletions that failed (retried at the next sweep).
    pub failed: usize,
}

/// What this replica last knew of one KnownCluster, and since when.
#[derive(Clone, Debug)]
struct Cached {
    observed: Observed,
    noted_at: Instant,
}

/// Creates, refreshes and expires the KnownClusters of one namespace.
///
/// It remembers the expiry it last wrote or listed, so that most
/// advertisements cost no API call at all. Replicas share one field manager
/// (server-side apply, forced), so their writes merge instead of failing on
/// resource versions; each sweep's list teaches a replica what the others
/// wrote, and a delete is conditional on the listed resource version, so a
/// replica never deletes an object another one has just refreshed.
#[derive(Debug)]
pub struct KnownClusters {
    api: Api<KnownCluster>,
    ttl: Duration,
    metrics: NetworkMetrics,
    cache: HashMap<String, Cached>,
    max_peers: usize,
    max_peers_per_host: usize,
}

impl KnownClusters {
    /// Manages KnownClusters in `namespace`, each living `ttl` after an advertisement.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        ttl: Duration,
        metrics: NetworkMetrics,
    ) -> Self {
        KnownClusters {
            api: Api::namespaced(client, namespace),
            ttl,
            metrics,
            cache: HashMap::new(),
            max_peers: MAX_PEERS,
            max_peers_per_host: MAX_PEERS_PER_HOST,
        }
    }

    /// Creates or refreshes the KnownCluster of `ad`'s node when the
    /// lifecycle says so. On error nothing is remembered, so the next
    /// advertisement from that node tries again.
    pub async fn observe(&mut self, ad: &Advertisement) -> Result<Outcome, Error> {
        // (Not beyond the cap: a flood of new node IDs costs no API call.)
        if !self.cache.contains_key(&ad.node_id) && self.cache.len() < self.max_peers {
            self.learn(&ad.node_id).await?;
        }
        let now = Timestamp::now();
        let current = self.cache.get(&ad.node_id).map(|c| &c.observed);
        if current.is_none() && self.live_at_host(&ad.ip, now) >= self.max_peers_per_host {
            return Ok(self.ignored("host_capacity"));
        }
        let room = self.cache.len() < self.max_peers;
        let fingerprint = ad.fingerprint.as_deref();
        let plan = lifecycle::plan_refresh(current, &ad.ip, fingerprint, now, self.ttl, room);
        let (spec, outcome) = match plan {
            Refresh::Skip => return Ok(Outcome::Unchanged),
            Refresh::Conflict => return Ok(self.ignored("address_conflict")),
            Refresh::KeyConflict => return Ok(self.ignored("fingerprint_conflict")),
            Refresh::Full => return Ok(self.ignored("capacity")),
            Refresh::Adopt => (true, Outcome::Adopted),
            Refresh::Write { spec: true } => (true, Outcome::Created),
            Refresh::Write { spec: false } => (false, Outcome::Refreshed),
        };
        let name = naming::known_cluster_name(&ad.node_id);
        if spec {
            self.apply_spec(&name, &ad.ip, fingerprint).await?;
        }
        let expiry = lifecycle::expiry(now, self.ttl);
        match self.apply_status(&name, now, expiry).await {
            // Deleted behind our back (by a user or another replica's
            // sweep) while we thought it fresh: create it again (with the
            // cached key: a refresh means the advertisement carried it).
            Err(Error::ApplyStatus { source, .. }) if !spec && is_status(&source, 404) => {
                self.apply_spec(&name, &ad.ip, fingerprint).await?;
                self.apply_status(&name, now, expiry).await?;
            }
            other => other?,
        }
        self.cache.insert(
            ad.node_id.clone(),
            Cached {
                observed: Observed {
                    address: ad.ip.clone(),
                    fingerprint: ad.fingerprint.clone(),
                    expiry: Some(expiry),
                },
                noted_at: Instant::now(),
            },
        );
        Ok(outcome)
    }

    /// Reads the stored KnownCluster of a node this replica knows nothing
    /// about (just started, or its sweep's list failed, or another replica
    /// made it): deciding on an empty cache would overwrite a live entry's
    /// address and key with whatever an advertisement claims.
    async fn learn(&mut self, node_id: &str) -> Result<(), Error> {
        let name = naming::known_cluster_name(node_id);
        let Some(kc) = self
            .api
            .get_opt(&name)
            .await
            .map_err(|source| Error::Get { name, source })?
        else {
            return Ok(());
        };
        self.cache.insert(
            node_id.to_owned(),
            Cached {
                observed: observed_of(&kc),
                noted_at: Instant::now(),
            },
        );
        Ok(())
    }

    fn ignored(&self, reason: &'static str) -> Outcome {
        self.metrics.dropped(reason);
        Outcome::Ignored(reason)
    }

    /// Live entries (not known to be expired) whose address is at the host
    /// of `address`.
    fn live_at_host(&self, address: &str, now: Timestamp) -> usize {
        let host = host_of(address);
        self.cache
            .values()
            .filter(|c| c.observed.expiry.is_none_or(|e| e > now))
            .filter(|c| host_of(&c.observed.address) == host)
            .count()
    }

    /// Caps the live entries at one host (default [`MAX_PEERS_PER_HOST`]).
    #[must_use]
    pub fn with_max_peers_per_host(mut self, max: usize) -> Self {
        self.max_peers_per_host = max;
        self
    }

    /// Caps the entries kept (default [`MAX_PEERS`]).
    #[must_use]
    pub fn with_max_peers(mut self, max_peers: usize) -> Self {
        self.max_peers = max_peers;
        self
    }

    /// Lists the namespace's KnownClusters, deletes the expired ones and
    /// learns the expiry of the others. A failed deletion is counted and
    /// left for the next sweep; it does not stop this one.
    pub async fn sweep(&mut self) -> Result<Sweep, Error> {
        let started = Instant::now();
        let list = self
            .api
            .list(&ListParams::default())
            .await
            .map_err(Error::List)?;
        let now = Timestamp::now();
        let mut sweep = Sweep::default();
        let mut seen = HashSet::new();
        for kc in list {
            let name = kc.name_any();
            let verdict = lifecycle::judge(entry_of(&kc), now, self.ttl);
            if verdict == Verdict::Delete {
                match self.delete(&kc).await {
                    Ok(()) => {
                        sweep.deleted += 1;
                        tracing::info!(knowncluster = %name, address = %kc.spec.address, "peer expired");
                    }
                    Err(e) => {
                        sweep.failed += 1;
                        self.metrics.failed(e.step());
                        tracing::warn!(error = %e, "deleting an expired KnownCluster failed; will retry");
                    }
                }
                continue;
            }
            sweep.kept += 1;
            let Some(node_id) = name.strip_prefix(NAME_PREFIX) else {
                continue;
            };
            seen.insert(node_id.to_owned());
            let written_since = self
                .cache
                .get(node_id)
                .is_some_and(|c| c.noted_at > started);
            if !written_since {
                self.cache.insert(
                    node_id.to_owned(),
                    Cached {
                        observed: observed_of(&kc),
                        noted_at: started,
                    },
                );
            }
        }
        // Forget objects gone from the API (deleted here, by hand, or by
        // another replica), unless written after the list began.
        self.cache
            .retain(|id, c| seen.contains(id) || c.noted_at > started);
        Ok(sweep)
    }

    /// Applies `spec`: the address, and the key when there is one. Without
    /// a key the field is left out of the apply, so a key this manager
    /// wrote earlier (an expired entry taken over by a keyless node) is
    /// removed.
    async fn apply_spec(
        &self,
        name: &str,
        address: &str,
        fingerprint: Option<&str>,
    ) -> Result<(), Error> {
        let mut spec = json!({"address": address});
        if let (Some(fingerprint), Some(fields)) = (fingerprint, spec.as_object_mut()) {
            fields.insert("fingerprint".into(), fingerprint.into());
        }
        let patch = json!({
            "apiVersion": KnownCluster::api_version(&()),
            "kind": KnownCluster::kind(&()),
            "metadata": {"name": name},
            "spec": spec,
        });
        self.api
            .patch(name, &apply_params(), &Patch::Apply(patch))
            .await
            .map_err(|source| Error::ApplySpec {
                name: name.to_owned(),
                source,
            })?;
        self.metrics.wrote("spec");
        Ok(())
    }

    async fn apply_status(
        &self,
        name: &str,
        now: Timestamp,
        expiry: Timestamp,
    ) -> Result<(), Error> {
        let patch = json!({
            "apiVersion": KnownCluster::api_version(&()),
            "kind": KnownCluster::kind(&()),
            "metadata": {"name": name},
            "status": {
                "expirationTime": lifecycle::format_time(expiry),
                "lastUpdateTime": lifecycle::format_time(now),
            },
        });
        self.api
            .patch_status(name, &apply_params(), &Patch::Apply(patch))
            .await
            .map_err(|source| Error::ApplyStatus {
                name: name.to_owned(),
                source,
            })?;
        self.metrics.wrote("status");
        Ok(())
    }

    async fn delete(&self, kc: &KnownCluster) -> Result<(), Error> {
        let name = kc.name_any();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: kc.resource_version(),
                uid: kc.uid(),
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&name, &params).await {
            Ok(_) => {
                self.metrics.wrote("delete");
                Ok(())
            }
            // Already gone, or refreshed since the list: nothing to do.
            Err(e) if is_status(&e, 404) || is_status(&e, 409) => Ok(()),
            Err(source) => Err(Error::Delete { name, source }),
        }
    }
}

/// Feeds advertisements from `advertisements` into `known` and sweeps
/// every `housekeeping_interval` (first at once), until `shutdown` or the
/// channel closes. A failed API call is logged and counted; the next
/// advertisement or sweep retries it.
pub async fn maintain(
    mut known: KnownClusters,
    mut advertisements: mpsc::Receiver<Advertisement>,
    housekeeping_interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(housekeeping_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if let Err(e) = known.sweep().await {
                    known.metrics.failed(e.step());
                    tracing::warn!(error = %e, "KnownCluster housekeeping failed; will retry");
                }
            }
            ad = advertisements.recv() => {
                let Some(ad) = ad else { return };
                match known.observe(&ad).await {
                    Ok(Outcome::Created) => {
                        tracing::info!(node_id = %ad.node_id, address = %ad.ip, fingerprint = fingerprint_of(&ad), "peer discovered");
                    }
                    Ok(Outcome::Adopted) => {
                        tracing::info!(node_id = %ad.node_id, address = %ad.ip, fingerprint = fingerprint_of(&ad), "peer's REAR key pinned");
                    }
                    Ok(Outcome::Refreshed | Outcome::Unchanged) => {}
                    // Counted; at debug level, as a flood of them must not flood the log.
                    Ok(Outcome::Ignored(reason)) => {
                        tracing::debug!(node_id = %ad.node_id, address = %ad.ip, fingerprint = fingerprint_of(&ad), reason, "advertisement ignored");
                    }
                    Err(e) => {
                        known.metrics.failed(e.step());
                        tracing::warn!(error = %e, node_id = %ad.node_id, "recording an advertisement failed; the next one retries");
                    }
                }
            }
        }
    }
}

/// The host of a `host:port`, what the per-host cap counts by: an IP
/// address by value (`[::1]` = `[0:0::1]`, a v4-mapped one as IPv4), a name
/// lower-cased.
fn host_of(address: &str) -> String {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

/// The advertised key for logs (`none` from Go nodes).
fn fingerprint_of(ad: &Advertisement) -> &str {
    ad.fingerprint.as_deref().unwrap_or("none")
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// What a stored KnownCluster says, for the lifecycle's decisions.
fn observed_of(kc: &KnownCluster) -> Observed {
    Observed {
        address: kc.spec.address.clone(),
        fingerprint: kc.spec.fingerprint.clone(),
        expiry: kc
            .status
            .as_ref()
            .and_then(|s| lifecycle::parse_time(&s.expiration_time)),
    }
}

fn entry_of(kc: &KnownCluster) -> Entry<'_> {
    Entry {
        expiration_time: kc.status.as_ref().map(|s| s.expiration_time.as_str()),
        created: kc.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ours: kc
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some(FIELD_MANAGER)),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn hosts_are_compared_by_value() {
        assert_eq!(host_of("10.0.0.1:30000"), host_of("10.0.0.1:1"));
        assert_eq!(host_of("[::1]:1"), host_of("[0:0::1]:2"));
        assert_eq!(host_of("[::ffff:10.0.0.1]:1"), host_of("10.0.0.1:2"));
        assert_eq!(host_of("Node.Example:1"), host_of("node.example:2"));
        assert_ne!(host_of("10.0.0.1:1"), host_of("10.0.0.2:1"));
    }
}

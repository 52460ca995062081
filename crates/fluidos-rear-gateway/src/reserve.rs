//! RESERVE: validate, hold capacity on the flavor's ledger, persist a Transaction.
//!
//! Two effects, issued concurrently, each safe to interrupt:
//! - create the Transaction CR (name = transaction ID);
//! - append a `Held` ledger entry with a compare-and-swap on the Flavor.
//!
//! If only the Transaction is written, purchase rejects it and the sweeper
//! deletes it at expiry; if only the hold is written (its Transaction create
//! failed), the hold is released, or else expires. A repeated RESERVE that
//! finds a hold without Transaction waits briefly, then drops it as orphan.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use fluidos_api::common::HostingPolicy;
use fluidos_api::configuration::{ConfigurationData, K8SliceConfiguration, ServiceConfiguration};
use fluidos_api::flavor::{FlavorTypeData, K8Slice, ServiceFlavor};
use fluidos_api::ledger::{
    self, LedgerEntry, LedgerResources, LedgerState, PartitionError, Resources,
};
use fluidos_api::rear::{ReserveRequest, WireConfiguration, WireTransaction};
use fluidos_api::reservation::TransactionSpec;
use fluidos_api::service_delivery::ServiceDelivery;
use fluidos_api::{Configuration, Flavor, FlavorTypeIdentifier, Transaction};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};

use crate::book::Decision;
use crate::buyer::{SaleOwner, check_owner};
use crate::catalog::remaining;
use fluidos_controller::api_error::is_not_found;

use crate::error::ApiError;
use crate::{State, decode, labels, rate_limit, time};

/// What the buyer asks of the flavor, validated against its type.
#[derive(Debug, Clone)]
pub(crate) enum Want {
    /// A partition, or the whole flavor when `None`.
    K8Slice(Option<K8SliceConfiguration>),
    /// A service instance.
    Service,
}

/// The flavor's decoded type, with 400 for types REAR does not sell.
pub(crate) fn flavor_data(f: &Flavor) -> Result<FlavorTypeData, ApiError> {
    match f.spec.flavor_type.identifier() {
        Some(FlavorTypeIdentifier::K8Slice | FlavorTypeIdentifier::Service) => {
            f.spec.flavor_type.parse().map_err(|e| {
                tracing::warn!(flavor = %f.name_any(), error = %e, "undecodable flavor");
                ApiError::internal(format!("flavor {} is malformed: {e}", f.name_any()))
            })
        }
        _ => Err(ApiError::bad_request(format!(
            "Flavor type not supported: {:?}",
            f.spec.flavor_type.type_identifier
        ))
        .field("flavorID")),
    }
}

/// `Retry-After` of a RESERVE refused for the buyer's hold cap.
const HOLD_CAP_RETRY_AFTER_SECS: u64 = 30;

/// Checks a service configuration: hosting policy offered, data valid for the template.
/// `pods_on_buyer`: whether this sale may put the service's pods on the
/// buyer's cluster (this node delivers by Liqo, to a buyer known by its key).
fn check_service(
    s: &ServiceFlavor,
    c: &ServiceConfiguration,
    pods_on_buyer: bool,
) -> Result<(), ApiError> {
    if let Some(p) = c.hosting_policy
        && !s.hosting_policies.contains(&p)
    {
        return Err(ApiError::bad_request(format!(
            "hosting policy {p:?} is not offered (offered: {:?})",
            s.hosting_policies
        ))
        .field("configuration.data.hostingPolicy"));
    }
    // Asked for explicitly, a policy this sale cannot honour is refused now
    // rather than silently served from the provider after the sale (the
    // blueprint's default, when nothing is asked, is served from here with a
    // warning event). The purchase checks the buyer then sends a kubeconfig.
    if let Some(p @ (HostingPolicy::Consumer | HostingPolicy::Shared)) = c.hosting_policy
        && !pods_on_buyer
    {
        return Err(ApiError::bad_request(format!(
            "hosting policy {p:?} puts service pods on the buyer's cluster, which needs delivery \
             by Liqo namespace offloading: this provider delivers services over REAR (they run on \
             its own cluster), or the buyer is not known by its key (plain HTTP); ask for \
             Provider or leave hostingPolicy out"
        ))
        .field("configuration.data.hostingPolicy"));
    }
    let validator = jsonschema::validator_for(&s.configuration_template).map_err(|e| {
        ApiError::internal(format!(
            "the flavor's configurationTemplate is not a valid JSON Schema: {e}"
        ))
    })?;
    let errors: Vec<_> = validator.iter_errors(&c.configuration_data).collect();
    if let Some(first) = errors.first() {
        let pointer = first.instance_path().to_string();
        let field = format!(
            "configuration.data.configurationData{}",
            pointer.replace('/', ".")
        );
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(ApiError::bad_request(format!(
            "configurationData does not match the flavor's configurationTemplate: {}",
            all.join("; ")
        ))
        .field(field));
    }
    Ok(())
}

/// Validates the request against the flavor; returns the CR configuration and what is wanted.
pub(crate) fn validate(
    f: &Flavor,
    req: &ReserveRequest,
    pods_on_buyer: bool,
) -> Result<(Option<Configuration>, Want), ApiError> {
    let data = flavor_data(f)?;
    let flavor_type = match &data {
        FlavorTypeData::K8Slice(_) => FlavorTypeIdentifier::K8Slice,
        FlavorTypeData::Service(_) => FlavorTypeIdentifier::Service,
    };
    let parsed = match &req.configuration {
        None => None,
        Some(wc) => {
            match FlavorTypeIdentifier::from_wire(&wc.type_) {
                Some(t) if t == flavor_type => {}
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "Configuration type not supported: {:?} for a {} flavor",
                        wc.type_,
                        flavor_type.wire_name()
                    ))
                    .field("configuration.type"));
                }
            }
            Some(wc.to_crd()?)
        }
    };
    match (data, parsed) {
        (FlavorTypeData::K8Slice(_), None) => Ok((None, Want::K8Slice(None))),
        (FlavorTypeData::K8Slice(_), Some((crd, ConfigurationData::K8Slice(k)))) => {
            Ok((Some(crd), Want::K8Slice(Some(k))))
        }
        (FlavorTypeData::Service(s), None) => {
            // Upstream bug 4 (always 500) fixed: no configuration means the
            // default policy and `{}`, which must satisfy the template.
            check_service(
                &s,
                &ServiceConfiguration {
                    hosting_policy: None,
                    configuration_data: serde_json::json!({}),
                },
                pods_on_buyer,
            )?;
            Ok((None, Want::Service))
        }
        (FlavorTypeData::Service(s), Some((crd, ConfigurationData::Service(c)))) => {
            check_service(&s, &c, pods_on_buyer)?;
            Ok((Some(crd), Want::Service))
        }
        _ => Err(
            ApiError::bad_request("configuration does not match the flavor type")
                .field("configuration.type"),
        ),
    }
}

fn partition_error(e: PartitionError) -> ApiError {
    match e {
        PartitionError::Insufficient { .. } => ApiError::conflict(e.to_string()),
        PartitionError::Quantity(q) => {
            ApiError::bad_request(q.to_string()).field("configuration.data")
        }
        PartitionError::Negative(r) => ApiError::bad_request(e.to_string()).field(format!(
            "configuration.data.{}",
            r.split('/').next().unwrap_or(r)
        )),
        PartitionError::BelowMinimum { resource, .. } => {
            ApiError::bad_request(e.to_string()).field(format!("configuration.data.{resource}"))
        }
    }
}

/// What a K8Slice hold takes, checked against what remains now.
pub(crate) fn k8slice_take(
    k: &K8Slice,
    want: Option<&K8SliceConfiguration>,
    entries: &[LedgerEntry],
    now: &str,
) -> Result<LedgerResources, ApiError> {
    let left = remaining(k, entries, now).map_err(ApiError::internal)?;
    match want {
        Some(c) => {
            let requested = Resources::of_configuration(c)
                .map_err(|e| ApiError::bad_request(e.to_string()).field("configuration.data"))?;
            refuse_zero_size(&requested)?;
            ledger::check_partition(requested, left, &k.policies.partitionability)
                .map_err(partition_error)?;
            Ok(LedgerResources::from(c))
        }
        None => {
            let total = Resources::of_characteristics(&k.characteristics)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            if left != total {
                return Err(ApiError::conflict(
                    "the flavor is partly reserved or sold; send a configuration for a partition",
                ));
            }
            let c = &k.characteristics;
            Ok(LedgerResources {
                cpu: c.cpu.0.clone(),
                memory: c.memory.0.clone(),
                pods: c.pods.0.clone(),
                gpu: c.gpu.as_ref().map(|g| g.cores.0.clone()),
                storage: c.storage.as_ref().map(|s| s.0.clone()),
            })
        }
    }
}

/// A partition with no CPU, memory or pods runs nothing and would let a
/// buyer take holds for free, and a fraction of a pod is no pod: 400
/// naming the resource (pure).
fn refuse_zero_size(r: &Resources) -> Result<(), ApiError> {
    for (name, amount) in [("cpu", &r.cpu), ("memory", &r.memory), ("pods", &r.pods)] {
        if amount.nanos == 0 {
            return Err(ApiError::bad_request(format!(
                "a partition needs some {name}; 0 was asked"
            ))
            .field(format!("configuration.data.{name}")));
        }
    }
    if r.pods.nanos % 1_000_000_000 != 0 {
        return Err(
            ApiError::bad_request(format!("pods must be a whole number, not {}", r.pods))
                .field("configuration.data.pods"),
        );
    }
    Ok(())
}

/// Most live entries (holds and sales) one Flavor's ledger may carry: the
/// ledger lives in the Flavor object, which etcd bounds (~1.5 MiB), and
/// buyer IDs are only what clients claim, so many tiny holds under invented
/// IDs must not grow it until no sale of the flavor can be written.
pub const MAX_LEDGER_ENTRIES: usize = 256;

/// Drops dead holds (we are writing the ledger anyway), then refuses a new
/// entry when the live ones fill it (pure).
fn drop_dead_within_cap(entries: &mut Vec<LedgerEntry>, now: &str) -> Result<(), ApiError> {
    entries.retain(|e| ledger::is_live(e, now));
    refuse_full_ledger(entries.len())
}

/// 409 when the ledger, without its dead holds, is full (pure).
fn refuse_full_ledger(live_entries: usize) -> Result<(), ApiError> {
    if live_entries >= MAX_LEDGER_ENTRIES {
        return Err(ApiError::conflict(format!(
            "the flavor has {live_entries} open reservations and sales, the most one flavor \
             carries ({MAX_LEDGER_ENTRIES}); try again once some expire"
        )));
    }
    Ok(())
}

/// Whose holds the per-buyer cap counts together: everything one key
/// reserved, whatever buyer IDs it wrote; a plain-HTTP buyer by its ID and
/// address (pure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HoldCounter {
    owner: SaleOwner,
    buyer_id: String,
}

impl HoldCounter {
    pub(crate) fn new(owner: SaleOwner, buyer_id: &str) -> Self {
        HoldCounter {
            owner,
            buyer_id: buyer_id.to_owned(),
        }
    }

    fn counts(&self, e: &LedgerEntry) -> bool {
        match self.owner {
            SaleOwner::Key(fp) => e.buyer_key.as_deref() == Some(fp.to_string().as_str()),
            // By ID and address: another address writing this buyer's ID
            // counts on its own, and cannot use up this buyer's holds.
            SaleOwner::PlainHttp(_) => {
                e.buyer_key.is_none()
                    && e.buyer_id == self.buyer_id
                    && e.buyer_address == self.owner.address()
            }
        }
    }

    /// The key of its in-progress count.
    fn slot_key(&self) -> String {
        match self.owner {
            SaleOwner::Key(fp) => fp.to_string(),
            SaleOwner::PlainHttp(ip) => format!(
                "id:{}@{}",
                self.buyer_id,
                ip.map(|ip| ip.to_string()).unwrap_or_default()
            ),
        }
    }

    /// How the buyer is named in the refusal.
    fn describe(&self) -> String {
        match self.owner {
            SaleOwner::Key(fp) => format!("the peer with key {fp}"),
            SaleOwner::PlainHttp(_) => format!("buyer {}", self.buyer_id),
        }
    }
}

/// Live holds over `flavors` at `now` that `counts` (pure): what the hold
/// caps count.
fn live_holds_where<'a>(
    flavors: impl IntoIterator<Item = &'a Flavor>,
    now: &str,
    counts: impl Fn(&LedgerEntry) -> bool,
) -> usize {
    flavors
        .into_iter()
        .flat_map(ledger_of)
        .filter(|e| e.state == LedgerState::Held && counts(e) && ledger::is_live(e, now))
        .count()
}

/// Live holds counted by `counter` over `flavors` at `now` (pure).
pub(crate) fn live_holds_of<'a>(
    flavors: impl IntoIterator<Item = &'a Flavor>,
    counter: &HoldCounter,
    now: &str,
) -> usize {
    live_holds_where(flavors, now, |e| counter.counts(e))
}

/// Live holds reserved from `peer` (a [`rate_limit::peer_key`], as
/// recorded in `sourcePeer`) over `flavors` at `now`, whatever keys or
/// buyer IDs they name (pure).
pub(crate) fn live_holds_from<'a>(
    flavors: impl IntoIterator<Item = &'a Flavor>,
    peer: &str,
    now: &str,
) -> usize {
    live_holds_where(flavors, now, |e| e.source_peer.as_deref() == Some(peer))
}

/// The expiry a renewed hold gets at `now`: `ttl` later, but never more
/// than `max_age` after the hold was created (pure; the strings compare
/// as times).
pub(crate) fn renewed_expiry(
    now: jiff::Timestamp,
    created: Option<jiff::Timestamp>,
    ttl: Duration,
    max_age: Duration,
) -> String {
    let renewed = time::expiry_at(now, ttl);
    match created {
        Some(c) => renewed.min(time::expiry_at(c, max_age)),
        None => renewed,
    }
}

/// New holds being taken right now, per buyer: with the holds already on
/// the ledgers, what the per-buyer cap counts.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<String, usize>>);

/// One new hold of a buyer in progress; dropping it ends it.
pub(crate) struct Slot<'a> {
    owner: &'a InFlight,
    buyer: String,
}

impl InFlight {
    /// A slot for a new hold of `buyer`, unless its `live` holds plus those
    /// in progress reach `cap`; then how many it has.
    fn take(
        &self,
        buyer: &str,
        live: impl FnOnce() -> usize,
        cap: usize,
    ) -> Result<Slot<'_>, usize> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pending = map.get(buyer).copied().unwrap_or(0);
        let held = live() + pending;
        if held >= cap {
            return Err(held);
        }
        *map.entry(buyer.to_owned()).or_default() += 1;
        Ok(Slot {
            owner: self,
            buyer: buyer.to_owned(),
        })
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut map = self
            .owner
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.buyer) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.buyer);
            }
        }
    }
}

/// The in-progress slots of one new hold: its buyer's and its peer
/// address's (dropping it ends both).
pub(crate) struct HoldSlots<'a> {
    _buyer: Slot<'a>,
    _peer: Option<Slot<'a>>,
}

/// `hold`, ending `slot` as soon as the hold is on the ledger: the cap
/// counts this process's newest ledgers, where the slot would count it a
/// second time (under load, concurrent reserves of one buyer were refused
/// below the cap).
async fn ending_slot_when_held<E>(
    hold: impl Future<Output = Result<Outcome, E>>,
    slot: &mut Option<HoldSlots<'_>>,
) -> Result<Outcome, E> {
    let outcome = hold.await;
    if matches!(outcome, Ok(Outcome::Held)) {
        *slot = None;
    }
    outcome
}

/// Decides a new hold on the current ledger: the entry to append, or an error.
fn take(
    f: &Flavor,
    want: &Want,
    entries: &[LedgerEntry],
    now: &str,
) -> Result<Option<LedgerResources>, ApiError> {
    if !f.spec.availability {
        return Err(ApiError::conflict("flavor is not available"));
    }
    match (flavor_data(f)?, want) {
        (FlavorTypeData::K8Slice(k), Want::K8Slice(c)) => {
            k8slice_take(&k, c.as_ref(), entries, now).map(Some)
        }
        // A service instance takes no capacity; the hold only records the buyer.
        (FlavorTypeData::Service(_), Want::Service) => Ok(None),
        _ => Err(ApiError::conflict("the flavor changed type; retry")),
    }
}

/// The live hold of `buyer` on this flavor taken by `owner`, if any (pure).
/// A hold is found by buyer ID **and** key, or for a plain-HTTP buyer by
/// buyer ID **and** address: another key, or another address, writing the
/// same buyer ID neither renews nor blocks it, it reserves on its own (so
/// that claiming someone's ID locks nobody out and reveals nothing, not
/// even its transaction ID).
fn live_hold<'a>(
    entries: &'a [LedgerEntry],
    buyer: &str,
    owner: SaleOwner,
    now: &str,
) -> Option<&'a LedgerEntry> {
    let (key, address) = (owner.key(), owner.address());
    entries.iter().find(|e| {
        e.state == LedgerState::Held
            && e.buyer_id == buyer
            && e.buyer_key == key
            && e.buyer_address == address
            && ledger::is_live(e, now)
    })
}

fn ledger_of(f: &Flavor) -> &[LedgerEntry] {
    f.status
        .as_ref()
        .and_then(|s| s.ledger.as_deref())
        .unwrap_or_default()
}

/// The RESERVE body, checked in size and format before anything in it is
/// logged, stored or looked up, and the buyer's Liqo ID it must carry.
fn decode_reserve(body: &[u8]) -> Result<(ReserveRequest, String), ApiError> {
    let req: ReserveRequest = decode::json(body)?;
    crate::limits::check_reserve(&req)?;
    // The REAR handler's span declares the field; a sale's log lines carry it.
    tracing::Span::current().record("flavor_id", req.flavor_id.as_str());
    let Some(liqo_id) = req.buyer.liqo_id().map(str::to_owned) else {
        return Err(ApiError::bad_request("Error: LiqoID not provided")
            .field("buyerID.additionalInformation.liqoID"));
    };
    Ok((req, liqo_id))
}

/// 409 when a repeated RESERVE asks for something else than the hold it
/// would renew: answering with the old hold (as the Go node does) would let
/// the buyer believe it holds what it asked for (pure).
fn refuse_other_configuration(
    held: Option<&Configuration>,
    asked: Option<&Configuration>,
    tx_id: &str,
) -> Result<(), ApiError> {
    // Amounts by value: a hold written in another spelling or notation
    // (before quantities were stored canonically, or by hand) is the same
    // request.
    let same = match (held, asked) {
        (None, None) => true,
        (Some(held), Some(asked)) => held.same_request(asked),
        _ => false,
    };
    if same {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "this buyer already holds the flavor with another configuration (transaction {tx_id}); \
         buy that one, send the same configuration, or wait until the hold expires"
    ))
    .field("configuration"))
}

/// A fresh transaction ID: `<32 hex random>-<unix nanos>`.
fn new_transaction_id() -> Result<String, ApiError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random)
        .map_err(|e| ApiError::internal(format!("no randomness for a transaction ID: {e}")))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    Ok(fluidos_api::naming::transaction_id(&random, nanos))
}

enum Outcome {
    /// Our hold was written.
    Held,
    /// The same buyer already holds this flavor under another transaction.
    Existing,
}

enum Refresh {
    Done(Box<WireTransaction>),
    /// The hold has no Transaction (or vanished): reserve anew.
    Gone,
}

impl State {
    /// Whether a sale to `caller` may put a service's pods on its cluster:
    /// only a buyer known by its key can be delivered by Liqo (its purchase
    /// must then carry a kubeconfig, which the purchase checks).
    fn pods_on_buyer(&self, caller: SaleOwner) -> bool {
        self.cfg.service_delivery == ServiceDelivery::Liqo && matches!(caller, SaleOwner::Key(_))
    }

    /// Handles a RESERVE body.
    #[expect(
        clippy::too_many_lines,
        reason = "one compare-and-swap loop: a renewed hold, a new one, its Transaction, each retried in turn"
    )]
    pub(crate) async fn reserve(
        &self,
        body: &[u8],
        caller: SaleOwner,
        source: Option<std::net::IpAddr>,
    ) -> Result<WireTransaction, ApiError> {
        let (req, liqo_id) = decode_reserve(body)?;
        let mut flavor = self.book.cached_or_fetch(&req.flavor_id).await?;
        let (crd_config, want) = validate(&flavor, &req, self.pods_on_buyer(caller))?;
        self.admit_buyer(&flavor, caller, source, false).await?;
        let peer = source.map(|ip| rate_limit::peer_key(ip).to_string());

        let buyer = req.buyer.id.clone();
        let mut slot = None;
        for round in 0..4 {
            if round > 0 {
                flavor = self.book.fetch(&req.flavor_id).await?;
            }
            let now = time::now_string();
            if let Some(hold) = live_hold(ledger_of(&flavor), &buyer, caller, &now) {
                let tx_id = hold.transaction_id.clone();
                match self
                    .refresh(&req, crd_config.as_ref(), caller, &flavor, &tx_id)
                    .await?
                {
                    Refresh::Done(tx) => return Ok(*tx),
                    Refresh::Gone => {
                        self.release(&flavor, &tx_id).await?;
                        continue;
                    }
                }
            }
            if slot.is_none() {
                let counter = HoldCounter::new(caller, &req.buyer.id);
                slot = Some(self.hold_slots(&counter, peer.as_deref())?);
            }
            // Cheap early answer from the cache; confirmed fresh before a 409.
            if let Err(e) = take(&flavor, &want, ledger_of(&flavor), &now) {
                if round == 0 && e.status == axum::http::StatusCode::CONFLICT {
                    continue;
                }
                return Err(e);
            }
            let tx_id = new_transaction_id()?;
            let expiration =
                time::expiry_after(self.cfg.transaction_ttl.min(self.cfg.max_hold_age));
            let tx = self.transaction_object(
                &flavor,
                &req,
                &liqo_id,
                &tx_id,
                &expiration,
                (crd_config.clone(), caller),
            );
            let entry_tx = tx_id.clone();
            let entry_exp = expiration.clone();
            let hold = self.book.update(&req.flavor_id, |f, entries, now| {
                if live_hold(entries, &buyer, caller, now).is_some() {
                    return Ok(Decision::Keep(Outcome::Existing));
                }
                let resources = take(f, &want, entries, now)?;
                drop_dead_within_cap(entries, now)?;
                entries.push(LedgerEntry {
                    transaction_id: entry_tx.clone(),
                    buyer_id: buyer.clone(),
                    buyer_key: caller.key(),
                    buyer_address: caller.address(),
                    source_peer: peer.clone(),
                    state: LedgerState::Held,
                    resources,
                    expiration_time: Some(entry_exp.clone()),
                    contract: None,
                });
                Ok(Decision::Write(Outcome::Held))
            });
            let hold = ending_slot_when_held(hold, &mut slot);
            // Both writes at once: one API round trip of latency instead of two.
            // A hold may thus briefly exist before its Transaction; `refresh`
            // waits for it before calling a hold an orphan.
            let (created, outcome) = tokio::join!(self.create_transaction(&tx), hold);
            let outcome = match (created, outcome) {
                (Ok(()), o) => o,
                (Err(e), Ok(Outcome::Held)) => {
                    self.release_fresh(&req.flavor_id, &tx_id).await;
                    return Err(e);
                }
                (Err(_), Ok(Outcome::Existing)) => continue,
                (Err(_), Err(o)) => return Err(o),
            };
            match outcome {
                Ok(Outcome::Held) => {
                    // A transaction ID is what buys the hold: logged at debug only.
                    tracing::info!(flavor = %req.flavor_id, buyer = %req.buyer.id, "reserved");
                    return Ok(WireTransaction {
                        transaction_id: tx_id,
                        flavor_id: req.flavor_id.clone(),
                        // As held (quantities canonical), as a renewal and
                        // the Contract answer it: one spelling throughout.
                        configuration: crd_config
                            .as_ref()
                            .map(WireConfiguration::from_crd)
                            .transpose()
                            .map_err(|e| ApiError::internal(e.to_string()))?,
                        buyer: req.buyer.clone(),
                        cluster_id: liqo_id,
                        expiration_time: expiration,
                    });
                }
                Ok(Outcome::Existing) => {
                    // A concurrent request of the same buyer won: answer with its transaction.
                    self.delete_transaction(&tx_id).await;
                }
                Err(e) => {
                    self.delete_transaction(&tx_id).await;
                    return Err(e);
                }
            }
        }
        Err(ApiError::unavailable(
            "the reservation kept racing with other changes to the flavor; retry",
        ))
    }

    /// Refuses a sale that leads to a peering with a buyer
    /// `--rear-k8slice-buyers` does not admit (403): a K8Slice (the buyer
    /// becomes a Liqo consumer of this cluster), or, with `peers`, a
    /// Service delivered by Liqo (this node becomes the buyer's consumer).
    /// A K8Slice is also refused (503) while the kubeconfig it would hand
    /// out names an API server address peers cannot reach. Other Services
    /// are sold to all. Called at RESERVE (renewals too) and PURCHASE.
    pub(crate) async fn admit_buyer(
        &self,
        flavor: &Flavor,
        caller: SaleOwner,
        source: Option<std::net::IpAddr>,
        peers: bool,
    ) -> Result<(), ApiError> {
        let k8slice = matches!(flavor_data(flavor)?, FlavorTypeData::K8Slice(_));
        if k8slice && let Some(why) = &self.cfg.k8slice_refusal {
            return Err(ApiError::unavailable(format!(
                "this provider cannot sell K8Slices: {why}"
            )));
        }
        if k8slice || peers {
            self.sale_policy.check(caller, source).await?;
        }
        Ok(())
    }

    /// Slots for one more hold of the buyer from `peer`, or 429 when the
    /// buyer already has `max_holds_per_buyer` live or in progress, or the
    /// peer address `max_holds_per_address` (whatever keys it uses: they
    /// cost nothing).
    fn hold_slots(
        &self,
        counter: &HoldCounter,
        peer: Option<&str>,
    ) -> Result<HoldSlots<'_>, ApiError> {
        let buyer = self.hold_slot(counter)?;
        let cap = self.cfg.max_holds_per_address;
        // 0: off (source addresses not kept, e.g. behind kube-proxy).
        let Some(peer) = peer.filter(|_| cap > 0) else {
            return Ok(HoldSlots {
                _buyer: buyer,
                _peer: None,
            });
        };
        let slot = self
            .slot_within(&format!("peer:{peer}"), cap, |flavors, now| {
                live_holds_from(flavors.iter().map(AsRef::as_ref), peer, now)
            })
            .map_err(|held| {
                ApiError::too_many_requests(
                    format!(
                        "{held} reservations are held from {peer} (an IPv4 address or IPv6 /64), \
                         the most this provider allows one address ({cap}); buy or let some expire first"
                    ),
                    HOLD_CAP_RETRY_AFTER_SECS,
                )
            })?;
        Ok(HoldSlots {
            _buyer: buyer,
            _peer: Some(slot),
        })
    }

    /// A slot for one more hold counted under `key`, unless the live holds
    /// `live` counts on this process's newest ledgers, plus those in
    /// progress, reach `cap`; then how many there are.
    fn slot_within(
        &self,
        key: &str,
        cap: usize,
        live: impl FnOnce(&[std::sync::Arc<Flavor>], &str) -> usize,
    ) -> Result<Slot<'_>, usize> {
        self.reserving.take(
            key,
            || live(&self.book.newest_all(), &time::now_string()),
            cap,
        )
    }

    /// A slot for one more hold of the buyer, or 429 when it already has
    /// `max_holds_per_buyer` live or in progress.
    fn hold_slot(&self, counter: &HoldCounter) -> Result<Slot<'_>, ApiError> {
        let cap = self.cfg.max_holds_per_buyer;
        self.slot_within(&counter.slot_key(), cap, |flavors, now| {
            live_holds_of(flavors.iter().map(AsRef::as_ref), counter, now)
        })
            // 429, not 409: the flavor is not sold out, this buyer is over
            // its quota (a 409 would make a consumer drop a good candidate).
            .map_err(|held| {
                ApiError::too_many_requests(
                    format!(
                        "{} already holds {held} reservations, the most this provider allows ({cap}); buy or let some expire first",
                        counter.describe()
                    ),
                    HOLD_CAP_RETRY_AFTER_SECS,
                )
                .field("buyerID.ID")
            })
    }

    fn transaction_object(
        &self,
        flavor: &Flavor,
        req: &ReserveRequest,
        liqo_id: &str,
        tx_id: &str,
        expiration: &str,
        (configuration, owner): (Option<Configuration>, SaleOwner),
    ) -> Transaction {
        let spec = TransactionSpec {
            flavor_id: req.flavor_id.clone(),
            buyer: req.buyer.to_crd(),
            cluster_id: liqo_id.to_owned(),
            configuration,
            expiration_time: Some(expiration.to_owned()),
        };
        Transaction {
            metadata: ObjectMeta {
                name: Some(tx_id.to_owned()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    labels::SIDE.to_owned(),
                    labels::PROVIDER.to_owned(),
                )])),
                annotations: Some(owner.annotations().into_iter().collect()),
                // Deleting the flavor garbage-collects its reservations.
                owner_references: flavor.owner_ref(&()).map(|r| vec![r]),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    async fn create_transaction(&self, tx: &Transaction) -> Result<(), ApiError> {
        match self.transactions.create(&PostParams::default(), tx).await {
            Ok(created) => {
                self.recent.remember(created);
                Ok(())
            }
            Err(e) => Err(ApiError::kube("creating the Transaction", &e)),
        }
    }

    /// Best-effort removal of a hold whose Transaction could not be created.
    async fn release_fresh(&self, flavor_id: &str, tx_id: &str) {
        match self.book.fetch(flavor_id).await {
            Ok(f) => {
                if let Err(e) = self.release(&f, tx_id).await {
                    tracing::warn!(transaction = tx_id, error = ?e.body, "releasing a hold");
                }
            }
            Err(e) => tracing::warn!(transaction = tx_id, error = ?e.body, "releasing a hold"),
        }
    }

    /// Best-effort delete; the sweeper retries expired ones.
    pub(crate) async fn delete_transaction(&self, tx_id: &str) {
        self.recent.forget(tx_id);
        match self
            .transactions
            .delete(tx_id, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!(transaction = tx_id, error = %e, "deleting a Transaction"),
        }
    }

    /// Drops the `Held` entry of `tx_id` from the flavor's ledger.
    async fn release(&self, flavor: &Flavor, tx_id: &str) -> Result<(), ApiError> {
        let tx = tx_id.to_owned();
        self.book
            .update_from(&flavor.name_any(), flavor.clone(), move |_, entries, _| {
                Ok(Decision::retain(entries, |e| {
                    !(e.transaction_id == tx && e.state == LedgerState::Held)
                }))
            })
            .await
            .map(|_| ())
    }

    /// Idempotent re-reserve: extend the buyer's existing transaction, if
    /// the caller is the peer that made it and asks for the same thing.
    async fn refresh(
        &self,
        req: &ReserveRequest,
        configuration: Option<&Configuration>,
        caller: SaleOwner,
        flavor: &Flavor,
        tx_id: &str,
    ) -> Result<Refresh, ApiError> {
        // The hold's Transaction may still be being created by a concurrent
        // request of the same buyer: give it a moment before calling it gone.
        let mut tries = 0;
        let tx = loop {
            match self.transactions.get(tx_id).await {
                Ok(t) => break t,
                Err(e) if is_not_found(&e) && tries < 10 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) if is_not_found(&e) => return Ok(Refresh::Gone),
                Err(e) => return Err(ApiError::kube("reading the Transaction", &e)),
            }
        };
        // The hold was found by the caller's key; its Transaction must agree
        // (no transaction ID in the refusal: the caller did not send one).
        check_owner(
            SaleOwner::recorded(tx.annotations()),
            caller,
            &format!(
                "the hold of buyer {} on flavor {}",
                req.buyer.id, req.flavor_id
            ),
        )?;
        refuse_other_configuration(tx.spec.configuration.as_ref(), configuration, tx_id)?;
        // Renewal extends the hold, up to its maximum age only.
        let expiration = renewed_expiry(
            jiff::Timestamp::now(),
            tx.metadata.creation_timestamp.as_ref().map(|t| t.0),
            self.cfg.transaction_ttl,
            self.cfg.max_hold_age,
        );
        // The Transaction first: the sweeper must never see it expire before its hold.
        let patch = serde_json::json!({"spec": {"expirationTime": expiration}});
        match self
            .transactions
            .patch(tx_id, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(t) => self.recent.remember(t),
            // Deleted since it was read (it expired and the sweeper took
            // it, or a purchase consumed it): the hold is gone too, or soon.
            Err(e) if is_not_found(&e) => return Ok(Refresh::Gone),
            Err(e) => return Err(ApiError::kube("extending the Transaction", &e)),
        }
        let id = tx_id.to_owned();
        let exp = expiration.clone();
        let still_held = self
            .book
            .update_from(
                &req.flavor_id,
                flavor.clone(),
                move |_, entries, now| match entries.iter_mut().find(|e| {
                    e.transaction_id == id
                        && e.state == LedgerState::Held
                        && ledger::is_live(e, now)
                }) {
                    Some(e) => {
                        e.expiration_time = Some(exp.clone());
                        Ok(Decision::Write(true))
                    }
                    None => Ok(Decision::Keep(false)),
                },
            )
            .await?;
        if !still_held {
            return Ok(Refresh::Gone);
        }
        tracing::info!(flavor = %tx.spec.flavor_id, buyer = %req.buyer.id, "re-reserve: extended the existing transaction");
        tracing::debug!(transaction = %tx_id, "re-reserve: extended");
        Ok(Refresh::Done(Box::new(WireTransaction {
            transaction_id: tx_id.to_owned(),
            flavor_id: tx.spec.flavor_id.clone(),
            // The held configuration (the same as asked, checked above).
            configuration: tx
                .spec
                .configuration
                .as_ref()
                .map(WireConfiguration::from_crd)
                .transpose()
                .map_err(|e| ApiError::internal(e.to_string()))?,
            buyer: req.buyer.clone(),
            cluster_id: tx.spec.cluster_id.clone(),
            expiration_time: expiration,
        })))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fluidos_api::flavor::FlavorStatus;
    use fluidos_api::ledger::LedgerResources;

    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn fractional_pods_and_a_full_ledger_are_refused() {
        let r = |pods: &str| Resources {
            cpu: fluidos_api::quantity::Amount::parse("1").unwrap(),
            memory: fluidos_api::quantity::Amount::parse("1Gi").unwrap(),
            pods: fluidos_api::quantity::Amount::parse(pods).unwrap(),
            ..Resources::zero()
        };
        assert!(refuse_zero_size(&r("2")).is_ok());
        let e = refuse_zero_size(&r("1m")).unwrap_err();
        assert_eq!(e.body.field.as_deref(), Some("configuration.data.pods"));
        assert!(refuse_zero_size(&r("1500m")).is_err());
        assert!(refuse_full_ledger(MAX_LEDGER_ENTRIES - 1).is_ok());
        assert_eq!(
            refuse_full_ledger(MAX_LEDGER_ENTRIES).unwrap_err().status,
            409
        );
    }

    #[test]
    fn an_explicit_hosting_policy_off_the_provider_needs_delivery_by_liqo() {
        let flavor: ServiceFlavor = serde_json::from_value(serde_json::json!({
            "name": "mq", "description": "d", "category": "message-queue", "tags": [],
            "hostingPolicies": ["Consumer", "Provider", "Shared"],
            "configurationTemplate": {"type": "object"}}))
        .unwrap();
        let asking = |p: Option<HostingPolicy>| ServiceConfiguration {
            hosting_policy: p,
            configuration_data: serde_json::json!({}),
        };
        for pods_on_buyer in [false, true] {
            assert!(check_service(&flavor, &asking(None), pods_on_buyer).is_ok());
            assert!(
                check_service(
                    &flavor,
                    &asking(Some(HostingPolicy::Provider)),
                    pods_on_buyer
                )
                .is_ok()
            );
        }
        for p in [HostingPolicy::Consumer, HostingPolicy::Shared] {
            let e = check_service(&flavor, &asking(Some(p)), false).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(
                e.body.field.as_deref(),
                Some("configuration.data.hostingPolicy")
            );
            assert!(e.body.error.contains("Liqo"), "{}", e.body.error);
            // A node delivering by Liqo, to a buyer known by its key.
            assert!(check_service(&flavor, &asking(Some(p)), true).is_ok());
        }
        // Still only the policies the flavor offers.
        let provider_only = ServiceFlavor {
            hosting_policies: vec![HostingPolicy::Provider],
            ..flavor
        };
        assert!(
            check_service(&provider_only, &asking(Some(HostingPolicy::Consumer)), true).is_err()
        );
    }

    #[test]
    fn renewal_never_passes_the_maximum_hold_age() {
        let hour = Duration::from_secs(3600);
        let created = Some(ts("2026-01-01T00:00:00Z"));
        assert_eq!(
            renewed_expiry(ts("2026-01-01T00:10:00Z"), created, hour, 2 * hour),
            "2026-01-01T01:10:00Z",
            "young: a full ttl"
        );
        assert_eq!(
            renewed_expiry(ts("2026-01-01T01:30:00Z"), created, hour, 2 * hour),
            "2026-01-01T02:00:00Z",
            "old: capped at creation + max age"
        );
        assert_eq!(
            renewed_expiry(ts("2026-01-01T05:00:00Z"), created, hour, 2 * hour),
            "2026-01-01T02:00:00Z",
            "renewing again and again does not move it"
        );
        assert_eq!(
            renewed_expiry(ts("2026-01-01T05:00:00Z"), None, hour, 2 * hour),
            "2026-01-01T06:00:00Z"
        );
    }

    fn flavor_with(entries: Vec<(&str, LedgerState, &str)>) -> Flavor {
        let mut f: Flavor = serde_json::from_value(serde_json::json!({
            "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "Flavor",
            "metadata": {"name": "f"},
            "spec": {"providerID": "p", "owner": {"domain": "d", "nodeID": "n", "ip": "i"},
                "price": {"amount": "", "currency": "", "period": ""},
                "flavorType": {"typeIdentifier": "K8Slice", "typeData": {}},
                "availability": true},
        }))
        .unwrap();
        f.status = Some(FlavorStatus {
            ledger: Some(
                entries
                    .into_iter()
                    .map(|(buyer, state, exp)| LedgerEntry {
                        transaction_id: format!("t-{buyer}"),
                        buyer_id: buyer.into(),
                        buyer_key: None,
                        buyer_address: None,
                        source_peer: None,
                        state,
                        resources: None,
                        expiration_time: (!exp.is_empty()).then(|| exp.to_owned()),
                        contract: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        f
    }

    #[test]
    fn only_live_holds_from_the_peer_count_whatever_buyer_they_name() {
        let now = "2026-01-01T00:00:00Z";
        let live = "2026-01-01T01:00:00Z";
        let dead = "2025-12-31T23:00:00Z";
        let mut f = flavor_with(vec![
            ("a", LedgerState::Held, live),
            ("b", LedgerState::Held, live),
            ("c", LedgerState::Held, dead),
            ("d", LedgerState::Sold, ""),
            ("e", LedgerState::Held, live),
        ]);
        let ledger = f.status.as_mut().unwrap().ledger.as_mut().unwrap();
        for e in ledger.iter_mut().take(4) {
            e.source_peer = Some("10.0.0.7".into());
        }
        ledger[4].source_peer = Some("10.0.0.8".into());
        let flavors = [f];
        assert_eq!(live_holds_from(&flavors, "10.0.0.7", now), 2);
        assert_eq!(live_holds_from(&flavors, "10.0.0.8", now), 1);
        assert_eq!(live_holds_from(&flavors, "10.0.0.9", now), 0);
        // What is recorded is the peer as the rate limit keys it.
        assert_eq!(
            rate_limit::peer_key("2001:db8:1:2:3::9".parse().unwrap()).to_string(),
            "2001:db8:1:2::"
        );
    }

    #[test]
    fn only_live_holds_of_the_buyer_count() {
        let now = "2026-01-01T00:00:00Z";
        let live = "2026-01-01T01:00:00Z";
        let dead = "2025-12-31T23:00:00Z";
        let flavors = [
            flavor_with(vec![
                ("a", LedgerState::Held, live),
                ("b", LedgerState::Held, live),
            ]),
            flavor_with(vec![
                ("a", LedgerState::Held, live),
                ("a", LedgerState::Held, dead),
                ("a", LedgerState::Sold, ""),
            ]),
        ];
        let plain = |b| HoldCounter::new(SaleOwner::PlainHttp(None), b);
        assert_eq!(live_holds_of(&flavors, &plain("a"), now), 2);
        assert_eq!(live_holds_of(&flavors, &plain("b"), now), 1);
        assert_eq!(live_holds_of(&flavors, &plain("c"), now), 0);
        // Another address writing a's ID counts on its own.
        let elsewhere =
            HoldCounter::new(SaleOwner::PlainHttp(Some("10.0.0.8".parse().unwrap())), "a");
        assert_eq!(live_holds_of(&flavors, &elsewhere, now), 0);
        assert_ne!(elsewhere.slot_key(), plain("a").slot_key());
    }

    #[test]
    fn a_hold_is_found_by_buyer_and_key() {
        let now = "2026-01-01T00:00:00Z";
        let live = "2026-01-01T01:00:00Z";
        let mut f = flavor_with(vec![
            ("alice", LedgerState::Held, live),
            ("alice", LedgerState::Held, live),
        ]);
        let ledger = f.status.as_mut().unwrap().ledger.as_mut().unwrap();
        ledger[0].transaction_id = "plain".into();
        ledger[1].transaction_id = "keyed".into();
        ledger[1].buyer_key = Some(format!("sha256:{}", "aa".repeat(32)));
        ledger[0].buyer_address = Some("10.0.0.7".into());
        let entries = ledger.clone();
        let found =
            |owner| live_hold(&entries, "alice", owner, now).map(|e| e.transaction_id.as_str());
        let key = |b: u8| {
            SaleOwner::Key(
                format!("sha256:{}", format!("{b:02x}").repeat(32))
                    .parse()
                    .unwrap(),
            )
        };
        let plain = |ip: &str| SaleOwner::PlainHttp(Some(ip.parse().unwrap()));
        assert_eq!(found(plain("10.0.0.7")), Some("plain"));
        assert_eq!(
            found(plain("10.0.0.8")),
            None,
            "another address writing alice's ID reserves on its own"
        );
        assert_eq!(found(SaleOwner::PlainHttp(None)), None);
        assert_eq!(found(key(0xaa)), Some("keyed"));
        assert_eq!(found(key(0xbb)), None, "another key reserves on its own");
        assert_eq!(live_hold(&entries, "bob", plain("10.0.0.7"), now), None);
    }

    #[test]
    fn a_repeated_reserve_for_something_else_is_a_conflict() {
        let config = |cpu: &str| -> Configuration {
            serde_json::from_value(serde_json::json!({"type": "K8Slice",
                "data": {"cpu": cpu, "memory": "1Gi", "pods": "10"}}))
            .unwrap()
        };
        assert!(refuse_other_configuration(None, None, "t").is_ok());
        assert!(refuse_other_configuration(Some(&config("1")), Some(&config("1")), "t").is_ok());
        // A hold stored as sent before quantities were stored canonically
        // renews with the same request, now canonical.
        assert!(
            refuse_other_configuration(Some(&config("1000m")), Some(&config("1")), "t").is_ok()
        );
        for (held, asked) in [
            (Some(config("1")), Some(config("2"))),
            (None, Some(config("1"))),
            (Some(config("1")), None),
        ] {
            let e = refuse_other_configuration(held.as_ref(), asked.as_ref(), "t").unwrap_err();
            assert_eq!(e.status, 409);
            assert_eq!(e.body.field.as_deref(), Some("configuration"));
            assert!(e.body.error.contains("transaction t"), "{}", e.body.error);
        }
    }

    #[test]
    fn one_key_counts_all_its_holds_whatever_buyer_ids_it_wrote() {
        let now = "2026-01-01T00:00:00Z";
        let live = "2026-01-01T01:00:00Z";
        let key: fluidos_rear_identity::Fingerprint =
            format!("sha256:{}", "ab".repeat(32)).parse().unwrap();
        let mut f = flavor_with(vec![
            ("x", LedgerState::Held, live),
            ("y", LedgerState::Held, live),
            ("a", LedgerState::Held, live),
        ]);
        let ledger = f.status.as_mut().unwrap().ledger.as_mut().unwrap();
        ledger[0].buyer_key = Some(key.to_string());
        ledger[1].buyer_key = Some(key.to_string());
        let flavors = [f];
        let keyed = HoldCounter::new(SaleOwner::Key(key), "z");
        assert_eq!(live_holds_of(&flavors, &keyed, now), 2);
        // A plain-HTTP buyer writing one of those IDs does not count them.
        let plain = HoldCounter::new(SaleOwner::PlainHttp(None), "x");
        assert_eq!(live_holds_of(&flavors, &plain, now), 0);
        assert_ne!(keyed.slot_key(), plain.slot_key());
    }

    #[test]
    fn holds_in_progress_count_against_the_cap() {
        let inflight = InFlight::default();
        let first = inflight.take("a", || 1, 3).ok().unwrap();
        let second = inflight.take("a", || 1, 3).ok().unwrap();
        assert_eq!(inflight.take("a", || 1, 3).err(), Some(3));
        assert!(
            inflight.take("b", || 0, 3).is_ok(),
            "other buyers are not affected"
        );
        drop((first, second));
        assert!(inflight.take("a", || 1, 3).is_ok());
        assert!(
            inflight.0.lock().unwrap().is_empty(),
            "ended slots leave nothing behind"
        );
    }

    #[test]
    fn zero_size_partitions_are_refused() {
        let res = |cpu: &str, memory: &str, pods: &str| {
            Resources::of_entry(&LedgerResources {
                cpu: cpu.into(),
                memory: memory.into(),
                pods: pods.into(),
                gpu: None,
                storage: None,
            })
            .unwrap()
        };
        assert!(refuse_zero_size(&res("1", "1Gi", "1")).is_ok());
        for (r, field) in [
            (res("0", "1Gi", "1"), "configuration.data.cpu"),
            (res("1", "0", "1"), "configuration.data.memory"),
            (res("1", "1Gi", "0m"), "configuration.data.pods"),
        ] {
            let e = refuse_zero_size(&r).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.body.field.as_deref()),
                (400, Some(field))
            );
        }
    }
}

//! Ending sales: a provider-side Contract ends when it expires or is deleted.
//!
//! Upstream never ends anything: sold capacity is gone for good and every
//! peer keeps its credentials. Here each sweep
//! 1. notes the Sold ledger entries and the peer ServiceAccounts that exist;
//! 2. lists the Transactions, then the Contracts;
//! 3. deletes expired Contracts, their Allocations and credentials Secrets
//!    (looked for every tenth sweep: it takes whole Contracts, the rest
//!    needs only metadata);
//! 4. releases the Sold entries whose Contract is gone and whose Transaction
//!    is gone too (a Transaction left means the sale may still be finishing);
//! 5. revokes, in two phases (see [`revocations`]), the credentials of
//!    buyers left without a Contract: at once after the grace period when
//!    they have no Transaction either, after one hold's longest life more
//!    when they only hold capacity (a hold sells nothing, and an owner who
//!    reserved anew forever would otherwise keep its credentials forever).
//!
//! The order is what makes this safe against purchases in flight: a purchase
//! keeps its Transaction until its Contract exists, so anything noted in
//! step 1 that belongs to a sale in progress is covered either by a
//! Transaction in the first list of step 2 or by a Contract in the second.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use fluidos_api::Transaction;
use fluidos_api::ledger::LedgerState;
use fluidos_api::service_delivery;
use fluidos_api::{Contract, Flavor, Reservation};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};

use crate::book::Decision;
use crate::{State, labels, time};
use fluidos_controller::api_error::{self, ApiErrorKind, is_not_found};
use fluidos_peer_access::grant::{
    AccountPhase, BUYER_ANNOTATION, MANAGED_LABEL, service_account_name,
};

/// Every how many sweeps expired Contracts are looked for.
const EXPIRY_EVERY: u64 = 10;

/// Sold entries per flavor: transaction ID → contract name.
type SoldEntries = BTreeMap<String, BTreeMap<String, String>>;

/// A peer ServiceAccount as listed in step 1.
#[derive(Clone, Debug)]
pub(crate) struct PeerAccount {
    pub uid: String,
    pub resource_version: String,
    /// Live, or marked for revocation since when (never `Gone`: it was
    /// listed).
    pub phase: AccountPhase,
    /// Whom its credentials belong to (`OWNER_ANNOTATION`), if recorded.
    pub owner: Option<String>,
}

/// A provider Transaction as the sweep weighs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxKey {
    /// Its name (the transaction ID).
    pub id: String,
    /// The buyer ID it names.
    pub buyer: String,
    /// Made by the owner of that buyer's account (or either has no owner
    /// recorded): only then does it keep the account from revocation.
    /// Anyone may reserve naming any buyer ID, and a reservation sells
    /// nothing: another key's holds must not keep a buyer's credentials.
    pub by_account_owner: bool,
}

/// Step 1: what existed before the listings.
pub(crate) struct Noted {
    sold: SoldEntries,
    peers: BTreeMap<String, PeerAccount>,
}

/// What ends in one sweep, decided from three listings (pure).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Endings {
    /// Expired Contracts to delete: (contract name, transaction ID).
    pub expired: Vec<(String, String)>,
    /// Sold entries to release: flavor → transaction IDs.
    pub release: BTreeMap<String, BTreeSet<String>>,
    /// Buyers with neither a Transaction nor a live Contract.
    pub unused: BTreeSet<String>,
    /// Buyers without a live Contract whose account owner holds a
    /// Transaction (a hold, or a purchase not finished).
    pub held: BTreeSet<String>,
}

/// What to do with a peer account this sweep (see [`AccountPhase`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Revocation {
    /// Unused and unmarked: mark the revocation pending.
    Mark,
    /// Marked, but bought from again (a live Contract): cancel.
    Unmark,
    /// Marked, still unused, grace period over (or, only held, the grace
    /// period and a hold's longest life): delete the account.
    Delete,
}

/// The revocation step of each peer account (pure): `grace_over(since)`
/// says whether a mark set at `since` is old enough to act on for an
/// unused account, `held_over(since)` for one whose owner only holds
/// capacity. A hold keeps the account no longer than a purchase that
/// follows it can take (a hold's longest life), so a purchase under way is
/// not revoked under it, and an owner reserving anew forever is.
///
/// No re-check is needed before deleting: a purchase that issues credentials
/// clears the mark, changing the `resourceVersion` the delete is conditioned
/// on, and one that reused a cached token before the mark was visible has
/// made its Contract long before the grace period ends, so this sweep's
/// listing already shows the buyer busy.
pub(crate) fn revocations(
    endings: &Endings,
    accounts: &BTreeMap<String, PeerAccount>,
    grace_over: impl Fn(&str) -> bool,
    held_over: impl Fn(&str) -> bool,
) -> Vec<(String, Revocation)> {
    accounts
        .iter()
        .filter_map(|(buyer, account)| {
            let unused = endings.unused.contains(buyer);
            let held = endings.held.contains(buyer);
            let step = match &account.phase {
                AccountPhase::Live if unused || held => Revocation::Mark,
                AccountPhase::Revoking { .. } if !unused && !held => Revocation::Unmark,
                AccountPhase::Revoking { since } if unused && grace_over(since) => {
                    Revocation::Delete
                }
                AccountPhase::Revoking { since } if held && held_over(since) => Revocation::Delete,
                _ => return None,
            };
            Some((buyer.clone(), step))
        })
        .collect()
}

/// What a sweep needs to know of one provider-side Contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContractKey {
    /// Contract name.
    pub name: String,
    /// The transaction it was sold under.
    pub transaction: String,
    /// The buyer's node ID.
    pub buyer: String,
    /// Its expiration time has passed (false when not read).
    pub expired: bool,
}

/// Decides what ends, given what was noted first (`sold`, `peers`) and what
/// was listed after (`transactions`, then `contracts`).
pub(crate) fn decide(
    sold: &SoldEntries,
    peers: &BTreeSet<String>,
    transactions: &[TxKey],
    contracts: &[ContractKey],
) -> Endings {
    let mut out = Endings::default();
    let tx_ids: BTreeSet<&str> = transactions.iter().map(|t| t.id.as_str()).collect();
    let mut live_contracts = BTreeSet::new();
    let holding: BTreeSet<&str> = transactions
        .iter()
        .filter(|t| t.by_account_owner)
        .map(|t| t.buyer.as_str())
        .collect();
    let mut buying = BTreeSet::new();
    for c in contracts {
        // A Transaction left means the sale may still be finishing.
        if c.expired && !tx_ids.contains(c.transaction.as_str()) {
            out.expired.push((c.name.clone(), c.transaction.clone()));
        } else {
            live_contracts.insert(c.name.as_str());
            buying.insert(c.buyer.as_str());
        }
    }
    for (flavor, entries) in sold {
        let ended: BTreeSet<String> = entries
            .iter()
            .filter(|(tx, contract)| {
                !tx_ids.contains(tx.as_str()) && !live_contracts.contains(contract.as_str())
            })
            .map(|(tx, _)| tx.clone())
            .collect();
        if !ended.is_empty() {
            out.release.insert(flavor.clone(), ended);
        }
    }
    for b in peers.iter().filter(|b| !buying.contains(b.as_str())) {
        if holding.contains(b.as_str()) {
            out.held.insert(b.clone());
        } else {
            out.unused.insert(b.clone());
        }
    }
    out
}

impl State {
    /// Step 1: the Sold entries and peer buyers that exist now; `None` (and
    /// a warning) when the peer ServiceAccounts cannot be listed.
    pub(crate) async fn note_sales(&self) -> Option<Noted> {
        let sold = self.sold_entries();
        match self.peer_buyers().await {
            Ok(peers) => Some(Noted { sold, peers }),
            Err(e) => {
                tracing::warn!(error = %e, "listing peer ServiceAccounts");
                None
            }
        }
    }

    /// Steps 2 to 5, given what `note_sales` noted and the provider
    /// Transactions listed after it; errors are logged, the next sweep retries.
    pub(crate) async fn end_contracts(&self, noted: Noted, transactions: &[Transaction]) {
        let Noted {
            sold,
            peers: accounts,
        } = noted;
        let peers: BTreeSet<String> = accounts.keys().cloned().collect();
        let noted_sold = &sold;
        // 2. Transactions (listed by the caller after `note_sales`), then Contracts.
        let transactions: Vec<TxKey> = transactions.iter().map(|t| tx_key(t, &accounts)).collect();
        // Expiry is checked on every `EXPIRY_EVERY`th sweep only: contracts
        // last days, and a whole listing costs the API server far more.
        let round = self.sweeps.fetch_add(1, Ordering::Relaxed);
        let with_expiry = round.is_multiple_of(EXPIRY_EVERY);
        let contracts = match self.contract_keys(with_expiry).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "listing Contracts");
                return;
            }
        };
        // Only a whole listing knows which Contracts expired.
        if with_expiry {
            let expired = contracts.iter().filter(|c| c.expired).count();
            let market = &self.cfg.metrics.market;
            market.set_contracts("active", contracts.len() - expired);
            market.set_contracts("expired", expired);
        }
        let mut endings = decide(&sold, &peers, &transactions, &contracts);
        // Sellers delivering by Liqo a Service this node bought keep their
        // account here: their reverse peering uses it. Only a node buying
        // so issues such accounts (and pays for the listings); when they
        // cannot be listed, nobody is revoked this sweep, but Contracts
        // still end and capacity still returns.
        if self.cfg.service_delivery == service_delivery::ServiceDelivery::Liqo {
            match self.offloading_sellers().await {
                Ok(sellers) => {
                    endings.unused.retain(|b| !sellers.contains(b));
                    endings.held.retain(|b| !sellers.contains(b));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listing the Contracts bought and delivered by Liqo: no revocation this sweep");
                    endings.unused.clear();
                    endings.held.clear();
                }
            }
        }

        // 3. Expired Contracts go, with their Allocations.
        let mut not_gone = BTreeSet::new();
        for (name, tx) in &endings.expired {
            if !self.delete_contract(name, tx).await {
                not_gone.insert(tx.clone());
            }
        }
        // 4. Capacity returns, once the Contract and its Allocation are gone
        // (else the next sweep tries again).
        for (flavor, txs) in &endings.release {
            let mut txs = txs.clone();
            txs.retain(|tx| !not_gone.contains(tx));
            for tx in txs.clone() {
                if let Err(e) = self.delete_allocations(&tx).await {
                    tracing::warn!(transaction = %tx, error = %e, "deleting the Allocation of an ended Contract");
                    txs.remove(&tx);
                }
            }
            if txs.is_empty() {
                continue;
            }
            let result = self
                .book
                .update(flavor, |_, entries, _| {
                    Ok(Decision::retain(entries, |e| {
                        !(e.state == LedgerState::Sold && txs.contains(&e.transaction_id))
                    }))
                })
                .await;
            match result {
                // Another replica released them first.
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(%flavor, sales = txs.len(), "contract ended: sold capacity released");
                    tracing::debug!(%flavor, transactions = ?txs, "contract ended: released");
                    let contracts: Vec<&str> = txs
                        .iter()
                        .filter_map(|tx| noted_sold.get(flavor).and_then(|m| m.get(tx)))
                        .map(String::as_str)
                        .collect();
                    self.event(
                        self.reference::<Flavor>(flavor),
                        "SoldCapacityReleased",
                        format!(
                            "Contract {} ended (deleted or expired): its capacity is for sale again",
                            contracts.join(", ")
                        ),
                    )
                    .await;
                }
                Err(e) => {
                    tracing::warn!(%flavor, error = ?e.body, "releasing the capacity of ended contracts")
                }
            }
        }
        // 5. Credentials of buyers with nothing left (and pending
        // revocations of buyers who came back, to be cancelled).
        // The mark has whole-second precision: a second more keeps the grace whole.
        let grace = self.cfg.revoke_grace + Duration::from_secs(1);
        let held_grace = grace + self.cfg.max_hold_age;
        let steps = revocations(
            &endings,
            &accounts,
            |since| time::is_past_by(since, grace),
            |since| time::is_past_by(since, held_grace),
        );
        for (buyer, step) in steps {
            self.revoke(&buyer, &accounts[&buyer], step).await;
        }
    }

    /// Sold entries per flavor, from the watch cache.
    fn sold_entries(&self) -> SoldEntries {
        let mut out = SoldEntries::new();
        for f in self.catalog.all() {
            let entries: BTreeMap<String, String> = f
                .status
                .as_ref()
                .and_then(|s| s.ledger.as_ref())
                .into_iter()
                .flatten()
                .filter(|e| e.state == LedgerState::Sold)
                .map(|e| {
                    (
                        e.transaction_id.clone(),
                        e.contract.clone().unwrap_or_default(),
                    )
                })
                .collect();
            if !entries.is_empty() {
                out.insert(f.name_any(), entries);
            }
        }
        out
    }

    /// The peer ServiceAccounts issued by this gateway, by buyer.
    async fn peer_buyers(&self) -> Result<BTreeMap<String, PeerAccount>, kube::Error> {
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.cfg.namespace);
        let lp = ListParams::default().labels(&format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1));
        Ok(api
            .list(&lp)
            .await?
            .items
            .iter()
            .filter_map(|sa| {
                let buyer = sa.annotations().get(BUYER_ANNOTATION)?.clone();
                Some((
                    buyer,
                    PeerAccount {
                        uid: sa.uid()?,
                        resource_version: sa.resource_version()?,
                        phase: AccountPhase::of(Some(sa)),
                        owner: sa
                            .annotations()
                            .get(fluidos_peer_access::grant::OWNER_ANNOTATION)
                            .cloned(),
                    },
                ))
            })
            .collect())
    }

    /// A reference to the object `name` of kind `K` in the gateway's namespace.
    fn reference<K: kube::Resource<DynamicType = ()>>(&self, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(name.to_owned()),
            namespace: Some(self.cfg.namespace.clone()),
            ..Default::default()
        }
    }

    /// Publishes a Normal event about `regarding`; a failure is only logged.
    async fn event(&self, regarding: ObjectReference, reason: &str, note: String) {
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(note),
            action: "EndContract".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &regarding).await {
            tracing::warn!(reason, error = %e, "publishing an event failed");
        }
    }

    /// Deletes the provider-side Allocation made with the sale of `tx`.
    async fn delete_allocations(&self, tx: &str) -> Result<(), kube::Error> {
        let lp = labels::sale(tx);
        self.allocations
            .delete_collection(&DeleteParams::default(), &lp)
            .await
            .map(|_| ())
    }

    /// Deletes an ended Contract, the Allocation made beside it and its
    /// credentials Secret; true when all are gone.
    ///
    /// The Secret goes explicitly, before the Contract, so that the token
    /// is gone at once; its ownerReference has the garbage collector remove
    /// it too, only later. A failed Secret delete (e.g. a chart without the
    /// grant) is logged and does not keep the Contract: a Contract kept
    /// would keep its capacity sold forever, a Secret left is collected.
    async fn delete_contract(&self, name: &str, tx: &str) -> bool {
        if let Err(e) = self.delete_allocations(tx).await {
            tracing::warn!(contract = name, error = %e, "deleting the Allocation of an expired Contract");
            return false;
        }
        if let Err(e) = self.delete_credentials(name).await {
            tracing::warn!(contract = name, error = %e,
                "deleting the credentials Secret of an expired Contract; the garbage collector removes it with the Contract");
        }
        match self.contracts.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(contract = name, "contract expired and deleted");
                let regarding = self.reference::<Contract>(name);
                self.event(
                    regarding,
                    "ContractExpired",
                    format!(
                        "Contract {name} passed its expirationTime: deleted with its Allocation and credentials Secret"
                    ),
                )
                .await;
                true
            }
            Err(e) if is_not_found(&e) => true,
            Err(e) => {
                tracing::warn!(contract = name, error = %e, "deleting an expired Contract");
                false
            }
        }
    }

    /// Every provider Contract as (name, transaction ID, buyer, expired),
    /// fresh from the API server.
    ///
    /// Whole Contracts are large (an embedded flavor), so
    /// unless `with_expiry` a metadata-only listing is used: the transaction
    /// label and buyer annotation this gateway writes say all but the expiry
    /// (reported as not expired). Contracts without them are read whole.
    async fn contract_keys(&self, with_expiry: bool) -> Result<Vec<ContractKey>, kube::Error> {
        let provider = labels::provider();
        if with_expiry {
            let list = self.contracts.list(&provider).await?;
            return Ok(list.items.iter().map(contract_key).collect());
        }
        let mut keys = Vec::new();
        for meta in self.contracts.list_metadata(&provider).await?.items {
            let name = meta.name_any();
            let tx = meta.labels().get(labels::TRANSACTION);
            match (tx, meta.annotations().get(labels::BUYER)) {
                (Some(tx), Some(buyer)) => keys.push(ContractKey {
                    name,
                    transaction: tx.clone(),
                    buyer: buyer.clone(),
                    expired: false,
                }),
                _ => {
                    if let Some(c) = self.contracts.get_opt(&name).await? {
                        keys.push(contract_key(&c));
                    }
                }
            }
        }
        Ok(keys)
    }

    /// The sellers of this node's live Contracts for Services delivered by
    /// Liqo (the consumer labels them), and of its purchases under way (the account a Service purchase issues exists
    /// before its Contract does), fresh from the API server.
    async fn offloading_sellers(&self) -> Result<BTreeSet<String>, kube::Error> {
        let selector = format!(
            "{}={}",
            service_delivery::DELIVERY_LABEL,
            service_delivery::LIQO
        );
        let me = &self.cfg.identity;
        let list = self
            .contracts
            .list(&ListParams::default().labels(&selector))
            .await?;
        let mut sellers: BTreeSet<String> = list
            .items
            .iter()
            .filter(|c| {
                service_delivery::bought_by_liqo(c)
                    && c.spec.buyer.node_id == me.node_id
                    && !c.spec.expiration_time.as_deref().is_some_and(time::is_past)
            })
            .map(|c| service_delivery::seller_node_id(c).to_owned())
            .collect();
        let reservations = Api::<Reservation>::namespaced(self.client.clone(), &self.cfg.namespace)
            .list(&ListParams::default())
            .await?;
        sellers.extend(
            reservations
                .items
                .iter()
                .filter(|r| purchase_under_way(r))
                .map(|r| r.spec.seller.node_id.clone()),
        );
        Ok(sellers)
    }

    /// Carries out one revocation step for `buyer`; errors are logged and
    /// the next sweep decides again.
    async fn revoke(&self, buyer: &str, account: &PeerAccount, step: Revocation) {
        let result = match step {
            Revocation::Unmark => self.credentials.set_revoking(buyer, None, None).await,
            Revocation::Mark => {
                let now = time::now_string();
                self.credentials
                    .set_revoking(buyer, Some(&now), Some(&account.resource_version))
                    .await
            }
            Revocation::Delete => {
                match self
                    .credentials
                    .revoke(buyer, &account.uid, &account.resource_version)
                    .await
                {
                    Ok(true) => {
                        tracing::info!(%buyer, "no contract left: peering credentials revoked");
                        self.event(
                            self.reference::<ServiceAccount>(&service_account_name(buyer)),
                            "PeerCredentialsRevoked",
                            format!("Buyer {buyer} has no Contract left: its ServiceAccount, RoleBindings and tokens are revoked"),
                        )
                        .await;
                    }
                    Ok(false) => {
                        tracing::info!(%buyer, "credentials issued meanwhile: revocation cancelled")
                    }
                    Err(e) => tracing::warn!(%buyer, error = %e, "revoking peering credentials"),
                }
                Ok(())
            }
        };
        match result {
            Ok(()) => {}
            // The account changed or went meanwhile: the next sweep sees how.
            Err(e)
                if matches!(
                    api_error::classify(&e),
                    ApiErrorKind::Conflict | ApiErrorKind::NotFound
                ) => {}
            Err(e) => tracing::warn!(%buyer, error = %e, "marking a pending revocation"),
        }
    }
}

/// True for a Reservation of this node whose purchase is asked for and not
/// settled (neither solved nor failed).
fn purchase_under_way(r: &Reservation) -> bool {
    use fluidos_api::Phase;
    let settled = r
        .status
        .as_ref()
        .and_then(|s| s.purchase_phase.as_ref())
        .is_some_and(|p| matches!(p, Phase::Solved | Phase::Failed));
    r.spec.purchase == Some(true) && !settled
}

fn tx_key(t: &Transaction, accounts: &BTreeMap<String, PeerAccount>) -> TxKey {
    let buyer = t.spec.buyer.node_id.clone();
    let made_by = crate::buyer::SaleOwner::recorded(t.annotations())
        .map(crate::buyer::SaleOwner::credentials_owner);
    let by_account_owner = match (accounts.get(&buyer).and_then(|a| a.owner.as_ref()), made_by) {
        (Some(owner), Some(made_by)) => *owner == made_by,
        // An account of an earlier version (no owner recorded), or no
        // account: as before.
        (None, _) => true,
        // An annotation that is no fingerprint: nobody's.
        (Some(_), None) => false,
    };
    TxKey {
        id: t.name_any(),
        buyer,
        by_account_owner,
    }
}

fn contract_key(c: &Contract) -> ContractKey {
    ContractKey {
        name: c.name_any(),
        transaction: c.spec.transaction_id.clone(),
        buyer: c.spec.buyer.node_id.clone(),
        expired: c.spec.expiration_time.as_deref().is_some_and(time::is_past),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sold(entries: &[(&str, &str, &str)]) -> SoldEntries {
        let mut out = SoldEntries::new();
        for (flavor, tx, contract) in entries {
            out.entry((*flavor).to_owned())
                .or_default()
                .insert((*tx).to_owned(), (*contract).to_owned());
        }
        out
    }

    fn s(v: &str) -> String {
        v.to_owned()
    }

    fn contract(name: &str, tx: &str, buyer: &str, expired: bool) -> ContractKey {
        ContractKey {
            name: s(name),
            transaction: s(tx),
            buyer: s(buyer),
            expired,
        }
    }

    #[test]
    fn a_sale_ends_when_its_contract_and_transaction_are_gone() {
        let sold = sold(&[("f", "t1", "c1"), ("f", "t2", "c2"), ("g", "t3", "c3")]);
        let peers = BTreeSet::from([s("b1"), s("b2"), s("b3")]);
        // t1: contract live. t2: contract deleted. t3: contract not created
        // yet, its Transaction still there (a purchase in flight).
        let txs = [TxKey {
            id: s("t3"),
            buyer: s("b3"),
            by_account_owner: true,
        }];
        let contracts = [contract("c1", "t1", "b1", false)];
        let e = decide(&sold, &peers, &txs, &contracts);
        assert!(e.expired.is_empty());
        assert_eq!(
            e.release,
            BTreeMap::from([(s("f"), BTreeSet::from([s("t2")]))])
        );
        assert_eq!(e.unused, BTreeSet::from([s("b2")]));
        assert_eq!(e.held, BTreeSet::from([s("b3")]));
    }

    #[test]
    fn an_expired_contract_is_deleted_and_its_capacity_released() {
        let sold = sold(&[("f", "t1", "c1")]);
        let peers = BTreeSet::from([s("b1")]);
        let contracts = [contract("c1", "t1", "b1", true)];
        let e = decide(&sold, &peers, &[], &contracts);
        assert_eq!(e.expired, vec![(s("c1"), s("t1"))]);
        assert_eq!(
            e.release,
            BTreeMap::from([(s("f"), BTreeSet::from([s("t1")]))])
        );
        assert_eq!(e.unused, BTreeSet::from([s("b1")]));
    }

    #[test]
    fn a_buyer_with_another_live_contract_keeps_its_credentials() {
        let sold = sold(&[("f", "t1", "c1"), ("f", "t2", "c2")]);
        let peers = BTreeSet::from([s("b1")]);
        let contracts = [
            contract("c1", "t1", "b1", true),
            contract("c2", "t2", "b1", false),
        ];
        let e = decide(&sold, &peers, &[], &contracts);
        assert_eq!(e.release[&s("f")], BTreeSet::from([s("t1")]));
        assert!(e.unused.is_empty());
    }

    #[test]
    fn an_expired_contract_whose_sale_is_still_finishing_is_left_alone() {
        let sold = sold(&[("f", "t1", "c1")]);
        let txs = [tx("t1", "b1", true)];
        let contracts = [contract("c1", "t1", "b1", true)];
        let e = decide(&sold, &BTreeSet::from([s("b1")]), &txs, &contracts);
        assert_eq!(e, Endings::default());
    }

    fn account(since: Option<&str>) -> PeerAccount {
        PeerAccount {
            uid: s("u"),
            resource_version: s("7"),
            phase: since.map_or(AccountPhase::Live, |since| AccountPhase::Revoking {
                since: s(since),
            }),
            owner: None,
        }
    }

    fn tx(id: &str, buyer: &str, by_account_owner: bool) -> TxKey {
        TxKey {
            id: s(id),
            buyer: s(buyer),
            by_account_owner,
        }
    }

    #[test]
    fn revocation_marks_first_and_deletes_only_after_the_grace_period() {
        let accounts = BTreeMap::from([
            (s("new"), account(None)),
            (s("recent"), account(Some("t-recent"))),
            (s("old"), account(Some("t-old"))),
            (s("back"), account(Some("t-old"))),
            (s("busy"), account(None)),
        ]);
        let endings = Endings {
            unused: BTreeSet::from([s("new"), s("recent"), s("old")]),
            ..Endings::default()
        };
        let steps = revocations(&endings, &accounts, |since| since == "t-old", |_| false);
        assert_eq!(
            steps,
            vec![
                (s("back"), Revocation::Unmark),
                (s("new"), Revocation::Mark),
                (s("old"), Revocation::Delete),
            ]
        );
    }

    #[test]
    fn a_hold_alone_delays_revocation_by_one_holds_life_only() {
        // An owner with no Contract left that keeps reserving: marked at
        // once, kept through the grace period and a hold's longest life
        // (a purchase under way finishes within it), then revoked; bought
        // from again, unmarked.
        let accounts = BTreeMap::from([
            (s("holding"), account(None)),
            (s("within"), account(Some("t-old"))),
            (s("past"), account(Some("t-ancient"))),
            (s("bought"), account(Some("t-ancient"))),
        ]);
        let endings = Endings {
            held: BTreeSet::from([s("holding"), s("within"), s("past")]),
            ..Endings::default()
        };
        let grace_over = |since: &str| since == "t-old" || since == "t-ancient";
        let held_over = |since: &str| since == "t-ancient";
        assert_eq!(
            revocations(&endings, &accounts, grace_over, held_over),
            vec![
                (s("bought"), Revocation::Unmark),
                (s("holding"), Revocation::Mark),
                (s("past"), Revocation::Delete),
            ]
        );
    }

    #[test]
    fn a_purchase_under_way_is_one_asked_for_and_not_settled() {
        use fluidos_api::Phase;
        let mut r: Reservation = serde_json::from_value(serde_json::json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {"solverID": "s", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                "seller": {"domain": "d", "nodeID": "p", "ip": "i"},
                "reserve": true, "purchase": true}}))
        .unwrap();
        assert!(purchase_under_way(&r));
        for (phase, under_way) in [
            (Phase::Running, true),
            (Phase::Solved, false),
            (Phase::Failed, false),
        ] {
            let mut st = r.status.clone().unwrap_or_default();
            st.purchase_phase = Some(phase);
            r.status = Some(st);
            assert_eq!(purchase_under_way(&r), under_way);
        }
        r.spec.purchase = Some(false);
        r.status = None;
        assert!(!purchase_under_way(&r));
    }

    #[test]
    fn a_buyer_mid_reservation_is_held_not_unused() {
        let peers = BTreeSet::from([s("b1")]);
        let e = decide(&SoldEntries::new(), &peers, &[tx("t9", "b1", true)], &[]);
        assert_eq!(
            e,
            Endings {
                held: BTreeSet::from([s("b1")]),
                ..Endings::default()
            }
        );
    }

    #[test]
    fn another_keys_reservation_keeps_no_buyers_credentials() {
        let peers = BTreeSet::from([s("b1")]);
        let e = decide(&SoldEntries::new(), &peers, &[tx("t9", "b1", false)], &[]);
        assert_eq!(e.unused, BTreeSet::from([s("b1")]));
        // Which Transactions count: those of the account's owner.
        let mut t: Transaction = serde_json::from_value(serde_json::json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Transaction",
            "metadata": {"name": "t9", "annotations": {crate::labels::BUYER_KEY: format!("sha256:{}", "a".repeat(64))}},
            "spec": {"flavorID": "f", "buyer": {"nodeID": "b1", "ip": "", "domain": ""}, "clusterID": "c"}
        }))
        .unwrap();
        let owned_by = |owner: Option<String>| {
            BTreeMap::from([(
                s("b1"),
                PeerAccount {
                    owner,
                    ..account(None)
                },
            )])
        };
        let mine = owned_by(Some(format!("sha256:{}", "a".repeat(64))));
        assert!(tx_key(&t, &mine).by_account_owner);
        let theirs = owned_by(Some(format!("sha256:{}", "b".repeat(64))));
        assert!(!tx_key(&t, &theirs).by_account_owner);
        assert!(
            tx_key(&t, &owned_by(None)).by_account_owner,
            "an older account: as before"
        );
        // A plain-HTTP reservation against a key's account: not the owner.
        t.metadata.annotations = None;
        assert!(!tx_key(&t, &theirs).by_account_owner);
        assert!(
            tx_key(
                &t,
                &owned_by(Some(fluidos_peer_access::grant::PLAIN_HTTP_OWNER.into()))
            )
            .by_account_owner
        );
    }
}

//! Background expiry: drops expired holds from ledgers and deletes expired
//! provider-side Transactions, so held capacity returns by itself; then ends
//! expired or deleted Contracts (see `contract_end`).
//!
//! Listing already ignores expired holds (they are dead by time), so the
//! sweeper is housekeeping: it keeps ledgers short and the namespace clean.

use std::collections::BTreeMap;
use std::sync::Arc;

use fluidos_api::ledger::{self, LedgerState};
use fluidos_api::{Flavor, Transaction};
use fluidos_controller::api_error;
use fluidos_controller::reconcile::{backoff_delay, error_chain};
use kube::ResourceExt;

use crate::book::Decision;
use crate::{State, labels, time};

/// How long after its expiry a sold Transaction without a Contract is kept
/// for the buyer to retry the purchase that would create it.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// What the provider has on the market, as the market gauges show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MarketCounts {
    /// Available flavors per `typeIdentifier`.
    pub flavors: BTreeMap<String, usize>,
    /// Live (unexpired) holds.
    pub holds: usize,
    /// Sales.
    pub sales: usize,
}

/// Counts available flavors by type and live ledger entries at `now` (pure).
pub(crate) fn market_counts<'a>(
    flavors: impl IntoIterator<Item = &'a Flavor>,
    now: &str,
) -> MarketCounts {
    let mut counts = MarketCounts::default();
    for f in flavors {
        if f.spec.availability {
            *counts
                .flavors
                .entry(f.spec.flavor_type.type_identifier.clone())
                .or_default() += 1;
        }
        let entries = f.status.as_ref().and_then(|s| s.ledger.as_deref());
        for e in entries.unwrap_or_default() {
            match e.state {
                LedgerState::Sold => counts.sales += 1,
                LedgerState::Held if ledger::is_live(e, now) => counts.holds += 1,
                LedgerState::Held => {}
            }
        }
    }
    counts
}

impl State {
    /// One sweep; errors are logged, and false returned so the next one waits longer.
    pub(crate) async fn sweep(&self) -> bool {
        if let Some(limiter) = &self.limiter {
            limiter.forget_quiet_peers();
        }
        self.release_expired_holds().await;
        self.update_market_gauges();
        // Noted before the Transactions are listed (see `contract_end`).
        let noted = self.note_sales().await;
        let txs = match self.transactions.list(&labels::provider()).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(
                    api_error = %api_error::classify(&e),
                    error = error_chain(&e),
                    "listing Transactions for expiry"
                );
                return false;
            }
        };
        self.delete_expired_transactions(&txs).await;
        if let Some(noted) = noted {
            self.end_contracts(noted, &txs).await;
        }
        true
    }

    /// Sets the flavor and ledger gauges from the watch cache.
    fn update_market_gauges(&self) {
        let flavors = self.catalog.all();
        let counts = market_counts(flavors.iter().map(AsRef::as_ref), &time::now_string());
        let market = &self.cfg.metrics.market;
        // Every type seen once keeps a series, set to 0 when none is left.
        let mut published = self
            .published_types
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        published.extend(counts.flavors.keys().cloned());
        for ty in published.iter() {
            market.set_flavors(ty, counts.flavors.get(ty).copied().unwrap_or(0));
        }
        market.set_holds(counts.holds);
        market.set_sales(counts.sales);
    }

    async fn release_expired_holds(&self) {
        let now = time::now_string();
        for f in self.catalog.all() {
            let stale = f
                .status
                .as_ref()
                .and_then(|s| s.ledger.as_ref())
                .is_some_and(|l| l.iter().any(|e| !ledger::is_live(e, &now)));
            if !stale {
                continue;
            }
            let name = f.name_any();
            let result = self
                .book
                .update(&name, |_, entries, now| {
                    Ok(Decision::retain(entries, |e| ledger::is_live(e, now)))
                })
                .await;
            match result {
                Ok(_) => tracing::debug!(flavor = %name, "expired holds released"),
                Err(e) => {
                    tracing::warn!(flavor = %name, error = ?e.body, "releasing expired holds")
                }
            }
        }
    }

    async fn delete_expired_transactions(&self, txs: &[Transaction]) {
        for tx in txs {
            let Some(expiry) = tx.spec.expiration_time.as_deref() else {
                continue;
            };
            if !time::is_past(expiry) {
                continue;
            }
            let id = tx.name_any();
            // Read fresh: a stale cache could show an expired hold that a
            // purchase has just turned into a sale.
            let sold_as = match self.book.fetch(&tx.spec.flavor_id).await {
                Ok(f) => f
                    .status
                    .as_ref()
                    .and_then(|s| s.ledger.as_ref())
                    .and_then(|l| {
                        l.iter()
                            .find(|e| e.transaction_id == id && e.state == LedgerState::Sold)
                            .map(|e| e.contract.clone().unwrap_or_default())
                    }),
                // The flavor is gone: nothing can be sold from it any more.
                Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => None,
                Err(e) => {
                    tracing::warn!(transaction = %id, error = ?e.body, "reading the flavor of an expired Transaction");
                    continue;
                }
            };
            match sold_as {
                None => {
                    // A transaction ID is what buys the hold: logged at debug only.
                    tracing::debug!(transaction = %id, "transaction expired");
                    self.delete_transaction(&id).await;
                }
                // Sold: once its Contract exists (until then a purchase retry
                // still needs the Transaction to finish the sale), or once
                // the buyer has had ample time to retry and has not.
                Some(contract) => match self.contracts.get_opt(&contract).await {
                    Ok(Some(_)) => self.delete_transaction(&id).await,
                    Ok(None) if time::is_past_by(expiry, ABANDONED_AFTER) => {
                        tracing::warn!(transaction = %id, %contract, "sale abandoned before its Contract was made; the Transaction goes and the capacity returns");
                        self.delete_transaction(&id).await;
                    }
                    _ => {}
                },
            }
        }
    }
}

/// Sweeps every `interval` until the task is dropped; after failed sweeps
/// it waits longer (growing backoff, at least `interval`) so an unreachable
/// API server is not hammered.
pub(crate) async fn run(state: Arc<State>, interval: std::time::Duration) {
    let mut failures: u32 = 0;
    loop {
        failures = if state.sweep().await {
            0
        } else {
            failures.saturating_add(1)
        };
        let wait = match failures {
            0 => interval,
            n => interval.max(backoff_delay(n)),
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluidos_api::flavor::FlavorStatus;
    use fluidos_api::ledger::LedgerEntry;

    fn flavor(ty: &str, available: bool, ledger: Vec<(LedgerState, Option<&str>)>) -> Flavor {
        let mut f: Flavor = serde_json::from_value(serde_json::json!({
            "apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "Flavor",
            "metadata": {"name": "f"},
            "spec": {"providerID": "p", "owner": {"domain": "d", "nodeID": "n", "ip": "i"},
                "price": {"amount": "", "currency": "", "period": ""},
                "flavorType": {"typeIdentifier": ty, "typeData": {}},
                "availability": available},
        }))
        .unwrap_or_else(|e| panic!("test flavor: {e}"));
        f.status = Some(FlavorStatus {
            ledger: Some(
                ledger
                    .into_iter()
                    .map(|(state, exp)| LedgerEntry {
                        transaction_id: "t".into(),
                        buyer_id: "b".into(),
                        buyer_key: None,
                        buyer_address: None,
                        source_peer: None,
                        state,
                        resources: None,
                        expiration_time: exp.map(Into::into),
                        contract: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        f
    }

    #[test]
    fn counts_available_flavors_by_type_and_live_entries() {
        let now = "2026-01-01T00:00:00Z";
        let flavors = [
            flavor(
                "K8Slice",
                true,
                vec![
                    (LedgerState::Sold, None),
                    (LedgerState::Held, Some("2026-01-01T00:00:10Z")),
                    (LedgerState::Held, Some("2025-12-31T23:59:59Z")),
                ],
            ),
            flavor("K8Slice", false, vec![(LedgerState::Sold, None)]),
            flavor("Service", true, vec![]),
        ];
        let c = market_counts(&flavors, now);
        assert_eq!(
            c.flavors,
            BTreeMap::from([("K8Slice".to_owned(), 1), ("Service".to_owned(), 1)])
        );
        assert_eq!((c.holds, c.sales), (1, 2));
        assert_eq!(market_counts([], now), MarketCounts::default());
    }
}

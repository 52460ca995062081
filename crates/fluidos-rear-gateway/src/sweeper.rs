//! Background expiry: drops expired holds from ledgers and deletes expired
//! provider-side Transactions, so held capacity returns by itself; then ends
//! expired or deleted Contracts (see `contract_end`).
//!
//! Listing already ignores expired holds (they are dead by time), so the
//! sweeper is housekeeping: it keeps ledgers short and the namespace clean.

use std::sync::Arc;

use fluidos_api::Transaction;
use fluidos_api::ledger::{self, LedgerState};
use kube::ResourceExt;

use crate::book::Decision;
use crate::{State, labels, time};

/// How long after its expiry a sold Transaction without a Contract is kept
/// for the buyer to retry the purchase that would create it.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

impl State {
    /// One sweep; errors are logged, the next tick retries.
    pub(crate) async fn sweep(&self) {
        self.release_expired_holds().await;
        // Noted before the Transactions are listed (see `contract_end`).
        let noted = self.note_sales().await;
        let txs = match self.transactions.list(&labels::provider()).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(error = %e, "listing Transactions for expiry");
                return;
            }
        };
        self.delete_expired_transactions(&txs).await;
        if let Some(noted) = noted {
            self.end_contracts(noted, &txs).await;
        }
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
                    tracing::info!(transaction = %id, "transaction expired");
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

/// Sweeps every `interval` until the task is dropped.
pub(crate) async fn run(state: Arc<State>, interval: std::time::Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state.sweep().await;
    }
}

//! Transactions this process created recently, so a purchase that follows
//! its reservation (the common case) needs no read of the Transaction.
//!
//! Only a cache: a miss (another replica, a restart) reads the API server,
//! and expiry is decided by the flavor ledger, never by a cached copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fluidos_api::Transaction;
use kube::ResourceExt;

use crate::time;

/// Entries kept before expired ones are dropped.
const CAPACITY: usize = 10_000;

/// Recently created or extended provider-side Transactions.
#[derive(Default)]
pub(crate) struct Recent {
    map: Mutex<HashMap<String, Arc<Transaction>>>,
}

impl Recent {
    /// Keeps `tx` under its name.
    pub(crate) fn remember(&self, tx: Transaction) {
        if let Ok(mut m) = self.map.lock() {
            if m.len() >= CAPACITY {
                m.retain(|_, t| {
                    t.spec
                        .expiration_time
                        .as_deref()
                        .is_some_and(|e| !time::is_past(e))
                });
                if m.len() >= CAPACITY {
                    m.clear();
                }
            }
            m.insert(tx.name_any(), Arc::new(tx));
        }
    }

    /// The cached Transaction named `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Transaction>> {
        self.map.lock().ok().and_then(|m| m.get(id).cloned())
    }

    /// Drops `id`.
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(id);
        }
    }
}

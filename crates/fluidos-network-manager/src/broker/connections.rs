//! Which Brokers are connected right now, for whoever reports the network
//! manager's readiness: the node is ready for broker discovery once it has
//! read the Broker list and every Broker's client is connected.
//!
//! The table lives in a `watch` channel: the controller and the clients
//! write it, a readiness reporter waits for changes instead of polling.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

/// The connection of one Broker's client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Started, no outcome yet.
    Connecting,
    /// Connected.
    Up,
    /// Not connected, with the reason its `Connected` condition shows.
    Down(&'static str),
}

/// Every Broker's client, by Broker name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionTable {
    /// The Broker list was read at least once.
    listed: bool,
    /// Broker name → (client generation, link).
    brokers: BTreeMap<String, (u64, Link)>,
    /// Generation of the next client.
    next: u64,
}

impl ConnectionTable {
    /// Why broker discovery is not up, or `None` when it is: the Broker list
    /// was read and every listed Broker is connected (no Broker at all is
    /// up: there is nothing to connect to).
    pub fn not_ready_reason(&self) -> Option<String> {
        if !self.listed {
            return Some("the Broker list has not been read yet".to_owned());
        }
        let down: Vec<String> = self
            .brokers
            .iter()
            .filter_map(|(name, (_, link))| match link {
                Link::Up => None,
                Link::Connecting => Some(format!("{name} (connecting)")),
                Link::Down(reason) => Some(format!("{name} ({reason})")),
            })
            .collect();
        (!down.is_empty()).then(|| format!("Brokers not connected: {}", down.join(", ")))
    }

    /// Whether the Broker list was read (or found unavailable here).
    pub fn is_listed(&self) -> bool {
        self.listed
    }

    /// The link of Broker `name`, if it has a client.
    pub fn link(&self, name: &str) -> Option<&Link> {
        self.brokers.get(name).map(|(_, l)| l)
    }
}

/// The shared table; cheap to clone.
#[derive(Clone, Debug)]
pub struct BrokerConnections {
    table: Arc<watch::Sender<ConnectionTable>>,
}

impl Default for BrokerConnections {
    fn default() -> Self {
        BrokerConnections {
            table: Arc::new(watch::Sender::new(ConnectionTable::default())),
        }
    }
}

/// A client's handle on its own row: a client replaced by a newer one for
/// the same Broker (spec changed) cannot overwrite the newer one's state.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    connections: BrokerConnections,
    name: String,
    generation: u64,
}

impl Row {
    /// Records this client's link, unless a newer client replaced it.
    pub(crate) fn set(&self, link: Link) {
        self.connections
            .table
            .send_if_modified(|t| match t.brokers.get_mut(&self.name) {
                Some((generation, current))
                    if *generation == self.generation && *current != link =>
                {
                    *current = link;
                    true
                }
                _ => false,
            });
    }
}

impl BrokerConnections {
    /// A table with no Broker listed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current table.
    pub fn snapshot(&self) -> ConnectionTable {
        self.table.borrow().clone()
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<ConnectionTable> {
        self.table.subscribe()
    }

    /// The Broker list was read.
    pub(crate) fn listed(&self) {
        self.table
            .send_if_modified(|t| !std::mem::replace(&mut t.listed, true));
    }

    /// A new client for Broker `name` (replacing any older one's row).
    pub(crate) fn track(&self, name: &str) -> Row {
        let mut generation = 0;
        self.table.send_modify(|t| {
            generation = t.next;
            t.next += 1;
            t.brokers
                .insert(name.to_owned(), (generation, Link::Connecting));
        });
        Row {
            connections: self.clone(),
            name: name.to_owned(),
            generation,
        }
    }

    /// Broker `name` is gone.
    pub(crate) fn forget(&self, name: &str) {
        self.table
            .send_if_modified(|t| t.brokers.remove(name).is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_listed_and_every_broker_is_up() {
        let c = BrokerConnections::new();
        assert_eq!(
            c.snapshot().not_ready_reason().as_deref(),
            Some("the Broker list has not been read yet")
        );
        let a = c.track("a");
        c.listed();
        assert_eq!(
            c.snapshot().not_ready_reason().as_deref(),
            Some("Brokers not connected: a (connecting)")
        );
        a.set(Link::Up);
        assert_eq!(c.snapshot().not_ready_reason(), None);
        let b = c.track("b");
        b.set(Link::Down("SecretMissing"));
        assert_eq!(
            c.snapshot().not_ready_reason().as_deref(),
            Some("Brokers not connected: b (SecretMissing)")
        );
        c.forget("b");
        assert_eq!(c.snapshot().not_ready_reason(), None);
        // A client of a forgotten Broker cannot bring it back.
        b.set(Link::Up);
        assert_eq!(c.snapshot().link("b"), None);
    }

    #[test]
    fn no_broker_at_all_is_ready_once_listed() {
        let c = BrokerConnections::new();
        c.listed();
        assert_eq!(c.snapshot().not_ready_reason(), None);
    }

    #[test]
    fn a_replaced_client_cannot_overwrite_its_successor() {
        let c = BrokerConnections::new();
        let old = c.track("a");
        let new = c.track("a");
        new.set(Link::Up);
        old.set(Link::Down("ConnectionLost"));
        assert_eq!(c.snapshot().link("a"), Some(&Link::Up));
    }

    #[test]
    fn only_changes_wake_subscribers() {
        let c = BrokerConnections::new();
        let mut rx = c.subscribe();
        let a = c.track("a");
        assert!(rx.has_changed().unwrap_or(false));
        rx.borrow_and_update();
        a.set(Link::Connecting);
        c.forget("nobody");
        assert!(!rx.has_changed().unwrap_or(true));
    }
}

//! A readiness flag that is raised once and awaited by any number of tasks.

use std::sync::Arc;

use tokio::sync::watch;

/// Becomes true once and stays; cheap to clone (tokio watch).
#[derive(Clone, Debug, Default)]
pub struct ReadinessGate(Arc<watch::Sender<bool>>);

impl ReadinessGate {
    /// Not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks ready and wakes every waiter.
    pub fn set_ready(&self) {
        self.0.send_replace(true);
    }

    /// True once ready.
    pub fn is_ready(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until ready (at once if already).
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close under us.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_every_waiter_and_stays_ready() {
        let gate = ReadinessGate::new();
        assert!(!gate.is_ready());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let g = gate.clone();
                tokio::spawn(async move { g.wait().await })
            })
            .collect();
        gate.set_ready();
        for w in waiters {
            assert!(w.await.is_ok());
        }
        assert!(gate.is_ready());
        gate.wait().await;
    }
}

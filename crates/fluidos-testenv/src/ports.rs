//! Free loopback ports for the control-plane processes.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

use crate::Error;

/// Ports already handed out in this process: the kernel may give the same
/// ephemeral port to two concurrent tests once the probe socket is closed.
fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A loopback TCP port that was free a moment ago and that no other caller in
/// this process has received. Another process may still take it before our
/// child binds it; callers retry on "address already in use".
pub(crate) fn free_port() -> Result<u16, Error> {
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("binding a probe socket on 127.0.0.1:0", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading the probe socket address", e))?
            .port();
        drop(listener);
        let mut used = handed_out()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::io(
        "finding a free loopback port",
        std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "no unused port after 64 tries",
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
        for port in ports {
            assert_ne!(port, 0);
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }
}

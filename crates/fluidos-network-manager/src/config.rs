//! Settings of the network manager and the checks they pass at startup.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

/// The Helm chart's multicast group and port (`MULTICAST_ADDRESS`).
pub const DEFAULT_MULTICAST_ADDRESS: &str = "239.11.11.1:4000";
/// Go's advertisement period.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// How long an advertisement keeps its KnownCluster alive. Go uses 10 s with
/// a write per advertisement; with writes only every TTL/2 (see
/// [`crate::lifecycle::plan_refresh`]) the TTL must span several intervals,
/// so that one lost datagram does not drop a peer.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How often expired KnownClusters are looked for (Go: 20 s).
pub const DEFAULT_HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(5);
/// Field manager of every write, shared by all replicas so that their
/// server-side applies merge instead of conflicting.
pub const FIELD_MANAGER: &str = "fluidos-network-manager";

/// Where and how often to advertise and listen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MulticastSettings {
    /// Group and port, e.g. `239.11.11.1:4000`.
    pub group: SocketAddrV4,
    /// Interface name (e.g. `eth1`) or IPv4 address to use; `None` lets
    /// the routing table choose.
    pub interface: Option<String>,
    /// Advertisement period.
    pub interval: Duration,
}

/// Everything the network manager is told at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Namespace of the KnownClusters.
    pub namespace: String,
    /// LAN discovery; `None` when switched off (then no multicast address
    /// is needed, unlike Go).
    pub multicast: Option<MulticastSettings>,
    /// KnownCluster lifetime after an advertisement.
    pub ttl: Duration,
    /// Period of the expiry sweep.
    pub housekeeping_interval: Duration,
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `MULTICAST_ADDRESS` is not `<IPv4 multicast group>:<port>`.
    #[error(
        "multicast address {0:?} is not <IPv4 multicast group>:<port>, e.g. {DEFAULT_MULTICAST_ADDRESS}"
    )]
    MulticastAddress(String),
    /// An interval of zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// The TTL would let a peer expire between two advertisements.
    #[error(
        "the KnownCluster TTL ({ttl:?}) must be at least three advertisement intervals ({interval:?})"
    )]
    TtlTooShort {
        /// The TTL given.
        ttl: Duration,
        /// The interval given.
        interval: Duration,
    },
}

/// Parses `MULTICAST_ADDRESS` (`"<group>:<port>"`).
pub fn parse_multicast_address(s: &str) -> Result<SocketAddrV4, SettingsError> {
    let bad = || SettingsError::MulticastAddress(s.to_owned());
    let addr: SocketAddrV4 = s.trim().parse().map_err(|_| bad())?;
    if addr.ip().is_multicast() && addr.port() != 0 {
        Ok(addr)
    } else {
        Err(bad())
    }
}

impl Settings {
    /// Checks the timings against each other.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.ttl.is_zero() {
            return Err(SettingsError::Zero("the KnownCluster TTL"));
        }
        if self.housekeeping_interval.is_zero() {
            return Err(SettingsError::Zero("the housekeeping interval"));
        }
        if let Some(m) = &self.multicast {
            if m.interval.is_zero() {
                return Err(SettingsError::Zero("the advertisement interval"));
            }
            // Refreshes are written when under TTL/2 remains; with three
            // intervals per TTL at least one advertisement lands in every
            // half-TTL window even if one datagram is lost.
            if self.ttl < m.interval.saturating_mul(3) {
                return Err(SettingsError::TtlTooShort {
                    ttl: self.ttl,
                    interval: m.interval,
                });
            }
        }
        Ok(())
    }
}

/// The address used for an interface given as an IPv4 literal or a name.
pub(crate) fn interface_address(
    interface: &str,
    interfaces: &[(String, Ipv4Addr)],
) -> Option<Ipv4Addr> {
    if let Ok(ip) = interface.parse::<Ipv4Addr>() {
        return Some(ip);
    }
    interfaces
        .iter()
        .find(|(name, _)| name == interface)
        .map(|(_, ip)| *ip)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(interval: u64, ttl: u64) -> Settings {
        Settings {
            namespace: "fluidos".into(),
            multicast: Some(MulticastSettings {
                group: parse_multicast_address(DEFAULT_MULTICAST_ADDRESS).unwrap(),
                interface: None,
                interval: Duration::from_secs(interval),
            }),
            ttl: Duration::from_secs(ttl),
            housekeeping_interval: Duration::from_secs(5),
        }
    }

    #[test]
    fn helm_multicast_address_parses_and_others_do_not() {
        assert_eq!(
            parse_multicast_address("239.11.11.1:4000").unwrap(),
            "239.11.11.1:4000".parse().unwrap()
        );
        for bad in ["", "239.11.11.1", "10.0.0.1:4000", "239.11.11.1:0", "x:1"] {
            assert!(parse_multicast_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_are_valid_and_short_ttls_are_not() {
        assert_eq!(settings(5, 30).validate(), Ok(()));
        assert!(matches!(
            settings(5, 10).validate(),
            Err(SettingsError::TtlTooShort { .. })
        ));
        assert!(settings(0, 30).validate().is_err());
        let mut off = settings(5, 10);
        off.multicast = None;
        assert_eq!(off.validate(), Ok(()), "no interval to compare with");
    }

    #[test]
    fn interface_by_name_or_address() {
        let ifs = vec![
            ("lo".to_owned(), Ipv4Addr::LOCALHOST),
            ("eth1".to_owned(), Ipv4Addr::new(10, 1, 0, 101)),
            ("eth1".to_owned(), Ipv4Addr::new(10, 1, 0, 102)),
        ];
        assert_eq!(
            interface_address("eth1", &ifs),
            Some(Ipv4Addr::new(10, 1, 0, 101))
        );
        assert_eq!(
            interface_address("192.168.1.1", &ifs),
            Some(Ipv4Addr::new(192, 168, 1, 1))
        );
        assert_eq!(interface_address("eth9", &ifs), None);
    }
}

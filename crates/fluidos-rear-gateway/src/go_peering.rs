//! Who gets the compatibility grant for unmodified Go consumers' Liqo
//! peering (`--rear-go-peering-grant`, off by default): the setting. The
//! grant's objects and decisions are `fluidos_peer_access::go_grant`; the
//! executor that applies them is [`fluidos_peer_access::credentials`].

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::buyer::{Caller, PlainHttpSales};

/// Which plain-HTTP buyers get the grant: `off` (the default), `all`, or
/// the addresses and networks listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoPeeringGrant(PlainHttpSales);

impl GoPeeringGrant {
    /// Nobody gets it.
    pub const OFF: GoPeeringGrant = GoPeeringGrant(PlainHttpSales::Off);

    /// Whether a purchase by `caller` gets the grant.
    pub fn covers(&self, caller: Caller) -> bool {
        match caller {
            Caller::Plain(ip) => self.0.allows(ip),
            Caller::Key(_) | Caller::AnonymousTls => false,
        }
    }

    /// Whether any caller may get it (the cluster-wide objects are needed).
    pub fn is_on(&self) -> bool {
        self.0 != PlainHttpSales::Off
    }

    /// Whether a plain-HTTP buyer at `ip` gets it.
    pub fn allows(&self, ip: Option<IpAddr>) -> bool {
        self.0.allows(ip)
    }
}

/// A value of `--rear-go-peering-grant` that is none of its forms.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a Go peering grant setting: use off, all, or a comma-separated list of \
     addresses or CIDR networks of the Go consumers (e.g. 10.0.0.7,192.168.1.0/24)"
)]
pub struct GoPeeringGrantError(String);

impl FromStr for GoPeeringGrant {
    type Err = GoPeeringGrantError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<PlainHttpSales>()
            .map(GoPeeringGrant)
            .map_err(|_| GoPeeringGrantError(s.to_owned()))
    }
}

impl fmt::Display for GoPeeringGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    #[test]
    fn the_setting_covers_plain_http_callers_it_lists_only() {
        let grant: GoPeeringGrant = "10.0.0.7,192.168.1.0/24".parse().unwrap();
        assert!(grant.covers(Caller::Plain(Some("192.168.1.9".parse().unwrap()))));
        assert!(!grant.covers(Caller::Plain(Some("10.0.0.8".parse().unwrap()))));
        assert!(!grant.covers(Caller::AnonymousTls));
        assert!(!GoPeeringGrant::OFF.covers(Caller::Plain(None)));
        assert!(!GoPeeringGrant::OFF.is_on());
        assert!("all".parse::<GoPeeringGrant>().unwrap().is_on());
        let e = "yes".parse::<GoPeeringGrant>().unwrap_err();
        assert!(e.to_string().contains("Go peering grant"), "{e}");
        assert_eq!(grant.to_string(), "10.0.0.7/32,192.168.1.0/24");
    }
}

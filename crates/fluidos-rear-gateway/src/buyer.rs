//! Who is buying: the caller as its connection proves it, the plain-HTTP
//! policy for unmodified Go nodes, and the owner a sale is bound to.
//!
//! All pure. A caller on TLS with a client certificate is its key's
//! [`Fingerprint`]; whatever it writes in `buyerID` does not change that. A
//! caller on plain HTTP (the Go node's client only speaks `http://`) proves
//! nothing, so it may buy only where the operator allowed plain-HTTP sales
//! ([`PlainHttpSales`]), and its sales are [`SaleOwner::PlainHttp`] from
//! its address: reachable again only over plain HTTP from that address,
//! never by a keyed peer, and a keyed peer's sales are never reachable over
//! plain HTTP.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axum::http::StatusCode;
use fluidos_rear_identity::Fingerprint;
use ipnet::IpNet;

use crate::error::ApiError;

/// What the connection a request came on proves about its sender (the
/// server loop puts it in the request's extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// TLS, with a client certificate for this key.
    Key(Fingerprint),
    /// TLS without a client certificate: may read the catalog only.
    AnonymousTls,
    /// Plain HTTP, from this address (`None`: the router called in-process).
    Plain(Option<IpAddr>),
}

/// Which plain-HTTP peers may reserve and buy: unmodified Go nodes can only
/// speak `http://`, and nothing on plain HTTP proves who is buying, so this
/// is off unless the operator turns it on (`--rear-plain-http-sales`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PlainHttpSales {
    /// Plain HTTP serves the catalog only (the default).
    #[default]
    Off,
    /// Any plain-HTTP peer may buy.
    All,
    /// Plain-HTTP peers from these networks may buy.
    From(Vec<IpNet>),
}

impl PlainHttpSales {
    /// Whether a plain-HTTP caller at `ip` may buy.
    pub fn allows(&self, ip: Option<IpAddr>) -> bool {
        match self {
            PlainHttpSales::Off => false,
            PlainHttpSales::All => true,
            PlainHttpSales::From(nets) => ip.is_some_and(|ip| {
                let ip = ip.to_canonical();
                nets.iter().any(|n| n.contains(&ip))
            }),
        }
    }
}

/// A value of `--rear-plain-http-sales` that is none of its forms.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a plain-HTTP sales setting: use off, all, or a comma-separated list of \
     addresses or CIDR networks (e.g. 10.0.0.7,192.168.1.0/24)"
)]
pub struct PlainHttpSalesError(String);

impl FromStr for PlainHttpSales {
    type Err = PlainHttpSalesError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "" => Ok(PlainHttpSales::Off),
            "all" => Ok(PlainHttpSales::All),
            list => list
                .split(',')
                .map(|item| {
                    let item = item.trim();
                    item.parse::<IpNet>()
                        .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                        .map_err(|_| PlainHttpSalesError(s.to_owned()))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(PlainHttpSales::From),
        }
    }
}

impl fmt::Display for PlainHttpSales {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlainHttpSales::Off => f.write_str("off"),
            PlainHttpSales::All => f.write_str("all"),
            PlainHttpSales::From(nets) => {
                let list: Vec<String> = nets.iter().map(ToString::to_string).collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

/// Whom a sale (a Transaction, its hold, its Contract) belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SaleOwner {
    /// The peer holding this key.
    Key(Fingerprint),
    /// A plain-HTTP buyer (allowed by [`PlainHttpSales`]) at this address
    /// (canonical: an IPv4 peer on a dual-stack socket is its IPv4
    /// address). `None`: the router called in-process, or a sale recorded
    /// before addresses were (and before sales were bound to keys).
    PlainHttp(Option<IpAddr>),
}

impl SaleOwner {
    /// The owner recorded in an object's annotations (neither key nor
    /// address: a plain-HTTP sale of an earlier version); `None` when the
    /// annotation is unreadable, which no caller matches.
    pub(crate) fn recorded(
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Option<Self> {
        match (
            annotations.get(crate::labels::BUYER_KEY),
            annotations.get(crate::labels::BUYER_ADDRESS),
        ) {
            (Some(key), _) => key.parse().ok().map(SaleOwner::Key),
            (None, Some(address)) => address
                .parse::<IpAddr>()
                .ok()
                .map(|ip| SaleOwner::PlainHttp(Some(ip.to_canonical()))),
            (None, None) => Some(SaleOwner::PlainHttp(None)),
        }
    }

    /// The annotations that record this owner on a sale's objects.
    pub(crate) fn annotations(self) -> Vec<(String, String)> {
        match self {
            SaleOwner::Key(fp) => vec![(crate::labels::BUYER_KEY.to_owned(), fp.to_string())],
            SaleOwner::PlainHttp(Some(ip)) => {
                vec![(crate::labels::BUYER_ADDRESS.to_owned(), ip.to_string())]
            }
            SaleOwner::PlainHttp(None) => Vec::new(),
        }
    }

    /// The key fingerprint a ledger entry records, if any.
    pub(crate) fn key(self) -> Option<String> {
        match self {
            SaleOwner::Key(fp) => Some(fp.to_string()),
            SaleOwner::PlainHttp(_) => None,
        }
    }

    /// The plain-HTTP address a ledger entry records, if any.
    pub(crate) fn address(self) -> Option<String> {
        match self {
            SaleOwner::PlainHttp(ip) => ip.map(|ip| ip.to_string()),
            SaleOwner::Key(_) => None,
        }
    }

    /// Whether `self`, as recorded on a sale, lets `caller` use it: the
    /// same owner, or any plain-HTTP caller for a plain-HTTP sale recorded
    /// without an address (made by an earlier version, so that it can
    /// still be bought and read after an upgrade).
    fn lets(self, caller: SaleOwner) -> bool {
        self == caller
            || (self == SaleOwner::PlainHttp(None) && matches!(caller, SaleOwner::PlainHttp(_)))
    }

    /// Who peering credentials issued to this owner belong to
    /// ([`fluidos_peer_access::grant::OWNER_ANNOTATION`]).
    pub(crate) fn credentials_owner(self) -> String {
        match self {
            SaleOwner::Key(fp) => fp.to_string(),
            SaleOwner::PlainHttp(_) => fluidos_peer_access::grant::PLAIN_HTTP_OWNER.to_owned(),
        }
    }

    /// How the owner is named in logs and in the per-buyer hold cap.
    pub(crate) fn describe(self) -> String {
        match self {
            SaleOwner::Key(fp) => fp.to_string(),
            SaleOwner::PlainHttp(Some(ip)) => format!("a plain-HTTP buyer at {ip}"),
            SaleOwner::PlainHttp(None) => "a plain-HTTP buyer".to_owned(),
        }
    }
}

/// The owner a sale request of `caller` acts as, or 403 saying what to do.
pub(crate) fn owner_of(caller: Caller, plain: &PlainHttpSales) -> Result<SaleOwner, ApiError> {
    match caller {
        Caller::Key(fp) => Ok(SaleOwner::Key(fp)),
        Caller::AnonymousTls => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "reserving and buying need a client certificate: present this node's REAR key \
             (a FLUIDOS-rs consumer does when it knows the provider's fingerprint)",
        )),
        Caller::Plain(ip) if plain.allows(ip) => {
            Ok(SaleOwner::PlainHttp(ip.map(|ip| ip.to_canonical())))
        }
        Caller::Plain(ip) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this provider sells over TLS only; plain-HTTP sales{} are off. A FLUIDOS-rs \
                 consumer pins the provider's key fingerprint (--peers host:port#sha256:..., or \
                 KnownCluster spec.fingerprint) and buys over TLS; for an unmodified Go node the \
                 provider's operator enables them with --rear-plain-http-sales=all or \
                 =<the peer's address or CIDR> (README, \"Trading with Go nodes\")",
                ip.map(|ip| format!(" from {ip}")).unwrap_or_default()
            ),
        )),
    }
}

/// 403 unless the sale `what`, recorded as owned by `recorded`, is the caller's.
pub(crate) fn check_owner(
    recorded: Option<SaleOwner>,
    caller: SaleOwner,
    what: &str,
) -> Result<(), ApiError> {
    if recorded.is_some_and(|r| r.lets(caller)) {
        return Ok(());
    }
    let whose = match recorded {
        Some(SaleOwner::Key(_)) => "a peer with another key",
        Some(SaleOwner::PlainHttp(_)) if matches!(caller, SaleOwner::PlainHttp(_)) => {
            "a plain-HTTP buyer at another address"
        }
        Some(SaleOwner::PlainHttp(_)) => "a plain-HTTP buyer",
        None => "an owner recorded in an unreadable form",
    };
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "{what} belongs to {whose}; only the peer that reserved it may use it (you are {})",
            caller.describe()
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn fp(byte: u8) -> Fingerprint {
        format!("sha256:{}", format!("{byte:02x}").repeat(32))
            .parse()
            .unwrap()
    }

    #[test]
    fn the_plain_http_setting_parses_its_three_forms_and_refuses_the_rest() {
        assert_eq!("off".parse(), Ok(PlainHttpSales::Off));
        assert_eq!("all".parse(), Ok(PlainHttpSales::All));
        let from: PlainHttpSales = "10.0.0.7, 192.168.1.0/24,::1".parse().unwrap();
        assert_eq!(from.to_string(), "10.0.0.7/32,192.168.1.0/24,::1/128");
        assert!(from.allows(Some("192.168.1.200".parse().unwrap())));
        assert!(from.allows(Some("10.0.0.7".parse().unwrap())));
        assert!(!from.allows(Some("10.0.0.8".parse().unwrap())));
        // An IPv4 peer seen on a dual-stack socket.
        assert!(from.allows(Some("::ffff:10.0.0.7".parse().unwrap())));
        assert!(!from.allows(None));
        assert!(PlainHttpSales::All.allows(None));
        assert!(!PlainHttpSales::Off.allows(Some("127.0.0.1".parse().unwrap())));
        let e = "yes".parse::<PlainHttpSales>().unwrap_err();
        assert!(e.to_string().contains("off, all"), "{e}");
        assert!("10.0.0.0/33".parse::<PlainHttpSales>().is_err());
    }

    #[test]
    fn a_keyed_caller_is_its_key_and_plain_http_needs_the_setting() {
        let off = PlainHttpSales::Off;
        assert_eq!(
            owner_of(Caller::Key(fp(1)), &off).unwrap(),
            SaleOwner::Key(fp(1))
        );
        let e = owner_of(Caller::AnonymousTls, &PlainHttpSales::All).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(
            e.body.error.contains("client certificate"),
            "{}",
            e.body.error
        );
        let ip = Some("10.1.2.3".parse().unwrap());
        let e = owner_of(Caller::Plain(ip), &off).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(
            e.body.error.contains("--rear-plain-http-sales") && e.body.error.contains("10.1.2.3"),
            "the refusal says how to enable it: {}",
            e.body.error
        );
        assert_eq!(
            owner_of(Caller::Plain(ip), &PlainHttpSales::All).unwrap(),
            SaleOwner::PlainHttp(ip)
        );
        // An IPv4 peer on a dual-stack socket is its IPv4 address.
        let mapped = Some("::ffff:10.1.2.3".parse().unwrap());
        assert_eq!(
            owner_of(Caller::Plain(mapped), &PlainHttpSales::All).unwrap(),
            SaleOwner::PlainHttp(ip)
        );
    }

    fn plain(ip: &str) -> SaleOwner {
        SaleOwner::PlainHttp(Some(ip.parse().unwrap()))
    }

    #[test]
    fn a_sale_is_only_its_owners() {
        let mine = SaleOwner::Key(fp(1));
        let earlier = SaleOwner::PlainHttp(None);
        for (recorded, caller) in [
            (mine, mine),
            (plain("10.0.0.7"), plain("10.0.0.7")),
            // A plain-HTTP sale of an earlier version, without an address.
            (earlier, plain("10.0.0.7")),
            (earlier, earlier),
        ] {
            assert!(
                check_owner(Some(recorded), caller, "t").is_ok(),
                "{recorded:?} / {caller:?}"
            );
        }
        for (recorded, caller, whose) in [
            (Some(SaleOwner::Key(fp(2))), mine, "another key"),
            (Some(plain("10.0.0.7")), mine, "a plain-HTTP buyer"),
            (Some(earlier), mine, "a plain-HTTP buyer"),
            (Some(mine), plain("10.0.0.7"), "another key"),
            (
                Some(plain("10.0.0.7")),
                plain("10.0.0.8"),
                "at another address",
            ),
            (Some(plain("10.0.0.7")), earlier, "at another address"),
            (None, mine, "unreadable"),
            (None, plain("10.0.0.7"), "unreadable"),
        ] {
            let e = check_owner(recorded, caller, "transaction t").unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{recorded:?} / {caller:?}");
            assert!(e.body.error.starts_with("transaction t belongs to"));
            assert!(e.body.error.contains(whose), "{}", e.body.error);
        }
    }

    #[test]
    fn the_owner_round_trips_through_its_annotations() {
        let mut annotations = std::collections::BTreeMap::new();
        assert_eq!(
            SaleOwner::recorded(&annotations),
            Some(SaleOwner::PlainHttp(None))
        );
        assert!(SaleOwner::PlainHttp(None).annotations().is_empty());
        for owner in [
            SaleOwner::Key(fp(7)),
            plain("10.0.0.7"),
            plain("2001:db8::1"),
        ] {
            let annotations = owner.annotations().into_iter().collect();
            assert_eq!(SaleOwner::recorded(&annotations), Some(owner));
        }
        annotations.insert(
            crate::labels::BUYER_KEY.to_owned(),
            "sha256:nope".to_owned(),
        );
        assert_eq!(SaleOwner::recorded(&annotations), None);
        annotations.clear();
        annotations.insert(
            crate::labels::BUYER_ADDRESS.to_owned(),
            "nowhere".to_owned(),
        );
        assert_eq!(SaleOwner::recorded(&annotations), None);
    }
}

//! What a Broker object asks for, checked before anything connects: the
//! role, the endpoint, and the two messages this node will publish. Pure.

use fluidos_api::NodeIdentity;
use fluidos_api::network::BrokerSpec;

use super::message::{self, MessageError};

/// The Go node's implied port (`amqps://<address>:5671/`).
pub const DEFAULT_PORT: u16 = 5671;

/// Longest host name accepted in `spec.address`.
const MAX_HOST_LEN: usize = 253;

/// `spec.role`, as the Go node reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `publisher`: announces this node, hears nothing.
    Publisher,
    /// `subscriber`: hears other nodes (and publishes its routing rule).
    Subscriber,
    /// Anything else (the sample says `both`).
    Both,
}

impl Role {
    /// Go: `publisher` and `subscriber` exactly, anything else is both.
    pub fn parse(role: &str) -> Role {
        match role {
            "publisher" => Role::Publisher,
            "subscriber" => Role::Subscriber,
            _ => Role::Both,
        }
    }

    /// Whether this node announces itself.
    pub fn publishes(self) -> bool {
        matches!(self, Role::Publisher | Role::Both)
    }

    /// Whether this node consumes its queue (and so publishes its rule).
    pub fn subscribes(self) -> bool {
        matches!(self, Role::Subscriber | Role::Both)
    }
}

/// Where the broker listens; `host` is also the name its certificate must
/// carry (Go: `ServerName = spec.address`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// DNS name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port, [`DEFAULT_PORT`] unless `spec.address` names one.
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Everything one Broker object makes this node do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Publisher, subscriber or both.
    pub role: Role,
    /// The broker.
    pub endpoint: Endpoint,
    /// Body of the announcement (publishers only).
    pub announcement: Option<Vec<u8>>,
    /// Body of the routing rule (subscribers only: the broker's router
    /// delivers to a client's queue the announcements its rule matches).
    pub rule: Option<Vec<u8>>,
}

/// A Broker spec that cannot work; the Broker's status says which.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// `spec.address` is not `host` or `host:port`.
    #[error("spec.address {0:?} is not a host name or address, optionally with :port")]
    Address(String),
    /// `spec.metric` or `spec.rule` makes no message.
    #[error(transparent)]
    Message(#[from] MessageError),
}

/// Checks `spec` and prepares the messages `identity` will publish; its
/// announcements carry `fingerprint`, the node's REAR key, when it has one.
pub fn plan(
    spec: &BrokerSpec,
    identity: &NodeIdentity,
    fingerprint: Option<&fluidos_rear_identity::Fingerprint>,
) -> Result<Plan, SpecError> {
    let role = Role::parse(&spec.role);
    let endpoint = parse_address(&spec.address)?;
    let announcement = if role.publishes() {
        Some(message::announcement(&spec.metric, identity, fingerprint)?)
    } else {
        None
    };
    let rule = if role.subscribes() {
        Some(message::rule(&spec.rule)?)
    } else {
        None
    };
    Ok(Plan {
        role,
        endpoint,
        announcement,
        rule,
    })
}

/// Parses `spec.address`: `host`, `host:port`, `[v6]:port`, or a bare IPv6
/// address. Go takes a host only and appends `:5671`; a port is accepted
/// here so that a broker on another port can be used.
pub fn parse_address(address: &str) -> Result<Endpoint, SpecError> {
    let bad = || SpecError::Address(address.to_owned());
    let a = address.trim();
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        host.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        let port = match after {
            "" => DEFAULT_PORT,
            p => parse_port(p.strip_prefix(':').ok_or_else(bad)?).ok_or_else(bad)?,
        };
        (host, port)
    } else if a.parse::<std::net::Ipv6Addr>().is_ok() {
        (a, DEFAULT_PORT)
    } else {
        let (host, port) = match a.split_once(':') {
            Some((h, p)) => (h, parse_port(p).ok_or_else(bad)?),
            None => (a, DEFAULT_PORT),
        };
        let host_ok = !host.is_empty()
            && host.len() <= MAX_HOST_LEN
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        if !host_ok {
            return Err(bad());
        }
        (host, port)
    };
    Ok(Endpoint {
        host: host.to_owned(),
        port,
    })
}

fn parse_port(p: &str) -> Option<u16> {
    p.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(role: &str, metric: &str, rule: &str) -> BrokerSpec {
        BrokerSpec {
            address: "fluidos.top-ix.org".into(),
            name: "broker-sample".into(),
            clcert: "cl".into(),
            cacert: "ca".into(),
            role: role.into(),
            rule: rule.into(),
            metric: metric.into(),
        }
    }

    fn identity() -> NodeIdentity {
        NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "node-a".into(),
            ip: "10.0.0.1:30000".into(),
            additional_information: None,
        }
    }

    #[test]
    fn roles_as_go_reads_them() {
        assert_eq!(Role::parse("publisher"), Role::Publisher);
        assert_eq!(Role::parse("subscriber"), Role::Subscriber);
        for other in ["both", "", "Publisher", "anything"] {
            assert_eq!(Role::parse(other), Role::Both, "{other}");
        }
        assert!(Role::Publisher.publishes() && !Role::Publisher.subscribes());
        assert!(!Role::Subscriber.publishes() && Role::Subscriber.subscribes());
        assert!(Role::Both.publishes() && Role::Both.subscribes());
    }

    #[test]
    fn addresses() {
        let ep = |h: &str, p| Endpoint {
            host: h.into(),
            port: p,
        };
        assert_eq!(
            parse_address("fluidos.top-ix.org").unwrap(),
            ep("fluidos.top-ix.org", 5671)
        );
        assert_eq!(
            parse_address(" 127.0.0.1:25671 ").unwrap(),
            ep("127.0.0.1", 25671)
        );
        assert_eq!(parse_address("::1").unwrap(), ep("::1", 5671));
        assert_eq!(parse_address("[::1]:1").unwrap(), ep("::1", 1));
        assert_eq!(parse_address("[::1]:1").unwrap().to_string(), "[::1]:1");
        for bad in [
            "",
            "a b",
            "h:0",
            "h:x",
            "h:1:2",
            "[::1",
            "[zz]:1",
            "amqps://h",
        ] {
            assert!(parse_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sample_plans_both_messages() {
        // deployments/node/samples/broker.yaml of the Go node.
        let s = spec(
            "both",
            r#"{"bandwidth":1,"latency":10,"location":"K","foo":"bar"}"#,
            r#"{"MAXlatency":1000,"MINbandwidth":1,"locations":["K","J","Z"],"example":"aAbB12"}"#,
        );
        let p = plan(&s, &identity(), None).unwrap();
        assert_eq!(p.role, Role::Both);
        assert!(p.announcement.is_some() && p.rule.is_some());
    }

    #[test]
    fn a_role_needs_only_its_own_message() {
        let p = plan(&spec("subscriber", "not json", "{}"), &identity(), None).unwrap();
        assert!(p.announcement.is_none(), "a subscriber announces nothing");
        let p = plan(&spec("publisher", "{}", "not json"), &identity(), None).unwrap();
        assert!(p.rule.is_none(), "a publisher routes nothing to itself");
        assert!(matches!(
            plan(&spec("both", "[1]", "{}"), &identity(), None),
            Err(SpecError::Message(MessageError::MetricNotObject))
        ));
        assert!(matches!(
            plan(&spec("both", "{}", "{"), &identity(), None),
            Err(SpecError::Message(MessageError::Rule(_)))
        ));
    }
}

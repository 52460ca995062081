//! Who may buy K8Slices here (`--rear-k8slice-buyers`).
//!
//! REAR keys cost nothing: anyone can make one, reserve a flavor's whole
//! remainder with it, and buy it, which also makes it a Liqo consumer of
//! this cluster. A provider that sells only to peers it knows says so:
//!
//! - `open` (the default): any buyer the transport admits (a TLS key, or
//!   plain HTTP where `--rear-plain-http-sales` allows it);
//! - otherwise a comma-separated list, any item of which admits a buyer:
//!   - `known`: a TLS buyer whose key is the `spec.fingerprint` of a
//!     KnownCluster in this node's namespace (one the operator wrote, or one
//!     the network manager made from a LAN or broker announcement: those
//!     are not authenticated, so `known` admits anyone who can announce on
//!     that LAN or broker);
//!   - `sha256:<64 hex>`: the TLS buyer with that key;
//!   - an address or CIDR: a buyer connecting from there, over TLS or plain
//!     HTTP (behind a load balancer that rewrites source addresses, every
//!     buyer comes from its address).
//!
//! Services are not affected: a Service sale makes no peering. A refusal is
//! a 403 naming the buyer's key and address and the setting, so the buyer's
//! operator knows whom to ask.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use axum::http::StatusCode;
use fluidos_api::KnownCluster;
use fluidos_rear_identity::Fingerprint;
use ipnet::IpNet;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::buyer::SaleOwner;
use crate::error::ApiError;

/// How long a sale waits for the first list of KnownClusters (at the
/// gateway's start) before it is answered 503.
const KNOWN_CLUSTERS_WAIT: Duration = Duration::from_secs(5);

/// One item of [`K8SliceBuyers::Only`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// A TLS buyer whose key a KnownCluster here records.
    Known,
    /// The TLS buyer with this key.
    Key(Fingerprint),
    /// A buyer connecting from this network.
    Network(IpNet),
}

/// Who may buy K8Slices (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum K8SliceBuyers {
    /// Any buyer the transport admits.
    #[default]
    Open,
    /// Buyers that any of these admit.
    Only(Vec<Admitted>),
}

impl K8SliceBuyers {
    /// Whether a buyer with `key` (TLS) connecting from `ip` may buy, with
    /// `known` telling whether a KnownCluster records a key (pure).
    pub fn admits(
        &self,
        key: Option<&Fingerprint>,
        ip: Option<IpAddr>,
        known: impl Fn(&Fingerprint) -> bool,
    ) -> bool {
        let K8SliceBuyers::Only(items) = self else {
            return true;
        };
        let ip = ip.map(|ip| ip.to_canonical());
        items.iter().any(|item| match item {
            Admitted::Known => key.is_some_and(&known),
            Admitted::Key(fp) => key == Some(fp),
            Admitted::Network(net) => ip.is_some_and(|ip| net.contains(&ip)),
        })
    }

    /// Whether deciding needs the KnownClusters.
    pub fn needs_known_clusters(&self) -> bool {
        matches!(self, K8SliceBuyers::Only(items) if items.contains(&Admitted::Known))
    }
}

/// A value of `--rear-k8slice-buyers` that is none of its forms.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a K8Slice buyers setting: use open, or a comma-separated list of known, \
     sha256:<64 hex> keys, and addresses or CIDR networks (e.g. known,10.0.0.0/8)"
)]
pub struct K8SliceBuyersError(String);

impl FromStr for K8SliceBuyers {
    type Err = K8SliceBuyersError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "open" | "" => Ok(K8SliceBuyers::Open),
            list => list
                .split(',')
                .map(|item| {
                    let item = item.trim();
                    if item == "known" {
                        Ok(Admitted::Known)
                    } else if item.starts_with("sha256:") {
                        item.parse().map(Admitted::Key).map_err(|_| ())
                    } else {
                        item.parse::<IpNet>()
                            .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                            .map(Admitted::Network)
                            .map_err(|_| ())
                    }
                })
                .collect::<Result<Vec<_>, ()>>()
                .map(K8SliceBuyers::Only)
                .map_err(|()| K8SliceBuyersError(s.to_owned())),
        }
    }
}

impl fmt::Display for K8SliceBuyers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            K8SliceBuyers::Open => f.write_str("open"),
            K8SliceBuyers::Only(items) => {
                let list: Vec<String> = items
                    .iter()
                    .map(|item| match item {
                        Admitted::Known => "known".to_owned(),
                        Admitted::Key(fp) => fp.to_string(),
                        Admitted::Network(net) => net.to_string(),
                    })
                    .collect();
                f.write_str(&list.join(","))
            }
        }
    }
}

/// The 403 for a buyer the setting does not admit (pure).
fn refusal(setting: &K8SliceBuyers, owner: SaleOwner, ip: Option<IpAddr>) -> ApiError {
    let who = match owner {
        SaleOwner::Key(fp) => format!("key {fp}"),
        SaleOwner::PlainHttp(_) => "a plain-HTTP buyer (no key)".to_owned(),
    };
    let from = ip.map(|ip| format!(" from {ip}")).unwrap_or_default();
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "this provider sells K8Slices (and Services delivered by Liqo) only to the buyers it admits (--rear-k8slice-buyers={setting}); \
             {who}{from} is not one of them. Ask its operator to add your key (or, with `known`, a \
             KnownCluster with your key as spec.fingerprint) or your network"
        ),
    )
}

/// The setting and, when it needs them, a watch cache of the KnownClusters.
pub(crate) struct SalePolicy {
    setting: K8SliceBuyers,
    known: Option<Store<KnownCluster>>,
}

impl SalePolicy {
    /// The policy of `setting`; the future, when there is one, keeps the
    /// KnownClusters of `namespace` in step and must be spawned.
    pub(crate) fn new(
        client: &kube::Client,
        namespace: &str,
        setting: K8SliceBuyers,
    ) -> (Self, Option<impl Future<Output = ()> + Send + 'static>) {
        if !setting.needs_known_clusters() {
            return (
                SalePolicy {
                    setting,
                    known: None,
                },
                None,
            );
        }
        let (store, writer) = reflector::store();
        let stream = watcher(
            Api::<KnownCluster>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(writer)
        .applied_objects();
        let driver = async move {
            futures::pin_mut!(stream);
            while let Some(event) = futures::StreamExt::next(&mut stream).await {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "watching KnownClusters for the K8Slice buyers setting");
                }
            }
        };
        (
            SalePolicy {
                setting,
                known: Some(store),
            },
            Some(driver),
        )
    }

    /// Refuses (403) a K8Slice buyer the setting does not admit; 503 while
    /// the KnownClusters it needs are not listed yet.
    pub(crate) async fn check(&self, owner: SaleOwner, ip: Option<IpAddr>) -> Result<(), ApiError> {
        let key = match owner {
            SaleOwner::Key(fp) => Some(fp),
            SaleOwner::PlainHttp(_) => None,
        };
        let known: Vec<Fingerprint> = match &self.known {
            None => Vec::new(),
            Some(store) => {
                if !matches!(
                    tokio::time::timeout(KNOWN_CLUSTERS_WAIT, store.wait_until_ready()).await,
                    Ok(Ok(()))
                ) {
                    return Err(ApiError::unavailable(
                        "this provider is still listing its KnownClusters, which decide who may \
                         buy K8Slices here; retry",
                    ));
                }
                // Not a stale announcement: one whose expiry passed (the
                // network manager removes it soon) admits no one.
                let now = jiff::Timestamp::now();
                let live = |k: &KnownCluster| {
                    k.status.as_ref().is_none_or(|s| {
                        s.expiration_time
                            .parse::<jiff::Timestamp>()
                            .map_or(true, |t| t > now)
                    })
                };
                store
                    .state()
                    .iter()
                    .filter(|k| k.metadata.deletion_timestamp.is_none() && live(k))
                    .filter_map(|k| k.spec.fingerprint.as_deref()?.parse().ok())
                    .collect()
            }
        };
        if self
            .setting
            .admits(key.as_ref(), ip, |fp| known.contains(fp))
        {
            Ok(())
        } else {
            tracing::info!(buyer = %owner.describe(), "a K8Slice buyer the sale policy does not admit was refused");
            Err(refusal(&self.setting, owner, ip))
        }
    }

    /// The setting, for the start-up log.
    pub(crate) fn setting(&self) -> &K8SliceBuyers {
        &self.setting
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn fp(c: char) -> Fingerprint {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    #[test]
    fn the_setting_reads_and_writes_back_its_forms() {
        assert_eq!("open".parse(), Ok(K8SliceBuyers::Open));
        assert_eq!("".parse(), Ok(K8SliceBuyers::Open));
        let a = fp('a');
        let s = format!("known, {a},10.0.0.0/8, 192.168.1.7");
        let parsed: K8SliceBuyers = s.parse().unwrap();
        assert_eq!(
            parsed,
            K8SliceBuyers::Only(vec![
                Admitted::Known,
                Admitted::Key(a),
                Admitted::Network("10.0.0.0/8".parse().unwrap()),
                Admitted::Network("192.168.1.7/32".parse().unwrap()),
            ])
        );
        assert_eq!(parsed.to_string().parse(), Ok(parsed.clone()));
        assert!(parsed.needs_known_clusters());
        for bad in ["all", "sha256:abc", "known,", "10.0.0.0/33", "off"] {
            assert!(bad.parse::<K8SliceBuyers>().is_err(), "{bad}");
        }
        let err = "nope".parse::<K8SliceBuyers>().unwrap_err().to_string();
        assert!(err.contains("open") && err.contains("known"), "{err}");
    }

    #[test]
    fn any_item_admits_and_nothing_else_does() {
        let (a, b) = (fp('a'), fp('b'));
        let none = |_: &Fingerprint| false;
        assert!(K8SliceBuyers::Open.admits(None, None, none));
        let only: K8SliceBuyers = format!("{a},10.1.0.0/16,2001:db8::/64").parse().unwrap();
        assert!(only.admits(Some(&a), None, none));
        assert!(!only.admits(Some(&b), None, none));
        assert!(!only.admits(None, None, none));
        // A network admits keys and plain HTTP alike, IPv4-mapped too.
        let inside: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(only.admits(Some(&b), Some(inside), none));
        assert!(only.admits(None, Some(inside), none));
        assert!(only.admits(None, Some("::ffff:10.1.2.3".parse().unwrap()), none));
        assert!(only.admits(None, Some("2001:db8::9".parse().unwrap()), none));
        assert!(!only.admits(None, Some("10.2.0.1".parse().unwrap()), none));
        // `known`: a key a KnownCluster records; never plain HTTP.
        let known: K8SliceBuyers = "known".parse().unwrap();
        let records_b = |k: &Fingerprint| *k == b;
        assert!(known.admits(Some(&b), None, records_b));
        assert!(!known.admits(Some(&a), None, records_b));
        assert!(!known.admits(None, Some(inside), records_b));
        assert!(!only.needs_known_clusters());
    }

    #[test]
    fn a_refusal_names_the_buyer_and_the_setting() {
        let setting: K8SliceBuyers = "known".parse().unwrap();
        let e = refusal(
            &setting,
            SaleOwner::Key(fp('c')),
            Some("10.9.8.7".parse().unwrap()),
        );
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        let text = &e.body.error;
        assert!(
            text.contains("--rear-k8slice-buyers=known")
                && text.contains(&fp('c').to_string())
                && text.contains("10.9.8.7"),
            "{text}"
        );
    }
}

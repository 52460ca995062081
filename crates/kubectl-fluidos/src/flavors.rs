//! `kubectl fluidos flavors`: the Flavors this node sells, or (`--remote`)
//! what its providers offer over REAR.

use std::collections::BTreeSet;

use anyhow::Context as _;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::rear::WireFlavor;
use fluidos_api::{Flavor, KnownCluster, Price};
use fluidos_rear_client::{ClientConfig, ProviderAddress, RearClient};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use crate::cli::FlavorsArgs;
use crate::cluster::explain_api_error;
use crate::output::{self, Cell, Palette, Table, print_structured};

/// Runs `flavors`.
pub async fn run(client: Client, namespace: &str, args: &FlavorsArgs) -> anyhow::Result<()> {
    if args.remote || !args.peers.is_empty() {
        return run_remote(client, namespace, args).await;
    }
    let flavors: Api<Flavor> = Api::namespaced(client, namespace);
    let list = flavors
        .list(&ListParams::default())
        .await
        .map_err(|e| explain_api_error(e, "Flavor", namespace))?;
    if let Some(format) = args.output {
        return print_structured(format, &kube_list(&list.items)?);
    }
    if list.items.is_empty() {
        eprintln!("No Flavors in namespace {namespace}.");
        return Ok(());
    }
    let table = local_table(&list.items, jiff::Timestamp::now());
    print!("{}", table.render(Palette::detect()));
    Ok(())
}

/// The objects as kubectl's `-o json` prints a list (`kind: List`).
pub fn kube_list<T: Serialize>(items: &[T]) -> anyhow::Result<serde_json::Value> {
    let items = items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .context("encoding the objects")?;
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": items,
    }))
}

/// What a flavor offers, in one short phrase: `cpu 4, memory 8Gi, pods 110
/// (amd64)` for a K8Slice, `mysql (database)` for a Service.
pub fn offer_summary(data: &FlavorTypeData) -> String {
    match data {
        FlavorTypeData::K8Slice(k) => {
            let c = &k.characteristics;
            let mut s = format!("cpu {}, memory {}, pods {}", c.cpu.0, c.memory.0, c.pods.0);
            if let Some(storage) = c.storage.as_ref().filter(|s| !is_zero(&s.0)) {
                s.push_str(&format!(", storage {}", storage.0));
            }
            if let Some(gpu) = c.gpu.as_ref().filter(|g| !is_zero(&g.cores.0)) {
                s.push_str(&format!(", gpu {}", gpu.cores.0));
                if !gpu.model.is_empty() {
                    s.push_str(&format!(" {}", gpu.model));
                }
            }
            if !c.architecture.is_empty() {
                s.push_str(&format!(" ({})", c.architecture));
            }
            s
        }
        FlavorTypeData::Service(svc) => {
            if svc.category.is_empty() {
                svc.name.clone()
            } else {
                format!("{} ({})", svc.name, svc.category)
            }
        }
    }
}

fn is_zero(quantity: &str) -> bool {
    fluidos_api::quantity::Amount::of(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        quantity.to_owned(),
    ))
    .is_ok_and(|a| a.nanos == 0)
}

/// `12 EUR/month`, or empty when the flavor has no price.
pub fn price_summary(price: &Price) -> String {
    if price.amount.is_empty() {
        return String::new();
    }
    let mut s = price.amount.clone();
    if !price.currency.is_empty() {
        s.push(' ');
        s.push_str(&price.currency);
    }
    if !price.period.is_empty() {
        s.push('/');
        s.push_str(&price.period);
    }
    s
}

fn yes_no(b: bool) -> Cell {
    if b {
        Cell::state("true")
    } else {
        Cell {
            text: "false".into(),
            tone: output::Tone::Faint,
        }
    }
}

/// The table of local Flavors, sorted by name.
pub fn local_table(flavors: &[Flavor], now: jiff::Timestamp) -> Table {
    let mut table = Table::new(&["NAME", "TYPE", "AVAILABLE", "OFFER", "PRICE", "AGE"]);
    let mut sorted: Vec<&Flavor> = flavors.iter().collect();
    sorted.sort_by_key(|f| f.name_any());
    for f in sorted {
        let offer = f
            .spec
            .flavor_type
            .parse()
            .map_or_else(|e| format!("<undecodable: {e}>"), |d| offer_summary(&d));
        table.push(vec![
            Cell::plain(f.name_any()),
            Cell::plain(f.spec.flavor_type.type_identifier.clone()),
            yes_no(f.spec.availability),
            Cell::plain(offer),
            Cell::plain(price_summary(&f.spec.price)),
            Cell::plain(output::age(output::created_at(f), now)),
        ]);
    }
    table
}

/// A provider to ask, and why it is asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Provider {
    /// `host:port` of its REAR gateway.
    pub address: String,
    /// The fingerprint of its REAR key (`sha256:<64 hex>`) as the
    /// KnownCluster or `--peer` wrote it: asked over TLS pinned to that key
    /// (anonymously), plain HTTP without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The KnownCluster naming it, or `--peer`.
    pub source: String,
}

impl Provider {
    /// Where to call it; a fingerprint that is not one is an error naming
    /// the expected form (that provider is then not asked).
    pub fn rear_address(&self) -> Result<ProviderAddress, String> {
        ProviderAddress::with_optional_fingerprint(
            self.address.clone(),
            self.fingerprint.as_deref(),
        )
        .map_err(|e| format!("{} gives a malformed fingerprint: {e}", self.source))
    }
}

/// The providers to ask: every KnownCluster's address (with its
/// fingerprint), then every `--peer` (`host:port` or
/// `host:port#sha256:<64 hex>`), each address and key once (the first
/// source wins).
pub fn providers_to_ask(known: &[KnownCluster], peers: &[String]) -> Vec<Provider> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut sorted: Vec<&KnownCluster> = known.iter().collect();
    sorted.sort_by_key(|k| k.name_any());
    let candidates = sorted
        .into_iter()
        .map(|k| {
            (
                k.spec.address.trim().to_owned(),
                k.spec.fingerprint.as_deref().map(|f| f.trim().to_owned()),
                k.name_any(),
            )
        })
        .chain(peers.iter().map(|p| {
            let (address, fingerprint) = match p.trim().split_once('#') {
                Some((a, f)) => (a.to_owned(), Some(f.to_owned())),
                None => (p.trim().to_owned(), None),
            };
            (address, fingerprint, "--peer".to_owned())
        }));
    for (address, fingerprint, source) in candidates {
        if address.is_empty() || !seen.insert((address.clone(), fingerprint.clone())) {
            continue;
        }
        out.push(Provider {
            address,
            fingerprint,
            source,
        });
    }
    out
}

/// What one provider answered.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderAnswer {
    /// Who was asked.
    #[serde(flatten)]
    pub provider: Provider,
    /// Its flavors, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flavors: Option<Vec<WireFlavor>>,
    /// Why it did not, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One row of the remote listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteRow {
    /// Address the flavor was listed by.
    pub address: String,
    /// Flavor ID.
    pub flavor_id: String,
    /// Seller's node ID.
    pub provider_id: String,
    /// `K8Slice`, `Service`, or the wire name of another type.
    pub flavor_type: String,
    /// Can be bought now.
    pub available: bool,
    /// [`offer_summary`].
    pub offer: String,
    /// [`price_summary`].
    pub price: String,
}

/// The remote listing: every answered flavor once (a flavor listed by two
/// addresses of the same provider is shown under the first), sorted by
/// address then flavor ID; and the providers that did not answer.
pub fn merge_remote(answers: &[ProviderAnswer]) -> (Vec<RemoteRow>, Vec<(String, String)>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for answer in answers {
        if let Some(error) = &answer.error {
            failures.push((answer.provider.address.clone(), error.clone()));
        }
        for f in answer.flavors.iter().flatten() {
            if !seen.insert((f.provider_id.clone(), f.flavor_id.clone())) {
                continue;
            }
            let (flavor_type, offer) = match f.parse_type() {
                Ok(data) => {
                    let t = match &data {
                        FlavorTypeData::K8Slice(_) => "K8Slice",
                        FlavorTypeData::Service(_) => "Service",
                    };
                    (t.to_owned(), offer_summary(&data))
                }
                Err(e) => (f.type_.name.clone(), format!("<undecodable: {e}>")),
            };
            rows.push(RemoteRow {
                address: answer.provider.address.clone(),
                flavor_id: f.flavor_id.clone(),
                provider_id: f.provider_id.clone(),
                flavor_type,
                available: f.availability,
                offer,
                price: price_summary(&f.price),
            });
        }
    }
    rows.sort_by(|a, b| (&a.address, &a.flavor_id).cmp(&(&b.address, &b.flavor_id)));
    (rows, failures)
}

/// The remote listing as a table.
pub fn remote_table(rows: &[RemoteRow]) -> Table {
    let mut table = Table::new(&[
        "PROVIDER",
        "FLAVOR",
        "NODE",
        "TYPE",
        "AVAILABLE",
        "OFFER",
        "PRICE",
    ]);
    for r in rows {
        table.push(vec![
            Cell::plain(r.address.clone()),
            Cell::plain(r.flavor_id.clone()),
            Cell::plain(r.provider_id.clone()),
            Cell::plain(r.flavor_type.clone()),
            yes_no(r.available),
            Cell::plain(r.offer.clone()),
            Cell::plain(r.price.clone()),
        ]);
    }
    table
}

async fn run_remote(client: Client, namespace: &str, args: &FlavorsArgs) -> anyhow::Result<()> {
    let known: Api<KnownCluster> = Api::namespaced(client, namespace);
    let known = match known.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // Without KnownClusters (CRD absent, or not allowed) --peer still works.
        Err(e) if !args.peers.is_empty() => {
            eprintln!("warning: cannot read KnownClusters in namespace {namespace}: {e}");
            Vec::new()
        }
        Err(e) => return Err(explain_api_error(e, "KnownCluster", namespace)),
    };
    let providers = providers_to_ask(&known, &args.peers);
    if providers.is_empty() {
        anyhow::bail!(
            "no providers known: no KnownClusters in namespace {namespace} and no --peer given"
        );
    }
    let rear = RearClient::new(ClientConfig {
        connect_timeout: args.peer_timeout.min(std::time::Duration::from_secs(2)),
        list_timeout: args.peer_timeout,
        retries: 0,
        ..ClientConfig::default()
    })
    .context("building the REAR client")?;
    let answers = futures::future::join_all(providers.into_iter().map(|provider| {
        let rear = rear.clone();
        async move {
            let asked = match provider.rear_address() {
                Ok(address) => rear
                    .list_flavors(&address, None)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match asked {
                // A listing past the client's bounds: what was read, and why
                // the rest was not.
                Ok(listing) => ProviderAnswer {
                    provider,
                    error: listing.unread_reason(),
                    flavors: Some(listing.flavors),
                },
                Err(e) => ProviderAnswer {
                    provider,
                    flavors: None,
                    error: Some(e),
                },
            }
        }
    }))
    .await;
    let all_failed = answers.iter().all(|a| a.flavors.is_none());
    if let Some(format) = args.output {
        print_structured(format, &serde_json::json!({ "providers": answers }))?;
    } else {
        let (rows, failures) = merge_remote(&answers);
        for (address, error) in &failures {
            eprintln!(
                "warning: {}: {}",
                crate::output::printable(address),
                crate::output::printable(&error.to_string())
            );
        }
        if rows.is_empty() {
            if !all_failed {
                eprintln!("No flavors offered by the providers that answered.");
            }
        } else {
            print!("{}", remote_table(&rows).render(Palette::detect()));
        }
    }
    if all_failed {
        anyhow::bail!("no provider answered");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fluidos_api::network::KnownClusterSpec;

    fn known(name: &str, address: &str) -> KnownCluster {
        KnownCluster::new(
            name,
            KnownClusterSpec {
                address: address.into(),
                fingerprint: None,
            },
        )
    }

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn pinned_providers_are_asked_with_their_key() {
        let mut pinned = known("knowncluster-a", "10.0.0.1:30000");
        pinned.spec.fingerprint = Some(FP.into());
        let mut bad = known("knowncluster-bad", "10.0.0.3:30000");
        bad.spec.fingerprint = Some("sha256:XY".into());
        let providers = providers_to_ask(
            &[pinned, bad],
            &[
                format!("10.0.0.1:30000#{FP}"),
                "10.0.0.1:30000".into(),
                format!("10.0.0.2:30000#{FP}"),
            ],
        );
        let asked: Vec<Result<String, String>> = providers
            .iter()
            .map(|p| p.rear_address().map(|a| a.to_string()))
            .collect();
        assert_eq!(asked.len(), 4, "{providers:?}");
        assert_eq!(asked[0], Ok(format!("10.0.0.1:30000#{FP}")));
        let Err(e) = &asked[1] else {
            panic!("{asked:?}");
        };
        assert!(
            e.starts_with("knowncluster-bad gives a malformed fingerprint: "),
            "{e}"
        );
        assert!(e.contains("expected sha256:"), "{e}");
        assert_eq!(asked[2], Ok("10.0.0.1:30000".to_owned()));
        assert_eq!(asked[3], Ok(format!("10.0.0.2:30000#{FP}")));
        assert_eq!(providers[3].source, "--peer");
    }

    fn wire(id: &str, provider: &str, cpu: &str) -> WireFlavor {
        serde_json::from_value(serde_json::json!({
            "flavorID": id,
            "providerID": provider,
            "type": {"name": "k8slice", "data": {
                "charateristics": {"architecture": "amd64", "cpu": cpu, "memory": "8Gi", "pods": "110"},
                "properties": {},
                "policies": {"partitionability": {"cpuMin": "0", "memoryMin": "0", "podsMin": "0",
                    "cpuStep": "1", "memoryStep": "100Mi", "podsStep": "0"}}
            }},
            "price": {"amount": "12", "currency": "EUR", "period": "month"},
            "owner": {"domain": "fluidos.eu", "nodeID": provider, "ip": "127.0.0.1:1"},
            "availability": true
        }))
        .unwrap()
    }

    #[test]
    fn providers_are_known_clusters_then_peers_each_once() {
        let providers = providers_to_ask(
            &[
                known("knowncluster-b", "10.0.0.2:30000"),
                known("knowncluster-a", "10.0.0.1:30000"),
                known("knowncluster-empty", " "),
            ],
            &["10.0.0.1:30000".into(), "10.0.0.9:30000".into()],
        );
        assert_eq!(
            providers,
            vec![
                Provider {
                    address: "10.0.0.1:30000".into(),
                    fingerprint: None,
                    source: "knowncluster-a".into()
                },
                Provider {
                    address: "10.0.0.2:30000".into(),
                    fingerprint: None,
                    source: "knowncluster-b".into()
                },
                Provider {
                    address: "10.0.0.9:30000".into(),
                    fingerprint: None,
                    source: "--peer".into()
                },
            ]
        );
    }

    #[test]
    fn remote_listing_merges_answers_and_keeps_failures() {
        let p = |address: &str| Provider {
            address: address.into(),
            fingerprint: None,
            source: "--peer".into(),
        };
        let answers = vec![
            ProviderAnswer {
                provider: p("b:1"),
                flavors: Some(vec![
                    wire("fl-2", "prov-b", "2"),
                    wire("fl-1", "prov-b", "4"),
                ]),
                error: None,
            },
            ProviderAnswer {
                provider: p("a:1"),
                flavors: None,
                error: Some("provider a:1 is unreachable: refused".into()),
            },
            ProviderAnswer {
                // The same provider under a second address lists the same flavor.
                provider: p("c:1"),
                flavors: Some(vec![wire("fl-1", "prov-b", "4")]),
                error: None,
            },
        ];
        let (rows, failures) = merge_remote(&answers);
        assert_eq!(
            rows.iter()
                .map(|r| (r.address.as_str(), r.flavor_id.as_str()))
                .collect::<Vec<_>>(),
            vec![("b:1", "fl-1"), ("b:1", "fl-2")]
        );
        assert_eq!(rows[0].offer, "cpu 4, memory 8Gi, pods 110 (amd64)");
        assert_eq!(rows[0].price, "12 EUR/month");
        assert_eq!(rows[0].flavor_type, "K8Slice");
        assert_eq!(
            failures,
            vec![("a:1".into(), "provider a:1 is unreachable: refused".into())]
        );
        let text = remote_table(&rows).render(Palette::plain());
        assert!(text.starts_with("PROVIDER   FLAVOR   NODE"), "{text}");
    }

    #[test]
    fn service_offers_and_prices() {
        let svc = FlavorTypeData::Service(fluidos_api::flavor::ServiceFlavor {
            name: "mysql".into(),
            category: "database".into(),
            ..Default::default()
        });
        assert_eq!(offer_summary(&svc), "mysql (database)");
        assert_eq!(price_summary(&Price::default()), "");
        assert_eq!(
            price_summary(&Price {
                amount: "3".into(),
                currency: String::new(),
                period: String::new()
            }),
            "3"
        );
    }

    #[test]
    fn json_lists_look_like_kubectls() {
        let v = kube_list(&[known("k", "a:1")]).unwrap();
        assert_eq!(v["kind"], "List");
        assert_eq!(v["items"][0]["spec"]["address"], "a:1");
    }
}

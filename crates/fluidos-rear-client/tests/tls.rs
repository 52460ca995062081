//! The REAR client over real TLS on loopback: a small provider (tokio-rustls
//! and hyper, with `fluidos_rear_identity::tls::server_config`) answers the
//! REAR routes with canned JSON and records who called, by key fingerprint.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fluidos_api::rear::{PurchaseRequest, ReserveRequest, WireNodeIdentity};
use fluidos_rear_client::{ClientConfig, ProviderAddress, RearClient, RearError};
use fluidos_rear_identity::{Fingerprint, NodeKey, tls};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A request the provider answered.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    /// The client's key, `None` when it presented no certificate.
    client: Option<Fingerprint>,
    method: String,
    path: String,
}

/// A running provider.
struct Provider {
    /// `host:port`.
    address: String,
    /// Its key's fingerprint (TLS providers only).
    fingerprint: Option<Fingerprint>,
    /// Every request answered.
    seen: Arc<Mutex<Vec<Seen>>>,
    /// TCP connections accepted.
    accepted: Arc<AtomicUsize>,
}

impl Provider {
    /// The address a client pins (or not) to reach it.
    fn pinned(&self) -> ProviderAddress {
        ProviderAddress::pinned(&self.address, self.fingerprint.unwrap())
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A provider serving TLS with a fresh key; clients may present a
/// certificate or none.
async fn tls_provider() -> Provider {
    let key = NodeKey::generate("provider").unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(&key, false).unwrap()));
    spawn_provider(Some(acceptor), Some(key.fingerprint())).await
}

/// A provider serving plain HTTP, as an unmodified Go node does.
async fn plain_provider() -> Provider {
    spawn_provider(None, None).await
}

async fn spawn_provider(
    acceptor: Option<TlsAcceptor>,
    fingerprint: Option<Fingerprint>,
) -> Provider {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let provider = Provider {
        address: listener.local_addr().unwrap().to_string(),
        fingerprint,
        seen: Arc::default(),
        accepted: Arc::default(),
    };
    let (seen, accepted) = (provider.seen.clone(), provider.accepted.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                match acceptor {
                    None => serve(TokioIo::new(tcp), None, seen).await,
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let client = tls::peer_fingerprint(stream.get_ref().1);
                        serve(TokioIo::new(stream), client, seen).await;
                    }
                }
            });
        }
    });
    provider
}

/// Serves HTTP/1.1 (keep-alive) on one connection.
async fn serve<I>(io: I, client: Option<Fingerprint>, seen: Arc<Mutex<Vec<Seen>>>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<Incoming>| {
        seen.lock().unwrap().push(Seen {
            client,
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
        });
        let answer = answer(req.method().as_str(), req.uri().path());
        async move { Ok::<_, Infallible>(answer) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

fn flavor() -> serde_json::Value {
    json!({
        "flavorID": "flavor-1",
        "providerID": "provider",
        "type": {"name": "Sensor", "data": {}},
        "owner": {"ID": "provider", "IP": "127.0.0.1:1", "domain": "fluidos.eu"},
        "availability": true
    })
}

/// Canned REAR answers.
fn answer(method: &str, path: &str) -> Response<Full<Bytes>> {
    let (status, body) = match (method, path) {
        ("GET", "/api/v2/flavors") => (StatusCode::OK, json!([flavor()])),
        ("POST", "/api/v2/reservations") => (
            StatusCode::OK,
            json!({"transactionID": "tx-1", "flavorID": "flavor-1"}),
        ),
        ("POST", "/api/v2/transactions/tx-1/purchase") => (
            StatusCode::OK,
            json!({
                "contractID": "contract-1",
                "transactionID": "tx-1",
                "flavor": flavor(),
                "buyerID": {"ID": "consumer"},
                "seller": {"ID": "provider"}
            }),
        ),
        _ => (StatusCode::NOT_FOUND, json!({"error": "no such route"})),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
}

fn reserve_request() -> ReserveRequest {
    ReserveRequest {
        flavor_id: "flavor-1".into(),
        buyer: WireNodeIdentity {
            id: "consumer".into(),
            ..WireNodeIdentity::default()
        },
        configuration: None,
    }
}

fn consumer_client() -> (RearClient, Fingerprint) {
    let key = Arc::new(NodeKey::generate("consumer").unwrap());
    let fingerprint = key.fingerprint();
    (
        RearClient::with_key(ClientConfig::default(), key).unwrap(),
        fingerprint,
    )
}

#[tokio::test]
async fn a_pinned_provider_is_called_over_tls_and_knows_the_buyer_by_its_key() {
    let provider = tls_provider().await;
    let (client, me) = consumer_client();
    assert_eq!(client.key_fingerprint(), Some(me));
    let to = provider.pinned();

    let flavors = client.list_flavors(&to, None).await.unwrap().flavors;
    assert_eq!(flavors.len(), 1);
    assert_eq!(flavors[0].flavor_id, "flavor-1");
    let tx = client.reserve(&to, &reserve_request()).await.unwrap();
    assert_eq!(tx.transaction_id, "tx-1");
    let contract = client
        .purchase(&to, &tx.transaction_id, &PurchaseRequest::default())
        .await
        .unwrap();
    assert_eq!(contract.contract_id, "contract-1");

    let seen = provider.seen();
    let paths: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("GET", "/api/v2/flavors"),
            ("POST", "/api/v2/reservations"),
            ("POST", "/api/v2/transactions/tx-1/purchase"),
        ]
    );
    assert!(seen.iter().all(|s| s.client == Some(me)), "{seen:?}");
}

#[tokio::test]
async fn connections_to_a_pinned_provider_are_kept_and_reused() {
    let provider = tls_provider().await;
    let (client, _) = consumer_client();
    let to = provider.pinned();
    client.list_flavors(&to, None).await.unwrap();
    client.list_flavors(&to, None).await.unwrap();
    // A clone shares the pools.
    client
        .clone()
        .reserve(&to, &reserve_request())
        .await
        .unwrap();
    assert_eq!(provider.seen().len(), 3);
    assert_eq!(provider.accepted(), 1, "one TCP connection, one handshake");
}

#[tokio::test]
async fn an_anonymous_client_presents_no_certificate() {
    let provider = tls_provider().await;
    let client = RearClient::new(ClientConfig::default()).unwrap();
    assert_eq!(client.key_fingerprint(), None);
    let flavors = client
        .list_flavors(&provider.pinned(), None)
        .await
        .unwrap()
        .flavors;
    assert_eq!(flavors.len(), 1);
    assert_eq!(provider.seen()[0].client, None);
}

#[tokio::test]
async fn a_provider_with_another_key_is_refused_before_any_request() {
    let provider = tls_provider().await;
    let (client, _) = consumer_client();
    let expected = NodeKey::generate("someone else").unwrap().fingerprint();
    let to = ProviderAddress::pinned(&provider.address, expected);

    let e = client
        .reserve(&to, &reserve_request())
        .await
        .expect_err("another key must be refused");
    let RearError::WrongKey {
        address,
        expected: said_expected,
        presented,
    } = &e
    else {
        panic!("not WrongKey: {e:?}");
    };
    assert_eq!(address, &provider.address);
    assert_eq!(*said_expected, expected);
    assert_eq!(Some(*presented), provider.fingerprint);
    let text = e.to_string();
    assert!(text.contains(&expected.to_string()), "{text}");
    assert!(text.contains(&presented.to_string()), "{text}");
    assert!(!e.is_unreachable());
    assert!(e.is_wrong_key());

    // A read (retried on transport errors) is not retried either.
    let e = client.list_flavors(&to, None).await.unwrap_err();
    assert!(e.is_wrong_key(), "{e}");
    assert!(provider.seen().is_empty(), "{:?}", provider.seen());
    assert_eq!(provider.accepted(), 2, "one handshake per call, no retries");
}

#[tokio::test]
async fn a_provider_without_a_fingerprint_is_called_over_plain_http() {
    let provider = plain_provider().await;
    let (client, _) = consumer_client();
    let to: ProviderAddress = provider.address.parse().unwrap();
    let flavors = client.list_flavors(&to, None).await.unwrap().flavors;
    assert_eq!(flavors.len(), 1);
    let tx = client.reserve(&to, &reserve_request()).await.unwrap();
    assert_eq!(tx.transaction_id, "tx-1");
    assert!(provider.seen().iter().all(|s| s.client.is_none()));

    // Pinned to a server that only speaks plain HTTP: no answer, and not
    // mistaken for a wrong key.
    let key = NodeKey::generate("expected").unwrap().fingerprint();
    let e = client
        .list_flavors(&ProviderAddress::pinned(&provider.address, key), None)
        .await
        .unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    assert_eq!(provider.seen().len(), 2, "no plain request was made");
}

//! Real TLS on loopback between a server and a client built from this
//! crate's configurations (tokio-rustls on both sides), and the identity
//! Secret on a real API server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fluidos_rear_identity::secret::{self, SecretError};
use fluidos_rear_identity::{NodeKey, tls};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use rustls::client::ResolvesClientCert;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A one-route HTTPS server that answers with the client's fingerprint
/// ("anonymous" without a certificate). Returns its base URL.
async fn whoami_server(key: &NodeKey, mandatory: bool) -> String {
    serve_whoami(tls::server_config(key, mandatory).unwrap()).await
}

async fn serve_whoami(config: rustls::ServerConfig) -> String {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let who = tls::peer_fingerprint(stream.get_ref().1)
                    .map_or_else(|| "anonymous".to_owned(), |f| f.to_string());
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{who}",
                    who.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    base
}

/// A copy of `victim`'s certificate (certificates are public) served with
/// `thief`'s key: what a peer posing as another would try.
#[derive(Debug)]
struct StolenCertificate(Arc<CertifiedKey>);

impl StolenCertificate {
    fn new(victim: &NodeKey, thief: &NodeKey) -> Arc<StolenCertificate> {
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(thief.private_key())
            .unwrap();
        Arc::new(StolenCertificate(Arc::new(CertifiedKey::new(
            vec![victim.certificate().clone()],
            signing,
        ))))
    }
}

impl ResolvesServerCert for StolenCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesClientCert for StolenCertificate {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// An HTTPS client over one configuration: `get` sends `GET /` and returns
/// the body of a 200, or why there is none.
struct Client(TlsConnector);

fn client(config: rustls::ClientConfig) -> Client {
    Client(TlsConnector::from(Arc::new(config)))
}

impl Client {
    async fn get(&self, base: &str) -> Result<String, String> {
        let addr = base.trim_start_matches("https://");
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let mut tls = tokio::time::timeout(Duration::from_secs(10), self.0.connect(name, tcp))
            .await
            .map_err(|_| "handshake timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: peer\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw))
            .await
            .map_err(|_| "no answer".to_owned())?
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw);
        match text.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
            _ => Err(format!("no HTTP answer: {text:?}")),
        }
    }
}

#[tokio::test]
async fn peers_are_known_by_their_key_over_real_tls() {
    let provider = NodeKey::generate("provider").unwrap();
    let consumer = NodeKey::generate("consumer").unwrap();
    let base = whoami_server(&provider, false).await;

    // The provider sees the consumer's fingerprint.
    let c = client(tls::client_config(&consumer, provider.fingerprint()).unwrap());
    let who = c.get(&base).await.unwrap();
    assert_eq!(who, consumer.fingerprint().to_string());

    // A consumer expecting another key refuses this provider, and says why.
    let someone_else = NodeKey::generate("provider").unwrap();
    let c = client(tls::client_config(&consumer, someone_else.fingerprint()).unwrap());
    let msg = c.get(&base).await.unwrap_err();
    assert!(
        msg.contains(&format!(
            "the peer presented key {}, not the expected {}",
            provider.fingerprint(),
            someone_else.fingerprint()
        )),
        "{msg}"
    );

    // Without a certificate: anonymous where allowed, refused where not.
    let anon = client(tls::anonymous_client_config(provider.fingerprint()).unwrap());
    let who = anon.get(&base).await.unwrap();
    assert_eq!(who, "anonymous");
    let strict = whoami_server(&provider, true).await;
    assert!(anon.get(&strict).await.is_err());
    let c = client(tls::client_config(&consumer, provider.fingerprint()).unwrap());
    let who = c.get(&strict).await.unwrap();
    assert_eq!(who, consumer.fingerprint().to_string());

    // A plain-HTTP client gets no HTTP answer from the TLS port.
    let mut tcp = TcpStream::connect(base.trim_start_matches("https://"))
        .await
        .unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: peer\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw)).await;
    assert!(
        !raw.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test]
async fn a_copied_certificate_without_its_key_is_refused_both_ways() {
    let provider = NodeKey::generate("provider").unwrap();
    let consumer = NodeKey::generate("consumer").unwrap();
    let thief = NodeKey::generate("thief").unwrap();

    // A server presenting the provider's certificate but holding another
    // key: the handshake signature gives it away.
    let rogue = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_no_client_auth()
    .with_cert_resolver(StolenCertificate::new(&provider, &thief));
    let rogue = serve_whoami(rogue).await;
    let c = client(tls::client_config(&consumer, provider.fingerprint()).unwrap());
    let e = c.get(&rogue).await.unwrap_err();
    assert!(e.to_lowercase().contains("signature"), "{e}");

    // A client presenting the consumer's certificate with another key is not
    // served, not even as anonymous.
    let base = whoami_server(&provider, false).await;
    let mut impostor = tls::anonymous_client_config(provider.fingerprint()).unwrap();
    impostor.client_auth_cert_resolver = StolenCertificate::new(&consumer, &thief);
    let answer = client(impostor).get(&base).await;
    assert!(answer.is_err(), "served an impostor: {answer:?}");

    // The honest consumer still is.
    let c = client(tls::client_config(&consumer, provider.fingerprint()).unwrap());
    let who = c.get(&base).await.unwrap();
    assert_eq!(who, consumer.fingerprint().to_string());
}

#[tokio::test]
async fn the_key_is_created_once_and_kept_in_a_secret() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    fixtures::namespace(&cp, "fluidos").await.unwrap();
    let name = secret::DEFAULT_SECRET_NAME;

    // Two replicas starting at once agree on one key.
    let (a, b) = tokio::join!(
        secret::load_or_create(&client, "fluidos", name, "node-1"),
        secret::load_or_create(&client, "fluidos", name, "node-1"),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.fingerprint(), b.fingerprint());
    // A restart reads the same key.
    let again = secret::load_or_create(&client, "fluidos", name, "node-1")
        .await
        .unwrap();
    assert_eq!(again.fingerprint(), a.fingerprint());
    let stored = Api::<Secret>::namespaced(client.clone(), "fluidos")
        .get(name)
        .await
        .unwrap();
    assert_eq!(
        stored.metadata.annotations.unwrap()["fluidos.eu/key-fingerprint"],
        a.fingerprint().to_string()
    );

    // A damaged Secret is reported, never overwritten (a new key would
    // change the identity every peer knows).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "fluidos");
    let damaged = serde_json::json!({"data": {secret::KEY_FIELD: ByteString(b"garbage".to_vec())}});
    secrets
        .patch(name, &PatchParams::default(), &Patch::Merge(&damaged))
        .await
        .unwrap();
    let e = secret::load_or_create(&client, "fluidos", name, "node-1")
        .await
        .unwrap_err();
    assert!(matches!(e, SecretError::Unusable { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("fluidos/fluidos-node-identity") && msg.contains("delete it"),
        "{msg}"
    );
    assert!(!msg.contains("garbage"), "{msg}");
    let still = secrets.get(name).await.unwrap();
    assert_eq!(still.data.unwrap()[secret::KEY_FIELD].0, b"garbage");
    cp.stop().await;
}

/// The fingerprint is published apart from the key: a reader of the
/// ConfigMap waits for it, gets it once written, and is told when it is not
/// a fingerprint.
#[tokio::test]
async fn the_fingerprint_is_published_in_a_configmap() {
    use fluidos_rear_identity::published::{self, PublishedError};
    use k8s_openapi::api::core::v1::ConfigMap;
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client();
    fixtures::namespace(&cp, "fluidos").await.unwrap();
    let short = std::time::Duration::from_millis(300);
    assert!(
        published::wait_for(&client, "fluidos", short)
            .await
            .unwrap()
            .is_none()
    );
    let key = NodeKey::generate("node-1").unwrap();
    let waiting = published::wait_for(&client, "fluidos", std::time::Duration::from_secs(30));
    let (got, written) = tokio::join!(waiting, async {
        // Twice: a restart writes it again.
        published::publish(&client, "fluidos", key.fingerprint()).await?;
        published::publish(&client, "fluidos", key.fingerprint()).await
    });
    written.unwrap();
    assert_eq!(got.unwrap(), Some(key.fingerprint()));

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "fluidos");
    let damaged = serde_json::json!({"data": {published::FINGERPRINT_FIELD: "sha256:XYZ"}});
    configmaps
        .patch(
            published::CONFIGMAP_NAME,
            &PatchParams::default(),
            &Patch::Merge(&damaged),
        )
        .await
        .unwrap();
    let e = published::wait_for(&client, "fluidos", short)
        .await
        .unwrap_err();
    assert!(matches!(e, PublishedError::Unusable { .. }), "{e}");
    // The next start of a REAR component puts it right.
    published::publish(&client, "fluidos", key.fingerprint())
        .await
        .unwrap();
    assert_eq!(
        published::wait_for(&client, "fluidos", short)
            .await
            .unwrap(),
        Some(key.fingerprint())
    );
    cp.stop().await;
}

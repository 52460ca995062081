//! rustls configurations that authenticate REAR peers by key fingerprint.
//!
//! TLS 1.3 only. Certificates are self-signed, so the usual checks (chain to
//! a CA, names, dates) do not apply; what does is that the peer holds the
//! private key of the public key it presents, which the TLS 1.3 handshake
//! signature proves and these verifiers check with the provider's
//! algorithms, and which key that is: its [`Fingerprint`].

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::fingerprint::Fingerprint;
use crate::key::NodeKey;

/// The provider every configuration here uses (ring, as kube's client does).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A configuration that could not be built.
#[derive(Debug, thiserror::Error)]
#[error("TLS configuration: {0}")]
pub struct TlsConfigError(#[from] rustls::Error);

/// A peer whose key is not the one expected.
#[derive(thiserror::Error)]
#[error("the peer presented key {got}, not the expected {expected}")]
pub struct UnexpectedKey {
    /// What configuration or discovery said.
    pub expected: Fingerprint,
    /// What the peer presented.
    pub got: Fingerprint,
}

/// rustls shows a verifier's error with `Debug`: make that the sentence.
impl std::fmt::Debug for UnexpectedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn fingerprint_of(cert: &CertificateDer<'_>) -> Result<Fingerprint, rustls::Error> {
    Fingerprint::of_certificate(cert)
        .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))
}

/// The server side: asks every client for a certificate, accepts any
/// self-signed one (the fingerprint, read after the handshake with
/// [`peer_fingerprint`], is the client's identity), and still serves a
/// client without one (`mandatory: false`), whose requests are then
/// anonymous.
pub fn server_config(
    key: &NodeKey,
    mandatory: bool,
) -> Result<rustls::ServerConfig, TlsConfigError> {
    let provider = provider();
    let verifier = AnyKeyClientVerifier {
        signatures: HandshakeSignatures(provider.signature_verification_algorithms),
        mandatory,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(vec![key.certificate().clone()], key.private_key())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The client side towards one provider: presents this node's certificate
/// and accepts only a server holding the key with fingerprint `expected`.
pub fn client_config(
    key: &NodeKey,
    expected: Fingerprint,
) -> Result<rustls::ClientConfig, TlsConfigError> {
    let mut config = pinned(expected)?
        .with_client_auth_cert(vec![key.certificate().clone()], key.private_key())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// [`client_config`] without a client certificate: for reads that need no
/// identity (listing a provider's flavors from a command-line tool).
pub fn anonymous_client_config(
    expected: Fingerprint,
) -> Result<rustls::ClientConfig, TlsConfigError> {
    let mut config = pinned(expected)?.with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A TLS 1.3 client configuration that accepts only the key `expected`.
fn pinned(
    expected: Fingerprint,
) -> Result<
    rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    TlsConfigError,
> {
    let provider = provider();
    let verifier = PinnedServerVerifier {
        signatures: HandshakeSignatures(provider.signature_verification_algorithms),
        expected,
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier)))
}

/// The fingerprint of the certificate a client presented, if any.
pub fn peer_fingerprint(conn: &rustls::ServerConnection) -> Option<Fingerprint> {
    conn.peer_certificates()
        .and_then(<[CertificateDer<'_>]>::first)
        .and_then(|c| Fingerprint::of_certificate(c).ok())
}

/// Handshake signature checks shared by both verifiers: TLS 1.3 only (the
/// configurations offer no other version), with the provider's algorithms.
#[derive(Debug)]
struct HandshakeSignatures(WebPkiSupportedAlgorithms);

impl HandshakeSignatures {
    fn tls12(&self) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[derive(Debug)]
struct AnyKeyClientVerifier {
    signatures: HandshakeSignatures,
    mandatory: bool,
}

impl ClientCertVerifier for AnyKeyClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Any readable key is an identity; what it may do is decided by the
        // routes from its fingerprint.
        fingerprint_of(end_entity).map(|_| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls12()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.schemes()
    }
}

#[derive(Debug)]
struct PinnedServerVerifier {
    signatures: HandshakeSignatures,
    expected: Fingerprint,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = fingerprint_of(end_entity)?;
        if got == self.expected {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                rustls::OtherError(Arc::new(UnexpectedKey {
                    expected: self.expected,
                    got,
                })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls12()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.schemes()
    }
}

//! The node's key pair and the self-signed certificate derived from it.

use std::fmt;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::fingerprint::{Fingerprint, FingerprintError};

/// A node's long-lived ECDSA P-256 key pair and a self-signed certificate
/// for it. `Debug` shows only the fingerprint: the key never reaches a log.
pub struct NodeKey {
    key_pkcs8: Vec<u8>,
    key_pem: String,
    cert: CertificateDer<'static>,
    fingerprint: Fingerprint,
}

/// A key that cannot be made, read or certified.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Generating or reading the key pair failed (the message never holds the key).
    #[error("the node key cannot be {action}: {source}")]
    Key {
        /// What was being done.
        action: &'static str,
        /// The cause.
        source: rcgen::Error,
    },
    /// The certificate's key could not be read back.
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
}

impl NodeKey {
    /// A new key pair, certified for `node_id` (the certificate's common name).
    pub fn generate(node_id: &str) -> Result<NodeKey, KeyError> {
        let pair =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
                KeyError::Key {
                    action: "generated",
                    source,
                }
            })?;
        Self::certify(&pair, node_id)
    }

    /// The key pair in `pem` (PKCS#8), certified for `node_id`.
    pub fn from_pem(pem: &str, node_id: &str) -> Result<NodeKey, KeyError> {
        let pair = rcgen::KeyPair::from_pem(pem).map_err(|source| KeyError::Key {
            action: "read",
            source,
        })?;
        Self::certify(&pair, node_id)
    }

    /// A fresh self-signed certificate for the key. Peers pin the key, not
    /// the certificate, so it is made anew at every start and keeps rcgen's
    /// default (very long) validity: nothing to renew.
    fn certify(pair: &rcgen::KeyPair, node_id: &str) -> Result<NodeKey, KeyError> {
        let certify_err = |source| KeyError::Key {
            action: "certified",
            source,
        };
        let mut params =
            rcgen::CertificateParams::new(Vec::<String>::new()).map_err(certify_err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, node_id);
        let cert = params.self_signed(pair).map_err(certify_err)?;
        let cert = cert.der().clone();
        let fingerprint = Fingerprint::of_certificate(&cert)?;
        Ok(NodeKey {
            key_pkcs8: pair.serialize_der(),
            key_pem: pair.serialize_pem(),
            cert,
            fingerprint,
        })
    }

    /// The fingerprint peers know this node by.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The self-signed certificate this node presents.
    pub fn certificate(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The private key, for rustls.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_pkcs8.clone()))
    }

    /// The private key as PKCS#8 PEM, to be stored in the node's Secret.
    pub fn private_key_pem(&self) -> &str {
        &self.key_pem
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeKey")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_the_keys_not_the_certificates() {
        let a = NodeKey::generate("node-a").unwrap();
        let again = NodeKey::from_pem(a.private_key_pem(), "renamed").unwrap();
        assert_eq!(a.fingerprint(), again.fingerprint());
        assert_ne!(a.certificate(), again.certificate());
        let b = NodeKey::generate("node-a").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
    }

    #[test]
    fn debug_output_holds_no_key() {
        let a = NodeKey::generate("node-a").unwrap();
        let shown = format!("{a:?}");
        assert!(shown.contains("sha256:"), "{shown}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(
            !shown.contains(&format!("{:?}", &a.key_pkcs8[..8])),
            "{shown}"
        );
    }

    #[test]
    fn a_bad_pem_is_an_error_that_does_not_echo_it() {
        let e = NodeKey::from_pem("-----BEGIN PRIVATE KEY-----\nsecret\n", "n").unwrap_err();
        assert!(
            e.to_string().starts_with("the node key cannot be read"),
            "{e}"
        );
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

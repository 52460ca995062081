//! The Broker's certificate Secrets: read from the Broker's own namespace
//! (Go: always `fluidos`, §8.2 bug 28), checked before connecting so that a
//! missing or wrong Secret is named in the Broker's status. Secret contents
//! are never logged; errors name Secrets and keys only.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Key of the client certificate in the `spec.clcert` Secret (as Go).
pub const CLIENT_CERT_KEY: &str = "tls.crt";
/// Key of the client's private key in the `spec.clcert` Secret (as Go).
pub const CLIENT_KEY_KEY: &str = "tls.key";
/// Key of the broker's CA in the `spec.cacert` Secret (as Go).
pub const CA_KEY: &str = "CA_cert.pem";

/// Longest common name accepted: it is the AMQP user and queue name, an
/// AMQP short string.
const MAX_COMMON_NAME: usize = 255;

/// A Secret the Broker names that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// No such Secret in the Broker's namespace.
    #[error("Secret {namespace}/{name} (spec.{field}) does not exist")]
    Missing {
        /// Namespace looked in.
        namespace: String,
        /// Secret name.
        name: String,
        /// `clcert` or `cacert`.
        field: &'static str,
    },
    /// Reading it failed (retried).
    #[error("reading Secret {name}: {source}")]
    Read {
        /// Secret name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A key the Go node's Secrets carry is absent.
    #[error("Secret {name} has no key {key:?}")]
    MissingKey {
        /// Secret name.
        name: String,
        /// The key.
        key: &'static str,
    },
    /// The key holds no PEM certificate, or one that does not parse.
    #[error("Secret {name} key {key:?} holds no valid PEM certificate{detail}")]
    BadCertificate {
        /// Secret name.
        name: String,
        /// The key.
        key: &'static str,
        /// What was wrong, if known (`: ...`).
        detail: String,
    },
    /// The key holds no PEM private key.
    #[error("Secret {name} key {key:?} holds no PEM private key")]
    BadKey {
        /// Secret name.
        name: String,
        /// The key.
        key: &'static str,
    },
    /// The client certificate has no usable subject common name (the AMQP
    /// user and queue name).
    #[error(
        "the certificate in Secret {name} key {CLIENT_CERT_KEY:?} has no subject common name \
         (the broker user and queue are named after it)"
    )]
    NoCommonName {
        /// Secret name.
        name: String,
    },
}

impl SecretError {
    /// The Broker status reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SecretError::Missing { .. } => "SecretMissing",
            SecretError::Read { .. } => "SecretUnreadable",
            _ => "SecretInvalid",
        }
    }
}

/// The checked TLS material of one Broker. Its `Debug` shows no key.
#[derive(Clone)]
pub struct TlsMaterial {
    ca_pem: String,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    /// Subject CN of the client certificate: the AMQP user, the `user-id`
    /// of published messages and the queue consumed.
    pub common_name: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("common_name", &self.common_name)
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// lapin's TLS settings: only the broker's CA is trusted, and the
    /// client certificate is presented.
    pub fn tls_config(&self) -> OwnedTLSConfig {
        OwnedTLSConfig {
            identity: Some(OwnedIdentity::PKCS8 {
                pem: self.cert_pem.clone(),
                key: self.key_pem.clone(),
            }),
            cert_chain: Some(self.ca_pem.clone()),
        }
    }
}

/// Reads the two Secrets from `namespace` and checks them.
pub async fn load(
    client: &kube::Client,
    namespace: &str,
    clcert: &str,
    cacert: &str,
) -> Result<TlsMaterial, SecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let get = |name: &str, field: &'static str| {
        let api = api.clone();
        let name = name.to_owned();
        async move {
            match api.get_opt(&name).await {
                Ok(Some(s)) => Ok(s.data.unwrap_or_default()),
                Ok(None) => Err(SecretError::Missing {
                    namespace: namespace.to_owned(),
                    name,
                    field,
                }),
                Err(source) => Err(SecretError::Read { name, source }),
            }
        }
    };
    let cl = get(clcert, "clcert").await?;
    let ca = get(cacert, "cacert").await?;
    material(clcert, &cl, cacert, &ca)
}

/// Checks the Secrets' data and extracts the common name.
pub fn material(
    clcert: &str,
    cl: &BTreeMap<String, ByteString>,
    cacert: &str,
    ca: &BTreeMap<String, ByteString>,
) -> Result<TlsMaterial, SecretError> {
    let value = |name: &str, data: &BTreeMap<String, ByteString>, key: &'static str| {
        data.get(key)
            .map(|b| b.0.clone())
            .ok_or_else(|| SecretError::MissingKey {
                name: name.to_owned(),
                key,
            })
    };
    let ca_pem = value(cacert, ca, CA_KEY)?;
    let ca_certs = certificates(cacert, CA_KEY, &ca_pem)?;
    for der in &ca_certs {
        x509_parser::parse_x509_certificate(der).map_err(|e| SecretError::BadCertificate {
            name: cacert.to_owned(),
            key: CA_KEY,
            detail: format!(": {e}"),
        })?;
    }
    let ca_pem = String::from_utf8(ca_pem).map_err(|_| SecretError::BadCertificate {
        name: cacert.to_owned(),
        key: CA_KEY,
        detail: ": not UTF-8".into(),
    })?;

    let cert_pem = value(clcert, cl, CLIENT_CERT_KEY)?;
    let key_pem = value(clcert, cl, CLIENT_KEY_KEY)?;
    let certs = certificates(clcert, CLIENT_CERT_KEY, &cert_pem)?;
    let leaf = certs.first().ok_or_else(|| SecretError::BadCertificate {
        name: clcert.to_owned(),
        key: CLIENT_CERT_KEY,
        detail: String::new(),
    })?;
    let common_name = common_name(leaf).map_err(|detail| match detail {
        None => SecretError::NoCommonName {
            name: clcert.to_owned(),
        },
        Some(detail) => SecretError::BadCertificate {
            name: clcert.to_owned(),
            key: CLIENT_CERT_KEY,
            detail: format!(": {detail}"),
        },
    })?;
    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| SecretError::BadKey {
        name: clcert.to_owned(),
        key: CLIENT_KEY_KEY,
    })?;
    Ok(TlsMaterial {
        ca_pem,
        cert_pem,
        key_pem,
        common_name,
    })
}

/// Every PEM certificate in `pem`; at least one.
fn certificates(
    name: &str,
    key: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, SecretError> {
    let bad = |detail: String| SecretError::BadCertificate {
        name: name.to_owned(),
        key,
        detail,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!(": {e}")))?;
    if certs.is_empty() {
        return Err(bad(String::new()));
    }
    Ok(certs)
}

/// The subject CN, trimmed (as Go). `Err(None)`: no CN; `Err(Some)`: the
/// certificate does not parse.
fn common_name(der: &[u8]) -> Result<String, Option<String>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| Some(e.to_string()))?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::trim)
        .filter(|cn| !cn.is_empty() && cn.len() <= MAX_COMMON_NAME)
        .ok_or(None)?;
    Ok(cn.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    fn cert(cn: Option<&str>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let c = params.self_signed(&key).unwrap();
        (c.pem(), key.serialize_pem())
    }

    type Data = BTreeMap<String, ByteString>;

    fn data(pairs: &[(&str, &str)]) -> Data {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn go_secret_keys_give_the_common_name() {
        let (ca, _) = cert(Some("ca"));
        let (crt, key) = cert(Some(" node-a "));
        let m = material(
            "cl",
            &data(&[("tls.crt", &crt), ("tls.key", &key)]),
            "ca",
            &data(&[("CA_cert.pem", &ca)]),
        )
        .unwrap();
        assert_eq!(m.common_name, "node-a");
        let shown = format!("{m:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
    }

    #[test]
    fn wrong_secrets_are_named() {
        let (ca, _) = cert(Some("ca"));
        let (crt, key) = cert(Some("node-a"));
        let (no_cn, no_cn_key) = cert(None);
        let ca_ok = data(&[("CA_cert.pem", &ca)]);
        let cases: Vec<(Data, Data, &str)> = vec![
            (
                data(&[("tls.crt", &crt)]),
                ca_ok.clone(),
                "no key \"tls.key\"",
            ),
            (
                data(&[("tls.crt", &crt), ("tls.key", &key)]),
                data(&[("ca.crt", &ca)]),
                "no key \"CA_cert.pem\"",
            ),
            (
                data(&[("tls.crt", "garbage"), ("tls.key", &key)]),
                ca_ok.clone(),
                "no valid PEM certificate",
            ),
            (
                data(&[("tls.crt", &crt), ("tls.key", &crt)]),
                ca_ok.clone(),
                "no PEM private key",
            ),
            (
                data(&[("tls.crt", &no_cn), ("tls.key", &no_cn_key)]),
                ca_ok.clone(),
                "no subject common name",
            ),
        ];
        for (cl, ca, want) in cases {
            let e = material("cl", &cl, "ca", &ca).unwrap_err();
            assert_eq!(e.reason(), "SecretInvalid");
            assert!(e.to_string().contains(want), "{e} !~ {want}");
            assert!(!e.to_string().contains("PRIVATE"), "{e}");
        }
    }
}

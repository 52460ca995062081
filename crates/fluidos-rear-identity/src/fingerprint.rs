//! The fingerprint that names a node: SHA-256 of its public key.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// How a fingerprint is written: the algorithm, then the digest in hex. The
/// multicast advertisement and the KnownCluster carry this same form
/// (`fluidos-network-manager`'s `advertisement.rs`).
const PREFIX: &str = "sha256:";

/// SHA-256 of a node's SubjectPublicKeyInfo, written `sha256:<64 lower-case
/// hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

/// A string that is not a fingerprint, or a certificate without a readable key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FingerprintError {
    /// Not `sha256:` followed by 64 hex digits.
    #[error("{0:?} is not a key fingerprint: expected sha256: followed by 64 hex digits")]
    Malformed(String),
    /// The certificate could not be parsed.
    #[error("the certificate cannot be read: {0}")]
    Certificate(String),
}

impl Fingerprint {
    /// The fingerprint of a DER SubjectPublicKeyInfo.
    pub fn of_public_key(spki_der: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(spki_der).into())
    }

    /// The fingerprint of the key a DER certificate carries.
    pub fn of_certificate(cert_der: &[u8]) -> Result<Fingerprint, FingerprintError> {
        let (rest, cert) = x509_parser::parse_x509_certificate(cert_der)
            .map_err(|e| FingerprintError::Certificate(e.to_string()))?;
        // The handshake signature is checked by another parser (webpki):
        // bytes after the certificate could make the two read different keys.
        if !rest.is_empty() {
            return Err(FingerprintError::Certificate(
                "trailing bytes after the certificate".into(),
            ));
        }
        Ok(Fingerprint::of_public_key(cert.public_key().raw))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || FingerprintError::Malformed(s.chars().take(80).collect());
        let hex = s.strip_prefix(PREFIX).ok_or_else(malformed)?;
        // Lower case only: one spelling per key, so fingerprints compare as text too.
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(malformed());
        }
        let mut arr = [0u8; 32];
        for (i, byte) in arr.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| malformed())?;
        }
        Ok(Fingerprint(arr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_the_advertisement_carries_it_and_read_back() {
        let f = Fingerprint::of_public_key(b"some key");
        let s = f.to_string();
        assert!(s.starts_with("sha256:"), "{s}");
        assert_eq!(s.len(), 7 + 64);
        assert_eq!(s.parse::<Fingerprint>(), Ok(f));
    }

    #[test]
    fn anything_else_is_refused_with_the_expected_form() {
        for bad in [
            "",
            "sha256:",
            "SHA256:abababababababababababababababababababababababababababababababab",
            "sha256:ABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABABAB",
            "sha256:abab",
            "sha256:ababababababababababababababababababababababababababababababababab",
            "sha256:+bababababababababababababababababababababababababababababababab",
            "sha256:ébababababababababababababababababababababababababababababababa",
            "md5:abababababababababababababababababababababababababababababababab",
        ] {
            let e = bad.parse::<Fingerprint>().unwrap_err();
            assert!(e.to_string().contains("expected sha256:"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_certificate_that_is_not_one_is_an_error() {
        assert!(matches!(
            Fingerprint::of_certificate(b"not der"),
            Err(FingerprintError::Certificate(_))
        ));
    }
}

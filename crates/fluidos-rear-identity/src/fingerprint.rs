//! The fingerprint that names a node: SHA-256 of its public key.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use sha2::{Digest, Sha256};

/// How a fingerprint is written: OpenSSH's form, familiar to operators.
const PREFIX: &str = "SHA256:";

/// SHA-256 of a node's SubjectPublicKeyInfo, written `SHA256:<base64>` (as
/// OpenSSH writes key fingerprints).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 32]);

/// A string that is not a fingerprint, or a certificate without a readable key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FingerprintError {
    /// Not `SHA256:` followed by 43 characters of unpadded base64.
    #[error("{0:?} is not a key fingerprint: expected SHA256: followed by 43 base64 characters")]
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
        let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
            .map_err(|e| FingerprintError::Certificate(e.to_string()))?;
        Ok(Fingerprint::of_public_key(cert.public_key().raw))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", STANDARD_NO_PAD.encode(self.0))
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
        let b64 = s.strip_prefix(PREFIX).ok_or_else(malformed)?;
        if b64.len() != 43 {
            return Err(malformed());
        }
        let bytes = STANDARD_NO_PAD.decode(b64).map_err(|_| malformed())?;
        let arr: [u8; 32] = bytes.try_into().map_err(|_| malformed())?;
        Ok(Fingerprint(arr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_openssh_does_and_read_back() {
        let f = Fingerprint::of_public_key(b"some key");
        let s = f.to_string();
        assert!(s.starts_with("SHA256:"), "{s}");
        assert_eq!(s.len(), 7 + 43);
        assert_eq!(s.parse::<Fingerprint>(), Ok(f));
    }

    #[test]
    fn anything_else_is_refused_with_the_expected_form() {
        for bad in [
            "",
            "SHA256:",
            "sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "SHA256:AAAA",
            "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "SHA256:!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
            "MD5:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let e = bad.parse::<Fingerprint>().unwrap_err();
            assert!(e.to_string().contains("expected SHA256:"), "{bad}: {e}");
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

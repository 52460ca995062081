//! Where a provider's REAR gateway is, and which key it must hold.

use std::fmt;
use std::str::FromStr;

use fluidos_rear_identity::Fingerprint;
use fluidos_rear_identity::fingerprint::FingerprintError;

/// The form [`ProviderAddress`] is written in, for error messages.
pub const ADDRESS_FORM: &str = "host:port or host:port#sha256:<64 lower-case hex digits>";

/// A provider's REAR gateway: `host:port`, and the fingerprint of the key it
/// must present when known.
///
/// With a fingerprint the client speaks TLS 1.3 and accepts only that key;
/// without one it speaks plain HTTP (unmodified Go nodes only serve
/// `http://`). Written `host:port` or `host:port#sha256:<64 hex digits>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderAddress {
    /// `host:port` of the gateway.
    pub address: String,
    /// The key the gateway must hold; `None` for plain HTTP.
    pub fingerprint: Option<Fingerprint>,
}

/// A string that is not a [`ProviderAddress`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddressError {
    /// The `host:port` part is missing or unreadable.
    #[error("{given:?} is not a provider address: {reason}; expected {ADDRESS_FORM}")]
    Address {
        /// What was given (at most 120 characters of it).
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The part after `#` is not a fingerprint.
    #[error("{given:?} is not a provider address: {source}; expected {ADDRESS_FORM}")]
    Fingerprint {
        /// What was given (at most 120 characters of it).
        given: String,
        /// Why the fingerprint was refused.
        source: FingerprintError,
    },
}

impl ProviderAddress {
    /// A provider reached over plain HTTP (no known key).
    pub fn plain(address: impl Into<String>) -> Self {
        ProviderAddress {
            address: address.into(),
            fingerprint: None,
        }
    }

    /// A provider reached over TLS, accepted only with the key `fingerprint`.
    pub fn pinned(address: impl Into<String>, fingerprint: Fingerprint) -> Self {
        ProviderAddress {
            address: address.into(),
            fingerprint: Some(fingerprint),
        }
    }

    /// `address` pinned to `fingerprint` when there is one, which must read
    /// as a [`Fingerprint`]: how a KnownCluster or an annotation is turned
    /// into an address.
    pub fn with_optional_fingerprint(
        address: impl Into<String>,
        fingerprint: Option<&str>,
    ) -> Result<Self, FingerprintError> {
        let fingerprint = fingerprint.map(str::parse).transpose()?;
        Ok(ProviderAddress {
            address: address.into(),
            fingerprint,
        })
    }

    /// Whether calls to this provider use TLS pinned to its key.
    pub fn is_pinned(&self) -> bool {
        self.fingerprint.is_some()
    }
}

/// Whether `address` is `host:port` and nothing else (no scheme, path,
/// user or fragment).
fn check_host_port(address: &str) -> Result<(), &'static str> {
    if address.is_empty() {
        return Err("the host:port part is empty");
    }
    if address.contains(['/', '@', '?', '#']) || address.chars().any(char::is_whitespace) {
        return Err("only host:port is allowed before '#' (no scheme, path or spaces)");
    }
    let authority: http::uri::Authority = address
        .parse()
        .map_err(|_| "the host:port part is unreadable")?;
    if authority.host().is_empty() {
        return Err("the host is missing");
    }
    match authority.port_u16() {
        Some(_) => Ok(()),
        None => Err("the port is missing or not a number"),
    }
}

impl FromStr for ProviderAddress {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let given = || s.chars().take(120).collect::<String>();
        let (address, fingerprint) = match s.split_once('#') {
            Some((a, f)) => (a, Some(f)),
            None => (s, None),
        };
        check_host_port(address).map_err(|reason| AddressError::Address {
            given: given(),
            reason,
        })?;
        let fingerprint = fingerprint
            .map(Fingerprint::from_str)
            .transpose()
            .map_err(|source| AddressError::Fingerprint {
                given: given(),
                source,
            })?;
        Ok(ProviderAddress {
            address: address.to_owned(),
            fingerprint,
        })
    }
}

impl fmt::Display for ProviderAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address)?;
        if let Some(fp) = &self.fingerprint {
            write!(f, "#{fp}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn both_forms_read_and_written_back() {
        for s in [
            "10.0.0.1:30000",
            "provider.example:443",
            "[::1]:8080",
            &format!("10.0.0.1:30000#{FP}"),
        ] {
            let a: ProviderAddress = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        let a: ProviderAddress = format!("h:1#{FP}").parse().unwrap();
        assert_eq!(a, ProviderAddress::pinned("h:1", FP.parse().unwrap()));
        assert!(a.is_pinned());
        let a: ProviderAddress = "h:1".parse().unwrap();
        assert_eq!(a, ProviderAddress::plain("h:1"));
        assert!(!a.is_pinned());
    }

    #[test]
    fn anything_else_is_refused_naming_the_expected_form() {
        for bad in [
            "",
            "host",
            "host:",
            "host:http",
            ":80",
            "http://host:80",
            "host:80/path",
            "user@host:80",
            "host:80#",
            "host:80#sha256:abc",
            &format!("host:80#{}", FP.to_uppercase()),
            &format!("host:80#{FP}#{FP}"),
            &format!("#{FP}"),
        ] {
            let e = bad.parse::<ProviderAddress>().unwrap_err();
            let text = e.to_string();
            assert!(text.contains(ADDRESS_FORM), "{bad}: {text}");
        }
    }

    #[test]
    fn a_fingerprint_error_says_what_a_fingerprint_is() {
        let e = "host:80#md5:00".parse::<ProviderAddress>().unwrap_err();
        assert!(matches!(e, AddressError::Fingerprint { .. }), "{e:?}");
        assert!(e.to_string().contains("expected sha256:"), "{e}");
    }

    #[test]
    fn an_optional_fingerprint_from_an_object() {
        let a = ProviderAddress::with_optional_fingerprint("h:1", None).unwrap();
        assert_eq!(a, ProviderAddress::plain("h:1"));
        let a = ProviderAddress::with_optional_fingerprint("h:1", Some(FP)).unwrap();
        assert_eq!(a.fingerprint.map(|f| f.to_string()).as_deref(), Some(FP));
        assert!(ProviderAddress::with_optional_fingerprint("h:1", Some("sha256:x")).is_err());
    }
}

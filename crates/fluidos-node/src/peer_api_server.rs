//! The API server address written into the kubeconfigs this node hands to
//! its peers (a K8Slice buyer's, a seller's of a Service delivered by Liqo).
//!
//! Without `--api-server-url` (chart: `apiServer.address`) it is the one
//! this node itself uses. In a pod that is the in-cluster address of the
//! `kubernetes` Service, which no other cluster can reach: a peer handed it
//! would fail to peer, far from here and long after the sale. So then the
//! node sells no K8Slice and issues no seller kubeconfig, and says why
//! (`/readyz`, the REAR answer, the log). Liqo has the same setting
//! (`apiServer.address`).
//!
//! The CA written with it is the one this node's own client trusts, unless
//! the address peers reach presents another certificate: `--api-server-ca`
//! (chart: `apiServer.ca`, base64 as Liqo's) names the CA to write instead,
//! `--api-server-trusted-ca` (chart: `apiServer.trustedCA`, as Liqo's)
//! writes none, for an address whose certificate a public CA issued.

/// Where peers are to reach this cluster's API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerApiServer {
    /// What the operator set.
    Given(String),
    /// The address this node uses, taken as reachable by peers.
    Derived(String),
    /// The address this node uses, which peers cannot reach; the reason.
    Unreachable(String),
}

impl PeerApiServer {
    /// The address to write, if peers can use it.
    pub fn url(&self) -> Option<&str> {
        match self {
            PeerApiServer::Given(u) | PeerApiServer::Derived(u) => Some(u),
            PeerApiServer::Unreachable(_) => None,
        }
    }

    /// Why peers cannot be handed an address, if they cannot.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            PeerApiServer::Unreachable(why) => Some(why),
            _ => None,
        }
    }
}

/// Decides from `--api-server-url` (`given`), the URL this node's own
/// client uses (`used`) and, in a pod, the `kubernetes` Service's address
/// (`KUBERNETES_SERVICE_HOST`, `service_host`) (pure).
pub fn decide(given: Option<&str>, used: &str, service_host: Option<&str>) -> PeerApiServer {
    if let Some(url) = given.map(str::trim).filter(|u| !u.is_empty()) {
        // As Liqo's apiServer.address: `https://` when no scheme is given.
        return match url.split_once("://") {
            None => PeerApiServer::Given(format!("https://{url}")),
            Some(("https", _)) => PeerApiServer::Given(url.to_owned()),
            Some(_) => PeerApiServer::Unreachable(format!(
                "--api-server-url {url} is not https: peers refuse a kubeconfig that would send their token in the clear; give the https address peers reach this cluster's API server at (chart: apiServer.address)"
            )),
        };
    }
    let host = host_of(used);
    let same_host = |h: &str| {
        let h = h.trim_matches(['[', ']']);
        match (
            h.parse::<std::net::IpAddr>(),
            host.parse::<std::net::IpAddr>(),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => h.eq_ignore_ascii_case(host),
        }
    };
    let in_cluster = host.starts_with("kubernetes.default")
        || host == "kubernetes"
        || service_host.is_some_and(same_host);
    if in_cluster || used.is_empty() {
        let what = if used.is_empty() {
            "no API server address is known".to_owned()
        } else {
            format!(
                "this node reaches its API server at {used}, the in-cluster address of the `kubernetes` Service, which peers in other clusters cannot reach"
            )
        };
        return PeerApiServer::Unreachable(format!(
            "{what}: set the address peers reach this cluster's API server at with --api-server-url (chart: apiServer.address, as Liqo's apiServer.address); until then this node sells no K8Slice and issues no seller kubeconfig"
        ));
    }
    PeerApiServer::Derived(used.to_owned())
}

/// Reads `--api-server-ca`: base64 of PEM certificates, as Liqo's
/// `--ca-override` (chart `apiServer.ca`) takes them; the PEM, or why not.
pub fn parse_ca(b64: &str) -> Result<String, String> {
    use base64::Engine as _;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| {
            format!("not base64 ({e}): give the CA's PEM base64-encoded, e.g. `base64 -w0 ca.crt`")
        })?;
    let pem = String::from_utf8(bytes).map_err(|_| "not PEM text once decoded".to_owned())?;
    let mut certificates = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        cert.map_err(|e| format!("not a PEM certificate: {e}"))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
    }
    Ok(pem)
}

/// The host of a URL (`https://host:port/...`; IPv6 without brackets).
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.split(':').next().unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed test CA (`openssl req -x509 -newkey ec ...`).
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBejCCAR+gAwIBAgIUeKDclBWtpkT4QnqnUMd/C21N8jgwCgYIKoZIzj0EAwIw\nEjEQMA4GA1UEAwwHdGVzdC1jYTAeFw0yNjEyMDcwNzM1MTRaFw0zNjEyMDQwNzM1\nMTRaMBIxEDAOBgNVBAMMB3Rlc3QtY2EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC\nAAS+zYavTbf8j9N+y1D6IfN6jwCEqpgIFTKgVNb51Cj19gEYiiUkrXmbvaKvmdNB\n3BNvTJYR8J4W3e4qtBvOiO4io1MwUTAdBgNVHQ4EFgQUzoQlEbcz1JaqCoHUot9D\nlaNhrSgwHwYDVR0jBBgwFoAUzoQlEbcz1JaqCoHUot9DlaNhrSgwDwYDVR0TAQH/\nBAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEA5uJ9Isnkf1o177TdkpqjnETNHQ7E\ndj7CZLJSwfAW4wsCIQDQdYhgTOKBQNiGarT0g6d5iLxx3mC0Piw5sl1bhkpWVw==\n-----END CERTIFICATE-----\n";

    #[test]
    fn a_ca_is_base64_of_pem_certificates_and_anything_else_says_why() {
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(parse_ca(&b64(CERT)).as_deref(), Ok(CERT));
        assert!(parse_ca(CERT).unwrap_err().contains("not base64"));
        assert!(
            parse_ca(&b64("hello"))
                .unwrap_err()
                .contains("no PEM certificate")
        );
        let truncated = "-----BEGIN CERTIFICATE-----\nMIIB\n";
        assert!(parse_ca(&b64(truncated)).is_err());
    }

    #[test]
    fn a_given_address_without_scheme_is_https_and_plain_http_is_refused() {
        assert_eq!(
            decide(Some("203.0.113.10:6443"), "https://10.96.0.1:443", None),
            PeerApiServer::Given("https://203.0.113.10:6443".into())
        );
        let refused = decide(Some("http://203.0.113.10:8080"), "", None);
        assert!(
            refused.refusal().is_some_and(|w| w.contains("not https")),
            "{refused:?}"
        );
    }

    #[test]
    fn a_service_host_matches_in_any_ipv6_spelling() {
        let d = decide(
            None,
            "https://[fd00::1]:443",
            Some("fd00:0000:0000:0000:0000:0000:0000:0001"),
        );
        assert!(d.refusal().is_some(), "{d:?}");
    }

    #[test]
    fn a_given_address_is_used_as_is() {
        assert_eq!(
            decide(
                Some("https://api.example.org:6443"),
                "https://10.96.0.1:443",
                Some("10.96.0.1")
            ),
            PeerApiServer::Given("https://api.example.org:6443".into())
        );
    }

    #[test]
    fn the_in_cluster_address_is_refused_with_the_setting_to_use() {
        for used in [
            "https://10.96.0.1:443",
            "https://kubernetes.default.svc",
            "https://kubernetes.default.svc.cluster.local:443/",
        ] {
            let d = decide(None, used, Some("10.96.0.1"));
            let why = d.refusal().unwrap_or_else(|| panic!("{used}: {d:?}"));
            assert!(
                why.contains("--api-server-url") && why.contains("apiServer.address"),
                "{why}"
            );
            assert_eq!(d.url(), None);
        }
        let v6 = decide(None, "https://[fd00::1]:443", Some("fd00::1"));
        assert!(v6.refusal().is_some(), "{v6:?}");
        assert!(decide(None, "", None).refusal().is_some());
    }

    #[test]
    fn another_address_this_node_uses_is_handed_out() {
        // Outside a pod (a host process with its kubeconfig), or a pod
        // given an outside kubeconfig.
        for (used, host) in [
            ("https://10.0.0.5:6443", None),
            ("https://api.example.org:6443", Some("10.96.0.1")),
            ("https://127.0.0.1:40000", None),
        ] {
            assert_eq!(
                decide(None, used, host),
                PeerApiServer::Derived(used.into()),
                "{used}"
            );
        }
    }

    #[test]
    fn hosts_are_read_from_urls() {
        assert_eq!(host_of("https://a.b:1/x"), "a.b");
        assert_eq!(host_of("https://[::1]:443"), "::1");
        assert_eq!(host_of("https://u@h:1"), "h");
        assert_eq!(host_of("h:1"), "h");
    }
}

//! The test cluster's PKI: a CA, the kube-apiserver serving certificate it
//! signs, and the ServiceAccount token signing keypair.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::Error;

/// PEM-encoded material, ready to be written next to the processes.
pub(crate) struct Pki {
    pub(crate) ca_cert_pem: String,
    /// kube-controller-manager signs CertificateSigningRequests with it
    /// (Liqo's identities are such certificates).
    pub(crate) ca_key_pem: String,
    pub(crate) serving_cert_pem: String,
    pub(crate) serving_key_pem: String,
    pub(crate) service_account_key_pem: String,
    pub(crate) service_account_pub_pem: String,
    /// The client certificate kube-apiserver shows a real node's kubelet
    /// (`logs`, `exec`); its user is [`KUBELET_CLIENT_USER`].
    pub(crate) kubelet_client_cert_pem: String,
    pub(crate) kubelet_client_key_pem: String,
}

/// The user kube-apiserver's kubelet client certificate names.
pub(crate) const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// Names the serving certificate must cover: loopback for the tests, plus the
/// in-cluster `kubernetes` Service (first IP of 10.0.0.0/24) for anything that
/// follows in-cluster config.
const SERVING_DNS_NAMES: &[&str] = &[
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];
const SERVING_IPS: &[[u8; 4]] = &[[127, 0, 0, 1], [10, 0, 0, 1]];

impl Pki {
    /// Fresh keys for every control plane, so two clusters in one test never
    /// trust each other's certificates or tokens.
    /// `extra_ip` is one more address the serving certificate covers: the
    /// host end of a real node's namespace, where kube-apiserver then listens.
    pub(crate) fn generate(extra_ip: Option<std::net::Ipv4Addr>) -> Result<Pki, Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "fluidos-testenv-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_key_pem = ca_key.serialize_pem();
        let ca = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving_params = CertificateParams::new(
            SERVING_DNS_NAMES
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )?;
        serving_params.subject_alt_names.extend(
            SERVING_IPS
                .iter()
                .map(|ip| SanType::IpAddress(std::net::IpAddr::from(*ip)))
                .chain(extra_ip.map(|ip| SanType::IpAddress(ip.into()))),
        );
        serving_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving_params.signed_by(&serving_key, &ca)?;

        let sa_key = KeyPair::generate()?;

        let kubelet_client_key = KeyPair::generate()?;
        let mut kubelet_client_params = CertificateParams::new(Vec::<String>::new())?;
        kubelet_client_params
            .distinguished_name
            .push(DnType::CommonName, KUBELET_CLIENT_USER);
        kubelet_client_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        kubelet_client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let kubelet_client_cert = kubelet_client_params.signed_by(&kubelet_client_key, &ca)?;

        Ok(Pki {
            ca_cert_pem: ca_cert.pem(),
            ca_key_pem,
            serving_cert_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            service_account_pub_pem: sa_key.public_key_pem(),
            service_account_key_pem: sa_key.serialize_pem(),
            kubelet_client_cert_pem: kubelet_client_cert.pem(),
            kubelet_client_key_pem: kubelet_client_key.serialize_pem(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_distinct_pem_material() {
        let a = Pki::generate(None).unwrap();
        let b = Pki::generate(None).unwrap();
        assert!(a.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            a.serving_cert_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(a.serving_key_pem.contains("PRIVATE KEY-----"));
        assert!(a.service_account_key_pem.contains("PRIVATE KEY-----"));
        assert!(
            a.service_account_pub_pem
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
        assert_ne!(a.ca_cert_pem, b.ca_cert_pem);
        assert_ne!(a.service_account_key_pem, b.service_account_key_pem);
        // The keys must round-trip, since kube-apiserver re-reads them from disk.
        KeyPair::from_pem(&a.serving_key_pem).unwrap();
        KeyPair::from_pem(&a.ca_key_pem).unwrap();
        KeyPair::from_pem(&a.service_account_key_pem).unwrap();
    }
}

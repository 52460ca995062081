//! The admin kubeconfig, self-contained (inline CA, bearer token) so that a
//! child process can use the file alone.

use base64::Engine as _;
use kube::config::Kubeconfig;

use crate::Error;

/// Context, cluster and user name in the generated kubeconfig.
pub(crate) const CONTEXT_NAME: &str = "fluidos-testenv";

/// Kubeconfig YAML for `server`, trusting `ca_pem`, authenticating with `token`.
pub(crate) fn admin_kubeconfig_yaml(server: &str, ca_pem: &str, token: &str) -> String {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT_NAME}
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
users:
- name: {CONTEXT_NAME}
  user:
    token: {token}
contexts:
- name: {CONTEXT_NAME}
  context:
    cluster: {CONTEXT_NAME}
    user: {CONTEXT_NAME}
    namespace: default
current-context: {CONTEXT_NAME}
"
    )
}

/// Parses the YAML produced by [`admin_kubeconfig_yaml`].
pub(crate) fn parse(yaml: &str) -> Result<Kubeconfig, Error> {
    Ok(Kubeconfig::from_yaml(yaml)?)
}

/// One line of kube-apiserver's `--token-auth-file`: `token,user,uid,"groups"`.
pub(crate) fn token_file_line(token: &str, user: &str, groups: &[&str]) -> String {
    format!("{token},{user},{user},\"{}\"\n", groups.join(","))
}

/// A bearer token that is unguessable by other local users of the loopback port.
pub(crate) fn random_token() -> Result<String, Error> {
    use std::io::Read as _;
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::io("reading /dev/urandom for the admin token", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_round_trips_through_kube() {
        let yaml = admin_kubeconfig_yaml(
            "https://127.0.0.1:6443",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "abc123",
        );
        let kc = parse(&yaml).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some(CONTEXT_NAME));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert!(String::from_utf8(ca).unwrap().contains("BEGIN CERTIFICATE"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }

    #[test]
    fn token_file_line_quotes_groups() {
        assert_eq!(
            token_file_line("t", "admin", &["system:masters"]),
            "t,admin,admin,\"system:masters\"\n"
        );
        assert_eq!(token_file_line("t", "u", &["a", "b"]), "t,u,u,\"a,b\"\n");
    }

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 48);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}

//! Kubeconfigs that come from peers (a seller's for a K8Slice, a buyer's
//! for a Service delivered by Liqo) are checked before a client is built
//! from them.
//!
//! A kubeconfig is also a program: kube's client runs a user's `exec`
//! plugin or `auth-provider` command when the client is built, reads the
//! files `tokenFile`, `client-certificate` and `certificate-authority`
//! name (this node's own ServiceAccount token among them), and follows
//! `proxy-url`. A peer may hand over nothing but an `https` server, inline
//! CA data, and an inline token or client certificate.

use kube::config::Kubeconfig;

/// Why a peer's kubeconfig is refused, naming what it uses (pure).
pub fn refusal(kubeconfig: &Kubeconfig) -> Option<String> {
    for named in &kubeconfig.clusters {
        let Some(c) = &named.cluster else { continue };
        let what = |field: &str| Some(format!("cluster {:?} sets {field}", named.name));
        if !c
            .server
            .as_deref()
            .is_some_and(|s| s.starts_with("https://"))
        {
            return what("no https server");
        }
        if c.insecure_skip_tls_verify == Some(true) {
            return what("insecure-skip-tls-verify");
        }
        if c.certificate_authority.is_some() {
            return what("certificate-authority (a file)");
        }
        if c.proxy_url.is_some() {
            return what("proxy-url");
        }
    }
    for named in &kubeconfig.auth_infos {
        let Some(u) = &named.auth_info else { continue };
        let what = |field: &str| Some(format!("user {:?} sets {field}", named.name));
        if u.exec.is_some() {
            return what("exec (a command)");
        }
        if u.auth_provider.is_some() {
            return what("auth-provider");
        }
        if u.token_file.is_some() {
            return what("tokenFile (a file)");
        }
        if u.client_certificate.is_some() || u.client_key.is_some() {
            return what("client-certificate or client-key (a file)");
        }
        if u.username.is_some() || u.password.is_some() {
            return what("username or password");
        }
        if u.impersonate.is_some() || u.impersonate_groups.is_some() {
            return what("impersonation");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
{cluster}
users:
- name: u
  user:
{user}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"
        ))
        .unwrap()
    }

    const SERVER: &str = "    server: https://10.0.0.1:6443\n    certificate-authority-data: Q0E=";
    const TOKEN: &str = "    token: abc";

    #[test]
    fn only_inline_credentials_for_an_https_server_pass() {
        assert_eq!(refusal(&kubeconfig(SERVER, TOKEN)), None);
        assert_eq!(
            refusal(&kubeconfig(
                SERVER,
                "    client-certificate-data: Q0U=\n    client-key-data: S0U="
            )),
            None
        );
        for (cluster, user, named) in [
            (
                SERVER,
                "    exec: {command: sh, apiVersion: client.authentication.k8s.io/v1}",
                "exec",
            ),
            (
                SERVER,
                "    auth-provider: {name: gcp, config: {cmd-path: sh}}",
                "auth-provider",
            ),
            (
                SERVER,
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "tokenFile",
            ),
            (
                SERVER,
                "    client-certificate: /etc/x\n    client-key: /etc/y",
                "client-certificate",
            ),
            (SERVER, "    username: a\n    password: b", "username"),
            (SERVER, "    token: a\n    as: admin", "impersonation"),
            ("    server: http://10.0.0.1", TOKEN, "https"),
            (
                "    server: https://a\n    insecure-skip-tls-verify: true",
                TOKEN,
                "insecure",
            ),
            (
                "    server: https://a\n    certificate-authority: /etc/ca",
                TOKEN,
                "certificate-authority",
            ),
            (
                "    server: https://a\n    proxy-url: http://p",
                TOKEN,
                "proxy-url",
            ),
        ] {
            let why = refusal(&kubeconfig(cluster, user)).unwrap_or_default();
            assert!(why.contains(named), "{named}: {why:?}");
        }
    }
}

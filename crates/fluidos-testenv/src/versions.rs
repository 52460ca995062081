//! The Kubernetes minor is pinned twice (Go binaries and the k8s-openapi
//! feature); these parsers let a test prove the two agree.

/// Minor of `KUBERNETES_VERSION=v1.X.Y` in `tools/control-plane/versions.env`.
pub(crate) fn kubernetes_minor_from_versions_env(text: &str) -> Option<u32> {
    let value = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))?;
    let value = value.trim().trim_matches('"');
    let rest = value.strip_prefix("v1.")?;
    rest.split('.').next()?.parse().ok()
}

/// Minor of the `v1_X` feature on the `k8s-openapi` dependency line of a
/// Cargo manifest.
pub(crate) fn k8s_openapi_minor_from_manifest(text: &str) -> Option<u32> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("k8s-openapi") && l.contains('='))?;
    let start = line.find("\"v1_")? + "\"v1_".len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace_root;

    #[test]
    fn parses_versions_env() {
        let text = "# comment KUBERNETES_VERSION=v1.1.1\nKUBERNETES_VERSION=v1.35.4\nETCD_VERSION=v3.6.16\n";
        assert_eq!(kubernetes_minor_from_versions_env(text), Some(35));
        assert_eq!(
            kubernetes_minor_from_versions_env("ETCD_VERSION=v3.6.16"),
            None
        );
        assert_eq!(
            kubernetes_minor_from_versions_env("KUBERNETES_VERSION=1.35.4"),
            None
        );
    }

    #[test]
    fn parses_k8s_openapi_feature() {
        let text = "[workspace.dependencies]\nk8s-openapi = { version = \"0.29\", features = [\"v1_35\", \"schemars\"] }\n";
        assert_eq!(k8s_openapi_minor_from_manifest(text), Some(35));
        assert_eq!(
            k8s_openapi_minor_from_manifest("k8s-openapi = \"0.29\""),
            None
        );
    }

    #[test]
    fn go_binaries_and_k8s_openapi_pin_the_same_minor() {
        let root = workspace_root();
        let env_text =
            std::fs::read_to_string(root.join("tools/control-plane/versions.env")).unwrap();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let go_minor = kubernetes_minor_from_versions_env(&env_text)
            .expect("versions.env has KUBERNETES_VERSION=v1.X.Y");
        let rust_minor = k8s_openapi_minor_from_manifest(&manifest)
            .expect("root Cargo.toml enables a k8s-openapi v1_X feature");
        assert_eq!(
            go_minor, rust_minor,
            "tools/control-plane/versions.env builds Kubernetes v1.{go_minor} but the \
             workspace k8s-openapi feature is v1_{rust_minor}; bump them together"
        );
    }
}

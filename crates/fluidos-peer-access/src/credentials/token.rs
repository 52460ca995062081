//! The kubeconfig a sale hands out: a bound token from the TokenRequest
//! API for the buyer's ServiceAccount, cached for half the lifetime the API
//! server granted while the account is the one it was minted for and no
//! revocation is pending.

use crate::go_grant;
use crate::grant::{
    PeeringGrant, reuse_for, service_account_name, token_account_uid, valid_cluster_id,
};
use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use std::time::Instant;

use super::account::CheckedAccount;
use super::step::Step;
use super::{Cached, Credentials, CredentialsError};

/// Key of a cached kubeconfig: the buyer, the peer it belongs to and the
/// provider identity it names.
pub(super) fn cache_key(buyer_id: &str, owner: &str, provider_liqo_id: &str) -> String {
    format!("{buyer_id}\u{0}{owner}\u{0}{provider_liqo_id}")
}

/// A kubeconfig YAML with cluster, user and context named `name`, keys in
/// client-go's (alphabetical) order. Every value is a double-quoted
/// scalar ([`yaml_quoted`]), which YAML reads as the same string whatever
/// it holds.
pub fn kubeconfig_yaml(name: &str, server: &str, ca_pem: Option<&str>, token: &str) -> String {
    let quoted = yaml_quoted;
    let name = quoted(name);
    let ca = ca_pem.map_or_else(String::new, |pem| {
        let data = base64::engine::general_purpose::STANDARD.encode(pem.as_bytes());
        format!("    certificate-authority-data: {}\n", quoted(&data))
    });
    format!(
        "apiVersion: v1\n\
         clusters:\n\
         - cluster:\n\
         {ca}    server: {server}\n\
         \x20 name: {name}\n\
         contexts:\n\
         - context:\n\
         \x20   cluster: {name}\n\
         \x20   user: {name}\n\
         \x20 name: {name}\n\
         current-context: {name}\n\
         kind: Config\n\
         preferences: {{}}\n\
         users:\n\
         - name: {name}\n\
         \x20 user:\n\
         \x20   token: {token}\n",
        server = quoted(server),
        token = quoted(token),
    )
}

/// `s` as a YAML double-quoted scalar: a JSON string (whose escapes YAML's
/// double-quoted style shares), with the characters YAML readers refuse or
/// fold (DEL, the C1 controls, NEL among them, the line and paragraph
/// separators, the byte-order mark) escaped too, which JSON leaves as
/// they are.
fn yaml_quoted(s: &str) -> String {
    serde_json::Value::from(s)
        .to_string()
        .chars()
        .map(|c| match u32::from(c) {
            0x7f..=0x9f | 0x2028 | 0x2029 | 0xfeff => format!("\\u{:04X}", u32::from(c)),
            _ => c.to_string(),
        })
        .collect()
}

/// The part of a TokenRequest answer's `status` this node reads; both
/// optional, so that a missing timestamp falls back instead of failing.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TokenAnswerStatus {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expiration_timestamp: Option<String>,
}

impl Credentials {
    /// Base64 (std, padded) kubeconfig for `buyer_id`, named after
    /// `provider_liqo_id` (reused while more than half of its token
    /// lifetime is left), with `grant` (a K8Slice sale) the buyer's rights in
    /// Liqo's objects here: its grant in its Liqo tenant namespace
    /// ([`Credentials::grant_tenant_namespace`]), or an unmodified Go
    /// consumer's ([`Credentials::grant_go_consumer`]). New credentials mint
    /// the token and write the grant at the same time, both needing only the
    /// ServiceAccount: a first sale to a buyer waits for one of the two
    /// instead of both.
    pub async fn issue(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
        grant: Option<PeeringGrant<'_>>,
    ) -> Result<String, CredentialsError> {
        let checked = self.check_owner(buyer_id, owner).await?;
        let grant = match grant {
            Some(PeeringGrant::GoConsumer(cluster)) if !valid_cluster_id(cluster) => {
                tracing::warn!(
                    buyer = buyer_id,
                    cluster_id = cluster,
                    "the buyer's Liqo cluster ID is not a DNS label: no Go peering grant"
                );
                None
            }
            other => other,
        };
        let go_cluster = match grant {
            Some(PeeringGrant::GoConsumer(cluster)) => Some(cluster),
            _ => None,
        };
        if let Some(PeeringGrant::TenantNamespace(cluster)) = grant
            && cluster == provider_liqo_id
        {
            // This cluster's own ID names no tenant of it.
            return Err(CredentialsError::TenantTaken {
                namespace: format!("liqo-tenant-{cluster}"),
            });
        }
        if let Some(cluster) = go_cluster {
            if cluster == provider_liqo_id {
                // This cluster's own ID names no tenant of it.
                return Err(CredentialsError::TenantTaken {
                    namespace: format!("{}{cluster}", go_grant::TENANT_PREFIX),
                });
            }
            // Before the account records the claim: a refused claim must
            // leave none behind (the namespace watcher acts on claims).
            self.check_go_claim(buyer_id, cluster).await?;
        }
        let apply_grant = |sa_uid: String| async move {
            match grant {
                Some(PeeringGrant::TenantNamespace(cluster)) => {
                    self.grant_tenant_namespace(buyer_id, owner, &sa_uid, cluster)
                        .await
                }
                Some(PeeringGrant::GoConsumer(cluster)) => {
                    self.grant_go_consumer(buyer_id, &sa_uid, cluster).await
                }
                None => Ok(()),
            }
        };
        // A Go consumer's account must carry its claim, so it is applied
        // at every such sale, cached token or not.
        if go_cluster.is_none()
            && let Some((b64, sa_uid)) = self.cached(buyer_id, owner, provider_liqo_id).await
        {
            apply_grant(sa_uid).await?;
            return Ok(b64);
        }
        let sa = service_account_name(buyer_id);
        let checked = self.claim(buyer_id, owner, checked).await?;
        let sa_uid = match self
            .ensure_rbac(&sa, buyer_id, owner, go_cluster, &checked.uid)
            .await
        {
            // The watch may lag behind a revocation: once more, as the API
            // server has the account now.
            Err(CredentialsError::AccountChanged { .. }) => {
                let live = self.read_owned_account(buyer_id, owner).await?;
                let checked = self
                    .claim(buyer_id, owner, live.as_ref().and_then(CheckedAccount::of))
                    .await?;
                self.ensure_rbac(&sa, buyer_id, owner, go_cluster, &checked.uid)
                    .await?
            }
            other => other?,
        };
        if let Some((b64, _)) = self.cached(buyer_id, owner, provider_liqo_id).await {
            apply_grant(sa_uid).await?;
            return Ok(b64);
        }
        let (b64, ()) = tokio::try_join!(
            self.mint(buyer_id, owner, provider_liqo_id, &sa_uid),
            apply_grant(sa_uid.clone())
        )?;
        Ok(b64)
    }

    /// The cached kubeconfig and account UID for `buyer_id`, while fresh and
    /// its account still exists.
    pub(super) async fn cached(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
    ) -> Option<(String, String)> {
        let key = cache_key(buyer_id, owner, provider_liqo_id);
        let sa = service_account_name(buyer_id);
        let cache = self.cache.lock().await;
        let c = cache.get(&key)?;
        (Instant::now() < c.refresh_at && self.account_is(&sa, &c.sa_uid))
            .then(|| (c.kubeconfig_b64.clone(), c.sa_uid.clone()))
    }

    /// A new token for `buyer_id`'s ServiceAccount (UID `sa_uid`, applied
    /// already), as a base64 kubeconfig, cached for half the lifetime the
    /// API server granted.
    pub(super) async fn mint(
        &self,
        buyer_id: &str,
        owner: &str,
        provider_liqo_id: &str,
        sa_uid: &str,
    ) -> Result<String, CredentialsError> {
        // Measured before the request: the token cannot have been issued
        // earlier, so half its lifetime from here never overshoots.
        let (issued, issued_at) = (Instant::now(), jiff::Timestamp::now());
        let (token, expiration) = self.token(&service_account_name(buyer_id)).await?;
        // A token is for whichever account has the name when it is minted:
        // one deleted and made again by another sale since the check gets a
        // token bound to the other account's UID, which this buyer must not
        // be handed.
        if token_account_uid(&token).is_some_and(|uid| uid != sa_uid) {
            return Err(CredentialsError::AccountChanged {
                buyer: buyer_id.to_owned(),
            });
        }
        let reuse = reuse_for(issued_at, expiration.as_deref(), self.cfg.token_ttl);
        let yaml = kubeconfig_yaml(
            provider_liqo_id,
            &self.cfg.api_server_url,
            self.cfg.ca_pem.as_deref(),
            &token,
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(yaml.as_bytes());
        self.cache.lock().await.insert(
            cache_key(buyer_id, owner, provider_liqo_id),
            Cached {
                kubeconfig_b64: b64.clone(),
                refresh_at: issued + reuse,
                sa_uid: sa_uid.to_owned(),
            },
        );
        Ok(b64)
    }

    /// A bound token for `sa` from the TokenRequest API, and the
    /// `status.expirationTimestamp` of the answer, as it came (the answer is
    /// read untyped: a missing or odd timestamp must not lose the token).
    pub(super) async fn token(
        &self,
        sa: &str,
    ) -> Result<(String, Option<String>), CredentialsError> {
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(
                    i64::try_from(self.cfg.token_ttl.as_secs()).unwrap_or(i64::MAX),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer: serde_json::Value =
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
                .create_subresource("token", sa, &PostParams::default(), &req)
                .await
                .map_err(|source| CredentialsError::Kube {
                    step: Step::RequestToken,
                    source,
                })?;
        let status: TokenAnswerStatus = serde_json::from_value(
            answer.get("status").cloned().unwrap_or_default(),
        )
        .map_err(|source| CredentialsError::TokenAnswer {
            account: sa.to_owned(),
            source,
        })?;
        let token = status
            .token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| CredentialsError::NoToken(sa.to_owned()))?;
        Ok((token, status.expiration_timestamp))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn kubeconfig_shape() {
        let y = kubeconfig_yaml("prov", "https://h:6443", Some("PEM"), "tok");
        let parsed = kube::config::Kubeconfig::from_yaml(&y).unwrap();
        let v = serde_json::to_value(&parsed).unwrap();
        assert_eq!(v["current-context"], "prov");
        assert_eq!(v["clusters"][0]["cluster"]["server"], "https://h:6443");
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(v["users"][0]["user"]["token"], "tok");
        assert!(kube::config::Kubeconfig::from_yaml(&y).is_ok());
        // A value that would end a plain scalar or start a key stays one
        // string; no CA, no key for it.
        let odd = "a\"b\nkind: Evil #c";
        let y = kubeconfig_yaml(odd, "https://h:6443", None, "t: u");
        let parsed = kube::config::Kubeconfig::from_yaml(&y).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some(odd));
        assert_eq!(parsed.kind.as_deref(), Some("Config"));
        let v = serde_json::to_value(&parsed).unwrap();
        assert_eq!(v["users"][0]["user"]["token"], "t: u");
        assert!(v["clusters"][0]["cluster"]["certificate-authority-data"].is_null());
        // What JSON leaves as is but YAML refuses (DEL, C1) or folds (NEL).
        let controls = "a\u{7f}b\u{85}c\u{9f}d\u{2028}e\u{feff}";
        let y = kubeconfig_yaml(controls, "https://h:6443", None, "t");
        assert!(y.is_ascii(), "{y}");
        let parsed = kube::config::Kubeconfig::from_yaml(&y).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some(controls));
    }

    #[test]
    fn token_answers_parse_without_a_timestamp() {
        let s: TokenAnswerStatus =
            serde_json::from_value(serde_json::json!({"token": "t"})).unwrap();
        assert_eq!(
            (s.token.as_deref(), s.expiration_timestamp),
            (Some("t"), None)
        );
        let s: TokenAnswerStatus = serde_json::from_value(serde_json::json!({
            "token": "t", "expirationTimestamp": "2026-01-01T00:00:00Z"}))
        .unwrap();
        assert_eq!(
            s.expiration_timestamp.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
    }
}

//! Waiting until a grant just written is one the API server enforces.
//!
//! The RBAC authorizer reads Roles and RoleBindings from its own watch
//! cache, so a RoleBinding the API server has just stored may still be
//! unknown to it for a moment. A peer handed its kubeconfig in that moment
//! gets 403s (its Liqo retries, but it logs "forbidden" and waits out a
//! backoff). Before a fresh grant goes out, the API server is therefore
//! asked, with a SubjectAccessReview, whether it authorizes the peer's
//! account yet. Nothing here can be watched (the authorizer's cache is
//! not an object), so it asks again every [`INTERVAL`], for at most
//! [`PATIENCE`].
//!
//! The wait is best effort: a node deployed without the right to create
//! SubjectAccessReviews (a chart of an earlier version), an API server
//! that does not answer, or a grant still not in force after
//! [`PATIENCE`] is logged and the grant handed out as before; the peer's
//! own retries then cover the gap.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// Time between two reviews.
pub const INTERVAL: Duration = Duration::from_millis(50);
/// Longest wait for one grant.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// One access a ServiceAccount was just granted.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    /// The ServiceAccount's namespace.
    pub account_namespace: &'a str,
    /// The ServiceAccount's name.
    pub account: &'a str,
    /// The namespace the access is in.
    pub namespace: &'a str,
    /// API group (`""` for the core group).
    pub group: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// Verb.
    pub verb: &'a str,
}

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The API server authorizes the access.
    InForce,
    /// This node may not ask (no `create subjectaccessreviews`).
    NotAllowedToAsk,
    /// Still refused after [`PATIENCE`].
    StillRefused,
    /// The API server did not answer the review (logged).
    NoAnswer,
}

/// The review asking whether `access` is authorized: the groups are the
/// ones the API server gives every ServiceAccount token.
pub fn review(access: &Access<'_>) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{}:{}",
                access.account_namespace, access.account
            )),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{}", access.account_namespace),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(access.namespace.to_owned()),
                group: Some(access.group.to_owned()),
                resource: Some(access.resource.to_owned()),
                verb: Some(access.verb.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Waits until the API server authorizes `access` (see the module doc);
/// never fails, says how it ended.
pub async fn wait_in_force(client: &kube::Client, access: Access<'_>) -> Waited {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = review(&access);
    let started = Instant::now();
    loop {
        match api.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {
                if started.elapsed() >= INTERVAL {
                    tracing::debug!(
                        account = access.account,
                        namespace = access.namespace,
                        waited = ?started.elapsed(),
                        "the peer's grant is in force"
                    );
                }
                return Waited::InForce;
            }
            Ok(_) if started.elapsed() < PATIENCE => tokio::time::sleep(INTERVAL).await,
            Ok(_) => {
                tracing::warn!(
                    account = access.account,
                    namespace = access.namespace,
                    resource = access.resource,
                    verb = access.verb,
                    "the peer's grant is still not in force after {PATIENCE:?}: handed out anyway, the peer retries"
                );
                return Waited::StillRefused;
            }
            Err(kube::Error::Api(e)) if e.code == 403 => {
                tracing::debug!(
                    "this node may not create SubjectAccessReviews: a fresh grant is handed out without checking that it is in force"
                );
                return Waited::NotAllowedToAsk;
            }
            Err(e) => {
                tracing::warn!(error = %e, account = access.account, "could not ask whether the peer's grant is in force: handed out anyway");
                return Waited::NoAnswer;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_review_names_the_account_as_its_token_does() {
        let r = review(&Access {
            account_namespace: "fluidos",
            account: "fluidos-peer-abc",
            namespace: "liqo-tenant-x",
            group: "",
            resource: "secrets",
            verb: "get",
        });
        assert_eq!(
            r.spec.user.as_deref(),
            Some("system:serviceaccount:fluidos:fluidos-peer-abc")
        );
        let groups = r.spec.groups.unwrap_or_default();
        assert!(groups.contains(&"system:serviceaccounts:fluidos".to_owned()));
        let attrs = r.spec.resource_attributes.unwrap_or_default();
        assert_eq!(attrs.namespace.as_deref(), Some("liqo-tenant-x"));
        assert_eq!(attrs.resource.as_deref(), Some("secrets"));
        assert_eq!(attrs.verb.as_deref(), Some("get"));
    }
}

//! Revocation in two phases: the account marked (no replica reuses its
//! tokens from then on), then, after a grace period, deleted with its
//! bindings on a `resourceVersion` precondition that fails if anybody
//! issued credentials since.

use crate::grant::{
    ACCOUNT_UID_ANNOTATION, MANAGED_LABEL, REVOKING_ANNOTATION, service_account_name,
};
use fluidos_controller::api_error;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};

use super::step::Step;
use super::{Credentials, CredentialsError};

impl Credentials {
    /// Sets or clears the revocation mark of `buyer_id`'s account; with
    /// `resource_version`, only if the account has not changed since.
    pub async fn set_revoking(
        &self,
        buyer_id: &str,
        since: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<(), kube::Error> {
        let mut meta = serde_json::json!({"annotations": {REVOKING_ANNOTATION: since}});
        if let Some(rv) = resource_version {
            meta["resourceVersion"] = rv.into();
        }
        Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .patch(
                &service_account_name(buyer_id),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "metadata": meta })),
            )
            .await
            .map(|_| ())
    }

    /// Deletes the RoleBindings made for the buyer's account (by UID), then
    /// the account, which invalidates every token issued for it, unless it
    /// changed since `resource_version` (somebody issued credentials:
    /// `Ok(false)`), then its cached kubeconfigs.
    pub async fn revoke(
        &self,
        buyer_id: &str,
        uid: &str,
        resource_version: &str,
    ) -> Result<bool, CredentialsError> {
        let sa = service_account_name(buyer_id);
        // Its bindings first, wherever they are (its tenant namespaces, and
        // the compatibility namespace if one is configured): RBAC binds by
        // name, so a binding left behind would grant a later account of the
        // same name. A failure here leaves the account for the next sweep to
        // revoke again; should the account be reissued meanwhile (the delete
        // below then fails), the next sale grants it again.
        let all = Api::<RoleBinding>::all(self.client.clone());
        let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
        let bindings = all
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::ListBindings,
                source,
            })?;
        let made_for_it = |b: &RoleBinding| {
            b.name_any() == sa
                && b.annotations()
                    .get(ACCOUNT_UID_ANNOTATION)
                    .is_none_or(|u| u == uid)
                && b.subjects.as_deref().is_some_and(|subjects| {
                    subjects.iter().all(|s| {
                        s.kind == "ServiceAccount"
                            && s.name == sa
                            && s.namespace.as_deref() == Some(self.cfg.namespace.as_str())
                    })
                })
        };
        for binding in bindings.items.iter().filter(|b| made_for_it(b)) {
            let Some(ns) = binding.namespace() else {
                continue;
            };
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: binding.uid(),
                    resource_version: binding.resource_version(),
                }),
                ..Default::default()
            };
            match Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
                .delete(&sa, &dp)
                .await
            {
                Ok(_) => {}
                // Gone, or re-made for a new account since: not ours to delete.
                Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => {}
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: Step::DeleteBinding,
                        source,
                    });
                }
            }
        }
        match self.unbind_go_consumer(&sa, uid).await {
            // With the grant off the gateway may not read ClusterRoleBindings
            // (the chart grants that only with it on); one made while it was
            // on is then the operator's to remove (docs/deploy.md).
            Err(CredentialsError::Kube { source, .. })
                if !self.cfg.go_peering && api_error::is_forbidden(&source) => {}
            other => other?,
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: Some(resource_version.to_owned()),
            }),
            ..Default::default()
        };
        match Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .delete(&sa, &dp)
            .await
        {
            Ok(_) => {}
            Err(e) if api_error::is_conflict(&e) => return Ok(false),
            Err(e) if api_error::is_not_found(&e) => {}
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: Step::DeleteAccount,
                    source,
                });
            }
        }
        let prefix = format!("{buyer_id}\u{0}");
        self.cache
            .lock()
            .await
            .retain(|k, _| !k.starts_with(&prefix));
        Ok(true)
    }
}

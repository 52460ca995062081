//! A buyer's ServiceAccount: claimed for the peer that asks first (its
//! owner recorded), applied with the buyer's and the Go claim's marks, and
//! written only while it is still the account the sale checked.

use crate::go_grant;
use crate::grant::{
    AccountPhase, OWNER_ANNOTATION, REVOKING_ANNOTATION, buyer_marks, liqo_peering_user_rules,
    managed_labels, owned_by_another, service_account_name, with_type,
};
use fluidos_controller::api_error;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::step::Step;
use super::{Credentials, CredentialsError, FIELD_MANAGER};

/// A buyer ID's account as a sale checked it: whose it is decides nothing
/// after this point; writes to it are conditioned on it being this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CheckedAccount {
    /// UID of the account: a write names it, so that an account deleted and
    /// made again (by another owner) meanwhile is not written.
    pub(super) uid: String,
    /// `resourceVersion` as checked.
    pub(super) resource_version: String,
    /// Whether it records the caller as its owner (false: an account of an
    /// earlier version, without an owner, which the caller may claim).
    pub(super) owned: bool,
}

impl CheckedAccount {
    pub(super) fn of(sa: &ServiceAccount) -> Option<CheckedAccount> {
        Some(CheckedAccount {
            uid: sa.metadata.uid.clone()?,
            resource_version: sa.metadata.resource_version.clone()?,
            owned: sa.annotations().contains_key(OWNER_ANNOTATION),
        })
    }
}

/// Refuses `owner` credentials of `buyer_id` when `account` belongs to
/// another peer.
pub(super) fn refuse_another_owner(
    account: Option<&ServiceAccount>,
    buyer_id: &str,
    owner: &str,
) -> Result<(), CredentialsError> {
    if owned_by_another(account, owner) {
        return Err(CredentialsError::OwnerMismatch {
            buyer: buyer_id.to_owned(),
        });
    }
    Ok(())
}

/// True when a write naming an account's UID was refused because the
/// account is not that one any more: 409 (gone, or changed since the
/// `resourceVersion` it named) or 422 on `metadata.uid` (another account of
/// that name). Any other refusal is the API server's to explain.
pub(super) fn account_changed(e: &kube::Error) -> bool {
    let kube::Error::Api(status) = e else {
        return false;
    };
    match status.code {
        409 => status.reason != "AlreadyExists",
        422 => status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")),
        _ => false,
    }
}

impl Credentials {
    /// True while the ServiceAccount `name` exists with `uid` and no
    /// revocation is pending on it, as the watch sees it.
    pub(super) fn account_is(&self, name: &str, uid: &str) -> bool {
        self.accounts
            .get(&ObjectRef::new(name).within(&self.cfg.namespace))
            .is_some_and(|sa| {
                sa.uid().as_deref() == Some(uid)
                    && AccountPhase::of(Some(&sa)) == AccountPhase::Live
            })
    }

    /// Server-side applies the ServiceAccount, with `go_cluster` the Liqo
    /// cluster ID its Go consumer may peer as (without, a claim it has stays),
    /// and, in the compatibility namespace if one is
    /// configured, the peer Role and the buyer's RoleBinding; returns the
    /// ServiceAccount's UID. The account must still be the one of UID `uid`
    /// whose owner the sale checked: one deleted meanwhile (a revocation)
    /// is not made again, and one made again by another sale not written.
    pub(super) async fn ensure_rbac(
        &self,
        sa: &str,
        buyer_id: &str,
        owner: &str,
        go_cluster: Option<&str>,
        uid: &str,
    ) -> Result<String, CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let mut annotations = buyer_marks(buyer_id, owner);
        // A claim stays with the account until it is revoked: a sale of
        // another kind (a service) to the same Go consumer keeps it, as does
        // its first time, with which adoption compares namespaces' creation.
        let current = self.go_claims().into_iter().find(|c| c.account == sa);
        let claim = match (go_cluster, current) {
            (Some(cluster), Some(c)) if c.cluster_id == cluster && !c.claimed_at.is_empty() => {
                Some((c.cluster_id, c.claimed_at))
            }
            (Some(cluster), _) => Some((cluster.to_owned(), jiff::Timestamp::now().to_string())),
            (None, current) => current.map(|c| (c.cluster_id, c.claimed_at)),
        };
        if let Some((cluster, since)) = claim {
            annotations.insert(go_grant::CLUSTER_ID_ANNOTATION.to_owned(), cluster);
            annotations.insert(go_grant::CLAIMED_AT_ANNOTATION.to_owned(), since);
        }
        let sa_obj = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(sa.to_owned()),
                namespace: Some(self.cfg.namespace.clone()),
                // A precondition: the API server refuses the apply (409 when
                // the account is gone, 422 when it is another) rather than
                // make or take over an account whose owner was not checked.
                uid: Some(uid.to_owned()),
                labels: managed_labels(),
                annotations: Some(annotations),
                ..Default::default()
            },
            ..Default::default()
        };
        let applied = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .patch(
                sa,
                &pp,
                &Patch::Apply(with_type(&sa_obj, "v1", "ServiceAccount")),
            )
            .await
            .map_err(|source| {
                if account_changed(&source) {
                    CredentialsError::AccountChanged {
                        buyer: buyer_id.to_owned(),
                    }
                } else {
                    CredentialsError::Kube {
                        step: Step::ApplyAccount,
                        source,
                    }
                }
            })?;
        if let Some(extra) = &self.cfg.role_namespace {
            let uid = applied.uid().unwrap_or_default();
            self.bind_peer_rules(extra, liqo_peering_user_rules(), sa, &uid, buyer_id)
                .await?;
        }
        if let AccountPhase::Revoking { .. } = AccountPhase::of(Some(&applied)) {
            // Issuing cancels a pending revocation; the write also changes
            // the resourceVersion the revoker's delete is conditioned on.
            // The UID again: the revoker may have won meanwhile.
            Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
                .patch(
                    sa,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {
                        "uid": uid,
                        "annotations": {REVOKING_ANNOTATION: null},
                    }})),
                )
                .await
                .map_err(|source| {
                    if account_changed(&source) || api_error::is_not_found(&source) {
                        CredentialsError::AccountChanged {
                            buyer: buyer_id.to_owned(),
                        }
                    } else {
                        CredentialsError::Kube {
                            step: Step::CancelRevocation,
                            source,
                        }
                    }
                })?;
        }
        Ok(applied.uid().unwrap_or_default())
    }

    /// Refuses `owner` credentials of `buyer_id` when its account belongs to
    /// another peer. Read from the API server when the watch has not seen
    /// the account (a replica may have made it just now); an account of an
    /// earlier version, without an owner, goes to the first peer that asks.
    /// Returns the account as checked, if there is one.
    pub(super) async fn check_owner(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<Option<CheckedAccount>, CredentialsError> {
        let seen = self
            .accounts
            .get(&ObjectRef::new(&service_account_name(buyer_id)).within(&self.cfg.namespace))
            .map(|a| (*a).clone());
        let account = match seen {
            Some(a) => {
                refuse_another_owner(Some(&a), buyer_id, owner)?;
                Some(a)
            }
            None => self.read_owned_account(buyer_id, owner).await?,
        };
        Ok(account.as_ref().and_then(CheckedAccount::of))
    }

    /// `buyer_id`'s account as the API server has it, refused when another
    /// peer owns it.
    pub(super) async fn read_owned_account(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<Option<ServiceAccount>, CredentialsError> {
        let account = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace)
            .get_opt(&service_account_name(buyer_id))
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::ReadAccount,
                source,
            })?;
        refuse_another_owner(account.as_ref(), buyer_id, owner)?;
        Ok(account)
    }

    /// The account `checked` found, owned by `owner`: as it is when it
    /// already is, claimed when it has no owner, created when there is none.
    pub(super) async fn claim(
        &self,
        buyer_id: &str,
        owner: &str,
        checked: Option<CheckedAccount>,
    ) -> Result<CheckedAccount, CredentialsError> {
        match checked {
            Some(a) if a.owned => Ok(a),
            Some(unowned) => self.claim_unowned(buyer_id, owner, &unowned).await,
            None => self.claim_account(buyer_id, owner).await,
        }
    }

    /// Creates `buyer_id`'s account owned by `owner`, or, when another sale
    /// created it first, refuses `owner` unless that sale was its own: of
    /// two first sales to one buyer ID by different peers at the same time,
    /// only one gets the account.
    pub(super) async fn claim_account(
        &self,
        buyer_id: &str,
        owner: &str,
    ) -> Result<CheckedAccount, CredentialsError> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace);
        let name = service_account_name(buyer_id);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: managed_labels(),
                annotations: Some(buyer_marks(buyer_id, owner)),
                ..Default::default()
            },
            ..Default::default()
        };
        let changed = || CredentialsError::AccountChanged {
            buyer: buyer_id.to_owned(),
        };
        let existing = match api.create(&PostParams::default(), &sa).await {
            Ok(created) => return CheckedAccount::of(&created).ok_or_else(changed),
            Err(e) if api_error::is_already_exists(&e) => {
                self.read_owned_account(buyer_id, owner).await?
            }
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: Step::CreateAccount,
                    source,
                });
            }
        };
        match existing.as_ref().and_then(CheckedAccount::of) {
            Some(a) if a.owned => Ok(a),
            Some(unowned) => self.claim_unowned(buyer_id, owner, &unowned).await,
            // Gone again already (revoked): the buyer's retry starts over.
            None => Err(changed()),
        }
    }

    /// Records `owner` on `buyer_id`'s account of an earlier version, which
    /// has none, if it is still as `checked` saw it: of two peers claiming
    /// it at once, the second is refused.
    pub(super) async fn claim_unowned(
        &self,
        buyer_id: &str,
        owner: &str,
        checked: &CheckedAccount,
    ) -> Result<CheckedAccount, CredentialsError> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.cfg.namespace);
        let name = service_account_name(buyer_id);
        let changed = || CredentialsError::AccountChanged {
            buyer: buyer_id.to_owned(),
        };
        let mut checked = checked.clone();
        // Twice at most: a stale read, or a revocation mark written
        // meanwhile, moves the resourceVersion without a claim.
        for _ in 0..2 {
            let patch = serde_json::json!({"metadata": {
                "uid": checked.uid,
                "resourceVersion": checked.resource_version,
                "annotations": {OWNER_ANNOTATION: owner},
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(claimed) => return CheckedAccount::of(&claimed).ok_or_else(changed),
                Err(e) if api_error::is_conflict(&e) => {
                    let now = self.read_owned_account(buyer_id, owner).await?;
                    match now.as_ref().and_then(CheckedAccount::of) {
                        // Claimed by a sale of this same owner.
                        Some(a) if a.owned && a.uid == checked.uid => return Ok(a),
                        Some(a) if !a.owned && a.uid == checked.uid => checked = a,
                        _ => return Err(changed()),
                    }
                }
                Err(e) if account_changed(&e) || api_error::is_not_found(&e) => {
                    return Err(changed());
                }
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: Step::ClaimAccount,
                        source,
                    });
                }
            }
        }
        Err(changed())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn api_status(code: u16, reason: &str, uid_cause: bool) -> kube::Error {
        let causes = if uid_cause {
            serde_json::json!([{"field": "metadata.uid", "reason": "FieldValueInvalid"}])
        } else {
            serde_json::json!([])
        };
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": "refused",
            "details": {"causes": causes},
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn only_a_refusal_about_the_account_itself_says_it_changed() {
        // Gone (uid mismatch on apply) or changed since its resourceVersion.
        assert!(account_changed(&api_status(409, "Conflict", false)));
        // Another account of that name (metadata.uid is immutable).
        assert!(account_changed(&api_status(422, "Invalid", true)));
        // A name taken is not a change; an admission policy's 422 or a 400
        // is the API server's to explain, as is anything else.
        assert!(!account_changed(&api_status(409, "AlreadyExists", false)));
        assert!(!account_changed(&api_status(422, "Invalid", false)));
        assert!(!account_changed(&api_status(400, "BadRequest", false)));
        assert!(!account_changed(&api_status(403, "Forbidden", false)));
        assert!(!account_changed(&api_status(404, "NotFound", false)));
    }
}

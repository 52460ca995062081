//! Adopts or deletes the peering-credentials Secrets no Contract owns.
//!
//! A purchase writes the provider's kubeconfig to
//! `peering-credentials-<contract>` before the Contract (so a crash never
//! leaves a Contract without its credentials), then makes the Contract the
//! Secret's owner. A crash between the two writes, followed by a repeated
//! purchase the provider refuses (a Go provider forgets a sold
//! transaction), leaves a Secret holding a live token that nothing owns, so
//! the garbage collector never removes it. Every [`SWEEP_INTERVAL`], a
//! Secret of ours that has no owner and was last written more than
//! [`GRACE`] ago (far longer than the milliseconds between the two writes;
//! a purchase still being retried writes it again each time) is given to
//! its Contract when that exists, and deleted otherwise. A repeated
//! purchase that succeeds later writes it again.

use std::time::Duration;

use fluidos_api::Contract;
use fluidos_api::peering_credentials;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::MANAGER;

/// How often the sweep runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(300);
/// How old an unowned Secret must be before the sweep touches it.
pub const GRACE: Duration = Duration::from_secs(600);
/// Annotation on a credentials Secret: the Contract it is for (the Secret's
/// own name is cut and hashed when the Contract's name is long).
pub const CONTRACT_ANNOTATION: &str = "fluidos.eu/contract";
/// Annotation on a credentials Secret: when a purchase last wrote it
/// (RFC 3339). Every write changes it, so a Secret a purchase in progress
/// keeps writing is neither old enough to sweep nor deleted by a sweep that
/// read it before that write (the delete is conditional on the version).
pub const WRITTEN_AT_ANNOTATION: &str = "fluidos.eu/written-at";
/// Label the consumer puts on the objects it makes.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Names shorter than this were never cut by `peering_credentials::secret_name`.
const SURELY_UNCUT: usize = 200;
/// Prefix of a credentials Secret's name (`peering_credentials::secret_name`).
const PREFIX: &str = "peering-credentials-";

/// What the sweep did to one Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Swept {
    /// Given to its Contract, which exists.
    Adopted(String),
    /// Deleted: its Contract does not exist.
    Deleted(String),
}

/// The Contract an unowned credentials Secret of this consumer is for, when
/// the sweep should act on it: made by the consumer, named like a
/// credentials Secret, owned by nothing, and created more than `grace`
/// before `now` (pure).
pub fn unowned_contract(secret: &Secret, now: jiff::Timestamp, grace: Duration) -> Option<String> {
    let name = secret.metadata.name.as_deref()?;
    let ours = secret.labels().get(MANAGED_BY).map(String::as_str) == Some(MANAGER);
    let owned = secret
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty());
    let created = secret.metadata.creation_timestamp.as_ref()?.0;
    let written = secret
        .annotations()
        .get(WRITTEN_AT_ANNOTATION)
        .and_then(|w| w.parse::<jiff::Timestamp>().ok())
        .map_or(created, |w| w.max(created));
    let old_enough = jiff::SignedDuration::try_from(grace)
        .ok()
        .and_then(|g| written.checked_add(g).ok())
        .is_some_and(|due| due <= now);
    if !ours || owned || !old_enough {
        return None;
    }
    let contract = match secret.annotations().get(CONTRACT_ANNOTATION) {
        Some(c) => c.clone(),
        // Written before the annotation existed: the name says it, unless
        // it was cut (a cut name is 253 characters, less any dashes or
        // dots trimmed at the cut; a short one was never cut).
        None if name.len() < SURELY_UNCUT => name.strip_prefix(PREFIX)?.to_owned(),
        None => return None,
    };
    (peering_credentials::secret_name(&contract) == name).then_some(contract)
}

/// One sweep of `ns`; what it changed. A Secret written again meanwhile (a
/// repeated purchase) is left alone: the delete is conditional on the
/// version the sweep read.
pub async fn sweep_once(
    client: &kube::Client,
    ns: &str,
    grace: Duration,
) -> Result<Vec<Swept>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let contracts: Api<Contract> = Api::namespaced(client.clone(), ns);
    let listed = secrets
        .list(&ListParams::default().labels(&format!("{MANAGED_BY}={MANAGER}")))
        .await?;
    let now = jiff::Timestamp::now();
    let mut swept = Vec::new();
    for secret in listed {
        let Some(contract) = unowned_contract(&secret, now, grace) else {
            continue;
        };
        let name = secret.name_any();
        match contracts.get_opt(&contract).await? {
            Some(c) => {
                let Some(uid) = c.uid() else { continue };
                give_to_contract(&secrets, &name, &contract, &uid).await?;
                tracing::info!(secret = %name, %contract, "gave an unowned credentials Secret to its Contract");
                swept.push(Swept::Adopted(name));
            }
            None => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: secret.uid(),
                        resource_version: secret.resource_version(),
                    }),
                    ..DeleteParams::default()
                };
                match secrets.delete(&name, &params).await {
                    Ok(_) => {
                        tracing::info!(secret = %name, %contract,
                            "deleted a credentials Secret whose Contract was never stored");
                        swept.push(Swept::Deleted(name));
                    }
                    // Gone, or written again since it was read.
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(swept)
}

/// Makes the Contract `contract` (UID `uid`) the owner of the credentials
/// Secret `secret`, by a strategic merge patch of `ownerReferences` alone
/// (so the Secret's next apply, which names no owner, never takes it away).
pub(crate) async fn give_to_contract(
    secrets: &Api<Secret>,
    secret: &str,
    contract: &str,
    uid: &str,
) -> Result<(), kube::Error> {
    let owner = peering_credentials::owner_reference(contract, uid);
    secrets
        .patch(
            secret,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"ownerReferences": [owner]}})),
        )
        .await
        .map(|_| ())
}

/// Sweeps `ns` every [`SWEEP_INTERVAL`], forever; failures are logged and
/// the next round tries again.
pub async fn run(client: kube::Client, ns: String) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = sweep_once(&client, &ns, GRACE).await {
            tracing::warn!(error = %e, "sweeping unowned credentials Secrets");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    const NOW: i64 = 1_800_000_000;

    fn secret(name: &str, age_s: i64) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some([(MANAGED_BY.to_owned(), MANAGER.to_owned())].into()),
                creation_timestamp: Some(Time(jiff::Timestamp::from_second(NOW - age_s).unwrap())),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn verdict(s: &Secret) -> Option<String> {
        unowned_contract(s, jiff::Timestamp::from_second(NOW).unwrap(), GRACE)
    }

    #[test]
    fn only_old_unowned_credentials_secrets_of_ours_are_swept() {
        let old = 700;
        assert_eq!(
            verdict(&secret("peering-credentials-contract-1", old)).as_deref(),
            Some("contract-1")
        );
        // Within the grace period: the purchase may be between its writes.
        assert_eq!(verdict(&secret("peering-credentials-contract-1", 30)), None);
        // Created long ago but written again lately (a purchase retried).
        let mut rewritten = secret("peering-credentials-contract-1", old);
        rewritten.annotations_mut().insert(
            WRITTEN_AT_ANNOTATION.to_owned(),
            jiff::Timestamp::from_second(NOW - 30).unwrap().to_string(),
        );
        assert_eq!(verdict(&rewritten), None);
        // Owned already.
        let mut owned = secret("peering-credentials-contract-1", old);
        owned.metadata.owner_references = Some(vec![peering_credentials::owner_reference(
            "contract-1",
            "u",
        )]);
        assert_eq!(verdict(&owned), None);
        // Not ours, or not a credentials Secret.
        let mut theirs = secret("peering-credentials-contract-1", old);
        theirs.metadata.labels = None;
        assert_eq!(verdict(&theirs), None);
        assert_eq!(verdict(&secret("credentials-contract-1", old)), None);
        // A long Contract name: the annotation names it, and must match.
        let long = "c".repeat(250);
        let mut cut = secret(&peering_credentials::secret_name(&long), old);
        assert_eq!(verdict(&cut), None, "a cut name says nothing by itself");
        cut.annotations_mut()
            .insert(CONTRACT_ANNOTATION.to_owned(), long.clone());
        assert_eq!(verdict(&cut), Some(long));
        let mut lying = secret("peering-credentials-contract-1", old);
        lying
            .annotations_mut()
            .insert(CONTRACT_ANNOTATION.to_owned(), "contract-2".to_owned());
        assert_eq!(verdict(&lying), None);
    }
}

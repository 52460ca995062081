//! The executor of the Go consumer's grant
//! ([`crate::go_grant`]): its cluster-wide objects and
//! admission policy applied at start, the cluster ID claimed per account,
//! and the tenant namespace the Go consumer makes adopted when it appears.

use crate::go_grant;
use crate::grant::{
    ACCOUNT_UID_ANNOTATION, MANAGED_LABEL, liqo_peering_user_rules, namespace_buyer,
    service_account_name, with_type,
};
use fluidos_controller::api_error;
use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use std::time::{Duration, Instant};

use super::step::Step;
use super::{Credentials, CredentialsError, FIELD_MANAGER, apply_rbac};

/// How long a Go consumer's purchase waits for the Go grant's admission
/// policy to be applied (at the gateway's start) before it is answered 503.
pub(super) const GO_GUARD_WAIT: Duration = Duration::from_secs(10);

impl Credentials {
    /// The Go consumers' claims, as the watch of the peer accounts sees them.
    pub(super) fn go_claims(&self) -> Vec<go_grant::Claim> {
        self.accounts
            .state()
            .iter()
            .filter_map(|sa| go_grant::Claim::of(sa))
            .collect()
    }

    /// Whether `buyer_id`'s account claims `cluster_id` for a Go consumer
    /// (as the watch sees it).
    pub fn has_go_claim(&self, buyer_id: &str, cluster_id: &str) -> bool {
        self.accounts
            .get(&ObjectRef::new(&service_account_name(buyer_id)).within(&self.cfg.namespace))
            .as_deref()
            .and_then(go_grant::Claim::of)
            .is_some_and(|c| c.buyer == buyer_id && c.cluster_id == cluster_id)
    }

    /// Refuses an unmodified Go consumer's claim on `cluster_id` when
    /// another buyer's account claims it, or when its tenant namespace
    /// exists and is not this buyer's (made outside FLUIDOS, or another
    /// buyer's). A namespace made after this buyer's earlier claim and not
    /// adopted yet counts as this buyer's.
    pub(super) async fn check_go_claim(
        &self,
        buyer_id: &str,
        cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        let ns = format!("{}{cluster_id}", go_grant::TENANT_PREFIX);
        let taken = || CredentialsError::TenantTaken {
            namespace: ns.clone(),
        };
        let claims: Vec<go_grant::Claim> = self
            .go_claims()
            .into_iter()
            .filter(|c| c.cluster_id == cluster_id)
            .collect();
        if claims.iter().any(|c| c.buyer != buyer_id) {
            return Err(taken());
        }
        let existing = self.read_tenant_namespace(&ns).await?;
        let Some(existing) = existing else {
            return Ok(());
        };
        match namespace_buyer(&existing) {
            Some(b) if b == buyer_id => Ok(()),
            // Made by this buyer's Go consumer after its earlier claim, and
            // not adopted yet: never one managed by anyone (this node's own
            // peering's holds its Liqo credentials).
            None if go_grant::may_adopt(&existing)
                && claims.iter().any(|c| c.made_after_claim(&existing)) =>
            {
                Ok(())
            }
            _ => Err(taken()),
        }
    }

    /// Grants an unmodified Go consumer its peering rights
    /// ([`go_grant`]): the cluster-wide ClusterRole and the Role in
    /// Liqo's namespace, and, if it made its tenant namespace already, the
    /// namespace and the peer Role there. Its account must carry the claim
    /// (`Credentials::ensure_rbac`) and the admission policy must be in
    /// place: without it, nothing is granted.
    pub async fn grant_go_consumer(
        &self,
        buyer_id: &str,
        sa_uid: &str,
        cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        // Right after the gateway starts the guard may still be on its way.
        let mut guard = self.go_guard.subscribe();
        if !matches!(
            tokio::time::timeout(GO_GUARD_WAIT, guard.wait_for(|applied| *applied)).await,
            Ok(Ok(_))
        ) {
            return Err(CredentialsError::GoPeeringGuardNotReady);
        }
        let sa = service_account_name(buyer_id);
        // An earlier FLUIDOS-rs sale to this account bound it there under
        // the same name; the Go Role lists the Networks too.
        self.unbind_network_role(&sa).await?;
        self.bind_account(
            Some(go_grant::LIQO_NAMESPACE),
            go_grant::LIQO_ROLE,
            &sa,
            sa_uid,
            buyer_id,
        )
        .await?;
        self.bind_account(None, go_grant::CLUSTER_ROLE, &sa, sa_uid, buyer_id)
            .await?;
        let ns = format!("{}{cluster_id}", go_grant::TENANT_PREFIX);
        match self.read_tenant_namespace(&ns).await? {
            None => {}
            // Already this buyer's: adopted before if bound there (an
            // adoption binds only after it looked for this node's peering).
            Some(n) if namespace_buyer(&n) == Some(buyer_id) => {
                // (A list by name: the gateway may list RoleBindings, not get them.)
                let bound = !Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
                    .list_metadata(&ListParams::default().fields(&format!("metadata.name={sa}")))
                    .await
                    .map_err(|source| CredentialsError::Kube {
                        step: Step::ReadGoConsumerBinding,
                        source,
                    })?
                    .items
                    .is_empty();
                self.adopt_go_namespace(&ns, (&sa, sa_uid), buyer_id, bound)
                    .await?;
            }
            // Its Go consumer's, not yet adopted (made since its claim:
            // `check_go_claim`).
            Some(n) if go_grant::may_adopt(&n) => {
                self.adopt_go_namespace(&ns, (&sa, sa_uid), buyer_id, false)
                    .await?;
            }
            // Managed by someone else meanwhile (this node's own peering).
            Some(_) => return Err(CredentialsError::TenantTaken { namespace: ns }),
        }
        Ok(())
    }

    /// Adopts the Go consumer's tenant namespace `ns` for `buyer_id` and
    /// binds the peer Role there for its account `sa`.
    pub(super) async fn adopt_go_namespace(
        &self,
        ns: &str,
        (sa, sa_uid): (&str, &str),
        buyer_id: &str,
        adopted_before: bool,
    ) -> Result<(), CredentialsError> {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .patch(
                ns,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(go_grant::adoption_patch(ns, buyer_id)),
            )
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::AdoptGoNamespace,
                source,
            })?;
        // Labelled first, then looked into: this node's own peering writes
        // its signed nonce there before it reads the namespace again (and
        // refuses a Go consumer's), so one of the two sees the other, and a
        // Go consumer's rights, which list Secrets, never reach this node's
        // Liqo credentials.
        // Adopted before (bound then, when none of this node's peering was
        // there): the labels stay, so this node's peering, which reads them
        // before it writes its credentials, refuses to go on there.
        if !adopted_before && self.holds_own_peering(ns).await? {
            tracing::warn!(
                namespace = ns,
                buyer = buyer_id,
                "not adopting a Go consumer's Liqo tenant namespace: this node's own peering with that cluster is there"
            );
            // The apply drops this manager's labels and annotations but
            // this mark, which keeps the namespace from being taken again.
            Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
                .patch(
                    ns,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(go_grant::refusal_patch(ns)),
                )
                .await
                .map_err(|source| CredentialsError::Kube {
                    step: Step::GiveBackNamespace,
                    source,
                })?;
            return Err(CredentialsError::TenantTaken {
                namespace: ns.to_owned(),
            });
        }
        self.bind_peer_rules(ns, liqo_peering_user_rules(), sa, sa_uid, buyer_id)
            .await
    }

    /// Whether the tenant namespace `ns` holds this node's own peering with
    /// its cluster (as that cluster's consumer): the signed nonce or the
    /// control-plane kubeconfig Liqo writes for it.
    pub(super) async fn holds_own_peering(&self, ns: &str) -> Result<bool, CredentialsError> {
        let cluster = ns.strip_prefix(go_grant::TENANT_PREFIX).unwrap_or(ns);
        let secrets =
            Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), ns);
        for name in [
            "liqo-signed-nonce".to_owned(),
            format!("kubeconfig-controlplane-{cluster}"),
        ] {
            let found =
                secrets
                    .get_metadata_opt(&name)
                    .await
                    .map_err(|source| CredentialsError::Kube {
                        step: Step::FindOwnPeering,
                        source,
                    })?;
            if found.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Applies the Go-consumer grant's ClusterRole, Role and admission
    /// policy with its binding.
    pub(super) async fn apply_go_guard(&self) -> Result<(), CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let kube = |step: Step| move |source| CredentialsError::Kube { step, source };
        let (policy, binding) = go_grant::admission_policy(&self.cfg.namespace);
        let name = go_grant::policy_name(&self.cfg.namespace);
        let admission = "admissionregistration.k8s.io/v1";
        // The policy first: the rights it confines are granted only after.
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
            self.client.clone(),
        )
        .patch(
            &name,
            &pp,
            &Patch::Apply(with_type(&policy, admission, "ValidatingAdmissionPolicy")),
        )
        .await
        .map_err(kube(Step::ApplyGoPolicy))?;
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
            self.client.clone(),
        )
        .patch(
            &name,
            &pp,
            &Patch::Apply(with_type(
                &binding,
                admission,
                "ValidatingAdmissionPolicyBinding",
            )),
        )
        .await
        .map_err(kube(Step::ApplyGoPolicyBinding))?;
        apply_rbac(
            Api::<ClusterRole>::all(self.client.clone()),
            go_grant::CLUSTER_ROLE,
            &go_grant::cluster_role(),
            "ClusterRole",
        )
        .await
        .map_err(kube(Step::ApplyGoClusterRole))?;
        apply_rbac(
            Api::<Role>::namespaced(self.client.clone(), go_grant::LIQO_NAMESPACE),
            go_grant::LIQO_ROLE,
            &go_grant::liqo_role(),
            "Role",
        )
        .await
        .map_err(kube(Step::ApplyGoLiqoRole))?;
        self.wait_go_guard_enforced().await
    }

    /// Waits until the API server enforces the Go peers' admission policy
    /// (it loads policies and bindings asynchronously; rights granted before
    /// would be unconfined): its probe, a dry-run creation the policy
    /// refuses, is refused. Nothing here can be watched, so it asks again
    /// every 100 ms, for at most a minute.
    pub(super) async fn wait_go_guard_enforced(&self) -> Result<(), CredentialsError> {
        let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            self.client.clone(),
            &self.cfg.namespace,
        );
        let mut probe = k8s_openapi::api::core::v1::Secret::default();
        probe.metadata.name = Some(go_grant::PROBE_SECRET.to_owned());
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let policy = go_grant::policy_name(&self.cfg.namespace);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match secrets.create(&dry_run, &probe).await {
                // Refused by the policy: by its probe check, or, while no
                // peer account exists, for want of a parameter.
                Err(kube::Error::Api(e))
                    if (e.code == 403 || e.code == 422) && e.message.contains(&policy) =>
                {
                    tracing::info!(policy = %policy, waited = ?(Instant::now() + Duration::from_secs(60) - deadline), "the Go peers' admission policy is enforced");
                    return Ok(());
                }
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(_) => {
                    return Err(CredentialsError::GoPeeringGuardNotReady);
                }
                Err(source) => {
                    return Err(CredentialsError::Kube {
                        step: Step::ProbeGoPolicy,
                        source,
                    });
                }
            }
        }
    }

    /// Runs the Go-consumer grant while the gateway runs: applies its
    /// cluster-wide objects (again every 30 s until that succeeds), then
    /// adopts each Liqo tenant namespace a Go consumer creates for the one
    /// buyer that claimed its cluster ID, binding the peer Role there (the
    /// Go consumer's first read in it comes 5 s after it made it). Returns
    /// at once when the grant is off.
    pub async fn run_go_peering(&self) {
        use k8s_openapi::api::core::v1::Namespace;
        if !self.cfg.go_peering {
            return;
        }
        loop {
            match self.apply_go_guard().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "the Go consumers' peering grant cannot be set up; their K8Slice purchases answer 503 until it is (retrying in 30 s)");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
        self.go_guard.send_replace(true);
        let namespaces = watcher(
            Api::<Namespace>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects();
        futures::pin_mut!(namespaces);
        while let Some(event) = namespaces.next().await {
            let ns = match event {
                Ok(ns) => ns,
                Err(e) => {
                    tracing::warn!(error = %e, "watching namespaces for Go consumers' tenant namespaces");
                    continue;
                }
            };
            let name = ns.name_any();
            let Some(cluster) = go_grant::cluster_of_namespace(&name) else {
                continue;
            };
            if !go_grant::may_adopt(&ns) {
                continue;
            }
            let claims = self.go_claims();
            let Some(claim) = go_grant::sole_claimant(&claims, cluster) else {
                continue;
            };
            if !claim.made_after_claim(&ns) {
                // Made before the claim (e.g. this node's own tenant
                // namespace of a provider it buys from): not the buyer's.
                tracing::warn!(namespace = %name, buyer = %claim.buyer, "a Go consumer claims a Liqo tenant namespace made before its claim; not adopted");
                continue;
            }
            match self
                .adopt_go_namespace(&name, (&claim.account, &claim.uid), &claim.buyer, false)
                .await
            {
                Ok(()) => {
                    tracing::info!(namespace = %name, buyer = %claim.buyer, "adopted a Go consumer's Liqo tenant namespace")
                }
                Err(e) => {
                    tracing::warn!(namespace = %name, error = %e, "cannot adopt a Go consumer's Liqo tenant namespace")
                }
            }
        }
    }

    /// Deletes the Go peer ClusterRoleBinding of the account `sa` (UID
    /// `uid`), if this node made it for that account.
    pub(super) async fn unbind_go_consumer(
        &self,
        sa: &str,
        uid: &str,
    ) -> Result<(), CredentialsError> {
        let api = Api::<ClusterRoleBinding>::all(self.client.clone());
        let found = api
            .get_opt(sa)
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::ReadGoClusterRoleBinding,
                source,
            })?;
        let Some(binding) = found else {
            return Ok(());
        };
        let ours = binding.labels().get(MANAGED_LABEL.0).map(String::as_str)
            == Some(MANAGED_LABEL.1)
            && binding
                .annotations()
                .get(ACCOUNT_UID_ANNOTATION)
                .is_none_or(|u| u == uid);
        if !ours {
            return Ok(());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: binding.uid(),
                resource_version: binding.resource_version(),
            }),
            ..Default::default()
        };
        match api.delete(sa, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => Ok(()),
            Err(source) => Err(CredentialsError::Kube {
                step: Step::DeleteGoClusterRoleBinding,
                source,
            }),
        }
    }
}

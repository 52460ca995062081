//! The K8Slice grant: the buyer's Liqo tenant namespace claimed (made, or
//! taken when it is the buyer's), the peer Role bound there, and the
//! reading of this cluster's CIDRs bound in Liqo's namespace; each grant
//! in force before it is handed out.

use crate::grant::{
    Grantee, MANAGED_LABEL, OWNER_ANNOTATION, PEER_NETWORK_ROLE, PEER_ROLE, binds, buyer_marks,
    namespace_buyer, network_grant_is_current, peer_network_role, peer_role, peer_rules,
    service_account_name, tenant_grant_is_current, valid_cluster_id, with_type,
};
use crate::{effective_grant, go_grant};
use fluidos_controller::api_error;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::step::Step;
use super::{Credentials, CredentialsError, FIELD_MANAGER, apply_rbac};

impl Credentials {
    /// Creates `ns` for `buyer_id`, or accepts it when this node already
    /// made it for that buyer. The cluster ID is the buyer's word: without
    /// this check, a buyer naming another peer's cluster ID would be bound
    /// into that peer's tenant namespace (and would take over its labels).
    pub(super) async fn claim_tenant_namespace(
        &self,
        ns: &str,
        buyer_id: &str,
        owner: &str,
        buyer_cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        let api = Api::<Namespace>::all(self.client.clone());
        // The buyer ID and, once recorded, the key: after a revocation
        // another key buying with that buyer ID is not bound into the
        // namespace its first owner's Liqo objects may still be in.
        // Not a Go consumer's (adopted with Liqo's wider rules, which a
        // FLUIDOS-rs buyer's grant would narrow under it).
        let ours = |n: &Namespace| {
            namespace_buyer(n) == Some(buyer_id)
                && n.annotations()
                    .get(OWNER_ANNOTATION)
                    .is_none_or(|o| o == owner)
                && !n.labels().contains_key(go_grant::NAMESPACE_LABEL)
        };
        let taken = || CredentialsError::TenantTaken {
            namespace: ns.to_owned(),
        };
        // A Go consumer's claim holds the namespace before it exists (it
        // creates it itself).
        if self
            .go_claims()
            .iter()
            .any(|c| c.cluster_id == buyer_cluster_id && c.buyer != buyer_id)
        {
            return Err(taken());
        }
        let existing = self.read_tenant_namespace(ns).await?;
        if let Some(existing) = existing {
            if !ours(&existing) {
                return Err(taken());
            }
            // Made by an earlier version: the owner recorded now (this
            // node's own peering checks it before using the namespace).
            self.record_namespace_owner(ns, owner).await?;
            return Ok(());
        }
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.to_owned()),
                labels: Some(
                    [
                        (
                            "liqo.io/remote-cluster-id".to_owned(),
                            buyer_cluster_id.to_owned(),
                        ),
                        ("liqo.io/tenant-namespace".to_owned(), "true".to_owned()),
                        (MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned()),
                    ]
                    .into(),
                ),
                // The owner too: this node, buying from the cluster of that
                // ID itself, peers in this namespace only if its seller is
                // that owner (fluidos-peering checks it).
                annotations: Some(buyer_marks(buyer_id, owner)),
                ..Default::default()
            },
            ..Default::default()
        };
        match api
            .create(&kube::api::PostParams::default(), &namespace)
            .await
        {
            Ok(_) => Ok(()),
            // Made concurrently: ours only if by the same buyer.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = self.read_tenant_namespace(ns).await?;
                if existing.as_ref().is_some_and(ours) {
                    Ok(())
                } else {
                    Err(taken())
                }
            }
            Err(source) => Err(CredentialsError::Kube {
                step: Step::CreateTenantNamespace,
                source,
            }),
        }
    }

    /// Lets the buyer's ServiceAccount authenticate with this cluster's Liqo:
    /// pre-creates Liqo's tenant namespace for the buyer's Liqo cluster ID
    /// (`liqo-tenant-<id>`, labelled as Liqo finds it; a peering user may not
    /// create namespaces) and binds the peer rules ([`peer_rules`]) there, in
    /// that one namespace only; and lets it read this cluster's CIDRs in
    /// Liqo's namespace (`Credentials::grant_liqo_networks`). Idempotent.
    pub async fn grant_tenant_namespace(
        &self,
        buyer_id: &str,
        owner: &str,
        sa_uid: &str,
        buyer_cluster_id: &str,
    ) -> Result<(), CredentialsError> {
        if !valid_cluster_id(buyer_cluster_id) {
            tracing::warn!(
                buyer = buyer_id,
                cluster_id = buyer_cluster_id,
                "the buyer's Liqo cluster ID is not a DNS label: no tenant namespace granted"
            );
            return Ok(());
        }
        let ns = format!("liqo-tenant-{buyer_cluster_id}");
        let sa = service_account_name(buyer_id);
        let rules = peer_rules(buyer_cluster_id);
        if tenant_grant_is_current(
            (
                self.roles
                    .get(&ObjectRef::new(PEER_ROLE).within(&ns))
                    .as_deref(),
                &rules,
            ),
            self.bindings
                .get(&ObjectRef::new(&sa).within(&ns))
                .as_deref(),
            buyer_id,
            &sa,
            sa_uid,
            &self.cfg.namespace,
        ) {
            // The tenant namespace is this buyer's (a binding of ours there
            // exists only after the claim), so the CIDRs may be granted. A
            // namespace made by an earlier version gets its owner recorded.
            self.record_namespace_owner(&ns, owner).await?;
            return self.grant_liqo_networks(&sa, sa_uid, buyer_id).await;
        }
        // The claim first: a buyer stating another peer's cluster ID gets
        // nothing at all. Then both grants at once (independent objects).
        self.claim_tenant_namespace(&ns, buyer_id, owner, buyer_cluster_id)
            .await?;
        tokio::try_join!(
            self.bind_peer_rules(&ns, rules, &sa, sa_uid, buyer_id),
            self.grant_liqo_networks(&sa, sa_uid, buyer_id)
        )
        .map(|_| ())
    }

    /// Lets the buyer's ServiceAccount `sa` (UID `sa_uid`) read this
    /// cluster's pod and external CIDRs, which a consumer's Liqo networking
    /// phase needs (as Liqo's `liqo-peering-user-liqo-ns` grants): applies the
    /// Role [`PEER_NETWORK_ROLE`] in Liqo's namespace and binds the account to
    /// it there. Nothing is written while the watch caches show the grant in
    /// place, or the account's Go-consumer binding there (it lists the
    /// Networks too, and a RoleBinding's role cannot change). Without Liqo's
    /// namespace (no Liqo here, so nothing to peer with), or without the
    /// rights to write the Role (a gateway deployed without peering), it
    /// logs and grants nothing: the sale goes on, its tenant grant suffices
    /// for a peering without networking.
    pub(super) async fn grant_liqo_networks(
        &self,
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let ns = go_grant::LIQO_NAMESPACE;
        let binding = self.bindings.get(&ObjectRef::new(sa).within(ns));
        let binding = binding.as_deref();
        let sa_namespace = self.cfg.namespace.as_str();
        if binding
            .is_some_and(|b| binds(b, go_grant::LIQO_ROLE, buyer_id, sa, sa_uid, sa_namespace))
            || network_grant_is_current(
                self.roles
                    .get(&ObjectRef::new(PEER_NETWORK_ROLE).within(ns))
                    .as_deref(),
                binding,
                buyer_id,
                sa,
                sa_uid,
                sa_namespace,
            )
        {
            return Ok(());
        }
        // Asked first when the Role is not there yet: a write into a
        // namespace that does not exist waits 50 ms in the API server's
        // namespace admission before it is refused, a read does not.
        if self
            .roles
            .get(&ObjectRef::new(PEER_NETWORK_ROLE).within(ns))
            .is_none()
            && !self.namespace_may_exist(ns).await?
        {
            tracing::info!(
                buyer = buyer_id,
                namespace = ns,
                "no Liqo namespace on this cluster: the buyer is not granted its CIDRs"
            );
            return Ok(());
        }
        let role = peer_network_role();
        match apply_rbac(
            Api::<Role>::namespaced(self.client.clone(), ns),
            PEER_NETWORK_ROLE,
            &role,
            "Role",
        )
        .await
        {
            Ok(()) => {}
            Err(e) if api_error::is_not_found(&e) => {
                tracing::info!(
                    buyer = buyer_id,
                    namespace = ns,
                    "no Liqo namespace on this cluster: the buyer is not granted its CIDRs"
                );
                return Ok(());
            }
            Err(e) if api_error::is_forbidden(&e) => {
                tracing::warn!(
                    buyer = buyer_id,
                    namespace = ns,
                    error = %e,
                    "the gateway may not grant the reading of Liqo's Networks (it must hold get and list of networks.ipam.liqo.io there): the buyer's Liqo networking will fail"
                );
                return Ok(());
            }
            Err(source) => {
                return Err(CredentialsError::Kube {
                    step: Step::ApplyNetworkRole,
                    source,
                });
            }
        }
        self.bind_account(Some(ns), PEER_NETWORK_ROLE, sa, sa_uid, buyer_id)
            .await?;
        self.wait_in_force(ns, sa, "ipam.liqo.io", "networks", "get")
            .await;
        Ok(())
    }

    /// Waits until the API server authorizes the grant just written (see
    /// [`effective_grant`]): a peer handed its kubeconfig before would see
    /// 403s. Best effort, never fails.
    pub(super) async fn wait_in_force(
        &self,
        ns: &str,
        sa: &str,
        group: &str,
        resource: &str,
        verb: &str,
    ) {
        effective_grant::wait_in_force(
            &self.client,
            effective_grant::Access {
                account_namespace: &self.cfg.namespace,
                account: sa,
                namespace: ns,
                group,
                resource,
                verb,
            },
        )
        .await;
    }

    /// False when the namespace `ns` does not exist or is being deleted;
    /// true when it does, or when this node may not read it (the write
    /// that follows says).
    pub(super) async fn namespace_may_exist(&self, ns: &str) -> Result<bool, CredentialsError> {
        match Api::<Namespace>::all(self.client.clone()).get_opt(ns).await {
            Ok(found) => Ok(found.is_some_and(|n| n.metadata.deletion_timestamp.is_none())),
            Err(e) if api_error::is_forbidden(&e) => Ok(true),
            Err(source) => Err(CredentialsError::Kube {
                step: Step::ReadLiqoNamespace,
                source,
            }),
        }
    }

    /// Deletes this node's binding named `sa` to [`PEER_NETWORK_ROLE`] in
    /// Liqo's namespace, if the watch cache shows one (of this account or
    /// of an earlier one of the same name): an unmodified Go consumer's
    /// binding there has the same name and another role, which a
    /// RoleBinding cannot change.
    pub(super) async fn unbind_network_role(&self, sa: &str) -> Result<(), CredentialsError> {
        let ns = go_grant::LIQO_NAMESPACE;
        // The cache holds only bindings with this node's label.
        let Some(binding) = self.bindings.get(&ObjectRef::new(sa).within(ns)) else {
            return Ok(());
        };
        if binding.role_ref.kind != "Role" || binding.role_ref.name != PEER_NETWORK_ROLE {
            return Ok(());
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: binding.uid(),
                resource_version: binding.resource_version(),
            }),
            ..Default::default()
        };
        match Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .delete(sa, &dp)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if api_error::is_not_found(&e) || api_error::is_conflict(&e) => Ok(()),
            Err(source) => Err(CredentialsError::Kube {
                step: Step::DeleteNetworkBinding,
                source,
            }),
        }
    }

    /// Server-side applies the peer Role of `rules` in `ns` and binds the
    /// buyer's ServiceAccount `sa` to it.
    pub(super) async fn bind_peer_rules(
        &self,
        ns: &str,
        rules: Vec<PolicyRule>,
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let role = peer_role(ns, rules);
        Api::<Role>::namespaced(self.client.clone(), ns)
            .patch(
                PEER_ROLE,
                &pp,
                &Patch::Apply(with_type(&role, "rbac.authorization.k8s.io/v1", "Role")),
            )
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::ApplyPeerRole,
                source,
            })?;
        self.bind_account(Some(ns), PEER_ROLE, sa, sa_uid, buyer_id)
            .await?;
        // Liqo's peering user first creates its nonce Secret there.
        self.wait_in_force(ns, sa, "", "secrets", "create").await;
        Ok(())
    }

    /// Server-side applies the binding named `sa` of the buyer's
    /// ServiceAccount `sa` to `role`: a RoleBinding to the Role `role` in
    /// `namespace`, or a ClusterRoleBinding to the ClusterRole `role`
    /// without one.
    pub(super) async fn bind_account(
        &self,
        namespace: Option<&str>,
        role: &str,
        sa: &str,
        sa_uid: &str,
        buyer_id: &str,
    ) -> Result<(), CredentialsError> {
        let account = Grantee {
            name: sa,
            namespace: &self.cfg.namespace,
            uid: sa_uid,
            buyer_id,
        };
        let applied = match namespace {
            Some(ns) => {
                apply_rbac(
                    Api::namespaced(self.client.clone(), ns),
                    sa,
                    &account.role_binding(ns, role),
                    "RoleBinding",
                )
                .await
            }
            None => {
                apply_rbac(
                    Api::all(self.client.clone()),
                    sa,
                    &account.cluster_role_binding(role),
                    "ClusterRoleBinding",
                )
                .await
            }
        };
        applied.map_err(|source| CredentialsError::Kube {
            step: if namespace.is_some() {
                Step::ApplyBinding
            } else {
                Step::ApplyGoClusterRoleBinding
            },
            source,
        })
    }

    /// The Liqo tenant namespace `ns`, if it exists.
    /// Records `owner` on the tenant namespace `ns` if it names none.
    pub(super) async fn record_namespace_owner(
        &self,
        ns: &str,
        owner: &str,
    ) -> Result<(), CredentialsError> {
        let Some(existing) = self.read_tenant_namespace(ns).await? else {
            return Ok(());
        };
        if existing.annotations().contains_key(OWNER_ANNOTATION) {
            return Ok(());
        }
        match Api::<Namespace>::all(self.client.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(
                    serde_json::json!({"metadata": {"annotations": {OWNER_ANNOTATION: owner}}}),
                ),
            )
            .await
        {
            Ok(_) => Ok(()),
            // The rear-manager issuing for sellers may not patch namespaces
            // (the chart grants it no such right): a namespace an earlier
            // version made keeps no owner until the gateway records it.
            Err(e) if api_error::is_forbidden(&e) => {
                tracing::info!(
                    namespace = ns,
                    "not allowed to record the owner of a Liqo tenant namespace made by an earlier version; the REAR gateway records it"
                );
                Ok(())
            }
            Err(source) => Err(CredentialsError::Kube {
                step: Step::RecordNamespaceOwner,
                source,
            }),
        }
    }

    pub(super) async fn read_tenant_namespace(
        &self,
        ns: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::Namespace>, CredentialsError> {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
            .get_opt(ns)
            .await
            .map_err(|source| CredentialsError::Kube {
                step: Step::ReadTenantNamespace,
                source,
            })
    }
}

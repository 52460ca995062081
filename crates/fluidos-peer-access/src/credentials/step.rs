//! The calls the credentials executor makes, each named once: an error
//! says which failed ([`super::CredentialsError::Kube`]), in the words
//! operators read in the gateway's answers and logs.

/// A call of the credentials executor to the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum Step {
    #[strum(to_string = "applying the peer ServiceAccount")]
    ApplyAccount,
    #[strum(to_string = "cancelling a pending revocation of the peer ServiceAccount")]
    CancelRevocation,
    #[strum(to_string = "reading the peer ServiceAccount")]
    ReadAccount,
    #[strum(to_string = "creating the peer ServiceAccount")]
    CreateAccount,
    #[strum(to_string = "claiming the peer ServiceAccount")]
    ClaimAccount,
    #[strum(to_string = "reading the Go consumer's binding in its tenant namespace")]
    ReadGoConsumerBinding,
    #[strum(to_string = "adopting the Go consumer's Liqo tenant namespace")]
    AdoptGoNamespace,
    #[strum(to_string = "giving back a Liqo tenant namespace this node peers in")]
    GiveBackNamespace,
    #[strum(to_string = "looking for this node's own peering in a Liqo tenant namespace")]
    FindOwnPeering,
    #[strum(to_string = "probing the Go peers' admission policy (a dry-run Secret creation)")]
    ProbeGoPolicy,
    #[strum(to_string = "reading the Go peer ClusterRoleBinding")]
    ReadGoClusterRoleBinding,
    #[strum(to_string = "deleting the Go peer ClusterRoleBinding")]
    DeleteGoClusterRoleBinding,
    #[strum(to_string = "applying the Go peers' admission policy")]
    ApplyGoPolicy,
    #[strum(to_string = "applying the Go peers' admission policy binding")]
    ApplyGoPolicyBinding,
    #[strum(to_string = "applying the Go peers' ClusterRole")]
    ApplyGoClusterRole,
    #[strum(to_string = "applying the Go peers' Role in Liqo's namespace")]
    ApplyGoLiqoRole,
    #[strum(to_string = "listing the peer RoleBindings")]
    ListBindings,
    #[strum(to_string = "deleting a peer RoleBinding")]
    DeleteBinding,
    #[strum(to_string = "deleting the peer ServiceAccount")]
    DeleteAccount,
    #[strum(to_string = "creating the buyer's Liqo tenant namespace")]
    CreateTenantNamespace,
    #[strum(
        to_string = "applying the peer Role in Liqo's namespace (this node's account, the REAR gateway's or the rear-manager's, needs get and list of networks.ipam.liqo.io there)"
    )]
    ApplyNetworkRole,
    #[strum(to_string = "reading Liqo's namespace")]
    ReadLiqoNamespace,
    #[strum(to_string = "deleting the peer's Networks RoleBinding in Liqo's namespace")]
    DeleteNetworkBinding,
    #[strum(
        to_string = "applying the peer Role (this node's account, the REAR gateway's or the rear-manager's, needs the rules it grants, or `bind`/`escalate`)"
    )]
    ApplyPeerRole,
    #[strum(to_string = "recording the owner of the buyer's Liqo tenant namespace")]
    RecordNamespaceOwner,
    #[strum(to_string = "reading the buyer's Liqo tenant namespace")]
    ReadTenantNamespace,
    #[strum(to_string = "requesting a ServiceAccount token (TokenRequest API)")]
    RequestToken,
    #[strum(to_string = "applying the peer RoleBinding")]
    ApplyBinding,
    #[strum(to_string = "applying the Go peer ClusterRoleBinding")]
    ApplyGoClusterRoleBinding,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_reads_as_its_own_text() {
        use strum::IntoEnumIterator;
        let texts: Vec<String> = Step::iter().map(|s| s.to_string()).collect();
        assert!(
            texts
                .iter()
                .all(|t| !t.is_empty() && t.chars().next().is_some_and(char::is_lowercase))
        );
        let mut unique = texts.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), texts.len(), "two steps read alike: {texts:?}");
        // The texts operators (and their alerts) have read in errors since
        // before they were typed; the account named since the rear-manager
        // issues too.
        assert_eq!(
            Step::ApplyAccount.to_string(),
            "applying the peer ServiceAccount"
        );
        assert_eq!(
            Step::RequestToken.to_string(),
            "requesting a ServiceAccount token (TokenRequest API)"
        );
        assert_eq!(
            Step::ApplyPeerRole.to_string(),
            "applying the peer Role (this node's account, the REAR gateway's or the rear-manager's, needs the rules it grants, or `bind`/`escalate`)"
        );
    }
}

//! What the node made outside its chart, found by its labels and deleted
//! once no component of the node runs (one still running would put its
//! admission policies straight back).
//!
//! Each component labels what it writes with `app.kubernetes.io/managed-by`:
//! the peer guard's admission policies (`fluidos-node`), the REAR gateway's
//! peer accounts, grants, Go-consumer policy and tenant namespaces
//! (`fluidos-rear-gateway`), the peering's ResourceSlice-class policy and
//! tenant namespaces (`fluidos-peering`), the consumer's credentials
//! Secrets (`fluidos-consumer`). The chart's own objects say `Helm` there
//! and are Helm's to delete.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// The `app.kubernetes.io/managed-by` values of this node's components.
pub const MANAGERS: [&str; 4] = [
    "fluidos-node",
    fluidos_peer_access::grant::MANAGED_LABEL.1,
    fluidos_peering::objects::MANAGED_BY.1,
    fluidos_consumer::MANAGER,
];

/// The label selector of everything [`MANAGERS`] made.
pub fn selector() -> String {
    format!("app.kubernetes.io/managed-by in ({})", MANAGERS.join(","))
}

/// The label selector of the Secrets the sweep deletes: those of every
/// manager but `fluidos-node`, whose one Secret is the node's REAR key. It
/// stays, as the node ID's ConfigMap does, so that a reinstall in the same
/// namespace is the same node to its peers (pinned to that key); deleting
/// the namespace deletes both.
pub fn secret_selector() -> String {
    let managers: Vec<&str> = MANAGERS
        .iter()
        .copied()
        .filter(|m| *m != "fluidos-node")
        .collect();
    format!("app.kubernetes.io/managed-by in ({})", managers.join(","))
}

/// One kind the sweep deletes, in the order it deletes them: first what
/// lets a buyer in (its ServiceAccount, whose tokens stop working with it,
/// then its grants), then the tenant namespaces (Liqo's side of each
/// peering goes with them), and the admission policies last, so that
/// nothing a peer can still reach is ever unguarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Peer ServiceAccounts (`fluidos-peer-*`, in the node's namespace): a
    /// buyer's credentials.
    ServiceAccount,
    /// Peer RoleBindings in tenant namespaces and in Liqo's.
    RoleBinding,
    /// Peer Roles.
    Role,
    /// The Go consumers' ClusterRoleBindings.
    ClusterRoleBinding,
    /// The Go consumers' ClusterRole.
    ClusterRole,
    /// Secrets the node made in its namespace (peering credentials; those
    /// in tenant namespaces go with them), its REAR key aside
    /// ([`secret_selector`]).
    Secret,
    /// Tenant namespaces the gateway or the peering made.
    Namespace,
    /// The peer guard's, the Go grant's and the slice-class policy's bindings.
    PolicyBinding,
    /// Their ValidatingAdmissionPolicies.
    Policy,
}

impl Kind {
    /// Every kind, in deletion order.
    pub const ALL: [Kind; 9] = [
        Kind::ServiceAccount,
        Kind::RoleBinding,
        Kind::Role,
        Kind::ClusterRoleBinding,
        Kind::ClusterRole,
        Kind::Secret,
        Kind::Namespace,
        Kind::PolicyBinding,
        Kind::Policy,
    ];

    /// The selector of the objects of this kind the sweep deletes.
    pub fn selector(self) -> String {
        match self {
            Kind::Secret => secret_selector(),
            _ => selector(),
        }
    }

    /// The kind's plural, for what the sweep reports.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::PolicyBinding => "ValidatingAdmissionPolicyBindings",
            Kind::Policy => "ValidatingAdmissionPolicies",
            Kind::ClusterRoleBinding => "ClusterRoleBindings",
            Kind::ClusterRole => "ClusterRoles",
            Kind::RoleBinding => "RoleBindings",
            Kind::Role => "Roles",
            Kind::ServiceAccount => "ServiceAccounts",
            Kind::Secret => "Secrets",
            Kind::Namespace => "Namespaces",
        }
    }

    /// The kind's name, as kubectl prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PolicyBinding => "ValidatingAdmissionPolicyBinding",
            Kind::Policy => "ValidatingAdmissionPolicy",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
            Kind::ClusterRole => "ClusterRole",
            Kind::RoleBinding => "RoleBinding",
            Kind::Role => "Role",
            Kind::ServiceAccount => "ServiceAccount",
            Kind::Secret => "Secret",
            Kind::Namespace => "Namespace",
        }
    }
}

/// A failed list or delete of one kind.
#[derive(Debug, thiserror::Error)]
#[error("{action} {kind}s labelled {selector}: {source}")]
pub struct SweepError {
    action: &'static str,
    kind: &'static str,
    selector: String,
    #[source]
    source: kube::Error,
}

/// Deletes every object of `kind` the node made (those of a namespaced
/// kind in every namespace, ServiceAccounts and Secrets in `namespace`, the
/// node's, only); returns what it deleted, as `namespace/name` or `name`.
/// Objects already gone count as deleted.
pub async fn sweep(
    client: &kube::Client,
    namespace: &str,
    kind: Kind,
) -> Result<Vec<String>, SweepError> {
    match kind {
        Kind::PolicyBinding => cluster::<ValidatingAdmissionPolicyBinding>(client, kind).await,
        Kind::Policy => cluster::<ValidatingAdmissionPolicy>(client, kind).await,
        Kind::ClusterRoleBinding => cluster::<ClusterRoleBinding>(client, kind).await,
        Kind::ClusterRole => cluster::<ClusterRole>(client, kind).await,
        Kind::RoleBinding => namespaced::<RoleBinding>(client, None, kind).await,
        Kind::Role => namespaced::<Role>(client, None, kind).await,
        Kind::ServiceAccount => namespaced::<ServiceAccount>(client, Some(namespace), kind).await,
        Kind::Secret => namespaced::<Secret>(client, Some(namespace), kind).await,
        Kind::Namespace => cluster::<Namespace>(client, kind).await,
    }
}

fn error(action: &'static str, kind: Kind) -> impl FnOnce(kube::Error) -> SweepError {
    move |source| SweepError {
        action,
        kind: kind.as_str(),
        selector: kind.selector(),
        source,
    }
}

async fn list<K>(api: &Api<K>, kind: Kind) -> Result<Vec<K>, SweepError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    Ok(api
        .list(&ListParams::default().labels(&kind.selector()))
        .await
        .map_err(error("listing", kind))?
        .items)
}

/// A missing object is deleted already; a namespace answering 409 is
/// being deleted (Kubernetes refuses a second delete while it empties).
fn gone(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        other => other,
    }
}

async fn cluster<K>(client: &kube::Client, kind: Kind) -> Result<Vec<String>, SweepError>
where
    K: Resource<Scope = ClusterResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let api = Api::<K>::all(client.clone());
    let mut deleted = Vec::new();
    for obj in list(&api, kind).await? {
        let name = obj.name_any();
        if obj.meta().deletion_timestamp.is_some() {
            continue;
        }
        gone(
            api.delete(&name, &DeleteParams::background())
                .await
                .map(drop),
        )
        .map_err(error("deleting", kind))?;
        deleted.push(name);
    }
    Ok(deleted)
}

/// In `namespace`, or in every namespace.
async fn namespaced<K>(
    client: &kube::Client,
    namespace: Option<&str>,
    kind: Kind,
) -> Result<Vec<String>, SweepError>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let listing = match namespace {
        Some(ns) => Api::<K>::namespaced(client.clone(), ns),
        None => Api::<K>::all(client.clone()),
    };
    let mut deleted = Vec::new();
    for obj in list(&listing, kind).await? {
        let (name, ns) = (obj.name_any(), obj.namespace().unwrap_or_default());
        if obj.meta().deletion_timestamp.is_some() {
            continue;
        }
        let api = Api::<K>::namespaced(client.clone(), &ns);
        gone(
            api.delete(&name, &DeleteParams::background())
                .await
                .map(drop),
        )
        .map_err(error("deleting", kind))?;
        deleted.push(format!("{ns}/{name}"));
    }
    Ok(deleted)
}

/// Namespaces that let a peer act here: the tenant namespaces the node
/// made (Liqo's Tenant of a buyer, its grants) and those Liqo made for a
/// peer's workloads (`remote_namespace::selector`), with whether each is
/// being deleted.
async fn peer_namespaces(
    client: &kube::Client,
) -> Result<Vec<(String, Option<String>)>, SweepError> {
    let api = Api::<Namespace>::all(client.clone());
    let mut found = list(&api, Kind::Namespace).await?;
    found.extend(
        api.list(&ListParams::default().labels(&fluidos_peer_access::remote_namespace::selector()))
            .await
            .map_err(error("listing", Kind::Namespace))?
            .items,
    );
    Ok(found.iter().map(|n| (n.name_any(), n.uid())).collect())
}

/// Watches the namespaces that let a peer act here until they are gone, for
/// at most `timeout`: the admission policies guarding peers are deleted
/// only after. One still there then is refused, with its name: it stays
/// guarded, and the uninstall can be run again once it is gone (its
/// peering ended from the other side, or the namespace deleted by hand).
pub async fn until_no_peer_left(
    client: &kube::Client,
    timeout: Duration,
) -> Result<(), anyhow::Error> {
    let namespaces = Api::<Namespace>::all(client.clone());
    let left = peer_namespaces(client).await?;
    let waits = left.iter().map(|(name, uid)| {
        let api = namespaces.clone();
        async move {
            let gone =
                kube::runtime::wait::await_condition(api, name, move |o: Option<&Namespace>| {
                    o.is_none_or(|o| o.metadata.uid.as_ref() != uid.as_ref())
                });
            match tokio::time::timeout(timeout, gone).await {
                Ok(Ok(_)) => Ok(true),
                Ok(Err(e)) => Err(anyhow::anyhow!("watching namespace {name}: {e}")),
                Err(_) => Ok(false),
            }
        }
    });
    let gone = futures::future::join_all(waits)
        .await
        .into_iter()
        .collect::<Result<Vec<bool>, _>>()?;
    let stuck: Vec<&str> = left
        .iter()
        .zip(gone)
        .filter_map(|((name, _), gone)| (!gone).then_some(name.as_str()))
        .collect();
    if stuck.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "namespaces {} still let a peer act here after {timeout:?} (a buyer's offloaded workloads, or a tenant namespace being emptied): the admission policies guarding peers stay until they are gone; end those peerings, or delete the namespaces, and run helm uninstall again",
        stuck.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_names_every_component_and_not_helm() {
        assert_eq!(
            selector(),
            "app.kubernetes.io/managed-by in (fluidos-node,fluidos-rear-gateway,fluidos-peering,fluidos-consumer)"
        );
    }

    #[test]
    fn the_nodes_key_is_not_among_the_secrets_swept() {
        assert_eq!(
            Kind::Secret.selector(),
            "app.kubernetes.io/managed-by in (fluidos-rear-gateway,fluidos-peering,fluidos-consumer)"
        );
        assert_eq!(Kind::Role.selector(), selector());
    }

    #[test]
    fn accounts_go_first_and_the_policies_guarding_peers_last() {
        let at = |k| Kind::ALL.iter().position(|x| *x == k).unwrap();
        assert_eq!(Kind::ALL.first(), Some(&Kind::ServiceAccount));
        assert!(at(Kind::RoleBinding) < at(Kind::Role));
        assert!(at(Kind::ClusterRoleBinding) < at(Kind::ClusterRole));
        assert!(at(Kind::Namespace) < at(Kind::PolicyBinding));
        assert!(at(Kind::PolicyBinding) < at(Kind::Policy));
        assert_eq!(Kind::ALL.last(), Some(&Kind::Policy));
    }
}

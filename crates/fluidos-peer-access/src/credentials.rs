//! Peering credentials handed to a buyer in the REAR Contract's
//! `peeringTargetCredentials` (kept, provider side, in a Secret: see the
//! gateway's `peering_secret`): the executor of the grants
//! [`crate::grant`] and [`crate::go_grant`]
//! describe.
//!
//! Upstream shares one near-cluster-admin ServiceAccount with every peer and
//! never revokes it. Here each buyer gets its own ServiceAccount
//! `fluidos-peer-<buyerID>` and a bounded token from the TokenRequest API (no
//! long-lived token Secret). The account has no rights of its own: a K8Slice
//! sale binds it, by a RoleBinding to the namespaced Role `fluidos-peer`
//! carrying only what Liqo 1.0's own minimal "peering user" needs (see
//! [`peer_rules`](crate::grant::peer_rules)), in the buyer's Liqo tenant namespace and nowhere else
//! (unless a compatibility namespace is configured), plus, by a RoleBinding
//! to the Role [`PEER_NETWORK_ROLE`](crate::grant::PEER_NETWORK_ROLE) in Liqo's namespace, the reading of this
//! cluster's pod and external CIDRs there
//! ([`crate::grant::peer_network_rules`]) that Liqo's
//! networking phase needs. Revoking a buyer is deleting its ServiceAccount
//! and its RoleBindings.
//!
//! One job per file: `token` mints, caches and hands out the kubeconfig;
//! `account` claims a buyer's ServiceAccount for its owner and applies
//! it; `tenant` claims the tenant namespace and binds the peer Roles
//! there and in Liqo's namespace; `go_consumer` is the Go consumer's
//! grant; `revocation` the two-phase revocation. This file holds the
//! shared state, the watch caches, and the mending of earlier versions'
//! grants at start.

mod account;
mod go_consumer;
mod revocation;
mod step;
mod tenant;
mod token;

pub use step::Step;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::Mutex;

use crate::grant::{MANAGED_LABEL, PEER_ROLE, managed_labels, peer_role_rules_for, with_type};

/// Field manager of the server-side applies.
const FIELD_MANAGER: &str = "fluidos-rear-gateway";

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A Kubernetes call failed (e.g. missing RBAC to create Roles, or a
    /// server without the TokenRequest API).
    #[error("{step}: {source}")]
    Kube {
        /// Which step failed.
        step: Step,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The TokenRequest answer had no token.
    #[error("the TokenRequest for {0} returned no token")]
    NoToken(String),
    /// The TokenRequest answer was not JSON of the expected shape.
    #[error("reading the TokenRequest answer for {account}: {source}")]
    TokenAnswer {
        /// The ServiceAccount.
        account: String,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The Liqo tenant namespace of the cluster ID the buyer stated exists
    /// and was not made by this node for this buyer: another buyer (or
    /// a peering made outside FLUIDOS) owns it.
    #[error(
        "the Liqo tenant namespace {namespace} belongs to another peer; a buyer must state its own Liqo cluster ID"
    )]
    TenantTaken {
        /// `liqo-tenant-<cluster ID>`.
        namespace: String,
    },
    /// The Go-consumer grant is on but its admission policy is not in place
    /// yet (or could not be applied): no cluster-wide rights are handed out
    /// unconfined.
    #[error(
        "the Go consumers' peering grant is not in place yet on this provider (its admission policy is being applied); retry later"
    )]
    GoPeeringGuardNotReady,
    /// The buyer ID's credentials belong to another peer (another key, or
    /// plain HTTP against a key).
    #[error(
        "buyer ID {buyer} holds peering credentials of another peer on this provider (a buyer ID stays with the first key, or plain HTTP, that bought with it, until its last Contract ends); use your own node ID"
    )]
    OwnerMismatch {
        /// The buyer ID.
        buyer: String,
    },
    /// The buyer ID's account was deleted, made again or claimed while
    /// this sale checked it: the buyer retries, and the check is made anew.
    #[error(
        "the peering account of buyer ID {buyer} changed during this sale (revoked or claimed at the same time); retry"
    )]
    AccountChanged {
        /// The buyer ID.
        buyer: String,
    },
}

/// Where credentials point and how long they live.
#[derive(Clone, Debug)]
pub struct CredentialsConfig {
    /// Namespace of the ServiceAccounts.
    pub namespace: String,
    /// A namespace where peers are granted [`liqo_peering_user_rules`](crate::grant::liqo_peering_user_rules) besides their
    /// Liqo tenant namespace, for consumers that act elsewhere; none by
    /// default (least privilege: nothing in the node's own namespace).
    pub role_namespace: Option<String>,
    /// `server:` of the kubeconfig.
    pub api_server_url: String,
    /// PEM of the API server's CA, inlined as `certificate-authority-data`.
    pub ca_pem: Option<String>,
    /// Requested token lifetime (the API server may grant another: what
    /// it granted decides when a cached kubeconfig is renewed).
    pub token_ttl: Duration,
    /// Whether unmodified Go consumers may be granted peering rights
    /// ([`crate::go_grant`]); its cluster-wide objects are applied then.
    pub go_peering: bool,
    /// Whether to mend, at start, the peer grants of earlier versions:
    /// remove those made in the node's namespace (without
    /// [`Self::role_namespace`]) and narrow the peer Roles of tenant
    /// namespaces ([`peer_role_rules_for`]). The gateway's job; the
    /// rear-manager issuing for sellers leaves it (and holds no right to it).
    pub remove_stale_grants: bool,
}

struct Cached {
    kubeconfig_b64: String,
    refresh_at: Instant,
    /// UID of the ServiceAccount the token was minted for.
    sa_uid: String,
}

/// Issues (and caches) per-buyer kubeconfigs.
pub struct Credentials {
    client: kube::Client,
    cfg: CredentialsConfig,
    cache: Mutex<HashMap<String, Cached>>,
    /// Watch cache of the peer ServiceAccounts: a cached token is reused only
    /// while its account still exists, so a revocation by another replica is
    /// seen here within the watch's latency.
    accounts: Store<ServiceAccount>,
    /// Watch caches of the peer Roles and RoleBindings this node made, in
    /// every namespace: a buyer's tenant grant is written once, then only
    /// checked against these (three API calls less on each K8Slice sale).
    roles: Store<Role>,
    bindings: Store<RoleBinding>,
    /// Set once the Go-consumer grant's ClusterRole, Role and admission
    /// policy are applied ([`Credentials::run_go_peering`]).
    go_guard: tokio::sync::watch::Sender<bool>,
}

/// Puts the rules of [`peer_role_rules_for`] into the peer Roles of tenant
/// namespaces that hold others: earlier versions let every buyer list the
/// Secrets of its tenant namespace. Each write is conditioned on the Role
/// as listed (a sale or an adoption writing it meanwhile wins); the list is
/// retried a few times; `skip` is the compatibility namespace, whose Role
/// keeps Liqo's rules. Best effort: logged.
async fn narrow_peer_roles(client: &kube::Client, skip: Option<&str>) {
    let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
    let roles_api = Api::<Role>::all(client.clone());
    let mut roles = None;
    for attempt in 0..5u32 {
        match roles_api
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => {
                roles = Some(list.items);
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "could not list the peer Roles to narrow those of earlier versions");
                tokio::time::sleep(Duration::from_secs(2u64.pow(attempt))).await;
            }
        }
    }
    let Some(roles) = roles else { return };
    let namespaces = Api::<Namespace>::all(client.clone());
    for role in roles.iter().filter(|r| r.name_any() == PEER_ROLE) {
        let Some(ns) = role.namespace() else { continue };
        if skip == Some(ns.as_str()) {
            continue;
        }
        let rules = match namespaces.get_opt(&ns).await {
            Ok(Some(found)) => peer_role_rules_for(&found),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "could not read a peer's tenant namespace");
                None
            }
        };
        let Some(rules) = rules.filter(|r| role.rules.as_deref() != Some(r)) else {
            continue;
        };
        let narrowed = Role {
            metadata: ObjectMeta {
                name: Some(PEER_ROLE.to_owned()),
                namespace: Some(ns.clone()),
                labels: managed_labels(),
                resource_version: role.metadata.resource_version.clone(),
                ..Default::default()
            },
            rules: Some(rules),
        };
        match Api::<Role>::namespaced(client.clone(), &ns)
            .patch(
                PEER_ROLE,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(with_type(&narrowed, "rbac.authorization.k8s.io/v1", "Role")),
            )
            .await
        {
            Ok(_) => tracing::info!(namespace = ns, "narrowed a peer Role of an earlier version"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::debug!(
                    namespace = ns,
                    "a peer Role changed while it was narrowed: the newer write stands"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "could not narrow a peer Role of an earlier version");
            }
        }
    }
}

/// Deletes the peer Role and RoleBindings this node made in `ns`
/// (best effort: logged).
async fn remove_grants_in(client: &kube::Client, ns: &str) {
    let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
    let lp = ListParams::default().labels(&selector);
    if let Err(e) = Api::<RoleBinding>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &lp)
        .await
    {
        tracing::warn!(error = %e, namespace = ns, "could not remove the peers' old RoleBindings");
    }
    match Api::<Role>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &lp)
        .await
    {
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, namespace = ns, "could not remove the peers' old Role");
        }
    }
}

/// Keeps `writer` in step with a watch of `api`, logging (not ending on) errors.
async fn reflect_forever<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    what: &'static str,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let stream = watcher(api, config).default_backoff().reflect(writer);
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            tracing::warn!(error = %e, "{what} watch error; retrying");
        }
    }
}

impl Credentials {
    /// Credentials issued with `client`; the returned future removes grants
    /// left in the node's namespace by earlier versions, then drives the
    /// watches of the peer ServiceAccounts, Roles and RoleBindings, and must
    /// be spawned.
    pub fn new(
        client: kube::Client,
        cfg: CredentialsConfig,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &cfg.namespace);
        let (accounts, writer) = reflector::store();
        let (roles, roles_writer) = reflector::store();
        let (bindings, bindings_writer) = reflector::store();
        let selector = format!("{}={}", MANAGED_LABEL.0, MANAGED_LABEL.1);
        let config = watcher::Config::default().labels(&selector);
        let driver = futures::future::join3(
            // Without these watches, cached tokens are simply not reused and
            // tenant grants are written at every sale.
            reflect_forever(api, config.clone(), writer, "peer ServiceAccount"),
            reflect_forever(
                Api::<Role>::all(client.clone()),
                config.clone(),
                roles_writer,
                "peer Role",
            ),
            reflect_forever(
                Api::<RoleBinding>::all(client.clone()),
                config,
                bindings_writer,
                "peer RoleBinding",
            ),
        );
        // Earlier versions bound every peer in the node's namespace: without
        // a compatibility namespace those grants go.
        let stale = (cfg.remove_stale_grants && cfg.role_namespace.is_none())
            .then(|| (client.clone(), cfg.namespace.clone()));
        let narrow = cfg
            .remove_stale_grants
            .then(|| (client.clone(), cfg.role_namespace.clone()));
        let driver = async move {
            if let Some((client, ns)) = stale {
                remove_grants_in(&client, &ns).await;
            }
            let narrow = async move {
                if let Some((client, skip)) = narrow {
                    narrow_peer_roles(&client, skip.as_deref()).await;
                }
            };
            futures::future::join(narrow, driver).await;
        };
        let credentials = Credentials {
            client,
            cfg,
            cache: Mutex::new(HashMap::new()),
            accounts,
            roles,
            bindings,
            go_guard: tokio::sync::watch::Sender::new(false),
        };
        (credentials, driver)
    }
}

/// Server-side applies the RBAC object `obj` of `kind`, named `name`.
async fn apply_rbac<K>(api: Api<K>, name: &str, obj: &K, kind: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(with_type(obj, "rbac.authorization.k8s.io/v1", kind)),
    )
    .await
    .map(|_| ())
}

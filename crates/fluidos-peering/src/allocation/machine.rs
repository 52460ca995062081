//! The Allocation state machine for K8Slice contracts, pure: from the
//! Allocation's status and what the executor observed of the Liqo objects,
//! the objects to create next, the status to write and what to wait for.
//!
//! Statuses and messages are the Go node's (`fluidos-node.md` §3.6–3.8);
//! while the consumer is still peering its message also says which step it
//! is waiting for.

use fluidos_api::NodeIdentity;
use fluidos_api::allocation::AllocationState;

use crate::network_objects::{ClusterCidrs, GatewayOwner, ServerEndpoint};
use crate::objects::TenantGrant;

/// Go: the first status of any Allocation.
pub const MSG_INACTIVE: &str = "Allocation has been set to Inactive";
/// Go, consumer: Inactive → Peering.
pub const MSG_PEERING: &str = "Allocation is now in Peering";
/// Go, consumer: peering complete.
pub const MSG_ACTIVE: &str = "Outgoing peering ready, Allocation is Active";
/// Go, consumer: Active but the peering is not (or no longer) complete.
pub const MSG_ACTIVE_NOT_READY: &str = "Outgoing peering not yet ready, Allocation is Active";
/// Go, provider: Inactive → Provisioning (the capacity is held by the sale).
pub const MSG_RESERVED: &str = "Resources reserved";
/// Go, provider: no ForeignCluster for the buyer yet.
pub const MSG_NO_FOREIGN_CLUSTER: &str = "ForeignCluster not found, peering not yet started";
/// Go, provider: the buyer's ForeignCluster is not a consumer yet.
pub const MSG_INCOMING_NOT_READY: &str =
    "Incoming peering not yet ready, Allocation is still Reserved";
/// Go, provider: the buyer authenticated.
pub const MSG_INCOMING_READY: &str = "Incoming peering ready, Allocation is now Active";
/// Go: the Contract cannot be read.
pub const MSG_NO_CONTRACT: &str = "Error when getting Contract";
/// Go, consumer: the contract's kubeconfig is unusable.
pub const MSG_BAD_KUBECONFIG: &str = "Error when decoding Kubeconfig";
/// Go, consumer: no client could be built from the kubeconfig.
pub const MSG_NO_REMOTE_CLIENT: &str = "Error when creating remote client";
/// Consumer: the Secret the Contract names for its kubeconfig is missing or
/// holds none (ours: the Go node keeps the kubeconfig in the Contract).
pub const MSG_NO_CREDENTIALS: &str = "Error when reading the Contract's credentials";

/// The peering kubeconfig in the Contract's credentials Secret `name`, as
/// read (`None`: not found), in the base64 form the Contract's spec used to
/// carry; else the status message saying what is wrong.
pub fn kubeconfig_from_secret(
    name: &str,
    secret: Option<&k8s_openapi::api::core::v1::Secret>,
) -> Result<String, String> {
    match secret {
        None => Err(format!("{MSG_NO_CREDENTIALS}: Secret {name} not found")),
        Some(s) => fluidos_api::peering_credentials::kubeconfig_in(s)
            .ok_or_else(|| format!("{MSG_NO_CREDENTIALS}: Secret {name} holds no kubeconfig")),
    }
}

/// Which side of the Contract this node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The buyer: it drives the peering.
    Consumer,
    /// The seller: it watches the buyer authenticate.
    Provider,
}

/// The Go node's `IsProvider`: the Contract's seller is this node.
pub fn side(seller: &NodeIdentity, local: &NodeIdentity) -> Side {
    if seller.node_id == local.node_id && seller.domain == local.domain {
        Side::Provider
    } else {
        Side::Consumer
    }
}

/// A status to write: state and message.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// `status.status`.
    pub state: AllocationState,
    /// `status.message`.
    pub message: String,
}

fn status(state: AllocationState, message: impl Into<String>) -> Option<Status> {
    Some(Status {
        state,
        message: message.into(),
    })
}

/// A provider's verdict on one ResourceSlice condition.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// `Accepted`.
    Accepted,
    /// `Denied`, with the condition's message.
    Denied(String),
}

/// The consumer's signed-nonce Secret.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignedNonce {
    /// `data.nonce`: the provider nonce it signs.
    pub nonce: Option<Vec<u8>>,
    /// `data.signedNonce`, once Liqo signed it.
    pub signature: Option<Vec<u8>>,
}

/// What was read on the provider (only while not yet authenticated).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remote {
    /// The nonce Secret: absent, present without a nonce, or with it.
    pub nonce: Option<Option<Vec<u8>>>,
    /// The Tenant: absent, present without a complete status (or being
    /// deleted), or granted.
    pub tenant: Option<Option<TenantGrant>>,
    /// The Tenant as read, so that only that version is ever deleted.
    pub tenant_version: Option<ObjectVersion>,
    /// The Tenant is being deleted (Liqo's finalizer has not let it go).
    pub tenant_deleting: bool,
    /// The Tenant carries another public key than this cluster's (its Liqo
    /// was reinstalled, or its keys replaced): its certificate is of no use.
    pub tenant_other_key: bool,
}

/// An object's `uid` and `resourceVersion`: a delete preconditioned on
/// them fails if anyone wrote it since it was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectVersion {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
}

/// The Allocation's stored status message and how long ago it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredStatus {
    /// `status.message`.
    pub message: String,
    /// Seconds since `status.lastUpdateTime` (this node's clock wrote it).
    pub age_secs: i64,
}

/// What the executor observed of Liqo's networking phase on this cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkView {
    /// This cluster's pod and external CIDRs (`None`: its IPAM has not
    /// published them).
    pub local_cidrs: Option<ClusterCidrs>,
    /// The Configuration of the provider here: absent, or whether the local
    /// IPAM took it in.
    pub configuration: Option<bool>,
    /// The GatewayClient, if present.
    pub client: Option<GatewayView>,
    /// The key in the provider's PublicKey here, if present.
    pub public_key: Option<Vec<u8>>,
    /// A Connection with the provider here is `Connected`.
    pub connected: bool,
    /// A GatewayServer for the provider is here: the provider consumes from
    /// this cluster through a tunnel it made the other way round.
    pub reverse_tunnel: bool,
    /// What was read on the provider (while not yet connected, or not yet
    /// authenticated).
    pub remote: Option<RemoteNetwork>,
}

/// What the executor observed of Liqo's networking phase on the provider.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteNetwork {
    /// The provider's pod and external CIDRs, when its IPAM published them
    /// (and they are usable: see `network_objects::valid_cidr`).
    pub cidrs: Option<ClusterCidrs>,
    /// The provider refuses this cluster the reading of its IPAM Networks.
    pub cidrs_forbidden: bool,
    /// The Configuration of this cluster there: absent, or taken in.
    pub configuration: Option<bool>,
    /// The GatewayServer, if present.
    pub server: Option<GatewayView>,
    /// The key in this cluster's PublicKey there, if present.
    pub public_key: Option<Vec<u8>>,
    /// A Connection with this cluster there is `Connected`.
    pub connected: bool,
    /// A GatewayClient for this cluster is there (the tunnel the other way
    /// round, seen from the provider).
    pub reverse_tunnel: bool,
}

/// A gateway (the provider's server, or this cluster's client), as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayView {
    /// Its name.
    pub name: String,
    /// Its `metadata.uid` (a PublicKey of the other side's key is owned by it).
    pub uid: String,
    /// The server's `status.endpoint` once exposed; the client's
    /// `spec.endpoint`.
    pub endpoint: Option<ServerEndpoint>,
    /// The WireGuard public key in its key Secret, once Liqo made it (and
    /// it is one: 32 bytes).
    pub key: Option<Vec<u8>>,
}

impl NetworkView {
    /// True when the provider must be read for the networking phase: the
    /// connection is not up here, or this cluster is not authenticated yet
    /// (the phase ends only when both sides are connected).
    fn needs_remote(&self, authenticated: bool) -> bool {
        !self.connected || !authenticated
    }
}

/// What the executor observed of the consumer-side peering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumerView {
    /// `liqo-tenant-<provider>` exists.
    pub tenant_namespace: bool,
    /// Liqo's networking phase, when this node runs it (`None`: off).
    pub network: Option<NetworkView>,
    /// The control-plane Identity: absent, or whether Liqo made its kubeconfig.
    pub identity: Option<bool>,
    /// The signed-nonce Secret, if present.
    pub signed_nonce: Option<SignedNonce>,
    /// The provider's side, when read.
    pub remote: Option<Remote>,
    /// The ResourceSlice: absent, or its two conditions.
    pub slice: Option<(Option<Verdict>, Option<Verdict>)>,
    /// The virtual Node named after the slice is Ready.
    pub node_ready: bool,
    /// The Allocation's stored status, to tell how long it has waited.
    pub stored_status: Option<StoredStatus>,
    /// How many times this Allocation restarted the handshake because the
    /// provider did not accept its Tenant ([`TENANT_RESTARTS_ANNOTATION`]).
    pub tenant_restarts: u32,
}

impl ConsumerView {
    /// True when the executor must read the provider: not authenticated
    /// yet, or authenticated but the slice not yet accepted (the provider
    /// may have dropped this cluster's Tenant since; see [`consumer`]).
    pub fn needs_remote(&self) -> bool {
        let accepted = matches!(
            self.slice,
            Some((Some(Verdict::Accepted), Some(Verdict::Accepted)))
        );
        self.identity.is_none()
            || (self.identity == Some(true) && !accepted)
            || self
                .network
                .as_ref()
                .is_some_and(|n| n.needs_remote(self.identity.is_some()))
    }
}

/// A write the executor makes, each create-or-adopt.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Namespace `liqo-tenant-<provider>` on the consumer.
    CreateTenantNamespace,
    /// Secret `liqo-nonce` on the provider.
    CreateRemoteNonce,
    /// Secret `liqo-signed-nonce` on the consumer, with this nonce.
    CreateSignedNonce(Vec<u8>),
    /// Delete a signed-nonce Secret holding another nonce than the provider's.
    DeleteSignedNonce,
    /// Delete the nonce Secret on the provider (a new one gets a new nonce).
    DeleteRemoteNonce,
    /// Delete the Tenant on the provider, if still the version read.
    DeleteRemoteTenant(ObjectVersion),
    /// Delete the control-plane Identity on the consumer.
    DeleteIdentity,
    /// Count one more handshake restart on the Allocation (this number).
    RecordTenantRestart(u32),
    /// The Tenant on the provider, with this signature.
    CreateTenant(Vec<u8>),
    /// The control-plane Identity on the consumer.
    CreateIdentity(Box<TenantGrant>),
    /// The ResourceSlice on the consumer.
    CreateResourceSlice,
    /// The provider's Configuration (its CIDRs) on the consumer.
    CreateLocalConfiguration(ClusterCidrs),
    /// This cluster's Configuration (these CIDRs) on the provider.
    CreateRemoteConfiguration(ClusterCidrs),
    /// The GatewayServer on the provider.
    CreateGatewayServer,
    /// The GatewayClient on the consumer, to this endpoint.
    CreateGatewayClient(ServerEndpoint),
    /// Point the GatewayClient at the server's endpoint, which changed.
    UpdateGatewayClientEndpoint(ServerEndpoint),
    /// The provider's PublicKey (its server's key) on the consumer, owned by
    /// the GatewayClient.
    CreateLocalPublicKey(Vec<u8>, GatewayOwner),
    /// This cluster's PublicKey (its client's key) on the provider, owned by
    /// the GatewayServer.
    CreateRemotePublicKey(Vec<u8>, GatewayOwner),
    /// The provider's PublicKey here, holding a key its server no longer has.
    DeleteLocalPublicKey,
    /// This cluster's PublicKey there, holding a key the client no longer has.
    DeleteRemotePublicKey,
}

/// What the next reconcile waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing: done, or terminal.
    Nothing,
    /// A change of a local object (watched).
    Local,
    /// A change on the provider, which is not watched: look again shortly.
    Remote,
}

/// After how many seconds on the same step a wait on the provider is
/// polled slowly.
pub const SLOW_WAIT_SECS: i64 = 10;

/// Whether the Allocation has been waiting on the same step (its stored
/// message is the one about to be written) for [`SLOW_WAIT_SECS`] or more.
pub fn waited_long(stored: Option<&StoredStatus>, next: Option<&Status>) -> bool {
    match (stored, next) {
        (Some(stored), Some(next)) => {
            stored.message == next.message && stored.age_secs >= SLOW_WAIT_SECS
        }
        _ => false,
    }
}

/// The decision of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Writes, in order.
    pub effects: Vec<Effect>,
    /// The status to write; `None` keeps the current one.
    pub status: Option<Status>,
    /// What to wait for afterwards.
    pub wait: Wait,
}

impl Plan {
    fn keep() -> Plan {
        Plan {
            effects: Vec::new(),
            status: None,
            wait: Wait::Nothing,
        }
    }

    fn to(status: Option<Status>) -> Plan {
        Plan {
            effects: Vec::new(),
            status,
            wait: Wait::Nothing,
        }
    }
}

/// The consumer side (Go §3.8), driving the peering as `liqoctl peer
/// --networking-disabled` does, one observable step at a time.
pub fn consumer(
    current: Option<&AllocationState>,
    provider: &str,
    slice: &str,
    view: &ConsumerView,
) -> Plan {
    let active = match current {
        None => return Plan::to(status(AllocationState::Inactive, MSG_INACTIVE)),
        Some(AllocationState::Error | AllocationState::Released) => return Plan::keep(),
        Some(AllocationState::Inactive) => {
            return Plan::to(status(AllocationState::Peering, MSG_PEERING));
        }
        Some(AllocationState::Active) => true,
        Some(_) => false,
    };
    let (mut effects, wait, detail) = consumer_step(provider, slice, view);
    if let Err(reason) = &detail {
        return Plan {
            effects,
            status: status(
                AllocationState::Error,
                format!("Error when peering with cluster {provider}: {reason}"),
            ),
            wait: Wait::Nothing,
        };
    }
    if !view.tenant_namespace && !effects.is_empty() {
        effects.insert(0, Effect::CreateTenantNamespace);
    }
    let status = match (detail, active) {
        (Ok(None), _) => status(AllocationState::Active, MSG_ACTIVE),
        (Ok(Some(d)), true) => status(
            AllocationState::Active,
            format!("{MSG_ACTIVE_NOT_READY}: {d}"),
        ),
        (Ok(Some(d)), false) => status(AllocationState::Peering, format!("{MSG_PEERING}: {d}")),
        (Err(_), _) => None,
    };
    Plan {
        effects,
        status,
        wait,
    }
}

/// The next step: effects, wait, and `Ok(None)` when done, `Ok(Some(what
/// it waits for))`, or `Err(why the provider refused)`.
fn consumer_step(provider: &str, slice: &str, view: &ConsumerView) -> Step {
    if let Some(step) = view
        .network
        .as_ref()
        .and_then(|n| network_step(provider, view.identity.is_some(), n))
    {
        return step;
    }
    match view.identity {
        // The provider no longer has this cluster's Tenant (it dropped it
        // when the last Contract ended, or its admin did): the Identity's
        // certificate is bound to nothing there, and a new slice would never
        // be accepted. Authenticate again.
        Some(true)
            if view
                .remote
                .as_ref()
                .is_some_and(|r| r.tenant.is_none() || r.tenant_deleting || r.tenant_other_key) =>
        {
            return waiting(
                vec![Effect::DeleteIdentity, Effect::DeleteSignedNonce],
                Wait::Local,
                format!("{provider} no longer has this cluster's Tenant: authenticating again"),
            );
        }
        Some(true) => {}
        Some(false) => {
            return waiting(
                vec![],
                Wait::Local,
                format!(
                    "waiting for Liqo to make the kubeconfig of Identity controlplane-{provider}"
                ),
            );
        }
        None => return authentication_step(provider, view),
    }
    slice_step(provider, slice, view)
}

type Step = (Vec<Effect>, Wait, Result<Option<String>, String>);

/// How long the provider's Liqo may take to accept a Tenant before the
/// handshake starts again; it takes about a second, and Liqo gives one
/// signing attempt 30 s before it retries.
pub const TENANT_PATIENCE_SECS: i64 = 45;

/// Annotation on a consumer Allocation counting its handshake restarts: each
/// doubles the patience, up to 16 times [`TENANT_PATIENCE_SECS`] (12 min), so
/// a provider that keeps refusing is not asked for a new certificate every
/// minute.
pub const TENANT_RESTARTS_ANNOTATION: &str = "fluidos.eu/tenant-restarts";

/// How long to wait for the Tenant after `restarts` restarts (pure).
pub fn tenant_patience_secs(restarts: u32) -> i64 {
    TENANT_PATIENCE_SECS << restarts.min(4)
}

/// The status detail when a Tenant left unaccepted for `waited` seconds is
/// replaced.
pub fn restart_message(provider: &str, waited: i64) -> String {
    format!("{provider} did not accept the Tenant in {waited} s: authenticating again")
}

fn waiting(effects: Vec<Effect>, wait: Wait, what: String) -> Step {
    (effects, wait, Ok(Some(what)))
}

/// Authentication (`liqoctl authenticate`): nonce on the provider, signed
/// here, Tenant on the provider, control-plane Identity here.
fn authentication_step(provider: &str, view: &ConsumerView) -> Step {
    let remote = view.remote.clone().unwrap_or_default();
    if remote.tenant_deleting {
        return waiting(
            vec![],
            Wait::Remote,
            format!("waiting for {provider} to remove the previous Tenant"),
        );
    }
    // As `liqoctl authenticate` updates it: a Tenant made with another key
    // of this cluster gives a certificate this cluster cannot use.
    if let (true, Some(version)) = (remote.tenant_other_key, &remote.tenant_version) {
        return waiting(
            vec![
                Effect::DeleteRemoteTenant(version.clone()),
                Effect::DeleteRemoteNonce,
                Effect::DeleteSignedNonce,
            ],
            Wait::Remote,
            format!(
                "the Tenant on {provider} was made with another key of this cluster: authenticating again"
            ),
        );
    }
    match (&remote.tenant, &view.signed_nonce, &remote.nonce) {
        (Some(Some(grant)), _, _) => waiting(
            vec![Effect::CreateIdentity(Box::new(grant.clone()))],
            Wait::Local,
            format!("authenticated with {provider}, creating Identity controlplane-{provider}"),
        ),
        (Some(None), _, _) => {
            let accepting = format!("waiting for {provider} to accept the Tenant");
            let waited = view
                .stored_status
                .as_ref()
                .filter(|s| s.message.ends_with(&accepting))
                .map(|s| s.age_secs);
            let patience = tenant_patience_secs(view.tenant_restarts);
            match &remote.tenant_version {
                Some(version) if waited.is_some_and(|age| age >= patience) => {
                    // Liqo does not retry a Tenant whose signature does not
                    // verify, and retries failures with a backoff that
                    // reaches minutes: a new handshake starts both afresh.
                    // The Tenant goes first, and only as read: one Liqo
                    // accepted meanwhile is kept (the delete fails), and so
                    // are the nonces.
                    waiting(
                        vec![
                            Effect::RecordTenantRestart(view.tenant_restarts.saturating_add(1)),
                            Effect::DeleteRemoteTenant(version.clone()),
                            Effect::DeleteRemoteNonce,
                            Effect::DeleteSignedNonce,
                        ],
                        Wait::Remote,
                        restart_message(provider, patience),
                    )
                }
                _ => waiting(vec![], Wait::Remote, accepting),
            }
        }
        (None, Some(signed), Some(Some(nonce))) if signed.nonce.as_ref() != Some(nonce) => waiting(
            vec![Effect::DeleteSignedNonce],
            Wait::Local,
            "replacing a signed nonce of an earlier attempt".into(),
        ),
        // A signed nonce whose nonce the provider no longer has (a restart
        // stopped between deleting the two): a Tenant made with it would
        // never verify, and nothing would issue a new nonce.
        (None, Some(_), None | Some(None)) if view.remote.is_some() => waiting(
            vec![Effect::DeleteSignedNonce],
            Wait::Local,
            format!("replacing a signed nonce whose nonce {provider} no longer has"),
        ),
        (
            None,
            Some(SignedNonce {
                signature: Some(sig),
                ..
            }),
            Some(Some(_)),
        ) => waiting(
            vec![Effect::CreateTenant(sig.clone())],
            Wait::Remote,
            format!("Tenant sent to {provider}, waiting for its certificate"),
        ),
        (None, Some(_), _) => waiting(
            vec![],
            Wait::Local,
            format!("waiting for Liqo to sign the nonce of {provider}"),
        ),
        (None, None, Some(Some(nonce))) => waiting(
            vec![Effect::CreateSignedNonce(nonce.clone())],
            Wait::Local,
            format!("waiting for Liqo to sign the nonce of {provider}"),
        ),
        (None, None, Some(None)) => waiting(
            vec![],
            Wait::Remote,
            format!("waiting for {provider} to issue a nonce"),
        ),
        (None, None, None) => waiting(
            vec![Effect::CreateRemoteNonce],
            Wait::Remote,
            format!("waiting for {provider} to issue a nonce"),
        ),
    }
}

/// Liqo's networking phase (`liqoctl network connect`, the server on the
/// provider): Configurations both ways, the GatewayServer there, the
/// GatewayClient here, the gateways' keys exchanged as PublicKeys, then
/// both Connections up. `None` when done (connected here, and there too
/// until authenticated: afterwards the provider is not read for it).
fn network_step(provider: &str, authenticated: bool, n: &NetworkView) -> Option<Step> {
    if n.connected && (authenticated || n.remote.as_ref().is_some_and(|r| r.connected)) {
        return None;
    }
    // As `liqoctl network connect`: a tunnel the other way round (the
    // provider consumes from this cluster) is the one both use; its
    // objects have the same names as ours would, so nothing is made.
    if n.reverse_tunnel || n.remote.as_ref().is_some_and(|r| r.reverse_tunnel) {
        return None;
    }
    let Some(local_cidrs) = &n.local_cidrs else {
        return Some(waiting(
            vec![],
            Wait::Local,
            "waiting for this cluster's Liqo IPAM to publish its pod and external CIDRs".into(),
        ));
    };
    let unknown = RemoteNetwork::default();
    let r = n.remote.as_ref().unwrap_or(&unknown);
    let Some(remote_cidrs) = &r.cidrs else {
        let why = if r.cidrs_forbidden {
            " (it does not let this cluster read its Liqo IPAM Networks)"
        } else {
            ""
        };
        return Some(waiting(
            vec![],
            Wait::Remote,
            format!(
                "waiting for {provider}'s Liqo IPAM to publish its pod and external CIDRs{why}"
            ),
        ));
    };
    let mut effects = Vec::new();
    if n.configuration.is_none() {
        effects.push(Effect::CreateLocalConfiguration(remote_cidrs.clone()));
    }
    if r.configuration.is_none() {
        effects.push(Effect::CreateRemoteConfiguration(local_cidrs.clone()));
    }
    if !effects.is_empty() || n.configuration != Some(true) || r.configuration != Some(true) {
        return Some(waiting(
            effects,
            Wait::Remote,
            format!(
                "networking: waiting for both IPAMs to take in the Configurations with {provider}"
            ),
        ));
    }
    let exposing = || format!("networking: waiting for {provider} to expose the gateway server");
    let Some(server) = &r.server else {
        return Some(waiting(
            vec![Effect::CreateGatewayServer],
            Wait::Remote,
            exposing(),
        ));
    };
    let Some(endpoint) = &server.endpoint else {
        return Some(waiting(vec![], Wait::Remote, exposing()));
    };
    let Some(client) = &n.client else {
        return Some(waiting(
            vec![Effect::CreateGatewayClient(endpoint.clone())],
            Wait::Remote,
            "networking: waiting for the gateway client's key".into(),
        ));
    };
    // The server was exposed anew (recreated, another address): follow it.
    if client.endpoint.as_ref() != Some(endpoint) {
        return Some(waiting(
            vec![Effect::UpdateGatewayClientEndpoint(endpoint.clone())],
            Wait::Remote,
            format!("networking: {provider}'s gateway server moved, following it"),
        ));
    }
    Some(key_exchange_step(provider, client, server, n, r))
}

/// The gateways' keys exchanged as PublicKeys, each owned by the gateway of
/// its side; a PublicKey holding an older key (its gateway was made anew)
/// is replaced.
fn key_exchange_step(
    provider: &str,
    client: &GatewayView,
    server: &GatewayView,
    n: &NetworkView,
    r: &RemoteNetwork,
) -> Step {
    let (Some(client_key), Some(server_key)) = (&client.key, &server.key) else {
        return waiting(
            vec![],
            Wait::Remote,
            "networking: waiting for the gateways' keys".into(),
        );
    };
    let mut effects = Vec::new();
    match &r.public_key {
        None => effects.push(Effect::CreateRemotePublicKey(
            client_key.clone(),
            GatewayOwner {
                kind: "GatewayServer",
                name: server.name.clone(),
                uid: server.uid.clone(),
            },
        )),
        Some(k) if k != client_key => effects.push(Effect::DeleteRemotePublicKey),
        Some(_) => {}
    }
    match &n.public_key {
        None => effects.push(Effect::CreateLocalPublicKey(
            server_key.clone(),
            GatewayOwner {
                kind: "GatewayClient",
                name: client.name.clone(),
                uid: client.uid.clone(),
            },
        )),
        Some(k) if k != server_key => effects.push(Effect::DeleteLocalPublicKey),
        Some(_) => {}
    }
    waiting(
        effects,
        Wait::Remote,
        format!("networking: keys exchanged, waiting for the connection with {provider}"),
    )
}

/// The ResourceSlice and the virtual node it yields.
fn slice_step(provider: &str, slice: &str, view: &ConsumerView) -> Step {
    match &view.slice {
        None => waiting(
            vec![Effect::CreateResourceSlice],
            Wait::Local,
            format!("ResourceSlice {slice} sent to {provider}"),
        ),
        Some((authentication, resources)) => {
            for (what, verdict) in [("authentication", authentication), ("resources", resources)] {
                if let Some(Verdict::Denied(why)) = verdict {
                    return (
                        vec![],
                        Wait::Nothing,
                        Err(format!("ResourceSlice {slice}: {what} denied: {why}")),
                    );
                }
            }
            match (authentication, resources, view.node_ready) {
                (Some(Verdict::Accepted), Some(Verdict::Accepted), true) => {
                    (vec![], Wait::Nothing, Ok(None))
                }
                (Some(Verdict::Accepted), Some(Verdict::Accepted), false) => waiting(
                    vec![],
                    Wait::Local,
                    format!(
                        "ResourceSlice {slice} accepted, waiting for virtual node {slice} to be Ready"
                    ),
                ),
                _ => waiting(
                    vec![],
                    Wait::Local,
                    format!("waiting for {provider} to accept ResourceSlice {slice}"),
                ),
            }
        }
    }
}

/// What the provider sees of the buyer's ForeignCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncomingPeering {
    /// Role `Consumer` (or `ConsumerAndProvider`).
    pub consumer: bool,
    /// Authentication enabled with `AuthTenantStatus` Ready.
    pub authenticated: bool,
}

/// The provider side (Go §3.7, without its bug: only an authenticated
/// consumer activates the Allocation). The capacity was taken from the
/// Flavor's ledger at the sale, so `Inactive` moves straight on.
pub fn provider(current: Option<&AllocationState>, incoming: Option<IncomingPeering>) -> Plan {
    match current {
        None => Plan::to(status(AllocationState::Inactive, MSG_INACTIVE)),
        Some(AllocationState::Inactive) => {
            Plan::to(status(AllocationState::Provisioning, MSG_RESERVED))
        }
        Some(AllocationState::Provisioning | AllocationState::Peering) => match incoming {
            None => Plan {
                status: status(AllocationState::Provisioning, MSG_NO_FOREIGN_CLUSTER),
                ..Plan::keep()
            },
            Some(IncomingPeering {
                consumer: true,
                authenticated: true,
            }) => Plan::to(status(AllocationState::Active, MSG_INCOMING_READY)),
            Some(_) => Plan::to(status(
                AllocationState::Provisioning,
                MSG_INCOMING_NOT_READY,
            )),
        },
        Some(_) => Plan::keep(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fluidos_liqo_api::generated::tenant::TenantStatusAuthParams;

    const P: &str = "prov";
    const S: &str = "contract-f-1234";

    #[test]
    fn a_missing_or_empty_credentials_secret_says_so() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        assert_eq!(
            kubeconfig_from_secret("peering-credentials-c", None),
            Err(format!(
                "{MSG_NO_CREDENTIALS}: Secret peering-credentials-c not found"
            ))
        );
        assert_eq!(
            kubeconfig_from_secret("peering-credentials-c", Some(&Secret::default())),
            Err(format!(
                "{MSG_NO_CREDENTIALS}: Secret peering-credentials-c holds no kubeconfig"
            ))
        );
        let secret = Secret {
            data: Some(
                [(
                    "kubeconfig".to_owned(),
                    ByteString(b"apiVersion: v1\n".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        // Base64 again, as `remote_client` takes it.
        assert_eq!(
            kubeconfig_from_secret("peering-credentials-c", Some(&secret)).as_deref(),
            Ok("YXBpVmVyc2lvbjogdjEK")
        );
    }

    fn grant() -> TenantGrant {
        TenantGrant {
            auth_params: TenantStatusAuthParams::default(),
            tenant_namespace: "liqo-tenant-cons".into(),
        }
    }

    fn peering(view: &ConsumerView) -> Plan {
        consumer(Some(&AllocationState::Peering), P, S, view)
    }

    fn authenticated() -> ConsumerView {
        ConsumerView {
            tenant_namespace: true,
            identity: Some(true),
            ..Default::default()
        }
    }

    fn cidrs(pod: &str) -> ClusterCidrs {
        ClusterCidrs {
            pod: pod.into(),
            external: "10.70.0.0/16".into(),
        }
    }

    fn endpoint() -> ServerEndpoint {
        ServerEndpoint {
            addresses: vec!["192.0.2.1".into()],
            port: 30_000,
            tcp: false,
        }
    }

    /// Walks the networking phase as Liqo would answer each step: every
    /// plan's effects are applied to the view, then Liqo's reaction.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one walk through the whole networking phase reads top to bottom"
    )]
    fn networking_runs_before_authentication_step_by_step() {
        let mut v = ConsumerView {
            tenant_namespace: true,
            network: Some(NetworkView::default()),
            remote: Some(Remote::default()),
            ..Default::default()
        };
        assert!(v.needs_remote());
        // No local CIDRs yet: wait, nothing sent.
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert!(
            p.status
                .unwrap()
                .message
                .contains("this cluster's Liqo IPAM")
        );
        let n = v.network.as_mut().unwrap();
        n.local_cidrs = Some(cidrs("10.1.0.0/16"));
        // The provider's CIDRs not read (yet, or not allowed): wait on it.
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(p.wait, Wait::Remote);
        assert!(p.status.unwrap().message.contains("prov's Liqo IPAM"));
        v.network.as_mut().unwrap().remote = Some(RemoteNetwork {
            cidrs: Some(cidrs("10.2.0.0/16")),
            ..Default::default()
        });
        // Configurations both ways, each with the other's CIDRs.
        let p = peering(&v);
        assert_eq!(
            p.effects,
            vec![
                Effect::CreateLocalConfiguration(cidrs("10.2.0.0/16")),
                Effect::CreateRemoteConfiguration(cidrs("10.1.0.0/16")),
            ]
        );
        let n = v.network.as_mut().unwrap();
        n.configuration = Some(false);
        n.remote.as_mut().unwrap().configuration = Some(true);
        let p = peering(&v);
        assert!(p.effects.is_empty(), "waits for this IPAM: {p:?}");
        let n = v.network.as_mut().unwrap();
        n.configuration = Some(true);
        // Then the server on the provider, waited for until exposed.
        assert_eq!(peering(&v).effects, vec![Effect::CreateGatewayServer]);
        let server = |endpoint: Option<ServerEndpoint>, key: Option<&[u8]>| GatewayView {
            name: "cons".into(),
            uid: "server-uid".into(),
            endpoint,
            key: key.map(<[u8]>::to_vec),
        };
        let r = v.network.as_mut().unwrap().remote.as_mut().unwrap();
        r.server = Some(server(None, None));
        assert!(peering(&v).effects.is_empty());
        let r = v.network.as_mut().unwrap().remote.as_mut().unwrap();
        r.server = Some(server(Some(endpoint()), None));
        // The client here, to the server's endpoint.
        assert_eq!(
            peering(&v).effects,
            vec![Effect::CreateGatewayClient(endpoint())]
        );
        let n = v.network.as_mut().unwrap();
        n.client = Some(GatewayView {
            name: P.into(),
            uid: "client-uid".into(),
            endpoint: Some(endpoint()),
            key: Some(b"client-key".to_vec()),
        });
        assert!(
            peering(&v).effects.is_empty(),
            "the server's key is missing"
        );
        let r = v.network.as_mut().unwrap().remote.as_mut().unwrap();
        r.server = Some(server(Some(endpoint()), Some(b"server-key")));
        // Keys exchanged, each owned by the gateway of its side: ours there
        // first, then theirs here.
        let owned_by_server = GatewayOwner {
            kind: "GatewayServer",
            name: "cons".into(),
            uid: "server-uid".into(),
        };
        let owned_by_client = GatewayOwner {
            kind: "GatewayClient",
            name: P.into(),
            uid: "client-uid".into(),
        };
        assert_eq!(
            peering(&v).effects,
            vec![
                Effect::CreateRemotePublicKey(b"client-key".to_vec(), owned_by_server),
                Effect::CreateLocalPublicKey(b"server-key".to_vec(), owned_by_client),
            ]
        );
        let n = v.network.as_mut().unwrap();
        n.public_key = Some(b"server-key".to_vec());
        n.remote.as_mut().unwrap().public_key = Some(b"client-key".to_vec());
        // The server made anew elsewhere, with a new key: the client follows
        // it, and the stale key here is replaced.
        let mut moved = v.clone();
        let other = ServerEndpoint {
            port: 30_001,
            ..endpoint()
        };
        let r = moved.network.as_mut().unwrap().remote.as_mut().unwrap();
        r.server = Some(server(Some(other.clone()), Some(b"new-server-key")));
        assert_eq!(
            peering(&moved).effects,
            vec![Effect::UpdateGatewayClientEndpoint(other.clone())]
        );
        moved
            .network
            .as_mut()
            .unwrap()
            .client
            .as_mut()
            .unwrap()
            .endpoint = Some(other);
        assert_eq!(peering(&moved).effects, vec![Effect::DeleteLocalPublicKey]);
        // And a client key changed: ours there is replaced.
        let mut rekeyed = v.clone();
        rekeyed
            .network
            .as_mut()
            .unwrap()
            .client
            .as_mut()
            .unwrap()
            .key = Some(b"k2".to_vec());
        assert_eq!(
            peering(&rekeyed).effects,
            vec![Effect::DeleteRemotePublicKey]
        );
        let n = v.network.as_mut().unwrap();
        n.connected = true;
        // Connected here but not there: still waiting, no authentication.
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert!(
            p.status
                .unwrap()
                .message
                .contains("waiting for the connection"),
            "both sides must be connected"
        );
        v.network
            .as_mut()
            .unwrap()
            .remote
            .as_mut()
            .unwrap()
            .connected = true;
        // Both connected: authentication starts.
        assert_eq!(peering(&v).effects, vec![Effect::CreateRemoteNonce]);
        // Once authenticated, a connection up here is enough, and the
        // provider is no longer read for it.
        let mut done = authenticated();
        done.network = Some(NetworkView {
            connected: true,
            ..v.network.clone().unwrap()
        });
        done.network.as_mut().unwrap().remote = None;
        done.slice = Some((Some(Verdict::Accepted), Some(Verdict::Accepted)));
        done.node_ready = true;
        assert!(!done.needs_remote());
        assert_eq!(peering(&done).status.unwrap().message, MSG_ACTIVE);
        // A connection that goes down is read again, and waited on.
        done.network.as_mut().unwrap().connected = false;
        assert!(done.needs_remote());
        let p = peering(&done);
        assert_eq!(p.status.unwrap().state, AllocationState::Peering);
    }

    #[test]
    fn a_long_wait_on_the_same_step_is_polled_slowly() {
        let next = Status {
            state: AllocationState::Peering,
            message: "m".into(),
        };
        let stored = |message: &str, age_secs| StoredStatus {
            message: message.into(),
            age_secs,
        };
        assert!(!waited_long(None, Some(&next)));
        assert!(!waited_long(Some(&stored("m", 3)), Some(&next)));
        assert!(waited_long(Some(&stored("m", 10)), Some(&next)));
        assert!(
            !waited_long(Some(&stored("other", 60)), Some(&next)),
            "a new step is polled fast"
        );
    }

    #[test]
    fn a_tunnel_the_other_way_round_is_used_as_it_is() {
        for (here, there) in [(true, false), (false, true)] {
            let v = ConsumerView {
                tenant_namespace: true,
                network: Some(NetworkView {
                    local_cidrs: Some(cidrs("10.1.0.0/16")),
                    reverse_tunnel: here,
                    remote: Some(RemoteNetwork {
                        cidrs: Some(cidrs("10.2.0.0/16")),
                        reverse_tunnel: there,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                remote: Some(Remote::default()),
                ..Default::default()
            };
            assert_eq!(
                peering(&v).effects,
                vec![Effect::CreateRemoteNonce],
                "no networking object made; authentication starts"
            );
        }
    }

    #[test]
    fn a_provider_that_hides_its_cidrs_is_named_in_the_status() {
        let v = ConsumerView {
            tenant_namespace: true,
            network: Some(NetworkView {
                local_cidrs: Some(cidrs("10.1.0.0/16")),
                remote: Some(RemoteNetwork {
                    cidrs_forbidden: true,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            remote: Some(Remote::default()),
            ..Default::default()
        };
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert!(
            p.status
                .unwrap()
                .message
                .ends_with("(it does not let this cluster read its Liqo IPAM Networks)")
        );
    }

    #[test]
    fn without_networking_authentication_starts_at_once() {
        let v = ConsumerView {
            tenant_namespace: true,
            remote: Some(Remote::default()),
            ..Default::default()
        };
        assert_eq!(peering(&v).effects, vec![Effect::CreateRemoteNonce]);
    }

    #[test]
    fn sides_follow_the_seller() {
        let me = NodeIdentity {
            domain: "d".into(),
            node_id: "n".into(),
            ..Default::default()
        };
        assert_eq!(side(&me, &me), Side::Provider);
        let other = NodeIdentity {
            node_id: "m".into(),
            ..me.clone()
        };
        assert_eq!(side(&other, &me), Side::Consumer);
    }

    #[test]
    fn consumer_starts_inactive_then_peers() {
        let v = ConsumerView::default();
        let p = consumer(None, P, S, &v);
        assert_eq!(p.status.unwrap().message, MSG_INACTIVE);
        let p = consumer(Some(&AllocationState::Inactive), P, S, &v);
        assert_eq!(
            p.status.unwrap(),
            Status {
                state: AllocationState::Peering,
                message: MSG_PEERING.into()
            }
        );
        assert!(p.effects.is_empty());
    }

    #[test]
    fn terminal_states_are_left_alone() {
        for s in [AllocationState::Error, AllocationState::Released] {
            assert_eq!(
                consumer(Some(&s), P, S, &ConsumerView::default()),
                Plan::keep()
            );
            assert_eq!(provider(Some(&s), None), Plan::keep());
        }
    }

    #[test]
    fn first_step_is_the_remote_nonce_with_the_tenant_namespace() {
        let p = peering(&ConsumerView {
            remote: Some(Remote::default()),
            ..Default::default()
        });
        assert_eq!(
            p.effects,
            vec![Effect::CreateTenantNamespace, Effect::CreateRemoteNonce]
        );
        assert_eq!(p.wait, Wait::Remote);
        let s = p.status.unwrap();
        assert_eq!(s.state, AllocationState::Peering);
        assert!(s.message.starts_with(MSG_PEERING), "{}", s.message);
    }

    #[test]
    fn an_empty_nonce_is_waited_for_on_the_provider() {
        let p = peering(&ConsumerView {
            tenant_namespace: true,
            remote: Some(Remote {
                nonce: Some(None),
                tenant: None,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(p.effects.is_empty());
        assert_eq!(p.wait, Wait::Remote);
    }

    #[test]
    fn the_nonce_is_signed_locally() {
        let p = peering(&ConsumerView {
            tenant_namespace: true,
            remote: Some(Remote {
                nonce: Some(Some(b"n1".to_vec())),
                tenant: None,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(p.effects, vec![Effect::CreateSignedNonce(b"n1".to_vec())]);
        assert_eq!(p.wait, Wait::Local);
        // Not signed yet: wait for Liqo's signer.
        let p = peering(&ConsumerView {
            tenant_namespace: true,
            signed_nonce: Some(SignedNonce {
                nonce: Some(b"n1".to_vec()),
                signature: None,
            }),
            remote: Some(Remote {
                nonce: Some(Some(b"n1".to_vec())),
                tenant: None,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(p.effects.is_empty());
        assert_eq!(p.wait, Wait::Local);
    }

    #[test]
    fn a_stale_signed_nonce_is_replaced() {
        let p = peering(&ConsumerView {
            tenant_namespace: true,
            signed_nonce: Some(SignedNonce {
                nonce: Some(b"old".to_vec()),
                signature: Some(b"sig".to_vec()),
            }),
            remote: Some(Remote {
                nonce: Some(Some(b"new".to_vec())),
                tenant: None,
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(p.effects, vec![Effect::DeleteSignedNonce]);
    }

    #[test]
    fn a_tenant_made_with_another_key_is_replaced() {
        let version = ObjectVersion {
            uid: "u".into(),
            resource_version: "1".into(),
        };
        let remote = Remote {
            nonce: Some(Some(b"n1".to_vec())),
            tenant: Some(Some(TenantGrant {
                auth_params: TenantStatusAuthParams::default(),
                tenant_namespace: "liqo-tenant-c".into(),
            })),
            tenant_version: Some(version.clone()),
            tenant_other_key: true,
            ..Default::default()
        };
        let mut v = ConsumerView {
            tenant_namespace: true,
            remote: Some(remote),
            ..Default::default()
        };
        let p = peering(&v);
        assert_eq!(
            p.effects,
            vec![
                Effect::DeleteRemoteTenant(version),
                Effect::DeleteRemoteNonce,
                Effect::DeleteSignedNonce
            ]
        );
        // Authenticated with it already: the Identity goes too.
        v.identity = Some(true);
        let p = peering(&v);
        assert_eq!(
            p.effects,
            vec![Effect::DeleteIdentity, Effect::DeleteSignedNonce]
        );
    }

    #[test]
    fn a_signed_nonce_whose_nonce_is_gone_is_replaced_not_sent() {
        // A restart stopped after deleting the provider's nonce: no Tenant
        // from the old signature; the signed nonce goes, then a new nonce.
        for nonce in [None, Some(None)] {
            let p = peering(&ConsumerView {
                tenant_namespace: true,
                signed_nonce: Some(SignedNonce {
                    nonce: Some(b"old".to_vec()),
                    signature: Some(b"sig".to_vec()),
                }),
                remote: Some(Remote {
                    nonce: nonce.clone(),
                    tenant: None,
                    ..Default::default()
                }),
                ..Default::default()
            });
            assert_eq!(p.effects, vec![Effect::DeleteSignedNonce], "{nonce:?}");
        }
    }

    #[test]
    fn the_signature_goes_into_the_tenant_and_its_grant_into_the_identity() {
        let signed = Some(SignedNonce {
            nonce: Some(b"n1".to_vec()),
            signature: Some(b"sig".to_vec()),
        });
        let mut v = ConsumerView {
            tenant_namespace: true,
            signed_nonce: signed,
            remote: Some(Remote {
                nonce: Some(Some(b"n1".to_vec())),
                tenant: None,
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = peering(&v);
        assert_eq!(p.effects, vec![Effect::CreateTenant(b"sig".to_vec())]);
        assert_eq!(p.wait, Wait::Remote);
        v.remote.as_mut().unwrap().tenant = Some(None);
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(p.wait, Wait::Remote);
        v.remote.as_mut().unwrap().tenant = Some(Some(grant()));
        let p = peering(&v);
        assert_eq!(p.effects, vec![Effect::CreateIdentity(Box::new(grant()))]);
        assert_eq!(p.wait, Wait::Local);
        // The Identity exists: the provider is no longer read.
        v.identity = Some(false);
        assert!(!v.needs_remote());
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(p.wait, Wait::Local);
    }

    #[test]
    fn a_tenant_left_unaccepted_starts_the_handshake_again() {
        let stored = |message: &str, age_secs| StoredStatus {
            message: message.to_owned(),
            age_secs,
        };
        let version = ObjectVersion {
            uid: "u1".into(),
            resource_version: "7".into(),
        };
        let waiting = format!("{MSG_PEERING}: waiting for {P} to accept the Tenant");
        let mut v = ConsumerView {
            tenant_namespace: true,
            signed_nonce: Some(SignedNonce {
                nonce: Some(b"n1".to_vec()),
                signature: Some(b"sig".to_vec()),
            }),
            remote: Some(Remote {
                nonce: Some(Some(b"n1".to_vec())),
                tenant: Some(None),
                tenant_version: Some(version.clone()),
                tenant_deleting: false,
                tenant_other_key: false,
            }),
            stored_status: Some(stored(&waiting, TENANT_PATIENCE_SECS - 1)),
            ..Default::default()
        };
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(p.status.unwrap().message, waiting);

        v.stored_status = Some(stored(&waiting, TENANT_PATIENCE_SECS));
        let p = peering(&v);
        assert_eq!(
            p.effects,
            vec![
                Effect::RecordTenantRestart(1),
                Effect::DeleteRemoteTenant(version.clone()),
                Effect::DeleteRemoteNonce,
                Effect::DeleteSignedNonce,
            ]
        );
        assert_eq!(p.wait, Wait::Remote);
        let restarted = p.status.unwrap().message;
        assert_eq!(
            restarted,
            format!("{MSG_PEERING}: {}", restart_message(P, 45))
        );

        // Each restart doubles the patience, up to 12 minutes.
        v.tenant_restarts = 1;
        assert!(peering(&v).effects.is_empty(), "45 s is not 90 s");
        v.stored_status = Some(stored(&waiting, 90));
        assert_eq!(peering(&v).effects[0], Effect::RecordTenantRestart(2));
        assert_eq!(tenant_patience_secs(4), 720);
        assert_eq!(tenant_patience_secs(40), 720);
        v.tenant_restarts = 0;

        // Another message, however old, is not a wait for the Tenant.
        v.stored_status = Some(stored(&format!("{MSG_PEERING}: something else"), 600));
        assert!(peering(&v).effects.is_empty());

        // While the old Tenant is being deleted nothing starts; once it is
        // gone, a new nonce.
        v.signed_nonce = None;
        v.remote = Some(Remote {
            nonce: None,
            tenant: Some(None),
            tenant_version: None,
            tenant_deleting: true,
            tenant_other_key: false,
        });
        v.stored_status = Some(stored(&restarted, 600));
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(
            p.status.unwrap().message,
            format!("{MSG_PEERING}: waiting for {P} to remove the previous Tenant")
        );
        v.remote = Some(Remote::default());
        assert_eq!(peering(&v).effects, vec![Effect::CreateRemoteNonce]);
    }

    #[test]
    fn a_tenant_being_deleted_yields_no_identity() {
        let v = ConsumerView {
            tenant_namespace: true,
            remote: Some(Remote {
                nonce: Some(Some(b"n1".to_vec())),
                tenant: Some(Some(grant())),
                tenant_version: None,
                tenant_deleting: true,
                tenant_other_key: false,
            }),
            ..Default::default()
        };
        assert!(peering(&v).effects.is_empty());
        // Authenticated against a Tenant on its way out: start again.
        let v = ConsumerView {
            remote: v.remote.clone(),
            ..authenticated()
        };
        assert_eq!(
            peering(&v).effects,
            vec![Effect::DeleteIdentity, Effect::DeleteSignedNonce]
        );
    }

    #[test]
    fn an_identity_the_provider_no_longer_knows_is_replaced() {
        // Authenticated, slice not accepted yet: the provider is read.
        let mut v = authenticated();
        assert!(v.needs_remote());
        v.remote = Some(Remote {
            nonce: Some(Some(b"n1".to_vec())),
            tenant: Some(Some(grant())),
            ..Default::default()
        });
        assert_eq!(peering(&v).effects, vec![Effect::CreateResourceSlice]);
        // Its Tenant is gone there: drop the Identity and start again.
        v.remote = Some(Remote::default());
        let p = peering(&v);
        assert_eq!(
            p.effects,
            vec![Effect::DeleteIdentity, Effect::DeleteSignedNonce]
        );
        assert_eq!(p.wait, Wait::Local);
        assert!(
            p.status.unwrap().message.ends_with("authenticating again"),
            "says why"
        );
        // Once the slice is accepted the provider is not read any more.
        v.slice = Some((Some(Verdict::Accepted), Some(Verdict::Accepted)));
        assert!(!v.needs_remote());
        // Nor while the Identity's kubeconfig is being made.
        v.slice = None;
        v.identity = Some(false);
        assert!(!v.needs_remote());
    }

    #[test]
    fn once_authenticated_the_slice_is_created_even_if_already_peered() {
        // A consumer already peered with this provider (earlier Contract)
        // has a ready Identity: it goes straight to its own ResourceSlice.
        let p = peering(&authenticated());
        assert_eq!(p.effects, vec![Effect::CreateResourceSlice]);
        assert_eq!(p.wait, Wait::Local);
        let mut no_ns = authenticated();
        no_ns.tenant_namespace = false;
        assert_eq!(
            peering(&no_ns).effects,
            vec![Effect::CreateTenantNamespace, Effect::CreateResourceSlice]
        );
    }

    #[test]
    fn slice_acceptance_then_node_ready_makes_it_active() {
        let mut v = authenticated();
        v.slice = Some((Some(Verdict::Accepted), None));
        let p = peering(&v);
        assert!(p.effects.is_empty());
        assert_eq!(p.status.unwrap().state, AllocationState::Peering);
        v.slice = Some((Some(Verdict::Accepted), Some(Verdict::Accepted)));
        let p = peering(&v);
        assert!(p.status.unwrap().message.contains("virtual node"));
        v.node_ready = true;
        let p = peering(&v);
        assert_eq!(
            p.status.unwrap(),
            Status {
                state: AllocationState::Active,
                message: MSG_ACTIVE.into()
            }
        );
        assert_eq!(p.wait, Wait::Nothing);
    }

    #[test]
    fn a_denied_slice_is_an_error() {
        let mut v = authenticated();
        v.slice = Some((
            Some(Verdict::Accepted),
            Some(Verdict::Denied("no contract".into())),
        ));
        let s = peering(&v).status.unwrap();
        assert_eq!(s.state, AllocationState::Error);
        assert_eq!(
            s.message,
            format!(
                "Error when peering with cluster {P}: ResourceSlice {S}: resources denied: no contract"
            )
        );
    }

    #[test]
    fn active_stays_active_and_repairs() {
        let p = consumer(Some(&AllocationState::Active), P, S, &authenticated());
        assert_eq!(p.effects, vec![Effect::CreateResourceSlice]);
        let s = p.status.unwrap();
        assert_eq!(s.state, AllocationState::Active);
        assert!(s.message.starts_with(MSG_ACTIVE_NOT_READY));
    }

    #[test]
    fn provider_follows_the_buyers_foreign_cluster() {
        assert_eq!(provider(None, None).status.unwrap().message, MSG_INACTIVE);
        let p = provider(Some(&AllocationState::Inactive), None);
        assert_eq!(
            p.status.unwrap(),
            Status {
                state: AllocationState::Provisioning,
                message: MSG_RESERVED.into()
            }
        );
        let prov = Some(&AllocationState::Provisioning);
        assert_eq!(
            provider(prov, None).status.unwrap().message,
            MSG_NO_FOREIGN_CLUSTER
        );
        let half = IncomingPeering {
            consumer: true,
            authenticated: false,
        };
        assert_eq!(
            provider(prov, Some(half)).status.unwrap().message,
            MSG_INCOMING_NOT_READY
        );
        let full = IncomingPeering {
            consumer: true,
            authenticated: true,
        };
        assert_eq!(
            provider(prov, Some(full)).status.unwrap(),
            Status {
                state: AllocationState::Active,
                message: MSG_INCOMING_READY.into()
            }
        );
        assert_eq!(
            provider(Some(&AllocationState::Active), Some(full)),
            Plan::keep()
        );
    }
}

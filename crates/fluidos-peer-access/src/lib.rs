//! What a peer may do on this cluster.
//!
//! A buyer that peers through Liqo becomes Liqo's consumer here: its virtual
//! kubelet creates ShadowPods in the namespaces Liqo makes for it, and
//! Liqo's shadowpod controller turns each into a Pod verbatim. Liqo checks
//! only the cluster ID and the quota, so without more a 1-pod K8Slice buyer
//! could run a privileged, host-network pod with `/` mounted on any node
//! here. This crate holds what confines it:
//!
//! - [`pod_security`]: the Pod Security level enforced on the namespaces
//!   Liqo makes for peers' workloads (default `restricted`);
//! - [`workload_policy`]: a pure planner of the ValidatingAdmissionPolicies
//!   that refuse, naming the field, a peer's ShadowPods and the Pods made
//!   from them when they ask for more than a `restricted` (or `baseline`)
//!   pod may, refuse a peer's Services that claim external IPs or a load
//!   balancer's address, Services and Ingresses that expose it outside
//!   this cluster unless allowed, endpoints that point at what only this
//!   cluster's nodes reach, and claims that would bind an existing
//!   PersistentVolume, and confine the namespaces Liqo makes for a peer to
//!   the names Liqo derives for it;
//! - [`peer_exposure`]: the ways of exposure an operator may allow a peer
//!   (`NodePort`, `LoadBalancer`, `ExternalName`, Ingress; none by default);
//! - [`remote_namespace`]: which namespaces are a peer's, and the labels
//!   they must carry (pure);
//! - [`grant`]: what a buyer is granted, as objects (pure): its
//!   ServiceAccount's name and marks, the rules of its Roles, the Roles and
//!   bindings a grant applies, and whether the watch caches see it already;
//! - [`go_grant`]: the compatibility grant for unmodified Go consumers
//!   (pure): its ClusterRole, Role, admission policy, claims and adoption;
//! - [`credentials`]: the executor of those grants: a buyer's ServiceAccount
//!   claimed and applied, its Roles bound, a bound token minted, cached and
//!   handed out as a kubeconfig, and revoked in two phases (the REAR
//!   gateway issues for its buyers, the rear-manager for the sellers of
//!   Services delivered by Liqo);
//! - [`effective_grant`]: waiting until a grant just written is in force
//!   (the RBAC authorizer lags behind the API server's store);
//! - [`guard`]: the executor that applies the policies, puts them back as
//!   soon as they are deleted or edited (a watch, not a timer), and labels
//!   each peer namespace as it appears.
//!
//! The same holds in the other direction: a node that buys Services
//! delivered by Liqo is Liqo's provider for its seller, and keeps the same
//! guard.

pub mod credentials;
pub mod effective_grant;
pub mod go_grant;
pub mod grant;
pub mod guard;
pub mod peer_exposure;
pub mod pod_security;
pub mod remote_namespace;
pub mod workload_policy;

pub use guard::{GuardConfig, run};
pub use peer_exposure::PeerExposure;
pub use pod_security::PodSecurityLevel;

//! `Discovery` and `PeeringCandidate` (advertisement.fluidos.eu/v1alpha1).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::PhaseStatus;
use crate::embedded::{EmbeddedFlavor, EmbeddedObjectMeta};
use crate::solver::Selector;

/// One search for flavors across the known providers.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "advertisement.fluidos.eu",
    version = "v1alpha1",
    kind = "Discovery",
    namespaced,
    status = "DiscoveryStatus",
    shortname = "dis",
    doc = "Discovery is the Schema for the discoveries API.",
    printcolumn(name = "Solver ID", type_ = "string", json_path = ".spec.solverID"),
    printcolumn(name = "Subscribe", type_ = "boolean", json_path = ".spec.subscribe"),
    printcolumn(
        name = "PC Namespace",
        type_ = "string",
        json_path = ".status.peeringCandidate.namespace"
    ),
    printcolumn(
        name = "PC Name",
        type_ = "string",
        json_path = ".status.peeringCandidate.name"
    ),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.phase.phase"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.phase.message"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverySpec {
    /// Name of the Solver this search serves.
    #[serde(rename = "solverID")]
    pub solver_id: String,
    /// What to look for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
    /// Unused upstream; always false.
    pub subscribe: bool,
}

/// Discovery progress and the candidates it found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryStatus {
    /// Phase and message.
    pub phase: PhaseStatus,
    /// Copies of the candidates created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peering_candidate_list: Option<EmbeddedPeeringCandidateList>,
    /// Per-provider outcome of the last query (beyond upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<ProviderQueryStatus>>,
}

crate::string_enum::string_enum! {
    /// What came of asking one provider for flavors.
    pub enum ProviderOutcome {
        /// The provider listed its flavors (possibly none).
        Answered => "Answered",
        /// The provider could not be reached or answered with an error.
        Failed => "Failed",
        /// No answer within the per-provider timeout.
        TimedOut => "TimedOut",
    }
}

impl Default for ProviderOutcome {
    fn default() -> Self {
        ProviderOutcome::Other(String::new())
    }
}

/// What one provider answered.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderQueryStatus {
    /// `host:port` queried.
    pub address: String,
    /// `Answered`, `Failed` or `TimedOut`.
    pub outcome: ProviderOutcome,
    /// Matching flavors returned.
    #[serde(default)]
    pub flavors: i64,
    /// Error text when the query failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Listed flavors not used, being another node's or undecodable: the
    /// first 10 only (the total is `droppedCount`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Vec<DroppedFlavor>>,
    /// How many listed flavors were dropped in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_count: i64,
}

/// Keeps `droppedCount: 0` out of the YAML, as before the field existed.
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &i64) -> bool {
    *n == 0
}

crate::string_enum::string_enum! {
    /// Why a listed flavor was not used.
    pub enum DropReason {
        /// Its `owner.ip` is not the address asked: buying it would go
        /// elsewhere than to the provider that listed it.
        ForeignOwner => "ForeignOwner",
        /// It does not decode.
        Malformed => "Malformed",
    }
}

impl Default for DropReason {
    fn default() -> Self {
        DropReason::Other(String::new())
    }
}

/// How many [`DroppedFlavor`]s one [`ProviderQueryStatus`] keeps: they are
/// peer-supplied and live in one Discovery object, which etcd bounds.
pub const MAX_DROPPED_FLAVORS: usize = 10;

/// A flavor a provider listed that the consumer did not use.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DroppedFlavor {
    /// The flavor ID as listed (shortened when long).
    #[serde(rename = "flavorID")]
    pub flavor_id: String,
    /// `ForeignOwner` or `Malformed`.
    pub reason: DropReason,
    /// What was wrong (shortened when long).
    pub message: String,
}

/// `PeeringCandidateList` embedded in a Discovery status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedPeeringCandidateList {
    /// API version of the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `PeeringCandidateList`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// List metadata (always empty upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedListMeta>,
    /// The candidates.
    pub items: Vec<EmbeddedPeeringCandidate>,
}

/// List metadata as the upstream schema spells it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedListMeta {
    /// Continue token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#continue: Option<String>,
    /// Items left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_item_count: Option<i64>,
    /// Resource version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Deprecated self link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_link: Option<String>,
}

/// A PeeringCandidate copy inside a Discovery status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedPeeringCandidate {
    /// API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `PeeringCandidate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name and namespace.
    #[serde(default)]
    pub metadata: EmbeddedObjectMeta,
    /// The candidate's spec.
    pub spec: PeeringCandidateSpec,
    /// The candidate's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PeeringCandidateStatus>,
}

/// A remote flavor this node could buy.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "advertisement.fluidos.eu",
    version = "v1alpha1",
    kind = "PeeringCandidate",
    namespaced,
    status = "PeeringCandidateStatus",
    doc = "PeeringCandidate is the Schema for the peeringcandidates API."
)]
#[serde(rename_all = "camelCase")]
pub struct PeeringCandidateSpec {
    /// Solvers that selected this candidate.
    #[serde(rename = "interestedSolverIDs")]
    pub interested_solver_ids: Vec<String>,
    /// Snapshot of the remote flavor.
    pub flavor: EmbeddedFlavor,
    /// False while reserved or after purchase.
    pub available: bool,
}

/// Candidate timestamps.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeeringCandidateStatus {
    /// RFC 3339 creation time.
    pub creation_time: String,
    /// RFC 3339 last update (may be empty).
    pub last_update_time: String,
}

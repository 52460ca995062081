//! The Discovery's decisions as pure functions (fluidos-node.md §3.3): when a
//! Discovery starts, what one provider's answer means, which candidates to
//! create, refresh or withdraw, and how the search ends.

use std::time::Duration;

use fluidos_api::advertisement::{
    DiscoveryStatus, DropReason, DroppedFlavor, EmbeddedPeeringCandidate,
    EmbeddedPeeringCandidateList, MAX_DROPPED_FLAVORS, PeeringCandidateSpec, ProviderOutcome,
    ProviderQueryStatus,
};
use fluidos_api::embedded::EmbeddedFlavor;
use fluidos_api::rear::WireFlavor;
use fluidos_api::solver::FlavorSelector;
use fluidos_api::{KnownCluster, PROVIDER_FINGERPRINT_ANNOTATION, PeeringCandidate, Phase};
use fluidos_rear_client::{Fingerprint, FlavorListing, ProviderAddress};
use kube::ResourceExt;

use crate::reservation::HELD_BY;
use crate::status::{seconds_between, set_phase_at, touch_at};

/// How long a Discovery keeps asking when no provider answers at all.
pub const RETRY_FOR: Duration = Duration::from_secs(15);

/// How often it asks again meanwhile.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// What to do with a Discovery in its current phase.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// Nothing: it ended, or it is upstream's `Idle`.
    Done,
    /// Write this status (`Running "Discovery started"`), then query.
    Begin(Box<DiscoveryStatus>),
    /// Query the providers.
    Query,
}

/// Where a Discovery in `status` stands (`now`: status time format).
pub fn start(status: Option<&DiscoveryStatus>, now: &str) -> Start {
    let phase = status.map(|s| s.phase.phase.clone()).unwrap_or_default();
    match phase {
        Phase::Solved | Phase::Failed | Phase::TimedOut | Phase::Idle => Start::Done,
        Phase::Running => Start::Query,
        _ => {
            let mut st = status.cloned().unwrap_or_default();
            st.phase.start_time = Some(now.to_owned());
            st.peering_candidate_list = Some(EmbeddedPeeringCandidateList::default());
            set_phase_at(&mut st.phase, Phase::Running, "Discovery started", now);
            Start::Begin(Box::new(st))
        }
    }
}

/// How one provider query ended, before its flavors are looked at.
#[derive(Clone, Debug)]
pub enum Answer {
    /// It listed these flavors (some, past the client's bounds, unread).
    Listed(FlavorListing),
    /// It answered with an error, or could not be reached.
    Failed(String),
    /// No answer within the per-provider timeout.
    TimedOut(Duration),
}

/// One provider's answer, as recorded and as candidates.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderAnswer {
    /// Outcome recorded in the Discovery status.
    pub status: ProviderQueryStatus,
    /// Usable flavors it returned (decoded, filtered).
    pub flavors: Vec<EmbeddedFlavor>,
    /// The key it was pinned to (and proved it holds), which its candidates
    /// carry in [`PROVIDER_FINGERPRINT_ANNOTATION`]; `None` over plain HTTP.
    pub fingerprint: Option<Fingerprint>,
    /// Some listed flavors were left unread or over what is kept: a
    /// candidate not among `flavors` may still be listed, so none is
    /// withdrawn on this answer.
    pub partial: bool,
}

/// The providers a Discovery asks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Providers {
    /// Each distinct address and key, in a stable order.
    pub ask: Vec<ProviderAddress>,
    /// KnownClusters that cannot be asked: `host:port` and why.
    pub refused: Vec<(String, String)>,
}

/// The KnownClusters (pinned to their `fingerprint` when they carry one)
/// and the static peers, without duplicates (same address and key). A
/// KnownCluster whose fingerprint is malformed is not asked, and says why:
/// asking it without the key would fall back to plain HTTP.
pub fn providers(known: &[KnownCluster], static_peers: &[ProviderAddress]) -> Providers {
    let mut out = Providers::default();
    for k in known {
        match ProviderAddress::with_optional_fingerprint(
            k.spec.address.clone(),
            k.spec.fingerprint.as_deref(),
        ) {
            Ok(provider) => out.ask.push(provider),
            Err(e) => out.refused.push((
                k.spec.address.clone(),
                format!(
                    "not asked: KnownCluster {} has a malformed fingerprint: {e}",
                    k.name_any()
                ),
            )),
        }
    }
    out.ask.extend(static_peers.iter().cloned());
    out.ask.sort();
    out.ask.dedup();
    out.refused.sort();
    out.refused.dedup();
    out
}

/// A recorded flavor ID is cut to this many characters (a Kubernetes
/// object name is at most 253).
const MAX_DROPPED_ID_CHARS: usize = 253;
/// Most bytes of candidate copies in a Discovery's status.
pub const MAX_STATUS_CANDIDATE_BYTES: usize = 768 * 1024;
/// Most flavors of one provider kept in one round: each becomes a
/// PeeringCandidate and a copy in the Discovery status.
pub const MAX_FLAVORS_PER_PROVIDER: usize = 256;
/// Largest flavor kept (its JSON); upstream's are a few KiB.
pub const MAX_FLAVOR_BYTES: usize = 32 * 1024;
/// Most bytes of flavors kept from one provider in one round, so that one
/// provider cannot push the Discovery status past what the API server stores.
pub const MAX_PROVIDER_FLAVOR_BYTES: usize = 256 * 1024;

/// A recorded message is cut to this many characters.
const MAX_DROPPED_MESSAGE_CHARS: usize = 256;

/// What `provider` answered, with the flavors this consumer can use.
pub fn provider_answer(
    provider: &ProviderAddress,
    answer: Answer,
    selector: Option<&FlavorSelector>,
    namespace: &str,
    own_node_id: &str,
) -> ProviderAnswer {
    let (outcome, message, listing) = match answer {
        Answer::TimedOut(after) => (
            ProviderOutcome::TimedOut,
            Some(format!("no answer within {after:?}")),
            FlavorListing::default(),
        ),
        Answer::Failed(e) => (ProviderOutcome::Failed, Some(e), FlavorListing::default()),
        Answer::Listed(listing) => (ProviderOutcome::Answered, listing.unread_reason(), listing),
    };
    let mut usable = usable_flavors(
        &listing.flavors,
        &provider.address,
        selector,
        namespace,
        own_node_id,
    );
    // Flavors the client did not read count as dropped, over the limit.
    let unread_reason = listing.unread_reason().unwrap_or_default();
    for id in &listing.unread_ids {
        usable.drop_flavor(id, DropReason::Other("OverLimit".into()), || {
            unread_reason.clone()
        });
    }
    usable.dropped_count += listing.unread.saturating_sub(listing.unread_ids.len());
    let partial = usable.over_limit || listing.unread > 0;
    ProviderAnswer {
        status: ProviderQueryStatus {
            address: provider.address.clone(),
            outcome,
            flavors: i64::try_from(usable.flavors.len()).unwrap_or(i64::MAX),
            message,
            dropped: (!usable.dropped.is_empty()).then_some(usable.dropped),
            dropped_count: i64::try_from(usable.dropped_count).unwrap_or(i64::MAX),
        },
        flavors: usable.flavors,
        fingerprint: provider.fingerprint,
        partial,
    }
}

/// The flavors of one answer this consumer can use, and those it dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usable {
    /// Decoded, available, matching flavors of the provider asked.
    pub flavors: Vec<EmbeddedFlavor>,
    /// The first [`MAX_DROPPED_FLAVORS`] dropped flavors, bounded in size.
    pub dropped: Vec<DroppedFlavor>,
    /// How many were dropped in all.
    pub dropped_count: usize,
    /// Some were dropped only for being over what is kept of one provider.
    pub over_limit: bool,
}

impl Usable {
    /// Counts a dropped flavor, and records it while there is room (the
    /// message is only written then: a long answer may drop thousands).
    fn drop_flavor(
        &mut self,
        flavor_id: &str,
        reason: DropReason,
        message: impl FnOnce() -> String,
    ) {
        self.dropped_count += 1;
        if self.dropped.len() < MAX_DROPPED_FLAVORS {
            self.dropped.push(DroppedFlavor {
                flavor_id: bounded(flavor_id, MAX_DROPPED_ID_CHARS),
                reason,
                message: bounded(&message(), MAX_DROPPED_MESSAGE_CHARS),
            });
        }
    }
}

/// Sorts the flavors `asked` listed: drops our own and those that do not
/// really match (the query cannot carry regex filters) or are unavailable,
/// silently (normal filtering); drops and records those owned by another
/// address (a provider may only sell its own: the consumer reserves and buys
/// at `owner.ip`) and those that do not decode, so that one bad flavor costs
/// only itself.
pub fn usable_flavors(
    wire: &[WireFlavor],
    asked: &str,
    selector: Option<&FlavorSelector>,
    namespace: &str,
    own_node_id: &str,
) -> Usable {
    let mut out = Usable::default();
    let mut kept_bytes = 0;
    for w in wire.iter().filter(|w| w.owner.id != own_node_id) {
        // Its candidate could not be stored: one bad flavor costs only itself.
        if !fluidos_api::naming::is_object_name(&fluidos_api::naming::peering_candidate_name(
            &w.flavor_id,
        )) {
            out.drop_flavor(&w.flavor_id, DropReason::Malformed, || {
                "its flavor ID cannot name a PeeringCandidate (a Kubernetes object name)".to_owned()
            });
            continue;
        }
        if !same_endpoint(&w.owner.ip, asked) {
            out.drop_flavor(&w.flavor_id, DropReason::ForeignOwner, || {
                format!(
                    "owner.ip {:?} is not the address asked, {asked:?}",
                    w.owner.ip
                )
            });
            continue;
        }
        match w
            .to_embedded(namespace)
            .and_then(|f| Ok((f, w.parse_type()?)))
        {
            Ok((f, t)) => {
                if !(w.availability && selector.is_none_or(|s| s.matches(&t))) {
                    continue;
                }
                let size = serde_json::to_vec(&f).map_or(usize::MAX, |v| v.len());
                if size > MAX_FLAVOR_BYTES {
                    out.drop_flavor(&w.flavor_id, DropReason::Malformed, || {
                        format!("the flavor takes {size} bytes, over the {MAX_FLAVOR_BYTES} kept")
                    });
                } else if out.flavors.len() >= MAX_FLAVORS_PER_PROVIDER
                    || kept_bytes + size > MAX_PROVIDER_FLAVOR_BYTES
                {
                    out.over_limit = true;
                    out.drop_flavor(&w.flavor_id, DropReason::Other("OverLimit".into()), || {
                        format!(
                            "over what is kept of one provider ({MAX_FLAVORS_PER_PROVIDER} flavors, {MAX_PROVIDER_FLAVOR_BYTES} bytes)"
                        )
                    });
                } else {
                    kept_bytes += size;
                    out.flavors.push(f);
                }
            }
            Err(e) => out.drop_flavor(&w.flavor_id, DropReason::Malformed, || e.to_string()),
        }
    }
    out
}

/// Whether the `host:port` a flavor names as its owner is the `host:port`
/// asked. Only spellings that cannot reach another endpoint are equal: the
/// same text, IP addresses by value (`[::1]` and `[0:0::1]`), and DNS names
/// without regard to ASCII case (RFC 4343); the port must be the same
/// digits. A trailing dot is not ignored: `name` may resolve through the
/// pod's search domains (`name.<ns>.svc.cluster.local`) where `name.` cannot,
/// so they can be two hosts. Nor is a name equal to an address it resolves
/// to: resolution is the peer's to influence.
pub fn same_endpoint(owner: &str, asked: &str) -> bool {
    // The same text reaches the same place, even when it is not a clean
    // `host:port` (Go writes IPv6 hosts unbracketed).
    if owner == asked {
        return true;
    }
    match (split_host_port(owner), split_host_port(asked)) {
        (Some((oh, op)), Some((ah, ap))) => {
            op == ap
                && match (
                    oh.parse::<std::net::IpAddr>(),
                    ah.parse::<std::net::IpAddr>(),
                ) {
                    (Ok(o), Ok(a)) => o == a,
                    (Err(_), Err(_)) => oh.eq_ignore_ascii_case(ah),
                    _ => false,
                }
        }
        _ => false,
    }
}

/// `host` (IPv6 brackets removed) and the port digits of `host:port`, or
/// `None` when it is not that.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    let (host, port) = s.rsplit_once(':')?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let host = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        // An unbracketed `:` leaves the port ambiguous.
        None if host.contains(':') => return None,
        None => host,
    };
    (!host.is_empty()).then_some((host, port))
}

/// `s` cut to at most `max` characters (ending in `…` when cut), control
/// characters replaced: peer-supplied text shown by kubectl.
fn bounded(s: &str, max: usize) -> String {
    let clean = |c: char| if c.is_control() { '\u{fffd}' } else { c };
    if s.chars().count() <= max {
        return s.chars().map(clean).collect();
    }
    s.chars()
        .take(max.saturating_sub(1))
        .map(clean)
        .chain(std::iter::once('…'))
        .collect()
}

/// A new candidate for `flavor`, wanted by `solver`, listed by a provider
/// pinned to `fingerprint` (kept in [`PROVIDER_FINGERPRINT_ANNOTATION`]).
pub fn new_candidate(
    name: &str,
    namespace: &str,
    flavor: &EmbeddedFlavor,
    solver: &str,
    fingerprint: Option<Fingerprint>,
) -> PeeringCandidate {
    let mut pc = PeeringCandidate::new(
        name,
        PeeringCandidateSpec {
            interested_solver_ids: vec![solver.to_owned()],
            flavor: flavor.clone(),
            available: true,
        },
    );
    pc.metadata.namespace = Some(namespace.to_owned());
    if let Some(fp) = fingerprint {
        pc.annotations_mut()
            .insert(PROVIDER_FINGERPRINT_ANNOTATION.to_owned(), fp.to_string());
    }
    pc
}

/// The existing candidate refreshed with the listed `flavor`, `solver`'s
/// interest and the key of the provider that listed it (`fingerprint`, or
/// none over plain HTTP), or `None` when nothing changes; never takes back
/// availability a reservation holds.
///
/// A candidate pinned to a key keeps it: a listing by anyone else (another
/// key, or plain HTTP, which anyone on the LAN can stand up under a
/// KnownCluster) only adds the solver's interest, and changes neither the
/// flavor nor the pin, so the sale still goes to the key it was found with.
/// An unpinned candidate adopts the first key that lists it (pinning only
/// narrows whom the sale can go to); while a Reservation holds it, a
/// listing from another address changes nothing but the interest.
pub fn refreshed_candidate(
    existing: &PeeringCandidate,
    flavor: &EmbeddedFlavor,
    solver: &str,
    fingerprint: Option<Fingerprint>,
) -> Option<PeeringCandidate> {
    let mut pc = existing.clone();
    let mut changed = false;
    let listed_by = fingerprint.map(|f| f.to_string());
    let pinned = pc
        .annotations()
        .get(PROVIDER_FINGERPRINT_ANNOTATION)
        .cloned();
    // Candidates are named after the flavor ID, which any provider may
    // list: only the provider that first listed it (its key once known,
    // else its address) updates it, so another cannot take it over, and
    // with it a purchase in flight (the Reservation buys at the
    // candidate's owner).
    // While a Reservation holds it (a purchase may be in flight there), an
    // unpinned candidate follows only its own address; free, it follows a
    // provider that moved (plain-HTTP providers' addresses change).
    let held = pc.annotations().contains_key(HELD_BY);
    let same_address = !held || same_endpoint(&flavor.spec.owner.ip, &pc.spec.flavor.spec.owner.ip);
    let from_its_provider = match (&pinned, &listed_by) {
        (Some(pin), by) => by.as_ref() == Some(pin),
        (None, _) => same_address,
    };
    if pinned.is_none()
        && same_address
        && let Some(fp) = listed_by
    {
        pc.annotations_mut()
            .insert(PROVIDER_FINGERPRINT_ANNOTATION.to_owned(), fp);
        changed = true;
    }
    if !pc.spec.interested_solver_ids.iter().any(|s| s == solver) {
        pc.spec.interested_solver_ids.push(solver.to_owned());
        changed = true;
    }
    if !from_its_provider {
        return changed.then_some(pc);
    }
    if pc.spec.flavor.spec != flavor.spec {
        pc.spec.flavor = flavor.clone();
        changed = true;
    }
    // Listed again by its provider and held by no reservation: free.
    if !pc.spec.available && !pc.annotations().contains_key(HELD_BY) {
        pc.spec.available = true;
        changed = true;
    }
    changed.then_some(pc)
}

/// True for a free candidate its provider answered without it although it
/// matches this selector: sold out, or sold whole by a Go provider (which then
/// lists the remainder under a new flavor ID).
pub fn should_withdraw(
    pc: &PeeringCandidate,
    answers: &[ProviderAnswer],
    selector: Option<&FlavorSelector>,
) -> bool {
    let flavor = &pc.spec.flavor;
    // Every answer of its address (asked over plain HTTP and pinned, it
    // answers twice): unlisted only if one answered and none lists it.
    let from_owner: Vec<&ProviderAnswer> = answers
        .iter()
        .filter(|a| {
            a.status.outcome == ProviderOutcome::Answered
                && same_endpoint(&flavor.spec.owner.ip, &a.status.address)
        })
        .collect();
    // Past the bounds, not being kept is not being unlisted.
    if from_owner.is_empty() || from_owner.iter().any(|a| a.partial) {
        return false;
    }
    let held = pc.annotations().contains_key(HELD_BY);
    let listed = from_owner
        .iter()
        .any(|a| a.flavors.iter().any(|f| f.id() == flavor.id()));
    let matches = match flavor.spec.flavor_type.parse() {
        Ok(t) => selector.is_none_or(|s| s.matches(&t)),
        Err(_) => true,
    };
    pc.spec.available && !held && !listed && matches
}

/// How a query round ends.
#[derive(Clone, Debug, PartialEq)]
pub struct Conclusion {
    /// The status to write, when it changed.
    pub status: Option<DiscoveryStatus>,
    /// Ask again after this delay (nobody answered yet).
    pub retry_in: Option<Duration>,
}

/// The Discovery's status after a round of queries that produced `items`.
pub fn conclude(
    mut status: DiscoveryStatus,
    answers: &[ProviderAnswer],
    items: Vec<EmbeddedPeeringCandidate>,
    now: jiff::Timestamp,
) -> Conclusion {
    let now_text = crate::status::format(now);
    let asked = answers.len();
    let failed = answers
        .iter()
        .filter(|a| a.status.outcome != ProviderOutcome::Answered)
        .count();
    status.providers = Some(answers.iter().map(|a| a.status.clone()).collect());
    // Nobody answered (providers starting, briefly unreachable): ask again for
    // a while before calling it a failure.
    let answered = asked - failed;
    let waited = status
        .phase
        .start_time
        .as_deref()
        .and_then(|t| seconds_between(t, now))
        .unwrap_or(0);
    let retry_for = i64::try_from(RETRY_FOR.as_secs()).unwrap_or(i64::MAX);
    if items.is_empty() && answered == 0 && asked > 0 && waited < retry_for {
        let msg = format!("Discovery started: no provider answered yet ({asked} asked), retrying");
        if status.phase.message.as_deref() == Some(msg.as_str()) {
            return Conclusion {
                status: None,
                retry_in: Some(RETRY_EVERY),
            };
        }
        touch_at(&mut status.phase, &now_text);
        status.phase.message = Some(msg);
        return Conclusion {
            status: Some(status),
            retry_in: Some(RETRY_EVERY),
        };
    }
    if items.is_empty() {
        let msg = if asked == 0 {
            "No Flavors found: no providers known (create a KnownCluster)".to_owned()
        } else if failed == asked {
            format!("Error when getting Flavor: all {asked} providers failed")
        } else {
            format!("No Flavors found ({failed} of {asked} providers failed)")
        };
        set_phase_at(&mut status.phase, Phase::Failed, &msg, &now_text);
    } else {
        set_phase_at(
            &mut status.phase,
            Phase::Solved,
            "Discovery Solved: Peering Candidate found",
            &now_text,
        );
    }
    // The copies in the status are bounded in bytes (the candidates
    // themselves are all kept as objects, which is what the Solver picks
    // from): a status past what the API server stores would never be saved.
    let mut kept_bytes = 0;
    let items: Vec<_> = items
        .into_iter()
        .take_while(|pc| {
            kept_bytes += serde_json::to_vec(pc).map_or(usize::MAX / 2, |v| v.len());
            kept_bytes <= MAX_STATUS_CANDIDATE_BYTES
        })
        .collect();
    status.peering_candidate_list = Some(EmbeddedPeeringCandidateList {
        items,
        ..Default::default()
    });
    Conclusion {
        status: Some(status),
        retry_in: None,
    }
}

/// The copy of a candidate kept in the Discovery status.
pub fn embedded(pc: &PeeringCandidate) -> EmbeddedPeeringCandidate {
    EmbeddedPeeringCandidate {
        api_version: Some("advertisement.fluidos.eu/v1alpha1".into()),
        kind: Some("PeeringCandidate".into()),
        metadata: fluidos_api::embedded::EmbeddedObjectMeta {
            name: pc.metadata.name.clone(),
            namespace: pc.metadata.namespace.clone(),
            ..Default::default()
        },
        spec: pc.spec.clone(),
        status: pc.status.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{NOW, candidate, wire_flavor};
    use fluidos_api::PhaseStatus;

    fn running_since(start: &str) -> DiscoveryStatus {
        DiscoveryStatus {
            phase: PhaseStatus {
                phase: Phase::Running,
                message: Some("Discovery started".into()),
                start_time: Some(start.into()),
                last_change_time: Some(start.into()),
                end_time: None,
            },
            ..Default::default()
        }
    }

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn known(name: &str, address: &str, fingerprint: Option<&str>) -> KnownCluster {
        KnownCluster::new(
            name,
            fluidos_api::network::KnownClusterSpec {
                address: address.into(),
                fingerprint: fingerprint.map(Into::into),
            },
        )
    }

    #[test]
    fn known_clusters_are_asked_with_their_key_and_without_duplicates() {
        let fp: Fingerprint = FP.parse().unwrap();
        let p = providers(
            &[
                known("kc-a", "a:1", Some(FP)),
                known("kc-b", "b:1", None),
                known("kc-b2", "b:1", None),
                known("kc-bad", "c:1", Some("sha256:XYZ")),
            ],
            &[
                ProviderAddress::pinned("a:1", fp),
                ProviderAddress::plain("a:1"),
                ProviderAddress::plain("d:1"),
            ],
        );
        assert_eq!(
            p.ask,
            [
                ProviderAddress::plain("a:1"),
                ProviderAddress::pinned("a:1", fp),
                ProviderAddress::plain("b:1"),
                ProviderAddress::plain("d:1"),
            ]
        );
        let [(address, why)] = &p.refused[..] else {
            panic!("{:?}", p.refused);
        };
        assert_eq!(address, "c:1");
        assert!(
            why.starts_with("not asked: KnownCluster kc-bad has a malformed fingerprint: "),
            "{why}"
        );
        assert!(why.contains("expected sha256:"), "{why}");
    }

    #[test]
    fn candidates_carry_the_key_of_the_provider_that_listed_them() {
        let fp: Fingerprint = FP.parse().unwrap();
        let pinned = provider_answer(
            &ProviderAddress::pinned("127.0.0.1:1", fp),
            Answer::Listed(vec![wire_flavor("f1", "4", "1")].into()),
            None,
            "fluidos",
            "consumer01",
        );
        assert_eq!(pinned.fingerprint, Some(fp));
        assert_eq!(pinned.status.address, "127.0.0.1:1", "the address alone");
        let flavor = &pinned.flavors[0];
        let pc = new_candidate("pc", "fluidos", flavor, "solver-a", Some(fp));
        assert_eq!(
            pc.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
            Some(&FP.to_owned())
        );
        assert!(refreshed_candidate(&pc, flavor, "solver-a", Some(fp)).is_none());
        // Listed over plain HTTP (a keyless KnownCluster, which anyone on
        // the LAN can make) or under another key: the pin and the flavor
        // stay, only the solver's interest is added.
        let mut other = flavor.clone();
        other.spec.owner.ip = "203.0.113.9:3004".into();
        assert!(refreshed_candidate(&pc, &other, "solver-a", None).is_none());
        let mallory: Fingerprint = format!("sha256:{}", "cd".repeat(32)).parse().unwrap();
        assert!(refreshed_candidate(&pc, &other, "solver-a", Some(mallory)).is_none());
        let b = refreshed_candidate(&pc, &other, "solver-b", None).unwrap();
        assert_eq!(
            b.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
            Some(&FP.to_owned())
        );
        assert_eq!(
            b.spec.flavor.spec, flavor.spec,
            "the flavor is its provider's"
        );
        assert!(
            b.spec
                .interested_solver_ids
                .contains(&"solver-b".to_owned())
        );
        // An unpinned candidate adopts the first key that lists it.
        let unpinned = new_candidate("pc", "fluidos", flavor, "solver-a", None);
        let again = refreshed_candidate(&unpinned, flavor, "solver-a", Some(fp)).unwrap();
        assert_eq!(
            again.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
            Some(&FP.to_owned())
        );
        let plain_new = new_candidate("pc", "fluidos", flavor, "solver-a", None);
        assert!(plain_new.metadata.annotations.is_none());
        // Another address listing the same flavor ID takes over nothing of
        // an unpinned candidate a Reservation holds: neither its flavor (its
        // owner, where the purchase goes) nor a pin for its own key.
        let mut unpinned = unpinned;
        unpinned
            .annotations_mut()
            .insert(HELD_BY.to_owned(), "reservation-x".to_owned());
        let taken = refreshed_candidate(&unpinned, &other, "solver-a", Some(mallory));
        assert!(taken.is_none(), "{taken:?}");
        let b = refreshed_candidate(&unpinned, &other, "solver-b", Some(mallory)).unwrap();
        assert_eq!(b.spec.flavor.spec, flavor.spec);
        assert!(
            b.metadata
                .annotations
                .is_none_or(|a| !a.contains_key(PROVIDER_FINGERPRINT_ANNOTATION))
        );
    }

    fn answer(address: &str, a: Answer) -> ProviderAnswer {
        provider_answer(
            &ProviderAddress::plain(address),
            a,
            None,
            "fluidos",
            "consumer01",
        )
    }

    fn at(t: &str) -> jiff::Timestamp {
        t.parse().unwrap()
    }

    #[test]
    fn start_begins_new_discoveries_once() {
        let Start::Begin(st) = start(None, NOW) else {
            panic!("a new Discovery begins");
        };
        assert_eq!(st.phase.phase, Phase::Running);
        assert_eq!(st.phase.message.as_deref(), Some("Discovery started"));
        assert_eq!(st.phase.start_time.as_deref(), Some(NOW));
        assert_eq!(
            st.peering_candidate_list,
            Some(EmbeddedPeeringCandidateList::default())
        );
        assert_eq!(start(Some(&st), NOW), Start::Query);
        for done in [Phase::Solved, Phase::Failed, Phase::TimedOut, Phase::Idle] {
            let mut st = running_since(NOW);
            st.phase.phase = done;
            assert_eq!(start(Some(&st), NOW), Start::Done);
        }
    }

    #[test]
    fn answers_are_classified() {
        let ok = answer(
            OWNER,
            Answer::Listed(vec![wire_flavor("f1", "4", "1")].into()),
        );
        assert_eq!(ok.status.outcome, ProviderOutcome::Answered);
        assert_eq!((ok.status.flavors, ok.status.message.clone()), (1, None));
        // Nothing dropped: the status reads as before `dropped` existed.
        assert_eq!(
            serde_json::to_value(&ok.status).unwrap(),
            serde_json::json!({"address": OWNER, "outcome": "Answered", "flavors": 1})
        );
        let failed = answer("b:1", Answer::Failed("connection refused".into()));
        assert_eq!(failed.status.outcome, ProviderOutcome::Failed);
        assert_eq!(failed.status.message.as_deref(), Some("connection refused"));
        let slow = answer("c:1", Answer::TimedOut(Duration::from_secs(3)));
        assert_eq!(slow.status.outcome, ProviderOutcome::TimedOut);
        assert_eq!(slow.status.message.as_deref(), Some("no answer within 3s"));
        assert_eq!(
            serde_json::to_value(&slow.status).unwrap()["outcome"],
            serde_json::json!("TimedOut")
        );
    }

    #[test]
    fn flavors_the_client_did_not_read_are_dropped_over_the_limit() {
        let listing = FlavorListing {
            flavors: vec![wire_flavor("f1", "4", "1")],
            unread: 40,
            unread_ids: vec!["big".into()],
        };
        let a = answer(OWNER, Answer::Listed(listing));
        assert_eq!(a.status.outcome, ProviderOutcome::Answered);
        assert_eq!((a.status.flavors, a.status.dropped_count), (1, 40));
        let message = a.status.message.unwrap();
        assert!(
            message.starts_with("40 listed flavors not read"),
            "{message}"
        );
        let dropped = a.status.dropped.unwrap();
        assert_eq!(dropped.len(), 1);
        assert_eq!(
            (dropped[0].flavor_id.as_str(), &dropped[0].reason),
            ("big", &DropReason::Other("OverLimit".into()))
        );
    }

    #[test]
    fn filters_own_unavailable_and_non_matching_flavors() {
        let sel = fluidos_api::solver::Selector {
            flavor_type: "K8Slice".into(),
            filters: Some(
                serde_json::json!({"cpuFilter": {"name": "Range", "data": {"min": "2"}}}),
            ),
        }
        .parse()
        .unwrap();
        let mut own = wire_flavor("c", "4", "1");
        own.owner.id = "me".into();
        let mut gone = wire_flavor("d", "4", "1");
        gone.availability = false;
        let list = vec![
            wire_flavor("a", "4", "1"),
            wire_flavor("b", "1", "1"),
            own,
            gone,
        ];
        let kept = usable_flavors(&list, OWNER, Some(&sel), "fluidos", "me");
        assert_eq!(
            kept.flavors.iter().map(|f| f.id()).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(
            kept.flavors[0].metadata.namespace.as_deref(),
            Some("fluidos")
        );
        let all = usable_flavors(&list, OWNER, None, "fluidos", "me");
        assert_eq!(all.flavors.len(), 2);
        // Normal filtering, not drops: nothing is recorded.
        for u in [kept, all] {
            assert_eq!((u.dropped, u.dropped_count), (vec![], 0));
        }
    }

    /// The fixture flavors' `owner.ip`.
    const OWNER: &str = "127.0.0.1:1";

    fn owned_by(id: &str, ip: &str) -> WireFlavor {
        let mut w = wire_flavor(id, "4", "1");
        w.owner.ip = ip.into();
        w
    }

    fn malformed(id: &str, type_: serde_json::Value) -> WireFlavor {
        let mut w = wire_flavor(id, "4", "1");
        w.type_ = serde_json::from_value(type_).unwrap();
        w
    }

    fn ids(u: &Usable) -> Vec<&str> {
        u.flavors.iter().map(|f| f.id()).collect()
    }

    #[test]
    fn flavors_owned_by_another_address_are_dropped_and_recorded() {
        let list = vec![
            owned_by("mine", OWNER),
            owned_by("elsewhere", "203.0.113.9:1"),
            owned_by("other-port", "127.0.0.1:2"),
            owned_by("by-name", "localhost:1"),
            owned_by("no-owner", ""),
        ];
        let a = answer(OWNER, Answer::Listed(list.into()));
        assert_eq!(
            a.flavors.iter().map(|f| f.id()).collect::<Vec<_>>(),
            ["mine"]
        );
        assert_eq!((a.status.flavors, a.status.dropped_count), (1, 4));
        let dropped = a.status.dropped.clone().unwrap();
        assert_eq!(
            dropped
                .iter()
                .map(|d| d.flavor_id.as_str())
                .collect::<Vec<_>>(),
            ["elsewhere", "other-port", "by-name", "no-owner"]
        );
        assert!(dropped.iter().all(|d| d.reason == DropReason::ForeignOwner));
        assert_eq!(
            dropped[0].message,
            r#"owner.ip "203.0.113.9:1" is not the address asked, "127.0.0.1:1""#
        );
        let json = serde_json::to_value(&a.status).unwrap();
        assert_eq!(json["droppedCount"], 4);
        assert_eq!(
            json["dropped"][0],
            serde_json::json!({
                "flavorID": "elsewhere",
                "reason": "ForeignOwner",
                "message": dropped[0].message,
            })
        );
    }

    #[test]
    fn what_one_provider_may_put_in_a_discovery_is_bounded() {
        // A flavor ID that cannot name a candidate costs only itself.
        let list = vec![wire_flavor("Bad_ID", "4", "1"), wire_flavor("a", "4", "1")];
        let u = usable_flavors(&list, OWNER, None, "fluidos", "me");
        assert_eq!(ids(&u), ["a"]);
        assert_eq!(u.dropped[0].reason, DropReason::Malformed);
        // A huge flavor.
        let mut huge = wire_flavor("huge", "4", "1");
        huge.owner.domain = "d".repeat(MAX_FLAVOR_BYTES);
        let u = usable_flavors(&[huge], OWNER, None, "fluidos", "me");
        assert!(u.flavors.is_empty());
        assert!(
            u.dropped[0].message.contains("bytes, over"),
            "{:?}",
            u.dropped
        );
        // Too many.
        let many: Vec<_> = (0..MAX_FLAVORS_PER_PROVIDER + 5)
            .map(|i| wire_flavor(&format!("f{i}"), "4", "1"))
            .collect();
        let u = usable_flavors(&many, OWNER, None, "fluidos", "me");
        assert_eq!(u.flavors.len(), MAX_FLAVORS_PER_PROVIDER);
        assert_eq!(u.dropped_count, 5);
        assert_eq!(u.dropped[0].reason, DropReason::Other("OverLimit".into()));
    }

    #[test]
    fn a_malformed_flavor_costs_only_itself() {
        let list = vec![
            wire_flavor("a", "4", "1"),
            malformed(
                "bad-data",
                serde_json::json!({"name": "k8slice", "data": {"charateristics": 7}}),
            ),
            malformed(
                "bad-type",
                serde_json::json!({"name": "teleporter", "data": {}}),
            ),
            wire_flavor("b", "4", "1"),
        ];
        let u = usable_flavors(&list, OWNER, None, "fluidos", "me");
        assert_eq!(ids(&u), ["a", "b"]);
        assert_eq!(u.dropped_count, 2);
        assert_eq!(
            u.dropped
                .iter()
                .map(|d| (d.flavor_id.as_str(), &d.reason))
                .collect::<Vec<_>>(),
            [
                ("bad-data", &DropReason::Malformed),
                ("bad-type", &DropReason::Malformed)
            ]
        );
        assert!(
            u.dropped.iter().all(|d| !d.message.is_empty()),
            "{:?}",
            u.dropped
        );
        assert!(
            u.dropped[0].message.contains("flavor.type"),
            "{:?}",
            u.dropped[0]
        );
    }

    #[test]
    fn at_most_ten_drops_are_kept_with_the_full_count_and_bounded_text() {
        let mut list: Vec<_> = (0..25)
            .map(|i| owned_by(&format!("f{i}"), "203.0.113.9:1"))
            .collect();
        list[0].flavor_id = format!("\u{1b}[31m{}", "é".repeat(400));
        list[1].owner.ip = format!("{}:1", "h".repeat(1000));
        let u = usable_flavors(&list, OWNER, None, "fluidos", "me");
        assert!(u.flavors.is_empty());
        assert_eq!(
            (u.dropped.len(), u.dropped_count),
            (MAX_DROPPED_FLAVORS, 25)
        );
        let long = &u.dropped[0].flavor_id;
        assert_eq!(long.chars().count(), MAX_DROPPED_ID_CHARS);
        assert!(
            long.starts_with("\u{fffd}[31mé") && long.ends_with("é…"),
            "{long}"
        );
        let message = &u.dropped[1].message;
        assert_eq!(message.chars().count(), MAX_DROPPED_MESSAGE_CHARS);
        assert!(message.ends_with('…'));
        assert_eq!(u.dropped[9].flavor_id, "f9");
    }

    #[test]
    fn our_own_flavors_are_skipped_without_a_record() {
        let mut own = owned_by("relayed", "203.0.113.9:1");
        own.owner.id = "me".into();
        let u = usable_flavors(
            &[own, wire_flavor("a", "4", "1")],
            OWNER,
            None,
            "fluidos",
            "me",
        );
        assert_eq!(ids(&u), ["a"]);
        assert_eq!((u.dropped, u.dropped_count), (vec![], 0));
    }

    #[test]
    fn an_owner_is_the_address_asked_only_when_nothing_else_can_be_reached() {
        for (owner, asked) in [
            ("127.0.0.1:1", "127.0.0.1:1"),
            ("Provider.Example:443", "provider.example:443"),
            ("[::1]:8080", "[0:0::1]:8080"),
            ("[FD00::A]:1", "[fd00::a]:1"),
            ("fd00::1:30000", "fd00::1:30000"),
        ] {
            assert!(same_endpoint(owner, asked), "{owner} vs {asked}");
        }
        for (owner, asked) in [
            ("127.0.0.1:2", "127.0.0.1:1"),
            ("127.0.0.1:01", "127.0.0.1:1"),
            ("localhost:1", "127.0.0.1:1"),
            ("provider.example.:443", "provider.example:443"),
            ("provider.example:443", "provider.example.:443"),
            ("127.0.0.2:1", "127.0.0.1:1"),
            ("[::ffff:127.0.0.1]:1", "127.0.0.1:1"),
            ("127.0.0.1", "127.0.0.1:1"),
            ("", "127.0.0.1:1"),
            (":1", "[::]:1"),
            ("::1:1", "[::1]:1"),
            ("http://127.0.0.1:1", "127.0.0.1:1"),
            ("127.0.0.1:1/x", "127.0.0.1:1"),
            ("127.0.0.1:1", "127.0.0.1:1x"),
        ] {
            assert!(!same_endpoint(owner, asked), "{owner} vs {asked}");
        }
    }

    #[test]
    fn candidates_are_refreshed_only_when_something_changed() {
        let pc = candidate("f1", "4", "1");
        let same = pc.spec.flavor.clone();
        let fresh = refreshed_candidate(&pc, &same, "solver-a", None).unwrap();
        assert_eq!(fresh.spec.interested_solver_ids, ["solver-a"]);
        assert!(refreshed_candidate(&fresh, &same, "solver-a", None).is_none());

        let bigger = wire_flavor("f1", "8", "1").to_embedded("fluidos").unwrap();
        let grown = refreshed_candidate(&fresh, &bigger, "solver-a", None).unwrap();
        assert_eq!(grown.spec.flavor.spec, bigger.spec);

        // Listed again and held by nobody: free again; held: stays taken.
        let mut taken = fresh.clone();
        taken.spec.available = false;
        assert!(
            refreshed_candidate(&taken, &same, "solver-a", None)
                .unwrap()
                .spec
                .available
        );
        taken.metadata.annotations = Some([(HELD_BY.to_owned(), "fluidos/r".to_owned())].into());
        assert!(refreshed_candidate(&taken, &same, "solver-a", None).is_none());

        let new = new_candidate("peeringcandidate-f1", "fluidos", &same, "solver-b", None);
        assert!(new.spec.available);
        assert_eq!(new.spec.interested_solver_ids, ["solver-b"]);
    }

    #[test]
    fn only_free_unlisted_candidates_of_an_answering_provider_are_withdrawn() {
        let pc = candidate("f1", "4", "1");
        let listed = answer(
            "127.0.0.1:1",
            Answer::Listed(vec![wire_flavor("f1", "4", "1")].into()),
        );
        let sold_out = answer("127.0.0.1:1", Answer::Listed(FlavorListing::default()));
        let down = answer("127.0.0.1:1", Answer::Failed("down".into()));
        assert!(!should_withdraw(&pc, std::slice::from_ref(&listed), None));
        assert!(
            !should_withdraw(&pc, &[sold_out.clone(), listed], None),
            "listed in one of its address's answers"
        );
        assert!(should_withdraw(&pc, std::slice::from_ref(&sold_out), None));
        assert!(
            !should_withdraw(&pc, &[down], None),
            "no answer proves nothing"
        );
        let partial = answer(
            "127.0.0.1:1",
            Answer::Listed(FlavorListing {
                unread: 3,
                ..FlavorListing::default()
            }),
        );
        assert!(partial.partial);
        assert!(
            !should_withdraw(&pc, &[partial], None),
            "an unread flavor may be this one"
        );
        let mut held = pc.clone();
        held.metadata.annotations = Some([(HELD_BY.to_owned(), "fluidos/r".to_owned())].into());
        assert!(!should_withdraw(
            &held,
            std::slice::from_ref(&sold_out),
            None
        ));
        let service_only = fluidos_api::solver::Selector {
            flavor_type: "Service".into(),
            filters: None,
        }
        .parse()
        .unwrap();
        assert!(
            !should_withdraw(&pc, &[sold_out], Some(&service_only)),
            "a search for other flavors says nothing about this one"
        );
    }

    #[test]
    fn a_round_ends_solved_failed_or_retrying() {
        let now = at("2026-12-01T10:00:05Z");
        let pc = embedded(&candidate("f1", "4", "1"));
        let up = || {
            answer(
                OWNER,
                Answer::Listed(vec![wire_flavor("f1", "4", "1")].into()),
            )
        };
        let down = || answer("b:1", Answer::Failed("down".into()));

        let c = conclude(running_since(NOW), &[up(), down()], vec![pc], now);
        let st = c.status.unwrap();
        assert_eq!(st.phase.phase, Phase::Solved);
        assert_eq!(
            st.phase.message.as_deref(),
            Some("Discovery Solved: Peering Candidate found")
        );
        assert_eq!(st.providers.as_ref().map(Vec::len), Some(2));
        assert_eq!(st.peering_candidate_list.unwrap().items.len(), 1);
        assert_eq!(c.retry_in, None);

        // Nobody answered yet: retry, saying so once.
        let c = conclude(running_since(NOW), &[down()], vec![], now);
        assert_eq!(c.retry_in, Some(RETRY_EVERY));
        let st = c.status.unwrap();
        assert_eq!(st.phase.phase, Phase::Running);
        assert_eq!(
            st.phase.message.as_deref(),
            Some("Discovery started: no provider answered yet (1 asked), retrying")
        );
        let again = conclude(st, &[down()], vec![], now);
        assert_eq!((again.status, again.retry_in), (None, Some(RETRY_EVERY)));

        // ...until RETRY_FOR has passed.
        let late = at("2026-12-01T10:00:20Z");
        let c = conclude(running_since(NOW), &[down()], vec![], late);
        let st = c.status.unwrap();
        assert_eq!(st.phase.phase, Phase::Failed);
        assert_eq!(
            st.phase.message.as_deref(),
            Some("Error when getting Flavor: all 1 providers failed")
        );

        let c = conclude(running_since(NOW), &[], vec![], now);
        assert_eq!(
            c.status.unwrap().phase.message.as_deref(),
            Some("No Flavors found: no providers known (create a KnownCluster)")
        );
        let c = conclude(
            running_since(NOW),
            &[
                answer("a:1", Answer::Listed(FlavorListing::default())),
                down(),
            ],
            vec![],
            now,
        );
        assert_eq!(
            c.status.unwrap().phase.message.as_deref(),
            Some("No Flavors found (1 of 2 providers failed)")
        );
    }
}

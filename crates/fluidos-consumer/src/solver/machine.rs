//! The Solver's state machine as a pure function: from the Solver, what the
//! executor observed (candidates, its Discovery, Reservation and Allocations)
//! and the time, to the new status, the writes to make and when to look again.
//!
//! It follows the Go node's `solver_controller.go` (fluidos-node.md §3.5):
//! the same sub-phases, messages and timeouts. Several steps that need no one
//! else's progress are taken in one go, as the executor would otherwise pay a
//! status round trip per step.

use std::time::Duration;

use fluidos_api::advertisement::DiscoverySpec;
use fluidos_api::allocation::{AllocationSpec, AllocationState};
use fluidos_api::common::GenericRef;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::reservation::ReservationSpec;
use fluidos_api::solver::{ChosenCandidate, FlavorSelector, SolverStatus};
use fluidos_api::{
    Allocation, Discovery, NodeIdentity, PeeringCandidate, Phase, PhaseStatus, Reservation, Solver,
    naming,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::purchase::configuration_for;
use crate::ranking::{CandidateFacts, rank};
use crate::status::{seconds_between, set_phase_at, touch_at};

/// How often a running phase is looked at again, so timeouts fire on time.
pub const POLL: Duration = Duration::from_secs(5);

/// How many steps one reconcile may take before handing back.
const MAX_STEPS: usize = 12;

/// How many refused candidates a Solver moves on from before it fails.
pub const MAX_REFUSED: usize = 5;

/// What the Solver's timeouts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// How long a running phase may last without progress (upstream: 2 min).
    pub phase: Duration,
    /// How long the peering phase may last (upstream: 5 min).
    pub peering: Duration,
}

/// What the executor read for one reconcile.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// Every PeeringCandidate in the namespace.
    pub candidates: Vec<PeeringCandidate>,
    /// The candidates were not read (most steps do not need them, and a
    /// list costs more than the rest of a reconcile): a plan that looked at
    /// them says so in [`Plan::needs_candidates`].
    pub candidates_unread: bool,
    /// The object named `discovery-<solver>`, whoever owns it.
    pub discovery: Option<Discovery>,
    /// The object named `reservation-<solver>`, whoever owns it.
    pub reservation: Option<Reservation>,
    /// Every Allocation in the namespace.
    pub allocations: Vec<Allocation>,
}

/// Which child kinds the Solver owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    /// `Discovery`
    Discovery,
    /// `Reservation`
    Reservation,
}

/// A write the executor makes, in order, before the status.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Delete a child: one an earlier Solver of the same name left behind,
    /// or this Solver's finished Discovery, to search again.
    DeleteChild {
        /// Its kind.
        kind: ChildKind,
        /// Its name.
        name: String,
    },
    /// Create the Discovery (an existing one is adopted by the next reconcile).
    CreateDiscovery(Box<Discovery>),
    /// Set a candidate's `interestedSolverIDs` to this list.
    MarkInterest {
        /// PeeringCandidate name.
        candidate: String,
        /// The whole new list.
        interested: Vec<String>,
    },
    /// Delete this Solver's Reservation that a provider refused, to try
    /// another candidate under the same name.
    DeleteRefusedReservation(String),
    /// Server-side apply of the Reservation.
    ApplyReservation(Box<Reservation>),
    /// Server-side apply of the Allocation.
    ApplyAllocation(Box<Allocation>),
}

/// When to reconcile the Solver again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Only when something changes.
    AwaitChange,
    /// After this delay (zero: at once).
    Requeue(Duration),
}

/// The outcome of one transition.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The status to write (unchanged when nothing happened).
    pub status: SolverStatus,
    /// Writes to make first.
    pub effects: Vec<Effect>,
    /// When to look again.
    pub next: Next,
    /// Decided without candidates that it looked at: read them and plan
    /// again (nothing of this plan may be applied).
    pub needs_candidates: bool,
}

/// Everything one transition needs besides what was observed.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The Solver, with the status as last written.
    pub solver: &'a Solver,
    /// This node (the buyer of any Reservation).
    pub identity: &'a NodeIdentity,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Now.
    pub now: jiff::Timestamp,
}

/// True once the Solver failed or timed out: nothing more happens to it.
pub fn is_over(solver: &Solver) -> bool {
    solver
        .status
        .as_ref()
        .and_then(|s| s.solver_phase.as_ref())
        .is_some_and(|p| matches!(p.phase, Phase::Failed | Phase::TimedOut))
}

/// Whether a plan made on candidates read from the API server's watch cache
/// may stand. That read does not wait for the cache to catch up with the
/// latest writes (a consistent list of a kind nobody wrote lately waits up to
/// one 100 ms progress-notify period), so it may miss what was just written:
/// the plan stands only when the read holds every candidate the Solver's
/// Discovery reports, and only when it does not end the Solver (a failure is
/// decided on a consistent read).
pub fn cached_candidates_suffice(observed: &Observed, plan: &Plan) -> bool {
    let reported = observed
        .discovery
        .as_ref()
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.peering_candidate_list.as_ref())
        .map(|l| l.items.as_slice())
        .unwrap_or_default();
    let all_seen = reported.iter().all(|reported| {
        reported.metadata.name.as_deref().is_none_or(|name| {
            observed
                .candidates
                .iter()
                .any(|pc| pc.metadata.name.as_deref() == Some(name))
        })
    });
    let ends = plan
        .status
        .solver_phase
        .as_ref()
        .is_some_and(|p| matches!(p.phase, Phase::Failed | Phase::TimedOut));
    all_seen && !ends
}

/// Computes the Solver's next status and writes.
pub fn plan(input: &Input<'_>, observed: &Observed) -> Plan {
    let solver = input.solver;
    let now = crate::status::format(input.now);
    let mut machine = Machine {
        input,
        observed,
        now,
        st: solver.status.clone().unwrap_or_default(),
        effects: Vec::new(),
        selector: None,
        stale_checked: Vec::new(),
        deleted: Vec::new(),
        refused: solver
            .status
            .as_ref()
            .and_then(|s| s.chosen_candidate.as_ref())
            .map(|c| c.refused.clone())
            .unwrap_or_default(),
        looked_at_candidates: std::cell::Cell::new(false),
    };
    match machine.phase() {
        Phase::Failed | Phase::TimedOut => return machine.finish(Next::AwaitChange),
        Phase::Solved | Phase::Running | Phase::Idle => {}
        _ => machine.set(Phase::Idle, "Solver initialized"),
    }
    match solver.spec.selector.as_ref().map(|s| s.parse()).transpose() {
        Ok(selector) => machine.selector = selector,
        Err(e) => {
            machine.set(
                Phase::Failed,
                &format!("Error when finding a candidate: invalid selector: {e}"),
            );
            return machine.finish(Next::AwaitChange);
        }
    }
    let Some(owner) = solver.controller_owner_ref(&()) else {
        // Every stored object has a UID; without one nothing can be owned.
        machine.set(
            Phase::Failed,
            "Error when finding a candidate: the Solver has no metadata.uid",
        );
        return machine.finish(Next::AwaitChange);
    };
    let mut next = Next::Requeue(Duration::ZERO);
    for _ in 0..MAX_STEPS {
        next = match machine.step(&owner) {
            Ok(next) => next,
            Err(Fail(message)) => {
                machine.set(Phase::Failed, &message);
                Next::AwaitChange
            }
        };
        if next != Next::Requeue(Duration::ZERO) {
            break;
        }
    }
    machine.finish(next)
}

/// Ends the Solver `Failed` with this message.
struct Fail(String);

struct Machine<'a> {
    input: &'a Input<'a>,
    observed: &'a Observed,
    now: String,
    st: SolverStatus,
    effects: Vec<Effect>,
    selector: Option<FlavorSelector>,
    /// Children already checked for a stale owner (deleted at most once).
    stale_checked: Vec<ChildKind>,
    /// Children deleted in this reconcile: absent from here on.
    deleted: Vec<ChildKind>,
    /// Candidates refused as not available (kept in
    /// `status.chosenCandidate.refused`): not tried again.
    refused: Vec<String>,
    /// The candidates were looked at.
    looked_at_candidates: std::cell::Cell<bool>,
}

impl<'a> Machine<'a> {
    fn finish(self, next: Next) -> Plan {
        Plan {
            needs_candidates: self.observed.candidates_unread && self.looked_at_candidates.get(),
            status: self.st,
            effects: self.effects,
            next,
        }
    }

    fn phase(&self) -> Phase {
        self.st
            .solver_phase
            .as_ref()
            .map(|p| p.phase.clone())
            .unwrap_or_default()
    }

    fn set(&mut self, phase: Phase, message: &str) {
        let p = self
            .st
            .solver_phase
            .get_or_insert_with(PhaseStatus::default);
        set_phase_at(p, phase, message, &self.now);
    }

    /// Sets the phase only when phase or message differ, so repeated
    /// reconciles do not move `lastChangeTime` (which timeouts measure from).
    fn set_if_changed(&mut self, phase: Phase, message: &str) {
        let same = self
            .st
            .solver_phase
            .as_ref()
            .is_some_and(|p| p.phase == phase && p.message.as_deref() == Some(message));
        if !same {
            self.set(phase, message);
        }
    }

    fn bump(&mut self) {
        let p = self
            .st
            .solver_phase
            .get_or_insert_with(PhaseStatus::default);
        touch_at(p, &self.now);
    }

    fn expired(&self, limit: Duration) -> bool {
        self.st
            .solver_phase
            .as_ref()
            .and_then(|p| p.last_change_time.as_deref())
            .and_then(|t| seconds_between(t, self.input.now))
            .is_some_and(|s| s > i64::try_from(limit.as_secs()).unwrap_or(i64::MAX))
    }

    fn name(&self) -> String {
        self.input.solver.name_any()
    }

    fn namespace(&self) -> String {
        self.input.solver.namespace().unwrap_or_default()
    }

    /// The child if this Solver owns it; one left by an earlier Solver of
    /// the same name is deleted (once) and treated as absent.
    fn own_child<K: Resource>(&mut self, kind: ChildKind, found: Option<&'a K>) -> Option<&'a K> {
        if self.deleted.contains(&kind) {
            return None;
        }
        let obj = found?;
        let uid = self.input.solver.uid();
        if obj
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == uid.as_ref())
        {
            return Some(obj);
        }
        if !self.stale_checked.contains(&kind) {
            self.stale_checked.push(kind);
            self.effects.push(Effect::DeleteChild {
                kind,
                name: obj.meta().name.clone().unwrap_or_default(),
            });
        }
        None
    }

    fn discovery(&mut self) -> Option<&'a Discovery> {
        let observed = self.observed;
        self.own_child(ChildKind::Discovery, observed.discovery.as_ref())
    }

    fn reservation(&mut self) -> Option<&'a Reservation> {
        let observed = self.observed;
        self.own_child(ChildKind::Reservation, observed.reservation.as_ref())
    }

    /// Available candidates matching the selector, best first, with the reason.
    fn candidates(&self) -> RankedCandidates<'a> {
        self.looked_at_candidates.set(true);
        let mut ranked = ranked_candidates(&self.observed.candidates, self.selector.as_ref());
        ranked
            .ordered
            .retain(|pc| !self.refused.iter().any(|r| *r == pc.name_any()));
        ranked
    }

    fn interest(&mut self, pc: &PeeringCandidate) {
        let me = self.name();
        if pc.spec.interested_solver_ids.contains(&me) {
            return;
        }
        let candidate = pc.name_any();
        if self
            .effects
            .iter()
            .any(|e| matches!(e, Effect::MarkInterest { candidate: c, .. } if *c == candidate))
        {
            return;
        }
        let mut interested = pc.spec.interested_solver_ids.clone();
        interested.push(me);
        self.effects.push(Effect::MarkInterest {
            candidate,
            interested,
        });
    }

    fn choose(&mut self, pc: &PeeringCandidate, reason: String) {
        self.interest(pc);
        self.st.chosen_candidate = Some(ChosenCandidate {
            name: pc.name_any(),
            reason,
            refused: self.refused.clone(),
        });
    }

    fn step(&mut self, owner: &OwnerReference) -> Result<Next, Fail> {
        let spec = &self.input.solver.spec;
        let find = spec.find_candidate.unwrap_or(false);
        let buy = spec.reserve_and_buy.unwrap_or(false);
        let peer = spec.establish_peering.unwrap_or(false);

        if find {
            if self.st.find_candidate != Some(Phase::Solved) {
                return Ok(self.find_candidate(owner));
            }
        } else if self.phase() == Phase::Idle {
            self.set(Phase::Solved, "No need to find a candidate");
        }

        if !buy {
            self.set_if_changed(Phase::Solved, "No need to reserve and buy the resources");
            return Ok(Next::AwaitChange);
        }
        if self.st.reserve_and_buy != Some(Phase::Solved) {
            return self.reserve_and_buy(owner);
        }

        if !peer {
            self.set_if_changed(Phase::Solved, "No need to establish a peering");
            return Ok(Next::AwaitChange);
        }
        if self.st.peering != Some(Phase::Solved) {
            return self.peering(owner);
        }
        self.set_if_changed(Phase::Solved, "Solver has completed all the phases");
        Ok(Next::AwaitChange)
    }

    fn find_candidate(&mut self, owner: &OwnerReference) -> Next {
        match self.st.find_candidate.clone() {
            None | Some(Phase::Unset) => {
                self.st.find_candidate = Some(Phase::Idle);
                self.set(Phase::Running, "Solver is running");
                Next::Requeue(Duration::ZERO)
            }
            Some(Phase::Idle) => {
                let RankedCandidates { ordered, reason } = self.candidates();
                if let Some(best) = ordered.first().copied() {
                    self.choose(best, reason);
                    self.st.find_candidate = Some(Phase::Solved);
                    self.set(Phase::Running, "Solver has found a candidate");
                } else {
                    self.st.find_candidate = Some(Phase::Running);
                    self.set(Phase::Running, "Solver is trying a Discovery");
                }
                Next::Requeue(Duration::ZERO)
            }
            Some(Phase::Running) => self.discover(owner),
            Some(Phase::Failed) => {
                // The Discovery's message says what the providers answered.
                self.set(Phase::Failed, "Solver has not found any candidate");
                Next::AwaitChange
            }
            Some(_) => Next::AwaitChange,
        }
    }

    fn discover(&mut self, owner: &OwnerReference) -> Next {
        if self.expired(self.input.timeouts.phase) {
            self.set(
                Phase::TimedOut,
                "Solver has expired before finding a candidate",
            );
            return Next::AwaitChange;
        }
        let Some(discovery) = self.discovery() else {
            let discovery = self.new_discovery(owner);
            self.effects
                .push(Effect::CreateDiscovery(Box::new(discovery)));
            // The new Discovery has no phase yet: its status change wakes us.
            return Next::Requeue(POLL);
        };
        let phase = discovery
            .status
            .as_ref()
            .map(|s| s.phase.phase.clone())
            .unwrap_or_default();
        match phase {
            Phase::Solved => {
                self.st.discovery_phase = Some(Phase::Solved);
                let RankedCandidates { ordered, reason } = self.candidates();
                match ordered.first().copied() {
                    Some(best) => {
                        self.choose(best, reason);
                        self.st.find_candidate = Some(Phase::Solved);
                        self.set(Phase::Running, "Solver has completed the Discovery phase");
                    }
                    None => self.st.find_candidate = Some(Phase::Failed),
                }
                Next::Requeue(Duration::ZERO)
            }
            Phase::Failed => {
                self.st.discovery_phase = Some(Phase::Failed);
                self.st.find_candidate = Some(Phase::Failed);
                self.bump();
                Next::Requeue(Duration::ZERO)
            }
            Phase::TimedOut => {
                self.st.discovery_phase = Some(Phase::TimedOut);
                self.st.find_candidate = Some(Phase::TimedOut);
                self.set(
                    Phase::TimedOut,
                    "Discovery has expired before finding a candidate",
                );
                Next::AwaitChange
            }
            other => {
                if self.st.discovery_phase.as_ref() != Some(&other) && other != Phase::Unset {
                    self.st.discovery_phase = Some(other);
                    self.bump();
                }
                Next::Requeue(POLL)
            }
        }
    }

    fn new_discovery(&self, owner: &OwnerReference) -> Discovery {
        let solver = self.input.solver;
        let mut d = Discovery::new(
            &naming::discovery_name(&self.name()),
            DiscoverySpec {
                solver_id: self.name(),
                selector: solver.spec.selector.clone(),
                subscribe: false,
            },
        );
        d.meta_mut().namespace = Some(self.namespace());
        d.meta_mut().owner_references = Some(vec![owner.clone()]);
        d
    }

    fn reserve_and_buy(&mut self, owner: &OwnerReference) -> Result<Next, Fail> {
        let find = self.input.solver.spec.find_candidate.unwrap_or(false);
        if find && self.st.find_candidate != Some(Phase::Solved) {
            return Ok(Next::AwaitChange);
        }
        match self.st.reserve_and_buy.clone() {
            None | Some(Phase::Unset) => {
                self.st.reserve_and_buy = Some(Phase::Idle);
                self.bump();
                Ok(Next::Requeue(Duration::ZERO))
            }
            Some(Phase::Idle) => {
                if self.reservation().is_some() {
                    self.st.reserve_and_buy = Some(Phase::Running);
                    return Ok(Next::Requeue(Duration::ZERO));
                }
                let reservation = self.new_reservation(owner)?;
                self.effects
                    .push(Effect::ApplyReservation(Box::new(reservation)));
                self.st.reserve_and_buy = Some(Phase::Running);
                self.set(Phase::Running, "Reservation created");
                Ok(Next::Requeue(POLL))
            }
            Some(Phase::Running) => self.follow_reservation(owner),
            Some(Phase::Failed) => {
                self.set(Phase::Failed, "Solver has failed to reserve the resources");
                Ok(Next::AwaitChange)
            }
            Some(_) => Ok(Next::AwaitChange),
        }
    }

    /// The Reservation for the best candidate, preferring the one chosen
    /// while finding if it is still free.
    fn new_reservation(&mut self, owner: &OwnerReference) -> Result<Reservation, Fail> {
        const FAILED: &str = "Error when reserving and buying the resources";
        let RankedCandidates { ordered, reason } = self.candidates();
        let chosen = self.st.chosen_candidate.as_ref().map(|c| c.name.clone());
        let pick = match chosen.and_then(|c| ordered.iter().find(|pc| pc.name_any() == c)) {
            Some(pc) => Some(*pc),
            None => {
                let first = ordered.first().copied();
                if let Some(f) = first {
                    self.st.chosen_candidate = Some(ChosenCandidate {
                        name: f.name_any(),
                        reason,
                        refused: self.refused.clone(),
                    });
                }
                first
            }
        };
        let Some(pc) = pick else {
            return Err(Fail(format!(
                "{FAILED}: no available PeeringCandidate matches the selector"
            )));
        };
        self.interest(pc);
        let flavor: FlavorTypeData = pc
            .spec
            .flavor
            .spec
            .flavor_type
            .parse()
            .map_err(|e| Fail(format!("{FAILED}: {e}")))?;
        let configuration = configuration_for(self.selector.as_ref(), &flavor)
            .map_err(|e| Fail(format!("{FAILED}: {e}")))?;
        let seller = &pc.spec.flavor.spec.owner;
        let ns = self.namespace();
        let mut r = Reservation::new(
            &naming::reservation_name(&self.name()),
            ReservationSpec {
                solver_id: self.name(),
                buyer: self.input.identity.clone(),
                seller: NodeIdentity {
                    domain: seller.domain.clone(),
                    node_id: seller.node_id.clone(),
                    ip: seller.ip.clone(),
                    additional_information: None,
                },
                configuration,
                reserve: Some(true),
                purchase: Some(true),
                peering_candidate: Some(GenericRef::named(&ns, pc.name_any())),
                ingress_telemetry_endpoint: None,
            },
        );
        r.meta_mut().namespace = Some(ns);
        r.meta_mut().owner_references = Some(vec![owner.clone()]);
        Ok(r)
    }

    fn follow_reservation(&mut self, owner: &OwnerReference) -> Result<Next, Fail> {
        /// How long the Solver waits for a purchase sent and not answered:
        /// the Reservation's limit for asking again, and a minute more.
        const PURCHASE_WAIT_SECS: i64 = 660;
        // A purchase sent and not answered may have sold: the Reservation
        // keeps asking (up to `UNANSWERED_PURCHASE_LIMIT`, 10 min) and ends
        // either way; the Solver waits for that rather than abandon a sale.
        let purchase_in_flight = self
            .reservation()
            .and_then(|r| r.status.as_ref())
            .is_some_and(|s| {
                s.phase.phase == Phase::Running
                    && s.purchase_phase == Some(Phase::Running)
                    && s.purchase_attempted_at
                        .as_deref()
                        .and_then(|t| seconds_between(t, self.input.now))
                        // Bounded here too: a provider that refuses the
                        // connection is retried by the Reservation without
                        // that limit.
                        .is_some_and(|waited| waited <= PURCHASE_WAIT_SECS)
            });
        if self.expired(self.input.timeouts.phase) && !purchase_in_flight {
            self.set(
                Phase::TimedOut,
                "Solver has expired before reserving the resources",
            );
            return Ok(Next::AwaitChange);
        }
        let Some(r) = self.reservation() else {
            self.st.reserve_and_buy = Some(Phase::Idle);
            return Ok(Next::Requeue(Duration::ZERO));
        };
        let rs = r.status.clone().unwrap_or_default();
        if let Some(next) = self.move_on_from_refused(r, &rs, owner) {
            return Ok(next);
        }
        Ok(match rs.phase.phase {
            Phase::Solved => {
                self.st.reservation_phase = Some(Phase::Solved);
                self.st.reserve_and_buy = Some(Phase::Solved);
                self.set(Phase::Running, "Reservation: Flavor reserved and purchased");
                Next::Requeue(Duration::ZERO)
            }
            Phase::Failed => {
                self.st.reservation_phase = Some(Phase::Failed);
                self.st.reserve_and_buy = Some(Phase::Failed);
                self.set(
                    Phase::Failed,
                    "Reservation: Flavor reservation and purchase failed",
                );
                Next::AwaitChange
            }
            Phase::Running => {
                self.st.reservation_phase = Some(Phase::Running);
                if rs.purchase_phase == Some(Phase::Running) {
                    self.set_if_changed(Phase::Running, "Reservation: Purchase is running");
                } else if rs.reserve_phase == Some(Phase::Running) {
                    self.set_if_changed(Phase::Running, "Reservation: Reserve is running");
                }
                Next::Requeue(POLL)
            }
            _ => {
                if self.st.reservation_phase != Some(Phase::Idle) {
                    self.st.reservation_phase = Some(Phase::Idle);
                    self.bump();
                }
                Next::Requeue(POLL)
            }
        })
    }

    /// Beyond upstream: when the candidate turned out not to be available
    /// (taken meanwhile, or refused by its provider with 409) and nothing was
    /// bought, the next ranked candidate is tried instead of failing.
    fn move_on_from_refused(
        &mut self,
        r: &Reservation,
        rs: &fluidos_api::reservation::ReservationStatus,
        owner: &OwnerReference,
    ) -> Option<Next> {
        // Refused before anything was sold: at RESERVE, or at a PURCHASE the
        // provider definitely turned down (the flavor was already sold).
        let nothing_sold = (rs.reserve_phase == Some(Phase::Failed) && rs.transaction_id.is_none())
            || rs.purchase_phase == Some(Phase::Failed);
        let refused = rs.phase.phase == Phase::Failed
            && nothing_sold
            && rs
                .phase
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(crate::reservation::machine::NOT_AVAILABLE));
        if !refused {
            return None;
        }
        let candidate = r
            .spec
            .peering_candidate
            .as_ref()
            .and_then(|c| c.name.clone())
            .unwrap_or_default();
        if !self.refused.contains(&candidate) {
            self.refused.push(candidate.clone());
        }
        if self.refused.len() > MAX_REFUSED {
            return None;
        }
        if self.candidates().ordered.is_empty() {
            return self.discover_again(r);
        }
        let why = rs.phase.message.clone().unwrap_or_default();
        let previous = self.st.chosen_candidate.take();
        let first_new_effect = self.effects.len();
        let Ok(next) = self.new_reservation(owner) else {
            self.effects.truncate(first_new_effect);
            self.st.chosen_candidate = previous;
            return None;
        };
        // The refused Reservation goes first: the next one takes its name.
        self.effects.insert(
            first_new_effect,
            Effect::DeleteRefusedReservation(r.name_any()),
        );
        self.effects.push(Effect::ApplyReservation(Box::new(next)));
        if let Some(chosen) = self.st.chosen_candidate.as_mut() {
            chosen.reason = format!("{candidate} was refused ({why}); {}", chosen.reason);
        }
        self.st.reservation_phase = Some(Phase::Idle);
        self.set(Phase::Running, "Reservation created");
        Some(Next::Requeue(POLL))
    }

    /// Nothing left to try: when this Solver finds its own candidates, it
    /// searches again (a Go provider lists what is left of a sold flavor
    /// under a new flavor ID); otherwise it fails as upstream does.
    fn discover_again(&mut self, refused: &Reservation) -> Option<Next> {
        if !self.input.solver.spec.find_candidate.unwrap_or(false) {
            return None;
        }
        let discovery = naming::discovery_name(&self.name());
        self.effects
            .push(Effect::DeleteRefusedReservation(refused.name_any()));
        self.effects.push(Effect::DeleteChild {
            kind: ChildKind::Discovery,
            name: discovery,
        });
        self.deleted
            .extend([ChildKind::Discovery, ChildKind::Reservation]);
        if let Some(chosen) = self.st.chosen_candidate.as_mut() {
            chosen.refused.clone_from(&self.refused);
        }
        self.st.find_candidate = Some(Phase::Running);
        self.st.discovery_phase = None;
        self.st.reserve_and_buy = None;
        self.st.reservation_phase = None;
        self.set(Phase::Running, "Solver is trying a Discovery");
        Some(Next::Requeue(Duration::ZERO))
    }

    fn peering(&mut self, owner: &OwnerReference) -> Result<Next, Fail> {
        let find = self.input.solver.spec.find_candidate.unwrap_or(false);
        if find && self.st.find_candidate != Some(Phase::Solved) {
            return Ok(Next::AwaitChange);
        }
        let contract = self
            .reservation()
            .and_then(|r| r.status.as_ref())
            .and_then(|s| s.contract.clone());
        let Some(contract) = contract else {
            return Err(Fail(
                "Error when establishing a peering: the Reservation has no Contract".into(),
            ));
        };
        let contract_name = contract.name.clone().unwrap_or_default();
        match self.st.peering.clone() {
            None | Some(Phase::Unset) => {
                self.st.peering = Some(Phase::Idle);
                self.bump();
                Ok(Next::Requeue(Duration::ZERO))
            }
            Some(Phase::Idle) => {
                let allocation = self.new_allocation(owner, &contract_name);
                self.effects
                    .push(Effect::ApplyAllocation(Box::new(allocation)));
                self.st.peering = Some(Phase::Running);
                self.set(Phase::Running, "Allocation created");
                Ok(Next::Requeue(POLL))
            }
            Some(Phase::Running) => Ok(self.follow_allocation(&contract_name)),
            Some(Phase::Failed) => {
                self.set(Phase::Failed, "Solver has failed to establish a peering");
                Ok(Next::AwaitChange)
            }
            Some(_) => Ok(Next::AwaitChange),
        }
    }

    fn new_allocation(&self, owner: &OwnerReference, contract_name: &str) -> Allocation {
        // Upstream names the Allocation after the flavor (the candidate's
        // suffix) only: a second purchase of the flavor would take over the
        // first one's Allocation. One per Contract here.
        let flavor_id = self
            .st
            .chosen_candidate
            .as_ref()
            .map(|c| c.name.trim_start_matches("peeringcandidate-").to_owned())
            .unwrap_or_else(|| contract_name.to_owned());
        let ns = self.namespace();
        let mut a = Allocation::new(
            &naming::consumer_allocation_name(&flavor_id, contract_name),
            AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef::named(&ns, contract_name)),
            },
        );
        a.meta_mut().namespace = Some(ns);
        a.meta_mut().owner_references = Some(vec![owner.clone()]);
        a
    }

    fn follow_allocation(&mut self, contract_name: &str) -> Next {
        if self.expired(self.input.timeouts.peering) {
            self.st.peering = Some(Phase::Failed);
            // Upstream's message for the peering timeout too.
            self.set(
                Phase::TimedOut,
                "Solver has expired before reserving the resources",
            );
            return Next::AwaitChange;
        }
        let state = self
            .observed
            .allocations
            .iter()
            .find(|a| {
                a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract_name)
            })
            .and_then(|a| a.status.as_ref())
            .and_then(|s| s.status.clone());
        let (peering, message) = match state {
            Some(AllocationState::Active) => (Phase::Solved, "Allocation: active"),
            Some(AllocationState::Released) => (Phase::Solved, "Allocation: released"),
            Some(AllocationState::Provisioning) => (Phase::Running, "Allocation: provisioning"),
            Some(AllocationState::ResourceCreation) => {
                (Phase::Running, "Allocation: creating resources")
            }
            Some(AllocationState::Peering) => (Phase::Running, "Allocation: peering"),
            Some(AllocationState::Inactive) => (Phase::Running, "Allocation: inactive"),
            Some(AllocationState::Error) => {
                self.st.peering = Some(Phase::Failed);
                self.set(Phase::Failed, "Allocation: error");
                return Next::AwaitChange;
            }
            Some(AllocationState::Other(_)) | None => return Next::Requeue(POLL),
        };
        let solved = peering == Phase::Solved;
        self.st.peering = Some(peering);
        self.set_if_changed(Phase::Running, message);
        if solved {
            Next::Requeue(Duration::ZERO)
        } else {
            Next::Requeue(POLL)
        }
    }
}

/// Available candidates matching a selector, best first, and why the first won.
#[derive(Clone, Debug)]
pub struct RankedCandidates<'a> {
    /// Best first.
    pub ordered: Vec<&'a PeeringCandidate>,
    /// Why the first ranked first.
    pub reason: String,
}

/// Available candidates matching `selector`, best first, with the ranking reason.
pub fn ranked_candidates<'a>(
    all: &'a [PeeringCandidate],
    selector: Option<&FlavorSelector>,
) -> RankedCandidates<'a> {
    let mut matching = Vec::new();
    let mut facts = Vec::new();
    for pc in all {
        if !pc.spec.available {
            continue;
        }
        let Ok(t) = pc.spec.flavor.spec.flavor_type.parse() else {
            continue;
        };
        if selector.is_some_and(|s| !s.matches(&t)) {
            continue;
        }
        facts.push(CandidateFacts::new(
            &pc.name_any(),
            &pc.spec.flavor.spec.price.amount,
            &t,
        ));
        matching.push(pc);
    }
    let ranking = rank(facts);
    let ordered = ranking
        .ordered
        .iter()
        .filter_map(|f| matching.iter().find(|pc| pc.name_any() == f.name).copied())
        .collect();
    RankedCandidates {
        ordered,
        reason: ranking.reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{
        LONG_AGO, NOW, SOLVER_UID, allocation, candidate, discovery, me, phase, reservation, solver,
    };
    use fluidos_api::reservation::ReservationStatus;

    const TIMEOUTS: Timeouts = Timeouts {
        phase: Duration::from_secs(120),
        peering: Duration::from_secs(300),
    };

    fn run(s: &Solver, observed: &Observed) -> Plan {
        plan(
            &Input {
                solver: s,
                identity: &me(),
                timeouts: TIMEOUTS,
                now: crate::fixtures::now(),
            },
            observed,
        )
    }

    fn message(p: &Plan) -> (Phase, String) {
        let sp = p.status.solver_phase.clone().unwrap_or_default();
        (sp.phase, sp.message.unwrap_or_default())
    }

    fn status(
        find: Option<Phase>,
        buy: Option<Phase>,
        peering: Option<Phase>,
        at: &str,
    ) -> SolverStatus {
        SolverStatus {
            find_candidate: find,
            reserve_and_buy: buy,
            peering,
            solver_phase: Some(phase(Phase::Running, "before", at)),
            ..Default::default()
        }
    }

    /// A Reservation that bought `contract-1`.
    fn bought() -> Reservation {
        reservation(
            Some(ReservationStatus {
                phase: phase(Phase::Solved, "Reservation solved", NOW),
                contract: Some(GenericRef::named("fluidos", "contract-1")),
                ..Default::default()
            }),
            "peeringcandidate-f1",
        )
    }

    #[test]
    fn nothing_asked_ends_solved_at_once() {
        let p = run(&solver(false, false, false, None), &Observed::default());
        assert_eq!(
            message(&p),
            (
                Phase::Solved,
                "No need to reserve and buy the resources".into()
            )
        );
        assert!(p.effects.is_empty());
        assert_eq!(p.next, Next::AwaitChange);
    }

    #[test]
    fn terminal_phases_are_left_alone() {
        for terminal in [Phase::Failed, Phase::TimedOut] {
            let st = SolverStatus {
                solver_phase: Some(phase(terminal.clone(), "over", NOW)),
                ..Default::default()
            };
            let p = run(
                &solver(true, true, true, Some(st.clone())),
                &Observed::default(),
            );
            assert_eq!(p.status, st);
            assert!(p.effects.is_empty());
            assert_eq!(p.next, Next::AwaitChange);
        }
    }

    #[test]
    fn an_invalid_selector_fails_with_the_decoder_message() {
        let mut s = solver(true, false, false, None);
        s.spec.selector = Some(fluidos_api::solver::Selector {
            flavor_type: "K8Slice".into(),
            filters: Some(serde_json::json!({"cpuFilter": {"name": "Nope", "data": {}}})),
        });
        let (phase, msg) = message(&run(&s, &Observed::default()));
        assert_eq!(phase, Phase::Failed);
        assert!(
            msg.starts_with("Error when finding a candidate: invalid selector: "),
            "{msg}"
        );
    }

    #[test]
    fn a_known_candidate_is_chosen_by_rank_and_marked() {
        let observed = Observed {
            candidates: vec![candidate("dear", "4", "10"), candidate("cheap", "4", "1")],
            ..Default::default()
        };
        let p = run(&solver(true, false, false, None), &observed);
        assert_eq!(p.status.find_candidate, Some(Phase::Solved));
        assert_eq!(
            p.status.chosen_candidate.as_ref().map(|c| c.name.as_str()),
            Some("peeringcandidate-cheap")
        );
        assert!(matches!(
            &p.effects[..],
            [Effect::MarkInterest { candidate, interested }]
                if candidate == "peeringcandidate-cheap" && interested == &["solver-a".to_owned()]
        ));
        // find solved, nothing to buy.
        assert_eq!(
            message(&p),
            (
                Phase::Solved,
                "No need to reserve and buy the resources".into()
            )
        );
    }

    #[test]
    fn without_candidates_a_discovery_is_created() {
        let p = run(&solver(true, false, false, None), &Observed::default());
        assert_eq!(p.status.find_candidate, Some(Phase::Running));
        assert_eq!(
            message(&p),
            (Phase::Running, "Solver is trying a Discovery".into())
        );
        let [Effect::CreateDiscovery(d)] = &p.effects[..] else {
            panic!("{:?}", p.effects);
        };
        assert_eq!(d.metadata.name.as_deref(), Some("discovery-solver-a"));
        assert_eq!(d.spec.solver_id, "solver-a");
        assert_eq!(
            d.metadata.owner_references.as_ref().unwrap()[0].uid,
            SOLVER_UID
        );
        assert_eq!(p.next, Next::Requeue(POLL));
    }

    #[test]
    fn candidates_are_read_only_when_a_step_looks_at_them() {
        let unread = Observed {
            candidates_unread: true,
            ..Default::default()
        };
        // Looking for a candidate: read them and plan again.
        let idle = status(Some(Phase::Idle), None, None, NOW);
        let p = run(&solver(true, false, false, Some(idle.clone())), &unread);
        assert!(p.needs_candidates);
        // Read: the plan stands.
        let p = run(
            &solver(true, false, false, Some(idle)),
            &Observed::default(),
        );
        assert!(!p.needs_candidates);
        // Waiting for its Discovery: no need.
        let running = status(Some(Phase::Running), None, None, NOW);
        let waiting = Observed {
            discovery: Some(discovery(Phase::Running, "solver-a")),
            ..unread
        };
        let p = run(&solver(true, false, false, Some(running)), &waiting);
        assert!(!p.needs_candidates, "{:?}", p.effects);
    }

    #[test]
    fn a_cached_read_stands_only_when_complete_and_not_ending_the_solver() {
        let running = status(Some(Phase::Running), None, None, NOW);
        let s = solver(true, true, false, Some(running));
        let mut solved = discovery(Phase::Solved, SOLVER_UID);
        let listed = candidate("f1", "4", "1");
        solved
            .status
            .get_or_insert_with(Default::default)
            .peering_candidate_list =
            Some(fluidos_api::advertisement::EmbeddedPeeringCandidateList {
                items: vec![fluidos_api::advertisement::EmbeddedPeeringCandidate {
                    metadata: fluidos_api::embedded::EmbeddedObjectMeta {
                        name: listed.metadata.name.clone(),
                        ..Default::default()
                    },
                    spec: listed.spec.clone(),
                    api_version: None,
                    kind: None,
                    status: None,
                }],
                ..Default::default()
            });
        let observed = |candidates: Vec<PeeringCandidate>| Observed {
            discovery: Some(solved.clone()),
            candidates,
            ..Default::default()
        };
        // Holds what the Discovery made: it reserves, and that stands.
        let complete = observed(vec![listed.clone()]);
        let p = run(&s, &complete);
        assert_eq!(p.status.reserve_and_buy, Some(Phase::Running));
        assert!(cached_candidates_suffice(&complete, &p));
        // Lags behind the Discovery: read again, even if an older candidate
        // would do.
        let lagging = observed(vec![candidate("old", "4", "9")]);
        let p = run(&s, &lagging);
        assert!(!cached_candidates_suffice(&lagging, &p));
        // A plan that fails the Solver is never decided on the cache.
        let none = Observed {
            discovery: Some(discovery(Phase::Solved, SOLVER_UID)),
            ..Default::default()
        };
        let p = run(&s, &none);
        assert_eq!(message(&p).0, Phase::Failed);
        assert!(!cached_candidates_suffice(&none, &p));
    }

    #[test]
    fn a_discovery_left_by_another_solver_is_replaced() {
        let observed = Observed {
            discovery: Some(discovery(Phase::Solved, "someone-else")),
            ..Default::default()
        };
        let st = status(Some(Phase::Running), None, None, NOW);
        let p = run(&solver(true, false, false, Some(st)), &observed);
        assert!(matches!(
            &p.effects[..],
            [Effect::DeleteChild { kind: ChildKind::Discovery, name }, Effect::CreateDiscovery(_)]
                if name == "discovery-solver-a"
        ));
    }

    #[test]
    fn the_discovery_outcome_is_copied() {
        let running = status(Some(Phase::Running), None, None, NOW);
        let s = solver(true, true, false, Some(running.clone()));
        let with = |d: Phase, candidates: Vec<PeeringCandidate>| {
            run(
                &s,
                &Observed {
                    discovery: Some(discovery(d, SOLVER_UID)),
                    candidates,
                    ..Default::default()
                },
            )
        };
        // Still running: mirrored, polled.
        let p = with(Phase::Running, vec![]);
        assert_eq!(p.status.discovery_phase, Some(Phase::Running));
        assert_eq!(p.next, Next::Requeue(POLL));
        assert!(p.effects.is_empty());
        // Solved with a candidate: found, then reserved in the same go.
        let p = with(Phase::Solved, vec![candidate("f1", "4", "1")]);
        assert_eq!(p.status.discovery_phase, Some(Phase::Solved));
        assert_eq!(p.status.find_candidate, Some(Phase::Solved));
        assert_eq!(p.status.reserve_and_buy, Some(Phase::Running));
        assert_eq!(message(&p), (Phase::Running, "Reservation created".into()));
        let [Effect::MarkInterest { .. }, Effect::ApplyReservation(r)] = &p.effects[..] else {
            panic!("{:?}", p.effects);
        };
        assert_eq!(r.metadata.name.as_deref(), Some("reservation-solver-a"));
        assert_eq!(
            r.spec
                .peering_candidate
                .as_ref()
                .and_then(|c| c.name.as_deref()),
            Some("peeringcandidate-f1")
        );
        assert_eq!(r.spec.seller.ip, "127.0.0.1:1");
        assert_eq!(r.spec.buyer, me());
        assert_eq!((r.spec.reserve, r.spec.purchase), (Some(true), Some(true)));
        // Solved but every candidate taken meanwhile, or Failed: no candidate.
        for p in [with(Phase::Solved, vec![]), with(Phase::Failed, vec![])] {
            assert_eq!(p.status.find_candidate, Some(Phase::Failed));
            assert_eq!(
                message(&p),
                (Phase::Failed, "Solver has not found any candidate".into())
            );
            assert_eq!(p.next, Next::AwaitChange);
        }
        let p = with(Phase::TimedOut, vec![]);
        assert_eq!(p.status.find_candidate, Some(Phase::TimedOut));
        assert_eq!(p.status.discovery_phase, Some(Phase::TimedOut));
        assert_eq!(
            message(&p),
            (
                Phase::TimedOut,
                "Discovery has expired before finding a candidate".into()
            )
        );
    }

    #[test]
    fn timeouts_fire_per_phase() {
        let cases = [
            (
                status(Some(Phase::Running), None, None, LONG_AGO),
                "Solver has expired before finding a candidate",
            ),
            (
                status(Some(Phase::Solved), Some(Phase::Running), None, LONG_AGO),
                "Solver has expired before reserving the resources",
            ),
            (
                status(
                    Some(Phase::Solved),
                    Some(Phase::Solved),
                    Some(Phase::Running),
                    LONG_AGO,
                ),
                // Upstream reuses this message for the peering timeout.
                "Solver has expired before reserving the resources",
            ),
        ];
        for (st, expected) in cases {
            let observed = Observed {
                reservation: Some(bought()),
                ..Default::default()
            };
            let p = run(&solver(true, true, true, Some(st)), &observed);
            assert_eq!(message(&p), (Phase::TimedOut, expected.into()));
            assert!(p.effects.is_empty(), "{:?}", p.effects);
        }
        // The peering timeout also marks the peering failed.
        let st = status(
            Some(Phase::Solved),
            Some(Phase::Solved),
            Some(Phase::Running),
            LONG_AGO,
        );
        let observed = Observed {
            reservation: Some(bought()),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st)), &observed);
        assert_eq!(p.status.peering, Some(Phase::Failed));
        // Not yet expired: nothing fires.
        let st = status(Some(Phase::Running), None, None, NOW);
        let p = run(&solver(true, true, true, Some(st)), &Observed::default());
        assert_eq!(p.status.solver_phase.unwrap().phase, Phase::Running);
    }

    #[test]
    fn an_unanswered_purchase_outlives_the_reservation_timeout() {
        let st = status(Some(Phase::Solved), Some(Phase::Running), None, LONG_AGO);
        let in_flight = ReservationStatus {
            phase: phase(Phase::Running, "Reservation started", NOW),
            reserve_phase: Some(Phase::Solved),
            purchase_phase: Some(Phase::Running),
            transaction_id: Some("tx-1".into()),
            purchase_attempted_at: Some(NOW.into()),
            ..Default::default()
        };
        let observed = Observed {
            reservation: Some(reservation(Some(in_flight.clone()), "peeringcandidate-f1")),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st.clone())), &observed);
        assert_ne!(
            p.status.solver_phase.unwrap().phase,
            Phase::TimedOut,
            "a purchase that may have sold is waited for"
        );
        // Not sent yet: the timeout fires as before.
        let not_sent = ReservationStatus {
            purchase_attempted_at: None,
            ..in_flight
        };
        let observed = Observed {
            reservation: Some(reservation(Some(not_sent), "peeringcandidate-f1")),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st)), &observed);
        assert_eq!(p.status.solver_phase.unwrap().phase, Phase::TimedOut);
    }

    #[test]
    fn the_reservation_outcome_is_copied() {
        let st = status(Some(Phase::Solved), Some(Phase::Running), None, NOW);
        let s = solver(true, true, false, Some(st));
        let with = |r: ReservationStatus| {
            run(
                &s,
                &Observed {
                    reservation: Some(reservation(Some(r), "peeringcandidate-f1")),
                    ..Default::default()
                },
            )
        };
        let solved = with(ReservationStatus {
            phase: phase(Phase::Solved, "Reservation solved", NOW),
            ..Default::default()
        });
        assert_eq!(solved.status.reserve_and_buy, Some(Phase::Solved));
        assert_eq!(solved.status.reservation_phase, Some(Phase::Solved));
        assert_eq!(
            message(&solved),
            (Phase::Solved, "No need to establish a peering".into())
        );

        let failed = with(ReservationStatus {
            phase: phase(Phase::Failed, "x", NOW),
            ..Default::default()
        });
        assert_eq!(failed.status.reserve_and_buy, Some(Phase::Failed));
        assert_eq!(
            message(&failed),
            (
                Phase::Failed,
                "Reservation: Flavor reservation and purchase failed".into()
            )
        );

        for (reserve, purchase, expected) in [
            (
                Some(Phase::Running),
                Some(Phase::Idle),
                "Reservation: Reserve is running",
            ),
            (
                Some(Phase::Solved),
                Some(Phase::Running),
                "Reservation: Purchase is running",
            ),
        ] {
            let p = with(ReservationStatus {
                phase: phase(Phase::Running, "Reservation started", NOW),
                reserve_phase: reserve,
                purchase_phase: purchase,
                ..Default::default()
            });
            assert_eq!(p.status.reservation_phase, Some(Phase::Running));
            assert_eq!(message(&p), (Phase::Running, expected.into()));
            assert_eq!(p.next, Next::Requeue(POLL));
        }
        let idle = with(ReservationStatus::default());
        assert_eq!(idle.status.reservation_phase, Some(Phase::Idle));
        assert_eq!(idle.next, Next::Requeue(POLL));
    }

    #[test]
    fn a_candidate_refused_as_unavailable_is_replaced_by_the_next() {
        let st = status(Some(Phase::Solved), Some(Phase::Running), None, NOW);
        let s = solver(true, true, false, Some(st));
        let refused = ReservationStatus {
            phase: phase(
                Phase::Failed,
                "Reservation failed: PeeringCandidate not available: 409: not enough [\"pods\"] left",
                NOW,
            ),
            reserve_phase: Some(Phase::Failed),
            ..Default::default()
        };
        let observed = Observed {
            // The refused one may still look available in our read.
            candidates: vec![candidate("f1", "4", "1"), candidate("f2", "4", "2")],
            reservation: Some(reservation(Some(refused.clone()), "peeringcandidate-f1")),
            ..Default::default()
        };
        let p = run(&s, &observed);
        assert_eq!(message(&p), (Phase::Running, "Reservation created".into()));
        assert_eq!(p.status.reserve_and_buy, Some(Phase::Running));
        let [
            Effect::DeleteRefusedReservation(gone),
            Effect::MarkInterest { .. },
            Effect::ApplyReservation(next),
        ] = &p.effects[..]
        else {
            panic!("{:?}", p.effects);
        };
        assert_eq!(gone, "reservation-solver-a");
        assert_eq!(
            next.spec
                .peering_candidate
                .as_ref()
                .and_then(|c| c.name.as_deref()),
            Some("peeringcandidate-f2")
        );
        let chosen = p.status.chosen_candidate.clone().unwrap();
        assert_eq!(chosen.refused, ["peeringcandidate-f1"]);
        assert_eq!(chosen.name, "peeringcandidate-f2");
        assert!(chosen.reason.starts_with("peeringcandidate-f1 was refused (Reservation failed: PeeringCandidate not available: 409"), "{}", chosen.reason);

        // Refused candidates stay refused, even when a Discovery frees them
        // again, and after MAX_REFUSED the Solver stops trying.
        let mut st = p.status.clone();
        st.chosen_candidate.as_mut().unwrap().refused = (0..MAX_REFUSED)
            .map(|i| format!("peeringcandidate-x{i}"))
            .collect();
        let observed = Observed {
            candidates: vec![candidate("f1", "4", "1"), candidate("f2", "4", "2")],
            reservation: Some(reservation(Some(refused.clone()), "peeringcandidate-f2")),
            ..Default::default()
        };
        let p = run(&solver(true, true, false, Some(st)), &observed);
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Reservation: Flavor reservation and purchase failed".into()
            )
        );

        // Other failures (a bad request, a failed purchase) are not retried elsewhere.
        let mut other = refused;
        other.phase.message = Some("Reservation failed: error when reserving flavor: 400".into());
        let observed = Observed {
            candidates: vec![candidate("f1", "4", "1"), candidate("f2", "4", "2")],
            reservation: Some(reservation(Some(other), "peeringcandidate-f1")),
            ..Default::default()
        };
        assert_eq!(
            run(&s, &observed).status.reserve_and_buy,
            Some(Phase::Failed)
        );
    }

    #[test]
    fn with_nothing_left_to_try_the_solver_searches_again() {
        let st = status(Some(Phase::Solved), Some(Phase::Running), None, NOW);
        let s = solver(true, true, false, Some(st));
        let refused = ReservationStatus {
            phase: phase(
                Phase::Failed,
                "Reservation failed: PeeringCandidate not available: 409: sold",
                NOW,
            ),
            reserve_phase: Some(Phase::Failed),
            ..Default::default()
        };
        // Nothing else to try: search again (a Go provider lists what is
        // left of a sold flavor under a new ID).
        let observed = Observed {
            candidates: vec![candidate("f1", "4", "1")],
            discovery: Some(discovery(Phase::Solved, SOLVER_UID)),
            reservation: Some(reservation(Some(refused.clone()), "peeringcandidate-f1")),
            ..Default::default()
        };
        let p = run(&s, &observed);
        assert_eq!(
            message(&p),
            (Phase::Running, "Solver is trying a Discovery".into())
        );
        assert_eq!(p.status.find_candidate, Some(Phase::Running));
        assert_eq!(p.status.reserve_and_buy, None);
        assert!(
            matches!(
                &p.effects[..],
                [
                    Effect::DeleteRefusedReservation(_),
                    Effect::DeleteChild {
                        kind: ChildKind::Discovery,
                        ..
                    },
                    Effect::CreateDiscovery(_),
                ]
            ),
            "{:?}",
            p.effects
        );
        // Without findCandidate there is no search: the upstream failure.
        let mut no_find = s.clone();
        no_find.spec.find_candidate = Some(false);
        let p = run(&no_find, &observed);
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Reservation: Flavor reservation and purchase failed".into()
            )
        );
    }

    #[test]
    fn reserving_without_a_candidate_fails_and_failed_phases_say_so() {
        let st = status(Some(Phase::Solved), Some(Phase::Idle), None, NOW);
        let p = run(&solver(true, true, false, Some(st)), &Observed::default());
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Error when reserving and buying the resources: no available PeeringCandidate matches the selector".into()
            )
        );
        let st = status(Some(Phase::Solved), Some(Phase::Failed), None, NOW);
        let p = run(&solver(true, true, false, Some(st)), &Observed::default());
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Solver has failed to reserve the resources".into()
            )
        );
        let st = status(
            Some(Phase::Solved),
            Some(Phase::Solved),
            Some(Phase::Failed),
            NOW,
        );
        let observed = Observed {
            reservation: Some(bought()),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st)), &observed);
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Solver has failed to establish a peering".into()
            )
        );
    }

    #[test]
    fn an_existing_reservation_is_followed_not_recreated() {
        let st = status(Some(Phase::Solved), Some(Phase::Idle), None, NOW);
        let observed = Observed {
            reservation: Some(reservation(None, "peeringcandidate-f1")),
            candidates: vec![candidate("f1", "4", "1")],
            ..Default::default()
        };
        let p = run(&solver(true, true, false, Some(st)), &observed);
        assert_eq!(p.status.reserve_and_buy, Some(Phase::Running));
        assert!(p.effects.is_empty(), "{:?}", p.effects);
    }

    #[test]
    fn peering_creates_the_allocation_and_follows_it() {
        let st = status(Some(Phase::Solved), Some(Phase::Solved), None, NOW);
        let mut st_chosen = st.clone();
        st_chosen.chosen_candidate = Some(ChosenCandidate {
            name: "peeringcandidate-f1".into(),
            reason: "only one".into(),
            refused: Vec::new(),
        });
        let observed = Observed {
            reservation: Some(bought()),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st_chosen)), &observed);
        assert_eq!(p.status.peering, Some(Phase::Running));
        assert_eq!(message(&p), (Phase::Running, "Allocation created".into()));
        let [Effect::ApplyAllocation(a)] = &p.effects[..] else {
            panic!("{:?}", p.effects);
        };
        assert_eq!(
            a.metadata.name.as_deref(),
            Some(naming::consumer_allocation_name("f1", "contract-1").as_str())
        );
        assert_eq!(
            a.spec.contract.as_ref().and_then(|c| c.name.as_deref()),
            Some("contract-1")
        );

        let running = status(
            Some(Phase::Solved),
            Some(Phase::Solved),
            Some(Phase::Running),
            NOW,
        );
        let s = solver(true, true, true, Some(running));
        let with = |state: Option<AllocationState>| {
            run(
                &s,
                &Observed {
                    reservation: Some(bought()),
                    allocations: vec![allocation("contract-1", state)],
                    ..Default::default()
                },
            )
        };
        for (state, peering, expected) in [
            (
                AllocationState::Provisioning,
                Phase::Running,
                "Allocation: provisioning",
            ),
            (
                AllocationState::ResourceCreation,
                Phase::Running,
                "Allocation: creating resources",
            ),
            (
                AllocationState::Peering,
                Phase::Running,
                "Allocation: peering",
            ),
            (
                AllocationState::Inactive,
                Phase::Running,
                "Allocation: inactive",
            ),
        ] {
            let p = with(Some(state));
            assert_eq!(p.status.peering, Some(peering));
            assert_eq!(message(&p), (Phase::Running, expected.into()));
            assert_eq!(p.next, Next::Requeue(POLL));
        }
        for state in [AllocationState::Active, AllocationState::Released] {
            let p = with(Some(state));
            assert_eq!(p.status.peering, Some(Phase::Solved));
            assert_eq!(
                message(&p),
                (Phase::Solved, "Solver has completed all the phases".into())
            );
        }
        let p = with(Some(AllocationState::Error));
        assert_eq!(p.status.peering, Some(Phase::Failed));
        assert_eq!(message(&p), (Phase::Failed, "Allocation: error".into()));
        // No status yet: wait.
        let p = with(None);
        assert_eq!(p.status.peering, Some(Phase::Running));
        assert_eq!(p.next, Next::Requeue(POLL));
    }

    #[test]
    fn peering_without_a_contract_fails() {
        let st = status(Some(Phase::Solved), Some(Phase::Solved), None, NOW);
        let observed = Observed {
            reservation: Some(reservation(None, "peeringcandidate-f1")),
            ..Default::default()
        };
        let p = run(&solver(true, true, true, Some(st)), &observed);
        assert_eq!(
            message(&p),
            (
                Phase::Failed,
                "Error when establishing a peering: the Reservation has no Contract".into()
            )
        );
    }

    #[test]
    fn repeated_reconciles_keep_the_change_time() {
        let mut st = status(Some(Phase::Solved), Some(Phase::Running), None, LONG_AGO);
        st.solver_phase = Some(phase(
            Phase::Running,
            "Reservation: Reserve is running",
            "2026-12-01T09:59:00Z",
        ));
        let observed = Observed {
            reservation: Some(reservation(
                Some(ReservationStatus {
                    phase: phase(Phase::Running, "Reservation started", NOW),
                    reserve_phase: Some(Phase::Running),
                    ..Default::default()
                }),
                "peeringcandidate-f1",
            )),
            ..Default::default()
        };
        let s = solver(true, true, false, Some(st.clone()));
        let p = run(&s, &observed);
        assert_eq!(p.status.solver_phase, st.solver_phase);
    }
}

//! The live view of a Solver: from the Solver and the objects the consumer
//! makes for it (its Discovery, Reservation, Contract and Allocation), the
//! stages with their state and a one-line detail each, and whether it is over.
//!
//! Pure: the watch in [`crate::solve`] feeds it snapshots. Names and phases
//! are the consumer's (`crates/fluidos-consumer`): `discovery-<solver>`,
//! `reservation-<solver>`, the Contract named in the Reservation's status,
//! the Allocation (owned by the Solver) whose `spec.contract` names it.

use fluidos_api::allocation::AllocationState;
use fluidos_api::{Allocation, Contract, Discovery, Phase, Reservation, Solver};
use kube::ResourceExt;

use crate::output::{Palette, Tone};

/// The steps of a purchase, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Finding a candidate (a Discovery when none is known).
    Discovery,
    /// RESERVE and PURCHASE through the Reservation.
    Reservation,
    /// The Contract the purchase produced.
    Contract,
    /// Allocating what was bought (peering, or the service's credentials).
    Allocation,
}

impl Stage {
    /// Its name in the view.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Discovery => "Discovery",
            Stage::Reservation => "Reservation",
            Stage::Contract => "Contract",
            Stage::Allocation => "Allocation",
        }
    }
}

/// Where a stage stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageState {
    /// Not started.
    Waiting,
    /// Under way.
    Running,
    /// Finished well.
    Done,
    /// Finished badly.
    Failed,
}

impl StageState {
    fn mark(self) -> &'static str {
        match self {
            StageState::Waiting => "·",
            StageState::Running => "…",
            StageState::Done => "✓",
            StageState::Failed => "✗",
        }
    }

    fn tone(self) -> Tone {
        match self {
            StageState::Waiting => Tone::Faint,
            StageState::Running => Tone::Busy,
            StageState::Done => Tone::Good,
            StageState::Failed => Tone::Bad,
        }
    }

    fn word(self) -> &'static str {
        match self {
            StageState::Waiting => "Waiting",
            StageState::Running => "Running",
            StageState::Done => "Done",
            StageState::Failed => "Failed",
        }
    }
}

/// One line of the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageView {
    /// Which stage.
    pub stage: Stage,
    /// Where it stands.
    pub state: StageState,
    /// The object behind it, once known.
    pub object: Option<String>,
    /// What it is doing or did, in a few words.
    pub detail: String,
}

/// What the watch has seen of a Solver.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The Solver (absent until the watch delivers it).
    pub solver: Option<Solver>,
    /// `discovery-<solver>`.
    pub discovery: Option<Discovery>,
    /// `reservation-<solver>`.
    pub reservation: Option<Reservation>,
    /// Every Contract in the namespace.
    pub contracts: Vec<Contract>,
    /// Every Allocation in the namespace.
    pub allocations: Vec<Allocation>,
}

/// Whether the Solver is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still going.
    InProgress,
    /// Every requested step is done.
    Solved,
    /// Failed or timed out, with the Solver's message.
    Failed(String),
}

/// What the Solver's spec asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Requested {
    find: bool,
    buy: bool,
    peer: bool,
}

fn requested(solver: &Solver) -> Requested {
    Requested {
        find: solver.spec.find_candidate.unwrap_or(false),
        buy: solver.spec.reserve_and_buy.unwrap_or(false),
        peer: solver.spec.establish_peering.unwrap_or(false),
    }
}

impl Snapshot {
    /// The Contract the Solver's Reservation bought, by name.
    pub fn contract_name(&self) -> Option<String> {
        self.reservation
            .as_ref()?
            .status
            .as_ref()?
            .contract
            .as_ref()?
            .name
            .clone()
            .filter(|n| !n.is_empty())
    }

    /// The Contract object, once it is here.
    pub fn contract(&self) -> Option<&Contract> {
        let name = self.contract_name()?;
        self.contracts.iter().find(|c| c.name_any() == name)
    }

    /// The Allocation of the Contract: the one the Solver owns first, else
    /// any naming the Contract.
    pub fn allocation(&self) -> Option<&Allocation> {
        let contract = self.contract_name()?;
        let uid = self.solver.as_ref().and_then(|s| s.uid());
        let of_contract = |a: &&Allocation| {
            a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract.as_str())
        };
        let owned = |a: &&Allocation| {
            uid.as_ref()
                .is_some_and(|uid| a.owner_references().iter().any(|o| &o.uid == uid))
        };
        self.allocations
            .iter()
            .filter(of_contract)
            .find(owned)
            .or_else(|| self.allocations.iter().find(of_contract))
    }
}

fn phase_of(p: Option<&fluidos_api::PhaseStatus>) -> (Phase, String) {
    // Messages can quote a provider's answer: no control characters.
    p.map(|p| {
        (
            p.phase.clone(),
            crate::output::printable(p.message.as_deref().unwrap_or_default()),
        )
    })
    .unwrap_or_default()
}

/// The stages the Solver asks for, each with its state and detail.
pub fn stages(snap: &Snapshot) -> Vec<StageView> {
    let Some(solver) = snap.solver.as_ref() else {
        return Vec::new();
    };
    let want = requested(solver);
    let status = solver.status.clone().unwrap_or_default();
    let mut out = Vec::new();
    if want.find {
        out.push(discovery_stage(snap, &status));
    }
    if want.buy {
        out.push(reservation_stage(snap, &status));
        out.push(contract_stage(snap));
    }
    if want.peer {
        out.push(allocation_stage(snap, &status));
    }
    out
}

fn discovery_stage(snap: &Snapshot, status: &fluidos_api::solver::SolverStatus) -> StageView {
    let d = snap.discovery.as_ref();
    let object = d.map(ResourceExt::name_any);
    let (d_phase, d_message) = phase_of(d.and_then(|d| d.status.as_ref()).map(|s| &s.phase));
    let providers = d
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.providers.as_ref())
        .map(|p| providers_summary(p));
    let chosen = status.chosen_candidate.as_ref();
    let (state, detail) = match status.find_candidate.clone() {
        Some(Phase::Solved) => {
            let mut detail = match chosen {
                Some(c) => format!("chose {}", c.name),
                None => "candidate found".to_owned(),
            };
            if let Some(p) = providers {
                detail = format!("{detail}; {p}");
            }
            (StageState::Done, detail)
        }
        Some(Phase::Failed | Phase::TimedOut) => {
            let why = if d_message.is_empty() {
                "no candidate found".to_owned()
            } else {
                d_message
            };
            (StageState::Failed, why)
        }
        Some(Phase::Running) => {
            let detail = match (&d_phase, providers) {
                (Phase::Unset, _) if d.is_none() => "creating the Discovery".to_owned(),
                (_, Some(p)) => p,
                _ if !d_message.is_empty() => d_message,
                _ => "asking the providers".to_owned(),
            };
            (StageState::Running, detail)
        }
        Some(Phase::Idle) => (
            StageState::Running,
            "looking at known candidates".to_owned(),
        ),
        _ => (StageState::Waiting, String::new()),
    };
    StageView {
        stage: Stage::Discovery,
        state,
        object,
        detail,
    }
}

/// `2 providers: 1 answered (3 flavors), 1 failed`.
fn providers_summary(providers: &[fluidos_api::advertisement::ProviderQueryStatus]) -> String {
    use fluidos_api::advertisement::ProviderOutcome;
    let answered: Vec<_> = providers
        .iter()
        .filter(|p| p.outcome == ProviderOutcome::Answered)
        .collect();
    let flavors: i64 = answered.iter().map(|p| p.flavors).sum();
    let failed = providers.len() - answered.len();
    let noun = if providers.len() == 1 {
        "provider"
    } else {
        "providers"
    };
    let mut s = format!(
        "{} {noun}: {} answered ({flavors} matching)",
        providers.len(),
        answered.len()
    );
    if failed > 0 {
        s.push_str(&format!(", {failed} failed"));
    }
    // Flavors a provider listed but does not own (or that do not decode):
    // worth a look, `status.providers[].dropped` says which and why.
    let dropped: i64 = providers.iter().map(|p| p.dropped_count).sum();
    if dropped > 0 {
        s.push_str(&format!(", {dropped} listed flavors dropped"));
    }
    s
}

fn reservation_stage(snap: &Snapshot, status: &fluidos_api::solver::SolverStatus) -> StageView {
    let r = snap.reservation.as_ref();
    let object = r.map(ResourceExt::name_any);
    let rs = r.and_then(|r| r.status.as_ref());
    let (r_phase, r_message) = phase_of(rs.map(|s| &s.phase));
    let seller = r.map(|r| r.spec.seller.node_id.clone()).unwrap_or_default();
    let (state, detail) = match status.reserve_and_buy.clone() {
        Some(Phase::Solved) => (
            StageState::Done,
            format!("reserved and bought from {seller}"),
        ),
        Some(Phase::Failed | Phase::TimedOut) => (
            StageState::Failed,
            if r_message.is_empty() {
                "reservation failed".to_owned()
            } else {
                r_message
            },
        ),
        Some(Phase::Running | Phase::Idle) => {
            let step = match rs {
                Some(s) if s.purchase_phase == Some(Phase::Running) => "purchasing",
                Some(s) if s.reserve_phase == Some(Phase::Running) => "reserving",
                _ if r.is_none() => "creating the Reservation",
                _ => "",
            };
            let detail = match (step, r_phase) {
                ("", Phase::Failed) => r_message,
                ("", _) if !r_message.is_empty() => r_message,
                ("", _) => "waiting for the consumer".to_owned(),
                (step, _) if seller.is_empty() => step.to_owned(),
                (step, _) => format!("{step} from {seller}"),
            };
            (StageState::Running, detail)
        }
        _ => (StageState::Waiting, String::new()),
    };
    StageView {
        stage: Stage::Reservation,
        state,
        object,
        detail,
    }
}

fn contract_stage(snap: &Snapshot) -> StageView {
    let name = snap.contract_name();
    let (state, detail) = match (snap.contract(), &name) {
        (Some(c), _) => {
            let mut detail = format!(
                "{} from {}",
                c.spec.flavor.spec.flavor_type.type_identifier, c.spec.seller.node_id
            );
            if let Some(exp) = c.spec.expiration_time.as_deref().filter(|e| !e.is_empty()) {
                detail.push_str(&format!(", expires {exp}"));
            }
            (StageState::Done, detail)
        }
        (None, Some(_)) => (StageState::Running, "recording the Contract".to_owned()),
        (None, None) => (StageState::Waiting, String::new()),
    };
    StageView {
        stage: Stage::Contract,
        state,
        object: name,
        detail,
    }
}

fn allocation_stage(snap: &Snapshot, status: &fluidos_api::solver::SolverStatus) -> StageView {
    let a = snap.allocation();
    let object = a.map(ResourceExt::name_any);
    let st = a.and_then(|a| a.status.as_ref());
    let state_of = st.and_then(|s| s.status.clone());
    let message =
        crate::output::printable(st.and_then(|s| s.message.as_deref()).unwrap_or_default());
    let with_message = |what: &str| {
        if message.is_empty() {
            what.to_owned()
        } else {
            format!("{what}: {message}")
        }
    };
    let (state, detail) = match (state_of, status.peering.clone()) {
        (Some(AllocationState::Error), _) => (StageState::Failed, with_message("Error")),
        (_, Some(Phase::Failed | Phase::TimedOut)) => {
            (StageState::Failed, with_message("peering failed"))
        }
        (Some(AllocationState::Active), _) => {
            let what = match st.and_then(|s| s.resource_ref.as_ref()) {
                Some(r) => format!(
                    "Active ({} {})",
                    r.kind.as_deref().unwrap_or("resource"),
                    r.name.as_deref().unwrap_or_default()
                ),
                None => "Active".to_owned(),
            };
            (StageState::Done, what)
        }
        (Some(AllocationState::Released), _) => (StageState::Done, with_message("Released")),
        (Some(other), _) => (StageState::Running, with_message(other.as_str())),
        (None, Some(_)) if a.is_some() => (StageState::Running, "waiting for the node".to_owned()),
        (None, Some(Phase::Running | Phase::Idle)) => {
            (StageState::Running, "creating the Allocation".to_owned())
        }
        (None, _) => (StageState::Waiting, String::new()),
    };
    StageView {
        stage: Stage::Allocation,
        state,
        object,
        detail,
    }
}

/// Whether the Solver is over: `Failed`/`Timed Out` fail; `Solved` succeeds
/// once every requested stage is done (the Solver's own `Solved` may arrive
/// before the watch has delivered the Contract).
pub fn outcome(snap: &Snapshot) -> Outcome {
    let Some(solver) = snap.solver.as_ref() else {
        return Outcome::InProgress;
    };
    let (phase, message) = phase_of(solver.status.as_ref().and_then(|s| s.solver_phase.as_ref()));
    match phase {
        Phase::Failed | Phase::TimedOut => Outcome::Failed(if message.is_empty() {
            phase.to_string()
        } else {
            message
        }),
        Phase::Solved => {
            let want = requested(solver);
            let status = solver.status.clone().unwrap_or_default();
            let sub_done = (!want.buy || status.reserve_and_buy == Some(Phase::Solved))
                && (!want.peer || status.peering == Some(Phase::Solved));
            if sub_done && stages(snap).iter().all(|s| s.state == StageState::Done) {
                Outcome::Solved
            } else {
                Outcome::InProgress
            }
        }
        _ => Outcome::InProgress,
    }
}

/// The Solver's own phase and message, for the header line.
pub fn solver_line(snap: &Snapshot) -> (String, String) {
    let p = snap
        .solver
        .as_ref()
        .and_then(|s| s.status.as_ref())
        .and_then(|s| s.solver_phase.as_ref());
    let (phase, message) = phase_of(p);
    let phase = if phase == Phase::Unset {
        "Pending".to_owned()
    } else {
        phase.to_string()
    };
    (phase, message)
}

/// `12.3s` for short waits, kubectl's age format beyond two minutes.
pub fn elapsed_text(elapsed: std::time::Duration) -> String {
    if elapsed.as_secs() < 120 {
        format!("{:.1}s", elapsed.as_secs_f64())
    } else {
        crate::output::human_duration(
            jiff::SignedDuration::try_from(elapsed).unwrap_or(jiff::SignedDuration::MAX),
        )
    }
}

/// The whole view, for a terminal that is redrawn in place.
pub fn render_block(
    name: &str,
    snap: &Snapshot,
    elapsed: std::time::Duration,
    palette: Palette,
) -> String {
    let (phase, message) = solver_line(snap);
    let mut out = format!(
        "{}  {}  {}\n",
        palette.paint(Tone::Strong, &format!("solver/{name}")),
        palette.paint(crate::output::tone_of(&phase), &phase),
        palette.paint(Tone::Faint, &elapsed_text(elapsed)),
    );
    if !message.is_empty() {
        out.push_str(&format!("  {}\n", palette.paint(Tone::Faint, &message)));
    }
    let views = stages(snap);
    let width = views
        .iter()
        .map(|v| v.object.as_deref().map_or(1, |o| o.chars().count()))
        .max()
        .unwrap_or(1);
    for v in views {
        let object = v.object.clone().unwrap_or_else(|| "-".to_owned());
        let pad = " ".repeat(width.saturating_sub(object.chars().count()));
        let line = format!(
            "  {} {:<11}  {}{}  {}",
            palette.paint(v.state.tone(), v.state.mark()),
            v.stage.label(),
            palette.paint(Tone::Faint, &object),
            pad,
            v.detail,
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One log line per stage whose state or detail changed since `before`, for
/// output that is not a terminal (a pipe, a CI log): nothing is redrawn.
pub fn changed_lines(
    before: &[StageView],
    after: &[StageView],
    elapsed: std::time::Duration,
) -> Vec<String> {
    after
        .iter()
        .filter(|v| {
            !before
                .iter()
                .any(|b| b.stage == v.stage && b.state == v.state && b.detail == v.detail)
        })
        .filter(|v| v.state != StageState::Waiting)
        .map(|v| {
            let object = v
                .object
                .as_deref()
                .map(|o| format!(" {o}"))
                .unwrap_or_default();
            let detail = if v.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", v.detail)
            };
            format!(
                "[{:>6}] {}{object} {}{detail}",
                elapsed_text(elapsed),
                v.stage.label(),
                v.state.word(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fluidos_api::advertisement::{
        DiscoverySpec, DiscoveryStatus, ProviderOutcome, ProviderQueryStatus,
    };
    use fluidos_api::allocation::{AllocationSpec, AllocationStatus};
    use fluidos_api::reservation::ReservationStatus;
    use fluidos_api::solver::{ChosenCandidate, SolverSpec, SolverStatus};
    use fluidos_api::{GenericRef, PhaseStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn solver(find: bool, buy: bool, peer: bool) -> Solver {
        let mut s = Solver::new(
            "s1",
            SolverSpec {
                selector: None,
                intent_id: "i".into(),
                find_candidate: Some(find),
                reserve_and_buy: Some(buy),
                establish_peering: Some(peer),
            },
        );
        s.metadata.uid = Some("uid-1".into());
        s
    }

    fn ps(phase: Phase, message: &str) -> PhaseStatus {
        PhaseStatus {
            phase,
            message: Some(message.into()),
            ..Default::default()
        }
    }

    fn with_status(mut s: Solver, f: impl FnOnce(&mut SolverStatus)) -> Solver {
        let mut st = SolverStatus::default();
        f(&mut st);
        s.status = Some(st);
        s
    }

    fn discovery(phase: Phase, providers: Vec<ProviderQueryStatus>) -> Discovery {
        let mut d = Discovery::new(
            "discovery-s1",
            DiscoverySpec {
                solver_id: "s1".into(),
                selector: None,
                subscribe: false,
            },
        );
        d.status = Some(DiscoveryStatus {
            phase: ps(phase, "Discovery started"),
            peering_candidate_list: None,
            providers: Some(providers),
        });
        d
    }

    fn reservation(contract: Option<&str>, purchase: Option<Phase>) -> Reservation {
        let spec: fluidos_api::reservation::ReservationSpec =
            serde_json::from_value(serde_json::json!({
                "solverID": "s1",
                "buyer": {"domain": "d", "nodeID": "consumer01", "ip": "x:1"},
                "seller": {"domain": "d", "nodeID": "provider01", "ip": "y:1"},
                "peeringCandidate": {"name": "pc"}
            }))
            .unwrap();
        let mut r = Reservation::new("reservation-s1", spec);
        r.status = Some(ReservationStatus {
            phase: ps(Phase::Running, "Reservation started"),
            purchase_phase: purchase,
            contract: contract.map(|c| GenericRef::named("fluidos", c)),
            ..Default::default()
        });
        r
    }

    fn contract(name: &str) -> Contract {
        crate::fixtures::contract(name, "K8Slice", "provider01", "consumer01", None)
    }

    fn allocation(name: &str, contract: &str, state: AllocationState, owner: &str) -> Allocation {
        let mut a = Allocation::new(
            name,
            AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef::named("fluidos", contract)),
            },
        );
        a.metadata.owner_references = Some(vec![OwnerReference {
            uid: owner.into(),
            ..Default::default()
        }]);
        a.status = Some(AllocationStatus {
            status: Some(state),
            ..Default::default()
        });
        a
    }

    #[test]
    fn a_new_solver_waits_in_every_requested_stage() {
        let snap = Snapshot {
            solver: Some(solver(true, true, false)),
            ..Default::default()
        };
        let views = stages(&snap);
        assert_eq!(
            views.iter().map(|v| v.stage).collect::<Vec<_>>(),
            vec![Stage::Discovery, Stage::Reservation, Stage::Contract],
            "no Allocation stage without establishPeering"
        );
        assert!(views.iter().all(|v| v.state == StageState::Waiting));
        assert_eq!(outcome(&snap), Outcome::InProgress);
        assert_eq!(solver_line(&snap).0, "Pending");
        assert!(stages(&Snapshot::default()).is_empty());
    }

    #[test]
    fn discovery_shows_what_the_providers_answered() {
        let s = with_status(solver(true, true, false), |st| {
            st.find_candidate = Some(Phase::Running);
            st.solver_phase = Some(ps(Phase::Running, "Solver is trying a Discovery"));
        });
        let snap = Snapshot {
            solver: Some(s),
            discovery: Some(discovery(
                Phase::Running,
                vec![
                    ProviderQueryStatus {
                        address: "a:1".into(),
                        outcome: ProviderOutcome::Answered,
                        flavors: 2,
                        message: None,
                        ..Default::default()
                    },
                    ProviderQueryStatus {
                        address: "b:1".into(),
                        outcome: ProviderOutcome::TimedOut,
                        flavors: 0,
                        message: None,
                        ..Default::default()
                    },
                    ProviderQueryStatus {
                        address: "c:1".into(),
                        outcome: ProviderOutcome::Answered,
                        flavors: 0,
                        dropped_count: 3,
                        ..Default::default()
                    },
                ],
            )),
            ..Default::default()
        };
        let d = &stages(&snap)[0];
        assert_eq!(d.state, StageState::Running);
        assert_eq!(d.object.as_deref(), Some("discovery-s1"));
        assert_eq!(
            d.detail,
            "3 providers: 2 answered (2 matching), 1 failed, 3 listed flavors dropped"
        );
    }

    #[test]
    fn a_purchase_moves_stage_by_stage_to_solved() {
        let running = with_status(solver(true, true, false), |st| {
            st.find_candidate = Some(Phase::Solved);
            st.reserve_and_buy = Some(Phase::Running);
            st.chosen_candidate = Some(ChosenCandidate {
                name: "peeringcandidate-fl-1".into(),
                reason: "cheapest".into(),
                refused: vec![],
            });
            st.solver_phase = Some(ps(Phase::Running, "Reservation: Purchase is running"));
        });
        let mut snap = Snapshot {
            solver: Some(running),
            reservation: Some(reservation(None, Some(Phase::Running))),
            ..Default::default()
        };
        let v = stages(&snap);
        assert_eq!(v[0].state, StageState::Done);
        assert_eq!(v[0].detail, "chose peeringcandidate-fl-1");
        assert_eq!(v[1].state, StageState::Running);
        assert_eq!(v[1].detail, "purchasing from provider01");
        assert_eq!(v[2].state, StageState::Waiting);

        // The Solver says Solved before the watch delivered the Contract.
        let solved = with_status(solver(true, true, false), |st| {
            st.find_candidate = Some(Phase::Solved);
            st.reserve_and_buy = Some(Phase::Solved);
            st.solver_phase = Some(ps(Phase::Solved, "No need to establish a peering"));
        });
        snap.solver = Some(solved);
        snap.reservation = Some(reservation(Some("contract-fl-1-abcd"), None));
        let v = stages(&snap);
        assert_eq!(v[2].state, StageState::Running);
        assert_eq!(v[2].object.as_deref(), Some("contract-fl-1-abcd"));
        assert_eq!(outcome(&snap), Outcome::InProgress);

        snap.contracts = vec![contract("other"), contract("contract-fl-1-abcd")];
        let v = stages(&snap);
        assert_eq!(v[2].state, StageState::Done);
        assert_eq!(v[2].detail, "K8Slice from provider01");
        assert_eq!(outcome(&snap), Outcome::Solved);
    }

    #[test]
    fn peering_follows_the_solvers_own_allocation() {
        let s = with_status(solver(true, true, true), |st| {
            st.find_candidate = Some(Phase::Solved);
            st.reserve_and_buy = Some(Phase::Solved);
            st.peering = Some(Phase::Running);
            st.solver_phase = Some(ps(Phase::Running, "Allocation: peering"));
        });
        let mut snap = Snapshot {
            solver: Some(s),
            reservation: Some(reservation(Some("c1"), None)),
            contracts: vec![contract("c1")],
            allocations: vec![
                allocation("not-ours", "c1", AllocationState::Active, "other-uid"),
                allocation("allocation-fl-1", "c1", AllocationState::Peering, "uid-1"),
            ],
            ..Default::default()
        };
        let a = &stages(&snap)[3];
        assert_eq!(a.object.as_deref(), Some("allocation-fl-1"));
        assert_eq!(a.state, StageState::Running);
        assert_eq!(a.detail, "Peering");

        snap.allocations[1] = allocation("allocation-fl-1", "c1", AllocationState::Error, "uid-1");
        snap.allocations[1].status.as_mut().unwrap().message =
            Some("authentication refused".into());
        let a = &stages(&snap)[3];
        assert_eq!(a.state, StageState::Failed);
        assert_eq!(a.detail, "Error: authentication refused");
    }

    #[test]
    fn a_failed_solver_fails_with_its_message() {
        let s = with_status(solver(true, true, false), |st| {
            st.find_candidate = Some(Phase::Failed);
            st.solver_phase = Some(ps(Phase::Failed, "Solver has not found any candidate"));
        });
        let mut d = discovery(Phase::Failed, vec![]);
        d.status.as_mut().unwrap().phase.message =
            Some("No Flavors found: no providers known (create a KnownCluster)".into());
        let snap = Snapshot {
            solver: Some(s),
            discovery: Some(d),
            ..Default::default()
        };
        assert_eq!(
            outcome(&snap),
            Outcome::Failed("Solver has not found any candidate".into())
        );
        let v = stages(&snap);
        assert_eq!(v[0].state, StageState::Failed);
        assert_eq!(
            v[0].detail,
            "No Flavors found: no providers known (create a KnownCluster)"
        );
        let timed_out = with_status(solver(true, false, false), |st| {
            st.solver_phase = Some(PhaseStatus {
                phase: Phase::TimedOut,
                ..Default::default()
            });
        });
        assert_eq!(
            outcome(&Snapshot {
                solver: Some(timed_out),
                ..Default::default()
            }),
            Outcome::Failed("Timed Out".into())
        );
    }

    #[test]
    fn find_only_is_solved_without_a_reservation() {
        let s = with_status(solver(true, false, false), |st| {
            st.find_candidate = Some(Phase::Solved);
            st.solver_phase = Some(ps(
                Phase::Solved,
                "No need to reserve and buy the resources",
            ));
        });
        let snap = Snapshot {
            solver: Some(s),
            ..Default::default()
        };
        assert_eq!(stages(&snap).len(), 1);
        assert_eq!(outcome(&snap), Outcome::Solved);
    }

    #[test]
    fn the_block_and_the_log_lines() {
        let s = with_status(solver(true, true, false), |st| {
            st.find_candidate = Some(Phase::Running);
            st.solver_phase = Some(ps(Phase::Running, "Solver is trying a Discovery"));
        });
        let snap = Snapshot {
            solver: Some(s),
            ..Default::default()
        };
        let block = render_block(
            "s1",
            &snap,
            std::time::Duration::from_millis(1500),
            Palette::plain(),
        );
        assert_eq!(
            block,
            "solver/s1  Running  1.5s\n  Solver is trying a Discovery\n  \
             … Discovery    -  creating the Discovery\n  \
             · Reservation  -\n  \
             · Contract     -\n"
        );
        let now = stages(&snap);
        let lines = changed_lines(&[], &now, std::time::Duration::from_secs(2));
        assert_eq!(
            lines,
            vec!["[  2.0s] Discovery Running: creating the Discovery"]
        );
        assert!(changed_lines(&now, &now, std::time::Duration::ZERO).is_empty());
        assert_eq!(elapsed_text(std::time::Duration::from_secs(200)), "3m20s");
    }
}

//! Solver controller: find a candidate (through a Discovery when none is
//! known), reserve and buy it (through a Reservation), then allocate it.
//!
//! Phases, status fields and messages are the Go node's, byte for byte, since
//! other tools poll them. Differences: candidates are ranked instead of taking
//! the first, the choice and its reason are in `status.chosenCandidate`,
//! timeouts fire by requeue (not only when an event arrives), and Discovery /
//! Reservation objects left by an earlier Solver of the same name are replaced
//! rather than silently reused (they carry the Solver's UID as owner).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::advertisement::DiscoverySpec;
use fluidos_api::allocation::AllocationSpec;
use fluidos_api::common::GenericRef;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::reservation::ReservationSpec;
use fluidos_api::solver::{ChosenCandidate, FlavorSelector, SolverStatus};
use fluidos_api::{
    Allocation, Discovery, NodeIdentity, PeeringCandidate, Phase, Reservation, Solver, naming,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::purchase::configuration_for;
use crate::ranking::{CandidateFacts, rank};
use crate::status::{seconds_since, set_phase, touch};
use crate::{Context, Error, MANAGER};

/// Runs the Solver controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let ns = ctx.cfg.namespace.clone();
    let solvers: Api<Solver> = Api::namespaced(ctx.client.clone(), &ns);
    let stream = Controller::new(solvers, watcher::Config::default())
        .owns(
            Api::<Discovery>::namespaced(ctx.client.clone(), &ns),
            watcher::Config::default(),
        )
        .owns(
            Api::<Reservation>::namespaced(ctx.client.clone(), &ns),
            watcher::Config::default(),
        )
        .owns(
            Api::<Allocation>::namespaced(ctx.client.clone(), &ns),
            watcher::Config::default(),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, |_, e, _| crate::backoff(e), ctx);
    crate::drain(stream).await;
}

/// How often a running phase is looked at again, so timeouts fire on time.
const POLL: Duration = Duration::from_secs(5);

struct Solve<'a> {
    ctx: &'a Context,
    solver: &'a Solver,
    ns: String,
    st: SolverStatus,
    selector: Option<FlavorSelector>,
}

async fn reconcile(cached: Arc<Solver>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<Solver> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch cache may not have seen our last status write yet; deciding
    // on a stale status would repeat (or undo) a step. Read it fresh, and
    // write it back with this resourceVersion as a precondition.
    let Some(s) = api.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let mut st = s.status.clone().unwrap_or_default();
    let phase = st
        .solver_phase
        .as_ref()
        .map(|p| p.phase.clone())
        .unwrap_or_default();
    match phase {
        Phase::Failed | Phase::TimedOut => return Ok(Action::await_change()),
        Phase::Solved | Phase::Running | Phase::Idle => {}
        _ => set(&mut st, Phase::Idle, "Solver initialized"),
    }
    let selector = match s.spec.selector.as_ref().map(|sel| sel.parse()).transpose() {
        Ok(sel) => sel,
        Err(e) => {
            set(
                &mut st,
                Phase::Failed,
                &format!("Error when finding a candidate: invalid selector: {e}"),
            );
            save(&api, &s, &st).await?;
            return Ok(Action::await_change());
        }
    };
    let mut solve = Solve {
        ctx: &ctx,
        solver: &s,
        ns,
        st,
        selector,
    };
    // Take every step that needs no one else's progress in this one
    // reconcile: each status round trip through the API server costs a
    // watch event, and tools poll for the end result.
    let mut action = Action::requeue(Duration::ZERO);
    for _ in 0..12 {
        action = match solve.step().await {
            Ok(a) => a,
            Err(StepError::Fail(msg)) => {
                set(&mut solve.st, Phase::Failed, &msg);
                Action::await_change()
            }
            Err(StepError::Kube(e)) => {
                if s.status.as_ref() != Some(&solve.st) {
                    save(&api, &s, &solve.st).await?;
                }
                return Err(e);
            }
        };
        if action != Action::requeue(Duration::ZERO) {
            break;
        }
    }
    if s.status.as_ref() != Some(&solve.st) {
        save(&api, &s, &solve.st).await?;
    }
    Ok(action)
}

enum StepError {
    /// Ends the Solver `Failed` with this message.
    Fail(String),
    /// Retried.
    Kube(Error),
}

impl From<kube::Error> for StepError {
    fn from(e: kube::Error) -> Self {
        StepError::Kube(e.into())
    }
}

fn set(st: &mut SolverStatus, phase: Phase, msg: &str) {
    let p = st.solver_phase.get_or_insert_with(Default::default);
    set_phase(p, phase, msg);
}

fn bump(st: &mut SolverStatus) {
    touch(st.solver_phase.get_or_insert_with(Default::default));
}

impl Solve<'_> {
    fn expired(&self, limit: Duration) -> bool {
        self.st
            .solver_phase
            .as_ref()
            .and_then(|p| p.last_change_time.as_deref())
            .and_then(seconds_since)
            .is_some_and(|s| s > limit.as_secs() as i64)
    }

    async fn step(&mut self) -> Result<Action, StepError> {
        let spec = &self.solver.spec;
        let find = spec.find_candidate.unwrap_or(false);
        let buy = spec.reserve_and_buy.unwrap_or(false);
        let peer = spec.establish_peering.unwrap_or(false);

        if find {
            if self.st.find_candidate != Some(Phase::Solved) {
                return self.find_candidate().await;
            }
        } else if self.phase() == Phase::Idle {
            set(&mut self.st, Phase::Solved, "No need to find a candidate");
        }

        if !buy {
            set_if_changed(
                &mut self.st,
                Phase::Solved,
                "No need to reserve and buy the resources",
            );
            return Ok(Action::await_change());
        }
        if self.st.reserve_and_buy != Some(Phase::Solved) {
            return self.reserve_and_buy().await;
        }

        if !peer {
            set_if_changed(
                &mut self.st,
                Phase::Solved,
                "No need to establish a peering",
            );
            return Ok(Action::await_change());
        }
        if self.st.peering != Some(Phase::Solved) {
            return self.peering().await;
        }
        set_if_changed(
            &mut self.st,
            Phase::Solved,
            "Solver has completed all the phases",
        );
        Ok(Action::await_change())
    }

    fn phase(&self) -> Phase {
        self.st
            .solver_phase
            .as_ref()
            .map(|p| p.phase.clone())
            .unwrap_or_default()
    }

    fn owner(&self) -> Result<OwnerReference, StepError> {
        self.solver
            .controller_owner_ref(&())
            .ok_or(StepError::Kube(Error::Incomplete("uid")))
    }

    /// Available candidates matching the selector, best first, with the reason.
    async fn candidates(&self) -> Result<(Vec<PeeringCandidate>, String), StepError> {
        let api: Api<PeeringCandidate> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let all = api.list(&ListParams::default()).await?;
        let mut matching = Vec::new();
        let mut facts = Vec::new();
        for pc in all {
            if !pc.spec.available {
                continue;
            }
            let Ok(t) = pc.spec.flavor.spec.flavor_type.parse() else {
                continue;
            };
            if self.selector.as_ref().is_some_and(|s| !s.matches(&t)) {
                continue;
            }
            facts.push(CandidateFacts::new(
                &pc.name_any(),
                &pc.spec.flavor.spec.price.amount,
                &t,
            ));
            matching.push(pc);
        }
        let (ranked, reason) = rank(facts);
        let ordered = ranked
            .iter()
            .filter_map(|f| matching.iter().find(|pc| pc.name_any() == f.name).cloned())
            .collect();
        Ok((ordered, reason))
    }

    async fn interest(&self, pc: &PeeringCandidate) -> Result<(), StepError> {
        let me = self.solver.name_any();
        if pc.spec.interested_solver_ids.contains(&me) {
            return Ok(());
        }
        let api: Api<PeeringCandidate> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let mut ids = pc.spec.interested_solver_ids.clone();
        ids.push(me);
        api.patch(
            &pc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"interestedSolverIDs": ids}})),
        )
        .await?;
        Ok(())
    }

    /// Returns the child named `name` if this Solver owns it; deletes one a
    /// previous Solver of the same name left behind.
    async fn own_child<K>(&self, name: &str) -> Result<Option<K>, StepError>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let Some(obj) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let uid = self.solver.uid();
        if obj
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == uid.as_ref())
        {
            return Ok(Some(obj));
        }
        tracing::info!(name, kind = %K::kind(&()), "replacing an object left by an earlier Solver of the same name");
        api.delete(name, &DeleteParams::background()).await?;
        Ok(None)
    }

    async fn find_candidate(&mut self) -> Result<Action, StepError> {
        match self.st.find_candidate.clone() {
            None | Some(Phase::Unset) => {
                self.st.find_candidate = Some(Phase::Idle);
                set(&mut self.st, Phase::Running, "Solver is running");
                Ok(Action::requeue(Duration::ZERO))
            }
            Some(Phase::Idle) => {
                let (ranked, reason) = self.candidates().await?;
                if let Some(best) = ranked.first() {
                    self.interest(best).await?;
                    self.st.chosen_candidate = Some(ChosenCandidate {
                        name: best.name_any(),
                        reason,
                    });
                    self.st.find_candidate = Some(Phase::Solved);
                    set(&mut self.st, Phase::Running, "Solver has found a candidate");
                } else {
                    self.st.find_candidate = Some(Phase::Running);
                    set(&mut self.st, Phase::Running, "Solver is trying a Discovery");
                }
                Ok(Action::requeue(Duration::ZERO))
            }
            Some(Phase::Running) => {
                if self.expired(self.ctx.cfg.phase_timeout) {
                    set(
                        &mut self.st,
                        Phase::TimedOut,
                        "Solver has expired before finding a candidate",
                    );
                    return Ok(Action::await_change());
                }
                let name = naming::discovery_name(&self.solver.name_any());
                let discovery = match self.own_child::<Discovery>(&name).await? {
                    Some(d) => d,
                    None => {
                        let mut d = Discovery::new(
                            &name,
                            DiscoverySpec {
                                solver_id: self.solver.name_any(),
                                selector: self.solver.spec.selector.clone(),
                                subscribe: false,
                            },
                        );
                        d.meta_mut().namespace = Some(self.ns.clone());
                        d.meta_mut().owner_references = Some(vec![self.owner()?]);
                        let api: Api<Discovery> =
                            Api::namespaced(self.ctx.client.clone(), &self.ns);
                        match api.create(&PostParams::default(), &d).await {
                            Ok(d) => d,
                            Err(kube::Error::Api(e)) if e.code == 409 => {
                                return Ok(Action::requeue(Duration::from_millis(200)));
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                };
                let dphase = discovery
                    .status
                    .as_ref()
                    .map(|s| s.phase.phase.clone())
                    .unwrap_or_default();
                match dphase {
                    Phase::Solved => {
                        self.st.discovery_phase = Some(Phase::Solved);
                        let (ranked, reason) = self.candidates().await?;
                        match ranked.first() {
                            Some(best) => {
                                self.interest(best).await?;
                                self.st.chosen_candidate = Some(ChosenCandidate {
                                    name: best.name_any(),
                                    reason,
                                });
                                self.st.find_candidate = Some(Phase::Solved);
                                set(
                                    &mut self.st,
                                    Phase::Running,
                                    "Solver has completed the Discovery phase",
                                );
                            }
                            None => self.st.find_candidate = Some(Phase::Failed),
                        }
                        Ok(Action::requeue(Duration::ZERO))
                    }
                    Phase::Failed => {
                        self.st.discovery_phase = Some(Phase::Failed);
                        self.st.find_candidate = Some(Phase::Failed);
                        bump(&mut self.st);
                        Ok(Action::requeue(Duration::ZERO))
                    }
                    Phase::TimedOut => {
                        self.st.discovery_phase = Some(Phase::TimedOut);
                        self.st.find_candidate = Some(Phase::TimedOut);
                        set(
                            &mut self.st,
                            Phase::TimedOut,
                            "Discovery has expired before finding a candidate",
                        );
                        Ok(Action::await_change())
                    }
                    other => {
                        if self.st.discovery_phase.as_ref() != Some(&other) && other != Phase::Unset
                        {
                            self.st.discovery_phase = Some(other);
                            bump(&mut self.st);
                        }
                        Ok(Action::requeue(POLL))
                    }
                }
            }
            Some(Phase::Failed) => {
                // Say why: the Discovery's message names what the providers answered.
                set(
                    &mut self.st,
                    Phase::Failed,
                    "Solver has not found any candidate",
                );
                Ok(Action::await_change())
            }
            Some(_) => Ok(Action::await_change()),
        }
    }

    async fn reserve_and_buy(&mut self) -> Result<Action, StepError> {
        let find = self.solver.spec.find_candidate.unwrap_or(false);
        if find && self.st.find_candidate != Some(Phase::Solved) {
            return Ok(Action::await_change());
        }
        match self.st.reserve_and_buy.clone() {
            None | Some(Phase::Unset) => {
                self.st.reserve_and_buy = Some(Phase::Idle);
                bump(&mut self.st);
                Ok(Action::requeue(Duration::ZERO))
            }
            Some(Phase::Idle) => {
                let name = naming::reservation_name(&self.solver.name_any());
                if self.own_child::<Reservation>(&name).await?.is_some() {
                    self.st.reserve_and_buy = Some(Phase::Running);
                    return Ok(Action::requeue(Duration::ZERO));
                }
                let (ranked, reason) = self.candidates().await?;
                // Prefer the candidate chosen while finding, if it is still free.
                let chosen = self.st.chosen_candidate.as_ref().map(|c| c.name.clone());
                let pick = chosen
                    .and_then(|c| ranked.iter().find(|pc| pc.name_any() == c).cloned())
                    .or_else(|| {
                        let first = ranked.first().cloned();
                        if let Some(f) = &first {
                            self.st.chosen_candidate = Some(ChosenCandidate {
                                name: f.name_any(),
                                reason: reason.clone(),
                            });
                        }
                        first
                    });
                let Some(pc) = pick else {
                    return Err(StepError::Fail(
                        "Error when reserving and buying the resources: no available PeeringCandidate matches the selector".into(),
                    ));
                };
                self.interest(&pc).await?;
                let flavor: FlavorTypeData =
                    pc.spec.flavor.spec.flavor_type.parse().map_err(|e| {
                        StepError::Fail(format!(
                            "Error when reserving and buying the resources: {e}"
                        ))
                    })?;
                let configuration =
                    configuration_for(self.selector.as_ref(), &flavor).map_err(|e| {
                        StepError::Fail(format!(
                            "Error when reserving and buying the resources: {e}"
                        ))
                    })?;
                let owner = &pc.spec.flavor.spec.owner;
                let mut r = Reservation::new(
                    &name,
                    ReservationSpec {
                        solver_id: self.solver.name_any(),
                        buyer: self.ctx.cfg.identity.clone(),
                        seller: NodeIdentity {
                            domain: owner.domain.clone(),
                            node_id: owner.node_id.clone(),
                            ip: owner.ip.clone(),
                            additional_information: None,
                        },
                        configuration,
                        reserve: Some(true),
                        purchase: Some(true),
                        peering_candidate: Some(GenericRef::named(&self.ns, pc.name_any())),
                        ingress_telemetry_endpoint: None,
                    },
                );
                r.meta_mut().namespace = Some(self.ns.clone());
                r.meta_mut().owner_references = Some(vec![self.owner()?]);
                let api: Api<Reservation> = Api::namespaced(self.ctx.client.clone(), &self.ns);
                api.patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&r),
                )
                .await?;
                self.st.reserve_and_buy = Some(Phase::Running);
                set(&mut self.st, Phase::Running, "Reservation created");
                Ok(Action::requeue(POLL))
            }
            Some(Phase::Running) => {
                if self.expired(self.ctx.cfg.phase_timeout) {
                    set(
                        &mut self.st,
                        Phase::TimedOut,
                        "Solver has expired before reserving the resources",
                    );
                    return Ok(Action::await_change());
                }
                let name = naming::reservation_name(&self.solver.name_any());
                let Some(r) = self.own_child::<Reservation>(&name).await? else {
                    self.st.reserve_and_buy = Some(Phase::Idle);
                    return Ok(Action::requeue(Duration::ZERO));
                };
                let rs = r.status.unwrap_or_default();
                match rs.phase.phase {
                    Phase::Solved => {
                        self.st.reservation_phase = Some(Phase::Solved);
                        self.st.reserve_and_buy = Some(Phase::Solved);
                        set(
                            &mut self.st,
                            Phase::Running,
                            "Reservation: Flavor reserved and purchased",
                        );
                        Ok(Action::requeue(Duration::ZERO))
                    }
                    Phase::Failed => {
                        self.st.reservation_phase = Some(Phase::Failed);
                        self.st.reserve_and_buy = Some(Phase::Failed);
                        set(
                            &mut self.st,
                            Phase::Failed,
                            "Reservation: Flavor reservation and purchase failed",
                        );
                        Ok(Action::await_change())
                    }
                    Phase::Running => {
                        self.st.reservation_phase = Some(Phase::Running);
                        if rs.purchase_phase == Some(Phase::Running) {
                            set_if_changed(
                                &mut self.st,
                                Phase::Running,
                                "Reservation: Purchase is running",
                            );
                        } else if rs.reserve_phase == Some(Phase::Running) {
                            set_if_changed(
                                &mut self.st,
                                Phase::Running,
                                "Reservation: Reserve is running",
                            );
                        }
                        Ok(Action::requeue(POLL))
                    }
                    _ => {
                        if self.st.reservation_phase != Some(Phase::Idle) {
                            self.st.reservation_phase = Some(Phase::Idle);
                            bump(&mut self.st);
                        }
                        Ok(Action::requeue(POLL))
                    }
                }
            }
            Some(Phase::Failed) => {
                set(
                    &mut self.st,
                    Phase::Failed,
                    "Solver has failed to reserve the resources",
                );
                Ok(Action::await_change())
            }
            Some(_) => Ok(Action::await_change()),
        }
    }

    async fn peering(&mut self) -> Result<Action, StepError> {
        let find = self.solver.spec.find_candidate.unwrap_or(false);
        if find && self.st.find_candidate != Some(Phase::Solved) {
            return Ok(Action::await_change());
        }
        let name = naming::reservation_name(&self.solver.name_any());
        let contract = self
            .own_child::<Reservation>(&name)
            .await?
            .and_then(|r| r.status)
            .and_then(|s| s.contract);
        let Some(contract) = contract else {
            return Err(StepError::Fail(
                "Error when establishing a peering: the Reservation has no Contract".into(),
            ));
        };
        let contract_name = contract.name.clone().unwrap_or_default();
        let alloc_api: Api<Allocation> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        match self.st.peering.clone() {
            None | Some(Phase::Unset) => {
                self.st.peering = Some(Phase::Idle);
                bump(&mut self.st);
                Ok(Action::requeue(Duration::ZERO))
            }
            Some(Phase::Idle) => {
                let flavor_id = self
                    .st
                    .chosen_candidate
                    .as_ref()
                    .map(|c| c.name.trim_start_matches("peeringcandidate-").to_owned())
                    .unwrap_or_else(|| contract_name.clone());
                let alloc_name = naming::allocation_name(&flavor_id);
                let mut a = Allocation::new(
                    &alloc_name,
                    AllocationSpec {
                        forwarding: Some(false),
                        contract: Some(GenericRef::named(&self.ns, &contract_name)),
                    },
                );
                a.meta_mut().namespace = Some(self.ns.clone());
                a.meta_mut().owner_references = Some(vec![self.owner()?]);
                alloc_api
                    .patch(
                        &alloc_name,
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(&a),
                    )
                    .await?;
                self.st.peering = Some(Phase::Running);
                set(&mut self.st, Phase::Running, "Allocation created");
                Ok(Action::requeue(POLL))
            }
            Some(Phase::Running) => {
                if self.expired(self.ctx.cfg.peering_timeout) {
                    self.st.peering = Some(Phase::Failed);
                    set(
                        &mut self.st,
                        Phase::TimedOut,
                        "Solver has expired before reserving the resources",
                    );
                    return Ok(Action::await_change());
                }
                let allocs = alloc_api.list(&ListParams::default()).await?;
                let status = allocs
                    .into_iter()
                    .find(|a| {
                        a.spec.contract.as_ref().and_then(|c| c.name.as_deref())
                            == Some(contract_name.as_str())
                    })
                    .and_then(|a| a.status)
                    .and_then(|s| s.status)
                    .unwrap_or_default();
                let (peering, msg) = match status.as_str() {
                    "Active" => (Phase::Solved, "Allocation: active"),
                    "Released" => (Phase::Solved, "Allocation: released"),
                    "Provisioning" => (Phase::Running, "Allocation: provisioning"),
                    "ResourceCreation" => (Phase::Running, "Allocation: creating resources"),
                    "Peering" => (Phase::Running, "Allocation: peering"),
                    "Inactive" => (Phase::Running, "Allocation: inactive"),
                    "Error" => {
                        self.st.peering = Some(Phase::Failed);
                        set(&mut self.st, Phase::Failed, "Allocation: error");
                        return Ok(Action::await_change());
                    }
                    _ => return Ok(Action::requeue(POLL)),
                };
                self.st.peering = Some(peering.clone());
                set_if_changed(&mut self.st, Phase::Running, msg);
                Ok(if peering == Phase::Solved {
                    Action::requeue(Duration::ZERO)
                } else {
                    Action::requeue(POLL)
                })
            }
            Some(Phase::Failed) => {
                set(
                    &mut self.st,
                    Phase::Failed,
                    "Solver has failed to establish a peering",
                );
                Ok(Action::await_change())
            }
            Some(_) => Ok(Action::await_change()),
        }
    }
}

/// Sets the phase only when phase or message differ, so repeated reconciles
/// do not move `lastChangeTime` (which the timeouts measure from).
fn set_if_changed(st: &mut SolverStatus, phase: Phase, msg: &str) {
    let same = st
        .solver_phase
        .as_ref()
        .is_some_and(|p| p.phase == phase && p.message.as_deref() == Some(msg));
    if !same {
        set(st, phase, msg);
    }
}

async fn save(api: &Api<Solver>, solver: &Solver, st: &SolverStatus) -> Result<(), Error> {
    // A conflict (409) means someone wrote since we read: retried with fresh data.
    let body = json!({
        "metadata": {"resourceVersion": solver.resource_version()},
        "status": st,
    });
    api.patch_status(
        &solver.name_any(),
        &PatchParams::default(),
        &Patch::Merge(body),
    )
    .await?;
    Ok(())
}

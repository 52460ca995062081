//! Solver controller: find a candidate (through a Discovery when none is
//! known), reserve and buy it (through a Reservation), then allocate it.
//!
//! Phases, status fields and messages are the Go node's, byte for byte, since
//! other tools poll them. Differences: candidates are ranked instead of taking
//! the first, the choice and its reason are in `status.chosenCandidate`,
//! timeouts fire by requeue (not only when an event arrives), and Discovery /
//! Reservation objects left by an earlier Solver of the same name are replaced
//! rather than silently reused (they carry the Solver's UID as owner).
//!
//! Decisions are made by the pure [`machine::plan`]; this module reads what
//! it needs, makes the writes it asks for, and writes the status once.

pub mod machine;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fluidos_api::{Allocation, Discovery, PeeringCandidate, Reservation, Solver, naming};
use fluidos_controller::api_error::{is_already_exists, is_not_found, ok_if_not_found};
use fluidos_controller::readiness::ReadinessGate;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use serde_json::json;

use crate::{Context, Error, MANAGER, Step};
use machine::{ChildKind, Effect, Input, Next, Observed, Timeouts};

/// Controller name in logs and metrics.
const CONTROLLER: &str = "solver";

/// Runs the Solver controller until `shutdown`; `ready` opens once its
/// watches (Solvers and the kinds a Solver owns) are open.
pub async fn run(
    ctx: Arc<Context>,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let gates = Gates {
        solvers: ReadinessGate::new(),
        discoveries: ReadinessGate::new(),
        reservations: ReadinessGate::new(),
        allocations: ReadinessGate::new(),
    };
    let all = gates.clone();
    let report = async move {
        for gate in [
            &all.solvers,
            &all.discoveries,
            &all.reservations,
            &all.allocations,
        ] {
            gate.wait().await;
        }
        ready.set_ready();
    };
    tokio::join!(run_gated(ctx, gates, shutdown), report);
}

/// One readiness gate per watch of the Solver controller.
#[derive(Clone)]
pub(crate) struct Gates {
    /// The Solvers.
    pub(crate) solvers: ReadinessGate,
    /// The Discoveries Solvers own.
    pub(crate) discoveries: ReadinessGate,
    /// The Reservations Solvers own.
    pub(crate) reservations: ReadinessGate,
    /// The Allocations Solvers own.
    pub(crate) allocations: ReadinessGate,
}

/// [`run`], opening one gate per watch.
pub(crate) async fn run_gated(
    ctx: Arc<Context>,
    gates: Gates,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = ctx.cfg.namespace.clone();
    let solvers: Api<Solver> = Api::namespaced(ctx.client.clone(), &ns);
    let reconciler = ctx.reconciler(CONTROLLER);
    let policy = reconciler.clone();
    let drained = reconciler.clone();
    let (cache, objects) = crate::watched(&ctx, solvers, gates.solvers);
    let controller = Controller::for_stream(objects, cache)
        .owns_stream(crate::owned::<Discovery>(&ctx, &ns, gates.discoveries))
        .owns_stream(crate::owned::<Reservation>(&ctx, &ns, gates.reservations))
        .owns_stream(crate::owned::<Allocation>(&ctx, &ns, gates.allocations))
        .graceful_shutdown_on(shutdown);
    let stream = controller.run(
        move |solver, ctx| {
            let reconciler = reconciler.clone();
            async move {
                reconciler
                    .observe(solver.as_ref(), reconcile(solver.clone(), ctx))
                    .await
            }
        },
        move |solver, err, _| policy.error_policy(solver.as_ref(), err),
        ctx,
    );
    fluidos_controller::reconcile::drain(drained, stream).await;
}

#[tracing::instrument(skip_all, fields(solver = %cached.name_any()))]
async fn reconcile(cached: Arc<Solver>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let name = cached.name_any();
    let api: Api<Solver> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch cache may not have seen our last status write yet; deciding
    // on a stale status would repeat (or undo) a step. Read it fresh, and
    // write it back with this resourceVersion as a precondition.
    let Some(solver) = api
        .get_opt(&name)
        .await
        .map_err(Error::kube(Step::ReadSolver))?
    else {
        return Ok(Action::await_change());
    };
    if machine::is_over(&solver) {
        return Ok(Action::await_change());
    }
    let mut observed = observe(&ctx, &solver, &ns).await?;
    let input = Input {
        solver: &solver,
        identity: &ctx.cfg.identity,
        timeouts: Timeouts {
            phase: ctx.cfg.phase_timeout,
            peering: ctx.cfg.peering_timeout,
        },
        now: jiff::Timestamp::now(),
    };
    let mut plan = machine::plan(&input, &observed);
    if plan.needs_candidates {
        observed.candidates = list_candidates(&ctx, &ns, Read::Cached).await?;
        observed.candidates_unread = false;
        plan = machine::plan(&input, &observed);
        if !machine::cached_candidates_suffice(&observed, &plan) {
            observed.candidates = list_candidates(&ctx, &ns, Read::Consistent).await?;
            plan = machine::plan(&input, &observed);
        }
    }
    for effect in &plan.effects {
        if let Some(action) = apply(&ctx, &ns, effect).await? {
            // Another writer got there first: decide again on fresh data.
            return Ok(action);
        }
    }
    if solver.status.as_ref() != Some(&plan.status) {
        save(&api, &solver, &plan.status).await?;
    }
    Ok(match plan.next {
        Next::AwaitChange => Action::await_change(),
        Next::Requeue(after) => Action::requeue(after),
    })
}

/// How fresh a list must be.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// Whatever the API server's watch cache holds, at once.
    Cached,
    /// At least as new as the latest write (may wait for the watch cache).
    Consistent,
}

/// Every PeeringCandidate in `ns`.
async fn list_candidates(
    ctx: &Context,
    ns: &str,
    read: Read,
) -> Result<Vec<PeeringCandidate>, Error> {
    let params = match read {
        Read::Cached => ListParams::default().match_any(),
        Read::Consistent => ListParams::default(),
    };
    Api::<PeeringCandidate>::namespaced(ctx.client.clone(), ns)
        .list(&params)
        .await
        .map(|l| l.items)
        .map_err(Error::kube(Step::ListCandidates))
}

/// Reads what the machine may need, concurrently: the Solver's own children
/// and the Allocations (only when it peers). Candidates are read only when
/// the plan looks at them.
async fn observe(ctx: &Context, solver: &Solver, ns: &str) -> Result<Observed, Error> {
    let name = solver.name_any();
    let client = &ctx.client;
    let discovery = async {
        Api::<Discovery>::namespaced(client.clone(), ns)
            .get_opt(&naming::discovery_name(&name))
            .await
            .map_err(Error::kube(Step::ReadDiscovery))
    };
    let reservation = async {
        Api::<Reservation>::namespaced(client.clone(), ns)
            .get_opt(&naming::reservation_name(&name))
            .await
            .map_err(Error::kube(Step::ReadReservation))
    };
    let peers = solver.spec.establish_peering.unwrap_or(false);
    let allocations = async {
        if !peers {
            return Ok(Vec::new());
        }
        Api::<Allocation>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(Error::kube(Step::ListAllocations))
    };
    let (discovery, reservation, allocations) =
        futures::try_join!(discovery, reservation, allocations)?;
    Ok(Observed {
        candidates: Vec::new(),
        candidates_unread: true,
        discovery,
        reservation,
        allocations,
    })
}

/// Makes one write; `Some` when the reconcile should stop and start again.
async fn apply(ctx: &Context, ns: &str, effect: &Effect) -> Result<Option<Action>, Error> {
    let client = ctx.client.clone();
    match effect {
        Effect::DeleteChild { kind, name } => {
            tracing::info!(
                name,
                ?kind,
                "deleting a child: left by an earlier Solver of the same name, or a finished Discovery to search again"
            );
            let deleted = match kind {
                ChildKind::Discovery => Api::<Discovery>::namespaced(client, ns)
                    .delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ()),
                ChildKind::Reservation => Api::<Reservation>::namespaced(client, ns)
                    .delete(name, &DeleteParams::background())
                    .await
                    .map(|_| ()),
            };
            match deleted {
                Err(e) if !is_not_found(&e) => return Err(Error::kube(Step::DeleteChild)(e)),
                _ => {}
            }
        }
        Effect::CreateDiscovery(d) => {
            match Api::<Discovery>::namespaced(client, ns)
                .create(&PostParams::default(), d)
                .await
            {
                Ok(_) => {}
                // Created meanwhile (or a stale one still terminating): look again shortly.
                Err(e) if is_already_exists(&e) => {
                    return Ok(Some(Action::requeue(Duration::from_millis(200))));
                }
                Err(e) => return Err(Error::kube(Step::CreateDiscovery)(e)),
            }
        }
        Effect::MarkInterest {
            candidate,
            interested,
        } => {
            Api::<PeeringCandidate>::namespaced(client, ns)
                .patch(
                    candidate,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"interestedSolverIDs": interested}})),
                )
                .await
                .map_err(Error::kube(Step::MarkInterest))?;
        }
        Effect::DeleteRefusedReservation(name) => {
            ok_if_not_found(
                Api::<Reservation>::namespaced(client, ns)
                    .delete(name, &DeleteParams::background())
                    .await,
            )
            .map_err(Error::kube(Step::DeleteRefusedReservation))?;
        }
        Effect::ApplyReservation(r) => {
            Api::<Reservation>::namespaced(client, ns)
                .patch(
                    &r.name_any(),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(r.as_ref()),
                )
                .await
                .map_err(Error::kube(Step::ApplyReservation))?;
        }
        Effect::ApplyAllocation(a) => {
            Api::<Allocation>::namespaced(client, ns)
                .patch(
                    &a.name_any(),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(a.as_ref()),
                )
                .await
                .map_err(Error::kube(Step::ApplyAllocation))?;
        }
    }
    Ok(None)
}

async fn save(
    api: &Api<Solver>,
    solver: &Solver,
    st: &fluidos_api::solver::SolverStatus,
) -> Result<(), Error> {
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
    .await
    .map_err(Error::kube(Step::WriteSolverStatus))?;
    Ok(())
}

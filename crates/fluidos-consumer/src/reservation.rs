//! Reservation controller (upstream's "contract manager"): RESERVE, then
//! PURCHASE, through the REAR client, recording the consumer's Transaction
//! and Contract, and the provider's peering kubeconfig in a Secret the
//! Contract names and owns (`fluidos_api::peering_credentials`).
//!
//! Restart-safe: once the transaction ID is in the Reservation status a
//! restarted node purchases it instead of reserving again; a crash before that
//! write re-reserves, which the provider answers with the same transaction
//! (idempotent per buyer and flavor); a crash after the purchase call
//! purchases again, which the provider answers with the same contract. Either
//! way exactly one Contract exists.
//!
//! Decisions are made by the pure functions of [`machine`]; this module reads
//! the Reservation and its candidate, talks to the provider, makes the writes
//! and writes the status once per reconcile.

pub mod machine;

use std::future::Future;
use std::sync::Arc;

use fluidos_api::reservation::ReservationStatus;
use fluidos_api::{Contract, PeeringCandidate, Reservation, Solver, Transaction};
use fluidos_controller::api_error::ok_if_not_found;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_rear_client::{ProviderAddress, RearError};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use serde_json::json;

use crate::{Context, Error, MANAGER, Step};
pub use machine::HELD_BY;
use machine::{Decision, Effect, Input, Plan, Purchase, Refusal, RefusalKind};

/// Controller name in logs and metrics.
const CONTROLLER: &str = "reservation";

/// Runs the Reservation controller until `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<Reservation> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let reconciler = ctx.reconciler(CONTROLLER);
    let policy = reconciler.clone();
    let drained = reconciler.clone();
    let (cache, objects) = crate::watched(&ctx, api, ready);
    let controller = Controller::for_stream(objects, cache).graceful_shutdown_on(shutdown);
    let stream = controller.run(
        move |r, ctx| {
            let reconciler = reconciler.clone();
            async move {
                reconciler
                    .observe(r.as_ref(), reconcile(r.clone(), ctx))
                    .await
            }
        },
        move |r, err, _| policy.error_policy(r.as_ref(), err),
        ctx,
    );
    fluidos_controller::reconcile::drain(drained, stream).await;
}

#[tracing::instrument(skip_all, fields(reservation = %cached.name_any()))]
async fn reconcile(cached: Arc<Reservation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let name = cached.name_any();
    let api: Api<Reservation> = Api::namespaced(ctx.client.clone(), &ns);
    // Decide on the stored status, not on a watch cache that may predate our
    // last write (which would reserve again or purchase twice).
    let Some(r) = api
        .get_opt(&name)
        .await
        .map_err(Error::kube(Step::ReadReservation))?
    else {
        return Ok(Action::await_change());
    };
    let pcs: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), &ns);
    let pc_name = machine::candidate_name(&r);
    let pc = if pc_name.is_empty() {
        None
    } else {
        pcs.get_opt(&pc_name)
            .await
            .map_err(Error::kube(Step::ReadCandidate))?
    };
    let input = Input {
        reservation: &r,
        candidate: pc.as_ref(),
        identity: &ctx.cfg.identity,
        now: crate::status::now_string(),
        owner_ended: owner_ended(&ctx, &r).await?,
    };
    let plan = match machine::decide(&input) {
        Decision::Settle(plan) => plan,
        Decision::Reserve {
            before,
            status,
            seller,
            request,
        } => {
            run_effects(&ctx, &ns, &before).await?;
            let answer = match ctx.rear.reserve(&seller, &request).await {
                Err(e) if e.is_unreachable() => {
                    return Err(rear_error(Step::Reserve, &seller.address, e));
                }
                other => other.map_err(|e| refusal(&e)),
            };
            // A Transaction already kept under the ID the provider chose:
            // the machine refuses to write over this node's own sale.
            let stored = match &answer {
                Ok(tx) if fluidos_api::naming::is_object_name(&tx.transaction_id) => {
                    Api::<Transaction>::namespaced(ctx.client.clone(), &ns)
                        .get_opt(&tx.transaction_id)
                        .await
                        .map_err(Error::kube(Step::ApplyTransaction))?
                }
                _ => None,
            };
            let plan = machine::after_reserve(&input, status, answer.as_ref(), stored.as_ref());
            match machine::purchase_next(&input, &plan) {
                // Straight on to PURCHASE: its first status write records the
                // transaction too, so a crash in between still purchases it.
                Some(Purchase {
                    status,
                    seller,
                    transaction_id,
                    body,
                }) => {
                    run_effects(&ctx, &ns, &plan.before).await?;
                    let attempt = Purchase {
                        status,
                        seller,
                        transaction_id,
                        body,
                    };
                    return purchase(&ctx, &api, &input, &r, attempt, true).await;
                }
                None => plan,
            }
        }
        Decision::Purchase {
            status,
            seller,
            transaction_id,
            body,
            first_attempt,
        } => {
            let attempt = Purchase {
                status,
                seller,
                transaction_id,
                body,
            };
            return purchase(&ctx, &api, &input, &r, attempt, first_attempt).await;
        }
    };
    finish(&ctx, &api, &r, plan).await
}

/// Whom a Service purchase from `seller` issues a kubeconfig of this
/// cluster to, when it can be delivered by Liqo: a pinned seller (its key
/// owns its account here). Its tenant-namespace rights follow once the
/// Contract names its Liqo cluster ID (the buyer's Service Allocation).
fn offloading_grant(input: &Input<'_>, seller: &ProviderAddress) -> Option<crate::OffloadingGrant> {
    let owner = &input.candidate?.spec.flavor.spec.owner;
    Some(crate::OffloadingGrant {
        seller_node_id: Some(owner.node_id.clone()).filter(|s| !s.is_empty())?,
        seller_key: seller.fingerprint.as_ref()?.to_string(),
        seller_cluster_id: owner.liqo_id().map(str::to_owned),
    })
}

/// Sends PURCHASE (recording the first attempt before it), then writes what
/// the answer means.
async fn purchase(
    ctx: &Context,
    api: &Api<Reservation>,
    input: &Input<'_>,
    r: &Reservation,
    attempt: Purchase,
    first_attempt: bool,
) -> Result<Action, Error> {
    let Purchase {
        status,
        seller,
        transaction_id,
        mut body,
    } = attempt;
    if let Some(credentials) = body.liqo_credentials.as_mut()
        && let Some(grant) = offloading_grant(input, &seller)
        && let Some(issue) = &ctx.offloading
    {
        // Before the first attempt is recorded: a failure here is retried
        // and nothing was sent.
        credentials.kubeconfig = issue(grant).await.map_err(Error::Offloading)?;
    }
    if first_attempt {
        // Recorded before the call: after a crash or an unanswered call, a
        // later refusal is not taken as proof that nothing was sold.
        save(api, &r.name_any(), &status).await?;
    }
    let answer = match ctx.rear.purchase(&seller, &transaction_id, &body).await {
        Err(RearError::Unreachable {
            timed_out: true, ..
        }) => {
            let plan = machine::after_purchase_timeout(
                input,
                status,
                ctx.rear.config().purchase_timeout,
                &seller.address,
            );
            return finish(ctx, api, r, plan).await;
        }
        Err(e) if e.is_unreachable() => {
            return Err(rear_error(Step::Purchase, &seller.address, e));
        }
        other => other.map_err(|e| refusal(&e)),
    };
    // The Contract already kept under the name the provider chose: the
    // machine refuses a name taken by another sale.
    let stored = match &answer {
        Ok(wire) if fluidos_api::naming::is_object_name(&wire.contract_id) => {
            Api::<Contract>::namespaced(ctx.client.clone(), &r.namespace().unwrap_or_default())
                .get_opt(&wire.contract_id)
                .await
                .map_err(Error::kube(Step::ApplyContract))?
        }
        _ => None,
    };
    let plan = machine::after_purchase(
        input,
        status,
        answer.as_ref(),
        first_attempt,
        &seller.address,
        stored.as_ref(),
    );
    finish(ctx, api, r, plan).await
}

/// What a provider's refusal means (pure classification in the machine). A
/// provider holding another key than the pinned one is a definite no
/// ([`RefusalKind::Other`]): the Reservation fails and says so.
fn refusal(e: &RearError) -> Refusal {
    let status = match e {
        RearError::Malformed { .. } => None,
        other => Some(other.status().unwrap_or(0)),
    };
    Refusal {
        message: e.to_string(),
        kind: RefusalKind::of_status(status),
        retry_after: e.retry_after(),
    }
}

/// The owning Solver's name when it has failed or timed out.
async fn owner_ended(ctx: &Context, r: &Reservation) -> Result<Option<String>, Error> {
    let running = r
        .status
        .as_ref()
        .is_some_and(|s| s.phase.phase == fluidos_api::Phase::Running);
    let Some(owner) = r
        .owner_references()
        .iter()
        .find(|o| o.kind == "Solver" && o.controller == Some(true))
        .filter(|_| running)
    else {
        return Ok(None);
    };
    let solvers: Api<Solver> =
        Api::namespaced(ctx.client.clone(), &r.namespace().unwrap_or_default());
    let solver = solvers
        .get_opt(&owner.name)
        .await
        .map_err(Error::kube(Step::ReadSolver))?;
    Ok(solver
        .filter(|s| s.uid().as_deref() == Some(owner.uid.as_str()))
        .filter(crate::solver::machine::is_over)
        .map(|s| s.name_any()))
}

fn rear_error(step: Step, provider: &str, source: fluidos_rear_client::RearError) -> Error {
    Error::Rear {
        step,
        provider: provider.to_owned(),
        source,
    }
}

/// Makes the plan's writes around the one status write.
async fn finish(
    ctx: &Context,
    api: &Api<Reservation>,
    r: &Reservation,
    plan: Plan,
) -> Result<Action, Error> {
    let ns = r.namespace().unwrap_or_default();
    run_effects(ctx, &ns, &plan.before).await?;
    if r.status.as_ref() != Some(&plan.status) {
        save(api, &r.name_any(), &plan.status).await?;
    }
    run_effects(ctx, &ns, &plan.after).await?;
    Ok(plan
        .requeue
        .map_or_else(Action::await_change, Action::requeue))
}

async fn run_effects(ctx: &Context, ns: &str, effects: &[Effect]) -> Result<(), Error> {
    // The Contract applied last, whose UID the Secret's ownerReference needs.
    let mut applied: Option<Contract> = None;
    for effect in effects {
        match effect {
            Effect::UpdateCandidate {
                name,
                available,
                holder,
            } => set_candidate(ctx, ns, name, *available, holder.as_deref()).await?,
            Effect::ShowRemainder { name, flavor_type } => {
                let pcs: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
                let patch = json!({
                    "metadata": {"annotations": {HELD_BY: null}},
                    "spec": {
                        "available": true,
                        "flavor": {"spec": {"flavorType": flavor_type}},
                    },
                });
                pcs.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(Error::kube(Step::UpdateCandidate))?;
            }
            Effect::ApplyTransaction(t) => {
                Api::<Transaction>::namespaced(ctx.client.clone(), ns)
                    .patch(
                        &t.name_any(),
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(t.as_ref()),
                    )
                    .await
                    .map_err(Error::kube(Step::ApplyTransaction))?;
            }
            Effect::ApplyCredentials(secret) => {
                Api::<Secret>::namespaced(ctx.client.clone(), ns)
                    .patch(
                        &secret.name_any(),
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(secret.as_ref()),
                    )
                    .await
                    .map_err(Error::kube(Step::ApplyCredentials))?;
            }
            Effect::ApplyContract(c) => {
                let mut c = c.clone();
                if ctx.offloading.is_none() {
                    // This node sent no kubeconfig: whatever the seller
                    // says, nothing is delivered here by Liqo (its checks
                    // key on this label, never on the seller's word).
                    c.labels_mut()
                        .remove(fluidos_api::service_delivery::DELIVERY_LABEL);
                }
                let stored = Api::<Contract>::namespaced(ctx.client.clone(), ns)
                    .patch(
                        &c.name_any(),
                        &PatchParams::apply(MANAGER).force(),
                        &Patch::Apply(c.as_ref()),
                    )
                    .await
                    .map_err(Error::kube(Step::ApplyContract))?;
                applied = Some(stored);
            }
            Effect::OwnCredentials { secret, contract } => {
                own_credentials(ctx, ns, secret, contract, applied.as_ref()).await?;
            }
            Effect::DeleteTransaction(id) => {
                ok_if_not_found(
                    Api::<Transaction>::namespaced(ctx.client.clone(), ns)
                        .delete(id, &DeleteParams::default())
                        .await,
                )
                .map_err(Error::kube(Step::DeleteTransaction))?;
            }
        }
    }
    Ok(())
}

/// Makes the credentials Secret `secret` owned by the Contract `contract`,
/// whose UID comes from `applied` (the apply's answer) or, failing that, a
/// read. A strategic merge patch of `ownerReferences` alone (merged by UID):
/// the Secret's server-side apply, which has no owner to give, then never
/// takes it away again when a purchase is repeated.
async fn own_credentials(
    ctx: &Context,
    ns: &str,
    secret: &str,
    contract: &str,
    applied: Option<&Contract>,
) -> Result<(), Error> {
    let uid = match applied.filter(|c| c.name_any() == contract) {
        Some(c) => c.uid(),
        None => Api::<Contract>::namespaced(ctx.client.clone(), ns)
            .get(contract)
            .await
            .map_err(Error::kube(Step::OwnCredentials))?
            .uid(),
    }
    .ok_or(Error::Incomplete("uid"))?;
    crate::credentials_sweep::give_to_contract(
        &Api::<Secret>::namespaced(ctx.client.clone(), ns),
        secret,
        contract,
        &uid,
    )
    .await
    .map_err(Error::kube(Step::OwnCredentials))
}

async fn set_candidate(
    ctx: &Context,
    ns: &str,
    name: &str,
    available: bool,
    holder: Option<&str>,
) -> Result<(), Error> {
    let pcs: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
    let patch = json!({
        "metadata": {"annotations": {HELD_BY: holder}},
        "spec": {"available": available},
    });
    pcs.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(Error::kube(Step::UpdateCandidate))?;
    let status = json!({"status": {"lastUpdateTime": crate::status::now_string()}});
    // The status may not exist yet on a hand-made candidate; that is fine.
    if let Err(e) = pcs
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        tracing::debug!(candidate = name, error = %e, "candidate lastUpdateTime not written");
    }
    Ok(())
}

async fn save(api: &Api<Reservation>, name: &str, st: &ReservationStatus) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": st })),
    )
    .await
    .map_err(Error::kube(Step::WriteReservationStatus))?;
    Ok(())
}

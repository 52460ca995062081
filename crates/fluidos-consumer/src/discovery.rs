//! Discovery controller: asks every known provider for matching flavors, in
//! parallel (at most `discovery_concurrency` queries at once, across all
//! Discoveries) with a per-provider timeout that starts when its query
//! does, and records one PeeringCandidate per flavor. One unreachable or
//! broken provider never blocks the others beyond its timeout.
//!
//! Decisions are pure functions in [`machine`]; this module does the queries
//! and the writes, and writes the status once per reconcile.

pub mod machine;

use std::future::Future;
use std::sync::Arc;

use fluidos_api::advertisement::{DiscoveryStatus, PeeringCandidateStatus};
use fluidos_api::embedded::EmbeddedFlavor;
use fluidos_api::solver::FlavorSelector;
use fluidos_api::{Discovery, KnownCluster, PeeringCandidate, Phase, naming};
use fluidos_controller::api_error::is_already_exists;
use fluidos_controller::api_error::is_conflict;
use fluidos_controller::readiness::ReadinessGate;
use fluidos_rear_client::{Fingerprint, ProviderAddress};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use serde_json::json;

use crate::{Context, Error, Step};
pub use machine::usable_flavors;
use machine::{Answer, ProviderAnswer, Start};

/// Controller name in logs and metrics.
const CONTROLLER: &str = "discovery";

/// Runs the Discovery controller until `shutdown`.
pub async fn run(
    ctx: Arc<Context>,
    ready: ReadinessGate,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let api: Api<Discovery> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let reconciler = ctx.reconciler(CONTROLLER);
    let policy = reconciler.clone();
    let drained = reconciler.clone();
    let (cache, objects) = crate::watched(&ctx, api, ready);
    let controller = Controller::for_stream(objects, cache).graceful_shutdown_on(shutdown);
    let stream = controller.run(
        move |d, ctx| {
            let reconciler = reconciler.clone();
            async move {
                reconciler
                    .observe(d.as_ref(), reconcile(d.clone(), ctx))
                    .await
            }
        },
        move |d, err, _| policy.error_policy(d.as_ref(), err),
        ctx,
    );
    fluidos_controller::reconcile::drain(drained, stream).await;
}

/// Queries one provider with the configured timeout.
async fn ask(
    ctx: &Context,
    provider: ProviderAddress,
    selector: Option<&FlavorSelector>,
) -> ProviderAnswer {
    // At most `discovery_concurrency` listings in flight in this node, each
    // up to MAX_LIST_BYTES; the timeout starts once the slot is ours.
    let _slot = ctx.discovery_slots().acquire().await;
    let answer = match tokio::time::timeout(
        ctx.cfg.peer_timeout,
        ctx.rear.list_flavors(&provider, selector),
    )
    .await
    {
        Err(_) => Answer::TimedOut(ctx.cfg.peer_timeout),
        Ok(Err(e)) => Answer::Failed(e.to_string()),
        Ok(Ok(list)) => Answer::Listed(list),
    };
    let answer = machine::provider_answer(
        &provider,
        answer,
        selector,
        &ctx.cfg.namespace,
        &ctx.cfg.identity.node_id,
    );
    ctx.metrics.discovery.query(answer.status.outcome.as_str());
    if let Some(first) = answer.status.dropped.as_ref().and_then(|d| d.first()) {
        tracing::warn!(
            provider = %answer.status.address,
            dropped = answer.status.dropped_count,
            flavor = %first.flavor_id,
            reason = %first.reason,
            error = %first.message,
            "dropped listed flavors (see the Discovery's status.providers)"
        );
    }
    answer
}

#[tracing::instrument(skip_all, fields(discovery = %cached.name_any()))]
async fn reconcile(cached: Arc<Discovery>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<Discovery> = Api::namespaced(ctx.client.clone(), &ns);
    // The watch cache may predate our last status write: deciding on it
    // would start a finished search again.
    let Some(d) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(Error::kube(Step::ReadDiscovery))?
    else {
        return Ok(Action::await_change());
    };
    let status = match machine::start(d.status.as_ref(), &crate::status::now_string()) {
        Start::Done => return Ok(Action::await_change()),
        Start::Begin(status) => {
            // Written before the queries (which may take the per-provider
            // timeout) so that watchers see the search running; the round
            // goes on in this reconcile, whose watch cache would not show
            // this write yet.
            patch_status(&api, &d.name_any(), &status).await?;
            *status
        }
        Start::Query => d.status.clone().unwrap_or_default(),
    };

    let selector = match d.spec.selector.as_ref().map(|s| s.parse()).transpose() {
        Ok(s) => s,
        Err(e) => {
            let mut status = status;
            crate::status::set_phase_at(
                &mut status.phase,
                Phase::Failed,
                &format!("Error when getting Flavor: invalid selector: {e}"),
                &crate::status::now_string(),
            );
            patch_status(&api, &d.name_any(), &status).await?;
            return Ok(Action::await_change());
        }
    };
    let known: Api<KnownCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let known = known
        .list(&ListParams::default())
        .await
        .map_err(Error::kube(Step::ListKnownClusters))?
        .items;
    let providers = machine::providers(&known, &ctx.cfg.static_peers);
    ctx.metrics
        .discovery
        .set_known_peers(providers.ask.len() + providers.refused.len());

    // Each query waits for a slot (see `ask`), so a slow provider holds up
    // only its own slot, not the queries after it.
    let mut answers = futures::future::join_all(
        providers
            .ask
            .into_iter()
            .map(|p| ask(&ctx, p, selector.as_ref())),
    )
    .await;
    for (address, why) in providers.refused {
        let answer = machine::provider_answer(
            &ProviderAddress::plain(address),
            Answer::Failed(why),
            selector.as_ref(),
            &ctx.cfg.namespace,
            &ctx.cfg.identity.node_id,
        );
        ctx.metrics.discovery.query(answer.status.outcome.as_str());
        answers.push(answer);
    }

    let mut items = Vec::new();
    for answer in &answers {
        for flavor in &answer.flavors {
            let pc =
                upsert_candidate(&ctx, &ns, flavor, &d.spec.solver_id, answer.fingerprint).await?;
            items.push(machine::embedded(&pc));
        }
    }
    withdraw_unlisted(&ctx, &ns, &answers, selector.as_ref()).await?;
    let conclusion = machine::conclude(status, &answers, items, jiff::Timestamp::now());
    if let Some(status) = &conclusion.status {
        patch_status(&api, &d.name_any(), status).await?;
    }
    Ok(conclusion
        .retry_in
        .map_or_else(Action::await_change, Action::requeue))
}

/// Creates the candidate or refreshes its flavor snapshot, adding the solver
/// to `interestedSolverIDs`; never resets availability a reservation took.
async fn upsert_candidate(
    ctx: &Context,
    ns: &str,
    flavor: &EmbeddedFlavor,
    solver: &str,
    fingerprint: Option<Fingerprint>,
) -> Result<PeeringCandidate, Error> {
    let api: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
    let name = naming::peering_candidate_name(flavor.id());
    let failed = Error::kube(Step::UpsertCandidate);
    for _ in 0..5 {
        let existing = api
            .get_opt(&name)
            .await
            .map_err(Error::kube(Step::UpsertCandidate))?;
        let Some(existing) = existing else {
            let pc = machine::new_candidate(&name, ns, flavor, solver, fingerprint);
            match api.create(&PostParams::default(), &pc).await {
                Ok(created) => {
                    let st = PeeringCandidateStatus {
                        creation_time: crate::status::now_string(),
                        last_update_time: String::new(),
                    };
                    return Ok(api
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({ "status": st })),
                        )
                        .await
                        .unwrap_or(created));
                }
                Err(e) if is_already_exists(&e) => continue,
                Err(e) => return Err(failed(e)),
            }
        };
        let Some(pc) = machine::refreshed_candidate(&existing, flavor, solver, fingerprint) else {
            return Ok(existing);
        };
        match api.replace(&name, &PostParams::default(), &pc).await {
            Ok(updated) => return Ok(updated),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(Error::UnstableCandidate(name))
}

/// Marks unavailable the free candidates their provider no longer lists.
async fn withdraw_unlisted(
    ctx: &Context,
    ns: &str,
    answers: &[ProviderAnswer],
    selector: Option<&FlavorSelector>,
) -> Result<(), Error> {
    let api: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
    let candidates = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube(Step::WithdrawCandidate))?;
    for pc in candidates {
        if machine::should_withdraw(&pc, answers, selector) {
            api.patch(
                &pc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"available": false}})),
            )
            .await
            .map_err(Error::kube(Step::WithdrawCandidate))?;
        }
    }
    Ok(())
}

async fn patch_status(
    api: &Api<Discovery>,
    name: &str,
    status: &DiscoveryStatus,
) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map_err(Error::kube(Step::WriteDiscoveryStatus))?;
    Ok(())
}

//! Discovery controller: asks every known provider for matching flavors, in
//! parallel with a per-provider timeout, and records one PeeringCandidate per
//! flavor. One unreachable or broken provider never blocks the others.

use std::future::Future;
use std::sync::Arc;

use fluidos_api::advertisement::{
    EmbeddedPeeringCandidate, EmbeddedPeeringCandidateList, PeeringCandidateSpec,
    PeeringCandidateStatus, ProviderQueryStatus,
};
use fluidos_api::embedded::{EmbeddedFlavor, EmbeddedObjectMeta};
use fluidos_api::rear::WireFlavor;
use fluidos_api::solver::FlavorSelector;
use fluidos_api::{Discovery, KnownCluster, PeeringCandidate, Phase, naming};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::status::{now, set_phase};
use crate::{Context, Error};

/// How long a Discovery keeps asking when no provider answers at all.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// Runs the Discovery controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let api: Api<Discovery> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let stream = Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, |_, e, _| crate::backoff(e), ctx);
    crate::drain(stream).await;
}

/// What one provider answered.
pub struct ProviderAnswer {
    /// Outcome recorded in the Discovery status.
    pub status: ProviderQueryStatus,
    /// Flavors returned (already decoded and filtered).
    pub flavors: Vec<EmbeddedFlavor>,
}

/// Queries one provider with the configured timeout.
async fn ask(ctx: &Context, address: String, selector: Option<&FlavorSelector>) -> ProviderAnswer {
    let ns = &ctx.cfg.namespace;
    let answer = tokio::time::timeout(
        ctx.cfg.peer_timeout,
        ctx.rear.list_flavors(&address, selector),
    )
    .await;
    let (outcome, message, wire) = match answer {
        Err(_) => (
            "TimedOut",
            Some(format!("no answer within {:?}", ctx.cfg.peer_timeout)),
            Vec::new(),
        ),
        Ok(Err(e)) if e.is_unreachable() => ("Failed", Some(e.to_string()), Vec::new()),
        Ok(Err(e)) => ("Failed", Some(e.to_string()), Vec::new()),
        Ok(Ok(list)) => ("Answered", None, list),
    };
    let flavors = usable_flavors(&wire, selector, ns, &ctx.cfg.identity.node_id);
    ProviderAnswer {
        status: ProviderQueryStatus {
            address,
            outcome: outcome.to_owned(),
            flavors: flavors.len() as i64,
            message,
        },
        flavors,
    }
}

/// Decodes wire flavors, drops our own and those that do not really match
/// (the query cannot carry regex filters), keeping only available ones.
pub fn usable_flavors(
    wire: &[WireFlavor],
    selector: Option<&FlavorSelector>,
    namespace: &str,
    own_node_id: &str,
) -> Vec<EmbeddedFlavor> {
    wire.iter()
        .filter(|w| w.availability && w.owner.id != own_node_id)
        .filter_map(|w| match (w.to_embedded(namespace), w.parse_type()) {
            (Ok(f), Ok(t)) if selector.is_none_or(|s| s.matches(&t)) => Some(f),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(flavor = %w.flavor_id, error = %e, "skipping malformed flavor");
                None
            }
            _ => None,
        })
        .collect()
}

async fn reconcile(d: Arc<Discovery>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = d.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<Discovery> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = d.status.clone().unwrap_or_default();
    match status.phase.phase {
        Phase::Solved | Phase::Failed | Phase::TimedOut | Phase::Idle => {
            return Ok(Action::await_change());
        }
        Phase::Running => {}
        _ => {
            status.phase.start_time = Some(now());
            status.peering_candidate_list = Some(EmbeddedPeeringCandidateList::default());
            set_phase(&mut status.phase, Phase::Running, "Discovery started");
            patch_status(&api, &d.name_any(), &status).await?;
            // Go straight on: the query is this reconcile's work.
        }
    }

    let selector = match d.spec.selector.as_ref().map(|s| s.parse()).transpose() {
        Ok(s) => s,
        Err(e) => {
            set_phase(
                &mut status.phase,
                Phase::Failed,
                &format!("Error when getting Flavor: invalid selector: {e}"),
            );
            patch_status(&api, &d.name_any(), &status).await?;
            return Ok(Action::await_change());
        }
    };
    let known: Api<KnownCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let mut addresses: Vec<String> = known
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|k| k.spec.address)
        .chain(ctx.cfg.static_peers.iter().cloned())
        .collect();
    addresses.sort();
    addresses.dedup();

    let answers = futures::future::join_all(
        addresses
            .into_iter()
            .map(|a| ask(&ctx, a, selector.as_ref())),
    )
    .await;

    let mut items = Vec::new();
    for flavor in answers.iter().flat_map(|a| a.flavors.iter()) {
        let pc = upsert_candidate(&ctx, &ns, flavor, &d.spec.solver_id).await?;
        items.push(EmbeddedPeeringCandidate {
            api_version: Some("advertisement.fluidos.eu/v1alpha1".into()),
            kind: Some("PeeringCandidate".into()),
            metadata: EmbeddedObjectMeta {
                name: pc.metadata.name.clone(),
                namespace: pc.metadata.namespace.clone(),
                ..Default::default()
            },
            spec: pc.spec.clone(),
            status: pc.status.clone(),
        });
    }
    withdraw_unlisted(&ctx, &ns, &answers, selector.as_ref()).await?;
    let failed: Vec<&ProviderQueryStatus> = answers
        .iter()
        .map(|a| &a.status)
        .filter(|s| s.outcome != "Answered")
        .collect();
    let asked = answers.len();
    status.providers = Some(answers.iter().map(|a| a.status.clone()).collect());
    // Nobody answered (providers starting, briefly unreachable): ask again for
    // a while before calling it a failure.
    let answered = asked - failed.len();
    let waited = status
        .phase
        .start_time
        .as_deref()
        .and_then(crate::status::seconds_since)
        .unwrap_or(0);
    if items.is_empty() && answered == 0 && asked > 0 && waited < RETRY_FOR.as_secs() as i64 {
        let msg = format!("Discovery started: no provider answered yet ({asked} asked), retrying");
        if status.phase.message.as_deref() != Some(msg.as_str()) {
            crate::status::touch(&mut status.phase);
            status.phase.message = Some(msg);
            patch_status(&api, &d.name_any(), &status).await?;
        }
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    }
    if items.is_empty() {
        let msg = if asked == 0 {
            "No Flavors found: no providers known (create a KnownCluster)".to_owned()
        } else if failed.len() == asked {
            format!("Error when getting Flavor: all {asked} providers failed")
        } else {
            format!(
                "No Flavors found ({} of {asked} providers failed)",
                failed.len()
            )
        };
        set_phase(&mut status.phase, Phase::Failed, &msg);
    } else {
        set_phase(
            &mut status.phase,
            Phase::Solved,
            "Discovery Solved: Peering Candidate found",
        );
    }
    status.peering_candidate_list = Some(EmbeddedPeeringCandidateList {
        items,
        ..Default::default()
    });
    patch_status(&api, &d.name_any(), &status).await?;
    Ok(Action::await_change())
}

/// Creates the candidate or refreshes its flavor snapshot, adding the solver
/// to `interestedSolverIDs`; never resets availability a reservation took.
async fn upsert_candidate(
    ctx: &Context,
    ns: &str,
    flavor: &EmbeddedFlavor,
    solver: &str,
) -> Result<PeeringCandidate, Error> {
    let api: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
    let name = naming::peering_candidate_name(flavor.id());
    for _ in 0..5 {
        match api.get_opt(&name).await? {
            None => {
                let mut pc = PeeringCandidate::new(
                    &name,
                    PeeringCandidateSpec {
                        interested_solver_ids: vec![solver.to_owned()],
                        flavor: flavor.clone(),
                        available: true,
                    },
                );
                pc.meta_mut().namespace = Some(ns.to_owned());
                match api.create(&PostParams::default(), &pc).await {
                    Ok(created) => {
                        let st = PeeringCandidateStatus {
                            creation_time: now(),
                            last_update_time: String::new(),
                        };
                        let patched = api
                            .patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({ "status": st })),
                            )
                            .await
                            .unwrap_or(created);
                        return Ok(patched);
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Some(mut pc) => {
                let mut changed = false;
                if !pc.spec.interested_solver_ids.iter().any(|s| s == solver) {
                    pc.spec.interested_solver_ids.push(solver.to_owned());
                    changed = true;
                }
                if pc.spec.flavor.spec != flavor.spec {
                    pc.spec.flavor = flavor.clone();
                    changed = true;
                }
                // Listed again by its provider and held by no reservation: free.
                if !pc.spec.available && !pc.annotations().contains_key(crate::reservation::HELD_BY)
                {
                    pc.spec.available = true;
                    changed = true;
                }
                if !changed {
                    return Ok(pc);
                }
                match api.replace(&name, &PostParams::default(), &pc).await {
                    Ok(updated) => return Ok(updated),
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Err(Error::Incomplete(
        "a stable PeeringCandidate after 5 conflicting writes",
    ))
}

/// Marks unavailable the free candidates a provider no longer lists although
/// they match this selector: sold out, or sold whole by a Go provider (which
/// then lists the remainder under a new flavor ID).
async fn withdraw_unlisted(
    ctx: &Context,
    ns: &str,
    answers: &[ProviderAnswer],
    selector: Option<&FlavorSelector>,
) -> Result<(), Error> {
    let api: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), ns);
    let candidates = api.list(&ListParams::default()).await?;
    for pc in candidates {
        let flavor = &pc.spec.flavor;
        let Some(answer) = answers
            .iter()
            .find(|a| a.status.outcome == "Answered" && a.status.address == flavor.spec.owner.ip)
        else {
            continue;
        };
        let held = pc.annotations().contains_key(crate::reservation::HELD_BY);
        let listed = answer.flavors.iter().any(|f| f.id() == flavor.id());
        let matches = match flavor.spec.flavor_type.parse() {
            Ok(t) => selector.is_none_or(|s| s.matches(&t)),
            Err(_) => true,
        };
        if pc.spec.available && !held && !listed && matches {
            api.patch(
                &pc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"available": false}})),
            )
            .await?;
        }
    }
    Ok(())
}

async fn patch_status(
    api: &Api<Discovery>,
    name: &str,
    status: &fluidos_api::advertisement::DiscoveryStatus,
) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluidos_api::rear::{WireFlavor, WireK8Slice, characteristics};

    fn wire(id: &str, owner: &str, cpu: &str, available: bool) -> WireFlavor {
        let k = WireK8Slice {
            characteristics: characteristics("amd64", cpu, "4Gi", "10"),
            ..Default::default()
        };
        serde_json::from_value(json!({
            "flavorID": id, "providerID": owner,
            "type": {"name": "k8slice", "data": serde_json::to_value(&k).unwrap()},
            "timestamp": "2026-11-30T10:00:00Z",
            "price": {"amount": "", "currency": "", "period": ""},
            "owner": {"ID": owner, "IP": "127.0.0.1:1", "domain": "fluidos.eu"},
            "availability": available
        }))
        .unwrap()
    }

    #[test]
    fn filters_own_unavailable_and_non_matching_flavors() {
        let sel = fluidos_api::solver::Selector {
            flavor_type: "K8Slice".into(),
            filters: Some(json!({"cpuFilter": {"name": "Range", "data": {"min": "2"}}})),
        }
        .parse()
        .unwrap();
        let list = vec![
            wire("a", "prov", "4", true),
            wire("b", "prov", "1", true),
            wire("c", "me", "4", true),
            wire("d", "prov", "4", false),
        ];
        let kept = usable_flavors(&list, Some(&sel), "fluidos", "me");
        assert_eq!(kept.iter().map(|f| f.id()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(kept[0].metadata.namespace.as_deref(), Some("fluidos"));
        assert_eq!(usable_flavors(&list, None, "fluidos", "me").len(), 2);
    }
}

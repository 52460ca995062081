//! Reservation controller (upstream's "contract manager"): RESERVE, then
//! PURCHASE, through the REAR client, recording the consumer's Transaction
//! and Contract.
//!
//! Restart-safe: once the transaction ID is in the Reservation status a
//! restarted node purchases it instead of reserving again; a crash before that
//! write re-reserves, which the provider answers with the same transaction
//! (idempotent per buyer and flavor); a
//! crash after the purchase call purchases again, which the provider answers
//! with the same contract. Either way exactly one Contract exists.

use std::future::Future;
use std::sync::Arc;

use fluidos_api::common::{GenericRef, NodeIdentityAdditionalInfo};
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::rear::{
    PurchaseRequest, ReserveRequest, WireConfiguration, WireLiqoCredentials, WireNodeIdentity,
    WireTelemetryServer,
};
use fluidos_api::reservation::{ReservationStatus, TransactionSpec};
use fluidos_api::{Contract, PeeringCandidate, Phase, Reservation, Transaction};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::status::{now, set_phase};
use crate::{Context, Error, MANAGER};

/// Annotation on a PeeringCandidate naming the Reservation that holds it, so
/// a restarted controller recognises its own hold.
pub const HELD_BY: &str = "reservation.fluidos.eu/held-by";

/// Runs the Reservation controller until `shutdown`.
pub async fn run(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let api: Api<Reservation> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let stream = Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, |_, e, _| crate::backoff(e), ctx);
    crate::drain(stream).await;
}

async fn reconcile(cached: Arc<Reservation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().ok_or(Error::Incomplete("namespace"))?;
    let name = cached.name_any();
    let api: Api<Reservation> = Api::namespaced(ctx.client.clone(), &ns);
    // Decide on the stored status, not on a watch cache that may predate our
    // last write (which would reserve again or purchase twice).
    let Some(r) = api.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let mut st = r.status.clone().unwrap_or_default();
    let reserve = r.spec.reserve.unwrap_or(false);
    let purchase = r.spec.purchase.unwrap_or(false);

    match st.phase.phase {
        Phase::Failed | Phase::TimedOut => return Ok(Action::await_change()),
        // Solved stays open to a later `purchase: true`, within the transaction's life.
        Phase::Solved if !(purchase && st.purchase_phase != Some(Phase::Solved)) => {
            return Ok(Action::await_change());
        }
        Phase::Running | Phase::Solved => {}
        _ => {
            st.phase.start_time = Some(now());
            set_phase(&mut st.phase, Phase::Running, "Reservation started");
            st.reserve_phase = Some(Phase::Idle);
            st.purchase_phase = Some(Phase::Idle);
            save(&api, &name, &st).await?;
        }
    }

    let pcs: Api<PeeringCandidate> = Api::namespaced(ctx.client.clone(), &ns);
    let pc_ref = r.spec.peering_candidate.clone().unwrap_or_default();
    let pc_name = pc_ref.name.clone().unwrap_or_default();
    let Some(pc) = pcs.get_opt(&pc_name).await? else {
        set_phase(
            &mut st.phase,
            Phase::Failed,
            "Reservation failed: error when getting PeeringCandidate",
        );
        save(&api, &name, &st).await?;
        return Ok(Action::await_change());
    };
    let flavor_type = match pc.spec.flavor.spec.flavor_type.parse() {
        Ok(t) => t,
        Err(e) => {
            set_phase(
                &mut st.phase,
                Phase::Failed,
                &format!("Reservation failed: error when parsing Flavor type: {e}"),
            );
            save(&api, &name, &st).await?;
            return Ok(Action::await_change());
        }
    };
    let seller = pc.spec.flavor.spec.owner.ip.clone();
    let holder = format!("{ns}/{name}");

    if reserve && st.reserve_phase != Some(Phase::Solved) {
        if st.transaction_id.is_none() {
            let held_by_us = pc.annotations().get(HELD_BY) == Some(&holder);
            if !pc.spec.available && !held_by_us {
                st.reserve_phase = Some(Phase::Failed);
                set_phase(
                    &mut st.phase,
                    Phase::Failed,
                    "Reservation failed: PeeringCandidate not available",
                );
                save(&api, &name, &st).await?;
                return Ok(Action::await_change());
            }
            set_candidate(&pcs, &pc_name, false, Some(&holder)).await?;
            st.reserve_phase = Some(Phase::Running);
            let request = ReserveRequest {
                flavor_id: pc.spec.flavor.id().to_owned(),
                buyer: WireNodeIdentity::from(&ctx.cfg.identity),
                configuration: match r
                    .spec
                    .configuration
                    .as_ref()
                    .map(WireConfiguration::from_crd)
                    .transpose()
                {
                    Ok(c) => c,
                    Err(e) => {
                        return fail(
                            &api,
                            &pcs,
                            &name,
                            &pc_name,
                            &mut st,
                            true,
                            &format!("Reservation failed: error when reserving flavor: {e}"),
                        )
                        .await;
                    }
                },
            };
            let tx = match ctx.rear.reserve(&seller, &request).await {
                Ok(tx) => tx,
                Err(e) if e.is_unreachable() => return Err(e.into()),
                Err(e) => {
                    return fail(
                        &api,
                        &pcs,
                        &name,
                        &pc_name,
                        &mut st,
                        true,
                        &format!("Reservation failed: error when reserving flavor: {e}"),
                    )
                    .await;
                }
            };
            // Recorded with the status write below: a crash before it re-reserves,
            // which the provider answers with this same transaction.
            st.transaction_id = Some(tx.transaction_id.clone());
            let mut buyer = ctx.cfg.identity.clone();
            if buyer.additional_information.is_none() {
                buyer.additional_information = Some(NodeIdentityAdditionalInfo::default());
            }
            let mut t = Transaction::new(
                &tx.transaction_id,
                TransactionSpec {
                    flavor_id: tx.flavor_id.clone(),
                    buyer,
                    cluster_id: ctx.cfg.identity.liqo_id().unwrap_or_default().to_owned(),
                    configuration: r.spec.configuration.clone(),
                    expiration_time: Some(tx.expiration_time.clone()).filter(|s| !s.is_empty()),
                },
            );
            t.meta_mut().namespace = Some(ns.clone());
            let txs: Api<Transaction> = Api::namespaced(ctx.client.clone(), &ns);
            txs.patch(
                &tx.transaction_id,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&t),
            )
            .await?;
        }
        st.reserve_phase = Some(Phase::Solved);
        crate::status::touch(&mut st.phase);
        save(&api, &name, &st).await?;
    }

    if !purchase {
        if st.reserve_phase == Some(Phase::Solved) && st.phase.phase != Phase::Solved {
            // Upstream never leaves Running here; a reserve-only Reservation is done.
            set_phase(&mut st.phase, Phase::Solved, "Reservation solved");
            save(&api, &name, &st).await?;
        }
        return Ok(Action::await_change());
    }
    if st.reserve_phase != Some(Phase::Solved) || st.purchase_phase == Some(Phase::Solved) {
        return Ok(Action::await_change());
    }
    let Some(tx_id) = st.transaction_id.clone() else {
        st.purchase_phase = Some(Phase::Failed);
        return fail(
            &api,
            &pcs,
            &name,
            &pc_name,
            &mut st,
            true,
            "Reservation failed: TransactionID not set",
        )
        .await;
    };
    st.purchase_phase = Some(Phase::Running);
    let body = PurchaseRequest {
        // A Go provider refuses a Service purchase without buyer credentials
        // (and then ignores them); we send our cluster ID, never a kubeconfig.
        liqo_credentials: matches!(flavor_type, FlavorTypeData::Service(_)).then(|| {
            WireLiqoCredentials {
                cluster_id: ctx.cfg.identity.liqo_id().unwrap_or_default().to_owned(),
                kubeconfig: String::new(),
            }
        }),
        ingress_telemetry_endpoint: r
            .spec
            .ingress_telemetry_endpoint
            .as_ref()
            .map(WireTelemetryServer::from),
    };
    let wire = match ctx.rear.purchase(&seller, &tx_id, &body).await {
        Ok(c) => c,
        Err(e) if e.is_unreachable() => return Err(e.into()),
        Err(e) => {
            st.purchase_phase = Some(Phase::Failed);
            return fail(
                &api,
                &pcs,
                &name,
                &pc_name,
                &mut st,
                true,
                &format!("Reservation failed: error when purchasing flavor: {e}"),
            )
            .await;
        }
    };
    let spec = match wire.to_crd(&ns) {
        Ok(s) => s,
        Err(e) => {
            st.purchase_phase = Some(Phase::Failed);
            return fail(
                &api,
                &pcs,
                &name,
                &pc_name,
                &mut st,
                false,
                &format!(
                    "Reservation failed: error when purchasing flavor: malformed contract: {e}"
                ),
            )
            .await;
        }
    };
    let mut contract = Contract::new(&wire.contract_id, spec);
    contract.meta_mut().namespace = Some(ns.clone());
    let contracts: Api<Contract> = Api::namespaced(ctx.client.clone(), &ns);
    contracts
        .patch(
            &wire.contract_id,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&contract),
        )
        .await?;
    st.contract = Some(GenericRef::named(&ns, &wire.contract_id));
    st.purchase_phase = Some(Phase::Solved);
    set_phase(&mut st.phase, Phase::Solved, "Reservation solved");
    save(&api, &name, &st).await?;
    // A Rust provider keeps selling the remainder under the same flavor ID, so
    // the candidate is free again; the next Discovery refreshes its amounts
    // (and withdraws it if the provider stops listing it, as a Go one does).
    set_candidate(&pcs, &pc_name, true, None).await?;
    // The transaction is spent; the Contract is the record now.
    let txs: Api<Transaction> = Api::namespaced(ctx.client.clone(), &ns);
    match txs.delete(&tx_id, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// Marks the Reservation failed and, when `release`, gives the candidate back (upstream `e4d8e52`).
async fn fail(
    api: &Api<Reservation>,
    pcs: &Api<PeeringCandidate>,
    name: &str,
    pc_name: &str,
    st: &mut ReservationStatus,
    release: bool,
    message: &str,
) -> Result<Action, Error> {
    if release {
        set_candidate(pcs, pc_name, true, None).await?;
    }
    if st.reserve_phase == Some(Phase::Running) {
        st.reserve_phase = Some(Phase::Failed);
    }
    set_phase(&mut st.phase, Phase::Failed, message);
    save(api, name, st).await?;
    Ok(Action::await_change())
}

async fn set_candidate(
    pcs: &Api<PeeringCandidate>,
    name: &str,
    available: bool,
    holder: Option<&str>,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"annotations": {HELD_BY: holder}},
        "spec": {"available": available},
    });
    pcs.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let status = json!({"status": {"lastUpdateTime": now()}});
    // The status may not exist yet on a hand-made candidate; that is fine.
    let _ = pcs
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await;
    Ok(())
}

async fn save(api: &Api<Reservation>, name: &str, st: &ReservationStatus) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": st })),
    )
    .await?;
    Ok(())
}

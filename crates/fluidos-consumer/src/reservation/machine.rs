//! The Reservation's state machine as pure functions (upstream's "contract
//! manager", fluidos-node.md §3.4): [`decide`] says what one reconcile does,
//! and [`after_reserve`] / [`after_purchase`] turn a provider's answer into
//! the new status and the writes to make.
//!
//! A reconcile makes at most one call to the provider and writes the status
//! once, after it: the transaction ID is recorded before a purchase is ever
//! attempted, so a restart purchases that transaction instead of reserving
//! again.

use std::time::Duration;

use fluidos_api::common::{GenericRef, NodeIdentityAdditionalInfo};
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::peering_credentials::{self, SecretMeta};
use fluidos_api::rear::{
    PurchaseRequest, ReserveRequest, WireConfiguration, WireContract, WireLiqoCredentials,
    WireNodeIdentity, WireTelemetryServer, WireTransaction,
};
use fluidos_api::reservation::{ContractSpec, ReservationStatus, TransactionSpec};
use fluidos_api::{
    Contract, NodeIdentity, PROVIDER_FINGERPRINT_ANNOTATION, PeeringCandidate, Phase, Reservation,
    Transaction,
};
use fluidos_rear_client::ProviderAddress;
use k8s_openapi::api::core::v1::Secret;
use kube::{Resource, ResourceExt};

use crate::status::{seconds_between, set_phase_at, touch_at};

/// Annotation on a PeeringCandidate naming the Reservation that holds it, so
/// a restarted controller recognises its own hold.
pub const HELD_BY: &str = "reservation.fluidos.eu/held-by";

/// How a Reservation's failure message starts when its candidate is not
/// available: taken by another Reservation, or refused by the provider (409).
/// The Solver then tries its next candidate.
pub const NOT_AVAILABLE: &str = "Reservation failed: PeeringCandidate not available";

/// What a provider's refusal means for the buyer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// 409: the flavor is not available (sold out, or taken meanwhile).
    Unavailable,
    /// 404, or the Go provider's 500 `Error getting the Transaction`: it
    /// does not know the transaction (now).
    UnknownTransaction,
    /// 429, 502, 503, 504: try again later.
    Transient,
    /// A 2xx answer whose body cannot be read: the call succeeded.
    Unreadable,
    /// Anything else: a definite no.
    Other,
}

impl RefusalKind {
    /// The meaning of an HTTP status (`None`: an unreadable 2xx body).
    pub fn of_status(status: Option<u16>) -> Self {
        match status {
            None => RefusalKind::Unreadable,
            Some(409) => RefusalKind::Unavailable,
            Some(404 | 500) => RefusalKind::UnknownTransaction,
            Some(429 | 502 | 503 | 504) => RefusalKind::Transient,
            Some(_) => RefusalKind::Other,
        }
    }
}

/// A provider's refusal of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What it said (status and message).
    pub message: String,
    /// What it means.
    pub kind: RefusalKind,
    /// How long it asked to wait before asking again (`Retry-After`).
    pub retry_after: Option<Duration>,
}

/// Everything one decision needs.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The Reservation, freshly read.
    pub reservation: &'a Reservation,
    /// The PeeringCandidate it names, if it exists.
    pub candidate: Option<&'a PeeringCandidate>,
    /// This node, the buyer.
    pub identity: &'a NodeIdentity,
    /// Now, formatted as status times are.
    pub now: String,
    /// The owning Solver's name, when that Solver has failed or timed out:
    /// nobody waits for this Reservation any more.
    pub owner_ended: Option<String>,
}

/// A write the executor makes.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Mark the candidate held by `holder`, or free (`holder: None`).
    UpdateCandidate {
        /// PeeringCandidate name.
        name: String,
        /// `spec.available`.
        available: bool,
        /// The `HELD_BY` annotation; `None` removes it.
        holder: Option<String>,
    },
    /// Show on the candidate what its provider has left after a sale (and
    /// free it).
    ShowRemainder {
        /// PeeringCandidate name.
        name: String,
        /// The flavor's new `spec.flavorType`.
        flavor_type: Box<fluidos_api::flavor::FlavorType>,
    },
    /// Server-side apply of the consumer's record of the transaction.
    ApplyTransaction(Box<Transaction>),
    /// Server-side apply of the credentials Secret holding the provider's
    /// peering kubeconfig, not owned yet: written before the Contract, so a
    /// Contract whose credentials were lost never exists.
    ApplyCredentials(Box<Secret>),
    /// Server-side apply of the purchased Contract.
    ApplyContract(Box<Contract>),
    /// Make the credentials Secret owned by the Contract (whose UID exists
    /// only once the Contract does), so the garbage collector removes it
    /// with the Contract.
    OwnCredentials {
        /// The Secret's name.
        secret: String,
        /// The Contract's name.
        contract: String,
    },
    /// Delete the spent transaction record.
    DeleteTransaction(String),
}

/// What one reconcile ends with.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Writes before the status.
    pub before: Vec<Effect>,
    /// The status to write (when it differs from the stored one).
    pub status: ReservationStatus,
    /// Writes after the status (clean-up that must follow the record).
    pub after: Vec<Effect>,
    /// Reconcile again after this delay (zero: the next step is ready);
    /// `None`: only when something changes.
    pub requeue: Option<Duration>,
}

impl Plan {
    fn settle(status: ReservationStatus) -> Self {
        Plan {
            before: Vec::new(),
            status,
            after: Vec::new(),
            requeue: None,
        }
    }
}

/// What the executor does in this reconcile.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one short-lived Decision per reconcile, consumed at once; boxing buys nothing"
)]
pub enum Decision {
    /// No call to the provider: make the writes and stop.
    Settle(Plan),
    /// Make `before` (the hold), call RESERVE on `seller`, then [`after_reserve`].
    Reserve {
        /// Writes before the call.
        before: Vec<Effect>,
        /// The status so far.
        status: ReservationStatus,
        /// The provider's `host:port`, pinned to its key when the candidate
        /// names one.
        seller: ProviderAddress,
        /// The request body.
        request: ReserveRequest,
    },
    /// Call PURCHASE on `seller`, then [`after_purchase`].
    Purchase {
        /// The status so far.
        status: ReservationStatus,
        /// The provider's `host:port`, pinned to its key when the candidate
        /// names one.
        seller: ProviderAddress,
        /// The transaction to buy.
        transaction_id: String,
        /// The request body.
        body: PurchaseRequest,
        /// No PURCHASE was sent before: `status` records this one and is
        /// written before the call, and the answer is definite.
        first_attempt: bool,
    },
}

/// A first PURCHASE to send right after a successful RESERVE.
#[derive(Debug)]
pub struct Purchase {
    /// The status to write before the call (transaction and attempt time).
    pub status: ReservationStatus,
    /// The provider's `host:port`, pinned to its key when the candidate
    /// names one.
    pub seller: ProviderAddress,
    /// The transaction to buy.
    pub transaction_id: String,
    /// The request body.
    pub body: PurchaseRequest,
}

/// After a RESERVE whose plan asks to go on at once (a purchase is wanted),
/// the first PURCHASE, decided on the Reservation as it will be once `plan`
/// is written. Saves a status write and a round of reads per sale; `None`
/// when the plan ends here or writes something after its status.
pub fn purchase_next(input: &Input<'_>, plan: &Plan) -> Option<Purchase> {
    if plan.requeue != Some(Duration::ZERO) || !plan.after.is_empty() {
        return None;
    }
    let mut next = input.reservation.clone();
    next.status = Some(plan.status.clone());
    let input = Input {
        reservation: &next,
        candidate: input.candidate,
        identity: input.identity,
        now: input.now.clone(),
        owner_ended: input.owner_ended.clone(),
    };
    match decide(&input) {
        Decision::Purchase {
            status,
            seller,
            transaction_id,
            body,
            first_attempt: true,
        } => Some(Purchase {
            status,
            seller,
            transaction_id,
            body,
        }),
        _ => None,
    }
}

/// `<namespace>/<name>` of the Reservation, the holder written on its candidate.
pub fn holder(r: &Reservation) -> String {
    format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any())
}

/// The candidate name a Reservation points at (empty when it has none).
pub fn candidate_name(r: &Reservation) -> String {
    r.spec
        .peering_candidate
        .as_ref()
        .and_then(|c| c.name.clone())
        .unwrap_or_default()
}

/// Where the candidate's provider is called: its flavor owner's `host:port`,
/// pinned to the key the candidate's [`PROVIDER_FINGERPRINT_ANNOTATION`]
/// names (set by the Discovery from a pinned provider's answer); the error
/// says why the annotation is not a fingerprint.
pub fn seller_address(pc: &PeeringCandidate) -> Result<ProviderAddress, String> {
    let annotation = pc
        .annotations()
        .get(PROVIDER_FINGERPRINT_ANNOTATION)
        .map(String::as_str);
    ProviderAddress::with_optional_fingerprint(pc.spec.flavor.spec.owner.ip.clone(), annotation)
        .map_err(|e| {
            format!(
                "PeeringCandidate {} has a malformed annotation {PROVIDER_FINGERPRINT_ANNOTATION}: {e}",
                pc.name_any()
            )
        })
}

/// The candidate's flavor type and where its provider is called, or why
/// the Reservation cannot go on with it.
fn read_candidate(pc: &PeeringCandidate) -> Result<(FlavorTypeData, ProviderAddress), String> {
    let flavor_type = pc
        .spec
        .flavor
        .spec
        .flavor_type
        .parse()
        .map_err(|e| format!("error when parsing Flavor type: {e}"))?;
    Ok((flavor_type, seller_address(pc)?))
}

/// A Solved Reservation, with the writes that follow a sale made again if
/// they did not all happen (a crash, a failed write): the candidate freed
/// while still held by it, and the spent Transaction's record deleted (a
/// missing one is no error). Both are idempotent.
fn settle_solved(input: &Input<'_>, st: ReservationStatus) -> Plan {
    let r = input.reservation;
    let mut plan = Plan::settle(st);
    if plan.status.purchase_phase == Some(Phase::Solved) {
        let held_by_us = input
            .candidate
            .is_some_and(|pc| pc.annotations().get(HELD_BY) == Some(&holder(r)));
        let candidate = input.candidate.filter(|_| held_by_us);
        plan.after = after_sale(r, candidate, plan.status.transaction_id.as_deref());
    }
    plan
}

/// Decides what this reconcile does.
pub fn decide(input: &Input<'_>) -> Decision {
    let r = input.reservation;
    let mut st = r.status.clone().unwrap_or_default();
    let reserve = r.spec.reserve.unwrap_or(false);
    let purchase = r.spec.purchase.unwrap_or(false);
    let now = input.now.as_str();

    match st.phase.phase {
        Phase::Failed | Phase::TimedOut => return Decision::Settle(Plan::settle(st)),
        // Solved stays open to a later `purchase: true`, within the transaction's life.
        Phase::Solved if !(purchase && st.purchase_phase != Some(Phase::Solved)) => {
            return Decision::Settle(settle_solved(input, st));
        }
        Phase::Running | Phase::Solved => {}
        _ => {
            st.phase.start_time = Some(now.to_owned());
            set_phase_at(&mut st.phase, Phase::Running, "Reservation started", now);
            st.reserve_phase = Some(Phase::Idle);
            st.purchase_phase = Some(Phase::Idle);
        }
    }
    if let Some(solver) = &input.owner_ended {
        return Decision::Settle(abandon(st, input.candidate, solver, now));
    }

    let Some(pc) = input.candidate else {
        set_phase_at(
            &mut st.phase,
            Phase::Failed,
            "Reservation failed: error when getting PeeringCandidate",
            now,
        );
        return Decision::Settle(Plan::settle(st));
    };
    let (flavor_type, seller) = match read_candidate(pc) {
        Ok(read) => read,
        Err(e) => {
            set_phase_at(
                &mut st.phase,
                Phase::Failed,
                &format!("Reservation failed: {e}"),
                now,
            );
            return Decision::Settle(Plan::settle(st));
        }
    };

    if reserve && st.reserve_phase != Some(Phase::Solved) {
        if st.transaction_id.is_some() {
            // Reserved before a crash: the record is there, only the phase is missing.
            st.reserve_phase = Some(Phase::Solved);
            touch_at(&mut st.phase, now);
        } else {
            return reserve_or_refuse(input, st, pc, seller);
        }
    }

    if !purchase {
        if st.reserve_phase == Some(Phase::Solved) && st.phase.phase != Phase::Solved {
            // Upstream never leaves Running here; a reserve-only Reservation is done.
            set_phase_at(&mut st.phase, Phase::Solved, "Reservation solved", now);
        }
        return Decision::Settle(Plan::settle(st));
    }
    if st.reserve_phase != Some(Phase::Solved) || st.purchase_phase == Some(Phase::Solved) {
        return Decision::Settle(Plan::settle(st));
    }
    let Some(transaction_id) = st.transaction_id.clone() else {
        st.purchase_phase = Some(Phase::Failed);
        return Decision::Settle(fail(
            st,
            Some(pc),
            "Reservation failed: TransactionID not set",
            now,
        ));
    };
    st.purchase_phase = Some(Phase::Running);
    let first_attempt = st.purchase_attempted_at.is_none();
    if first_attempt {
        st.purchase_attempted_at = Some(now.to_owned());
    }
    let body = PurchaseRequest {
        // A Go provider refuses a Service purchase without buyer credentials
        // (and then ignores them); we send our cluster ID, never a kubeconfig.
        liqo_credentials: matches!(flavor_type, FlavorTypeData::Service(_)).then(|| {
            WireLiqoCredentials {
                cluster_id: input.identity.liqo_id().unwrap_or_default().to_owned(),
                kubeconfig: String::new(),
            }
        }),
        ingress_telemetry_endpoint: r
            .spec
            .ingress_telemetry_endpoint
            .as_ref()
            .map(WireTelemetryServer::from),
    };
    Decision::Purchase {
        status: st,
        seller,
        transaction_id,
        body,
        first_attempt,
    }
}

/// The owning Solver ended first: stop. A purchase that may have gone
/// through keeps the candidate held and says where to look.
fn abandon(
    st: ReservationStatus,
    candidate: Option<&PeeringCandidate>,
    solver: &str,
    now: &str,
) -> Plan {
    match (&st.purchase_attempted_at, st.transaction_id.clone()) {
        (Some(_), Some(tx)) => fail(
            st,
            None,
            &format!(
                "Reservation failed: Solver {solver} ended before the purchase of transaction {tx} was confirmed. The provider may have sold it: look for a Contract with transactionID {tx} on the provider"
            ),
            now,
        ),
        _ => fail(
            st,
            candidate,
            &format!("Reservation failed: Solver {solver} ended before the reservation completed"),
            now,
        ),
    }
}

/// The writes that follow a sale's status: the candidate freed (showing the
/// remainder) and the spent Transaction's record deleted.
fn after_sale(
    r: &Reservation,
    candidate: Option<&PeeringCandidate>,
    tx: Option<&str>,
) -> Vec<Effect> {
    let mut after = Vec::new();
    if let Some(pc) = candidate {
        // A Rust provider keeps selling the remainder under the same flavor
        // ID: the candidate shows it at once. A whole flavor bought, or one
        // whose remainder cannot be worked out here, waits for the next
        // Discovery instead, which frees it with fresh amounts if the
        // provider still lists it (a Go provider lists the remainder under
        // a new ID; the old one is refused and the Solver moves on).
        after.push(match remainder(pc, r.spec.configuration.as_ref()) {
            Some(flavor_type) => Effect::ShowRemainder {
                name: pc.name_any(),
                flavor_type: Box::new(flavor_type),
            },
            None => Effect::UpdateCandidate {
                name: pc.name_any(),
                available: false,
                holder: None,
            },
        });
    }
    if let Some(tx) = tx {
        // The transaction is spent; the Contract is the record now.
        after.push(Effect::DeleteTransaction(tx.to_owned()));
    }
    after
}

/// RESERVE, or why not: the candidate must be free or already held by this
/// Reservation.
fn reserve_or_refuse(
    input: &Input<'_>,
    mut st: ReservationStatus,
    pc: &PeeringCandidate,
    seller: ProviderAddress,
) -> Decision {
    let r = input.reservation;
    let now = input.now.as_str();
    let holder = holder(r);
    let held_by_us = pc.annotations().get(HELD_BY) == Some(&holder);
    if !pc.spec.available && !held_by_us {
        st.reserve_phase = Some(Phase::Failed);
        set_phase_at(&mut st.phase, Phase::Failed, NOT_AVAILABLE, now);
        return Decision::Settle(Plan::settle(st));
    }
    let hold = Effect::UpdateCandidate {
        name: pc.name_any(),
        available: false,
        holder: Some(holder),
    };
    st.reserve_phase = Some(Phase::Running);
    let configuration = match r
        .spec
        .configuration
        .as_ref()
        .map(WireConfiguration::from_crd)
        .transpose()
    {
        Ok(c) => c,
        Err(e) => {
            let mut plan = fail(
                st,
                Some(pc),
                &format!("Reservation failed: error when reserving flavor: {e}"),
                now,
            );
            plan.before.insert(0, hold);
            return Decision::Settle(plan);
        }
    };
    Decision::Reserve {
        before: vec![hold],
        status: st,
        seller,
        request: ReserveRequest {
            flavor_id: pc.spec.flavor.id().to_owned(),
            buyer: WireNodeIdentity::from(input.identity),
            configuration,
        },
    }
}

/// The provider answered RESERVE with `answer` (an error's text when it
/// refused; an unreachable provider is retried by the executor instead).
pub fn after_reserve(
    input: &Input<'_>,
    mut st: ReservationStatus,
    answer: Result<&WireTransaction, &Refusal>,
    stored: Option<&Transaction>,
) -> Plan {
    let r = input.reservation;
    let now = input.now.as_str();
    let tx = match answer {
        Ok(tx) => {
            if let Some(why) = foreign_transaction(tx, stored) {
                return fail(
                    st,
                    input.candidate,
                    &format!("Reservation failed: {why}"),
                    now,
                );
            }
            tx
        }
        Err(refusal) if flavor_gone(refusal) => {
            let message = &refusal.message;
            // Not released: the provider says it is gone; the next Discovery
            // frees it again if it is listed.
            let mut plan = fail(st, None, &format!("{NOT_AVAILABLE}: {message}"), now);
            if let Some(pc) = input.candidate {
                plan.before.push(Effect::UpdateCandidate {
                    name: pc.name_any(),
                    available: false,
                    holder: None,
                });
            }
            return plan;
        }
        Err(Refusal {
            message: e,
            kind: RefusalKind::Transient,
            retry_after,
        }) => return reserve_again(input, st, e, *retry_after),
        Err(Refusal { message: e, .. }) => {
            return fail(
                st,
                input.candidate,
                &format!("Reservation failed: error when reserving flavor: {e}"),
                now,
            );
        }
    };
    st.transaction_id = Some(tx.transaction_id.clone());
    st.reserve_phase = Some(Phase::Solved);
    touch_at(&mut st.phase, now);
    let purchase = r.spec.purchase.unwrap_or(false);
    if !purchase && st.phase.phase != Phase::Solved {
        set_phase_at(&mut st.phase, Phase::Solved, "Reservation solved", now);
    }
    let mut buyer = input.identity.clone();
    if buyer.additional_information.is_none() {
        buyer.additional_information = Some(NodeIdentityAdditionalInfo::default());
    }
    let mut record = Transaction::new(
        &tx.transaction_id,
        TransactionSpec {
            flavor_id: tx.flavor_id.clone(),
            buyer,
            cluster_id: input.identity.liqo_id().unwrap_or_default().to_owned(),
            configuration: r.spec.configuration.clone(),
            expiration_time: Some(tx.expiration_time.clone()).filter(|s| !s.is_empty()),
        },
    );
    record.meta_mut().namespace = r.namespace();
    Plan {
        // Recorded before the status: a crash in between re-reserves, which
        // the provider answers with this same transaction.
        before: vec![Effect::ApplyTransaction(Box::new(record))],
        status: st,
        after: Vec::new(),
        requeue: purchase.then_some(Duration::ZERO),
    }
}

/// How long, counted from the Reservation's start, a RESERVE answered
/// "later" (429, 502, 503, 504: a provider over a rate or hold limit, or
/// whose API server is briefly failing) is asked again before the
/// Reservation fails. RESERVE is safe to repeat: our provider answers the
/// same buyer with its live hold, and a "later" means nothing was held.
pub const TRANSIENT_RESERVE_LIMIT: Duration = Duration::from_secs(60);

/// How soon such a RESERVE is asked again.
pub const TRANSIENT_RESERVE_RETRY: Duration = Duration::from_secs(2);

/// RESERVE answered "later" (`e`): asked again while the Reservation is
/// younger than [`TRANSIENT_RESERVE_LIMIT`], the candidate kept held, after
/// [`TRANSIENT_RESERVE_RETRY`] or the provider's `Retry-After` if longer;
/// failed (and the candidate given back) after it, or when its start time
/// cannot be read (edited by hand), rather than asking forever.
fn reserve_again(
    input: &Input<'_>,
    mut st: ReservationStatus,
    e: &str,
    retry_after: Option<Duration>,
) -> Plan {
    let now = input.now.as_str();
    let waited = st
        .phase
        .start_time
        .as_deref()
        .zip(now.parse::<jiff::Timestamp>().ok())
        .and_then(|(since, now)| seconds_between(since, now));
    let limit = i64::try_from(TRANSIENT_RESERVE_LIMIT.as_secs()).unwrap_or(i64::MAX);
    match waited {
        Some(w) if w <= limit => {
            st.reserve_phase = Some(Phase::Running);
            st.phase.message = Some(format!(
                "Reservation: the provider answered RESERVE with {e}; asking again"
            ));
            touch_at(&mut st.phase, now);
            Plan {
                before: Vec::new(),
                status: st,
                after: Vec::new(),
                requeue: Some(
                    retry_after.map_or(TRANSIENT_RESERVE_RETRY, |r| r.max(TRANSIENT_RESERVE_RETRY)),
                ),
            }
        }
        _ => fail(
            st,
            input.candidate,
            &format!(
                "Reservation failed: error when reserving flavor: {e}, still after asking for {}s",
                TRANSIENT_RESERVE_LIMIT.as_secs()
            ),
            now,
        ),
    }
}

/// A RESERVE refused because the flavor is not (or no longer) for sale:
/// 409, 404, or the Go provider's 500 for a flavor ID it retired when it
/// sold the flavor.
fn flavor_gone(refusal: &Refusal) -> bool {
    match refusal.kind {
        RefusalKind::Unavailable => true,
        RefusalKind::UnknownTransaction => {
            refusal.message.contains(" 404") || refusal.message.contains("Flavor by ID")
        }
        _ => false,
    }
}

/// The provider answered PURCHASE (sent to `seller`) with `answer`; an
/// unreachable provider is retried by the executor instead, and an
/// unanswered call goes to [`after_purchase_timeout`]. `stored` is the
/// Contract this node already keeps under the name the provider gave, if
/// any.
pub fn after_purchase(
    input: &Input<'_>,
    mut st: ReservationStatus,
    answer: Result<&WireContract, &Refusal>,
    first_attempt: bool,
    seller: &str,
    stored: Option<&Contract>,
) -> Plan {
    let r = input.reservation;
    let now = input.now.as_str();
    let ns = r.namespace().unwrap_or_default();
    let wire = match answer {
        Ok(c) => c,
        Err(refusal) => return purchase_refused(input, st, refusal, first_attempt, seller),
    };
    if let Some(why) = foreign_contract(wire, st.transaction_id.as_deref(), stored) {
        return purchase_failed(st, &why, now);
    }
    let spec = match wire.to_crd(&ns) {
        Ok(s) => s,
        Err(e) => {
            st.purchase_phase = Some(Phase::Failed);
            // The provider may have sold it: the candidate stays held.
            return fail(
                st,
                None,
                &format!(
                    "Reservation failed: error when purchasing flavor: malformed contract: {e}"
                ),
                now,
            );
        }
    };
    if let Some(why) = altered_hosting(r, input.candidate, &spec) {
        return purchase_failed(st, &why, now);
    }
    let mut contract = Contract::new(&wire.contract_id, spec);
    contract.meta_mut().namespace = Some(ns.clone());
    // Bought from a pinned provider: later calls about this Contract (the
    // service access) are pinned to the same key.
    if let Some(fingerprint) = input
        .candidate
        .and_then(|pc| seller_address(pc).ok())
        .and_then(|s| s.fingerprint)
    {
        contract.annotations_mut().insert(
            PROVIDER_FINGERPRINT_ANNOTATION.to_owned(),
            fingerprint.to_string(),
        );
    }
    // Delivered by Liqo: this node's own mark, which its gateway, class
    // and cleanup key on (the executor drops it when this node sent no
    // kubeconfig).
    if fluidos_api::service_delivery::by_liqo(&contract.spec) {
        contract.labels_mut().insert(
            fluidos_api::service_delivery::DELIVERY_LABEL.to_owned(),
            fluidos_api::service_delivery::LIQO.to_owned(),
        );
    }
    let credentials = take_credentials(&mut contract, now);
    st.contract = Some(GenericRef::named(&ns, &wire.contract_id));
    st.purchase_phase = Some(Phase::Solved);
    set_phase_at(&mut st.phase, Phase::Solved, "Reservation solved", now);
    let after = after_sale(r, input.candidate, st.transaction_id.as_deref());
    // All before the status: a crash anywhere here repeats the purchase,
    // which the provider answers with the same Contract and credentials.
    let before = match credentials {
        Some(secret) => {
            let own = Effect::OwnCredentials {
                secret: secret.name_any(),
                contract: wire.contract_id.clone(),
            };
            vec![
                Effect::ApplyCredentials(Box::new(secret)),
                Effect::ApplyContract(Box::new(contract)),
                own,
            ]
        }
        None => vec![Effect::ApplyContract(Box::new(contract))],
    };
    Plan {
        before,
        status: st,
        after,
        requeue: None,
    }
}

/// The Reservation failed on the provider's answer to PURCHASE: `why`. The
/// provider may have sold it: the candidate stays held.
fn purchase_failed(mut st: ReservationStatus, why: &str, now: &str) -> Plan {
    st.purchase_phase = Some(Phase::Failed);
    fail(
        st,
        None,
        &format!("Reservation failed: error when purchasing flavor: {why}"),
        now,
    )
}

/// Why a Service Contract delivered by Liqo would put the service's pods
/// elsewhere than this node bought, if it would (pure): its hosting policy
/// decides the compute this cluster grants the seller, so it must be the
/// one the Reservation's configuration and the candidate's flavor (as this
/// node listed it) say, not the seller's word. Without a candidate (a
/// Reservation made by hand), only an asked policy counts.
fn altered_hosting(
    r: &Reservation,
    candidate: Option<&PeeringCandidate>,
    spec: &ContractSpec,
) -> Option<String> {
    use fluidos_api::service_delivery;
    if !service_delivery::by_liqo(spec) {
        return None;
    }
    let bought = service_delivery::policy_from(
        r.spec.configuration.as_ref(),
        candidate.map(|c| &c.spec.flavor.spec.flavor_type),
    );
    let answered = service_delivery::hosting_policy(spec);
    (bought != answered).then(|| {
        format!(
            "the provider's contract says hosting policy {answered:?} (where the service's pods run, \
             and the compute this cluster grants the seller), not {bought:?} as bought"
        )
    })
}

/// Why the Contract a provider answered with cannot be stored as this
/// Reservation's, if it cannot. The provider chooses the name and this node
/// writes the Contract and its credentials Secret under it: a name that is
/// not an object name, a Contract for another transaction, or a name this
/// node already keeps for another transaction (which would overwrite
/// another sale's Contract and credentials) is refused.
fn foreign_contract(
    wire: &WireContract,
    transaction: Option<&str>,
    stored: Option<&Contract>,
) -> Option<String> {
    let id = &wire.contract_id;
    if !fluidos_api::naming::is_object_name(id) {
        return Some(format!(
            "malformed contract: contract ID {:?} is not a Kubernetes object name",
            bounded(id)
        ));
    }
    if let Some(tx) = transaction
        && wire.transaction_id != tx
    {
        return Some(format!(
            "the provider answered with a contract for transaction {:?}, not {tx}",
            bounded(&wire.transaction_id)
        ));
    }
    if stored.is_some_and(provider_side) {
        return Some(format!(
            "the provider named its contract {id}, the name of a sale this node made as a provider"
        ));
    }
    stored
        .filter(|c| c.spec.transaction_id != wire.transaction_id)
        .map(|c| {
            format!(
                "the provider named its contract {id}, the name of this node's contract for transaction {}",
                c.spec.transaction_id
            )
        })
}

/// Why the provider's transaction cannot be kept under its ID, if it
/// cannot (pure): not an object name, or the name of a record of this
/// node's own gateway (the consumer and the gateway share a namespace: a
/// provider echoing the ID of a sale it made here would write over it).
fn foreign_transaction(tx: &WireTransaction, stored: Option<&Transaction>) -> Option<String> {
    if !fluidos_api::naming::is_object_name(&tx.transaction_id) {
        return Some(format!(
            "malformed transaction: transaction ID {:?} is not a Kubernetes object name",
            bounded(&tx.transaction_id)
        ));
    }
    stored.filter(|t| provider_side(*t)).map(|_| {
        format!(
            "the provider answered with transaction ID {}, the name of a sale this node made as a provider",
            tx.transaction_id
        )
    })
}

/// True for a record the REAR gateway keeps of a sale of this node's own.
fn provider_side<K: kube::Resource>(object: &K) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(REAR_SIDE_LABEL))
        .is_some_and(|v| v == "provider")
}

/// The label the REAR gateway puts on its provider-side records.
const REAR_SIDE_LABEL: &str = "fluidos.eu/rear-side";

/// At most 64 characters of peer-chosen text, for a status message.
fn bounded(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Moves the provider's peering kubeconfig out of `contract`'s spec into a
/// credentials Secret (`fluidos_api::peering_credentials`: the YAML under
/// `kubeconfig`, so readers of Contracts do not read the token) and names
/// that Secret in the Contract's annotation. `None`, and the Contract as it
/// was, when there is nothing to move: no kubeconfig (a Service purchase
/// may carry none), or one that is not base64, which is no usable
/// credential and stays in the spec, so the peering reports it as it always
/// has ("Error when decoding Kubeconfig").
fn take_credentials(contract: &mut Contract, now: &str) -> Option<Secret> {
    let name = contract.name_any();
    let kubeconfig = &contract.spec.peering_target_credentials.kubeconfig;
    if kubeconfig.is_empty() {
        return None;
    }
    let mut labels = contract.labels().clone();
    labels.insert(
        "app.kubernetes.io/managed-by".to_owned(),
        crate::MANAGER.to_owned(),
    );
    let meta = SecretMeta {
        contract: name.clone(),
        namespace: contract.namespace(),
        labels,
        // Not known before the Contract exists: see `Effect::OwnCredentials`.
        owner: None,
    };
    // Trimmed as the peering trims it before decoding.
    let mut secret = peering_credentials::credentials_secret(meta, kubeconfig.trim()).ok()?;
    // Names the Contract even when the Secret's name is cut: the sweep of
    // unowned Secrets looks it up.
    secret.annotations_mut().insert(
        crate::credentials_sweep::CONTRACT_ANNOTATION.to_owned(),
        name.clone(),
    );
    // When this purchase wrote it: each repeated purchase writes it again
    // (a new resourceVersion), and the sweep's grace counts from the last.
    secret.annotations_mut().insert(
        crate::credentials_sweep::WRITTEN_AT_ANNOTATION.to_owned(),
        now.to_owned(),
    );
    contract.spec.peering_target_credentials.kubeconfig.clear();
    contract.annotations_mut().insert(
        peering_credentials::ANNOTATION.to_owned(),
        peering_credentials::secret_name(&name),
    );
    Some(secret)
}

/// The candidate's K8Slice flavor type less what `configuration` bought,
/// when something of every resource is left; `None` for a whole flavor, a
/// Service, or anything that does not parse (pure).
pub fn remainder(
    pc: &PeeringCandidate,
    configuration: Option<&fluidos_api::Configuration>,
) -> Option<fluidos_api::flavor::FlavorType> {
    use fluidos_api::configuration::ConfigurationData;
    use fluidos_api::ledger::Resources;
    let FlavorTypeData::K8Slice(mut k) = pc.spec.flavor.spec.flavor_type.parse().ok()? else {
        return None;
    };
    let ConfigurationData::K8Slice(bought) = configuration?.parse("spec.configuration").ok()?
    else {
        return None;
    };
    let left = Resources::of_characteristics(&k.characteristics)
        .ok()?
        .minus(Resources::of_configuration(&bought).ok()?);
    if [left.cpu, left.memory, left.pods]
        .iter()
        .any(|a| a.nanos <= 0)
    {
        return None;
    }
    left.apply_to(&mut k.characteristics);
    Some(fluidos_api::flavor::FlavorType::k8slice(&k))
}

/// How long after its first attempt a purchase that gets no definite answer
/// is asked again before the Reservation gives up on it.
pub const UNANSWERED_PURCHASE_LIMIT: Duration = Duration::from_secs(600);

/// How soon an unanswered purchase is asked again.
pub const UNANSWERED_PURCHASE_RETRY: Duration = Duration::from_secs(1);

/// A PURCHASE refused with `refusal`. A definite no gives the candidate back;
/// a refusal that may hide a sale (the provider no longer knows a
/// transaction an earlier attempt may have bought, or sold it and sent an
/// unreadable Contract) keeps it held and says where to look; a transient
/// one is asked again.
fn purchase_refused(
    input: &Input<'_>,
    mut st: ReservationStatus,
    refusal: &Refusal,
    first_attempt: bool,
    seller: &str,
) -> Plan {
    let now = input.now.as_str();
    let tx = st.transaction_id.clone().unwrap_or_default();
    let e = &refusal.message;
    let look = format!("look for a Contract with transactionID {tx} on the provider");
    match refusal.kind {
        RefusalKind::Transient => ask_again(
            input,
            st,
            &format!("the purchase of transaction {tx} from {seller} was answered {e}"),
            seller,
        ),
        RefusalKind::Unreadable => {
            st.purchase_phase = Some(Phase::Failed);
            fail(
                st,
                None,
                &format!(
                    "Reservation failed: error when purchasing flavor: the provider sold transaction {tx} but its Contract cannot be read ({e}): {look}"
                ),
                now,
            )
        }
        RefusalKind::UnknownTransaction if !first_attempt => {
            // A Go provider forgets the transaction before finishing its
            // sale, and cannot be asked whether it did.
            st.purchase_phase = Some(Phase::Failed);
            fail(
                st,
                None,
                &format!(
                    "Reservation failed: error when purchasing flavor: an earlier purchase of transaction {tx} from {seller} got no answer, and asked again the provider answered {e}. It may have sold it: {look}"
                ),
                now,
            )
        }
        // The Go provider names a Contract after its flavor: a second sale
        // of a flavor it already sold fails to create it. Nothing was sold;
        // the flavor is gone.
        _ if first_attempt && e.contains("already exists") => {
            st.purchase_phase = Some(Phase::Failed);
            let mut plan = fail(st, None, &format!("{NOT_AVAILABLE}: {e}"), now);
            if let Some(pc) = input.candidate {
                plan.before.push(Effect::UpdateCandidate {
                    name: pc.name_any(),
                    available: false,
                    holder: None,
                });
            }
            plan
        }
        _ => {
            st.purchase_phase = Some(Phase::Failed);
            fail(
                st,
                input.candidate,
                &format!("Reservation failed: error when purchasing flavor: {e}"),
                now,
            )
        }
    }
}

/// A PURCHASE call got no answer within `timeout`. The provider may still be
/// selling (a Go provider takes 10–17 s), so it is asked again: a repeated
/// purchase of the same transaction is answered with the same Contract. The
/// status says so, with the transaction and the provider.
pub fn after_purchase_timeout(
    input: &Input<'_>,
    st: ReservationStatus,
    timeout: Duration,
    seller: &str,
) -> Plan {
    let tx = st.transaction_id.clone().unwrap_or_default();
    ask_again(
        input,
        st,
        &format!(
            "the purchase of transaction {tx} from {seller} got no answer within {}s",
            timeout.as_secs()
        ),
        seller,
    )
}

/// Asks the provider again after `what` happened, until
/// [`UNANSWERED_PURCHASE_LIMIT`] after the first attempt.
fn ask_again(input: &Input<'_>, mut st: ReservationStatus, what: &str, seller: &str) -> Plan {
    let now = input.now.as_str();
    let tx = st.transaction_id.clone().unwrap_or_default();
    // An unreadable mark (edited by hand) restarts the clock rather than
    // asking forever.
    let waited = st
        .purchase_attempted_at
        .as_deref()
        .zip(now.parse::<jiff::Timestamp>().ok())
        .and_then(|(since, now)| seconds_between(since, now));
    if waited.is_none() {
        st.purchase_attempted_at = Some(now.to_owned());
    }
    if waited.unwrap_or(0) > i64::try_from(UNANSWERED_PURCHASE_LIMIT.as_secs()).unwrap_or(i64::MAX)
    {
        st.purchase_phase = Some(Phase::Failed);
        // The hold stays: the provider may have sold it.
        return fail(
            st,
            None,
            &format!(
                "Reservation failed: error when purchasing flavor: {what}, and no definite answer came in {}s since the first attempt. The provider may have sold it: look for a Contract with transactionID {tx} on {seller}",
                UNANSWERED_PURCHASE_LIMIT.as_secs()
            ),
            now,
        );
    }
    st.purchase_phase = Some(Phase::Running);
    st.phase.message = Some(format!("Reservation: {what}; asking again"));
    touch_at(&mut st.phase, now);
    Plan {
        before: Vec::new(),
        status: st,
        after: Vec::new(),
        requeue: Some(UNANSWERED_PURCHASE_RETRY),
    }
}

/// Ends the Reservation `Failed` with `message`, giving `release`'s candidate
/// back first (upstream `e4d8e52`).
fn fail(
    mut st: ReservationStatus,
    release: Option<&PeeringCandidate>,
    message: &str,
    now: &str,
) -> Plan {
    if st.reserve_phase == Some(Phase::Running) {
        st.reserve_phase = Some(Phase::Failed);
    }
    set_phase_at(&mut st.phase, Phase::Failed, message, now);
    Plan {
        before: release
            .map(|pc| Effect::UpdateCandidate {
                name: pc.name_any(),
                available: true,
                holder: None,
            })
            .into_iter()
            .collect(),
        status: st,
        after: Vec::new(),
        requeue: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{NOW, candidate, me, phase, reservation, wire_flavor};

    fn input<'a>(
        r: &'a Reservation,
        pc: Option<&'a PeeringCandidate>,
        me: &'a NodeIdentity,
    ) -> Input<'a> {
        Input {
            reservation: r,
            candidate: pc,
            identity: me,
            now: NOW.into(),
            owner_ended: None,
        }
    }

    fn running(reserve: Phase, purchase: Phase, tx: Option<&str>) -> ReservationStatus {
        ReservationStatus {
            phase: phase(Phase::Running, "Reservation started", NOW),
            reserve_phase: Some(reserve),
            purchase_phase: Some(purchase),
            transaction_id: tx.map(str::to_owned),
            contract: None,
            purchase_attempted_at: None,
        }
    }

    fn settled(d: Decision) -> Plan {
        match d {
            Decision::Settle(p) => p,
            other => panic!("expected Settle, got {other:?}"),
        }
    }

    fn failed_with(p: &Plan) -> &str {
        assert_eq!(p.status.phase.phase, Phase::Failed);
        p.status.phase.message.as_deref().unwrap_or_default()
    }

    fn releases(p: &Plan) -> bool {
        p.before.iter().any(|e| {
            matches!(e, Effect::UpdateCandidate { available: true, holder: None, name } if name == "peeringcandidate-f1")
        })
    }

    fn tx() -> WireTransaction {
        WireTransaction {
            transaction_id: "tx-1".into(),
            flavor_id: "f1".into(),
            configuration: None,
            buyer: WireNodeIdentity::from(&me()),
            cluster_id: String::new(),
            expiration_time: "2026-12-01T11:00:00Z".into(),
        }
    }

    fn contract() -> WireContract {
        WireContract {
            contract_id: "contract-1".into(),
            transaction_id: "tx-1".into(),
            flavor: wire_flavor("f1", "4", "1"),
            buyer: WireNodeIdentity::from(&me()),
            buyer_cluster_id: "liqo-consumer".into(),
            seller: WireNodeIdentity::from(&me()),
            peering_target_credentials: WireLiqoCredentials::default(),
            expiration_time: None,
            extra_information: None,
            configuration: None,
            network_authorizations: None,
            ingress_telemetry_endpoint: None,
        }
    }

    #[test]
    fn a_seller_may_not_change_where_the_services_pods_run() {
        let service = |policies: serde_json::Value| fluidos_api::flavor::FlavorType {
            type_identifier: "Service".into(),
            type_data: serde_json::json!({
                "name": "mq", "description": "", "category": "message-queue", "tags": [],
                "hostingPolicies": policies, "configurationTemplate": {}
            }),
        };
        let mut pc = candidate("f1", "4", "1");
        pc.spec.flavor.spec.flavor_type = service(serde_json::json!(["Provider", "Consumer"]));
        let r = reservation(None, &pc.name_any());
        let mut spec = contract().to_crd("fluidos").unwrap();
        spec.flavor.spec.flavor_type = service(serde_json::json!(["Provider", "Consumer"]));
        spec.extra_information = Some(fluidos_api::service_delivery::extra_information());
        assert_eq!(altered_hosting(&r, Some(&pc), &spec), None);
        // The seller's flavor copy lists Consumer first: refused.
        let mut first = spec.clone();
        first.flavor.spec.flavor_type = service(serde_json::json!(["Consumer", "Provider"]));
        let why = altered_hosting(&r, Some(&pc), &first).unwrap();
        assert!(
            why.contains("Consumer") && why.contains("Provider"),
            "{why}"
        );
        // The seller's configuration asks Consumer: refused.
        let mut asked = spec.clone();
        asked.configuration = Some(fluidos_api::Configuration {
            type_: "Service".into(),
            data: serde_json::json!({"hostingPolicy": "Consumer", "configurationData": {}}),
        });
        assert!(altered_hosting(&r, Some(&pc), &asked).is_some());
        // ... unless this node asked it.
        let mut r2 = r.clone();
        r2.spec.configuration = asked.configuration.clone();
        assert_eq!(altered_hosting(&r2, Some(&pc), &asked), None);
        // Delivered over REAR, the policy grants nothing here.
        let mut rear = first.clone();
        rear.extra_information = None;
        assert_eq!(altered_hosting(&r, Some(&pc), &rear), None);
    }

    #[test]
    fn a_new_reservation_starts_holds_the_candidate_and_reserves() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let Decision::Reserve {
            before,
            status,
            seller,
            request,
        } = decide(&input(&r, Some(&pc), &me))
        else {
            panic!("expected Reserve");
        };
        assert_eq!(status.phase.phase, Phase::Running);
        assert_eq!(status.phase.message.as_deref(), Some("Reservation started"));
        assert_eq!(status.phase.start_time.as_deref(), Some(NOW));
        assert_eq!(status.reserve_phase, Some(Phase::Running));
        assert_eq!(status.purchase_phase, Some(Phase::Idle));
        assert_eq!(seller, ProviderAddress::plain("127.0.0.1:1"));
        assert_eq!(request.flavor_id, "f1");
        assert_eq!(request.buyer, WireNodeIdentity::from(&me));
        assert!(matches!(
            &before[..],
            [Effect::UpdateCandidate { available: false, holder: Some(h), .. }] if h == "fluidos/reservation-solver-a"
        ));
    }

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn pinned_candidate(fingerprint: &str) -> PeeringCandidate {
        let mut pc = candidate("f1", "4", "1");
        pc.metadata.annotations = Some(
            [(
                PROVIDER_FINGERPRINT_ANNOTATION.to_owned(),
                fingerprint.to_owned(),
            )]
            .into(),
        );
        pc
    }

    #[test]
    fn a_pinned_candidates_provider_is_called_pinned_and_its_contract_says_so() {
        let me = me();
        let pc = pinned_candidate(FP);
        let pinned = ProviderAddress::pinned("127.0.0.1:1", FP.parse().unwrap());
        let r = reservation(None, "peeringcandidate-f1");
        let Decision::Reserve { seller, .. } = decide(&input(&r, Some(&pc), &me)) else {
            panic!("expected Reserve");
        };
        assert_eq!(seller, pinned);

        let r = reservation(
            Some(running(Phase::Solved, Phase::Idle, Some("tx-1"))),
            "peeringcandidate-f1",
        );
        let Decision::Purchase { seller, .. } = decide(&input(&r, Some(&pc), &me)) else {
            panic!("expected Purchase");
        };
        assert_eq!(seller, pinned);
        let st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        let p = after_purchase(
            &input(&r, Some(&pc), &me),
            st.clone(),
            Ok(&contract()),
            true,
            "127.0.0.1:1",
            None,
        );
        let Some(Effect::ApplyContract(c)) = p.before.first() else {
            panic!("{:?}", p.before);
        };
        assert_eq!(
            c.annotations().get(PROVIDER_FINGERPRINT_ANNOTATION),
            Some(&FP.to_owned())
        );

        // From a plain provider: no annotation.
        let plain = candidate("f1", "4", "1");
        let p = after_purchase(
            &input(&r, Some(&plain), &me),
            st,
            Ok(&contract()),
            true,
            "127.0.0.1:1",
            None,
        );
        let Some(Effect::ApplyContract(c)) = p.before.first() else {
            panic!("{:?}", p.before);
        };
        assert!(
            !c.annotations()
                .contains_key(PROVIDER_FINGERPRINT_ANNOTATION)
        );
    }

    #[test]
    fn a_malformed_fingerprint_annotation_fails_the_reservation() {
        let me = me();
        let pc = pinned_candidate("sha256:nothex");
        for st in [
            None,
            Some(running(Phase::Solved, Phase::Idle, Some("tx-1"))),
        ] {
            let r = reservation(st, "peeringcandidate-f1");
            let p = settled(decide(&input(&r, Some(&pc), &me)));
            let message = failed_with(&p);
            assert!(
                message.starts_with(
                    "Reservation failed: PeeringCandidate peeringcandidate-f1 has a malformed \
                     annotation fluidos.eu/provider-fingerprint: "
                ),
                "{message}"
            );
            assert!(message.contains("expected sha256:"), "{message}");
            assert!(p.before.is_empty(), "no call, no hold");
        }
    }

    #[test]
    fn ended_reservations_are_left_alone() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        for st in [
            ReservationStatus {
                phase: phase(Phase::Failed, "x", NOW),
                ..Default::default()
            },
            ReservationStatus {
                phase: phase(Phase::TimedOut, "x", NOW),
                ..Default::default()
            },
            ReservationStatus {
                phase: phase(Phase::Solved, "Reservation solved", NOW),
                purchase_phase: Some(Phase::Solved),
                ..Default::default()
            },
        ] {
            let r = reservation(Some(st.clone()), "peeringcandidate-f1");
            let p = settled(decide(&input(&r, Some(&pc), &me)));
            assert_eq!(p.status, st);
            assert!(p.before.is_empty() && p.after.is_empty());
        }
    }

    #[test]
    fn a_missing_or_unreadable_candidate_fails() {
        let me = me();
        let r = reservation(None, "peeringcandidate-f1");
        let p = settled(decide(&input(&r, None, &me)));
        assert_eq!(
            failed_with(&p),
            "Reservation failed: error when getting PeeringCandidate"
        );

        let mut pc = candidate("f1", "4", "1");
        pc.spec.flavor.spec.flavor_type = serde_json::from_value(serde_json::json!({
            "typeIdentifier": "K8Slice", "typeData": {"charateristics": "not an object"}
        }))
        .unwrap();
        let p = settled(decide(&input(&r, Some(&pc), &me)));
        assert!(
            failed_with(&p).starts_with("Reservation failed: error when parsing Flavor type: "),
            "{:?}",
            p.status
        );
    }

    #[test]
    fn a_sale_whose_following_writes_were_lost_makes_them_again() {
        let me = me();
        let mut r = reservation(None, "peeringcandidate-f1");
        let mut st = running(Phase::Solved, Phase::Solved, Some("tx-1"));
        st.phase.phase = Phase::Solved;
        r.status = Some(st);
        let mut pc = candidate("f1", "4", "1");
        // Freed already: only the spent Transaction's record is deleted
        // (again, if it went already).
        let p = settled(decide(&input(&r, Some(&pc), &me)));
        assert!(p.before.is_empty(), "{p:?}");
        assert!(
            matches!(&p.after[..], [Effect::DeleteTransaction(t)] if t == "tx-1"),
            "{:?}",
            p.after
        );
        // Still held by it (a crash after the status write): freed, and the
        // spent Transaction's record deleted.
        pc.metadata.annotations = Some([(HELD_BY.to_owned(), holder(&r))].into());
        let p = settled(decide(&input(&r, Some(&pc), &me)));
        assert!(
            matches!(
                &p.after[..],
                [
                    Effect::UpdateCandidate { holder: None, .. } | Effect::ShowRemainder { .. },
                    Effect::DeleteTransaction(t)
                ] if t == "tx-1"
            ),
            "{:?}",
            p.after
        );
    }

    #[test]
    fn a_candidate_taken_by_another_reservation_fails_and_ours_is_resumed() {
        let me = me();
        let r = reservation(None, "peeringcandidate-f1");
        let mut pc = candidate("f1", "4", "1");
        pc.spec.available = false;
        let p = settled(decide(&input(&r, Some(&pc), &me)));
        assert_eq!(
            failed_with(&p),
            "Reservation failed: PeeringCandidate not available"
        );
        assert_eq!(p.status.reserve_phase, Some(Phase::Failed));
        assert!(p.before.is_empty(), "someone else's hold is not released");

        pc.metadata.annotations = Some([(HELD_BY.to_owned(), holder(&r))].into());
        assert!(matches!(
            decide(&input(&r, Some(&pc), &me)),
            Decision::Reserve { .. }
        ));
    }

    fn p_seller(pc: &PeeringCandidate) -> ProviderAddress {
        ProviderAddress::plain(pc.spec.flavor.spec.owner.ip.clone())
    }

    #[test]
    fn a_reserve_answered_later_is_asked_again_for_a_minute() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Running, Phase::Idle, None);
        // Answered "later": asked again, the candidate kept, until a minute
        // after the Reservation started.
        let busy = Refusal {
            message: "503: the API server is busy; retry".into(),
            kind: RefusalKind::Transient,
            retry_after: None,
        };
        let mut started = st.clone();
        started.phase.start_time = Some(NOW.into());
        let p = after_reserve(&input(&r, Some(&pc), &me), started, Err(&busy), None);
        assert_eq!(p.status.phase.phase, Phase::Running);
        assert_eq!(p.status.reserve_phase, Some(Phase::Running));
        assert_eq!(p.requeue, Some(TRANSIENT_RESERVE_RETRY));
        assert!(p.before.is_empty(), "the candidate stays held");
        // A provider's longer Retry-After is honoured, a shorter one is not.
        let mut started = st.clone();
        started.phase.start_time = Some(NOW.into());
        for (asked, waited) in [(10, 10), (1, 2)] {
            let told = Refusal {
                retry_after: Some(Duration::from_secs(asked)),
                ..busy.clone()
            };
            let q = after_reserve(
                &input(&r, Some(&pc), &me),
                started.clone(),
                Err(&told),
                None,
            );
            assert_eq!(q.requeue, Some(Duration::from_secs(waited)), "{asked} s");
        }
        assert_eq!(
            p.status.phase.message.as_deref(),
            Some(
                "Reservation: the provider answered RESERVE with 503: the API server is busy; retry; asking again"
            )
        );
        // Reconciled again with that status, held by it: RESERVE again.
        let mut again = r.clone();
        again.status = Some(p.status.clone());
        let mut held = pc.clone();
        held.spec.available = false;
        held.annotations_mut()
            .insert(HELD_BY.to_owned(), holder(&again));
        assert!(matches!(
            decide(&input(&again, Some(&held), &me)),
            Decision::Reserve { .. }
        ));
        let mut old = st.clone();
        old.phase.start_time = Some("2026-12-01T09:58:00Z".into());
        let p = after_reserve(&input(&r, Some(&pc), &me), old.clone(), Err(&busy), None);
        assert_eq!(
            failed_with(&p),
            "Reservation failed: error when reserving flavor: 503: the API server is busy; retry, still after asking for 60s"
        );
        assert!(releases(&p));
        old.phase.start_time = Some("garbage".into());
        let p = after_reserve(&input(&r, Some(&pc), &me), old, Err(&busy), None);
        assert_eq!(p.status.phase.phase, Phase::Failed, "never asks forever");
    }

    #[test]
    fn a_provider_echoing_the_id_of_one_of_our_own_sales_writes_nothing() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Running, Phase::Idle, None);
        // Our gateway's record of a sale of ours, named tx-1.
        let mut ours = Transaction::new(
            "tx-1",
            TransactionSpec {
                flavor_id: "mine".into(),
                buyer: me.clone(),
                cluster_id: String::new(),
                configuration: None,
                expiration_time: None,
            },
        );
        ours.metadata.labels = Some([(REAR_SIDE_LABEL.to_owned(), "provider".to_owned())].into());
        let p = after_reserve(
            &input(&r, Some(&pc), &me),
            st.clone(),
            Ok(&tx()),
            Some(&ours),
        );
        assert!(
            !p.before
                .iter()
                .chain(&p.after)
                .any(|e| matches!(e, Effect::ApplyTransaction(_))),
            "{p:?}"
        );
        assert_eq!(p.status.phase.phase, Phase::Failed);
        let message = p.status.phase.message.clone().unwrap_or_default();
        assert!(
            message.contains("a sale this node made as a provider"),
            "{message}"
        );
        // A transaction ID that is no object name: refused too.
        let mut bad = tx();
        bad.transaction_id = "Tx_1".into();
        let p = after_reserve(&input(&r, Some(&pc), &me), st, Ok(&bad), None);
        assert_eq!(p.status.phase.phase, Phase::Failed);
        // The same at PURCHASE: our own provider-side Contract of that name.
        let mut sold = Contract::new("contract-1", contract().to_crd("fluidos").unwrap());
        sold.metadata.labels = Some([(REAR_SIDE_LABEL.to_owned(), "provider".to_owned())].into());
        let why = foreign_contract(&contract(), Some(&contract().transaction_id), Some(&sold));
        assert!(
            why.is_some_and(|w| w.contains("a sale this node made as a provider")),
            "a provider-side Contract is never written over"
        );
    }

    #[test]
    fn a_reserve_answer_is_recorded_before_the_status() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Running, Phase::Idle, None);
        let p = after_reserve(&input(&r, Some(&pc), &me), st.clone(), Ok(&tx()), None);
        assert_eq!(p.status.transaction_id.as_deref(), Some("tx-1"));
        assert_eq!(p.status.reserve_phase, Some(Phase::Solved));
        assert_eq!(p.status.phase.phase, Phase::Running);
        assert_eq!(p.requeue, Some(Duration::ZERO), "purchase follows");
        let [Effect::ApplyTransaction(t)] = &p.before[..] else {
            panic!("{:?}", p.before);
        };
        assert_eq!(t.metadata.name.as_deref(), Some("tx-1"));
        assert_eq!(t.spec.flavor_id, "f1");
        assert_eq!(t.spec.cluster_id, "liqo-consumer");
        assert_eq!(
            t.spec.expiration_time.as_deref(),
            Some("2026-12-01T11:00:00Z")
        );

        // The first PURCHASE follows at once; its status write carries the
        // transaction and the attempt time together.
        let next = purchase_next(&input(&r, Some(&pc), &me), &p).expect("purchase next");
        assert_eq!(next.transaction_id, "tx-1");
        assert_eq!(next.seller, p_seller(&pc));
        assert_eq!(next.status.transaction_id.as_deref(), Some("tx-1"));
        assert_eq!(next.status.purchase_phase, Some(Phase::Running));
        assert!(next.status.purchase_attempted_at.is_some());

        // Reserve only: done.
        let mut r_only = r.clone();
        r_only.spec.purchase = Some(false);
        let p = after_reserve(&input(&r_only, Some(&pc), &me), st.clone(), Ok(&tx()), None);
        assert!(purchase_next(&input(&r_only, Some(&pc), &me), &p).is_none());
        assert_eq!(p.status.phase.phase, Phase::Solved);
        assert_eq!(
            p.status.phase.message.as_deref(),
            Some("Reservation solved")
        );
        assert_eq!(p.requeue, None);

        // Refused: failed, the candidate given back.
        let refusal = Refusal {
            message: "400: bad configuration".into(),
            kind: RefusalKind::Other,
            retry_after: None,
        };
        let p = after_reserve(&input(&r, Some(&pc), &me), st.clone(), Err(&refusal), None);
        assert_eq!(
            failed_with(&p),
            "Reservation failed: error when reserving flavor: 400: bad configuration"
        );
        assert_eq!(p.status.reserve_phase, Some(Phase::Failed));
        assert!(releases(&p));

        // Refused as not available: failed so that the Solver moves on, the
        // candidate withdrawn rather than released.
        let refusal = Refusal {
            message: "409: not enough [\"pods\"] left".into(),
            kind: RefusalKind::Unavailable,
            retry_after: None,
        };
        let p = after_reserve(&input(&r, Some(&pc), &me), st, Err(&refusal), None);
        assert_eq!(
            failed_with(&p),
            "Reservation failed: PeeringCandidate not available: 409: not enough [\"pods\"] left"
        );
        assert!(!releases(&p));
        assert!(matches!(
            &p.before[..],
            [Effect::UpdateCandidate {
                available: false,
                holder: None,
                ..
            }]
        ));
    }

    #[test]
    fn a_recorded_transaction_is_purchased_not_reserved_again() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        for reserve in [Phase::Solved, Phase::Running] {
            let r = reservation(
                Some(running(reserve, Phase::Idle, Some("tx-1"))),
                "peeringcandidate-f1",
            );
            let Decision::Purchase {
                status,
                seller,
                transaction_id,
                body,
                ..
            } = decide(&input(&r, Some(&pc), &me))
            else {
                panic!("expected Purchase");
            };
            assert_eq!(status.reserve_phase, Some(Phase::Solved));
            assert_eq!(status.purchase_phase, Some(Phase::Running));
            assert_eq!(
                (seller.to_string().as_str(), transaction_id.as_str()),
                ("127.0.0.1:1", "tx-1")
            );
            assert_eq!(
                body.liqo_credentials, None,
                "K8Slice purchases send no credentials"
            );
        }
        // A reserve-only Reservation that was Solved and is later asked to purchase.
        let mut st = running(Phase::Solved, Phase::Idle, Some("tx-1"));
        st.phase = phase(Phase::Solved, "Reservation solved", NOW);
        let r = reservation(Some(st), "peeringcandidate-f1");
        assert!(matches!(
            decide(&input(&r, Some(&pc), &me)),
            Decision::Purchase { .. }
        ));
    }

    #[test]
    fn a_purchase_without_transaction_fails() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let mut r = reservation(
            Some(running(Phase::Solved, Phase::Idle, None)),
            "peeringcandidate-f1",
        );
        r.spec.reserve = Some(false);
        let p = settled(decide(&input(&r, Some(&pc), &me)));
        assert_eq!(failed_with(&p), "Reservation failed: TransactionID not set");
        assert_eq!(p.status.purchase_phase, Some(Phase::Failed));
        assert!(releases(&p));
    }

    fn refused(kind: RefusalKind, message: &str) -> Refusal {
        Refusal {
            message: message.into(),
            kind,
            retry_after: None,
        }
    }

    const SELLER: &str = "127.0.0.1:1";

    #[test]
    fn a_purchase_answer_becomes_the_contract() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        let i = input(&r, Some(&pc), &me);
        let p = after_purchase(&i, st.clone(), Ok(&contract()), true, SELLER, None);
        assert_eq!(p.status.phase.phase, Phase::Solved);
        assert_eq!(
            p.status.phase.message.as_deref(),
            Some("Reservation solved")
        );
        assert_eq!(p.status.purchase_phase, Some(Phase::Solved));
        assert_eq!(
            p.status.contract.as_ref().and_then(|c| c.name.as_deref()),
            Some("contract-1")
        );
        assert!(
            matches!(&p.before[..], [Effect::ApplyContract(c)] if c.metadata.name.as_deref() == Some("contract-1"))
        );
        assert!(matches!(
            &p.after[..],
            [Effect::UpdateCandidate { available: false, holder: None, .. }, Effect::DeleteTransaction(t)] if t == "tx-1"
        ));

        // A definite no on the first attempt: failed, candidate given back.
        for kind in [
            RefusalKind::UnknownTransaction,
            RefusalKind::Other,
            RefusalKind::Unavailable,
        ] {
            let p = after_purchase(
                &i,
                st.clone(),
                Err(&refused(kind, "500: boom")),
                true,
                SELLER,
                None,
            );
            assert_eq!(
                failed_with(&p),
                "Reservation failed: error when purchasing flavor: 500: boom"
            );
            assert_eq!(p.status.purchase_phase, Some(Phase::Failed));
            assert!(releases(&p), "{kind:?}");
        }

        let mut bad = contract();
        bad.flavor.type_.name = "teleporter".into();
        let p = after_purchase(&i, st.clone(), Ok(&bad), true, SELLER, None);
        assert!(
            failed_with(&p).starts_with(
                "Reservation failed: error when purchasing flavor: malformed contract: "
            ),
            "{:?}",
            p.status
        );
        assert!(
            !releases(&p),
            "the provider may have sold it: the hold stays"
        );

        // The Go provider selling a flavor it already sold: nothing sold, the
        // flavor is gone, and the Solver may move on.
        let p = after_purchase(
            &i,
            st.clone(),
            Err(&refused(
                RefusalKind::UnknownTransaction,
                "500: Error creating the Contract: contracts.reservation.fluidos.eu \"contract-f1\" already exists",
            )),
            true,
            SELLER,
            None,
        );
        assert!(failed_with(&p).starts_with(NOT_AVAILABLE), "{:?}", p.status);
        assert!(matches!(
            &p.before[..],
            [Effect::UpdateCandidate {
                available: false,
                ..
            }]
        ));

        // A 2xx the client cannot decode is a sale too.
        let p = after_purchase(
            &i,
            st,
            Err(&refused(
                RefusalKind::Unreadable,
                "sent a malformed contract",
            )),
            true,
            SELLER,
            None,
        );
        assert!(
            failed_with(&p).contains("the provider sold transaction tx-1"),
            "{:?}",
            p.status
        );
        assert!(!releases(&p));
    }

    #[test]
    fn a_contract_the_provider_names_badly_or_for_another_sale_is_refused() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        let i = input(&r, Some(&pc), &me);
        let refused_with = |wire: &WireContract, stored: Option<&Contract>| {
            let p = after_purchase(&i, st.clone(), Ok(wire), true, SELLER, stored);
            assert_eq!(p.status.purchase_phase, Some(Phase::Failed));
            assert!(p.before.is_empty(), "nothing written: {:?}", p.before);
            assert!(
                !releases(&p),
                "the provider may have sold it: the hold stays"
            );
            failed_with(&p).to_owned()
        };
        // Not an object name: never reaches an API path.
        for id in [
            "../secrets/x",
            "a/status",
            "?watch=true",
            "",
            &"a".repeat(254),
        ] {
            let mut wire = contract();
            wire.contract_id = id.to_owned();
            let msg = refused_with(&wire, None);
            assert!(msg.contains("is not a Kubernetes object name"), "{msg}");
            assert!(msg.len() < 200, "peer text is bounded: {msg}");
        }
        // A contract for another transaction.
        let mut wire = contract();
        wire.transaction_id = "tx-2".into();
        assert!(refused_with(&wire, None).contains("for transaction \"tx-2\", not tx-1"));
        // The name of another sale's Contract here: not overwritten.
        let theirs = Contract::new(
            "contract-1",
            fluidos_api::reservation::ContractSpec {
                transaction_id: "tx-other".into(),
                ..contract().to_crd("fluidos").unwrap()
            },
        );
        let msg = refused_with(&contract(), Some(&theirs));
        assert!(
            msg.ends_with("the name of this node's contract for transaction tx-other"),
            "{msg}"
        );
        // Its own Contract (a repeated purchase after a crash): stored again.
        let mine = Contract::new("contract-1", contract().to_crd("fluidos").unwrap());
        let p = after_purchase(&i, st.clone(), Ok(&contract()), true, SELLER, Some(&mine));
        assert_eq!(p.status.purchase_phase, Some(Phase::Solved));
    }

    /// base64 of `apiVersion: v1\nkind: Config\n`.
    const KUBECONFIG_B64: &str = "YXBpVmVyc2lvbjogdjEKa2luZDogQ29uZmlnCg==";

    fn bought(kubeconfig: &str) -> Plan {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        let mut wire = contract();
        wire.peering_target_credentials = WireLiqoCredentials {
            cluster_id: "liqo-provider".into(),
            kubeconfig: kubeconfig.into(),
        };
        after_purchase(
            &input(&r, Some(&pc), &me),
            st,
            Ok(&wire),
            true,
            SELLER,
            None,
        )
    }

    #[test]
    fn the_peering_kubeconfig_goes_to_a_secret_written_before_the_contract_and_owned_after() {
        // A trailing newline is trimmed, as the peering trims it.
        for sent in [KUBECONFIG_B64.to_owned(), format!("{KUBECONFIG_B64}\n")] {
            let p = bought(&sent);
            let [
                Effect::ApplyCredentials(secret),
                Effect::ApplyContract(c),
                Effect::OwnCredentials {
                    secret: owned,
                    contract: owner,
                },
            ] = &p.before[..]
            else {
                panic!("{:?}", p.before);
            };
            assert_eq!(
                secret.metadata.name.as_deref(),
                Some("peering-credentials-contract-1")
            );
            assert_eq!(secret.metadata.namespace.as_deref(), Some("fluidos"));
            assert_eq!(
                secret.data.as_ref().unwrap()["kubeconfig"].0,
                b"apiVersion: v1\nkind: Config\n"
            );
            assert_eq!(
                secret.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
                crate::MANAGER
            );
            // No UID to own it by before the Contract exists.
            assert_eq!(secret.metadata.owner_references, None);
            assert_eq!(
                (owned.as_str(), owner.as_str()),
                ("peering-credentials-contract-1", "contract-1")
            );
            // The Contract names the Secret and keeps no token.
            assert_eq!(c.metadata.name.as_deref(), Some("contract-1"));
            assert_eq!(c.spec.peering_target_credentials.kubeconfig, "");
            assert_eq!(c.spec.peering_target_credentials.liqo_id, "liqo-provider");
            assert_eq!(
                c.annotations().get(peering_credentials::ANNOTATION),
                Some(&"peering-credentials-contract-1".to_owned())
            );
            // All of it before the status: a crash repeats the purchase.
            assert_eq!(p.status.phase.phase, Phase::Solved);
            assert!(p.after.iter().all(|e| !matches!(
                e,
                Effect::ApplyCredentials(_) | Effect::OwnCredentials { .. }
            )));
        }
    }

    #[test]
    fn no_kubeconfig_or_one_not_base64_makes_no_secret() {
        // Nothing to keep (a Service may come without one).
        let p = bought("");
        let [Effect::ApplyContract(c)] = &p.before[..] else {
            panic!("{:?}", p.before);
        };
        assert!(
            !c.annotations()
                .contains_key(peering_credentials::ANNOTATION)
        );
        assert_eq!(c.spec.peering_target_credentials.kubeconfig, "");
        // Not base64: no usable credential; it stays where it always was, so
        // the peering reports it as before.
        let p = bought("not base64!");
        let [Effect::ApplyContract(c)] = &p.before[..] else {
            panic!("{:?}", p.before);
        };
        assert!(
            !c.annotations()
                .contains_key(peering_credentials::ANNOTATION)
        );
        assert_eq!(c.spec.peering_target_credentials.kubeconfig, "not base64!");
        assert_eq!(p.status.phase.phase, Phase::Solved);
    }

    #[test]
    fn the_first_purchase_is_recorded_before_it_is_sent() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(
            Some(running(Phase::Solved, Phase::Idle, Some("tx-1"))),
            "peeringcandidate-f1",
        );
        let Decision::Purchase {
            status,
            first_attempt,
            ..
        } = decide(&input(&r, Some(&pc), &me))
        else {
            panic!("expected Purchase");
        };
        assert!(first_attempt);
        assert_eq!(status.purchase_attempted_at.as_deref(), Some(NOW));
        // After a crash or an unanswered call: not the first any more.
        let r = reservation(Some(status), "peeringcandidate-f1");
        let Decision::Purchase {
            status,
            first_attempt,
            ..
        } = decide(&input(&r, Some(&pc), &me))
        else {
            panic!("expected Purchase");
        };
        assert!(!first_attempt);
        assert_eq!(status.purchase_attempted_at.as_deref(), Some(NOW));
    }

    #[test]
    fn an_unanswered_purchase_is_asked_again_and_never_silently_failed() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let r = reservation(None, "peeringcandidate-f1");
        let i = input(&r, Some(&pc), &me);
        let mut st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        st.purchase_attempted_at = Some(NOW.into());
        let p = after_purchase_timeout(&i, st, Duration::from_secs(60), SELLER);
        assert_eq!(p.status.phase.phase, Phase::Running);
        assert_eq!(p.status.purchase_phase, Some(Phase::Running));
        assert_eq!(
            p.status.phase.message.as_deref(),
            Some(
                "Reservation: the purchase of transaction tx-1 from 127.0.0.1:1 got no answer within 60s; asking again"
            )
        );
        assert_eq!(p.requeue, Some(UNANSWERED_PURCHASE_RETRY));
        assert!(p.before.is_empty() && p.after.is_empty());

        // Asked again, a provider that forgot the transaction (a Go one) is
        // not taken at its word: the Reservation says what may have happened.
        let asked_again = p.status;
        let unknown = refused(
            RefusalKind::UnknownTransaction,
            "provider 127.0.0.1:1 rejected the request with 500: Error getting the Transaction",
        );
        let q = after_purchase(&i, asked_again.clone(), Err(&unknown), false, SELLER, None);
        let msg = failed_with(&q).to_owned();
        assert!(
            msg.contains("an earlier purchase of transaction tx-1 from 127.0.0.1:1 got no answer"),
            "{msg}"
        );
        assert!(msg.contains("500: Error getting the Transaction"), "{msg}");
        assert!(
            msg.contains("look for a Contract with transactionID tx-1 on the provider"),
            "{msg}"
        );
        assert!(!releases(&q), "it may be sold: the hold stays");

        // A transient refusal (a restarting provider) is asked again.
        let busy = refused(RefusalKind::Transient, "503: retry later");
        let q = after_purchase(&i, asked_again.clone(), Err(&busy), false, SELLER, None);
        assert_eq!(q.status.phase.phase, Phase::Running);
        assert_eq!(q.requeue, Some(UNANSWERED_PURCHASE_RETRY));

        // Answered with the Contract on a later attempt: bought.
        let ok = after_purchase(
            &i,
            asked_again.clone(),
            Ok(&contract()),
            false,
            SELLER,
            None,
        );
        assert_eq!(ok.status.phase.phase, Phase::Solved);

        // No definite answer for longer than the limit: given up on, saying why.
        let mut long = asked_again;
        long.purchase_attempted_at = Some("2026-12-01T09:00:00Z".into());
        let p = after_purchase_timeout(&i, long.clone(), Duration::from_secs(60), SELLER);
        let msg = failed_with(&p).to_owned();
        assert!(msg.contains("no definite answer came in 600s"), "{msg}");
        assert!(!releases(&p));

        // A mark edited into garbage restarts the clock instead of asking forever.
        long.purchase_attempted_at = Some("yesterday".into());
        let p = after_purchase_timeout(&i, long, Duration::from_secs(60), SELLER);
        assert_eq!(p.status.purchase_attempted_at.as_deref(), Some(NOW));
    }

    #[test]
    fn a_reservation_whose_solver_ended_stops() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        // Before any purchase: the hold goes back.
        let r = reservation(
            Some(running(Phase::Running, Phase::Idle, None)),
            "peeringcandidate-f1",
        );
        let mut i = input(&r, Some(&pc), &me);
        i.owner_ended = Some("solver-a".into());
        let p = settled(decide(&i));
        assert_eq!(
            failed_with(&p),
            "Reservation failed: Solver solver-a ended before the reservation completed"
        );
        assert!(releases(&p));
        // After a purchase was sent: the hold stays, and it says where to look.
        let mut st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        st.purchase_attempted_at = Some(NOW.into());
        let r = reservation(Some(st), "peeringcandidate-f1");
        let mut i = input(&r, Some(&pc), &me);
        i.owner_ended = Some("solver-a".into());
        let p = settled(decide(&i));
        assert!(
            failed_with(&p).contains("look for a Contract with transactionID tx-1"),
            "{:?}",
            p.status
        );
        assert!(!releases(&p));
    }

    #[test]
    fn a_sold_candidate_shows_what_is_left() {
        let me = me();
        let pc = candidate("f1", "4", "1");
        let mut r = reservation(None, "peeringcandidate-f1");
        r.spec.configuration = Some(fluidos_api::Configuration::k8slice(
            &fluidos_api::configuration::K8SliceConfiguration {
                cpu: fluidos_api::ledger::q("1"),
                memory: fluidos_api::ledger::q("1Gi"),
                pods: fluidos_api::ledger::q("1"),
                ..Default::default()
            },
        ));
        let st = running(Phase::Solved, Phase::Running, Some("tx-1"));
        let p = after_purchase(
            &input(&r, Some(&pc), &me),
            st,
            Ok(&contract()),
            true,
            SELLER,
            None,
        );
        let [
            Effect::ShowRemainder { name, flavor_type },
            Effect::DeleteTransaction(_),
        ] = &p.after[..]
        else {
            panic!("{:?}", p.after);
        };
        assert_eq!(name, "peeringcandidate-f1");
        let FlavorTypeData::K8Slice(k) = flavor_type.parse().unwrap() else {
            panic!("not a K8Slice");
        };
        assert_eq!(k.characteristics.cpu.0, "3");
        assert_eq!(k.characteristics.memory.0, "3Gi");
        assert_eq!(k.characteristics.pods.0, "9");
        // Bought whole: nothing to show until the next Discovery.
        let mut whole = r.clone();
        whole.spec.configuration = Some(fluidos_api::Configuration::k8slice(
            &fluidos_api::configuration::K8SliceConfiguration {
                cpu: fluidos_api::ledger::q("4"),
                memory: fluidos_api::ledger::q("4Gi"),
                pods: fluidos_api::ledger::q("10"),
                ..Default::default()
            },
        ));
        assert_eq!(remainder(&pc, whole.spec.configuration.as_ref()), None);
        assert_eq!(remainder(&pc, None), None);
    }

    #[test]
    fn a_retired_or_sold_flavor_is_not_available() {
        for (kind, message, gone) in [
            (RefusalKind::Unavailable, "409: not enough", true),
            (
                RefusalKind::UnknownTransaction,
                "rejected the request with 404: no flavor",
                true,
            ),
            (
                RefusalKind::UnknownTransaction,
                "rejected the request with 500: Error getting the Flavor by ID",
                true,
            ),
            (
                RefusalKind::UnknownTransaction,
                "rejected the request with 500: boom",
                false,
            ),
            (RefusalKind::Other, "400: bad configuration", false),
        ] {
            assert_eq!(flavor_gone(&refused(kind, message)), gone, "{message}");
        }
    }
}

//! Objects for the state machines' unit tests.

use fluidos_api::advertisement::{DiscoverySpec, DiscoveryStatus, PeeringCandidateSpec};
use fluidos_api::allocation::{AllocationSpec, AllocationState, AllocationStatus};
use fluidos_api::common::GenericRef;
use fluidos_api::rear::{WireFlavor, WireK8Slice, characteristics};
use fluidos_api::reservation::{ReservationSpec, ReservationStatus};
use fluidos_api::solver::{Selector, SolverSpec, SolverStatus};
use fluidos_api::{
    Allocation, Discovery, NodeIdentity, NodeIdentityAdditionalInfo, PeeringCandidate, Phase,
    PhaseStatus, Reservation, Solver,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

/// Namespace of every fixture.
pub const NS: &str = "fluidos";
/// UID of the fixture Solver.
pub const SOLVER_UID: &str = "uid-solver";
/// "Now" in the tests.
pub const NOW: &str = "2026-12-01T10:00:00Z";
/// Long enough ago for every timeout.
pub const LONG_AGO: &str = "2026-12-01T09:00:00Z";

/// [`NOW`] as a timestamp.
pub fn now() -> jiff::Timestamp {
    NOW.parse().unwrap()
}

/// The consumer node.
pub fn me() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "consumer01".into(),
        ip: "127.0.0.1:2".into(),
        additional_information: Some(NodeIdentityAdditionalInfo {
            liqo_id: Some("liqo-consumer".into()),
        }),
    }
}

/// A provider's K8Slice flavor on the wire.
pub fn wire_flavor(id: &str, cpu: &str, price: &str) -> WireFlavor {
    let k = WireK8Slice {
        characteristics: characteristics("amd64", cpu, "4Gi", "10"),
        ..Default::default()
    };
    serde_json::from_value(json!({
        "flavorID": id, "providerID": "prov",
        "type": {"name": "k8slice", "data": serde_json::to_value(&k).unwrap()},
        "timestamp": "2026-11-30T10:00:00Z",
        "price": {"amount": price, "currency": "EUR", "period": "hourly"},
        "owner": {"ID": "prov", "IP": "127.0.0.1:1", "domain": "fluidos.eu"},
        "availability": true
    }))
    .unwrap()
}

/// An available candidate for flavor `id`.
pub fn candidate(id: &str, cpu: &str, price: &str) -> PeeringCandidate {
    let mut pc = PeeringCandidate::new(
        &format!("peeringcandidate-{id}"),
        PeeringCandidateSpec {
            interested_solver_ids: Vec::new(),
            flavor: wire_flavor(id, cpu, price).to_embedded(NS).unwrap(),
            available: true,
        },
    );
    pc.metadata.namespace = Some(NS.into());
    pc
}

/// A Solver with these flags and status.
pub fn solver(find: bool, buy: bool, peer: bool, status: Option<SolverStatus>) -> Solver {
    let mut s = Solver::new(
        "solver-a",
        SolverSpec {
            selector: Some(Selector {
                flavor_type: "K8Slice".into(),
                filters: None,
            }),
            intent_id: "intent".into(),
            find_candidate: Some(find),
            reserve_and_buy: Some(buy),
            establish_peering: Some(peer),
        },
    );
    s.metadata.namespace = Some(NS.into());
    s.metadata.uid = Some(SOLVER_UID.into());
    s.status = status;
    s
}

/// A phase status last changed at `at`.
pub fn phase(phase: Phase, message: &str, at: &str) -> PhaseStatus {
    PhaseStatus {
        phase,
        message: Some(message.into()),
        last_change_time: Some(at.into()),
        ..Default::default()
    }
}

fn owned_by(uid: &str) -> Vec<OwnerReference> {
    vec![OwnerReference {
        api_version: "nodecore.fluidos.eu/v1alpha1".into(),
        kind: "Solver".into(),
        name: "solver-a".into(),
        uid: uid.into(),
        controller: Some(true),
        ..Default::default()
    }]
}

/// The Solver's Discovery in `phase`, owned by the Solver with `uid`.
pub fn discovery(phase_now: Phase, uid: &str) -> Discovery {
    let mut d = Discovery::new(
        "discovery-solver-a",
        DiscoverySpec {
            solver_id: "solver-a".into(),
            selector: None,
            subscribe: false,
        },
    );
    d.metadata.namespace = Some(NS.into());
    d.metadata.owner_references = Some(owned_by(uid));
    d.status = Some(DiscoveryStatus {
        phase: phase(phase_now, "", NOW),
        ..Default::default()
    });
    d
}

/// The Solver's Reservation with this status, for candidate `pc`.
pub fn reservation(status: Option<ReservationStatus>, pc: &str) -> Reservation {
    let mut r = Reservation::new(
        "reservation-solver-a",
        ReservationSpec {
            solver_id: "solver-a".into(),
            buyer: me(),
            seller: NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "prov".into(),
                ip: "127.0.0.1:1".into(),
                additional_information: None,
            },
            configuration: None,
            reserve: Some(true),
            purchase: Some(true),
            peering_candidate: Some(GenericRef::named(NS, pc)),
            ingress_telemetry_endpoint: None,
        },
    );
    r.metadata.namespace = Some(NS.into());
    r.metadata.owner_references = Some(owned_by(SOLVER_UID));
    r.status = status;
    r
}

/// An Allocation of `contract` in `state`.
pub fn allocation(contract: &str, state: Option<AllocationState>) -> Allocation {
    let mut a = Allocation::new(
        "allocation-x",
        AllocationSpec {
            forwarding: Some(false),
            contract: Some(GenericRef::named(NS, contract)),
        },
    );
    a.metadata.namespace = Some(NS.into());
    a.status = state.map(|s| AllocationStatus {
        status: Some(s),
        ..Default::default()
    });
    a
}

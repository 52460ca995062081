//! Valid objects of every kind a node writes, which it creates with
//! `dryRun=All` before saying it is ready.
//!
//! A freshly started API server readies a custom resource's write path
//! (decoding, defaulting, validation rules, admission, managed fields) on the
//! first write of that kind, which cost the first Solver of a fresh node tens
//! of milliseconds per kind. A dry-run create takes that path without
//! storing anything, so the cost belongs to startup. The objects only need
//! to be valid; nothing reads them.

use std::collections::BTreeMap;

use crate::advertisement::{DiscoverySpec, PeeringCandidateSpec};
use crate::allocation::AllocationSpec;
use crate::common::{GenericRef, LiqoCredentials, NodeIdentity, Price};
use crate::embedded::{EmbeddedFlavor, EmbeddedObjectMeta};
use crate::flavor::{FlavorSpec, FlavorType, K8Slice};
use crate::reservation::{ContractSpec, ReservationSpec, TransactionSpec};
use crate::solver::SolverSpec;
use crate::{
    Allocation, Contract, Discovery, Flavor, PeeringCandidate, Reservation, Solver, Transaction,
};

/// The name every probe object carries (never stored: dry-run only).
pub const PROBE_NAME: &str = "fluidos-dry-run-probe";

fn identity() -> NodeIdentity {
    NodeIdentity {
        domain: "fluidos.eu".into(),
        node_id: "probe".into(),
        ip: "127.0.0.1:1".into(),
        additional_information: None,
    }
}

fn flavor_spec() -> FlavorSpec {
    let k = K8Slice {
        characteristics: crate::rear::characteristics("amd64", "1", "1Gi", "1"),
        ..Default::default()
    };
    FlavorSpec {
        provider_id: "probe".into(),
        flavor_type: FlavorType::k8slice(&k),
        owner: identity(),
        price: Price {
            amount: "0".into(),
            currency: "EUR".into(),
            period: "hourly".into(),
        },
        availability: true,
        network_property_type: None,
        location: None,
    }
}

fn embedded_flavor(ns: &str) -> EmbeddedFlavor {
    EmbeddedFlavor {
        api_version: Some("nodecore.fluidos.eu/v1alpha1".into()),
        kind: Some("Flavor".into()),
        metadata: EmbeddedObjectMeta {
            name: Some(PROBE_NAME.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: flavor_spec(),
        status: None,
    }
}

fn named<K: kube::Resource<DynamicType = ()>>(mut obj: K, ns: &str) -> K {
    let meta = obj.meta_mut();
    meta.name = Some(PROBE_NAME.into());
    meta.namespace = Some(ns.into());
    obj
}

/// A Flavor.
pub fn flavor(ns: &str) -> Flavor {
    named(Flavor::new(PROBE_NAME, flavor_spec()), ns)
}

/// A Solver.
pub fn solver(ns: &str) -> Solver {
    named(
        Solver::new(
            PROBE_NAME,
            SolverSpec {
                selector: None,
                intent_id: PROBE_NAME.into(),
                find_candidate: Some(true),
                reserve_and_buy: Some(false),
                establish_peering: Some(false),
            },
        ),
        ns,
    )
}

/// A Discovery.
pub fn discovery(ns: &str) -> Discovery {
    named(
        Discovery::new(
            PROBE_NAME,
            DiscoverySpec {
                solver_id: PROBE_NAME.into(),
                selector: None,
                subscribe: false,
            },
        ),
        ns,
    )
}

/// A PeeringCandidate.
pub fn peering_candidate(ns: &str) -> PeeringCandidate {
    named(
        PeeringCandidate::new(
            PROBE_NAME,
            PeeringCandidateSpec {
                interested_solver_ids: vec![PROBE_NAME.into()],
                flavor: embedded_flavor(ns),
                available: true,
            },
        ),
        ns,
    )
}

/// A Reservation.
pub fn reservation(ns: &str) -> Reservation {
    named(
        Reservation::new(
            PROBE_NAME,
            ReservationSpec {
                solver_id: PROBE_NAME.into(),
                buyer: identity(),
                seller: identity(),
                configuration: None,
                reserve: Some(true),
                purchase: Some(true),
                peering_candidate: Some(GenericRef {
                    name: Some(PROBE_NAME.into()),
                    namespace: Some(ns.into()),
                    ..GenericRef::default()
                }),
                ingress_telemetry_endpoint: None,
            },
        ),
        ns,
    )
}

/// A Transaction.
pub fn transaction(ns: &str) -> Transaction {
    named(
        Transaction::new(
            PROBE_NAME,
            TransactionSpec {
                flavor_id: PROBE_NAME.into(),
                buyer: identity(),
                cluster_id: String::new(),
                configuration: None,
                expiration_time: None,
            },
        ),
        ns,
    )
}

/// A Contract.
pub fn contract(ns: &str) -> Contract {
    named(
        Contract::new(
            PROBE_NAME,
            ContractSpec {
                flavor: embedded_flavor(ns),
                transaction_id: PROBE_NAME.into(),
                configuration: None,
                buyer: identity(),
                buyer_cluster_id: "probe".into(),
                seller: identity(),
                peering_target_credentials: LiqoCredentials {
                    liqo_id: "probe".into(),
                    kubeconfig: String::new(),
                },
                expiration_time: None,
                extra_information: Some(BTreeMap::new()),
                network_requests: None,
                ingress_telemetry_endpoint: None,
            },
        ),
        ns,
    )
}

/// An Allocation.
pub fn allocation(ns: &str) -> Allocation {
    named(
        Allocation::new(
            PROBE_NAME,
            AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef {
                    name: Some(PROBE_NAME.into()),
                    namespace: Some(ns.into()),
                    ..GenericRef::default()
                }),
            },
        ),
        ns,
    )
}

//! A Service bought from a Go node: asked for the service's endpoints, the
//! Go gateway (played by `fluidos_testenv::go_rear_standin`, which answers
//! an unrouted path as gorilla/mux does) gives the answer the buyer's
//! Allocation recognises as "this seller never delivers over REAR", and the
//! Allocation ends in `Error` saying why instead of waiting out the Solver.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::Duration;

use fluidos_api::allocation::{AllocationSpec, AllocationState};
use fluidos_api::{Allocation, GenericRef};
use fluidos_rear_client::{ClientConfig, ProviderAddress, RearClient, RearError};
use fluidos_service_allocation::CONSUMER_FINALIZER;
use fluidos_service_allocation::consumer::machine::{
    GO_UNROUTED, Input, NOT_A_FLUIDOS_RS_SELLER, plan,
};
use fluidos_testenv::go_rear_standin::GoRearStandIn;

#[tokio::test]
async fn a_go_seller_is_told_apart_and_the_allocation_says_why() {
    let go = GoRearStandIn::start("goprovider", |_| Vec::new(), Duration::ZERO)
        .await
        .unwrap();
    let client = RearClient::new(ClientConfig::default()).unwrap();
    let provider = ProviderAddress {
        address: go.address().to_owned(),
        fingerprint: None,
    };
    let answer = client
        .service_access(&provider, "contract-x", "buyer", "tx")
        .await;
    let Err(RearError::Rejected {
        status, message, ..
    }) = &answer
    else {
        panic!("{answer:?}");
    };
    assert_eq!((*status, message.as_str()), (404, GO_UNROUTED));

    let mut allocation = Allocation::new(
        "allocation-x",
        AllocationSpec {
            forwarding: Some(false),
            contract: Some(GenericRef::named("fluidos", "contract-x")),
        },
    );
    allocation.metadata.namespace = Some("fluidos".into());
    allocation.metadata.finalizers = Some(vec![CONSUMER_FINALIZER.to_owned()]);
    let p = plan(&Input {
        allocation: &allocation,
        contract_name: "contract-x",
        contract_exists: true,
        secret: None,
        fetched: Some(&answer),
        now: "2026-12-02T00:00:00Z".into(),
    });
    assert_eq!(p.status.status, Some(AllocationState::Error));
    assert_eq!(p.status.message.as_deref(), Some(NOT_A_FLUIDOS_RS_SELLER));
}

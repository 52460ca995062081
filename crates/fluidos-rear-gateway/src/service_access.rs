//! `GET /api/v2/contracts/{contractID}/service?buyerID=<node ID>`: the
//! buyer of a Service contract fetches how to reach its service (not in the
//! Go node's REAR; delivery without Liqo).
//!
//! Only the contract's buyer gets an answer. REAR has no authentication yet
//! (issue 11), so the buyer is the node ID it states, compared with the
//! contract's `spec.buyer.nodeID`, AND the contract's 128-bit
//! `transactionID`, sent in the `X-Fluidos-Transaction-Id` header and
//! compared in constant time: contract names are guessable and node IDs are
//! public, the transaction ID is known to the two parties only. An unknown
//! contract, another buyer and a wrong or missing transaction ID all get the
//! same 404, so the route tells nothing about which contracts exist.

use fluidos_api::allocation::AllocationState;
use fluidos_api::rear::ServiceAccess;
use fluidos_api::{Allocation, Contract, FlavorTypeIdentifier};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::ResourceExt;

use crate::State;
use crate::buyer::{SaleOwner, check_owner};
use crate::error::ApiError;
use crate::labels;

/// 410 Gone: the service will not come (failed or removed).
fn gone(message: String) -> ApiError {
    ApiError::new(axum::http::StatusCode::GONE, message)
}

/// Compares `a` and `b` in time depending on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the caller stating `buyer_id` and `transaction_id` bought `contract`.
pub(crate) fn is_buyer(contract: &Contract, buyer_id: &str, transaction_id: &str) -> bool {
    let tx_ok = constant_time_eq(
        contract.spec.transaction_id.as_bytes(),
        transaction_id.as_bytes(),
    );
    let buyer_ok = constant_time_eq(contract.spec.buyer.node_id.as_bytes(), buyer_id.as_bytes());
    tx_ok & buyer_ok & !buyer_id.is_empty() & !transaction_id.is_empty()
}

/// What the buyer `buyer_id`, proving itself with `transaction_id`, is told
/// about contract `id` (pure).
pub(crate) fn decide(
    id: &str,
    buyer_id: &str,
    transaction_id: &str,
    contract: Option<&Contract>,
    allocation: Option<&Allocation>,
    secret: Option<&Secret>,
) -> Result<ServiceAccess, ApiError> {
    if buyer_id.is_empty() {
        return Err(ApiError::bad_request("buyerID is required").field("buyerID"));
    }
    // One answer for unknown, not bought by the caller and wrong proof.
    let Some(contract) = contract.filter(|c| is_buyer(c, buyer_id, transaction_id)) else {
        return Err(ApiError::not_found(format!("Contract {id} not found")));
    };
    if contract.spec.flavor.spec.flavor_type.identifier() != Some(FlavorTypeIdentifier::Service) {
        return Err(ApiError::bad_request(format!(
            "Contract {id} is not for a Service flavor"
        )));
    }
    let Some(allocation) = allocation else {
        return Err(ApiError::conflict(format!(
            "the service of Contract {id} is not allocated yet"
        )));
    };
    let status = allocation.status.clone().unwrap_or_default();
    let message = status.message.unwrap_or_default();
    if allocation.metadata.deletion_timestamp.is_some() {
        return Err(gone(format!(
            "the service of Contract {id} is being removed"
        )));
    }
    match status.status {
        Some(AllocationState::Active) => {}
        Some(AllocationState::Error) => {
            return Err(gone(format!(
                "the service of Contract {id} could not be created: {message}"
            )));
        }
        Some(AllocationState::Released) => {
            return Err(gone(format!(
                "the service of Contract {id} was removed: {message}"
            )));
        }
        other => {
            let state = other.map_or_else(|| "pending".to_owned(), |s| s.to_string());
            return Err(ApiError::conflict(format!(
                "the service of Contract {id} is not ready yet ({state}: {message})"
            )));
        }
    }
    let secret = secret.ok_or_else(|| {
        ApiError::conflict(format!(
            "the service of Contract {id} is not ready yet (no credentials Secret)"
        ))
    })?;
    let Some(endpoints) = secret.annotations().get(labels::EXTERNAL_ENDPOINTS) else {
        return Err(ApiError::conflict(format!(
            "the service of Contract {id} is not ready yet (no external address)"
        )));
    };
    let mut credentials: std::collections::BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    let cluster_endpoints = credentials.remove("endpoints").unwrap_or_default();
    Ok(ServiceAccess {
        contract_id: id.to_owned(),
        endpoints: endpoints.clone(),
        cluster_endpoints,
        credentials,
    })
}

impl State {
    /// Reads what [`decide`] needs and decides.
    pub(crate) async fn service_access(
        &self,
        id: &str,
        buyer_id: &str,
        transaction_id: &str,
        caller: SaleOwner,
    ) -> Result<ServiceAccess, ApiError> {
        // A name the API server could not hold never reaches its URL; the
        // answer is the one for an unknown contract.
        if !crate::limits::is_object_name(id) {
            return Err(ApiError::not_found(format!("Contract {id} not found")));
        }
        let contract = self
            .contracts
            .get_opt(id)
            .await
            .map_err(|e| ApiError::kube("reading the Contract", &e))?;
        let owned = contract
            .as_ref()
            .is_some_and(|c| is_buyer(c, buyer_id, transaction_id));
        // A caller that knows the buyer and the transaction but holds
        // another key learns nothing more than it knew.
        if owned && let Some(c) = &contract {
            check_owner(
                SaleOwner::recorded(c.annotations()),
                caller,
                &format!("Contract {id}"),
            )?;
        }
        // Nothing more is read for a caller who did not buy.
        let (allocation, secret) = if let (true, Some(c)) = (owned, &contract) {
            let of_contract = |a: &Allocation| {
                a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(id)
            };
            // The sale's Allocation carries its transaction: one small list
            // per request, not every Allocation (one made by an earlier
            // version without the label is looked for among all).
            let mut allocation = self
                .allocations
                .list(&labels::sale(&c.spec.transaction_id))
                .await
                .map_err(|e| ApiError::kube("listing the Allocations", &e))?
                .items
                .into_iter()
                .find(of_contract);
            if allocation.is_none() {
                allocation = self
                    .allocations
                    .list(&labels::provider())
                    .await
                    .map_err(|e| ApiError::kube("listing the Allocations", &e))?
                    .items
                    .into_iter()
                    .find(of_contract);
            }
            let secret = Api::<Secret>::namespaced(self.client.clone(), id)
                .get_opt(&fluidos_api::naming::credentials_secret_name(id))
                .await
                .map_err(|e| ApiError::kube("reading the credentials Secret", &e))?;
            (allocation, secret)
        } else {
            (None, None)
        };
        decide(
            id,
            buyer_id,
            transaction_id,
            contract.as_ref(),
            allocation.as_ref(),
            secret.as_ref(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fluidos_api::allocation::AllocationStatus;
    use serde_json::json;

    const TX: &str = "0123456789abcdef0123456789abcdef";

    fn contract(buyer: &str, type_: &str) -> Contract {
        serde_json::from_value(json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "c1", "namespace": "fluidos"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": type_, "typeData": {}},
                    "owner": {"domain": "d", "nodeID": "p", "ip": "i"}, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": TX, "buyer": {"domain": "d", "nodeID": buyer, "ip": "i"},
                "buyerClusterID": "b", "seller": {"domain": "d", "nodeID": "p", "ip": "i"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}}))
        .unwrap()
    }

    fn allocation(state: AllocationState) -> Allocation {
        let mut a = Allocation::new("a", Default::default());
        a.status = Some(AllocationStatus {
            status: Some(state),
            message: Some("msg".into()),
            ..Default::default()
        });
        a
    }

    fn secret(annotated: bool) -> Secret {
        let mut s: Secret = serde_json::from_value(json!({"metadata": {"name": "credentials-c1"},
            "data": {"endpoints": "ZGI6MzMwNg==", "username": "dQ==", "password": "cA=="}}))
        .unwrap();
        if annotated {
            s.metadata.annotations =
                Some([(labels::EXTERNAL_ENDPOINTS.to_owned(), "h:31000".to_owned())].into());
        }
        s
    }

    fn status(r: Result<ServiceAccess, ApiError>) -> (u16, String) {
        let e = r.unwrap_err();
        (e.status.as_u16(), e.body.error)
    }

    #[test]
    fn only_the_buyer_of_a_ready_service_gets_it() {
        let c = contract("buyer", "Service");
        let a = allocation(AllocationState::Active);
        let s = secret(true);
        let ok = decide("c1", "buyer", TX, Some(&c), Some(&a), Some(&s)).unwrap();
        assert_eq!(ok.endpoints, "h:31000");
        assert_eq!(ok.cluster_endpoints, "db:3306");
        assert_eq!(
            ok.credentials,
            [
                ("password".to_owned(), "p".to_owned()),
                ("username".to_owned(), "u".to_owned())
            ]
            .into()
        );
        // Another buyer, a wrong, short or missing transaction ID and an
        // unknown contract all get the same 404.
        let unknown = status(decide("c1", "buyer", TX, None, None, None));
        assert_eq!(unknown, (404, "Contract c1 not found".into()));
        for (buyer, tx) in [
            ("intruder", TX),
            ("buyer", "0123456789abcdef0123456789abcdee"),
            ("buyer", "0123"),
            ("buyer", ""),
        ] {
            assert_eq!(
                status(decide("c1", buyer, tx, Some(&c), Some(&a), Some(&s))),
                unknown,
                "{buyer} {tx}"
            );
        }
        assert_eq!(
            status(decide("c1", "", TX, Some(&c), Some(&a), Some(&s))).0,
            400
        );
        assert_eq!(
            status(decide(
                "c1",
                "buyer",
                TX,
                Some(&contract("buyer", "K8Slice")),
                None,
                None
            ))
            .0,
            400
        );
    }

    #[test]
    fn not_ready_is_409_and_failed_or_removed_is_410() {
        let c = contract("buyer", "Service");
        let s = secret(true);
        assert_eq!(
            status(decide("c1", "buyer", TX, Some(&c), None, None)).0,
            409
        );
        assert_eq!(
            status(decide(
                "c1",
                "buyer",
                TX,
                Some(&c),
                Some(&allocation(AllocationState::ResourceCreation)),
                Some(&s)
            )),
            (
                409,
                "the service of Contract c1 is not ready yet (ResourceCreation: msg)".into()
            )
        );
        assert_eq!(
            status(decide(
                "c1",
                "buyer",
                TX,
                Some(&c),
                Some(&allocation(AllocationState::Active)),
                Some(&secret(false))
            ))
            .0,
            409
        );
        assert_eq!(
            status(decide(
                "c1",
                "buyer",
                TX,
                Some(&c),
                Some(&allocation(AllocationState::Error)),
                Some(&s)
            )),
            (
                410,
                "the service of Contract c1 could not be created: msg".into()
            )
        );
        assert_eq!(
            status(decide(
                "c1",
                "buyer",
                TX,
                Some(&c),
                Some(&allocation(AllocationState::Released)),
                None
            ))
            .0,
            410
        );
    }
}

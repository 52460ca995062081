//! Objects for the unit tests.

#![allow(clippy::unwrap_used)]

use fluidos_api::Contract;

/// A Contract for `flavor_type` that `seller` sold to `buyer`, expiring at `expires`.
pub fn contract(
    name: &str,
    flavor_type: &str,
    seller: &str,
    buyer: &str,
    expires: Option<&str>,
) -> Contract {
    let mut spec = serde_json::json!({
        "flavor": {"metadata": {"name": "fl-1"}, "spec": {
            "providerID": seller,
            "flavorType": {"typeIdentifier": flavor_type, "typeData": {}},
            "owner": {"domain": "fluidos.eu", "nodeID": seller, "ip": "127.0.0.1:2"},
            "price": {"amount": "", "currency": "", "period": ""},
            "availability": true}},
        "transactionID": "t-1",
        "buyer": {"domain": "fluidos.eu", "nodeID": buyer, "ip": "127.0.0.1:1"},
        "buyerClusterID": "liqo-consumer",
        "seller": {"domain": "fluidos.eu", "nodeID": seller, "ip": "127.0.0.1:2"},
        "peeringTargetCredentials": {"liqoID": "liqo-provider", "kubeconfig": ""}
    });
    if let Some(e) = expires {
        spec["expirationTime"] = e.into();
    }
    Contract::new(name, serde_json::from_value(spec).unwrap())
}

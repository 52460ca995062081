//! The Go node's key order in the bodies the gateway writes, pinned.
//!
//! The API server hands back raw payloads (`typeData`, `configuration.data`)
//! with sorted keys, while Go marshals the typed structs in field order
//! (`charateristics, properties, policies`). The wire models of
//! `fluidos_api::rear` carry those payloads typed (`WireFlavorData`,
//! `WireConfigurationData`), so plain `serde_json::to_string` writes Go's
//! order; these tests hold the gateway's bodies to Go's bytes. Payloads Go
//! keeps raw (`configurationTemplate`, `configurationData`) stay sorted, as
//! Go re-marshals them from the API server's sorted JSON.

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fluidos_api::common::{
        Configuration, LiqoCredentials, Location, NodeIdentity, NodeIdentityAdditionalInfo, Price,
    };
    use fluidos_api::embedded::{EmbeddedFlavor, EmbeddedObjectMeta};
    use fluidos_api::flavor::{FlavorSpec, FlavorType};
    use fluidos_api::rear::{WireConfiguration, WireContract, WireFlavor, WireTransaction};
    use fluidos_api::reservation::ContractSpec;
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    /// Serializes `v`, checks it is `golden`, and that Go's bytes decode and
    /// re-encode unchanged (what a Rust node relays is what it received).
    fn assert_go_bytes<T: Serialize + DeserializeOwned>(v: &T, golden: &str) {
        let s = serde_json::to_string(v).unwrap();
        assert_eq!(s, golden);
        let back: T = serde_json::from_str(golden).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), golden);
    }

    fn owner() -> NodeIdentity {
        NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "prov".into(),
            ip: "127.0.0.1:3004".into(),
            additional_information: None,
        }
    }

    /// A Flavor spec as the API server returns it: `typeData` keys sorted.
    fn spec(type_identifier: &str, type_data: serde_json::Value) -> FlavorSpec {
        FlavorSpec {
            provider_id: "prov".into(),
            flavor_type: FlavorType {
                type_identifier: type_identifier.into(),
                type_data,
            },
            owner: owner(),
            price: Price {
                amount: "1".into(),
                currency: "EUR".into(),
                period: "hourly".into(),
            },
            availability: true,
            network_property_type: Some("networkProperty".into()),
            location: Some(Location {
                latitude: Some("45".into()),
                longitude: Some("7".into()),
                country: Some("Italy".into()),
                city: Some("Turin".into()),
                additional_notes: Some("None".into()),
            }),
        }
    }

    fn k8slice_spec() -> FlavorSpec {
        spec(
            "K8Slice",
            json!({
                "characteristics": {"architecture": "amd64", "cpu": "4", "memory": "8Gi",
                    "pods": "110", "gpu": {"model": "a100", "cores": "1", "memory": "40Gi"},
                    "storage": "100Gi"},
                "properties": {"latency": 5, "securityStandards": ["GDPR"]},
                "policies": {"partitionability": {"cpuMin": "1", "memoryMin": "1Gi",
                    "podsMin": "1", "gpuMin": "0", "cpuStep": "1", "memoryStep": "1Gi",
                    "podsStep": "1", "gpuStep": "0"}}
            }),
        )
    }

    fn service_spec() -> FlavorSpec {
        spec(
            "Service",
            json!({
                "name": "db", "description": "A database", "category": "database",
                "tags": ["database", "mysql"], "hostingPolicies": ["Provider", "Consumer"],
                "configurationTemplate": {"type": "object",
                    "properties": {"username": {"type": "string"}}, "required": ["username"]}
            }),
        )
    }

    const K8SLICE_FLAVOR: &str = concat!(
        r#"{"flavorID":"fluidos.eu-k8slice-3f9a","providerID":"prov","type":{"name":"k8slice","data":"#,
        r#"{"charateristics":{"architecture":"amd64","cpu":"4","memory":"8Gi","pods":"110","#,
        r#""gpu":{"model":"a100","cores":"1","memory":"40Gi"},"storage":"100Gi"},"#,
        r#""properties":{"latency":5,"securityStandards":["GDPR"]},"#,
        r#""policies":{"partitionability":{"cpuMin":"1","memoryMin":"1Gi","podsMin":"1","#,
        r#""cpuStep":"1","memoryStep":"1Gi","podsStep":"1"}}}},"#,
        r#""networkPropertyType":"networkProperty","timestamp":"2025-05-18T10:00:00Z","#,
        r#""location":{"latitude":"45","longitude":"7","altitude":"Italy","city":"Turin","additionalNotes":"None"},"#,
        r#""price":{"amount":"1","currency":"EUR","period":"hourly"},"#,
        r#""owner":{"ID":"prov","IP":"127.0.0.1:3004","domain":"fluidos.eu"},"availability":true}"#
    );

    /// The Service flavor's `type`; the template, raw in Go too, stays sorted.
    const SERVICE_TYPE: &str = concat!(
        r#""type":{"name":"service","data":{"name":"db","description":"A database","#,
        r#""category":"database","tags":["database","mysql"],"hostingPolicies":["Provider","Consumer"],"#,
        r#""configurationTemplate":{"properties":{"username":{"type":"string"}},"#,
        r#""required":["username"],"type":"object"}}}"#
    );

    const K8SLICE_CONFIGURATION: &str = concat!(
        r#"{"type":"k8slice","data":{"cpu":"1","memory":"2Gi","pods":"10","#,
        r#""gpu":{"model":"a100","cores":"1","memory":"40Gi"},"storage":"10Gi"}}"#
    );

    const SERVICE_CONFIGURATION: &str = concat!(
        r#"{"type":"service","data":{"hostingPolicy":"Consumer","#,
        r#""configurationData":{"password":"p","username":"admin"}}}"#
    );

    /// A K8Slice configuration as the API server returns it (sorted keys).
    fn k8slice_configuration() -> Configuration {
        Configuration {
            type_: "K8Slice".into(),
            data: json!({"storage": "10Gi", "pods": "10", "memory": "2Gi", "cpu": "1",
                "gpu": {"memory": "40Gi", "model": "a100", "cores": "1"}}),
        }
    }

    fn service_configuration() -> Configuration {
        Configuration {
            type_: "Service".into(),
            data: json!({"configurationData": {"username": "admin", "password": "p"},
                "hostingPolicy": "Consumer"}),
        }
    }

    #[test]
    fn k8slice_flavor_in_go_order() {
        let w = WireFlavor::from_crd(
            "fluidos.eu-k8slice-3f9a",
            &k8slice_spec(),
            "2025-05-18T10:00:00Z".into(),
        )
        .unwrap();
        assert_go_bytes(&w, K8SLICE_FLAVOR);
    }

    #[test]
    fn service_flavor_in_go_order() {
        let w = WireFlavor::from_crd(
            "fluidos.eu-service-1a2b",
            &service_spec(),
            "2025-05-18T10:00:00Z".into(),
        )
        .unwrap();
        let golden = format!(
            concat!(
                r#"{{"flavorID":"fluidos.eu-service-1a2b","providerID":"prov",{}"#,
                r#","networkPropertyType":"networkProperty","timestamp":"2025-05-18T10:00:00Z","#,
                r#""location":{{"latitude":"45","longitude":"7","altitude":"Italy","city":"Turin","additionalNotes":"None"}},"#,
                r#""price":{{"amount":"1","currency":"EUR","period":"hourly"}},"#,
                r#""owner":{{"ID":"prov","IP":"127.0.0.1:3004","domain":"fluidos.eu"}},"availability":true}}"#
            ),
            SERVICE_TYPE
        );
        assert_go_bytes(&w, &golden);
    }

    #[test]
    fn k8slice_configuration_in_go_order() {
        let c = WireConfiguration::from_crd(&k8slice_configuration()).unwrap();
        assert_go_bytes(&c, K8SLICE_CONFIGURATION);
    }

    #[test]
    fn service_configuration_in_go_order() {
        let c = WireConfiguration::from_crd(&service_configuration()).unwrap();
        assert_go_bytes(&c, SERVICE_CONFIGURATION);
    }

    #[test]
    fn transaction_in_go_order() {
        let t = WireTransaction {
            transaction_id: "9f0c-1".into(),
            flavor_id: "fluidos.eu-k8slice-3f9a".into(),
            configuration: Some(WireConfiguration::from_crd(&k8slice_configuration()).unwrap()),
            buyer: fluidos_api::rear::WireNodeIdentity {
                id: "b1".into(),
                ip: "127.0.0.1:3005".into(),
                domain: "fluidos.eu".into(),
                additional_information: Some(fluidos_api::rear::WireAdditionalInfo {
                    liqo_id: Some("liqo-b1".into()),
                    kubeconfig: Some("a2NmZw==".into()),
                }),
            },
            cluster_id: "liqo-b1".into(),
            expiration_time: "2025-05-18T11:00:00Z".into(),
        };
        let golden = format!(
            concat!(
                r#"{{"transactionID":"9f0c-1","flavorID":"fluidos.eu-k8slice-3f9a","configuration":{},"#,
                r#""buyer":{{"ID":"b1","IP":"127.0.0.1:3005","domain":"fluidos.eu","#,
                r#""additionalInformation":{{"liqoID":"liqo-b1","kubeconfig":"a2NmZw=="}}}},"#,
                r#""clusterID":"liqo-b1","expirationTime":"2025-05-18T11:00:00Z"}}"#
            ),
            K8SLICE_CONFIGURATION
        );
        assert_go_bytes(&t, &golden);
    }

    #[test]
    fn contract_in_go_order() {
        let spec = ContractSpec {
            flavor: EmbeddedFlavor {
                api_version: Some("nodecore.fluidos.eu/v1alpha1".into()),
                kind: Some("Flavor".into()),
                metadata: EmbeddedObjectMeta {
                    name: Some("fluidos.eu-service-1a2b".into()),
                    namespace: Some("fluidos".into()),
                    ..Default::default()
                },
                spec: service_spec(),
                status: None,
            },
            transaction_id: "9f0c-1".into(),
            configuration: Some(service_configuration()),
            buyer: NodeIdentity {
                domain: "fluidos.eu".into(),
                node_id: "b1".into(),
                ip: "127.0.0.1:3005".into(),
                additional_information: Some(NodeIdentityAdditionalInfo {
                    liqo_id: Some("liqo-b1".into()),
                }),
            },
            buyer_cluster_id: "liqo-b1".into(),
            seller: owner(),
            peering_target_credentials: LiqoCredentials {
                liqo_id: "liqo-p".into(),
                kubeconfig: "a2NmZw==".into(),
            },
            expiration_time: Some("2026-05-18T10:00:00Z".into()),
            extra_information: None,
            network_requests: None,
            ingress_telemetry_endpoint: None,
        };
        let w = WireContract::from_crd("contract-x", &spec, "2025-05-18T10:00:00Z".into()).unwrap();
        let golden = format!(
            concat!(
                r#"{{"contractID":"contract-x","transactionID":"9f0c-1","#,
                r#""flavor":{{"flavorID":"fluidos.eu-service-1a2b","providerID":"prov",{}"#,
                r#","networkPropertyType":"networkProperty","timestamp":"2025-05-18T10:00:00Z","#,
                r#""location":{{"latitude":"45","longitude":"7","altitude":"Italy","city":"Turin","additionalNotes":"None"}},"#,
                r#""price":{{"amount":"1","currency":"EUR","period":"hourly"}},"#,
                r#""owner":{{"ID":"prov","IP":"127.0.0.1:3004","domain":"fluidos.eu"}},"availability":true}},"#,
                r#""buyerID":{{"ID":"b1","IP":"127.0.0.1:3005","domain":"fluidos.eu","additionalInformation":{{"liqoID":"liqo-b1"}}}},"#,
                r#""buyerClusterID":"liqo-b1","#,
                r#""seller":{{"ID":"prov","IP":"127.0.0.1:3004","domain":"fluidos.eu"}},"#,
                r#""peeringTargetCredentials":{{"clusterID":"liqo-p","kubeconfig":"a2NmZw=="}},"#,
                r#""expirationTime":"2026-05-18T10:00:00Z","configuration":{}}}"#
            ),
            SERVICE_TYPE, SERVICE_CONFIGURATION
        );
        assert_go_bytes(&w, &golden);
    }
}

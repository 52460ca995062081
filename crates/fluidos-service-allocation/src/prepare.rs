//! From a Contract and its ServiceBlueprint to the objects to create: every
//! check is made here, before anything is applied (pure but for randomness).

use fluidos_api::common::HostingPolicy;
use fluidos_api::configuration::ConfigurationData;
use fluidos_api::flavor::{FlavorTypeData, ServiceFlavor};
use fluidos_api::{Contract, ServiceBlueprint};
use fluidos_blueprint::{InstantiateError, RandomSource, ServiceInstance};
use serde_json::Value;

/// Label the LRM puts on a Service Flavor: the name of its ServiceBlueprint.
pub const BLUEPRINT_LABEL: &str = "nodecore.fluidos.eu/service-blueprint";

/// Why a Service contract cannot be instantiated; the Allocation ends in `Error` with this text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrepareError {
    /// The contract's flavor cannot be decoded.
    #[error("Error when parsing Flavor: {0}")]
    Flavor(String),
    /// The contract's configuration cannot be decoded.
    #[error("Error when parsing the Contract's configuration: {0}")]
    Configuration(String),
    /// The configuration does not satisfy the flavor's `configurationTemplate`.
    #[error("configurationData does not match the flavor's configurationTemplate: {0}")]
    Schema(String),
    /// The blueprint is gone.
    #[error("ServiceBlueprint {0} not found")]
    NoBlueprint(String),
    /// Rendering did not finish in time (the engine loops on some malformed
    /// templates, e.g. an unterminated `{{` action); the reconcile is not held.
    #[error(
        "Error when instantiating ServiceBlueprint {0}: rendering did not finish within {1} s (is a template action left unterminated?)"
    )]
    RenderTimeout(String, u64),
    /// Rendering panicked.
    #[error("Error when instantiating ServiceBlueprint {0}: rendering failed: {1}")]
    RenderPanicked(String, String),
    /// The Contract's name cannot name the service namespace (and label
    /// what is in it): over 63 characters, or not a DNS label.
    #[error(
        "the Contract's name {0} cannot name the service namespace: a namespace name (and a label value) is a DNS label of at most 63 characters"
    )]
    ContractName(String),
    /// Rendering or validating the templates failed.
    #[error("Error when instantiating ServiceBlueprint {blueprint}: {source}")]
    Instantiate {
        /// The blueprint.
        blueprint: String,
        /// What failed.
        #[source]
        source: Box<InstantiateError>,
    },
}

/// A DNS-1123 label: at most 63 lower-case letters, digits and `-`,
/// starting and ending with a letter or digit (a namespace name).
fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len())
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// The Service payload of a contract's flavor, or `None` for another type.
pub fn service_flavor(contract: &Contract) -> Result<Option<ServiceFlavor>, PrepareError> {
    if contract.spec.flavor.spec.flavor_type.identifier()
        != Some(fluidos_api::FlavorTypeIdentifier::Service)
    {
        return Ok(None);
    }
    match contract.spec.flavor.spec.flavor_type.parse() {
        Ok(FlavorTypeData::Service(s)) => Ok(Some(s)),
        Ok(FlavorTypeData::K8Slice(_)) => Ok(None),
        Err(e) => Err(PrepareError::Flavor(e.to_string())),
    }
}

/// The blueprint named on the contract's flavor (label set by the LRM).
pub fn blueprint_name(contract: &Contract) -> Option<&str> {
    contract
        .spec
        .flavor
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(BLUEPRINT_LABEL))
        .map(String::as_str)
}

/// The contract's `configurationData` (`{}` when it has none, as RESERVE validated).
pub fn configuration_data(contract: &Contract) -> Result<Value, PrepareError> {
    match &contract.spec.configuration {
        None => Ok(Value::Object(serde_json::Map::new())),
        Some(c) => match c.parse("spec.configuration") {
            Ok(ConfigurationData::Service(s)) => Ok(s.configuration_data),
            Ok(_) => Err(PrepareError::Configuration(format!(
                "a {} configuration on a Service contract",
                c.type_
            ))),
            Err(e) => Err(PrepareError::Configuration(e.to_string())),
        },
    }
}

/// Where the buyer asked the service to run: the configuration's
/// `hostingPolicy`, else the sold flavor's first policy (the blueprint's
/// at the sale; the buyer reads the same, see
/// `fluidos_api::service_delivery::hosting_policy`), else the blueprint's
/// first, else `Provider` (the Go node's `ForgeHostingPolicyFromContract`).
pub fn hosting_policy(contract: &Contract, blueprint: Option<&ServiceBlueprint>) -> HostingPolicy {
    let asked = contract
        .spec
        .configuration
        .as_ref()
        .and_then(|c| c.parse("spec.configuration").ok())
        .and_then(|c| match c {
            ConfigurationData::Service(s) => s.hosting_policy,
            ConfigurationData::K8Slice(_) | ConfigurationData::Unparsed(_) => None,
        });
    let sold = match contract.spec.flavor.spec.flavor_type.parse() {
        Ok(FlavorTypeData::Service(s)) => s.hosting_policies.first().copied(),
        _ => None,
    };
    asked
        .or(sold)
        .or_else(|| blueprint.and_then(|b| b.spec.hosting_policies.first().copied()))
        .unwrap_or(HostingPolicy::Provider)
}

/// Checks `data` against the flavor's JSON Schema (every violation named).
pub fn check_schema(schema: &Value, data: &Value) -> Result<(), PrepareError> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| PrepareError::Schema(format!("the schema itself is invalid: {e}")))?;
    let errors: Vec<String> = validator
        .iter_errors(data)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(PrepareError::Schema(errors.join("; ")))
    }
}

/// Everything a Service contract creates, checked: flavor, configuration
/// against the flavor's schema, templates rendered and validated, the
/// credentials Secret built. Nothing is applied when this fails.
pub fn prepare(
    contract: &Contract,
    flavor: &ServiceFlavor,
    blueprint: Option<&ServiceBlueprint>,
    random: impl RandomSource + 'static,
) -> Result<ServiceInstance, PrepareError> {
    let data = configuration_data(contract)?;
    check_schema(&flavor.configuration_template, &data)?;
    let Some(blueprint) = blueprint else {
        return Err(PrepareError::NoBlueprint(
            blueprint_name(contract).unwrap_or(&flavor.name).to_owned(),
        ));
    };
    let name = contract.metadata.name.as_deref().unwrap_or_default();
    if !is_dns_label(name) {
        return Err(PrepareError::ContractName(name.to_owned()));
    }
    fluidos_blueprint::instantiate(
        &blueprint.spec.templates,
        &flavor.category,
        &data,
        name,
        random,
    )
    .map_err(|source| PrepareError::Instantiate {
        blueprint: blueprint.metadata.name.clone().unwrap_or_default(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fluidos_blueprint::RepeatingBytes;
    use serde_json::json;

    fn contract(config: Option<Value>, labelled: bool) -> Contract {
        let labels = if labelled {
            json!({BLUEPRINT_LABEL: "db-mysql"})
        } else {
            json!({})
        };
        let mut c = json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "contract-x", "namespace": "fluidos"},
            "spec": {
                "flavor": {"metadata": {"name": "f", "labels": labels}, "spec": {
                    "flavorType": {"typeIdentifier": "Service", "typeData": {
                        "name": "db", "description": "d", "category": "database", "tags": [],
                        "hostingPolicies": ["Provider"],
                        "configurationTemplate": {"type": "object",
                            "properties": {"username": {"type": "string"}, "password": {"type": "string"}, "database": {"type": "string"}},
                            "required": ["username", "password", "database"]}}},
                    "owner": {"domain": "d", "nodeID": "p", "ip": "i"}, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                "buyerClusterID": "b", "seller": {"domain": "d", "nodeID": "p", "ip": "i"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}});
        if let Some(config) = config {
            c["spec"]["configuration"] =
                json!({"type": "Service", "data": {"configurationData": config}});
        }
        serde_json::from_value(c).unwrap()
    }

    fn blueprint(templates: Value) -> ServiceBlueprint {
        serde_json::from_value(
            json!({"apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "ServiceBlueprint",
            "metadata": {"name": "db-mysql", "namespace": "fluidos"},
            "spec": {"name": "db", "description": "d", "category": "database", "tags": [],
                "hostingPolicies": ["Provider"], "templates": templates}}),
        )
        .unwrap()
    }

    fn good() -> Value {
        json!({"username": "admin", "password": "admin", "database": "mydb"})
    }

    fn run(c: &Contract, bp: Option<&ServiceBlueprint>) -> Result<ServiceInstance, PrepareError> {
        let f = service_flavor(c).unwrap().unwrap();
        prepare(c, &f, bp, RepeatingBytes::new([7]))
    }

    #[test]
    fn a_good_contract_prepares_the_namespaced_objects() {
        let c = contract(Some(good()), true);
        assert_eq!(blueprint_name(&c), Some("db-mysql"));
        let bp = blueprint(
            json!([{"name": "secret", "serviceData": {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db-credentials"}, "stringData": {"password": "{{ .password }}"}}}]),
        );
        let i = run(&c, Some(&bp)).unwrap();
        assert_eq!(i.namespace, "contract-x");
        assert_eq!(i.objects[0].object["stringData"]["password"], "admin");
        assert_eq!(i.credentials_secret["stringData"]["database"], "mydb");
    }

    #[test]
    fn hosting_policy_is_the_buyers_else_the_flavors_else_the_blueprints_first_else_provider() {
        let mut bp = blueprint(json!([]));
        bp.spec.hosting_policies = vec![HostingPolicy::Consumer, HostingPolicy::Provider];
        // The sold flavor's first policy (Provider), as the buyer reads it.
        let sold = contract(Some(good()), true);
        assert_eq!(hosting_policy(&sold, Some(&bp)), HostingPolicy::Provider);
        // A flavor listing none: the blueprint's.
        let mut plain = sold.clone();
        plain.spec.flavor.spec.flavor_type.type_data["hostingPolicies"] = json!([]);
        assert_eq!(hosting_policy(&plain, Some(&bp)), HostingPolicy::Consumer);
        assert_eq!(hosting_policy(&plain, None), HostingPolicy::Provider);
        bp.spec.hosting_policies.clear();
        assert_eq!(hosting_policy(&plain, Some(&bp)), HostingPolicy::Provider);
        let mut asked = plain.clone();
        asked.spec.configuration = serde_json::from_value(json!({"type": "Service",
            "data": {"hostingPolicy": "Shared", "configurationData": good()}}))
        .unwrap();
        assert_eq!(hosting_policy(&asked, Some(&bp)), HostingPolicy::Shared);
    }

    #[test]
    fn every_failure_is_named_before_anything_exists() {
        let bp = blueprint(
            json!([{"name": "ns", "serviceData": {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "x"}}}]),
        );
        // Configuration failing the schema.
        let e = run(&contract(Some(json!({"username": "a"})), true), Some(&bp)).unwrap_err();
        assert!(matches!(e, PrepareError::Schema(_)), "{e}");
        assert!(e.to_string().contains("password"), "{e}");
        // No configuration at all: {} fails the database schema too.
        assert!(matches!(
            run(&contract(None, true), Some(&bp)).unwrap_err(),
            PrepareError::Schema(_)
        ));
        // Blueprint gone.
        assert_eq!(
            run(&contract(Some(good()), true), None)
                .unwrap_err()
                .to_string(),
            "ServiceBlueprint db-mysql not found"
        );
        // Forbidden kind.
        let e = run(&contract(Some(good()), true), Some(&bp)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("Error when instantiating ServiceBlueprint db-mysql: "),
            "{e}"
        );
        assert!(e.to_string().contains("Namespace"), "{e}");
        // Template error: named with its template.
        let broken = blueprint(
            json!([{"name": "broken", "serviceData": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"k": "{{ .password | nosuchfunction }}"}}}]),
        );
        let e = run(&contract(Some(good()), true), Some(&broken)).unwrap_err();
        assert!(e.to_string().contains("broken"), "{e}");
        // A Contract name that cannot name a namespace (a long domain).
        let mut long = contract(Some(good()), true);
        long.metadata.name = Some(format!("contract-{}-service-1a2b-3c4d", "d".repeat(50)));
        let e = run(&long, Some(&bp)).unwrap_err();
        assert!(matches!(e, PrepareError::ContractName(_)), "{e}");
        assert!(is_dns_label("contract-fluidos-eu-service-1a2b-3c4d"));
        assert!(!is_dns_label("Contract-x") && !is_dns_label("x-") && !is_dns_label(""));
    }

    #[test]
    fn other_flavor_types_are_not_services() {
        let mut c = contract(Some(good()), true);
        c.spec.flavor.spec.flavor_type.type_identifier = "K8Slice".into();
        assert_eq!(service_flavor(&c), Ok(None));
    }
}

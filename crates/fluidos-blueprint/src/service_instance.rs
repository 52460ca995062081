//! Everything a Service purchase creates in the provider cluster, computed without I/O.

use fluidos_api::service_blueprint::ServiceTemplate;
use serde_json::{Map, Value, json};

use crate::random::RandomSource;
use crate::render::{RenderError, RenderedObject, render};
use crate::validate::{
    CREDENTIALS_LABEL, ValidationError, bind_to_contract, is_endpoint, validate_objects,
};

/// Category whose credentials Secret carries `endpoints`, `username`, `password`, `database`.
pub const DATABASE: &str = "database";
/// Category whose credentials Secret carries `endpoints`, `username`, `password`.
pub const MESSAGE_QUEUE: &str = "message-queue";

/// The configuration keys copied into the credentials Secret of a built-in category.
pub fn credential_keys(category: &str) -> Option<&'static [&'static str]> {
    match category {
        DATABASE => Some(&["username", "password", "database"]),
        MESSAGE_QUEUE => Some(&["username", "password"]),
        _ => None,
    }
}

/// The objects of one Service purchase, ready to create in order.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceInstance {
    /// The namespace everything lives in: the contract name, as on the Go node.
    pub namespace: String,
    /// The rendered templates, validated, in the namespace, labelled with the contract.
    pub objects: Vec<RenderedObject>,
    /// `<service>.<namespace>.svc.cluster.local:<port>` for each port of the endpoint Service, comma-joined.
    pub endpoints: String,
    /// The `credentials-<contract>` Secret the buyer reads.
    pub credentials_secret: Value,
}

/// Why a Service purchase cannot be instantiated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InstantiateError {
    /// The templates do not render.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A rendered object must not be created.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// The credentials Secret cannot be built from the configuration.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
}

/// Renders, validates and binds a blueprint's templates for `contract`, and
/// derives the endpoints and the credentials Secret from them (§5.4 steps 4–7).
///
/// `configuration` is the contract's `configurationData`. For a contract
/// that has none, pass an empty object, as upstream's RESERVE validates `{}`
/// in that case (§8.2 bug 4): the templates then see no keys and a built-in
/// category fails with [`CredentialsError::MissingKey`] — where the Go node
/// panics (§8.2 bugs 21, 22).
///
/// Creating the objects is the caller's; the Go node `Create`s them one by
/// one, so anything [`validate_objects`] refuses would otherwise fail the
/// allocation halfway, after the objects before it exist.
pub fn instantiate(
    templates: &[ServiceTemplate],
    category: &str,
    configuration: &Value,
    contract: &str,
    random: impl RandomSource + 'static,
) -> Result<ServiceInstance, InstantiateError> {
    let mut objects = render(templates, configuration, random)?;
    validate_objects(&objects, contract)?;
    bind_to_contract(&mut objects, contract);
    let endpoints = endpoints(&objects, contract);
    let credentials_secret = credentials_secret(contract, category, configuration, &endpoints)?;
    Ok(ServiceInstance {
        namespace: contract.to_owned(),
        objects,
        endpoints,
        credentials_secret,
    })
}

/// The endpoint Service: the **last** `v1` Service labelled
/// [`crate::ENDPOINT_LABEL`]` = "true"`, as on the Go node.
pub fn endpoint_service(objects: &[RenderedObject]) -> Option<&RenderedObject> {
    objects.iter().rev().find(|o| is_endpoint(o))
}

/// `<name>.<namespace>.svc.cluster.local:<port>` for every port of the
/// endpoint Service, comma-joined; empty when there is none.
pub fn endpoints(objects: &[RenderedObject], namespace: &str) -> String {
    let Some(service) = endpoint_service(objects) else {
        return String::new();
    };
    let name = service.name().unwrap_or_default();
    service
        .object
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| p.get("port").and_then(Value::as_u64))
                .map(|port| format!("{name}.{namespace}.svc.cluster.local:{port}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Why the credentials Secret cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// `configurationData` is not an object.
    #[error("configurationData must be a JSON object")]
    ConfigurationNotObject,
    /// A key the category's Secret needs is absent.
    #[error("configurationData has no {key:?}, which the {category} credentials Secret needs")]
    MissingKey {
        /// The category.
        category: String,
        /// The key.
        key: &'static str,
    },
    /// A key the category's Secret needs is not a string.
    #[error("configurationData.{key} must be a string for the {category} credentials Secret")]
    NotAString {
        /// The category.
        category: String,
        /// The key.
        key: &'static str,
    },
}

/// The Secret `credentials-<contract>` in the contract's namespace: type
/// `Opaque`, label [`CREDENTIALS_LABEL`]` = "true"`, `stringData` with
/// `endpoints` and, for a built-in category, exactly its
/// [`credential_keys`] taken from `configuration`.
///
/// The Go node type-asserts each value to a string and panics when one is
/// missing or not a string (§8.2 bug 22); here that is a [`CredentialsError`].
/// For a category of our own (a blueprint with a `configurationSchema`;
/// the Go node knows none and fails the allocation), the Secret carries
/// `endpoints` and every top-level string of `configuration` whose key is
/// a valid Secret key.
pub fn credentials_secret(
    contract: &str,
    category: &str,
    configuration: &Value,
    endpoints: &str,
) -> Result<Value, CredentialsError> {
    let config = configuration
        .as_object()
        .ok_or(CredentialsError::ConfigurationNotObject)?;
    let mut data = Map::new();
    data.insert("endpoints".to_owned(), Value::String(endpoints.to_owned()));
    match credential_keys(category) {
        Some(keys) => {
            for &key in keys {
                let value = match config.get(key) {
                    None => {
                        return Err(CredentialsError::MissingKey {
                            category: category.to_owned(),
                            key,
                        });
                    }
                    Some(Value::String(s)) => s.clone(),
                    Some(_) => {
                        return Err(CredentialsError::NotAString {
                            category: category.to_owned(),
                            key,
                        });
                    }
                };
                data.insert(key.to_owned(), Value::String(value));
            }
        }
        None => {
            for (key, value) in config {
                if let Value::String(s) = value
                    && key != "endpoints"
                    && is_secret_key(key)
                {
                    data.insert(key.clone(), Value::String(s.clone()));
                }
            }
        }
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": fluidos_api::naming::credentials_secret_name(contract),
            "namespace": contract,
            "labels": {CREDENTIALS_LABEL: "true"},
        },
        "type": "Opaque",
        "stringData": data,
    }))
}

/// A valid Secret data key: `[-._a-zA-Z0-9]+`, at most 253 characters.
pub fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::RepeatingBytes;
    use crate::validate::ENDPOINT_LABEL;

    fn service(template: &str, name: &str, endpoint: &str, ports: &[u64]) -> RenderedObject {
        let ports: Vec<Value> = ports.iter().map(|p| json!({"port": p})).collect();
        RenderedObject {
            template: template.to_owned(),
            object: json!({"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": name, "labels": {ENDPOINT_LABEL: endpoint}},
                           "spec": {"ports": ports}}),
        }
    }

    #[test]
    fn endpoints_list_every_port_of_the_last_labelled_service() {
        let objects = vec![
            service("a", "first", "true", &[1]),
            service("b", "mq", "true", &[5672, 15672]),
            service("c", "other", "false", &[2]),
        ];
        assert_eq!(endpoint_service(&objects).unwrap().template, "b");
        assert_eq!(
            endpoints(&objects, "ns"),
            "mq.ns.svc.cluster.local:5672,mq.ns.svc.cluster.local:15672"
        );
        assert_eq!(endpoints(&objects[2..], "ns"), "");
    }

    #[test]
    fn database_credentials_have_exactly_the_go_keys() {
        let secret = credentials_secret(
            "c1",
            DATABASE,
            &json!({"username": "u", "password": "p", "database": "d", "extra": "x"}),
            "e:1",
        )
        .unwrap();
        assert_eq!(
            secret,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "credentials-c1", "namespace": "c1",
                                "labels": {"nodecore.fluidos.eu/flavor-service-credentials": "true"}},
                   "type": "Opaque",
                   "stringData": {"endpoints": "e:1", "username": "u", "password": "p", "database": "d"}})
        );
    }

    #[test]
    fn message_queue_credentials_have_no_database() {
        let secret = credentials_secret(
            "c1",
            MESSAGE_QUEUE,
            &json!({"username": "u", "password": "p", "database": "d"}),
            "",
        )
        .unwrap();
        assert_eq!(
            secret["stringData"],
            json!({"endpoints": "", "username": "u", "password": "p"})
        );
    }

    #[test]
    fn missing_or_non_string_credentials_are_errors_not_panics() {
        let err = credentials_secret(
            "c",
            DATABASE,
            &json!({"username": "u", "password": "p"}),
            "",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "configurationData has no \"database\", which the database credentials Secret needs"
        );
        let err = credentials_secret(
            "c",
            MESSAGE_QUEUE,
            &json!({"username": "u", "password": 1234}),
            "",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "configurationData.password must be a string for the message-queue credentials Secret"
        );
    }

    #[test]
    fn own_categories_carry_every_string_with_a_valid_key() {
        let secret = credentials_secret(
            "c",
            "cache",
            &json!({"token": "t", "port": 6379, "bad key": "x", "endpoints": "forged"}),
            "redis.c.svc.cluster.local:6379",
        )
        .unwrap();
        assert_eq!(
            secret["stringData"],
            json!({"endpoints": "redis.c.svc.cluster.local:6379", "token": "t"})
        );
    }

    #[test]
    fn instantiate_stops_at_the_first_failing_step() {
        let template = |data: Value| ServiceTemplate {
            name: "t".to_owned(),
            description: None,
            service_data: data,
        };
        let err = instantiate(
            &[template(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
            )],
            DATABASE,
            &json!({}),
            "c",
            RepeatingBytes::new([1]),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            InstantiateError::Validation(ValidationError::ClusterScoped { .. })
        ));
        let err = instantiate(
            &[template(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
            )],
            DATABASE,
            &json!({}),
            "c",
            RepeatingBytes::new([1]),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            InstantiateError::Credentials(CredentialsError::MissingKey { .. })
        ));
    }
}

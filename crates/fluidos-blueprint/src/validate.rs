//! Checks on rendered objects before the provider creates them, and binding them to a contract.

use serde_json::{Map, Value};

use crate::render::RenderedObject;

/// Label put on every object created for a contract (value: the contract name).
pub const CONTRACT_LABEL: &str = "reservation.fluidos.eu/contract";
/// Label (value `"true"`) a blueprint author puts on the Service that exposes the service.
pub const ENDPOINT_LABEL: &str = "nodecore.fluidos.eu/flavor-service-endpoint";
/// Label (value `"true"`) on the credentials Secret handed to the buyer.
pub const CREDENTIALS_LABEL: &str = "nodecore.fluidos.eu/flavor-service-credentials";

/// The `(API group, kind)`s a blueprint may create (`""` is the core group).
///
/// The namespaced kinds the Go node's rear-manager ClusterRole lets it
/// create, so a blueprint that works there works here, less `Event` (not
/// something a service deploys). Roles and RoleBindings stay out: they
/// would let a blueprint grant rights in the namespace.
pub const ALLOWED_KINDS: [(&str, &str); 12] = [
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "Pod"),
    ("", "PersistentVolumeClaim"),
    ("", "ServiceAccount"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "Ingress"),
];

/// Well-known cluster-scoped kinds, refused with a message that says why.
///
/// Everything outside [`ALLOWED_KINDS`] is refused anyway; this list only
/// picks the clearer message. On the Go node such a template fails at
/// creation (§8.2 bug 22) after the objects before it were created.
pub const CLUSTER_SCOPED_KINDS: [&str; 18] = [
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "CSIDriver",
    "VolumeAttachment",
    "CertificateSigningRequest",
];

/// Why rendered objects must not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// `apiVersion` or `kind` is missing or not a string.
    #[error("template {template:?}: the object has no {field}")]
    MissingField {
        /// Template name.
        template: String,
        /// `apiVersion` or `kind`.
        field: &'static str,
    },
    /// The kind lives outside namespaces.
    #[error(
        "template {template:?}: kind {kind} is cluster-scoped; a blueprint may only create \
         objects in the contract's namespace"
    )]
    ClusterScoped {
        /// Template name.
        template: String,
        /// The kind.
        kind: String,
    },
    /// The kind is not in [`ALLOWED_KINDS`].
    #[error(
        "template {template:?}: kind {kind} of {api_version} is not one a blueprint may create \
         (allowed: {allowed})",
        allowed = allowed_list()
    )]
    KindNotAllowed {
        /// Template name.
        template: String,
        /// The `apiVersion`.
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// `metadata` or one of its fields has the wrong shape.
    #[error("template {template:?}: {field} must be {expected}")]
    InvalidMetadata {
        /// Template name.
        template: String,
        /// The field, e.g. `metadata.labels`.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// Two templates create the same object; the second creation would fail.
    #[error("templates {first:?} and {second:?} both create {kind} {name:?}")]
    Duplicate {
        /// The earlier template.
        first: String,
        /// The later template.
        second: String,
        /// The kind.
        kind: String,
        /// The object name.
        name: String,
    },
    /// The template creates the Secret the node itself creates for the buyer.
    #[error(
        "template {template:?}: Secret {name:?} is the credentials Secret the node creates \
         for the contract"
    )]
    ReservedName {
        /// Template name.
        template: String,
        /// The Secret name.
        name: String,
    },
    /// The endpoint Service has no fixed name or an unusable port.
    #[error("template {template:?}: endpoint Service: {problem}")]
    InvalidEndpoint {
        /// Template name.
        template: String,
        /// What is wrong.
        problem: String,
    },
}

fn allowed_list() -> String {
    ALLOWED_KINDS
        .iter()
        .map(|(group, kind)| {
            if group.is_empty() {
                (*kind).to_owned()
            } else {
                format!("{kind}.{group}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group `""`).
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Checks that the objects may be created for `contract`: allowed kinds
/// only, well-formed metadata, no object twice, not the credentials
/// Secret's name, and an endpoint Service with a name and valid ports.
pub fn validate_objects(objects: &[RenderedObject], contract: &str) -> Result<(), ValidationError> {
    let credentials = fluidos_api::naming::credentials_secret_name(contract);
    let mut seen: Vec<(&str, &str, &str, &str)> = Vec::new();
    for o in objects {
        let template = || o.template.clone();
        let api_version = o
            .api_version()
            .ok_or_else(|| ValidationError::MissingField {
                template: template(),
                field: "apiVersion",
            })?;
        let kind = o.kind().ok_or_else(|| ValidationError::MissingField {
            template: template(),
            field: "kind",
        })?;
        let group = api_group(api_version);
        if !ALLOWED_KINDS.contains(&(group, kind)) {
            if CLUSTER_SCOPED_KINDS.contains(&kind) {
                return Err(ValidationError::ClusterScoped {
                    template: template(),
                    kind: kind.to_owned(),
                });
            }
            return Err(ValidationError::KindNotAllowed {
                template: template(),
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            });
        }
        check_metadata(o)?;
        if let Some(name) = o.name() {
            if let Some((.., first)) = seen
                .iter()
                .find(|(g, k, n, _)| (*g, *k, *n) == (group, kind, name))
            {
                return Err(ValidationError::Duplicate {
                    first: (*first).to_owned(),
                    second: template(),
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                });
            }
            seen.push((group, kind, name, &o.template));
            if (group, kind) == ("", "Secret") && name == credentials {
                return Err(ValidationError::ReservedName {
                    template: template(),
                    name: name.to_owned(),
                });
            }
        }
        if is_endpoint(o) {
            check_endpoint(o)?;
        }
    }
    Ok(())
}

fn check_metadata(o: &RenderedObject) -> Result<(), ValidationError> {
    let invalid = |field, expected| ValidationError::InvalidMetadata {
        template: o.template.clone(),
        field,
        expected,
    };
    let metadata = o
        .object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("metadata", "an object"))?;
    let named = |key| {
        metadata
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    // generateName alone is refused: objects are applied server-side, which
    // needs the name, and a render applied again after a crash must find
    // the objects of the first one.
    if !named("name") {
        return Err(invalid(
            "metadata.name",
            "a non-empty string (generateName cannot be applied server-side)",
        ));
    }
    if let Some(labels) = metadata.get("labels")
        && !labels
            .as_object()
            .is_some_and(|l| l.values().all(Value::is_string))
    {
        return Err(invalid("metadata.labels", "a map of strings"));
    }
    Ok(())
}

/// A Service labelled [`ENDPOINT_LABEL`]`: "true"`, as the Go node detects it.
pub(crate) fn is_endpoint(o: &RenderedObject) -> bool {
    o.kind() == Some("Service")
        && o.api_version() == Some("v1")
        && o.label(ENDPOINT_LABEL) == Some("true")
}

fn check_endpoint(o: &RenderedObject) -> Result<(), ValidationError> {
    let invalid = |problem: String| ValidationError::InvalidEndpoint {
        template: o.template.clone(),
        problem,
    };
    // The endpoints string names the Service; a generated name is unknown until created.
    if o.name().is_none() {
        return Err(invalid(
            "it needs metadata.name (not generateName)".to_owned(),
        ));
    }
    let ports = o
        .object
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("spec.ports must be a list".to_owned()))?;
    for (i, port) in ports.iter().enumerate() {
        let valid = port
            .get("port")
            .and_then(Value::as_u64)
            .is_some_and(|p| (1..=65535).contains(&p));
        if !valid {
            return Err(invalid(format!(
                "spec.ports[{i}].port must be an integer from 1 to 65535"
            )));
        }
    }
    Ok(())
}

/// Puts every object in the contract's namespace and labels it with the contract.
///
/// As the Go node: the namespace is the contract name and replaces any
/// `metadata.namespace` the template set; [`CONTRACT_LABEL`] is added to
/// (or overwrites in) the template's labels. Expects validated objects.
pub fn bind_to_contract(objects: &mut [RenderedObject], contract: &str) {
    for o in objects {
        let Some(metadata) = o.object.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        metadata.insert("namespace".to_owned(), Value::String(contract.to_owned()));
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(
                CONTRACT_LABEL.to_owned(),
                Value::String(contract.to_owned()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(template: &str, value: Value) -> RenderedObject {
        RenderedObject {
            template: template.to_owned(),
            object: value,
        }
    }

    fn named(template: &str, api_version: &str, kind: &str, name: &str) -> RenderedObject {
        object(
            template,
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}),
        )
    }

    #[test]
    fn allowed_namespaced_kinds_pass() {
        let objects: Vec<RenderedObject> = ALLOWED_KINDS
            .iter()
            .map(|(group, kind)| {
                let api_version = if group.is_empty() {
                    "v1".to_owned()
                } else {
                    format!("{group}/v1")
                };
                named(kind, &api_version, kind, "x")
            })
            .collect();
        validate_objects(&objects, "c").unwrap();
    }

    #[test]
    fn cluster_scoped_kinds_are_refused_by_name() {
        let err = validate_objects(&[named("ns", "v1", "Namespace", "x")], "c").unwrap_err();
        assert_eq!(
            err.to_string(),
            "template \"ns\": kind Namespace is cluster-scoped; a blueprint may only create \
             objects in the contract's namespace"
        );
        let err = validate_objects(
            &[named(
                "admin",
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                "x",
            )],
            "c",
        )
        .unwrap_err();
        assert!(
            matches!(err, ValidationError::ClusterScoped { ref kind, .. } if kind == "ClusterRoleBinding")
        );
    }

    #[test]
    fn kinds_outside_the_allow_list_are_refused() {
        let err = validate_objects(
            &[named("role", "rbac.authorization.k8s.io/v1", "Role", "x")],
            "c",
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with(
                "template \"role\": kind Role of rbac.authorization.k8s.io/v1 is not one a \
                 blueprint may create (allowed: ConfigMap, Secret, Service,"
            ),
            "{message}"
        );
        // The group matters, not only the kind.
        let err = validate_objects(&[named("d", "v1", "Deployment", "x")], "c").unwrap_err();
        assert!(matches!(err, ValidationError::KindNotAllowed { .. }));
    }

    #[test]
    fn objects_need_kind_name_and_string_labels() {
        let err = validate_objects(&[object("t", json!({"apiVersion": "v1"}))], "c").unwrap_err();
        assert_eq!(err.to_string(), "template \"t\": the object has no kind");
        let err = validate_objects(
            &[object(
                "t",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
            )],
            "c",
        )
        .unwrap_err();
        let no_name = "template \"t\": metadata.name must be a non-empty string (generateName cannot be applied server-side)";
        assert_eq!(err.to_string(), no_name);
        let generated = object(
            "t",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"generateName": "s-"}}),
        );
        let err = validate_objects(&[generated], "c").unwrap_err();
        assert_eq!(err.to_string(), no_name);
        let err = validate_objects(
            &[object(
                "t",
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "s", "labels": {"a": 1}}}),
            )],
            "c",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "template \"t\": metadata.labels must be a map of strings"
        );
    }

    #[test]
    fn duplicates_and_the_credentials_name_are_refused() {
        let err = validate_objects(
            &[
                named("a", "v1", "Secret", "s"),
                named("b", "v1", "ConfigMap", "s"),
                named("c", "v1", "Secret", "s"),
            ],
            "contract-x",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "templates \"a\" and \"c\" both create Secret \"s\""
        );
        let err = validate_objects(
            &[named("a", "v1", "Secret", "credentials-contract-x")],
            "contract-x",
        )
        .unwrap_err();
        assert!(matches!(err, ValidationError::ReservedName { .. }));
    }

    #[test]
    fn the_endpoint_service_needs_a_name_and_valid_ports() {
        let service = |metadata: Value, ports: Value| {
            object(
                "svc",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata,
                       "spec": {"ports": ports}}),
            )
        };
        let labels = json!({ENDPOINT_LABEL: "true"});
        let ok = service(
            json!({"name": "s", "labels": labels}),
            json!([{"port": 80}]),
        );
        validate_objects(&[ok], "c").unwrap();
        let err = validate_objects(
            &[service(
                json!({"name": "s", "labels": labels}),
                json!([{"port": "80"}]),
            )],
            "c",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "template \"svc\": endpoint Service: spec.ports[0].port must be an integer from 1 to 65535"
        );
        let err = validate_objects(
            &[service(
                json!({"generateName": "s-", "labels": labels}),
                json!([]),
            )],
            "c",
        )
        .unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
        // Without the label the ports are the API server's business.
        validate_objects(
            &[service(json!({"name": "s"}), json!([{"port": "80"}]))],
            "c",
        )
        .unwrap();
    }

    #[test]
    fn binding_sets_the_namespace_and_adds_the_contract_label() {
        let mut objects = vec![
            object(
                "a",
                json!({"metadata": {"name": "a", "namespace": "elsewhere",
                                            "labels": {"app": "db", CONTRACT_LABEL: "forged"}}}),
            ),
            object("b", json!({"metadata": {"name": "b"}})),
        ];
        bind_to_contract(&mut objects, "contract-x");
        assert_eq!(
            objects[0].object,
            json!({"metadata": {"name": "a", "namespace": "contract-x",
                                "labels": {"app": "db", CONTRACT_LABEL: "contract-x"}}})
        );
        assert_eq!(
            objects[1].object,
            json!({"metadata": {"name": "b", "namespace": "contract-x",
                                "labels": {CONTRACT_LABEL: "contract-x"}}})
        );
    }

    #[test]
    fn api_groups() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(api_group("apps/v1"), "apps");
        assert_eq!(api_group("networking.k8s.io/v1"), "networking.k8s.io");
    }
}

//! The Service flavor a ServiceBlueprint offers (pure: no I/O, unit tested).

use std::collections::BTreeMap;

use fluidos_api::common::{FlavorTypeIdentifier, HostingPolicy};
use fluidos_api::flavor::{FlavorType, ServiceFlavor};
use fluidos_api::service_blueprint::ServiceBlueprint;
use serde_json::{Value, json};

use crate::k8slice::{DesiredFlavor, Publisher};
use crate::names;
use crate::owner::SourceKind;

/// Category with a built-in configuration template (upstream `consts.Database`).
pub const DATABASE: &str = "database";
/// Category with a built-in configuration template (upstream `consts.MessageQueue`).
pub const MESSAGE_QUEUE: &str = "message-queue";

/// The configuration template upstream attaches to a category (fluidos-node.md §5.1–5.2):
/// a JSON Schema draft-07 object whose properties are the credentials the
/// instantiated service is created with. A wire fact: consumers validate
/// their `configurationData` against it.
pub fn builtin_template(category: &str) -> Option<Value> {
    let string = || json!({"type": "string"});
    match category {
        DATABASE => Some(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"username": string(), "password": string(), "database": string()},
            "required": ["username", "password", "database"],
        })),
        MESSAGE_QUEUE => Some(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"username": string(), "password": string()},
            "required": ["username", "password"],
        })),
        _ => None,
    }
}

/// Why a blueprint yields no flavor; becomes the `Ready=False` condition and a Warning event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The category has no built-in template and the blueprint declares no `configurationSchema`.
    UnknownCategory {
        /// The category.
        category: String,
    },
    /// `spec.configurationSchema` does not compile as a JSON Schema.
    InvalidConfigurationSchema {
        /// The compiler's message.
        message: String,
    },
    /// A template's `serviceData` is not a Kubernetes manifest.
    InvalidTemplate {
        /// Position in `spec.templates`.
        index: usize,
        /// Template name.
        name: String,
        /// What is missing.
        missing: Vec<&'static str>,
    },
    /// The blueprint lacks a name or uid (not a stored object).
    MissingMetadata(&'static str),
}

impl Invalid {
    /// Condition/event reason (CamelCase).
    pub fn reason(&self) -> &'static str {
        match self {
            Invalid::UnknownCategory { .. } => "UnknownCategory",
            Invalid::InvalidConfigurationSchema { .. } => "InvalidConfigurationSchema",
            Invalid::InvalidTemplate { .. } => "InvalidTemplate",
            Invalid::MissingMetadata(_) => "MissingMetadata",
        }
    }

    /// Human message saying what to fix.
    pub fn message(&self) -> String {
        match self {
            Invalid::UnknownCategory { category } => format!(
                "category {category:?} has no built-in configuration template (known: {DATABASE}, \
                 {MESSAGE_QUEUE}); declare one in spec.configurationSchema"
            ),
            Invalid::InvalidConfigurationSchema { message } => {
                format!("spec.configurationSchema is not a valid JSON Schema: {message}")
            }
            Invalid::InvalidTemplate {
                index,
                name,
                missing,
            } => format!(
                "spec.templates[{index}] ({name}): serviceData lacks {}",
                missing.join(" and ")
            ),
            Invalid::MissingMetadata(field) => format!("the blueprint has no metadata.{field}"),
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason(), self.message())
    }
}

/// The configuration template of a blueprint: its own `configurationSchema`
/// (any category), else the built-in one of its category.
pub fn configuration_template(bp: &ServiceBlueprint) -> Result<Value, Invalid> {
    match &bp.spec.configuration_schema {
        Some(schema) => {
            jsonschema::validator_for(schema).map_err(|e| Invalid::InvalidConfigurationSchema {
                message: e.to_string(),
            })?;
            Ok(schema.clone())
        }
        None => builtin_template(&bp.spec.category).ok_or_else(|| Invalid::UnknownCategory {
            category: bp.spec.category.clone(),
        }),
    }
}

fn check_templates(bp: &ServiceBlueprint) -> Result<(), Invalid> {
    for (index, t) in bp.spec.templates.iter().enumerate() {
        let present = |k: &str| {
            t.service_data
                .get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        let missing: Vec<&'static str> = ["apiVersion", "kind"]
            .into_iter()
            .filter(|k| !present(k))
            .collect();
        if !missing.is_empty() {
            return Err(Invalid::InvalidTemplate {
                index,
                name: t.name.clone(),
                missing,
            });
        }
    }
    Ok(())
}

/// The `ServiceFlavor` type data of a blueprint, as upstream's
/// `ForgeServiceFlavorFromBlueprint` (empty `hostingPolicies` → `[Provider]`).
pub fn service_flavor(bp: &ServiceBlueprint) -> Result<ServiceFlavor, Invalid> {
    check_templates(bp)?;
    let configuration_template = configuration_template(bp)?;
    let s = &bp.spec;
    Ok(ServiceFlavor {
        name: s.name.clone(),
        description: s.description.clone(),
        category: s.category.clone(),
        tags: s.tags.clone(),
        hosting_policies: if s.hosting_policies.is_empty() {
            vec![HostingPolicy::Provider]
        } else {
            s.hosting_policies.clone()
        },
        configuration_template,
    })
}

/// A blueprint's flavor and the `ServiceFlavor` recorded in its status.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredService {
    /// The flavor object.
    pub flavor: DesiredFlavor,
    /// Its type data, for `status.serviceFlavors`.
    pub service: ServiceFlavor,
}

/// The Service flavor of `bp`, or why there is none.
pub fn build(bp: &ServiceBlueprint, publisher: &Publisher) -> Result<DesiredService, Invalid> {
    let name = bp
        .metadata
        .name
        .as_deref()
        .ok_or(Invalid::MissingMetadata("name"))?;
    let uid = bp
        .metadata
        .uid
        .as_deref()
        .ok_or(Invalid::MissingMetadata("uid"))?;
    let service = service_flavor(bp)?;
    let mut labels = BTreeMap::from([(
        names::MANAGED_BY_LABEL.to_owned(),
        names::MANAGED_BY.to_owned(),
    )]);
    if names::is_label_value(name) {
        labels.insert(names::BLUEPRINT_LABEL.to_owned(), name.to_owned());
    }
    Ok(DesiredService {
        flavor: DesiredFlavor {
            name: names::flavor_name(
                &publisher.identity.domain,
                FlavorTypeIdentifier::Service,
                uid,
            ),
            labels,
            owner: SourceKind::ServiceBlueprint.owner_ref(name, uid),
            spec: publisher.spec(FlavorType::service(&service)),
        },
        service,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LrmConfig;
    use fluidos_api::NodeIdentity;
    use fluidos_api::service_blueprint::{ServiceBlueprintSpec, ServiceTemplate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn publisher() -> Publisher {
        Publisher::new(&LrmConfig::new(NodeIdentity {
            domain: "fluidos.eu".into(),
            node_id: "4ahrqttvng".into(),
            ip: "172.19.0.4:30001".into(),
            additional_information: None,
        }))
        .unwrap()
    }

    fn blueprint(category: &str) -> ServiceBlueprint {
        ServiceBlueprint {
            metadata: ObjectMeta {
                name: Some("db-mysql".into()),
                namespace: Some("fluidos".into()),
                uid: Some("11111111-2222-4333-8444-555555555555".into()),
                ..Default::default()
            },
            spec: ServiceBlueprintSpec {
                name: "db".into(),
                description: "A database service blueprint".into(),
                category: category.into(),
                tags: vec!["database".into(), "mysql".into()],
                hosting_policies: vec![HostingPolicy::Provider, HostingPolicy::Consumer],
                templates: vec![ServiceTemplate {
                    name: "secret".into(),
                    description: None,
                    service_data: json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "db-credentials"}}),
                }],
                configuration_schema: None,
            },
            status: None,
        }
    }

    #[test]
    fn database_flavor_equals_the_reference() {
        let d = build(&blueprint("database"), &publisher()).unwrap();
        // fluidos-node.md §5.1, verbatim.
        let want: Value = serde_json::from_str(
            r##"{"name":"db","description":"A database service blueprint","category":"database",
 "tags":["database","mysql"],"hostingPolicies":["Provider","Consumer"],
 "configurationTemplate":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
   "properties":{"username":{"type":"string"},"password":{"type":"string"},"database":{"type":"string"}},
   "required":["username","password","database"]}}"##,
        )
        .unwrap();
        assert_eq!(d.flavor.spec.flavor_type.type_data, want);
        assert_eq!(d.flavor.spec.flavor_type.type_identifier, "Service");
        assert_eq!(serde_json::to_value(&d.service).unwrap(), want);
        assert_eq!(d.flavor.owner.kind, "ServiceBlueprint");
        assert_eq!(d.flavor.owner.api_version, "nodecore.fluidos.eu/v1alpha1");
        assert!(d.flavor.name.starts_with("fluidos.eu-service-"));
        assert_eq!(d.flavor.labels[names::BLUEPRINT_LABEL], "db-mysql");
        assert_eq!(d.flavor.spec.provider_id, "4ahrqttvng");
        assert!(d.flavor.spec.availability);
    }

    #[test]
    fn message_queue_template_and_default_hosting_policy() {
        let mut bp = blueprint("message-queue");
        bp.spec.hosting_policies.clear();
        let s = service_flavor(&bp).unwrap();
        assert_eq!(s.hosting_policies, vec![HostingPolicy::Provider]);
        assert_eq!(
            s.configuration_template,
            json!({"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
                "properties":{"username":{"type":"string"},"password":{"type":"string"}},
                "required":["username","password"]})
        );
    }

    #[test]
    fn own_schema_serves_any_category() {
        let mut bp = blueprint("object-store");
        assert_eq!(
            service_flavor(&bp).unwrap_err(),
            Invalid::UnknownCategory {
                category: "object-store".into()
            }
        );
        let schema = json!({"type": "object", "properties": {"bucket": {"type": "string"}},
            "required": ["bucket"]});
        bp.spec.configuration_schema = Some(schema.clone());
        assert_eq!(service_flavor(&bp).unwrap().configuration_template, schema);
        // A declared schema also replaces a built-in one.
        let mut db = blueprint("database");
        db.spec.configuration_schema = Some(schema.clone());
        assert_eq!(service_flavor(&db).unwrap().configuration_template, schema);
    }

    #[test]
    fn bad_schema_and_bad_templates_say_why() {
        let mut bp = blueprint("object-store");
        bp.spec.configuration_schema = Some(json!({"type": "no-such-type"}));
        let err = service_flavor(&bp).unwrap_err();
        assert_eq!(err.reason(), "InvalidConfigurationSchema");
        assert!(err.message().contains("configurationSchema"), "{err}");

        let mut bp = blueprint("database");
        bp.spec.templates.push(ServiceTemplate {
            name: "broken".into(),
            description: None,
            service_data: json!({"metadata": {"name": "x"}, "apiVersion": "v1"}),
        });
        let err = service_flavor(&bp).unwrap_err();
        assert_eq!(
            err,
            Invalid::InvalidTemplate {
                index: 1,
                name: "broken".into(),
                missing: vec!["kind"]
            }
        );
        assert_eq!(
            err.message(),
            "spec.templates[1] (broken): serviceData lacks kind"
        );
    }

    #[test]
    fn names_come_from_the_uid() {
        let a = build(&blueprint("database"), &publisher()).unwrap();
        let mut other = blueprint("database");
        other.metadata.uid = Some("another".into());
        let b = build(&other, &publisher()).unwrap();
        assert_ne!(a.flavor.name, b.flavor.name);
        assert_eq!(
            a.flavor.name,
            build(&blueprint("database"), &publisher())
                .unwrap()
                .flavor
                .name
        );
    }
}

//! The two upstream blueprints render to exactly the objects the Go node creates.
//!
//! The blueprints and the configuration are the Go node's samples, read from
//! `../shared/reference/fluidos-samples` (beside the workspace; not ours to
//! copy). Without that folder the tests print `SKIP: ...` and pass, except in
//! CI, where they fail (`fluidos_testenv::skip`). The
//! expected objects in `tests/golden/*.yaml` were written by hand from the Go
//! code's documented behaviour; each file says how.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::path::{Path, PathBuf};

use fluidos_api::ServiceBlueprint;
use fluidos_blueprint::{DATABASE, MESSAGE_QUEUE, RepeatingBytes, ServiceInstance, instantiate};
use serde::Deserialize;
use serde_json::{Value, json};

fn samples_dir() -> Option<PathBuf> {
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/fluidos-samples");
    dir.is_dir().then_some(dir)
}

fn read_yaml(path: &Path) -> serde_yaml::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blueprint(samples: &Path, file: &str) -> ServiceBlueprint {
    serde_yaml::from_value(read_yaml(&samples.join(file))).unwrap()
}

/// The documents of a golden file, as JSON.
fn golden(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// What the provider creates, in order: the rendered objects, then the credentials Secret.
fn created(instance: &ServiceInstance) -> Vec<Value> {
    instance
        .objects
        .iter()
        .map(|o| o.object.clone())
        .chain([instance.credentials_secret.clone()])
        .collect()
}

fn assert_same(actual: &[Value], expected: &[Value]) {
    assert_eq!(actual.len(), expected.len(), "number of objects");
    for (a, e) in actual.iter().zip(expected) {
        assert_eq!(
            a,
            e,
            "\nrendered:\n{}\nexpected:\n{}",
            serde_yaml::to_string(a).unwrap(),
            serde_yaml::to_string(e).unwrap()
        );
    }
}

#[test]
fn database_blueprint_renders_as_on_the_go_node() {
    let Some(samples) = samples_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/fluidos-samples is absent; this test renders the Go node's \
             service-blueprint-db.yaml from there",
        );
        return;
    };
    let bp = blueprint(&samples, "service-blueprint-db.yaml");
    assert_eq!(bp.spec.category, DATABASE);
    let reservation = read_yaml(&samples.join("reservation-service.yaml"));
    let configuration: Value =
        serde_json::to_value(&reservation["spec"]["configuration"]["data"]["configurationData"])
            .unwrap();
    assert_eq!(
        configuration,
        json!({"username": "admin", "password": "admin", "database": "mydb"})
    );
    let contract = fluidos_api::naming::contract_name("fluidos.eu-service-3f2a");
    assert_eq!(contract, "contract-fluidos-eu-service-3f2a-65e4");

    let instance = instantiate(
        &bp.spec.templates,
        &bp.spec.category,
        &configuration,
        &contract,
        RepeatingBytes::new([42]),
    )
    .unwrap();

    assert_eq!(instance.namespace, contract);
    assert_eq!(
        instance.endpoints,
        "db-service.contract-fluidos-eu-service-3f2a-65e4.svc.cluster.local:3306"
    );
    let templates: Vec<&str> = instance
        .objects
        .iter()
        .map(|o| o.template.as_str())
        .collect();
    assert_eq!(templates, ["secret", "service", "deployment"]);
    assert_same(&created(&instance), &golden("db-mysql.yaml"));
}

#[test]
fn message_queue_blueprint_renders_as_on_the_go_node() {
    let Some(samples) = samples_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/fluidos-samples is absent; this test renders the Go node's \
             service-blueprint-mq.yaml from there",
        );
        return;
    };
    let bp = blueprint(&samples, "service-blueprint-mq.yaml");
    assert_eq!(bp.spec.category, MESSAGE_QUEUE);
    // solver-service-mq.yaml carries no configuration: the Solver sends the
    // category default (fluidos-node.md §5.2).
    let solver = read_yaml(&samples.join("solver-service-mq.yaml"));
    assert_eq!(
        solver["spec"]["selector"]["filters"]["categoryFilter"]["data"]["value"],
        serde_yaml::Value::from(MESSAGE_QUEUE)
    );
    let configuration = json!({"username": "admin", "password": "adminpassword"});
    let contract = fluidos_api::naming::contract_name("fluidos.eu-service-9c41");
    assert_eq!(contract, "contract-fluidos-eu-service-9c41-bb16");

    let instance = instantiate(
        &bp.spec.templates,
        &bp.spec.category,
        &configuration,
        &contract,
        RepeatingBytes::new([42]),
    )
    .unwrap();

    assert_same(&created(&instance), &golden("mq-rabbitmq.yaml"));
}

/// The escaping decision on a real blueprint: the password MySQL is
/// configured with (rendered `db-credentials`) is the one the buyer is told
/// (`credentials-<contract>`). On the Go node the first would read
/// `p&amp;ss&#34;w&lt;o&gt;r&#39;d&#43;1` and the second `p&ss"w<o>r'd+1`.
#[test]
fn the_service_and_the_buyer_see_the_same_password() {
    let Some(samples) = samples_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference/fluidos-samples is absent; this test renders the Go node's \
             service-blueprint-db.yaml from there",
        );
        return;
    };
    let bp = blueprint(&samples, "service-blueprint-db.yaml");
    let password = r#"p&ss"w<o>r'd+1\"#;
    let configuration = json!({"username": "admin", "password": password, "database": "mydb"});
    let instance = instantiate(
        &bp.spec.templates,
        &bp.spec.category,
        &configuration,
        "contract-x",
        RepeatingBytes::new([42]),
    )
    .unwrap();
    let rendered = &instance.objects[0];
    assert_eq!(rendered.name(), Some("db-credentials"));
    assert_eq!(rendered.object["stringData"]["password"], password);
    assert_eq!(
        instance.credentials_secret["stringData"]["password"],
        password
    );
}

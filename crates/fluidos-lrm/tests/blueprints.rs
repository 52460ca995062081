//! Service flavors from ServiceBlueprints, on a real kube-apiserver.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "an integration scenario reads top to bottom as one story; its steps share one running cluster"
)]

mod common;

use common::*;
use fluidos_api::Flavor;
use fluidos_api::naming::hash_prefix;
use fluidos_api::service_blueprint::ServiceBlueprint;
use fluidos_lrm::{PUBLISHED, READY};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

fn blueprints(client: &Client) -> Api<ServiceBlueprint> {
    Api::namespaced(client.clone(), NS)
}

async fn flavor_of_blueprint(client: &Client, bp: &str) -> Option<Flavor> {
    flavors(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|f| {
            f.owner_references()
                .iter()
                .any(|o| o.kind == "ServiceBlueprint" && o.name == bp)
        })
}

async fn wait_flavor(client: &Client, bp: &str) -> Flavor {
    wait_for(&format!("flavor of blueprint {bp}"), || {
        flavor_of_blueprint(client, bp)
    })
    .await
}

/// Waits until the blueprint's Ready condition describes its current generation with `status`.
async fn wait_ready(client: &Client, bp: &str, status: &str) -> (ServiceBlueprint, Condition) {
    wait_for(&format!("{bp} Ready={status}"), || async {
        let b = blueprints(client).get(bp).await.unwrap();
        let c = b
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == READY)?
            .clone();
        (c.status == status && c.observed_generation == b.metadata.generation).then_some((b, c))
    })
    .await
}

fn db_type_data() -> Value {
    // fluidos-node.md §5.1, verbatim.
    serde_json::from_str(
        r##"{"name":"db","description":"A database service blueprint","category":"database",
 "tags":["database","mysql"],"hostingPolicies":["Provider","Consumer"],
 "configurationTemplate":{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
   "properties":{"username":{"type":"string"},"password":{"type":"string"},"database":{"type":"string"}},
   "required":["username","password","database"]}}"##,
    )
    .unwrap()
}

fn mq_type_data() -> Value {
    // §5.1's shape with §5.2's message-queue template and the mq sample's fields.
    json!({"name": "mq", "description": "A message queue service blueprint",
        "category": "message-queue", "tags": ["message-queue", "rabbitmq", "mqtt"],
        "hostingPolicies": ["Consumer"],
        "configurationTemplate": {"$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"username": {"type": "string"}, "password": {"type": "string"}},
            "required": ["username", "password"]}})
}

/// The two upstream samples, applied unchanged, publish the flavors of §5.1.
#[tokio::test]
async fn upstream_samples_publish_the_reference_flavors() {
    let Some(reference) = fluidos_testenv::shared_reference_dir() else {
        fluidos_testenv::skip::unavailable(
            "../shared/reference is absent, the upstream blueprint samples are not available",
        );
        return;
    };
    let cp = control_plane().await;
    let client = cp.client();
    let mut lrm = None;
    for (file, name, want) in [
        ("service-blueprint-db.yaml", "db-mysql", db_type_data()),
        ("service-blueprint-mq.yaml", "mq-rabbitmq", mq_type_data()),
    ] {
        let text = std::fs::read_to_string(reference.join("fluidos-samples").join(file)).unwrap();
        let bp: ServiceBlueprint = serde_yaml::from_str(&text).unwrap();
        assert_eq!(bp.name_any(), name);
        let bp = blueprints(&client)
            .create(&PostParams::default(), &bp)
            .await
            .unwrap();

        if name == "db-mysql" {
            // Start after the first blueprint exists (initial list) and before
            // the second (watch event): both paths publish.
            lrm = Some(start(client.clone(), config()).await);
        }
        let f = wait_flavor(&client, name).await;
        let uid = bp.uid().unwrap();
        assert_eq!(
            f.name_any(),
            format!("fluidos.eu-service-{}", hash_prefix(&uid, 16))
        );
        assert_eq!(f.spec.flavor_type.type_identifier, "Service");
        assert_eq!(f.spec.flavor_type.type_data, want, "{file}");
        assert_eq!(f.spec.provider_id, "4ahrqttvng");
        assert!(f.spec.availability);
        let o = &f.owner_references()[0];
        assert_eq!(
            (
                o.api_version.as_str(),
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str()
            ),
            (
                "nodecore.fluidos.eu/v1alpha1",
                "ServiceBlueprint",
                name,
                uid.as_str()
            )
        );
        let (b, c) = wait_ready(&client, name, "True").await;
        assert_eq!(c.reason, PUBLISHED);
        assert!(c.message.contains(&f.name_any()), "{}", c.message);
        let status = b.status.unwrap();
        assert_eq!(status.observed_generation, b.metadata.generation);
        assert_eq!(
            serde_json::to_value(status.service_flavors.unwrap()).unwrap(),
            json!([want])
        );
        wait_event(&client, NS, &f.name_any(), "FlavorCreated").await;
    }
    if let Some(lrm) = lrm {
        lrm.stop().await;
    }
}

fn blueprint(
    name: &str,
    category: &str,
    schema: Option<Value>,
    templates: Value,
) -> ServiceBlueprint {
    let mut spec = json!({"name": name, "description": format!("{name} service"), "category": category,
        "tags": [category], "hostingPolicies": [], "templates": templates});
    if let Some(s) = schema {
        spec["configurationSchema"] = s;
    }
    serde_json::from_value(
        json!({"apiVersion": "nodecore.fluidos.eu/v1alpha1", "kind": "ServiceBlueprint",
        "metadata": {"name": name, "namespace": NS}, "spec": spec}),
    )
    .unwrap()
}

fn secret_template() -> Value {
    json!([{"name": "secret", "serviceData": {"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds"}, "stringData": {"user": "{{ .username }}"}}}])
}

/// Unknown categories without a schema, invalid schemas and templates that
/// are not manifests give `Ready=False`, a Warning event and no flavor; a
/// blueprint's own schema serves a new category; breaking a published
/// blueprint withdraws its flavor, fixing it brings it back, deleting it removes it.
#[tokio::test]
async fn invalid_blueprints_say_why_and_publish_nothing() {
    let cp = control_plane().await;
    let client = cp.client();
    let _lrm = start(client.clone(), config()).await;
    let api = blueprints(&client);

    let cases = [
        (
            blueprint("toaster", "toaster", None, secret_template()),
            "UnknownCategory",
            "toaster",
        ),
        (
            blueprint(
                "bad-schema",
                "object-store",
                Some(json!({"type": 12})),
                secret_template(),
            ),
            "InvalidConfigurationSchema",
            "configurationSchema",
        ),
        (
            blueprint(
                "bad-template",
                "database",
                None,
                json!([{"name": "svc", "serviceData": {"apiVersion": "v1", "metadata": {"name": "x"}}}]),
            ),
            "InvalidTemplate",
            "spec.templates[0] (svc): serviceData lacks kind",
        ),
    ];
    for (bp, reason, says) in &cases {
        api.create(&PostParams::default(), bp).await.unwrap();
        let name = bp.name_any();
        let (b, c) = wait_ready(&client, &name, "False").await;
        assert_eq!(c.reason, *reason);
        assert!(c.message.contains(says), "{}", c.message);
        assert_eq!(b.status.as_ref().unwrap().service_flavors, Some(vec![]));
        let ev = wait_event(&client, NS, &name, reason).await;
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.note.as_deref(), Some(c.message.as_str()));
    }

    // A new category with its own schema: no code change needed.
    let schema = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {"bucket": {"type": "string"}}, "required": ["bucket"]});
    api.create(
        &PostParams::default(),
        &blueprint(
            "s3",
            "object-store",
            Some(schema.clone()),
            secret_template(),
        ),
    )
    .await
    .unwrap();
    let f = wait_flavor(&client, "s3").await;
    assert_eq!(
        f.spec.flavor_type.type_data["configurationTemplate"],
        schema
    );
    assert_eq!(
        f.spec.flavor_type.type_data["hostingPolicies"],
        json!(["Provider"])
    );
    wait_ready(&client, "s3", "True").await;

    // None of the invalid ones got a flavor.
    for (bp, _, _) in &cases {
        assert!(flavor_of_blueprint(&client, &bp.name_any()).await.is_none());
    }

    // Breaking it withdraws the flavor (deleted: no ledger entries) ...
    api.patch(
        "s3",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"configurationSchema": null, "category": "object-storage"}})),
    )
    .await
    .unwrap();
    let (_, c) = wait_ready(&client, "s3", "False").await;
    assert_eq!(c.reason, "UnknownCategory");
    wait_for("s3 flavor deleted", || async {
        flavors(&client)
            .get_opt(&f.name_any())
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_event(&client, NS, &f.name_any(), "FlavorDeleted").await;
    // ... fixing it publishes it again under the same name ...
    api.patch(
        "s3",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"category": "database"}})),
    )
    .await
    .unwrap();
    let (_, c) = wait_ready(&client, "s3", "True").await;
    assert_eq!(c.reason, PUBLISHED);
    let again = wait_flavor(&client, "s3").await;
    assert_eq!(again.name_any(), f.name_any());
    assert_eq!(again.spec.flavor_type.type_data["category"], "database");
    // ... and deleting the blueprint removes it.
    api.delete("s3", &DeleteParams::default()).await.unwrap();
    wait_for("s3 flavor gone with its blueprint", || async {
        flavor_of_blueprint(&client, "s3")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

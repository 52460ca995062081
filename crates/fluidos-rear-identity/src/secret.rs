//! The node key kept in a Secret of the node's namespace.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::key::{KeyError, NodeKey};

/// The Secret's default name.
pub const DEFAULT_SECRET_NAME: &str = "fluidos-node-identity";
/// The Secret key holding the PKCS#8 PEM private key.
pub const KEY_FIELD: &str = "node.key";

/// Reading or creating the identity Secret failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The API server refused or failed.
    #[error("{action} the node identity Secret {namespace}/{name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The cause (boxed: a kube error is large).
        source: Box<kube::Error>,
    },
    /// The Secret exists but holds no usable key. It is never overwritten:
    /// a new key changes the fingerprint every peer knows this node by.
    #[error(
        "the node identity Secret {namespace}/{name} holds no usable key in {KEY_FIELD:?} ({reason}); \
         delete it to generate a new identity (peers that know the old fingerprint will refuse this node until told the new one)"
    )]
    Unusable {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A new key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// The node's key from `namespace/name`, created there on first start. Two
/// replicas starting at once agree: the loser of the create reads the
/// winner's key.
pub async fn load_or_create(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    node_id: &str,
) -> Result<NodeKey, SecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api_err = |action, source| SecretError::Api {
        action,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source: Box::new(source),
    };
    if let Some(secret) = api.get_opt(name).await.map_err(|e| api_err("reading", e))? {
        return from_secret(&secret, namespace, name, node_id);
    }
    let key = NodeKey::generate(node_id)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "fluidos-node".to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(
                "fluidos.eu/key-fingerprint".to_owned(),
                key.fingerprint().to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            KEY_FIELD.to_owned(),
            ByteString(key.private_key_pem().as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(fingerprint = %key.fingerprint(), secret = name, "created the node identity");
            Ok(key)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = api.get(name).await.map_err(|e| api_err("reading", e))?;
            from_secret(&secret, namespace, name, node_id)
        }
        Err(e) => Err(api_err("creating", e)),
    }
}

/// The fingerprint peers pin for the node `node_id` in `namespace`: of the
/// key in the default Secret, created there if missing, as the node does on
/// first start (so a harness can learn it before starting the node).
pub async fn node_fingerprint(
    client: &kube::Client,
    namespace: &str,
    node_id: &str,
) -> Result<crate::Fingerprint, SecretError> {
    load_or_create(client, namespace, DEFAULT_SECRET_NAME, node_id)
        .await
        .map(|key| key.fingerprint())
}

fn from_secret(
    secret: &Secret,
    namespace: &str,
    name: &str,
    node_id: &str,
) -> Result<NodeKey, SecretError> {
    let unusable = |reason: String| SecretError::Unusable {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        reason,
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_FIELD))
        .ok_or_else(|| unusable("the key is missing".into()))?;
    let pem = std::str::from_utf8(&bytes.0).map_err(|_| unusable("not UTF-8 PEM".into()))?;
    NodeKey::from_pem(pem, node_id).map_err(|e| unusable(e.to_string()))
}

//! The node key's fingerprint, published apart from the key.
//!
//! The network manager announces the fingerprint and needs nothing else of
//! the key; reading it from the key's Secret meant it could read the
//! private key. So the components holding the key (the rear-gateway and
//! the rear-manager) write the fingerprint into the ConfigMap
//! [`CONFIGMAP_NAME`] at every start, and the network manager reads only
//! that. Whoever may write ConfigMaps in the node's namespace can make it
//! announce another fingerprint: peers then pin that key and refuse this
//! node, unless the writer also answers at this node's address with it.
//! The chart grants that write to no one but the REAR components.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};

use crate::Fingerprint;

/// The ConfigMap holding the fingerprint.
pub const CONFIGMAP_NAME: &str = "fluidos-node-rear-fingerprint";
/// Its data key.
pub const FINGERPRINT_FIELD: &str = "fingerprint";
/// Field manager of the write.
const MANAGER: &str = "fluidos-rear-identity";

/// Publishing or reading the fingerprint failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishedError {
    /// The API server refused or failed.
    #[error("{action} the REAR fingerprint ConfigMap {namespace}/{CONFIGMAP_NAME}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// Namespace.
        namespace: String,
        /// The cause (boxed: a kube error is large).
        source: Box<kube::Error>,
    },
    /// Watching for it failed.
    #[error("waiting for the REAR fingerprint ConfigMap {namespace}/{CONFIGMAP_NAME}: {reason}")]
    Watch {
        /// Namespace.
        namespace: String,
        /// The watch's error.
        reason: String,
    },
    /// It holds no fingerprint, or not one.
    #[error(
        "the REAR fingerprint ConfigMap {namespace}/{CONFIGMAP_NAME} holds no valid {FINGERPRINT_FIELD:?} \
         ({reason}); the rear-gateway or rear-manager writes it again when it starts"
    )]
    Unusable {
        /// Namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
}

/// Writes `fingerprint` into the ConfigMap of `namespace` (server-side
/// apply: idempotent, and replicas agree since they hold the same key).
pub async fn publish(
    client: &kube::Client,
    namespace: &str,
    fingerprint: Fingerprint,
) -> Result<(), PublishedError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CONFIGMAP_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            FINGERPRINT_FIELD.to_owned(),
            fingerprint.to_string(),
        )])),
        ..ConfigMap::default()
    };
    // k8s-openapi writes apiVersion and kind, which an apply needs.
    api.patch(
        CONFIGMAP_NAME,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .map_err(|source| PublishedError::Api {
        action: "writing",
        namespace: namespace.to_owned(),
        source: Box::new(source),
    })?;
    Ok(())
}

/// The published fingerprint of `namespace`, watching at most `timeout`
/// for one that parses (a ConfigMap being written, or put right by the
/// next start of a REAR component, may not hold one yet); `None` if there
/// is no ConfigMap by then, [`PublishedError::Unusable`] if there is one
/// without a valid fingerprint.
pub async fn wait_for(
    client: &kube::Client,
    namespace: &str,
    timeout: Duration,
) -> Result<Option<Fingerprint>, PublishedError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let usable = |c: Option<&ConfigMap>| c.is_some_and(|c| fingerprint_in(c, namespace).is_ok());
    match tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(api.clone(), CONFIGMAP_NAME, usable),
    )
    .await
    {
        Ok(Ok(found)) => found.map(|cm| fingerprint_in(&cm, namespace)).transpose(),
        Ok(Err(e)) => Err(PublishedError::Watch {
            namespace: namespace.to_owned(),
            reason: e.to_string(),
        }),
        // Say why, when there is something.
        Err(_) => match api.get_opt(CONFIGMAP_NAME).await {
            Ok(Some(cm)) => fingerprint_in(&cm, namespace).map(Some),
            Ok(None) => Ok(None),
            Err(source) => Err(PublishedError::Api {
                action: "reading",
                namespace: namespace.to_owned(),
                source: Box::new(source),
            }),
        },
    }
}

fn fingerprint_in(cm: &ConfigMap, namespace: &str) -> Result<Fingerprint, PublishedError> {
    let unusable = |reason: String| PublishedError::Unusable {
        namespace: namespace.to_owned(),
        reason,
    };
    cm.data
        .as_ref()
        .and_then(|d| d.get(FINGERPRINT_FIELD))
        .ok_or_else(|| unusable("missing".into()))?
        .parse()
        .map_err(|_: crate::fingerprint::FingerprintError| {
            unusable("not sha256: and 64 lower-case hex digits".into())
        })
}

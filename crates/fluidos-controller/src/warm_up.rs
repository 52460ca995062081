//! Readies the API server's write path for the kinds a node writes, before
//! the node says it is ready (see `fluidos_api::probe`).

use std::fmt::Debug;

use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Creates `obj` with `dryRun=All`: the API server decodes, defaults,
/// validates and admits it, then stores nothing. An error is only logged at
/// debug level: it is a warm-up, and a real problem shows again on the real
/// write, where it is reported.
pub async fn dry_run_create<K>(client: &kube::Client, obj: K)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let ns = obj.meta().namespace.as_deref().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    if let Err(e) = api.create(&params, &obj).await {
        tracing::debug!(kind = %K::kind(&()), error = %e, "dry-run create failed");
    }
}

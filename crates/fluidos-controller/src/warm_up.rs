//! Readies the API server's write path for the kinds a node writes, before
//! the node says it is ready (see `fluidos_api::probe`).

use std::fmt::Debug;
use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How long one dry-run create may take before readiness stops waiting for
/// it: the warm-up is an optimisation, and a slow admission webhook must not
/// hold the node's readiness (and its Service endpoints) back.
const DRY_RUN_TIMEOUT: Duration = Duration::from_secs(3);

/// Creates `obj` with `dryRun=All`: the API server decodes, defaults,
/// validates and admits it, then stores nothing. Nothing here fails the
/// caller: a refusal that predicts the real write failing (403 no right to
/// create, 404 kind or namespace missing) is a warning, anything else is
/// logged at debug level and shows again on the real write.
pub async fn dry_run_create<K>(client: &kube::Client, obj: K)
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let ns = obj.meta().namespace.clone().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let kind = K::kind(&());
    match tokio::time::timeout(DRY_RUN_TIMEOUT, api.create(&params, &obj)).await {
        Ok(Ok(_)) => {}
        Ok(Err(kube::Error::Api(e))) if e.code == 403 || e.code == 404 => {
            tracing::warn!(%kind, namespace = %ns, code = e.code, reason = %e.reason, message = %e.message,
                "this node may not be able to write {kind}s: a dry-run create was refused");
        }
        Ok(Err(e)) => tracing::debug!(%kind, error = %e, "dry-run create failed"),
        Err(_) => {
            tracing::debug!(%kind, "dry-run create took over {DRY_RUN_TIMEOUT:?}; not waited for")
        }
    }
}

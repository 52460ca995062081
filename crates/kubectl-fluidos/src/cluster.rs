//! Connecting to the cluster as kubectl does, and what the node's namespace holds.

use anyhow::Context as _;
use fluidos_api::{GENERATED_NODE_ID_CONFIGMAP, NODE_IDENTITY_CONFIGMAP};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::cli::ConnectionArgs;

/// A client for the cluster `args` name: `--kubeconfig` (else `$KUBECONFIG`,
/// else `~/.kube/config`, else the Pod's service account), with
/// `--context`/`--cluster`/`--user` choosing inside the kubeconfig.
pub async fn connect(args: &ConnectionArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        cluster: args.cluster.clone(),
        user: args.user.clone(),
    };
    let picks_from_kubeconfig =
        args.context.is_some() || args.cluster.is_some() || args.user.is_some();
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None if picks_from_kubeconfig => Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        None => Config::infer()
            .await
            .context("finding a cluster: no usable kubeconfig and not running in a Pod")?,
    };
    Client::try_from(config).context("building the Kubernetes client")
}

/// This node's ID from the identity ConfigMap, or from the one the node
/// keeps the ID it drew for itself in when the first names none; `None`
/// when neither can be read (the callers only use it to say which side of
/// a contract we are on).
pub async fn local_node_id(client: &Client, namespace: &str) -> Option<String> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for name in [NODE_IDENTITY_CONFIGMAP, GENERATED_NODE_ID_CONFIGMAP] {
        let id = configmaps
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("nodeID").map(|id| id.trim().to_owned()))
            .filter(|id| !id.is_empty());
        if id.is_some() {
            return id;
        }
    }
    None
}

/// True for the API server's 404.
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// What to tell a person about an API error on a FLUIDOS kind: a 404 on a
/// list or create means the CRDs are not installed.
pub fn explain_api_error(err: kube::Error, kind: &str, namespace: &str) -> anyhow::Error {
    match &err {
        kube::Error::Api(status) if status.code == 404 => anyhow::Error::new(err).context(
            format!("the {kind} custom resource is not installed in this cluster (kubectl apply -f deploy/crds/)"),
        ),
        kube::Error::Api(status) if status.code == 403 => anyhow::Error::new(err).context(format!(
            "not allowed to access {kind}s in namespace {namespace}"
        )),
        _ => anyhow::Error::new(err).context(format!("{kind}s in namespace {namespace}")),
    }
}

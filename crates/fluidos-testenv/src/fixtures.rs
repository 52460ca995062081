//! Objects a FLUIDOS node needs in its cluster before it starts, for tests and
//! the demo: the namespace, the node identity ConfigMap, labelled workers.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::{ControlPlane, Error};

/// Creates `namespace` (tolerating one that exists).
pub async fn namespace(cp: &ControlPlane, namespace: &str) -> Result<(), Error> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))
        .map_err(|e| Error::Fixture(e.to_string()))?;
    match Api::<Namespace>::all(cp.client())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// The `fluidos-node-identity` ConfigMap the node reads at start.
pub async fn node_identity(
    cp: &ControlPlane,
    namespace: &str,
    node_id: &str,
    ip: &str,
    port: u16,
) -> Result<(), Error> {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "fluidos-node-identity"},
        "data": {"domain": "fluidos.eu", "nodeID": node_id, "ip": ip, "port": port.to_string()}
    }))
    .map_err(|e| Error::Fixture(e.to_string()))?;
    Api::<ConfigMap>::namespaced(cp.client(), namespace)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

/// A worker Node labelled `node-role.fluidos.eu/resources=true`, with this
/// capacity (and allocatable) in its status, as a kubelet would report it.
pub async fn worker_node(
    cp: &ControlPlane,
    name: &str,
    cpu: &str,
    memory: &str,
) -> Result<(), Error> {
    let api: Api<Node> = Api::all(cp.client());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"node-role.fluidos.eu/resources": "true"}},
    }))
    .map_err(|e| Error::Fixture(e.to_string()))?;
    api.create(&PostParams::default(), &node).await?;
    let resources =
        json!({"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "machineID": "",
            "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
            "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": ""}
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

/// A free loopback port that no other caller in this process has received
/// ([`crate::ports`]): two nodes of one test asking in turn once got the
/// same one, and the second failed to bind its health probes. Another
/// process may still take it before the caller binds it.
pub fn free_port() -> Result<u16, Error> {
    crate::ports::free_port()
}

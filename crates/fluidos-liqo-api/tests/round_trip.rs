//! Objects shaped as Liqo writes them (hand-written from the v1.0.0 schemas,
//! statuses and conditions included) read into the generated types and write
//! back with every field: a type that dropped or renamed a field would make
//! our controllers overwrite what Liqo wrote.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_liqo_api::generated::foreign_cluster::{
    ForeignClusterStatusConditionsStatus, ForeignClusterStatusConditionsType,
    ForeignClusterStatusModulesOffloadingConditionsStatus,
};
use fluidos_liqo_api::generated::resource_slice::{
    ResourceSliceStatusConditionsStatus, ResourceSliceStatusConditionsType,
};
use fluidos_liqo_api::{ForeignCluster, ForeignClusterStatusRole, ResourceSlice};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The consumer's ForeignCluster for provider `fluidos-provider-1` once peered.
const FOREIGN_CLUSTER: &str = r#"
apiVersion: core.liqo.io/v1beta1
kind: ForeignCluster
metadata:
  name: fluidos-provider-1
  labels:
    liqo.io/remote-cluster-id: fluidos-provider-1
  creationTimestamp: "2025-03-04T10:00:00Z"
  generation: 1
  resourceVersion: "4242"
  uid: 7b0c1a0e-5a3e-4a55-9d6f-2f0b8f6c1d01
spec:
  clusterID: fluidos-provider-1
status:
  role: Provider
  apiServerUrl: https://192.0.2.10:6443
  foreignProxyUrl: http://192.0.2.10:8118
  tenantNamespace:
    local: liqo-tenant-fluidos-provider-1
    remote: liqo-tenant-fluidos-consumer-1
  conditions:
  - type: APIServerStatus
    status: Ready
    lastTransitionTime: "2025-03-04T10:00:05Z"
    reason: ForeignAPIServerReady
    message: The remote API server is ready
  modules:
    networking:
      enabled: true
      conditions:
      - type: NetworkConnectionStatus
        status: Established
        lastTransitionTime: "2025-03-04T10:01:00Z"
        reason: ConnectionEstablished
        message: The connection has been established
      - type: NetworkGatewayClientStatus
        status: Ready
        lastTransitionTime: "2025-03-04T10:00:50Z"
      - type: NetworkConfigurationStatus
        status: Ready
    authentication:
      enabled: true
      conditions:
      - type: AuthIdentityControlPlaneStatus
        status: Established
        lastTransitionTime: "2025-03-04T10:02:00Z"
        reason: IdentityEstablished
        message: The identity has been established
    offloading:
      enabled: true
      conditions:
      - type: OffloadingVirtualNodeStatus
        status: Ready
        lastTransitionTime: "2025-03-04T10:03:00Z"
        reason: VirtualNodesReady
        message: All virtual nodes are ready
      - type: OffloadingNodeStatus
        status: SomeNotReady
        lastTransitionTime: "2025-03-04T10:03:10Z"
        reason: NodesNotReady
        message: Some nodes are not ready
"#;

/// A ResourceSlice on the consumer after the provider accepted it and the
/// status was replicated back.
const RESOURCE_SLICE: &str = r#"
apiVersion: authentication.liqo.io/v1beta1
kind: ResourceSlice
metadata:
  name: fluidos-provider-1-contract-1
  namespace: liqo-tenant-fluidos-provider-1
  labels:
    liqo.io/replication: "true"
    liqo.io/remoteID: fluidos-provider-1
    liqo.io/remote-cluster-id: fluidos-provider-1
  annotations:
    liqo.io/create-virtual-node: "true"
  finalizers:
  - crdreplicator.liqo.io/resource
  creationTimestamp: "2025-03-04T10:05:00Z"
  generation: 2
spec:
  class: default
  providerClusterID: fluidos-provider-1
  consumerClusterID: fluidos-consumer-1
  csr: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0K
  resources:
    cpu: "2"
    memory: 4Gi
    pods: 110
    nvidia.com/gpu: "1"
status:
  conditions:
  - type: Authentication
    status: Accepted
    lastTransitionTime: "2025-03-04T10:05:02Z"
    reason: CSRSigned
    message: The CSR has been signed
  - type: Resources
    status: Accepted
    lastTransitionTime: "2025-03-04T10:05:03Z"
  authParams:
    apiServer: https://192.0.2.10:6443
    ca: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    signedCRT: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    proxyURL: http://192.0.2.10:8118
  resources:
    cpu: "2"
    memory: 4Gi
    pods: 110
    ephemeral-storage: 20Gi
    nvidia.com/gpu: "1"
  storageClasses:
  - storageClassName: liqo
    default: true
  - storageClassName: standard
  ingressClasses:
  - ingressClassName: nginx
    default: true
  loadBalancerClasses:
  - loadBalancerClassName: metallb
  nodeLabels:
    topology.kubernetes.io/region: eu-west
    liqo.io/provider: kubeadm
  nodeSelector:
    node-role.fluidos.eu/worker: "true"
"#;

/// Reads `yaml` into `K` and writes it back; returns the typed object after
/// asserting the written JSON equals the input's.
fn round_trip<K: Serialize + DeserializeOwned>(yaml: &str) -> K {
    let input: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
    let typed: K = serde_json::from_value(input.clone()).unwrap();
    let output = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        output,
        input,
        "written back:\n{}",
        serde_json::to_string_pretty(&output).unwrap()
    );
    typed
}

#[test]
fn foreign_cluster_round_trips_with_status_and_module_conditions() {
    let fc: ForeignCluster = round_trip(FOREIGN_CLUSTER);
    assert_eq!(fc.spec.cluster_id, "fluidos-provider-1");
    let status = fc.status.unwrap();
    assert_eq!(status.role, ForeignClusterStatusRole::Provider);
    let api = &status.conditions.unwrap()[0];
    assert_eq!(
        api.r#type,
        ForeignClusterStatusConditionsType::ApiServerStatus
    );
    assert_eq!(api.status, ForeignClusterStatusConditionsStatus::Ready);
    let modules = status.modules.unwrap();
    assert!(modules.networking.enabled && modules.authentication.enabled);
    let offloading = modules.offloading.conditions.unwrap();
    assert_eq!(
        offloading[1].status,
        ForeignClusterStatusModulesOffloadingConditionsStatus::SomeNotReady
    );
    // A condition Liqo wrote without lastTransitionTime/reason/message (the
    // schema requires only type and status) is still readable.
    let networking = modules.networking.conditions.unwrap();
    assert_eq!(networking[2].last_transition_time, None);
}

#[test]
fn resource_slice_round_trips_with_accepted_conditions_and_quantities() {
    let slice: ResourceSlice = round_trip(RESOURCE_SLICE);
    assert_eq!(slice.spec.class.as_deref(), Some("default"));
    let requested = slice.spec.resources.unwrap();
    // Quantities keep the form Liqo wrote: integer stays integer.
    assert_eq!(requested["pods"], IntOrString::Int(110));
    assert_eq!(requested["memory"], IntOrString::String("4Gi".into()));
    let status = slice.status.unwrap();
    let conditions = status.conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.r#type == ResourceSliceStatusConditionsType::Resources
                && c.status == ResourceSliceStatusConditionsStatus::Accepted)
    );
    assert_eq!(
        status.resources.unwrap()["ephemeral-storage"],
        IntOrString::String("20Gi".into())
    );
}

#[test]
fn enum_values_outside_liqo_v1_0_0_fail_to_read() {
    // kopium's enums are closed: an object written by a Liqo with a wider
    // vocabulary fails to deserialize instead of being read wrong. Pinned so
    // that a change of that (a newer kopium, other flags) is noticed.
    let yaml = FOREIGN_CLUSTER.replace("role: Provider", "role: Broker");
    let input: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    assert!(serde_json::from_value::<ForeignCluster>(input).is_err());
}

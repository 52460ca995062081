//! Each type addresses the API path Liqo v1.0.0 serves: group, version, kind,
//! plural and scope as written in the CRD files (checked there by hand; the
//! `generated_fresh` test keeps the types in step with those files).
//! A wrong plural (PublicKey's is `publickeies`) would only show as 404s
//! against a real cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use fluidos_liqo_api::{
    Configuration, Connection, ForeignCluster, GatewayClient, GatewayServer, Identity,
    NamespaceOffloading, PublicKey, ResourceSlice, Tenant, VirtualNode,
};
use kube::Resource;
use kube::core::{ClusterResourceScope, NamespaceResourceScope};

/// What the CRD file says about one kind.
struct Expected {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

fn check<K: Resource<DynamicType = ()>>(expected: &Expected) {
    assert_eq!(K::group(&()), expected.group, "{}", expected.kind);
    assert_eq!(K::version(&()), expected.version, "{}", expected.kind);
    assert_eq!(K::kind(&()), expected.kind, "{}", expected.kind);
    assert_eq!(K::plural(&()), expected.plural, "{}", expected.kind);
    assert_eq!(
        K::api_version(&()),
        format!("{}/{}", expected.group, expected.version),
        "{}",
        expected.kind
    );
}

/// Compiles only for a cluster-scoped kind.
fn cluster_scoped<K: Resource<Scope = ClusterResourceScope>>() {}
/// Compiles only for a namespaced kind.
fn namespaced<K: Resource<Scope = NamespaceResourceScope>>() {}

const fn liqo(group: &'static str, kind: &'static str, plural: &'static str) -> Expected {
    Expected {
        group,
        version: "v1beta1",
        kind,
        plural,
    }
}

#[test]
fn core_kinds_match_their_crds() {
    check::<ForeignCluster>(&liqo("core.liqo.io", "ForeignCluster", "foreignclusters"));
    cluster_scoped::<ForeignCluster>();
}

#[test]
fn authentication_kinds_match_their_crds() {
    let group = "authentication.liqo.io";
    check::<Tenant>(&liqo(group, "Tenant", "tenants"));
    check::<Identity>(&liqo(group, "Identity", "identities"));
    check::<ResourceSlice>(&liqo(group, "ResourceSlice", "resourceslices"));
    namespaced::<Tenant>();
    namespaced::<Identity>();
    namespaced::<ResourceSlice>();
}

#[test]
fn offloading_kinds_match_their_crds() {
    let group = "offloading.liqo.io";
    check::<VirtualNode>(&liqo(group, "VirtualNode", "virtualnodes"));
    check::<NamespaceOffloading>(&liqo(group, "NamespaceOffloading", "namespaceoffloadings"));
    namespaced::<VirtualNode>();
    namespaced::<NamespaceOffloading>();
}

#[test]
fn networking_kinds_match_their_crds() {
    let group = "networking.liqo.io";
    check::<Configuration>(&liqo(group, "Configuration", "configurations"));
    check::<GatewayServer>(&liqo(group, "GatewayServer", "gatewayservers"));
    check::<GatewayClient>(&liqo(group, "GatewayClient", "gatewayclients"));
    // Not `publickeys`: controller-gen pluralised "key" as "keies".
    check::<PublicKey>(&liqo(group, "PublicKey", "publickeies"));
    check::<Connection>(&liqo(group, "Connection", "connections"));
    namespaced::<Configuration>();
    namespaced::<GatewayServer>();
    namespaced::<GatewayClient>();
    namespaced::<PublicKey>();
    namespaced::<Connection>();
}

#[test]
fn kinds_without_status_subresource_have_no_status_field() {
    // PublicKey's CRD declares no status; the others' status is `Option`, so a
    // freshly built object writes none (Liqo fills it).
    let key = PublicKey::new("provider-1", fluidos_liqo_api::PublicKeySpec::default());
    let json = serde_json::to_value(&key).unwrap();
    assert!(json.get("status").is_none(), "{json}");
    assert_eq!(json["apiVersion"], "networking.liqo.io/v1beta1");
    assert_eq!(json["kind"], "PublicKey");
}

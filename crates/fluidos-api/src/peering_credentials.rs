//! A Contract's peering kubeconfig kept in a Secret instead of the
//! Contract's `spec.peeringTargetCredentials.kubeconfig`, on both sides.
//!
//! Whoever may read Contracts (every FLUIDOS component, operators, tools)
//! would read the bearer token if it stayed in the spec, as upstream keeps
//! it. A Contract of ours keeps `liqoID` and an empty `kubeconfig`; its
//! annotation [`ANNOTATION`] names the Secret `peering-credentials-<contract>`
//! ([`secret_name`]) in the Contract's namespace: type Opaque, the kubeconfig
//! YAML itself under [`KUBECONFIG_KEY`] (so the usual `base64 -d` of the
//! Secret's data gives a usable file), owned by the Contract
//! ([`owner_reference`]) so the garbage collector removes it with the
//! Contract. The REAR wire still carries the kubeconfig, base64 of that
//! YAML, as upstream's does.
//!
//! Pure builders and readers only: the provider (`fluidos-rear-gateway`) and
//! the consumer (`fluidos-consumer`, read by `fluidos-peering`) do the I/O.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::Contract;
use crate::naming::hash_prefix;

/// Contract annotation: the Secret (in the Contract's namespace) holding its
/// peering kubeconfig, which the Contract's spec then leaves empty.
pub const ANNOTATION: &str = "fluidos.eu/credentials-secret";
/// Key of the kubeconfig YAML in the credentials Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Prefix of the credentials Secret's name.
const PREFIX: &str = "peering-credentials-";
/// Longest object name (a DNS subdomain).
pub const MAX_NAME: usize = 253;
/// Hex characters of the hash that keeps a shortened name unique.
const HASH_LEN: usize = 16;

/// `peering-credentials-<contract>`; when that would be longer than an
/// object name may be, the contract name is cut and a hash of the whole of
/// it appended (two long names sharing a prefix stay apart).
pub fn secret_name(contract: &str) -> String {
    let name = format!("{PREFIX}{contract}");
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = hash_prefix(contract, HASH_LEN);
    let keep = MAX_NAME - PREFIX.len() - 1 - HASH_LEN;
    // Object names are ASCII; a non-boundary cut (impossible) keeps nothing.
    let head = contract.get(..keep).unwrap_or_default();
    let head = head.trim_end_matches(['-', '.']);
    format!("{PREFIX}{head}-{hash}")
}

/// The ownerReference making a credentials Secret go with its Contract
/// `contract` (UID `uid`). `controller: true`; not `blockOwnerDeletion`,
/// which would need `update` on the Contracts' finalizers, a right neither
/// side has another use for.
pub fn owner_reference(contract: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: Contract::api_version(&()).into_owned(),
        kind: Contract::kind(&()).into_owned(),
        name: contract.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// What a credentials Secret is made of, besides the kubeconfig.
#[derive(Clone, Debug, Default)]
pub struct SecretMeta {
    /// The Contract's name (the Secret's is [`secret_name`] of it).
    pub contract: String,
    /// The Contract's namespace, the Secret's too.
    pub namespace: Option<String>,
    /// The Secret's labels.
    pub labels: BTreeMap<String, String>,
    /// Its owner, when the Contract's UID is known.
    pub owner: Option<OwnerReference>,
}

/// The credentials Secret holding `kubeconfig_b64` (the wire form, base64 of
/// the YAML), stored decoded; an error when it is not base64.
pub fn credentials_secret(
    meta: SecretMeta,
    kubeconfig_b64: &str,
) -> Result<Secret, base64::DecodeError> {
    let yaml = base64::engine::general_purpose::STANDARD.decode(kubeconfig_b64)?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&meta.contract)),
            namespace: meta.namespace,
            labels: Some(meta.labels),
            owner_references: meta.owner.map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.to_owned(),
            ByteString(yaml),
        )])),
        ..Default::default()
    })
}

/// The kubeconfig a credentials Secret holds, in the wire form (base64).
pub fn kubeconfig_in(secret: &Secret) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(KUBECONFIG_KEY))
        .filter(|b| !b.0.is_empty())
        .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0))
}

/// The kubeconfig a Contract still carries in its spec (stored by an
/// earlier version, or by a Go node), if any.
pub fn kubeconfig_in_spec(contract: &Contract) -> Option<&str> {
    Some(contract.spec.peering_target_credentials.kubeconfig.as_str()).filter(|k| !k.is_empty())
}

/// Where a Contract's peering kubeconfig is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeconfigSource<'a> {
    /// In the Secret of this name, in the Contract's namespace.
    Secret(&'a str),
    /// In the Contract's spec (possibly empty): a Contract without the
    /// annotation, stored by an earlier version or a Go node.
    Spec(&'a str),
}

/// Where `contract`'s peering kubeconfig is: the Secret its [`ANNOTATION`]
/// names, else its spec.
pub fn kubeconfig_source(contract: &Contract) -> KubeconfigSource<'_> {
    match contract
        .annotations()
        .get(ANNOTATION)
        .filter(|s| !s.is_empty())
    {
        Some(secret) => KubeconfigSource::Secret(secret),
        None => KubeconfigSource::Spec(&contract.spec.peering_target_credentials.kubeconfig),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn contract() -> Contract {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "contract-f-abcd", "namespace": "fluidos"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": "K8Slice", "typeData": {}},
                    "owner": {"domain": "d", "nodeID": "p", "ip": "i"}, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t-1", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                "buyerClusterID": "c", "seller": {"domain": "d", "nodeID": "p", "ip": "i"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": "YQ=="}}}))
        .unwrap()
    }

    #[test]
    fn names_fit_an_object_name_and_stay_distinct() {
        assert_eq!(secret_name("contract-a"), "peering-credentials-contract-a");
        let a = secret_name(&format!("{}a", "x".repeat(300)));
        let b = secret_name(&format!("{}b", "x".repeat(300)));
        assert_eq!(a.len(), MAX_NAME);
        assert_ne!(a, b);
        let dashed = secret_name(&format!("{}-{}", "x".repeat(215), "y".repeat(100)));
        assert!(dashed.len() <= MAX_NAME, "{dashed}");
        assert!(!dashed.contains("--"), "{dashed}");
    }

    #[test]
    fn the_secret_holds_the_yaml_and_round_trips() {
        let yaml = "apiVersion: v1\nkind: Config\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(yaml);
        let meta = SecretMeta {
            contract: "contract-f-abcd".into(),
            namespace: Some("fluidos".into()),
            labels: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            owner: None,
        };
        let s = credentials_secret(meta.clone(), &b64).unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("peering-credentials-contract-f-abcd")
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("fluidos"));
        assert_eq!(s.metadata.labels.as_ref().unwrap()["k"], "v");
        assert_eq!(s.metadata.owner_references, None);
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert_eq!(s.data.as_ref().unwrap()[KUBECONFIG_KEY].0, yaml.as_bytes());
        assert_eq!(kubeconfig_in(&s).as_deref(), Some(b64.as_str()));

        let owned = credentials_secret(
            SecretMeta {
                owner: Some(owner_reference("contract-f-abcd", "uid-1")),
                ..meta.clone()
            },
            &b64,
        )
        .unwrap();
        let owner = &owned.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Contract", "contract-f-abcd", "uid-1")
        );
        assert_eq!(owner.api_version, "reservation.fluidos.eu/v1alpha1");
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), None)
        );
        assert!(credentials_secret(meta, "not base64!").is_err());
        assert_eq!(kubeconfig_in(&Secret::default()), None);
    }

    #[test]
    fn the_annotation_names_the_secret_else_the_spec_holds_it() {
        let mut c = contract();
        assert_eq!(kubeconfig_source(&c), KubeconfigSource::Spec("YQ=="));
        assert_eq!(kubeconfig_in_spec(&c), Some("YQ=="));
        c.annotations_mut()
            .insert(ANNOTATION.to_owned(), String::new());
        assert_eq!(kubeconfig_source(&c), KubeconfigSource::Spec("YQ=="));
        c.annotations_mut()
            .insert(ANNOTATION.to_owned(), "peering-credentials-x".to_owned());
        assert_eq!(
            kubeconfig_source(&c),
            KubeconfigSource::Secret("peering-credentials-x")
        );
        c.spec.peering_target_credentials.kubeconfig.clear();
        assert_eq!(kubeconfig_in_spec(&c), None);
    }
}

//! The buyer's peering kubeconfig of a sold Contract, kept in a Secret.
//!
//! Whoever may read Contracts (every FLUIDOS component, operators, tools)
//! would read every buyer's bearer token if it stayed in the Contract's
//! `spec.peeringTargetCredentials.kubeconfig`, as upstream keeps it. The
//! provider-side Contract keeps `liqoID` and an empty `kubeconfig`; its
//! annotation [`labels::CREDENTIALS_SECRET`] names the Secret
//! `peering-credentials-<contract>` ([`secret_name`]) in the node's
//! namespace: type Opaque, the kubeconfig YAML itself under the key
//! [`KUBECONFIG_KEY`](fluidos_api::peering_credentials::KUBECONFIG_KEY) (so
//! the usual `base64 -d` of the Secret's data gives a usable file), the
//! Contract's labels plus [`MANAGED_LABEL`], and owned by the Contract, so
//! the garbage collector removes it with the Contract (the contract-end
//! sweep also deletes it explicitly). The REAR answer still carries the
//! kubeconfig, base64 of that YAML, as upstream's does. The name, the
//! Secret's shape and its readers are shared with the consumer side, in
//! [`fluidos_api::peering_credentials`].

use fluidos_api::Contract;
use fluidos_api::common::FlavorTypeIdentifier;
use fluidos_api::peering_credentials::{
    SecretMeta, kubeconfig_in, kubeconfig_in_spec, owner_reference, secret_name,
};
use fluidos_controller::api_error::{is_already_exists, is_not_found};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};

use crate::error::ApiError;
use crate::{State, labels};
use fluidos_peer_access::grant::MANAGED_LABEL;
use fluidos_peer_access::grant::PeeringGrant;

/// Why the credentials Secret of a Contract could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The kubeconfig to store is not base64 (it is this gateway's own
    /// encoding, so this is a bug, never the buyer's fault).
    #[error("the kubeconfig to store is not base64")]
    NotBase64(#[source] base64::DecodeError),
    /// The Contract has no UID for the Secret's ownerReference.
    #[error("the Contract {0} has no UID to own its credentials Secret")]
    NoOwnerUid(String),
}

impl From<SecretError> for ApiError {
    fn from(e: SecretError) -> Self {
        tracing::warn!(error = %e, "building the credentials Secret");
        ApiError::internal(format!("cannot store the peering credentials: {e}"))
    }
}

/// The credentials Secret of `contract` holding `kubeconfig_b64` (the wire
/// form, base64 of the YAML), stored decoded.
pub(crate) fn credentials_secret(
    contract: &Contract,
    kubeconfig_b64: &str,
) -> Result<Secret, SecretError> {
    let name = contract.name_any();
    let uid = contract
        .uid()
        .ok_or_else(|| SecretError::NoOwnerUid(name.clone()))?;
    let mut secret_labels = contract.labels().clone();
    secret_labels.insert(MANAGED_LABEL.0.to_owned(), MANAGED_LABEL.1.to_owned());
    let meta = SecretMeta {
        owner: Some(owner_reference(&name, &uid)),
        contract: name,
        namespace: contract.namespace(),
        labels: secret_labels,
    };
    fluidos_api::peering_credentials::credentials_secret(meta, kubeconfig_b64)
        .map_err(SecretError::NotBase64)
}

/// True when a buyer's kubeconfig (wire form) decodes to a kubeconfig a
/// peer may hand over (`fluidos_controller::peer_kubeconfig`).
pub(crate) fn buyer_kubeconfig_is_readable(kubeconfig_b64: &str) -> bool {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_b64)
        .ok()
        .and_then(|yaml| String::from_utf8(yaml).ok())
        .and_then(|yaml| kube::config::Kubeconfig::from_yaml(&yaml).ok())
        .is_some_and(|k| fluidos_controller::peer_kubeconfig::refusal(&k).is_none())
}

/// The Secret holding the kubeconfig of the buyer's cluster that the buyer
/// of `contract` sent for a delivery by Liqo (wire form in, YAML stored),
/// owned by the Contract.
pub(crate) fn buyer_credentials_secret(
    contract: &Contract,
    kubeconfig_b64: &str,
) -> Result<Secret, SecretError> {
    let mut secret = credentials_secret(contract, kubeconfig_b64)?;
    secret.metadata.name = Some(fluidos_api::service_delivery::buyer_credentials_secret(
        &contract.name_any(),
    ));
    Ok(secret)
}

fn no_kubeconfig() -> ApiError {
    ApiError::internal("the credentials Secret of the Contract holds no kubeconfig")
}

impl State {
    /// Stores the buyer's kubeconfig of a Service delivered by Liqo
    /// (create-or-adopt: a repeated purchase keeps the first one).
    pub(crate) async fn store_buyer_credentials(
        &self,
        contract: &Contract,
        kubeconfig_b64: &str,
    ) -> Result<(), ApiError> {
        let secret = buyer_credentials_secret(contract, kubeconfig_b64)?;
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(e) if is_already_exists(&e) => Ok(()),
            Err(e) => Err(ApiError::kube("storing the buyer's Liqo credentials", &e)),
        }
    }

    /// The kubeconfig to answer a repeated purchase of `contract` with: the
    /// one in its spec (a Contract of an earlier version), else the one in
    /// its Secret. A missing Secret (the process died between answering the
    /// sale and writing it, or somebody deleted it) is written again, with
    /// `fresh` if the caller has issued credentials already, else with
    /// credentials issued now.
    pub(crate) async fn contract_kubeconfig(
        &self,
        contract: &Contract,
        fresh: Option<String>,
    ) -> Result<String, ApiError> {
        if let Some(k) = kubeconfig_in_spec(contract) {
            return Ok(k.to_owned());
        }
        let name = secret_name(&contract.name_any());
        match self.secrets.get_opt(&name).await {
            Ok(Some(s)) => return kubeconfig_in(&s).ok_or_else(no_kubeconfig),
            Ok(None) => {}
            Err(e) => return Err(ApiError::kube("reading the credentials Secret", &e)),
        }
        let kubeconfig = match fresh {
            Some(k) => k,
            None => self.reissue(contract).await?,
        };
        self.store_credentials(contract, &kubeconfig).await
    }

    /// Credentials for the buyer of `contract` (cached while fresh), and for
    /// a K8Slice its tenant-namespace grant (in place since the sale unless
    /// the grant was lost; checked against a watch cache, so usually free).
    async fn reissue(&self, contract: &Contract) -> Result<String, ApiError> {
        let buyer_id = &contract.spec.buyer.node_id;
        let liqo_id = &contract.spec.peering_target_credentials.liqo_id;
        let k8slice = contract.spec.flavor.spec.flavor_type.identifier()
            == Some(FlavorTypeIdentifier::K8Slice);
        let cluster = contract.spec.buyer_cluster_id.as_str();
        // A Go consumer's sale keeps its grant (its account's claim says so).
        let grant = k8slice.then(|| {
            if self.credentials.has_go_claim(buyer_id, cluster) {
                PeeringGrant::GoConsumer(cluster)
            } else {
                PeeringGrant::TenantNamespace(cluster)
            }
        });
        let owner = crate::buyer::SaleOwner::recorded(contract.annotations()).ok_or_else(|| {
            ApiError::internal(
                "the Contract's recorded buyer (its buyer key or buyer address annotation) is unreadable",
            )
        })?;
        Ok(self
            .credentials
            .issue(buyer_id, &owner.credentials_owner(), liqo_id, grant)
            .await?)
    }

    /// Creates `contract`'s credentials Secret with `kubeconfig_b64`, or, if
    /// it exists already, returns what it holds: the first write wins, so
    /// every later answer agrees with the Secret.
    pub(crate) async fn store_credentials(
        &self,
        contract: &Contract,
        kubeconfig_b64: &str,
    ) -> Result<String, ApiError> {
        let secret = credentials_secret(contract, kubeconfig_b64)?;
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(kubeconfig_b64.to_owned()),
            Err(e) if is_already_exists(&e) => {
                let existing = self
                    .secrets
                    .get(&secret.name_any())
                    .await
                    .map_err(|e| ApiError::kube("reading the credentials Secret", &e))?;
                kubeconfig_in(&existing).ok_or_else(no_kubeconfig)
            }
            Err(e) => Err(ApiError::kube("creating the credentials Secret", &e)),
        }
    }

    /// Creates a credentials Secret built at the sale, after the answer; a
    /// failure is logged (without the Secret's content) and repaired by the
    /// buyer's next purchase of the same transaction.
    pub(crate) async fn write_sold_credentials(&self, secret: Secret) {
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            // A repeated purchase wrote it first.
            Err(e) if is_already_exists(&e) => {}
            Err(e) => tracing::warn!(
                secret = %secret.name_any(),
                error = %e,
                "storing the peering credentials of a sale"
            ),
        }
    }

    /// Deletes the credentials Secret of `contract`; gone already is fine.
    pub(crate) async fn delete_credentials(&self, contract: &str) -> Result<(), kube::Error> {
        match self
            .secrets
            .delete(&secret_name(contract), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The annotation a sold Contract carries naming its credentials Secret.
pub(crate) fn annotation(contract: &str) -> (String, String) {
    (labels::CREDENTIALS_SECRET.to_owned(), secret_name(contract))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use base64::Engine;
    use fluidos_api::peering_credentials::KUBECONFIG_KEY;

    use super::*;

    fn contract(uid: Option<&str>) -> Contract {
        let mut c: Contract = serde_json::from_value(serde_json::json!({
            "apiVersion": "reservation.fluidos.eu/v1alpha1", "kind": "Contract",
            "metadata": {"name": "contract-f-abcd"},
            "spec": {
                "flavor": {"metadata": {"name": "f"}, "spec": {
                    "flavorType": {"typeIdentifier": "K8Slice", "typeData": {}},
                    "owner": {"domain": "d", "nodeID": "p", "ip": "i"}, "providerID": "p",
                    "price": {"amount": "", "currency": "", "period": ""},
                    "availability": true, "networkPropertyType": "", "location": {}}},
                "transactionID": "t-1", "buyer": {"domain": "d", "nodeID": "b", "ip": "i"},
                "buyerClusterID": "c", "seller": {"domain": "d", "nodeID": "p", "ip": "i"},
                "peeringTargetCredentials": {"liqoID": "l", "kubeconfig": ""}}}))
        .unwrap();
        c.metadata.namespace = Some("fluidos".into());
        c.metadata.uid = uid.map(str::to_owned);
        c.metadata.labels = Some(BTreeMap::from([
            (labels::SIDE.to_owned(), labels::PROVIDER.to_owned()),
            (labels::TRANSACTION.to_owned(), "t-1".to_owned()),
        ]));
        c
    }

    #[test]
    fn the_secret_holds_the_yaml_is_owned_by_the_contract_and_round_trips() {
        let yaml = "apiVersion: v1\nkind: Config\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(yaml);
        let s = credentials_secret(&contract(Some("uid-1")), &b64).unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("peering-credentials-contract-f-abcd")
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("fluidos"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert_eq!(s.data.as_ref().unwrap()[KUBECONFIG_KEY].0, yaml.as_bytes());
        let l = s.metadata.labels.as_ref().unwrap();
        assert_eq!(l[MANAGED_LABEL.0], MANAGED_LABEL.1);
        assert_eq!(l[labels::TRANSACTION], "t-1");
        assert_eq!(l[labels::SIDE], labels::PROVIDER);
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Contract", "contract-f-abcd", "uid-1")
        );
        assert_eq!(owner.api_version, "reservation.fluidos.eu/v1alpha1");
        assert_eq!(kubeconfig_in(&s).as_deref(), Some(b64.as_str()));
    }

    #[test]
    fn a_secret_is_refused_without_an_owner_uid_or_base64() {
        assert!(matches!(
            credentials_secret(&contract(None), "YQ=="),
            Err(SecretError::NoOwnerUid(_))
        ));
        assert!(matches!(
            credentials_secret(&contract(Some("u")), "not base64!"),
            Err(SecretError::NotBase64(_))
        ));
    }

    #[test]
    fn only_a_non_empty_spec_kubeconfig_is_a_legacy_one() {
        let mut c = contract(Some("u"));
        assert_eq!(kubeconfig_in_spec(&c), None);
        c.spec.peering_target_credentials.kubeconfig = "YQ==".into();
        assert_eq!(kubeconfig_in_spec(&c), Some("YQ=="));
        assert_eq!(kubeconfig_in(&Secret::default()), None);
    }
}

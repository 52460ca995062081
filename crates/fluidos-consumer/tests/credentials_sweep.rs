//! The sweep of unowned peering-credentials Secrets on a real API server: an
//! unowned Secret whose Contract exists is given to it (the garbage collector
//! then removes it with the Contract), one whose Contract was never stored is
//! deleted, and nothing else is touched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // in tests a panic is the failure report

use std::time::Duration;

use fluidos_api::peering_credentials;
use fluidos_consumer::credentials_sweep::{self, Swept};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

const NS: &str = "fluidos";

fn secret(name: &str, ours: bool) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: ours.then(|| {
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    fluidos_consumer::MANAGER.to_owned(),
                )]
                .into()
            }),
            ..Default::default()
        },
        string_data: Some([("kubeconfig".to_owned(), "apiVersion: v1".to_owned())].into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unowned_credentials_are_given_to_their_contract_or_deleted() {
    let cp = ControlPlane::start(ControlPlaneOptions {
        workloads: false,
        crd_dirs: vec![fluidos_testenv::crds_dir()],
        ..Default::default()
    })
    .await
    .unwrap();
    fixtures::namespace(&cp, NS).await.unwrap();
    let client = cp.client();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let contracts: Api<fluidos_api::Contract> = Api::namespaced(client.clone(), NS);
    let mut kept = fluidos_api::probe::contract(NS);
    kept.metadata.name = Some("contract-kept".into());
    let kept = contracts
        .create(&PostParams::default(), &kept)
        .await
        .unwrap();

    let pp = PostParams::default();
    for s in [
        secret("peering-credentials-contract-kept", true),
        secret("peering-credentials-contract-gone", true),
        secret("peering-credentials-contract-theirs", false),
        secret("unrelated", true),
    ] {
        secrets.create(&pp, &s).await.unwrap();
    }
    let mut owned = secret("peering-credentials-contract-owned", true);
    owned.metadata.owner_references = Some(vec![peering_credentials::owner_reference(
        "contract-kept",
        &kept.uid().unwrap(),
    )]);
    secrets.create(&pp, &owned).await.unwrap();

    // Young Secrets are left alone: the purchase may be between its writes.
    let swept = credentials_sweep::sweep_once(&client, NS, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(swept.is_empty(), "{swept:?}");

    let mut swept = credentials_sweep::sweep_once(&client, NS, Duration::ZERO)
        .await
        .unwrap();
    swept.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        swept,
        [
            Swept::Adopted("peering-credentials-contract-kept".into()),
            Swept::Deleted("peering-credentials-contract-gone".into()),
        ]
    );
    let adopted = secrets
        .get("peering-credentials-contract-kept")
        .await
        .unwrap();
    let owner = &adopted.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("Contract", "contract-kept", kept.uid().as_ref())
    );
    assert!(
        secrets
            .get_opt("peering-credentials-contract-gone")
            .await
            .unwrap()
            .is_none()
    );
    for untouched in [
        "peering-credentials-contract-theirs",
        "peering-credentials-contract-owned",
        "unrelated",
    ] {
        assert!(
            secrets.get_opt(untouched).await.unwrap().is_some(),
            "{untouched}"
        );
    }
    // Nothing left to do: a second sweep changes nothing.
    let again = credentials_sweep::sweep_once(&client, NS, Duration::ZERO)
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    cp.stop().await;
}

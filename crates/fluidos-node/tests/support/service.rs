//! The stage the service-allocation test and benchmark share: a provider
//! control plane with workloads (kube-controller-manager, kube-scheduler,
//! kwok) holding the upstream database blueprint and one worker, a consumer
//! control plane knowing the provider by a KnownCluster, and the two
//! `fluidos-node` processes, delivery without Liqo.

use std::time::Duration;

use fluidos_api::network::KnownClusterSpec;
use fluidos_api::{Flavor, KnownCluster, ServiceBlueprint, Solver};
use fluidos_testenv::{ControlPlane, ControlPlaneOptions, fixtures};
use kube::Api;
use kube::api::{ListParams, PostParams};

use super::{NS, NodeProcess, cluster, eventually, free_port, prepare};

/// Two clusters ready for a Service Solver.
pub struct ServiceStage {
    /// The provider's control plane (with workloads).
    pub provider: ControlPlane,
    /// The consumer's control plane.
    pub consumer: ControlPlane,
    /// The provider's REAR port.
    pub provider_port: u16,
    /// The consumer's REAR port.
    pub consumer_port: u16,
    /// The upstream `solver-service.yaml`.
    pub solver: Solver,
}

impl ServiceStage {
    /// Starts both control planes with a provider worker of `cpu` and
    /// `memory`; `None` (the caller skips) without `../shared/reference`,
    /// where the blueprint and Solver samples come from.
    pub async fn start(cpu: &str, memory: &str) -> Option<ServiceStage> {
        let samples = fluidos_testenv::shared_reference_dir()?.join("fluidos-samples");
        let blueprint: ServiceBlueprint = serde_yaml::from_str(
            &std::fs::read_to_string(samples.join("service-blueprint-db.yaml")).unwrap(),
        )
        .unwrap();
        let solver: Solver = serde_yaml::from_str(
            &std::fs::read_to_string(samples.join("solver-service.yaml")).unwrap(),
        )
        .unwrap();
        let provider_cp = async {
            ControlPlane::start(ControlPlaneOptions {
                workloads: true,
                crd_dirs: vec![fluidos_testenv::crds_dir()],
                ..Default::default()
            })
            .await
            .unwrap()
        };
        let (provider, consumer) = tokio::join!(provider_cp, cluster());
        let (provider_port, consumer_port) = (free_port(), free_port());
        let provider_key = prepare(&provider, "provider01", provider_port).await;
        prepare(&consumer, "consumer01", consumer_port).await;
        fixtures::worker_node(&provider, "worker-1", cpu, memory)
            .await
            .unwrap();
        Api::<ServiceBlueprint>::namespaced(provider.client(), NS)
            .create(&PostParams::default(), &blueprint)
            .await
            .unwrap();
        let known = KnownCluster::new(
            "knowncluster-provider01",
            KnownClusterSpec {
                address: format!("127.0.0.1:{provider_port}"),
                fingerprint: Some(provider_key),
            },
        );
        Api::<KnownCluster>::namespaced(consumer.client(), NS)
            .create(&PostParams::default(), &known)
            .await
            .unwrap();
        Some(ServiceStage {
            provider,
            consumer,
            provider_port,
            consumer_port,
            solver,
        })
    }

    /// The provider's node: flavors and the REAR gateway (which runs the
    /// provider's service allocation).
    pub fn provider_node(&self) -> NodeProcess {
        NodeProcess::spawn(
            &self.provider,
            self.provider_port,
            "local-resource-manager,rear-gateway",
            "0",
            &["--liqo-cluster-id", "liqo-provider"],
        )
    }

    /// The consumer's node: the rear-manager (Solver to Allocation).
    pub fn consumer_node(&self) -> NodeProcess {
        NodeProcess::spawn(
            &self.consumer,
            self.consumer_port,
            "rear-manager",
            "0",
            &[
                "--liqo-cluster-id",
                "liqo-consumer",
                "--peer-timeout-ms",
                "1000",
            ],
        )
    }

    /// Waits until the provider publishes its Service flavor.
    pub async fn wait_service_flavor(&self, logs: &[&NodeProcess]) {
        let flavors: Api<Flavor> = Api::namespaced(self.provider.client(), NS);
        eventually(
            "the Service flavor",
            Duration::from_secs(60),
            logs,
            || async {
                let list = flavors.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|f| f.spec.flavor_type.type_identifier == "Service")
                    .then_some(())
            },
        )
        .await;
    }
}

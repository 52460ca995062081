//! REAR gateway: the HTTP API other FLUIDOS nodes call to list flavors,
//! reserve and purchase (Go `rear-controller` gateway, `--http-port`), and
//! the provider side of service allocation (instantiating what it sold).
//!
//! With peering on, it also keeps the peer guard (`fluidos-peer-access`):
//! what Liqo runs here for peers is confined to the Pod Security level of
//! `--peer-pod-security`, and the component is not ready before that holds.
//!
//! With `--leader-elect` the HTTP API (and its expiry sweeper) runs on every
//! replica, the service allocation controller and the peer guard on the
//! leader only; the component is ready once the HTTP API serves.

use std::sync::Arc;
use std::time::Duration;

use fluidos_controller::readiness::ReadinessGate;
use fluidos_rear_gateway::GatewayConfig;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::Component;
use crate::context::Context;

/// Runs the REAR gateway until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let cfg = config(&ctx).await?;
    let mut services = fluidos_service_allocation::provider::ProviderConfig::new(
        ctx.namespace(),
        ctx.identity.clone(),
    );
    services.exposure = fluidos_service_allocation::exposure::Exposure {
        mode: ctx.args.service_exposure,
        external_host: ctx.args.service_external_host.clone(),
    };
    let services_ready = ReadinessGate::new();
    let guard = ctx.args.peering.then(|| fluidos_peer_access::GuardConfig {
        inputs: fluidos_peer_access::workload_policy::PolicyInputs {
            level: ctx.args.peer_pod_security,
            // A buyer of Services delivered by Liqo hosts its sellers'
            // service namespaces under their own names.
            service_namespaces: ctx.args.service_delivery
                == fluidos_api::service_delivery::ServiceDelivery::Liqo,
            peer_accounts: format!(
                "system:serviceaccount:{}:{}",
                cfg.namespace,
                fluidos_peer_access::grant::SERVICE_ACCOUNT_PREFIX
            ),
            exposure: ctx.args.peer_exposure.iter().copied().collect(),
        },
    });
    let guard_ready = ReadinessGate::new();
    if guard.is_none() {
        guard_ready.set_ready();
    }
    // With an election, a standby's readiness is its HTTP API's alone (see
    // docs/leader-election.md); the controller's is not waited for then.
    let elected = ctx.leadership.is_elected();

    let (ready_tx, mut ready_rx) = watch::channel(false);
    let report = {
        let (ctx, services_ready, guard_ready) =
            (ctx.clone(), services_ready.clone(), guard_ready.clone());
        tokio::spawn(async move {
            if ready_rx.wait_for(|r| *r).await.is_ok() {
                if !elected {
                    services_ready.wait().await;
                    guard_ready.wait().await;
                }
                ctx.readiness.mark_ready(Component::RearGateway);
            }
        })
    };
    if let Some(why) = &cfg.k8slice_refusal {
        tracing::warn!(component = %Component::RearGateway, "{why}");
        ctx.readiness
            .set_degraded(Component::RearGateway, Some(why.clone()));
    }
    tracing::info!(component = %Component::RearGateway, addr = %cfg.bind, "component started");
    let services_shutdown = shutdown.clone();
    let mut leadership = ctx.leadership.clone();
    let (result, ()) = tokio::join!(
        fluidos_rear_gateway::run_with_readiness(ctx.client.clone(), cfg, ready_tx, async move {
            shutdown.cancelled().await
        }),
        async {
            let leading = tokio::select! {
                leading = leadership.wait() => leading,
                () = services_shutdown.cancelled() => false,
            };
            if !leading {
                return;
            }
            if elected {
                tracing::info!(component = %Component::RearGateway, "leading: service allocation controller started");
            }
            let guard_shutdown = services_shutdown.clone();
            let keep_guard = async {
                if let Some(guard) = guard {
                    fluidos_peer_access::run(
                        ctx.client.clone(),
                        guard,
                        &ctx.metrics,
                        guard_ready,
                        async move { guard_shutdown.cancelled_owned().await },
                    )
                    .await;
                }
            };
            tokio::join!(
                fluidos_service_allocation::provider::run(
                    ctx.client.clone(),
                    services,
                    &ctx.metrics,
                    services_ready,
                    async move { services_shutdown.cancelled_owned().await },
                ),
                keep_guard,
            );
        },
    );
    let result = result.map_err(|e| Error::Setup(e.to_string()));
    report.abort();
    tracing::info!(component = %Component::RearGateway, "component stopped");
    result
}

/// The gateway's configuration from the command line (also what the REAR
/// manager issues sellers' kubeconfigs with, `GatewayConfig::credentials`).
pub(crate) async fn config(ctx: &Context) -> Result<GatewayConfig, Error> {
    let mut cfg = GatewayConfig::new(ctx.namespace(), ctx.identity.clone(), "");
    // The peering kubeconfig points at the API server this node uses, unless told otherwise.
    if let Ok(kube_cfg) = crate::startup::client_config(&ctx.args).await {
        cfg = cfg.with_kube_config(&kube_cfg);
    }
    // The address peers reach may present another certificate than the one
    // this node's client sees (a load balancer's, a public CA's).
    if ctx.args.api_server_trusted_ca {
        cfg.api_server_ca_pem = None;
    } else if let Some(pem) = &ctx.args.api_server_ca {
        cfg.api_server_ca_pem = Some(pem.clone());
    }
    cfg.rate_limit = (ctx.args.rear_rate_limit > 0).then_some(fluidos_rear_gateway::RateLimit {
        per_second: ctx.args.rear_rate_limit,
        burst: ctx.args.rear_rate_burst,
    });
    cfg.max_holds_per_buyer =
        usize::try_from(ctx.args.rear_max_holds_per_buyer).unwrap_or(usize::MAX);
    cfg.max_holds_per_address =
        usize::try_from(ctx.args.rear_max_holds_per_address).unwrap_or(usize::MAX);
    cfg.max_hold_age = Duration::from_secs(ctx.args.rear_max_hold_age_seconds);
    let service_host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
    match crate::peer_api_server::decide(
        ctx.args.api_server_url.as_deref(),
        &cfg.api_server_url,
        service_host.as_deref(),
    ) {
        crate::peer_api_server::PeerApiServer::Given(url)
        | crate::peer_api_server::PeerApiServer::Derived(url) => cfg.api_server_url = url,
        crate::peer_api_server::PeerApiServer::Unreachable(why) => {
            cfg.k8slice_refusal = Some(why);
        }
    }
    cfg.bind = ctx.args.rear_gateway_address();
    cfg.liqo_cluster_id = ctx.identity.liqo_id().map(str::to_owned);
    cfg.transaction_ttl = Duration::from_secs(ctx.args.transaction_ttl_seconds);
    cfg.metrics = ctx.metrics.clone();
    cfg.plain_http_sales = ctx.args.rear_plain_http_sales.clone();
    cfg.k8slice_buyers = ctx.args.rear_k8slice_buyers.clone();
    cfg.go_peering_grant = ctx.args.rear_go_peering_grant.clone();
    cfg.service_delivery = ctx.args.service_delivery;
    if let Some(key) = &ctx.node_key {
        cfg = cfg
            .with_node_key(key)
            .map_err(|e| Error::Setup(e.to_string()))?;
    }
    Ok(cfg)
}

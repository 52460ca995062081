//! REAR manager: drives Solvers, Discoveries and Reservations, the consumer
//! side (Go `rear-manager` plus the Discovery and Reservation controllers Go
//! runs in `rear-controller`).

use std::sync::Arc;
use std::time::Duration;

use fluidos_api::service_delivery::ServiceDelivery;
use fluidos_consumer::{
    ConsumerConfig, Context as ConsumerContext, OffloadingGrant, OffloadingIssuer,
};
use fluidos_controller::readiness::ReadinessGate;
use fluidos_peer_access::credentials::{Credentials, CredentialsConfig};
use fluidos_peer_access::grant::PeeringGrant;
use fluidos_rear_client::{ADDRESS_FORM, ClientConfig, ProviderAddress};
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::cli::Component;
use crate::context::Context;

/// Runs the consumer controllers until `shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>, shutdown: CancellationToken) -> Result<(), Error> {
    let mut cfg = ConsumerConfig::new(ctx.namespace(), ctx.identity.clone());
    cfg.static_peers = parse_peers(&ctx.args.peers)?;
    // Pinned providers (a fingerprint from --peers or a KnownCluster) are
    // called over TLS presenting this node's key: they know the buyer by it.
    cfg.node_key = ctx.node_key.clone();
    cfg.peer_timeout = Duration::from_millis(ctx.args.peer_timeout_ms);
    cfg.discovery_concurrency = usize::from(ctx.args.discovery_concurrency);
    let rear = ClientConfig {
        list_timeout: cfg.peer_timeout,
        reserve_timeout: Duration::from_millis(ctx.args.reserve_timeout_ms),
        purchase_timeout: Duration::from_millis(ctx.args.purchase_timeout_ms),
        ..ClientConfig::default()
    };
    let offloading = match ctx.args.service_delivery {
        ServiceDelivery::Rear => None,
        ServiceDelivery::Liqo => Some(offloading_issuer(&ctx, &shutdown).await?),
    };
    let consumer = ConsumerContext::with_offloading(
        ctx.client.clone(),
        cfg,
        rear.clone(),
        ctx.metrics.clone(),
        offloading.clone(),
    )
    .map_err(|e| Error::Setup(e.to_string()))?;
    // Ready once every consumer controller has listed its objects: a Solver
    // created after /readyz says 200 is acted on at once (the first list of a
    // freshly installed CRD can wait out a 429 from the API server).
    let ready = ReadinessGate::new();
    // The K8Slice Allocation controller (Liqo peering), both sides.
    let peering_ready = ReadinessGate::new();
    // The Service Allocation controller (delivery without Liqo), buyer side.
    let services_ready = ReadinessGate::new();
    let report = {
        let (ctx, ready, peering_ready, services_ready) = (
            ctx.clone(),
            ready.clone(),
            peering_ready.clone(),
            services_ready.clone(),
        );
        tokio::spawn(async move {
            ready.wait().await;
            peering_ready.wait().await;
            services_ready.wait().await;
            ctx.readiness.mark_ready(Component::RearManager);
        })
    };
    let services = fluidos_service_allocation::consumer::ConsumerConfig {
        namespace: ctx.namespace().to_owned(),
        identity: ctx.identity.clone(),
        rear: rear.clone(),
        node_key: ctx.node_key.clone(),
        offloading: offloading.clone(),
    };
    let liqo = fluidos_peering::liqo_watch::LiqoPresence::default();
    let peering = peering_config(&ctx, &liqo);
    let peering_on = ctx.args.peering;
    let slice_class_task = peering_on.then(|| spawn_slice_class(&ctx, &liqo, &shutdown));
    let liqo_report = peering_on.then(|| tokio::spawn(report_liqo(ctx.clone(), liqo)));
    tracing::info!(component = %Component::RearManager, "component started");
    let peering_shutdown = shutdown.clone();
    let services_shutdown = shutdown.clone();
    let (_, _, services_result) = tokio::join!(
        fluidos_consumer::run_with_readiness(consumer, ready, async move {
            shutdown.cancelled().await;
        }),
        async {
            if peering_on {
                fluidos_peering::run(
                    ctx.client.clone(),
                    peering,
                    &ctx.metrics,
                    peering_ready,
                    async move { peering_shutdown.cancelled_owned().await },
                )
                .await;
            } else {
                // Without Liqo (--peering=false): no K8Slice allocation.
                peering_ready.set_ready();
            }
        },
        fluidos_service_allocation::consumer::run(
            ctx.client.clone(),
            services,
            &ctx.metrics,
            services_ready,
            async move { services_shutdown.cancelled_owned().await },
        ),
    );
    if let Err(e) = services_result {
        tracing::error!(error = %e, "service allocation controller could not start");
    }
    report.abort();
    if let Some(task) = liqo_report {
        task.abort();
    }
    if let Some(Err(e)) = match slice_class_task {
        Some(task) => Some(task.await),
        None => None,
    } {
        tracing::error!(error = %e, "the ResourceSlice class controller ended abnormally");
    }
    tracing::info!(component = %Component::RearManager, "component stopped");
    Ok(())
}

/// The Allocation controller's configuration (Liqo peering, both sides).
fn peering_config(
    ctx: &Context,
    liqo: &fluidos_peering::liqo_watch::LiqoPresence,
) -> fluidos_peering::PeeringConfig {
    fluidos_peering::PeeringConfig {
        liqo: liqo.clone(),
        namespace: ctx.namespace().to_owned(),
        identity: ctx.identity.clone(),
        local_cluster_id: ctx.identity.liqo_id().unwrap_or_default().to_owned(),
        networking: ctx
            .args
            .liqo_networking
            .then(|| fluidos_peering::NetworkingConfig {
                server_service_type: ctx.args.liqo_gateway_service_type.into(),
            }),
    }
}

/// Issues the kubeconfigs the sellers of Services bought to be delivered
/// by Liqo peer with: the gateway's peer credentials (the seller's account
/// named after its node ID and owned by its key, Liqo's peering-user rights
/// in its tenant namespace only), which the gateway keeps while such a
/// Contract lives and revokes after.
async fn offloading_issuer(
    ctx: &Arc<Context>,
    shutdown: &CancellationToken,
) -> Result<OffloadingIssuer, Error> {
    let gateway = super::rear_gateway::config(ctx).await?;
    // Never a kubeconfig naming an address the seller cannot reach.
    if let Some(why) = gateway.k8slice_refusal.clone() {
        tracing::warn!("Services bought to be delivered by Liqo cannot be peered with: {why}");
        return Ok(Arc::new(move |_grant: OffloadingGrant| {
            let why = why.clone();
            Box::pin(async move { Err(why) })
        }));
    }
    let Some(own_cluster) = ctx.identity.liqo_id().map(str::to_owned) else {
        return Err(Error::Setup(
            "--service-delivery liqo needs this cluster's Liqo cluster ID".into(),
        ));
    };
    // The gateway's accounts, minus its start-up clean-up of earlier
    // versions' grants (the gateway's job).
    let config = CredentialsConfig {
        remove_stale_grants: false,
        ..gateway.credentials()
    };
    let (credentials, driver) = Credentials::new(ctx.client.clone(), config);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = driver => {}
            () = stop.cancelled() => {}
        }
    });
    let credentials = Arc::new(credentials);
    Ok(Arc::new(move |grant: OffloadingGrant| {
        let (credentials, own_cluster) = (credentials.clone(), own_cluster.clone());
        Box::pin(async move {
            credentials
                .issue(
                    &grant.seller_node_id,
                    &grant.seller_key,
                    &own_cluster,
                    grant
                        .seller_cluster_id
                        .as_deref()
                        .map(PeeringGrant::TenantNamespace),
                )
                .await
                .map_err(|e| e.to_string())
        })
    }))
}

/// `--peers`: each `host:port`, or `host:port#sha256:<64 hex>` for a
/// provider called over TLS pinned to that key.
fn parse_peers(peers: &[String]) -> Result<Vec<ProviderAddress>, Error> {
    peers
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse().map_err(|e| {
                Error::Setup(format!(
                    "--peers: {e} (each peer is {ADDRESS_FORM}, comma-separated)"
                ))
            })
        })
        .collect()
}

/// Says in `/readyz` (degraded, still 200: sales and Services go on) which
/// Liqo kinds the peering controllers find not served, for as long as they
/// are not.
async fn report_liqo(ctx: Arc<Context>, liqo: fluidos_peering::liqo_watch::LiqoPresence) {
    let mut missing = liqo.subscribe();
    loop {
        let why = fluidos_peering::liqo_watch::unavailable(&missing.borrow_and_update());
        ctx.readiness.set_degraded(Component::RearManager, why);
        if missing.changed().await.is_err() {
            return;
        }
    }
}

/// Starts the provider's ResourceSlice class controller (grants what was
/// sold) and its Tenant cleanup (a consumer's Tenant goes once nothing is
/// sold to it). Not part of readiness: on a cluster without Liqo their
/// watches wait for the CRDs.
fn spawn_slice_class(
    ctx: &Arc<Context>,
    liqo: &fluidos_peering::liqo_watch::LiqoPresence,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let slice_class = fluidos_peering::slice_class::SliceClassConfig {
        liqo: liqo.clone(),
        namespace: ctx.namespace().to_owned(),
        identity: ctx.identity.clone(),
        class: fluidos_peering::slice_class::FLUIDOS_CLASS.to_owned(),
    };
    let tenant_cleanup = fluidos_peering::tenant_cleanup::TenantCleanupConfig {
        liqo: liqo.clone(),
        namespace: ctx.namespace().to_owned(),
        identity: ctx.identity.clone(),
    };
    {
        let (client, metrics, shutdown) =
            (ctx.client.clone(), ctx.metrics.clone(), shutdown.clone());
        tokio::spawn(async move {
            // Stopped outright at shutdown: their watches may be backing off
            // (no Liqo CRDs), and all their state is in the API server.
            let stop = shutdown.clone();
            let cleanup_shutdown = shutdown.clone();
            tokio::select! {
                ((), ()) = async {
                    tokio::join!(
                        fluidos_peering::slice_class::run(
                            client.clone(),
                            slice_class,
                            &metrics,
                            ReadinessGate::new(),
                            async move { shutdown.cancelled_owned().await },
                        ),
                        fluidos_peering::tenant_cleanup::run(
                            client,
                            tenant_cleanup,
                            &metrics,
                            ReadinessGate::new(),
                            async move { cleanup_shutdown.cancelled_owned().await },
                        ),
                    )
                } => {}
                () = stop.cancelled() => {}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn peers_are_plain_or_pinned_and_a_bad_one_names_the_flag() {
        let peers = parse_peers(&[
            "10.0.0.1:30000".into(),
            format!(" 10.0.0.2:30000#{FP}"),
            String::new(),
        ])
        .unwrap();
        assert_eq!(
            peers,
            [
                ProviderAddress::plain("10.0.0.1:30000"),
                ProviderAddress::pinned("10.0.0.2:30000", FP.parse().unwrap()),
            ]
        );
        for bad in [
            "10.0.0.1",
            "10.0.0.1:30000#sha256:00",
            "http://10.0.0.1:30000",
        ] {
            let e = parse_peers(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains("--peers"), "{e}");
            assert!(e.contains(ADDRESS_FORM), "{e}");
        }
    }
}

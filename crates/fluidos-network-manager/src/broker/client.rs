//! One Broker object's client: reads its Secrets, connects (TLS with the
//! client certificate, SASL EXTERNAL), publishes and consumes until the
//! connection breaks, then reconnects with backoff; its status follows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fluidos_api::network::Broker;
use futures::StreamExt;
use kube::{Api, ResourceExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer, Event};
use tokio_util::sync::CancellationToken;

use super::connections::{BrokerConnections, Link, Row};
use super::error::BrokerError;
use super::message;
use super::spec::{self, Plan};
use super::status::{Connection as State, StatusWriter, next_backoff};
use super::tls::{self, TlsMaterial};
use super::{ANNOUNCEMENTS_EXCHANGE, BrokerSettings, RULES_EXCHANGE};
use crate::advertisement;
use crate::manager::PeerSink;
use crate::metrics::NetworkMetrics;

/// Deliveries the broker may push before they are acknowledged: bounds
/// what a flood of messages can queue in this process. The size check runs
/// after a whole body is received, so what one client can hold is
/// `PREFETCH` times the broker's `max_message_size` (see the Broker section
/// of docs/network-manager.md: set it to 64 KiB).
const PREFETCH: u16 = 4;

/// What every Broker's client shares.
pub(crate) struct Shared {
    pub(crate) client: kube::Client,
    pub(crate) settings: BrokerSettings,
    pub(crate) identity: fluidos_api::NodeIdentity,
    pub(crate) fingerprint: Option<fluidos_rear_identity::Fingerprint>,
    pub(crate) metrics: NetworkMetrics,
    pub(crate) peers: PeerSink,
    pub(crate) connections: BrokerConnections,
}

/// Runs the client of `broker` until `stop`; `row` follows its connection.
pub(crate) async fn run(shared: Arc<Shared>, broker: Broker, row: Row, stop: CancellationToken) {
    let name = broker.name_any();
    let api: Api<Broker> = Api::namespaced(shared.client.clone(), &shared.settings.namespace);
    let mut status = StatusWriter::new(
        api,
        &name,
        broker.metadata.generation,
        shared.metrics.clone(),
    );
    let plan = match spec::plan(&broker.spec, &shared.identity, shared.fingerprint.as_ref()) {
        Ok(plan) => plan,
        Err(e) => {
            let e = BrokerError::from(e);
            tracing::warn!(broker = %name, error = %e.chain(), "Broker spec cannot work; waiting for it to change");
            row.set(Link::Down(e.reason()));
            status
                .report(&State::Down {
                    reason: e.reason(),
                    message: e.chain(),
                })
                .await;
            // Nothing to retry: the controller restarts this client when
            // the spec changes.
            stop.cancelled().await;
            return;
        }
    };
    tracing::info!(broker = %name, endpoint = %plan.endpoint, role = ?plan.role, "broker client started");
    let mut backoff: Option<Duration> = None;
    loop {
        let started = Instant::now();
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            r = attempt(&shared, &broker, &plan, &mut status, &row, &stop) => r,
        };
        let Err(e) = outcome else { return };
        // A session that lived long enough starts the backoff afresh.
        if started.elapsed() >= shared.settings.backoff_max {
            backoff = None;
        }
        let delay = next_backoff(
            backoff,
            shared.settings.backoff_min,
            shared.settings.backoff_max,
            jitter(),
        );
        backoff = Some(delay);
        tracing::warn!(broker = %name, reason = e.reason(), error = %e.chain(), retry_in = ?delay, "broker not connected; will retry");
        row.set(Link::Down(e.reason()));
        status
            .report(&State::Down {
                reason: e.reason(),
                message: e.chain(),
            })
            .await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One connection attempt and, if it connects, its session. `Ok` only
/// when stopped.
async fn attempt(
    shared: &Shared,
    broker: &Broker,
    plan: &Plan,
    status: &mut StatusWriter,
    row: &Row,
    stop: &CancellationToken,
) -> Result<(), BrokerError> {
    let result = async {
        let material = tls::load(
            &shared.client,
            &shared.settings.namespace,
            &broker.spec.clcert,
            &broker.spec.cacert,
        )
        .await?;
        Session::open(shared, broker, plan, material).await
    }
    .await;
    let session = match result {
        Ok(s) => s,
        Err(e) => {
            shared.metrics.broker_connect(e.reason());
            return Err(e);
        }
    };
    shared.metrics.broker_connect("connected");
    tracing::info!(broker = %broker.name_any(), endpoint = %plan.endpoint, user = %session.user, "connected to the broker");
    row.set(Link::Up);
    status
        .report(&State::Up {
            user: session.user.clone(),
        })
        .await;
    session.serve(shared, plan, stop).await
}

/// An open connection with its channel (and consumer, for subscribers).
struct Session {
    connection: Connection,
    channel: Channel,
    consumer: Option<Consumer>,
    user: String,
}

impl Session {
    async fn open(
        shared: &Shared,
        broker: &Broker,
        plan: &Plan,
        material: TlsMaterial,
    ) -> Result<Session, BrokerError> {
        let settings = &shared.settings;
        let endpoint = plan.endpoint.to_string();
        let uri = AMQPUri {
            scheme: AMQPScheme::AMQPS,
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo::default(),
                host: plan.endpoint.host.clone(),
                port: plan.endpoint.port,
            },
            vhost: "/".into(),
            query: AMQPQueryString {
                heartbeat: Some(settings.heartbeat),
                connection_timeout: u64::try_from(settings.connect_timeout.as_millis()).ok(),
                auth_mechanism: Some(lapin::uri::SASLMechanism::External),
                ..AMQPQueryString::default()
            },
        };
        let properties = ConnectionProperties::default().with_connection_name(
            format!(
                "fluidos-node {} (Broker {})",
                shared.identity.node_id,
                broker.name_any()
            )
            .into(),
        );
        let connect_error = |source| BrokerError::Connect {
            endpoint: endpoint.clone(),
            source,
        };
        let runtime = lapin::runtime::default_runtime().map_err(connect_error)?;
        let connection = tokio::time::timeout(
            settings.connect_timeout,
            Connection::connect_uri_with_config(uri, properties, material.tls_config(), runtime),
        )
        .await
        .map_err(|_| BrokerError::ConnectTimeout {
            endpoint: endpoint.clone(),
            timeout: settings.connect_timeout,
        })?
        .map_err(connect_error)?;
        let step = |step| move |source| BrokerError::Channel { step, source };
        let channel = connection
            .create_channel()
            .await
            .map_err(step("opening a channel"))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(step("enabling publisher confirms"))?;
        let user = material.common_name.clone();
        let consumer = if plan.role.subscribes() {
            channel
                .basic_qos(PREFETCH, BasicQosOptions::default())
                .await
                .map_err(step("setting the prefetch window"))?;
            let consumer = channel
                .basic_consume(
                    user.clone().into(),
                    format!("fluidos-{}", shared.identity.node_id).into(),
                    BasicConsumeOptions {
                        no_local: true,
                        ..BasicConsumeOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|source| BrokerError::Consume {
                    queue: user.clone(),
                    source,
                })?;
            Some(consumer)
        } else {
            None
        };
        Ok(Session {
            connection,
            channel,
            consumer,
            user,
        })
    }

    /// Publishes every interval (at once first) and hands announcements
    /// to the KnownCluster writer, until the connection breaks (`Err`) or
    /// `stop` (`Ok`, after closing the connection).
    async fn serve(
        mut self,
        shared: &Shared,
        plan: &Plan,
        stop: &CancellationToken,
    ) -> Result<(), BrokerError> {
        let mut tick = tokio::time::interval(shared.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut events = Box::pin(self.connection.events_listener());
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    let close = self.connection.close(200, "node stopping".into());
                    let _ = tokio::time::timeout(Duration::from_secs(2), close).await;
                    return Ok(());
                }
                _ = tick.tick() => {
                    if let Some(body) = &plan.announcement {
                        self.publish(shared, ANNOUNCEMENTS_EXCHANGE, body).await?;
                    }
                    if let Some(body) = &plan.rule {
                        self.publish(shared, RULES_EXCHANGE, body).await?;
                    }
                }
                delivery = next_delivery(&mut self.consumer) => match delivery {
                    Some(Ok(d)) => {
                        handle(shared, &d.data);
                        d.ack(BasicAckOptions::default()).await.map_err(BrokerError::Lost)?;
                    }
                    Some(Err(e)) => return Err(BrokerError::Lost(e)),
                    None => return Err(BrokerError::ConsumerCancelled(self.user.clone())),
                },
                event = events.next() => {
                    if let Some(Event::Error(e)) = event {
                        return Err(BrokerError::Lost(e));
                    }
                }
            }
        }
    }

    /// Publishes `body` and waits for the broker's confirm. An unconfirmed
    /// message (nack, timeout) is counted and logged; the next interval
    /// publishes again. A failed publish ends the session.
    async fn publish(
        &self,
        shared: &Shared,
        exchange: &'static str,
        body: &[u8],
    ) -> Result<(), BrokerError> {
        let settings = &shared.settings;
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_user_id(self.user.clone().into())
            .with_expiration(settings.message_ttl.as_millis().to_string().into());
        let failed = |source| {
            shared.metrics.broker_published(exchange, false);
            if self.connection.status().connected() {
                BrokerError::Publish { exchange, source }
            } else {
                BrokerError::Lost(source)
            }
        };
        let confirm = self
            .channel
            .basic_publish(
                exchange.into(),
                "".into(),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .map_err(failed)?;
        match tokio::time::timeout(settings.confirm_timeout, confirm).await {
            Ok(Ok(c)) if c.is_ack() => {
                shared.metrics.broker_published(exchange, true);
                Ok(())
            }
            Ok(Ok(_)) => {
                shared.metrics.broker_published(exchange, false);
                tracing::warn!(
                    exchange,
                    "the broker did not accept a message (nack); publishing again next interval"
                );
                Ok(())
            }
            Ok(Err(e)) => Err(failed(e)),
            Err(_) => {
                shared.metrics.broker_published(exchange, false);
                tracing::warn!(exchange, timeout = ?settings.confirm_timeout, "no publisher confirm; publishing again next interval");
                Ok(())
            }
        }
    }
}

async fn next_delivery(
    consumer: &mut Option<Consumer>,
) -> Option<lapin::Result<lapin::message::Delivery>> {
    match consumer {
        Some(c) => c.next().await,
        None => std::future::pending().await,
    }
}

/// Hands one received message to the KnownCluster writer, or counts why not.
fn handle(shared: &Shared, body: &[u8]) {
    let metrics = &shared.metrics;
    metrics.broker_received();
    let reason = match message::parse_announcement(body) {
        Err(d) => {
            tracing::debug!(reason = d.reason(), error = %d, "broker message dropped");
            d.reason()
        }
        Ok(ad) if advertisement::is_own(&ad, &shared.identity) => "own",
        Ok(ad) => {
            if shared.peers.offer(ad) {
                return;
            }
            "backlog"
        }
    };
    metrics.broker_dropped(reason);
}

/// A number in `0..1` that differs between calls and processes.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    f64::from(u32::try_from(h.finish() >> 32).unwrap_or(u32::MAX)) / f64::from(u32::MAX)
}

//! RESERVE: validate, hold capacity on the flavor's ledger, persist a Transaction.
//!
//! Two effects, issued concurrently, each safe to interrupt:
//! - create the Transaction CR (name = transaction ID);
//! - append a `Held` ledger entry with a compare-and-swap on the Flavor.
//!
//! If only the Transaction is written, purchase rejects it and the sweeper
//! deletes it at expiry; if only the hold is written (its Transaction create
//! failed), the hold is released, or else expires. A repeated RESERVE that
//! finds a hold without Transaction waits briefly, then drops it as orphan.

use std::collections::BTreeMap;

use fluidos_api::configuration::{ConfigurationData, K8SliceConfiguration, ServiceConfiguration};
use fluidos_api::flavor::{FlavorTypeData, K8Slice, ServiceFlavor};
use fluidos_api::ledger::{
    self, LedgerEntry, LedgerResources, LedgerState, PartitionError, Resources,
};
use fluidos_api::rear::{ReserveRequest, WireConfiguration, WireTransaction};
use fluidos_api::reservation::TransactionSpec;
use fluidos_api::{Configuration, Flavor, FlavorTypeIdentifier, Transaction};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};

use crate::book::Decision;
use crate::catalog::remaining;
use fluidos_controller::api_error::is_not_found;

use crate::error::ApiError;
use crate::{State, decode, labels, time};

/// What the buyer asks of the flavor, validated against its type.
#[derive(Debug, Clone)]
pub(crate) enum Want {
    /// A partition, or the whole flavor when `None`.
    K8Slice(Option<K8SliceConfiguration>),
    /// A service instance.
    Service,
}

/// The flavor's decoded type, with 400 for types REAR does not sell.
pub(crate) fn flavor_data(f: &Flavor) -> Result<FlavorTypeData, ApiError> {
    match f.spec.flavor_type.identifier() {
        Some(FlavorTypeIdentifier::K8Slice | FlavorTypeIdentifier::Service) => {
            f.spec.flavor_type.parse().map_err(|e| {
                tracing::warn!(flavor = %f.name_any(), error = %e, "undecodable flavor");
                ApiError::internal(format!("flavor {} is malformed: {e}", f.name_any()))
            })
        }
        _ => Err(ApiError::bad_request(format!(
            "Flavor type not supported: {:?}",
            f.spec.flavor_type.type_identifier
        ))
        .field("flavorID")),
    }
}

/// Checks a service configuration: hosting policy offered, data valid for the template.
fn check_service(s: &ServiceFlavor, c: &ServiceConfiguration) -> Result<(), ApiError> {
    if let Some(p) = c.hosting_policy
        && !s.hosting_policies.contains(&p)
    {
        return Err(ApiError::bad_request(format!(
            "hosting policy {p:?} is not offered (offered: {:?})",
            s.hosting_policies
        ))
        .field("configuration.data.hostingPolicy"));
    }
    let validator = jsonschema::validator_for(&s.configuration_template).map_err(|e| {
        ApiError::internal(format!(
            "the flavor's configurationTemplate is not a valid JSON Schema: {e}"
        ))
    })?;
    let errors: Vec<_> = validator.iter_errors(&c.configuration_data).collect();
    if let Some(first) = errors.first() {
        let pointer = first.instance_path().to_string();
        let field = format!(
            "configuration.data.configurationData{}",
            pointer.replace('/', ".")
        );
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(ApiError::bad_request(format!(
            "configurationData does not match the flavor's configurationTemplate: {}",
            all.join("; ")
        ))
        .field(field));
    }
    Ok(())
}

/// Validates the request against the flavor; returns the CR configuration and what is wanted.
pub(crate) fn validate(
    f: &Flavor,
    req: &ReserveRequest,
) -> Result<(Option<Configuration>, Want), ApiError> {
    let data = flavor_data(f)?;
    let flavor_type = match &data {
        FlavorTypeData::K8Slice(_) => FlavorTypeIdentifier::K8Slice,
        FlavorTypeData::Service(_) => FlavorTypeIdentifier::Service,
    };
    let parsed = match &req.configuration {
        None => None,
        Some(wc) => {
            match FlavorTypeIdentifier::from_wire(&wc.type_) {
                Some(t) if t == flavor_type => {}
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "Configuration type not supported: {:?} for a {} flavor",
                        wc.type_,
                        flavor_type.wire_name()
                    ))
                    .field("configuration.type"));
                }
            }
            Some(wc.to_crd()?)
        }
    };
    match (data, parsed) {
        (FlavorTypeData::K8Slice(_), None) => Ok((None, Want::K8Slice(None))),
        (FlavorTypeData::K8Slice(_), Some((crd, ConfigurationData::K8Slice(k)))) => {
            Ok((Some(crd), Want::K8Slice(Some(k))))
        }
        (FlavorTypeData::Service(s), None) => {
            // Upstream bug 4 (always 500) fixed: no configuration means the
            // default policy and `{}`, which must satisfy the template.
            check_service(
                &s,
                &ServiceConfiguration {
                    hosting_policy: None,
                    configuration_data: serde_json::json!({}),
                },
            )?;
            Ok((None, Want::Service))
        }
        (FlavorTypeData::Service(s), Some((crd, ConfigurationData::Service(c)))) => {
            check_service(&s, &c)?;
            Ok((Some(crd), Want::Service))
        }
        _ => Err(
            ApiError::bad_request("configuration does not match the flavor type")
                .field("configuration.type"),
        ),
    }
}

fn partition_error(e: PartitionError) -> ApiError {
    match e {
        PartitionError::Insufficient { .. } => ApiError::conflict(e.to_string()),
        PartitionError::Quantity(q) => {
            ApiError::bad_request(q.to_string()).field("configuration.data")
        }
        PartitionError::Negative(r) => ApiError::bad_request(e.to_string()).field(format!(
            "configuration.data.{}",
            r.split('/').next().unwrap_or(r)
        )),
        PartitionError::BelowMinimum { resource, .. }
        | PartitionError::OffStep { resource, .. } => {
            ApiError::bad_request(e.to_string()).field(format!("configuration.data.{resource}"))
        }
    }
}

/// What a K8Slice hold takes, checked against what remains now.
pub(crate) fn k8slice_take(
    k: &K8Slice,
    want: Option<&K8SliceConfiguration>,
    entries: &[LedgerEntry],
    now: &str,
) -> Result<LedgerResources, ApiError> {
    let left = remaining(k, entries, now).map_err(ApiError::internal)?;
    match want {
        Some(c) => {
            let requested = Resources::of_configuration(c)
                .map_err(|e| ApiError::bad_request(e.to_string()).field("configuration.data"))?;
            ledger::check_partition(requested, left, &k.policies.partitionability)
                .map_err(partition_error)?;
            Ok(LedgerResources::from(c))
        }
        None => {
            let total = Resources::of_characteristics(&k.characteristics)
                .map_err(|e| ApiError::internal(e.to_string()))?;
            if left != total {
                return Err(ApiError::conflict(
                    "the flavor is partly reserved or sold; send a configuration for a partition",
                ));
            }
            let c = &k.characteristics;
            Ok(LedgerResources {
                cpu: c.cpu.0.clone(),
                memory: c.memory.0.clone(),
                pods: c.pods.0.clone(),
                gpu: c.gpu.as_ref().map(|g| g.cores.0.clone()),
                storage: c.storage.as_ref().map(|s| s.0.clone()),
            })
        }
    }
}

/// Decides a new hold on the current ledger: the entry to append, or an error.
fn take(
    f: &Flavor,
    want: &Want,
    entries: &[LedgerEntry],
    now: &str,
) -> Result<Option<LedgerResources>, ApiError> {
    if !f.spec.availability {
        return Err(ApiError::conflict("flavor is not available"));
    }
    match (flavor_data(f)?, want) {
        (FlavorTypeData::K8Slice(k), Want::K8Slice(c)) => {
            k8slice_take(&k, c.as_ref(), entries, now).map(Some)
        }
        // A service instance takes no capacity; the hold only records the buyer.
        (FlavorTypeData::Service(_), Want::Service) => Ok(None),
        _ => Err(ApiError::conflict("the flavor changed type; retry")),
    }
}

/// The live hold of `buyer` on this flavor, if any.
fn live_hold<'a>(entries: &'a [LedgerEntry], buyer: &str, now: &str) -> Option<&'a LedgerEntry> {
    entries
        .iter()
        .find(|e| e.state == LedgerState::Held && e.buyer_id == buyer && ledger::is_live(e, now))
}

fn ledger_of(f: &Flavor) -> &[LedgerEntry] {
    f.status
        .as_ref()
        .and_then(|s| s.ledger.as_deref())
        .unwrap_or_default()
}

/// A fresh transaction ID: `<32 hex random>-<unix nanos>`.
fn new_transaction_id() -> Result<String, ApiError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random)
        .map_err(|e| ApiError::internal(format!("no randomness for a transaction ID: {e}")))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    Ok(fluidos_api::naming::transaction_id(&random, nanos))
}

enum Outcome {
    /// Our hold was written.
    Held,
    /// The same buyer already holds this flavor under another transaction.
    Existing,
}

enum Refresh {
    Done(Box<WireTransaction>),
    /// The hold has no Transaction (or vanished): reserve anew.
    Gone,
}

impl State {
    /// Handles a RESERVE body.
    pub(crate) async fn reserve(&self, body: &[u8]) -> Result<WireTransaction, ApiError> {
        let req: ReserveRequest = decode::json(body)?;
        // The REAR handler's span declares the field; a sale's log lines carry it.
        tracing::Span::current().record("flavor_id", req.flavor_id.as_str());
        if req.flavor_id.is_empty() {
            return Err(ApiError::bad_request("flavorID is required").field("flavorID"));
        }
        if req.buyer.id.is_empty() {
            return Err(ApiError::bad_request("the buyer's ID is required").field("buyerID.ID"));
        }
        let Some(liqo_id) = req.buyer.liqo_id().map(str::to_owned) else {
            return Err(ApiError::bad_request("Error: LiqoID not provided")
                .field("buyerID.additionalInformation.liqoID"));
        };
        let mut flavor = self.book.cached_or_fetch(&req.flavor_id).await?;
        let (crd_config, want) = validate(&flavor, &req)?;

        for round in 0..4 {
            if round > 0 {
                flavor = self.book.fetch(&req.flavor_id).await?;
            }
            let now = time::now_string();
            if let Some(hold) = live_hold(ledger_of(&flavor), &req.buyer.id, &now) {
                let tx_id = hold.transaction_id.clone();
                match self.refresh(&req, &flavor, &tx_id).await? {
                    Refresh::Done(tx) => return Ok(*tx),
                    Refresh::Gone => {
                        self.release(&flavor, &tx_id).await?;
                        continue;
                    }
                }
            }
            // Cheap early answer from the cache; confirmed fresh before a 409.
            if let Err(e) = take(&flavor, &want, ledger_of(&flavor), &now) {
                if round == 0 && e.status == axum::http::StatusCode::CONFLICT {
                    continue;
                }
                return Err(e);
            }
            let tx_id = new_transaction_id()?;
            let expiration = time::expiry_after(self.cfg.transaction_ttl);
            let tx = self.transaction_object(
                &flavor,
                &req,
                &liqo_id,
                &tx_id,
                &expiration,
                crd_config.clone(),
            );
            let buyer = req.buyer.id.clone();
            let entry_tx = tx_id.clone();
            let entry_exp = expiration.clone();
            let hold = self.book.update(&req.flavor_id, |f, entries, now| {
                if live_hold(entries, &buyer, now).is_some() {
                    return Ok(Decision::Keep(Outcome::Existing));
                }
                let resources = take(f, &want, entries, now)?;
                // Dead holds are dropped while we are writing anyway.
                entries.retain(|e| ledger::is_live(e, now));
                entries.push(LedgerEntry {
                    transaction_id: entry_tx.clone(),
                    buyer_id: buyer.clone(),
                    state: LedgerState::Held,
                    resources,
                    expiration_time: Some(entry_exp.clone()),
                    contract: None,
                });
                Ok(Decision::Write(Outcome::Held))
            });
            // Both writes at once: one API round trip of latency instead of two.
            // A hold may thus briefly exist before its Transaction; `refresh`
            // waits for it before calling a hold an orphan.
            let (created, outcome) = tokio::join!(self.create_transaction(&tx), hold);
            let outcome = match (created, outcome) {
                (Ok(()), o) => o,
                (Err(e), Ok(Outcome::Held)) => {
                    self.release_fresh(&req.flavor_id, &tx_id).await;
                    return Err(e);
                }
                (Err(_), Ok(Outcome::Existing)) => continue,
                (Err(_), Err(o)) => return Err(o),
            };
            match outcome {
                Ok(Outcome::Held) => {
                    tracing::info!(transaction = %tx_id, flavor = %req.flavor_id, buyer = %req.buyer.id, "reserved");
                    return Ok(WireTransaction {
                        transaction_id: tx_id,
                        flavor_id: req.flavor_id.clone(),
                        configuration: req.configuration.clone(),
                        buyer: req.buyer.clone(),
                        cluster_id: liqo_id,
                        expiration_time: expiration,
                    });
                }
                Ok(Outcome::Existing) => {
                    // A concurrent request of the same buyer won: answer with its transaction.
                    self.delete_transaction(&tx_id).await;
                }
                Err(e) => {
                    self.delete_transaction(&tx_id).await;
                    return Err(e);
                }
            }
        }
        Err(ApiError::unavailable(
            "the reservation kept racing with other changes to the flavor; retry",
        ))
    }

    fn transaction_object(
        &self,
        flavor: &Flavor,
        req: &ReserveRequest,
        liqo_id: &str,
        tx_id: &str,
        expiration: &str,
        configuration: Option<Configuration>,
    ) -> Transaction {
        let spec = TransactionSpec {
            flavor_id: req.flavor_id.clone(),
            buyer: req.buyer.to_crd(),
            cluster_id: liqo_id.to_owned(),
            configuration,
            expiration_time: Some(expiration.to_owned()),
        };
        Transaction {
            metadata: ObjectMeta {
                name: Some(tx_id.to_owned()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some(BTreeMap::from([(
                    labels::SIDE.to_owned(),
                    labels::PROVIDER.to_owned(),
                )])),
                // Deleting the flavor garbage-collects its reservations.
                owner_references: flavor.owner_ref(&()).map(|r| vec![r]),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    async fn create_transaction(&self, tx: &Transaction) -> Result<(), ApiError> {
        match self.transactions.create(&PostParams::default(), tx).await {
            Ok(created) => {
                self.recent.remember(created);
                Ok(())
            }
            Err(e) => Err(ApiError::kube("creating the Transaction", &e)),
        }
    }

    /// Best-effort removal of a hold whose Transaction could not be created.
    async fn release_fresh(&self, flavor_id: &str, tx_id: &str) {
        match self.book.fetch(flavor_id).await {
            Ok(f) => {
                if let Err(e) = self.release(&f, tx_id).await {
                    tracing::warn!(transaction = tx_id, error = ?e.body, "releasing a hold");
                }
            }
            Err(e) => tracing::warn!(transaction = tx_id, error = ?e.body, "releasing a hold"),
        }
    }

    /// Best-effort delete; the sweeper retries expired ones.
    pub(crate) async fn delete_transaction(&self, tx_id: &str) {
        self.recent.forget(tx_id);
        match self
            .transactions
            .delete(tx_id, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!(transaction = tx_id, error = %e, "deleting a Transaction"),
        }
    }

    /// Drops the `Held` entry of `tx_id` from the flavor's ledger.
    async fn release(&self, flavor: &Flavor, tx_id: &str) -> Result<(), ApiError> {
        let tx = tx_id.to_owned();
        self.book
            .update_from(&flavor.name_any(), flavor.clone(), move |_, entries, _| {
                Ok(Decision::retain(entries, |e| {
                    !(e.transaction_id == tx && e.state == LedgerState::Held)
                }))
            })
            .await
            .map(|_| ())
    }

    /// Idempotent re-reserve: extend the buyer's existing transaction.
    async fn refresh(
        &self,
        req: &ReserveRequest,
        flavor: &Flavor,
        tx_id: &str,
    ) -> Result<Refresh, ApiError> {
        // The hold's Transaction may still be being created by a concurrent
        // request of the same buyer: give it a moment before calling it gone.
        let mut tries = 0;
        let tx = loop {
            match self.transactions.get(tx_id).await {
                Ok(t) => break t,
                Err(e) if is_not_found(&e) && tries < 10 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) if is_not_found(&e) => return Ok(Refresh::Gone),
                Err(e) => return Err(ApiError::kube("reading the Transaction", &e)),
            }
        };
        let expiration = time::expiry_after(self.cfg.transaction_ttl);
        // The Transaction first: the sweeper must never see it expire before its hold.
        let patch = serde_json::json!({"spec": {"expirationTime": expiration}});
        self.transactions
            .patch(tx_id, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|t| self.recent.remember(t))
            .map_err(|e| ApiError::kube("extending the Transaction", &e))?;
        let id = tx_id.to_owned();
        let exp = expiration.clone();
        let still_held = self
            .book
            .update_from(
                &req.flavor_id,
                flavor.clone(),
                move |_, entries, now| match entries.iter_mut().find(|e| {
                    e.transaction_id == id
                        && e.state == LedgerState::Held
                        && ledger::is_live(e, now)
                }) {
                    Some(e) => {
                        e.expiration_time = Some(exp.clone());
                        Ok(Decision::Write(true))
                    }
                    None => Ok(Decision::Keep(false)),
                },
            )
            .await?;
        if !still_held {
            return Ok(Refresh::Gone);
        }
        tracing::info!(transaction = %tx_id, buyer = %req.buyer.id, "re-reserve: extended the existing transaction");
        Ok(Refresh::Done(Box::new(WireTransaction {
            transaction_id: tx_id.to_owned(),
            flavor_id: tx.spec.flavor_id.clone(),
            // As upstream: the original configuration, not the new request's.
            configuration: tx
                .spec
                .configuration
                .as_ref()
                .map(WireConfiguration::from_crd)
                .transpose()
                .map_err(|e| ApiError::internal(e.to_string()))?,
            buyer: req.buyer.clone(),
            cluster_id: tx.spec.cluster_id.clone(),
            expiration_time: expiration,
        })))
    }
}

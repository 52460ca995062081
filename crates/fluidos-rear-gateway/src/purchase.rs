//! PURCHASE: turn a live hold into a sale and create the Contract and Allocation.
//!
//! Order of effects, each idempotent so a crash anywhere is repaired by the
//! buyer simply retrying:
//! 1. issue peering credentials (server-side apply + TokenRequest);
//! 2. compare-and-swap the ledger entry `Held` → `Sold` with the contract name;
//! 3. create the Contract (AlreadyExists → read it back), with an empty
//!    `peeringTargetCredentials.kubeconfig`;
//! 4. create the Allocation (AlreadyExists is fine);
//! 5. answer, with the kubeconfig from memory;
//! 6. in the background: write the kubeconfig into the Contract's
//!    credentials Secret (`peering_secret`), then delete the Transaction.
//!
//! After 6, a repeated purchase finds the Contract by its transaction label
//! and the kubeconfig in its Secret. A Secret missing then (a crash before
//! 6) is written again with the buyer's current credentials.

use std::collections::BTreeMap;
use std::sync::Arc;

use fluidos_api::allocation::AllocationSpec;
use fluidos_api::common::HostingPolicy;
use fluidos_api::embedded::EmbeddedFlavor;
use fluidos_api::flavor::FlavorTypeData;
use fluidos_api::ledger::{self, LedgerEntry, LedgerState};
use fluidos_api::naming::hash_prefix;
use fluidos_api::rear::{PurchaseRequest, WireContract};
use fluidos_api::reservation::ContractSpec;
use fluidos_api::service_delivery::{self, ServiceDelivery};
use fluidos_api::{
    Allocation, Contract, Flavor, GenericRef, LiqoCredentials, NodeIdentity,
    NodeIdentityAdditionalInfo, TelemetryServer, Transaction,
};
use kube::ResourceExt;
use kube::api::{ObjectMeta, PostParams};

use crate::book::Decision;
use crate::buyer::{SaleOwner, check_owner};
use crate::catalog::creation_timestamp;
use fluidos_controller::api_error::{is_already_exists, is_not_found};
use fluidos_peer_access::grant::PeeringGrant;

use crate::error::ApiError;
use crate::reserve::flavor_data;
use crate::{State, decode, labels, time};

/// `contract-<flavorID>-<sha256(txID)[:n]>`, dots replaced by dashes.
pub fn contract_name(flavor_id: &str, tx_id: &str, n: usize) -> String {
    format!("contract-{flavor_id}-{}", hash_prefix(tx_id, n)).replace('.', "-")
}

/// `allocation-<flavorID>-<sha256(txID)[:n]>` (dots kept, as upstream).
pub fn allocation_name(flavor_id: &str, tx_id: &str, n: usize) -> String {
    format!("allocation-{flavor_id}-{}", hash_prefix(tx_id, n))
}

/// The hash length whose contract name no other sale of this flavor uses.
///
/// Four hex characters (upstream's length) collide between two sales of the
/// same flavor with probability 1/65536; the ledger lists every sale of the
/// flavor, so a collision is seen here and a longer suffix taken.
fn suffix_len(flavor_id: &str, tx_id: &str, entries: &[LedgerEntry]) -> usize {
    let mut n = 4;
    while n < 64 {
        let name = contract_name(flavor_id, tx_id, n);
        let taken = entries
            .iter()
            .any(|e| e.transaction_id != tx_id && e.contract.as_deref() == Some(name.as_str()));
        if !taken {
            break;
        }
        n += 4;
    }
    n
}

/// A transaction ID usable as a label value and object name.
fn plausible_tx_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-')
}

fn tx_not_found(tx_id: &str) -> ApiError {
    ApiError::not_found(format!("transaction {tx_id:?} not found")).field("transactionID")
}

/// Why a Transaction not sold yet cannot be bought now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UnsoldRefusal {
    /// Its hold (or, without one, the Transaction) has expired: 408.
    Expired,
    /// It holds no capacity any more: 409.
    NoHold,
}

/// Whether an unsold Transaction may be bought at `now` (pure). The hold is
/// authoritative: a cached Transaction may predate a re-reserve that
/// extended both.
fn unsold_refusal(
    hold: Option<&LedgerEntry>,
    tx_expiry: Option<&str>,
    now: &str,
) -> Option<UnsoldRefusal> {
    let expired = match hold {
        Some(e) => !ledger::is_live(e, now),
        None => tx_expiry.is_none_or(time::is_past),
    };
    if expired {
        Some(UnsoldRefusal::Expired)
    } else if hold.is_none() {
        Some(UnsoldRefusal::NoHold)
    } else {
        None
    }
}

/// Upstream's answer to a purchase of an expired transaction.
fn transaction_timeout() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::REQUEST_TIMEOUT,
        "Error: transaction Timeout",
    )
    .field("transactionID")
}

/// Marks transaction `id`'s live hold on flavor `fid` sold under a new
/// Contract name, or keeps the Contract an earlier purchase wrote (pure).
fn mark_sold(
    fid: &str,
    id: &str,
    entries: &mut [LedgerEntry],
    now: &str,
) -> Result<Decision<String>, ApiError> {
    let n = suffix_len(fid, id, entries);
    match entries.iter_mut().find(|e| e.transaction_id == id) {
        Some(e) if e.state == LedgerState::Sold => Ok(Decision::Keep(
            e.contract
                .clone()
                .unwrap_or_else(|| contract_name(fid, id, 4)),
        )),
        Some(e) if ledger::is_live(e, now) => {
            let name = contract_name(fid, id, n);
            e.state = LedgerState::Sold;
            e.contract = Some(name.clone());
            e.expiration_time = None;
            Ok(Decision::Write(name))
        }
        _ => Err(transaction_timeout()),
    }
}

impl State {
    /// Handles a PURCHASE of `tx_id`; `go_consumer` when the caller gets
    /// the Go consumers' peering grant (`crate::go_peering`).
    pub(crate) async fn purchase(
        self: &Arc<Self>,
        tx_id: &str,
        body: &[u8],
        (caller, source): (SaleOwner, Option<std::net::IpAddr>),
        go_consumer: bool,
    ) -> Result<WireContract, ApiError> {
        let req: PurchaseRequest = decode::json_or_default(body)?;
        if !plausible_tx_id(tx_id) {
            return Err(tx_not_found(tx_id));
        }
        crate::limits::check_purchase(&req)?;
        let (tx, from_memory) = match self.open_transaction(tx_id, caller).await? {
            Some(found) => found,
            None => return self.sold_contract(tx_id, caller, &req).await,
        };
        let Some(liqo_id) = self.cfg.liqo_cluster_id.clone().filter(|s| !s.is_empty()) else {
            return Err(ApiError::unavailable(
                "this node's Liqo cluster ID is not known yet; retry later",
            ));
        };
        let flavor_id = tx.spec.flavor_id.clone();
        let mut flavor = self.book.cached_or_fetch(&flavor_id).await?;
        Self::check_service_purchase(&flavor, &req)?;
        let entry_of = |f: &Flavor| -> Option<LedgerEntry> {
            f.status
                .as_ref()
                .and_then(|s| s.ledger.as_ref())
                .and_then(|l| l.iter().find(|e| e.transaction_id == tx_id).cloned())
        };
        let mut entry = entry_of(&flavor);
        let now = time::now_string();
        if entry.as_ref().is_none_or(|e| !ledger::is_live(e, &now)) {
            // The watch cache may not have seen the hold yet, or not the sale
            // that another replica made of it just before it expired.
            flavor = self.book.fetch(&flavor_id).await?;
            entry = entry_of(&flavor);
        }
        let sold = entry.as_ref().is_some_and(|e| e.state == LedgerState::Sold);
        if sold && from_memory {
            // A repeated purchase: this process remembers the Transaction,
            // but another replica may have consumed it since (and its
            // Contract may have ended). Only a Transaction still stored
            // may (re)create the Contract.
            match self.transactions.get_opt(tx_id).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    self.recent.forget(tx_id);
                    return self.sold_contract(tx_id, caller, &req).await;
                }
                Err(e) => return Err(ApiError::kube("reading the Transaction", &e)),
            }
        }
        if !sold {
            match unsold_refusal(
                entry.as_ref(),
                tx.spec.expiration_time.as_deref(),
                &time::now_string(),
            ) {
                Some(UnsoldRefusal::Expired) => {
                    self.delete_transaction(tx_id).await;
                    return Err(transaction_timeout());
                }
                Some(UnsoldRefusal::NoHold) => {
                    return Err(ApiError::conflict(
                        "the transaction holds no capacity (its hold was released)",
                    )
                    .field("transactionID"));
                }
                None => {}
            }
            self.check_pods_on_buyer(&flavor, &tx, &req, caller)?;
        }

        // Again at PURCHASE: a hold taken before the setting changed (or on
        // a replica of another version) is not bought with it; a Service
        // delivered by Liqo makes this node a consumer of the buyer.
        // Not for a hold sold already (a repeated purchase): see README.
        if !sold {
            let peers = self.delivers_by_liqo(&flavor, &tx, &req, caller).is_some();
            self.admit_buyer(&flavor, caller, source, peers).await?;
        }
        let buyer_id = tx.spec.buyer.node_id.clone();
        let kubeconfig = self
            .credentials_for(&flavor, &tx, &liqo_id, caller, go_consumer)
            .await?;

        let id = tx_id.to_owned();
        let fid = flavor_id.clone();
        // Decide on the copy that showed the entry (the cache may lag).
        let contract = self
            .book
            .update_from(&flavor_id, flavor.clone(), move |_, entries, now| {
                mark_sold(&fid, &id, entries, now)
            })
            .await?;
        let suffix = contract.rsplit('-').next().map(str::len).unwrap_or(4);

        let liqo_delivery = self.delivers_by_liqo(&flavor, &tx, &req, caller);
        let spec = self.contract_spec(&flavor, &tx, &liqo_id, &req, liqo_delivery.is_some());
        // Independent objects: created concurrently to save a round trip.
        let ((stored, created), ()) = tokio::try_join!(
            self.ensure_contract(&contract, &flavor, spec, caller),
            self.ensure_allocation(&flavor_id, tx_id, suffix, &contract)
        )?;
        if let Some(kubeconfig) = liqo_delivery {
            // Before answering: the seller's reverse peering needs it, and a
            // repeated purchase writes it again (create-or-adopt).
            self.store_buyer_credentials(&stored, kubeconfig).await?;
        }
        // A transaction ID is what buys the hold: logged at debug only.
        tracing::info!(contract = %contract, buyer = %buyer_id, "sold");
        tracing::debug!(transaction = %tx_id, contract = %contract, "sold");
        self.settle(tx_id, &stored, created, kubeconfig).await
    }

    /// The answer to a purchase whose Contract `stored` exists (`created`
    /// by it or by an earlier one), given the `kubeconfig` just issued; the
    /// Secret and the Transaction are seen to after answering.
    async fn settle(
        self: &Arc<Self>,
        tx_id: &str,
        stored: &Contract,
        created: bool,
        kubeconfig: String,
    ) -> Result<WireContract, ApiError> {
        // A new Contract: its Secret is written after the answer (below).
        // One made before (a repeated purchase): the kubeconfig it was sold
        // with, so the buyer keeps getting the same one.
        let (kubeconfig, secret) = if created {
            let secret = crate::peering_secret::credentials_secret(stored, &kubeconfig)?;
            (kubeconfig, Some(secret))
        } else {
            (
                self.contract_kubeconfig(stored, Some(kubeconfig)).await?,
                None,
            )
        };
        // The sale is complete; storing its credentials and consuming the
        // Transaction need not delay the answer (a Secret create is an API
        // round trip with an etcd write: about 5 ms even on loopback). If
        // this process dies first, the sweeper deletes the Transaction and
        // a repeated purchase writes the Secret. The Secret goes first:
        // while the Transaction exists, a retry takes the full path above,
        // which repairs the Secret as well.
        self.recent.forget(tx_id);
        let me = self.clone();
        let id = tx_id.to_owned();
        tokio::spawn(async move {
            if let Some(secret) = secret {
                me.write_sold_credentials(secret).await;
            }
            me.delete_transaction(&id).await;
        });
        self.wire_contract(stored, kubeconfig)
    }

    /// The provider-side Transaction `tx_id` if it is still open, and
    /// whether it came from this process's memory; `None` once consumed
    /// (sold). 403 unless `caller` is the peer that reserved it: a
    /// transaction ID seen on the wire or guessed is not enough to buy.
    async fn open_transaction(
        &self,
        tx_id: &str,
        caller: SaleOwner,
    ) -> Result<Option<(Transaction, bool)>, ApiError> {
        let remembered = self.recent.get(tx_id);
        let from_memory = remembered.is_some();
        let fetched = match remembered {
            Some(t) => Ok((*t).clone()),
            None => self.transactions.get(tx_id).await,
        };
        let tx = match fetched {
            Ok(t) if t.labels().get(labels::SIDE).map(String::as_str) == Some(labels::PROVIDER) => {
                t
            }
            // A consumer-side Transaction of this node is not ours to sell.
            Ok(_) => return Err(tx_not_found(tx_id)),
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(ApiError::kube("reading the Transaction", &e)),
        };
        check_owner(
            SaleOwner::recorded(tx.annotations()),
            caller,
            &format!("transaction {tx_id}"),
        )?;
        Ok(Some((tx, from_memory)))
    }

    /// The kubeconfig for the buyer; for a K8Slice, also the rights its Liqo
    /// needs to authenticate in its tenant namespace here.
    async fn credentials_for(
        &self,
        flavor: &Flavor,
        tx: &Transaction,
        liqo_id: &str,
        owner: SaleOwner,
        go_consumer: bool,
    ) -> Result<String, ApiError> {
        let k8slice = flavor.spec.flavor_type.identifier()
            == Some(fluidos_api::common::FlavorTypeIdentifier::K8Slice);
        let cluster = tx.spec.cluster_id.as_str();
        let grant = match (k8slice, go_consumer) {
            (false, _) => None,
            (true, false) => Some(PeeringGrant::TenantNamespace(cluster)),
            (true, true) => Some(PeeringGrant::GoConsumer(cluster)),
        };
        Ok(self
            .credentials
            .issue(
                &tx.spec.buyer.node_id,
                &owner.credentials_owner(),
                liqo_id,
                grant,
            )
            .await?)
    }

    /// What a Service purchase must carry: Liqo credentials (upstream
    /// requires them).
    fn check_service_purchase(flavor: &Flavor, req: &PurchaseRequest) -> Result<(), ApiError> {
        if let FlavorTypeData::Service(_) = flavor_data(flavor)?
            && req.liqo_credentials.is_none()
        {
            // Upstream requires them for services (and then ignores them).
            return Err(
                ApiError::bad_request("Error: Liqo credentials not provided")
                    .field("liqoCredentials"),
            );
        }
        Ok(())
    }

    /// An unsold Service hold whose buyer asked for the service's pods on its
    /// cluster: accepted at RESERVE only by a node delivering by Liqo, so the
    /// purchase must carry what that takes. (A hold already sold is
    /// answered as sold, whatever this retry carries.)
    fn check_pods_on_buyer(
        &self,
        flavor: &Flavor,
        tx: &Transaction,
        req: &PurchaseRequest,
        caller: SaleOwner,
    ) -> Result<(), ApiError> {
        if let Some(p @ (HostingPolicy::Consumer | HostingPolicy::Shared)) =
            service_delivery::asked_hosting_policy(tx.spec.configuration.as_ref())
            && self.delivers_by_liqo(flavor, tx, req, caller).is_none()
        {
            return Err(ApiError::bad_request(format!(
                "hosting policy {p:?} puts the service's pods on the buyer's cluster, which needs \
             delivery by Liqo: send liqoCredentials with a kubeconfig of your cluster (an https \
             server, inline CA and token) for the cluster ID you reserved with, as FLUIDOS-rs \
             buyers with --service-delivery liqo do"
            ))
            .field("liqoCredentials"));
        }
        Ok(())
    }

    /// The kubeconfig of the buyer's cluster when this Service sale is
    /// delivered by Liqo: this node is configured so, the buyer is known by
    /// its key (TLS; a Go buyer, over plain HTTP, always sends its own
    /// near-admin kubeconfig and is delivered over REAR), and it sent a
    /// kubeconfig a peer may hand over, for the cluster ID it reserved
    /// with. Otherwise `None` (the sale is delivered over REAR, which the
    /// buyer may still ask for).
    fn delivers_by_liqo<'r>(
        &self,
        flavor: &Flavor,
        tx: &Transaction,
        req: &'r PurchaseRequest,
        caller: SaleOwner,
    ) -> Option<&'r str> {
        let service = flavor.spec.flavor_type.identifier()
            == Some(fluidos_api::common::FlavorTypeIdentifier::Service);
        let c = req.liqo_credentials.as_ref()?;
        (service
            && matches!(caller, SaleOwner::Key(_))
            && self.cfg.service_delivery == ServiceDelivery::Liqo
            && !c.kubeconfig.is_empty()
            && c.cluster_id == tx.spec.cluster_id
            && fluidos_peer_access::grant::valid_cluster_id(&c.cluster_id)
            && crate::peering_secret::buyer_kubeconfig_is_readable(&c.kubeconfig))
        .then_some(c.kubeconfig.as_str())
    }

    fn contract_spec(
        &self,
        flavor: &Flavor,
        tx: &Transaction,
        liqo_id: &str,
        req: &PurchaseRequest,
        liqo_delivery: bool,
    ) -> ContractSpec {
        let buyer = NodeIdentity {
            additional_information: Some(NodeIdentityAdditionalInfo {
                liqo_id: Some(tx.spec.cluster_id.clone()),
            }),
            ..tx.spec.buyer.clone()
        };
        let owner = &flavor.spec.owner;
        let seller_base = if owner.node_id.is_empty() {
            &self.cfg.identity
        } else {
            owner
        };
        let seller = NodeIdentity {
            additional_information: Some(NodeIdentityAdditionalInfo {
                liqo_id: Some(liqo_id.to_owned()),
            }),
            ..seller_base.clone()
        };
        ContractSpec {
            flavor: EmbeddedFlavor::from(flavor),
            transaction_id: tx.name_any(),
            configuration: tx.spec.configuration.clone(),
            buyer,
            buyer_cluster_id: tx.spec.cluster_id.clone(),
            seller,
            // The kubeconfig lives in the Contract's Secret, not here:
            // whoever reads Contracts must not read the buyers' tokens.
            peering_target_credentials: LiqoCredentials {
                liqo_id: liqo_id.to_owned(),
                kubeconfig: String::new(),
            },
            expiration_time: Some(time::expiry_after(self.cfg.contract_ttl)),
            // Names the ResourceSlice class this node's peering serves to
            // its Rust consumers; a Go consumer keeps it and ignores it. A
            // Service says how it is delivered.
            extra_information: if liqo_delivery {
                Some(service_delivery::extra_information())
            } else {
                (flavor.spec.flavor_type.identifier()
                    == Some(fluidos_api::common::FlavorTypeIdentifier::K8Slice))
                .then(|| {
                    [(
                        fluidos_api::reservation::RESOURCE_SLICE_CLASS_KEY.to_owned(),
                        fluidos_api::reservation::FLUIDOS_RESOURCE_SLICE_CLASS.to_owned(),
                    )]
                    .into()
                })
            },
            network_requests: None,
            ingress_telemetry_endpoint: req
                .ingress_telemetry_endpoint
                .as_ref()
                .map(TelemetryServer::from),
        }
    }

    /// Creates the Contract `name`, or reads back the one an earlier
    /// purchase of the same transaction made; true when created now.
    async fn ensure_contract(
        &self,
        name: &str,
        flavor: &Flavor,
        spec: ContractSpec,
        owner: SaleOwner,
    ) -> Result<(Contract, bool), ApiError> {
        let tx_id = spec.transaction_id.clone();
        let mut annotations = BTreeMap::from([
            (
                labels::FLAVOR_TIMESTAMP.to_owned(),
                creation_timestamp(flavor),
            ),
            (labels::BUYER.to_owned(), spec.buyer.node_id.clone()),
            crate::peering_secret::annotation(name),
        ]);
        annotations.extend(owner.annotations());
        let contract = Contract {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (labels::SIDE.to_owned(), labels::PROVIDER.to_owned()),
                    (labels::TRANSACTION.to_owned(), tx_id.clone()),
                ])),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec,
            status: None,
        };
        match self
            .contracts
            .create(&PostParams::default(), &contract)
            .await
        {
            Ok(c) => Ok((c, true)),
            Err(e) if is_already_exists(&e) => {
                let existing = self
                    .contracts
                    .get(name)
                    .await
                    .map_err(|e| ApiError::kube("reading the existing Contract", &e))?;
                if existing.spec.transaction_id != tx_id {
                    return Err(ApiError::internal(format!(
                        "contract name {name} is taken by transaction {}",
                        existing.spec.transaction_id
                    )));
                }
                Ok((existing, false))
            }
            Err(e) => Err(ApiError::kube("creating the Contract", &e)),
        }
    }

    async fn ensure_allocation(
        &self,
        flavor_id: &str,
        tx_id: &str,
        suffix: usize,
        contract: &str,
    ) -> Result<(), ApiError> {
        let allocation = Allocation {
            metadata: ObjectMeta {
                name: Some(allocation_name(flavor_id, tx_id, suffix)),
                namespace: Some(self.cfg.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (labels::SIDE.to_owned(), labels::PROVIDER.to_owned()),
                    (labels::TRANSACTION.to_owned(), tx_id.to_owned()),
                ])),
                ..Default::default()
            },
            spec: AllocationSpec {
                forwarding: Some(false),
                contract: Some(GenericRef::named(self.cfg.namespace.clone(), contract)),
            },
            status: None,
        };
        match self
            .allocations
            .create(&PostParams::default(), &allocation)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_already_exists(&e) => Ok(()),
            Err(e) => Err(ApiError::kube(
                "Contract created but we ran into an error while allocating the resources",
                &e,
            )),
        }
    }

    /// A purchase repeated after the Transaction was consumed: the same Contract.
    /// The Contract a consumed transaction became, for the peer that bought
    /// it only (it carries the buyer's credentials).
    async fn sold_contract(
        &self,
        tx_id: &str,
        caller: SaleOwner,
        req: &PurchaseRequest,
    ) -> Result<WireContract, ApiError> {
        let lp = labels::sale(tx_id);
        let list = self
            .contracts
            .list(&lp)
            .await
            .map_err(|e| ApiError::kube("looking up the Contract of a transaction", &e))?;
        match list.items.first() {
            Some(c) => {
                check_owner(
                    SaleOwner::recorded(c.annotations()),
                    caller,
                    &format!("transaction {tx_id}"),
                )?;
                // Sold to be delivered by Liqo, the process dying before it
                // stored the buyer's kubeconfig: this repeated purchase
                // brings it again (create-or-adopt keeps a stored one).
                if service_delivery::by_liqo(&c.spec)
                    && let Some(k) = req.liqo_credentials.as_ref().map(|k| k.kubeconfig.as_str())
                    && crate::peering_secret::buyer_kubeconfig_is_readable(k)
                {
                    self.store_buyer_credentials(c, k).await?;
                }
                let kubeconfig = self.contract_kubeconfig(c, None).await?;
                self.wire_contract(c, kubeconfig)
            }
            None => Err(tx_not_found(tx_id)),
        }
    }

    /// The wire form of the stored Contract `c`, carrying `kubeconfig`
    /// (which the stored one does not).
    fn wire_contract(&self, c: &Contract, kubeconfig: String) -> Result<WireContract, ApiError> {
        let ts = c
            .annotations()
            .get(labels::FLAVOR_TIMESTAMP)
            .cloned()
            .unwrap_or_default();
        let mut spec = c.spec.clone();
        spec.peering_target_credentials.kubeconfig = kubeconfig;
        WireContract::from_crd(&c.name_any(), &spec, ts)
            .map_err(|e| ApiError::internal(format!("the stored Contract does not convert: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_derive_from_the_transaction() {
        let tx = "abababababababababababababababab-1715790000123456789";
        let h = hash_prefix(tx, 4);
        assert_eq!(
            contract_name("fluidos.eu-k8slice-3f9a", tx, 4),
            format!("contract-fluidos-eu-k8slice-3f9a-{h}")
        );
        assert_eq!(
            allocation_name("fluidos.eu-k8slice-3f9a", tx, 4),
            format!("allocation-fluidos.eu-k8slice-3f9a-{h}")
        );
    }

    #[test]
    fn a_colliding_name_takes_a_longer_suffix() {
        let tx = "t-1";
        let taken = LedgerEntry {
            transaction_id: "other".into(),
            buyer_id: "b".into(),
            buyer_key: None,
            buyer_address: None,
            source_peer: None,
            state: LedgerState::Sold,
            resources: None,
            expiration_time: None,
            contract: Some(contract_name("f", tx, 4)),
        };
        assert_eq!(suffix_len("f", tx, &[]), 4);
        assert_eq!(suffix_len("f", tx, &[taken]), 8);
    }

    #[test]
    fn transaction_ids_are_checked_before_use() {
        assert!(plausible_tx_id(
            "abababababababababababababababab-1715790000123456789"
        ));
        for bad in ["", "a/b", "A", "-a", &"a".repeat(64)] {
            assert!(!plausible_tx_id(bad), "{bad}");
        }
    }
}

//! **Stand-in** for an unmodified Go FLUIDOS provider's REAR gateway, for
//! tests only: no Go node can run in these tests, so this answers the REAR
//! routes the way the Go gateway does (fluidos-node.md §2.6, §2.7, §2.11),
//! including the parts that matter to a buyer:
//!
//! * errors are `text/plain` lines (Go's `http.Error`), not JSON;
//! * an unknown transaction at purchase is **500** `Error getting the
//!   Transaction`, never 404;
//! * a purchase takes ~10.5 s (the Go provider sleeps 5 s twice while minting
//!   credentials), and the transaction is dropped from its cache *before*
//!   those slow steps, so a retried purchase gets that 500 even though the
//!   first one goes on to sell;
//! * reserve is idempotent per buyer and flavor, and needs the buyer's Liqo ID.
//!
//! It keeps what it sold so a test can check that a sale happened.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use fluidos_api::rear::{
    PurchaseRequest, ReserveRequest, WireContract, WireFlavor, WireLiqoCredentials,
    WireNodeIdentity, WireTransaction,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The Go provider's purchase time: two 5 s sleeps plus the API calls.
pub const GO_PURCHASE_DELAY: Duration = Duration::from_millis(10_500);

/// What the stand-in sells and how slowly.
#[derive(Clone, Debug)]
pub struct StandInConfig {
    /// Flavors listed (their `owner` should be [`GoRearStandIn::address`]).
    pub flavors: Vec<WireFlavor>,
    /// How long a purchase takes after the transaction is dropped.
    pub purchase_delay: Duration,
}

#[derive(Default)]
struct Book {
    transactions: BTreeMap<String, WireTransaction>,
    contracts: Vec<WireContract>,
    next: u64,
    purchase_requests: usize,
}

#[derive(Clone)]
struct Shared {
    config: StandInConfig,
    seller: WireNodeIdentity,
    book: Arc<Mutex<Book>>,
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running stand-in on a loopback port; stops when dropped.
pub struct GoRearStandIn {
    address: String,
    shared: Shared,
    task: JoinHandle<()>,
}

impl GoRearStandIn {
    /// Binds a loopback port and serves. `flavors` is called with the
    /// address so that their owner can name it.
    pub async fn start(
        seller_id: &str,
        flavors: impl FnOnce(&str) -> Vec<WireFlavor>,
        purchase_delay: Duration,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let shared = Shared {
            config: StandInConfig {
                flavors: flavors(&address),
                purchase_delay,
            },
            seller: WireNodeIdentity {
                id: seller_id.to_owned(),
                ip: address.clone(),
                domain: "fluidos.eu".to_owned(),
                additional_information: None,
            },
            book: Arc::default(),
        };
        let app = Router::new()
            .route("/api/v2/flavors", get(list))
            .route("/api/v2/flavors/{kind}", get(list))
            .route("/api/v2/reservations", post(reserve))
            .route("/api/v2/transactions/{id}/purchase", post(purchase))
            // gorilla/mux's answer to a path it does not route
            // (`http.NotFound`): a Go node has no service route.
            .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "404 page not found\n") })
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(GoRearStandIn {
            address,
            shared,
            task,
        })
    }

    /// `host:port` it serves on.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The contracts it has sold so far.
    pub fn sold(&self) -> Vec<WireContract> {
        self.shared.book().contracts.clone()
    }

    /// How many PURCHASE requests it has received.
    pub fn purchase_requests(&self) -> usize {
        self.shared.book().purchase_requests
    }
}

impl Drop for GoRearStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Go's `http.Error`: plain text with a newline.
fn go_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{message}\n"),
    )
        .into_response()
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => go_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

async fn list(State(s): State<Shared>) -> Response {
    // A sold flavor is withdrawn (the Go provider's allocation turns it
    // unavailable and lists any remainder under a new flavor ID).
    let book = s.book();
    let unsold: Vec<&WireFlavor> = s
        .config
        .flavors
        .iter()
        .filter(|f| {
            !book
                .contracts
                .iter()
                .any(|c| c.flavor.flavor_id == f.flavor_id)
        })
        .collect();
    json(&unsold)
}

async fn reserve(State(s): State<Shared>, body: axum::body::Bytes) -> Response {
    let request: ReserveRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return go_error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    if !s
        .config
        .flavors
        .iter()
        .any(|f| f.flavor_id == request.flavor_id)
    {
        // The Go gateway's 404 branch is unreachable: any lookup error is 500.
        return go_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Error getting the Flavor by ID",
        );
    }
    let mut book = s.book();
    if let Some(tx) = book
        .transactions
        .values()
        .find(|t| t.buyer.id == request.buyer.id && t.flavor_id == request.flavor_id)
    {
        return json(tx);
    }
    let Some(liqo_id) = request
        .buyer
        .additional_information
        .as_ref()
        .and_then(|a| a.liqo_id.clone())
        .filter(|id| !id.is_empty())
    else {
        return go_error(StatusCode::BAD_REQUEST, "Error: LiqoID not provided");
    };
    book.next += 1;
    let tx = WireTransaction {
        transaction_id: format!(
            "{:032x}-{}",
            book.next,
            1_700_000_000_000_000_000_u64 + book.next
        ),
        flavor_id: request.flavor_id.clone(),
        configuration: request.configuration.clone(),
        buyer: request.buyer.clone(),
        cluster_id: liqo_id,
        expiration_time: "2099-01-01T00:00:00Z".to_owned(),
    };
    book.transactions
        .insert(tx.transaction_id.clone(), tx.clone());
    json(&tx)
}

async fn purchase(
    State(s): State<Shared>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = serde_json::from_slice::<PurchaseRequest>(&body) {
        return go_error(StatusCode::BAD_REQUEST, &e.to_string());
    }
    // Looked up first, then dropped before the slow steps (§2.7 steps 2–5).
    let tx = {
        let mut book = s.book();
        book.purchase_requests += 1;
        let Some(tx) = book.transactions.remove(&id) else {
            return go_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Error getting the Transaction",
            );
        };
        tx
    };
    // Go's handler goes on when the buyer hangs up: so does this one.
    let sale = tokio::spawn(async move { sell(&s, tx).await });
    sale.await
        .unwrap_or_else(|e| go_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}

/// The slow part of a purchase (§2.7 steps 6–11).
async fn sell(s: &Shared, tx: WireTransaction) -> Response {
    tokio::time::sleep(s.config.purchase_delay).await;
    let Some(flavor) = s
        .config
        .flavors
        .iter()
        .find(|f| f.flavor_id == tx.flavor_id)
        .cloned()
    else {
        return go_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Error getting the Flavor by ID",
        );
    };
    let contract = WireContract {
        contract_id: format!("contract-{}", tx.flavor_id),
        transaction_id: tx.transaction_id.clone(),
        flavor,
        buyer: tx.buyer.clone(),
        buyer_cluster_id: tx.cluster_id.clone(),
        seller: s.seller.clone(),
        peering_target_credentials: WireLiqoCredentials {
            cluster_id: "liqo-go-provider".to_owned(),
            kubeconfig: String::new(),
        },
        expiration_time: Some("2099-01-01T00:00:00Z".to_owned()),
        extra_information: None,
        configuration: tx.configuration.clone(),
        network_authorizations: None,
        ingress_telemetry_endpoint: None,
    };
    let mut book = s.book();
    if book
        .contracts
        .iter()
        .any(|c| c.contract_id == contract.contract_id)
    {
        // The Contract CR name is per flavor: selling it twice fails the create.
        return go_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "Error creating the Contract: contracts.reservation.fluidos.eu \"{}\" already exists",
                contract.contract_id
            ),
        );
    }
    book.contracts.push(contract.clone());
    json(&contract)
}

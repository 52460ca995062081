//! `kubectl fluidos release`: end a contract through the node's own teardown.
//!
//! The Allocation goes first: its finalizers (the peering's, or the service
//! allocation's) tear down what it delivered — the Liqo peering and virtual
//! node, or the service namespace and credentials Secret — and only then
//! let it go. The Contract is deleted after that; on the provider, its
//! deletion returns the sold capacity to the Flavor and revokes the buyer's
//! credentials once it has no other Contract. A consumer's copy of a Contract
//! is its own record: the provider is not told and keeps its copy until it
//! expires or is released on the provider's cluster.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fluidos_api::{Allocation, Contract, Reservation, Solver, naming};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};

use crate::cli::ReleaseArgs;
use crate::cluster::{self, explain_api_error};
use crate::{Exit, ExitError};

/// What the user named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `contract/NAME`.
    Contract(String),
    /// `solver/NAME`: the Contract its Reservation bought.
    Solver(String),
    /// A bare name: a Contract of that name, else a Solver.
    Either(String),
}

/// Reads `contract/NAME`, `solver/NAME` (kubectl's kinds and short names
/// too) or a bare `NAME`.
pub fn parse_target(text: &str) -> Result<Target, String> {
    let (kind, name) = match text.split_once('/') {
        Some((kind, name)) => (Some(kind), name),
        None => (None, text),
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "{text:?}: expected contract/NAME, solver/NAME or NAME"
        ));
    }
    let name = name.to_owned();
    match kind.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(Target::Either(name)),
        Some("contract" | "contracts" | "contr" | "contract.reservation.fluidos.eu") => {
            Ok(Target::Contract(name))
        }
        Some("solver" | "solvers" | "sol" | "solver.nodecore.fluidos.eu") => {
            Ok(Target::Solver(name))
        }
        Some(other) => Err(format!(
            "{other:?} cannot be released: name a contract or a solver"
        )),
    }
}

/// The Contract a Solver bought: from its Reservation's status, else from
/// an Allocation it owns.
pub fn contract_of_solver(
    solver: &Solver,
    reservation: Option<&Reservation>,
    allocations: &[Allocation],
) -> Option<String> {
    let from_reservation = reservation
        .filter(|r| {
            let uid = solver.uid();
            r.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
                || r.spec.solver_id == solver.name_any()
        })
        .and_then(|r| r.status.as_ref())
        .and_then(|s| s.contract.as_ref())
        .and_then(|c| c.name.clone())
        .filter(|n| !n.is_empty());
    from_reservation.or_else(|| {
        let uid = solver.uid()?;
        allocations
            .iter()
            .find(|a| a.owner_references().iter().any(|o| o.uid == uid))
            .and_then(|a| a.spec.contract.as_ref())
            .and_then(|c| c.name.clone())
    })
}

/// The Allocations that allocate `contract`, by name.
pub fn allocations_of(contract: &str, allocations: &[Allocation]) -> Vec<String> {
    let mut names: Vec<String> = allocations
        .iter()
        .filter(|a| a.spec.contract.as_ref().and_then(|c| c.name.as_deref()) == Some(contract))
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

/// What the release tells the user about the other party, by which side
/// this node is on.
pub fn other_side_note(contract: &Contract, local_node_id: Option<&str>) -> Option<String> {
    match local_node_id {
        Some(me) if contract.spec.buyer.node_id == me => Some(format!(
            "note: this is the buyer's copy; provider {} keeps its Contract until it expires or is released on its cluster",
            contract.spec.seller.node_id
        )),
        Some(me) if contract.spec.seller.node_id == me => Some(format!(
            "the sold capacity is for sale again; buyer {}'s credentials are revoked once it holds no other Contract",
            contract.spec.buyer.node_id
        )),
        _ => None,
    }
}

/// Runs `release`.
pub async fn run(client: Client, namespace: &str, args: &ReleaseArgs) -> anyhow::Result<()> {
    let target =
        parse_target(&args.target).map_err(|e| ExitError::new(Exit::Usage, anyhow::anyhow!(e)))?;
    let contracts: Api<Contract> = Api::namespaced(client.clone(), namespace);
    let allocations: Api<Allocation> = Api::namespaced(client.clone(), namespace);
    let all_allocations = allocations
        .list(&ListParams::default())
        .await
        .map_err(|e| explain_api_error(e, "Allocation", namespace))?
        .items;

    let contract_name = match &target {
        Target::Contract(name) => name.clone(),
        Target::Either(name) => {
            let found = contracts
                .get_opt(name)
                .await
                .map_err(|e| explain_api_error(e, "Contract", namespace))?;
            match found {
                Some(_) => name.clone(),
                None => solver_contract(&client, namespace, name, &all_allocations)
                    .await?
                    .with_context(|| {
                        format!("no Contract and no Solver named {name} in namespace {namespace}")
                    })?,
            }
        }
        Target::Solver(name) => solver_contract(&client, namespace, name, &all_allocations)
            .await?
            .with_context(|| format!("no Solver named {name} in namespace {namespace}"))?,
    };
    let contract = contracts
        .get_opt(&contract_name)
        .await
        .map_err(|e| explain_api_error(e, "Contract", namespace))?;
    let to_delete = allocations_of(&contract_name, &all_allocations);
    if contract.is_none() && to_delete.is_empty() {
        anyhow::bail!(
            "contract/{contract_name} not found in namespace {namespace}: nothing to release"
        );
    }

    let deadline = Instant::now() + args.timeout;
    for name in &to_delete {
        delete(&allocations, name, "allocation").await?;
    }
    if !args.no_wait {
        for name in &to_delete {
            wait_gone(&allocations, name, deadline, args.timeout).await?;
            println!("allocation/{name} torn down");
        }
    }
    if let Some(c) = &contract {
        delete(&contracts, &contract_name, "contract").await?;
        if !args.no_wait {
            wait_gone(&contracts, &contract_name, deadline, args.timeout).await?;
        }
        println!("contract/{contract_name} released");
        let me = cluster::local_node_id(&client, namespace).await;
        if let Some(note) = other_side_note(c, me.as_deref()) {
            println!("{note}");
        }
    }
    Ok(())
}

/// The Contract of the Solver `name`: `Ok(None)` when there is no such Solver.
async fn solver_contract(
    client: &Client,
    namespace: &str,
    name: &str,
    allocations: &[Allocation],
) -> anyhow::Result<Option<String>> {
    let solver = Api::<Solver>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| explain_api_error(e, "Solver", namespace))?;
    let Some(solver) = solver else {
        return Ok(None);
    };
    let reservation = Api::<Reservation>::namespaced(client.clone(), namespace)
        .get_opt(&naming::reservation_name(name))
        .await
        .map_err(|e| explain_api_error(e, "Reservation", namespace))?;
    contract_of_solver(&solver, reservation.as_ref(), allocations)
        .map(Some)
        .with_context(|| format!("solver/{name} has bought nothing: no Contract to release"))
}

async fn delete<K>(api: &Api<K>, name: &str, kind: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if cluster::is_not_found(&e) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("deleting {kind}/{name}"))),
    }
}

/// Waits until `name` is gone, saying which finalizers hold it when the time is up.
async fn wait_gone<K>(
    api: &Api<K>,
    name: &str,
    deadline: Instant,
    timeout: Duration,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        let current = api
            .get_opt(name)
            .await
            .with_context(|| format!("reading {name}"))?;
        let Some(obj) = current else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            let holders = obj.meta().finalizers.clone().unwrap_or_default().join(", ");
            return Err(ExitError::new(
                Exit::TimedOut,
                anyhow::anyhow!(
                    "{name} is still being torn down after {:?} (finalizers: {holders}); is the node running? The Contract is kept until it is gone: run release again",
                    timeout
                ),
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fluidos_api::GenericRef;
    use fluidos_api::allocation::AllocationSpec;
    use fluidos_api::reservation::ReservationStatus;
    use fluidos_api::solver::SolverSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn targets_read_like_kubectl_names() {
        assert_eq!(
            parse_target("contract/c1"),
            Ok(Target::Contract("c1".into()))
        );
        assert_eq!(
            parse_target("Contracts/c1"),
            Ok(Target::Contract("c1".into()))
        );
        assert_eq!(parse_target("sol/s1"), Ok(Target::Solver("s1".into())));
        assert_eq!(parse_target("x"), Ok(Target::Either("x".into())));
        assert!(
            parse_target("flavor/f")
                .unwrap_err()
                .contains("cannot be released")
        );
        assert!(parse_target("contract/").is_err());
        assert!(parse_target("a/b/c").is_err());
    }

    fn solver() -> Solver {
        let mut s = Solver::new(
            "s1",
            SolverSpec {
                selector: None,
                intent_id: "i".into(),
                find_candidate: Some(true),
                reserve_and_buy: Some(true),
                establish_peering: Some(true),
            },
        );
        s.metadata.uid = Some("uid-1".into());
        s
    }

    fn allocation(name: &str, contract: &str, owner: Option<&str>) -> Allocation {
        let mut a = Allocation::new(
            name,
            AllocationSpec {
                forwarding: None,
                contract: Some(GenericRef::named("fluidos", contract)),
            },
        );
        a.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                ..Default::default()
            }]
        });
        a
    }

    #[test]
    fn a_solvers_contract_comes_from_its_reservation_or_allocation() {
        let spec: fluidos_api::reservation::ReservationSpec =
            serde_json::from_value(serde_json::json!({
                "solverID": "s1",
                "buyer": {"domain": "d", "nodeID": "c", "ip": "x:1"},
                "seller": {"domain": "d", "nodeID": "p", "ip": "y:1"},
            }))
            .unwrap();
        let mut r = Reservation::new("reservation-s1", spec);
        r.status = Some(ReservationStatus {
            contract: Some(GenericRef::named("fluidos", "contract-a")),
            ..Default::default()
        });
        assert_eq!(
            contract_of_solver(&solver(), Some(&r), &[]).as_deref(),
            Some("contract-a")
        );
        let owned = [
            allocation("other", "contract-x", Some("uid-9")),
            allocation("mine", "contract-b", Some("uid-1")),
        ];
        assert_eq!(
            contract_of_solver(&solver(), None, &owned).as_deref(),
            Some("contract-b")
        );
        assert_eq!(contract_of_solver(&solver(), None, &owned[..1]), None);
    }

    #[test]
    fn every_allocation_of_the_contract_is_deleted() {
        let all = [
            allocation("b", "c1", None),
            allocation("a", "c1", Some("u")),
            allocation("z", "c2", None),
        ];
        assert_eq!(allocations_of("c1", &all), vec!["a", "b"]);
        assert!(allocations_of("c3", &all).is_empty());
    }

    #[test]
    fn the_note_depends_on_the_side() {
        let c = crate::fixtures::contract("c1", "K8Slice", "prov", "cons", None);
        assert!(
            other_side_note(&c, Some("cons"))
                .unwrap()
                .contains("provider prov keeps")
        );
        assert!(
            other_side_note(&c, Some("prov"))
                .unwrap()
                .contains("for sale again")
        );
        assert_eq!(other_side_note(&c, None), None);
    }
}

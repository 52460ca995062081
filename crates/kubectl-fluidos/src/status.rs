//! `kubectl fluidos status`: Solvers, Contracts, Allocations and Liqo
//! peerings in one view, with ages and the reason each is where it is.

use fluidos_api::{Allocation, Contract, Phase, Solver};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::cluster::{self, explain_api_error};
use crate::output::{self, Cell, Palette, Table, Tone, print_structured, truncate};

/// Longest message shown in a table cell.
const MESSAGE_WIDTH: usize = 70;

/// One Solver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SolverRow {
    /// Name.
    pub name: String,
    /// `K8Slice` or `Service`.
    pub flavor_type: String,
    /// Overall phase (`Pending` before the node looked at it).
    pub phase: String,
    /// Sub-phases: find, buy, peer (`-` when not asked for).
    pub steps: String,
    /// The node's message.
    pub message: String,
    /// Age.
    pub age: String,
}

/// One Contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContractRow {
    /// Name.
    pub name: String,
    /// `bought` or `sold` from this node's point of view (`-` when unknown).
    pub role: String,
    /// Flavor type.
    pub flavor_type: String,
    /// The other party's node ID.
    pub counterparty: String,
    /// Expiry: `in 364d`, `expired 3m ago`, or `-`.
    pub expires: String,
    /// Age.
    pub age: String,
}

/// One Allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationRow {
    /// Name.
    pub name: String,
    /// The Contract it allocates.
    pub contract: String,
    /// `Active`, `Peering`, ... (`Terminating` while its teardown runs).
    pub status: String,
    /// The node's message.
    pub message: String,
    /// Age.
    pub age: String,
}

/// One Liqo peering (a ForeignCluster).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeeringRow {
    /// The remote cluster ID.
    pub cluster_id: String,
    /// `Provider`, `Consumer`, `ConsumerAndProvider`, `Unknown`.
    pub role: String,
    /// `module=condition status` for each enabled module.
    pub modules: String,
    /// The first unhealthy condition's message.
    pub reason: String,
    /// Age.
    pub age: String,
}

/// The whole status, as `-o json|yaml` prints it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// The namespace shown.
    pub namespace: String,
    /// Solvers, oldest first.
    pub solvers: Vec<SolverRow>,
    /// Contracts, oldest first.
    pub contracts: Vec<ContractRow>,
    /// Allocations, oldest first.
    pub allocations: Vec<AllocationRow>,
    /// Liqo peerings; absent when Liqo is not installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peerings: Option<Vec<PeeringRow>>,
}

fn oldest_first<K: kube::Resource>(items: &mut [K]) {
    items.sort_by(|a, b| {
        (output::created_at(a), a.meta().name.as_deref())
            .cmp(&(output::created_at(b), b.meta().name.as_deref()))
    });
}

/// A Solver's row.
pub fn solver_row(s: &Solver, now: jiff::Timestamp) -> SolverRow {
    let st = s.status.clone().unwrap_or_default();
    let overall = st.solver_phase.clone().unwrap_or_default();
    let over = matches!(overall.phase, Phase::Failed | Phase::TimedOut);
    let step = |asked: Option<bool>, phase: Option<&Phase>| {
        if asked.unwrap_or(false) {
            match phase {
                // A failed Solver never gets to its later steps.
                None | Some(Phase::Unset) if over => "-".to_owned(),
                None | Some(Phase::Unset) => "Pending".to_owned(),
                Some(p) => p.to_string(),
            }
        } else {
            "-".to_owned()
        }
    };
    SolverRow {
        name: s.name_any(),
        flavor_type: s
            .spec
            .selector
            .as_ref()
            .map(|sel| sel.flavor_type.clone())
            .unwrap_or_else(|| "any".to_owned()),
        phase: match overall.phase {
            Phase::Unset => "Pending".to_owned(),
            p => p.to_string(),
        },
        steps: format!(
            "{}/{}/{}",
            step(s.spec.find_candidate, st.find_candidate.as_ref()),
            step(s.spec.reserve_and_buy, st.reserve_and_buy.as_ref()),
            step(s.spec.establish_peering, st.peering.as_ref()),
        ),
        message: overall.message.unwrap_or_default(),
        age: output::age(output::created_at(s), now),
    }
}

/// Whether this node bought or sold the Contract.
pub fn contract_role(c: &Contract, local_node_id: Option<&str>) -> &'static str {
    match local_node_id {
        Some(me) if c.spec.buyer.node_id == me => "bought",
        Some(me) if c.spec.seller.node_id == me => "sold",
        _ => "-",
    }
}

/// `in 364d`, `expired 3m ago`, `-` without an expiry, or the raw text when it does not parse.
pub fn expiry_text(expiration: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(text) = expiration.filter(|t| !t.is_empty()) else {
        return "-".to_owned();
    };
    match text.parse::<jiff::Timestamp>() {
        Ok(t) if t > now => format!("in {}", output::human_duration(t.duration_since(now))),
        Ok(t) => format!(
            "expired {} ago",
            output::human_duration(now.duration_since(t))
        ),
        Err(_) => text.to_owned(),
    }
}

/// A Contract's row.
pub fn contract_row(
    c: &Contract,
    local_node_id: Option<&str>,
    now: jiff::Timestamp,
) -> ContractRow {
    let role = contract_role(c, local_node_id);
    let counterparty = match role {
        "sold" => c.spec.buyer.node_id.clone(),
        "bought" => c.spec.seller.node_id.clone(),
        _ => format!("{} -> {}", c.spec.seller.node_id, c.spec.buyer.node_id),
    };
    ContractRow {
        name: c.name_any(),
        role: role.to_owned(),
        flavor_type: c.spec.flavor.spec.flavor_type.type_identifier.clone(),
        counterparty,
        expires: expiry_text(c.spec.expiration_time.as_deref(), now),
        age: output::age(output::created_at(c), now),
    }
}

/// An Allocation's row.
pub fn allocation_row(a: &Allocation, now: jiff::Timestamp) -> AllocationRow {
    let st = a.status.clone().unwrap_or_default();
    let mut status = st
        .status
        .as_ref()
        .map_or_else(|| "Pending".to_owned(), |s| s.as_str().to_owned());
    let mut message = st.message.unwrap_or_default();
    if a.metadata.deletion_timestamp.is_some() {
        status = "Terminating".to_owned();
        let waiting = a.finalizers().join(", ");
        if !waiting.is_empty() {
            message = format!("teardown by {waiting}; {message}");
        }
    }
    AllocationRow {
        name: a.name_any(),
        contract: a
            .spec
            .contract
            .as_ref()
            .and_then(|c| c.name.clone())
            .unwrap_or_default(),
        status,
        message,
        age: output::age(output::created_at(a), now),
    }
}

/// The ForeignCluster kind of Liqo v1.0.
pub fn foreign_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("core.liqo.io", "v1beta1", "ForeignCluster"),
        "foreignclusters",
    )
}

/// A peering's row, read loosely from a ForeignCluster (any field may be missing).
pub fn peering_row(fc: &DynamicObject, now: jiff::Timestamp) -> PeeringRow {
    let status = fc.data.get("status");
    let text =
        |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let healthy = |s: &str| matches!(s, "Established" | "Ready" | "True");
    let mut modules = Vec::new();
    let mut reason = String::new();
    for module in ["authentication", "networking", "offloading"] {
        let m = status
            .and_then(|s| s.get("modules"))
            .and_then(|m| m.get(module));
        if !m
            .and_then(|m| m.get("enabled"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
        {
            continue;
        }
        let conditions = m
            .and_then(|m| m.get("conditions"))
            .and_then(|c| c.as_array())
            .cloned()
            .unwrap_or_default();
        let worst = conditions
            .iter()
            .find(|c| !healthy(&text(c.get("status"))))
            .or_else(|| conditions.first());
        let state = worst.map_or_else(|| "Pending".to_owned(), |c| text(c.get("status")));
        if let Some(c) = worst.filter(|_| reason.is_empty() && !healthy(&state)) {
            let kind = text(c.get("type"));
            let message = text(c.get("message"));
            reason = if message.is_empty() {
                kind
            } else {
                format!("{kind}: {message}")
            };
        }
        modules.push(format!("{module}={state}"));
    }
    let cluster_id = fc
        .data
        .get("spec")
        .and_then(|s| s.get("clusterID"))
        .and_then(|v| v.as_str())
        .map_or_else(|| fc.name_any(), str::to_owned);
    let role = text(status.and_then(|s| s.get("role")));
    PeeringRow {
        cluster_id,
        role: if role.is_empty() {
            "Unknown".into()
        } else {
            role
        },
        modules: if modules.is_empty() {
            "-".to_owned()
        } else {
            modules.join(" ")
        },
        reason,
        age: output::age(output::created_at(fc), now),
    }
}

/// The status of the objects given, as of `now`.
pub fn build(
    namespace: &str,
    mut solvers: Vec<Solver>,
    mut contracts: Vec<Contract>,
    mut allocations: Vec<Allocation>,
    peerings: Option<Vec<DynamicObject>>,
    local_node_id: Option<&str>,
    now: jiff::Timestamp,
) -> Status {
    oldest_first(&mut solvers);
    oldest_first(&mut contracts);
    oldest_first(&mut allocations);
    Status {
        namespace: namespace.to_owned(),
        solvers: solvers.iter().map(|s| solver_row(s, now)).collect(),
        contracts: contracts
            .iter()
            .map(|c| contract_row(c, local_node_id, now))
            .collect(),
        allocations: allocations.iter().map(|a| allocation_row(a, now)).collect(),
        peerings: peerings.map(|mut p| {
            oldest_first(&mut p);
            p.iter().map(|fc| peering_row(fc, now)).collect()
        }),
    }
}

/// The tables, with a title line each; empty kinds say so in one line.
pub fn render(status: &Status, palette: Palette) -> String {
    let mut out = String::new();
    let mut section = |title: &str, table: Table, empty: &str| {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&palette.paint(Tone::Strong, title));
        out.push('\n');
        if table.is_empty() {
            out.push_str(&palette.paint(Tone::Faint, empty));
            out.push('\n');
        } else {
            out.push_str(&table.render(palette));
        }
    };
    let ns = &status.namespace;
    let mut t = Table::new(&["NAME", "TYPE", "PHASE", "FIND/BUY/PEER", "MESSAGE", "AGE"]);
    for r in &status.solvers {
        t.push(vec![
            Cell::plain(&r.name),
            Cell::plain(&r.flavor_type),
            Cell::state(&r.phase),
            Cell::plain(&r.steps),
            Cell::plain(truncate(&r.message, MESSAGE_WIDTH)),
            Cell::plain(&r.age),
        ]);
    }
    section("SOLVERS", t, &format!("No Solvers in namespace {ns}."));
    let mut t = Table::new(&["NAME", "ROLE", "TYPE", "WITH", "EXPIRES", "AGE"]);
    for r in &status.contracts {
        let expires = if r.expires.starts_with("expired") {
            Cell::state("expired")
        } else {
            Cell::plain("")
        };
        t.push(vec![
            Cell::plain(&r.name),
            Cell::plain(&r.role),
            Cell::plain(&r.flavor_type),
            Cell::plain(&r.counterparty),
            Cell {
                text: r.expires.clone(),
                tone: expires.tone,
            },
            Cell::plain(&r.age),
        ]);
    }
    section("CONTRACTS", t, &format!("No Contracts in namespace {ns}."));
    let mut t = Table::new(&["NAME", "CONTRACT", "STATUS", "MESSAGE", "AGE"]);
    for r in &status.allocations {
        t.push(vec![
            Cell::plain(&r.name),
            Cell::plain(&r.contract),
            Cell::state(&r.status),
            Cell::plain(truncate(&r.message, MESSAGE_WIDTH)),
            Cell::plain(&r.age),
        ]);
    }
    section(
        "ALLOCATIONS",
        t,
        &format!("No Allocations in namespace {ns}."),
    );
    if let Some(peerings) = &status.peerings {
        let mut t = Table::new(&["CLUSTER", "ROLE", "MODULES", "REASON", "AGE"]);
        for r in peerings {
            t.push(vec![
                Cell::plain(&r.cluster_id),
                Cell::plain(&r.role),
                Cell::plain(&r.modules),
                Cell::plain(truncate(&r.reason, MESSAGE_WIDTH)),
                Cell::plain(&r.age),
            ]);
        }
        section("PEERINGS (Liqo)", t, "No Liqo peerings.");
    }
    out
}

/// Runs `status`.
pub async fn run(client: Client, namespace: &str, args: &StatusArgs) -> anyhow::Result<()> {
    let params = ListParams::default();
    let solvers = Api::<Solver>::namespaced(client.clone(), namespace);
    let contracts = Api::<Contract>::namespaced(client.clone(), namespace);
    let allocations = Api::<Allocation>::namespaced(client.clone(), namespace);
    let foreign = Api::<DynamicObject>::all_with(client.clone(), &foreign_cluster_resource());
    let (solvers, contracts, allocations, foreign, me) = tokio::join!(
        solvers.list(&params),
        contracts.list(&params),
        allocations.list(&params),
        foreign.list(&params),
        cluster::local_node_id(&client, namespace),
    );
    let solvers = solvers.map_err(|e| explain_api_error(e, "Solver", namespace))?;
    let contracts = contracts.map_err(|e| explain_api_error(e, "Contract", namespace))?;
    let allocations = allocations.map_err(|e| explain_api_error(e, "Allocation", namespace))?;
    let peerings = match foreign {
        Ok(list) => Some(list.items),
        // Liqo not installed: no peerings to show, and nothing to say.
        Err(e) if cluster::is_not_found(&e) => None,
        Err(e) => {
            eprintln!("warning: cannot list Liqo ForeignClusters: {e}");
            None
        }
    };
    let status = build(
        namespace,
        solvers.items,
        contracts.items,
        allocations.items,
        peerings,
        me.as_deref(),
        jiff::Timestamp::now(),
    );
    match args.output {
        Some(format) => print_structured(format, &status),
        None => {
            print!("{}", render(&status, Palette::detect()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fluidos_api::allocation::{AllocationSpec, AllocationState, AllocationStatus};
    use fluidos_api::solver::{SolverSpec, SolverStatus};
    use fluidos_api::{GenericRef, PhaseStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).unwrap()
    }

    fn contract(name: &str, seller: &str, buyer: &str, expires: Option<&str>) -> Contract {
        let mut c = crate::fixtures::contract(name, "Service", seller, buyer, expires);
        c.metadata.creation_timestamp = Some(Time(at(1000)));
        c
    }

    #[test]
    fn solver_rows_show_phases_steps_and_age() {
        let mut s = Solver::new(
            "s1",
            SolverSpec {
                selector: None,
                intent_id: "i".into(),
                find_candidate: Some(true),
                reserve_and_buy: Some(true),
                establish_peering: Some(false),
            },
        );
        s.metadata.creation_timestamp = Some(Time(at(1000)));
        let row = solver_row(&s, at(1030));
        assert_eq!(
            (row.phase.as_str(), row.steps.as_str(), row.age.as_str()),
            ("Pending", "Pending/Pending/-", "30s")
        );
        assert_eq!(row.flavor_type, "any");
        s.status = Some(SolverStatus {
            find_candidate: Some(Phase::Solved),
            reserve_and_buy: Some(Phase::Failed),
            solver_phase: Some(PhaseStatus {
                phase: Phase::Failed,
                message: Some("Reservation: Flavor reservation and purchase failed".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let row = solver_row(&s, at(1030));
        assert_eq!(row.phase, "Failed");
        assert_eq!(row.steps, "Solved/Failed/-");
        s.status.as_mut().unwrap().reserve_and_buy = None;
        assert_eq!(
            solver_row(&s, at(1030)).steps,
            "Solved/-/-",
            "never reached"
        );
        assert_eq!(
            row.message,
            "Reservation: Flavor reservation and purchase failed"
        );
    }

    #[test]
    fn contracts_say_who_bought_and_when_they_end() {
        let c = contract("c1", "prov", "cons", Some("1970-01-01T01:00:00Z"));
        let row = contract_row(&c, Some("cons"), at(1200));
        assert_eq!(row.role, "bought");
        assert_eq!(row.counterparty, "prov");
        assert_eq!(row.expires, "in 40m");
        let row = contract_row(&c, Some("prov"), at(4000));
        assert_eq!(row.role, "sold");
        assert_eq!(row.counterparty, "cons");
        assert_eq!(row.expires, "expired 6m40s ago");
        let row = contract_row(&contract("c2", "p", "b", None), None, at(1000));
        assert_eq!(
            (row.role.as_str(), row.counterparty.as_str()),
            ("-", "p -> b")
        );
        assert_eq!(row.expires, "-");
        assert_eq!(expiry_text(Some("someday"), at(0)), "someday");
    }

    #[test]
    fn allocations_show_teardown() {
        let mut a = Allocation::new(
            "a1",
            AllocationSpec {
                forwarding: None,
                contract: Some(GenericRef::named("fluidos", "c1")),
            },
        );
        a.status = Some(AllocationStatus {
            status: Some(AllocationState::Active),
            message: Some("service ready".into()),
            ..Default::default()
        });
        let row = allocation_row(&a, at(0));
        assert_eq!(
            (row.status.as_str(), row.contract.as_str()),
            ("Active", "c1")
        );
        a.metadata.deletion_timestamp = Some(Time(at(0)));
        a.metadata.finalizers = Some(vec!["fluidos.eu/service-allocation-consumer".into()]);
        let row = allocation_row(&a, at(0));
        assert_eq!(row.status, "Terminating");
        assert_eq!(
            row.message,
            "teardown by fluidos.eu/service-allocation-consumer; service ready"
        );
    }

    #[test]
    fn peerings_summarise_enabled_modules() {
        let fc: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.liqo.io/v1beta1",
            "kind": "ForeignCluster",
            "metadata": {"name": "provider-cluster"},
            "spec": {"clusterID": "provider-cluster"},
            "status": {"role": "Provider", "modules": {
                "authentication": {"enabled": true, "conditions": [
                    {"type": "AuthIdentityControlPlaneStatus", "status": "Established"}]},
                "networking": {"enabled": false},
                "offloading": {"enabled": true, "conditions": [
                    {"type": "OffloadingVirtualNodeReady", "status": "NotReady",
                     "message": "virtual node not ready"}]}
            }}
        }))
        .unwrap();
        let row = peering_row(&fc, at(0));
        assert_eq!(row.role, "Provider");
        assert_eq!(
            row.modules,
            "authentication=Established offloading=NotReady"
        );
        assert_eq!(
            row.reason,
            "OffloadingVirtualNodeReady: virtual node not ready"
        );
        let bare: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.liqo.io/v1beta1", "kind": "ForeignCluster",
            "metadata": {"name": "x"}
        }))
        .unwrap();
        let row = peering_row(&bare, at(0));
        assert_eq!(
            (
                row.cluster_id.as_str(),
                row.role.as_str(),
                row.modules.as_str()
            ),
            ("x", "Unknown", "-")
        );
    }

    #[test]
    fn the_view_has_a_section_per_kind() {
        let status = build(
            "fluidos",
            vec![],
            vec![contract("c1", "prov", "cons", None)],
            vec![],
            None,
            Some("cons"),
            at(1060),
        );
        let text = render(&status, Palette::plain());
        assert_eq!(
            text,
            "SOLVERS\nNo Solvers in namespace fluidos.\n\n\
             CONTRACTS\n\
             NAME   ROLE     TYPE      WITH   EXPIRES   AGE\n\
             c1     bought   Service   prov   -         60s\n\n\
             ALLOCATIONS\nNo Allocations in namespace fluidos.\n"
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["contracts"][0]["flavorType"], "Service");
        assert!(json.get("peerings").is_none());
    }
}

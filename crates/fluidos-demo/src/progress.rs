//! Following Solvers as a user would with `kubectl get solvers -w`: a line
//! each time one's phases change, until all of them are done. Watched,
//! never polled.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fluidos_api::{Phase, Solver};
use futures::StreamExt as _;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource as _, ResourceExt as _};

/// One line of a Solver's progress and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Summary {
    line: String,
    /// Its phase terminal with its purchase settled, or failed.
    done: bool,
    failed: bool,
}

fn summary(solver: &Solver) -> Summary {
    let st = solver.status.clone().unwrap_or_default();
    let p = st.solver_phase.clone().unwrap_or_default();
    let show = |phase: Option<&Phase>| phase.map(ToString::to_string).unwrap_or_default();
    let line = format!(
        "{} find={} reserveAndBuy={} peering={} | {} — {}",
        solver.name_any(),
        show(st.find_candidate.as_ref()),
        show(st.reserve_and_buy.as_ref()),
        show(st.peering.as_ref()),
        p.phase,
        p.message.unwrap_or_default()
    );
    let bought = st.reserve_and_buy.is_some_and(|r| r.is_terminal());
    let failed = p.phase == Phase::Failed;
    Summary {
        line,
        done: p.phase.is_terminal() && bought || failed,
        failed,
    }
}

/// Prints each change of the `names` Solvers (times from `since`) until
/// all are done or `timeout` passed; fails naming the first that failed.
pub async fn follow_solvers(
    solvers: Api<Solver>,
    names: &[String],
    since: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let mut last: BTreeMap<String, Summary> = BTreeMap::new();
    let mut changes = Box::pin(
        watcher(solvers, watcher::Config::default())
            .default_backoff()
            .applied_objects(),
    );
    let follow = async {
        while let Some(solver) = changes.next().await {
            let solver = solver.context("watching Solvers")?;
            let name = solver.name_any();
            // A Solver its controller has not seen yet says nothing.
            if !wanted.contains(name.as_str())
                || solver.status.is_none()
                || solver.meta().deletion_timestamp.is_some()
            {
                continue;
            }
            let now = summary(&solver);
            if last.get(&name) != Some(&now) {
                println!("[{:7.3}s] {}", since.elapsed().as_secs_f64(), now.line);
                last.insert(name, now);
            }
            if let Some(failed) = last.values().find(|s| s.failed) {
                bail!("a Solver failed: {}", failed.line);
            }
            if last.len() == wanted.len() && last.values().all(|s| s.done) {
                return Ok(());
            }
        }
        bail!("the watch of Solvers ended")
    };
    tokio::time::timeout(timeout, follow)
        .await
        .with_context(|| format!("the Solvers did not finish within {timeout:?}"))??;
    if let Some(failed) = last.values().find(|s| s.failed) {
        bail!("a Solver failed: {}", failed.line);
    }
    Ok(())
}

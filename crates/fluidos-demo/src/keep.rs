//! `--keep`: the clusters stay up, their kubeconfigs printed, until Ctrl-C.

use fluidos_testenv::ControlPlane;

/// Prints how to reach each cluster by hand and waits for Ctrl-C (or
/// SIGTERM). The clusters' processes end with the demo, so it stays.
pub async fn until_interrupted(clusters: &[(&str, &ControlPlane)]) {
    println!();
    println!("--keep: both clusters stay up until Ctrl-C. By hand:");
    for (side, cp) in clusters {
        println!(
            "  {side}: export KUBECONFIG={}   # {}",
            cp.kubeconfig_path().display(),
            cp.server_url()
        );
    }
    // The kubectl the clusters were built with, where kubectl is not installed.
    let kubectl = match clusters.first() {
        Some((_, cp)) => cp
            .kubectl()
            .await
            .map(|c| c.get_program().to_string_lossy().into_owned())
            .unwrap_or_else(|_| "kubectl".into()),
        None => "kubectl".into(),
    };
    println!("  {kubectl} get solvers,contracts,allocations -n fluidos");
    println!(
        "  cargo build -p kubectl-fluidos && PATH={}:$PATH kubectl fluidos --help",
        fluidos_testenv::workspace_root()
            .join("target/debug")
            .display()
    );
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            eprintln!("cannot wait for SIGTERM ({e}); waiting for Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!();
}

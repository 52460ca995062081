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
    println!("  kubectl get solvers,contracts,allocations -n fluidos");
    println!(
        "  cargo build -p kubectl-fluidos && PATH=$PWD/target/debug:$PATH kubectl fluidos --help"
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

//! `cargo run -p fluidos-demo`: the FLUIDOS marketplace in one command.
//!
//! Where this machine can run real containers (root, and the packages of
//! `tools/node-runtime/install.sh`), two real clusters: Liqo and fluidos-node
//! installed by their charts, a K8Slice bought and peered with a pod running
//! on the provider through the virtual node, and a Service bought and
//! answering its buyer ([`real`]). Elsewhere the light stage ([`light`]):
//! two control planes with kwok nodes and the nodes as host processes, up
//! to the Contracts. It says at the start which one it runs, and why.

mod keep;
mod light;
mod prepare;
mod progress;
mod real;

use clap::{Parser, ValueEnum};

/// Which clusters the demo runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Stage {
    /// Real clusters where this machine can run them, else light.
    Auto,
    /// Real clusters (real kubelets and containers; Liqo and fluidos-node
    /// installed by their charts); refused with the reason where this
    /// machine cannot run them.
    Real,
    /// Control planes with kwok nodes, the nodes as host processes; ends
    /// at the Contracts.
    Light,
}

/// The FLUIDOS marketplace on two local clusters: a provider sells, a
/// consumer buys, and what it bought works.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Which clusters to run on.
    #[arg(long, value_enum, default_value_t = Stage::Auto)]
    stage: Stage,
    /// Leave both clusters up at the end, with their kubeconfigs printed,
    /// until Ctrl-C.
    #[arg(long)]
    keep: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let real_possible = fluidos_testenv::real_node_prerequisites();
    match (args.stage, real_possible) {
        (Stage::Real | Stage::Auto, Ok(())) => {
            println!(
                "stage: real clusters (each with a kubelet, containerd and runc; Liqo and fluidos-node installed by their charts)"
            );
            real::run(args.keep).await
        }
        (Stage::Real, Err(why)) => {
            anyhow::bail!("this machine cannot run the real stage: {why}")
        }
        (Stage::Auto, Err(why)) => {
            println!("stage: light (control planes with kwok nodes; no peering or pod): {why}");
            light::run(args.keep).await
        }
        (Stage::Light, _) => {
            println!("stage: light (control planes with kwok nodes; no peering or pod), as asked");
            light::run(args.keep).await
        }
    }
}

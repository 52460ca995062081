//! `fluidos-multicast`: advertises a node identity on the LAN and prints
//! every valid advertisement it hears from others as one JSON line on
//! stdout, with the same sockets and checks as the node. For looking at a
//! LAN's discovery traffic without an API server, and for tests whose
//! listener runs in a network namespace that cannot reach one.

use std::time::Duration;

use clap::Parser;
use fluidos_network_manager::multicast::MulticastSockets;
use fluidos_network_manager::{MulticastSettings, NetworkMetrics, config};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Command line of `fluidos-multicast`.
#[derive(Parser, Debug)]
#[command(
    name = "fluidos-multicast",
    about = "Advertise and listen for FLUIDOS nodes on the LAN"
)]
struct Args {
    /// Group and port.
    #[arg(long, env = "MULTICAST_ADDRESS", default_value = config::DEFAULT_MULTICAST_ADDRESS)]
    multicast_address: String,
    /// Interface name or IPv4 address.
    #[arg(long)]
    interface: Option<String>,
    /// Node ID to advertise (with --ip); listen only when absent.
    #[arg(long, requires = "ip")]
    node_id: Option<String>,
    /// `host:port` of the REAR gateway to advertise.
    #[arg(long)]
    ip: Option<String>,
    /// REAR key fingerprint to advertise (`sha256:<64 lower-case hex>`);
    /// none when absent, as a Go node.
    #[arg(long, requires = "node_id")]
    fingerprint: Option<fluidos_rear_identity::Fingerprint>,
    /// FLUIDOS domain to advertise.
    #[arg(long, default_value = "fluidos.eu")]
    domain: String,
    /// Advertisement period in milliseconds.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fluidos-multicast: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let settings = MulticastSettings {
        group: config::parse_multicast_address(&args.multicast_address)?,
        interface: args.interface,
        interval: Duration::from_millis(args.interval_ms),
    };
    let sockets = MulticastSockets::open(&settings)?;
    let identity = fluidos_api::NodeIdentity {
        domain: args.domain,
        node_id: args.node_id.unwrap_or_default(),
        ip: args.ip.unwrap_or_default(),
        additional_information: None,
    };
    let advertising = !identity.node_id.is_empty();
    // Readiness for whoever started us: the sockets are up.
    eprintln!(
        "fluidos-multicast: listening on {} via {}",
        sockets.group(),
        sockets.interface()
    );
    let (receiver, sender) = sockets.split();
    let metrics = NetworkMetrics::default();
    let shutdown = CancellationToken::new();
    let (tx, mut rx) = mpsc::channel(1024);
    let own = fluidos_network_manager::Advertisement::of(&identity)
        .with_fingerprint(args.fingerprint.as_ref());
    let print = async {
        let mut stdout = tokio::io::stdout();
        while let Some(ad) = rx.recv().await {
            let mut line = serde_json::to_vec(&ad)?;
            line.push(b'\n');
            stdout.write_all(&line).await?;
            stdout.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let stop = async {
        // Stops on SIGTERM/SIGINT (or when signals cannot be watched).
        let _ = tokio::signal::ctrl_c().await;
        shutdown.cancel();
    };
    let (printed, (), (), ()) = tokio::join!(
        print,
        async {
            receiver.listen(&identity, &tx, &metrics, &shutdown).await;
            drop(tx);
        },
        async {
            if advertising {
                sender
                    .advertise(&own, settings.interval, &metrics, &shutdown)
                    .await;
            }
        },
        stop,
    );
    printed?;
    Ok(())
}

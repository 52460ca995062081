//! Command line of `kubectl fluidos`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::output::OutputFormat;

/// Operate a FLUIDOS node from kubectl: flavors, Solvers, contracts.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-fluidos",
    bin_name = "kubectl fluidos",
    version,
    about = "Operate a FLUIDOS node: list flavors, solve a request with a live progress view, see the market's state, release contracts.",
    after_help = "Exit codes: 0 success; 1 failure (a Solver failed, an API or provider error); 2 bad usage; 3 gave up waiting (--timeout); 130 interrupted."
)]
pub struct Cli {
    /// How to reach the cluster.
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Help heading of the connection flags, shown apart from each command's own.
const CONNECTION: &str = "Cluster options";

/// kubectl's connection flags, with kubectl's meaning.
#[derive(Debug, Args, Clone, Default)]
pub struct ConnectionArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH", help_heading = CONNECTION)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME", help_heading = CONNECTION)]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME", help_heading = CONNECTION)]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME", help_heading = CONNECTION)]
    pub user: Option<String>,
    /// The FLUIDOS node's namespace.
    #[arg(
        short = 'n',
        long,
        global = true,
        value_name = "NAMESPACE",
        help_heading = CONNECTION,
        default_value = fluidos_api::DEFAULT_NAMESPACE
    )]
    pub namespace: String,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the flavors this node sells, or (--remote) those its providers offer.
    Flavors(FlavorsArgs),
    /// Create a Solver and follow it phase by phase until it is Solved or Failed.
    Solve(Box<SolveArgs>),
    /// Show Solvers, Contracts, Allocations and Liqo peerings, with ages and reasons.
    Status(StatusArgs),
    /// End a contract: delete its Allocation, wait for the node's teardown, then delete the Contract.
    Release(ReleaseArgs),
}

/// `flavors`.
#[derive(Debug, Args)]
pub struct FlavorsArgs {
    /// Ask the known providers (KnownClusters and --peer) over REAR instead of listing local Flavors.
    #[arg(long)]
    pub remote: bool,
    /// A provider's REAR address (host:port, or host:port#sha256:<64 hex> to ask it over TLS pinned to that key) to ask besides the KnownClusters; implies --remote. Repeatable.
    #[arg(long = "peer", value_name = "HOST:PORT[#FINGERPRINT]")]
    pub peers: Vec<String>,
    /// How long to wait for each provider.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub peer_timeout: Duration,
    /// Output format instead of the table.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<OutputFormat>,
}

/// The flavor type a Solver asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FlavorKind {
    /// A compute slice of a provider's cluster.
    #[value(name = "K8Slice", alias = "k8slice")]
    K8Slice,
    /// A software service instantiated from a ServiceBlueprint.
    #[value(name = "Service", alias = "service")]
    Service,
}

/// `solve`.
#[derive(Debug, Args, Default)]
pub struct SolveArgs {
    /// A Solver manifest to create instead of the flags below ("-" reads stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with_all = [
        "name", "flavor_type", "cpu", "memory", "pods", "storage", "architecture",
        "category", "tags", "find_only", "establish_peering", "intent_id",
    ])]
    pub file: Option<PathBuf>,
    /// The Solver's name (default: generated, `solver-xxxxx`).
    #[arg(long)]
    pub name: Option<String>,
    /// What to buy (default: K8Slice).
    #[arg(long, value_enum, value_name = "TYPE")]
    pub flavor_type: Option<FlavorKind>,
    /// K8Slice: at least this much CPU (e.g. 2, 500m); this much is bought.
    #[arg(long, value_name = "QUANTITY")]
    pub cpu: Option<String>,
    /// K8Slice: at least this much memory (e.g. 4Gi); this much is bought.
    #[arg(long, value_name = "QUANTITY")]
    pub memory: Option<String>,
    /// K8Slice: at least this many pods; this many are bought.
    #[arg(long, value_name = "COUNT")]
    pub pods: Option<String>,
    /// K8Slice: at least this much storage.
    #[arg(long, value_name = "QUANTITY")]
    pub storage: Option<String>,
    /// K8Slice: this CPU architecture exactly (e.g. amd64).
    #[arg(long, value_name = "ARCH")]
    pub architecture: Option<String>,
    /// Service: this category exactly (e.g. database).
    #[arg(long, value_name = "CATEGORY")]
    pub category: Option<String>,
    /// Service: a tag the service must have.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Option<String>,
    /// Only find a candidate; do not reserve or buy.
    #[arg(long)]
    pub find_only: bool,
    /// Allocate what is bought (peer with the provider through Liqo for a K8Slice).
    #[arg(long)]
    pub establish_peering: bool,
    /// The orchestrator intent this Solver serves (default: the Solver's name).
    #[arg(long, value_name = "ID")]
    pub intent_id: Option<String>,
    /// Give up waiting after this long (the Solver keeps running).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Create the Solver and exit without following it.
    #[arg(long)]
    pub no_wait: bool,
}

/// `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Output format instead of the tables.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<OutputFormat>,
}

/// `release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// `contract/NAME`, `solver/NAME`, or a bare NAME (a Contract, else a Solver).
    pub target: String,
    /// Delete without waiting for the Allocation's teardown (the Contract is deleted at once).
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the teardown.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A duration as kubectl writes them (Go's `time.ParseDuration` units
/// `ms`, `s`, `m`, `h`, combinable: `1m30s`); a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: missing unit (use ms, s, m or h)"))?;
        let (number, after) = rest.split_at(digits);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let seconds = match unit {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (use ms, s, m or h)"
                ));
            }
        };
        total += Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))?;
        rest = next;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_parse_like_kubectl() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn connection_flags_go_after_the_subcommand_too() {
        // kubectl hands a plugin every argument after its name, flags included.
        let cli = Cli::try_parse_from([
            "kubectl-fluidos",
            "status",
            "--kubeconfig",
            "/tmp/kc",
            "--context",
            "consumer",
            "-n",
            "market",
            "-o",
            "yaml",
        ])
        .unwrap();
        assert_eq!(cli.connection.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        assert_eq!(cli.connection.context.as_deref(), Some("consumer"));
        assert_eq!(cli.connection.namespace, "market");
        let Command::Status(s) = cli.command else {
            panic!("not status")
        };
        assert_eq!(s.output, Some(OutputFormat::Yaml));
    }

    #[test]
    fn a_file_excludes_the_solver_flags() {
        let err = Cli::try_parse_from(["kubectl-fluidos", "solve", "-f", "s.yaml", "--cpu", "2"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
        let cli = Cli::try_parse_from([
            "kubectl-fluidos",
            "solve",
            "--flavor-type",
            "service",
            "--category",
            "database",
        ])
        .unwrap();
        let Command::Solve(s) = cli.command else {
            panic!("not solve")
        };
        assert_eq!(s.flavor_type, Some(FlavorKind::Service));
        assert_eq!(s.timeout, Duration::from_secs(300));
    }
}

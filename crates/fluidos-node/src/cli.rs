//! Command-line flags; each also reads a `FLUIDOS_*` environment variable.
//!
//! Where the Go node has the same setting, the flag keeps its name and
//! default, so the Helm chart's arguments carry over.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

pub use crate::flag_values::{Component, LogFormat};
use crate::flavor_config::FlavorConfig;
use crate::go_flags::{GoFlags, component_for_program};

/// Service type of a Liqo GatewayServer (`--liqo-gateway-service-type`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "verbatim")]
pub enum GatewayServiceType {
    /// A port on every node (the Go node's choice).
    NodePort,
    /// A cloud load balancer (liqoctl's default).
    LoadBalancer,
    /// Reachable inside the provider's cluster network only.
    ClusterIP,
}

impl From<GatewayServiceType> for fluidos_peering::GatewayServiceType {
    fn from(t: GatewayServiceType) -> Self {
        match t {
            GatewayServiceType::NodePort => Self::NodePort,
            GatewayServiceType::LoadBalancer => Self::LoadBalancer,
            GatewayServiceType::ClusterIP => Self::ClusterIp,
        }
    }
}

/// Everything the `fluidos-node` binary can be told at startup.
#[derive(Parser, Clone, Debug, PartialEq)]
#[command(
    name = "fluidos-node",
    version,
    about = "FLUIDOS node: publishes, discovers, reserves and buys Kubernetes resources across clusters.",
    after_help = "Log verbosity comes from RUST_LOG (default `info`), e.g. RUST_LOG=fluidos_node=debug,kube=info."
)]
pub struct Args {
    /// Namespace holding the node's identity ConfigMap and FLUIDOS resources.
    #[arg(long, env = "FLUIDOS_NAMESPACE", default_value = fluidos_api::DEFAULT_NAMESPACE, value_parser = parse_namespace)]
    pub namespace: String,

    /// Comma-separated components to run.
    #[arg(
        long,
        env = "FLUIDOS_COMPONENTS",
        value_delimiter = ',',
        default_values_t = Component::ALL,
    )]
    pub components: Vec<Component>,

    /// Port of the REAR gateway (Go `rear-controller --http-port`).
    #[arg(long, env = "FLUIDOS_HTTP_PORT", default_value_t = 3004)]
    pub http_port: u16,

    /// Address the REAR gateway listens on.
    #[arg(long, env = "FLUIDOS_REAR_BIND_ADDRESS", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub rear_bind_address: IpAddr,

    /// Address of `/healthz` and `/readyz`; Go's `:8081` form is accepted.
    #[arg(long, env = "FLUIDOS_HEALTH_PROBE_BIND_ADDRESS", default_value = "0.0.0.0:8081", value_parser = parse_bind_address)]
    pub health_probe_bind_address: SocketAddr,

    /// Address of the Prometheus `/metrics` endpoint; `0` disables it, as in Go.
    // Fully qualified so clap does not read it as "flag may be omitted".
    #[arg(long, env = "FLUIDOS_METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080", value_parser = parse_metrics_address)]
    pub metrics_bind_address: std::option::Option<SocketAddr>,

    /// Log line format.
    #[arg(long, env = "FLUIDOS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Local resource manager settings.
    #[command(flatten)]
    pub flavor: FlavorConfig,

    /// The Go binaries' flags without a setting of their own here.
    #[command(flatten)]
    pub go: GoFlags,

    /// Leader election (Go `--leader-elect`): of the replicas running the
    /// same components, only the holder of a Lease runs the controllers; the
    /// REAR gateway serves on every replica. docs/leader-election.md.
    #[arg(
        long,
        env = "FLUIDOS_LEADER_ELECT",
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub leader_elect: bool,

    /// Leader-election settings, used with `--leader-elect`.
    #[command(flatten)]
    pub leader_election: LeaderElectionFlags,

    /// This cluster's Liqo cluster ID; read from `liqo/liqo-clusterid-configmap`
    /// (`CLUSTER_ID`) when not given, waiting for it (REAR answers 503 and
    /// `/readyz` says why) until Liqo publishes it; `fluidos-<nodeID>` only
    /// with `--peering=false`.
    #[arg(long, env = "FLUIDOS_LIQO_CLUSTER_ID")]
    pub liqo_cluster_id: Option<String>,

    /// Whether this node peers through Liqo (K8Slice allocation): it then
    /// needs Liqo's cluster ID. `false` runs without Liqo (services only)
    /// under the stand-in ID `fluidos-<nodeID>`.
    #[arg(long, env = "FLUIDOS_PEERING", default_value_t = true, action = clap::ArgAction::Set)]
    pub peering: bool,

    /// Pod Security level of the namespaces Liqo makes here for peers'
    /// workloads (a K8Slice buyer's offloaded pods; a seller's, when this
    /// node buys Services delivered by Liqo): `restricted` (the default) or
    /// `baseline`. The node labels those namespaces and keeps admission
    /// policies that refuse, naming the field, what the level forbids
    /// (docs/peer-workloads.md). `privileged` also needs
    /// `--peer-pod-security-allow-privileged`.
    #[arg(long, env = "FLUIDOS_PEER_POD_SECURITY", default_value = "restricted")]
    pub peer_pod_security: fluidos_peer_access::PodSecurityLevel,

    /// The explicit opt-in `--peer-pod-security privileged` needs: any peer
    /// that buys a K8Slice may then take this cluster's nodes over.
    #[arg(long, env = "FLUIDOS_PEER_POD_SECURITY_ALLOW_PRIVILEGED", default_value_t = false, action = clap::ArgAction::Set)]
    pub peer_pod_security_allow_privileged: bool,

    /// The ways peers' workloads here may be reached from outside this
    /// cluster, comma-separated: `node-port`, `load-balancer`,
    /// `external-name` (Service types besides ClusterIP, as Liqo reflects
    /// them from the peer) and `ingress` (Ingresses that name their hosts).
    /// None by default: a peer's NodePort would open its port on every node
    /// here, and its Ingress claim host names on this cluster's ingress
    /// controllers (docs/peer-workloads.md).
    #[arg(long, env = "FLUIDOS_PEER_EXPOSURE", value_delimiter = ',')]
    pub peer_exposure: Vec<fluidos_peer_access::PeerExposure>,

    /// Whether the consumer's peering includes Liqo's networking phase
    /// (Configurations, a GatewayServer on the provider, a GatewayClient
    /// here, PublicKeys, Connections), as `liqoctl peer` does by default and
    /// the Go node always does. Turn it on where Liqo runs with its
    /// networking module; off peers as `liqoctl peer --networking-disabled`.
    #[arg(long, env = "FLUIDOS_LIQO_NETWORKING", default_value_t = false, action = clap::ArgAction::Set)]
    pub liqo_networking: bool,

    /// Service type of the WireGuard GatewayServer this node asks its
    /// providers to expose (with `--liqo-networking`); the Go node's is
    /// NodePort.
    #[arg(long, env = "FLUIDOS_LIQO_GATEWAY_SERVICE_TYPE", value_enum, default_value_t = GatewayServiceType::NodePort)]
    pub liqo_gateway_service_type: GatewayServiceType,

    /// Providers to query besides KnownClusters, comma-separated: `host:port`
    /// (plain HTTP, e.g. a Go node) or `host:port#sha256:<64 hex>` (TLS,
    /// accepted only with that key fingerprint).
    #[arg(long = "peers", env = "FLUIDOS_PEERS", value_delimiter = ',')]
    pub peers: Vec<String>,

    /// Per-provider timeout of a discovery query (a flavor listing), in milliseconds.
    #[arg(long, env = "FLUIDOS_PEER_TIMEOUT_MS", default_value_t = 3000)]
    pub peer_timeout_ms: u64,

    /// Discovery queries in flight at once, all Discoveries together (the
    /// others wait their turn, their timeout not yet running): each may hold
    /// a 4 MiB listing and 4 MiB of what it decodes to.
    #[arg(long, env = "FLUIDOS_DISCOVERY_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub discovery_concurrency: u16,

    /// Timeout of a RESERVE call to a provider, in milliseconds.
    #[arg(long, env = "FLUIDOS_RESERVE_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub reserve_timeout_ms: u64,

    /// Timeout of a PURCHASE call to a provider, in milliseconds. A Go
    /// provider takes 10–17 s; a purchase that gets no answer in time is asked
    /// again (for up to 10 minutes), not reported failed.
    #[arg(long, env = "FLUIDOS_PURCHASE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub purchase_timeout_ms: u64,

    /// API server URL written into peering kubeconfigs (default: the one this node uses).
    #[arg(long, env = "FLUIDOS_API_SERVER_URL")]
    pub api_server_url: Option<String>,

    /// CA written into peering kubeconfigs instead of the one this node's
    /// client trusts, for an `--api-server-url` whose certificate another CA
    /// issued: its PEM, base64-encoded (as Liqo's `--ca-override`).
    #[arg(long, env = "FLUIDOS_API_SERVER_CA", value_parser = crate::peer_api_server::parse_ca, conflicts_with = "api_server_trusted_ca")]
    pub api_server_ca: Option<String>,

    /// Write no CA into peering kubeconfigs: the `--api-server-url`'s
    /// certificate is issued by a CA peers trust already (as Liqo's
    /// `--trusted-ca`).
    #[arg(long, env = "FLUIDOS_API_SERVER_TRUSTED_CA", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub api_server_trusted_ca: bool,

    /// How long a provider holds a reservation, in seconds (upstream: 1 hour).
    #[arg(long, env = "FLUIDOS_TRANSACTION_TTL_SECONDS", default_value_t = 3600)]
    pub transaction_ttl_seconds: u64,

    /// REAR requests per second one peer address may sustain; `0` turns the
    /// limit off. Over it: 429 with `Retry-After`.
    #[arg(long, env = "FLUIDOS_REAR_RATE_LIMIT", default_value_t = 50)]
    pub rear_rate_limit: u32,

    /// REAR requests one peer address may send at once after being quiet.
    #[arg(long, env = "FLUIDOS_REAR_RATE_BURST", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub rear_rate_burst: u32,

    /// Most live reservations (holds) one buyer may have over all flavors.
    #[arg(long, env = "FLUIDOS_REAR_MAX_HOLDS_PER_BUYER", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub rear_max_holds_per_buyer: u64,

    /// Most live reservations held from one peer address (an IPv4
    /// address, an IPv6 /64) over all flavors, whatever keys and buyer IDs
    /// it uses (keys cost nothing). Behind a load balancer that rewrites
    /// source addresses every buyer shares one: `0` turns it off (the chart
    /// does unless its Service keeps client addresses).
    #[arg(
        long,
        env = "FLUIDOS_REAR_MAX_HOLDS_PER_ADDRESS",
        default_value_t = 128
    )]
    pub rear_max_holds_per_address: u64,

    /// Longest life of a hold in seconds, however often it is renewed.
    #[arg(long, env = "FLUIDOS_REAR_MAX_HOLD_AGE_SECONDS", default_value_t = 7200, value_parser = clap::value_parser!(u64).range(1..))]
    pub rear_max_hold_age_seconds: u64,

    /// Which peers may reserve and buy over plain HTTP, which proves nothing
    /// about the buyer: `off`, `all`, or a comma-separated list of addresses
    /// and CIDR networks. Unmodified Go nodes only speak `http://`; FLUIDOS-rs
    /// consumers that know this node's key fingerprint buy over TLS on the
    /// same port. Listing flavors is open either way.
    #[arg(long, env = "FLUIDOS_REAR_PLAIN_HTTP_SALES", default_value = "off")]
    pub rear_plain_http_sales: fluidos_rear_gateway::PlainHttpSales,

    /// Who may buy K8Slices (a sale makes the buyer a Liqo consumer of this
    /// cluster, and REAR keys cost nothing): `open`, or a comma-separated
    /// list of `known` (a TLS buyer whose key is a KnownCluster's
    /// `spec.fingerprint` here), `sha256:<64 hex>` keys, and addresses or
    /// CIDR networks. Services are not affected (README, "Who may buy").
    #[arg(long, env = "FLUIDOS_REAR_K8SLICE_BUYERS", default_value = "open")]
    pub rear_k8slice_buyers: fluidos_rear_gateway::K8SliceBuyers,

    /// Which plain-HTTP buyers of K8Slices (unmodified Go consumers, which
    /// create Liqo's objects here themselves) get the rights the Go node's
    /// peering needs: `off`, `all`, or a comma-separated list of addresses
    /// and CIDR networks. It adds cluster-wide creation of namespaces,
    /// Secrets and Liqo objects, confined by an admission policy to the
    /// buyer's own `liqo-tenant-<cluster ID>`, and the listing of Liqo
    /// Connections (README, "Trading with Go nodes").
    #[arg(long, env = "FLUIDOS_REAR_GO_PEERING_GRANT", default_value = "off")]
    pub rear_go_peering_grant: fluidos_rear_gateway::GoPeeringGrant,

    /// How a sold service's endpoint Service is exposed to its buyer
    /// (delivery without Liqo): `node-port` (addresses `<node>:<nodePort>`)
    /// or `load-balancer` (the load balancer's address).
    #[arg(long, env = "FLUIDOS_SERVICE_EXPOSURE", default_value = "node-port", value_parser = parse_exposure)]
    pub service_exposure: fluidos_service_allocation::exposure::ExposureMode,

    /// How Services are delivered: `rear` (endpoints and credentials over
    /// REAR, the default) or `liqo` (upstream's way: the seller offloads the
    /// service namespace to the buyer's cluster through a Liqo peering in
    /// which the seller is Liqo's consumer). As a buyer, `liqo` sends pinned
    /// sellers a kubeconfig of this cluster with Liqo's peering-user rights
    /// in their tenant namespace only; as a seller, `liqo` delivers that way
    /// to buyers that sent one (docs/service-offloading.md).
    #[arg(long, env = "FLUIDOS_SERVICE_DELIVERY", default_value = "rear")]
    pub service_delivery: fluidos_api::service_delivery::ServiceDelivery,

    /// Host name (or address) given to buyers in a sold service's endpoints,
    /// instead of this node's address (node-port) or the load balancer's.
    #[arg(long, env = "FLUIDOS_SERVICE_EXTERNAL_HOST")]
    pub service_external_host: Option<String>,

    /// LAN discovery by multicast (Go `--enable-local-discovery`). Off, the
    /// network manager only removes expired KnownClusters and needs no
    /// multicast address.
    #[arg(
        long,
        env = "FLUIDOS_ENABLE_LOCAL_DISCOVERY",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub enable_local_discovery: bool,

    /// Discovery through AMQP brokers: a client for every `Broker` object
    /// of the namespace (the Go network manager always runs one). Off, the
    /// network manager neither watches Brokers nor reads their Secrets.
    #[arg(
        long,
        env = "FLUIDOS_ENABLE_BROKER_DISCOVERY",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub enable_broker_discovery: bool,

    /// Multicast group and port of LAN discovery, `<group>:<port>` (Go's
    /// environment variable `MULTICAST_ADDRESS`); checked only when LAN
    /// discovery is on. Default: the Helm chart's `239.11.11.1:4000`.
    #[arg(long, env = "MULTICAST_ADDRESS")]
    pub multicast_address: Option<String>,

    /// Interface of LAN discovery, by name (e.g. `eth1`) or IPv4 address (Go
    /// `--cniInterface`); default: the routing table chooses.
    #[arg(
        long = "cni-interface",
        alias = "cniInterface",
        env = "FLUIDOS_CNI_INTERFACE"
    )]
    pub cni_interface: Option<String>,

    /// Period of this node's multicast advertisement, in milliseconds (Go: 5 s).
    #[arg(long, env = "FLUIDOS_MULTICAST_INTERVAL_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub multicast_interval_ms: u64,

    /// How long an advertisement keeps its KnownCluster, in milliseconds
    /// (at least three advertisement intervals; Go: 10 s, refreshed on every
    /// advertisement).
    #[arg(long, env = "FLUIDOS_KNOWN_CLUSTER_TTL_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub known_cluster_ttl_ms: u64,

    /// Period of the sweep that deletes expired KnownClusters, in milliseconds (Go: 20 s).
    #[arg(long, env = "FLUIDOS_KNOWN_CLUSTER_HOUSEKEEPING_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub known_cluster_housekeeping_ms: u64,
}

/// Settings of `--leader-elect` (controller-runtime's defaults).
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionFlags {
    /// Namespace of the leader-election Lease (default: `--namespace`).
    #[arg(id = "leader_election_namespace", value_name = "NAMESPACE", long = "leader-election-namespace", env = "FLUIDOS_LEADER_ELECTION_NAMESPACE", value_parser = parse_namespace)]
    pub namespace: Option<String>,

    /// Name of the Lease (default: `fluidos-node`, or `fluidos-node-<components>`
    /// when not all four run, so Deployments of different components elect apart).
    #[arg(
        long = "leader-election-lease-name",
        env = "FLUIDOS_LEADER_ELECTION_LEASE_NAME"
    )]
    pub lease_name: Option<String>,

    /// How long the Lease is valid after the leader's last renewal; a standby
    /// takes over this long after the leader stopped renewing.
    #[arg(
        long = "leader-election-lease-duration-seconds",
        env = "FLUIDOS_LEADER_ELECTION_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    pub lease_duration_seconds: u64,

    /// When the leader renews, after its last renewal; if that renewal
    /// fails, the node exits (code 1) so that the controllers stop before the
    /// Lease expires. Less than the lease duration.
    #[arg(
        long = "leader-election-renew-deadline-seconds",
        env = "FLUIDOS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
        default_value_t = 10
    )]
    pub renew_deadline_seconds: u64,

    /// Timeout of each Lease request, and a standby's wait after a failed
    /// one. Less than the lease duration minus the renew deadline.
    #[arg(
        long = "leader-election-retry-period-seconds",
        env = "FLUIDOS_LEADER_ELECTION_RETRY_PERIOD_SECONDS",
        default_value_t = 2
    )]
    pub retry_period_seconds: u64,
}

fn parse_exposure(s: &str) -> Result<fluidos_service_allocation::exposure::ExposureMode, String> {
    s.parse()
}

impl Args {
    /// Parses `argv` as the binary does: invoked under a Go binary's name
    /// (`/usr/bin/rear-controller`, as the Go chart's `command` says), the
    /// component defaults to that one instead of all four.
    pub fn parse_invocation<I, T>(argv: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
        let matches = Args::command().try_get_matches_from(argv.clone())?;
        let mut args = Args::from_arg_matches(&matches)?;
        let program = argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if matches.value_source("components") == Some(ValueSource::DefaultValue)
            && let Some(component) = component_for_program(&program)
        {
            args.components = vec![component];
        }
        if matches.value_source("log_format") == Some(ValueSource::DefaultValue)
            && let Some(format) = args.go.log_format()
        {
            args.log_format = format;
        }
        Ok(args)
    }

    /// The selected components, each once, in start order.
    pub fn selected_components(&self) -> Vec<Component> {
        Component::ALL
            .into_iter()
            .filter(|c| self.components.contains(c))
            .collect()
    }

    /// Where the REAR gateway listens.
    pub fn rear_gateway_address(&self) -> SocketAddr {
        SocketAddr::new(self.rear_bind_address, self.http_port)
    }
}

/// `host:port`, or Go's `:port` meaning every IPv4 interface.
fn parse_bind_address(s: &str) -> Result<SocketAddr, String> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_owned(),
    };
    full.parse()
        .map_err(|_| format!("{s:?} is not an address like 0.0.0.0:8081, [::]:8081 or :8081"))
}

/// Like [`parse_bind_address`], with controller-runtime's `0` meaning "off".
fn parse_metrics_address(s: &str) -> Result<Option<SocketAddr>, String> {
    if s == "0" {
        Ok(None)
    } else {
        parse_bind_address(s).map(Some)
    }
}

/// A DNS-1123 label, the only thing Kubernetes accepts as a namespace.
// Checked here so a typo fails with a flag error instead of a confusing
// "ConfigMap not found" later.
fn parse_namespace(s: &str) -> Result<String, String> {
    let valid = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if valid {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a valid namespace (lower-case letters, digits and '-', at most 63)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    /// Set in a re-executed test binary to run the env-dependent half of a test.
    const CHILD_MARKER: &str = "FLUIDOS_NODE_CLI_TEST_CHILD";

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("fluidos-node").chain(args.iter().copied()))
    }

    /// Re-runs the test `name` in a child process with exactly `envs` as its
    /// `FLUIDOS_*` environment.
    // Edition 2024 makes `set_var` unsafe (and the crate denies unsafe), and
    // it would race with tests on other threads anyway; a child process gets
    // its own environment safely.
    fn run_in_child(name: &str, envs: &[(&str, &str)]) {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = std::process::Command::new(exe);
        cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
        for (key, _) in std::env::vars() {
            if key.starts_with("FLUIDOS_") {
                cmd.env_remove(key);
            }
        }
        cmd.env(CHILD_MARKER, "1");
        cmd.envs(envs.iter().copied());
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child test {name} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A misspelt name would filter out every test and "pass".
        assert!(
            stdout.contains("1 passed"),
            "child ran no test {name}:\n{stdout}"
        );
    }

    fn in_child() -> bool {
        std::env::var_os(CHILD_MARKER).is_some()
    }

    #[test]
    fn defaults_match_the_go_node() {
        if !in_child() {
            return run_in_child("cli::tests::defaults_match_the_go_node", &[]);
        }
        let a = parse(&[]).unwrap();
        assert_eq!(a.namespace, "fluidos");
        assert_eq!(a.selected_components(), Component::ALL.to_vec());
        assert_eq!(a.http_port, 3004);
        assert_eq!(a.rear_gateway_address(), "0.0.0.0:3004".parse().unwrap());
        assert_eq!(a.health_probe_bind_address, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(
            a.metrics_bind_address,
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(a.log_format, LogFormat::Text);
        // The gateway's limits (beyond Go, which has none).
        assert_eq!(
            (
                a.rear_rate_limit,
                a.rear_rate_burst,
                a.rear_max_holds_per_buyer,
                a.rear_max_hold_age_seconds
            ),
            (50, 200, 32, 7200)
        );
        assert_eq!(
            a.rear_max_holds_per_address,
            fluidos_rear_gateway::DEFAULT_MAX_HOLDS_PER_ADDRESS as u64
        );
        // Plain HTTP proves nothing about a buyer: sales there are opt-in.
        assert_eq!(
            a.rear_plain_http_sales,
            fluidos_rear_gateway::PlainHttpSales::Off
        );
        // K8Slices are sold to every buyer the transport admits.
        assert_eq!(
            a.rear_k8slice_buyers,
            fluidos_rear_gateway::K8SliceBuyers::Open
        );
        // So is the Go consumers' peering grant.
        assert_eq!(
            a.rear_go_peering_grant,
            fluidos_rear_gateway::GoPeeringGrant::OFF
        );
        // Peers' pods run restricted unless told otherwise.
        assert_eq!(
            a.peer_pod_security,
            fluidos_peer_access::PodSecurityLevel::Restricted
        );
        assert!(!a.peer_pod_security_allow_privileged);
        // And may not expose them outside this cluster.
        assert!(a.peer_exposure.is_empty());
        let f = &a.flavor;
        assert!(f.enable_auto_discovery);
        assert_eq!(f.node_resource_label, "node-role.fluidos.eu/resources");
        assert_eq!(f.price(), fluidos_api::Price::default());
        for q in [
            &f.cpu_min,
            &f.memory_min,
            &f.pods_min,
            &f.gpu_min,
            &f.cpu_step,
            &f.memory_step,
            &f.pods_step,
            &f.gpu_step,
        ] {
            assert_eq!(q, &Quantity("0".into()));
        }
    }

    #[test]
    fn environment_fills_in_unset_flags() {
        if !in_child() {
            return run_in_child(
                "cli::tests::environment_fills_in_unset_flags",
                &[
                    ("FLUIDOS_NAMESPACE", "fluidos-test"),
                    ("FLUIDOS_COMPONENTS", "rear-manager,rear-gateway"),
                    ("FLUIDOS_HTTP_PORT", "30000"),
                    ("FLUIDOS_LOG_FORMAT", "json"),
                    ("FLUIDOS_HEALTH_PROBE_BIND_ADDRESS", ":9000"),
                    ("FLUIDOS_METRICS_BIND_ADDRESS", "0"),
                    ("FLUIDOS_ENABLE_AUTO_DISCOVERY", "false"),
                    ("FLUIDOS_CPU_MIN", "500m"),
                    ("FLUIDOS_AMOUNT", "10"),
                ],
            );
        }
        let a = parse(&[]).unwrap();
        assert_eq!(a.namespace, "fluidos-test");
        assert_eq!(
            a.selected_components(),
            vec![Component::RearGateway, Component::RearManager]
        );
        assert_eq!(a.http_port, 30000);
        assert_eq!(a.log_format, LogFormat::Json);
        assert_eq!(a.health_probe_bind_address, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(a.metrics_bind_address, None);
        assert!(!a.flavor.enable_auto_discovery);
        assert_eq!(a.flavor.cpu_min, Quantity("500m".into()));
        assert_eq!(a.flavor.amount, "10");

        // A flag beats its environment variable.
        let a = parse(&["--namespace", "other", "--components", "network-manager"]).unwrap();
        assert_eq!(a.namespace, "other");
        assert_eq!(a.selected_components(), vec![Component::NetworkManager]);
    }

    #[test]
    fn component_subsets_are_deduplicated_in_start_order() {
        if !in_child() {
            return run_in_child(
                "cli::tests::component_subsets_are_deduplicated_in_start_order",
                &[],
            );
        }
        let a = parse(&["--components", "network-manager,rear-gateway,rear-gateway"]).unwrap();
        assert_eq!(
            a.selected_components(),
            vec![Component::RearGateway, Component::NetworkManager]
        );
        let a = parse(&[
            "--components",
            "rear-manager",
            "--components",
            "local-resource-manager",
        ])
        .unwrap();
        assert_eq!(
            a.selected_components(),
            vec![Component::LocalResourceManager, Component::RearManager]
        );
        let err = parse(&["--components", "rear-gateway,liqo"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    }

    #[test]
    fn go_style_flags_are_accepted() {
        if !in_child() {
            return run_in_child("cli::tests::go_style_flags_are_accepted", &[]);
        }
        let a = parse(&[
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=[::1]:8080",
            "--enable-auto-discovery=false",
            "--memory-step=1Gi",
        ])
        .unwrap();
        assert_eq!(a.health_probe_bind_address, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(a.metrics_bind_address, Some("[::1]:8080".parse().unwrap()));
        assert!(!a.flavor.enable_auto_discovery);
        assert_eq!(a.flavor.memory_step, Quantity("1Gi".into()));
        // Bare boolean flag means true, as with Go's flag package.
        assert!(
            parse(&["--enable-auto-discovery"])
                .unwrap()
                .flavor
                .enable_auto_discovery
        );
    }

    /// Each Go binary's arguments as the Go Helm chart renders them with its
    /// default values (`deployments/node/templates/*`), plus the flags
    /// controller-runtime adds, under the binary's own name.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "the four Go argument lists are data, read best in one place"
    )]
    fn the_go_charts_arguments_run_the_matching_component() {
        if !in_child() {
            return run_in_child(
                "cli::tests::the_go_charts_arguments_run_the_matching_component",
                &[("MULTICAST_ADDRESS", "239.11.11.1:4000")],
            );
        }
        let common = [
            "--leader-elect",
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=:8080",
            "--zap-devel",
            "--zap-log-level=info",
            "--zap-stacktrace-level=error",
            "--zap-time-encoding=iso8601",
            "--kubeconfig=/etc/kube/config",
        ];
        let go_binaries: [(&str, &[&str], Component); 4] = [
            (
                "/usr/bin/local-resource-manager",
                &[
                    "--node-resource-label=node-role.fluidos.eu/resources",
                    "--resources-types=k8s-fluidos",
                    "--cpu-min=0",
                    "--memory-min=0",
                    "--cpu-step=1000m",
                    "--memory-step=100Mi",
                    "--enable-webhooks=true",
                    "--enable-auto-discovery=true",
                    "--min-count=0",
                    "--max-count=0",
                    "--amount=",
                    "--currency=",
                    "--period=",
                ],
                Component::LocalResourceManager,
            ),
            (
                "/usr/bin/rear-controller",
                &[
                    "--grpc-port=2710",
                    "--http-port=3004",
                    "--enable-webhooks=true",
                ],
                Component::RearGateway,
            ),
            (
                "/usr/bin/rear-manager",
                &["--enable-webhooks=true"],
                Component::RearManager,
            ),
            (
                "/usr/bin/network-manager",
                &["--enable-local-discovery=true", "--cniInterface=eth0"],
                Component::NetworkManager,
            ),
        ];
        for (program, own, component) in go_binaries {
            let argv: Vec<&str> = std::iter::once(program)
                .chain(own.iter().copied())
                .chain(common)
                .collect();
            let a =
                Args::parse_invocation(&argv).unwrap_or_else(|e| panic!("{program} refused: {e}"));
            assert_eq!(a.selected_components(), vec![component], "{program}");
            assert_eq!(
                a.go.kubeconfig.as_deref(),
                Some(std::path::Path::new("/etc/kube/config"))
            );
            assert_eq!(a.go.zap_log_level.as_deref(), Some("info"));
            // --leader-elect is real: it elects a leader among the replicas.
            assert!(a.leader_elect, "{program}");
            let ignored: Vec<&str> = a.go.ignored().into_iter().map(|(f, _)| f).collect();
            assert!(!ignored.contains(&"--leader-elect"), "{ignored:?}");
            assert_eq!(a.health_probe_bind_address, "0.0.0.0:8081".parse().unwrap());
        }
        let lrm = Args::parse_invocation(
            std::iter::once("/usr/bin/local-resource-manager")
                .chain(go_binaries[0].1.iter().copied()),
        )
        .unwrap();
        assert_eq!(lrm.flavor.cpu_step, Quantity("1000m".into()));
        assert_eq!(lrm.flavor.memory_step, Quantity("100Mi".into()));
        let nm = Args::parse_invocation(["network-manager", "--cniInterface=eth0"]).unwrap();
        assert_eq!(nm.cni_interface.as_deref(), Some("eth0"));
        assert_eq!(nm.multicast_address.as_deref(), Some("239.11.11.1:4000"));
        // Our own name, or an explicit --components, keeps the components asked for.
        assert_eq!(
            Args::parse_invocation(["fluidos-node"])
                .unwrap()
                .selected_components(),
            Component::ALL.to_vec()
        );
        assert_eq!(
            Args::parse_invocation(["rear-manager", "--components", "rear-gateway"])
                .unwrap()
                .selected_components(),
            vec![Component::RearGateway]
        );
        // --zap-encoder=json means JSON lines unless --log-format says otherwise.
        assert_eq!(
            Args::parse_invocation(["fluidos-node", "--zap-encoder=json"])
                .unwrap()
                .log_format,
            LogFormat::Json
        );
        assert_eq!(
            Args::parse_invocation(["fluidos-node", "--zap-encoder=json", "--log-format=text"])
                .unwrap()
                .log_format,
            LogFormat::Text
        );
    }

    #[test]
    fn network_manager_flags_take_go_spellings() {
        if !in_child() {
            return run_in_child(
                "cli::tests::network_manager_flags_take_go_spellings",
                &[("MULTICAST_ADDRESS", "239.1.2.3:4100")],
            );
        }
        let a = parse(&[]).unwrap();
        assert!(a.enable_local_discovery);
        assert_eq!(a.multicast_address.as_deref(), Some("239.1.2.3:4100"));
        assert_eq!(a.cni_interface, None);
        assert_eq!(
            (
                a.multicast_interval_ms,
                a.known_cluster_ttl_ms,
                a.known_cluster_housekeeping_ms
            ),
            (5000, 30_000, 5000)
        );
        let a = parse(&["--cniInterface", "eth1", "--enable-local-discovery=false"]).unwrap();
        assert_eq!(a.cni_interface.as_deref(), Some("eth1"));
        assert!(!a.enable_local_discovery);
        assert!(parse(&["--known-cluster-ttl-ms", "0"]).is_err());
    }

    #[test]
    fn bad_values_are_refused_at_parse_time() {
        if !in_child() {
            return run_in_child("cli::tests::bad_values_are_refused_at_parse_time", &[]);
        }
        for bad in [
            &["--cpu-min", "lots"][..],
            &["--namespace", "Fluidos"],
            &["--namespace", "-x"],
            &["--health-probe-bind-address", "localhost"],
            &["--http-port", "70000"],
            &["--log-format", "xml"],
            &["--peer-exposure", "node-port,hostport"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn peer_exposure_is_a_comma_separated_list() {
        if !in_child() {
            return run_in_child("cli::tests::peer_exposure_is_a_comma_separated_list", &[]);
        }
        let a = parse(&["--peer-exposure", "node-port,ingress"]).unwrap();
        assert_eq!(
            a.peer_exposure,
            [
                fluidos_peer_access::PeerExposure::NodePort,
                fluidos_peer_access::PeerExposure::Ingress
            ]
        );
    }
}

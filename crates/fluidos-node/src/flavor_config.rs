//! Flags of the local resource manager: how the node's own flavors are built.
//!
//! Names and defaults are the Go node's (`cmd/local-resource-manager`), so
//! existing Helm values keep working. Every flag also reads a `FLUIDOS_*`
//! environment variable.

use clap::Args;
use clap::builder::BoolishValueParser;
use fluidos_api::quantity::Amount;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Settings the flavor controller uses to publish this node's resources.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct FlavorConfig {
    /// Publish flavors for labelled nodes; false makes the resource manager idle.
    // Go's boolean flags accept both `--enable-auto-discovery` and
    // `--enable-auto-discovery=false`; clap's plain `bool` takes only the
    // first, hence `Set` with an optional value.
    #[arg(
        long,
        env = "FLUIDOS_ENABLE_AUTO_DISCOVERY",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
    )]
    pub enable_auto_discovery: bool,

    /// Label key (value `"true"`) marking the Kubernetes nodes that produce flavors.
    #[arg(long, env = "FLUIDOS_NODE_RESOURCE_LABEL", default_value = fluidos_api::DEFAULT_NODE_RESOURCE_LABEL)]
    pub node_resource_label: String,

    /// Flavor price amount.
    #[arg(long, env = "FLUIDOS_AMOUNT", default_value = "")]
    pub amount: String,

    /// Flavor price currency.
    #[arg(long, env = "FLUIDOS_CURRENCY", default_value = "")]
    pub currency: String,

    /// Flavor price billing period.
    #[arg(long, env = "FLUIDOS_PERIOD", default_value = "")]
    pub period: String,

    /// Smallest CPU partition a buyer may request.
    #[arg(long, env = "FLUIDOS_CPU_MIN", default_value = "0", value_parser = parse_quantity)]
    pub cpu_min: Quantity,

    /// Smallest memory partition a buyer may request.
    #[arg(long, env = "FLUIDOS_MEMORY_MIN", default_value = "0", value_parser = parse_quantity)]
    pub memory_min: Quantity,

    /// Smallest pods partition a buyer may request.
    #[arg(long, env = "FLUIDOS_PODS_MIN", default_value = "0", value_parser = parse_quantity)]
    pub pods_min: Quantity,

    /// Smallest GPU partition a buyer may request.
    #[arg(long, env = "FLUIDOS_GPU_MIN", default_value = "0", value_parser = parse_quantity)]
    pub gpu_min: Quantity,

    /// CPU partition granularity.
    #[arg(long, env = "FLUIDOS_CPU_STEP", default_value = "0", value_parser = parse_quantity)]
    pub cpu_step: Quantity,

    /// Memory partition granularity.
    #[arg(long, env = "FLUIDOS_MEMORY_STEP", default_value = "0", value_parser = parse_quantity)]
    pub memory_step: Quantity,

    /// Pods partition granularity.
    #[arg(long, env = "FLUIDOS_PODS_STEP", default_value = "0", value_parser = parse_quantity)]
    pub pods_step: Quantity,

    /// GPU partition granularity.
    #[arg(long, env = "FLUIDOS_GPU_STEP", default_value = "0", value_parser = parse_quantity)]
    pub gpu_step: Quantity,
}

impl FlavorConfig {
    /// The flavor `price` these flags describe.
    pub fn price(&self) -> fluidos_api::Price {
        fluidos_api::Price {
            amount: self.amount.clone(),
            currency: self.currency.clone(),
            period: self.period.clone(),
        }
    }
}

/// Accepts any Kubernetes quantity (`500m`, `2Gi`, `1e3`).
// Upstream silently turns an unparsable value into 0, which publishes a
// flavor nobody asked for; refusing it at startup is kinder.
fn parse_quantity(s: &str) -> Result<Quantity, String> {
    Amount::parse(s)
        .map(|_| Quantity(s.trim().to_owned()))
        .map_err(|e| e.to_string())
}

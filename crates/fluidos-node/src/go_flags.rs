//! Flags of the Go node's four binaries that `fluidos-node` has no other
//! use for, accepted so the Go Helm chart's manifests run it with only the
//! image changed; and the Go binary names, which select the component when
//! the binary is invoked under one of them (the Go image's `command`).
//!
//! Each flag either keeps its meaning (`--kubeconfig`, `--zap-log-level`,
//! `--zap-encoder`; `--leader-elect` is a flag of [`crate::cli::Args`]) or is accepted and reported at start as ignored, with
//! the reason ([`GoFlags::ignored`]).

use std::path::PathBuf;

use clap::builder::BoolishValueParser;

use crate::flag_values::{Component, LogFormat};

/// Flags the Go binaries take (controller-runtime's and the node's own).
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct GoFlags {
    /// Kubeconfig file (controller-runtime `--kubeconfig`); default: KUBECONFIG, ~/.kube/config, in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Go `--enable-webhooks`: accepted and ignored (validation lives in the CRD schemas and admission policies).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), hide = true)]
    pub enable_webhooks: Option<bool>,

    /// Go `--resources-types` (unused by the Go node too): accepted and ignored.
    #[arg(long, hide = true)]
    pub resources_types: Option<String>,

    /// Go `--min-count` (unused by the Go node too): accepted and ignored.
    #[arg(long, hide = true)]
    pub min_count: Option<String>,

    /// Go `--max-count` (unused by the Go node too): accepted and ignored.
    #[arg(long, hide = true)]
    pub max_count: Option<String>,

    /// Go `rear-controller --grpc-port` (a dead port in the Go node): accepted and ignored.
    #[arg(long, hide = true)]
    pub grpc_port: Option<String>,

    /// zap `--zap-devel`: accepted and ignored (use RUST_LOG and `--log-format`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new(), hide = true)]
    pub zap_devel: Option<bool>,

    /// zap `--zap-encoder`: `json` means `--log-format json`, `console` text.
    #[arg(long, value_parser = ["json", "console"], hide = true)]
    pub zap_encoder: Option<String>,

    /// zap `--zap-log-level` (`debug`, `info`, `error`, `panic` or a verbosity >0): the log level when RUST_LOG is unset.
    #[arg(long, value_parser = parse_zap_level, hide = true)]
    pub zap_log_level: Option<String>,

    /// zap `--zap-stacktrace-level`: accepted and ignored.
    #[arg(long, hide = true)]
    pub zap_stacktrace_level: Option<String>,

    /// zap `--zap-time-encoding`: accepted and ignored (timestamps are RFC 3339).
    #[arg(long, hide = true)]
    pub zap_time_encoding: Option<String>,
}

/// A zap level as a `tracing` filter directive.
fn parse_zap_level(s: &str) -> Result<String, String> {
    match s {
        "debug" => Ok("debug".into()),
        "info" => Ok("info".into()),
        "warn" => Ok("warn".into()),
        "error" | "dpanic" | "panic" | "fatal" => Ok("error".into()),
        n => match n.parse::<u8>() {
            Ok(0) => Err("a zap verbosity must be greater than 0".into()),
            Ok(1) => Ok("debug".into()),
            Ok(_) => Ok("trace".into()),
            Err(_) => Err(format!(
                "{s:?} is not a zap level (debug, info, error, panic, or an integer > 0)"
            )),
        },
    }
}

impl GoFlags {
    /// Each Go flag that was given and has no effect here, with the reason.
    pub fn ignored(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        let mut note = |given: bool, flag, why| {
            if given {
                out.push((flag, why));
            }
        };
        note(
            self.enable_webhooks == Some(true),
            "--enable-webhooks",
            "there are no admission webhooks: validation is in the CRD schemas and admission policies",
        );
        note(
            self.resources_types.is_some(),
            "--resources-types",
            "unused by the Go node too",
        );
        note(
            self.min_count.is_some() || self.max_count.is_some(),
            "--min-count/--max-count",
            "flavor aggregation was removed from the Go node; unused there too",
        );
        note(
            self.grpc_port.is_some(),
            "--grpc-port",
            "the Go node's gRPC port serves nothing; REAR is served on --http-port",
        );
        note(
            self.zap_devel.is_some(),
            "--zap-devel",
            "log verbosity comes from RUST_LOG or --zap-log-level, the format from --log-format",
        );
        note(
            self.zap_stacktrace_level.is_some(),
            "--zap-stacktrace-level",
            "errors are logged with their causes, not stack traces",
        );
        note(
            self.zap_time_encoding.is_some(),
            "--zap-time-encoding",
            "timestamps are RFC 3339",
        );
        out
    }

    /// The log format `--zap-encoder` asks for, if any.
    pub fn log_format(&self) -> Option<LogFormat> {
        match self.zap_encoder.as_deref() {
            Some("json") => Some(LogFormat::Json),
            Some("console") => Some(LogFormat::Text),
            _ => None,
        }
    }
}

/// The component a Go binary name stands for (`/usr/bin/rear-controller`
/// in the Go chart's `command`), or `None` for any other name.
pub fn component_for_program(program: &str) -> Option<Component> {
    let name = std::path::Path::new(program).file_name()?.to_str()?;
    match name {
        "local-resource-manager" => Some(Component::LocalResourceManager),
        "rear-controller" => Some(Component::RearGateway),
        "rear-manager" => Some(Component::RearManager),
        "network-manager" => Some(Component::NetworkManager),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_binary_names_select_their_component() {
        assert_eq!(
            component_for_program("/usr/bin/local-resource-manager"),
            Some(Component::LocalResourceManager)
        );
        assert_eq!(
            component_for_program("rear-controller"),
            Some(Component::RearGateway)
        );
        assert_eq!(
            component_for_program("/usr/bin/rear-manager"),
            Some(Component::RearManager)
        );
        assert_eq!(
            component_for_program("network-manager"),
            Some(Component::NetworkManager)
        );
        for other in ["fluidos-node", "/usr/bin/fluidos-component", "", "/"] {
            assert_eq!(component_for_program(other), None, "{other}");
        }
    }

    #[test]
    fn zap_levels_map_to_filters() {
        assert_eq!(parse_zap_level("debug").as_deref(), Ok("debug"));
        assert_eq!(parse_zap_level("panic").as_deref(), Ok("error"));
        assert_eq!(parse_zap_level("1").as_deref(), Ok("debug"));
        assert_eq!(parse_zap_level("5").as_deref(), Ok("trace"));
        assert!(parse_zap_level("0").is_err());
        assert!(parse_zap_level("loud").is_err());
    }

    #[test]
    fn only_given_flags_without_effect_are_reported() {
        assert!(GoFlags::default().ignored().is_empty());
        let given = GoFlags {
            enable_webhooks: Some(true),
            grpc_port: Some("2710".into()),
            zap_encoder: Some("json".into()),
            ..GoFlags::default()
        };
        let flags: Vec<&str> = given.ignored().into_iter().map(|(f, _)| f).collect();
        assert_eq!(flags, ["--enable-webhooks", "--grpc-port"]);
        assert_eq!(given.log_format(), Some(LogFormat::Json));
    }
}

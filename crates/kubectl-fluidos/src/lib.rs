//! `kubectl fluidos`: a kubectl plugin to operate a FLUIDOS node.
//!
//! Installed as `kubectl-fluidos` anywhere on `PATH`, kubectl runs it for
//! `kubectl fluidos ...`. Subcommands: `flavors` (local, or `--remote` over
//! REAR), `solve` (create a Solver and follow it live), `status` and
//! `release`. Decisions and rendering are pure functions in [`progress`],
//! [`status`], [`flavors`], [`release`] and [`output`]; the API and REAR
//! calls sit at the edges of each subcommand's `run`.

pub mod cli;
pub mod cluster;
pub mod flavors;
pub mod output;
pub mod progress;
pub mod release;
pub mod solve;
pub mod status;

#[cfg(test)]
mod fixtures;

use std::process::ExitCode;

pub use cli::Cli;
use cli::Command;

/// The process exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A Solver failed, or an API or provider call failed.
    Failure = 1,
    /// The command line or a manifest is wrong.
    Usage = 2,
    /// Gave up waiting (`--timeout`); what was started keeps going.
    TimedOut = 3,
    /// Stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
    Interrupted = 130,
}

/// An error that asks for a specific exit code.
#[derive(Debug, thiserror::Error)]
#[error("{error:#}")]
pub struct ExitError {
    /// The exit code.
    pub exit: Exit,
    /// What went wrong (shown whole, with its causes).
    pub error: anyhow::Error,
}

impl ExitError {
    /// `error`, exiting with `exit`.
    pub fn new(exit: Exit, error: impl Into<anyhow::Error>) -> Self {
        ExitError {
            exit,
            error: error.into(),
        }
    }
}

/// The exit code for an error: the one it asks for, else [`Exit::Failure`].
pub fn exit_code_of(err: &anyhow::Error) -> Exit {
    err.downcast_ref::<ExitError>()
        .map_or(Exit::Failure, |e| e.exit)
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = cluster::connect(&cli.connection).await?;
    let ns = cli.connection.namespace.as_str();
    match &cli.command {
        Command::Flavors(args) => flavors::run(client, ns, args).await,
        Command::Solve(args) => solve::run(client, ns, args).await,
        Command::Status(args) => status::run(client, ns, args).await,
        Command::Release(args) => release::run(client, ns, args).await,
    }
}

/// Prints `err` as kubectl does (`error: ...`) and returns its exit code.
pub fn report(err: &anyhow::Error) -> ExitCode {
    eprintln!("error: {err:#}");
    ExitCode::from(exit_code_of(err) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_their_exit_code() {
        let timed_out: anyhow::Error =
            ExitError::new(Exit::TimedOut, anyhow::anyhow!("gave up")).into();
        assert_eq!(exit_code_of(&timed_out), Exit::TimedOut);
        assert_eq!(format!("{timed_out:#}"), "gave up", "said once");
        let wrapped = timed_out.context("solving");
        assert_eq!(exit_code_of(&wrapped), Exit::TimedOut);
        assert_eq!(exit_code_of(&anyhow::anyhow!("boom")), Exit::Failure);
    }
}

//! `kubectl-fluidos`: run by kubectl as `kubectl fluidos ...`.

use std::process::ExitCode;

use clap::Parser as _;
use kubectl_fluidos::{Cli, report, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&anyhow::Error::new(e).context("starting the async runtime")),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

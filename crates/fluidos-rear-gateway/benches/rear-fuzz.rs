//! REAR fuzz at scale: 10^6 generated requests (malformed JSON, deep
//! nesting, huge and odd quantities, bad names, wrong methods and paths, raw
//! malformed HTTP) over real loopback HTTP to a gateway on a real API
//! server. Prints requests/s, the status histogram and RSS, and fails on a
//! 5xx, a panic, an unanswered request or RSS growing past 256 MiB.
//!
//! `cargo bench -p fluidos-rear-gateway --bench rear-fuzz`;
//! `FLUIDOS_FUZZ_REQUESTS`, `FLUIDOS_FUZZ_SEED`, `FLUIDOS_FUZZ_WORKERS` change the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/rear_fuzz/mod.rs"]
mod rear_fuzz;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let total = env_u64("FLUIDOS_FUZZ_REQUESTS", 1_000_000);
    let seed = env_u64("FLUIDOS_FUZZ_SEED", 0x5EED_F1D0);
    let workers = usize::try_from(env_u64("FLUIDOS_FUZZ_WORKERS", 16)).unwrap_or(16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let target = rear_fuzz::start().await;
        // FLUIDOS_FUZZ_TLS=1: over TLS 1.3 with a client certificate.
        let transport = if env_u64("FLUIDOS_FUZZ_TLS", 0) == 1 {
            rear_fuzz::Transport::tls(target.provider)
        } else {
            rear_fuzz::Transport::Plain
        };
        println!(
            "REAR fuzz: {total} requests, {workers} concurrent connections, seed {seed:#x}; gateway and client in one process"
        );
        let report = rear_fuzz::run(&target.gw.base, &transport, total, workers, seed).await;
        report.print();
        target.gw.shutdown().await;
        target.cp.stop().await;
        let failed = report.five_xx() > 0
            || report.panics > 0
            || report.transport_error_count > 0
            || report.rss_growth_kib() > 256 * 1024;
        assert!(!failed, "the fuzz found a problem (see above)");
        println!("no 5xx, no panic, every request answered, RSS bounded");
    });
}

//! A bounded slice of the REAR fuzz (`benches/rear-fuzz.rs` runs 10^6):
//! generated requests over real loopback HTTP, then over TLS with a client
//! certificate, to a gateway on a real API server; no 5xx, no panic, every
//! request answered, memory bounded.
//!
//! `FLUIDOS_FUZZ_REQUESTS` and `FLUIDOS_FUZZ_SEED` change the slice; a
//! failure prints the seed and the requests that failed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod rear_fuzz;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The report's invariants: every request answered, no 5xx, no panic, the
/// statuses the generator aims at all reached, memory bounded.
fn check(report: &rear_fuzz::Report, total: u64, seed: u64) {
    assert_eq!(report.requests, total);
    assert_eq!(
        report.five_xx(),
        0,
        "seed {seed:#x}: {:#?}",
        report.server_errors
    );
    assert_eq!(report.panics, 0, "seed {seed:#x}");
    assert!(
        report.transport_error_count == 0,
        "seed {seed:#x}: requests without an answer: {:#?}",
        report.transport_errors
    );
    // Every kind of answer the generator aims at was reached.
    for status in [200, 400, 404, 405] {
        assert!(
            report.statuses.contains_key(&status),
            "no {status} in {:?}",
            report.statuses
        );
    }
    assert!(
        report.rss_growth_kib() < 128 * 1024,
        "RSS grew by {} MiB after warm-up",
        report.rss_growth_kib() / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_requests_never_get_a_5xx_or_a_panic() {
    let total = env_u64("FLUIDOS_FUZZ_REQUESTS", 4000);
    let seed = env_u64("FLUIDOS_FUZZ_SEED", 0x5EED_F1D0);
    let target = rear_fuzz::start().await;
    let report = rear_fuzz::run(
        &target.gw.base,
        &rear_fuzz::Transport::Plain,
        total,
        8,
        seed,
    )
    .await;
    println!("seed {seed:#x}");
    report.print();
    check(&report, total, seed);
    // The same over TLS with a client certificate (another seed, so other
    // requests): the handshake and the key-bound paths see the garbage too.
    let tls_total = total / 2;
    let tls_seed = seed.rotate_left(17);
    let report = rear_fuzz::run(
        &target.gw.base,
        &rear_fuzz::Transport::tls(target.provider),
        tls_total,
        8,
        tls_seed,
    )
    .await;
    println!("seed {tls_seed:#x}");
    report.print();
    check(&report, tls_total, tls_seed);
    target.gw.shutdown().await;
    target.cp.stop().await;
}

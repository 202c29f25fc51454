//! The property campaign (issue 18): random complete run configurations —
//! every policy, scheduler and preemption mode, KV pressure, horizons,
//! sessions, prefix groups — run through the real config layer and cluster,
//! checked against INV-1..8 event by event ([`audit`]) and at the end on the
//! report, the per-request results and the decision trace ([`checks`]).
//!
//! Each run-file concern has its own generator in [`generators`]; a new
//! feature (tiered KV, P/D, autoscaling, a gateway queue, inference-perf
//! stages) adds one generator there and, if it brings new invariants, one
//! check. CI runs [`DEFAULT_CASES`] configurations; set
//! `BLIS_PROPTEST_CASES=10000` (in release: `cargo test --release -p
//! blis-host --lib campaign`) for a long local campaign.

mod audit;
mod checks;
mod generators;
mod runner;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Configurations per `cargo test` run (CI's budget).
pub const DEFAULT_CASES: u32 = 96;

/// Cases to run: `BLIS_PROPTEST_CASES` if set, else [`DEFAULT_CASES`].
fn cases() -> u32 {
    std::env::var("BLIS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[test]
fn random_complete_runs_keep_every_invariant() {
    let cases = cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let dir = runner::scratch("campaign");
    let result = runner.run(&generators::scenario(), |scenario| {
        runner::run_and_check(&scenario, &dir).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("property campaign failed after at most {cases} configurations: {e}");
    }
    eprintln!("property campaign: {cases} configurations, no invariant violated");
}

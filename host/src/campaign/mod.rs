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
//!
//! The configurations are drawn from a fixed seed ([`DEFAULT_SEED`]), so a
//! `cargo test` costs the same every time: with a fresh seed per run, one
//! draw in many (a gateway ticking every microsecond for seconds of
//! simulated time, say) made the campaign take 14 minutes instead of one.
//! `BLIS_CAMPAIGN_SEED=N` draws from seed N, `BLIS_CAMPAIGN_SEED=random`
//! from a fresh one (printed, so a failure can be replayed).

mod audit;
mod checks;
mod generators;
mod runner;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Configurations per `cargo test` run (CI's budget).
pub const DEFAULT_CASES: u32 = 96;

/// The seed the configurations are drawn from unless `BLIS_CAMPAIGN_SEED`
/// says otherwise (the 96 configurations it draws take about a minute in a
/// debug build).
pub const DEFAULT_SEED: u64 = 0x5eed_0017;

/// The seed to draw from: `BLIS_CAMPAIGN_SEED` (a number, or `random`), else
/// [`DEFAULT_SEED`].
fn seed() -> u64 {
    match std::env::var("BLIS_CAMPAIGN_SEED")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        Some("random") => {
            let s = std::collections::hash_map::RandomState::new();
            std::hash::BuildHasher::hash_one(&s, std::time::SystemTime::now())
        }
        Some(v) => v.parse().unwrap_or_else(|_| {
            panic!("BLIS_CAMPAIGN_SEED must be a number or `random`, not {v:?}")
        }),
        None => DEFAULT_SEED,
    }
}

/// Cases to run: `BLIS_PROPTEST_CASES` if set, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("BLIS_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Run `cases` configurations of `scenario` from the campaign's seed in a
/// scratch folder named `name`, checking each; panics naming the seed and
/// `what` at the first violation. Returns how many configurations loaded
/// a plugin.
fn campaign(
    what: &str,
    name: &str,
    cases: u32,
    scenario: impl Strategy<Value = generators::Scenario>,
) -> u32 {
    let seed = seed();
    eprintln!("{what}: seed {seed} (BLIS_CAMPAIGN_SEED)");
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(seed),
        ..Config::default()
    });
    let dir = runner::scratch(name);
    let with_plugins = std::cell::Cell::new(0u32);
    let result = runner.run(&scenario, |scenario| {
        with_plugins.set(with_plugins.get() + u32::from(scenario.table.contains_key("plugins")));
        runner::run_and_check(&scenario, &dir).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!(
            "{what} failed after at most {cases} configurations (BLIS_CAMPAIGN_SEED={seed}): {e}"
        );
    }
    eprintln!("{what}: {cases} configurations, no invariant violated");
    with_plugins.get()
}

#[test]
fn random_complete_runs_keep_every_invariant() {
    campaign(
        "property campaign",
        "campaign",
        cases(DEFAULT_CASES),
        generators::scenario(None),
    );
}

/// Configurations of the campaign with WebAssembly policies.
pub const WASM_CASES: u32 = 24;

/// The campaign with the admission and routing of every run without pools
/// (nor an llm-d file) taken from the Rust example component (in the
/// directory `BLIS_TEST_WASM_DIR` names, as `examples/wasm/build.sh
/// --tests` builds it; CI sets it): [`WASM_CASES`] configurations
/// (`BLIS_PROPTEST_CASES` overrides), every invariant checked as in the
/// main campaign. Without the directory it says it skipped.
#[test]
fn random_runs_with_webassembly_policies_keep_every_invariant() {
    let Some(dir) = std::env::var("BLIS_TEST_WASM_DIR").ok() else {
        eprintln!("skipped: BLIS_TEST_WASM_DIR is not set (examples/wasm/build.sh --tests DIR)");
        return;
    };
    let with_wasm = campaign(
        "property campaign with WebAssembly policies",
        "campaign-wasm",
        cases(WASM_CASES),
        generators::scenario(Some(dir)),
    );
    assert!(with_wasm > 0, "no configuration loaded a component");
    eprintln!("({with_wasm} of them with a component)");
}

/// The default draw reaches every feature the campaign is meant to cover:
/// among its first [`DEFAULT_CASES`] configurations there are TraceV2
/// workloads replayed fixed and closed-loop, llm-d EndpointPickerConfig
/// routing, LoRA adapters with and without P/D pools, serve pools, the
/// control plane and the gateway.
#[test]
fn the_default_draw_covers_every_feature() {
    use proptest::strategy::ValueTree;
    let mut runner = TestRunner::new(Config {
        rng_seed: proptest::test_runner::RngSeed::Fixed(DEFAULT_SEED),
        ..Config::default()
    });
    let strategy = generators::scenario(None);
    let mut seen = std::collections::BTreeMap::<&str, u32>::new();
    for _ in 0..DEFAULT_CASES {
        let s = strategy
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        let t = &s.table;
        let has = |k: &str| t.contains_key(k);
        let w = t.get("workload").and_then(|w| w.as_table());
        let tv2 = w.and_then(|w| w.get("trace_v2")).and_then(|v| v.as_table());
        let mut count = |k: &'static str, yes: bool| *seen.entry(k).or_default() += u32::from(yes);
        count(
            "trace_v2 fixed",
            tv2.is_some_and(|v| v["session_mode"].as_str() == Some("fixed")),
        );
        count(
            "trace_v2 closed-loop",
            tv2.is_some_and(|v| v["session_mode"].as_str() == Some("closed-loop")),
        );
        count(
            "epp_config",
            t.get("routing").and_then(|r| r.get("epp_config")).is_some(),
        );
        count("lora", has("lora") && !has("pd"));
        count("lora with pd", has("lora") && has("pd"));
        count("pd", has("pd"));
        count("serve pools", has("pools") && !has("pd"));
        count("control plane", has("autoscaler") || has("lifecycle"));
        count("flow_control", has("flow_control"));
    }
    eprintln!("the default draw: {seen:?}");
    for (k, n) in &seen {
        assert!(*n > 0, "the default campaign never draws {k}: {seen:?}");
    }
}

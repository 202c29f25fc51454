//! Exact, hand-computed verdicts of `judge` and `Slo`, and the order of
//! shapes and candidates.

use serde_json::json;

use super::file::{Judge, Slo};
use super::judge;
use crate::search::Evaluation;

fn slo(metric: &str, upper: bool, bound: f64) -> Slo {
    Slo {
        metric: metric.into(),
        upper,
        bound,
        text: format!("{metric} {} {bound}", if upper { "<=" } else { ">=" }),
    }
}

fn eval(ttft: f64, tps: f64) -> Evaluation {
    Evaluation::new(
        "x",
        None,
        vec![
            ("ttft_p99_ms".into(), json!(ttft)),
            ("tokens_per_sec".into(), json!(tps)),
            ("num_requests".into(), json!(100)),
            ("rejected_requests".into(), json!(5)),
        ],
    )
}

#[test]
fn every_seed_takes_the_worst_and_mean_the_mean() {
    let slos = [
        slo("ttft_p99_ms", true, 100.0),
        slo("tokens_per_sec", false, 50.0),
    ];
    let evals = [eval(80.0, 60.0), eval(120.0, 40.0), eval(90.0, 70.0)];
    let v = judge(&slos, Judge::EverySeed, &evals, "p").unwrap();
    assert_eq!(v.values, vec![Some(120.0), Some(40.0)]);
    assert!(!v.feasible);
    // ttft misses by 120/100 = 1.2, tps by 50/40 = 1.25: tps binds.
    assert_eq!(v.binding, Some(1));
    let v = judge(&slos, Judge::Mean, &evals, "p").unwrap();
    assert_eq!(
        v.values,
        vec![Some((80.0 + 120.0 + 90.0) / 3.0), Some(170.0 / 3.0)]
    );
    assert!(v.feasible, "mean ttft 96.7 ≤ 100, mean tps 56.7 ≥ 50");
}

#[test]
fn a_fraction_takes_the_order_statistic() {
    let slos = [slo("ttft_p99_ms", true, 100.0)];
    let evals = [
        eval(80.0, 0.0),
        eval(120.0, 0.0),
        eval(90.0, 0.0),
        eval(95.0, 0.0),
    ];
    // 0.75 of 4 = 3 must meet: the 3rd smallest is 95.
    let v = judge(&slos, Judge::Fraction(0.75), &evals, "p").unwrap();
    assert_eq!(v.values, vec![Some(95.0)]);
    assert!(v.feasible);
    // 0.8 of 4 → 4 must meet: the largest, 120.
    let v = judge(&slos, Judge::Fraction(0.8), &evals, "p").unwrap();
    assert_eq!(v.values, vec![Some(120.0)]);
    assert!(!v.feasible);
    // A lower bound sorts the other way: 0.5 of 4 → the 2nd largest.
    let low = [slo("tokens_per_sec", false, 50.0)];
    let evals = [
        eval(0.0, 10.0),
        eval(0.0, 60.0),
        eval(0.0, 55.0),
        eval(0.0, 40.0),
    ];
    let v = judge(&low, Judge::Fraction(0.5), &evals, "p").unwrap();
    assert_eq!(v.values, vec![Some(55.0)]);
    assert!(v.feasible);
}

#[test]
fn derived_metrics_null_values_failures_and_missing_columns() {
    let frac = [slo("rejected_fraction", true, 0.04)];
    let v = judge(&frac, Judge::EverySeed, &[eval(1.0, 1.0)], "p").unwrap();
    assert_eq!(v.values, vec![Some(0.05)]);
    assert!(!v.feasible);
    // A null metric (no request finished) misses, binding.
    let null = Evaluation::new("n", None, vec![("ttft_p99_ms".into(), json!(null))]);
    let v = judge(
        &[slo("ttft_p99_ms", true, 1e9)],
        Judge::EverySeed,
        &[null],
        "p",
    )
    .unwrap();
    assert_eq!(v.values, vec![None]);
    assert!(!v.feasible && v.binding == Some(0));
    // A failed simulation makes the candidate infeasible, with its error.
    let failed = Evaluation::new("f", Some("plugin refused".into()), vec![]);
    let v = judge(
        &[slo("ttft_p99_ms", true, 1e9)],
        Judge::EverySeed,
        &[eval(1.0, 1.0), failed],
        "p",
    )
    .unwrap();
    assert!(!v.feasible);
    assert_eq!(v.failure.as_deref(), Some("plugin refused"));
    // A metric the report does not have at all is the plan's mistake.
    let e = judge(
        &[slo("slo.attainment", false, 0.9)],
        Judge::EverySeed,
        &[eval(1.0, 1.0)],
        "p.toml",
    )
    .unwrap_err();
    assert!(
        e.is_input() && e.message.contains("p.toml") && e.message.contains("slo.attainment"),
        "{}",
        e.message
    );
}

#[test]
fn excess_and_met_are_exact() {
    let up = slo("m", true, 50.0);
    assert!(up.met(50.0) && !up.met(50.0001));
    assert_eq!(up.excess(75.0), 1.5);
    let low = slo("m", false, 0.9);
    assert!(low.met(0.9) && !low.met(0.8));
    assert_eq!(low.excess(0.45), 2.0);
    assert_eq!(super::short(1204.33), "1204");
    assert_eq!(super::short(46.535), "46.53");
    assert_eq!(super::short(4.0), "4.000");
}

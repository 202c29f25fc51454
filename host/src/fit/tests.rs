//! Synthetic recovery: measurements made by blis itself with known
//! coefficients (β ×1.3, α ×0.7 of the defaults) plus noise; the fit from
//! the defaults must predict held-out experiments within 2 % of the truth (TTFT 3 %)
//! and bracket every true coefficient with its reported interval.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::eval::Experiment;
use super::params::Coefficients;
use super::{run_fit, FitArgs};
use crate::instance::latency::{ITER29_ALPHA, ITER29_BETA};

/// Small deployments of three models (two dense families, two TP degrees)
/// and loads, so the betas' basis functions differ between experiments.
const EXPERIMENTS: [(&str, u32, f64, u32, u32); 4] = [
    ("qwen2.5-7b-instruct", 1, 6.0, 300, 60),
    ("qwen2.5-7b-instruct", 1, 14.0, 900, 30),
    ("llama-3.1-8b-instruct", 1, 8.0, 150, 120),
    ("qwen3-14b", 2, 10.0, 500, 50),
];

pub(super) fn write_runs(dir: &Path, requests: u32) -> Vec<String> {
    let mut names = Vec::new();
    for (i, (model, tp, rate, question, output)) in EXPERIMENTS.iter().enumerate() {
        let name = format!("e{i}.toml");
        std::fs::write(
            dir.join(&name),
            format!(
                "seed = {}\n[model]\nname = \"{model}\"\nhardware = \"H100\"\ntp = {tp}\n\
                 [instance]\ncount = 1\n[workload]\nnum_requests = {requests}\n\
                 [workload.inference_perf]\nclient = \"reference\"\nstages = [{{ rate = {rate}, duration = 60 }}]\n\
                 [workload.inference_perf.shared_prefix]\nnum_unique_system_prompts = 3\n\
                 num_users_per_system_prompt = 2\nsystem_prompt_len = 100\n\
                 question_len = {question}\noutput_len = {output}\n",
                i + 1
            ),
        )
        .unwrap();
        names.push(name);
    }
    names
}

fn truth() -> Coefficients {
    Coefficients {
        alpha: ITER29_ALPHA.map(|a| a * 0.7),
        beta: Some(ITER29_BETA.iter().map(|b| b * 1.3).collect()),
    }
}

const METRICS: [&str; 4] = ["ttft_mean_ms", "e2e_mean_ms", "itl_mean_ms", "e2e_p90_ms"];

/// `dir/m.csv`: each run file's `metrics` simulated at `truth`, each
/// value passed through `measure` (the measurement's noise); returns the
/// noise-free values in the table's order.
fn truth_table(
    dir: &Path,
    names: &[String],
    truth: &Coefficients,
    metrics: &[&str],
    mut measure: impl FnMut(f64) -> f64,
) -> Vec<f64> {
    let mut csv = String::from("run_file,metric,value\n");
    let mut exact = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let e = Experiment::load(n, &dir.join(n), i as u64 + 2, "m.csv").unwrap();
        let report = e.simulate(truth).unwrap();
        for m in metrics {
            let v = report["cluster"][m].as_f64().unwrap();
            exact.push(v);
            csv.push_str(&format!("{n},{m},{}\n", measure(v)));
        }
    }
    std::fs::write(dir.join("m.csv"), csv).unwrap();
    exact
}

/// A fit of `dir/m.csv` into `dir/p.toml` with the defaults of the command
/// (every nonzero coefficient, no folds, one seed, quiet).
fn table_args(dir: &Path) -> FitArgs {
    FitArgs {
        out: dir.join("p.toml"),
        measurements: Some(dir.join("m.csv")),
        traces: Vec::new(),
        fit: None,
        bounds: vec![],
        weights: vec![],
        holdout: 0,
        holdout_by: vec![],
        seed: 1,
        sim_seeds: 1,
        jobs: None,
        iterations: 0,
        prior_sd: None,
        html: None,
        quiet: true,
    }
}

#[test]
fn synthetic_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let names = write_runs(dir.path(), 60);
    let truth = truth();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // Noise-free truth per (run file, metric), to judge held-out
    // predictions; measured with ±0.5 % uniform noise.
    let exact = truth_table(dir.path(), &names, &truth, &METRICS, |v| {
        v * (1.0 + rng.random_range(-0.005..0.005))
    });
    let args = FitArgs {
        holdout: 4,
        seed: 3,
        iterations: 15,
        html: Some(dir.path().join("fit.html")),
        quiet: std::env::var_os("BLIS_FIT_VERBOSE").is_none(),
        ..table_args(dir.path())
    };
    let out = run_fit(&args).unwrap();
    let p = &out.profile;
    assert!(p.error.train_mape < 1.0, "{}", p.error.train_mape);
    assert!(p.error.start_mape > 10.0, "{}", p.error.start_mape);
    // Held-out predictions against the noise-free truth.
    let mut worst: f64 = 0.0;
    let mut off = Vec::new();
    for (i, r) in out.rows.iter().enumerate() {
        let h = out.results[i]
            .heldout
            .expect("every experiment is held out once");
        let err = (h - exact[i]).abs() / exact[i];
        worst = worst.max(err);
        eprintln!(
            "  {} {}: held out {h:.4}, truth {:.4} ({:+.2} %)",
            r.run_file,
            r.metric.name(),
            exact[i],
            100.0 * (h - exact[i]) / exact[i]
        );
        // A mean TTFT of a loaded experiment moves by more than its
        // coefficients: e1's (14 req/s, 60 requests) is 26.01 ms at the
        // truth and 26.32 ms with the step time 0.1 % shorter (which
        // requests meet in a batch changes). 3 % for TTFT, 2 % otherwise.
        let bound = if r.metric.field == "ttft_mean_ms" {
            0.03
        } else {
            0.02
        };
        if err >= bound {
            off.push(format!("{} {}", r.run_file, r.metric.name()));
        }
    }
    // The figures (`cargo test -p blis-host synthetic_recovery -- --nocapture`).
    eprintln!(
        "synthetic recovery: start {:.3} %, train {:.3} %, held out {:.3} % (weighted MAPE); worst held-out prediction {:.3} % off the noise-free truth",
        p.error.start_mape,
        p.error.train_mape,
        p.error.heldout_mape.unwrap_or(f64::NAN),
        100.0 * worst
    );
    for f in &p.fitted {
        eprintln!(
            "  {} = {:.6} (start {:.6}), 95 % [{:.6}, {:.6}], identifiable {}",
            f.name, f.value, f.start, f.interval_95[0], f.interval_95[1], f.identifiable
        );
    }
    assert!(
        off.is_empty(),
        "held out 2 % (TTFT 3 %) or more off the truth: {off:?}"
    );
    // Every true coefficient inside its interval; the MoE-only terms
    // (beta[7] interleaved MoE, beta[10] MoE dispatch) are not identifiable
    // from dense models.
    let t = truth.beta.clone().unwrap();
    for f in &p.fitted {
        let (fam, idx) = f.name.split_once('[').unwrap();
        let idx: usize = idx.trim_end_matches(']').parse().unwrap();
        let tv = if fam == "alpha" {
            truth.alpha[idx]
        } else {
            t[idx]
        };
        assert!(
            f.interval_95[0] <= tv && tv <= f.interval_95[1],
            "{}: truth {tv} outside [{}, {}] (fitted {})",
            f.name,
            f.interval_95[0],
            f.interval_95[1],
            f.value
        );
        if f.name == "beta[7]" || f.name == "beta[10]" {
            assert!(!f.identifiable, "{}", f.name);
            assert_eq!(f.note, "the measured metrics do not change with it");
        }
    }
    // The profile written is the one returned, and the page marks held-out points.
    let text = std::fs::read_to_string(&args.out).unwrap();
    let read: super::profile::Profile = toml::from_str(&text).unwrap();
    assert_eq!(&read, p);
    let html = std::fs::read_to_string(dir.path().join("fit.html")).unwrap();
    assert!(
        html.contains("data-series=\"start|fitted|held out\""),
        "held-out series"
    );
}

/// `--sim-seeds K`: every prediction is the mean of the K simulations at
/// the run file's seed, seed + 1, …, and the profile records K.
#[test]
fn predictions_are_the_mean_over_the_workload_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let names = write_runs(dir.path(), 24);
    let names = &names[..2];
    let truth = truth();
    let start = Coefficients {
        alpha: ITER29_ALPHA,
        beta: Some(ITER29_BETA.to_vec()),
    };
    let mut csv = String::from("run_file,metric,value\n");
    let mut expected = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let e = Experiment::load(n, &dir.path().join(n), i as u64 + 2, "m.csv").unwrap();
        let at_truth = e.simulate(&truth).unwrap();
        let seeds: Vec<serde_json::Value> = (0..3)
            .map(|j| e.simulate_with(&start, j, None).unwrap().report)
            .collect();
        assert_eq!(e.seed(2), i as u64 + 3, "replica 2 of seed {}", i + 1);
        for m in ["ttft_mean_ms", "e2e_mean_ms"] {
            let v = at_truth["cluster"][m].as_f64().unwrap();
            csv.push_str(&format!("{n},{m},{v}\n"));
            let each: Vec<f64> = seeds
                .iter()
                .map(|r| r["cluster"][m].as_f64().unwrap())
                .collect();
            expected.push(each.iter().sum::<f64>() / 3.0);
            // The seeds give different runs (else the mean proves nothing).
            assert!(
                each[0] != each[1] || each[1] != each[2],
                "{n} {m}: {each:?}"
            );
        }
    }
    std::fs::write(dir.path().join("m.csv"), csv).unwrap();
    let args = FitArgs {
        fit: Some("beta[6]".into()),
        sim_seeds: 3,
        jobs: Some(2),
        ..table_args(dir.path())
    };
    let out = run_fit(&args).unwrap();
    for (r, want) in out.results.iter().zip(&expected) {
        assert!(
            (r.start - want).abs() <= 1e-9 * want.abs(),
            "start prediction {} is not the mean {want} of the three seeds",
            r.start
        );
    }
    assert_eq!(out.profile.fit.sim_seeds, 3);
    let text = std::fs::read_to_string(&args.out).unwrap();
    assert!(text.contains("sim_seeds = 3"), "{text}");
    // One seed (the default) writes no `sim_seeds`, as profiles did before.
    let one = FitArgs {
        sim_seeds: 1,
        out: dir.path().join("p1.toml"),
        ..args
    };
    run_fit(&one).unwrap();
    let text = std::fs::read_to_string(&one.out).unwrap();
    assert!(!text.contains("sim_seeds"), "{text}");
}

/// `holdout_by`: leave-one-model-out and leave-one-experiment-out on
/// measurements made with one coefficient set (the synthetic truth): every
/// model's rows are predicted by a fit that saw none of that model, within
/// a few % of what was measured, and recorded per model in the profile; a
/// way of leaving out with a single unit (one GPU type) is refused.
#[test]
fn held_out_by_model_and_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let names = write_runs(dir.path(), 40);
    truth_table(
        dir.path(),
        &names,
        &truth(),
        &["ttft_mean_ms", "e2e_mean_ms", "itl_mean_ms"],
        |v| v,
    );
    let args = FitArgs {
        fit: Some("alpha[0],beta[2]".into()),
        holdout_by: vec!["model".into(), "experiment".into()],
        ..table_args(dir.path())
    };
    let out = run_fit(&args).unwrap();
    let by = &out.profile.error.heldout_by;
    let model = &by["model"];
    assert_eq!(model.folds, 3);
    let units: Vec<&str> = model.per_unit.keys().map(String::as_str).collect();
    assert_eq!(
        units,
        ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "qwen3-14b"]
    );
    assert_eq!(by["experiment"].folds, 4);
    for (name, h) in by {
        assert!(h.mape < 3.0, "{name}: {h:?}");
        assert!(h.per_metric["e2e_mean_ms"] < 3.0, "{name}: {h:?}");
    }
    let text = std::fs::read_to_string(&args.out).unwrap();
    assert!(text.contains("[error.heldout_by.model.per_unit]"), "{text}");
    assert!(
        text.contains("holdout_by = [\"model\", \"experiment\"]"),
        "{text}"
    );
    let gpu = FitArgs {
        holdout_by: vec!["gpu".into()],
        out: dir.path().join("p2.toml"),
        ..args
    };
    let Err(super::FitError::Input(e)) = run_fit(&gpu) else {
        panic!("one GPU type cannot be left out");
    };
    assert!(
        e.contains("every measured experiment has the same gpu (h100)"),
        "{e}"
    );
    assert!(!dir.path().join("p2.toml").exists());
}

/// `--prior-sd`: measurements made with two betas moved apart (a shape the
/// start does not have: weight loading ×0.8, the per-layer cost ×1.5; the
/// models' layers weigh differently against their weights: about 13 % of
/// the decode step for the 7-8B models on one GPU, 30 % for Qwen3-14B on
/// two). Stage 1 moves both by one factor. Without a prior the
/// every-coefficient stage does not pay for its freedom on 4 experiments
/// and the shape stays; with a prior a thousandth wide it stays too; with a
/// wide one (sd 1) the data move the two apart, towards the truth (the
/// per-layer cost up against the weights), at a lower error. The profile's
/// method names the prior; a prior that is not a positive number is
/// refused before any simulation.
#[test]
fn a_prior_keeps_the_shape_unless_the_data_move_it() {
    let dir = tempfile::tempdir().unwrap();
    let names = write_runs(dir.path(), 40);
    let mut beta = ITER29_BETA.to_vec();
    beta[2] *= 0.8;
    beta[4] *= 1.5;
    let truth = Coefficients {
        alpha: ITER29_ALPHA,
        beta: Some(beta),
    };
    truth_table(
        dir.path(),
        &names,
        &truth,
        &["ttft_mean_ms", "e2e_mean_ms", "itl_mean_ms"],
        |v| v,
    );
    // (β₄ / β₂ against the start's, train MAPE, method) of a fit.
    let fitted = |sd: Option<f64>, out: &str| {
        let args = FitArgs {
            fit: Some("beta[2],beta[4]".into()),
            prior_sd: sd,
            out: dir.path().join(out),
            quiet: std::env::var_os("BLIS_FIT_VERBOSE").is_none(),
            ..table_args(dir.path())
        };
        let p = run_fit(&args).unwrap().profile;
        let value = |name: &str| p.fitted.iter().find(|f| f.name == name).unwrap().value;
        let shape = (value("beta[4]") / value("beta[2]")) / (ITER29_BETA[4] / ITER29_BETA[2]);
        (shape, p.error.train_mape, p.fit.method)
    };
    let (free, free_mape, method) = fitted(None, "free.toml");
    assert!((free - 1.0).abs() < 1e-9, "no prior: shape ×{free}");
    assert!(!method.contains("prior"), "{method}");
    let (narrow, narrow_mape, method) = fitted(Some(1e-3), "narrow.toml");
    assert!((narrow - 1.0).abs() < 1e-3, "narrow prior: shape ×{narrow}");
    assert!(
        narrow_mape <= free_mape + 1e-9,
        "{narrow_mape} against {free_mape}"
    );
    assert!(
        method.contains("with a Gaussian prior of standard deviation 0.001 (log units)"),
        "{method}"
    );
    let (wide, wide_mape, _) = fitted(Some(1.0), "wide.toml");
    assert!(wide > 1.01, "wide prior: shape ×{wide}");
    assert!(
        wide_mape < 0.95 * free_mape,
        "{wide_mape} against {free_mape}"
    );
    for bad in [0.0, -0.1, f64::NAN, f64::INFINITY] {
        let args = FitArgs {
            prior_sd: Some(bad),
            out: dir.path().join("bad.toml"),
            ..table_args(dir.path())
        };
        let Err(super::FitError::Input(e)) = run_fit(&args) else {
            panic!("--prior-sd {bad} accepted");
        };
        assert!(e.starts_with(&format!("--prior-sd {bad}: ")), "{e}");
        assert!(!dir.path().join("bad.toml").exists());
    }
}

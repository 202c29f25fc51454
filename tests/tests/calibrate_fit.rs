//! `blis calibrate fit` through the real binary: bad input (exit 2, the
//! table row named), a profile written and applied by `[model] calibration`
//! (the report names it and its hash), and profiles that do not apply.

use serde_json::Value;

use crate::util::{fit_args, run_bad, slower_measurements, TestDir};

/// A small run of `model` (60 requests).
fn run_file(model: &str, rate: f64) -> String {
    format!(
        "seed = 5\n[model]\nname = \"{model}\"\nhardware = \"H100\"\n[instance]\ncount = 1\n\
         [workload]\nnum_requests = 40\n[workload.inference_perf]\nclient = \"reference\"\n\
         stages = [{{ rate = {rate}, duration = 20 }}, {{ rate = {rate}, duration = 20 }}]\n\
         [workload.inference_perf.shared_prefix]\nnum_unique_system_prompts = 2\n\
         num_users_per_system_prompt = 2\nsystem_prompt_len = 50\nquestion_len = 200\noutput_len = 40\n"
    )
}

fn report(dir: &TestDir, args: &[&str]) -> Value {
    let o = dir.blis().args(args).output().unwrap();
    assert!(
        o.status.success(),
        "blis {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn bad_tables_name_the_row() {
    let dir = TestDir::new("calibrate_fit_bad_tables");
    dir.write("a.toml", &run_file("qwen2.5-7b-instruct", 4.0));
    let fit = |table: &str, body: &str| -> String {
        dir.write(table, &format!("run_file,metric,value\n{body}"));
        run_bad(
            &dir,
            &[
                "calibrate",
                "fit",
                "--measurements",
                table,
                "--out",
                "p.toml",
                "--quiet",
            ],
        )
    };
    let e = fit("m1.csv", "a.toml,ttft_mean_ms,20\na.toml,ttft_average,3\n");
    assert!(
        e.contains("m1.csv, line 3: unknown metric 'ttft_average'"),
        "{e}"
    );
    assert!(e.contains("ttft_p99_ms") && e.contains("stages[i]"), "{e}");
    for (v, what) in [("0", "0"), ("-4", "-4"), ("NaN", "NaN")] {
        let e = fit(
            "m2.csv",
            &format!("a.toml,e2e_mean_ms,800\na.toml,ttft_mean_ms,{v}\n"),
        );
        assert!(
            e.contains(&format!(
                "m2.csv, line 3: value {what} of ttft_mean_ms must be a finite number > 0"
            )),
            "{e}"
        );
    }
    dir.write("broken.toml", "[model]\nname = \"no-such-model\"\n");
    let e = fit(
        "m3.csv",
        "a.toml,ttft_mean_ms,20\nbroken.toml,ttft_mean_ms,20\n",
    );
    assert!(e.contains("m3.csv, line 3 (run file broken.toml)"), "{e}");
    assert!(e.contains("no-such-model"), "{e}");
    let e = fit("m4.csv", "missing.toml,ttft_mean_ms,20\n");
    assert!(e.contains("m4.csv, line 2 (run file missing.toml)"), "{e}");
    // A stage the run does not have: found at the start, before any fit.
    let e = fit("m5.csv", "a.toml,stages[7].ttft_mean_ms,20\n");
    assert!(
        e.contains("m5.csv, line 2") && e.contains("stages[7].ttft_mean_ms"),
        "{e}"
    );
    assert!(!dir.path().join("p.toml").exists());
}

#[test]
fn a_fit_that_cannot_improve_says_so() {
    let dir = TestDir::new("calibrate_fit_no_improvement");
    dir.write("a.toml", &run_file("qwen2.5-7b-instruct", 4.0));
    // alpha[1] is trained-physics' post-decode overhead: it changes E2E,
    // never TTFT.
    dir.write("m.csv", "run_file,metric,value\na.toml,ttft_mean_ms,1000\n");
    // `calibrate fit --measurements m.csv --out OUT FLAGS…`, which must fail.
    let fit = |out: &str, flags: &[&str]| {
        let mut args = vec!["calibrate", "fit", "--measurements", "m.csv", "--out", out];
        args.extend_from_slice(flags);
        run_bad(&dir, &args)
    };
    let e = fit(
        "p.toml",
        &["--fit", "alpha[1]", "--iterations", "3", "--quiet"],
    );
    assert!(e.contains("cannot improve on its start"), "{e}");
    assert!(
        e.contains(" % at the start and ") && e.contains(" % after "),
        "both errors: {e}"
    );
    assert!(!dir.path().join("p.toml").exists());
    // Flags are checked too.
    let e = fit("p.toml", &["--fit", "beta[1]"]);
    assert!(e.contains("it is 0 at the start"), "{e}");
    let e = fit("m.csv", &[]);
    assert!(e.contains("overwrite the input"), "{e}");
    let e = fit("p.toml", &["--sim-seeds", "0"]);
    assert!(e.contains("--sim-seeds must be ≥ 1"), "{e}");
}

#[test]
fn a_profile_is_written_applied_and_checked() {
    let dir = TestDir::new("calibrate_fit_profile");
    dir.write("a.toml", &run_file("qwen2.5-7b-instruct", 4.0));
    dir.write("b.toml", &run_file("qwen2.5-7b-instruct", 8.0));
    // Measurements 20 % slower than the defaults give.
    slower_measurements(&dir, &["a.toml", "b.toml"], 1.2);
    let summary = report(
        &dir,
        &fit_args(&["--iterations", "4", "--jobs", "2", "--html", "fit.html"]),
    );
    assert!(summary["train_mape"].as_f64().unwrap() < summary["start_mape"].as_f64().unwrap());
    let profile = std::fs::read_to_string(dir.path().join("p.toml")).unwrap();
    let p: toml::Table = profile.parse().unwrap();
    assert_eq!(p["latency_model"].as_str(), Some("trained-physics"));
    assert!(
        p["inputs"].as_array().unwrap().len() >= 3,
        "table and two run files"
    );
    assert!(std::fs::read_to_string(dir.path().join("fit.html"))
        .unwrap()
        .contains("data-plot=\"error-ttft_mean_ms\""));

    // Applied: the report names the profile and its SHA-256, and the run
    // is slower than without it.
    let base = report(&dir, &["run", "a.toml", "--quiet"]);
    let cal = report(
        &dir,
        &[
            "run",
            "a.toml",
            "--quiet",
            "--set",
            "model.calibration=\"p.toml\"",
        ],
    );
    assert_eq!(cal["calibration"]["profile"], "p.toml");
    let sha = cal["calibration"]["sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert!(base.get("calibration").is_none());
    assert!(
        cal["cluster"]["e2e_mean_ms"].as_f64().unwrap()
            > base["cluster"]["e2e_mean_ms"].as_f64().unwrap() * 1.1
    );

    // Another model, another GPU, another latency model: errors naming it.
    dir.write("other.toml", &run_file("qwen3-14b", 4.0));
    let e = run_bad(
        &dir,
        &["run", "other.toml", "--set", "model.calibration=\"p.toml\""],
    );
    assert!(e.contains("not model qwen3-14b"), "{e}");
    let e = run_bad(
        &dir,
        &[
            "run",
            "a.toml",
            "--set",
            "model.calibration=\"p.toml\"",
            "--set",
            "model.hardware=\"A100-80\"",
        ],
    );
    assert!(e.contains("on GPU A100-80"), "{e}");
    let e = run_bad(
        &dir,
        &[
            "run",
            "a.toml",
            "--set",
            "model.calibration=\"p.toml\"",
            "--set",
            "model.latency_model=\"roofline\"",
        ],
    );
    assert!(
        e.contains("fitted for the trained-physics latency model"),
        "{e}"
    );
}

/// The traces route's server: one instance, requests of varied sizes.
fn trace_server() -> String {
    "seed = 9\n[model]\nname = \"qwen2.5-7b-instruct\"\nhardware = \"H100\"\n[instance]\ncount = 1\n\
     [workload]\nnum_requests = 120\n[workload.inference_perf]\nclient = \"reference\"\n\
     stages = [{ rate = 6.0, duration = 20 }]\n\
     [workload.inference_perf.shared_prefix]\nnum_unique_system_prompts = 4\n\
     num_users_per_system_prompt = 3\nsystem_prompt_len = 60\nquestion_len = 400\noutput_len = 80\n"
        .into()
}

/// The "observed" trace: `srv.toml` run by blis with every β ×1.3 (the
/// truth), written with `--trace-output real`. Returns the true betas.
fn observed_trace(dir: &TestDir) -> Vec<f64> {
    use blis_host::instance::latency::ITER29_BETA;
    dir.write("srv.toml", &trace_server());
    let truth: Vec<f64> = ITER29_BETA.iter().map(|b| b * 1.3).collect();
    let set = format!(
        "model.beta=[{}]",
        truth
            .iter()
            .map(|b| format!("{b:e}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    report(
        dir,
        &[
            "run",
            "srv.toml",
            "--quiet",
            "--set",
            &set,
            "--trace-output",
            "real",
        ],
    );
    truth
}

#[test]
fn a_trace_gives_back_its_coefficients() {
    use blis_host::instance::latency::ITER29_BETA;
    let dir = TestDir::new("calibrate_fit_trace_recovery");
    let truth = observed_trace(&dir);
    // Every beta (Levenberg–Marquardt only: --iterations 0), fitted from
    // the defaults to the trace's per-request TTFT, E2E and ITL; 3 folds by
    // request.
    let summary = report(
        &dir,
        &[
            "calibrate",
            "fit",
            "--trace",
            "srv.toml=real.yaml,real.csv",
            "--fit",
            "beta",
            "--iterations",
            "0",
            "--holdout",
            "3",
            "--out",
            "p.toml",
            "--quiet",
        ],
    );
    let start = summary["start_mape"].as_f64().unwrap();
    let train = summary["train_mape"].as_f64().unwrap();
    let held = summary["heldout_mape"].as_f64().unwrap();
    // β ×1.3 makes every step 30 % slower: the defaults are far off.
    assert!(start > 15.0, "start {start}");
    // The replay of a blis trace through the true coefficients reproduces
    // it up to the µs rounding of the chunk times, and the one-factor stage
    // finds β ×1.3: predictions within 1 %, train and held out.
    assert!(train < 1.0, "train {train}");
    assert!(held < 1.0, "held out {held}");
    let p: toml::Table = std::fs::read_to_string(dir.path().join("p.toml"))
        .unwrap()
        .parse()
        .unwrap();
    for f in p["fitted"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        let i: usize = name
            .trim_start_matches("beta[")
            .trim_end_matches(']')
            .parse()
            .unwrap();
        let v = f["value"].as_float().unwrap();
        // Each fitted beta is the default times the one factor: within 1 %
        // of the truth.
        assert!(
            (v / truth[i] - 1.0).abs() < 0.01,
            "{name}: fitted {v}, truth {}, default {}",
            truth[i],
            ITER29_BETA[i]
        );
    }
    let pm = p["error"]["per_metric"].as_table().unwrap();
    for m in ["request_ttft_ms", "request_e2e_ms", "request_itl_ms"] {
        assert!(pm[m]["rows"].as_integer().unwrap() > 50, "{m}");
        assert!(pm[m]["heldout_mape"].as_float().unwrap() < 2.0, "{m}");
        assert!(pm[m]["train_mape"].as_float().unwrap() < 2.0, "{m}");
    }
    // The trace files are inputs, hashed.
    let inputs = p["inputs"].as_array().unwrap();
    for file in ["real.yaml", "real.csv", "srv.toml"] {
        assert!(
            inputs
                .iter()
                .any(|i| i["path"].as_str().unwrap().ends_with(file)
                    && i["sha256"].as_str().unwrap().len() == 64),
            "{file} in {inputs:?}"
        );
    }

    // With an aggregate table as well (the truth's mean E2E of another
    // load), weighted together: the same factor.
    dir.write(
        "busy.toml",
        &trace_server().replace("rate = 6.0", "rate = 12.0"),
    );
    let set = format!(
        "model.beta=[{}]",
        truth
            .iter()
            .map(|b| format!("{b:e}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let busy = report(&dir, &["run", "busy.toml", "--quiet", "--set", &set]);
    dir.write(
        "m.csv",
        &format!(
            "run_file,metric,value\nbusy.toml,e2e_mean_ms,{}\n",
            busy["cluster"]["e2e_mean_ms"].as_f64().unwrap()
        ),
    );
    let both = report(
        &dir,
        &[
            "calibrate",
            "fit",
            "--measurements",
            "m.csv",
            "--trace",
            "srv.toml=real.yaml,real.csv",
            "--fit",
            "beta",
            "--iterations",
            "0",
            "--out",
            "p2.toml",
            "--quiet",
        ],
    );
    assert!(both["train_mape"].as_f64().unwrap() < 1.0, "{both}");
    let b0 = both["fitted"]["beta[0]"].as_f64().unwrap();
    assert!((b0 / truth[0] - 1.0).abs() < 0.01, "{b0} vs {}", truth[0]);
}

#[test]
fn bad_traces_are_refused() {
    let dir = TestDir::new("calibrate_fit_bad_traces");
    observed_trace(&dir);
    let fit = |trace: &str| -> String {
        run_bad(
            &dir,
            &[
                "calibrate",
                "fit",
                "--trace",
                trace,
                "--out",
                "p.toml",
                "--quiet",
            ],
        )
    };
    for bad in ["srv.toml", "srv.toml=real.yaml", "=real.yaml,real.csv"] {
        let e = fit(bad);
        assert!(
            e.contains(&format!("--trace {bad}")) && e.contains("RUN_FILE=HEADER.yaml,DATA.csv"),
            "{bad}: {e}"
        );
    }
    let e = fit("srv.toml=nope.yaml,real.csv");
    assert!(
        e.contains("the trace header nope.yaml does not exist"),
        "{e}"
    );
    let e = fit("gone.toml=real.yaml,real.csv");
    assert!(e.contains("the run file gone.toml does not exist"), "{e}");
    // Every row failed: no usable row, said so.
    let csv = std::fs::read_to_string(dir.path().join("real.csv")).unwrap();
    let failed: String = csv
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{l}\n")
            } else {
                format!("{}\n", l.replace(",ok,", ",error,"))
            }
        })
        .collect();
    assert_ne!(failed, csv);
    dir.write("failed.csv", &failed);
    let e = fit("srv.toml=real.yaml,failed.csv");
    assert!(
        e.contains("failed.csv has no usable row") && e.contains("0 with status ok"),
        "{e}"
    );
    // Neither a table nor a trace.
    let e = run_bad(&dir, &["calibrate", "fit", "--out", "p.toml"]);
    assert!(e.contains("nothing to fit to"), "{e}");
    // More folds than requests.
    let e = run_bad(
        &dir,
        &[
            "calibrate",
            "fit",
            "--trace",
            "srv.toml=real.yaml,real.csv",
            "--holdout",
            "100000",
            "--out",
            "p.toml",
        ],
    );
    assert!(e.contains("folds are by request"), "{e}");
    assert!(!dir.path().join("p.toml").exists());
}

/// A profile carries to a model or GPU it was not fitted on only when the
/// run says so (`model.calibration_extrapolate`): without the key the run
/// is refused and told of it; with it, it runs with the profile's
/// coefficients and a note on stderr names what is extrapolated and the
/// profile's measured leave-one-model-out error (`--holdout-by model`).
#[test]
fn a_profile_applied_to_an_unseen_model_needs_the_extrapolation_key() {
    let dir = TestDir::new("calibrate_fit_extrapolate");
    dir.write("a.toml", &run_file("qwen2.5-7b-instruct", 4.0));
    dir.write("b.toml", &run_file("llama-3.1-8b-instruct", 6.0));
    slower_measurements(&dir, &["a.toml", "b.toml"], 1.2);
    let summary = report(
        &dir,
        &fit_args(&[
            "--fit",
            "beta[2],alpha[0]",
            "--holdout-by",
            "model",
            "--quiet",
        ]),
    );
    assert!(summary["train_mape"].as_f64().unwrap() < 2.0, "{summary}");
    let p: toml::Table = std::fs::read_to_string(dir.path().join("p.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let by_model = &p["error"]["heldout_by"]["model"];
    assert_eq!(by_model["folds"].as_integer(), Some(2));
    let mape = by_model["mape"].as_float().unwrap();
    // Both models ran 20 % slow: each predicted from the other within a few %.
    assert!(mape < 5.0, "{by_model}");
    let units = by_model["per_unit"].as_table().unwrap();
    assert!(
        units.contains_key("qwen2.5-7b-instruct") && units.contains_key("llama-3.1-8b-instruct")
    );

    dir.write("c.toml", &run_file("qwen3-14b", 4.0));
    let e = run_bad(
        &dir,
        &["run", "c.toml", "--set", "model.calibration=\"p.toml\""],
    );
    assert!(e.contains("not model qwen3-14b"), "{e}");
    assert!(e.contains("model.calibration_extrapolate = true"), "{e}");
    assert!(
        e.contains("leave-one-model-out error: weighted MAPE"),
        "{e}"
    );

    let o = dir
        .blis()
        .args([
            "run",
            "c.toml",
            "--quiet",
            "--set",
            "model.calibration=\"p.toml\"",
            "--set",
            "model.calibration_extrapolate=true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("extrapolates it to model qwen3-14b"), "{err}");
    assert!(
        err.contains(&format!(
            "leave-one-model-out error: weighted MAPE {mape:.1} % over 2 folds"
        )),
        "{err}"
    );
    let cal: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(cal["calibration"]["profile"], "p.toml");
    let base = report(&dir, &["run", "c.toml", "--quiet"]);
    assert!(
        cal["cluster"]["e2e_mean_ms"].as_f64().unwrap()
            > base["cluster"]["e2e_mean_ms"].as_f64().unwrap() * 1.1,
        "the profile's slower coefficients apply"
    );
    // A GPU it has not seen: the same key; without it, refused.
    let e = run_bad(
        &dir,
        &[
            "run",
            "a.toml",
            "--set",
            "model.calibration=\"p.toml\"",
            "--set",
            "model.hardware=\"A100-80\"",
        ],
    );
    assert!(e.contains("on GPU A100-80"), "{e}");
    assert!(e.contains("no leave-one-GPU-out error"), "{e}");
    let o = dir
        .blis()
        .args([
            "validate",
            "a.toml",
            "--set",
            "model.calibration=\"p.toml\"",
            "--set",
            "model.hardware=\"A100-80\"",
            "--set",
            "model.calibration_extrapolate=true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("extrapolates it to GPU A100-80"), "{err}");
    // The key without a profile does nothing, and says so.
    let o = dir
        .blis()
        .args([
            "validate",
            "a.toml",
            "--set",
            "model.calibration_extrapolate=true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("does nothing here: there is no model.calibration"),
        "{err}"
    );
}

/// `model.moe_expert_load = "touched"`: a Scout step at low load loads
/// fewer experts (faster than with every expert, a dense model the same);
/// one fit takes one setting, its profile records it, and a run applying
/// the profile with the other setting is refused, naming the key.
#[test]
fn a_profile_fitted_with_touched_experts_applies_only_with_them() {
    let dir = TestDir::new("calibrate_fit_touched_experts");
    let scout = "llama-4-scout-17b-16e-instruct-fp8-dynamic";
    let with = |text: String, keys: &str| {
        text.replace(
            "hardware = \"H100\"\n",
            &format!("hardware = \"H100\"\n{keys}"),
        )
    };
    let (tp2, touched) = ("tp = 2\n", "tp = 2\nmoe_expert_load = \"touched\"\n");
    dir.write("all.toml", &with(run_file(scout, 1.0), tp2));
    dir.write("a.toml", &with(run_file(scout, 1.0), touched));
    dir.write("b.toml", &with(run_file(scout, 2.0), touched));
    let dense = run_file("qwen2.5-7b-instruct", 2.0);
    dir.write(
        "d.toml",
        &with(dense.clone(), "moe_expert_load = \"touched\"\n"),
    );
    dir.write("dense.toml", &dense);
    let itl = |f: &str| {
        report(&dir, &["run", f, "--quiet"])["cluster"]["itl_mean_ms"]
            .as_f64()
            .unwrap()
    };
    let (all, few) = (itl("all.toml"), itl("a.toml"));
    // A handful of tokens per step touch a few of the 16 experts.
    assert!(few < 0.9 * all, "touched {few} ms vs all {all} ms");
    assert_eq!(
        itl("d.toml"),
        itl("dense.toml"),
        "a dense model has no routed experts"
    );

    let setting = Setting {
        key: "moe_expert_load",
        value: "touched",
        default: "all",
        unknown: "some",
    };
    setting.one_per_profile(
        &dir,
        &["a.toml", "all.toml"],
        &["a.toml", "b.toml", "d.toml"],
    );
}

/// A `[model]` setting a profile's coefficients belong to (`key = value`
/// where the default is `default`; `unknown` is no value of it).
struct Setting {
    key: &'static str,
    value: &'static str,
    default: &'static str,
    unknown: &'static str,
}

impl Setting {
    /// One fit takes one setting: a fit over `mixed` (the first run file
    /// with the setting, the second without) is refused; fitted on
    /// `fitted` (all with it), the profile records it, applies to
    /// `mixed[0]` and is refused by `mixed[1]`, naming the key; an unknown
    /// value is refused.
    fn one_per_profile(&self, dir: &TestDir, mixed: &[&str; 2], fitted: &[&str]) {
        let (key, value, default) = (self.key, self.value, self.default);
        slower_measurements(dir, mixed, 1.1);
        let e = run_bad(dir, &fit_args(&["--quiet"]));
        assert!(
            e.contains(&format!("sets model.{key} = \"{value}\" and"))
                && e.contains("one profile fits one step-time model"),
            "{e}"
        );
        slower_measurements(dir, fitted, 1.1);
        report(dir, &fit_args(&["--fit", "beta[2]", "--quiet"]));
        let p = std::fs::read_to_string(dir.path().join("p.toml")).unwrap();
        assert!(p.contains(&format!("{key} = \"{value}\"")), "{p}");
        let profile = "model.calibration=\"p.toml\"";
        let applied = report(dir, &["run", mixed[0], "--quiet", "--set", profile]);
        assert_eq!(applied["calibration"]["profile"], "p.toml");
        let e = run_bad(dir, &["run", mixed[1], "--set", profile]);
        assert!(
            e.contains(&format!(
                "fitted with model.{key} = \"{value}\", but the run uses \"{default}\""
            )) && e.contains(&format!("set model.{key} = \"{value}\"")),
            "{e}"
        );
        let bad = format!("model.{key}=\"{}\"", self.unknown);
        let e = run_bad(dir, &["run", mixed[0], "--set", &bad]);
        assert!(
            e.contains(&format!("unknown {key} '{}'", self.unknown)),
            "{e}"
        );
    }
}

/// `model.geometry = "full"`: a step also reads the LM head (Qwen2.5-7B's
/// 152 064 × 3 584 bf16 weights, about 8 % more than the layers' at TP 1), so its
/// ITL is longer than in the reference's geometry; one fit takes one
/// geometry, its profile records it, and a run applying the profile in the
/// other is refused, naming the key.
#[test]
fn a_profile_fitted_in_full_geometry_applies_only_in_it() {
    let dir = TestDir::new("calibrate_fit_geometry");
    let qwen = "qwen2.5-7b-instruct";
    let at = |rate: f64, keys: &str| {
        run_file(qwen, rate).replace(
            "hardware = \"H100\"\n",
            &format!("hardware = \"H100\"\ntp = 1\n{keys}"),
        )
    };
    dir.write("ref.toml", &at(1.0, ""));
    dir.write("a.toml", &at(1.0, "geometry = \"full\"\n"));
    dir.write("b.toml", &at(2.0, "geometry = \"full\"\n"));
    let itl = |f: &str| {
        report(&dir, &["run", f, "--quiet"])["cluster"]["itl_mean_ms"]
            .as_f64()
            .unwrap()
    };
    let (reference, with_head) = (itl("ref.toml"), itl("a.toml"));
    assert!(
        with_head > 1.04 * reference && with_head < 1.12 * reference,
        "full {with_head} ms vs reference {reference} ms"
    );

    let setting = Setting {
        key: "geometry",
        value: "full",
        default: "reference",
        unknown: "exact",
    };
    setting.one_per_profile(&dir, &["a.toml", "ref.toml"], &["a.toml", "b.toml"]);
}

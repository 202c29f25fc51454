//! `blis calibrate --trace-header H --trace-data D --sim-results S --report
//! R [--itl-data I] [--sim-metrics M] [flags]`: reads the files, runs
//! [`crate::calibrate::calibrate`], writes the report atomically and
//! prints it on stdout; per-class MAPE lines go to stderr.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use super::commands::{runtime, usage, Failure};
use crate::calibrate::{self, ItlData, Settings, SimResult};
use crate::output::{check_paths, PendingOutput};
use crate::trace_v2::{read_header, GoodputTarget, TraceReader};

/// `blis calibrate` flags (or `blis calibrate fit …`).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CalibrateArgs {
    /// `fit`: the latency model's coefficients fitted to measurements.
    #[command(subcommand)]
    pub command: Option<CalibrateCommand>,
    /// TraceV2 header YAML of the real trace.
    #[arg(long, value_name = "FILE")]
    pub trace_header: Option<PathBuf>,
    /// TraceV2 data CSV of the real trace.
    #[arg(long, value_name = "FILE")]
    pub trace_data: Option<PathBuf>,
    /// SimResult JSON array (`blis replay --results-path`).
    #[arg(long, value_name = "FILE")]
    pub sim_results: Option<PathBuf>,
    /// Where to write the calibration report (JSON).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// ITL CSV (`request_id,chunk_index,timestamp_us`) from `observe --record-itl`.
    #[arg(long, value_name = "FILE")]
    pub itl_data: Option<PathBuf>,
    /// Aggregate metrics JSON of the replay (`--metrics-path`; field `cache_hit_rate`).
    #[arg(long, value_name = "FILE")]
    pub sim_metrics: Option<PathBuf>,
    /// Rows with request_id below this are excluded (-1 = the header's warm_up_requests).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub warmup_requests: i64,
    /// Network round trip in µs added to the simulated latencies (-1 = the header's measured_rtt_ms).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub network_rtt_us: i64,
    /// Bandwidth in Mbit/s for the upload/download terms (0 = none).
    #[arg(long, default_value_t = 0.0)]
    pub network_bandwidth_mbps: f64,
    /// TTFT MAPE at or below which `ttft_tolerance.within` is true.
    #[arg(long, default_value_t = 0.15)]
    pub ttft_mape_threshold: f64,
    /// Hit-rate tolerance in percentage points.
    #[arg(long, default_value_t = 5.0)]
    pub hit_rate_tolerance_pp: f64,
    /// Goodput TTFT targets `class=dur,…` (Go durations: 100ms, 1.5s).
    #[arg(long)]
    pub slo_ttft: Option<String>,
    /// Goodput ITL targets `class=dur,…`.
    #[arg(long)]
    pub slo_itl: Option<String>,
    /// Goodput E2E targets `class=dur,…`.
    #[arg(long)]
    pub slo_e2e: Option<String>,
}

/// A Go duration (`300us`, `100ms`, `1.5s`, `2m`, `1h`) in ms.
fn go_duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    for (suf, mult) in [
        ("ns", 1e-6),
        ("us", 1e-3),
        ("µs", 1e-3),
        ("ms", 1.0),
        ("s", 1e3),
        ("m", 60e3),
        ("h", 3600e3),
    ] {
        if let Some(n) = s.strip_suffix(suf) {
            let v: f64 = n.parse().ok()?;
            return (v.is_finite() && v >= 0.0).then_some(v * mult);
        }
    }
    None
}

fn parse_targets(
    flag: &str,
    arg: &Option<String>,
    out: &mut BTreeMap<String, GoodputTarget>,
    pick: fn(&mut GoodputTarget) -> &mut f64,
) -> Result<(), Failure> {
    let Some(arg) = arg else {
        return Ok(());
    };
    for part in arg.split(',').filter(|p| !p.trim().is_empty()) {
        let (class, d) = part.split_once('=').ok_or_else(|| {
            usage(format!(
                "{flag} {arg}: \"{part}\" is not class=duration (e.g. critical=100ms)"
            ))
        })?;
        let ms = go_duration_ms(d).ok_or_else(|| {
            usage(format!(
                "{flag} {arg}: \"{d}\" is not a duration (e.g. 100ms, 1.5s)"
            ))
        })?;
        *pick(out.entry(class.trim().to_string()).or_default()) = ms;
    }
    Ok(())
}

fn read_itl(path: &Path) -> Result<ItlData, Failure> {
    let file = path.display().to_string();
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|e| usage(format!("{file}: cannot read the ITL data: {e}")))?;
    let mut out: ItlData = ItlData::new();
    let mut rec = csv::StringRecord::new();
    loop {
        match r.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(usage(format!("{file}: {e}"))),
        }
        let line = rec.position().map_or(0, |p| p.line());
        if rec.len() < 3 {
            return Err(usage(format!(
                "{file}:{line}: the row has {} fields; an ITL row is request_id,chunk_index,timestamp_us",
                rec.len()
            )));
        }
        let num = |i: usize, name: &str| -> Result<i64, Failure> {
            match rec[i].parse::<i64>() {
                Ok(v) if v >= 0 => Ok(v),
                Ok(v) => Err(usage(format!(
                    "{file}:{line}: column {name}: {v} is negative"
                ))),
                Err(_) => Err(usage(format!(
                    "{file}:{line}: column {name}: \"{}\" is not an integer",
                    &rec[i]
                ))),
            }
        };
        let id = num(0, "request_id")? as u64;
        let idx = num(1, "chunk_index")? as u64;
        let ts = num(2, "timestamp_us")?;
        out.entry(id).or_default().push((idx, ts));
    }
    Ok(out)
}

/// Run `blis calibrate`; returns the report text for stdout.
pub fn calibrate(args: &CalibrateArgs) -> Result<String, Failure> {
    if let Some(CalibrateCommand::Fit(a)) = &args.command {
        return crate::fit::fit_command(&a.options()).map_err(|e| match e {
            crate::fit::FitError::Input(m) => usage(m),
            crate::fit::FitError::Runtime(m) => runtime(m),
        });
    }
    // Required without `fit` (Options only so that `fit` parses without them).
    let need = |v: &Option<PathBuf>, flag: &str| {
        v.clone().ok_or_else(|| {
            usage(format!(
                "blis calibrate needs {flag}: give --trace-header, --trace-data, --sim-results and --report (or use `blis calibrate fit`)"
            ))
        })
    };
    let trace_header = need(&args.trace_header, "--trace-header")?;
    let trace_data = need(&args.trace_data, "--trace-data")?;
    let sim_results = need(&args.sim_results, "--sim-results")?;
    let report_path = need(&args.report, "--report")?;
    let mut slo = BTreeMap::new();
    parse_targets("--slo-ttft", &args.slo_ttft, &mut slo, |t| &mut t.ttft_ms)?;
    parse_targets("--slo-itl", &args.slo_itl, &mut slo, |t| &mut t.itl_ms)?;
    parse_targets("--slo-e2e", &args.slo_e2e, &mut slo, |t| &mut t.e2e_ms)?;
    for (flag, v) in [
        ("--network-bandwidth-mbps", args.network_bandwidth_mbps),
        ("--ttft-mape-threshold", args.ttft_mape_threshold),
        ("--hit-rate-tolerance-pp", args.hit_rate_tolerance_pp),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(usage(format!("{flag} {v}: must be a number ≥ 0")));
        }
    }
    let mut inputs = vec![
        ("--trace-header".to_string(), trace_header.clone()),
        ("--trace-data".to_string(), trace_data.clone()),
        ("--sim-results".to_string(), sim_results.clone()),
    ];
    if let Some(p) = &args.itl_data {
        inputs.push(("--itl-data".into(), p.clone()));
    }
    if let Some(p) = &args.sim_metrics {
        inputs.push(("--sim-metrics".into(), p.clone()));
    }
    let errors = check_paths(&[("--report", report_path.clone())], &inputs);
    if !errors.is_empty() {
        return Err(usage(errors.join("\n")));
    }
    let header = read_header(&trace_header).map_err(|e| usage(e.to_string()))?;
    let reader = TraceReader::open(&trace_data).map_err(|e| usage(e.to_string()))?;
    let rows = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(e.to_string()))?;
    let sim_file = sim_results.display();
    let text = crate::input::read_to_string(&sim_results)
        .map_err(|e| usage(format!("{sim_file}: cannot read the SimResult file: {e}")))?;
    let sims: Vec<SimResult> = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "{sim_file}: not a SimResult JSON array ({e}); expected [{{\"request_id\":…,\"ttft_us\":…,\"e2e_us\":…,\"input_tokens\":…,\"output_tokens\":…}}, …]"
        ))
    })?;
    let mut itl = match &args.itl_data {
        Some(p) => Some(read_itl(p)?),
        None => None,
    };
    let sim_hit = match &args.sim_metrics {
        None => None,
        Some(p) => {
            let t = crate::input::read_to_string(p)
                .map_err(|e| usage(format!("{}: cannot read: {e}", p.display())))?;
            let v: serde_json::Value = serde_json::from_str(&t)
                .map_err(|e| usage(format!("{}: not JSON: {e}", p.display())))?;
            Some(v.get("cache_hit_rate").and_then(|x| x.as_f64()).ok_or_else(|| {
                usage(format!(
                    "{}: no numeric cache_hit_rate field (write it with `blis replay --metrics-path`)",
                    p.display()
                ))
            })?)
        }
    };
    let settings = Settings {
        warmup: args.warmup_requests,
        rtt_us: args.network_rtt_us,
        bandwidth_mbps: args.network_bandwidth_mbps,
        ttft_mape_threshold: args.ttft_mape_threshold,
        hit_rate_tolerance_pp: args.hit_rate_tolerance_pp,
        slo,
    };
    let (report, lines) =
        calibrate::calibrate(&header, &rows, &sims, itl.as_mut(), sim_hit, &settings)
            .map_err(|e| usage(format!("{}: {e}", trace_data.display())))?;
    for l in &lines {
        eprintln!("{l}");
    }
    let text = serde_json::to_string_pretty(&report).map_err(|e| usage(e.to_string()))?;
    let (mut f, pending) = PendingOutput::create(&report_path).map_err(|e| {
        runtime(format!(
            "cannot create the report {}: {e}",
            report_path.display()
        ))
    })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| f.flush())
        .map_err(|e| {
            runtime(format!(
                "cannot write the report {}: {e}",
                report_path.display()
            ))
        })?;
    drop(f);
    pending.commit().map_err(|e| runtime(e.to_string()))?;
    Ok(text)
}

/// `blis calibrate` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum CalibrateCommand {
    /// Fit the latency model's coefficients to measurements (simulator in
    /// the loop) and write a calibration profile for `[model] calibration`.
    Fit(FitFlags),
}

/// `blis calibrate fit` flags (→ [`crate::fit::FitArgs`]).
#[derive(Debug, Args, Clone)]
pub struct FitFlags {
    /// The calibration profile to write (TOML).
    #[arg(long, value_name = "PROFILE.toml")]
    pub out: PathBuf,
    /// Measurements: a CSV table with header `run_file,metric,value`
    /// (`run_file` relative to the table; `metric` a report field such as
    /// `ttft_mean_ms` or `stages[0].e2e_p90_ms`).
    #[arg(long, value_name = "M.csv")]
    pub measurements: Option<PathBuf>,
    /// An observed TraceV2 trace with the run file of the server that
    /// produced it (repeatable): errors per request (TTFT, E2E, ITL) between
    /// its ok rows and a replay of it through the run file.
    #[arg(long = "trace", value_name = "RUN_FILE=HEADER.yaml,DATA.csv")]
    pub traces: Vec<String>,
    /// Coefficients to fit, comma separated: `alpha`, `beta`, `alpha[i]`,
    /// `beta[i]` (default: every nonzero coefficient of the latency model).
    #[arg(long, value_name = "LIST")]
    pub fit: Option<String>,
    /// Bounds of one coefficient, `NAME=LO:HI` (repeatable; default
    /// start/20 to start·20).
    #[arg(long = "bounds", value_name = "NAME=LO:HI")]
    pub bounds: Vec<String>,
    /// Weight of a metric in the objective, `METRIC=W` (repeatable; default 1;
    /// a bare field such as `ttft_mean_ms` also weighs it in every stage).
    #[arg(long = "weight", value_name = "METRIC=W")]
    pub weights: Vec<String>,
    /// Held-out folds, by experiment (the table's run files) and by request
    /// (a trace's): each fold is predicted by a fit on the others (0 = none;
    /// at least 2 otherwise).
    #[arg(long, default_value_t = 0)]
    pub holdout: u32,
    /// Held-out errors by deployment, recorded in the profile: `experiment`
    /// (leave-one-experiment-out), `model` (leave-one-model-out), `gpu`
    /// (leave-one-GPU-out), comma separated; each unit in turn is predicted
    /// by a fit on the others (one fit per unit).
    #[arg(long = "holdout-by", value_name = "LIST", value_delimiter = ',')]
    pub holdout_by: Vec<String>,
    /// Seed of the fold assignment and the bootstrap.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Workload seeds each measured deployment is simulated at: its run
    /// file's `seed`, then seed + 1, …; a prediction is the mean over them
    /// (the same seeds for every candidate). A measurement is one draw of
    /// its workload's randomness and so is one simulation; averaging the
    /// simulations removes the simulator's share of that noise, at K times
    /// the cost (default 1: the run file's seed only).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub sim_seeds: u32,
    /// Simulations run at once (default: every core).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Nelder–Mead iterations on the weighted MAPE after the two
    /// Levenberg–Marquardt stages (default 0: none): a polish of the error
    /// itself, at one simulation set or more per iteration.
    #[arg(long, default_value_t = 0)]
    pub iterations: u64,
    /// Fit every coefficient with a Gaussian prior of this standard
    /// deviation (log units: 0.1 ≈ ±10 %) around the one-factor-per-group
    /// point (the start's shape at the scale the data chose), instead of
    /// keeping every coefficient free only if it pays for its freedom
    /// (default: that)
    #[arg(long, value_name = "SD")]
    pub prior_sd: Option<f64>,
    /// Also write an HTML page: measured against predicted per experiment
    /// and metric, before and after, held-out points marked.
    #[arg(long, value_name = "fit.html")]
    pub html: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
}

impl FitFlags {
    /// The flags as the library's fit description.
    pub fn options(&self) -> crate::fit::FitArgs {
        crate::fit::FitArgs {
            out: self.out.clone(),
            measurements: self.measurements.clone(),
            traces: self.traces.clone(),
            fit: self.fit.clone(),
            bounds: self.bounds.clone(),
            weights: self.weights.clone(),
            holdout: self.holdout,
            holdout_by: self.holdout_by.clone(),
            seed: self.seed,
            sim_seeds: self.sim_seeds,
            jobs: self.jobs,
            iterations: self.iterations,
            prior_sd: self.prior_sd,
            html: self.html.clone(),
            quiet: self.quiet,
        }
    }
}

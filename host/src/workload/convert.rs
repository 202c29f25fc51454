//! `blis convert workload-spec`: the reference simulator's v2 workload-spec
//! YAML (cluster spec §6.4) to the run file's `[workload]` TOML.
//!
//! The YAML is parsed as strictly as the reference parses it (an unknown key
//! is an error). Every field that blis does not simulate is named in the
//! returned notes, with what happened to it, so a conversion never drops
//! anything silently; behaviour that blis implements differently from the
//! reference is noted too. The result is validated by building the workload
//! it describes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::config::{
    ArrivalProcess, ArrivalSpec, ClientSpec, ContextGrowth, LengthDist, SessionSpec, Window,
    WorkloadConfig,
};
use super::{Workload, WorkloadError};
use crate::request::SloClass;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    version: Option<Value>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    aggregate_rate: Option<f64>,
    #[serde(default)]
    horizon: Option<i64>,
    #[serde(default)]
    num_requests: Option<i64>,
    #[serde(default)]
    clients: Option<Vec<YClient>>,
    #[serde(default)]
    cohorts: Option<Vec<YCohort>>,
    #[serde(default)]
    servegen_data: Option<Value>,
    #[serde(default)]
    inference_perf: Option<YInferencePerf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YInferencePerf {
    #[serde(default)]
    stages: Vec<YStage>,
    #[serde(default)]
    shared_prefix: Option<YSharedPrefix>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YStage {
    rate: f64,
    /// Seconds.
    duration: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YSharedPrefix {
    num_unique_system_prompts: i64,
    num_users_per_system_prompt: i64,
    #[serde(default)]
    system_prompt_len: i64,
    #[serde(default)]
    question_len: i64,
    #[serde(default)]
    output_len: i64,
    #[serde(default)]
    enable_multi_turn_chat: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YClient {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    slo_class: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    rate_fraction: Option<f64>,
    #[serde(default)]
    arrival: Option<YArrival>,
    #[serde(default)]
    input_distribution: Option<YDist>,
    #[serde(default)]
    output_distribution: Option<YDist>,
    #[serde(default)]
    prefix_group: Option<String>,
    #[serde(default)]
    prefix_length: Option<i64>,
    #[serde(default)]
    streaming: Option<bool>,
    #[serde(default)]
    network: Option<Value>,
    #[serde(default)]
    lifecycle: Option<YLifecycle>,
    #[serde(default)]
    multimodal: Option<Value>,
    #[serde(default)]
    reasoning: Option<YReasoning>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YArrival {
    process: String,
    #[serde(default)]
    cv: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YDist {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    params: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YLifecycle {
    #[serde(default)]
    windows: Option<Vec<YWindow>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YWindow {
    start_us: i64,
    end_us: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YReasoning {
    #[serde(default)]
    reason_ratio_distribution: Option<Value>,
    #[serde(default)]
    multi_turn: Option<YMultiTurn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YMultiTurn {
    #[serde(default)]
    max_rounds: i64,
    #[serde(default)]
    think_time_us: i64,
    #[serde(default)]
    context_growth: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YCohort {
    #[serde(default)]
    id: Option<String>,
    population: i64,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    slo_class: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    arrival: Option<YArrival>,
    #[serde(default)]
    input_distribution: Option<YDist>,
    #[serde(default)]
    output_distribution: Option<YDist>,
    #[serde(default)]
    prefix_group: Option<String>,
    #[serde(default)]
    streaming: Option<bool>,
    #[serde(default)]
    rate_fraction: Option<f64>,
    #[serde(default)]
    diurnal: Option<YDiurnal>,
    #[serde(default)]
    spike: Option<YSpike>,
    #[serde(default)]
    drain: Option<YDrain>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YDiurnal {
    peak_hour: i64,
    peak_to_trough_ratio: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YSpike {
    start_time_us: i64,
    duration_us: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YDrain {
    start_time_us: i64,
    ramp_duration_us: i64,
}

/// Largest cohort population (as in the reference).
const MAX_POPULATION: i64 = 100_000;

fn spec_err(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Spec(msg.into())
}

/// Converts a reference v2 (or v1) workload-spec YAML into the `[workload]`
/// TOML of a blis run file.
///
/// Returns the TOML text and the notes: one line per field blis does not
/// implement (what was dropped and why) or implements differently. Errors:
/// invalid YAML, unknown keys, invalid values, or a spec blis cannot express
/// at all (e.g. only `servegen_data`).
pub fn convert_workload_spec(yaml_text: &str) -> Result<(String, Vec<String>), WorkloadError> {
    let spec: Spec = serde_yaml_ng::from_str(yaml_text).map_err(|e| spec_err(e.to_string()))?;
    let mut notes = Vec::new();
    let version = match &spec.version {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(v) => {
            return Err(spec_err(format!(
                "version: expected \"1\" or \"2\", got {v:?}"
            )))
        }
    };
    match version.as_str() {
        "" | "1" => notes.push(format!(
            "version: \"{version}\" upgraded to \"2\" (SLO classes realtime → critical, interactive → standard)"
        )),
        "2" => {}
        v => return Err(spec_err(format!("version: unsupported \"{v}\" (expected \"1\" or \"2\")"))),
    }
    if let Some(seed) = spec.seed {
        notes.push(format!(
            "seed: {seed} is a run-level setting in blis, not part of [workload]: pass --seed {seed} or set `seed` in the run file (blis's generator differs from the reference's, so requests differ anyway)"
        ));
    }
    if let Some(c) = spec.category.as_deref().filter(|c| !c.is_empty()) {
        if !["language", "multimodal", "reasoning"].contains(&c) {
            return Err(spec_err(format!(
                "category: unknown \"{c}\" (accepted: language, multimodal, reasoning)"
            )));
        }
        notes.push(format!(
            "category: \"{c}\" is a label with no effect on simulation; dropped"
        ));
    }
    if let Some(h) = spec.horizon.filter(|&h| h > 0) {
        notes.push(format!(
            "horizon: {h} µs is a run-level setting in blis, not part of [workload]: pass --horizon {h} or set `horizon` in the run file"
        ));
    }
    if spec.servegen_data.is_some() {
        notes.push("servegen_data: ServeGen import is not implemented by blis; dropped".into());
    }
    let num_requests = match spec.num_requests {
        None | Some(0) => None,
        Some(n) if n < 0 => return Err(spec_err(format!("num_requests must be ≥ 0, got {n}"))),
        Some(n) => Some(n as u64),
    };
    let mut clients = Vec::new();
    let mut groups: HashMap<String, (Option<u32>, String)> = HashMap::new();
    for (i, c) in spec.clients.iter().flatten().enumerate() {
        clients.push(convert_client(i, c, &mut groups, &mut notes)?);
    }
    let mut aggregate_rate = spec.aggregate_rate.filter(|&r| r > 0.0);
    if let Some(ip) = &spec.inference_perf {
        if clients.is_empty() {
            aggregate_rate = Some(expand_inference_perf(
                ip,
                aggregate_rate,
                &mut clients,
                &mut notes,
            )?);
        } else {
            notes.push(
                "inference_perf: ignored because the spec has clients (as in the reference)".into(),
            );
        }
    }
    for (ci, cohort) in spec.cohorts.iter().flatten().enumerate() {
        expand_cohort(ci, cohort, &mut clients, &mut notes)?;
    }
    if clients.is_empty() {
        return Err(spec_err(
            "the spec has no clients, cohorts or inference_perf that blis can simulate (servegen_data is not supported)",
        ));
    }
    let config = WorkloadConfig {
        aggregate_rate: aggregate_rate.or(spec.aggregate_rate),
        num_requests,
        clients: Some(clients),
        ..WorkloadConfig::empty()
    };
    if config.aggregate_rate.is_none() {
        return Err(spec_err(
            "aggregate_rate is missing (total req/s, finite and > 0)",
        ));
    }
    // Validate by building the workload (no file is read for a client list).
    Workload::new(&config, 0, Path::new("."))
        .map_err(|e| spec_err(format!("converted spec is invalid: {e}")))?;
    let toml = to_toml(&config)?;
    Ok((toml, notes))
}

/// Largest number of clients an inference-perf expansion may produce.
const MAX_EXPANDED_CLIENTS: i64 = 1_000_000;

/// Expands an inference-perf spec (cluster spec §6.9) into clients and
/// returns the aggregate rate to use.
///
/// Users `prompt-<p>-user-<u>` (p-major), tenant `prompt-<p>`, class batch,
/// Poisson arrivals, constant question and output lengths, prefix group
/// `prompt-<p>` of `system_prompt_len` tokens. Unlike the reference, which
/// runs every stage at the time-weighted mean rate, stages keep their own
/// rates: with several stages each user gets one client per stage, active
/// only during that stage, at that stage's rate.
fn expand_inference_perf(
    ip: &YInferencePerf,
    spec_rate: Option<f64>,
    clients: &mut Vec<ClientSpec>,
    notes: &mut Vec<String>,
) -> Result<f64, WorkloadError> {
    let w = "inference_perf";
    if ip.stages.is_empty() {
        return Err(spec_err(format!("{w}: needs at least one stage")));
    }
    for (i, st) in ip.stages.iter().enumerate() {
        let valid = |x: f64| x.is_finite() && x > 0.0;
        if !(valid(st.rate) && valid(st.duration)) {
            return Err(spec_err(format!(
                "{w}: stages[{i}] needs a finite rate > 0 and duration > 0 (s), got rate {} duration {}",
                st.rate, st.duration
            )));
        }
    }
    let sp = ip
        .shared_prefix
        .as_ref()
        .ok_or_else(|| spec_err(format!("{w}: shared_prefix is missing")))?;
    let (p, u) = (sp.num_unique_system_prompts, sp.num_users_per_system_prompt);
    if p < 1 || u < 1 {
        return Err(spec_err(format!(
            "{w}: num_unique_system_prompts and num_users_per_system_prompt must be ≥ 1, got {p} and {u}"
        )));
    }
    let stages = ip.stages.len() as i64;
    if p.saturating_mul(u)
        .saturating_mul(if stages > 1 { stages } else { 1 })
        > MAX_EXPANDED_CLIENTS
    {
        return Err(spec_err(format!(
            "{w}: expands to more than {MAX_EXPANDED_CLIENTS} clients"
        )));
    }
    let mut len = |name: &str, v: i64| -> Result<u32, WorkloadError> {
        if v < 0 || v > i64::from(u32::MAX) {
            return Err(spec_err(format!(
                "{w}: shared_prefix.{name} must be ≥ 0, got {v}"
            )));
        }
        if v == 0 && name != "system_prompt_len" {
            notes.push(format!(
                "{w}: shared_prefix.{name} 0 becomes 1 token (lengths are at least 1)"
            ));
            return Ok(1);
        }
        Ok(v as u32)
    };
    let system = len("system_prompt_len", sp.system_prompt_len)?;
    let question = len("question_len", sp.question_len)?;
    let output = len("output_len", sp.output_len)?;
    if system == 0 {
        notes.push(format!(
            "{w}: system_prompt_len 0: no shared prefix (the reference still used 50-token prefixes)"
        ));
    }
    let session = sp.enable_multi_turn_chat.then(|| {
        notes.push(format!(
            "{w}: multi-turn chat: sessions of 5 rounds, 500000 µs think time after each completion, accumulated context, keeping the system prompt (the reference dropped it); the reason ratio (constant 0) has no effect and is dropped"
        ));
        SessionSpec {
            max_rounds: 5,
            think_time_us: 500_000,
            context_growth: ContextGrowth::Accumulate,
        }
    });
    let sum_rate: f64 = ip.stages.iter().map(|s| s.rate).sum();
    let sum_dur: f64 = ip.stages.iter().map(|s| s.duration).sum();
    let weighted: f64 = ip.stages.iter().map(|s| s.rate * s.duration).sum();
    let mean_rate = weighted / sum_dur;
    let users = (p * u) as f64;
    let mut offset = 0u64;
    let mut stage_windows = Vec::new();
    for st in &ip.stages {
        let d = (st.duration * 1e6).round() as u64;
        stage_windows.push((
            st.rate,
            Window {
                start_us: offset,
                end_us: offset + d.max(1),
            },
        ));
        offset += d.max(1);
    }
    for pi in 0..p {
        for ui in 0..u {
            let base = ClientSpec {
                id: format!("prompt-{pi}-user-{ui}"),
                rate_fraction: Some(1.0 / users),
                arrival: Some(ArrivalSpec::new(ArrivalProcess::Poisson)),
                input: LengthDist::Constant { value: question },
                output: LengthDist::Constant { value: output },
                prefix_group: (system > 0).then(|| format!("prompt-{pi}")),
                prefix_length: (system > 0).then_some(system),
                slo_class: Some("batch".into()),
                tenant_id: Some(format!("prompt-{pi}")),
                windows: None,
                session,
            };
            if stage_windows.len() == 1 {
                clients.push(base);
                continue;
            }
            for (si, (rate, win)) in stage_windows.iter().enumerate() {
                let mut c = base.clone();
                c.id = format!("{}-stage-{si}", base.id);
                c.rate_fraction = Some(rate / users);
                c.windows = Some(vec![*win]);
                clients.push(c);
            }
        }
    }
    if stage_windows.len() == 1 {
        notes.push(format!(
            "{w}: the stage's duration ({} s) does not end the run: set a horizon or num_requests",
            ip.stages[0].duration
        ));
        return Ok(spec_rate.unwrap_or(mean_rate));
    }
    notes.push(format!(
        "{w}: {} stages become per-stage clients active only during their stage, so each stage runs at its own rate (the reference ran all stages at the mean rate)",
        stage_windows.len()
    ));
    // Per-client rate = aggregate × fraction / Σ fractions; Σ fractions = Σ stage rates.
    // Scale so the time-weighted mean rate equals the spec's aggregate_rate if given.
    let target_mean = spec_rate.unwrap_or(mean_rate);
    Ok(target_mean * sum_rate / mean_rate)
}

/// Writes `[workload]` with one `[[workload.clients]]` table per client and
/// nested values as inline tables (the style of the run-file docs).
fn to_toml(config: &WorkloadConfig) -> Result<String, WorkloadError> {
    let value =
        toml::Value::try_from(config).map_err(|e| spec_err(format!("cannot write TOML: {e}")))?;
    let toml::Value::Table(mut table) = value else {
        return Err(spec_err("cannot write TOML: [workload] is not a table"));
    };
    let clients = table.remove("clients");
    let mut out = String::from("[workload]\n");
    for (k, v) in ordered(&table) {
        out.push_str(&format!("{} = {}\n", key(k), inline(v)));
    }
    if let Some(toml::Value::Array(clients)) = clients {
        for c in &clients {
            out.push_str("\n[[workload.clients]]\n");
            if let toml::Value::Table(t) = c {
                for (k, v) in ordered(t) {
                    out.push_str(&format!("{} = {}\n", key(k), inline(v)));
                }
            }
        }
    }
    Ok(out)
}

/// Keys in declaration order of the config structs; other keys (empirical
/// bins) after them, numerically.
fn ordered(t: &toml::Table) -> Vec<(&String, &toml::Value)> {
    const ORDER: [&str; 32] = [
        "aggregate_rate",
        "num_requests",
        "id",
        "rate_fraction",
        "arrival",
        "input",
        "output",
        "prefix_group",
        "prefix_length",
        "slo_class",
        "tenant_id",
        "windows",
        "session",
        "type",
        "process",
        "cv",
        "mean",
        "std_dev",
        "min",
        "max",
        "alpha",
        "xm",
        "mu",
        "sigma",
        "mix_weight",
        "value",
        "bins",
        "start_us",
        "end_us",
        "max_rounds",
        "think_time_us",
        "context_growth",
    ];
    let mut entries: Vec<(&String, &toml::Value)> = t.iter().collect();
    entries.sort_by_key(|(k, _)| {
        let rank = ORDER.iter().position(|o| o == k).unwrap_or(ORDER.len());
        (rank, k.parse::<u64>().unwrap_or(u64::MAX), k.to_string())
    });
    entries
}

fn key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !k.bytes().all(|b| b.is_ascii_digit())
    {
        k.to_string()
    } else {
        toml::Value::String(k.to_string()).to_string()
    }
}

fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) => {
            let body: Vec<String> = ordered(t)
                .iter()
                .map(|(k, v)| format!("{} = {}", key(k), inline(v)))
                .collect();
            format!("{{ {} }}", body.join(", "))
        }
        toml::Value::Array(a) => {
            let body: Vec<String> = a.iter().map(inline).collect();
            format!("[{}]", body.join(", "))
        }
        other => other.to_string(),
    }
}

fn slo(where_: &str, s: &Option<String>) -> Result<Option<String>, WorkloadError> {
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(c) => SloClass::parse(c)
            .map(|k| Some(k.name().to_string()))
            .ok_or_else(|| {
                spec_err(format!(
                    "{where_}: unknown slo_class \"{c}\" (accepted: critical, standard, batch, sheddable, background)"
                ))
            }),
    }
}

fn arrival(
    where_: &str,
    a: &Option<YArrival>,
    notes: &mut Vec<String>,
) -> Result<Option<ArrivalSpec>, WorkloadError> {
    let Some(a) = a else {
        notes.push(format!("{where_}: no arrival process; blis uses poisson"));
        return Ok(None);
    };
    let process = match a.process.as_str() {
        "poisson" => ArrivalProcess::Poisson,
        "gamma" => ArrivalProcess::Gamma,
        "weibull" => ArrivalProcess::Weibull,
        "constant" => ArrivalProcess::Constant,
        p => {
            return Err(spec_err(format!(
                "{where_}: unknown arrival process \"{p}\" (accepted: poisson, gamma, weibull, constant)"
            )))
        }
    };
    let mut cv = a.cv;
    if matches!(process, ArrivalProcess::Poisson | ArrivalProcess::Constant) && cv.is_some() {
        notes.push(format!(
            "{where_}: arrival cv has no effect on a {} process; dropped",
            process.name()
        ));
        cv = None;
    }
    Ok(Some(ArrivalSpec { process, cv }))
}

fn param(where_: &str, d: &YDist, name: &str) -> Result<f64, WorkloadError> {
    let v = d
        .params
        .as_ref()
        .and_then(|p| p.get(name))
        .copied()
        .ok_or_else(|| {
            spec_err(format!(
                "{where_}: {} distribution needs param `{name}`",
                d.kind
            ))
        })?;
    if !v.is_finite() {
        return Err(spec_err(format!(
            "{where_}: param `{name}` must be finite, got {v}"
        )));
    }
    Ok(v)
}

fn token_param(where_: &str, d: &YDist, name: &str) -> Result<u32, WorkloadError> {
    let v = param(where_, d, name)?.trunc();
    if v < 0.0 || v > f64::from(u32::MAX) {
        return Err(spec_err(format!(
            "{where_}: param `{name}` must be a token count ≥ 0, got {v}"
        )));
    }
    Ok(v as u32)
}

fn dist(
    where_: &str,
    d: &Option<YDist>,
    notes: &mut Vec<String>,
) -> Result<LengthDist, WorkloadError> {
    let d = d
        .as_ref()
        .ok_or_else(|| spec_err(format!("{where_} is missing")))?;
    if let Some(f) = &d.file {
        notes.push(format!(
            "{where_}: file \"{f}\" is not read (as in the reference); dropped"
        ));
    }
    let known: &[&str] = match d.kind.as_str() {
        "gaussian" => &["mean", "std_dev", "min", "max"],
        "exponential" => &["mean"],
        "pareto_lognormal" => &["alpha", "xm", "mu", "sigma", "mix_weight"],
        "constant" => &["value"],
        "empirical" => &[],
        k => {
            return Err(spec_err(format!(
                "{where_}: unknown distribution type \"{k}\" (accepted: gaussian, exponential, pareto_lognormal, constant, empirical)"
            )))
        }
    };
    if d.kind != "empirical" {
        for k in d.params.iter().flat_map(|p| p.keys()) {
            if !known.contains(&k.as_str()) {
                notes.push(format!(
                    "{where_}: param `{k}` is not used by a {} distribution; dropped",
                    d.kind
                ));
            }
        }
    }
    Ok(match d.kind.as_str() {
        "gaussian" => LengthDist::Gaussian {
            mean: param(where_, d, "mean")?,
            std_dev: param(where_, d, "std_dev")?,
            min: token_param(where_, d, "min")?,
            max: token_param(where_, d, "max")?,
        },
        "exponential" => LengthDist::Exponential {
            mean: param(where_, d, "mean")?,
        },
        "pareto_lognormal" => LengthDist::ParetoLognormal {
            alpha: param(where_, d, "alpha")?,
            xm: param(where_, d, "xm")?,
            mu: param(where_, d, "mu")?,
            sigma: param(where_, d, "sigma")?,
            mix_weight: param(where_, d, "mix_weight")?,
        },
        "constant" => {
            let v = token_param(where_, d, "value")?;
            if v == 0 {
                notes.push(format!(
                    "{where_}: constant value 0 becomes 1 (the reference floors it at 1)"
                ));
            }
            LengthDist::Constant { value: v.max(1) }
        }
        _ => {
            let params = d.params.clone().unwrap_or_default();
            let mut bins = BTreeMap::new();
            for (k, p) in params {
                let v: i64 = k.trim().parse().map_err(|_| {
                    spec_err(format!(
                        "{where_}: empirical bin \"{k}\" is not an integer token count"
                    ))
                })?;
                bins.insert(v.to_string(), p);
            }
            LengthDist::Empirical { bins }
        }
    })
}

fn windows(where_: &str, ws: &[YWindow]) -> Result<Vec<Window>, WorkloadError> {
    ws.iter()
        .map(|w| {
            if w.start_us < 0 || w.end_us <= w.start_us {
                return Err(spec_err(format!(
                    "{where_}: window [{}, {}) is invalid (need 0 ≤ start_us < end_us)",
                    w.start_us, w.end_us
                )));
            }
            Ok(Window {
                start_us: w.start_us as u64,
                end_us: w.end_us as u64,
            })
        })
        .collect()
}

fn convert_client(
    i: usize,
    c: &YClient,
    groups: &mut HashMap<String, (Option<u32>, String)>,
    notes: &mut Vec<String>,
) -> Result<ClientSpec, WorkloadError> {
    let id = match c.id.as_deref().filter(|s| !s.is_empty()) {
        Some(id) => id.to_string(),
        None => {
            let id = format!("client-{i}");
            notes.push(format!(
                "clients[{i}]: no id; named \"{id}\" (a client's id seeds its random stream)"
            ));
            id
        }
    };
    let w = format!("clients[{i}] (id \"{id}\")");
    if let Some(m) = &c.model {
        notes.push(format!(
            "{w}: model \"{m}\": blis simulates one model per run; dropped"
        ));
    }
    if let Some(s) = c.streaming {
        notes.push(format!(
            "{w}: streaming = {s} has no effect on simulation; dropped"
        ));
    }
    if c.network.is_some() {
        notes.push(format!(
            "{w}: network (RTT/bandwidth) is not simulated (nor by the reference's run); dropped"
        ));
    }
    if c.multimodal.is_some() {
        if c.input_distribution.is_none() {
            return Err(spec_err(format!(
                "{w}: multimodal input lengths are not implemented by blis and the client has no input_distribution"
            )));
        }
        notes.push(format!(
            "{w}: multimodal is not implemented by blis; dropped (input lengths come from input_distribution)"
        ));
    }
    let mut session = None;
    if let Some(r) = &c.reasoning {
        if r.reason_ratio_distribution.is_some() {
            notes.push(format!(
                "{w}: reasoning.reason_ratio_distribution has no effect on simulation; dropped"
            ));
        }
        if let Some(mt) = &r.multi_turn {
            if mt.max_rounds < 1 || mt.max_rounds > i64::from(u32::MAX) {
                return Err(spec_err(format!(
                    "{w}: reasoning.multi_turn.max_rounds must be ≥ 1, got {}",
                    mt.max_rounds
                )));
            }
            if mt.think_time_us < 0 {
                return Err(spec_err(format!(
                    "{w}: reasoning.multi_turn.think_time_us must be ≥ 0, got {}",
                    mt.think_time_us
                )));
            }
            let growth = match mt.context_growth.as_deref() {
                Some("accumulate") => ContextGrowth::Accumulate,
                None | Some("") | Some("none") => ContextGrowth::None,
                Some(g) => {
                    return Err(spec_err(format!(
                        "{w}: reasoning.multi_turn.context_growth \"{g}\" unknown (accepted: accumulate, none)"
                    )))
                }
            };
            session = Some(SessionSpec {
                max_rounds: mt.max_rounds as u32,
                think_time_us: mt.think_time_us as u64,
                context_growth: growth,
            });
            notes.push(format!(
                "{w}: multi-turn rounds arrive think_time_us after the previous round completes (the reference: after its arrival plus its output length)"
            ));
            if c.prefix_group.is_some() || c.lifecycle.is_some() {
                notes.push(format!(
                    "{w}: prefix_group and lifecycle windows apply to this multi-turn client (the reference ignores them for multi-turn clients)"
                ));
            }
        }
    }
    let win = match &c.lifecycle {
        Some(YLifecycle { windows: Some(ws) }) if !ws.is_empty() => Some(windows(&w, ws)?),
        _ => None,
    };
    let mut prefix_length = match c.prefix_length {
        None | Some(0) => None,
        Some(n) if n < 0 || n > i64::from(u32::MAX) => {
            return Err(spec_err(format!("{w}: prefix_length must be ≥ 0, got {n}")))
        }
        Some(n) => Some(n as u32),
    };
    let prefix_group = c.prefix_group.clone().filter(|g| !g.is_empty());
    match &prefix_group {
        None => {
            if let Some(n) = prefix_length.take() {
                notes.push(format!(
                    "{w}: prefix_length {n} without a prefix_group has no effect; dropped"
                ));
            }
        }
        Some(g) => match groups.get(g) {
            None => {
                groups.insert(g.clone(), (prefix_length, id.clone()));
            }
            Some((first, owner)) => {
                let len = first.unwrap_or(super::defaults::PREFIX_LENGTH);
                if prefix_length.is_some_and(|n| n != len) {
                    notes.push(format!(
                        "{w}: prefix_length {} dropped: prefix group \"{g}\" has length {len}, set by its first client \"{owner}\" (as in the reference)",
                        prefix_length.unwrap_or(0)
                    ));
                }
                prefix_length = None;
            }
        },
    }
    Ok(ClientSpec {
        id,
        rate_fraction: c.rate_fraction,
        arrival: arrival(&w, &c.arrival, notes)?,
        input: dist(
            &format!("{w}: input_distribution"),
            &c.input_distribution,
            notes,
        )?,
        output: dist(
            &format!("{w}: output_distribution"),
            &c.output_distribution,
            notes,
        )?,
        prefix_group,
        prefix_length,
        slo_class: slo(&w, &c.slo_class)?,
        tenant_id: c.tenant_id.clone().filter(|t| !t.is_empty()),
        windows: win,
        session,
    })
}

/// Expands a cohort into `population` identical clients `<id>-<j>` sharing
/// the cohort's rate fraction, with the lifecycle windows its diurnal, spike
/// and drain patterns describe (cluster spec §6.8).
fn expand_cohort(
    ci: usize,
    c: &YCohort,
    clients: &mut Vec<ClientSpec>,
    notes: &mut Vec<String>,
) -> Result<(), WorkloadError> {
    let id =
        c.id.clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("cohort-{ci}"));
    let w = format!("cohorts[{ci}] (id \"{id}\")");
    if c.population < 1 || c.population > MAX_POPULATION {
        return Err(spec_err(format!(
            "{w}: population must lie in [1, {MAX_POPULATION}], got {}",
            c.population
        )));
    }
    let fraction = c.rate_fraction.unwrap_or(1.0);
    if !(fraction.is_finite() && fraction > 0.0) {
        return Err(spec_err(format!(
            "{w}: rate_fraction must be finite and > 0, got {fraction}"
        )));
    }
    if let Some(m) = &c.model {
        notes.push(format!(
            "{w}: model \"{m}\": blis simulates one model per run; dropped"
        ));
    }
    if let Some(s) = c.streaming {
        notes.push(format!(
            "{w}: streaming = {s} has no effect on simulation; dropped"
        ));
    }
    let mut ws: Vec<Window> = Vec::new();
    if let Some(d) = &c.diurnal {
        if !(d.peak_to_trough_ratio.is_finite()
            && d.peak_to_trough_ratio >= 1.0
            && (0..=23).contains(&d.peak_hour))
        {
            return Err(spec_err(format!(
                "{w}: diurnal needs peak_to_trough_ratio ≥ 1 and peak_hour in 0..=23"
            )));
        }
        const HOUR: f64 = 3.6e9;
        let r = d.peak_to_trough_ratio;
        for h in 0..24i64 {
            let m = (1.0 + (2.0 * std::f64::consts::PI * (h - d.peak_hour) as f64 / 24.0).cos())
                / 2.0
                * (1.0 - 1.0 / r)
                + 1.0 / r;
            let dur = ((HOUR * m) as u64).clamp(1, HOUR as u64);
            let start = h as u64 * HOUR as u64;
            ws.push(Window {
                start_us: start,
                end_us: start + dur,
            });
        }
        notes.push(format!("{w}: diurnal pattern expanded into 24 one-hour activity windows (first 24 h only, as in the reference)"));
    }
    if let Some(s) = &c.spike {
        if s.start_time_us < 0 || s.duration_us <= 0 {
            return Err(spec_err(format!(
                "{w}: spike needs start_time_us ≥ 0 and duration_us > 0"
            )));
        }
        ws.push(Window {
            start_us: s.start_time_us as u64,
            end_us: (s.start_time_us + s.duration_us) as u64,
        });
    }
    if let Some(d) = &c.drain {
        if d.start_time_us < 0 || d.ramp_duration_us <= 0 {
            return Err(spec_err(format!(
                "{w}: drain needs start_time_us ≥ 0 and ramp_duration_us > 0"
            )));
        }
        let start = d.start_time_us as u64;
        if start > 0 {
            ws.push(Window {
                start_us: 0,
                end_us: start,
            });
        }
        let seg = (d.ramp_duration_us as u64 / 10).max(1);
        for i in 0..10u64 {
            let len = ((seg as f64 * ((10 - i) as f64 / 10.0)) as u64).max(1);
            let s = start + i * seg;
            ws.push(Window {
                start_us: s,
                end_us: s + len,
            });
        }
    }
    let arrival = arrival(&w, &c.arrival, notes)?;
    let input = dist(
        &format!("{w}: input_distribution"),
        &c.input_distribution,
        notes,
    )?;
    let output = dist(
        &format!("{w}: output_distribution"),
        &c.output_distribution,
        notes,
    )?;
    let slo_class = slo(&w, &c.slo_class)?;
    let n = c.population as usize;
    for j in 0..n {
        clients.push(ClientSpec {
            id: format!("{id}-{j}"),
            rate_fraction: Some(fraction / n as f64),
            arrival,
            input: input.clone(),
            output: output.clone(),
            prefix_group: c.prefix_group.clone().filter(|g| !g.is_empty()),
            prefix_length: None,
            slo_class: slo_class.clone(),
            tenant_id: c.tenant_id.clone().filter(|t| !t.is_empty()),
            windows: if ws.is_empty() {
                None
            } else {
                Some(ws.clone())
            },
            session: None,
        });
    }
    Ok(())
}

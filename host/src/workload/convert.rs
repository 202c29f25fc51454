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
    inference_perf: Option<Value>,
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
    if spec.inference_perf.is_some() && spec.clients.as_ref().is_none_or(Vec::is_empty) {
        if spec.cohorts.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(spec_err(
                "inference_perf and cohorts: blis runs one workload source at a time; convert them separately",
            ));
        }
        // The block becomes a native [workload.inference_perf] table.
        return super::convert_inference_perf(yaml_text);
    }
    let mut clients = Vec::new();
    let mut groups: HashMap<String, (Option<u32>, String)> = HashMap::new();
    for (i, c) in spec.clients.iter().flatten().enumerate() {
        clients.push(convert_client(i, c, &mut groups, &mut notes)?);
    }
    let aggregate_rate = spec.aggregate_rate.filter(|&r| r > 0.0);
    if spec.inference_perf.is_some() {
        notes.push(
            "inference_perf: ignored because the spec has clients (as in the reference)".into(),
        );
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
        adapter: None,
        adapter_mix: None,
        model: None,
        headers: Default::default(),
        multimodal: None,
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
            adapter: None,
            adapter_mix: None,
            model: None,
            headers: Default::default(),
            multimodal: None,
        });
    }
    Ok(())
}

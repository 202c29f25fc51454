//! `blis convert inference-perf FILE.yaml`: an inference-perf workload to a
//! `[workload]` table with `[workload.inference_perf]`.
//!
//! Two inputs are accepted:
//!
//! * an **inference-perf config** (`load.stages`, `data.type: shared_prefix`
//!   with `data.shared_prefix.num_groups`, `num_prompts_per_group`, …), the
//!   file inference-perf itself runs;
//! * a **reference-simulator workload spec** with an `inference_perf:` block
//!   (`stages`, `shared_prefix.num_unique_system_prompts`, …).
//!
//! The YAML is walked as a generic value, so no input can panic the
//! converter. Every key that blis does not simulate (servers, API settings,
//! reports, …) or does not know is listed in the returned notes; a value that
//! is wrong (a zero duration, a negative rate, another data type) is an error
//! naming its key path. The result is checked by parsing it back and
//! building the workload.

use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use crate::workload::{Workload, WorkloadConfig, WorkloadError};

fn err(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Spec(msg.into())
}

/// The mapping at `path`, or an error naming it.
fn mapping<'a>(v: &'a Value, path: &str) -> Result<&'a Mapping, WorkloadError> {
    v.as_mapping()
        .ok_or_else(|| err(format!("{path}: expected a mapping of keys")))
}

/// Splits `m` into the known keys' values (in `known` order) and notes for
/// every other key.
fn take<'a>(
    m: &'a Mapping,
    path: &str,
    known: &[&str],
    why_unused: &str,
    notes: &mut Vec<String>,
) -> Vec<Option<&'a Value>> {
    let mut out = vec![None; known.len()];
    for (k, v) in m {
        let name = match k {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        };
        match known.iter().position(|&n| n == name) {
            Some(i) => out[i] = Some(v),
            None => notes.push(format!("{path}{name}: {why_unused}; dropped")),
        }
    }
    out
}

/// A whole number in `[min, max]`.
fn whole(v: Option<&Value>, path: &str, min: i64, max: i64) -> Result<i64, WorkloadError> {
    let v = v.ok_or_else(|| err(format!("{path}: missing (a whole number ≥ {min})")))?;
    let n = match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                .map(|f| f as i64)
        }),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(err(format!(
            "{path}: must be a whole number in [{min}, {max}], got {}",
            show(v)
        ))),
    }
}

fn show(v: &Value) -> String {
    serde_yaml_ng::to_string(v)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("{v:?}"))
}

/// The names of the shared-prefix keys in one input format (`alias`:
/// inference-perf 0.4.0 on accepts the reference's names too and writes
/// them in its resolved config).
struct Names {
    prompts: &'static str,
    users: &'static str,
    alias: Option<(&'static str, &'static str)>,
}

/// Stages and shared prefix from their YAML values, as TOML lines.
fn convert_block(
    client_lines: &str,
    stages: Option<&Value>,
    stages_path: &str,
    shared: Option<&Value>,
    shared_path: &str,
    names: &Names,
    notes: &mut Vec<String>,
) -> Result<String, WorkloadError> {
    let stages = stages.ok_or_else(|| {
        err(format!(
            "{stages_path}: missing (a list of {{rate, duration}})"
        ))
    })?;
    let list = stages.as_sequence().ok_or_else(|| {
        err(format!(
            "{stages_path}: expected a list of {{rate, duration}}"
        ))
    })?;
    if list.is_empty() {
        return Err(err(format!("{stages_path}: needs at least one stage")));
    }
    let mut out = format!("\n[workload.inference_perf]\n{client_lines}stages = [");
    for (i, st) in list.iter().enumerate() {
        let p = format!("{stages_path}[{i}]");
        let m = mapping(st, &p)?;
        let f = take(
            m,
            &format!("{p}."),
            &["rate", "duration"],
            "not a stage setting blis simulates",
            notes,
        );
        let rate = f[0]
            .and_then(Value::as_f64)
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| {
                err(format!(
                    "{p}.rate: must be a finite number of requests per second > 0, got {}",
                    f[0].map_or("nothing".into(), show)
                ))
            })?;
        let duration = whole(f[1], &format!("{p}.duration (s)"), 1, 1 << 42)?;
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}{{ rate = {rate:?}, duration = {duration} }}");
    }
    out.push_str("]\n\n[workload.inference_perf.shared_prefix]\n");
    let shared = shared.ok_or_else(|| err(format!("{shared_path}: missing")))?;
    let m = mapping(shared, shared_path)?;
    let (ap, au) = names.alias.unwrap_or(("", ""));
    let keys = [
        names.prompts,
        names.users,
        "system_prompt_len",
        "question_len",
        "output_len",
        "enable_multi_turn_chat",
        ap,
        au,
    ];
    let mut f = take(
        m,
        &format!("{shared_path}."),
        &keys[..if names.alias.is_some() { 8 } else { 6 }],
        "not a shared-prefix setting blis simulates",
        notes,
    );
    f.resize(8, None);
    f[0] = f[0].or(f[6]);
    f[1] = f[1].or(f[7]);
    let u32_max = i64::from(u32::MAX);
    let prompts = whole(
        f[0],
        &format!("{shared_path}.{}", names.prompts),
        1,
        u32_max,
    )?;
    let users = whole(f[1], &format!("{shared_path}.{}", names.users), 1, u32_max)?;
    let _ = writeln!(out, "num_unique_system_prompts = {prompts}");
    let _ = writeln!(out, "num_users_per_system_prompt = {users}");
    for (i, key) in keys.iter().enumerate().skip(2).take(3) {
        // Absent lengths are 0, as in both tools.
        let n = match f[i] {
            None => 0,
            v => whole(v, &format!("{shared_path}.{key}"), 0, u32_max)?,
        };
        let _ = writeln!(out, "{key} = {n}");
    }
    let chat = match f[5] {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(err(format!(
                "{shared_path}.enable_multi_turn_chat: expected true or false, got {}",
                show(v)
            )))
        }
    };
    let _ = writeln!(out, "enable_multi_turn_chat = {chat}");
    Ok(out)
}

/// The `load` keys blis reads, in the order [`client_lines`] expects.
const LOAD_KEYS: [&str; 11] = [
    "type",
    "stages",
    "interval",
    "num_workers",
    "worker_max_concurrency",
    "request_timeout",
    "circuit_breakers",
    "worker_max_tcp_connections",
    "sweep",
    "request_retries",
    "request_retry_backoff_sec",
];

/// The release whose config this is, from the keys a resolved config
/// (`results/config.yaml`) carries, and a note saying how it was told.
fn detect_release(load: &[Option<&Value>], shared: Option<&Value>) -> (&'static str, String) {
    let has = |k: &str| {
        shared
            .and_then(Value::as_mapping)
            .is_some_and(|m| m.contains_key(k))
    };
    let chat = has("enable_multi_turn_chat");
    let new_names = has("num_unique_system_prompts");
    let retries = load[9].is_some();
    let breakers = load[6].is_some() || load[5].is_some();
    let resolved = load[3].is_some() && load[4].is_some();
    if chat || new_names {
        let v = if retries {
            "0.7.0"
        } else if new_names {
            "0.4.0"
        } else {
            "0.3.0"
        };
        return (
            v,
            format!("client: inference-perf {v}, from the keys the config carries"),
        );
    }
    if breakers {
        return ("0.2.0", "client: inference-perf 0.2.0 — the config has load.circuit_breakers / request_timeout but no data.shared_prefix.enable_multi_turn_chat, the keys of a build between 0.2.0 and 0.3.0, whose dispatch and metrics are 0.2.0's".into());
    }
    if resolved {
        return ("0.2.0", "client: inference-perf 0.2.0, from the keys the config carries (no multi-turn chat, no circuit breakers)".into());
    }
    (
        super::client::NEWEST,
        format!("client: inference-perf {} (the newest release blis models): the config does not say which release ran it; edit `client` if another did", super::client::NEWEST),
    )
}

/// The `client` line and the client's load settings.
fn client_lines(
    load: &[Option<&Value>],
    shared: Option<&Value>,
    notes: &mut Vec<String>,
) -> Result<String, WorkloadError> {
    let (version, how) = detect_release(load, shared);
    notes.push(how);
    let mut out = format!("client = \"inference-perf {version}\"\n");
    if let Some(v) = load[2].filter(|v| !v.is_null()) {
        let x = v
            .as_f64()
            .filter(|x| x.is_finite() && (0.0..=1e9).contains(x))
            .ok_or_else(|| {
                err(format!(
                    "load.interval: must be seconds ≥ 0, got {}",
                    show(v)
                ))
            })?;
        let _ = writeln!(out, "interval = {x:?}");
    }
    for (i, key) in [(3, "num_workers"), (4, "worker_max_concurrency")] {
        if let Some(v) = load[i].filter(|v| !v.is_null()) {
            let n = whole(Some(v), &format!("load.{key}"), 1, i64::from(u32::MAX))?;
            let _ = writeln!(out, "{key} = {n}");
        }
    }
    match load[5] {
        None | Some(Value::Null) => notes.push(
            "load.request_timeout: none, so aiohttp's default total timeout of 300 s applies (requests still running then fail)".into(),
        ),
        Some(v) => {
            let x = v
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0 && *x <= 1e9)
                .ok_or_else(|| {
                    err(format!("load.request_timeout: must be seconds > 0, got {}", show(v)))
                })?;
            let _ = writeln!(out, "request_timeout = {x:?}");
        }
    }
    if load[6]
        .and_then(Value::as_sequence)
        .is_some_and(|s| !s.is_empty())
    {
        notes.push(
            "load.circuit_breakers: not simulated (the run ends no stage early); dropped".into(),
        );
    }
    if load[7].is_some() {
        notes.push("load.worker_max_tcp_connections: not simulated (connections are not a limit in blis); dropped".into());
    }
    if load[8].is_some_and(|v| !v.is_null()) {
        notes.push("load.sweep: not simulated (blis runs the listed stages); dropped".into());
    }
    if load[9].and_then(Value::as_i64).is_some_and(|n| n > 0) {
        notes.push("load.request_retries: retries are not simulated (a failed request stays failed); dropped".into());
    }
    Ok(out)
}

/// Converts an inference-perf config or a reference spec with an
/// `inference_perf:` block. Returns the TOML text and the notes (what was
/// dropped or changed, one line each).
pub fn convert_inference_perf(yaml_text: &str) -> Result<(String, Vec<String>), WorkloadError> {
    let doc: Value = serde_yaml_ng::from_str(yaml_text).map_err(|e| err(e.to_string()))?;
    convert_document(&doc)
}

/// [`convert_inference_perf`] of a parsed document.
fn convert_document(doc: &Value) -> Result<(String, Vec<String>), WorkloadError> {
    let top = mapping(doc, "the file")?;
    let mut notes = Vec::new();
    let has = |k: &str| top.contains_key(k);
    let mut head = String::from("[workload]\n");
    let body = if has("inference_perf") {
        let f = take(
            top,
            "",
            &[
                "inference_perf",
                "version",
                "seed",
                "num_requests",
                "horizon",
                "aggregate_rate",
                "category",
            ],
            "not part of an inference-perf workload",
            &mut notes,
        );
        if let Some(v) = f[2] {
            notes.push(format!(
                "seed: {} is a run-level setting: set `seed` in the run file or pass --seed",
                show(v)
            ));
        }
        if let Some(v) = f[3] {
            let n = whole(Some(v), "num_requests", 0, i64::MAX)?;
            if n > 0 {
                let _ = writeln!(head, "num_requests = {n}");
            }
        }
        if let Some(v) = f[4] {
            notes.push(format!(
                "horizon: {} µs is a run-level setting: set `horizon_us` in the run file or pass --horizon",
                show(v)
            ));
        }
        if f[5].is_some() {
            notes.push("aggregate_rate: the stages' rates give the load; dropped".into());
        }
        if f[6].is_some() {
            notes.push("category: a label with no effect on simulation; dropped".into());
        }
        let block = mapping(f[0].expect("present"), "inference_perf")?;
        let b = take(
            block,
            "inference_perf.",
            &["stages", "shared_prefix"],
            "unknown key",
            &mut notes,
        );
        convert_block(
            "client = \"reference\"\n",
            b[0],
            "inference_perf.stages",
            b[1],
            "inference_perf.shared_prefix",
            &Names {
                prompts: "num_unique_system_prompts",
                users: "num_users_per_system_prompt",
                alias: None,
            },
            &mut notes,
        )?
    } else if has("load") || has("data") {
        let f = take(
            top,
            "",
            &["load", "data"],
            "not simulated by blis",
            &mut notes,
        );
        let load = mapping(
            f[0].ok_or_else(|| err("load: missing (load.stages gives the rates)"))?,
            "load",
        )?;
        let l = take(
            load,
            "load.",
            &LOAD_KEYS,
            "not simulated by blis",
            &mut notes,
        );
        match l[0].and_then(Value::as_str) {
            None | Some("constant") => {}
            Some("poisson") => notes.push(
                "load.type: poisson is simulated with the constant timer (the same rate; the client's per-second Poisson counts are not drawn)".into(),
            ),
            Some(t) => {
                return Err(err(format!(
                    "load.type: \"{t}\" is not supported (blis converts constant or poisson load stages)"
                )))
            }
        }
        let data = mapping(
            f[1].ok_or_else(|| err("data: missing (data.type: shared_prefix)"))?,
            "data",
        )?;
        let d = take(
            data,
            "data.",
            &["type", "shared_prefix"],
            "not simulated by blis",
            &mut notes,
        );
        match d[0].and_then(Value::as_str) {
            Some("shared_prefix") => {}
            other => {
                return Err(err(format!(
                    "data.type: {} is not supported; blis converts data.type: shared_prefix",
                    other.map_or("missing".to_string(), |t| format!("\"{t}\""))
                )))
            }
        }
        let client_lines = client_lines(&l, d[1], &mut notes)?;
        convert_block(
            &client_lines,
            l[1],
            "load.stages",
            d[1],
            "data.shared_prefix",
            &Names {
                prompts: "num_groups",
                users: "num_prompts_per_group",
                alias: Some(("num_unique_system_prompts", "num_users_per_system_prompt")),
            },
            &mut notes,
        )?
    } else {
        return Err(err(
            "neither an inference-perf config (load, data) nor a workload spec with an inference_perf block",
        ));
    };
    let toml_text = head + &body;
    // Check the result: it parses as a [workload] table and builds.
    #[derive(Deserialize)]
    struct File {
        workload: WorkloadConfig,
    }
    let cfg = toml::from_str::<File>(&toml_text)
        .map_err(|e| err(format!("converted table is invalid: {e}")))?;
    Workload::new(&cfg.workload, 0, Path::new("."))
        .map_err(|e| err(format!("converted workload is invalid: {e}")))?;
    Ok((toml_text, notes))
}

/// `blis convert inference-perf RESULTS_DIR`: the folder of one
/// inference-perf run — `results/config.yaml` (what the client resolved and
/// ran), optional `profile.yaml` (what was asked) and `exp-config.yaml` (the
/// vLLM settings: `model`, `tensor_parallelism`, `max_num_seqs`,
/// `max_num_batched_tokens`) — to a whole run file reproducing what ran,
/// with a note for every place where the resolved config differs from the
/// profile.
pub fn convert_inference_perf_dir(dir: &Path) -> Result<(String, Vec<String>), WorkloadError> {
    let read = |rel: &str| -> Result<Option<String>, WorkloadError> {
        let p = dir.join(rel);
        match crate::input::read_to_string(&p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(err(format!("cannot read {}: {e}", p.display()))),
        }
    };
    let resolved = read("results/config.yaml")?.ok_or_else(|| {
        err(format!(
            "{}: no results/config.yaml — give the folder of an inference-perf run (its results/config.yaml is the config the client resolved), or the YAML file itself",
            dir.display()
        ))
    })?;
    let resolved: Value =
        serde_yaml_ng::from_str(&resolved).map_err(|e| err(format!("results/config.yaml: {e}")))?;
    let (workload, mut notes) =
        convert_document(&resolved).map_err(|e| err(format!("results/config.yaml: {e}")))?;
    if let Some(profile) = read("profile.yaml")? {
        diff_profile(&profile, &resolved, &mut notes)?;
    }
    let mut head = format!(
        "# The inference-perf run in {}, as its client ran it (results/config.yaml).\n",
        dir.display()
    );
    if let Some(exp) = read("exp-config.yaml")? {
        head.push_str(&deployment(&exp, &mut notes)?);
    }
    Ok((head + "\n" + &workload, notes))
}

/// Notes for every key of the profile the client ran otherwise (a value
/// changed, or a key it did not know and dropped).
fn diff_profile(
    profile: &str,
    resolved: &Value,
    notes: &mut Vec<String>,
) -> Result<(), WorkloadError> {
    let p: Value =
        serde_yaml_ng::from_str(profile).map_err(|e| err(format!("profile.yaml: {e}")))?;
    let mut asked = Vec::new();
    flatten(&p, String::new(), &mut asked);
    for (key, v) in asked {
        match lookup(resolved, &key) {
            None => notes.push(format!(
                "profile.yaml asked {key} = {}; the client's resolved config has no such key: it did not know it and ran without it",
                show(v)
            )),
            Some(got) if !same(v, got) => notes.push(format!(
                "profile.yaml asked {key} = {}; the client ran {}",
                show(v),
                show(got)
            )),
            Some(_) => {}
        }
    }
    Ok(())
}

fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Leaf key paths (`load.stages[0].rate`) and values of a document.
fn flatten<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                let name = k.as_str().map_or_else(|| show(k), str::to_string);
                let p = if path.is_empty() {
                    name
                } else {
                    format!("{path}.{name}")
                };
                flatten(v, p, out);
            }
        }
        Value::Sequence(s) => {
            for (i, v) in s.iter().enumerate() {
                flatten(v, format!("{path}[{i}]"), out);
            }
        }
        leaf => out.push((path, leaf)),
    }
}

/// The value at a key path written by [`flatten`].
fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for part in path.split('.') {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        cur = cur.as_mapping()?.get(name)?;
        for ix in indexes.split('[').skip(1) {
            let i: usize = ix.trim_end_matches(']').parse().ok()?;
            cur = cur.as_sequence()?.get(i)?;
        }
    }
    Some(cur)
}

/// `[model]` and `[instance]` from `exp-config.yaml`.
fn deployment(exp: &str, notes: &mut Vec<String>) -> Result<String, WorkloadError> {
    let v: Value =
        serde_yaml_ng::from_str(exp).map_err(|e| err(format!("exp-config.yaml: {e}")))?;
    let m = mapping(&v, "exp-config.yaml")?;
    let get = |k: &str| m.get(k);
    let mut out = String::from("[model]\n");
    let hf = get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| err("exp-config.yaml: model: missing (the model's HuggingFace id)"))?;
    if crate::instance::latency::bundled_model_id(hf).is_none() {
        notes.push(format!(
            "exp-config.yaml model {hf}: blis bundles no config.json for it; give one with [model] config"
        ));
    }
    let _ = writeln!(out, "name = \"{hf}\"");
    out.push_str("hardware = \"H100\"\n");
    notes.push(
        "exp-config.yaml names no GPU: hardware = \"H100\" assumed; change it if another ran"
            .into(),
    );
    let tp = whole(
        get("tensor_parallelism"),
        "exp-config.yaml tensor_parallelism",
        1,
        64,
    )
    .unwrap_or(1);
    let _ = writeln!(out, "tp = {tp}");
    out.push_str("latency_model = \"trained-physics\"\n\n[instance]\ncount = 1\n");
    for key in ["max_num_seqs", "max_num_batched_tokens"] {
        if let Some(v) = get(key) {
            let n = whole(
                Some(v),
                &format!("exp-config.yaml {key}"),
                1,
                i64::from(u32::MAX),
            )?;
            let _ = writeln!(out, "{key} = {n}");
        }
    }
    for (k, _) in m {
        let k = k.as_str().unwrap_or("?");
        if ![
            "model",
            "tensor_parallelism",
            "max_num_seqs",
            "max_num_batched_tokens",
            "app",
        ]
        .contains(&k)
        {
            notes.push(format!("exp-config.yaml {k}: not simulated; dropped"));
        }
    }
    Ok(out)
}

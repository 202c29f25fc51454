//! Validate a run file and assemble the cluster it describes.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::cluster::{ClusterSetup, Routing, TraceWriter};
use crate::engine::{Tick, NEVER};
use crate::instance::latency::{build_latency, LatencyKind, LatencySetup, ModelConfig};
use crate::instance::{Instance, InstanceConfig, PreemptionKind, SchedulerKind};
use crate::metrics::fitness::KEYS as FITNESS_KEYS;
use crate::metrics::{Collector, ResultsWriter};
use crate::plugins::Registry;
use crate::request::mix64;
use crate::workload::Workload;

use super::RunFile;

/// Largest cluster a run may describe (each instance costs memory up front).
pub const MAX_INSTANCES: u32 = 65_536;

/// A run ready to start, and what to tell the user about it.
pub struct BuiltRun {
    pub setup: ClusterSetup,
    pub fitness_weights: Option<BTreeMap<String, f64>>,
    /// Notes for stderr (defaults chosen, caveats).
    pub notes: Vec<String>,
}

/// Seed of a named random stream derived from the run seed.
pub fn derive_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(seed ^ h)
}

fn params_text(t: &toml::Table) -> String {
    if t.is_empty() {
        String::new()
    } else {
        toml::to_string(t).unwrap_or_default()
    }
}

fn one_of(key: &str, value: &str, accepted: &[&str]) -> String {
    format!(
        "{key} = \"{value}\" is not valid; accepted values: {}",
        accepted.join(", ")
    )
}

/// Resolve a path from the run file against its folder.
pub fn resolve(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// Validate `run` and assemble everything. Plugin libraries are loaded
/// into `registry` (relative paths against `base_dir`). With
/// `open_outputs = false` (used by `blis validate`), no file is created.
pub fn build(
    run: &RunFile,
    base_dir: &Path,
    registry: &mut Registry,
    open_outputs: bool,
) -> Result<BuiltRun, String> {
    let mut errors: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let inst = &run.instance;

    // ---- static checks ----
    if inst.count == 0 {
        errors.push("instance.count = 0: a cluster needs at least one instance".into());
    } else if inst.count > MAX_INSTANCES {
        errors.push(format!(
            "instance.count = {}: at most {MAX_INSTANCES} instances are supported",
            inst.count
        ));
    }
    for (k, v) in [
        ("instance.max_num_seqs", inst.max_num_seqs),
        (
            "instance.max_num_batched_tokens",
            inst.max_num_batched_tokens,
        ),
        ("instance.block_size", inst.block_size),
    ] {
        if v == 0 {
            errors.push(format!("{k} = 0: must be at least 1"));
        }
    }
    if inst.total_kv_blocks == Some(0) {
        errors.push(
            "instance.total_kv_blocks = 0: must be at least 1 (or absent to derive it)".into(),
        );
    }
    if inst.max_model_len == Some(0) {
        errors.push("instance.max_model_len = 0: must be at least 1 (or absent)".into());
    }
    let scheduler = match inst.scheduler.as_str() {
        "fcfs" => Some(SchedulerKind::Fcfs),
        "priority-fcfs" => Some(SchedulerKind::PriorityFcfs),
        "sjf" => Some(SchedulerKind::Sjf),
        "reverse-priority" => Some(SchedulerKind::ReversePriority),
        s => {
            errors.push(one_of(
                "instance.scheduler",
                s,
                &["fcfs", "priority-fcfs", "sjf", "reverse-priority"],
            ));
            None
        }
    };
    let preemption = match inst.preemption.as_str() {
        "fcfs" => Some(PreemptionKind::Fcfs),
        "priority" => Some(PreemptionKind::Priority),
        s => {
            errors.push(one_of("instance.preemption", s, &["fcfs", "priority"]));
            None
        }
    };
    if let Some(h) = run.horizon_us {
        if h < 0 {
            errors.push(format!("horizon_us = {h}: must be ≥ 0"));
        }
    }
    for (k, v) in [
        ("admission.latency_us", run.admission.latency_us),
        ("routing.latency_us", run.routing.latency_us),
        (
            "routing.snapshot_refresh_interval_us",
            run.routing.snapshot_refresh_interval_us,
        ),
    ] {
        if v < 0 {
            errors.push(format!("{k} = {v}: must be ≥ 0"));
        }
    }
    let weighted = run.routing.policy == "weighted";
    if !weighted && !run.routing.scorers.is_empty() {
        errors.push(format!(
            "routing.scorers is given but routing.policy = \"{}\"; scorers are used only by policy = \"weighted\"",
            run.routing.policy
        ));
    }
    if weighted && !run.routing.params.is_empty() {
        errors.push("routing.params is given but routing.policy = \"weighted\"; give each scorer its own params in [[routing.scorers]]".into());
    }
    let scorers: Vec<(String, f64, toml::Table)> = if weighted && run.routing.scorers.is_empty() {
        vec![
            ("prefix-affinity".into(), 3.0, toml::Table::new()),
            ("queue-depth".into(), 2.0, toml::Table::new()),
            ("kv-utilization".into(), 2.0, toml::Table::new()),
        ]
    } else {
        run.routing
            .scorers
            .iter()
            .map(|s| (s.name.clone(), s.weight, s.params.clone()))
            .collect()
    };
    if weighted {
        for (name, w, _) in &scorers {
            if !(w.is_finite() && *w >= 0.0) {
                errors.push(format!(
                    "routing.scorers: weight {w} of '{name}' must be a finite number ≥ 0"
                ));
            }
        }
        if scorers.iter().all(|(_, w, _)| *w == 0.0) {
            errors.push(
                "routing.scorers: all weights are zero; give at least one scorer a positive weight"
                    .into(),
            );
        }
    }
    let trace_level = match (run.output.trace_level.as_deref(), &run.output.trace_path) {
        (None, Some(_)) | (Some("decisions"), Some(_)) => true,
        (None | Some("none"), None) => false,
        (Some("none"), Some(_)) => {
            errors.push(
                "output.trace_path is set but output.trace_level = \"none\"; remove one of them"
                    .into(),
            );
            false
        }
        (Some("decisions"), None) => {
            errors.push("output.trace_level = \"decisions\" needs output.trace_path (where to write the trace)".into());
            false
        }
        (Some(s), _) => {
            errors.push(one_of("output.trace_level", s, &["none", "decisions"]));
            false
        }
    };
    for (k, w) in &run.output.fitness_weights {
        if !FITNESS_KEYS.contains(&k.as_str()) {
            errors.push(format!(
                "output.fitness_weights: unknown metric '{k}'; accepted: {}",
                FITNESS_KEYS.join(", ")
            ));
        }
        if !(w.is_finite() && *w >= 0.0) {
            errors.push(format!(
                "output.fitness_weights.{k} = {w}: must be a finite number ≥ 0"
            ));
        }
    }

    // ---- latency model and KV capacity ----
    let kind = match run.model.latency_model.parse::<LatencyKind>() {
        Ok(k) => Some(k),
        Err(_) => {
            errors.push(one_of(
                "model.latency_model",
                &run.model.latency_model,
                LatencyKind::NAMES,
            ));
            None
        }
    };
    let mut latency = None;
    if let Some(kind) = kind {
        let mut ls = LatencySetup::new(kind, &run.model.name);
        ls.model_config = run.model.config_path.as_ref().map(|p| resolve(base_dir, p));
        ls.hardware = run.model.hardware.clone();
        if ls.hardware.is_none() {
            ls.hardware = Some("H100".to_string());
        }
        ls.hardware_config = run
            .model
            .hardware_config
            .as_ref()
            .map(|p| resolve(base_dir, p));
        ls.tp = run.model.tp;
        ls.alpha = run.model.alpha;
        ls.beta = run.model.beta.clone();
        ls.dp = run.model.dp;
        ls.moe_comm_backend = run.model.moe_comm_backend.clone();
        ls.block_size = inst.block_size.max(1);
        ls.total_kv_blocks = inst.total_kv_blocks.filter(|&b| b > 0);
        if let Some(u) = run.model.gpu_memory_utilization {
            if !(u.is_finite() && u > 0.0 && u <= 1.0) {
                errors.push(format!(
                    "model.gpu_memory_utilization = {u}: must be in (0, 1]"
                ));
            }
            ls.gpu_memory_utilization = u;
        }
        match build_latency(&ls) {
            Ok(b) => {
                notes.extend(b.warnings.iter().cloned());
                latency = Some(b);
            }
            Err(e) => errors.push(format!("[model]: {e}")),
        }
    }
    let max_model_len = inst.max_model_len.or_else(|| {
        let cfg = match &run.model.config_path {
            Some(p) => ModelConfig::from_path(&resolve(base_dir, p)).ok(),
            None => ModelConfig::bundled(&run.model.name).ok(),
        };
        cfg.and_then(|c| c.max_position_embeddings)
    });

    // ---- workload ----
    let workload = match Workload::new(&run.workload, run.seed, base_dir) {
        Ok(w) => Some(w),
        Err(e) => {
            errors.push(format!("[workload]: {e}"));
            None
        }
    };
    if let Some(w) = &workload {
        if w.planned_requests().is_none() && run.horizon_us.is_none() {
            errors
                .push("the workload is unbounded: set workload.num_requests or horizon_us".into());
        }
    }

    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    let (latency, workload) = (latency.expect("checked"), workload.expect("checked"));

    // ---- plugins and policies ----
    for p in &run.plugins {
        let path = resolve(base_dir, &p.path);
        registry.load(&path).map_err(|e| e.to_string())?;
    }
    let admission = registry
        .admission(
            &run.admission.policy,
            &params_text(&run.admission.params),
            derive_seed(run.seed, "admission"),
        )
        .map_err(|e| e.to_string())?;
    let routing = if weighted {
        let mut v = Vec::new();
        for (i, (name, w, params)) in scorers.iter().enumerate() {
            let s = registry
                .scorer(
                    name,
                    &params_text(params),
                    derive_seed(run.seed, &format!("scorer/{i}/{name}")),
                )
                .map_err(|e| e.to_string())?;
            v.push((s, *w));
        }
        Routing::weighted(v)
    } else {
        Routing::Single(
            registry
                .router(
                    &run.routing.policy,
                    &params_text(&run.routing.params),
                    derive_seed(run.seed, "routing"),
                )
                .map_err(|e| e.to_string())?,
        )
    };

    // ---- instances ----
    let config = InstanceConfig {
        max_num_seqs: inst.max_num_seqs,
        max_num_batched_tokens: inst.max_num_batched_tokens,
        long_prefill_token_threshold: inst.long_prefill_token_threshold,
        block_size: inst.block_size,
        total_kv_blocks: latency.total_kv_blocks,
        max_model_len,
        scheduler: scheduler.expect("checked"),
        preemption: preemption.expect("checked"),
    };
    config.validate().map_err(|e| format!("[instance]: {e}"))?;
    let instances: Vec<Instance> = (0..inst.count)
        .map(|i| Instance::new(i, config.clone(), latency.model.clone()))
        .collect();
    notes.push(format!(
        "{} instance(s), {} latency model, {} KV blocks each ({:?}), {} routing, {} admission",
        inst.count,
        latency.model.name(),
        latency.total_kv_blocks,
        latency.kv_blocks_source,
        routing.describe(),
        run.admission.policy
    ));

    // ---- outputs ----
    let mut collector = Collector::new(
        inst.count as usize,
        workload.tenant_names().to_vec(),
        workload.client_names().to_vec(),
    );
    let mut trace = None;
    if open_outputs {
        if let Some(p) = &run.output.results_path {
            let p = resolve(base_dir, p);
            let f = File::create(&p)
                .map_err(|e| format!("cannot create results file {}: {e}", p.display()))?;
            collector.results = Some(ResultsWriter::new(Box::new(BufWriter::new(f))));
        }
        if trace_level {
            let p = resolve(base_dir, run.output.trace_path.as_ref().expect("checked"));
            let f = File::create(&p)
                .map_err(|e| format!("cannot create trace file {}: {e}", p.display()))?;
            trace = Some(TraceWriter::new(
                Box::new(BufWriter::new(f)),
                run.output.counterfactual_k.unwrap_or(3) as usize,
            ));
        }
    }

    let horizon: Tick = run.horizon_us.unwrap_or(NEVER);
    Ok(BuiltRun {
        setup: ClusterSetup {
            instances,
            workload,
            admission,
            routing,
            admission_latency: run.admission.latency_us,
            routing_latency: run.routing.latency_us,
            snapshot_refresh_interval: run.routing.snapshot_refresh_interval_us,
            horizon,
            block_size: inst.block_size,
            collector,
            trace,
        },
        fitness_weights: (!run.output.fitness_weights.is_empty())
            .then(|| run.output.fitness_weights.clone()),
        notes,
    })
}

//! Validate a run file and assemble the cluster it describes.
//!
//! One builder per run-file section, each in its own module: `instance`,
//! `kv_offload` (`[instance.kv_offload]`), `model` (latency model and KV
//! capacity), `workload`, `policies` (`[admission]`, `[routing]`,
//! `[[plugins]]`; `routing_profiles` for `[[routing.profiles]]`),
//! `instance_policies` (scheduler and preemption plugins of `[instance]`),
//! `pools` (`[[pools]]` and `[pd]`: prefill/decode disaggregation;
//! `pd_decider` for `pd.decider`, standard or plugin),
//! `control` (`[[node_pools]]`, `[lifecycle]`, `[autoscaler]`), `output`,
//! `slo` (`[slo]`), `flow_control` (`[flow_control]`), `saturation`
//! (`[saturation]`), `tenants` (`[tenants]`), `lora` (`[lora]`) and
//! `models` (the served models against the models requests name).
//! Assembly runs in
//! two phases so that a user sees every mistake at once:
//!
//! 1. **check** — every section validates its keys and derives what it can
//!    without side effects, pushing errors into one [`Problems`] list;
//! 2. **create** — only when nothing failed: plugins are loaded, policies
//!    created, instances built and output files opened.
//!
//! A new run-file section is a new module with its own `check`/`create`
//! pair and one line here, never more code in [`build`].

mod control;
mod flow_control;
mod freshness;
mod instance;
mod instance_policies;
mod kv_offload;
mod lora;
mod model;
mod models;
mod output;
mod pd_decider;
mod policies;
mod pools;
mod routing_profiles;
mod saturation;
mod slo;
mod tenants;
mod timeseries;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cluster::{ClusterSetup, InstanceLabels};
use crate::engine::{Tick, NEVER};
use crate::output::PendingOutput;
use crate::plugins::Registry;
use crate::request::mix64;

use super::RunFile;

pub use instance::MAX_INSTANCES;

/// A run ready to start, and what to tell the user about it.
pub struct BuiltRun {
    pub setup: ClusterSetup,
    pub fitness_weights: Option<BTreeMap<String, f64>>,
    /// Notes for stderr (defaults chosen, caveats).
    pub notes: Vec<String>,
    /// Warnings for stderr: valid, but surely not meant ([`super::warnings`]).
    pub warnings: Vec<String>,
    /// Output files written to temporary files: commit them when the run
    /// succeeded ([`PendingOutput::commit`]); dropped, they are removed.
    pub outputs: Vec<PendingOutput>,
    /// `model.calibration`: the profile applied (as written) and its SHA-256.
    pub calibration: Option<(String, String)>,
}

/// Errors and notes collected while checking the sections.
#[derive(Default)]
pub(crate) struct Problems {
    /// One line each; all of them are reported together.
    pub errors: Vec<String>,
    /// Notes for stderr (defaults chosen, caveats).
    pub notes: Vec<String>,
}

impl Problems {
    /// Record an error.
    pub fn error(&mut self, message: impl Into<String>) {
        self.errors.push(message.into());
    }

    /// Record a note for stderr.
    pub fn note(&mut self, message: impl Into<String>) {
        self.notes.push(message.into());
    }
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

/// `key = "value" is not valid; accepted values: …`
pub(crate) fn one_of(key: &str, value: &str, accepted: &[&str]) -> String {
    format!(
        "{key} = \"{value}\" is not valid; accepted values: {}",
        accepted.join(", ")
    )
}

/// The time series' interval without `output.timeseries_interval_us`.
pub const TIMESERIES_DEFAULT_INTERVAL_US: Tick = timeseries::DEFAULT_INTERVAL_US;

/// Run-file keys that hold paths of files a run reads, resolved against the
/// run file's folder: a sweep's fingerprint hashes them, a search makes
/// them absolute in the run files it writes.
pub const PATH_KEYS: [&str; 9] = [
    "workload.trace",
    "workload.trace_v2.header",
    "workload.trace_v2.data",
    "model.config_path",
    "model.hardware_config",
    "model.calibration",
    "routing.epp_config",
    "instance.kv_offload.trace",
    "serve.tokenizer",
];

/// The string at a dotted key of a table.
pub fn get_str(table: &toml::Table, key: &str) -> Option<String> {
    let mut cur: &toml::Value = table.get(key.split('.').next()?)?;
    for part in key.split('.').skip(1) {
        cur = cur.get(part)?;
    }
    cur.as_str().map(str::to_string)
}

/// Resolve a path from the run file against its folder.
pub fn resolve(base_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// The top-level keys (`horizon_us`).
fn check_top_level(run: &RunFile, problems: &mut Problems) -> Tick {
    match run.horizon_us {
        Some(h) if h < 0 => {
            problems.error(format!("horizon_us = {h}: must be ≥ 0"));
            NEVER
        }
        Some(h) => h,
        None => NEVER,
    }
}

/// The start-up note naming every policy of the run's pipeline, in the
/// order a request meets them (plugins as `library::name`).
fn pipeline_note(
    run: &RunFile,
    admission: &crate::cluster::Admission,
    routing: &crate::cluster::Routing,
    observers: &[crate::plugins::ObserverPolicy],
) -> String {
    let mut parts = vec![
        format!("admission {}", admission.describe()),
        format!("routing: {}", routing.describe()),
        format!(
            "instance scheduler {}, preemption {}",
            run.instance.scheduler, run.instance.preemption
        ),
    ];
    if let Some(pd) = &run.pd {
        parts.push(format!("P/D decider {}", pd.decider));
    }
    if let Some(a) = &run.autoscaler {
        parts.push(format!("autoscaler {}", a.policy));
    }
    if !observers.is_empty() {
        let names: Vec<String> = observers
            .iter()
            .map(|o| format!("{}::{}", o.label().library, o.label().name))
            .collect();
        parts.push(format!("observers {}", names.join(", ")));
    }
    format!("pipeline: {}", parts.join("; "))
}

/// The note of a run file with `[[serve.faults]]`: only `blis serve`
/// injects them (it leaves this note out).
pub const SERVE_FAULTS_NOTE: &str =
    "[[serve.faults]] are injected by blis serve only; this run has none of them";

/// Validate `run` and assemble everything. Plugin libraries are loaded
/// into `registry` (relative paths against `base_dir`). With
/// `open_outputs = false` (used by `blis validate`), no file is created.
pub fn build(
    run: &RunFile,
    base_dir: &Path,
    registry: &mut Registry,
    open_outputs: bool,
) -> Result<BuiltRun, String> {
    // An llm-d EndpointPickerConfig becomes the run's own sections first.
    let expanded = super::epp_config::expand(run, base_dir)?;
    let (run, epp_notes) = match &expanded {
        Some((r, n)) => (r, n.clone()),
        None => (run, Vec::new()),
    };
    // ---- phase 1: check every section ----
    let mut problems = Problems {
        notes: epp_notes,
        ..Problems::default()
    };
    let instance = instance::check(&run.instance, &mut problems);
    let kv_offload = kv_offload::check(&run.instance, &mut problems);
    let horizon = check_top_level(run, &mut problems);
    let policies = policies::check(run, &mut problems);
    let output = output::check(&run.output, &mut problems);
    problems
        .errors
        .extend(super::outputs::check(run, base_dir, None));
    let timeseries = timeseries::check(&run.output, &mut problems);
    let freshness = freshness::check(&run.routing, &mut problems);
    let model = model::check(run, base_dir, &mut problems);
    let workload = workload::check(run, base_dir, &mut problems);
    let lora = lora::check(run, workload.as_ref(), &mut problems);
    models::check(run, workload.as_ref(), &mut problems);
    let slo = slo::check(run.slo.as_ref(), &mut problems);
    let flow_control = flow_control::check(
        run.flow_control.as_ref(),
        !run.pools.is_empty(),
        &mut problems,
    );
    let saturation = saturation::check(run.saturation.as_ref(), &mut problems);
    tenants::check(run.tenants.as_ref(), &mut problems);
    let control = control::check(run, model.as_ref(), &mut problems);
    let pools = pools::check(run, base_dir, &mut problems);
    if !problems.errors.is_empty() {
        return Err(problems.errors.join("\n"));
    }
    let (Some(instance), Some(model), Some(workload), Some(output)) =
        (instance, model, workload, output)
    else {
        unreachable!("a section without a result reported an error");
    };
    let mut notes = problems.notes;
    let n_instances = pools
        .as_ref()
        .map_or(run.instance.count, |p| p.instance_count());
    let warnings = run_warnings(run, &workload, n_instances)?;
    check_serve(run, n_instances, &mut notes)?;

    // ---- phase 2: create ----
    let (admission, routing) = policies.create(run, base_dir, registry)?;
    let observers = policies::create_observers(run, registry)?;
    let (mut fleet_models, mut groups) = (None, None);
    let (mut instances, routing, pd) = match pools {
        None => {
            let mut instances = instance.create(&run.instance, &model, kv_offload)?;
            instance_policies::install(&run.instance, run.seed, registry, &mut instances)?;
            (instances, routing, None)
        }
        Some(pools) if pools.is_serve() => {
            notes.push(pools.describe());
            let f = pools.create_serve(run, registry, &run.model.name)?;
            fleet_models = Some((f.names, f.of_instance));
            groups = Some((f.pool_names, f.pool_of_instance));
            (f.instances, routing, None)
        }
        Some(pools) => {
            notes.push(pools.describe());
            let (instances, pd, routing) = pools.create(run, registry, routing)?;
            (instances, routing, Some(pd))
        }
    };
    if let Some(l) = lora {
        l.install(&mut instances);
    }
    let control = match control {
        Some(c) => Some(c.create(run, registry, &instances, groups)?),
        None => None,
    };
    notes.push(fleet_note(n_instances, &model));
    notes.push(pipeline_note(run, &admission, &routing, &observers));
    let (mut collector, trace, mut outputs) =
        output.create(run, base_dir, open_outputs, n_instances as usize, &workload)?;
    let timeseries = timeseries
        .create(base_dir, open_outputs)?
        .map(|(series, pending)| {
            outputs.push(pending);
            series
        });
    collector.slo = slo;
    collector.gateway = flow_control.is_some();
    collector.saturation = saturation;
    let models = fleet_models.map(|(names, of_instance)| {
        let (filter, rec) = models::create(names, of_instance, &workload);
        collector.models = Some(Box::new(rec));
        filter
    });
    if run.lora.is_some() {
        collector.adapters = Some(Box::new(crate::metrics::adapters::AdapterRecorder::new(
            workload.adapter_names().to_vec(),
        )));
    }
    let gateway = flow_control.map(|f| f.create(workload.tenant_names()));
    let slots = instances.iter().map(|i| u64::from(i.config().max_num_seqs));
    let tenant_budgets = tenants::create(run, workload.tenant_names(), slots.sum(), &mut notes);

    Ok(BuiltRun {
        setup: ClusterSetup {
            prompt_hashing: Default::default(),
            snapshot_reads: Default::default(),
            instances,
            workload,
            admission,
            routing,
            observers,
            admission_latency: run.admission.latency_us,
            routing_latency: run.routing.latency_us,
            freshness,
            cache_signal_delay: run.routing.cache_signal_delay_us,
            horizon,
            block_size: run.instance.block_size,
            collector,
            trace,
            labels: labels(run, &model),
            timeseries,
            gateway,
            tenant_budgets,
            control,
            pd,
            models,
            client_headers: client_headers(run),
        },
        fitness_weights: (!run.output.fitness_weights.is_empty())
            .then(|| run.output.fitness_weights.clone()),
        notes,
        warnings,
        outputs,
        calibration: model.calibration.clone(),
    })
}

/// The labels of the run's instances in its outputs.
fn labels(run: &RunFile, model: &model::CheckedModel) -> InstanceLabels {
    InstanceLabels {
        model: run.model.name.clone(),
        gpu: model.latency.gpu.clone().unwrap_or_default(),
        tp: model.latency.tp,
    }
}

/// `[serve]`: its faults checked against the fleet (every command), and a
/// note that only `blis serve` injects them.
fn check_serve(run: &RunFile, instances: u32, notes: &mut Vec<String>) -> Result<(), String> {
    let Some(s) = &run.serve else {
        return Ok(());
    };
    let errors = s.validate(instances);
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    if !s.faults.is_empty() {
        notes.push(SERVE_FAULTS_NOTE.into());
    }
    Ok(())
}

/// The run's warnings; an error when its scale is beyond what blis runs.
fn run_warnings(
    run: &RunFile,
    workload: &crate::workload::Workload,
    fleet: u32,
) -> Result<Vec<String>, String> {
    let mut warnings = super::warnings::warnings(run, workload);
    let (scale_warnings, scale_errors) = super::warnings::scale(run, workload, fleet);
    if !scale_errors.is_empty() {
        return Err(scale_errors.join("\n"));
    }
    warnings.extend(scale_warnings);
    Ok(warnings)
}

/// The note describing the fleet's instances.
fn fleet_note(n_instances: u32, model: &model::CheckedModel) -> String {
    format!(
        "{} instance(s), {} latency model, {} KV blocks each ({:?})",
        n_instances,
        model.latency.model.name(),
        model.latency.total_kv_blocks,
        model.latency.kv_blocks_source,
    )
}

/// The headers each `[[workload.clients]]` entry sends (names lowercased,
/// as the plugins' header query matches them), or `None` when none sends
/// any. Client `c` of the workload is entry `c` of the run file.
fn client_headers(
    run: &RunFile,
) -> Option<std::sync::Arc<crate::plugins::host_queries::ClientHeaders>> {
    let clients = run.workload.clients.as_deref()?;
    if clients.iter().all(|c| c.headers.is_empty()) {
        return None;
    }
    let table = clients
        .iter()
        .map(|c| {
            let mut h: Vec<(String, String)> = c
                .headers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
                .collect();
            h.sort();
            h
        })
        .collect();
    Some(std::sync::Arc::new(table))
}

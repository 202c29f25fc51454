//! The run file's structure, defaults and documentation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::workload::{Window, WorkloadConfig};

/// A run file: everything one simulation needs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    /// Master random seed (default 42). Same seed, same report (INV-6).
    /// Any u64; above i64::MAX written as a string (see [`super::seed`]).
    #[serde(default = "default_seed", with = "super::seed")]
    pub seed: u64,
    /// Simulated time limit in µs; events later than this are not executed.
    /// Absent = run until all work is done.
    #[serde(default)]
    pub horizon_us: Option<i64>,
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub instance: InstanceSection,
    #[serde(default)]
    pub workload: WorkloadConfig,
    #[serde(default)]
    pub admission: AdmissionSection,
    #[serde(default)]
    pub routing: RoutingSection,
    /// Plugin libraries to load, in order.
    #[serde(default)]
    pub plugins: Vec<PluginSection>,
    /// `[[observers]]`: observer plugins (kind `observer`), which only
    /// receive lifecycle events and the end of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observers: Vec<PolicyRef>,
    #[serde(default)]
    pub output: OutputSection,
    /// `[slo]`: targets per SLO class (attainment and goodput in the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::SloSection>,
    /// `[saturation]`: post-hoc saturation verdicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation: Option<super::SaturationSection>,
    /// `[flow_control]`: the gateway queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_control: Option<super::FlowControlSection>,
    /// `[tenants]`: tenant budgets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<super::TenantsSection>,
    /// `[[node_pools]]`: GPU nodes instances are placed on, with their cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pools: Vec<super::NodePoolSection>,
    /// `[lifecycle]`: loading, warm-up and draining of instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<super::LifecycleSection>,
    /// `[autoscaler]`: the scaling loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<super::AutoscalerSection>,
    /// `[[pools]]`: prefill/decode disaggregation (absent = one pool of
    /// `[instance]` instances serving whole requests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<super::PoolSection>,
    /// `[pd]`: decider, KV transfer and per-stage routing of the pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd: Option<super::PdSection>,
    /// `[lora]`: LoRA adapters, their residency and costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<super::LoraSection>,
    /// `[serve]`: faults `blis serve` injects (ignored by other commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<super::ServeSection>,
}

fn default_seed() -> u64 {
    42
}

impl RunFile {
    /// A copy without `[[pools]]` and `[pd]`: the base each pool's run is
    /// built from (cloning the whole run per pool grew as pools²).
    pub fn without_pools(&self) -> RunFile {
        // Every field named: a new one is a compile error here.
        let RunFile {
            seed,
            horizon_us,
            model,
            instance,
            workload,
            admission,
            routing,
            plugins,
            observers,
            output,
            slo,
            saturation,
            flow_control,
            tenants,
            node_pools,
            lifecycle,
            autoscaler,
            pools: _,
            pd: _,
            lora,
            serve,
        } = self;
        RunFile {
            seed: *seed,
            horizon_us: *horizon_us,
            model: model.clone(),
            instance: instance.clone(),
            workload: workload.clone(),
            admission: admission.clone(),
            routing: routing.clone(),
            plugins: plugins.clone(),
            observers: observers.clone(),
            output: output.clone(),
            slo: slo.clone(),
            saturation: saturation.clone(),
            flow_control: flow_control.clone(),
            tenants: tenants.clone(),
            node_pools: node_pools.clone(),
            lifecycle: lifecycle.clone(),
            autoscaler: autoscaler.clone(),
            pools: Vec::new(),
            pd: None,
            lora: lora.clone(),
            serve: serve.clone(),
        }
    }
}

/// `[model]`: the model served, the GPU, and the step-time model.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Bundled model name or HF id (default `qwen3-14b`).
    #[serde(default = "default_model")]
    pub name: String,
    /// A HuggingFace `config.json` (or its folder) to use instead of the bundled one.
    #[serde(default)]
    pub config_path: Option<PathBuf>,
    /// GPU name (default `H100`).
    #[serde(default)]
    pub hardware: Option<String>,
    /// A hardware JSON file with the GPU's specs instead of the bundled table.
    #[serde(default)]
    pub hardware_config: Option<PathBuf>,
    /// Tensor parallelism (default: the model's calibrated default, else 1).
    #[serde(default)]
    pub tp: Option<u32>,
    /// Data parallelism of a mixture-of-experts deployment (trained-physics;
    /// default 1).
    #[serde(default)]
    pub dp: Option<u32>,
    /// MoE dispatch backend when dp > 1 (trained-physics; default
    /// `allgather_reducescatter`).
    #[serde(default)]
    pub moe_comm_backend: Option<String>,
    /// Which routed experts' weights a trained-physics step loads: `all`
    /// (default, the reference's) or `touched` (the experts its tokens are
    /// expected to route to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_expert_load: Option<String>,
    /// Which shape of the model a trained-physics step reads: `reference`
    /// (default, the reference's: heads of hidden/heads, no LM head) or
    /// `full` (the config's head_dim and the LM head's weights).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<String>,
    /// `trained-physics` (default), `roofline`, `roofline-v1` or `linear`.
    #[serde(default = "default_latency_model")]
    pub latency_model: String,
    /// `[alpha0, alpha1, alpha2]` µs (default: the latency model's own).
    #[serde(default)]
    pub alpha: Option<[f64; 3]>,
    /// Step-time coefficients: 7 to 11 for trained-physics, 3 for linear
    /// (default: the latency model's own).
    #[serde(default)]
    pub beta: Option<Vec<f64>>,
    /// Fraction of GPU memory available for weights + KV cache when KV
    /// blocks are derived (default 0.9).
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    /// A calibration profile written by `blis calibrate fit`: its
    /// coefficients replace the latency model's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<PathBuf>,
    /// Apply `calibration` to a model or GPU type it was not fitted on (a
    /// note on stderr names what is extrapolated and the profile's measured
    /// held-out error for it); without it such a run is refused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub calibration_extrapolate: bool,
}

fn default_model() -> String {
    "qwen3-14b".to_string()
}
fn default_latency_model() -> String {
    "trained-physics".to_string()
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            name: default_model(),
            config_path: None,
            hardware: None,
            hardware_config: None,
            tp: None,
            dp: None,
            moe_comm_backend: None,
            moe_expert_load: None,
            geometry: None,
            latency_model: default_latency_model(),
            alpha: None,
            beta: None,
            gpu_memory_utilization: None,
            calibration: None,
            calibration_extrapolate: false,
        }
    }
}

/// `[instance]`: every instance of the (homogeneous) cluster.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSection {
    /// Number of instances (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Max requests in a running batch (default 256).
    #[serde(default = "d_max_num_seqs")]
    pub max_num_seqs: u32,
    /// Token budget per step (default 2048).
    #[serde(default = "d_max_num_batched_tokens")]
    pub max_num_batched_tokens: u32,
    /// Chunked-prefill threshold in tokens (default 0 = off).
    #[serde(default)]
    pub long_prefill_token_threshold: u32,
    /// KV block size in tokens (default 16).
    #[serde(default = "d_block_size")]
    pub block_size: u32,
    /// KV blocks per instance (absent = calibrated or derived from GPU memory).
    #[serde(default)]
    pub total_kv_blocks: Option<u64>,
    /// Context limit, prompt + output tokens (absent = the model's
    /// `max_position_embeddings` when known, else unlimited).
    #[serde(default)]
    pub max_model_len: Option<u32>,
    /// `fcfs` (default), `priority-fcfs`, `sjf`, `reverse-priority`, or a
    /// scheduler plugin (`name` or `library::name`).
    #[serde(default = "d_fcfs")]
    pub scheduler: String,
    /// Parameters handed to a scheduler plugin.
    #[serde(default)]
    pub scheduler_params: toml::Table,
    /// `fcfs` (default: evict the batch tail), `priority`, or a preemption
    /// plugin (`name` or `library::name`).
    #[serde(default = "d_fcfs")]
    pub preemption: String,
    /// Parameters handed to a preemption plugin.
    #[serde(default)]
    pub preemption_params: toml::Table,
    /// `[instance.kv_offload]`: a CPU tier behind the GPU KV blocks
    /// (absent = GPU only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offload: Option<KvOffloadSection>,
    /// Schedule one step ahead, as vLLM does by default since late 2025
    /// (`--async-scheduling`; default false, the reference's engine).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub async_scheduling: bool,
}

/// `[instance.kv_offload]`: the CPU KV tier of every instance.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KvOffloadSection {
    /// CPU tier capacity in KV blocks (0 = no tier).
    pub cpu_blocks: u64,
    /// CPU → GPU transfer bandwidth in tokens per µs (default 100): a block
    /// of B tokens takes ⌈B / bandwidth⌉ µs.
    #[serde(default = "d_transfer_bandwidth")]
    pub transfer_bandwidth_tokens_per_us: f64,
    /// Fixed cost added per reloaded block, µs (default 0).
    #[serde(default)]
    pub transfer_base_latency_us: i64,
}

fn d_transfer_bandwidth() -> f64 {
    100.0
}

fn one() -> u32 {
    1
}
fn d_max_num_seqs() -> u32 {
    256
}
fn d_max_num_batched_tokens() -> u32 {
    2048
}
fn d_block_size() -> u32 {
    16
}
fn d_fcfs() -> String {
    "fcfs".to_string()
}

impl Default for InstanceSection {
    fn default() -> Self {
        InstanceSection {
            count: 1,
            max_num_seqs: d_max_num_seqs(),
            max_num_batched_tokens: d_max_num_batched_tokens(),
            long_prefill_token_threshold: 0,
            block_size: d_block_size(),
            total_kv_blocks: None,
            max_model_len: None,
            scheduler: d_fcfs(),
            scheduler_params: toml::Table::new(),
            preemption: d_fcfs(),
            preemption_params: toml::Table::new(),
            kv_offload: None,
            async_scheduling: false,
        }
    }
}

/// `[admission]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSection {
    /// Admission policy name, or `library::name` (default `always-admit`).
    #[serde(default = "d_admit")]
    pub policy: String,
    /// Delay between arrival and the admission decision, µs (default 0).
    #[serde(default)]
    pub latency_us: i64,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
    /// `[[admission.then]]`: more admission policies, asked in order after
    /// `policy`; a request is admitted only when every one admits it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub then: Vec<AdmissionStep>,
}

/// One `[[admission.then]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionStep {
    /// Admission policy name, or `library::name`.
    pub policy: String,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
}

fn d_admit() -> String {
    "always-admit".to_string()
}

impl Default for AdmissionSection {
    fn default() -> Self {
        AdmissionSection {
            policy: d_admit(),
            latency_us: 0,
            params: toml::Table::new(),
            then: Vec::new(),
        }
    }
}

/// One scorer of a weighted routing profile.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScorerSection {
    /// Scorer name, or `library::name`.
    pub name: String,
    /// Relative weight (≥ 0; weights are normalised to sum 1).
    pub weight: f64,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
}

/// `[routing]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingSection {
    /// `weighted` (host composition of scorers) or a router plugin name
    /// (default `round-robin`).
    #[serde(default = "d_route")]
    pub policy: String,
    /// Delay between admission and routing decision, µs (default 0).
    #[serde(default)]
    pub latency_us: i64,
    /// Tier 3 snapshot refresh interval, µs (default 0 = always fresh).
    #[serde(default)]
    pub snapshot_refresh_interval_us: i64,
    /// Parameters handed to a router plugin.
    #[serde(default)]
    pub params: toml::Table,
    /// Scorers of the weighted policy (default profile
    /// `prefix-affinity:3, queue-depth:2, kv-utilization:2`).
    #[serde(default)]
    pub scorers: Vec<ScorerSection>,
    /// Scheduling profiles of the `pipeline` policy (llm-d's shape).
    #[serde(default)]
    pub profiles: Vec<ProfileSection>,
    /// Profile handler of the `pipeline` policy: `single-profile` (the
    /// default: exactly one profile) or `header` (llm-d's
    /// header-profile-handler: each workload client's requests run the
    /// profile its request header `header` names, `default_profile` when it
    /// has none).
    #[serde(default)]
    pub profile_handler: Option<String>,
    /// `header` handler: the request header naming the profile (default
    /// `EPP-Profile`; matched case-insensitively, as HTTP headers are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// `header` handler: the profile of requests without the header
    /// (default: the first profile; `""`: none, as llm-d with a
    /// defaultProfile that names no profile, which refuses such requests:
    /// blis then refuses a workload that would send one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_profile: Option<String>,
    /// Staleness of the prefix-cache query read by `precise-prefix-cache`
    /// and `no-hit-lru`, µs (default 0 = live; the reference's default is
    /// 50000).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_signal_delay_us: i64,
    /// `[routing.freshness]`: refresh interval of each periodic snapshot signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<FreshnessSection>,
    /// `weighted`: how ties of the highest total are broken, `lowest-index`
    /// (default) or `random` (uniform, seeded: llm-d's max-score-picker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie_break: Option<String>,
    /// An llm-d EndpointPickerConfig YAML file (relative to the run file)
    /// read at build time in place of this section's policy, scorers and
    /// profiles (and `[admission]`, `[flow_control]`, `[pd]` routing): see
    /// `config::epp_config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epp_config: Option<PathBuf>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `[routing.freshness]`: how old each snapshot signal may be, µs (0 = read
/// live at every decision; P > 0 = re-read at a decision when P µs have
/// passed since its last read).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FreshnessSection {
    /// `queue_depth` (default 0 = live).
    pub queue_depth_us: Option<i64>,
    /// `batch_size`, the running requests (default 0 = live).
    pub batch_size_us: Option<i64>,
    /// `kv_utilization`, `free_kv_blocks`, `cache_hit_rate` (default
    /// `routing.snapshot_refresh_interval_us`).
    pub kv_utilization_us: Option<i64>,
    /// The LoRA adapters resident on each instance, as the plugins' LoRA
    /// queries (and so `lora-affinity`) see them (default 0 = live).
    pub resident_adapters_us: Option<i64>,
}

/// A filter or picker of a scheduling profile.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRef {
    /// Policy name, or `library::name`.
    pub name: String,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
}

/// One scorer of a scheduling profile (weight defaults to 1, as in llm-d).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileScorer {
    /// Scorer name, or `library::name`.
    pub name: String,
    /// Weight (≥ 0, default 1; raw, not normalised).
    #[serde(default = "d_weight")]
    pub weight: f64,
    /// Parameters handed to the plugin.
    #[serde(default)]
    pub params: toml::Table,
}

fn d_weight() -> f64 {
    1.0
}

/// `[[routing.profiles]]`: filters → weighted scorers → picker.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSection {
    /// Profile name (default `default`).
    #[serde(default = "d_profile_name")]
    pub name: String,
    /// Filters, run in order, each on the previous one's output.
    #[serde(default)]
    pub filters: Vec<PolicyRef>,
    /// Scorers, each scoring the candidates that survived the filters.
    #[serde(default)]
    pub scorers: Vec<ProfileScorer>,
    /// Picker (default `max-score`).
    #[serde(default)]
    pub picker: Option<PolicyRef>,
}

fn d_profile_name() -> String {
    "default".to_string()
}

fn d_route() -> String {
    "round-robin".to_string()
}

impl Default for RoutingSection {
    fn default() -> Self {
        RoutingSection {
            policy: d_route(),
            latency_us: 0,
            snapshot_refresh_interval_us: 0,
            params: toml::Table::new(),
            scorers: Vec::new(),
            profiles: Vec::new(),
            profile_handler: None,
            header: None,
            default_profile: None,
            cache_signal_delay_us: 0,
            freshness: None,
            tie_break: None,
            epp_config: None,
        }
    }
}

/// `[[plugins]]`: a plugin library to load.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    /// Path of the `.so` or `.wasm` (relative to the run file's folder).
    pub path: PathBuf,
    /// A WebAssembly component's fuel per policy call (default 10^9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_per_call: Option<u64>,
    /// A WebAssembly component's memory cap per policy, MiB (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mib: Option<u64>,
}

/// `[output]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    /// Per-request results file (JSON lines, one per request in id order;
    /// relative to the run file's folder).
    #[serde(default)]
    pub results_path: Option<PathBuf>,
    /// Decision trace file (JSON lines; relative to the run file's folder).
    #[serde(default)]
    pub trace_path: Option<PathBuf>,
    /// `none` or `decisions` (default: `decisions` when `trace_path` is set, else `none`).
    #[serde(default)]
    pub trace_level: Option<String>,
    /// Candidates recorded per routing decision (default 3).
    #[serde(default)]
    pub counterfactual_k: Option<u32>,
    /// Fitness weights: metric → weight (keys in `metrics::fitness::KEYS`).
    #[serde(default)]
    pub fitness_weights: BTreeMap<String, f64>,
    /// Time series file (JSON lines, one per interval; relative to the run file's folder).
    #[serde(default)]
    pub timeseries_path: Option<PathBuf>,
    /// The time series' interval in µs (default 1 s).
    #[serde(default)]
    pub timeseries_interval_us: Option<i64>,
    /// Report windows `[{ start_us, end_us }, …]`: the report gains a
    /// `stages` entry per window for the requests that arrived in it
    /// (instead of the workload's stages).
    #[serde(default)]
    pub windows: Option<Vec<Window>>,
    /// `exact` (default: every latency sample kept) or `sketch` (quantile
    /// sketches: memory independent of the request count, percentiles
    /// within 0.5 %).
    #[serde(default)]
    pub percentiles: Option<String>,
    /// TraceV2 export prefix P: writes `P.yaml` and `P.csv` (every arrival;
    /// relative to the run file's folder).
    #[serde(default)]
    pub trace_v2: Option<PathBuf>,
    /// SimResult JSON array (the reference's `replay --results-path`): one
    /// entry per completed trace row; needs `[workload.trace_v2]`.
    #[serde(default)]
    pub sim_results_path: Option<PathBuf>,
    /// Aggregate metrics JSON (the report's `cluster` block plus
    /// `cache_hit_rate`; the reference's `--metrics-path`).
    #[serde(default)]
    pub metrics_path: Option<PathBuf>,
}

/// The scenario `blis run` runs without a file: 4 instances, weighted
/// routing with the default scorer profile, a chat-like workload.
pub const DEFAULT_RUN_FILE: &str = r#"# blis built-in default scenario
seed = 42

[model]
name = "qwen3-14b"
hardware = "H100"
tp = 1
latency_model = "trained-physics"

[instance]
count = 4

[workload]
preset = "chatbot"
aggregate_rate = 40.0
num_requests = 1000

[routing]
policy = "weighted"
"#;

/// [`Source::name`] of the built-in default scenario.
const BUILTIN_NAME: &str = "<built-in default>";

/// A run file's text and where it came from.
#[derive(Clone, Debug)]
pub struct Source {
    /// File name for messages (`<built-in default>` for the default scenario).
    pub name: String,
    /// Folder relative paths are resolved against.
    pub base_dir: PathBuf,
    pub text: String,
}

impl Source {
    /// The run file's path, when the text was read from one (an input the
    /// outputs must not overwrite).
    pub fn file(&self) -> Option<&Path> {
        (self.name != BUILTIN_NAME).then(|| Path::new(&self.name))
    }

    /// Read a run file.
    pub fn read(path: &Path) -> Result<Source, String> {
        let text = crate::input::read_to_string(path).map_err(|e| {
            format!(
                "cannot read run file {}: {e}\n  Give the path of a TOML run file (see README.md, \"Run file reference\"), or no file for the built-in default scenario.",
                path.display()
            )
        })?;
        Ok(Source {
            name: path.display().to_string(),
            base_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            text,
        })
    }

    /// The built-in default scenario.
    pub fn builtin() -> Source {
        Source {
            name: BUILTIN_NAME.to_string(),
            base_dir: PathBuf::from("."),
            text: DEFAULT_RUN_FILE.to_string(),
        }
    }
}

/// Line and column (1-based) of byte `pos` in `text`.
pub fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    let before = &text[..pos];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(pos, |i| pos - i - 1) + 1;
    (line, col)
}

/// Turn a TOML/serde error into `file:line:column: message`.
pub fn describe_toml_error(source_name: &str, text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim();
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            let snippet = crate::text::window(
                text.lines().nth(line - 1).unwrap_or("").trim_end(),
                col,
                100,
            );
            let msg = crate::text::clean(msg, 400);
            format!("{source_name}:{line}:{col}: {msg}\n  | {snippet}")
        }
        None => format!("{source_name}: {msg}"),
    }
}

/// Parse a run file's text (the file alone, without command-line overrides).
pub fn parse(source: &Source) -> Result<RunFile, String> {
    toml::from_str::<RunFile>(&source.text)
        .map_err(|e| describe_toml_error(&source.name, &source.text, &e))
}

fn is_false(b: &bool) -> bool {
    !*b
}

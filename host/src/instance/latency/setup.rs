//! From "what the run file says" to a ready latency model and KV capacity.
//!
//! The config layer fills a [`LatencySetup`] (model, GPU, TP, model kind,
//! optional coefficients and KV size) and calls [`build_latency`]. The rules
//! below live here, next to the data they consult, so the config layer stays
//! a translation of fields:
//!
//! 1. **GPU and TP.** As given; a missing one is taken from the model's
//!    default hardware (§6.6 `defaults:` table) when it has one; TP defaults
//!    to 1, DP to 1.
//! 2. **trained-physics** (default). Needs a GPU and a model config (the
//!    given `model_config` path, else the bundled config of `model`);
//!    `alpha` and `beta` (7 to 11 values) as given, else the iter29 values;
//!    DP > 1 only for MoE models; `moe_comm_backend` picks the DP > 1
//!    dispatch cost.
//! 3. **roofline** (HEAD). Needs a GPU and a model config; `alpha` as
//!    given, else zeros; `beta`, DP > 1 and a comm backend are rejected.
//! 4. **roofline-v1 and linear** (February). As before: the calibrated entry
//!    for (model, GPU, TP), if any, gives `alpha` (and the linear `beta`,
//!    which is otherwise required; roofline-v1 rejects `beta`); roofline-v1
//!    reads GPUs from the February hardware table.
//! 5. **KV blocks.** `total_kv_blocks` as given; else, for `linear` and
//!    `roofline-v1`, the calibrated entry's count rescaled from block size 16
//!    to `block_size` (`⌊blocks · 16 / block_size⌋`), else the February
//!    derivation ([`derive_total_kv_blocks_v1`]); for `trained-physics` and
//!    `roofline`, the HEAD derivation ([`derive_total_kv_blocks`](super::capacity::derive_total_kv_blocks)).

use std::path::PathBuf;
use std::str::FromStr;

use super::capacity::derive_total_kv_blocks_reserving;
use super::coefficients::{calibrated_setups, default_hardware, lookup_entry, CoefficientEntry};
use super::gpu::{bundled_gpu_names, bundled_gpu_names_v1, hardware_file_names, GpuSpec};
use super::kv_v1::{derive_total_kv_blocks_v1, DEFAULT_GPU_MEMORY_UTILIZATION};
use super::model_config::{bundled_model_names, ModelConfig};
use super::roofline::RooflineModel;
use super::roofline_v1::RooflineV1Model;
use super::trained_physics::{
    MoeCommBackend, StepVariant, TrainedPhysicsModel, ITER29_ALPHA, ITER29_BETA,
};
use super::{LatencyError, LatencyModel, LinearModel};

/// Block size (tokens) at which the coefficient table's KV counts were measured.
const TABLE_BLOCK_SIZE: u64 = 16;

/// Which step-time model to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LatencyKind {
    /// Trained physics-informed model (`trained-physics`; the default).
    #[default]
    TrainedPhysics,
    /// Analytical FLOPs/bytes model at the reference's HEAD (`roofline`).
    Roofline,
    /// The February 2026 roofline (`roofline-v1`).
    RooflineV1,
    /// Calibrated alpha/beta model (`linear`; the reference called it `blackbox`).
    Linear,
}

impl LatencyKind {
    /// Names accepted by [`LatencyKind::from_str`], sorted (`blackbox` is
    /// also accepted, as an alias of `linear`).
    pub const NAMES: &'static [&'static str] =
        &["linear", "roofline", "roofline-v1", "trained-physics"];

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            LatencyKind::TrainedPhysics => "trained-physics",
            LatencyKind::Roofline => "roofline",
            LatencyKind::RooflineV1 => "roofline-v1",
            LatencyKind::Linear => "linear",
        }
    }

    /// Whether the model belongs to the February 2026 generation (its KV
    /// sizing and GPU table are the February ones).
    fn is_v1(self) -> bool {
        matches!(self, LatencyKind::RooflineV1 | LatencyKind::Linear)
    }
}

impl FromStr for LatencyKind {
    type Err = LatencyError;

    /// One of [`LatencyKind::NAMES`] (or `blackbox`), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trained-physics" => Ok(LatencyKind::TrainedPhysics),
            "roofline" => Ok(LatencyKind::Roofline),
            "roofline-v1" => Ok(LatencyKind::RooflineV1),
            "linear" | "blackbox" => Ok(LatencyKind::Linear),
            _ => Err(LatencyError::InvalidSetting(format!(
                "unknown latency model '{s}': expected one of {}",
                LatencyKind::NAMES.join(", ")
            ))),
        }
    }
}

/// Everything a run says about the latency model of its instances.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencySetup {
    /// Which model to build.
    pub kind: LatencyKind,
    /// Model id or name (`meta-llama/llama-3.1-8b-instruct`, `qwen3-14b`),
    /// matched case-insensitively against the coefficient table and the
    /// bundled model configs.
    pub model: String,
    /// A HuggingFace `config.json` (or a folder holding one) to use instead
    /// of the bundled config of `model`.
    pub model_config: Option<PathBuf>,
    /// GPU name (`H100`, `A100-80`); `None` = the model's default, if any.
    pub hardware: Option<String>,
    /// A hardware config JSON to look the GPU up in instead of the bundled one.
    pub hardware_config: Option<PathBuf>,
    /// Tensor parallelism; `None` = the model's default, else 1.
    pub tp: Option<u32>,
    /// Data parallelism of an MoE deployment (trained-physics); `None` = 1.
    pub dp: Option<u32>,
    /// MoE dispatch backend for DP > 1 (trained-physics); `None` = all-gather.
    pub moe_comm_backend: Option<String>,
    /// Which routed experts' weights a step loads (trained-physics): `all`
    /// (`None`, the reference's) or `touched`.
    pub moe_expert_load: Option<String>,
    /// Which shape of the model a step reads (trained-physics): `reference`
    /// (`None`, the reference's) or `full`.
    pub geometry: Option<String>,
    /// `[alpha0, alpha1, alpha2]`; `None` = the model's default.
    pub alpha: Option<[f64; 3]>,
    /// Beta coefficients: 3 for linear, 7 to 11 for trained-physics; `None`
    /// = the model's default.
    pub beta: Option<Vec<f64>>,
    /// KV block size in tokens.
    pub block_size: u32,
    /// KV blocks per instance; `None` = calibrated, else derived.
    pub total_kv_blocks: Option<u64>,
    /// Fraction of GPU memory the KV derivation may use.
    pub gpu_memory_utilization: f64,
    /// HBM bytes reserved for LoRA adapter slots, subtracted when KV blocks
    /// are derived by the HEAD rules (0 without `[lora]`).
    pub adapter_reserved_bytes: u64,
}

impl LatencySetup {
    /// A setup with everything else left to defaults: GPU and TP from the
    /// model's default hardware, calibrated coefficients and KV blocks,
    /// block size 16, memory utilisation 0.9.
    pub fn new(kind: LatencyKind, model: &str) -> Self {
        LatencySetup {
            kind,
            model: model.to_string(),
            model_config: None,
            hardware: None,
            hardware_config: None,
            tp: None,
            dp: None,
            moe_comm_backend: None,
            moe_expert_load: None,
            geometry: None,
            alpha: None,
            beta: None,
            block_size: 16,
            total_kv_blocks: None,
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
            adapter_reserved_bytes: 0,
        }
    }
}

/// Where [`BuiltLatency::total_kv_blocks`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvBlocksSource {
    /// Given in the setup.
    Explicit,
    /// The coefficient table's measured count (rescaled to the block size).
    Calibrated,
    /// Derived from GPU memory and model size (HEAD rules).
    Derived,
    /// Derived by the February rules (`linear`, `roofline-v1`).
    DerivedV1,
}

/// A latency model ready for the instances, with the KV capacity to give them.
#[derive(Clone, Debug)]
pub struct BuiltLatency {
    /// The step-time model.
    pub model: LatencyModel,
    /// KV blocks per instance.
    pub total_kv_blocks: u64,
    /// Where `total_kv_blocks` came from.
    pub kv_blocks_source: KvBlocksSource,
    /// GPU the run uses, as resolved (`None` for a linear model with none).
    pub gpu: Option<String>,
    /// Tensor parallelism, as resolved.
    pub tp: u32,
    /// vLLM image of the calibrated entry used, if any.
    pub calibrated_vllm: Option<String>,
    /// Caveats to print (quantised or MoE model configs …).
    pub warnings: Vec<String>,
}

/// Build the latency model and KV capacity a [`LatencySetup`] describes
/// (rules in the module docs).
pub fn build_latency(setup: &LatencySetup) -> Result<BuiltLatency, LatencyError> {
    check_settings(setup)?;
    let kind = setup.kind;
    let dp = setup.dp.unwrap_or(1);
    let defaults = default_hardware(&setup.model);
    let gpu_name: Option<String> = setup
        .hardware
        .clone()
        .or_else(|| defaults.map(|d| d.gpu.clone()));
    let tp = setup.tp.or(defaults.map(|d| d.tp)).unwrap_or(1);
    let entry: Option<&CoefficientEntry> = if kind.is_v1() {
        gpu_name
            .as_deref()
            .and_then(|g| lookup_entry(&setup.model, g, tp))
    } else {
        None
    };
    let inputs = Inputs {
        setup,
        gpu_name: gpu_name.as_deref(),
    };
    let mut warnings = Vec::new();
    let (model, parts) = build_model(&inputs, entry, tp, dp, &mut warnings)?;
    let (total_kv_blocks, kv_blocks_source) = if let Some(n) = setup.total_kv_blocks {
        (n, KvBlocksSource::Explicit)
    } else if let Some(e) = entry {
        let scaled = u128::from(e.total_kv_blocks) * u128::from(TABLE_BLOCK_SIZE)
            / u128::from(setup.block_size);
        let blocks = u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
        (blocks, KvBlocksSource::Calibrated)
    } else {
        derive_kv_blocks(&inputs, parts, tp, dp)?
    };
    Ok(BuiltLatency {
        model,
        total_kv_blocks,
        kv_blocks_source,
        gpu: gpu_name,
        tp,
        calibrated_vllm: entry.map(|e| e.vllm.clone()),
        warnings,
    })
}

/// The settings every latency model needs in range, and the
/// trained-physics-only ones refused elsewhere.
fn check_settings(setup: &LatencySetup) -> Result<(), LatencyError> {
    let invalid = |m: &str| Err(LatencyError::InvalidSetting(m.into()));
    if setup.block_size == 0 {
        return invalid("block_size must be ≥ 1 token");
    }
    if setup.tp == Some(0) {
        return invalid("tensor parallelism (tp) must be ≥ 1");
    }
    if setup.dp == Some(0) {
        return invalid("data parallelism (dp) must be ≥ 1");
    }
    if setup.total_kv_blocks == Some(0) {
        return invalid("total_kv_blocks must be ≥ 1 (leave it out to derive it)");
    }
    let kind = setup.kind;
    if kind != LatencyKind::TrainedPhysics {
        if setup.dp.is_some_and(|dp| dp > 1) {
            return Err(LatencyError::InvalidSetting(format!(
                "dp > 1 is modelled by trained-physics only, not by {}",
                kind.name()
            )));
        }
        for (key, set) in [
            ("moe_comm_backend", setup.moe_comm_backend.is_some()),
            ("moe_expert_load", setup.moe_expert_load.is_some()),
            ("geometry", setup.geometry.is_some()),
        ] {
            if set {
                return Err(LatencyError::InvalidSetting(format!(
                    "{key} is used by trained-physics only, not by {}",
                    kind.name()
                )));
            }
        }
    }
    Ok(())
}

/// The setup and its resolved GPU name; the GPU spec and model config are
/// loaded on demand (a linear model with explicit KV blocks needs neither).
struct Inputs<'a> {
    setup: &'a LatencySetup,
    gpu_name: Option<&'a str>,
}

impl Inputs<'_> {
    fn gpu_spec(&self, needed_for: &str) -> Result<GpuSpec, LatencyError> {
        let setup = self.setup;
        let kind = setup.kind;
        let Some(name) = self.gpu_name else {
            let available = match &setup.hardware_config {
                Some(path) => hardware_file_names(path)?,
                None if kind.is_v1() => bundled_gpu_names_v1(),
                None => bundled_gpu_names(),
            };
            return Err(LatencyError::MissingGpu {
                needed_for: needed_for.to_string(),
                available,
            });
        };
        match &setup.hardware_config {
            Some(path) => GpuSpec::from_hardware_file(path, name),
            None if kind.is_v1() => GpuSpec::bundled_v1(name),
            None => GpuSpec::bundled(name),
        }
    }

    fn model_config(&self) -> Result<ModelConfig, LatencyError> {
        match &self.setup.model_config {
            Some(path) => ModelConfig::from_path(path),
            None => ModelConfig::bundled(&self.setup.model),
        }
    }
}

/// The step-time model of the setup's kind, and the model config and GPU
/// it loaded (none for the linear model).
fn build_model(
    inputs: &Inputs,
    entry: Option<&CoefficientEntry>,
    tp: u32,
    dp: u32,
    warnings: &mut Vec<String>,
) -> Result<(LatencyModel, Option<(ModelConfig, GpuSpec)>), LatencyError> {
    let setup = inputs.setup;
    Ok(match setup.kind {
        LatencyKind::TrainedPhysics => {
            let gpu = inputs.gpu_spec("the trained-physics latency model")?;
            let config = inputs.model_config()?;
            let alpha = setup.alpha.unwrap_or(ITER29_ALPHA);
            let beta: &[f64] = setup.beta.as_deref().unwrap_or(&ITER29_BETA);
            if beta.iter().all(|b| *b == 0.0) {
                return Err(LatencyError::InvalidSetting(
                    "trained-physics beta coefficients are all 0: every step would take 1 µs"
                        .into(),
                ));
            }
            let comm = MoeCommBackend::parse(setup.moe_comm_backend.as_deref().unwrap_or(""))?;
            let variant =
                StepVariant::parse(setup.moe_expert_load.as_deref(), setup.geometry.as_deref())?;
            let m = TrainedPhysicsModel::new(&config, &gpu, tp, dp, comm, alpha, beta)?
                .with_variant(&config, variant);
            (LatencyModel::TrainedPhysics(m), Some((config, gpu)))
        }
        LatencyKind::Roofline => {
            if setup.beta.is_some() {
                return Err(LatencyError::BetaNotUsed);
            }
            let gpu = inputs.gpu_spec("the roofline latency model")?;
            let config = inputs.model_config()?;
            let m = RooflineModel::new(&config, &gpu, tp, setup.alpha.unwrap_or([0.0; 3]))?;
            (LatencyModel::Roofline(m), Some((config, gpu)))
        }
        LatencyKind::RooflineV1 => {
            if setup.beta.is_some() {
                return Err(LatencyError::BetaNotUsed);
            }
            let alpha = setup.alpha.or(entry.map(|e| e.alpha)).unwrap_or([0.0; 3]);
            let gpu = inputs.gpu_spec("the roofline-v1 latency model")?;
            let config = inputs.model_config()?;
            let roofline = RooflineV1Model::new(&config, &gpu, tp, alpha)?;
            warnings.extend(config.warnings());
            (LatencyModel::RooflineV1(roofline), Some((config, gpu)))
        }
        LatencyKind::Linear => {
            let alpha = setup.alpha.or(entry.map(|e| e.alpha)).unwrap_or([0.0; 3]);
            let beta = match &setup.beta {
                Some(b) => Some(<[f64; 3]>::try_from(b.as_slice()).map_err(|_| {
                    LatencyError::InvalidSetting(format!(
                        "the linear latency model takes 3 beta coefficients, got {}",
                        b.len()
                    ))
                })?),
                None => entry.map(|e| e.beta),
            };
            let Some(beta) = beta else {
                return Err(LatencyError::NoCoefficients {
                    model: setup.model.clone(),
                    gpu: inputs.gpu_name.unwrap_or("no GPU").to_string(),
                    tp,
                    known: calibrated_setups(&setup.model),
                });
            };
            (LatencyModel::Linear(LinearModel::new(alpha, beta)?), None)
        }
    })
}

/// KV blocks derived from the model config and GPU memory (HEAD's sizing,
/// or February's for the v1 models).
fn derive_kv_blocks(
    inputs: &Inputs,
    parts: Option<(ModelConfig, GpuSpec)>,
    tp: u32,
    dp: u32,
) -> Result<(u64, KvBlocksSource), LatencyError> {
    let setup = inputs.setup;
    let (config, gpu) = match parts {
        Some(parts) => parts,
        None => {
            let config = inputs.model_config().map_err(|e| match e {
                LatencyError::UnknownModel { name, .. } => LatencyError::KvCapacityUnknown {
                    reason: format!(
                        "model '{name}' is not calibrated and has no bundled config \
                         (bundled: {}); give its config.json",
                        bundled_model_names().join(", ")
                    ),
                },
                other => other,
            })?;
            (
                config,
                inputs.gpu_spec("deriving total_kv_blocks (or set total_kv_blocks)")?,
            )
        }
    };
    let util = setup.gpu_memory_utilization;
    if setup.kind.is_v1() {
        let blocks = derive_total_kv_blocks_v1(&config, &gpu, tp, setup.block_size, util)?;
        Ok((blocks, KvBlocksSource::DerivedV1))
    } else {
        let blocks = derive_total_kv_blocks_reserving(
            &config,
            &gpu,
            tp,
            dp,
            setup.block_size,
            util,
            setup.adapter_reserved_bytes,
        )?;
        Ok((blocks, KvBlocksSource::Derived))
    }
}

//! From "what the run file says" to a ready latency model and KV capacity.
//!
//! The config layer fills a [`LatencySetup`] (model, GPU, TP, model kind,
//! optional coefficients and KV size) and calls [`build_latency`]. The rules
//! below live here, next to the data they consult, so the config layer stays
//! a translation of fields:
//!
//! 1. **GPU and TP.** As given; a missing one is taken from the model's
//!    default hardware (§6.6 `defaults:` table) when it has one; TP defaults
//!    to 1.
//! 2. **Calibrated entry.** The first coefficient-table entry for (model,
//!    GPU, TP), if any.
//! 3. **Linear model.** `beta` as given, else the entry's, else an error
//!    listing the model's calibrated setups; `alpha` as given, else the
//!    entry's, else zeros.
//! 4. **Roofline model.** Needs a GPU and a model config (the given
//!    `model_config` path, else the bundled config of `model`); `alpha` as
//!    given, else the entry's, else zeros; `beta` must not be given.
//! 5. **KV blocks.** `total_kv_blocks` as given; else the entry's count,
//!    rescaled from block size 16 to `block_size` (same bytes, so
//!    `⌊blocks · 16 / block_size⌋`); else derived from GPU memory and model
//!    size ([`derive_total_kv_blocks`]).

use std::path::PathBuf;
use std::str::FromStr;

use super::coefficients::{calibrated_setups, default_hardware, lookup_entry, CoefficientEntry};
use super::gpu::{bundled_gpu_names, hardware_file_names, GpuSpec};
use super::kv::{derive_total_kv_blocks, DEFAULT_GPU_MEMORY_UTILIZATION};
use super::model_config::{bundled_model_names, ModelConfig};
use super::roofline::RooflineModel;
use super::{LatencyError, LatencyModel, LinearModel};

/// Block size (tokens) at which the coefficient table's KV counts were measured.
const TABLE_BLOCK_SIZE: u64 = 16;

/// Which step-time model to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LatencyKind {
    /// Calibrated alpha/beta model (`linear`; the reference calls it `blackbox`).
    #[default]
    Linear,
    /// Analytical FLOPs/bytes model (`roofline`).
    Roofline,
}

impl LatencyKind {
    /// Names accepted by [`LatencyKind::from_str`].
    pub const NAMES: &'static [&'static str] = &["linear", "blackbox", "roofline"];
}

impl FromStr for LatencyKind {
    type Err = LatencyError;

    /// `linear` (or `blackbox`) or `roofline`, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "linear" | "blackbox" => Ok(LatencyKind::Linear),
            "roofline" => Ok(LatencyKind::Roofline),
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
    /// `[alpha0, alpha1, alpha2]`; `None` = calibrated, else zeros.
    pub alpha: Option<[f64; 3]>,
    /// `[beta0, beta1, beta2]` (linear only); `None` = calibrated.
    pub beta: Option<[f64; 3]>,
    /// KV block size in tokens.
    pub block_size: u32,
    /// KV blocks per instance; `None` = calibrated, else derived.
    pub total_kv_blocks: Option<u64>,
    /// Fraction of GPU memory the KV derivation may use.
    pub gpu_memory_utilization: f64,
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
            alpha: None,
            beta: None,
            block_size: 16,
            total_kv_blocks: None,
            gpu_memory_utilization: DEFAULT_GPU_MEMORY_UTILIZATION,
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
    /// Derived from GPU memory and model size.
    Derived,
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
    if setup.block_size == 0 {
        return Err(LatencyError::InvalidSetting(
            "block_size must be ≥ 1 token".into(),
        ));
    }
    if setup.tp == Some(0) {
        return Err(LatencyError::InvalidSetting(
            "tensor parallelism (tp) must be ≥ 1".into(),
        ));
    }
    if setup.total_kv_blocks == Some(0) {
        return Err(LatencyError::InvalidSetting(
            "total_kv_blocks must be ≥ 1 (leave it out to derive it)".into(),
        ));
    }

    let defaults = default_hardware(&setup.model);
    let gpu_name: Option<String> = setup
        .hardware
        .clone()
        .or_else(|| defaults.map(|d| d.gpu.clone()));
    let tp = setup.tp.or(defaults.map(|d| d.tp)).unwrap_or(1);
    let entry: Option<&CoefficientEntry> = gpu_name
        .as_deref()
        .and_then(|g| lookup_entry(&setup.model, g, tp));

    let mut warnings = Vec::new();
    // Loaded on demand: a linear model with explicit KV blocks needs neither.
    let gpu_spec = |needed_for: &str| -> Result<GpuSpec, LatencyError> {
        let Some(name) = gpu_name.as_deref() else {
            let available = match &setup.hardware_config {
                Some(path) => hardware_file_names(path)?,
                None => bundled_gpu_names(),
            };
            return Err(LatencyError::MissingGpu {
                needed_for: needed_for.to_string(),
                available,
            });
        };
        match &setup.hardware_config {
            Some(path) => GpuSpec::from_hardware_file(path, name),
            None => GpuSpec::bundled(name),
        }
    };
    let model_config = || -> Result<ModelConfig, LatencyError> {
        match &setup.model_config {
            Some(path) => ModelConfig::from_path(path),
            None => ModelConfig::bundled(&setup.model),
        }
    };

    let alpha = setup.alpha.or(entry.map(|e| e.alpha)).unwrap_or([0.0; 3]);
    let (model, roofline_parts) = match setup.kind {
        LatencyKind::Linear => {
            let Some(beta) = setup.beta.or(entry.map(|e| e.beta)) else {
                return Err(LatencyError::NoCoefficients {
                    model: setup.model.clone(),
                    gpu: gpu_name.clone().unwrap_or_else(|| "no GPU".into()),
                    tp,
                    known: calibrated_setups(&setup.model),
                });
            };
            (LatencyModel::Linear(LinearModel::new(alpha, beta)?), None)
        }
        LatencyKind::Roofline => {
            if setup.beta.is_some() {
                return Err(LatencyError::BetaNotUsed);
            }
            let gpu = gpu_spec("the roofline latency model")?;
            let config = model_config()?;
            let roofline = RooflineModel::new(&config, &gpu, tp, alpha)?;
            warnings.extend(config.warnings());
            (LatencyModel::Roofline(roofline), Some((config, gpu)))
        }
    };

    let (total_kv_blocks, kv_blocks_source) = if let Some(n) = setup.total_kv_blocks {
        (n, KvBlocksSource::Explicit)
    } else if let Some(e) = entry {
        let scaled = u128::from(e.total_kv_blocks) * u128::from(TABLE_BLOCK_SIZE)
            / u128::from(setup.block_size);
        let blocks = u64::try_from(scaled).unwrap_or(u64::MAX).max(1);
        (blocks, KvBlocksSource::Calibrated)
    } else {
        let (config, gpu) = match roofline_parts {
            Some(parts) => parts,
            None => {
                let config = model_config().map_err(|e| match e {
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
                    gpu_spec("deriving total_kv_blocks (or set total_kv_blocks)")?,
                )
            }
        };
        let blocks = derive_total_kv_blocks(
            &config,
            &gpu,
            tp,
            setup.block_size,
            setup.gpu_memory_utilization,
        )?;
        (blocks, KvBlocksSource::Derived)
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

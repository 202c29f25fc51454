//! GPU descriptions for the analytical latency models and KV sizing.
//!
//! A hardware config is a JSON object mapping GPU names to records (keys
//! matched case-insensitively, other keys ignored). Two tables are bundled:
//!
//! * `host/data/hardware_config.json` — the reference's table at HEAD
//!   (`latency-head.md` §5.4: `TFlopsPeak`, `TFlopsFP8`, `BwPeakTBs`,
//!   `mfuPrefill`, `mfuDecode`, `MemoryGiB`; H100, A100-SXM, A100-80, L40S),
//!   used by `roofline`, `trained-physics` and the KV sizing;
//! * `host/data/hardware_config_v1.json` — the February table
//!   (`core-engine.md` §6.4, with `BwEffConstant`, `TOverheadMicros`,
//!   `perLayerOverhead`, `allReduceLatency` and that era's MFUs), used by
//!   `roofline-v1` so its results stay reproducible.
//!
//! A user's file of either shape can be given instead. GPU names are matched
//! case-insensitively.

use std::path::Path;

use serde_json::Value;

use super::LatencyError;

const BUNDLED_HARDWARE: &str = include_str!("../../../data/hardware_config.json");
const BUNDLED_ORIGIN: &str = "bundled hardware_config.json";
const BUNDLED_HARDWARE_V1: &str = include_str!("../../../data/hardware_config_v1.json");
const BUNDLED_ORIGIN_V1: &str = "bundled hardware_config_v1.json";

/// Names that denote the same GPU model. The coefficient table says `A100-80`
/// where the hardware table says `A100-SXM`.
const GPU_ALIASES: &[&[&str]] = &[&["A100-SXM", "A100-80"]];

/// One GPU's performance figures (per GPU; tensor parallelism multiplies them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSpec {
    /// Name as spelled in the hardware table.
    pub name: String,
    /// Dense peak throughput, 10^12 FLOP/s (`TFlopsPeak`).
    pub tflops_peak: f64,
    /// FP8 peak throughput, 10^12 FLOP/s; 0 = no FP8 (`TFlopsFP8`).
    pub tflops_fp8: f64,
    /// Peak memory bandwidth, TB/s (`BwPeakTBs`).
    pub bw_peak_tbs: f64,
    /// Achievable fraction of the peak bandwidth (`BwEffConstant`).
    pub bw_eff_constant: f64,
    /// Fixed cost of every step, µs (`TOverheadMicros`).
    pub t_overhead_micros: f64,
    /// Cost per layer per step, µs (`perLayerOverhead`).
    pub per_layer_overhead: f64,
    /// Fraction of peak the GEMMs reach in prefill (`mfuPrefill`).
    pub mfu_prefill: f64,
    /// Fraction of peak the GEMMs reach in decode (`mfuDecode`).
    pub mfu_decode: f64,
    /// One all-reduce, µs; two per layer per step when TP > 1 (`allReduceLatency`).
    pub all_reduce_latency: f64,
    /// Memory per GPU, GiB; 0 = unknown (`MemoryGiB`).
    pub memory_gib: f64,
}

impl GpuSpec {
    /// A GPU of the bundled HEAD table by name, case-insensitively (`H100`,
    /// `A100-SXM`, `A100-80`, `L40S`).
    pub fn bundled(name: &str) -> Result<Self, LatencyError> {
        GpuSpec::from_hardware_json(BUNDLED_HARDWARE, BUNDLED_ORIGIN, name)
    }

    /// A GPU of the bundled February table (`roofline-v1`): `H100`,
    /// `A100-SXM`, `A100-80`.
    pub fn bundled_v1(name: &str) -> Result<Self, LatencyError> {
        GpuSpec::from_hardware_json(BUNDLED_HARDWARE_V1, BUNDLED_ORIGIN_V1, name)
    }

    /// Peak FLOP per µs a model with weights `weight_bytes` wide computes at:
    /// the FP8 peak when the weights are exactly 1 byte and the GPU has one,
    /// else the dense peak (`latency-head.md` §2.2, §2.7).
    pub fn flops_per_us(&self, weight_bytes: f64) -> f64 {
        if weight_bytes == 1.0 && self.tflops_fp8 > 0.0 {
            self.tflops_fp8 * 1e6
        } else {
            self.tflops_peak * 1e6
        }
    }

    /// Problems that stop this spec from driving `roofline` (`mfu = true`)
    /// or `trained-physics` (empty when usable): peaks and bandwidth finite
    /// and > 0; `TFlopsFP8` and `MemoryGiB` finite and ≥ 0 (0 = none).
    pub(crate) fn problems_head(&self, mfu: bool) -> Vec<String> {
        let mut p = Vec::new();
        let mut positive = vec![
            ("TFlopsPeak", self.tflops_peak),
            ("BwPeakTBs", self.bw_peak_tbs),
        ];
        if mfu {
            positive.extend([
                ("mfuPrefill", self.mfu_prefill),
                ("mfuDecode", self.mfu_decode),
            ]);
        }
        for (key, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                p.push(format!(
                    "GPU {}: {key} = {v} must be a finite number > 0",
                    self.name
                ));
            }
        }
        for (key, v) in [
            ("TFlopsFP8", self.tflops_fp8),
            ("MemoryGiB", self.memory_gib),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                p.push(format!(
                    "GPU {}: {key} = {v} must be a finite number ≥ 0",
                    self.name
                ));
            }
        }
        p
    }

    /// GPU `name` from a hardware config file.
    pub fn from_hardware_file(path: &Path, name: &str) -> Result<Self, LatencyError> {
        let text = crate::input::read_to_string(path).map_err(|source| LatencyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        GpuSpec::from_hardware_json(&text, &path.display().to_string(), name)
    }

    /// GPU `name` from the text of a hardware config. An unknown name is an
    /// error listing the table's names, sorted. `origin` names the source in
    /// messages.
    pub fn from_hardware_json(text: &str, origin: &str, name: &str) -> Result<Self, LatencyError> {
        let table = parse_table(text, origin)?;
        let wanted = name.trim();
        table
            .iter()
            .find(|g| g.name.eq_ignore_ascii_case(wanted))
            .cloned()
            .ok_or_else(|| LatencyError::UnknownGpu {
                name: name.to_string(),
                available: sorted_names(&table),
            })
    }

    /// Problems that stop this spec from driving `roofline-v1` (empty
    /// when usable). Throughputs, bandwidth and MFUs must be finite and > 0;
    /// `MemoryGiB` finite and ≥ 0 (0 = unknown); the overheads finite and ≥ 0
    /// (the reference does not check them; a negative overhead would make
    /// negative step times).
    pub(crate) fn problems_v1(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (key, v) in [
            ("TFlopsPeak", self.tflops_peak),
            ("BwPeakTBs", self.bw_peak_tbs),
            ("BwEffConstant", self.bw_eff_constant),
            ("mfuPrefill", self.mfu_prefill),
            ("mfuDecode", self.mfu_decode),
        ] {
            if !(v.is_finite() && v > 0.0) {
                p.push(format!(
                    "GPU {}: {key} = {v} must be a finite number > 0",
                    self.name
                ));
            }
        }
        for (key, v) in [
            ("MemoryGiB", self.memory_gib),
            ("TOverheadMicros", self.t_overhead_micros),
            ("perLayerOverhead", self.per_layer_overhead),
            ("allReduceLatency", self.all_reduce_latency),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                p.push(format!(
                    "GPU {}: {key} = {v} must be a finite number ≥ 0",
                    self.name
                ));
            }
        }
        p
    }
}

/// Names of the bundled GPUs (HEAD table), sorted.
pub fn bundled_gpu_names() -> Vec<String> {
    // The bundled table is tested to parse; an empty list cannot happen.
    parse_table(BUNDLED_HARDWARE, BUNDLED_ORIGIN)
        .map(|t| sorted_names(&t))
        .unwrap_or_default()
}

/// Names of the GPUs of the bundled February table, sorted.
pub fn bundled_gpu_names_v1() -> Vec<String> {
    parse_table(BUNDLED_HARDWARE_V1, BUNDLED_ORIGIN_V1)
        .map(|t| sorted_names(&t))
        .unwrap_or_default()
}

/// Whether two GPU names denote the same GPU: equal ignoring ASCII case, or
/// aliases of each other (`A100-SXM` = `A100-80`).
pub fn same_gpu(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    a.eq_ignore_ascii_case(b)
        || GPU_ALIASES.iter().any(|group| {
            group.iter().any(|n| n.eq_ignore_ascii_case(a))
                && group.iter().any(|n| n.eq_ignore_ascii_case(b))
        })
}

fn sorted_names(table: &[GpuSpec]) -> Vec<String> {
    let mut names: Vec<String> = table.iter().map(|g| g.name.clone()).collect();
    names.sort();
    names
}

/// Every GPU record of a hardware config, by name. Keys starting with
/// `_` (comments) are skipped; a record must be an object and its known keys
/// numbers; a missing key reads as 0.
fn parse_table(text: &str, origin: &str) -> Result<Vec<GpuSpec>, LatencyError> {
    let parse_err = |message: String| LatencyError::Parse {
        origin: origin.to_string(),
        message,
    };
    let value: Value =
        serde_json::from_str(text).map_err(|e| parse_err(format!("not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(parse_err(
            "a hardware config must be a JSON object mapping GPU names to records".into(),
        ));
    };
    let mut table = Vec::new();
    for (name, record) in &obj {
        if name.starts_with('_') {
            continue;
        }
        let Value::Object(fields) = record else {
            return Err(parse_err(format!(
                "GPU '{name}': expected an object of numbers"
            )));
        };
        let mut gpu = GpuSpec {
            name: name.clone(),
            ..GpuSpec::default()
        };
        for (key, v) in fields {
            let slot = match key.to_ascii_lowercase().as_str() {
                "tflopspeak" => &mut gpu.tflops_peak,
                "tflopsfp8" => &mut gpu.tflops_fp8,
                "bwpeaktbs" => &mut gpu.bw_peak_tbs,
                "bweffconstant" => &mut gpu.bw_eff_constant,
                "toverheadmicros" => &mut gpu.t_overhead_micros,
                "perlayeroverhead" => &mut gpu.per_layer_overhead,
                "mfuprefill" => &mut gpu.mfu_prefill,
                "mfudecode" => &mut gpu.mfu_decode,
                "allreducelatency" => &mut gpu.all_reduce_latency,
                "memorygib" => &mut gpu.memory_gib,
                _ => continue,
            };
            *slot = v.as_f64().ok_or_else(|| {
                parse_err(format!("GPU '{name}': {key} must be a number, got {v}"))
            })?;
        }
        table.push(gpu);
    }
    Ok(table)
}

/// GPU names of a hardware config file, sorted.
pub(crate) fn hardware_file_names(path: &Path) -> Result<Vec<String>, LatencyError> {
    let text = crate::input::read_to_string(path).map_err(|source| LatencyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_table(&text, &path.display().to_string()).map(|t| sorted_names(&t))
}

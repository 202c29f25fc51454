//! Calibrated linear-model coefficients and default hardware per model.
//!
//! The reference simulator ships alpha/beta coefficients fitted against real
//! vLLM runs for (model, GPU, TP, vLLM image) combinations, plus the KV block
//! count vLLM reported, and a default GPU/TP per model (`core-engine.md`
//! §6.6). blis embeds the reachable entries as data
//! (`host/data/linear_coefficients.toml`, parsed once on first use) so that
//! naming a calibrated model is enough to run the linear model.
//!
//! Matching is case-insensitive on the model id; a bare name without an
//! organisation (`qwen2.5-7b-instruct`) matches the part after the `/`. GPU
//! names match case-insensitively and through aliases (`A100-SXM` =
//! `A100-80`). When several vLLM images match, the first entry in file order
//! wins, as in the reference.

use std::sync::OnceLock;

use serde::Deserialize;

use super::gpu::same_gpu;
use super::LinearModel;

const TABLE_TEXT: &str = include_str!("../../../data/linear_coefficients.toml");

/// One calibrated coefficient set.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientEntry {
    /// Model id, lower case (`meta-llama/llama-3.1-8b-instruct`).
    pub id: String,
    /// GPU name (`H100`, `A100-80`).
    pub gpu: String,
    /// Tensor parallelism.
    pub tp: u32,
    /// vLLM image the coefficients were fitted against.
    pub vllm: String,
    /// `[alpha0, alpha1, alpha2]`.
    pub alpha: [f64; 3],
    /// `[beta0, beta1, beta2]`.
    pub beta: [f64; 3],
    /// KV blocks vLLM allocated in the calibration run (block size 16).
    pub total_kv_blocks: u64,
}

/// The GPU, TP and vLLM image a model runs on when a run does not say.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DefaultHardware {
    /// Model id, lower case.
    pub model: String,
    /// GPU name.
    pub gpu: String,
    /// Tensor parallelism.
    pub tp: u32,
    /// vLLM image.
    pub vllm: String,
    /// Case-sensitive HuggingFace repository of the model's `config.json`, if any.
    pub hf_repo: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    coefficients: Vec<CoefficientEntry>,
    defaults: Vec<DefaultHardware>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The embedded file is checked by the tests; failing here is a build defect.
        toml::from_str(TABLE_TEXT).expect("embedded linear_coefficients.toml is valid")
    })
}

/// Every calibrated coefficient set, in lookup order.
pub fn coefficient_entries() -> &'static [CoefficientEntry] {
    &table().coefficients
}

/// Whether a table id matches a model id as given: equal ignoring ASCII
/// case, or — when the given id has no organisation — equal to the part
/// after the `/`.
fn id_matches(table_id: &str, model_id: &str) -> bool {
    let model_id = model_id.trim();
    table_id.eq_ignore_ascii_case(model_id)
        || (!model_id.contains('/')
            && table_id
                .rsplit_once('/')
                .is_some_and(|(_, name)| name.eq_ignore_ascii_case(model_id)))
}

/// The first coefficient set for `model_id` on `gpu` at `tp`, if any.
pub fn lookup_entry(model_id: &str, gpu: &str, tp: u32) -> Option<&'static CoefficientEntry> {
    coefficient_entries()
        .iter()
        .find(|e| e.tp == tp && same_gpu(&e.gpu, gpu) && id_matches(&e.id, model_id))
}

/// Calibrated linear model and KV block count (at block size 16) for
/// `model_id` on `gpu` at tensor parallelism `tp`; `None` when not calibrated.
pub fn lookup_linear_coefficients(
    model_id: &str,
    gpu: &str,
    tp: u32,
) -> Option<(LinearModel, u64)> {
    lookup_entry(model_id, gpu, tp).map(|e| {
        (
            LinearModel {
                alpha: e.alpha,
                beta: e.beta,
            },
            e.total_kv_blocks,
        )
    })
}

/// Calibrated setups of a model as `GPU TP n` strings, in table order
/// (for "did you mean" messages).
pub fn calibrated_setups(model_id: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in coefficient_entries()
        .iter()
        .filter(|e| id_matches(&e.id, model_id))
    {
        let s = format!("{} TP {}", e.gpu, e.tp);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The default GPU and TP of `model_id`, if the table names one.
pub fn default_hardware(model_id: &str) -> Option<&'static DefaultHardware> {
    table()
        .defaults
        .iter()
        .find(|d| id_matches(&d.model, model_id))
}

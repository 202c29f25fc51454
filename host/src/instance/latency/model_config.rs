//! The shape of a transformer model, read from a HuggingFace `config.json`.
//!
//! The roofline step-time model and the KV-capacity derivation need only a
//! handful of architecture facts (layers, hidden size, heads, KV heads, MLP
//! width, bytes per parameter). [`ModelConfig`] holds exactly those. They are
//! read with the rules of `core-engine.md` §6.4 so that any HuggingFace
//! `config.json` works, including multimodal ones whose language model sits
//! under `text_config`.
//!
//! A few public configs are bundled (`host/data/models/`, embedded at compile
//! time) so the common models need no file and no network; any other model is
//! read from a path with [`ModelConfig::from_path`].
//!
//! Parsing never judges whether the shape is usable: a missing field reads as
//! 0, and [`validate_roofline`](super::validate_roofline) reports every
//! problem of model, GPU and TP together.

use std::path::Path;

use serde_json::{Map, Value};

use super::LatencyError;

/// A model bundled with blis: its short name, its HuggingFace id (lower case)
/// and its `config.json`.
struct BundledModel {
    name: &'static str,
    hf_id: &'static str,
    json: &'static str,
}

/// Bundled configs, sorted by short name. Public architecture facts of each
/// model's HuggingFace `config.json`, trimmed to the fields blis reads.
const BUNDLED_MODELS: &[BundledModel] = &[
    BundledModel {
        name: "llama-3.1-8b-instruct",
        hf_id: "meta-llama/llama-3.1-8b-instruct",
        json: include_str!("../../../data/models/llama-3.1-8b-instruct.json"),
    },
    BundledModel {
        name: "qwen2.5-1.5b-instruct",
        hf_id: "qwen/qwen2.5-1.5b-instruct",
        json: include_str!("../../../data/models/qwen2.5-1.5b-instruct.json"),
    },
    BundledModel {
        name: "qwen2.5-3b-instruct",
        hf_id: "qwen/qwen2.5-3b-instruct",
        json: include_str!("../../../data/models/qwen2.5-3b-instruct.json"),
    },
    BundledModel {
        name: "qwen2.5-7b-instruct",
        hf_id: "qwen/qwen2.5-7b-instruct",
        json: include_str!("../../../data/models/qwen2.5-7b-instruct.json"),
    },
    BundledModel {
        name: "qwen3-14b",
        hf_id: "qwen/qwen3-14b",
        json: include_str!("../../../data/models/qwen3-14b.json"),
    },
];

/// `torch_dtype` / `dtype` values blis understands, with their bytes per
/// parameter (§6.4). Anything else reads as 0 and fails validation.
const DTYPES: &[(&str, f64)] = &[
    ("float32", 4.0),
    ("float16", 2.0),
    ("bfloat16", 2.0),
    ("int8", 1.0),
    ("uint8", 1.0),
    ("fp8", 1.0),
    ("int4", 1.0),
    ("nf4", 1.0),
];

/// Architecture facts of a dense decoder-only transformer.
///
/// Counts of 0 mean "missing" and fail [`validate_roofline`](super::validate_roofline);
/// the documented fallbacks (KV heads → heads, MLP width → 4 · hidden) are
/// already applied by the parser.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelConfig {
    /// Where the config came from (bundled name or file path), for messages.
    pub name: String,
    /// `num_hidden_layers`.
    pub num_layers: u32,
    /// `hidden_size`.
    pub hidden_size: u32,
    /// `num_attention_heads`.
    pub num_heads: u32,
    /// KV heads (grouped-query attention); equals `num_heads` when the config
    /// names none.
    pub num_kv_heads: u32,
    /// MLP width; `4 · hidden_size` when the config names none.
    pub intermediate_size: u32,
    /// Bytes per weight and per KV-cache element, from the dtype.
    pub bytes_per_param: f64,
    /// `vocab_size` (informational: the formulas ignore embeddings).
    pub vocab_size: u32,
    /// `max_position_embeddings`: the longest context the model supports, if stated.
    pub max_position_embeddings: Option<u32>,
    /// The dtype string the config gave (`torch_dtype`, else `dtype`).
    pub dtype: Option<String>,
    /// An explicit `head_dim`, if the config has one. The formulas use
    /// `hidden_size / num_heads`; a different explicit value draws a warning.
    pub declared_head_dim: Option<u32>,
    /// The config describes a mixture-of-experts model (the formulas assume a
    /// dense one; a warning says so).
    pub mixture_of_experts: bool,
}

impl ModelConfig {
    /// A dense model from its dimensions (no file involved). `bytes_per_param`
    /// is 2 for bf16/fp16 weights.
    pub fn new(
        name: &str,
        num_layers: u32,
        hidden_size: u32,
        num_heads: u32,
        num_kv_heads: u32,
        intermediate_size: u32,
        bytes_per_param: f64,
    ) -> Self {
        ModelConfig {
            name: name.to_string(),
            num_layers,
            hidden_size,
            num_heads,
            num_kv_heads,
            intermediate_size,
            bytes_per_param,
            ..ModelConfig::default()
        }
    }

    /// A bundled model, by short name (`qwen3-14b`) or HuggingFace id
    /// (`Qwen/Qwen3-14B`), case-insensitively. An unknown name is an error
    /// listing the bundled names.
    pub fn bundled(name: &str) -> Result<Self, LatencyError> {
        match find_bundled(name) {
            Some(m) => ModelConfig::from_hf_json(m.json, m.name),
            None => Err(LatencyError::UnknownModel {
                name: name.to_string(),
                available: bundled_model_names()
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            }),
        }
    }

    /// Read a HuggingFace `config.json`. `path` may also be a directory that
    /// contains one.
    pub fn from_path(path: &Path) -> Result<Self, LatencyError> {
        let file = if path.is_dir() {
            path.join("config.json")
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file).map_err(|source| LatencyError::Read {
            path: file.clone(),
            source,
        })?;
        ModelConfig::from_hf_json(&text, &file.display().to_string())
    }

    /// Parse the text of a HuggingFace `config.json` (rules of §6.4):
    ///
    /// * an object `text_config` is merged over the top level first;
    /// * integers are JSON numbers truncated toward zero; a missing or
    ///   non-numeric field reads as 0;
    /// * KV heads: `num_key_value_heads`, `num_kv_heads`,
    ///   `multi_query_group_num` (first non-zero), else the attention heads;
    /// * MLP width: `intermediate_size`, `ffn_hidden_size`, else `4 · hidden`;
    /// * bytes per parameter from the string `torch_dtype`, else `dtype`:
    ///   float32 → 4; float16, bfloat16 → 2; int8, uint8, fp8, int4, nf4 → 1;
    ///   anything else → 0 (rejected by validation).
    ///
    /// `origin` names the source in messages. Only malformed JSON and
    /// negative or oversized counts are errors here.
    pub fn from_hf_json(text: &str, origin: &str) -> Result<Self, LatencyError> {
        let parse_err = |message: String| LatencyError::Parse {
            origin: origin.to_string(),
            message,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| parse_err(format!("not valid JSON: {e}")))?;
        let Value::Object(mut obj) = value else {
            return Err(parse_err("a model config must be a JSON object".into()));
        };
        if let Some(Value::Object(text_config)) = obj.get("text_config").cloned() {
            for (k, v) in text_config {
                obj.insert(k, v);
            }
        }

        let first = |keys: &[&str]| -> Result<u32, LatencyError> {
            for key in keys {
                let n = count(&obj, key).map_err(parse_err)?;
                if n != 0 {
                    return Ok(n);
                }
            }
            Ok(0)
        };
        let num_layers = first(&["num_hidden_layers"])?;
        let hidden_size = first(&["hidden_size"])?;
        let num_heads = first(&["num_attention_heads"])?;
        let vocab_size = first(&["vocab_size"])?;
        let kv = first(&[
            "num_key_value_heads",
            "num_kv_heads",
            "multi_query_group_num",
        ])?;
        let ffn = first(&["intermediate_size", "ffn_hidden_size"])?;
        let max_pos = first(&["max_position_embeddings"])?;
        let head_dim = first(&["head_dim"])?;

        let dtype = ["torch_dtype", "dtype"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
            .map(str::to_string);
        let bytes_per_param = dtype.as_deref().map_or(0.0, dtype_bytes);

        Ok(ModelConfig {
            name: origin.to_string(),
            num_layers,
            hidden_size,
            num_heads,
            num_kv_heads: if kv == 0 { num_heads } else { kv },
            intermediate_size: if ffn == 0 {
                hidden_size.saturating_mul(4)
            } else {
                ffn
            },
            bytes_per_param,
            vocab_size,
            max_position_embeddings: (max_pos != 0).then_some(max_pos),
            dtype,
            declared_head_dim: (head_dim != 0).then_some(head_dim),
            mixture_of_experts: ["num_local_experts", "num_experts"]
                .iter()
                .any(|k| obj.get(*k).and_then(Value::as_f64).is_some_and(|n| n > 1.0)),
        })
    }

    /// Head dimension the formulas use: `hidden_size / num_heads` (real division).
    pub fn head_dim(&self) -> f64 {
        f64::from(self.hidden_size) / f64::from(self.num_heads)
    }

    /// Things that make the roofline estimate less trustworthy but are not
    /// errors: quantised weights, a mixture of experts, an explicit head
    /// dimension that differs from `hidden_size / num_heads`.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.bytes_per_param > 0.0 && self.bytes_per_param <= 1.0 {
            w.push(format!(
                "model {}: {} byte(s) per parameter — possibly quantized; the roofline \
                 model treats every weight and KV element as that size",
                self.name, self.bytes_per_param
            ));
        }
        if self.mixture_of_experts {
            w.push(format!(
                "model {}: mixture-of-experts config; the roofline formulas assume a dense model",
                self.name
            ));
        }
        if let Some(hd) = self.declared_head_dim {
            if self.num_heads > 0 && f64::from(hd) != self.head_dim() {
                w.push(format!(
                    "model {}: head_dim {} differs from hidden_size / num_attention_heads = {}; \
                     the formulas use the latter",
                    self.name,
                    hd,
                    self.head_dim()
                ));
            }
        }
        w
    }

    /// Problems that stop this config from driving the roofline model or the
    /// KV derivation (empty when usable).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        for (field, v) in [
            ("num_attention_heads", self.num_heads),
            ("num_hidden_layers", self.num_layers),
            ("hidden_size", self.hidden_size),
        ] {
            if v == 0 {
                p.push(format!(
                    "model {}: {field} must be > 0 (missing or 0)",
                    self.name
                ));
            }
        }
        if !(self.bytes_per_param.is_finite() && self.bytes_per_param > 0.0) {
            let accepted: Vec<&str> = DTYPES.iter().map(|(n, _)| *n).collect();
            p.push(match &self.dtype {
                Some(d) if self.bytes_per_param == 0.0 => format!(
                    "model {}: unknown dtype '{d}' (accepted: {})",
                    self.name,
                    accepted.join(", ")
                ),
                None if self.bytes_per_param == 0.0 => format!(
                    "model {}: no torch_dtype or dtype given, so bytes per parameter is unknown \
                     (accepted: {})",
                    self.name,
                    accepted.join(", ")
                ),
                _ => format!(
                    "model {}: bytes per parameter = {} must be a finite number > 0",
                    self.name, self.bytes_per_param
                ),
            });
        }
        p
    }
}

/// Names of the bundled models, sorted.
pub fn bundled_model_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = BUNDLED_MODELS.iter().map(|m| m.name).collect();
    names.sort_unstable();
    names
}

/// The HuggingFace id (lower case) of a bundled model given by short name or
/// id, case-insensitively.
pub fn bundled_model_id(name: &str) -> Option<&'static str> {
    find_bundled(name).map(|m| m.hf_id)
}

fn find_bundled(name: &str) -> Option<&'static BundledModel> {
    let name = name.trim();
    BUNDLED_MODELS
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(name) || m.hf_id.eq_ignore_ascii_case(name))
}

fn dtype_bytes(dtype: &str) -> f64 {
    let d = dtype.trim().to_ascii_lowercase();
    let d = d.strip_prefix("torch.").unwrap_or(&d);
    DTYPES
        .iter()
        .find(|(n, _)| *n == d)
        .map_or(0.0, |(_, b)| *b)
}

/// A count field: a JSON number truncated toward zero; absent or not a number
/// reads as 0; negative or too large is an error.
fn count(obj: &Map<String, Value>, key: &str) -> Result<u32, String> {
    let Some(x) = obj.get(key).and_then(Value::as_f64) else {
        return Ok(0);
    };
    let t = x.trunc();
    if !(0.0..=f64::from(u32::MAX)).contains(&t) {
        return Err(format!(
            "{key} = {x} is not a valid count (expected 0 … {})",
            u32::MAX
        ));
    }
    Ok(t as u32)
}

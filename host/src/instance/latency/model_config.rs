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
        name: "llama-2-7b-hf",
        hf_id: "meta-llama/llama-2-7b-hf",
        json: include_str!("../../../data/models/llama-2-7b-hf.json"),
    },
    BundledModel {
        name: "llama-3.1-70b-instruct",
        hf_id: "meta-llama/llama-3.1-70b-instruct",
        json: include_str!("../../../data/models/llama-3.1-70b-instruct.json"),
    },
    BundledModel {
        name: "llama-3.1-8b-instruct",
        hf_id: "meta-llama/llama-3.1-8b-instruct",
        json: include_str!("../../../data/models/llama-3.1-8b-instruct.json"),
    },
    BundledModel {
        name: "llama-4-scout-17b-16e-instruct-fp8-dynamic",
        hf_id: "redhatai/llama-4-scout-17b-16e-instruct-fp8-dynamic",
        json: include_str!("../../../data/models/llama-4-scout-17b-16e-instruct-fp8-dynamic.json"),
    },
    BundledModel {
        name: "mistral-nemo-instruct-2407",
        hf_id: "mistralai/mistral-nemo-instruct-2407",
        json: include_str!("../../../data/models/mistral-nemo-instruct-2407.json"),
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
    BundledModel {
        name: "yi-34b",
        hf_id: "01-ai/yi-34b",
        json: include_str!("../../../data/models/yi-34b.json"),
    },
];

/// Keys that give the number of routed experts, in the order they are tried.
const EXPERT_COUNT_KEYS: [&str; 5] = [
    "num_experts",
    "moe_num_experts",
    "n_routed_experts",
    "num_local_experts",
    "num_routed_experts",
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
    /// An explicit `head_dim`, if the config has one. The step-time formulas
    /// use `hidden_size / num_heads`; the HEAD KV sizing uses this when set.
    pub declared_head_dim: Option<u32>,
    /// Routed experts per MoE layer: the first of `num_experts`,
    /// `moe_num_experts`, `n_routed_experts`, `num_local_experts`,
    /// `num_routed_experts` that is ≥ 2; 0 = dense.
    pub num_experts: u32,
    /// `num_experts_per_tok` (top-k routing).
    pub num_experts_per_tok: u32,
    /// `moe_intermediate_size`: one routed expert's MLP width (0 = `intermediate_size`).
    pub moe_intermediate_size: u32,
    /// Shared-expert MLP width: `shared_expert_intermediate_size`, else
    /// `n_shared_experts × (moe_intermediate_size or intermediate_size)`; 0 = none.
    pub shared_expert_intermediate_size: u32,
    /// `n_shared_experts` as written (a dense config with it set is an error).
    pub n_shared_experts: u32,
    /// `interleave_moe_layer_step`: every (s+1)-th layer is MoE; 0 = all layers.
    pub interleave_moe_layer_step: u32,
    /// `intermediate_size_mlp`: the dense layers' MLP width in an interleaved
    /// MoE model (0 = `intermediate_size`).
    pub intermediate_size_mlp: u32,
    /// `first_k_dense_replace`: leading dense layers (KV sizing only).
    pub first_k_dense_replace: u32,
    /// `kv_lora_rank` (multi-head latent attention; KV sizing only).
    pub kv_lora_rank: u32,
    /// `qk_rope_head_dim` (multi-head latent attention; KV sizing only).
    pub qk_rope_head_dim: u32,
    /// Bytes per weight from `quantization_config`; 0 = not quantised (the
    /// weights are `bytes_per_param` wide).
    pub quantized_weight_bytes: f64,
    /// `hidden_act` (`""` when absent).
    pub hidden_act: String,
    /// `tie_word_embeddings` (the LM head shares the embedding matrix).
    pub tie_word_embeddings: bool,
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
        let text = crate::input::read_to_string(&file).map_err(|source| LatencyError::Read {
            path: file.clone(),
            source,
        })?;
        ModelConfig::from_hf_json(&text, &file.display().to_string())
    }

    /// Parse the text of a HuggingFace `config.json` (rules of §6.4):
    ///
    /// * an object `text_config` is merged over the top level first;
    /// * counts are JSON whole numbers (a fraction is an error); a missing
    ///   or non-numeric field reads as 0; `head_dim` or
    ///   `interleave_moe_layer_step` given as 0 is an error;
    /// * `quantization_config` must be an object, and its `bits`, when
    ///   present, a number > 0;
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
        let mut num_experts = 0;
        for key in EXPERT_COUNT_KEYS {
            let n = count(&obj, key).map_err(parse_err)?;
            if n >= 2 {
                num_experts = n;
                break;
            }
        }
        let moe_ffn = first(&["moe_intermediate_size"])?;
        let n_shared_experts = first(&["n_shared_experts"])?;
        let shared = match first(&["shared_expert_intermediate_size"])? {
            0 => n_shared_experts.saturating_mul(if moe_ffn > 0 { moe_ffn } else { ffn }),
            n => n,
        };
        let quantized_weight_bytes = match obj.get("quantization_config") {
            Some(q) => quantized_weight_bytes(q).map_err(parse_err)?,
            None => 0.0,
        };
        // Present and 0: no default stands in for these.
        for (key, meaning) in [
            ("head_dim", "the width of one attention head"),
            (
                "interleave_moe_layer_step",
                "the step between mixture-of-experts layers, ≥ 1",
            ),
        ] {
            if obj.get(key).and_then(Value::as_f64) == Some(0.0) {
                return Err(parse_err(format!(
                    "{key} = 0 cannot be meant ({meaning}); give a positive count or remove the key"
                )));
            }
        }

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
            num_experts,
            num_experts_per_tok: first(&["num_experts_per_tok"])?,
            moe_intermediate_size: moe_ffn,
            shared_expert_intermediate_size: shared,
            n_shared_experts,
            interleave_moe_layer_step: first(&["interleave_moe_layer_step"])?,
            intermediate_size_mlp: first(&["intermediate_size_mlp"])?,
            first_k_dense_replace: first(&["first_k_dense_replace"])?,
            kv_lora_rank: first(&["kv_lora_rank"])?,
            qk_rope_head_dim: first(&["qk_rope_head_dim"])?,
            quantized_weight_bytes,
            hidden_act: obj
                .get("hidden_act")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            tie_word_embeddings: obj.get("tie_word_embeddings") == Some(&Value::Bool(true)),
        })
    }

    /// A mixture-of-experts model: at least 2 routed experts.
    pub fn is_moe(&self) -> bool {
        self.num_experts >= 2
    }

    /// Bytes per weight: the quantised width when `quantization_config` gives
    /// one, else `bytes_per_param`.
    pub fn weight_bytes_per_param(&self) -> f64 {
        if self.quantized_weight_bytes > 0.0 {
            self.quantized_weight_bytes
        } else {
            self.bytes_per_param
        }
    }

    /// How the layers split between MoE and dense: `(moe, dense)`. Interleaved
    /// MoE (`interleave_moe_layer_step` s > 0): `L / (s + 1)` MoE layers;
    /// uniform MoE: all; dense: none.
    pub fn layer_split(&self) -> (u32, u32) {
        let l = self.num_layers;
        if !self.is_moe() {
            (0, l)
        } else if self.interleave_moe_layer_step > 0 {
            let moe = l / (self.interleave_moe_layer_step + 1);
            (moe, l - moe)
        } else {
            (l, 0)
        }
    }

    /// The routed experts' MLP width: `moe_intermediate_size`, else `intermediate_size`.
    pub fn expert_ffn(&self) -> u32 {
        if self.moe_intermediate_size > 0 {
            self.moe_intermediate_size
        } else {
            self.intermediate_size
        }
    }

    /// The dense layers' MLP width: `intermediate_size_mlp`, else `intermediate_size`.
    pub fn dense_ffn(&self) -> u32 {
        if self.intermediate_size_mlp > 0 {
            self.intermediate_size_mlp
        } else {
            self.intermediate_size
        }
    }

    /// Problems of the mixture-of-experts fields (empty for a consistent
    /// config): an MoE model needs `num_experts_per_tok` (≤ the expert
    /// count); a config with `num_experts_per_tok` or `n_shared_experts` but
    /// no expert count is rejected rather than silently run as dense.
    pub(crate) fn moe_problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.is_moe() {
            if self.num_experts_per_tok == 0 {
                p.push(format!(
                    "model {}: a mixture-of-experts config ({} experts) needs num_experts_per_tok \
                     (missing or 0)",
                    self.name, self.num_experts
                ));
            } else if self.num_experts_per_tok > self.num_experts {
                p.push(format!(
                    "model {}: num_experts_per_tok = {} exceeds the {} experts",
                    self.name, self.num_experts_per_tok, self.num_experts
                ));
            }
        } else if self.num_experts_per_tok > 0 || self.n_shared_experts > 0 {
            p.push(format!(
                "model {}: looks like a mixture-of-experts config (num_experts_per_tok or \
                 n_shared_experts is set) but has no expert count: set one of {} (≥ 2)",
                self.name,
                EXPERT_COUNT_KEYS.join(", ")
            ));
        }
        p
    }

    /// Head dimension the formulas use: `hidden_size / num_heads` (real division).
    pub fn head_dim(&self) -> f64 {
        f64::from(self.hidden_size) / f64::from(self.num_heads)
    }

    /// Things that make the `roofline-v1` estimate less trustworthy but are
    /// not errors: quantised weights, a mixture of experts, an explicit head
    /// dimension that differs from `hidden_size / num_heads`. (`roofline` and
    /// `trained-physics` model MoE and quantised weights.)
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.bytes_per_param > 0.0 && self.bytes_per_param <= 1.0 {
            w.push(format!(
                "model {}: {} byte(s) per parameter — possibly quantized; roofline-v1 \
                 treats every weight and KV element as that size",
                self.name, self.bytes_per_param
            ));
        }
        if self.is_moe() {
            w.push(format!(
                "model {}: mixture-of-experts config; roofline-v1 assumes a dense model \
                 (roofline and trained-physics model experts)",
                self.name
            ));
        }
        if self.quantized_weight_bytes > 0.0 && self.quantized_weight_bytes != self.bytes_per_param
        {
            w.push(format!(
                "model {}: quantization_config gives {} byte(s) per weight; roofline-v1 ignores it \
                 and uses the dtype's {}",
                self.name, self.quantized_weight_bytes, self.bytes_per_param
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

/// Bytes per weight a `quantization_config` object implies: `bits / 8`
/// (a number or numeric string); else 1 for `quant_method = fp8`; else, for
/// `compressed-tensors`, the first `config_groups.<key>.weights.num_bits > 0`
/// (keys sorted) / 8; else 0 (not known to be quantised).
fn quantized_weight_bytes(q: &Value) -> Result<f64, String> {
    let Value::Object(q) = q else {
        return Err(format!(
            "quantization_config = {q} is not an object; give an object such as {{\"quant_method\": \"fp8\"}} or {{\"bits\": 4}}, or remove the key"
        ));
    };
    let bits = match q.get("bits") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_f64().unwrap_or(f64::NAN)),
        Some(Value::String(s)) => Some(s.trim().parse::<f64>().unwrap_or(f64::NAN)),
        Some(_) => Some(f64::NAN),
    };
    match bits {
        Some(b) if b > 0.0 && b.is_finite() => return Ok(b / 8.0),
        Some(_) => {
            return Err(format!(
                "quantization_config.bits = {}: must be a number of bits > 0 (e.g. 4 or 8)",
                q["bits"]
            ))
        }
        None => {}
    }
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    if method.eq_ignore_ascii_case("fp8") {
        return Ok(1.0);
    }
    if method == "compressed-tensors" {
        if let Some(Value::Object(groups)) = q.get("config_groups") {
            let mut keys: Vec<&String> = groups.keys().collect();
            keys.sort();
            for k in keys {
                let bits = groups[k]
                    .get("weights")
                    .and_then(|w| w.get("num_bits"))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                if bits > 0.0 {
                    return Ok(bits / 8.0);
                }
            }
        }
    }
    Ok(0.0)
}

/// A count field: a JSON whole number; absent or not a number reads as 0;
/// a fraction, a negative or too large number is an error.
fn count(obj: &Map<String, Value>, key: &str) -> Result<u32, String> {
    let Some(x) = obj.get(key).and_then(Value::as_f64) else {
        return Ok(0);
    };
    let t = x.trunc();
    if t != x {
        return Err(format!("{key} = {x} is not a whole number; give a count"));
    }
    if !(0.0..=f64::from(u32::MAX)).contains(&t) {
        return Err(format!(
            "{key} = {x} is not a valid count (expected 0 … {})",
            u32::MAX
        ));
    }
    Ok(t as u32)
}

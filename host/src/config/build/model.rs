//! `[model]`: the latency model, the GPU, and the KV capacity derived from
//! them (with `[instance]`'s block size and KV override).

use std::path::Path;

use super::{one_of, resolve, Problems};
use crate::config::RunFile;
use crate::instance::latency::{
    build_latency, BuiltLatency, KvBlocksSource, LatencyKind, LatencySetup, ModelConfig,
    StepVariant,
};

/// What `[model]` resolved to.
pub(super) struct CheckedModel {
    /// The step-time model and the KV blocks per instance.
    pub latency: BuiltLatency,
    /// Context limit: `instance.max_model_len`, else the model's
    /// `max_position_embeddings` when known.
    pub max_model_len: Option<u32>,
    /// `model.calibration`: the profile applied (as written) and its SHA-256.
    pub calibration: Option<(String, String)>,
}

pub(super) fn check(
    run: &RunFile,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<CheckedModel> {
    let model = &run.model;
    let inst = &run.instance;
    let kind = match model.latency_model.parse::<LatencyKind>() {
        Ok(k) => k,
        Err(_) => {
            problems.error(one_of(
                "model.latency_model",
                &model.latency_model,
                LatencyKind::NAMES,
            ));
            return None;
        }
    };
    let mut ls = LatencySetup::new(kind, &model.name);
    ls.model_config = model.config_path.as_ref().map(|p| resolve(base_dir, p));
    ls.hardware = Some(model.hardware.clone().unwrap_or_else(|| "H100".to_string()));
    ls.hardware_config = model.hardware_config.as_ref().map(|p| resolve(base_dir, p));
    ls.tp = model.tp;
    ls.alpha = model.alpha;
    ls.beta = model.beta.clone();
    let calibration = match &model.calibration {
        Some(p) => match calibrate(run, kind, &resolve(base_dir, p), &mut ls, problems) {
            Ok(hash) => Some((p.display().to_string(), hash)),
            Err(e) => {
                problems.error(format!("model.calibration: {e}"));
                return None;
            }
        },
        None => {
            if model.calibration_extrapolate {
                problems.note(
                    "model.calibration_extrapolate = true does nothing here: there is no model.calibration \
                     (the latency model's own coefficients run)",
                );
            }
            None
        }
    };
    ls.dp = model.dp;
    ls.moe_comm_backend = model.moe_comm_backend.clone();
    ls.moe_expert_load = model.moe_expert_load.clone();
    ls.geometry = model.geometry.clone();
    ls.block_size = inst.block_size.max(1);
    ls.total_kv_blocks = inst.total_kv_blocks.filter(|&b| b > 0);
    if let Some(u) = model.gpu_memory_utilization {
        if !(u.is_finite() && u > 0.0 && u <= 1.0) {
            problems.error(format!(
                "model.gpu_memory_utilization = {u}: must be in (0, 1]"
            ));
        }
        ls.gpu_memory_utilization = u;
    }
    if let Some(l) = &run.lora {
        ls.adapter_reserved_bytes = l.reserved_bytes(&model.name);
    }
    let latency = match build_latency(&ls) {
        Ok(b) => {
            for w in &b.warnings {
                problems.note(w.clone());
            }
            if ls.adapter_reserved_bytes > 0 && b.kv_blocks_source != KvBlocksSource::Derived {
                problems.note(format!(
                    "[lora]: {} bytes of adapter slots are not subtracted from the {:?} KV blocks \
                     (only KV blocks derived from GPU memory reserve them)",
                    ls.adapter_reserved_bytes, b.kv_blocks_source
                ));
            }
            b
        }
        Err(e) => {
            problems.error(format!("[model]: {e}"));
            return None;
        }
    };
    let max_model_len = inst.max_model_len.or_else(|| {
        let cfg = match &model.config_path {
            Some(p) => ModelConfig::from_path(&resolve(base_dir, p)).ok(),
            None => ModelConfig::bundled(&model.name).ok(),
        };
        cfg.and_then(|c| c.max_position_embeddings)
    });
    Some(CheckedModel {
        latency,
        max_model_len,
        calibration,
    })
}

/// Apply a calibration profile's coefficients to `ls` (after checking it
/// fits the run's latency model, model and GPU); returns its SHA-256.
fn calibrate(
    run: &RunFile,
    kind: LatencyKind,
    path: &Path,
    ls: &mut LatencySetup,
    problems: &mut Problems,
) -> Result<String, String> {
    if run.model.alpha.is_some() || run.model.beta.is_some() {
        return Err(format!(
            "{} gives the coefficients, and so do model.alpha/model.beta; keep one of them",
            path.display()
        ));
    }
    let loaded = crate::fit::profile::load(path)?;
    let deployment = crate::fit::profile::Deployment {
        model: run.model.name.clone(),
        hardware: ls.hardware.clone().unwrap_or_default(),
        tp: ls.tp.unwrap_or(1),
    };
    let variant = StepVariant::parse(
        run.model.moe_expert_load.as_deref(),
        run.model.geometry.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let note = loaded.profile.check_applies(
        path,
        kind.name(),
        variant,
        &deployment,
        run.model.calibration_extrapolate,
    )?;
    if let Some(n) = note {
        problems.note(n);
    }
    ls.alpha = Some(loaded.profile.coefficients.alpha);
    ls.beta = loaded.profile.coefficients.beta.clone();
    Ok(loaded.sha256)
}

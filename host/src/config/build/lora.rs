//! `[lora]`: LoRA adapters — checked against the model served and the
//! workload's adapter names, then installed on every instance.

use super::Problems;
use crate::config::{LoraSection, RunFile};
use crate::instance::lora::{LoraConfig, OverheadTier};
use crate::instance::Instance;
use crate::workload::Workload;

/// What `[lora]` resolved to: the per-instance settings.
pub(super) struct CheckedLora {
    config: LoraConfig,
}

/// The run-file key of the first client naming adapter `name`.
fn client_key(run: &RunFile, name: &str) -> String {
    let clients = run.workload.clients.as_deref().unwrap_or(&[]);
    for (i, c) in clients.iter().enumerate() {
        if c.adapter.as_deref() == Some(name) {
            return format!("workload.clients[{i}].adapter");
        }
        if let Some(m) = &c.adapter_mix {
            if let Some(k) = m.ids.iter().position(|x| x == name) {
                return format!("workload.clients[{i}].adapter_mix.ids[{k}]");
            }
        }
    }
    match &run.workload.trace_v2 {
        Some(t) => format!("{} (column adapter)", t.data),
        None => "workload".to_string(),
    }
}

/// Check `[lora]`; `None` without it (or when it is invalid).
pub(super) fn check(
    run: &RunFile,
    workload: Option<&Workload>,
    problems: &mut Problems,
) -> Option<CheckedLora> {
    let names = workload.map_or(&[][..], Workload::adapter_names);
    let Some(lora) = &run.lora else {
        if let Some(name) = names.first() {
            problems.error(format!(
                "{} = \"{name}\": the run file has no [lora] section; declare the adapter in \
                 [[lora.adapters]] (id, rank) or remove it from the workload",
                client_key(run, name)
            ));
        }
        return None;
    };
    let before = problems.errors.len();
    check_section(run, lora, problems);
    let mut ranks = Vec::with_capacity(names.len());
    for name in names {
        match lora.adapters.iter().find(|a| &a.id == name) {
            Some(a) => ranks.push(a.rank),
            None => {
                problems.error(format!(
                    "{} = \"{name}\": no adapter of that id in [[lora.adapters]] (declared: {})",
                    client_key(run, name),
                    lora.adapters
                        .iter()
                        .map(|a| a.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                ranks.push(0);
            }
        }
    }
    if problems.errors.len() > before {
        return None;
    }
    let mut tiers: Vec<OverheadTier> = lora
        .step_overhead_tiers
        .iter()
        .filter_map(|(r, t)| {
            r.parse::<u32>().ok().map(|rank| OverheadTier {
                rank,
                k6: t.k6,
                k7: t.k7,
            })
        })
        .collect();
    tiers.sort_by_key(|t| t.rank);
    Some(CheckedLora {
        config: LoraConfig {
            capacity: lora.adapter_capacity,
            ranks,
            load_base_latency_us: lora.load_base_latency_us,
            load_bandwidth_bytes_us: lora.load_bandwidth_bytes_us,
            footprint_bytes_per_rank: lora.footprint_bytes_per_rank,
            tiers,
        },
    })
}

fn check_section(run: &RunFile, lora: &LoraSection, problems: &mut Problems) {
    if lora.adapter_capacity == 0 && !lora.adapters.is_empty() {
        problems.error(format!(
            "lora.adapter_capacity = 0 with {} adapter(s) declared: an instance needs at least one \
             adapter slot to serve them (set adapter_capacity ≥ 1)",
            lora.adapters.len()
        ));
    }
    let served = super::models::served(run);
    for (i, a) in lora.adapters.iter().enumerate() {
        if a.id.is_empty() {
            problems.error(format!(
                "lora.adapters[{i}].id is empty: give every adapter an id"
            ));
        } else if lora.adapters[..i].iter().any(|b| b.id == a.id) {
            problems.error(format!(
                "lora.adapters[{i}].id = \"{}\": another adapter has that id",
                a.id
            ));
        }
        if a.rank == 0 {
            problems.error(format!(
                "lora.adapters[{i}].rank = 0 (adapter \"{}\"): a LoRA rank is at least 1",
                a.id
            ));
        }
        if let Some(m) = &a.base_model {
            if !served.contains(m) {
                problems.error(format!(
                    "lora.adapters[{i}].base_model = \"{m}\" (adapter \"{}\"): no instance serves that \
                     model (served: {}); give a served model or leave base_model out",
                    a.id,
                    served.join(", ")
                ));
            }
        }
    }
    let l = lora.load_base_latency_us;
    if !(l.is_finite() && l >= 0.0) {
        problems.error(format!(
            "lora.load_base_latency_us = {l}: must be a finite number ≥ 0"
        ));
    }
    let b = lora.load_bandwidth_bytes_us;
    if !(b.is_finite() && b > 0.0) {
        problems.error(format!(
            "lora.load_bandwidth_bytes_us = {b}: must be a finite number > 0"
        ));
    }
    if lora.footprint_bytes_per_rank == 0 {
        problems.error("lora.footprint_bytes_per_rank = 0: must be at least 1 byte");
    }
    for (r, t) in &lora.step_overhead_tiers {
        if !r.parse::<u32>().is_ok_and(|r| r > 0) {
            problems.error(format!(
                "lora.step_overhead_tiers.\"{r}\": a tier's key is its rank, an integer ≥ 1"
            ));
        }
        for (k, v) in [("k6", t.k6), ("k7", t.k7)] {
            if !(v.is_finite() && v >= 0.0) {
                problems.error(format!(
                    "lora.step_overhead_tiers.\"{r}\".{k} = {v}: must be a finite number ≥ 0"
                ));
            }
        }
    }
}

impl CheckedLora {
    /// Give every instance its adapter state.
    pub(super) fn install(self, instances: &mut [Instance]) {
        for i in instances {
            i.set_lora(self.config.clone());
        }
    }
}

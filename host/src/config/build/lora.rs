//! `[lora]`: LoRA adapters — checked against the model served and the
//! workload's adapter names, then installed on every instance.

use std::collections::HashMap;

use super::Problems;
use crate::config::bounds::short_number;
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
    let by_id = by_id(lora);
    check_section(run, lora, &by_id, problems);
    let mut ranks = Vec::with_capacity(names.len());
    for name in names {
        match by_id.get(name.as_str()).map(|&j| &lora.adapters[j]) {
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
    check_base_models(run, lora, &by_id, problems);
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

/// Every client's adapters adapt the model its requests are for (an
/// adapter of one base model never serves another model's requests).
fn check_base_models(
    run: &RunFile,
    lora: &LoraSection,
    by_id: &HashMap<&str, usize>,
    problems: &mut Problems,
) {
    let clients = run.workload.clients.as_deref().unwrap_or(&[]);
    for (i, c) in clients.iter().enumerate() {
        let model = c.model.as_deref().unwrap_or(&run.model.name);
        let named = c.adapter.iter().map(|a| (a, "adapter".to_string())).chain(
            c.adapter_mix.iter().flat_map(|m| {
                m.ids
                    .iter()
                    .enumerate()
                    .map(|(k, a)| (a, format!("adapter_mix.ids[{k}]")))
            }),
        );
        for (name, key) in named {
            let Some(&j) = by_id.get(name.as_str()) else {
                continue;
            };
            let a = &lora.adapters[j];
            let base = a.base_model.as_deref().unwrap_or(&run.model.name);
            if base != model {
                problems.error(format!(
                    "workload.clients[{i}].{key} = \"{name}\": the adapter adapts {base} \
                     (lora.adapters[{j}].base_model{}) but the client's requests are for {model} \
                     (workload.clients[{i}].model{}); an adapter serves only its base model's \
                     requests: give the client model = \"{base}\" or an adapter of {model}",
                    if a.base_model.is_none() {
                        ", default [model].name"
                    } else {
                        ""
                    },
                    if c.model.is_none() {
                        ", default [model].name"
                    } else {
                        ""
                    },
                ));
            }
        }
    }
}

/// Each adapter id → its first index in `[[lora.adapters]]`.
fn by_id(lora: &LoraSection) -> HashMap<&str, usize> {
    let mut m = HashMap::with_capacity(lora.adapters.len());
    for (i, a) in lora.adapters.iter().enumerate() {
        m.entry(a.id.as_str()).or_insert(i);
    }
    m
}

/// Largest LoRA rank (vLLM's `--max-lora-rank` goes to 512).
const MAX_RANK: u32 = 4096;
/// Most adapter slots per instance.
const MAX_CAPACITY: u32 = 4096;
/// Largest adapter bytes per rank (1 GiB; an 8B model's all-linear adapter
/// is about 5 MiB per rank).
const MAX_FOOTPRINT: u64 = 1 << 30;
/// Longest fixed load time, µs (an hour).
const MAX_LOAD_LATENCY_US: f64 = 3.6e9;
/// Load bandwidth bounds, bytes per µs (1 KB/s to 1 PB/s).
const BANDWIDTH_RANGE: (f64, f64) = (1e-3, 1e9);
/// Largest step-overhead factor per distinct adapter.
const MAX_TIER_FACTOR: f64 = 100.0;

/// The numeric keys of `[lora]` within what can be meant (so a load time
/// never overflows simulated time and blames another key).
fn check_bounds(lora: &LoraSection, problems: &mut Problems) {
    let l = lora.load_base_latency_us;
    if !(l.is_finite() && (0.0..=MAX_LOAD_LATENCY_US).contains(&l)) {
        problems.error(format!(
            "lora.load_base_latency_us = {}: must be a number of µs from 0 to {} (an hour)",
            short_number(l),
            short_number(MAX_LOAD_LATENCY_US)
        ));
    }
    let b = lora.load_bandwidth_bytes_us;
    let (lo, hi) = BANDWIDTH_RANGE;
    if !(b.is_finite() && (lo..=hi).contains(&b)) {
        problems.error(format!(
            "lora.load_bandwidth_bytes_us = {}: must be from {lo} to {} bytes per µs (1 KB/s to \
             1 PB/s; 25000 = 25 GB/s)",
            short_number(b),
            short_number(hi)
        ));
    }
    let f = lora.footprint_bytes_per_rank;
    if f == 0 || f > MAX_FOOTPRINT {
        problems.error(format!(
            "lora.footprint_bytes_per_rank = {f}: must be from 1 byte to {MAX_FOOTPRINT} (1 GiB) \
             per unit of rank"
        ));
    }
    if lora.adapter_capacity > MAX_CAPACITY {
        problems.error(format!(
            "lora.adapter_capacity = {}: at most {MAX_CAPACITY} adapter slots per instance",
            lora.adapter_capacity
        ));
    }
}

fn check_section(
    run: &RunFile,
    lora: &LoraSection,
    by_id: &HashMap<&str, usize>,
    problems: &mut Problems,
) {
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
        } else if by_id.get(a.id.as_str()) != Some(&i) {
            problems.error(format!(
                "lora.adapters[{i}].id = \"{}\": another adapter has that id",
                a.id
            ));
        }
        if a.rank == 0 || a.rank > MAX_RANK {
            problems.error(format!(
                "lora.adapters[{i}].rank = {} (adapter \"{}\"): a LoRA rank is from 1 to {MAX_RANK}",
                a.rank, a.id
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
    check_bounds(lora, problems);
    for (r, t) in &lora.step_overhead_tiers {
        if !r.parse::<u32>().is_ok_and(|r| r > 0) {
            problems.error(format!(
                "lora.step_overhead_tiers.\"{r}\": a tier's key is its rank, an integer ≥ 1"
            ));
        }
        for (k, v) in [("k6", t.k6), ("k7", t.k7)] {
            if !(v.is_finite() && (0.0..=MAX_TIER_FACTOR).contains(&v)) {
                problems.error(format!(
                    "lora.step_overhead_tiers.\"{r}\".{k} = {}: must be a number from 0 to \
                     {MAX_TIER_FACTOR} (a step's extra time per distinct adapter, as a fraction of \
                     the step: 0.05 = 5 %)",
                    short_number(v)
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

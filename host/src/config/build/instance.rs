//! `[instance]`: batch limits, KV geometry, scheduler and preemption policy.

use super::model::CheckedModel;
use super::{one_of, Problems};
use crate::config::InstanceSection;
use crate::instance::{Instance, InstanceConfig, KvOffloadConfig, PreemptionKind, SchedulerKind};

/// Largest cluster a run may describe (each instance costs memory up front).
pub const MAX_INSTANCES: u32 = 65_536;

/// What `[instance]` resolved to.
pub(super) struct CheckedInstance {
    scheduler: SchedulerKind,
    preemption: PreemptionKind,
}

pub(super) fn check(inst: &InstanceSection, problems: &mut Problems) -> Option<CheckedInstance> {
    if inst.count == 0 {
        problems.error("instance.count = 0: a cluster needs at least one instance");
    } else if inst.count > MAX_INSTANCES {
        problems.error(format!(
            "instance.count = {}: at most {MAX_INSTANCES} instances are supported",
            inst.count
        ));
    }
    for (k, v) in [
        ("instance.max_num_seqs", inst.max_num_seqs),
        (
            "instance.max_num_batched_tokens",
            inst.max_num_batched_tokens,
        ),
        ("instance.block_size", inst.block_size),
    ] {
        if v == 0 {
            problems.error(format!("{k} = 0: must be at least 1"));
        }
    }
    if inst.total_kv_blocks == Some(0) {
        problems.error("instance.total_kv_blocks = 0: must be at least 1 (or absent to derive it)");
    }
    if inst.max_model_len == Some(0) {
        problems.error("instance.max_model_len = 0: must be at least 1 (or absent)");
    }
    let scheduler = match inst.scheduler.as_str() {
        "fcfs" => Some(SchedulerKind::Fcfs),
        "priority-fcfs" => Some(SchedulerKind::PriorityFcfs),
        "sjf" => Some(SchedulerKind::Sjf),
        "reverse-priority" => Some(SchedulerKind::ReversePriority),
        s => {
            problems.error(one_of(
                "instance.scheduler",
                s,
                &["fcfs", "priority-fcfs", "sjf", "reverse-priority"],
            ));
            None
        }
    };
    let preemption = match inst.preemption.as_str() {
        "fcfs" => Some(PreemptionKind::Fcfs),
        "priority" => Some(PreemptionKind::Priority),
        s => {
            problems.error(one_of("instance.preemption", s, &["fcfs", "priority"]));
            None
        }
    };
    Some(CheckedInstance {
        scheduler: scheduler?,
        preemption: preemption?,
    })
}

impl CheckedInstance {
    /// The instances, all alike.
    pub(super) fn create(
        self,
        inst: &InstanceSection,
        model: &CheckedModel,
        kv_offload: Option<KvOffloadConfig>,
    ) -> Result<Vec<Instance>, String> {
        let config = InstanceConfig {
            max_num_seqs: inst.max_num_seqs,
            max_num_batched_tokens: inst.max_num_batched_tokens,
            long_prefill_token_threshold: inst.long_prefill_token_threshold,
            block_size: inst.block_size,
            total_kv_blocks: model.latency.total_kv_blocks,
            max_model_len: model.max_model_len,
            scheduler: self.scheduler,
            preemption: self.preemption,
            kv_offload,
        };
        config.validate().map_err(|e| format!("[instance]: {e}"))?;
        Ok((0..inst.count)
            .map(|i| Instance::new(i, config.clone(), model.latency.model.clone()))
            .collect())
    }
}

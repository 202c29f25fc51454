//! `[instance]`: batch limits, KV geometry, scheduler and preemption policy.

use super::model::CheckedModel;
use super::Problems;
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
    // The native orders and victim choices; any other name is a plugin
    // (see `instance_policies`).
    let scheduler = match inst.scheduler.as_str() {
        "fcfs" => SchedulerKind::Fcfs,
        "priority-fcfs" => SchedulerKind::PriorityFcfs,
        "sjf" => SchedulerKind::Sjf,
        "reverse-priority" => SchedulerKind::ReversePriority,
        _ => SchedulerKind::Custom,
    };
    let preemption = match inst.preemption.as_str() {
        "fcfs" => PreemptionKind::Fcfs,
        "priority" => PreemptionKind::Priority,
        _ => PreemptionKind::Custom,
    };
    for (key, native, params) in [
        (
            "scheduler",
            scheduler != SchedulerKind::Custom,
            &inst.scheduler_params,
        ),
        (
            "preemption",
            preemption != PreemptionKind::Custom,
            &inst.preemption_params,
        ),
    ] {
        if native && !params.is_empty() {
            problems.error(format!(
                "instance.{key}_params is given but instance.{key} is a native policy without parameters; \
                 give the name of a {key} plugin, or remove the params"
            ));
        }
    }
    Some(CheckedInstance {
        scheduler,
        preemption,
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
        self.create_from(0, inst, model, kv_offload)
    }

    /// [`CheckedInstance::create`], numbering the instances from `first`
    /// (a P/D pool).
    pub(super) fn create_from(
        self,
        first: u32,
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
            async_scheduling: inst.async_scheduling,
        };
        config.validate().map_err(|e| format!("[instance]: {e}"))?;
        Ok((0..inst.count)
            .map(|i| Instance::new(first + i, config.clone(), model.latency.model.clone()))
            .collect())
    }
}

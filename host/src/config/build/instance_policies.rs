//! The plugin side of `[instance]`: a `scheduler` or `preemption` that is
//! not one of the native policies names a plugin of that kind, created once
//! per instance (each with its own seed) after the libraries are loaded.

use super::derive_seed;
use super::policies::params_text;
use crate::config::InstanceSection;
use crate::instance::{Instance, PreemptionKind, SchedulerKind};
use crate::plugins::Registry;

/// Give every instance its scheduler and preemption plugins, if any.
pub(super) fn install(
    inst: &InstanceSection,
    seed: u64,
    registry: &Registry,
    instances: &mut [Instance],
) -> Result<(), String> {
    for (i, instance) in instances.iter_mut().enumerate() {
        if instance.config().scheduler == SchedulerKind::Custom {
            let key = registry
                .scheduler(
                    &inst.scheduler,
                    &params_text(&inst.scheduler_params),
                    derive_seed(seed, &format!("scheduler/{i}")),
                )
                .map_err(|e| format!("instance.scheduler = \"{}\": {e}", inst.scheduler))?;
            instance.set_sort_key(Box::new(key));
        }
        if instance.config().preemption == PreemptionKind::Custom {
            let choice = registry
                .preemption(
                    &inst.preemption,
                    &params_text(&inst.preemption_params),
                    derive_seed(seed, &format!("preemption/{i}")),
                )
                .map_err(|e| format!("instance.preemption = \"{}\": {e}", inst.preemption))?;
            instance.set_victim_choice(Box::new(choice));
        }
    }
    Ok(())
}

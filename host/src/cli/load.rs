//! `blis run`/`validate`: the clap flags as the library's run description
//! ([`session::Base`] + [`session::Overrides`]), loaded by
//! [`session::load_run`].

use super::commands::Failure;
use super::RunArgs;
use crate::config::{RunFile, Source};
use crate::session::{self, Base, Overrides};

impl RunArgs {
    /// The run file these flags name (or the built-in scenario).
    pub fn base(&self) -> Base {
        self.run_file.clone().map_or(Base::Builtin, Base::File)
    }

    /// Every flag but the run file and `--quiet`, as the library's overrides.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            seed: self.seed,
            num_instances: self.num_instances,
            rate: self.rate,
            num_requests: self.num_requests,
            horizon: self.horizon,
            kv_cpu_blocks: self.kv_cpu_blocks,
            pd_decider: self.pd_decider.clone(),
            pd_prefix_threshold: self.pd_prefix_threshold,
            kv_transfer_bandwidth: self.kv_transfer_bandwidth,
            admission_policy: self.admission_policy.clone(),
            routing_policy: self.routing_policy.clone(),
            routing_scorers: self.routing_scorers.clone(),
            epp_config: self.epp_config.clone(),
            results_path: self.results_path.clone(),
            timeseries_path: self.timeseries_path.clone(),
            trace_path: self.trace_path.clone(),
            trace_output: self.trace_output.clone(),
            workload: self.workload.clone(),
            prompt_tokens: self.prompt_tokens,
            prompt_tokens_stdev: self.prompt_tokens_stdev,
            prompt_tokens_min: self.prompt_tokens_min,
            prompt_tokens_max: self.prompt_tokens_max,
            output_tokens: self.output_tokens,
            output_tokens_stdev: self.output_tokens_stdev,
            output_tokens_min: self.output_tokens_min,
            output_tokens_max: self.output_tokens_max,
            prefix_tokens: self.prefix_tokens,
            sets: self.sets.clone(),
            plugins: self.plugins.clone(),
        }
    }
}

/// Read the run file (or the default) and apply the command-line overrides;
/// notes go to stderr.
pub fn load_run(args: &RunArgs) -> Result<(RunFile, Source), Failure> {
    session::load_run(&args.base(), &args.overrides(), |n| eprintln!("note: {n}"))
}

//! inference-perf workloads: `[workload.inference_perf]` (shared system
//! prompts, users per prompt, fixed lengths, stages of constant rate,
//! optional multi-turn chat as closed-loop sessions), expanded into
//! synthetic clients with the reference simulator's rules.
//!
//! [`spec`] is the table as parsed (single values checked with their line);
//! [`expand`] turns it into clients and arrival schedules for the generator;
//! [`convert`] reads inference-perf's own YAML (`blis convert inference-perf`).

mod convert;
mod expand;
mod spec;

#[cfg(test)]
mod tests;

pub use convert::convert_inference_perf;
pub(crate) use expand::expand;
pub use expand::MAX_USERS;
pub use spec::{InferencePerfSpec, SharedPrefixSpec, StageSpec};

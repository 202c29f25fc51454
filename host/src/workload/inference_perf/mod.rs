//! inference-perf workloads: `[workload.inference_perf]` (shared system
//! prompts, users per prompt, fixed lengths, stages of constant rate,
//! optional multi-turn chat), driven by the client `client` names: the
//! reference simulator's reading of the profile, or a release of the real
//! client as it runs.
//!
//! [`spec`] is the table as parsed (single values checked with their line);
//! [`client`] names the clients and what each release does; [`expand`]
//! turns the table into clients and arrival schedules for the generator
//! (the reference); [`driver`] is a real client's dispatch (open loop,
//! stages drained one after the other, worker slots, sessions' rounds one
//! at a time); [`convert`] reads inference-perf's own YAML and result
//! folders (`blis convert inference-perf`).

pub mod client;
mod convert;
mod driver;
mod expand;
mod spec;

#[cfg(test)]
mod tests;

pub use convert::{convert_inference_perf, convert_inference_perf_dir};
pub(crate) use driver::Driver;
pub use expand::MAX_USERS;
pub(crate) use expand::{check_client, expand};
pub use spec::{InferencePerfSpec, SharedPrefixSpec, StageSpec};

//! The TOML run file: what a run is, checked before anything runs.
//!
//! [`RunFile`] mirrors the file (`serde(deny_unknown_fields)` everywhere, so
//! a misspelt key is an error naming the accepted keys, with
//! `file:line:column`). Command-line flags override the file by editing its
//! TOML table before it is deserialised ([`overrides`]). [`build`] validates
//! the result and assembles a [`ClusterSetup`](crate::cluster::ClusterSetup).

pub mod bounds;
pub mod build;
mod control_sections;
pub mod epp_config;
mod flow_sections;
mod lora;
pub mod outputs;
pub mod overrides;
mod pools;
mod run_file;
pub mod seed;
mod serve_section;
pub mod warnings;

pub use build::{build, derive_seed, get_str, resolve, BuiltRun, MAX_INSTANCES, PATH_KEYS};
pub use control_sections::*;
pub use flow_sections::*;
pub use lora::{AdapterSection, LoraSection, TierSection};
pub use pools::{PdSection, PoolSection};
pub use run_file::*;
pub use serve_section::{FaultKind, FaultSection, ServeSection};

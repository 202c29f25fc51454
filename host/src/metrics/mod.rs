//! Metrics: what a run records ([`Collector`]), exact summary statistics
//! ([`distribution`]), fitness ([`fitness`]) and the JSON report
//! ([`report`]) — the only place that knows the output format — and
//! per-stage records of staged workloads ([`stages`]).

mod collector;
pub mod distribution;
pub mod fitness;
pub mod report;
pub mod stages;

pub use collector::{
    result_json, ClassRecord, Collector, InstanceRecord, ResultsWriter, TenantRecord,
};

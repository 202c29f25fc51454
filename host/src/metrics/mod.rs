//! Metrics: what a run records ([`Collector`]), exact summary statistics
//! ([`distribution`]), latency populations kept exactly or sketched
//! ([`population`], `output.percentiles`), fitness ([`fitness`]) and the JSON report
//! ([`report`]) — the only place that knows the report format —, per-stage
//! records of staged workloads ([`stages`]) and the time series
//! ([`timeseries`], `output.timeseries_path`), SLO attainment and goodput
//! ([`slo`], `[slo]`), post-hoc saturation verdicts ([`saturation`],
//! `[saturation]`), per-adapter metrics of `[lora]` ([`adapters`]).

pub mod adapters;
pub mod client;
mod collector;
pub mod distribution;
pub mod fitness;
pub mod models;
pub mod pd_report;
pub mod population;
pub mod report;
pub mod saturation;
pub mod slo;
pub mod stages;
pub mod timeseries;
pub mod trace_export;

pub use collector::{
    class_index, result_json, ClassRecord, Collector, InstanceRecord, RequestSink, ResultsWriter,
    TenantRecord,
};

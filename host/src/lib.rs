//! blis: a discrete-event simulator of LLM inference serving clusters whose
//! admission, routing and scoring policies are plugins.
//!
//! Data flows one way:
//!
//! ```text
//! workload ──► cluster loop ──► admission ──► routing ──► instance engines
//!                (one clock)                               │
//!   JSON report ◄── metrics aggregation ◄── request records ┘
//! ```
//!
//! * [`engine`] — the event queue and the clock.
//! * [`instance`] — one vLLM-like server: wait queue, batch formation, KV cache, latency models.
//! * [`cluster`] — the shared-clock pipeline, snapshots, weighted routing, decision traces.
//! * [`workload`] — request generators, sessions, trace replay.
//! * [`metrics`] — per-request records, aggregation, fitness, the JSON report.
//! * [`output`] — output paths checked against the inputs; atomic output files.
//! * [`session`] — the entry point: load a run (run file, overrides, replayed trace), simulate it, sweep.
//! * [`config`] — the TOML run file.
//! * [`plugins`] — loading policy libraries and the policy registry.
//! * [`plan`] — `blis plan`: the cheapest fleet that meets the SLOs, by search over a space of shapes and counts.
//! * [`search`] — the evaluation engine of `blis plan` and `blis tune`: candidates → simulations (cached, resumable, parallel) → metrics.
//! * [`sweep`] — parameter sweeps: grids of runs in parallel, resumable, sharded, tidy results.
//! * [`fit`] — `blis calibrate fit`: latency-model coefficients fitted to measurements.
//! * [`trace_v2`] — the TraceV2 trace format (header YAML + data CSV): reader and atomic writer.
//! * [`calibrate`] — `blis calibrate`: a real trace against a replay's SimResults.
//! * [`observe`] — `blis observe`: drive a real OpenAI-compatible server, record a TraceV2.
//! * [`serve`] — `blis serve`: the run file's instances as simulated vLLM servers on real sockets.
//! * [`html_report`] — `blis report`: a self-contained HTML page of plots from a run or a sweep.
//!
//! Architecture invariant: only `metrics::report` builds the report and only
//! the CLI (`cli::print_stdout`, called from `main.rs`) writes to stdout; the
//! engine and instances know nothing of plugins, TOML or JSON. [`cli`] is
//! the top layer: nothing else in the crate imports it (everything that
//! simulates goes through [`session`]); `tests/tests/tidy.rs` holds to that.

pub mod alloc;
pub mod calibrate;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod control;
pub mod engine;
pub mod fit;
pub mod gateway;
pub mod html_report;
pub mod input;
pub mod instance;
pub mod metrics;
#[cfg(feature = "observe")]
pub mod observe;
pub mod output;
pub mod plan;
pub mod plugins;
pub mod prompt;
pub mod request;
pub mod search;
#[cfg(feature = "serve")]
pub mod serve;
pub mod session;
pub mod sweep;
pub mod text;
pub mod trace_v2;
pub mod tune;
pub mod workload;

#[cfg(test)]
mod campaign;

//! The TraceV2 header YAML (spec §2.1): every key typed, unknown keys
//! rejected at every level (`deny_unknown_fields`), read and written with
//! serde_yaml_ng (the YAML crate the project already uses for
//! workload-spec conversion).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::TraceV2Error;

/// Who wrote the trace (`mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceMode {
    /// Recorded from a real server by `blis observe`; send and chunk times
    /// are Unix-epoch µs.
    Real,
    /// Written by `blis run --trace-output`.
    Generated,
    /// Written by `blis replay --trace-output`.
    Replayed,
}

impl TraceMode {
    /// The YAML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceMode::Real => "real",
            TraceMode::Generated => "generated",
            TraceMode::Replayed => "replayed",
        }
    }
}

/// `session_context_growth`: the only accepted value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionContextGrowth {
    /// Each session keeps one growing token buffer; a round's `input_tokens`
    /// is the round's new tokens (spec §2.4).
    Accumulate,
}

/// `server`: the served deployment (each field omitted when zero/empty).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerInfo {
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub server_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tensor_parallel: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_num_seqs: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub block_size: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub gpu_memory_utilization: f64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_model_len: u64,
}

/// `network`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkInfo {
    /// Measured (or stated) round-trip time, ms.
    #[serde(default)]
    pub measured_rtt_ms: f64,
}

/// One class's goodput targets, ms (0 = no gate on that dimension).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoodputTarget {
    #[serde(default)]
    pub ttft_ms: f64,
    #[serde(default)]
    pub itl_ms: f64,
    #[serde(default)]
    pub e2e_ms: f64,
}

/// Where observed KV hit counts came from (§2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvMetricsSource {
    /// `vllm:kv_offload_tiering_block_hits` / `_block_queries`.
    #[serde(rename = "tiered")]
    Tiered,
    /// `vllm:gpu_prefix_cache_hits` / `_queries`.
    #[serde(rename = "gpu-prefix-cache-fallback")]
    GpuPrefixCacheFallback,
}

/// `observed_kv_metrics` (§2.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedKvMetrics {
    pub source: KvMetricsSource,
    pub hit_rate: f64,
    pub block_hits: f64,
    pub block_queries: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_time_total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_time_total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_commit: Option<String>,
}

/// A TraceV2 header. Keys in the order the writers emit them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    /// Written as 3; not checked on load.
    #[serde(default)]
    pub trace_version: i64,
    /// `microseconds` (run/replay) or `us` (observe); informational.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_unit: String,
    /// RFC 3339 UTC (observe only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    pub mode: TraceMode,
    /// Leading dispatches observe sent but did not record; calibrate's
    /// default exclusion.
    #[serde(default)]
    pub warm_up_requests: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_seed: Option<i64>,
    /// Spec path, or `preset:<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_context_growth: Option<SessionContextGrowth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkInfo>,
    /// Class → targets (classes in name order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput_slo_targets: Option<BTreeMap<String, GoodputTarget>>,
    /// The reference's resolved KV-offload settings, carried verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_offload: Option<serde_yaml_ng::Mapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_kv_metrics: Option<ObservedKvMetrics>,
}

/// The version the writers put in `trace_version`.
pub const TRACE_VERSION: i64 = 3;

impl TraceHeader {
    /// A header as the writers start one: version 3, `time_unit
    /// microseconds`, `mode`, nothing else.
    pub fn new(mode: TraceMode) -> TraceHeader {
        TraceHeader {
            trace_version: TRACE_VERSION,
            time_unit: "microseconds".to_string(),
            created_at: None,
            mode,
            warm_up_requests: 0,
            workload_seed: None,
            workload_spec: None,
            session_context_growth: None,
            server: None,
            network: None,
            goodput_slo_targets: None,
            kv_offload: None,
            observed_kv_metrics: None,
        }
    }

    /// The header as YAML text.
    pub fn to_yaml(&self) -> String {
        // Serialising plain structs, maps of strings and numbers cannot fail.
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

const KEYS: &str = "trace_version, time_unit, created_at, mode, warm_up_requests, workload_seed, \
workload_spec, session_context_growth, server, network, goodput_slo_targets, kv_offload, \
observed_kv_metrics";

/// Parse header text; `file` names it in messages.
pub fn parse_header(text: &str, file: &str) -> Result<TraceHeader, TraceV2Error> {
    let header = parse_header_text(text, file)?;
    if let Some(n) = &header.network {
        let rtt = n.measured_rtt_ms;
        if !rtt_ms_ok(rtt) {
            return Err(TraceV2Error::Header {
                file: file.to_string(),
                message: format!(
                    "network.measured_rtt_ms = {}: give the round-trip time in ms, a number from 0 to {MAX_RTT_MS}",
                    crate::config::bounds::short_number(rtt)
                ),
            });
        }
    }
    Ok(header)
}

/// The largest round-trip time a trace may state, ms (a minute).
pub const MAX_RTT_MS: f64 = 60_000.0;

/// Whether `ms` can be a round-trip time: a number in [0, [`MAX_RTT_MS`]].
pub fn rtt_ms_ok(ms: f64) -> bool {
    (0.0..=MAX_RTT_MS).contains(&ms)
}

fn parse_header_text(text: &str, file: &str) -> Result<TraceHeader, TraceV2Error> {
    serde_yaml_ng::from_str::<TraceHeader>(text).map_err(|e| {
        let msg = e.to_string();
        let hint = if msg.contains("unknown field") {
            format!(
                ". A TraceV2 header has only these top-level keys: {KEYS} (nested maps are strict too); remove or rename the key"
            )
        } else if msg.contains("session_context_growth") {
            ". The only accepted value is `accumulate` (or leave the key out)".to_string()
        } else if msg.contains("missing field `mode`") {
            ". Add `mode: real`, `mode: generated` or `mode: replayed`".to_string()
        } else {
            String::new()
        };
        TraceV2Error::Header {
            file: file.to_string(),
            message: format!("invalid TraceV2 header: {msg}{hint}"),
        }
    })
}

/// Read and parse the header file at `path`.
pub fn read_header(path: &Path) -> Result<TraceHeader, TraceV2Error> {
    let file = path.display().to_string();
    let text = crate::input::read_to_string(path).map_err(|e| TraceV2Error::Io {
        file: file.clone(),
        message: format!("cannot read the trace header: {e}"),
    })?;
    parse_header(&text, &file)
}

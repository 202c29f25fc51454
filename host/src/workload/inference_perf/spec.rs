//! The `[workload.inference_perf]` table: inference-perf's shared-prefix
//! workload (stages of a constant rate, system prompts shared by users).
//!
//! Values that can never be right on their own (a stage of zero duration, a
//! rate that is not a positive finite number, zero prompts or users) are
//! rejected while the run file is parsed, so the error carries the line and
//! column of the value. Rules that involve several values are checked when
//! the workload is built ([`super::expand`]).

use serde::{Deserialize, Deserializer, Serialize};

/// `[workload.inference_perf]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferencePerfSpec {
    /// Stages, run one after the other (at least one).
    pub stages: Vec<StageSpec>,
    /// The users, their system prompts and the request lengths.
    pub shared_prefix: SharedPrefixSpec,
    /// Which client drives the workload: `"reference"` (the reference
    /// simulator's reading of the profile: per-user arrivals, chat sessions
    /// as closed loops) or `"inference-perf X.Y.Z"` (that release of the real
    /// client, as it runs: one open-loop timer per stage, stages drained one
    /// after the other, worker slots, request timeout, its metric
    /// definitions). Absent: the newest release blis models
    /// ([`super::client::NEWEST`]).
    #[serde(default)]
    pub client: Option<String>,
    /// `load.interval`: seconds the client waits between stages (default
    /// 1.0; inference-perf clients only).
    #[serde(default, deserialize_with = "non_negative_seconds")]
    pub interval: Option<f64>,
    /// `load.num_workers`: worker processes (default: 224, the runs' value;
    /// inference-perf's own default is the CPU count of its machine).
    #[serde(default, deserialize_with = "positive_count_opt")]
    pub num_workers: Option<u32>,
    /// `load.worker_max_concurrency`: requests one worker holds at once (default 100).
    #[serde(default, deserialize_with = "positive_count_opt")]
    pub worker_max_concurrency: Option<u32>,
    /// `load.request_timeout`: seconds before the client gives up on a
    /// request (default: aiohttp's total timeout, 300 s).
    #[serde(default, deserialize_with = "positive_seconds_opt")]
    pub request_timeout: Option<f64>,
}

/// One load stage: `{ rate = 8.0, duration = 600 }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// Requests per second over all users (finite, > 0).
    #[serde(deserialize_with = "positive_rate")]
    pub rate: f64,
    /// Length of the stage in whole seconds (≥ 1), as in inference-perf.
    #[serde(deserialize_with = "positive_seconds")]
    pub duration: u64,
}

/// `[workload.inference_perf.shared_prefix]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixSpec {
    /// P: system prompts, each the shared prefix of one group of users (≥ 1).
    #[serde(deserialize_with = "positive_count")]
    pub num_unique_system_prompts: u32,
    /// U: users per system prompt (≥ 1). N = P·U users per stage.
    #[serde(deserialize_with = "positive_count")]
    pub num_users_per_system_prompt: u32,
    /// Tokens of each system prompt; 0 = no shared prefix.
    pub system_prompt_len: u32,
    /// Tokens of every question (the prompt after the system prompt); 0 counts as 1.
    pub question_len: u32,
    /// Output tokens of every request; 0 counts as 1.
    pub output_len: u32,
    /// Each user is one closed-loop chat session instead of independent
    /// requests (default false).
    #[serde(default)]
    pub enable_multi_turn_chat: bool,
}

impl StageSpec {
    /// The stage's requests, ⌊rate · duration⌋ (as inference-perf and the
    /// reference count them), before any bound is checked.
    pub fn requests(&self) -> f64 {
        (self.rate * self.duration as f64).floor()
    }
}

fn positive_rate<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let r = f64::deserialize(d)?;
    if r.is_finite() && r > 0.0 {
        Ok(r)
    } else {
        Err(serde::de::Error::custom(format!(
            "a stage's rate must be a finite number of requests per second > 0, got {r}"
        )))
    }
}

fn positive_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = i64::deserialize(d)?;
    if s > 0 {
        Ok(s as u64)
    } else {
        Err(serde::de::Error::custom(format!(
            "a stage's duration must be a whole number of seconds ≥ 1, got {s}"
        )))
    }
}

fn positive_count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = i64::deserialize(d)?;
    match u32::try_from(n) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(serde::de::Error::custom(format!(
            "must be a whole number in [1, {}], got {n}",
            u32::MAX
        ))),
    }
}

fn non_negative_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let s = f64::deserialize(d)?;
    if s.is_finite() && (0.0..=1e9).contains(&s) {
        Ok(Some(s))
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a number of seconds in [0, 1e9], got {s}"
        )))
    }
}

fn positive_seconds_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let s = f64::deserialize(d)?;
    if s.is_finite() && s > 0.0 && s <= 1e9 {
        Ok(Some(s))
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a number of seconds in (0, 1e9], got {s}"
        )))
    }
}

fn positive_count_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    positive_count(d).map(Some)
}

//! The `[workload]` table of the run file and its validation.
//!
//! The table is parsed strictly (`deny_unknown_fields`): a key blis does not
//! know is an error, never silently ignored. Keys are grouped by source (a
//! trace, a client list, a preset, or the distribution-mode keys) and exactly
//! one source may be used; mixing them is an error naming both keys.
//!
//! All fields are `pub` and optional so that the CLI can write its flags
//! (`--rate`, `--num-requests`, `--workload NAME`, `--prompt-tokens…`) into a
//! [`WorkloadConfig`]; `None` means "the documented default".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::inference_perf::InferencePerfSpec;

/// Defaults of the CLI distribution mode (cluster spec §6.2).
pub mod defaults {
    /// Aggregate rate when none is given, req/s.
    pub const RATE: f64 = 1.0;
    /// `num_requests` of [`super::WorkloadConfig::default`] (the CLI default).
    pub const NUM_REQUESTS: u64 = 100;
    /// Prompt length mean, tokens.
    pub const PROMPT_TOKENS: u32 = 512;
    /// Prompt length standard deviation, tokens.
    pub const PROMPT_TOKENS_STDEV: u32 = 256;
    /// Prompt length lower clamp, tokens.
    pub const PROMPT_TOKENS_MIN: u32 = 2;
    /// Prompt length upper clamp, tokens.
    pub const PROMPT_TOKENS_MAX: u32 = 7000;
    /// Output length mean, tokens.
    pub const OUTPUT_TOKENS: u32 = 512;
    /// Output length standard deviation, tokens.
    pub const OUTPUT_TOKENS_STDEV: u32 = 256;
    /// Output length lower clamp, tokens.
    pub const OUTPUT_TOKENS_MIN: u32 = 2;
    /// Output length upper clamp, tokens.
    pub const OUTPUT_TOKENS_MAX: u32 = 7000;
    /// Prefix length of a prefix group whose first client gives none, tokens.
    pub const PREFIX_LENGTH: u32 = 50;
}

/// The `[workload]` table: where requests come from.
///
/// Exactly one source is used: `trace`, `clients`, `preset`, or (when none of
/// those is given) the distribution-mode keys `prompt_tokens…`/`output_tokens…`.
/// `Default` is what `blis run` uses without workload flags: distribution mode
/// with `aggregate_rate = 1.0` and `num_requests = 100`. A table read from a
/// run file starts from all-`None` instead (absent `num_requests` = unlimited).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Total request rate over all clients, req/s (default 1.0). Not allowed
    /// with `trace` (arrival times come from the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_rate: Option<f64>,
    /// Global cap on the number of requests (session rounds included); 0 or
    /// absent = unlimited, which the caller accepts only when a horizon bounds
    /// the run (see `Workload::planned_requests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_requests: Option<u64>,
    /// Named preset (`chatbot`, `contentgen`, `summarization`, `multidoc`):
    /// Gaussian prompt/output lengths from the reference's table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// CSV trace to replay, relative to the run file's folder (format in the
    /// module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Distribution mode: prompt length mean, tokens (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Distribution mode: prompt length standard deviation, tokens (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_stdev: Option<u32>,
    /// Distribution mode: prompt length lower clamp, tokens (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_min: Option<u32>,
    /// Distribution mode: prompt length upper clamp, tokens (default 7000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_max: Option<u32>,
    /// Distribution mode: output length mean, tokens (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// Distribution mode: output length standard deviation, tokens (default 256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_stdev: Option<u32>,
    /// Distribution mode: output length lower clamp, tokens (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_min: Option<u32>,
    /// Distribution mode: output length upper clamp, tokens (default 7000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_max: Option<u32>,
    /// Distribution mode or preset: length of a prefix shared by every
    /// request (prefix group `shared`), tokens; 0 (default) = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_tokens: Option<u32>,
    /// Distribution mode or preset: arrival process (default `constant`:
    /// evenly spaced, first arrival one interval after 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalSpec>,
    /// TraceV2 trace to replay (`[workload.trace_v2]`: header, data,
    /// session_mode, think_time_ms, think_time_dist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_v2: Option<super::TraceV2Spec>,
    /// Multi-client spec (`[[workload.clients]]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Vec<ClientSpec>>,
    /// inference-perf shared-prefix workload (`[workload.inference_perf]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_perf: Option<InferencePerfSpec>,
}

impl Default for WorkloadConfig {
    /// The CLI defaults: distribution mode, 1 req/s, 100 requests.
    fn default() -> Self {
        WorkloadConfig {
            aggregate_rate: Some(defaults::RATE),
            num_requests: Some(defaults::NUM_REQUESTS),
            ..WorkloadConfig::empty()
        }
    }
}

impl WorkloadConfig {
    /// Every key absent (what an empty `[workload]` table parses to).
    pub fn empty() -> Self {
        WorkloadConfig {
            aggregate_rate: None,
            num_requests: None,
            preset: None,
            trace: None,
            prompt_tokens: None,
            prompt_tokens_stdev: None,
            prompt_tokens_min: None,
            prompt_tokens_max: None,
            output_tokens: None,
            output_tokens_stdev: None,
            output_tokens_min: None,
            output_tokens_max: None,
            prefix_tokens: None,
            arrival: None,
            clients: None,
            inference_perf: None,
            trace_v2: None,
        }
    }

    /// Names of the distribution-mode length keys that are set.
    pub(crate) fn length_keys_set(&self) -> Vec<&'static str> {
        [
            ("prompt_tokens", self.prompt_tokens),
            ("prompt_tokens_stdev", self.prompt_tokens_stdev),
            ("prompt_tokens_min", self.prompt_tokens_min),
            ("prompt_tokens_max", self.prompt_tokens_max),
            ("output_tokens", self.output_tokens),
            ("output_tokens_stdev", self.output_tokens_stdev),
            ("output_tokens_min", self.output_tokens_min),
            ("output_tokens_max", self.output_tokens_max),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect()
    }
}

/// Named workload presets (cluster spec §6.2 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Prompt 256±100 [2, 800], output 256±100 [1, 1024].
    Chatbot,
    /// Prompt 1024±150 [10, 2048], output 1024±200 [10, 2048].
    Contentgen,
    /// Prompt 4096±500 [100, 8192], output 512±150 [10, 2048].
    Summarization,
    /// Prompt 10240±1200 [500, 20480], output 1536±300 [50, 4096].
    Multidoc,
}

/// Gaussian length parameters of a preset or of distribution mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GaussianLengths {
    /// Mean, tokens.
    pub mean: u32,
    /// Standard deviation, tokens.
    pub stdev: u32,
    /// Lower clamp, tokens.
    pub min: u32,
    /// Upper clamp, tokens.
    pub max: u32,
}

impl Preset {
    /// All presets, in documentation order.
    pub const ALL: [Preset; 4] = [
        Preset::Chatbot,
        Preset::Contentgen,
        Preset::Summarization,
        Preset::Multidoc,
    ];

    /// The name used in run files and by `--workload NAME`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Chatbot => "chatbot",
            Preset::Contentgen => "contentgen",
            Preset::Summarization => "summarization",
            Preset::Multidoc => "multidoc",
        }
    }

    /// Parses a preset name; `None` if unknown.
    pub fn parse(s: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Prompt and output length parameters.
    pub fn lengths(self) -> (GaussianLengths, GaussianLengths) {
        let g = |mean, stdev, min, max| GaussianLengths {
            mean,
            stdev,
            min,
            max,
        };
        match self {
            Preset::Chatbot => (g(256, 100, 2, 800), g(256, 100, 1, 1024)),
            Preset::Contentgen => (g(1024, 150, 10, 2048), g(1024, 200, 10, 2048)),
            Preset::Summarization => (g(4096, 500, 100, 8192), g(512, 150, 10, 2048)),
            Preset::Multidoc => (g(10240, 1200, 500, 20480), g(1536, 300, 50, 4096)),
        }
    }
}

/// Arrival process of a client: `{ process = "gamma", cv = 2.0 }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivalSpec {
    /// `poisson`, `gamma`, `weibull` or `constant`.
    pub process: ArrivalProcess,
    /// Coefficient of variation of inter-arrival times (gamma: ≤ 10; weibull:
    /// in [0.01, 10.4]; default 1.0). Rejected for poisson and constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
}

impl ArrivalSpec {
    /// `{ process, cv: None }`.
    pub fn new(process: ArrivalProcess) -> Self {
        ArrivalSpec { process, cv: None }
    }
}

/// Inter-arrival time distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times (cv 1).
    Poisson,
    /// Gamma inter-arrival times with the given cv (bursty when cv > 1).
    Gamma,
    /// Weibull inter-arrival times with the given cv.
    Weibull,
    /// Evenly spaced arrivals, the first one interval after time 0.
    Constant,
}

impl ArrivalProcess {
    /// Name used in run files.
    pub fn name(self) -> &'static str {
        match self {
            ArrivalProcess::Poisson => "poisson",
            ArrivalProcess::Gamma => "gamma",
            ArrivalProcess::Weibull => "weibull",
            ArrivalProcess::Constant => "constant",
        }
    }
}

/// A token-length distribution, tagged by `type`. Samples are integers ≥ 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthDist {
    /// Normal(mean, std_dev) clamped to `[min, max]`, rounded; `mean` must lie
    /// in `[min, max]`.
    Gaussian {
        /// Mean, tokens.
        mean: f64,
        /// Standard deviation, tokens (≥ 0).
        std_dev: f64,
        /// Lower clamp, tokens.
        min: u32,
        /// Upper clamp, tokens (≥ `min`).
        max: u32,
    },
    /// Exponential with the given mean, rounded.
    Exponential {
        /// Mean, tokens (> 0).
        mean: f64,
    },
    /// With probability `mix_weight` Pareto(`alpha`, scale `xm`), otherwise
    /// LogNormal(`mu`, `sigma`); rounded.
    ParetoLognormal {
        /// Pareto tail index (> 0; the mean is finite only when > 1).
        alpha: f64,
        /// Pareto scale (minimum value), tokens (> 0).
        xm: f64,
        /// Mean of the log of the lognormal part.
        mu: f64,
        /// Standard deviation of the log of the lognormal part (≥ 0).
        sigma: f64,
        /// Probability of drawing from the Pareto part, in [0, 1].
        mix_weight: f64,
    },
    /// Always `value` tokens.
    Constant {
        /// Tokens (≥ 1).
        value: u32,
    },
    /// Token count (key, as a string) → probability (normalised by the sum).
    Empirical {
        /// Bins: `{ "128" = 0.5, "512" = 0.5 }`; probabilities ≥ 0, positive sum.
        bins: BTreeMap<String, f64>,
    },
}

impl LengthDist {
    /// Gaussian from preset/distribution-mode parameters.
    pub fn gaussian(g: GaussianLengths) -> Self {
        LengthDist::Gaussian {
            mean: f64::from(g.mean),
            std_dev: f64::from(g.stdev),
            min: g.min,
            max: g.max,
        }
    }
}

/// One client of a multi-client spec (`[[workload.clients]]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Unique name. Also seeds the client's random stream (with the run
    /// seed), so renaming a client changes its requests and nothing else.
    pub id: String,
    /// Share of `aggregate_rate` (normalised over all clients); finite, > 0;
    /// default 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_fraction: Option<f64>,
    /// Arrival process (default Poisson).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalSpec>,
    /// Prompt length (excluding the group prefix and session context).
    pub input: LengthDist,
    /// Output length.
    pub output: LengthDist,
    /// Shared-prefix group: every request of every client of the group starts
    /// with the same prefix tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_group: Option<String>,
    /// Prefix length in tokens; the group's first client decides (default 50).
    /// Only allowed with `prefix_group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<u32>,
    /// SLO class: critical, standard (default), batch, sheddable, background.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_class: Option<String>,
    /// Tenant (default tenant `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Activity windows: new requests (session starts) arrive only at times
    /// `t` with `start_us ≤ t < end_us` for some window. Absent = always active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<Window>>,
    /// Multi-turn sessions: each arrival starts a session of up to
    /// `max_rounds` rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionSpec>,
    /// LoRA adapter every request of the client runs with (an id of
    /// `[lora].adapters`; default: the base model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// A popularity distribution of adapters instead of one `adapter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_mix: Option<AdapterMix>,
    /// Base model the client's requests ask for (the name of a model some
    /// pool serves; default: the run's `[model].name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// HTTP request headers every request of the client carries, as a
    /// router sees them (e.g. `{ "EPP-Profile" = "fast" }` for llm-d's
    /// header-profile-handler: `routing.profile_handler = "header"`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Multimodal input (images, audio, video) on some of the client's
    /// requests: the encode stage of `[[pools]]` runs for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multimodal: Option<MultimodalSpec>,
}

/// `multimodal`: which of the client's requests carry multimodal input.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MultimodalSpec {
    /// Share of the client's requests with multimodal input, in [0, 1]
    /// (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
}

/// `adapter_mix`: each request (each session, for multi-turn clients)
/// draws its adapter: the `k`-th id (1-based) with probability ∝ `1/k^s`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterMix {
    /// Adapter ids, most popular first.
    pub ids: Vec<String>,
    /// Zipf exponent `s` ≥ 0 (default 1; 0 = uniform).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zipf_s: Option<f64>,
}

/// Activity window `[start_us, end_us)`, in µs of simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// Start, µs (inclusive).
    pub start_us: u64,
    /// End, µs (exclusive); must be > `start_us`.
    pub end_us: u64,
}

/// Multi-turn session parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// Rounds per session (≥ 1). A session also ends early when a round is
    /// rejected or dropped.
    pub max_rounds: u32,
    /// Delay between the completion of round k and the arrival of round k+1, µs.
    #[serde(default)]
    pub think_time_us: u64,
    /// `accumulate` (default): a round's prompt is the previous round's prompt
    /// and output followed by new input; `none`: only the new input.
    #[serde(default)]
    pub context_growth: ContextGrowth,
}

/// How a session round's prompt relates to the previous rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextGrowth {
    /// Previous prompt + previous output + new input (hits the KV cache).
    #[default]
    Accumulate,
    /// New input only (plus the group prefix, if any).
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<WorkloadConfig, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            workload: WorkloadConfig,
        }
        toml::from_str::<File>(s)
            .map(|f| f.workload)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_full_client_table() {
        let c = parse(
            r#"
            [workload]
            aggregate_rate = 20.0
            num_requests = 500
            [[workload.clients]]
            id = "chat"
            rate_fraction = 0.7
            arrival = { process = "gamma", cv = 2.0 }
            input = { type = "gaussian", mean = 512, std_dev = 100, min = 2, max = 2048 }
            output = { type = "exponential", mean = 200 }
            prefix_group = "sys"
            prefix_length = 256
            slo_class = "critical"
            tenant_id = "acme"
            windows = [{ start_us = 0, end_us = 1000000 }]
            session = { max_rounds = 3, think_time_us = 500000, context_growth = "accumulate" }
            [[workload.clients]]
            id = "batch"
            input = { type = "empirical", bins = { "128" = 0.5, "512" = 0.5 } }
            output = { type = "pareto_lognormal", alpha = 2.0, xm = 10, mu = 4.0, sigma = 1.0, mix_weight = 0.2 }
            "#,
        )
        .unwrap();
        let clients = c.clients.unwrap();
        assert_eq!(clients.len(), 2);
        assert_eq!(clients[0].session.unwrap().max_rounds, 3);
        assert!(matches!(clients[1].input, LengthDist::Empirical { .. }));
    }

    #[test]
    fn unknown_keys_and_values_are_errors_listing_accepted_values() {
        let e = parse("[workload]\nrate = 3").unwrap_err();
        assert!(e.contains("unknown field `rate`"), "{e}");
        let e = parse(
            "[workload]\n[[workload.clients]]\nid='a'\narrival={process='bursty'}\ninput={type='constant',value=1}\noutput={type='constant',value=1}",
        )
        .unwrap_err();
        assert!(
            e.contains("bursty") && e.contains("poisson") && e.contains("weibull"),
            "{e}"
        );
        let e = parse(
            "[workload]\n[[workload.clients]]\nid='a'\ninput={type='uniform',value=1}\noutput={type='constant',value=1}",
        )
        .unwrap_err();
        assert!(
            e.contains("uniform") && e.contains("pareto_lognormal"),
            "{e}"
        );
        let e = parse(
            "[workload]\n[[workload.clients]]\nid='a'\ninput={type='constant',value=1,mean=3}\noutput={type='constant',value=1}",
        )
        .unwrap_err();
        assert!(e.contains("mean"), "{e}");
    }

    #[test]
    fn default_is_cli_distribution_mode() {
        let d = WorkloadConfig::default();
        assert_eq!(d.aggregate_rate, Some(1.0));
        assert_eq!(d.num_requests, Some(100));
        assert!(d.length_keys_set().is_empty());
        assert_eq!(parse("[workload]").unwrap(), WorkloadConfig::empty());
    }
}

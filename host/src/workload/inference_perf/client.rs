//! Which client drives an inference-perf workload (`client` in
//! `[workload.inference_perf]`), and what each inference-perf release does
//! that blis models.
//!
//! Read from each release's source on PyPI (0.1.1, 0.2.0, 0.3.0, 0.4.0,
//! 0.7.0; 0.5 and 0.6 were never published there):
//!
//! * **Dispatch** (every release): a stage's `⌊rate·duration⌋` send times
//!   are exponential gaps normalised to add up to the duration, from one
//!   second after the stage starts (`perf_counter() + 1`); the last request
//!   is due at the stage's end. The requests wait in one queue; a worker
//!   takes one while it holds fewer than `worker_max_concurrency`, sleeps
//!   until its time and sends it (open loop: nothing waits for a reply).
//!   The client polls once a second until every request of the stage has
//!   finished, then sleeps `interval` seconds and starts the next stage.
//! * **Timeout**: aiohttp's session timeout, `request_timeout` when set
//!   (0.3.0 on) and otherwise aiohttp's default total of 300 s: the request
//!   fails and its connection closes (vLLM aborts it).
//! * **Prompts** (shared prefix): `num_groups` system prompts ×
//!   `num_prompts_per_group` questions, made once and shuffled; request `n`
//!   of a stage sends prompt `n mod` (their count) — the same prompts come
//!   back again and again, whole.
//! * **Multi-turn chat** (0.3.0 on; older releases ignore the key): one
//!   session per prompt; request `n` is a round of session `n mod` the
//!   sessions and waits for that session's previous round to end. Its
//!   latency clock starts when it is sent, after that wait. Its prompt is
//!   the session's context, then the prompt; the context starts as the
//!   system prompt and becomes the last round's prompt and answer.
//! * **Metrics**: TTFT from the send to the first timestamp; the
//!   timestamps are one per line of the SSE stream before 0.3.0 (a token's
//!   `data:` line and the blank line after it, then `[DONE]` and its blank
//!   line: 2K + 2 for K tokens), one per SSE message in 0.3.0 and 0.4.0
//!   (K + 1 with `[DONE]`), one per content chunk from 0.7.0 (K). ITL is the
//!   mean gap between them and TPOT the span over the gaps, so the older
//!   releases report about half (or K/(K+1)) of the per-token time.

use crate::engine::Tick;

/// The newest inference-perf release on PyPI that blis models.
pub const NEWEST: &str = "0.7.0";

/// The releases blis knows (PyPI, oldest first).
pub const KNOWN: [&str; 5] = ["0.1.1", "0.2.0", "0.3.0", "0.4.0", "0.7.0"];

/// aiohttp's default total timeout of a request, µs.
pub const AIOHTTP_TIMEOUT_US: Tick = 300_000_000;
/// `load.num_workers` when the run file does not say: the value of every
/// published inference-sim training run (the client's own default is its
/// machine's CPU count).
pub const DEFAULT_WORKERS: u32 = 224;
/// `load.worker_max_concurrency` default.
pub const DEFAULT_WORKER_CONCURRENCY: u32 = 100;
/// `load.interval` default, s.
pub const DEFAULT_INTERVAL_S: f64 = 1.0;

/// What the client timestamps while a response streams in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timestamps {
    /// Every line (before 0.3.0): 2K + 2 for K tokens.
    Lines,
    /// Every SSE message, `[DONE]` included (0.3.0, 0.4.0): K + 1.
    Messages,
    /// Every content chunk (0.7.0): K.
    Chunks,
}

impl Timestamps {
    /// Gaps between the timestamps of a response of `k` tokens.
    pub fn gaps(self, k: u32) -> u64 {
        let k = u64::from(k);
        match self {
            Timestamps::Lines => 2 * k + 1,
            Timestamps::Messages => k,
            Timestamps::Chunks => k.saturating_sub(1),
        }
    }

    /// How the release timestamps a response, for the report.
    pub fn name(self) -> &'static str {
        match self {
            Timestamps::Lines => "per line",
            Timestamps::Messages => "per SSE message",
            Timestamps::Chunks => "per content chunk",
        }
    }
}

/// The client of an inference-perf workload.
#[derive(Clone, Debug, PartialEq)]
pub enum Client {
    /// The reference simulator's reading of the profile.
    Reference,
    /// A release of inference-perf, as it runs.
    InferencePerf {
        version: &'static str,
        /// Multi-turn chat exists (0.3.0 on).
        chat: bool,
        timestamps: Timestamps,
    },
}

impl Client {
    /// Parses `client`: `"reference"`, `"inference-perf X.Y.Z"` or `"X.Y.Z"`.
    pub fn parse(s: Option<&str>) -> Result<Client, String> {
        let Some(s) = s else {
            return Ok(Client::release(NEWEST));
        };
        let t = s.trim();
        if t == "reference" {
            return Ok(Client::Reference);
        }
        let v = t.strip_prefix("inference-perf").map_or(t, str::trim);
        let v = v.strip_prefix('v').unwrap_or(v);
        match KNOWN.iter().find(|&&k| k == v) {
            Some(k) => Ok(Client::release(k)),
            None => Err(format!(
                "inference_perf.client = \"{s}\": blis models \"reference\" (the reference simulator's reading of the profile) or inference-perf {} (\"inference-perf 0.7.0\"); pick the release nearest to the one that ran",
                KNOWN.join(", ")
            )),
        }
    }

    fn release(version: &'static str) -> Client {
        let minor: u32 = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        Client::InferencePerf {
            version,
            chat: minor >= 3,
            timestamps: match minor {
                0..=2 => Timestamps::Lines,
                3..=4 => Timestamps::Messages,
                _ => Timestamps::Chunks,
            },
        }
    }

    /// `"reference"` or `"inference-perf X.Y.Z"`.
    pub fn name(&self) -> String {
        match self {
            Client::Reference => "reference".into(),
            Client::InferencePerf { version, .. } => format!("inference-perf {version}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_to_their_semantics() {
        assert_eq!(Client::parse(Some("reference")), Ok(Client::Reference));
        let newest = Client::parse(None).unwrap();
        assert_eq!(newest.name(), "inference-perf 0.7.0");
        for (s, chat, ts) in [
            ("0.2.0", false, Timestamps::Lines),
            ("inference-perf 0.1.1", false, Timestamps::Lines),
            ("inference-perf v0.3.0", true, Timestamps::Messages),
            ("0.4.0", true, Timestamps::Messages),
            ("inference-perf 0.7.0", true, Timestamps::Chunks),
        ] {
            match Client::parse(Some(s)).unwrap() {
                Client::InferencePerf {
                    chat: c,
                    timestamps: t,
                    ..
                } => assert_eq!((c, t), (chat, ts), "{s}"),
                other => panic!("{s}: {other:?}"),
            }
        }
        let e = Client::parse(Some("0.5.0")).unwrap_err();
        assert!(e.contains("0.1.1, 0.2.0, 0.3.0, 0.4.0, 0.7.0"), "{e}");
    }

    #[test]
    fn gaps_follow_the_timestamps() {
        // 248 tokens: 497 line gaps, 248 message gaps, 247 chunk gaps.
        assert_eq!(Timestamps::Lines.gaps(248), 497);
        assert_eq!(Timestamps::Messages.gaps(248), 248);
        assert_eq!(Timestamps::Chunks.gaps(248), 247);
        assert_eq!(Timestamps::Chunks.gaps(0), 0);
    }
}

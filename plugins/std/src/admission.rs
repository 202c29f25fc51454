//! Admission policies: the first gate of the pipeline.

use blis_plugin_api::{Admission, ClusterView, Params, PolicyDef, RequestView};
use serde::Deserialize;

/// Admit every request (the default).
pub struct AlwaysAdmit;

impl PolicyDef for AlwaysAdmit {
    const NAME: &'static str = "always-admit";
    const SUMMARY: &'static str = "admit every request (default)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(AlwaysAdmit)
    }
}

impl Admission for AlwaysAdmit {
    fn admit(&mut self, _: &RequestView<'_>, _: &ClusterView<'_>) -> bool {
        true
    }
}

/// Reject every request (a pathological template for testing).
pub struct RejectAll;

impl PolicyDef for RejectAll {
    const NAME: &'static str = "reject-all";
    const SUMMARY: &'static str = "reject every request (pathological testing)";
    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RejectAll)
    }
}

impl Admission for RejectAll {
    fn admit(&mut self, _: &RequestView<'_>, _: &ClusterView<'_>) -> bool {
        false
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TokenBucketParams {
    capacity: f64,
    refill_rate: f64,
}

impl Default for TokenBucketParams {
    fn default() -> Self {
        TokenBucketParams {
            capacity: 10_000.0,
            refill_rate: 1_000.0,
        }
    }
}

/// Rate limiting by prompt tokens: each request costs its input token count;
/// the bucket refills at a constant rate in simulated time; a request that
/// finds too few tokens is rejected (and costs nothing).
pub struct TokenBucket {
    capacity: f64,
    refill_rate: f64,
    tokens: f64,
    last_refill_us: i64,
}

impl PolicyDef for TokenBucket {
    const NAME: &'static str = "token-bucket";
    const SUMMARY: &'static str = "rate-limit by prompt tokens with a refilling token bucket";
    const PARAMS_DOC: &'static str = "\
capacity     (float, tokens, default 10000)  bucket size; the bucket starts full.
             A request whose prompt is longer than this can never be admitted.
refill_rate  (float, tokens per second of simulated time, default 1000)
Each request consumes its input token count (shared prefix included); it is
rejected when the bucket holds fewer tokens than that. Both must be finite and > 0.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: TokenBucketParams = params.parse()?;
        if !(p.capacity.is_finite() && p.capacity > 0.0) {
            return Err(format!(
                "params.capacity = {} must be a finite number > 0",
                p.capacity
            ));
        }
        if !(p.refill_rate.is_finite() && p.refill_rate > 0.0) {
            return Err(format!(
                "params.refill_rate = {} must be a finite number > 0 (tokens per second)",
                p.refill_rate
            ));
        }
        Ok(TokenBucket {
            capacity: p.capacity,
            refill_rate: p.refill_rate,
            tokens: p.capacity,
            last_refill_us: 0,
        })
    }
}

impl Admission for TokenBucket {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        let elapsed = cluster.clock_us - self.last_refill_us;
        if elapsed > 0 {
            self.tokens =
                (self.tokens + elapsed as f64 * self.refill_rate / 1e6).min(self.capacity);
            self.last_refill_us = cluster.clock_us;
        }
        let cost = f64::from(request.input_tokens);
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, request, snap};

    #[test]
    fn token_bucket_accepts_and_rejects_with_refills_at_known_times() {
        let mut tb =
            TokenBucket::create(Params::new("capacity = 1000.0\nrefill_rate = 100.0"), 0).unwrap();
        let s = [snap(0, 0, 0, 0.0)];
        let mut at = |t: i64, len: u32| tb.admit(&request(0, len, &[]), &cluster(t, &s));
        assert!(at(0, 600)); // 1000 → 400
        assert!(!at(0, 500)); // 400 < 500: rejected, nothing consumed
        assert!(at(0, 400)); // 400 → 0
        assert!(!at(999_999, 100)); // refilled 99.9999 < 100
        assert!(at(1_000_000, 100)); // exactly 100 after 1 s → 0
        assert!(!at(1_000_000, 1)); // same tick: no refill
        assert!(at(100_000_000, 1000)); // refill capped at capacity 1000
        assert!(!at(100_000_000, 1));
    }

    #[test]
    fn token_bucket_rejects_bad_params() {
        let e = TokenBucket::create(Params::new("capacity = -1.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("capacity"), "{e}");
        let e = TokenBucket::create(Params::new("refill_rate = 0.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("refill_rate"), "{e}");
        let e = TokenBucket::create(Params::new("capacityy = 1.0"), 0)
            .err()
            .unwrap();
        assert!(e.contains("capacityy"), "{e}");
    }

    #[test]
    fn always_and_never() {
        let s = [snap(0, 0, 0, 0.0)];
        assert!(AlwaysAdmit.admit(&request(0, 5, &[]), &cluster(0, &s)));
        assert!(!RejectAll.admit(&request(0, 5, &[]), &cluster(0, &s)));
        assert!(AlwaysAdmit::create(Params::new("x = 1"), 0).is_err());
    }
}

#[cfg(test)]
mod params_doc_tests {
    use super::*;

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_docs_match_the_params_structs() {
        blis_plugin_api::check_params_doc::<TokenBucketParams>(TokenBucket::PARAMS_DOC).unwrap();
    }
}

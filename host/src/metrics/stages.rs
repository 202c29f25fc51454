//! Per-stage metrics: the statistics of the requests that *arrived* in each
//! stage of a staged workload (inference-perf), or in each report window
//! (`output.windows`), so that a stage can be compared with a measurement of
//! that stage.
//!
//! A request belongs to the stage whose window `[start, end)` holds its
//! arrival; closed-loop follow-up rounds belong to the stage of their own
//! arrival. The stages of a workload tile time from 0, and the last one is
//! open-ended (it also takes the rounds that arrive after its end), so every
//! request belongs to exactly one stage and the stages' counts add up to the
//! cluster's. Report windows are not open-ended: a request outside every
//! window belongs to none. A real inference-perf client's stages start when
//! the one before has drained, so there a request's stage is its client
//! (one per stage) and a stage's window is the span of its arrivals.
//! Nothing is recorded without stages or windows.

use serde_json::{json, Map, Value};

use crate::engine::Tick;
use crate::request::Request;

use super::distribution::{stats_of, TickStats};

/// Counters and latency populations of one stage.
#[derive(Debug, Default)]
pub struct StageRecord {
    pub arrived: u64,
    pub rejected: u64,
    pub injected: u64,
    pub completed: u64,
    pub dropped: u64,
    /// Prompt tokens of injected, not dropped requests.
    pub input_tokens: u64,
    /// Output tokens of completed requests.
    pub output_tokens: u64,
    /// Time to first token of every request that got one, ticks.
    pub ttft: Vec<Tick>,
    /// Arrival → completion of completed requests, ticks.
    pub e2e: Vec<Tick>,
    /// Arrival → first admission of completed requests, ticks.
    pub scheduling_delay: Vec<Tick>,
    /// Σ of the token gaps of completed requests (last − first token), ticks.
    pub itl_sum: i128,
    /// Number of those gaps (output tokens − 1 per completed request).
    pub itl_count: u64,
    /// Latest completion of one of the stage's requests.
    pub last_completion: Option<Tick>,
}

/// The stage windows and one record per stage.
#[derive(Debug)]
pub struct StageRecorder {
    /// Stage windows `[start, end)`, sorted and disjoint.
    windows: Vec<(Tick, Tick)>,
    /// Whether arrivals after the last window belong to the last stage.
    open_ended: bool,
    /// A request's stage is its client (a real inference-perf client's
    /// stages); each window is then the span of its stage's arrivals.
    by_client: bool,
    pub records: Vec<StageRecord>,
}

impl StageRecorder {
    /// A recorder for consecutive stage windows; the last stage takes every
    /// later arrival. `None` when there are no stages.
    pub fn for_stages(windows: &[(Tick, Tick)]) -> Option<StageRecorder> {
        if windows.is_empty() {
            return None;
        }
        Some(StageRecorder {
            windows: windows.to_vec(),
            open_ended: true,
            by_client: false,
            records: windows.iter().map(|_| StageRecord::default()).collect(),
        })
    }

    /// A recorder for report windows (sorted, disjoint): requests arriving
    /// outside every window belong to none. `None` when there are none.
    pub fn for_windows(windows: &[(Tick, Tick)]) -> Option<StageRecorder> {
        let mut r = StageRecorder::for_stages(windows)?;
        r.open_ended = false;
        Some(r)
    }

    /// A recorder for `n` stages that are the requests' clients (a real
    /// inference-perf client starts a stage when the one before drained).
    pub fn for_client_stages(n: usize) -> Option<StageRecorder> {
        let mut r = StageRecorder::for_stages(&vec![(Tick::MAX, Tick::MIN); n])?;
        r.by_client = true;
        Some(r)
    }

    /// The stage of a request that arrived at `arrival`, if any.
    #[inline]
    pub fn stage_of(&self, arrival: Tick) -> Option<usize> {
        let i = self.windows.partition_point(|w| w.0 <= arrival);
        let i = i.checked_sub(1)?;
        if arrival < self.windows[i].1 || (self.open_ended && i + 1 == self.windows.len()) {
            Some(i)
        } else {
            None
        }
    }

    fn record(&mut self, req: &Request) -> Option<&mut StageRecord> {
        let i = if self.by_client {
            req.client as usize
        } else {
            self.stage_of(req.arrival)?
        };
        self.records.get_mut(i)
    }

    /// A request reached the cluster.
    pub fn arrived(&mut self, req: &Request) {
        if self.by_client {
            if let Some(w) = self.windows.get_mut(req.client as usize) {
                *w = (w.0.min(req.arrival), w.1.max(req.arrival + 1));
            }
        }
        if let Some(r) = self.record(req) {
            r.arrived += 1;
        }
    }

    /// Admission rejected a request.
    pub fn rejected(&mut self, req: &Request) {
        if let Some(r) = self.record(req) {
            r.rejected += 1;
        }
    }

    /// A request reached a wait queue (`counted`: not dropped there).
    pub fn injected(&mut self, req: &Request, counted: bool) {
        if let Some(r) = self.record(req) {
            r.injected += 1;
            if counted {
                r.input_tokens += u64::from(req.input_len);
            }
        }
    }

    /// A request injected by [`StageRecorder::injected`] left its instance's
    /// queue to be routed again (a `redirect` drain): not injected there.
    pub fn uninjected(&mut self, req: &Request) {
        if let Some(r) = self.record(req) {
            r.injected -= 1;
            r.input_tokens -= u64::from(req.input_len);
        }
    }

    /// The client saw the first token at `at`.
    pub fn first_token(&mut self, req: &Request, at: Tick) {
        if let Some(r) = self.record(req) {
            r.ttft.push(at - req.arrival);
        }
    }

    /// The request completed at `at`.
    pub fn completed(&mut self, req: &Request, at: Tick) {
        if let Some(r) = self.record(req) {
            r.completed += 1;
            r.e2e.push(at - req.arrival);
            if req.scheduled_at >= 0 {
                r.scheduling_delay.push(req.scheduled_at - req.arrival);
            }
            r.output_tokens += u64::from(req.generated);
            if req.generated > 1 && req.first_token_at >= 0 {
                r.itl_sum += i128::from(at - req.first_token_at);
                r.itl_count += u64::from(req.generated - 1);
            }
            r.last_completion = Some(r.last_completion.map_or(at, |t| t.max(at)));
        }
    }

    /// The request was dropped as unservable.
    pub fn dropped(&mut self, req: &Request) {
        if let Some(r) = self.record(req) {
            r.dropped += 1;
        }
    }

    /// The `stages` array of the report (sorts the populations in place).
    /// `put_stats` writes `<prefix>mean_ms` … `<prefix>max_ms` of a population.
    pub fn report(
        &mut self,
        put_stats: impl Fn(&mut Map<String, Value>, &str, Option<TickStats>),
    ) -> Value {
        let mut out = Vec::with_capacity(self.records.len());
        for (i, (r, &(start, end))) in self.records.iter_mut().zip(&self.windows).enumerate() {
            // A client's stage that never started spans nothing.
            let (start, end) = if start > end { (0, 0) } else { (start, end) };
            let span_s = r
                .last_completion
                .map_or(0.0, |t| (t - start).max(0) as f64 / 1e6);
            let per_s = |x: u64| {
                if span_s > 0.0 {
                    x as f64 / span_s
                } else {
                    0.0
                }
            };
            let mut m = Map::new();
            m.insert("stage_index".into(), json!(i));
            m.insert("start_s".into(), json!(start as f64 / 1e6));
            m.insert("end_s".into(), json!(end as f64 / 1e6));
            m.insert("num_requests".into(), json!(r.arrived));
            m.insert("rejected_requests".into(), json!(r.rejected));
            m.insert("injected_requests".into(), json!(r.injected));
            m.insert("completed_requests".into(), json!(r.completed));
            m.insert("dropped_unservable".into(), json!(r.dropped));
            m.insert("total_input_tokens".into(), json!(r.input_tokens));
            m.insert("total_output_tokens".into(), json!(r.output_tokens));
            m.insert("simulated_duration_s".into(), json!(span_s));
            m.insert("responses_per_sec".into(), json!(per_s(r.completed)));
            m.insert("tokens_per_sec".into(), json!(per_s(r.output_tokens)));
            put_stats(&mut m, "ttft_", stats_of(&mut r.ttft));
            put_stats(&mut m, "e2e_", stats_of(&mut r.e2e));
            m.insert(
                "itl_mean_ms".into(),
                if r.itl_count == 0 {
                    Value::Null
                } else {
                    json!(r.itl_sum as f64 / r.itl_count as f64 / 1000.0)
                },
            );
            put_stats(
                &mut m,
                "scheduling_delay_",
                stats_of(&mut r.scheduling_delay),
            );
            out.push(Value::Object(m));
        }
        Value::Array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_map_to_their_stage_and_the_last_stage_is_open_ended() {
        let s = StageRecorder::for_stages(&[(0, 10), (10, 25)]).unwrap();
        let got: Vec<Option<usize>> = [0, 9, 10, 24, 25, 1_000]
            .iter()
            .map(|&t| s.stage_of(t))
            .collect();
        assert_eq!(got, [Some(0), Some(0), Some(1), Some(1), Some(1), Some(1)]);
        assert!(StageRecorder::for_stages(&[]).is_none());
        let w = StageRecorder::for_windows(&[(5, 10), (20, 30)]).unwrap();
        let got: Vec<Option<usize>> = [0, 5, 9, 10, 19, 20, 29, 30]
            .iter()
            .map(|&t| w.stage_of(t))
            .collect();
        assert_eq!(
            got,
            [None, Some(0), Some(0), None, None, Some(1), Some(1), None]
        );
    }
}

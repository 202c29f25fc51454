//! One small, working policy of every other kind, to copy from: a router,
//! a filter, a picker, a scorer that reads the 0.2 cluster state, a
//! scheduler, a preemption policy, an autoscaler, a P/D decider and an
//! observer. The run files in `runs/` use each of them (see README.md).

use blis_wasm_guest::{
    log, reason, Autoscaler, ClusterState, ClusterView, Decider, EventKind, Filter, Hooks, Kept,
    Observer, Params, PdView, Picker, PolicyDef, Preemption, RequestEvent, RequestView, Rng,
    Router, RunSummary, RunningRequest, Scheduler, Scorer, Scores,
};

// ------------------------------------------------------------ router

/// Router `least-queued`: the instance with the fewest waiting requests
/// (queued + on their way), ties to the lowest index. Counts its decisions
/// and logs them once, at the end of the run (`on_run_end`).
pub struct LeastQueued {
    routed: u64,
}

impl PolicyDef for LeastQueued {
    const NAME: &'static str = "least-queued";
    const SUMMARY: &'static str = "the instance with the fewest queued + pending requests";
    // Only the end of the run: no per-request event is delivered.
    const HOOKS: Hooks = Hooks::RUN_END;
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(LeastQueued { routed: 0 })
    }
    fn on_run_end(&mut self, summary: &RunSummary, _cluster: &ClusterState<'_>) {
        log(&format!(
            "routed {} of {} requests",
            self.routed, summary.arrived
        ));
    }
}

impl Router for LeastQueued {
    fn route(&mut self, _request: &RequestView<'_>, cluster: &ClusterView<'_>) -> usize {
        self.routed += 1;
        let waiting = |i: usize| {
            let s = &cluster.instances()[i];
            u64::from(s.queue_depth) + u64::from(s.pending_requests)
        };
        (0..cluster.len()).min_by_key(|&i| waiting(i)).unwrap_or(0)
    }
}

// ------------------------------------------------------------ filter

/// Filter `kv-below`: keeps the candidates whose KV cache is less full than
/// `max_utilization`, and says why it removed the others (the reason goes
/// to the decision trace).
pub struct KvBelow {
    max_utilization: f64,
}

impl PolicyDef for KvBelow {
    const NAME: &'static str = "kv-below";
    const SUMMARY: &'static str = "keep candidates whose KV utilization is below max_utilization";
    const PARAMS_DOC: &'static str = "\
max_utilization  (float in (0, 1], default 0.9)  keep an instance only while
                 its KV cache is less full than this.";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["max_utilization"])?;
        let max_utilization = params.f64_or("max_utilization", 0.9)?;
        if !(max_utilization > 0.0 && max_utilization <= 1.0) {
            return Err(format!(
                "params.max_utilization = {max_utilization}: must be in (0, 1]"
            ));
        }
        Ok(KvBelow { max_utilization })
    }
}

impl Filter for KvBelow {
    fn filter(&mut self, _request: &RequestView<'_>, cluster: &ClusterState<'_>, keep: &mut Kept) {
        for &i in cluster.candidates() {
            if cluster.instances()[i as usize].kv_utilization < self.max_utilization {
                keep.push(i);
            }
        }
        if keep.len() < cluster.candidates().len() {
            reason(&format!("KV cache at least {} full", self.max_utilization));
        }
    }
}

// ------------------------------------------------------------ picker

/// Picker `random-best`: the best weighted total, ties broken at random
/// with the policy's own seeded generator (never a global one).
pub struct RandomBest {
    rng: Rng,
}

impl PolicyDef for RandomBest {
    const NAME: &'static str = "random-best";
    const SUMMARY: &'static str = "the highest total, ties broken by the seeded generator";
    fn create(params: Params, seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(RandomBest {
            rng: Rng::new(seed),
        })
    }
}

impl Picker for RandomBest {
    fn pick(&mut self, _request: &RequestView<'_>, cluster: &ClusterState<'_>, scores: &[f64]) -> u32 {
        let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let tied: Vec<u32> = cluster
            .candidates()
            .iter()
            .zip(scores)
            .filter(|(_, &s)| s == best)
            .map(|(&i, _)| i)
            .collect();
        tied[self.rng.below(tied.len() as u64) as usize]
    }
}

// ------------------------------------------------------------ scorer (0.2 state)

/// Scorer `fewest-in-flight`: `1 / (1 + requests routed to the instance and
/// not finished)`, read from the 0.2 `InstanceInfo`. It sets `USES_STATE`,
/// so blis calls `score_candidates` only and `score` is not written.
pub struct FewestInFlight;

impl PolicyDef for FewestInFlight {
    const NAME: &'static str = "fewest-in-flight";
    const SUMMARY: &'static str = "1 / (1 + requests in flight), from the 0.2 cluster state";
    const USES_STATE: bool = true;
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(FewestInFlight)
    }
}

impl Scorer for FewestInFlight {
    fn score_candidates(&mut self, _request: &RequestView<'_>, cluster: &ClusterState<'_>, scores: &mut Scores) {
        for &i in cluster.candidates() {
            let (_, info) = cluster.instance(i);
            scores.push(1.0 / (1.0 + f64::from(info.in_flight)));
        }
    }
}

// ------------------------------------------------------------ scheduler

/// Scheduler `shortest-prompt`: an instance serves its waiting requests
/// shortest prompt first (equal prompts by arrival).
pub struct ShortestPrompt;

impl PolicyDef for ShortestPrompt {
    const NAME: &'static str = "shortest-prompt";
    const SUMMARY: &'static str = "wait queue ordered by prompt length, shortest first";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(ShortestPrompt)
    }
}

impl Scheduler for ShortestPrompt {
    fn key(&mut self, request: &RequestView<'_>) -> i64 {
        i64::from(request.input_tokens)
    }
}

// ------------------------------------------------------------ preemption

/// Preemption `youngest`: when KV blocks run out, preempt the request of
/// the batch that arrived last (it has waited least).
pub struct Youngest;

impl PolicyDef for Youngest {
    const NAME: &'static str = "youngest";
    const SUMMARY: &'static str = "preempt the running request that arrived last";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(Youngest)
    }
}

impl Preemption for Youngest {
    fn victim(&mut self, running: &[RunningRequest]) -> usize {
        (0..running.len())
            .max_by_key(|&i| (running[i].arrival_us, running[i].id))
            .unwrap_or(0)
    }
}

// ------------------------------------------------------------ autoscaler

/// Autoscaler `queue-per-instance`: one more instance while the routable
/// instances hold more than `high` waiting requests each on average, one
/// fewer below `low`.
pub struct QueuePerInstance {
    high: f64,
    low: f64,
}

impl PolicyDef for QueuePerInstance {
    const NAME: &'static str = "queue-per-instance";
    const SUMMARY: &'static str = "+1 above `high` waiting requests per instance, -1 below `low`";
    const PARAMS_DOC: &'static str = "\
high  (float ≥ 0, requests, default 4.0)  add an instance above this mean queue.
low   (float ≥ 0, requests, default 0.5)  remove one below this (low < high).";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["high", "low"])?;
        let high = params.f64_or("high", 4.0)?;
        let low = params.f64_or("low", 0.5)?;
        if !(low >= 0.0 && low < high) {
            return Err(format!(
                "params.low = {low} and params.high = {high}: need 0 ≤ low < high"
            ));
        }
        Ok(QueuePerInstance { high, low })
    }
}

impl Autoscaler for QueuePerInstance {
    fn decide(&mut self, cluster: &ClusterState<'_>) -> i32 {
        let (mut queued, mut routable) = (0u64, 0u64);
        for (s, info) in cluster.instances().iter().zip(cluster.info()) {
            if info.state.is_routable() {
                queued += u64::from(s.queue_depth);
                routable += 1;
            }
        }
        let mean = queued as f64 / routable.max(1) as f64;
        if mean > self.high {
            1
        } else if mean < self.low {
            -1
        } else {
            0
        }
    }
}

// ------------------------------------------------------------ P/D decider

/// Decider `long-uncached`: disaggregate a request when more than
/// `threshold` of its prompt tokens are not cached on its decode instance.
pub struct LongUncached {
    threshold: u64,
}

impl PolicyDef for LongUncached {
    const NAME: &'static str = "long-uncached";
    const SUMMARY: &'static str =
        "disaggregate when more than `threshold` prompt tokens are uncached";
    const PARAMS_DOC: &'static str = "\
threshold  (integer ≥ 0, tokens, default 512)  disaggregate above this many
           prompt tokens not cached on the decode instance.";
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["threshold"])?;
        let threshold = params.i64_or("threshold", 512)?;
        if threshold < 0 {
            return Err(format!("params.threshold = {threshold}: must be ≥ 0"));
        }
        Ok(LongUncached {
            threshold: threshold as u64,
        })
    }
}

impl Decider for LongUncached {
    fn disaggregate(&mut self, request: &RequestView<'_>, pd: &PdView, _cluster: &ClusterState<'_>) -> bool {
        let uncached = pd.uncached_prompt_tokens(request);
        reason(&format!("{uncached} prompt tokens uncached"));
        uncached > self.threshold
    }
}

// ------------------------------------------------------------ observer

/// Observer `completion-log`: decides nothing; counts completions and their
/// time to first token, and logs the totals with the run's summary once,
/// when the run ends. An observer costs nothing at any decision.
pub struct CompletionLog {
    completed: u64,
    ttft_sum_us: i64,
}

impl PolicyDef for CompletionLog {
    const NAME: &'static str = "completion-log";
    const SUMMARY: &'static str = "logs completions and the mean TTFT at the end of the run";
    const HOOKS: Hooks = Hooks::RUN_END.with(EventKind::COMPLETED);
    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.expect_none()?;
        Ok(CompletionLog {
            completed: 0,
            ttft_sum_us: 0,
        })
    }
    fn on_event(&mut self, event: &RequestEvent<'_>, _cluster: &ClusterState<'_>) {
        if event.kind == EventKind::COMPLETED {
            self.completed += 1;
            self.ttft_sum_us += event.ttft_us;
        }
    }
    fn on_run_end(&mut self, summary: &RunSummary, _cluster: &ClusterState<'_>) {
        let mean_ms = self.ttft_sum_us as f64 / self.completed.max(1) as f64 / 1000.0;
        log(&format!(
            "run ended at {} µs: {} completed (seen {}), {} rejected ({} by admission, {} by \
             filters), mean TTFT {mean_ms:.3} ms",
            summary.end_us,
            summary.completed,
            self.completed,
            summary.rejected,
            summary.rejected_by_admission,
            summary.rejected_by_filter
        ));
    }
}

impl Observer for CompletionLog {}

//! # my-blis-plugin — blis policies as a WebAssembly component
//!
//! The starting point for your own policies, to be edited rather than read:
//! the same policies as the native template (`blis plugins new NAME`), one
//! of every kind, written against `blis-wasm-guest` and built into one
//! portable, sandboxed `.wasm` file that any `blis` loads (`--plugin
//! my-blis-plugin.wasm`, or `[[plugins]] path = "my-blis-plugin.wasm"`).
//!
//! This file has the scorer `queue-aware-load` and the admission policy
//! `max-queue`; [`kinds`] has one small policy of every other kind —
//! router, filter, picker, a scorer reading the 0.2 cluster state,
//! scheduler, preemption, autoscaler, P/D decider and observer — and the
//! run files in `runs/` use each of them.
//!
//! A policy is three pieces: a type implementing [`PolicyDef`] (its
//! run-file name, a summary, the parameter documentation `blis plugins
//! show NAME` prints, and `create`, which validates the parameters); the
//! trait of its kind; and its type listed in the one [`export_plugin!`]
//! call at the bottom.
//!
//! Rules: a policy is deterministic (randomness only from the `seed` given
//! to `create`; the component can read no clock, file or environment — it
//! has no access to any), keeps no global state, and rejects bad parameters
//! in `create` with a message naming the key.

pub mod kinds;

use blis_wasm_guest::{
    export_plugin, Admission, ClusterView, InstanceSnapshot, Params, PolicyDef, RequestView,
    Scorer, Scores,
};

// ---------------------------------------------------------------------------
// Scorer `queue-aware-load`
// ---------------------------------------------------------------------------

/// `score = 1 / (1 + queue_weight × waiting + running_weight × running)`,
/// with `waiting = queue_depth + pending_requests` and `running =
/// batch_size`: a request that has not started costs more than one in the
/// batch (with the default weights 2 and 1).
pub struct QueueAwareLoad {
    queue_weight: f64,
    running_weight: f64,
}

impl QueueAwareLoad {
    /// The score of one instance, in (0, 1]; an idle instance scores 1.
    fn score_one(&self, s: &InstanceSnapshot) -> f64 {
        let waiting = f64::from(s.queue_depth) + f64::from(s.pending_requests);
        let running = f64::from(s.batch_size);
        1.0 / (1.0 + self.queue_weight * waiting + self.running_weight * running)
    }
}

impl PolicyDef for QueueAwareLoad {
    const NAME: &'static str = "queue-aware-load";
    const SUMMARY: &'static str =
        "1 / (1 + weighted load), a waiting request costing more than a running one";
    const PARAMS_DOC: &'static str = "\
queue_weight    (float ≥ 0, default 2.0)  cost of one request that has not
                started: in the wait queue or on its way to it
                (queue_depth + pending_requests).
running_weight  (float ≥ 0, default 1.0)  cost of one request in the running
                batch (batch_size).
score = 1 / (1 + queue_weight × waiting + running_weight × running), in (0, 1];
an idle instance scores 1. At least one weight must be > 0.";

    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["queue_weight", "running_weight"])?;
        let queue_weight = non_negative("queue_weight", params.f64_or("queue_weight", 2.0)?)?;
        let running_weight =
            non_negative("running_weight", params.f64_or("running_weight", 1.0)?)?;
        if queue_weight == 0.0 && running_weight == 0.0 {
            return Err(
                "params.queue_weight and params.running_weight are both 0: every instance \
                 would score 1; give at least one of them a value > 0"
                    .to_string(),
            );
        }
        Ok(QueueAwareLoad {
            queue_weight,
            running_weight,
        })
    }
}

impl Scorer for QueueAwareLoad {
    fn score(&mut self, _request: &RequestView<'_>, cluster: &ClusterView<'_>, scores: &mut Scores) {
        // Exactly one score per instance, in instance order.
        for s in cluster.instances() {
            scores.push(self.score_one(s));
        }
    }
}

/// `value` if it is finite and ≥ 0, else an error naming `key`.
fn non_negative(key: &str, value: f64) -> Result<f64, String> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(format!("params.{key} = {value}: must be a finite number ≥ 0"))
    }
}

// ---------------------------------------------------------------------------
// Admission policy `max-queue`
// ---------------------------------------------------------------------------

/// Rejects a request when even the least-loaded instance has an effective
/// load (`queue_depth + batch_size + pending_requests`) above `max_load`.
/// With `sheddable_only = true`, only requests of sheddable classes (batch,
/// sheddable, background) are rejected.
pub struct MaxQueue {
    max_load: u64,
    sheddable_only: bool,
}

impl PolicyDef for MaxQueue {
    const NAME: &'static str = "max-queue";
    const SUMMARY: &'static str = "reject while the least-loaded instance's load exceeds max_load";
    const PARAMS_DOC: &'static str = "\
max_load        (integer ≥ 0, requests, required)  reject a request when even
                the least-loaded instance has an effective load
                (queue_depth + batch_size + pending_requests) above this.
sheddable_only  (bool, default false)  reject only requests of sheddable
                classes (batch, sheddable, background); critical and standard
                requests are always admitted.";

    fn create(params: Params, _seed: u64) -> Result<Self, String> {
        params.only(&["max_load", "sheddable_only"])?;
        if params.get("max_load").is_none() {
            return Err(
                "params.max_load is required: the effective load (requests) above which the \
                 least-loaded instance counts as full, e.g. `max_load = 64`"
                    .to_string(),
            );
        }
        let max_load = params.i64_or("max_load", 0)?;
        if max_load < 0 {
            return Err(format!("params.max_load = {max_load}: must be ≥ 0"));
        }
        Ok(MaxQueue {
            max_load: max_load as u64,
            sheddable_only: params.bool_or("sheddable_only", false)?,
        })
    }
}

impl Admission for MaxQueue {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        if self.sheddable_only && !request.slo_class.is_sheddable() {
            return true;
        }
        let least = cluster
            .instances()
            .iter()
            .map(InstanceSnapshot::effective_load)
            .min()
            .unwrap_or(0);
        least <= self.max_load
    }
}

// ---------------------------------------------------------------------------
// The library: its name (unique among loaded libraries), its version and
// every policy it offers, by kind.
// ---------------------------------------------------------------------------

export_plugin! {
    library: "my-blis-plugin",
    version: "0.1.0",
    admission: [MaxQueue],
    routers: [kinds::LeastQueued],
    scorers: [QueueAwareLoad, kinds::FewestInFlight],
    filters: [kinds::KvBelow],
    pickers: [kinds::RandomBest],
    schedulers: [kinds::ShortestPrompt],
    preemption: [kinds::Youngest],
    autoscalers: [kinds::QueuePerInstance],
    deciders: [kinds::LongUncached],
    observers: [kinds::CompletionLog],
}

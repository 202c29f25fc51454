//! # my-blis-plugin — the starting point for your own blis policies
//!
//! This file exists to be copied: it is the smallest complete plugin, with
//! one policy of each kind a team usually writes first, so that a new policy
//! is an edit of working code rather than a blank page. It builds to a shared
//! library that the stock `blis` binary loads at run time (`--plugin PATH`),
//! without rebuilding blis.
//!
//! It offers:
//!
//! * [`QueueAwareLoad`], the scorer `queue-aware-load`. It rates instances
//!   for blis's weighted router, and counts a waiting request as more costly
//!   than a running one.
//! * [`MaxQueue`], the admission policy `max-queue`. It rejects requests
//!   while every instance is loaded past a limit, optionally only requests of
//!   sheddable SLO classes.
//!
//! [`kinds`] has one small policy of every other kind — router, filter,
//! picker, a scorer reading the 0.2 cluster state, scheduler, preemption,
//! autoscaler, P/D decider and observer — and the run files in `runs/` use
//! each of them.
//!
//! A policy is three pieces:
//!
//! 1. a type implementing [`PolicyDef`]: its run-file name, a one-line
//!    summary, the parameter documentation that `blis plugins show NAME`
//!    prints, and `create`, which validates the parameters;
//! 2. the trait of its kind: [`Scorer`], [`Admission`] or
//!    [`Router`](blis_plugin_api::Router);
//! 3. its type listed in the single [`export_plugin!`] call at the bottom.
//!
//! Rules every policy follows:
//!
//! * It is deterministic. Use only the `seed` given to `create` for
//!   randomness, and read no clock or environment. The same run file must
//!   give the same report.
//! * It keeps no global state. blis may create several instances of one
//!   policy (one per `[[routing.scorers]]` entry, for example), and each one
//!   owns its own state.
//! * It rejects bad parameters in `create`, with a message that names the
//!   key. blis then stops before simulating anything. A panic inside a policy
//!   is caught and reported as an error, but it is still a bug.

pub mod kinds;

use blis_plugin_api::{
    export_plugin, Admission, ClusterView, InstanceSnapshot, Params, PolicyDef, RequestView,
    Scorer, Scores,
};
// serde comes through blis-plugin-api, so the plugin has a single dependency.
use blis_plugin_api::serde::Deserialize;

// ---------------------------------------------------------------------------
// Scorer `queue-aware-load`
// ---------------------------------------------------------------------------

/// Parameters of `queue-aware-load`, as written under `params` in the run file.
///
/// `deny_unknown_fields` turns a typo (`queue_wieght`) into an error instead
/// of a silently ignored key; `default` fills absent keys from [`Default`].
#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields, default)]
struct QueueAwareLoadParams {
    queue_weight: f64,
    running_weight: f64,
}

impl Default for QueueAwareLoadParams {
    fn default() -> Self {
        QueueAwareLoadParams {
            queue_weight: 2.0,
            running_weight: 1.0,
        }
    }
}

/// `score = 1 / (1 + queue_weight × waiting + running_weight × running)`.
///
/// `waiting` is `queue_depth + pending_requests`: requests that have not
/// started, and whose time to first token grows with every request ahead of
/// them. `running` is `batch_size`: requests already in the batch, which only
/// slow each step down a little. With the default weights (2 and 1), an
/// instance with 3 queued requests scores lower than one with 3 running
/// requests, although both have the same effective load. The standard
/// `load-balance` scorer (`1 / (1 + effective load)`) is the special case
/// where both weights are 1.
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

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: QueueAwareLoadParams = params.parse()?;
        let queue_weight = non_negative("queue_weight", p.queue_weight)?;
        let running_weight = non_negative("running_weight", p.running_weight)?;
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
    fn score(
        &mut self,
        _request: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        scores: &mut Scores,
    ) {
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
        Err(format!(
            "params.{key} = {value}: must be a finite number ≥ 0"
        ))
    }
}

// ---------------------------------------------------------------------------
// Admission policy `max-queue`
// ---------------------------------------------------------------------------

/// Parameters of `max-queue`. `max_load` is an `Option` so that leaving it
/// out gives the explanatory error written in `create` rather than serde's
/// bare "missing field".
#[derive(Deserialize)]
#[serde(crate = "blis_plugin_api::serde", deny_unknown_fields)]
struct MaxQueueParams {
    max_load: Option<u64>,
    #[serde(default)]
    sheddable_only: bool,
}

/// Rejects a request when even the least-loaded instance has an effective
/// load (`queue_depth + batch_size + pending_requests`) above `max_load`,
/// that is, when no instance could start it soon. With
/// `sheddable_only = true`, only requests of sheddable classes (batch,
/// sheddable and background, see `SloClass::is_sheddable`) are rejected.
/// Critical and standard traffic always gets in, and the others make room
/// for it.
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

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: MaxQueueParams = params.parse()?;
        let max_load = p.max_load.ok_or(
            "params.max_load is required: the effective load (requests) above which the \
             least-loaded instance counts as full, e.g. `max_load = 64`",
        )?;
        Ok(MaxQueue {
            max_load,
            sheddable_only: p.sheddable_only,
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
// The library's entry point: its name (unique among loaded libraries; rename
// it with the package) and every policy it offers, by kind.
// ---------------------------------------------------------------------------

export_plugin! {
    library: "my-blis-plugin",
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

#[cfg(test)]
mod tests {
    use super::*;
    use blis_plugin_api::abi_stable::std_types::{RSlice, RStr};
    use blis_plugin_api::{PolicyKind, SloClass};

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_doc_matches_the_params_struct() {
        blis_plugin_api::check_params_doc::<QueueAwareLoadParams>(QueueAwareLoad::PARAMS_DOC)
            .unwrap();
        blis_plugin_api::check_params_doc::<MaxQueueParams>(MaxQueue::PARAMS_DOC).unwrap();
    }

    /// A snapshot with the three parts of the effective load.
    fn snap(queue: u32, batch: u32, pending: u32) -> InstanceSnapshot {
        InstanceSnapshot {
            queue_depth: queue,
            batch_size: batch,
            pending_requests: pending,
            ..Default::default()
        }
    }

    fn cluster(snaps: &[InstanceSnapshot]) -> ClusterView<'_> {
        ClusterView {
            clock_us: 0,
            instances: RSlice::from_slice(snaps),
        }
    }

    fn request(class: SloClass) -> RequestView<'static> {
        RequestView {
            id: 0,
            arrival_us: 0,
            input_tokens: 100,
            slo_class: class,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(&[]),
        }
    }

    fn scores(params: &str, snaps: &[InstanceSnapshot]) -> Vec<f64> {
        let mut s = QueueAwareLoad::create(Params::new(params), 0).unwrap();
        let mut out = Scores::new();
        s.score(&request(SloClass::STANDARD), &cluster(snaps), &mut out);
        out.to_vec()
    }

    fn create_err<P: PolicyDef>(params: &str) -> String {
        match P::create(Params::new(params), 0) {
            Ok(_) => panic!("params {params:?} were accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn queue_aware_load_default_weights() {
        // costs: idle 0; waiting 1 + running 2 → 2·1 + 1·2 = 4; waiting 0 + 3
        // pending = 3, running 1 → 2·3 + 1·1 = 7.
        let s = [snap(0, 0, 0), snap(1, 2, 0), snap(0, 1, 3)];
        assert_eq!(scores("", &s), vec![1.0, 0.2, 0.125]);
    }

    #[test]
    fn queued_requests_cost_more_than_running_ones() {
        // Same effective load 3: queued 2·3 = 6 → 1/7; running 1·3 = 3 → 1/4.
        let s = [snap(3, 0, 0), snap(0, 3, 0)];
        let got = scores("", &s);
        assert_eq!(got, vec![1.0 / 7.0, 0.25]);
        assert!(got[1] > got[0]);
    }

    #[test]
    fn queue_aware_load_custom_weights() {
        // queue 0.5, running 0: (4 queued, 3 running) → 0.5·4 = 2 → 1/3;
        // (0 queued, 9 running, 2 pending) → 0.5·2 = 1 → 1/2.
        let got = scores(
            "queue_weight = 0.5\nrunning_weight = 0.0",
            &[snap(4, 3, 0), snap(0, 9, 2)],
        );
        assert!((got[0] - 1.0 / 3.0).abs() < 1e-15, "{got:?}");
        assert_eq!(got[1], 0.5);
    }

    #[test]
    fn queue_aware_load_rejects_bad_params_naming_the_key() {
        let e = create_err::<QueueAwareLoad>("queue_weight = -1.0");
        assert!(e.contains("params.queue_weight"), "{e}");
        let e = create_err::<QueueAwareLoad>("running_weight = nan");
        assert!(e.contains("params.running_weight"), "{e}");
        let e = create_err::<QueueAwareLoad>("queue_weight = 0.0\nrunning_weight = 0.0");
        assert!(
            e.contains("queue_weight") && e.contains("running_weight"),
            "{e}"
        );
        let e = create_err::<QueueAwareLoad>("queue_wieght = 1.0");
        assert!(e.contains("queue_wieght"), "{e}");
        let e = create_err::<QueueAwareLoad>("queue_weight = \"high\"");
        assert!(e.starts_with("params.queue_weight:"), "{e}");
    }

    #[test]
    fn max_queue_rejects_only_when_every_instance_is_past_the_limit() {
        let mut mq = MaxQueue::create(Params::new("max_load = 4"), 0).unwrap();
        let std = request(SloClass::STANDARD);
        // Loads 5 and 7: the least loaded (5) exceeds 4 → reject.
        assert!(!mq.admit(&std, &cluster(&[snap(3, 2, 0), snap(0, 4, 3)])));
        // Loads 5 and 4: the least loaded is exactly 4, not above → admit.
        assert!(mq.admit(&std, &cluster(&[snap(3, 2, 0), snap(1, 2, 1)])));
        // The class does not matter without sheddable_only.
        let shed = request(SloClass::SHEDDABLE);
        assert!(!mq.admit(&shed, &cluster(&[snap(5, 0, 0)])));
        assert!(mq.admit(&shed, &cluster(&[snap(4, 0, 0)])));
    }

    #[test]
    fn max_queue_sheddable_only_spares_critical_and_standard() {
        let mut mq =
            MaxQueue::create(Params::new("max_load = 0\nsheddable_only = true"), 0).unwrap();
        let busy = [snap(1, 0, 0), snap(0, 1, 0)]; // least loaded 1 > 0
        let idle = [snap(0, 0, 0), snap(0, 1, 0)]; // least loaded 0
        for (class, admitted_when_busy) in [
            (SloClass::CRITICAL, true),
            (SloClass::STANDARD, true),
            (SloClass::BATCH, false),
            (SloClass::SHEDDABLE, false),
            (SloClass::BACKGROUND, false),
        ] {
            let r = request(class);
            assert_eq!(
                mq.admit(&r, &cluster(&busy)),
                admitted_when_busy,
                "{class:?}"
            );
            assert!(mq.admit(&r, &cluster(&idle)), "{class:?}");
        }
    }

    #[test]
    fn max_queue_rejects_bad_params_naming_the_key() {
        let e = create_err::<MaxQueue>("");
        assert!(e.contains("params.max_load is required"), "{e}");
        let e = create_err::<MaxQueue>("sheddable_only = true");
        assert!(e.contains("params.max_load is required"), "{e}");
        let e = create_err::<MaxQueue>("max_load = -1");
        assert!(e.starts_with("params.max_load:"), "{e}");
        let e = create_err::<MaxQueue>("max_load = 4\nsheddable = true");
        assert!(e.contains("sheddable"), "{e}");
    }

    /// The path blis takes: describe the library, then create each policy
    /// by kind and name with its parameters as TOML text.
    #[test]
    fn exported_through_the_plugin_abi() {
        let module = blis_plugin_module();
        let info = (module.describe())();
        assert_eq!(info.name.as_str(), "my-blis-plugin");
        let listed: Vec<(PolicyKind, &str)> = info
            .policies
            .iter()
            .map(|p| (p.kind, p.name.as_str()))
            .collect();
        // The 0.1 description lists the 0.1 kinds (admission, router,
        // scorer); the 0.2 one lists every policy, one of each kind.
        assert_eq!(
            listed,
            vec![
                (PolicyKind::Admission, "max-queue"),
                (PolicyKind::Router, "least-queued"),
                (PolicyKind::Scorer, "queue-aware-load"),
                (PolicyKind::Scorer, "fewest-in-flight"),
            ]
        );
        let v2 = (module.describe_v2().expect("ABI 0.2"))();
        let kinds: Vec<(&str, &str)> = v2
            .policies
            .iter()
            .map(|p| (p.kind.name(), p.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("admission", "max-queue"),
                ("router", "least-queued"),
                ("scorer", "queue-aware-load"),
                ("scorer", "fewest-in-flight"),
                ("filter", "kv-below"),
                ("picker", "random-best"),
                ("scheduler", "shortest-prompt"),
                ("preemption", "youngest"),
                ("autoscaler", "queue-per-instance"),
                ("decider", "long-uncached"),
                ("observer", "completion-log"),
            ]
        );
        let create = |kind, name: &str, params: &str| {
            (module.create())(kind, RStr::from(name), RStr::from(params), 7).into_result()
        };
        assert!(create(PolicyKind::Scorer, "queue-aware-load", "").is_ok());
        assert!(create(PolicyKind::Admission, "max-queue", "max_load = 8\n").is_ok());
        let err = |r: Result<_, blis_plugin_api::abi_stable::std_types::RString>| match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        };
        let e = err(create(
            PolicyKind::Scorer,
            "queue-aware-load",
            "queue_weight = -2.0\n",
        ));
        assert!(e.contains("params.queue_weight"), "{e}");
        let e = err(create(PolicyKind::Router, "max-queue", ""));
        assert!(e.contains("no router policy named 'max-queue'"), "{e}");
    }
}

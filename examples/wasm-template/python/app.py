"""my-blis-plugin: blis policies in Python, as a WebAssembly component.

The starting point for your own policies, to be edited rather than read: the
same policies as the native template (`blis plugins new NAME`), one of every
kind, built by ./build.sh (componentize-py) into one portable, sandboxed
.wasm file that any `blis` loads (--plugin my-blis-plugin.wasm).

The scorer queue-aware-load and the admission policy max-queue, then one
small policy of every other kind: the router least-queued, the filter
kv-below, the picker random-best, the scorer fewest-in-flight (reads the 0.2
cluster state), the scheduler shortest-prompt, the preemption policy
youngest, the autoscaler queue-per-instance, the P/D decider long-uncached
and the observer completion-log. The run files in runs/ use each of them.

A policy is a class: subclass the base class of its kind (blis_wasm.py,
beside this file), set NAME and SUMMARY (PARAMS_DOC, HOOKS, USES_STATE
optional), take (params, seed) in __init__ and implement the kind's method;
list it in export() at the bottom. The views are the WIT records
(wit/blis-plugin.wit) with snake_case fields. Rules: deterministic
(randomness only from the seed given to __init__; the component can read no
clock, file or environment), no global state, bad parameters rejected in
__init__ with a message naming the key.
"""

import blis_wasm as blis


def only(params, known):
    """An error unless every key given is in known."""
    for key in params:
        if key not in known:
            if known:
                raise ValueError(f"unknown parameter '{key}' (expected one of: {', '.join(known)})")
            raise ValueError(f"unknown parameter '{key}': this policy takes no parameters")


def number(params, key, default):
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"params.{key} = {value!r}: expected a number")
    return float(value)


def integer(params, key, default):
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"params.{key} = {value!r}: expected an integer ≥ 0")
    return value


class QueueAwareLoad(blis.Scorer):
    """1 / (1 + queue_weight × waiting + running_weight × running)."""

    NAME = "queue-aware-load"
    SUMMARY = "1 / (1 + weighted load), a waiting request costing more than a running one"
    PARAMS_DOC = """\
queue_weight    (float ≥ 0, default 2.0)  cost of one request that has not
                started (queue_depth + pending_requests).
running_weight  (float ≥ 0, default 1.0)  cost of one request in the running
                batch (batch_size). At least one weight must be > 0."""

    def __init__(self, params, seed):
        only(params, ["queue_weight", "running_weight"])
        self.queue_weight = number(params, "queue_weight", 2.0)
        self.running_weight = number(params, "running_weight", 1.0)
        for key in ("queue_weight", "running_weight"):
            value = getattr(self, key)
            if not (value >= 0.0 and value != float("inf")):
                raise ValueError(f"params.{key} = {value}: must be a finite number ≥ 0")
        if self.queue_weight == 0.0 and self.running_weight == 0.0:
            raise ValueError(
                "params.queue_weight and params.running_weight are both 0: every instance "
                "would score 1; give at least one of them a value > 0"
            )

    def score(self, request, cluster):
        scores = []
        for s in cluster.instances:
            waiting = float(s.queue_depth) + float(s.pending_requests)
            running = float(s.batch_size)
            scores.append(1.0 / (1.0 + self.queue_weight * waiting + self.running_weight * running))
        return scores


class MaxQueue(blis.Admission):
    """Reject while even the least-loaded instance is loaded past max_load."""

    NAME = "max-queue"
    SUMMARY = "reject while the least-loaded instance's load exceeds max_load"
    PARAMS_DOC = """\
max_load        (integer ≥ 0, requests, required)  reject a request when even
                the least-loaded instance has an effective load
                (queue_depth + batch_size + pending_requests) above this.
sheddable_only  (bool, default false)  reject only requests of sheddable
                classes (batch, sheddable, background)."""

    def __init__(self, params, seed):
        only(params, ["max_load", "sheddable_only"])
        if "max_load" not in params:
            raise ValueError(
                "params.max_load is required: the effective load (requests) above which the "
                "least-loaded instance counts as full, e.g. `max_load = 64`"
            )
        self.max_load = integer(params, "max_load", 0)
        self.sheddable_only = params.get("sheddable_only", False)
        if not isinstance(self.sheddable_only, bool):
            raise ValueError(f"params.sheddable_only = {self.sheddable_only!r}: expected true or false")

    def admit(self, request, cluster):
        # SLO classes 2 batch, 3 sheddable, 4 background are sheddable.
        if self.sheddable_only and request.slo_class not in (2, 3, 4):
            return True
        least = min((blis.effective_load(s) for s in cluster.instances), default=0)
        return least <= self.max_load


class LeastQueued(blis.Router):
    """The fewest queued + pending requests; logs its count at the end of the run."""

    NAME = "least-queued"
    SUMMARY = "the instance with the fewest queued + pending requests"
    HOOKS = blis.hooks(blis.RUN_END)

    def __init__(self, params, seed):
        super().__init__(params, seed)
        self.routed = 0

    def route(self, request, cluster):
        self.routed += 1
        waiting = [s.queue_depth + s.pending_requests for s in cluster.instances]
        return waiting.index(min(waiting)) if waiting else 0

    def on_run_end(self, summary, cluster):
        blis.log(f"routed {self.routed} of {summary.arrived} requests")


class KvBelow(blis.Filter):
    """Keep the candidates whose KV cache is less full than max_utilization."""

    NAME = "kv-below"
    SUMMARY = "keep candidates whose KV utilization is below max_utilization"
    PARAMS_DOC = """\
max_utilization  (float in (0, 1], default 0.9)  keep an instance only while
                 its KV cache is less full than this."""

    def __init__(self, params, seed):
        only(params, ["max_utilization"])
        self.max_utilization = number(params, "max_utilization", 0.9)
        if not (0.0 < self.max_utilization <= 1.0):
            raise ValueError(f"params.max_utilization = {self.max_utilization}: must be in (0, 1]")

    def filter(self, request, cluster):
        snaps = cluster.view.instances
        keep = [i for i in cluster.candidates if snaps[i].kv_utilization < self.max_utilization]
        if len(keep) < len(cluster.candidates):
            blis.reason(f"KV cache at least {self.max_utilization} full")
        return keep


class RandomBest(blis.Picker):
    """The best total, ties broken by the policy's own seeded generator."""

    NAME = "random-best"
    SUMMARY = "the highest total, ties broken by the seeded generator"

    def __init__(self, params, seed):
        super().__init__(params, seed)
        self.rng = blis.Rng(seed)

    def pick(self, request, cluster, scores):
        best = max(scores)
        tied = [i for i, s in zip(cluster.candidates, scores) if s == best]
        return tied[self.rng.below(len(tied))]


class FewestInFlight(blis.Scorer):
    """1 / (1 + requests in flight), from the 0.2 cluster state."""

    NAME = "fewest-in-flight"
    SUMMARY = "1 / (1 + requests in flight), from the 0.2 cluster state"
    USES_STATE = True

    def score_candidates(self, request, cluster):
        return [1.0 / (1.0 + float(cluster.info[i].in_flight)) for i in cluster.candidates]


class ShortestPrompt(blis.Scheduler):
    """Each instance serves its waiting requests shortest prompt first."""

    NAME = "shortest-prompt"
    SUMMARY = "wait queue ordered by prompt length, shortest first"

    def key(self, request):
        return request.input_tokens


class Youngest(blis.Preemption):
    """Preempt the running request that arrived last."""

    NAME = "youngest"
    SUMMARY = "preempt the running request that arrived last"

    def victim(self, running):
        return max(range(len(running)), key=lambda i: (running[i].arrival_us, running[i].id), default=0)


class QueuePerInstance(blis.Autoscaler):
    """+1 instance above `high` waiting requests per routable instance, -1 below `low`."""

    NAME = "queue-per-instance"
    SUMMARY = "+1 above `high` waiting requests per instance, -1 below `low`"
    PARAMS_DOC = """\
high  (float ≥ 0, requests, default 4.0)  add an instance above this mean queue.
low   (float ≥ 0, requests, default 0.5)  remove one below this (low < high)."""

    def __init__(self, params, seed):
        only(params, ["high", "low"])
        self.high = number(params, "high", 4.0)
        self.low = number(params, "low", 0.5)
        if not (0.0 <= self.low < self.high):
            raise ValueError(f"params.low = {self.low} and params.high = {self.high}: need 0 ≤ low < high")

    def decide(self, cluster):
        queued = routable = 0
        for s, info in zip(cluster.view.instances, cluster.info):
            # Instance states 0 active and 3 warming-up take requests.
            if info.state in (0, 3):
                queued += s.queue_depth
                routable += 1
        mean = float(queued) / float(max(routable, 1))
        if mean > self.high:
            return 1
        if mean < self.low:
            return -1
        return 0


class LongUncached(blis.Decider):
    """Disaggregate when more than `threshold` prompt tokens are uncached."""

    NAME = "long-uncached"
    SUMMARY = "disaggregate when more than `threshold` prompt tokens are uncached"
    PARAMS_DOC = """\
threshold  (integer ≥ 0, tokens, default 512)  disaggregate above this many
           prompt tokens not cached on the decode instance."""

    def __init__(self, params, seed):
        only(params, ["threshold"])
        self.threshold = integer(params, "threshold", 512)

    def disaggregate(self, request, pd, cluster):
        uncached = max(request.input_tokens - pd.decode_cached_blocks * pd.block_size, 0)
        blis.reason(f"{uncached} prompt tokens uncached")
        return uncached > self.threshold


class CompletionLog(blis.Observer):
    """Counts completions and logs them, with the run's summary, at the end."""

    NAME = "completion-log"
    SUMMARY = "logs completions and the mean TTFT at the end of the run"
    HOOKS = blis.hooks(blis.COMPLETED, blis.RUN_END)

    def __init__(self, params, seed):
        super().__init__(params, seed)
        self.completed = 0
        self.ttft_sum_us = 0

    def on_event(self, event, cluster):
        if event.kind == blis.COMPLETED:
            self.completed += 1
            self.ttft_sum_us += event.ttft_us

    def on_run_end(self, summary, cluster):
        mean_ms = float(self.ttft_sum_us) / float(max(self.completed, 1)) / 1000.0
        blis.log(
            f"run ended at {summary.end_us} µs: {summary.completed} completed (seen "
            f"{self.completed}), {summary.rejected} rejected ({summary.rejected_by_admission} by "
            f"admission, {summary.rejected_by_filter} by filters), mean TTFT {mean_ms:.3f} ms"
        )


Policy = blis.export(
    "my-blis-plugin",
    "0.1.0",
    [
        MaxQueue,
        LeastQueued,
        QueueAwareLoad,
        FewestInFlight,
        KvBelow,
        RandomBest,
        ShortestPrompt,
        Youngest,
        QueuePerInstance,
        LongUncached,
        CompletionLog,
    ],
)

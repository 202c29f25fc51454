"""blis policies in Python, as WebAssembly components (world blis:plugin@0.1.2).

A policy is a class: subclass the base class of its kind (Admission, Router,
Scorer, Filter, Picker, Scheduler, Preemption, Decider, Autoscaler,
Observer), set NAME and SUMMARY (PARAMS_DOC, HOOKS, USES_STATE,
PREFIX_QUERY optional), take (params, seed) in __init__, and implement the
kind's method. List the classes with export() in the app module:

    import blis_wasm as blis

    class QueueDepth(blis.Scorer):
        NAME = "queue-depth"
        SUMMARY = "min-max normalised effective load"
        def score(self, request, cluster):
            ...

    Policy = blis.export("my-policies", "0.1.0", [QueueDepth])

Build: componentize-py -d blis-plugin.wit -w plugin componentize app \
    -p . -p DIR_OF_THIS_FILE -o my-policies.wasm

The views are the WIT records (snake_case fields): request.input_tokens,
cluster.instances[i].queue_depth, state.candidates, ... An exception in a
policy traps the component: blis reports it with the policy, the call and
the request. The component gets no files, network or environment; the clock
is fixed and random numbers come from the policy's seed (use Rng or
random, which is seeded from it).

LoRA adapters (a run with [lora]; answered during admission, routing and
the P/D decider): request_adapter(request) gives the request's adapter
(index, name, rank) or None; residency(instance, adapter) is ABSENT,
RESIDENT or LOADING; instance_adapters(instance) gives capacity, resident
(most recently used first) and loading, or None.

The request being decided (answered during admission, routing and the P/D
decider, and the observe calls right after): request_session(request) is
its multi-turn session (an int) or None; request_header(request, name) the
value of a header its client sends (name in any case) or None.
"""

import tomllib
import traceback
from types import SimpleNamespace

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, lora as _lora, request as _request, types

ADMISSION, ROUTER, SCORER, FILTER, PICKER = 0, 1, 2, 3, 4
SCHEDULER, PREEMPTION, DECIDER, AUTOSCALER, OBSERVER = 5, 6, 7, 8, 9

DISPATCHED, FIRST_TOKEN, COMPLETED, REJECTED, DROPPED, RUN_END = 0, 1, 2, 3, 4, 5


def hooks(*kinds):
    """The HOOKS bit set of the given event kinds."""
    bits = 0
    for k in kinds:
        bits |= 1 << k
    return bits


def effective_load(s):
    """queue_depth + batch_size + pending_requests of an instance snapshot."""
    return s.queue_depth + s.batch_size + s.pending_requests


ABSENT, RESIDENT, LOADING = 0, 1, 2


def request_adapter(request):
    """The LoRA adapter of the request being decided, as (index, name,
    rank), or None for a base-model request (and outside a decision)."""
    index = _lora.request_adapter(request.id)
    if index is None:
        return None
    found = _lora.adapter(index)
    if found is None:
        return None
    return SimpleNamespace(index=index, name=found[0], rank=found[1])


def residency(instance, adapter):
    """ABSENT, RESIDENT or LOADING: adapter `adapter` on instance `instance`."""
    return _lora.residency(instance, adapter)


def instance_adapters(instance):
    """capacity, resident (most recently used first) and loading (or None)
    of instance `instance`, or None without LoRA state."""
    return _lora.instance_adapters(instance)


def request_session(request):
    """The multi-turn session of the request being decided (an int), or
    None for a request outside a session (and outside a decision)."""
    return _request.session(request.id)


def request_header(request, name):
    """The value of header `name` (any case) that the client of the request
    being decided sends, or None."""
    return _request.header(request.id, str(name))


def log(message):
    """A log line on blis's stderr, prefixed with the policy (rate-limited)."""
    host.log(str(message))


_reason = None


def reason(text):
    """The reason for the current decision (admission, filter, decider)."""
    global _reason
    _reason = str(text)


class Rng:
    """The seeded generator (SplitMix64), the same sequence as the native one."""

    _MASK = (1 << 64) - 1

    def __init__(self, seed):
        self.state = seed & self._MASK

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & self._MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self._MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self._MASK
        return z ^ (z >> 31)

    def next_f64(self):
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def below(self, n):
        if n == 0:
            return 0
        threshold = ((1 << 64) - n) % n
        while True:
            m = self.next_u64() * n
            if (m & self._MASK) >= threshold:
                return m >> 64


class PolicyDef:
    """The base of every policy: name, documentation, hooks, constructor."""

    KIND = None
    NAME = None
    SUMMARY = ""
    PARAMS_DOC = "This policy takes no parameters."
    HOOKS = 0
    USES_STATE = False
    PREFIX_QUERY = False

    def __init__(self, params, seed):
        if params:
            raise ValueError(
                f"unknown parameter '{next(iter(params))}': this policy takes no parameters"
            )

    def on_event(self, event, cluster):
        """A lifecycle event of a kind in HOOKS."""

    def on_run_end(self, summary, cluster):
        """The end of the run (HOOKS includes RUN_END); summary has the run's counts."""


class Admission(PolicyDef):
    KIND = ADMISSION

    def admit(self, request, cluster):
        raise NotImplementedError

    def observe(self, request, cluster, chosen):
        pass


class Router(PolicyDef):
    KIND = ROUTER

    def route(self, request, cluster):
        raise NotImplementedError

    def observe(self, request, cluster, chosen):
        pass


class Scorer(PolicyDef):
    """Implement score (one score per instance), or set USES_STATE and
    implement score_candidates (one per candidate)."""

    KIND = SCORER

    def score(self, request, cluster):
        if not (self.USES_STATE or self.PREFIX_QUERY) or type(self).score_candidates is Scorer.score_candidates:
            raise NotImplementedError(
                f"scorer '{self.NAME}' implements neither score nor score_candidates"
            )
        n = len(cluster.instances)
        state = types.ClusterState(cluster, list(range(n)), [], [])
        return self.score_candidates(request, state)

    def score_candidates(self, request, cluster):
        scores = self.score(request, cluster.view)
        if len(scores) == len(cluster.view.instances) and len(cluster.candidates) < len(scores):
            scores = [scores[i] for i in cluster.candidates]
        return scores

    def observe(self, request, cluster, chosen):
        pass


class Filter(PolicyDef):
    KIND = FILTER

    def filter(self, request, cluster):
        raise NotImplementedError

    def observe(self, request, cluster, chosen):
        pass


class Picker(PolicyDef):
    KIND = PICKER

    def pick(self, request, cluster, scores):
        raise NotImplementedError

    def observe(self, request, cluster, chosen):
        pass


class Scheduler(PolicyDef):
    KIND = SCHEDULER

    def key(self, request):
        raise NotImplementedError


class Preemption(PolicyDef):
    KIND = PREEMPTION

    def victim(self, running):
        raise NotImplementedError


class Decider(PolicyDef):
    KIND = DECIDER

    def disaggregate(self, request, pd, cluster):
        raise NotImplementedError


class Autoscaler(PolicyDef):
    KIND = AUTOSCALER

    def decide(self, cluster):
        raise NotImplementedError


class Observer(PolicyDef):
    KIND = OBSERVER


def _fail(e):
    """Report an exception to the host, then let it trap the component."""
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    host.panic_message(f"{type(e).__name__}: {e}{where}")


def _summary(text):
    counts = tomllib.loads(text) if text else {}
    return SimpleNamespace(**counts)


def export(library, version, policies):
    """The Policy class the component exports, for the given policy classes."""
    table = []

    def guarded(f):
        def call(self, *args):
            try:
                return f(self, *args)
            except Err:
                raise
            except BaseException as e:
                _fail(e)
                raise
        return call

    class Policy(exports.Policy):
        @guarded
        def describe(self):
            return types.LibraryInfo(
                library,
                version,
                [
                    types.PolicyInfo(
                        p.KIND, p.NAME, p.SUMMARY, p.PARAMS_DOC, p.HOOKS, bool(p.USES_STATE),
                        bool(p.PREFIX_QUERY),
                    )
                    for p in policies
                ],
            )

        @guarded
        def create(self, kind, name, params_toml, seed):
            for p in policies:
                if p.KIND == kind and p.NAME == name:
                    try:
                        params = tomllib.loads(params_toml) if params_toml else {}
                        table.append(p(params, seed))
                    except Exception as e:
                        raise Err(str(e))
                    return len(table) - 1
            raise Err(f"the library has no policy '{name}' of kind code {kind}")

        @guarded
        def admit(self, handle, request, cluster):
            global _reason
            _reason = None
            return bool(table[handle].admit(request, cluster))

        @guarded
        def route(self, handle, request, cluster):
            return int(table[handle].route(request, cluster))

        @guarded
        def score(self, handle, request, cluster):
            return [float(s) for s in table[handle].score(request, cluster)]

        @guarded
        def score_candidates(self, handle, request, cluster):
            return [float(s) for s in table[handle].score_candidates(request, cluster)]

        @guarded
        def filter(self, handle, request, cluster):
            global _reason
            _reason = None
            return [int(i) for i in table[handle].filter(request, cluster)]

        @guarded
        def pick(self, handle, request, cluster, scores):
            return int(table[handle].pick(request, cluster, scores))

        @guarded
        def observe(self, handle, request, cluster, chosen):
            table[handle].observe(request, cluster, chosen)

        @guarded
        def on_event(self, handle, event, cluster):
            p = table[handle]
            if event.kind == RUN_END:
                p.on_run_end(_summary(event.request.tenant), cluster)
            else:
                p.on_event(event, cluster)

        @guarded
        def take_reason(self, handle):
            global _reason
            text, _reason = _reason or "", None
            return text

        @guarded
        def key(self, handle, request):
            return int(table[handle].key(request))

        @guarded
        def victim(self, handle, running):
            return int(table[handle].victim(running))

        @guarded
        def autoscale(self, handle, cluster):
            return int(table[handle].decide(cluster))

        @guarded
        def disaggregate(self, handle, request, pd, cluster):
            global _reason
            _reason = None
            return bool(table[handle].disaggregate(request, pd, cluster))

    return Policy

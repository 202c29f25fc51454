"""The policies of examples/wasm as a Python WebAssembly component: the same
formulas as blis-std's token-bucket, least-loaded, queue-depth,
kv-utilization, prefix-affinity and low-queue, so python.toml gives the
report native.toml gives. Built by examples/wasm/build.sh (componentize-py)."""

from collections import OrderedDict

import blis_wasm as blis


class TokenBucket(blis.Admission):
    NAME = "token-bucket"
    SUMMARY = "rate-limit by prompt tokens with a refilling token bucket"
    PARAMS_DOC = "capacity (tokens, default 10000), refill_rate (tokens/s, default 1000)"

    def __init__(self, params, seed):
        unknown = set(params) - {"capacity", "refill_rate"}
        if unknown:
            raise ValueError(f"unknown parameter '{sorted(unknown)[0]}'")
        self.capacity = float(params.get("capacity", 10_000.0))
        self.refill_rate = float(params.get("refill_rate", 1_000.0))
        if not self.capacity > 0 or not self.refill_rate > 0:
            raise ValueError("capacity and refill_rate must be > 0")
        self.tokens = self.capacity
        self.last_refill_us = 0

    def admit(self, request, cluster):
        elapsed = cluster.clock_us - self.last_refill_us
        if elapsed > 0:
            self.tokens = min(self.tokens + float(elapsed) * self.refill_rate / 1e6, self.capacity)
            self.last_refill_us = cluster.clock_us
        cost = float(request.input_tokens)
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False


class LeastLoaded(blis.Router):
    NAME = "least-loaded"
    SUMMARY = "instance with the minimum effective load (ties: lowest index)"

    def route(self, request, cluster):
        loads = [blis.effective_load(s) for s in cluster.instances]
        return loads.index(min(loads))


def min_max_low_is_best(values):
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    return [(hi - v) / (hi - lo) for v in values]


class QueueDepth(blis.Scorer):
    NAME = "queue-depth"
    SUMMARY = "min-max normalised effective load (lower load → higher score)"

    def score(self, request, cluster):
        return min_max_low_is_best([blis.effective_load(s) for s in cluster.instances])

    def score_candidates(self, request, cluster):
        snaps = cluster.view.instances
        return min_max_low_is_best([blis.effective_load(snaps[i]) for i in cluster.candidates])


class KvUtilization(blis.Scorer):
    NAME = "kv-utilization"
    SUMMARY = "1 − KV utilisation (less memory pressure → higher score)"

    def score(self, request, cluster):
        return [1.0 - s.kv_utilization for s in cluster.instances]


class PrefixAffinity(blis.Scorer):
    """blis-std's prefix-affinity: per instance an LRU set of the block hashes
    of the requests routed there (capacity hashes); an instance scores the
    fraction of the request's hashes it holds. The same sets as the native
    index, kept the plain way (one ordered dict per instance)."""

    NAME = "prefix-affinity"
    SUMMARY = "fraction of the request's prefix blocks recently routed to each instance"
    PARAMS_DOC = "capacity (integer ≥ 1, block hashes per instance, default 10000)"

    def __init__(self, params, seed):
        unknown = set(params) - {"capacity"}
        if unknown:
            raise ValueError(f"unknown parameter '{sorted(unknown)[0]}'")
        self.capacity = int(params.get("capacity", 10_000))
        if self.capacity < 1:
            raise ValueError("params.capacity must be at least 1")
        self.sets = []

    def score(self, request, cluster):
        hashes = request.block_hashes
        n = len(cluster.instances)
        if not hashes:
            return [0.0] * n
        total = float(len(hashes))
        scores = []
        for i in range(n):
            held = self.sets[i] if i < len(self.sets) else None
            found = sum(1 for h in hashes if h in held) if held else 0
            scores.append(float(found) / total)
        return scores

    def observe(self, request, cluster, chosen):
        while len(self.sets) <= chosen:
            self.sets.append(OrderedDict())
        held = self.sets[chosen]
        for h in request.block_hashes:
            if h in held:
                held.move_to_end(h)
            else:
                held[h] = None
                if len(held) > self.capacity:
                    held.popitem(last=False)


class LoraAffinity(blis.Scorer):
    """blis-std's lora-affinity, through the host's LoRA queries."""

    NAME = "lora-affinity"
    SUMMARY = "1 where the request's LoRA adapter is resident or loading, else 0 (all 1 when all agree)"

    def score(self, request, cluster):
        n = len(cluster.instances)
        adapter = blis.request_adapter(request)
        if adapter is None:
            return [1.0] * n
        scores = [0.0 if blis.residency(i, adapter.index) == blis.ABSENT else 1.0 for i in range(n)]
        if all(x == scores[0] for x in scores):
            return [1.0] * n
        return scores


class SessionAffinity(blis.Scorer):
    """blis-std's session-affinity scorer (bindings that never expire),
    through the host's request queries."""

    NAME = "session-affinity"
    SUMMARY = "1 for the instance the request's session was last routed to, else 0"

    def __init__(self, params, seed):
        if params:
            raise ValueError(f"unknown parameter '{sorted(params)[0]}'")
        self.bound = {}

    def score(self, request, cluster):
        s = blis.request_session(request)
        bound = self.bound.get(s) if s is not None else None
        return [1.0 if i == bound else 0.0 for i in range(len(cluster.instances))]

    def observe(self, request, cluster, chosen):
        s = blis.request_session(request)
        if s is not None:
            self.bound[s] = chosen


class HeaderGate(blis.Admission):
    """Rejects the requests whose client sends header = value."""

    NAME = "header-gate"
    SUMMARY = "reject the requests whose client sends header = value"
    PARAMS_DOC = "header (string, required), value (string, required)"

    def __init__(self, params, seed):
        unknown = set(params) - {"header", "value"}
        if unknown:
            raise ValueError(f"unknown parameter '{sorted(unknown)[0]}'")
        if not params.get("header"):
            raise ValueError("params.header is required: the header's name")
        self.header = str(params["header"])
        self.value = str(params.get("value", ""))

    def admit(self, request, cluster):
        v = blis.request_header(request, self.header)
        if v == self.value:
            blis.reason(f"{self.header}: {v}")
            return False
        return True


class LowQueue(blis.Filter):
    NAME = "low-queue"
    SUMMARY = "keep instances with queue depth ≤ threshold"
    PARAMS_DOC = "threshold (integer ≥ 0, requests, default 128)"

    def __init__(self, params, seed):
        unknown = set(params) - {"threshold"}
        if unknown:
            raise ValueError(f"unknown parameter '{sorted(unknown)[0]}'")
        self.threshold = int(params.get("threshold", 128))

    def filter(self, request, cluster):
        snaps = cluster.view.instances
        return [i for i in cluster.candidates if snaps[i].queue_depth <= self.threshold]


Policy = blis.export(
    "wasm-example-py",
    "0.1.0",
    [
        TokenBucket,
        HeaderGate,
        LeastLoaded,
        QueueDepth,
        KvUtilization,
        PrefixAffinity,
        LoraAffinity,
        SessionAffinity,
        LowQueue,
    ],
)

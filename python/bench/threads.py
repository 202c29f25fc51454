"""Runs on Python threads against runs in turn (the GIL is released while
simulating): wall and CPU seconds of 1, 2 and 4 runs. Not a test (timing);
run it on a quiet machine with the wheel installed:

    python python/bench/threads.py

CPU seconds above wall seconds mean the runs ran at once.
"""

import os
import threading
import time

import blis

# 150,000 requests on 16 instances: about 0.8 s per run in a release wheel.
OVERRIDES = {"workload.num_requests": 150000, "workload.aggregate_rate": 400.0, "instance.count": 16}


def one(i, out):
    out[i] = blis.run(overrides={**OVERRIDES, "seed": i + 1})["cluster"]["ttft_p99_ms"]


def batch(n, threaded):
    out = [None] * n
    wall, cpu = time.perf_counter(), time.process_time()
    if threaded:
        threads = [threading.Thread(target=one, args=(i, out)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(n):
            one(i, out)
    return time.perf_counter() - wall, time.process_time() - cpu, out


if __name__ == "__main__":
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for label, n, threaded in [
        ("1 run", 1, False),
        ("2 runs in turn", 2, False),
        ("2 runs on 2 threads", 2, True),
        ("4 runs on 4 threads", 4, True),
        ("4 runs in turn", 4, False),
    ]:
        wall, cpu, _ = batch(n, threaded)
        print(f"{label:22s} {wall:6.2f} s wall {cpu:6.2f} s CPU")

#!/usr/bin/env python3
"""blis against the 16 public inference-sim training runs (real vLLM on H100,
driven by inference-perf), with the client modelled faithfully (faithful/)
and as the profile (profile/).

For each experiment: the measured means (results/summary_lifecycle_metrics.json:
request latency, TTFT, ITL as the client counts them, failures) and blis's
signed error on each. Faithful files are read from the report's `client`
section (the client's own definitions); profile files from the `cluster`
block (blis's definitions: ITL per token, and no failures can happen).

    ./generate.sh && ./table.py            # uncalibrated
    ./table.py --loo                       # and leave-one-out calibrated

--loo fits the trained-physics coefficients on 15 experiments
(`blis calibrate fit` on their measured means of E2E, TTFT and ITL, from
the shipped coefficients) and predicts the 16th with that profile, for each
experiment and set: 32 fits, about 40 minutes on 2 cores (LOO_DIR keeps
the profiles, so a second run only simulates). Failure counts are reported, not fitted (a relative
error of a count that is 0 in 12 of 16 runs is undefined).
Environment: BLIS (default ../../../target/release/blis), JOBS (default 2).
"""

import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
BLIS = os.environ.get("BLIS", os.path.join(HERE, "../../../target/release/blis"))
JOBS = int(os.environ.get("JOBS", "2"))
EXPERIMENTS = sorted(d for d in os.listdir(HERE) if d.startswith("2026"))
METRICS = ["e2e", "ttft", "itl"]


def measured(exp):
    with open(os.path.join(HERE, exp, "results/summary_lifecycle_metrics.json")) as f:
        s = json.load(f)
    lat = s["successes"]["latency"]
    return {
        "e2e": lat["request_latency"]["mean"] * 1e3,
        "ttft": lat["time_to_first_token"]["mean"] * 1e3,
        "itl": lat["inter_token_latency"]["mean"] * 1e3,
        "failures": s.get("failures", {}).get("count", 0) or 0,
        "requests": s["load_summary"]["count"],
    }


def fields(kind):
    """Report block and fields of e2e, ttft, itl, failures for a set."""
    if kind == "faithful":
        return "client", ["request_latency_mean_ms", "time_to_first_token_mean_ms",
                          "inter_token_latency_mean_ms", "failures"]
    return "cluster", ["e2e_mean_ms", "ttft_mean_ms", "itl_mean_ms", None]


def simulate(kind, exp, extra=()):
    path = os.path.join(HERE, kind, exp + ".toml")
    out = subprocess.run([BLIS, "run", path, *extra], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"blis run {path}: {out.stderr}")
    report = json.loads(out.stdout)
    block, names = fields(kind)
    b = report[block]
    got = {m: b[n] for m, n in zip(METRICS, names)}
    if names[3] is None:
        c = report["cluster"]
        got["failures"] = c["num_requests"] - c["completed_requests"]
    else:
        got["failures"] = b[names[3]]
    return got


def err(pred, real):
    return None if pred is None or real == 0 else 100.0 * (pred - real) / real


def loo(kind, workdir):
    """Leave-one-out: for each experiment, `blis calibrate fit` on the other
    15 (their measured means of E2E, TTFT and ITL), then the held-out one
    simulated with that profile. Profiles are kept in `workdir`."""
    block, names = fields(kind)
    prefix = "client." if block == "client" else ""
    out = {}
    for held in EXPERIMENTS:
        table = os.path.join(workdir, f"{kind}-{held}.csv")
        with open(table, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run_file", "metric", "value"])
            for exp in EXPERIMENTS:
                if exp == held:
                    continue
                real = measured(exp)
                for m, n in zip(METRICS, names):
                    w.writerow([os.path.join(HERE, kind, exp + ".toml"), prefix + n, real[m]])
        profile = os.path.join(workdir, f"{kind}-{held}.toml")
        if not os.path.exists(profile):
            fit = subprocess.run(
                [BLIS, "calibrate", "fit", "--measurements", table, "--out", profile,
                 "--seed", "1", "--jobs", str(JOBS)],
                capture_output=True, text=True)
            if fit.returncode != 0:
                sys.exit(f"calibrate fit ({kind}, without {held}): {fit.stderr[-2000:]}")
        out[held] = simulate(kind, held, ["--set", f"model.calibration={profile}"])
        print(f"  ({kind}: held out {held})", file=sys.stderr)
    return out


def row(exp, real, got):
    cells = [exp[:44].ljust(44)]
    for m in METRICS:
        cells.append(f"{real[m]:9.1f} {fmt(err(got[m], real[m]))}")
    cells.append(f"{real['failures']:5d} {got['failures']:5d}")
    return " | ".join(cells)


def fmt(e):
    return "   n/a " if e is None else f"{e:+7.1f}%"


def median_abs(errs):
    errs = [abs(e) for e in errs if e is not None]
    return statistics.median(errs) if errs else float("nan")


def main():
    want_loo = "--loo" in sys.argv
    reals = {e: measured(e) for e in EXPERIMENTS}
    for kind in ["faithful", "profile"]:
        with ThreadPoolExecutor(JOBS) as pool:
            got = dict(zip(EXPERIMENTS, pool.map(lambda e: simulate(kind, e), EXPERIMENTS)))
        print(f"\n{kind}: uncalibrated (the shipped trained-physics coefficients)")
        print(f"{'experiment':44} | {'E2E ms':>9} Δ%      | {'TTFT ms':>9} Δ%      | {'ITL ms':>9} Δ%      | fails real/blis")
        for e in EXPERIMENTS:
            print(row(e, reals[e], got[e]))
        for m in METRICS:
            print(f"  median |Δ| {m}: {median_abs(err(got[e][m], reals[e][m]) for e in EXPERIMENTS):.1f} %")
        miss = sum(abs(got[e]["failures"] - reals[e]["failures"]) for e in EXPERIMENTS)
        print(f"  failures: {sum(got[e]['failures'] for e in EXPERIMENTS)} simulated, "
              f"{sum(reals[e]['failures'] for e in EXPERIMENTS)} measured, Σ|difference| {miss}")
        if want_loo:
            workdir = os.environ.get("LOO_DIR") or tempfile.mkdtemp(prefix="blis-loo-")
            held = loo(kind, workdir)
            print(f"\n{kind}: leave-one-out calibrated (fit on the other 15; profiles in {workdir})")
            for e in EXPERIMENTS:
                print(row(e, reals[e], held[e]))
            for m in METRICS:
                print(f"  median |Δ| {m}: {median_abs(err(held[e][m], reals[e][m]) for e in EXPERIMENTS):.1f} %")
            print(f"  failures: {sum(held[e]['failures'] for e in EXPERIMENTS)} simulated, "
                  f"{sum(reals[e]['failures'] for e in EXPERIMENTS)} measured")


if __name__ == "__main__":
    main()

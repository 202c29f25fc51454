#!/usr/bin/env python3
"""How far a calibration carries: blis fitted on real vLLM measurements and
judged on experiments (or models) it did not see.

The 13 experiments are the reference's sim-to-real validation set
(examples/sim-to-real/<id>.toml: five models on H100, TP 1 to 4); their
measured means and tails are `measured.csv` (real vLLM, the public
results_trainval/error_records.csv of inference-sim's
sim-to-real-accuracy-validation).

A user whose hardware is not in the reference's training set starts from
coefficients that are off: every run file here starts from the shipped
trained-physics coefficients × START (default 1.5). For each fold the
script fits the coefficients (`blis calibrate fit`) on the other folds'
measurements and runs the held-out experiments with that profile
(`[model] calibration`, with `calibration_extrapolate = true` where the
held-out model is not among the profile's deployments), then prints each
experiment's held-out error on mean E2E, TTFT and ITL and their medians.

    ./loo.py                    # leave-one-experiment-out and leave-one-model-out
    ./loo.py --by experiment    # one of them
    ./loo.py --start 1.0        # from the shipped coefficients
    ./loo.py --by in-sample     # one fit on all 13, judged on the same 13:
                                # what the fit reaches with nothing held out
    ./loo.py --by grid          # no fit: the shipped coefficients with the
                                # betas, alpha[0] and beta[0] scaled over a grid, judged
                                # on all 13 (where the target can be met at all)

Three things about the real runs that the run files do not say, and one
thing about the models the reference's step-time formulas leave out, all
default on (see the book's "How far does a profile carry?"):

    --async-scheduling on   `[instance] async_scheduling`: the real runs'
                            vLLM (v0.15.1) schedules one step ahead by
                            default, so a request queued while a step runs
                            joins the step after the next one (about a step
                            more TTFT under load); `off` is the reference's
                            engine

    --expert-load touched   `[model] moe_expert_load`: an MoE step loads the
                            experts its tokens route to (Llama-4-Scout's real
                            ITL grows with load; every expert each step
                            does not); `all` is the reference's model
    --itl client            the measured ITL is the client's: (mean E2E -
                            mean TTFT) / (mean output_len - 1), where
                            inference-perf counts output_len by re-tokenizing
                            the text it received -- for llama-2-7b-hf 77-79 %
                            of the tokens the server generated. A fit compares
                            blis's ITL per generated token with each training
                            experiment's ITL per generated token (its own
                            count); a held-out experiment's ITL is predicted
                            per client-counted token with the count of its
                            model's training experiments (none: as generated).
                            `--itl generated` compares the two as they are.
    --geometry full         `[model] geometry`: a step reads the LM head's
                            weights (vocab x hidden) and the attention has
                            the config's declared head size (Mistral-Nemo's
                            heads are 128 wide, not 5120/32 = 160);
                            `reference` is the reference's shape

The fit is judged on the whole-run means and fits them alone
(`--objective means`: every stage's rows and the p90/p99 tails
weightless); `--objective all` fits every measured row.

    --weights tolerance     each metric's rows weigh 1 / the error the target
                            tolerates on it (E2E 6.7, TTFT 12, ITL 8 %:
                            weights 1, 0.558, 0.8375), so the fit minimises
                            the sum of errors in units of their tolerances;
                            `equal` weighs them alike

    --sim-seeds 3           each prediction, fitted (`calibrate fit
                            --sim-seeds`) and judged, is the mean over 3
                            workload seeds (the run file's, + 1, + 2): a
                            real run is one draw of its workload and the
                            simulation at one seed another, and the median
                            of 13 moves by about 1.5 points between seeds
                            at fixed coefficients; 1 is three times faster
    --seed N                the first of those seeds (default: the run
                            files', 42): the same procedure on other draws
                            of the same workloads

Environment: BLIS (default ../../../target/release/blis), WORK (a
directory kept between runs: profiles already fitted are reused when their
inputs are unchanged; default a temporary one), FIT_ARGS (extra
`calibrate fit` arguments). About 13 + 6 fits (about 40 minutes on 2
cores at 3 seeds); see the book's "How far does a profile carry?" for the
figures.
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.dirname(HERE)
BLIS = os.environ.get("BLIS", os.path.join(HERE, "../../../target/release/blis"))
# The shipped trained-physics coefficients (the reference's iter29, blis's default).
ALPHA = [15563.199579, 777.3455, 45.907545]
BETA = [0.152128, 0.0, 1.36252915, 0.752037, 32.09546717, 4.41684444, 126.024825,
        481.8613888, 0.0, 1.94710771, 0.752037]
METRICS = [("e2e", "e2e_mean_ms"), ("ttft", "ttft_mean_ms"), ("itl", "itl_mean_ms")]
# Set by main(): `--set`s every run gets, whether the ITL is the client's.
RUN_SETS = []
CLIENT_ITL = True
# Workload seeds each prediction is the mean over (--sim-seeds), and the
# first of them (--seed; None: the run file's).
SIM_SEEDS = 1
SEED = None
# The start's factor on the shipped coefficients (--start), and its default.
DEFAULT_START = 1.5
START = DEFAULT_START
# The target for the median |held-out error|, %.
TARGET = {"e2e": 6.7, "ttft": 12.0, "itl": 8.0}
# --weights tolerance: each metric's weight, 1 / its tolerance with E2E's as
# 1 (6.7 / 12 = 0.558, 6.7 / 8 = 0.8375).
TOLERANCE_WEIGHTS = {"e2e": 1, "ttft": 0.558, "itl": 0.8375}


def read_measured():
    rows = []
    with open(os.path.join(HERE, "measured.csv")) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            rows.append((r["run_file"], r["metric"], float(r["value"])))
    return rows


def run_file_key(run_file, pattern):
    """The first group of the run file's line `KEY = VALUE` matching pattern."""
    text = open(os.path.join(RUNS, run_file)).read()
    return re.search(pattern, text, re.M).group(1)


def model_of(run_file):
    return run_file_key(run_file, r'^name = "([^"]+)"')


def output_len(run_file):
    """Tokens the server generates per request (the run file's output_len)."""
    return int(run_file_key(run_file, r"^output_len = (\d+)"))


def client_count(run_file, measured, prefix=""):
    """The client's count of a request's output tokens per token the server
    generated: the measured ITL is (E2E - TTFT) / (output_len - 1) of the
    means, so output_len = (E2E - TTFT) / ITL + 1."""
    e2e, ttft, itl = (measured[(run_file, f"{prefix}{m}_mean_ms")] for m in ("e2e", "ttft", "itl"))
    return ((e2e - ttft) / itl + 1) / output_len(run_file)


def per_generated(run_file, metric, value, measured):
    """A measured value as a fit compares it: a mean ITL per generated token
    (the experiment's own client count); anything else as measured."""
    if not (CLIENT_ITL and metric.endswith("itl_mean_ms")):
        return value
    k = output_len(run_file)
    r = client_count(run_file, measured, metric.removesuffix("itl_mean_ms"))
    return value * (r * k - 1) / (k - 1)


def write_start(work, run_file, scale):
    """The run file with the shipped coefficients × scale as its start (and
    RUN_SETS' model keys)."""
    text = open(os.path.join(RUNS, run_file)).read()
    def keys(section):
        return "".join(s.removeprefix(section + ".").replace("=", " = ", 1) + "\n"
                       for s in RUN_SETS if s.startswith(section + "."))
    coeffs = (f"alpha = {[round(a * scale, 6) for a in ALPHA]}\n"
              f"beta = {[round(b * scale, 8) for b in BETA]}\n" + keys("model"))
    text = text.replace('latency_model = "trained-physics"\n',
                        'latency_model = "trained-physics"\n' + coeffs, 1)
    text = text.replace("[instance]\n", "[instance]\n" + keys("instance"), 1)
    if SEED is not None:
        text = re.sub(r"^seed = \d+$", f"seed = {SEED}", text, count=1, flags=re.M)
    with open(os.path.join(work, run_file), "w") as f:
        f.write(text)


def fit(work, name, rows, measured, fit_args):
    """`blis calibrate fit` on rows; the profile's path (reused if its
    table, its arguments, RUN_SETS, the seed and the start are unchanged)."""
    name += "".join("-" + v.split("=", 1)[1].strip('"') for v in RUN_SETS)
    if SEED is not None:
        name += f"-seed{SEED}"
    if START != DEFAULT_START:
        name += f"-start{START}"
    table = os.path.join(work, f"{name}.csv")
    profile = os.path.join(work, f"{name}.profile.toml")
    args = os.path.join(work, f"{name}.args")
    text = "run_file,metric,value\n" + "".join(
        f"{r},{m},{per_generated(r, m, v, measured)!r}\n" for r, m, v in rows)
    if all(os.path.exists(p) for p in (profile, table, args)) \
            and open(table).read() == text and open(args).read() == " ".join(fit_args):
        return profile
    with open(table, "w") as f:
        f.write(text)
    with open(args, "w") as f:
        f.write(" ".join(fit_args))
    cmd = [BLIS, "calibrate", "fit", "--measurements", table, "--out", profile, "--quiet"] + fit_args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{p.stderr}")
    return profile


def run_errors(run_file, measured, sets, count=None):
    """`blis run` of the run file with these `--set` overrides (and
    RUN_SETS) at SIM_SEEDS workload seeds (the run file's, then + 1, ...,
    as `calibrate fit --sim-seeds` runs it): the error of the whole-run
    means (averaged over the seeds) against the measured ones, {metric: %}.
    The ITL predicted is per client-counted token, `count` of them per
    generated token (None: the experiment's own count)."""
    c = {f: 0.0 for _, f in METRICS}
    seed = int(run_file_key(run_file, r"^seed = (\d+)")) if SEED is None else SEED
    for j in range(SIM_SEEDS):
        cmd = [BLIS, "run", os.path.join(RUNS, run_file), "--quiet"]
        for s in RUN_SETS + sets + ([f"seed={seed + j}"] if j or SEED is not None else []):
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}\n{p.stderr}")
        report = json.loads(p.stdout)["cluster"]
        for _, f in METRICS:
            c[f] += report[f] / SIM_SEEDS
    if CLIENT_ITL:
        k = output_len(run_file)
        r = client_count(run_file, measured) if count is None else count
        c["itl_mean_ms"] *= (k - 1) / (r * k - 1)
    return {k: 100 * (c[f] - measured[(run_file, f)]) / measured[(run_file, f)] for k, f in METRICS}


def objective_args(rows, objective, weights):
    """`calibrate fit` weights of an objective: `means` fits the whole-run
    means alone (what the medians judge: every stage's rows and the tails
    weightless), `stage-means` every mean, the whole run's and each
    stage's (the tails weightless), `all` every measured row (the fit's
    default). With `weights = "tolerance"` every row of a metric the
    target judges weighs 1 / its tolerance (E2E's as 1)."""
    fields = sorted({m.split(".")[-1] for _, m, _ in rows})
    stages = sorted({m.split(".")[0] for _, m, _ in rows if m.startswith("stages[")})
    tails = [f for f in fields if not f.endswith("_mean_ms")]
    zero = []
    if objective != "all":
        zero = [f"{s}.{f}" for s in stages for f in (tails if objective == "stage-means" else fields)]
        zero += tails
    weighed = {}
    if weights == "tolerance":
        for k, f in METRICS:
            for m in [f] + [f"{s}.{f}" for s in stages]:
                if m not in zero:
                    weighed[m] = TOLERANCE_WEIGHTS[k]
    return [a for z in zero for a in ("--weight", f"{z}=0")] + \
        [a for m, w in weighed.items() for a in ("--weight", f"{m}={w}")]


def medians(errors):
    """The median |error| of each metric over experiments' {metric: %}."""
    return {k: statistics.median(abs(e[k]) for e in errors) for k, _ in METRICS}


def error_row(e, model, measured, profile, extrapolate, count=None):
    """Experiment e run with the profile (None: with the shipped
    coefficients, uncalibrated): (id, model, {metric: error %})."""
    # The profile's coefficients replace the run file's.
    sets = [] if profile is None else [f'model.calibration="{profile}"']
    if extrapolate:
        sets.append("model.calibration_extrapolate=true")
    return (e.removesuffix(".toml"), model, run_errors(e, measured, sets, count))


def training_count(e, models, train, measured):
    """The client count of e's model in the training experiments (their
    mean; 1: none of them ran e's model)."""
    seen = [t for t in dict.fromkeys(r for r, _, _ in train) if models[t] == models[e]]
    return statistics.mean(client_count(t, measured) for t in seen) if seen else 1.0


def grid(exps, measured):
    """Median |error| of the 13 with the shipped betas × sb, alpha[0] × s0
    and the prefill compute beta[0] × sp besides."""
    print("\nno fit: the shipped coefficients, betas × sb, alpha[0] × s0, beta[0] × sp besides;"
          " judged on all 13 (* meets the target)")
    print(f"{'sb':>6} {'s0':>6} {'sp':>6} " + " ".join(f"{k + ' |Δ|':>9}" for k, _ in METRICS))
    out = []
    for sb in (0.96, 0.98, 0.99, 1.0, 1.01, 1.02, 1.04):
        for s0 in (0.6, 0.8, 1.0, 1.2, 1.4):
            for sp in (0.5, 0.75, 1.0, 1.5):
                alpha = [ALPHA[0] * s0] + ALPHA[1:]
                beta = [b * sb for b in BETA]
                beta[0] *= sp
                errors = [run_errors(e, measured, [f"model.alpha={alpha}", f"model.beta={beta}"])
                          for e in exps]
                med = medians(errors)
                meets = all(med[k] <= t for k, t in TARGET.items())
                print(f"{sb:>6.2f} {s0:>6.1f} {sp:>6.2f} "
                      + " ".join(f"{med[k]:>9.1f}" for k, _ in METRICS) + (" *" if meets else ""))
                out.append({"sb": sb, "s0": s0, "sp": sp, **med})
    return out


def table(title, errors):
    print(f"\n{title}")
    print(f"{'experiment':<17} {'model':<44} " + " ".join(f"{k + ' Δ%':>9}" for k, _ in METRICS))
    for exp, model, e in errors:
        print(f"{exp:<17} {model:<44} " + " ".join(f"{e[k]:>+9.1f}" for k, _ in METRICS))
    med = medians([e for _, _, e in errors])
    print(f"{'median |Δ|':<62} " + " ".join(f"{med[k]:>9.1f}" for k, _ in METRICS))
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--by", choices=["experiment", "model", "both", "in-sample", "grid"], default="both")
    ap.add_argument("--start", type=float, default=DEFAULT_START, help="start = shipped coefficients × this")
    ap.add_argument("--expert-load", choices=["touched", "all"], default="touched")
    ap.add_argument("--itl", choices=["client", "generated"], default="client")
    ap.add_argument("--async-scheduling", choices=["on", "off"], default="on")
    ap.add_argument("--geometry", choices=["full", "reference"], default="full")
    ap.add_argument("--objective", choices=["means", "stage-means", "all"], default="means")
    ap.add_argument("--weights", choices=["tolerance", "equal"], default="tolerance",
                    help="weigh each judged metric by 1 / its tolerance, or alike")
    ap.add_argument("--sim-seeds", type=int, default=3,
                    help="workload seeds per prediction, fitted and judged (their mean)")
    ap.add_argument("--seed", type=int, help="the first workload seed (default: the run files')")
    a = ap.parse_args()
    global CLIENT_ITL, SIM_SEEDS, SEED, START
    SIM_SEEDS = a.sim_seeds
    SEED = a.seed
    START = a.start
    if SIM_SEEDS < 1:
        sys.exit("--sim-seeds: at least 1")
    if SEED is not None and SEED < 0:
        sys.exit("--seed: a non-negative integer")
    CLIENT_ITL = a.itl == "client"
    RUN_SETS.append(f'model.moe_expert_load="{a.expert_load}"')
    if a.geometry == "full":
        RUN_SETS.append('model.geometry="full"')
    if a.async_scheduling == "on":
        RUN_SETS.append("instance.async_scheduling=true")
    if not os.access(BLIS, os.X_OK):
        sys.exit(f"no blis at {BLIS}: cargo build --release -p blis-host (or set BLIS)")
    work = os.environ.get("WORK") or tempfile.mkdtemp(prefix="blis-loo-")
    os.makedirs(work, exist_ok=True)
    rows = read_measured()
    fit_args = objective_args(rows, a.objective, a.weights) + os.environ.get("FIT_ARGS", "").split()
    if SIM_SEEDS > 1:
        fit_args += ["--sim-seeds", str(SIM_SEEDS)]
    exps = list(dict.fromkeys(r for r, _, _ in rows))
    # The rows fitted: a run of one stage has its stage's rows twice (as the
    # whole run's too); `stage-means` fits them once.
    staged = {r for r, m, _ in rows if m.startswith("stages[1].")}
    fitted = [(r, m, v) for r, m, v in rows
              if a.objective != "stage-means" or r in staged or not m.startswith("stages[")]
    for e in exps:
        write_start(work, e, a.start)
    models = {e: model_of(e) for e in exps}
    measured = {(r, m): v for r, m, v in rows}
    out = {}
    errors = [error_row(e, models[e], measured, None, False) for e in exps]
    out["shipped"] = table("the shipped coefficients, uncalibrated (for reference)", errors)
    if a.by == "grid":
        out["grid"] = grid(exps, measured)
    if a.by == "in-sample":
        profile = fit(work, "in-sample", fitted, measured, fit_args)
        errors = [error_row(e, models[e], measured, profile, False) for e in exps]
        out["in-sample"] = table(f"in-sample: one fit on all, judged on the same (start: shipped × {a.start})", errors)
    ways = {"both": ["experiment", "model"], "in-sample": [], "grid": []}.get(a.by, [a.by])
    for by in ways:
        key = (lambda e: e) if by == "experiment" else (lambda e: models[e])
        errors = []
        for unit in dict.fromkeys(key(e) for e in exps):
            held = [e for e in exps if key(e) == unit]
            train = [r for r in fitted if key(r[0]) != unit]
            name = f"{by}-{re.sub(r'[^A-Za-z0-9.-]', '_', unit.removesuffix('.toml'))}"
            profile = fit(work, name, train, measured, fit_args)
            for e in held:
                extrapolate = all(models[t] != models[e] for t, _, _ in train)
                count = training_count(e, models, train, measured)
                errors.append(error_row(e, models[e], measured, profile, extrapolate, count))
        order = {e.removesuffix(".toml"): i for i, e in enumerate(exps)}
        errors.sort(key=lambda x: order[x[0]])
        out[by] = table(f"leave-one-{by}-out (start: shipped × {a.start}; profiles in {work})", errors)
    print("\n" + json.dumps(out))
    if not os.environ.get("WORK"):
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""blis.replay and blis.calibrate_fit against `blis replay` and `blis
calibrate fit`: the same flags give the same report and the same profile,
the SimResult array comes back without files, bad input is an InputError
naming the file and line or flag, Ctrl-C stops a fit with nothing written."""

import csv
import json
import shutil
import subprocess
import sys

import pytest

import blis

from conftest import EXAMPLES, REPO

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

FIXTURES = REPO / "tests" / "fixtures" / "workload-head"
HEADER = FIXTURES / "replay-three-requests.trace.yaml"
DATA = FIXTURES / "replay-three-requests.trace.csv"


def _cli(blis_bin, *args, cwd=None):
    out = subprocess.run(
        [str(blis_bin), *map(str, args)], capture_output=True, text=True, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_replay_is_the_commands_report(blis_bin):
    report = blis.replay(HEADER, DATA)
    assert report == _cli(blis_bin, "replay", "--trace-header", HEADER, "--trace-data", DATA, "--quiet")
    assert report["cluster"]["num_requests"] == 3
    assert report["cluster"]["completed_requests"] == 3


def test_replay_flags_are_the_commands_flags(blis_bin, tmp_path):
    run_file = tmp_path / "cluster.toml"
    shutil.copy(EXAMPLES / "weighted-routing.toml", run_file)
    report = blis.replay(
        HEADER, DATA, run_file,
        num_instances=2, seed=7, routing_scorers={"queue-depth": 2, "kv-utilization": 1},
        horizon=150_000, overrides={"instance.total_kv_blocks": 5000},
    )
    cli = _cli(
        blis_bin, "replay", "--trace-header", HEADER, "--trace-data", DATA, run_file,
        "--num-instances", "2", "--seed", "7", "--routing-scorers", "queue-depth:2,kv-utilization:1",
        "--horizon", "150000", "--set", "instance.total_kv_blocks=5000", "--quiet",
    )
    assert report == cli
    # The horizon (150 ms) keeps the third request (injected at 200 ms) out,
    # and the second (at 100 ms; each takes 77 ms end to end) still running.
    c = report["cluster"]
    assert (c["injected_requests"], c["completed_requests"], c["still_running"]) == (2, 1, 1)


def test_replay_returns_the_sim_results_without_files(blis_bin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = blis.replay(HEADER, DATA, results=True, as_frame=False)
    assert list(tmp_path.iterdir()) == [], "no file is left behind"
    assert dict(r) == blis.replay(HEADER, DATA), "the results do not change the report"
    assert [s["request_id"] for s in r.results] == [0, 1, 2]
    assert all((s["input_tokens"], s["output_tokens"]) == (10, 5) for s in r.results)
    # The file `blis replay --results-path` writes, and `results_path` too.
    _cli(blis_bin, "replay", "--trace-header", HEADER, "--trace-data", DATA,
         "--results-path", "cli.json", "--quiet", cwd=tmp_path)
    cli = json.loads((tmp_path / "cli.json").read_text())
    assert r.results == cli
    again = blis.replay(HEADER, DATA, results=True, results_path="mine.json", as_frame=False)
    assert json.loads((tmp_path / "mine.json").read_text()) == cli == again.results


def test_replay_of_a_run_table_is_the_run_file(tmp_path, caplog):
    run_file = tmp_path / "c.toml"
    run_file.write_text(
        'seed = 3\n[model]\nname = "qwen3-14b"\nhardware = "H100"\n'
        "[instance]\ncount = 2\n[workload]\nnum_requests = 10\n"
    )
    table = {"seed": 3, "model": {"name": "qwen3-14b", "hardware": "H100"},
             "instance": {"count": 2}, "workload": {"num_requests": 10}}
    with caplog.at_level("INFO", logger="blis"):
        from_file = blis.replay(HEADER, DATA, run_file)
    assert "the trace replaces the run file's [workload]" in caplog.text
    assert blis.replay(HEADER, DATA, table) == from_file
    assert from_file["cluster"]["num_requests"] == 3


def test_bad_replay_inputs_are_input_errors(tmp_path):
    with pytest.raises(blis.InputError) as e:
        blis.replay(tmp_path / "missing.yaml", DATA)
    assert "missing.yaml" in str(e.value)
    bad = tmp_path / "bad.csv"
    lines = DATA.read_text().splitlines()
    bad.write_text("\n".join(lines[:2] + [lines[2].replace(",10,5,", ",ten,5,", 1)]) + "\n")
    with pytest.raises(blis.InputError) as e:
        blis.replay(HEADER, bad)
    assert "bad.csv" in str(e.value) and "input_tokens" in str(e.value)
    with pytest.raises(blis.InputError, match="--session-mode sometimes: accepted values are fixed and closed-loop"):
        blis.replay(HEADER, DATA, session_mode="sometimes")
    with pytest.raises(blis.InputError, match="--think-time-ms needs --session-mode closed-loop"):
        blis.replay(HEADER, DATA, think_time_ms=5)
    cluster = tmp_path / "c.toml"
    cluster.write_text("[instance]\ncount = 2\nkv_blokcs = 9\n")
    with pytest.raises(blis.InputError) as e:
        blis.replay(HEADER, DATA, cluster)
    assert str(cluster) in str(e.value) and "kv_blokcs" in str(e.value)
    with pytest.raises(blis.InputError, match="routing_scorers"):
        blis.replay(HEADER, DATA, routing_scorers=3)


# A small run file (40 requests) and measurements 20 % slower than it runs.
FIT_RUN = (
    'seed = 5\n[model]\nname = "qwen2.5-7b-instruct"\nhardware = "H100"\n[instance]\ncount = 1\n'
    "[workload]\nnum_requests = 40\naggregate_rate = 4.0\n"
)


@pytest.fixture
def fit_dir(tmp_path):
    (tmp_path / "a.toml").write_text(FIT_RUN)
    base = blis.run(tmp_path / "a.toml")["cluster"]
    rows = "".join(f"a.toml,{m},{base[m] * 1.2!r}\n" for m in ("ttft_mean_ms", "e2e_mean_ms"))
    (tmp_path / "m.csv").write_text("run_file,metric,value\n" + rows)
    return tmp_path


def _profile_body(text):
    """The profile without its comment header and its `created` time."""
    return [l for l in text.splitlines() if not l.startswith("#") and not l.startswith("created = ")]


def test_calibrate_fit_takes_traces_as_the_command_does(fit_dir, blis_bin, monkeypatch):
    monkeypatch.chdir(fit_dir)
    # The run file's own trace, every request's TTFT and E2E made 20 % longer.
    subprocess.run([str(blis_bin), "run", "a.toml", "--quiet", "--trace-output", "t"],
                   check=True, capture_output=True)
    with open(fit_dir / "t.csv", newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    send, first, last = (head.index(c) for c in ("send_time_us", "first_chunk_time_us",
                                                  "last_chunk_time_us"))
    for r in rows[1:]:
        s0 = int(r[send])
        r[first] = str(s0 + round((int(r[first]) - s0) * 1.2))
        r[last] = str(s0 + round((int(r[last]) - s0) * 1.2))
    with open(fit_dir / "t.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    fit = blis.calibrate_fit(None, "py.toml", traces={"a.toml": ("t.yaml", "t.csv")},
                             jobs=2, seed=4, as_frame=False)
    cli = _cli(blis_bin, "calibrate", "fit", "--trace", "a.toml=t.yaml,t.csv", "--out", "cli.toml",
               "--jobs", "2", "--seed", "4", "--quiet", cwd=fit_dir)
    assert fit["train_mape"] < fit["start_mape"]
    assert {**fit, "profile": None} == {**cli, "profile": None}
    assert _profile_body((fit_dir / "py.toml").read_text()) == _profile_body(
        (fit_dir / "cli.toml").read_text())
    assert {r["metric"] for r in fit.rows} >= {"request_ttft_ms", "request_e2e_ms"}
    same = blis.calibrate_fit(None, "py2.toml", traces=["a.toml=t.yaml,t.csv"], jobs=2, seed=4,
                              as_frame=False)
    assert {**same, "profile": None} == {**fit, "profile": None}
    with pytest.raises(blis.InputError, match="nope.yaml"):
        blis.calibrate_fit(None, "x.toml", traces={"a.toml": ("nope.yaml", "t.csv")})


def test_calibrate_fit_writes_the_commands_profile(fit_dir, blis_bin, monkeypatch):
    monkeypatch.chdir(fit_dir)
    fit = blis.calibrate_fit("m.csv", "py.toml", iterations=3, jobs=2, seed=4, as_frame=False)
    cli = _cli(blis_bin, "calibrate", "fit", "--measurements", "m.csv", "--out", "cli.toml",
               "--iterations", "3", "--jobs", "2", "--seed", "4", "--quiet", cwd=fit_dir)
    assert fit["profile"] == "py.toml" and cli["profile"] == "cli.toml"
    assert {**fit, "profile": None} == {**cli, "profile": None}
    assert fit["train_mape"] < fit["start_mape"]
    ours, theirs = (fit_dir / "py.toml").read_text(), (fit_dir / "cli.toml").read_text()
    assert _profile_body(ours) == _profile_body(theirs)
    assert len(_profile_body(ours)) > 10
    if tomllib is not None:
        assert fit.profile == tomllib.loads(ours)
    assert fit.profile["latency_model"] == "trained-physics"
    assert fit.profile["fit"]["seed"] == 4
    assert [(r["line"], r["metric"]) for r in fit.rows] == [(2, "ttft_mean_ms"), (3, "e2e_mean_ms")]
    measured = [float(l.split(",")[2]) for l in (fit_dir / "m.csv").read_text().splitlines()[1:]]
    assert [r["measured"] for r in fit.rows] == measured
    for r in fit.rows:
        # The start runs with the defaults: 1/1.2 of the measurement.
        assert r["start"] == pytest.approx(r["measured"] / 1.2, rel=1e-9)
        assert abs(r["fitted"] - r["measured"]) < abs(r["start"] - r["measured"])
        assert r["heldout"] is None and r["fold"] is None


def test_calibrate_fit_flags_as_python_values(fit_dir, monkeypatch):
    monkeypatch.chdir(fit_dir)
    # alpha[1] (post-decode overhead) never changes TTFT: the fit cannot
    # improve, nothing is written.
    (fit_dir / "ttft.csv").write_text("run_file,metric,value\na.toml,ttft_mean_ms,1000\n")
    with pytest.raises(blis.InputError, match="cannot improve on its start"):
        blis.calibrate_fit("ttft.csv", "p.toml", fit=["alpha[1]"], iterations=3)
    assert not (fit_dir / "p.toml").exists()
    fit = blis.calibrate_fit("m.csv", "p.toml", fit=["beta[0]"], iterations=2,
                             weights={"e2e_mean_ms": 0.5}, bounds={"beta[0]": (1e-4, 1.0)})
    assert list(fit["fitted"]) == ["beta[0]"]
    assert fit.profile["fit"]["weights"] == {"e2e_mean_ms": 0.5}
    assert 1e-4 <= fit["fitted"]["beta[0]"] <= 1.0
    assert "sim_seeds" not in fit.profile["fit"]


def test_calibrate_fit_sim_seeds_as_the_command(fit_dir, blis_bin, monkeypatch):
    monkeypatch.chdir(fit_dir)
    fit = blis.calibrate_fit("m.csv", "py.toml", fit="beta", sim_seeds=2, jobs=2,
                             as_frame=False)
    cli = _cli(blis_bin, "calibrate", "fit", "--measurements", "m.csv", "--out", "cli.toml",
               "--fit", "beta", "--sim-seeds", "2", "--jobs", "2", "--quiet", cwd=fit_dir)
    assert {**fit, "profile": None} == {**cli, "profile": None}
    assert fit.profile["fit"]["sim_seeds"] == 2
    assert _profile_body((fit_dir / "py.toml").read_text()) == _profile_body(
        (fit_dir / "cli.toml").read_text())
    with pytest.raises(blis.InputError, match="--sim-seeds must be"):
        blis.calibrate_fit("m.csv", "p.toml", sim_seeds=0)


def test_calibrate_fit_holdout_by_as_the_command(fit_dir, blis_bin, monkeypatch):
    monkeypatch.chdir(fit_dir)
    # A second model, measured 20 % slow too: each predicted from the other.
    (fit_dir / "b.toml").write_text(FIT_RUN.replace("qwen2.5-7b-instruct", "llama-3.1-8b-instruct"))
    base = blis.run(fit_dir / "b.toml")["cluster"]
    with open(fit_dir / "m.csv", "a") as f:
        f.write("".join(f"b.toml,{m},{base[m] * 1.2!r}\n" for m in ("ttft_mean_ms", "e2e_mean_ms")))
    fit = blis.calibrate_fit("m.csv", "py.toml", fit="beta", holdout_by="model", jobs=2,
                             as_frame=False)
    cli = _cli(blis_bin, "calibrate", "fit", "--measurements", "m.csv", "--out", "cli.toml",
               "--fit", "beta", "--holdout-by", "model", "--jobs", "2", "--quiet", cwd=fit_dir)
    assert {**fit, "profile": None} == {**cli, "profile": None}
    by_model = fit.profile["error"]["heldout_by"]["model"]
    assert by_model["folds"] == 2
    assert set(by_model["per_unit"]) == {"qwen2.5-7b-instruct", "llama-3.1-8b-instruct"}
    assert fit.profile["fit"]["holdout_by"] == ["model"]
    assert _profile_body((fit_dir / "py.toml").read_text()) == _profile_body(
        (fit_dir / "cli.toml").read_text())
    with pytest.raises(blis.InputError, match="every measured experiment has the same gpu"):
        blis.calibrate_fit("m.csv", "p.toml", fit="beta", holdout_by=["gpu"])


def test_bad_calibrate_fit_inputs_are_input_errors(fit_dir, monkeypatch):
    monkeypatch.chdir(fit_dir)
    (fit_dir / "bad.csv").write_text("run_file,metric,value\na.toml,ttft_mean_ms,20\na.toml,ttft_average,3\n")
    with pytest.raises(blis.InputError, match=r"bad\.csv, line 3: unknown metric 'ttft_average'"):
        blis.calibrate_fit("bad.csv", "p.toml")
    (fit_dir / "gone.csv").write_text("run_file,metric,value\nmissing.toml,ttft_mean_ms,20\n")
    with pytest.raises(blis.InputError, match=r"gone\.csv, line 2 \(run file missing\.toml\)"):
        blis.calibrate_fit("gone.csv", "p.toml")
    with pytest.raises(blis.InputError, match="overwrite the input"):
        blis.calibrate_fit("m.csv", "m.csv")
    with pytest.raises(blis.InputError, match="--weight"):
        blis.calibrate_fit("m.csv", "p.toml", weights=["ttft_mean_ms"])
    assert not (fit_dir / "p.toml").exists()


INTERRUPTED_FIT = r"""
import _thread, os, sys, threading, blis
os.chdir(sys.argv[1])
threading.Timer(1.0, _thread.interrupt_main).start()
try:
    # About 10^10 requests per simulation: never finishes unless interrupted.
    blis.calibrate_fit("m.csv", "p.toml", iterations=2)
except KeyboardInterrupt:
    print("interrupted")
print(os.path.exists("p.toml"))
"""


def test_ctrl_c_stops_a_fit_with_nothing_written(tmp_path):
    (tmp_path / "a.toml").write_text(
        FIT_RUN.replace("num_requests = 40", "num_requests = 10000000000")
        + '[output]\npercentiles = "sketch"\n'
    )
    (tmp_path / "m.csv").write_text("run_file,metric,value\na.toml,ttft_mean_ms,20\n")
    out = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_FIT, str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interrupted", "False"]


def test_calibrate_fit_prior_sd_as_the_command(fit_dir, blis_bin, monkeypatch):
    monkeypatch.chdir(fit_dir)
    fit = blis.calibrate_fit("m.csv", "py.toml", fit="beta[2],beta[4]", prior_sd=0.1, jobs=2,
                             as_frame=False)
    cli = _cli(blis_bin, "calibrate", "fit", "--measurements", "m.csv", "--out", "cli.toml",
               "--fit", "beta[2],beta[4]", "--prior-sd", "0.1", "--jobs", "2", "--quiet",
               cwd=fit_dir)
    assert {**fit, "profile": None} == {**cli, "profile": None}
    assert "Gaussian prior of standard deviation 0.1" in fit.profile["fit"]["method"]
    assert _profile_body((fit_dir / "py.toml").read_text()) == _profile_body(
        (fit_dir / "cli.toml").read_text())
    with pytest.raises(blis.InputError, match="--prior-sd -1: "):
        blis.calibrate_fit("m.csv", "p.toml", prior_sd=-1)
    assert not (fit_dir / "p.toml").exists()

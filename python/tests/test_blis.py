"""The blis Python package against the `blis` command and against itself:
the same run gives the same report, overrides and run tables mean what
`--set` and run files mean, outputs come back without files, sweeps give
the tidy table, errors are the right exceptions with blis's message, the GIL
is released while simulating, Ctrl-C stops a run."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings

import pytest

import blis

from conftest import EXAMPLES

try:
    import pandas
except ImportError:  # the suite also runs without pandas
    pandas = None

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

SMALL = {"workload.num_requests": 50, "instance.count": 2}


def test_default_run_is_the_commands_report(cli_report):
    report = blis.run()
    cli = cli_report()
    assert report == cli
    assert report["cluster"]["ttft_p99_ms"] == cli["cluster"]["ttft_p99_ms"]
    assert report["cluster"]["num_requests"] == 1000


def test_overrides_are_set_flags(cli_report):
    report = blis.run(overrides=SMALL)
    assert report["cluster"]["num_requests"] == 50
    assert report["cluster"]["completed_requests"] == 50
    assert report == cli_report("--set", "workload.num_requests=50", "--set", "instance.count=2")
    # The same overrides as KEY=VALUE strings.
    assert blis.run(overrides=["workload.num_requests=50", "instance.count=2"]) == report


def test_run_file_with_structured_overrides(tmp_path, cli_report):
    run_file = tmp_path / "w.toml"
    shutil.copy(EXAMPLES / "weighted-routing.toml", run_file)
    overrides = {
        "workload.num_requests": 120,
        "workload.aggregate_rate": 25.5,
        "routing.scorers": [{"name": "queue-depth", "weight": 1}],
        "output.trace_path": str(tmp_path / "t.jsonl"),
    }
    report = blis.run(run_file, overrides=overrides)
    cli = cli_report(
        run_file,
        "--set", "workload.num_requests=120",
        "--set", "workload.aggregate_rate=25.5",
        "--set", 'routing.scorers=[{name = "queue-depth", weight = 1}]',
        "--set", f"output.trace_path={tmp_path / 't.jsonl'}",
    )
    assert report == cli
    assert report["cluster"]["num_requests"] == 120


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_run_table_is_the_run_file(tmp_path):
    run_file = tmp_path / "r.toml"
    shutil.copy(EXAMPLES / "single-instance.toml", run_file)
    with open(run_file, "rb") as f:
        table = tomllib.load(f)
    overrides = {"workload.num_requests": 80}
    assert blis.run(table, overrides=overrides) == blis.run(run_file, overrides=overrides)


def test_results_timeseries_and_trace_without_files(tmp_path, monkeypatch):
    before = set(os.listdir(tmp_path))
    monkeypatch.chdir(tmp_path)
    r = blis.run(overrides=SMALL, results=True, timeseries=True, trace=True, as_frame=False)
    assert set(os.listdir(tmp_path)) == before, "no file is left behind"
    assert isinstance(r, dict)
    assert len(r.results) == 50
    assert sorted(row["id"] for row in r.results) == list(range(50))
    assert len(r.trace) > 0 and isinstance(r.trace[0], dict)
    assert len(r.timeseries) > 0
    assert r.timeseries[-1]["arrived"] == 50
    # Capturing results and time series does not change the report; the
    # decision trace adds its regret figures, as output.trace_path does.
    plain = blis.run(overrides=SMALL)
    assert dict(blis.run(overrides=SMALL, results=True, timeseries=True)) == plain
    assert r["cluster"]["routing_decisions"] == 50 and plain["cluster"].get("routing_decisions") is None
    assert dict(r) == blis.run(overrides={**SMALL, "output.trace_path": str(tmp_path / "t.jsonl")})
    plain = blis.run(overrides=SMALL)
    assert plain.results is None and plain.trace is None and plain.timeseries is None


def test_results_of_a_run_file_that_writes_them(tmp_path):
    run_file = tmp_path / "r.toml"
    text = (EXAMPLES / "single-instance.toml").read_text()
    run_file.write_text(text + '\n[output]\nresults_path = "mine.jsonl"\n' if "[output]" not in text else text)
    r = blis.run(run_file, overrides={"workload.num_requests": 30}, results=True, as_frame=False)
    written = tmp_path / "mine.jsonl"
    assert written.exists(), "the run file's own results file is written"
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert r.results == lines and len(lines) == 30


@pytest.mark.skipif(pandas is None, reason="pandas is not installed")
def test_results_as_a_dataframe():
    r = blis.run(overrides=SMALL, results=True)
    assert isinstance(r.results, pandas.DataFrame)
    assert len(r.results) == 50
    rows = blis.run(overrides=SMALL, results=True, as_frame=False).results
    assert list(r.results.columns) == list(rows[0].keys())
    assert r.results["id"].tolist() == [row["id"] for row in rows]


def test_as_frame_true_without_pandas_is_an_import_error():
    if pandas is not None:
        pytest.skip("pandas is installed")
    with pytest.raises(ImportError, match="pandas"):
        blis.run(overrides=SMALL, results=True, as_frame=True)


SWEEP = {
    "seeds": [1, 2],
    "set": {"workload.num_requests": 40, "instance.count": 2},
    "axis": [{"key": "workload.aggregate_rate", "values": [10.0, 30.0]}],
}


def test_sweep_table_rows_are_runs(tmp_path):
    table = blis.sweep(SWEEP, jobs=2, as_frame=False)
    assert len(table) == 4
    assert [(row["workload.aggregate_rate"], row["seed"]) for row in table] == [
        (10.0, 1), (10.0, 2), (30.0, 1), (30.0, 2)
    ]
    for row in table:
        assert row["status"] == "ok" and not row["error"]
        one = blis.run(overrides={**SWEEP["set"], "workload.aggregate_rate": row["workload.aggregate_rate"],
                                  "seed": row["seed"]})
        assert row["ttft_p99_ms"] == one["cluster"]["ttft_p99_ms"]


def test_sweep_file_into_a_kept_directory_resumes(tmp_path):
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(
        'seeds = [3]\n[set]\n"workload.num_requests" = 30\n'
        '[[axis]]\nkey = "instance.count"\nvalues = [1, 2]\n'
    )
    out = tmp_path / "out"
    first = blis.sweep(sweep_file, out=out, as_frame=False)
    assert (out / "results.csv").exists() and (out / "sweep.json").exists()
    assert [row["instance.count"] for row in first] == [1, 2]
    again = blis.sweep(sweep_file, out=out, as_frame=False)
    assert again == first


@pytest.mark.skipif(pandas is None, reason="pandas is not installed")
def test_sweep_into_a_dataframe():
    df = blis.sweep(SWEEP, jobs=2)
    assert isinstance(df, pandas.DataFrame)
    assert df.shape[0] == 4
    assert {"workload.aggregate_rate", "seed", "ttft_p99_ms", "error"} <= set(df.columns)
    means = df.groupby("workload.aggregate_rate")["ttft_p99_ms"].mean()
    assert list(means.index) == [10.0, 30.0]


def test_sweep_with_a_failing_run_warns_and_keeps_the_row():
    bad = {"set": {"workload.num_requests": 20}, "axis": [{"key": "routing.policy", "values": ["round-robin", "no-such-router"]}]}
    with pytest.warns(blis.BlisWarning, match="1 of 2 runs failed"):
        rows = blis.sweep(bad, jobs=1, as_frame=False)
    assert [r["status"] for r in rows] == ["ok", "failed"]
    assert "no-such-router" in rows[1]["error"]


def test_bad_run_file_names_file_and_key(tmp_path):
    run_file = tmp_path / "bad.toml"
    run_file.write_text("[instance]\ncount = 2\nkv_blokcs = 100\n")
    with pytest.raises(blis.InputError) as e:
        blis.run(run_file)
    message = str(e.value)
    assert str(run_file) in message
    assert "kv_blokcs" in message
    assert isinstance(e.value, blis.Error)


def test_bad_override_is_an_input_error():
    with pytest.raises(blis.InputError, match="num_requests"):
        blis.run(overrides={"workload.num_requests": "many"})
    with pytest.raises(blis.InputError, match="TOML value"):
        blis.run(overrides={"workload.num_requests": None})
    with pytest.raises(blis.InputError, match="not one string"):
        blis.run(overrides="workload.num_requests=5")


def test_missing_run_file_and_bad_sweep_are_input_errors(tmp_path):
    with pytest.raises(blis.InputError, match="cannot read run file"):
        blis.run(tmp_path / "nope.toml")
    with pytest.raises(blis.InputError, match="axes"):
        blis.sweep({"axes": []})


def test_plugins_load_as_with_the_flag(fixture_alpha, cli_report):
    overrides = {**SMALL, "routing.scorers": [{"name": "prefer-first", "weight": 1}]}
    report = blis.run(overrides=overrides, plugins=[fixture_alpha])
    cli = cli_report("--set", "workload.num_requests=50", "--set", "instance.count=2",
                     "--set", 'routing.scorers=[{name = "prefer-first", weight = 1}]',
                     "--plugin", fixture_alpha)
    assert report == cli
    assert report["plugins"], "the report names the plugin file loaded"


def test_run_failure_is_a_run_error(fixture_alpha, blis_bin):
    # A plugin that panics: the run starts and fails (exit code 1 on the command line).
    overrides = {**SMALL, "admission.policy": "panicky-admission"}
    with pytest.raises(blis.RunError, match="fixture-alpha deliberately panicked") as e:
        blis.run(overrides=overrides, plugins=[fixture_alpha])
    assert not isinstance(e.value, blis.InputError) and isinstance(e.value, blis.Error)
    cli = subprocess.run([str(blis_bin), "run", "--set", "admission.policy=panicky-admission",
                          "--plugin", str(fixture_alpha)], capture_output=True, text=True)
    assert cli.returncode == 1
    assert str(e.value) in cli.stderr


def test_runs_on_threads_equal_runs_in_turn():
    cases = [{**SMALL, "seed": s} for s in (1, 2, 3, 4)]
    alone = [blis.run(overrides=c) for c in cases]
    together = [None] * len(cases)

    def one(i):
        together[i] = blis.run(overrides=cases[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    assert len({json.dumps(r["cluster"]) for r in alone}) == 4


def _reader_holds(fifo, ours):
    """Whether a descriptor of this process other than `ours` is open on `fifo`."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if int(fd) != ours and os.readlink(f"/proc/self/fd/{fd}") == str(fifo):
                return True
        except OSError:
            pass
    return False


def _write_when_read(fifo, text, reader):
    """Write `text` into `fifo` as one whole file for one open by the
    `reader` thread; False if the thread ended first. The reader's open
    returns with ours, it cannot see the end of the file before we close, and
    we return only once it has closed its end, so the next call meets its
    next open: the two files cannot run into one."""
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:  # ENXIO: nobody has opened it for reading yet
            if not reader.is_alive():
                return False
            time.sleep(0.001)
    os.set_blocking(fd, True)
    while not _reader_holds(fifo, fd) and reader.is_alive():
        time.sleep(0.001)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    while _reader_holds(fifo, -1) and reader.is_alive():
        time.sleep(0.001)
    return True


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux named pipes and /proc")
def test_the_gil_is_released_while_a_run_reads_its_trace(tmp_path):
    # The run replays a trace from a named pipe, so it can only finish if
    # this (Python) thread writes the trace while the run is in flight: with
    # the GIL held by the run, this thread could never write and the run
    # would wait for ever.
    trace = (EXAMPLES / "trace.csv").read_text()
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    run_file = tmp_path / "replay.toml"
    run_file.write_text(
        'seed = 1\n[model]\nname = "qwen3-14b"\nhardware = "H100"\n'
        '[instance]\ncount = 2\n[workload]\ntrace = "trace.csv"\n'
    )
    result = {}

    def replay():
        try:
            result["report"] = blis.run(run_file)
        except BaseException as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=replay)
    t.start()
    # The trace is read twice: checked whole, then replayed.
    writes = sum(_write_when_read(fifo, trace, t) for _ in range(2))
    t.join()
    assert "error" not in result, result.get("error")
    assert writes == 2
    shutil.copy(EXAMPLES / "trace.csv", tmp_path / "plain.csv")
    plain = run_file.read_text().replace("trace.csv", "plain.csv")
    (tmp_path / "plain.toml").write_text(plain)
    assert result["report"]["cluster"] == blis.run(tmp_path / "plain.toml")["cluster"]


INTERRUPTED = r"""
import _thread, threading, sys, blis
threading.Timer(1.0, _thread.interrupt_main).start()
try:
    # About 10^10 requests (under the 1e11 a run may plan): never finishes unless interrupted.
    blis.run(overrides={"workload.num_requests": 10**10, "output.percentiles": "sketch"})
except KeyboardInterrupt:
    print("interrupted")
r = blis.run(overrides={"workload.num_requests": 20})
print(r["cluster"]["num_requests"])
"""


def test_ctrl_c_stops_a_run_cleanly():
    out = subprocess.run(
        [sys.executable, "-c", INTERRUPTED], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interrupted", "20"]


INTERRUPTED_SWEEP = r"""
import _thread, json, sys, threading, blis
out = sys.argv[1]
sweep = {"set": {"output.percentiles": "sketch"},
         "axis": [{"key": "workload.num_requests", "values": [30, 10**10]}]}
threading.Timer(1.0, _thread.interrupt_main).start()
try:
    blis.sweep(sweep, jobs=1, out=out)
except KeyboardInterrupt:
    print("interrupted")
"""


def test_ctrl_c_stops_a_sweep_and_keeps_the_finished_runs(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_SWEEP, str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted"]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # The short run is stored; the endless one, stopped, is not (it would run
    # again on resuming), and certainly not as a failed run.
    assert [(r["workload.num_requests"], r["status"]) for r in rows] == [(30, "ok")]
    folders = [p.name for p in (out / "runs").iterdir()]
    assert folders == [rows[0]["run_id"]]


def test_version_names_the_plugin_abi():
    assert "plugin ABI" in blis.version()
    assert blis.__version__


def test_warnings_become_python_warnings():
    with pytest.warns(blis.BlisWarning, match="horizon_us = 1 is before the first arrival"):
        report = blis.run(overrides={"horizon_us": 1})
    assert report["cluster"]["num_requests"] == 0

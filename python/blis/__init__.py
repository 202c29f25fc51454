"""blis from Python: run simulations of LLM inference serving clusters and
parameter sweeps in-process, and get the reports as Python objects.

    >>> import blis
    >>> report = blis.run(overrides={"workload.num_requests": 50})
    >>> report["cluster"]["ttft_p99_ms"]
    >>> r = blis.run("examples/prefix-affinity.toml", results=True)
    >>> r.results      # one row per request: a pandas DataFrame (a list of dicts without pandas)
    >>> blis.sweep("examples/sweeps/policies-vs-rate.toml", jobs=2)   # the tidy table
    >>> blis.replay("t.yaml", "t.csv", "examples/single-instance.toml")  # a TraceV2 trace
    >>> fit = blis.calibrate_fit("measurements.csv", out="profile.toml")  # fitted coefficients

Each call goes through the code ``blis run``, ``blis sweep``, ``blis
replay`` and ``blis calibrate fit`` use, so the report is the one the
command prints for the same run file, flags and ``--set`` overrides, and a
profile the one it writes. The simulation runs with the GIL released (Python threads run
runs in parallel); Ctrl-C stops it and raises ``KeyboardInterrupt``.
Errors: :class:`InputError` for bad input (nothing ran), :class:`RunError`
for a run that failed while running; both carry blis's message.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._native import Error, InputError, RunError

__all__ = [
    "run",
    "sweep",
    "replay",
    "calibrate_fit",
    "version",
    "Report",
    "FitResult",
    "PlanResult",
    "NoFeasiblePlan",
    "TuneResult",
    "plan",
    "Error",
    "InputError",
    "RunError",
    "BlisWarning",
]

__version__: str = _native.__version__

_log = logging.getLogger("blis")

PathLike = Union[str, "os.PathLike[str]"]
Overrides = Union[Mapping[str, Any], Iterable[str]]


class BlisWarning(UserWarning):
    """A setting of the run file that is probably a mistake (``warning:`` on
    the command line), or a sweep with failed runs."""


class Report(dict):
    """The JSON report of one run (a ``dict``: ``report["cluster"]["ttft_p99_ms"]``),
    plus the outputs asked for with ``blis.run(results=True, ...)``:

    * ``results`` — one row per request (the run file's ``output.results_path`` lines),
    * ``timeseries`` — one row per interval (``output.timeseries_path``),
    * ``trace`` — one row per decision (``output.trace_path``),

    each a pandas DataFrame, or a list of dicts without pandas (or with
    ``as_frame=False``); ``None`` when not asked for.
    """

    results: Any
    timeseries: Any
    trace: Any

    def __init__(self, report: Mapping[str, Any]):
        super().__init__(report)
        self.results = None
        self.timeseries = None
        self.trace = None


class FitResult(dict):
    """What ``blis.calibrate_fit`` did: the summary ``blis calibrate fit``
    prints (a ``dict``: ``profile``, ``latency_model``, ``start_mape``,
    ``train_mape``, ``heldout_mape``, ``fitted`` {coefficient: value},
    ``evaluations``), plus

    * ``profile`` — the profile written to ``out``, as a dict (the TOML's
      tables: ``coefficients``, ``fitted``, ``error``, ``inputs``…),
    * ``rows`` — one row per measurement: ``line``, ``run_file``,
      ``metric``, ``measured``, ``start``, ``fitted``, ``heldout`` (None
      without ``holdout``), ``fold``; a pandas DataFrame, or a list of dicts
      without pandas (or with ``as_frame=False``).
    """

    profile: Dict[str, Any]
    rows: Any

    def __init__(self, summary: Mapping[str, Any], profile: Dict[str, Any], rows: Any):
        super().__init__(summary)
        self.profile = profile
        self.rows = rows


class PlanResult(dict):
    """What ``blis.plan`` found: ``plan.json`` (a ``dict``: ``answer`` — the
    cheapest candidate meeting the SLOs, or None —, ``shapes``, ``frontier``,
    ``simulations``, ``run_file``…), plus

    * ``frontier`` — the cost/latency Pareto frontier across shapes, one row
      per shape's answer (gpu, tp, axes, instances, gpus, cost_per_hour,
      each SLO metric),
    * ``candidates`` — every simulation (``candidates.csv``): shape, count,
      rate, seed, gpus, cost_per_hour, each SLO metric, feasible, run_id,
      error,
    * ``out`` — the plan's directory (``best.toml``, ``runs/`` …),

    each table a pandas DataFrame, or a list of dicts without pandas (or
    with ``as_frame=False``).
    """

    frontier: Any
    candidates: Any
    out: str

    def __init__(self, plan: Mapping[str, Any], frontier: Any, candidates: Any, out: str):
        super().__init__(plan)
        self.frontier = frontier
        self.candidates = candidates
        self.out = out


class TuneResult(dict):
    """What ``blis.tune`` found: ``tune.json`` (a ``dict``: ``tuned`` and
    ``recommended`` parameter values, ``verdict`` — ``gain``,
    ``improvement``, ``standard_error``, ``reason`` —, ``train`` and
    ``held_out`` with the start's and the answer's mean and spread,
    ``params`` with each one's sensitivity, ``simulations``…), plus

    * ``evaluations`` — every candidate (``evaluations.csv``): evaluation,
      phase, generation, each parameter, the objective, each constraint's
      metric, feasible, best_so_far, error — a pandas DataFrame, or a list
      of dicts without pandas (or with ``as_frame=False``);
    * ``run_file`` — the recommended run file's text (``tuned.toml``);
    * ``epp_config`` — the recommended llm-d file's text
      (``tuned-epp.yaml``) when the base was an llm-d file, else None;
    * ``out`` — the tune's directory (empty when it was temporary).
    """

    evaluations: Any
    run_file: str
    epp_config: Optional[str]
    out: str

    def __init__(self, tune: Mapping[str, Any], evaluations: Any, run_file: str,
                 epp_config: Optional[str], out: str):
        super().__init__(tune)
        self.evaluations = evaluations
        self.run_file = run_file
        self.epp_config = epp_config
        self.out = out


class NoFeasiblePlan(Error):
    """``blis.plan`` found no configuration in the space that meets the SLOs
    (``blis plan`` exits 3). The message names the closest candidates; the
    exception's ``result`` is the :class:`PlanResult` (``answer`` None, every
    simulation in ``candidates``)."""

    result: "PlanResult"


def version() -> str:
    """blis's version and the plugin ABI it loads (as ``blis --version``)."""
    return _native.version()


def _pandas(as_frame: Optional[bool]):
    """pandas if a table should be a DataFrame, else None."""
    if as_frame is False:
        return None
    try:
        import pandas
    except ImportError:
        if as_frame:
            raise ImportError("as_frame=True needs pandas (pip install pandas)") from None
        return None
    return pandas


def _table(rows: List[Dict[str, Any]], as_frame: Optional[bool]):
    pd = _pandas(as_frame)
    return rows if pd is None else pd.DataFrame.from_records(rows)


def _read_jsonl(path: Path) -> List[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _emit(notices: Sequence[Tuple[str, str]]) -> None:
    for kind, text in notices:
        if kind == "warning":
            warnings.warn(text, BlisWarning, stacklevel=3)
        else:
            _log.info("%s", text)


def run(
    run_file: Union[PathLike, Mapping[str, Any], None] = None,
    overrides: Optional[Overrides] = None,
    plugins: Optional[Sequence[PathLike]] = None,
    *,
    results: bool = False,
    timeseries: bool = False,
    trace: bool = False,
    as_frame: Optional[bool] = None,
) -> Report:
    """Run one simulation and return its JSON report as a :class:`Report` (a dict).

    ``run_file``: a TOML run file's path; a dict, read as the run file's table
    (relative paths in it against the current folder); or None for the
    built-in scenario (as ``blis run`` with no file).

    ``overrides``: run-file keys to set, as ``--set`` takes them: a dict of
    dotted keys (``{"workload.num_requests": 50, "instance.count": 2}``;
    values are TOML values: bool, int, float, str, list, dict), or a list of
    ``"section.key=value"`` strings.

    ``plugins``: plugin libraries to load (as ``--plugin PATH``).

    ``results`` / ``timeseries`` / ``trace``: also return the per-request
    results, the time series or the decision trace, as ``Report.results``
    etc., without files to handle: the run file's own output path for it if
    it sets one (that file is written as well), else a temporary file.
    Results and time series leave the report as it is; the decision trace
    adds its figures (``routing_decisions``, ``mean_regret``…), as
    ``output.trace_path`` does.

    ``as_frame``: None (default) gives those tables as pandas DataFrames
    when pandas is installed and lists of dicts otherwise; True needs
    pandas; False always gives lists of dicts.

    Raises :class:`InputError` (bad run file, key or value: nothing ran),
    :class:`RunError` (the run failed), ``KeyboardInterrupt`` (Ctrl-C; the
    run stops within a few milliseconds of simulation).
    """
    run_path, run_text = _run_source(run_file)
    capture = [
        name
        for name, wanted in (("results", results), ("timeseries", timeseries), ("trace", trace))
        if wanted
    ]
    plugin_paths = [os.fspath(p) for p in plugins or []]
    with tempfile.TemporaryDirectory(prefix="blis-run-") as tmp:
        text, notices, captured = _native.run(
            run_file=run_path,
            run_text=run_text,
            overrides=overrides,
            plugins=plugin_paths,
            capture=capture,
            capture_dir=tmp,
        )
        _emit(notices)
        report = Report(json.loads(text))
        for name, path in captured:
            setattr(report, name, _table(_read_jsonl(Path(path)), as_frame))
    return report


def sweep(
    sweep_file: Union[PathLike, Mapping[str, Any]],
    jobs: Optional[int] = None,
    *,
    out: Optional[PathLike] = None,
    shard: Union[str, Tuple[int, int], None] = None,
    as_frame: Optional[bool] = None,
):
    """Run a parameter sweep and return its tidy table (``results.jsonl``):
    one row per run, with the axis values, the seed and the report's figures.

    ``sweep_file``: a sweep file's path, or a dict of the same keys (``base``,
    ``seeds``, ``set``, ``axis``; a relative ``base`` is against the current
    folder).

    ``jobs``: runs at once (default: the number of CPUs).

    ``out``: the output directory, kept (one folder per run with its
    report) and resumed when given again, as ``blis sweep --out DIR``;
    default: a temporary directory, removed afterwards.

    ``shard``: ``"i/N"`` or ``(i, N)``: only every N-th run, from the i-th.

    Returns a pandas DataFrame (a list of dicts without pandas or with
    ``as_frame=False``). Runs that failed are rows with their message in the
    ``error`` column, and a :class:`BlisWarning` says how many. Raises
    :class:`InputError` for a bad sweep file (nothing ran);
    ``KeyboardInterrupt`` on Ctrl-C (the finished runs are kept in ``out``).
    """
    if isinstance(shard, tuple):
        shard = f"{shard[0]}/{shard[1]}"
    _check_jobs(jobs)
    with tempfile.TemporaryDirectory(prefix="blis-sweep-") as tmp:
        path = _search_file(sweep_file, tmp, "sweep.toml", ("base",), "sweep_file")
        out_dir = _out_dir(out, tmp)
        with _named(path, sweep_file, "sweep_file"):
            summary = _native.sweep(path, out_dir, jobs=jobs, shard=shard)
        rows = _read_jsonl(Path(out_dir) / "results.jsonl")
    if summary["failed"]:
        warnings.warn(
            f"{summary['failed']} of {summary['ran']} runs failed; "
            "their errors are in the error column",
            BlisWarning,
            stacklevel=2,
        )
    return _table(rows, as_frame)


def plan(
    plan_file: Union[PathLike, Mapping[str, Any]],
    jobs: Optional[int] = None,
    *,
    out: Optional[PathLike] = None,
    as_frame: Optional[bool] = None,
) -> PlanResult:
    """The cheapest fleet that meets the SLOs, as ``blis plan``.

    ``plan_file``: a plan file's path, or a dict of the same keys (``base``,
    ``seeds``, ``slo``, ``traffic``, ``space``, ``prices``…; a relative
    ``base`` is against the current folder).

    ``jobs``: simulations at once (default: the number of CPUs).

    ``out``: the plan's directory, kept and resumed when given again, as
    ``blis plan --out DIR``; default: a temporary directory, removed
    afterwards (``best.toml`` with it: give ``out`` to keep it).

    Returns a :class:`PlanResult`. Raises :class:`InputError` for a bad plan
    file (nothing ran), :class:`NoFeasiblePlan` when nothing in the space
    meets the SLOs, ``KeyboardInterrupt`` on Ctrl-C (the finished
    simulations are kept in ``out``).
    """
    _check_jobs(jobs)
    with tempfile.TemporaryDirectory(prefix="blis-plan-") as tmp:
        path = _search_file(plan_file, tmp, "plan.toml", ("base",), "plan_file")
        out_dir = _out_dir(out, tmp)
        with _named(path, plan_file, "plan_file"):
            _, infeasible = _native.plan(path, out_dir, jobs=jobs)
        with open(os.path.join(out_dir, "plan.json"), encoding="utf-8") as f:
            plan_json = json.load(f)
        with open(os.path.join(out_dir, "candidates.csv"), newline="", encoding="utf-8") as f:
            candidates = [_typed(row) for row in csv.DictReader(f)]
    frontier = [_flat_candidate(c) for c in plan_json.get("frontier") or []]
    result = PlanResult(
        plan_json,
        _table(frontier, as_frame),
        _table(candidates, as_frame),
        out_dir if out is not None else "",
    )
    if infeasible is not None:
        err = NoFeasiblePlan(infeasible)
        err.result = result
        raise err
    return result


def _search_file(
    file: Union[PathLike, Mapping[str, Any]],
    tmp: str,
    name: str,
    path_keys: Tuple[str, ...],
    arg: str,
) -> str:
    """A sweep, plan or tune file's path: the path given, or a dict written
    as TOML into ``tmp`` (its path keys made absolute against the current
    folder; ``arg``, the argument's name, names its keys in errors)."""
    if not isinstance(file, Mapping):
        return os.fspath(file)
    table = dict(file)
    for key in path_keys:
        if key in table:
            table[key] = os.path.abspath(os.fspath(table[key]))
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_native.table_to_toml(table, arg))
    return path


class _named:
    """Errors about a file written from a dict name the argument (``arg``,
    a dict) instead of the temporary file, which is gone once they reach
    the caller."""

    def __init__(self, path: str, given: Any, arg: str):
        self.path = path if isinstance(given, Mapping) else None
        self.arg = arg

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if self.path is None or not isinstance(err, Error):
            return False
        text = str(err)
        if self.path not in text:
            return False
        folder = os.path.dirname(self.path) + os.sep
        text = text.replace(self.path, f"{self.arg} (a dict)").replace(folder, "")
        new = type(err)(text)
        if hasattr(err, "result"):
            new.result = err.result
        raise new from None


def _check_jobs(jobs: Any) -> None:
    """``jobs``: None or an int ≥ 1 (an InputError naming it otherwise)."""
    if jobs is None:
        return
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"jobs = {jobs!r}: give the number of simulations at once, an int ≥ 1 (or None: every CPU)")


def _check_uint(name: str, value: Any, minimum: int = 0, bits: int = 64) -> None:
    """An unsigned integer argument (None allowed): an InputError naming it
    when it is not an int in [minimum, 2**bits)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < 2**bits:
        raise InputError(f"{name} = {value!r}: give an int from {minimum} to {2**bits - 1}")


def _out_dir(out: Optional[PathLike], tmp: str) -> str:
    """The output folder: ``out`` (never the current folder by an empty
    name, as the command line refuses it), or one in ``tmp``."""
    if out is None:
        return os.path.join(tmp, "out")
    path = os.fspath(out)
    if path == "":
        raise InputError(
            "out = '': an empty path names no folder (it would write into the current folder and replace its results files); give a folder, or None for a temporary one"
        )
    return path


def tune(
    tune_file: Union[PathLike, Mapping[str, Any]],
    jobs: Optional[int] = None,
    *,
    out: Optional[PathLike] = None,
    as_frame: Optional[bool] = None,
) -> TuneResult:
    """A policy's parameters tuned on training traffic and judged on
    held-out traffic, as ``blis tune``.

    ``tune_file``: a tune file's path, or a dict of the same keys (``base``,
    ``epp_config``, ``budget``, ``objective``, ``train``, ``held_out``,
    ``param`` — a list of dicts —, ``set``…; a relative ``base`` or
    ``epp_config`` is against the current folder).

    ``jobs``: simulations at once (default: the number of CPUs).

    ``out``: the tune's directory, kept and resumed when given again, as
    ``blis tune --out DIR``; default: a temporary directory, removed
    afterwards (the texts of ``tuned.toml`` and ``tuned-epp.yaml`` are in
    the result).

    Returns a :class:`TuneResult`. Raises :class:`InputError` for a bad tune
    file (nothing ran), ``KeyboardInterrupt`` on Ctrl-C (the finished
    simulations are kept in ``out``). A held-out set equal to the training
    set warns (:class:`BlisWarning`).
    """
    _check_jobs(jobs)
    with tempfile.TemporaryDirectory(prefix="blis-tune-") as tmp:
        path = _search_file(tune_file, tmp, "tune.toml", ("base", "epp_config"), "tune_file")
        out_dir = _out_dir(out, tmp)
        with _named(path, tune_file, "tune_file"):
            _native.tune(path, out_dir, jobs=jobs)
        d = Path(out_dir)
        with open(d / "tune.json", encoding="utf-8") as f:
            tune_json = json.load(f)
        with open(d / "evaluations.csv", newline="", encoding="utf-8") as f:
            evaluations = [_typed(row) for row in csv.DictReader(f)]
        run_file = (d / "tuned.toml").read_text(encoding="utf-8")
        epp = d / "tuned-epp.yaml"
        epp_text = epp.read_text(encoding="utf-8") if epp.is_file() else None
    if tune_json["held_out"].get("same_as_train"):
        warnings.warn(
            "the held-out traffic is the training traffic: the verdict cannot "
            "tell a real gain from overfitting",
            BlisWarning,
            stacklevel=2,
        )
    return TuneResult(
        tune_json,
        _table(evaluations, as_frame),
        run_file,
        epp_text,
        out_dir if out is not None else "",
    )


def _typed(row: Dict[str, str]) -> Dict[str, Any]:
    """A candidates.csv row with numbers and booleans as such."""
    out: Dict[str, Any] = {}
    for k, v in row.items():
        if v in ("true", "false"):
            out[k] = v == "true"
        elif v == "" and k != "error":
            out[k] = None
        else:
            try:
                out[k] = int(v)
            except ValueError:
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
    return out


def _flat_candidate(c: Mapping[str, Any]) -> Dict[str, Any]:
    """A plan.json candidate as one row: its SLO values as columns."""
    row = {k: v for k, v in c.items() if k not in ("slo_values", "pools")}
    row.update(c.get("slo_values") or {})
    return row


def _run_source(run_file) -> Tuple[Optional[str], Optional[str]]:
    """(path, text) of a run file given as a path, a dict or None."""
    if isinstance(run_file, Mapping):
        return None, _native.table_to_toml(dict(run_file), "run_file")
    if run_file is not None:
        return os.fspath(run_file), None
    return None, None


def _opt_path(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def _pairs(value, sep: str, what: str, fmt) -> List[str]:
    """A dict as ``KEY{sep}VALUE`` strings (``fmt`` writes the value), or a
    list of such strings as they are."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [f"{k}{sep}{fmt(v)}" for k, v in value.items()]
    if isinstance(value, str):
        return [value]
    try:
        return [str(v) for v in value]
    except TypeError:
        raise InputError(f"{what}: give a dict or a list of strings, not a {type(value).__name__}") from None


def _scorers(value) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{w}" for k, w in value.items())
    raise InputError(
        "routing_scorers: give \"name:weight,...\" or a dict {name: weight}, "
        f"not a {type(value).__name__}"
    )


def replay(
    trace_header: PathLike,
    trace_data: PathLike,
    run_file: Union[PathLike, Mapping[str, Any], None] = None,
    *,
    session_mode: str = "fixed",
    think_time_ms: Optional[float] = None,
    think_time_dist: Optional[str] = None,
    seed: Optional[int] = None,
    model: Optional[str] = None,
    num_instances: Optional[int] = None,
    horizon: Optional[int] = None,
    admission_policy: Optional[str] = None,
    routing_policy: Optional[str] = None,
    routing_scorers: Union[str, Mapping[str, float], None] = None,
    plugins: Optional[Sequence[PathLike]] = None,
    results_path: Optional[PathLike] = None,
    metrics_path: Optional[PathLike] = None,
    trace_output: Optional[PathLike] = None,
    overrides: Optional[Overrides] = None,
    results: bool = False,
    as_frame: Optional[bool] = None,
) -> Report:
    """Replay a TraceV2 trace (header YAML + data CSV) on the cluster of a
    run file and return the JSON report as a :class:`Report`, as ``blis
    replay --trace-header H --trace-data D [RUN_FILE] [flags]`` prints it.

    ``run_file``: the cluster (model, instances, pools, policies, plugins) as
    a path, a dict (the run file's table) or None for the built-in scenario's
    cluster; its ``[workload]`` is replaced by the trace.

    The keywords are the command's flags: ``session_mode`` (``"fixed"``:
    every row at its injection time, or ``"closed-loop"``: session rounds
    follow completions plus think time), ``think_time_ms`` /
    ``think_time_dist`` (closed-loop only), ``seed`` (of the token content),
    ``model``, ``num_instances``, ``horizon`` (µs), ``admission_policy``,
    ``routing_policy``, ``routing_scorers`` (``"name:weight,..."`` or a dict
    {name: weight}), ``plugins`` (``--plugin``), ``results_path`` (the
    SimResult JSON array ``blis calibrate`` reads), ``metrics_path`` (the
    aggregate metrics JSON), ``trace_output`` (P: the replayed trace as
    P.yaml + P.csv); ``overrides`` are ``--set``s, as in :func:`run`.

    ``results``: also return the SimResult array (one entry per completed
    trace row, by request_id) as ``Report.results`` — a DataFrame, or a list
    of dicts (see ``as_frame`` in :func:`run`); it is ``results_path``'s
    content when that is given, else read from a temporary file.

    Raises :class:`InputError` (bad flag, run file or trace: the message
    names the file, line and column; nothing ran), :class:`RunError`,
    ``KeyboardInterrupt`` (Ctrl-C stops the replay).
    """
    _check_uint("seed", seed)
    _check_uint("num_instances", num_instances, 1, 32)
    run_path, run_text = _run_source(run_file)
    plugin_paths = [os.fspath(p) for p in plugins or []]
    with tempfile.TemporaryDirectory(prefix="blis-replay-") as tmp:
        sim_path = _opt_path(results_path)
        if results and sim_path is None:
            sim_path = os.path.join(tmp, "sim-results.json")
        text, notices = _native.replay(
            os.fspath(trace_header),
            os.fspath(trace_data),
            run_file=run_path,
            run_text=run_text,
            session_mode=session_mode,
            think_time_ms=think_time_ms,
            think_time_dist=think_time_dist,
            seed=seed,
            model=model,
            num_instances=num_instances,
            horizon=horizon,
            admission_policy=admission_policy,
            routing_policy=routing_policy,
            routing_scorers=_scorers(routing_scorers),
            plugins=plugin_paths,
            results_path=sim_path,
            metrics_path=_opt_path(metrics_path),
            trace_output=_opt_path(trace_output),
            overrides=overrides,
        )
        _emit(notices)
        report = Report(json.loads(text))
        if results:
            with open(sim_path, encoding="utf-8") as f:
                report.results = _table(json.load(f), as_frame)
    return report


def calibrate_fit(
    measurements: Optional[PathLike],
    out: PathLike,
    *,
    traces: Union[Mapping[PathLike, Tuple[PathLike, PathLike]], Sequence[str], None] = None,
    fit: Union[str, Sequence[str], None] = None,
    bounds: Union[Mapping[str, Tuple[float, float]], Sequence[str], None] = None,
    weights: Union[Mapping[str, float], Sequence[str], None] = None,
    holdout: int = 0,
    holdout_by: Union[str, Sequence[str], None] = None,
    seed: int = 1,
    sim_seeds: int = 1,
    jobs: Optional[int] = None,
    iterations: int = 0,
    prior_sd: Optional[float] = None,
    html: Optional[PathLike] = None,
    quiet: bool = True,
    as_frame: Optional[bool] = None,
) -> FitResult:
    """Fit the latency model's coefficients to measurements with the
    simulator in the loop, write the calibration profile ``out`` (apply it
    with ``[model] calibration = "PROFILE.toml"``), and return a
    :class:`FitResult`, as ``blis calibrate fit --measurements M --out P
    [flags]``.

    ``measurements``: a CSV table with header ``run_file,metric,value``
    (``run_file`` relative to the table; ``metric`` a report field such as
    ``ttft_mean_ms`` or ``stages[0].e2e_p90_ms``), or ``None`` with
    ``traces``.

    ``traces``: observed TraceV2 traces, each with the run file of the
    server that produced it, as ``--trace RUN_FILE=HEADER.yaml,DATA.csv``:
    ``{run_file: (header, data)}`` or ``"RUN_FILE=HEADER.yaml,DATA.csv"``
    strings. Errors per request (TTFT, E2E, ITL) against a replay of each.

    The keywords are the command's flags: ``fit`` (coefficients to fit,
    ``"alpha,beta[1]"`` or a list of names; default every nonzero
    coefficient), ``bounds`` ({name: (lo, hi)} or ``"NAME=LO:HI"``
    strings), ``weights`` ({metric: w} or ``"METRIC=W"`` strings),
    ``holdout`` (folds by run file; 0 = none), ``holdout_by``
    (``"experiment"``, ``"model"``, ``"gpu"`` or a list of them: each run
    file, model or GPU type left out in turn, the errors recorded in the
    profile's ``error.heldout_by``), ``seed`` (folds and
    bootstrap), ``sim_seeds`` (workload seeds each run file is simulated
    at, predictions averaged over them; default 1), ``jobs`` (simulations at once; default every core),
    ``iterations`` (Nelder–Mead iterations on the MAPE after the
    Levenberg–Marquardt stages; default 0), ``prior_sd`` (every
    coefficient fitted with a Gaussian prior of this standard deviation, in
    log units, around the one-factor-per-group point; default ``None``:
    every coefficient kept only if it pays for its freedom), ``html``
    (also write the page of measured against predicted). ``quiet=False``
    shows the progress on stderr, as the command does.

    Raises :class:`InputError` (bad table, run file, flag, or a fit that
    cannot improve: nothing written; the message names the table's line),
    :class:`RunError`, ``KeyboardInterrupt`` (Ctrl-C stops the simulations;
    nothing is written).
    """
    for name, value, low, bits in (
        ("holdout", holdout, 0, 32),
        ("seed", seed, 0, 64),
        ("sim_seeds", sim_seeds, 0, 32),
        ("iterations", iterations, 0, 64),
    ):
        _check_uint(name, value, low, bits)
    _check_jobs(jobs)
    if fit is not None and not isinstance(fit, str):
        fit = ",".join(fit)
    if holdout_by is None:
        holdout_by = []
    elif isinstance(holdout_by, str):
        holdout_by = [b for b in holdout_by.split(",") if b]
    else:
        holdout_by = [str(b) for b in holdout_by]

    def _bound(v) -> str:
        if isinstance(v, str):
            return v
        lo, hi = v
        return f"{lo}:{hi}"

    if traces is None:
        trace_args = []
    elif isinstance(traces, Mapping):
        trace_args = [
            f"{os.fspath(run)}={os.fspath(h)},{os.fspath(d)}" for run, (h, d) in traces.items()
        ]
    elif isinstance(traces, str):
        trace_args = [traces]
    else:
        trace_args = [str(t) for t in traces]
    summary, profile, rows = _native.calibrate_fit(
        None if measurements is None else os.fspath(measurements),
        os.fspath(out),
        traces=trace_args,
        fit=fit,
        bounds=_pairs(bounds, "=", "bounds", _bound),
        weights=_pairs(weights, "=", "weights", str),
        holdout=holdout,
        holdout_by=holdout_by,
        seed=seed,
        jobs=jobs,
        iterations=iterations,
        html=_opt_path(html),
        quiet=quiet,
        sim_seeds=sim_seeds,
        prior_sd=None if prior_sd is None else float(prior_sd),
    )
    names = ("line", "run_file", "metric", "measured", "start", "fitted", "heldout", "fold")
    table = [dict(zip(names, row)) for row in rows]
    return FitResult(json.loads(summary), profile, _table(table, as_frame))

"""blis from Python: run simulations of LLM inference serving clusters and
parameter sweeps in-process, and get the reports as Python objects.

    >>> import blis
    >>> report = blis.run(overrides={"workload.num_requests": 50})
    >>> report["cluster"]["ttft_p99_ms"]
    >>> r = blis.run("examples/prefix-affinity.toml", results=True)
    >>> r.results      # one row per request: a pandas DataFrame (a list of dicts without pandas)
    >>> blis.sweep("examples/sweeps/policies-vs-rate.toml", jobs=2)   # the tidy table

Each call goes through the code ``blis run`` and ``blis sweep`` use, so the
report is the one the command prints for the same run file and ``--set``
overrides. The simulation runs with the GIL released (Python threads run
runs in parallel); Ctrl-C stops it and raises ``KeyboardInterrupt``.
Errors: :class:`InputError` for bad input (nothing ran), :class:`RunError`
for a run that failed while running; both carry blis's message.
"""

from __future__ import annotations

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
    "version",
    "Report",
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
    run_path: Optional[str] = None
    run_text: Optional[str] = None
    if isinstance(run_file, Mapping):
        run_text = _native.table_to_toml(dict(run_file))
    elif run_file is not None:
        run_path = os.fspath(run_file)
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
    with tempfile.TemporaryDirectory(prefix="blis-sweep-") as tmp:
        if isinstance(sweep_file, Mapping):
            table = dict(sweep_file)
            if "base" in table:
                table["base"] = os.path.abspath(os.fspath(table["base"]))
            path = os.path.join(tmp, "sweep.toml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(_native.table_to_toml(table))
        else:
            path = os.fspath(sweep_file)
        out_dir = os.fspath(out) if out is not None else os.path.join(tmp, "out")
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

# Type stubs of the extension module blis._native (src/lib.rs). The public
# API is blis/__init__.py; these are its building blocks.
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str

class Error(Exception):
    """Base class of the errors blis raises."""

class InputError(Error):
    """Bad input (run file, overrides, sweep file, trace, measurements table, plugin library): nothing ran."""

class RunError(Error):
    """A run failed while running (a plugin failed, an output file could not be written)."""

def run(
    run_file: Optional[Union[str, os.PathLike[str]]] = None,
    run_text: Optional[str] = None,
    overrides: Optional[Union[Mapping[str, Any], Sequence[str]]] = None,
    plugins: Sequence[Union[str, os.PathLike[str]]] = ...,
    capture: Sequence[str] = ...,
    capture_dir: Optional[Union[str, os.PathLike[str]]] = None,
) -> Tuple[str, List[Tuple[str, str]], List[Tuple[str, str]]]:
    """One run: (report text, [(kind, notice)], [(output name, file)])."""

def plan(
    plan_file: Union[str, os.PathLike[str]],
    out: Union[str, os.PathLike[str]],
    jobs: Optional[int] = None,
) -> Tuple[Optional[str], Optional[str]]:
    """One plan into out: (the summary JSON, None), or (None, the message) when nothing meets the SLOs."""
    ...

def tune(
    tune_file: Union[str, os.PathLike[str]],
    out: Union[str, os.PathLike[str]],
    jobs: Optional[int] = None,
) -> str:
    """One tune into out: the summary JSON."""
    ...

def sweep(
    sweep_file: Union[str, os.PathLike[str]],
    out: Union[str, os.PathLike[str]],
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
) -> Dict[str, Union[int, float]]:
    """One sweep into out: its summary (planned, skipped, ran, failed, wall_s)."""

def replay(
    trace_header: Union[str, os.PathLike[str]],
    trace_data: Union[str, os.PathLike[str]],
    run_file: Optional[Union[str, os.PathLike[str]]] = None,
    run_text: Optional[str] = None,
    session_mode: str = "fixed",
    think_time_ms: Optional[float] = None,
    think_time_dist: Optional[str] = None,
    seed: Optional[int] = None,
    model: Optional[str] = None,
    num_instances: Optional[int] = None,
    horizon: Optional[int] = None,
    admission_policy: Optional[str] = None,
    routing_policy: Optional[str] = None,
    routing_scorers: Optional[str] = None,
    plugins: Sequence[Union[str, os.PathLike[str]]] = ...,
    results_path: Optional[Union[str, os.PathLike[str]]] = None,
    metrics_path: Optional[Union[str, os.PathLike[str]]] = None,
    trace_output: Optional[Union[str, os.PathLike[str]]] = None,
    overrides: Optional[Union[Mapping[str, Any], Sequence[str]]] = None,
) -> Tuple[str, List[Tuple[str, str]]]:
    """One replay, as blis replay: (report text, [(kind, notice)])."""

def calibrate_fit(
    measurements: Optional[Union[str, os.PathLike[str]]],
    out: Union[str, os.PathLike[str]],
    traces: Sequence[str] = ...,
    fit: Optional[str] = None,
    bounds: Sequence[str] = ...,
    weights: Sequence[str] = ...,
    holdout: int = 0,
    seed: int = 1,
    jobs: Optional[int] = None,
    iterations: int = 0,
    html: Optional[Union[str, os.PathLike[str]]] = None,
    quiet: bool = True,
    sim_seeds: int = 1,
    holdout_by: Sequence[str] = ...,
    prior_sd: Optional[float] = None,
) -> Tuple[
    str,
    Dict[str, Any],
    List[Tuple[int, str, str, float, float, float, Optional[float], Optional[int]]],
]:
    """blis calibrate fit: (summary text, the profile's tables, one tuple per
    table row: line, run_file, metric, measured, start, fitted, heldout, fold)."""

def table_to_toml(table: Mapping[str, Any], name: str = "run_file") -> str:
    """A dict as the text of a TOML file (``name``: the argument it was given
    as, in errors)."""

def version() -> str:
    """blis's version and plugin ABI."""

# Type stubs of the extension module blis._native (src/lib.rs). The public
# API is blis/__init__.py; these are its building blocks.
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str

class Error(Exception):
    """Base class of the errors blis raises."""

class InputError(Error):
    """Bad input (run file, overrides, sweep file, plugin library): nothing ran."""

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

def sweep(
    sweep_file: Union[str, os.PathLike[str]],
    out: Union[str, os.PathLike[str]],
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
) -> Dict[str, Union[int, float]]:
    """One sweep into out: its summary (planned, skipped, ran, failed, wall_s)."""

def table_to_toml(table: Mapping[str, Any]) -> str:
    """A dict as the text of a TOML file."""

def version() -> str:
    """blis's version and plugin ABI."""

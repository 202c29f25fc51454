"""Shared fixtures of the blis Python tests: the repository's folders and the
`blis` binary to compare against (BLIS_BIN, or target/{debug,release}/blis)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _find_bin():
    given = os.environ.get("BLIS_BIN")
    if given:
        return Path(given).resolve()
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "blis"
        if p.exists():
            return p
    return None


@pytest.fixture(scope="session")
def blis_bin():
    """The `blis` command. With BLIS_BIN set (as .ci/run does) it must exist;
    without it, tests that compare against the command are skipped when no
    build is found."""
    p = _find_bin()
    if p is None:
        pytest.skip("no blis binary (set BLIS_BIN or cargo build -p blis-host)")
    assert p.exists(), f"BLIS_BIN={p} does not exist"
    return p


@pytest.fixture(scope="session")
def cli_report(blis_bin):
    """`blis run ARGS…`'s stdout, parsed."""
    import json

    def run(*args, cwd=None):
        out = subprocess.run(
            [str(blis_bin), "run", "--quiet", *map(str, args)],
            check=True,
            capture_output=True,
            text=True,
            cwd=cwd,
        )
        return json.loads(out.stdout)

    return run


@pytest.fixture(scope="session")
def fixture_alpha(blis_bin):
    """The test plugin library fixture-alpha (tests/fixtures/plugin-alpha),
    built beside the binary by `cargo build --workspace`."""
    p = blis_bin.parent / "libfixture_alpha.so"
    assert p.exists(), f"{p} is missing: cargo build -p fixture-alpha"
    return p

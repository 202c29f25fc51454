"""blis.plan: the answer `blis plan` gives, the frontier and every
simulation as tables, an infeasible plan as NoFeasiblePlan with its
candidates, bad plan files as InputError."""

import json
import subprocess

import pytest

import blis

from conftest import EXAMPLES

try:
    import pandas
except ImportError:  # the suite runs again without pandas
    pandas = None

PLAN = EXAMPLES / "plan" / "plan.toml"


def small_plan(**changes):
    """The book's plan on three shapes, as a dict."""
    plan = {
        "base": str(EXAMPLES / "plan" / "chat.toml"),
        "seeds": [1, 2],
        "slo": ["ttft_p99_ms <= 1000", "itl_p99_ms <= 50"],
        "traffic": {"rate": 300.0},
        "space": {"gpu": ["H100", "A100-SXM", "L40S"], "tp": [1], "instances": [1, 32]},
    }
    plan.update(changes)
    return plan


def test_plan_gives_the_command_s_answer(blis_bin, tmp_path):
    got = blis.plan(PLAN, jobs=2, out=tmp_path / "py", as_frame=False)
    out = subprocess.run(
        [str(blis_bin), "plan", str(PLAN), "--out", str(tmp_path / "cli"), "--quiet"],
        check=True, capture_output=True, text=True,
    )
    cli = json.loads(out.stdout)
    assert got["answer"] == cli["answer"]
    assert got["answer"]["gpu"] == "H100" and got["answer"]["instances"] == 7
    assert (tmp_path / "py" / "best.toml").exists()
    assert len(got.candidates) == got["simulations"]["distinct"]
    assert {"gpu", "tp", "routing", "instances", "seed", "cost_per_hour", "ttft_p99_ms", "feasible"} <= set(got.candidates[0])
    assert got.frontier and got.frontier[0]["cost_per_hour"] == 28.0
    assert "itl_p99_ms" in got.frontier[0]


@pytest.mark.skipif(pandas is None, reason="pandas is not installed")
def test_plan_tables_are_dataframes():
    got = blis.plan(small_plan(), jobs=2)
    assert isinstance(got.candidates, pandas.DataFrame)
    assert isinstance(got.frontier, pandas.DataFrame)
    feasible = got.candidates[got.candidates.feasible]
    assert (feasible.ttft_p99_ms <= 1000).all() and (feasible.itl_p99_ms <= 50).all()


def test_an_infeasible_plan_raises_with_its_candidates():
    with pytest.raises(blis.NoFeasiblePlan, match="Closest") as e:
        blis.plan(small_plan(slo=["itl_p99_ms <= 1"]), jobs=2, as_frame=False)
    result = e.value.result
    assert result["answer"] is None
    assert result.candidates and not any(c["feasible"] for c in result.candidates)


def test_a_bad_plan_file_is_an_input_error():
    with pytest.raises(blis.InputError, match="unknown GPU type"):
        blis.plan(small_plan(space={"gpu": ["B300"], "instances": [1, 4]}))
    with pytest.raises(blis.InputError, match="upside down"):
        blis.plan(small_plan(space={"gpu": ["H100"], "instances": [8, 2]}))

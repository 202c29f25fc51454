"""blis.tune: the answer `blis tune` gives, every evaluation as a table, the
tuned run file and llm-d file as text, bad tune files as InputError."""

import json
import subprocess

import pytest

import blis

from conftest import EXAMPLES


def small_tune(**changes):
    """llm-d's default profile on the examples/llm-d workload, small."""
    tune = {
        "base": str(EXAMPLES / "llm-d" / "workload.toml"),
        "epp_config": str(EXAMPLES / "llm-d" / "default-profile.yaml"),
        "budget": 27,
        "seed": 7,
        "population": 4,
        "objective": {"metric": "e2e_mean_ms", "constraints": ["rejected_fraction <= 0.01"]},
        "train": {"seeds": [1, 2, 3]},
        "held_out": {"seeds": [101, 102]},
        "param": [
            {"key": "routing.scorers.0.weight", "name": "queue_weight", "min": 0.0, "max": 10.0},
            {"key": "routing.scorers.2.weight", "name": "prefix_weight", "min": 0.0, "max": 10.0},
        ],
        "set": {"workload.num_requests": 600},
    }
    tune.update(changes)
    return tune


def test_tune_gives_the_command_s_answer(blis_bin, tmp_path):
    got = blis.tune(small_tune(), jobs=2, out=tmp_path / "py", as_frame=False)
    path = tmp_path / "tune.toml"
    path.write_text(blis._native.table_to_toml(small_tune()))
    subprocess.run(
        [str(blis_bin), "tune", str(path), "--out", str(tmp_path / "cli"), "--quiet"],
        check=True, capture_output=True, text=True,
    )
    cli = json.loads((tmp_path / "cli" / "tune.json").read_text())
    assert got["tuned"] == cli["tuned"]
    assert got["verdict"] == cli["verdict"]
    assert got["held_out"]["summary"] == cli["held_out"]["summary"]
    rows = got.evaluations
    assert rows[0]["phase"] == "start" and rows[0]["queue_weight"] == 2.0
    assert {r["phase"] for r in rows} == {"start", "search", "sensitivity"}
    assert set(got["recommended"]) == {"queue_weight", "prefix_weight"}
    assert "[routing]" in got.run_file
    assert got.epp_config is not None and "kind: EndpointPickerConfig" in got.epp_config
    assert got.out == str(tmp_path / "py")


def test_a_temporary_tune_keeps_nothing_but_returns_the_files():
    got = blis.tune(small_tune(), jobs=2)
    assert got.out == ""
    assert "prefix-cache-scorer" in got.epp_config


def test_bad_tune_files_raise_input_error():
    with pytest.raises(blis.InputError, match="budget = 0"):
        blis.tune(small_tune(budget=0))
    with pytest.raises(blis.InputError, match="routing.scorers.9.weight"):
        blis.tune(small_tune(param=[{"key": "routing.scorers.9.weight", "min": 0.0, "max": 1.0}]))


def test_held_out_equal_to_train_warns():
    with pytest.warns(blis.BlisWarning, match="held-out traffic is the training traffic"):
        blis.tune(small_tune(held_out={"seeds": [1, 2, 3]}), jobs=2)

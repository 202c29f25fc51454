"""A careless caller cannot crash the interpreter or lose files (issue 56,
items 6-8): self-containing and 20,000-deep arguments, an empty `out`,
errors that name a deleted temporary file or no argument."""

import os
import subprocess

import pytest

import blis


def test_self_containing_and_very_deep_arguments_are_input_errors():
    loop = {"workload": {}}
    loop["workload"]["again"] = loop
    with pytest.raises(blis.InputError, match=r"run_file\[\"workload\"\]\[\"again\"\].*nested more than 64"):
        blis.run(loop)
    deep = []
    for _ in range(20_000):
        deep = [deep]
    with pytest.raises(blis.InputError, match="nested more than 64"):
        blis.run(overrides={"workload.clients": deep})
    sweep = {"set": {"x": deep}, "axis": [{"key": "seed", "values": [1]}]}
    with pytest.raises(blis.InputError, match=r"sweep_file\[\"set\"\]\[\"x\"\]"):
        blis.sweep(sweep)


def test_an_empty_out_never_writes_into_the_current_folder(tmp_path, monkeypatch, blis_bin):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.csv").write_text("mine\n")
    (tmp_path / "results.jsonl").write_text("mine\n")
    sweep = {"set": {"workload.num_requests": 10}, "axis": [{"key": "seed", "values": [1, 2]}]}
    for call in (
        lambda: blis.sweep(sweep, out=""),
        lambda: blis.plan({"base": "x.toml"}, out=""),
        lambda: blis.tune({"base": "x.toml"}, out=""),
    ):
        with pytest.raises(blis.InputError, match="empty path"):
            call()
    (tmp_path / "s.toml").write_text('[set]\n"workload.num_requests" = 10\n[[axis]]\nkey = "seed"\nvalues = [1, 2]\n')
    cli = subprocess.run([str(blis_bin), "sweep", "s.toml", "--out", ""], capture_output=True, text=True)
    assert cli.returncode == 2, cli.stderr
    assert (tmp_path / "results.csv").read_text() == "mine\n"
    assert (tmp_path / "results.jsonl").read_text() == "mine\n"
    assert not (tmp_path / "sweep.json").exists() and not (tmp_path / "runs").exists()


def test_errors_name_the_argument_not_a_temporary_file():
    bad = {"set": {"workload.num_requests": 10}, "axis": [{"key": "workload.aggregate_rate", "values": [10.0, 20.0, object()]}]}
    with pytest.raises(blis.InputError) as e:
        blis.sweep(bad)
    assert 'sweep_file["axis"][0]["values"][2]' in str(e.value)
    # An error blis finds in the written file names the dict, not the file.
    with pytest.raises(blis.InputError) as e:
        blis.sweep({"axes": []})
    text = str(e.value)
    assert "blis-sweep-" not in text and "sweep_file (a dict)" in text, text
    with pytest.raises(blis.InputError) as e:
        blis.plan({"base": "nope.toml"})
    assert "blis-plan-" not in str(e.value), str(e.value)


def test_negative_and_huge_integers_name_their_argument():
    with pytest.raises(blis.InputError, match="jobs = -1"):
        blis.sweep({"axis": [{"key": "seed", "values": [1]}]}, jobs=-1)
    with pytest.raises(blis.InputError, match="seed = -3"):
        blis.replay("h.yaml", "d.csv", seed=-3)
    with pytest.raises(blis.InputError, match="holdout = -1"):
        blis.calibrate_fit("m.csv", "out", holdout=-1)
    with pytest.raises(blis.InputError, match=r"overrides\[\"seed\"\]: 18446744073709551616 does not fit"):
        blis.run(overrides={"seed": 2**64})

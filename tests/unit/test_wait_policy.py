"""--omp-wait-policy: PASSIVE on a host busier than its cores, before torch loads (issue 47, item 8)."""

from __future__ import annotations

import json
import os

import pytest

from clitools import invoke
from effbench.system import wait_policy as wp


@pytest.mark.parametrize(
    ("option", "device", "env", "load", "value"),
    [
        ("auto", "cpu", {}, 6.5, "PASSIVE"),  # busier than its 2 cores, unset: PASSIVE
        ("auto", "cpu", {}, 1.5, None),  # under its cores: OpenMP's default stays
        ("auto", "cpu", {}, None, None),  # no load figure: nothing guessed
        ("auto", "cpu", {"OMP_WAIT_POLICY": "active"}, 6.5, None),  # the user's own value wins
        ("auto", "cuda", {}, 6.5, None),  # a GPU run's threads wait on the GPU
        ("passive", "cuda", {}, 0.1, "PASSIVE"),
        ("active", "cpu", {"OMP_WAIT_POLICY": "PASSIVE"}, 6.5, "ACTIVE"),  # the option overrides the variable
        ("passive", "cpu", {"OMP_WAIT_POLICY": "passive"}, 6.5, None),  # already so: nothing to say
    ],
)
def test_the_policy_decided(option, device, env, load, value):
    d = wp.decide(option, device=device, env=env, load_1m=load, cores=2)
    assert d.value == value and (d.note is None) == (value is None)


def test_the_note_names_the_load_and_the_way_back():
    d = wp.decide("auto", device="cpu", env={}, load_1m=6.5, cores=2)
    assert d.note == (
        "note: OMP_WAIT_POLICY=PASSIVE for this run: the load average is 6.50 on 2 cores, so spinning OpenMP "
        "threads would hold cores the run's other threads need (--omp-wait-policy active keeps them spinning)"
    )


def test_a_run_on_a_busy_host_sets_passive_says_so_and_records_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # the suite's conftest sets PASSIVE for itself
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    code, _, err = invoke(["run", "--smoke", "--max-steps", "3", "--warmup-steps", "1", "--no-profile", "--quiet",
                           "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    assert "note: OMP_WAIT_POLICY=PASSIVE for this run: the load average is 64.00" in err
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run / "env.json").read_text())["env_vars"]["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_bad_policy_is_one_line(capsys, tmp_path):
    code, _, err = invoke(["run", "--smoke", "--omp-wait-policy", "sleepy", "--output", tmp_path], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --omp-wait-policy")

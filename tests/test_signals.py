"""SIGTERM / SIGINT in every phase of a run: `interrupted`, the phase named, files whole, exit 128 + signal.

In-process tests deliver a real signal to this process at the moment the run enters a phase (the
hold hook's call, run/phases.py `Phase.enter`); subprocess tests use the hook itself
(EFFBENCH_FAULT_HOLD_PHASE) and signal the child from outside, as `docker stop` would.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clitools import invoke
from effbench.run import faults
from effbench.run.phases import PHASES

# Real runs: seconds on an idle machine, minutes on a loaded 2-core one; the default 300 s would fail
# the suite for the machine's speed, not for a behaviour.
pytestmark = pytest.mark.timeout(900)

TINY = ["--dataset", "synthetic", "--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu",
        "--workers", "0", "--max-steps", "3", "--max-val-steps", "1", "--warmup-steps", "1", "--epochs", "1",
        "--batch-size", "4", "--profile-steps", "1", "--quiet"]  # fmt: skip
BEFORE_FOLDER = ("setup", "dataset", "model")  # nothing measured yet: no run folder, the phase in the error line
AFTER_FOLDER = ("warm-up", "epochs", "validation", "profiling", "report")
REPO = Path(__file__).resolve().parents[1]


def test_every_phase_is_covered_here():
    assert set(BEFORE_FOLDER + AFTER_FOLDER) == set(PHASES)


def _signal_on_entering(monkeypatch, target: str, signum: int) -> None:
    """Deliver a real `signum` to this process when the run enters `target`, then let the hook run."""
    real = faults.hold_phase

    def spy(name, until, env=os.environ):
        if name == target:
            os.kill(os.getpid(), signum)  # handled at the next bytecode: inside this phase
        real(name, until, env)

    monkeypatch.setattr(faults, "hold_phase", spy)


def _check_whole(run: Path) -> dict:
    for f in run.iterdir():
        if f.suffix == ".json":
            json.loads(f.read_text())
        elif f.suffix == ".csv":
            list(csv.DictReader(f.read_text().splitlines()))
    assert not list(run.glob(".*.tmp")), "a temporary file was left"
    return json.loads((run / "results.json").read_text())


@pytest.mark.parametrize(
    "phase, signum",
    [(p, signal.SIGTERM) for p in AFTER_FOLDER] + [("epochs", signal.SIGINT), ("report", signal.SIGINT)],
)
def test_a_signal_after_the_folder_exists_marks_the_run_interrupted_in_that_phase(
    phase, signum, monkeypatch, capsys, tmp_path
):
    _signal_on_entering(monkeypatch, phase, signum)
    code, out, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 128 + signum
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = _check_whole(run)
    assert r["status"] == "interrupted" and r["signal"] == signum and r["interrupted_phase"] == phase
    assert (run / "report.txt").is_file() and (run / "report.html").is_file()
    assert f"by {signal.Signals(signum).name} during {phase}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("phase, signum", [(p, signal.SIGTERM) for p in BEFORE_FOLDER] + [("setup", signal.SIGINT)])
def test_a_signal_before_the_folder_exists_names_the_phase_and_leaves_no_folder(
    phase, signum, monkeypatch, capsys, tmp_path
):
    _signal_on_entering(monkeypatch, phase, signum)
    code, out, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 128 + signum
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: interrupted by {signal.Signals(signum).name} during {phase}"
    )
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]


def test_main_restores_the_callers_signal_handlers(capsys, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    invoke(["run", "--epochs", "0", "--output", tmp_path], capsys)  # a bad value: returns at once
    assert signal.getsignal(signal.SIGTERM) is before


def _spawn(out: Path, phase: str, *, ignore_sigterm: bool) -> subprocess.Popen:
    env = {**os.environ, faults.FAULT_HOLD_ENV: phase, "PYTHONPATH": str(REPO)}
    # A container's PID 1 has no default action for SIGTERM; an inherited SIG_IGN is the same for a
    # child process (signal(7): ignored dispositions survive execve), so it stands in for PID 1 here.
    pre = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if ignore_sigterm else None
    return subprocess.Popen(
        [sys.executable, "-m", "effbench", "run", *TINY, "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=pre,
    )  # fmt: skip


def _wait_for_hold(proc: subprocess.Popen, phase: str) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + 300  # a loaded machine may take minutes to import torch; no speed asserted
    for line in proc.stderr:
        if line.startswith(f"{faults.HOLD_MARK} {phase}"):
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"the run ended before phase {phase}: {proc.communicate()}")


@pytest.mark.parametrize("phase", ["setup", "profiling"])
def test_sigterm_to_a_pid1_like_effbench_ends_it_at_once_in_any_phase(phase, tmp_path):
    out = tmp_path / "out"
    proc = _spawn(out, phase, ignore_sigterm=True)
    try:
        _wait_for_hold(proc, phase)
        proc.send_signal(signal.SIGTERM)
        # Without a handler the hook holds for faults.HOLD_MAX_S (120 s): ending well before says it was handled.
        _, err = proc.communicate(timeout=faults.HOLD_MAX_S / 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert f"by SIGTERM during {phase}" in err
    runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
    if phase == "setup":
        assert not runs
    else:
        (run,) = runs
        r = _check_whole(run)
        assert r["status"] == "interrupted" and r["interrupted_phase"] == "profiling"
        assert (run / "report.txt").is_file()

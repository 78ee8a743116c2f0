"""SIGTERM / SIGINT in every phase of a run: `interrupted`, the phase named, files whole, exit 128 + signal.

In-process tests deliver a real signal to this process at the moment the run enters a phase (the
hold hook's call, run/phases.py `Phase.enter`); subprocess tests use the hook itself
(EFFBENCH_FAULT_HOLD_PHASE) and signal the child from outside, as `docker stop` would.
"""

from __future__ import annotations

import csv
import json
import os
import re
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
BEFORE_TRAINING = ("setup", "dataset", "model")  # the run folder exists, nothing measured: results.json only
AFTER_FOLDER = ("warm-up", "epochs", "validation", "profiling", "report")
REPO = Path(__file__).resolve().parents[2]


def test_every_phase_is_covered_here():
    assert set(BEFORE_TRAINING + AFTER_FOLDER) == set(PHASES)


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


def _check_interrupted_before_training(run: Path, signum: int, phase: str) -> None:
    from effbench import results

    r = results.read_results(run)  # the schema reader of report / compare accepts it
    assert r["status"] == "interrupted" and r["signal"] == signum and r["interrupted_phase"] == phase
    assert r["epochs"] == [] and r["finished_at"] and "phase" not in r
    assert r["run_name"] == run.name and r["config"]["arch"] == "resnet18"
    assert sorted(f.name for f in run.iterdir()) == ["results.json"]  # nothing measured: no report


@pytest.mark.parametrize("phase, signum", [(p, signal.SIGTERM) for p in BEFORE_TRAINING] + [("setup", signal.SIGINT)])
def test_a_signal_before_training_marks_the_run_interrupted_in_that_phase(phase, signum, monkeypatch, capsys, tmp_path):
    _signal_on_entering(monkeypatch, phase, signum)
    code, out, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 128 + signum
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    _check_interrupted_before_training(run, signum, phase)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: run interrupted by {signal.Signals(signum).name} during {phase}"
    )
    assert f"nothing was measured; results.json is in {run}" in lines[0] and "Traceback" not in out + err


def test_the_folder_records_the_phase_while_the_run_is_built(monkeypatch, capsys, tmp_path):
    seen = {}
    real = faults.hold_phase

    def spy(name, until, env=os.environ):
        if name in BEFORE_TRAINING:  # the hook runs as the phase starts: results.json already names it
            (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
            r = json.loads((run / "results.json").read_text())
            seen[name] = (r["status"], r.get("phase"))
        real(name, until, env)

    monkeypatch.setattr(faults, "hold_phase", spy)
    code, _, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 0, err
    assert seen == {p: ("running", p) for p in BEFORE_TRAINING}
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert "phase" not in json.loads((run / "results.json").read_text())  # only while it is built


def test_a_signal_during_the_first_checks_names_setup_and_leaves_no_folder(monkeypatch, capsys, tmp_path):
    from effbench.run import runtime

    real = runtime.resolve_runtime

    def spy(*a, **kw):  # the device and precision check, before the run folder is made
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **kw)

    monkeypatch.setattr(runtime, "resolve_runtime", spy)
    code, _, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 128 + signal.SIGTERM
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted by SIGTERM during setup")
    assert "no run folder was written" in lines[0]
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


@pytest.mark.parametrize("phase", [*BEFORE_TRAINING, "profiling"])
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
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    if phase in BEFORE_TRAINING:
        _check_interrupted_before_training(run, signal.SIGTERM, phase)
    else:
        r = _check_whole(run)
        assert r["status"] == "interrupted" and r["interrupted_phase"] == "profiling"
        assert (run / "report.txt").is_file()


def test_a_loader_worker_killed_by_the_signal_is_interrupted_in_the_phase_it_happened(monkeypatch, capsys, tmp_path):
    """The signal reaches a DataLoader worker too; its death can surface first as a RuntimeError
    (torch/utils/data/_utils/signal_handling.py: "DataLoader worker (pid(s) ...) exited unexpectedly"),
    after the handler has recorded the signal: the run is `interrupted` in that phase, not `report`."""
    from effbench.run import train
    from effbench.run.phases import Interrupted

    def epochs(*_a, on_phase, **_kw):
        on_phase("warm-up")
        on_phase("epochs")
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises Interrupted here
        except Interrupted:
            raise RuntimeError("DataLoader worker (pid(s) 123) exited unexpectedly") from None
        yield  # a generator, like the real one

    monkeypatch.setattr(train, "train_epochs", epochs)
    code, _, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 128 + signal.SIGTERM, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = _check_whole(run)
    assert (r["status"], r["signal"], r["interrupted_phase"]) == ("interrupted", 15, "epochs")


def test_a_signal_in_warm_up_reports_the_warm_up_steps_that_ran_and_no_measured_share(capsys, tmp_path):
    """SIGINT after the 2nd of 4 warm-up steps: the epoch never finishes, yet 2 warm-up steps of 4 images
    ran and the report says so; nothing was measured, so the data wait share is '-' as results.json's null,
    not the 0.0% (0 s of 0 s) it printed, nor 'warm-up steps 0 in 0.000 s'."""
    from effbench.run import train

    ended = []

    def signal_after_the_second_step():  # train.between_steps: called after each step, untimed
        ended.append(len(ended) + 1)
        if len(ended) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: still in warm-up

    args = list(TINY)
    args[args.index("--max-steps") + 1], args[args.index("--warmup-steps") + 1] = "6", "4"
    with train.between_steps(signal_after_the_second_step):
        code, _, err = invoke(["run", *args, "--output", tmp_path], capsys)
    assert code == 128 + signal.SIGINT, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = _check_whole(run)
    assert (r["status"], r["interrupted_phase"]) == ("interrupted", "warm-up") and ended == [1, 2]
    assert r["warmup"]["steps"] == 2 and r["warmup"]["images"] == 2 * 4 and r["warmup"]["time_s"] > 0
    assert r["measured"]["steps"] == 0 and r["data_time_share"] is None and r["epochs"] == []
    report = (run / "report.txt").read_text()
    assert re.search(r"\ndata wait share +-\n", report), report
    assert re.search(rf"\nwarm-up steps \(excluded\) +2 in {r['warmup']['time_s']:.3f} s\n", report), report


def test_a_run_killed_by_sigkill_reads_dead_in_report_export_and_compare(tmp_path, capsys):
    """SIGKILL leaves no handler a chance: results.json keeps `running`. Every reader shows the run `dead`
    with the time of its last write (effbench/liveness.py), and leaves the file as the run left it."""
    out = tmp_path / "out"
    proc = _spawn(out, "epochs", ignore_sigterm=False)
    try:
        _wait_for_hold(proc, "epochs")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    left = (run / "results.json").read_bytes()
    r = json.loads(left)
    assert r["status"] == "running" and r["process"]["pid"] == proc.pid and r["updated_at"]
    from effbench.liveness import when

    dead = f"dead (last written {when(r['updated_at'])})"
    code, _, err = invoke(["report", run], capsys)
    assert code == 0, err
    status = next(line for line in (run / "report.txt").read_text().splitlines() if line.startswith("status"))
    assert status.split(None, 1)[1].strip() == dead
    code, printed, err = invoke(["export", run, "--format", "jsonl"], capsys)
    assert code == 0 and json.loads(printed)["status"] == "dead", err
    code, printed, err = invoke(["compare", run, run], capsys)
    assert code == 0 and f"A: {run} (status {dead})" in printed, err
    assert (run / "results.json").read_bytes() == left


def test_sighup_mid_run_is_handled_as_sigterm(tmp_path):
    """The terminal closed: SIGHUP's default action killed the run, leaving `running` with no phase and no line.
    It ends as SIGTERM does: `interrupted` in its phase, one line, exit 128 + 1."""
    out = tmp_path / "out"
    proc = _spawn(out, "epochs", ignore_sigterm=False)
    try:
        _wait_for_hold(proc, "epochs")
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=faults.HOLD_MAX_S / 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run interrupted by SIGHUP during epochs"), err
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    r = _check_whole(run)
    assert (r["status"], r["signal"], r["interrupted_phase"]) == ("interrupted", signal.SIGHUP, "epochs")


# Run as `effbench` runs, with SIGTERM sent to itself the moment `target` is first looked for while the modules
# `inside` are being imported: a signal at a known point of the start-up imports, whatever the machine's speed.
SIGNAL_IN_IMPORT = """
import os, signal, sys

class SignalInImport:
    def find_spec(self, name, path=None, target=None):
        if name == {target!r} and all(m in sys.modules for m in {inside!r}):
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGTERM)
        return None

sys.meta_path.insert(0, SignalInImport())
sys.argv = ["effbench", *{args!r}]
from effbench.__main__ import main
main()
"""


@pytest.mark.parametrize("target, inside", [("typer", ()), ("numpy", ("torch",))], ids=["cli-imports", "torch-import"])
def test_a_signal_during_the_start_up_imports_is_one_line_and_exit_143(target, inside, tmp_path):
    """SIGTERM while the CLI's own modules are imported (typer, by cli/app.py: before, exit -15 and no word) or
    while the run imports torch (numpy, under torch._C: before, the signal was dropped and the run went on to
    `ok`, or numpy printed it as a 40-line ImportError and exit 1)."""
    args = ["run", *TINY, "--output", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_IN_IMPORT.format(target=target, inside=inside, args=args)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600,
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"error: (run )?interrupted by SIGTERM", lines[0]), done.stderr


@pytest.mark.parametrize("data_only", [False, True], ids=["train", "data-only"])
def test_ctrl_c_mid_epoch_keeps_every_completed_measured_step(data_only, capsys, tmp_path):
    """SIGINT after step 10 of a 14-step epoch (2 warm-up): the 8 measured steps that ended are in steps.csv,
    in results.json's measured tally and the headline, and the report; the status stays `interrupted`.
    Before, the epoch's steps were dropped with it: measured 0 / 0 and a steps.csv of its header alone."""
    from effbench.run import train

    ended = []

    def signal_after_step_10():  # train.between_steps: after each training step, untimed
        ended.append(len(ended) + 1)
        if len(ended) == 10:
            os.kill(os.getpid(), signal.SIGINT)

    args = list(TINY)
    args[args.index("--max-steps") + 1], args[args.index("--warmup-steps") + 1] = "14", "2"
    args += ["--log-interval", "4"] + (["--data-only"] if data_only else [])
    with train.between_steps(signal_after_step_10):
        code, _, err = invoke(["run", *args, "--output", tmp_path], capsys)
    assert code == 128 + signal.SIGINT, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = _check_whole(run)
    measured = 8
    assert r["status"] == "interrupted" and r["interrupted_phase"] == "epochs"
    assert r["measured"]["steps"] == measured and r["measured"]["images"] == 4 * measured
    assert r["throughput_img_s"] == pytest.approx(r["measured"]["images"] / r["measured"]["time_s"])
    with open(run / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sum(row["warmup"] == "False" for row in rows) == measured and len(rows) == measured + 2
    if not data_only:
        assert all(row["loss"] not in ("", None) for row in rows)  # the CPU's losses are read back
    report = (run / "report.txt").read_text()
    assert re.search(rf"\nmeasured steps / images +{measured} / {4 * measured}\n", report), report
    flat = " ".join(report.split())  # report.txt wraps a long value beside its label at 100 columns
    assert f" interrupted the figures rest on the {measured} measured step(s) that ended before the signal " in flat, (
        report
    )

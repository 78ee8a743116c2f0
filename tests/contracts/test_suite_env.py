"""The suite's own environment: what keeps it fast on a shared, loaded machine."""

from __future__ import annotations

import os


def test_torch_threads_wait_passively_in_the_suite_and_the_runs_it_starts():
    # conftest.py sets it (unless the user exported a value) before torch loads libgomp: spinning threads
    # made 5 resnet18 steps at 16 px take 19-28 s instead of 3-4 s at load average 7 on 2 cores.
    assert os.environ.get("OMP_WAIT_POLICY", "").upper() in {"PASSIVE", "ACTIVE"}


def test_the_suites_runs_cache_their_roofs_outside_the_users_cache():
    # conftest.py points the roofs' cache (effbench/measure/roofs.py) at a folder of the session's
    from effbench.measure.roofs import cache_path

    assert os.environ.get("EFFBENCH_CACHE_DIR") and str(cache_path()).startswith(os.environ["EFFBENCH_CACHE_DIR"])


def test_the_suite_fits_no_table_to_a_width_it_was_not_given():
    # pytest-xdist's workers set COLUMNS=80; tables fitted to it drop columns that tests look for
    assert "COLUMNS" not in os.environ


CTRL_C_VICTIM = """
import os
from pathlib import Path

import pytest

from effbench.cli import app as cli


def test_a_run_in_this_process(tmp_path):
    with pytest.raises(SystemExit):  # as tests/clitools.invoke does
        cli.main(["run", "--smoke", "--no-profile", "--quiet", "--output", str(tmp_path)])


def test_the_next_one():
    Path(os.environ["NEXT_RAN"]).touch()
"""


def test_one_ctrl_c_stops_the_suite_while_a_run_in_process_holds_it(tmp_path):
    """The first Ctrl-C went to the in-process run, which caught it (exit 130), and pytest went on to the next
    test; tests/ctrl_c.py raises it again to pytest."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from effbench.run.faults import FAULT_HOLD_ENV, HOLD_MARK

    (tmp_path / "test_victim.py").write_text(CTRL_C_VICTIM)
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, FAULT_HOLD_ENV: "epochs", "NEXT_RAN": str(tmp_path / "next-ran"),
           "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "ctrl_c", "-p", "no:cacheprovider", "-p", "no:xdist", "-s", "-q",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_victim.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert child.stderr is not None
        for line in child.stderr:  # the run holds in its epochs phase until a signal comes
            if HOLD_MARK in line:
                break
        else:
            raise AssertionError(f"the run never reached its epochs phase: {child.communicate()}")
        child.send_signal(signal.SIGINT)  # once, as a Ctrl-C at the terminal
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        out, _ = child.communicate(timeout=1) if child.poll() is not None else ("", "")
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 2, out[-2000:]  # pytest: interrupted
    assert "KeyboardInterrupt" in out and not (tmp_path / "next-ran").exists(), out[-2000:]

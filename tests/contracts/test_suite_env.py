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

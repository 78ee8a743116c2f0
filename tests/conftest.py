"""Shared fixtures: small datasets in the real formats (tests/fakedata.py) and a loopback HTTP server.

cifar100_dir, cifar10_dir, food101_dir, imagefolder_dir   a fresh --data-dir per test (Path), outside
                                                          tmp_path so tests may use tmp_path as --output
imagefolder_split_dir                                     train/ + val/ shape
smoke_dir                                                 a real `run --smoke` folder, made once per session:
                                                          copy it before changing anything in it
http_server                                               Served(root, url): files put in root
                                                          are served at url/<name>
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# `import fakedata` / `from clitools import invoke` from any test file, and `from test_x import helper`
# across tests/unit, tests/e2e and tests/contracts: pytest's default import mode names a test module by
# its file name (unique across the folders), so a helper imports the same module pytest collected.
_TESTS = Path(__file__).parent
sys.path[:0] = [str(_TESTS), *(str(_TESTS / kind) for kind in ("unit", "e2e", "contracts"))]

import fakedata  # noqa: E402

pytest_plugins = ["ctrl_c"]  # one Ctrl-C stops the suite, even inside an in-process run (tests/ctrl_c.py)

# The tables effbench prints fit $COLUMNS when it is wider than 100 (fmt.report_width). pytest-xdist sets COLUMNS=80 in its
# workers, and a terminal's value may be anything: each test that fits a table to a width sets its own.
os.environ.pop("COLUMNS", None)

# This machine may itself be a container whose folders all die with it: without a mount table the
# output-mount warning (system/mounts.py) stays silent, in this process and in the runs it starts.
# Tests of that warning inject their own tables.
os.environ["EFFBENCH_MOUNTINFO"] = os.devnull

# torch's CPU ops run on libgomp (torch/lib/libgomp.so.1; `torch.__config__.parallel_info()` says "ATen
# parallel backend: OpenMP"), whose idle threads spin by default. On a shared 2-core machine the spinning
# thread takes the core its partner needs: 5 steps of resnet18 at 16 px took 19-28 s wall and 9-14 s CPU
# with 2 threads, 3.2-3.7 s and 1.3-1.5 s with OMP_WAIT_POLICY=PASSIVE (load average 7).
# PASSIVE only changes how a thread waits (OpenMP spec, OMP_WAIT_POLICY), not the thread count the runs
# plan and record. libgomp reads it when it loads: set before any test imports torch, inherited by the
# runs tests start. A value the user exported wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The roofs every profiled run measures are cached per machine (effbench/measure/roofs.py): one cache for the
# session, so its runs measure once and the user's own cache (~/.cache/effbench) is never written by a test.
os.environ.setdefault("EFFBENCH_CACHE_DIR", tempfile.mkdtemp(prefix="effbench-test-cache-"))


@pytest.fixture
def cifar100_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakedata.make_cifar(tmp_path_factory.mktemp("cifar100"), "cifar100", n_train=64, n_test=32)


@pytest.fixture
def cifar10_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakedata.make_cifar(tmp_path_factory.mktemp("cifar10"), "cifar10", n_train=60, n_test=20)


@pytest.fixture
def food101_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakedata.make_food101(tmp_path_factory.mktemp("food101"), classes=3, per_class=8, size=48)


@pytest.fixture
def imagefolder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakedata.make_imagefolder(tmp_path_factory.mktemp("imagefolder"), classes=3, per_class=6)


@pytest.fixture
def imagefolder_split_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("imagefolder-split")
    return fakedata.make_imagefolder(root, classes=3, per_class=6, split=True, val_per_class=2)


@pytest.fixture(scope="session")
def smoke_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smallest real run's folder (today's schema, every report drawn): shared, so read it or copy it."""
    from effbench.cli import app as cli

    out = tmp_path_factory.mktemp("smoke")
    # seconds on an idle 2-core machine (minutes when 7 engineers share it)
    args = ["run", "--smoke", "--arch", "resnet18", "--image-size", "16", "--batch-size", "4", "--max-steps", "4",
            "--warmup-steps", "1", "--max-val-steps", "1", "--no-profile", "--quiet", "--output", out]  # fmt: skip
    printed = io.StringIO()  # what --quiet printed, kept beside the folder (tests/unit/test_report_width.py)
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in args])
    assert info.value.code == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    (out / SMOKE_STDOUT).write_text(printed.getvalue())
    return run


# smoke_dir's run's stdout, in the folder above the run's
SMOKE_STDOUT = "stdout.txt"


@dataclass(frozen=True)
class Served:
    root: Path
    url: str
    """http://127.0.0.1:<port>, no trailing slash."""


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Served]:
    """http.server over a fresh folder on 127.0.0.1 (any free port), in a thread; shut down after."""
    root = tmp_path / "served"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Served(root, f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

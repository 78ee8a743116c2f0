"""A run or sweep cell whose process died without a word (SIGKILL, the OOM killer) keeps `running` in its file;
every reader shows it `dead` with the time of its last write, and `running (on HOST, last written T)` when it
ran on another host (effbench/liveness.py). The reader never rewrites the file.

The judgement is checked on a fake probe of this host's processes (pure), then on real processes: this one, a
child killed and not yet reaped (a zombie), a child reaped, and this process's pid with another start time (the
pid reused). The commands (`report`, `export`, `compare`, the leaderboard, a sweep's tables) are checked on run
folders written as `effbench run` writes them; tests/e2e/test_signals.py kills a real run with SIGKILL.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from clitools import invoke
from test_across_runs import BASE, make_run

from effbench import liveness, results, schema
from effbench.liveness import Here, Seen

WRITTEN = "2026-11-23T10:00:30+00:00"
SHOWN_WRITTEN = "2026-11-23 10:00:30 UTC"
NS = "pid:[4026531836]"


def _process(**over) -> schema.Process:
    return schema.Process(**{"host": "node-a", "pid": 4242, "start_time": 1_000.0, "pid_namespace": NS, **over})


def _here(procs: dict[int, Seen], host: str = "node-a", ns: str | None = NS) -> Here:
    return Here(host, ns, lambda pid: procs.get(pid, Seen(False, None)))


@pytest.mark.parametrize(
    "process, procs, expected",
    [
        (_process(), {4242: Seen(True, 1_000.0)}, ("running", None)),
        (_process(), {4242: Seen(True, 1_000.5)}, ("running", None)),  # the same start, read twice
        (_process(), {}, ("dead", f"last written {SHOWN_WRITTEN}")),
        # the pid reused: a process holds it, started an hour later than the one that wrote the file
        (_process(), {4242: Seen(True, 4_600.0)}, ("dead", f"last written {SHOWN_WRITTEN}")),
        # alive but its start unreadable (another user's, /proc hidepid): no evidence it died
        (_process(), {4242: Seen(True, None)}, ("running", None)),
        (_process(host="node-z"), {}, ("running", f"on node-z, last written {SHOWN_WRITTEN}")),
        # docker --network host: the same host name, another PID namespace whose pids this one cannot see
        (_process(pid_namespace="pid:[4026532999]"), {},
         ("running", f"on node-a in another PID namespace, last written {SHOWN_WRITTEN}")),
        (None, {}, ("running", None)),  # a record from before `process`: nothing to check
        (_process(start_time=None), {4242: Seen(True, 7.0)}, ("running", None)),
    ],
)  # fmt: skip
def test_a_running_file_reads_dead_only_when_its_process_is_gone_from_this_host(process, procs, expected):
    seen = liveness.judge(process, WRITTEN, _here(procs))
    assert (seen.status, seen.note) == expected


def test_the_time_of_the_last_write_is_shown_in_utc_and_a_bad_one_as_written():
    assert liveness.when("2026-11-23T12:00:30+02:00") == "2026-11-23 10:00:30 UTC"
    assert liveness.when("yesterday") == "yesterday" and liveness.when(None) == "unknown"


def test_observe_changes_only_a_running_record_and_only_a_copy():
    gone = _here({})
    record = results.record_of({"schema_version": 1, "status": "running", "updated_at": WRITTEN,
                                "process": _process().model_dump()})  # fmt: skip
    shown = liveness.observe(record, gone)
    assert (shown.status, shown.shown_status) == ("dead", f"dead (last written {SHOWN_WRITTEN})")
    assert (record.status, record.shown_status) == ("running", "running")  # the reader's copy only
    for status in ("ok", "failed", "interrupted", "oom", "diverged"):
        other = results.record_of({"schema_version": 1, "status": status, "process": _process().model_dump()})
        assert liveness.observe(other, gone) is other


# --------------------------------------------------------------------------------------------------
# Real processes
# --------------------------------------------------------------------------------------------------
def _child() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _identity(pid: int) -> schema.Process:
    """What a process would record of itself (liveness.this_process), taken from outside."""
    here = liveness.this_host()
    return schema.Process(host=here.host, pid=pid, start_time=psutil.Process(pid).create_time(),
                          pid_namespace=here.pid_namespace)  # fmt: skip


def test_this_process_reads_running_on_its_own_host():
    me = liveness.this_process()
    assert me.pid == os.getpid() and me.host == socket.gethostname() and me.start_time is not None
    assert liveness.judge(me, WRITTEN, liveness.this_host()).status == "running"


def test_a_child_killed_reads_dead_as_a_zombie_and_once_reaped():
    child = _child()
    try:
        who = _identity(child.pid)
        assert liveness.judge(who, WRITTEN, liveness.this_host()).status == "running"
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # killed, not reaped: still in the table
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert liveness.judge(who, WRITTEN, liveness.this_host()).status == "dead"
        child.wait(timeout=60)
        assert liveness.judge(who, WRITTEN, liveness.this_host()).status == "dead"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_live_pid_that_started_at_another_time_reads_dead():
    """The pid reused: this process is alive under the pid the record names, but it is not the writer."""
    writer = liveness.this_process().model_copy(update={"start_time": liveness.this_process().start_time - 3600})
    seen = liveness.judge(writer, WRITTEN, liveness.this_host())
    assert (seen.status, seen.note) == ("dead", f"last written {SHOWN_WRITTEN}")


def _gone() -> dict:
    """The identity of a process that ran here and is gone (killed and reaped)."""
    child = _child()
    who = _identity(child.pid)
    child.kill()
    child.wait(timeout=60)
    return who.model_dump()


# --------------------------------------------------------------------------------------------------
# The commands
# --------------------------------------------------------------------------------------------------
def _as_running(run: Path, process: dict) -> bytes:
    """Turn a finished run folder into one its process left `running` (SIGKILL); the file's bytes."""
    path = run / results.RESULTS_FILE
    record = json.loads(path.read_text())
    record.update(status="running", process=process, updated_at=WRITTEN)
    record.pop("finished_at")
    results.write_json(path, record)
    return path.read_bytes()


def _export(paths: list[Path], capsys) -> list[dict]:
    code, out, err = invoke(["export", *paths, "--format", "csv"], capsys)
    assert code == 0, err
    return list(csv.DictReader(io.StringIO(out)))


def test_report_export_compare_and_the_leaderboard_show_a_dead_run_dead_and_rank_it_nowhere(tmp_path, capsys):
    root = tmp_path / "nodes"
    ok = make_run(root / "node-a-run", BASE, host="node-a")
    # twice node-a's throughput: ranked first if it counted
    dead = make_run(root / "node-b-run", [2 * x for x in BASE], host="node-b")
    before = _as_running(dead, _gone())

    rows = {Path(r["path"]).name: r for r in _export([root], capsys)}
    assert rows["node-b-run"]["status"] == "dead" and rows["node-a-run"]["status"] == "ok"

    code, out, err = invoke(["report", root], capsys)
    assert code == 0, err
    board = (root / "leaderboard.txt").read_text()
    verdict = next(line for line in board.splitlines() if line.startswith("- "))
    assert "only node-a (1x NVIDIA H100 80GB HBM3) measured (100.0 img/s)" in verdict, board
    node_b = next(line for line in board.splitlines() if line.startswith("node-b"))
    assert " dead " in f" {node_b} " and "200.0" not in node_b

    code, _, err = invoke(["report", dead], capsys)
    assert code == 0, err
    assert f"dead (last written {SHOWN_WRITTEN})" in (dead / "report.txt").read_text()
    assert f"status dead (last written {SHOWN_WRITTEN})" in (dead / "report.html").read_text()

    code, out, err = invoke(["compare", ok, dead], capsys)
    assert code == 0, err
    assert f"B: {dead} (status dead (last written {SHOWN_WRITTEN}))" in out and f"A: {ok}\n" in out
    code, out, _ = invoke(["compare", ok, dead, "--fail-if-slower", "5"], capsys)
    assert code == 1 and "status dead" in out  # a dead B never passes a gate

    assert (dead / results.RESULTS_FILE).read_bytes() == before  # readers derive the status, never write it


def test_a_run_on_another_host_reads_running_with_that_host_and_its_last_write(tmp_path, capsys):
    run = make_run(tmp_path / "elsewhere", BASE, host="node-z")
    _as_running(run, {**_gone(), "host": "node-z"})  # a pid that is gone here says nothing about node-z's
    (row,) = _export([run], capsys)
    assert row["status"] == "running"
    code, _, err = invoke(["report", run], capsys)
    assert code == 0, err
    assert f"running (on node-z, last written {SHOWN_WRITTEN})" in (run / "report.txt").read_text()


def test_a_running_run_whose_process_lives_reads_running(tmp_path, capsys):
    run = make_run(tmp_path / "live", BASE)
    _as_running(run, liveness.this_process().model_dump())  # this test's process stands for the writer
    (row,) = _export([run], capsys)
    assert row["status"] == "running"
    invoke(["report", run], capsys)
    line = next(x for x in (run / "report.txt").read_text().splitlines() if x.startswith("status"))
    assert line.split() == ["status", "running"]


def test_a_sweep_cell_left_running_by_a_dead_sweep_reads_dead_in_its_tables(tmp_path):
    from test_sweep_report import make_sweep

    from effbench.report import render
    from effbench.sweep import manifest

    folder = make_sweep(tmp_path, {"batch_size": [8, 16]},
                        [({"batch_size": 8}, {"devices": 1, "batch": 8, "throughput": 100.0}),
                         ({"batch_size": 16}, {"devices": 1, "batch": 16, "throughput": 90.0})])  # fmt: skip
    m = manifest.read_manifest(folder)
    m = manifest.update_cell(m, "001", status="running", run_dir=None)
    manifest.write_manifest(folder, {**m, "process": _gone()})
    written = liveness.when(manifest.load_manifest(folder).updated_at)
    before = (folder / manifest.MANIFEST_FILE).read_bytes()

    render.write_sweep_reports(folder)
    summary = json.loads((folder / "summary.json").read_text())
    assert [c["status"] for c in summary["cells"]] == ["ok", "dead"]
    assert f"cell 001: dead (last written {written})" in (folder / "sweep.txt").read_text()
    assert "dead 1" in (folder / "report.html").read_text()  # the sweep page's status counts
    assert (folder / manifest.MANIFEST_FILE).read_bytes() == before

    # the same manifest while its sweep runs (this process stands for it): the cell is `running`
    manifest.write_manifest(folder, {**m, "process": liveness.this_process().model_dump()})
    _, rows = render.load_sweep(folder)
    assert [r.status for r in rows] == ["ok", "running"]

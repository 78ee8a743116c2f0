"""Whether a `running` run or sweep cell still runs: a status derived when a file is read, never written back.

results.json and sweep.json name the process that writes them while they run (schema.Process: host, pid, start
time, PID namespace). SIGKILL, the kernel's OOM killer or a power cut leave `running` in the file for good; a
reader tells it thus:

    same host and PID namespace, the process there             running
    same host, no such process, a zombie, or another process   dead (last written T)
      under that pid (it started at another time: reused)
    another host (or PID namespace): nothing to look at         running (on HOST, last written T)
    a record from before `process` was written                  running

`report`, `export`, `compare` and the leaderboard read records through `read` / `observe` (sweeps:
`observe_manifest`), so a dead run is `dead` in every table and export row, and ranks nowhere. No torch import.

    this_process()                      what a writer records (run/folder.py, sweep/runner.py)
    judge(process, written_at, here)    pure: the status a `running` file reads as, and why
    this_host()                         this machine's probe; a test passes its own Here (other hosts, pids)
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from effbench import schema

RUNNING, DEAD = "running", "dead"
# psutil's create_time is the process's start in clock ticks since boot plus the boot time (/proc/stat btime,
# whole seconds, moved when the clock is stepped): the same process read twice agrees to within this. A pid
# reused by another process started later than the run's last write, far beyond it.
SAME_START_S = 2.0


class Seen(NamedTuple):
    """A pid as this host's probe sees it."""

    alive: bool
    """A process holds it (not a zombie)."""
    start_time: float | None
    """When that process started, seconds since the epoch; None when it cannot be read (another user's)."""


@dataclass(frozen=True)
class Here:
    """This machine as the check sees it: its host name, PID namespace and a probe of its processes."""

    host: str
    pid_namespace: str | None
    probe: Callable[[int], Seen]


@dataclass(frozen=True)
class Liveness:
    status: str
    """running or dead."""
    note: str | None
    """Why, beside it: "last written T", "on HOST, last written T"; None for a run seen alive here."""


def judge(process: schema.Process | None, written_at: str | None, here: Here) -> Liveness:
    """The status a `running` file reads as, from the process it names and the time it was last written."""
    if process is None or not process.host or process.pid is None:
        return Liveness(RUNNING, None)  # an older writer: nothing to check against
    last = f"last written {when(written_at)}"
    if process.host != here.host:
        return Liveness(RUNNING, f"on {process.host}, {last}")
    if process.pid_namespace and here.pid_namespace and process.pid_namespace != here.pid_namespace:
        # another container on this host (docker --network host shares the name): its pids are not ours
        return Liveness(RUNNING, f"on {process.host} in another PID namespace, {last}")
    seen = here.probe(process.pid)
    reused = (
        seen.start_time is not None
        and process.start_time is not None
        and abs(seen.start_time - process.start_time) > SAME_START_S
    )
    if not seen.alive or reused:
        return Liveness(DEAD, last)
    return Liveness(RUNNING, None)


def when(iso: str | None) -> str:
    """An ISO 8601 time from a record as `2025-01-02 03:04:05 UTC`; as written when it is no such time."""
    if not iso:
        return "unknown"
    try:
        t = dt.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    if t.tzinfo is None:  # no zone written: shown as it is
        return f"{t:%Y-%m-%d %H:%M:%S}"
    return f"{t.astimezone(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def observe(record: schema.Results, here: Here | None = None) -> schema.Results:
    """`record` as readers show it: a `running` one whose process is gone reads `dead` (a copy; the file and
    `record` are untouched). Any other status is as written."""
    if record.status != RUNNING:
        return record
    seen = judge(record.process, record.updated_at or record.started_at, here or this_host())
    shown = record.model_copy()
    shown.status = seen.status
    shown._status_note = seen.note
    return shown


def read(path: Path, here: Here | None = None) -> schema.Results:
    """results.load_record, as readers show it (observe)."""
    from effbench import results

    return observe(results.load_record(path), here)


def observe_manifest(manifest: schema.Manifest, here: Here | None = None) -> schema.Manifest:
    """A sweep's manifest as readers show it: a `running` cell whose sweep process is gone reads `dead` (a copy)."""
    if not any(c.status == RUNNING for c in manifest.cells):
        return manifest
    seen = judge(manifest.process, manifest.updated_at, here or this_host())
    shown = manifest.model_copy(deep=True)
    for cell in shown.cells:
        if cell.status == RUNNING:
            cell.status = seen.status
            cell._status_note = seen.note
    return shown


# --------------------------------------------------------------------------------------------------
# This machine
# --------------------------------------------------------------------------------------------------
def this_host() -> Here:
    return Here(socket.gethostname(), _pid_namespace(), probe)


def this_process() -> schema.Process:
    """This process as a file records who writes it: host, pid, start time, PID namespace."""
    from effbench import schema

    pid = os.getpid()
    return schema.Process(
        host=socket.gethostname(), pid=pid, start_time=probe(pid).start_time, pid_namespace=_pid_namespace()
    )


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]" (namespaces(7))
    except OSError:
        return None


def probe(pid: int) -> Seen:
    """Whether a live process holds `pid` here, and when it started (psutil; without it, kill(pid, 0) only)."""
    if pid <= 0:  # a hand-edited record: kill(0) and kill(-1) would name process groups, never this pid
        return Seen(False, None)
    try:
        import psutil
    except ImportError:
        return Seen(_exists(pid), None)
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent: it runs no more
            return Seen(False, None)
        return Seen(True, p.create_time())
    except psutil.Error:  # gone; or another user's under /proc's hidepid: there, its start unknown
        return Seen(_exists(pid), None)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    except OSError:
        return False
    return True

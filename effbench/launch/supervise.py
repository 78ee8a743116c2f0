"""Run torchrun as a child process group and stay in charge of it.

- SIGINT/SIGTERM/SIGHUP to effbench are forwarded to the whole torchrun process group; if it has not
  exited after a grace period it is killed, so no process is left behind. Exit code 128 + signal.
- torchrun's stderr is read line by line: all of it goes to `log` (the caller keeps it in the run folder as
  torchrun.log), and the terminal gets the ranks' own lines (progress, warnings) but not torchrun's logger
  lines, c10d's C++ log lines and stack frames, nor anything from the first traceback on (torchrun's
  ~30-line ChildFailedError, a rank's crash): the caller names the rank that failed and its exit code in one
  line, read from torchrun's failure summary, or else the child's last meaningful line (last_meaningful_line).
- Every child dies with effbench, a SIGKILLed one included: the child and each `effbench worker` ask Linux for
  SIGTERM when their parent dies, and a worker whose SIGTERM handler cannot run (blocked in C++, such as a c10d
  store connect) is killed by its own watchdog thread ORPHAN_GRACE_S later (exit_with_parent).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO
import contextlib

GRACE_S = 20.0  # after a forwarded signal: time for ranks to write what they measured
# After its parent died: time for a worker to end on the parent-death SIGTERM (its record says `interrupted`)
# before its watchdog kills it. torchrun and two ranks all ended within 11 s of a SIGKILLed effbench at load
# average 8 on 2 cores (tests/e2e/test_distributed.py::test_sigkill_of_the_parent_leaves_no_orphan...).
ORPHAN_GRACE_S = 15.0
PARENT_POLL_S = 0.5  # how often the watchdog reads getppid(): one syscall, nothing on the measured path


@dataclass
class ChildFailure:
    rank: int
    exitcode: int
    detail: str = ""

    def describe(self) -> str:
        how = f"exit code {self.exitcode}"
        if self.exitcode < 0:
            with contextlib.suppress(ValueError):
                how = f"killed by {signal.Signals(-self.exitcode).name}"
        return f"rank {self.rank} failed ({how}){': ' + self.detail if self.detail else ''}"


@dataclass
class SupervisedResult:
    returncode: int
    signal: int | None  # the signal effbench received and forwarded, if any
    failure: ChildFailure | None
    last_line: str | None = None
    """The child's last meaningful stderr line (last_meaningful_line): the cause when torchrun names no rank
    (a rendezvous that failed, a worker that crashed before training)."""


# torchrun's logger (torch/distributed/elastic, glog-like): "W1125 06:28:43.286000 6199 torch/.../api.py:1028] ..."
_TORCHRUN_LOG_RE = re.compile(r"^[IWEDF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
# c10d's C++ logger ("[W1127 00:32:21.720287122 socket.cpp:764] [c10d] ...") and a C++ exception's stack
# ("Exception raised from ... (most recent call first):", "frame #3: ...", "<omitting python frames>")
_CPP_LOG_RE = re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ ")
_CPP_FRAME_RE = re.compile(r"^(?:frame #\d+: |Exception raised from |<omitting python frames>)")
# A Python exception line at the end of a traceback: "torch.distributed.DistNetworkError: The client socket ..."
_EXCEPTION_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure))(?::\s*(.*))?$")
TRACEBACK_START = "Traceback (most recent call last):"
_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_TRACE_RE = re.compile(r"^\s*traceback\s*:\s*(.+)$")


def parse_failure(lines: Sequence[str]) -> ChildFailure | None:
    """The root-cause rank from torchrun's ChildFailedError summary, if the output has one."""
    start = next((i for i, line in enumerate(lines) if "Root Cause" in line), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if "Failures:" in line), None)
    if start is None:
        return None
    rank = code = None
    detail = ""
    for line in lines[start:]:
        if rank is None and (m := _RANK_RE.match(line)):
            rank = int(m.group(1))
        elif code is None and (m := _EXIT_RE.match(line)):
            code = int(m.group(1))
        elif (m := _TRACE_RE.match(line)) and "To enable traceback" not in line:
            detail = m.group(1).strip()
        if rank is not None and code is not None and detail:
            break
    if rank is None or code is None:
        return None
    return ChildFailure(rank=rank, exitcode=code, detail=detail)


def for_terminal(line: str, *, after_traceback: bool) -> bool:
    """Whether a line of torchrun's stderr goes to the terminal (every line goes to the log)."""
    return (
        not after_traceback
        and not _TORCHRUN_LOG_RE.match(line)
        and not _CPP_LOG_RE.match(line)
        and not _CPP_FRAME_RE.match(line)
        and not line.startswith(TRACEBACK_START)
    )


def last_meaningful_line(lines: Sequence[str], limit: int = 400) -> str | None:
    """Why a child failed, in one line: the exception that ended its last Python traceback, with the one it
    was raised from when it defers to it (torch's RendezvousConnectionError says only "See inner exception");
    without a traceback, its last line that is not a C++ frame or logger line. At most `limit` characters."""
    exceptions = [
        (m.group(1).rsplit(".", 1)[-1], (m.group(2) or "").strip()) for m in map(_EXCEPTION_RE.match, lines) if m
    ]
    if exceptions:
        name, message = exceptions[-1]
        text = f"{name}: {message}" if message else name
        if len(exceptions) > 1 and re.search(r"inner exception|see above", message, re.IGNORECASE):
            inner, inner_message = exceptions[-2]
            text += f" ({inner}: {inner_message})" if inner_message else f" ({inner})"
    else:
        plain = [
            line.strip()
            for line in lines
            if line.strip() and not _TORCHRUN_LOG_RE.match(line) and not _CPP_LOG_RE.match(line)
            and not _CPP_FRAME_RE.match(line) and not line.startswith((" ", "\t"))
        ]  # fmt: skip
        if not plain:
            return None
        text = plain[-1]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_supervised(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stderr: TextIO | None = None,
    grace_s: float = GRACE_S,
    log: TextIO | None = None,
) -> SupervisedResult:
    """Run `argv` (never through a shell) in its own process group and wait for it; its whole stderr goes to
    `log`, the lines for_terminal keeps to `stderr` (without a log, every line goes there)."""
    out = stderr or sys.stderr
    parent = os.getpid()
    proc = subprocess.Popen(
        list(argv), env=dict(env), stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
        preexec_fn=lambda: die_with_parent(signal.SIGTERM, parent),
    )  # fmt: skip
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        after_traceback = False
        for line in proc.stderr:
            lines.append(line)
            if log is None:
                out.write(line)
                out.flush()
                continue
            log.write(line)
            log.flush()
            after_traceback = after_traceback or line.startswith(TRACEBACK_START)
            if for_terminal(line, after_traceback=after_traceback):
                out.write(line)
                out.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        _killpg(proc.pid, signum)

    # as run/phases.py HANDLED; torchrun stops its ranks with the signal it got, SIGHUP included (torch/distributed/
    # elastic/multiprocessing/api.py, PContext.start: TORCHELASTIC_SIGNALS_TO_HANDLE's default)
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                proc.wait(timeout=grace_s if received else None)
                break
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)  # ranks ignored the forwarded signal
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _killpg(proc.pid, signal.SIGKILL)  # anything torchrun left behind in its group
        reader.join(timeout=5)
    return SupervisedResult(
        returncode=proc.returncode,
        signal=received[0] if received else None,
        failure=None if received else parse_failure(lines),
        last_line=last_meaningful_line(lines) if proc.returncode else None,
    )


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask Linux to send `signum` to this process when its parent dies (PR_SET_PDEATHSIG).

    A SIGKILLed effbench cannot forward anything, and its torchrun group lives in its own session:
    without this, torchrun and the ranks would run on as orphans. torchrun turns the SIGTERM into a
    stop of its ranks, and each rank sets the same on itself in case torchrun dies first.
    No-op off Linux. `parent`: the pid expected as parent (exit now if it is already gone).
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signum)


def exit_with_parent(grace_s: float = ORPHAN_GRACE_S, poll_s: float = PARENT_POLL_S) -> threading.Thread | None:
    """End this process when the process that started it dies, however it died (SIGKILL included).

    PR_SET_PDEATHSIG delivers SIGTERM at once (die_with_parent), which the run turns into `interrupted`. But
    Python runs a signal handler only between bytecodes of the main thread: a process blocked in C++ (a c10d
    store connect waiting for a rank 0 that never comes, a collective) never runs it, and SIGTERM is not the
    default action once a handler is installed (run/phases.py). So a watchdog thread (the store connect and
    the collectives release the GIL) reads getppid() every `poll_s`; once the parent is gone it gives the
    SIGTERM `grace_s` to end the process, then sends SIGKILL to itself. Returns the thread (None off Linux)."""
    parent = os.getppid()
    die_with_parent(signal.SIGTERM, parent)  # the parent gone since getppid(): SIGTERM now
    if not sys.platform.startswith("linux"):
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="effbench-parent-watch", daemon=True)
    thread.start()
    return thread


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)

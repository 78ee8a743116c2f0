"""Where a run is, and SIGTERM / SIGINT / SIGHUP turned into an exception that knows it, from the first line of main.

    setup -> dataset -> model -> warm-up -> epochs <-> validation -> profiling -> report

`install()` is the first call of `cli.main`. In a container effbench is PID 1, and the kernel only
delivers to PID 1 the signals it installed a handler for (signal(7): "the only signals that can be
sent to process ID 1, the init process, are those for which init has explicitly installed signal
handlers"), so without one `docker stop` waits its 10 s and SIGKILLs. SIGHUP (the terminal closed)
killed the run by default, leaving `running`: it is handled as SIGTERM. The runner narrows the
handler to `Interrupted(signum, phase)` for the run, and defers signals while it writes the final
files (`deferred`), so the files always say how the run ended. A signal that comes while a module is
being imported is raised once the import is over (`_after_import`). No torch import.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from effbench.run import faults

PHASES = ("setup", "dataset", "model", "warm-up", "epochs", "validation", "profiling", "report")
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How soon a signal that came during an import is looked at again: a few checks in a second-long `import torch`.
RESEND_S = 0.05


class Interrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP; carries the signal (exit code 128 + signum) and the phase it arrived in.

    Not a KeyboardInterrupt: Typer turns those into exit 130 whatever the signal (typer/core.py
    `_main`: `except KeyboardInterrupt as e: raise Exit(130) from e`), and 143 must stay 143."""

    def __init__(self, signum: int, phase: str | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.phase = phase


class Phase:
    """The run's current phase and the wall time each phase took so far; `enter` also serves the hold hook
    (faults.hold_phase) for tests. `now`: the clock (perf_counter; a test's own)."""

    def __init__(self, received: list[int], name: str = "setup", now: Callable[[], float] = time.perf_counter) -> None:
        self.received = received
        self.name = name
        self._now = now
        self._since = now()
        self._seconds: dict[str, float] = {}

    def enter(self, name: str) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; one of {', '.join(PHASES)}")
        t = self._now()
        self._seconds[self.name] = self._seconds.get(self.name, 0.0) + t - self._since
        self.name, self._since = name, t
        faults.hold_phase(name, until=lambda: bool(self.received))

    def seconds_before_current(self) -> dict[str, float]:
        """Wall seconds of each phase entered and left, summed over its visits, in PHASES order: the run
        so far up to the current phase (the report phase, when the record is made)."""
        return {p: self._seconds[p] for p in PHASES if p in self._seconds}


def _importing(frame: FrameType | None) -> bool:
    """Whether the main thread is inside an import: importlib's frames are on its stack (through C code too)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _after_import(signum: int, frame: FrameType | None) -> bool:
    """When `frame` is inside an import, send `signum` again RESEND_S later instead of raising now, and say so.
    Raised inside a library's import, the exception is not always seen: under `import torch`, torch._C imports
    numpy, which printed it as a 40-line ImportError (exit 1) or dropped it (the run went on to `ok`). It is sent
    again only while a handler of this module is installed (another may have replaced the first meanwhile); once
    `cli.main` gave an in-process caller its own handlers back, the signal is dropped with the run it was for."""
    if not _importing(frame):
        return False

    def resend() -> None:
        if getattr(signal.getsignal(signum), "__module__", None) == __name__:
            os.kill(os.getpid(), signum)

    timer = threading.Timer(RESEND_S, resend)
    timer.daemon = True
    timer.start()
    return True


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    if not _after_import(signum, frame):
        raise Interrupted(signum)


def install() -> dict[signal.Signals, Any]:
    """Every SIGTERM/SIGINT/SIGHUP raises Interrupted; returns the previous handlers for `restore`."""
    return {s: signal.signal(s, _raise_interrupted) for s in HANDLED}


def restore(old: dict[signal.Signals, Any]) -> None:
    for s, h in old.items():
        signal.signal(s, h)


@contextmanager
def _handling(handler: Callable[[int, Any], None]) -> Iterator[None]:
    old = {s: signal.signal(s, handler) for s in HANDLED}
    try:
        yield
    finally:
        restore(old)


@contextmanager
def interrupt_on_signals(received: list[int], phase: Phase | None = None) -> Iterator[None]:
    """Turn SIGTERM/SIGINT/SIGHUP into `Interrupted` for the duration; remember the signal in `received`
    (a DataLoader worker killed by the same signal can surface first as a RuntimeError)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if _after_import(signum, frame):
            return
        received.append(signum)
        raise Interrupted(signum, phase.name if phase is not None else None)

    with _handling(handler):
        yield


@contextmanager
def deferred(received: list[int]) -> Iterator[None]:
    """Record SIGTERM/SIGINT/SIGHUP without raising: for writing the files that say how the run ended, and for
    the CLI's own imports (effbench/__main__.py)."""
    with _handling(lambda signum, _frame: received.append(signum)):
        yield

"""Each tracking operation in a process of its own, every MLflow call in it under one wall-clock budget.

    reply = call("upload", {"uri": ..., ...}, budget_s=60)    # the parent: a JSON request in, a JSON reply out
    python -m effbench.track.child                           # the child: reads the request on stdin

Why a process: MLflow's request timeout is per socket read (a server that sends headers and then a byte a second
is waited on for ever), its SQL store retries a failed connection for ~100 s, its artifact transfers run in
thread pools that Python joins at exit, and it writes log lines, warnings and progress bars. In the child a
watchdog ends the process when one call (its connection, request, body and retries) outlives the budget, what
the libraries print goes to a stderr the parent drops, and the parent kills the child's process group however it
leaves: nothing is left running. The request travels on stdin, not argv: a URI's password stays out of `ps`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from effbench import redact
from effbench.errors import EffbenchError
from effbench.fmt import printable

BUDGET_ENV = "EFFBENCH_TRACK_TIMEOUT"
DEFAULT_BUDGET_S = 60.0
"""Seconds each call to the tracker may take, all of it: a server farther away or slower needs a larger one."""
MAX_BUDGET_S = 24 * 3600.0
EXCERPT_CHARS = 120


class Unanswered(Exception):
    """The tracker failed or ran out of time: the reason in a few printable words."""


def budget_s() -> float:
    """EFFBENCH_TRACK_TIMEOUT, checked: a bad value is one error line naming it, before anything runs."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_BUDGET_S:  # nan fails both
        raise EffbenchError(
            BUDGET_ENV, f"{raw!r} is not a number of seconds in (0, {MAX_BUDGET_S:g}]; e.g. {BUDGET_ENV}=120"
        )
    return value


def excerpt(text: str) -> str:
    """What a server or library said, safe to show: one line, passwords hidden, control characters shown as
    escapes (never obeyed), cut short: a server's raw bytes never reach the terminal as they are."""
    text = printable(redact.text(" ".join(text.split())))
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def timeout_reason(budget: float) -> str:
    return (
        f"no complete answer within {budget:g} s, the budget of each call to the tracker ({BUDGET_ENV}); "
        f"a slow server needs more, e.g. {BUDGET_ENV}={max(120, int(budget * 4))}"
    )


def call(op: str, args: dict[str, Any], budget: float) -> Any:
    """Run `op` (OPS) in a child process: its result, an EffbenchError as the child raised it, or Unanswered."""
    root = str(Path(__file__).resolve().parents[2])  # the child runs this same effbench, wherever it came from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "effbench.track.child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(json.dumps({"op": op, "args": args, "budget_s": budget}).encode())
    finally:  # an interrupt (SIGTERM raised in this thread) or any error: the child and its threads go too
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        reply = json.loads(lines[-1])
    except (IndexError, ValueError):
        said = err.decode("utf-8", "replace").strip().splitlines()
        raise Unanswered(
            excerpt(said[-1]) if said else f"the tracking process ended with code {proc.returncode}"
        ) from None
    if "error" in reply:
        raise EffbenchError(*reply["error"])
    if "failed" in reply:
        raise Unanswered(reply["failed"])
    if "timeout" in reply:
        raise Unanswered(timeout_reason(budget))
    return reply["ok"]


# --- the child ---


class Watchdog:
    """Ends this process, with a timeout reply, when one call outlives the budget."""

    def __init__(self, budget: float, reply: Callable[[dict[str, Any]], None]) -> None:
        self.budget, self.reply = budget, reply

    @contextlib.contextmanager
    def __call__(self, what: str) -> Iterator[None]:
        timer = threading.Timer(self.budget, self._expire, (what,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _expire(self, what: str) -> None:
        self.reply({"timeout": what})
        os._exit(0)  # a thread blocked on a socket cannot be stopped otherwise


class Watched:
    """An MLflow client whose every method call is under the watchdog."""

    def __init__(self, target: Any, watch: Watchdog) -> None:
        self._target, self._watch = target, watch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def watched(*args: Any, **kwargs: Any) -> Any:
            with self._watch(name):
                return attr(*args, **kwargs)

        return watched

"""Progress display: a rich progress bar on a terminal, plain log lines otherwise (CI, Slurm logs).

Each update shows the wall-clock rate since the previous update: img/s, time per step and the ETA
of the remaining training steps (validation not included). These are feedback for the user, read
on the host clock between progress calls (the loss `.item()` before each call is their sync); the
measured figures in results.json come from run/timing.py, not from here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def fmt_duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m: short enough for a log line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Context manager; call `update(epoch, step, steps, loss)` from the training loop."""

    def __init__(
        self,
        epochs: int,
        stream: TextIO | None = None,
        enabled: bool = True,
        *,
        images_per_step: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.epochs = epochs
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.images_per_step = images_per_step
        self.clock = clock
        self._bar: Any = None
        self._task: Any = None
        self._epoch = -1
        self._last: tuple[float, int] | None = None  # (time, global step) at the previous update

    def __enter__(self) -> Progress:
        if self.enabled and self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress as RichProgress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[rate]}"),
                TextColumn("loss {task.fields[loss]}"),
                console=Console(file=self.stream),
                transient=False,
            )
            self._bar.__enter__()
        self._last = (self.clock(), 0)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def rate(self, epoch: int, step: int, steps: int) -> str:
        """`12.3 img/s, 81 ms/step, ETA 1m05s` over the steps since the previous call."""
        now, done = self.clock(), epoch * steps + step
        last_t, last_done = self._last if self._last is not None else (now, done)
        self._last = (now, done)
        if done <= last_done or now <= last_t:
            return ""
        step_s = (now - last_t) / (done - last_done)
        remaining = (self.epochs - epoch) * steps - step
        parts = [f"{self.images_per_step / step_s:.1f} img/s"] if self.images_per_step else []
        parts += [f"{step_s * 1000:.0f} ms/step", f"ETA {fmt_duration(remaining * step_s)}"]
        return ", ".join(parts)

    def update(self, epoch: int, step: int, steps: int, loss: float) -> None:
        if not self.enabled:
            return
        rate = self.rate(epoch, step, steps)
        if self._bar is not None:
            if epoch != self._epoch:
                self._task = self._bar.add_task(f"epoch {epoch + 1}/{self.epochs}", total=steps, loss="-", rate="")
                self._epoch = epoch
            self._bar.update(self._task, completed=step, loss=f"{loss:.4f}", rate=rate)
        else:
            tail = f" ({rate})" if rate else ""
            print(
                f"epoch {epoch + 1}/{self.epochs} step {step}/{steps} loss {loss:.4f}{tail}",
                file=self.stream,
                flush=True,
            )

    def log(self, message: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            print(message, file=self.stream, flush=True)

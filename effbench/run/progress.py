"""Progress display: a rich progress bar on a terminal, plain log lines otherwise (CI, Slurm logs).

Each update shows, since the previous update: img/s over the measured steps (warm-up excluded, data
wait + compute as run/timing.py timed them, fed in by `step`: the headline's definition, over these
steps; "warm-up" while only warm-up steps ran), then the wall-clock time per step and the ETA of the
remaining training steps (validation not included), read on the host clock between progress calls
(the loss `.item()` before each call is their sync). The wall clock also holds what runs between the
timed steps (validation, the per-epoch files), so it is only for the ETA.
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
        ranks: int = 1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.epochs = epochs
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.ranks = ranks  # DDP: every rank steps the same images as this one (DistributedSampler's shards)
        self.clock = clock
        self._images, self._seconds, self._warmup_steps = 0, 0.0, 0  # the timed steps since the last update
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

    def step(self, warmup: bool, seconds: float, images: int) -> None:
        """One step as the loop timed and tallied it (run/timing.py: data wait + compute, in seconds)."""
        if warmup:
            self._warmup_steps += 1
        else:
            self._images += images
            self._seconds += seconds

    def _measured(self) -> list[str]:
        """The measured img/s since the previous call ("warm-up" when only warm-up steps ran)."""
        images, seconds, warmup = self._images, self._seconds, self._warmup_steps
        self._images, self._seconds, self._warmup_steps = 0, 0.0, 0
        if seconds > 0:
            return [f"{self.ranks * images / seconds:.1f} img/s measured"]
        return ["warm-up"] if warmup else []

    def rate(self, epoch: int, step: int, steps: int) -> str:
        """`12.3 img/s measured, 81 ms/step, ETA 1m05s` over the steps since the previous call."""
        measured = self._measured()
        now, done = self.clock(), epoch * steps + step
        last_t, last_done = self._last if self._last is not None else (now, done)
        self._last = (now, done)
        if done <= last_done or now <= last_t:
            return ", ".join(measured)
        step_s = (now - last_t) / (done - last_done)
        remaining = (self.epochs - epoch) * steps - step
        parts = [*measured, f"{step_s * 1000:.0f} ms/step", f"ETA {fmt_duration(remaining * step_s)}"]
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

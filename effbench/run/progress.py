"""Progress display: a rich progress bar on a terminal, plain log lines otherwise (CI, Slurm logs)."""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    """Context manager; call `update(epoch, step, steps, loss)` from the training loop."""

    def __init__(self, epochs: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.epochs = epochs
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None
        self._epoch = -1

    def __enter__(self) -> Progress:
        if self.enabled and self.stream.isatty():
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
                TextColumn("loss {task.fields[loss]}"),
                transient=False,
            )
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def update(self, epoch: int, step: int, steps: int, loss: float) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            if epoch != self._epoch:
                self._task = self._bar.add_task(f"epoch {epoch + 1}/{self.epochs}", total=steps, loss="-")
                self._epoch = epoch
            self._bar.update(self._task, completed=step, loss=f"{loss:.4f}")
        else:
            print(f"epoch {epoch + 1}/{self.epochs} step {step}/{steps} loss {loss:.4f}", file=self.stream, flush=True)

    def log(self, message: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            print(message, file=self.stream, flush=True)

"""Step timers: how long the loop waited for data and how long the step computed.

Where each timer synchronizes:
- data wait: host wall time spent blocked in `next(loader_iterator)` (including iterator creation,
  which starts the worker processes). No device sync for host-side loaders: the host is what waits.
  When the loader makes the batch with device kernels (`--loader fast`: copy, crop, flip, normalize),
  `sync_after_data` adds `torch.cuda.synchronize(device)` after next(), so that work is data time
  too. The device is idle at that point (the previous step ended with a sync), so the sync waits
  only for the batch's own kernels.
- compute: host wall time from the batch in hand to the end of the optimizer step, followed by
  `torch.cuda.synchronize(device)` on CUDA so queued kernels are counted in the step that launched
  them. This is the one host sync per step, and it exists only for this measurement.

Warm-up steps are timed the same way but accounted apart (see `Tally`), so they never enter the
reported throughput.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from effbench import schema
from effbench.analysis.throughput import Part, job_throughput


def device_sync_fn(device: Any) -> Callable[[], None]:
    """A no-arg function that waits for all queued work on `device` (no-op on the CPU)."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@dataclass
class StepTime:
    data_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.data_s + self.compute_s


class StepTimer:
    """Times one step in two parts: `wait_for(iterator)` then `compute()` as a context manager."""

    def __init__(self, sync: Callable[[], None], *, sync_after_data: bool = False) -> None:
        self._sync = sync
        self._sync_after_data = sync_after_data
        self.data_s = 0.0
        self.compute_s = 0.0

    def wait_for(self, it: Iterator[Any]) -> Any:
        """next(it), timed as data wait; StopIteration passes through."""
        t0 = time.perf_counter()
        try:
            batch = next(it)
            if self._sync_after_data:
                self._sync()  # device-side augmentation is data time (see the module docstring)
            return batch
        finally:
            self.data_s += time.perf_counter() - t0

    def time_data(self, fn: Callable[[], Any]) -> Any:
        """Any other blocking data work (creating the iterator), timed as data wait."""
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.data_s += time.perf_counter() - t0

    def compute(self) -> _ComputeSpan:
        return _ComputeSpan(self)

    def lap(self) -> StepTime:
        """Return the step's times and reset for the next step."""
        t = StepTime(self.data_s, self.compute_s)
        self.data_s = 0.0
        self.compute_s = 0.0
        return t


class _ComputeSpan:
    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self._timer._sync()  # count the step's queued device work in this step
        self._timer.compute_s += time.perf_counter() - self._t0


@dataclass
class Tally:
    """Sums of steps, images and seconds; one for warm-up, one for measured steps."""

    steps: int = 0
    images: int = 0
    data_time_s: float = 0.0
    compute_time_s: float = 0.0
    step_times_s: list[float] = field(default_factory=list, repr=False)

    def add(self, t: StepTime, images: int) -> None:
        self.steps += 1
        self.images += images
        self.data_time_s += t.data_s
        self.compute_time_s += t.compute_s
        self.step_times_s.append(t.total_s)

    @property
    def time_s(self) -> float:
        return self.data_time_s + self.compute_time_s

    @property
    def throughput_img_s(self) -> float | None:
        return job_throughput([Part(self.images, self.time_s)])

    def record(self) -> schema.Tally:
        """The tally as results.json's `warmup` / `measured` (without the step times)."""
        return schema.Tally(
            steps=self.steps,
            images=self.images,
            data_time_s=self.data_time_s,
            compute_time_s=self.compute_time_s,
            time_s=self.time_s,
            throughput_img_s=self.throughput_img_s,
        )

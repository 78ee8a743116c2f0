"""Step timers: how long the loop waited for data and how long the step computed, read through one clock.

Every clock read of the training loop, validation, `--data-only` and the profiling pass goes through a
`DeviceClock`: the host's wall clock plus the two waits an asynchronous device offers. On the CPU both waits
are no-ops (the work is done when the call returns). On CUDA the host only queues kernels, so a span is
right only if it ends with a wait for the work it owns, and for nothing else:

- `sync_stream` waits for the training stream (torch's current stream on the run's device,
  cudaStreamSynchronize). Everything the step queued is there, or joined to it: DDP's reducer makes the
  current stream wait for its all-reduces on NCCL's stream before backward returns (`work.wait()`,
  torch/distributed/distributed_c10d.py:6842), and a batch DALI hands over is copied or shared on the
  current stream after DALI's event for that batch (nvidia/dali/plugin/pytorch/__init__.py:223-225,
  feed_ndarray on `torch.cuda.current_stream`; from_dlpack with the consumer's stream).
- `sync_device` waits for every stream on the device (torch.cuda.synchronize). That includes work the
  step does not own: DALI keeps `prefetch_queue_depth` (2) batches in flight on its own non-blocking
  stream (data/dali.py; nvidia/dali/include/dali/util/user_stream.h:103 cudaStreamNonBlocking) and
  schedules the next run at each `__next__`. A compute span that waited for it charged later batches'
  decode to this step: data wait read low and a data-bound run was called compute-bound. No timed span
  uses it; it stays for callers that must start from an idle device.

The spans (docs/methodology.md, "What each span holds"):
- data: `next(iterator)` and the batch's delivery to the device (the host-to-device copy, a no-op for
  batches already there, and the input's memory format), then `sync_stream`: the batch is on the device
  and ready, whatever the loader. One rule for every loader: the copy was compute for torchvision and
  data for fast and DALI, so loader comparisons were not like for like. The previous span ended with a
  stream sync, so this one waits only for the batch's own work (its copy, device-side augmentation, the
  rest of DALI's decode of this batch).
- compute: from the batch in hand to the end of the optimizer step, then `sync_stream`, so the kernels
  count in the step that queued them. One host sync per step, and it exists only for this measurement.
- validation (run/train.py evaluate): from the first batch to `sync_stream` after the last; the clock is
  read after that wait, so queued validation kernels are in `val_time_s`. The one warm-up forward per new
  input shape (compilation, autotuning) runs between two `sync_stream`s and is timed apart.

Warm-up steps are timed the same way but accounted apart (see `Tally`), so they never enter the
reported throughput. The asynchronous-device simulator in tests/simdevice.py checks which queued work
lands in which span (docs/gpu-truth.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from effbench import schema
from effbench.analysis.throughput import Part, job_throughput


def _no_wait() -> None:
    """The CPU's wait: its ops have finished when they return."""


@dataclass(frozen=True)
class DeviceClock:
    """The host clock every timer reads and the two waits a span may end with (module docstring)."""

    now: Callable[[], float] = time.perf_counter
    """Host wall time in seconds."""
    sync_stream: Callable[[], None] = _no_wait
    """Wait for the training stream: the work the step queued, and what it depends on."""
    sync_device: Callable[[], None] = _no_wait
    """Wait for every stream on the device, other producers' prefetch included."""


def device_clock(device: Any) -> DeviceClock:
    """The clock of `device`: CUDA's two waits on a CUDA device, none on the CPU."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return DeviceClock(
            sync_stream=lambda: torch.cuda.current_stream(device).synchronize(),
            sync_device=lambda: torch.cuda.synchronize(device),
        )
    return DeviceClock()


@dataclass
class StepTime:
    data_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.data_s + self.compute_s


class StepTimer:
    """Times one step in two parts: `wait_for(iterator)` then `compute()` as a context manager.

    `deliver(batch)` puts the batch on the device (the loop's `_to_device`); it runs inside the data span,
    which then waits for the training stream."""

    def __init__(self, clock: DeviceClock, deliver: Callable[[Any], Any] = lambda b: b) -> None:
        self._clock = clock
        self._deliver = deliver
        self.data_s = 0.0
        self.compute_s = 0.0

    def wait_for(self, it: Iterator[Any]) -> Any:
        """next(it) delivered to the device, timed as data wait; StopIteration passes through."""
        t0 = self._clock.now()
        try:
            batch = self._deliver(next(it))
            self._clock.sync_stream()  # the batch is on the device: its copy and its loader's work are data
            return batch
        finally:
            self.data_s += self._clock.now() - t0

    def time_data(self, fn: Callable[[], Any]) -> Any:
        """Any other blocking data work (creating the iterator), timed as data wait."""
        t0 = self._clock.now()
        try:
            return fn()
        finally:
            self.data_s += self._clock.now() - t0

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
        self._t0 = self._timer._clock.now()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self._timer._clock.sync_stream()  # the step's queued work, not other streams' prefetch
        self._timer.compute_s += self._timer._clock.now() - self._t0


@dataclass
class Tally:
    """Sums of steps, images and seconds; one for warm-up, one for measured steps."""

    steps: int = 0
    images: int = 0
    data_time_s: float = 0.0
    compute_time_s: float = 0.0
    step_times_s: list[float] = field(default_factory=list, repr=False)
    skipped_steps: int | None = None
    """Of `steps`, those whose optimizer step the fp16 loss scaler skipped (inf/nan gradients); they stay in
    every other figure: a skipped step still ran its forward and backward. None: no loss scaler."""

    def add(self, t: StepTime, images: int, skipped: bool | None = None) -> None:
        self.steps += 1
        self.images += images
        self.data_time_s += t.data_s
        self.compute_time_s += t.compute_s
        self.step_times_s.append(t.total_s)
        if skipped is not None:
            self.skipped_steps = (self.skipped_steps or 0) + int(skipped)

    @property
    def time_s(self) -> float:
        return self.data_time_s + self.compute_time_s

    @property
    def throughput_img_s(self) -> float | None:
        return job_throughput([Part(self.images, self.time_s)])

    def record(self) -> schema.Tally:
        """The tally as results.json's `warmup` / `measured` (without the step times; skipped_steps only
        where there is a loss scaler)."""
        tally = schema.Tally(
            steps=self.steps,
            images=self.images,
            data_time_s=self.data_time_s,
            compute_time_s=self.compute_time_s,
            time_s=self.time_s,
            throughput_img_s=self.throughput_img_s,
        )
        if self.skipped_steps is not None:
            tally.skipped_steps = self.skipped_steps
        return tally

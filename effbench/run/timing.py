"""Step timers: how long the loop waited for data and how long the step computed, read through one clock.

Every clock read of the training loop, validation, `--data-only` and the profiling pass goes through a
`DeviceClock`: the host's wall clock, marks on the training stream, and the two waits an asynchronous
device offers. On the CPU the waits are no-ops and a mark is the host clock (the work is done when the
call returns). On CUDA the host only queues kernels, so a span is right only if its ends are read where
the device reached them, and waits, if at all, only for the work it owns:

- `mark` records a CUDA event on the training stream (torch's current stream on the run's device); it
  fires when the stream reaches it, and `seconds_between` reads two of them (cudaEventElapsedTime) once a
  wait has covered the later one.
- `sync_stream` waits for the training stream (cudaStreamSynchronize). Everything the step queued is
  there, or joined to it: DDP's reducer makes the current stream wait for its all-reduces on NCCL's
  stream before backward returns (`work.wait()`, torch/distributed/distributed_c10d.py:6842), and a batch
  DALI hands over is copied or shared on the current stream after DALI's event for that batch
  (nvidia/dali/plugin/pytorch/__init__.py:223-225, feed_ndarray on `torch.cuda.current_stream`).
- `sync_device` waits for every stream on the device (torch.cuda.synchronize). That includes work the
  step does not own: DALI keeps `prefetch_queue_depth` (2) batches in flight on its own non-blocking
  stream (data/dali.py; nvidia/dali/include/dali/util/user_stream.h:103 cudaStreamNonBlocking). No timed
  span uses it; it stays for callers that must start from an idle device.

Two timings (`--timing`; docs/methodology.md, "What each span holds"), the same spans:
- data: from the loop asking for the batch (`next(iterator)`) to the batch on the device (its copy, a
  no-op for batches already there, device-side augmentation, the rest of DALI's decode of this batch).
- compute: from the batch in hand to the end of the optimizer step. The loop's own bookkeeping after it
  (writing the loss into the epoch's tensor, callbacks) is in no span.
`pipelined` (the default) marks each end on the training stream and waits once per window (the loop's
`flush`: every --log-interval steps, at the end of warm-up and of the epoch), so the host queues the next
step while the device runs the last one, as a bare training loop does. A span then reads device time: the
data span's start fires when the stream has finished the previous step's work (or when the host asks, if
the stream was idle), its end when the batch's copy is done; a host blocked on a slow loader leaves the
stream idle, and that idle time is data. `per-step` waits for the training stream at the end of both spans
and reads the host clock: exact per-step attribution, at the cost of draining the device twice a step (5-9%
on efficientnet-b0 on an H200, docs/PERFORMANCE.md). On the CPU the two read the same figures.

Validation (run/train.py evaluate) runs from the first batch to `sync_stream` after the last under both.
Warm-up steps are timed the same way but accounted apart (see `Tally`), so they never enter the reported
throughput. The asynchronous-device simulator in tests/simdevice.py implements the slice of torch.cuda
used here and checks which queued work lands in which span (docs/gpu-truth.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from effbench import schema
from effbench.config import TIMINGS
from effbench.analysis.throughput import Part, job_throughput


def _no_wait() -> None:
    """The CPU's wait: its ops have finished when they return."""


def _host_now() -> float:
    """The host's wall clock, looked up at each read (the simulator's virtual clock replaces perf_counter)."""
    return time.perf_counter()


def _host_seconds(start: Any, end: Any) -> float:
    return float(end - start)


@dataclass(frozen=True)
class DeviceClock:
    """The host clock every timer reads, marks on the training stream, and the two waits (module docstring)."""

    now: Callable[[], float] = _host_now
    """Host wall time in seconds."""
    sync_stream: Callable[[], None] = _no_wait
    """Wait for the training stream: the work the step queued, and what it depends on."""
    sync_device: Callable[[], None] = _no_wait
    """Wait for every stream on the device, other producers' prefetch included."""
    mark: Callable[[], Any] = _host_now
    """A point on the training stream: it is reached when the work queued before it has run."""
    seconds_between: Callable[[Any, Any], float] = _host_seconds
    """Seconds from one mark to a later one; read only after a wait that covers the later one."""
    reached: Callable[[Any], bool] = lambda _mark: True
    """Whether the stream has reached a mark, without waiting (cudaEventQuery)."""


def device_clock(device: Any, api: Any = None) -> DeviceClock:
    """The clock of `device`. `api`: the device's stream and event interface, the slice of `torch.cuda` used
    here (current_stream(device).synchronize(), synchronize(device), Event(enable_timing=True) with
    record(stream) and elapsed_time(end) in ms); torch.cuda on a CUDA device, none (the host's clock and
    no waits) on the CPU. tests/simdevice.py implements the same slice."""
    if api is None and getattr(device, "type", "cpu") == "cuda":
        import torch

        api = torch.cuda
    if api is None:
        return DeviceClock()

    def mark() -> Any:
        event = api.Event(enable_timing=True)
        event.record(api.current_stream(device))
        return event

    return DeviceClock(
        sync_stream=lambda: api.current_stream(device).synchronize(),
        sync_device=lambda: api.synchronize(device),
        mark=mark,
        seconds_between=lambda start, end: start.elapsed_time(end) / 1000.0,  # CUDA events read milliseconds
        reached=lambda event: bool(event.query()),
    )


@dataclass
class StepTime:
    data_s: float
    compute_s: float

    @property
    def total_s(self) -> float:
        return self.data_s + self.compute_s


class StepTimer:
    """Times steps in two parts: `wait_for(iterator)` then `compute()` as a context manager, then
    `end_step(meta)`; `flush()` returns the ended steps' times with their `meta`, in order.

    `deliver(batch)` puts the batch on the device (the loop's `_to_device`); it runs inside the data span.
    This is the `per-step` timing: each span ends with a wait for the training stream and reads the host
    clock, so `flush()` never waits. `PipelinedTimer` is the default's."""

    def __init__(self, clock: DeviceClock, deliver: Callable[[Any], Any] = lambda b: b) -> None:
        self._clock = clock
        self._deliver = deliver
        self.data_s = 0.0
        self.compute_s = 0.0
        self._ended: list[tuple[StepTime, Any]] = []

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

    def _end_compute(self, t0: float, ok: bool) -> None:
        if ok:
            self._clock.sync_stream()  # the step's queued work, not other streams' prefetch
        self.compute_s += self._clock.now() - t0

    def lap(self) -> StepTime:
        """Return the step's times and reset for the next step."""
        t = StepTime(self.data_s, self.compute_s)
        self.data_s = 0.0
        self.compute_s = 0.0
        return t

    def end_step(self, meta: Any = None) -> None:
        """The step is over: its times wait in order for `flush`, with `meta` (what the caller tallies)."""
        self._ended.append((self.lap(), meta))

    def discard(self) -> None:
        """Forget the spans timed since the last ended step (a loader that ran out: no step)."""
        self.lap()

    def flush(self, wait: bool = True) -> list[tuple[StepTime, Any]]:
        """The ended steps not returned yet, with their meta; no wait here, each span waited already."""
        out, self._ended = self._ended, []
        return out


class PipelinedTimer(StepTimer):
    """The `pipelined` timing: the same spans as StepTimer's, their ends marked on the training stream
    (DeviceClock.mark) and read at `flush`, after its one wait for the stream. No wait inside a step."""

    def __init__(self, clock: DeviceClock, deliver: Callable[[Any], Any] = lambda b: b) -> None:
        super().__init__(clock, deliver)
        self._start: Any = None  # the step's first mark: the data span's start
        self._ready: Any = None  # the batch on the device: data ends, compute starts
        self._end: Any = None  # the step's last queued work has run: compute ends
        self._marks: list[tuple[Any, Any, Any, Any]] = []  # (start, ready, end, meta) of ended steps

    def _open(self) -> None:
        if self._start is None:
            self._start = self._clock.mark()

    def wait_for(self, it: Iterator[Any]) -> Any:
        self._open()
        batch = self._deliver(next(it))
        self._ready = self._clock.mark()  # after the batch's copy and its loader's work on the stream
        return batch

    def time_data(self, fn: Callable[[], Any]) -> Any:
        self._open()
        return fn()

    def _end_compute(self, t0: float, ok: bool) -> None:
        self._end = self._clock.mark() if ok else None  # after the step's last queued kernel

    def end_step(self, meta: Any = None) -> None:
        if self._start is None or self._ready is None or self._end is None:
            raise RuntimeError("end_step() needs wait_for() and a compute() span that ended without error")
        self._marks.append((self._start, self._ready, self._end, meta))
        self._start = self._ready = self._end = None

    def discard(self) -> None:
        self._start = self._ready = self._end = None

    def flush(self, wait: bool = True) -> list[tuple[StepTime, Any]]:
        """One wait for the training stream, then every ended step's two spans from its marks. `wait=False`
        (after an error: a peer may be gone and the stream never drain): the steps whose end the stream has
        reached already, and no wait."""
        if not self._marks:
            return []
        if wait:
            self._clock.sync_stream()  # the window's one wait: every mark below has been reached
            ready = len(self._marks)
        else:
            ready = next((i for i, m in enumerate(self._marks) if not self._clock.reached(m[2])), len(self._marks))
        between = self._clock.seconds_between
        out = [(StepTime(between(s, r), between(r, e)), meta) for s, r, e, meta in self._marks[:ready]]
        self._marks = self._marks[ready:]
        return out


def step_timer(clock: DeviceClock, deliver: Callable[[Any], Any] = lambda b: b, timing: str = "pipelined") -> StepTimer:
    """The timer of `--timing`."""
    if timing == "per-step":
        return StepTimer(clock, deliver)
    if timing == "pipelined":
        return PipelinedTimer(clock, deliver)
    raise ValueError(f"timing must be one of {TIMINGS}, not {timing!r}")


class _ComputeSpan:
    def __init__(self, timer: StepTimer) -> None:
        self._timer = timer
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = self._timer._clock.now()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._timer._end_compute(self._t0, exc_type is None)


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

"""A simulated asynchronous device: CUDA's execution model in virtual seconds, driving effbench's real code.

On a CPU every op has finished when it returns, so a timer that waits for the wrong work (or for none)
reads right there and wrong on a GPU. This fake keeps the property that matters: the host only *queues*
work, and a clock read sees queued work only after a wait for the stream that holds it. It implements the
slice of `torch.cuda` that effbench's timing uses (run/timing.device_clock: `current_stream(device)`,
`synchronize(device)`, `Event(enable_timing=True)` with `record`, `elapsed_time`, `query`), so the real
clock, StepTimer, TrainStep, validation and training loop run on it unchanged:

    sim = SimDevice(OpCost(host_s=10e-6, device_s=8e-6))
    with sim.installed():                    # virtual host clock, real ops queue kernels, reads wait
        epochs = list(train_epochs(model, data, optimizer, scheduler, sim.runtime(), cfg))

Model (docs/gpu-truth.md, "The simulator"):
- Time is virtual: `sim.now` is the host's clock (`time.perf_counter` reads it while installed). It moves
  only through host work (`host(seconds)`, each op's launch cost) and waits. Nothing sleeps: the tests are
  exact and take no wall time.
- Kernel launch returns at once. Every aten op a real model runs (forward, backward, the optimizer's)
  costs `OpCost.host_s` of host time and queues `OpCost.device_s` on the *current* stream (views and
  allocations queue nothing). A stream runs its work in order; each piece starts when queued, when the
  stream's previous piece has ended, and after the events the stream was told to wait for.
- Streams: the current one (`current_stream()`, `with sim.stream(s)`), others by name (a copy stream,
  DALI's, NCCL's). Events: `Event().record(stream)` fires when the stream reaches it; `elapsed_time` in ms;
  `query()`; `stream.wait_event(e)` / `wait_stream(s)` as cudaStreamWaitEvent.
- Waits: `synchronize()` (every stream), `stream.synchronize()` (one). A read of a device value waits for
  the current stream: `.item()`, `float()`, `bool()`, `int()` (aten._local_scalar_dense), `.tolist()`,
  `.cpu()`, `.numpy()`.
- An implicit device-wide wait where a test asks for one (`OpCost.device_wide_on`: cudnn's autotuning at
  a new shape, the caching allocator's free of a block in use): the host waits for every stream there.
- Loaders: `HostLoader` (torchvision's DataLoader: the host waits for a worker, the batch's copy is the
  loop's `.to(device, non_blocking=True)` on the current stream), `WorkerLoader` (workers that produce in
  the background at their own rate), `CopyStreamLoader` (a prefetcher's non_blocking copies from pinned
  memory on a copy stream, the training stream waiting for each batch's event), `DeviceAugmentLoader`
  (`--loader fast`), `PrefetchingLoader` (DALI: its own stream, batches queued ahead, the next run queued
  at each `__next__`). `SimComm` queues a DDP-style all-reduce on a communication stream that the training
  stream waits for before backward returns.

Every piece of work is kept in `sim.work` with its label, stream, and start and end times, so a test can
say which work must fall in which span: `sim.busy(label, t0, t1)` is how much of it ran in [t0, t1].
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from effbench.run.runtime import Runtime

TRAIN = "train"
MODEL = "model"  # the label of the kernels real ops queue

aten = torch.ops.aten
_NO_KERNEL = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.lift_fresh.default}


@dataclass(frozen=True)
class OpCost:
    """What each aten op of the real code costs: host time to launch it, device time on the current stream."""

    host_s: float = 10e-6
    device_s: float = 10e-6
    per_op: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Overrides by the op's name (`"aten.convolution"`): (host_s, device_s)."""
    device_wide_on: frozenset[str] = frozenset()
    """Ops after which the host waits for the whole device (an implicit cudaDeviceSynchronize)."""
    event_host_s: float = 2e-6
    """Host time of recording an event (cudaEventRecord)."""

    def of(self, name: str) -> tuple[float, float]:
        return self.per_op.get(name, (self.host_s, self.device_s))


@dataclass
class Work:
    label: str
    stream: str
    queued_at: float
    start: float
    end: float


class SimEvent:
    """torch.cuda.Event: fires when its stream reaches the point where it was recorded."""

    def __init__(self, sim: SimDevice, time_: float | None = None) -> None:
        self.sim, self.time = sim, time_

    def record(self, stream: SimStream | None = None) -> None:
        name = (stream or self.sim.current_stream()).name
        self.sim.host(self.sim.cost.event_host_s)
        self.time = max(self.sim.now, self.sim.tails.get(name, 0.0))
        self.sim.tails[name] = self.time

    def query(self) -> bool:
        return self.time is not None and self.sim.now >= self.time

    def synchronize(self) -> None:
        assert self.time is not None, "an event must be recorded before it is waited for"
        self.sim.now = max(self.sim.now, self.time)

    def elapsed_time(self, end: SimEvent) -> float:
        """Milliseconds from this event to `end`; both must have fired (CUDA raises otherwise)."""
        if not (self.query() and end.query()):
            raise RuntimeError("elapsed_time of an event the device has not reached (cudaErrorNotReady)")
        return (end.time - self.time) * 1000.0  # type: ignore[operator]


@dataclass
class SimStream:
    """torch.cuda.Stream: `synchronize`, `wait_event`, `wait_stream`, `record_event`."""

    sim: SimDevice
    name: str

    def synchronize(self) -> None:
        self.sim.now = max(self.sim.now, self.sim.tails.get(self.name, 0.0))

    def wait_event(self, event: SimEvent) -> None:
        assert event.time is not None
        self.sim.tails[self.name] = max(self.sim.tails.get(self.name, 0.0), event.time)

    def record_event(self, event: SimEvent | None = None) -> SimEvent:
        event = event or SimEvent(self.sim)
        event.record(self)
        return event

    def wait_stream(self, other: SimStream) -> None:
        self.wait_event(other.record_event())


@dataclass
class SimDevice:
    cost: OpCost = field(default_factory=OpCost)
    now: float = 0.0
    """The host's clock, virtual seconds."""
    tails: dict[str, float] = field(default_factory=lambda: {TRAIN: 0.0})
    """When each stream's last queued work ends."""
    work: list[Work] = field(default_factory=list)
    _current: str = TRAIN
    _quiet: int = 0

    # --- the host ---------------------------------------------------------------------------------
    def host(self, seconds: float) -> None:
        """Host work (Python, a decode the host waits for): the host's clock moves on."""
        self.now += seconds

    # --- queuing --------------------------------------------------------------------------------
    def kernel(
        self, label: str, seconds: float, *, stream: str | None = None, after: tuple[SimEvent, ...] = ()
    ) -> Work:
        """Queue `seconds` of device work on `stream` (the current one by default); the host goes on at once."""
        name = stream or self._current
        start = max([self.now, self.tails.get(name, 0.0), *(e.time for e in after if e.time is not None)])
        w = Work(label, name, self.now, start, start + seconds)
        self.tails[name] = w.end
        self.work.append(w)
        return w

    def record(self, stream: str | None = None) -> SimEvent:
        """An event recorded on `stream` (the current one): it fires when the stream's work so far ends."""
        event = SimEvent(self)
        event.record(SimStream(self, stream or self._current))
        return event

    # --- torch.cuda's slice (run/timing.device_clock) ---------------------------------------------
    def current_stream(self, device: Any = None) -> SimStream:
        return SimStream(self, self._current)

    def Stream(self, name: str) -> SimStream:  # noqa: N802 - torch.cuda.Stream's name
        self.tails.setdefault(name, 0.0)
        return SimStream(self, name)

    @contextlib.contextmanager
    def stream(self, s: SimStream) -> Iterator[None]:
        previous, self._current = self._current, s.name
        try:
            yield
        finally:
            self._current = previous

    def Event(self, enable_timing: bool = False) -> SimEvent:  # noqa: N802 - torch.cuda.Event's name
        return SimEvent(self)

    def synchronize(self, device: Any = None) -> None:
        """torch.cuda.synchronize(device): the host waits for every stream."""
        self.now = max([self.now, *self.tails.values()])

    def sync_stream(self, stream: str = TRAIN) -> None:
        SimStream(self, stream).synchronize()

    # --- running real code on it ------------------------------------------------------------------
    def runtime(self) -> Runtime:
        """A Runtime whose tensors live on the CPU and whose streams and events are this device's."""
        return Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None, device_api=self)

    @contextlib.contextmanager
    def untracked(self) -> Iterator[None]:
        """Ops here are the simulator's own bookkeeping (making a batch's tensor): no host or device cost."""
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """While active: `time.perf_counter` reads `sim.now`; every aten op costs `cost` and queues its kernel
        on the current stream; reads of a tensor's value wait for the current stream."""
        sim = self
        perf_counter = time.perf_counter
        reads = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu", "numpy")}

        def waiting(read: Callable[..., Any]) -> Callable[..., Any]:
            def read_after_stream(t: torch.Tensor, *a: Any, **k: Any) -> Any:
                if not sim._quiet:
                    sim.current_stream().synchronize()
                return read(t, *a, **k)

            return read_after_stream

        time.perf_counter = lambda: sim.now
        for name, read in reads.items():
            setattr(torch.Tensor, name, waiting(read))
        try:
            with _QueueOps(self):
                yield
        finally:
            time.perf_counter = perf_counter
            for name, read in reads.items():
                setattr(torch.Tensor, name, read)

    # --- reading the log ------------------------------------------------------------------------
    def busy(self, label: str, t0: float, t1: float) -> float:
        """Seconds of the work labelled `label` that ran inside [t0, t1]."""
        return sum(max(0.0, min(w.end, t1) - max(w.start, t0)) for w in self.work if w.label == label)

    def total(self, label: str) -> float:
        return sum(w.end - w.start for w in self.work if w.label == label)

    def idle(self, stream: str, t0: float, t1: float) -> float:
        """Seconds in [t0, t1] when `stream` ran nothing."""
        spans = sorted((max(w.start, t0), min(w.end, t1)) for w in self.work if w.stream == stream)
        busy, reach = 0.0, t0
        for a, b in spans:
            a = max(a, reach)
            if b > a:
                busy += b - a
                reach = b
        return (t1 - t0) - busy


class _QueueOps(TorchDispatchMode):
    """Every aten op of the real code: its host cost, its kernel on the current stream, the reads' waits."""

    def __init__(self, sim: SimDevice) -> None:
        super().__init__()
        self.sim = sim

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        sim = self.sim
        if sim._quiet:
            return func(*args, **(kwargs or {}))
        if func is aten._local_scalar_dense.default:  # .item(), float(), bool(), int(): a read of the value
            sim.current_stream().synchronize()
            return func(*args, **(kwargs or {}))
        if func.namespace != "aten":  # the profiler's record_function ranges and other host-side ops
            return func(*args, **(kwargs or {}))
        name = f"aten.{func._schema.name.split('::')[-1]}"
        host_s, device_s = sim.cost.of(name)
        sim.host(host_s)
        if not func.is_view and func not in _NO_KERNEL and device_s > 0:
            sim.kernel(MODEL, device_s)
        if name in sim.cost.device_wide_on:
            sim.synchronize()
        return func(*args, **(kwargs or {}))


# --- batches and loaders -------------------------------------------------------------------------------


class SimTensor:
    """A batch of images as the loop sees it: `.to(device)` queues its copy on the current stream (unless it
    is on the device already, or its copy was made on a copy stream) and returns the real tensor."""

    def __init__(self, sim: SimDevice, n: int, *, on_device: bool, copy_s: float = 0.0, ready: SimEvent | None = None):
        self.sim, self.n, self.on_device, self.copy_s, self.ready = sim, n, on_device, copy_s, ready
        self.shape = (n, 3, 8, 8)

    def to(self, *_a: Any, **_k: Any) -> torch.Tensor:
        if not self.on_device:
            self.sim.kernel("h2d", self.copy_s, after=(self.ready,) if self.ready else ())
        elif self.ready is not None:  # made on another stream: the current one waits for its event
            self.sim.current_stream().wait_event(self.ready)
        with self.sim.untracked():
            return torch.randn(self.shape, generator=torch.Generator().manual_seed(self.n))


def labels(sim: SimDevice, n: int) -> torch.Tensor:
    with sim.untracked():
        return torch.zeros(n, dtype=torch.int64)


class HostLoader:
    """torchvision's DataLoader shape: each batch costs `host_s` of host time (the wait for a worker) and
    arrives in pinned host memory; the copy (`copy_s`) is queued by the loop's `.to(device)`."""

    def __init__(self, sim: SimDevice, n_batches: int, *, host_s: float, copy_s: float, batch: int = 4):
        self.sim, self.n, self.host_s, self.copy_s, self.batch = sim, n_batches, host_s, copy_s, batch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        for _ in range(self.n):
            self.sim.host(self.host_s)
            yield SimTensor(self.sim, self.batch, on_device=False, copy_s=self.copy_s), labels(self.sim, self.batch)


class WorkerLoader:
    """DataLoader workers producing in the background: batch i is ready on the host at `start + (i+1) *
    every_s` (the workers' rate, started with the iterator); next() waits until then. The copy is the loop's."""

    def __init__(self, sim: SimDevice, n_batches: int, *, every_s: float, copy_s: float, batch: int = 4):
        self.sim, self.n, self.every_s, self.copy_s, self.batch = sim, n_batches, every_s, copy_s, batch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        start = self.sim.now
        for i in range(self.n):
            self.sim.now = max(self.sim.now, start + (i + 1) * self.every_s)
            yield SimTensor(self.sim, self.batch, on_device=False, copy_s=self.copy_s), labels(self.sim, self.batch)


class CopyStreamLoader:
    """A prefetcher (timm's PrefetchLoader, NVIDIA's DLE data_prefetcher): each batch's non_blocking copy
    from pinned memory is queued on a copy stream one batch ahead; the training stream waits for its event
    when the loop takes the batch."""

    def __init__(self, sim: SimDevice, n_batches: int, *, host_s: float, copy_s: float, batch: int = 4):
        self.sim, self.n, self.host_s, self.copy_s, self.batch = sim, n_batches, host_s, copy_s, batch
        self.copy_stream = sim.Stream("copy")

    def __len__(self) -> int:
        return self.n

    def _next(self) -> SimTensor:
        self.sim.host(self.host_s)
        with self.sim.stream(self.copy_stream):
            self.sim.kernel("h2d", self.copy_s)
            ready = self.sim.record()
        return SimTensor(self.sim, self.batch, on_device=True, ready=ready)

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        ahead = self._next()
        for i in range(self.n):
            batch, ahead = ahead, (self._next() if i + 1 < self.n else None)
            yield batch, labels(self.sim, self.batch)


class DeviceAugmentLoader:
    """`--loader fast`'s shape: uint8 images already on the device; `__next__` queues `augment_s` of crop,
    flip and normalize kernels on the current stream and hands the result over at once."""

    def __init__(self, sim: SimDevice, n_batches: int, *, augment_s: float, batch: int = 4):
        self.sim, self.n, self.augment_s, self.batch = sim, n_batches, augment_s, batch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        for _ in range(self.n):
            self.sim.kernel("augment", self.augment_s)
            yield SimTensor(self.sim, self.batch, on_device=True), labels(self.sim, self.batch)


class PrefetchingLoader:
    """DALI's shape: decode (`decode_s` per batch) on DALI's own stream, `depth` batches queued ahead
    (prefetch_queue_depth), the next run queued at each `__next__`; the batch handed over is copied
    (`copy_s`) on the current stream after its decode's event (DALI's feed_ndarray)."""

    STREAM = "dali"

    def __init__(self, sim: SimDevice, n_batches: int, *, decode_s: float, copy_s: float = 0.0, depth: int = 2,
                 batch: int = 4):  # fmt: skip
        self.sim, self.n, self.decode_s, self.copy_s, self.depth, self.batch = (
            sim, n_batches, decode_s, copy_s, depth, batch
        )  # fmt: skip

    def __len__(self) -> int:
        return self.n

    def _queue(self) -> SimEvent:
        self.sim.kernel("decode", self.decode_s, stream=self.STREAM)
        return self.sim.record(self.STREAM)

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        ready = [self._queue() for _ in range(min(self.depth, self.n))]  # the pipeline's prefetch at build
        for i in range(self.n):
            if i + self.depth < self.n:
                ready.append(self._queue())  # DALI schedules the next run at __next__
            self.sim.kernel("h2d", self.copy_s, after=(ready[i],))  # feed_ndarray on the current stream
            yield SimTensor(self.sim, self.batch, on_device=True), labels(self.sim, self.batch)


class SimComm:
    """DDP's gradient all-reduce in the shape of its reducer: after the backward's kernels, an all-reduce of
    `seconds` on the communication stream (after an event on the training stream), and the training stream
    waits for its end before backward returns (`work.wait()`). Installed as a hook on a parameter's
    gradient, so the real backward triggers it."""

    STREAM = "nccl"

    def __init__(self, sim: SimDevice, seconds: float) -> None:
        self.sim, self.seconds = sim, seconds

    def __call__(self, grad: torch.Tensor) -> None:
        sim = self.sim
        ready = sim.record()
        sim.kernel("allreduce", self.seconds, stream=self.STREAM, after=(ready,))
        sim.current_stream().wait_event(sim.record(self.STREAM))


@dataclass
class SimData:
    """The data object train_epochs reads (data.build.DataBundle's fields that it uses)."""

    train: Any
    val: Any
    steps_per_epoch: int

    def set_epoch(self, _epoch: int) -> None:
        pass


def sim_model(blocks: int = 8, classes: int = 10) -> torch.nn.Module:
    """A real CNN on the simulator's 3x8x8 batches: `blocks` of conv, batch norm and ReLU, then a head."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, 4, 3, padding=1)]
    for _ in range(blocks):
        layers += [torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU()]
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, classes)]
    return torch.nn.Sequential(*layers)

"""A simulated asynchronous device: CUDA's execution model in virtual seconds, for the timers' tests.

On a CPU every op has finished when it returns, so a timer that waits for the wrong work (or for none)
reads right there and wrong on a GPU. This fake keeps the one property that matters: the host only
*queues* work, and a clock read sees queued work only after a wait for the stream that holds it.

    sim = SimDevice()
    clock = sim.clock()                      # a run.timing.DeviceClock reading virtual time
    sim.kernel("forward", 0.002)             # queued on the training stream; the host goes on at once
    clock.sync_stream()                      # the host waits until the training stream is idle

Model (docs/gpu-truth.md, "The simulator"):
- Time is virtual: `sim.now` is the host's clock; it moves only through `host(seconds)` (host work) and
  the waits. Nothing sleeps, so the tests are exact and take no wall time.
- A stream runs its work in the order queued; each piece starts when the host has queued it, the stream's
  previous piece has ended and the events it waits for have fired (`after`), and takes its duration.
- `synchronize()` is torch.cuda.synchronize(device): the host waits for every stream. `sync_stream(s)` is
  `torch.cuda.current_stream().synchronize()`: for one stream. Events: `record(stream)`, and `after=` a
  list of them, as cudaStreamWaitEvent.
- `item()` / `tolist()` on a real tensor wait for the training stream while `sim.patch_tensor_reads()`
  is active: the value the loop reads was produced there (losses, correct counts).
- `copy_to_device(seconds)` is a host-to-device copy queued on the training stream; `SimTensor.to()` does
  it, so a loop's `x.to(device, non_blocking=True)` queues it.
- `PrefetchingLoader` is DALI's shape: its own stream, `depth` batches queued ahead, the next run queued at
  each `__next__` (DALI 2.4 schedules the next run there), and the handed-over batch copied on the
  training stream after the event of its decode (DALI's feed_ndarray on torch's current stream).
  `HostLoader` hands host batches over (torchvision's DataLoader: the copy is the loop's);
  `DeviceAugmentLoader` queues augmentation kernels on the training stream at `__next__` (`--loader fast`).

Every piece of work is kept in `sim.work` with its label, stream, and start and end times, so a test can
say which work must fall in which span: `sim.busy(label, t0, t1)` is how much of that work ran in [t0, t1].
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from effbench.run.timing import DeviceClock

TRAIN = "train"


@dataclass
class Work:
    label: str
    stream: str
    queued_at: float
    start: float
    end: float


@dataclass
class Event:
    time: float


@dataclass
class SimDevice:
    now: float = 0.0
    """The host's clock, virtual seconds."""
    tails: dict[str, float] = field(default_factory=lambda: {TRAIN: 0.0})
    """When each stream's last queued work ends."""
    work: list[Work] = field(default_factory=list)

    # --- the host ---------------------------------------------------------------------------------
    def host(self, seconds: float) -> None:
        """Host work (Python, a decode in a worker the host waits for): the host's clock moves on."""
        self.now += seconds

    # --- queuing --------------------------------------------------------------------------------
    def kernel(self, label: str, seconds: float, *, stream: str = TRAIN, after: list[Event] = ()) -> Work:  # type: ignore[assignment]
        """Queue `seconds` of device work on `stream`; the host goes on at once."""
        start = max([self.now, self.tails.get(stream, 0.0), *(e.time for e in after)])
        w = Work(label, stream, self.now, start, start + seconds)
        self.tails[stream] = w.end
        self.work.append(w)
        return w

    def copy_to_device(self, seconds: float, label: str = "h2d") -> Work:
        """A host-to-device copy from pinned memory (non_blocking): queued on the training stream."""
        return self.kernel(label, seconds)

    def record(self, stream: str = TRAIN) -> Event:
        """An event recorded on `stream`: it fires when the stream's work queued so far ends."""
        return Event(self.tails.get(stream, 0.0))

    # --- waits ----------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """torch.cuda.synchronize(device): the host waits for every stream."""
        self.now = max([self.now, *self.tails.values()])

    def sync_stream(self, stream: str = TRAIN) -> None:
        """stream.synchronize(): the host waits for one stream."""
        self.now = max(self.now, self.tails.get(stream, 0.0))

    def clock(self) -> DeviceClock:
        """effbench's seam (run.timing.DeviceClock) on this device."""
        return DeviceClock(now=lambda: self.now, sync_stream=self.sync_stream, sync_device=self.synchronize)

    @contextlib.contextmanager
    def patch_tensor_reads(self) -> Iterator[None]:
        """`.item()` and `.tolist()` of real tensors wait for the training stream, as a read of a device
        value does (it is copied to the host after the work that made it)."""
        item, tolist = torch.Tensor.item, torch.Tensor.tolist

        def waiting(read: Any) -> Any:
            def read_after_stream(t: torch.Tensor, *a: Any, **k: Any) -> Any:
                self.sync_stream()
                return read(t, *a, **k)

            return read_after_stream

        torch.Tensor.item, torch.Tensor.tolist = waiting(item), waiting(tolist)  # type: ignore[method-assign]
        try:
            yield
        finally:
            torch.Tensor.item, torch.Tensor.tolist = item, tolist  # type: ignore[method-assign]

    # --- reading the log ------------------------------------------------------------------------
    def busy(self, label: str, t0: float, t1: float) -> float:
        """Seconds of the work labelled `label` that ran inside [t0, t1]."""
        return sum(max(0.0, min(w.end, t1) - max(w.start, t0)) for w in self.work if w.label == label)

    def total(self, label: str) -> float:
        return sum(w.end - w.start for w in self.work if w.label == label)


class SimTensor:
    """A batch of images as the loop sees it: `.to(device)` queues a copy unless it is on the device."""

    def __init__(self, sim: SimDevice, n: int, *, on_device: bool, copy_s: float = 0.0, ready: Event | None = None):
        self.sim, self.shape, self.on_device, self.copy_s, self.ready = sim, (n, 3, 8, 8), on_device, copy_s, ready

    def to(self, *_a: Any, **_k: Any) -> SimTensor:
        if self.on_device:
            return self
        self.sim.kernel("h2d", self.copy_s, after=[self.ready] if self.ready else [])
        return SimTensor(self.sim, self.shape[0], on_device=True)


def labels(n: int) -> torch.Tensor:
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
            yield SimTensor(self.sim, self.batch, on_device=False, copy_s=self.copy_s), labels(self.batch)


class DeviceAugmentLoader:
    """`--loader fast`'s shape: uint8 images already on the device; `__next__` queues `augment_s` of crop,
    flip and normalize kernels on the training stream and hands the result over at once."""

    def __init__(self, sim: SimDevice, n_batches: int, *, augment_s: float, batch: int = 4):
        self.sim, self.n, self.augment_s, self.batch = sim, n_batches, augment_s, batch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        for _ in range(self.n):
            self.sim.kernel("augment", self.augment_s)
            yield SimTensor(self.sim, self.batch, on_device=True), labels(self.batch)


class PrefetchingLoader:
    """DALI's shape: decode (`decode_s` per batch) on DALI's own stream, `depth` batches queued ahead
    (prefetch_queue_depth), the next run queued at each `__next__`; the batch handed over is copied
    (`copy_s`) on the training stream after its decode's event."""

    STREAM = "dali"

    def __init__(self, sim: SimDevice, n_batches: int, *, decode_s: float, copy_s: float = 0.0, depth: int = 2,
                 batch: int = 4):  # fmt: skip
        self.sim, self.n, self.decode_s, self.copy_s, self.depth, self.batch = (
            sim, n_batches, decode_s, copy_s, depth, batch
        )  # fmt: skip

    def __len__(self) -> int:
        return self.n

    def _queue(self, i: int) -> Event:
        self.sim.kernel("decode", self.decode_s, stream=self.STREAM)
        return self.sim.record(self.STREAM)

    def __iter__(self) -> Iterator[tuple[SimTensor, torch.Tensor]]:
        ready = [self._queue(i) for i in range(min(self.depth, self.n))]  # the pipeline's prefetch at build
        for i in range(self.n):
            if i + self.depth < self.n:
                ready.append(self._queue(i + self.depth))  # DALI schedules the next run at __next__
            self.sim.kernel("h2d", self.copy_s, after=[ready[i]])  # feed_ndarray on the current stream
            yield SimTensor(self.sim, self.batch, on_device=True), labels(self.batch)


class SimModel:
    """A model whose forward queues `forward_s` on the training stream and returns real logits."""

    def __init__(self, sim: SimDevice, forward_s: float, classes: int = 3, label: str = "forward"):
        self.sim, self.forward_s, self.classes, self.label = sim, forward_s, classes, label

    def __call__(self, x: Any) -> torch.Tensor:
        self.sim.kernel(self.label, self.forward_s)
        return torch.zeros(x.shape[0], self.classes)

    def train(self, mode: bool = True) -> SimModel:
        return self

    def eval(self) -> SimModel:
        return self


class SimStep:
    """train.TrainStep's shape: the loop's `step_fn(batch)`; queues forward, backward and optimizer
    kernels (`compute_s` in all, on the training stream) after `host_s` of host time, and returns the
    loss and correct count as tensors and no loss scaler (None), as TrainStep does in fp32."""

    def __init__(self, sim: SimDevice, compute_s: float, host_s: float = 0.0):
        self.sim, self.compute_s, self.host_s = sim, compute_s, host_s

    def __call__(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y = batch
        x = x.to("cuda", non_blocking=True)  # TrainStep's own _to_device: a no-op for a delivered batch
        self.sim.host(self.host_s)
        for _phase in ("forward", "backward", "optimizer"):
            self.sim.kernel("compute", self.compute_s / 3)
        return torch.tensor(1.0), torch.tensor(0), int(y.shape[0]), None


@dataclass
class SimData:
    """The data object train_epochs reads (data.build.DataBundle's fields that it uses)."""

    train: Any
    val: Any
    steps_per_epoch: int

    def set_epoch(self, _epoch: int) -> None:
        pass

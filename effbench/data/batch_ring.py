"""DataLoader batches that stay in one block of shared memory: workers write each batch into a slot of a ring
the training process allocated once, and send back the slot's number, not the pixels.

torch's own path (default_collate in a worker) makes a fresh shared-memory segment for every batch: the
worker creates it and faults in its zeroed pages, the descriptor travels over a socket, the training process
maps it and faults the pages in again, and both unmap it. For batches of 32 squares of 256 px that cost 0.31
ms of worker CPU and 0.095 ms of the training process's per image on a 2-core VM; writing into a ring cost
0.04 and 0.01 (issue 37, docs/performance-history.md). On the CPU, where the workers and the training share the cores,
that is 10% of the fast loader's throughput.

Why a slot is never written while it is read. The DataLoader takes batch k from its batch sampler only when
it dispatches it, in order (a map-style dataset keeps every worker active), and dispatches one batch for each
batch it returns, after priming prefetch_factor x workers of them (torch/utils/data/dataloader.py:
_try_put_index, called from _reset and _process_data; a persistent worker's reset first drains every batch
still in flight). So while the caller holds batch k, batches k+1 .. k+P*W are in flight, and with P*W + 1
slots batch k's slot comes round again only for batch k+P*W+1, dispatched when the caller asks for batch k+1.
The caller must therefore be done with a slot's pixels before it asks for the next batch: DeviceAugmentLoader
copies them out (its recipe's first step makes a new tensor) before it yields.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from effbench.errors import EffbenchError

# The DataLoader's prefetch_factor where a ring is used: the ring's size depends on it, so it is set, not defaulted.
PREFETCH_FACTOR = 2
# Where torch's file-descriptor sharing creates its segments (shm_open) on Linux.
SHM = Path("/dev/shm")


def ring_slots(workers: int, prefetch_factor: int = PREFETCH_FACTOR) -> int:
    """Slots enough for every batch in flight (prefetch_factor per worker) and the one the caller holds."""
    return workers * prefetch_factor + 1


def check_room(nbytes: int, shm: Path, what: str) -> None:
    """An EffbenchError, before any page is touched, when `shm` has less room than the ring: writing past a
    full /dev/shm kills the process with SIGBUS, no message (the run's preflight checks this too, check_shm;
    this also covers callers without it and a /dev/shm that filled since)."""
    from effbench.fmt import GIB
    from effbench.system.preflight import fix_shm, shm_free_bytes

    free = shm_free_bytes(shm)
    if free is not None and free < nbytes:
        raise EffbenchError(
            "--workers",
            f"{shm} has {free / GIB:.2f} GiB free but the fast loader's batch ring of {what} needs "
            f"{nbytes / GIB:.2f} GiB; {fix_shm(max(1, math.ceil(4 * nbytes / GIB)))}",
        )


@dataclass(frozen=True)
class SlotRef:
    """What a worker sends instead of a batch: the slot it wrote and how many images it holds."""

    slot: int
    count: int


class BatchRing:
    """`slots` batches of up to `batch_size` uint8 images, height x width x channels each, in shared memory.

    Allocated in the training process before the workers start; each worker maps the same memory when the
    collate function holding the ring reaches it (torch's shared-memory pickling, a file descriptor)."""

    def __init__(self, slots: int, batch_size: int, shape: tuple[int, int, int], shm: Path = SHM) -> None:
        if slots < 1 or batch_size < 1:
            raise ValueError(f"a ring needs at least one slot and one image per batch, not {slots} x {batch_size}")
        self.slots = slots
        check_room(slots * batch_size * math.prod(shape), shm, f"{slots} batches of {batch_size} at {shape[0]} px")
        self.buffer = torch.empty((slots, batch_size, *shape), dtype=torch.uint8).share_memory_()

    @property
    def nbytes(self) -> int:
        return self.buffer.numel()

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` is a view of the ring's memory (and so would change under its reader)."""
        return tensor.untyped_storage().data_ptr() == self.buffer.untyped_storage().data_ptr()

    def write(self, slot: int, images: Sequence[torch.Tensor]) -> SlotRef:
        """Copy C x H x W images (any strides) into `slot` as height x width x channels rows."""
        out = self.buffer[slot]
        if len(images) > out.shape[0]:
            raise ValueError(f"{len(images)} images do not fit a slot of {out.shape[0]}")
        want = (out.shape[3], *out.shape[1:3])
        for k, image in enumerate(images):
            if tuple(image.shape) != want:  # copy_ would broadcast a gray plane over three channels
                raise ValueError(f"an image of shape {tuple(image.shape)} does not fit a slot of {want} images")
            out[k].copy_(image.permute(1, 2, 0))
        return SlotRef(slot, len(images))

    def view(self, ref: SlotRef) -> torch.Tensor:
        """The slot's images as an (n, C, H, W) view with channels-last strides, as fast_images.collate_squares
        hands over its stacks. Valid until the caller asks the DataLoader for the next batch."""
        return self.buffer[ref.slot, : ref.count].permute(0, 3, 1, 2)


class SlottedBatches(Sampler[list[tuple[int, int]]]):
    """A batch sampler's batches with each index paired with its batch's slot: batch k goes to slot k mod slots
    (k counts from 0 in each iteration, as the DataLoader's dispatch does)."""

    def __init__(self, batches: Sampler[list[int]], slots: int) -> None:
        self.batches = batches
        self.slots = slots

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for k, batch in enumerate(self.batches):
            yield [(index, k % self.slots) for index in batch]


class SlotSamples(Dataset):
    """A per-sample dataset of (image or None, label, skipped paths) addressed by (index, slot): each sample
    carries its batch's slot to the collate function."""

    def __init__(self, inner: Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> tuple[Any, ...]:
        index, slot = key
        return (*self.inner[index], slot)


class RingCollate:
    """collate_samples into a ring: the readable images written into the batch's slot, the labels as a list
    (a tensor would be one more shared-memory segment), the skipped paths passed along."""

    def __init__(self, ring: BatchRing) -> None:
        self.ring = ring

    def __call__(self, samples: Sequence[tuple[Any, ...]]) -> tuple[Any, Any, tuple[str, ...]]:
        skipped = tuple(p for s in samples for p in s[2])
        kept = [s for s in samples if s[0] is not None]
        if not kept:
            return None, None, skipped
        ref = self.ring.write(samples[0][-1], [s[0] for s in kept])
        return ref, [int(s[1]) for s in kept], skipped

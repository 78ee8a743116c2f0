"""The `torchvision` loader: torch DataLoaders over per-sample datasets, with seeded sampling
(the samplers and SkipLog are shared with the `fast` loader for image files).

A swappable piece: build_data hands datasets here and gets back re-iterables of (images, labels)
CPU batches plus a set_epoch hook. Samples are (image or None, label, skipped paths); the collate
function drops the Nones and sends the skipped paths back with the batch, and SkipLog gathers
them in the training process, so counts need no memory shared with the worker processes.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.context import BaseContext
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, default_collate

from effbench.config import offset_seed

Batch = tuple[torch.Tensor, torch.Tensor]
# Examples of skipped files kept for the record; the count covers all of them.
SKIP_EXAMPLES = 5
# Imported once by the fork server, so that each worker forked from it starts with them loaded.
WORKER_PRELOAD = ("__main__", "torch", "torchvision.transforms.v2", "PIL.Image", "effbench.data.loaders",
                  "effbench.data.images", "effbench.data.fast_images", "effbench.data.cifar", "effbench.cli.app")  # fmt: skip


def worker_context(workers: int) -> BaseContext | None:
    """How loader workers start: from a fork server, not by forking the training process, whose copy would
    hold the locks its other threads (DALI, pin memory, queue feeders, OpenMP, CUDA) held at that instant
    with no thread to release them: workers died of SIGSEGV or hung. Started here, when the loaders are
    built, so its imports overlap building the model; each worker forks from it and gets its dataset
    pickled (CIFAR's arrays as shared memory: cifar.ArrayExamples). Cost and figures: docs/methodology.md."""
    if workers == 0:
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(WORKER_PRELOAD))
    forkserver.ensure_running()
    return ctx


@dataclass
class SkipLog:
    """Distinct unreadable files met so far, across epochs, splits and workers, and those the listing left out."""

    paths: set[str] = field(default_factory=set)
    reasons: dict[str, str] = field(default_factory=dict)
    """The reasons known without reading the file again: the listing's (images.ImageFiles)."""

    def refuse(self, refused: Mapping[str, str]) -> None:
        """Count the files the listing left out (a FIFO, a device, a link out of --data-dir) with their reasons."""
        self.paths.update(refused)
        self.reasons.update(refused)

    def stats(self) -> dict[str, Any]:
        from effbench.data.images import skip_reason

        examples = sorted(self.paths)[:SKIP_EXAMPLES]
        return {
            "corrupt_images_skipped": len(self.paths),
            "files_refused": len(self.reasons),
            "corrupt_image_examples": examples,
            "corrupt_image_reasons": {p: self.reasons.get(p) or skip_reason(p) for p in examples},
        }


class SeededRandomSampler(Sampler[int]):
    """A fresh permutation per epoch from (seed, epoch): DistributedSampler's scheme for one rank."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(offset_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.n, generator=g).tolist())


class ShardSampler(Sampler[int]):
    """Every world_size-th index from rank, in order, with no padding: each validation image is
    seen exactly once across ranks (ranks may differ by one batch, so sum totals, not batches)."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.indices = range(rank, n, world_size)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)


def collate_samples(samples: Sequence[tuple[Any, int, tuple[str, ...]]]) -> tuple[Any, Any, tuple[str, ...]]:
    """Stack the readable samples (default_collate, which writes straight into shared memory in a
    worker) and pass the skipped paths along."""
    skipped = tuple(p for s in samples for p in s[2])
    kept = [(s[0], s[1]) for s in samples if s[0] is not None]
    if not kept:
        return None, None, skipped
    images, labels = default_collate(kept)
    return images, labels, skipped


class CountingLoader:
    """Re-iterable over a DataLoader: yields (images, labels), logs skipped files on the way."""

    def __init__(self, loader: DataLoader, log: SkipLog) -> None:
        self.loader = loader
        self.log = log

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        for images, labels, skipped in self.loader:
            if skipped:
                self.log.paths.update(skipped)
            if images is not None:
                yield images, labels


@dataclass(frozen=True)
class LoaderOptions:
    batch_size: int
    workers: int
    seed: int
    rank: int = 0
    world_size: int = 1
    pin_memory: bool = False


def sample_loader(
    dataset: Dataset,
    sampler: Sampler[int],
    opts: LoaderOptions,
    *,
    drop_last: bool,
    collate: Callable[..., Any] = collate_samples,
    pin_memory: bool | None = None,
) -> DataLoader:
    """A DataLoader over a per-sample dataset whose workers send each batch in a shared-memory segment of its own
    (torch's path; the fast loader on the CPU uses batch_ring instead). `pin_memory` defaults to opts'."""
    # Workers draw their augmentation seeds from this generator; rank-offset so ranks augment differently.
    g = torch.Generator().manual_seed(offset_seed(opts.seed, opts.rank))
    return DataLoader(
        dataset,
        batch_size=opts.batch_size,
        sampler=sampler,
        num_workers=opts.workers,
        collate_fn=collate,
        pin_memory=opts.pin_memory if pin_memory is None else pin_memory,
        drop_last=drop_last,
        persistent_workers=opts.workers > 0,
        multiprocessing_context=worker_context(opts.workers),
        generator=g,
    )


def seeded_sampler(n: int, opts: LoaderOptions) -> Any:
    """The training sampler for n examples: a permutation per epoch from (seed, epoch), sharded
    over ranks by DistributedSampler (drop_last: every rank the same count) when world_size > 1."""
    if opts.world_size > 1:
        return DistributedSampler(
            range(n),
            num_replicas=opts.world_size,
            rank=opts.rank,
            shuffle=True,
            # it seeds seed + epoch (torch/utils/data/distributed.py:111): keep that below 2**64
            seed=opts.seed % 2**63,
            drop_last=True,  # type: ignore[arg-type]
        )
    return SeededRandomSampler(n, opts.seed)


def train_loader(dataset: Dataset, opts: LoaderOptions, log: SkipLog) -> tuple[CountingLoader, Any]:
    """(loader, sampler whose set_epoch reshuffles). Every batch holds exactly batch_size images."""
    sampler = seeded_sampler(len(dataset), opts)  # type: ignore[arg-type]
    return CountingLoader(sample_loader(dataset, sampler, opts, drop_last=True), log), sampler


def val_loader(dataset: Dataset, opts: LoaderOptions, log: SkipLog) -> CountingLoader:
    n = len(dataset)  # type: ignore[arg-type]
    sampler = ShardSampler(n, opts.rank, opts.world_size)
    return CountingLoader(sample_loader(dataset, sampler, opts, drop_last=False), log)

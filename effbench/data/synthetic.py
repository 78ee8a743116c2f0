"""Synthetic batches already on the training device: measures the model with no input pipeline.

A few distinct batches are generated once and replayed, so a step costs no host work, no copy
and no allocation; the data time this leaves in the report is the loop's own overhead.

The labels are random, so nothing about an image predicts its label. Validation runs on batches of its own,
made from a generator seed no training pool uses (val_seed), never on the batches the model trained on:
replaying those read as a top-1 of 0.95 after 20 steps of memorising them (issue 34), while on images it never
saw a model can only be right by chance, 1 in num_classes, and the reports say so (datasets.chance_note).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# A CIFAR-sized epoch (50,000 training images, Krizhevsky 2009) for both shapes, so an epoch of either takes
# the same number of steps; --max-steps caps it. The classes are the shape's (effbench/datasets.py).
EPOCH_IMAGES = 50_000
NUM_CLASSES = 100  # --dataset synthetic's (CIFAR-100's); synthetic-imagenet has 1,000
# Distinct batches in the pool: more than one so no step sees the previous step's input, few
# enough that the pool costs little device memory. Validation generates VAL_BATCHES of its own.
POOL_BATCHES = 4
VAL_BATCHES = 2
# Validation's generator seeds start this far past the training pools' (offset_seed(seed, rank)): no rank of any
# job (a world far smaller than a million processes) trains on the stream another rank validates on.
VAL_SEED_OFFSET = 1_000_003

Batch = tuple[torch.Tensor, torch.Tensor]


class CycledBatches:
    """Re-iterable: each pass yields `steps` batches, cycling through the pool."""

    def __init__(self, pool: list[Batch], steps: int) -> None:
        self.pool = pool
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Batch]:
        for i in range(self.steps):
            yield self.pool[i % len(self.pool)]


class GeneratedBatches:
    """Re-iterable held-out batches: each pass makes the same `batches` batches from a generator seeded afresh
    with `seed`, one at a time, so validation holds no pool of its own in device memory between passes."""

    def __init__(
        self, batches: int, batch_size: int, image_size: int, device: torch.device, seed: int, num_classes: int
    ) -> None:
        self.batches, self.batch_size, self.image_size = batches, batch_size, image_size
        self.device, self.seed, self.num_classes = device, seed, num_classes

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[Batch]:
        g = torch.Generator(device=self.device).manual_seed(self.seed)
        shape = (self.batch_size, 3, self.image_size, self.image_size)
        for _ in range(self.batches):
            images = torch.randn(shape, generator=g, device=self.device, dtype=torch.float32)
            labels = torch.randint(0, self.num_classes, (self.batch_size,), generator=g, device=self.device)
            yield images, labels


def make_pool(
    batch_size: int, image_size: int, device: torch.device, seed: int, num_classes: int = NUM_CLASSES
) -> list[Batch]:
    g = torch.Generator(device=device).manual_seed(seed)
    images = torch.randn(
        (POOL_BATCHES, batch_size, 3, image_size, image_size), generator=g, device=device, dtype=torch.float32
    )
    labels = torch.randint(0, num_classes, (POOL_BATCHES, batch_size), generator=g, device=device, dtype=torch.int64)
    return [(images[i], labels[i]) for i in range(POOL_BATCHES)]


def steps_per_epoch(batch_size: int, world_size: int) -> int:
    """As a DistributedSampler with drop_last splits a 50,000-image epoch over the ranks."""
    return (EPOCH_IMAGES // world_size) // batch_size

"""Synthetic batches already on the training device: measures the model with no input pipeline.

A few distinct batches are generated once and replayed, so a step costs no host work, no copy
and no allocation; the data time this leaves in the report is the loop's own overhead.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# A CIFAR-sized epoch (50,000 training images, Krizhevsky 2009) for both shapes, so an epoch of either takes
# the same number of steps; --max-steps caps it. The classes are the shape's (effbench/datasets.py).
EPOCH_IMAGES = 50_000
NUM_CLASSES = 100  # --dataset synthetic's (CIFAR-100's); synthetic-imagenet has 1,000
# Distinct batches in the pool: more than one so no step sees the previous step's input, few
# enough that the pool costs little device memory. Validation replays the first two.
POOL_BATCHES = 4
VAL_BATCHES = 2

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

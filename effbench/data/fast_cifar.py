"""The `fast` CIFAR loader: the whole split as one uint8 tensor on the training device.

Decoded once (CIFAR-10's 50,000 training images are 150 MiB as uint8), then each batch is a slice
of a seeded permutation, augmented on the device by effbench.data.augment: no per-sample Python,
no worker processes, no host-to-device copy per step (airbench's design, KellerJordan/cifar10-airbench).

Sharding follows DistributedSampler(shuffle=True, drop_last=True): every rank draws the same
permutation from (seed, epoch), keeps every world_size-th index from its rank, and truncates to the
same number of full batches. Validation: every world_size-th image from the rank, in file order,
last batch short, no padding (each image seen once over the ranks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from effbench.config import offset_seed
from effbench.data import augment
from effbench.data.augment import stream_seed
from effbench.recipes import Recipe

Batch = tuple[torch.Tensor, torch.Tensor]


def shard_indices(
    n: int, perm: torch.Tensor | None, rank: int, world_size: int, batch_size: int, *, drop_last: bool
) -> torch.Tensor:
    """This rank's indices for one pass: `perm` (or file order) interleaved over ranks,
    truncated to whole batches when drop_last."""
    order = perm if perm is not None else torch.arange(n)
    if drop_last:
        per_rank = n // world_size
        mine = order[: per_rank * world_size][rank::world_size]
        return mine[: (per_rank // batch_size) * batch_size]
    return order[rank::world_size]


class DeviceArrayLoader:
    """Re-iterable batches of (float32 NCHW normalized, int64 labels), already on the device.

    `prepare(uint8 batch, generator)` turns a slice of the stored images into the model's input;
    the generator lives on the device and is reseeded by set_epoch from (seed, rank, epoch).
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        prepare: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
        *,
        batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        train: bool,
    ) -> None:
        assert images.dtype == torch.uint8 and images.ndim == 4 and len(images) == len(labels)
        self.images = images
        self.labels = labels
        self.prepare = prepare
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.train = train
        self.epoch = 0
        self.generator = torch.Generator(device=images.device)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.generator.manual_seed(stream_seed(self.seed, self.rank, epoch))

    def epoch_indices(self) -> torch.Tensor:
        """This rank's image indices for the current epoch, in batch order (CPU int64)."""
        n = len(self.labels)
        perm = None
        if self.train:  # the same permutation on every rank, as DistributedSampler draws it
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(offset_seed(self.seed, self.epoch)))
        return shard_indices(n, perm, self.rank, self.world_size, self.batch_size, drop_last=self.train)

    def __len__(self) -> int:
        n = len(self.labels)
        if self.train:
            return (n // self.world_size) // self.batch_size
        return -(-len(range(self.rank, n, self.world_size)) // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        idx = self.epoch_indices().to(self.images.device)
        for start in range(0, len(idx), self.batch_size):
            with augment.one_host_thread(self.images.device):
                i = idx[start : start + self.batch_size]
                batch = self.prepare(self.images[i], self.generator), self.labels[i]
            yield batch


def cifar_recipe(
    recipe: Recipe, *, train: bool, channels_last: bool
) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """`prepare` for 32 px uint8 CIFAR batches: the recipe's augmentation, batched (the torchvision
    loader builds the same recipe per sample in effbench.data.transforms).

    seed: RandomCrop(32, padding=4) + flip, Normalize, then (another size) the bilinear upscale;
    imagenet: RandomResizedCrop straight to the size + flip, Normalize; none: Normalize (+ upscale).
    Validation: Normalize (+ upscale).
    """
    assert recipe.kind == "cifar"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    size, mean, std = recipe.image_size, recipe.mean, recipe.std

    def prepare(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if train and recipe.crop == "random-resized":
            if batch.device.type == "cpu":  # per image, uint8 antialiased (as PIL resizes the crop)
                x = augment.random_resized_crop_flip_uint8(batch, size, generator)
            else:
                x = augment.random_resized_crop_flip(batch.to(torch.float32), size, generator)
            return augment.normalize(x, mean, std, memory_format=fmt)
        if train and recipe.crop == "random":
            batch = augment.random_crop_flip(batch, recipe.pad, generator)
        x = augment.normalize(batch, mean, std, memory_format=fmt)
        return augment.resize(x, size).contiguous(memory_format=fmt)

    return prepare


def to_device_uint8(images_hwc: np.ndarray, device: torch.device) -> torch.Tensor:
    """N x H x W x 3 uint8 (the reader's layout) -> N x 3 x H x W uint8 on `device`, contiguous."""
    return torch.from_numpy(images_hwc).to(device).permute(0, 3, 1, 2).contiguous()

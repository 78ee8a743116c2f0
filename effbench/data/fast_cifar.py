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
from effbench.data.transforms import CIFAR_PAD, CIFAR_SIZE
from effbench.datasets import CIFAR_MEAN, CIFAR_STD, IMAGENET_MEAN, IMAGENET_STD

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
    image_size: int, *, train: bool, channels_last: bool
) -> tuple[Callable[[torch.Tensor, torch.Generator], torch.Tensor], tuple, tuple, str]:
    """(prepare, mean, std, recipe): the seeds' CIFAR augmentation, batched.

    At 32 px: RandomCrop(32, padding=4) + flip + Normalize(CIFAR stats), as the torchvision loader.
    At another size the same crop and flip, then a bilinear upscale on the device and ImageNet
    statistics (what pretrained weights expect, and what the torchvision loader uses there).
    """
    native = image_size == CIFAR_SIZE
    mean, std = (CIFAR_MEAN, CIFAR_STD) if native else (IMAGENET_MEAN, IMAGENET_STD)
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    def prepare(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if train:
            batch = augment.random_crop_flip(batch, CIFAR_PAD, generator)
        x = augment.normalize(batch, mean, std, memory_format=fmt)
        return augment.resize(x, image_size).contiguous(memory_format=fmt)

    scale = "" if native else f", bilinear upscale to {image_size}"
    recipe = f"cifar on device: crop {CIFAR_SIZE} pad {CIFAR_PAD}, flip{scale}; val normalize only{scale}"
    return prepare, mean, std, recipe


def to_device_uint8(images_hwc: np.ndarray, device: torch.device) -> torch.Tensor:
    """N x H x W x 3 uint8 (the reader's layout) -> N x 3 x H x W uint8 on `device`, contiguous."""
    return torch.from_numpy(images_hwc).to(device).permute(0, 3, 1, 2).contiguous()

"""Per-sample torchvision transforms for the `torchvision` loader, train and val.

Kept apart from the loaders so a faster pipeline (e.g. batched on the device) can sit beside
this one and reuse the same normalisation constants and crop geometry.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from torchvision import transforms as T

from effbench.datasets import IMAGENET_MEAN, IMAGENET_STD, dataset_spec

# Resize the shorter side to 8/7 of the crop before cropping: ImageNet's 256 -> 224 ratio
# (torchvision references/classification, resize_size=256 crop_size=224).
RESIZE_RATIO = 8 / 7
# CIFAR's native side and its 4-pixel padded random crop (He et al. 2016, sec. 4.2).
CIFAR_SIZE = 32
CIFAR_PAD = 4
# Small rotations for the resized pipeline: the recipe effbench specifies for Food-101 and folders.
ROTATION_DEG = 10


@dataclass(frozen=True)
class TransformPair:
    train: Callable
    val: Callable
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    recipe: str
    """Short description for the result record."""


def build_transforms(dataset: str, image_size: int) -> TransformPair:
    """A dataset stored at one size (CIFAR) keeps the padded-crop recipe at that size; everything else is resized."""
    spec = dataset_spec(dataset)
    if spec.native_size == image_size:
        return _native(image_size, spec.mean, spec.std)
    return _resized(image_size)


def resize_side(image_size: int) -> int:
    return round(image_size * RESIZE_RATIO)


def _native(size: int, mean: tuple[float, float, float], std: tuple[float, float, float]) -> TransformPair:
    norm = T.Normalize(mean, std)
    train = T.Compose([T.RandomCrop(size, padding=CIFAR_PAD), T.RandomHorizontalFlip(0.5), T.ToTensor(), norm])
    val = T.Compose([T.ToTensor(), norm])
    return TransformPair(train, val, mean, std, f"cifar: crop {size} pad {CIFAR_PAD}, flip")


def _resized(size: int) -> TransformPair:
    norm = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    side = resize_side(size)
    train = T.Compose(
        [
            T.Resize(side),
            T.RandomCrop(size),
            T.RandomHorizontalFlip(0.5),
            T.RandomRotation(ROTATION_DEG),
            T.ToTensor(),
            norm,
        ]
    )
    val = T.Compose([T.Resize(side), T.CenterCrop(size), T.ToTensor(), norm])
    recipe = f"resize {side}, random crop {size}, flip, rotate {ROTATION_DEG}; val center crop {size}"
    return TransformPair(train, val, IMAGENET_MEAN, IMAGENET_STD, recipe)

"""Per-sample torchvision transforms for the `torchvision` loader, train and val.

Kept apart from the loaders so a faster pipeline (e.g. batched on the device) can sit beside
this one and reuse the same normalisation constants and crop geometry.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from torchvision import transforms as T

# CIFAR per-channel statistics as used by kuangliu/pytorch-cifar (main.py) and the seed lab.
# The std is the widely copied (0.2023, 0.1994, 0.2010), not the exact per-pixel value, on purpose:
# it keeps results comparable with those baselines.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
# ImageNet statistics, torchvision's reference recipes and every pretrained torchvision/timm model.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
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
    """CIFAR at its native 32 px keeps the padded-crop recipe; everything else is resized."""
    if dataset in ("cifar10", "cifar100") and image_size == CIFAR_SIZE:
        return _cifar_native()
    return _resized(image_size)


def resize_side(image_size: int) -> int:
    return round(image_size * RESIZE_RATIO)


def _cifar_native() -> TransformPair:
    norm = T.Normalize(CIFAR_MEAN, CIFAR_STD)
    train = T.Compose([T.RandomCrop(CIFAR_SIZE, padding=CIFAR_PAD), T.RandomHorizontalFlip(0.5), T.ToTensor(), norm])
    val = T.Compose([T.ToTensor(), norm])
    return TransformPair(train, val, CIFAR_MEAN, CIFAR_STD, f"cifar: crop {CIFAR_SIZE} pad {CIFAR_PAD}, flip")


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

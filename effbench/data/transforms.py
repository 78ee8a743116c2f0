"""Per-sample torchvision transforms for the `torchvision` loader, train and val, built from a Recipe.

The `fast` loader builds the same recipe batched on the device (effbench.data.fast_cifar,
fast_images); both read their parameters from effbench.recipes, so the crops, flips, rotations,
interpolation and normalisation are the same whichever loader runs (docs/recipes.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchvision import transforms as T

from effbench.recipes import CIFAR_SIZE, RESIZE_RATIO, Recipe, resize_side, resolve

__all__ = ["CIFAR_SIZE", "RESIZE_RATIO", "TransformPair", "build_transforms", "recipe_transforms", "resize_side"]


@dataclass(frozen=True)
class TransformPair:
    train: Callable
    val: Callable
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    recipe: str
    """Short description for the result record (Recipe.steps())."""
    record: dict[str, Any]
    """The recipe's full record (Recipe.record())."""


def build_transforms(dataset: str, image_size: int, augment: str = "seed") -> TransformPair:
    """The per-sample transforms of `--augment augment` for `dataset` at `image_size`."""
    return recipe_transforms(resolve(augment, dataset, image_size))


def recipe_transforms(r: Recipe) -> TransformPair:
    norm = [T.ToTensor(), T.Normalize(r.mean, r.std)]
    # CIFAR at another size: the normalized 32 px tensor upscaled as the fast loader upscales it
    # (F.interpolate bilinear, align_corners=False, no antialias), so the two match to float rounding
    up = [T.Resize([r.upscale, r.upscale], T.InterpolationMode.BILINEAR, antialias=False)] if r.upscale else []
    # image files: the shorter side to `base`, then the central base x base square (the fast loader's workers)
    square = [T.Resize(r.base), T.CenterCrop(r.base)] if r.kind == "files" else []
    flip = [T.RandomHorizontalFlip(r.flip_p)] if r.flip_p else []
    if r.crop == "random":
        crop = [T.RandomCrop(r.crop_size, padding=r.pad or None)]
        rotate = [T.RandomRotation(r.rotation_deg)] if r.rotation_deg else []  # nearest, fill 0 (defaults)
        train = square + crop + flip + rotate + norm + up
    elif r.crop == "random-resized":
        assert r.rrc_scale is not None and r.rrc_ratio is not None
        rrc = T.RandomResizedCrop(r.image_size, scale=r.rrc_scale, ratio=r.rrc_ratio)  # bilinear (default)
        train = square + [rrc] + flip + norm
    elif r.crop == "center":
        train = square + [T.CenterCrop(r.crop_size)] + norm + up
    else:  # full: the stored image as it is
        train = square + norm + up
    val_crop = [T.CenterCrop(r.crop_size)] if r.val_crop == "center" else []
    val = square + val_crop + norm + up
    return TransformPair(T.Compose(train), T.Compose(val), r.mean, r.std, r.steps(), r.record())

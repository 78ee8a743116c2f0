"""Training recipes (`--augment`): one typed record per (recipe, dataset kind, size), read by both loaders.

The `torchvision` loader (per-sample transforms, effbench.data.transforms) and the `fast` loader
(batched on the device, effbench.data.fast_cifar / fast_images) each build their pipeline from the
same `Recipe`, so `--loader` changes how the images are made, never which images are trained on.
The record travels into config.json and results.json (`Recipe.record()`). Torch-free.

    seed      the seeds' recipes. CIFAR (stored at 32 px): RandomCrop(32, padding=4) + flip at 32 px,
              then a bilinear upscale to --image-size. Image files: resize the shorter side to 8/7 of
              the size, RandomCrop + flip + RandomRotation(10).
    imagenet  RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) + flip, torchvision's reference recipe.
    none      no augmentation: resize + center crop (convergence checks, inference-like timing).

Image files are first made square in both loaders: shorter side resized to `base` (8/7 of the
size) and the central base x base window kept. Every random crop is drawn from that square, so the
fast loader's workers can ship small uint8 squares and the torchvision loader crops from the same
pixels. See docs/recipes.md. This module sits at the package top, beside datasets.py, because config
and the CLI read it (AUGMENTS) and must stay torch-free; importing effbench.data imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from effbench.datasets import IMAGENET_MEAN, IMAGENET_STD, dataset_spec

AUGMENTS = ("seed", "imagenet", "none")
# Resize the shorter side to 8/7 of the crop before cropping: ImageNet's 256 -> 224 ratio
# (torchvision references/classification, resize_size=256 crop_size=224).
RESIZE_RATIO = 8 / 7
# CIFAR's native side and its 4-pixel padded random crop (He et al. 2016, sec. 4.2).
CIFAR_SIZE = 32
CIFAR_PAD = 4
# Small rotations for the resized pipeline: the recipe the seeds describe for Food-101 and folders
# ("random horizontal flips, rotations, and crops").
ROTATION_DEG = 10.0
# torchvision.transforms.RandomResizedCrop's defaults (area fraction, aspect ratio w/h; the ImageNet
# recipe of Szegedy et al. 2015) and its 10 tries before the center-crop fallback (get_params).
RRC_SCALE = (0.08, 1.0)
RRC_RATIO = (3 / 4, 4 / 3)
RRC_TRIES = 10
FLIP_P = 0.5

# Where the two loaders cannot give the same pixels, and how far apart they are (tests/unit/test_recipes.py
# bounds each one). The crop boxes, flips and angles are drawn from the same distributions in both.
PIL_RESIZE = (
    "image files: the torchvision loader resizes to the base square with PIL (bilinear, antialiased, "
    "uint8), the fast loader with torchvision's tensor resize (bilinear, antialias=True, uint8): "
    "the same filter; pixels within 2 of 255 levels, mean abs difference under 0.5 level (measured: max 1, "
    "mean 0.003)"
)
JPEG_DECODE = (
    "image files: JPEGs are decoded by PIL in the torchvision loader and by decode_jpeg in the fast "
    "loader (both libjpeg-turbo; IDCT and chroma upsampling may differ by a level)"
)
RRC_RESAMPLE = (
    "imagenet: the torchvision loader resizes each crop with PIL (bilinear, antialiased), the fast "
    "loader on the CPU with torch's uint8 bilinear (antialias=True); on CUDA one grid_sample for the "
    "batch, bilinear without antialiasing (a downscaled crop aliases there)"
)


def resize_side(image_size: int) -> int:
    """The side of the square every crop of an image file is drawn from (8/7 of the size)."""
    return round(image_size * RESIZE_RATIO)


@dataclass(frozen=True)
class Recipe:
    """What one --augment choice does to one dataset at one size, for both loaders."""

    name: str
    """--augment: seed, imagenet or none."""
    kind: str
    """cifar (stored as 32 px arrays) or files (image files resized to a square first)."""
    image_size: int
    """The model's input side in px."""
    base: int
    """Side of the square the crops are drawn from: 32 for CIFAR, resize_side(image_size) for files."""
    pad: int
    """Zero padding around the base square before a RandomCrop (seed on CIFAR: 4)."""
    crop: str
    """Training crop: random (a base-size or image-size window, offsets uniform), random-resized
    (RandomResizedCrop), center, or full (the whole base square)."""
    crop_size: int
    """Side of the random or center crop window before any upscale."""
    flip_p: float
    """Probability of a horizontal flip in training."""
    rotation_deg: float
    """Training rotation angle uniform in [-rotation_deg, rotation_deg] (nearest, zero fill)."""
    upscale: int | None
    """CIFAR at a size other than 32: bilinear (align_corners=False, no antialias) upscale of the
    normalized 32 px crop to this side, in train and val (imagenet: val only; its crop is resized
    to the size directly)."""
    val_crop: str
    """Validation: center (a center crop_size window of the base square) or full."""
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rrc_scale: tuple[float, float] | None = None
    rrc_ratio: tuple[float, float] | None = None
    inexact: tuple[str, ...] = ()
    """Where the two loaders cannot give the same pixels, and the bound a test holds them to."""

    def steps(self) -> str:
        """One line for the record and the report, e.g. 'crop 32 pad 4, flip 0.5; upscale 224'."""
        train: list[str] = []
        if self.kind == "files":
            train.append(f"resize shorter side {self.base}, center square {self.base}")
        if self.crop == "random":
            train.append(f"random crop {self.crop_size}" + (f" pad {self.pad}" if self.pad else ""))
        elif self.crop == "random-resized":
            assert self.rrc_scale is not None and self.rrc_ratio is not None
            s, r = self.rrc_scale, self.rrc_ratio
            train.append(f"random-resized crop {self.image_size} scale {s[0]:g}-{s[1]:g} ratio {r[0]:.3g}-{r[1]:.3g}")
        elif self.crop == "center":
            train.append(f"center crop {self.crop_size}")
        if self.flip_p:
            train.append(f"flip {self.flip_p:g}")
        if self.rotation_deg:
            train.append(f"rotate +-{self.rotation_deg:g} deg")
        if self.upscale is not None and self.crop != "random-resized":  # that crop is resized to the size itself
            train.append(f"bilinear upscale to {self.upscale}")
        val = "center crop" if self.val_crop == "center" else "as stored"
        val += f", upscale to {self.upscale}" if self.upscale is not None else ""
        return f"{self.name}: " + ", ".join(train) + f"; val {val}"

    def record(self) -> dict[str, Any]:
        """JSON-able: the recipe by name and every parameter (config.json's and results.json's `augment`)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "steps": self.steps(),
            "image_size": self.image_size,
            "base": self.base,
            "pad": self.pad,
            "crop": self.crop,
            "crop_size": self.crop_size,
            "flip_p": self.flip_p,
            "rotation_deg": self.rotation_deg,
            "upscale": self.upscale,
            "val_crop": self.val_crop,
            "rrc_scale": list(self.rrc_scale) if self.rrc_scale else None,
            "rrc_ratio": list(self.rrc_ratio) if self.rrc_ratio else None,
            "interpolation": "bilinear",
            "mean": list(self.mean),
            "std": list(self.std),
            "inexact": list(self.inexact),
        }


def resolve(augment: str, dataset: str, image_size: int) -> Recipe:
    """The recipe `--augment augment` gives `dataset` at `image_size` (a dataset from files or arrays)."""
    if augment not in AUGMENTS:
        raise ValueError(f"unknown recipe {augment!r}; one of {', '.join(AUGMENTS)}")
    spec = dataset_spec(dataset)
    if spec.native_size == CIFAR_SIZE:
        return _cifar(augment, image_size, spec.mean, spec.std)
    return _with_dali(_files(augment, image_size))


def _cifar(augment: str, size: int, mean: tuple[float, float, float], std: tuple[float, float, float]) -> Recipe:
    native = size == CIFAR_SIZE
    # At 32 px the dataset's own statistics; upscaled, ImageNet's (what pretrained weights expect)
    mean, std = (mean, std) if native else (IMAGENET_MEAN, IMAGENET_STD)
    upscale = None if native else size
    common: dict[str, Any] = {"kind": "cifar", "image_size": size, "base": CIFAR_SIZE, "mean": mean, "std": std}
    if augment == "seed":
        return Recipe(
            "seed", pad=CIFAR_PAD, crop="random", crop_size=CIFAR_SIZE, flip_p=FLIP_P, rotation_deg=0.0,
            upscale=upscale, val_crop="full", **common,
        )  # fmt: skip
    if augment == "imagenet":  # the crop is resized straight to the input size (no separate upscale)
        return Recipe(
            "imagenet", pad=0, crop="random-resized", crop_size=size, flip_p=FLIP_P, rotation_deg=0.0,
            upscale=upscale, val_crop="full", rrc_scale=RRC_SCALE, rrc_ratio=RRC_RATIO, inexact=(RRC_RESAMPLE,),
            **common,
        )  # fmt: skip
    return Recipe(
        "none", pad=0, crop="full", crop_size=CIFAR_SIZE, flip_p=0.0, rotation_deg=0.0, upscale=upscale,
        val_crop="full", **common,
    )  # fmt: skip


def _files(augment: str, size: int) -> Recipe:
    common: dict[str, Any] = {
        "kind": "files", "image_size": size, "base": resize_side(size), "pad": 0, "upscale": None,
        "val_crop": "center", "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
    }  # fmt: skip
    if augment == "seed":
        return Recipe(
            "seed", crop="random", crop_size=size, flip_p=FLIP_P, rotation_deg=ROTATION_DEG,
            inexact=(PIL_RESIZE, JPEG_DECODE), **common,
        )  # fmt: skip
    if augment == "imagenet":
        return Recipe(
            "imagenet", crop="random-resized", crop_size=size, flip_p=FLIP_P, rotation_deg=0.0,
            rrc_scale=RRC_SCALE, rrc_ratio=RRC_RATIO, inexact=(PIL_RESIZE, JPEG_DECODE, RRC_RESAMPLE), **common,
        )  # fmt: skip
    return Recipe(
        "none", crop="center", crop_size=size, flip_p=0.0, rotation_deg=0.0, inexact=(PIL_RESIZE, JPEG_DECODE),
        **common,
    )  # fmt: skip


# The dali loader (effbench.data.dali) on image files; tests/unit/test_dali.py bounds each. The record stays one
# for every loader, so these notes are in it whichever loader ran.
DALI_RESIZE = (
    "image files, dali loader: DALI's resize (linear, antialiased) to the sizes and central window torchvision's "
    "Resize + CenterCrop compute (set per image from the header): pixels within 2 of 255 levels of the fast "
    "loader's, mean abs difference under 0.5 level (measured: max 1, mean 0.19); JPEGs decoded by DALI "
    "(libjpeg-turbo on the CPU, nvjpeg on CUDA)"
)
DALI_ROTATE = (
    "seed, dali loader: fn.rotate (nearest, zero fill, about the center) in place of RandomRotation: the angle "
    "law and per-pixel mean and variance agree within the agreement test's bounds"
)
DALI_RRC = (
    "imagenet, dali loader: fn.random_resized_crop (same area and ratio ranges, 10 tries, linear antialiased "
    "resize) in place of RandomResizedCrop: its box laws agree within the agreement test's bounds (measured "
    "Kolmogorov-Smirnov distances 0.02 and 0.03 against a 0.08 bound)"
)


def _with_dali(r: Recipe) -> Recipe:
    """A files recipe with the dali loader's differences added to `inexact`."""
    from dataclasses import replace

    extra = {"seed": (DALI_RESIZE, DALI_ROTATE), "imagenet": (DALI_RESIZE, DALI_RRC), "none": (DALI_RESIZE,)}
    return replace(r, inexact=r.inexact + extra[r.name])

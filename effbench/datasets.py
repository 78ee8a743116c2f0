"""The dataset catalog: one entry per `--dataset`, read by config, data, transforms, preflight and every help text.

Adding a dataset touches this table and the module that reads its files (a `load(cfg) -> Source` function named
in the entry). It sits at the package top, not in effbench/data/, because config and the CLI read it while they
must stay torch-free, and importing effbench.data imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# ImageNet statistics: torchvision's reference recipes and every pretrained torchvision/timm model.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# CIFAR per-channel statistics as used by kuangliu/pytorch-cifar (main.py) and the seed lab.
# The std is the widely copied (0.2023, 0.1994, 0.2010), not the exact per-pixel value, on purpose:
# it keeps results comparable with those baselines.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
# The input side of a model without a native resolution of its own on a dataset without one (ImageNet's crop).
DEFAULT_IMAGE_SIZE = 224


@dataclass(frozen=True)
class Archive:
    title: str
    """Human name for messages."""
    url: str
    """Official URL; EFFBENCH_MIRROR replaces everything before the file name."""
    md5: str
    """As published next to the file (CIFAR: the CIFAR page; Food-101: torchvision's Food101)."""
    folder: str
    """Top-level folder inside the archive, extracted under --data-dir."""
    required: tuple[str, ...]
    """Paths inside `folder` that a complete copy has; any missing one means download again."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    """Canonical `--dataset` value, also the name in results."""
    title: str
    """Human name for messages."""
    storage: Literal["archive", "folder", "generated"]
    """archive: a published archive under --data-dir (downloadable); folder: the user's class-per-folder tree
    at --data-dir; generated: made on the device, nothing read."""
    loader: str | None
    """'module:function' taking the RunConfig and returning the data.source.Source; None for generated data."""
    aliases: tuple[str, ...] = ()
    num_classes: int | None = None
    """None where the files say (an image folder)."""
    native_size: int | None = None
    """Side of the stored images when they all share one (CIFAR: 32); None for files of any size."""
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    """Normalisation of the native-size recipe; resized pipelines use ImageNet's (what pretrained models saw)."""
    archive: Archive | None = None
    image_files: bool = False
    """Examples are encoded image files (JPEG/PNG): the fast loader decodes them and --gpu-decode applies."""


CATALOG: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "cifar100", "CIFAR-100", "archive", "effbench.data.cifar:load_for", aliases=("cifar",), num_classes=100,
            native_size=32, mean=CIFAR_MEAN, std=CIFAR_STD,
            archive=Archive(
                "CIFAR-100", "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                "eb9058c3a382ffc7106e4002c42a8d85", "cifar-100-python", ("train", "test", "meta"),
            ),
        ),
        DatasetSpec(
            "cifar10", "CIFAR-10", "archive", "effbench.data.cifar:load_for", num_classes=10, native_size=32,
            mean=CIFAR_MEAN, std=CIFAR_STD,
            archive=Archive(
                "CIFAR-10", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                "c58f30108f718f92721af3b95e74349a", "cifar-10-batches-py",
                (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"),
            ),
        ),
        DatasetSpec(
            "food101", "Food-101", "archive", "effbench.data.food101:load_for", aliases=("food",), num_classes=101,
            image_files=True,
            archive=Archive(
                "Food-101", "http://data.vision.ee.ethz.ch/cvl/food-101.tar.gz",
                "85eeb15f3717b99a5da872d97d918f87", "food-101",
                ("images", "meta/classes.txt", "meta/train.json", "meta/test.json"),
            ),
        ),
        DatasetSpec(
            "imagefolder", "image folder", "folder", "effbench.data.imagefolder:load_for", image_files=True,
        ),
        # Generated data in one of two shapes, the option's one word saying which: CIFAR-100's (32 px stored
        # images, so resnet18 runs at 32 px as on cifar100, 100 classes: the seeds' ResNet-18 experiments) or
        # ImageNet's (224 px, 1,000 classes: what the model zoos' speed tables measure). Both replay a
        # CIFAR-sized 50,000-image epoch (data/synthetic.py); --max-steps caps it. Their labels are random, so a
        # top-1 on them is chance (chance_note).
        DatasetSpec(
            "synthetic", "synthetic, CIFAR-100-shaped", "generated", None, aliases=("synthetic-cifar",),
            num_classes=100, native_size=32,
        ),
        DatasetSpec(
            "synthetic-imagenet", "synthetic, ImageNet-shaped", "generated", None, num_classes=1000, native_size=224,
        ),
    )
}  # fmt: skip

DATASETS = tuple(CATALOG)
"""The names this release ships; the functions below read CATALOG at call time (so does config's validation)."""


def dataset_names() -> tuple[str, ...]:
    return tuple(CATALOG)


def dataset_aliases() -> dict[str, str]:
    return {alias: spec.name for spec in CATALOG.values() for alias in spec.aliases}


def dataset_spec(name: str) -> DatasetSpec:
    """The entry of a canonical name (config resolves aliases first)."""
    return CATALOG[name]


def chance_note(name: str | None) -> str | None:
    """What a top-1 of generated data means, said beside it in every report and export; None for real data (or an
    unknown name). Its labels are drawn at random, and it validates on generated images it never trained on
    (data/synthetic.py), so no model does better than chance on them."""
    spec = CATALOG.get(name) if name is not None else None
    if spec is None or spec.storage != "generated" or not spec.num_classes:
        return None
    return f"synthetic: random labels, accuracy is chance by construction (1/{spec.num_classes:,})"


def datasets_help() -> str:
    """'cifar100 (cifar), cifar10, ...' for every option that takes a dataset."""
    named = [f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name for s in CATALOG.values()]
    return ", ".join(named) + "."


def with_image_files() -> list[str]:
    return [s.name for s in CATALOG.values() if s.image_files]

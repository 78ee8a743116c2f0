"""Pure: the seeds' experiments as sweep presets (`effbench sweep --preset NAME`).

A preset is a set of swept dimensions plus the fixed options the seeds ran them with; any option
given on the command line replaces the preset's value (a list replaces a swept dimension).

    workers      data-loading time vs DataLoader workers (the ResNet-18 lab's C3: 0, 4, 8, 12 there)
    optimizers   sgd, sgd-nesterov, adagrad, adadelta, adam: time, loss, top-1 (lab C6)
    batchnorm    resnet18 with and without BatchNorm (lab C7)
    cpu-vs-gpu   the same training on the CPU and on a GPU (lab C5)
    batch-size   32..8192 images per device, OOM included (lab 5: 32, 128, 512, 2048, 8192 per GPU)
    scaling      1..all GPUs (or CPU processes), strong and weak scaling (lab 5, the EfficientNet project)
    models       EfficientNet b0, b3, b5 (the EfficientNet project)
    yardstick    ResNet-50, ResNet-101, ConvNeXt-T, ViT-B/16 at 224 px: the models published throughput
                 tables use (docs/PERFORMANCE.md lists them beside these runs)
    loaders      each input pipeline (torchvision, fast, dali, and fast with --gpu-decode) x --workers,
                 data-only and training, one recipe: img/s and data wait side by side (docs/dali.md)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from effbench.errors import EffbenchError

# The ResNet-18 lab (seeds 003/004) trained on CIFAR-10; the EfficientNet project on CIFAR-100.
_LAB = {"arch": "resnet18", "dataset": "cifar10"}


@dataclass(frozen=True)
class Preset:
    name: str
    help: str
    dims: Mapping[str, tuple[Any, ...]]
    """Swept config fields and their values (replaced by a list given on the command line)."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Fixed config fields (replaced by the same option given on the command line)."""
    device_counts_from_machine: bool = False
    """Also sweeps the device count, 1..all visible GPUs (or CPU processes 1..cores), read on the machine at
    hand unless --gpus or --nproc is given."""
    keep: Callable[[Mapping[str, Any]], bool] | None = None
    """Which cells are runs, given each cell's config fields (None: all of them)."""


def _backend(cell: Mapping[str, Any]) -> bool:
    """--gpu-decode decodes image files in the fast loader: with another loader, or on generated data
    (--smoke), the combination is not a run. `cell`: the cell's config fields."""
    from effbench.datasets import dataset_spec

    files = dataset_spec(cell.get("dataset", "cifar100")).image_files
    return not cell.get("gpu_decode") or (cell.get("loader", "fast") in ("fast", "auto") and files)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        # 0, 1, 2, 4, 8: the lab doubled workers until data time stopped falling (it found 4).
        # The torchvision loader: per-sample transforms in the workers, as the lab ran (the fast loader
        # keeps CIFAR on the device, where workers change nothing).
        Preset(
            "workers",
            "data-loading time vs --workers 0,1,2,4,8; names the best",
            {"workers": (0, 1, 2, 4, 8)},
            {**_LAB, "loader": "torchvision"},
        ),
        Preset(
            "optimizers",
            "sgd, sgd-nesterov, adagrad, adadelta, adam: time, loss, top-1",
            {"optimizer": ("sgd", "sgd-nesterov", "adagrad", "adadelta", "adam")},
            _LAB,
        ),
        Preset("batchnorm", "resnet18 with and without BatchNorm", {"batch_norm": (True, False)}, _LAB),
        Preset("cpu-vs-gpu", "the same training on --device cpu and cuda", {"device": ("cpu", "cuda")}, _LAB),
        Preset(
            "batch-size",
            "throughput vs batch size per device 32..8192, OOM recorded as data",
            {"batch_size": (32, 128, 512, 2048, 8192)},  # the lab's per-GPU sizes
            _LAB,
        ),
        Preset(
            "scaling",
            "1..all GPUs (CPU: --nproc 1..cores), strong and weak: speedup, efficiency",
            {"scaling": ("strong", "weak")},
            _LAB,
            device_counts_from_machine=True,
        ),
        Preset(
            "models",
            "EfficientNet b0, b3, b5",
            {"arch": ("efficientnet-b0", "efficientnet-b3", "efficientnet-b5")},
            {"dataset": "cifar100"},
        ),
        # NVIDIA DeepLearningExamples and MLPerf Training report ResNet-50; timm's benchmark tables
        # ResNet, ConvNeXt and ViT. 224 px synthetic data, random init: what those tables measure.
        Preset(
            "yardstick",
            "torchvision resnet50, resnet101, convnext_tiny, vit_b_16 at 224 px, as published tables",
            {"arch": ("resnet50", "resnet101", "convnext_tiny", "vit_b_16")},
            {"dataset": "synthetic", "image_size": 224, "weights": "none"},
        ),
        # The seeds' DataLoader lab extended to the backends people choose between (NVIDIA's
        # DeepLearningExamples offer pytorch | dali-cpu | dali-gpu): Food-101's JPEGs, one recipe. gpu-decode
        # cells are skipped without a GPU, dali cells without DALI, each with its reason (preflight).
        Preset(
            "loaders",
            "torchvision, fast, dali (and fast --gpu-decode on CUDA) x --workers 0,2,4, data-only and training",
            {
                "loader": ("torchvision", "fast", "dali"),
                "gpu_decode": (False, True),
                "workers": (0, 2, 4),
                "data_only": (True, False),
            },
            {"arch": "resnet18", "dataset": "food101", "augment": "seed", "epochs": 1, "max_steps": 40},
            keep=_backend,
        ),  # fmt: skip
    )
}


def presets_help() -> str:
    """'workers, optimizers, ...' for the --preset help."""
    return ", ".join(PRESETS)


def get_preset(name: str) -> Preset:
    key = name.strip().lower()
    if key not in PRESETS:
        raise EffbenchError("--preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[key]


def device_counts(n: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to n, and n itself: 8 -> (1, 2, 4, 8); 6 -> (1, 2, 4, 6)."""
    counts, c = [], 1
    while c < n:
        counts.append(c)
        c *= 2
    counts.append(max(n, 1))
    return tuple(dict.fromkeys(counts))


def preset_dims(
    preset: Preset, *, given: Mapping[str, Any], visible_gpus: int, cores: int
) -> tuple[dict[str, tuple[Any, ...]], dict[str, Any]]:
    """The preset's swept dimensions and fixed options for this machine.

    `given` is what the user typed (config fields). A preset whose device counts come from the machine sweeps
    GPU counts 1..visible, or CPU processes 1..cores with --device cpu or without a GPU.
    """
    dims = dict(preset.dims)
    fixed = dict(preset.fixed)
    if preset.device_counts_from_machine and "gpus" not in given and "nproc" not in given:
        device = given.get("device", "auto")
        if device == "cpu" or (device == "auto" and visible_gpus == 0):
            dims["nproc"] = device_counts(cores)
            fixed["device"] = "cpu"
        else:
            dims["gpus"] = device_counts(max(visible_gpus, 1))
    return dims, fixed

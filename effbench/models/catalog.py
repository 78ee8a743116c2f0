"""`effbench models`: one row per architecture, effbench's own counted on the meta device.

The names and the libraries' metadata live in effbench/archs.py (torch-free, read by config); this module
adds what needs effbench's own model code: the weights file names and the parameters and GFLOPs of
effbench's own models, which no library publishes.
"""

from __future__ import annotations

import functools

from effbench.archs import (
    ARCH_ALIASES,
    ARCHS,
    EFFICIENTNET_NATIVE_SIZE,
    SOURCES,
    TIMM_HINT,
    TORCHVISION_SIZE_KWARG,
    ArchInfo,
    _own_native_size,
    _timm_info,
    _torchvision_info,
    native_image_size,
    resolve,
    split,
    timm_cfg,
    timm_installed,
    timm_names,
    timm_weights_file,
    timm_weights_url,
    torchvision_names,
    torchvision_weights,
    tv_min_size,
)


def info(canonical: str) -> ArchInfo:
    source, name = split(canonical)
    if source == "torchvision":
        return _torchvision_info(name)
    if source == "timm":
        return _timm_info(name)
    from effbench.models import efficientnet, resnet

    size = _own_native_size(canonical)
    url = efficientnet.IMAGENET_URLS.get(canonical, resnet.IMAGENET_URL)
    params, gflops = own_counts(canonical)
    return ArchInfo(canonical, "effbench", params, size, False, url.rsplit("/", 1)[-1], gflops)


# The classes of the ImageNet head the libraries' published counts are for (torchvision's `num_params`).
IMAGENET_CLASSES = 1000


@functools.cache
def own_counts(canonical: str) -> tuple[int, float]:
    """Parameters (ImageNet head) and forward GFLOPs per image at the native size of one of effbench's own models.

    No library publishes them for effbench's own code, so they are counted: the model built on the meta device
    (shapes only, nothing allocated: 0.1-0.4 s each on 2 busy cores, b7 at 600 px included) and run once under
    effbench's FLOP counter (measure/flops.py, 2 FLOPs per multiply-add, as the torchvision rows). resnet18 gives
    torchvision's resnet18 figures exactly (11,689,512; 2 x `_ops` 1.814) and efficientnet-b0 its efficientnet_b0
    params and GFLOPs to 0.1% (tests/e2e/test_command_output.py)."""
    import torch

    from effbench.config import RunConfig
    from effbench.measure.flops import forward_flops_per_image
    from effbench.models import spec_for

    size = _own_native_size(canonical)
    cfg = RunConfig(arch=canonical, dataset="synthetic-imagenet", image_size=size, weights="none", freeze="none")
    with torch.device("meta"):
        model = spec_for(canonical).build(cfg, IMAGENET_CLASSES)
        params = sum(p.numel() for p in model.parameters())
        flops = forward_flops_per_image(model, torch.empty(1, 3, size, size))
    return params, flops / 1e9


def catalog(sources: tuple[str, ...] = ("effbench", "torchvision")) -> list[ArchInfo]:
    """Every architecture of `sources`, in the order `effbench models` shows them."""
    rows: list[ArchInfo] = []
    if "effbench" in sources:
        rows += [info(a) for a in ARCHS]
    if "torchvision" in sources:
        rows += [_torchvision_info(n) for n in torchvision_names()]
    if "timm" in sources:
        rows += [_timm_info(n) for n in timm_names()]
    return rows


__all__ = [
    "ARCHS", "ARCH_ALIASES", "EFFICIENTNET_NATIVE_SIZE", "SOURCES", "TIMM_HINT", "TORCHVISION_SIZE_KWARG", "ArchInfo",
    "catalog", "info", "native_image_size", "own_counts", "resolve", "split", "timm_cfg", "timm_installed", "timm_names",
    "timm_weights_file", "timm_weights_url", "torchvision_names", "torchvision_weights", "tv_min_size",
]  # fmt: skip

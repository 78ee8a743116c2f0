"""Which architectures exist: effbench's own, torchvision's classification models, timm's (optional).

Names: `efficientnet-b0..b7` (b0..b7) and `resnet18` are effbench's own; `torchvision:NAME` is any
model of `torchvision.models.list_models(module=torchvision.models)` (the classification ones: the
detection, segmentation, video and quantization submodules are other modules); `timm:NAME` any of
`timm.list_models()`. A bare torchvision name (`resnet50`, `vit_b_16`) means torchvision's, except
`resnet18`, which stays effbench's own. Facts shown by `effbench models` come from the libraries'
own metadata (torchvision's weights `meta`, timm's `pretrained_cfg`), never from a table here; effbench's own
models' parameters and GFLOPs are counted on the meta device (effbench/models/catalog.py `own_counts`).
Torch-free at import, so config can use it. The names come from a static catalogue (effbench/arch_names.py,
generated from the pinned torchvision and timm): `--arch` is checked, and a typo refused with a did-you-mean,
without importing torchvision (3-30 s with torch) or timm; the library itself is asked only when its installed
version is not the catalogue's, and timm is imported only to build a timm model or read its metadata.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
from dataclasses import asdict, dataclass
from typing import Any

from effbench.errors import EffbenchError

# Native input resolution of each EfficientNet (Tan & Le 2019, Table 1 / efficientnet-pytorch's
# `efficientnet_params`).
EFFICIENTNET_NATIVE_SIZE = {
    "efficientnet-b0": 224,
    "efficientnet-b1": 240,
    "efficientnet-b2": 260,
    "efficientnet-b3": 300,
    "efficientnet-b4": 380,
    "efficientnet-b5": 456,
    "efficientnet-b6": 528,
    "efficientnet-b7": 600,
}
ARCHS = (*EFFICIENTNET_NATIVE_SIZE, "resnet18")
ARCH_ALIASES = {f"b{i}": f"efficientnet-b{i}" for i in range(8)}

SOURCES = ("effbench", "torchvision", "timm")
TIMM_HINT = "pip install 'effbench[timm]'"
SUGGESTIONS = 3


@dataclass(frozen=True)
class ArchInfo:
    """One row of `effbench models`."""

    name: str
    """What --arch takes (canonical)."""
    source: str
    params: int | None
    """Parameters at 1000 classes, from the library's metadata (effbench's own: counted, `own_counts`); None where
    it does not say."""
    image_size_px: int
    """Native input resolution (what --image-size defaults to)."""
    fixed_image_size: bool
    """The architecture is built for one input size (ViT-style position embeddings)."""
    weights: str | None
    """File name of the default ImageNet weights (--weights imagenet), None if there are none."""
    forward_gflops: float | None
    """Forward GFLOPs (2 per multiply-add) per image at the native size, from the library's metadata
    (2 x torchvision's `_ops`, a multiply-add count; effbench's own: counted, `own_counts`); None where the
    library does not publish it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split(canonical: str) -> tuple[str, str]:
    """ "torchvision:resnet50" -> ("torchvision", "resnet50"); own names -> ("effbench", name)."""
    source, sep, name = canonical.partition(":")
    return (source, name) if sep else ("effbench", canonical)


def installed_version(dist: str) -> str | None:
    """The installed version of `dist` without its local part (`0.29.1+cu128` -> `0.29.1`), None when absent;
    read from its metadata, never by importing it."""
    try:
        return importlib.metadata.version(dist).partition("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def torchvision_names() -> list[str]:
    """torchvision's classification models: the static catalogue's when the installed torchvision is the one it
    was generated from (no import), else torchvision's own list."""
    from effbench import arch_names

    if installed_version("torchvision") == arch_names.TORCHVISION_VERSION:
        return list(arch_names.TORCHVISION)
    import torchvision.models as tvm

    return list(tvm.list_models(module=tvm))


def timm_names() -> list[str]:
    """timm's models, as torchvision_names: the static catalogue's for the version it was made from, else
    timm.list_models(); a one-line error when timm is not installed."""
    from effbench import arch_names

    if not timm_installed():
        raise EffbenchError("--arch", f"timm models need timm, which is not installed; {TIMM_HINT}")
    if installed_version("timm") == arch_names.TIMM_VERSION:
        return list(arch_names.TIMM)
    return list(_timm().list_models())


def _timm() -> Any:
    try:
        import timm
    except ImportError:
        raise EffbenchError("--arch", f"timm models need timm, which is not installed; {TIMM_HINT}") from None
    return timm


def timm_installed() -> bool:
    """timm can be imported (found on the path, not imported: importing it takes seconds)."""
    return importlib.util.find_spec("timm") is not None


def _unknown(value: str, candidates: list[str]) -> EffbenchError:
    if not value.rpartition(":")[2].strip():  # `--arch ""`, `--arch torchvision:`
        return EffbenchError(
            "--arch",
            f"{value!r} names no model; pass one such as resnet18 or torchvision:resnet50 (`effbench models` lists them)",
        )
    # resnet18 is effbench's own and a torchvision name: one suggestion, not "resnet18, resnet18"
    candidates = list(dict.fromkeys(candidates))
    near = difflib.get_close_matches(value.lower(), candidates, n=SUGGESTIONS, cutoff=0.6)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return EffbenchError("--arch", f"unknown architecture {value!r}; {hint}(`effbench models` lists them)")


def resolve(value: str) -> str:
    """The canonical name of `--arch value`, or a one-line error suggesting the nearest names."""
    key = value.strip()
    low = key.lower()
    if ARCH_ALIASES.get(low, low) in ARCHS:
        return ARCH_ALIASES.get(low, low)
    source, sep, name = key.partition(":")
    if sep:
        source = source.lower()
        if source == "torchvision":
            names = torchvision_names()
            if name.lower() in names:
                return f"torchvision:{name.lower()}"
            raise _unknown(key, [f"torchvision:{n}" for n in names])
        if source == "timm":
            names = timm_names()
            if name in names:
                return f"timm:{name}"
            raise _unknown(key, [f"timm:{n}" for n in names])
        raise EffbenchError("--arch", f"unknown source {source!r} in {key!r}; use torchvision:NAME or timm:NAME")
    names = torchvision_names()
    if low in names:
        return f"torchvision:{low}"
    raise _unknown(key, [*ARCHS, *ARCH_ALIASES, *names])


def _own_native_size(canonical: str) -> int:
    return EFFICIENTNET_NATIVE_SIZE.get(canonical, 224)  # resnet18: ImageNet's 224 (CIFAR: 32, in config)


def native_image_size(canonical: str) -> int:
    source, name = split(canonical)
    if source == "effbench":
        return _own_native_size(canonical)  # no model built for it
    return (_torchvision_info(name) if source == "torchvision" else _timm_info(name)).image_size_px


def torchvision_weights(name: str) -> Any:
    """torchvision's default weights enum entry for `name` (every classification model has one)."""
    import torchvision.models as tvm

    return tvm.get_model_weights(name).DEFAULT


def _torchvision_info(name: str) -> ArchInfo:
    w = torchvision_weights(name)
    # The weights' preprocessing is a partial of ImageClassification(crop_size=...): the size the
    # weights were evaluated at (torchvision/models/_api.py, transforms/_presets.py).
    crop = w.transforms.keywords.get("crop_size", 224)
    # torchvision's meta "_ops" (shown as "GFLOPS" in its docs) counts multiply-adds: FlopCounterMode
    # (2 FLOPs per multiply-add) gives 8.18 G for resnet50 (`_ops` 4.089) and 35.13 G for vit_b_16
    # (17.564) at 224 px; tests/unit/test_external_models.py checks the factor of 2.
    ops = w.meta.get("_ops")
    return ArchInfo(
        name=f"torchvision:{name}",
        source="torchvision",
        params=int(w.meta["num_params"]),
        image_size_px=int(crop[0] if isinstance(crop, (list, tuple)) else crop),
        fixed_image_size=name in TORCHVISION_SIZE_KWARG,
        weights=w.url.rsplit("/", 1)[-1],
        forward_gflops=2 * float(ops) if ops is not None else None,
    )


TORCHVISION_SIZE_KWARG = {
    **{n: "image_size" for n in ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14")},
    "maxvit_t": "input_size",
}
"""Builders that take the input size (torchvision/models/vision_transformer.py `image_size`,
maxvit.py `input_size`): built at --image-size without weights, at the weights' size with them."""


def tv_min_size(name: str) -> int:
    """The smallest input torchvision's weights meta says the model runs on (`min_size`: Swin 224,
    Inception 75, ViT its size), so a smaller --image-size fails in one line, not in a reshape."""
    return int(torchvision_weights(name).meta.get("min_size", (1, 1))[0])


def timm_cfg(name: str) -> dict[str, Any]:
    timm = _timm()
    cfg = timm.get_pretrained_cfg(name)
    return cfg.to_dict() if cfg is not None else {}


def _timm_info(name: str) -> ArchInfo:
    cfg = timm_cfg(name)
    size = int(cfg.get("input_size", (3, 224, 224))[-1])
    hub = cfg.get("hf_hub_id")
    return ArchInfo(
        name=f"timm:{name}",
        source="timm",
        params=None,  # timm publishes no count without building the model
        image_size_px=size,
        fixed_image_size=bool(cfg.get("fixed_input_size", False)),
        weights=timm_weights_file(hub) if hub else None,
        forward_gflops=None,
    )


def timm_weights_file(hf_hub_id: str) -> str:
    """Cache name of a timm checkpoint: the hub id made a file name (HF files are all model.safetensors)."""
    return f"{hf_hub_id.replace('/', '--')}.safetensors"  # timm/resnet50.a1_in1k -> timm--resnet50.a1_in1k


def timm_weights_url(hf_hub_id: str) -> str:
    return f"https://huggingface.co/{hf_hub_id}/resolve/main/model.safetensors"


__all__ = [
    "ARCHS",
    "ARCH_ALIASES",
    "EFFICIENTNET_NATIVE_SIZE",
    "SOURCES",
    "ArchInfo",
    "native_image_size",
    "resolve",
    "split",
]

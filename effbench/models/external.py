"""torchvision's and timm's classification models as FreezableStages, without copying them.

The library builds the model; `adapt` swaps its class for a subclass that adds `effbench_stages()` and the
freezing `train()`, so parameter names, forward and initialisation stay the library's own and its
official files load by name. Stages, in registration order:
  - the classifier: torchvision's `fc` / `classifier` / `heads` / `head` (the first present), or
    timm's `get_classifier()`; inside a Sequential, its last layer with parameters (ConvNeXt's
    `classifier.2`, VGG's `classifier.6`, ViT's `heads.head`), so `--freeze classifier` trains
    exactly the final layer;
  - every top-level child, a top-level Sequential / ModuleList split into its entries (the blocks
    that `--freeze last:N` counts: ResNet's `layer3.5`, ConvNeXt's `features.5`, timm ViT's
    `blocks.11`); a top-level child that holds exactly one such list is opened one level
    (torchvision ViT's `encoder` -> `encoder.layers.encoder_layer_11`; an Inception block's
    parallel branches are not a chain and stay whole);
  - a model without such a list (GoogLeNet, Inception v3) counts every top-level child as a block;
  - never a block: the stem, as timm names it (`group_matcher()["stem"]`: ConvNeXt's `stem.0`, a
    ResNet-D's `conv1.0`), and anything inside the classifier's container (timm's `head.pre_logits`);
  - parameters a module owns directly (a ViT's class token, position embedding) belong to its
    first stage.
The frozen prefix runs with requires_grad off, so autograd records no graph for it (no input of
its ops requires grad) and its BatchNorm stays in eval mode, as with effbench's own models.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench import archs as catalog  # names and metadata (torch-free)
from effbench.models.staged import FreezableStages, Stage

HEAD_ATTRS = ("fc", "classifier", "heads", "head")
"""Where torchvision's classification models keep their classifier (resnet/regnet/inception: fc;
convnext/efficientnet/mobilenet/vgg/densenet: classifier; vit: heads; swin: head)."""
AUX_CLASSIFIERS = {"googlenet": ("aux1.", "aux2."), "inception_v3": ("AuxLogits.",)}
"""Built with aux_logits=False (training returns one tensor); their official files hold these."""
FIXED_SIZE = ("maxvit_t",)
"""torchvision models that run only at their native size (window partitions of 7 at every stage)."""


def _has_params(m: nn.Module) -> bool:
    return next(m.parameters(), None) is not None


def _is_list(m: nn.Module) -> bool:
    return isinstance(m, (nn.Sequential, nn.ModuleList))


def _stages_of(module: nn.Module, prefix: str, head: str, depth: int) -> list[Stage]:
    out: list[Stage] = []
    for name, child in module.named_children():
        path = prefix + name
        if not _has_params(child):
            continue
        if path == head:
            out.append(Stage(path, (child,), is_block=False))
        elif head.startswith(path + "."):  # the classifier's container (timm's `head`): nothing in it is a block
            out += [dataclasses.replace(s, is_block=False) for s in _stages_of(child, path + ".", head, depth + 1)]
        elif _is_list(child):
            out += [Stage(f"{path}.{n}", (c,), is_block=True) for n, c in child.named_children() if _has_params(c)]
        elif depth == 0 and sum(_is_list(c) and len(c) > 1 for c in child.children()) == 1:
            out += _stages_of(child, path + ".", head, depth + 1)
        else:
            out.append(Stage(path, (child,), is_block=False))
    direct = tuple(module.parameters(recurse=False))
    if direct and out:
        out[0] = dataclasses.replace(out[0], params=out[0].params + direct)
    return out


class ChildStages(FreezableStages):
    """Mixed in front of a library model's class by `adapt`; the library's forward runs unchanged."""

    effbench_stem_pattern: str = ""
    """The library's own regex of the stem's parameter names (timm's `group_matcher()["stem"]`): a
    stem is never a block, even when it is a Sequential (ConvNeXt's `stem.0`, ResNet-D's `conv1.0`)."""

    def effbench_stages(self) -> list[Stage]:
        stages = _stages_of(self, "", self.effbench_head_name, 0)
        stem = re.compile(self.effbench_stem_pattern) if self.effbench_stem_pattern else None

        def block(s: Stage, default: bool) -> Stage:
            return dataclasses.replace(s, is_block=default and not (stem and stem.match(s.name)))

        if not any(block(s, s.is_block).is_block for s in stages):
            # No block list (GoogLeNet, Inception v3, timm RegNet's s1..s4): every child but the stem is one.
            return [block(s, True) for s in stages[:-1]] + stages[-1:]
        return [block(s, s.is_block) for s in stages]


_ADAPTED: dict[type, type] = {}


def adapt(
    model: nn.Module, head_name: str, *, arch: str, ignores: tuple[str, ...] = (), stem_pattern: str = ""
) -> ChildStages:
    """Give `model` stages in place (its class becomes a subclass of its class) and check them."""
    cls = type(model)
    if cls not in _ADAPTED:
        _ADAPTED[cls] = type(f"Staged{cls.__name__}", (ChildStages, cls), {"__module__": __name__})
    model.__class__ = _ADAPTED[cls]
    assert isinstance(model, ChildStages)
    model.effbench_head_name = head_name
    model.effbench_checkpoint_ignores = ignores
    model.effbench_stem_pattern = stem_pattern
    stages = model.effbench_stages()
    covered = {id(p) for s in stages for m in s.modules for p in m.parameters()} | {
        id(p) for s in stages for p in s.params
    }
    if not stages or stages[-1].name != head_name or covered != {id(p) for p in model.parameters()}:
        # A layout the rule above does not cover: refuse rather than freeze the wrong tensors.
        raise EffbenchError("--arch", f"{arch} has a layout effbench cannot split into stages; use another --arch")
    return model


def last_layer(model: nn.Module, path: str) -> str:
    """Inside Sequentials, the last entry with parameters: the final layer of a classifier block."""
    module = model.get_submodule(path)
    while _is_list(module):
        name = [n for n, c in module.named_children() if _has_params(c)][-1]
        path, module = f"{path}.{name}", module.get_submodule(name)
    return path


def torchvision_head(model: nn.Module) -> str:
    for attr in HEAD_ATTRS:
        if isinstance(getattr(model, attr, None), nn.Module) and _has_params(getattr(model, attr)):
            return last_layer(model, attr)
    raise EffbenchError("--arch", f"found no classifier ({', '.join(HEAD_ATTRS)}) in {type(model).__name__}")


def timm_head(model: nn.Module, arch: str) -> str:
    head = model.get_classifier()  # timm's API for the final classifier layer
    if isinstance(head, tuple):  # distilled models (LeViT, DeiT-distilled): class and distillation heads
        raise EffbenchError(
            "--arch",
            f"{arch} is a distilled model with {len(head)} classifiers (timm's get_classifier() returns "
            f"{len(head)}); effbench trains one; use another --arch",
        )
    for name, m in model.named_modules():
        if m is head and name:
            return last_layer(model, name)
    raise EffbenchError("--arch", f"timm's get_classifier() of {type(model).__name__} is not one of its modules")


def _fixed_size_check(arch: str, cfg: RunConfig, native: int) -> None:
    if cfg.weights != "none" and cfg.image_size != native:
        raise EffbenchError(
            "--image-size",
            f"{arch} with --weights {cfg.weights} runs at {native} px only (its position embeddings are "
            f"trained for it); use --image-size {native}, or --weights none to build it for {cfg.image_size} px",
        )


def build_torchvision(name: str, cfg: RunConfig, num_classes: int) -> ChildStages:
    import torchvision.models as tvm

    arch = f"torchvision:{name}"
    assert cfg.image_size is not None  # RunConfig resolves it
    native = catalog.native_image_size(arch)
    kw: dict[str, Any] = {}
    if name in catalog.TORCHVISION_SIZE_KWARG:
        _fixed_size_check(arch, cfg, native)
        patch = int(name.rsplit("_", 1)[-1])  # vit_b_16: 16 px patches
        if cfg.image_size % patch:
            size = max(patch, cfg.image_size // patch * patch)
            raise EffbenchError(
                "--image-size", f"{arch} cuts the image into {patch} px patches; use a multiple of {patch}, e.g. {size}"
            )
        kw[catalog.TORCHVISION_SIZE_KWARG[name]] = cfg.image_size
    elif name in FIXED_SIZE and cfg.image_size != native:
        raise EffbenchError("--image-size", f"{arch} runs at {native} px only; use --image-size {native}")
    elif cfg.image_size < (lo := catalog.tv_min_size(name)):
        raise EffbenchError(
            "--image-size",
            f"{cfg.image_size} px is below the {lo} px {arch} needs (torchvision's min_size); "
            f"use --image-size {lo} or more",
        )
    if name in AUX_CLASSIFIERS:
        # init_weights: torchvision's explicit choice (None warns); transform_input as torchvision
        # sets it when it loads these weights itself (torchvision/models/inception.py, googlenet.py).
        kw.update(aux_logits=False, init_weights=True, transform_input=cfg.weights != "none")
    model = tvm.get_model(name, weights=None, num_classes=num_classes, **kw)
    return adapt(model, torchvision_head(model), arch=arch, ignores=AUX_CLASSIFIERS.get(name, ()))


def build_timm(name: str, cfg: RunConfig, num_classes: int) -> ChildStages:
    import timm

    arch = f"timm:{name}"
    pretrained = catalog.timm_cfg(name)
    kw: dict[str, Any] = {}
    if pretrained.get("fixed_input_size"):
        _fixed_size_check(arch, cfg, catalog.native_image_size(arch))
        kw["img_size"] = cfg.image_size  # timm's ViT-style models take their input size
    if cfg.weights == "imagenet" and not pretrained.get("hf_hub_id"):
        raise EffbenchError("--weights", f"timm publishes no weights for {arch}; use --weights none or a file")
    _size_check(
        arch, cfg, lambda size: timm.create_model(name, num_classes=num_classes, **{**kw, **_img_size(kw, size)})
    )
    model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kw)
    return adapt(model, timm_head(model, arch), arch=arch, stem_pattern=timm_stem(model))


def timm_stem(model: nn.Module) -> str:
    """timm's own name pattern for the stem (its layer-wise learning-rate decay groups), or "" if none."""
    groups = model.group_matcher() if hasattr(model, "group_matcher") else {}
    stem = groups.get("stem")
    return stem if isinstance(stem, str) else ""


def _img_size(kw: dict[str, Any], size: int) -> dict[str, Any]:
    return {"img_size": size} if "img_size" in kw else {}


def _fails_at(build: Callable[[int], nn.Module], size: int) -> Exception | None:
    """The error a training-mode forward at `size` px raises, from shapes alone (meta device)."""
    with torch.device("meta"):  # no memory, no arithmetic: a ViT-L builds and runs in ~0.2 s
        model = build(size).train()
        try:
            model(torch.empty(2, 3, size, size))  # 2: BatchNorm in training refuses one value per channel
        except NotImplementedError:  # an op without a meta kernel: the shapes cannot be judged here
            return None
        except Exception as e:  # noqa: BLE001 (layers say "too small" as RuntimeError, AssertionError, ValueError)
            return e
    return None


def _size_check(arch: str, cfg: RunConfig, build: Callable[[int], nn.Module]) -> None:
    """timm publishes no minimum size (torchvision does: `_fixed_size_check`, `tv_min_size`), so ask the
    layers: a size they cannot take is a one-line --image-size error before any data or worker starts,
    not a failed run with an empty report. The fix names the nearest multiple of 32 above that runs."""
    assert cfg.image_size is not None  # RunConfig resolves it
    error = _fails_at(build, cfg.image_size)
    if error is None:
        return
    native = catalog.native_image_size(arch)
    above = range(-(-cfg.image_size // 32) * 32, max(native, cfg.image_size) + 1, 32)
    fix = next((s for s in above if s != cfg.image_size and _fails_at(build, s) is None), native)
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    raise EffbenchError("--image-size", f"{arch} cannot run at {cfg.image_size} px ({reason}); use --image-size {fix}")


def imagenet_source(arch: str) -> tuple[str, str | None]:
    """(URL, cache file name or None for the URL's own name) of the default ImageNet weights."""
    source, name = catalog.split(arch)
    if source == "torchvision":
        return catalog.torchvision_weights(name).url, None
    hub = catalog.timm_cfg(name).get("hf_hub_id") or ""
    return (catalog.timm_weights_url(hub), catalog.timm_weights_file(hub)) if hub else ("", None)


def describe(arch: str, cfg: RunConfig) -> dict[str, object]:
    return {"source": catalog.split(arch)[0], "native_image_size_px": catalog.native_image_size(arch)}


__all__ = ["ChildStages", "adapt", "build_timm", "build_torchvision", "imagenet_source"]

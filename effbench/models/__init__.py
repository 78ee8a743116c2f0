"""Models: one registry from `--arch` to a builder, then `--freeze` and `--weights` applied alike.

    torch.manual_seed(cfg.seed)               # build_model does not seed
    bundle = build_model(cfg, num_classes)    # CPU, train mode
    model = bundle.model.to(device)           # then DDP / DataParallel as needed
    optimizer = SGD(trainable_parameters(model), ...)

Freezing (`--freeze classifier | last:N`) is part of the model: the frozen prefix runs under
torch.no_grad() and stays in eval mode through model.train(), so the loop needs nothing special.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch

from effbench.archs import EFFICIENTNET_NATIVE_SIZE
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench import archs
from effbench.models import efficientnet, external, resnet
from effbench.models.staged import FreezableStages, Stage
from effbench.models.weights import load_weights


@dataclass(frozen=True)
class ArchSpec:
    build: Callable[[RunConfig, int], FreezableStages]
    imagenet_url: str
    describe: Callable[[RunConfig], dict[str, object]] = lambda cfg: {}
    imagenet_file: str | None = None
    """Cache / mirror file name when the URL's own name is not unique (timm's hub files)."""


REGISTRY: dict[str, ArchSpec] = {
    **{
        arch: ArchSpec(partial(efficientnet.build, arch), efficientnet.IMAGENET_URLS[arch])
        for arch in EFFICIENTNET_NATIVE_SIZE
    },
    "resnet18": ArchSpec(resnet.build, resnet.IMAGENET_URL, resnet.describe),
}
"""effbench's own architectures; torchvision's and timm's come from `spec_for` (catalog.py names them)."""


def spec_for(arch: str) -> ArchSpec:
    """How to build a canonical `--arch` (RunConfig resolved it through catalog.resolve)."""
    if arch in REGISTRY:
        return REGISTRY[arch]
    source, name = archs.split(arch)
    build = {"torchvision": external.build_torchvision, "timm": external.build_timm}[source]
    url, file = external.imagenet_source(arch)
    return ArchSpec(partial(build, name), url, partial(external.describe, arch), file)


@dataclass
class ModelBundle:
    model: torch.nn.Module
    """On the CPU, in train mode; the caller moves it to the device / memory format."""
    arch: str
    """Canonical name, e.g. "efficientnet-b0"."""
    total_params: int
    trainable_params: int
    info: dict[str, object] = field(default_factory=dict)
    """JSON-able facts for the result record: weights source, freeze, head, num_classes, stem."""


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer gets: frozen parameters never reach it, so weight decay and momentum
    cannot move them. Works through DDP / DataParallel wrappers."""
    return [p for p in model.parameters() if p.requires_grad]


def frozen_stage_count(stages: list[Stage], freeze: tuple[str, int], arch: str) -> int:
    """How many leading stages `--freeze` freezes."""
    mode, n = freeze
    if mode == "none":
        return 0
    if mode == "classifier":
        return len(stages) - 1
    block_positions = [i for i, s in enumerate(stages) if s.is_block]
    if n > len(block_positions):
        total = len(block_positions)
        raise EffbenchError("--freeze", f"last:{n} exceeds the {total} blocks of {arch}; use last:1..{total} or none")
    return block_positions[len(block_positions) - n]


def check_freeze(cfg: RunConfig) -> None:
    """Refuse a `--freeze last:N` beyond `cfg.arch`'s blocks as build_model would, from the model's structure
    alone: built on the meta device (no memory, no weights), so a sweep checks every cell before the first runs."""
    if cfg.freeze_mode[0] != "last":
        return
    with torch.device("meta"):
        model = spec_for(cfg.arch).build(cfg, 2)  # the head's size does not change the blocks
    frozen_stage_count(model.effbench_stages(), cfg.freeze_mode, cfg.arch)


class _OneValue(Exception):
    """Raised by check_batch_norm's hook at the first BatchNorm that would see one value per channel."""

    def __init__(self, layer: str, shape: tuple[int, ...]) -> None:
        super().__init__(layer)
        self.layer, self.shape = layer, shape


def check_batch_norm(cfg: RunConfig, per_device: int, devices: int = 1) -> None:
    """Refuse a per-device batch that leaves a training BatchNorm one value per channel, before the run starts:
    PyTorch raises "Expected more than 1 value per channel when training" at the first step (issue 46), and only a
    batch of 1 can (a BatchNorm sees batch x height x width values per channel). Training batches are always whole
    (every training loader drops the last partial batch), and validation runs in eval mode, so the per-device batch
    is the only one to check. The model is built on the meta device with `--freeze` applied (a frozen BatchNorm
    stays in eval mode) and a meta batch of one image at --image-size run through it: no memory, no weights. A
    model whose forward the meta device cannot run is left to the run."""
    if per_device != 1 or cfg.data_only:
        return
    assert cfg.image_size is not None  # RunConfig resolves it
    with torch.device("meta"):
        model = spec_for(cfg.arch).build(cfg, 2)  # the head's size does not change what a BatchNorm sees
    model.effbench_freeze_prefix(frozen_stage_count(model.effbench_stages(), cfg.freeze_mode, cfg.arch))
    model.train()

    def hook(name: str) -> Callable[[torch.nn.Module, tuple[object, ...]], None]:
        def check(module: torch.nn.Module, args: tuple[object, ...]) -> None:
            x = args[0] if args else None
            if not (module.training and isinstance(x, torch.Tensor) and x.dim() >= 2):
                return
            if x.shape[0] * math.prod(x.shape[2:]) == 1:  # torch.nn.functional._verify_batch_size's rule
                raise _OneValue(name, tuple(x.shape))

        return check

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.register_forward_pre_hook(hook(name))
    try:
        model(torch.empty(1, 3, cfg.image_size, cfg.image_size, device="meta"))
    except _OneValue as e:
        strong = cfg.scaling == "strong" and devices > 1
        batch = (
            f"--batch-size {2 * devices} or more ({devices} devices share it)" if strong else "--batch-size 2 or more"
        )
        size = ", or a larger --image-size" if len(e.shape) > 2 else ""
        shape = "x".join(map(str, e.shape))
        raise EffbenchError(
            "--batch-size",
            f"a batch of 1 image per device leaves {cfg.arch}'s BatchNorm layer {e.layer} one value per channel "
            f"(input {shape} at --image-size {cfg.image_size}), which training cannot normalise; use {batch}{size}",
        ) from None
    except Exception:  # noqa: BLE001 (an op without a meta kernel: the run itself will tell)
        return


def build_model(cfg: RunConfig, num_classes: int) -> ModelBundle:
    """Build `cfg.arch` for `num_classes`, freeze per `cfg.freeze`, load `cfg.weights`."""
    spec = spec_for(cfg.arch)  # RunConfig already rejected unknown names
    model = spec.build(cfg, num_classes)
    stages = model.effbench_stages()
    # Freeze before loading so a bad --freeze fails before any download.
    k = frozen_stage_count(stages, cfg.freeze_mode, cfg.arch)
    model.effbench_freeze_prefix(k)
    assert cfg.weights is not None  # RunConfig resolves it
    weights_info = load_weights(
        model, cfg.weights, arch=cfg.arch, imagenet_url=spec.imagenet_url, imagenet_file=spec.imagenet_file
    )
    model.train()
    n_blocks = sum(s.is_block for s in stages)
    info: dict[str, object] = {
        "num_classes": num_classes,
        **weights_info,
        "freeze": cfg.freeze,
        "blocks": n_blocks,
        "trainable_blocks": sum(s.is_block for s in stages[k:]),
        "trainable_stages": [s.name for s in stages[k:]] if k else "all",
        **spec.describe(cfg),
    }
    return ModelBundle(
        model=model,
        arch=cfg.arch,
        total_params=sum(p.numel() for p in model.parameters()),
        trainable_params=sum(p.numel() for p in trainable_parameters(model)),
        info=info,
    )


__all__ = ["REGISTRY", "ArchSpec", "ModelBundle", "build_model", "check_batch_norm", "spec_for", "trainable_parameters"]

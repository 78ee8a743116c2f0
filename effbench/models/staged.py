"""A network as an ordered list of stages, of which a leading prefix can be frozen.

Every architecture here is a chain: stem, blocks, (EfficientNet: conv head), classifier. Freezing
always cuts that chain in two, so one integer, `effbench_frozen_stages`, says what is frozen, and the same
list drives the forward pass, `train()`, `requires_grad` and the report. Parameter names stay
those of the plain model (no wrapper module), so a state_dict saved in any freeze mode loads in any
other, and torchvision / efficientnet-pytorch files load by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Stage:
    name: str
    """Module path as in the state_dict ("_blocks.3", "layer2.1") or a label ("stem")."""
    modules: tuple[nn.Module, ...]
    """The modules that own this stage's parameters and BatchNorm statistics."""
    is_block: bool
    """Counts towards `--freeze last:N`."""
    params: tuple[nn.Parameter, ...] = ()
    """Parameters owned directly by a parent module rather than by `modules` (a ViT's class token)."""


class FreezableStages(nn.Module):
    """Mixin: the first `effbench_frozen_stages` stages have requires_grad off and stay in eval mode.

    Subclasses list their stages in execution order in `effbench_stages()`; the last one is the classifier.
    Every name this mixin adds starts with `effbench_`: a library model it is mixed into may own a
    submodule of the same plain name (timm ConvNeXt, NFNet and ByobNet keep their blocks in `stages`),
    and a method of the mixin would shadow it inside the library's own forward.
    """

    effbench_frozen_stages: int = 0
    effbench_head_name: str = ""
    """State_dict prefix of the classifier, the only part a checkpoint may disagree on."""
    effbench_checkpoint_ignores: tuple[str, ...] = ()
    """State_dict prefixes an official file holds that this build leaves out (Inception's auxiliary
    classifiers, unused in training here)."""

    def effbench_stages(self) -> list[Stage]:
        raise NotImplementedError

    def train(self, mode: bool = True) -> FreezableStages:
        """As nn.Module.train, but frozen stages stay in eval mode (fixed BatchNorm statistics,
        no drop-connect), so the training loop can call model.train() every epoch as usual."""
        super().train(mode)
        if mode:
            for stage in self.effbench_stages()[: self.effbench_frozen_stages]:
                for m in stage.modules:
                    m.eval()
        return self

    def effbench_freeze_prefix(self, k: int) -> None:
        """Freeze the first `k` stages and unfreeze the rest."""
        stages = self.effbench_stages()
        if not 0 <= k <= len(stages):
            raise ValueError(f"cannot freeze {k} of {len(stages)} stages")
        self.effbench_frozen_stages = k
        for i, stage in enumerate(stages):
            for m in stage.modules:
                m.requires_grad_(i >= k)
            for p in stage.params:
                p.requires_grad_(i >= k)
        self.train(self.training)


class StagedModel(FreezableStages):
    """A chain whose frozen prefix runs under torch.no_grad().

    Subclasses list their stages twice, in the same order: `effbench_stages()` (what owns parameters) and
    `effbench_stage_fns()` (what runs). The callables are rebuilt on every call rather than cached, because
    DataParallel replicas copy `__dict__` and cached bound methods would run the original modules.
    """

    def effbench_stage_fns(self) -> list[Callable[[torch.Tensor], torch.Tensor]]:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fns = self.effbench_stage_fns()
        k = self.effbench_frozen_stages
        if k:
            # Nothing before the cut trains, so its activations need no graph: this saves the
            # memory and time of autograd bookkeeping for the whole frozen base. no_grad, not
            # inference_mode: the trained head consumes these activations in autograd, and an
            # inference tensor cannot be saved for backward.
            with torch.no_grad():
                for fn in fns[:k]:
                    x = fn(x)
        for fn in fns[k:]:
            x = fn(x)
        return x

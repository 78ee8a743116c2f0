"""EfficientNet-B0..B7 (Tan & Le 2019) from efficientnet-pytorch, as a StagedModel.

The network, its parameter names and its initialisation are efficientnet-pytorch's; this subclass
only re-expresses `forward` as stem -> blocks -> conv head -> classifier so a prefix can be frozen.
The computation is the same as `EfficientNet.forward` (same drop-connect schedule).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from efficientnet_pytorch import EfficientNet
from efficientnet_pytorch.utils import url_map

from effbench.config import RunConfig
from effbench.models.staged import Stage, StagedModel

IMAGENET_URLS: dict[str, str] = dict(url_map)
"""Official ImageNet files of efficientnet-pytorch 0.7.1 (the non-AdvProp ones)."""


class StagedEfficientNet(StagedModel, EfficientNet):
    effbench_head_name = "_fc"

    def effbench_stages(self) -> list[Stage]:
        return [
            Stage("stem", (self._conv_stem, self._bn0), is_block=False),
            *(Stage(f"_blocks.{i}", (b,), is_block=True) for i, b in enumerate(self._blocks)),
            Stage("_conv_head", (self._conv_head, self._bn1), is_block=False),
            Stage("_fc", (self._fc,), is_block=False),
        ]

    def effbench_stage_fns(self) -> list[Callable[[torch.Tensor], torch.Tensor]]:
        # Drop-connect grows linearly with depth, as in EfficientNet.extract_features.
        rate = self._global_params.drop_connect_rate or 0.0
        n = len(self._blocks)
        return [
            self._stem,
            *(partial(b, drop_connect_rate=rate * i / n) for i, b in enumerate(self._blocks)),
            self._head,
            self._classify,
        ]

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        return self._swish(self._bn0(self._conv_stem(x)))

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self._swish(self._bn1(self._conv_head(x)))

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self._fc(self._dropout(self._avg_pooling(x).flatten(start_dim=1)))


def build(arch: str, cfg: RunConfig, num_classes: int) -> StagedEfficientNet:
    # image_size sets the static "same" padding of every conv (TF-style); giving the real input
    # size keeps it exact at any resolution. It is not part of the state_dict.
    model = StagedEfficientNet.from_name(arch, image_size=cfg.image_size, num_classes=num_classes)
    assert isinstance(model, StagedEfficientNet)
    return model

"""ResNet-18 written out layer by layer (He et al. 2016, "Deep Residual Learning", Table 1).

BasicBlock x [2, 2, 2, 2] at 64-128-256-512 channels, projection shortcuts (option B) where the
shape changes. Module names follow torchvision's resnet18 (conv1, bn1, layer1.0.conv1, ...,
layer2.0.downsample.0/1, fc) so torchvision's ImageNet file loads by name.

Two stems: at 32 px or less (CIFAR) a 3x3 stride-1 conv and no max-pool, as the CIFAR ResNets of
He et al. Sec. 4.2 keep the 32x32 map at full resolution; above that, the ImageNet stem (7x7
stride-2 conv + 3x3 stride-2 max-pool). Without BatchNorm (`--no-batch-norm`) every BN becomes
nn.Identity and the convs get a bias in its place.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.models.staged import Stage, StagedModel

# torchvision's ResNet18_Weights.IMAGENET1K_V1 (69.758 % top-1).
IMAGENET_URL = "https://download.pytorch.org/models/resnet18-f37072fd.pth"
CIFAR_MAX_SIZE = 32
"""Largest input that gets the CIFAR stem; CIFAR-10/100 images are 32x32."""
WIDTHS = (64, 128, 256, 512)
DEPTHS = (2, 2, 2, 2)


def _norm(channels: int, batch_norm: bool) -> nn.Module:
    return nn.BatchNorm2d(channels) if batch_norm else nn.Identity()


def _conv(cin: int, cout: int, kernel: int, stride: int, batch_norm: bool) -> nn.Conv2d:
    # The bias is redundant before BatchNorm (its shift absorbs it), needed without it.
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=not batch_norm)


class BasicBlock(nn.Module):
    """Two 3x3 convs and an identity (or 1x1 projection) shortcut: relu(F(x) + shortcut(x))."""

    def __init__(self, cin: int, cout: int, stride: int, batch_norm: bool) -> None:
        super().__init__()
        self.conv1 = _conv(cin, cout, 3, stride, batch_norm)
        self.bn1 = _norm(cout, batch_norm)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv(cout, cout, 3, 1, batch_norm)
        self.bn2 = _norm(cout, batch_norm)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(_conv(cin, cout, 1, stride, batch_norm), _norm(cout, batch_norm))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class ResNet18(StagedModel):
    effbench_head_name = "fc"

    def __init__(self, num_classes: int, *, cifar_stem: bool, batch_norm: bool) -> None:
        super().__init__()
        if cifar_stem:
            self.conv1 = _conv(3, WIDTHS[0], 3, 1, batch_norm)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = _conv(3, WIDTHS[0], 7, 2, batch_norm)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = _norm(WIDTHS[0], batch_norm)
        self.relu = nn.ReLU(inplace=True)
        cin = WIDTHS[0]
        for i, (cout, depth) in enumerate(zip(WIDTHS, DEPTHS, strict=True), start=1):
            stride = 1 if i == 1 else 2  # each later stage halves the map (Table 1)
            blocks = [BasicBlock(cin, cout, stride, batch_norm)]
            blocks += [BasicBlock(cout, cout, 1, batch_norm) for _ in range(depth - 1)]
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
            cin = cout
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(WIDTHS[-1], num_classes)

        # He et al. 2015 ("Delving Deep into Rectifiers") init for convs, as torchvision does;
        # BN starts as the identity. The Linear keeps PyTorch's default, as torchvision's.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def blocks(self) -> list[tuple[str, BasicBlock]]:
        """The 8 BasicBlocks in order, layer1.0 .. layer4.1."""
        return [
            (f"layer{i}.{j}", block)
            for i in range(1, len(DEPTHS) + 1)
            for j, block in enumerate(getattr(self, f"layer{i}"))
        ]

    def effbench_stages(self) -> list[Stage]:
        return [
            Stage("stem", (self.conv1, self.bn1), is_block=False),
            *(Stage(name, (block,), is_block=True) for name, block in self.blocks()),
            Stage("fc", (self.fc,), is_block=False),
        ]

    def effbench_stage_fns(self) -> list[Callable[[torch.Tensor], torch.Tensor]]:
        return [self._stem, *(block for _, block in self.blocks()), self._classify]

    def _stem(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(x), 1))


def uses_cifar_stem(cfg: RunConfig) -> bool:
    assert cfg.image_size is not None  # RunConfig resolves it
    return cfg.image_size <= CIFAR_MAX_SIZE


def build(cfg: RunConfig, num_classes: int) -> ResNet18:
    cifar = uses_cifar_stem(cfg)
    if cfg.weights == "imagenet":
        # Refuse before any download: these two builds cannot hold torchvision's file.
        if cifar:
            raise EffbenchError(
                "--weights",
                f"ImageNet weights for resnet18 do not fit its CIFAR stem (3x3 conv, no max-pool) used at "
                f"--image-size {cfg.image_size}; the ImageNet stem needs --image-size > {CIFAR_MAX_SIZE}, "
                "or use --weights none",
            )
        if not cfg.batch_norm:
            raise EffbenchError(
                "--weights",
                "ImageNet weights for resnet18 were trained with BatchNorm and do not fit --no-batch-norm; "
                "drop --no-batch-norm or use --weights none",
            )
    return ResNet18(num_classes, cifar_stem=cifar, batch_norm=cfg.batch_norm)


def describe(cfg: RunConfig) -> dict[str, object]:
    return {"stem": "cifar" if uses_cifar_stem(cfg) else "imagenet", "batch_norm": cfg.batch_norm}

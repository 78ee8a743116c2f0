"""A library model keeps its own attributes when effbench mixes its stages into it.

timm's ConvNeXt, NFNet and ByobNet keep their blocks in a submodule named `stages` and call
`self.stages(x)` in their forward. nn.Module finds class attributes before its `_modules`, so a
mixin method named `stages` shadowed that submodule and `--arch timm:convnext_atto` died on its
first forward with "TypeError: ChildStages.stages() takes 1 positional argument but 2 were given".
"""

from __future__ import annotations

import pytest
import timm
import torch
import torchvision.models as tvm
from torch import nn

from effbench.config import RunConfig
from effbench.models import build_model, catalog, external, trainable_parameters
from effbench.models.staged import FreezableStages, StagedModel

ADDED = {
    name
    for cls in (FreezableStages, StagedModel, external.ChildStages)  # StagedModel: into efficientnet-pytorch
    for name in vars(cls)
    if not name.startswith("__") and name not in ("train", "forward")  # nn.Module's own, meant to override
}
"""The names the mixins add to a library model's class."""

TIMM_FAMILIES = (
    "convnext_atto", "nfnet_l0", "nf_resnet26", "regnety_002", "efficientnet_b0", "mobilenetv3_small_050",
    "resnet18", "vit_tiny_patch16_224", "deit_tiny_patch16_224", "swin_tiny_patch4_window7_224",
    "efficientvit_b0", "edgenext_xx_small", "ghostnet_100", "levit_128s", "rexnet_100", "cspresnet50",
    "dla34", "densenet121", "hrnet_w18_small", "repvgg_a0", "mobilevit_xxs", "coatnet_0_rw_224",
    "maxvit_tiny_rw_224", "convnextv2_atto", "tiny_vit_5m_224", "fastvit_t8", "mambaout_femto",
) + tuple(timm.list_models("test_*"))  # fmt: skip
"""timm families that differ in layout (timm's own test_* models are its smallest of several)."""


def test_every_name_the_mixins_add_is_prefixed():
    assert ADDED and all(name.startswith("effbench_") for name in ADDED), sorted(ADDED)


def attributes(model: nn.Module) -> set[str]:
    """What `model.NAME` can resolve to: its class's names, its instance dict, submodules, parameters."""
    return set(dir(model))


@pytest.mark.parametrize(
    "name", [n for n in catalog.torchvision_names() if not n.startswith("regnet")] + ["regnet_x_400mf"]
)
def test_no_torchvision_model_owns_a_name_the_mixins_add(name):
    kw = {"aux_logits": False, "init_weights": False} if name in external.AUX_CLASSIFIERS else {}
    # RegNet's builder computes widths with real tensors (no meta device): one small one stands for all.
    with torch.device("cpu" if name.startswith("regnet") else "meta"):  # meta: structure only
        model = tvm.get_model(name, **kw)
    assert not attributes(model) & ADDED


@pytest.mark.parametrize("name", TIMM_FAMILIES)
def test_no_timm_model_owns_a_name_the_mixins_add(name):
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    assert not attributes(model) & ADDED


@pytest.mark.parametrize("name", ["convnext_atto", "test_convnext", "test_byobnet", "test_nfnet"])
@pytest.mark.parametrize("freeze", ["none", "last:1"])
def test_timm_models_with_a_stages_submodule_train(name, freeze):
    """They own `stages`: before the prefix their forward called the mixin's method and raised."""
    torch.manual_seed(0)
    cfg = RunConfig(arch=f"timm:{name}", weights="none", freeze=freeze, image_size=32, dataset="synthetic")
    bundle = build_model(cfg, 10)
    model = bundle.model
    assert isinstance(model.get_submodule("stages"), nn.Module)
    trainable = {id(p) for p in trainable_parameters(model)}
    assert (len(trainable) == sum(1 for _ in model.parameters())) == (freeze == "none")
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    opt = torch.optim.SGD(trainable_parameters(model), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        loss = nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32, generator=gen)), torch.tensor([1, 2]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    assert torch.isfinite(loss)
    changed = {id(p) for k, p in model.named_parameters() if not torch.equal(before[k], p)}
    assert changed and changed <= trainable

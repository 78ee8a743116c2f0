"""FLOPs per image: counted by PyTorch on one real step, per image, and leaving no trace.

References written apart from torch's counter: `conv_reference` (the per-layer formula) and the
published forward GMACs of whole models.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from effbench.config import RunConfig
from effbench.measure.flops import flops_per_image, forward_flops_per_image, step_flops
from effbench.models import build_model


def small_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3, padding=1),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 5),
    )


def batch(n: int, size: int = 4, classes: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 3, size, size, generator=g), torch.randint(0, classes, (n,), generator=g)


def direct_count(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    m = copy.deepcopy(model)
    m.train()
    with FlopCounterMode(display=False) as c:
        torch.nn.functional.cross_entropy(m(x), y).backward()
    return c.get_total_flops() / x.shape[0]


def test_matches_the_hand_count_for_a_small_net():
    # conv1 fwd 2*3*4*9*16 + weight grad (no input grad) = 6912; conv2 fwd 4608 + 2 grads = 13824;
    # linear 64->5 fwd 640 + 2 grads = 1920; BN/ReLU are not counted. Total per image: 22656.
    x, y = batch(4)
    assert flops_per_image(small_net(), x, y) == pytest.approx(22656.0)


def test_matches_flop_counter_and_is_per_image():
    model = small_net()
    x4, y4 = batch(4)
    x2, y2 = batch(2)
    got = flops_per_image(model, x4, y4)
    assert got == pytest.approx(direct_count(model, x4, y4), rel=0.01)
    assert flops_per_image(model, x2, y2) == pytest.approx(got, rel=1e-9)


def test_leaves_no_trace():
    model = small_net()
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = batch(4)
    flops_per_image(model, x, y)
    after = model.state_dict()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k  # weights and BN running stats / num_batches_tracked
    assert all(p.grad is None for p in model.parameters())
    assert not model.training  # mode restored


def test_existing_gradients_are_kept():
    model = small_net()
    x, y = batch(4)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    flops_per_image(model, x, y)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert model.training


def test_custom_loss_and_autocast():
    model = small_net()
    x, y = batch(2)
    calls = []

    def loss_fn(logits, labels):
        calls.append(logits.shape)
        return logits.float().logsumexp(1).mean()

    assert flops_per_image(model, x, y, loss_fn=loss_fn) == pytest.approx(22656.0)
    assert calls == [torch.Size([2, 5])]
    bf16 = flops_per_image(model, x, y, autocast_dtype=torch.bfloat16, device_type="cpu")
    assert bf16 == pytest.approx(22656.0)  # FLOPs do not depend on the dtype


def test_resnet18_cifar():
    cfg = RunConfig(arch="resnet18", dataset="cifar10", weights="none")
    built = build_model(cfg, 10)
    model = getattr(built, "model", built)  # a ModelBundle holds the module
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    got = flops_per_image(model, x, y)
    assert got == pytest.approx(direct_count(model, x, y), rel=0.01)
    assert got > 1e8  # a CIFAR ResNet-18 is ~0.56 GFLOPs forward per image
    x4, y4 = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    assert flops_per_image(model, x4, y4) == pytest.approx(got, rel=1e-6)
    for k, v in before.items():
        assert torch.equal(v, model.state_dict()[k]), k


def conv_reference(n, cin, cout, size, k, *, stride=1, padding=0, groups=1) -> tuple[int, int]:
    """(forward, backward without input grad) FLOPs: 2*N*Cout*Hout*Wout*(Cin/groups)*kh*kw, from the shapes."""
    out = (size + 2 * padding - k) // stride + 1  # PyTorch's Conv2d output size, dilation 1
    forward = 2 * n * cout * out * out * (cin // groups) * k * k
    return forward, forward  # grad-weight costs one forward; grad-input (when asked) another


CONVS = {  # name: (cin, cout, size, kernel, stride, padding, groups)
    "depthwise": (16, 16, 8, 3, 1, 1, 16),
    "grouped": (16, 32, 8, 3, 1, 1, 4),
    "pointwise": (16, 24, 8, 1, 1, 0, 1),
    "strided": (8, 12, 9, 3, 2, 0, 1),
}


@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize("input_grad", [False, True])
def test_one_conv_matches_the_per_layer_formula(name, input_grad):
    cin, cout, size, k, stride, padding, groups = CONVS[name]
    conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=padding, groups=groups)
    n = 3
    x = torch.randn(n, cin, size, size, requires_grad=input_grad)
    got = step_flops(conv, x, None, loss_fn=lambda out, _y: out.sum())
    forward, grad_weight = conv_reference(n, cin, cout, size, k, stride=stride, padding=padding, groups=groups)
    backward = grad_weight + (forward if input_grad else 0)
    assert got.forward_per_image == forward / n
    assert got.per_image - got.forward_per_image == backward / n


def test_the_stock_counter_overcounts_a_depthwise_backward():
    # why the custom mapping exists: torch 2.14.1 counts the weight gradient as if groups were 1
    conv = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
    x = torch.randn(2, 16, 8, 8, requires_grad=True)
    with FlopCounterMode(display=False) as stock:
        conv(x).sum().backward()
    forward, grad_weight = conv_reference(2, 16, 16, 8, 3, padding=1, groups=16)
    assert stock.get_total_flops() != forward + grad_weight + forward
    assert step_flops(conv, x, None, loss_fn=lambda out, _y: out.sum()).per_image * 2 == 3 * forward


# Published forward GMACs at native sizes: Tan & Le 2019 (EfficientNet) Table 2 (b0 0.39B, b3 1.8B,
# b5 9.9B FLOPs, which that paper counts as multiply-adds); He et al. 2016 Table 1 (ResNet-18 1.8e9,
# 1.82 in torchvision's model card). Forward FLOPs = 2 x MACs.
PUBLISHED_GMACS = {
    ("efficientnet-b0", 224): 0.39,
    ("efficientnet-b3", 300): 1.8,
    ("efficientnet-b5", 456): 9.9,
    ("resnet18", 224): 1.82,
}


def meta_model(arch: str, size: int) -> torch.nn.Module:
    # shapes only: the meta device runs no arithmetic, so b5 at 456 px counts in about a second
    with torch.device("meta"):
        return build_model(RunConfig(arch=arch, dataset="synthetic", weights="none", image_size=size), 1000).model


@pytest.mark.parametrize(("arch", "size"), sorted(PUBLISHED_GMACS))
def test_whole_models_match_published_gmacs(arch, size):
    model = meta_model(arch, size)
    forward = forward_flops_per_image(model, torch.empty(1, 3, size, size, device="meta"))
    assert forward == pytest.approx(2e9 * PUBLISHED_GMACS[(arch, size)], rel=0.05)


def test_b0_full_fine_tune_training_step_is_about_three_forwards():
    model = meta_model("efficientnet-b0", 224)
    got = step_flops(model, torch.empty(2, 3, 224, 224, device="meta"), torch.zeros(2, dtype=torch.long, device="meta"))
    assert got.forward_per_image == pytest.approx(2 * 0.39e9, rel=0.05)
    assert got.per_image == pytest.approx(3 * 2 * 0.39e9, rel=0.10)


def test_resnet18_training_step_is_unchanged():
    # 10.65 GFLOP at 224 px: 3 x forward less the first conv's input gradient (issue 11)
    model = meta_model("resnet18", 224)
    got = step_flops(model, torch.empty(2, 3, 224, 224, device="meta"), torch.zeros(2, dtype=torch.long, device="meta"))
    stem = conv_reference(1, 3, 64, 224, 7, stride=2, padding=3)[0]
    assert got.per_image == pytest.approx(3 * got.forward_per_image - stem, rel=1e-9)
    assert got.per_image / 1e9 == pytest.approx(10.65, abs=0.01)

"""FLOPs per image: counted by PyTorch on one real step, per image, and leaving no trace."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from effbench.measure.flops import flops_per_image


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
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
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


def test_resnet18_cifar_if_available():
    models = pytest.importorskip("effbench.models")
    build_model = getattr(models, "build_model", None)
    if build_model is None:
        pytest.skip("effbench.models.build_model not there yet")
    from effbench.config import RunConfig

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

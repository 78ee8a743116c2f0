"""The training loss and --label-smoothing, against the formula written out here (Szegedy et al. 2016,
sec. 7: the target is (1 - eps) on the true class plus eps spread evenly over all K classes)."""

from __future__ import annotations

import math

import pytest
import torch

from effbench.run.runtime import Runtime
from effbench.run.train import TrainStep

CPU_FP32 = Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)


def smoothed_cross_entropy(logits: list[list[float]], labels: list[int], eps: float) -> float:
    """Mean over the batch of -sum_k q_k log p_k, with q = (1 - eps) one-hot + eps / K, in plain Python."""
    total = 0.0
    for row, y in zip(logits, labels, strict=True):
        top = max(row)
        log_z = top + math.log(sum(math.exp(v - top) for v in row))
        log_p = [v - log_z for v in row]
        k = len(row)
        total += -sum(((1 - eps) * (i == y) + eps / k) * lp for i, lp in enumerate(log_p))
    return total / len(labels)


def _step(eps: float) -> tuple[TrainStep, torch.nn.Linear]:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the loss is read before any update counts
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)
    return TrainStep(model, optimizer, scheduler, CPU_FP32, False, label_smoothing=eps), model


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
def test_the_training_loss_is_the_smoothed_cross_entropy(eps):
    step, model = _step(eps)
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    with torch.no_grad():
        logits = model(x).tolist()
    out = step((x, y))
    loss, correct, images = out.loss, out.correct(), out.images
    assert images == 8 and 0 <= int(correct) <= 8
    assert float(loss) == pytest.approx(smoothed_cross_entropy(logits, y.tolist(), eps), rel=1e-5)
    if eps > 0:  # the option changes the number: a smoothing that was dropped would fail here
        assert abs(float(loss) - smoothed_cross_entropy(logits, y.tolist(), 0.0)) > 1e-3


class _Batches:
    """The data object train_epochs reads: fixed batches for training and validation."""

    def __init__(self, train: list, val: list) -> None:
        self.train, self.val, self.steps_per_epoch = train, val, len(train)

    def set_epoch(self, _epoch: int) -> None:
        pass


def test_train_epochs_smooths_training_and_validates_with_plain_cross_entropy():
    """A confident model (large weights) and lr 0: the smoothed training loss and the plain validation
    loss are far apart, and each must equal its own formula over the same fixed weights."""
    from effbench.config import RunConfig, resolve_for_device
    from effbench.run.train import train_epochs

    eps = 0.2
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5)
    with torch.no_grad():
        model.weight.mul_(20)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(4, 6, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(2)]
    cfg = resolve_for_device(
        RunConfig(dataset="synthetic", epochs=1, warmup_steps=0, log_interval=1, label_smoothing=eps), "cpu"
    )
    (epoch,) = train_epochs(model, _Batches(batches, batches), optimizer, scheduler, CPU_FP32, cfg)
    with torch.no_grad():
        logits = [model(x).tolist() for x, _ in batches]
    labels = [y.tolist() for _, y in batches]
    smoothed = sum(smoothed_cross_entropy(lg, y, eps) for lg, y in zip(logits, labels, strict=True)) / 2
    plain = sum(smoothed_cross_entropy(lg, y, 0.0) for lg, y in zip(logits, labels, strict=True)) / 2
    assert abs(smoothed - plain) > 0.1  # far beyond the tolerance below: the checks tell them apart
    assert epoch.train_loss == pytest.approx(smoothed, rel=1e-5)
    assert epoch.val_loss == pytest.approx(plain, rel=1e-5)


def test_the_option_is_recorded_and_its_range_enforced():
    from effbench.config import RunConfig
    from effbench.errors import EffbenchError

    assert RunConfig(dataset="synthetic", label_smoothing=0.1).to_dict()["label_smoothing"] == 0.1
    for bad in (-0.1, 1.0):
        with pytest.raises(EffbenchError) as info:
            RunConfig(dataset="synthetic", label_smoothing=bad)
        assert info.value.option == "--label-smoothing"

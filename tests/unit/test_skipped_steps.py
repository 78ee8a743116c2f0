"""fp16 steps the loss scaler skips (docs/gpu-truth.md, round four, N9): counted, and the LR schedule stays.

torch's GradScaler runs on the CPU (torch.amp.GradScaler("cpu"); its inf check and scale update have CPU
kernels), so the scaler here is the real one: a fake fp16 runtime turns it on (train.grad_scaler: enabled
when precision is fp16) without autocast. A hook makes the weight's gradient inf on chosen steps; torch then
skips the optimizer step (torch/amp/grad_scaler.py:371) and halves the scale (:487-488, backoff_factor 0.5).
"""

from __future__ import annotations

import pytest
import torch

from effbench.config import RunConfig, resolve_for_device
from effbench.run.runtime import Runtime
from effbench.run.train import TrainStep, train_epochs

FP16_ON_CPU = Runtime(device=torch.device("cpu"), precision="fp16", autocast_dtype=None)
FP32 = Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)
INF_AT = {1, 3}  # 0-based steps whose gradients overflow


def _model_with_overflows(inf_at: set[int]) -> torch.nn.Linear:
    """A linear model whose weight gradient is inf on the steps in `inf_at` (counted by backward passes)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    backwards = iter(range(1_000))
    model.weight.register_hook(lambda g: g * float("inf") if next(backwards) in inf_at else g)
    return model


def _step(rt: Runtime, inf_at: set[int]) -> tuple[TrainStep, torch.nn.Linear]:
    model = _model_with_overflows(inf_at)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    return TrainStep(model, optimizer, scheduler, rt, False, label_phases=False), model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(8, 4, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


def test_a_skipped_step_is_reported_and_does_not_advance_the_lr_schedule():
    step, model = _step(FP16_ON_CPU, INF_AT)
    assert step.scaler.is_enabled()
    flags, lrs, weights = [], [], []
    for _ in range(5):
        before = model.weight.detach().clone()
        *_, skipped = step(_batch())
        flags.append(skipped)
        lrs.append(step.optimizer.param_groups[0]["lr"])
        weights.append(torch.equal(before, model.weight))
    # torch's own skip: the weights did not move on exactly the overflowing steps
    assert weights == [i in INF_AT for i in range(5)]
    # 3 optimizer steps, so the schedule advanced 3 times (before: 5, once per call)
    assert step.scheduler.last_epoch == 3
    assert lrs[1] == lrs[0] and lrs[3] == lrs[2]  # the LR held still over each skipped step
    assert flags == [False, True, False, True, False]
    assert step.scaler.get_scale() == 2.0**16 / 4  # halved once per skip (init 2**16, grad_scaler.py:126)


def test_without_a_loss_scaler_no_step_is_called_skipped():
    step, _ = _step(FP32, INF_AT)  # fp32: the scaler is off and the inf weight update goes through
    flags = [step(_batch())[3] for _ in range(3)]
    assert flags == [None, None, None] and step.scheduler.last_epoch == 3


def _cfg(steps: int, warmup: int) -> RunConfig:
    return resolve_for_device(
        RunConfig(dataset="synthetic", epochs=1, warmup_steps=warmup, log_interval=10, max_steps=steps), "cpu"
    )


class _Batches:
    def __init__(self, n: int) -> None:
        self.train, self.val, self.steps_per_epoch = [_batch()] * n, [], n

    def set_epoch(self, _epoch: int) -> None:
        pass


def test_the_loop_counts_skipped_steps_in_warmup_and_measured_and_keeps_them_timed():
    # Steps 1 and 3 of 6 skip; warm-up is 2 steps, so one skip in each tally. A skipped step still ran its
    # forward and backward: it stays in the steps, images and times (and so in throughput), counted apart.
    model = _model_with_overflows(INF_AT)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    seen: list[tuple[bool, bool | None]] = []
    (epoch,) = train_epochs(
        model, _Batches(6), optimizer, scheduler, FP16_ON_CPU, _cfg(6, 2),
        on_step=lambda warmup, _t, _images, skipped: seen.append((warmup, skipped)),
    )  # fmt: skip
    assert [s for _w, s in seen] == [False, True, False, True, False, False]
    assert (epoch.warmup.steps, epoch.warmup.skipped_steps) == (2, 1)
    assert (epoch.measured.steps, epoch.measured.skipped_steps, epoch.measured.images) == (4, 1, 32)
    assert len(epoch.measured.step_times_s) == 4  # the skipped step is timed with the others
    assert scheduler.last_epoch == 4
    row = epoch.record()
    assert row.skipped_steps == 2
    assert epoch.measured.record().skipped_steps == 1 and epoch.warmup.record().skipped_steps == 1


def test_without_a_loss_scaler_the_records_have_no_skipped_steps():
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    (epoch,) = train_epochs(model, _Batches(3), optimizer, scheduler, FP32, _cfg(3, 1))
    assert epoch.measured.skipped_steps is None
    # absent from the files, not 0: nothing could be skipped (results.write_json writes the fields set)
    assert "skipped_steps" not in epoch.record().model_dump(exclude_unset=True)
    assert "skipped_steps" not in epoch.measured.record().model_dump(exclude_unset=True)


@pytest.mark.parametrize(("a", "b", "total"), [(None, None, None), (1, None, 1), (None, 2, 2), (1, 2, 3)])
def test_the_runs_tallies_add_their_skipped_steps(a, b, total):
    from effbench.run.record import added
    from effbench.run.timing import Tally

    assert added(Tally(skipped_steps=a), Tally(skipped_steps=b)).skipped_steps == total

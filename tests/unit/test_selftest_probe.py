"""The selftest's outside view of a training step (selftest/probe.py) and its timing row, on the CPU."""

from __future__ import annotations

import contextlib
import time

import torch

from effbench.selftest.checks import FAIL, PASS, timing_vs_events
from effbench.selftest.probe import Probe


class _SlowForward(torch.nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.fc(x)


def test_a_probed_step_starts_at_the_models_forward_not_at_the_loss_module():
    """The loss module is a root forward too: starting the step there left the model's forward out (the first
    GPU run read 0.09 s of events against the harness's 0.17 s)."""
    model, criterion = _SlowForward(0.05), torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(2, 4), torch.tensor([0, 1])
    walls = []
    probe = Probe().install()
    try:
        for _ in range(3):
            t0 = time.perf_counter()
            loss = criterion(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            walls.append(time.perf_counter() - t0)
    finally:
        probe.remove()
    steps = probe.step_times_s()
    assert len(steps) == 3
    assert all(0.05 <= s <= wall for s, wall in zip(steps, walls, strict=True)), (steps, walls)


class _SlowTransform(torch.nn.Module):
    """A parameter-free module run in the training thread while the batch loads (torchvision's v1 transforms)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.05)
        return x


def test_a_parameter_free_module_run_while_the_batch_loads_opens_no_step():
    model, criterion, transform = _SlowForward(0.0), torch.nn.CrossEntropyLoss(), _SlowTransform()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    y = torch.tensor([0, 1])
    probe = Probe().install()
    try:
        for _ in range(3):
            x = transform(torch.randn(2, 4))  # with grad enabled, as a --workers 0 loader runs it
            loss = criterion(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        probe.remove()
    steps = probe.step_times_s()
    assert len(steps) == 3 and max(steps) < 0.05, steps


def test_a_forward_that_raises_does_not_stop_the_steps_after_it():
    class Raises(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError("no meta kernel")  # a probe forward that fails (external models' check)

    model = _SlowForward(0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = Probe().install()
    try:
        with contextlib.suppress(NotImplementedError):
            Raises()(torch.randn(2, 4))
        for _ in range(2):
            loss = model(torch.randn(2, 4)).sum()
            loss.backward()
            opt.step()
    finally:
        probe.remove()
    assert len(probe.step_times_s()) == 2  # the failed forward's open depth had hidden every step after the first


def test_a_validation_forward_opens_no_step():
    model = _SlowForward(0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = Probe().install()
    try:
        with torch.no_grad():
            model(torch.randn(2, 4))
        opt.step()  # no forward with grad before it: no interval
    finally:
        probe.remove()
    assert probe.step_times_s() == []


def test_the_timing_row_passes_within_three_percent_with_one_interval_per_step():
    events = [0.010] * 20  # 0.200 s
    row = timing_vs_events(20, 0.205, events)
    assert (row.status, row.measured, row.reference) == (PASS, "0.2050 s", "0.2000 s")
    assert "20 measured steps" in row.reason
    assert timing_vs_events(20, 0.207, events).status == FAIL  # 3.5% over
    assert timing_vs_events(20, 0.1691, [0.0898 / 20] * 20).status == FAIL  # the first GPU run's figures
    assert timing_vs_events(21, 0.200, events).status == FAIL  # a step with no interval

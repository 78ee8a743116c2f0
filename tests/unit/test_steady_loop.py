"""The training loop's data-driven decisions on the simulated device (tests/simdevice.py): `--warmup-steps auto`
ends the warm-up after a slow start a fixed count measures, and `--until ci:X%` stops a steady run sooner than
a noisy one (issue 48). The rules themselves: tests/unit/test_steady_state.py."""

from __future__ import annotations

import random

import pytest
import torch

import simdevice as sd
from effbench.config import RunConfig, resolve_for_device
from effbench.errors import EffbenchError
from effbench.run.optim import build_optimizer, build_scheduler
from effbench.run.train import train_epochs

US = 1e-6
COST = sd.OpCost(host_s=1 * US, device_s=10 * US, event_host_s=0.0)


class _Slowing(torch.nn.Module):
    """A real model whose forward also costs `extra_s(i)` of host time on its i-th training call (an autotune-like
    slow start, or noise); its evaluation forwards cost nothing extra."""

    def __init__(self, sim: sd.SimDevice, extra_s) -> None:
        super().__init__()
        self.sim, self.extra_s, self.calls = sim, extra_s, 0
        self.net = sd.sim_model(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.sim.host(self.extra_s(self.calls))
            self.calls += 1
        return self.net(x)


def _run(extra_s, *, steps: int, warmup: int | str | None = None, until: str | None = None, log_interval: int = 5):
    sim = sd.SimDevice(COST)
    model = _Slowing(sim, extra_s)
    cfg = resolve_for_device(
        RunConfig(dataset="synthetic", epochs=1, max_steps=steps, warmup_steps=warmup, until=until,
                  log_interval=log_interval, optimizer_impl="foreach", batch_size=4),
        "cpu",
    )  # fmt: skip
    opt = build_optimizer(cfg, model.parameters())
    data = sd.SimData(train=sd.HostLoader(sim, steps, host_s=0.0, copy_s=0.0), val=[], steps_per_epoch=steps)
    with sim.installed():
        (epoch,) = train_epochs(model, data, opt, build_scheduler(opt, steps), sim.runtime(), cfg)
    return epoch


def _steady_step_s() -> float:
    """One steady step's seconds: a run with no slow start, its measured mean."""
    epoch = _run(lambda i: 0.0, steps=12, warmup=2)
    return epoch.measured.time_s / epoch.measured.steps


def test_auto_leaves_out_a_slow_start_that_a_fixed_five_measures():
    # The first 12 training steps each cost 5 ms more (cuDNN autotuning, lazy module loading, allocator growth):
    # a fixed warm-up of 5 puts 7 of them into the headline; auto ends the warm-up once the step times settle.
    steady = _steady_step_s()

    def slow_start(i: int) -> float:
        return 5e-3 if i < 12 else 0.0

    fixed = _run(slow_start, steps=120, warmup=5)
    auto = _run(slow_start, steps=120)  # the default: auto
    mean = {name: e.measured.time_s / e.measured.steps for name, e in (("fixed", fixed), ("auto", auto))}
    assert mean["fixed"] > 1.5 * steady  # the slow steps are in it
    assert mean["auto"] == pytest.approx(steady, rel=0.02)
    rule = auto.warmup_rule
    assert rule is not None and rule.rule == "mser-5" and rule.settled
    # cut after the slow start; ended at the second check in a row that found the same cut (checks every 5 steps)
    assert 12 <= rule.cut_at_step <= rule.steps <= 50
    assert rule.steps % 5 == 0 and auto.warmup.steps == rule.steps and auto.measured.steps == 120 - rule.steps
    assert fixed.warmup_rule is not None and fixed.warmup_rule.rule == "fixed" and fixed.warmup.steps == 5


def test_auto_on_a_run_too_short_for_the_rule_keeps_five_and_says_why():
    epoch = _run(lambda i: 0.0, steps=20)
    rule = epoch.warmup_rule
    assert epoch.warmup.steps == 5 and rule is not None and rule.rule == "auto, too few steps"
    assert rule.reason.startswith("20 steps: too few for MSER-5")


def test_auto_that_never_settles_stops_at_the_cap_and_says_so():
    # step times that keep growing: no steady state; the warm-up ends at half the run, marked not settled
    epoch = _run(lambda i: i * 2e-4, steps=40)
    rule = epoch.warmup_rule
    assert rule is not None and not rule.settled and rule.steps == rule.cap == 20
    assert "cap" in rule.reason and epoch.measured.steps == 20


def test_until_stops_a_steady_run_sooner_than_a_noisy_one():
    # --until ci:5% with windows of 5 steps: a steady step's windows agree at once, so the run stops at the
    # rule's minimum of 10 windows; a noisy step needs more windows for the same interval.
    rng = random.Random(0)
    noise = [rng.uniform(0.0, 6e-4) for _ in range(400)]
    steady = _run(lambda i: 3e-4, steps=400, warmup=5, until="ci:5%")
    noisy = _run(lambda i: noise[i], steps=400, warmup=5, until="ci:5%")
    assert steady.until is not None and steady.until.reached and steady.until.windows == 10
    assert steady.measured.steps == 50 and steady.steps == 55  # the epoch stopped there, validation after it
    assert noisy.until is not None and noisy.until.reached and noisy.until.windows > 10
    assert noisy.until.half_width_pct is not None and noisy.until.half_width_pct <= 5.0
    assert noisy.measured.steps > steady.measured.steps


def test_until_judges_the_windows_that_end_at_its_wait():
    # Issue 48's measurement found the windows counted from the warm-up's end (auto: a multiple of 5) while the
    # checks come at the waits (every --log-interval steps): warm-up ending at step 35 made each check at 40, 50,
    # ... judge windows that ended at 45, 55, ..., i.e. 5 steps stale and mixing two waits' steps. Windows now end
    # at the waits; the part window between the warm-up's end and the first wait counts in no interval.
    from effbench.analysis import steady_state as ss
    from effbench.run.steady import UntilStop

    until = UntilStop(ss.IntervalStop(relative_half_width=0.5, min_windows=3), "ci:50%", window_steps=10)
    for _ in range(5):  # steps 36..40: after the warm-up, before the first wait, slow (0.2 s for 8 images)
        until.observe(0.2, 8)
    assert not until.check() and until.windows_img_s == []
    for rate in (100.0, 110.0, 120.0):  # three whole windows, one rate each: 41..50, 51..60, 61..70
        for _ in range(10):
            until.observe(8 / rate, 8)
        until.check()
    assert until.windows_img_s == pytest.approx([100.0, 110.0, 120.0])
    assert until.stopped and until.record().windows == 3 and until.record().steps == 35


def test_the_recorded_interval_is_the_one_read_back_from_the_steps():
    # The loop tallies --until's windows as it runs; analysis/windows.wait_windows reads them back from the step
    # rows (steps.csv) by the waits' positions. A warm-up of 7 steps leaves steps 8..10 a part window before the
    # first wait at 10, which neither counts; both must give the same windows, figure and interval.
    from effbench.analysis import steady_state as ss
    from effbench.analysis.windows import wait_windows

    rng = random.Random(2)
    noise = [rng.uniform(0.0, 6e-4) for _ in range(400)]
    epoch = _run(lambda i: noise[i], steps=400, warmup=7, until="ci:5%", log_interval=5)
    u = epoch.until
    assert u is not None and u.reached
    back = wait_windows(epoch.step_rows, 5)
    assert len(back) == u.windows and u.steps == epoch.measured.steps == 3 + 5 * u.windows
    got = ss.window_interval(back)
    assert got is not None
    assert (u.throughput_img_s, u.half_width_pct) == (
        pytest.approx(got.throughput_img_s),
        pytest.approx(got.half_width_pct),
    )
    assert (u.ci_low_img_s, u.ci_high_img_s) == (pytest.approx(got.ci_low_img_s), pytest.approx(got.ci_high_img_s))
    assert u.lag1_autocorrelation == pytest.approx(got.lag1_autocorrelation)
    whole = [r for r in epoch.step_rows if not r.warmup][3:]  # the windows' own steps, images over time
    assert u.throughput_img_s == pytest.approx(
        sum(r.images for r in whole) / sum(r.data_time_s + r.compute_time_s for r in whole)
    )


def test_until_records_when_the_steps_ran_out_first():
    rng = random.Random(1)
    noise = [rng.uniform(0.0, 3e-3) for _ in range(40)]
    epoch = _run(lambda i: noise[i], steps=40, warmup=5, until="ci:0.1%")
    assert epoch.until is not None and not epoch.until.reached and epoch.measured.steps == 35
    assert epoch.until.reason == "the run's steps ran out before the interval was reached"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("warmup_steps", "abc", "--warmup-steps: 'abc' is neither auto nor a whole number"),
        ("until", "1%", "--until: '1%' is not a stopping rule"),
        ("until", "ci:1", "--until: 'ci:1' lacks the percent sign"),
        ("until", "ci:0%", "--until: 'ci:0%': the half-width must be above 0% and below 100%"),
    ],
)
def test_bad_rules_are_one_line_errors_naming_the_option(field, value, message):
    with pytest.raises(EffbenchError) as e:
        RunConfig(dataset="synthetic", **{field: value})
    assert str(e.value).startswith(message.split(": ", 1)[1]) or message in f"{e.value.option}: {e.value}"


def test_the_rules_parse_to_canonical_values():
    assert RunConfig(dataset="synthetic", warmup_steps="auto").warmup_steps is None
    assert RunConfig(dataset="synthetic", warmup_steps="7").warmup_steps == 7
    assert RunConfig(dataset="synthetic", until="CI:2.50%").until == "ci:2.5%"


def test_the_configs_short_run_bound_is_the_rules_own():
    # config.py cannot import the rule (a circle through the record's schema): its bound, written there, must be
    # the rule's: the floor and 3 batches of 5, twice over for the first-half restriction
    from effbench.analysis import steady_state as ss
    from effbench.config import AUTO_MIN_STEPS

    assert AUTO_MIN_STEPS == 2 * (ss.MIN_WARMUP_STEPS + ss.MIN_BATCHES * ss.BATCH_STEPS)


def test_wait_windows_follow_the_epochs_waits_not_the_warmups_end():
    # steps.csv rows as the file has them (strings): epoch 1 has 7 steps, 2 of warm-up; epoch 2 has 6. Windows of
    # 3: epoch 1's steps 1-3 hold warm-up (out), 4-6 count, 7 is a short last one (out); epoch 2's 1-3 and 4-6 count.
    from effbench.analysis.windows import wait_windows

    def row(epoch: int, step: int, warm: bool, seconds: float) -> dict[str, str]:
        return {"epoch": str(epoch), "step": str(step), "warmup": str(warm), "images": "4", "loss": "",
                "top1": "", "data_time_s": "0", "compute_time_s": str(seconds)}  # fmt: skip

    rows = [row(1, s, s <= 2, 1.0) for s in range(1, 8)] + [
        row(2, s, False, 0.5 if s <= 3 else 0.25) for s in range(1, 7)
    ]
    assert wait_windows(rows, 3) == pytest.approx([12 / 3.0, 12 / 1.5, 12 / 0.75])

"""Pure: where a run's warm-up ends (MSER-5) and when its measurement has said enough (a relative 95% interval).

Two rules decided from the data rather than fixed counts; the training loop will apply them (warm-up
"auto", `--until ci:X%`), this module only decides. No torch, no numpy.

    warmup = mser5(step_times_s, min_steps=1, max_steps=200)
    warmup.warmup_steps, warmup.settled, warmup.reason        -> 16, True, "MSER-5 minimum at step 16: ..."

    rule = IntervalStop(relative_half_width=parse_until("ci:1%"))
    stop_decision(rule, window_throughputs_img_s, steps=300, elapsed_s=21.0)
                                                              -> StopDecision(done=True, reason="interval reached", ...)

**Warm-up: MSER-5.** The Marginal Standard Error Rule (White 1997, "An effective truncation heuristic for bias
reduction in simulation output", Simulation 69(6):323-334) truncates a series where what is left is known best:
for a series Y_1..Y_n it picks the d that minimises

    MSER(d) = 1/(n-d)^2 * sum_{i=d+1..n} (Y_i - mean(Y_{d+1..n}))^2

(the squared standard error of the truncated mean, up to a factor (n-d-1)/(n-d)): deleting a slow start lowers
the spread more than the fewer points raise it, deleting steady points does not. MSER-5 applies it to the means
of consecutive batches of 5 (Spratt 1998; White, Cobb & Spratt 2000, "A comparison of five steady-state
truncation heuristics for simulation", Proc. Winter Simulation Conference, 755-760, which found it the most
reliable of the five), so d is a multiple of 5 steps and one outlier weighs a fifth. As those papers do, d is
searched over the first half of the series only: MSER's denominator makes a point near the end look good
whatever came before, and a minimum in the second half means the run is too short to show a steady state.

Here the steps before `min_steps` (the first step: compile, lazy CUDA init) are dropped before the rule looks,
batches start at `min_steps`, and a trailing part-batch is left out. The answer is `settled=False` when the
minimum is the last position the rule may pick (the cap, or half the series): the step times were still
changing there, and the cut is a bound, not a finding. On steady noise MSER-5 sometimes cuts late (a stretch
of noise can read steadier than the whole): in 500 seeded series of 200 steps at 5% noise it cut at the floor
in 68% and within 4 batches in 89%, the rest up to the half. A late cut costs measured steps, not accuracy.

**Stopping: a relative 95% interval.** After each throughput window, stop when the 95% interval of the run's
throughput (window_interval) has a half-width of at most X, once there are at least `min_windows` windows; or
when the cap in steps or seconds is reached. This is the sequential procedure for a relative precision in Law &
Kelton, "Simulation Modeling and Analysis" (3rd ed., 2000, ch. 9), with their advice of at least 10 first
samples (MIN_WINDOWS), on batch means (the windows) with two changes:
- The interval is of the windows' seconds per image, whose mean's reciprocal is the headline (all images over
  all time, for windows of equal images): the interval is about the figure printed, not about the windows'
  mean img/s, which exceeds it: by about the windows' squared CV when they are steady, by 2 and 7 times on a
  loaded VM.
- It is widened for the windows' lag-1 autocorrelation r by sqrt((1 + r') / (1 - r')): the AR(1) adjustment of
  ASAP3 (Steiger, Alexopoulos & Wilson 2005, ACM TOMACS 15(1):39-73). r' is r corrected for its bias,
  r + (1 + 4r) / n (Kendall 1954, for an AR(1) series with an estimated mean), kept in [0, RHO_MAX].
  Windows of one run on a VM drift together: 11 of 12 runs of 10-step windows on this project's CPU VM read
  r = 0.38 to 0.92 (docs/performance-history.md), and the plain interval missed a longer run's figure by 2.3-9.7x
  its half-width; at r = 0.7 the plain interval is 2.4x too narrow.
Stopping when the interval first looks narrow favours runs whose spread happened to read low, so the stopped
interval covers the long-run figure somewhat less often than 95%: the tests check the coverage on seeded
independent and AR(1) windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from effbench.analysis import stats
from effbench.errors import EffbenchError

RULE_MSER5 = "mser-5"
BATCH_STEPS = 5
"""MSER-5's batch: means of 5 consecutive steps (White, Cobb & Spratt 2000)."""
MIN_BATCHES = 3
"""The fewest batches the rule judges: with the first-half restriction, 3 lets it choose between no cut and one
batch, each leaving at least 2 batches to measure a spread on."""
MIN_WARMUP_STEPS = 1
"""Always excluded: the first step holds compilation, lazy module loading and CUDA context set-up."""

UNTIL_OPTION = "--until"
RHO_MAX = 0.9
"""The largest lag-1 autocorrelation the interval is widened for (a factor of 4.4): beyond it the windows are a
trend, not noise about a level, and no interval from one run says where the level is."""
DRIFT_R = 0.5
"""A lag-1 autocorrelation above which the reports say the speed drifted while measuring: 10 independent
windows read above it in 1.0% of 4000 seeded trials, 30 in none; the widening there is 1.7x or more."""
MIN_WINDOWS = 10
"""The fewest windows before the interval may stop a run (Law & Kelton's n0 >= 10 for the sequential
procedure): fewer, and a run whose first windows agree by chance stops on an interval that means little."""


# --- warm-up ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Warmup:
    """Where the warm-up ends, by which rule, and whether the step times had settled there."""

    warmup_steps: int
    """Steps excluded from the start of the series, `min_steps` included."""
    rule: str
    """The rule that chose it: "mser-5"."""
    settled: bool
    """False when the cut is a bound, not a finding: the cap, half the series, or too few steps."""
    reason: str
    """One line: why the warm-up ends there."""


def batch_means(xs: Sequence[float], size: int = BATCH_STEPS) -> list[float]:
    """Means of consecutive batches of `size`; a trailing part-batch is left out."""
    return [math.fsum(xs[i : i + size]) / size for i in range(0, len(xs) - size + 1, size)]


def mser(values: Sequence[float]) -> list[float]:
    """MSER(d) for d = 0 .. len(values) - 1: the squared deviations of values[d:] about their mean over
    (n - d)^2 (White 1997). Summed from the end with Welford's update, so a constant tail gives exactly 0."""
    n = len(values)
    out = [0.0] * n
    centre, m2 = 0.0, 0.0
    for d in range(n - 1, -1, -1):
        count = n - d  # values[d:], one more each time round
        delta = values[d] - centre
        centre += delta / count
        m2 += delta * (values[d] - centre)
        out[d] = max(m2, 0.0) / count**2
    return out


def mser5(step_times_s: Sequence[float], *, min_steps: int = MIN_WARMUP_STEPS, max_steps: int | None = None) -> Warmup:
    """The warm-up MSER-5 finds in `step_times_s` (each step's seconds, in order): at least `min_steps`, at most
    `max_steps` (None: only half the series bounds it). Raises ValueError for a time that is not a finite
    number >= 0 or bounds that contradict each other (the caller's mistake, not the user's)."""
    if min_steps < 0 or (max_steps is not None and max_steps < min_steps):
        raise ValueError(f"need 0 <= min_steps <= max_steps, got {min_steps} and {max_steps}")
    times = [float(t) for t in step_times_s]
    if any(not (math.isfinite(t) and t >= 0.0) for t in times):
        raise ValueError("step times must be finite and non-negative")
    z = batch_means(times[min_steps:])
    if len(z) < MIN_BATCHES:
        needed = min_steps + MIN_BATCHES * BATCH_STEPS
        return Warmup(min(min_steps, len(times)), RULE_MSER5, False,
                      f"{len(times)} steps: too few for MSER-5, which needs {needed}")  # fmt: skip
    half = len(z) // 2
    cap = half if max_steps is None else min(half, (max_steps - min_steps) // BATCH_STEPS)
    stat = mser(z)
    d = min(range(cap + 1), key=lambda i: (stat[i], i))  # the earliest of equal minima
    steps = min_steps + d * BATCH_STEPS
    if d < cap:
        return Warmup(steps, RULE_MSER5, True,
                      f"MSER-5 minimum at step {steps}: the step times after it vary least about their mean")  # fmt: skip
    if max_steps is not None and cap < half:
        return Warmup(steps, RULE_MSER5, False,
                      f"the cap of {max_steps} warm-up steps came before the step times settled")  # fmt: skip
    return Warmup(steps, RULE_MSER5, False,
                  f"the step times were still changing at step {steps}, half of the {len(times)} steps: "
                  "run more steps")  # fmt: skip


# --- stopping ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IntervalStop:
    """`--until ci:X%`: measure until the 95% interval of the throughput (window_interval) is within X of it."""

    relative_half_width: float
    """X as a fraction: 0.01 for ci:1%."""
    min_windows: int = MIN_WINDOWS
    """Windows measured before the interval may stop the run."""
    max_steps: int | None = None
    """Measured steps after which the run stops whatever its interval (None: no step cap)."""
    max_seconds: float | None = None
    """Measured seconds after which the run stops whatever its interval (None: no time cap)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.relative_half_width) and 0.0 < self.relative_half_width < 1.0):
            raise ValueError(f"relative_half_width must be in (0, 1), got {self.relative_half_width}")
        if self.min_windows < stats.MIN_SAMPLES_FOR_CI:
            raise ValueError(f"min_windows must be at least {stats.MIN_SAMPLES_FOR_CI}, got {self.min_windows}")


@dataclass(frozen=True)
class WindowInterval:
    """The 95% interval of a run's throughput from its windows (window_interval)."""

    throughput_img_s: float
    """The windows' images over their time: the reciprocal of the mean seconds per image."""
    ci_low_img_s: float
    ci_high_img_s: float
    """math.inf when the interval of the seconds per image reaches 0."""
    half_width_pct: float
    """The seconds per image's half-width as a percent of their mean: +-1% there is +-1% of the throughput to
    first order (the throughput's interval is [1/(m+h), 1/(m-h)], a little wider above than below)."""
    lag1_autocorrelation: float
    """The windows' lag-1 autocorrelation r as estimated (lag1_autocorrelation), before the bias correction and
    the bounds of the widening."""
    windows: int


def lag1_autocorrelation(xs: Sequence[float]) -> float:
    """r1 = sum (x_i - m)(x_{i+1} - m) / sum (x_i - m)^2, the usual estimate (Box & Jenkins); 0 without spread."""
    m = math.fsum(xs) / len(xs)
    dev = [x - m for x in xs]
    var = math.fsum(d * d for d in dev)
    if var == 0.0:
        return 0.0
    return math.fsum(a * b for a, b in zip(dev[:-1], dev[1:], strict=True)) / var


def window_interval(throughputs_img_s: Sequence[float], confidence: float = stats.CONFIDENCE) -> WindowInterval | None:
    """The interval --until stops on, from windows of equal steps (their img/s, each finite and > 0): the
    Student's t interval of the mean seconds per image, widened for the lag-1 autocorrelation (module
    docstring). None below 3 windows."""
    xs = [float(x) for x in throughputs_img_s]
    if any(not (math.isfinite(x) and x > 0.0) for x in xs):
        raise ValueError("window throughputs must be finite and positive")
    n = len(xs)
    if n < stats.MIN_SAMPLES_FOR_CI:
        return None
    spi = [1.0 / x for x in xs]
    m = math.fsum(spi) / n
    r = lag1_autocorrelation(spi)
    kept = min(max(r + (1.0 + 4.0 * r) / n, 0.0), RHO_MAX)  # Kendall's bias correction, then the bounds
    h = stats.t_ppf(0.5 + confidence / 2, n - 1) * stats.stdev(spi) / math.sqrt(n) * math.sqrt((1 + kept) / (1 - kept))
    return WindowInterval(throughput_img_s=1.0 / m, ci_low_img_s=1.0 / (m + h),
                          ci_high_img_s=1.0 / (m - h) if h < m else math.inf, half_width_pct=100.0 * h / m,
                          lag1_autocorrelation=r, windows=n)  # fmt: skip


@dataclass(frozen=True)
class StopDecision:
    """Whether to stop measuring, why, and the interval reached so far."""

    done: bool
    reason: Literal["interval reached", "cap", "measuring"]
    windows: int
    interval: WindowInterval | None = None
    """The interval reached so far (window_interval); None below 3 windows."""

    @property
    def half_width_pct(self) -> float | None:
        """The interval's half-width as a percent of the figure (0.8 for +-0.8%); None below 3 windows."""
        return None if self.interval is None else self.interval.half_width_pct


def stop_decision(
    rule: IntervalStop, throughputs_img_s: Sequence[float], *, steps: int = 0, elapsed_s: float = 0.0
) -> StopDecision:
    """Decide after a window: `throughputs_img_s` are the windows' img/s so far (each > 0), `steps` and
    `elapsed_s` the measured steps and seconds so far (for the caps). The interval wins over a cap reached at
    the same window."""
    got = window_interval(throughputs_img_s)
    n = len(throughputs_img_s)
    if got is not None and n >= rule.min_windows and got.half_width_pct <= 100.0 * rule.relative_half_width:
        return StopDecision(True, "interval reached", n, got)
    capped = (rule.max_steps is not None and steps >= rule.max_steps) or (
        rule.max_seconds is not None and elapsed_s >= rule.max_seconds
    )
    return StopDecision(capped, "cap" if capped else "measuring", n, got)


def parse_until(value: str) -> float:
    """`--until ci:1%` -> 0.01: the 95% interval's half-width, as a fraction of the mean, to measure until."""
    text = value.strip()
    fix = "give the 95% interval's half-width as a percent of the mean, e.g. --until ci:1%"
    if not text.lower().startswith("ci:"):
        raise EffbenchError(UNTIL_OPTION, f"{value!r} is not a stopping rule; {fix}")
    number = text[3:].strip()
    if not number.endswith("%"):
        raise EffbenchError(UNTIL_OPTION, f"{value!r} lacks the percent sign, so 0.01 and 1% would read alike; {fix}")
    try:
        pct = float(number[:-1])
    except ValueError:
        raise EffbenchError(UNTIL_OPTION, f"{number[:-1]!r} in {value!r} is not a number; {fix}") from None
    if not (math.isfinite(pct) and 0.0 < pct < 100.0):
        raise EffbenchError(UNTIL_OPTION, f"{value!r}: the half-width must be above 0% and below 100%; {fix}")
    return pct / 100.0

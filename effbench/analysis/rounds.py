"""Pure: one configuration's runs in a sweep's rounds (`sweep --rounds K`) -> their mean and the interval across them.

    pool([RoundFigure(1, 74.9, 73.0, 76.9), RoundFigure(2, 70.1, 69.1, 71.2), RoundFigure(3, 58.4, 55.1, 61.8)])
        -> Pooled(summary=<mean 67.8, 95% CI [46.7, 88.9]>, missed=3, with_interval=3, spread_pct=24.4)

A run's interval comes from its own windows: it sees how the speed varied while it ran, and nothing slower
(a VM whose speed holds one level for tens of seconds, then moves; a GPU that warms up over minutes). Runs of
the same configuration at different moments see those changes as differences between runs. pyperf measures
every benchmark in 20 processes for this reason, and Google Benchmark's --benchmark_repetitions with random
interleaving likewise: the mean over the runs, with the Student's t interval of the runs' figures (df = K - 1),
is the figure and its uncertainty; the runs whose own interval misses that mean show how much the machine
moved between them. Each run's figure is its headline (all its images over its time), weighted equally: a run
is one sample of the machine. No torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from effbench.analysis import stats

TOO_FEW_FIX = "raise --rounds"


@dataclass(frozen=True)
class RoundFigure:
    """One run of a configuration: its round, its throughput (None: it did not finish ok) and its own interval."""

    round: int
    throughput_img_s: float | None
    ci_low_img_s: float | None = None
    ci_high_img_s: float | None = None


@dataclass(frozen=True)
class Pooled:
    """A configuration over its rounds."""

    rounds: tuple[RoundFigure, ...]
    """Every round of it, in round order, finished or not."""
    summary: stats.Summary | None
    """Of the finished rounds' throughputs: mean and the 95% t interval across them (none below 3 rounds, or
    with none finished)."""
    missed: int
    """Finished rounds whose own interval leaves out the mean over rounds: the machine's speed moved between
    runs by more than any one run saw."""
    with_interval: int
    """Finished rounds that have an interval of their own (3 windows or more)."""
    spread_pct: float | None
    """(slowest .. fastest round) / mean, in percent; None with fewer than 2 finished rounds."""

    @property
    def finished(self) -> list[float]:
        return [r.throughput_img_s for r in self.rounds if r.throughput_img_s is not None]

    @property
    def half_width_pct(self) -> float | None:
        """The interval's half-width as a percent of the mean: what --until ci:X% would compare."""
        s = self.summary
        if s is None or s.half_width is None or s.mean <= 0:
            return None
        return 100 * s.half_width / s.mean


def pool(figures: Sequence[RoundFigure]) -> Pooled:
    """The mean over the finished rounds, its 95% Student's t interval, and how many rounds' own intervals miss it."""
    ordered = tuple(sorted(figures, key=lambda r: r.round))
    done = [r for r in ordered if r.throughput_img_s is not None]
    if not done:
        return Pooled(ordered, None, 0, 0, None)
    xs = [float(r.throughput_img_s) for r in done if r.throughput_img_s is not None]
    summary = stats.summarize(xs, lower=0.0, too_few_fix=TOO_FEW_FIX)
    own = [r for r in done if r.ci_low_img_s is not None and r.ci_high_img_s is not None]
    missed = sum(1 for r in own if not (r.ci_low_img_s or 0.0) <= summary.mean <= (r.ci_high_img_s or 0.0))
    spread = 100 * (max(xs) - min(xs)) / summary.mean if len(xs) > 1 and summary.mean > 0 else None
    return Pooled(ordered, summary, missed, len(own), spread)

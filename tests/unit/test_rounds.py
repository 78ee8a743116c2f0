"""analysis/rounds.py: a configuration's runs over `sweep --rounds`, checked against the formula written out here."""

from __future__ import annotations

import math
import random

import pytest

from effbench.analysis.rounds import Pooled, RoundFigure, pool

# Student's t 0.975 quantiles (any t table), written out apart from stats.t_ppf
T975 = {2: 4.302653, 4: 2.776445, 9: 2.262157}


def t_interval(xs):
    n = len(xs)
    m = sum(xs) / n
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = T975[n - 1] * s / math.sqrt(n)
    return m, m - h, m + h


def test_three_rounds_mean_interval_spread_and_the_runs_whose_own_interval_misses_the_mean():
    figures = [RoundFigure(3, 58.4, 55.1, 61.8), RoundFigure(1, 74.9, 73.0, 76.9), RoundFigure(2, 70.1, 66.0, 74.0)]
    p = pool(figures)
    m, lo, hi = t_interval([74.9, 70.1, 58.4])
    assert [r.round for r in p.rounds] == [1, 2, 3]  # in round order, whatever order they came in
    assert p.summary.mean == pytest.approx(m) and p.summary.ci_low == pytest.approx(lo, rel=1e-5)
    assert p.summary.ci_high == pytest.approx(hi, rel=1e-5)
    assert p.half_width_pct == pytest.approx(100 * (hi - lo) / 2 / m, rel=1e-5)
    assert p.spread_pct == pytest.approx(100 * (74.9 - 58.4) / m)
    # mean 67.8: round 1's [73.0, 76.9] and round 3's [55.1, 61.8] leave it out, round 2's [66.0, 74.0] holds it
    assert (p.missed, p.with_interval) == (2, 3)


def test_a_round_that_did_not_finish_is_kept_and_not_counted():
    p = pool([RoundFigure(1, 100.0, 99.0, 100.5), RoundFigure(2, None), RoundFigure(3, 104.0), RoundFigure(4, 98.0)])
    assert len(p.rounds) == 4 and p.finished == [100.0, 104.0, 98.0]
    assert p.summary.n == 3 and p.with_interval == 1 and p.missed == 1  # the mean 100.67 is outside [99, 100.5]
    assert pool([RoundFigure(1, 100.0, 99.0, 101.0), RoundFigure(3, 104.0), RoundFigure(4, 98.0)]).missed == 0


def test_below_three_finished_rounds_there_is_no_interval_and_the_note_says_raise_rounds():
    p = pool([RoundFigure(1, 100.0, 98.0, 102.0), RoundFigure(2, 110.0, 108.0, 112.0)])
    assert p.summary.ci_low is None and p.half_width_pct is None and "--rounds" in p.summary.note
    assert p.spread_pct == pytest.approx(100 * 10 / 105)
    assert pool([RoundFigure(1, None), RoundFigure(2, None)]) == Pooled(
        (RoundFigure(1, None), RoundFigure(2, None)), None, 0, 0, None
    )


def test_coverage_of_the_mean_over_rounds_where_each_run_sits_at_its_own_level():
    # each run meets the machine at a level drawn afresh (a VM's speed between runs, sd 8%), and measures it to
    # 1%: a run's own interval holds the long-run mean rarely, the interval over 5 rounds about 95% of the time
    rng = random.Random(20261129)
    trials, covered, own_held = 2000, 0, 0
    for _ in range(trials):
        figures = []
        for r in range(1, 6):
            level = 100.0 * (1 + rng.gauss(0, 0.08))
            x = level * (1 + rng.gauss(0, 0.005))
            figures.append(RoundFigure(r, x, x * 0.99, x * 1.01))
        p = pool(figures)
        covered += p.summary.ci_low <= 100.0 <= p.summary.ci_high
        own_held += figures[0].ci_low_img_s <= 100.0 <= figures[0].ci_high_img_s
    assert 0.93 <= covered / trials <= 0.97
    assert own_held / trials < 0.2

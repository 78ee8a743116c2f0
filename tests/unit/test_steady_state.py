"""steady_state.py: MSER-5's warm-up on synthetic step times and the relative-interval stopping rule.

MSER is checked against its definition (White 1997) written out here with exact fractions; the stopping rule
against a long reference run of the same distribution, over seeded trials."""

from __future__ import annotations

import random
import statistics
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effbench import config
from effbench.analysis import stats
from effbench.analysis import steady_state as ss
from effbench.errors import EffbenchError

STEP_S = 0.07  # a measured b0 step on the H200 (issue 48); MSER is scale-free, so only the shapes below matter


def _steps(seed: int, n: int = 200, cv: float = 0.05) -> list[float]:
    """n steady step times: STEP_S with Gaussian noise of `cv` of it."""
    r = random.Random(seed)
    return [STEP_S * (1.0 + r.gauss(0.0, cv)) for _ in range(n)]


# --- MSER against its definition --------------------------------------------------------------------------
def _mser_by_hand(batch: list[Fraction], d: int) -> Fraction:
    """White (1997): MSER(d) = 1/(n-d)^2 * sum over i > d of (Z_i - mean of Z_{d+1..n})^2, exactly."""
    tail = batch[d:]
    centre = sum(tail, Fraction(0)) / len(tail)
    return sum(((z - centre) ** 2 for z in tail), Fraction(0)) / len(tail) ** 2


def test_mser_matches_its_definition_on_a_tiny_series():
    # 22 steps: 4 batches of 5 (the last 2 steps, a part-batch, are left out), in milliseconds
    ms = [90, 80, 70, 60, 50, 30, 35, 28, 31, 26, 20, 22, 21, 19, 23, 21, 20, 22, 20, 22, 400, 500]
    batches = [Fraction(sum(ms[i : i + 5]), 5) for i in range(0, 20, 5)]  # 70, 30, 21, 21
    assert batches == [70, 30, 21, 21]
    want = [_mser_by_hand(batches, d) for d in range(4)]
    # by hand for d = 1: tail 30, 21, 21 has mean 24, squares 36 + 9 + 9 = 54, over 3^2
    assert want[1] == Fraction(54, 9)
    got = ss.mser(ss.batch_means([m / 1000 for m in ms]))
    assert got == pytest.approx([float(w) / 1000**2 for w in want], rel=1e-9, abs=1e-15)
    # the rule picks the smallest MSER among d = 0 .. 2 (the first half of 4 batches) after no floor
    w = ss.mser5([m / 1000 for m in ms], min_steps=0)
    best = min(range(3), key=lambda d: want[d])
    assert w.warmup_steps == 5 * best == 10 and w.rule == "mser-5"
    assert w.settled is False  # d = 2 is the last it may pick: the run is too short to call it settled


def test_a_constant_tail_has_zero_mser_exactly():
    assert ss.mser([3.0, 1.0, 1.0, 1.0])[1:] == [0.0, 0.0, 0.0]


# --- the warm-up on synthetic series ----------------------------------------------------------------------
SLOW_STEPS = 12  # an autotune-like start: the first 12 of 200 steps at 10x


def _slow_start(seed: int) -> list[float]:
    xs = _steps(seed)
    return [10 * x if i < SLOW_STEPS else x for i, x in enumerate(xs)]


def test_a_fixed_five_measures_slow_steps():
    # the fixed default before auto, 5 steps, still what a run too short for the rule gets: steps 5..11 of the
    # slow start would be measured
    assert config.few_steps_warmup(200, compile=False) < SLOW_STEPS


def test_a_slow_start_is_cut_where_it_ends_when_the_rest_is_flat():
    xs = [10 * STEP_S] * SLOW_STEPS + [STEP_S] * (200 - SLOW_STEPS)
    w = ss.mser5(xs)
    # batches start at the floor (step 1): 1, 6, 11, 16; the first free of slow steps starts at 16
    assert (w.warmup_steps, w.settled) == (16, True)
    assert "step 16" in w.reason


def test_a_slow_start_is_never_measured_and_mostly_cut_at_its_end():
    cuts = [ss.mser5(_slow_start(seed)) for seed in range(200)]
    assert all(w.warmup_steps >= SLOW_STEPS for w in cuts)
    # with noisy steps MSER-5 sometimes cuts later (a flat stretch of noise can read steadier than the whole):
    # in 500 seeds 64% cut at 16 and 95% by 56; a cut is never early
    assert sum(w.warmup_steps <= SLOW_STEPS + 5 for w in cuts) >= 0.5 * len(cuts)
    assert statistics.median(w.warmup_steps for w in cuts) <= SLOW_STEPS + 5
    assert sum(w.settled for w in cuts) >= 0.95 * len(cuts)


def test_a_steady_series_gets_a_small_cut():
    cuts = [ss.mser5(_steps(seed)).warmup_steps for seed in range(200)]
    # in 500 seeds: 68% at the floor, 89% by step 21 (4 batches)
    assert statistics.median(cuts) == ss.MIN_WARMUP_STEPS
    assert sum(c <= ss.MIN_WARMUP_STEPS + 4 * ss.BATCH_STEPS for c in cuts) >= 0.8 * len(cuts)


@pytest.mark.parametrize("slope", [0.01, -0.004])
def test_a_trend_never_settles(slope):
    # step times that keep growing (a leak) or keep shrinking (a cache still filling) over all 200 steps
    for seed in range(20):
        xs = [x * (1 + slope * i) for i, x in enumerate(_steps(seed, cv=0.02))]
        w = ss.mser5(xs)
        assert w.settled is False, (seed, w)
        assert "still changing" in w.reason and w.warmup_steps == 1 + 5 * (199 // 5 // 2)


def test_the_cap_bounds_the_warmup_and_says_so():
    xs = [10 * STEP_S] * 40 + _steps(0)
    w = ss.mser5(xs, max_steps=20)
    assert (w.warmup_steps, w.settled) == (16, False)  # 1 + 3 batches: the last start within the cap
    assert "cap of 20" in w.reason
    assert ss.mser5(xs, max_steps=60).settled is True


def test_too_few_steps_are_not_judged():
    w = ss.mser5([STEP_S] * 15)  # 14 after the floor: 2 whole batches
    assert (w.warmup_steps, w.settled) == (1, False) and "too few" in w.reason
    assert ss.mser5([STEP_S] * 16).settled is True  # 3 batches: a flat series settles at the floor


def test_bad_times_and_bounds_are_refused():
    with pytest.raises(ValueError):
        ss.mser5([0.1, float("nan")] * 10)
    with pytest.raises(ValueError):
        ss.mser5([0.1, -0.1] * 10)
    with pytest.raises(ValueError):
        ss.mser5([0.1] * 30, min_steps=5, max_steps=4)


@given(
    times=st.lists(st.floats(min_value=1e-4, max_value=10.0), min_size=0, max_size=120),
    floor=st.integers(min_value=0, max_value=8),
    cap=st.one_of(st.none(), st.integers(min_value=8, max_value=80)),
    scale=st.integers(min_value=-4, max_value=4),
)
def test_the_cut_stays_in_bounds_and_ignores_units(times, floor, cap, scale):
    w = ss.mser5(times, min_steps=floor, max_steps=cap)
    batches = max(len(times) - floor, 0) // ss.BATCH_STEPS
    assert w.warmup_steps >= min(floor, len(times))
    assert w.warmup_steps <= min(len(times), floor + ss.BATCH_STEPS * (batches // 2))
    if cap is not None:
        assert w.warmup_steps <= cap
    if batches >= ss.MIN_BATCHES:
        assert (w.warmup_steps - floor) % ss.BATCH_STEPS == 0
    # seconds or milliseconds: a power of two scales every MSER value exactly, so the same cut
    assert ss.mser5([t * 2.0**scale for t in times], min_steps=floor, max_steps=cap) == w


# --- the stopping rule ------------------------------------------------------------------------------------
MEAN_IMG_S = 1000.0


def _windows(seed: int, cv: float, rho: float = 0.0, n: int = 20000) -> list[float]:
    """n windows' img/s whose seconds per image are 1/MEAN_IMG_S with noise of `cv` of it, an AR(1) series of
    lag-1 autocorrelation `rho` (rho 0: independent): a long run of them reads MEAN_IMG_S, images over time."""
    r = random.Random(seed)
    e, out = r.gauss(0.0, 1.0), []
    for _ in range(n):
        out.append(MEAN_IMG_S / (1.0 + cv * e))
        e = rho * e + (1.0 - rho * rho) ** 0.5 * r.gauss(0.0, 1.0)
    return out


def _measure_until(
    rule: ss.IntervalStop, seed: int, cv: float, rho: float = 0.0
) -> tuple[list[float], ss.StopDecision]:
    """Windows until the rule stops; 10 steps a window, 1 s a window."""
    series = _windows(seed, cv, rho, n=5000)
    for n in range(1, len(series) + 1):
        d = ss.stop_decision(rule, series[:n], steps=10 * n, elapsed_s=1.0 * n)
        if d.done:
            return series[:n], d
    raise AssertionError("never stopped")


def _reference(cv: float, rho: float = 0.0) -> float:
    """A long run of the same distribution, its own seed: 20000 windows of equal images, images over time."""
    series = _windows(10**6, cv, rho)
    return len(series) / sum(1.0 / x for x in series)


def _covers(d: ss.StopDecision, ref: float) -> bool:
    assert d.interval is not None
    return d.interval.ci_low_img_s <= ref <= d.interval.ci_high_img_s


def _plain(xs: list[float]) -> tuple[float, float]:
    """The windows' mean img/s and the t interval's half-width: the rule before the widening (stats.t_ppf is
    checked against published tables in test_stats)."""
    return statistics.fmean(xs), stats.t_ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


def test_the_interval_reached_agrees_with_a_long_reference_run():
    # The reference run's figure lies inside the stopped run's interval in nearly 95% of seeded trials. Windows at
    # 2% spread, stopped at a 1% interval, take about 20 windows: stopping on a narrow-looking interval costs
    # some coverage (0.945 in 400 trials; 0.960 at 1% spread, 0.958 at 5%). The bound is 0.94 less 3 binomial
    # standard errors of 400 trials; a 3-window minimum reads 0.89 here and fails.
    # Issue 48 asked for "at least 19 of 20 seeded trials": a calibrated 95% interval meets that in 74% of
    # 20-seed sets, so 20 seeds pass or fail by the seeds.
    cv, rule = 0.02, ss.IntervalStop(relative_half_width=0.01)
    ref = _reference(cv)
    assert ref == pytest.approx(MEAN_IMG_S, rel=2e-4)
    runs = [_measure_until(rule, seed, cv) for seed in range(400)]
    assert all(d.reason == "interval reached" and d.half_width_pct <= 1.0 for _, d in runs)
    assert sum(_covers(d, ref) for _, d in runs) >= 0.905 * len(runs)


def test_drifting_windows_get_a_wider_interval_that_covers_more():
    # Windows that drift together (lag-1 autocorrelation 0.7, as 10-step windows on this project's CPU VM read)
    # make the plain t interval too narrow: it stops in about 14 windows and covers 0.60. Widened for the
    # autocorrelation, the rule measures about 4x the windows and covers 0.78 in 400 trials: better, not 95%
    # (docs/methodology.md). Bounds: 3 binomial standard errors from those figures.
    cv, rho, rule = 0.02, 0.7, ss.IntervalStop(relative_half_width=0.01)
    ref = _reference(cv, rho)
    runs = [_measure_until(rule, seed, cv, rho) for seed in range(400)]
    assert sum(_covers(d, ref) for _, d in runs) >= 0.72 * len(runs)
    assert statistics.fmean(d.windows for _, d in runs) > 40
    assert all(d.interval.lag1_autocorrelation > 0.2 for _, d in runs if d.windows >= 40)
    plain = []
    for seed in range(400):
        series = _windows(seed, cv, rho, n=5000)
        n = next(n for n in range(10, 5000) if _plain(series[:n])[1] <= 0.01 * _plain(series[:n])[0])
        m, half = _plain(series[:n])
        plain.append(m - half <= ref <= m + half)
    assert sum(plain) <= 0.68 * len(plain)


def test_a_noisy_series_stops_later_than_a_steady_one():
    rule = ss.IntervalStop(relative_half_width=0.01)
    for seed in range(20):
        steady = _measure_until(rule, seed, 0.005)[1]
        noisy = _measure_until(rule, seed, 0.03)[1]
        assert steady.windows <= rule.min_windows + 5  # at 0.5% spread the interval is about +-0.4% at 10
        assert noisy.windows > steady.windows, seed


def test_the_cap_ends_a_run_whose_interval_is_still_wide():
    rule = ss.IntervalStop(relative_half_width=0.001, max_steps=300)
    xs, d = _measure_until(rule, 0, 0.05)
    assert (d.done, d.reason, d.windows) == (True, "cap", 30)
    assert d.half_width_pct is not None and d.half_width_pct > 0.1
    timed = _measure_until(ss.IntervalStop(relative_half_width=0.001, max_seconds=12.0), 0, 0.05)[1]
    assert (timed.done, timed.reason, timed.windows) == (True, "cap", 12)


def test_no_stop_before_the_minimum_windows():
    rule = ss.IntervalStop(relative_half_width=0.5)
    d = ss.stop_decision(rule, [1000.0, 1001.0, 999.0])
    assert (d.done, d.reason, d.windows) == (False, "measuring", 3) and d.half_width_pct < 1
    assert ss.stop_decision(rule, []) == ss.StopDecision(False, "measuring", 0)
    assert ss.stop_decision(rule, [1000.0, 1001.0]).half_width_pct is None  # below 3 windows: no interval


def test_lag1_autocorrelation_by_hand():
    # 1..5: mean 3, deviations -2..2, sum of squares 10, lagged products 2 + 0 + 0 + 2 = 4
    assert ss.lag1_autocorrelation([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(0.4)
    assert ss.lag1_autocorrelation([1.0, -1.0, 1.0, -1.0]) == pytest.approx(-0.75)  # -3 / 4
    assert ss.lag1_autocorrelation([7.0, 7.0, 7.0]) == 0.0


def test_the_interval_is_of_the_seconds_per_image_widened_as_documented():
    # Windows of 10 images taking 1, 0.8, 1.25, 0.5 and 2 s: 10, 12.5, 8, 20, 5 img/s; 50 images in 5.55 s.
    xs = [10.0, 12.5, 8.0, 20.0, 5.0]
    spi = [0.1, 0.08, 0.125, 0.05, 0.2]  # their seconds per image
    m = 0.111  # 5.55 s / 50 images
    dev = [x - m for x in spi]
    r = sum(a * b for a, b in zip(dev[:-1], dev[1:], strict=True)) / sum(d * d for d in dev)
    kept = min(max(r + (1 + 4 * r) / 5, 0.0), 0.9)
    half = 2.776445 * statistics.stdev(spi) / 5**0.5 * ((1 + kept) / (1 - kept)) ** 0.5  # t(0.975, 4)
    got = ss.window_interval(xs)
    assert got is not None and got.windows == 5
    assert got.throughput_img_s == pytest.approx(50 / 5.55)  # the headline, not the windows' mean (11.1)
    assert got.lag1_autocorrelation == pytest.approx(r)
    assert got.half_width_pct == pytest.approx(100 * half / m, rel=1e-6)
    assert (got.ci_low_img_s, got.ci_high_img_s) == (pytest.approx(1 / (m + half)), pytest.approx(1 / (m - half)))
    d = ss.stop_decision(ss.IntervalStop(relative_half_width=0.9, min_windows=5), xs)
    assert d.done and d.interval == got and d.half_width_pct == got.half_width_pct
    assert ss.window_interval([10.0, 10.0]) is None


def test_an_interval_reaching_zero_seconds_is_unbounded_above():
    got = ss.window_interval([1.0, 1000.0, 1.0])
    assert got is not None and got.ci_high_img_s == float("inf") and got.ci_low_img_s > 0


@pytest.mark.parametrize("value, want", [("ci:1%", 0.01), ("ci:0.5%", 0.005), (" CI: 2.5% ", 0.025)])
def test_until_parses_a_percent(value, want):
    assert ss.parse_until(value) == pytest.approx(want)


@pytest.mark.parametrize(
    "value, says",
    [
        ("1%", "not a stopping rule"),
        ("ci:0.01", "lacks the percent sign"),
        ("ci:abc%", "is not a number"),
        ("ci:0%", "above 0%"),
        ("ci:-1%", "above 0%"),
        ("ci:100%", "below 100%"),
        ("ci:nan%", "above 0%"),
        ("ci:inf%", "above 0%"),
    ],
)
def test_until_refuses_bad_values_in_one_line(value, says):
    with pytest.raises(EffbenchError) as e:
        ss.parse_until(value)
    assert e.value.option == "--until" and says in e.value.message and "ci:1%" in e.value.message
    assert "\n" not in str(e.value)


def test_a_rule_refuses_bounds_that_mean_nothing():
    with pytest.raises(ValueError):
        ss.IntervalStop(relative_half_width=0.0)
    with pytest.raises(ValueError):
        ss.IntervalStop(relative_half_width=0.01, min_windows=2)
    with pytest.raises(ValueError):
        ss.stop_decision(ss.IntervalStop(relative_half_width=0.01), [1000.0, 0.0, 1000.0])

"""stats.py and windows.py: pure statistics checked against published t tables and by property."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effbench.analysis import stats
from effbench import results
from effbench.analysis import windows
from effbench.errors import EffbenchError
from effbench.schema import Windows

# Two-sided 95% critical values of Student's t (any statistics textbook's t table).
T_975 = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 10: 2.228, 30: 2.042, 120: 1.980}


@pytest.mark.parametrize("df, expected", sorted(T_975.items()))
def test_t_quantile_matches_the_table(df, expected):
    assert stats.t_ppf(0.975, df) == pytest.approx(expected, abs=1e-3)
    assert stats.t_ppf(0.025, df) == pytest.approx(-expected, abs=1e-3)


@settings(deadline=None)  # the first example imports SciPy
@given(
    p=st.floats(min_value=1e-9, max_value=1 - 1e-9).filter(lambda p: p != 0.5),
    df=st.floats(min_value=0.2, max_value=1e7),
)
def test_t_quantile_agrees_with_scipy(p, df):
    # SciPy's stdtrit (Boost's inverse incomplete beta) is written apart from this code: the reference
    scipy_stats = pytest.importorskip("scipy.stats")
    want = float(scipy_stats.t.ppf(p, df))
    # Far in a tail the answer is only as exact as the float p: 1 - p near 1 is known to half an ulp of 1 (2**-53),
    # and there the quantile goes as (1 - p) ** (-1 / df), so that error grows by 1 / df. p = 1 - 1e-9 at df 0.5
    # is known to 2.2e-7 of itself, which the two implementations split differently (1.1e-7 apart).
    conditioning = 4 * 2.0**-53 / (min(p, 1 - p) * min(df, 1.0))
    assert stats.t_ppf(p, df) == pytest.approx(want, rel=1e-7 + conditioning, abs=1e-7)


def test_t_cdf_is_symmetric_and_tends_to_the_normal():
    assert stats.t_cdf(0.0, 5) == pytest.approx(0.5)
    assert stats.t_cdf(1.3, 7) + stats.t_cdf(-1.3, 7) == pytest.approx(1.0)
    assert stats.t_cdf(1.959964, 1e6) == pytest.approx(0.975, abs=1e-4)


def test_summarize_known_sample():
    s = stats.summarize([10.0, 12.0, 14.0, 16.0, 18.0])
    assert (s.n, s.median, s.mean) == (5, 14.0, 14.0)
    assert s.stdev == pytest.approx(math.sqrt(10))
    half = 2.776445 * math.sqrt(10) / math.sqrt(5)  # t(0.975, 4) * s / sqrt(n)
    assert s.ci_low == pytest.approx(14.0 - half, rel=1e-5) and s.ci_high == pytest.approx(14.0 + half, rel=1e-5)


def test_one_sample_has_no_interval():
    s = stats.summarize([3.0])
    assert s.ci_low is None and s.half_width is None and s.median == 3.0
    with pytest.raises(ValueError):
        stats.summarize([])


def test_identical_samples_are_within_noise():
    xs = [100.0, 104.0, 98.0, 101.0]
    d = stats.difference(xs, xs)
    assert d.delta == 0.0 and d.significant is False and d.ci_low < 0 < d.ci_high


def test_clear_difference_is_significant():
    d = stats.difference([100.0, 101.0, 99.0, 100.5], [150.0, 151.0, 149.0, 150.5])
    assert d.significant is True and d.ci_low > 0 and d.relative == pytest.approx(0.5, rel=0.01)


def test_welch_degrees_of_freedom_for_equal_variances():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0]
    assert stats.difference(a, b).df == pytest.approx(6.0)  # n_a + n_b - 2 when variances and sizes match


def test_no_spread_differs_only_when_unequal():
    assert stats.difference([5.0, 5.0], [5.0, 5.0]).significant is False
    assert stats.difference([5.0, 5.0], [6.0, 6.0]).significant is True
    assert stats.difference([5.0], [6.0, 7.0]).significant is None


@given(st.lists(st.floats(min_value=1.0, max_value=1e4), min_size=3, max_size=30))
def test_interval_contains_the_mean_and_median_lies_within_the_range(xs):
    s = stats.summarize(xs)
    assert s.ci_low <= s.mean + 1e-9 and s.mean - 1e-9 <= s.ci_high
    assert min(xs) <= s.median <= max(xs)


@given(st.integers(0, 200), st.integers(1, 20))
def test_windows_cover_every_item_once(n, k):
    bounds = stats.window_bounds(n, k)
    assert sum(e - s for s, e in bounds) == n
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))
    if n:
        sizes = [e - s for s, e in bounds]
        assert len(bounds) == min(n, k) and max(sizes) - min(sizes) <= 1


def _steps(n_warm, n_meas, compute=0.1, images=4):
    rows = [{"warmup": True, "images": images, "data_time_s": 1.0, "compute_time_s": 1.0} for _ in range(n_warm)]
    rows += [{"warmup": False, "images": images, "data_time_s": 0.0, "compute_time_s": compute} for _ in range(n_meas)]
    return rows


def test_rank_windows_exclude_warmup_and_pool_the_ranks_over_the_slowest():
    fast, slow = windows.measured_steps(_steps(2, 10)), windows.measured_steps(_steps(2, 10, compute=0.2))
    w = windows.rank_windows([fast, slow], repeats=5)
    assert w["windows"] == 5 and w["steps"] == 10
    # each window: 2 steps per rank, 2 ranks x 2 x 4 images over the slow rank's 2 x 0.2 s
    assert w["throughput_img_s"] == pytest.approx([16 / 0.4] * 5)
    assert w["summary"]["throughput_img_s"]["median"] == pytest.approx(40.0)


def test_throughput_windows_from_csv_strings_and_default_count():
    rows = [{k: str(v) for k, v in r.items()} for r in _steps(1, 3)]
    w = windows.throughput_windows(rows, repeats=None)
    assert w["requested"] == windows.DEFAULT_WINDOWS and w["windows"] == 3  # fewer steps than windows
    assert windows.throughput_windows([], repeats=3)["windows"] == 0


def test_seven_steps_in_five_windows_are_2_2_1_1_1_and_every_report_says_so():
    # 7 measured steps of 4 images, step i timed 0.1 * (i + 1) s: no step dropped, the first 7 % 5 = 2
    # windows one step longer, each window's img/s its own images over its own seconds
    rows = [{"warmup": False, "images": 4, "data_time_s": 0.0, "compute_time_s": 0.1 * (i + 1)} for i in range(7)]
    w = windows.throughput_windows(rows, repeats=5)
    assert w["window_steps"] == [2, 2, 1, 1, 1] and w["steps"] == 7
    assert w["throughput_img_s"] == pytest.approx([8 / 0.3, 8 / 0.7, 4 / 0.5, 4 / 0.6, 4 / 0.7])
    typed = Windows.model_validate(w)
    assert windows.describe_windows(typed) == "5 windows (2 of 2 measured steps, 3 of 1)"
    assert windows.describe_windows(Windows.model_validate(windows.throughput_windows(rows[:5] * 2, repeats=5))) == (
        "5 windows of 2 measured steps each"
    )
    # a record written before window_steps existed: the split that made its windows
    old = {k: v for k, v in w.items() if k != "window_steps"}
    assert windows.window_sizes(Windows.model_validate(old)) == [2, 2, 1, 1, 1]
    from effbench.report import render, tables

    record = results.record_of({"schema_version": 1, "status": "ok", "throughput_windows": w})
    row = dict(tables.summary_rows(record))[tables.WINDOWS_ROW]
    assert row.endswith(" over 5 windows (2 of 2 measured steps, 3 of 1)")
    assert render.window_line(typed).startswith(
        "throughput over 5 windows (2 of 2 measured steps, 3 of 1), 7 measured steps in all: median "
    )
    assert [r[1] for r in render.window_rows(typed)] == ["2", "2", "1", "1", "1"]


@pytest.mark.parametrize(
    "measured, repeats, fix",
    [
        # 2 measured steps make at most 2 windows, and config refuses --repeats 3 there: more steps is the fix
        (2, None, "only 2 measured step(s), at most one window each: raise --max-steps or --epochs, "
                  "or lower --warmup-steps"),
        (2, 2, "only 2 measured step(s), at most one window each"),
        (1, None, "only 1 measured step(s)"),
        (6, 2, "raise --repeats to 3 or more"),  # the steps allow 3 windows: --repeats is what works
    ],
)  # fmt: skip
def test_too_few_windows_name_what_gives_an_interval(measured, repeats, fix):
    w = windows.throughput_windows(_steps(1, measured), repeats=repeats)
    note = w["summary"]["throughput_img_s"]["note"]
    assert note.startswith(f"{w['windows']} sample(s): too few for a 95% interval (needs 3; {fix}")
    assert ("--repeats" in note) == (measured >= 3)
    # a record written when the note said "raise --repeats" whatever the steps: the report says what works
    old = copy.deepcopy(w)
    old["summary"]["throughput_img_s"]["note"] = f"{w['windows']} sample(s): too few (needs 3; raise --repeats)"
    from effbench.report import tables

    record = results.record_of({"schema_version": 1, "status": "ok", "throughput_windows": old})
    row = dict(tables.summary_rows(record))[tables.WINDOWS_ROW]
    assert f"(needs 3; {fix}" in row


def test_config_refuses_the_repeats_the_old_advice_asked_for():
    # the reference for the advice above: with 3 steps, 1 of them warm-up, --repeats 3 is an error
    from effbench.config import RunConfig

    with pytest.raises(EffbenchError, match="--repeats"):
        RunConfig(device="cpu", dataset="synthetic", epochs=1, max_steps=3, warmup_steps=1, repeats=3)
    RunConfig(device="cpu", dataset="synthetic", epochs=1, max_steps=4, warmup_steps=1, repeats=3)  # 3 steps: fine


def test_windows_of_prefers_the_recorded_ones():
    recorded = {
        "schema_version": 1,
        "status": "ok",
        "throughput_windows": {"windows": 2, "throughput_img_s": [1.0, 2.0]},
    }
    assert windows.windows_of(results.record_of(recorded), _steps(0, 10)).throughput_img_s == [1.0, 2.0]
    unrecorded = results.record_of({"schema_version": 1, "status": "ok", "config": {"repeats": 2}})
    assert windows.windows_of(unrecorded, _steps(0, 10)).windows == 2
    multi = results.record_of({"schema_version": 1, "status": "ok", "world_size": 2})  # steps.csv is rank 0's only
    assert windows.windows_of(multi, _steps(0, 10)).windows == 0


def test_interval_stays_inside_the_quantitys_range():
    # --repeats 3 with one slow window: the plain t interval of the mean goes below 0
    xs = [0.2, 0.3, 5.0]
    m = sum(xs) / 3
    sd = (sum((x - m) ** 2 for x in xs) / 2) ** 0.5
    raw_low = m - 4.302652729911275 * sd / 3**0.5  # t(0.975, df=2), from a t table
    assert raw_low < 0  # the case the issue saw: a negative throughput bound
    s = stats.summarize(xs, lower=0.0)
    assert s.ci_low == 0.0 and s.ci_high == pytest.approx(m + (m - raw_low), rel=1e-6)
    share = stats.summarize([0.99, 0.5, 0.999], lower=0.0, upper=1.0)
    assert share.ci_low >= 0.0 and share.ci_high == 1.0


def test_two_samples_say_they_are_too_few_for_an_interval():
    s = stats.summarize([0.9, 2.2])  # the issue's --repeats 2 case: 0.9 [-0.5, 2.2]
    assert s.ci_low is None and s.ci_high is None and "too few" in s.note and s.median == pytest.approx(1.55)
    assert stats.summarize([1.0, 2.0, 3.0]).note is None


@pytest.mark.parametrize(
    ("n", "critical"),
    # two-sided 5% critical values of Wilcoxon's signed-rank statistic, from the printed tables (e.g.
    # Conover, Practical Nonparametric Statistics, table A12): the interval drops that many Walsh averages
    # at each end
    [(5, None), (6, 0), (7, 2), (8, 3), (9, 5), (10, 8), (12, 13), (15, 25), (20, 52), (25, 89), (30, 137)],
)
def test_signed_rank_interval_drops_the_tabled_count_of_walsh_averages(n, critical):
    xs = [2.0**i for i in range(n)][::-1]  # all Walsh averages distinct; unsorted on purpose
    got = stats.signed_rank_interval(xs)
    if critical is None:
        assert got is None
        return
    walsh = sorted((a + b) / 2 for i, a in enumerate(xs) for b in xs[i:])  # written apart
    assert len(walsh) == n * (n + 1) // 2
    estimate, low, high = got
    assert (low, high) == (walsh[critical], walsh[len(walsh) - 1 - critical])
    mid = len(walsh) // 2
    assert estimate == (walsh[mid] if len(walsh) % 2 else (walsh[mid - 1] + walsh[mid]) / 2)


def test_signed_rank_interval_shrugs_off_a_wild_sample():
    xs = [1.0 + 0.01 * ((7 * i) % 11 - 5) for i in range(30)]
    _, low, high = stats.signed_rank_interval(xs)
    _, low2, high2 = stats.signed_rank_interval(xs[:-1] + [50.0])  # one step hit by a hiccup
    assert high2 - low2 < 1.5 * (high - low) and low2 >= low - 0.01

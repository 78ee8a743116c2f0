"""The leaderboard pools a machine's repeated runs of a configuration: mean, t interval across runs, Welch on runs.

Expected figures are written out here from the formulas (t quantiles from a printed table), not from the code.
"""

from __future__ import annotations

import math

import pytest

from effbench.analysis import leaderboard as lb
from effbench.analysis.export import Run
from effbench.report import leaderboard as rl

T_975_DF2 = 4.302653  # Student's t, 0.975 quantile, 2 degrees of freedom (any printed table)


def _run(host: str, img_s: float, ci: tuple[float, float] | None = None, folder: str = "") -> Run:
    row = {"status": "ok", "throughput_img_s": img_s, "host": host, "path": folder or f"runs/{host}-{img_s}"}
    if ci is not None:
        row["throughput_ci_low_img_s"], row["throughput_ci_high_img_s"] = ci
    return Run(row, [0.99 * img_s, img_s, 1.01 * img_s])  # its windows: for the runs' own gap to the best


def _interval(xs: list[float]) -> tuple[float, float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = T_975_DF2 * sd / math.sqrt(len(xs))
    return m, m - h, m + h


def test_a_machine_with_repeated_runs_is_pooled_and_the_verdict_compares_means_over_runs():
    a, b = [100.0, 104.0, 96.0], [80.0, 82.0, 78.0]
    runs = [_run("a", x) for x in a] + [_run("b", x) for x in b]
    (g,) = lb.leaderboard(runs)
    assert [e.throughput for e in g.entries] == sorted(a + b, reverse=True)  # the runs' own rows stay
    assert [m.machine for m in g.machines] == ["a (CPU, - cores)", "b (CPU, - cores)"]
    for m, xs in zip(g.machines, (a, b), strict=True):
        mean, lo, hi = _interval(xs)
        s = m.pooled.summary
        assert m.runs == 3 and s is not None
        assert (s.mean, s.ci_low, s.ci_high) == (pytest.approx(mean), pytest.approx(lo), pytest.approx(hi))
    # Welch: delta -20, se = sqrt(16/3 + 4/3) = 2.58; at any df >= 2 the t quantile is at most 4.30, so the
    # half-width is at most 11.1 < 20: outside noise whatever the df
    assert [m.gap for m in g.machines] == ["best", lb.SLOWER]
    assert g.machines[1].relative == pytest.approx(0.8)
    assert g.verdict == (
        "all runs: fastest a (CPU, - cores) 100.0 img/s (mean of 3 runs); slowest b (CPU, - cores) 20.0% slower "
        "(slower, outside noise); same environment fields [mean of runs]"
    )


def test_machines_whose_runs_overlap_are_within_noise_and_no_machine_is_named_fastest():
    # b: mean 98, sd sqrt(21); se = sqrt(16/3 + 7) = 3.51, and even a normal quantile (1.96) gives 6.9 > 2
    runs = [_run("a", x) for x in (100.0, 104.0, 96.0)] + [_run("b", x) for x in (97.0, 103.0, 94.0)]
    (g,) = lb.leaderboard(runs)
    assert [m.gap for m in g.machines] == ["best", "within noise"]
    assert g.verdict.startswith("all runs: no fastest machine (within noise): a (CPU, - cores) 100.0 img/s")
    assert g.verdict.endswith("b (CPU, - cores) 2.0% lower; same environment fields [mean of runs]")


def test_a_machine_with_one_run_beside_repeats_is_too_few_to_judge():
    runs = [_run("a", x) for x in (100.0, 104.0, 96.0)] + [_run("b", 70.0)]
    (g,) = lb.leaderboard(runs)
    assert [(m.runs, m.gap) for m in g.machines] == [
        (3, "best"),
        (1, "too few runs to judge (needs 3 per machine, has 1)"),
    ]
    assert g.machines[1].pooled.summary is not None and g.machines[1].pooled.summary.ci_low is None


def test_runs_whose_own_interval_misses_the_machines_mean_are_counted():
    # mean 100: the run at 104 [103, 105] and at 96 [95, 97] leave it out; 100 [99, 101] holds it
    runs = [_run("a", 100.0, (99.0, 101.0)), _run("a", 104.0, (103.0, 105.0)), _run("a", 96.0, (95.0, 97.0))]
    (g,) = lb.leaderboard(runs)
    (m,) = g.machines
    assert (m.pooled.missed, m.pooled.with_interval) == (2, 3)
    assert m.pooled.spread_pct == pytest.approx(8.0)  # (104 - 96) / 100
    assert g.verdict == "all runs: only a (CPU, - cores) measured (100.0 img/s, mean of 3 runs)"


def test_one_run_per_machine_pools_nothing_and_keeps_the_runs_verdict():
    runs = [_run("a", 100.0), _run("b", 50.0)]
    (g,) = lb.leaderboard(runs)
    assert g.machines == []
    assert "[mean of runs]" not in g.verdict and "fastest a (CPU, - cores) 100.0 img/s" in g.verdict


def test_the_tables_show_each_machine_over_its_runs():
    runs = [_run("a", x, (x - 1, x + 1)) for x in (100.0, 104.0, 96.0)] + [_run("b", x) for x in (80.0, 82.0, 78.0)]
    groups = lb.leaderboard(runs)
    text = rl.render(groups, title="t", fmt="text")
    assert "Per machine, over its runs:" in text and rl.MACHINES_NOTE in text
    mean, lo, hi = _interval([100.0, 104.0, 96.0])
    (row_a,) = [r for r in rl.machine_rows(groups[0]) if r[0].startswith("a ")]
    assert row_a == ["a (CPU, - cores)", "3", "100.0", f"[{lo:.1f}, {hi:.1f}]", "104.0, 100.0, 96.0", "8.0%",
                     "2 of 3", "100.0%", "best", "-"]  # fmt: skip
    md = rl.render(groups, title="t", fmt="md")
    assert "### Per machine, over its runs" in md
    page = rl.html(groups, title="t", charts=[], problems=[])
    assert 'id="group-0-machines"' in page
    # no repeats: no such table, no note
    single = lb.leaderboard([_run("a", 100.0), _run("b", 50.0)])
    assert "Per machine" not in rl.render(single, title="t", fmt="text")

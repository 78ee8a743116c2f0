"""Each script in benchmarks/ runs with --tiny and prints its ratio table (speed is not asserted:
the figures live in docs/PERFORMANCE.md). The scripts run side by side, one thread each, so the
whole file takes about as long as the slowest script."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = (
    "harness_overhead",
    "cifar_loader",
    "food_loader",
    "smoke_e2e",
    "profiler_overhead",
    "omp_policy",
    "roofline",
    "until_sweep",
    "until_gpu",
    "rounds_agreement",
)
# Every script at --tiny, in parallel: ~80 s on 2 cores. `make test-slow` and CI's slow step run them; CI also runs
# the food benchmark's guard itself (.ci/run).
pytestmark = pytest.mark.slow
ROW = re.compile(r"^\|[^|]+\|([^|]+)\|[^|]+\| (\d+\.\d{2,5}) +\| >= [\d.]+ +\| (yes|NO) +\|", re.M)
SHARE = re.compile(r"^ (\d+) of (\d+) +$")  # a count, not a speed: its ratio is the share, and 0 of n is a finding


@pytest.fixture(scope="module")
def outputs() -> dict[str, subprocess.CompletedProcess]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--tiny"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for name in SCRIPTS
    }
    done = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=240)
        done[name] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    return done


@pytest.mark.parametrize("name", SCRIPTS)
def test_tiny_run_prints_a_ratio_table(outputs, name):
    res = outputs[name]
    assert res.returncode == 0, res.stderr[-2000:]
    assert "load average" in res.stdout and "| benchmark" in res.stdout and "| ratio" in res.stdout
    rows = ROW.findall(res.stdout)
    assert rows, res.stdout
    for ours, ratio, _ in rows:
        share = SHARE.match(ours)
        if share:  # e.g. rounds_agreement's references inside their interval: none inside is a result, not a failure
            assert float(ratio) == pytest.approx(int(share[1]) / int(share[2]), abs=0.005), ours
        else:  # a speed or time ratio
            assert float(ratio) > 0, ours


def test_the_food_benchmark_holds_the_fast_loader_against_the_decode_ceiling(outputs):
    # issue 37: the fast loader's share of what decoding the same files alone allows is printed beside the ratio
    text = outputs["food_loader"].stdout
    (line,) = [ln for ln in text.splitlines() if ln.startswith("| fast loader / decode ceiling")]
    assert "--augment seed" in text and "x 2 process(es)" in line and ">= 0.6" in line
    # the same work in 2 bare processes at once: what the ceiling's "x 2" assumes of the cores
    (bare,) = [ln for ln in text.splitlines() if ln.startswith("the ceiling's work in 2 process(es) at once")]
    shares = re.findall(r"(\d+\.\d\d) of (?:the ceiling|it)", bare)
    assert len(shares) == 2 and all(float(x) > 0 for x in shares), bare
    # and the same decode work through a DataLoader with the same workers: what any loader of these files can reach
    (only,) = [ln for ln in text.splitlines() if ln.startswith("decode only, the ceiling's work in a DataLoader")]
    shares = re.findall(r"(\d+\.\d\d) of (?:the ceiling|it)", only)
    assert "(2 workers, batch 8)" in only and len(shares) == 2 and all(float(x) > 0 for x in shares), only


def test_min_ratio_fails_the_run_below_the_floor(tmp_path):
    # the CI guard (`--min-ratio`): a floor no loader reaches must fail, naming the ratio
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "food_loader.py"), "--tiny", "--images", "64",
                          "--min-ratio", "1000"], cwd=ROOT, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert res.returncode == 1 and "below --min-ratio 1000" in res.stderr, res.stderr[-2000:]


def test_timm_compare_without_cuda_or_timm_exits_2_with_one_line():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "timm_compare.py"), "--tiny"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.strip().count("\n") == 0
    assert res.stdout == ""


def test_every_script_documents_its_commands():
    for name in (*SCRIPTS, "timm_compare"):
        text = (ROOT / "benchmarks" / f"{name}.py").read_text()
        assert f"benchmarks/{name}.py" in text and "--tiny" in text


@pytest.mark.dali
def test_dali_loaders_tiny_prints_each_backend_and_dalis_costs():
    pytest.importorskip("nvidia.dali")
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dali_loaders.py"), "--tiny", "--workers", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "load average" in res.stdout and "| backend" in res.stdout and "vs torchvision" in res.stdout
    rows = re.findall(r"^\| 0 +\| (\w+) +\|", res.stdout, re.M)
    assert rows == ["torchvision", "fast", "dali"], res.stdout
    assert re.search(r"DALI [\d.]+ adds [\d,]+ MiB installed: nvidia-dali-cuda130", res.stdout)
    assert re.search(r"start-up, build_data to the first batch.*dali [\d.]+ s", res.stdout)
    text = (ROOT / "benchmarks" / "dali_loaders.py").read_text()
    assert "benchmarks/dali_loaders.py" in text and "--tiny" in text


# Student's t 0.975 quantiles by degrees of freedom (any statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2):
# the interval until_sweep.py reports, recomputed without effbench's own t (analysis/stats.py).
T975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179,
        13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
        23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 31: 2.040, 32: 2.037,
        33: 2.035, 34: 2.032, 35: 2.030, 36: 2.028, 37: 2.026, 38: 2.024, 39: 2.023, 40: 2.021}  # fmt: skip


def step_rows(run_dir: str) -> list[dict[str, str]]:
    with open(Path(run_dir) / "steps.csv", newline="") as f:
        return list(csv.DictReader(f))


def log_windows(rows: list[dict[str, str]], window: int) -> list[float]:
    """steps.csv rows' windows between the loop's waits (every `window` steps of an epoch, by the 1-based step
    column): each whole window of measured steps, img/s; a window holding warm-up, or an epoch's short last one,
    dropped."""
    groups: dict[tuple[str, int], list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault((r["epoch"], (int(r["step"]) - 1) // window), []).append(r)
    return [
        sum(int(r["images"]) for r in part) / seconds(part)
        for part in groups.values()
        if len(part) == window and all(r["warmup"] == "False" for r in part)
    ]


def seconds(rows: list[dict[str, str]]) -> float:
    return sum(float(r["data_time_s"]) + float(r["compute_time_s"]) for r in rows)


def interval(rates: list[float]) -> tuple[float, float, float] | None:
    """docs/methodology.md's --until interval, written out: the 95% t interval of the windows' mean seconds per
    image, widened by sqrt((1 + r') / (1 - r')), r' the lag-1 autocorrelation r plus (1 + 4r) / n, kept in
    [0, 0.9]. (half-width % of the mean, low img/s, high img/s); None below 3 windows."""
    n = len(rates)
    if n < 3:
        return None
    y = [1 / x for x in rates]
    m = sum(y) / n
    dev = [v - m for v in y]
    ss = sum(d * d for d in dev)
    r = sum(a * b for a, b in zip(dev[:-1], dev[1:], strict=True)) / ss if ss else 0.0
    k = min(max(r + (1 + 4 * r) / n, 0.0), 0.9)
    h = T975[n - 1] * math.sqrt(ss / (n - 1)) / math.sqrt(n) * math.sqrt((1 + k) / (1 - k))
    return 100 * h / m, 1 / (m + h), (1 / (m - h) if h < m else math.inf)


def test_until_sweep_figures_come_from_the_run_folders(tmp_path):
    # issue 48: until_sweep.py's device times, intervals, stops and its one N are what the runs' own files say,
    # recomputed here from steps.csv with the method as docs/methodology.md states it
    out = tmp_path / "until.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "until_sweep.py"), "--tiny", "--json", str(out),
                          "--keep", str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(out.read_text())
    sizes = got["sizes"]
    window, warm, targets = sizes["log_interval"], sizes["fixed_warmup"], sorted(sizes["targets_pct"])
    assert list(got["cells"]) == ["resnet18 bs2", "resnet18 bs4"]
    for cell in got["cells"].values():
        for run in (cell["until"], cell["long"]):
            rec = json.loads((Path(run["run_dir"]) / "results.json").read_text())
            assert run["device_s"] == rec["warmup"]["time_s"] + rec["measured"]["time_s"]
        assert cell["until"]["options"]["until"] == f"ci:{targets[0]:g}%"
        assert "warmup_steps" not in cell["until"]["options"]
        assert (cell["long"]["warmup_steps"], cell["long"]["measured_steps"]) == (warm, sizes["long_steps"])

    def within(rows: list[dict[str, str]], target: float) -> bool:
        w = log_windows(rows, window)
        return len(w) >= 10 and interval(w)[0] <= target

    for target in targets:
        by = got["by_target"][f"{target:g}"]
        n = by["fixed_n"]
        longs = {name: step_rows(c["long"]["run_dir"]) for name, c in got["cells"].items()}
        # the one N: every cell's first N measured steps within the target, at no smaller grid count
        assert n is not None and all(within(rows[: warm + n], target) for rows in longs.values())
        assert not any(all(within(rows[: warm + g], target) for rows in longs.values()) for g in sizes["grid"] if g < n)
        for name, cell in got["cells"].items():
            mine = by["cells"][name]
            assert mine["fixed"]["device_s"] == pytest.approx(seconds(longs[name][: warm + n]))
            own = next(g for g in sizes["grid"] if within(longs[name][: warm + g], target))  # this cell alone
            assert (mine["own_fixed_n"], mine["own_fixed_device_s"]) == (
                own,
                pytest.approx(seconds(longs[name][: warm + own])),
            )
            rows = step_rows(cell["until"]["run_dir"])
            u = mine["until"]
            stop = next(i for i, r in enumerate(rows) if r["warmup"] == "False") + u["measured_steps"]
            measured = [r for r in rows[:stop] if r["warmup"] == "False"]
            assert u["device_s"] == pytest.approx(seconds(rows[:stop]))
            assert u["throughput_img_s"] == pytest.approx(sum(int(r["images"]) for r in measured) / seconds(measured))
            want = interval(log_windows(rows[:stop], window))
            assert u["interval"]["half_width_pct"] == pytest.approx(want[0], rel=2e-3)
            if u["reached"]:  # stopped at the first wait whose windows reach the target
                assert within(rows[:stop], target)
                earlier = [
                    i + 1
                    for i, r in enumerate(rows[: stop - 1])
                    if r["warmup"] == "False" and int(r["step"]) % window == 0
                ]
                assert not any(within(rows[:e], target) for e in earlier)
            else:
                assert stop == len(rows)
            if target == targets[0]:  # the replay lands where the run stopped
                rec = cell["until"]["until"]
                assert (u["measured_steps"], u["reached"]) == (rec["steps"], rec["reached"])
                assert rec["half_width_pct"] == pytest.approx(want[0], rel=2e-3)
                assert (rec["ci_low_img_s"], rec.get("ci_high_img_s", math.inf)) == (
                    pytest.approx(want[1], rel=1e-4),
                    pytest.approx(want[2], rel=1e-4),
                )
            ref = cell["long"]["throughput_img_s"]
            assert mine["reference_in_until_interval"] == (want[1] <= ref <= want[2])
        total = sum(by["cells"][name]["fixed"]["device_s"] for name in got["cells"])
        assert by["fixed_device_s"] == pytest.approx(total)
        assert by["until_device_s"] == pytest.approx(
            sum(by["cells"][name]["until"]["device_s"] for name in got["cells"])
        )
        # the tables print the same N and the ratio row
        assert f"ci:{target:g}%, fixed N = {n}" in res.stdout
        assert f"| device time at ci:{target:g}%, fixed / until" in res.stdout
        owns = sum(by["cells"][name]["own_fixed_device_s"] for name in got["cells"])
        assert by["own_fixed_device_s"] == pytest.approx(owns) and f"{owns:.1f} s (fixed)" in res.stdout

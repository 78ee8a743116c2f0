"""Each script in benchmarks/ runs with --tiny and prints its ratio table (speed is not asserted:
the figures live in docs/PERFORMANCE.md). The scripts run side by side, one thread each, so the
whole file takes about as long as the slowest script."""

from __future__ import annotations

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
)
# Every script at --tiny, in parallel: ~80 s on 2 cores. `make test-slow` and CI's slow step run them; CI also runs
# the food benchmark's guard itself (.ci/run).
pytestmark = pytest.mark.slow
ROW = re.compile(r"^\|[^|]+\|[^|]+\|[^|]+\| (\d+\.\d{2,5}) +\| >= [\d.]+ +\| (yes|NO) +\|", re.M)


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
    assert all(float(ratio) > 0 for ratio, _ in rows)


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

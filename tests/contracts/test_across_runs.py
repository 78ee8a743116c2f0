"""Results across runs and machines: `effbench export`, the leaderboard of `effbench report DIR`, and
the regression gates of `effbench compare --fail-if-slower / --fail-if-less-accurate`.

Hand-built run folders have steps.csv rows of 1 s each (0.1 s data wait + 0.9 s compute), so a
window of one step delivers exactly its `images` per second and the throughput windows are the
numbers chosen here. Expected intervals are written out from the textbook formulas with t
quantiles from a published table (NIST/SEMATECH e-Handbook 1.3.6.7.2), not from effbench.stats.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clitools import invoke

from effbench import results
from effbench.analysis import export as ex

ROOT = Path(__file__).resolve().parents[2]
# Two-sided 95% t quantiles t_{0.975, df} (NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
T975 = {4: 2.776, 8: 2.306}

BASE = [100.0, 110.0, 90.0, 105.0, 95.0]  # mean 100, sample variance 62.5


def _config(**over: Any) -> dict[str, Any]:
    cfg = {"arch": "resnet18", "dataset": "synthetic", "batch_size": 32, "precision": "fp32", "device": "cuda",
           "repeats": 5, "output": "/somewhere", "data_dir": "data", "gpus": 1, "nproc": None}  # fmt: skip
    cfg.update(over)
    return cfg


def make_run(
    folder: Path,
    thr: list[float],
    *,
    host: str = "node-a",
    driver: str = "580.65.06",
    clock: float = 1980.0,
    top1: float = 0.50,
    status: str = "ok",
    config: dict[str, Any] | None = None,
    headline: float | None = None,
    env_extra: dict[str, Any] | None = None,
) -> Path:
    """A run folder as `effbench run` writes it today: results.json, env.json, steps.csv (1 s per step).
    `headline`: the run's own throughput_img_s when it is to differ from the window mean (a run whose
    steps took unequal times has images/time over all steps != the mean of its windows' rates)."""
    folder.mkdir(parents=True)
    assert all(float(x).is_integer() for x in thr), "images per 1 s step: whole numbers, as a run writes them"
    images = [int(x) for x in thr]
    env = {"hostname": host, "torch": "2.14.1+cu130", "cuda_build": "13.0", "cpu_model": "AMD EPYC",
           "cpu_cores_usable": 16, "gpu_count": 1, "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}],
           "driver_version": driver, "container_runtime": "docker", "cgroup_cpu_quota_cores": None,
           "shm_size_gib": 16.0, "image": {"revision": "abc123", "flavour": "cu130"}}  # fmt: skip
    env.update(env_extra or {})
    record = {
        "schema_version": results.SCHEMA_VERSION,
        "status": status,
        "run_name": folder.name,
        "started_at": "2026-11-23T10:00:00+00:00",
        "config": config or _config(),
        "env": env,
        "command": ["effbench", "run", "--arch", "resnet18"],
        "finished_at": "2026-11-23T10:01:00+00:00",
        "wall_time_s": 60.0,
        "device": "cuda:0",
        "world_size": 1,
        "devices": 1,
        "strategy": "single",
        "precision": "fp32",
        "batch_size_per_device": 32,
        "global_batch_size": 32,
        # the keys a real run writes (fields as today's results.json), so a stricter reader still takes these folders
        "epochs": [
            {
                "epoch": 0,
                "steps": len(thr),
                "images": sum(images),
                "data_time_s": 0.1 * len(thr),
                "compute_time_s": 0.9 * len(thr),
                "total_time_s": 1.0 * len(thr),
                "train_loss": 1.0,
                "train_top1": top1,
                "val_loss": 1.2,
                "val_top1": top1,
                "val_time_s": 0.5,
                "throughput_img_s": sum(thr) / len(thr) if thr else None,
            }
        ],
        "warmup": {"steps": 1, "images": 1, "data_time_s": 0.5, "compute_time_s": 0.5, "time_s": 1.0},
        "measured": {
            "steps": len(thr),
            "images": sum(images),
            "data_time_s": 0.1 * len(thr),
            "compute_time_s": 0.9 * len(thr),
            "time_s": 1.0 * len(thr),
        },
        "ranks": [
            {"rank": 0, "local_rank": 0, "host": host, "device": "cuda:0", "images": sum(images), "steps": len(thr)}
        ],
        "throughput_img_s": headline if headline is not None else (sum(thr) / len(thr) if thr else None),
        "data_time_share": 0.1,
        "mfu": 0.25,
        "images_per_j": 4.0,
        "peak_mem_gib": 3.5,
        "final": {"train_loss": 1.0, "train_top1": top1, "val_loss": 1.2, "val_top1": top1},
        "utilization": {"gpus": [{"index": 0, "sm_clock_mhz": {"mean": clock, "max": clock}}]},
    }
    results.write_json(folder / results.RESULTS_FILE, record)
    results.write_json(folder / results.ENV_FILE, env)
    rows = [{"epoch": 0, "step": 0, "warmup": True, "images": 1, "loss": 1.0, "top1": 0.0, "data_time_s": 0.5,
             "compute_time_s": 0.5}]  # fmt: skip
    rows += [{"epoch": 0, "step": i + 1, "warmup": False, "images": t, "loss": 1.0, "top1": 0.5, "data_time_s": 0.1,
              "compute_time_s": 0.9} for i, t in enumerate(images)]  # fmt: skip
    results.write_csv(folder / results.STEPS_FILE, results.STEP_FIELDS, rows)
    return folder


def welch_equal(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% interval of mean(b) - mean(a) for equal n and equal sample variances: Welch's df is 2(n-1)."""
    n = len(a)
    assert len(b) == n and math.isclose(statistics.variance(a), statistics.variance(b))
    se = math.sqrt(statistics.variance(a) / n + statistics.variance(b) / n)
    delta = statistics.fmean(b) - statistics.fmean(a)
    h = T975[2 * (n - 1)] * se
    return delta - h, delta + h


# --------------------------------------------------------------------------------------------------
# compare --fail-if-slower / --fail-if-less-accurate
# --------------------------------------------------------------------------------------------------
def _gate(
    tmp_path: Path,
    b_thr: list[float],
    capsys,
    *extra: Any,
    b_top1: float = 0.5,
    b_headline: float | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[int, str, str]:
    a = make_run(tmp_path / "A", BASE, config=config)
    b = make_run(tmp_path / "B", b_thr, top1=b_top1, headline=b_headline, config=config)
    return invoke(["compare", a, b, *extra], capsys)


def test_slower_beyond_noise_fails_the_gate(tmp_path, capsys):
    b = [x - 20 for x in BASE]  # 20% slower, same spread
    lo, hi = welch_equal(BASE, b)
    assert hi < 0  # the answer is known before the code runs: the interval excludes 0
    code, out, _ = _gate(tmp_path, b, capsys, "--fail-if-slower", "5")
    assert code == 1
    line = out.strip().splitlines()[-1]
    assert line.startswith("FAIL --fail-if-slower 5: B is 20.0% slower than A")
    assert f"[{lo:+,.1f}, {hi:+,.1f}]" in line and "excludes 0" in line


def test_slower_within_noise_passes(tmp_path, capsys):
    b = [x - 10 for x in BASE]  # 10% slower, but the spread is wider than that
    lo, hi = welch_equal(BASE, b)
    assert lo < 0 < hi
    code, out, _ = _gate(tmp_path, b, capsys, "--fail-if-slower", "5")
    assert code == 0
    line = out.strip().splitlines()[-1]
    assert line.startswith("PASS --fail-if-slower 5: B is 10.0% slower than A but within noise")
    assert f"[{lo:+,.1f}, {hi:+,.1f}]" in line and "includes 0" in line


def test_a_gate_that_cannot_tell_names_what_gives_each_short_side_more_windows():
    from effbench.analysis import compare as cmp

    def rec(thr: float, steps: int):
        tally = {"steps": steps, "images": 0, "data_time_s": 0.0, "compute_time_s": 0.0, "time_s": 0.0}
        return results.record_of({"schema_version": 1, "status": "ok", "throughput_img_s": thr, "measured": tally})

    a = rec(100.0, 10)  # --repeats 1: 1 window of 10
    b = rec(90.0, 1)  # 1 measured step: 1 window
    line = cmp.slower_gate(a, [100.0], b, [90.0], 5.0).line
    assert line == (
        "PASS --fail-if-slower 5: cannot tell (A 100.0 img/s, B 90.0 img/s): too few windows to judge (needs 3 "
        "per run, has 1): A: raise --repeats to 3 or more; B: only 1 measured step(s), at most one window each: "
        "raise --max-steps or --epochs, or lower --warmup-steps"
    )
    assert "B: raise --repeats" not in line  # --repeats 2 with 1 measured step is refused (config.py)


def test_equal_passes_and_a_small_significant_slowdown_under_the_threshold_passes(tmp_path, capsys):
    code, out, _ = _gate(tmp_path, list(BASE), capsys, "--fail-if-slower", "0")
    assert code == 0 and out.strip().splitlines()[-1].startswith("PASS --fail-if-slower 0: B is not slower than A")
    code, out, _ = _gate(tmp_path / "2", [x - 20 for x in BASE], capsys, "--fail-if-slower", "25")
    assert code == 0 and "20.0% slower than A, not more than 25%" in out.strip().splitlines()[-1]


def test_the_gate_judges_the_runs_figures_and_the_windows_decide_noise(tmp_path, capsys):
    """B's own throughput (85 img/s, what `report` prints) is 15% below A's (100), its windows' mean (80) 20%:
    the gate states and thresholds the 15%, and takes only the interval from the windows."""
    b = [x - 20 for x in BASE]
    lo, hi = welch_equal(BASE, b)
    slowdown = 100 * (100.0 - 85.0) / 100.0  # from the two results.json figures, not from effbench
    code, out, _ = _gate(tmp_path, b, capsys, "--fail-if-slower", "5", b_headline=85.0)
    line = out.strip().splitlines()[-1]
    assert code == 1 and line.startswith(f"FAIL --fail-if-slower 5: B is {slowdown:.1f}% slower than A")
    assert "A 100.0 img/s, B 85.0 img/s" in line and f"[{lo:+,.1f}, {hi:+,.1f}]" in line
    # 17%: above the run's 15% slowdown, below the windows' 20% -> the run's figure decides, so it passes
    code, out, _ = _gate(tmp_path / "2", b, capsys, "--fail-if-slower", "17", b_headline=85.0)
    assert code == 0 and f"{slowdown:.1f}% slower than A, not more than 17%" in out.strip().splitlines()[-1]


def test_a_run_figure_slower_while_the_windows_are_faster_passes(tmp_path, capsys):
    b = [x + 20 for x in BASE]
    lo, hi = welch_equal(BASE, b)
    assert lo > 0  # the windows say B is faster, outside noise
    code, out, _ = _gate(tmp_path, b, capsys, "--fail-if-slower", "5", b_headline=90.0)
    line = out.strip().splitlines()[-1]
    assert code == 0 and line.startswith("PASS --fail-if-slower 5: B is 10.0% slower than A by the runs' figures")
    assert f"[{lo:+,.1f}, {hi:+,.1f}] img/s lies above 0" in line


def test_accuracy_gate_on_final_top1_in_points(tmp_path, capsys):
    real = _config(dataset="cifar10")  # a top-1 that means something (synthetic data's is chance: below)
    code, out, _ = _gate(tmp_path, list(BASE), capsys, "--fail-if-less-accurate", "1", b_top1=0.48, config=real)
    assert code == 1
    assert out.strip().splitlines()[-1] == (
        "FAIL --fail-if-less-accurate 1: B's val_top1 is 2.00 points below A's (val_top1 A 50.00%, B 48.00%)"
    )
    code, out, _ = _gate(tmp_path / "2", list(BASE), capsys, "--fail-if-less-accurate", "3", b_top1=0.48, config=real)
    assert code == 0 and out.strip().splitlines()[-1].startswith("PASS --fail-if-less-accurate 3")


def test_the_accuracy_gate_has_nothing_to_gate_on_synthetic_data(tmp_path, capsys):
    # issue 34: synthetic data validates on held-out images with random labels: its top-1 is chance, and a change
    # of one image out of 32 moves it 3 points, so a gate on it would fail at random
    synthetic = {**_config(), "dataset": "synthetic"}
    a = make_run(tmp_path / "A", BASE, config=synthetic, top1=0.0625)
    b = make_run(tmp_path / "B", BASE, config=synthetic, top1=0.0)
    code, out, _ = invoke(["compare", a, b, "--fail-if-less-accurate", "2"], capsys)
    assert code == 0 and out.strip().splitlines()[-1] == (
        "PASS --fail-if-less-accurate 2: nothing to gate, synthetic: random labels, accuracy is chance by "
        "construction (1/100)"
    )


def test_a_failed_b_fails_the_gate(tmp_path, capsys):
    a = make_run(tmp_path / "A", BASE)
    b = make_run(tmp_path / "B", [], status="failed")
    code, out, _ = invoke(["compare", a, b, "--fail-if-slower", "5"], capsys)
    assert code == 1 and "FAIL --fail-if-slower 5: B measured no throughput (status failed)" in out


def test_a_committed_results_json_is_a_baseline(tmp_path, capsys):
    """A baseline is often one file in a repository: results.json alone, its windows saved inside."""
    a = make_run(tmp_path / "A", BASE)
    record = json.loads((a / "results.json").read_text())
    from effbench.analysis import windows

    record["throughput_windows"] = windows.throughput_windows(windows.read_steps(a), 5)
    baseline = tmp_path / "ci" / "baseline.json"
    baseline.parent.mkdir()
    results.write_json(baseline, record)
    # a baseline under another name is still read as a results file
    b = make_run(tmp_path / "B", [x - 20 for x in BASE])
    code, out, _ = invoke(["compare", baseline, b, "--fail-if-slower", "5"], capsys)
    assert code == 1 and out.strip().splitlines()[-1].startswith("FAIL --fail-if-slower 5: B is 20.0% slower")
    code, out, _ = invoke(["compare", a / "results.json", b, "--fail-if-slower", "5"], capsys)
    assert code == 1


def test_a_baseline_without_windows_is_bad_input_not_a_regression(tmp_path, capsys):
    a = make_run(tmp_path / "A", [], status="failed")
    b = make_run(tmp_path / "B", BASE)
    code, _, err = invoke(["compare", a, b, "--fail-if-slower", "5"], capsys)
    assert code == 2 and err.startswith("error: --fail-if-slower: the baseline A has no throughput windows")
    assert len(err.splitlines()) == 1


# inf, 1e400 (inf once parsed) and 100 or more: a gate no run can fail (a throughput falls by at most 100%, a
# top-1 by at most 100 points), which printed PASS where it checked nothing
@pytest.mark.parametrize("option", ["--fail-if-slower", "--fail-if-less-accurate"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400", "100", "250"])
def test_bad_threshold_is_one_line_exit_2(tmp_path, capsys, value, option):
    a = make_run(tmp_path / "A", BASE)
    code, out, err = invoke(["compare", a, a, option, value], capsys)
    assert code == 2 and err.startswith(f"error: {option}: must be a number >= 0") and len(err.splitlines()) == 1
    assert "below 100" in err and "PASS" not in out
    code, out, _ = invoke(["compare", a, a, option, "99.5"], capsys)  # the top of the range still gates
    assert code == 0 and out.strip().splitlines()[-1].startswith(f"PASS {option} 99.5")


# --------------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------------
def _sweep(folder: Path, cells: list[tuple[str, dict[str, Any], list[float]]]) -> None:
    folder.mkdir(parents=True)
    entries = []
    for i, (key, params, thr) in enumerate(cells):
        run_dir = f"cells/{key}/{key}-run"  # where the sweep runner puts a cell's run folder
        make_run(folder / run_dir, thr, config=_config(**params))
        entries.append({"index": i, "key": key, "params": params, "config": _config(**params), "status": "ok",
                        "run_dir": run_dir, "attempts": 1, "error": None, "summary": None})  # fmt: skip
    manifest = {"schema_version": 1, "kind": "sweep", "name": folder.name, "preset": None,
                "dims": {"batch_size": [32, 64]}, "zip": False, "fingerprint": "x", "command": [],
                "created_at": "", "updated_at": "", "cells": entries}  # fmt: skip
    results.write_json(folder / "sweep.json", manifest)
    # an earlier try of the first cell, moved aside when the cell was rerun (sweep/runner.py _stash_attempts)
    make_run(folder / "attempts" / cells[0][0] / "try0", [], status="interrupted", config=_config(**cells[0][1]))


def _scaling(folder: Path) -> None:
    folder.mkdir(parents=True)
    for n in (1, 2):
        make_run(folder / f"gpus{n}", [200.0 * n] * 5, config=_config(gpus=n))
    results.write_json(folder / "scaling.json", {"schema_version": 1, "scaling": "weak", "rows": []})


def _all_kinds(root: Path) -> None:
    make_run(root / "lone", BASE)
    _sweep(root / "sweep-bs", [("bs32", {"batch_size": 32}, BASE), ("bs64", {"batch_size": 64}, BASE)])
    _scaling(root / "scaling-x")


def test_export_gives_one_row_per_run_with_the_documented_columns(tmp_path, capsys):
    root = tmp_path / "results"
    _all_kinds(root)
    out_csv = tmp_path / "runs.csv"
    code, _, err = invoke(["export", root, "-o", out_csv], capsys)
    assert code == 0 and "exported 6 runs" in err
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(rows) == 6
    by = {Path(r["path"]).name: r for r in rows}
    assert {k: by[k]["kind"] for k in by} == {"lone": "run", "bs32-run": "sweep-cell", "bs64-run": "sweep-cell",
                                              "gpus1": "scaling-member", "gpus2": "scaling-member", "try0": "sweep-attempt"}  # fmt: skip
    assert by["try0"]["status"] == "interrupted" and by["try0"]["swept.batch_size"] == "32"
    assert (
        by["bs64-run"]["swept.batch_size"] == "64"
        and by["gpus2"]["swept.gpus"] == "2"
        and by["lone"]["swept.gpus"] == ""
    )
    assert Path(by["bs32-run"]["group"]).name == "sweep-bs"
    # figures from steps.csv, checked against the textbook interval (t_{0.975,4} from the table)
    lone = by["lone"]
    h = T975[4] * statistics.stdev(BASE) / math.sqrt(len(BASE))
    assert float(lone["throughput_median_img_s"]) == pytest.approx(statistics.median(BASE))
    assert float(lone["throughput_ci_low_img_s"]) == pytest.approx(100 - h, abs=0.01)
    assert float(lone["throughput_ci_high_img_s"]) == pytest.approx(100 + h, abs=0.01)
    assert lone["throughput_windows"] == "5" and float(lone["energy_per_image_j"]) == pytest.approx(0.25)
    assert (lone["host"], lone["gpu_model"], lone["driver_version"], lone["image_revision"]) == (
        "node-a", "NVIDIA H100 80GB HBM3", "580.65.06", "abc123")  # fmt: skip
    assert float(lone["sm_clock_mhz"]) == 1980.0 and lone["config.arch"] == "resnet18"
    # the fixed columns come first, in the documented order, and the docs document every one
    header = out_csv.read_text().splitlines()[0].split(",")
    assert header[: len(ex.COLUMNS)] == list(ex.COLUMNS)
    page = (ROOT / "docs" / "sweeps-and-reports.md").read_text()
    documented = re.findall(r"^\| `([a-z0-9_]+)` \|", page.split("## Export columns")[1], re.M)
    assert documented[: len(ex.COLUMNS)] == list(ex.COLUMNS)


def test_export_carries_the_verdict_the_contended_flag_the_load_and_what_synthetic_top1_means(tmp_path, capsys):
    # issue 34: seven cpu-contended runs looked like clean figures in the CSV, and synthetic data's top-1 like one
    busy = make_run(tmp_path / "busy", BASE)
    record = json.loads((busy / "results.json").read_text())
    record["verdict"] = {"bottleneck": "cpu-contended", "evidence": "host CPU 97% busy", "advice": "rerun"}
    record["utilization"]["host"] = {"cpu_pct": {"mean": 60.0, "max": 70.0}}  # the whole block's
    record["utilization"]["measured_window"] = {"host": {"cpu_pct": {"mean": 97.0, "max": 100.0}}}  # the steps'
    results.write_json(busy / "results.json", record)
    env = json.loads((busy / "env.json").read_text())
    results.write_json(busy / "env.json", {**env, "load_avg_1m": 4.6, "env_vars": {"OMP_NUM_THREADS": "2"}})
    clean = make_run(tmp_path / "clean", BASE, config=_config(dataset="cifar10"))
    record = json.loads((clean / "results.json").read_text())
    record["verdict"] = {"bottleneck": "compute-bound", "evidence": "-", "advice": "-"}
    results.write_json(clean / "results.json", record)
    results.write_json(clean / "env.json", {**env, "env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}})
    out_csv = tmp_path / "runs.csv"
    code, _, err = invoke(["export", busy, clean, "-o", out_csv], capsys)
    assert code == 0, err
    by = {Path(r["path"]).name: r for r in csv.DictReader(io.StringIO(out_csv.read_text()))}
    assert (by["busy"]["verdict_bottleneck"], by["busy"]["cpu_contended"]) == ("cpu-contended", "True")
    assert (by["clean"]["verdict_bottleneck"], by["clean"]["cpu_contended"]) == ("compute-bound", "False")
    assert float(by["busy"]["host_cpu_busy_pct"]) == 97.0 and by["clean"]["host_cpu_busy_pct"] == ""
    assert float(by["busy"]["load_avg_1m"]) == 4.6 and by["clean"]["load_avg_1m"] == ""
    assert (by["busy"]["omp_wait_policy"], by["clean"]["omp_wait_policy"]) == ("", "PASSIVE")
    assert by["busy"]["accuracy_note"] == "synthetic: random labels, accuracy is chance by construction (1/100)"
    assert by["clean"]["accuracy_note"] == ""


def test_the_image_revision_comes_from_the_identity_env_json_records():
    """image_revision is the revision in env.json's `image`, which the image's /etc/effbench/image.json gives."""
    from effbench.system.identity import image_info

    assert image_info({"EFFBENCH_IMAGE_INFO": "/nonexistent"}) is None  # outside the image: no identity


def test_export_jsonl_to_stdout_has_the_same_rows(tmp_path, capsys):
    root = tmp_path / "results"
    _all_kinds(root)
    code, out, _ = invoke(["export", root / "sweep-bs", root / "lone", "--format", "jsonl"], capsys)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [Path(r["path"]).name for r in rows] == ["try0", "bs32-run", "bs64-run", "lone"]
    assert rows[2]["swept.batch_size"] == 64 and rows[3]["throughput_median_img_s"] == pytest.approx(100.0)


def test_export_refuses_bad_paths_and_formats(tmp_path, capsys):
    code, _, err = invoke(["export", tmp_path / "nope"], capsys)
    assert code == 2 and err.startswith("error: ") and "does not exist" in err and len(err.splitlines()) == 1
    code, _, err = invoke(["export", tmp_path, "-o", tmp_path / "no" / "runs.csv"], capsys)
    assert code == 2 and err.startswith("error: --output: the folder") and len(err.splitlines()) == 1
    code, _, err = invoke(["export", tmp_path, "--format", "xlsx"], capsys)
    assert code == 2 and err.startswith("error: --format: 'xlsx' is not a format")


# --------------------------------------------------------------------------------------------------
# report DIR: the leaderboard
# --------------------------------------------------------------------------------------------------
def test_leaderboard_of_two_machines_names_the_faster_and_the_environment_differences(tmp_path, capsys):
    root = tmp_path / "nodes"
    make_run(root / "node-a-run", BASE, host="node-a", driver="550.54.15", clock=1410.0)
    make_run(root / "node-b-run", [2 * x for x in BASE], host="node-b")
    code, out, _ = invoke(["report", root], capsys)
    assert code == 0
    txt = (root / "leaderboard.txt").read_text()
    verdict = next(line for line in txt.splitlines() if line.startswith("- "))
    assert "fastest node-b (1x NVIDIA H100 80GB HBM3) 200.0 img/s" in verdict  # node-b's figure: mean of 2 * BASE
    assert "slowest node-a (1x NVIDIA H100 80GB HBM3) 50.0% slower (slower, outside noise)" in verdict
    assert "driver 550.54.15 (best: 580.65.06)" in verdict and "SM clock MHz 1410 (best: 1980)" in verdict
    assert "image" not in verdict.split("differs in")[1]  # same image on both: not called a difference
    node_a = next(line for line in txt.splitlines() if line.startswith("node-a"))
    assert "50.0%" in node_a  # speed relative to the best
    assert verdict in out  # printed too
    for name in ("leaderboard.md", "report.html", "plots/leaderboard.png"):
        assert (root / name).is_file(), name
    html = (root / "report.html").read_text()
    assert "node-b" in html and "driver 550.54.15" in html and "data:image/png;base64," in html


def test_container_runs_of_one_box_are_pooled_as_one_machine_whatever_their_made_up_hostnames(tmp_path, capsys):
    # `docker run` names each container by its id's first 12 hex digits: three runs on box A, two on box B, one
    # named by EFFBENCH_MACHINE. Records without a `machine` (written before it) are named by their GPU's UUID.
    root = tmp_path / "boxes"
    gpu = {"a": "8c1d2e3f-0a1b-2c3d-4e5f-60718293a4b5", "b": "GPU-1f2e3d4c-5b6a-7988-0a1b-2c3d4e5f6071"}
    for i, (box, shift) in enumerate([("a", 0), ("a", 2), ("a", 1), ("b", 50), ("b", 52)]):
        gpus = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": gpu[box]}]
        make_run(root / f"run-{i}", [x + shift for x in BASE], host=f"{i:x}" * 12, env_extra={"gpus": gpus})
    make_run(root / "run-named", list(BASE), host="c0ffee00c0ff", env_extra={"machine": "dgx-07"})
    code, out, _ = invoke(["export", root, "--format", "jsonl"], capsys)
    rows = {Path(r["path"]).name: r for r in map(json.loads, out.splitlines())}
    assert code == 0 and rows["run-0"]["host"] == "0" * 12
    assert [rows[f"run-{i}"]["machine"] for i in range(5)] == ["GPU-8c1d2e3f"] * 3 + ["GPU-1f2e3d4c"] * 2
    assert rows["run-named"]["machine"] == "dgx-07"
    code, _, _ = invoke(["report", root], capsys)
    board = (root / "leaderboard.txt").read_text()
    pooled = board.split("Per machine, over its runs:")[1]
    gpu_label = "(1x NVIDIA H100 80GB HBM3)"
    assert code == 0 and f"GPU-1f2e3d4c {gpu_label}" in pooled and f"GPU-8c1d2e3f {gpu_label}" in pooled
    assert f"dgx-07 {gpu_label}" in pooled and "0" * 12 not in board  # no made-up hostname is shown as a machine
    box_b = next(line for line in pooled.splitlines() if line.startswith("GPU-1f2e3d4c"))
    box_a = next(line for line in pooled.splitlines() if line.startswith("GPU-8c1d2e3f"))
    assert "151.0" in box_b and "101.0" in box_a  # box B: mean of BASE + 50 and + 52; box A: BASE + 0, 2, 1


def test_a_leaderboard_names_no_fastest_machine_within_noise(tmp_path, capsys):
    # node-b's windows are node-a's plus 1 img/s against a spread of about 20 (BASE): Welch's interval of
    # the difference includes 0, so neither machine is called the fastest, whatever the figures' order
    root = tmp_path / "nodes"
    make_run(root / "node-a-run", [x + 1 for x in BASE], host="node-a")
    make_run(root / "node-b-run", list(BASE), host="node-b")
    code, _, _ = invoke(["report", root], capsys)
    assert code == 0
    verdict = next(line for line in (root / "leaderboard.txt").read_text().splitlines() if line.startswith("- "))
    assert "fastest" not in verdict.replace("no fastest machine", "") and "slowest" not in verdict, verdict
    assert "no fastest machine (within noise): node-a" in verdict, verdict


def test_leaderboard_ranks_by_the_throughput_each_runs_report_prints(tmp_path, capsys):
    # node-a: windows BASE (median 100) but its own figure 120 (steps of unequal time); node-b: windows
    # BASE + 10 (median 110), its figure 105. By the median node-b would lead; by the figure each
    # run's report prints node-a leads, and node-b is 105 / 120 = 87.5% of it (12.5% slower).
    root = tmp_path / "nodes"
    make_run(root / "node-a-run", BASE, host="node-a", headline=120.0)
    make_run(root / "node-b-run", [x + 10 for x in BASE], host="node-b", headline=105.0)
    code, _, _ = invoke(["report", root], capsys)
    assert code == 0
    txt = (root / "leaderboard.txt").read_text()
    verdict = next(line for line in txt.splitlines() if line.startswith("- "))
    # the windows (10 img/s apart, spread ~8) cannot tell the two apart: ranked by the figures, no winner named
    assert "no fastest machine (within noise): node-a (1x NVIDIA H100 80GB HBM3) 120.0 img/s" in verdict
    assert "node-b (1x NVIDIA H100 80GB HBM3) 12.5% lower" in verdict
    first, second = (line for line in txt.splitlines() if line.startswith("node-"))
    assert re.match(r"node-a .* ok +120\.0 ", first) and re.match(r"node-b .* ok +105\.0 .* 87\.5% ", second)
    assert re.search(r"^machine +status +img/s +95% CI ", txt, re.M)  # not labelled a median


def test_leaderboard_groups_by_configuration(tmp_path, capsys):
    root = tmp_path / "nodes"
    make_run(root / "a32", BASE, host="node-a")
    make_run(root / "b32", [x + 50 for x in BASE], host="node-b")
    make_run(root / "a64", BASE, host="node-a", config=_config(batch_size=64, output="/elsewhere"))
    code, _, _ = invoke(["report", root], capsys)
    assert code == 0
    md = (root / "leaderboard.md").read_text()
    assert md.count("\n## ") == 2 and "batch_size=32" in md and "batch_size=64" in md
    assert "only node-a (1x NVIDIA H100 80GB HBM3) measured" in md  # the bs 64 group has one machine


def test_leaderboard_groups_runs_by_what_ran_not_by_what_was_asked(tmp_path, capsys):
    # both ran resnet18 on cuda with 0 workers; node-b was asked for --device auto and --workers 4 (config.json
    # keeps that under requested / no_effect): one configuration, one group of two machines
    root = tmp_path / "nodes"
    make_run(root / "a", BASE, host="node-a", config=_config(workers=0))
    asked = _config(workers=0, requested={"device": "auto", "workers": 4},
                    no_effect={"workers": "synthetic (on device) starts no DataLoader worker processes"})  # fmt: skip
    make_run(root / "b", [x + 50 for x in BASE], host="node-b", config=asked)
    code, _, _ = invoke(["report", root], capsys)
    assert code == 0
    md = (root / "leaderboard.md").read_text()
    assert md.count("\n## ") == 1 and "requested" not in md and "no_effect" not in md


def test_export_report_and_gate_do_not_import_torch(tmp_path):
    root = tmp_path / "nodes"
    a = make_run(root / "a", BASE, host="node-a")
    b = make_run(root / "b", BASE, host="node-b")
    calls = [["export", str(root)], ["report", str(root)], ["compare", str(a), str(b), "--fail-if-slower", "5"]]
    code = (
        "import sys\nfrom effbench.cli.app import main\n"
        f"for args in {calls!r}:\n    try:\n        main(args)\n    except SystemExit as e:\n        assert e.code == 0, (args, e.code)\n"
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines()[-1] == "False"
    assert (root / "leaderboard.txt").is_file()


# --------------------------------------------------------------------------------------------------
# a real smoke run's folder (today's schema: conftest.py's smoke_dir) and a newer schema
# --------------------------------------------------------------------------------------------------
@pytest.mark.timeout(900)  # the session's smoke run (conftest.py) may be set up inside the first of these
def test_a_real_smoke_folder_exports_gates_and_ranks(smoke_dir, tmp_path, capsys):
    record = json.loads((smoke_dir / "results.json").read_text())
    env = json.loads((smoke_dir / "env.json").read_text())
    code, out, _ = invoke(["export", smoke_dir, "--format", "jsonl"], capsys)
    assert code == 0
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert set(ex.COLUMNS) <= set(row) and row["status"] == "ok" and row["kind"] == "run"
    assert (row["host"], row["torch"], row["container_runtime"]) == (
        env["hostname"], env["torch"], env["container_runtime"])  # fmt: skip
    assert row["final_train_loss"] == record["final"]["train_loss"]
    thr = record["throughput_windows"]["throughput_img_s"]
    assert row["throughput_median_img_s"] == pytest.approx(statistics.median(thr))
    assert row["throughput_windows"] == len(thr)
    code, out, _ = invoke(["compare", smoke_dir / "results.json", smoke_dir, "--fail-if-slower", "5"], capsys)
    assert code == 0 and "PASS --fail-if-slower 5: B is not slower than A" in out
    root = tmp_path / "two"
    shutil.copytree(smoke_dir, root / "copy1")
    shutil.copytree(smoke_dir, root / "copy2")
    code, out, _ = invoke(["report", root], capsys)
    board = (root / "leaderboard.txt").read_text()
    # two runs of one machine: ranked as runs, and pooled as that one machine over its runs
    assert code == 0 and f"only {env['machine']} (" in board and "mean of 2 runs)" in board
    assert "Per machine, over its runs:" in board


@pytest.mark.timeout(900)  # the session's smoke run (conftest.py) may be set up inside the first of these
def test_newer_schema_is_refused_with_one_line(smoke_dir, tmp_path, capsys):
    newer = tmp_path / "runs" / "newer"
    shutil.copytree(smoke_dir, newer)
    record = copy.deepcopy(json.loads((newer / "results.json").read_text()))
    record["schema_version"] = results.SCHEMA_VERSION + 1
    results.write_json(newer / "results.json", record)
    for args in (["export", newer.parent], ["report", newer.parent], ["compare", smoke_dir, newer, "--fail-if-slower", "5"]):  # fmt: skip
        code, out, err = invoke(args, capsys)
        assert code == 2, args
        assert len(err.strip().splitlines()) == 1 and "newer than this effbench" in err and "upgrade effbench" in err


@pytest.mark.parametrize("gate", [[], ["--fail-if-slower", "5"]])
@pytest.mark.parametrize(
    ("timing_a", "timing_b"), [("pipelined", "per-step"), (None, "pipelined")], ids=["both-named", "old-record"]
)
def test_compare_refuses_runs_timed_differently(tmp_path, capsys, gate, timing_a, timing_b):
    # Per-step timing drains the device twice a step (5-9% of a host-bound model on a GPU): a difference
    # between a pipelined and a per-step run is partly the timer's. A record from before --timing names none
    # and was timed per-step.
    a = make_run(tmp_path / "A", BASE, config=_config(timing=timing_a))
    b = make_run(tmp_path / "B", BASE, config=_config(timing=timing_b))
    code, out, err = invoke(["compare", a, b, *gate], capsys)
    first = timing_a or "per-step"
    assert code == 2 and out == ""
    assert err == (
        f"error: --timing: A was timed {first} and B {timing_b}: their figures are not like for like "
        f'(docs/methodology.md, "What each span holds"); rerun B with --timing {first}, or A with --timing '
        f"{timing_b}\n"
    )


def test_compare_takes_runs_timed_alike(tmp_path, capsys):
    a = make_run(tmp_path / "A", BASE, config=_config(timing="pipelined"))
    b = make_run(tmp_path / "B", BASE, config=_config(timing="pipelined"))
    code, out, _ = invoke(["compare", a, b], capsys)
    assert code == 0 and "Throughput: no significant difference" in out

"""--target-top1 / --stop-at-target (docs/time-to-accuracy.md): the time, epochs and best top-1 a run records,
checked against its own epochs.csv and steps.csv summed here, and every bad input refused in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from clitools import invoke, only_run

# resnet18 at 16 px on the tiny image folders: 3 steps an epoch, a second or two per run on 2 cores
TINY = ["--arch", "resnet18", "--dataset", "imagefolder", "--image-size", "16", "--device", "cpu", "--batch-size", "6",
        "--workers", "0", "--warmup-steps", "1", "--no-profile", "--quiet"]  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(x: str) -> float | None:
    return None if x in ("", "None") else float(x)


def _run(tmp_path: Path, capsys, data_dir: Path, *extra: str) -> tuple[Path, dict]:
    out = tmp_path / "out"
    code, _, err = invoke(["run", *TINY, "--data-dir", data_dir, "--output", out, *extra], capsys)
    assert code == 0, err
    run = only_run(out)
    return run, json.loads((run / "results.json").read_text())


def test_reached_target_time_is_the_training_steps_up_to_that_epoch(tmp_path, capsys, imagefolder_split_dir):
    target = 1e-6  # any correct validation image reaches it
    run, r = _run(tmp_path, capsys, imagefolder_split_dir, "--epochs", "3", "--target-top1", str(target))
    tta = r["time_to_accuracy"]
    assert r["status"] == "ok" and json.loads((run / "config.json").read_text())["target_top1"] == target
    epochs = _rows(run / "epochs.csv")
    assert len(epochs) == 3  # no --stop-at-target: every epoch runs
    top1 = [_num(e["val_top1"]) for e in epochs]
    k = next(i + 1 for i, t in enumerate(top1) if t is not None and t >= target)  # the first validation there
    assert tta["reached_target"] is True and tta["epochs_to_target"] == k
    # independently: every timed training step (warm-up included) of epochs 1..k in steps.csv, and validation apart
    steps = [s for s in _rows(run / "steps.csv") if int(s["epoch"]) <= k]
    from_steps = sum(float(s["data_time_s"]) + float(s["compute_time_s"]) for s in steps)
    assert tta["train_time_to_target_s"] == pytest.approx(from_steps, rel=1e-9, abs=1e-12)
    assert tta["train_time_to_target_s"] == pytest.approx(sum(float(e["total_time_s"]) for e in epochs[:k]), rel=1e-12)
    val_warmup = sum(float(e["val_warmup_time_s"]) for e in epochs[:k])
    assert tta["val_time_to_target_s"] == pytest.approx(sum(float(e["val_time_s"]) for e in epochs[:k]) + val_warmup,
                                                        rel=1e-12)  # fmt: skip
    assert tta["val_warmup_time_included_s"] == pytest.approx(val_warmup, rel=1e-12)
    whole = sum(float(e["total_time_s"]) for e in epochs)  # the run's whole training time
    assert 0 < tta["train_time_to_target_s"] <= whole
    assert tta["warmup_time_included_s"] == pytest.approx(float(epochs[0]["warmup_time_s"]), rel=1e-12)
    assert tta["stopped_at_target"] is False and tta["epochs_run"] == 3
    report = " ".join((run / "report.txt").read_text().split())  # a long value wraps at 100 columns
    assert "time to accuracy" in report and f"in {k} epoch(s) to val top-1 >= 1e-06" in report


def _noise_folder(root: Path, classes: int = 4, train: int = 6, val: int = 4) -> Path:
    """Uniform noise in class folders: nothing to learn, so a top-1 of 1.0 on 16 images is out of reach."""
    rng = np.random.default_rng(0)
    for part, n in (("train", train), ("val", val)):
        for c in range(classes):
            for i in range(n):
                path = root / part / f"c{c}" / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
    return root


def test_target_not_reached_records_the_best_top1(tmp_path, capsys):
    data = _noise_folder(tmp_path / "noise")
    run, r = _run(tmp_path, capsys, data, "--epochs", "2", "--target-top1", "1.0", "--stop-at-target")
    tta = r["time_to_accuracy"]
    top1 = [_num(e["val_top1"]) for e in _rows(run / "epochs.csv")]
    assert len(top1) == 2 and r["status"] == "ok"  # never reached: every epoch ran
    assert tta["reached_target"] is False and tta["epochs_to_target"] is None
    assert tta["train_time_to_target_s"] is None and tta["stopped_at_target"] is False
    assert tta["best_val_top1"] == max(t for t in top1 if t is not None)
    assert "val top-1 >= 1 not reached in 2 epoch(s)" in " ".join((run / "report.txt").read_text().split())


def test_stop_at_target_ends_the_run_at_that_epoch(tmp_path, capsys, imagefolder_split_dir):
    run, r = _run(tmp_path, capsys, imagefolder_split_dir, "--epochs", "3", "--target-top1", "1e-6", "--stop-at-target")
    tta = r["time_to_accuracy"]
    epochs = _rows(run / "epochs.csv")
    assert r["status"] == "ok" and tta["reached_target"] is True
    assert len(epochs) == tta["epochs_to_target"] == len(r["epochs"]) < 3  # stopped before --epochs 3
    assert _num(epochs[-1]["val_top1"]) >= 1e-6
    assert tta["stopped_at_target"] is True
    assert tta["train_time_to_target_s"] == pytest.approx(sum(float(e["total_time_s"]) for e in epochs), rel=1e-12)


@pytest.mark.parametrize(
    ("extra", "option", "fix"),
    [
        (["--target-top1", "1.5"], "--target-top1", "outside (0, 1]"),
        (["--target-top1", "0"], "--target-top1", "outside (0, 1]"),
        (["--target-top1", "-0.2"], "--target-top1", "outside (0, 1]"),
        (["--target-top1", "nan"], "--target-top1", "finite number in (0, 1]"),
        (["--target-top1", "ninety"], "--target-top1", "valid number"),
        (["--target-top1", "0.5", "--data-only"], "--target-top1", "--data-only runs no model"),
        (["--target-top1", "0.5", "--dataset", "synthetic"], "--target-top1", "use real data"),
        (["--target-top1", "0.5", "--max-val-steps", "2"], "--target-top1", "drop --max-val-steps"),
        (["--stop-at-target"], "--stop-at-target", "add --target-top1"),
    ],
)
def test_bad_target_input_is_one_line_and_exit_2(tmp_path, capsys, imagefolder_split_dir, extra, option, fix):
    out = tmp_path / "out"
    args = ["run", *TINY, "--data-dir", imagefolder_split_dir, "--epochs", "1", "--output", out, *extra]
    code, stdout, err = invoke(args, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.strip().count("\n") == 0 and option in err and fix in err
    assert "Traceback" not in stdout + err
    assert not out.exists() or not any(out.iterdir())


def test_smoke_preset_with_a_target_is_refused(tmp_path, capsys):
    code, _, err = invoke(["run", "--smoke", "--target-top1", "0.5", "--output", tmp_path / "o", "--quiet"], capsys)
    assert code == 2 and "--target-top1" in err and "synthetic" in err and err.strip().count("\n") == 0


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--target-top1", "2"], "--target-top1"),
        (["--target-top1", "0.5,0.9"], "--target-top1"),
        (["--target-top1", "x"], "--target-top1"),
        (["--stop-at-target"], "--stop-at-target"),
        (["--target-top1", "0.5", "--dataset", "synthetic"], "--target-top1"),
    ],
)
def test_sweep_refuses_a_bad_target_before_any_cell(tmp_path, capsys, imagefolder_split_dir, extra, option):
    args = ["sweep", *TINY, "--batch-size", "3,6", "--data-dir", imagefolder_split_dir, "--output", tmp_path, *extra]
    code, stdout, err = invoke(args, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.strip().count("\n") == 0 and option in err
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_stop_at_target_under_ddp_stops_every_rank_after_the_same_epoch(tmp_path, imagefolder_split_dir):
    """Two gloo ranks: a rank that went on alone would wait in the next epoch's all_gather until the
    process-group timeout, and the job would fail instead of ending `ok` with k epoch rows."""
    import subprocess
    import sys

    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "effbench", "run", *TINY, "--data-dir", str(imagefolder_split_dir), "--batch-size", "3",
         "--epochs", "3", "--nproc", "2", "--pg-timeout-s", "30", "--target-top1", "1e-6", "--stop-at-target",
         "--output", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    run = only_run(out)
    r = json.loads((run / "results.json").read_text())
    tta = r["time_to_accuracy"]
    assert r["status"] == "ok" and r["world_size"] == 2 and tta["stopped_at_target"] is True
    assert len(_rows(run / "epochs.csv")) == tta["epochs_to_target"] < 3


# --- a batch-size sweep with a target: its tables, chart, HTML, export and compare (recorded, no training) ---
# bs 8192 has the higher throughput and never reaches the target: throughput alone would pick it
SWEPT = {32: (500.0, {"reached_target": True, "train_time_to_target_s": 12.5, "epochs_to_target": 3,
                      "val_time_to_target_s": 0.9, "best_val_top1": 0.91}),
         8192: (4000.0, {"reached_target": False, "train_time_to_target_s": None, "epochs_to_target": None,
                         "val_time_to_target_s": None, "best_val_top1": 0.41})}  # fmt: skip


def _target_sweep(root: Path) -> Path:
    from test_sweep_report import make_sweep

    from effbench import results

    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": thr}) for b, (thr, _) in SWEPT.items()]
    folder = make_sweep(root, {"batch_size": list(SWEPT)}, cells)
    for i, (_, tta) in enumerate(SWEPT.values()):
        path = folder / f"cells/{i:03d}/run/results.json"
        record = json.loads(path.read_text())
        record["config"]["target_top1"] = 0.9
        record["time_to_accuracy"] = {"target_top1": 0.9, "warmup_time_included_s": 0.0, "best_epoch": 2,
                                      "epochs_run": 3, "stopped_at_target": False, **tta}  # fmt: skip
        results.write_json(path, record)
    return folder


def test_a_batch_size_sweep_with_a_target_shows_throughput_and_time_to_accuracy(tmp_path):
    from effbench.analysis import export
    from effbench.report import render

    folder = _target_sweep(tmp_path)
    render.write_sweep_reports(folder)
    text = (folder / "sweep.txt").read_text()
    # sweep.md's header on one line; sweep.txt's wrapped at its words to fit 100 columns (issue 47 item 2)
    header = next(line for line in (folder / "sweep.md").read_text().splitlines() if line.startswith("| cell"))
    assert header.index("img/s") < header.index("train s to val top-1 &gt;= 0.9") < header.index("epochs to target")
    headers = ("train s to val top-1 >= 0.9", "epochs to target")
    assert all(w in text.split() for h in headers for w in h.split())
    assert "12.500" in text and "not reached (best 0.4100)" in text
    assert "highest throughput along batch-size: 8192" in text
    assert "shortest training time to val top-1 >= 0.9 along batch-size: 32 (12.500 s in 3 epoch(s)" in text
    html = (folder / "report.html").read_text()
    assert "train s to val top-1 &gt;= 0.9" in html and 'alt="time to accuracy vs batch"' in html
    assert (folder / "plots" / "time_to_accuracy_vs_batch.png").stat().st_size > 0
    rows = {
        r["config.batch_size"]: r
        for r in csv.DictReader(export.render([x.row for x in export.collect([folder])], "csv").splitlines())
    }
    assert rows["32"]["time_to_target_s"] == "12.5" and rows["32"]["epochs_to_target"] == "3"
    assert rows["8192"]["reached_target"] == "False" and rows["8192"]["time_to_target_s"] == ""


def test_compare_and_leaderboard_carry_the_time_to_target(tmp_path, capsys):
    folder = _target_sweep(tmp_path)
    a, b = (folder / f"cells/{i:03d}/run" for i in range(2))
    code, out, err = invoke(["compare", a, b], capsys)
    assert code == 0, err
    # the first of the two target rows (train s, then epochs); its metric wraps in a 100-column table
    line = next(x for x in out.splitlines() if x.startswith("time to target:"))
    assert "12.500" in line and "not reached (best 0.4100)" in line
    from effbench.report import leaderboard

    import shutil

    for d in (a, b):  # the two runs as copied from two machines into one folder
        shutil.copytree(d, tmp_path / "runs" / d.parent.name)
    leaderboard.write_reports(tmp_path / "runs")
    assert "12.500 s, 3 epoch(s)" in (tmp_path / "runs" / "leaderboard.txt").read_text()


def test_the_first_validation_at_or_above_the_target_counts_and_none_never_does():
    from effbench.analysis.time_to_accuracy import summarize

    rows = [{"epoch": 1, "total_time_s": 2.0, "val_time_s": 0.5, "warmup_time_s": 0.25, "val_top1": None},
            {"epoch": 2, "total_time_s": 3.0, "val_time_s": 0.5, "warmup_time_s": 0.0, "val_top1": 0.5},
            {"epoch": 3, "total_time_s": 4.0, "val_time_s": 0.5, "warmup_time_s": 0.0, "val_top1": 0.75},
            {"epoch": 4, "total_time_s": 5.0, "val_time_s": 0.5, "warmup_time_s": 0.0, "val_top1": 0.875}]  # fmt: skip
    at = summarize(rows, 0.75, stop_at_target=True, configured_epochs=4)  # equal to the target: reached
    assert at is not None and (at.epochs_to_target, at.train_time_to_target_s) == (3, 9.0)
    assert (at.val_time_to_target_s, at.warmup_time_included_s, at.best_val_top1) == (1.5, 0.25, 0.75)
    assert at.stopped_at_target is True  # 3 < 4 epochs
    missed = summarize(rows, 0.9)
    assert missed is not None and missed.reached_target is False and missed.train_time_to_target_s is None
    assert (missed.best_val_top1, missed.best_epoch, missed.epochs_run) == (0.875, 4, 4)
    assert summarize(rows, None) is None


@pytest.mark.slow
def test_sweep_passes_the_target_to_every_cell(tmp_path, capsys, imagefolder_split_dir):
    """Through the CLI: every cell records the target, stops at it, and the sweep's table says so."""
    args = ["sweep", *TINY, "--batch-size", "3,6", "--data-dir", imagefolder_split_dir, "--epochs", "3",
            "--target-top1", "1e-6", "--stop-at-target", "--output", tmp_path, "--name", "tta"]  # fmt: skip
    code, _, err = invoke(args, capsys)
    assert code == 0, err
    folder = tmp_path / "tta"
    m = json.loads((folder / "sweep.json").read_text())
    for cell in m["cells"]:
        tta = cell["summary"]["time_to_accuracy"]
        run = folder / cell["run_dir"]
        assert cell["config"]["target_top1"] == 1e-6 and cell["config"]["stop_at_target"] is True
        assert tta["reached_target"] is True and len(_rows(run / "epochs.csv")) == tta["epochs_to_target"]
    assert "train s to val top-1 >= 1e-06" in (folder / "sweep.txt").read_text()


def test_a_recorded_time_to_accuracy_is_checked_when_read_back(tmp_path):
    """results.json is input: a target outside (0, 1] is one line naming the field; an older record without
    the section, or one with a reached target but no time, still reads and renders."""
    from test_sweep_report import fake_run

    from effbench import results
    from effbench.errors import EffbenchError
    from effbench.report import tables

    record = fake_run(tmp_path / "old", devices=1, batch=8, throughput=100.0)
    assert "time_to_accuracy" not in results.read_results(tmp_path / "old")  # written before the option existed
    edited = {**record, "time_to_accuracy": {"target_top1": 0.9, "reached_target": True, "epochs_to_target": 2}}
    results.write_json(tmp_path / "old" / "results.json", edited)
    text = tables.render(results.load_record(tmp_path / "old"))
    assert "no time recorded in 2 epoch(s) to val top-1 >= 0.9" in text
    edited["time_to_accuracy"]["target_top1"] = 1.5
    results.write_json(tmp_path / "old" / "results.json", edited)
    with pytest.raises(EffbenchError, match="time_to_accuracy.target_top1"):
        results.read_results(tmp_path / "old")


def test_the_first_validations_warm_up_counts_as_validation_time_and_is_named():
    # N8a: val_time_s leaves the first validation's warm-up out (val_warmup_time_s); time to accuracy still
    # holds every validation second, as it did when val_time_s held the warm-up, and says how much was it.
    from effbench.analysis.time_to_accuracy import summarize

    rows = [{"epoch": 1, "total_time_s": 2.0, "val_time_s": 0.5, "val_warmup_time_s": 4.0, "val_top1": 0.5},
            {"epoch": 2, "total_time_s": 3.0, "val_time_s": 0.5, "val_warmup_time_s": 0.0, "val_top1": 0.8}]  # fmt: skip
    at = summarize(rows, 0.75)
    assert at is not None and (at.val_time_to_target_s, at.val_warmup_time_included_s) == (5.0, 4.0)
    assert summarize(rows, 0.9).val_warmup_time_included_s is None  # not reached: no times

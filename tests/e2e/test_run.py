"""`effbench run` end to end through the CLI on small datasets in the real on-disk formats."""

from __future__ import annotations

import csv
import json
import math
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clitools import invoke, only_run

KEYS = ("schema_version", "status", "config", "env", "device", "world_size", "throughput_img_s", "epochs")
EPOCH_KEYS = (
    "epoch",
    "images",
    "data_time_s",
    "compute_time_s",
    "total_time_s",
    "train_loss",
    "train_top1",
    "val_top1",
)
FILES = ("config.json", "env.json", "results.json", "epochs.csv", "steps.csv", "report.txt", "report.md")


def check_run_folder(run: Path, epochs: int) -> dict:
    for name in FILES:
        assert (run / name).is_file(), name
    r = json.loads((run / "results.json").read_text())
    for key in KEYS:
        assert key in r, key
    assert r["status"] == "ok" and r["schema_version"] == 1 and r["world_size"] == 1
    assert len(r["epochs"]) == epochs
    for e in r["epochs"]:
        for key in EPOCH_KEYS:
            assert key in e, key
        assert math.isfinite(e["train_loss"]) and 0 <= e["train_top1"] <= 1
        assert e["images"] > 0 and e["data_time_s"] >= 0 and e["compute_time_s"] > 0
    assert r["throughput_img_s"] > 0
    rows = list(csv.DictReader((run / "epochs.csv").open()))
    assert len(rows) == epochs
    steps = list(csv.DictReader((run / "steps.csv").open()))
    assert len(steps) == sum(e["steps"] for e in r["epochs"])
    assert json.loads((run / "config.json").read_text()) == r["config"]
    assert "torch" in json.loads((run / "env.json").read_text())
    assert "throughput (img/s)" in (run / "report.txt").read_text()
    return r


def test_smoke_writes_every_file(tmp_path, capsys):
    code, out, _ = invoke(["run", "--smoke", "--output", tmp_path, "--quiet"], capsys)
    assert code == 0
    r = check_run_folder(only_run(tmp_path), epochs=1)
    assert r["config"]["smoke"] is True and r["data"]["name"] == "synthetic"
    assert r["warmup"]["steps"] == 2 and r["measured"]["steps"] == 10
    # --quiet prints the headline and the report's path; report.txt holds the whole table
    assert "throughput (img/s)" in (only_run(tmp_path) / "report.txt").read_text()
    assert out.startswith("status ok\nthroughput ") and out.rstrip().endswith("report.txt")


def chance_bound(n: int, p: float, tail: float = 1e-6) -> float:
    """The top-1 over n images that chance (each right with probability p) exceeds with probability below `tail`:
    the smallest k with P(Binomial(n, p) >= k) < tail, over n."""
    for k in range(n + 1):
        if sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1)) < tail:
            return k / n
    return 1.0


def test_synthetic_validation_reads_chance_and_says_so(tmp_path, capsys):
    # issue 34: `--dataset synthetic --max-steps 20` printed `final val top-1 0.9453`: validation replayed the
    # batches it trained on. Held out, random labels leave a model nothing to be right about but chance.
    code, out, err = invoke(["run", "--arch", "resnet18", "--dataset", "synthetic", "--image-size", "16",
                             "--batch-size", "32", "--epochs", "1", "--max-steps", "12", "--warmup-steps", "2",
                             "--weights", "none", "--no-profile", "--quiet", "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    n, top1 = r["epochs"][-1]["val_images"], r["final"]["val_top1"]
    assert n == 2 * 32 and 0 <= top1 <= chance_bound(n, 1 / 100), (n, top1)
    report = " ".join((only_run(tmp_path) / "report.txt").read_text().split())  # rows wrap at 100 columns
    assert re.search(
        r"final val top-1 [0-9.]+ \(synthetic: random labels, accuracy is chance by construction "
        r"\(1/100\)\)",
        report,
    ), report


def test_cifar100_two_epochs_b0_done_when(tmp_path, capsys, cifar100_dir):
    code, out, err = invoke(
        ["run", "--arch", "b0", "--dataset", "cifar100", "--data-dir", cifar100_dir, "--weights", "none", "--image-size", "32",
         "--epochs", "2", "--max-steps", "5", "--device", "cpu", "--batch-size", "8", "--warmup-steps", "2", "--workers", "0",
         "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    r = check_run_folder(run, epochs=2)
    assert all(e["val_top1"] is not None for e in r["epochs"])
    assert r["data"]["num_classes"] == 100 and r["model"]["trainable_params"] == r["model"]["total_params"]
    # issue 35: the per-kind roofline table and the ceiling line, printed and in every report, the chart in the page
    text = (run / "report.txt").read_text()  # --quiet prints the headline; report.txt the whole report
    assert "Where the step's time goes, against this machine's roofs" in text and "could be at most" in " ".join(
        text.split()
    )
    kinds = {k["kind"] for k in r["roofline"]["kinds"]}
    assert {"convolution", "depthwise/grouped conv", "batch norm", "activation", "optimizer step"} <= kinds
    assert r["roofs"]["memory_gb_s"] > 0 and r["roofs"]["compute"][0]["precision"] == "fp32"
    assert r["roofline"]["ceiling_speedup"] >= 1 and "could be at most" in (run / "report.md").read_text()
    assert (run / "plots" / "roofline.png").is_file() and 'id="roofline"' in (run / "report.html").read_text()


def test_food101_with_val_fraction_and_workers(tmp_path, capsys, food101_dir):
    code, _, err = invoke(
        ["run", "--arch", "b0", "--dataset", "food", "--data-dir", food101_dir, "--weights", "none", "--image-size", "32",
         "--epochs", "2", "--max-steps", "3", "--device", "cpu", "--batch-size", "4", "--warmup-steps", "1", "--workers", "2",
         "--val-fraction", "0.25", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = check_run_folder(only_run(tmp_path), epochs=2)
    assert r["config"]["dataset"] == "food101" and r["epochs"][-1]["val_top1"] is not None


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_resnet18_without_batchnorm_adadelta_on_cifar10(tmp_path, capsys, cifar10_dir):
    code, _, err = invoke(
        ["run", "--arch", "resnet18", "--no-batch-norm", "--optimizer", "adadelta", "--dataset", "cifar10",
         "--data-dir", cifar10_dir, "--epochs", "2", "--max-steps", "3", "--device", "cpu", "--batch-size", "8",
         "--warmup-steps", "1", "--workers", "0", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = check_run_folder(only_run(tmp_path), epochs=2)
    assert r["config"]["batch_norm"] is False and r["config"]["lr"] == 1.0 and r["model"]["stem"] == "cifar"


def test_imagefolder_with_frozen_classifier(tmp_path, capsys, imagefolder_dir):
    code, _, err = invoke(
        ["run", "--arch", "resnet18", "--dataset", "imagefolder", "--data-dir", imagefolder_dir, "--image-size", "32",
         "--freeze", "classifier", "--epochs", "1", "--max-steps", "3", "--device", "cpu", "--batch-size", "4",
         "--warmup-steps", "1", "--workers", "0", "--val-fraction", "0.25", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = check_run_folder(only_run(tmp_path), epochs=1)
    assert r["model"]["trainable_params"] < r["model"]["total_params"]
    # 18 images, a quarter held out: 3 whole batches of 4 per epoch, the rest left out by drop_last and said so
    train = r["data"]["train_size"]
    assert r["epochs"][0]["steps"] == train // 4 == 3
    report = (only_run(tmp_path) / "report.txt").read_text()
    assert f"{train - 12} images dropped by drop_last (batch 4)" in report


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-nesterov", "adagrad", "adadelta", "adam", "adamw"])
def test_every_optimizer_trains(tmp_path, capsys, optimizer):
    code, _, err = invoke(
        ["run", "--smoke", "--arch", "resnet18", "--optimizer", optimizer, "--max-steps", "3", "--warmup-steps", "1",
         "--batch-size", "4", "--image-size", "16", "--max-val-steps", "1", "--no-profile", "--output", tmp_path,
         "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    assert r["config"]["optimizer"] == optimizer and math.isfinite(r["epochs"][0]["train_loss"])


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--dataset", "cifar100", "--data-dir", "{missing}"], "--data-dir"),
        (["--dataset", "food101", "--data-dir", "{missing}"], "--data-dir"),
        (["--device", "cuda"], "--device"),
        (["--precision", "fp16"], "--precision"),
        (["--warmup-steps", "50"], "--warmup-steps"),
        (["--freeze", "last:999"], "--freeze"),
        (["--weights", "{missing}/w.pt"], "--weights"),
        (["--output", "{file}"], "--output"),
    ],
)
def test_bad_input_leaves_no_run_folder(tmp_path, capsys, extra, needle, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (tmp_path / "file").write_text("x")
    out = tmp_path / "out"
    subs = {"{missing}": str(tmp_path / "nope"), "{file}": str(tmp_path / "file")}
    extra = [subs.get(a, a.replace("{missing}", str(tmp_path / "nope"))) for a in extra]
    args = ["run", "--smoke", "--output", out, "--quiet", *extra]
    code, stdout, err = invoke(args, capsys)
    assert code == 2, err
    assert needle in err and err.startswith("error: ") and err.strip().count("\n") == 0
    assert "Traceback" not in stdout + err
    assert not out.exists() or not any(out.iterdir())


def test_corrupt_cifar_pickle_is_one_line(tmp_path, capsys, cifar10_dir):
    batch = Path(cifar10_dir) / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(batch.read_bytes()[:1000])  # truncated
    code, _, err = invoke(
        ["run", "--arch", "resnet18", "--dataset", "cifar10", "--data-dir", cifar10_dir, "--device", "cpu", "--max-steps", "2",
         "--warmup-steps", "1", "--epochs", "1", "--output", tmp_path / "out", "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 2 and "data_batch_1" in err and err.strip().count("\n") == 0
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_sigterm_mid_epoch_keeps_finished_epochs(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "effbench", "run", "--smoke", "--arch", "resnet18", "--image-size", "16", "--batch-size", "4",
         "--epochs", "1000", "--max-steps", "3", "--max-val-steps", "1", "--warmup-steps", "1", "--output", str(out),
         "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(out.glob("*/results.json"))
            if files and len(json.loads(files[0].read_text()).get("epochs", [])) >= 1:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    run = only_run(out)
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "interrupted" and len(r["epochs"]) >= 1
    for name in FILES:  # every file parses
        text = (run / name).read_text()
        if name.endswith(".json"):
            json.loads(text)
        elif name.endswith(".csv"):
            assert list(csv.DictReader(text.splitlines()))
    assert len(list(csv.DictReader((run / "epochs.csv").open()))) == len(r["epochs"])


def test_run_makes_the_preflight_checks_before_anything_else(tmp_path, capsys):
    # The dataset check of `effbench doctor` runs inside `effbench run`: its fix names the mounts.
    out = tmp_path / "out"
    code, _, err = invoke(
        ["run", "--smoke", "--dataset", "cifar100", "--data-dir", tmp_path / "nope", "--output", out], capsys
    )
    assert code == 2 and err.count("\n") == 1
    # the fix for where the user is (Docker, podman, Apptainer, host) is tests/contracts/test_cli_feedback.py's
    assert "--data-dir" in err and "--dataset synthetic" in err
    assert not out.exists() or not any(out.iterdir())

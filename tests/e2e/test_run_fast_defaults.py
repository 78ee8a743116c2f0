"""`effbench run` through the CLI with the fast defaults: --data-only, --compile, the resolved GPU
defaults in config.json, and the options that map onto them."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from effbench.run import launch
from effbench.results import record_of
from clitools import invoke, only_run

FILES = ("config.json", "env.json", "results.json", "epochs.csv", "steps.csv", "report.txt", "report.md")


def test_data_only_reports_images_delivered_without_a_model(tmp_path, capsys, cifar10_dir):
    code, out, err = invoke(
        ["run", "--dataset", "cifar10", "--data-dir", cifar10_dir, "--data-only", "--batch-size", "8", "--epochs", "2",
         "--warmup-steps", "2", "--device", "cpu", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    for name in FILES:
        assert (run / name).is_file(), name
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["data_only"] is True and r["config"]["data_only"] is True
    assert r["config"]["loader"] == "fast" and r["data"]["loader"] == "fast"
    assert r["throughput_img_s"] > 0 and r["measured"]["steps"] == 2 * 7 - 2 and r["measured"]["compute_time_s"] == 0
    assert r["model"]["arch"] is None
    for key in ("profile", "flops_per_image", "verdict"):
        assert key not in r, key
    assert not list(run.glob("trace_*")) and not list(run.glob("profile_*"))
    assert len(list(csv.DictReader((run / "steps.csv").open()))) == 14
    report = (run / "report.txt").read_text()
    assert "data-only" in report and "throughput (img/s)" in report and "data-only" in out


def test_data_only_on_food101_counts_a_corrupt_jpeg_in_results(tmp_path, capsys, food101_dir):
    meta = json.loads((food101_dir / "food-101" / "meta" / "train.json").read_text())
    import fakedata

    bad = food101_dir / "food-101" / "images" / f"{meta['baklava'][0]}.jpg"
    fakedata.corrupt_file(bad)
    code, _, err = invoke(
        ["run", "--dataset", "food101", "--data-dir", food101_dir, "--data-only", "--image-size", "32", "--batch-size", "3",
         "--epochs", "1", "--warmup-steps", "1", "--workers", "2", "--device", "cpu", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    assert r["data"]["corrupt_images_skipped"] == 1 and r["data"]["corrupt_image_examples"] == [str(bad)]
    assert r["data"]["workers"] == 2 and r["measured"]["images"] == 5 * 3


def test_cifar_run_records_the_resolved_loader_and_device_defaults(tmp_path, capsys, cifar10_dir):
    code, _, err = invoke(
        ["run", "--arch", "resnet18", "--dataset", "cifar10", "--data-dir", cifar10_dir, "--batch-size", "8", "--epochs", "1",
         "--max-steps", "3", "--warmup-steps", "1", "--device", "cpu", "--no-profile", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["loader"], cfg["channels_last"], cfg["pin_memory"], cfg["optimizer_impl"]) == (
        "fast",
        False,
        False,
        "for-loop",
    )
    r = json.loads((run / "results.json").read_text())
    assert r["backend"]["optimizer_impl"] == "for-loop" and r["compile_time_s"] is None
    assert r["data"]["workers"] == 0 and r["data"]["batches_on_device"] is True
    # no DataLoader workers: the cpu-starved rule must not count the --workers default
    assert r["verdict"]["bottleneck"] != "cpu-starved"


def test_compile_is_applied_and_its_time_is_reported_apart(tmp_path, capsys, monkeypatch):
    import time

    import torch

    compiled = []

    def fake_compile(model, **kw):  # the first call pays a "compilation", like torch.compile
        class Slow(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                if self.calls == 1:
                    time.sleep(2.0)
                return self.inner(x)

        compiled.append(model)
        return Slow()

    monkeypatch.setattr(torch, "compile", fake_compile)
    code, out, err = invoke(
        ["run", "--smoke", "--arch", "resnet18", "--batch-size", "4", "--max-steps", "4", "--warmup-steps", "1", "--compile",
         "--no-profile", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert len(compiled) == 1
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    # the compiling step is the warm-up step, outside the measured ones and the throughput
    assert r["warmup"]["steps"] == 1 and r["warmup"]["time_s"] >= 2.0 and r["measured"]["steps"] == 3
    # compile time = the first step minus a typical (median) measured one, from steps.csv written apart;
    # not ">= 1 s": on a loaded machine a measured step may itself take seconds
    rows = list(csv.DictReader((only_run(tmp_path) / "steps.csv").open()))
    step_s = [float(x["data_time_s"]) + float(x["compute_time_s"]) for x in rows]
    expected = max(0.0, step_s[0] - statistics.median(step_s[1:]))
    assert r["config"]["compile"] is True and r["compile_time_s"] == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert step_s[0] >= 2.0  # the "compilation" is in the first step's time, wherever the machine's speed
    assert "torch.compile time" in (only_run(tmp_path) / "report.txt").read_text()  # --quiet: the headline only


@pytest.mark.slow
def test_torch_compile_really_runs_on_the_cpu(tmp_path, capsys):
    # Inductor on the CPU needs a C++ compiler; a cold cache took ~50 s of compilation on 2 cores.
    code, _, err = invoke(
        ["run", "--smoke", "--arch", "resnet18", "--batch-size", "4", "--max-steps", "3", "--warmup-steps", "1", "--compile",
         "--no-profile", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    assert r["status"] == "ok" and r["compile_time_s"] is not None


@pytest.fixture
def captured(monkeypatch, tmp_path):
    seen: dict = {}

    def fake_run(cfg, **kw):
        seen["cfg"] = cfg
        return launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    return seen


def test_fast_options_map_to_config_fields(captured, capsys):
    code, _, _ = invoke(
        ["run", "--dataset", "food", "--loader", "fast", "--data-only", "--no-channels-last", "--no-cudnn-benchmark",
         "--pin-memory", "--optimizer-impl", "foreach"],
        capsys,
    )  # fmt: skip
    assert code == 0
    cfg = captured["cfg"]
    assert (cfg.loader, cfg.data_only, cfg.channels_last, cfg.cudnn_benchmark, cfg.pin_memory, cfg.optimizer_impl) == (
        "fast", True, False, False, True, "foreach",
    )  # fmt: skip
    assert invoke(["run", "--smoke", "--compile"], capsys)[0] == 0 and captured["cfg"].compile is True
    assert (
        invoke(["run", "--smoke", "--loader", "torchvision"], capsys)[0] == 0
        and captured["cfg"].loader == "torchvision"
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--loader", "magic"], "--loader: unknown value"),  # dali is a loader since issue 26
        (["run", "--optimizer-impl", "magic"], "--optimizer-impl: unknown value"),
        (["run", "--smoke", "--data-only", "--compile"], "--compile"),
        (["run", "--smoke", "--compile", "--warmup-steps", "0"], "--warmup-steps"),
        (["run", "--dataset", "cifar10", "--gpu-decode"], "--gpu-decode"),
    ],
)
def test_bad_fast_options_are_one_line_exit_2(captured, capsys, args, needle):
    code, out, err = invoke(args, capsys)
    assert code == 2 and needle in err and err.strip().count("\n") == 0 and "cfg" not in captured


def test_gpu_decode_without_cuda_is_one_line_exit_2(tmp_path, capsys, food101_dir, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, _, err = invoke(
        ["run", "--dataset", "food101", "--data-dir", food101_dir, "--gpu-decode", "--image-size", "32", "--batch-size", "3",
         "--max-steps", "2", "--warmup-steps", "1", "--output", tmp_path / "out", "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 2 and err.startswith("error: --gpu-decode") and err.strip().count("\n") == 0
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

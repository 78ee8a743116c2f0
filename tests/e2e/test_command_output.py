"""What confused a new user (issue 28, items 11-18): each answer as behaviour a test can fail on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clitools import invoke, only_run
from effbench.config import RunConfig, resolved_record, typed_option
from effbench.report import tables

# One tiny CPU run: 16 px, 2 steps of 4 images, no profiling pass.
TINY = ["--device", "cpu", "--weights", "none", "--batch-size", "4", "--max-steps", "2", "--max-val-steps", "1",
        "--epochs", "1", "--warmup-steps", "1", "--no-profile", "--quiet"]  # fmt: skip


# --- 11: the synthetic shape in one word, and said --------------------------------------------------------------


def test_synthetic_is_cifar_shaped_and_synthetic_imagenet_is_imagenet_shaped():
    # the seeds' ResNet-18 experiments are CIFAR's: 32 px, as resnet18 runs on cifar100 ("resnet18 32 on CIFAR")
    assert RunConfig(arch="resnet18", dataset="synthetic").image_size == 32
    assert RunConfig(arch="resnet18", dataset="cifar100").image_size == 32
    assert RunConfig(arch="resnet18", dataset="synthetic-cifar").dataset == "synthetic"  # the one-word alias
    assert RunConfig(arch="resnet18", dataset="synthetic-imagenet").image_size == 224
    # EfficientNet keeps its native size on either shape, as it does on CIFAR (upsampled there)
    assert RunConfig(arch="b0", dataset="synthetic").image_size == 224


def test_config_json_and_summary_say_which_synthetic_shape_ran():
    for name, shape, classes in (
        ("synthetic", "CIFAR-100-shaped", 100),
        ("synthetic-imagenet", "ImageNet-shaped", 1000),
    ):
        cfg = RunConfig(arch="resnet18", dataset=name, image_size=16)
        d = resolved_record(cfg, device_type="cpu", precision="fp32", repeats=1, data_info={"workers": 0})
        assert shape in d["dataset_shape"]
        assert RunConfig.from_dict(d).dataset == name  # still loads as a RunConfig (the extra key is ignored)
        from effbench.datasets import dataset_spec

        assert dataset_spec(name).num_classes == classes


def test_synthetic_imagenet_trains_a_1000_way_head(tmp_path, capsys):
    code, out, err = invoke(
        ["run", "--dataset", "synthetic-imagenet", "--arch", "resnet18", "--image-size", "16", *TINY,
         "--output", tmp_path],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    record = json.loads((run / "results.json").read_text())
    assert record["data"]["num_classes"] == 1000 and record["data"]["name"] == "synthetic-imagenet"
    assert json.loads((run / "config.json").read_text())["dataset_shape"] == "synthetic, ImageNet-shaped"
    # the summary's dataset row: the shape in words, and the 8 images that ran of the 50,000 of an epoch
    # (--quiet prints the headline only: the summary is report.txt's, its long values wrapped at 100 columns)
    summary = " ".join((run / "report.txt").read_text().split())
    assert "synthetic, ImageNet-shaped (8 of 50,000 train images per epoch" in summary


# --- 12: warnings only about options the user gave --------------------------------------------------------------


@pytest.mark.parametrize(
    "command, field, typed",
    [
        (["effbench", "run", "--workers", "2"], "workers", True),
        (["effbench", "run", "--workers=2"], "workers", True),
        (["effbench", "run", "--no-pin-memory"], "pin_memory", True),
        (["effbench", "run", "--dataset", "synthetic"], "workers", False),
        (["effbench", "run", "--workers-x", "2"], "workers", False),
    ],
)
def test_typed_option_reads_the_command_line(command, field, typed):
    assert typed_option(command, field) is typed


def test_no_warning_about_a_default_workers_but_one_about_a_typed_one(tmp_path, capsys):
    base = ["run", "--dataset", "synthetic", "--arch", "resnet18", "--image-size", "16", *TINY]
    code, out, err = invoke([*base, "--output", tmp_path / "a"], capsys)
    assert code == 0, err
    assert (
        "--workers" not in err and "--workers: no effect" not in (only_run(tmp_path / "a") / "report.txt").read_text()
    )
    # config.json still records what ran: synthetic data starts no worker, whatever the default says
    config = json.loads((only_run(tmp_path / "a") / "config.json").read_text())
    assert config["workers"] == 0 and "workers" in config["no_effect"]
    code, out, err = invoke([*base, "--workers", "2", "--output", tmp_path / "b"], capsys)
    assert code == 0, err
    assert "warning: --workers had no effect on this run" in err
    assert "--workers: no effect" in (only_run(tmp_path / "b") / "report.txt").read_text()


def test_a_cpu_profiling_pass_leaks_no_cpu_allocator_warning(tmp_path, capfd):
    # c10's CPUAllocator logs "[W... CPUAllocator.cpp:245] Memory block of unknown size was allocated before the
    # profiling started" (a C++ LOG on fd 2, no Python warning) when memory profiling sees a tensor made before
    # the pass freed in it: as every training loop's previous batch is.
    import torch

    from effbench.measure.profiling import run_profile_pass

    held = [torch.randn(64, 64) for _ in range(8)]  # made before the pass

    def step(_batch):
        if held:
            held.pop()  # freed inside it
        torch.randn(32, 32).sum()

    capfd.readouterr()
    run_profile_pass(step, iter(range(10)), device_type="cpu", out_dir=tmp_path, active=3)
    _, err = capfd.readouterr()
    assert "Memory block of unknown size" not in err


# --- 13: which throughput to quote, a CPU's TFLOP/s, what ran ---------------------------------------------------


def _rec(**fields):
    """A results.json record as the report reads it: typed, with the two fields every record has."""
    from effbench import results

    return results.record_of({"schema_version": 1, "status": "ok", **fields})


def test_summary_names_the_figure_to_quote_and_what_the_windows_are():
    rows = dict(tables.summary_rows(_rec(throughput_img_s=6.4)))
    assert rows[tables.HEADLINE_ROW] == "6.4" and "to quote" in tables.HEADLINE_ROW
    assert "noise" in tables.WINDOWS_ROW


@pytest.mark.parametrize(
    "tflops, shown", [(0.002, "0.0020"), (0.03, "0.030"), (0.0000412, "0.000041"), (12.5, "12.500")]
)
def test_achieved_tflops_on_a_cpu_shows_its_value(tflops, shown):
    assert dict(tables.summary_rows(_rec(achieved_tflops=tflops)))["achieved TFLOP/s"] == shown


def test_dataset_row_says_the_images_that_ran():
    record = {
        "config": {"dataset": "cifar100"},
        "data": {"train_size": 50_000, "val_size": 10_000},
        "epochs": [{"epoch": 1, "images": 192}],
    }
    assert (
        dict(tables.summary_rows(_rec(**record)))["dataset"]
        == "cifar100 (192 of 50,000 train images per epoch / 10,000 val)"
    )
    record["epochs"] = [{"epoch": 1, "images": 50_000}]
    assert (
        dict(tables.summary_rows(_rec(**record)))["dataset"] == "cifar100 (50,000 train images per epoch / 10,000 val)"
    )


# --- 14: doctor on a fresh clone; 15: the dataset catalog -------------------------------------------------------


def _no_gpu(monkeypatch):
    from effbench.system import hardware, preflight

    monkeypatch.setattr(preflight, "probe_gpus", lambda: preflight.GpuState(torch_version="2.14.1+cu130"))
    # and an idle CPU: on a machine busier than its cores doctor's last line names the load instead (test_preflight)
    monkeypatch.setattr(hardware, "read_cpu_load", lambda: hardware.CpuLoad(0.2, 0.0, 2, 2.0))


def test_doctor_with_no_options_passes_without_datasets_and_lists_them(tmp_path, monkeypatch, capsys):
    _no_gpu(monkeypatch)
    empty = tmp_path / "data"
    empty.mkdir()
    code, out, err = invoke(["doctor", "--data-dir", empty, "--output", tmp_path / "out"], capsys)
    assert code == 0, out + err
    assert "all checks passed" in out
    table = out[out.index("datasets under --data-dir") :]
    assert "cifar100 (cifar)" in table and "missing" in table and "--download" in table
    assert "synthetic-imagenet" in table and "generated (224 px, 1000 classes)" in table
    # asked for, the missing dataset fails as `run` would
    code, out, err = invoke(
        ["doctor", "--dataset", "cifar100", "--data-dir", empty, "--output", tmp_path / "out"], capsys
    )
    assert code == 2 and "would stop at: dataset" in out


def test_datasets_says_which_are_present(tmp_path, capsys):
    from effbench.datasets import CATALOG

    data = tmp_path / "data"
    cifar10 = data / CATALOG["cifar10"].archive.folder
    cifar10.mkdir(parents=True)
    for part in CATALOG["cifar10"].archive.required:
        (cifar10 / part).write_bytes(b"")
    (data / "cifar-100-python").mkdir()
    (data / "cifar-100-python" / "train").write_bytes(b"")
    code, out, err = invoke(["datasets", "--data-dir", data], capsys)
    assert code == 0, err
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if line[:1].isalpha()}
    assert "present" in rows["cifar10"]
    assert "incomplete: lacks test, meta" in rows["cifar100 (cifar)"]
    assert "missing" in rows["food101 (food)"]
    code, out, err = invoke(["datasets", "--data-dir", ""], capsys)
    assert code == 2 and err.startswith("error: --data-dir")


@pytest.mark.parametrize("own, torchvision_name", [("resnet18", "resnet18"), ("efficientnet-b0", "efficientnet_b0")])
def test_own_models_params_and_gflops_match_torchvision_published_figures(own, torchvision_name):
    # The reference: torchvision's own weights metadata (torchvision/models/resnet.py, efficientnet.py `_meta`:
    # num_params, and `_ops` in GMACs, 2 FLOPs each), a count made apart from effbench's.
    import torchvision.models as tvm

    from effbench.models import catalog

    meta = tvm.get_model_weights(torchvision_name).DEFAULT.meta
    row = catalog.info(own)
    assert row.params == meta["num_params"]  # the same layers: 11,689,512 and 5,288,548
    assert row.forward_gflops == pytest.approx(2 * meta["_ops"], rel=0.005)


def test_models_lists_no_dash_for_effbench_own_rows(capsys):
    code, out, err = invoke(["models", "--source", "effbench"], capsys)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith(("efficientnet-", "resnet18"))]
    assert len(rows) == 9 and all("-" not in r[2:5] for r in rows), rows


# --- 16: the selftest's own runs are not the user's -------------------------------------------------------------


def test_export_and_leaderboard_of_results_skip_the_selftests_runs(tmp_path, capsys):
    from test_across_runs import make_run

    from effbench.analysis import export as ex

    out = tmp_path / "results"
    make_run(out / "20261125-0600_mine", [100.0, 100.0, 100.0])
    selftest = make_run(out / "20261125-0700_selftest_cpu" / "runs" / "20261125-0701_b0", [5.0, 5.0, 5.0])
    record = json.loads((selftest / "results.json").read_text())
    record["command"] = list(ex.SELFTEST_COMMAND)  # as selftest/checks.py runs them
    (selftest / "results.json").write_text(json.dumps(record))
    code, csv_text, err = invoke(["export", out], capsys)
    assert code == 0, err
    assert "mine" in csv_text and "selftest" not in csv_text
    # the leaderboard of results/ ranks the user's run alone
    assert [Path(r.row["path"]).name for r in ex.collect([out])] == ["20261125-0600_mine"]
    # asked for by its folder, the selftest's runs are exported, marked as such
    rows = [r.row for r in ex.collect([out / "20261125-0700_selftest_cpu"])]
    assert [r["kind"] for r in rows] == ["selftest"]
    code, _, err = invoke(["export", out / "20261125-0700_selftest_cpu" / "runs" / "20261125-0701_b0"], capsys)
    assert code == 0, err
    shutil.rmtree(out / "20261125-0600_mine")
    code, _, err = invoke(["export", out], capsys)
    assert code == 2 and "holds only the selftest's own runs" in err


# --- 17: compare by a name's start, or latest -------------------------------------------------------------------


def test_compare_takes_a_unique_prefix_or_latest(tmp_path, capsys, monkeypatch):
    from test_across_runs import make_run

    out = tmp_path / "results"
    make_run(out / "20261125-061200_resnet18_synthetic_cpu_fp32_bs32", [100.0, 100.0, 100.0])
    make_run(out / "20261125-071500_resnet18_synthetic_cpu_fp32_bs32", [90.0, 90.0, 90.0])
    make_run(out / "20261125-071600_resnet18_synthetic_cpu_fp32_bs32", [80.0, 80.0, 80.0])
    (out / "20261125-0800_not_a_run").mkdir()  # newest by name, but holds no results.json
    monkeypatch.setenv("EFFBENCH_OUTPUT", str(out))
    monkeypatch.chdir(tmp_path)
    code, text, err = invoke(["compare", "20261125-0612", "latest"], capsys)
    assert code == 0, err
    assert "20261125-061200_resnet18" in text and "20261125-071600_resnet18" in text
    # a prefix inside a folder typed before it
    code, text, err = invoke(["compare", "results/20261125-0612", "results/20261125-0716"], capsys)
    assert code == 0, err
    # ambiguous: one line listing the matches, exit 2
    code, _, err = invoke(["compare", "20261125-071", "latest"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: 20261125-071: matches 2 folders") and "071500" in err and "071600" in err
    code, _, err = invoke(["compare", "1999", "latest"], capsys)
    assert code == 2 and err.startswith("error: 1999: does not exist, and no run or sweep folder")
    monkeypatch.setenv("EFFBENCH_OUTPUT", str(tmp_path / "empty"))
    code, _, err = invoke(["compare", "latest", "latest"], capsys)
    assert code == 2 and err.startswith("error: latest:")


def test_latest_names_a_run_folder_in_report_and_export_and_never_compares_a_run_with_itself(
    tmp_path, capsys, monkeypatch
):
    # issue 47 item 10: `report latest` failed (latest worked in compare only), and `compare X latest` with X the
    # latest compared a run with itself, silently: every row "equal"
    from test_across_runs import make_run

    out = tmp_path / "results"
    old = make_run(out / "20261125-061200_resnet18_synthetic_cpu_fp32_bs32", [100.0, 100.0, 100.0])
    new = make_run(out / "20261125-071600_resnet18_synthetic_cpu_fp32_bs32", [80.0, 80.0, 80.0])
    record = json.loads((old / "results.json").read_text())  # make_run's runs all finished at 10:01
    (old / "results.json").write_text(json.dumps({**record, "finished_at": "2026-11-23T09:00:00+00:00"}))
    monkeypatch.setenv("EFFBENCH_OUTPUT", str(out))
    monkeypatch.chdir(tmp_path)
    code, text, err = invoke(["report", "latest"], capsys)
    assert code == 0, err
    assert (new / "report.txt").is_file() and not (old / "report.txt").exists()
    code, text, err = invoke(["export", "latest", "--format", "jsonl"], capsys)
    assert code == 0 and [json.loads(line)["path"] for line in text.splitlines()] == [str(new)], err
    for args in (["compare", new, "latest"], ["compare", "latest", "20261125-0716"], ["compare", "latest", "latest"],
                 ["compare", new / "results.json", "latest"]):  # fmt: skip
        code, text, err = invoke(args, capsys)
        assert code == 2 and text == "" and len(err.splitlines()) == 1, (args, err)
        assert err.startswith("error: latest: is ") and "name another run to compare with it" in err
    code, text, err = invoke(["compare", old, "latest"], capsys)
    assert code == 0 and text.splitlines()[1] == f"B: {new}", err
    # the same folder typed twice is the user's own choice
    assert invoke(["compare", new, new], capsys)[0] == 0


def test_latest_is_what_finished_last_not_the_last_name(tmp_path, capsys, monkeypatch):
    # issue 34: `compare 20261126-2311 latest` took `sweep-workers` (last by name, written 23:11) for the run that
    # finished at 23:17, then refused to compare a sweep with a run
    from test_across_runs import make_run
    from test_sweep_report import make_sweep

    from effbench import results

    out = tmp_path / "results"

    def finished(run: Path, when: str) -> Path:
        record = json.loads((run / "results.json").read_text())
        results.write_json(run / "results.json", {**record, "finished_at": when})
        return run

    base = finished(make_run(out / "20261126-2311_run", [100.0] * 3), "2026-11-26T23:12:00+00:00")
    newest = finished(make_run(out / "20261126-2300_early_name", [90.0] * 3), "2026-11-26T23:17:00+00:00")
    finished(make_run(out / "20261126-2350_late_name", [80.0] * 3), "2026-11-26T23:15:00+00:00")
    make_sweep(out, {"batch_size": [32]}, [({"batch_size": 32}, {"devices": 1, "batch": 32, "throughput": 1.0})])
    sweep = out / "sweep-x"  # "sweep-..." sorts after every run name; its cell finished at 23:20
    m = json.loads((sweep / "sweep.json").read_text())
    m["cells"][0]["finished_at"] = "2026-11-26T23:20:00+00:00"
    results.write_json(sweep / "sweep.json", m)
    monkeypatch.setenv("EFFBENCH_OUTPUT", str(out))
    monkeypatch.chdir(tmp_path)
    # against a run, latest is the run that finished last (23:17), not the last name nor the newer sweep
    code, text, err = invoke(["compare", "20261126-2311", "latest"], capsys)
    assert code == 0, err
    assert text.splitlines()[1] == f"B: {newest}"
    code, text, err = invoke(["compare", "latest", str(base)], capsys)
    assert code == 0 and text.splitlines()[0] == f"A: {newest}", err
    # a gate needs runs: latest is a run even when a sweep finished later
    code, text, err = invoke(["compare", str(base), "latest", "--fail-if-slower", "50"], capsys)
    assert code == 0 and text.splitlines()[1] == f"B: {newest}", err
    # alone, latest is whichever finished last: the sweep
    from effbench.analysis import compare as cmp

    assert cmp.resolve_folder(Path("latest"), out) == sweep
    # with no end time (killed while running), the file's last write: an mtime after the others'
    record = json.loads((base / "results.json").read_text())
    del record["finished_at"]
    results.write_json(base / "results.json", {**record, "status": "running"})
    assert cmp.finished_time(base) == (base / "results.json").stat().st_mtime
    assert cmp.resolve_folder(Path("latest"), out, "run") == base


# --- 18: a sweep on a busy machine names no best; a one-epoch chart -------------------------------------------


def test_a_sweep_with_contended_cells_names_no_best_and_says_so(tmp_path):
    from test_sweep_report import make_sweep

    from effbench.report import render
    from effbench.report import sweep_tables as sweep_report

    dims = {"workers": [0, 2]}
    cells = [({"workers": w}, {"devices": 1, "batch": 32, "throughput": thr}) for w, thr in ((0, 57.5), (2, 6.8))]
    folder = make_sweep(tmp_path, dims, cells)
    _, rows = render.load_sweep(folder)
    # the reference: the same cells, their windows far apart, do name a best when no cell was contended
    assert "highest throughput along workers: 0 (57.5 img/s)" in sweep_report.verdicts(rows, dims)
    busy = folder / "cells" / "001" / "run" / "results.json"
    record = json.loads(busy.read_text())
    record["verdict"] = {"bottleneck": "cpu-contended", "evidence": "host CPU 100% busy", "advice": "rerun"}
    busy.write_text(json.dumps(record))
    _, rows = render.load_sweep(folder)
    lines = sweep_report.verdicts(rows, dims)
    assert not any(line.startswith(("highest throughput", "fewest workers")) for line in lines), lines
    assert any(line.startswith("no highest throughput along workers: 1 of 2 cells ran cpu-contended") for line in lines)
    assert any(line.startswith("no best workers by data wait: 1 of 2 cells ran cpu-contended") for line in lines)
    _, body = sweep_report.summary_table(rows, list(dims))
    assert [b[2] for b in body] == ["ok", "ok (cpu-contended)"]
    render.write_sweep_reports(folder)
    page = (folder / "report.html").read_text()
    assert "1 of 2 cells ran cpu-contended" in page and "highest throughput along workers: 0" not in page


def test_a_one_epoch_top1_chart_is_bars_with_their_values(tmp_path):
    pytest.importorskip("matplotlib")
    from effbench.report import plots

    fig = plots.top1_figure({"resnet18": {"train": [0.026], "val": [0.0469]}}, title="Top-1 per epoch")
    ax = fig.axes[0]
    heights = sorted(round(p.get_height(), 4) for p in ax.patches)
    assert heights == [0.026, 0.0469]  # one bar each, the values themselves
    assert {t.get_text() for t in ax.texts} >= {"0.0260", "0.0469"}
    # several epochs keep their lines over an epoch axis
    fig = plots.top1_figure({"resnet18": {"train": [0.1, 0.2], "val": [0.1, 0.3]}}, title="Top-1 per epoch")
    assert not fig.axes[0].patches and len(fig.axes[0].lines) == 2
    assert plots.top1_per_epoch({"a": {"train": [0.5], "val": [None]}}, tmp_path / "t.png", title="t").is_file()


def test_a_run_with_a_target_draws_it_on_its_top1_chart(tmp_path, monkeypatch):
    # issue 34: the time-to-accuracy run's top-1 chart did not show the target it raced to
    pytest.importorskip("matplotlib")
    from effbench import results
    from effbench.report import plots, render

    def target_lines(fig):
        return [ln for ln in fig.axes[0].lines if list(ln.get_ydata()) == [0.9, 0.9]]

    for epochs in ([0.5], [0.5, 0.7, 0.85]):  # bars for one epoch, lines for more: the target on both
        fig = plots.top1_figure({"digits": {"train": epochs, "val": epochs}}, title="t", target=0.9)
        (line,) = target_lines(fig)
        assert line.get_label() == "target val top-1 0.9" and fig.axes[0].get_ylim()[1] >= 0.9
        assert not target_lines(plots.top1_figure({"digits": {"train": epochs, "val": epochs}}, title="t"))
    seen = {}
    monkeypatch.setattr(plots, "top1_per_epoch", lambda *a, **k: seen.update(k) or tmp_path / "x.png")
    epoch = {"epoch": 1, "images": 10, "train_top1": 0.5, "val_top1": 0.6}
    record = results.record_of({"schema_version": 1, "status": "ok", "epochs": [epoch, {**epoch, "epoch": 2}],
                                "time_to_accuracy": {"target_top1": 0.9, "reached_target": False}})  # fmt: skip
    render.run_plots(record, tmp_path)
    assert seen["target"] == 0.9

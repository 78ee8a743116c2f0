"""Sweep planning without running anything: lists, presets, cells, the manifest, faults, HTML, compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from effbench import results
from effbench.analysis import compare
from effbench.run import faults
from effbench.report import html as html_report
from effbench.sweep import manifest
from effbench.sweep import presets
from effbench.errors import EffbenchError
from effbench.sweep.spec import SweepSpec, config_identity, one_value, parse_list, plan_cells
from effbench.results import record_of

SYNTH = {
    "dataset": "synthetic",
    "device": "cpu",
    "arch": "resnet18",
    "image_size": 32,
    "weights": "none",
    "max_steps": 3,
    "warmup_steps": 1,
}


# --- lists ------------------------------------------------------------------------------------------
def test_parse_list_types():
    assert parse_list("--batch-size", "32, 64,128", "count") == (32, 64, 128)
    assert parse_list("--workers", "0,2", "int") == (0, 2)
    assert parse_list("--batch-norm", "on,off", "onoff") == (True, False)
    assert parse_list("--optimizer", "sgd,adam") == ("sgd", "adam")


@pytest.mark.parametrize(
    "text, kind, needle",
    [("32,,64", "count", "empty item"), ("32,", "count", "empty item"), ("32,x", "count", "not a whole number"),
     ("0,4", "count", "1 or more"), ("sgd,sgd", "str", "twice"), ("on,maybe", "onoff", "on or off")],
)  # fmt: skip
def test_parse_list_errors_name_the_option(text, kind, needle):
    with pytest.raises(EffbenchError) as info:
        parse_list("--batch-size", text, kind)
    assert info.value.option == "--batch-size" and needle in info.value.message


@pytest.mark.parametrize("option, text", [("--batch-size", "0,32"), ("--batch-size", "32,70000"),
                                          ("--workers", "2,2000"), ("--image-size", "8,32")])  # fmt: skip
def test_a_swept_value_out_of_range_says_what_run_says(option, text, capsys):
    # issue 34: the sweep's `--batch-size 0,32` said "0 must be 1 or more", run's gives the range
    from clitools import invoke

    bad = next(v for v in text.split(",") if v not in ("32", "2"))
    with pytest.raises(EffbenchError) as swept:
        parse_list(option, text, "count" if option != "--workers" else "int")
    code, _, err = invoke(["run", option, bad, "--dataset", "synthetic", "--device", "cpu"], capsys)
    assert code == 2 and err == f"error: {swept.value.option}: {swept.value.message}\n"
    assert "range" in swept.value.message or "outside" in swept.value.message


def test_one_value_refuses_a_list():
    assert one_value("--epochs", "3", int) == 3 and one_value("--epochs", None, int) is None
    with pytest.raises(EffbenchError) as info:
        one_value("--epochs", "1,2", int)
    assert (
        info.value.option == "--epochs"
        and "takes one value" in info.value.message
        and "--batch-size" in info.value.message
    )
    with pytest.raises(EffbenchError, match="not a whole number"):
        one_value("--epochs", "two", int)


# --- presets ----------------------------------------------------------------------------------------
def test_every_preset_expands_to_valid_cells(tmp_path):
    for name in presets.PRESETS:
        plan = plan_cells(
            SweepSpec(preset=name, options={"image_size": 32, "weights": "none"}, output=tmp_path),
            visible_gpus=0,
            cores=2,
        )
        assert plan.name == f"sweep-{name}" and len(plan.cells) >= 2, name


def test_preset_values_and_explicit_overrides(tmp_path):
    plan = plan_cells(SweepSpec(preset="workers", output=tmp_path))
    assert [c.params["workers"] for c in plan.cells] == [0, 1, 2, 4, 8]
    assert {(c.config.arch, c.config.dataset) for c in plan.cells} == {("resnet18", "cifar10")}
    plan = plan_cells(
        SweepSpec(preset="workers", lists={"workers": (0, 2)}, options={"dataset": "synthetic"}, output=tmp_path)
    )
    assert [c.params["workers"] for c in plan.cells] == [0, 2] and plan.cells[0].config.dataset == "synthetic"
    plan = plan_cells(SweepSpec(preset="optimizers", output=tmp_path))
    assert [c.config.optimizer for c in plan.cells] == ["sgd", "sgd-nesterov", "adagrad", "adadelta", "adam"]
    assert [c.config.batch_norm for c in plan_cells(SweepSpec(preset="batchnorm", output=tmp_path)).cells] == [
        True,
        False,
    ]
    assert [c.config.batch_size for c in plan_cells(SweepSpec(preset="batch-size", output=tmp_path)).cells] == [
        32,
        128,
        512,
        2048,
        8192,
    ]
    assert [c.config.arch for c in plan_cells(SweepSpec(preset="models", output=tmp_path)).cells] == [
        "efficientnet-b0",
        "efficientnet-b3",
        "efficientnet-b5",
    ]


def test_scaling_preset_uses_gpus_or_cpu_processes(tmp_path):
    cpu = plan_cells(SweepSpec(preset="scaling", output=tmp_path), visible_gpus=0, cores=2)
    assert cpu.dims == {"nproc": (1, 2), "scaling": ("strong", "weak")} and {c.config.device for c in cpu.cells} == {
        "cpu"
    }
    gpu = plan_cells(SweepSpec(preset="scaling", output=tmp_path), visible_gpus=6, cores=16)
    assert gpu.dims["gpus"] == (1, 2, 4, 6) and len(gpu.cells) == 8
    assert presets.device_counts(1) == (1,) and presets.device_counts(8) == (1, 2, 4, 8)


def test_unknown_preset():
    with pytest.raises(EffbenchError) as info:
        SweepSpec(preset="fastest")
    assert info.value.option == "--preset" and "workers" in info.value.message


# --- cells -------------------------------------------------------------------------------------------
def test_product_order_and_keys(tmp_path):
    plan = plan_cells(SweepSpec(lists={"workers": (0, 1), "batch_size": (4, 8)}, options=SYNTH, output=tmp_path))
    assert [c.params for c in plan.cells] == [
        {"batch_size": 4, "workers": 0}, {"batch_size": 4, "workers": 1}, {"batch_size": 8, "workers": 0}, {"batch_size": 8, "workers": 1}
    ]  # fmt: skip
    assert plan.cells[1].key == "001_batch-size-4_workers-1" and plan.name == "sweep-batch-size-workers"
    assert plan.cells[1].config.output == tmp_path / plan.name / "cells" / plan.cells[1].key


def test_zip_pairs_lists_and_checks_lengths(tmp_path):
    plan = plan_cells(
        SweepSpec(lists={"batch_size": (4, 8), "workers": (0, 2)}, options=SYNTH, zip=True, output=tmp_path)
    )
    assert [c.params for c in plan.cells] == [{"batch_size": 4, "workers": 0}, {"batch_size": 8, "workers": 2}]
    with pytest.raises(EffbenchError) as info:
        plan_cells(
            SweepSpec(lists={"batch_size": (4, 8, 16), "workers": (0, 2)}, options=SYNTH, zip=True, output=tmp_path)
        )
    assert info.value.option == "--zip"


def test_a_bad_value_in_any_cell_fails_before_running(tmp_path):
    with pytest.raises(EffbenchError) as info:
        plan_cells(SweepSpec(lists={"optimizer": ("sgd", "lamb")}, options=SYNTH, output=tmp_path))
    assert info.value.option == "--optimizer"
    with pytest.raises(EffbenchError, match="same run"):
        plan_cells(
            SweepSpec(lists={"arch": ("b0", "efficientnet-b0")}, options={"dataset": "synthetic"}, output=tmp_path)
        )
    with pytest.raises(EffbenchError, match="nothing to sweep"):
        SweepSpec(options=SYNTH)


# --- rounds ------------------------------------------------------------------------------------------
def test_rounds_run_the_grid_again_each_later_round_shuffled_the_same_way_every_time(tmp_path):
    spec = SweepSpec(lists={"batch_size": (4, 8, 16, 32)}, options=SYNTH, rounds=3, output=tmp_path)
    plan = plan_cells(spec)
    assert plan.dims == {"round": (1, 2, 3), "batch_size": (4, 8, 16, 32)} and plan.name == "sweep-batch-size"
    assert [c.params["round"] for c in plan.cells] == [1] * 4 + [2] * 4 + [3] * 4
    by_round = [[c.params["batch_size"] for c in plan.cells if c.params["round"] == r] for r in (1, 2, 3)]
    assert by_round[0] == [4, 8, 16, 32]  # round 1 in grid order
    assert all(sorted(b) == [4, 8, 16, 32] for b in by_round) and by_round[1] != by_round[0]  # every cell, reordered
    assert [c.key for c in plan_cells(spec).cells] == [c.key for c in plan.cells]  # a resume plans the same order
    assert plan.cells[4].key.startswith("004_round-2_batch-size-")
    assert len({c.key for c in plan.cells}) == 12 and len({c.config.output for c in plan.cells}) == 12
    # the round is no run option: every round runs the same RunConfig
    assert {c.config.batch_size for c in plan.cells if c.params["round"] == 2} == {4, 8, 16, 32}


def test_rounds_of_one_configuration_need_no_list(tmp_path):
    plan = plan_cells(SweepSpec(options={**SYNTH, "batch_size": 4}, rounds=2, output=tmp_path))
    assert [c.params for c in plan.cells] == [{"round": 1}, {"round": 2}] and plan.name == "sweep-round"
    first, second = (config_identity(c.config) for c in plan.cells)  # all but where each writes
    assert first == second and first["batch_size"] == 4


@pytest.mark.parametrize("bad", [0, 101, True, 2.0])
def test_rounds_out_of_range_name_the_option(bad, tmp_path):
    with pytest.raises(EffbenchError) as info:
        SweepSpec(lists={"batch_size": (4, 8)}, options=SYNTH, rounds=bad, output=tmp_path)
    assert info.value.option == "--rounds" and "1 to 100" in info.value.message


def test_rounds_count_toward_the_cell_limit(tmp_path):
    with pytest.raises(EffbenchError) as info:
        plan_cells(SweepSpec(lists={"workers": tuple(range(200))}, options=SYNTH, rounds=51, output=tmp_path))
    assert "10,200 cells" in info.value.message and "51 rounds" in info.value.message


def _rounds_manifest(tmp_path, rounds):
    plan = plan_cells(SweepSpec(lists={"batch_size": (4, 8, 16)}, options=SYNTH, rounds=rounds, output=tmp_path))
    cells = [{"key": c.key, "params": c.params, "config": config_identity(c.config)} for c in plan.cells]
    return manifest.new_manifest(
        name=plan.name, preset=None, dims=plan.dims, zipped=False, cells=cells, command=["effbench", "sweep"]
    )


def test_more_rounds_grow_a_sweep_and_keep_what_ran_fewer_or_from_one_are_refused(tmp_path):
    three, five = _rounds_manifest(tmp_path, 3), _rounds_manifest(tmp_path, 5)
    ran = manifest.update_cell(three, three["cells"][4]["key"], status="ok", run_dir="cells/x/run")
    grown = manifest.resume(ran, five, tmp_path)
    assert [c["key"] for c in grown["cells"]] == [c["key"] for c in five["cells"]]  # rounds 1-3 planned the same
    assert grown["cells"][4]["status"] == "ok" and grown["cells"][4]["run_dir"] == "cells/x/run"
    assert [c["status"] for c in grown["cells"][9:]] == ["pending"] * 6 and grown["fingerprint"] == five["fingerprint"]
    assert grown["dims"]["round"] == [1, 2, 3, 4, 5]
    with pytest.raises(EffbenchError, match="3 round\\(s\\) there, --rounds 2 now; pass --rounds 3 or more"):
        manifest.resume(three, _rounds_manifest(tmp_path, 2), tmp_path)
    with pytest.raises(EffbenchError, match="1 round\\(s\\) there, --rounds 3 now; pass --rounds 1 to resume"):
        manifest.resume(_rounds_manifest(tmp_path, 1), three, tmp_path)  # round 1's keys have no round: no growth


# --- manifest ----------------------------------------------------------------------------------------
def _manifest(tmp_path, batch=(4, 8)):
    plan = plan_cells(SweepSpec(lists={"batch_size": batch}, options=SYNTH, output=tmp_path))
    cells = [{"key": c.key, "params": c.params, "config": config_identity(c.config)} for c in plan.cells]
    return plan, manifest.new_manifest(
        name=plan.name, preset=None, dims=plan.dims, zipped=False, cells=cells, command=["effbench", "sweep"]
    )


def test_manifest_roundtrip_update_and_resume(tmp_path):
    plan, m = _manifest(tmp_path)
    plan.folder.mkdir(parents=True)
    manifest.write_manifest(plan.folder, m)
    back = manifest.read_manifest(plan.folder)
    assert back["fingerprint"] == m["fingerprint"] and [c["status"] for c in back["cells"]] == ["pending", "pending"]
    first = plan.cells[0].key
    done = manifest.update_cell(back, first, status="ok", run_dir="cells/x/run")
    assert back["cells"][0]["status"] == "pending"  # a copy, not a mutation
    assert manifest.to_run(done) == [plan.cells[1].key]
    assert manifest.counts(manifest.typed(done)) == {"ok": 1, "pending": 1}
    assert manifest.resume(done, m, plan.folder)["cells"][0]["status"] == "ok"  # same sweep: keeps progress
    assert not list(plan.folder.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_manifest_refuses_a_different_sweep(tmp_path):
    plan, m = _manifest(tmp_path, (4, 8))
    _, other = _manifest(tmp_path, (4, 16))
    with pytest.raises(EffbenchError) as info:
        manifest.resume(m, other, plan.folder)
    assert (
        info.value.option == str(plan.folder)
        and "--name" in info.value.message
        and "different sweep" in info.value.message
    )


@pytest.mark.parametrize(
    "content",
    ["{not json", "[]", json.dumps({"kind": "sweep", "schema_version": 1, "cells": [{"key": "a", "status": "bogus"}]})],
)
def test_corrupt_manifest_names_the_file(tmp_path, content):
    (tmp_path / "sweep.json").write_text(content)
    with pytest.raises(EffbenchError) as info:
        manifest.read_manifest(tmp_path)
    assert info.value.option == str(tmp_path / "sweep.json")


# --- faults, html, compare -----------------------------------------------------------------------------
def test_fault_hook_threshold_and_oom_recognition():
    import torch

    assert faults.oom_threshold({}) is None and faults.oom_threshold({faults.FAULT_OOM_ENV: "x"}) is None
    faults.inject_oom(4, {faults.FAULT_OOM_ENV: "8"})  # below: nothing happens
    with pytest.raises(torch.OutOfMemoryError, match="test hook"):
        faults.inject_oom(8, {faults.FAULT_OOM_ENV: "8"})
    assert faults.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert faults.is_out_of_memory(
        RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried")
    )
    assert not faults.is_out_of_memory(RuntimeError("shape mismatch"))


def test_fault_hook_oom_can_target_one_rank():
    import torch

    hook = faults.FAULT_OOM_ENV
    assert faults.oom_threshold({hook: "1:4", "RANK": "1"}) == 4
    assert faults.oom_threshold({hook: "1:4", "RANK": "0"}) is None and faults.oom_threshold({hook: "1:4"}) is None
    assert faults.oom_threshold({hook: "8", "RANK": "1"}) == 8  # the bare form: every rank
    for bad in ("x:4", "1:", ":4", "1:0", "1:4:2", "-1:4"):
        assert faults.oom_threshold({hook: bad, "RANK": "1"}) is None, bad
    met = []  # the one-rank form: every rank reaching the batch meets the others first, the target then fails
    faults.inject_oom(8, {hook: "1:4", "RANK": "0"}, barrier=lambda: met.append(0))  # another rank's: no OOM
    with pytest.raises(torch.OutOfMemoryError, match="=1:4: batch size per device 8 >= 4"):
        faults.inject_oom(8, {hook: "1:4", "RANK": "1"}, barrier=lambda: met.append(1))
    assert met == [0, 1]
    faults.inject_oom(2, {hook: "1:4", "RANK": "0"}, barrier=lambda: met.append("below"))  # below: no barrier
    with pytest.raises(torch.OutOfMemoryError):
        faults.inject_oom(8, {hook: "8", "RANK": "0"}, barrier=lambda: met.append("bare"))  # every rank: no barrier
    assert met == [0, 1]


def test_html_is_escaped_and_self_contained():
    page = html_report.page(
        "<b>t</b>",
        "s",
        [
            html_report.Section(
                "S", [html_report.table(["a"], [["<script>x</script>"]]), html_report.image(b"\x89PNG", alt="a")]
            )
        ],
    )
    assert "<script>" not in page and "&lt;script&gt;" in page and "data:image/png;base64," in page
    # a target outside the report's folder is text, never a link (issue 33 section 5)
    assert html_report.link("https://example.com/x", "x<") == "x&lt;"
    assert html_report.link("cells/a b/report.html", "a").startswith('<a href="./cells/a%20b/report.html"')


def test_compare_a_run_with_itself_is_within_noise():
    record = {"schema_version": 1, "status": "ok", "throughput_windows": {"windows": 4, "throughput_img_s": [10.0, 11.0, 9.5, 10.5], "step_time_ms": [4.0, 4.1, 3.9, 4.0],
                                     "data_time_share": [0.1, 0.12, 0.09, 0.1]}, "final": {"train_loss": 1.0}, "config": {"a": 1}}  # fmt: skip
    record = results.record_of({"schema_version": 1, "status": "ok", **record})
    deltas = compare.compare_runs(record, [], record, [])
    assert all(d.significant is not True for d in deltas)
    text = compare.render_runs(deltas, a_name="A", b_name="B", differences=compare.config_differences(record, record))
    assert "no significant difference" in text and "within noise" in text and "configuration differences: none" in text


def test_presets_module_lists_the_seed_experiments():
    assert set(presets.PRESETS) == {
        "workers",
        "optimizers",
        "batchnorm",
        "cpu-vs-gpu",
        "batch-size",
        "scaling",
        "models",
        "yardstick",
        "loaders",
    }
    assert Path(presets.__file__).read_text().count("import torch") == 0


def test_run_repeats_reaches_the_config_and_is_validated(monkeypatch, tmp_path, capsys):
    from effbench.cli import app as cli
    from effbench.run import launch
    from effbench.config import RunConfig

    seen = {}

    def fake_run(cfg, **kw):
        seen["cfg"] = cfg
        return launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--smoke", "--repeats", "4", "--output", str(tmp_path)])
    assert info.value.code == 0 and seen["cfg"].repeats == 4
    with pytest.raises(EffbenchError) as err:
        RunConfig(max_steps=3, warmup_steps=1, epochs=1, repeats=5)
    assert err.value.option == "--repeats"


def test_smoke_makes_a_preset_tiny_and_offline(tmp_path):
    plan = plan_cells(SweepSpec(preset="optimizers", smoke=True, options={"arch": "resnet18"}, output=tmp_path))
    assert {(c.config.dataset, c.config.device, c.config.arch) for c in plan.cells} == {
        ("synthetic", "cpu", "resnet18")
    }
    assert len(plan.cells) == 5

"""`effbench sweep --preset loaders` (issue 26): every backend x --workers, data-only and training, one recipe.

The plan is checked without running anything; one small sweep runs end to end on the CPU, where the
gpu-decode cells are skipped with their reason and the others report img/s and the data wait share
side by side.
"""

from __future__ import annotations

import json

import pytest

import fakedata
from clitools import invoke
from effbench.sweep import presets
from effbench.sweep.spec import SweepSpec, plan_cells


def test_the_plan_crosses_every_backend_with_workers_and_data_only(tmp_path):
    plan = plan_cells(SweepSpec(preset="loaders", options={"data_dir": tmp_path}, output=tmp_path), cores=2)
    backends = {(c.config.loader, c.config.gpu_decode) for c in plan.cells}
    # gpu-decode is the fast loader's: never crossed with torchvision or dali
    assert backends == {("torchvision", False), ("fast", False), ("fast", True), ("dali", False)}
    assert {c.config.workers for c in plan.cells} == {0, 2, 4}
    assert {c.config.data_only for c in plan.cells} == {True, False}
    assert len(plan.cells) == 4 * 3 * 2
    # one recipe and one dataset for every cell
    assert {(c.config.augment, c.config.dataset, c.config.image_size) for c in plan.cells} == {("seed", "food101", 224)}


def test_smoke_keeps_the_preset_planable_on_generated_data(tmp_path):
    plan = plan_cells(SweepSpec(preset="loaders", smoke=True, output=tmp_path), cores=2)
    assert {c.config.dataset for c in plan.cells} == {"synthetic"}
    assert not any(c.config.gpu_decode for c in plan.cells)  # no files to decode: not a run


def test_presets_help_names_the_loaders_preset():
    assert "loaders" in presets.presets_help()


@pytest.mark.slow  # 8-13 s on 2 cores: run by `make test-slow` (CI's slow step for test_distributed)
@pytest.mark.dali
def test_loaders_sweep_runs_on_the_cpu_and_skips_gpu_decode_with_its_reason(tmp_path, capsys):
    pytest.importorskip("nvidia.dali")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the gpu-decode cells would run")
    root = fakedata.make_imagefolder(tmp_path / "data", classes=2, per_class=8, split=True, val_per_class=2, size=24)
    code, _, err = invoke(["sweep", "--preset", "loaders", "--dataset", "imagefolder", "--data-dir", root,
                           "--arch", "resnet18", "--image-size", 32, "--batch-size", 4, "--workers", 0,
                           "--max-steps", 3, "--warmup-steps", 1, "--max-val-steps", 1, "--weights", "none",
                           "--device", "cpu", "--no-profile", "--output", tmp_path / "out", "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    folder = tmp_path / "out" / "sweep-loaders"
    cells = json.loads((folder / "sweep.json").read_text())["cells"]
    status = {(c["params"]["loader"], c["params"]["gpu_decode"], c["params"]["data_only"]): c["status"] for c in cells}
    assert status == {
        ("torchvision", False, True): "ok", ("torchvision", False, False): "ok",
        ("fast", False, True): "ok", ("fast", False, False): "ok",
        ("fast", True, True): "skipped", ("fast", True, False): "skipped",
        ("dali", False, True): "ok", ("dali", False, False): "ok",
    }  # fmt: skip
    skipped = [c for c in cells if c["status"] == "skipped"]
    assert all(c["error"]["option"] == "--gpu-decode" and "on a CUDA device" in c["error"]["message"] for c in skipped)
    # the report: img/s and the data wait share of every backend side by side
    report = (folder / "sweep.md").read_text()
    assert "img/s" in report and "data %" in report
    html = (folder / "report.html").read_text()
    for backend in ("torchvision", "fast", "dali"):
        assert backend in report and backend in html
    assert "data %" in html and "img/s" in html
    assert (folder / "plots" / "throughput.png").is_file() and (folder / "plots" / "time_breakdown.png").is_file()


def test_preflight_says_how_to_install_dali_and_refuses_gpu_decode_on_the_cpu(tmp_path):
    from effbench.config import RunConfig
    from effbench.system.preflight import DALI_INSTALL, check_gpu_decode, check_loader

    cfg = RunConfig(dataset="imagefolder", data_dir=tmp_path, loader="dali", val_fraction=0.2, device="cpu")
    (err,) = check_loader(cfg, present=lambda name: name != "nvidia.dali")
    assert err.level == "error" and err.option == "--loader" and err.fix == DALI_INSTALL
    assert "effbench[dali]" in DALI_INSTALL
    assert check_loader(cfg, present=lambda name: True)[0].level == "ok"
    # generated data has its own loader whatever --loader says: nothing to install for it
    assert check_loader(RunConfig(dataset="synthetic", loader="dali"), present=lambda name: False) == []
    fast = RunConfig(dataset="imagefolder", data_dir=tmp_path, val_fraction=0.2, gpu_decode=True, device="cpu")
    (gd,) = check_gpu_decode(fast, None)
    assert gd.level == "error" and gd.option == "--gpu-decode" and "--device cpu" in gd.message


def test_without_dali_its_cells_are_skipped_with_the_install_line(tmp_path, monkeypatch):
    import sys

    from effbench.sweep.runner import blocked_cells

    root = fakedata.make_imagefolder(tmp_path / "data", classes=2, per_class=4, split=True, val_per_class=1, size=24)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # as if not installed
    plan = plan_cells(SweepSpec(preset="loaders", options={"dataset": "imagefolder", "data_dir": root,
                                                           "device": "cpu"}, output=tmp_path), cores=2)  # fmt: skip
    blocked = blocked_cells(plan, tmp_path / "out")
    by_backend = {(c.config.loader, c.config.gpu_decode): blocked.get(c.key) for c in plan.cells}
    assert by_backend[("torchvision", False)] is None and by_backend[("fast", False)] is None
    assert by_backend[("dali", False)].option == "--loader" and "effbench[dali]" in str(by_backend[("dali", False)])
    assert by_backend[("fast", True)].option == "--gpu-decode"

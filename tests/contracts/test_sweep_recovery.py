"""A sweep folder after something went wrong around it (issue 33, section 8): a lock file that is not a file, a
finished cell's run folder deleted, a sweep.json truncated; and inputs only a cell's model or the whole command
line can refuse (`--freeze last:N` beyond an arch's blocks, `--preset` given twice): each one line, before any
cell runs, or the sweep recovers and says how.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from clitools import invoke

from effbench.errors import EffbenchError
from effbench.sweep import manifest as M

pytestmark = pytest.mark.timeout(900)  # real tiny cells: seconds idle, minutes on a loaded 2-core machine

TINY = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--dataset", "synthetic",
        "--max-steps", "3", "--max-val-steps", "1", "--warmup-steps", "1", "--epochs", "1", "--workers", "0",
        "--no-profile", "--quiet"]  # fmt: skip


def _one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------------------------------
# The lock file
# --------------------------------------------------------------------------------------------------
def _plant(folder: Path, shape: str, outside: Path) -> None:
    lock = folder / M.LOCK_FILE
    if shape == "link-to-file":
        lock.symlink_to(outside)
    elif shape == "link-loop":
        lock.symlink_to(lock)
    elif shape == "folder":
        lock.mkdir()
    elif shape == "fifo":
        os.mkfifo(lock)


@pytest.mark.parametrize("shape", ["link-to-file", "link-loop", "folder", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_one_line_and_its_target_untouched(shape, tmp_path):
    folder, outside = tmp_path / "sweep-x", tmp_path / "precious.txt"
    folder.mkdir()
    outside.write_text("keep me\n")
    _plant(folder, shape, outside)
    with pytest.raises(EffbenchError) as info, M.locked(folder):
        pytest.fail("the lock was taken")
    assert str(folder / M.LOCK_FILE) in str(info.value) and "remove it and run the sweep again" in str(info.value)
    assert outside.read_text() == "keep me\n"


def test_a_sweep_into_a_folder_whose_lock_is_a_link_is_one_line(tmp_path, capsys):
    out, outside = tmp_path / "out", tmp_path / "precious.txt"
    folder = out / "sweep-batch-size"
    folder.mkdir(parents=True)
    outside.write_text("keep me\n")
    (folder / M.LOCK_FILE).symlink_to(outside)
    code, _, err = invoke(["sweep", *TINY, "--batch-size", "4,8", "--output", out], capsys)
    line = _one_line(code, err)
    assert "is a symbolic link, not the lock file a sweep makes there" in line
    assert outside.read_text() == "keep me\n" and not (folder / M.MANIFEST_FILE).exists()


# --------------------------------------------------------------------------------------------------
# A finished cell's run folder deleted; sweep.json truncated
# --------------------------------------------------------------------------------------------------
def _stamps(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (folder / "cells").rglob("results.json")}


def test_a_broken_sweep_json_moved_aside_is_rebuilt_and_a_deleted_cell_runs_again(tmp_path, capsys):
    args = ["sweep", *TINY, "--batch-size", "4,8", "--output", tmp_path]
    folder = tmp_path / "sweep-batch-size"
    code, _, err = invoke(args, capsys)
    assert code == 0, err
    first = json.loads((folder / M.MANIFEST_FILE).read_text())
    runs = _stamps(folder)

    # truncated mid-write (a full disk, a copy cut short): the advice keeps the finished cells
    text = (folder / M.MANIFEST_FILE).read_text()
    (folder / M.MANIFEST_FILE).write_text(text[: len(text) // 2])
    for command in (["report", folder], args):
        line = _one_line(*invoke(command, capsys)[::2])
        assert "move sweep.json aside" in line and "delete the sweep folder" not in line, line
    (folder / M.MANIFEST_FILE).rename(folder / "sweep.json.broken")  # as the advice says
    code, printed, err = invoke(args, capsys)
    assert code == 0, err
    assert "no sweep.json; rebuilt it from the cells' run folders (2 finished kept)" in printed
    assert "2 already ok, 0 to run" in printed
    assert _stamps(folder) == runs  # no cell ran again
    rebuilt = json.loads((folder / M.MANIFEST_FILE).read_text())
    assert [(c["key"], c["status"], c["run_dir"]) for c in rebuilt["cells"]] == [
        (c["key"], c["status"], c["run_dir"]) for c in first["cells"]
    ]
    assert rebuilt["cells"][1]["summary"]["throughput_img_s"] == first["cells"][1]["summary"]["throughput_img_s"]

    # a finished cell's run folder deleted: it is not ok any more, and the rerun says so and runs it
    lost = first["cells"][0]
    shutil.rmtree(folder / lost["run_dir"])
    line = _one_line(*invoke(["report", folder], capsys)[::2])
    assert f"{folder / lost['run_dir']}: is gone" in line and "run the sweep's command again" in line
    code, printed, err = invoke(args, capsys)
    assert code == 0, err
    assert f"cell {lost['key']}: its run folder {lost['run_dir']} is gone; running the cell again" in printed
    assert "1 already ok, 1 to run" in printed
    final = json.loads((folder / M.MANIFEST_FILE).read_text())
    assert [c["status"] for c in final["cells"]] == ["ok", "ok"]
    assert (folder / final["cells"][0]["run_dir"] / "results.json").is_file() and final["cells"][0]["attempts"] == 2
    assert final["cells"][1]["run_dir"] == first["cells"][1]["run_dir"]


def test_a_rebuilt_manifest_keeps_no_run_of_another_configuration(tmp_path):
    """A cell folder's run is kept only when it ran the cell's options (a value the run resolved, None or auto in
    the cell, aside): a run of another --lr under the same cell key runs again."""
    from effbench import results
    from effbench.sweep.runner import same_run

    record = results.record_of({
        "schema_version": 1, "status": "ok",
        "config": {"batch_size": 4, "lr": 0.1, "device": "cpu", "workers": 0, "warmup_steps": 1,
                   "requested": {"workers": 2}},
    })  # fmt: skip
    assert same_run({"batch_size": 4, "lr": 0.1, "device": "cpu", "workers": 2, "warmup_steps": None}, record)
    assert same_run({"batch_size": 4, "optimizer_impl": "auto"}, record)
    assert not same_run({"batch_size": 4, "lr": 0.01}, record)
    assert not same_run({"batch_size": 4, "workers": 0}, record)  # asked 2, ran 0: the cell asks 0


# --------------------------------------------------------------------------------------------------
# Inputs checked for every cell before the first runs
# --------------------------------------------------------------------------------------------------
def test_check_freeze_refuses_last_n_beyond_the_archs_blocks_without_building_weights():
    from effbench.config import RunConfig
    from effbench.models import check_freeze

    def cfg(arch: str, freeze: str) -> RunConfig:
        return RunConfig(arch=arch, dataset="synthetic", device="cpu", weights="none", freeze=freeze)

    check_freeze(cfg("resnet18", "last:8"))  # resnet18's 8 BasicBlocks (models/resnet.py)
    with pytest.raises(EffbenchError, match="last:9 exceeds the 8 blocks of resnet18"):
        check_freeze(cfg("resnet18", "last:9"))
    # torchvision's resnet50: 3 + 4 + 6 + 3 Bottlenecks (torchvision/models/resnet.py, layers=[3, 4, 6, 3])
    check_freeze(cfg("torchvision:resnet50", "last:16"))
    with pytest.raises(EffbenchError, match="last:17 exceeds the 16 blocks"):
        check_freeze(cfg("torchvision:resnet50", "last:17"))


def test_a_cell_whose_freeze_exceeds_its_archs_blocks_is_refused_before_any_cell_runs(tmp_path, capsys):
    # efficientnet-b0 (16 blocks) would run first and resnet18 (8) fail after it; both are checked first
    args = [a for a in TINY if a not in ("--arch", "resnet18")]
    code, out, err = invoke(["sweep", *args, "--arch", "efficientnet-b0,resnet18", "--freeze", "last:10",
                             "--batch-size", "4", "--output", tmp_path], capsys)  # fmt: skip
    line = _one_line(code, err)
    assert line.startswith("error: --freeze: cell 001_arch-resnet18: last:10 exceeds the 8 blocks of resnet18"), line
    assert list(tmp_path.iterdir()) == [] and "running" not in out  # no folder, no cell ran


@pytest.mark.parametrize("given", [["--preset", "optimizers", "--preset", "workers"],
                                   ["--preset=optimizers", "--preset", "workers"]])  # fmt: skip
def test_a_repeated_preset_is_one_line_before_anything(given, tmp_path, capsys):
    code, _, err = invoke(["sweep", *given, *TINY, "--output", tmp_path], capsys)
    line = _one_line(code, err)
    assert line.startswith("error: --preset: given 2 times ('optimizers', 'workers'); a sweep runs one preset"), line
    assert list(tmp_path.iterdir()) == []

"""`effbench sweep`, `report` and `compare` end to end on the CPU with tiny cells (~1-2 s each).

One 2 x 2 sweep (batch size x workers) is run once per module and shared by the report tests; the
resume test kills a real `python -m effbench sweep` with SIGKILL; the OOM test uses the fault hook.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from effbench.cli import app as cli
from browser import chromium_command, layout, overflowing
from clitools import invoke

TINY = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--dataset", "synthetic",
        "--max-steps", "4", "--warmup-steps", "1", "--epochs", "1", "--no-profile", "--quiet"]  # fmt: skip
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def manifest(folder: Path) -> dict:
    return json.loads((folder / "sweep.json").read_text())


@pytest.fixture(scope="module")
def sweep2x2(tmp_path_factory):
    """A finished 2 x 2 sweep folder and what the command printed."""
    out = tmp_path_factory.mktemp("sweep")
    buf, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        mp.delenv("COLUMNS", raising=False)  # as into a pipe: 100 columns (fitting a terminal: test_sweep_report)
        with pytest.raises(SystemExit) as info:
            cli.main(
                ["sweep", *TINY, "--batch-size", "4,8", "--workers", "0,1", "--repeats", "3", "--output", str(out)]
            )
    assert info.value.code == 0, err.getvalue()
    return out / "sweep-batch-size-workers", buf.getvalue()


def test_2x2_sweep_runs_four_ok_cells_with_a_summary(sweep2x2):
    folder, printed = sweep2x2
    m = manifest(folder)
    assert [c["status"] for c in m["cells"]] == ["ok"] * 4
    assert [c["params"] for c in m["cells"]] == [{"batch_size": b, "workers": w} for b in (4, 8) for w in (0, 1)]
    for c in m["cells"]:
        r = json.loads((folder / c["run_dir"] / "results.json").read_text())
        assert (
            r["status"] == "ok"
            and r["config"]["batch_size"] == c["params"]["batch_size"]
            and (r["config"].get("requested") or {}).get("workers", r["config"]["workers"]) == c["params"]["workers"]
            and r["config"]["workers"] == 0  # synthetic data starts no loader worker, whatever --workers says
        )
        assert r["throughput_windows"]["windows"] == 3 and c["summary"]["throughput_ci95_img_s"] is not None
        assert (folder / c["run_dir"] / "report.html").is_file()  # every run folder gets its HTML report
    text = (folder / "sweep.txt").read_text()
    no_best = "no best workers: --workers had no effect on these runs"
    for needle in ("Verdicts", no_best, "By --batch-size", "By --workers", "img/s [95% CI]"):
        assert needle in text, needle
    assert "best workers:" not in text.replace(no_best, "")  # no winner along an option with no effect
    assert "By --batch-size" in (folder / "sweep.md").read_text() and "|" in (folder / "sweep.md").read_text()
    assert no_best in printed and "4 cells, 0 already ok, 4 to run" in printed


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    return width, height


def test_every_png_is_a_real_image(sweep2x2):
    folder, _ = sweep2x2
    pngs = sorted(folder.rglob("*.png"))
    names = {p.name for p in (folder / "plots").glob("*.png")}
    assert {
        "time_breakdown.png",
        "throughput.png",
        "top1_per_epoch.png",
        "throughput_vs_batch.png",
    } <= names
    assert "data_time_vs_workers.png" not in names  # workers had no effect on synthetic data: no chart of it
    assert len(pngs) >= len(names) + 4 * 2  # plus each cell's own charts
    for p in pngs:
        w, h = _png_size(p)
        with Image.open(p) as im:
            im.verify()
        with Image.open(p) as im:
            assert im.size == (w, h) and w >= 400 and h >= 300, p
            assert len(im.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 10, p  # not blank


def test_html_report_renders_tables_and_images_in_chromium(sweep2x2, tmp_path):
    base = chromium_command(tmp_path / "profile")  # skips when chromium is not installed
    folder, _ = sweep2x2
    html = (folder / "report.html").read_text()
    for bad in ('src="http', "src='http", 'href="http', "<script", "<link", "@import", "url(http"):
        assert bad not in html, bad  # self-contained: opens offline
    url = (folder / "report.html").resolve().as_uri()
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    for table_id in ('id="cells"', 'id="by-batch-size"', 'id="by-workers"', 'id="environment"'):
        assert table_id in dom, table_id
    assert dom.count("<img") == len(list((folder / "plots").glob("*.png"))) and dom.count(
        "data:image/png;base64,"
    ) == dom.count("<img")
    assert "no best workers:" in dom and "000_batch-size-4_workers-0" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,2000", url], capture_output=True, timeout=120)
    with Image.open(shot) as im:
        assert im.size == (1200, 2000)
        rgb = im.convert("RGB")
        colors = rgb.getcolors(maxcolors=1 << 20)
        # the first chart (stacked bars) is on screen: its compute colour (plots.COMPUTE_COLOR) is painted
        assert colors is not None and sum(n for n, c in colors if c == (0x4C, 0x72, 0xB0)) > 2000
    # in a laptop's window every table fits: long values wrap (tests/e2e/test_report_html.py does a run's page)
    shown = layout(folder / "report.html", tmp_path, 1280, 900)
    assert overflowing(shown) == [] and {t["id"] for t in shown["tables"]} >= {"cells", "by-batch-size", "environment"}


def test_report_rerenders_without_torch(sweep2x2, tmp_path):
    folder, _ = sweep2x2
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    for p in [*copy.rglob("*.png"), *copy.rglob("report.html"), copy / "sweep.txt"]:
        p.unlink()
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('torch must not be imported by effbench report')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    check = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert check.returncode != 0 and "must not be imported" in check.stderr  # the blocker works
    proc = subprocess.run(
        [sys.executable, "-m", "effbench", "report", str(copy)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        (copy / "report.html").is_file()
        and (copy / "sweep.txt").is_file()
        # the same charts as the run drew (none of workers: it had no effect on synthetic data)
        and sorted(p.name for p in (copy / "plots").glob("*.png"))
        == sorted(p.name for p in (folder / "plots").glob("*.png"))
    )
    assert all((copy / c["run_dir"] / "report.html").is_file() for c in manifest(copy)["cells"])
    assert (copy / "sweep.txt").read_text() == (folder / "sweep.txt").read_text()


def test_compare_run_with_itself_and_sweep_with_itself(sweep2x2, capsys):
    folder, _ = sweep2x2
    run = folder / manifest(folder)["cells"][0]["run_dir"]
    code, out, err = invoke(["compare", run, run], capsys)
    assert code == 0, err
    assert "no significant difference" in out and "within noise" in out and "configuration differences: none" in out
    code, out, _ = invoke(["compare", folder, folder], capsys)
    assert code == 0 and "4 cells matched" in out and "no significant difference in any of the 4 matched cells" in out


def test_compare_and_report_name_a_corrupt_results_file(sweep2x2, tmp_path, capsys):
    folder, _ = sweep2x2
    run = tmp_path / "run"
    shutil.copytree(folder / manifest(folder)["cells"][0]["run_dir"], run)
    (run / "results.json").write_text('{"schema_version": 1, "status": ')
    for args in (["report", run], ["compare", run, run]):
        code, out, err = invoke(args, capsys)
        assert code == 2 and err.startswith("error: ") and str(run / "results.json") in err and err.count("\n") == 1
        assert "Traceback" not in out + err


def test_a_different_sweep_in_the_same_folder_is_refused(sweep2x2, capsys):
    folder, _ = sweep2x2
    before = (folder / "sweep.json").read_bytes()
    args = ["sweep", *TINY, "--batch-size", "4,16", "--workers", "0,1", "--output", folder.parent]
    code, _, err = invoke(args, capsys)
    assert code == 2 and str(folder) in err and "--name" in err and err.count("\n") == 1
    assert (folder / "sweep.json").read_bytes() == before


def test_rounds_run_one_configuration_again_pool_it_and_grow_but_never_shrink(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = invoke(["sweep", *TINY, "--batch-size", "4", "--repeats", "3", "--rounds", "3",
                                "--output", out], capsys)  # fmt: skip
    assert code == 0, err
    folder = out / "sweep-round"
    m = manifest(folder)
    assert [c["params"] for c in m["cells"]] == [{"round": r} for r in (1, 2, 3)] and m["dims"] == {"round": [1, 2, 3]}
    assert [c["status"] for c in m["cells"]] == ["ok"] * 3
    figures = [json.loads((folder / c["run_dir"] / "results.json").read_text())["throughput_img_s"] for c in m["cells"]]
    (pooled,) = json.loads((folder / "summary.json").read_text())["rounds"]
    assert pooled["throughput_by_round_img_s"] == figures and pooled["finished"] == 3
    assert pooled["throughput_mean_img_s"] == pytest.approx(sum(figures) / 3)
    assert "Across rounds" in stdout and "across rounds, a configuration's img/s moved by up to" in stdout
    code, _, err = invoke(["sweep", *TINY, "--batch-size", "4", "--repeats", "3", "--rounds", "2",
                           "--output", out], capsys)  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert "3 round(s) there, --rounds 2 now; pass --rounds 3 or more to add rounds to resume it" in err
    # more rounds grow the sweep: the three run so far are kept, only the fourth runs
    code, stdout, err = invoke(["sweep", *TINY, "--batch-size", "4", "--repeats", "3", "--rounds", "4",
                                "--output", out], capsys)  # fmt: skip
    assert code == 0, err
    assert "4 cells, 3 already ok, 1 to run" in stdout
    grown = manifest(folder)
    assert [c["run_dir"] for c in grown["cells"][:3]] == [c["run_dir"] for c in m["cells"]]
    assert [c["params"] for c in grown["cells"]] == [{"round": r} for r in (1, 2, 3, 4)]
    assert grown["dims"] == {"round": [1, 2, 3, 4]} and [c["status"] for c in grown["cells"]] == ["ok"] * 4
    assert json.loads((folder / "summary.json").read_text())["rounds"][0]["finished"] == 4


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--preset", "fastest"], "--preset"),
        (["--batch-size", "32,,64"], "--batch-size"),
        (["--batch-size", "4,8", "--epochs", "1,2"], "--epochs"),
        (["--batch-size", "4,8", "--workers", "0,1,2", "--zip"], "--zip"),
        (["--optimizer", "sgd,lamb"], "--optimizer"),
        (["--batch-size", "4,8", "--dataset", "cifar10", "--data-dir", "{missing}"], "--data-dir"),
    ],
)
def test_bad_sweep_input_is_one_line_and_leaves_nothing(args, needle, tmp_path, capsys):
    out = tmp_path / "out"
    args = [a.replace("{missing}", str(tmp_path / "nope")) for a in args]
    base = [a for a in TINY if a not in ("--dataset", "synthetic")] if "--dataset" in args else TINY
    code, stdout, err = invoke(["sweep", *base, *args, "--output", out], capsys)
    assert code == 2, err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1 and "Traceback" not in stdout + err
    assert not out.exists() or not any(out.iterdir())


def test_oom_cell_is_recorded_and_the_sweep_goes_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EFFBENCH_FAULT_OOM_AT_BATCH", "8")
    code, out, err = invoke(["sweep", *TINY, "--batch-size", "8,4", "--output", tmp_path], capsys)
    assert code == 0, err  # OOM is data, not a failure
    folder = tmp_path / "sweep-batch-size"
    cells = manifest(folder)["cells"]
    assert [(c["params"]["batch_size"], c["status"]) for c in cells] == [(8, "oom"), (4, "ok")]
    oom = cells[0]
    assert (
        oom["summary"]["batch_size_per_device"] == 8
        and "peak_mem_gib" in oom["summary"]
        and "peak_rss_gib" in oom["summary"]
        and oom["summary"]["peak_host_gib"] is not None
    )
    assert oom["error"]["type"] == "OutOfMemoryError"
    r = json.loads((folder / oom["run_dir"] / "results.json").read_text())
    assert r["status"] == "oom" and r["batch_size_per_device"] == 8
    assert "out of memory from 8" in (folder / "sweep.txt").read_text()
    assert (folder / "plots" / "throughput_vs_batch.png").is_file()


def test_run_alone_exits_nonzero_on_oom_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EFFBENCH_FAULT_OOM_AT_BATCH", "4")
    # --workers 0: synthetic data starts none, and the default would add a no-effect warning line
    code, _, err = invoke(["run", *TINY, "--batch-size", "4", "--workers", "0", "--output", tmp_path], capsys)
    assert code == 1 and err.startswith("error: run oom (OutOfMemoryError") and err.count("\n") == 1
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "oom" and r["batch_size_per_device"] == 4 and (run / "report.html").is_file()


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_sigkill_after_two_cells_then_resume(tmp_path, capsys):
    out = tmp_path / "out"
    # batch 4 cells first, then two slower batch-16 cells: the kill lands while the third runs
    args = [
        "sweep",
        *TINY,
        "--batch-size",
        "4,16",
        "--optimizer",
        "sgd,adam",
        "--workers",
        "0",
        "--max-steps",
        "6",
        "--output",
        str(out),
    ]
    folder = out / "sweep-batch-size-optimizer"
    proc = subprocess.Popen(
        [sys.executable, "-m", "effbench", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        in_flight = False  # two cells ok and the third one's run folder started
        while time.monotonic() < deadline and not in_flight:
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(FileNotFoundError, ValueError):
                cells = manifest(folder)["cells"]
                started = list((folder / "cells" / cells[2]["key"]).glob("*/results.json"))
                in_flight = [c["status"] for c in cells[:3]] == ["ok", "ok", "running"] and bool(started)
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = manifest(folder)
    assert [c["status"] for c in killed["cells"]] == ["ok", "ok", "running", "pending"]
    partial = next((folder / "cells" / killed["cells"][2]["key"]).iterdir())
    # the files keep `running`; readers show the cell and its partial run `dead` (effbench/liveness.py)
    from effbench.analysis import export
    from effbench.report import render

    _, rows = render.load_sweep(folder)
    assert [r.status for r in rows] == ["ok", "ok", "dead", "pending"] and rows[2].shown_status.startswith("dead (last")
    assert export.read_run(partial / "results.json").row["status"] == "dead"
    assert manifest(folder) == killed
    first_two = {c["key"]: folder / c["run_dir"] for c in killed["cells"][:2]}
    stamps = {p: p.stat().st_mtime_ns for run in first_two.values() for p in run.rglob("*") if p.is_file()}

    code, printed, err = invoke(args, capsys)
    assert code == 0, err
    assert "2 already ok, 2 to run" in printed
    final = manifest(folder)
    assert [c["status"] for c in final["cells"]] == ["ok"] * 4
    assert [c["key"] for c in final["cells"]] == [c["key"] for c in killed["cells"]]  # each cell once
    for c in final["cells"][:2]:
        assert folder / c["run_dir"] == first_two[c["key"]] and c["attempts"] == 1
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the finished cells were not touched
    for c in final["cells"]:
        assert [p.name for p in (folder / "cells" / c["key"]).iterdir()] == [
            Path(c["run_dir"]).name
        ]  # one run per cell
    assert final["cells"][2]["attempts"] == 2  # the cell in flight ran again; its partial folder went to attempts/
    assert (folder / "attempts" / killed["cells"][2]["key"] / partial.name / "results.json").is_file()
    assert sum(1 for _ in (folder / "attempts").rglob("results.json")) == 1


def test_a_cell_this_machine_cannot_run_is_skipped_with_the_reason(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the cuda cell would run")
    base = [a for a in TINY if a not in ("--device", "cpu")]
    code, out, err = invoke(["sweep", *base, "--batch-size", "4", "--device", "cpu,cuda", "--output", tmp_path], capsys)
    assert code == 0, err
    cells = manifest(tmp_path / "sweep-device")["cells"]
    assert [c["status"] for c in cells] == ["ok", "skipped"]
    assert cells[1]["error"]["option"] == "--device" and "no GPU" in cells[1]["error"]["message"]
    assert "1 cell(s) skipped" in err


def test_a_sweep_whose_every_cell_met_the_same_bad_input_exits_2_with_its_one_line(tmp_path, capsys, monkeypatch):
    # ImageNet weights neither cached nor downloadable offline fail in each cell's model build, after the
    # sweep's preflight: it said "error: sweep: 2 of 2 cells did not finish (...)" and exited 1, as for a crash
    from effbench.errors import EffbenchError
    from effbench.run import launch

    def no_weights(cfg, **kw):
        if cfg.batch_size in refused:
            raise EffbenchError("--weights", "ImageNet weights for resnet18 are not cached; use --weights none")
        return real(cfg, **kw)

    real, refused = launch.run, {4, 8}
    monkeypatch.setattr(launch, "run", no_weights)
    code, _, err = invoke(["sweep", *TINY, "--batch-size", "4,8", "--output", tmp_path / "all"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: --weights: ImageNet weights for resnet18 are not cached; use --weights none")
    assert "every cell (2) failed on this input" in lines[0] and "Traceback" not in err
    assert {c["status"] for c in manifest(tmp_path / "all" / "sweep-batch-size")["cells"]} == {"failed"}
    refused = {8}  # one cell ran: a failed cell beside it is the sweep's exit 1, as before
    code, _, err = invoke(
        ["sweep", *TINY, "--batch-size", "4,8", "--workers", "0", "--output", tmp_path / "one"], capsys
    )
    assert code == 1 and err.startswith("error: sweep: 1 of 2 cells did not finish"), err

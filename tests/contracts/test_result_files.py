"""Result files are input too: results.json and sweep.json are validated whole when read.

Every file today's code writes (a real run with its profiling pass, a real two-cell sweep) reads
back; a hand-edited field is one `error:` line naming the file and the field, exit 2, in `report`
and `compare`; a path in a result file never leads outside its folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clitools import invoke
from effbench import results
from effbench.sweep import manifest as M

# Real runs: seconds on an idle machine, minutes on a loaded 2-core one; the default 300 s would fail
# the suite for the machine's speed, not for a behaviour.
pytestmark = pytest.mark.timeout(900)

TINY = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--workers", "0",
        "--max-steps", "2", "--max-val-steps", "1", "--warmup-steps", "1", "--epochs", "1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One real run (with the profiling pass) and one real two-cell sweep, made by the CLI."""
    root = tmp_path_factory.mktemp("made")
    code, _, err = _invoke_plain(["run", "--dataset", "synthetic", *TINY, "--batch-size", "2", "--profile-steps", "1",
                                  "--output", root / "runs"])  # fmt: skip
    assert code == 0, err
    code, _, err = _invoke_plain(["sweep", "--smoke", *TINY, "--batch-size", "2,4", "--no-profile", "--name", "s",
                                  "--output", root])  # fmt: skip
    assert code == 0, err
    (run,) = (root / "runs").iterdir()
    return run, root / "s"


def _invoke_plain(args):
    """cli.main outside capsys (a module fixture cannot use it): exit code and nothing else matters here."""
    import contextlib
    import io

    from effbench.cli import app as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        cli.main([str(a) for a in args])
    return e.value.code, out.getvalue(), err.getvalue()


def test_every_file_written_today_validates(made):
    run, sweep = made
    r = results.read_results(run)
    assert r["status"] == "ok" and r["profile"]["trace"] == "trace_rank0.json.gz"  # a name inside the folder
    assert (run / r["profile"]["trace"]).is_file()
    m = M.read_manifest(sweep)
    assert [c["status"] for c in m["cells"]] == ["ok", "ok"]
    for c in m["cells"]:
        results.read_results(sweep / c["run_dir"])


def test_report_and_compare_read_todays_files(made, capsys):
    run, sweep = made
    assert invoke(["report", run], capsys)[0] == 0
    assert invoke(["report", sweep], capsys)[0] == 0
    assert invoke(["compare", run, run], capsys)[0] == 0
    assert invoke(["compare", sweep, sweep], capsys)[0] == 0


RESULTS_EDITS = [
    ("epochs", "lots", "epochs"),
    ("config", None, "config"),
    ("final", [1, 2], "final"),
    ("verdict", 7, "verdict"),
    ("throughput_img_s", "fast", "throughput_img_s"),
    ("measured", {"steps": "x"}, "measured.steps"),
    ("epochs", [{"epoch": 0, "images": "many"}], "epochs.0.images"),
    ("config", {"arch": 5}, "config.arch"),
    ("ranks", [5], "ranks.0"),
    ("throughput_windows", {"throughput_img_s": ["a"]}, "throughput_windows.throughput_img_s.0"),
    ("error", "boom", "error"),
    ("data", {"num_classes": True}, "data.num_classes"),
    ("profile", {"trace": "../../../etc/passwd"}, "profile.trace"),
    ("profile", {"tables": {"by_cpu_time": "../x.txt"}}, "profile.tables.by_cpu_time"),
]


@pytest.mark.parametrize("key, value, field", RESULTS_EDITS)
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_hand_edited_results_json_is_one_line_naming_file_and_field(
    made, key, value, field, command, capsys, tmp_path
):
    run = shutil.copytree(made[0], tmp_path / "run")
    path = run / "results.json"
    r = json.loads(path.read_text())
    r[key] = value
    path.write_text(json.dumps(r))
    args = ["report", run] if command == "report" else ["compare", made[0], run]
    code, out, err = invoke(args, capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}:"), err
    assert f"field {field}" in err and "Traceback" not in err


def test_non_finite_numbers_in_a_results_json_are_refused(made, capsys, tmp_path):
    run = shutil.copytree(made[0], tmp_path / "run")
    text = (run / "results.json").read_text()
    r = json.loads(text)
    r["throughput_img_s"] = float("nan")  # json.dumps writes NaN, json.loads reads it back
    (run / "results.json").write_text(json.dumps(r))
    code, _, err = invoke(["report", run], capsys)
    # refused while parsing (safe_files): NaN is no JSON value, whatever field holds it
    assert code == 2 and "holds NaN" in err and err.count("\n") == 1


def _edit_manifest(sweep: Path, change) -> Path:
    path = sweep / "sweep.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))
    return path


MANIFEST_EDITS = [
    (lambda m: m.update(cells="x"), "cells"),
    (lambda m: m["cells"][0].update(status=7), "cells.0.status"),
    (lambda m: m["cells"][1].update(status="great"), "cells.1.status"),
    (lambda m: m.update(dims=[]), "dims"),
    (lambda m: m["cells"][0].update(run_dir=5), "cells.0.run_dir"),
    (lambda m: m["cells"][0].update(attempts="2"), "cells.0.attempts"),
    (lambda m: m.update(zip="yes"), "zip"),
]


@pytest.mark.parametrize("change, field", MANIFEST_EDITS)
def test_a_hand_edited_sweep_json_is_one_line_naming_file_and_field(made, change, field, capsys, tmp_path):
    sweep = shutil.copytree(made[1], tmp_path / "s")
    path = _edit_manifest(sweep, change)
    for args in (["report", sweep], ["compare", made[1], sweep]):
        code, _, err = invoke(args, capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {path}:") and f"field {field}" in err, err


@pytest.mark.parametrize("escape", ["../../elsewhere", "../s2/cell", "/tmp", "cell/../../.."])
def test_a_cell_run_dir_outside_the_sweep_is_refused_and_nothing_is_written_outside(made, escape, capsys, tmp_path):
    sweep = shutil.copytree(made[1], tmp_path / "box" / "s")
    elsewhere = tmp_path / "elsewhere"
    first_cell = json.loads((made[1] / "sweep.json").read_text())["cells"][0]["run_dir"]
    shutil.copytree(made[1] / first_cell, elsewhere)  # a run folder report would happily rewrite
    before = _snapshot(tmp_path, but=sweep)
    _edit_manifest(sweep, lambda m: m["cells"][0].update(run_dir=escape))
    code, _, err = invoke(["report", sweep], capsys)
    assert code == 2 and "field cells.0.run_dir" in err and "outside" in err, err
    assert _snapshot(tmp_path, but=sweep) == before  # no file outside the sweep made or rewritten


def _snapshot(root: Path, but: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if not p.is_relative_to(but)}


# --- writing the final files: a full disk for the measurement's own files is an error (README Guarantees), a report
# that cannot be written a note in the record and a warning on stderr (issue 46)
def _full_disk_for(monkeypatch, name: str) -> None:
    """ENOSPC where the bytes of `name` reach the disk: fsync of results.atomic_write_bytes's temporary
    file, which it names `.{name}.<random>.tmp` (tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp"))."""
    import errno
    import os

    real_fsync = os.fsync

    def fsync(fd):
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(results.os, "fsync", fsync)


def test_a_full_disk_for_utilization_csv_is_one_error_line_exit_2(monkeypatch, capsys, tmp_path):
    _full_disk_for(monkeypatch, "utilization.csv")  # the sampled measurement: the run's own file
    code, out, err = invoke(["run", "--dataset", "synthetic", *TINY, "--batch-size", "2", "--no-profile",
                             "--output", tmp_path], capsys)  # fmt: skip
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --output: no space left") and "utilization.csv" in lines[0]
    assert "warning" not in out
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], "a temporary file was left"
    r = results.read_results(run)  # what was measured, never `running` (issue 28)
    assert r["status"] == "failed" and len(r["epochs"]) == 1 and "utilization.csv" in r["error"]["message"]


@pytest.mark.parametrize("name", ["report.html", "report.md", "report.txt"])
def test_a_report_that_does_not_fit_on_the_disk_leaves_the_measurement_ok_with_a_note(
    name, monkeypatch, capsys, tmp_path
):
    """Issue 46: a finished measurement was recorded `failed` because report.html did not fit, so compare and
    leaderboards dropped it. Only the measurement's own files decide `failed`; a report is a note and a warning."""
    _full_disk_for(monkeypatch, name)
    code, out, err = invoke(["run", "--dataset", "synthetic", *TINY, "--batch-size", "2", "--no-profile",
                             "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = results.read_results(run)
    assert r["status"] == "ok" and "error" not in r
    assert r["reports_error"] == f"{name} not written (no space left on the device)"
    assert r["throughput_img_s"] > 0 and r["measured"]["steps"] >= 1 and len(r["epochs"]) == 1  # the figures stand
    assert (run / "epochs.csv").is_file() and (run / "steps.csv").is_file()
    assert not (run / name).exists() and not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"warning: {name} not written (no space left on the device); `effbench report {run}` retries"]
    assert "Traceback" not in out + err


def test_a_report_the_os_refuses_leaves_the_measurement_ok_with_a_note(monkeypatch, capsys, tmp_path):
    """Another refused write (EACCES) of a report: the same note, with the system's reason."""
    import errno

    from effbench.report import render

    def refused(*_a, **_k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(render, "write_run_html", refused)
    code, _, err = invoke(["run", "--dataset", "synthetic", *TINY, "--batch-size", "2", "--no-profile",
                           "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = results.read_results(run)
    assert r["status"] == "ok" and r["reports_error"] == "report.html not written (Permission denied, EACCES)"
    assert (run / "report.txt").is_file() and (run / "report.md").is_file()
    assert [ln for ln in err.splitlines() if ln.startswith("warning:")] == [
        f"warning: report.html not written (Permission denied, EACCES); `effbench report {run}` retries"
    ]


def test_a_report_page_that_cannot_be_made_is_a_warning_on_stderr_only(monkeypatch, capsys, tmp_path):
    from effbench.report import render

    def broken(*_a, **_k):
        raise ValueError("a chart value it cannot draw")

    monkeypatch.setattr(render, "run_html", broken)
    code, out, err = invoke(["run", "--dataset", "synthetic", *TINY, "--batch-size", "2", "--no-profile",
                             "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    assert "warning" not in out
    (line,) = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert "report.html not written (ValueError: a chart value it cannot draw)" in line


@pytest.mark.parametrize("column, value", [("data_time_s", "slow"), ("images", "inf"), ("compute_time_s", "1,5")])
def test_a_hand_edited_steps_csv_is_one_line_naming_file_line_and_column(made, column, value, capsys, tmp_path):
    import csv

    run = shutil.copytree(made[0], tmp_path / "run")
    path = run / "steps.csv"
    rows = list(csv.DictReader(path.open()))
    rows[-1][column] = value
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for args in (["report", run], ["compare", made[0], run]):
        code, _, err = invoke(args, capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {path}: line {len(rows) + 1}, column {column}:"), err

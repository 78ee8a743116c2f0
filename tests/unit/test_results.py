"""Atomic writes, the results reader, run-folder names, and the pure report renderer."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from effbench import results
from effbench.report import tables as report
from effbench.errors import EffbenchError


@pytest.mark.parametrize(
    "err, expected",
    [(errno.EIO, OSError), (errno.ENOSPC, EffbenchError)],
    ids=["io-error-propagates", "full-disk-is-a-usage-error"],
)
def test_atomic_write_leaves_old_file_when_writing_fails(tmp_path, monkeypatch, err, expected):
    target = tmp_path / "results.json"
    results.write_json(target, {"schema_version": 1, "status": "ok"})
    before = target.read_bytes()

    def broken_fsync(fd):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(expected) as info:
        results.write_json(target, {"schema_version": 1, "status": "failed", "big": "x" * 10000})
    if expected is EffbenchError:
        assert info.value.option == "--output" and "no space left" in str(info.value)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary left behind


def test_written_files_have_no_group_or_other_write(tmp_path):
    old = os.umask(0)
    try:
        results.write_json(tmp_path / "a.json", {"x": 1})
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "a.json").stat().st_mode)
    assert mode & 0o022 == 0


def test_non_finite_numbers_are_stored_as_null(tmp_path):
    results.write_json(tmp_path / "r.json", {"loss": float("nan"), "x": [float("inf"), 1.0]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"loss": None, "x": [None, 1.0]}


def test_csv_writer_writes_header_and_blanks_for_none(tmp_path):
    results.write_csv(
        tmp_path / "e.csv", ("epoch", "val_top1"), [{"epoch": 0, "val_top1": None}, {"epoch": 1, "val_top1": 0.5}]
    )
    assert (tmp_path / "e.csv").read_text() == "epoch,val_top1\n0,\n1,0.5\n"


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not readable JSON"),
        ("[1, 2]", "not a results object"),
        ('{"status": "ok"}', "schema_version"),
        ('{"schema_version": 99, "status": "ok"}', "newer than this effbench"),
        ('{"schema_version": 1, "status": "great"}', "unknown status"),
    ],
)
def test_read_results_rejects_bad_files_with_their_name(tmp_path, content, needle):
    path = tmp_path / "results.json"
    path.write_text(content)
    with pytest.raises(EffbenchError) as info:
        results.read_results(tmp_path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_read_results_accepts_a_valid_file(tmp_path):
    results.write_json(tmp_path / "results.json", {"schema_version": 1, "status": "ok"})
    assert results.read_results(tmp_path)["status"] == "ok"


@pytest.mark.parametrize("evil", ["../../etc", "a/b\\c", "..", "x" * 500, "name with spaces;rm -rf"])
def test_run_folders_stay_inside_output(tmp_path, evil):
    out = tmp_path / "out"
    out.mkdir()
    run_dir = results.create_run_dir(out, evil)
    assert run_dir.parent == out
    assert len(run_dir.name) <= 120
    again = results.create_run_dir(out, evil)
    assert again != run_dir and again.parent == out


def test_check_output_rejects_a_file_and_an_unwritable_folder(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(EffbenchError, match="is a file"):
        results.check_output_writable(f)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    if os.getuid() == 0:  # root writes anywhere: make the probe fail as it would for a normal uid

        def denied(*_a, **_k):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(results.tempfile, "mkstemp", denied)
    with pytest.raises(EffbenchError, match="not writable by uid") as info:
        results.check_output_writable(ro)
    assert info.value.option == "--output"


def _record():
    return {
        "schema_version": 1,
        "status": "ok",
        "run_name": "r1",
        "config": {"arch": "resnet18", "dataset": "cifar10", "batch_size": 8, "image_size": 32, "optimizer": "sgd", "lr": 0.1},
        "model": {"trainable_params": 10, "total_params": 20},
        "data": {"train_size": 100, "val_size": 20},
        "device": "cpu",
        "world_size": 1,
        "precision": "fp32",
        "throughput_img_s": 123.456,
        "measured": {"steps": 4, "images": 32, "data_time_s": 0.25, "compute_time_s": 0.75, "time_s": 1.0},
        "data_time_share": 0.25,  # record.finish: measured data_time_s / time_s, the figure the report prints
        "warmup": {"steps": 1, "images": 8, "data_time_s": 0.1, "compute_time_s": 0.4, "time_s": 0.5},
        "epochs": [
            {"epoch": 0, "images": 40, "data_time_s": 0.25, "compute_time_s": 0.75, "total_time_s": 1.0, "train_loss": 2.3,
             "train_top1": 0.1, "val_top1": 0.2, "val_time_s": 0.1, "throughput_img_s": 40.0}
        ],
        "final": {"val_top1": 0.2},
    }  # fmt: skip


def test_report_renders_summary_and_epoch_tables():
    text = report.render(results.record_of(_record()), "text")
    md = report.render(results.record_of(_record()), "md")
    assert "123.5" in text and "25.0%" in text and "resnet18" in text
    assert md.startswith("# effbench run r1") and "| epoch" in md and "| throughput (img/s)" in md


@pytest.mark.parametrize(
    "setup, needle",
    [
        (lambda p: None, "not found; pass X"),  # no file
        (lambda p: p.write_text("{not json"), "is not readable JSON (Expecting property name"),
        (lambda p: p.write_bytes(b'{"a": "\xff"}'), "is not readable JSON ('utf-8' codec"),
        (lambda p: p.mkdir(), "is a folder, not a regular file"),  # a folder where the file should be
    ],
)
def test_read_json_file_gives_one_error_naming_the_file_and_the_callers_fix(tmp_path, setup, needle):
    path = tmp_path / "some.json"
    setup(path)
    with pytest.raises(EffbenchError) as info:
        results.read_json_file(path, missing="pass X", fix="do Y")
    assert info.value.option == str(path) and needle in info.value.message
    assert info.value.message.endswith("pass X" if "not found" in needle else "; do Y")
    assert "\n" not in str(info.value)
    (tmp_path / "ok.json").write_text('[1, {"b": null}]')  # any JSON value: the shape is the caller's
    assert results.read_json_file(tmp_path / "ok.json", missing="", fix="") == [1, {"b": None}]


def test_results_and_manifest_readers_name_their_own_fix(tmp_path):
    from effbench.sweep import manifest

    with pytest.raises(EffbenchError, match="pass a run folder that holds results.json"):
        results.read_results(tmp_path)
    (tmp_path / manifest.MANIFEST_FILE).write_text("{")
    with pytest.raises(EffbenchError, match="move sweep.json aside .* and run the sweep's command again"):
        manifest.read_manifest(tmp_path)


def test_record_of_types_a_producers_record_as_results_json_will_hold_it():
    # an epoch with no step holds a nan loss in memory (run/train.py); write_json stores null, and the
    # reports the runner draws from the in-memory record must read the same, not refuse it
    producer = {**_record(), "epochs": [{"epoch": 1, "train_loss": float("nan"), "train_top1": float("inf")}]}
    typed = results.record_of(producer)
    assert (typed.epochs[0].train_loss, typed.epochs[0].train_top1) == (None, None)
    assert "nan" not in report.render(typed, "text").lower()

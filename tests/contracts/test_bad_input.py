"""Hardening: the bad-input matrix, a full disk, reproducibility, no shell, fuzzed parsers.

Every row of the matrix goes through the real CLI entry point (`cli.main`) and must end with exit
code 2, exactly one line on stderr that starts with `error:` and names the offending option or
file, no traceback, and no run folder that says `ok`.
"""

from __future__ import annotations

import ast
import csv
import errno
import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effbench.config import parse_freeze
from effbench.errors import EffbenchError
from effbench.launch.plan import parse_counts, parse_endpoint
from effbench.results import read_results, safe_name
from clitools import invoke

PACKAGE = Path(__file__).resolve().parents[2] / "effbench"
TINY_RUN = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--workers", "0",
            "--max-steps", "3", "--warmup-steps", "1", "--epochs", "1", "--batch-size", "4", "--no-profile", "--quiet"]  # fmt: skip


def ok_runs(root: Path) -> list[Path]:
    found = []
    for f in root.rglob("results.json") if root.exists() else []:
        try:
            if json.loads(f.read_text()).get("status") == "ok":
                found.append(f.parent)
        except (OSError, ValueError):
            pass
    return found


# --- fixtures of broken inputs, built on demand --------------------------------------------------


def _truncated_cifar(tmp: Path) -> Path:
    from fakedata import make_cifar

    root = make_cifar(tmp / "cifar", "cifar10", n_train=40, n_test=20)
    batch = root / "cifar-10-batches-py" / "data_batch_1"
    batch.write_bytes(batch.read_bytes()[:500])
    return root


def _small_cifar(tmp: Path) -> Path:
    from fakedata import make_cifar

    return make_cifar(tmp / "cifar", "cifar10", n_train=40, n_test=20)


def _malformed_food(tmp: Path) -> Path:
    from fakedata import make_food101

    root = make_food101(tmp / "food", classes=2, per_class=4, size=32)
    (root / "food-101" / "meta" / "train.json").write_text('{"apple_pie": ["apple_pie/1", ')
    return root


def _empty_imagefolder(tmp: Path) -> Path:
    root = tmp / "images"
    for cls in ("cats", "dogs"):
        (root / cls).mkdir(parents=True)
        (root / cls / "notes.txt").write_text("no images here")
    return root


def _wrong_arch_weights(tmp: Path) -> Path:
    import torch
    import torchvision

    path = tmp / "resnet50.pt"
    torch.save(torchvision.models.resnet50(num_classes=10).state_dict(), path)
    return path


def _not_a_checkpoint(tmp: Path) -> Path:
    path = tmp / "weights.pt"
    path.write_bytes(b"this is not a checkpoint at all")
    return path


def _a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("x")
    return path


def _corrupt_run(tmp: Path) -> Path:
    run = tmp / "corrupt-run"
    run.mkdir()
    (run / "results.json").write_text('{"schema_version": 1, "status": ')
    return run


def _newer_run(tmp: Path) -> Path:
    run = tmp / "newer-run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"schema_version": 999, "status": "ok"}))
    return run


def _long_name(tmp: Path) -> Path:
    return tmp / ("a" * 300)  # NAME_MAX is 255 bytes: ENAMETOOLONG from the first stat


def _symlink_loop(tmp: Path) -> Path:
    loop = tmp / "loop"
    loop.symlink_to(loop)  # ELOOP: exists() is False, mkdir fails
    return loop / "runs"


def _under_a_file(tmp: Path) -> Path:
    return _a_file(tmp) / "runs"  # ENOTDIR


def _nan_weights(tmp: Path) -> Path:
    import torch

    path = tmp / "nan.pt"
    torch.save({"conv1.weight": torch.full((4, 3, 3, 3), float("nan"))}, path)
    return path


def _cifar_text_labels(tmp: Path) -> Path:
    from fakedata import make_cifar, py2_pickle, read_cifar_raw

    root = make_cifar(tmp / "cifar", "cifar10", n_train=40, n_test=20)
    batch = root / "cifar-10-batches-py" / "data_batch_3"
    raw = read_cifar_raw(batch)
    raw["labels"] = [str(i) for i in raw["labels"]]  # read_cifar_raw decodes keys as latin1 text
    batch.write_bytes(py2_pickle(raw))
    return root


def _steps_csv(tmp: Path) -> Path:
    run = tmp / "run-with-steps"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"schema_version": 1, "status": "failed"}))
    (run / "steps.csv").write_text("epoch,step,warmup,images\n1,1,True,4\n")
    return run / "steps.csv"


BUILDERS = {
    "{steps_csv}": _steps_csv,
    "{nan_weights}": _nan_weights,
    "{cifar_text_labels}": _cifar_text_labels,
    "{long_name}": _long_name,
    "{symlink_loop}": _symlink_loop,
    "{under_a_file}": _under_a_file,
    "{corrupt_run}": _corrupt_run,
    "{newer_run}": _newer_run,
    "{truncated_cifar}": _truncated_cifar,
    "{small_cifar}": _small_cifar,
    "{malformed_food}": _malformed_food,
    "{empty_imagefolder}": _empty_imagefolder,
    "{wrong_arch_weights}": _wrong_arch_weights,
    "{not_a_checkpoint}": _not_a_checkpoint,
    "{file}": _a_file,
    "{missing}": lambda tmp: tmp / "does-not-exist",
}

# (command line, text the one-line error must contain). {out} is the output folder.
MATRIX = [
    # values and sizes
    (["run", "--smoke", "--arch", "b9"], "--arch"),
    (["run", "--smoke", "--arch", "vgg17"], "--arch"),  # vgg16 is torchvision's (issue 15)
    (["run", "--smoke", "--arch", "torchvision:vit_b_16", "--image-size", "40"], "--image-size"),
    (["run", "--smoke", "--dataset", "imagenet22k"], "--dataset"),
    (["run", "--smoke", "--optimizer", "lion"], "--optimizer"),
    (["run", "--smoke", "--batch-size", "0"], "--batch-size"),
    (["run", "--smoke", "--batch-size", "-4"], "--batch-size"),
    (["run", "--smoke", "--epochs", "0"], "--epochs"),
    (["run", "--smoke", "--max-steps", "0"], "--max-steps"),
    (["run", "--smoke", "--image-size", "0"], "--image-size"),
    (["run", "--smoke", "--workers", "-1"], "--workers"),
    (["run", "--smoke", "--lr", "-0.1"], "--lr"),
    (["run", "--smoke", "--val-fraction", "1.5"], "--val-fraction"),
    (["run", "--smoke", "--precision", "fp8"], "--precision"),
    (["run", "--smoke", "--device", "tpu"], "--device"),
    (["run", "--smoke", "--scaling", "linear"], "--scaling"),
    (["run", "--smoke", "--freeze", "last:999"], "--freeze"),
    (["run", "--smoke", "--batch-size", "1"], "--batch-size: a batch of 1 image per device"),  # BatchNorm (issue 46)
    (["sweep", "--smoke", "--batch-size", "1,4"], "--batch-size: cell"),  # before the first cell runs
    (["run", "--smoke", "--freeze", "half"], "--freeze"),
    (["run", "--smoke", "--warmup-steps", "500"], "--warmup-steps"),
    # not finite, beyond 64 bits, beyond any memory (issue 12)
    (["run", "--smoke", "--lr", "inf"], "--lr"),
    (["run", "--smoke", "--lr", "nan"], "--lr"),
    (["run", "--smoke", "--weight-decay", "nan"], "--weight-decay"),
    (["run", "--smoke", "--momentum", "-inf"], "--momentum"),
    (["run", "--smoke", "--pg-timeout-s", "inf"], "--pg-timeout-s"),
    (["run", "--smoke", "--sample-interval-s", "inf"], "--sample-interval-s"),
    (["run", "--smoke", "--val-fraction", "nan"], "--val-fraction"),
    (["run", "--smoke", "--seed", str(2**64)], "--seed"),
    (["run", "--smoke", "--seed", "-1"], "--seed"),
    (["run", "--smoke", "--image-size", "100000"], "--image-size"),
    (["run", "--smoke", "--image-size", "8192", "--batch-size", "65536"], "--image-size"),
    (["run", "--smoke", "--workers", "10000"], "--workers"),
    (["run", "--smoke", "--epochs", "1e9"], "--epochs"),
    (["run", "--smoke", "--repeats", "100000"], "--repeats"),
    # data
    (["run", *TINY_RUN, "--dataset", "cifar10", "--data-dir", "{missing}"], "--data-dir"),
    (["run", *TINY_RUN, "--dataset", "cifar10", "--data-dir", "{truncated_cifar}"], "data_batch_1"),
    (
        ["run", *TINY_RUN, "--dataset", "cifar10", "--data-dir", "{small_cifar}", "--batch-size", "100000"],
        "--batch-size",
    ),
    (["run", *TINY_RUN, "--dataset", "food101", "--data-dir", "{malformed_food}"], "train.json"),
    (["run", *TINY_RUN, "--dataset", "imagefolder", "--data-dir", "{empty_imagefolder}"], "--data-dir"),
    # output
    (["run", "--smoke", "--output", "{file}"], "--output"),
    (["run", "--smoke", "--output", "/proc/effbench-cannot-write-here"], "--output"),
    (["run", "--smoke", "--output", "{long_name}"], "--output"),
    (["run", "--smoke", "--output", "{symlink_loop}"], "--output"),
    (["run", "--smoke", "--output", "{under_a_file}"], "--output"),
    (["run", "--smoke", "--dataset", "cifar10", "--data-dir", "{long_name}"], "--data-dir"),
    (["run", "--smoke", "--weights", "{long_name}"], "--weights"),
    (["doctor", "--output", "{long_name}"], "--output"),
    # an empty path ("$UNSET") is Path("") == ".": it wrote into the current folder, or searched it for data
    (["run", "--smoke", "--output", ""], "--output: is empty"),
    (["run", *TINY_RUN, "--dataset", "cifar10", "--data-dir", "", "--download"], "--data-dir: is empty"),
    (["run", *TINY_RUN, "--dataset", "synthetic", "--weights", ""], "--weights: is empty"),
    (["sweep", "--smoke", "--batch-size", "4,8", "--output", ""], "--output: is empty"),
    (["sweep", "--smoke", "--batch-size", "4,8", "--data-dir", " "], "--data-dir: is empty"),
    (["selftest", "--device", "cpu", "--only", "flops", "--output", ""], "--output: is empty"),
    (["doctor", "--output", ""], "--output: is empty"),
    (["export", "{corrupt_run}", "--output", ""], "--output: is empty"),
    # devices, precision, launch
    (["run", "--smoke", "--device", "cuda"], "--device"),
    (["run", "--smoke", "--precision", "fp16"], "--precision"),
    (["run", "--smoke", "--gpus", "2"], "--gpus"),
    (["run", "--smoke", "--nproc", "0"], "--nproc"),
    (["run", "--smoke", "--nproc", "1,,2"], "--nproc"),
    (["run", "--smoke", "--nnodes", "2", "--rdzv-endpoint", "node01"], "--rdzv-endpoint"),
    (["run", "--smoke", "--nnodes", "2", "--node-rank", "5", "--rdzv-endpoint", "node01:29500"], "--node-rank"),
    # weights
    (["run", *TINY_RUN, "--dataset", "synthetic", "--weights", "{missing}"], "--weights"),
    (["run", *TINY_RUN, "--dataset", "synthetic", "--weights", "{wrong_arch_weights}"], "--weights"),
    (["run", *TINY_RUN, "--dataset", "synthetic", "--weights", "{not_a_checkpoint}"], "--weights"),
    (["run", *TINY_RUN, "--dataset", "synthetic", "--weights", "{nan_weights}"], "--weights"),
    (["run", *TINY_RUN, "--dataset", "cifar10", "--data-dir", "{cifar_text_labels}"], "data_batch_3"),
    # sweep (TINY_RUN values go to every cell)
    (["sweep", "--preset", "fastest"], "--preset"),
    (["sweep", "--batch-size", "32,,64"], "--batch-size"),
    (["sweep", "--batch-size", "4,8", "--epochs", "1,2"], "--epochs"),
    (["sweep", "--batch-size", "4,8", "--workers", "0,1,2", "--zip"], "--zip"),
    (["sweep", "--optimizer", "sgd,lamb", "--device", "cpu"], "--optimizer"),
    (["sweep", "--device", "cpu", "--batch-size", "0,4"], "--batch-size"),
    (["sweep", "--device", "cpu", "--batch-size", "4,8", "--lr", "inf"], "--lr"),
    (["sweep", "--device", "cpu", "--batch-size", "4,8", "--sample-interval-s", "nan"], "--sample-interval-s"),
    (["sweep", "--device", "cpu", "--batch-size", "4,8", "--seed", str(2**64)], "--seed"),
    (["sweep", "--device", "cpu", "--batch-size", "4,8", "--image-size", "100000"], "--image-size"),
    # report and compare
    (["report", "{corrupt_run}"], "results.json"),
    (["report", "{newer_run}"], "results.json"),
    (["report", "{missing}"], "does-not-exist"),
    (["compare", "{corrupt_run}", "{newer_run}"], "results.json"),
    # a file that is not a run's results: the advice was "rerun the benchmark or delete the folder"
    (
        ["compare", "{steps_csv}", "{newer_run}"],
        "steps.csv: is not readable JSON (Expecting value: line 1 column 1 "
        "(char 0)); pass a run folder or the results.json in it",
    ),
    # doctor
    (["doctor", "--dataset", "imagenet22k"], "--dataset"),
    (["doctor", "--output", "{file}"], "--output"),
    (["doctor", "--dataset", "cifar10", "--data-dir", "{missing}"], "--data-dir"),
]


@pytest.mark.parametrize(
    "args, needle", MATRIX, ids=[f"{i:02d}-{' '.join(a[:1] + a[-2:])}" for i, (a, _) in enumerate(MATRIX)]
)
def test_bad_input_matrix(tmp_path, capsys, monkeypatch, args, needle):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.chdir(tmp_path)  # a run that falls back to the current folder is seen by ok_runs below
    out = tmp_path / "out"
    built = {}
    argv = []
    for a in args:
        if a in BUILDERS:
            built.setdefault(a, BUILDERS[a](tmp_path))
            a = built[a]
        argv.append(a)
    if argv[0] in ("run", "doctor", "sweep") and "--output" not in argv:
        argv += ["--output", out]
    code, stdout, err = invoke(argv, capsys)
    assert code == 2, (code, err[-2000:])
    lines = err.strip().splitlines()
    if argv[0] == "doctor":  # doctor prints its table on stdout and the verdict line on stderr
        assert "FAIL" in stdout or len(lines) == 1, stdout
        assert needle in stdout + err
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert needle in lines[0], lines[0]
    assert "Traceback" not in stdout + err
    assert [r for r in ok_runs(tmp_path) if r not in built.values()] == []  # the inputs themselves excepted


@pytest.mark.parametrize(
    "args, option",
    [
        (["--device", "cpu", "--precision", "fp16"], "--precision: fp16 needs a CUDA device"),
        (["--max-steps", "3", "--warmup-steps", "3"], "--warmup-steps: 3 warm-up steps leave no measured step"),
        (["--max-steps", "2", "--epochs", "2", "--warmup-steps", "9", "--repeats", "2"], "--warmup-steps"),
    ],
)
def test_what_the_config_can_refuse_is_refused_before_preflight_and_before_a_sweeps_cells(
    tmp_path, capsys, monkeypatch, args, option
):
    # In a container preflight warns that the output dies with it; the runtime then refused these: two lines
    # on stderr. A sweep refused them in every cell: exit 1, a folder of failed cells, matplotlib's warning.
    from effbench.system import preflight

    warning = preflight.Finding("warning", "output-mount", "the output ends with the container", "add -v")
    monkeypatch.setattr(preflight, "run_checks", lambda *a, **kw: [warning])
    for command, more in (("run", []), ("sweep", ["--batch-size", "2,4"])):  # after TINY_RUN's --batch-size 4
        argv = [command, *TINY_RUN, *more, "--dataset", "synthetic", *args, "--output", tmp_path]
        code, out, err = invoke(argv, capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {option}"), (argv, err)
        assert "Traceback" not in out + err
    assert list(tmp_path.iterdir()) == []


def test_a_batch_of_one_a_batchnorm_cannot_train_on_is_refused_before_the_run_starts(tmp_path, capsys):
    # issue 46: `--batch-size 1` on the smoke model started, then failed at its first step with PyTorch's
    # "Expected more than 1 value per channel when training" and a `failed` run folder
    code, out, err = invoke(["run", "--smoke", "--batch-size", "1", "--output", tmp_path], capsys)
    assert code == 2 and err.strip().splitlines() == [
        "error: --batch-size: a batch of 1 image per device leaves efficientnet-b0's BatchNorm layer _blocks.11._bn1 "
        "one value per channel (input 1x672x1x1 at --image-size 32), which training cannot normalise; use "
        "--batch-size 2 or more, or a larger --image-size"
    ]
    assert "Traceback" not in out + err and list(tmp_path.iterdir()) == []  # no run folder
    # under strong scaling the fix counts the devices that share the batch
    code, _, err = invoke(["run", "--smoke", "--nproc", "2", "--scaling", "strong", "--batch-size", "2",
                           "--output", tmp_path], capsys)  # fmt: skip
    assert code == 2 and err.strip().splitlines()[-1].endswith(
        "use --batch-size 4 or more (2 devices share it), or a larger --image-size"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_matrix_is_wide_enough():
    assert len(MATRIX) >= 30
    assert {a[0] for a, _ in MATRIX} >= {"run", "sweep", "report", "compare", "doctor"}


@pytest.mark.parametrize("name", ["results.json", "steps.csv", "sweep.json"])
def test_export_never_overwrites_a_file_of_a_run_or_sweep_folder(tmp_path, capsys, name):
    # `export run/ -o run/results.json` wrote the CSV over the run's results.json: exit 0, the run destroyed
    run, sweep = tmp_path / "run", tmp_path / "sweep"
    run.mkdir()
    sweep.mkdir()
    (run / "results.json").write_text(json.dumps(VALID))
    (run / "steps.csv").write_text("epoch,step\n1,1\n")
    (sweep / "sweep.json").write_text("{}")  # a sweep folder's manifest (its content is not read here)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    target = (sweep if name == "sweep.json" else run) / name
    code, out, err = invoke(["export", run, "--output", target], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --output:") and "overwrite" in lines[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    # a new file beside them is still written, and a parent that is a file is said to be one
    assert invoke(["export", run, "--output", run / "runs.csv"], capsys)[0] == 0
    code, _, err = invoke(["export", run, "--output", run / "steps.csv" / "x.csv"], capsys)
    assert code == 2 and "is a file, not a folder" in err


# --- a full disk ---------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path):
    """A 48 KiB tmpfs when this machine lets us mount one (root, CI), else None."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        yield None
        return
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_is_one_clear_error_and_leaves_no_half_written_file(tmp_path, capsys, monkeypatch, tiny_disk):
    if tiny_disk is None:
        # No mount allowed here: the same failure, injected where the bytes reach the disk.
        import effbench.results as results_mod

        real_fsync, calls = os.fsync, {"n": 0}

        def fsync(fd):
            calls["n"] += 1
            if calls["n"] > 6:
                raise OSError(errno.ENOSPC, "No space left on device")
            real_fsync(fd)

        monkeypatch.setattr(results_mod.os, "fsync", fsync)
        out = tmp_path / "out"
    else:
        out = tiny_disk / "out"
    # tiny (not --smoke): the same writes in seconds, so a loaded machine stays inside the timeout
    code, stdout, err = invoke(["run", *TINY_RUN, "--dataset", "synthetic", "--profile", "--profile-steps", "1",
                                "--output", out], capsys)  # fmt: skip
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--output" in lines[0] and "no space left" in lines[0], err
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    for f in run.iterdir():
        assert not f.name.startswith(".") and not f.name.endswith((".tmp", ".part")), f"half-written file {f.name}"
        if f.suffix == ".json":
            json.loads(f.read_text())
        elif f.suffix == ".csv":
            rows = list(csv.reader(f.open()))
            assert rows and all(len(r) == len(rows[0]) for r in rows), f.name
    record = read_results(run)
    assert record["status"] == "failed" and "no space left" in record["error"]["message"]  # never `running`


def test_a_corrupt_food101_jpeg_is_skipped_and_counted_in_results_json(tmp_path, capsys):
    from fakedata import corrupt_file, make_food101

    root = make_food101(tmp_path / "data", classes=2, per_class=8, size=48)
    meta = json.loads((root / "food-101" / "meta" / "train.json").read_text())
    first_class = sorted(meta)[0]
    corrupt_file(root / "food-101" / "images" / f"{meta[first_class][0]}.jpg")
    code, _, err = invoke(["run", *TINY_RUN, "--dataset", "food101", "--data-dir", root, "--batch-size", "2",
                           "--max-steps", "100", "--output", tmp_path / "out"], capsys)  # fmt: skip
    assert code == 0, err
    (run,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    r = read_results(run)
    assert r["status"] == "ok" and r["data"]["corrupt_images_skipped"] == 1


# --- reproducibility ----------------------------------------------------------------------------


def test_same_seed_and_config_give_bit_identical_losses_and_record_the_command(tmp_path, capsys):
    args = ["run", *TINY_RUN, "--dataset", "synthetic", "--max-steps", "5", "--seed", "7", "--log-interval", "1"]
    losses = []
    for name in ("a", "b"):
        code, _, err = invoke([*args, "--output", tmp_path / name], capsys)
        assert code == 0, err
        (run,) = [p for p in (tmp_path / name).iterdir() if p.is_dir()]
        losses.append([row["loss"] for row in csv.DictReader((run / "steps.csv").open())])
        r = read_results(run)
        assert r["command"][-len(args) - 2 :] == [str(a) for a in args] + ["--output", str(tmp_path / name)]
        assert r["config"]["seed"] == 7
    assert losses[0] == losses[1] and len(losses[0]) == 5 and all(loss for loss in losses[0])


# --- nothing executed that should not be --------------------------------------------------------


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def test_the_package_never_uses_a_shell_or_a_command_string():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for call in _calls(tree):
            name = ast.unparse(call.func)
            if name in ("os.system", "os.popen", "eval", "exec", "subprocess.getoutput", "subprocess.getstatusoutput"):
                offenders.append(f"{path.name}:{call.lineno} {name}")
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offenders.append(f"{path.name}:{call.lineno} shell=")
            if name.startswith("subprocess.") and call.args and isinstance(call.args[0], (ast.Constant, ast.JoinedStr)):
                offenders.append(f"{path.name}:{call.lineno} {name} with a string command")
    assert offenders == []


def test_checkpoints_are_only_loaded_with_weights_only():
    loads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _calls(ast.parse(path.read_text())):
            if ast.unparse(call.func) in ("torch.load", "load") and any(k.arg == "weights_only" for k in call.keywords):
                kw = next(k for k in call.keywords if k.arg == "weights_only")
                loads.append((path.name, call.lineno, ast.unparse(kw.value)))
            elif ast.unparse(call.func) == "torch.load":
                loads.append((path.name, call.lineno, "missing"))
    assert loads and all(v == "True" for _, _, v in loads), loads


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/effbench-pwned",))


def test_a_weights_file_that_would_run_code_does_not(tmp_path, capsys):
    marker = Path("/tmp/effbench-pwned")
    marker.unlink(missing_ok=True)
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"conv1.weight": _Boom()}))
    code, _, err = invoke(
        ["run", *TINY_RUN, "--dataset", "synthetic", "--weights", evil, "--output", tmp_path / "out"], capsys
    )
    assert code == 2 and "--weights" in err
    assert not marker.exists()


@given(st.text(max_size=60))
def test_run_names_never_leave_the_output_folder(text):
    name = safe_name(text)
    assert name and "/" not in name and "\\" not in name and name not in (".", "..") and "\x00" not in name


# --- fuzzed parsers: only the documented error ---------------------------------------------------


@given(st.text(max_size=30))
def test_count_lists_raise_only_effbench_errors(text):
    try:
        counts = parse_counts("--gpus", text)
    except EffbenchError as e:
        assert e.option == "--gpus" and "\n" not in str(e)
    else:
        assert counts and all(isinstance(n, int) and n >= 1 for n in counts)


@given(st.text(max_size=30))
def test_freeze_specs_raise_only_effbench_errors(text):
    try:
        mode, n = parse_freeze(text)
    except EffbenchError as e:
        assert e.option == "--freeze"
    else:
        assert mode in ("classifier", "none", "last") and (n >= 1) == (mode == "last")


@given(st.one_of(st.text(max_size=40), st.from_regex(r"[a-z0-9.\[\]:-]{1,20}:[0-9]{1,7}", fullmatch=True)))
def test_endpoints_raise_only_effbench_errors(text):
    try:
        host, port = parse_endpoint(text)
    except EffbenchError as e:
        assert e.option == "--rdzv-endpoint"
    else:
        assert host and 1 <= port <= 65535


VALID = {"schema_version": 1, "status": "ok", "config": {}, "env": {}, "device": "cpu", "world_size": 1,
         "throughput_img_s": 1.0, "epochs": []}  # fmt: skip


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_results_files_raise_only_effbench_errors_naming_the_file(tmp_path, data):
    text = json.dumps(VALID)
    how = data.draw(st.sampled_from(["truncate", "flip", "replace", "bytes"]))
    if how == "truncate":
        blob = text[: data.draw(st.integers(0, len(text) - 1))].encode()
    elif how == "flip":
        i = data.draw(st.integers(0, len(text) - 1))
        blob = (text[:i] + data.draw(st.characters()) + text[i + 1 :]).encode("utf-8", "surrogatepass")
    elif how == "replace":
        key = data.draw(st.sampled_from(sorted(VALID)))
        value = data.draw(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)))
        blob = json.dumps({**VALID, key: value}).encode()
    else:
        blob = data.draw(st.binary(max_size=200))
    path = tmp_path / "results.json"
    path.write_bytes(blob)
    try:
        r = read_results(path)
    except EffbenchError as e:
        assert str(path) in str(e) and "\n" not in str(e)
    else:
        assert isinstance(r, dict) and r["schema_version"] <= 1


TALLY = {"steps": 2, "images": 8, "data_time_s": 0.1, "compute_time_s": 0.3, "time_s": 0.4, "throughput_img_s": 20.0}
EPOCH = {"epoch": 1, "images": 8, "throughput_img_s": 20.0, "train_top1": 0.5, "val_top1": 0.25, "data_time_s": 0.1}


@pytest.mark.parametrize(
    "edit, field",
    [
        ({"throughput_img_s": -5.0}, "throughput_img_s"),
        ({"final": {"val_top1": 7.5}}, "final.val_top1"),  # a fraction: 7.5 is no top-1
        ({"final": {"train_top1": -0.1}}, "final.train_top1"),
        ({"epochs": [{**EPOCH, "val_top1": 1.5}]}, "epochs.0.val_top1"),
        ({"epochs": [{**EPOCH, "data_time_s": -1.0}]}, "epochs.0.data_time_s"),
        ({"epochs": [{**EPOCH, "images": -8}]}, "epochs.0.images"),
        ({"measured": {**TALLY, "time_s": -0.4}}, "measured.time_s"),
        ({"data_time_share": 1.5}, "data_time_share"),
        ({"world_size": 0}, "world_size"),
        ({"throughput_windows": {"throughput_img_s": [20.0, -1.0]}}, "throughput_windows.throughput_img_s.1"),
    ],
)
def test_hand_edited_figures_no_run_can_have_are_refused_naming_the_field(tmp_path, capsys, edit, field):
    # strict types let a throughput of -5 img/s or a top-1 of 7.5 through: report printed them, and compare's
    # gate judged them (PASS --fail-if-slower 5 beside "B -5.0 img/s")
    run = tmp_path / "run"
    run.mkdir()
    good = {**VALID, "epochs": [EPOCH], "measured": TALLY, "final": {"val_top1": 0.25}, "data_time_share": 0.25}
    (run / "results.json").write_text(json.dumps(good))
    assert read_results(run)["throughput_img_s"] == 1.0  # the same record with real figures reads
    (run / "results.json").write_text(json.dumps({**good, **edit}))
    with pytest.raises(EffbenchError) as info:
        read_results(run)
    assert f"field {field}:" in str(info.value) and str(run / "results.json") in str(info.value)
    code, out, err = invoke(["report", run], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"field {field}:" in lines[0] and "Traceback" not in out + err


STEPS_HEADER = "epoch,step,warmup,images,loss,top1,data_time_s,compute_time_s\n"
STEP_ROW = "1,1,False,4,2.3,0.25,0.01,0.2\n"


@pytest.mark.parametrize(
    "body, line",
    [
        (STEP_ROW + "1,2,False,4,2.2,0.25,0.0", 3),  # cut mid-row: 7 of 8 fields, the chart drew what was left
        ("x,y,z\n", 2),  # a row of another table
        (STEP_ROW + STEP_ROW.strip() + ",9,9\n", 3),  # fields beyond the header
    ],
)
def test_a_truncated_or_foreign_steps_csv_is_one_error_naming_its_line(tmp_path, capsys, body, line):
    from effbench.analysis.windows import read_steps

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(VALID))
    (run / "steps.csv").write_text(STEPS_HEADER + STEP_ROW)
    assert len(read_steps(run)) == 1
    (run / "steps.csv").write_text(STEPS_HEADER + body)
    with pytest.raises(EffbenchError) as info:
        read_steps(run)
    assert str(run / "steps.csv") in str(info.value) and f"line {line}" in str(info.value)
    code, out, err = invoke(["report", run], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"line {line}" in err and "Traceback" not in out + err


def test_a_results_file_from_a_newer_schema_is_refused_by_name(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**VALID, "schema_version": 99}))
    with pytest.raises(EffbenchError) as info:
        read_results(path)
    assert str(path) in str(info.value) and "99" in str(info.value)


def test_cli_entry_point_has_no_traceback_for_a_python_level_crash_of_the_parser():
    # `python -m effbench` with a garbage option: Typer's usage error is also one line, exit 2.
    res = subprocess.run(
        [sys.executable, "-m", "effbench", "run", "--batch-size", "many"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "--batch-size" in res.stderr


# --- every numeric option: a stated range, and nothing outside it (issue 12) ----------------------


def _ranged_fields():
    import dataclasses

    from effbench.config import RunConfig

    return {f.name: f.metadata["range"] for f in dataclasses.fields(RunConfig) if "range" in f.metadata}


def _bad_values(rng, integer: bool) -> list[str]:
    """Just outside each bound, plus the non-finite ones: written from the bounds, not from the check."""
    below = rng.lo if rng.lo_open else (rng.lo - 1 if integer else rng.lo - abs(rng.lo) * 0.5 - 0.01)
    above = rng.hi if rng.hi_open else (rng.hi + 1 if integer else rng.hi * 2)
    values = [str(int(below)) if integer else repr(float(below)), str(int(above)) if integer else repr(float(above))]
    return values + ["inf", "-inf", "nan"]


def _params(command: str) -> dict:
    import typer

    from effbench.cli.app import app

    cmd = typer.main.get_command(app).commands[command]
    return {p.name.rstrip("_"): p for p in cmd.params}


OWN_RANGED = {"sweep": {"rounds": "1..100"}}


@pytest.mark.parametrize("command", ["run", "sweep", "doctor"])
def test_every_numeric_option_states_its_declared_range_in_help(command, capsys):
    ranged = _ranged_fields()
    params = _params(command)
    numeric = [name for name in params if name in ranged]
    assert numeric, command
    for name in numeric:
        assert f"[range: {ranged[name].text()}]" in params[name].help, (command, name, params[name].help)
    # and the rendered --help shows them (wrapped text, so whitespace is normalised)
    own = OWN_RANGED.get(command, {})  # a command's own numeric options, not RunConfig fields
    for name, text in own.items():
        assert f"[range: {text}]" in params[name].help, (command, name, params[name].help)
    code, out, _ = invoke([command, "--help"], capsys)
    assert code == 0 and " ".join(out.split()).count("[range: ") == len(numeric) + len(own)
    if command == "run":  # every numeric field of RunConfig is an option of run
        assert set(numeric) == set(ranged)


def _rejects(argv, option, capsys):
    code, stdout, err = invoke(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err[-500:])
    assert len(lines) == 1 and lines[0].startswith("error: ") and option in lines[0], (argv, err)
    assert "Traceback" not in stdout + err


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_numeric_option_rejects_out_of_range_inf_and_nan_naming_the_option(command, tmp_path, capsys):
    import dataclasses

    from effbench.config import RunConfig

    types = {f.name: f.type for f in dataclasses.fields(RunConfig)}  # "int | None", "float"...
    ranged = _ranged_fields()
    params = _params(command)
    base = ["--smoke", "--output", str(tmp_path / "out")] + (["--batch-size", "4,8"] if command == "sweep" else [])
    tried = 0
    for name, param in params.items():
        if name not in ranged:
            continue
        option = param.opts[0]
        integer = str(types[name]).startswith("int")
        for value in _bad_values(ranged[name], integer):
            argv = [command, *(b for b in base if not (command == "sweep" and name == "batch_size")), option, value]
            if command == "sweep" and name == "batch_size":
                argv = [command, "--smoke", "--output", str(tmp_path / "out"), option, f"4,{value}"]
            _rejects(argv, option, capsys)
            tried += 1
    assert tried >= 5 * 15
    assert ok_runs(tmp_path) == []


def test_a_seed_at_the_top_of_the_range_seeds_every_generator():
    import torch

    from effbench.config import SEED_MAX, offset_seed
    from effbench.run.rank import seed_everything

    seed_everything(SEED_MAX)
    for k in (0, 1, 7):  # rank and epoch offsets wrap instead of overflowing manual_seed's range
        torch.Generator().manual_seed(offset_seed(SEED_MAX, k))
    assert offset_seed(SEED_MAX, 1) == 0 and offset_seed(5, 2) == 7


@pytest.mark.parametrize("requested, cores", [(0, 2), (2, 2), (3, 2), (1024, 4), (16, 64), (3, 2.5)])
def test_workers_beyond_the_cores_all_start_and_are_said_once(requested, cores):
    # issue 34: capped at the cores, the workers experiment could never show loading degrade past them
    import io

    from effbench.data.build import say_workers_beyond_cores

    for rank in (0, 1):
        stream = io.StringIO()
        assert say_workers_beyond_cores(requested, cores, rank, stream) == requested
        said = stream.getvalue()
        assert (said != "") == (requested > cores and rank == 0)
        if said:
            assert said.count("\n") == 1 and f"--workers {requested}" in said and f"{cores:g} CPU cores" in said
            assert f"starting {requested}" in said


def test_a_run_with_more_workers_than_cores_starts_them_says_so_once_and_records_both(
    tmp_path, capsys, monkeypatch, cifar10_dir
):
    from clitools import invoke, only_run

    from effbench.data import build

    monkeypatch.setattr(build, "allowed_cores", lambda: 1.0)  # this machine has 2: say it has 1
    code, _, err = invoke(["run", "--dataset", "cifar10", "--data-dir", cifar10_dir, "--loader", "torchvision",
                           "--workers", "2", "--arch", "resnet18", "--image-size", "16", "--batch-size", "8",
                           "--epochs", "1", "--max-steps", "3", "--warmup-steps", "1", "--weights", "none",
                           "--no-profile", "--quiet", "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    said = [line for line in err.splitlines() if "--workers" in line]
    assert said == [
        "warning: --workers 2 is more than the 1 CPU cores this run may use; starting 2, which share them "
        "(for the fastest loading use at most 1)"
    ]  # once: not again as an option that "had no effect"
    r = json.loads((only_run(tmp_path) / "results.json").read_text())
    assert (r["data"]["workers"], r["data"]["workers_asked"], r["config"]["workers"]) == (2, 2, 2)
    assert "workers" not in (r["config"].get("no_effect") or {})


@pytest.mark.parametrize(
    "batch, size, host_gib, ok",
    [(64, 224, 1.0, True), (64, 8192, 20.0, False), (1, 4096, 0.25, True), (2, 4096, 0.1, False)],
)
def test_a_batch_that_cannot_fit_in_host_memory_is_refused_before_allocation(batch, size, host_gib, ok):
    from effbench.config import RunConfig
    from effbench.system.preflight import check_batch_memory

    cfg = RunConfig(batch_size=batch, image_size=size, device="cpu", dataset="synthetic")
    (f,) = check_batch_memory(cfg, int(host_gib * 2**30), None, processes=1)
    need = batch * 3 * size * size * 4  # float32 NCHW, written apart from batch_bytes
    assert (f.level == "ok") == ok == (need <= host_gib * 2**30)
    if not ok:
        assert f.option in ("--image-size", "--batch-size") and "host memory" in f.message


# --- the default warm-up leaves measured steps (issue 12) ------------------------------------------


@pytest.mark.parametrize(
    "given, total, compile_, used",
    [(None, 1, False, 0), (None, 2, False, 1), (None, 5, False, 2), (None, 10, False, 5), (None, 31, False, 5),
     (None, 100, False, 50), (None, 3, True, 1), (None, 1, True, 0), (0, 100, False, 0), (7, 5, False, 7)],
)  # fmt: skip
def test_the_default_warmup_shrinks_to_half_the_steps_and_an_explicit_one_is_kept(given, total, compile_, used):
    # auto's most: 5 (at most half) on a run too short for MSER-5, else half the run (its cap); a count as given
    from effbench.config import resolve_warmup

    assert resolve_warmup(given, total, compile_) == used
    if given is None and total > 1:
        assert total - used >= 1 and used <= max(5, total // 2)


def test_a_short_run_without_warmup_steps_measures_and_records_the_warmup_used(tmp_path, capsys):
    i = TINY_RUN.index("--warmup-steps")
    args = TINY_RUN[:i] + TINY_RUN[i + 2 :]
    code, _, err = invoke(["run", *args, "--dataset", "synthetic", "--max-steps", "3", "--output", tmp_path], capsys)
    assert code == 0, err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    config = json.loads((run / "config.json").read_text())
    assert config["warmup_steps"] is None and read_results(run)["config"]["warmup_steps"] is None  # auto
    rule = read_results(run)["warmup_rule"]
    assert (rule["rule"], rule["steps"]) == ("auto, too few steps", 1) and rule["reason"].startswith("3 steps")
    rows = list(csv.DictReader((run / "steps.csv").open()))
    assert [r["warmup"] for r in rows] == ["True", "False", "False"]
    # epochs and steps counted from 1, as the progress lines (`epoch 1/5 step 3/3`) and the divergence error count
    assert [(r["epoch"], r["step"]) for r in rows] == [("1", "1"), ("1", "2"), ("1", "3")]


def test_the_optimizers_preset_with_five_steps_plans_cells_that_measure():
    from effbench.config import resolve_warmup
    from effbench.sweep.spec import SweepSpec, plan_cells

    plan = plan_cells(SweepSpec(preset="optimizers", options={"max_steps": 5, "device": "cpu"}))
    assert len(plan.cells) == 5
    for cell in plan.cells:
        total = cell.config.epochs * 5
        assert cell.config.warmup_steps is None and resolve_warmup(None, total) < total


# --- a loss that goes non-finite stops the run: status diverged (issue 12) -------------------------


class _Batches:
    """A loader stand-in: `n` batches of 4 tiny images, the one at `bad` holding an inf pixel."""

    def __init__(self, n: int, bad: int | None, value: float = float("inf")):
        import torch

        g = torch.Generator().manual_seed(0)
        self.batches = [
            (torch.randn(4, 3, 2, 2, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(n)
        ]
        if bad is not None:
            self.batches[bad][0][0, 0, 0, 0] = value
        self.steps_per_epoch = n
        self.train, self.val = self, []

    def __iter__(self):
        return iter(self.batches)

    def set_epoch(self, epoch: int) -> None:
        pass


@pytest.mark.parametrize(
    "steps, bad, log_interval, value",
    [(6, 0, 1, float("inf")), (6, 3, 2, float("nan")), (6, 4, 10, float("inf")), (8, 7, 3, float("-inf"))],
)
def test_training_stops_at_the_first_non_finite_loss_and_names_its_step(steps, bad, log_interval, value):
    import torch

    from effbench.config import RunConfig
    from effbench.run.runtime import Runtime
    from effbench.run.train import Diverged, train_epochs

    def fresh():
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)

    model, opt, sched = fresh()
    rt = Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)
    cfg = RunConfig(device="cpu", dataset="synthetic", epochs=1, warmup_steps=0, log_interval=log_interval,
                    max_steps=steps, profile=False)  # fmt: skip
    progress = []
    with pytest.raises(Diverged) as info:
        list(train_epochs(model, _Batches(steps, bad, value), opt, sched, rt, cfg,
                          on_progress=lambda e, s, n, loss: progress.append(s)))  # fmt: skip
    # the batch at list index `bad` is the run's step bad + 1, counted from 1 like the progress lines
    assert (info.value.epoch, info.value.step, info.value.global_step) == (1, bad + 1, bad + 1)
    assert not math.isfinite(info.value.loss)
    assert f"at step {bad + 1} of the run (epoch 1, step {bad + 1} of the epoch" in str(info.value)
    # found at the end of the interval holding it, never later; no progress line past it
    assert all(s <= bad for s in progress) and len(progress) == bad // log_interval
    # the same data with the bad pixel fixed trains to the end
    model, opt, sched = fresh()
    assert len(list(train_epochs(model, _Batches(steps, None), opt, sched, rt, cfg))) == 1


def test_the_ranks_stop_at_the_earliest_non_finite_loss_any_of_them_saw():
    from effbench.run.train import Diverged, check_finite

    offered = []

    def agreement(result):  # a stand-in for the ranks' all_gather (launch/distributed.nonfinite_agreement)
        def agree(mine):
            offered.append(mine)
            return result

        return agree

    # this rank's step indices 4..7 of epoch index 1 (global 14..17) are finite; another rank's inf at global
    # index 15 stops it there: the run's 16th step, the 6th of the 2nd epoch, as the progress lines count
    with pytest.raises(Diverged) as info:
        check_finite([1.0, 2.0, 3.0, 4.0], epoch=1, first_step=4, first_global_step=14,
                     agree=agreement((15, float("inf"), 1)))  # fmt: skip
    e = info.value
    assert offered == [None] and (e.epoch, e.step, e.global_step, e.loss, e.rank) == (2, 6, 16, float("inf"), 1)
    assert "inf on rank 1 at step 16 of the run (epoch 2, step 6 of the epoch" in str(e) and e.record().rank == 1
    # what this rank offers is its own first non-finite (global step, loss); nothing when all is finite
    offered.clear()
    with pytest.raises(Diverged):
        check_finite([1.0, float("nan"), float("inf")], epoch=0, first_step=0, first_global_step=7,
                     agree=agreement((8, float("nan"), 0)))  # fmt: skip
    check_finite([1.0, 2.0], epoch=0, first_step=2, first_global_step=9, agree=agreement(None))
    assert offered[0][0] == 8 and math.isnan(offered[0][1]) and offered[1:] == [None]
    # alone (no process group), the message and results.json name no rank
    with pytest.raises(Diverged) as info:
        check_finite([float("nan")], epoch=0, first_step=0, first_global_step=0)
    assert (
        info.value.rank is None
        and "rank" not in str(info.value)
        and "rank" not in info.value.record().model_dump(exclude_unset=True)
    )


@pytest.mark.parametrize(
    "value, rank, expected",
    [("1:3", "1", 2), ("1:3", "0", None), ("0:1", None, 0), ("0:0", None, None), ("", "0", None),
     ("x:3", "0", None), ("1:-3", "1", None), ("3", "0", None), (" 0:5 ", "0", 4)],
)  # fmt: skip
def test_the_nan_loss_hook_names_one_rank_and_a_step(value, rank, expected):
    # STEP counts from 1 as the error does ("1:3": the run's 3rd step, loop index 2); STEP 0 names no step
    from effbench.run.faults import FAULT_NAN_ENV, nan_loss_from

    env = {FAULT_NAN_ENV: value, **({"RANK": rank} if rank is not None else {})}
    assert nan_loss_from(env) == expected
    assert nan_loss_from({}) is None


def test_outside_a_process_group_the_ranks_agreement_is_this_process_alone():
    import torch

    from effbench.launch.distributed import agree_alone, nonfinite_agreement

    assert nonfinite_agreement(torch.device("cpu")) is agree_alone
    assert agree_alone(None) is None and agree_alone((4, float("inf"))) == (4, float("inf"), None)


def test_a_run_whose_loss_goes_nan_ends_diverged_exit_1_with_the_step_in_results_json(tmp_path, capsys, monkeypatch):
    import torch

    from effbench.run import train

    real, calls = train.TrainStep.__call__, {"n": 0}

    def nan_from_step_2(self, batch):  # the leaf patched: the step's loss, as a NaN-producing lr would make it
        out = real(self, batch)
        calls["n"] += 1
        return out._replace(loss=out.loss * float("nan")) if calls["n"] > 2 else out

    monkeypatch.setattr(train.TrainStep, "__call__", nan_from_step_2)
    code, _, err = invoke(["run", *TINY_RUN, "--dataset", "synthetic", "--max-steps", "5", "--log-interval", "2",
                           "--output", tmp_path], capsys)  # fmt: skip
    assert code == 1
    lines = err.strip().splitlines()
    # the 3rd call is the run's step 3, counted from 1 as the progress lines count
    assert len(lines) == 1 and lines[0].startswith("error: run diverged") and "at step 3 of the run" in lines[0], err
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    r = read_results(run)
    assert r["status"] == "diverged" and r["diverged"]["global_step"] == 3 and r["diverged"]["loss"] == "nan"
    assert torch.isnan(torch.tensor(float(r["diverged"]["loss"])))


def test_a_divergence_in_the_second_epoch_is_numbered_as_the_progress_lines_and_results_json_number_it(
    tmp_path, capsys, monkeypatch
):
    # 2 epochs of 6 steps, the hook poisons the run's 9th step: the 3rd step of epoch 2. The progress line
    # before it says "epoch 2/2 step 2/6" (2 steps of epoch 2 done), so the error and results.json say epoch 2,
    # step 3 of the epoch, step 9 of the run. Before, they said epoch 1 (0-based) and steps 2 and 8.
    monkeypatch.setenv("EFFBENCH_FAULT_NAN_LOSS", "0:9")
    code, _, err = invoke(["run", "--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu",
                           "--dataset", "synthetic", "--max-steps", "6", "--epochs", "2", "--batch-size", "4",
                           "--warmup-steps", "2", "--no-profile", "--log-interval", "1", "--output", tmp_path],
                          capsys)  # fmt: skip
    assert code == 1, err
    progress = [line for line in err.splitlines() if line.startswith("epoch ") and " step " in line]
    assert progress[-1].startswith("epoch 2/2 step 2/6 "), err
    last = err.strip().splitlines()[-1]
    assert "loss became nan at step 9 of the run (epoch 2, step 3 of the epoch, counted from 1" in last, last
    # epoch 2 never finished: steps.csv holds epoch 1's 6 rows only, so the message points at no rows in it
    assert "steps.csv" not in last
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert {row["epoch"] for row in csv.DictReader((run / "steps.csv").open())} == {"1"}
    r = read_results(run)
    assert r["diverged"] == {"epoch": 2, "step": 3, "global_step": 9, "loss": "nan"}
    assert [e["epoch"] for e in r["epochs"]] == [1]


# --- weights that load but cannot train (issue 12) ------------------------------------------------


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda t: {"conv1.weight": t.full((4, 3, 3, 3), float("nan"))}, "nan/inf"),
        (lambda t: {"conv1.weight": t.zeros(4, 3), "fc.bias": t.tensor([1.0, float("inf")])}, "fc.bias"),
        (lambda t: {"fc.bias": t.tensor([0.0, float("-inf")], dtype=t.float16)}, "nan/inf"),
        (lambda t: {"conv1.weight": t.zeros(2, 2, dtype=t.complex64)}, "complex64"),
        (lambda t: {"state_dict": {"conv1.weight": t.tensor([1.0, float("nan")])}}, "conv1.weight"),
    ],
)
def test_weights_holding_nan_inf_or_complex_values_are_refused_at_load(tmp_path, make, needle):
    import torch

    from effbench.models.weights import read_state_dict

    path = tmp_path / "w.pt"
    torch.save(make(torch), path)
    with pytest.raises(EffbenchError) as info:
        read_state_dict(path)
    assert info.value.option == "--weights" and str(path) in str(info.value) and needle in str(info.value)
    assert "\n" not in str(info.value)
    # the same shapes with finite real values load
    fine = {k: torch.zeros(2) for k in ("conv1.weight", "fc.bias")}
    torch.save(fine, path)
    assert set(read_state_dict(path)) == set(fine)


# --- CIFAR pickles: every field checked (issue 12) ------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("labels", lambda n: [str(i % 10) for i in range(n)]),  # digits as text: numpy would parse them
        ("labels", lambda n: ["cat"] * n),
        ("labels", lambda n: [2**70] * n),  # overflows int64
        ("labels", lambda n: [[1]] * n),  # nested: numpy would build a 2-D array
        ("labels", lambda n: [3.7] * n),  # numpy would truncate
        ("labels", lambda n: [True] * n),
        ("labels", lambda n: [10] * n),  # one past the last class
        ("labels", lambda n: [-1] * n),
        ("labels", lambda n: "0123"),
        ("labels", lambda n: np.zeros((n, 1), dtype=np.int64)),
        ("labels", lambda n: np.zeros(n, dtype=np.float32)),
        ("data", lambda n: np.zeros((n, 32, 32, 3), dtype=np.uint8)),  # right size, wrong shape
        ("data", lambda n: np.zeros((n, 3072), dtype=np.float64)),
        ("data", lambda n: [[0] * 3072] * n),
    ],
)
def test_a_cifar_batch_with_a_hostile_field_is_one_error_naming_the_file(tmp_path, field, value):
    from fakedata import make_cifar, py2_pickle, read_cifar_raw

    from effbench.data import cifar

    root = make_cifar(tmp_path, "cifar10", n_train=40, n_test=20) / "cifar-10-batches-py"
    path = root / "data_batch_2"
    raw = read_cifar_raw(path)
    key = field.encode() if field.encode() in raw else field
    raw[key] = value(8)
    path.write_bytes(py2_pickle(raw))
    with pytest.raises(EffbenchError) as info:
        cifar.read_batch(path, "labels", 10)
    assert info.value.option == "--data-dir" and str(path) in str(info.value) and "\n" not in str(info.value)
    images, labels = cifar.read_batch(root / "data_batch_1", "labels", 10)  # an intact batch still reads
    assert images.shape == (8, 32, 32, 3) and labels.dtype == np.int64 and 0 <= labels.min() <= labels.max() < 10


def test_cifar_class_names_that_are_not_text_are_refused(tmp_path):
    from fakedata import make_cifar, py2_pickle, read_cifar_raw

    from effbench.data import cifar

    path = make_cifar(tmp_path, "cifar10", n_train=10, n_test=5) / "cifar-10-batches-py" / "batches.meta"
    raw = read_cifar_raw(path)
    raw[b"label_names" if b"label_names" in raw else "label_names"] = [[1]] * 10
    path.write_bytes(py2_pickle(raw))
    with pytest.raises(EffbenchError) as info:
        cifar.read_meta(path, "label_names", 10)
    assert str(path) in str(info.value)


# --- images that declare more pixels than the loaders accept (issue 12) ---------------------------


def _jpeg_declaring(path: Path, width: int, height: int) -> Path:
    """A small real JPEG whose SOF0 header is patched to declare width x height: a decompression bomb
    in a few hundred bytes. Built here; the marker layout is the JPEG standard's (ITU T.81 B.2.2)."""
    import io as _io

    from PIL import Image

    buf = _io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, "JPEG")  # baseline: PIL writes SOF0
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")  # FF C0, length (2), precision (1), height (2), width (2)
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path


def test_a_jpeg_declaring_30000_by_30000_is_refused_by_both_loaders_before_decoding(tmp_path):
    from effbench.data import fast_images
    from effbench.data.images import read_rgb
    from effbench.data.loaders import SkipLog

    bomb = _jpeg_declaring(tmp_path / "bomb.jpg", 30000, 30000)
    assert bomb.stat().st_size < 1000
    assert read_rgb(str(bomb)) is None  # the torchvision loader (PIL)
    assert fast_images.read_square(str(bomb), 32) is None  # the fast loader, CPU decode
    assert fast_images.read_encoded(str(bomb), 32) is None  # the fast loader, --gpu-decode (bytes for nvjpeg)
    log = SkipLog({str(bomb)})
    stats = log.stats()
    assert stats["corrupt_images_skipped"] == 1 and "pixel limit" in stats["corrupt_image_reasons"][str(bomb)]
    assert "900000000 pixels" in stats["corrupt_image_reasons"][str(bomb)]


@pytest.mark.parametrize("side, accepted", [(8, True), (12, True), (14, True), (15, False), (40, False)])
def test_both_loaders_agree_on_pils_pixel_limit(tmp_path, monkeypatch, side, accepted):
    from PIL import Image

    from effbench.data import fast_images
    from effbench.data.images import read_rgb

    # PIL refuses above 2 * MAX_IMAGE_PIXELS (PIL/Image.py _decompression_bomb_check): 200 here, so
    # 14 x 14 = 196 is read and 15 x 15 = 225 is not. Real images, decodable at every size.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    path = tmp_path / f"img{side}.jpg"
    Image.new("RGB", (side, side), (10, 120, 200)).save(path, "JPEG")
    assert (read_rgb(str(path)) is not None) == accepted
    assert (fast_images.read_square(str(path), 8) is not None) == accepted
    assert (fast_images.read_encoded(str(path), 8) is not None) == accepted


# --- unreadable datasets and symlink loops (issue 12) ---------------------------------------------


def test_a_symlink_loop_in_an_image_folder_counts_each_file_once(tmp_path):
    from fakedata import make_imagefolder

    from effbench.data.imagefolder import class_folders, scan

    root = make_imagefolder(tmp_path / "img", classes=2, per_class=12, size=16)
    (root / "class_0" / "loop").symlink_to(".")  # loop -> .
    (root / "class_1" / "up").symlink_to("..")  # a link to the parent: every class again
    (root / "class_1" / "twin.jpg").symlink_to(root / "class_1" / "img_000.jpg")  # the same file twice
    found = scan(root, class_folders(root))
    real = sorted(str(p) for p in root.rglob("img_*") if not any(part in ("loop", "up") for part in p.parts))
    assert len(found) == len(real) == 24
    assert sorted(os.path.realpath(p) for p in found.paths) == sorted(os.path.realpath(p) for p in real)


def test_a_dataset_whose_every_training_image_is_unreadable_is_one_error_exit_2(tmp_path, capsys):
    from fakedata import corrupt_file, make_imagefolder

    root = make_imagefolder(tmp_path / "img", classes=2, per_class=4, size=16, split=True, val_per_class=1)
    for f in (root / "train").rglob("img_*"):
        corrupt_file(f)
    code, _, err = invoke(["run", *TINY_RUN, "--dataset", "imagefolder", "--data-dir", root, "--batch-size", "2",
                           "--output", tmp_path], capsys)  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --data-dir") and "8 file(s)" in lines[0]
    assert ok_runs(tmp_path / "out") == []


@pytest.mark.parametrize("skipped, train, val, warned", [(0, 100, 0, False), (10, 90, 10, False), (11, 90, 10, True),
                                                         (3, 20, 5, True), (1, 0, 0, False)])  # fmt: skip
def test_more_than_a_tenth_of_the_images_skipped_is_a_warning_in_the_report(skipped, train, val, warned):
    from effbench.report.tables import skipped_images_warning
    from effbench.results import record_of

    data = {"corrupt_images_skipped": skipped, "train_size": train, "val_size": val}
    line = skipped_images_warning(record_of({"schema_version": 1, "status": "ok", "data": data}))
    assert (line is not None) == warned == (train + val > 0 and skipped / (train + val) > 0.1)
    if line:
        assert line.startswith("warning: ") and f"{skipped} of {train + val}" in line


def test_a_diverged_sweep_cell_is_named_in_the_verdicts_with_its_message():
    from effbench.report.sweep_tables import CellRow, verdicts

    rows = [
        # as cell_row makes them: the swept values under "params"
        CellRow(key="000_lr-0.1", status="ok", params={"lr": 0.1}),
        CellRow(key="001_lr-1000", status="diverged", params={"lr": 1000}, error="loss became nan at step 3"),
    ]
    lines = verdicts(rows, {"lr": (0.1, 1000)})
    assert "cell 001_lr-1000: diverged (loss became nan at step 3)" in lines
    assert not any("000_lr-0.1" in line for line in lines)

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
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effbench.config import parse_freeze
from effbench.errors import EffbenchError
from effbench.launch.plan import parse_counts, parse_endpoint
from effbench.results import read_results, safe_name
from clitools import invoke

PACKAGE = Path(__file__).resolve().parents[1] / "effbench"
TINY_RUN = ["--arch", "resnet18", "--image-size", "32", "--weights", "none", "--device", "cpu", "--workers", "0",
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


BUILDERS = {
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
    (["run", "--smoke", "--arch", "vgg16"], "--arch"),
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
    (["run", "--smoke", "--freeze", "half"], "--freeze"),
    (["run", "--smoke", "--warmup-steps", "500"], "--warmup-steps"),
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
    # sweep (TINY_RUN values go to every cell)
    (["sweep", "--preset", "fastest"], "--preset"),
    (["sweep", "--batch-size", "32,,64"], "--batch-size"),
    (["sweep", "--batch-size", "4,8", "--epochs", "1,2"], "--epochs"),
    (["sweep", "--batch-size", "4,8", "--workers", "0,1,2", "--zip"], "--zip"),
    (["sweep", "--optimizer", "sgd,lamb", "--device", "cpu"], "--optimizer"),
    (["sweep", "--device", "cpu", "--batch-size", "0,4"], "--batch-size"),
    # report and compare
    (["report", "{corrupt_run}"], "results.json"),
    (["report", "{newer_run}"], "results.json"),
    (["report", "{missing}"], "does-not-exist"),
    (["compare", "{corrupt_run}", "{newer_run}"], "results.json"),
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


def test_the_matrix_is_wide_enough():
    assert len(MATRIX) >= 30
    assert {a[0] for a, _ in MATRIX} >= {"run", "sweep", "report", "compare", "doctor"}


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
    assert read_results(run)["status"] != "ok"


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
    assert losses[0] == losses[1] and len(losses[0]) == 5 and all(l for l in losses[0])


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

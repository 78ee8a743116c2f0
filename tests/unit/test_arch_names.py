"""`--arch` is checked against a static catalogue (effbench/arch_names.py), so a typo is refused without importing
torchvision or timm (issue 47 item 7: 36-39 s to refuse `--arch resnt18` on a busy 2-core machine, 3-6 s for
every other bad option); the catalogue is held against the installed libraries so it cannot go stale silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from effbench import arch_names, archs

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = ("torch", "torchvision", "timm")

# Runs the real entry point (python -m effbench) and prints, at exit, which of torch, torchvision and timm it
# imported: the verdict rests on what was imported, not on the wall time of a shared machine.
PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print("IMPORTED " + json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(%r)))))
sys.argv = ["effbench", *%r]
runpy.run_module("effbench", run_name="__main__")
"""


def _probe(*args: str) -> tuple[int, str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE % (LIBRARIES, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    lines = proc.stdout.splitlines()
    imported = json.loads(next(line for line in lines if line.startswith("IMPORTED "))[len("IMPORTED ") :])
    return proc.returncode, proc.stderr, imported


def test_the_catalogue_is_the_installed_torchvisions():
    import torchvision.models as tvm

    assert archs.installed_version("torchvision") == arch_names.TORCHVISION_VERSION, (
        "torchvision changed: run .venv/bin/python tools/gen_arch_names.py"
    )
    assert list(arch_names.TORCHVISION) == sorted(tvm.list_models(module=tvm))


def test_the_catalogue_is_the_installed_timms():
    timm = pytest.importorskip("timm")
    assert archs.installed_version("timm") == arch_names.TIMM_VERSION, (
        "timm changed: run .venv/bin/python tools/gen_arch_names.py"
    )
    assert list(arch_names.TIMM) == sorted(timm.list_models())


def test_effbenchs_own_efficientnets_are_efficientnet_pytorchs():
    from efficientnet_pytorch.utils import efficientnet_params, url_map

    assert set(archs.EFFICIENTNET_NATIVE_SIZE) == set(url_map)
    for name, size in archs.EFFICIENTNET_NATIVE_SIZE.items():
        assert efficientnet_params(name)[2] == size, name


def test_the_generator_agrees_with_the_committed_catalogue():
    proc = subprocess.run(
        [sys.executable, "tools/gen_arch_names.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_a_mistyped_arch_is_refused_without_importing_torch_torchvision_or_timm():
    code, err, imported = _probe("run", "--arch", "resnt18", "--smoke")
    assert code == 2, err
    assert imported == [], f"the refusal imported {imported}"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "--arch" in err and "did you mean resnet18" in err, err


RESOLVE = """
import json, sys
from effbench.archs import EffbenchError, resolve
out = []
for name in sys.argv[1:]:
    try:
        out.append(resolve(name))
    except EffbenchError as e:
        out.append(str(e))
print(json.dumps([out, sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchvision", "timm"})]))
"""


def test_timm_and_torchvision_names_are_checked_without_the_libraries():
    names = ["timm:resnet5", "torchvision:resnt50", "timm:resnet50", "vit_b_16"]
    proc = subprocess.run(
        [sys.executable, "-c", RESOLVE, *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    (typo_timm, typo_tv, timm_ok, tv_ok), imported = json.loads(proc.stdout)
    assert "did you mean timm:resnet50," in typo_timm
    assert "did you mean torchvision:resnet50," in typo_tv
    assert (timm_ok, tv_ok) == ("timm:resnet50", "torchvision:vit_b_16")
    assert imported == [], f"checking the names imported {imported}"


def test_the_catalogue_decides_when_its_version_is_installed(monkeypatch):
    monkeypatch.setattr(arch_names, "TORCHVISION", ("only_in_the_catalogue",))
    assert archs.torchvision_names() == ["only_in_the_catalogue"]
    assert archs.resolve("only_in_the_catalogue") == "torchvision:only_in_the_catalogue"


def test_another_installed_version_asks_the_library(monkeypatch):
    import torchvision.models as tvm

    monkeypatch.setattr(arch_names, "TORCHVISION", ("only_in_the_catalogue",))
    monkeypatch.setattr(arch_names, "TORCHVISION_VERSION", "0.0.0")
    assert archs.torchvision_names() == list(tvm.list_models(module=tvm))
    with pytest.raises(archs.EffbenchError, match="unknown architecture"):
        archs.resolve("only_in_the_catalogue")


def test_timm_names_without_timm_is_one_line_with_the_fix(monkeypatch):
    monkeypatch.setattr(archs, "timm_installed", lambda: False)
    with pytest.raises(archs.EffbenchError, match=r"pip install 'effbench\[timm\]'"):
        archs.resolve("timm:resnet50")

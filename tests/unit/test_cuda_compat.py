"""The driver / forward-compatibility line: faked NVML and image facts, as preflight's other probes are.

Three hosts: a new driver, an old driver on a data-center GPU, an old driver on a GeForce. The brands are
pynvml's NVML_BRAND_* values (2 Tesla, 14 NVIDIA, 5 GeForce); the NVIDIA_REQUIRE_CUDA text has the form
the nvidia/cuda bases write (`cuda>=X` then `brand=...,driver>=B,driver<B+1` per supported branch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.system import preflight
from effbench.system.cuda_compat import DriverFacts, ImageCuda, compat_branches, forward_compat, read_image_cuda

REQUIRE = (
    "cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 "
    "brand=unknown,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 "
    "brand=unknown,driver>=570,driver<571 brand=tesla,driver>=570,driver<571"
)
IMAGE = ImageCuda(torch_cuda="13.0", base_cuda="13.0.1", require_cuda=REQUIRE, compat_driver="580.82.07")
IMAGE_ON_PATH = ImageCuda(**{**IMAGE.__dict__, "compat_on_path": True})
NEW = DriverFacts("580.95.05", (13, 0), (14,), ("NVIDIA H100 80GB HBM3",))
OLD_DC = DriverFacts("535.183.01", (12, 2), (2,), ("NVIDIA A100-SXM4-80GB",))
OLD_GEFORCE = DriverFacts("535.183.01", (12, 2), (5,), ("NVIDIA GeForce RTX 4090",))


def test_new_driver_needs_no_forward_compatibility():
    v = forward_compat(NEW, IMAGE_ON_PATH)
    assert v.state == "not-needed" and v.ok and "580.95.05 (CUDA 13.0)" in v.message


def test_old_driver_on_a_data_center_gpu_runs_through_the_compat_libraries():
    v = forward_compat(OLD_DC, IMAGE_ON_PATH)
    assert v.state == "in-use" and v.ok
    assert "580.82.07" in v.message and "535.183.01 (CUDA 12.2)" in v.message and "/usr/local/cuda/compat" in v.message


def test_old_driver_on_a_data_center_gpu_with_the_libraries_off_the_path_says_how_to_enable_them():
    v = forward_compat(OLD_DC, IMAGE)
    assert v.state == "not-enabled" and not v.ok
    assert "LD_LIBRARY_PATH=/usr/local/cuda/compat:" in v.fix and "Container Toolkit" in v.fix


def test_old_driver_on_a_geforce_cannot_use_forward_compatibility():
    v = forward_compat(OLD_GEFORCE, IMAGE_ON_PATH)
    assert v.state == "consumer-gpu" and not v.ok
    assert "data-center GPUs only" in v.message and "GeForce RTX 4090" in v.message
    assert "R580" in v.fix and "cu126" in v.fix


def test_a_driver_branch_the_compat_package_does_not_support_names_the_branches():
    assert compat_branches(REQUIRE) == {535, 550, 570}
    v = forward_compat(DriverFacts("525.147.05", (12, 0), (2,), ("Tesla T4",)), IMAGE_ON_PATH)
    assert v.state == "driver-unsupported" and not v.ok
    assert "R535, R550, R570" in v.message and "R525" in v.message and "R535 or newer" in v.fix


def test_no_driver_or_a_cpu_build_is_not_applicable():
    assert forward_compat(DriverFacts(), IMAGE).state == "unknown"
    assert forward_compat(NEW, ImageCuda(torch_cuda=None)).state == "unknown"


# --- the same facts through preflight (what `effbench run` and `effbench doctor` print) ----------------
def gpu_state(driver: DriverFacts, image: ImageCuda, visible: int) -> preflight.GpuState:
    devices = tuple(preflight.GpuDevice(n, (8, 0), 80 * 2**30) for n in driver.names[:visible])
    return preflight.GpuState(
        torch_version="2.14.1", cuda_build="13.0", arch_list=("sm_80", "sm_90"), devices=devices,
        driver_version=driver.version, driver_cuda=driver.cuda, nvml_gpus=len(driver.names),
        driver_brands=driver.brands, driver_names=driver.names, image_cuda=image,
    )  # fmt: skip


def driver_findings(tmp_path: Path, gpu: preflight.GpuState) -> list[preflight.Finding]:
    cfg = RunConfig(dataset="synthetic", device="cuda", workers=0, output=tmp_path / "out", data_dir=tmp_path)
    return [f for f in preflight.check_gpus(cfg, gpu, {}, 0) if f.check == "driver"]


@pytest.mark.parametrize(
    ("driver", "image", "visible", "level", "text"),
    [
        (NEW, IMAGE_ON_PATH, 1, "ok", "supports CUDA 13.0"),
        (OLD_DC, IMAGE_ON_PATH, 1, "ok", "forward compatibility in use"),
        (OLD_GEFORCE, IMAGE_ON_PATH, 0, "error", "data-center GPUs only"),
    ],
)
def test_the_driver_check_for_the_three_hosts(tmp_path, driver, image, visible, level, text):
    (f,) = driver_findings(tmp_path, gpu_state(driver, image, visible))
    assert f.level == level and text in f.message


def test_the_geforce_refusal_is_one_line_with_the_fix(tmp_path):
    findings = driver_findings(tmp_path, gpu_state(OLD_GEFORCE, IMAGE_ON_PATH, 0))
    with pytest.raises(EffbenchError) as info:
        preflight.raise_on_errors(findings, environ={})
    line = str(info.value)
    assert "\n" not in line and "forward compatibility" in line and "fix: update the host driver to R580" in line


def test_doctor_shows_the_image_cuda_and_the_forward_compat_line():
    from effbench.cli.doctor import environment_summary

    rows = dict(environment_summary(gpu_state(OLD_DC, IMAGE_ON_PATH, 1)))
    assert rows["image CUDA"] == "torch CUDA 13.0, base CUDA 13.0.1, cuda-compat 580.82.07"
    assert rows["forward compat"].startswith("in use: the image's cuda-compat 580.82.07")
    assert rows["driver"] == "535.183.01 (CUDA 12.2)"


# --- reading the image ------------------------------------------------------------------------------
def compat_tree(tmp_path: Path, conf: bool) -> Path:
    root = tmp_path / "root"
    (root / "usr/local/cuda/compat").mkdir(parents=True)
    for name in ("libcuda.so", "libcuda.so.1", "libcuda.so.580.82.07", "libnvidia-ptxjitcompiler.so.580.82.07"):
        (root / "usr/local/cuda/compat" / name).touch()
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    if conf:  # what the toolkit's enable-cuda-compat hook writes when the host driver is older
        (root / "etc/ld.so.conf.d/00-compat-1234.conf").write_text("/usr/local/cuda/compat\n")
    return root


def test_the_compat_libraries_and_whether_the_loader_finds_them_are_read_from_the_image(tmp_path):
    env = {"CUDA_VERSION": "13.0.1", "NVIDIA_REQUIRE_CUDA": REQUIRE, "LD_LIBRARY_PATH": "/usr/local/nvidia/lib"}
    off = read_image_cuda(compat_tree(tmp_path / "a", conf=False), env, torch_cuda="13.0")
    assert (off.base_cuda, off.compat_driver, off.compat_on_path) == ("13.0.1", "580.82.07", False)
    assert read_image_cuda(compat_tree(tmp_path / "b", conf=True), env, torch_cuda="13.0").compat_on_path
    by_env = {**env, "LD_LIBRARY_PATH": "/usr/local/cuda/compat:/usr/local/nvidia/lib"}
    assert read_image_cuda(compat_tree(tmp_path / "c", conf=False), by_env, torch_cuda="13.0").compat_on_path
    bare = read_image_cuda(tmp_path / "debian", {}, torch_cuda="13.0")  # the Debian base: nothing of the kind
    assert (bare.base_cuda, bare.compat_driver, bare.compat_on_path) == (None, None, False)


def test_version_and_env_json_carry_the_same_facts(monkeypatch):
    from effbench.system import cuda_compat, identity

    monkeypatch.setattr(cuda_compat, "read_driver", lambda: OLD_DC)
    monkeypatch.setattr(cuda_compat, "read_image_cuda", lambda **_kw: IMAGE_ON_PATH)
    line = identity.cuda_line("13.0")
    assert line.startswith("driver 535.183.01 (CUDA 12.2), image CUDA 13.0.1, forward compatibility in use: ")
    record = cuda_compat.summary(OLD_DC, IMAGE_ON_PATH)
    assert record["driver_cuda"] == "12.2" and record["base_cuda"] == "13.0.1" and record["forward_compat"] == "in-use"
    assert record["compat_driver"] == "580.82.07" and record["compat_on_path"] is True

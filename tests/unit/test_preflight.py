"""Preflight checks on fake inputs: each check fails for its cause and names the fix for Docker,
compose and Apptainer; nothing here needs a GPU, NVML, a container or the network."""

from __future__ import annotations

import dataclasses
import io
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from effbench.cli import doctor as doctor_mod
from effbench.system import preflight
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.system import hardware
from effbench.system.hardware import CpuLoad
from effbench.system.preflight import Finding, GpuDevice, GpuState, Probes

A100 = GpuDevice("NVIDIA A100-SXM4-80GB", (8, 0))
V100 = GpuDevice("Tesla V100-SXM2-32GB", (7, 0))
CU130_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


def gpu_state(devices=(A100,), *, driver_cuda=(13, 0), nvml_gpus=None, cuda_build="13.0", **kw) -> GpuState:
    return GpuState(
        torch_version="2.14.1+cu130",
        cuda_build=cuda_build,
        arch_list=kw.pop("arch_list", CU130_ARCHS),
        devices=tuple(devices),
        driver_version=kw.pop("driver_version", "580.65.06"),
        driver_cuda=driver_cuda,
        nvml_gpus=len(devices) if nvml_gpus is None else nvml_gpus,
        **kw,
    )


NO_GPU = GpuState(torch_version="2.14.1+cu130", cuda_build="13.0", arch_list=CU130_ARCHS)


def probes(
    *, unwritable=(), shm=8 * 2**30, memlock=None, reachable=False, named=True, uid=4242, mountinfo=None
) -> Probes:
    """Probes with no side effects: paths under any of `unwritable` fail with EACCES."""
    bad = [Path(p) for p in unwritable]

    def writable(path: Path) -> str | None:
        path = Path(path)
        return "Permission denied" if any(path == b or b in path.parents for b in bad) else None

    return Probes(
        writable=writable,
        reachable=lambda url: reachable,
        memlock=lambda: memlock,
        shm_free=lambda path: shm,
        uid=lambda: uid,
        has_passwd_entry=lambda u: named,
        mountinfo=lambda: mountinfo,  # None: no mount table, so no guess (this machine may be a container)
    )


def cfg(tmp_path: Path, **kw) -> RunConfig:
    base = dict(dataset="synthetic", device="cpu", workers=0, output=tmp_path / "results", data_dir=tmp_path / "data")
    return RunConfig(**{**base, **kw})


ENV = {"HOME": "/home/me", "TMPDIR": "/tmp"}


def by_check(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def first_error(findings: list[Finding]) -> Finding:
    errs = preflight.errors(findings)
    assert errs, f"expected an error in {findings}"
    return errs[0]


# --- output -----------------------------------------------------------------------------------------
def test_all_ok_on_a_healthy_cpu_run(tmp_path):
    findings = preflight.run_checks(cfg(tmp_path), env=ENV, probes=probes())
    assert preflight.errors(findings) == []
    assert {f.check for f in findings} >= {"output", "home", "shm", "dataset"}
    assert all(f.level == "ok" for f in findings)


def test_unwritable_output_is_an_error_naming_uid_and_every_runtime_fix(tmp_path):
    c = cfg(tmp_path, output=Path("/results"))
    findings = preflight.run_checks(c, env=ENV, probes=probes(unwritable=["/results"], uid=1234))
    err = first_error(findings)
    assert err.check == "output" and err.option == "--output"
    assert "/results is not writable by uid 1234 (Permission denied)" in err.message
    for runtime in ("Docker:", "compose:", "Apptainer:"):
        assert runtime in err.fix
    assert '-v "$PWD/results:/results"' in err.fix and "--user" in err.fix


def test_raise_on_errors_gives_one_line_with_the_option_and_fix(tmp_path):
    findings = preflight.run_checks(cfg(tmp_path, output=Path("/ro")), env=ENV, probes=probes(unwritable=["/ro"]))
    with pytest.raises(EffbenchError) as info:
        preflight.raise_on_errors(findings, environ={}, stream=io.StringIO())
    assert info.value.option == "--output"
    assert "\n" not in str(info.value) and "; fix: Docker:" in str(info.value)


def test_real_write_probe_reports_a_file_and_accepts_a_missing_child(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert "is a file" in preflight.probe_writable(tmp_path / "afile")
    assert preflight.probe_writable(tmp_path / "not" / "yet") is None  # created later by the run
    assert not (tmp_path / "not").exists()  # the probe did not create it
    assert list(tmp_path.iterdir()) == [tmp_path / "afile"]  # and left no probe file behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_real_write_probe_sees_a_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert preflight.probe_writable(ro) is not None


# --- HOME and caches --------------------------------------------------------------------------------
def test_home_slash_of_a_nameless_uid_is_redirected_with_a_warning(tmp_path):
    # `docker run --user 1234`: no passwd entry, so HOME=/ which that uid cannot write
    only_root_unwritable = Probes(
        writable=lambda path: "Permission denied" if Path(path) == Path("/") else None,
        reachable=lambda url: False, memlock=lambda: None, shm_free=lambda p: 2**40,
        uid=lambda: 1234, has_passwd_entry=lambda u: False,
    )  # fmt: skip
    findings = preflight.run_checks(cfg(tmp_path), env={"HOME": "/", "TMPDIR": "/tmp"}, probes=only_root_unwritable)
    (home,) = by_check(findings, "home")
    assert home.level == "warning" and "HOME=/ is not writable by uid 1234" in home.message
    assert home.env == {"HOME": "/tmp/effbench-1234/home"}
    assert preflight.errors(findings) == []


def test_no_writable_home_nor_temp_dir_is_an_error(tmp_path):
    findings = preflight.run_checks(cfg(tmp_path), env={"HOME": "/", "TMPDIR": "/tmp"}, probes=probes(unwritable=["/"]))
    err = first_error(findings)
    assert err.check == "output"  # the output folder fails first, under / as well
    assert [f.level for f in by_check(findings, "home")] == ["error"]


def test_home_redirect_goes_to_a_private_temp_folder(tmp_path):
    env = {"HOME": "/nonexistent", "TMPDIR": str(tmp_path)}
    findings = preflight.run_checks(cfg(tmp_path), env=env, probes=probes(unwritable=["/nonexistent"], uid=os.getuid()))
    (home,) = by_check(findings, "home")
    assert home.level == "warning"
    assert home.env == {"HOME": str(tmp_path / f"effbench-{os.getuid()}" / "home")}
    assert "using" in home.message and "/nonexistent" in home.message
    environ: dict[str, str] = dict(env)
    stream = io.StringIO()
    preflight.raise_on_errors(findings, environ=environ, stream=stream)
    assert environ["HOME"] == home.env["HOME"]
    assert Path(environ["HOME"]).is_dir() and (Path(environ["HOME"]).stat().st_mode & 0o777) == 0o700
    assert "warning: home: HOME=/nonexistent" in stream.getvalue()


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the common default: a folder made without a mode of its own is 0755
    yield
    os.umask(old)


def test_every_folder_of_a_redirect_below_the_temp_dir_is_made_private(tmp_path, umask_022):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    env = {"HOME": "/home/me", "TMPDIR": str(shared), "TORCH_HOME": "/cache/torch"}
    findings = preflight.run_checks(cfg(tmp_path), env=env, probes=probes(unwritable=["/cache"], uid=os.getuid()))
    preflight.raise_on_errors(findings, environ=dict(env), stream=io.StringIO())
    scratch = shared / f"effbench-{os.getuid()}"
    for folder in (scratch, scratch / "cache", scratch / "cache" / "torch_home"):
        assert (folder.lstat().st_mode & 0o7777) == 0o700, folder


def _hostile_scratch(case: str, shared: Path, theirs: Path) -> str:
    """The temp dir as another local user could leave it before effbench runs; the words the refusal holds."""
    scratch = shared / f"effbench-{os.getuid()}"
    if case == "shared folder not sticky":
        shared.chmod(0o777)
        return "writable by others without the sticky bit"
    scratch.mkdir(mode=0o700)
    if case == "home a link":
        (scratch / "home").symlink_to(theirs)
        return f"{scratch / 'home'} is a link"
    scratch.chmod(0o777)
    if case == "scratch open to all":
        return f"{scratch} is writable by group or others (mode 0777)"
    os.chown(scratch, 4242, 4242)  # "another owner": as root, a folder another uid made
    return f"{scratch} belongs to uid 4242"


@pytest.mark.parametrize(
    "case",
    [
        "home a link",
        "scratch open to all",
        "shared folder not sticky",
        pytest.param(
            "scratch of another owner",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another uid"),
        ),
    ],
)
def test_a_scratch_home_another_user_could_take_over_is_refused_in_one_line(tmp_path, case):
    shared, theirs = tmp_path / "tmp", tmp_path / "theirs"
    shared.mkdir()
    theirs.mkdir()
    said = _hostile_scratch(case, shared, theirs)
    env = {"HOME": "/nonexistent", "TMPDIR": str(shared)}
    findings = preflight.run_checks(cfg(tmp_path), env=env, probes=probes(unwritable=["/nonexistent"], uid=os.getuid()))
    environ = dict(env)
    with pytest.raises(EffbenchError) as info:
        preflight.raise_on_errors(findings, environ=environ, stream=io.StringIO())
    assert info.value.option == "HOME" and said in info.value.message and "set TMPDIR" in info.value.message
    assert "\n" not in str(info.value)
    assert environ == env and list(theirs.iterdir()) == []  # HOME not moved, nothing made in their folder


def test_run_refuses_a_scratch_home_open_to_others_with_one_line(tmp_path, capsys, monkeypatch):
    from clitools import invoke

    shared = tmp_path / "tmp"
    (shared / f"effbench-{os.getuid()}").mkdir(parents=True)
    (shared / f"effbench-{os.getuid()}").chmod(0o777)
    monkeypatch.setenv("HOME", "/proc/effbench-no-home")  # unwritable, even for root
    monkeypatch.setenv("TMPDIR", str(shared))
    code, out, err = invoke(["run", "--smoke", "--output", tmp_path / "out"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: HOME: "), err
    assert "writable by group or others" in lines[0]
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_unwritable_cache_is_redirected_and_a_writable_one_kept(tmp_path):
    env = {"HOME": "/home/me", "TMPDIR": "/tmp", "TORCH_HOME": "/cache/torch", "XDG_CACHE_HOME": "/home/me/.cache"}
    findings = preflight.run_checks(cfg(tmp_path), env=env, probes=probes(unwritable=["/cache"], uid=77))
    caches = by_check(findings, "cache")
    redirected = [f for f in caches if f.level == "warning"]
    assert [f.env for f in redirected] == [{"TORCH_HOME": "/tmp/effbench-77/cache/torch_home"}]
    assert any(f.level == "ok" and "XDG_CACHE_HOME" in f.message for f in caches)
    assert preflight.errors(findings) == []


def test_read_only_torch_home_with_weights_is_kept(tmp_path):
    torch_home = tmp_path / "torch"
    (torch_home / "hub" / "checkpoints").mkdir(parents=True)
    (torch_home / "hub" / "checkpoints" / "efficientnet-b0.pth").write_bytes(b"x")
    env = {**ENV, "TORCH_HOME": str(torch_home)}
    (finding,) = by_check(preflight.run_checks(cfg(tmp_path), env=env, probes=probes(unwritable=[torch_home])), "cache")
    assert finding.level == "warning" and finding.env == {}
    assert "weights cached there are used" in finding.message


def test_uid_without_a_name_gets_one(tmp_path):
    findings = preflight.run_checks(cfg(tmp_path), env=ENV, probes=probes(named=False, uid=5555))
    (user,) = by_check(findings, "user")
    assert user.env == {"USER": "uid5555", "LOGNAME": "uid5555"}
    named_env = {**ENV, "USER": "me"}
    assert by_check(preflight.run_checks(cfg(tmp_path), env=named_env, probes=probes(named=False)), "user") == []


# --- /dev/shm ---------------------------------------------------------------------------------------
def test_shm_estimate_follows_the_formula():
    # 2 workers x prefetch 2 x batch 64 x 3 x 224^2 x 4 bytes x safety 2
    assert preflight.shm_needed_bytes(2, 64, 224) == 2 * 2 * 64 * 3 * 224 * 224 * 4 * 2
    assert preflight.shm_needed_bytes(2, 64, 224, processes=4) == 4 * preflight.shm_needed_bytes(2, 64, 224)


def test_small_shm_with_workers_is_an_error_with_the_size_to_ask_for(tmp_path):
    c = cfg(tmp_path, dataset="imagefolder", workers=2, batch_size=64, image_size=224)
    findings = preflight.run_checks(c, env=ENV, probes=probes(shm=64 * 2**20))
    err = first_error(findings)
    assert err.check == "shm" and err.option == "--workers"
    assert "64 MiB free" in err.message and "hang" in err.message
    assert (
        "--shm-size=1g" in err.fix and "SHM_SIZE=1gb" in err.fix and "Apptainer" in err.fix and "--workers 0" in err.fix
    )


def test_shm_is_not_checked_without_workers_or_for_synthetic_data(tmp_path):
    c = cfg(tmp_path, dataset="imagefolder", workers=0, batch_size=512, image_size=456)
    (shm,) = by_check(preflight.run_checks(c, env=ENV, probes=probes(shm=1)), "shm")
    assert shm.level == "ok" and "--workers 0" in shm.message
    synthetic = cfg(tmp_path, dataset="synthetic", workers=8, batch_size=512, image_size=456)
    (shm,) = by_check(preflight.run_checks(synthetic, env=ENV, probes=probes(shm=1)), "shm")
    assert shm.level == "ok" and "synthetic" in shm.message


def test_shm_counts_one_set_of_workers_per_gpu_process(tmp_path):
    c = cfg(tmp_path, dataset="imagefolder", device="cuda", gpus=4, workers=4, batch_size=64, image_size=224)
    need_one = preflight.shm_needed_bytes(4, 64, 224)
    gpu = gpu_state([A100] * 4)
    ok_for_one = preflight.run_checks(c, env=ENV, probes=probes(shm=need_one + 1), gpu=gpu)
    assert first_error(ok_for_one).check == "shm"  # 4 processes need 4x
    assert "x 4 processes" in first_error(ok_for_one).message


def test_nproc_on_a_gpu_machine_sizes_shm_and_memlock_for_its_cpu_processes(tmp_path):
    # GPU truth 3.10: `--nproc 2` runs two CPU processes (launch/plan.py) even with 8 GPUs visible; preflight
    # sized /dev/shm for 8 processes' workers (a false "shm too small" on a DGX) and checked NCCL's memlock
    c = cfg(tmp_path, dataset="imagefolder", nproc=2, workers=4, batch_size=64, image_size=224)
    need_two = 2 * preflight.shm_needed_bytes(4, 64, 224)
    dgx = gpu_state([A100] * 8)
    findings = preflight.run_checks(c, env=ENV, probes=probes(shm=need_two + 1, memlock=8 * 2**20), gpu=dgx)
    assert by_check(findings, "shm")[0].level == "ok" and by_check(findings, "memlock") == []
    assert preflight.local_processes(c, 0, dgx) == 2
    (shm,) = by_check(preflight.run_checks(c, env=ENV, probes=probes(shm=need_two - 1), gpu=dgx), "shm")
    assert shm.level == "error" and "x 2 processes" in shm.message


# --- GPUs ---------------------------------------------------------------------------------------------
def test_gpus_requested_but_none_visible(tmp_path):
    c = cfg(tmp_path, device="cuda")
    err = first_error(preflight.run_checks(c, env=ENV, probes=probes(), gpu=NO_GPU))
    assert err.check == "gpu" and err.option == "--device"
    assert "--gpus all" in err.fix and "--nv" in err.fix and "compose" in err.fix


def test_capabilities_without_compute_are_named(tmp_path):
    env = {**ENV, "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    err = first_error(preflight.run_checks(cfg(tmp_path, device="cuda"), env=env, probes=probes(), gpu=NO_GPU))
    assert "NVIDIA_DRIVER_CAPABILITIES=utility lacks compute" in err.message
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in err.fix
    env_ok = {**ENV, "NVIDIA_DRIVER_CAPABILITIES": "all"}
    err_ok = first_error(preflight.run_checks(cfg(tmp_path, device="cuda"), env=env_ok, probes=probes(), gpu=NO_GPU))
    assert "lacks compute" not in err_ok.message


def test_auto_device_without_gpu_is_fine(tmp_path):
    (gpu,) = by_check(preflight.run_checks(cfg(tmp_path, device="auto"), env=ENV, probes=probes(), gpu=NO_GPU), "gpu")
    assert gpu.level == "ok" and "CPU" in gpu.message


def test_old_driver_for_the_cuda_build_is_an_error_with_the_cu126_build(tmp_path):
    gpu = gpu_state([], driver_cuda=(12, 4), nvml_gpus=1, driver_version="550.54.15")
    err = first_error(preflight.run_checks(cfg(tmp_path, device="cuda"), env=ENV, probes=probes(), gpu=gpu))
    assert err.check == "driver"
    assert "supports CUDA up to 12.4" in err.message and "built for CUDA 13.0" in err.message
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126" in err.fix
    # only one error for the one cause: no second "no GPU visible"
    assert (
        len(preflight.errors(preflight.run_checks(cfg(tmp_path, device="cuda"), env=ENV, probes=probes(), gpu=gpu)))
        == 1
    )


def test_same_major_older_driver_is_only_a_warning(tmp_path):
    gpu = gpu_state([A100], driver_cuda=(12, 2), cuda_build="12.6")
    findings = preflight.run_checks(cfg(tmp_path, device="cuda"), env=ENV, probes=probes(), gpu=gpu)
    (driver,) = by_check(findings, "driver")
    assert driver.level == "warning" and "minor-version compatibility" in driver.message
    assert preflight.errors(findings) == []


def test_gpu_architecture_missing_from_the_build(tmp_path):
    findings = preflight.run_checks(cfg(tmp_path, device="cuda"), env=ENV, probes=probes(), gpu=gpu_state([V100]))
    err = first_error(findings)
    assert err.check == "arch" and "sm_70" in err.message and "sm_75" in err.message
    assert "cu126" in err.fix


@pytest.mark.parametrize(
    ("capability", "archs", "ok"),
    [
        ((8, 0), ("sm_80",), True),
        ((8, 6), ("sm_80",), True),  # same major, newer minor: SASS is binary compatible
        ((8, 0), ("sm_86",), False),
        ((9, 0), ("sm_80",), False),  # newer major needs PTX
        ((9, 0), ("sm_80", "compute_80"), True),
        ((7, 0), CU130_ARCHS, False),
        ((12, 0), CU130_ARCHS, True),
        ((9, 0), ("sm_90a",), True),
        ((10, 0), ("sm_90a",), False),
    ],
)
def test_arch_compatibility_rules(capability, archs, ok):
    assert preflight.arch_supported(capability, archs) is ok


def test_fewer_gpus_than_requested(tmp_path):
    c = cfg(tmp_path, device="auto", gpus=4)
    err = first_error(preflight.run_checks(c, env=ENV, probes=probes(), gpu=gpu_state([A100, A100])))
    assert err.check == "gpu" and err.option == "--gpus"
    assert "--gpus 4 asked, but only 2" in err.message and "GPU_COUNT" in err.fix


def test_gpus_requested_argument_counts_like_the_config(tmp_path):
    c = cfg(tmp_path, device="auto")
    err = first_error(preflight.run_checks(c, gpus_requested=8, env=ENV, probes=probes(), gpu=gpu_state([A100])))
    assert "--gpus 8 asked, but only 1" in err.message


def test_low_memlock_warns_for_multi_gpu_only(tmp_path):
    gpu = gpu_state([A100, A100])
    multi = preflight.run_checks(cfg(tmp_path, device="cuda"), env=ENV, probes=probes(memlock=8 * 2**20), gpu=gpu)
    (mem,) = by_check(multi, "memlock")
    assert mem.level == "warning" and "8 MiB" in mem.message and "--ulimit memlock=-1:-1" in mem.fix
    assert preflight.errors(multi) == []
    single = preflight.run_checks(
        cfg(tmp_path, device="cuda", gpus=1), env=ENV, probes=probes(memlock=8 * 2**20), gpu=gpu_state([A100])
    )
    assert by_check(single, "memlock")[0].level == "ok"
    stream = io.StringIO()
    preflight.raise_on_errors(multi, environ={}, stream=stream)
    assert stream.getvalue().startswith("warning: memlock:")


def test_cpu_runs_never_probe_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "probe_gpus", lambda: pytest.fail("probed GPUs for --device cpu"))
    findings = preflight.run_checks(cfg(tmp_path, device="cpu"), env=ENV, probes=probes())
    assert by_check(findings, "gpu") == []


def test_probe_gpus_does_not_crash_without_gpu_or_nvml():
    state = preflight.probe_gpus()
    assert state.torch_version is not None
    assert state.visible >= 0


class _FakeNvml:
    """pynvml's calls that preflight makes, with pynvml's return types (bytes from older bindings)."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail

    def _call(self, name: str, value):
        if name == self.fail:
            raise RuntimeError(f"{name}: NVML_ERROR_UNKNOWN")
        return value

    def nvmlSystemGetDriverVersion(self):
        return self._call("driver", b"535.183.01")

    def nvmlDeviceGetCount(self):
        return self._call("count", 2)

    def nvmlSystemGetCudaDriverVersion(self):
        return self._call("cuda", 12020)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetBrand(self, h):
        return self._call("brand", [2, 12][h])

    def nvmlDeviceGetName(self, h):
        return ["NVIDIA A100-SXM4-80GB", b"NVIDIA GeForce RTX 4090"][h]


@pytest.mark.parametrize("fail", [None, "driver", "count", "cuda", "brand"])
def test_nvml_state_reads_every_field_or_none(monkeypatch, fail):
    """All of NVML's fields, or none when any call fails: a driver version without its CUDA would judge
    the driver on half the facts."""
    from contextlib import contextmanager

    from effbench.system import nvml

    @contextmanager
    def session():
        yield _FakeNvml(fail)

    monkeypatch.setattr(nvml, "nvml_session", session)
    state = preflight._nvml_state()
    if fail is not None:
        assert state == {}
        return
    assert state == {
        "driver_version": "535.183.01",
        "nvml_gpus": 2,
        "driver_cuda": (12, 2),
        "driver_brands": (2, 12),
        "driver_names": ("NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"),
    }
    assert GpuState(**state).driver_cuda == (12, 2)


# --- dataset -------------------------------------------------------------------------------------------
def fake_root(tmp_path: Path, runtime: str) -> Path:
    """A file tree with the marker each runtime leaves (hardware.container_runtime reads them)."""
    root = tmp_path / f"root-{runtime}"
    marker = {"docker": ".dockerenv", "podman": "run/.containerenv", "apptainer": ".singularity.d"}.get(runtime)
    if marker:
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).touch()
    root.mkdir(exist_ok=True)
    return root


@pytest.mark.parametrize(
    ("runtime", "present", "absent"),
    [
        ("docker", ["docker run -v /path/to/datasets:/data:ro", "DATA_DIR="], ["--bind", "EFFBENCH_DATA"]),
        ("podman", ["podman run -v /path/to/datasets:/data:ro"], ["--bind"]),
        ("apptainer", ["--bind /path/to/datasets:/data"], ["-v ", "DATA_DIR="]),
        ("none", ["--data-dir /path/to/datasets", "EFFBENCH_DATA"], ["-v ", "--bind", "Docker"]),
    ],
)
def test_missing_dataset_fix_is_for_where_the_user_is(tmp_path, runtime, present, absent):
    c = cfg(tmp_path, dataset="cifar100")
    err = first_error(preflight.run_checks(c, env=ENV, root=fake_root(tmp_path, runtime), probes=probes()))
    assert err.check == "dataset" and err.option == "--data-dir"
    assert str(tmp_path / "data" / "cifar-100-python") in err.message
    assert "--dataset synthetic" in err.fix and "cifar-100-python/" in err.fix
    for text in present:
        assert text in err.fix, (text, err.fix)
    for text in absent:
        assert text not in err.fix, (text, err.fix)


def test_data_dir_at_the_dataset_folder_itself_hints_at_its_parent(tmp_path):
    own = tmp_path / "datasets" / "cifar-100-python"
    own.mkdir(parents=True)
    for name in ("train", "test", "meta"):
        (own / name).write_bytes(b"x")
    c = cfg(tmp_path, dataset="cifar100", data_dir=own)
    err = first_error(preflight.run_checks(c, env=ENV, root=fake_root(tmp_path, "none"), probes=probes()))
    assert f"point it at its parent, --data-dir {tmp_path / 'datasets'}" in err.message
    # pointed at the parent, the same files pass
    ok = preflight.run_checks(cfg(tmp_path, dataset="cifar100", data_dir=own.parent), env=ENV, probes=probes())
    assert preflight.errors(ok) == []


def test_missing_weights_file_is_an_error_before_torch(tmp_path):
    err = first_error(preflight.run_checks(cfg(tmp_path, weights=str(tmp_path / "nope.pt")), env=ENV, probes=probes()))
    assert err.option == "--weights" and "nope.pt is not a file" in err.message
    (tmp_path / "w.pt").write_bytes(b"x")
    ok = preflight.run_checks(cfg(tmp_path, weights=str(tmp_path / "w.pt")), env=ENV, probes=probes())
    assert by_check(ok, "weights")[0].level == "ok"


def test_a_failed_torch_free_check_skips_the_gpu_probe(tmp_path, monkeypatch):
    def boom():
        raise AssertionError("probe_gpus (imports torch) must not run when a torch-free check failed")

    monkeypatch.setattr(preflight, "probe_gpus", boom)
    c = cfg(tmp_path, dataset="cifar10", device="auto")
    assert first_error(preflight.run_checks(c, env=ENV, probes=probes())).check == "dataset"


def test_missing_dataset_is_reported_without_importing_torch(tmp_path):
    """A fresh interpreter: `effbench run` on a missing dataset fails with exit 2 and torch never loads."""
    code = (
        "import sys; from effbench.cli.app import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit as e:\n    print('torch' in sys.modules, e.code)\n"
    )
    argv = ["run", "--dataset", "cifar10", "--data-dir", str(tmp_path / "none"), "--output", str(tmp_path / "r")]
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})  # fmt: skip
    assert out.stdout.split() == ["False", "2"], (out.stdout, out.stderr)
    assert "error: --data-dir: CIFAR-10 is not at" in out.stderr


def test_download_without_network_is_an_error_and_with_network_ok(tmp_path):
    c = cfg(tmp_path, dataset="cifar10", download=True)
    err = first_error(preflight.run_checks(c, env=ENV, probes=probes(reachable=False)))
    assert "cannot be reached" in err.message and "cifar-10-python.tar.gz" in err.message
    ok = preflight.run_checks(c, env=ENV, probes=probes(reachable=True))
    assert preflight.errors(ok) == []


def test_download_uses_the_mirror(tmp_path):
    seen = []
    p = Probes(writable=lambda path: None, reachable=lambda url: seen.append(url) or True, shm_free=lambda p: 2**40,
               memlock=lambda: None, uid=lambda: 1, has_passwd_entry=lambda u: True)  # fmt: skip
    env = {**ENV, "EFFBENCH_MIRROR": "http://mirror.local/datasets/"}
    preflight.run_checks(cfg(tmp_path, dataset="food101", download=True), env=env, probes=p)
    assert seen == ["http://mirror.local/datasets/food-101.tar.gz"]


def test_present_dataset_is_ok_and_an_incomplete_one_names_the_missing_file(tmp_path):
    folder = tmp_path / "data" / "cifar-100-python"
    folder.mkdir(parents=True)
    (folder / "train").write_bytes(b"")
    (folder / "meta").write_bytes(b"")
    err = first_error(preflight.run_checks(cfg(tmp_path, dataset="cifar100"), env=ENV, probes=probes()))
    assert f"is not at {folder / 'test'}" in err.message
    (folder / "test").write_bytes(b"")
    findings = preflight.run_checks(cfg(tmp_path, dataset="cifar100"), env=ENV, probes=probes())
    assert by_check(findings, "dataset")[0].level == "ok"


def test_image_folder_must_exist(tmp_path):
    err = first_error(preflight.run_checks(cfg(tmp_path, dataset="imagefolder"), env=ENV, probes=probes()))
    assert err.check == "dataset" and "missing or empty" in err.message


# --- doctor --------------------------------------------------------------------------------------------
def doctor_app() -> typer.Typer:
    app = typer.Typer()
    app.command()(doctor_mod.doctor)

    @app.callback()
    def _root() -> None:  # keep `doctor` as a subcommand
        pass

    return app


IDLE = CpuLoad(load_1m=0.4, steal_pct=0.0, machine_cores=2, allowed_cores=2.0)
BUSY = CpuLoad(load_1m=4.6, steal_pct=1.0, machine_cores=2, allowed_cores=2.0)


@pytest.fixture
def idle(monkeypatch):
    """doctor reads the load of this (shared) machine: the tests say what it is."""
    monkeypatch.setattr(hardware, "read_cpu_load", lambda: IDLE)


def test_doctor_exits_0_and_prints_a_table(tmp_path, monkeypatch, idle):
    monkeypatch.setattr(preflight, "probe_gpus", lambda: NO_GPU)
    result = CliRunner().invoke(doctor_app(), ["doctor", "--smoke", "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "check" in result.output and "status" in result.output and "fix" in result.output
    assert "2.14.1+cu130" in result.output and "all checks passed" in result.output


def test_doctor_on_a_busy_machine_names_the_load_and_the_fix_instead_of_all_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "probe_gpus", lambda: NO_GPU)
    monkeypatch.setattr(hardware, "read_cpu_load", lambda: BUSY)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    result = CliRunner().invoke(doctor_app(), ["doctor", "--smoke", "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output  # a run would work: nothing failed
    assert "all checks passed" not in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("doctor: no check failed, but figures measured now would be wrong: load average 4.60")
    assert "fix: OMP_WAIT_POLICY=PASSIVE" in last
    assert any(line.startswith("load") and "WARN" in line for line in result.output.splitlines())
    # with the policy already passive, the fix left is to wait or reserve cores
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    result = CliRunner().invoke(doctor_app(), ["doctor", "--smoke", "--output", str(tmp_path / "out")])
    last = result.output.strip().splitlines()[-1]
    assert "OMP_WAIT_POLICY" not in last and "fix: wait until the load is under 2" in last


def test_doctor_exits_2_on_an_error_and_shows_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "probe_gpus", lambda: NO_GPU)
    result = CliRunner().invoke(doctor_app(), ["doctor", "--dataset", "cifar100", "--data-dir", str(tmp_path / "none"),
                                               "--workers", "0", "--output", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 2
    assert "FAIL" in result.output and "--dataset synthetic" in result.output
    assert "would stop at: dataset" in result.output


def test_doctor_passes_the_largest_gpu_count(tmp_path, monkeypatch, idle):
    seen = {}

    def fake_checks(c, **kw):
        seen.update(kw, cfg=c)
        return [Finding("ok", "output", "fine")]

    monkeypatch.setattr(preflight, "probe_gpus", lambda: NO_GPU)
    monkeypatch.setattr(preflight, "run_checks", fake_checks)
    result = CliRunner().invoke(doctor_app(), ["doctor", "--gpus", "1,2,8", "--workers", "3", "--batch-size", "32"])
    assert result.exit_code == 0, result.output
    assert seen["gpus_requested"] == 8 and seen["cfg"].gpus == 8
    assert (seen["cfg"].workers, seen["cfg"].batch_size) == (3, 32)


def _error_scenarios(tmp_path):
    """(config kwargs, run_checks kwargs) pairs that each end in at least one error."""
    caps = {**ENV, "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    hidden = {**ENV, "CUDA_VISIBLE_DEVICES": ""}
    return [
        (dict(output=Path("/ro")), dict(probes=probes(unwritable=["/ro"]))),
        (dict(output=Path("/ro")), dict(env={"HOME": "/", "TMPDIR": "/tmp"}, probes=probes(unwritable=["/"]))),
        (dict(dataset="imagefolder", workers=4, batch_size=128, image_size=224), dict(probes=probes(shm=2**26))),
        (dict(device="cuda"), dict(gpu=NO_GPU)),
        (dict(device="cuda"), dict(gpu=NO_GPU, env=caps)),
        (dict(device="cuda"), dict(gpu=NO_GPU, env=hidden)),
        (dict(device="cuda"), dict(gpu=replace_cuda_build(NO_GPU, None))),
        (dict(device="cuda"), dict(gpu=gpu_state([], driver_cuda=(12, 4), nvml_gpus=1))),
        (dict(device="cuda"), dict(gpu=gpu_state([V100]))),
        (dict(device="auto", gpus=4), dict(gpu=gpu_state([A100]))),
        (dict(dataset="cifar100"), {}),
        (dict(dataset="cifar100", download=True), dict(probes=probes(reachable=False))),
        (
            dict(dataset="cifar100", download=True, data_dir=Path("/nowhere/data")),
            dict(probes=probes(reachable=True, unwritable=["/nowhere"])),
        ),
    ]


def replace_cuda_build(state, build):
    import dataclasses

    return dataclasses.replace(state, cuda_build=build)


def test_every_error_names_the_fix_for_docker_compose_and_apptainer(tmp_path):
    for cfg_kw, kw in _error_scenarios(tmp_path):
        kw = {"env": ENV, "probes": probes(), **kw}
        errs = preflight.errors(preflight.run_checks(cfg(tmp_path, **cfg_kw), **kw))
        assert errs, (cfg_kw, kw)
        for e in errs:
            fix = e.fix.lower()
            assert "\n" not in e.message + e.fix
            if e.check == "dataset" and "would be downloaded" not in e.message:
                continue  # for where the user is: test_missing_dataset_fix_is_for_where_the_user_is
            assert "docker" in fix and "compose" in fix and "apptainer" in fix, (e.check, e.message, e.fix)
            assert "\n" not in e.message + e.fix


def test_probe_reports_torch_s_warning_when_cuda_is_unusable(monkeypatch):
    import warnings

    import torch

    def unusable() -> bool:
        warnings.warn(
            "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).", stacklevel=1
        )
        return False

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", unusable)
    state = preflight.probe_gpus()
    assert state.visible == 0
    assert state.cuda_error is not None and "driver on your system is too old" in state.cuda_error


# --- output folder that dies with the container (mountinfo) -----------------------------------------
# Lines in proc(5)'s mountinfo format, as Docker 27 / podman 4 write them for each kind of /results.
HEX = "3f" * 32
ROOT_OVERLAY = "1200 1100 0:50 / / rw,relatime master:9 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A"
MOUNTINFO = {
    "anonymous": f"{ROOT_OVERLAY}\n1234 1200 8:1 /var/lib/docker/volumes/{HEX}/_data /results rw,relatime master:1 - ext4 /dev/sda1 rw",
    "podman-anonymous": f"{ROOT_OVERLAY}\n77 1200 253:0 /containers/storage/volumes/{HEX}/_data /results rw - xfs /dev/mapper/root rw",
    "bind": f"{ROOT_OVERLAY}\n1235 1200 8:1 /home/me/my\\040results /results rw,relatime - ext4 /dev/sda1 rw",
    "named": f"{ROOT_OVERLAY}\n1236 1200 8:1 /var/lib/docker/volumes/effbench-results/_data /results rw - ext4 /dev/sda1 rw",
    "none": ROOT_OVERLAY,
    "tmpfs": f"{ROOT_OVERLAY}\n1237 1200 0:60 / /results rw,nosuid - tmpfs tmpfs rw,size=65536k",
}  # fmt: skip


@pytest.mark.parametrize(
    ("table", "lost"),
    [
        ("anonymous", True),
        ("podman-anonymous", True),
        ("none", True),
        ("tmpfs", True),
        ("bind", False),
        ("named", False),
    ],  # fmt: skip
)
def test_output_lost_with_the_container_is_read_from_mountinfo(table, lost):
    from effbench.system.mounts import lost_with_container

    assert (lost_with_container("/results/run-1", MOUNTINFO[table]) is not None) is lost
    assert (lost_with_container("/results", MOUNTINFO[table]) is not None) is lost
    assert lost_with_container("/elsewhere", MOUNTINFO["bind"]) is not None  # only /results is mounted


def test_mountinfo_parsing_unescapes_and_prefers_the_longest_and_latest_mount():
    from effbench.system.mounts import mount_of, parse_mountinfo

    mounts = parse_mountinfo(MOUNTINFO["bind"] + "\n1300 1235 0:70 / /results rw - tmpfs tmpfs rw\nbroken line")
    assert [m.mount_point for m in mounts] == ["/", "/results", "/results"]
    assert mounts[1].root == "/home/me/my results"
    assert mount_of("/results/x", mounts).fstype == "tmpfs"  # mounted over the bind mount
    assert mount_of("/resultsx", mounts).mount_point == "/"  # a prefix of the name is not a parent


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_output_not_on_a_host_mount_warns_with_the_v_to_add(tmp_path, runtime):
    root = fake_root(tmp_path, runtime)
    c = cfg(tmp_path, output=Path("/results"))
    (w,) = by_check(
        preflight.run_checks(c, env=ENV, root=root, probes=probes(mountinfo=MOUNTINFO["anonymous"])), "output-mount"
    )
    assert w.level == "warning" and "anonymous volume" in w.message and "lost" in w.message
    assert '-v "$PWD/results:/results"' in w.fix and f"{runtime} run" in w.fix
    (ok,) = by_check(
        preflight.run_checks(c, env=ENV, root=root, probes=probes(mountinfo=MOUNTINFO["bind"])), "output-mount"
    )
    assert ok.level == "ok"


@pytest.mark.parametrize("given", ["results", "./results/../results", "ABS"])
def test_the_output_mount_fix_names_the_container_side_as_an_absolute_path(tmp_path, monkeypatch, given):
    # docker run -v refuses a relative container side ("invalid volume specification"): `--output results`
    # must give -v "$PWD/results:<cwd>/results", the folder the run writes to.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    output = work / "results" if given == "ABS" else Path(given)
    findings = preflight.run_checks(
        cfg(tmp_path, output=output), env=ENV, root=fake_root(tmp_path, "docker"),
        probes=probes(mountinfo=MOUNTINFO["none"]),
    )  # fmt: skip
    (w,) = by_check(findings, "output-mount")
    expected = f"{work}/results"  # written apart from the code: the cwd joined by hand
    assert w.level == "warning" and f'-v "$PWD/results:{expected}" ' in w.fix
    assert w.message.startswith(f"{expected} is the container's own filesystem")


def test_no_output_mount_check_outside_docker_and_podman(tmp_path):
    for runtime in ("none", "apptainer"):
        findings = preflight.run_checks(
            cfg(tmp_path), env=ENV, root=fake_root(tmp_path, runtime), probes=probes(mountinfo=MOUNTINFO["none"])
        )
        assert by_check(findings, "output-mount") == []


def test_the_output_mount_warning_is_printed_before_the_run_on_stderr(tmp_path):
    findings = preflight.run_checks(
        cfg(tmp_path, output=Path("/results")), env=ENV, root=fake_root(tmp_path, "docker"),
        probes=probes(mountinfo=MOUNTINFO["none"], unwritable=[]),
    )  # fmt: skip
    err = io.StringIO()
    preflight.raise_on_errors(findings, environ={}, stream=err)
    assert err.getvalue().startswith("warning: output-mount: /results is the container's own filesystem")
    assert '-v "$PWD/results:/results"' in err.getvalue()


def test_a_command_of_many_runs_prints_each_preflight_warning_once(tmp_path):
    """A sweep, a scaling series and the selftest pass one `said` set to every run's preflight: the
    output-mount warning was printed once per cell (9 times in one CPU selftest)."""
    findings = preflight.run_checks(
        cfg(tmp_path, output=Path("/results")), env=ENV, root=fake_root(tmp_path, "docker"),
        probes=probes(mountinfo=MOUNTINFO["none"], unwritable=[]),
    )  # fmt: skip
    err, said = io.StringIO(), set()
    for _run in range(3):
        preflight.raise_on_errors(findings, environ={}, stream=err, said=said)
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: output-mount: /results") and said == set(lines)
    alone = io.StringIO()
    preflight.raise_on_errors(findings, environ={}, stream=alone)  # one run on its own: always said
    preflight.raise_on_errors(findings, environ={}, stream=alone)
    assert alone.getvalue().splitlines() == lines * 2


def test_a_mount_point_named_in_bytes_that_are_not_utf8_is_read_not_a_traceback(tmp_path, monkeypatch):
    # Linux names are bytes: a host folder named in latin-1 (b"r\xe9sultats") bind-mounted anywhere puts that
    # byte in /proc/self/mountinfo, which read_text() refused (UnicodeDecodeError: a traceback before every run).
    from effbench.system import mounts

    table = tmp_path / "mountinfo"
    table.write_bytes(
        ROOT_OVERLAY.encode() + b"\n1240 1200 8:1 /home/me/r\xe9sultats /data/r\xe9sultats rw - ext4 /dev/sda1 rw"
    )
    monkeypatch.setenv(mounts.MOUNTINFO_ENV, str(table))
    text = mounts.read_mountinfo()
    assert text is not None
    # the mount point decodes as Python names that folder (os.fsdecode), so a path under it still matches it
    inside = os.fsdecode(b"/data/r\xe9sultats/run-1")
    assert mounts.mount_of(inside, mounts.parse_mountinfo(text)).fstype == "ext4"
    assert mounts.lost_with_container(inside, text) is None and mounts.lost_with_container("/results", text)


# --- load (issue 34): a machine busier than its cores ruins the figures, not the run -------------------
@pytest.mark.parametrize(
    "load_1m, steal, cores, busy",
    [(0.3, 0.0, 2, False), (1.6, 0.0, 2, False), (2.0, 0.0, 2, False), (2.01, 0.0, 2, True), (4.6, None, 2, True),
     (12.0, 0.0, 16, False), (0.5, 9.9, 2, False), (0.5, 10.0, 2, True), (None, None, 2, False)],
)  # fmt: skip
def test_load_over_the_machines_cores_or_steal_is_a_warning(load_1m, steal, cores, busy):
    # the measured bars (issue 34): load 1.3-1.6 on 2 cores ran at full speed, 3-6 ten times slower
    load = CpuLoad(load_1m, steal, cores, allowed_cores=float(cores))
    f = preflight.check_load(load, device_type="cpu", env={})
    assert f.check == "load" and f.level == ("warning" if busy else "ok")
    assert (preflight.cpu_busy(load) is not None) == busy
    if busy:
        assert "so a run now measures them too" in f.message and "2 allowed to a run" in f.message
        assert f.fix.startswith("OMP_WAIT_POLICY=PASSIVE") and "taskset" in f.fix
    else:
        assert f.fix == ""


def test_the_load_message_says_what_was_measured():
    f = preflight.check_load(CpuLoad(3.25, 14.0, 2, 1.5), device_type="cpu", env={"OMP_WAIT_POLICY": "active"})
    assert f.message == (
        "load average 3.25 over the last minute on 2 cores and the hypervisor gave 14% of the CPU time to other VMs "
        "(steal) (1.5 allowed to a run): other processes want every core, so a run now measures them too"
    )
    ok = preflight.check_load(IDLE, device_type="cpu", env={})
    assert ok.message == "load average 0.40 on 2 cores (2 allowed to a run), steal 0%"


@pytest.mark.parametrize(
    "device, policy, offered",
    [("cpu", None, True), ("cpu", "ACTIVE", True), ("cpu", "PASSIVE", False), ("cpu", "passive", False),
     ("cuda", None, False)],
)  # fmt: skip
def test_the_wait_policy_is_offered_to_cpu_runs_that_do_not_set_it(device, policy, offered):
    env = {} if policy is None else {"OMP_WAIT_POLICY": policy}
    f = preflight.check_load(BUSY, device_type=device, env=env)
    assert f.level == "warning" and ("OMP_WAIT_POLICY=PASSIVE" in f.fix) == offered
    assert "wait until the load is under 2, or reserve cores" in f.fix


# --- threads (issue 46): more processes x threads than cores, said before the run ----------------------------------
@pytest.mark.parametrize(
    "processes, threads, cores, pinned, option",
    [(8, 1, 2.0, False, "--nproc"), (3, 1, 2.0, False, "--nproc"), (2, 1, 2.0, False, None), (1, 2, 2.0, False, None),
     (1, 4, 2.0, True, "OMP_NUM_THREADS"), (2, 2, 2.0, True, "OMP_NUM_THREADS"), (4, 2, 2.0, True, "--nproc"),
     (1, 2, 1.5, False, None), (2, 1, 1.5, False, None), (3, 1, 2.5, False, None), (4, 1, 2.5, False, "--nproc"),
     (16, 4, 64.0, False, None), (1, 2, 1.0, False, None)],
)  # fmt: skip
def test_more_threads_than_cores_is_a_warning_naming_what_set_them(processes, threads, cores, pinned, option):
    found = preflight.check_threads(processes, threads, cores, pinned=pinned)
    if option is None:
        assert found == []
        return
    (f,) = found
    assert (f.level, f.check, f.option) == ("warning", "threads", option)
    assert f.message.startswith(option) and f"= {processes * threads} threads on {cores:g} CPU cores" in f.message
    assert f.fix.startswith(f"{option} {math.ceil(cores)} or fewer" if option == "--nproc" else "OMP_NUM_THREADS=")


def test_nproc_8_on_2_cores_is_said_with_the_plans_threads_and_only_for_a_cpu_run(tmp_path):
    two = dataclasses.replace(probes(), usable_cores=lambda: 2, allowed_cores=lambda: 2.0)
    found = by_check(preflight.run_checks(cfg(tmp_path, nproc=8), env=ENV, probes=two), "threads")
    assert [f.message for f in found] == [
        "--nproc 8 runs 8 process(es) x 1 thread(s) = 8 threads on 2 CPU cores: they take turns on the cores, so the "
        "figures measure that"
    ]
    assert found[0].fix == "--nproc 2 or fewer (each process gets the cores / N threads)"
    assert by_check(preflight.run_checks(cfg(tmp_path, nproc=2), env=ENV, probes=two), "threads") == []
    pinned = by_check(preflight.run_checks(cfg(tmp_path), env={**ENV, "OMP_NUM_THREADS": "6"}, probes=two), "threads")
    assert [f.option for f in pinned] == ["OMP_NUM_THREADS"]
    assert pinned[0].fix.startswith("OMP_NUM_THREADS=2 or unset it")
    # a GPU run's threads mostly wait on the GPU: not this check's
    gpu_run = cfg(tmp_path, device="cuda")
    found = preflight.run_checks(gpu_run, env={**ENV, "OMP_NUM_THREADS": "6"}, probes=two, gpu=gpu_state())
    assert by_check(found, "threads") == []
    # an OMP_NUM_THREADS that is no number is the plan's one-line error, not this check's
    assert (
        by_check(preflight.run_checks(cfg(tmp_path), env={**ENV, "OMP_NUM_THREADS": "x"}, probes=two), "threads") == []
    )

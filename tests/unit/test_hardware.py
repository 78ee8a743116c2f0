"""Container and cgroup detection on fake trees; the env snapshot's keys."""

from __future__ import annotations

import os
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest

from effbench.system import hardware
from effbench.system.hardware import (
    container_runtime,
    cpu_quota_cores,
    env_snapshot,
    memory_limit_gib,
    parse_cpu_max,
    relevant_env_vars,
    shm_size_gib,
)


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def v2_tree(root: Path, cpu_max: str | None = None, memory_max: str | None = None) -> Path:
    write(root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
    if cpu_max is not None:
        write(root, "sys/fs/cgroup/cpu.max", cpu_max + "\n")
    if memory_max is not None:
        write(root, "sys/fs/cgroup/memory.max", memory_max + "\n")
    return root


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        ("max 100000", None),
        ("200000 100000", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000", 0.5),
        ("", None),
        ("junk", None),
    ],
)
def test_parse_cpu_max(text, cores):
    assert parse_cpu_max(text) == cores


def test_v2_cpu_quota(tmp_path):
    assert cpu_quota_cores(v2_tree(tmp_path / "a", "200000 100000")) == 2.0
    assert cpu_quota_cores(v2_tree(tmp_path / "b", "max 100000")) is None
    assert cpu_quota_cores(tmp_path / "empty") is None  # no cgroup fs at all


def test_v2_nested_cgroup_takes_the_tightest_limit(tmp_path):
    root = v2_tree(tmp_path, "max 100000")
    write(root, "proc/self/cgroup", "0::/slurm/job_42/step_0\n")
    write(root, "sys/fs/cgroup/slurm/job_42/cpu.max", "400000 100000\n")
    write(root, "sys/fs/cgroup/slurm/job_42/step_0/cpu.max", "max 100000\n")
    assert cpu_quota_cores(root) == 4.0
    write(root, "sys/fs/cgroup/slurm/cpu.max", "300000 100000\n")
    assert cpu_quota_cores(root) == 3.0


def test_v2_host_path_not_mounted_falls_back_to_the_namespace_root(tmp_path):
    root = v2_tree(tmp_path, "250000 100000")
    write(root, "proc/self/cgroup", "0::/system.slice/docker-abc.scope\n")
    assert cpu_quota_cores(root) == 2.5


def test_v1_cpu_quota(tmp_path):
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n")
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    assert cpu_quota_cores(tmp_path) == 3.0
    write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    assert cpu_quota_cores(tmp_path) is None


def test_v1_follows_proc_self_cgroup(tmp_path):
    write(tmp_path, "proc/self/cgroup", "4:memory:/job/7\n1:cpu:/job/7\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
    write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n")
    write(tmp_path, "sys/fs/cgroup/cpu/job/7/cpu.cfs_quota_us", "50000\n")
    write(tmp_path, "sys/fs/cgroup/cpu/job/7/cpu.cfs_period_us", "100000\n")
    assert cpu_quota_cores(tmp_path) == 0.5
    write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")  # unlimited
    write(tmp_path, "sys/fs/cgroup/memory/job/7/memory.limit_in_bytes", str(8 * 2**30) + "\n")
    assert memory_limit_gib(tmp_path) == 8.0


def test_memory_limit(tmp_path):
    assert memory_limit_gib(v2_tree(tmp_path / "a", memory_max="max")) is None
    assert memory_limit_gib(v2_tree(tmp_path / "b", memory_max=str(16 * 2**30))) == 16.0
    write(tmp_path / "c", "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    assert memory_limit_gib(tmp_path / "c") is None
    write(tmp_path / "d", "sys/fs/cgroup/memory/memory.limit_in_bytes", str(2**31) + "\n")
    assert memory_limit_gib(tmp_path / "d") == 2.0


def test_container_runtime(tmp_path):
    assert container_runtime(tmp_path / "bare", environ={}) == "none"
    write(tmp_path / "d", ".dockerenv", "")
    assert container_runtime(tmp_path / "d", environ={}) == "docker"
    write(tmp_path / "p", "run/.containerenv", "engine=podman\n")
    assert container_runtime(tmp_path / "p", environ={}) == "podman"
    (tmp_path / "s" / ".singularity.d").mkdir(parents=True)
    assert container_runtime(tmp_path / "s", environ={}) == "apptainer"
    assert container_runtime(tmp_path / "bare", environ={"APPTAINER_CONTAINER": "/x.sif"}) == "apptainer"
    assert container_runtime(tmp_path / "bare", environ={"SINGULARITY_CONTAINER": "/x.sif"}) == "apptainer"


def test_shm_size(tmp_path):
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    size = shm_size_gib(tmp_path)
    assert size is not None and size > 0
    assert shm_size_gib(tmp_path / "nowhere") is None


def test_relevant_env_vars():
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "OMP_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "4",
        "OMP_WAIT_POLICY": "PASSIVE",  # how OpenMP threads wait: 10x on a loaded 2-core VM (issue 34)
        "GOMP_SPINCOUNT": "0",
        "SLURM_JOB_ID": "42",
        "TORCH_HOME": "/models",
        "EFFBENCH_DATA": "/data",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "HOME": "/root",
        "PATH": "/usr/bin",
        "MY_NCCL_THING": "x",
    }
    out = relevant_env_vars(env)
    assert set(out) == set(env) - {"HOME", "PATH", "MY_NCCL_THING"}
    assert list(out) == sorted(out)


def test_nccl_version_is_none_without_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.nccl_version() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    assert hardware.nccl_version() == "2.21.5"

    def broken():
        raise RuntimeError("no NCCL")

    monkeypatch.setattr(torch.cuda.nccl, "version", broken)
    assert hardware.nccl_version() is None


def test_env_snapshot_keeps_its_keys_and_adds_the_new_ones(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    snap = env_snapshot()
    for key in ("python", "torch", "cpu_cores_usable", "cuda_available", "gpu_count", "env_vars"):
        assert key in snap
    for key in (
        "container_runtime",
        "cgroup_cpu_quota_cores",
        "cgroup_memory_limit_gib",
        "shm_size_gib",
        "nccl_version",
    ):
        assert key in snap
    assert snap["container_runtime"] in ("docker", "podman", "apptainer", "none")
    assert snap["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert snap["env_vars"]["OMP_WAIT_POLICY"] == os.environ["OMP_WAIT_POLICY"]  # the suite sets it (conftest)
    assert snap["load_avg_1m"] is None or snap["load_avg_1m"] >= 0
    assert snap["cgroup_cpu_quota_cores"] is None or snap["cgroup_cpu_quota_cores"] > 0


def test_allowed_cores_is_the_tighter_of_quota_and_affinity(monkeypatch):
    monkeypatch.setattr(hardware, "usable_cores", lambda: 8)
    monkeypatch.setattr(hardware, "cpu_quota_cores", lambda: 2.5)
    assert hardware.allowed_cores() == 2.5
    monkeypatch.setattr(hardware, "cpu_quota_cores", lambda: None)
    assert hardware.allowed_cores() == 8.0
    monkeypatch.setattr(hardware, "cpu_quota_cores", lambda: 16.0)
    assert hardware.allowed_cores() == 8.0


def test_read_cpu_load_reads_the_load_average_and_a_steal_share(monkeypatch):
    import psutil

    monkeypatch.setattr(hardware.os, "getloadavg", lambda: (4.5, 3.0, 1.0))
    seen = {}

    def times(interval):
        seen["interval"] = interval
        return namedtuple("scputimes", "user steal")(50.0, 12.5)

    monkeypatch.setattr(psutil, "cpu_times_percent", times)
    load = hardware.read_cpu_load(0.01)
    assert (load.load_1m, load.steal_pct, seen["interval"]) == (4.5, 12.5, 0.01)
    assert load.machine_cores == os.cpu_count() and load.allowed_cores == hardware.allowed_cores()

    def no_loadavg():
        raise OSError("no /proc/loadavg")

    monkeypatch.setattr(hardware.os, "getloadavg", no_loadavg)
    monkeypatch.setattr(psutil, "cpu_times_percent", lambda interval: namedtuple("t", "user")(1.0))
    load = hardware.read_cpu_load(0.01)
    assert (load.load_1m, load.steal_pct) == (None, None)  # unknown, never a crash or a 0


def test_source_commit_is_the_checkout_s_head_or_none(tmp_path, monkeypatch):
    """env.json's effbench_commit (MLflow's mlflow.source.git.commit): the commit of the checkout effbench's
    package sits in; None outside a checkout; the user's GIT_DIR never points it at another repository."""
    from effbench.system import identity

    repo = tmp_path / "checkout"
    module = repo / "effbench" / "system" / "identity.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    monkeypatch.setattr(identity, "__file__", str(module))
    assert identity.source_commit() is None  # no .git: installed from a wheel

    def git(*args, cwd=repo):
        env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": os.environ["PATH"]}  # fmt: skip
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "x")
    head = git("rev-parse", "HEAD").strip()
    other = tmp_path / "other"
    other.mkdir()
    git("init", "-q", cwd=other)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert identity.source_commit() == head and len(head) == 40

"""What this process can see: library versions, CPU, GPUs and driver -> env.json.

Results travel with their conditions, so every run records this snapshot. NVML (nvidia-ml-py) is
optional: without it, or without a GPU, the GPU fields are absent rather than zero.

The container and cgroup readers take a `root` (default "/") so tests can point them at a fake
tree: `root/sys/fs/cgroup/cpu.max`, `root/proc/self/cgroup`, `root/.dockerenv`, `root/dev/shm`.
A limit that is not set ("max", or the v1 "unlimited" sentinel) reads as None.
"""

from __future__ import annotations


import importlib.metadata
import os
import platform
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import redact
from effbench.fmt import GIB
from effbench.system.mounts import container_signs, read_mountinfo
from effbench.system.nvml import nvml_session

# cgroup v1 writes "no limit" as a huge page-rounded number (9223372036854771712 on 4 KiB pages,
# PAGE_COUNTER_MAX * PAGE_SIZE in the kernel's mm/page_counter.c); anything past 2**60 bytes is
# treated as that sentinel, since no machine has an exbibyte of memory.
_UNLIMITED_BYTES = 2**60

# Environment variables that change results, recorded with every run.
ENV_VAR_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    # how idle OpenMP threads wait (spin or sleep): 10x on a loaded 2-core VM either way (docs/PERFORMANCE.md)
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
)
ENV_VAR_PREFIXES = ("NCCL_", "SLURM_", "TORCH_", "PYTORCH_", "EFFBENCH_")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def usable_cores() -> int:
    """Cores this process may run on (affinity / cpuset), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def allowed_cores() -> float:
    """Cores this job may use: the tighter of the cgroup quota and the CPU affinity."""
    quota, pinned = cpu_quota_cores(), float(usable_cores())
    return min(quota, pinned) if quota is not None else pinned


# Steal is sampled over this long: psutil.cpu_times_percent(interval) sleeps that long between its two reads of
# /proc/stat, so it is what doctor and `run`'s check cost; a quarter second holds 25 scheduler ticks per core.
STEAL_SAMPLE_S = 0.25


@dataclass(frozen=True)
class CpuLoad:
    """How busy the machine is before a run starts (read_cpu_load): what other processes and VMs take."""

    load_1m: float | None
    """The 1-minute load average (os.getloadavg): runnable threads on the whole machine; None where unknown."""
    steal_pct: float | None
    """Share of CPU time the hypervisor gave to other VMs over a short sample, 0..100 (psutil's `steal`, Linux
    only); None without psutil or where the kernel does not count it."""
    machine_cores: int
    """The machine's cores (os.cpu_count): what the load average is spread over."""
    allowed_cores: float
    """The cores the run may use (allowed_cores: affinity, cgroup quota)."""


def read_cpu_load(sample_s: float = STEAL_SAMPLE_S) -> CpuLoad:
    """The load average now and the steal over `sample_s` seconds; every reading that fails is None."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform (os.getloadavg's docs)
        load = None
    steal = None
    try:
        import psutil

        steal = getattr(psutil.cpu_times_percent(interval=sample_s), "steal", None)
    except Exception:  # no psutil, or /proc/stat unreadable: no steal figure, never a crash
        steal = None
    return CpuLoad(load, steal, os.cpu_count() or 1, allowed_cores())


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- CUDA device -> NVML device: the one mapping ----------------------------------------------------
# CUDA numbers the GPUs it was given (CUDA_VISIBLE_DEVICES applied, in CUDA_DEVICE_ORDER, which defaults
# to fastest-first), NVML numbers every GPU of the node in PCI bus order, and CUDA_VISIBLE_DEVICES may hold
# UUIDs or MIG names. Only the UUID names the same device on both sides, so the mapping goes through it.
NVML_UUID_PREFIXES = ("GPU-", "MIG-")
"""nvmlDeviceGetUUID spells a full GPU "GPU-<uuid>" and a MIG instance "MIG-<uuid>" (nvml.h); torch's
cudaDeviceProp.uuid prints as the bare "<uuid>" (torch/_C/__init__.pyi `_CudaDeviceProperties.uuid: str`)."""


def cuda_device_uuid(cuda_index: int) -> str:
    """The UUID of torch's `cuda:<cuda_index>`, as torch prints it (no GPU-/MIG- prefix)."""
    import torch

    return str(torch.cuda.get_device_properties(cuda_index).uuid)


def nvml_uuid_candidates(cuda_uuid: str) -> tuple[str, ...]:
    """The NVML spellings a CUDA UUID may have: already prefixed, else GPU- then MIG-."""
    u = cuda_uuid.strip()
    if u.startswith(NVML_UUID_PREFIXES):
        return (u,)
    return tuple(prefix + u for prefix in NVML_UUID_PREFIXES)


def nvml_handle_for_uuid(nvml: Any, cuda_uuid: str) -> Any:
    """NVML's handle of the device torch calls `cuda_uuid` (pynvml.nvmlDeviceGetHandleByUUID(uuid: str),
    which raises NVMLError_NotFound for a UUID it does not know). LookupError when no spelling matches."""
    errors = []
    for candidate in nvml_uuid_candidates(cuda_uuid):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(candidate)
        except Exception as e:  # NVMLError_NotFound / _InvalidArgument: try the next spelling
            errors.append(f"{candidate}: {type(e).__name__}")
    raise LookupError(f"NVML knows no device with UUID {cuda_uuid} ({'; '.join(errors)})")


def nvml_snapshot() -> dict[str, Any]:
    """Driver version and per-GPU name/memory from NVML; {} when NVML is unavailable."""
    with nvml_session() as nvml:
        if nvml is None:
            return {}
        try:
            gpus = []
            for i in range(nvml.nvmlDeviceGetCount()):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                gpus.append(
                    {
                        "index": i,
                        "name": _decode(nvml.nvmlDeviceGetName(h)),
                        "uuid": _decode(nvml.nvmlDeviceGetUUID(h)),
                        "memory_total_gib": mem.total / 2**30,
                    }
                )
            return {"driver_version": _decode(nvml.nvmlSystemGetDriverVersion()), "nvml_gpus": gpus}
        except Exception:  # an NVML error never ends a run: the record just lacks these facts
            return {}


def container_runtime(root: str | Path = "/", environ: Mapping[str, str] | None = None) -> str:
    """docker | podman | apptainer | none, from the marker files each runtime leaves. /.dockerenv is a
    hint only: it counts when the mount table and PID 1's cgroup show a container, or say nothing
    (mounts.container_signs); a VM whose root is a block device and that kept the file is `none`.
    Under a fake `root` (tests) the table is root/proc/self/mountinfo; at / it is read_mountinfo()'s."""
    root = Path(root)
    env = os.environ if environ is None else environ
    if env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER") or (root / ".singularity.d").exists():
        return "apptainer"
    containerenv = (root / "run" / ".containerenv").exists()
    if containerenv or env.get("container") == "podman":
        return "podman"
    if (root / ".dockerenv").exists():
        mountinfo = read_mountinfo() if root == Path("/") else _read(root / "proc" / "self" / "mountinfo")
        signs = container_signs(mountinfo, _read(root / "proc" / "1" / "cgroup"), env, containerenv)
        return "none" if signs == [] else "docker"
    return "none"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(root: Path) -> dict[str, str]:
    """controller -> this process's cgroup path from /proc/self/cgroup ("" is the v2 entry)."""
    text = _read(root / "proc" / "self" / "cgroup") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                out[controller] = parts[2]
    return out


def _cgroup_dirs(root: Path, controller: str) -> list[Path]:
    """The folders whose limits apply to this process: its cgroup and each ancestor up to the
    mount point, most specific first. In a container the namespace root is the container's own
    cgroup, so /proc/self/cgroup reads "/" (or a host path that is not mounted) and only the
    mount point remains."""
    base = root / "sys" / "fs" / "cgroup"
    if (base / "cgroup.controllers").exists():  # cgroup v2, unified hierarchy
        mount, rel = base, _cgroup_paths(root).get("", "/")
    else:  # cgroup v1: one hierarchy per controller, possibly co-mounted ("cpu,cpuacct")
        mounts = [base / controller] + sorted(p for p in base.glob("*") if controller in p.name.split(","))
        found = next((m for m in mounts if m.is_dir()), None)
        if found is None:
            return []
        mount = found
        rel = _cgroup_paths(root).get(controller, "/")
    dirs = []
    here = mount / rel.strip("/") if rel.strip("/") else mount
    if not here.is_dir():
        here = mount
    while True:
        dirs.append(here)
        if here == mount or mount not in here.parents:
            break
        here = here.parent
    return dirs


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 cpu.max ("max 100000" -> None, "200000 100000" -> 2.0) in cores."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    try:
        quota = int(parts[0])
        period = int(parts[1]) if len(parts) > 1 else 100_000  # the kernel's default period, 100 ms
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota_cores(root: str | Path = "/") -> float | None:
    """CPU time this process may use per second, in cores, from the cgroup CFS quota; None when
    unlimited or unreadable. The tightest limit on the path wins. (CPU pinning is separate: see
    usable_cores.)"""
    root = Path(root)
    quotas: list[float] = []
    for d in _cgroup_dirs(root, "cpu"):
        v2 = _read(d / "cpu.max")
        if v2 is not None:
            q = parse_cpu_max(v2)
        else:
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            try:
                q = int(quota) / int(period) if quota and period and int(quota) > 0 and int(period) > 0 else None
            except ValueError:
                q = None
        if q is not None:
            quotas.append(q)
    return min(quotas) if quotas else None


def memory_limit_gib(root: str | Path = "/") -> float | None:
    """The cgroup memory limit in GiB (v2 memory.max, v1 memory.limit_in_bytes); None when unlimited."""
    root = Path(root)
    limits: list[int] = []
    for d in _cgroup_dirs(root, "memory"):
        text = _read(d / "memory.max")
        if text is None:
            text = _read(d / "memory.limit_in_bytes")
        if text is None or text == "max":
            continue
        try:
            value = int(text)
        except ValueError:
            continue
        if 0 < value < _UNLIMITED_BYTES:
            limits.append(value)
    return min(limits) / GIB if limits else None


def shm_size_gib(root: str | Path = "/") -> float | None:
    """Size of /dev/shm in GiB (DataLoader workers pass batches through it; docker's default is
    64 MiB); None when it does not exist."""
    try:
        st = os.statvfs(Path(root) / "dev" / "shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize / GIB


def nccl_version() -> str | None:
    """NCCL version torch was built with ("2.21.5"); None without CUDA or NCCL."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        v = torch.cuda.nccl.version()
    except Exception:  # no NCCL in this build, or a driver problem
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):  # torch < 1.11 encoded it as major*1000 + minor*100 + patch
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"
    return str(v)


def relevant_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that change results (ENV_VAR_NAMES and ENV_VAR_PREFIXES), sorted; a secret's
    value as *** (redact.env: EFFBENCH_TRACK may hold a server's password, and env.json is uploaded with the run)."""
    env = os.environ if environ is None else environ
    return redact.env({k: v for k, v in sorted(env.items()) if k in ENV_VAR_NAMES or k.startswith(ENV_VAR_PREFIXES)})


def env_snapshot() -> dict[str, Any]:
    """The conditions of a run: versions, host, CPU, CUDA and visible GPUs."""
    import torch

    snap: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "effbench": _version("effbench"),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "torchcodec": _version("torchcodec"),  # the fast loader's image decoders (docs/decoding.md)
        "efficientnet_pytorch": _version("efficientnet-pytorch"),
        "numpy": _version("numpy"),
        "cuda_build": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_model": cpu_model(),
        "cpu_cores_usable": usable_cores(),
        "cpu_cores_total": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda_available": torch.cuda.is_available(),
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    if snap["gpu_count"]:
        snap["gpus"] = [
            {
                "index": i,
                "name": torch.cuda.get_device_name(i),
                "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
                "memory_total_gib": torch.cuda.get_device_properties(i).total_memory / 2**30,
                # a MIG instance's own SMs (its share of the GPU's peak: analysis.mig_share)
                "sm_count": torch.cuda.get_device_properties(i).multi_processor_count,
                "uuid": cuda_device_uuid(i),  # matches nvml_gpus[*].uuid after its GPU-/MIG- prefix
            }
            for i in range(snap["gpu_count"])
        ]
    snap.update(nvml_snapshot())
    from effbench.system import cuda_compat

    # driver's CUDA, the base's CUDA, the compat libraries and whether they are in use (doctor's line)
    snap["cuda_compat"] = cuda_compat.summary(
        cuda_compat.read_driver(), cuda_compat.read_image_cuda(torch_cuda=torch.version.cuda)
    )
    snap["nccl_version"] = nccl_version()
    snap["container_runtime"] = container_runtime()
    from effbench.system import machine

    # the machine as comparisons name it: a container's made-up hostname names none (system/machine.py)
    snap["host_boot_id"] = machine.read_boot_id()
    named = machine.identify(
        snap["hostname"],
        snap["container_runtime"],
        [g["uuid"] for g in snap.get("gpus", [])],
        snap["host_boot_id"],
        machine.given_name(os.environ),
        machine.in_pod(os.environ),
    )
    snap["machine"], snap["machine_source"] = (named.name, named.source) if named else (None, None)
    from effbench.system.identity import image_info, source_commit

    # revision, flavour, lock sha256 of the image (None outside it): a result names the image that made it
    snap["image"] = image_info()
    snap["effbench_commit"] = source_commit()  # a run from a checkout names its commit (MLflow's git tag)
    snap["cgroup_cpu_quota_cores"] = cpu_quota_cores()
    snap["cgroup_memory_limit_gib"] = memory_limit_gib()
    snap["shm_size_gib"] = shm_size_gib()
    snap["env_vars"] = relevant_env_vars()
    try:  # the other load the run started beside (its own setup included): export's load column
        snap["load_avg_1m"] = os.getloadavg()[0]
    except (AttributeError, OSError):
        snap["load_avg_1m"] = None
    return snap

"""What this process can see: library versions, CPU, GPUs and driver -> env.json.

Results travel with their conditions, so every run records this snapshot. NVML (nvidia-ml-py) is
optional: without it, or without a GPU, the GPU fields are absent rather than zero.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import sys
from typing import Any


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


def nvml_snapshot() -> dict[str, Any]:
    """Driver version and per-GPU name/memory from NVML; {} when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError and friends: no driver, no GPU, no library
        return {}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            gpus.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_gib": mem.total / 2**30,
                }
            )
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"driver_version": driver.decode() if isinstance(driver, bytes) else driver, "nvml_gpus": gpus}
    except Exception:
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


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
            }
            for i in range(snap["gpu_count"])
        ]
    snap.update(nvml_snapshot())
    snap["env_vars"] = {
        k: v
        for k, v in sorted(os.environ.items())
        if k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_HOME", "EFFBENCH_DATA", "EFFBENCH_OUTPUT")
    }
    return snap

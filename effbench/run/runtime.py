"""Resolve what the config asked for against what this process can have: device and precision.

No silent fallbacks: `--device cuda` without a visible GPU, or a precision the device cannot run,
is an error that says what is visible and what to pass instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from effbench.config import RunConfig
from effbench.errors import EffbenchError


@dataclass(frozen=True)
class Runtime:
    device: Any  # torch.device
    precision: str  # resolved: fp32 | bf16 | fp16
    autocast_dtype: Any  # torch.dtype or None for fp32
    device_api: Any = None
    """The device's stream and event interface (run/timing.device_clock): None picks it from the device's
    type (torch.cuda on CUDA; the CPU has none); tests/simdevice.py gives its simulated device's."""

    @property
    def device_name(self) -> str:
        import torch

        if self.device.type == "cuda":
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return "cpu"


def resolve_device(requested: str, local_rank: int = 0) -> Any:
    import torch

    if requested == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise EffbenchError(
            "--device",
            "cuda was requested but no CUDA device is visible (torch.cuda.is_available() is False); "
            "check the driver, CUDA_VISIBLE_DEVICES and docker --gpus / apptainer --nv, or pass --device cpu",
        )
    if available:
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_precision(requested: str, device: Any) -> tuple[str, Any]:
    import torch

    on_cuda = device.type == "cuda"
    if requested == "auto":
        requested = "bf16" if on_cuda and torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"
    if requested == "fp32":
        return "fp32", None
    if requested == "fp16":
        if not on_cuda:
            raise EffbenchError(
                "--precision", "fp16 needs a CUDA device (loss scaling); use --precision bf16 or fp32 on the CPU"
            )
        return "fp16", torch.float16
    # bf16
    if on_cuda and not torch.cuda.is_bf16_supported(including_emulation=False):
        name = torch.cuda.get_device_name(device)
        raise EffbenchError("--precision", f"bf16 is not supported natively on {name}; use --precision fp16 or fp32")
    return "bf16", torch.bfloat16


def resolve_runtime(cfg: RunConfig, local_rank: int = 0, device_type: str | None = None) -> Runtime:
    """`device_type`: the launch plan's ("cpu" | "cuda"), which every rank then trains on. A rank must not
    resolve `--device auto` again by itself: the plan reads `--nproc N` as N CPU processes (gloo, "cpu" in
    the folder name, fp32) even where GPUs are visible, and `auto` here would put each rank on a GPU."""
    device = resolve_device(device_type or cfg.device, local_rank)
    precision, dtype = resolve_precision(cfg.precision, device)
    return Runtime(device=device, precision=precision, autocast_dtype=dtype)


def apply_backend_flags(cfg: RunConfig, device: Any) -> dict[str, Any]:
    """Set the process-wide backend switches the (device-resolved) config asks for; return them
    for the record. cudnn.benchmark autotunes each new convolution shape once, in the warm-up steps."""
    import torch

    if device.type == "cuda":
        torch.backends.cudnn.benchmark = bool(cfg.cudnn_benchmark)
    return {
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if device.type == "cuda" else None,
        "channels_last": cfg.channels_last,
        "pin_memory": cfg.pin_memory,
        "optimizer_impl": cfg.optimizer_impl,
        "compile": cfg.compile,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if device.type == "cuda" else None,
    }

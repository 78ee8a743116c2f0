"""Where the time goes: the measurements around the timed run, turned into results.json keys.

count_flops(...)      FLOPs per training image, before training (FlopCounterMode, flops.py)
sampler_for(...)      the utilisation sampler for this rank (monitor.py)
peak_memory(...)      peak allocated / reserved device memory of this rank
profile(...)          the profiling pass after the timed run (profiling.py)
summarize(...)        pure: everything above + the run record -> the keys, the MFU and the verdict
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from effbench.analysis import efficiency as analysis
from effbench.measure.monitor import UtilizationSampler, energy_j

FLOP_COUNT_BATCH = 2  # FLOPs per image do not depend on the batch; 2 keeps BatchNorm well-defined


def count_flops(model: Any, rt: Any, image_size: int, num_classes: int) -> float:
    """FLOPs of one forward+backward per image, on random inputs of the run's shape."""
    import torch

    from effbench.measure.flops import flops_per_image

    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(FLOP_COUNT_BATCH, 3, image_size, image_size, generator=g).to(rt.device)
    y = torch.randint(0, num_classes, (FLOP_COUNT_BATCH,), generator=g).to(rt.device)
    return flops_per_image(model, x, y, autocast_dtype=rt.autocast_dtype, device_type=rt.device.type)


def visible_gpu_index(local_rank: int) -> int:
    """NVML index of this rank's GPU: CUDA_VISIBLE_DEVICES maps torch's index to the physical one."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    items = [c.strip() for c in cvd.split(",") if c.strip()]
    if items and all(c.isdigit() for c in items) and local_rank < len(items):
        return int(items[local_rank])
    return local_rank  # unset, or UUIDs: NVML order is the usual default order


def sampler_for(device_type: str, local_rank: int, interval_s: float) -> UtilizationSampler:
    gpus = [visible_gpu_index(local_rank)] if device_type == "cuda" else []
    return UtilizationSampler(interval_s=interval_s, gpu_indices=gpus)


def peak_memory(device: Any) -> dict[str, float] | None:
    """Peak allocated and reserved GiB on this rank's GPU since the last reset; None on the CPU."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    import torch

    return {
        "peak_mem_allocated_gib": torch.cuda.max_memory_allocated(device) / 2**30,
        "peak_mem_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30,
        "mem_total_gib": torch.cuda.get_device_properties(device).total_memory / 2**30,
    }


def profile(
    step: Any, loader: Any, *, device_type: str, out_dir: Path | None, rank: int, active: int
) -> dict[str, Any]:
    """The profiling pass on a fresh pass over the loader; out_dir None (no shared folder) skips files."""
    import tempfile

    from effbench.measure.profiling import run_profile_pass

    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="effbench-profile-") as tmp:
            info = run_profile_pass(
                step, iter(loader), device_type=device_type, out_dir=Path(tmp), rank=rank, active=active
            )
        info["trace"] = None
        info["tables"] = {}
        return info
    return run_profile_pass(step, iter(loader), device_type=device_type, out_dir=out_dir, rank=rank, active=active)


def _phase_share(phases: Sequence[Mapping[str, Any]], name: str, device: bool) -> float | None:
    for row in phases:
        if row.get("phase") == name and row.get("calls"):
            return row.get("device_share_of_step" if device else "cpu_share_of_step")
    return None


def merge_utilization(per_rank: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Rank 0's host summary and every rank's GPU rows (each rank samples only its own GPU)."""
    present = [u for u in per_rank if u]
    if not present:
        return None
    merged = dict(present[0])
    gpus = [g for u in present for g in u.get("gpus", [])]
    if gpus:
        merged["gpus"] = gpus
    else:
        merged.pop("gpus", None)
    return merged


def summarize(
    record: Mapping[str, Any],
    *,
    flops_image: float | None,
    utilization: Mapping[str, Any] | None,
    memory: Sequence[Mapping[str, float] | None],
    profile_info: Mapping[str, Any] | None,
    cpu_quota_cores: float | None,
    workers_per_process: int,
    processes_per_node: int,
    tf32_enabled: bool,
) -> dict[str, Any]:
    """The observability keys of results.json, from the measurements. Pure: no torch, no I/O."""
    out: dict[str, Any] = {}
    device_type = (
        "cuda" if str(record.get("device", "cpu")).startswith("cuda") or record.get("strategy") == "dp" else "cpu"
    )
    gpu_names = [g.get("name") for g in (record.get("env") or {}).get("gpus", [])]
    throughput = record.get("throughput_img_s")
    devices = int(record.get("devices") or record.get("world_size") or 1)

    if utilization:
        out["utilization"] = dict(utilization)
    mems = [m for m in memory if m]
    if mems:
        out["peak_mem_gib"] = max(m["peak_mem_allocated_gib"] for m in mems)
        out["peak_mem_reserved_gib"] = max(m["peak_mem_reserved_gib"] for m in mems)
    if flops_image is not None:
        out["flops_per_image"] = flops_image
        eff = analysis.compute_efficiency(
            flops_image,
            throughput,
            gpu_name=gpu_names[0] if device_type == "cuda" and gpu_names else None,
            precision=analysis.peak_precision(record.get("precision", "fp32"), tf32_enabled=tf32_enabled),
            world_size=devices,
        )
        if "achieved_tflops" in eff:
            out["achieved_tflops"] = eff["achieved_tflops"]
        if "mfu" in eff:
            out["mfu"] = eff["mfu"]
            out["mfu_peak_tflops_per_device"] = eff["peak_tflops_per_device"]
    energy = energy_j(utilization) if utilization else None
    if energy is not None:
        # the sampler spans the timed epochs (validation included) on every GPU of the job
        images = sum(e.get("images") or 0 for e in record.get("epochs") or [])
        out["energy_j"] = energy
        per_j = analysis.images_per_joule(images, energy)
        if per_j is not None:
            out["images_per_j"] = per_j
    if profile_info:
        steps = (record.get("measured") or {}).get("steps") or 0
        timed_step_s = (record.get("measured") or {}).get("time_s", 0) / steps if steps else None
        out["profile"] = {
            "phases": profile_info.get("phases"),
            # names inside the run folder (profiling.py writes them there): the folder may move
            "tables": {k: Path(v).name for k, v in (profile_info.get("tables") or {}).items()},
            "trace": Path(profile_info["trace"]).name if profile_info.get("trace") else None,
            "active_steps": profile_info.get("active_steps"),
            "profiled_step_time_s": profile_info.get("profiled_step_time_s"),
            "timed_step_time_s": timed_step_s,
            "profiler_overhead": analysis.profiler_overhead(profile_info.get("profiled_step_time_s"), timed_step_s),
        }
    phases = (profile_info or {}).get("phases") or []
    gpu_util = None
    if utilization and utilization.get("gpus"):
        means = [g["util_pct"]["mean"] for g in utilization["gpus"] if g.get("util_pct")]
        gpu_util = sum(means) / len(means) if means else None
    peak_fraction = None
    if mems:
        peak_fraction = max(m["peak_mem_reserved_gib"] / m["mem_total_gib"] for m in mems if m.get("mem_total_gib"))
    m = analysis.Measurements(
        data_time_share=record.get("data_time_share") or 0.0,
        gpu_util_pct_mean=gpu_util,
        allreduce_share=_phase_share(phases, "all_reduce", device_type == "cuda") if devices > 1 else None,
        peak_mem_fraction=peak_fraction,
        cpu_quota_cores=cpu_quota_cores,
        workers=workers_per_process * processes_per_node,
        processes=processes_per_node,
        mfu=out.get("mfu"),
        device_type=device_type,
    )
    out["verdict"] = analysis.verdict_dict(analysis.verdict(m))
    return out

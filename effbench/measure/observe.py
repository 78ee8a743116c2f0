"""Where the time goes: the measurements around the timed run, turned into results.json keys.

count_flops(...)      FLOPs per training image and its forward, before training (FlopCounterMode, flops.py)
job_cuda_indices(...) the CUDA devices this process trains on (one per DDP rank, all of them under dp)
sampler_for(...)      the utilisation sampler for those devices, found in NVML by UUID (monitor.py)
peak_memory(...)      peak allocated / reserved memory of each of those devices
profile(...)          the profiling pass after the timed run (profiling.py)
summarize(...)        pure: everything above + the run record -> the keys, the MFU and the verdict
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from effbench.analysis import efficiency as analysis
from effbench.measure.flops import StepFlops
from effbench.measure.monitor import UtilizationSampler, energy_j

FLOP_COUNT_BATCH = 2  # FLOPs per image do not depend on the batch; 2 keeps BatchNorm well-defined


def count_flops(model: Any, rt: Any, image_size: int, num_classes: int) -> StepFlops:
    """FLOPs of one forward+backward per image and of the forward alone, on random inputs of the run's shape."""
    import torch

    from effbench.measure.flops import step_flops

    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(FLOP_COUNT_BATCH, 3, image_size, image_size, generator=g).to(rt.device)
    y = torch.randint(0, num_classes, (FLOP_COUNT_BATCH,), generator=g).to(rt.device)
    return step_flops(model, x, y, autocast_dtype=rt.autocast_dtype, device_type=rt.device.type)


def job_cuda_indices(device_type: str, mode: str, nproc_per_node: int, local_rank: int) -> list[int]:
    """torch's CUDA indices of the GPUs this process computes on: DataParallel (mode "dp") drives
    cuda:0..N-1 from one process; every other mode drives cuda:<local_rank>. None on the CPU."""
    if device_type != "cuda":
        return []
    return list(range(nproc_per_node)) if mode == "dp" else [local_rank]


def sampler_for(cuda_indices: Sequence[int], interval_s: float) -> UtilizationSampler:
    """A sampler over exactly these CUDA devices, each found in NVML by its UUID (the one mapping:
    system.hardware.nvml_handle_for_uuid). No CUDA device: host columns only."""
    if not cuda_indices:
        return UtilizationSampler(interval_s=interval_s, gpu_indices=[])
    from effbench.system.hardware import cuda_device_uuid

    return UtilizationSampler(interval_s=interval_s, gpu_uuids={i: cuda_device_uuid(i) for i in cuda_indices})


def reset_peak_memory(cuda_indices: Sequence[int]) -> None:
    if not cuda_indices:
        return
    import torch

    for i in cuda_indices:
        torch.cuda.reset_peak_memory_stats(i)


def peak_memory(cuda_indices: Sequence[int]) -> list[dict[str, float]]:
    """Peak allocated and reserved GiB on each of these GPUs since the last reset; [] on the CPU."""
    if not cuda_indices:
        return []
    import torch

    return [
        {
            "cuda_index": i,
            "peak_mem_allocated_gib": torch.cuda.max_memory_allocated(i) / 2**30,
            "peak_mem_reserved_gib": torch.cuda.max_memory_reserved(i) / 2**30,
            "mem_total_gib": torch.cuda.get_device_properties(i).total_memory / 2**30,
        }
        for i in cuda_indices
    ]


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
    """Rank 0's host summary and every rank's GPU rows (each rank samples only its own GPUs)."""
    present = [u for u in per_rank if u]
    if not present:
        return None
    merged = dict(present[0])
    for key in ("gpus", "gpus_unmapped"):
        rows = [g for u in present for g in u.get(key, [])]
        if rows:
            merged[key] = rows
        else:
            merged.pop(key, None)
    return merged


def run_device_type(record: Mapping[str, Any]) -> str:
    """The device type the run trained on ("cuda", "cpu"): the launch plan's, which the runner records as
    `launch.device_type` (run/runner.py `_plan_dict`), else config.json's resolved `device` (resolved_record).
    Never read from the `device` label: a DataParallel run's starts with its GPU count ("1 x cuda:0 (...)
    (DataParallel)") and a one-GPU one has strategy "single", so a CUDA run read as a CPU one (no MFU)."""
    launch = record.get("launch") or {}
    config = record.get("config") or {}
    return str(launch.get("device_type") or config.get("device") or "cpu")


def summarize(
    record: Mapping[str, Any],
    *,
    flops_image: float | None,
    flops_forward_image: float | None = None,
    utilization: Mapping[str, Any] | None,
    memory: Sequence[Mapping[str, float] | None],
    profile_info: Mapping[str, Any] | None,
    cpu_quota_cores: float | None,
    workers_per_process: int,
    processes_per_node: int,
    tf32_enabled: bool,
    timed_step_times_s: Sequence[float] = (),
    run_dir: Path | None = None,
) -> dict[str, Any]:
    """The observability keys of results.json, from the measurements. Pure: no torch, no I/O.

    `timed_step_times_s`: rank 0's measured step times, the noise the profiler's cost is judged against.
    `run_dir`: profile files are recorded relative to it, so the folder can move (readers resolve them
    with `results.in_run_dir`).

    `memory` holds one entry per GPU the job used (every rank's, every DataParallel device's)."""
    out: dict[str, Any] = {}
    device_type = run_device_type(record)
    gpu_names = [g.get("name") for g in (record.get("env") or {}).get("gpus", [])]
    gpu_caps = [g.get("capability") for g in (record.get("env") or {}).get("gpus", [])]
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
        if flops_forward_image is not None:  # to hold against published forward GMACs (x 2)
            out["flops_forward_per_image"] = flops_forward_image
        eff = analysis.compute_efficiency(
            flops_image,
            throughput,
            gpu_name=gpu_names[0] if device_type == "cuda" and gpu_names else None,
            precision=analysis.peak_precision(
                record.get("precision", "fp32"),
                tf32_enabled=tf32_enabled,
                capability=analysis.parse_capability(gpu_caps[0]) if device_type == "cuda" and gpu_caps else None,
            ),
            world_size=devices,
        )
        if "achieved_tflops" in eff:
            out["achieved_tflops"] = eff["achieved_tflops"]
        if "mfu" in eff:
            out["mfu"] = eff["mfu"]
            out["mfu_peak_tflops_per_device"] = eff["peak_tflops_per_device"]
    # the job's GPUs: every rank's under DDP, every DataParallel device (LaunchPlan.devices)
    job_gpus = devices if device_type == "cuda" else None
    energy = energy_j(utilization, job_gpus) if utilization else None
    sampled = len((utilization or {}).get("gpus") or [])
    if energy is None and job_gpus is not None and utilization and sampled < job_gpus:
        # e.g. a failed multi-rank run (no gather after a failure: rank 0's sampler alone), a rank whose
        # NVML did not start; a partial sum would make energy per image look N times better
        out["energy_note"] = f"not measured on every GPU: {sampled} of the job's {job_gpus} sampled"
    if energy is not None:
        # the sampler spans the timed epochs (validation included) on every GPU of the job
        images = sum(e.get("images") or 0 for e in record.get("epochs") or [])
        out["energy_j"] = energy
        per_j = analysis.images_per_joule(images, energy)
        if per_j is not None:
            out["images_per_j"] = per_j
    if profile_info:
        timed = list(timed_step_times_s)
        out["profile"] = {
            "phases": profile_info.get("phases"),
            "tables": {k: _relative(v, run_dir) for k, v in (profile_info.get("tables") or {}).items()},
            "trace": _relative(profile_info["trace"], run_dir) if profile_info.get("trace") else None,
            "active_steps": profile_info.get("active_steps"),
            "profiled_step_time_s": profile_info.get("profiled_step_time_s"),
            "timed_step_time_s": sum(timed) / len(timed) if timed else None,
            **analysis.profiler_overhead(profile_info.get("profiled_step_times_s") or [], timed),
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
        measured_steps=int((record.get("measured") or {}).get("steps") or 0),
        proc_cpu_pct_mean=(((utilization or {}).get("host") or {}).get("proc_cpu_pct") or {}).get("mean"),
        host_cpu_pct_mean=(((utilization or {}).get("host") or {}).get("cpu_pct") or {}).get("mean"),
        threads_per_process=(record.get("launch") or {}).get("threads_per_proc"),
    )
    v = analysis.verdict(m)
    if v is not None:  # no measured step: no verdict
        out["verdict"] = analysis.verdict_dict(v)
    return out


def _relative(path: Any, run_dir: Path | None) -> str:
    """`path` relative to the run folder when it lies inside it (else as given)."""
    p = Path(path)
    if run_dir is not None:
        try:
            return str(p.resolve().relative_to(Path(run_dir).resolve()))
        except ValueError:
            pass
    return str(p)

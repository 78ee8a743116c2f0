"""Where the time goes: the measurements around the timed run, turned into results.json keys.

count_flops(...)      FLOPs per training image and its forward, before training (FlopCounterMode, flops.py)
job_cuda_indices(...) the CUDA devices this process trains on (one per DDP rank, all of them under dp)
sampler_for(...)      the utilisation sampler for those devices, found in NVML by UUID (monitor.py)
peak_memory(...)      peak allocated / reserved memory of each of those devices
MeasuredWindow        opens and closes the measured window on the trainer's phases: the sampler's marks
                      (energy, utilisation) and the peak memory, both of the measured steps alone
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


def peak_memory(cuda_indices: Sequence[int]) -> list[dict[str, Any]]:
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


class MeasuredWindow:
    """The measured steps' window, opened and closed by the trainer's phases (run/train.py `on_phase`):
    "epochs" opens it (warm-up is over, or a later epoch starts), anything else ("validation",
    "warm-up") closes it. Opening resets each GPU's peak memory and marks the sampler; closing reads
    the peaks and marks the sampler again. So the peak memory and the sampler's window figures cover the
    measured training steps only: not warm-up (compile, cuDNN autotuning), validation, nor the profiling
    pass after the run. `reset` / `read` are observe's own functions unless a test passes fakes."""

    def __init__(
        self,
        sampler: UtilizationSampler,
        cuda_indices: Sequence[int],
        *,
        reset: Any = None,
        read: Any = None,
    ) -> None:
        self.sampler = sampler
        self.cuda_indices = list(cuda_indices)
        self._reset = reset or reset_peak_memory
        self._read = read or peak_memory
        self.is_open = False
        self._peaks: dict[int, dict[str, Any]] = {}

    def on_phase(self, name: str) -> None:
        if name == "epochs":
            self.open()
        else:
            self.close()

    def open(self) -> None:
        if self.is_open:
            return
        self._reset(self.cuda_indices)
        self.sampler.window(True)
        self.is_open = True

    def close(self) -> None:
        if not self.is_open:
            return
        self.sampler.window(False)
        for row in self._read(self.cuda_indices):  # the peaks since open(): one span's
            old = self._peaks.get(row["cuda_index"])
            if old is None:
                self._peaks[row["cuda_index"]] = dict(row)
            else:
                for key in ("peak_mem_allocated_gib", "peak_mem_reserved_gib"):
                    old[key] = max(old[key], row[key])
        self.is_open = False

    def peak_memory(self) -> list[dict[str, Any]]:
        """Each GPU's peaks over the window's spans; [] when no span closed (nothing measured, or the CPU)."""
        self.close()
        return [dict(v) for _, v in sorted(self._peaks.items())]


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


def _energy(record: Mapping[str, Any], utilization: Mapping[str, Any] | None, job_gpus: int | None) -> dict[str, Any]:
    """energy_j and images_per_j of the measured steps alone (the counter read as the window opened and
    closed, monitor.py; not warm-up, compile, validation) over the same steps' images (every rank's), or
    energy_note saying why there is none. `job_gpus`: the job's GPU count; None on the CPU."""
    out: dict[str, Any] = {}
    window = (utilization or {}).get("measured_window")
    energy = None
    if utilization and window is not None:
        in_window = {"gpus": window.get("gpus") or [], "gpus_unmapped": utilization.get("gpus_unmapped")}
        energy = energy_j(in_window, job_gpus)
    sampled = len((utilization or {}).get("gpus") or [])
    if energy is None and job_gpus is not None and utilization and sampled < job_gpus:
        # e.g. a failed multi-rank run (no gather after a failure: rank 0's sampler alone), a rank whose
        # NVML did not start; a partial sum would make energy per image look N times better
        out["energy_note"] = f"not measured on every GPU: {sampled} of the job's {job_gpus} sampled"
    elif energy is None and job_gpus is not None and utilization and window is None:
        out["energy_note"] = "no measured window was marked (no measured step ended)"
    if energy is not None:
        out["energy_j"] = energy
        per_j = analysis.images_per_joule(int((record.get("measured") or {}).get("images") or 0), energy)
        if per_j is not None:
            out["images_per_j"] = per_j
    return out


def _verdict_scope(utilization: Mapping[str, Any] | None) -> tuple[float | None, Mapping[str, Any]]:
    """(mean GPU utilisation, host summary) for the verdict: the measured window's samples, as the data-wait
    share it is set against. A window too short to hold a CPU sample (a few CPU steps) takes the whole
    block's host figures rather than give no CPU verdict at all; no window at all: the whole block's."""
    window = (utilization or {}).get("measured_window")
    scope = window if window is not None else (utilization or {})
    gpu_util = None
    means = [g["util_pct"]["mean"] for g in scope.get("gpus") or [] if g.get("util_pct")]
    if means:
        gpu_util = sum(means) / len(means)
    host = scope.get("host") or {}
    if not host.get("proc_cpu_pct"):
        host = (utilization or {}).get("host") or {}
    return gpu_util, host


def _allreduce_share(
    profile_info: Mapping[str, Any] | None, phases: Sequence[Mapping[str, Any]], device_type: str
) -> float | None:
    """The verdict's communication share. On CUDA: the exposed share measured on the trace's timeline
    (profiling.exposed_communication: collective kernels not hidden behind compute on other streams);
    the all_reduce phase's device time would count an all-reduce that overlaps backward in full. On the
    CPU (gloo): the all_reduce phase's host share, as before. None when not measured."""
    if device_type == "cuda":
        return (profile_info or {}).get("exposed_comm_share")
    return _phase_share(phases, "all_reduce", False)


def _phase_share(phases: Sequence[Mapping[str, Any]], name: str, device: bool) -> float | None:
    for row in phases:
        if row.get("phase") == name and row.get("calls"):
            return row.get("device_share_of_step" if device else "cpu_share_of_step")
    return None


# The process tree's CPU (monitor.py), summed over the ranks of rank 0's node for the CPU verdict. cpu_pct (the
# whole host's) and the byte counters (host-wide) are rank 0's alone, as every rank's would be the same; the
# tree's memory (rss_gib, pss_gib) stays rank 0's, with the max the sweep tables read (a sum of the ranks'
# maxes would be a bound, not a peak).
_TREE_KEYS = ("proc_cpu_pct",)


def _node_host(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rank 0's host summary with its process tree's keys summed over `summaries` (every rank on its node).

    Under torchrun the ranks are siblings, each sampling its own tree (its loader workers included), so
    rank 0's tree alone is 1/N of the job's CPU use against the node's whole allowance (`--nproc 2` read
    0.54 cores of 2 and called its own second rank "other processes"). The sum of each tree's mean is the
    mean of the sum (one mean per rank over the same run); a max of the sum is not known from the ranks'
    maxes, so a summed key keeps its mean alone, with `ranks`: how many trees it adds up."""
    host = dict(summaries[0].get("host") or {})
    if len(summaries) < 2:
        return host
    for key in _TREE_KEYS:
        means = [((u.get("host") or {}).get(key) or {}).get("mean") for u in summaries]
        if all(m is not None for m in means):
            host[key] = {"mean": float(sum(means)), "ranks": len(means)}
        else:  # a rank that did not sample it: a partial sum would understate the node's use
            host.pop(key, None)
    return host


def merge_utilization(per_rank: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """One summary for the job: every rank's GPU rows (each rank samples only its own GPUs) and the host
    figures of rank 0's node, its process tree's CPU and memory summed over every rank on that node (a
    summary's `hostname`, monitor.py; rank 0 first). Ranks on other hosts are left out of the host sums."""
    present = [(u, u.get("hostname")) for u in per_rank if u]
    if not present:
        return None
    on_node = {present[0][1]}  # a summary without a hostname (an older writer): one node
    node = [u for u, h in present if h in on_node]
    merged = dict(present[0][0])
    merged["host"] = _node_host(node)
    for key in ("gpus", "gpus_unmapped"):
        rows = [g for u, _ in present for g in u.get(key, [])]
        if rows:
            merged[key] = rows
        else:
            merged.pop(key, None)
    windows = [u.get("measured_window") for u, _ in present]
    if all(windows):
        window = dict(windows[0])
        window["host"] = _node_host([w for (_, h), w in zip(present, windows, strict=True) if h in on_node])
        rows = [g for w in windows for g in w.get("gpus", [])]
        if rows:
            window["gpus"] = rows
        merged["measured_window"] = window
    else:
        merged.pop("measured_window", None)  # some rank marked none: no job-wide window figures
    return merged


def run_device_type(record: Mapping[str, Any]) -> str:
    """The device type the run trained on ("cuda", "cpu"): the launch plan's, which the runner records as
    `launch.device_type` (run/folder.py `plan_dict`), else config.json's resolved `device` (resolved_record).
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
    flops_matmul_image: float | None = None,
    tf32_matmul_enabled: bool = False,
) -> dict[str, Any]:
    """The observability keys of results.json, from the measurements. Pure: no torch, no I/O.

    `timed_step_times_s`: rank 0's measured step times, the noise the profiler's cost is judged against.
    `run_dir`: profile files are recorded relative to it, so the folder can move (readers resolve them
    with `results.in_run_dir`).

    `memory` holds one entry per GPU the job used (every rank's, every DataParallel device's), each the
    peak of the measured window (MeasuredWindow).

    `flops_matmul_image`: the part of `flops_image` in matmuls and attention (the rest is convolutions),
    each held against its own peak (analysis.kind_precisions): in fp32 cuDNN's convolutions run on TF32
    tensor cores when `tf32_enabled` (torch.backends.cudnn.allow_tf32, on by default), cuBLAS's matmuls only
    when `tf32_matmul_enabled` (torch.backends.cuda.matmul.allow_tf32, off by default).

    The verdict's GPU utilisation and process CPU, and images per joule, read the utilisation summary's
    `measured_window` (the measured steps alone). A summary without one (no window marked) has no energy;
    its utilisation, and the CPU figures of a window too short to hold a sample, are the whole block's."""
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
        capability = analysis.parse_capability(gpu_caps[0]) if device_type == "cuda" and gpu_caps else None
        eff = analysis.compute_efficiency(
            flops_image,
            throughput,
            gpu_name=gpu_names[0] if device_type == "cuda" and gpu_names else None,
            precision=analysis.kind_precisions(
                record.get("precision", "fp32"),
                flops_image,
                flops_matmul_image,
                conv_tf32=tf32_enabled,
                matmul_tf32=tf32_matmul_enabled,
                capability=capability,
            ),
            world_size=devices,
        )
        if eff.achieved_tflops is not None:
            out["achieved_tflops"] = eff.achieved_tflops
        if eff.mfu is not None:
            out["mfu"] = eff.mfu
            out["mfu_peak_tflops_per_device"] = eff.peak_tflops_per_device
            out["mfu_peak_precision"] = eff.precision
    # the job's GPUs: every rank's under DDP, every DataParallel device (LaunchPlan.devices)
    out.update(_energy(record, utilization, devices if device_type == "cuda" else None))
    if profile_info:
        timed = list(timed_step_times_s)
        out["profile"] = {
            "phases": profile_info.get("phases"),
            "tables": {k: _relative(v, run_dir) for k, v in (profile_info.get("tables") or {}).items()},
            "trace": _relative(profile_info["trace"], run_dir) if profile_info.get("trace") else None,
            "active_steps": profile_info.get("active_steps"),
            "profiled_step_time_s": profile_info.get("profiled_step_time_s"),
            "timed_step_time_s": sum(timed) / len(timed) if timed else None,
            **analysis.profiler_overhead(profile_info.get("profiled_step_times_s") or [], timed)._asdict(),
        }
        for key in ("comm_kernel_s", "exposed_comm_s", "exposed_comm_share", "exposed_comm_error"):  # CUDA: the trace
            if profile_info.get(key) is not None:
                out["profile"][key] = profile_info[key]
    phases = (profile_info or {}).get("phases") or []
    gpu_util, host = _verdict_scope(utilization)
    peak_fraction = None
    if mems:
        # allocated: the reserved pool keeps blocks cached before the window (see MEMORY_BOUND_FRACTION)
        peak_fraction = max(m["peak_mem_allocated_gib"] / m["mem_total_gib"] for m in mems if m.get("mem_total_gib"))
    m = analysis.Measurements(
        data_time_share=record.get("data_time_share") or 0.0,
        gpu_util_pct_mean=gpu_util,
        allreduce_share=_allreduce_share(profile_info, phases, device_type) if devices > 1 else None,
        peak_mem_fraction=peak_fraction,
        cpu_quota_cores=cpu_quota_cores,
        workers=workers_per_process * processes_per_node,
        processes=processes_per_node,
        mfu=out.get("mfu"),
        device_type=device_type,
        measured_steps=int((record.get("measured") or {}).get("steps") or 0),
        proc_cpu_pct_mean=(host.get("proc_cpu_pct") or {}).get("mean"),
        host_cpu_pct_mean=(host.get("cpu_pct") or {}).get("mean"),
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

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

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from effbench import schema
from effbench.analysis import efficiency as analysis
from effbench.measure.flops import StepFlops
from effbench.measure.monitor import UtilizationSampler, energy_j

if TYPE_CHECKING:
    from effbench.measure.profiling import ProfileInfo

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


@dataclass(frozen=True)
class PeakMemory:
    """One GPU's peak allocated and reserved memory over the measured window, and its size, GiB."""

    cuda_index: int
    allocated_gib: float
    reserved_gib: float
    total_gib: float
    nvml_used_gib: float | None = None
    """The largest used memory NVML reported for the device over the same window (the sampler's samples):
    every allocation on it, torch's pool and what torch's allocator never sees (DALI's buffers, nvJPEG's,
    the CUDA contexts, other processes). None without NVML or without a sample in the window."""

    @property
    def outside_torch_gib(self) -> float:
        """Memory in use beyond torch's reserved pool, at NVML's peak (0 without NVML)."""
        return max(0.0, self.nvml_used_gib - self.reserved_gib) if self.nvml_used_gib is not None else 0.0


def peak_memory(cuda_indices: Sequence[int]) -> list[PeakMemory]:
    """Peak allocated and reserved GiB on each of these GPUs since the last reset; [] on the CPU."""
    if not cuda_indices:
        return []
    import torch

    return [
        PeakMemory(
            cuda_index=i,
            allocated_gib=torch.cuda.max_memory_allocated(i) / 2**30,
            reserved_gib=torch.cuda.max_memory_reserved(i) / 2**30,
            total_gib=torch.cuda.get_device_properties(i).total_memory / 2**30,
        )
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
        self._peaks: dict[int, PeakMemory] = {}

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
            old = self._peaks.get(row.cuda_index)
            if old is not None:
                row = PeakMemory(
                    row.cuda_index,
                    max(old.allocated_gib, row.allocated_gib),
                    max(old.reserved_gib, row.reserved_gib),
                    row.total_gib,
                )
            self._peaks[row.cuda_index] = row
        self.is_open = False

    def peak_memory(self) -> list[PeakMemory]:
        """Each GPU's peaks over the window's spans, with NVML's sampled used memory over the same window;
        [] when no span closed (nothing measured, or the CPU)."""
        self.close()
        peaks = [v for _, v in sorted(self._peaks.items())]
        if not peaks:
            return peaks
        window = self.sampler.summary().measured_window
        nvml = {g.index: g.mem_used_gib.max for g in (window.gpus if window else []) if g.mem_used_gib}
        return [dataclasses.replace(p, nvml_used_gib=nvml.get(p.cuda_index)) for p in peaks]


def profile(
    step: Any,
    loader: Any,
    *,
    device_type: str,
    out_dir: Path | None,
    rank: int,
    active: int,
    clock: Any = None,
    agree: Any = None,
    abort: Any = None,
) -> ProfileInfo:
    """The profiling pass on a fresh pass over the loader; out_dir None (no shared folder) skips files.
    `clock`: the run's timing.DeviceClock (None: the current CUDA device's, or the CPU's); `agree`: how the
    ranks agree on the pass's outcome (DistContext.gather; None: alone); `abort`: a failure inside a step
    (DistContext.step_abort; None: alone)."""
    import tempfile

    from effbench.measure.profiling import run_profile_pass

    kw = {"device_type": device_type, "rank": rank, "active": active, "clock": clock, "agree": agree, "abort": abort}
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="effbench-profile-") as tmp:
            info = run_profile_pass(step, iter(loader), out_dir=Path(tmp), **kw)
        info.trace = None
        info.tables = {}
        return info
    return run_profile_pass(step, iter(loader), out_dir=out_dir, **kw)


def _energy(
    record: schema.Results, utilization: schema.Utilization | None, job_gpus: int | None
) -> tuple[float | None, float | None, str | None]:
    """(energy_j, images_per_j, energy_note) of the measured steps alone (the counter read as the window
    opened and closed, monitor.py; not warm-up, compile, validation) over the same steps' images (every
    rank's), or the note saying why there is none. `job_gpus`: the job's GPU count; None on the CPU."""
    window = utilization.measured_window if utilization else None
    energy = None
    if utilization and window is not None:
        # the window's GPUs, and the block's unmapped ones (a GPU never sampled voids the sum)
        energy = energy_j(schema.Utilization(gpus=window.gpus, gpus_unmapped=utilization.gpus_unmapped), job_gpus)
    sampled = len(utilization.gpus) if utilization else 0
    note = None
    if energy is None and job_gpus is not None and utilization and sampled < job_gpus:
        # e.g. a failed multi-rank run (no gather after a failure: rank 0's sampler alone), a rank whose
        # NVML did not start; a partial sum would make energy per image look N times better
        note = f"not measured on every GPU: {sampled} of the job's {job_gpus} sampled"
    elif energy is None and job_gpus is not None and utilization and window is None:
        note = "no measured window was marked (no measured step ended)"
    elif energy is None and job_gpus is not None and utilization:
        note = _no_counter_note(window.gpus if window else utilization.gpus, utilization.gpus)
    per_j = None
    if energy is not None:
        per_j = analysis.images_per_joule(int(record.measured.images if record.measured else 0), energy)
    return energy, per_j, note


def _no_counter_note(gpus: Sequence[schema.GpuUse], labelled: Sequence[schema.GpuUse]) -> str | None:
    """Why GPUs that were sampled gave no energy: a MIG instance has no power sensor of its own (NVML measures
    power and energy per physical GPU, shared by every instance: monitor._GpuProbe), an older GPU no energy
    counter (nvmlDeviceGetTotalEnergyConsumption is Volta and newer)."""
    labels = {g.index: g for g in labelled}  # the block's entries carry each GPU's name and UUIDs
    missing = [labels.get(g.index, g) for g in gpus if g.energy_j is None]
    if not missing:
        return None
    if any(str(g.nvml_uuid or "").startswith("MIG-") for g in missing):
        return (
            "not measured on a MIG instance: NVML measures power and energy per physical GPU, shared by every "
            "instance on it, so an instance's own share cannot be read"
        )
    names = ", ".join(sorted({str(g.name or f"GPU {g.index}") for g in missing}))
    return f"NVML gave no energy counter for {names} (Volta and newer have one)"


def _verdict_scope(utilization: schema.Utilization | None) -> tuple[float | None, schema.HostUse]:
    """(mean GPU utilisation, host summary) for the verdict: the measured window's samples, as the data-wait
    share it is set against. A window too short to hold a CPU sample (a few CPU steps) takes the whole
    block's host figures rather than give no CPU verdict at all; no window at all: the whole block's."""
    if utilization is None:
        return None, schema.HostUse()
    scope: schema.Utilization | schema.MeasuredWindowUse = utilization.measured_window or utilization
    gpu_util = None
    means = [g.util_pct.mean for g in scope.gpus if g.util_pct and g.util_pct.mean is not None]
    if means:
        gpu_util = sum(means) / len(means)
    host = scope.host
    if not host.proc_cpu_pct:
        host = utilization.host
    return gpu_util, host


def _add_clock_note(out: schema.Results, utilization: schema.Utilization | None, device_type: str) -> str | None:
    """analysis.clock_note over the measured window's GPUs only (set on `out`, summarize's copy, and returned):
    warm-up, validation and the gathers between epochs idle the GPU and drop its clock, so the whole block's
    mean would flag a healthy run."""
    window = utilization.measured_window if utilization and device_type == "cuda" else None
    if window is None:
        return None
    clocks = [
        analysis.GpuClock(g.index, g.sm_clock_mhz.mean if g.sm_clock_mhz else None, g.sm_clock_max_mhz,
                          g.clock_event_reasons)
        for g in window.gpus
    ]  # fmt: skip
    note = analysis.clock_note(clocks)
    if note is not None:
        out.clock_note = note
    return note


def _allreduce_share(
    profile: schema.Profile | None, phases: Sequence[schema.ProfilePhase], device_type: str
) -> float | None:
    """The verdict's communication share. On CUDA: the exposed share measured on the trace's timeline
    (profiling.exposed_communication: collective kernels not hidden behind the training streams' compute,
    per step over the timed step, profiling.exposed_share); the all_reduce phase's device time would count an
    all-reduce that overlaps backward in full. On the CPU (gloo): the all_reduce phase's host share, as
    before. None when not measured."""
    if device_type == "cuda":
        return profile.exposed_comm_share if profile is not None else None
    return _phase_share(phases, "all_reduce", False)


def _phase_share(phases: Sequence[schema.ProfilePhase], name: str, device: bool) -> float | None:
    for row in phases:
        if row.phase == name and row.calls:
            return row.device_share_of_step if device else row.cpu_share_of_step
    return None


def _tree_mean(host: schema.HostUse) -> float | None:
    """The process tree's CPU mean, the one figure summed over the ranks of a node (_node_host)."""
    return host.proc_cpu_pct.mean if host.proc_cpu_pct else None


def _node_host(hosts: Sequence[schema.HostUse]) -> schema.HostUse:
    """Rank 0's host summary with its process tree's CPU summed over `hosts` (every rank on its node).

    Under torchrun the ranks are siblings, each sampling its own tree (its loader workers included), so
    rank 0's tree alone is 1/N of the job's CPU use against the node's whole allowance (`--nproc 2` read
    0.54 cores of 2 and called its own second rank "other processes"). The sum of each tree's mean is the
    mean of the sum (one mean per rank over the same run); a max of the sum is not known from the ranks'
    maxes, so the summed figure keeps its mean alone, with `ranks`: how many trees it adds up. cpu_pct (the
    whole host's) and the byte counters (host-wide) are rank 0's alone, as every rank's would be the same;
    the tree's memory (rss_gib, pss_gib) stays rank 0's, with the max the sweep tables read (a sum of the
    ranks' maxes would be a bound, not a peak)."""
    host = hosts[0].model_copy()
    if len(hosts) < 2:
        return host
    means = [_tree_mean(h) for h in hosts]
    if all(m is not None for m in means):
        host.proc_cpu_pct = schema.MeanMax(mean=float(sum(m for m in means if m is not None)), ranks=len(means))
    elif host.proc_cpu_pct is not None:  # a rank that did not sample it: a partial sum would understate it
        host.proc_cpu_pct = None
        host.model_fields_set.discard(_PROC_CPU)
    return host


# the one host figure summed over a node's ranks (the process tree's CPU), by the field's name in the model
_PROC_CPU = next(n for n in schema.HostUse.model_fields if n.startswith("proc_cpu"))


def merge_utilization(per_rank: Sequence[schema.Utilization | None]) -> schema.Utilization | None:
    """One summary for the job: every rank's GPU rows (each rank samples only its own GPUs) and the host
    figures of rank 0's node, its process tree's CPU and memory summed over every rank on that node (a
    summary's `hostname`, monitor.py; rank 0 first). Ranks on other hosts are left out of the host sums."""
    present = [u for u in per_rank if u]
    if not present:
        return None
    on_node = present[0].hostname  # a summary without a hostname (an older writer): one node
    node = [u for u in present if u.hostname == on_node]
    merged = present[0].model_copy()
    merged.host = _node_host([u.host for u in node])
    gpus = [g for u in present for g in u.gpus]
    unmapped = [g for u in present for g in u.gpus_unmapped]
    if gpus:  # a rank's summary holds no empty list: absent stays absent
        merged.gpus = gpus
    if unmapped:
        merged.gpus_unmapped = unmapped
    windows = [u.measured_window for u in present]
    if all(w is not None for w in windows):
        in_window = [w for w in windows if w is not None]
        window = in_window[0].model_copy()
        window.host = _node_host([w.host for u, w in zip(present, in_window, strict=True) if u.hostname == on_node])
        rows = [g for w in in_window for g in w.gpus]
        if rows:
            window.gpus = rows
        merged.measured_window = window
    elif merged.measured_window is not None:  # some rank marked none: no job-wide window figures (absent)
        merged.measured_window = None
        merged.model_fields_set.discard(_field_holding(schema.Utilization, schema.MeasuredWindowUse))
    return merged


def _field_holding(model: type[BaseModel], section: type[BaseModel]) -> str:
    """The name of `model`'s field that holds a `section`: the field named by the model, not retyped here."""
    return next(n for n, f in model.model_fields.items() if section in typing.get_args(f.annotation))


def run_device_type(record: schema.Results) -> str:
    """The device type the run trained on ("cuda", "cpu"): the launch plan's, which the runner records as
    `launch.device_type` (run/folder.py `plan_dict`), else config.json's resolved `device` (resolved_record).
    Never read from the `device` label: a DataParallel run's starts with its GPU count ("1 x cuda:0 (...)
    (DataParallel)") and a one-GPU one has strategy "single", so a CUDA run read as a CPU one (no MFU)."""
    return str(record.launch.device_type or record.config.device or "cpu")


def summarize(
    record: schema.Results,
    *,
    flops_image: float | None,
    flops_forward_image: float | None = None,
    utilization: schema.Utilization | None,
    memory: Sequence[PeakMemory | None],
    profile_info: ProfileInfo | None,
    cpu_quota_cores: float | None,
    workers_per_process: int,
    processes_per_node: int,
    tf32_enabled: bool,
    timed_step_times_s: Sequence[float] = (),
    run_dir: Path | None = None,
    flops_matmul_image: float | None = None,
    tf32_matmul_enabled: bool = False,
    verdict: bool = True,
    roofs: schema.Roofs | None = None,
    roofs_error: str | None = None,
) -> schema.Results:
    """`record` (not changed) with its observability fields set from the measurements. Pure: no torch, no I/O.

    `timed_step_times_s`: rank 0's measured step times, the noise the profiler's cost is judged against.
    `run_dir`: profile files are recorded relative to it, so the folder can move (readers resolve them
    with `results.in_run_dir`). `verdict` False (--data-only: no model ran) leaves the verdict out.

    `memory` holds one entry per GPU the job used (every rank's, every DataParallel device's), each the
    peak of the measured window (MeasuredWindow).

    `flops_matmul_image`: the part of `flops_image` in matmuls and attention (the rest is convolutions),
    each held against its own peak (analysis.kind_precisions): in fp32 cuDNN's convolutions run on TF32
    tensor cores when `tf32_enabled` (torch.backends.cudnn.allow_tf32, on by default), cuBLAS's matmuls only
    when `tf32_matmul_enabled` (torch.backends.cuda.matmul.allow_tf32, off by default).

    The verdict's GPU utilisation and process CPU, and images per joule, read the utilisation summary's
    `measured_window` (the measured steps alone). A summary without one (no window marked) has no energy;
    its utilisation, and the CPU figures of a window too short to hold a sample, are the whole block's.

    `roofs`: this machine's (measure/roofs.py); with the profiling pass's ops they make the roofline section
    (analysis/roofline.py), each kind held against its precision's compute roof (the MFU's column rule)."""
    out = record.model_copy()
    device_type = run_device_type(record)
    throughput = record.throughput_img_s
    devices = int(record.devices or record.world_size or 1)

    if utilization:
        out.utilization = utilization
    mems = [m for m in memory if m]
    if mems:
        out.peak_mem_gib = max(m.allocated_gib for m in mems)
        out.peak_mem_reserved_gib = max(m.reserved_gib for m in mems)
        nvml = [m.nvml_used_gib for m in mems if m.nvml_used_gib is not None]
        if nvml:
            out.peak_mem_nvml_used_gib = max(nvml)
    if flops_image is not None:
        out.flops_per_image = flops_image
        if flops_forward_image is not None:  # to hold against published forward GMACs (x 2)
            out.flops_forward_per_image = flops_forward_image
        job = _job_devices(record, device_type, devices, flops_image, flops_matmul_image, tf32_enabled,
                           tf32_matmul_enabled)  # fmt: skip
        eff = analysis.job_efficiency(flops_image, throughput, job)
        if eff.achieved_tflops is not None:
            out.achieved_tflops = eff.achieved_tflops
        if eff.mfu is not None:
            out.mfu = eff.mfu
            out.mfu_peak_tflops_per_device = eff.peak_tflops_per_device
            out.mfu_peak_precision = eff.precision
            out.mfu_peak_gpu = eff.gpu_model
    clock_note = _add_clock_note(out, utilization, device_type)  # beside MFU in the report, and in the verdict
    # the job's GPUs: every rank's under DDP, every DataParallel device (LaunchPlan.devices)
    energy, per_j, note = _energy(record, utilization, devices if device_type == "cuda" else None)
    if note is not None:
        out.energy_note = note
    if energy is not None:
        out.energy_j = energy
        if per_j is not None:
            out.images_per_j = per_j
    if profile_info:
        out.profile = _profile(profile_info, timed_step_times_s, run_dir)
    _add_roofline(out, profile_info, roofs, roofs_error, tf32=(tf32_enabled, tf32_matmul_enabled),
                  timed_step_times_s=timed_step_times_s)  # fmt: skip
    phases = profile_info.phases if profile_info else []
    gpu_util, host = _verdict_scope(utilization)
    peak_fraction, outside_gib = None, None
    if mems:
        # allocated: the reserved pool keeps blocks cached before the window (see MEMORY_BOUND_FRACTION); plus
        # what NVML saw beyond torch's pool (DALI's and nvJPEG's buffers), which torch's allocator never counts
        sized = [m for m in mems if m.total_gib]
        if sized:
            fullest = max(sized, key=lambda m: (m.allocated_gib + m.outside_torch_gib) / m.total_gib)
            peak_fraction = (fullest.allocated_gib + fullest.outside_torch_gib) / fullest.total_gib
            outside_gib = fullest.outside_torch_gib if fullest.nvml_used_gib is not None else None
    m = analysis.Measurements(
        data_time_share=record.data_time_share or 0.0,
        gpu_util_pct_mean=gpu_util,
        allreduce_share=_allreduce_share(out.profile if profile_info else None, phases, device_type)
        if devices > 1
        else None,
        peak_mem_fraction=peak_fraction,
        peak_mem_outside_torch_gib=outside_gib,
        cpu_quota_cores=cpu_quota_cores,
        workers=workers_per_process * processes_per_node,
        processes=processes_per_node,
        mfu=out.mfu,
        device_type=device_type,
        measured_steps=int(record.measured.steps if record.measured else 0),
        proc_cpu_pct_mean=host.proc_cpu_pct.mean if host.proc_cpu_pct else None,
        host_cpu_pct_mean=host.cpu_pct.mean if host.cpu_pct else None,
        threads_per_process=record.launch.threads_per_proc,
        omp_wait_policy=record.env.env_vars.get("OMP_WAIT_POLICY") if record.env.env_vars else None,
        clock_note=clock_note,
    )
    v = analysis.verdict(m)
    if v is not None and verdict:  # no measured step: no verdict
        out.verdict = schema.Verdict(bottleneck=v.bottleneck, evidence=v.evidence, advice=v.advice)
    return out


def _job_devices(
    record: schema.Results,
    device_type: str,
    devices: int,
    flops_image: float,
    flops_matmul_image: float | None,
    conv_tf32: bool,
    matmul_tf32: bool,
) -> list[analysis.JobDevice]:
    """The job's devices for its MFU peak, device i by whatever names it: rank i's own row (a job may mix
    models, and its peak is the sum of theirs), else the node's GPU at CUDA index i where device i is on
    the node env.json describes (DataParallel drives cuda:0..n-1 from one process; a one-node job's rank i
    trains on cuda:i, its local rank), else none, so no MFU (a failed multi-node run whose other ranks
    never reported). Before, every device without a row took the node's first GPU's peak. None on the CPU."""

    def on(name: str | None, capability: str | None, sm_count: int | None) -> analysis.JobDevice:
        mix = analysis.kind_precisions(
            record.precision or "fp32",
            flops_image,
            flops_matmul_image,
            conv_tf32=conv_tf32,
            matmul_tf32=matmul_tf32,
            capability=analysis.parse_capability(capability) if capability else None,
        )
        return analysis.JobDevice(name, sm_count, mix)

    if device_type != "cuda":
        return [on(None, None, None)] * devices
    gpus = record.env.gpus
    named = {r.rank: r for r in record.ranks if r.gpu_name}
    on_node = record.launch.mode == "dp" or (record.launch.nnodes or 1) == 1

    def device(i: int) -> analysis.JobDevice:
        if (r := named.get(i)) is not None:
            return on(r.gpu_name, r.gpu_capability, r.gpu_sm_count)
        if on_node and i < len(gpus):
            return on(gpus[i].name, gpus[i].capability, gpus[i].sm_count)
        return on(None, None, None)

    return [device(i) for i in range(devices)]


def _add_roofline(
    out: schema.Results,
    info: ProfileInfo | None,
    roofs: schema.Roofs | None,
    roofs_error: str | None,
    *,
    tf32: tuple[bool, bool],
    timed_step_times_s: Sequence[float] = (),
) -> None:
    """The record's roofs and, with the profiling pass's ops, its roofline (in place on `out`, summarize's copy),
    on CUDA held against the timed step (its mean, and its data wait by the record's data share) where there is one."""
    if roofs is not None:
        out.roofs = roofs
    if roofs_error:
        out.roofs_error = roofs_error
    if info is None or info.ops is None or not info.profiled_step_time_s:
        return
    device_type = run_device_type(out)
    caps = [g.capability for g in out.env.gpus]
    capability = analysis.parse_capability(caps[0]) if device_type == "cuda" and caps else None
    # Only a device-time table (CUDA) is held against the timed step: its kernel times are the profiler-free ones.
    # On the CPU each kind's time is host time under the profiler, slowed as the profiled step is, so the profiled
    # step is the one on the same clock (against the timed one the shares overran 100%, the remainder went negative).
    timed = [float(t) for t in timed_step_times_s] if device_type == "cuda" else []
    timed_s = sum(timed) / len(timed) if timed and sum(timed) > 0 else None
    data_s = timed_s * out.data_time_share if timed_s is not None and out.data_time_share is not None else None
    out.roofline = roofline_of(
        info, roofs, out.precision or "fp32", device_type=device_type, conv_tf32=tf32[0], matmul_tf32=tf32[1],
        capability=capability, timed_step_s=timed_s, timed_data_wait_s=data_s,
    )  # fmt: skip


def roofline_of(
    info: ProfileInfo,
    roofs: schema.Roofs | None,
    precision: str,
    *,
    device_type: str,
    conv_tf32: bool,
    matmul_tf32: bool,
    capability: tuple[int, int] | None = None,
    timed_step_s: float | None = None,
    timed_data_wait_s: float | None = None,
) -> schema.Roofline:
    """The profiled step per kind (analysis/roofline.py) against `roofs`: the convolutions and the rest against
    the roof of the column their FLOPs run at, the matmuls against theirs (analysis.kind_precisions' rule: on
    CUDA an fp32 run's convolutions use TF32 when cuDNN may, its matmuls only when cuBLAS may).

    `timed_step_s`: the timed loop's mean step, which the shares, the time outside ops, the verdict and the
    ceiling are held against (issue 45 N2, as exposed_share does for communication): the pass's own step is
    inflated by record_shapes, profile_memory and with_flops, most on the small steps of a fast GPU.
    `timed_data_wait_s`: its data wait. Without them (the selftest's own loop), the profiled step's."""
    from effbench.analysis import roofline

    trace = info.ops
    by_precision = {c.precision: c.tflops for c in (roofs.compute if roofs else []) if c.tflops}
    if device_type == "cuda":
        conv_col = analysis.peak_precision(precision, tf32_enabled=conv_tf32, capability=capability)
        mm_col = analysis.peak_precision(precision, tf32_enabled=matmul_tf32, capability=capability)
    else:
        conv_col = mm_col = precision
    steps = max(int(trace.steps), 1)
    profiled_s = float(info.profiled_step_time_s or 0.0)
    data_s = trace.data_wait_s / steps
    if timed_step_s:
        data_s = timed_data_wait_s if timed_data_wait_s is not None else min(data_s, timed_step_s)
    return roofline.roofline(
        trace.ops,
        steps=steps,
        step_time_s=timed_step_s or profiled_s,
        profiled_step_time_s=profiled_s if timed_step_s else None,
        data_wait_s=data_s,
        time_basis=trace.time_basis,
        compute_roof_tflops=by_precision.get(conv_col),
        compute_roof_precision=conv_col,
        matmul_roof_tflops=by_precision.get(mm_col),
        memory_roof_gb_s=roofs.memory_gb_s if roofs else None,
        exposed_s={kind: t / steps for kind, t in trace.exposed_s.items()},
    )


def _profile(info: ProfileInfo, timed_step_times_s: Sequence[float], run_dir: Path | None) -> schema.Profile:
    """The record's profile section: the pass's phases and files (relative to the run folder), its step
    time beside the timed steps' mean, and the profiler's own cost (analysis.profiler_overhead)."""
    timed = list(timed_step_times_s)
    profile = schema.Profile(
        phases=info.phases,
        tables={k: _relative(v, run_dir) for k, v in info.tables.items()},
        trace=_relative(info.trace, run_dir) if info.trace else None,
        active_steps=info.active_steps,
        profiled_step_time_s=info.profiled_step_time_s,
        timed_step_time_s=sum(timed) / len(timed) if timed else None,
    )
    # analysis/efficiency's overhead (a figure or a note why none), keyed by the record's own field names
    overhead = analysis.profiler_overhead(info.profiled_step_times_s, timed)
    profile = schema.Profile.model_validate({**profile.model_dump(exclude_unset=True), **overhead._asdict()})
    if info.comm is not None:  # CUDA: the collectives on the trace's timeline
        for f in dataclasses.fields(info.comm):
            if getattr(info.comm, f.name) is not None:
                setattr(profile, f.name, getattr(info.comm, f.name))
        from effbench.measure.profiling import exposed_share

        share = exposed_share(info.comm.exposed_comm_s, info.active_steps, timed)
        if share is not None:
            profile.exposed_comm_share = share
    return profile


def _relative(path: Any, run_dir: Path | None) -> str:
    """`path` relative to the run folder when it lies inside it (else as given)."""
    p = Path(path)
    if run_dir is not None:
        try:
            return str(p.resolve().relative_to(Path(run_dir).resolve()))
        except ValueError:
            pass
    return str(p)

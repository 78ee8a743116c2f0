"""Pure analysis: measurements in, numbers and verdicts out. No torch, no I/O.

- `peak_tflops` / `compute_efficiency`: achieved TFLOP/s and model FLOPs utilisation (MFU) against a
  datasheet peak, only for GPUs whose datasheet is in `PEAK_TFLOPS` (an unknown GPU gets no MFU,
  never a guessed one).
- `images_per_joule`: a ratio, None when an input is missing; `profiler_overhead`: the profiler's
  cost only when it is outside the noise of the timed steps.
- `verdict`: one bottleneck label with the numbers behind it and what to try next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from effbench import troubleshooting
from effbench.analysis import stats

# --------------------------------------------------------------------------------------------------
# Peak throughput
# --------------------------------------------------------------------------------------------------

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

# Dense (no 2:4 structured sparsity) peak TFLOP/s per GPU, from NVIDIA's datasheets. Datasheets print
# tensor-core figures "with sparsity" (marked *); the dense figure is half of that. "fp32" is the
# non-tensor-core FP32 rate; "tf32", "bf16", "fp16" are tensor-core rates (FP32 accumulate). A
# precision a GPU lacks (TF32/BF16 before Ampere) is absent, so its peak is None.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), SXM column:
    # FP32 67, TF32 989*, BF16 1979*, FP16 1979* (* with sparsity).
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    # Same datasheet, PCIe column: FP32 51, TF32 756*, BF16 1513*, FP16 1513*.
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    # Same datasheet, H100 NVL column (per GPU): FP32 60, TF32 835*, BF16 1671*, FP16 1671*.
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    # NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), H200 SXM column:
    # FP32 67, TF32 989*, BF16 1979*, FP16 1979* (the same GH100 compute as H100 SXM).
    "H200 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    # Same datasheet, H200 NVL column: FP32 60, TF32 835*, BF16 1671*, FP16 1671*.
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    # NVIDIA GH200 Grace Hopper Superchip datasheet (nvidia.com/en-us/data-center/grace-hopper-superchip/):
    # FP32 67, TF32 494 | 989*, BF16 990 | 1979*, FP16 990 | 1979*.
    "GH200": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/): the same peaks for
    # 40GB/80GB, SXM and PCIe: FP32 19.5, TF32 156 | 312*, BF16 312 | 624*, FP16 312 | 624*.
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    # NVIDIA V100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/v100/): SXM2 FP32 15.7,
    # Tensor Performance (FP16 mixed precision) 125; no TF32 or BF16 on Volta.
    "V100 SXM2": {"fp32": 15.7, "fp16": 125.0},
    # Same datasheet, PCIe column: FP32 14, Tensor Performance 112.
    "V100 PCIe": {"fp32": 14.0, "fp16": 112.0},
    # Same datasheet, V100S PCIe column: FP32 16.4, Tensor Performance 130.
    "V100S PCIe": {"fp32": 16.4, "fp16": 130.0},
    # NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/): FP32 91.6, TF32 183 | 366*,
    # BF16 362.05 | 733*, FP16 362.05 | 733*.
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05},
    # NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4/): FP32 30.3, TF32 120*, BF16 242*, FP16 242*.
    "L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
    # NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu/): FP32 31.2,
    # TF32 62.5 | 125*, BF16 125 | 250*, FP16 125 | 250*.
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
    # NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4/): FP32 8.1, mixed FP16/FP32 65;
    # no TF32 or BF16 on Turing.
    "T4": {"fp32": 8.1, "fp16": 65.0},
    # NVIDIA Ada GPU Architecture whitepaper (v2.1), appendix table for RTX 4090: FP32 82.6,
    # TF32 82.6, BF16 165.2, FP16 165.2 (FP16 tensor with FP32 accumulate; PyTorch accumulates in FP32).
    "RTX 4090": {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
    # NVIDIA Ampere GA102 GPU Architecture whitepaper (v2), table for RTX 3090: FP32 35.6,
    # TF32 35.6, BF16 71, FP16 71 (FP16 tensor with FP32 accumulate).
    "RTX 3090": {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
}


def _sxm(t: set[str]) -> bool:
    # NVML names the SXM part "NVIDIA H100 80GB HBM3"; some tools write "H100 SXM5".
    return "hbm3" in t or any(x.startswith("sxm") for x in t)


# One rule per name pattern, the first that applies decides, so a family's specific rules come before its
# catch-all: a family whose form factor the name does not say (a plain "NVIDIA H100", a V100 SXM3 at other
# clocks) maps to None, never to a sibling's peak.
_GPU_RULES: tuple[tuple[Callable[[set[str]], bool], str | None], ...] = (
    # A MIG instance ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", NVML's and torch's name for a slice) has a share of
    # the GPU's SMs that its name does not give: the whole GPU's peak would read MFU up to 7x low, so its
    # row is none (mig_share scales the parent GPU's peak by the SMs the instance reports).
    (lambda t: "mig" in t, None),
    (lambda t: "gh200" in t, "GH200"),
    (lambda t: {"h200", "nvl"} <= t, "H200 NVL"),
    (lambda t: "h200" in t, "H200 SXM"),
    (lambda t: {"h100", "pcie"} <= t, "H100 PCIe"),
    (lambda t: {"h100", "nvl"} <= t, "H100 NVL"),
    (lambda t: "h100" in t and _sxm(t), "H100 SXM"),
    (lambda t: "h100" in t, None),
    (lambda t: "a100" in t, "A100"),
    (lambda t: "v100s" in t, "V100S PCIe"),
    (lambda t: {"v100", "sxm2"} <= t, "V100 SXM2"),
    (lambda t: {"v100", "pcie"} <= t, "V100 PCIe"),
    (lambda t: "v100" in t, None),  # SXM3 (DGX-2) and others run at other clocks
    (lambda t: "l40s" in t, "L40S"),
    (lambda t: "l4" in t, "L4"),
    (lambda t: "a10" in t, "A10"),
    (lambda t: "t4" in t, "T4"),
    (lambda t: {"rtx", "4090"} <= t and not t & {"ti", "d", "laptop"}, "RTX 4090"),
    (lambda t: {"rtx", "3090"} <= t and not t & {"ti", "laptop"}, "RTX 3090"),
)


def _tokens(gpu_name: str) -> set[str]:
    return set(re.split(r"[\s\-_/]+", gpu_name.strip().lower()))


def gpu_model(gpu_name: str | None) -> str | None:
    """The `PEAK_TFLOPS` key for an NVML / torch device name, or None when it is not in the table.

    Names are matched by tokens, so "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H200",
    "NVIDIA A100-SXM4-80GB" and "Tesla V100-SXM2-32GB" resolve, while "NVIDIA A10G" or a plain
    "NVIDIA H100" (form factor unknown) do not: a wrong peak is worse than none.
    """
    if not gpu_name:
        return None
    return _model_of(_tokens(gpu_name))


def _model_of(tokens: set[str]) -> str | None:
    return next((model for applies, model in _GPU_RULES if applies(tokens)), None)


# The SMs of the whole GPU each MIG-capable row's datasheet peak is for: NVIDIA A100 Tensor Core GPU
# Architecture whitepaper (A100: 108 SMs of GA100's 128), NVIDIA H100 Tensor Core GPU Architecture
# whitepaper (H100 SXM5: 132 SMs, H100 PCIe: 114), the H200/GH200/H100 NVL datasheets (the SXM5 GH100, 132).
# A tensor-core peak is SMs x per-SM rate x clock, and a MIG instance runs its SMs at the GPU's clocks.
DATASHEET_SMS: dict[str, int] = {
    "A100": 108, "H100 SXM": 132, "H100 PCIe": 114, "H100 NVL": 132, "H200 SXM": 132, "H200 NVL": 132, "GH200": 132,
}  # fmt: skip


@dataclass(frozen=True)
class MigShare:
    """A MIG instance's share of its GPU: the GPU's row and SMs, and the SMs CUDA reports for the instance."""

    parent: str
    sm_count: int
    parent_sms: int

    @property
    def label(self) -> str:
        return f"{self.parent} MIG ({self.sm_count}/{self.parent_sms} SMs)"


def mig_share(gpu_name: str | None, sm_count: int | None) -> MigShare | None:
    """For a MIG instance's name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") and the SMs CUDA reports for it
    (cudaDeviceProp.multiProcessorCount, the instance's own: 14 for A100's 1g.5gb), its share of the
    parent GPU; None for a whole GPU, an unknown parent, or an SM count that does not fit the parent."""
    if not gpu_name or "mig" not in (tokens := _tokens(gpu_name)):
        return None
    parent = _model_of(tokens - {"mig"}) or ""
    full = DATASHEET_SMS.get(parent)
    if full is None or sm_count is None or not 0 < sm_count <= full:
        return None
    return MigShare(parent, sm_count, full)


def peak_tflops(gpu_name: str | None, precision: str, sm_count: int | None = None) -> float | None:
    """Dense datasheet peak TFLOP/s of one GPU at `precision` (fp32 | tf32 | bf16 | fp16), else None.

    A MIG instance's peak is its parent's times its share of the SMs (`mig_share`, which needs the
    instance's `sm_count`); without the count it has none.

    "fp32" means the non-tensor-core FP32 rate, even on Ampere and later. PyTorch runs fp32 matmuls
    in full FP32 by default (`torch.backends.cuda.matmul.allow_tf32 = False`) but lets cuDNN run fp32
    convolutions on TF32 tensor cores (`torch.backends.cudnn.allow_tf32 = True`), so for a CNN in fp32
    the honest denominator is usually tf32: pass `peak_precision("fp32", tf32_enabled=...)`.
    """
    mig = mig_share(gpu_name, sm_count)
    if mig is not None:
        full = PEAK_TFLOPS[mig.parent].get(precision.lower())
        return None if full is None else full * mig.sm_count / mig.parent_sms
    model = gpu_model(gpu_name)
    if model is None:
        return None
    return PEAK_TFLOPS[model].get(precision.lower())


# Peak memory bandwidth per GPU, GB/s (1e9 bytes/s), from the same datasheets as PEAK_TFLOPS: the roofline's
# datasheet memory roof beside the measured one (measure/roofs.py). A row whose datasheet gives one figure for
# parts with different memories (GH200: 4 TB/s HBM3 or 4.9 TB/s HBM3e; A100 40GB or 80GB) is resolved by the
# name's memory size (`peak_mem_gb_s`) or left out: a wrong roof is worse than none.
PEAK_MEM_GB_S: dict[str, float] = {
    # NVIDIA H100 Tensor Core GPU datasheet: GPU memory bandwidth 3.35 TB/s (SXM), 2 TB/s (PCIe), 3.9 TB/s (NVL).
    "H100 SXM": 3350.0,
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    # NVIDIA H200 Tensor Core GPU datasheet: GPU memory bandwidth 4.8 TB/s (H200 SXM and H200 NVL).
    "H200 SXM": 4800.0,
    "H200 NVL": 4800.0,
    # NVIDIA V100 Tensor Core GPU datasheet: memory bandwidth 900 GB/s (SXM2, PCIe), 1134 GB/s (V100S PCIe).
    "V100 SXM2": 900.0,
    "V100 PCIe": 900.0,
    "V100S PCIe": 1134.0,
    # NVIDIA L40S datasheet: GPU memory bandwidth 864 GB/s.
    "L40S": 864.0,
    # NVIDIA L4 datasheet: GPU memory bandwidth 300 GB/s.
    "L4": 300.0,
    # NVIDIA A10 datasheet: GPU memory bandwidth 600 GB/s.
    "A10": 600.0,
    # NVIDIA T4 datasheet: GPU memory bandwidth 320+ GB/s.
    "T4": 320.0,
    # NVIDIA Ada GPU Architecture whitepaper (v2.1), RTX 4090: memory bandwidth 1008 GB/s.
    "RTX 4090": 1008.0,
    # NVIDIA Ampere GA102 GPU Architecture whitepaper (v2), RTX 3090: memory bandwidth 936 GB/s.
    "RTX 3090": 936.0,
}
# NVIDIA A100 Tensor Core GPU datasheet, GPU memory bandwidth: A100 40GB PCIe 1,555 GB/s, 80GB PCIe 1,935 GB/s,
# 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; NVML names the part "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe".
A100_MEM_GB_S = {("40gb", False): 1555.0, ("40gb", True): 1555.0, ("80gb", False): 2039.0, ("80gb", True): 1935.0}


def peak_mem_gb_s(gpu_name: str | None) -> float | None:
    """Datasheet memory bandwidth of one whole GPU, GB/s; None for an unknown GPU, an A100 whose name gives no
    memory size, a GH200 (two memories, one name) or a MIG instance (its share of the memory slices is not its
    share of the SMs)."""
    if not gpu_name:
        return None
    tokens = _tokens(gpu_name)
    if "mig" in tokens:
        return None
    model = _model_of(tokens)
    if model == "A100":
        size = next((t for t in ("40gb", "80gb") if any(tok.startswith(t) for tok in tokens)), None)
        return A100_MEM_GB_S.get((size, "pcie" in tokens)) if size else None
    return PEAK_MEM_GB_S.get(model) if model else None


TF32_MIN_CAPABILITY = (8, 0)
"""TF32 tensor cores arrive with Ampere (sm_80); on Volta/Turing (T4 is 7.5) `cudnn.allow_tf32` changes
nothing and fp32 convolutions run at the plain FP32 rate (NVIDIA Ampere architecture whitepaper, "TF32")."""


def parse_capability(text: str | None) -> tuple[int, int] | None:
    """ "8.0" (env.json's gpus[*].capability) -> (8, 0); None when absent or unreadable."""
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except (TypeError, ValueError):
        return None


def peak_precision(precision: str, *, tf32_enabled: bool, capability: tuple[int, int] | None = None) -> str:
    """The `PEAK_TFLOPS` column for a run: "tf32" for an fp32 run whose convolutions may use TF32, on a
    device that has TF32 (compute capability >= 8.0). `capability` None (a record without it) keeps "tf32"."""
    if precision != "fp32" or not tf32_enabled:
        return precision
    if capability is not None and capability < TF32_MIN_CAPABILITY:
        return "fp32"
    return "tf32"


def kind_precisions(
    precision: str,
    flops: float,
    matmul_flops: float | None,
    *,
    conv_tf32: bool,
    matmul_tf32: bool,
    capability: tuple[int, int] | None = None,
) -> dict[str, float]:
    """The step's FLOPs by the `PEAK_TFLOPS` column they run at: {column: FLOPs}.

    Under autocast (bf16, fp16) every counted op runs at that precision. In fp32 two switches decide, per
    op kind: cuDNN's convolutions may use TF32 when `torch.backends.cudnn.allow_tf32` (True by default:
    torch/backends/cudnn/__init__.py `flags(..., allow_tf32=True, ...)`), cuBLAS's matmuls only when
    `torch.backends.cuda.matmul.allow_tf32` (False by default; it is True exactly when
    torch.set_float32_matmul_precision is "high" or "medium", torch/backends/cuda/__init__.py `__getattr__`
    reads torch._C._get_cublas_allow_tf32()). A ViT in fp32 therefore runs its matmuls at the plain FP32
    rate, 7x below TF32 on an H100 SXM. `matmul_flops` None (the split unknown): all at the convolutions' column."""
    conv_col = peak_precision(precision, tf32_enabled=conv_tf32, capability=capability)
    mm_col = peak_precision(precision, tf32_enabled=matmul_tf32, capability=capability)
    mm = min(max(float(matmul_flops or 0.0), 0.0), float(flops))
    out: dict[str, float] = {}
    for col, f in ((conv_col, float(flops) - mm), (mm_col, mm)):
        if f > 0:
            out[col] = out.get(col, 0.0) + f
    return out or {conv_col: 0.0}


def mixed_peak_tflops(
    gpu_name: str | None, flops_by_precision: dict[str, float], sm_count: int | None = None
) -> float | None:
    """The peak of a step whose FLOPs run at several rates: all of them over the time each part takes at
    its own peak (sum of flops_k / peak_k). None when a part's peak is unknown (never a guess)."""
    total = sum(flops_by_precision.values())
    peaks: dict[str, float] = {}
    for col in flops_by_precision:
        peak = peak_tflops(gpu_name, col, sm_count)
        if peak is None:
            return None
        peaks[col] = peak
    if total <= 0:
        return next(iter(peaks.values()), None)  # one column, nothing counted: its peak
    return total / sum(f / peaks[col] for col, f in flops_by_precision.items() if f > 0)


def _precision_label(flops_by_precision: dict[str, float]) -> str:
    """The column, "tf32", or "tf32 93% + fp32 7%" (shares of the step's FLOPs) when the step mixes rates."""
    if len(flops_by_precision) == 1:
        return next(iter(flops_by_precision))
    total = sum(flops_by_precision.values())
    return " + ".join(f"{col} {100 * f / total:.0f}%" for col, f in flops_by_precision.items())


@dataclass(frozen=True)
class Efficiency:
    """compute_efficiency's figures: None where unknown (never a guess). The names are results.json's
    where the record keeps them (achieved_tflops, mfu)."""

    world_size: int
    achieved_tflops: float | None = None
    """The job's TFLOP/s: FLOPs per image x images per second (both known)."""
    gpu_model: str | None = None
    """The datasheet row the peak came from (the GPU is in the table), or a MIG instance's share of it."""
    precision: str | None = None
    """The peak's column, or the mix of columns (`_precision_label`)."""
    peak_tflops_per_device: float | None = None
    mfu: float | None = None
    """achieved / (peak x world_size): both known."""


def compute_efficiency(
    flops_per_image: float | None,
    throughput_img_s: float | None,
    *,
    gpu_name: str | None,
    precision: str | dict[str, float],
    world_size: int,
    sm_count: int | None = None,
) -> Efficiency:
    """Achieved TFLOP/s and MFU.

    `throughput_img_s` is the whole job's (all ranks), so the peak is multiplied by `world_size`.
    `precision`: one `PEAK_TFLOPS` column, or the FLOPs by column (`kind_precisions`) for a step that
    mixes rates (fp32 convolutions on TF32, matmuls on FP32): its peak is `mixed_peak_tflops`.
    The peak, its GPU model and precision only when the GPU is in the table; `mfu` (achieved / (peak *
    world_size)) only when both the achieved figure and the peak are known. Unknown is None. `sm_count`:
    the SMs CUDA reports for the device, which gives a MIG instance its share of the parent's peak.
    """
    return job_efficiency(flops_per_image, throughput_img_s, [JobDevice(gpu_name, sm_count, precision)] * world_size)


class JobDevice(NamedTuple):
    """One device of the job, as its peak needs it: its name, its SMs (MIG) and the step's precision mix on it."""

    gpu_name: str | None
    sm_count: int | None
    precision: str | dict[str, float]


def job_efficiency(
    flops_per_image: float | None, throughput_img_s: float | None, devices: Sequence[JobDevice]
) -> Efficiency:
    """Achieved TFLOP/s and MFU of a job over its devices: the job's peak is the sum of each device's own
    (a job over A100s and H100s is held against both). No MFU when any device's peak is unknown.
    `peak_tflops_per_device` is that sum over the devices' count; `gpu_model` names every model ("A100 SXM
    x 2 + H100 SXM x 2") when they differ."""
    achieved = None
    if flops_per_image is not None and throughput_img_s is not None:
        achieved = flops_per_image * throughput_img_s / 1e12
    n = len(devices)
    mixes = [{d.precision: 1.0} if isinstance(d.precision, str) else dict(d.precision) for d in devices]
    peaks = [mixed_peak_tflops(d.gpu_name, mix, d.sm_count) for d, mix in zip(devices, mixes, strict=True)]
    if n == 0 or any(p is None for p in peaks):
        return Efficiency(world_size=n, achieved_tflops=achieved)
    total = sum(p for p in peaks if p is not None)
    models = [mig.label if (mig := mig_share(d.gpu_name, d.sm_count)) else gpu_model(d.gpu_name) for d in devices]
    labels = list(dict.fromkeys(_precision_label(mix) for mix in mixes))
    distinct = list(dict.fromkeys(models))
    return Efficiency(
        world_size=n,
        achieved_tflops=achieved,
        gpu_model=distinct[0] if len(distinct) == 1 else " + ".join(f"{m} x {models.count(m)}" for m in distinct),
        precision=" / ".join(labels),
        peak_tflops_per_device=total / n,
        mfu=achieved / total if achieved is not None else None,
    )


# A tensor-core rate is SMs x per-SM rate x clock, so a GPU whose mean SM clock over the measured steps is under 90%
# of NVML's maximum SM clock (nvmlDeviceGetMaxClockInfo) did its arithmetic over 10% slower than it can, for a reason
# outside the run that NVML's clock-event reasons name (power or thermal capping, an applications-clocks setting).
# 90% is issue 45's threshold (N12). The note changes no figure: it says what the figures ran at.
LOW_CLOCK_FRACTION = 0.90


class GpuClock(NamedTuple):
    """One GPU's clocks over the measured steps, as the sampler's window summary holds them."""

    gpu: int | None
    """Its CUDA index."""
    sm_clock_mhz: float | None
    """Mean sampled SM clock, MHz."""
    sm_clock_max_mhz: float | None
    reasons: Sequence[str] | None
    """NVML's clock-event reasons any sample named (monitor.clock_event_reasons); None when never read."""


def clock_note(gpus: Sequence[GpuClock]) -> str | None:
    """A line naming each GPU whose mean SM clock was under LOW_CLOCK_FRACTION of its maximum, with NVML's reasons;
    None when none was (or no clock was read: no note without a measurement)."""
    parts = []
    for g in gpus:
        clock, top = g.sm_clock_mhz, g.sm_clock_max_mhz
        if clock is None or not top or clock >= LOW_CLOCK_FRACTION * top:
            continue
        why = ", ".join(g.reasons) if g.reasons else ("none named" if g.reasons is not None else "not read")
        parts.append(
            f"GPU {g.gpu} SM clock {clock:.0f} MHz, {_pct(clock / top)} of its {top:.0f} MHz maximum "
            f"(NVML clock-event reasons: {why})"
        )
    if not parts:
        return None
    where = f"clock below {_pct(LOW_CLOCK_FRACTION)} of maximum over the measured steps: "
    return where + "; ".join(parts) + ", so MFU and throughput are a slowed GPU's"


def images_per_joule(images: int | float | None, energy_j: float | None) -> float | None:
    """Images trained per joule of GPU energy; None without a positive energy reading."""
    if images is None or energy_j is None or energy_j <= 0:
        return None
    return images / energy_j


WITHIN_NOISE = "within noise (Welch's 95% interval of profiled - timed includes 0)"
"""The profiler's cost when the interval includes 0: no figure, since a signed one would say more than was measured."""


class ProfilerOverhead(NamedTuple):
    """The profiler's cost, as results.json's profile section holds it (schema.Profile's two fields)."""

    profiler_overhead: float | None
    """profiled / timed - 1, > 0, only outside noise."""
    profiler_overhead_note: str | None
    """Why there is no figure, else None."""


def profiler_overhead(profiled_step_times_s: Sequence[float], timed_step_times_s: Sequence[float]) -> ProfilerOverhead:
    """How much slower a profiled step is than a timed one, only when the difference is outside noise.

    Welch's 95% interval of mean(profiled) - mean(timed) (analysis/stats.py) decides: inside it, the
    profiler's cost is "within noise" (None); a profiled step faster beyond noise is no cost the profiler
    could cause, so it is reported as such, never as a negative overhead.
    """
    prof, timed = [float(x) for x in profiled_step_times_s], [float(x) for x in timed_step_times_s]
    if not prof or not timed or stats.mean(timed) <= 0:
        return ProfilerOverhead(None, "not measured (no profiled or timed steps)")
    d = stats.difference(timed, prof)
    rel = stats.mean(prof) / stats.mean(timed) - 1.0
    if d.significant is None:
        note = f"cannot tell from noise: {len(prof)} profiled and {len(timed)} timed step(s) (needs 2 each)"
        return ProfilerOverhead(None, note)
    if not d.significant:
        return ProfilerOverhead(None, WITHIN_NOISE)
    if rel < 0:
        note = f"no measurable cost: profiled steps were {100 * -rel:.0f}% faster than timed ones"
        return ProfilerOverhead(None, note)
    return ProfilerOverhead(rel, None)


# --------------------------------------------------------------------------------------------------
# Bottleneck verdict
# --------------------------------------------------------------------------------------------------

# At 25% of the step spent blocked in next(loader), feeding caps throughput at 3/4 of what the
# model could do, well beyond the few-percent noise of host timers; below it the loader is rarely
# the first thing worth fixing.
INPUT_BOUND_SHARE = 0.25
# The same reasoning for exposed communication (collective kernels not hidden behind compute on the
# trace's timeline, profiling.exposed_communication): a quarter of the step is throughput lost to the
# network, not to the model. An all-reduce fully overlapped with backward costs nothing and counts nothing.
COMM_BOUND_SHARE = 0.25
# Peak allocated over the measured steps / device total. The CUDA context, cuDNN/cuBLAS workspaces and
# NCCL buffers live outside PyTorch's allocations (about 0.5-1.5 GiB, 1-2% of an 80 GiB GPU, several % of
# a 16 GiB one) and the caching allocator fragments; past 92% there is no room left to grow the batch.
# Allocated, not reserved: torch.cuda.reset_peak_memory_stats restarts each peak from the current value
# (torch/cuda/memory.py:381, the "peak" of memory_stats), and the reserved pool still holds the blocks
# cached before the window (cuDNN's autotuning workspaces in warm-up, validation's), which the steps reuse.
MEMORY_BOUND_FRACTION = 0.92
# NVML utilisation is the share of time any kernel was running. Below 70% the GPU idles for over
# 30% of the time: more than the < 25% data wait (INPUT_BOUND_SHARE) can explain, so the host is
# not launching work fast enough.
LOW_GPU_UTIL_PCT = 70.0
# The run's process tree is "saturating" its CPU allowance when it used 90% of the cores it may use
# (psutil's cpu_times of the tree, monitor.py): the rest is sampling jitter and kernel time elsewhere.
CPU_SATURATED_FRACTION = 0.90
# A host "busy" at 90% system CPU while the run's tree did not get its cores: other processes took the rest, so the
# run's figures measure a contended machine, not its own limit. A CPU run did not get its cores when its tree used
# under CPU_SATURATED_FRACTION of the cores its threads could keep busy (run_cores: the allowance, or processes x
# threads when fewer): its threads wanted them and the host had none idle (issue 47: at load 6.5 on 2 cores a
# smoke run that got 1.2 of its 2 cores read "cpu-underused ... host CPU 93% busy ... cores sat idle"). A GPU run's
# threads mostly wait on the GPU, so it is contended only when its tree got under CONTENDED_FRACTION of its cores.
HOST_BUSY_PCT = 90.0
CONTENDED_FRACTION = 0.5

# A run's verdict when a busy host, not the run, set its pace: its figures measure the other processes too. Only
# cpu-starved precedes it, and the two never fire together (cpu-starved needs a tree that used 90% of its allowance,
# cpu-contended one that used less: under 90% of run_cores, never more than the allowance, or under half of it), so a
# run's verdict alone says whether it ran contended.
CONTENDED = "cpu-contended"
BOTTLENECKS = (
    "cpu-starved",
    CONTENDED,
    "input-bound",
    "communication-bound",
    "memory-capacity-bound",
    "host/launch-bound",
    "cpu-underused",
    "compute-bound",
)
# Precedence is the order of BOTTLENECKS, causes before symptoms:
# 1. cpu-starved: the run's process tree used (nearly) all the cores it may use AND a symptom was
#    measured (data wait >= INPUT_BOUND_SHARE, or the GPU idle below LOW_GPU_UTIL_PCT); a count of
#    processes and workers above the quota alone is no evidence. Fix the allocation first.
# 1b. cpu-contended: the host was busy (HOST_BUSY_PCT) while the run's tree did not get its cores (a CPU run:
#    under CPU_SATURATED_FRACTION of run_cores; a GPU run: under CONTENDED_FRACTION of its allowance): other
#    processes, not the run, set the pace.
# 2. input-bound: waiting for data is serial time on the critical path, and a rank that waits for
#    data makes the others wait in all-reduce, so it comes before communication.
# 3. communication-bound: time lost to the network that no single-GPU change recovers.
# 4. memory-capacity-bound: before host/launch-bound because its advice (a bigger batch) needs the
#    memory that is not there.
# 5. host/launch-bound: the GPU idles although the data is there.
# 5b. cpu-underused (CPU runs): nothing above applies and the run's tree used under CPU_SATURATED_FRACTION
#    of the cores it may use: cores sat idle, so their arithmetic is not what limits it (too few threads or
#    processes, or a step whose serial part leaves the threads waiting). On a busy host only a run with fewer
#    threads than cores gets here (it got the cores its threads could use): its evidence then says that other
#    processes took the rest, never that the cores sat idle.
# 6. compute-bound: nothing above applies; the device is the limit. On a CPU run only with the evidence that
#    the CPU is: its tree used at least CPU_SATURATED_FRACTION of its cores. A CPU run whose CPU use was not
#    sampled (or whose allowance is unknown) gets no verdict: nothing says whether its cores were busy.


@dataclass(frozen=True)
class Measurements:
    """What one run measured; None where it was not measured (a CPU run, no NVML, one process)."""

    data_time_share: float
    """Share of the measured step time spent blocked in next(loader), 0..1."""
    gpu_util_pct_mean: float | None
    """Mean NVML GPU utilisation over the measured steps' window, %; None without NVML or on the CPU."""
    allreduce_share: float | None
    """Share of the step time in communication not overlapped with compute (the profiling pass's trace on
    CUDA; the all_reduce phase's host share on the CPU), 0..1; None without DDP or unmeasured."""
    peak_mem_fraction: float | None
    """Peak device memory in use over the measured steps / device total, 0..1: torch's allocated peak plus
    what NVML saw beyond torch's pool (peak_mem_outside_torch_gib); None on the CPU."""
    cpu_quota_cores: float | None
    """CPU cores this job may use (cgroup quota or affinity); None when unlimited / unknown."""
    workers: int
    """DataLoader worker processes on this node, all ranks together."""
    processes: int
    """Training processes on this node."""
    mfu: float | None
    """Model FLOPs utilisation, 0..1; None when the peak is unknown."""
    device_type: str
    """"cuda" or "cpu"."""
    measured_steps: int = 1
    """Steps measured (warm-up excluded); 0 means nothing was measured and no verdict is given."""
    peak_mem_outside_torch_gib: float | None = None
    """Of the peak, GiB outside torch's pool (DALI, nvJPEG, CUDA contexts) as NVML saw it; None without NVML."""
    proc_cpu_pct_mean: float | None = None
    """Mean CPU utilisation of the run's process tree, % of one core (200 = two cores busy); None unsampled."""
    host_cpu_pct_mean: float | None = None
    """Mean CPU utilisation of the whole host, % of all its cores (0..100); None unsampled."""
    threads_per_process: int | None = None
    """torch's intra-op threads in each training process (torch.get_num_threads()); None when unknown."""
    omp_wait_policy: str | None = None
    """OMP_WAIT_POLICY as the run saw it (env.json's env_vars); None when unset."""
    clock_note: str | None = None
    """`clock_note`'s line when a GPU's SM clock was low over the measured steps; added to any verdict's evidence."""


# The docs/troubleshooting.md section a verdict's advice points to, where one explains it at length.
SEE = {
    "cpu-starved": troubleshooting.SHARED_CPU,
    "cpu-contended": troubleshooting.SHARED_CPU,
    "cpu-underused": troubleshooting.SHARED_CPU,
    "memory-capacity-bound": troubleshooting.OOM,
}


@dataclass(frozen=True)
class Verdict:
    bottleneck: str
    evidence: str
    advice: str


# The cpu-contended fix for a CPU run whose OpenMP threads spin while they wait (libgomp's default): on a loaded
# 2-core VM they waited 10x longer than sleeping ones (docs/PERFORMANCE.md, "Shared CPUs").
PASSIVE_ADVICE = (
    "set OMP_WAIT_POLICY=PASSIVE for runs on a shared CPU (waiting threads sleep instead of spinning on the cores "
    "others hold); "
)


# A CPU run with more threads than cores (--nproc beyond the cores, or OMP_NUM_THREADS pinned high): they take turns.
OVERSUBSCRIBED_ADVICE = (
    "run at most as many processes x threads as cores (--nproc, OMP_NUM_THREADS): more take turns on them; "
)


def _pct(x: float) -> str:
    """Whole percent, with one decimal below 10% so a 0.5% data wait never reads as 0%."""
    return f"{100 * x:.1f}%" if abs(x) < 0.1 else f"{100 * x:.0f}%"


def _cpu_use(m: Measurements) -> str:
    """The measured CPU use of the run's tree, for the evidence ("" when not sampled)."""
    if m.proc_cpu_pct_mean is None:
        return ""
    quota = f" of {m.cpu_quota_cores:g} allowed" if m.cpu_quota_cores is not None else ""
    return f"run's processes used {m.proc_cpu_pct_mean / 100:.2f} cores{quota}"


def run_cores(m: Measurements) -> float | None:
    """The cores the run's threads could keep busy: its allowance, or processes x threads when that is fewer (one
    thread on two cores wants one); None when the allowance is unknown."""
    if m.cpu_quota_cores is None:
        return None
    if m.threads_per_process is None:
        return m.cpu_quota_cores
    return min(m.cpu_quota_cores, float(m.processes * m.threads_per_process))


def _host_busy(m: Measurements) -> bool:
    return m.host_cpu_pct_mean is not None and m.host_cpu_pct_mean >= HOST_BUSY_PCT


def _contended(m: Measurements) -> bool:
    """The host was busy and the run did not get its cores (HOST_BUSY_PCT, CONTENDED_FRACTION)."""
    if not _host_busy(m) or m.proc_cpu_pct_mean is None or m.cpu_quota_cores is None:
        return False
    if m.device_type == "cpu":
        wanted = run_cores(m)
        return wanted is not None and m.proc_cpu_pct_mean < CPU_SATURATED_FRACTION * 100 * wanted
    return m.proc_cpu_pct_mean < CONTENDED_FRACTION * 100 * m.cpu_quota_cores


def _oversubscribed(m: Measurements) -> str:
    """The run's "N process(es) x T thread(s) on C cores" when it ran more threads than its cores; else "" (none)."""
    if m.threads_per_process is None or m.cpu_quota_cores is None:
        return ""
    ran = m.processes * m.threads_per_process
    if ran <= m.cpu_quota_cores:
        return ""
    return f"{m.processes} process(es) x {m.threads_per_process} thread(s) on {m.cpu_quota_cores:g} cores"


def _findings(m: Measurements) -> list[Verdict]:
    """Every rule that fires on measured evidence, in precedence order (see BOTTLENECKS)."""
    found: list[Verdict] = []
    needed = m.workers + m.processes
    saturated = (
        m.cpu_quota_cores is not None
        and m.proc_cpu_pct_mean is not None
        and m.proc_cpu_pct_mean >= CPU_SATURATED_FRACTION * 100 * m.cpu_quota_cores
    )
    gpu_idle = m.gpu_util_pct_mean is not None and m.gpu_util_pct_mean < LOW_GPU_UTIL_PCT
    symptom = m.data_time_share >= INPUT_BOUND_SHARE or gpu_idle
    if m.cpu_quota_cores is not None and m.cpu_quota_cores < needed and saturated and symptom:
        idle = f", GPU utilisation {m.gpu_util_pct_mean:.0f}%" if gpu_idle and m.gpu_util_pct_mean is not None else ""
        found.append(
            Verdict(
                "cpu-starved",
                f"{_cpu_use(m)} ({m.processes} training process(es) + {m.workers} loader worker(s) = {needed}); "
                f"data wait {_pct(m.data_time_share)} of step time{idle}",
                "give the job at least one core per process and per worker (docker --cpus, Slurm "
                "--cpus-per-task), or lower --workers / --nproc to fit the quota",
            )
        )
    if _contended(m):
        over = _oversubscribed(m) if m.device_type == "cpu" else ""
        found.append(
            Verdict(
                CONTENDED,
                f"host CPU {m.host_cpu_pct_mean:.0f}% busy while the {_cpu_use(m)}: other processes took the rest"
                + (f"; the run itself ran {over}" if over else ""),
                (PASSIVE_ADVICE if _spins(m) else "")
                + (OVERSUBSCRIBED_ADVICE if over else "")
                + "these figures measure a shared machine; rerun when it is idle, or reserve cores "
                "(docker --cpuset-cpus, taskset, Slurm --exclusive)",
            )
        )
    if m.data_time_share >= INPUT_BOUND_SHARE:
        found.append(
            Verdict(
                "input-bound",
                f"data wait {_pct(m.data_time_share)} of step time with {m.workers} worker(s)",
                "add loader workers, use the fast (device-side) loader, and give each process fewer "
                "threads (OMP_NUM_THREADS) so workers get cores",
            )
        )
    if m.allreduce_share is not None and m.allreduce_share >= COMM_BOUND_SHARE:
        found.append(
            Verdict(
                "communication-bound",
                f"exposed all-reduce {_pct(m.allreduce_share)} of step time (not hidden behind compute) "
                f"across {m.processes} process(es)",
                "raise the per-GPU batch so each all-reduce buys more compute, use bf16 gradients "
                "(DDP comm hook), check NCCL uses NVLink/InfiniBand (NCCL_DEBUG=INFO)",
            )
        )
    if m.peak_mem_fraction is not None and m.peak_mem_fraction >= MEMORY_BOUND_FRACTION:
        found.append(
            Verdict(
                "memory-capacity-bound",
                f"peak memory in use {_pct(m.peak_mem_fraction)} of the device during the measured steps"
                + (
                    f" ({m.peak_mem_outside_torch_gib:.1f} GiB of it outside torch's allocator, seen by NVML:"
                    " DALI, nvJPEG, CUDA contexts)"
                    if m.peak_mem_outside_torch_gib
                    else ""
                ),
                "use bf16 autocast or activation checkpointing to free memory; a larger batch will not fit",
            )
        )
    if (
        m.gpu_util_pct_mean is not None
        and m.gpu_util_pct_mean < LOW_GPU_UTIL_PCT
        and m.data_time_share < INPUT_BOUND_SHARE
    ):
        found.append(
            Verdict(
                "host/launch-bound",
                f"GPU utilisation {m.gpu_util_pct_mean:.1f}% with data wait only {_pct(m.data_time_share)} "
                "of step time",
                "use a bigger batch, channels_last, and torch.compile (fewer, larger kernels); "
                "CUDA graphs for very small models",
            )
        )
    return found


def _spins(m: Measurements) -> bool:
    """A CPU run whose OpenMP threads spin while they wait: OMP_WAIT_POLICY is not PASSIVE."""
    return m.device_type == "cpu" and (m.omp_wait_policy or "").strip().upper() != "PASSIVE"


def _cpu_fallback(m: Measurements) -> Verdict | None:
    """A CPU run nothing else fired on: compute-bound only when its tree kept (nearly) all its cores busy."""
    if m.proc_cpu_pct_mean is None or m.cpu_quota_cores is None or m.cpu_quota_cores <= 0:
        return None  # no evidence either way
    used = m.proc_cpu_pct_mean / (100 * m.cpu_quota_cores)
    data = f"data wait {_pct(m.data_time_share)} of step time"
    if used >= CPU_SATURATED_FRACTION:
        return Verdict(
            "compute-bound",
            f"CPU run: {data}, {_cpu_use(m)} ({_pct(used)}): the CPU's arithmetic is the limit",
            "these figures measure the CPU; run on a GPU (--device cuda) for device throughput",
        )
    host = f", host CPU {m.host_cpu_pct_mean:.0f}% busy" if m.host_cpu_pct_mean is not None else ""
    threads = m.threads_per_process
    if threads is not None:
        ran = f"{m.processes} process(es) x {threads} thread(s)"
        host += f"; {ran}"
    if threads is not None and m.processes * threads < m.cpu_quota_cores:
        advice = (
            f"give the run as many threads as allowed cores ({m.cpu_quota_cores:g}; it ran {ran}): "
            "OMP_NUM_THREADS / torch.set_num_threads, or more processes (--nproc)"
        )
    else:
        advice = (
            "the threads were there but waited part of each step on its serial work (Python, small ops, the "
            "optimizer): a bigger batch or image gives each op more parallel work, torch.compile fuses small ops"
        )
        if _oversubscribed(m):
            advice = OVERSUBSCRIBED_ADVICE + advice
    # A busy host with the run not contended (_contended): its threads had the cores they could use and other
    # processes took the rest, so no core sat idle.
    why = (
        "its threads had their cores and other processes took the rest"
        if _host_busy(m)
        else "cores sat idle, so the CPU's arithmetic is not the limit"
    )
    return Verdict(
        "cpu-underused",
        f"CPU run: {_cpu_use(m)} ({_pct(used)}, under {_pct(CPU_SATURATED_FRACTION)}) with {data}{host}: {why}",
        advice,
    )


def _compute_bound(m: Measurements) -> Verdict:
    mfu = f"MFU {_pct(m.mfu)}" if m.mfu is not None else "MFU unknown (no datasheet peak for this device)"
    util = f"GPU utilisation {m.gpu_util_pct_mean:.0f}%, " if m.gpu_util_pct_mean is not None else ""
    return Verdict(
        "compute-bound",
        f"{util}data wait {_pct(m.data_time_share)} of step time, {mfu}",
        "the device is busy: bf16 autocast, channels_last and torch.compile raise the useful work per "
        "second; otherwise more GPUs",
    )


def verdict(m: Measurements) -> Verdict | None:
    """The one bottleneck that limits the run, by the precedence in BOTTLENECKS; None when no step
    was measured (an interrupted run), or on a CPU run whose CPU use was not sampled: no measurement,
    no verdict.

    Rules that also fired but lost on precedence are appended to the evidence ("; also ...").
    """
    if m.measured_steps <= 0:
        return None
    found = _findings(m)
    if not found:
        alone = _compute_bound(m) if m.device_type == "cuda" else _cpu_fallback(m)
        return _pointed(_clocked(alone, m.clock_note)) if alone is not None else None
    first, rest = found[0], found[1:]
    evidence = first.evidence
    if rest:
        evidence += "; also " + "; ".join(f"{v.bottleneck}: {v.evidence}" for v in rest)
    return _pointed(_clocked(Verdict(first.bottleneck, evidence, first.advice), m.clock_note))


def _clocked(v: Verdict, note: str | None) -> Verdict:
    """A slowed clock is not a bottleneck of the run's making, but every figure behind the verdict ran at it."""
    return v if not note else Verdict(v.bottleneck, f"{v.evidence}; {note}", v.advice)


def _pointed(v: Verdict) -> Verdict:
    """The verdict with its advice ending in its troubleshooting section, where it has one."""
    return Verdict(v.bottleneck, v.evidence, troubleshooting.pointed(v.advice, SEE.get(v.bottleneck)))


def verdict_dict(v: Verdict) -> dict[str, str]:
    return {"bottleneck": v.bottleneck, "evidence": v.evidence, "advice": v.advice}

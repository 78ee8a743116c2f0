"""The typed run record: the one model of results.json (a run) and sweep.json (a sweep).

`results.load_record` reads a results.json into `Results` and every reader (report, analysis, export,
compare, leaderboard, selftest, sweeps) uses its attributes, never string keys: adding a metric is adding
one field here, its producer and its consumers. The field docstrings are the results.json reference in
docs/outputs.md (tools/gen_record_docs.py). Sections whose absence means "nothing measured" (env, launch,
model, backend, data, utilization, final) default to an empty section, so `r.utilization.host.rss_gib.max`
reads None, never raises; sections whose presence is the fact (profile, verdict, warmup, measured, error,
time_to_accuracy) stay None when absent.

Result files are input too: `effbench report` and `compare` read files a person may have edited.
`results.read_results` and `manifest.read_manifest` validate the whole record here, strictly (no
"5" for 5, no NaN), so a bad value is one line naming the file and the field, never a traceback
deep in a table. Keys not listed are allowed (older or newer writers add facts); every key a
reader uses is typed. pydantic is imported only when a file is read, so `effbench --help` stays
instant.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from effbench.errors import EffbenchError

Num = float | None  # strict float also takes an int (pydantic's strict mode: int -> float is allowed)
# Figures no run can produce are refused like a wrong type: a negative time, count or throughput, a top-1
# or a share outside 0..1 (top-1 is a fraction; report printed a hand-edited 7.5 as the accuracy).
Pos = Annotated[float, Field(ge=0)] | None
Frac = Annotated[float, Field(ge=0, le=1)] | None
Count = Annotated[int, Field(ge=0)] | None


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, use_attribute_docstrings=True)

    def unset(self, *names: str) -> None:
        """Clear these fields so the file leaves them out, as before they were set (results.write_json writes
        the fields set): a cleared signal, the setup phase once the run has an ending."""
        for name in names:
            setattr(self, name, None)
            self.model_fields_set.discard(name)


def _none_is_empty(value: Any) -> Any:
    return {} if value is None else value


# A section that reads as empty when absent or null (an older writer, a run that failed before it).
EMPTY_IF_NULL = BeforeValidator(_none_is_empty)


class Augment(_Model):
    """The training recipe (--augment) that ran, effbench.recipes.Recipe.record(); absent before it existed."""

    name: str
    kind: str | None = None
    steps: str | None = None
    """The recipe in one line, as the report prints it."""
    image_size: int | None = None
    base: int | None = None
    pad: int | None = None
    crop: str | None = None
    crop_size: int | None = None
    flip_p: Frac = None
    rotation_deg: Pos = None
    upscale: int | None = None
    val_crop: str | None = None
    rrc_scale: list[float] | None = None
    """RandomResizedCrop's area range."""
    rrc_ratio: list[float] | None = None
    """RandomResizedCrop's aspect-ratio range."""
    interpolation: str | None = None
    """The resize interpolation."""
    mean: list[float] | None = None
    """Normalize's per-channel mean."""
    std: list[float] | None = None
    """Normalize's per-channel std."""
    inexact: list[str] | None = None


def _config_model() -> type[_Model]:
    """config.json's model, one field per RunConfig field (effbench/config.py), so a new run option is typed
    here without being written again: its type, optional (an older file lacks it), Path as its text."""
    import dataclasses

    from effbench.config import RunConfig

    kinds: dict[str, Any] = {"str": str, "Path": str, "int": int, "float": float, "bool": bool}
    fields: dict[str, Any] = {
        f.name: (kinds[str(f.type).replace(" | None", "")] | None, None) for f in dataclasses.fields(RunConfig)
    }
    fields["target_top1"] = (Frac, None)  # a fraction, as its Range says
    # the recipe that ran, beside its name
    fields["augment_recipe"] = (Augment | None, Field(None, description="The recipe --augment resolved to."))
    # config.resolved_record's notes beside the options that ran
    fields["dataset_shape"] = (str | None, Field(None, description="Generated data's shape in words."))
    fields["requested"] = (
        dict[str, Any] | None,
        Field(None, description="The values asked for where they differ from what ran."),
    )
    fields["no_effect"] = (dict[str, str] | None, Field(None, description="Per option that changed nothing, why."))
    doc = "The resolved run options (config.json's), one per RunConfig field."
    return create_model("Config", __base__=_Model, __doc__=doc, **fields)


if TYPE_CHECKING:

    class Config(_Model):
        def __getattr__(self, name: str) -> Any: ...  # built at import from RunConfig: its fields are runtime facts

else:
    Config = _config_model()


class Epoch(_Model):
    epoch: int
    """1-based, as everywhere."""
    steps: Count = None
    """Training steps of the epoch, warm-up included."""
    images: Count = None
    """Images trained on (all ranks), warm-up included."""
    data_time_s: Pos = None
    """Waiting for the next batch, every step of the epoch, s."""
    compute_time_s: Pos = None
    """Forward, backward and optimizer step, every step of the epoch, s."""
    total_time_s: Pos = None
    """data_time_s + compute_time_s."""
    train_loss: Num = None
    """Mean training loss of the epoch."""
    train_top1: Frac = None
    """Training top-1 of the epoch, a fraction 0..1."""
    val_loss: Num = None
    """Validation loss after the epoch."""
    val_top1: Frac = None
    """Validation top-1 after the epoch, a fraction 0..1."""
    val_time_s: Pos = None
    """Time of the validation pass, s (not in any throughput), its warm-up (val_warmup_time_s) left out: every
    epoch's times the same work."""
    val_images: Count = None
    """Images validated."""
    throughput_img_s: Pos = None
    """Images per second over the epoch's measured steps (warm-up excluded), all ranks."""
    warmup_steps: Count = None
    """Steps left out of the measurement at the epoch's start."""
    warmup_time_s: Pos = None
    """Their time, s."""
    measured_images: Count = None
    """Images of the measured steps."""
    measured_time_s: Pos = None
    """Time of the measured steps, s (the slowest rank's)."""
    measured_data_time_s: Pos = None
    """Data wait of the measured steps, s."""
    measured_compute_time_s: Pos = None
    """Compute of the measured steps, s."""
    val_warmup_time_s: Pos = None
    """The validation's warm-up, s: one extra forward, output dropped, per input shape no earlier validation of
    the run had (torch.compile's eval graph, cuDNN's autotuning): the first validation's, in practice."""
    skipped_steps: Count = None
    """Steps of the epoch (warm-up included) whose optimizer step the fp16 loss scaler skipped (inf/nan
    gradients): no weight update, no LR-schedule step. Still in steps, images and every time. Absent without
    a loss scaler (every precision but fp16)."""


class Tally(_Model):
    steps: Annotated[int, Field(ge=0)]
    """Steps summed over epochs."""
    images: Annotated[int, Field(ge=0)]
    """Images summed over epochs and ranks."""
    data_time_s: Annotated[float, Field(ge=0)]
    """Data wait, s."""
    compute_time_s: Annotated[float, Field(ge=0)]
    """Compute, s."""
    time_s: Annotated[float, Field(ge=0)]
    """data_time_s + compute_time_s, s."""
    throughput_img_s: Pos = None
    """images / time_s."""
    skipped_steps: Count = None
    """Of these steps, those whose optimizer step the fp16 loss scaler skipped (inf/nan gradients: no weight
    update, no LR-schedule step, the scale lowered). Included in steps, images, the times and throughput_img_s:
    a skipped step still ran its forward and backward. Absent without a loss scaler (every precision but fp16)."""
    timing: str | None = None
    """How these steps were timed (--timing): `pipelined` (one wait per --log-interval steps, each span read
    from CUDA events on the training stream) or `per-step` (two waits a step, host clock). Absent in records
    from before the option: those were timed per-step. docs/methodology.md, "What each span holds"."""


class WarmupRule(_Model):
    """How the warm-up's length was chosen (--warmup-steps): a fixed count, or found from the step times."""

    rule: str
    """`fixed` (--warmup-steps N) or `mser-5` (auto: White, Cobb & Spratt 2000; docs/methodology.md)."""
    steps: Count = None
    """The steps the warm-up took: the first measured step's 0-based index in the run."""
    settled: bool | None = None
    """auto: whether MSER-5 found the step times settled (False: the cap or the run's end came first)."""
    cut_at_step: Count = None
    """auto: MSER-5's own cut; warm-up ended at the first check (every 5 steps) at or after it that found it."""
    cap: Count = None
    """auto: the most warm-up steps allowed (half the run's steps)."""
    reason: str | None = None
    """One line: why the warm-up ends where it does."""


class Until(_Model):
    """`--until ci:X%`: measured until the throughput's 95% interval from its windows was within X of it
    (analysis/steady_state.py window_interval: on the windows' seconds per image, widened for their lag-1
    autocorrelation)."""

    target: str
    """The rule as given: `ci:1%`."""
    half_width_pct: Num = None
    """The interval reached: its half-width as a percent of the windows' figure (None below 3 windows)."""
    throughput_img_s: Num = None
    """The windows' figure: their images over their time (the headline less the part windows)."""
    ci_low_img_s: Num = None
    """The interval's low end, img/s."""
    ci_high_img_s: Num = None
    """The interval's high end, img/s (None when unbounded)."""
    lag1_autocorrelation: Num = None
    """The windows' lag-1 autocorrelation as estimated: near 0 for independent windows; the interval is widened
    for it, and above 0.9 the windows drift (docs/methodology.md)."""
    windows: Count = None
    """Throughput windows measured."""
    window_steps: Count = None
    """Steps per window (--log-interval)."""
    steps: Count = None
    """Measured steps it took."""
    reached: bool | None = None
    """True when the interval stopped the run; False when the run's steps (its cap) ran out first."""
    reason: str | None = None
    """Why the measurement ended."""


class Final(_Model):
    train_loss: Num = None
    """The last epoch's mean training loss."""
    train_top1: Frac = None
    """The last epoch's training top-1, 0..1."""
    val_loss: Num = None
    """The last validation loss."""
    val_top1: Frac = None
    """The last validation top-1, 0..1."""


class Rank(_Model):
    rank: int
    """The global rank."""
    local_rank: int | None = None
    """The rank on its node."""
    host: str | None = None
    """The node's hostname."""
    device: str | None = None
    """The rank's device."""
    gpu_name: str | None = None
    """Its CUDA device's name as torch reports it: each rank's own, for the job's MFU peak."""
    gpu_capability: str | None = None
    """Its compute capability, "8.0"."""
    gpu_sm_count: int | None = None
    """Its SMs (a MIG instance's own)."""
    images: Count = None
    """Images of its measured steps."""
    steps: Count = None
    """Its measured steps."""
    data_time_s: Pos = None
    """Its data wait over them, s."""
    compute_time_s: Pos = None
    """Its compute over them, s."""
    time_s: Pos = None
    """Its measured time, s."""
    throughput_img_s: Pos = None
    """Its own images per second."""


class Stat(_Model):
    """A figure over the throughput windows: median, mean, stdev and its confidence interval (analysis/stats.py)."""

    n: int | None = None
    """How many windows."""
    median: Num = None
    """The median window."""
    mean: Num = None
    """The mean window."""
    stdev: Num = None
    """The windows' standard deviation."""
    ci_low: Num = None
    """Lower end of the median's 95% confidence interval (docs/methodology.md)."""
    ci_high: Num = None
    """Upper end of it."""
    note: str | None = None
    """Why no interval (too few windows)."""


class Windows(_Model):
    requested: int | None = None
    """Windows asked for (--repeats)."""
    windows: int | None = None
    """Windows formed."""
    steps: int | None = None
    """Measured steps cut into windows."""
    ranks: int | None = None
    """Ranks whose steps the windows hold (the slowest rank sets each window's time)."""
    window_steps: list[int] | None = None
    """Steps per window."""
    throughput_img_s: list[Pos] | None = None
    """Images per second, per window."""
    step_time_ms: list[Pos] | None = None
    """Mean step time per window, ms."""
    data_time_share: list[Frac] | None = None
    """Data-wait share per window, 0..1."""
    summary: dict[str, Stat | None] | None = None
    """Per figure (throughput_img_s, step_time_ms, data_time_share): median, mean and 95% interval."""
    note: str | None = None
    """Why there are no windows (a multi-rank run without recorded ones)."""


class ProfilePhase(_Model):
    phase: str
    """data, forward, backward, all_reduce, optimizer, ..."""
    calls: int | None = None
    """Times the phase ran in the profiled steps."""
    cpu_time_s: Num = None
    """Host time in the phase, s."""
    cpu_share_of_step: Num = None
    """Its share of the profiled step's host time."""
    device_time_s: Num = None
    """Device time in the phase, s (CUDA)."""
    device_share_of_step: Num = None
    """Its share of the profiled step's device time."""


class Profile(_Model):
    phases: list[ProfilePhase] | None = None
    """Per phase of the step, from the profiler's record_function ranges."""
    tables: dict[str, str] | None = None
    """The profiler's tables, files in the run folder."""
    trace: str | None = None
    """The Chrome trace, a file in the run folder."""
    active_steps: int | None = None
    """Steps the profiler recorded."""
    profiled_step_time_s: Num = None
    """Median step time under the profiler, s."""
    profiled_step_times_s: list[float] | None = None
    """Each profiled step's time, s."""
    timed_step_time_s: Num = None
    """Median measured step time without it, s."""
    profiler_overhead: Num = None
    """profiled / timed - 1: the profiler's own cost."""
    profiler_overhead_note: str | None = None
    """Why the overhead is not given (within the steps' noise)."""
    exposed_comm_share: Frac = None
    """Share of the step's device time in collectives not hidden behind compute (CUDA)."""
    comm_kernel_s: Pos = None
    """Device time in collective kernels over the profiled steps, s (CUDA)."""
    exposed_comm_s: Pos = None
    """Of it, not hidden behind compute on another stream, s (CUDA)."""
    exposed_comm_error: str | None = None
    """Why the exposed share could not be read from the trace."""


class ComputeRoof(_Model):
    """One measured matmul roof (measure/roofs.py) at one precision."""

    precision: str
    """fp32 (full FP32), tf32, bf16 or fp16: the analysis.efficiency.PEAK_TFLOPS column it is held against."""
    tflops: Pos = None
    """Attainable dense matmul TFLOP/s measured on this device: the best rep."""
    datasheet_tflops: Pos = None
    """The GPU's dense datasheet peak at the precision (analysis.efficiency.PEAK_TFLOPS); none on the CPU."""
    how: str | None = None
    """The microbenchmark: operands, reps, threads, clock."""


class RoofConditions(_Model):
    """What the roofs' device was doing while they were measured (measure/roofs.py): a cached entry is used only
    by a run whose device is in the same class now, and only an idle device's roofs are cached."""

    load_class: str | None = None
    """idle or loaded. On the CPU: loaded when other processes (other VMs' steal included) used at least a quarter
    of the machine's cores (half a core at least) over a short sample; on a GPU: loaded when NVML shows another
    compute process or a clock-event reason that slows it beyond its power limit (thermal, power brake, HW
    slowdown, sync boost, board limit, reliability)."""
    detail: str | None = None
    """The class in words: "other processes used 0.1 of 2 cores", "no other compute process, no clock-event reason"."""
    others_cores: Pos = None
    """CPU: cores' worth of time other processes took (the host's busy time less this process tree's) per second."""
    machine_cores: int | None = None
    """CPU: the machine's cores (os.cpu_count) the load is spread over."""
    gpu_uuid: str | None = None
    """GPU: the measured device's UUID (part of the cache key: a GPU, not a model name)."""
    power_limit_w: Pos = None
    """GPU: NVML's enforced power limit, W (part of the cache key)."""
    other_processes: int | None = None
    """GPU: compute processes on the device besides this one (NVML)."""
    clock_event_reasons: list[str] = []
    """GPU: NVML's clock-event reasons that slowed it, by name (measure/monitor.py clock_event_reasons)."""


class Roofs(_Model):
    """This machine's two roofs for the roofline: measured outside the timed steps (before the profiling
    pass) by microbenchmarks that share no code with the model path, cached per machine (measure/roofs.py)."""

    device: str | None = None
    """The device measured: the GPU's name, or the CPU's model."""
    threads: int | None = None
    """torch's intra-op threads the CPU roofs ran on (the run's)."""
    compute: list[ComputeRoof] = []
    """The matmul roof at the run's precision, and at fp32 where that differs."""
    memory_gb_s: Pos = None
    """Attainable memory bandwidth: a large device copy, bytes read + written (STREAM's convention), GB/s (1e9)."""
    memory_datasheet_gb_s: Pos = None
    """The GPU's datasheet memory bandwidth, GB/s (analysis.efficiency.PEAK_MEM_GB_S); none on the CPU."""
    memory_how: str | None = None
    """The copy: its size, reps, threads, clock."""
    measured_at: str | None = None
    """ISO 8601 time the roofs were measured (by this run, or by an earlier one when cached)."""
    cached: bool | None = None
    """True when read from the machine's cache (cache_file), measured by an earlier run."""
    cache_file: str | None = None
    """The per-machine cache the roofs were read from or written to."""
    cache_key: str | None = None
    """Hostname, device, torch version, threads and precisions: what a cached entry must match."""
    cache_note: str | None = None
    """Why the roofs could not be written to the cache (the run goes on)."""
    conditions: RoofConditions | None = None
    """The device's load while the roofs were measured (by this run, or by the earlier one when cached)."""
    cache_age_s: Pos = None
    """When cached: how long before this run the cached roofs were measured, s."""
    why_measured: str | None = None
    """When measured now: why the cache was not used (no entry, over a day old, or measured under another load)."""
    node_shared: bool | None = None
    """True when this rank used the roofs its node's local rank 0 measured or read (one measurement per node)."""


class KindRow(_Model):
    """One kind of operation in the profiled step (analysis/roofline.py), per step."""

    kind: str
    """convolution, depthwise/grouped conv, matmul/linear, batch norm, ... (analysis.roofline.KINDS)."""
    calls: Pos = None
    """Ops of the kind per step."""
    time_s: Pos = None
    """Time per step: device time of the kernels its ops launched (CUDA), or their self CPU time (CPU), s."""
    share_of_step: Pos = None
    """time_s over the roofline's step_time_s (the timed step where the run has one)."""
    flops: Pos = None
    """FLOPs per step (the validated counter's formulas: convolutions and matmuls; 0 for the rest)."""
    min_bytes: Pos = None
    """Minimum memory traffic per step: every input read once and every output written once, bytes."""
    intensity_flop_per_byte: Pos = None
    """flops / min_bytes."""
    achieved_tflops: Pos = None
    """flops / time_s / 1e12."""
    achieved_gb_s: Pos = None
    """min_bytes / time_s / 1e9."""
    compute_roof_tflops: Pos = None
    """The compute roof the kind is held against (its precision's), TFLOP/s."""
    bound: str | None = None
    """memory or compute: which side of the ridge point its intensity falls on; none without a roof."""
    roof_fraction: Pos = None
    """Achieved over the roof at its intensity (min(compute, intensity x memory)); above 1 when its data fit in cache."""
    roof_time_s: Pos = None
    """The time at its roof: max(flops / compute roof, min_bytes / memory roof), s."""
    exposed_time_s: Pos = None
    """A kind with no roof on CUDA: the part of time_s its kernels ran with no other kind's kernel on their device
    (an all-reduce beside backward's kernels runs hidden), per step, s; what the ceiling adds for it."""


class UnmodelledOp(_Model):
    """An op the roofline has no FLOP or byte model for (analysis/roofline.py UNMODELLED), per step."""

    name: str
    """The profiler's name, "aten::lstm"."""
    calls: Pos = None
    """Its calls per step."""
    time_s: Pos = None
    """Its time per step (the kinds' basis), s."""
    share_of_step: Pos = None
    """time_s over the roofline's step_time_s."""
    flops: Pos = None
    """FLOPs per step its callees' formulas counted (an LSTM run as aten::mm calls); 0: no FLOP count (the roofline's,
    flops_per_image, MFU) holds its work."""


class Roofline(_Model):
    """Where the profiled step's time goes, against this machine's roofs (analysis/roofline.py)."""

    time_basis: str | None = None
    """What a kind's time is: device time (CUDA) or self CPU time on the step's thread (CPU)."""
    steps: int | None = None
    """Profiled steps the figures are the mean of."""
    step_time_s: Pos = None
    """The step the shares, the remainder, the verdict and the ceiling are held against (data wait + step), s: on
    CUDA the timed loop's mean step, measured outside the profiler; else (the CPU, whose kinds' times are host
    times under the profiler; no timed step; records before issue 45) the profiled step's host time."""
    profiled_step_time_s: Pos = None
    """The profiling pass's own step (host time, data wait included), inflated by the profiler, s; only where
    step_time_s is the timed step."""
    data_wait_s: Pos = None
    """Of step_time_s, waiting for the loader, s."""
    ops_time_s: Pos = None
    """The kinds' times summed, s."""
    unattributed_s: Num = None
    """step_time_s - data_wait_s - ops_time_s: time in no op (Python, autograd, launches, the profiler's own
    ranges); on CUDA, device time no kernel covered; negative when kernels overlapped on several streams."""
    compute_roof_tflops: Pos = None
    """The compute roof of the convolutions and element-wise kinds, TFLOP/s."""
    compute_roof_precision: str | None = None
    """Its precision column."""
    matmul_roof_tflops: Pos = None
    """The matmul kind's compute roof where it differs (fp32 matmuls without TF32 on CUDA), TFLOP/s."""
    memory_roof_gb_s: Pos = None
    """The memory roof, GB/s."""
    ridge_flop_per_byte: Pos = None
    """compute roof / memory roof: the intensity above which a kind is compute-bound."""
    ceiling_time_s: Pos = None
    """The step if every kind ran at its roof (kinds with no roof: their exposed_time_s on CUDA, their time on the
    CPU; no time outside ops), s."""
    ceiling_speedup: Pos = None
    """step_time_s / ceiling_time_s: at most this many times faster on this hardware."""
    verdict: str | None = None
    """The kind with the most time above its roof, with its share and roof fraction; or the time in no op, or the
    ops not modelled (named), where that is larger."""
    kinds: list[KindRow] = []
    """One row per kind seen, by time."""
    unmodelled_ops: list[UnmodelledOp] = []
    """The ops of the 'not modelled' kind by name, the largest first (at most 20; the kind's row holds all their
    time): no FLOP or byte formula, so no roof, and no FLOPs counted beyond their callees' (issue 46)."""


class Verdict(_Model):
    bottleneck: str
    """data, compute, communication, host, ... (analysis/efficiency.py BOTTLENECKS)."""
    evidence: str | None = None
    """The figures the verdict rests on."""
    advice: str | None = None
    """What to try."""


class TimeToAccuracy(_Model):
    """--target-top1 (analysis/time_to_accuracy.py); the times and epochs are null while not reached."""

    target_top1: Annotated[float, Field(gt=0, le=1)]
    """--target-top1, a fraction."""
    reached_target: bool
    """Whether a validation top-1 reached it."""
    epochs_to_target: Count = None
    """The first epoch that reached it."""
    train_time_to_target_s: Pos = None
    """Training time up to that epoch, s."""
    val_time_to_target_s: Pos = None
    """Validation time up to it, s, the validation warm-up included."""
    val_warmup_time_included_s: Pos = None
    """The validation warm-up inside val_time_to_target_s, s (compilation, autotuning: the first validation)."""
    warmup_time_included_s: Pos = None
    """Warm-up time inside train_time_to_target_s, s."""
    best_val_top1: Frac = None
    """The best validation top-1 so far."""
    best_epoch: Count = None
    """Its epoch."""
    epochs_run: Count = None
    """Epochs run."""
    stopped_at_target: bool | None = None
    """The run ended at the target rather than at --epochs (--stop-at-target)."""


def _redacted(value: Any) -> Any:
    """A password or token in an error's text as `***` (effbench/redact.py): any exception's message may
    quote a URI (a tracking server's, a mirror's), and the record is uploaded and shown to others."""
    from effbench import redact

    return redact.text(value) if isinstance(value, str) else value


Redacted = Annotated[str | None, BeforeValidator(_redacted)]


def _redacted_argv(value: Any) -> Any:
    from effbench import redact

    return redact.argv(value) if isinstance(value, list) and all(isinstance(a, str) for a in value) else value


def _redacted_env(value: Any) -> Any:
    from effbench import redact

    ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return redact.env(value) if ok else value


# Also on read: a folder an older effbench wrote still shows no secret in a report, a leaderboard or an upload.
RedactedArgv = Annotated[list[str] | None, BeforeValidator(_redacted_argv)]
RedactedEnv = Annotated[dict[str, str] | None, BeforeValidator(_redacted_env)]


class Error(_Model):
    type: str | None = None
    """The exception's type."""
    message: Redacted = None
    """Its message, a password or token in it as `***` (effbench/redact.py)."""
    traceback: Redacted = None
    """Its traceback (results.json only), a password or token in it as `***`."""
    oom_ranks: list[int] | None = None
    """The ranks that ran out of memory (a multi-rank `oom`)."""
    rank0_error: Error | None = None
    """Rank 0's own failure when another rank's ended the job."""


class Download(_Model):
    downloaded: bool | None = None
    """True when this run fetched the dataset."""


class Data(_Model):
    """What fed the run: the dataset, its split sizes, the loader and what it skipped."""

    name: str | None = None
    """--dataset."""
    root: str | None = None
    """Where it was read from."""
    split: str | None = None
    """The split trained on."""
    shape: str | None = None
    """The synthetic shape."""
    loader: str | None = None
    """The loader that fed the run (what ran, whatever was asked)."""
    pool_batches: int | None = None
    """Synthetic data: distinct batches cycled through."""
    generated_on: str | None = None
    """Synthetic data: the device it is made on."""
    val_seed: int | None = None
    """Synthetic data: the generator seed of its held-out validation batches (no rank trains on them)."""
    download: Download | None = None
    """Whether this run downloaded it."""
    corrupt_image_examples: list[str] | None = None
    """Paths of some skipped images."""
    corrupt_image_reasons: dict[str, str] | None = None
    """Why each of them was skipped (`cannot be decoded`, `a FIFO, not a regular file`, ...)."""
    num_classes: int | None = None
    """Classes."""
    image_size: int | None = None
    """Side of the trained images, px."""
    train_size: int | None = None
    """Training images."""
    val_size: int | None = None
    """Validation images."""
    steps_per_epoch: int | None = None
    """Steps per epoch per rank."""
    batches_on_device: bool | None = None
    """Synthetic batches made on the device (no loader cost)."""
    workers: int | None = None
    """DataLoader workers per rank, as started."""
    workers_asked: int | None = None
    """--workers: the workers per rank asked for (more than the cores all start; a loader with none starts 0)."""
    corrupt_images_skipped: int | None = None
    """Images skipped: those the loader could not read or decode, and those the listing left out (not a regular
    file, over the size bound, outside --data-dir)."""
    files_refused: int | None = None
    """Of corrupt_images_skipped, the files the listing left out: not among train_size and val_size."""
    augment: Augment | None = None
    """The training recipe that ran (effbench/recipes.py)."""


class MeanMax(_Model):
    """A sampled metric's mean and max over a block; `ranks`: how many process trees a summed mean adds up."""

    mean: Num = None
    """Mean over the samples."""
    max: Num = None
    """Max over the samples."""
    ranks: int | None = None
    """Process trees a summed mean adds up."""


class HostUse(_Model):
    """The host's figures (measure/monitor.py): CPU in percent (100 = one core), memory in GiB, byte totals."""

    cpu_pct: MeanMax | None = None
    """The whole host's CPU use, percent of one core x cores."""
    proc_cpu_pct: MeanMax | None = None
    """effbench's process tree (loader workers included), 100 = one core."""
    rss_gib: MeanMax | None = None
    """The tree's resident memory, GiB."""
    pss_gib: MeanMax | None = None
    """The tree's proportional set size (shared pages split), GiB."""
    net_sent_bytes: Num = None
    """Bytes the host sent over the block."""
    net_recv_bytes: Num = None
    """Bytes it received."""
    disk_read_bytes: Num = None
    """Bytes read from disk."""
    disk_write_bytes: Num = None
    """Bytes written."""


class GpuUse(_Model):
    """One GPU's sampled figures (NVML) and its energy counter's reading, J."""

    index: int | None = None
    """The CUDA index."""
    uuid: str | None = None
    """The CUDA UUID."""
    nvml_uuid: str | None = None
    """The UUID NVML matched."""
    power_source: str | None = None
    """Which power reading power_w holds: NVML's instantaneous field, or its 1 s average (Ampere and newer)."""
    name: str | None = None
    """The GPU's name."""
    util_pct: MeanMax | None = None
    """NVML utilisation, percent."""
    mem_used_gib: MeanMax | None = None
    """Device memory in use, GiB."""
    power_w: MeanMax | None = None
    """Power draw, W."""
    temp_c: MeanMax | None = None
    """Temperature, C."""
    sm_clock_mhz: MeanMax | None = None
    """SM clock, MHz."""
    sm_clock_max_mhz: Num = None
    """The SM clock's maximum (NVML's nvmlDeviceGetMaxClockInfo), MHz."""
    energy_j: Num = None
    """Energy counted over the block, J."""
    clock_event_reasons: list[str] | None = None
    """What NVML named as holding the clocks down in any sample (nvmlDeviceGetCurrentClocksEventReasons' bits);
    [] when it named none."""


class UnmappedGpu(_Model):
    index: int | None = None
    """The CUDA index."""
    uuid: str | None = None
    """Its UUID."""
    reason: str | None = None
    """Why NVML could not match it (its figures are absent)."""


class MeasuredWindowUse(_Model):
    """The samples taken inside the measured steps alone (warm-up, validation and profiling left out)."""

    duration_s: Pos = None
    """The measured steps' time, s."""
    spans: int | None = None
    """Spans (one per epoch)."""
    samples: int | None = None
    """Samples inside them."""
    host: Annotated[HostUse, EMPTY_IF_NULL] = HostUse()
    """Host figures over them."""
    gpus: list[GpuUse] = []
    """Per GPU over them (energy_j: the counter's reads at the window's edges)."""


class Utilization(_Model):
    """The sampler's summary over the whole training block, and over its measured window."""

    interval_s: Pos = None
    """The sampling interval, s."""
    samples: int | None = None
    """Samples taken."""
    hostname: str | None = None
    """The sampled host."""
    duration_s: Pos = None
    """The sampled block, s."""
    host: Annotated[HostUse, EMPTY_IF_NULL] = HostUse()
    """Host figures over the whole block."""
    gpus: list[GpuUse] = []
    """Per GPU, over the whole block."""
    gpus_unmapped: list[UnmappedGpu] = []
    """GPUs NVML could not match to a CUDA device."""
    measured_window: MeasuredWindowUse | None = None
    """The same figures over the measured steps alone."""


class EnvGpu(_Model):
    index: int | None = None
    """The CUDA (or NVML) index."""
    name: str | None = None
    """The GPU's name."""
    uuid: str | None = None
    """Its UUID."""
    capability: str | None = None
    """Compute capability, "9.0"."""
    memory_total_gib: Num = None
    """Its memory, GiB."""
    sm_count: int | None = None
    """Streaming multiprocessors CUDA reports for it (a MIG instance: its own)."""


class ImageInfo(_Model):
    """The image's identity file (system/identity.py): None outside the image."""

    revision: str | None = None
    """The git revision the image was built from."""
    flavour: str | None = None
    """The lock flavour (cu130, cpu...)."""
    lock_sha256: str | None = None
    """sha256 of the lock file installed."""
    created: str | None = None
    """Build time."""


class Env(_Model):
    """The software and hardware the run had (system/hardware.py env_snapshot): the result's conditions."""

    python: str | None = None
    """Python version."""
    platform: str | None = None
    """OS and kernel."""
    hostname: str | None = None
    """Rank 0's host."""
    effbench: str | None = None
    """effbench version."""
    effbench_commit: str | None = None
    """The git commit of effbench's source when it ran from a git checkout (`git rev-parse HEAD`); null otherwise
    (an image names its own: `image.revision`)."""
    torch: str | None = None
    """torch version."""
    torchvision: str | None = None
    """torchvision version."""
    torchcodec: str | None = None
    """torchcodec version (the fast loader's decoders)."""
    efficientnet_pytorch: str | None = None
    """efficientnet-pytorch version."""
    numpy: str | None = None
    """numpy version."""
    cuda_build: str | None = None
    """CUDA version torch was built with."""
    cudnn: int | None = None
    """cuDNN version (e.g. 91000)."""
    cpu_model: str | None = None
    """CPU model name."""
    cpu_cores_usable: int | None = None
    """Cores this process may run on (affinity and cgroup quota)."""
    cpu_cores_total: int | None = None
    """Cores of the host."""
    torch_threads: int | None = None
    """torch's intra-op threads."""
    cuda_available: bool | None = None
    """torch.cuda.is_available()."""
    gpu_count: int | None = None
    """Visible GPUs."""
    gpus: list[EnvGpu] = []
    """Per visible GPU, from torch."""
    cuda_compat: dict[str, Any] | None = None
    """Driver CUDA, torch CUDA, the image's CUDA and the forward-compatibility libraries (system/cuda_compat.py)."""
    nccl_version: str | None = None
    """NCCL version torch was built with."""
    container_runtime: str | None = None
    """docker, podman, apptainer or none (system/hardware.py container_runtime)."""
    host_boot_id: str | None = None
    """The host kernel's boot id (/proc/sys/kernel/random/boot_id): the same in every container on the host until it
    reboots."""
    machine: str | None = None
    """The machine as the leaderboard and the export name it (system/machine.py): EFFBENCH_MACHINE, else the hostname,
    else, where docker or podman made the hostname up or in a Kubernetes pod, `GPU-<UUID prefix>` or
    `boot-<boot id prefix>`."""
    machine_source: str | None = None
    """Where `machine` came from: EFFBENCH_MACHINE, hostname, GPU UUIDs or host boot id."""
    image: ImageInfo | None = None
    """The image's identity: revision, flavour, lock hash, build time."""
    cgroup_cpu_quota_cores: Num = None
    """The cgroup's CPU quota in cores."""
    cgroup_memory_limit_gib: Num = None
    """The cgroup's memory limit, GiB."""
    shm_size_gib: Num = None
    """Size of /dev/shm (DataLoader workers pass batches through it), GiB."""
    driver_version: str | None = None
    """NVIDIA driver version (NVML)."""
    nvml_gpus: list[EnvGpu] = []
    """Per GPU, from NVML."""
    env_vars: RedactedEnv = None
    """Environment variables that change what runs, as the run saw them (CUDA_VISIBLE_DEVICES, NCCL_*,
    OMP_NUM_THREADS, OMP_WAIT_POLICY, GOMP_SPINCOUNT...); a password or token in one as `***` (effbench/redact.py)."""
    load_avg_1m: Pos = None
    """The host's 1-minute load average (runnable threads) when the run folder opened, its own setup included."""


class Process(_Model):
    """The process that writes a file while it runs, as a reader tells it apart from any other (effbench/liveness.py):
    a `running` record whose process is gone from its host, or whose pid another process now holds, reads `dead`."""

    host: str | None = None
    """The machine it runs on (socket.gethostname())."""
    pid: int | None = None
    """Its process id on that machine."""
    start_time: float | None = None
    """When it started, seconds since the epoch (psutil's create_time): a pid reused later started at another time."""
    pid_namespace: str | None = None
    """Its PID namespace (Linux: /proc/self/ns/pid), so two containers that share a hostname are told apart."""


class Launch(_Model):
    """How the run was launched (launch/plan.py LaunchPlan) and the rank-0 process that wrote the record."""

    mode: str | None = None
    """local, torchrun or external (Slurm, Kubeflow)."""
    device_type: str | None = None
    """cuda or cpu: what the ranks trained on."""
    nproc_per_node: int | None = None
    """Processes per node."""
    nnodes: int | None = None
    """Nodes."""
    threads_per_proc: int | None = None
    """torch threads per process."""
    argv: list[str] | None = None
    """The torchrun command line."""
    env: dict[str, str] | None = None
    """Environment variables effbench set for the ranks."""
    pid: int | None = None
    """Rank 0's process id (its host and start time: `process`)."""


class ModelInfo(_Model):
    """The network that trained: its parameters, weights, head and frozen blocks."""

    arch: str | None = None
    """--arch."""
    total_params: int | None = None
    """Parameters."""
    trainable_params: int | None = None
    """Parameters trained (--freeze)."""
    num_classes: int | None = None
    """Outputs of the head."""
    weights: str | None = None
    """--weights."""
    head: str | None = None
    """The classifier head."""
    freeze: str | None = None
    """--freeze."""
    blocks: int | None = None
    """Blocks of the backbone."""
    trainable_blocks: int | None = None
    """Of them, trained."""
    trainable_stages: list[str] | str | None = None
    """Which stages train: their names (--freeze), or "all"."""

    note: str | None = None
    """Why there is no model (--data-only)."""


class Backend(_Model):
    """The backend switches as they ran (None: not applicable on this device)."""

    cudnn_benchmark: bool | None = None
    """--cudnn-benchmark as it ran."""
    channels_last: bool | None = None
    """--channels-last as it ran."""
    pin_memory: bool | None = None
    """--pin-memory as it ran."""
    optimizer_impl: str | None = None
    """foreach, fused or for-loop."""
    compile: bool | None = None
    """--compile as it ran."""
    tf32_matmul: bool | None = None
    """torch.backends.cuda.matmul.allow_tf32."""


class Stragglers(_Model):
    """How far the slowest rank lagged the fastest over the measured steps (run/record.py straggler_spread)."""

    slowest_rank: int | None = None
    """The rank with the longest measured time."""
    fastest_rank: int | None = None
    """The rank with the shortest."""
    spread_s: Pos = None
    """Their difference, s."""
    spread_pct: Pos = None
    """It as a percent of the fastest."""


class Diverged(_Model):
    epoch: int | None = None
    """The epoch it stopped in, from 1."""
    step: int | None = None
    """The step of that epoch whose loss was not finite, from 1."""
    global_step: int | None = None
    """That step counted over the run (warm-up included), from 1."""
    loss: str | None = None
    """The loss it read (nan, inf), as text: JSON has no nan."""
    rank: int | None = None
    """The rank that saw it (DDP)."""


class Results(_Model):
    """results.json: one run, rewritten atomically after every epoch and at the end."""

    schema_version: int
    """The file's format version (results.SCHEMA_VERSION); a newer one than this effbench reads is refused."""
    status: str
    """running, ok, failed, interrupted, oom or diverged (results.STATUSES, checked by the reader). Readers show a
    `running` one whose `process` is gone as `dead` (effbench/liveness.py); the file keeps `running`."""
    run_name: str | None = None
    """The run folder's name."""
    command: RedactedArgv = None
    """The command line as typed, a password or token in it as `***` (effbench/redact.py)."""
    started_at: str | None = None
    """ISO 8601 time the run started."""
    finished_at: str | None = None
    """ISO 8601 time the run ended (absent while running)."""
    updated_at: str | None = None
    """ISO 8601 time of the file's last write (every epoch while running): what a `dead` run reads last written."""
    process: Process | None = None
    """Rank 0's process, which writes the file while the run is `running`: a reader that finds it gone shows `dead`."""
    config: Config = Config()
    """The resolved configuration (config.json without its requested/no_effect notes)."""
    env: Annotated[Env, EMPTY_IF_NULL] = Env()
    """Python, torch, CUDA, cuDNN, NCCL, GPUs, CPU, cgroup limits, container: the run's conditions."""
    device: str | None = None
    """The device label, e.g. `cpu`, `1 x cuda:0 (NVIDIA H100 80GB HBM3)`."""
    world_size: Annotated[int, Field(ge=1)] | None = None
    """How many processes trained (torchrun ranks)."""
    devices: int | None = None
    """How many devices trained (DataParallel: several per process)."""
    strategy: str | None = None
    """single, ddp or dp."""
    launch: Annotated[Launch, EMPTY_IF_NULL] = Launch()
    """The launch plan: mode, device type, processes per node, nodes, threads per process."""
    precision: str | None = None
    """fp32, tf32, amp-fp16 or amp-bf16, as it ran."""
    batch_size_per_device: int | None = None
    """Images per step on each device."""
    global_batch_size: int | None = None
    """Images per optimizer step over all devices."""
    model: Annotated[ModelInfo, EMPTY_IF_NULL] = ModelInfo()
    """The network: parameters, weights, head, frozen blocks."""
    data_only: bool | None = None
    """True when only the input pipeline ran (--data-only): no model, no compute."""
    backend: Annotated[Backend, EMPTY_IF_NULL] = Backend()
    """cuDNN benchmark, channels-last, pinned memory, optimizer implementation, compile, TF32 matmul."""
    data: Annotated[Data, EMPTY_IF_NULL] = Data()
    """The dataset, split sizes, steps per epoch, loader, workers, skipped images."""
    throughput_img_s: Pos = None
    """The headline: images per second over the measured steps of all epochs (warm-up excluded), all ranks."""
    compile_time_s: Pos = None
    """torch.compile's first-step cost, s (None without --compile)."""
    epochs: list[Epoch] = []
    """Per epoch, as epochs.csv."""
    warmup: Tally | None = None
    """The warm-up steps, summed over epochs: left out of every headline figure."""
    measured: Tally | None = None
    """The measured steps, summed over epochs: the headline's window."""
    warmup_rule: WarmupRule | None = None
    """How the warm-up's length was chosen: fixed, or found from the step times (auto)."""
    until: Until | None = None
    """`--until ci:X%`: the interval reached and why the measurement ended."""
    data_time_share: Frac = None
    """Share of the measured time spent waiting for data, 0..1."""
    final: Annotated[Final, EMPTY_IF_NULL] = Final()
    """The last epoch's train and validation loss and top-1 (a fraction 0..1)."""
    ranks: list[Rank] = []
    """Per rank: host, device, images, steps, times and throughput of its measured steps."""
    stragglers: Stragglers | None = None
    """How far the slowest rank lagged the fastest (runs with 2+ ranks)."""
    wall_time_s: Pos = None
    """The whole run up to its report, s: setup, data, model (its FLOPs counted), warm-up, training, validation,
    profiling. The sum of wall_time_by_phase_s."""
    wall_time_by_phase_s: dict[str, Annotated[float, Field(ge=0)]] | None = None
    """Wall seconds per phase, in the order the run goes (run/phases.py PHASES: setup, dataset, model, warm-up,
    epochs, validation, profiling), each summed over its visits; a phase the run never entered is absent. A phase
    holds what runs until the next begins: model also writes the run folder's first files (env.json) and starts
    the sampler, validation also writes the epoch's records."""
    throughput_windows: Windows | None = None
    """The measured steps cut into windows: per-window throughput and its median with a 95% interval."""
    utilization: Annotated[Utilization, EMPTY_IF_NULL] = Utilization()
    """Sampled CPU, memory, network, disk and GPU use, over the block and over the measured window."""
    peak_mem_gib: Num = None
    """Allocated device-memory peak of the measured steps alone, GiB (the largest over devices)."""
    peak_mem_reserved_gib: Num = None
    """Reserved peak of the same window (includes blocks cached before it), GiB."""
    peak_mem_nvml_used_gib: Num = None
    """Device memory in use as NVML saw it over the same window, GiB (the largest over devices; sampled every
    --sample-interval-s): every allocation on the device, torch's pool and what torch's allocator never sees
    (DALI's and nvJPEG's buffers, CUDA contexts, other processes)."""
    flops_per_image: Num = None
    """Training FLOPs per image (forward + backward), counted on the model (effbench's own count)."""
    flops_forward_per_image: Num = None
    """Forward FLOPs per image."""
    flops_error: str | None = None
    """Why the FLOPs could not be counted."""
    achieved_tflops: Num = None
    """flops_per_image x throughput_img_s / 1e12."""
    mfu: Num = None
    """Model FLOPs utilisation: achieved over the devices' peak for the precision (GPU runs)."""
    mfu_peak_tflops_per_device: Num = None
    """The peak MFU is held against, TFLOP/s per device."""
    mfu_peak_precision: str | None = None
    """Which peak (per op kind and precision) MFU used."""
    mfu_peak_gpu: str | None = None
    """Whose datasheet peak: its row ("A100"), or a MIG instance's share of it ("A100 MIG (14/108 SMs)")."""
    clock_note: str | None = None
    """Set when a GPU's mean SM clock over the measured steps was under 90% of its maximum: the clocks and NVML's
    clock-event reasons. MFU and throughput are then a slowed GPU's (the verdict's evidence says so too)."""
    energy_j: Num = None
    """GPU energy of the measured steps alone (the window's counter reads), J."""
    images_per_j: Num = None
    """Measured images / energy_j."""
    energy_note: str | None = None
    """Why energy_j is absent on a GPU run."""
    profile: Profile | None = None
    """The profiling pass: per-phase times, the tables and trace files, the profiler's own cost."""
    profile_error: str | None = None
    """Why the profiling pass failed (the training figures stand)."""
    roofs: Roofs | None = None
    """This machine's measured compute and memory roofs, how they were taken (with the profiling pass)."""
    roofs_error: str | None = None
    """Why the roofs could not be measured (the profiling pass goes on)."""
    roofline: Roofline | None = None
    """The profiled step's time per kind of operation against the roofs, the verdict and the ceiling."""
    verdict: Verdict | None = None
    """The bottleneck in plain words, its evidence and the advice."""
    time_to_accuracy: TimeToAccuracy | None = None
    """--target-top1: whether and when the target was reached."""
    error: Error | None = None
    """What ended a failed, oom or diverged run."""
    reports_error: str | None = None
    """The report files the run could not write at its end, each with why: `report.html not written (no space
    left on the device)`. The status stands: only the measurement's own files (results.json, epochs.csv,
    steps.csv, utilization.csv) make a run `failed`; `effbench report DIR` draws the reports again."""
    diverged: Diverged | None = None
    """The step (and rank) where the loss became non-finite."""
    signal: int | None = None
    """The signal that interrupted the run."""
    interrupted_phase: str | None = None
    """The phase an interrupted run was in."""
    phase: str | None = None
    """While the run is built (setup, dataset, model): where it is."""

    # Read side only, never in the file: why a reader shows the status it does (liveness.observe), e.g.
    # "last written 2025-01-02 03:04:05 UTC" beside a `dead` run, "on node7, last written ..." beside a `running`
    # one on another host.
    _status_note: str | None = PrivateAttr(default=None)

    @property
    def status_note(self) -> str | None:
        """Why a reader shows this status (liveness.observe); None as written."""
        return self._status_note

    @property
    def shown_status(self) -> str:
        """The status as readers print it: `dead (last written T)`, `running (on HOST, last written T)`, `ok`."""
        return f"{self.status} ({self._status_note})" if self._status_note else self.status


class CellSummary(_Model):
    """The few figures sweep.json keeps per cell (sweep/runner.py cell_summary); the report reads the run for the rest."""

    throughput_img_s: Pos = None
    """The run's headline throughput."""
    throughput_median_img_s: Pos = None
    """Median of its throughput windows."""
    throughput_ci95_img_s: list[float | None] | None = None
    """The median's 95% interval [low, high]."""
    batch_size_per_device: int | None = None
    """Images per step per device."""
    global_batch_size: int | None = None
    """Images per step over all devices."""
    peak_mem_gib: Num = None
    """Peak allocated device memory of the measured steps, GiB."""
    peak_rss_gib: Num = None
    """Peak resident memory of rank 0's process tree, GiB."""
    peak_host_gib: Num = None
    """Peak host memory of the job (PSS where measured), GiB."""
    final: Annotated[Final, EMPTY_IF_NULL] = Final()
    """The last epoch's losses and top-1."""
    wall_time_s: Pos = None
    """The run's whole wall time, s (its results.json wall_time_s); null for a run folder made before effbench
    timed runs by phase, whose wall time left out setup, dataset and model."""
    time_to_accuracy: TimeToAccuracy | None = None
    """--target-top1's outcome."""


class Cell(_Model):
    index: int
    """0-based place in the grid."""
    key: str
    """The cell's options as one stable string (its identity on resume)."""
    params: dict[str, Any]
    """The varied options' values."""
    config: dict[str, Any]
    """The cell's whole run configuration."""
    status: str  # checked against manifest.CELL_STATUSES by the reader
    """pending, running, ok, oom, diverged, failed, interrupted or skipped (manifest.CELL_STATUSES). Readers show
    a `running` one whose sweep `process` is gone as `dead` (effbench/liveness.py)."""
    run_dir: str | None = None
    """Its run folder, relative to the sweep folder."""
    attempts: int = 0
    """How many times it started."""
    error: Error | None = None
    """What ended it, without the traceback (in its results.json)."""
    summary: CellSummary | None = None
    """The few figures the sweep tables need without reading the run folder."""
    started_at: str | None = None
    """ISO 8601 time it started."""
    finished_at: str | None = None
    """ISO 8601 time it ended."""

    _status_note: str | None = PrivateAttr(default=None)  # as Results': read side only (liveness.observe_manifest)

    @property
    def status_note(self) -> str | None:
        """Why a reader shows this status (liveness.observe_manifest); None as written."""
        return self._status_note

    @property
    def shown_status(self) -> str:
        """The status as readers print it: `dead (last written T)`, `running (on HOST, last written T)`, `ok`."""
        return f"{self.status} ({self._status_note})" if self._status_note else self.status


class Manifest(_Model):
    schema_version: int
    """The file's format version."""
    kind: Literal["sweep"]
    """Always sweep."""
    name: str
    """The sweep's name (its folder)."""
    preset: str | None = None
    """--preset, when the sweep came from one."""
    dims: dict[str, list[Any]]
    """Each varied option and its values (the grid's axes)."""
    zip: bool = False
    """True: the dims vary together (one cell per index), not as a product."""
    fingerprint: str
    """A hash of the dims and fixed options: a resumed sweep must match it."""
    command: RedactedArgv = None
    """The command line as typed, a password or token in it as `***` (effbench/redact.py)."""
    created_at: str | None = None
    """ISO 8601 time the sweep was planned."""
    updated_at: str | None = None
    """ISO 8601 time of the last cell's change."""
    process: Process | None = None
    """The sweep process that runs the cells: a reader that finds it gone shows its `running` cell `dead`."""
    cells: list[Cell]
    """One per point of the grid, in run order."""


class _FieldPath:
    """Records the attributes a getter reads, checking each is a field of the model it stands for."""

    def __init__(self, model: Any, parts: tuple[str, ...] = ()) -> None:
        self._model, self._parts = model, parts

    def __getattr__(self, name: str) -> _FieldPath:
        fields = getattr(self._model, "model_fields", {})
        if name not in fields:
            raise AttributeError(f"{getattr(self._model, '__name__', self._model)} has no field {name!r}")
        annotation = fields[name].annotation
        # the model inside `X | None` (a section) or `list[X]`, so the path can go on into it
        inner = next(
            (a for a in getattr(annotation, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)),
            annotation,
        )
        return _FieldPath(inner, (*self._parts, name))


def field_path(model: type[BaseModel], getter: Callable[[Any], Any]) -> str:
    """`field_path(Results, lambda r: r.measured.throughput_img_s)` -> "measured.throughput_img_s": a field's name
    taken from the model (a column, a summary key), never retyped; a name the model lacks raises."""
    return ".".join(getter(_FieldPath(model))._parts)


_M = TypeVar("_M", bound=BaseModel)


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def check(model: type[_M], data: Any, path: Path, fix: str) -> _M:
    """Validate `data` against `model` (and return it typed); the first problem is one EffbenchError naming
    file and field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        got = repr(first.get("input"))
        got = got if len(got) <= 60 else got[:57] + "..."
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise EffbenchError(
            str(path), f"field {_where(first['loc'])}: {first['msg'].lower()}, got {got}{more}; {fix}"
        ) from None


def inside(folder: Path, value: str, field: str, path: Path, *, resolved: Path | None = None) -> Path:
    """`folder / value`, resolved, refused unless it stays inside `folder` (a result file is input).
    `resolved`: `folder` already resolved (a caller checking several names in one folder resolves it once)."""
    base = Path(folder).resolve() if resolved is None else resolved
    parts = Path(value).parts
    # A relative name without ".." can only leave the folder through a link among its own components: checking
    # those (an lstat each) spares a full resolve per name, which a 10,000-run leaderboard paid 40,000 times.
    if parts and not Path(value).is_absolute() and ".." not in parts and not _holds_a_link(base, parts):
        return base.joinpath(*parts)
    target = (base / value).resolve()
    if not target.is_relative_to(base):
        raise EffbenchError(
            str(path),
            f"field {field}: {value!r} points outside {folder}; a result file may only name paths inside its folder",
        )
    return target


def _holds_a_link(base: Path, parts: tuple[str, ...]) -> bool:
    """Whether base/parts[0], base/parts[0]/parts[1], ... is a symbolic link, up to the first that is missing."""
    current = base
    for part in parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return True
        except FileNotFoundError:
            return False
        except OSError:  # not a folder on the way, a loop, a permission: resolve() decides
            return True
    return False

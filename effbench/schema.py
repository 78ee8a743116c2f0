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

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from effbench.errors import EffbenchError

Num = float | None  # strict float also takes an int (pydantic's strict mode: int -> float is allowed)
# Figures no run can produce are refused like a wrong type: a negative time, count or throughput, a top-1
# or a share outside 0..1 (top-1 is a fraction; report printed a hand-edited 7.5 as the accuracy).
Pos = Annotated[float, Field(ge=0)] | None
Frac = Annotated[float, Field(ge=0, le=1)] | None
Count = Annotated[int, Field(ge=0)] | None


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, use_attribute_docstrings=True)

    # TRANSITION (issue 24 item 2): dict-style reads, so a reader not yet moved onto attributes works on the
    # model while the others move. Removed once no reader uses them; do not call them in new code.
    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, None) if key in type(self).model_fields else (self.model_extra or {}).get(key)
        if value is None and key not in self.model_fields_set:
            return default
        return value

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields or key in (self.model_extra or {}):
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.model_fields_set or key in (self.model_extra or {}))


def _none_is_empty(value: Any) -> Any:
    return {} if value is None else value


# A section that reads as empty when absent or null (an older writer, a run that failed before it).
EMPTY_IF_NULL = BeforeValidator(_none_is_empty)


class Augment(_Model):
    """The training recipe (--augment) that ran, effbench.recipes.Recipe.record(); absent before it existed."""

    name: str
    kind: str | None = None
    steps: str | None = None
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
    rrc_ratio: list[float] | None = None
    interpolation: str | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    inexact: list[str] | None = None


class Config(_Model):
    arch: str | None = None
    dataset: str | None = None
    data_dir: str | None = None
    download: bool | None = None
    val_fraction: Num = None
    image_size: int | None = None
    loader: str | None = None
    gpu_decode: bool | None = None
    augment: str | None = None
    augment_recipe: Augment | None = None
    data_only: bool | None = None
    workers: int | None = None
    batch_size: int | None = None
    epochs: int | None = None
    max_steps: int | None = None
    max_val_steps: int | None = None
    warmup_steps: int | None = None
    optimizer: str | None = None
    lr: Num = None
    momentum: Num = None
    weight_decay: Num = None
    precision: str | None = None
    channels_last: bool | None = None
    cudnn_benchmark: bool | None = None
    pin_memory: bool | None = None
    optimizer_impl: str | None = None
    compile: bool | None = None
    device: str | None = None
    seed: int | None = None
    freeze: str | None = None
    weights: str | None = None
    batch_norm: bool | None = None
    gpus: int | None = None
    nproc: int | None = None
    strategy: str | None = None
    scaling: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    pg_timeout_s: Num = None
    output: str | None = None
    profile: bool | None = None
    profile_steps: int | None = None
    sample_interval_s: Num = None
    log_interval: int | None = None
    repeats: int | None = None
    smoke: bool | None = None
    target_top1: Frac = None
    stop_at_target: bool | None = None
    dataset_shape: str | None = None
    """Generated data's shape in words (config.resolved_record)."""
    requested: dict[str, Any] | None = None
    """The values asked for where they differ from what ran (config.resolved_record)."""
    no_effect: dict[str, str] | None = None
    """Per option that changed nothing, why (config.resolved_record)."""


class Epoch(_Model):
    epoch: int
    steps: Count = None
    images: Count = None
    data_time_s: Pos = None
    compute_time_s: Pos = None
    total_time_s: Pos = None
    train_loss: Num = None
    train_top1: Frac = None
    val_loss: Num = None
    val_top1: Frac = None
    val_time_s: Pos = None
    val_images: Count = None
    throughput_img_s: Pos = None
    warmup_steps: Count = None
    warmup_time_s: Pos = None
    measured_images: Count = None
    measured_time_s: Pos = None
    measured_data_time_s: Pos = None
    measured_compute_time_s: Pos = None


class Tally(_Model):
    steps: Annotated[int, Field(ge=0)]
    images: Annotated[int, Field(ge=0)]
    data_time_s: Annotated[float, Field(ge=0)]
    compute_time_s: Annotated[float, Field(ge=0)]
    time_s: Annotated[float, Field(ge=0)]
    throughput_img_s: Pos = None


class Final(_Model):
    train_loss: Num = None
    train_top1: Frac = None
    val_loss: Num = None
    val_top1: Frac = None


class Rank(_Model):
    rank: int
    local_rank: int | None = None
    host: str | None = None
    device: str | None = None
    images: Count = None
    steps: Count = None
    data_time_s: Pos = None
    compute_time_s: Pos = None
    time_s: Pos = None
    throughput_img_s: Pos = None


class Stat(_Model):
    """A figure over the throughput windows: median, mean, stdev and its confidence interval (analysis/stats.py)."""

    n: int | None = None
    median: Num = None
    mean: Num = None
    stdev: Num = None
    ci_low: Num = None
    ci_high: Num = None
    note: str | None = None


class Windows(_Model):
    requested: int | None = None
    windows: int | None = None
    steps: int | None = None
    ranks: int | None = None
    window_steps: list[int] | None = None
    throughput_img_s: list[Pos] | None = None
    step_time_ms: list[Pos] | None = None
    data_time_share: list[Frac] | None = None
    summary: dict[str, Stat | None] | None = None


class ProfilePhase(_Model):
    phase: str
    calls: int | None = None
    cpu_time_s: Num = None
    cpu_share_of_step: Num = None
    device_time_s: Num = None
    device_share_of_step: Num = None


class Profile(_Model):
    phases: list[ProfilePhase] | None = None
    tables: dict[str, str] | None = None
    trace: str | None = None
    active_steps: int | None = None
    profiled_step_time_s: Num = None
    profiled_step_times_s: list[float] | None = None
    timed_step_time_s: Num = None
    profiler_overhead: Num = None
    profiler_overhead_note: str | None = None
    exposed_comm_share: Frac = None


class Verdict(_Model):
    bottleneck: str
    evidence: str | None = None
    advice: str | None = None


class TimeToAccuracy(_Model):
    """--target-top1 (analysis/time_to_accuracy.py); the times and epochs are null while not reached."""

    target_top1: Annotated[float, Field(gt=0, le=1)]
    reached_target: bool
    epochs_to_target: Count = None
    train_time_to_target_s: Pos = None
    val_time_to_target_s: Pos = None
    warmup_time_included_s: Pos = None
    best_val_top1: Frac = None
    best_epoch: Count = None
    epochs_run: Count = None
    stopped_at_target: bool | None = None


class Error(_Model):
    type: str | None = None
    message: str | None = None
    traceback: str | None = None


class Download(_Model):
    downloaded: bool | None = None


class Data(_Model):
    """What fed the run: the dataset, its split sizes, the loader and what it skipped."""

    name: str | None = None
    root: str | None = None
    split: str | None = None
    shape: str | None = None
    loader: str | None = None
    pool_batches: int | None = None
    generated_on: str | None = None
    download: Download | None = None
    corrupt_image_examples: list[str] | None = None
    corrupt_image_reasons: dict[str, str] | None = None
    num_classes: int | None = None
    image_size: int | None = None
    train_size: int | None = None
    val_size: int | None = None
    steps_per_epoch: int | None = None
    batches_on_device: bool | None = None
    workers: int | None = None
    corrupt_images_skipped: int | None = None
    augment: Augment | None = None


class MeanMax(_Model):
    """A sampled metric's mean and max over a block; `ranks`: how many process trees a summed mean adds up."""

    mean: Num = None
    max: Num = None
    ranks: int | None = None


class HostUse(_Model):
    """The host's figures (measure/monitor.py): CPU in percent (100 = one core), memory in GiB, byte totals."""

    cpu_pct: MeanMax | None = None
    proc_cpu_pct: MeanMax | None = None
    rss_gib: MeanMax | None = None
    pss_gib: MeanMax | None = None
    net_sent_bytes: Num = None
    net_recv_bytes: Num = None
    disk_read_bytes: Num = None
    disk_write_bytes: Num = None


class GpuUse(_Model):
    """One GPU's sampled figures (NVML) and its energy counter's reading, J."""

    index: int | None = None
    uuid: str | None = None
    nvml_uuid: str | None = None
    name: str | None = None
    util_pct: MeanMax | None = None
    mem_used_gib: MeanMax | None = None
    power_w: MeanMax | None = None
    temp_c: MeanMax | None = None
    sm_clock_mhz: MeanMax | None = None
    energy_j: Num = None


class UnmappedGpu(_Model):
    index: int | None = None
    uuid: str | None = None
    reason: str | None = None


class MeasuredWindowUse(_Model):
    """The samples taken inside the measured steps alone (warm-up, validation and profiling left out)."""

    duration_s: Pos = None
    spans: int | None = None
    samples: int | None = None
    host: Annotated[HostUse, EMPTY_IF_NULL] = HostUse()
    gpus: list[GpuUse] = []


class Utilization(_Model):
    """The sampler's summary over the whole training block, and over its measured window."""

    interval_s: Pos = None
    samples: int | None = None
    hostname: str | None = None
    duration_s: Pos = None
    host: Annotated[HostUse, EMPTY_IF_NULL] = HostUse()
    gpus: list[GpuUse] = []
    gpus_unmapped: list[UnmappedGpu] = []
    measured_window: MeasuredWindowUse | None = None


class EnvGpu(_Model):
    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    capability: str | None = None
    """Compute capability, "9.0"."""
    memory_total_gib: Num = None


class ImageInfo(_Model):
    """The image's identity file (system/identity.py): None outside the image."""

    revision: str | None = None
    flavour: str | None = None
    lock_sha256: str | None = None
    created: str | None = None


class Env(_Model):
    """The software and hardware the run had (system/hardware.py env_snapshot): the result's conditions."""

    python: str | None = None
    platform: str | None = None
    hostname: str | None = None
    effbench: str | None = None
    torch: str | None = None
    torchvision: str | None = None
    torchcodec: str | None = None
    efficientnet_pytorch: str | None = None
    numpy: str | None = None
    cuda_build: str | None = None
    cudnn: int | None = None
    cpu_model: str | None = None
    cpu_cores_usable: int | None = None
    cpu_cores_total: int | None = None
    torch_threads: int | None = None
    cuda_available: bool | None = None
    gpu_count: int | None = None
    gpus: list[EnvGpu] = []
    cuda_compat: dict[str, Any] | None = None
    nccl_version: str | None = None
    container_runtime: str | None = None
    image: ImageInfo | None = None
    cgroup_cpu_quota_cores: Num = None
    cgroup_memory_limit_gib: Num = None
    shm_size_gib: Num = None
    driver_version: str | None = None
    nvml_gpus: list[EnvGpu] = []
    env_vars: dict[str, str] | None = None


class Launch(_Model):
    """How the run was launched (launch/plan.py LaunchPlan) and the rank-0 process that wrote the record."""

    mode: str | None = None
    device_type: str | None = None
    nproc_per_node: int | None = None
    nnodes: int | None = None
    threads_per_proc: int | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    pid: int | None = None


class ModelInfo(_Model):
    """The network that trained: its parameters, weights, head and frozen blocks."""

    arch: str | None = None
    total_params: int | None = None
    trainable_params: int | None = None
    num_classes: int | None = None
    weights: str | None = None
    head: str | None = None
    freeze: str | None = None
    blocks: int | None = None
    trainable_blocks: int | None = None
    trainable_stages: str | None = None


class Backend(_Model):
    """The backend switches as they ran (None: not applicable on this device)."""

    cudnn_benchmark: bool | None = None
    channels_last: bool | None = None
    pin_memory: bool | None = None
    optimizer_impl: str | None = None
    compile: bool | None = None
    tf32_matmul: bool | None = None


class Stragglers(_Model):
    """How far the slowest rank lagged the fastest over the measured steps (run/record.py straggler_spread)."""

    slowest_rank: int | None = None
    fastest_rank: int | None = None
    spread_s: Pos = None
    spread_pct: Pos = None


class Diverged(_Model):
    step: int | None = None
    rank: int | None = None


class Results(_Model):
    """results.json: one run, rewritten atomically after every epoch and at the end."""

    schema_version: int
    """The file's format version (results.SCHEMA_VERSION); a newer one than this effbench reads is refused."""
    status: str
    """running, ok, failed, interrupted, oom or diverged (results.STATUSES, checked by the reader)."""
    run_name: str | None = None
    """The run folder's name."""
    command: list[str] | None = None
    """The command line as typed."""
    started_at: str | None = None
    """ISO 8601 time the run started."""
    finished_at: str | None = None
    """ISO 8601 time the run ended (absent while running)."""
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
    data_time_share: Frac = None
    """Share of the measured time spent waiting for data, 0..1."""
    final: Annotated[Final, EMPTY_IF_NULL] = Final()
    """The last epoch's train and validation loss and top-1 (a fraction 0..1)."""
    ranks: list[Rank] = []
    """Per rank: host, device, images, steps, times and throughput of its measured steps."""
    stragglers: Stragglers | None = None
    """How far the slowest rank lagged the fastest (runs with 2+ ranks)."""
    wall_time_s: Pos = None
    """The whole run, s: setup, data, training, validation, profiling."""
    throughput_windows: Windows | None = None
    """The measured steps cut into windows: per-window throughput and its median with a 95% interval."""
    utilization: Annotated[Utilization, EMPTY_IF_NULL] = Utilization()
    """Sampled CPU, memory, network, disk and GPU use, over the block and over the measured window."""
    peak_mem_gib: Num = None
    """Allocated device-memory peak of the measured steps alone, GiB (the largest over devices)."""
    peak_mem_reserved_gib: Num = None
    """Reserved peak of the same window (includes blocks cached before it), GiB."""
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
    verdict: Verdict | None = None
    """The bottleneck in plain words, its evidence and the advice."""
    time_to_accuracy: TimeToAccuracy | None = None
    """--target-top1: whether and when the target was reached."""
    error: Error | None = None
    """What ended a failed, oom or diverged run."""
    diverged: Diverged | None = None
    """The step (and rank) where the loss became non-finite."""
    signal: int | None = None
    """The signal that interrupted the run."""
    interrupted_phase: str | None = None
    """The phase an interrupted run was in."""
    phase: str | None = None
    """While the run is built (setup, dataset, model): where it is."""


class CellSummary(_Model):
    """The few figures sweep.json keeps per cell (sweep/runner.py cell_summary); the report reads the run for the rest."""

    throughput_img_s: Pos = None
    throughput_median_img_s: Pos = None
    throughput_ci95_img_s: list[float | None] | None = None
    batch_size_per_device: int | None = None
    global_batch_size: int | None = None
    peak_mem_gib: Num = None
    peak_rss_gib: Num = None
    peak_host_gib: Num = None
    final: Annotated[Final, EMPTY_IF_NULL] = Final()
    wall_time_s: Pos = None
    time_to_accuracy: TimeToAccuracy | None = None


class Cell(_Model):
    index: int
    key: str
    params: dict[str, Any]
    config: dict[str, Any]
    status: str  # checked against manifest.CELL_STATUSES by the reader
    run_dir: str | None = None
    attempts: int = 0
    error: Error | None = None
    summary: CellSummary | None = None
    started_at: str | None = None
    finished_at: str | None = None


class Manifest(_Model):
    schema_version: int
    kind: Literal["sweep"]
    name: str
    preset: str | None = None
    dims: dict[str, list[Any]]
    zip: bool = False
    fingerprint: str
    command: list[str] | None = None
    created_at: str | None = None
    updated_at: str | None = None
    cells: list[Cell]


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


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def check(model: type[BaseModel], data: Any, path: Path, fix: str) -> None:
    """Validate `data` against `model`; the first problem is one EffbenchError naming file and field."""
    try:
        model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        got = repr(first.get("input"))
        got = got if len(got) <= 60 else got[:57] + "..."
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise EffbenchError(
            str(path), f"field {_where(first['loc'])}: {first['msg'].lower()}, got {got}{more}; {fix}"
        ) from None


def inside(folder: Path, value: str, field: str, path: Path) -> Path:
    """`folder / value`, resolved, refused unless it stays inside `folder` (a result file is input)."""
    base = Path(folder).resolve()
    target = (base / value).resolve()
    if not target.is_relative_to(base):
        raise EffbenchError(
            str(path),
            f"field {field}: {value!r} points outside {folder}; a result file may only name paths inside its folder",
        )
    return target

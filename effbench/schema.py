"""The one schema of the files effbench reads back: results.json (a run) and sweep.json (a sweep).

Result files are input too: `effbench report` and `compare` read files a person may have edited.
`results.read_results` and `manifest.read_manifest` validate the whole record here, strictly (no
"5" for 5, no NaN), so a bad value is one line naming the file and the field, never a traceback
deep in a table. Keys not listed are allowed (older or newer writers add facts); every key a
reader uses is typed. pydantic is imported only when a file is read, so `effbench --help` stays
instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from effbench.errors import EffbenchError

Num = float | None  # strict float also takes an int (pydantic's strict mode: int -> float is allowed)
# Figures no run can produce are refused like a wrong type: a negative time, count or throughput, a top-1
# or a share outside 0..1 (top-1 is a fraction; report printed a hand-edited 7.5 as the accuracy).
Pos = Annotated[float, Field(ge=0)] | None
Frac = Annotated[float, Field(ge=0, le=1)] | None
Count = Annotated[int, Field(ge=0)] | None


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)


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
    fields["augment_recipe"] = (Augment | None, None)  # the recipe that ran, beside its name
    return create_model("Config", __base__=_Model, **fields)


if TYPE_CHECKING:

    class Config(_Model):
        def __getattr__(self, name: str) -> Any: ...  # built at import from RunConfig: its fields are runtime facts

else:
    Config = _config_model()


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
    n: int | None = None
    median: Num = None
    mean: Num = None
    ci_low: Num = None
    ci_high: Num = None


class Windows(_Model):
    requested: int | None = None
    windows: int | None = None
    steps: int | None = None
    window_steps: list[int] | None = None
    throughput_img_s: list[Pos] | None = None
    step_time_ms: list[Pos] | None = None
    data_time_share: list[Frac] | None = None
    summary: dict[str, Stat | None] | None = None


class ProfilePhase(_Model):
    phase: str
    calls: int | None = None
    cpu_time_s: Num = None


class Profile(_Model):
    phases: list[ProfilePhase] | None = None
    tables: dict[str, str] | None = None
    trace: str | None = None
    active_steps: int | None = None
    profiled_step_time_s: Num = None
    timed_step_time_s: Num = None
    profiler_overhead: Num = None


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


class Data(_Model):
    name: str | None = None
    num_classes: int | None = None
    image_size: int | None = None
    train_size: int | None = None
    val_size: int | None = None
    steps_per_epoch: int | None = None
    batches_on_device: bool | None = None
    workers: int | None = None
    corrupt_images_skipped: int | None = None
    augment: Augment | None = None


class Results(_Model):
    schema_version: int
    status: str  # checked against results.STATUSES by the reader (one list of statuses, there)
    run_name: str | None = None
    command: list[str] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    config: Config = Config()  # absent: tolerated (readers default it); null or not an object: refused
    env: dict[str, Any] | None = None
    device: str | None = None
    world_size: Annotated[int, Field(ge=1)] | None = None
    devices: int | None = None
    strategy: str | None = None
    launch: dict[str, Any] | None = None
    precision: str | None = None
    batch_size_per_device: int | None = None
    global_batch_size: int | None = None
    model: dict[str, Any] | None = None
    data_only: bool | None = None
    backend: dict[str, Any] | None = None
    data: Data | None = None
    throughput_img_s: Pos = None
    compile_time_s: Pos = None
    epochs: list[Epoch] = []
    warmup: Tally | None = None
    measured: Tally | None = None
    data_time_share: Frac = None
    final: Final | None = None
    ranks: list[Rank] | None = None
    stragglers: dict[str, Any] | None = None
    wall_time_s: Pos = None
    throughput_windows: Windows | None = None
    utilization: dict[str, Any] | None = None
    peak_mem_gib: Num = None  # allocated peak of the measured steps alone (observe.MeasuredWindow), GiB
    peak_mem_reserved_gib: Num = None  # reserved peak of the same window (includes blocks cached before it)
    flops_per_image: Num = None
    flops_error: str | None = None
    achieved_tflops: Num = None
    mfu: Num = None
    mfu_peak_tflops_per_device: Num = None
    energy_j: Num = None  # GPU energy of the measured steps alone (the window's counter reads), J
    images_per_j: Num = None  # measured images / energy_j
    energy_note: str | None = None  # why energy_j is absent on a GPU run (observe.summarize)
    profile: Profile | None = None
    profile_error: str | None = None
    verdict: Verdict | None = None
    time_to_accuracy: TimeToAccuracy | None = None
    error: Error | None = None
    signal: int | None = None
    interrupted_phase: str | None = None
    phase: str | None = None  # while the run is built (setup, dataset, model): where it is


class Cell(_Model):
    index: int
    key: str
    params: dict[str, Any]
    config: dict[str, Any]
    status: str  # checked against manifest.CELL_STATUSES by the reader
    run_dir: str | None = None
    attempts: int = 0
    error: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
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

"""Pure: finished run folders (and the sweep or scaling folder holding them) -> what a tracker logs. No MLflow.

    upload = collect([Path("results/sweep-x")], traces=False)    # each cell a run, the sweep their parent

A run is logged as
- params: its config.json, flattened (`requested.precision`), values as config.json spells them;
- metrics: the headline figures under the column names `effbench export` writes (analysis/export.py), equal to
  the export's values (throughput and its 95% interval, data wait share, MFU, peak memory, energy per image,
  time to the target top-1, top-1 and loss), at the run's end; each epoch's figures as `epoch/<field>` stepped
  by epoch; each training step's loss and time as `step/<name>` (steps.csv); the sampled GPU and CPU use as
  MLflow's system metrics (`system/cpu_utilization_percentage`, utilization.csv); a figure the run does not have
  is not logged (never a zero). Each point carries the time it happened (timeline below), not the upload's;
- tags: `effbench.*` (status, verdict, device, GPU model, driver, image revision, host, run folder) and the
  `mlflow.*` tags MLflow's own client sets (run name, source name and type, git commit of effbench);
- artifacts: report.html, results.json, env.json, config.json, steps.csv, epochs.csv, utilization.csv, the
  plots (plots/), and the profiler traces only when asked.

When each point happened: results.json holds the run's end (`finished_at`) and the wall time of each phase, so
the training block (warm-up, epochs and their validation) began at finished_at less those phases and the
profiling pass after them; utilization.csv's rows are seconds since that start (the sampler spans the block).
steps.csv has no clock: a step's time is the block's start plus the steps' own times (data wait + compute) up
to its end, each epoch's validation between epochs. The loop's own work between steps is in neither, so a late
step reads at most that much early.

Its key, `effbench.run_id`, hashes the host, start time and folder name that results.json holds: every
upload of a folder gives the same key (wherever it is copied to), which is what makes an upload idempotent.
A sweep or scaling series is a parent run keyed the same way, its runs children of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effbench import redact, results, safe_files, schema
from effbench.analysis import export as ex
from effbench.analysis import windows
from effbench.report import render
from effbench.sweep import manifest as M
from effbench.sweep.series import SCALING_TXT, SCALING_MD

PREFIX = "effbench."
KEY = PREFIX + "run_id"
"""The run's key (run_key): an upload looks for it before it creates a run."""
KIND = PREFIX + "kind"
"""run, sweep-cell, sweep-attempt, scaling-member (export.py's kinds), or sweep / scaling for a parent."""
UPLOAD = PREFIX + "upload"
"""`complete` once every param, metric and artifact of the run is logged: a run without it was cut short and
is replaced whole by the next upload."""
COMPLETE = "complete"
GROUP = PREFIX + "group"
"""The sweep or scaling folder's name, on its runs."""
PATH = PREFIX + "path"
"""The folder's absolute path where it was uploaded from (the read-back orders runs by it)."""

# effbench's status -> MLflow's RunStatus (mlflow/entities/run_status.py): a run that ran out of memory or
# diverged failed as a run (a sweep keeps it as data); a signal killed it; `running` was never settled.
MLFLOW_STATUS = {
    "ok": "FINISHED",
    "failed": "FAILED",
    "oom": "FAILED",
    "diverged": "FAILED",
    "interrupted": "KILLED",
    "running": "RUNNING",
}

# The export columns logged as a run's metrics: each the same figure `effbench export` writes under that name.
HEADLINE = (
    ex.column_name(lambda r: r.throughput_img_s),
    ex.MEDIAN,
    ex.CI_LOW,
    ex.CI_HIGH,
    ex.DATA_WAIT_SHARE,
    ex.column_name(lambda r: r.mfu),
    ex.column_name(lambda r: r.peak_mem_gib),
    ex.ENERGY_PER_IMAGE_J,
    ex.TIME_TO_TARGET_S,
    ex.tta_column(lambda t: t.epochs_to_target),
    ex.tta_column(lambda t: t.best_val_top1),
    ex.column_name(lambda r: r.final.train_loss),
    ex.column_name(lambda r: r.final.val_loss),
    ex.column_name(lambda r: r.final.train_top1),
    ex.column_name(lambda r: r.final.val_top1),
)
EPOCH_PREFIX = "epoch/"
"""Each epoch's figures (results.json `epochs`, epochs.csv) as stepped metrics: `epoch/throughput_img_s` at step 3."""
STEP_PREFIX = "step/"
"""Each training step of steps.csv, its number across epochs (1, 2, ...; warm-up included) as MLflow's step."""
STEP_SERIES: dict[str, Callable[[results.StepRow], float | None]] = {  # each name whole: STEP_PREFIX's
    "step/loss": lambda r: r.loss,
    "step/top1": lambda r: r.top1,
    "step/time_s": lambda r: _step_s(r),  # the step's time: data wait + compute
    "step/data_time_s": lambda r: r.data_time_s,
}
"""The series of each step: steps.csv's figures by the metric they are logged as."""
SYSTEM_PREFIX = "system/"
"""MLflow's system metrics (mlflow/system_metrics/system_metrics_monitor.py: `self._metrics_prefix = "system/"`),
which its UI shows on the run's System metrics tab."""


def _host(getter: Callable[[Any], Any]) -> str:
    return schema.field_path(schema.HostUse, getter)


def _gpu(getter: Callable[[Any], Any]) -> str:
    return schema.field_path(schema.GpuUse, getter)


# utilization.csv's column (named as the record's summary of it, measure/monitor.py) -> (MLflow's system metric
# name, factor): the names MLflow's own monitor writes (mlflow 3.17 system_metrics/metrics/cpu_monitor.py,
# gpu_monitor.py, network_monitor.py) where the figure is the same one; GPU i is effbench's gpu{i}_ (the run's
# CUDA index). The process tree's own CPU and memory have no MLflow name: they take MLflow's style.
SYSTEM_HOST = {
    _host(lambda h: h.cpu_pct): ("cpu_utilization_percentage", 1.0),  # psutil.cpu_percent(): the host's busy share
    _host(lambda h: h.net_sent_bytes): ("network_transmit_megabytes", 1e-6),  # since the sampler started, as
    _host(lambda h: h.net_recv_bytes): ("network_receive_megabytes", 1e-6),  # MLflow's since its monitor did
    _host(lambda h: h.proc_cpu_pct): ("process_cpu_utilization_percentage", 1.0),  # effbench's: 100 = one core
    _host(lambda h: h.rss_gib): ("process_memory_rss_megabytes", 2**30 / 1e6),  # effbench's: the process tree
}
SYSTEM_GPU = {
    _gpu(lambda g: g.util_pct): ("utilization_percentage", 1.0),
    _gpu(lambda g: g.mem_used_gib): ("memory_usage_megabytes", 2**30 / 1e6),
    _gpu(lambda g: g.power_w): ("power_usage_watts", 1.0),
}
MAX_POINTS = 10_000
"""Points per stepped series at most: a longer run logs every k-th row (the last always); the CSV has them all."""
TRAINING_PHASES = ("warm-up", "epochs", "validation", "profiling")
"""The phases (run/phases.py) from the training block's start to the record's finished_at: the block's own
(warm-up, epochs and their validation, which the sampler spans) and the profiling pass after it."""
# The files logged with every run (profiler traces only on request: megabytes each).
RUN_FILES = (
    render.REPORT_HTML,
    results.RESULTS_FILE,
    results.ENV_FILE,
    results.CONFIG_FILE,
    results.STEPS_FILE,
    results.EPOCHS_FILE,
    results.UTILIZATION_FILE,
)
PLOTS_GLOB = f"{render.PLOTS_DIR}/*.png"
TRACE_GLOB = "trace_rank*.json.gz"
# The tags MLflow's client sets on a run it starts (mlflow/utils/mlflow_tags.py; tracking/context/
# default_context.py, git_context.py): effbench sets them from the record, MLFLOW_USER when it logs (mlflow_store).
MLFLOW_RUN_NAME = "mlflow.runName"
MLFLOW_USER = "mlflow.user"
MLFLOW_SOURCE_NAME = "mlflow.source.name"
MLFLOW_SOURCE_TYPE = "mlflow.source.type"
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"
SOURCE_TYPE = "LOCAL"  # mlflow/entities/source_type.py: what default_context gives a script run on a machine
SWEEP_FILES = (M.MANIFEST_FILE, render.SWEEP_TXT, render.SWEEP_MD, render.REPORT_HTML)
# mlflow/utils/validation.py MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH: a longer value is refused, so cut here
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 8000


@dataclass(frozen=True)
class Point:
    """One point of a stepped metric: MLflow's Metric(key, value, timestamp, step)."""

    key: str
    value: float
    ms: int | None
    """When it happened, ms since the epoch (the timeline in the module docstring)."""
    step: int


@dataclass(frozen=True)
class TrackedRun:
    """One run as a tracker holds it."""

    key: str
    """effbench.run_id: the same for every upload of the same run."""
    name: str
    """The run (or sweep) folder's name: MLflow's run name."""
    status: str
    """MLflow's: FINISHED, FAILED, KILLED or RUNNING (MLFLOW_STATUS)."""
    start_ms: int | None
    end_ms: int | None
    params: dict[str, str]
    metrics: dict[str, float]
    points: list[Point] = field(default_factory=list)
    """The stepped metrics: per epoch (epoch/), per step (step/), and the system metrics (system/)."""
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
    folder: Path | None = None
    """The folder the artifacts are in: one in a folder under it (plots/) is logged under that folder's name."""
    group: Path | None = None
    """The sweep or scaling folder it belongs to (its parent run), None for a lone run."""


@dataclass(frozen=True)
class Upload:
    runs: list[TrackedRun]
    groups: dict[Path, TrackedRun]
    """Each sweep or scaling folder of the runs, as their parent run."""


def _hash(*parts: str | None) -> str:
    return hashlib.sha256("\n".join(p or "" for p in parts).encode("utf-8")).hexdigest()[:32]


def run_key(record: schema.Results) -> str:
    """A run's key from what its results.json holds: its host, start time to the microsecond and folder name."""
    return _hash("run", record.env.hostname, record.started_at, record.run_name)


def _ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _text(v: Any) -> str:
    """A param's value as config.json spells it: text as is, the rest as JSON (true, null, 0.1, [1, 2])."""
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"requested": {"precision": "auto"}} -> {"requested.precision": "auto"}; values cut to MLflow's limit."""
    out: dict[str, str] = {}
    for k, v in data.items():
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = _text(v)[:MAX_PARAM_CHARS]
    return out


def _config(run_dir: Path, record: schema.Results) -> dict[str, Any]:
    """config.json as the run wrote it; the record's copy when the file is gone (a lone results.json)."""
    try:
        data = safe_files.load_json(run_dir / results.CONFIG_FILE, fix="restore the config.json the run wrote")
    except FileNotFoundError:
        data = None
    return data if isinstance(data, dict) else record.config.model_dump(exclude_unset=True)


def _files(folder: Path, names: Sequence[str]) -> list[Path]:
    """The regular files among `names` in the folder: a link (to anywhere) is never uploaded."""
    return [p for p in (folder / n for n in names) if p.is_file() and not p.is_symlink()]


def _linked(folder: Path, path: Path) -> bool:
    """Whether `path`, or a folder between it and `folder`, is a link."""
    while path != folder:
        if path.is_symlink():
            return True
        path = path.parent
    return False


def _globbed(folder: Path, pattern: str) -> list[Path]:
    """The regular files matching `pattern` in the folder, sorted; a link, or a file in a linked folder, is
    left out (as by _files)."""
    return [p for p in sorted(folder.glob(pattern)) if p.is_file() and not _linked(folder, p)]


def _tags(values: Mapping[str, Any]) -> dict[str, str]:
    return {PREFIX + k: str(v)[:MAX_TAG_CHARS] for k, v in values.items() if v not in (None, "")}


def mlflow_tags(name: str, command: Sequence[str] | None, commit: str | None) -> dict[str, str]:
    """The tags MLflow's own client gives a run it starts (its user aside: mlflow_store adds it as it logs):
    its name, its source (the effbench command that made it, secrets hidden), and the git commit of effbench."""
    source = shlex.join(redact.argv(command)) if command else "effbench"
    tags = {
        MLFLOW_RUN_NAME: name,
        MLFLOW_SOURCE_NAME: source,
        MLFLOW_SOURCE_TYPE: SOURCE_TYPE,
        MLFLOW_GIT_COMMIT: commit,
    }
    return {k: v[:MAX_TAG_CHARS] for k, v in tags.items() if v}


def effbench_commit(env: schema.Env) -> str | None:
    """The git commit of the effbench that ran: env.json's own (its source checkout), else its image's revision."""
    return env.effbench_commit or (env.image.revision if env.image else None)


def training_start_ms(record: schema.Results) -> float | None:
    """When the training block began, ms since the epoch: finished_at less the phases from warm-up on (the
    module docstring); without the phases, started_at; None when the record holds no time."""
    phases = record.wall_time_by_phase_s or {}
    end = _ms(record.finished_at)
    if end is not None and phases:
        return end - 1000 * sum(phases.get(p, 0.0) for p in TRAINING_PHASES)
    start = _ms(record.started_at)
    if start is not None:
        return start + 1000 * sum(v for p, v in phases.items() if p not in TRAINING_PHASES)
    return None


def _step_s(row: results.StepRow) -> float:
    return row.data_time_s + row.compute_time_s


def epoch_spans(epochs: Sequence[schema.Epoch], steps: Sequence[results.StepRow]) -> dict[int, tuple[float, float]]:
    """Each epoch's (start, end) in seconds after the training block began: its steps' time (epochs.csv's
    total_time_s, else the sum of its rows in steps.csv), then its validation pass."""
    by_epoch = {e.epoch: e for e in epochs}
    stepped: dict[int, float] = {}
    for r in steps:
        if r.epoch is not None:
            stepped[r.epoch] = stepped.get(r.epoch, 0.0) + _step_s(r)
    spans: dict[int, tuple[float, float]] = {}
    at = 0.0
    for n in sorted({*by_epoch, *stepped}):
        e = by_epoch.get(n)
        train = e.total_time_s if e is not None and e.total_time_s is not None else stepped.get(n, 0.0)
        val = sum(v or 0.0 for v in (e.val_time_s, e.val_warmup_time_s)) if e is not None else 0.0
        spans[n] = (at, at + train + val)
        at += train + val
    return spans


def _thin(n: int) -> range | list[int]:
    """The indices of n rows to log: all of them, or every k-th (the last always) to stay within MAX_POINTS."""
    if n <= MAX_POINTS:
        return range(n)
    k = math.ceil(n / (MAX_POINTS - 1))
    return [*range(0, n - 1, k), n - 1]


def _stamp(t0: float | None, seconds: float) -> int | None:
    return None if t0 is None else int(round(t0 + 1000 * seconds))


def epoch_points(record: schema.Results, spans: Mapping[int, tuple[float, float]], t0: float | None) -> list[Point]:
    """Each epoch's figures at the end of its validation pass, stepped by epoch."""
    return [
        Point(EPOCH_PREFIX + name, value, _stamp(t0, spans.get(e.epoch, (0.0, 0.0))[1]), e.epoch)
        for e in record.epochs
        for name, raw in e.model_dump().items()
        if name != "epoch" and (value := _number(raw)) is not None
    ]


def step_points(
    steps: Sequence[results.StepRow], spans: Mapping[int, tuple[float, float]], t0: float | None
) -> list[Point]:
    """Each step's loss, top-1 and times (STEP_SERIES) at its end, stepped by its number across epochs."""
    ends: list[float] = []
    into: dict[int | None, float] = {}
    for r in steps:
        into[r.epoch] = into.get(r.epoch, 0.0) + _step_s(r)
        ends.append(spans.get(r.epoch, (0.0, 0.0))[0] + into[r.epoch] if r.epoch is not None else into[r.epoch])
    out: list[Point] = []
    for i in _thin(len(steps)):
        ms = _stamp(t0, ends[i])
        out += [Point(k, v, ms, i + 1) for k, get in STEP_SERIES.items() if (v := _number(get(steps[i]))) is not None]
    return out


def _system_names(columns: Iterable[str]) -> dict[str, tuple[str, float]]:
    """utilization.csv's columns that are system metrics -> (their MLflow name, factor)."""
    out = {c: (SYSTEM_PREFIX + name, f) for c, (name, f) in SYSTEM_HOST.items() if c in columns}
    for c in columns:
        head, _, metric = c.partition("_")
        if head.startswith("gpu") and head[3:].isdigit() and metric in SYSTEM_GPU:
            name, f = SYSTEM_GPU[metric]
            out[c] = (f"{SYSTEM_PREFIX}gpu_{int(head[3:])}_{name}", f)
    return out


def system_points(run_dir: Path, t0: float | None) -> list[Point]:
    """utilization.csv's GPU and CPU use as MLflow's system metrics, each row at its time, stepped by row
    (0, 1, ...: as MLflow's monitor steps its own); a blank or unreadable figure is not logged."""
    try:
        rows = safe_files.read_csv_rows(run_dir / results.UTILIZATION_FILE, fix="rerun the benchmark")
    except FileNotFoundError:
        return []
    names = _system_names(rows[0].keys() if rows else ())
    out: list[Point] = []
    for i in _thin(len(rows)):
        row = rows[i]
        t = _float(row.get("t_s"))
        for column, (name, factor) in names.items():
            v = _float(row.get(column))
            if v is not None and t is not None:
                out.append(Point(name, v * factor, _stamp(t0, t), i))
    return out


def _float(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "") else None
    except (TypeError, ValueError):
        return None
    return v if v is not None and safe_files.check_figure(v) else None


def run_payload(run: ex.Run, *, traces: bool) -> TrackedRun:
    """An exported run (its row, analysis/export.py) -> what is logged for it."""
    row = run.row
    run_dir = Path(row[ex.PATH])
    record = results.load_record(run_dir / results.RESULTS_FILE)
    env = record.env
    metrics = {k: v for k in HEADLINE if (v := _number(row.get(k))) is not None}
    steps = windows.read_steps(run_dir)
    t0 = training_start_ms(record)
    spans = epoch_spans(record.epochs, steps)
    points = [*epoch_points(record, spans, t0), *step_points(steps, spans, t0), *system_points(run_dir, t0)]
    group = Path(row[ex.GROUP]) if row.get(ex.GROUP) else None
    tags = _tags(
        {
            "run_id": run_key(record),
            "kind": row.get(ex.KIND),
            "status": record.status,
            "verdict": record.verdict.bottleneck if record.verdict else None,
            "device": record.device,
            "gpu_model": row.get(ex.GPU_MODEL),
            "driver": env.driver_version,
            "image_revision": row.get(ex.IMAGE_REVISION),
            "host": row.get(ex.HOST),
            "machine": row.get(ex.MACHINE),  # the host, unless a container engine made its name up
            "run_folder": run_dir.name,
            "path": str(run_dir.resolve()),
            "group": group.name if group else None,
            "version": env.effbench,
        }
    )
    tags.update(mlflow_tags(run_dir.name, record.command, effbench_commit(env)))
    artifacts = _files(run_dir, RUN_FILES) + _globbed(run_dir, PLOTS_GLOB)
    if traces:
        artifacts += _globbed(run_dir, TRACE_GLOB)
    return TrackedRun(
        key=tags[KEY],
        name=run_dir.name,
        status=MLFLOW_STATUS.get(record.status, "FAILED"),
        start_ms=_ms(record.started_at),
        end_ms=_ms(record.finished_at),
        params=flatten(_config(run_dir, record)),
        metrics=metrics,
        points=points,
        tags=tags,
        artifacts=artifacts,
        folder=run_dir,
        group=group,
    )


def group_status(statuses: Sequence[str]) -> str:
    """A sweep's or series' status from its cells': interrupted when any was stopped or never ran (a resumed
    sweep runs it), failed when any failed, else ok (an OOM or diverged cell is data, and a skipped one could
    not run on this machine)."""
    if any(s in ("interrupted", "pending", "running") for s in statuses):
        return "interrupted"
    return "failed" if "failed" in statuses else "ok"


def _counts(statuses: Sequence[str]) -> str:
    seen: dict[str, int] = {}
    for s in statuses:
        seen[s] = seen.get(s, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in seen.items())


def group_payload(folder: Path, members: Sequence[TrackedRun]) -> TrackedRun:
    """The parent run of a sweep folder (sweep.json) or a scaling series folder (scaling.json)."""
    names: Sequence[str]
    if (folder / M.MANIFEST_FILE).is_file():
        manifest = M.load_manifest(folder)
        statuses = [c.status for c in manifest.cells]
        key = _hash("sweep", manifest.name, manifest.created_at, manifest.fingerprint)
        params = {f"swept.{k}": _text(v)[:MAX_PARAM_CHARS] for k, v in manifest.dims.items()}
        params.update({"preset": _text(manifest.preset), "zip": _text(manifest.zip)})
        start, end, kind, names = _ms(manifest.created_at), _ms(manifest.updated_at), "sweep", SWEEP_FILES
        command = manifest.command
    else:  # a scaling series: scaling.json (sweep/series.py) beside its members
        data = safe_files.load_json(folder / ex.SCALING_JSON, fix="rerun the scaling series")
        statuses = [m.tags.get(PREFIX + "status", "failed") for m in members]
        first = min((m.start_ms for m in members if m.start_ms is not None), default=None)
        key = _hash("scaling", folder.name, str(first))
        scaling = data.get("scaling") if isinstance(data, dict) else None
        params = {"scaling": _text(scaling)}
        ends = [m.end_ms for m in members if m.end_ms is not None]
        start, end, kind = first, max(ends) if ends else None, "scaling"
        names = (ex.SCALING_JSON, SCALING_TXT, SCALING_MD)
        said = data.get("command") if isinstance(data, dict) else None
        command = [str(a) for a in said] if isinstance(said, list) else None
    status = group_status(statuses)
    tags = _tags(
        {
            "run_id": key,
            "kind": kind,
            "status": status,
            "cells": _counts(statuses),
            "run_folder": folder.name,
            "path": str(folder.resolve()),
        }
    )
    commit = next((m.tags[MLFLOW_GIT_COMMIT] for m in members if MLFLOW_GIT_COMMIT in m.tags), None)
    tags.update(mlflow_tags(folder.name, command, commit))
    return TrackedRun(
        key=key,
        name=folder.name,
        status=MLFLOW_STATUS[status],
        start_ms=start,
        end_ms=end,
        params=params,
        metrics={},
        tags=tags,
        artifacts=_files(folder, names) + _globbed(folder, PLOTS_GLOB),
        folder=folder,
    )


def collect(paths: Sequence[Path], *, traces: bool) -> Upload:
    """Every run folder at or under `paths` (as `effbench export` finds them), with the sweep or scaling
    folders that hold them. A bad path or record is one EffbenchError, before anything is logged."""
    runs = [run_payload(r, traces=traces) for r in ex.collect(paths)]
    by_group: dict[Path, list[TrackedRun]] = {}
    for r in runs:
        if r.group is not None:
            by_group.setdefault(r.group, []).append(r)
    return Upload(runs, {g: group_payload(g, members) for g, members in by_group.items()})

"""Pure: finished run folders (and the sweep or scaling folder holding them) -> what a tracker logs. No MLflow.

    upload = collect([Path("results/sweep-x")], traces=False)    # each cell a run, the sweep their parent

A run is logged as
- params: its config.json, flattened (`requested.precision`), values as config.json spells them;
- metrics: the headline figures under the column names `effbench export` writes (analysis/export.py), equal to
  the export's values (throughput and its 95% interval, data wait share, MFU, peak memory, energy per image,
  time to the target top-1, top-1 and loss), and each epoch's figures as `epoch/<field>` stepped by epoch; a
  figure the run does not have is not logged (never a zero);
- tags: `effbench.*` (status, verdict, device, GPU model, driver, image revision, host, run folder);
- artifacts: report.html, results.json, env.json, config.json, and the profiler traces only when asked.

Its key, `effbench.run_id`, hashes the host, start time and folder name that results.json holds: every
upload of a folder gives the same key (wherever it is copied to), which is what makes an upload idempotent.
A sweep or scaling series is a parent run keyed the same way, its runs children of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effbench import results, safe_files, schema
from effbench.analysis import export as ex
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
# The files logged with every run (profiler traces only on request: megabytes each).
RUN_FILES = (render.REPORT_HTML, results.RESULTS_FILE, results.ENV_FILE, results.CONFIG_FILE)
TRACE_GLOB = "trace_rank*.json.gz"
SWEEP_FILES = (M.MANIFEST_FILE, render.SWEEP_TXT, render.SWEEP_MD, render.REPORT_HTML)
# mlflow/utils/validation.py MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH: a longer value is refused, so cut here
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 8000


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
    steps: list[tuple[str, float, int]] = field(default_factory=list)
    """(metric, value, epoch): the per-epoch rows."""
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
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


def _tags(values: Mapping[str, Any]) -> dict[str, str]:
    return {PREFIX + k: str(v)[:MAX_TAG_CHARS] for k, v in values.items() if v not in (None, "")}


def run_payload(run: ex.Run, *, traces: bool) -> TrackedRun:
    """An exported run (its row, analysis/export.py) -> what is logged for it."""
    row = run.row
    run_dir = Path(row[ex.PATH])
    record = results.load_record(run_dir / results.RESULTS_FILE)
    env = record.env
    metrics = {k: v for k in HEADLINE if (v := _number(row.get(k))) is not None}
    steps = [
        (EPOCH_PREFIX + name, value, e.epoch)
        for e in record.epochs
        for name, raw in e.model_dump().items()
        if name != "epoch" and (value := _number(raw)) is not None
    ]
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
            "run_folder": run_dir.name,
            "path": str(run_dir.resolve()),
            "group": group.name if group else None,
        }
    )
    artifacts = _files(run_dir, RUN_FILES)
    if traces:
        artifacts += [p for p in sorted(run_dir.glob(TRACE_GLOB)) if p.is_file() and not p.is_symlink()]
    return TrackedRun(
        key=tags[KEY],
        name=run_dir.name,
        status=MLFLOW_STATUS.get(record.status, "FAILED"),
        start_ms=_ms(record.started_at),
        end_ms=_ms(record.finished_at),
        params=flatten(_config(run_dir, record)),
        metrics=metrics,
        steps=steps,
        tags=tags,
        artifacts=artifacts,
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
    return TrackedRun(
        key=key,
        name=folder.name,
        status=MLFLOW_STATUS[status],
        start_ms=start,
        end_ms=end,
        params=params,
        metrics={},
        tags=tags,
        artifacts=_files(folder, names),
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

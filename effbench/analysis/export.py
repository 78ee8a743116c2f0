"""Pure: every run folder under some paths -> one flat row each (`effbench export`). No torch import.

    effbench export results/ --format csv -o runs.csv       runs, sweep cells, scaling members alike
    effbench export results/sweep-x ci/baseline.json --format jsonl

A row is one run and nothing else (no summary rows, no nesting), so pandas, DuckDB or a spreadsheet
read it as is. Column names are stable: the fixed ones in COLUMNS (documented in docs/sweeps-and-reports.md, "Export
columns"), then `swept.<dim>` for the values a sweep or scaling series chose, then `config.<key>` for
the resolved configuration. Every record goes through results.read_results, so a newer schema is
refused with one line rather than exported half-understood.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import results, safe_files
from effbench.analysis import time_to_accuracy, windows
from effbench.errors import EffbenchError
from effbench.sweep import manifest as M

SCALING_JSON = "scaling.json"  # effbench.sweep.series.SCALING_JSON (that module imports the run config)
# The command the selftest records in its internal runs (selftest/checks.py): how they are told from a user's.
SELFTEST_COMMAND = ["effbench", "selftest"]
FORMATS = ("csv", "jsonl")

# (column, what it holds); the "Export columns" table of docs/sweeps-and-reports.md is this list (tests/test_docs.py).
COLUMN_DOCS: tuple[tuple[str, str], ...] = (
    ("path", "the run folder"),
    ("kind", "run, sweep-cell, sweep-attempt (an earlier try of a cell, superseded) or scaling-member"),
    ("group", "the sweep or scaling-series folder holding it; empty for a lone run"),
    ("status", "ok, failed, interrupted, oom or running"),
    ("run_name", "the run's folder name when it ran"),
    ("started_at", "ISO 8601 start time"),
    ("host", "hostname (env.json)"),
    ("gpu_model", "name of GPU 0; empty without GPUs"),
    ("gpu_count", "GPUs visible to the run"),
    ("driver_version", "NVIDIA driver (NVML)"),
    ("cuda_build", "CUDA version torch was built with"),
    ("torch", "torch version"),
    ("cpu_model", "CPU model"),
    ("cpu_cores_usable", "cores the run could use (affinity)"),
    ("cpu_quota_cores", "cgroup CPU quota in cores; empty when unlimited"),
    ("shm_gib", "size of /dev/shm in GiB"),
    ("container_runtime", "docker, podman, apptainer or none"),
    ("image_revision", "the git revision the image was built from (env.json image.revision); empty outside the image"),
    ("sm_clock_mhz", "mean SM clock over the run, GPU mean; empty without NVML"),
    ("device", "device the run trained on"),
    ("world_size", "processes in the job"),
    ("global_batch_size", "images per optimizer step over all processes"),
    ("throughput_img_s", "headline throughput: measured images / (data wait + compute)"),
    ("throughput_median_img_s", "median over the throughput windows"),
    ("throughput_ci_low_img_s", "95% Student's t interval of the window mean, low end"),
    ("throughput_ci_high_img_s", "95% Student's t interval of the window mean, high end"),
    ("throughput_windows", "windows behind the median and interval"),
    ("data_wait_share", "share of step time waiting on the input pipeline (0..1)"),
    ("mfu", "model FLOPs utilisation (0..1); empty for devices with no datasheet peak"),
    ("energy_per_image_j", "GPU energy per trained image in joules; empty without an energy counter"),
    ("peak_mem_gib", "peak device memory allocated, GiB"),
    ("final_train_loss", "train loss of the last epoch"),
    ("final_val_loss", "validation loss of the last epoch"),
    ("final_train_top1", "train top-1 of the last epoch (0..1)"),
    ("final_val_top1", "validation top-1 of the last epoch (0..1)"),
    ("target_top1", "--target-top1 of the run; empty without one (docs/time-to-accuracy.md)"),
    ("reached_target", "whether a validation reached the target top-1"),
    ("time_to_target_s", "training seconds (timed steps, validation excluded) to the first validation at the target"),
    ("epochs_to_target", "epochs trained to the first validation at the target"),
    ("best_val_top1", "best validation top-1 over the epochs run with a target (0..1)"),
)
COLUMNS = tuple(name for name, _ in COLUMN_DOCS)
# Config keys that name where a run wrote or read, not what it measured.
PLACE_CONFIG = ("output", "data_dir")


@dataclass(frozen=True)
class RunFolder:
    """A run folder found under the paths, with what holds it."""

    path: Path
    kind: str
    group: Path | None
    swept: dict[str, Any]


def _results_file(path: Path) -> Path:
    return path if path.is_file() else path / results.RESULTS_FILE


def _cell_of(sweep_dir: Path, run_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """(kind, swept values) of a run folder inside a sweep: the cell's current run, or an earlier
    attempt the runner moved to attempts/<key>/ before rerunning the cell; None when not its own."""
    cells = M.read_manifest(sweep_dir)["cells"]
    for cell in cells:
        if cell.get("run_dir") and (sweep_dir / cell["run_dir"]).resolve() == run_dir.resolve():
            return "sweep-cell", dict(cell.get("params") or {})
    rel = run_dir.resolve().relative_to(sweep_dir.resolve()).parts
    if len(rel) == 3 and rel[0] == "attempts":
        cell = next((c for c in cells if c.get("key") == rel[1]), None)
        return "sweep-attempt", dict((cell or {}).get("params") or {})
    return None


def _scaling_dim(record: Mapping[str, Any]) -> dict[str, Any]:
    config = record.get("config") or {}
    dim = "nproc" if config.get("nproc") is not None else "gpus"
    return {dim: config.get(dim)}


def locate(run_dir: Path) -> RunFolder:
    """What holds a run folder: a sweep (sweep.json lists it), a scaling series (scaling.json beside it) or nothing."""
    for parent in list(run_dir.resolve().parents)[:3]:  # cells/<key>/<run>/, attempts/<key>/<run>/
        if os.path.lexists(parent / M.MANIFEST_FILE):  # in any form: read_manifest says what is wrong with it
            found = _cell_of(parent, run_dir)
            if found is not None:
                return RunFolder(run_dir, found[0], parent, found[1])
    parent = run_dir.resolve().parent
    if (parent / SCALING_JSON).is_file():
        return RunFolder(run_dir, "scaling-member", parent, {})
    return RunFolder(run_dir, "run", None, {})


def find_runs(paths: Sequence[Path]) -> list[Path]:
    """Every results.json at or under the paths (a path may be a results.json file), each once, in order."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif p.is_dir():
            found += sorted(p.rglob(results.RESULTS_FILE))
        else:
            raise EffbenchError(str(p), "does not exist; pass run, sweep or results folders, or results.json files")
    seen: set[Path] = set()
    unique = []
    for f in found:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    if not unique:
        raise EffbenchError(
            " ".join(map(str, paths)), "holds no results.json; pass folders written by `effbench run` or `sweep`"
        )
    return unique


def _read_env(run_dir: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    """env.json as the run wrote it; the copy inside results.json when the file is gone (a lone results.json)."""
    try:  # a FIFO, a 100,000-deep or a 5,000-digit env.json is one line (safe_files), a missing one the copy
        data = safe_files.load_json(run_dir / results.ENV_FILE, fix="restore the env.json the run wrote, or delete it")
    except FileNotFoundError:
        data = None
    return data if isinstance(data, dict) else dict(record.get("env") or {})


def _clock_mhz(record: Mapping[str, Any]) -> float | None:
    gpus = (record.get("utilization") or {}).get("gpus") or []
    means = [g["sm_clock_mhz"]["mean"] for g in gpus if isinstance(g.get("sm_clock_mhz"), Mapping)]
    return sum(means) / len(means) if means else None


def machine(record: Mapping[str, Any], env: Mapping[str, Any]) -> dict[str, Any]:
    """The machine columns, read from env.json's keys as hardware.env_snapshot writes them."""
    gpus = [g for g in env.get("gpus") or [] if isinstance(g, Mapping)]
    return {
        "host": env.get("hostname"),
        "gpu_model": gpus[0].get("name") if gpus else None,
        "gpu_count": env.get("gpu_count"),
        "driver_version": env.get("driver_version"),
        "cuda_build": env.get("cuda_build"),
        "torch": env.get("torch"),
        "cpu_model": env.get("cpu_model"),
        "cpu_cores_usable": env.get("cpu_cores_usable"),
        "cpu_quota_cores": env.get("cgroup_cpu_quota_cores"),
        "shm_gib": env.get("shm_size_gib"),
        "container_runtime": env.get("container_runtime"),
        "image_revision": (env.get("image") or {}).get("revision"),
        "sm_clock_mhz": _clock_mhz(record),
    }


def figures(record: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    w = windows.windows_of(results.record_of(record), steps)
    s = (w.get("summary") or {}).get("throughput_img_s") or {}
    final = record.get("final") or {}
    per_j = record.get("images_per_j")
    return {
        "throughput_img_s": record.get("throughput_img_s"),
        "throughput_median_img_s": s.get("median"),
        "throughput_ci_low_img_s": s.get("ci_low"),
        "throughput_ci_high_img_s": s.get("ci_high"),
        "throughput_windows": w.get("windows") or 0,
        "data_wait_share": record.get("data_time_share"),
        "mfu": record.get("mfu"),
        "energy_per_image_j": 1.0 / per_j if per_j else None,
        "peak_mem_gib": record.get("peak_mem_gib"),
        "final_train_loss": final.get("train_loss"),
        "final_val_loss": final.get("val_loss"),
        "final_train_top1": final.get("train_top1"),
        "final_val_top1": final.get("val_top1"),
        **time_to_accuracy.cell_fields(results.record_of(record)),  # --target-top1; empty without
    }


def _flat(value: Any) -> Any:
    """A cell value: scalars as they are, anything nested as compact JSON."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


@dataclass(frozen=True)
class Run:
    """One exported run: its flat row and the throughput windows behind it (for the leaderboard's noise test)."""

    row: dict[str, Any]
    windows_img_s: list[float]


def read_run(results_file: Path) -> Run:
    run_dir = results_file.parent
    record = results.read_results(results_file)
    steps = windows.read_steps(run_dir)
    where = locate(run_dir)
    swept = where.swept or (_scaling_dim(record) if where.kind == "scaling-member" else {})
    selftest = record.get("command") == SELFTEST_COMMAND
    row: dict[str, Any] = {
        "path": str(run_dir),
        "kind": "selftest" if selftest else where.kind,
        "group": str(where.group) if where.group else None,
        "status": record.get("status"),
        "run_name": record.get("run_name"),
        "started_at": record.get("started_at"),
        **machine(record, _read_env(run_dir, record)),
        "device": record.get("device"),
        "world_size": record.get("world_size"),
        "global_batch_size": record.get("global_batch_size"),
        **figures(record, steps),
    }
    row.update({f"swept.{k}": _flat(v) for k, v in sorted(swept.items())})
    config = record.get("config") or {}
    row.update({f"config.{k}": _flat(v) for k, v in sorted(config.items())})
    thr = windows.windows_of(results.record_of(record), steps).get("throughput_img_s") or []
    return Run(row, [float(x) for x in thr])


def collect(paths: Sequence[Path]) -> list[Run]:
    """The runs at or under `paths`; the selftest's internal runs only where a path names them (a results.json,
    or a folder inside the selftest's), not when found by scanning the results folder that holds the selftest's."""
    runs = []
    for path in map(Path, paths):
        found = [read_run(f) for f in find_runs([path])]
        runs += [r for r in found if r.row["kind"] != "selftest" or _names_selftest(path, Path(r.row["path"]))]
    if not runs:
        raise EffbenchError(
            " ".join(map(str, paths)), "holds only the selftest's own runs; pass folders written by `effbench run` "
            "or `sweep`, or the selftest's folder itself to export those"
        )  # fmt: skip
    return runs


def _names_selftest(path: Path, run_dir: Path) -> bool:
    """`path` is the run's results.json, or the selftest folder holding it (<stamp>_selftest_<device>/runs/<run>/)
    or a folder inside that."""
    folder = run_dir.resolve().parent.parent
    asked = path.resolve()
    return path.is_file() or asked == folder or folder in asked.parents


def columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """COLUMNS, then every swept.* and config.* column any row has, each group sorted."""
    extra: set[str] = set()
    for r in rows:
        extra.update(k for k in r if k not in COLUMNS)
    swept = sorted(k for k in extra if k.startswith("swept."))
    return [*COLUMNS, *swept, *sorted(extra - set(swept))]


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection"): a run name
# or arch of `=cmd|' /C calc'!A0` would. Such text cells get a leading single quote; numbers stay numbers.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell a spreadsheet shows as text: a text cell that would start a formula is quoted
    with a leading `'` (a negative number written as text, `-3`, stays a number)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    cols = columns(rows)
    # the csv module quotes a field holding a character of its line terminator, not a lone "\r" (3.11's
    # _csv.c): a text with one would end the row early for a reader, so such a file quotes every cell
    stray_cr = any(isinstance(v, str) and "\r" in v for r in rows for v in [*r.values(), *r.keys()])
    w = csv.DictWriter(
        buf, fieldnames=cols, lineterminator="\n", quoting=csv.QUOTE_ALL if stray_cr else csv.QUOTE_MINIMAL
    )
    w.writerow({c: csv_cell(c) for c in cols})  # header: config keys come from the run's files too
    for r in rows:
        w.writerow({k: csv_cell(v) for k, v in r.items()})
    return buf.getvalue()


def to_jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = columns(rows)
    return "".join(json.dumps({k: r.get(k) for k in cols}) + "\n" for r in rows)


def render(rows: Sequence[Mapping[str, Any]], fmt: str) -> str:
    if fmt not in FORMATS:
        raise EffbenchError("--format", f"{fmt!r} is not a format; use {' or '.join(FORMATS)}")
    return to_csv(rows) if fmt == "csv" else to_jsonl(rows)

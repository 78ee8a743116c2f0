"""Pure: every run folder under some paths -> one flat row each (`effbench export`). No torch import.

    effbench export results/ --format csv -o runs.csv       runs, sweep cells, scaling members alike
    effbench export results/sweep-x ci/baseline.json --format jsonl

A row is one run and nothing else (no summary rows, no nesting), so pandas, DuckDB or a spreadsheet
read it as is. Column names are stable: the fixed ones in COLUMNS (documented in docs/sweeps-and-reports.md, "Export
columns"), then `swept.<dim>` for the values a sweep or scaling series chose, then `config.<key>` for
the resolved configuration. Every record goes through results.load_record, so a newer schema is
refused with one line rather than exported half-understood. A column that holds a field of the record takes its
name from the field's path (final.val_loss -> final_val_loss, schema.field_path), so the two cannot drift.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import liveness, results, safe_files, schema
from effbench.analysis import windows
from effbench.analysis.efficiency import CONTENDED
from effbench.datasets import chance_note
from effbench.errors import EffbenchError
from effbench.sweep import manifest as M

SCALING_JSON = "scaling.json"  # effbench.sweep.series.SCALING_JSON (that module imports the run config)
# The command the selftest records in its internal runs (selftest/checks.py): how they are told from a user's.
SELFTEST_COMMAND = ["effbench", "selftest"]
FORMATS = ("csv", "jsonl")


@dataclass(frozen=True)
class RunFolder:
    """A run folder found under the paths, with what holds it."""

    path: Path
    kind: str
    group: Path | None
    swept: dict[str, Any]


@dataclass(frozen=True)
class Source:
    """What one row is read from: the run folder's place, its record, its env.json and its throughput windows."""

    folder: RunFolder
    kind: str
    """folder.kind, or selftest for the selftest's internal runs."""
    record: schema.Results
    env: schema.Env
    windows: schema.Windows


@dataclass(frozen=True)
class Column:
    name: str
    doc: str
    """What it holds: the "Export columns" table of docs/sweeps-and-reports.md (tests/contracts/test_docs.py)."""
    value: Callable[[Source], Any]


# Names of the columns that are the export's own (no field of the record holds them as they are).
PATH, KIND, GROUP, HOST, MACHINE, GPU_MODEL = "path", "kind", "group", "host", "machine", "gpu_model"
CPU_QUOTA_CORES, SHM_GIB, IMAGE_REVISION = "cpu_quota_cores", "shm_gib", "image_revision"
CI_LOW, CI_HIGH, TIME_TO_TARGET_S = "throughput_ci_low_img_s", "throughput_ci_high_img_s", "time_to_target_s"
ACCURACY_NOTE, CPU_CONTENDED, HOST_CPU_BUSY_PCT = "accuracy_note", "cpu_contended", "host_cpu_busy_pct"
OMP_WAIT_POLICY = "omp_wait_policy"
BOTTLENECK = schema.field_path(schema.Results, lambda r: r.verdict.bottleneck).replace(".", "_")  # verdict_bottleneck
DATA_WAIT_SHARE, ENERGY_PER_IMAGE_J = "data_wait_share", "energy_per_image_j"
# Columns named after the model field they summarise: the GPUs' mean SM clock, the windows' median (as a
# sweep manifest's cell summary holds it), and how many throughput windows there are.
SM_CLOCK_MHZ = schema.field_path(schema.GpuUse, lambda g: g.sm_clock_mhz)
MEDIAN = schema.field_path(schema.CellSummary, lambda c: c.throughput_median_img_s)
WINDOWS = schema.field_path(schema.Results, lambda r: r.throughput_windows)


def _field(getter: Callable[[schema.Results], Any], doc: str) -> Column:
    """A column holding a field of the record, named by its path: final.val_loss -> final_val_loss."""
    return Column(column_name(getter), doc, lambda s: getter(s.record))


def _env(getter: Callable[[schema.Env], Any], doc: str) -> Column:
    """A column holding a field of env.json, named by it."""
    return Column(env_column(getter), doc, lambda s: getter(s.env))


def env_column(getter: Callable[[schema.Env], Any]) -> str:
    """The export column holding a field of env.json."""
    return schema.field_path(schema.Env, getter)


def tta_column(getter: Callable[[schema.TimeToAccuracy], Any]) -> str:
    """The export column holding a field of --target-top1's record (but TIME_TO_TARGET_S, named apart)."""
    return schema.field_path(schema.TimeToAccuracy, getter)


def _tta(getter: Callable[[schema.TimeToAccuracy], Any], doc: str, name: str | None = None) -> Column:
    """A column of --target-top1's record (analysis/time_to_accuracy), named by its field unless `name`;
    empty without a target."""
    tta_name = name or tta_column(getter)
    return Column(tta_name, doc, lambda s: getter(s.record.time_to_accuracy) if s.record.time_to_accuracy else None)


def column_name(getter: Callable[[schema.Results], Any]) -> str:
    """The export column holding a field of the record (the leaderboard reads rows by it)."""
    return schema.field_path(schema.Results, getter).replace(".", "_")


def _throughput(s: Source) -> schema.Stat:
    """The windows' throughput summary (median, 95% interval); an empty one without windows."""
    key = schema.field_path(schema.Windows, lambda w: w.throughput_img_s)  # the summary is keyed by the list's name
    stat = s.windows.summary.get(key) if s.windows.summary else None
    return stat or schema.Stat()


def _clock_mhz(record: schema.Results) -> float | None:
    means = [g.sm_clock_mhz.mean for g in record.utilization.gpus if g.sm_clock_mhz and g.sm_clock_mhz.mean is not None]
    return sum(means) / len(means) if means else None


def _energy_per_image_j(record: schema.Results) -> float | None:
    return 1.0 / record.images_per_j if record.images_per_j else None


def _host_busy_pct(record: schema.Results) -> float | None:
    """The whole host's CPU use over the measured steps (the verdict's scope), else over the training block."""
    u = record.utilization
    window = u.measured_window.host.cpu_pct if u.measured_window and u.measured_window.host.cpu_pct else None
    busy = window or u.host.cpu_pct
    return busy.mean if busy else None


def _machine(env: schema.Env) -> str | None:
    """env.json's `machine`; for a record written before it, the same rules on the fields it has (no boot id)."""
    if env.machine:
        return env.machine
    from effbench.system import machine

    found = machine.identify(env.hostname, env.container_runtime, [g.uuid for g in env.gpus], env.host_boot_id)
    return found.name if found else None


def _contended(record: schema.Results) -> bool | None:
    """Whether the run's verdict says a busy host set its pace; None without a verdict (nothing measured)."""
    return record.verdict.bottleneck == CONTENDED if record.verdict else None


# The columns in order; the "Export columns" table of docs/sweeps-and-reports.md is their (name, doc).
COLUMN_SPEC: tuple[Column, ...] = (
    Column(PATH, "the run folder", lambda s: str(s.folder.path)),
    Column(KIND, "run, sweep-cell, sweep-attempt (an earlier try of a cell, superseded) or scaling-member",
           lambda s: s.kind),
    Column(GROUP, "the sweep or scaling-series folder holding it; empty for a lone run",
           lambda s: str(s.folder.group) if s.folder.group else None),
    _field(lambda r: r.status,
           ", ".join(results.STATUSES) + ", or dead (a `running` run whose process is gone)"),
    _field(lambda r: r.run_name, "the run's folder name when it ran"),
    _field(lambda r: r.started_at, "ISO 8601 start time"),
    Column(HOST, "hostname (env.json)", lambda s: s.env.hostname),
    Column(MACHINE, "the machine as the leaderboard names it (env.json machine): EFFBENCH_MACHINE, else the hostname, "
           "else, where docker or podman made the hostname up or in a Kubernetes pod, GPU-<UUID prefix> or "
           "boot-<boot id prefix>",
           lambda s: _machine(s.env)),
    Column(GPU_MODEL, "name of GPU 0; empty without GPUs", lambda s: s.env.gpus[0].name if s.env.gpus else None),
    _env(lambda e: e.gpu_count, "GPUs visible to the run"),
    _env(lambda e: e.driver_version, "NVIDIA driver (NVML)"),
    _env(lambda e: e.cuda_build, "CUDA version torch was built with"),
    _env(lambda e: e.torch, "torch version"),
    _env(lambda e: e.cpu_model, "CPU model"),
    _env(lambda e: e.cpu_cores_usable, "cores the run could use (affinity)"),
    Column(CPU_QUOTA_CORES, "cgroup CPU quota in cores; empty when unlimited",
           lambda s: s.env.cgroup_cpu_quota_cores),
    Column(SHM_GIB, "size of /dev/shm in GiB", lambda s: s.env.shm_size_gib),
    _env(lambda e: e.container_runtime, "docker, podman, apptainer or none"),
    Column(IMAGE_REVISION,
           "the git revision the image was built from (env.json image.revision); empty outside the image",
           lambda s: s.env.image.revision if s.env.image else None),
    Column(SM_CLOCK_MHZ, "mean SM clock over the run, GPU mean; empty without NVML", lambda s: _clock_mhz(s.record)),
    _field(lambda r: r.device, "device the run trained on"),
    _field(lambda r: r.world_size, "processes in the job"),
    _field(lambda r: r.global_batch_size, "images per optimizer step over all processes"),
    _field(lambda r: r.throughput_img_s, "headline throughput: measured images / (data wait + compute)"),
    Column(MEDIAN, "median over the throughput windows", lambda s: _throughput(s).median),
    Column(CI_LOW, "95% Student's t interval of the window mean, low end",
           lambda s: _throughput(s).ci_low),
    Column(CI_HIGH, "95% Student's t interval of the window mean, high end",
           lambda s: _throughput(s).ci_high),
    Column(WINDOWS, "windows behind the median and interval", lambda s: s.windows.windows or 0),
    Column(DATA_WAIT_SHARE, "share of step time waiting on the input pipeline (0..1)",
           lambda s: s.record.data_time_share),
    _field(lambda r: r.mfu, "model FLOPs utilisation (0..1); empty for devices with no datasheet peak"),
    Column(ENERGY_PER_IMAGE_J, "GPU energy per trained image in joules; empty without an energy counter",
           lambda s: _energy_per_image_j(s.record)),
    _field(lambda r: r.peak_mem_gib, "peak device memory allocated, GiB"),
    _field(lambda r: r.final.train_loss, "train loss of the last epoch"),
    _field(lambda r: r.final.val_loss, "validation loss of the last epoch"),
    _field(lambda r: r.final.train_top1, "train top-1 of the last epoch (0..1)"),
    _field(lambda r: r.final.val_top1, "validation top-1 of the last epoch (0..1)"),
    Column(ACCURACY_NOTE, "why the top-1 columns mean nothing on generated data (synthetic: random labels, accuracy "
           "is chance by construction); empty for real data", lambda s: chance_note(s.record.config.dataset)),
    _tta(lambda t: t.target_top1, "--target-top1 of the run; empty without one (docs/time-to-accuracy.md)"),
    _tta(lambda t: t.reached_target, "whether a validation reached the target top-1"),
    _tta(lambda t: t.train_time_to_target_s,
         "training seconds (timed steps, validation excluded) to the first validation at the target",
         name=TIME_TO_TARGET_S),
    _tta(lambda t: t.epochs_to_target, "epochs trained to the first validation at the target"),
    _tta(lambda t: t.best_val_top1, "best validation top-1 over the epochs run with a target (0..1)"),
    Column(BOTTLENECK, "the run's bottleneck verdict (cpu-contended, input-bound, compute-bound, ...: "
           "docs/methodology.md); empty when nothing was measured", lambda s: s.record.verdict.bottleneck
           if s.record.verdict else None),
    Column(CPU_CONTENDED, "true when the verdict is cpu-contended: the host was busy and the run did not get its "
           "cores, so its timings measure the other processes too; empty without a verdict",
           lambda s: _contended(s.record)),
    Column(HOST_CPU_BUSY_PCT, "the whole host's CPU use over the measured steps, % of all its cores (what "
           "cpu-contended reads); empty when not sampled", lambda s: _host_busy_pct(s.record)),
    _env(lambda e: e.load_avg_1m, "the host's 1-minute load average when the run folder opened (env.json)"),
    Column(OMP_WAIT_POLICY, "OMP_WAIT_POLICY as the run saw it (env.json env_vars); empty when unset",
           lambda s: s.env.env_vars.get("OMP_WAIT_POLICY") if s.env.env_vars else None),
)  # fmt: skip
# (column, what it holds)
COLUMN_DOCS: tuple[tuple[str, str], ...] = tuple((c.name, c.doc) for c in COLUMN_SPEC)
COLUMNS = tuple(name for name, _ in COLUMN_DOCS)


def _results_file(path: Path) -> Path:
    return path if path.is_file() else path / results.RESULTS_FILE


@dataclass(frozen=True)
class SweepCells:
    """A sweep's cells by their run folder (resolved) and by key, read from sweep.json once per `collect`: read
    and scanned again for each of its cells, a sweep of n cells cost n^2 (250 cells: 10 s, issue 33)."""

    by_run: dict[Path, dict[str, Any]]
    by_key: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, sweep_dir: Path) -> SweepCells:
        by_run: dict[Path, dict[str, Any]] = {}
        by_key: dict[str, dict[str, Any]] = {}
        for cell in M.load_manifest(sweep_dir).cells:  # the first cell naming a folder or key, as listed
            if cell.run_dir:
                by_run.setdefault((sweep_dir / cell.run_dir).resolve(), dict(cell.params))
            by_key.setdefault(cell.key, dict(cell.params))
        return cls(by_run, by_key)


def _cell_of(
    sweep_dir: Path, run_dir: Path, sweeps: dict[Path, SweepCells] | None = None
) -> tuple[str, dict[str, Any]] | None:
    """(kind, swept values) of a run folder inside a sweep: the cell's current run, or an earlier
    attempt the runner moved to attempts/<key>/ before rerunning the cell; None when not its own.
    `sweeps`: the sweeps read so far (one `collect`), each read once."""
    sweeps = {} if sweeps is None else sweeps
    if sweep_dir not in sweeps:
        sweeps[sweep_dir] = SweepCells.read(sweep_dir)
    cells = sweeps[sweep_dir]
    resolved = run_dir.resolve()
    if resolved in cells.by_run:
        return "sweep-cell", dict(cells.by_run[resolved])
    rel = resolved.relative_to(sweep_dir.resolve()).parts
    if len(rel) == 3 and rel[0] == "attempts":
        return "sweep-attempt", dict(cells.by_key.get(rel[1], {}))
    return None


def _scaling_dim(record: schema.Results) -> dict[str, Any]:
    """The device count a scaling series varied: processes (--nproc) when set, else GPUs."""
    config = record.config
    if config.nproc is not None:
        return {schema.field_path(schema.Config, lambda c: c.nproc): config.nproc}
    return {schema.field_path(schema.Config, lambda c: c.gpus): config.gpus}


def locate(run_dir: Path, sweeps: dict[Path, SweepCells] | None = None) -> RunFolder:
    """What holds a run folder: a sweep (sweep.json lists it), a scaling series (scaling.json beside it) or nothing."""
    resolved = run_dir.resolve()
    for parent in list(resolved.parents)[:3]:  # cells/<key>/<run>/, attempts/<key>/<run>/
        if os.path.lexists(parent / M.MANIFEST_FILE):  # in any form: read_manifest says what is wrong with it
            found = _cell_of(parent, run_dir, sweeps)
            if found is not None:
                return RunFolder(run_dir, found[0], parent, found[1])
    parent = resolved.parent
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
        resolved = f.resolve()
        if resolved not in seen:
            seen.add(resolved)
            unique.append(f)
    if not unique:
        raise EffbenchError(
            " ".join(map(str, paths)), "holds no results.json; pass folders written by `effbench run` or `sweep`"
        )
    return unique


def _read_env(run_dir: Path, record: schema.Results) -> schema.Env:
    """env.json as the run wrote it; the copy inside results.json when the file is gone (a lone results.json)."""
    path = run_dir / results.ENV_FILE
    fix = "restore the env.json the run wrote, or delete it"
    try:  # a FIFO, a 100,000-deep or a 5,000-digit env.json is one line (safe_files), a missing one the copy
        data = safe_files.load_json(path, fix=fix)
    except FileNotFoundError:
        data = None
    if not isinstance(data, dict):
        return record.env
    return schema.check(schema.Env, data, path, fix)  # a bad value: one line naming the file and the field


def _flat(value: Any) -> Any:
    """A cell value: scalars as they are, anything nested as compact JSON."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


@dataclass(frozen=True)
class Run:
    """One exported run: its flat row and the throughput windows behind it (for the leaderboard's noise test)."""

    row: dict[str, Any]
    windows_img_s: list[float]


def read_run(results_file: Path, sweeps: dict[Path, SweepCells] | None = None) -> Run:
    run_dir = results_file.parent
    # by its folder when it is a run's results.json: a folder in its place is then refused as one, not looked into
    # a `running` record whose process is gone reads `dead` (liveness.py): so its row, and the leaderboard's
    record = liveness.read(run_dir if results_file.name == results.RESULTS_FILE else results_file)
    steps = windows.read_steps(run_dir)
    where = locate(run_dir, sweeps)
    swept = where.swept or (_scaling_dim(record) if where.kind == "scaling-member" else {})
    kind = "selftest" if record.command == SELFTEST_COMMAND else where.kind
    w = schema.Windows.model_validate(windows.windows_of(record, steps))
    source = Source(where, kind, record, _read_env(run_dir, record), w)
    row: dict[str, Any] = {c.name: c.value(source) for c in COLUMN_SPEC}
    row.update({f"swept.{k}": _flat(v) for k, v in sorted(swept.items())})
    config = record.config.model_dump(exclude_unset=True)
    row.update({f"config.{k}": _flat(v) for k, v in sorted(config.items())})
    return Run(row, [float(x) for x in w.throughput_img_s or [] if x is not None])


def collect(paths: Sequence[Path]) -> list[Run]:
    """The runs at or under `paths`; the selftest's internal runs only where a path names them (a results.json,
    or a folder inside the selftest's), not when found by scanning the results folder that holds the selftest's."""
    found = [(path, f) for path in map(Path, paths) for f in find_runs([path])]
    read = read_runs([f for _, f in found])
    runs = [r for (path, _), r in zip(found, read, strict=True)
            if r.row["kind"] != "selftest" or _names_selftest(path, Path(r.row["path"]))]  # fmt: skip
    if not runs:
        raise EffbenchError(
            " ".join(map(str, paths)), "holds only the selftest's own runs; pass folders written by `effbench run` "
            "or `sweep`, or the selftest's folder itself to export those"
        )  # fmt: skip
    return runs


# Reading the files is most of a leaderboard's time and each run is read alone: from PARALLEL_FROM runs on, one
# process per allowed core reads its share (10,000 runs on 2 cores: 21 s -> 12 s; a process costs ~0.3 s).
PARALLEL_FROM = 1000
MAX_READERS = 8
_CHUNKS_PER_READER = 4  # a slow share (a cold disk, a sweep's manifest) holds the others up less


def read_runs(files: Sequence[Path]) -> list[Run]:
    """read_run for each file, in order; the first bad file's EffbenchError, as a sequential read would raise."""
    from effbench.system.hardware import allowed_cores

    readers = min(MAX_READERS, int(allowed_cores()), len(files) // (PARALLEL_FROM // 2))
    if len(files) < PARALLEL_FROM or readers < 2:
        return _read_share(list(files))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = -(-len(files) // (readers * _CHUNKS_PER_READER))
    shares = [list(files[i : i + size]) for i in range(0, len(files), size)]
    # forkserver: a fresh process, not a fork of one that may hold threads (matplotlib's, the profiler's)
    with ProcessPoolExecutor(readers, mp_context=multiprocessing.get_context("forkserver")) as pool:
        return [run for share in pool.map(_read_share, shares) for run in share]


def _read_share(files: list[Path]) -> list[Run]:
    sweeps: dict[Path, SweepCells] = {}  # each sweep.json read once per share, whatever its cells
    return [read_run(f, sweeps) for f in files]


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

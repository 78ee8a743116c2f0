"""Run a sweep: every cell an ordinary run (launch.run: preflight, launch, torchrun all apply),
the manifest rewritten atomically around each cell, resumable, OOM recorded as data.

    effbench sweep --preset optimizers --device cpu --dataset synthetic --arch resnet18 --image-size 32 --max-steps 10
    effbench sweep --batch-size 32,64 --workers 0,2 --dataset synthetic --device cpu   # 2 x 2 cells
    (the same command again)   resumes: cells already ok are skipped, the rest run

Folder layout (`--output`/`--name`, default ./results/sweep-<preset or lists>):

    sweep.json              the manifest: cells, status, run folder, error, a short summary
    cells/<key>/<run>/      each cell's run folder, exactly as `effbench run` writes it
    attempts/<key>/<run>/   earlier unfinished attempts of a cell (kept, never counted)
    sweep.txt, sweep.md, summary.json, plots/*.png, report.html   (render.py)

Cells run one after another in this process (the device is not shared between cells). A signal
stops the sweep after recording the cell in flight as interrupted; SIGKILL or power loss leaves it
`running` in the manifest, and the next run of the same sweep moves its folder to attempts/ and
runs it again, so no cell is ever recorded twice.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import signal as signals
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench.analysis.time_to_accuracy import describe as describe_tta
from effbench.config import RunConfig
from effbench.sweep import manifest as M
from effbench import liveness, results
from effbench.report import outputs, render
from effbench.errors import EffbenchError
from effbench.report.sweep_tables import host_peak_gib, whole_run_wall_s
from effbench.sweep.spec import CELLS_DIR, SweepPlan, SweepSpec, config_identity, plan_cells

if TYPE_CHECKING:
    from effbench import schema
    from effbench.run.runner import RunOutcome

ATTEMPTS_DIR = "attempts"
# What a cell's run status becomes in the manifest; a run never left "running" behind a return.
_CELL_STATUS = {
    "ok": "ok",
    "oom": "oom",
    "diverged": "diverged",
    "failed": "failed",
    "interrupted": "interrupted",
    "running": "failed",
}


@dataclass
class SweepOutcome:
    folder: Path
    manifest: schema.Manifest
    """The manifest as written last."""
    signal: int | None = None
    """The signal that stopped the sweep, if one did."""
    report_error: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        return M.counts(self.manifest)


def _machine(spec: SweepSpec) -> tuple[int, int]:
    """(visible GPUs, usable cores): needed only by a preset whose device counts come from the machine, so torch
    loads only then."""
    from effbench.sweep.presets import get_preset
    from effbench.system.hardware import usable_cores

    machine_counts = spec.preset is not None and get_preset(spec.preset).device_counts_from_machine
    if not machine_counts or "gpus" in spec.lists or "nproc" in spec.lists:
        return 0, usable_cores()
    import torch

    return (torch.cuda.device_count() if torch.cuda.is_available() else 0), usable_cores()


def plan_sweep(spec: SweepSpec) -> SweepPlan:
    visible, cores = _machine(spec)
    return plan_cells(spec, visible_gpus=visible, cores=cores)


def blocked_cells(plan: SweepPlan, output: Path) -> dict[str, EffbenchError]:
    """Cells this machine cannot run (preflight errors: no GPU for --device cuda, a missing dataset)."""
    from effbench.system.preflight import errors, run_checks

    blocked: dict[str, EffbenchError] = {}
    for cell in plan.cells:
        errs = errors(run_checks(dataclasses.replace(cell.config, output=output)))
        if errs:
            f = errs[0]
            blocked[cell.key] = EffbenchError(f.option, f"{f.message}; fix: {f.fix_line}" if f.fix_line else f.message)
    return blocked


def _one_per_device(cfg: RunConfig) -> bool:
    """A cell whose every device trains on a batch of 1 whatever the launch plan: --batch-size 1 per device (weak
    scaling). Under strong scaling the split needs the plan, and launch.run checks it when the cell starts."""
    return cfg.batch_size == 1 and cfg.scaling == "weak"


def check_cells(plan: SweepPlan, skip: Collection[str] = ()) -> None:
    """What only the model can tell, for every cell before the first runs (a `--freeze last:N` beyond a cell's
    arch's blocks, or a batch of 1 a training BatchNorm cannot normalise, failed that cell after the earlier ones
    had run): one line naming the cell."""
    cells = [
        c for c in plan.cells if c.key not in skip and (c.config.freeze_mode[0] == "last" or _one_per_device(c.config))
    ]
    if not cells:  # nothing to check: torch (models/) is not imported for it
        return
    from effbench.models import check_batch_norm, check_freeze

    seen: set[tuple[object, ...]] = set()
    for cell in cells:
        c = cell.config
        ident = (c.arch, c.freeze, c.image_size, c.data_only) if _one_per_device(c) else (c.arch, c.freeze)
        if ident in seen:
            continue
        seen.add(ident)
        try:
            check_freeze(c)
            if _one_per_device(c):
                check_batch_norm(c, 1)
        except EffbenchError as e:
            raise EffbenchError(e.option, f"cell {cell.key}: {e.message}") from None


def same_run(identity: Mapping[str, Any], record: schema.Results) -> bool:
    """Whether a run ran a cell's configuration (its config identity, sweep.json's `config`): every option the cell
    sets as the run was asked for it (results.json's config, with `requested` where the run resolved a value);
    None and auto are left to the run, which resolves them."""
    config = record.config.model_dump(exclude_unset=True)
    asked = {**config, **(config.get(_REQUESTED) or {})}
    return all(
        v is None or v == "auto" or json.dumps(asked.get(k), default=str) == json.dumps(v, default=str)
        for k, v in identity.items()
    )


_REQUESTED = "requested"  # config.json's note of the values asked for where they differ from what ran (config.py)


def adopt_finished(folder: Path, manifest: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A sweep folder without its sweep.json (moved aside after it broke): each cell whose cells/<key>/ holds an
    `ok` run of the cell's configuration (same_run) is ok again with it, the newest such run; the other cells
    run as usual. Returns the manifest and how many cells it kept."""
    kept = 0
    for cell in manifest["cells"]:
        cell_dir = folder / CELLS_DIR / cell["key"]
        runs = sorted((p for p in cell_dir.iterdir() if p.is_dir()), reverse=True) if cell_dir.is_dir() else []
        for run_dir in runs:  # newest first: a run folder's name starts with its start time
            try:
                record = results.load_record(run_dir)
            except EffbenchError:  # no results.json there, or one effbench cannot read: not a finished run
                continue
            if record.status == "ok" and same_run(cell["config"], record):
                manifest = M.update_cell(
                    manifest, cell["key"], status="ok", run_dir=str(run_dir.relative_to(folder)), attempts=1,
                    error=None, summary=cell_summary(record), started_at=record.started_at,
                    finished_at=record.finished_at,
                )  # fmt: skip
                kept += 1
                break
    return manifest, kept


def _stash_attempts(folder: Path, key: str) -> None:
    """Move earlier run folders of a cell out of cells/<key>/ so the cell holds one run only."""
    cell_dir = folder / CELLS_DIR / key
    if not cell_dir.is_dir():
        return
    for old in sorted(p for p in cell_dir.iterdir() if p.is_dir()):
        dest_dir = folder / ATTEMPTS_DIR / key
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = results.create_run_dir(dest_dir, old.name)
        dest.rmdir()
        shutil.move(str(old), str(dest))


def cell_summary(record: schema.Results) -> schema.CellSummary:
    """The few numbers the manifest keeps per cell (the report reads the run folder for the rest)."""
    from effbench import schema

    rss = record.utilization.host.rss_gib
    summary = record.throughput_windows.summary if record.throughput_windows else None
    key = schema.field_path(schema.Windows, lambda w: w.throughput_img_s)  # the summary: by the list's name
    thr = (summary.get(key) if summary else None) or schema.Stat()
    return schema.CellSummary(
        throughput_img_s=record.throughput_img_s,
        throughput_median_img_s=thr.median,
        throughput_ci95_img_s=[thr.ci_low, thr.ci_high] if thr.ci_low is not None else None,
        batch_size_per_device=record.batch_size_per_device,
        global_batch_size=record.global_batch_size,
        peak_mem_gib=record.peak_mem_gib,
        peak_rss_gib=rss.max if rss else None,
        peak_host_gib=host_peak_gib(record),
        final=record.final,
        wall_time_s=whole_run_wall_s(record),
        time_to_accuracy=record.time_to_accuracy,  # --target-top1; None without
    )


def cell_record(outcome: RunOutcome) -> schema.Results:
    """The cell's record as the run wrote it (NaN stored as null); a run that made no folder (it failed before
    one) has only its status and error, in memory."""
    if outcome.run_dir is not None and (outcome.run_dir / results.RESULTS_FILE).is_file():
        return results.load_record(outcome.run_dir)
    return outcome.results


def _error(record: schema.Results) -> dict[str, Any] | None:
    """The run's error as the manifest keeps it: its traceback stays in the run's results.json."""
    return record.error.model_dump(exclude_unset=True, exclude={"traceback"}) if record.error else None


def _free_device_memory() -> None:
    """Release what the finished cell cached (after an OOM above all) before the next cell starts."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_sweep(
    spec: SweepSpec, *, command: Sequence[str], echo: Callable[[str], None] = print, progress: bool = False
) -> SweepOutcome:
    """Plan, check, then run every cell that is not ok yet; returns the final manifest."""
    plan = plan_sweep(spec)
    output = Path(spec.output)
    results.check_output_writable(output)
    blocked = blocked_cells(plan, output)
    if len(blocked) == len(plan.cells):  # nothing could run: a bad input, not data
        raise next(iter(blocked.values()))
    check_cells(plan, skip=blocked)
    folder = plan.folder
    if (
        folder.is_dir()
        and not os.path.lexists(folder / M.MANIFEST_FILE)
        and not (folder / CELLS_DIR).is_dir()  # a sweep folder whose sweep.json was moved aside: rebuilt
        and any(p.name != M.LOCK_FILE for p in folder.iterdir())
    ):
        raise EffbenchError(str(folder), "exists and is not a sweep folder; choose another --name or --output")
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with M.locked(folder):  # the manifest is read only once this sweep holds the folder
            return _run_cells(spec, plan, blocked, command=command, echo=echo, progress=progress)
    except EffbenchError:
        if made and not (folder / M.MANIFEST_FILE).exists():  # a bad input leaves no folder behind
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _run_cells(
    spec: SweepSpec,
    plan: SweepPlan,
    blocked: dict[str, EffbenchError],
    *,
    command: Sequence[str],
    echo: Callable[[str], None],
    progress: bool,
) -> SweepOutcome:
    """Every cell that is not ok yet, then the reports; the caller holds the sweep folder's lock."""
    from effbench.report.run_reports import RUN_REPORTS
    from effbench.run import launch
    from effbench.run.phases import Interrupted, interrupt_on_signals

    folder = plan.folder
    fresh = M.new_manifest(
        name=plan.name, preset=spec.preset, dims=plan.dims, zipped=spec.zip, command=command,
        cells=[{"key": c.key, "params": c.params, "config": config_identity(c.config)} for c in plan.cells],
    )  # fmt: skip
    existing = M.read_manifest(folder) if (folder / M.MANIFEST_FILE).exists() else None
    # who writes the manifest while a cell is `running`: a reader that finds this process gone shows that cell `dead`
    m = {**M.resume(existing, fresh, folder), "process": liveness.this_process().model_dump()}
    # cells/, attempts/ and each cell's folders: never through a link out of the sweep folder (one line)
    for sub in (CELLS_DIR, ATTEMPTS_DIR, *(f"{d}/{c.key}" for c in plan.cells for d in (CELLS_DIR, ATTEMPTS_DIR))):
        outputs.folder(folder, sub)
    if existing is None and (folder / CELLS_DIR).is_dir() and any((folder / CELLS_DIR).iterdir()):
        m, kept = adopt_finished(folder, m)
        echo(f"sweep {folder}: no {M.MANIFEST_FILE}; rebuilt it from the cells' run folders ({kept} finished kept)")
    for gone in M.lost(m, folder):  # an `ok` cell whose run folder was deleted is not ok: it runs again
        m = M.update_cell(m, gone["key"], status="pending", run_dir=None, error=None, summary=None, finished_at=None)
        echo(f"cell {gone['key']}: its run folder {gone['run_dir']} is gone; running the cell again")
    M.write_manifest(folder, m)
    todo = M.to_run(m)
    echo(f"sweep {folder}: {len(plan.cells)} cells, {len(plan.cells) - len(todo)} already ok, {len(todo)} to run")
    cells = {c.key: c for c in plan.cells}
    stopped: int | None = None
    current: str | None = None
    received: list[int] = []
    said: set[str] = set()  # each preflight warning once for the sweep, not again for every cell
    try:
        with interrupt_on_signals(received):  # a signal between cells stops the sweep cleanly too
            for n, key in enumerate(todo, 1):
                cell = cells[key]
                where = f"[{n}/{len(todo)}] {key}"
                if key in blocked:
                    err = blocked[key]
                    m = M.update_cell(
                        m,
                        key,
                        status="skipped",
                        run_dir=None,
                        error={"type": "preflight", "option": err.option, "message": str(err)},
                    )
                    M.write_manifest(folder, m)
                    echo(f"{where}: skipped ({err})")
                    continue
                _stash_attempts(folder, key)
                current = key
                m = M.update_cell(m, key, status="running", run_dir=None, error=None, summary=None,
                                  attempts=M.cell(m, key)["attempts"] + 1, started_at=M.now(), finished_at=None)  # fmt: skip
                M.write_manifest(folder, m)
                echo(f"{where}: running")
                try:
                    outcome = launch.run(
                        cell.config,
                        command=list(command),
                        echo=None,
                        progress=progress,
                        said_warnings=said,
                        reports=RUN_REPORTS,
                    )
                except (
                    EffbenchError
                ) as e:  # this cell's input (preflight passed for the sweep): recorded, sweep goes on
                    m = M.update_cell(
                        m,
                        key,
                        status="failed",
                        finished_at=M.now(),
                        error={"type": "EffbenchError", "option": e.option, "message": str(e)},
                    )
                    M.write_manifest(folder, m)
                    current = None
                    echo(f"{where}: failed ({e})")
                    if spec.fail_fast:
                        break
                    continue
                record = cell_record(outcome)
                status = _CELL_STATUS.get(record.status, "failed")
                run_dir = str(outcome.run_dir.relative_to(folder)) if outcome.run_dir is not None else None
                m = M.update_cell(
                    m,
                    key,
                    status=status,
                    run_dir=run_dir,
                    finished_at=M.now(),
                    error=_error(record),
                    summary=cell_summary(record),
                )
                M.write_manifest(folder, m)
                current = None
                echo(f"{where}: {_describe(status, record)}")
                _free_device_memory()
                if status == "interrupted":
                    stopped = int(record.signal or 2)
                    break
                if status == "failed" and spec.fail_fast:
                    break
    except Interrupted as e:
        stopped = e.signum
    except KeyboardInterrupt:
        stopped = 2
    if stopped is not None and current is not None:
        m = M.update_cell(m, current, status="interrupted", finished_at=M.now())
        M.write_manifest(folder, m)
    report_error = None
    try:
        render.write_sweep_reports(folder)
    except EffbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - the cells are measured; a report problem is said, not fatal
        report_error = f"{type(e).__name__}: {e}".splitlines()[0]
    return SweepOutcome(folder=folder, manifest=M.typed(m), signal=stopped, report_error=report_error)


def _describe(status: str, record: schema.Results) -> str:
    if status == "ok":
        thr = record.throughput_img_s
        tta = describe_tta(record.time_to_accuracy)  # --target-top1, beside the throughput
        return ("ok" + (f", {thr:,.1f} img/s" if thr else "")) + (f"; {tta}" if tta else "")
    if status == "oom":
        mem, host = record.peak_mem_gib, host_peak_gib(record)
        extra = (
            f", peak {mem:.2f} GiB" if mem is not None else f", peak {host:.2f} GiB host" if host is not None else ""
        )
        return f"oom at batch size {record.batch_size_per_device} per device{extra}"
    err = record.error
    return f"{status}" + (f" ({err.type}: {err.message})" if err else "")


def exit_message(outcome: SweepOutcome) -> tuple[int, str | None]:
    """(exit code, one-line message for stderr): 0 when every cell is ok, oom or skipped."""
    counts = outcome.counts
    total = sum(counts.values())
    done = counts.get("ok", 0)
    if outcome.signal is not None:
        name = signals.Signals(outcome.signal).name
        return (
            128 + outcome.signal,
            f"error: sweep interrupted by {name} ({done} of {total} cells ok); rerun the same command to resume",
        )
    cells = outcome.manifest.cells
    failed = [c for c in cells if c.status in ("failed", "interrupted", "pending", "running")]
    errors = [c.error for c in cells]
    if len(failed) == len(cells) and all(e is not None and e.type == "EffbenchError" for e in errors):
        # no cell ran: each refused its input (weights neither cached nor downloadable, ...), as `run` refuses it
        messages = {str(e.message) for e in errors if e is not None}
        which = "this input" if len(messages) == 1 else f"bad input ({failed[0].key}'s shown; sweep.json has each)"
        first_error = errors[0].message if errors[0] is not None else None
        return 2, f"error: {first_error}; every cell ({total}) failed on {which}, none ran"
    if failed:
        first = failed[0]
        why = (first.error.message if first.error else None) or first.status
        return (
            1,
            f"error: sweep: {len(failed)} of {total} cells did not finish ({first.key}: {why}); rerun the same command to retry them",
        )
    return 0, None

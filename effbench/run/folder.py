"""The run folder's lifecycle, on rank 0: made with a `running` results.json at the start of setup, the phase kept
current while the run is built, `interrupted` when a signal comes before anything is measured, removed after a
bad input, opened with config.json / env.json, rewritten after every epoch, and its final write (results.json
last; a full disk recorded as `failed`, a report that cannot be written as a note).

    start_run_folder -> enter_phase ... -> open_run_folder -> write_progress (each epoch) -> write_final
    interrupted_before_measuring / discard   how a run that measured nothing leaves its folder
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from effbench.results import StepRow
from effbench import liveness, redact, results, schema
from effbench.analysis import windows
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.fmt import printable
from effbench.launch.distributed import DistContext
from effbench.launch.plan import LaunchPlan
from effbench.run import record as rec
from effbench.run.phases import Interrupted, Phase, deferred

if TYPE_CHECKING:
    from effbench.run.rank import Prepared
    from effbench.run.runtime import Runtime

Echo = Callable[[str], None]


class Reports(Protocol):
    """The reports the caller draws from a run's settled record (report/run_reports.py; run/ imports nothing
    from report/). run/ calls `write` once per run, where the outcome is settled: rank 0's final write in one
    process, the launcher once torchrun has ended (the ranks get none). `write` returns the files it could
    not write, each as `<file> not written (<why>)`, and raises nothing for them (draw_reports)."""

    def write(self, run_dir: Path, record: schema.Results, steps: list[StepRow]) -> list[str]: ...

    def text(self, record: schema.Results) -> str: ...


def run_name(cfg: RunConfig, device_label: str, precision: str, when: dt.datetime) -> str:
    """Conditions readable from the folder name: time, arch, dataset, device, precision, batch, and the loader when
    it is not the dataset's default (a DALI and a fast run of the same data differed only by their time)."""
    from effbench.config import default_loader
    from effbench.datasets import dataset_spec

    # generated data runs its own loader whatever --loader says (config.json's no_effect): nothing to name
    files = dataset_spec(cfg.dataset).storage != "generated"
    loader = f"_{cfg.loader}" if files and cfg.loader != default_loader(cfg.dataset) else ""
    return results.safe_name(
        f"{when:%Y%m%d-%H%M%S}_{cfg.arch}_{cfg.dataset}_{device_label}_{precision}_bs{cfg.batch_size}{loader}"
    )


def device_label(plan: LaunchPlan) -> str:
    n = plan.devices
    return f"{plan.device_type}{n}" if n > 1 or plan.device_type == "cuda" else "cpu"


def fresh_path(output: Path, name: str) -> Path:
    for i in range(1000):
        candidate = output / (name if i == 0 else f"{name}-{i}")
        if not candidate.exists():
            return candidate
    raise EffbenchError("--output", f"too many run folders named {name} in {output}; clean it up")


def plan_dict(plan: LaunchPlan) -> dict[str, Any]:
    return {
        "mode": plan.mode,
        "device_type": plan.device_type,
        "nproc_per_node": plan.nproc_per_node,
        "nnodes": plan.nnodes,
        "threads_per_proc": plan.threads_per_proc,
        "argv": plan.argv,
        "env": plan.env,
    }


class RunFolderGone(EffbenchError):
    """The run folder was deleted (or moved) while the run wrote into it: nothing more can be recorded there."""


@contextlib.contextmanager
def kept(run_dir: Path | None) -> Iterator[None]:
    """Writes into the run folder: when it has gone (deleted or moved while the run trained), the atomic write's
    temporary file cannot be made there and FileNotFoundError names `.utilization.csv.*.tmp`; the user gets
    one line naming the folder (exit 2) instead, and the run ends as a bad input does. Anything else passes."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError):
        if run_dir is None or Path(run_dir).is_dir():
            raise
        raise RunFolderGone(
            "--output",
            f"the run folder {run_dir} was deleted or moved while the run wrote into it; nothing more can be "
            "recorded: keep the folder until the run ends, and run again",
        ) from None


@contextlib.contextmanager
def first_no_space(failure: BaseException | None) -> Iterator[None]:
    """The disk filled while the epochs were written, and the final files could not be written either: the
    one line names the first file that did not fit, as results.json does."""
    try:
        yield
    except results.NoSpaceError:
        if isinstance(failure, results.NoSpaceError):
            raise failure from None
        raise


def write_final(
    run_dir: Path | None,
    record: schema.Results,
    epochs: list[schema.Epoch],
    steps: list[StepRow],
    sampler: Any,
    reports: Reports | None,
) -> None:
    """utilization.csv, the caller's reports (none on a torchrun rank: its launcher draws them once torchrun
    has ended), then the CSVs and results.json."""
    assert run_dir is not None
    try:
        with kept(run_dir):
            sampler.write_csv(
                run_dir / UTILIZATION_FILE
            )  # first: the launcher reads it as "rank 0 reached its final write"
            if reports is not None:
                draw_reports(reports, run_dir, record, steps)
            # results.json last: it names any report missing (reports_error)
            write_progress(run_dir, record, epochs, steps)
    except results.NoSpaceError as e:  # never `running` forever: `failed`, the reason and the epochs measured
        record_no_space(run_dir, record, e)
        raise


def draw_reports(reports: Reports, run_dir: Path, record: schema.Results, steps: list[StepRow]) -> None:
    """The caller's reports from the settled record. One that cannot be written (a full disk, a refused write)
    leaves the measurement as it ended, else a measured run read `failed` and compare and leaderboards dropped
    it: `record.reports_error` names the files and why, and one warning line says so. Only the measurement's
    own files (results.json, epochs.csv, steps.csv, utilization.csv) make it `failed` (write_final)."""
    missed = reports.write(run_dir, record, steps)
    if not missed:
        record.unset("reports_error")  # drawn this time: a second final write (a signal while reporting)
        return
    if not run_dir.is_dir():
        return  # the folder itself has gone: the next write says so in one error line (kept)
    record.reports_error = "; ".join(missed)
    print(f"warning: {printable(record.reports_error)}; `effbench report {printable(str(run_dir))}` retries",
          file=sys.stderr)  # fmt: skip


# Keys of the final record left out of the last-resort copy on a full disk, so it fits where the last epoch's
# record lay (observe.summarize's extras; the epochs and the headline stay)
_BULKY = {
    schema.field_path(schema.Results, lambda r: r.utilization),
    schema.field_path(schema.Results, lambda r: r.throughput_windows),
    schema.field_path(schema.Results, lambda r: r.profile),
}


def record_no_space(run_dir: Path, record: schema.Results, e: results.NoSpaceError) -> None:
    """results.json says `failed` with the full-disk error (which file), keeping the epochs: written whole when
    the disk still takes it, else compact over the last epoch's record (results.overwrite_json_in_place)."""
    first = record.error if record.status == "failed" else None  # the run's own, when that was it
    if not (first and "no space left" in str(first.message)):
        first = schema.Error(type="NoSpaceError", message=str(e))
    failed = rec.failed(record, first)
    try:
        results.write_record(run_dir, failed)
    except results.NoSpaceError:
        # on failure too the one-line error still says it, and the last epoch's record stays
        with contextlib.suppress(OSError):
            results.overwrite_json_in_place(
                run_dir / results.RESULTS_FILE, failed.model_dump(exclude_unset=True, exclude=_BULKY)
            )


@dataclass
class Started:
    """The run folder as made at the start of setup: where (rank 0 only), when, and its first record."""

    run_dir: Path | None  # on the other ranks: the launcher's name for it, or None
    writer: bool
    started: dt.datetime  # UTC; the folder's name and `started_at`
    record: schema.Results  # the `running` record it holds, `phase` kept current until training starts


def launch_facts(plan: LaunchPlan, dist: DistContext, rt: Runtime, batch: int) -> dict[str, Any]:
    """The record's device and launch fields, known before anything is built (keyword arguments of
    schema.Results: a name it lacks fails there)."""
    import torch

    launch = schema.Launch.model_validate(plan_dict(plan))
    launch.threads_per_proc, launch.pid = torch.get_num_threads(), os.getpid()
    devices = plan.job_devices(dist.world_size)  # every node's ranks, not this node's count x nodes
    return dict(
        device=rt.device_name if plan.mode != "dp" else f"{plan.nproc_per_node} x {rt.device_name} (DataParallel)",
        world_size=dist.world_size,
        devices=devices,
        strategy="single" if devices == 1 else plan.mode if plan.mode == "dp" else "ddp",
        launch=launch,
        precision=rt.precision,
        batch_size_per_device=batch,
        global_batch_size=batch * devices,
    )


def start_run_folder(
    cfg: RunConfig,
    plan: LaunchPlan,
    dist: DistContext,
    rt: Runtime,
    batch: int,
    run_dir: Path | None,
    command: list[str] | None,
) -> Started:
    """Rank 0 makes the run folder (named from the config, device and precision: all known here) with a
    `running` results.json in phase `setup`, so a signal from here on is recorded in it."""
    started = dt.datetime.now(dt.timezone.utc)
    writer = dist.is_main
    if writer:
        if run_dir is None:
            run_dir = results.create_run_dir(
                cfg.output, run_name(cfg, device_label(plan), rt.precision, started.astimezone())
            )
        else:  # named by the launcher (torchrun, an isolated worker)
            run_dir.mkdir(mode=0o755)
    record = schema.Results(
        schema_version=results.SCHEMA_VERSION,
        status="running",
        phase="setup",
        run_name=run_dir.name if run_dir else None,
        command=redact.argv(command if command is not None else sys.argv),  # shown to whoever reads the record
        started_at=started.isoformat(),
        config=schema.Config.model_validate(results.json_safe(cfg.to_dict())),  # as given; config.json: resolved
        **launch_facts(plan, dist, rt, batch),
        data_only=cfg.data_only,
        epochs=[],
        process=liveness.this_process() if writer else None,  # who writes it while it is `running`
    )
    if writer:
        assert run_dir is not None
        try:
            results.write_record(run_dir, record)
        except results.NoSpaceError:  # the folder holds nothing: it goes, the one line says why
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
    return Started(run_dir, writer, started, record)


def enter_phase(phase: Phase, name: str, start: Started, received: list[int]) -> None:
    """Enter a phase before training, and say so in results.json (written whole: signals wait)."""
    with deferred(received):
        start.record.phase = name
        if start.writer:
            assert start.run_dir is not None
            with kept(start.run_dir):
                results.write_record(start.run_dir, start.record)
    if received:
        raise Interrupted(received[0], phase.name)
    phase.enter(name)


def interrupted_before_measuring(start: Started, signum: int, phase: str, received: list[int]) -> schema.Results:
    """A signal in setup, dataset or model: results.json `interrupted`, the phase named; no report (nothing
    was measured to report on). Returns the record written."""
    with deferred(received):
        before = start.record.model_copy()
        before.unset("phase")  # the phase is the ending's now: interrupted_phase
        record = rec.ended(
            before,
            rec.interrupted(signum, phase),
            finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        )
        if start.writer:
            assert start.run_dir is not None
            with kept(start.run_dir):
                results.write_record(start.run_dir, record)
    return record


def discard(start: Started) -> None:
    """Remove the folder made at the start of setup: a bad input never leaves a folder that looks like a run."""
    if start.writer and start.run_dir is not None:
        shutil.rmtree(start.run_dir, ignore_errors=True)


def open_run_folder(prep: Prepared, plan: LaunchPlan, dist: DistContext, start: Started, echo: Echo) -> schema.Results:
    """Rank 0 writes config.json, env.json and the full `running` results.json into the run folder."""
    from effbench.system.hardware import env_snapshot

    cfg, rt, data, bundle = prep.cfg, prep.rt, prep.data, prep.bundle
    config = _config_json(cfg, rt, data.info, prep.n_steps, warn=start.writer, command=start.record.command)
    env = env_snapshot()
    if bundle is not None:
        counts = dict(arch=bundle.arch, total_params=bundle.total_params, trainable_params=bundle.trainable_params)
        model = schema.ModelInfo.model_validate(results.json_safe({**bundle.info, **counts}))
    else:
        model = schema.ModelInfo(arch=None, note="--data-only: no model")
    record = schema.Results(
        schema_version=results.SCHEMA_VERSION,
        status="running",
        process=start.record.process,
        run_name=start.record.run_name,
        command=start.record.command,
        started_at=start.record.started_at,
        config=schema.Config.model_validate(results.json_safe(config)),
        env=schema.Env.model_validate(results.json_safe(env)),
        **launch_facts(plan, dist, rt, prep.batch),
        model=model,
        data_only=cfg.data_only,
        backend=schema.Backend.model_validate(prep.backend),
        data=schema.Data.model_validate(
            results.json_safe(
                {
                    **data.info,
                    **dict(
                        name=data.name,
                        num_classes=data.num_classes,
                        image_size=data.image_size,
                        train_size=data.train_size,
                        val_size=data.val_size,
                        steps_per_epoch=prep.n_steps,
                        batches_on_device=data.batches_on_device,
                    ),
                }
            )
        ),  # fmt: skip
        throughput_img_s=None,
        compile_time_s=None,
        epochs=[],
    )
    if start.writer:
        assert start.run_dir is not None
        with kept(start.run_dir):
            results.write_json(start.run_dir / results.CONFIG_FILE, config)
            results.write_json(start.run_dir / results.ENV_FILE, env)
            results.write_record(start.run_dir, record)
        echo(f"run folder: {start.run_dir}")
    return record


UTILIZATION_FILE = results.UTILIZATION_FILE


def _config_json(
    cfg: RunConfig, rt: Any, data_info: dict[str, Any], n_steps: int, *, warn: bool, command: list[str] | None = None
) -> dict[str, Any]:
    """config.json's resolved values (every option with no effect under `no_effect`); one the user typed in
    `command` is also warned about on stderr (a default, such as --workers 2 on synthetic data, is not theirs
    to fix)."""
    from effbench.config import resolved_record, typed_option

    from effbench.config import resolve_warmup

    # the fewest measured steps the run can have (auto's warm-up at its cap); > 0: checked (--warmup-steps)
    measured_steps = cfg.epochs * n_steps - resolve_warmup(cfg.warmup_steps, cfg.epochs * n_steps, cfg.compile)
    repeats = cfg.repeats if cfg.repeats is not None else min(windows.DEFAULT_WINDOWS, measured_steps)
    out = resolved_record(cfg, device_type=rt.device.type, precision=rt.precision, repeats=repeats, data_info=data_info)
    for option, why in (out.get("no_effect") or {}).items() if warn else ():
        if command is None or typed_option(command, option):
            print(f"warning: --{option.replace('_', '-')} had no effect on this run: {why}", file=sys.stderr)
    return out


def write_progress(
    run_dir: Path | None, record: schema.Results, epochs: list[schema.Epoch], steps: list[StepRow]
) -> None:
    assert run_dir is not None
    with kept(run_dir):
        results.write_csv(run_dir / results.EPOCHS_FILE, results.EPOCH_FIELDS, [e.model_dump() for e in epochs])
        results.write_csv(run_dir / results.STEPS_FILE, results.STEP_FIELDS, [r._asdict() for r in steps])
        results.write_record(run_dir, record)

"""One benchmark run, start to finish: plan the launch, build, train, and write the run folder.

    run(cfg)             the CLI's entry: checks, then trains in this process (one device, or
                         DataParallel) or re-runs itself under torchrun (`effbench worker`)
    run_benchmark(...)   the body every rank runs; rank 0 alone writes the run folder

Order matters for honesty: the inputs that need no data (config, launch, device, precision, output
folder, batch split) are checked before the run folder exists; it is made then, with a `running`
results.json naming the phase, so a signal while the dataset or model is built (or downloaded) is
recorded `interrupted` there. A bad input found while building them (dataset, weights, warm-up), or once
the data is read before an epoch is measured (no training image readable), removes the folder before its
one-line error: a bad input never leaves a folder behind unless it holds measured epochs. Once training starts,
results.json is rewritten after every epoch, so an interruption or a crash keeps what was measured and
says how it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench import results, schema
from effbench.run import faults
from effbench.measure import observe
from effbench.report import render
from effbench.report import tables as report
from effbench.analysis import windows
from effbench.config import RunConfig
from effbench.launch.distributed import DistContext
from effbench.errors import EffbenchError
from effbench.launch.plan import LaunchPlan
from effbench.run import record as rec
from effbench.run.phases import Interrupted, Phase, deferred, interrupt_on_signals
from effbench.run.timing import StepTime, Tally

if TYPE_CHECKING:
    from effbench.data.build import DataBundle
    from effbench.measure.flops import StepFlops
    from effbench.measure.monitor import UtilizationSampler
    from effbench.measure.profiling import ProfileInfo
    from effbench.models import ModelBundle
    from effbench.run.runtime import Runtime

__all__ = ["Interrupted", "interrupt_on_signals", "run", "run_benchmark", "worker_main"]

Echo = Callable[[str], None]


@dataclass
class RunOutcome:
    run_dir: Path | None
    results: dict[str, Any]

    @property
    def exit_code(self) -> int:
        status = self.results.get("status")
        if status == "ok":
            return 0
        if status == "interrupted":
            return 128 + int(self.results.get("signal", signal.SIGINT))
        return 1


def run_name(cfg: RunConfig, device_label: str, precision: str, when: dt.datetime) -> str:
    """Conditions readable from the folder name: time, arch, dataset, device, precision, batch."""
    return results.safe_name(
        f"{when:%Y%m%d-%H%M%S}_{cfg.arch}_{cfg.dataset}_{device_label}_{precision}_bs{cfg.batch_size}"
    )


def device_label(plan: LaunchPlan) -> str:
    n = plan.devices
    return f"{plan.device_type}{n}" if n > 1 or plan.device_type == "cuda" else "cpu"


def per_device_batch(cfg: RunConfig, devices: int) -> int:
    """Weak scaling: --batch-size per device. Strong: --batch-size is global, split evenly."""
    assert cfg.batch_size is not None
    if cfg.scaling == "weak" or devices == 1:
        return cfg.batch_size
    if cfg.batch_size % devices:
        raise EffbenchError(
            "--batch-size",
            f"{cfg.batch_size} does not split evenly over {devices} devices under --scaling strong; use a multiple of {devices}",
        )
    return cfg.batch_size // devices


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of a DDP rank's default generators (dropout, drop-connect) once the weights are broadcast:
    child `rank` of the run's seed (numpy SeedSequence spawn key), so no two ranks draw the same masks and none
    repeats a data generator's seed (config.offset_seed, data.augment.stream_seed)."""
    import numpy as np

    return int(np.random.SeedSequence(seed, spawn_key=(rank,)).generate_state(1, dtype=np.uint64)[0])


def plan_for(cfg: RunConfig, worker_args: list[str]) -> LaunchPlan:
    """The launch plan for `cfg` on this machine (needs torch only to count visible GPUs)."""
    import torch

    from effbench.system.hardware import usable_cores
    from effbench.launch.plan import plan_launch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return plan_launch(
        device=cfg.device,
        gpus=cfg.gpus,
        nproc=cfg.nproc,
        strategy=cfg.strategy,
        nnodes=cfg.nnodes,
        node_rank=cfg.node_rank,
        rdzv_endpoint=cfg.rdzv_endpoint,
        rdzv_id=cfg.rdzv_id,
        visible_gpus=visible,
        cores=usable_cores(),
        env=os.environ,
        python=sys.executable,
        worker_args=worker_args,
    )


# --------------------------------------------------------------------------------------------------
# The CLI's entry
# --------------------------------------------------------------------------------------------------
def _silent(_message: str) -> None:
    return None


def run(
    cfg: RunConfig,
    *,
    command: list[str],
    echo: Echo | None = print,
    progress: bool = True,
    isolate: bool = False,
    said_warnings: set[str] | None = None,
) -> RunOutcome:
    """Check, then run in-process or under torchrun; returns the run folder and its results.

    `echo`: where the run folder line and the final report go; None: nowhere, in this process and in a
    torchrun / worker child alike (a child prints on its own stdout, so a no-op echo here would not reach it:
    the selftest's and a sweep's runs printed rank 0's whole report between their own lines).
    `isolate`: a run that would be in this process (one device, or DataParallel) runs in a child
    `effbench worker` instead, so it neither inherits nor leaves behind a CUDA context and cached memory
    (a scaling series runs every member so: no member measures on memory another one holds).
    `said_warnings`: preflight's warnings already printed by the command that runs this run among others
    (preflight.raise_on_errors), so a sweep or the selftest says each once."""
    from effbench.system.preflight import raise_on_errors, run_checks

    # Container and environment checks (output, shm, GPUs, driver, caches, dataset mount) before any
    # folder exists; their messages carry the Docker / compose / Apptainer fix.
    raise_on_errors(run_checks(cfg), said=said_warnings)
    results.check_output_writable(cfg.output)
    spec_dir = Path(tempfile.mkdtemp(prefix="effbench-launch-"))
    try:
        spec_path = spec_dir / "spec.json"
        plan = plan_for(cfg, ["effbench", "worker", "--spec", str(spec_path)])
        _say_gpus_left_idle(cfg, plan, said_warnings)
        per_device_batch(cfg, plan.devices)
        if plan.mode == "torchrun":
            argv = plan.argv or []
        elif isolate:  # the worker outside torchrun (no RANK in its env) is one process: distributed.py
            argv = [sys.executable, "-m", "effbench", "worker", "--spec", str(spec_path)]
        else:
            return run_benchmark(cfg, plan=plan, command=command, echo=echo or _silent, progress=progress)
        return _run_in_child(cfg, plan, spec_path, argv, command=command, echo=echo, progress=progress)
    except Interrupted as e:  # in the checks above (main's handler), before any run folder
        e.phase = e.phase or "setup"
        raise
    finally:
        shutil.rmtree(spec_dir, ignore_errors=True)


def _say_gpus_left_idle(cfg: RunConfig, plan: LaunchPlan, said: set[str] | None) -> None:
    """`--nproc N` with `--device auto` runs N CPU processes (plan.py), and every rank trains on the CPU
    (_run_benchmark): where GPUs are visible, say once on stderr that they stay idle and how to use them."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.device != "auto" or plan.device_type != "cpu" or not visible:
        return
    line = (
        f"warning: --nproc: runs {plan.nproc_per_node} CPU process(es); the {visible} visible GPU(s) stay idle "
        "(use --gpus N for one process per GPU, or --device cpu to say so)"
    )
    if said is None or line not in said:
        print(line, file=sys.stderr)
        if said is not None:
            said.add(line)


def _run_in_child(
    cfg: RunConfig,
    plan: LaunchPlan,
    spec_path: Path,
    argv: list[str],
    *,
    command: list[str],
    echo: Echo | None,
    progress: bool,
) -> RunOutcome:
    """Run `argv` (torchrun, or one `effbench worker`) on the spec and settle its record with how it ended."""
    import torch

    from effbench.run.runtime import resolve_precision
    from effbench.launch.supervise import run_supervised

    precision, _ = resolve_precision(cfg.precision, torch.device(plan.device_type))
    run_dir = _fresh_path(cfg.output, run_name(cfg, device_label(plan), precision, dt.datetime.now()))
    spec = {
        "config": cfg.to_dict(),
        "run_dir": str(run_dir),
        "command": command,
        "plan": _plan_dict(plan),
        "progress": progress,
        "echo": echo is not None,  # rank 0 prints its run folder and report only where the caller would
    }
    spec_path.write_text(json.dumps(spec))
    echo = echo or _silent
    echo(f"launching: {' '.join(argv)}")
    child = "torchrun" if plan.mode == "torchrun" else "the effbench worker"
    env = {**os.environ, **plan.env}
    log_name = "torchrun.log" if plan.mode == "torchrun" else "worker.log"
    with open(spec_path.parent / log_name, "w", encoding="utf-8", errors="replace") as log:
        outcome = run_supervised(argv, env, log=log)  # the terminal gets the ranks' lines, the log everything
    _keep_log(spec_path.parent / log_name, run_dir)
    user_errors = sorted(spec_path.parent.glob("error-rank*.txt"))
    if user_errors:  # a rank hit a bad input (missing dataset, weights...): report it like in-process
        _discard_unmeasured(run_dir)
        option, _, message = user_errors[0].read_text().partition("\t")
        raise EffbenchError(option or None, message)
    # the ranks of this node that ran out of memory (worker_main): torchrun names only the first rank to exit
    ooms = [
        rec.OomMarker.model_validate_json(p.read_text()) for p in sorted(spec_path.parent.glob(rec.OOM_MARKER_GLOB))
    ]
    diverged = [
        rec.DivergedMarker.model_validate_json(p.read_text())
        for p in sorted(spec_path.parent.glob(rec.DIVERGED_MARKER_GLOB))
    ]
    if not (run_dir / results.RESULTS_FILE).exists():
        if outcome.returncode == 0:
            echo(f"this node finished; the node that got rank 0 wrote the run folder ({cfg.nnodes} nodes)")
            return RunOutcome(None, {"status": "ok"})
        return RunOutcome(None, _on_disk(rec.record_without_results(outcome, ooms, child, diverged)))
    written = results.load_record(run_dir)
    settled = rec.settle_with_torchrun(written, outcome, ooms)
    if settled.status == "failed" and settled.error and (run_dir / log_name).is_file():
        # the terminal had only the ranks' lines: say where torchrun's own tracebacks are
        error = settled.error.model_copy()
        error.message = f"{error.message}; {child}'s whole output is in {log_name}"
        settled.error = error
    results.write_json(run_dir / results.RESULTS_FILE, settled)
    if settled != written and (run_dir / results.REPORT_TXT).exists():
        _rewrite_reports(run_dir, _on_disk(settled))
    return RunOutcome(run_dir, _on_disk(settled))


def _on_disk(record: schema.Results) -> dict[str, Any]:
    """The record as results.json holds it, for the readers not yet moved onto the typed model (report,
    render, the CLI's and the sweep's RunOutcome.results)."""
    return record.model_dump(exclude_unset=True)


def _keep_log(log: Path, run_dir: Path) -> None:
    """torchrun's whole output (its tracebacks included) into the run folder, when rank 0 made one here."""
    if run_dir.is_dir() and log.stat().st_size:
        with contextlib.suppress(OSError):  # a full disk: the run's own one-line error says so
            results.atomic_write_bytes(run_dir / log.name, log.read_bytes())


def _rewrite_reports(run_dir: Path, record: dict[str, Any]) -> None:
    """Rank 0 wrote its reports with the end it saw (a broken collective, torchrun's stop): they say the
    settled one, as results.json does."""
    results.atomic_write_text(run_dir / results.REPORT_TXT, report.render(record, "text"))
    results.atomic_write_text(run_dir / results.REPORT_MD, report.render(record, "md"))
    render.write_run_html_safely(run_dir, record, windows.read_steps(run_dir))


def _discard_unmeasured(run_dir: Path) -> None:
    """After a bad input on some rank: rank 0's folder goes too when it holds no measurement (rank 0 was
    stopped while it built the run), so the input error leaves no folder, as in one process. A run that
    recorded the bad input itself (`failed`, data read) keeps its folder, as in one process."""
    try:
        record = results.read_results(run_dir)
    except EffbenchError:  # no folder, or nothing effbench wrote in it
        return
    if record["status"] in ("running", "interrupted") and not record.get("epochs"):
        shutil.rmtree(run_dir, ignore_errors=True)


def _fresh_path(output: Path, name: str) -> Path:
    for i in range(1000):
        candidate = output / (name if i == 0 else f"{name}-{i}")
        if not candidate.exists():
            return candidate
    raise EffbenchError("--output", f"too many run folders named {name} in {output}; clean it up")


def _plan_dict(plan: LaunchPlan) -> dict[str, Any]:
    return {
        "mode": plan.mode,
        "device_type": plan.device_type,
        "nproc_per_node": plan.nproc_per_node,
        "nnodes": plan.nnodes,
        "threads_per_proc": plan.threads_per_proc,
        "argv": plan.argv,
        "env": plan.env,
    }


def _plan_from_dict(d: dict[str, Any]) -> LaunchPlan:
    return LaunchPlan(
        d["mode"],
        d["device_type"],
        d["nproc_per_node"],
        d["nnodes"],
        d["threads_per_proc"],
        d.get("argv"),
        d.get("env", {}),
    )


def worker_main(spec_path: Path) -> int:
    """`effbench worker --spec F`: what each torchrun rank runs. Returns the process exit code."""
    from effbench.launch.distributed import process_group
    from effbench.launch.supervise import die_with_parent

    die_with_parent(signal.SIGTERM)  # torchrun gone (SIGKILL): stop as if interrupted, never orphaned
    spec = json.loads(Path(spec_path).read_text())
    cfg = RunConfig.from_dict(spec["config"])
    plan = _plan_from_dict(spec["plan"])
    rank = int(os.environ.get("RANK", "0"))
    spec_dir = Path(spec_path).parent
    try:
        with process_group(plan.device_type, cfg.pg_timeout_s) as dist:
            try:
                outcome = run_benchmark(
                    cfg, plan=plan, dist=dist, run_dir=Path(spec["run_dir"]), command=spec["command"],
                    echo=print if rank == 0 and spec.get("echo", True) else _silent,
                    progress=spec.get("progress", True) and rank == 0,
                )  # fmt: skip
            except BaseException as e:  # out of memory while the run was built (model to device, DDP's broadcast)
                _leave_oom_marker(spec_dir, rank, rec.outcome_of(e, received=[], phase="setup"))
                raise
            # before this rank exits: torchrun then stops the others, and names whichever rank exited first
            _leave_oom_marker(spec_dir, rank, results.record_of(outcome.results))
            _leave_diverged_marker(spec_dir, rank, results.record_of(outcome.results))
            if outcome.results.get("status") == "diverged":
                # The ranks agreed on it in a collective (train.py), so all are alive: wait for rank 0's record,
                # as torchrun stops the whole group at the first non-zero exit.
                dist.barrier()
    except EffbenchError as e:
        (Path(spec_path).parent / f"error-rank{rank}.txt").write_text(f"{e.option or ''}\t{e.message}")
        print(f"error: rank {rank}: {e}", file=sys.stderr)
        return 2
    return outcome.exit_code


def _leave_diverged_marker(spec_dir: Path, rank: int, outcome: rec.Outcome | schema.Results) -> None:
    """diverged-rank{N}.json beside the spec when this rank's run ended `diverged`: a node without rank 0
    has no results.json, and torchrun's exit code 1 says only that something failed."""
    marker = rec.diverged_marker(rank, outcome)
    if marker is not None:
        results.write_json(spec_dir / rec.diverged_marker_name(rank), marker)


def _leave_oom_marker(spec_dir: Path, rank: int, outcome: rec.Outcome | schema.Results) -> None:
    """oom-rank{N}.json beside the spec when this rank's run ended `oom`, for _run_in_child to read."""
    marker = rec.oom_marker(rank, outcome)
    if marker is not None:
        results.write_json(spec_dir / rec.oom_marker_name(rank), marker)


# --------------------------------------------------------------------------------------------------
# The body every rank runs
# --------------------------------------------------------------------------------------------------
def run_benchmark(
    cfg: RunConfig,
    *,
    plan: LaunchPlan,
    dist: DistContext | None = None,
    run_dir: Path | None = None,
    command: list[str] | None = None,
    echo: Echo = print,
    progress: bool = True,
) -> RunOutcome:
    """Validate, build, train and (rank 0) write one run folder.

    A signal in any phase ends the run `interrupted`, with the phase in results.json (`interrupted_phase`):
    the run folder is made once the inputs that need no data are checked (output, device, precision, batch
    split), so a signal in setup, dataset (and its download) or model finds it; the reports are written
    once the run has measured something. Only a signal during those first checks, or the launcher's
    preflight, reaches the caller as `Interrupted` with no folder (nothing to record)."""
    received: list[int] = []
    phase = Phase(received)
    with interrupt_on_signals(received, phase):
        return _run_benchmark(
            cfg, plan=plan, dist=dist, run_dir=run_dir, command=command, echo=echo, progress=progress,
            phase=phase, received=received,
        )  # fmt: skip


@dataclass
class Prepared:
    """What a run trains with, built before its folder exists (every user error is raised here)."""

    cfg: RunConfig  # resolved for the device, warm-up shrunk to the steps known
    rt: Runtime
    backend: dict[str, Any]
    batch: int  # per device
    data: DataBundle
    n_steps: int  # per epoch
    bundle: ModelBundle | None  # None under --data-only
    model: Any  # the model as trained (DDP / DataParallel / compiled wrapper); None under --data-only
    optimizer: Any
    scheduler: Any
    flops: StepFlops | None
    flops_error: str | None
    scaler: Any = None  # the run's GradScaler (train.grad_scaler): the timed loop's, then the profiling pass's


@dataclass
class Measurement:
    """The timed run as it went: rank 0's rows, the tallies, the gathered rank data, and how it ended."""

    sampler: UtilizationSampler
    gpus: list[int]  # every GPU this process drives (all of them under DataParallel)
    t0: float
    epochs: list[schema.Epoch] = dataclasses.field(default_factory=list)
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # rank 0's
    warmup: Tally = dataclasses.field(default_factory=Tally)  # every warm-up step that ran, as it ended
    measured: Tally = dataclasses.field(default_factory=Tally)  # the finished epochs' measured steps
    rank_steps: list[dict[str, float]] = dataclasses.field(default_factory=list)  # this rank's measured steps
    epoch_ranks: list[schema.Rank] | None = None  # the rank rows gathered with the last epoch
    gathered: list[dict[str, Any]] | None = None  # the final gather, when the run got that far
    profile_info: ProfileInfo | None = None
    profile_error: str | None = None
    failure: BaseException | None = None
    outcome: rec.Outcome = rec.OK  # rec.outcome_of(failure)
    window: observe.MeasuredWindow | None = None  # opened / closed by the trainer's phases


@contextlib.contextmanager
def _first_no_space(failure: BaseException | None) -> Iterator[None]:
    """The disk filled while the epochs were written, and the final files could not be written either: the
    one line names the first file that did not fit, as results.json does."""
    try:
        yield
    except results.NoSpaceError:
        if isinstance(failure, results.NoSpaceError):
            raise failure from None
        raise


def _run_benchmark(
    cfg: RunConfig,
    *,
    plan: LaunchPlan,
    dist: DistContext | None,
    run_dir: Path | None,
    command: list[str] | None,
    echo: Echo,
    progress: bool,
    phase: Phase,
    received: list[int],
) -> RunOutcome:
    """check -> (run folder) -> prepare -> measure -> finish -> write."""
    import torch

    from effbench.config import resolve_for_device
    from effbench.run.runtime import resolve_runtime

    dist = dist or DistContext()
    # --- the inputs that need no data, before a folder exists -----------------------------------------
    results.check_output_writable(cfg.output)
    torch.set_num_threads(plan.threads_per_proc)  # explicit, and recorded in the run folder
    rt = resolve_runtime(cfg, local_rank=dist.local_rank, device_type=plan.device_type)  # the plan's device, pinned
    cfg = resolve_for_device(cfg, rt.device.type)  # channels_last, pinning, optimizer kernels: explicit in config.json
    batch = per_device_batch(cfg, plan.devices)
    # A signal while the folder is made is recorded, then raised once it is whole.
    with deferred(received):
        start = _start_run_folder(cfg, plan, dist, rt, batch, run_dir, command)  # a full disk: no folder, one line
    try:
        if received:
            raise Interrupted(received[0], phase.name)
        phase.enter("setup")
        prep = _prepare(cfg, plan, dist, rt, batch, lambda name: _enter(phase, name, start, received))
    except Interrupted as e:  # nothing measured yet: results.json says so and names the phase
        return _interrupted_before_measuring(start, e.signum, e.phase or phase.name, received)
    except BaseException:  # a bad input (one line, exit 2) or a crash before anything ran leaves no folder
        _discard(start)
        raise
    run_dir = start.run_dir
    # The full record replaces the first one: a signal is recorded while it and the first files are
    # written (so they are whole), then raised at the start of the measurement.
    try:
        with deferred(received):
            opened = _open_run_folder(prep, plan, dist, start, echo)
    except results.NoSpaceError:  # nothing measured yet: no folder, as for a bad input
        _discard(start)
        raise
    m = _measure(prep, plan, dist, opened, run_dir, progress=progress, phase=phase, received=received)
    if isinstance(m.failure, EffbenchError) and not isinstance(m.failure, results.NoSpaceError) and not m.epochs:
        _discard(start)  # bad input seen once the data is read (no image readable), nothing measured: no folder
        raise m.failure
    # The files that say how the run ended are written whole: a signal now is recorded, and once
    # they are written, an `ok` run becomes `interrupted` in phase `report` and they are rewritten.
    writer = dist.is_main
    with deferred(received), _first_no_space(m.failure):
        signals_before = len(received)
        phase.enter("report")
        final = rec.finish(opened, _measured(prep, dist, m), _conditions(prep, plan, run_dir))
        if writer:
            _write_final(run_dir, final, m.epochs, m.steps, m.sampler)
        if len(received) > signals_before and final.status == "ok":  # a failure keeps its own status
            final = rec.ended(final, rec.interrupted(received[signals_before], "report"))
            if writer:
                _write_final(run_dir, final, m.epochs, m.steps, m.sampler)
        if writer:
            echo(report.render(_on_disk(final), "text"))
    if isinstance(m.failure, EffbenchError):  # bad input seen after an epoch was measured: recorded, then exit 2
        raise m.failure
    return RunOutcome(run_dir=run_dir, results=_on_disk(final))


def _prepare(
    cfg: RunConfig,
    plan: LaunchPlan,
    dist: DistContext,
    rt: Runtime,
    batch: int,
    enter: Callable[[str], None],
) -> Prepared:
    """Backend flags, data, model, optimizer, FLOPs. A bad input here (dataset, weights, warm-up) is an
    EffbenchError; the caller removes the run folder. `enter(phase)`: the phase changes (recorded)."""
    from effbench.data.build import build_data
    from effbench.models import build_model
    from effbench.config import resolve_warmup
    from effbench.run.runtime import apply_backend_flags
    from effbench.run.train import steps_per_epoch

    backend = apply_backend_flags(cfg, rt.device)
    seed_everything(cfg.seed)
    enter("dataset")  # opening, or with --download fetching, the dataset
    data = build_data(
        cfg, rt.device, rank=dist.rank, world_size=dist.world_size,
        batch_size=batch * plan.nproc_per_node if plan.mode == "dp" else batch,
    )  # fmt: skip
    enter("model")
    bundle = None if cfg.data_only else build_model(cfg, data.num_classes)
    n_steps = steps_per_epoch(cfg, data.steps_per_epoch)
    # the default warm-up shrinks to the steps now known; config.json records the value used
    cfg = dataclasses.replace(cfg, warmup_steps=resolve_warmup(cfg.warmup_steps, cfg.epochs * n_steps, cfg.compile))
    assert cfg.warmup_steps is not None
    if cfg.warmup_steps >= cfg.epochs * n_steps:
        raise EffbenchError(
            "--warmup-steps",
            f"{cfg.warmup_steps} warm-up steps leave no measured step in {cfg.epochs} epoch(s) of {n_steps} steps; "
            "lower --warmup-steps or raise --max-steps / --epochs",
        )
    prep = Prepared(cfg, rt, backend, batch, data, n_steps, bundle, None, None, None, None, None)
    return _with_model(prep, plan, dist) if bundle is not None else prep  # --data-only builds no model


def _with_model(prep: Prepared, plan: LaunchPlan, dist: DistContext) -> Prepared:
    """The model on its device and wrapped for the launch, its FLOPs counted, its optimizer and schedule."""
    import torch

    from effbench.models import trainable_parameters
    from effbench.run.optim import build_optimizer, build_scheduler
    from effbench.run.train import grad_scaler

    cfg, rt = prep.cfg, prep.rt
    assert prep.bundle is not None
    model = prep.bundle.model.to(rt.device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    flops, flops_error = None, None
    try:  # on the bare model: a DDP wrapper would add an all-reduce to the counted step
        flops = observe.count_flops(model, rt, prep.data.image_size, prep.data.num_classes)
    except Exception as e:  # noqa: BLE001 - an op FlopCounterMode cannot count must not stop the run
        flops_error = f"{type(e).__name__}: {e}".splitlines()[0]
    if plan.mode == "dp":
        from effbench.run.data_parallel import data_parallel

        model = data_parallel(model, rt, device_ids=list(range(plan.nproc_per_node)))
    elif dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[dist.local_rank] if rt.device.type == "cuda" else None)
        # DDP's constructor gave every rank rank 0's weights (torch/nn/parallel/distributed.py:1062-1073). From
        # here each rank draws its own dropout / drop-connect masks: with the one seed of seed_everything, all
        # ranks dropped the same units of their own images. torch.manual_seed seeds the CPU and every CUDA
        # generator (torch/random.py:62-67); the loaders keep their own generators (data/), so data order and
        # augmentation stay as they were.
        torch.manual_seed(rank_seed(cfg.seed, dist.rank))
    if cfg.compile:  # lazy: compiles in the first (warm-up) step, timed apart as compile_time_s
        # From a cold compiler, as in a fresh process: a sweep runs its cells in one process, and Dynamo's
        # per-code state (automatic-dynamic shapes, compiled code) made a later cell trace a dynamic-batch
        # graph or reuse an earlier cell's code. torch.compiler.reset() -> torch._dynamo.reset()
        # (torch/compiler/__init__.py:81-91, torch/_dynamo/__init__.py:138-171); Inductor's disk cache stays.
        torch.compiler.reset()
        model = torch.compile(model)
    optimizer = build_optimizer(cfg, trainable_parameters(model))
    scheduler = build_scheduler(optimizer, cfg.epochs * prep.n_steps)
    return dataclasses.replace(
        prep, model=model, optimizer=optimizer, scheduler=scheduler, flops=flops, flops_error=flops_error,
        scaler=grad_scaler(rt),
    )  # fmt: skip


def _measure(
    prep: Prepared,
    plan: LaunchPlan,
    dist: DistContext,
    opened: dict[str, Any],
    run_dir: Path | None,
    *,
    progress: bool,
    phase: Phase,
    received: list[int],
) -> Measurement:
    """The timed epochs (or data-only passes), the profiling pass, the final gather; a failure is kept
    in `failure` (classified by rec.outcome_of), never raised."""
    gpus = observe.job_cuda_indices(prep.rt.device.type, plan.mode, plan.nproc_per_node, dist.local_rank)
    m = Measurement(sampler=observe.sampler_for(gpus, prep.cfg.sample_interval_s), gpus=gpus, t0=0.0)
    m.window = observe.MeasuredWindow(m.sampler, gpus)  # peak memory and the sampler's window: measured steps only
    m.t0 = time.perf_counter()
    try:
        if received:  # a signal arrived while the run folder was made
            raise Interrupted(received[0], phase.name)
        _epochs(prep, plan, dist, opened, run_dir, m, progress=progress, phase=phase)
        if prep.cfg.profile and not prep.cfg.data_only:  # after the timed run: the profiler never touches it
            phase.enter("profiling")
            m.profile_info, m.profile_error = _profile_pass(prep, dist, run_dir)
        m.gathered = dist.gather(
            {
                "row": _rank_row(dist, prep.rt, m.measured),
                "util": m.sampler.summary(),
                "mem": m.window.peak_memory(),
                "steps": m.rank_steps,  # every rank's measured steps, for windows of the same definition
            }
        )
    except (Exception, Interrupted, KeyboardInterrupt) as e:  # noqa: BLE001 - recorded, then reported by the CLI
        m.failure = e
        m.outcome = rec.outcome_of(e, received=received, phase=phase.name)  # the phase it failed in
    return m


def _epochs(
    prep: Prepared,
    plan: LaunchPlan,
    dist: DistContext,
    opened: dict[str, Any],
    run_dir: Path | None,
    m: Measurement,
    *,
    progress: bool,
    phase: Phase,
) -> None:
    """Train (or only load) epoch by epoch; rank 0 rewrites results.json after each one."""
    from effbench.run.progress import Progress
    from effbench.analysis.time_to_accuracy import reached
    from effbench.run.train import data_epochs, train_epochs

    cfg, data, rt = prep.cfg, prep.data, prep.rt
    writer = dist.is_main
    with (
        Progress(cfg.epochs, enabled=progress and writer, ranks=dist.world_size) as prog,
        m.sampler,
    ):
        faults.inject_oom(prep.batch)  # test hook EFFBENCH_FAULT_OOM_AT_BATCH (faults.py); off unless set

        def on_phase(name: str) -> None:
            phase.enter(name)
            if m.window is not None:  # outside the step timers: run/train.py calls it between steps
                m.window.on_phase(name)

        def on_step(warmup: bool, t: StepTime, images: int) -> None:
            # every warm-up step as it ends: one cut short by a signal in warm-up still reports the ones that ran
            if warmup:
                m.warmup.add(t, images)
            prog.step(warmup, t.total_s, images)  # the progress lines' img/s: measured steps, as the headline

        epochs_iter = (
            data_epochs(data, rt, cfg, on_progress=prog.update, on_phase=on_phase, on_step=on_step)
            if cfg.data_only
            else train_epochs(
                prep.model, data, prep.optimizer, prep.scheduler, rt, cfg, on_progress=prog.update,
                on_phase=on_phase, on_step=on_step, scaler=prep.scaler,
            )
        )  # fmt: skip
        for er in epochs_iter:
            m.measured = rec.added(m.measured, er.measured)  # finished epochs: the rows of steps.csv
            # one small collective per epoch: the epoch rows and every rank's measured totals so far, so
            # the in-progress headline is the same all-ranks figure as the final one (analysis/throughput)
            gathered = dist.gather({"epoch": er.record(), "row": _rank_row(dist, rt, m.measured)})
            merged = rec.merge_epoch([g["epoch"] for g in gathered])
            m.epoch_ranks = rec.rank_rows([g["row"] for g in gathered])
            m.epochs.append(merged)
            m.steps.extend(er.step_rows)  # rank 0's steps
            m.rank_steps.extend(windows.measured_steps(er.step_rows))
            if writer:
                now = rec.with_headline(opened, m.epoch_ranks, m.epochs, m.warmup, m.measured, data.stats())
                _write_progress(run_dir, now, m.epochs, m.steps)
            _wait_for_rank0s_write(dist, rt)
            prog.log(
                f"epoch {merged.epoch}/{cfg.epochs}: loss {_maybe(merged.train_loss)} top-1 {_maybe(merged.train_top1)} "
                f"val top-1 {_maybe(merged.val_top1)} data {merged.data_time_s or 0.0:.2f}s compute {merged.compute_time_s or 0.0:.2f}s"
            )
            # --stop-at-target: decided on the merged row, which every rank computed from the same all_gather
            # (the top-1 over all ranks' validation images), so every rank leaves after the same epoch
            if cfg.stop_at_target and cfg.target_top1 is not None and reached(merged, cfg.target_top1):
                prog.log(f"val top-1 {merged.val_top1 or 0.0:.4f} >= --target-top1 {cfg.target_top1:g}: stopping")
                epochs_iter.close()
                break
        if m.window is not None:  # the last span ends with the epochs (data-only passes have no validation)
            m.window.close()


def _wait_for_rank0s_write(dist: DistContext, rt: Runtime) -> None:
    """Every rank waits here, between epochs and outside every timer, until rank 0 has written the epoch's
    files. Without it the other ranks went on into the next epoch's first timed step and waited for rank 0
    in its all-reduce: rank 0's writes (three fsynced files, steps.csv growing each epoch) counted as their
    step time, lowered the job's throughput and named them stragglers. NCCL's barrier is an all-reduce on a
    device: device_ids names this rank's (torch/distributed/distributed_c10d.py:6342-6364)."""
    if dist.enabled:
        import torch.distributed

        torch.distributed.barrier(device_ids=[dist.local_rank] if rt.device.type == "cuda" else None)


def _measured(prep: Prepared, dist: DistContext, m: Measurement) -> rec.Measured:
    """The measurement as plain values for rec.finish; after a failure, without asking the peers
    (no collective after a failure: a dead peer would hang it)."""
    if m.gathered is not None and m.failure is None:
        ranks = rec.rank_rows([g["row"] for g in m.gathered])
        utilization = [g["util"] for g in m.gathered]
        memory = [mem for g in m.gathered for mem in g["mem"]]
        steps_by_rank = [g["steps"] for g in sorted(m.gathered, key=lambda g: g["row"].rank)]
    else:  # windows only when this rank is the whole job (its steps alone are not the job's)
        ranks = rec.ranks_after_failure(m.epoch_ranks, _rank_row(dist, prep.rt, m.measured), dist.world_size)
        utilization, memory = [m.sampler.summary()], m.window.peak_memory() if m.window else []
        steps_by_rank = [m.rank_steps] if dist.world_size == 1 else []
    return rec.Measured(
        outcome=m.outcome,
        epochs=m.epochs,
        warmup=m.warmup,
        measured=m.measured,
        ranks=ranks,
        steps_by_rank=steps_by_rank,
        utilization=utilization,
        memory=memory,
        data_stats=prep.data.stats(),
        profile_info=m.profile_info,
        profile_error=m.profile_error,
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        wall_time_s=time.perf_counter() - m.t0,
    )


def _conditions(prep: Prepared, plan: LaunchPlan, run_dir: Path | None) -> rec.Conditions:
    import torch

    return rec.Conditions(
        repeats=prep.cfg.repeats,
        compile=prep.cfg.compile,
        data_only=prep.cfg.data_only,
        flops_per_image=prep.flops.per_image if prep.flops else None,
        flops_forward_per_image=prep.flops.forward_per_image if prep.flops else None,
        flops_error=prep.flops_error,
        workers_per_process=int(prep.data.info["workers"]),
        processes_per_node=plan.nproc_per_node if plan.mode != "dp" else 1,
        tf32_enabled=bool(torch.backends.cudnn.allow_tf32),
        cpu_quota_cores=_cpu_limit(),
        run_dir=run_dir,
        flops_matmul_per_image=prep.flops.matmul_per_image if prep.flops else None,
        tf32_matmul_enabled=bool(torch.backends.cuda.matmul.allow_tf32),
    )


def _write_final(
    run_dir: Path | None,
    record: schema.Results,
    epochs: list[schema.Epoch],
    steps: list[dict[str, Any]],
    sampler: Any,
) -> None:
    assert run_dir is not None
    try:
        sampler.write_csv(run_dir / UTILIZATION_FILE)
        on_disk = _on_disk(record)
        results.atomic_write_text(run_dir / results.REPORT_TXT, report.render(on_disk, "text"))
        results.atomic_write_text(run_dir / results.REPORT_MD, report.render(on_disk, "md"))
        render.write_run_html_safely(run_dir, on_disk, steps)  # plots + report.html; a warning if not, on stderr
        # results.json last: never `ok` with a report missing
        _write_progress(run_dir, record, epochs, steps)
    except results.NoSpaceError as e:  # never `running` forever: `failed`, the reason and the epochs measured
        _record_no_space(run_dir, record, e)
        raise


# Keys of the final record left out of the last-resort copy on a full disk, so it fits where the last epoch's
# record lay (observe.summarize's extras; the epochs and the headline stay)
_BULKY = ("utilization", "throughput_windows", "profile", "memory", "observations")


def _record_no_space(run_dir: Path, record: schema.Results, e: results.NoSpaceError) -> None:
    """results.json says `failed` with the full-disk error (which file), keeping the epochs: written whole when
    the disk still takes it, else compact over the last epoch's record (results.overwrite_json_in_place)."""
    first = record.error if record.status == "failed" else None  # the run's own, when that was it
    if not (first and "no space left" in str(first.message)):
        first = schema.Error(type="NoSpaceError", message=str(e))
    failed = rec.failed(record, first)
    try:
        results.write_json(run_dir / results.RESULTS_FILE, failed)
    except results.NoSpaceError:
        # on failure too the one-line error still says it, and the last epoch's record stays
        with contextlib.suppress(OSError):
            results.overwrite_json_in_place(
                run_dir / results.RESULTS_FILE, failed.model_dump(exclude_unset=True, exclude=set(_BULKY))
            )


@dataclass
class Started:
    """The run folder as made at the start of setup: where (rank 0 only), when, and its first record."""

    run_dir: Path | None  # on the other ranks: the launcher's name for it, or None
    writer: bool
    started: dt.datetime  # UTC; the folder's name and `started_at`
    record: dict[str, Any]  # the `running` record it holds, `phase` kept current until training starts


def _launch_facts(plan: LaunchPlan, dist: DistContext, rt: Runtime, batch: int) -> dict[str, Any]:
    """The record's device and launch keys, known before anything is built."""
    import torch

    return {
        "device": rt.device_name if plan.mode != "dp" else f"{plan.nproc_per_node} x {rt.device_name} (DataParallel)",
        "world_size": dist.world_size,
        "devices": plan.devices,
        "strategy": "single" if plan.devices == 1 else plan.mode if plan.mode == "dp" else "ddp",
        "launch": {**_plan_dict(plan), "threads_per_proc": torch.get_num_threads(), "pid": os.getpid()},
        "precision": rt.precision,
        "batch_size_per_device": batch,
        "global_batch_size": batch * plan.devices,
    }


def _start_run_folder(
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
    record: dict[str, Any] = {
        "schema_version": results.SCHEMA_VERSION,
        "status": "running",
        "phase": "setup",
        "run_name": run_dir.name if run_dir else None,
        "command": list(command if command is not None else sys.argv),
        "started_at": started.isoformat(),
        "config": cfg.to_dict(),  # as given; config.json holds the resolved values once the data is open
        **_launch_facts(plan, dist, rt, batch),
        "data_only": cfg.data_only,
        "epochs": [],
    }
    if writer:
        assert run_dir is not None
        try:
            results.write_json(run_dir / results.RESULTS_FILE, record)
        except results.NoSpaceError:  # the folder holds nothing: it goes, the one line says why
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
    return Started(run_dir, writer, started, record)


def _enter(phase: Phase, name: str, start: Started, received: list[int]) -> None:
    """Enter a phase before training, and say so in results.json (written whole: signals wait)."""
    with deferred(received):
        start.record["phase"] = name
        if start.writer:
            assert start.run_dir is not None
            results.write_json(start.run_dir / results.RESULTS_FILE, start.record)
    if received:
        raise Interrupted(received[0], phase.name)
    phase.enter(name)


def _interrupted_before_measuring(start: Started, signum: int, phase: str, received: list[int]) -> RunOutcome:
    """A signal in setup, dataset or model: results.json `interrupted`, the phase named; no report (nothing
    was measured to report on)."""
    with deferred(received):
        record = rec.ended(
            {k: v for k, v in start.record.items() if k != "phase"},
            rec.interrupted(signum, phase),
            finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        )
        if start.writer:
            assert start.run_dir is not None
            results.write_json(start.run_dir / results.RESULTS_FILE, record)
    return RunOutcome(run_dir=start.run_dir, results=_on_disk(record))


def _discard(start: Started) -> None:
    """Remove the folder made at the start of setup: a bad input never leaves a folder that looks like a run."""
    if start.writer and start.run_dir is not None:
        shutil.rmtree(start.run_dir, ignore_errors=True)


def _open_run_folder(prep: Prepared, plan: LaunchPlan, dist: DistContext, start: Started, echo: Echo) -> dict[str, Any]:
    """Rank 0 writes config.json, env.json and the full `running` results.json into the run folder."""
    from effbench.system.hardware import env_snapshot

    cfg, rt, data, bundle = prep.cfg, prep.rt, prep.data, prep.bundle
    record: dict[str, Any] = {
        "schema_version": results.SCHEMA_VERSION,
        "status": "running",
        "run_name": start.record["run_name"],
        "command": start.record["command"],
        "started_at": start.record["started_at"],
        "config": _config_json(cfg, rt, data.info, prep.n_steps, warn=start.writer, command=start.record["command"]),
        "env": env_snapshot(),
        **_launch_facts(plan, dist, rt, prep.batch),
        "model": {
            "arch": bundle.arch,
            "total_params": bundle.total_params,
            "trainable_params": bundle.trainable_params,
            **bundle.info,
        }
        if bundle is not None
        else {"arch": None, "note": "--data-only: no model"},
        "data_only": cfg.data_only,
        "backend": prep.backend,
        "data": {
            "name": data.name,
            "num_classes": data.num_classes,
            "image_size": data.image_size,
            "train_size": data.train_size,
            "val_size": data.val_size,
            "steps_per_epoch": prep.n_steps,
            "batches_on_device": data.batches_on_device,
            **data.info,
        },
        "throughput_img_s": None,
        "compile_time_s": None,
        "epochs": [],
    }
    if start.writer:
        assert start.run_dir is not None
        results.write_json(start.run_dir / results.CONFIG_FILE, record["config"])
        results.write_json(start.run_dir / results.ENV_FILE, record["env"])
        results.write_json(start.run_dir / results.RESULTS_FILE, record)
        echo(f"run folder: {start.run_dir}")
    return record


UTILIZATION_FILE = "utilization.csv"


def _config_json(
    cfg: RunConfig, rt: Any, data_info: dict[str, Any], n_steps: int, *, warn: bool, command: list[str] | None = None
) -> dict[str, Any]:
    """config.json's resolved values (every option with no effect under `no_effect`); one the user typed in
    `command` is also warned about on stderr (a default, such as --workers 2 on synthetic data, is not theirs
    to fix)."""
    from effbench.config import resolved_record, typed_option

    measured_steps = cfg.epochs * n_steps - cfg.warmup_steps  # > 0: checked above (--warmup-steps)
    repeats = cfg.repeats if cfg.repeats is not None else min(windows.DEFAULT_WINDOWS, measured_steps)
    out = resolved_record(cfg, device_type=rt.device.type, precision=rt.precision, repeats=repeats, data_info=data_info)
    for option, why in (out.get("no_effect") or {}).items() if warn else ():
        if command is None or typed_option(command, option):
            print(f"warning: --{option.replace('_', '-')} had no effect on this run: {why}", file=sys.stderr)
    return out


def _cpu_limit() -> float | None:
    """Cores this job may use: the tighter of the cgroup quota and the CPU affinity."""
    from effbench.system.hardware import cpu_quota_cores, usable_cores

    quota = cpu_quota_cores()
    return min(quota, float(usable_cores())) if quota is not None else float(usable_cores())


def _profile_pass(prep: Prepared, dist: DistContext, run_dir: Path | None) -> tuple[ProfileInfo | None, str | None]:
    """A few more steps under torch.profiler: (its info, None), or (None, the error): never fatal."""
    from effbench.run.train import TrainStep

    out_dir = run_dir if run_dir is not None and run_dir.exists() else None  # other ranks: shared folder only
    try:
        # the timed loop's scaler, at the scale it reached: a fresh one would start at 2**16 (train.grad_scaler)
        step = TrainStep(
            prep.model, prep.optimizer, prep.scheduler, prep.rt, prep.cfg.channels_last, scaler=prep.scaler
        )
        info = observe.profile(
            step, prep.data.train, device_type=prep.rt.device.type, out_dir=out_dir, rank=dist.rank,
            active=prep.cfg.profile_steps,
        )  # fmt: skip
        return info, None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}".splitlines()[0]


def _rank_row(dist: DistContext, rt: Runtime, measured: Tally) -> schema.Rank:
    import socket

    return rec.rank_row(
        rank=dist.rank, local_rank=dist.local_rank, host=socket.gethostname(), device=str(rt.device), measured=measured
    )


def _maybe(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _write_progress(
    run_dir: Path | None, record: schema.Results, epochs: list[schema.Epoch], steps: list[dict[str, Any]]
) -> None:
    assert run_dir is not None
    results.write_csv(run_dir / results.EPOCHS_FILE, results.EPOCH_FIELDS, [e.model_dump() for e in epochs])
    results.write_csv(run_dir / results.STEPS_FILE, results.STEP_FIELDS, steps)
    results.write_json(run_dir / results.RESULTS_FILE, record)

"""The body every rank runs: check -> (run folder) -> prepare -> measure -> finish. Rank 0 alone writes
the run folder (run/folder.py); every rank builds, trains and joins the collectives.

    run_benchmark(cfg, plan=...)   one rank's run, signals recorded as `interrupted` in the phase they came in
    per_device_batch(cfg, n)       the batch each device trains on (weak or strong scaling)

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

import dataclasses
import datetime as dt
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench.results import StepRow
from effbench import results, schema
from effbench.analysis import windows
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.launch.distributed import DistContext
from effbench.launch.plan import LaunchPlan
from effbench.measure import observe
from effbench.run import faults, folder
from effbench.run import record as rec
from effbench.run.folder import Echo, Reports
from effbench.run.phases import Interrupted, Phase, deferred, interrupt_on_signals
from effbench.run.timing import StepTime, Tally

if TYPE_CHECKING:
    from effbench.data.build import DataBundle
    from effbench.measure.flops import StepFlops
    from effbench.measure.monitor import UtilizationSampler
    from effbench.measure.profiling import ProfileInfo
    from effbench.models import ModelBundle
    from effbench.run.runtime import Runtime


@dataclass
class RunOutcome:
    run_dir: Path | None
    results: schema.Results

    @property
    def exit_code(self) -> int:
        status = self.results.status
        if status == "ok":
            return 0
        if status == "interrupted":
            return 128 + int(self.results.signal if self.results.signal is not None else signal.SIGINT)
        return 1


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


def rank_batch(cfg: RunConfig, plan: LaunchPlan, dist: DistContext) -> int:
    """The batch this rank's device trains on, once the process group exists (worker_main joins it first):
    under strong scaling split over the job's ranks (plan.job_devices), not this node's count x the nodes."""
    return per_device_batch(cfg, plan.job_devices(dist.world_size))


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


def run_benchmark(
    cfg: RunConfig,
    *,
    plan: LaunchPlan,
    dist: DistContext | None = None,
    run_dir: Path | None = None,
    command: list[str] | None = None,
    echo: Echo = print,
    progress: bool = True,
    reports: Reports | None = None,
) -> RunOutcome:
    """Validate, build, train and (rank 0) write one run folder.

    A signal in any phase ends the run `interrupted`, with the phase in results.json (`interrupted_phase`):
    the run folder is made once the inputs that need no data are checked (output, device, precision, batch
    split), so a signal in setup, dataset (and its download) or model finds it; the reports are written
    once the run has measured something, by `reports` (the caller's; None: none). Only a signal during those first checks, or the launcher's
    preflight, reaches the caller as `Interrupted` with no folder (nothing to record)."""
    received: list[int] = []
    phase = Phase(received)
    with interrupt_on_signals(received, phase):
        return _run_benchmark(
            cfg, plan=plan, dist=dist, run_dir=run_dir, command=command, echo=echo, progress=progress,
            reports=reports, phase=phase, received=received,
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
    epochs: list[schema.Epoch] = dataclasses.field(default_factory=list)
    steps: list[StepRow] = dataclasses.field(default_factory=list)  # rank 0's
    warmup: Tally = dataclasses.field(default_factory=Tally)  # every warm-up step that ran, as it ended
    measured: Tally = dataclasses.field(default_factory=Tally)  # the finished epochs' measured steps
    rank_steps: list[StepRow] = dataclasses.field(default_factory=list)  # this rank's measured steps
    epoch_ranks: list[schema.Rank] | None = None  # the rank rows gathered with the last epoch
    gathered: list[dict[str, Any]] | None = None  # the final gather, when the run got that far
    profile_info: ProfileInfo | None = None
    profile_error: str | None = None
    roofs: schema.Roofs | None = None  # measured (or cached) before the profiling pass
    roofs_error: str | None = None
    failure: BaseException | None = None
    outcome: rec.Outcome = rec.OK  # rec.outcome_of(failure)
    window: observe.MeasuredWindow | None = None  # opened / closed by the trainer's phases
    rules: tuple[schema.WarmupRule | None, schema.Until | None] = (None, None)  # the last epoch's (run/steady.py)


def _run_benchmark(
    cfg: RunConfig,
    *,
    plan: LaunchPlan,
    dist: DistContext | None,
    run_dir: Path | None,
    command: list[str] | None,
    echo: Echo,
    progress: bool,
    reports: Reports | None,
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
    batch = rank_batch(cfg, plan, dist)
    # A signal while the folder is made is recorded, then raised once it is whole.
    with deferred(received):  # a full disk: no folder, one line
        start = folder.start_run_folder(cfg, plan, dist, rt, batch, run_dir, command)
    try:
        if received:
            raise Interrupted(received[0], phase.name)
        phase.enter("setup")
        prep = _prepare(cfg, plan, dist, rt, batch, lambda name: folder.enter_phase(phase, name, start, received))
    except Interrupted as e:  # nothing measured yet: results.json says so and names the phase
        return RunOutcome(
            start.run_dir, folder.interrupted_before_measuring(start, e.signum, e.phase or phase.name, received)
        )
    except BaseException:  # a bad input (one line, exit 2) or a crash before anything ran leaves no folder
        folder.discard(start)
        raise
    run_dir = start.run_dir
    # The full record replaces the first one: a signal is recorded while it and the first files are
    # written (so they are whole), then raised at the start of the measurement.
    try:
        with deferred(received):
            opened = folder.open_run_folder(prep, plan, dist, start, echo)
    except results.NoSpaceError:  # nothing measured yet: no folder, as for a bad input
        folder.discard(start)
        raise
    m = _measure(prep, plan, dist, opened, run_dir, progress=progress, phase=phase, received=received)
    if isinstance(m.failure, EffbenchError) and not isinstance(m.failure, results.NoSpaceError) and not m.epochs:
        folder.discard(start)  # bad input seen once the data is read (no image readable), nothing measured: no folder
        raise m.failure
    # The files that say how the run ended are written whole: a signal now is recorded, and once
    # they are written, an `ok` run becomes `interrupted` in phase `report` and they are rewritten.
    writer = dist.is_main
    with deferred(received), folder.first_no_space(m.failure):
        signals_before = len(received)
        phase.enter("report")
        final = rec.finish(opened, _measured(prep, dist, m, phase), _conditions(prep, plan, run_dir))
        if writer:
            folder.write_final(run_dir, final, m.epochs, m.steps, m.sampler, reports)
        if len(received) > signals_before and final.status == "ok":  # a failure keeps its own status
            final = rec.ended(final, rec.interrupted(received[signals_before], "report"))
            if writer:
                folder.write_final(run_dir, final, m.epochs, m.steps, m.sampler, reports)
        if writer and reports is not None:
            echo(reports.text(final))
    if isinstance(m.failure, EffbenchError):  # bad input seen after an epoch was measured: recorded, then exit 2
        raise m.failure
    return RunOutcome(run_dir=run_dir, results=final)


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
    # an explicit warm-up must leave a measured step in the steps now known (auto takes at most half of them)
    if cfg.warmup_steps is not None and cfg.warmup_steps >= cfg.epochs * n_steps:
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
    model: Any = prep.bundle.model.to(rt.device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    flops, flops_error = None, None
    try:  # on the bare model: a DDP wrapper would add an all-reduce to the counted step
        flops = observe.count_flops(model, rt, prep.data.image_size, prep.data.num_classes)
    except Exception as e:  # noqa: BLE001 - an op FlopCounterMode cannot count must not stop the run
        flops_error = f"{type(e).__name__}: {e}".splitlines()[0]
    if plan.mode == "dp":
        from effbench.run.data_parallel import data_parallel, seed_replica_generators

        model = data_parallel(model, rt, device_ids=list(range(plan.nproc_per_node)))
        # one seed per replica, as DDP's ranks below: they drew the same dropout masks
        seed_replica_generators({i: rank_seed(cfg.seed, i) for i in range(plan.nproc_per_node)})
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
    opened: schema.Results,
    run_dir: Path | None,
    *,
    progress: bool,
    phase: Phase,
    received: list[int],
) -> Measurement:
    """The timed epochs (or data-only passes), the profiling pass, the final gather; a failure is kept
    in `failure` (classified by rec.outcome_of), never raised."""
    gpus = observe.job_cuda_indices(prep.rt.device.type, plan.mode, plan.nproc_per_node, dist.local_rank)
    m = Measurement(sampler=observe.sampler_for(gpus, prep.cfg.sample_interval_s), gpus=gpus)
    m.window = observe.MeasuredWindow(m.sampler, gpus)  # peak memory and the sampler's window: measured steps only
    try:
        if received:  # a signal arrived while the run folder was made
            raise Interrupted(received[0], phase.name)
        _epochs(prep, plan, dist, opened, run_dir, m, progress=progress, phase=phase)
        if prep.cfg.profile and not prep.cfg.data_only:  # after the timed run: the profiler never touches it
            phase.enter("profiling")
            m.roofs, m.roofs_error = _roofs(prep)  # outside the timed steps, before the profiler starts
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
    opened: schema.Results,
    run_dir: Path | None,
    m: Measurement,
    *,
    progress: bool,
    phase: Phase,
) -> None:
    """Train (or only load) epoch by epoch; rank 0 rewrites results.json after each one."""
    from effbench.run.progress import Progress
    from effbench.analysis.time_to_accuracy import reached
    from effbench.run.train import EpochResult, data_epochs, train_epochs

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

        def on_step(warmup: bool, t: StepTime, images: int, skipped: bool | None) -> None:
            # every warm-up step as it ends: one cut short by a signal in warm-up still reports the ones that ran
            if warmup:
                m.warmup.add(t, images, skipped)
            prog.step(warmup, t.total_s, images)  # the progress lines' img/s: measured steps, as the headline

        def on_cut_short(er: EpochResult) -> None:
            # the epoch a signal stopped: its completed measured steps count, in steps.csv and the record
            m.measured = rec.added(m.measured, er.measured)
            m.steps.extend(er.step_rows)
            m.rank_steps.extend(windows.measured_steps(er.step_rows))
            m.rules = (er.warmup_rule, er.until)

        epochs_iter = (
            data_epochs(data, rt, cfg, on_progress=prog.update, on_phase=on_phase, on_step=on_step,
                        on_cut_short=on_cut_short)
            if cfg.data_only
            else train_epochs(
                prep.model, data, prep.optimizer, prep.scheduler, rt, cfg, on_progress=prog.update,
                on_phase=on_phase, on_step=on_step, scaler=prep.scaler, on_cut_short=on_cut_short,
            )
        )  # fmt: skip
        for er in epochs_iter:
            m.measured = rec.added(m.measured, er.measured)  # finished epochs: the rows of steps.csv
            m.rules = (er.warmup_rule, er.until)
            # one small collective per epoch: the epoch rows and every rank's measured totals so far, so
            # the in-progress headline is the same all-ranks figure as the final one (analysis/throughput)
            gathered = dist.gather({"epoch": er.record(), "row": _rank_row(dist, rt, m.measured)})
            merged = rec.merge_epoch([g["epoch"] for g in gathered])
            m.epoch_ranks = rec.rank_rows([g["row"] for g in gathered])
            m.epochs.append(merged)
            m.steps.extend(er.step_rows)  # rank 0's steps
            m.rank_steps.extend(windows.measured_steps(er.step_rows))
            if writer:
                now = rec.with_headline(opened, m.epoch_ranks, m.epochs, m.warmup, m.measured, data.stats(),
                                        rules=m.rules)  # fmt: skip
                folder.write_progress(run_dir, now, m.epochs, m.steps)
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


def _measured(prep: Prepared, dist: DistContext, m: Measurement, phase: Phase) -> rec.Measured:
    """The measurement as plain values for rec.finish; after a failure, without asking the peers
    (no collective after a failure: a dead peer would hang it). Called in the report phase: the wall time is
    every phase before it, from setup on (building the model and counting its FLOPs included)."""
    if m.gathered is not None and m.failure is None:
        ranks = rec.rank_rows([g["row"] for g in m.gathered])
        utilization = [g["util"] for g in m.gathered]
        memory = [mem for g in m.gathered for mem in g["mem"]]
        steps_by_rank = [g["steps"] for g in sorted(m.gathered, key=lambda g: g["row"].rank)]
    else:  # windows only when this rank is the whole job (its steps alone are not the job's)
        ranks = rec.ranks_after_failure(m.epoch_ranks, _rank_row(dist, prep.rt, m.measured), dist.world_size)
        utilization, memory = [m.sampler.summary()], m.window.peak_memory() if m.window else []
        steps_by_rank = [m.rank_steps] if dist.world_size == 1 else []
    by_phase = phase.seconds_before_current()
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
        roofs=m.roofs,
        roofs_error=m.roofs_error,
        rules=m.rules,
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        wall_time_s=sum(by_phase.values()),
        wall_time_by_phase_s=by_phase,
    )


def _conditions(prep: Prepared, plan: LaunchPlan, run_dir: Path | None) -> rec.Conditions:
    import torch

    from effbench.system.hardware import allowed_cores

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
        cpu_quota_cores=allowed_cores(),
        run_dir=run_dir,
        flops_matmul_per_image=prep.flops.matmul_per_image if prep.flops else None,
        tf32_matmul_enabled=bool(torch.backends.cuda.matmul.allow_tf32),
    )


def _roofs(prep: Prepared) -> tuple[schema.Roofs | None, str | None]:
    """This machine's roofs for the roofline (measure/roofs.py: cached per machine, else measured now on the run's
    device and threads): (the roofs, None), or (None, the error): never fatal."""
    import torch

    from effbench.measure import roofs

    device = prep.rt.device
    cuda = device.type == "cuda"
    try:
        precisions = roofs.run_precisions(
            prep.rt.precision,
            device_type=device.type,
            conv_tf32=bool(torch.backends.cudnn.allow_tf32),
            matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
            capability=torch.cuda.get_device_capability(device) if cuda else None,
        )
        sm_count = torch.cuda.get_device_properties(device).multi_processor_count if cuda else None
        return roofs.machine_roofs(device, precisions=precisions, sm_count=sm_count), None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}".splitlines()[0]


def _profile_pass(prep: Prepared, dist: DistContext, run_dir: Path | None) -> tuple[ProfileInfo | None, str | None]:
    """A few more steps under torch.profiler: (its info, None), or (None, the error): never fatal."""
    from effbench.measure.profiling import ProfilePassFailed
    from effbench.run.timing import device_clock
    from effbench.run.train import TrainStep

    out_dir = run_dir if run_dir is not None and run_dir.exists() else None  # other ranks: shared folder only
    try:
        # the timed loop's scaler, at the scale it reached: a fresh one would start at 2**16 (train.grad_scaler)
        step = TrainStep(
            prep.model,
            prep.optimizer,
            prep.scheduler,
            prep.rt,
            bool(prep.cfg.channels_last),
            scaler=prep.scaler,
            label_smoothing=prep.cfg.label_smoothing,
        )
        with dist.step_abort("profile") as abort:  # a rank failing inside a step (N7): launch/peer_abort.py
            info = observe.profile(
                step, prep.data.train, device_type=prep.rt.device.type, out_dir=out_dir, rank=dist.rank,
                active=prep.cfg.profile_steps, clock=device_clock(prep.rt.device, prep.rt.device_api),
                agree=dist.gather, abort=abort,
            )  # fmt: skip
        return info, None
    except ProfilePassFailed as e:  # every rank, at the same point: "rank 1: RuntimeError: ..."
        return None, str(e)
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}".splitlines()[0]


def _rank_row(dist: DistContext, rt: Runtime, measured: Tally) -> schema.Rank:
    import socket

    gpu = None
    if rt.device.type == "cuda":  # this rank's own device: a job may mix GPU models (observe.summarize's peak)
        import torch

        try:  # also read after a failure, when the device may be gone: then the rank names none
            p = torch.cuda.get_device_properties(rt.device)
            gpu = (str(p.name), f"{p.major}.{p.minor}", int(p.multi_processor_count))
        except Exception:  # noqa: BLE001
            gpu = None
    return rec.rank_row(
        rank=dist.rank, local_rank=dist.local_rank, host=socket.gethostname(), device=str(rt.device),
        measured=measured, gpu=gpu,
    )  # fmt: skip


def _maybe(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"

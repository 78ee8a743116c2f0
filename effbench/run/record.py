"""A run's record (results.json) from what it measured, as the typed model (effbench/schema.py): every
field set by keyword or attribute, so a misspelt one fails mypy, and results.write_json writes the fields
set (model_dump(exclude_unset=True): what was not set stays absent). Pure: no torch, no I/O, no clock.

    merge_epoch(rows)            one schema.Epoch from every rank's
    rank_row / rank_rows         each rank's measured totals (schema.Rank), in rank order; straggler_spread
    with_headline(opened, ...)   the record with the rank rows and the headline: in progress and at the end
    outcome_of(exc, ...)         which exception ends a run how (Outcome): ok/oom/diverged/failed/interrupted
    ended(record, outcome)       the record with how it ended; failed(record, error) for a full disk
    finish(opened, measured, c)  the final record from the record opened with the run folder
    oom_marker(rank, outcome)    what a rank that ran out of memory tells the launcher (oom-rank{N}.json)
    diverged_marker(rank, ...)   what a rank that stopped on a non-finite loss tells it (diverged-rank{N}.json)
    settle_with_torchrun(...)    rank 0's record corrected by how torchrun ended and the ranks' OOM markers
    record_without_results(...)  the record when this node has no results.json (rank 0 elsewhere, or none)

run/rank.py gathers the values (clock, devices, collectives); run/folder.py writes the files.
"""

from __future__ import annotations

import dataclasses
import signal
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from effbench import results, schema
from effbench.analysis import time_to_accuracy, windows
from effbench.analysis.throughput import Part, job_throughput, slowest
from effbench.errors import EffbenchError
from effbench.measure import observe
from effbench.run import faults
from effbench.run.phases import Interrupted
from effbench.run.timing import Tally
from effbench.run.train import Diverged, compile_time_s

if TYPE_CHECKING:
    from effbench.launch.supervise import SupervisedResult
    from effbench.measure.profiling import ProfileInfo

Row = dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Ranks and epochs
# --------------------------------------------------------------------------------------------------
def merge_epoch(per_rank: Sequence[schema.Epoch]) -> schema.Epoch:
    """One epoch row from every rank's: images summed, the slowest rank's times, weighted accuracies.

    img/s is the epoch's measured steps only (warm-up excluded, like the headline), by `job_throughput`
    over the ranks' measured images and time.
    """
    thr = job_throughput([Part(r.measured_images, r.measured_time_s) for r in per_rank])
    if len(per_rank) == 1:
        one = per_rank[0].model_copy()
        one.throughput_img_s = thr
        return one
    slowest_row = max(per_rank, key=lambda r: r.total_time_s or 0.0)
    # the measured split of the rank whose measured steps took longest, as the headline's data_time_share
    slowest_measured = max(per_rank, key=lambda r: r.measured_time_s or 0.0)

    def weighted(value: Any, weight: Any) -> float | None:  # getters: a rank's figure and its weight
        total = sum(weight(r) or 0 for r in per_rank)
        if not total or any(value(r) is None for r in per_rank):
            return None
        return float(sum(value(r) * (weight(r) or 0) for r in per_rank) / total)

    # skipped_steps stays the slowest rank's: every rank's inf check reads the same all-reduced gradients
    merged = slowest_row.model_copy()
    merged.images = sum(r.images or 0 for r in per_rank)
    merged.val_images = sum(r.val_images or 0 for r in per_rank)
    merged.train_loss = weighted(lambda r: r.train_loss, lambda r: r.images)
    merged.train_top1 = weighted(lambda r: r.train_top1, lambda r: r.images)
    merged.val_loss = weighted(lambda r: r.val_loss, lambda r: r.val_images)
    merged.val_top1 = weighted(lambda r: r.val_top1, lambda r: r.val_images)
    merged.val_time_s = max(r.val_time_s or 0.0 for r in per_rank)
    if any(r.val_warmup_time_s is not None for r in per_rank):  # an older writer's row has none
        merged.val_warmup_time_s = max(r.val_warmup_time_s or 0.0 for r in per_rank)
    merged.measured_images = sum(r.measured_images or 0 for r in per_rank)
    merged.measured_time_s = max(r.measured_time_s or 0.0 for r in per_rank)
    merged.measured_data_time_s = slowest_measured.measured_data_time_s
    merged.measured_compute_time_s = slowest_measured.measured_compute_time_s
    merged.throughput_img_s = thr
    return merged


def rank_row(
    *, rank: int, local_rank: int, host: str, device: str, measured: Tally, gpu: tuple[str, str, int] | None = None
) -> schema.Rank:
    """One rank's measured totals, as gathered after every epoch and at the end; `gpu`: its CUDA device's
    (name, capability, SMs)."""
    row = schema.Rank(
        rank=rank,
        local_rank=local_rank,
        host=host,
        device=device,
        images=measured.images,
        steps=measured.steps,
        data_time_s=measured.data_time_s,
        compute_time_s=measured.compute_time_s,
        time_s=measured.time_s,
        throughput_img_s=measured.throughput_img_s,
    )
    if gpu is not None:
        row.gpu_name, row.gpu_capability, row.gpu_sm_count = gpu
    return row


def rank_rows(rows: Sequence[schema.Rank]) -> list[schema.Rank]:
    return sorted(rows, key=lambda r: r.rank)


def straggler_spread(ranks: Sequence[schema.Rank]) -> schema.Stragglers | None:
    """How far the slowest rank lags the fastest over the measured steps."""
    timed = [(r.rank, r.time_s) for r in ranks if r.time_s]
    if len(timed) < 2:
        return None
    slow = max(timed, key=lambda r: r[1])
    fast = min(timed, key=lambda r: r[1])
    return schema.Stragglers(
        slowest_rank=slow[0],
        fastest_rank=fast[0],
        spread_s=slow[1] - fast[1],
        spread_pct=100.0 * (slow[1] - fast[1]) / fast[1],
    )


def added(total: Tally, part: Tally) -> Tally:
    """`total` and `part` summed, as a new Tally (step times concatenated in order)."""
    return Tally(
        steps=total.steps + part.steps,
        images=total.images + part.images,
        data_time_s=total.data_time_s + part.data_time_s,
        compute_time_s=total.compute_time_s + part.compute_time_s,
        step_times_s=[*total.step_times_s, *part.step_times_s],
        skipped_steps=None
        if total.skipped_steps is None and part.skipped_steps is None
        else (total.skipped_steps or 0) + (part.skipped_steps or 0),
    )


def ranks_after_failure(gathered: list[schema.Rank] | None, own_row: schema.Rank, world_size: int) -> list[schema.Rank]:
    """After a failure no collective runs (a dead peer would hang it): the rank rows of the last epoch
    stay (they were gathered then); with none, or alone, this rank's own row."""
    return gathered if gathered is not None and world_size > 1 else rank_rows([own_row])


def with_headline(
    opened: Mapping[str, Any] | schema.Results,
    ranks: list[schema.Rank],
    epochs: list[schema.Epoch],
    warmup: Tally,
    measured: Tally,
    data_stats: Mapping[str, Any],
    *,
    rules: tuple[schema.WarmupRule | None, schema.Until | None] = (None, None),
) -> schema.Results:
    """The record opened with the run folder, with the rank rows and the headline they give: the same way
    in progress (after every epoch) and at the end (analysis/throughput). `opened` is not changed. `rules`:
    how the warm-up's length was chosen and `--until`'s outcome (run/steady.py)."""
    record = results.record_of(opened).model_copy()
    record.warmup_rule, record.until = rules
    record.ranks = list(ranks)
    record.epochs = list(epochs)
    record.warmup = warmup.record()
    record.warmup.timing = record.config.timing
    total = measured.record()
    total.timing = record.config.timing
    if len(ranks) > 1:
        # the job's measured time is its slowest rank's; the images are every rank's
        slow = slowest(ranks) or ranks[0]
        total.images = sum(r.images or 0 for r in ranks)
        total.data_time_s = slow.data_time_s or 0.0
        total.compute_time_s = slow.compute_time_s or 0.0
        total.time_s = slow.time_s or 0.0
        record.stragglers = straggler_spread(ranks)
    total.throughput_img_s = job_throughput(ranks) if ranks else measured.throughput_img_s
    record.measured = total
    record.throughput_img_s = total.throughput_img_s
    record.data_time_share = total.data_time_s / total.time_s if total.time_s > 0 else None
    # data.stats() (skipped images and the like): keys of the data section, as the loader names them
    record.data = schema.Data.model_validate({**record.data.model_dump(exclude_unset=True), **data_stats})
    if epochs:
        last = epochs[-1]
        record.final = schema.Final(
            train_loss=last.train_loss, train_top1=last.train_top1, val_loss=last.val_loss, val_top1=last.val_top1
        )
    cfg = record.config
    if cfg.target_top1 is not None:  # --target-top1: from the epoch rows, in progress and at the end
        record.time_to_accuracy = time_to_accuracy.summarize(
            epochs, cfg.target_top1, stop_at_target=bool(cfg.stop_at_target), configured_epochs=cfg.epochs
        )
    return record


# --------------------------------------------------------------------------------------------------
# How a run ended
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the record says it: the status and, where they apply, what ended it."""

    status: str
    error: schema.Error | None = None
    diverged: schema.Diverged | None = None
    signal: int | None = None
    interrupted_phase: str | None = None


OK = Outcome("ok")

# The outcome's fields in the record: present when they say something, absent (never null) otherwise
_ENDING = tuple(f.name for f in dataclasses.fields(Outcome) if f.name != "status")


def _tidy(record: schema.Results) -> schema.Results:
    """The ending fields that were cleared left out of the file, as before they were set."""
    record.unset(*(name for name in _ENDING if getattr(record, name) is None))
    return record


def ended(
    record: Mapping[str, Any] | schema.Results, outcome: Outcome, *, finished_at: str | None = None
) -> schema.Results:
    """`record` (not changed) with `outcome` applied: its status and the fields that say what ended it."""
    out = results.record_of(record).model_copy()
    out.status = outcome.status
    for name in _ENDING:
        if getattr(outcome, name) is not None:
            setattr(out, name, getattr(outcome, name))
    if finished_at is not None:
        out.finished_at = finished_at
    return out


def failed(record: schema.Results, error: schema.Error) -> schema.Results:
    """`record` (not changed) ended `failed` with `error` (a full disk): a signal it had recorded is no
    longer how it ended."""
    out = ended(record, Outcome("failed", error=error))
    out.signal = None
    return _tidy(out)


def interrupted(signum: int, phase: str) -> Outcome:
    return Outcome("interrupted", signal=int(signum), interrupted_phase=phase)


def _first_line(e: BaseException, default: str) -> str:
    return str(e).splitlines()[0] if str(e) else default


def _is_torch_oom(e: BaseException) -> bool:
    # torch.OutOfMemoryError is torch._C's `class OutOfMemoryError(RuntimeError)` (torch/_C/__init__.pyi;
    # torch/cuda/__init__.py: `OutOfMemoryError = torch._C.OutOfMemoryError`), matched by name so this
    # module needs no torch; faults.inject_oom raises the same class.
    return any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__)


def _oom(e: BaseException) -> Outcome:
    return Outcome("oom", error=schema.Error(type=type(e).__name__, message=_first_line(e, "out of memory")))


def outcome_of(e: BaseException, *, received: Sequence[int], phase: str) -> Outcome:
    """How a run ended by `e` in `phase` reads in the record; `received`: the signals seen so far.

    EffbenchError (bad input seen once the data is read) is `failed` with its one line; a non-finite loss
    `diverged`; a signal `interrupted` with its phase; torch's OOM `oom`. Any other exception after a signal
    is `interrupted` (the signal killed a loader worker first), an allocation failure `oom` (the CPU
    allocator's is a plain RuntimeError, faults.is_out_of_memory), the rest `failed` with its traceback."""
    if isinstance(e, EffbenchError):
        return Outcome("failed", error=schema.Error(type="EffbenchError", message=str(e)))
    if isinstance(e, Diverged):  # the figures after it would measure nothing meaningful
        return Outcome("diverged", diverged=e.record(), error=schema.Error(type="Diverged", message=str(e)))
    if isinstance(e, Interrupted):
        return interrupted(e.signum, e.phase or phase)
    if isinstance(e, KeyboardInterrupt):
        return interrupted(int(signal.SIGINT), phase)
    if _is_torch_oom(e):
        return _oom(e)
    if received:
        return interrupted(received[0], phase)
    if faults.is_out_of_memory(e):
        return _oom(e)
    return Outcome(
        "failed",
        error=schema.Error(
            type=type(e).__name__,
            message=_first_line(e, type(e).__name__),
            traceback="".join(traceback.format_exception(e)),
        ),
    )


# --------------------------------------------------------------------------------------------------
# The final record
# --------------------------------------------------------------------------------------------------
@dataclass
class Measured:
    """What one run measured and how it ended, as plain values gathered by the runner."""

    outcome: Outcome  # OK or outcome_of(...)
    epochs: list[schema.Epoch]
    warmup: Tally
    measured: Tally
    ranks: list[schema.Rank]  # every rank's row (gathered), or what ranks_after_failure keeps
    steps_by_rank: list[list[Row]]  # every rank's measured steps, for --repeats windows; [] when not the job's
    utilization: list[schema.Utilization | None]  # every rank's sampler summary (or this rank's alone after a failure)
    memory: list[observe.PeakMemory]  # one entry per GPU the job used
    data_stats: Row  # data.stats(): skipped images and the like
    profile_info: ProfileInfo | None
    profile_error: str | None
    finished_at: str  # ISO 8601, UTC
    wall_time_s: float
    wall_time_by_phase_s: dict[str, float] | None = None  # Phase.seconds_before_current: setup to report
    roofs: schema.Roofs | None = None  # this machine's roofs, measured (or cached) before the profiling pass
    roofs_error: str | None = None
    rules: tuple[schema.WarmupRule | None, schema.Until | None] = (None, None)  # how warm-up and --until decided


@dataclass
class Conditions:
    """What the run was set up with, read by `finish`."""

    repeats: int | None  # --repeats
    compile: bool
    data_only: bool
    flops_per_image: float | None
    flops_forward_per_image: float | None
    flops_error: str | None
    workers_per_process: int  # what the loader really started: synthetic and fast CIFAR none
    processes_per_node: int
    tf32_enabled: bool
    cpu_quota_cores: float | None
    run_dir: Path | None  # profile files are recorded relative to it
    flops_matmul_per_image: float | None = None  # the matmul / attention part of flops_per_image (flops.py)
    tf32_matmul_enabled: bool = False  # torch.backends.cuda.matmul.allow_tf32 (cudnn's is tf32_enabled)


def finish(opened: Mapping[str, Any] | schema.Results, m: Measured, c: Conditions) -> schema.Results:
    """The final results record: the one written with the run folder, plus what was measured."""
    record = with_headline(opened, m.ranks, m.epochs, m.warmup, m.measured, m.data_stats, rules=m.rules)
    if m.profile_error:
        record.profile_error = m.profile_error
    record = ended(record, m.outcome, finished_at=m.finished_at)
    record.wall_time_s = m.wall_time_s
    record.wall_time_by_phase_s = m.wall_time_by_phase_s
    # --repeats; analysis/windows builds it as a dict (until it moves onto the typed model)
    record.throughput_windows = schema.Windows.model_validate(windows.rank_windows(m.steps_by_rank, c.repeats))
    if c.flops_error:
        record.flops_error = c.flops_error
    if c.compile:
        record.compile_time_s = compile_time_s(m.warmup.step_times_s, m.measured.step_times_s)
    return observe.summarize(
        record,
        flops_image=c.flops_per_image,
        flops_forward_image=c.flops_forward_per_image,
        utilization=observe.merge_utilization(m.utilization),
        memory=m.memory,
        profile_info=m.profile_info,
        cpu_quota_cores=c.cpu_quota_cores,
        workers_per_process=c.workers_per_process,
        processes_per_node=c.processes_per_node,
        tf32_enabled=c.tf32_enabled,
        timed_step_times_s=m.measured.step_times_s,
        run_dir=c.run_dir,
        flops_matmul_image=c.flops_matmul_per_image,
        tf32_matmul_enabled=c.tf32_matmul_enabled,
        roofs=m.roofs,
        roofs_error=m.roofs_error,
        verdict=not c.data_only,  # no model ran: a training bottleneck verdict would mislead
    )


def oom_marker_name(rank: int) -> str:
    return f"oom-rank{rank}.json"


OOM_MARKER_GLOB = "oom-rank*.json"


class OomMarker(BaseModel):
    """oom-rank{N}.json: a rank whose run ended `oom` (outcome_of), for the launcher (settle_with_torchrun)."""

    rank: int
    type: str
    message: str


class DivergedMarker(BaseModel):
    """diverged-rank{N}.json: a rank whose run ended `diverged`, with the step the ranks agreed on."""

    rank: int
    diverged: schema.Diverged | None
    error: schema.Error | None


def oom_marker(rank: int, outcome: Outcome | schema.Results) -> OomMarker | None:
    """What a rank whose run ended `oom` (outcome_of) leaves beside the launch spec, so the launcher can
    tell an OOM from the failure torchrun reports (it names the first rank to exit, and its exit code 1
    is the same for every failure); None for any other outcome."""
    if outcome.status != "oom" or outcome.error is None:
        return None
    return OomMarker(rank=rank, type=outcome.error.type or "", message=outcome.error.message or "")


def diverged_marker_name(rank: int) -> str:
    return f"diverged-rank{rank}.json"


DIVERGED_MARKER_GLOB = "diverged-rank*.json"


def diverged_marker(rank: int, outcome: Outcome | schema.Results) -> DivergedMarker | None:
    """What a rank whose run ended `diverged` leaves beside the launch spec: the ranks agreed on the step
    (train.py), so a node that does not host rank 0, and has no results.json to read, can still say
    `diverged` and where; None for any other outcome."""
    if outcome.status != "diverged":
        return None
    return DivergedMarker(rank=rank, diverged=outcome.diverged, error=outcome.error)


def _then_rank0(message: str, rank0_error: schema.Error | None) -> str:
    if rank0_error is None:
        return message
    return f"{message}; rank 0 then stopped with {rank0_error.type}: {rank0_error.message or ''}"


def _oom_error(ooms: Sequence[OomMarker], rank0_error: schema.Error | None) -> schema.Error:
    ooms = sorted(ooms, key=lambda o: o.rank)
    message = _then_rank0("; ".join(f"rank {o.rank}: {o.type}: {o.message}" for o in ooms), rank0_error)
    error = schema.Error(type=ooms[0].type, message=message, oom_ranks=[o.rank for o in ooms])
    if rank0_error is not None:
        error.rank0_error = rank0_error
    return error


def _settled_oom(record: schema.Results, ooms: Sequence[OomMarker]) -> schema.Results:
    """Some rank ran out of memory: the job is `oom` (what a batch-size sweep keys on), whichever rank
    torchrun names, the OOM rank(s) and message(s) in the error; rank 0's own failure (the collective
    broken by the dead peer) is kept beside it; its stop by torchrun's SIGTERM is not the user's signal."""
    if (record.world_size or 1) == 1 and record.status == "oom":
        return record  # one process: its own record says it already, with no rank to name
    rank0_failed = record.status == "failed" and all(o.rank != 0 for o in ooms)
    rank0_error = record.error if rank0_failed else None
    record.signal = None
    record.interrupted_phase = None
    record.status = "oom"
    record.error = _oom_error(ooms, rank0_error)
    return _tidy(record)


def settle_with_torchrun(
    record: schema.Results, outcome: SupervisedResult, ooms: Sequence[OomMarker] = ()
) -> schema.Results:
    """Rank 0's results record (not changed), corrected by how torchrun ended; `ooms`: the ranks' markers."""
    record = record.model_copy(deep=True)
    if ooms and not outcome.signal:
        return _settled_oom(record, ooms)
    if record.status == "diverged" and not outcome.signal:
        return record  # every rank agreed on it and exits 1 (train.py): the rank torchrun names is no root cause
    if outcome.signal:
        if record.status in ("running", "ok"):
            record.status = "interrupted"
        record.signal = outcome.signal
    elif outcome.returncode != 0 and (
        record.status in ("running", "ok", "interrupted") or (outcome.failure is not None and outcome.failure.rank != 0)
    ):
        # Another rank died first (torchrun's root cause): rank 0 was stopped by torchrun, or failed
        # on its own when the collective broke; the root cause is what the user needs to read.
        rank0_error = record.error if record.status == "failed" else None
        record.status = "failed"
        record.signal = None
        message = outcome.failure.describe() if outcome.failure else _exited("torchrun", outcome, "with code ")
        record.error = schema.Error(type="ChildFailedError", message=_then_rank0(message, rank0_error))
        if rank0_error is not None:
            record.error.rank0_error = rank0_error
    return _tidy(record)


def _exited(child: str, outcome: SupervisedResult, code: str = "") -> str:
    """`torchrun exited with 1: <why>`: the child's last meaningful line (supervise.last_meaningful_line) when it
    named no failed rank (a rendezvous that failed, a worker that crashed before its run was built), so the
    cause is on the terminal even where no run folder keeps the child's log."""
    said = f"{child} exited with {code}{outcome.returncode}"
    return f"{said}: {outcome.last_line}" if outcome.last_line and not outcome.signal else said


def record_without_results(
    outcome: SupervisedResult, ooms: Sequence[OomMarker], child: str, diverged: Sequence[DivergedMarker] = ()
) -> schema.Results:
    """The record of a job that left no results.json on this node and did not end well (rank 0 on another
    node, or rank 0 removed its folder after a crash while it built the run): `oom` when a rank here ran
    out of memory and the user sent no signal, `diverged` (with the agreed step) when the ranks here
    stopped on a non-finite loss, else `interrupted` / `failed` with torchrun's root cause. In memory
    only (no file on this node): what the CLI reports and the exit code."""
    record = schema.Results(schema_version=results.SCHEMA_VERSION, status="failed")
    if ooms and not outcome.signal:
        return ended(record, Outcome("oom", error=_oom_error(ooms, None)))
    if diverged and not outcome.signal:
        first = min(diverged, key=lambda d: d.rank)
        return ended(record, Outcome("diverged", diverged=first.diverged, error=first.error))
    message = outcome.failure.describe() if outcome.failure else _exited(child, outcome)
    error = schema.Error(type="ChildFailedError", message=message)
    if outcome.signal:
        return ended(record, Outcome("interrupted", signal=outcome.signal, error=error))
    return ended(record, Outcome("failed", error=error))

"""A run's record (results.json) from what it measured. Pure: no torch, no I/O, no clock.

    merge_epoch(rows)            one epoch row from every rank's
    rank_row / rank_rows         each rank's measured totals, in rank order; straggler_spread over them
    headline(...)                the throughput and totals from the rank rows (in progress and at the end)
    outcome_of(exc, ...)         which exception ends a run how: status ok/oom/diverged/failed/interrupted
    finish(opened, measured, c)  the final record from the record opened with the run folder
    oom_marker(rank, outcome)    what a rank that ran out of memory tells the launcher (oom-rank{N}.json)
    diverged_marker(rank, ...)   what a rank that stopped on a non-finite loss tells it (diverged-rank{N}.json)
    settle_with_torchrun(...)    rank 0's record corrected by how torchrun ended and the ranks' OOM markers
    record_without_results(...)  the record when this node has no results.json (rank 0 elsewhere, or none)

run/rank.py gathers the values (clock, devices, collectives); run/folder.py writes the files.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench.analysis import time_to_accuracy, windows
from effbench.analysis.throughput import job_throughput, slowest
from effbench.errors import EffbenchError
from effbench.measure import observe
from effbench.run import faults
from effbench.run.phases import Interrupted
from effbench.run.timing import Tally
from effbench.run.train import Diverged, compile_time_s

if TYPE_CHECKING:
    from effbench.launch.supervise import SupervisedResult

Row = dict[str, Any]


# --------------------------------------------------------------------------------------------------
# Ranks and epochs
# --------------------------------------------------------------------------------------------------
def merge_epoch(per_rank: Sequence[Row]) -> Row:
    """One epoch row from every rank's: images summed, the slowest rank's times, weighted accuracies.

    img/s is the epoch's measured steps only (warm-up excluded, like the headline), by `job_throughput`
    over the ranks' measured images and time.
    """
    thr = job_throughput([{"images": r.get("measured_images"), "time_s": r.get("measured_time_s")} for r in per_rank])
    if len(per_rank) == 1:
        return {**per_rank[0], "throughput_img_s": thr}
    slowest_row = max(per_rank, key=lambda r: r["total_time_s"])
    # the measured split of the rank whose measured steps took longest, as the headline's data_time_share
    slowest_measured = max(per_rank, key=lambda r: r.get("measured_time_s") or 0.0)

    def weighted(key: str, weight: str) -> float | None:
        total = sum(r.get(weight) or 0 for r in per_rank)
        if not total or any(r.get(key) is None for r in per_rank):
            return None
        return sum(r[key] * (r.get(weight) or 0) for r in per_rank) / total

    return {
        **slowest_row,
        "images": sum(r["images"] for r in per_rank),
        "val_images": sum(r.get("val_images") or 0 for r in per_rank),
        "train_loss": weighted("train_loss", "images"),
        "train_top1": weighted("train_top1", "images"),
        "val_loss": weighted("val_loss", "val_images"),
        "val_top1": weighted("val_top1", "val_images"),
        "val_time_s": max(r["val_time_s"] for r in per_rank),
        "measured_images": sum(r.get("measured_images") or 0 for r in per_rank),
        "measured_time_s": max(r.get("measured_time_s") or 0.0 for r in per_rank),
        "measured_data_time_s": slowest_measured.get("measured_data_time_s"),
        "measured_compute_time_s": slowest_measured.get("measured_compute_time_s"),
        "throughput_img_s": thr,
    }


def rank_row(*, rank: int, local_rank: int, host: str, device: str, measured: Tally) -> Row:
    """One rank's measured totals, as gathered after every epoch and at the end."""
    return {
        "rank": rank,
        "local_rank": local_rank,
        "host": host,
        "device": device,
        "images": measured.images,
        "steps": measured.steps,
        "data_time_s": measured.data_time_s,
        "compute_time_s": measured.compute_time_s,
        "time_s": measured.time_s,
        "throughput_img_s": measured.throughput_img_s,
    }


def rank_rows(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r["rank"])


def straggler_spread(ranks: Sequence[Row]) -> dict[str, Any] | None:
    """How far the slowest rank lags the fastest over the measured steps."""
    timed = [r for r in ranks if r.get("time_s")]
    if len(timed) < 2:
        return None
    slow = max(timed, key=lambda r: r["time_s"])
    fast = min(timed, key=lambda r: r["time_s"])
    return {
        "slowest_rank": slow["rank"],
        "fastest_rank": fast["rank"],
        "spread_s": slow["time_s"] - fast["time_s"],
        "spread_pct": 100.0 * (slow["time_s"] - fast["time_s"]) / fast["time_s"],
    }


def added(total: Tally, part: Tally) -> Tally:
    """`total` and `part` summed, as a new Tally (step times concatenated in order)."""
    return Tally(
        steps=total.steps + part.steps,
        images=total.images + part.images,
        data_time_s=total.data_time_s + part.data_time_s,
        compute_time_s=total.compute_time_s + part.compute_time_s,
        step_times_s=[*total.step_times_s, *part.step_times_s],
    )


def ranks_after_failure(gathered: list[Row] | None, own_row: Row, world_size: int) -> list[Row]:
    """After a failure no collective runs (a dead peer would hang it): the rank rows of the last epoch
    stay (they were gathered then); with none, or alone, this rank's own row."""
    return gathered if gathered is not None and world_size > 1 else rank_rows([own_row])


def headline(record: Mapping[str, Any], epochs: list[Row], warmup: Tally, measured: Tally, data_stats: Row) -> Row:
    """The keys the headline sets, from the rank rows, the same way in progress and at the end
    (analysis/throughput). `record` needs `ranks` (may be absent) and `data`."""
    out: Row = {"epochs": epochs, "warmup": warmup.to_dict(), "measured": measured.to_dict()}
    ranks = record.get("ranks") or []
    if len(ranks) > 1:
        # the job's measured time is its slowest rank's; the images are every rank's
        slow = slowest(ranks) or ranks[0]
        out["measured"].update(
            images=sum(r["images"] for r in ranks),
            data_time_s=slow["data_time_s"],
            compute_time_s=slow["compute_time_s"],
            time_s=slow["time_s"],
        )
        out["stragglers"] = straggler_spread(ranks)
    out["throughput_img_s"] = job_throughput(ranks) if ranks else measured.throughput_img_s
    out["measured"]["throughput_img_s"] = out["throughput_img_s"]
    m = out["measured"]
    out["data_time_share"] = m["data_time_s"] / m["time_s"] if m["time_s"] > 0 else None
    out["data"] = {**record["data"], **data_stats}
    if epochs:
        last = epochs[-1]
        out["final"] = {k: last.get(k) for k in ("train_loss", "train_top1", "val_loss", "val_top1")}
    cfg = record.get("config") or {}
    if cfg.get("target_top1") is not None:  # --target-top1: from the epoch rows, in progress and at the end
        out["time_to_accuracy"] = time_to_accuracy.summarize(
            epochs, cfg["target_top1"], stop_at_target=bool(cfg.get("stop_at_target")),
            configured_epochs=cfg.get("epochs"),
        )  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------
# How a run ended
# --------------------------------------------------------------------------------------------------
def interrupted(signum: int, phase: str) -> Row:
    return {"status": "interrupted", "signal": int(signum), "interrupted_phase": phase}


def _first_line(e: BaseException, default: str) -> str:
    return str(e).splitlines()[0] if str(e) else default


def _is_torch_oom(e: BaseException) -> bool:
    # torch.OutOfMemoryError is torch._C's `class OutOfMemoryError(RuntimeError)` (torch/_C/__init__.pyi;
    # torch/cuda/__init__.py: `OutOfMemoryError = torch._C.OutOfMemoryError`), matched by name so this
    # module needs no torch; faults.inject_oom raises the same class.
    return any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__)


def outcome_of(e: BaseException, *, received: Sequence[int], phase: str) -> Row:
    """The record keys for a run ended by `e` in `phase`; `received`: the signals seen so far.

    EffbenchError (bad input seen once the data is read) is `failed` with its one line; a non-finite loss
    `diverged`; a signal `interrupted` with its phase; torch's OOM `oom`. Any other exception after a signal
    is `interrupted` (the signal killed a loader worker first), an allocation failure `oom` (the CPU
    allocator's is a plain RuntimeError, faults.is_out_of_memory), the rest `failed` with its traceback."""
    if isinstance(e, EffbenchError):
        return {"status": "failed", "error": {"type": "EffbenchError", "message": str(e)}}
    if isinstance(e, Diverged):  # the figures after it would measure nothing meaningful
        return {"status": "diverged", "diverged": e.to_dict(), "error": {"type": "Diverged", "message": str(e)}}
    if isinstance(e, Interrupted):
        return interrupted(e.signum, e.phase or phase)
    if isinstance(e, KeyboardInterrupt):
        return interrupted(int(signal.SIGINT), phase)
    if _is_torch_oom(e):
        return {"status": "oom", "error": {"type": type(e).__name__, "message": _first_line(e, "out of memory")}}
    if received:
        return interrupted(received[0], phase)
    if faults.is_out_of_memory(e):
        return {"status": "oom", "error": {"type": type(e).__name__, "message": _first_line(e, "out of memory")}}
    return {
        "status": "failed",
        "error": {
            "type": type(e).__name__,
            "message": _first_line(e, type(e).__name__),
            "traceback": "".join(traceback.format_exception(e)),
        },
    }


# --------------------------------------------------------------------------------------------------
# The final record
# --------------------------------------------------------------------------------------------------
@dataclass
class Measured:
    """What one run measured and how it ended, as plain values gathered by the runner."""

    outcome: Row  # {"status": "ok"} or outcome_of(...)
    epochs: list[Row]
    warmup: Tally
    measured: Tally
    ranks: list[Row]  # every rank's row (gathered), or what ranks_after_failure keeps
    steps_by_rank: list[list[Row]]  # every rank's measured steps, for --repeats windows; [] when not the job's
    utilization: list[Row | None]  # every rank's sampler summary (or this rank's alone after a failure)
    memory: list[Row]  # one entry per GPU the job used
    data_stats: Row  # data.stats(): skipped images and the like
    profile_info: Row | None
    profile_error: str | None
    finished_at: str  # ISO 8601, UTC
    wall_time_s: float


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


def finish(opened: Mapping[str, Any], m: Measured, c: Conditions) -> Row:
    """The final results record: the one written with the run folder, plus what was measured."""
    record: Row = {**opened, "ranks": m.ranks}  # keys in the order the in-progress record had them
    record.update(headline(record, m.epochs, m.warmup, m.measured, m.data_stats))
    if m.profile_error:
        record["profile_error"] = m.profile_error
    record.update(m.outcome)
    record["finished_at"] = m.finished_at
    record["wall_time_s"] = m.wall_time_s
    record["throughput_windows"] = windows.rank_windows(m.steps_by_rank, c.repeats)  # --repeats
    if c.flops_error:
        record["flops_error"] = c.flops_error
    if c.compile:
        record["compile_time_s"] = compile_time_s(m.warmup.step_times_s, m.measured.step_times_s)
    record.update(
        observe.summarize(
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
        )
    )
    if c.data_only:  # no model ran: a training bottleneck verdict would mislead
        record.pop("verdict", None)
    return record


def oom_marker_name(rank: int) -> str:
    return f"oom-rank{rank}.json"


OOM_MARKER_GLOB = "oom-rank*.json"


def oom_marker(rank: int, outcome: Mapping[str, Any]) -> Row | None:
    """What a rank whose run ended `oom` (outcome_of) leaves beside the launch spec, so the launcher can
    tell an OOM from the failure torchrun reports (it names the first rank to exit, and its exit code 1
    is the same for every failure); None for any other outcome."""
    if outcome.get("status") != "oom":
        return None
    return {"rank": rank, "type": outcome["error"]["type"], "message": outcome["error"]["message"]}


def diverged_marker_name(rank: int) -> str:
    return f"diverged-rank{rank}.json"


DIVERGED_MARKER_GLOB = "diverged-rank*.json"


def diverged_marker(rank: int, outcome: Mapping[str, Any]) -> Row | None:
    """What a rank whose run ended `diverged` leaves beside the launch spec: the ranks agreed on the step
    (train.py), so a node that does not host rank 0, and has no results.json to read, can still say
    `diverged` and where; None for any other outcome."""
    if outcome.get("status") != "diverged":
        return None
    return {"rank": rank, "diverged": outcome.get("diverged"), "error": outcome.get("error")}


def _oom_error(ooms: Sequence[Row], rank0_error: Mapping[str, Any] | None) -> Row:
    ooms = sorted(ooms, key=lambda o: o["rank"])
    message = "; ".join(f"rank {o['rank']}: {o['type']}: {o['message']}" for o in ooms)
    if rank0_error:
        message += f"; rank 0 then stopped with {rank0_error.get('type')}: {rank0_error.get('message', '')}"
    return {
        "type": ooms[0]["type"],
        "message": message,
        "oom_ranks": [o["rank"] for o in ooms],
        **({"rank0_error": dict(rank0_error)} if rank0_error else {}),
    }


def _settled_oom(record: Row, ooms: Sequence[Row]) -> Row:
    """Some rank ran out of memory: the job is `oom` (what a batch-size sweep keys on), whichever rank
    torchrun names, the OOM rank(s) and message(s) in the error; rank 0's own failure (the collective
    broken by the dead peer) is kept beside it; its stop by torchrun's SIGTERM is not the user's signal."""
    if record.get("world_size", 1) == 1 and record["status"] == "oom":
        return record  # one process: its own record says it already, with no rank to name
    rank0_failed = record["status"] == "failed" and all(o["rank"] != 0 for o in ooms)
    rank0_error = record.get("error") if rank0_failed else None
    record.pop("signal", None)
    record.pop("interrupted_phase", None)
    record["status"] = "oom"
    record["error"] = _oom_error(ooms, rank0_error)
    return record


def settle_with_torchrun(record: Mapping[str, Any], outcome: SupervisedResult, ooms: Sequence[Row] = ()) -> Row:
    """Rank 0's results record, corrected by how torchrun ended; `ooms`: the ranks' oom_marker rows."""
    record = dict(record)
    if ooms and not outcome.signal:
        return _settled_oom(record, ooms)
    if record["status"] == "diverged" and not outcome.signal:
        return record  # every rank agreed on it and exits 1 (train.py): the rank torchrun names is no root cause
    if outcome.signal:
        if record["status"] in ("running", "ok"):
            record["status"] = "interrupted"
        record["signal"] = outcome.signal
    elif outcome.returncode != 0 and (
        record["status"] in ("running", "ok", "interrupted")
        or (outcome.failure is not None and outcome.failure.rank != 0)
    ):
        # Another rank died first (torchrun's root cause): rank 0 was stopped by torchrun, or failed
        # on its own when the collective broke; the root cause is what the user needs to read.
        rank0_error = record.get("error") if record["status"] == "failed" else None
        record["status"] = "failed"
        record.pop("signal", None)
        message = outcome.failure.describe() if outcome.failure else f"torchrun exited with code {outcome.returncode}"
        if rank0_error:
            message += f"; rank 0 then stopped with {rank0_error.get('type')}: {rank0_error.get('message', '')}"
        record["error"] = {
            "type": "ChildFailedError",
            "message": message,
            **({"rank0_error": rank0_error} if rank0_error else {}),
        }
    return record


def record_without_results(
    outcome: SupervisedResult, ooms: Sequence[Row], child: str, diverged: Sequence[Row] = ()
) -> Row:
    """The record of a job that left no results.json on this node and did not end well (rank 0 on another
    node, or rank 0 removed its folder after a crash while it built the run): `oom` when a rank here ran
    out of memory and the user sent no signal, `diverged` (with the agreed step) when the ranks here
    stopped on a non-finite loss, else `interrupted` / `failed` with torchrun's root cause."""
    if ooms and not outcome.signal:
        return {"status": "oom", "error": _oom_error(ooms, None)}
    if diverged and not outcome.signal:
        first = min(diverged, key=lambda d: d["rank"])
        return {"status": "diverged", "diverged": first["diverged"], "error": first["error"]}
    record: Row = {"status": "interrupted" if outcome.signal else "failed"}
    if outcome.signal:
        record["signal"] = outcome.signal
    record["error"] = {
        "type": "ChildFailedError",
        "message": outcome.failure.describe() if outcome.failure else f"{child} exited with {outcome.returncode}",
    }
    return record

"""run/record.py: the results record from measurements, pure and fast (no process group, no training).

Every figure is checked against arithmetic written here (sums, maxima, medians by hand)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from effbench import schema
from effbench.errors import EffbenchError
from effbench.launch.supervise import ChildFailure, SupervisedResult
from effbench.run import record
from effbench.run.phases import Interrupted
from effbench.run.record import merge_epoch, straggler_spread
from effbench.run.timing import Tally
from effbench.run.train import Diverged

ROOT = Path(__file__).resolve().parents[2]


def _disk(model) -> dict:
    """A typed record (or section) as results.json holds it: the fields it was given."""
    return model.model_dump(exclude_unset=True)


def _ended(o: record.Outcome) -> dict:
    """An outcome as the keys it sets in the record."""
    keys = {"status": o.status, "error": o.error, "diverged": o.diverged, "signal": o.signal,
            "interrupted_phase": o.interrupted_phase}  # fmt: skip
    return {k: _disk(v) if hasattr(v, "model_dump") else v for k, v in keys.items() if v is not None}


def _rank(**kw) -> schema.Rank:
    return schema.Rank(**kw)


def settle_with_torchrun(rank0: dict, outcome, markers=()) -> dict:
    """record.settle_with_torchrun on rank 0's record (as read from its results.json), as written back."""
    typed = schema.Results.model_validate({"schema_version": 1, **rank0})
    settled = record.settle_with_torchrun(typed, outcome, [record.OomMarker(**m) for m in markers])
    out = _disk(settled)
    assert out.pop("schema_version") == 1
    return out


def test_the_module_imports_no_torch():
    code = "import sys, effbench.run.record; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# --- ranks and epochs (moved from the slow tests/e2e/test_distributed.py) ---


def test_merge_epoch_sums_images_and_keeps_the_slowest_rank():
    a = {"epoch": 1, "images": 32, "total_time_s": 1.0, "data_time_s": 0.2, "compute_time_s": 0.8, "train_loss": 2.0,
         "train_top1": 0.5, "val_loss": 1.0, "val_top1": 0.25, "val_images": 10, "val_time_s": 0.1,
         "measured_images": 24, "measured_time_s": 0.75}  # fmt: skip
    b = dict(
        a,
        total_time_s=2.0,
        measured_time_s=1.5,
        data_time_s=1.5,
        compute_time_s=0.5,
        train_loss=4.0,
        train_top1=0.0,
        val_top1=0.75,
        val_images=30,
    )
    ea, eb = schema.Epoch(**a), schema.Epoch(**b)
    m = merge_epoch([ea, eb])
    assert m.images == 64 and m.data_time_s == 1.5 and m.total_time_s == 2.0
    assert m.train_loss == pytest.approx(3.0) and m.val_top1 == pytest.approx((0.25 * 10 + 0.75 * 30) / 40)
    assert m.throughput_img_s == pytest.approx((24 + 24) / 1.5)  # measured steps only, slowest rank's time
    assert ea.images == 32 and eb.images == 32  # inputs untouched
    # the row written: the fields the ranks' rows had, the merged throughput and the slowest rank's split
    assert set(_disk(m)) == {*a, "throughput_img_s", "measured_data_time_s", "measured_compute_time_s"}


def test_straggler_spread():
    s = straggler_spread([_rank(rank=0, time_s=2.0), _rank(rank=1, time_s=2.5)])
    assert s is not None and _disk(s) == {"slowest_rank": 1, "fastest_rank": 0, "spread_s": 0.5, "spread_pct": 25.0}
    assert straggler_spread([_rank(rank=0, time_s=1.0)]) is None


def test_added_tallies_sum_and_keep_step_order():
    a = Tally(steps=2, images=16, data_time_s=0.5, compute_time_s=1.0, step_times_s=[0.7, 0.8])
    b = Tally(steps=1, images=8, data_time_s=0.25, compute_time_s=0.5, step_times_s=[0.75])
    s = record.added(a, b)
    assert (s.steps, s.images, s.data_time_s, s.compute_time_s) == (3, 24, 0.75, 1.5)
    assert s.step_times_s == [0.7, 0.8, 0.75] and a.step_times_s == [0.7, 0.8]  # a new Tally, `a` untouched


def test_rank_rows_are_in_rank_order_and_a_failure_keeps_the_last_gathered_ones():
    rows = [_rank(rank=2), _rank(rank=0), _rank(rank=1)]
    assert [r.rank for r in record.rank_rows(rows)] == [0, 1, 2]
    own = _rank(rank=0, time_s=1.0)
    gathered = [_rank(rank=0, time_s=0.5), _rank(rank=1, time_s=0.6)]
    assert record.ranks_after_failure(gathered, own, world_size=2) == gathered  # no collective after a failure
    assert record.ranks_after_failure(None, own, world_size=2) == [own]  # failed before any epoch was gathered
    assert record.ranks_after_failure([_rank(rank=0, time_s=0.5)], own, world_size=1) == [own]  # alone: now


def test_rank_row_reads_the_tally():
    t = Tally(steps=3, images=24, data_time_s=0.25, compute_time_s=1.75)
    row = record.rank_row(rank=1, local_rank=0, host="h", device="cpu", measured=t)
    assert row.time_s == 2.0 and row.throughput_img_s == 12.0 and row.steps == 3 and row.host == "h"
    assert set(_disk(row)) == {"rank", "local_rank", "host", "device", "images", "steps", "data_time_s",
                               "compute_time_s", "time_s", "throughput_img_s"}  # fmt: skip


# --- how a run ended: one table, every exception the runner can meet ---


def _torch_oom(message: str) -> BaseException:
    import torch

    return torch.OutOfMemoryError(message)


CPU_OOM = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: 9 bytes")
OUTCOMES = [
    # (exception, signals received, expected keys)
    (EffbenchError("--data-dir", "no images"), [], {"status": "failed", "error": {"type": "EffbenchError"}}),
    (Diverged(1, 3, 7, float("nan")), [], {"status": "diverged", "diverged": {"global_step": 7, "loss": "nan"}}),
    (Interrupted(15, "validation"), [15], {"status": "interrupted", "signal": 15, "interrupted_phase": "validation"}),
    (Interrupted(2), [2], {"status": "interrupted", "signal": 2, "interrupted_phase": "epochs"}),  # phase: the runner's
    (KeyboardInterrupt(), [], {"status": "interrupted", "signal": 2, "interrupted_phase": "epochs"}),
    # a loader worker killed by the same signal surfaces first as a RuntimeError: interrupted, not broken
    (
        RuntimeError("DataLoader worker (pid 9) is killed by signal: Terminated."),
        [15],
        {"status": "interrupted", "signal": 15, "interrupted_phase": "epochs"},
    ),  # fmt: skip
    (CPU_OOM, [], {"status": "oom", "error": {"type": "RuntimeError", "message": str(CPU_OOM)}}),
    (MemoryError(), [], {"status": "oom", "error": {"type": "MemoryError", "message": "out of memory"}}),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), [], {"status": "oom"}),
    (ValueError("bad\nsecond line"), [], {"status": "failed", "error": {"type": "ValueError", "message": "bad"}}),
    (ValueError(), [], {"status": "failed", "error": {"type": "ValueError", "message": "ValueError"}}),
]


def _subset(expected: dict, got: dict) -> bool:
    return all(_subset(v, got.get(k) or {}) if isinstance(v, dict) else got.get(k) == v for k, v in expected.items())


@pytest.mark.parametrize("exc, received, expected", OUTCOMES, ids=lambda v: type(v).__name__)
def test_outcome_of_each_exception(exc, received, expected):
    got = _ended(record.outcome_of(exc, received=received, phase="epochs"))
    assert _subset(expected, got), got
    if got["status"] == "failed" and not isinstance(exc, EffbenchError):  # a crash keeps its traceback
        assert got["error"]["traceback"].rstrip().endswith(f"{type(exc).__name__}: {exc}".rstrip(": "))
    else:
        assert "traceback" not in (got.get("error") or {})
    assert set(got) <= {"status", "error", "diverged", "signal", "interrupted_phase"}


def test_torch_oom_is_oom_even_after_a_signal():
    # the runner caught torch.OutOfMemoryError before it looked at the signals received
    got = _ended(
        record.outcome_of(_torch_oom("CUDA out of memory. Tried to allocate 2 GiB\nmore"), received=[15], phase="x")
    )
    assert got == {"status": "oom", "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB"}}  # fmt: skip
    assert _ended(record.outcome_of(_torch_oom(""), received=[], phase="x"))["error"]["message"] == "out of memory"


def test_a_traceback_is_the_exceptions_own():
    try:
        raise KeyError("k")
    except KeyError as e:
        got = _ended(record.outcome_of(e, received=[], phase="epochs"))
    assert "test_a_traceback_is_the_exceptions_own" in got["error"]["traceback"]


# --- the final record ---


def _opened() -> dict:
    return {"schema_version": 1, "status": "running", "device": "cpu", "devices": 1, "world_size": 1,
            "precision": "fp32", "env": {}, "data": {"name": "synthetic"}, "throughput_img_s": None,
            "compile_time_s": None, "epochs": []}  # fmt: skip


def _measured(**kw) -> record.Measured:
    steps = [{"warmup": False, "images": 8, "data_time_s": 0.25, "compute_time_s": 0.75}] * 4
    base = dict(
        outcome=record.OK,
        epochs=[schema.Epoch(epoch=1, train_loss=2.5, train_top1=0.125, val_loss=None, val_top1=None, images=40)],
        warmup=Tally(steps=1, images=8, data_time_s=0.5, compute_time_s=4.5, step_times_s=[5.0]),
        measured=Tally(steps=4, images=32, data_time_s=1.0, compute_time_s=3.0, step_times_s=[1.0, 1.0, 0.5, 2.0]),
        ranks=[_rank(rank=0, images=32, data_time_s=1.0, compute_time_s=3.0, time_s=4.0)],
        steps_by_rank=[steps],
        utilization=[None],
        memory=[],
        data_stats={"corrupt_images_skipped": 2},
        profile_info=None,
        profile_error=None,
        finished_at="2026-01-01T00:00:00+00:00",
        wall_time_s=12.5,
    )
    return record.Measured(**{**base, **kw})


def _conditions(**kw) -> record.Conditions:
    base = dict(repeats=2, compile=False, data_only=False, flops_per_image=None, flops_forward_per_image=None,
                flops_error=None, workers_per_process=0, processes_per_node=1, tf32_enabled=False,
                cpu_quota_cores=2.0, run_dir=None)  # fmt: skip
    return record.Conditions(**{**base, **kw})


def test_finish_builds_the_record_from_the_measurements():
    opened = _opened()
    r = _disk(record.finish(opened, _measured(), _conditions()))
    assert opened["status"] == "running" and "ranks" not in opened  # the opened record is not changed
    assert r["status"] == "ok" and r["schema_version"] == 1 and r["wall_time_s"] == 12.5
    assert r["throughput_img_s"] == 32 / 4.0 == r["measured"]["throughput_img_s"]
    assert r["data_time_share"] == 1.0 / 4.0 and r["warmup"]["images"] == 8
    assert r["data"] == {"name": "synthetic", "corrupt_images_skipped": 2}
    assert r["final"] == {"train_loss": 2.5, "train_top1": 0.125, "val_loss": None, "val_top1": None}
    assert r["throughput_windows"]["throughput_img_s"] == [pytest.approx(16 / 2.0)] * 2  # 2 windows of 2 steps
    assert r["compile_time_s"] is None and "flops_error" not in r and "profile_error" not in r
    assert "verdict" in r  # summarize ran on the measured steps


def test_finish_with_compile_flops_error_profile_error_and_data_only():
    r = _disk(
        record.finish(
            _opened(),
            _measured(profile_error="RuntimeError: no kineto"),
            _conditions(compile=True, flops_error="TypeError: op", data_only=True),
        )
    )
    assert r["compile_time_s"] == 5.0 - 1.0  # the first warm-up step minus the median measured (1.0, 1.0, 0.5, 2.0)
    assert r["flops_error"] == "TypeError: op" and r["profile_error"] == "RuntimeError: no kineto"
    assert "verdict" not in r  # --data-only: no model ran


def test_finish_keeps_how_a_failed_run_ended_and_two_ranks_headline():
    ranks = [_rank(rank=0, images=32, data_time_s=1.0, compute_time_s=3.0, time_s=4.0),
             _rank(rank=1, images=32, data_time_s=2.0, compute_time_s=3.0, time_s=5.0)]  # fmt: skip
    outcome = record.outcome_of(Interrupted(15, "epochs"), received=[15], phase="epochs")
    r = _disk(record.finish(_opened(), _measured(outcome=outcome, ranks=ranks, steps_by_rank=[]), _conditions()))
    assert (r["status"], r["signal"], r["interrupted_phase"]) == ("interrupted", 15, "epochs")
    assert r["throughput_img_s"] == 64 / 5.0 and r["measured"]["images"] == 64 and r["measured"]["time_s"] == 5.0
    assert r["stragglers"]["slowest_rank"] == 1 and r["stragglers"]["spread_s"] == 1.0
    assert r["throughput_windows"]["windows"] == 0  # the steps of one rank are not the job's


# --- how rank 0's record is settled with torchrun's outcome (both orders of the kill race) ---


def _outcome(returncode, failure=None, sig=None):
    return SupervisedResult(returncode=returncode, signal=sig, failure=failure)


def test_root_cause_on_another_rank_replaces_rank0s_broken_collective_error():
    rank0 = {"status": "failed", "error": {"type": "RuntimeError", "message": "Connection closed by peer"}}
    r = settle_with_torchrun(rank0, _outcome(1, ChildFailure(rank=1, exitcode=-9)))
    assert r["status"] == "failed"
    assert r["error"]["message"].startswith("rank 1 failed (killed by SIGKILL)")
    assert "rank 0 then stopped with RuntimeError: Connection closed by peer" in r["error"]["message"]
    assert r["error"]["rank0_error"] == rank0["error"] and rank0["status"] == "failed"  # input untouched


def test_rank0_stopped_by_torchrun_is_failed_with_the_root_cause():
    r = settle_with_torchrun({"status": "interrupted", "signal": 15}, _outcome(1, ChildFailure(rank=1, exitcode=-9)))
    assert (
        r["status"] == "failed" and "signal" not in r and r["error"]["message"] == "rank 1 failed (killed by SIGKILL)"
    )


def test_a_diverged_rank0_stays_diverged_whichever_rank_torchrun_names():
    # every rank agreed on the divergence and exits 1: torchrun names whichever it saw first
    diverged = {"status": "diverged", "diverged": {"global_step": 3, "rank": 1}, "error": {"type": "Diverged"}}
    for rank in (0, 1):
        assert settle_with_torchrun(diverged, _outcome(1, ChildFailure(rank=rank, exitcode=1))) == diverged
    assert settle_with_torchrun(diverged, _outcome(1)) == diverged  # no summary read
    # a user's signal is still recorded beside it
    assert settle_with_torchrun(diverged, _outcome(143, sig=15)) == {**diverged, "signal": 15}


def test_rank0s_own_failure_stays_its_own_and_a_signal_marks_interrupted():
    own = {"status": "failed", "error": {"type": "ValueError", "message": "bad"}}
    assert settle_with_torchrun(own, _outcome(1, ChildFailure(rank=0, exitcode=1))) == own
    assert settle_with_torchrun({"status": "ok"}, _outcome(0)) == {"status": "ok"}
    r = settle_with_torchrun({"status": "running"}, _outcome(143, sig=int(signal.SIGTERM)))
    assert r == {"status": "interrupted", "signal": 15}


# --- one rank out of memory: the job is `oom`, whichever rank torchrun names (the ranks' markers) ---

OOM1 = {"rank": 1, "type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB"}
CUDNN0 = {"rank": 0, "type": "RuntimeError", "message": "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}
BROKEN = {"type": "RuntimeError", "message": "Connection closed by peer"}
OOM1_TEXT = "rank 1: OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
SETTLED_OOM = [
    # (rank 0's record, torchrun's outcome, markers, expected record)
    (  # rank 0 failed in the broken all-reduce; torchrun names rank 1 (first to exit) or rank 0
        {"status": "failed", "world_size": 2, "error": BROKEN},
        _outcome(1, ChildFailure(rank=1, exitcode=1)),
        [OOM1],
        {"status": "oom", "world_size": 2, "error": {
            "type": "OutOfMemoryError", "oom_ranks": [1], "rank0_error": BROKEN,
            "message": OOM1_TEXT + "; rank 0 then stopped with RuntimeError: Connection closed by peer"}},
    ),
    (
        {"status": "failed", "world_size": 2, "error": BROKEN},
        _outcome(1, ChildFailure(rank=0, exitcode=1)),
        [OOM1],
        {"status": "oom", "world_size": 2, "error": {
            "type": "OutOfMemoryError", "oom_ranks": [1], "rank0_error": BROKEN,
            "message": OOM1_TEXT + "; rank 0 then stopped with RuntimeError: Connection closed by peer"}},
    ),
    (  # rank 0 stopped by torchrun's SIGTERM: not the user's signal, not kept
        {"status": "interrupted", "world_size": 2, "signal": 15, "interrupted_phase": "epochs"},
        _outcome(1, ChildFailure(rank=1, exitcode=1)),
        [OOM1],
        {"status": "oom", "world_size": 2, "error": {"type": "OutOfMemoryError", "oom_ranks": [1], "message": OOM1_TEXT}},
    ),
    (  # rank 0 killed before it wrote how it ended; torchrun's summary not read
        {"status": "running", "world_size": 2},
        _outcome(1),
        [OOM1],
        {"status": "oom", "world_size": 2, "error": {"type": "OutOfMemoryError", "oom_ranks": [1], "message": OOM1_TEXT}},
    ),
    (  # rank 0 itself ran out of memory (a library's allocation): named, no second copy of its own error
        {"status": "oom", "world_size": 2, "error": {"type": "RuntimeError", "message": CUDNN0["message"]}},
        _outcome(1, ChildFailure(rank=0, exitcode=1)),
        [CUDNN0],
        {"status": "oom", "world_size": 2, "error": {
            "type": "RuntimeError", "oom_ranks": [0], "message": "rank 0: RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}},
    ),
    (  # both ranks, markers in any order: rank order, the first rank's type
        {"status": "oom", "world_size": 2, "error": {"type": "RuntimeError", "message": CUDNN0["message"]}},
        _outcome(1, ChildFailure(rank=1, exitcode=1)),
        [OOM1, CUDNN0],
        {"status": "oom", "world_size": 2, "error": {
            "type": "RuntimeError", "oom_ranks": [0, 1],
            "message": "rank 0: RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED; " + OOM1_TEXT}},
    ),
    (  # one process (an isolated worker): its own record already says it, no rank to name
        {"status": "oom", "world_size": 1, "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory"}},
        _outcome(1),
        [{"rank": 0, "type": "OutOfMemoryError", "message": "CUDA out of memory"}],
        {"status": "oom", "world_size": 1, "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory"}},
    ),
    (  # the user's signal wins: the job was stopped, whatever a rank met on the way
        {"status": "running", "world_size": 2},
        _outcome(143, sig=15),
        [OOM1],
        {"status": "interrupted", "world_size": 2, "signal": 15},
    ),
]  # fmt: skip


@pytest.mark.parametrize("rank0, outcome, markers, expected", SETTLED_OOM)
def test_a_rank_out_of_memory_settles_the_job_as_oom(rank0, outcome, markers, expected):
    before = repr(rank0)
    assert settle_with_torchrun(rank0, outcome, markers) == expected
    assert repr(rank0) == before  # the input is untouched


def test_without_markers_settling_is_unchanged():
    rank0 = {"status": "failed", "error": BROKEN}
    assert settle_with_torchrun(rank0, _outcome(1, ChildFailure(rank=1, exitcode=1)), []) == settle_with_torchrun(
        rank0, _outcome(1, ChildFailure(rank=1, exitcode=1))
    )


def test_the_marker_is_written_for_an_oom_outcome_only():
    oom = record.outcome_of(_torch_oom("CUDA out of memory. Tried to allocate 2 GiB\nmore"), received=[], phase="x")
    assert _disk(record.oom_marker(1, oom)) == OOM1
    assert _disk(record.oom_marker(0, record.outcome_of(CPU_OOM, received=[], phase="x"))) == {
        "rank": 0, "type": "RuntimeError", "message": str(CPU_OOM)
    }  # fmt: skip
    assert record.oom_marker(1, record.outcome_of(ValueError("bad"), received=[], phase="x")) is None
    assert record.oom_marker(1, record.OK) is None
    # the launcher reads the marker back from the file it was written to
    assert record.OomMarker.model_validate_json(record.oom_marker(1, oom).model_dump_json()) == record.OomMarker(**OOM1)
    assert record.oom_marker_name(3) == "oom-rank3.json" and Path("oom-rank3.json").match(record.OOM_MARKER_GLOB)


@pytest.mark.parametrize(
    "outcome, markers, expected",
    [
        (_outcome(1, ChildFailure(rank=1, exitcode=1)), [OOM1],
         {"status": "oom", "error": {"type": "OutOfMemoryError", "oom_ranks": [1], "message": OOM1_TEXT}}),
        (_outcome(143, sig=15), [OOM1],
         {"status": "interrupted", "signal": 15, "error": {"type": "ChildFailedError", "message": "torchrun exited with 143"}}),
        (_outcome(1, ChildFailure(rank=1, exitcode=-9)), [],
         {"status": "failed", "error": {"type": "ChildFailedError", "message": "rank 1 failed (killed by SIGKILL)"}}),
        (_outcome(1), [], {"status": "failed", "error": {"type": "ChildFailedError", "message": "torchrun exited with 1"}}),
    ],
)  # fmt: skip
def test_a_node_without_results_says_oom_when_its_rank_ran_out(outcome, markers, expected):
    got = record.record_without_results(outcome, [record.OomMarker(**m) for m in markers], "torchrun")
    assert _disk(got) == {"schema_version": 1, **expected}


def test_a_node_without_results_says_diverged_when_its_ranks_stopped_on_a_nonfinite_loss():
    """The node that does not host rank 0 in a multi-node job: its ranks agreed on the step (train.py), each
    left its marker, and torchrun exited 1; the record names the step, not a failure."""
    ended = record.outcome_of(Diverged(0, 3, 7, float("nan"), rank=3), received=[], phase="epochs")
    written = [record.diverged_marker(r, ended).model_dump_json() for r in (3, 2)]  # what the launcher reads back
    markers = [record.DivergedMarker.model_validate_json(m) for m in written]
    assert record.diverged_marker(2, record.OK) is None
    assert record.diverged_marker(2, record.Outcome("oom", error=schema.Error())) is None
    assert Path(record.diverged_marker_name(2)).match(record.DIVERGED_MARKER_GLOB)
    got = _disk(record.record_without_results(_outcome(1, ChildFailure(rank=2, exitcode=1)), [], "torchrun", markers))
    assert got["status"] == "diverged"
    assert got["diverged"]["global_step"] == 7 and got["diverged"]["rank"] == 3
    assert got["error"]["type"] == "Diverged" and "step 7" in got["error"]["message"]
    # the user's signal still wins, as for every other ending
    signalled = _disk(record.record_without_results(_outcome(143, sig=15), [], "torchrun", markers))
    assert signalled["status"] == "interrupted" and signalled["signal"] == 15

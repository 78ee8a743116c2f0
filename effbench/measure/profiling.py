"""The profiling pass: a few extra steps under torch.profiler, run after the timed training so the
profiler's overhead never touches the timed figures.

    from effbench.measure.profiling import run_profile_pass
    info = run_profile_pass(train_step, iter(loader), device_type="cuda", out_dir=run_dir, rank=rank)

It writes, in `out_dir` (names without the `_rank{r}` suffix on rank 0):
- `trace_rank{r}.json.gz`: the Chrome trace of the active steps (open in ui.perfetto.dev or
  chrome://tracing, both read gzipped JSON);
- `profile_ops_by_device_time.txt`, `profile_ops_by_cpu_time.txt`: the top operators by self device
  time and by self CPU time (on a CPU-only run the "device" file says so and holds the CPU table);
- `profile_phases.txt`: the step's phases (PHASES plus data_wait) with their times and shares.

On CUDA it also measures, on the trace's device timeline, how much of the collective (NCCL) kernels' time
no compute kernel overlapped (`exposed_communication`): the verdict's "communication-bound" reads that, not
the all-reduce's whole device time, which counts an all-reduce hidden behind backward in full.

The caller's step labels its phases with `torch.profiler.record_function(name)` for the names in
PHASES; this pass adds `data_wait` around `next(batches)` and `step` around the call.
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effbench import schema
from effbench.launch.peer_abort import StepAbort
from effbench.results import atomic_write_text, output_file
from effbench.run import faults
from effbench.run.timing import DeviceClock, device_clock

from effbench.measure.labels import (  # noqa: F401 - the names every reader of the pass imports from here
    DATA_WAIT,
    PHASE_ALL_REDUCE,
    PHASE_BACKWARD,
    PHASE_FORWARD,
    PHASE_H2D,
    PHASE_OPTIMIZER,
    PHASES,
    STEP,
)

OPS_BY_DEVICE_FILE = "profile_ops_by_device_time"
OPS_BY_CPU_FILE = "profile_ops_by_cpu_time"
PHASES_FILE = "profile_phases"


def _suffixed(stem: str, rank: int) -> str:
    return f"{stem}.txt" if rank == 0 else f"{stem}_rank{rank}.txt"


def _self_device_sort_key(averages: Any) -> str:
    """`self_device_time_total` on torch >= 2.4, `self_cuda_time_total` before it."""
    sample = next(iter(averages), None)
    if sample is not None and not hasattr(sample, "self_device_time_total"):
        return "self_cuda_time_total"
    return "self_device_time_total"


def _on_cpu(evt: Any) -> bool:
    return str(getattr(evt, "device_type", "CPU")).rsplit(".", 1)[-1] == "CPU"


def _merge_overlaps(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _is_allreduce(name: str) -> bool:
    key = name.lower().replace("_", "")
    return "allreduce" in key and key != PHASE_ALL_REDUCE.replace("_", "")


def _is_comm_kernel(name: str) -> bool:
    """NCCL's device kernels: ncclKernel_AllReduce_... (NCCL < 2.19), ncclDevKernel_AllReduce_... (later)."""
    return name.lower().startswith("nccl")


def _covered_us(spans: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Length of the merged `spans` that the merged `cover` overlaps (both sorted, disjoint)."""
    total, j = 0.0, 0
    for start, end in spans:
        while j < len(cover) and cover[j][1] <= start:
            j += 1
        k = j
        while k < len(cover) and cover[k][0] < end:
            total += min(end, cover[k][1]) - max(start, cover[k][0])
            k += 1
    return total


@dataclass
class Comm:
    """The collectives on a CUDA trace's device timeline (exposed_communication), or why they could not be read."""

    comm_kernel_s: float | None = None
    exposed_comm_s: float | None = None
    """Over all the active steps; observe holds it, per step, against the timed step (exposed_share)."""
    exposed_comm_error: str | None = None


@dataclass
class ProfileInfo:
    """What the profiling pass measured and wrote (run_profile_pass); observe.summarize makes the record's
    profile section of it."""

    phases: list[schema.ProfilePhase]
    """phase_breakdown's rows."""
    phase_table: str
    tables: dict[str, Path]
    """by_device_time, by_cpu_time, phases: the files written."""
    trace: Path | None
    profiled_step_time_s: float | None
    """Mean host wall time of an active step (data wait + step, after a device sync on CUDA); None when no
    active step ran."""
    profiled_step_times_s: list[float]
    """The samples, to judge the cost against the timed steps' noise."""
    active_steps: int
    wait_steps: int
    warmup_steps: int
    device_table: bool
    """False on CPU-only runs."""
    comm: Comm | None = None
    """CUDA: the collectives on the trace's timeline."""
    ops: Any = None
    """The active steps' ops for the roofline (measure/op_events.OpTrace); None when no active step ran."""


def _device_and_stream(evt: dict[str, Any]) -> tuple[Any, Any]:
    """A device event's (device, stream): its args name them; the process and thread ids stand in without."""
    args = evt.get("args")
    args = args if isinstance(args, dict) else {}
    return args.get("device", evt.get("pid")), args.get("stream", evt.get("tid"))


def exposed_communication(trace_events: Iterable[dict[str, Any]]) -> Comm:
    """Communication time on the device timeline of a Chrome trace (torch.profiler's export_chrome_trace
    events), in seconds: `comm_kernel_s`, the union of the collective (NCCL) kernels' spans, and
    `exposed_comm_s`, the part of it during which no compute kernel of the training step ran on the same
    device. DDP launches its all-reduces on NCCL's own stream while backward's kernels run on the compute
    stream; an all-reduce that ran entirely beside backward kernels costs the step nothing and is not
    exposed. Kernel events are written as {"ph": "X", "cat": "kernel", "pid": device, "tid": stream, "ts",
    "dur" (us), "args": {"device", "stream", ...}} (torch/profiler/_chrome_trace_export.py:195-210;
    _trace_validator.py:146-149 reads them by args device and stream the same way); memory copies are
    neither communication nor compute here.

    Only the training streams' kernels hide communication: the streams that carry the pass's `step` range
    on the device timeline (Kineto writes a record_function range as a "gpu_user_annotation" span on each
    stream that ran kernels launched inside it). A kernel on another stream, such as DALI's decode for a
    later batch, overlaps the all-reduce without making the step any shorter. A trace without that
    annotation on a device (one not written by the profiling pass) counts every other kernel there.

    Only communication inside a step counts (N1, round four): the pass's agreements between steps (one
    all_gather each, `_Steps.run`) are collectives too, and under NCCL their kernels, which also wait for the
    slowest rank to arrive, read as exposed communication. A collective kernel counts for the part of it inside
    the `step` ranges on its device (on any stream: Kineto marks NCCL's stream too for the all-reduces launched
    inside the step); a device without those ranges counts all of it."""
    events = list(trace_events)
    comm: dict[Any, list[tuple[float, float]]] = {}
    compute: dict[Any, dict[Any, list[tuple[float, float]]]] = {}  # device -> stream -> spans
    training: dict[Any, set[Any]] = {}
    steps: dict[Any, list[tuple[float, float]]] = {}  # device -> the step ranges' spans, every stream's
    for evt in events:
        if evt.get("ph") != "X":
            continue
        cat = str(evt.get("cat", "")).lower()
        if cat == "gpu_user_annotation" and evt.get("name") == STEP:
            device, stream = _device_and_stream(evt)
            training.setdefault(device, set()).add(stream)
            begin = float(evt["ts"])
            steps.setdefault(device, []).append((begin, begin + float(evt.get("dur") or 0.0)))
            continue
        if cat != "kernel":
            continue
        start = float(evt["ts"])
        span = (start, start + float(evt.get("dur") or 0.0))
        device, stream = _device_and_stream(evt)
        if _is_comm_kernel(str(evt.get("name", ""))):
            comm.setdefault(device, []).append(span)
        else:
            compute.setdefault(device, {}).setdefault(stream, []).append(span)
    total_us = exposed_us = 0.0
    for device, spans in comm.items():
        merged = _merge_overlaps(spans)
        if device in steps:  # the parts inside a step: the agreements between steps are no step's
            merged = _intersect(merged, _merge_overlaps(steps[device]))
        length = sum(e - s for s, e in merged)
        by_stream = compute.get(device, {})
        streams = training.get(device, set(by_stream))
        cover = [span for stream in streams for span in by_stream.get(stream, [])]
        total_us += length
        exposed_us += length - _covered_us(merged, _merge_overlaps(cover))
    return Comm(comm_kernel_s=total_us / 1e6, exposed_comm_s=exposed_us / 1e6)


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of the merged spans `a` inside the merged spans `b`."""
    out = []
    for s1, e1 in a:
        for s2, e2 in b:
            lo, hi = max(s1, s2), min(e1, e2)
            if hi > lo:
                out.append((lo, hi))
    return out


def exposed_share(exposed_comm_s: float | None, active_steps: int, timed_step_times_s: Sequence[float]) -> float | None:
    """The exposed communication of one profiled step over the timed loop's mean step time. The pass's own
    step time is not the denominator: record_shapes, profile_memory and with_flops inflate its host time,
    most on small steps, exactly the multi-GPU runs where communication matters. None without both."""
    if exposed_comm_s is None or active_steps < 1 or not timed_step_times_s:
        return None
    step_s = sum(timed_step_times_s) / len(timed_step_times_s)
    return min(1.0, exposed_comm_s / active_steps / step_s) if step_s > 0 else None


def read_trace_events(path: Path) -> list[dict[str, Any]]:
    """The `traceEvents` of a Chrome trace file (plain or gzipped JSON)."""
    import json

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return list(json.load(f).get("traceEvents") or [])


def phase_breakdown(events: Iterable[Any], *, with_device: bool) -> list[schema.ProfilePhase]:
    """One row per phase (data_wait first, then PHASES) from the profiler's events (`prof.events()`).

    A phase's CPU time is the host wall time inside its record_function ranges, summed over the
    active steps (inclusive of nested ranges, like "CPU total"). `cpu_share_of_step` divides it by
    the time in `step` + `data_wait`, i.e. the whole iteration.

    Device time (CUDA only) is the duration of the kernels launched while the phase's range was open,
    whichever thread launched them. This is deliberately by time window rather than by the ranges'
    own `device_time_total`: on CUDA, autograd runs backward ops on its own device thread, outside
    the "backward" range's call tree, so the tree would credit backward with almost no kernels.
    `device_share_of_step` divides by the device time of `step`. A phase that never ran has calls 0
    and zero times: it was looked for and not seen. Times are in seconds (the profiler's are in us).
    """
    labels = (DATA_WAIT, STEP, *PHASES)
    windows: dict[str, list[tuple[float, float]]] = {name: [] for name in labels}
    launches: list[tuple[float, float]] = []  # (op start us, kernel time us)
    for evt in events:
        if not _on_cpu(evt) or getattr(evt, "is_async", False):
            continue
        start, end = float(evt.time_range.start), float(evt.time_range.end)
        if evt.name in windows:
            windows[evt.name].append((start, end))
            continue  # a range's own "kernels" would be its GPU-side annotation span: not work
        if _is_allreduce(evt.name):
            # DDP all-reduces from autograd hooks, where no record_function can label it: the
            # collective's own op (c10d::allreduce_, nccl:all_reduce, gloo:all_reduce) is the window.
            windows[PHASE_ALL_REDUCE].append((start, end))
        if getattr(evt, "is_user_annotation", False):
            continue
        kernels = getattr(evt, "kernels", None) or ()
        if kernels:
            launches.append((start, float(sum(k.duration for k in kernels))))
    windows[PHASE_ALL_REDUCE] = _merge_overlaps(windows[PHASE_ALL_REDUCE])  # nested collective ops
    launches.sort()
    starts = [t for t, _ in launches]
    cumulative = [0.0]
    for _, d in launches:
        cumulative.append(cumulative[-1] + d)

    def cpu_s(name: str) -> float:
        return sum(e - s for s, e in windows[name]) / 1e6

    def dev_s(name: str) -> float:
        total = 0.0
        for s, e in windows[name]:
            lo, hi = bisect.bisect_left(starts, s), bisect.bisect_right(starts, e)
            total += cumulative[hi] - cumulative[lo]
        return total / 1e6

    iteration_cpu_s = cpu_s(STEP) + cpu_s(DATA_WAIT)
    step_dev_s = dev_s(STEP)
    rows = []
    for name in (DATA_WAIT, *PHASES):
        row = schema.ProfilePhase(
            phase=name,
            calls=len(windows[name]),
            cpu_time_s=cpu_s(name),
            cpu_share_of_step=cpu_s(name) / iteration_cpu_s if iteration_cpu_s > 0 else None,
        )
        if with_device:  # absent on the CPU (not null): no device timeline was recorded
            row.device_time_s = dev_s(name)
            row.device_share_of_step = dev_s(name) / step_dev_s if step_dev_s > 0 else None
        rows.append(row)
    return rows


def phase_table(rows: list[schema.ProfilePhase]) -> str:
    """The phase rows as a plain-text table (tabulate), a column per field the rows hold."""
    from tabulate import tabulate

    def fmt(v: Any) -> Any:
        return "-" if v is None else v

    dumped = [r.model_dump(exclude_unset=True) for r in rows]
    headers = list(dumped[0]) if dumped else []
    body = [[fmt(r.get(h)) for h in headers] for r in dumped]
    return tabulate(body, headers=headers, floatfmt=".4f")


class ProfilePassFailed(Exception):
    """The profiling pass failed on a rank; every rank raises it at the same agreement point."""


AgreeOnErrors = Callable[[str | None], list[Any]]
"""This rank's error (None: fine) in, every rank's out, in rank order (DistContext.gather)."""


def _alone(error: str | None) -> list[Any]:
    return [error]


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _agreed(agree: AgreeOnErrors, error: str | None) -> None:
    """Raise ProfilePassFailed on every rank if any rank's error is not None (the lowest such rank's)."""
    errors = agree(error)
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if failed:
        r, e = failed[0]
        raise ProfilePassFailed(e if len(errors) == 1 else f"rank {r}: {e}")


def _name_the_rank(prof: Any, rank: int) -> None:
    """Put `distributedInfo` (rank, world size) in the trace of a process with no process group: torch writes
    it only under one (torch/profiler/profiler.py:426-431, _get_distributed_info), and HolisticTraceAnalysis
    and Perfetto read the rank from it. Preset metadata is written when the trace starts (profiler.py:451-453)."""
    import json

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        prof.preset_metadata_json("distributedInfo", json.dumps(dict(rank=rank, world_size=1)))


def _gzip_file(src: Path, dst: Path) -> None:
    """Compress src into dst (results.output_file: a temporary name, so dst is whole or absent) and remove src."""
    # The 17 MB smoke trace: level 9 took 0.39 s for 0.88 MB, level 6 0.09 s for 0.98 MB.
    with open(src, "rb") as fin, output_file(dst) as out, gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as gz:
        shutil.copyfileobj(fin, gz)
    src.unlink()


def run_profile_pass(
    step: Callable[[Any], Any],
    batches: Iterator[Any],
    *,
    device_type: str,
    out_dir: Path,
    rank: int = 0,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    row_limit: int = 15,
    clock: DeviceClock | None = None,
    agree: AgreeOnErrors | None = None,
    abort: StepAbort | None = None,
) -> ProfileInfo:
    """Run wait + warmup + active steps under torch.profiler; write the trace and tables.

    `clock`: the run's (timing.device_clock), the simulator's in tests. Each step starts with the device
    idle and ends with the training stream's wait, as the timed loop's (run/timing.py).
    `agree`: every rank's error at the same point, by rank (DistContext.gather); alone, this process's.
    When any rank failed, every rank raises ProfilePassFailed at the same point, naming that rank: a
    failed pass voids the profile, never the run, and never leaves a rank in a collective alone.
    `abort`: under a process group, the channel for a failure inside a step, past the agreement, where the
    peers already wait in the step's collectives (launch/peer_abort.py): every rank raises ProfilePassFailed
    in seconds, and the group is torn down (later gathers go through the store).

    Returns the ProfileInfo: the phase rows and table, the files, the active steps' times, the steps
    actually run in each stage. Stops early, and says so in the counts, if `batches` runs out.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError("profile.active must be at least 1 and profile.wait / profile.warmup at least 0")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    on_cuda = device_type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    if not on_cuda:
        # Kineto probes for GPUs even for a CPU-only trace and logs "ERROR: gpuGetDeviceCount failed"
        # plus start/stop lines: noise that looks like a failure. Read when the profiler starts; a
        # user's own setting wins. On CUDA its messages (CUPTI errors) matter, so they stay.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    if clock is None:
        clock = DeviceClock() if not on_cuda else device_clock(torch.device("cuda", torch.cuda.current_device()))
    plain_trace = out_dir / f"trace_rank{rank}.json"
    trace = out_dir / f"trace_rank{rank}.json.gz"
    plain_trace.unlink(missing_ok=True)  # never report a previous pass's trace as this one's
    trace.unlink(missing_ok=True)

    def on_trace_ready(prof: Any) -> None:
        try:
            prof.export_chrome_trace(str(plain_trace))
        except BaseException:
            plain_trace.unlink(missing_ok=True)
            raise

    prof = profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
        # Device memory per op on CUDA. On the CPU it would hook c10's CPU allocator, which logs a raw C++
        # warning ("[W... CPUAllocator.cpp:245] Memory block of unknown size was allocated before the profiling
        # started") for every tensor made before the pass and freed in it: c10's LOG, no Python warning to filter.
        profile_memory=on_cuda,
        with_flops=True,
    )
    _name_the_rank(prof, rank)
    agree = agree or _alone
    # The ranks agree on the pass's outcome at each point where one could stop alone (the profiler's start,
    # each batch, the trace and the tables at the end): a rank that left for the run's final gather while
    # the others went on into the next step's all-reduce hung the job. An agreement is one all_gather of
    # every rank's error; they pair up whichever point each rank is at, as no other collective lies between.
    _start(prof, agree)
    steps = _Steps(prof, step, batches, clock, agree, wait, warmup, active, abort)
    error = None
    try:
        steps.run()
    except ProfilePassFailed:
        raise
    except Exception as e:  # noqa: BLE001 - an error after a step's collectives (the trace's export): agreed below
        error = _one_line(e)
    finally:
        try:  # ends a cut-short active window and fires on_trace_ready (the export)
            prof.stop()
        except Exception as e:  # noqa: BLE001
            error = error or _one_line(e)
    info = None
    if error is None:
        try:
            info = _outputs(prof, steps.counts, steps.active_times_s, out_dir, plain_trace, trace, rank, device_type,
                            row_limit)  # fmt: skip
        except Exception as e:  # noqa: BLE001
            error = _one_line(e)
    for partial in (plain_trace, plain_trace.with_name(plain_trace.name + ".tmp")):
        partial.unlink(missing_ok=True)  # never left behind by a failed export, nor torch's own temporary file
    _agreed(agree, error)
    assert info is not None
    return info


def _start(prof: Any, agree: AgreeOnErrors) -> None:
    """Start the profiler on every rank, or on none (ProfilePassFailed, each rank's profiler stopped)."""
    error, started = None, False
    try:
        faults.fail_profile_pass("start")
        prof.start()
        started = True
    except Exception as e:  # noqa: BLE001
        error = _one_line(e)
    try:
        _agreed(agree, error)
    except ProfilePassFailed:
        if started:
            with contextlib.suppress(Exception):
                prof.stop()
        raise


@dataclass
class _Steps:
    """The pass's wait + warmup + active steps, with an agreement before each step's collectives."""

    prof: Any
    step: Callable[[Any], Any]
    batches: Iterator[Any]
    clock: DeviceClock
    agree: AgreeOnErrors
    wait: int
    warmup: int
    active: int
    abort: StepAbort | None = None
    counts: dict[str, int] = field(default_factory=lambda: {"wait": 0, "warmup": 0, "active": 0})
    active_times_s: list[float] = field(default_factory=list)

    def run(self) -> None:
        from torch.profiler import record_function

        for i in range(self.wait + self.warmup + self.active):
            stage = "wait" if i < self.wait else "warmup" if i < self.wait + self.warmup else "active"
            self.clock.sync_device()  # start each step with the device idle, so its time is its own
            t0 = self.clock.now()
            error = None
            try:
                with record_function(DATA_WAIT):
                    batch = next(self.batches)
                faults.fail_profile_pass("step")
            except StopIteration:  # every rank's shard holds the same number of batches: all stop here
                return
            except Exception as e:  # noqa: BLE001 - agreed on below, then raised by every rank
                error = _one_line(e)
            data_s = self.clock.now() - t0
            # Before the step's collectives: a rank that cannot step stops them all. Not the step's time (N10):
            # under DDP it waits for the slowest rank to get here.
            _agreed(self.agree, error)
            t1 = self.clock.now()
            self._step(batch, record_function)
            if stage == "active":
                self.active_times_s.append(data_s + self.clock.now() - t1)
            self.counts[stage] += 1
            self.prof.step()

    def _step(self, batch: Any, record_function: Any) -> None:
        """One step, ended by the training stream's wait. Past the agreement the peers are in the step's
        collectives: a failure here goes through `abort` (N7), never through another collective."""
        try:
            faults.fail_profile_pass("in-step")
            with record_function(STEP):
                self.step(batch)
            self.clock.sync_stream()  # wait on the host for the step's queued kernels (timing.py)
        except Exception as e:
            if self.abort is None:
                raise
            raise ProfilePassFailed(self.abort.fail(_one_line(e))) from None
        peer = self.abort.peer_failure() if self.abort is not None else None
        if peer is not None:  # NCCL: the step returned on communicators a peer's failure had aborted
            raise ProfilePassFailed(peer)


def _outputs(
    prof: Any,
    counts: dict[str, int],
    active_times_s: list[float],
    out_dir: Path,
    plain_trace: Path,
    trace: Path,
    rank: int,
    device_type: str,
    row_limit: int,
) -> ProfileInfo:
    """The pass's files and its ProfileInfo, once the profiler has stopped (a pass that never reached the
    active steps has no trace)."""
    on_cuda = device_type == "cuda"
    faults.fail_profile_pass("end")
    comm: Comm | None = None
    try:
        if plain_trace.exists():
            if on_cuda and active_times_s:  # the collectives on the device timeline, before the file is gzipped
                try:
                    comm = exposed_communication(read_trace_events(plain_trace))
                except (ValueError, KeyError, TypeError) as e:  # an unreadable trace: no share, the pass goes on
                    comm = Comm(exposed_comm_error=f"{type(e).__name__}: {e}".splitlines()[0])
            _gzip_file(plain_trace, trace)
    finally:
        # A trace cut short (disk full) is never left behind, nor torch's own temporary file.
        for partial in (plain_trace, plain_trace.with_name(plain_trace.name + ".tmp")):
            partial.unlink(missing_ok=True)

    averages: Any = prof.key_averages() if counts["active"] else []
    cpu_path = out_dir / _suffixed(OPS_BY_CPU_FILE, rank)
    dev_path = out_dir / _suffixed(OPS_BY_DEVICE_FILE, rank)
    phases_path = out_dir / _suffixed(PHASES_FILE, rank)
    if counts["active"]:
        cpu_table = averages.table(sort_by="self_cpu_time_total", row_limit=row_limit)
        if on_cuda:
            dev_text = averages.table(sort_by=_self_device_sort_key(averages), row_limit=row_limit)
        else:
            dev_text = (
                f"# CPU-only run ({device_type}): no device activity was recorded, so there is no table "
                "by device time. Top operators by self CPU time:\n" + cpu_table
            )
    else:
        cpu_table = dev_text = "# no active profiler steps ran (the batches ran out first)"
    header = (
        f"# rank {rank}; {counts['active']} active step(s) after {counts['wait']} wait + {counts['warmup']} warm-up\n"
    )
    atomic_write_text(cpu_path, header + cpu_table + "\n")
    atomic_write_text(dev_path, header + dev_text + "\n")

    phases = phase_breakdown(prof.events() if counts["active"] else [], with_device=on_cuda)
    ops = None
    if counts["active"]:  # the roofline's ops (measure/op_events.py)
        from effbench.measure import op_events

        events = list(prof.events())
        ops = op_events.collect(events, on_cuda=on_cuda, dtypes_of=op_events.kineto_dtypes(prof, events))
    table = phase_table(phases)
    atomic_write_text(phases_path, header + table + "\n")
    return ProfileInfo(
        phases=phases,
        phase_table=table,
        tables={"by_device_time": dev_path, "by_cpu_time": cpu_path, "phases": phases_path},
        trace=trace if trace.exists() else None,
        profiled_step_time_s=sum(active_times_s) / len(active_times_s) if active_times_s else None,
        profiled_step_times_s=active_times_s,
        active_steps=counts["active"],
        wait_steps=counts["wait"],
        warmup_steps=counts["warmup"],
        device_table=on_cuda,
        comm=comm,
        ops=ops,
    )

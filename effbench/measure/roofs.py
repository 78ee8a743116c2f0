"""This machine's roofs for the roofline (analysis/roofline.py): the attainable dense-matmul FLOP/s and memory
bandwidth on the run's device, measured by two microbenchmarks that share no code with the model path, outside
the timed steps (run/rank.py measures them before the profiling pass), and cached per machine.

    roofs = machine_roofs(device, precisions=("bf16", "fp32"))      # schema.Roofs, from the cache or measured
    roofs = measure_roofs(device, precisions=("fp32",))             # measured now, no cache

Compute: C = A @ B (torch.mm, N x N operands) at each precision, 2 N^3 FLOPs a rep. Memory: dst.copy_(src) of a
buffer well beyond the last-level cache (on the CPU 128 MiB, an EPYC CCD's L3 is 32 MiB; on a GPU 1 GiB, an
H100's L2 is 50 MB), counted as bytes read + bytes written (STREAM's "Copy" convention: 2 x the buffer, no
write-allocate traffic). Every buffer is allocated before the first rep, so no rep pays page faults or the
allocator. Each figure is the best rep after warm-up, STREAM's convention for an attainable rate.

Timing: on CUDA, CUDA events around each rep on the current stream (the device's clock; one host sync after
the reps, none inside them); on the CPU, time.perf_counter around each rep (torch's CPU ops run to completion
before they return) on the process's torch threads, which are the run's (run/rank.py sets them).

Precisions: "fp32" is full FP32 (torch.backends.cuda.matmul.allow_tf32 False for the rep); "tf32" the same
matmul with TF32 allowed; "bf16" / "fp16" operands of that dtype (FP32 accumulate, as autocast runs them).

The cache is one JSON file (cache_path(): $EFFBENCH_CACHE_DIR, else $XDG_CACHE_HOME/effbench, else
~/.cache/effbench; the image sets XDG_CACHE_HOME=/cache) keyed by hostname, device, torch version, threads and
precisions, and on a GPU its UUID and power limit, so a sweep measures once per machine. An entry is used for a
day, and only by a run whose device is in the load class it was measured in (cache_decision: on the CPU, other
processes' use of the cores over a short sample; on a GPU, NVML's other compute processes and clock-event
reasons); only an idle device's roofs are cached (cache_refusal). Under torchrun, local rank 0 measures or reads
them once for the node and hands them to the node's other ranks (machine_roofs). Delete the file to measure
again; `effbench selftest` always measures afresh.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from effbench import schema

CACHE_FILE = "roofs.json"
CACHE_SCHEMA = 2  # 2: entries carry their conditions; GPU keys their UUID and power limit
CPU_MATMUL_N = 1024  # 2.1 GFLOP a rep: ~40 ms on one EPYC core's AVX2 FMAs, well past the small-matrix regime
GPU_MATMUL_N = 8192  # 1.1 TFLOP a rep: ~1.5 ms at an H100's bf16 rate, saturating its 132 SMs
CPU_COPY_BYTES = 128 * 2**20
GPU_COPY_BYTES = 2**30
CPU_REPS, GPU_REPS = 5, 20
WARMUP_REPS = 2
DTYPE_OF = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def cache_path(environ: dict[str, str] | None = None) -> Path:
    """The roofs' cache file: $EFFBENCH_CACHE_DIR, else $XDG_CACHE_HOME/effbench, else ~/.cache/effbench."""
    env = os.environ if environ is None else environ
    if env.get("EFFBENCH_CACHE_DIR"):
        return Path(env["EFFBENCH_CACHE_DIR"]) / CACHE_FILE
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "effbench" / CACHE_FILE


def cache_key(
    *,
    host: str,
    device: str,
    torch_version: str,
    threads: int,
    precisions: Sequence[str],
    gpu_uuid: str | None = None,
    power_limit_w: float | None = None,
) -> str:
    """What a cached entry must match: host, device, torch, threads and precisions; on a GPU also its UUID and
    power limit (two GPUs of one model name, or one GPU capped lower, have other roofs)."""
    key = f"{host} | {device} | torch {torch_version} | {threads} threads | {','.join(sorted(set(precisions)))}"
    if gpu_uuid is not None:
        limit = f"{power_limit_w:g} W" if power_limit_w is not None else "power limit unknown"
        key += f" | {gpu_uuid} | {limit}"
    return key


def device_label(device: Any) -> str:
    """The GPU's name, or the CPU's model (what a cache entry is for)."""
    import torch

    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    from effbench.system.hardware import cpu_model

    return f"cpu ({cpu_model() or 'unknown model'})"


def _timer(device: Any) -> Callable[[Callable[[], Any], int], list[float]]:
    """(fn, reps) -> each rep's seconds: CUDA events on the device, perf_counter on the CPU."""
    import torch

    if device.type != "cuda":

        def cpu(fn: Callable[[], Any], reps: int) -> list[float]:
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return times

        return cpu

    def cuda(fn: Callable[[], Any], reps: int) -> list[float]:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)  # the one host sync: after the reps, so none waits on the host
        return [start.elapsed_time(end) / 1e3 for start, end in pairs]

    return cuda


def matmul_tflops(device: Any, precision: str, *, n: int | None = None, reps: int | None = None) -> tuple[float, str]:
    """Best rep's TFLOP/s of torch.mm on N x N operands at `precision`, and how it was taken."""
    import torch

    cuda = device.type == "cuda"
    n = n or (GPU_MATMUL_N if cuda else CPU_MATMUL_N)
    reps = reps or (GPU_REPS if cuda else CPU_REPS)
    dtype = getattr(torch, DTYPE_OF[precision])
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    out = torch.empty(n, n, device=device, dtype=dtype)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        timer = _timer(device)
        timer(lambda: torch.mm(a, b, out=out), WARMUP_REPS)
        best = min(timer(lambda: torch.mm(a, b, out=out), reps))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    clock = "CUDA events" if cuda else f"perf_counter, {torch.get_num_threads()} thread(s)"
    how = f"torch.mm {n}x{n} {precision}, best of {reps} reps after {WARMUP_REPS} warm-up, {clock}"
    return 2.0 * n**3 / best / 1e12, how


def copy_gb_s(device: Any, *, nbytes: int | None = None, reps: int | None = None) -> tuple[float, str]:
    """Best rep's GB/s of dst.copy_(src) over an fp32 buffer of `nbytes`, counting 2 x nbytes (read + write)."""
    import torch

    cuda = device.type == "cuda"
    nbytes = nbytes or (GPU_COPY_BYTES if cuda else CPU_COPY_BYTES)
    reps = reps or (GPU_REPS if cuda else CPU_REPS)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.zeros_like(src)  # both touched before the reps: no first-touch page faults inside them
    timer = _timer(device)
    timer(lambda: dst.copy_(src), WARMUP_REPS)
    best = min(timer(lambda: dst.copy_(src), reps))
    clock = "CUDA events" if cuda else f"perf_counter, {torch.get_num_threads()} thread(s)"
    how = (
        f"dst.copy_(src) of {nbytes / 2**20:,.0f} MiB, read + write counted (STREAM Copy), best of {reps} reps "
        f"after {WARMUP_REPS} warm-up, {clock}"
    )
    return 2.0 * (nbytes // 4) * 4 / best / 1e9, how


def measure_roofs(device: Any, *, precisions: Sequence[str], sm_count: int | None = None) -> schema.Roofs:
    """Both roofs measured now on `device` (no cache), with the GPU's datasheet peaks beside them."""
    import torch

    from effbench.analysis.efficiency import peak_mem_gb_s, peak_tflops

    cuda = device.type == "cuda"
    name = device_label(device)
    gpu = name if cuda else None
    compute = []
    try:
        for p in dict.fromkeys(precisions):  # in order, once each
            tflops, how = matmul_tflops(device, p)
            compute.append(
                schema.ComputeRoof(precision=p, tflops=tflops, datasheet_tflops=peak_tflops(gpu, p, sm_count), how=how)
            )
        gb_s, how = copy_gb_s(device)
    finally:
        if cuda:  # the copy's 2 x 1 GiB back to the device, not kept in torch's cache for the profiling pass (N7)
            torch.cuda.empty_cache()
    return schema.Roofs(
        device=name,
        threads=torch.get_num_threads(),
        compute=compute,
        memory_gb_s=gb_s,
        memory_datasheet_gb_s=peak_mem_gb_s(gpu),
        memory_how=how,
        measured_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        cached=False,
    )


def run_precisions(precision: str, *, device_type: str, conv_tf32: bool, matmul_tf32: bool, capability: Any = None) -> list[str]:  # fmt: skip
    """The roofs a run needs: its convolutions' and matmuls' columns (analysis.efficiency.kind_precisions' rule:
    fp32 convolutions on TF32 where cuDNN may use it) and fp32, where they differ."""
    from effbench.analysis.efficiency import peak_precision

    if device_type != "cuda":
        return list(dict.fromkeys([precision, "fp32"]))
    conv = peak_precision(precision, tf32_enabled=conv_tf32, capability=capability)
    mm = peak_precision(precision, tf32_enabled=matmul_tf32, capability=capability)
    return list(dict.fromkeys([conv, mm, "fp32"]))


def _read_cache(path: Path) -> dict[str, Any]:
    """The cache's entries; {} when it is absent or unreadable (a damaged cache is measured over, never fatal)."""
    return dict(_read_file(path)["roofs"])


def cached(path: Path, key: str) -> schema.Roofs | None:
    """The cache's entry for `key`, typed; None when absent or not a valid entry."""
    from pydantic import ValidationError

    entry = _read_cache(path).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return schema.Roofs.model_validate(entry)
    except ValidationError:
        return None


# where this run read or wrote the roofs: not part of a cache entry
_RUN_LOCAL = {
    schema.field_path(schema.Roofs, get)
    for get in (
        lambda r: r.cached,
        lambda r: r.cache_file,
        lambda r: r.cache_key,
        lambda r: r.cache_note,
        lambda r: r.cache_age_s,
        lambda r: r.why_measured,
        lambda r: r.node_shared,
    )
}


def store(path: Path, key: str, roofs: schema.Roofs) -> str | None:
    """Add `roofs` under `key` to the cache (atomically); the reason when it cannot be written, else None."""
    from effbench import results

    data = _read_file(path)
    entries = data["roofs"]
    entries[key] = roofs.model_dump(exclude_unset=True, exclude=_RUN_LOCAL)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        results.write_json(path, {**data, "roofs": entries})
    except Exception as e:  # noqa: BLE001 - a read-only or full cache costs a re-measure next time, not the run
        return f"not cached ({type(e).__name__}: {e})".splitlines()[0]
    return None


# A cached measurement is reused for a day: long enough for a sweep, a day's runs or a selftest not to measure
# again, short enough that a driver, BIOS or clock change is measured over within a day.
CACHE_MAX_AGE_S = 24 * 3600.0
IDLE, LOADED = "idle", "loaded"


def _measured_at_s(roofs: schema.Roofs) -> float | None:
    try:
        at = dt.datetime.fromisoformat(str(roofs.measured_at))
    except ValueError:
        return None
    if at.tzinfo is None:  # written by this module in UTC
        at = at.replace(tzinfo=dt.timezone.utc)
    return at.timestamp()


def cache_decision(entry: schema.Roofs | None, now: schema.RoofConditions, now_s: float) -> str | None:
    """Pure: None when the cached `entry` stands for this run's roofs; else why they are measured afresh. An
    entry is used when under a day old and measured in the load class the run's device is in now (an idle
    machine's roofs are not a loaded machine's: issue 47 item 9 read 227.6 GFLOP/s cached against 25.6 measured)."""
    if entry is None:
        return "no cached roofs for this device"
    at = _measured_at_s(entry)
    if at is None or not 0.0 <= now_s - at < CACHE_MAX_AGE_S:
        return "the cached roofs are over a day old" if at is not None else "the cached roofs have no time"
    then = entry.conditions
    if then is None or then.load_class is None:
        return "the cached roofs do not say under which load they were measured"
    if then.load_class != now.load_class:
        return f"the cached roofs were measured {then.load_class}, the device is {now.load_class} now"
    return None


def cache_refusal(before: schema.RoofConditions, during: schema.RoofConditions | None = None) -> str | None:
    """Pure: why roofs measured under these conditions are not cached for later runs (used by this one only);
    None when the device was idle before and during the measurement. The figures are in the roofs' conditions."""
    for when, c in (("before", before), ("during", during)):
        if c is not None and c.load_class != IDLE:
            return f"not cached: the device was {c.load_class} {when} the microbenchmarks"
    return None


# --- the device's load: the CPU's from psutil, a GPU's from NVML ---------------------------------------------------
CPU_SAMPLE_S = 0.5
LOADED_CORE_SHARE = 0.25  # other processes on a quarter of the cores slow a run that uses them all
LOADED_MIN_CORES = 0.5  # and on a small machine, half a core at least


def cpu_load_class(others_cores: float, machine_cores: int) -> str:
    """Pure: idle or loaded, by other processes' cores' worth of CPU time against the machine's cores."""
    return LOADED if others_cores >= max(LOADED_MIN_CORES, LOADED_CORE_SHARE * machine_cores) else IDLE


def cpu_conditions(others_cores: float, machine_cores: int) -> schema.RoofConditions:
    others = max(0.0, others_cores)
    return schema.RoofConditions(
        load_class=cpu_load_class(others, machine_cores),
        detail=f"other processes used {others:.1f} of {machine_cores} cores",
        others_cores=others,
        machine_cores=machine_cores,
    )


class CpuClock:
    """The host's busy CPU seconds and this process tree's, read together: two readings give the cores'
    worth of time other processes (and other VMs, through steal) took between them."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.host_busy_s, self.own_s = _host_busy_s(), _own_tree_s()

    def others_cores(self, earlier: CpuClock) -> float:
        wall = self.wall - earlier.wall
        if wall <= 0:
            return 0.0
        return max(0.0, (self.host_busy_s - earlier.host_busy_s) - (self.own_s - earlier.own_s)) / wall


def _host_busy_s() -> float:
    """The host's busy CPU seconds over all cores (psutil.cpu_times: all but idle and iowait; guest time is
    inside user on Linux)."""
    import psutil

    t = psutil.cpu_times()
    fields = t._asdict()
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
    guest = fields.get("guest", 0.0) + fields.get("guest_nice", 0.0)
    return sum(fields.values()) - idle - guest


def _own_tree_s() -> float:
    """CPU seconds of this process and its children (the loader's workers), user + system."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a child that exited between the listing and the read
            continue
        total += t.user + t.system
    return total


def sample_cpu(sample_s: float = CPU_SAMPLE_S) -> schema.RoofConditions:
    """The CPU's load class now: other processes' use over `sample_s` seconds."""
    first = CpuClock()
    time.sleep(sample_s)
    return cpu_conditions(CpuClock().others_cores(first), os.cpu_count() or 1)


# NVML's clock-event reasons that do not make a measurement someone else's: the GPU idling (before the
# microbenchmarks), clocks an administrator set, the display clock, and the software power cap (the power limit is
# in the key: a GPU at its cap is the roof at that limit). The rest (thermal, power brake, HW slowdown, sync boost
# with other GPUs, board limit, reliability) is a transient state a cached roof must not keep.
BENIGN_CLOCK_REASONS = 0x001 | 0x002 | 0x100 | 0x004


def gpu_conditions(uuid: str | None, power_limit_w: float | None, other_processes: int | None, reasons: int | None) -> schema.RoofConditions:  # fmt: skip
    """Pure: a GPU's load class from what NVML says (None: NVML could not say)."""
    from effbench.measure.monitor import clock_event_reasons

    slowing = clock_event_reasons((reasons or 0) & ~BENIGN_CLOCK_REASONS)
    parts = []
    if other_processes is None:
        parts.append("NVML could not list its compute processes")
    else:
        parts.append(f"{other_processes} other compute process(es)" if other_processes else "no other compute process")
    parts.append(f"clocks slowed by {', '.join(slowing)}" if slowing else "no clock-event reason")
    loaded = bool(other_processes) or bool(slowing) or other_processes is None
    return schema.RoofConditions(
        load_class=LOADED if loaded else IDLE,
        detail=", ".join(parts),
        gpu_uuid=uuid,
        power_limit_w=power_limit_w,
        other_processes=other_processes,
        clock_event_reasons=slowing,
    )


def other_compute_processes(procs: Sequence[Any], own_pid: int) -> int:
    """Pure: compute processes on the device besides this one. NVML lists host PIDs, so inside a container's PID
    namespace this process's own pid is not among them: one entry is then taken to be this process (it holds a
    context on the device by the time the roofs are measured)."""
    pids = [getattr(p, "pid", None) for p in procs]
    if own_pid in pids:
        return len(pids) - 1
    return max(0, len(pids) - 1)


def read_gpu(nvml: Any, uuid: str, own_pid: int | None = None) -> schema.RoofConditions:
    """A GPU's conditions from an initialised NVML module (pynvml or a test's fake): its power limit, the other
    compute processes on it, its clock-event reasons. A failed read makes the device loaded (never cached)."""
    from effbench.measure.monitor import _read_clock_event_reasons
    from effbench.system.hardware import nvml_handle_for_uuid

    own_pid = os.getpid() if own_pid is None else own_pid
    try:
        handle = nvml_handle_for_uuid(nvml, uuid)
    except LookupError:
        return gpu_conditions(uuid, None, None, None)
    try:
        limit: float | None = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0  # mW
    except Exception:
        limit = None
    try:
        others: int | None = other_compute_processes(nvml.nvmlDeviceGetComputeRunningProcesses(handle), own_pid)
    except Exception:
        others = None
    return gpu_conditions(uuid, limit, others, _read_clock_event_reasons(nvml, handle))


def _sample_gpu(device: Any) -> schema.RoofConditions:
    from effbench.system.hardware import cuda_device_uuid
    from effbench.system.nvml import nvml_session

    import torch

    uuid = cuda_device_uuid(device.index if device.index is not None else torch.cuda.current_device())
    with nvml_session() as nvml:
        if nvml is None:
            return gpu_conditions(uuid, None, None, None)
        return read_gpu(nvml, uuid)


def watched(device: Any, run: Callable[[], schema.Roofs]) -> tuple[schema.Roofs, schema.RoofConditions | None]:
    """`run()` (the microbenchmarks) and the device's conditions while it ran: on the CPU other processes' use
    over its span (this process tree's own excluded; None for a span under CPU_SAMPLE_S, too short for the
    kernel's tick counters), on a GPU NVML's read after it (processes that arrived, clocks slowed)."""
    if getattr(device, "type", "cpu") == "cuda":
        roofs = run()
        return roofs, _sample_gpu(device)
    first = CpuClock()
    roofs = run()
    last = CpuClock()
    if last.wall - first.wall < CPU_SAMPLE_S:
        return roofs, None
    return roofs, cpu_conditions(last.others_cores(first), os.cpu_count() or 1)


def device_conditions(device: Any) -> schema.RoofConditions:
    """The run's device's load class now: a GPU's from NVML, the CPU's from a short psutil sample."""
    return _sample_gpu(device) if getattr(device, "type", "cpu") == "cuda" else sample_cpu()


# --- one measurement per node ---------------------------------------------------------------------------------------
# Every rank of a job reaches the roofs at once. Local rank 0 measures (or reads the cache) and hands its roofs to
# the node's other ranks through the cache file's `handoff` section, under a file lock; they wait for it instead
# of measuring beside it (eight GPUs' microbenchmarks at once share the node's power and the host's cores, and on
# the CPU every rank's threads would share the cores). A rank that waits HANDOFF_WAIT_S in vain measures itself.
HANDOFF_WAIT_S = 600.0
HANDOFF_POLL_S = 0.2
HANDOFF_KEEP_S = 24 * 3600.0


def job_on_node(environ: dict[str, str] | None = None) -> str | None:
    """Pure: the node's share of a torchrun job (None when this process is the node's only rank): torchrun's
    run id and its agent's pid (the ranks' parent)."""
    env = os.environ if environ is None else environ
    if int(env.get("LOCAL_WORLD_SIZE", "1") or 1) <= 1:
        return None
    return f"{socket.gethostname()} | {env.get('TORCHELASTIC_RUN_ID', 'none')} | agent {os.getppid()}"


def local_rank(environ: dict[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    return int(env.get("LOCAL_RANK", "0") or 0)


class _Lock:
    """An exclusive flock on `path` for a `with` block (POSIX); a no-op where flock is missing or the file cannot
    be made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> _Lock:
        try:
            import fcntl
        except ImportError:
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:  # an unwritable cache folder: no lock, and no cache to guard either
            return self
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases its flock
            self.fd = None


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _handoff(path: Path, job: str, roofs: schema.Roofs | None, error: str | None, now_s: float) -> None:
    """Local rank 0's roofs (or its error) for the node's other ranks, under `job`; stale handoffs dropped.
    Best effort: a cache that cannot be written makes the other ranks measure for themselves."""
    from effbench import results

    data = _read_file(path)
    kept = {
        k: v
        for k, v in data["handoff"].items()
        if isinstance(v, dict) and isinstance(v.get("at"), (int, float)) and now_s - v["at"] < HANDOFF_KEEP_S
    }
    kept[job] = {"at": now_s, "roofs": roofs.model_dump(exclude_unset=True) if roofs else None, "error": error}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        results.write_json(path, {**data, "handoff": kept})
    except Exception:  # noqa: BLE001, S110 - the other ranks then measure for themselves
        pass


def _handed(path: Path, job: str) -> schema.Roofs | str | None:
    """Local rank 0's roofs for `job`, its error as a string, or None when it has not handed them yet."""
    from pydantic import ValidationError

    entry = _read_file(path)["handoff"].get(job)
    if not isinstance(entry, dict):
        return None
    if entry.get("error"):
        return str(entry["error"])
    try:
        return schema.Roofs.model_validate(entry.get("roofs"))
    except ValidationError:
        return None


def _read_file(path: Path) -> dict[str, Any]:
    """The cache file's sections ({"schema_version", "roofs", "handoff"}), empty ones when absent or damaged."""
    from effbench import safe_files
    from effbench.errors import EffbenchError

    empty: dict[str, Any] = {"schema_version": CACHE_SCHEMA, "roofs": {}, "handoff": {}}
    try:
        data = safe_files.load_json(path, fix="delete it; the roofs are measured again")
    except (FileNotFoundError, EffbenchError, OSError):
        return empty
    if not isinstance(data, dict) or data.get("schema_version") != CACHE_SCHEMA:
        return empty
    out = dict(empty)
    for section in ("roofs", "handoff"):
        if isinstance(data.get(section), dict):
            out[section] = data[section]
    return out


def machine_roofs(
    device: Any,
    *,
    precisions: Sequence[str],
    sm_count: int | None = None,
    path: Path | None = None,
    measure: Callable[..., schema.Roofs] = measure_roofs,
    conditions: Callable[[Any], schema.RoofConditions] = device_conditions,
    watch: Callable[[Any, Callable[[], schema.Roofs]], tuple[schema.Roofs, schema.RoofConditions | None]] | None = None,
    now: Callable[[], float] = time.time,
    environ: dict[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> schema.Roofs:
    """The roofs from this machine's cache when measured there less than CACHE_MAX_AGE_S ago under the load
    class the device is in now (cache_decision), else measured now, and cached only when the device was idle
    before and during the measurement (cache_refusal). Under torchrun, once per node: local rank 0 measures or
    reads, the node's other ranks wait for its roofs (job_on_node)."""
    path = path or cache_path()
    job = job_on_node(environ)
    if job is not None and local_rank(environ) != 0:
        deadline = now() + HANDOFF_WAIT_S
        while now() < deadline:
            with _Lock(_lock_path(path)):
                got = _handed(path, job)
            if isinstance(got, str):
                raise RuntimeError(f"local rank 0 could not measure the roofs ({got})")
            if got is not None:
                got.node_shared = True
                return got
            sleep(HANDOFF_POLL_S)
    with _Lock(_lock_path(path)):
        try:
            roofs = _machine_roofs(device, precisions, sm_count, path, measure, conditions, watch or watched, now)
        except Exception as e:
            if job is not None:
                _handoff(path, job, None, f"{type(e).__name__}: {e}".splitlines()[0], now())
            raise
        if job is not None and local_rank(environ) == 0:
            _handoff(path, job, roofs, None, now())
    return roofs


def _machine_roofs(
    device: Any,
    precisions: Sequence[str],
    sm_count: int | None,
    path: Path,
    measure: Callable[..., schema.Roofs],
    conditions: Callable[[Any], schema.RoofConditions],
    watch: Callable[[Any, Callable[[], schema.Roofs]], tuple[schema.Roofs, schema.RoofConditions | None]],
    now: Callable[[], float],
) -> schema.Roofs:
    import torch

    before = conditions(device)
    key = cache_key(
        host=socket.gethostname(),
        device=device_label(device),
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        precisions=precisions,
        gpu_uuid=before.gpu_uuid,
        power_limit_w=before.power_limit_w,
    )
    hit = cached(path, key)
    why = cache_decision(hit, before, now())
    if hit is not None and why is None:
        at = _measured_at_s(hit)
        hit.cached, hit.cache_file, hit.cache_key = True, str(path), key
        hit.cache_age_s = max(0.0, now() - at) if at is not None else None
        return hit
    roofs, during = watch(device, lambda: measure(device, precisions=precisions, sm_count=sm_count))
    # the conditions that decided: the first loaded reading, else the one before
    roofs.conditions = (
        during if before.load_class == IDLE and during is not None and during.load_class != IDLE else before
    )
    roofs.why_measured = why
    note = cache_refusal(before, during) or store(path, key, roofs)
    roofs.cached, roofs.cache_file, roofs.cache_key = False, str(path), key
    if note:
        roofs.cache_note = note
    return roofs

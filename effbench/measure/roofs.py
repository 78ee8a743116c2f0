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
precisions, so a sweep measures once per machine. Delete the file to measure again; `effbench selftest` always
measures afresh.
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
CACHE_SCHEMA = 1
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


def cache_key(*, host: str, device: str, torch_version: str, threads: int, precisions: Sequence[str]) -> str:
    return f"{host} | {device} | torch {torch_version} | {threads} threads | {','.join(sorted(set(precisions)))}"


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
    for p in dict.fromkeys(precisions):  # in order, once each
        tflops, how = matmul_tflops(device, p)
        compute.append(
            schema.ComputeRoof(precision=p, tflops=tflops, datasheet_tflops=peak_tflops(gpu, p, sm_count), how=how)
        )
    gb_s, how = copy_gb_s(device)
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
    from effbench import safe_files
    from effbench.errors import EffbenchError

    try:
        data = safe_files.load_json(path, fix="delete it; the roofs are measured again")
    except (FileNotFoundError, EffbenchError, OSError):
        return {}
    entries = data.get("roofs") if isinstance(data, dict) and data.get("schema_version") == CACHE_SCHEMA else None
    return entries if isinstance(entries, dict) else {}


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
    for get in (lambda r: r.cached, lambda r: r.cache_file, lambda r: r.cache_key, lambda r: r.cache_note)
}


def store(path: Path, key: str, roofs: schema.Roofs) -> str | None:
    """Add `roofs` under `key` to the cache (atomically); the reason when it cannot be written, else None."""
    from effbench import results

    entries = _read_cache(path)
    entries[key] = roofs.model_dump(exclude_unset=True, exclude=_RUN_LOCAL)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        results.write_json(path, {"schema_version": CACHE_SCHEMA, "roofs": entries})
    except Exception as e:  # noqa: BLE001 - a read-only or full cache costs a re-measure next time, not the run
        return f"not cached ({type(e).__name__}: {e})".splitlines()[0]
    return None


def machine_roofs(
    device: Any,
    *,
    precisions: Sequence[str],
    sm_count: int | None = None,
    path: Path | None = None,
    measure: Callable[..., schema.Roofs] = measure_roofs,
    busy_reason: Callable[[Any], str | None] | None = None,
    now: Callable[[], float] = time.time,
) -> schema.Roofs:
    """The roofs from this machine's cache when measured there less than CACHE_MAX_AGE_S ago, else measured now
    and cached, except on a busy CPU (`busy_reason`, cpu_busy_reason by default): a roof measured while other
    processes held the cores would stand for this machine's in every later run's roofline."""
    if busy_reason is None:
        busy_reason = cpu_busy_reason
    import torch

    path = path or cache_path()
    key = cache_key(
        host=socket.gethostname(),
        device=device_label(device),
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        precisions=precisions,
    )
    hit = cached(path, key)
    if hit is not None and _fresh(hit, now):
        hit.cached, hit.cache_file, hit.cache_key = True, str(path), key
        return hit
    roofs = measure(device, precisions=precisions, sm_count=sm_count)
    busy = busy_reason(device) if busy_reason is not None else None
    note = f"not cached: measured on a busy machine ({busy})" if busy else store(path, key, roofs)
    roofs.cache_file, roofs.cache_key = str(path), key
    if note:
        roofs.cache_note = note
    return roofs


# A cached measurement is reused for a day: long enough for a sweep, a day's runs or a selftest not to measure
# again, short enough that a driver, BIOS or clock change is measured over within a day.
CACHE_MAX_AGE_S = 24 * 3600.0


def _fresh(roofs: schema.Roofs, now: Callable[[], float]) -> bool:
    """The cached entry was measured less than CACHE_MAX_AGE_S ago (an entry without a time is not fresh)."""
    try:
        at = dt.datetime.fromisoformat(str(roofs.measured_at)).timestamp()
    except ValueError:
        return False
    return 0.0 <= now() - at < CACHE_MAX_AGE_S


def cpu_busy_reason(device: Any) -> str | None:
    """Why a CPU's roofs measured now are not this machine's own (another process's load or a neighbour VM's
    steal: preflight.cpu_busy), so they are used by this run but never cached for the next; None on a GPU
    (its roofs do not share the host's cores) or on an idle machine."""
    if getattr(device, "type", "cpu") != "cpu":
        return None
    from effbench.system.hardware import read_cpu_load
    from effbench.system.preflight import cpu_busy

    return cpu_busy(read_cpu_load())

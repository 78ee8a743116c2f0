"""Out-of-memory as data: recognising an OOM, and a test hook that fakes one on the CPU.

Test hook (not a user option): with `EFFBENCH_FAULT_OOM_AT_BATCH=N` in the environment, a run whose
batch size per device is N or more raises `torch.OutOfMemoryError` at the start of training, inside
the same handler a real CUDA OOM reaches. It lets CPU-only tests (and CI) check that an OOM becomes
an `oom` run folder and that a sweep records it and goes on:

    EFFBENCH_FAULT_OOM_AT_BATCH=8 effbench sweep --batch-size 4,8 --device cpu --dataset synthetic ...

`EFFBENCH_FAULT_OOM_AT_BATCH=RANK:N` does so on that rank alone (RANK as for the NaN hook below), the
case of one DDP rank out of memory while the others wait in the next all-reduce. Every rank first meets in
a barrier, so the others have left the set-up, as they have when a real OOM strikes in the first forward
(without it a slow rank 0, still building its optimizer when torchrun stopped it, ended `interrupted` before
measuring and the job got no report: CI, 2026-12-07):

    EFFBENCH_FAULT_OOM_AT_BATCH=1:4 effbench run --nproc 2 --batch-size 4 --device cpu --dataset synthetic ...

Test hook: with `EFFBENCH_FAULT_HOLD_PHASE=<phase>`, a run that enters that phase (run/phases.py)
says so on stderr and waits there for a signal (at most HOLD_MAX_S), so a test can signal it in
any phase without racing the machine's speed. With `EFFBENCH_FAULT_HOLD_RELEASE=<file>` beside it, the
hold also ends when that file exists, so a test can let the run go on and finish `ok` (two sweeps into one
folder: the first holds in its first cell while the second is refused).

Test hook: with `EFFBENCH_FAULT_NAN_LOSS=RANK:STEP`, the rank whose RANK (torchrun's variable; 0 outside
torchrun) matches records a NaN loss from the run's step STEP on (warm-up included, counted from 1 as the
progress lines and the divergence error count: 1:3 stops the run "at step 3 of the run"), as a
NaN-producing batch would. Only the recorded loss is poisoned, not the gradients, so the other ranks never
see one: the case where only one rank can tell the run diverged (train.py makes every rank agree):

    EFFBENCH_FAULT_NAN_LOSS=1:3 effbench run --nproc 2 --device cpu --dataset synthetic ...

Test hook: with `EFFBENCH_FAULT_PROFILE=RANK:WHERE` (WHERE start, step, in-step or end), that rank's profiling
pass raises there (measure/profiling.py): the case of one rank's profiler failing while the others go on.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping

FAULT_OOM_ENV = "EFFBENCH_FAULT_OOM_AT_BATCH"
FAULT_HOLD_ENV = "EFFBENCH_FAULT_HOLD_PHASE"
FAULT_HOLD_RELEASE_ENV = "EFFBENCH_FAULT_HOLD_RELEASE"
HOLD_MARK = "effbench-test-hook: holding phase"
HOLD_MAX_S = 120.0  # a test that never signals still ends
FAULT_NAN_ENV = "EFFBENCH_FAULT_NAN_LOSS"
FAULT_PROFILE_ENV = "EFFBENCH_FAULT_PROFILE"


def fail_profile_pass(where: str, env: Mapping[str, str] = os.environ) -> None:
    """The profiling-pass hook: with EFFBENCH_FAULT_PROFILE=RANK:WHERE, the rank whose RANK matches raises at
    WHERE ("start": the profiler's start, "step": the first batch, "in-step": inside the first step, past the
    ranks' agreement, where the peers wait in its collectives; "end": writing the trace and tables)."""
    rank_text, sep, at = env.get(FAULT_PROFILE_ENV, "").strip().partition(":")
    if sep and rank_text.isdigit() and at == where and int(rank_text) == int(env.get("RANK", "0") or 0):
        raise RuntimeError(f"injected by {FAULT_PROFILE_ENV}={rank_text}:{at}")


def nan_loss_from(env: Mapping[str, str] = os.environ) -> int | None:
    """The 0-based index of the run's step from which this rank's loss is made NaN (the hook's STEP counts
    from 1), or None (hook unset, malformed, STEP 0, another rank)."""
    rank_text, sep, step_text = env.get(FAULT_NAN_ENV, "").strip().partition(":")
    if not (sep and rank_text.isdigit() and step_text.isdigit() and int(step_text) >= 1):
        return None
    return int(step_text) - 1 if int(rank_text) == int(env.get("RANK", "0") or 0) else None


def hold_phase(name: str, until: Callable[[], bool], env: Mapping[str, str] = os.environ) -> None:
    """The hold hook: when it names this phase, print HOLD_MARK and wait until `until()` or a signal."""
    if env.get(FAULT_HOLD_ENV, "").strip() != name:
        return
    print(f"{HOLD_MARK} {name}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + HOLD_MAX_S
    release = env.get(FAULT_HOLD_RELEASE_ENV, "").strip()
    while not until() and time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.02)


# What the CPU allocator says when it cannot allocate (c10/core/impl/alloc_cpu.cpp): torch raises a
# plain RuntimeError there, not torch.OutOfMemoryError.
_CPU_OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")
# cuDNN and cuBLAS allocate their own workspaces and handles outside torch's caching allocator; when that
# fails torch raises a plain RuntimeError naming the library's status (ATen/cuda/Exceptions.h): AT_CUDNN_CHECK
# writes "cuDNN error: " + cudnnGetErrorString(status), TORCH_CUDABLAS_CHECK "CUDA error: " +
# _cublasGetErrorEnum(status) + " when calling `cublasCreate(handle)`". cuDNN 9 (the pinned wheel ships 9.24)
# names its allocation failures CUDNN_STATUS_INTERNAL_ERROR_{HOST,DEVICE}_ALLOCATION_FAILED (4003, 4004 in
# cudnn_graph_v9.h; CUDNN_STATUS_ALLOC_FAILED is only a deprecated alias of 4003 there), cuDNN 8 said
# CUDNN_STATUS_ALLOC_FAILED. They are out of memory as much as the allocator's own.
_LIBRARY_OOM_MARKERS = (
    "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
)
# torch's CUDA allocator says "CUDA out of memory. Tried to allocate ..." (c10/cuda/CUDACachingAllocator.cpp, in
# libc10_cuda.so). It reaches Python as torch.OutOfMemoryError, except through a library that catches it and
# throws its text again as a plain RuntimeError: TorchCodec's stable-ABI ops (torch/csrc/stable/macros.h,
# throw_exception: "<message> (originally from <call> API call failed at ...)"), torchvision's nvJPEG decoder
# ("Error while decoding JPEG images: CUDA out of memory ...").
_CUDA_OOM_MARKERS = ("CUDA out of memory",)
# nvJPEG's own allocation failure is NVJPEG_STATUS_ALLOCATOR_FAILURE = 5 (nvjpeg.h, nvjpegStatus_t). TorchCodec 0.17
# checks every nvJPEG call with STD_TORCH_CHECK(status == NVJPEG_STATUS_SUCCESS, "<what failed>: ", status)
# (torchcodec/_core/DecodeJpegCuda.cpp), so the message ends "<what failed>: 5", e.g. "Failed to decode batch: 5".
# These are those texts; other statuses (3 NVJPEG_STATUS_BAD_JPEG, 4 JPEG_NOT_SUPPORTED) are the file's fault.
NVJPEG_STATUS_ALLOCATOR_FAILURE = 5
_NVJPEG_CALLS = (
    "Failed to initialize nvjpeg with hardware backend",
    "Failed to initialize nvjpeg with default backend",
    "Failed to create nvjpeg state",
    "Failed to create jpeg stream",
    "Failed to create nvjpeg decode state",
    "Failed to get image info",
    "Failed to initialize batch decoding",
    "Failed to decode batch",
    "nvjpegDecode failed",
)
_NVJPEG_OOM = re.compile(rf"(?:{'|'.join(map(re.escape, _NVJPEG_CALLS))}): {NVJPEG_STATUS_ALLOCATOR_FAILURE}\b")


def _oom_hook(env: Mapping[str, str]) -> tuple[int | None, int] | None:
    """The hook's (rank or None for every rank, batch size), or None when it is off (unset, empty, malformed)."""
    rank_text, sep, text = env.get(FAULT_OOM_ENV, "").strip().rpartition(":")
    if not text.isdigit() or int(text) <= 0 or (sep and not rank_text.isdigit()):
        return None
    return (int(rank_text) if sep else None), int(text)


def oom_threshold(env: Mapping[str, str] = os.environ) -> int | None:
    """The injected-OOM batch size for this rank, or None when the hook is off (unset, empty, malformed)
    or names another rank (`RANK:N`; a bare `N` is every rank's)."""
    hook = _oom_hook(env)
    if hook is None or (hook[0] is not None and hook[0] != int(env.get("RANK", "0") or 0)):
        return None
    return hook[1]


def inject_oom(
    batch_per_device: int, env: Mapping[str, str] = os.environ, barrier: Callable[[], None] | None = None
) -> None:
    """Raise torch.OutOfMemoryError when the hook is set for this rank and the batch per device reaches it.
    The one-rank form calls `barrier` first on every rank (the default: the process group's, when there is
    one), so the others are past their set-up when that rank fails."""
    hook = _oom_hook(env)
    if hook is None or batch_per_device < hook[1]:
        return
    if hook[0] is not None:
        (barrier or _group_barrier)()
    limit = oom_threshold(env)
    if limit is not None:
        import torch

        raise torch.OutOfMemoryError(
            f"injected by {FAULT_OOM_ENV}={env[FAULT_OOM_ENV].strip()}: batch size per device {batch_per_device} "
            f">= {limit} (a test hook, not a real OOM)"
        )


def _group_barrier() -> None:
    import torch.distributed as tdist

    if tdist.is_available() and tdist.is_initialized():
        tdist.barrier()


def is_out_of_memory(exc: BaseException) -> bool:
    """A device or host allocation failure: torch.OutOfMemoryError, MemoryError, the CPU allocator,
    cuDNN's, cuBLAS's and nvJPEG's own allocation failures, torch's CUDA OOM re-thrown by a library."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc)
    markers = _CPU_OOM_MARKERS + _LIBRARY_OOM_MARKERS + _CUDA_OOM_MARKERS
    return any(m in text for m in markers) or _NVJPEG_OOM.search(text) is not None

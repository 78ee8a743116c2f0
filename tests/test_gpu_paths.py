"""GPU code paths checked on the CPU against the pinned torch 2.14.1 / pynvml sources (issue 11, part 2).

Each test replays what the library does (its source line is cited) rather than mocking the code under test.
"""

from __future__ import annotations

import inspect
import threading

import pytest
import torch

from effbench.run.data_parallel import ReplicaAutocast


class _DtypeProbe(torch.nn.Module):
    """A Linear that records the dtype its output really had (what autocast made of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        self.seen.append(out.dtype)
        return out


def _replica_thread_forward(module: torch.nn.Module, x: torch.Tensor, device_type: str) -> None:
    """What DataParallel does per replica: torch/nn/parallel/parallel_apply.py `_worker` reads
    `torch.is_autocast_enabled()` in the caller and re-enters `torch.amp.autocast(device_type,
    enabled=autocast_enabled)` in a fresh thread -- the caller's dtype is not passed on."""
    enabled = torch.is_autocast_enabled(device_type)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with torch.amp.autocast(device_type, enabled=enabled):
                module(x)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_parallel_apply_still_reenters_autocast_without_the_dtype():
    """The assumption the fix rests on, read from the pinned library (fails if torch changes it)."""
    from torch.nn.parallel.parallel_apply import parallel_apply

    src = inspect.getsource(parallel_apply)
    assert "torch.amp.autocast(device_type, enabled=autocast_enabled)" in src


def test_dp_replica_thread_loses_the_dtype_without_the_wrapper():
    # CPU autocast's default dtype is bfloat16 (torch.get_autocast_dtype("cpu")), so run in float16 to
    # tell the caller's dtype from the thread default (on CUDA the same happens to bf16 -> float16).
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    bare = _DtypeProbe()
    with torch.autocast("cpu", dtype=torch.float16):
        _replica_thread_forward(bare, torch.randn(2, 4), "cpu")
    assert bare.seen == [torch.bfloat16]  # the defect: not the run's float16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dp_replica_runs_in_the_runs_dtype(dtype):
    probe = _DtypeProbe()
    wrapped = ReplicaAutocast(probe, "cpu", dtype)
    with torch.autocast("cpu", dtype=dtype):
        _replica_thread_forward(wrapped, torch.randn(2, 4), "cpu")
    assert probe.seen == [dtype]


def test_dp_replica_fp32_stays_fp32_inside_an_outer_autocast():
    probe = _DtypeProbe()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _replica_thread_forward(ReplicaAutocast(probe, "cpu", None), torch.randn(2, 4), "cpu")
    assert probe.seen == [torch.float32]


def test_dp_wrapper_replicates_as_dataparallel_does():
    """DataParallel replicates the outermost module (torch/nn/parallel/replicate.py copies `__dict__`),
    so the wrapper's device type and dtype must travel with each replica."""
    from torch.nn.parallel.replicate import _replicatable_module

    wrapped = ReplicaAutocast(_DtypeProbe(), "cuda", torch.bfloat16)
    assert _replicatable_module(wrapped)
    clone = wrapped._replicate_for_data_parallel()
    assert (clone.device_type, clone.dtype) == ("cuda", torch.bfloat16)


@pytest.mark.parametrize("extra", [[], ["--gpus", "2"]])
def test_compile_with_dp_is_refused_in_one_line(capsys, extra):
    from clitools import invoke

    code, out, err = invoke(["run", "--device", "cuda", "--compile", "--strategy", "dp", *extra], capsys)
    assert code == 2 and err.startswith("error: --compile") and "--strategy ddp" in err
    assert err.strip().count("\n") == 0 and "Traceback" not in out + err


def test_compile_with_dp_refused_by_the_config_itself():
    from effbench.config import RunConfig
    from effbench.errors import EffbenchError

    with pytest.raises(EffbenchError) as info:
        RunConfig(device="cuda", compile=True, strategy="dp")
    assert info.value.option == "--compile"
    assert RunConfig(device="cuda", compile=True, strategy="ddp").compile  # the other strategy stays allowed

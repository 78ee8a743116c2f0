"""Process-group setup and teardown under torchrun, and the few collectives the runner needs.

Outside torchrun (no RANK in the environment) everything degrades to a single process, so the
runner has one code path. The process-group timeout bounds how long a surviving rank can wait on
a dead one inside a collective.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from effbench.launch.peer_abort import StepAbort, StoreLink


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None
    link: StoreLink | None = field(default=None, compare=False)  # the job's store (peer_abort.py)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (a no-op list of one when alone)."""
        if not self.enabled:
            return [obj]
        if self.link is not None and self.link.broken:  # the group was torn down (peer_abort.py): the store
            return self.link.gather(obj)
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def step_abort(self, name: str) -> contextlib.AbstractContextManager[StepAbort | None]:
        """A pass's failure channel (peer_abort.StepAbort) under a process group; alone, None."""
        if self.link is None:
            return contextlib.nullcontext()
        return StepAbort(self.link, name)

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()


class TorchrunEnv(NamedTuple):
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int


def torchrun_env() -> TorchrunEnv | None:
    """RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE as torchrun sets them; None outside torchrun."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return TorchrunEnv(
        rank=int(os.environ["RANK"]),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        world_size=int(os.environ["WORLD_SIZE"]),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])),
    )


@contextmanager
def process_group(device_type: str, timeout_s: float) -> Iterator[DistContext]:
    """Join the torchrun process group (NCCL on CUDA, gloo on the CPU) for the duration."""
    env = torchrun_env()
    if env is None or env.world_size == 1:
        yield DistContext(**env._asdict()) if env else DistContext()
        return
    import torch
    import torch.distributed as dist

    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s))
    link = StoreLink(dist.distributed_c10d._get_default_store(), env.rank, env.world_size, backend, timeout_s)
    try:
        yield DistContext(backend=backend, link=link, **env._asdict())
    finally:
        if dist.is_initialized():  # NCCL's abort (peer_abort.py) has already destroyed it
            dist.destroy_process_group()


# (global step, loss) of a rank's first non-finite loss in a window; with the rank that saw it once agreed
NonFinite = tuple[int, float]
AgreeFn = Callable[[NonFinite | None], tuple[int, float, int | None] | None]


def agree_alone(local: NonFinite | None) -> tuple[int, float, int | None] | None:
    return None if local is None else (local[0], local[1], None)


def nonfinite_agreement(device: Any) -> AgreeFn:
    """How the ranks agree that the loss went non-finite (train.py calls it at each log-interval check).

    Outside a process group: this process's own finding. Under DDP, a rank that stopped alone would leave
    the others waiting in the next all-reduce until the process-group timeout, and the job would end
    `failed`: so every rank, at the same check, gathers every rank's first non-finite (step, loss), and all
    stop at the earliest one (the lowest rank on a tie), naming it and the rank that saw it. One tiny
    all_gather (2 float64 per rank) and its read-back per log interval, never per step. `device` is the rank's device: NCCL gathers CUDA tensors only ("Tensors must be CUDA
    and dense", ProcessGroupNCCL in the pinned libtorch_cuda.so), gloo CPU ones; process_group above picks
    the backend from the same device type.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return agree_alone

    import torch

    world = dist.get_world_size()

    def agree(local: NonFinite | None) -> tuple[int, float, int | None] | None:
        # float64 holds every step count exactly (< 2**53) and the loss as it was (nan, inf, -inf)
        mine = torch.tensor(
            [math.inf, 0.0] if local is None else [float(local[0]), local[1]], dtype=torch.float64, device=device
        )
        parts = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(parts, mine)
        found = [
            (int(step), loss, rank) for rank, (step, loss) in enumerate(torch.stack(parts).tolist()) if step < math.inf
        ]
        return min(found, key=lambda f: (f[0], f[2])) if found else None  # the earliest step, then the lowest rank

    return agree


def rank0_decides(device: Any) -> Callable[[bool], bool]:
    """How the ranks take one decision at the same point of the loop (the warm-up's end, `--until`'s stop): rank
    0's, so every rank's measured window starts and ends at the same step. Outside a process group: this
    process's own. One tiny broadcast (one float64) per decision point, never per step; `device` as in
    nonfinite_agreement (NCCL broadcasts CUDA tensors only)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return lambda mine: mine

    import torch

    def decide(mine: bool) -> bool:
        flag = torch.tensor([1.0 if mine else 0.0], dtype=torch.float64, device=device)
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    return decide

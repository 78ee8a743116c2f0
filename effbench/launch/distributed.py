"""Process-group setup and teardown under torchrun, and the few collectives the runner needs.

Outside torchrun (no RANK in the environment) everything degrades to a single process, so the
runner has one code path. The process-group timeout bounds how long a surviving rank can wait on
a dead one inside a collective.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None

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
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()


def torchrun_env() -> dict[str, int] | None:
    """RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE as torchrun sets them; None outside torchrun."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return {
        "rank": int(os.environ["RANK"]),
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])),
    }


@contextmanager
def process_group(device_type: str, timeout_s: float) -> Iterator[DistContext]:
    """Join the torchrun process group (NCCL on CUDA, gloo on the CPU) for the duration."""
    env = torchrun_env()
    if env is None or env["world_size"] == 1:
        yield DistContext(**env) if env else DistContext()
        return
    import torch
    import torch.distributed as dist

    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(env["local_rank"])
    dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s))
    try:
        yield DistContext(backend=backend, **env)
    finally:
        dist.destroy_process_group()

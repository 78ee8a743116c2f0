"""`--strategy dp`: torch.nn.DataParallel whose replicas run in the run's autocast dtype.

DataParallel runs each replica's forward in its own thread (torch/nn/parallel/parallel_apply.py,
`_worker`), and autocast state is per thread. torch 2.14.1's `_worker` re-enters autocast as
`torch.amp.autocast(device_type, enabled=autocast_enabled)` -- `enabled` only, no dtype -- so a
replica thread gets autocast's default dtype (torch.get_autocast_dtype: float16 on CUDA), not the
caller's bf16: a "bf16" run would train in fp16 without loss scaling. `ReplicaAutocast` enters
autocast with the run's dtype inside the replicated module, so every replica thread sets it itself.

Imported lazily by the runner (it needs torch at import).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ReplicaAutocast(nn.Module):
    """Runs `module` under autocast(device_type, dtype); the outermost module DataParallel replicates.

    `dtype` None means fp32: autocast is entered disabled, which also turns off an outer autocast.
    """

    def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.module = module
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype, enabled=self.dtype is not None):
            return self.module(*args, **kwargs)


def data_parallel(model: nn.Module, rt: Any, device_ids: list[int]) -> nn.Module:
    """DataParallel over `device_ids` whose replicas autocast to `rt.autocast_dtype`."""
    return nn.DataParallel(ReplicaAutocast(model, rt.device.type, rt.autocast_dtype), device_ids=device_ids)

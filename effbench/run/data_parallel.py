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


def seed_replica_generators(seeds: dict[int, int]) -> None:
    """Seed each replica's CUDA device generator apart: {device index: seed}.

    A replica's dropout / drop-connect draws from its own device's default generator (CUDA kernels take
    at::cuda::detail::getDefaultCUDAGenerator(device)), and torch.manual_seed seeds every device's alike
    (torch/random.py -> torch.cuda.manual_seed_all), so the replicas dropped the same units of their
    slices. Set on the generators themselves: torch.cuda.manual_seed seeds whichever device is current
    when its lazy callback runs (torch/cuda/random.py). The loaders keep generators of their own."""
    generators = torch.cuda.default_generators  # filled once CUDA is initialised (the model is on it)
    for index, seed in seeds.items():
        generators[index].manual_seed(seed)

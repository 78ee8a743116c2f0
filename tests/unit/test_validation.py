"""Validation (run/train.py evaluate, validation_module): how many batches it takes from the loader and which
module it runs (docs/gpu-truth.md, round four, N8)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from effbench.config import RunConfig, resolve_for_device
from effbench.run.runtime import Runtime
from effbench.run.train import evaluate

RT = Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)


class CountingLoader:
    """A validation loader that counts the batches asked of it (its iterator's __next__ calls)."""

    def __init__(self, n_batches: int, batch: int = 2) -> None:
        self.n, self.batch, self.fetched = n_batches, batch, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.fetched += 1
        if self.fetched > self.n:
            raise StopIteration
        return torch.zeros(self.batch, 4), torch.zeros(self.batch, dtype=torch.int64)


def _cfg(max_val_steps: int | None) -> RunConfig:
    return resolve_for_device(RunConfig(dataset="synthetic", epochs=1, max_val_steps=max_val_steps), "cpu")


def test_max_val_steps_fetches_no_batch_beyond_the_limit():
    # The loop fetched batch 3, then saw the limit of 2 and dropped it: with DALI that fetch is a decode (and
    # the next run queued) inside val_time_s. Now the loader is asked for exactly the batches validated.
    loader = CountingLoader(5)
    result = evaluate(torch.nn.Linear(4, 3), loader, RT, _cfg(2), torch.nn.CrossEntropyLoss())
    assert loader.fetched == 2 and result[2] == 4  # 2 batches of 2 images


def test_without_a_limit_validation_reads_the_loader_to_its_end():
    loader = CountingLoader(3)
    result = evaluate(torch.nn.Linear(4, 3), loader, RT, _cfg(None), torch.nn.CrossEntropyLoss())
    assert loader.fetched == 4 and result[2] == 6  # 3 batches, then the StopIteration that ends the loop

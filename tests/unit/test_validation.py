"""Validation (run/train.py evaluate, validation_module): how many batches it takes from the loader and which
module it runs (docs/gpu-truth.md, round four, N8)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
    assert loader.fetched == 2 and result.images == 4  # 2 batches of 2 images


def test_without_a_limit_validation_reads_the_loader_to_its_end():
    loader = CountingLoader(3)
    result = evaluate(torch.nn.Linear(4, 3), loader, RT, _cfg(None), torch.nn.CrossEntropyLoss())
    assert loader.fetched == 4 and result.images == 6  # 3 batches, then the StopIteration that ends the loop


@pytest.fixture
def one_rank_group():
    """A gloo process group of this process alone, so DDP can wrap a CPU model here."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 3))


def test_a_compiled_ddp_run_validates_the_compiled_bare_module(one_rank_group):
    # run/rank.py compiles the DDP wrapper: torch.compile(DDP(model)). Validation runs the bare module (no
    # collective inside it: GPU truth 3.5), and took it from inside the wrapper, `ddp.module`: eager code, in
    # a run that measures --compile. Now it is the bare module under the training's own compiler.
    from torch.nn.parallel import DistributedDataParallel

    from effbench.run.train import validation_module

    ddp = DistributedDataParallel(_tiny())
    compiled = torch.compile(ddp)  # lazy: nothing compiles until a forward, which this test never makes
    picked = validation_module(compiled)
    assert isinstance(picked, type(compiled)) and picked is not compiled
    assert picked._orig_mod is ddp.module  # the bare module, its weights the trained ones
    assert picked.dynamo_ctx is compiled.dynamo_ctx  # the same backend and options as training
    # without --compile: the bare module; without DDP: the model itself, compiled or not
    assert validation_module(ddp) is ddp.module
    plain = torch.compile(_tiny())
    assert validation_module(plain) is plain


def test_the_training_loop_validates_every_epoch_with_the_one_compiled_bare_module(one_rank_group, monkeypatch):
    # The loop picks the module once: each epoch's validation calls the same compiled object (one eval graph,
    # compiled in the first validation), after the buffer broadcast every rank makes.
    from torch.nn.parallel import DistributedDataParallel

    from effbench.run import train

    ddp = DistributedDataParallel(_tiny())
    compiled = torch.compile(ddp)
    validated: list[torch.nn.Module] = []
    real_evaluate = train.evaluate

    def fake_evaluate(model, *a, **k):  # the real one over no batch: the module it was given is all we need
        validated.append(model)
        return real_evaluate(torch.nn.Linear(4, 3), [], *a[1:], **k)

    def step(batch):
        return train.StepOutput(torch.tensor(1.0), torch.zeros(len(batch[1]), 3), batch[1], None)

    monkeypatch.setattr(train, "evaluate", fake_evaluate)
    batches = [(torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64))] * 2
    data = type("Data", (), {"train": batches, "val": [], "steps_per_epoch": 2, "set_epoch": lambda self, e: None})()
    cfg = resolve_for_device(RunConfig(dataset="synthetic", epochs=2, warmup_steps=1, max_steps=2), "cpu")
    epochs = list(train.train_epochs(compiled, data, None, None, RT, cfg, step_fn=step))
    assert len(epochs) == 2 and len(validated) == 2
    assert validated[0] is validated[1] and validated[0]._orig_mod is ddp.module

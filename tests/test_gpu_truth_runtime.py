"""GPU truth, round two (issue 27), the runtime items 1, 2, 10, 11, 12, checked on the CPU.

What CUDA would do is read from the pinned torch 2.14.1 sources (cited per test) and replayed with fakes:
a GPU made visible to one function, gloo ranks under torchrun, a counting torch.compile backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from effbench.config import RunConfig
from effbench.launch.distributed import DistContext
from effbench.run import runner, runtime

TINY = dict(dataset="synthetic", arch="resnet18", image_size=16, weights="none", workers=0, batch_size=4)


# --- item 1: --nproc N with --device auto on a GPU machine -------------------------------------------
class _OnAGpu(Exception):
    """The rank resolved a CUDA device: training on the faked GPU would crash further on, so stop there."""


def test_nproc_ranks_train_on_the_plans_cpu_even_where_gpus_are_visible(monkeypatch, tmp_path):
    """plan.py reads `--nproc 2 --device auto` as two CPU processes (gloo, "cpu2" in the folder name, fp32);
    each rank then resolved `auto` again, and torch.cuda.is_available() (True on a GPU machine) put it on
    cuda:<local_rank>. The rank must train on the plan's device."""
    cfg = RunConfig(**TINY, nproc=2, max_steps=2, epochs=1, warmup_steps=1, profile=False, output=tmp_path)
    with monkeypatch.context() as gpus:  # a machine with 2 GPUs (torch/cuda/__init__.py is_available, device_count)
        gpus.setattr(torch.cuda, "is_available", lambda: True)
        gpus.setattr(torch.cuda, "device_count", lambda: 2)
        plan = runner.plan_for(cfg, ["effbench", "worker"])
    assert (plan.mode, plan.device_type, plan.devices) == ("torchrun", "cpu", 2)

    real = runtime.resolve_device
    resolved = []

    def resolve_where_gpus_are_visible(*a, **kw):
        with monkeypatch.context() as gpus:
            gpus.setattr(torch.cuda, "is_available", lambda: True)
            device = real(*a, **kw)
        resolved.append(str(device))
        if device.type != "cpu":
            raise _OnAGpu(str(device))
        return device

    monkeypatch.setattr(runtime, "resolve_device", resolve_where_gpus_are_visible)
    # local rank 1 of the torchrun job, as worker_main runs it from the spec's plan (no process group here)
    try:
        outcome = runner.run_benchmark(
            cfg, plan=plan, dist=DistContext(rank=0, local_rank=1), echo=lambda _m: None, progress=False
        )
    except _OnAGpu as e:
        pytest.fail(f"the plan says cpu, but the rank resolved --device auto to {e} and would train there")
    assert resolved == ["cpu"]
    record = outcome.results
    assert record["status"] == "ok" and record["device"] == "cpu" and record["precision"] == "fp32"
    assert "_cpu2_fp32_" in outcome.run_dir.name

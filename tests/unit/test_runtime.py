"""Device and precision resolution: no silent fallbacks."""

from __future__ import annotations

import types

import pytest
import torch

from effbench.errors import EffbenchError
from effbench.run.runtime import resolve_device, resolve_precision

CUDA = types.SimpleNamespace(type="cuda")
CPU = torch.device("cpu")


def test_cpu_auto_is_fp32_and_bf16_is_allowed_on_cpu():
    assert resolve_precision("auto", CPU) == ("fp32", None)
    assert resolve_precision("bf16", CPU) == ("bf16", torch.bfloat16)
    assert resolve_precision("fp32", CPU) == ("fp32", None)


def test_fp16_needs_cuda():
    with pytest.raises(EffbenchError) as info:
        resolve_precision("fp16", CPU)
    assert info.value.option == "--precision" and "bf16 or fp32" in str(info.value)


def test_bf16_refused_where_the_gpu_lacks_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla V100-SXM2-32GB")
    with pytest.raises(EffbenchError) as info:
        resolve_precision("bf16", CUDA)
    assert "V100" in str(info.value) and info.value.option == "--precision"
    assert resolve_precision("auto", CUDA) == ("fp32", None)  # auto picks what the device has
    assert resolve_precision("fp16", CUDA) == ("fp16", torch.float16)


def test_auto_is_bf16_on_capable_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert resolve_precision("auto", CUDA) == ("bf16", torch.bfloat16)


def test_cuda_requested_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EffbenchError) as info:
        resolve_device("cuda")
    assert info.value.option == "--device" and "--device cpu" in str(info.value)
    assert resolve_device("auto").type == "cpu"

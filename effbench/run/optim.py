"""Optimizer and learning-rate schedule from the config (the seeds' five optimizers, plus AdamW)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from effbench.config import RunConfig


def impl_kwargs(impl: str) -> dict[str, Any]:
    """--optimizer-impl as torch.optim keywords: fused kernels, foreach (multi-tensor) or one tensor
    at a time. `auto` must be resolved first (config.resolve_for_device)."""
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    if impl == "for-loop":
        return {"foreach": False}
    raise AssertionError(f"unresolved --optimizer-impl {impl!r}")


def build_optimizer(cfg: RunConfig, params: Iterable[Any]) -> Any:
    import torch

    params = list(params)
    lr, wd = cfg.lr, cfg.weight_decay
    assert lr is not None, "RunConfig fills in the optimizer's default learning rate (DEFAULT_LR)"
    kw = impl_kwargs(cfg.optimizer_impl)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=wd, **kw)
    if cfg.optimizer == "sgd-nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=wd, nesterov=True, **kw)
    if cfg.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, weight_decay=wd, **kw)
    if cfg.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, weight_decay=wd, **kw)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, **kw)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd, **kw)
    raise AssertionError(f"unvalidated optimizer {cfg.optimizer}")  # RunConfig rejects others


def build_scheduler(optimizer: Any, total_steps: int) -> Any:
    """Cosine annealing over every training step of the run (the seeds' schedule), stepped per step."""
    import torch

    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total_steps))

"""Optimizer and learning-rate schedule from the config (the seeds' five optimizers, plus AdamW)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from effbench.config import RunConfig


def build_optimizer(cfg: RunConfig, params: Iterable[Any]) -> Any:
    import torch

    params = list(params)
    lr, wd = cfg.lr, cfg.weight_decay
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=wd)
    if cfg.optimizer == "sgd-nesterov":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=wd, nesterov=True)
    if cfg.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, weight_decay=wd)
    if cfg.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, weight_decay=wd)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    raise AssertionError(f"unvalidated optimizer {cfg.optimizer}")  # RunConfig rejects others


def build_scheduler(optimizer: Any, total_steps: int) -> Any:
    """Cosine annealing over every training step of the run (the seeds' schedule), stepped per step."""
    import torch

    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total_steps))

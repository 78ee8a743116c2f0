"""A dataset that reports whether its worker could take a lock the training process holds: the hazard
of forking a threaded process (tests/unit/test_workers.py). A forked worker inherits the lock as held,
with no thread to release it; a worker started from the fork server imports this module afresh."""

from __future__ import annotations

import threading

import torch

LOCK = threading.Lock()


class LockProbe(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, tuple[str, ...]]:
        got = LOCK.acquire(timeout=2)
        if got:
            LOCK.release()
        return torch.tensor(float(got)), index, ()

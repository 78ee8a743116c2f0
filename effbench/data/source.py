"""What every dataset module hands to build_data: examples, not loaders.

A dataset module knows its on-disk format; it returns the training examples, the official
validation examples (when the dataset has them) and facts for the record. Splitting, transforms
and loaders are applied the same way to all of them in effbench.data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from collections.abc import Callable

import numpy as np
import torch


class Examples(Protocol):
    """A list of labelled examples that can be subset and turned into a torch Dataset."""

    def __len__(self) -> int: ...

    def take(self, indices: np.ndarray) -> Examples: ...

    def dataset(self, transform: Callable, *, train: bool) -> torch.utils.data.Dataset: ...


@dataclass
class Source:
    name: str
    num_classes: int
    root: Path
    train: Examples
    val: Examples | None
    """None when the dataset has no official validation split (then --val-fraction is needed)."""
    val_label: str
    """How the official validation split is described in the record, e.g. "official test split"."""
    info: dict[str, object] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    """Files the listing left out (images.ImageFiles: not a regular file, too large, outside the folder), path ->
    reason; counted with the files skipped while loading."""


def seeded_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, val indices), each sorted; the same for the same (n, fraction, seed)."""
    n_val = min(n - 1, max(1, round(n * fraction))) if n > 1 else 0
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])

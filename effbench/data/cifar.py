"""CIFAR-10 / CIFAR-100 from the official "python version" pickles, read once into memory.

Not torchvision's CIFAR classes: those re-hash the files on every construction. The pickles are
opened with a restricted unpickler that can build numpy arrays and nothing else, so a file planted
under --data-dir cannot run code. Layout (Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html):
each batch is a dict with `data`, an N x 3072 uint8 array (1024 red, then green, then blue values,
rows of 32), and `labels` (CIFAR-10) or `fine_labels` (CIFAR-100), lists of N ints.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from effbench.config import RunConfig
from effbench.data.archives import ARCHIVES, ensure_present
from effbench.data.source import Source
from effbench import safe_files
from effbench.errors import EffbenchError

SIDE = 32
PIXELS = 3 * SIDE * SIDE  # 3072 values per image
# The largest official file, CIFAR-100's `train`, is 50,000 x 3,072 bytes of pixels plus labels: about 155 MB.
# 256 MiB leaves room for a copy re-saved with another protocol and refuses a runaway or endless file.
MAX_PICKLE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Layout:
    train_files: tuple[str, ...]
    test_file: str
    meta_file: str
    label_key: str
    names_key: str
    num_classes: int


LAYOUTS = {
    "cifar10": Layout(
        tuple(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta", "labels", "label_names", 10
    ),
    "cifar100": Layout(("train",), "test", "meta", "fine_labels", "fine_label_names", 100),
}


# --------------------------------------------------------------------------------------------------
# Restricted unpickling
# --------------------------------------------------------------------------------------------------
def _allowed_globals() -> dict[tuple[str, str], Any]:
    try:  # numpy >= 2 moved the internals to numpy._core; old files still name numpy.core
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    import _codecs

    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct  # protocol <= 4 arrays
        allowed[(f"{core}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5 arrays (re-saved files)
    # Python 3 writes bytes as _codecs.encode(str, "latin1") under protocol 2; torch's weights_only
    # unpickler allows it for the same reason. It only converts text to bytes.
    allowed[("_codecs", "encode")] = _codecs.encode
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings, numbers and numpy arrays; refuses every other global."""

    ALLOWED = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}") from None


def _corrupt(path: Path, why: str) -> EffbenchError:
    return EffbenchError(
        "--data-dir", f"{path} is corrupt or truncated ({why}); delete it and rerun with --download, or restore it"
    )


def load_pickle(path: Path) -> dict[str, Any]:
    """Unpickle a CIFAR file; keys come back as str whether the file stored str or bytes. Only a regular file
    in its folder (links resolved) of at most MAX_PICKLE_BYTES is read (safe_files.read_bytes: a FIFO or
    a device is one line at once, never a wait or an endless read)."""
    fix = f"delete {path.parent} and rerun with --download, or restore it"
    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(path.parent))):
        raise EffbenchError("--data-dir", f"{path} is a link to {real}, outside {path.parent}; {fix}")
    try:
        data = safe_files.read_bytes(path, limit=MAX_PICKLE_BYTES, fix=fix)
    except FileNotFoundError:
        raise EffbenchError("--data-dir", f"{path} is missing; {fix}") from None
    try:
        # latin1 turns Python 2 byte strings (the official files) into str without loss.
        obj = RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except pickle.UnpicklingError as e:
        raise _corrupt(path, str(e)) from None
    except Exception as e:  # a damaged pickle fails in many ways (EOFError, ValueError, ...)
        raise _corrupt(path, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None
    if not isinstance(obj, dict):
        raise _corrupt(path, f"expected a dict, found {type(obj).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_batch(path: Path, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(images N x 32 x 32 x 3 uint8 HWC, labels N int64), every field checked for type, shape and range."""
    d = load_pickle(path)
    data, labels = d.get("data"), d.get(label_key)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8:
        raise _corrupt(path, "no uint8 'data' array")
    labels_arr = _labels(path, labels, label_key, num_classes)
    n = len(labels_arr)
    if n == 0 or data.shape != (n, PIXELS):
        raise _corrupt(
            path, f"'data' has shape {data.shape}; expected {PIXELS} x {n} labels, one row of {PIXELS} values each"
        )
    images = np.ascontiguousarray(data.reshape(n, 3, SIDE, SIDE).transpose(0, 2, 3, 1))
    return images, labels_arr


def _labels(path: Path, labels: Any, key: str, num_classes: int) -> np.ndarray:
    """A flat list (or 1-D integer array) of ints in 0..num_classes-1; anything else names the file.
    Checked element by element before any conversion: numpy would parse "3", truncate 3.7, overflow
    on 2**70 and build a 2-D array from nested lists."""
    if isinstance(labels, np.ndarray):
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise _corrupt(path, f"'{key}' is a {labels.ndim}-D {labels.dtype} array, not a flat list of integers")
        values = labels
    elif isinstance(labels, list):
        bad = next((x for x in labels if isinstance(x, bool) or not isinstance(x, (int, np.integer))), None)
        if bad is not None:
            raise _corrupt(path, f"'{key}' holds {type(bad).__name__} {str(bad)[:20]!r}, not an integer class index")
        values = labels
    else:
        raise _corrupt(path, f"no '{key}' list (found {type(labels).__name__})")
    if len(values) and not all(0 <= int(x) < num_classes for x in (min(values), max(values))):
        raise _corrupt(path, f"'{key}' holds values outside 0..{num_classes - 1}")
    return np.asarray(values, dtype=np.int64)


def read_meta(path: Path, names_key: str, num_classes: int) -> list[str]:
    names = load_pickle(path).get(names_key)
    if not isinstance(names, list) or len(names) != num_classes:
        raise _corrupt(path, f"'{names_key}' does not list {num_classes} class names")
    if not all(isinstance(n, (str, bytes)) for n in names):
        raise _corrupt(path, f"'{names_key}' holds something other than names (text)")
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]


# --------------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrayExamples:
    """In-memory images (N x H x W x 3 uint8) and labels; `take` makes a split without reading again."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, indices: np.ndarray) -> ArrayExamples:
        return ArrayExamples(self.images[indices], self.labels[indices])

    def __reduce__(self) -> tuple[Callable, tuple[torch.Tensor, torch.Tensor]]:
        # Pickled once per loader worker (loaders.worker_context): as shared memory, a file descriptor
        # each, so eight workers map CIFAR's 150 MB once instead of receiving eight copies.
        return _from_shared, self._shared

    @cached_property
    def _shared(self) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = torch.from_numpy(self.images).share_memory_(), torch.from_numpy(self.labels).share_memory_()
        # From now on this process reads the shared copy too, and the arrays it read from disk are freed once
        # nothing else holds them: the training process kept both, CIFAR's 150 MB twice.
        object.__setattr__(self, "images", images.numpy())
        object.__setattr__(self, "labels", labels.numpy())
        return images, labels

    def dataset(self, transform: Callable, *, train: bool) -> ArrayDataset:
        return ArrayDataset(self, transform)


def _from_shared(images: torch.Tensor, labels: torch.Tensor) -> ArrayExamples:
    return ArrayExamples(images.numpy(), labels.numpy())  # views: each array keeps its tensor alive


class ArrayDataset(torch.utils.data.Dataset):
    def __init__(self, examples: ArrayExamples, transform: Callable) -> None:
        self.examples = examples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, tuple[str, ...]]:
        image = Image.fromarray(self.examples.images[index])
        return self.transform(image), int(self.examples.labels[index]), ()  # () = nothing skipped


def load(name: str, data_dir: Path, *, download: bool) -> Source:
    layout = LAYOUTS[name]
    download_info = ensure_present(name, data_dir, download=download)
    root = Path(data_dir) / ARCHIVES[name].folder
    read_meta(root / layout.meta_file, layout.names_key, layout.num_classes)  # a broken meta means a broken copy
    parts = [read_batch(root / f, layout.label_key, layout.num_classes) for f in layout.train_files]
    train = ArrayExamples(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    test = ArrayExamples(*read_batch(root / layout.test_file, layout.label_key, layout.num_classes))
    return Source(
        name=name,
        num_classes=layout.num_classes,
        root=root,
        train=train,
        val=test,
        val_label="official test split",
        info={"download": download_info},
    )


def load_for(cfg: RunConfig) -> Source:
    """The catalog's loader entry (effbench/datasets.py) for cifar10 and cifar100."""
    return load(cfg.dataset, cfg.data_dir, download=cfg.download)

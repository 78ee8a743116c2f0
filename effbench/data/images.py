"""Image files on disk (Food-101, class folders), decoded with PIL in the loader's workers.

One unreadable file must not end a multi-hour run: the dataset never raises for it. It reports
the file's path alongside the sample instead, and the loader sums those reports in the training
process (effbench.data.loaders). A worker holds no shared counter, so counting is the same for
0 or N workers. In training the next readable file stands in, which keeps every batch full (the
loop relies on drop_last batches of exactly --batch-size); in validation the file is left out.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

# A stretch of this many unreadable files in a row means the copy is broken, not one bad file;
# then the sample is dropped rather than scanning on (that batch is one image short).
MAX_STAND_INS = 16

Sample = tuple[torch.Tensor | None, int, tuple[str, ...]]
"""(image or None when unreadable and not replaced, label, paths skipped to produce it)."""


def read_rgb(path: str) -> Image.Image | None:
    """The decoded RGB image, or None when PIL cannot read the file."""
    try:
        with Image.open(path) as im:
            return im.convert("RGB")  # convert() forces the full decode inside the try
    except Exception:  # PIL reports bad bytes as OSError, SyntaxError, ValueError, EOFError, ...
        return None


def pixel_limit() -> int | None:
    """The pixel count above which both loaders refuse an image: PIL's own, read at call time so a
    user's PIL.Image.MAX_IMAGE_PIXELS applies. Image.open raises DecompressionBombError above
    2 * MAX_IMAGE_PIXELS (PIL/Image.py, _decompression_bomb_check); None disables it, as in PIL."""
    return None if Image.MAX_IMAGE_PIXELS is None else 2 * Image.MAX_IMAGE_PIXELS


def over_pixel_limit(data: bytes | bytearray | memoryview) -> str | None:
    """Why an encoded image is refused before decoding (its header declares too many pixels), or
    None. Reads the header only (Image.open is lazy), through the same check the PIL loader meets:
    a 633-byte JPEG declaring 30000 x 30000 would otherwise decode to 2.7 GB."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # below the refusal: decoded
            with Image.open(io.BytesIO(data)):
                pass
    except Image.DecompressionBombError as e:
        return f"over the pixel limit ({str(e).split(',')[0]})"
    except Exception:  # a format PIL does not know or bad bytes: the decoder decides
        return None
    return None


def skip_reason(path: str) -> str:
    """Why a skipped file was skipped, for the record (re-read for the few examples kept)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return f"unreadable ({e.strerror or type(e).__name__})"
    return over_pixel_limit(data) or "cannot be decoded"


@dataclass(frozen=True)
class FileExamples:
    paths: tuple[str, ...]
    labels: np.ndarray

    def __post_init__(self) -> None:
        assert len(self.paths) == len(self.labels)

    def __len__(self) -> int:
        return len(self.paths)

    def take(self, indices: np.ndarray) -> FileExamples:
        return FileExamples(tuple(self.paths[i] for i in indices), self.labels[indices])

    def dataset(self, transform: Callable, *, train: bool) -> ImageFileDataset:
        return ImageFileDataset(self, transform, stand_in=train)


class ImageFileDataset(torch.utils.data.Dataset):
    def __init__(self, examples: FileExamples, transform: Callable, *, stand_in: bool) -> None:
        self.examples = examples
        self.transform = transform
        self.stand_in = stand_in

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Sample:
        n = len(self.examples)
        skipped: list[str] = []
        for k in range(MAX_STAND_INS + 1 if self.stand_in else 1):
            i = (index + k) % n
            image = read_rgb(self.examples.paths[i])
            if image is not None:
                return self.transform(image), int(self.examples.labels[i]), tuple(skipped)
            skipped.append(self.examples.paths[i])
        return None, int(self.examples.labels[index]), tuple(skipped)

"""Image files on disk (Food-101, class folders), decoded with PIL in the loader's workers.

One unreadable file must not end a multi-hour run: the dataset never raises for it. It reports
the file's path alongside the sample instead, and the loader sums those reports in the training
process (effbench.data.loaders). A worker holds no shared counter, so counting is the same for
0 or N workers. In training the next readable file stands in, which keeps every batch full (the
loop relies on drop_last batches of exactly --batch-size); in validation the file is left out.

What a loader reads, for all three (torchvision, fast, DALI): only regular files of at most MAX_IMAGE_BYTES
inside the dataset's folder once links are resolved. ImageFiles checks each listed file once, when the list
is built (one lstat; a link also a realpath and a stat): a FIFO named x.jpg (whose open() waits forever for a
writer), `x.jpg -> /dev/zero` (endless bytes), a link or a listed id leading out of the folder, a missing or
oversized file never reach a loader, DALI included; they are counted with the skipped files and their reason.
A file swapped after listing is caught when it is read (read_image_bytes: opened O_NONBLOCK, checked on the
open descriptor, read up to the bound), by the two loaders whose reads effbench makes.
"""

from __future__ import annotations

import io
import os
import stat
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from effbench.safe_files import file_kind

# A stretch of this many unreadable files in a row means the copy is broken, not one bad file;
# then the sample is dropped rather than scanning on (that batch is one image short).
MAX_STAND_INS = 16

Sample = tuple[torch.Tensor | None, int, tuple[str, ...]]
"""(image or None when unreadable and not replaced, label, paths skipped to produce it)."""


# The most bytes a loader reads from one image file. 64 MiB holds an 8-bit RGB image of 4,700 x 4,700 px stored
# uncompressed (BMP, PPM, a PNG at level 0); the photos of training sets are far smaller (Food-101's are at
# most 512 px a side, Bossard et al. 2014). Each worker holds one file's bytes at a time, so this also bounds
# what one read can take; past it (or a device that never ends, /dev/zero) the file is skipped and counted.
MAX_IMAGE_BYTES = 64 * 2**20


class NotAnImageFile(OSError):
    """A file a loader does not read (not a regular file, over MAX_IMAGE_BYTES); str() is the reason."""


def refusal(st: os.stat_result) -> str | None:
    """Why a file with this status is not read as an image (its kind, its size), or None."""
    if not stat.S_ISREG(st.st_mode):
        return f"{file_kind(st.st_mode)}, not a regular file"
    if st.st_size > MAX_IMAGE_BYTES:
        return f"{st.st_size:,} bytes, over the {MAX_IMAGE_BYTES:,}-byte limit for an image file"
    return None


def read_image_bytes(path: str) -> bytearray:
    """The bytes of an image file: a regular file of at most MAX_IMAGE_BYTES, or NotAnImageFile with the reason.

    Opened O_NONBLOCK (a FIFO swapped in after the listing would otherwise wait in open() for a writer) and
    checked on the open descriptor, so what is read is what was checked; read up to the bound whatever the
    size said. The same count of calls as open().read(): open, fstat, read, read (EOF)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        why = refusal(st)
        if why is not None:
            raise NotAnImageFile(why)
        data, want = bytearray(), min(st.st_size, MAX_IMAGE_BYTES) + 1  # the whole file in one read, + 1 byte
        while len(data) <= MAX_IMAGE_BYTES:
            chunk = os.read(fd, want)
            if not chunk:
                return data
            data += chunk
            want = 1 << 16  # the read that finds the end (or a file that grew)
        raise NotAnImageFile(f"over the {MAX_IMAGE_BYTES:,}-byte limit for an image file (it grew while read)")
    finally:
        os.close(fd)


class ImageFiles:
    """The check every listed image file passes once, when a dataset module builds its list (imagefolder.scan,
    food101.read_split): a regular file of at most MAX_IMAGE_BYTES, inside `boundary` once links are resolved.
    A link inside the boundary is followed (a class folder of links into a shared folder of the same dataset);
    one that leaves it is not. Each file costs one lstat (a link: a realpath and a stat too); each folder one
    realpath. The refused files are in `refused`, path -> reason, for the skip count."""

    def __init__(self, boundary: Path) -> None:
        self.boundary = Path(boundary)
        self.inside = Path(os.path.realpath(boundary))
        self.refused: dict[str, str] = {}
        self._folders: dict[str, bool] = {}

    def check(self, path: str) -> os.stat_result | None:
        """The file's status (of its target, for a link) when a loader may read it, else None (reason kept)."""
        why, st = self._why(path)
        if why is not None:
            self.refused[path] = why
            return None
        return st

    def _why(self, path: str) -> tuple[str | None, os.stat_result | None]:
        try:
            st = os.lstat(path)
        except (OSError, ValueError) as e:  # ValueError: a NUL in a name a listing file gave
            return f"unreadable ({getattr(e, 'strerror', None) or type(e).__name__})", None
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(path)
            if not Path(real).is_relative_to(self.inside):
                return f"a link to {real}, outside {self.boundary}", None
            try:
                st = os.stat(path)
            except OSError as e:
                return f"a broken link ({e.strerror or type(e).__name__})", None
        else:
            folder = os.path.dirname(path)
            inside = self._folders.get(folder)
            if inside is None:
                inside = self._folders[folder] = Path(os.path.realpath(folder)).is_relative_to(self.inside)
            if not inside:
                return f"outside {self.boundary}", None
        return refusal(st), st


def nothing_readable(refused: Mapping[str, str]) -> str:
    """For the one-line error of a listing with no readable image: how many files it refused, and one of them."""
    if not refused:
        return ""
    path, why = next(iter(refused.items()))
    return f" ({len(refused):,} listed file(s) refused, e.g. {path}: {why})"


def read_rgb(path: str) -> Image.Image | None:
    """The decoded RGB image, or None when the file cannot be read (read_image_bytes) or decoded."""
    try:
        with Image.open(io.BytesIO(read_image_bytes(path))) as im:
            return im.convert("RGB")  # convert() forces the full decode inside the try
    except Exception:  # PIL reports bad bytes as OSError, SyntaxError, ValueError, EOFError, ...
        return None


def pixel_limit() -> int | None:
    """The pixel count above which both loaders refuse an image: PIL's own, read at call time so a
    user's PIL.Image.MAX_IMAGE_PIXELS applies. Image.open raises DecompressionBombError above
    2 * MAX_IMAGE_PIXELS (PIL/Image.py, _decompression_bomb_check); None disables it, as in PIL."""
    return None if Image.MAX_IMAGE_PIXELS is None else 2 * Image.MAX_IMAGE_PIXELS


# JPEG frame headers (T.81 table B.1: SOF0-3, 5-7, 9-11, 13-15) hold the height and width PIL's JpegImageFile
# takes its size from; markers with no length field (TEM, RST0-7, SOI, EOI) end the walk below (PIL decides).
_SOF = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)})


def jpeg_declared_pixels(buf: bytes) -> int | None:
    """width x height as PIL's JpegImageFile._open sets its size (each SOF segment before the first SOS
    overwrites it; PIL/JpegImagePlugin.py), from a walk of the marker segments by their lengths; None where
    the walk meets anything it does not model (bytes between segments, a marker with no length, a segment
    past the end): PIL then reads the header itself."""
    n = len(buf)
    if buf[:3] != b"\xff\xd8\xff":
        return None
    pos, pixels = 2, None
    while pos + 4 <= n:
        if buf[pos] != 0xFF:
            return None
        while pos + 1 < n and buf[pos + 1] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos + 4 > n:
            return None
        code = buf[pos + 1]
        if code == 0xDA:  # start of scan: PIL stops here
            return pixels
        if code == 0x00 or code == 0x01 or 0xD0 <= code <= 0xD9:
            return None
        length = (buf[pos + 2] << 8) | buf[pos + 3]
        if length < 2 or pos + 2 + length > n:
            return None
        if code in _SOF:
            if length < 7:
                return None
            height = (buf[pos + 5] << 8) | buf[pos + 6]
            width = (buf[pos + 7] << 8) | buf[pos + 8]
            pixels = width * height
        pos += 2 + length
    return None


def over_pixel_limit(data: bytes | bytearray | memoryview | np.ndarray) -> str | None:
    """Why an encoded image is refused before decoding (its header declares too many pixels), or
    None. Reads the header only (Image.open is lazy), through the same check the PIL loader meets:
    a 633-byte JPEG declaring 30000 x 30000 would otherwise decode to 2.7 GB. A JPEG whose frame header
    declares no more than the limit is let through from a walk of its markers (jpeg_declared_pixels: 8 us
    against Image.open's 47 us on a 512x384 photo, issue 37); PIL's own open decides every other file, and
    words every refusal."""
    limit = pixel_limit()
    if limit is None:
        return None  # PIL checks nothing then (_decompression_bomb_check)
    head = bytes(memoryview(data)[:65536])  # the frame header comes before the scan: no need to copy the rest
    declared = jpeg_declared_pixels(head)
    if declared is not None and declared <= limit:
        return None
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
    """Why a skipped file was skipped, for the record (re-read, as the loaders read it, for the few examples kept)."""
    try:
        data = read_image_bytes(path)
    except NotAnImageFile as e:
        return str(e)
    except OSError as e:
        return f"unreadable ({e.strerror or type(e).__name__})"
    return over_pixel_limit(data) or "cannot be decoded"


@dataclass(frozen=True)
class FileExamples:
    paths: tuple[str, ...]
    labels: np.ndarray
    refused: Mapping[str, str] = field(default_factory=dict)
    """Files the listing found and left out (ImageFiles), path -> reason: the dataset's, not a split's."""

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

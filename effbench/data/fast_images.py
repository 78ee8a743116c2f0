"""The `fast` loader for image files (Food-101, class folders): decode small, augment on the device.

Workers read each file, decode it with libjpeg-turbo (`torchvision.io.decode_jpeg`; other formats
through `decode_image`), resize the shorter side to `side` = 8/7 of the input size and cut the
central side x side square, all on uint8 tensors. Batches travel as uint8 (a quarter of float32's
bytes through shared memory and over PCIe), pinned on CUDA and copied with non_blocking=True. On the
device: the --augment recipe's crop, flip and rotation (train) or CenterCrop (val), then Normalize,
batched (effbench.data.augment; the recipes in effbench.recipes).

With --gpu-decode the workers only read the bytes; JPEGs are decoded in batches on the GPU (nvjpeg,
`decode_jpeg(device="cuda")`) and resized there. Other formats are still decoded in the workers.

An unreadable file never stops a worker or the run: as in the torchvision loader, training uses the
next readable file in its place (the batch stays full) and validation leaves it out; SkipLog counts
each file once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from effbench.data import augment
from effbench.data.augment import stream_seed
from effbench.data.images import MAX_STAND_INS, FileExamples, over_pixel_limit
from effbench.data.loaders import LoaderOptions, ShardSampler, SkipLog, collate_samples, seeded_sampler
from effbench.recipes import Recipe

Batch = tuple[torch.Tensor, torch.Tensor]
JPEG_MAGIC = b"\xff\xd8\xff"


def read_bytes(path: str) -> torch.Tensor:
    """The file's bytes as a uint8 tensor. A plain read, not torchvision.io.read_file, which maps
    the file: a file rewritten while mapped would change under the decoder."""
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)


def is_jpeg(data: torch.Tensor) -> bool:
    return bytes(data[:3].tolist()) == JPEG_MAGIC


def decode_cpu(data: torch.Tensor) -> torch.Tensor:
    """uint8 3 x H x W RGB; raises RuntimeError on bytes no decoder can read."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    if is_jpeg(data):
        return decode_jpeg(data, mode=ImageReadMode.RGB)
    return decode_image(data, mode=ImageReadMode.RGB)


def square(image: torch.Tensor, side: int) -> torch.Tensor:
    """Shorter side resized to `side` (bilinear, antialiased, as torchvision's Resize), then the
    central side x side window; uint8 in, uint8 out, contiguous."""
    from torchvision.transforms.v2 import functional as F2

    image = F2.resize(image, [side], antialias=True)
    return augment.center_crop(image, side).contiguous()


def read_square(path: str, side: int) -> torch.Tensor | None:
    """A file decoded and squared on the CPU, or None when it cannot be read or decoded, or its
    header declares more pixels than the PIL loader accepts (checked before decoding)."""
    try:
        data = read_bytes(path)
        if over_pixel_limit(data.numpy()) is not None:
            return None
        return square(decode_cpu(data), side)
    except Exception:  # unreadable bytes raise RuntimeError; a vanished file OSError
        return None


def read_encoded(path: str, side: int) -> torch.Tensor | None:
    """--gpu-decode: a JPEG's raw bytes (1-D) for the GPU; any other format decoded and squared
    here (3-D); None when unreadable."""
    try:
        data = read_bytes(path)
    except OSError:
        return None
    if is_jpeg(data) and over_pixel_limit(data.numpy()) is not None:  # nvjpeg would allocate it all
        return None
    return data if is_jpeg(data) else read_square(path, side)


class SquaredFiles(Dataset):
    """Samples (uint8 image or None, label, skipped paths), the torchvision loader's contract, with
    a torch reader in place of PIL. Training stands the next readable file in for a bad one."""

    def __init__(
        self, examples: FileExamples, reader: Callable[[str, int], torch.Tensor | None], side: int, *, stand_in: bool
    ) -> None:
        self.examples = examples
        self.reader = reader
        self.side = side
        self.stand_in = stand_in

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, int, tuple[str, ...]]:
        n = len(self.examples)
        skipped: list[str] = []
        for k in range(MAX_STAND_INS + 1 if self.stand_in else 1):
            i = (index + k) % n
            image = self.reader(self.examples.paths[i], self.side)
            if image is not None:
                return image, int(self.examples.labels[i]), tuple(skipped)
            skipped.append(self.examples.paths[i])
        return None, int(self.examples.labels[index]), tuple(skipped)


def collate_encoded(samples: Sequence[tuple[Any, int, tuple[str, ...]]]) -> tuple[Any, Any, tuple[str, ...]]:
    """--gpu-decode: keep the variable-length byte tensors as a list (they cannot be stacked)."""
    skipped = tuple(p for s in samples for p in s[2])
    kept = [(s[0], s[1]) for s in samples if s[0] is not None]
    if not kept:
        return None, None, skipped
    return [k[0] for k in kept], torch.tensor([k[1] for k in kept], dtype=torch.int64), skipped


def decode_on_device(items: list[torch.Tensor], side: int, device: torch.device) -> tuple[torch.Tensor, list[int]]:
    """(uint8 batch n x 3 x side x side on `device`, positions that could not be decoded).

    JPEG bytes are decoded together on `device` (nvjpeg on CUDA); when the batch call fails, one
    at a time, to find the bad files. Items that are already images (3-D) were decoded by a worker.
    """
    from torchvision.io import ImageReadMode, decode_jpeg

    from effbench.run.faults import is_out_of_memory

    encoded = [i for i, t in enumerate(items) if t.ndim == 1]
    decoded: dict[int, torch.Tensor] = {}
    if encoded:
        # torch.OutOfMemoryError subclasses RuntimeError: out of memory is the run's failure (status oom),
        # never a corrupt file, so it is re-raised before any image is marked bad.
        try:
            outs = decode_jpeg([items[i] for i in encoded], mode=ImageReadMode.RGB, device=device)
            decoded.update(zip(encoded, outs, strict=True))
        except RuntimeError as e:
            if is_out_of_memory(e):
                raise
            for i in encoded:
                try:
                    decoded[i] = decode_jpeg(items[i], mode=ImageReadMode.RGB, device=device)
                except RuntimeError as e1:
                    if is_out_of_memory(e1):
                        raise
    out: list[torch.Tensor] = []
    bad: list[int] = []
    for i, t in enumerate(items):
        if t.ndim == 1:
            if i not in decoded:
                bad.append(i)
                continue
            out.append(square(decoded[i], side))
        else:
            out.append(t.to(device, non_blocking=True))
    if not out:
        return torch.empty((0, 3, side, side), dtype=torch.uint8, device=device), bad
    return torch.stack(out), bad


class DeviceAugmentLoader:
    """Re-iterable: uint8 batches from a DataLoader, copied to the device (non_blocking from pinned
    memory), then augmented and normalized there. Yields (float32 NCHW, int64) on the device."""

    def __init__(
        self,
        loader: DataLoader,
        log: SkipLog,
        device: torch.device,
        prepare: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
        generator: torch.Generator,
        *,
        encoded: bool,
        side: int,
        keep_full: bool,
        batch_size: int,
    ) -> None:
        self.loader = loader
        self.log = log
        self.device = device
        self.prepare = prepare
        self.generator = generator
        self.encoded = encoded
        self.side = side
        self.keep_full = keep_full
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.loader)

    def _decode(
        self, items: list[torch.Tensor], labels: torch.Tensor, paths: list[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        images, bad = decode_on_device(items, self.side, self.device)
        if bad:
            self.log.paths.update(paths[i] for i in bad)
            keep = [i for i in range(len(items)) if i not in set(bad)]
            labels = labels[keep]
            if self.keep_full and len(keep):  # training batches stay full: repeat readable images
                fill = [k % len(keep) for k in range(self.batch_size - len(keep))]
                images = torch.cat([images, images[fill]])
                labels = torch.cat([labels, labels[fill]])
        return images, labels

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.loader:
            images, labels, skipped = batch[0], batch[1], batch[2]
            if skipped:
                self.log.paths.update(skipped)
            if images is None:
                continue
            if self.encoded:
                images, labels = self._decode(images, labels, list(batch[3]))
                if len(labels) == 0:
                    continue
            else:
                images = images.to(self.device, non_blocking=True)
            with augment.one_host_thread(self.device):
                x = self.prepare(images, self.generator)
            yield x, labels.to(self.device, non_blocking=True)


def image_recipe(
    recipe: Recipe, *, train: bool, channels_last: bool
) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """`prepare` for uint8 base x base squares on the device: the recipe's augmentation, batched (the
    torchvision loader builds the same recipe per sample in effbench.data.transforms)."""
    assert recipe.kind == "files"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    size = recipe.image_size

    def prepare(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if not train or recipe.crop == "center":
            x = augment.center_crop(batch, recipe.crop_size)
        elif recipe.crop == "random":  # crop + flip + rotation: one uint8 gather, on any device
            x = augment.random_crop_flip_rotate(batch, recipe.crop_size, recipe.rotation_deg, generator)
        elif batch.device.type == "cpu":  # uint8 per image: 3x faster than grid_sample on the CPU
            x = augment.random_resized_crop_flip_uint8(batch, size, generator)
        else:  # one grid_sample kernel for the whole batch
            x = augment.random_resized_crop_flip(batch.to(dtype=torch.float32, memory_format=fmt), size, generator)
        return augment.normalize(x, recipe.mean, recipe.std, memory_format=fmt)

    return prepare


class _WithPaths(Dataset):
    """--gpu-decode samples carry their path so a file the GPU cannot decode is named in SkipLog."""

    def __init__(self, inner: SquaredFiles) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> tuple[Any, int, tuple[str, ...], str]:
        image, label, skipped = self.inner[index]
        n = len(self.inner.examples)
        used = (index + len(skipped)) % n
        return image, label, skipped, self.inner.examples.paths[used]


def _collate_with_paths(
    samples: Sequence[tuple[Any, int, tuple[str, ...], str]],
) -> tuple[Any, Any, tuple[str, ...], tuple[str, ...]]:
    images, labels, skipped = collate_encoded([s[:3] for s in samples])
    return images, labels, skipped, tuple(s[3] for s in samples if s[0] is not None)


def build_loaders(
    train_ex: FileExamples,
    val_ex: FileExamples,
    opts: LoaderOptions,
    device: torch.device,
    recipe: Recipe,
    *,
    channels_last: bool,
    gpu_decode: bool,
) -> tuple[DeviceAugmentLoader, DeviceAugmentLoader, Callable[[int], None], SkipLog, str]:
    """(train, val, set_epoch, skip log, recipe) for one rank; set_epoch reshuffles and reseeds
    the device generator from (seed, rank, epoch)."""
    side = recipe.base
    reader = read_encoded if gpu_decode else read_square
    log = SkipLog()
    train_prep = image_recipe(recipe, train=True, channels_last=channels_last)
    val_prep = image_recipe(recipe, train=False, channels_last=channels_last)
    gen = torch.Generator(device=device).manual_seed(stream_seed(opts.seed, opts.rank, 0))

    def make(ex: FileExamples, train: bool) -> tuple[DeviceAugmentLoader, Any]:
        ds: Dataset = SquaredFiles(ex, reader, side, stand_in=train)
        collate: Callable = collate_samples
        if gpu_decode:
            ds, collate = _WithPaths(ds), _collate_with_paths  # type: ignore[arg-type]
        sampler = seeded_sampler(len(ex), opts) if train else ShardSampler(len(ex), opts.rank, opts.world_size)
        loader = DataLoader(
            ds,
            batch_size=opts.batch_size,
            sampler=sampler,
            num_workers=opts.workers,
            collate_fn=collate,
            pin_memory=opts.pin_memory and not gpu_decode,
            drop_last=train,
            persistent_workers=opts.workers > 0,
        )
        wrapped = DeviceAugmentLoader(
            loader, log, device, train_prep if train else val_prep, gen,
            encoded=gpu_decode, side=side, keep_full=train, batch_size=opts.batch_size,
        )  # fmt: skip
        return wrapped, sampler

    train, sampler = make(train_ex, True)
    val, _ = make(val_ex, False)

    def set_epoch(epoch: int) -> None:
        sampler.set_epoch(epoch)
        gen.manual_seed(stream_seed(opts.seed, opts.rank, epoch))

    return (
        train,
        val,
        set_epoch,
        log,
        recipe.steps() + (" (JPEG decode on the GPU, nvjpeg)" if gpu_decode else " (libjpeg-turbo decode_jpeg)"),
    )

"""The `fast` loader for image files (Food-101, class folders): decode small, augment on the device.

Workers read each file, decode it (JPEG: TorchCodec's libjpeg-turbo `decode_jpeg`; other formats: PIL,
as the torchvision loader; both give PIL's pixels bit for bit, docs/decoding.md), resize the shorter
side to `side` = 8/7 of the input size and cut the central side x side square (or, where the recipe's next
step is CenterCrop, its central window), all on uint8 tensors.
Batches travel as uint8 (a quarter of float32's bytes through shared memory and over PCIe), pinned on CUDA
and copied with non_blocking=True; on the CPU the workers write them into a ring of shared-memory slots the
training process reads in place (effbench.data.batch_ring). On the device: the --augment recipe's crop,
flip and rotation (train) or CenterCrop (val), then Normalize, batched (effbench.data.augment; the recipes in
effbench.recipes).

With --gpu-decode the workers only read the bytes; JPEGs are decoded in batches on the GPU (TorchCodec's
nvJPEG `decode_jpeg(device="cuda")`, on the current stream) and resized there. Other formats are still
decoded in the workers. A batch nvJPEG cannot decode is decoded again image by image on the CPU decoder;
out of memory is the run's OOM, never a corrupt file.

An unreadable file never stops a worker or the run: as in the torchvision loader, training uses the
next readable file in its place (the batch stays full) and validation leaves it out; SkipLog counts
each file once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset

from effbench.data import augment
from effbench.data.augment import stream_seed
from effbench.data.batch_ring import PREFETCH_FACTOR, BatchRing, RingCollate, SlotSamples, SlottedBatches, ring_slots
from effbench.data.images import MAX_STAND_INS, FileExamples, over_pixel_limit, read_image_bytes
from effbench.data.loaders import (
    LoaderOptions,
    ShardSampler,
    SkipLog,
    collate_samples,
    sample_loader,
    seeded_sampler,
    worker_context,
)
from effbench.errors import EffbenchError
from effbench.recipes import Recipe

Batch = tuple[torch.Tensor, torch.Tensor]
JPEG_MAGIC = b"\xff\xd8\xff"


def read_bytes(path: str) -> torch.Tensor:
    """The file's bytes as a uint8 tensor (images.read_image_bytes: a regular file, bounded, never a FIFO's
    wait). A plain read, not torchvision.io.read_file, which maps the file: a file rewritten while mapped
    would change under the decoder."""
    data = read_image_bytes(path)
    return torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def is_jpeg(data: torch.Tensor) -> bool:
    return bytes(data[:3].tolist()) == JPEG_MAGIC


# TorchCodec's JPEG decoders (CPU and nvJPEG) turn the image by its EXIF orientation, with no option to
# leave it (torchcodec/_core/DecodeJpeg.cpp: decode_jpeg reads the first APP1 marker libjpeg saved;
# DecodeJpegCuda.cpp: fetch_exif_orientation_from_jpeg_bytes). PIL's convert("RGB"), the torchvision loader,
# and torchvision's decode_jpeg before it never did: renaming APP1 to APP15, which no decoder reads and
# which carries no pixel data, keeps the stored orientation.
_APP1, _APP15 = 0xE1, 0xEF
# Markers with no length field: TEM, RST0-7, SOI (JPEG T.81 table B.1); 0x00 after 0xFF is a stuffed byte.
_NO_LENGTH = frozenset({0x00, 0x01, *range(0xD0, 0xD8), 0xD8})


def app1_offsets(buf: bytes) -> list[int]:
    """Offsets of the code byte of every APP1 marker, found as libjpeg's next_marker does (jdmarker.c:
    skip to 0xFF, skip fill 0xFFs, 0xFF00 is data) and skipping each segment by its length, up to EOI."""
    found: list[int] = []
    pos, n = 2, len(buf)
    while (pos := buf.find(b"\xff", pos)) >= 0:
        while pos + 1 < n and buf[pos + 1] == 0xFF:
            pos += 1
        if pos + 3 >= n or buf[pos + 1] == 0xD9:  # EOI, or no room for a length
            break
        code, pos = buf[pos + 1], pos + 2
        if code in _NO_LENGTH:
            continue
        if code == _APP1:
            found.append(pos - 1)
        pos += (buf[pos] << 8) | buf[pos + 1]
    return found


def keep_stored_orientation(data: torch.Tensor) -> torch.Tensor:
    """JPEG bytes whose APP1 (EXIF) markers read as APP15, a copy where there were any, so TorchCodec
    decodes the pixels as stored (as PIL does), not turned by the EXIF orientation."""
    arr = data.numpy()
    after = np.flatnonzero(arr[1:] == _APP1)  # numpy: 4x faster than bytes' `in` on 100+ kB files
    if not (arr[after] == 0xFF).any():  # no 0xFF 0xE1 anywhere (stuffed scan data never holds one): no APP1
        return data
    offsets = app1_offsets(arr.tobytes())
    if not offsets:  # the pair sat inside a segment's payload
        return data
    out = data.clone()
    out[offsets] = _APP15
    return out


def decode_pil(data: torch.Tensor) -> torch.Tensor:
    """uint8 3 x H x W RGB of a non-JPEG file, decoded by PIL as the torchvision loader does (read_rgb).
    Not TorchCodec: its PNG and WebP decoders apply EXIF orientation, its 16-bit PNGs scale where PIL clips."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data.numpy().tobytes())) as im:
        rgb = np.asarray(im.convert("RGB"))
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()


def jpeg_decoder() -> Callable[..., Any]:
    """TorchCodec's decode_jpeg, or an EffbenchError when TorchCodec cannot load (not installed, or built
    for another CUDA than torch's): a broken install must stop the run, never read as corrupt files."""
    try:
        from torchcodec.decoders import decode_jpeg
    except Exception as e:  # ImportError; OSError from torch.ops.load_library when a library is missing
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise EffbenchError(
            "--loader",
            f"the fast loader decodes JPEGs with TorchCodec, which cannot load ({first}); install "
            "torchcodec==0.17.0 built for this torch's CUDA, or pass --loader torchvision (PIL)",
        ) from e
    return decode_jpeg


def decode_cpu(data: torch.Tensor) -> torch.Tensor:
    """uint8 3 x H x W RGB, PIL's Image.open(...).convert("RGB") bit for bit (tests/unit/test_decode.py);
    raises on bytes no decoder can read."""
    if is_jpeg(data):
        return jpeg_decoder()(keep_stored_orientation(data), mode="RGB")
    return decode_pil(data)


def square(image: torch.Tensor, side: int) -> torch.Tensor:
    """Shorter side resized to `side` (bilinear, antialiased, as torchvision's Resize), then the
    central side x side window; uint8 in, uint8 out. Left in the memory order the decoder and resize give
    (height, width, channel: channels-last strides) rather than made contiguous: a transposing copy per
    image cost 0.17 ms of the worker's 1.6 ms (issue 37), and collate_squares stacks the rows as they lie."""
    from torchvision.transforms.v2 import functional as F2

    image = F2.resize(image, [side], antialias=True)
    return augment.center_crop(image, side)


def collate_squares(samples: Sequence[tuple[Any, int, tuple[str, ...]]]) -> tuple[Any, Any, tuple[str, ...]]:
    """collate_samples for the squares read_square makes: stacked as (n, H, W, C) in the decoder's own memory
    order, handed over as the (n, C, H, W) view of it (channels-last strides). torch.stack of the squares as
    C x H x W copies with a transposing gather: 48 ms for 32 images at 256 px here, against 2 ms row by row
    (issue 37). Values are the same; only the strides differ."""
    images, labels, skipped = collate_samples(
        [(None if s[0] is None else s[0].permute(1, 2, 0), *s[1:]) for s in samples]
    )
    return (None if images is None else images.permute(0, 3, 1, 2)), labels, skipped


def read_square(path: str, side: int) -> torch.Tensor | None:
    """A file decoded and squared on the CPU, or None when it cannot be read or decoded, or its
    header declares more pixels than the PIL loader accepts (checked before decoding)."""
    jpeg_decoder()  # outside the try: a decoder that cannot load is no corrupt file
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
    return keep_stored_orientation(data) if is_jpeg(data) else read_square(path, side)


class SquaredFiles(Dataset):
    """Samples (uint8 image or None, label, skipped paths), the torchvision loader's contract, with
    a torch reader in place of PIL. Training stands the next readable file in for a bad one.

    `window` < side: a decoded image is cut to its central window x window square here, in the worker, where
    the recipe's next step is that CenterCrop anyway (validation, `--augment none`): the batch then carries
    (window / side)^2 of the bytes through shared memory (224 of 256 px: 0.77), and the device's CenterCrop of
    it is the whole batch. The same pixels: CenterCrop of a CenterCrop of the square, as on the device."""

    def __init__(
        self,
        examples: FileExamples,
        reader: Callable[[str, int], torch.Tensor | None],
        side: int,
        *,
        stand_in: bool,
        window: int | None = None,
    ) -> None:
        self.examples = examples
        self.reader = reader
        self.side = side
        self.stand_in = stand_in
        self.window = side if window is None else window

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor | None, int, tuple[str, ...]]:
        n = len(self.examples)
        skipped: list[str] = []
        for k in range(MAX_STAND_INS + 1 if self.stand_in else 1):
            i = (index + k) % n
            image = self.reader(self.examples.paths[i], self.side)
            if image is not None:
                if self.window < self.side:
                    image = augment.center_crop(image, self.window)
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

    JPEG bytes are decoded together on `device` by TorchCodec (nvJPEG on CUDA). It enqueues nvJPEG's work
    on the current stream of `device` and synchronizes that stream before it returns (torchcodec 0.17,
    _core/DecodeJpegCuda.cpp: decode_jpegs_cuda takes get_current_cuda_stream; CUDAJpegDecoder::decode_images
    ends in cudaStreamSynchronize(stream), and decode_batched_hardware synchronizes it before the hardware
    engine starts, which does not honour the stream). So called here, on the stream the training and the
    validation kernels use (never inside a torch.cuda.stream context), its images are whole and nothing
    queued earlier on that stream can still be reading their memory: torchvision's decoder, which wrote on a
    private stream, needed a sync after it that validation never made.

    Out of memory (torch's or nvJPEG's own, faults.is_out_of_memory) is raised as torch.OutOfMemoryError, the
    run's `oom`. Any other failure of the batch decodes each JPEG again with the workers' CPU decoder: only
    the files that fail there too are bad. Items that are already images (3-D) were decoded by a worker.
    """
    from effbench.run.faults import is_out_of_memory

    decode_jpeg = jpeg_decoder()
    encoded = [i for i, t in enumerate(items) if t.ndim == 1]
    decoded: dict[int, torch.Tensor] = {}
    if encoded:
        try:
            outs = decode_jpeg([items[i] for i in encoded], mode="RGB", device=device)
            decoded.update(zip(encoded, outs, strict=True))
        except Exception as e:  # TorchCodec raises RuntimeError (STD_TORCH_CHECK) or ValueError
            if is_out_of_memory(e):
                raise decode_out_of_memory(e, len(encoded), device) from e
            for i in encoded:
                try:
                    decoded[i] = decode_cpu(items[i]).to(device)
                except Exception as e1:
                    if is_out_of_memory(e1):
                        raise decode_out_of_memory(e1, len(encoded), device) from e1
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


def decode_out_of_memory(e: BaseException, n: int, device: torch.device) -> torch.OutOfMemoryError:
    """The run's OOM for a decode that ran out of memory, in one line naming the batch and the fixes."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return torch.OutOfMemoryError(
        f"--gpu-decode: decoding {n} JPEGs on {device} ran out of memory ({first}); "
        "lower --batch-size, or decode in the workers (leave out --gpu-decode)"
    )


def undecodable_batch(paths: Sequence[str]) -> EffbenchError:
    """A training batch with no image left to train on: skipping it would leave this rank one step short
    of the others (DDP would wait in the next all-reduce until the process group's timeout). A worker that
    looks for a stand-in may try one file several times: each is named once."""
    paths = list(dict.fromkeys(paths))
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return EffbenchError(
        "--data-dir",
        f"no image of a training batch could be decoded ({len(paths)} file(s): {shown or 'none named'}); "
        "check the dataset files or restore the copy",
    )


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
        ring: BatchRing | None = None,
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
        self.ring = ring

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
            if self.keep_full and not keep:
                raise undecodable_batch([paths[i] for i in bad])
            if self.keep_full:  # training batches stay full: repeat readable images
                fill = [k % len(keep) for k in range(self.batch_size - len(keep))]
                images = torch.cat([images, images[fill]])
                labels = torch.cat([labels, labels[fill]])
        return images, labels

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.loader:
            images, labels, skipped = batch[0], batch[1], batch[2]
            if skipped:
                self.log.paths.update(skipped)
            if images is None:  # no sample of the batch could be read
                if self.keep_full:  # training: never one step fewer than the other ranks
                    raise undecodable_batch(skipped)
                continue
            if self.encoded:
                images, labels = self._decode(images, labels, list(batch[3]))
                if len(labels) == 0:  # validation only: _decode raises for a training batch
                    continue
            elif self.ring is not None:  # the CPU: the batch is a slot of the ring, read in place
                images, labels = self.ring.view(images), torch.tensor(labels, dtype=torch.int64)
            else:
                images = images.to(self.device, non_blocking=True)
            with augment.one_host_thread(self.device):
                x = self.prepare(images, self.generator)
            if self.ring is not None and self.ring.holds(x):  # the next batch would overwrite what we yield
                raise AssertionError("the recipe returned a view of the batch ring; it must copy the pixels out")
            yield x, labels.to(self.device, non_blocking=True)


def centre_crop_first(recipe: Recipe, *, train: bool) -> bool:
    """Whether image_recipe's first step is CenterCrop(crop_size): validation, and `--augment none` training."""
    return not train or recipe.crop == "center"


def image_recipe(
    recipe: Recipe, *, train: bool, channels_last: bool
) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """`prepare` for uint8 base x base squares on the device (or, where its first step is CenterCrop, the
    crop_size windows the workers already cut: SquaredFiles.window): the recipe's augmentation, batched (the
    torchvision loader builds the same recipe per sample in effbench.data.transforms)."""
    assert recipe.kind == "files"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    size = recipe.image_size

    def prepare(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if centre_crop_first(recipe, train=train):
            x = augment.center_crop(batch, recipe.crop_size)
        elif recipe.crop == "random" and batch.device.type == "cpu":  # PIL's own rotation, image by image
            x = augment.random_crop_flip_rotate_pil(batch, recipe.crop_size, recipe.rotation_deg, generator)
        elif recipe.crop == "random":  # crop + flip + rotation: one uint8 gather on the device
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
    jpeg_decoder()  # here, in the training process: its error is one line before any worker starts
    reader = read_encoded if gpu_decode else read_square
    log = SkipLog()
    train_prep = image_recipe(recipe, train=True, channels_last=channels_last)
    val_prep = image_recipe(recipe, train=False, channels_last=channels_last)
    gen = torch.Generator(device=device).manual_seed(stream_seed(opts.seed, opts.rank, 0))

    def make(ex: FileExamples, train: bool) -> tuple[DeviceAugmentLoader, Any]:
        # --gpu-decode: the workers send JPEG bytes, squared on the device, and square other files: one size
        window = recipe.crop_size if centre_crop_first(recipe, train=train) and not gpu_decode else side
        ds: Dataset = SquaredFiles(ex, reader, side, stand_in=train, window=window)
        sampler = seeded_sampler(len(ex), opts) if train else ShardSampler(len(ex), opts.rank, opts.world_size)
        ring = None
        if gpu_decode:
            loader = sample_loader(
                _WithPaths(ds), sampler, opts, drop_last=train, collate=_collate_with_paths, pin_memory=False
            )
        elif device.type == "cpu" and opts.workers > 0:  # batches stay in shared memory: batch_ring
            ring = BatchRing(ring_slots(opts.workers), opts.batch_size, (window, window, 3))
            batches = SlottedBatches(BatchSampler(sampler, opts.batch_size, drop_last=train), ring.slots)
            loader = DataLoader(
                SlotSamples(ds),
                batch_sampler=batches,
                num_workers=opts.workers,
                collate_fn=RingCollate(ring),
                persistent_workers=True,
                prefetch_factor=PREFETCH_FACTOR,
                multiprocessing_context=worker_context(opts.workers),
            )
        else:
            loader = sample_loader(ds, sampler, opts, drop_last=train, collate=collate_squares)
        wrapped = DeviceAugmentLoader(
            loader, log, device, train_prep if train else val_prep, gen,
            encoded=gpu_decode, side=side, keep_full=train, batch_size=opts.batch_size, ring=ring,
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

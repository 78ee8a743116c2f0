"""Batched augmentation on the training device: whole uint8 batches in, normalized float batches out.

Pure tensor functions, one kernel or a few per batch and no per-sample Python, so they run the same
on a GPU or the CPU. Randomness comes only from the `generator` argument (a torch.Generator on the
batch's device), so a seeded generator gives the same batch every time.

    x = random_crop_flip(images_u8, pad=4, generator=g)        # CIFAR: RandomCrop(32, 4) + flip
    x = normalize(x, mean, std)                               # ToTensor + Normalize, float32
    x = random_resized_crop_flip(x, 224, generator=g)         # RandomResizedCrop(224) + flip
    x = random_crop_flip_rotate(u8, 224, 10.0, generator=g)   # RandomCrop + flip + RandomRotation(10)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

from effbench.recipes import RRC_RATIO, RRC_SCALE, RRC_TRIES


@contextmanager
def one_host_thread(device: torch.device) -> Iterator[None]:
    """On the CPU, run the batch's augmentation on one intra-op thread, then restore the count.

    These are small memory-bound kernels (a CIFAR batch of 256 is 0.8 M bytes) where OpenMP's
    fork/join costs more than it saves, and a parallel region stalls whenever a core is busy
    elsewhere (loader workers, other jobs). Measured on 2 cores with one other busy process:
    crop+flip+normalize of 256 images ran at 5-11k img/s on 2 threads, 120-200k on 1
    (docs/performance-history.md). Setting the count costs ~0.2 us. A no-op on CUDA.
    """
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def stream_seed(seed: int, rank: int, epoch: int) -> int:
    """A well-mixed 63-bit seed for one (seed, rank, epoch): ranks and epochs augment differently,
    and epoch e draws the same augmentations however many batches came before it."""
    state = np.random.SeedSequence([seed, rank, epoch]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


def crop_flip_params(n: int, pad: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, dx, flip) per image: offsets uniform over 0..2*pad (RandomCrop's), flip with p = 0.5."""
    device = generator.device
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=device)
    flip = torch.randint(0, 2, (n,), generator=generator, device=device).bool()
    return dy, dx, flip


def crop_flip(images: torch.Tensor, pad: int, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Each image zero-padded by `pad`, cropped back to its size at (dy, dx), mirrored where `flip`.

    One gather over the padded batch: the flip is folded into the column index, so the batch is
    read once and written once whatever the mix of offsets.
    """
    n, c, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))  # zeros, as RandomCrop(padding=pad, fill=0)
    ar_h = torch.arange(h, device=images.device)
    ar_w = torch.arange(w, device=images.device)
    rows = dy[:, None] + ar_h  # (n, h)
    cols = dx[:, None] + torch.where(flip[:, None], w - 1 - ar_w, ar_w)  # (n, w)
    flat = padded.reshape(n, c, (h + 2 * pad) * (w + 2 * pad))
    index = (rows[:, :, None] * (w + 2 * pad) + cols[:, None, :]).reshape(n, 1, h * w).expand(n, c, h * w)
    return torch.gather(flat, 2, index).reshape(n, c, h, w)


def random_crop_flip(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """RandomCrop(size, padding=pad) + RandomHorizontalFlip(0.5) on a whole uint8 batch."""
    dy, dx, flip = crop_flip_params(images.shape[0], pad, generator)
    return crop_flip(images, pad, dy, dx, flip)


def normalize(
    images: torch.Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """0..255 values -> float32 (x / 255 - mean) / std, i.e. ToTensor + Normalize, in one pass
    (a float32 input in 0..255 is normalized in place)."""
    dev = images.device
    scale = (1.0 / (255.0 * torch.tensor(std, dtype=torch.float32, device=dev))).view(1, -1, 1, 1)
    bias = (
        -torch.tensor(mean, dtype=torch.float32, device=dev) / torch.tensor(std, dtype=torch.float32, device=dev)
    ).view(1, -1, 1, 1)
    if dev.type != "cpu" or images.ndim != 4:
        x = images.to(dtype=torch.float32, memory_format=memory_format)
        return x.mul_(scale).add_(bias)
    # The CPU: image by image, so each image's float32 copy (600 kB at 224 px) is scaled and shifted while it is
    # in the core's cache, not written to memory and read back twice: 0.17-0.24 against 0.38-0.73 ms per image
    # of a batch of 32 on the 2-core VM (issue 37). The same conversion and the same two roundings per value.
    in_place = images.dtype == torch.float32 and images.is_contiguous(memory_format=memory_format)
    x = images if in_place else torch.empty(images.shape, dtype=torch.float32, memory_format=memory_format)
    for i in range(x.shape[0]):
        if not in_place:
            x[i].copy_(images[i])
        x[i].mul_(scale[0]).add_(bias[0])
    return x


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize of a float batch to size x size (CIFAR upscaling; align_corners=False as
    torchvision's Resize)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False, antialias=False)


def rrc_boxes(
    n: int,
    height: int,
    width: int,
    generator: torch.Generator,
    scale: tuple[float, float] = RRC_SCALE,
    ratio: tuple[float, float] = RRC_RATIO,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(top, left, h, w, flip) per image, integer boxes drawn as RandomResizedCrop.get_params draws
    them (torchvision/transforms/transforms.py): up to 10 tries of an area fraction uniform in
    `scale` and a log aspect ratio uniform in `ratio`, w and h rounded, the first box that fits
    kept, its corner uniform over the positions; no fit in 10 tries: the central crop clamped to
    `ratio`. Flip with p = 0.5. All tries are drawn at once, so the batch costs a few kernels."""
    device = generator.device
    u = torch.rand((n, RRC_TRIES, 2), generator=generator, device=device, dtype=torch.float64)
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[..., 0])
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(log_lo + (log_hi - log_lo) * u[..., 1])
    ws = torch.round(torch.sqrt(area * aspect)).long()  # round half to even, as Python's round()
    hs = torch.round(torch.sqrt(area / aspect)).long()
    fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)
    first = fits.to(torch.int8).argmax(dim=1, keepdim=True)  # index of the first fit (0 when none)
    any_fit = fits.any(dim=1)
    # torchvision's fallback: the whole image, or its center at the nearest allowed ratio
    in_ratio = width / height
    fb_w, fb_h = width, height
    if in_ratio < min(ratio):
        fb_h = int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fb_w = int(round(height * max(ratio)))
    w = torch.where(any_fit, ws.gather(1, first)[:, 0], fb_w)
    h = torch.where(any_fit, hs.gather(1, first)[:, 0], fb_h)
    pos = torch.rand((n, 2), generator=generator, device=device, dtype=torch.float64)
    # randint(0, height - h + 1): uniform over the h positions; floor of a uniform draw
    top = torch.where(any_fit, (pos[:, 0] * (height - h + 1)).floor().long(), (height - fb_h) // 2)
    left = torch.where(any_fit, (pos[:, 1] * (width - w + 1)).floor().long(), (width - fb_w) // 2)
    flip = torch.randint(0, 2, (n,), generator=generator, device=device).bool()
    return top, left, h, w, flip


def box_theta(
    top: torch.Tensor, left: torch.Tensor, h: torch.Tensor, w: torch.Tensor, flip: torch.Tensor, height: int, width: int
) -> torch.Tensor:
    """Affine matrices (n, 2, 3) for affine_grid (align_corners=False) that map an output grid onto
    each pixel box, mirrored where `flip`."""
    theta = torch.zeros((len(top), 2, 3), device=top.device)
    theta[:, 0, 0] = (w / width) * torch.where(flip, -1.0, 1.0)
    theta[:, 0, 2] = (2 * left + w) / width - 1  # the box's center in [-1, 1]
    theta[:, 1, 1] = h / height
    theta[:, 1, 2] = (2 * top + h) / height - 1
    return theta


def rrc_params(
    n: int,
    side: int,
    generator: torch.Generator,
    scale: tuple[float, float] = RRC_SCALE,
    ratio: tuple[float, float] = RRC_RATIO,
) -> torch.Tensor:
    """rrc_boxes of a side x side image as affine matrices (n, 2, 3) for affine_crop."""
    return box_theta(*rrc_boxes(n, side, side, generator, scale, ratio), side, side)


def affine_crop(images: torch.Tensor, theta: torch.Tensor, size: int) -> torch.Tensor:
    """Sample a size x size output per image through `theta` (bilinear): crop, resize and flip in one pass."""
    grid = F.affine_grid(theta.to(images.dtype), [images.shape[0], images.shape[1], size, size], align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_resized_crop_flip(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """RandomResizedCrop(size) + RandomHorizontalFlip(0.5) on a float batch (one grid_sample, bilinear,
    no antialiasing: the CUDA path)."""
    theta = box_theta(*rrc_boxes(images.shape[0], images.shape[-2], images.shape[-1], generator), *images.shape[-2:])
    return affine_crop(images, theta, size)


def random_resized_crop_flip_uint8(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """The same crops as random_resized_crop_flip (same draws from `generator`), cut from a uint8
    batch image by image and resized with torch's uint8 SIMD bilinear (antialiased) kernel, as PIL
    resizes the torchvision loader's crops.

    For the CPU: one Python step per image, but on a 2-core CPU a batch of 32 at 256 -> 224 px took
    13.7 ms this way against 44 ms for float conversion + grid_sample (docs/performance-history.md). On
    CUDA, grid_sample's single kernel is the better choice.
    """
    n, c, side_h, side_w = images.shape
    boxes = [b.tolist() for b in rrc_boxes(n, side_h, side_w, generator)]
    out = torch.empty((n, c, size, size), dtype=images.dtype, device=images.device)
    for i, (top, left, h, w, flip) in enumerate(zip(*boxes, strict=True)):
        crop = images[i : i + 1, :, top : top + h, left : left + w]
        resized = F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
        out[i] = resized.flip(-1) if flip else resized
    return out


def crop_flip_rotate_params(
    n: int, height: int, width: int, size: int, max_deg: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, dx, flip, angle_deg): RandomCrop(size) offsets uniform over the positions, flip with
    p = 0.5, RandomRotation(max_deg)'s angle uniform in [-max_deg, max_deg]."""
    device = generator.device
    dy = torch.randint(0, height - size + 1, (n,), generator=generator, device=device)
    dx = torch.randint(0, width - size + 1, (n,), generator=generator, device=device)
    flip = torch.randint(0, 2, (n,), generator=generator, device=device).bool()
    angle = (torch.rand((n,), generator=generator, device=device) * 2 - 1) * max_deg
    return dy, dx, flip, angle


def crop_flip_rotate(
    images: torch.Tensor, size: int, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor, angle_deg: torch.Tensor
) -> torch.Tensor:
    """RandomCrop(size) at (dy, dx), then a horizontal flip where `flip`, then a rotation by
    `angle_deg` about the crop's center (nearest, zero fill): one gather over the uint8 batch.

    The rotation is PIL's Image.rotate, which torchvision's RandomRotation calls on PIL images
    (PIL/Image.py rotate + libImaging/Geometry.c affine_transform): output pixel (x, y) reads the
    input at floor(M @ (x + 0.5 - c, y + 0.5 - c) + c), M the rotation by -angle, c = size / 2,
    and gets the fill where that falls outside the crop.

    The index arithmetic stays in float32 (every offset is an integer below 2**24, so exact) and in place,
    with one conversion to int64 for the gather: on the CPU, 32 images at 256 -> 224 px took 72 ms of CPU
    in int64 and 19 ms so (the same pixels; issue 37, docs/performance-history.md).
    """
    n, c, height, width = images.shape
    dev = images.device
    a = torch.deg2rad(-angle_deg.to(torch.float32))
    cos, sin = torch.cos(a)[:, None, None], torch.sin(a)[:, None, None]
    p = torch.arange(size, device=dev, dtype=torch.float32) + 0.5 - size / 2
    xs, ys = p[None, None, :], p[None, :, None]
    col = (cos * xs + sin * ys).add_(size / 2).floor_()  # (n, size, size), in the flipped crop
    row = (-sin * xs + cos * ys).add_(size / 2).floor_()
    if dev.type == "cpu":  # only the flipped images' columns are rewritten (flip.any() is free on the CPU)
        if bool(flip.any()):
            col[flip] = (size - 1) - col[flip]
    else:  # no host sync on a device
        col = torch.where(flip[:, None, None], (size - 1) - col, col)
    col_in, row_in = col.clamp(0, size - 1), row.clamp(0, size - 1)
    inside = (col == col_in).logical_and_(row == row_in)
    src = row_in.add_(dy.to(torch.float32)[:, None, None]).mul_(width).add_(col_in)
    src = src.add_(dx.to(torch.float32)[:, None, None]).long()
    flat = images.reshape(n, c, height * width)
    out = torch.gather(flat, 2, src.reshape(n, 1, size * size).expand(n, c, size * size)).reshape(n, c, size, size)
    return out.mul_(inside[:, None])


def random_crop_flip_rotate(
    images: torch.Tensor, size: int, max_deg: float, generator: torch.Generator
) -> torch.Tensor:
    """RandomCrop(size) + RandomHorizontalFlip(0.5) + RandomRotation(max_deg) on a whole uint8 batch."""
    dy, dx, flip, angle = crop_flip_rotate_params(images.shape[0], *images.shape[-2:], size, max_deg, generator)
    return crop_flip_rotate(images, size, dy, dx, flip, angle)


def crop_flip_rotate_pil(
    images: torch.Tensor, size: int, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor, angle_deg: torch.Tensor
) -> torch.Tensor:
    """crop_flip_rotate on the CPU, image by image, with the rotation PIL's own: Image.rotate(angle, NEAREST,
    fillcolor 0), the call torchvision's RandomRotation makes on a PIL image (torchvision/transforms/
    _functional_pil.py rotate), so every pixel is the reference's. A batch of 32 at 256 -> 224 px took 19 ms
    of CPU here against 45 ms for the batched gather, whose float32 arithmetic also lands 0.1% of pixels on
    the neighbouring source pixel at nearest-neighbour boundaries (PIL computes in double). Returns the
    (n, C, size, size) view of an (n, size, size, C) buffer (channels-last strides).

    Each crop enters PIL as one contiguous copy (frombuffer), is mirrored by PIL (transpose) and leaves as
    PIL's packed bytes: a torch flip, fromarray's array interface and np.asarray cost 0.1 ms more per image
    (0.34 against 0.24 ms at 224 px, issue 37)."""
    import numpy as np
    from PIL import Image

    n, c = images.shape[:2]
    if c not in (1, 3):
        raise ValueError(f"crop_flip_rotate_pil takes 1 or 3 channels, not {c}")
    mode, fill = ("RGB", (0, 0, 0)) if c == 3 else ("L", 0)
    out = torch.empty((n, size, size, c), dtype=torch.uint8)
    written = out.numpy().reshape(n, size * size * c)  # the same memory
    hwc = images.permute(0, 2, 3, 1).numpy()  # the workers' own memory order (fast_images.collate_squares): no copy
    for i, (top, left, mirror, angle) in enumerate(
        zip(dy.tolist(), dx.tolist(), flip.tolist(), angle_deg.tolist(), strict=True)
    ):
        crop = np.ascontiguousarray(hwc[i, top : top + size, left : left + size])
        image = Image.frombuffer(mode, (size, size), crop, "raw", mode, 0, 1)
        if mirror:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        rotated = image.rotate(angle, resample=Image.Resampling.NEAREST, fillcolor=fill)
        written[i] = np.frombuffer(rotated.tobytes(), dtype=np.uint8)
    return out.permute(0, 3, 1, 2)


def random_crop_flip_rotate_pil(
    images: torch.Tensor, size: int, max_deg: float, generator: torch.Generator
) -> torch.Tensor:
    """random_crop_flip_rotate's draws (the same generator calls), applied by crop_flip_rotate_pil."""
    dy, dx, flip, angle = crop_flip_rotate_params(images.shape[0], *images.shape[-2:], size, max_deg, generator)
    return crop_flip_rotate_pil(images, size, dy, dx, flip, angle)


def center_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """The central size x size window (CenterCrop), a view."""
    h, w = images.shape[-2:]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))  # CenterCrop's rounding
    return images[..., top : top + size, left : left + size]

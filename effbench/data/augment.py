"""Batched augmentation on the training device: whole uint8 batches in, normalized float batches out.

Pure tensor functions, one kernel or a few per batch and no per-sample Python, so they run the same
on a GPU or the CPU. Randomness comes only from the `generator` argument (a torch.Generator on the
batch's device), so a seeded generator gives the same batch every time.

    x = random_crop_flip(images_u8, pad=4, generator=g)        # CIFAR: RandomCrop(32, 4) + flip
    x = normalize(x, mean, std)                               # ToTensor + Normalize, float32
    x = random_resized_crop_flip(x, 224, generator=g)         # RandomResizedCrop(224) + flip
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F

# torchvision.transforms.RandomResizedCrop's defaults (scale of the area, aspect ratio w/h); the
# ImageNet recipe of Szegedy et al. 2015 that torchvision's references use.
RRC_SCALE = (0.08, 1.0)
RRC_RATIO = (3 / 4, 4 / 3)


@contextmanager
def one_host_thread(device: torch.device) -> Iterator[None]:
    """On the CPU, run the batch's augmentation on one intra-op thread, then restore the count.

    These are small memory-bound kernels (a CIFAR batch of 256 is 0.8 M bytes) where OpenMP's
    fork/join costs more than it saves, and a parallel region stalls whenever a core is busy
    elsewhere (loader workers, other jobs). Measured on 2 cores with one other busy process:
    crop+flip+normalize of 256 images ran at 5-11k img/s on 2 threads, 120-200k on 1
    (docs/PERFORMANCE.md). Setting the count costs ~0.2 us. A no-op on CUDA.
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
    x = images.to(dtype=torch.float32, memory_format=memory_format)
    return x.mul_(scale).add_(bias)


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize of a float batch to size x size (CIFAR upscaling; align_corners=False as
    torchvision's Resize)."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    return F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False, antialias=False)


def rrc_params(
    n: int,
    side: int,
    generator: torch.Generator,
    scale: tuple[float, float] = RRC_SCALE,
    ratio: tuple[float, float] = RRC_RATIO,
) -> torch.Tensor:
    """Affine matrices (n, 2, 3) that map an output grid onto a random crop of a side x side image,
    mirrored with p = 0.5. Area fraction uniform in `scale`, log aspect ratio uniform in `ratio`
    (RandomResizedCrop's distribution); a box wider or taller than the image is clamped to it rather
    than re-drawn (torchvision re-draws up to 10 times, then falls back to a center crop)."""
    device = generator.device
    u = torch.rand((n, 4), generator=generator, device=device)
    area = scale[0] + (scale[1] - scale[0]) * u[:, 0]
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[:, 1]
    aspect = torch.exp(log_r)
    w = torch.sqrt(area * aspect).clamp(max=1.0)  # fractions of the side
    h = torch.sqrt(area / aspect).clamp(max=1.0)
    cx = (w / 2) + (1 - w) * u[:, 2]  # box center, fraction of the side, box inside the image
    cy = (h / 2) + (1 - h) * u[:, 3]
    flip = torch.randint(0, 2, (n,), generator=generator, device=device).to(torch.float32) * -2 + 1
    theta = torch.zeros((n, 2, 3), device=device)
    theta[:, 0, 0] = w * flip
    theta[:, 0, 2] = 2 * cx - 1
    theta[:, 1, 1] = h
    theta[:, 1, 2] = 2 * cy - 1
    return theta


def affine_crop(images: torch.Tensor, theta: torch.Tensor, size: int) -> torch.Tensor:
    """Sample a size x size output per image through `theta` (bilinear): crop, resize and flip in one pass."""
    grid = F.affine_grid(theta.to(images.dtype), [images.shape[0], images.shape[1], size, size], align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def random_resized_crop_flip(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """RandomResizedCrop(size) + RandomHorizontalFlip(0.5) on a float batch of square images."""
    theta = rrc_params(images.shape[0], images.shape[-1], generator)
    return affine_crop(images, theta, size)


def random_resized_crop_flip_uint8(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """The same crops as random_resized_crop_flip (same draws from `generator`), cut from a uint8
    batch image by image and resized with torch's uint8 SIMD bilinear (antialiased) kernel.

    For the CPU: one Python step per image, but on a 2-core CPU a batch of 32 at 256 -> 224 px took
    13.7 ms this way against 44 ms for float conversion + grid_sample (docs/PERFORMANCE.md). On
    CUDA, grid_sample's single kernel is the better choice.
    """
    n, c, side_h, side_w = images.shape
    theta = rrc_params(n, side_w, generator).tolist()
    out = torch.empty((n, c, size, size), dtype=images.dtype, device=images.device)
    for i, ((sx, _, tx), (_, sy, ty)) in enumerate(theta):
        w = max(1, min(side_w, round(abs(sx) * side_w)))
        h = max(1, min(side_h, round(sy * side_h)))
        left = min(max(0, round((tx + 1) / 2 * side_w - w / 2)), side_w - w)
        top = min(max(0, round((ty + 1) / 2 * side_h - h / 2)), side_h - h)
        crop = images[i : i + 1, :, top : top + h, left : left + w]
        resized = F.interpolate(crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
        out[i] = resized.flip(-1) if sx < 0 else resized
    return out


def center_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """The central size x size window (CenterCrop), a view."""
    h, w = images.shape[-2:]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))  # CenterCrop's rounding
    return images[..., top : top + size, left : left + size]

"""The selftest's references, written apart from effbench's harness: a bare training loop, per-layer
FLOP formulas, a depthwise net, an all-reduce timed by hand, and a matmul and a copy timed by the host clock
(the roofs' references). Only the model under test is shared."""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable
from math import prod
from typing import Any


class BareLoop:
    """Plain SGD steps on one fixed random batch: the selftest's reference for the harness's step.

    The optimizer is torch's SGD with effbench's defaults (lr 0.1, momentum 0.9, weight decay 5e-4); one
    device sync per step on CUDA, as any honest timer needs. It uses the process's torch threads as they
    are: run beside the harness, it gets the harness's. `now` and `sync` are its clock and its wait for the
    device (perf_counter and torch.cuda.synchronize; the asynchronous-device simulator's in tests), its own
    and not the harness's, so the reference shares no timing code with what it checks.
    """

    def __init__(
        self,
        model: Any,
        *,
        batch: int,
        image_size: int,
        classes: int,
        device: Any,
        autocast_dtype: Any = None,
        now: Callable[[], float] = time.perf_counter,
        sync: Callable[[], None] | None = None,
    ) -> None:
        import torch

        self.model = model.to(device).train()
        self.device = device
        self.now = now
        if sync is None:
            sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        self.sync = sync
        self.batch = batch
        self.autocast_dtype = autocast_dtype
        self.opt = torch.optim.SGD(
            self.model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, foreach=device.type == "cuda"
        )
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(batch, 3, image_size, image_size, generator=g).to(device)
        self.y = torch.randint(0, classes, (batch,), generator=g).to(device)

    def step(self, *, sync: bool = True) -> None:
        """One step; `sync` False leaves its kernels queued (the pipelined loop's steps)."""
        import torch

        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            loss = torch.nn.functional.cross_entropy(self.model(self.x), self.y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if sync:
            self.sync()

    def pipelined_img_s(self, steps: int) -> float:
        """`steps` steps with one device sync after the last (and one before the first, so the window starts
        with the device idle): the host queues step i+1 while the device still runs step i. Images/s."""
        self.sync()
        t0 = self.now()
        for _ in range(steps):
            self.step(sync=False)
        self.sync()
        return steps * self.batch / (self.now() - t0)

    def timed_step_img_s(self) -> float:
        """One step, timed by the wall clock around it: images/s."""
        t0 = self.now()
        self.step()
        return self.batch / (self.now() - t0)


def layer_flops(model: Any, images: Any, labels: Any) -> tuple[float, float]:
    """(training step, forward) FLOPs per image from each Conv2d/Linear's shapes, on a copy of `model`.

    Forward of a conv: 2 * N * Cout * Hout * Wout * (Cin / groups) * kh * kw; of a linear:
    2 * N * out * in. Backward: a weight gradient costing one forward per layer, plus an input
    gradient costing another where the layer's input requires grad (not the first layer).
    """
    import torch

    model = copy.deepcopy(model).train()
    layers: list[tuple[int, bool]] = []

    def hook(mod: Any, inp: Any, out: Any) -> None:
        if isinstance(mod, torch.nn.Conv2d):
            fwd = 2 * out.numel() * (mod.in_channels // mod.groups) * prod(mod.kernel_size)
        else:
            fwd = 2 * out.numel() * mod.in_features
        layers.append((fwd, bool(inp[0].requires_grad)))

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    n = int(images.shape[0])
    forward = sum(f for f, _ in layers)
    backward = sum(f + (f if needs_input_grad else 0) for f, needs_input_grad in layers)
    return (forward + backward) / n, forward / n


def depthwise_net(classes: int = 10) -> Any:
    """A MobileNet-like stack: depthwise 3x3 (stride 1 and 2), pointwise 1x1, a grouped 3x3, a linear head."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, 32, 1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32), nn.Conv2d(32, 64, 1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1, groups=8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )  # fmt: skip


def _host_timed(device: Any, fn: Any) -> float:
    """Seconds of one call by the host clock, the device idle before and synced after (not CUDA events)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


class PlainMatmul:
    """`a @ b` of two n x n operands: FLOP/s of one product (2 n^3 FLOPs), timed by the host clock."""

    def __init__(self, device: Any, dtype: Any, n: int) -> None:
        import torch

        self.device, self.n = device, n
        self.a = torch.rand(n, n, device=device).to(dtype)
        self.b = torch.rand(n, n, device=device).to(dtype)
        self.once()

    def once(self) -> float:
        return 2.0 * self.n**3 / _host_timed(self.device, lambda: self.a @ self.b)


class PlainCopy:
    """`dst[:] = src` over two fp32 buffers of `nbytes`: bytes/s counting a read and a write of each element."""

    def __init__(self, device: Any, nbytes: int) -> None:
        import torch

        self.device, self.nbytes = device, nbytes // 4 * 4
        self.src = torch.full((nbytes // 4,), 2.0, device=device)
        self.dst = torch.zeros(nbytes // 4, device=device)
        self.once()

    def once(self) -> float:
        def assign() -> None:
            self.dst[:] = self.src

        return 2.0 * self.nbytes / _host_timed(self.device, assign)


class MatmulOnly:
    """A model that is only large matmuls: two bias-free n x n linear layers on an n x n batch, no autograd, in
    `dtype` (the roofline check's compute-bound reference: intensity n / 6 FLOP per byte in fp32)."""

    def __init__(self, device: Any, dtype: Any, n: int) -> None:
        import torch

        torch.manual_seed(0)
        self.layers = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False), torch.nn.Linear(n, n, bias=False)).to(
            device, dtype
        )
        self.x = torch.randn(n, n, device=device).to(dtype)

    def __call__(self, _batch: Any = None) -> Any:
        import torch

        with torch.no_grad():
            return self.layers(self.x)


class ElementwiseOnly:
    """A model that is only large element-wise ops: a.mul_(0.5).add_(b) over two fp32 buffers of `nbytes`, in
    place (no allocation, no first-touch page faults inside a step): the memory-bound reference, 0 FLOPs counted."""

    def __init__(self, device: Any, nbytes: int) -> None:
        import torch

        self.a = torch.ones(nbytes // 4, device=device)
        self.b = torch.full((nbytes // 4,), 0.5, device=device)

    def __call__(self, _batch: Any = None) -> Any:
        import torch

        with torch.no_grad():
            return self.a.mul_(0.5).add_(self.b)


def _allreduce_rank(rank: int, world: int, init_file: str, numel: int, iters: int, backend: str, out: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        t = torch.full((numel,), float(rank + 1), device=device)
        dist.all_reduce(t)  # warm-up, and the check of the sum: 1 + 2 + ... + world in every element
        correct = bool((t == world * (world + 1) / 2).all())
        times = []
        for _ in range(iters):
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        if rank == 0:
            out.put({"correct": correct, "median_s": statistics.median(times), "bytes": numel * 4})
    finally:
        dist.destroy_process_group()


def allreduce_busbw_gb_s(
    folder: str, *, backend: str, world: int = 2, numel: int = 1 << 20, iters: int = 10
) -> dict[str, Any]:
    """Bus bandwidth of an all-reduce between `world` fresh processes, as nccl-tests defines it:
    size / time x 2 (world - 1) / world (nccl-tests doc/PERFORMANCE.md). Also whether the sum was right."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    # absolute: file://results/x would name host "results" (an --output given as a relative path hung here)
    init_file = os.path.join(os.path.abspath(folder), "allreduce-init")
    procs = [
        ctx.Process(target=_allreduce_rank, args=(r, world, init_file, numel, iters, backend, out))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    codes = [p.exitcode for p in procs]
    if any(c != 0 for c in codes) or out.empty():
        for p in procs:
            if p.is_alive():
                p.kill()
        raise RuntimeError(f"all-reduce ranks exited with {codes}")
    res = out.get()
    res["busbw_gb_s"] = res["bytes"] / res["median_s"] * 2 * (world - 1) / world / 1e9
    return res


def write_image_folder(root: Any, *, classes: int, per_class: int, size: int) -> Any:
    """root/class_<k>/img_<i>.jpg: seeded noise over a per-class colour, written by PIL (no effbench code)."""
    from pathlib import Path

    import numpy as np
    from PIL import Image

    root = Path(root)
    rng = np.random.default_rng(0)
    for k in range(classes):
        folder = root / f"class_{k}"
        folder.mkdir(parents=True, exist_ok=True)
        base = np.array([(37 * k) % 256, (91 * k) % 256, (151 * k) % 256], dtype=np.int16)
        for i in range(per_class):
            pixels = np.clip(base + rng.integers(-40, 40, (size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"img_{i:03d}.jpg", quality=90)
    return root


def decode_square(path: str, base: int) -> Any:
    """One JPEG read, decoded (torchvision.io, libjpeg-turbo), its shorter side resized to `base` (bilinear,
    antialiased) and its central base x base square cut: uint8 3 x base x base, in the decoder's HWC memory
    order. The decode ceiling's work for one image, written apart from effbench's loaders."""
    import torchvision.io as tvio
    import torchvision.transforms.v2.functional as tvf

    img = tvio.decode_jpeg(tvio.read_file(path), mode=tvio.ImageReadMode.RGB)
    return tvf.center_crop(tvf.resize(img, [base], antialias=True), [base, base])


def decode_ceiling_s(paths: Any, base: int, *, passes: int = 3) -> float:
    """Seconds per image, on one thread, to read a JPEG, decode it (torchvision.io, libjpeg-turbo), resize its
    shorter side to `base` (bilinear, antialiased) and cut the central base x base square: the least work any
    loader of these files does for an image, written apart from effbench's loaders. The fastest of `passes`
    passes over the files (a pass's mean), so another process's burst is not counted as decode time.
    A loader with W worker processes on C cores cannot deliver more than min(W, C) / this (W = 0: one)."""
    import torch

    paths = [str(p) for p in paths]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = float("inf")
        for _ in range(passes):
            t0 = time.perf_counter()
            for p in paths:
                decode_square(p, base)
            best = min(best, (time.perf_counter() - t0) / len(paths))
        return best
    finally:
        torch.set_num_threads(before)

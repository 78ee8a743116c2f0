"""--loader fast: CIFAR held on the device, image files decoded small; augmentation batched on the
device. Sampling, sharding, augmentation statistics against the torchvision pipeline, determinism,
corrupt files, and the GPU defaults resolved per device."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import fakedata
from effbench.config import RunConfig, resolve_for_device
from effbench.data.build import DataBundle, build_data
from effbench.data import augment
from effbench.datasets import CIFAR_MEAN, CIFAR_STD, IMAGENET_MEAN
from effbench.errors import EffbenchError
from effbench.recipes import resolve

CPU = torch.device("cpu")


def build(data_dir: Path, dataset: str, *, rank: int = 0, world_size: int = 1, **kw) -> DataBundle:
    base = dict(
        arch="resnet18",
        dataset=dataset,
        data_dir=data_dir,
        image_size=32,
        batch_size=4,
        workers=0,
        seed=0,
        loader="fast",
    )
    return build_data(RunConfig(**{**base, **kw}), CPU, rank=rank, world_size=world_size)


def cifar_like(root: Path, n_train: int = 512, n_test: int = 256) -> Path:
    """CIFAR-10 files in the real format whose pixels have CIFAR's per-channel mean and std, so
    normalized values should come out near mean 0, std 1."""
    fakedata.make_cifar(root, "cifar10", n_train=n_train, n_test=n_test)
    rng = np.random.default_rng(1)
    folder = root / "cifar-10-batches-py"
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = fakedata.read_cifar_raw(folder / name)
        n = len(d["labels"])
        planes = [rng.normal(m * 255, s * 255, size=(n, 1024)) for m, s in zip(CIFAR_MEAN, CIFAR_STD, strict=True)]
        d["data"] = np.clip(np.concatenate(planes, axis=1), 0, 255).round().astype(np.uint8)
        (folder / name).write_bytes(fakedata.py2_pickle({k.encode(): v for k, v in d.items()}))
    return root


def epoch_batches(data: DataBundle, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    data.set_epoch(epoch)
    xs, ys = zip(*list(data.train), strict=True)
    return torch.cat(xs), torch.cat(ys)


# --------------------------------------------------------------------------------------------------
# CIFAR on the device: sampling and sharding
# --------------------------------------------------------------------------------------------------
def test_fast_cifar_batches_live_on_the_device_with_no_workers(cifar100_dir):
    data = build(cifar100_dir, "cifar100")
    assert data.batches_on_device and data.info["loader"] == "fast"
    assert data.info["workers"] == 0 and data.steps_per_epoch == len(data.train) == 64 // 4
    x, y = next(iter(data.train))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert data.train.images.dtype == torch.uint8 and data.train.images.shape == (64, 3, 32, 32)
    json.dumps(data.info)


def test_fast_cifar_is_one_permutation_per_epoch_and_two_ranks_split_it(cifar100_dir):
    raw = fakedata.read_cifar_raw(cifar100_dir / "cifar-100-python" / "train")
    labels = torch.tensor(raw["fine_labels"])
    one = build(cifar100_dir, "cifar100")
    idx0 = one.train.epoch_indices()
    assert sorted(idx0.tolist()) == list(range(64))  # every image once
    _, y = epoch_batches(one, 0)
    assert torch.equal(y, labels[idx0])  # the batches follow that permutation
    one.set_epoch(1)
    assert sorted(one.train.epoch_indices().tolist()) == list(range(64)) and not torch.equal(
        one.train.epoch_indices(), idx0
    )

    ranks = [build(cifar100_dir, "cifar100", rank=r, world_size=2) for r in (0, 1)]
    for epoch in (0, 3):
        shards = []
        for r in ranks:
            r.set_epoch(epoch)
            shards.append(r.train.epoch_indices().tolist())
        assert set(shards[0]).isdisjoint(shards[1]) and sorted(shards[0] + shards[1]) == list(range(64))
    assert ranks[0].steps_per_epoch == ranks[1].steps_per_epoch == 8
    assert [len(list(r.train)) for r in ranks] == [8, 8]


def test_fast_cifar_drops_the_last_partial_batch_and_equalizes_ranks(cifar10_dir):
    # 60 images, 2 ranks, batch 7: 30 per rank -> 4 full batches each, 2 images per rank dropped
    ranks = [build(cifar10_dir, "cifar10", rank=r, world_size=2, batch_size=7) for r in (0, 1)]
    assert [r.steps_per_epoch for r in ranks] == [4, 4]
    for r in ranks:
        assert all(x.shape[0] == 7 for x, _ in r.train)
    # validation: 20 test images, each once over the ranks, last batch short
    val = [torch.cat([y for _, y in r.val]) for r in ranks]
    assert len(val[0]) + len(val[1]) == 20


def test_fast_cifar_is_deterministic_for_a_seed(cifar100_dir):
    a, b = build(cifar100_dir, "cifar100"), build(cifar100_dir, "cifar100")
    xa, ya = epoch_batches(a, 2)
    xb, yb = epoch_batches(b, 2)
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    xa0, _ = epoch_batches(a, 0)
    assert not torch.equal(xa0[:8], xa[:8])
    xc, yc = epoch_batches(build(cifar100_dir, "cifar100", seed=1), 2)
    assert not torch.equal(yc, ya)


def test_fast_cifar_validation_is_normalize_only(cifar100_dir):
    data = build(cifar100_dir, "cifar100")
    raw = fakedata.read_cifar_raw(cifar100_dir / "cifar-100-python" / "test")
    x = torch.cat([x for x, _ in data.val])
    y = torch.cat([y for _, y in data.val])
    expect = torch.from_numpy(raw["data"].reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    expect = (expect - torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)) / torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    assert torch.equal(y, torch.tensor(raw["fine_labels"])) and torch.allclose(x, expect, atol=1e-5)


def test_fast_cifar_upscales_on_the_device_with_imagenet_statistics(cifar100_dir):
    data = build(cifar100_dir, "cifar100", image_size=48, channels_last=True)
    x, _ = next(iter(data.train))
    vx, _ = next(iter(data.val))
    assert x.shape == vx.shape == (4, 3, 48, 48) and x.is_contiguous(memory_format=torch.channels_last)
    assert data.info["mean"] == list(IMAGENET_MEAN) and "upscale to 48" in data.info["transforms"]


# --------------------------------------------------------------------------------------------------
# Augmentation statistics: the torchvision recipe's, batched
# --------------------------------------------------------------------------------------------------
def test_crop_offsets_are_uniform_over_the_9x9_range_and_flips_are_half():
    g = torch.Generator().manual_seed(0)
    n = 81 * 400
    dy, dx, flip = augment.crop_flip_params(n, 4, g)
    assert dy.min() == 0 and dy.max() == 8 and dx.min() == 0 and dx.max() == 8
    counts = torch.bincount(dy * 9 + dx, minlength=81).double()
    # chi-square with 80 degrees of freedom: mean 80, sd ~12.6; 160 is > 6 sd out
    chi2 = float(((counts - 400) ** 2 / 400).sum())
    assert chi2 < 160, chi2
    assert abs(flip.double().mean().item() - 0.5) < 0.01


def test_crop_flip_matches_per_image_pad_crop_mirror():
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    dy, dx, flip = augment.crop_flip_params(64, 4, g)
    out = augment.crop_flip(x, 4, dy, dx, flip)
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(64):
        ref = padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32]
        assert torch.equal(out[i], ref.flip(-1) if flip[i] else ref)


def test_fast_cifar_statistics_match_the_torchvision_pipeline(tmp_path):
    root = cifar_like(tmp_path / "data")
    fast = build(root, "cifar10", batch_size=64)
    tv = build(root, "cifar10", batch_size=64, loader="torchvision")
    fx, _ = epoch_batches(fast, 0)
    tx, _ = epoch_batches(tv, 0)
    fv = torch.cat([x for x, _ in fast.val])
    # validation (normalize only) on CIFAR-statistics pixels: channel means ~0, stds ~1
    assert fv.mean(dim=(0, 2, 3)).abs().max() < 0.03 and (fv.std(dim=(0, 2, 3)) - 1).abs().max() < 0.05
    # training: zero padding pulls the means below 0 by the same amount in both pipelines
    fm, tm = fx.mean(dim=(0, 2, 3)), tx.mean(dim=(0, 2, 3))
    assert (fm - tm).abs().max() < 0.05, (fm, tm)
    assert (fx.std(dim=(0, 2, 3)) - tx.std(dim=(0, 2, 3))).abs().max() < 0.05
    # share of exactly-padded pixels (value -mean/std) agrees too: same offset distribution
    pad_value = -torch.tensor(CIFAR_MEAN) / torch.tensor(CIFAR_STD)
    share = lambda x: (x[:, 0] - pad_value[0]).abs().lt(1e-4).double().mean().item()  # noqa: E731
    assert abs(share(fx) - share(tx)) < 0.02, (share(fx), share(tx))


def test_random_resized_crop_boxes_stay_inside_the_image():
    g = torch.Generator().manual_seed(0)
    theta = augment.rrc_params(5000, 64, g)
    w, h = theta[:, 0, 0].abs(), theta[:, 1, 1]
    assert (theta[:, 0, 2].abs() + w <= 1 + 1e-5).all() and (theta[:, 1, 2].abs() + h <= 1 + 1e-5).all()
    area = w * h
    # w and h are rounded to whole pixels (as torchvision's get_params): at 64 px a box of the least
    # area (0.08 * 64**2 = 328 px, sides ~18) loses at most ~0.5 * (18 + 18) px = 0.0044 of the image
    assert area.min() >= 0.08 - 0.0045 and area.max() <= 1 + 1e-5
    assert abs((theta[:, 0, 0] < 0).double().mean().item() - 0.5) < 0.03  # flips
    # the full-image box with no flip reproduces the image
    x = torch.rand(2, 3, 16, 16)
    ident = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0]]] * 2)
    assert torch.allclose(augment.affine_crop(x, ident, 16), x, atol=1e-5)


# --------------------------------------------------------------------------------------------------
# Image files: decode small in workers, augment on the device, skip corrupt files
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_fast_food101_skips_and_counts_a_corrupt_jpeg(food101_dir, workers):
    meta = json.loads((food101_dir / "food-101" / "meta" / "train.json").read_text())
    bad = food101_dir / "food-101" / "images" / f"{meta['baklava'][0]}.jpg"
    fakedata.corrupt_file(bad)
    test_meta = json.loads((food101_dir / "food-101" / "meta" / "test.json").read_text())
    (food101_dir / "food-101" / "images" / f"{test_meta['apple_pie'][0]}.jpg").write_bytes(b"not an image at all")

    data = build(food101_dir, "food101", workers=workers, batch_size=3)
    assert data.batches_on_device and data.info["loader"] == "fast"
    for epoch in range(2):
        data.set_epoch(epoch)
        batches = list(data.train)
        assert len(batches) == data.steps_per_epoch == 6
        assert all(x.shape == (3, 3, 32, 32) and torch.isfinite(x).all() for x, _ in batches)
    assert data.stats()["corrupt_images_skipped"] == 1 and data.stats()["corrupt_image_examples"] == [str(bad)]
    vy = torch.cat([y for _, y in data.val])
    assert vy.tolist() == [0, 1, 1, 2, 2]  # the unreadable test image is left out of validation
    assert data.stats()["corrupt_images_skipped"] == 2


def test_fast_imagefolder_reads_jpeg_and_png(imagefolder_dir):
    data = build(imagefolder_dir, "imagefolder", val_fraction=0.25)
    x, y = next(iter(data.train))
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1, 2}
    n = sum(len(y) for _, y in data.val)
    assert n == data.val_size and data.stats()["corrupt_images_skipped"] == 0


def test_fast_food101_is_deterministic_and_validation_is_a_center_crop(food101_dir):
    a, b = build(food101_dir, "food101", workers=2), build(food101_dir, "food101", workers=0)
    xa, ya = epoch_batches(a, 1)
    xb, yb = epoch_batches(b, 1)
    assert torch.equal(ya, yb) and torch.allclose(xa, xb)
    va = torch.cat([x for x, _ in a.val])
    assert torch.equal(va, torch.cat([x for x, _ in a.val]))  # no randomness in validation


@pytest.mark.parametrize("name", ["none", "seed"])
def test_workers_cut_the_centre_window_where_the_recipe_centre_crops_next(food101_dir, name):
    """Validation and `--augment none` training: the workers send the central crop_size window, not the base
    square, and the batches are the recipe's own: CenterCrop of the square of each file, normalized
    (computed here from read_square, in the sampler's order). A random crop still gets the whole square."""
    from effbench.data.fast_images import read_square

    data = build(food101_dir, "food101", workers=0, augment=name)
    recipe = resolve(name, "food101", 32)
    assert recipe.base > recipe.crop_size == 32
    data.set_epoch(2)
    for loader, centred in ((data.train, name == "none"), (data.val, True)):
        raw = next(iter(loader.loader))[0]
        assert raw.shape[-1] == (recipe.crop_size if centred else recipe.base)
        if not centred:
            continue
        ds = loader.loader.dataset
        order = [i for batch in loader.loader.batch_sampler for i in batch]
        want = torch.stack([augment.center_crop(read_square(ds.examples.paths[i], recipe.base), 32) for i in order])
        got = torch.cat([x for x, _ in loader])
        assert torch.equal(got, augment.normalize(want, recipe.mean, recipe.std))


def test_gpu_decode_path_skips_undecodable_jpegs_and_keeps_batches_full(food101_dir):
    # The nvjpeg path decodes in the training process on the device; on the CPU the same code runs
    # with the CPU decoder, which is what this checks (the CLI refuses --gpu-decode without CUDA).
    from effbench.data import food101
    from effbench.data.fast_images import build_loaders
    from effbench.data.loaders import LoaderOptions

    meta = json.loads((food101_dir / "food-101" / "meta" / "train.json").read_text())
    bad = food101_dir / "food-101" / "images" / f"{meta['baklava'][0]}.jpg"
    fakedata.corrupt_file(bad)
    src = food101.load(food101_dir, download=False)
    opts = LoaderOptions(batch_size=3, workers=0, seed=0)
    train, val, set_epoch, log, recipe = build_loaders(
        src.train, src.val, opts, CPU, resolve("seed", "food101", 32), channels_last=False, gpu_decode=True
    )
    set_epoch(0)
    batches = list(train)
    assert len(batches) == 6 and all(x.shape == (3, 3, 32, 32) for x, _ in batches)
    assert log.stats()["corrupt_images_skipped"] == 1 and "GPU" in recipe
    assert sum(len(y) for _, y in val) == 6


def test_gpu_decode_needs_cuda_and_the_fast_loader(food101_dir):
    with pytest.raises(EffbenchError) as info:
        build(food101_dir, "food101", gpu_decode=True)
    assert info.value.option == "--gpu-decode" and "CUDA" in info.value.message
    with pytest.raises(EffbenchError, match="--loader fast"):
        RunConfig(dataset="food101", loader="torchvision", gpu_decode=True)
    with pytest.raises(EffbenchError, match="food101 or imagefolder"):
        RunConfig(dataset="cifar10", gpu_decode=True)


# --------------------------------------------------------------------------------------------------
# Defaults resolved per device, optimizer kernels
# --------------------------------------------------------------------------------------------------
def test_auto_loader_resolves_to_fast_and_device_defaults_are_explicit():
    cfg = RunConfig(arch="resnet18", dataset="cifar10")
    assert cfg.loader == "fast" and cfg.channels_last is None and cfg.optimizer_impl == "auto"
    gpu = resolve_for_device(cfg, "cuda")
    assert (gpu.channels_last, gpu.cudnn_benchmark, gpu.pin_memory, gpu.optimizer_impl) == (True, True, True, "fused")
    cpu = resolve_for_device(cfg, "cpu")
    assert (cpu.channels_last, cpu.cudnn_benchmark, cpu.pin_memory, cpu.optimizer_impl) == (
        False,
        False,
        False,
        "for-loop",
    )
    assert resolve_for_device(RunConfig(optimizer="adadelta"), "cuda").optimizer_impl == "foreach"
    assert resolve_for_device(RunConfig(channels_last=False), "cuda").channels_last is False  # an explicit choice stays
    assert RunConfig.from_dict(gpu.to_dict()) == gpu
    with pytest.raises(EffbenchError) as info:
        resolve_for_device(RunConfig(optimizer="adadelta", optimizer_impl="fused"), "cuda")
    assert info.value.option == "--optimizer-impl"


@pytest.mark.parametrize(
    "impl, flag, value", [("fused", "fused", True), ("foreach", "foreach", True), ("for-loop", "foreach", False)]
)
def test_optimizer_impl_reaches_torch_optim(impl, flag, value):
    from effbench.run.optim import build_optimizer

    cfg = resolve_for_device(RunConfig(optimizer="adamw", optimizer_impl=impl), "cpu")
    opt = build_optimizer(cfg, torch.nn.Linear(3, 2).parameters())
    assert opt.param_groups[0][flag] is value
    assert math.isfinite(opt.param_groups[0]["lr"])


def test_timed_steps_carry_no_profiler_ranges_and_every_span_syncs_the_training_stream():
    from torch.profiler import profile

    from effbench.run.runtime import Runtime
    from effbench.run.timing import DeviceClock, StepTimer
    from effbench.run.train import TrainStep

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    rt = Runtime(device=CPU, precision="fp32", autocast_dtype=None)
    batch = (torch.randn(4, 3, 2, 2), torch.randint(0, 3, (4,)))
    names = {}
    for labels in (True, False):
        step = TrainStep(model, opt, sched, rt, False, label_phases=labels)
        with profile() as prof:
            step(batch)
        names[labels] = {e.name for e in prof.events()}
    assert "forward" in names[True] and "forward" not in names[False] and "backward" not in names[False]

    # every data span ends with the training stream's sync (timing.py), whatever the loader
    calls = []
    timer = StepTimer(
        DeviceClock(sync_stream=lambda: calls.append("stream"), sync_device=lambda: calls.append("device"))
    )
    timer.wait_for(iter([batch]))
    with timer.compute():
        pass
    assert calls == ["stream", "stream"]


def test_uint8_and_grid_random_resized_crops_agree():
    # The CPU path (uint8, per image) and the CUDA path (grid_sample) draw the same boxes; on a
    # smooth image their outputs differ only by interpolation.
    yy, xx = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    img = torch.stack([xx * 2, yy * 2, xx + yy]).clamp(0, 255)[None].repeat(16, 1, 1, 1)
    a = augment.random_resized_crop_flip_uint8(
        img.round().to(torch.uint8), 32, torch.Generator().manual_seed(5)
    ).float()
    b = augment.random_resized_crop_flip(img, 32, torch.Generator().manual_seed(5))
    assert a.shape == b.shape == (16, 3, 32, 32)
    assert (a - b).abs().mean() < 3.0, (a - b).abs().mean()


# --- issue 37: the CPU's crop + flip + rotation is PIL's own, and the squares are stacked as they lie ---------
def _pil_reference(images, size, dy, dx, flip, angle):
    """torchvision's seed recipe on a PIL image, written here: crop, mirror, Image.rotate(NEAREST, fill 0)."""
    import numpy as np
    from PIL import Image

    outs = []
    for i in range(images.shape[0]):
        a = images[i].permute(1, 2, 0).numpy()[dy[i] : dy[i] + size, dx[i] : dx[i] + size]
        if flip[i]:
            a = a[:, ::-1]
        rotated = Image.fromarray(np.ascontiguousarray(a)).rotate(
            float(angle[i]), resample=Image.NEAREST, fillcolor=(0, 0, 0)
        )
        outs.append(torch.from_numpy(np.array(rotated)).permute(2, 0, 1))
    return torch.stack(outs)


@pytest.mark.parametrize(("side", "size"), [(256, 224), (64, 56)])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_the_cpu_rotation_is_pils_image_by_image(side, size, layout):
    g = torch.Generator().manual_seed(side)
    x = torch.randint(0, 256, (8, 3, side, side), dtype=torch.uint8, generator=g)
    params = augment.crop_flip_rotate_params(8, side, side, size, 10.0, g)
    got = augment.crop_flip_rotate_pil(x.contiguous(memory_format=layout), size, *params)
    assert torch.equal(got, _pil_reference(x, size, *[p.tolist() for p in params]))


def test_squares_are_stacked_in_their_own_memory_order_with_the_same_values():
    from effbench.data.fast_images import collate_squares, square

    g = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (3, 40, 52), dtype=torch.uint8, generator=g) for _ in range(4)]
    squares = [square(im, 32) for im in images]
    batch, labels, skipped = collate_squares([(s, k, ()) for k, s in enumerate(squares)] + [(None, 9, ("bad.jpg",))])
    assert torch.equal(batch, torch.stack([s.contiguous() for s in squares])) and labels.tolist() == [0, 1, 2, 3]
    assert batch.is_contiguous(memory_format=torch.channels_last) and skipped == ("bad.jpg",)


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_normalize_is_totensor_then_normalize_in_any_layout(layout, dtype):
    """The CPU path goes image by image: the values are still x / 255 then (x - mean) / std (torchvision's
    formula, to float32 rounding) and bit for bit the batch-wide x * (1 / (255 std)) - mean / std; a float32
    input in the asked layout is normalized in place."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    g = torch.Generator().manual_seed(0)
    u8 = torch.randint(0, 256, (5, 7, 9, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)  # channels-last
    images = u8.to(dtype).contiguous(memory_format=layout)
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    torchvision_formula = (u8.double() / 255 - m.double()) / s.double()
    batch_wide = u8.float() * (1.0 / (255.0 * s)) + (-m / s)
    got = augment.normalize(images, mean, std, memory_format=layout)
    assert got.dtype == torch.float32 and got.is_contiguous(memory_format=layout)
    assert torch.equal(got, batch_wide) and torch.allclose(got.double(), torchvision_formula, atol=1e-5, rtol=0)
    assert (got.data_ptr() == images.data_ptr()) == (dtype == torch.float32)

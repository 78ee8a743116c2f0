"""`--loader dali` (issue 26): DALI's CPU pipeline, run for real (device_id=None, no GPU).

The recipe is checked as tests/unit/test_recipes.py checks the other two loaders: a pattern image whose
pixels encode their coordinates goes through DALI's training pipeline N times; the crop offsets,
flips and angles recovered by that file's least-squares fit must follow torchvision's laws
(RandomCrop's uniform integer offsets, p = 0.5 flips, RandomRotation's uniform angles,
RandomResizedCrop's box sampler re-written in numpy), with that file's tolerances, and the per-pixel
mean and variance must agree with the torchvision loader's. The base square is compared pixel for
pixel with the fast loader's torch resize (the bound recipes.DALI_RESIZE states).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import fakedata
from clitools import invoke, only_run

pytestmark = pytest.mark.dali  # `make test-dali`
pytest.importorskip("nvidia.dali")

from effbench.config import RunConfig  # noqa: E402
from effbench.data.build import build_data  # noqa: E402
from effbench.data import dali  # noqa: E402
from effbench.data.fast_images import read_square  # noqa: E402
from effbench.data.images import FileExamples  # noqa: E402
from effbench.data.loaders import LoaderOptions  # noqa: E402
from effbench.recipes import resolve  # noqa: E402
from test_recipes import (  # noqa: E402
    BASE,
    assert_seed_files_law,
    FLIP_TOL,
    KS_TWO,
    N,
    SIZE,
    Z_PIXEL,
    compare_pixels,
    fit,
    ks_two,
    ks_uniform,
    pattern,
    reference_rrc_boxes,
    to_levels,
    torchvision_outputs,
)

CPU = torch.device("cpu")


def dali_outputs(recipe, img: np.ndarray, n: int, path) -> torch.Tensor:
    """n passes of one lossless PNG through DALI's training pipeline for `recipe`."""
    Image.fromarray(img).save(path)
    ex = FileExamples((str(path),) * n, np.zeros(n, dtype=np.int64))
    opts = LoaderOptions(batch_size=200, workers=1, seed=3)
    batches = dali.DaliBatches(
        lambda: dali._pipeline(ex, recipe, opts, CPU, train=True, seed=5), CPU, train=True, steps=n // 200
    )
    return torch.cat([x for x, _ in batches])


def build(root, dataset="imagefolder", *, augment="none", batch_size=4, workers=1, size=32, rank=0, world_size=1, **kw):
    cfg = RunConfig(arch="resnet18", dataset=dataset, data_dir=root, image_size=size, batch_size=batch_size,
                    workers=workers, loader="dali", augment=augment, device="cpu", **kw)  # fmt: skip
    return build_data(cfg, CPU, rank=rank, world_size=world_size)


# --------------------------------------------------------------------------------------------------
# Batches, counts, sharding
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("augment", ["seed", "imagenet", "none"])
def test_batches_have_the_other_loaders_format_and_counts(imagefolder_split_dir, augment):
    data = build(imagefolder_split_dir, augment=augment)
    assert data.batches_on_device and data.info["loader"] == "dali"
    assert data.info["augment"] == resolve(augment, "imagefolder", 32).record()
    for epoch in range(2):
        data.set_epoch(epoch)
        batches = list(data.train)
        # 18 training images, batch 4: 4 full batches (drop_last), as the other loaders
        assert len(batches) == data.steps_per_epoch == 4
        assert all(x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 for x, _ in batches)
        assert all(y.dtype == torch.int64 and set(y.tolist()) <= {0, 1, 2} for _, y in batches)
        labels = torch.cat([y for _, y in data.val])
        assert sorted(labels.tolist()) == [0, 0, 1, 1, 2, 2]  # every image once, the padding dropped


def test_training_order_is_a_seeded_permutation_per_epoch(imagefolder_dir):
    a = build(imagefolder_dir, val_fraction=0.25, batch_size=2)
    b = build(imagefolder_dir, val_fraction=0.25, batch_size=2)
    ea = [torch.cat([y for _, y in a.train]).tolist() for _ in range(3)]
    eb = [torch.cat([y for _, y in b.train]).tolist() for _ in range(3)]
    assert ea == eb  # the same seed, the same order
    assert ea[0] != ea[1] or ea[1] != ea[2]  # reshuffled at each epoch


@pytest.mark.parametrize("world", [2, 3])
def test_validation_shards_cover_every_image_once(tmp_path, world):
    root = fakedata.make_imagefolder(tmp_path, classes=3, per_class=4, split=True, val_per_class=3, size=24)
    seen = []
    steps = set()
    for rank in range(world):
        data = build(root, batch_size=2, rank=rank, world_size=world)
        for _ in range(2):  # a second pass reads the same shard
            got = [y for _, y in data.val]
            assert len(got) == len(data.val)
        seen += torch.cat(got).tolist()
        steps.add(len(list(data.train)))
    assert sorted(seen) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert steps == {12 // world // 2}  # every rank the same number of training steps (DDP)


def test_a_validation_pass_left_early_starts_again_at_the_first_image(imagefolder_split_dir):
    data = build(imagefolder_split_dir, batch_size=2)
    first = next(iter(data.val))[1].tolist()
    full = [y.tolist() for _, y in data.val]
    assert full[0] == first and sum(len(y) for y in full) == 6


# --------------------------------------------------------------------------------------------------
# The recipe: pixels and distributions
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "base"), [((75, 100), 64), ((384, 512), 37), ((300, 200), 18), ((45, 50), 37)])
def test_base_square_is_the_fast_loaders_within_the_recorded_bound(tmp_path, shape, base):
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    smooth = np.stack([xx * 255 // shape[1], yy * 255 // shape[0], (xx + yy) * 127 // sum(shape)], -1)
    img = np.clip(smooth + rng.integers(-20, 20, (*shape, 3)), 0, 255).astype(np.uint8)
    path = tmp_path / "a.png"
    Image.fromarray(img).save(path)
    r = resolve("none", "imagefolder", round(base * 7 / 8))
    assert r.base == base
    out = dali_outputs_val(r, path)
    ref = read_square(str(path), base)[:, :, :].permute(1, 2, 0).numpy().astype(float)
    top = int(round((base - r.crop_size) / 2.0))
    ref = ref[top : top + r.crop_size, top : top + r.crop_size]
    diff = np.abs(out - ref)
    # recipes.DALI_RESIZE: within 2 levels, mean abs difference under 0.5 level; a window one pixel
    # off (the offset rounding) would put noise of +-20 levels against its neighbour
    assert diff.max() <= 2 and diff.mean() < 0.5, (diff.max(), diff.mean())


def dali_outputs_val(recipe, path) -> np.ndarray:
    ex = FileExamples((str(path),), np.zeros(1, dtype=np.int64))
    opts = LoaderOptions(batch_size=1, workers=1, seed=0)
    val = dali.DaliBatches(
        lambda: dali._pipeline(ex, recipe, opts, CPU, train=False, seed=0), CPU, train=False, steps=1
    )
    (x, _), *_ = list(val)
    return to_levels(x)[0]


@pytest.fixture(scope="module")
def seed_outputs(tmp_path_factory):
    r = resolve("seed", "imagefolder", SIZE)
    img = pattern(BASE)
    path = tmp_path_factory.mktemp("pattern") / "p.png"
    return r, to_levels(dali_outputs(r, img, N, path)), to_levels(torchvision_outputs(r, img, N))


def test_seed_recipe_draws_torchvisions_crops_flips_and_angles(seed_outputs):
    r, out, _ = seed_outputs
    assert_seed_files_law(fit(out, step=256 // BASE, border=0), r.rotation_deg)


def test_seed_recipe_pixels_agree_with_the_torchvision_loader(seed_outputs):
    _, out, tv = seed_outputs
    a_tv, a_dali = fit(tv, step=256 // BASE, border=0)["angle"], fit(out, step=256 // BASE, border=0)["angle"]
    assert ks_two(a_tv, a_dali) < KS_TWO
    z_mean, z_var = compare_pixels(tv, out, slack=0.0)  # nearest rotation of whole pixels: no interpolation
    assert z_mean < Z_PIXEL and z_var < Z_PIXEL, (z_mean, z_var)


def test_imagenet_recipe_draws_torchvisions_boxes(tmp_path):
    r = resolve("imagenet", "imagefolder", SIZE)
    img = pattern(BASE)
    step = 256 // BASE
    levels = to_levels(dali_outputs(r, img, N, tmp_path / "p.png"))
    ref_w, ref_h = reference_rrc_boxes(N, BASE, np.random.default_rng(4))
    f = fit(levels, step=step, border=3)
    w, h = f["sx"] * SIZE, f["sy"] * SIZE
    assert np.abs(w - np.round(w)).max() < 0.35  # whole-pixel boxes
    # recipes.DALI_RRC: fn.random_resized_crop's boxes against RandomResizedCrop.get_params's
    assert ks_two(np.round(w) * np.round(h) / BASE**2, ref_w * ref_h / BASE**2) < KS_TWO
    assert ks_two(np.log(np.round(w) / np.round(h)), np.log(ref_w / ref_h)) < KS_TWO
    assert abs(f["flip"].mean() - 0.5) < FLIP_TOL
    left = f["cx"] - w / 2
    room = BASE - np.round(w)
    inside = room >= 9
    assert ks_uniform((left[inside] + 0.5) / (room[inside] + 1), 0, 1) < 1.95 / math.sqrt(inside.sum()) + 0.05
    z_mean, z_var = compare_pixels(to_levels(torchvision_outputs(r, img, N)), levels, slack=2.0)
    assert z_mean < Z_PIXEL and z_var < Z_PIXEL, (z_mean, z_var)


# --------------------------------------------------------------------------------------------------
# The CLI: a run end to end, and the errors
# --------------------------------------------------------------------------------------------------
def test_run_trains_and_validates_every_image(imagefolder_split_dir, tmp_path, capsys):
    code, _, err = invoke(["run", "--arch", "resnet18", "--dataset", "imagefolder", "--data-dir", imagefolder_split_dir,
                           "--loader", "dali", "--augment", "none", "--image-size", 32, "--batch-size", 4,
                           "--epochs", 2, "--weights", "none", "--device", "cpu", "--workers", 1,
                           "--output", tmp_path, "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    res = json.loads((only_run(tmp_path) / "results.json").read_text())
    assert res["data"]["loader"] == "dali" and res["config"]["loader"] == "dali"
    assert res["data"]["augment"]["name"] == "none"
    assert [e["val_images"] for e in res["epochs"]] == [6, 6]
    assert res["data"]["train_size"] == 18 and res["data"]["val_size"] == 6


def test_food101_reads_through_dali(food101_dir):
    data = build(food101_dir, "food101", batch_size=3)
    assert len(list(data.train)) == data.steps_per_epoch == 18 // 3
    assert sum(len(y) for _, y in data.val) == data.val_size == 6


def test_missing_dali_is_one_line_with_the_install_command(imagefolder_split_dir, tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "nvidia.dali" or m.startswith("nvidia.dali.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # `import nvidia.dali` raises ImportError
    code, out, err = invoke(["run", "--dataset", "imagefolder", "--data-dir", imagefolder_split_dir, "--loader", "dali",
                             "--device", "cpu", "--output", tmp_path, "--quiet"], capsys)  # fmt: skip
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--loader" in err and "pip install 'effbench[dali]'" in err, err
    assert not list(tmp_path.iterdir())  # refused in preflight, before any run folder
    # and the loader itself, when reached without preflight (selftest, sweeps' data paths)
    with pytest.raises(Exception, match=r"effbench\[dali\]"):
        build(imagefolder_split_dir)


@pytest.mark.parametrize("content", ["garbage", "gif"])
def test_a_file_dali_cannot_decode_is_one_line_and_exit_2(tmp_path, capsys, content):
    # every extension effbench lists (jpg png bmp webp tif ppm pgm) decodes in DALI 2.4 (tried 2026-11-25);
    # GIF does not: a GIF named .jpg is the format case, bytes of no image the corrupt one
    root = fakedata.make_imagefolder(tmp_path / "d", classes=2, per_class=4, split=True, val_per_class=1, size=24)
    bad = root / "val" / "class_1" / "img_000.jpg"
    if content == "gif":
        Image.new("RGB", (24, 24), (200, 10, 10)).save(bad, format="GIF")
    else:
        bad.write_bytes(b"not an image at all")
    code, out, err = invoke(["run", "--arch", "resnet18", "--dataset", "imagefolder", "--data-dir", root,
                             "--loader", "dali", "--image-size", 32, "--batch-size", 2, "--epochs", 1,
                             "--weights", "none", "--device", "cpu", "--output", tmp_path / "o", "--quiet"],
                            capsys)  # fmt: skip
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "--loader" in line and "decoders.image" in line and "--loader fast or torchvision" in line, err
    assert "Traceback" not in err


def test_cifar_is_refused_naming_the_loaders_that_take_it(cifar10_dir, tmp_path, capsys):
    code, _, err = invoke(["run", "--dataset", "cifar10", "--data-dir", cifar10_dir, "--loader", "dali",
                           "--device", "cpu", "--output", tmp_path], capsys)  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--loader" in err and "fast or torchvision" in err


# --------------------------------------------------------------------------------------------------
# Real images: learns what the fast loader and a plain loop learn
# --------------------------------------------------------------------------------------------------
@pytest.mark.slow  # ~2 min on 2 loaded cores: three trainings of 2 epochs (measured: dali 0.967, fast 0.986, loop 0.964)
def test_dali_learns_the_digits_as_the_fast_loader_does(tmp_path_factory, tmp_path, capsys):
    from test_digits_learns import effbench_top1, reference_top1, write_digits

    root = write_digits(tmp_path_factory.mktemp("digits"))
    dali_top1, res = effbench_top1(root, tmp_path / "dali", capsys, loader="dali")
    fast_top1, _ = effbench_top1(root, tmp_path / "fast", capsys, loader="fast")
    reference = reference_top1(root)
    assert res["data"]["loader"] == "dali" and res["data"]["augment"]["name"] == "none"
    print(f"digits val top-1: dali {dali_top1:.4f}, fast {fast_top1:.4f}, plain loop {reference:.4f}")
    # test_digits_learns' bounds: at least 90%, within 3 points of the plain loop
    assert dali_top1 >= 0.90 and abs(dali_top1 - reference) <= 0.03, (dali_top1, reference)
    assert abs(dali_top1 - fast_top1) <= 0.03, (dali_top1, fast_top1)


def test_dali_feeds_the_plain_loops_inputs_on_the_digits(tmp_path):
    # test_digits_learns' input check with --loader dali: real images, what the model sees, held to the
    # plain loop's own PIL resize + crop + normalisation within recipes.DALI_RESIZE's 2 levels
    from test_digits_learns import BATCH, SEED, STD, reference_inputs, write_digits

    root = write_digits(tmp_path / "digits")
    tol = 2 / 255 / min(STD) + 1e-5
    data = build(root, size=16, batch_size=BATCH, workers=1, seed=SEED)
    xva, yva = reference_inputs(root, "val")
    got = torch.cat([x for x, _ in data.val])
    assert torch.equal(torch.cat([y for _, y in data.val]), yva)  # in order, every image once
    assert got.shape == xva.shape and (got - xva).abs().max() <= tol, (got - xva).abs().max()
    xtr, ytr = reference_inputs(root, "train")
    x, y = next(iter(data.train))
    nearest = torch.cdist(x.flatten(1), xtr.flatten(1)).argmin(1)
    assert (x - xtr[nearest]).abs().amax(dim=(1, 2, 3)).max() <= tol and torch.equal(ytr[nearest], y)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixed_decode_on_cuda_gives_the_cpu_pipelines_batches(imagefolder_split_dir):
    # DALI's GPU path: nvjpeg ("mixed") and the operators on the device; the same counts, batches on the
    # device, and pixels within the decoders' difference of the CPU pipeline's (unverified without a GPU)
    cuda = torch.device("cuda")
    cfg = RunConfig(arch="resnet18", dataset="imagefolder", data_dir=imagefolder_split_dir, image_size=32,
                    batch_size=4, workers=1, loader="dali", augment="none", device="cuda")  # fmt: skip
    gpu = build_data(cfg, cuda)
    assert gpu.batches_on_device and "nvjpeg" in gpu.info["transforms"]
    x, y = next(iter(gpu.train))
    assert x.device.type == "cuda" and y.device.type == "cuda" and x.dtype == torch.float32 and y.dtype == torch.int64
    got = torch.cat([x for x, _ in gpu.val]).cpu()
    ref = torch.cat([x for x, _ in build(imagefolder_split_dir).val])
    assert got.shape == ref.shape == (6, 3, 32, 32)
    levels = (got - ref).abs() * 255 * 0.229  # normalized units back to levels (the smallest ImageNet std)
    assert levels.mean() < 1.0, levels.mean()


@pytest.mark.slow  # two ranks through torchrun: ~40 s on 2 loaded cores
def test_two_cpu_ranks_validate_every_image_once(tmp_path, capsys):
    root = fakedata.make_imagefolder(tmp_path / "d", classes=3, per_class=7, split=True, val_per_class=3, size=40)
    code, _, err = invoke(["run", "--arch", "resnet18", "--dataset", "imagefolder", "--data-dir", root,
                           "--loader", "dali", "--image-size", 32, "--batch-size", 2, "--epochs", 2,
                           "--weights", "none", "--device", "cpu", "--nproc", 2, "--workers", 1,
                           "--output", tmp_path / "o", "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    res = json.loads((only_run(tmp_path / "o") / "results.json").read_text())
    # 9 validation images in shards of 4 and 5, summed over the ranks; 21 training images: 10 a rank, 5 steps
    assert [e["val_images"] for e in res["epochs"]] == [9, 9] and res["data"]["val_size"] == 9
    assert res["data"]["steps_per_epoch"] == 5 and "contiguous DALI shards" in res["data"]["val_sharding"]

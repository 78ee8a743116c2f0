"""effbench.data on small datasets in the real on-disk formats (tests/fakedata.py): shapes, splits,
shuffling, sharding, and every way a dataset on disk can be wrong."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

import fakedata
from effbench.config import RunConfig
from effbench.data.build import DataBundle, build_data
from effbench.data.cifar import RestrictedUnpickler, read_batch
from effbench.data.source import seeded_split
from effbench.data.transforms import build_transforms
from effbench.datasets import CIFAR_MEAN, CIFAR_STD, IMAGENET_MEAN
from effbench.errors import EffbenchError

CPU = torch.device("cpu")


def config(data_dir: Path, dataset: str, **kw) -> RunConfig:
    # These tests pin the torchvision loader (the seeds' per-sample pipeline); tests/unit/test_fast_loader.py covers --loader fast.
    base = dict(
        arch="resnet18",
        dataset=dataset,
        data_dir=data_dir,
        image_size=32,
        batch_size=4,
        workers=0,
        seed=0,
        loader="torchvision",
    )
    return RunConfig(**{**base, **kw})


def build(data_dir: Path, dataset: str, *, rank: int = 0, world_size: int = 1, device=CPU, **kw) -> DataBundle:
    return build_data(config(data_dir, dataset, **kw), device, rank=rank, world_size=world_size)


def all_batches(loader) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = zip(*list(loader), strict=True)
    return torch.cat(xs), torch.cat(ys)


def normalized(raw_rows: np.ndarray, mean, std) -> torch.Tensor:
    """What ToTensor + Normalize make of N x 3072 CIFAR rows."""
    x = torch.from_numpy(raw_rows.reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    return (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


# --------------------------------------------------------------------------------------------------
# Each dataset builds and yields the contract's batches
# --------------------------------------------------------------------------------------------------
def test_cifar100_batches_are_normalized_nchw_float32_with_int64_labels(cifar100_dir):
    data = build(cifar100_dir, "cifar100")
    assert (data.name, data.num_classes, data.image_size) == ("cifar100", 100, 32)
    assert (data.train_size, data.val_size, data.steps_per_epoch) == (64, 32, 16)
    assert data.batches_on_device is False and data.info["split"] == "official test split"
    assert data.info["mean"] == list(CIFAR_MEAN) and data.info["std"] == list(CIFAR_STD)
    json.dumps(data.info), json.dumps(data.stats())

    batches = list(data.train)
    assert len(batches) == len(data.train) == 16
    for x, y in batches:
        assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and not x.is_pinned()
        assert y.shape == (4,) and y.dtype == torch.int64 and int(y.min()) >= 0 and int(y.max()) < 100

    # Validation is deterministic (ToTensor + Normalize) and in file order: compare with the pickle.
    raw = fakedata.read_cifar_raw(cifar100_dir / "cifar-100-python" / "test")
    x, y = all_batches(data.val)
    assert torch.equal(y, torch.tensor(raw["fine_labels"]))
    assert torch.allclose(x, normalized(raw["data"], CIFAR_MEAN, CIFAR_STD), atol=1e-5)


def test_cifar10_reads_all_five_training_batches(cifar10_dir):
    data = build(cifar10_dir, "cifar10", batch_size=5)
    assert (data.num_classes, data.train_size, data.val_size, data.steps_per_epoch) == (10, 60, 20, 12)
    _, y = all_batches(data.train)
    folder = cifar10_dir / "cifar-10-batches-py"
    expected = sum((fakedata.read_cifar_raw(folder / f"data_batch_{i}")["labels"] for i in range(1, 6)), [])
    assert sorted(y.tolist()) == sorted(expected)  # one epoch = every training image once


def test_cifar_at_another_size_is_resized_with_imagenet_statistics(cifar100_dir):
    data = build(cifar100_dir, "cifar100", image_size=48)
    x, _ = next(iter(data.train))
    vx, _ = next(iter(data.val))
    assert x.shape == vx.shape == (4, 3, 48, 48)
    # the seed recipe: crop 32 pad 4 + flip at 32 px, then the fast loader's upscale (tests/unit/test_recipes.py)
    assert data.info["mean"] == list(IMAGENET_MEAN) and "pad 4" in data.info["transforms"]
    assert "upscale to 48" in data.info["transforms"] and data.info["augment"]["upscale"] == 48


def test_food101_builds_from_the_official_layout(food101_dir):
    data = build(food101_dir, "food101", workers=2)
    assert (data.name, data.num_classes, data.train_size, data.val_size) == ("food101", 3, 18, 6)
    assert data.steps_per_epoch == 4 and data.info["root"] == str(food101_dir / "food-101")
    x, y = next(iter(data.train))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    _, vy = all_batches(data.val)
    assert vy.tolist() == [0, 0, 1, 1, 2, 2]  # classes.txt order, test.json listing order
    assert data.stats()["corrupt_images_skipped"] == 0


def test_imagefolder_flat_tree_with_val_fraction(imagefolder_dir):
    data = build(imagefolder_dir, "imagefolder", val_fraction=0.25)
    assert (data.num_classes, data.train_size + data.val_size, data.val_size) == (3, 18, 4)
    assert data.info["split"] == "seeded 25% of train"
    x, y = next(iter(data.train))
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1, 2}


@pytest.mark.parametrize("val_name", ["val", "test"])
def test_imagefolder_train_and_val_folders(imagefolder_split_dir, val_name):
    if val_name == "test":
        (imagefolder_split_dir / "val").rename(imagefolder_split_dir / "test")
    data = build(imagefolder_split_dir, "imagefolder")
    assert (data.train_size, data.val_size, data.info["split"]) == (18, 6, f"{val_name}/ folder")
    _, vy = all_batches(data.val)
    assert vy.tolist() == [0, 0, 1, 1, 2, 2]


def test_synthetic_batches_live_on_the_device_and_are_not_copied():
    data = build(Path("unused"), "synthetic", batch_size=16, image_size=24)
    assert data.batches_on_device and data.num_classes == 100 and data.steps_per_epoch == 50_000 // 16
    first = list(zip(range(6), data.train, strict=False))  # the first 6 batches
    ptrs = [x.data_ptr() for _, (x, _) in first]
    assert len(set(ptrs)) == 4 and ptrs[4] == ptrs[0] and ptrs[5] == ptrs[1]  # a pool of 4, cycled
    x, y = first[0][1]
    assert x.shape == (16, 3, 24, 24) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert int(y.max()) < 100 and len(list(data.val)) == 2
    again = build(Path("unused"), "synthetic", batch_size=16, image_size=24)
    assert torch.equal(next(iter(again.train))[0], x)  # seeded
    assert sum(1 for _ in data.train) == data.steps_per_epoch == len(data.train)


def test_synthetic_validation_is_held_out_from_every_training_batch():
    # issue 34: validation replayed training batches, so a 20-step run read a top-1 of 0.95 on random labels
    ranks = [build(Path("unused"), "synthetic", batch_size=16, image_size=16, rank=r, world_size=2) for r in (0, 1)]
    train = [x for d in ranks for x in d.train.pool]  # every rank's training pool
    val = [[b for b in d.val] for d in ranks]
    for images, labels in val[0] + val[1]:
        assert images.shape == (16, 3, 16, 16) and labels.dtype == torch.int64 and int(labels.max()) < 100
        for x, _ in train:  # no validation image equals any training image, pixel for pixel
            same = (images.flatten(1)[:, None, :] == x.flatten(1)[None, :, :]).all(-1)
            assert not same.any(), "a validation image is a training image"
    assert not torch.equal(val[0][0][0], val[1][0][0])  # each rank validates on a shard of its own
    again = [b for b in ranks[0].val]  # the same held-out images on every pass (a fresh generator each)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(val[0], again, strict=True))
    assert len(ranks[0].val) == 2 and ranks[0].info["val_seed"] != ranks[1].info["val_seed"]


def test_synthetic_epoch_is_split_over_ranks():
    data = build(Path("unused"), "synthetic", batch_size=16, rank=1, world_size=4)
    assert data.steps_per_epoch == (50_000 // 4) // 16


# --------------------------------------------------------------------------------------------------
# Splits, shuffling, sharding, determinism
# --------------------------------------------------------------------------------------------------
def test_seeded_split_sizes_disjoint_and_deterministic():
    train, val = seeded_split(100, 0.2, seed=3)
    assert len(val) == 20 and len(train) == 80
    assert set(train.tolist()).isdisjoint(val.tolist()) and set(train.tolist()) | set(val.tolist()) == set(range(100))
    assert np.array_equal(seeded_split(100, 0.2, seed=3)[1], val)
    assert not np.array_equal(seeded_split(100, 0.2, seed=4)[1], val)


def test_val_fraction_carves_a_seeded_split_with_val_transforms(cifar100_dir):
    data = build(cifar100_dir, "cifar100", val_fraction=0.2)
    assert (data.train_size, data.val_size, data.info["split"]) == (51, 13, "seeded 20% of train")
    raw = fakedata.read_cifar_raw(cifar100_dir / "cifar-100-python" / "train")
    _, val_idx = seeded_split(64, 0.2, seed=0)
    x, y = all_batches(data.val)
    assert torch.equal(y, torch.tensor(raw["fine_labels"])[val_idx])
    assert torch.allclose(x, normalized(raw["data"][val_idx], CIFAR_MEAN, CIFAR_STD), atol=1e-5)  # no augmentation

    same = build(cifar100_dir, "cifar100", val_fraction=0.2)
    other = build(cifar100_dir, "cifar100", val_fraction=0.2, seed=1)
    assert torch.equal(all_batches(same.val)[0], x)
    assert not torch.equal(all_batches(other.val)[1], y)


def epoch_labels(data: DataBundle, epoch: int) -> list[int]:
    data.set_epoch(epoch)
    return torch.cat([y for _, y in data.train]).tolist()


def test_set_epoch_reshuffles_and_is_deterministic(cifar100_dir):
    data = build(cifar100_dir, "cifar100")
    e0, e1, e0_again = epoch_labels(data, 0), epoch_labels(data, 1), epoch_labels(data, 0)
    assert e0 != e1 and e0 == e0_again and sorted(e0) == sorted(e1)
    assert epoch_labels(build(cifar100_dir, "cifar100"), 0) == e0
    assert epoch_labels(build(cifar100_dir, "cifar100", seed=5), 0) != e0


def test_training_augmentation_is_reproducible_with_workers(food101_dir):
    a = build(food101_dir, "food101", workers=2)
    b = build(food101_dir, "food101", workers=2)
    xa, ya = all_batches(a.train)
    xb, yb = all_batches(b.train)
    assert torch.equal(ya, yb) and torch.equal(xa, xb)
    xa2, _ = all_batches(a.train)  # the next pass draws new crops from the same workers
    assert not torch.equal(xa, xa2)


def test_two_ranks_get_equal_batch_counts_and_disjoint_shards(cifar100_dir):
    ranks = [build(cifar100_dir, "cifar100", val_fraction=0.2, rank=r, world_size=2) for r in (0, 1)]
    assert ranks[0].steps_per_epoch == ranks[1].steps_per_epoch == (51 // 2) // 4
    assert [len(list(r.train)) for r in ranks] == [ranks[0].steps_per_epoch] * 2
    assert all(r.train_size == 51 and r.val_size == 13 for r in ranks)

    samplers = [r.train.loader.sampler for r in ranks]
    assert all(isinstance(s, torch.utils.data.DistributedSampler) for s in samplers)
    idx = [list(s) for s in samplers]
    assert set(idx[0]).isdisjoint(idx[1]) and len(idx[0]) == len(idx[1]) == 25
    ranks[0].set_epoch(1)
    assert list(samplers[0]) != idx[0]  # the bundle forwards set_epoch to DistributedSampler

    # Validation: each image exactly once over the ranks, no padding duplicates.
    val = [all_batches(r.val)[0] for r in ranks]
    whole = all_batches(build(cifar100_dir, "cifar100", val_fraction=0.2).val)[0]
    assert len(val[0]) + len(val[1]) == len(whole) == 13
    assert torch.equal(torch.cat(val), torch.cat([whole[0::2], whole[1::2]]))


def test_cuda_device_pins_memory_and_workers_persist(cifar100_dir):
    data = build(cifar100_dir, "cifar100", workers=2, device=torch.device("cuda"))  # not iterated: no GPU needed
    assert data.train.loader.pin_memory and data.val.loader.pin_memory
    assert data.train.loader.persistent_workers and data.train.loader.num_workers == 2
    cpu = build(cifar100_dir, "cifar100", workers=0)
    assert not cpu.train.loader.pin_memory and not cpu.train.loader.persistent_workers


def test_transform_recipes():
    cifar = build_transforms("cifar10", 32)
    assert cifar.mean == CIFAR_MEAN and "pad 4" in cifar.recipe
    assert build_transforms("food101", 32).mean == IMAGENET_MEAN
    from PIL import Image

    img = Image.new("RGB", (70, 50), (255, 0, 0))
    out = build_transforms("food101", 32).val(img)
    assert out.shape == (3, 32, 32)
    assert torch.allclose(out[0], torch.full((32, 32), (1 - 0.485) / 0.229), atol=1e-4)


# --------------------------------------------------------------------------------------------------
# Bad data on disk and bad sizes: one EffbenchError naming the option and the file
# --------------------------------------------------------------------------------------------------
def test_missing_dataset_without_download_says_how_to_get_it(tmp_path):
    with pytest.raises(EffbenchError) as info:
        build(tmp_path, "cifar100")
    assert info.value.option == "--data-dir"
    assert "cifar-100-python" in info.value.message and "--download" in info.value.message
    assert "--dataset synthetic" in info.value.message
    assert list(tmp_path.iterdir()) == []  # nothing fetched, nothing created


def test_a_missing_file_in_a_present_dataset_is_named(cifar10_dir):
    (cifar10_dir / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(EffbenchError) as info:
        build(cifar10_dir, "cifar10")
    assert info.value.option == "--data-dir" and "data_batch_3 is missing" in info.value.message


def test_truncated_cifar_pickle_is_named(cifar10_dir):
    batch = cifar10_dir / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(batch.read_bytes()[:1000])
    with pytest.raises(EffbenchError) as info:
        build(cifar10_dir, "cifar10")
    assert info.value.option == "--data-dir"
    assert str(batch) in info.value.message and "corrupt or truncated" in info.value.message
    assert "\n" not in str(info.value)


def test_cifar_pickle_with_wrong_structure_is_named(cifar100_dir):
    path = cifar100_dir / "cifar-100-python" / "test"
    d = fakedata.read_cifar_raw(path)
    d["data"] = d["data"][:, :3000]  # rows too short for 32 x 32 x 3
    path.write_bytes(fakedata.py2_pickle({k.encode(): v for k, v in d.items()}))
    with pytest.raises(EffbenchError) as info:
        build(cifar100_dir, "cifar100")
    assert str(path) in info.value.message and "expected 3072 x 32" in info.value.message


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_planted_pickle_is_refused_without_running_it(cifar100_dir, tmp_path):
    # The payload works: a plain unpickler runs it.
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(_Planted(proof), protocol=2))
    assert proof.exists()

    marker = tmp_path / "pwned"
    path = cifar100_dir / "cifar-100-python" / "train"
    path.write_bytes(pickle.dumps({"data": _Planted(marker), "fine_labels": [0]}, protocol=2))
    with pytest.raises(EffbenchError) as info:
        build(cifar100_dir, "cifar100")
    assert not marker.exists()
    assert str(path) in info.value.message and "refused to load" in info.value.message


@pytest.mark.parametrize(
    "module, name", [("builtins", "eval"), ("subprocess", "Popen"), ("numpy", "load"), ("posix", "system")]
)
def test_restricted_unpickler_refuses_other_globals(module, name):
    payload = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"."
    import io

    with pytest.raises(pickle.UnpicklingError, match="refused"):
        RestrictedUnpickler(io.BytesIO(payload)).load()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_files_re_saved_by_python3_still_load(cifar100_dir, protocol):
    path = cifar100_dir / "cifar-100-python" / "train"
    d = fakedata.read_cifar_raw(path)
    path.write_bytes(pickle.dumps(d, protocol=protocol))  # numpy._core names, _codecs / buffers
    images, labels = read_batch(path, "fine_labels", 100)
    assert images.shape == (64, 32, 32, 3) and labels.tolist() == d["fine_labels"]
    assert np.array_equal(images[5].transpose(2, 0, 1).reshape(-1), d["data"][5])


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"apple_pie": "x"}', '{"pizza": ["pizza/1"]}'])
def test_malformed_food101_json_is_named(food101_dir, text):
    path = food101_dir / "food-101" / "meta" / "train.json"
    path.write_text(text)
    with pytest.raises(EffbenchError) as info:
        build(food101_dir, "food101")
    assert info.value.option == "--data-dir" and str(path) in info.value.message


@pytest.mark.parametrize("workers", [0, 2])
def test_corrupt_food101_jpeg_is_skipped_and_counted(food101_dir, workers):
    meta = json.loads((food101_dir / "food-101" / "meta" / "train.json").read_text())
    bad = food101_dir / "food-101" / "images" / f"{meta['baklava'][0]}.jpg"
    fakedata.corrupt_file(bad)
    test_meta = json.loads((food101_dir / "food-101" / "meta" / "test.json").read_text())
    (food101_dir / "food-101" / "images" / f"{test_meta['apple_pie'][0]}.jpg").write_bytes(b"not an image at all")

    data = build(food101_dir, "food101", workers=workers, batch_size=3)  # 18 images: every one read each epoch
    for epoch in range(2):
        data.set_epoch(epoch)
        batches = list(data.train)
        assert len(batches) == data.steps_per_epoch == 6
        assert all(x.shape[0] == 3 and torch.isfinite(x).all() for x, _ in batches)  # stand-ins keep batches full
    assert data.stats()["corrupt_images_skipped"] == 1  # distinct files, not hits per epoch
    assert data.stats()["corrupt_image_examples"] == [str(bad)]

    _, vy = all_batches(data.val)
    assert vy.tolist() == [0, 1, 1, 2, 2]  # the unreadable test image is left out of validation
    assert data.stats()["corrupt_images_skipped"] == 2


def test_imagefolder_without_split_needs_val_fraction(imagefolder_dir):
    with pytest.raises(EffbenchError) as info:
        build(imagefolder_dir, "imagefolder")
    assert info.value.option == "--val-fraction" and str(imagefolder_dir) in info.value.message


@pytest.mark.parametrize("shape", ["empty", "empty-classes", "no-images-in-train"])
def test_folder_without_images_is_named(tmp_path, shape):
    root = tmp_path / "imgs"
    root.mkdir()
    where = root
    if shape == "empty-classes":
        (root / "cat").mkdir()
        (root / "dog").mkdir()
        (root / "dog" / "notes.txt").write_text("no images here")
    elif shape == "no-images-in-train":
        (root / "train" / "cat").mkdir(parents=True)
        where = root / "train"
    with pytest.raises(EffbenchError) as info:
        build(root, "imagefolder", val_fraction=0.2)
    assert info.value.option == "--data-dir" and f"no images found in {where}" in info.value.message


def test_a_flat_folder_of_images_is_told_to_make_class_folders(tmp_path):
    # issue 47: 157 PNGs straight in the folder read "no images found"
    from PIL import Image

    root = tmp_path / "flat"
    root.mkdir()
    for i in range(3):
        Image.new("RGB", (8, 8)).save(root / f"img{i}.png")
    with pytest.raises(EffbenchError) as info:
        build(root, "imagefolder", val_fraction=0.2)
    assert info.value.option == "--data-dir" and "no images found" not in info.value.message
    assert f"{root} holds 3 image file(s) directly but no class folder with images in it" in info.value.message


def test_imagefolder_val_classes_must_exist_in_train(imagefolder_split_dir):
    (imagefolder_split_dir / "val" / "class_9").mkdir()
    with pytest.raises(EffbenchError, match="class_9"):
        build(imagefolder_split_dir, "imagefolder")


@pytest.mark.parametrize(
    "dataset, fixture",
    [("cifar100", "cifar100_dir"), ("food101", "food101_dir"), ("imagefolder", "imagefolder_split_dir")],
)
def test_batch_larger_than_the_training_split_raises(request, dataset, fixture):
    root = request.getfixturevalue(fixture)
    with pytest.raises(EffbenchError) as info:
        build(root, dataset, batch_size=100)
    assert info.value.option == "--batch-size" and info.value.message.startswith("100 exceeds the ")
    assert dataset in info.value.message


def test_a_val_fraction_that_leaves_too_few_training_images_names_it_too(cifar100_dir):
    # --val-fraction 0.99 left 1 of 64 images to train on: the error named only --batch-size, the option not at fault
    with pytest.raises(EffbenchError) as info:
        build(cifar100_dir, "cifar100", batch_size=4, val_fraction=0.99)
    assert info.value.option == "--batch-size" and "--val-fraction 0.99 leaves 1 of the 64 training images" in str(
        info.value
    )
    assert "pass a smaller --val-fraction" in str(info.value)


def test_batch_larger_than_a_rank_share_raises(cifar100_dir):
    build(cifar100_dir, "cifar100", batch_size=32)  # 64 images: fits on one rank
    with pytest.raises(EffbenchError, match=r"32 per rank over 2 ranks"):
        build(cifar100_dir, "cifar100", batch_size=33, world_size=2)

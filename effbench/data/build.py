"""Datasets: `--dataset` -> a DataBundle of re-iterable train/val batches for one rank.

    data = build_data(cfg, device, rank=rank, world_size=world_size, batch_size=per_rank_batch)
    for epoch in range(cfg.epochs):
        data.set_epoch(epoch)                     # reshuffles (DistributedSampler.set_epoch under DDP)
        for images, labels in data.train: ...     # float32 NCHW normalized, int64; CPU unless
                                                  # data.batches_on_device (synthetic, --loader fast)
    record["data"] |= data.stats()                # {"corrupt_images_skipped": n, ...}

One module per on-disk format (cifar, food101, imagefolder) returns examples; splitting,
transforms (effbench.data.transforms) and loaders (effbench.data.loaders) are shared. A missing
dataset is downloaded only with --download (effbench.data.archives).

Two loaders (--loader): `torchvision`, per-sample PIL transforms in DataLoader workers as the seeds
ran; `fast`, uint8 batches augmented on the device (effbench.data.augment): CIFAR held whole on the
device (fast_cifar), image files decoded small in workers (fast_images). Both train the same
--augment recipe (effbench.recipes), recorded under info["augment"].
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import torch

from effbench.config import RunConfig, offset_seed
from effbench.data import cifar, fast_cifar, fast_images, synthetic
from effbench.data.loaders import LoaderOptions, SkipLog, train_loader, val_loader
from effbench.data.source import Source, seeded_split
from effbench.data.transforms import recipe_transforms
from effbench.datasets import dataset_spec
from effbench.errors import EffbenchError
from effbench.recipes import Recipe
from effbench.recipes import resolve as resolve_recipe
from effbench.system.hardware import allowed_cores

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class DataBundle:
    name: str
    """Canonical dataset name: cifar100, cifar10, food101, imagefolder or synthetic."""
    num_classes: int
    image_size: int
    train: Iterable[Batch]
    """Re-iterable, one pass per epoch; (images float32 NCHW normalized, labels int64); every
    batch holds exactly the per-rank batch size (drop_last)."""
    val: Iterable[Batch]
    """Re-iterable; the last batch may be short. Under DDP each rank sees a disjoint shard."""
    train_size: int
    """Images in the whole training split (all ranks)."""
    val_size: int
    """Images in the whole validation split (all ranks)."""
    steps_per_epoch: int
    """len(train): batches per epoch for this rank, the same on every rank."""
    batches_on_device: bool
    """True when batches already live on the training device (synthetic, --loader fast): no copy needed."""
    info: dict[str, Any]
    """JSON-able facts for the record: root, split, mean/std, transforms, download, ..."""
    epoch_hooks: list[Callable[[int], None]] = field(default_factory=list, repr=False)
    skip_log: SkipLog = field(default_factory=SkipLog, repr=False)

    def set_epoch(self, epoch: int) -> None:
        """Reseed shuffling for `epoch`; call before iterating train."""
        for hook in self.epoch_hooks:
            hook(epoch)

    def stats(self) -> dict[str, Any]:
        """JSON-able counters gathered while iterating, e.g. {"corrupt_images_skipped": 0}."""
        return self.skip_log.stats()


def say_workers_beyond_cores(requested: int, cores: float, rank: int = 0, stream: TextIO | None = None) -> int:
    """--workers as asked, said once on stderr (by rank 0) when it is more than the cores this process may use:
    the extra loader processes contend for the cores, and the workers experiment exists to show where loading
    then stops gaining and degrades (issue 34: capping them hid exactly that). results.json's data.workers is
    the number started, data.workers_asked the number asked for."""
    if requested > cores and rank == 0:
        print(
            f"warning: --workers {requested} is more than the {cores:g} CPU cores this run may use; starting "
            f"{requested}, which share them (for the fastest loading use at most {cores:g})",
            file=stream if stream is not None else sys.stderr,
        )
    return requested


def build_data(
    cfg: RunConfig,
    device: torch.device,
    *,
    rank: int = 0,
    world_size: int = 1,
    batch_size: int | None = None,
) -> DataBundle:
    """Open (or, with --download, fetch) cfg.dataset and build this rank's loaders.

    `batch_size` overrides cfg.batch_size and is per rank. Raises EffbenchError naming the option
    to change for every problem with the data.
    """
    batch = batch_size if batch_size is not None else cfg.batch_size
    assert batch is not None and batch >= 1, "RunConfig resolves batch_size"
    image_size = cfg.image_size
    assert image_size is not None, "RunConfig resolves image_size"
    if dataset_spec(cfg.dataset).storage == "generated":
        return _synthetic(cfg, device, batch, image_size, rank, world_size)

    src = load_source(cfg)
    if cfg.val_fraction is not None:
        train_idx, val_idx = seeded_split(len(src.train), cfg.val_fraction, cfg.seed)
        train_ex, val_ex = src.train.take(train_idx), src.train.take(val_idx)
        split = f"seeded {cfg.val_fraction * 100:g}% of train"
    else:
        assert src.val is not None, "dataset modules raise when there is no official split"
        train_ex, val_ex = src.train, src.val
        split = src.val_label
    carved = (cfg.val_fraction, len(src.train)) if cfg.val_fraction is not None else None
    _check_batch(batch, len(train_ex), cfg.dataset, world_size, carved)

    # pinning is for copies to a GPU: on the CPU torch's DataLoader only warns that it pins nothing (config.json's
    # no_effect says so once, in one line)
    pin = (cfg.pin_memory if cfg.pin_memory is not None else True) and device.type == "cuda"
    workers = say_workers_beyond_cores(cfg.workers, allowed_cores(), rank)
    opts = LoaderOptions(
        batch_size=batch, workers=workers, seed=cfg.seed, rank=rank, world_size=world_size, pin_memory=pin,
    )  # fmt: skip
    common: dict[str, Any] = {
        "workers_asked": cfg.workers,
        "root": str(src.root),
        "split": split,
        **({"split_seed": cfg.seed} if cfg.val_fraction is not None else {}),
    }
    # one recipe for both loaders (--augment): its record goes into config.json and results.json
    recipe = resolve_recipe(cfg.augment, cfg.dataset, image_size)
    common["augment"] = recipe.record()
    if cfg.loader == "fast":
        return _fast(cfg, src, train_ex, val_ex, opts, device, recipe, common)
    if cfg.loader == "dali":
        return _dali(src, train_ex, val_ex, opts, device, recipe, common)

    tf = recipe_transforms(recipe)
    log = SkipLog()
    train, sampler = train_loader(train_ex.dataset(tf.train, train=True), opts, log)
    val = val_loader(val_ex.dataset(tf.val, train=False), opts, log)
    facts = {"workers": opts.workers, "pin_memory": pin}
    return _file_bundle(src, image_size, train, val, train_ex, val_ex, opts, common, tf.mean, tf.std, tf.recipe, cfg.loader, facts,
                        hooks=[sampler.set_epoch], log=log, on_device=False)  # fmt: skip


def _fast(
    cfg: RunConfig,
    src: Source,
    train_ex: Any,
    val_ex: Any,
    opts: LoaderOptions,
    device: torch.device,
    recipe: Recipe,
    common: dict[str, Any],
) -> DataBundle:
    """--loader fast: batches made on the device (see fast_cifar and fast_images)."""
    channels_last = bool(cfg.channels_last)
    image_size, mean, std = recipe.image_size, recipe.mean, recipe.std
    if isinstance(train_ex, cifar.ArrayExamples):
        prep_train = fast_cifar.cifar_recipe(recipe, train=True, channels_last=channels_last)
        prep_val = fast_cifar.cifar_recipe(recipe, train=False, channels_last=channels_last)
        steps = recipe.steps() + " (on the device)"

        def on_device(ex: cifar.ArrayExamples, prepare: Any, train: bool) -> fast_cifar.DeviceArrayLoader:
            labels = torch.from_numpy(ex.labels).to(device)
            images = fast_cifar.to_device_uint8(ex.images, device)
            return fast_cifar.DeviceArrayLoader(
                images, labels, prepare, batch_size=opts.batch_size, seed=cfg.seed, rank=opts.rank,
                world_size=opts.world_size, train=train,
            )  # fmt: skip

        train, val = on_device(train_ex, prep_train, True), on_device(val_ex, prep_val, False)
        hooks: list[Callable[[int], None]] = [train.set_epoch]
        log = SkipLog()
        facts: dict[str, Any] = {
            "workers": 0,
            "held_on_device": f"{str(device)}, uint8, {train.images.numel() + val.images.numel()} bytes",
        }
    else:
        if cfg.gpu_decode and device.type != "cuda":
            raise EffbenchError(
                "--gpu-decode",
                f"decodes with nvjpeg on a CUDA device, but this run is on {device.type}; drop --gpu-decode or use --device cuda",
            )
        train, val, set_epoch, log, steps = fast_images.build_loaders(
            train_ex, val_ex, opts, device, recipe, channels_last=channels_last, gpu_decode=cfg.gpu_decode,
        )  # fmt: skip
        hooks = [set_epoch]
        facts = {
            "workers": opts.workers,
            "pin_memory": opts.pin_memory and not cfg.gpu_decode,
            "gpu_decode": cfg.gpu_decode,
        }
    return _file_bundle(src, image_size, train, val, train_ex, val_ex, opts, common, mean, std, steps, "fast", facts,
                        hooks=hooks, log=log, on_device=True)  # fmt: skip


def _dali(
    src: Source,
    train_ex: Any,
    val_ex: Any,
    opts: LoaderOptions,
    device: torch.device,
    recipe: Recipe,
    common: dict[str, Any],
) -> DataBundle:
    """--loader dali: a DALI pipeline per split (effbench.data.dali); batches arrive on the device."""
    from effbench.data import dali

    train, val, set_epoch, steps = dali.build_loaders(train_ex, val_ex, opts, device, recipe)
    # --workers sizes DALI's CPU thread pool (0: one thread; DALI starts no processes)
    facts = {"workers": opts.workers, "dali_threads": max(1, opts.workers), "dali_version": dali._version()}
    bundle = _file_bundle(src, recipe.image_size, train, val, train_ex, val_ex, opts, common, recipe.mean, recipe.std,
                          steps, "dali", facts, hooks=[set_epoch], log=SkipLog(), on_device=True)  # fmt: skip
    if opts.world_size > 1:
        bundle.info["val_sharding"] = "contiguous DALI shards, padding dropped; sum counts over ranks"
    return bundle


def _file_bundle(
    src: Source,
    image_size: int,
    train: Any,
    val: Any,
    train_ex: Any,
    val_ex: Any,
    opts: LoaderOptions,
    common: dict[str, Any],
    mean: Any,
    std: Any,
    recipe: str,
    loader: str,
    facts: dict[str, Any],
    *,
    hooks: list[Callable[[int], None]],
    log: SkipLog,
    on_device: bool,
) -> DataBundle:
    """The bundle of a dataset read from files, with its record (`info`), for any loader; the files the listing
    left out are counted in its skip log from the start (DALI was never given them)."""
    log.refuse(src.refused)
    info: dict[str, Any] = {
        **common,
        "mean": list(mean),
        "std": list(std),
        "transforms": recipe,
        "loader": loader,
        **facts,
        **({"val_sharding": "disjoint shards without padding; sum counts over ranks"} if opts.world_size > 1 else {}),
        "download": {"downloaded": False},
        **src.info,
    }
    return DataBundle(
        name=src.name,
        num_classes=src.num_classes,
        image_size=image_size,
        train=train,
        val=val,
        train_size=len(train_ex),
        val_size=len(val_ex),
        steps_per_epoch=len(train),
        batches_on_device=on_device,
        info=info,
        epoch_hooks=hooks,
        skip_log=log,
    )  # fmt: skip


def load_source(cfg: RunConfig) -> Source:
    """The dataset's examples on disk (downloading first when --download and it is missing), read by the
    loader function its catalog entry names."""
    spec = dataset_spec(cfg.dataset)
    assert spec.loader is not None, f"{cfg.dataset} is generated, not read from disk"
    module, _, function = spec.loader.partition(":")
    return getattr(importlib.import_module(module), function)(cfg)


def prepare_data(cfg: RunConfig) -> dict[str, Any]:
    """Download a missing dataset once, before ranks start (the launcher can call this so N ranks
    do not queue on the download lock). Returns the download facts; a no-op for local datasets."""
    if dataset_spec(cfg.dataset).archive is not None:
        from effbench.data.archives import ensure_present

        return ensure_present(cfg.dataset, cfg.data_dir, download=cfg.download)
    return {"downloaded": False}


def _check_batch(
    batch: int, n_train: int, dataset: str, world_size: int, carved: tuple[float, int] | None = None
) -> None:
    """`carved`: (--val-fraction, training images before the split), when the split left these n_train."""
    per_rank = n_train // world_size
    if per_rank >= batch:
        return
    shard = f" ({per_rank} per rank over {world_size} ranks)" if world_size > 1 else ""
    split, fix = "", "lower --batch-size"
    if carved is not None:
        split = f" (--val-fraction {carved[0]:g} leaves {n_train} of the {carved[1]} training images)"
        fix += ", or pass a smaller --val-fraction"
    raise EffbenchError(
        "--batch-size", f"{batch} exceeds the {n_train} training images of {dataset}{shard}{split}; {fix}"
    )


def _synthetic(
    cfg: RunConfig, device: torch.device, batch: int, image_size: int, rank: int, world_size: int
) -> DataBundle:
    spec = dataset_spec(cfg.dataset)  # the shape: synthetic (CIFAR-100's) or synthetic-imagenet
    assert spec.num_classes is not None, "a generated dataset declares its classes"
    _check_batch(batch, synthetic.EPOCH_IMAGES, cfg.dataset, world_size)
    pool = synthetic.make_pool(batch, image_size, device, offset_seed(cfg.seed, rank), spec.num_classes)
    val_seed = offset_seed(cfg.seed, synthetic.VAL_SEED_OFFSET + rank)
    steps = synthetic.steps_per_epoch(batch, world_size)
    return DataBundle(
        name=cfg.dataset,
        num_classes=spec.num_classes,
        image_size=image_size,
        train=synthetic.CycledBatches(pool, steps),
        val=synthetic.GeneratedBatches(
            synthetic.VAL_BATCHES, batch, image_size, device, val_seed, spec.num_classes
        ),  # held out: images no rank trains on, so the top-1 reads chance (datasets.chance_note)
        train_size=synthetic.EPOCH_IMAGES,
        val_size=synthetic.VAL_BATCHES * batch * world_size,
        steps_per_epoch=steps,
        batches_on_device=True,
        info={
            "root": None,
            "split": "synthetic; validation on held-out generated batches",
            "val_seed": val_seed,
            "shape": spec.title,  # which synthetic set ran, in words
            "pool_batches": synthetic.POOL_BATCHES,
            "generated_on": str(device),
            "loader": "synthetic (on device)",
            "workers": 0,  # no loader processes, whatever --workers says
            "workers_asked": cfg.workers,
            "download": {"downloaded": False},
        },
    )


__all__ = ["DataBundle", "build_data", "load_source", "prepare_data"]

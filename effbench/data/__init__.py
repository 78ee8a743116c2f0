"""Datasets and their loaders: `--dataset` -> a DataBundle of re-iterable train/val batches for one rank.

    from effbench.data.build import build_data
    data = build_data(cfg, device, rank=rank, world_size=world_size, batch_size=per_rank_batch)

build.py assembles the bundle; one module per on-disk format (cifar, food101, imagefolder, synthetic)
returns examples; transforms.py and loaders.py are the `torchvision` loader, augment.py, fast_cifar.py and
fast_images.py the `fast` one, dali.py the `dali` one; archives.py downloads and extracts. This file
imports nothing, so `effbench.data.archives` (torch-free) loads without torch, as preflight needs.
"""

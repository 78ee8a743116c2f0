"""How loader workers start (loaders.worker_context): from the fork server, never by forking the
training process, and what they receive (CIFAR's arrays by shared memory, not a copy per worker)."""

from __future__ import annotations

import gc
import pickle
import weakref
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch

import fakedata
import forklock
from effbench.config import RunConfig
from effbench.data.build import build_data
from effbench.data.cifar import ArrayExamples
from effbench.data.loaders import CountingLoader, LoaderOptions, ShardSampler, SkipLog, sample_loader, worker_context


def test_workers_do_not_inherit_a_lock_the_training_process_holds():
    # Forked workers would see LOCK held for ever (each sample 0.0 after a 2 s wait); this fails with fork.
    opts = LoaderOptions(batch_size=2, workers=2, seed=0)
    with forklock.LOCK:
        loader = CountingLoader(
            sample_loader(forklock.LockProbe(), ShardSampler(4, 0, 1), opts, drop_last=False), SkipLog()
        )
        got = torch.cat([x for x, _ in loader])
    assert got.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_no_workers_no_context_and_workers_the_fork_server():
    assert worker_context(0) is None
    assert worker_context(3).get_start_method() == "forkserver"


@pytest.mark.parametrize("loader", ["torchvision", "fast"])
def test_both_image_file_loaders_start_workers_from_the_fork_server(tmp_path: Path, loader: str):
    fakedata.make_food101(tmp_path, classes=2, per_class=8)
    cfg = RunConfig(arch="resnet18", dataset="food101", data_dir=tmp_path, image_size=32, batch_size=4, workers=2,
                    seed=0, loader=loader)  # fmt: skip
    data = build_data(cfg, torch.device("cpu"))
    for split in (data.train, data.val):
        assert split.loader.multiprocessing_context.get_start_method() == "forkserver"
    x, _ = next(iter(data.train))
    assert x.shape[0] == 4


def test_cifar_arrays_reach_workers_by_shared_memory_not_a_copy():
    images = np.random.default_rng(0).integers(0, 256, (1000, 32, 32, 3), dtype=np.uint8)  # 3 MB
    ex = ArrayExamples(images, np.arange(1000) % 10)
    sent = bytes(ForkingPickler.dumps(ex))
    assert len(sent) < 4096  # two file descriptors' worth, not 3 MB
    back = pickle.loads(sent)
    assert np.array_equal(back.images, images) and np.array_equal(back.labels, ex.labels)
    assert isinstance(back.images.base, torch.Tensor) and back.images.base.is_shared()


def test_once_shared_the_training_process_reads_the_shared_copy_and_frees_its_own():
    images = np.random.default_rng(0).integers(0, 256, (1000, 32, 32, 3), dtype=np.uint8)
    expected = images.copy()
    ex = ArrayExamples(images, np.arange(1000) % 10)
    original = weakref.ref(images)
    del images
    ForkingPickler.dumps(ex)  # what a worker's start does (loaders.worker_context)
    gc.collect()
    assert original() is None  # the array read from disk is gone: one copy in this process, not two
    assert isinstance(ex.images.base, torch.Tensor) and ex.images.base.is_shared()
    assert np.array_equal(ex.images, expected)
    assert ex.images.base.data_ptr() == ex._shared[0].data_ptr()  # the very memory the workers map

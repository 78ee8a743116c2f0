"""The fast loader's batch ring on the CPU: workers write batches into shared-memory slots, the training
process reads them in place. Slot numbering, the collate against torch's own path, the bound on slots that
keeps a held batch untouched (and that one slot fewer breaks it), and the loader's batches unchanged."""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

from effbench.config import RunConfig
from effbench.data.batch_ring import (
    PREFETCH_FACTOR,
    BatchRing,
    RingCollate,
    SlotRef,
    SlotSamples,
    SlottedBatches,
    ring_slots,
)
from effbench.data.build import build_data
from effbench.data.fast_images import DeviceAugmentLoader, collate_squares
from effbench.data.loaders import SkipLog, worker_context
from effbench.errors import EffbenchError

CPU = torch.device("cpu")
SIDE = 6


def test_batch_k_goes_to_slot_k_mod_slots_with_the_samplers_indices():
    batches = BatchSampler(SequentialSampler(range(23)), 4, drop_last=False)
    slotted = list(SlottedBatches(batches, 3))
    assert len(slotted) == len(batches) == 6
    for k, (plain, paired) in enumerate(zip(batches, slotted, strict=True)):
        assert [i for i, _ in paired] == plain and {s for _, s in paired} == {k % 3}
    assert list(SlottedBatches(batches, 3)) == slotted  # each iteration numbers from 0 again
    assert ring_slots(2) == 2 * PREFETCH_FACTOR + 1


def test_the_shm_preflight_counts_the_rings_prefetch_and_more_than_both_rings():
    """The /dev/shm check sizes what the workers hold by the same prefetch_factor, and its estimate (float32
    batches, with headroom) covers the train and validation rings of the fast loader at any worker count."""
    from effbench.recipes import resolve
    from effbench.system import preflight

    assert preflight.PREFETCH_FACTOR == PREFETCH_FACTOR
    base = resolve("seed", "food101", 224).base
    for workers in (1, 2, 8, 32):
        rings = 2 * ring_slots(workers) * 256 * base * base * 3
        assert preflight.shm_needed_bytes(workers, 256, 224) > rings


def test_ring_collate_gives_torchs_batch_in_place():
    """The same values, strides, labels and skipped paths as collate_squares' stack, read from the slot."""
    g = torch.Generator().manual_seed(0)
    # C x H x W with channels-last strides, as fast_images.square leaves them, and one plain contiguous
    images = [torch.randint(0, 256, (SIDE, SIDE, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1) for _ in range(3)]
    images.append(torch.randint(0, 256, (3, SIDE, SIDE), dtype=torch.uint8, generator=g))
    samples = [(im, k, ()) for k, im in enumerate(images)]
    samples.insert(2, (None, 7, ("bad.jpg",)))
    want, want_labels, want_skipped = collate_squares(samples)

    ring = BatchRing(3, 5, (SIDE, SIDE, 3))
    ref, labels, skipped = RingCollate(ring)([(*s, 2) for s in samples])
    got = ring.view(ref)
    assert ref == SlotRef(2, 4) and torch.equal(got, want) and got.stride() == want.stride()
    assert labels == want_labels.tolist() and skipped == want_skipped == ("bad.jpg",)
    assert ring.holds(got) and not ring.holds(got.clone())
    assert RingCollate(ring)([(None, 0, ("a.jpg",), 1)]) == (None, None, ("a.jpg",))
    with pytest.raises(ValueError, match="does not fit"):  # a gray plane is not broadcast over three channels
        ring.write(0, [torch.zeros((1, SIDE, SIDE), dtype=torch.uint8)])


def test_a_ring_larger_than_dev_shm_is_refused_in_one_line_before_a_page_is_written(monkeypatch, tmp_path):
    """Writing past a full /dev/shm is a SIGBUS with no message; the ring says what it needs and the fixes."""
    from effbench.system import preflight

    monkeypatch.setattr(preflight, "shm_free_bytes", lambda path: 1000 if path == tmp_path else None)
    with pytest.raises(EffbenchError) as e:
        BatchRing(5, 4, (SIDE, SIDE, 3), shm=tmp_path)  # 5 x 4 x 108 bytes
    assert e.value.option == "--workers" and e.value.exit_code == 2 and "\n" not in str(e.value)
    assert "batch ring of 5 batches of 4 at 6 px" in str(e.value) and "--shm-size" in str(e.value)
    assert BatchRing(2, 4, (SIDE, SIDE, 3), shm=tmp_path).nbytes == 864  # fits in 1,000


class Numbered(Dataset):
    """Image i is filled with i % 251: a batch read from the wrong slot, or overwritten, shows it."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, tuple[str, ...]]:
        return torch.full((3, SIDE, SIDE), i % 251, dtype=torch.uint8), i, ()


def ring_loader(slots: int, workers: int = 2) -> tuple[DataLoader, BatchRing]:
    ring = BatchRing(slots, 4, (SIDE, SIDE, 3))
    batches = SlottedBatches(BatchSampler(SequentialSampler(range(96)), 4, drop_last=False), slots)
    loader = DataLoader(
        SlotSamples(Numbered()), batch_sampler=batches, num_workers=workers, collate_fn=RingCollate(ring),
        persistent_workers=True, prefetch_factor=PREFETCH_FACTOR, multiprocessing_context=worker_context(workers),
    )  # fmt: skip
    return loader, ring


def expected(labels: list[int]) -> torch.Tensor:
    return torch.stack([torch.full((3, SIDE, SIDE), i % 251, dtype=torch.uint8) for i in labels])


def test_a_held_batch_is_never_overwritten_with_one_slot_per_batch_in_flight_and_one_more():
    """The caller holds each batch for a while (the workers meanwhile fill every other slot) and finds it
    intact, over two epochs of the persistent workers, the second stopped early and the third complete."""
    loader, ring = ring_loader(ring_slots(2))
    for epoch, stop in ((0, None), (1, 5), (2, None)):
        seen = []
        for k, (ref, labels, _) in enumerate(loader):
            if k == stop:
                break
            time.sleep(0.02)
            assert torch.equal(ring.view(ref), expected(labels)), (epoch, k)
            seen += labels
        assert seen == list(range(96))[: None if stop is None else 4 * stop]


def test_one_slot_fewer_lets_the_workers_write_into_the_held_batch():
    """The bound is tight: with prefetch_factor x workers slots, the batch dispatched when batch k is returned
    goes to batch k's slot, and a worker overwrites it while the caller still holds it."""
    loader, ring = ring_loader(2 * PREFETCH_FACTOR)
    it = iter(loader)
    ref, labels, _ = next(it)
    deadline = time.monotonic() + 30
    while torch.equal(ring.view(ref), expected(labels)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not torch.equal(ring.view(ref), expected(labels))
    del it


def test_a_recipe_that_keeps_a_view_of_the_ring_is_refused():
    loader, ring = ring_loader(ring_slots(1), workers=1)
    wrapped = DeviceAugmentLoader(
        loader, SkipLog(), CPU, lambda batch, g: batch[:, :, 1:], torch.Generator(),
        encoded=False, side=SIDE, keep_full=True, batch_size=4, ring=ring,
    )  # fmt: skip
    with pytest.raises(AssertionError, match="view of the batch ring"):
        next(iter(wrapped))


@pytest.mark.parametrize("augment", ["seed", "none"])
def test_the_fast_loader_on_the_cpu_reads_its_workers_batches_from_the_ring_unchanged(food101_dir, augment):
    """Workers through the ring give the batches the training process makes alone (no workers, no ring),
    bit for bit: training (seeded crop, flip, rotation; or the centre window) and validation."""
    cfg = dict(arch="resnet18", dataset="food101", data_dir=food101_dir, image_size=32, batch_size=4, seed=0,
               loader="fast", augment=augment)  # fmt: skip
    ringed = build_data(RunConfig(**cfg, workers=2), CPU)
    alone = build_data(RunConfig(**cfg, workers=0), CPU)
    assert ringed.train.ring is not None and ringed.val.ring is not None and alone.train.ring is None
    for epoch in (0, 1):
        ringed.set_epoch(epoch)
        alone.set_epoch(epoch)
        for split in ("train", "val"):
            got, want = list(getattr(ringed, split)), list(getattr(alone, split))
            assert len(got) == len(want) > 1
            for (x, y), (xw, yw) in zip(got, want, strict=True):
                assert torch.equal(x, xw) and torch.equal(y, yw)

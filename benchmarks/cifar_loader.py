"""CIFAR input pipelines, images/s delivered: effbench's fast loader vs the torchvision per-sample one.

    .venv/bin/python benchmarks/cifar_loader.py                 # 50,000 generated CIFAR-10 images, batch 256, 2 workers
    .venv/bin/python benchmarks/cifar_loader.py --tiny          # seconds: 2,000 images, batch 64 (CI)
    .venv/bin/python benchmarks/cifar_loader.py --data-dir ./data   # the real cifar-10-batches-py/

Both sides are effbench DataBundles over the same files, iterated the same way (effbench's
--data-only loop: next(), the copy to the device, a device sync; the first batches excluded):
- effbench: `--loader fast`, the split as one uint8 tensor on the device, crop/flip/normalize batched there;
- reference: `--loader torchvision`, the seeds' pipeline (PIL image, RandomCrop(32, 4), RandomHorizontalFlip,
  ToTensor, Normalize per sample in DataLoader workers), the same --workers.
Without --data-dir a CIFAR-10 copy in the official pickle format is generated in a temporary folder.
The sides alternate A/B; the ratio is the median of the per-round ratios. Goal: >= 5x on a 2-core CPU.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    ROOT,
    Row,
    alternate,
    delivered_img_s,
    fmt_rate,
    loader_parser,
    median_ratio,
    print_table,
    quiet_torch_warnings,
)  # noqa: E402

GOAL = 5.0


def epoch_img_s(data: object, device: object, warmup_batches: int, epoch: int) -> float:
    """Images/s over one epoch of data.train after `warmup_batches`."""
    data.set_epoch(epoch)  # type: ignore[attr-defined]
    return delivered_img_s(data.train, device, warmup_batches)  # type: ignore[attr-defined]


def main() -> None:
    p = loader_parser(__doc__.splitlines()[0], "cifar-10-batches-py/")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    quiet_torch_warnings()
    import torch

    from effbench.config import RunConfig
    from effbench.data.build import build_data

    n, batch, rounds = (2000, 64, 1) if a.tiny else (50_000, 256, 3)
    n, batch, rounds = a.images or n, a.batch_size or batch, a.rounds or rounds
    device = torch.device(a.device)
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:
        data_dir = a.data_dir
        if data_dir is None:
            sys.path.insert(0, str(ROOT / "tests"))
            import fakedata  # the official on-disk format, as the tests use it

            data_dir = fakedata.make_cifar(Path(tmp), "cifar10", n_train=n, n_test=max(5, n // 5))
        common = dict(arch="resnet18", dataset="cifar10", data_dir=data_dir, image_size=32, batch_size=batch,
                      workers=a.workers, device=a.device, seed=0)  # fmt: skip
        fast = build_data(RunConfig(**common, loader="fast"), device)
        ref = build_data(RunConfig(**common, loader="torchvision"), device)
        epochs = iter(range(10_000))
        warm = 5
        fs, rs = alternate(
            lambda: epoch_img_s(fast, device, warm, next(epochs)),
            lambda: epoch_img_s(ref, device, warm, next(epochs)),
            rounds=rounds,
        )
        size = fast.train_size
    row = Row("CIFAR-10 loader (img/s delivered)", fmt_rate(fs), fmt_rate(rs), median_ratio(fs, rs), GOAL,
              f"{size:,} images, batch {batch}, {a.workers} workers (torchvision side), {a.device}; median of {rounds} A/B round(s)")  # fmt: skip
    print_table([row], "CIFAR: --loader fast vs the torchvision per-sample pipeline")


if __name__ == "__main__":
    main()

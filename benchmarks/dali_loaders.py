"""Data-only images/s per loader backend (torchvision, fast, dali) and --workers, on a Food-101-shaped folder.

    .venv/bin/python benchmarks/dali_loaders.py                 # 2,000 generated 512x384 JPEGs, 224 px, batch 32
    .venv/bin/python benchmarks/dali_loaders.py --tiny          # seconds: 96 JPEGs, 64 px, batch 8 (CI)
    .venv/bin/python benchmarks/dali_loaders.py --data-dir ./data --workers 0,4,8   # the real food-101/

Every backend is effbench's own `build_data` with `--augment seed` (one recipe, effbench/recipes.py), so
the figures are what `effbench run --data-only --loader X` delivers: batches iterated with a device
sync each (benchmarks/_common.delivered_img_s), the first 3 batches excluded, then `--batches` timed.
Per worker count the backends run in turn, the order rotated each round (alternation spreads drifting
background load over all of them); each backend's figure is reported as its ratio to torchvision's in
the same round, median and range over the rounds.

DALI's costs are measured too: the installed size of the nvidia-dali-cuda130 wheel's files (its
RECORD in the environment) and its start-up, the seconds from build_data to the first batch, beside
the fast loader's.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conditions, delivered_img_s, loader_parser, quiet_torch_warnings  # noqa: E402
from food_loader import make_food  # noqa: E402

BACKENDS = ("torchvision", "fast", "dali")
WARMUP_BATCHES = 3


def closure(dist: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The installed distributions `dist[extras]` pulls in, itself included (names normalised)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [(dist, extras)]
    while todo:
        name, ext = todo.pop()
        key = name.lower().replace("_", "-")
        try:
            d = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        if key in seen and not ext:
            continue
        seen.add(key)
        for req in map(Requirement, d.requires or []):
            env_ok = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (ext or {""}))
            if env_ok:
                todo.append((req.name, frozenset(req.extras)))
    return seen


def installed_mib(names: set[str]) -> dict[str, float]:
    """MiB of the files each distribution installed, from its RECORD."""
    from importlib import metadata

    return {n: sum(f.size or 0 for f in metadata.distribution(n).files or []) / 2**20 for n in sorted(names)}


def main() -> None:
    p = loader_parser(__doc__.splitlines()[0], "food-101/")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--batches", type=int, default=None, help="timed batches per measurement")
    p.add_argument("--workers", default="0,1,2", help="comma list of --workers values")
    a = p.parse_args()
    quiet_torch_warnings()
    import torch
    from tabulate import tabulate

    from effbench.config import RunConfig
    from effbench.data.build import build_data

    n, size, batch, batches, rounds = (96, 64, 8, 4, 1) if a.tiny else (2000, 224, 32, 15, 3)
    n, size, batch = a.images or n, a.image_size or size, a.batch_size or batch
    batches, rounds = a.batches or batches, a.rounds or rounds
    workers = [int(w) for w in a.workers.split(",")]
    cpu = torch.device("cpu")
    rows, startup = [], {}
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:
        t = time.perf_counter()
        data_dir = a.data_dir or make_food(Path(tmp), n)
        made_s = time.perf_counter() - t

        def build(loader: str, w: int):  # noqa: ANN202
            cfg = RunConfig(arch="resnet18", dataset="food101", data_dir=data_dir, image_size=size, batch_size=batch,
                            workers=w, device="cpu", loader=loader, augment="seed", seed=0)  # fmt: skip
            return build_data(cfg, cpu)

        for loader in ("fast", "dali"):  # start-up: build_data to the first training batch
            t = time.perf_counter()
            data = build(loader, 2)
            next(iter(data.train))
            startup[loader] = time.perf_counter() - t
            del data
        for w in workers:
            bundles = {b: build(b, w) for b in BACKENDS}
            epochs = itertools.count()
            rates: dict[str, list[float]] = {b: [] for b in BACKENDS}
            for r in range(rounds):
                for b in BACKENDS[r % 3 :] + BACKENDS[: r % 3]:
                    bundles[b].set_epoch(next(epochs))
                    it = itertools.islice(bundles[b].train, WARMUP_BATCHES + batches)
                    rates[b].append(delivered_img_s(it, cpu, WARMUP_BATCHES))
            ran = {bundles[b].info["workers"] for b in BACKENDS}  # build_data caps --workers at the cores
            shown = str(w) if ran == {w} else f"{w} (ran {'/'.join(map(str, sorted(ran)))})"
            for b in BACKENDS:
                ratios = [x / y for x, y in zip(rates[b], rates["torchvision"], strict=True)]
                rows.append([shown, b, f"{statistics.median(rates[b]):,.1f}", f"{min(rates[b]):,.1f}-{max(rates[b]):,.1f}",
                             f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}-{max(ratios):.2f}"])  # fmt: skip
            del bundles
    # what DALI adds: its closure less what effbench's own dependencies already install
    base = set().union(*(closure(r) for r in ("torch", "torchvision", "numpy", "pillow", "matplotlib", "pydantic",
                                               "rich", "typer", "psutil", "tabulate", "nvidia-ml-py")))  # fmt: skip
    added = installed_mib(closure("nvidia-dali-cuda130") - base)
    import nvidia.dali

    print(conditions())
    print(f"## data-only img/s per backend, --augment seed, {n:,} JPEGs 512x384 (generated in {made_s:.0f} s), "
          f"{size} px, batch {batch}, {batches} timed batches after {WARMUP_BATCHES}, {rounds} rotated round(s), CPU")  # fmt: skip
    print(tabulate(rows, headers=["workers", "backend", "img/s (median)", "range", "vs torchvision", "ratio range"],
                   tablefmt="github", disable_numparse=True))  # fmt: skip
    parts = ", ".join(f"{k} {v:,.1f}" for k, v in sorted(added.items(), key=lambda kv: -kv[1]))
    print(f"\nDALI {nvidia.dali.__version__} adds {sum(added.values()):,.0f} MiB installed: {parts} (MiB)")
    print(
        f"start-up, build_data to the first batch, --workers 2: fast {startup['fast']:.2f} s, dali {startup['dali']:.2f} s"
    )


if __name__ == "__main__":
    main()

"""Shared by the benchmark scripts: conditions header, A/B alternation, medians, the ratio table.

Not a test helper and not part of the package: the scripts import it from their own folder.
"""

from __future__ import annotations

import argparse

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    """One line of the ratio table. `ratio` = effbench / reference for speeds (higher is better);
    for a time against a budget, budget / time (>= 1 meets it)."""

    benchmark: str
    effbench: str
    reference: str
    ratio: float
    goal: float
    note: str = ""

    @property
    def met(self) -> bool:
        return self.ratio >= self.goal

    @property
    def shown_ratio(self) -> str:
        """The ratio to two decimals, or as many more (up to five) as it takes for the figure shown to read the
        same verdict as `met`: 0.597 against a goal of 0.6 shows as 0.597, not as a 0.60 that fails."""
        for digits in range(2, 6):
            shown = f"{self.ratio:.{digits}f}"
            if (float(shown) >= self.goal) == self.met:
                break
        return shown


def conditions() -> str:
    """What the figures depend on, printed above every table: load, cores, versions."""
    import torch

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  host {platform.node()}  cores {os.cpu_count()}  "
        f"load average (1/5/15 min) {load}\n# python {platform.python_version()}  torch {torch.__version__}  "
        f"threads {torch.get_num_threads()}  cuda {torch.cuda.is_available()}"
    )


def alternate(*runs: Callable[[], float], rounds: int) -> tuple[list[float], ...]:
    """Run a, b, a, b, ... (or a, b, c, a, b, c, ...) `rounds` times each: one list of results per run.
    Alternation spreads drifting background load over every side instead of charging it to whichever
    ran last, and a round's results, back to back, make that round's ratio (median_ratio)."""
    results: list[list[float]] = [[] for _ in runs]
    for _ in range(rounds):
        for run, out in zip(runs, results, strict=True):
            out.append(run())
    return tuple(results)


def median_ratio(xs: list[float], ys: list[float]) -> float:
    """Median of the per-round ratios x / y (each round's pair ran back to back)."""
    return statistics.median(x / y for x, y in zip(xs, ys, strict=True))


def fmt_rate(values: list[float], unit: str = "img/s") -> str:
    med = statistics.median(values)
    spread = f" ({min(values):,.1f}-{max(values):,.1f})" if len(values) > 1 else ""
    return f"{med:,.1f} {unit}{spread}"


def print_table(rows: list[Row], title: str) -> None:
    body = [
        [r.benchmark, r.effbench, r.reference, r.shown_ratio, f">= {r.goal:g}", "yes" if r.met else "NO", r.note]
        for r in rows
    ]
    print(conditions())
    print(f"## {title}")
    print(
        tabulate(
            body,
            headers=["benchmark", "effbench", "reference", "ratio", "goal", "met", "note"],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    sys.stdout.flush()


def quiet_torch_warnings() -> None:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def delivered_img_s(batches: object, device: object, warmup_batches: int) -> float:
    """Images/s a loader delivers onto `device` after `warmup_batches` (the loop of effbench --data-only);
    a device sync per batch, so a batch counts only once it is on the device."""
    from effbench.run.timing import device_clock

    sync = device_clock(device).sync_stream
    images, t0 = 0, None
    for i, (x, y) in enumerate(batches):  # type: ignore[attr-defined]
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        sync()
        if i == warmup_batches - 1:
            t0 = time.perf_counter()
        elif i >= warmup_batches:
            images += int(y.shape[0])
    assert t0 is not None and images > 0, "too few batches for the warm-up"
    return images / (time.perf_counter() - t0)


def loader_parser(description: str, holds: str) -> argparse.ArgumentParser:
    """The options every loader benchmark shares; `holds`: the dataset folder --data-dir must hold."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--data-dir", type=Path, default=None, help=f"folder holding {holds} (default: generate one)")
    p.add_argument("--images", type=int, default=None, help="training images to generate")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    return p

"""Wall time of `effbench run --smoke` end to end, as a user runs it: a fresh process, import to exit.

    .venv/bin/python benchmarks/smoke_e2e.py             # the smoke preset, 1 run
    .venv/bin/python benchmarks/smoke_e2e.py --runs 3    # median of 3
    .venv/bin/python benchmarks/smoke_e2e.py --tiny      # seconds: resnet18 at 16 px, 3 steps, no profiling pass (CI)

The reference is the budget: 60 s on a 2-core CPU. Ratio = budget / wall time (>= 1 meets it).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, Row, print_table  # noqa: E402

BUDGET_S = 60.0


def wall_s(extra: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:
        argv = [sys.executable, "-m", "effbench", "run", "--smoke", "--output", tmp, "--quiet", *extra]
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args()
    tiny = "--arch resnet18 --image-size 16 --batch-size 4 --max-steps 3 --warmup-steps 1 --no-profile"
    extra = tiny.split() if a.tiny else []
    walls = [wall_s(extra) for _ in range(a.runs)]
    wall = statistics.median(walls)
    what = "effbench run --smoke" + (" " + " ".join(extra) if extra else "")
    row = Row("smoke run, end to end (s)", f"{wall:.1f} s" + (f" ({min(walls):.1f}-{max(walls):.1f})" if len(walls) > 1 else ""),
              f"budget {BUDGET_S:.0f} s", BUDGET_S / wall, 1.0, f"{what}; median of {a.runs} run(s)")  # fmt: skip
    print_table([row], "effbench run --smoke wall time against its budget")


if __name__ == "__main__":
    main()

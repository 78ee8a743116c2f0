"""How libgomp's idle threads wait, side by side: the harness and a bare loop under each OpenMP wait policy.

    .venv/bin/python benchmarks/omp_policy.py             # b0 and resnet18 at 32 px, 3 alternating rounds
    .venv/bin/python benchmarks/omp_policy.py --tiny      # seconds: resnet18 at 16 px, 1 round (CI)

torch's CPU ops run on libgomp (ATen's parallel backend is OpenMP), which reads OMP_WAIT_POLICY and
GOMP_SPINCOUNT when it loads: so each policy runs in a process of its own, `benchmarks/harness_overhead.py`
(effbench's loop and a bare PyTorch loop, same model, batch and threads), with every other variable as this
process has them. The policies: libgomp's default (spin up to GOMP_SPINCOUNT = 300,000 iterations, then
sleep), `OMP_WAIT_POLICY=PASSIVE` (never spin), and `GOMP_SPINCOUNT=10000` (spin a little). The order of the
policies rotates every round, so each meets each moment of the machine. Figures: the median of each policy's
rounds, the ratio against the default's median; read the load average printed above the table.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, print_table  # noqa: E402

POLICIES = {
    "default": {},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000"},
}
# harness_overhead.py's table row: | harness overhead ... | <effbench> img/s ... | <bare> img/s ... |
RATES = re.compile(r"^\| harness overhead[^|]*\|\s*([\d,.]+) img/s[^|]*\|\s*([\d,.]+) img/s", re.M)


def one(arch: str, size: int, batch: int, steps: int, env: dict[str, str]) -> tuple[float, float]:
    """(effbench img/s, bare loop img/s) of one harness_overhead.py round under `env`."""
    script = Path(__file__).resolve().parent / "harness_overhead.py"
    args = [sys.executable, str(script), "--arch", arch, "--image-size", str(size), "--batch-size", str(batch),
            "--steps", str(steps), "--rounds", "1"]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    m = RATES.search(res.stdout)
    if res.returncode != 0 or m is None:
        raise SystemExit(f"error: harness_overhead.py failed under {env.get('OMP_WAIT_POLICY')}: {res.stderr[-500:]}")
    return float(m.group(1).replace(",", "")), float(m.group(2).replace(",", ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--rounds", type=int, default=None)
    a = p.parse_args()
    archs, size, batch, steps, rounds = (["resnet18"], 16, 4, 3, 1) if a.tiny else (["b0", "resnet18"], 32, 32, 20, 3)
    rounds = a.rounds or rounds
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    names = list(POLICIES)
    got: dict[tuple[str, str], list[tuple[float, float]]] = {(arch, n): [] for arch in archs for n in names}
    for r in range(rounds):
        for arch in archs:
            for n in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order each round
                got[(arch, n)].append(one(arch, size, batch, steps, {**base, **POLICIES[n]}))
    rows = []
    for arch in archs:
        ref = statistics.median(e for e, _ in got[(arch, "default")])
        for n in names:
            eff = statistics.median(e for e, _ in got[(arch, n)])
            bare = statistics.median(b for _, b in got[(arch, n)])
            rows.append(Row(f"{arch} under {n}", f"{eff:,.1f} img/s", f"{bare:,.1f} img/s (bare)", eff / ref, 0.0,
                            f"{size} px, batch {batch}, {steps} steps; ratio: effbench against the default policy's; "
                            f"{rounds} round(s)"))  # fmt: skip
    print_table(rows, "OpenMP wait policies: effbench and a bare loop, each policy in its own process")


if __name__ == "__main__":
    main()

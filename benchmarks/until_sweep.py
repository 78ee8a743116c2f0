"""`--until ci:X%` against the fixed-length way to the same interval: device time over a sweep of cells (issue 48).

    .venv/bin/python benchmarks/until_sweep.py                 # resnet18, b0 x batch 8, 16, 32 at 32 px, ci:2%
    .venv/bin/python benchmarks/until_sweep.py --tiny          # a minute: resnet18 at 16 px, batch 2 and 4, ci:50% (CI)
    .venv/bin/python benchmarks/until_sweep.py --from-json --json until.json   # the tables again, from a (stopped) run's JSON
    .venv/bin/python benchmarks/until_sweep.py --json until.json --keep runs/   # the figures and every run folder

Every run is `effbench run` in this process (launch.run: synthetic data, random weights, one epoch, no profiling
pass, one validation batch), so each one is the command a user types; the JSON gives each run's options.

What is compared, per cell (arch x batch size), the cells one after another, each cell's runs back to back so
the load of the moment falls on both ways alike:
- **until**: `--until ci:X%` with the default `--warmup-steps auto`, `--max-steps` a cap it should not reach. Its
  device time: the warm-up's and the measured steps' time (results.json `warmup.time_s + measured.time_s`, the
  steps' data wait + compute); setup, model build and validation are left out on both sides alike.
- **fixed**: what a user does today to get a figure to +-X: one fixed warm-up (`--warmup-steps 5`, the count
  every run had before auto) and one fixed count N of measured steps (`--max-steps 5+N`), the same N for every
  cell of the sweep (a user picks one number for a sweep). N is the smallest count of GRID, going up, at
  which every cell's interval is within +-X: per cell the grid is climbed until that cell reaches it, then
  every cell is run at the largest of those counts (and higher, should a cell miss there). The interval read
  from a fixed run is the rule's own statistic (steady_state.window_interval of the windows between the loop's
  waits, every `--log-interval` steps, read from steps.csv by windows.wait_windows), so both ways are judged by
  the same yardstick; the interval the run's report prints by default (`--repeats` 5 windows: a wider t
  quantile, 2.78 against 2.26 at 10 windows) is recorded beside it (`default_report_half_width_pct`). Its
  device time: the same sum, of the run at N.
- **reference**: a long run (REFERENCE_FACTOR x the until run's steps, auto warm-up); the until figure agrees
  with it when the reference's figure (`measured.throughput_img_s`) lies inside the until run's recorded
  interval (results.json `until.ci_low_img_s`..`ci_high_img_s`).

Goal (issue 48): the until sweep's device time <= 60% of the fixed one's, shown as fixed / until >= 1/0.6.
The load average before and after each run is in the JSON: on a shared machine it moves both ways' figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, conditions, print_table, quiet_torch_warnings  # noqa: E402

GOAL_SHARE = 0.60  # issue 48: --until's device time at most 60% of the fixed default's
FIXED_WARMUP = 5  # the fixed warm-up every run had before auto (docs/methodology.md, "Warm-up and stopping rules")


@dataclass(frozen=True)
class Sizes:
    archs: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    image_size: int
    target_pct: float
    log_interval: int
    cap_steps: int
    grid: tuple[int, ...]
    fixed_warmup: int
    reference_factor: float
    reference_max_steps: int


REAL = Sizes(archs=("resnet18", "b0"), batch_sizes=(8, 16, 32), image_size=32, target_pct=2.0, log_interval=10,
             cap_steps=2000, grid=(30, 50, 70, 100, 150, 200, 300, 400, 600, 800), fixed_warmup=FIXED_WARMUP,
             reference_factor=5.0, reference_max_steps=3000)  # fmt: skip
TINY = Sizes(archs=("resnet18",), batch_sizes=(2, 4), image_size=16, target_pct=50.0, log_interval=1, cap_steps=34,
             grid=(3, 5, 10, 20), fixed_warmup=1, reference_factor=1.0, reference_max_steps=34)  # fmt: skip


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def window_interval(step_rows: list[Any], window_steps: int) -> Any:
    """The rule's own statistic on a run's steps.csv: the windows --until judges (windows.wait_windows: between
    the loop's waits) and their interval (steady_state.window_interval). None below 3 windows."""
    from effbench.analysis import steady_state, windows

    return steady_state.window_interval(windows.wait_windows(step_rows, window_steps))


def one_run(cfg_kw: dict[str, Any], out: Path, log_interval: int) -> dict[str, Any]:
    """One `effbench run`; what this benchmark reads from its record and steps.csv."""
    from effbench.analysis import windows
    from effbench.config import RunConfig
    from effbench.run import launch

    before = load()
    t0 = time.perf_counter()
    outcome = launch.run(RunConfig(**cfg_kw, output=out), command=["until_sweep.py"], echo=lambda _s: None,
                         progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    r = outcome.results
    assert r.status == "ok" and r.measured is not None and r.warmup is not None, (r.status, r.error)
    got = window_interval(windows.read_steps(outcome.run_dir), log_interval)
    summary = (r.throughput_windows.summary or {}).get("throughput_img_s") if r.throughput_windows else None
    default_hw = None
    if summary is not None and summary.ci_low is not None and summary.ci_high is not None and summary.mean:
        default_hw = 100.0 * (summary.ci_high - summary.ci_low) / 2 / summary.mean
    return {
        "options": {k: v for k, v in cfg_kw.items() if v is not None},
        "run_dir": str(outcome.run_dir),
        "load_before": before,
        "load_after": load(),
        "wall_s": round(wall, 2),
        "warmup_steps": r.warmup.steps,
        "measured_steps": r.measured.steps,
        "steps": r.warmup.steps + r.measured.steps,
        "warmup_time_s": r.warmup.time_s,
        "measured_time_s": r.measured.time_s,
        "device_s": r.warmup.time_s + r.measured.time_s,
        "throughput_img_s": r.measured.throughput_img_s,
        # the rule's statistic read back from steps.csv: for an until run, the same as its record's until
        "half_width_pct": None if got is None else got.half_width_pct,
        "ci_img_s": None if got is None else [got.ci_low_img_s, got.ci_high_img_s],
        "lag1_autocorrelation": None if got is None else got.lag1_autocorrelation,
        "windows": None if got is None else got.windows,
        "default_report_half_width_pct": default_hw,
        "warmup_rule": r.warmup_rule.model_dump(exclude_none=True) if r.warmup_rule else None,
        "until": r.until.model_dump(exclude_none=True) if r.until else None,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp's default, ACTIVE)"),
    }


def base_kw(s: Sizes, arch: str, batch: int) -> dict[str, Any]:
    return dict(arch=arch, batch_size=batch, dataset="synthetic", weights="none", image_size=s.image_size, epochs=1,
                max_val_steps=1, profile=False, device="cpu", log_interval=s.log_interval)  # fmt: skip


def within(x: float | None, target_pct: float) -> bool:
    return x is not None and x <= target_pct


class Bench:
    """The runs, kept in `record` and written to the JSON after every run (a long sweep stopped early keeps
    what it measured)."""

    def __init__(self, s: Sizes, out: Path, json_path: Path | None, header: dict[str, Any]) -> None:
        self.s, self.out, self.json_path = s, out, json_path
        self.record: dict[str, Any] = {**header, "cells": {}}

    def save(self) -> None:
        if self.json_path is not None:
            self.json_path.write_text(json.dumps(self.record, indent=1) + "\n")

    def cell(self, arch: str, batch: int) -> dict[str, Any]:
        return self.record["cells"].setdefault(f"{arch} bs{batch}", {"arch": arch, "batch_size": batch, "fixed": {}})

    def run(self, arch: str, batch: int, kind: str, n: int | None = None, **kw: Any) -> dict[str, Any]:
        got = one_run({**base_kw(self.s, arch, batch), **kw}, self.out, self.s.log_interval)
        cell = self.cell(arch, batch)
        if n is not None:
            cell[kind][str(n)] = got
        else:
            cell[kind] = got
        self.save()
        hw = got["half_width_pct"]
        print(f"  {arch} bs{batch} {kind}: {got['warmup_steps']} + {got['measured_steps']} steps, "
              f"{got['device_s']:.1f} device s, {got['throughput_img_s']:.1f} img/s "
              f"+-{'-' if hw is None else f'{hw:.2f}'}%, load {got['load_before'][0]} -> {got['load_after'][0]}",
              file=sys.stderr, flush=True)  # fmt: skip
        return got

    def fixed(self, arch: str, batch: int, n: int) -> dict[str, Any]:
        have = self.cell(arch, batch)["fixed"].get(str(n))
        if have is not None:
            return have
        return self.run(arch, batch, "fixed", n, warmup_steps=self.s.fixed_warmup, max_steps=self.s.fixed_warmup + n)


def measure(b: Bench, cells: list[tuple[str, int]]) -> int | None:
    """Each cell: until, the fixed grid climbed until it reaches the target, the reference. Then the one N for
    the sweep (sweep_n)."""
    s = b.s
    for arch, batch in cells:
        until = b.run(arch, batch, "until", until=f"ci:{s.target_pct:g}%", max_steps=s.cap_steps)
        for n in s.grid:
            if within(b.fixed(arch, batch, n)["half_width_pct"], s.target_pct):
                break
        ref_steps = min(s.reference_max_steps, max(2 * FIXED_WARMUP, round(s.reference_factor * until["steps"])))
        b.run(arch, batch, "reference", max_steps=ref_steps)
    return sweep_n(b, cells, run_missing=True)


def sweep_n(b: Bench, cells: list[tuple[str, int]], *, run_missing: bool) -> int | None:
    """The one N for the sweep: the smallest grid count at which every cell's fixed run is within the target,
    from the largest of the cells' first counts that reach it up; a cell not yet run at a count is run there
    (`run_missing`; else that count is passed over). None when no grid count is."""
    s = b.s
    firsts = []
    for arch, batch in cells:
        fixed = b.cell(arch, batch)["fixed"]
        firsts.append(
            min((int(n) for n, g in fixed.items() if within(g["half_width_pct"], s.target_pct)), default=None)
        )
    if not firsts or any(f is None for f in firsts):
        return None
    for n in [g for g in s.grid if g >= max(f for f in firsts if f is not None)]:
        have = [b.cell(arch, batch)["fixed"].get(str(n)) for arch, batch in cells]
        if not run_missing and any(h is None for h in have):
            continue
        if all(within(b.fixed(arch, batch, n)["half_width_pct"], s.target_pct) for arch, batch in cells):
            return n
    return None


def summarize(b: Bench, cells: list[tuple[str, int]], n: int | None) -> tuple[list[list[str]], Row]:
    s = b.s
    rows, until_s, fixed_s = [], 0.0, 0.0
    for arch, batch in cells:
        c = b.cell(arch, batch)
        u, ref = c["until"], c["reference"]
        f = c["fixed"].get(str(n)) if n is not None else None
        hw = u["half_width_pct"]
        until_hw = (u["until"] or {}).get("half_width_pct")
        diff_pct = 100.0 * abs(u["throughput_img_s"] - ref["throughput_img_s"]) / u["throughput_img_s"]
        rec = u["until"] or {}
        low, high = rec.get("ci_low_img_s"), rec.get("ci_high_img_s")
        ok = low is not None and low <= ref["throughput_img_s"] <= (math.inf if high is None else high)
        c["reference_diff_pct"], c["within_interval"] = diff_pct, ok
        until_s += u["device_s"]
        fixed_s += f["device_s"] if f else math.nan
        rows.append([f"{arch} bs{batch}", f"{u['warmup_steps']} + {u['measured_steps']}", f"{u['device_s']:.1f}",
                     f"+-{until_hw:.2f}%" if until_hw is not None else "-",
                     "not reached" if f is None else f"{f['warmup_steps']} + {f['measured_steps']}",
                     "-" if f is None else f"{f['device_s']:.1f}",
                     "-" if f is None else f"+-{f['half_width_pct']:.2f}%",
                     "-" if f is None else f"{u['device_s'] / f['device_s']:.2f}",
                     f"{ref['throughput_img_s']:.1f} ({ref['steps']} steps, +-{ref['half_width_pct']:.2f}%)",
                     f"{u['throughput_img_s']:.1f}, {diff_pct:.2f}% off: {'yes' if ok else 'NO'}"])  # fmt: skip
        if hw is not None and until_hw is not None:
            c["until_hw_check"] = {"from_steps_csv": hw, "recorded": until_hw}
    b.record["fixed_n"] = n
    b.record["until_device_s"], b.record["fixed_device_s"] = until_s, (fixed_s if n is not None else None)
    ratio = fixed_s / until_s if n is not None and until_s > 0 else 0.0
    b.record["until_share_of_fixed"] = until_s / fixed_s if n is not None and fixed_s > 0 else None
    b.save()
    what = f"{len(cells)} cells, ci:{s.target_pct:g}%, fixed N = {n if n is not None else 'not reached in the grid'}"
    row = Row("device time, fixed / until", f"{until_s:.1f} s (until)",
              f"{fixed_s:.1f} s (fixed)" if n is not None else "not reached", ratio, round(1 / GOAL_SHARE, 3),
              f"{what}; until = {100 * until_s / fixed_s:.0f}% of fixed" if n is not None else what)  # fmt: skip
    return rows, row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--arch", default=None, help="comma list (default resnet18,b0)")
    p.add_argument("--batch-size", default=None, help="comma list (default 8,16,32)")
    p.add_argument("--target-pct", type=float, default=None, help="--until ci:X%% (default 2)")
    p.add_argument("--cap-steps", type=int, default=None, help="--max-steps of the until run (default 2000)")
    p.add_argument("--reference-factor", type=float, default=None, help="reference steps / until steps (default 5)")
    p.add_argument("--omp-wait-policy", default="auto", choices=("auto", "passive", "active"),
                   help="set once, before torch loads, for every run (effbench's --omp-wait-policy)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="write the figures here (rewritten after every run)")
    p.add_argument(
        "--from-json",
        action="store_true",
        help="run nothing: the tables from --json's runs, over the cells it holds whole (a stopped sweep)",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temporary folder)")
    a = p.parse_args()
    from effbench.system import wait_policy

    note = wait_policy.apply(a.omp_wait_policy, "cpu")  # before torch loads, as the CLI does
    quiet_torch_warnings()
    s = TINY if a.tiny else REAL
    over = dict(archs=tuple(a.arch.split(",")) if a.arch else None,
                batch_sizes=tuple(int(x) for x in a.batch_size.split(",")) if a.batch_size else None,
                target_pct=a.target_pct, reference_factor=a.reference_factor, cap_steps=a.cap_steps)  # fmt: skip
    s = Sizes(**{**s.__dict__, **{k: v for k, v in over.items() if v is not None}})
    cells = [(arch, batch) for arch in s.archs for batch in s.batch_sizes]
    header = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "conditions": conditions(), "sizes": s.__dict__,
              "omp_note": note, "command": " ".join(["benchmarks/until_sweep.py", *sys.argv[1:]])}  # fmt: skip
    if a.from_json:
        if a.json is None or not a.json.is_file():
            print("error: --from-json reads the file --json names; give --json PATH of an earlier run", file=sys.stderr)
            sys.exit(2)
        b = Bench(s, Path("."), None, {})  # reads the file, never rewrites it
        b.record = json.loads(a.json.read_text())
        b.s = s = Sizes(**{k: tuple(v) if isinstance(v, list) else v for k, v in b.record["sizes"].items()})
        cells = [(c["arch"], c["batch_size"]) for c in b.record["cells"].values() if "reference" in c]
        n = sweep_n(b, cells, run_missing=False)
        print(f"# from {a.json}: measured {b.record['date']}, {len(cells)} whole cell(s); then:")
        print(b.record["conditions"])
        rows, row = summarize(b, cells, n)
    else:
        with tempfile.TemporaryDirectory(prefix="effbench-until-") as tmp:
            b = Bench(s, a.keep or Path(tmp), a.json, header)
            n = measure(b, cells)
            rows, row = summarize(b, cells, n)
    from tabulate import tabulate

    print_table([row], f"--until ci:{s.target_pct:g}% against the fixed N that reaches it, device time")
    print(tabulate(rows, headers=["cell", "until steps (warm-up + measured)", "until device s", "until interval",
                                  f"fixed steps (N = {n})", "fixed device s", "fixed interval", "until / fixed",
                                  "reference img/s", "until img/s, within its interval"],
                   tablefmt="github", disable_numparse=True))  # fmt: skip
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""`--until ci:X%` against the fixed-length way to the same interval: device time over a sweep of cells (issue 48).

    .venv/bin/python benchmarks/until_sweep.py                 # resnet18, b0 x batch 8, 16, 32 at 32 px; ci:2% and 5%
    .venv/bin/python benchmarks/until_sweep.py --tiny          # a minute: resnet18 at 16 px, batch 2 and 4 (CI)
    .venv/bin/python benchmarks/until_sweep.py --from-json --json until.json   # the tables again, from a run's JSON
    .venv/bin/python benchmarks/until_sweep.py --json until.json --keep runs/   # the figures and every run folder

Every run is `effbench run` in this process (launch.run: synthetic data, random weights, one epoch, no profiling
pass, one validation batch), so each one is the command a user types; the JSON gives each run's options.

Two runs per cell (arch x batch size), back to back, the cells one after another:
- **until**: `--until ci:X%` at the smallest target, the default `--warmup-steps auto`, `--max-steps` a cap.
- **long**: `--warmup-steps 5` (the fixed warm-up every run had before auto) and LONG_STEPS measured steps.

Everything else is read from their steps.csv, replaying what a run would have done, since a run's steps up to a
point do not depend on how many come after it:
- **until at X** (each target): the loop checks at every wait and stops at the first whose windows
  (windows.wait_windows) are at least MIN_WINDOWS and have an interval (steady_state.window_interval) within X.
  For the run's own target the replay must land on the step the run stopped at: it is asserted. Device time:
  the warm-up's and the measured steps' time up to that wait (setup, model build, validation left out on both
  sides alike). Its figure: the measured images over their time up to there, as the record's headline.
- **fixed at X**: what a user does today for a figure to +-X: one count N of measured steps for every cell of
  the sweep (a user picks one number for a sweep), after `--warmup-steps 5`. N is the smallest of GRID at which
  every cell's first N measured steps of its long run have an interval within X by the rule's own statistic, so
  both ways are judged alike. Device time: the warm-up's and those N steps' time.
- **reference**: the long run's whole figure. The until figure agrees with it when the reference lies inside
  the until interval at X.

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
    targets_pct: tuple[float, ...]
    log_interval: int
    cap_steps: int
    """--max-steps of the until run (its warm-up included)."""
    long_steps: int
    """Measured steps of the long run: the reference, and the fixed runs' steps as its first N."""
    grid: tuple[int, ...]
    fixed_warmup: int


REAL = Sizes(archs=("resnet18", "b0"), batch_sizes=(8, 16, 32), image_size=32, targets_pct=(2.0, 5.0),
             log_interval=10, cap_steps=600, long_steps=1200, grid=(30, 50, 70, 100, 150, 200, 300, 400, 600, 800,
             1200), fixed_warmup=FIXED_WARMUP)  # fmt: skip
TINY = Sizes(archs=("resnet18",), batch_sizes=(2, 4), image_size=16, targets_pct=(50.0, 80.0), log_interval=1,
             cap_steps=34, long_steps=30, grid=(3, 5, 10, 20, 30), fixed_warmup=1)  # fmt: skip


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def one_run(cfg_kw: dict[str, Any], out: Path) -> dict[str, Any]:
    """One `effbench run`; what this benchmark reads from its record (the steps are read later, from its folder)."""
    from effbench.config import RunConfig
    from effbench.run import launch

    before = load()
    t0 = time.perf_counter()
    outcome = launch.run(RunConfig(**cfg_kw, output=out), command=["until_sweep.py"], echo=lambda _s: None,
                         progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    r = outcome.results
    assert r.status == "ok" and r.measured is not None and r.warmup is not None, (r.status, r.error)
    return {
        "options": {k: v for k, v in cfg_kw.items() if v is not None},
        "run_dir": str(outcome.run_dir),
        "load_before": before,
        "load_after": load(),
        "wall_s": round(wall, 2),
        "warmup_steps": r.warmup.steps,
        "measured_steps": r.measured.steps,
        "device_s": r.warmup.time_s + r.measured.time_s,
        "throughput_img_s": r.measured.throughput_img_s,
        "warmup_rule": r.warmup_rule.model_dump(exclude_none=True) if r.warmup_rule else None,
        "until": r.until.model_dump(exclude_none=True) if r.until else None,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset: libgomp's default, ACTIVE)"),
    }


def base_kw(s: Sizes, arch: str, batch: int) -> dict[str, Any]:
    return dict(arch=arch, batch_size=batch, dataset="synthetic", weights="none", image_size=s.image_size, epochs=1,
                max_val_steps=1, profile=False, device="cpu", log_interval=s.log_interval)  # fmt: skip


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
        return self.record["cells"].setdefault(f"{arch} bs{batch}", {"arch": arch, "batch_size": batch})

    def run(self, arch: str, batch: int, kind: str, **kw: Any) -> dict[str, Any]:
        got = one_run({**base_kw(self.s, arch, batch), **kw}, self.out)
        self.cell(arch, batch)[kind] = got
        self.save()
        print(f"  {arch} bs{batch} {kind}: {got['warmup_steps']} + {got['measured_steps']} steps, "
              f"{got['device_s']:.1f} device s, {got['throughput_img_s']:.1f} img/s, "
              f"load {got['load_before'][0]} -> {got['load_after'][0]}", file=sys.stderr, flush=True)  # fmt: skip
        return got


def measure(b: Bench, cells: list[tuple[str, int]]) -> None:
    s = b.s
    for arch, batch in cells:
        b.run(arch, batch, "until", until=f"ci:{min(s.targets_pct):g}%", max_steps=s.cap_steps)
        b.run(arch, batch, "long", warmup_steps=s.fixed_warmup, max_steps=s.fixed_warmup + s.long_steps)


# --- the replay: what each way would have done, from the two runs' steps --------------------------------------
@dataclass(frozen=True)
class Prefix:
    """A run's steps up to a point: its device time, figure and the rule's interval there."""

    measured_steps: int
    device_s: float
    throughput_img_s: float
    interval: Any  # steady_state.WindowInterval | None
    reached: bool


def prefix(rows: list[Any], end: int, log_interval: int, target_pct: float) -> Prefix:
    """The run's first `end` rows (warm-up and measured): what a run stopped there would record."""
    from effbench.analysis import steady_state, windows

    part = rows[:end]
    measured = [r for r in part if not r.warmup]
    time_s = sum(r.data_time_s + r.compute_time_s for r in measured)
    rule = steady_state.IntervalStop(relative_half_width=target_pct / 100.0)
    decision = steady_state.stop_decision(rule, windows.wait_windows(part, log_interval))  # the loop's own decision
    return Prefix(measured_steps=len(measured), device_s=sum(r.data_time_s + r.compute_time_s for r in part),
                  throughput_img_s=sum(r.images for r in measured) / time_s, interval=decision.interval,
                  reached=decision.reason == "interval reached")  # fmt: skip


def until_at(rows: list[Any], log_interval: int, target_pct: float) -> Prefix:
    """The until run replayed at `target_pct`: stopped at the first wait (a multiple of log_interval, or the
    run's end) after warm-up whose windows reach it; else the whole run (its cap)."""
    waits = [i + 1 for i, r in enumerate(rows) if not r.warmup and (r.step % log_interval == 0 or i + 1 == len(rows))]
    for end in waits:
        got = prefix(rows, end, log_interval, target_pct)
        if got.reached:
            return got
    return prefix(rows, len(rows), log_interval, target_pct)


def fixed_n(longs: list[list[Any]], s: Sizes, target_pct: float) -> int | None:
    """The one N for the sweep: the smallest grid count at which every cell's first N measured steps (after the
    fixed warm-up) reach the target; None when no grid count does."""
    for n in s.grid:
        if n <= s.long_steps and all(prefix(rows, s.fixed_warmup + n, s.log_interval, target_pct).reached
                                     for rows in longs):  # fmt: skip
            return n
    return None


def summarize(
    b: Bench, cells: list[tuple[str, int]], target_pct: float
) -> tuple[list[list[str]], list[Row], int | None]:
    from effbench.analysis import windows

    s = b.s
    until_rows = [windows.read_steps(Path(b.cell(a, bs)["until"]["run_dir"])) for a, bs in cells]
    long_rows = [windows.read_steps(Path(b.cell(a, bs)["long"]["run_dir"])) for a, bs in cells]
    n = fixed_n(long_rows, s, target_pct)
    rows, until_s, fixed_s, summary = [], 0.0, 0.0, {}
    for (arch, batch), u_rows, l_rows in zip(cells, until_rows, long_rows, strict=True):
        c = b.cell(arch, batch)
        u = until_at(u_rows, s.log_interval, target_pct)
        if target_pct == min(s.targets_pct):  # the replay lands where the run itself stopped
            rec = c["until"]["until"]
            assert (u.measured_steps, u.reached) == (rec["steps"], rec["reached"]), (arch, batch, u, rec)
        f = prefix(l_rows, s.fixed_warmup + n, s.log_interval, target_pct) if n is not None else None
        own = fixed_n([l_rows], s, target_pct)  # this cell's own first N, whatever the others need
        own_s = prefix(l_rows, s.fixed_warmup + own, s.log_interval, target_pct).device_s if own is not None else None
        ref = c["long"]["throughput_img_s"]
        ref_iv = prefix(l_rows, len(l_rows), s.log_interval, target_pct).interval
        iv = u.interval
        ok = iv is not None and iv.ci_low_img_s <= ref <= iv.ci_high_img_s
        until_s += u.device_s
        fixed_s += f.device_s if f else math.nan
        summary[f"{arch} bs{batch}"] = {"until": u.__dict__ | {"interval": iv and iv.__dict__},
                                        "fixed": f and (f.__dict__ | {"interval": f.interval.__dict__}),
                                        "own_fixed_n": own, "own_fixed_device_s": own_s, "reference_img_s": ref,
                                        "reference_in_until_interval": ok}  # fmt: skip
        rows.append([f"{arch} bs{batch}",
                     f"{c['until']['warmup_steps']} + {u.measured_steps}", f"{u.device_s:.1f}",
                     _interval(iv) + ("" if u.reached else " (cap)"),
                     f"none to {s.long_steps}" if own is None else f"{own}: {own_s:.1f} s",
                     "-" if f is None else f"{f.device_s:.1f}", "-" if f is None else _interval(f.interval),
                     f"{ref:.1f} {_interval(ref_iv)}",
                     f"{u.throughput_img_s:.1f}: {'yes' if ok else 'NO'}"])  # fmt: skip
    b.record.setdefault("by_target", {})[f"{target_pct:g}"] = {
        "fixed_n": n, "until_device_s": until_s, "fixed_device_s": fixed_s if n is not None else None,
        "until_share_of_fixed": until_s / fixed_s if n is not None and fixed_s > 0 else None, "cells": summary,
    }  # fmt: skip
    b.save()
    ratio = fixed_s / until_s if n is not None and until_s > 0 else 0.0
    what = f"{len(cells)} cells, ci:{target_pct:g}%, fixed N = {n if n is not None else 'not reached in the grid'}"
    row = Row(f"device time at ci:{target_pct:g}%, fixed / until", f"{until_s:.1f} s (until)",
              f"{fixed_s:.1f} s (fixed)" if n is not None else "not reached", ratio, round(1 / GOAL_SHARE, 3),
              f"{what}; until = {100 * until_s / fixed_s:.0f}% of fixed" if n is not None else what)  # fmt: skip
    # a best case for the fixed way, which no user has: each cell at its own first N, known only afterwards
    owns = [v["own_fixed_device_s"] for v in summary.values()]
    reached = [v["until"]["reached"] for v in summary.values()]
    own_total = sum(owns) if all(o is not None for o in owns) else None
    b.record["by_target"][f"{target_pct:g}"]["own_fixed_device_s"] = own_total
    b.save()
    best = Row("same, each cell at its own N", f"{until_s:.1f} s (until, {sum(reached)} of {len(reached)} reached)",
               "not reached" if own_total is None else f"{own_total:.1f} s (fixed)",
               0.0 if own_total is None else own_total / until_s, round(1 / GOAL_SHARE, 3),
               "a best case for fixed: each cell's own first N, known only after the long run")  # fmt: skip
    return rows, [row, best], n


def _interval(iv: Any) -> str:
    if iv is None:
        return "-"
    return f"+-{iv.half_width_pct:.2f}% (r {iv.lag1_autocorrelation:+.2f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a minute (CI)")
    p.add_argument("--arch", default=None, help="comma list (default resnet18,b0)")
    p.add_argument("--batch-size", default=None, help="comma list (default 8,16,32)")
    p.add_argument("--targets-pct", default=None, help="comma list of X for ci:X%%; the run uses the smallest (2,5)")
    p.add_argument("--cap-steps", type=int, default=None, help="--max-steps of the until run (default 600)")
    p.add_argument("--long-steps", type=int, default=None, help="measured steps of the long run (default 1200)")
    p.add_argument("--omp-wait-policy", default="auto", choices=("auto", "passive", "active"),
                   help="set once, before torch loads, for every run (effbench's --omp-wait-policy)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="write the figures here (rewritten after every run)")
    p.add_argument(
        "--from-json",
        action="store_true",
        help="run nothing: the tables from --json's runs, over the cells it holds whole (a stopped sweep); the "
        "replayed figures are written back into it",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temporary folder)")
    a = p.parse_args()
    from effbench.system import wait_policy

    note = wait_policy.apply(a.omp_wait_policy, "cpu")  # before torch loads, as the CLI does
    quiet_torch_warnings()
    s = TINY if a.tiny else REAL
    over = dict(archs=tuple(a.arch.split(",")) if a.arch else None,
                batch_sizes=tuple(int(x) for x in a.batch_size.split(",")) if a.batch_size else None,
                targets_pct=tuple(float(x) for x in a.targets_pct.split(",")) if a.targets_pct else None,
                cap_steps=a.cap_steps, long_steps=a.long_steps)  # fmt: skip
    s = Sizes(**{**s.__dict__, **{k: v for k, v in over.items() if v is not None}})
    cells = [(arch, batch) for arch in s.archs for batch in s.batch_sizes]
    header = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "conditions": conditions(), "sizes": s.__dict__,
              "omp_note": note, "command": " ".join(["benchmarks/until_sweep.py", *sys.argv[1:]])}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="effbench-until-") as tmp:
        if a.from_json:
            if a.json is None or not a.json.is_file():
                print("error: --from-json reads the file --json names; give --json PATH of an earlier run",
                      file=sys.stderr)  # fmt: skip
                sys.exit(2)
            b = Bench(s, Path("."), a.json, {})
            b.record = json.loads(a.json.read_text())
            b.s = s = Sizes(**{k: tuple(v) if isinstance(v, list) else v for k, v in b.record["sizes"].items()})
            cells = [(c["arch"], c["batch_size"]) for c in b.record["cells"].values() if "long" in c]
            print(f"# from {a.json}: measured {b.record['date']}, {len(cells)} whole cell(s); then:")
            print(b.record["conditions"])
        else:
            b = Bench(s, a.keep or Path(tmp), a.json, header)
            measure(b, cells)
        tables = [(target, *summarize(b, cells, target)) for target in sorted(s.targets_pct)]
    from tabulate import tabulate

    print_table(
        [r for _, _, pair, _ in tables for r in pair], "--until ci:X% against the fixed N that reaches it, device time"
    )
    for target, rows, _, n in tables:
        print(f"\n## ci:{target:g}%\n")
        print(tabulate(rows, headers=["cell", "until steps (warm-up + measured)", "until device s", "until interval",
                                      "cell's own first fixed N within: device s", f"fixed device s ({s.fixed_warmup} + {n})",
                                      "fixed interval", "reference img/s (its interval)",
                                      "until img/s: reference inside its interval"],
                       tablefmt="github", disable_numparse=True))  # fmt: skip
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

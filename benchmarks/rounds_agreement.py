"""A sweep's `--rounds` against long reference runs: does each cell's interval across rounds hold its reference (issue 48).

    .venv/bin/python benchmarks/rounds_agreement.py --json rounds.json --keep runs/
        50 min on the idle 2-core VM: `effbench sweep` of resnet18, b0 x batch 8, 16, 32 at 32 px with --until ci:2%
        (cap 600 steps) in 3 rounds, then one long `effbench run` per configuration (5 + 1,200 steps), then the check
    .venv/bin/python benchmarks/rounds_agreement.py --sweep results/rounds --reference runs/long/*
        a finished `effbench sweep --rounds K` and one long `effbench run` per configuration, read, nothing run
    .venv/bin/python benchmarks/rounds_agreement.py --tiny     # 30 s: the same at a tiny size (CI)

Per configuration of the sweep (its swept values but the round), matched to the reference run of the same
arch, batch size and image size:
- **across rounds**: the mean of its rounds' img/s (each run's results.json `throughput_img_s`) and the 95%
  Student's t interval across them, recomputed here with a t table, apart from effbench's stats, and checked
  against the sweep's summary.json `rounds` (the script fails when they differ);
- **each round's own interval**: the run's `until` interval (`--until`), else the one its windows give;
- **reference**: the long run's `throughput_img_s`, made at another time. It agrees when it lies inside the
  interval.

The ratio row is the share of configurations whose reference lies inside their across-rounds interval, against
the 95% an interval promises; the run's own intervals' share is printed beside it. Device time is each run's
warm-up plus measured time, summed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, print_table  # noqa: E402

# Student's t 0.975 quantiles by degrees of freedom (any t table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086}  # fmt: skip
GOAL = 0.95  # a 95% interval's promise


@dataclass(frozen=True)
class Sizes:
    archs: tuple[str, ...]
    batch_sizes: tuple[str, ...]
    image_size: str
    log_interval: str
    until: str
    cap_steps: str
    """--max-steps of each round's run, its warm-up included."""
    rounds: str
    long_warmup: str
    long_steps: str
    """--max-steps of the reference run: its warm-up and the measured steps."""


REAL = Sizes(("resnet18", "b0"), ("8", "16", "32"), "32", "10", "ci:2%", "600", "3", "5", "1205")
TINY = Sizes(("resnet18",), ("2", "4"), "16", "1", "ci:50%", "34", "3", "1", "31")
MATCH = ("arch", "batch_size", "image_size")


def fail(option: str, message: str) -> NoReturn:
    """A bad input: one line naming the option, exit 2."""
    print(f"error: {option}: {message}", file=sys.stderr)
    sys.exit(2)


def read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def run_figures(run_dir: Path) -> dict[str, Any]:
    """What this check reads of one run: its config, headline, own interval and device time."""
    r = read(run_dir / "results.json")
    until = r.get("until") or {}
    own = (until.get("ci_low_img_s"), until.get("ci_high_img_s"))
    if own[0] is None:  # no --until: its windows' interval
        summ = ((r.get("throughput_windows") or {}).get("summary") or {}).get("throughput_img_s") or {}
        own = (summ.get("ci_low"), summ.get("ci_high"))
    return {
        "config": r["config"],
        "throughput_img_s": r["throughput_img_s"],
        "own_interval": own,
        "device_s": (r.get("warmup") or {}).get("time_s", 0.0) + (r.get("measured") or {}).get("time_s", 0.0),
        "until_reached": until.get("reached"),
        # the run's own verdict: `cpu-underused` says the machine gave it fewer cores than it asked for
        "bottleneck": (r.get("verdict") or {}).get("bottleneck"),
    }


def t_interval(xs: list[float]) -> tuple[float, float | None, float | None]:
    n = len(xs)
    m = sum(xs) / n
    if n < 3:  # effbench gives none below 3 (the t quantile at df 1 is 12.7)
        return m, None, None
    h = T975[n - 1] * math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) / math.sqrt(n)
    return m, max(m - h, 0.0), m + h


def key(config: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(config.get(k) for k in MATCH)


def agreement(sweep: Path, references: list[Path]) -> tuple[list[Row], list[list[str]], dict[str, Any]]:
    if not (sweep / "sweep.json").is_file() or not (sweep / "summary.json").is_file():
        fail(
            "--sweep",
            f"{sweep} holds no sweep.json and summary.json; pass a finished `effbench sweep --rounds K` folder",
        )
    for ref in references:
        if not (ref / "results.json").is_file():
            fail("--reference", f"{ref} holds no results.json; pass run folders of `effbench run`")
    manifest = read(sweep / "sweep.json")
    pooled = read(sweep / "summary.json")["rounds"]
    if not pooled:
        fail("--sweep", f"{sweep} ran one round; pass a sweep run with --rounds 3 or more")
    refs = {key(f["config"]): f for f in (run_figures(p) for p in references)}
    configs: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for c in manifest["cells"]:
        if c["status"] == "ok":
            params = {k: v for k, v in c["params"].items() if k != "round"}
            configs.setdefault(json.dumps(params, sort_keys=True), []).append(
                (c["params"]["round"], run_figures(sweep / c["run_dir"]))
            )
    table, inside, own_inside, own_total, device_s, out = [], 0, 0, 0, 0.0, {}
    for params_text, runs in configs.items():
        runs.sort(key=lambda x: x[0])
        xs = [f["throughput_img_s"] for _, f in runs]
        m, lo, hi = t_interval(xs)
        theirs = next(p for p in pooled if json.dumps(p["params"], sort_keys=True) == params_text)
        ci = theirs["throughput_mean_ci95_img_s"]
        if (
            not math.isclose(theirs["throughput_mean_img_s"], m, rel_tol=1e-9)
            or (lo is None) != (ci is None)
            or (
                ci is not None and not (math.isclose(ci[0], lo, rel_tol=1e-3) and math.isclose(ci[1], hi, rel_tol=1e-3))
            )
        ):
            raise SystemExit(
                f"error: {sweep}/summary.json's rounds for {params_text}: {theirs} differ from {m}, {lo}, {hi}"
            )
        ref = refs.get(key(runs[0][1]["config"]))
        if ref is None:
            wanted = dict(zip(MATCH, key(runs[0][1]["config"]), strict=True))
            fail("--reference", f"no run of {wanted} among them; add one per configuration of the sweep")
        r = ref["throughput_img_s"]
        ok = lo is not None and lo <= r <= hi
        inside += ok
        held = [f["own_interval"][0] is not None and f["own_interval"][0] <= r <= f["own_interval"][1] for _, f in runs]
        own_inside += sum(held)
        own_total += len(held)
        device_s += sum(f["device_s"] for _, f in runs)
        label = " ".join(f"{k}={v}" for k, v in json.loads(params_text).items()) or "all"
        table.append([
            label, ", ".join(f"{x:,.1f}" for x in xs),
            "-" if lo is None else f"{m:,.1f} [{lo:,.1f}, {hi:,.1f}] (±{100 * (hi - lo) / 2 / m:.1f}%)",
            f"{r:,.1f} ({ref['bottleneck'] or '-'})", "yes" if ok else "no", f"{sum(held)} of {len(held)}",
        ])  # fmt: skip
        out[label] = {"rounds_img_s": xs, "mean_img_s": m, "ci95_img_s": [lo, hi], "reference_img_s": r,
                      "reference_bottleneck": ref["bottleneck"], "reference_inside": ok,
                      "own_intervals_holding_reference": sum(held)}  # fmt: skip
    n = len(configs)
    ref_s = sum(f["device_s"] for f in refs.values())
    rows = [
        Row("configurations whose reference is inside the across-rounds interval", f"{inside} of {n}",
            f"one run's own: {own_inside} of {own_total}", inside / n, GOAL,
            f"rounds: {device_s:.1f} device s; references: {ref_s:.1f} device s"),
    ]  # fmt: skip
    summary = {"sweep": str(sweep), "configurations": out, "inside": inside, "of": n, "own_inside": own_inside,
               "own_of": own_total, "rounds_device_s": device_s, "references_device_s": ref_s}  # fmt: skip
    return rows, table, summary


def effbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "effbench", *args], check=True, stdout=subprocess.DEVNULL)


def make(out: Path, z: Sizes) -> tuple[Path, list[Path]]:
    """The sweep in rounds, then one long run of each configuration as its reference (each its own process)."""
    common = ["--image-size", z.image_size, "--dataset", "synthetic", "--weights", "none", "--epochs", "1",
              "--max-val-steps", "1", "--no-profile", "--device", "cpu", "--log-interval", z.log_interval, "--quiet"]  # fmt: skip
    effbench("sweep", "--arch", ",".join(z.archs), "--batch-size", ",".join(z.batch_sizes), *common, "--until", z.until,
             "--max-steps", z.cap_steps, "--rounds", z.rounds, "--output", str(out), "--name", "rounds")  # fmt: skip
    for arch in z.archs:
        for batch in z.batch_sizes:
            effbench("run", "--arch", arch, "--batch-size", batch, *common, "--warmup-steps", z.long_warmup,
                     "--max-steps", z.long_steps, "--output", str(out / "long"))  # fmt: skip
    return out / "rounds", sorted(p for p in (out / "long").iterdir() if p.is_dir())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="30 s (CI): a tiny sweep and its references, then the check")
    p.add_argument("--sweep", type=Path, default=None, help="a finished `effbench sweep --rounds K` folder")
    p.add_argument("--reference", type=Path, nargs="+", default=[], help="run folders, one per configuration")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--keep", type=Path, default=None, help="make the runs here (default: a temporary folder)")
    a = p.parse_args()
    if (a.sweep is None) != (not a.reference):
        fail("--sweep", "pass a rounds sweep folder with --reference run folders, one per configuration, or neither")
    from tabulate import tabulate

    with tempfile.TemporaryDirectory(prefix="effbench-rounds-") as tmp:
        if a.sweep is not None:
            sweep, refs = a.sweep, a.reference
        else:
            sweep, refs = make(a.keep or Path(tmp), TINY if a.tiny else REAL)
        rows, table, summary = agreement(sweep, refs)
    print_table(rows, "sweep --rounds: across-rounds intervals against long reference runs")
    print()
    print(tabulate(table, headers=["configuration", "img/s by round", "across rounds [95% CI]", "reference img/s (its verdict)",
                                   "reference inside", "rounds' own intervals holding it"],
                   tablefmt="github", disable_numparse=True))  # fmt: skip
    if a.json is not None:
        a.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

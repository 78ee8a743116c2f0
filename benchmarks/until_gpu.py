"""Issue 48's GPU check: `--warmup-steps auto` and `--until ci:1%` against today's fixed-length run.

    python3 benchmarks/until_gpu.py                    # one CUDA GPU: b0 at 224 px, bf16, batch 128 (~4 min, H200)
    .venv/bin/python benchmarks/until_gpu.py --tiny    # the CPU, resnet18 at 16 px: the script works (CI)

Two runs of `python -m effbench run`, each in a process of its own, back to back, synthetic data, random weights, channels_last:
- **until**: `--until ci:1%` with the default `--warmup-steps auto`, up to 3 epochs (390 steps each at batch 128);
- **fixed**: `--warmup-steps 5 --max-steps 205`, one epoch: the fixed warm-up every run had before auto.

Printed: each run's wall time (results.json `wall_time_s`, the model's build and validation included) and
device time (warm-up + measured steps), its warm-up, figure and interval; and whether auto's warm-up ended after
the slow start. A step is slow when it took more than SLOW x the median measured step of the until run (cuDNN
autotuning, lazy module loading, the allocator's growth: on the H200 b0's first 15 steps took 27.7 s, a measured
step 0.07 s). auto ended after the slow start when the last slow step of the until run's first half lies inside its
warm-up (steps.csv); the fixed run's slow measured steps are counted beside it. The goal row: 1.0 for "yes".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, print_table, quiet_torch_warnings  # noqa: E402

SLOW = 3.0
"""A step over this many times the until run's median measured step is part of a slow start."""
REAL = dict(arch="b0", image_size=224, batch_size=128, precision="bf16", channels_last=True, device="cuda",
            until="ci:1%", until_epochs=3, fixed_warmup=5, fixed_steps=200, log_interval=10)  # fmt: skip
TINY = dict(arch="resnet18", image_size=16, batch_size=2, precision="fp32", channels_last=False, device="cpu",
            until="ci:50%", until_epochs=1, until_max_steps=40, fixed_warmup=1, fixed_steps=10, log_interval=1)  # fmt: skip


def one_run(kw: dict[str, Any], out: Path) -> dict[str, Any]:
    """One `python -m effbench run` in a process of its own, so neither run inherits the other's cuDNN autotuning
    or warm allocator; what this check reads from its folder."""
    from effbench.analysis import windows
    from effbench.results import load_record

    argv = [sys.executable, "-m", "effbench", "run", "--quiet", "--no-profile", "--output", str(out)]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is not None:
            argv += [flag, str(v)]
    before = set(out.glob("*/")) if out.exists() else set()
    done = subprocess.run(argv, capture_output=True, text=True)
    made = sorted(set(out.glob("*/")) - before)
    assert done.returncode == 0 and len(made) == 1, (done.returncode, done.stderr[-2000:])
    r = load_record(made[0])
    assert r.status == "ok" and r.measured is not None and r.warmup is not None, (r.status, r.error)
    steps = windows.read_steps(made[0])
    return {
        "argv": argv[1:],
        "run_dir": str(made[0]),
        "wall_s": r.wall_time_s,
        "device_s": r.warmup.time_s + r.measured.time_s,
        "warmup_steps": r.warmup.steps,
        "warmup_s": r.warmup.time_s,
        "measured_steps": r.measured.steps,
        "throughput_img_s": r.measured.throughput_img_s,
        "warmup_rule": r.warmup_rule.model_dump(exclude_none=True) if r.warmup_rule else None,
        "until": r.until.model_dump(exclude_none=True) if r.until else None,
        "step_times_s": [st.data_time_s + st.compute_time_s for st in steps],
        "warmup_flags": [st.warmup for st in steps],
    }


def slow_start(until: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """Where the until run's slow start ends and whether auto's warm-up covers it; the fixed run's slow
    measured steps, against the same threshold."""
    times, flags = until["step_times_s"], until["warmup_flags"]
    measured = [t for t, warm in zip(times, flags, strict=True) if not warm]
    threshold = SLOW * statistics.median(measured)
    first_half = times[: len(times) // 2]
    slow = [i for i, t in enumerate(first_half) if t > threshold]
    last = max(slow) + 1 if slow else 0  # steps counted from 1
    fixed_slow = sum(
        1 for t, w in zip(fixed["step_times_s"], fixed["warmup_flags"], strict=True) if not w and t > threshold
    )
    return {"threshold_s": threshold, "slow_steps": len(slow), "last_slow_step": last,
            "auto_warmup_steps": until["warmup_steps"], "covered": last <= until["warmup_steps"],
            "slow_steps_fixed_measured": fixed_slow}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="on the CPU, in seconds (CI)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temporary folder)")
    a = p.parse_args()
    quiet_torch_warnings()
    s = TINY if a.tiny else REAL
    import torch

    if s["device"] == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here; this check needs one GPU (or --tiny, on the CPU)", file=sys.stderr)
        sys.exit(2)
    common = dict(arch=s["arch"], image_size=s["image_size"], batch_size=s["batch_size"], precision=s["precision"],
                  channels_last=s["channels_last"] or None, device=s["device"], dataset="synthetic", weights="none",
                  freeze="none", optimizer="sgd", max_val_steps=1, log_interval=s["log_interval"])  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="effbench-until-gpu-") as tmp:
        out = a.keep or Path(tmp)
        until = one_run({**common, "until": s["until"], "epochs": s["until_epochs"],
                         "max_steps": s.get("until_max_steps")}, out)  # fmt: skip
        fixed = one_run({**common, "warmup_steps": s["fixed_warmup"], "epochs": 1,
                         "max_steps": s["fixed_warmup"] + s["fixed_steps"]}, out)  # fmt: skip
    start = slow_start(until, fixed)
    if a.json is not None:
        a.json.write_text(json.dumps({"sizes": s, "until": until, "fixed": fixed, "slow_start": start}, indent=1))
    u = until["until"] or {}
    rows = [
        Row("wall time, fixed / until", f"{until['wall_s']:.1f} s (until)", f"{fixed['wall_s']:.1f} s (fixed)",
            fixed["wall_s"] / until["wall_s"], 0.0, "a comparison: until measures to its interval, fixed to its count"),
        Row("auto's warm-up ends after the slow start", f"warm-up {start['auto_warmup_steps']} steps",
            f"last slow step {start['last_slow_step']} ({start['slow_steps']} over {start['threshold_s']:.3g} s)",
            1.0 if start["covered"] else 0.0, 1.0,
            f"the fixed run measured {start['slow_steps_fixed_measured']} slow step(s)"),
    ]  # fmt: skip
    print_table(rows, f"--until {s['until']} and auto warm-up against a fixed-length run ({s['arch']}, {s['device']})")
    from tabulate import tabulate

    def line(name: str, r: dict[str, Any], interval: str) -> list[str]:
        return [name, f"{r['warmup_steps']} ({r['warmup_s']:.1f} s)", str(r["measured_steps"]), f"{r['device_s']:.1f}",
                f"{r['wall_s']:.1f}", f"{r['throughput_img_s']:,.1f}", interval]  # fmt: skip

    hw = u.get("half_width_pct")
    print(tabulate([line("until", until, f"+-{hw:.2f}% ({'reached' if u.get('reached') else 'cap'}, r "
                                         f"{u.get('lag1_autocorrelation', float('nan')):+.2f})" if hw else "-"),
                    line("fixed", fixed, "-")],
                   headers=["run", "warm-up steps (s)", "measured steps", "device s", "wall s", "img/s",
                            "until interval"], tablefmt="github", disable_numparse=True))  # fmt: skip
    print(f"auto's rule: {(until['warmup_rule'] or {}).get('reason')}")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

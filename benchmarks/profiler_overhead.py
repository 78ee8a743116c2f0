"""What the profiling pass costs: its share of a run's wall time, and its per-step slowdown.

    .venv/bin/python benchmarks/profiler_overhead.py           # smoke preset at 60 steps, 3 A/B rounds
    .venv/bin/python benchmarks/profiler_overhead.py --tiny    # seconds: resnet18 at 16 px, batch 2, 3 steps, 1 profiled step, 1 round (CI)

Each round runs the same `effbench run` in this process twice, with --profile and with --no-profile.
Reported: the wall time of each (results.json `wall_time_s`: training + profiling pass), the pass's
share of the profiled run = 1 - wall(no profile) / wall(profile), and results.json's own
`profile.profiler_overhead` (profiled step vs timed step, only outside the timed steps' noise). Ratio = wall(no profile) / wall(profile);
goal >= 0.90 (the pass adds at most 10% to a run of this size; it is a fixed 2 + --profile-steps
steps, so its share shrinks as runs grow).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, alternate, fmt_rate, median_ratio, print_table, quiet_torch_warnings  # noqa: E402

GOAL = 0.90


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    a = p.parse_args()
    quiet_torch_warnings()
    from effbench.run import launch
    from effbench.config import RunConfig, smoke_overrides

    steps, rounds = (3, 1) if a.tiny else (60, 3)
    steps, rounds = a.steps or steps, a.rounds or rounds
    base = {**smoke_overrides(), "max_steps": steps, "log_interval": 10_000}
    if a.tiny:
        base.update(arch="resnet18", image_size=16, batch_size=2, warmup_steps=1, profile_steps=1)
    per_step: list[float] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:

        def wall(profile: bool) -> float:
            out = launch.run(RunConfig(**base, profile=profile, output=Path(tmp)), command=["profiler_overhead.py"],
                             echo=lambda _s: None, progress=False)  # fmt: skip
            r = out.results
            assert r.status == "ok" and r.wall_time_s is not None, r.error
            prof = r.profile
            if profile and prof is not None and prof.profiler_overhead is not None:
                per_step.append(prof.profiler_overhead)
            elif profile and prof is not None and prof.profiler_overhead_note:
                notes.append(prof.profiler_overhead_note)  # within noise: no figure, never a negative one
            return float(r.wall_time_s)

        without, with_ = alternate(lambda: wall(False), lambda: wall(True), rounds=rounds)
    ratio = median_ratio(without, with_)
    step_note = (
        f"profiled step +{100 * statistics.median(per_step):.0f}% vs timed step"
        if per_step
        else f"per-step cost: {notes[0]}"
        if notes
        else "no per-step figure"
    )
    row = Row("profiling pass (wall s)", fmt_rate(without, "s without"), fmt_rate(with_, "s with"), ratio, GOAL,
              f"pass = {100 * (1 - ratio):.0f}% of the run; {step_note}; {base['arch']}, {steps} steps; median of {rounds} round(s)")  # fmt: skip
    print_table([row], "--no-profile vs --profile, same run")


if __name__ == "__main__":
    main()

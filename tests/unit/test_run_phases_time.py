"""Where a run's own wall time goes: run/phases.py Phase's clock, results.json wall_time_by_phase_s, the report row.

The first GPU run (H200) took 78 s of wall time for 2.8 s of measured steps and 27.7 s of warm-up; nothing in its
record said where the other ~47 s went."""

from __future__ import annotations

import json
import time

from clitools import invoke, only_run

from effbench.run.phases import PHASES, Phase

TINY = ["--dataset", "synthetic", "--device", "cpu", "--weights", "none", "--batch-size", "4", "--max-steps", "3",
        "--warmup-steps", "1", "--max-val-steps", "1", "--epochs", "2", "--no-profile"]  # fmt: skip


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_each_phase_gets_the_wall_time_until_the_next_summed_over_visits_in_run_order():
    clock = _Clock()
    phase = Phase([], now=clock)
    for name, seconds in [("dataset", 1.0), ("model", 2.0), ("warm-up", 4.0), ("epochs", 8.0), ("validation", 16.0),
                          ("epochs", 32.0), ("validation", 64.0), ("report", 128.0)]:  # fmt: skip
        clock.t += seconds  # the time spent in the phase before this one
        phase.enter(name)
    clock.t += 1000.0  # the report phase, unfinished, is not counted
    got = phase.seconds_before_current()
    assert got == {"setup": 1.0, "dataset": 2.0, "model": 4.0, "warm-up": 8.0, "epochs": 16.0 + 64.0,
                   "validation": 32.0 + 128.0}  # fmt: skip
    assert list(got) == [p for p in PHASES if p in got]


def test_a_run_records_its_wall_time_by_phase_and_it_holds_the_timed_steps(tmp_path, capsys):
    t0 = time.perf_counter()
    code, out, err = invoke(["run", "--arch", "resnet18", "--image-size", "16", *TINY, "--output", tmp_path], capsys)
    outside = time.perf_counter() - t0
    assert code == 0, err
    record = json.loads((only_run(tmp_path) / "results.json").read_text())
    by_phase = record["wall_time_by_phase_s"]
    assert list(by_phase)[:3] == ["setup", "dataset", "model"] and "report" not in by_phase
    assert abs(sum(by_phase.values()) - record["wall_time_s"]) < 1e-9
    assert record["wall_time_s"] <= outside  # the CLI's own clock around the whole command
    # the step timers run inside the warm-up and epochs phases: those phases hold at least the steps' time
    steps = sum(e["data_time_s"] + e["compute_time_s"] for e in record["epochs"])
    assert by_phase["warm-up"] + by_phase["epochs"] >= steps
    assert by_phase["validation"] >= sum(e["val_time_s"] for e in record["epochs"])
    assert "wall time by phase (s)" in out and f"{record['wall_time_s']:.1f} in all" in out

"""A bf16 `effbench run` on the CPU: its roofline against torch.profiler's own events in the run's trace, read here
with no effbench code (issue 45 N4: autocast's casts were charged to the convolutions, and their bytes read at fp32;
measured from outside, MEASURED.md 2026-11-28: the casts held 4.4-6.7% of the step, "copies and casts" 1.75-2.1%)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from clitools import invoke, only_run

AUTOCAST_WRAPS = ("aten::conv2d", "aten::linear")
"""The ops of resnet18's step autocast casts the inputs of (to bf16): it records the op, then its casts inside it."""
CONV_HEADS = ("aten::conv2d", "aten::convolution_backward")
EPS_US = 1e-3  # the trace writes times in us with 3 decimals


def trace_figures(trace: Path) -> dict[str, float]:
    """Per profiled step, from the Chrome trace's `cpu_op` events on the step's thread: the time in the casts autocast
    launched inside a convolution or linear (the outermost aten::to under it), and the convolutions' own time (the
    outermost convolution ops less those casts); `steps`: the trace's `step` ranges. "Outermost": under no other
    aten op (autograd's `autograd::engine::evaluate_function: ...` ranges are cpu_ops too, and no aten op)."""
    with gzip.open(trace, "rt", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "step"]
    tid = steps[0]["tid"]
    spans = [(s["ts"], s["ts"] + s["dur"]) for s in steps]
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])
    )
    out: dict[str, float] = defaultdict(float)
    stack: list[dict] = []  # the enclosing ops of the current one, outermost first
    for e in ops:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"] + e["dur"] - EPS_US:
            stack.pop()
        aten = [s["name"] for s in stack if s["name"].startswith("aten::")]  # autograd's ranges are cpu_ops too
        parent = aten[-1] if aten else None
        if any(a - EPS_US <= e["ts"] <= b + EPS_US for a, b in spans):
            if parent is None and e["name"] in CONV_HEADS:
                out["conv_us"] += e["dur"]
            if e["name"] == "aten::to" and parent in AUTOCAST_WRAPS and len(aten) == 1:
                out["casts_us"] += e["dur"]
                if parent in CONV_HEADS:
                    out["conv_us"] -= e["dur"]
        stack.append(e)
    return {
        "casts_s": out["casts_us"] / 1e6 / len(steps),
        "conv_s": out["conv_us"] / 1e6 / len(steps),
        "steps": len(steps),
    }


def test_a_bf16_resnet18_run_puts_autocasts_casts_in_copies_and_casts(tmp_path, capsys):
    code, _, err = invoke(["run", "--arch", "resnet18", "--dataset", "synthetic", "--image-size", "16", "--batch-size",
                           "4", "--epochs", "1", "--max-steps", "2", "--warmup-steps", "1", "--weights", "none",
                           "--precision", "bf16", "--device", "cpu", "--profile-steps", "1", "--quiet", "--output",
                           tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    record = json.loads((run / "results.json").read_text())
    r = record["roofline"]
    ref = trace_figures(run / record["profile"]["trace"])
    assert ref["steps"] == r["steps"] == 1 and ref["casts_s"] > 0
    kinds = {k["kind"]: k for k in r["kinds"]}
    copies, conv = kinds["copies and casts"], kinds["convolution"]
    # the casts are copies: "copies and casts" holds at least them (it also holds the backward's casts back to fp32)
    assert copies["time_s"] >= ref["casts_s"] * (1 - 1e-6)
    assert copies["share_of_step"] >= ref["casts_s"] / r["step_time_s"] * (1 - 1e-6)
    # ... and the convolutions hold their own time alone: the profiler's, less the casts inside them
    assert conv["time_s"] == pytest.approx(ref["conv_s"], rel=1e-4)

"""benchmarks/_common.py's ratio table: the figure shown never reads a different verdict from the `met` column."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_common():
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.mark.parametrize(
    ("ratio", "goal", "shown", "met"),
    [
        (0.5962, 0.6, "0.596", False),  # two decimals would show 0.60 beside "NO"
        (0.6954, 0.7, "0.695", False),
        (0.69996, 0.7, "0.69996", False),
        (0.6, 0.6, "0.60", True),
        (0.6049, 0.6, "0.60", True),
        (2.174, 1.5, "2.17", True),
        (1.1951, 1.2, "1.195", False),
    ],
)
def test_the_ratio_shown_reads_the_same_verdict_as_met(ratio, goal, shown, met):
    row = load_common().Row("b", "x", "y", ratio, goal)
    assert row.met is met and row.shown_ratio == shown
    assert (float(row.shown_ratio) >= goal) is met

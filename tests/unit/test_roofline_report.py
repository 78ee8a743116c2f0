"""The roofline in the reports (report/roofline_tables.py, the run and sweep pages, compare): pure, from records."""

from __future__ import annotations

from pathlib import Path

import pytest

from effbench import schema
from effbench.analysis import compare
from effbench.analysis import roofline as R
from effbench.report import plots, roofline_tables, tables


def kinds(dw_ms: float, conv_ms: float, outside_ms: float = 1.0) -> schema.Roofline:
    """A step of depthwise convs (memory-bound) and convs (compute-bound), 1 ms of data wait, `outside_ms` in no op."""
    dw = R.OpEvent("aten::conv2d", dw_ms / 1e3, shapes=((8, 32, 16, 16), (32, 1, 3, 3)), dtypes=("float", "float"),
                   args=(None, None, None, (1, 1), (1, 1), (1, 1), 32), flops=2 * 8 * 32 * 16 * 16 * 9)  # fmt: skip
    conv = R.OpEvent("aten::conv2d", conv_ms / 1e3, shapes=((8, 32, 16, 16), (64, 32, 3, 3)), dtypes=("float", "float"),
                     args=(None, None, None, (1, 1), (1, 1), (1, 1), 1), flops=2 * 8 * 64 * 16 * 16 * 32 * 9)  # fmt: skip
    step_s = (dw_ms + conv_ms + 1.0 + outside_ms) / 1e3
    return R.roofline([dw, conv], steps=1, step_time_s=step_s, data_wait_s=1e-3, time_basis="test basis",
                      compute_roof_tflops=0.05, memory_roof_gb_s=10.0, compute_roof_precision="fp32")  # fmt: skip


ROOFS = schema.Roofs(
    device="cpu (test)", threads=2, memory_gb_s=10.0, measured_at="2026-11-27T00:00:00+00:00", cached=True,
    compute=[schema.ComputeRoof(precision="fp32", tflops=0.05, how="torch.mm")],
)  # fmt: skip


def record(r: schema.Roofline | None) -> schema.Results:
    return schema.Results(schema_version=1, status="ok", roofline=r, roofs=ROOFS)


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_every_report_has_the_table_its_remainder_the_verdict_and_the_ceiling(fmt):
    r = kinds(dw_ms=6.0, conv_ms=2.0)
    text = tables.render(record(r), fmt)
    assert roofline_tables.TITLE in text
    for label in (R.DEPTHWISE, R.CONV, R.DATA_WAIT, R.OUTSIDE_OPS, "profiled step"):
        assert label in text
    assert "GFLOP/s" in text  # a CPU's roof: GFLOP/s, not 0.00 TFLOP/s
    assert f"Roofline: {r.verdict}" in text and r.verdict and r.verdict.startswith(R.DEPTHWISE)
    flat = " ".join(text.split())  # report.txt wraps its sentences at 100 columns
    assert "this step could be at most" in flat and "cached, measured 2026-11-27" in flat
    rows = {row[0]: row for row in roofline_tables.rows(r)}
    assert rows[R.OUTSIDE_OPS][1] == "1.00" and rows["profiled step"][2] == "100%"


def test_a_run_without_a_roofline_prints_no_table():
    assert roofline_tables.TITLE not in tables.render(record(None), "text")


def test_the_sweep_table_has_a_column_per_cell_and_names_the_kinds_that_moved():
    a, b = kinds(dw_ms=6.0, conv_ms=2.0), kinds(dw_ms=2.0, conv_ms=2.1)
    headers, body = roofline_tables.sweep_table(["channels-last=off", "channels-last=on"], [a, b, None][:2])
    assert headers == ["kind", "channels-last=off", "channels-last=on"]
    by_kind = {row[0]: row for row in body}
    assert by_kind[R.DEPTHWISE][1].startswith("6.00 ms") and by_kind[R.DEPTHWISE][2].startswith("2.00 ms")
    assert by_kind["at most x faster"][1].endswith("x")
    moved = roofline_tables.moved_line(["off", "on"], [a, b])
    assert moved is not None and moved.index(R.DEPTHWISE) < moved.index(R.CONV)
    assert "2.00 ms (on) .. 6.00 ms (off)" in moved
    assert roofline_tables.sweep_table(["x"], [None]) == ([], [])


def test_the_sweep_report_holds_the_kind_by_cell_table():
    from effbench.report import sweep_tables

    rows = [
        sweep_tables.CellRow(key=f"00{i}_channels-last-{v}", params={"channels_last": on}, status="ok",
                             record=record(kinds(dw_ms=dw, conv_ms=2.0)))
        for i, (v, on, dw) in enumerate((("off", False, 6.0), ("on", True, 2.0)))
    ]  # fmt: skip
    text = sweep_tables.render(rows, {"channels_last": [False, True]}, title="t", fmt="text")
    assert roofline_tables.SWEEP_TITLE in text and "channels-last=off" in text and "channels-last=on" in text
    assert f"kinds whose time moved most across the cells: {R.DEPTHWISE}" in text


def test_compare_gives_b_minus_a_per_kind():
    a, b = kinds(dw_ms=6.0, conv_ms=2.0), kinds(dw_ms=3.0, conv_ms=2.0)
    deltas = R.kind_deltas(a, b)
    rows = {row[0]: row for row in compare.kind_rows(deltas)}
    assert rows[R.DEPTHWISE][1:5] == ["6.00", "3.00", "-3.00", "-50%"]
    assert rows["profiled step"][3] == "-3.00"
    assert R.kind_deltas(a, None) == [] and compare.render_kinds([]) == ""
    assert "no interval" in compare.render_kinds(deltas)


def test_the_roofline_chart_is_drawn(tmp_path: Path):
    pytest.importorskip("matplotlib")
    r = kinds(dw_ms=6.0, conv_ms=2.0)
    points = roofline_tables.chart_points(r)
    assert {p[0] for p in points} == {R.DEPTHWISE, R.CONV}
    path = plots.roofline(points, tmp_path / "roofline.png", compute_flop_s=5e10, memory_byte_s=1e10, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""Pure: results.json's roofline and roofs (analysis/roofline.py, measure/roofs.py) -> the report's table and lines,
and the sweep's kind-by-cell table (compare's B - A per kind is analysis/compare.py's). No torch.

    TITLE, HEADERS, rows(r)           the run's table: "where the step's time goes, against this machine's roofs"
    notes(record)                     the roofs, the verdict, the ceiling, the ops not modelled, how to read it
    verdict_lines(record)             the verdict and the ceiling alone (the page's top)
    block(record, fmt)                all of it as text or markdown, for report.txt / report.md / the terminal
    sweep_table(labels, roofs)        one row per kind, a column per cell: ms per step and the share of its roof
    moved_line(labels, roofs)         the kinds whose time moved most across the cells
    chart_points(r)                   the roofline chart's points (report/plots.py roofline)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tabulate import tabulate

from effbench.analysis import roofline as R
from effbench.fmt import decimals, fit_columns, num

if TYPE_CHECKING:
    from effbench import schema

TITLE = "Where the step's time goes, against this machine's roofs"
SWEEP_TITLE = "Where the step's time goes, kind by kind (ms per step, % of the kind's roof)"
SWEEP_NOTE = (
    "Per kind: each cell's profiling pass (a few steps under the profiler), one figure per cell and no interval, "
    "so a small difference may be noise; the percentage is the kind's fraction of its roof at its intensity "
    "(docs/roofline.md)."
)
HEADERS = ("kind", "ms / step", "share of step", "GFLOP / step", "min MB / step", "FLOP / byte", "achieved",
           "GB/s", "bound", "% of roof", "ms at roof")  # fmt: skip
READING = (
    "Time per kind: {basis}. FLOPs: the validated counter's (convolutions, matmuls); the other kinds count none, "
    "so their roof is memory. Bytes are the minimum traffic (each input read once, each output written once, "
    "from the recorded shapes and dtypes): an op that re-reads its input moves more, and a figure above 100% of "
    "the memory roof means its data stayed in cache. 'outside ops' is the step's time in no op (Python, autograd, "
    "the profiler's ranges; on CUDA, time no kernel ran), reported rather than spread over the kinds."
)
TIMED = (
    "Shares, the remainder, the verdict and the ceiling are of the timed step, measured outside the profiler, which "
    "slows the profiled one (its row) but not the kernels."
)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:,.{decimals([1e3 * seconds], least=2, most=4)}f}"


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if abs(x) < 0.1 else f"{100 * x:,.0f}%"


def _rate_unit(r: schema.Roofline) -> tuple[str, float]:
    """The achieved-FLOP/s column's unit: TFLOP/s where the roof is that high (a GPU), else GFLOP/s."""
    top = max([r.compute_roof_tflops or 0.0] + [k.achieved_tflops or 0.0 for k in r.kinds])
    return ("TFLOP/s", 1.0) if top >= 1.0 else ("GFLOP/s", 1e3)


def headers(r: schema.Roofline) -> tuple[str, ...]:
    unit, _ = _rate_unit(r)
    return tuple(unit if h == "achieved" else h for h in HEADERS)


def rows(r: schema.Roofline) -> list[list[str]]:
    """One row per kind (by time), then the data wait, the time outside ops, and the profiled step."""
    _, scale = _rate_unit(r)
    out = []
    for k in r.kinds:
        flops = k.flops or 0.0
        out.append([
            k.kind, _ms(k.time_s), _pct(k.share_of_step), num(flops / 1e9, 3) if flops else "-",
            num(k.min_bytes / 1e6, 2) if k.min_bytes is not None else "-",
            num(k.intensity_flop_per_byte, 2) if k.intensity_flop_per_byte is not None else "-",
            num(k.achieved_tflops * scale, 2) if k.achieved_tflops else "-",
            num(k.achieved_gb_s, 2) if k.achieved_gb_s is not None else "-",
            k.bound or "-", _pct(k.roof_fraction), _ms(k.roof_time_s),
        ])  # fmt: skip
    step = r.step_time_s or 0.0
    blank = ["-"] * (len(HEADERS) - 3)
    for label, t in ((R.DATA_WAIT, r.data_wait_s), (R.OUTSIDE_OPS, r.unattributed_s)):
        out.append([label, _ms(t), _pct(t / step) if t is not None and step else "-", *blank])
    out.append([R.step_label(r), _ms(r.step_time_s), _pct(1.0 if step else None), *blank])
    if r.profiled_step_time_s is not None:  # the pass's own step, against the timed one: the profiler's cost
        out.append(["profiled step", _ms(r.profiled_step_time_s), _pct(r.profiled_step_time_s / step if step else None),
                    *blank])  # fmt: skip
    return out


def roofs_line(roofs: schema.Roofs | None, r: schema.Roofline | None = None) -> str | None:
    """ "roofs (measured, cached 2026-11-27T00:31Z): compute 45.3 GFLOP/s fp32 ..., memory 8.4 GB/s ...; ridge ..."."""
    if roofs is None:
        return None
    parts = []
    for c in roofs.compute:
        if c.tflops is None:
            continue
        unit, scale = ("TFLOP/s", 1.0) if c.tflops >= 1 else ("GFLOP/s", 1e3)
        sheet = f" (datasheet {c.datasheet_tflops:,.1f} TFLOP/s)" if c.datasheet_tflops else ""
        parts.append(f"{c.precision} matmul {c.tflops * scale:,.1f} {unit}{sheet}")
    if roofs.memory_gb_s is not None:
        sheet = f" (datasheet {roofs.memory_datasheet_gb_s:,.0f} GB/s)" if roofs.memory_datasheet_gb_s else ""
        parts.append(f"memory {roofs.memory_gb_s:,.1f} GB/s{sheet}")
    when = "cached, measured " if roofs.cached else "measured "
    ridge = ""
    if r is not None and r.ridge_flop_per_byte is not None:
        ridge = f"; ridge point {r.ridge_flop_per_byte:,.1f} FLOP/byte ({r.compute_roof_precision})"
    threads = (
        f", {roofs.threads} thread(s)"
        if roofs.threads is not None and not str(roofs.device).startswith("NVIDIA")
        else ""
    )
    return f"roofs of {roofs.device}{threads} ({when}{roofs.measured_at}): {', '.join(parts)}{ridge}"


def roofs_source_line(roofs: schema.Roofs | None) -> str | None:
    """Where the roofs came from and under which load: "roofs cached: measured 2.0 h before this run, idle (...)",
    or "roofs measured now, loaded (...); not from the cache: <why>; not cached: <why>". None for a record
    written before the roofs said it."""
    if roofs is None or (roofs.conditions is None and roofs.why_measured is None and roofs.cache_age_s is None):
        return None
    c = roofs.conditions
    load = f", {c.load_class} ({c.detail})" if c is not None and c.load_class else ", under a load not recorded"
    if roofs.cached:
        age = roofs.cache_age_s
        when = f"{age / 60:.0f} min" if age is not None and age < 3600 else f"{(age or 0) / 3600:.1f} h"
        return f"roofs cached: measured {when} before this run{load}" if age is not None else f"roofs cached{load}"
    parts = [f"roofs measured now{load}"]
    if roofs.why_measured:
        parts.append(f"not from the cache: {roofs.why_measured}")
    if roofs.cache_note:
        parts.append(roofs.cache_note)
    return "; ".join(parts)


def verdict_lines(record: schema.Results) -> list[str]:
    """The roofline's verdict and ceiling, for the page's top: [] without them."""
    r = record.roofline
    if r is None:
        return []
    out = [f"Roofline: {r.verdict}"] if r.verdict else []
    ceiling = R.ceiling_line(r)
    if ceiling:
        out.append(ceiling[0].upper() + ceiling[1:])
    return out


def notes(record: schema.Results) -> list[str]:
    """The lines under the table: the roofs, the verdict, the ceiling, the remainder, how to read it."""
    r = record.roofline
    out = []
    line = roofs_line(record.roofs, r)
    if line:
        out.append(line)
        source = roofs_source_line(record.roofs)
        if source:
            out.append(source)
    elif record.roofs_error:
        out.append(f"roofs not measured ({record.roofs_error}): times, FLOPs and bytes without a bound")
    if r is None:
        return out
    out += verdict_lines(record)
    unmodelled = R.unmodelled_line(r)
    if unmodelled:
        out.append(unmodelled[0].upper() + unmodelled[1:])
    out.append(READING.format(basis=r.time_basis or "-"))
    if r.profiled_step_time_s is not None:
        out.append(TIMED)
    return out


def block(record: schema.Results, fmt: str = "text", width: int | None = None) -> str:
    """The table and its notes; "" when the run has no roofline (no profiling pass). Text with a `width`: the
    table fitted to it (fmt.fit_columns); the caller wraps the notes."""
    r = record.roofline
    if r is None or not r.kinds:
        return ""
    if fmt != "md" and width is not None:
        table = fit_columns(headers(r), rows(r), width)
    else:
        table = tabulate(rows(r), headers=headers(r), tablefmt="github" if fmt == "md" else "simple",
                         disable_numparse=True)  # fmt: skip
    lines = notes(record)
    if fmt == "md":
        return "\n\n".join([f"## {TITLE}", table, *lines])
    return "\n".join([TITLE, table, "", *lines])


# --------------------------------------------------------------------------------------------------
# Sweeps and compare
# --------------------------------------------------------------------------------------------------
def sweep_table(labels: Sequence[str], roofs: Sequence[schema.Roofline | None]) -> tuple[list[str], list[list[str]]]:
    """One row per kind, one column per cell ("12.3 ms, 41%": time per step and the fraction of its roof), then
    the ceiling's speedup; None (a cell without a roofline) is "-". Empty when no cell has one."""
    if not any(r is not None for r in roofs):
        return [], []
    body = []
    for kind in R.kinds_in(roofs):
        cells = []
        for r in roofs:
            k = R.row_of(r, kind)
            if k is None:
                cells.append("-")
                continue
            roof = f", {_pct(k.roof_fraction)}" if k.roof_fraction is not None else ""
            cells.append(f"{_ms(k.time_s)} ms{roof}")
        body.append([kind, *cells])
    body.append([R.OUTSIDE_OPS, *(f"{_ms(r.unattributed_s)} ms" if r is not None else "-" for r in roofs)])
    label = next((R.step_label(r) for r in roofs if r is not None), "profiled step")
    body.append([label, *(f"{_ms(r.step_time_s)} ms" if r is not None else "-" for r in roofs)])
    body.append([
        "at most x faster",
        *(f"{r.ceiling_speedup:,.1f}x" if r is not None and r.ceiling_speedup is not None else "-" for r in roofs),
    ])  # fmt: skip
    return ["kind", *labels], body


def moved_line(labels: Sequence[str], roofs: Sequence[schema.Roofline | None], top: int = 3) -> str | None:
    """The kinds whose time per step moved most across the cells: "kinds that moved most: depthwise/grouped conv
    12.1 ms (channels-last=on) .. 30.5 ms (channels-last=off), ..."; None with fewer than two cells to compare."""
    present = [(label, r) for label, r in zip(labels, roofs, strict=True) if r is not None]
    if len(present) < 2:
        return None
    spans = []
    for kind in R.kinds_in([r for _, r in present]):
        times = [(k.time_s or 0.0, label) for label, r in present if (k := R.row_of(r, kind)) is not None]
        if len(times) >= 2:
            lo, hi = min(times), max(times)
            spans.append((hi[0] - lo[0], kind, lo, hi))
    spans.sort(reverse=True)
    parts = [
        f"{kind} {_ms(lo[0])} ms ({lo[1]}) .. {_ms(hi[0])} ms ({hi[1]})" for d, kind, lo, hi in spans[:top] if d > 0
    ]
    return "kinds whose time moved most across the cells: " + "; ".join(parts) if parts else None


def chart_points(r: schema.Roofline) -> list[tuple[str, float, float, float]]:
    """(kind, intensity FLOP/byte, achieved FLOP/s, share of step) of each kind the chart can place: a kind
    with a roof and a non-zero rate. Zero-FLOP kinds sit on the memory side at their achieved bandwidth's
    equivalent: placed at intensity `MIN_INTENSITY` with y = achieved bytes/s x that intensity."""
    out = []
    for k in r.kinds:
        if k.bound is None or not k.time_s:
            continue
        intensity = k.intensity_flop_per_byte or 0.0
        if intensity > 0 and k.achieved_tflops:
            out.append((k.kind, intensity, k.achieved_tflops * 1e12, k.share_of_step or 0.0))
        elif k.achieved_gb_s:
            out.append((k.kind, MIN_INTENSITY, k.achieved_gb_s * 1e9 * MIN_INTENSITY, k.share_of_step or 0.0))
    return out


MIN_INTENSITY = 0.01
"""Where a kind with no counted FLOPs sits on the chart's log axis: its bandwidth times this intensity."""

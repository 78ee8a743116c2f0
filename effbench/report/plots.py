"""PNG charts of runs and sweeps. The one module that imports matplotlib, and only inside functions.

Each function takes plain data (numbers and labels already computed by sweep_report.py or
report.py), draws one figure with matplotlib's object API (`Figure` + the Agg canvas: no pyplot,
no global backend, no display needed) and writes `path`. Nothing here reads results files.

    stacked_time_bars   data loading vs training time per configuration or epoch (the seeds' charts)
    throughput_bars     throughput per configuration with its 95% CI
    top1_per_epoch      train and validation top-1 per epoch, one line per configuration (bars for one epoch)
    throughput_vs_batch throughput vs batch size per device, OOM cells marked
    data_time_vs_workers data-loading time per epoch (measured steps) vs DataLoader workers
    scaling             throughput and efficiency vs device count, with the ideal lines
    throughput_and_time_to_target  images/s and time to a --target-top1 vs batch size, side by side
    roofline            each kind of op at its intensity and achieved FLOP/s, sized by its share, under both roofs
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from effbench.fmt import printable
from effbench.report import bounds

DPI = 100
DATA_COLOR = "#e4572e"  # data loading: warm, the part to shrink
COMPUTE_COLOR = "#4c72b0"
WARMUP_COLOR = "#bbbbbb"  # warm-up: grey, outside every measured figure
OOM_COLOR = "#c00000"
TRAIN_COLOR = "#a6bddb"  # train top-1 beside validation's: the same hue, lighter


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Any, path: Path) -> Path:
    from effbench import results

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # results.output_file: a fresh temporary file (O_EXCL: never through a link planted under a fixed name),
    # renamed over a regular file only (a link there is refused, a device written through): no half a PNG
    with results.output_file(path) as f:
        fig.savefig(f, format="png")
    return path


MAX_WIDTH_IN = 40.0  # inches (4,000 px at DPI): a chart's width stops growing with its bars here


def _width(n: int, per_bar: float = 0.9) -> float:
    return min(max(6.0, per_bar * n + 2), MAX_WIDTH_IN)


def _capped_title(title: str, n: int) -> tuple[int, str]:
    """How many categories a bar chart draws (bounds.MAX_BARS at most) and its title, saying so when fewer than all."""
    shown, note = bounds.capped(n, unit="bars")
    return shown, f"{title} ({note})" if note else title


def _bar_width(n: int) -> float:
    return 0.7 if n > 1 else 0.4


def _label(text: str) -> str:
    """A name from disk (a cell, a host, a configuration) as chart text: control characters shown as
    fmt.printable shows them (the font has no glyph for ESC), `$` literal (matplotlib reads `$...$` as math)."""
    return re.sub(r"(?<!\\)\$", r"\\$", printable(text))  # idempotent: an escaped `$` stays one


def _labelled(series: Mapping[str, Any]) -> dict[str, Any]:
    return {_label(k): v for k, v in series.items()}


def _xticks(ax: Any, labels: Sequence[str]) -> None:
    """Category labels, slanted when they would run into each other."""
    labels = [_label(s) for s in labels]
    crowded = sum(len(s) for s in labels) > 60
    ax.set_xticks(
        range(len(labels)), labels, rotation=25 if crowded else 0, ha="right" if crowded else "center", fontsize=8
    )


def stacked_time_bars(
    labels: Sequence[str],
    data_s: Sequence[float],
    compute_s: Sequence[float],
    path: Path,
    *,
    title: str,
    ylabel: str = "seconds per epoch",
    warmup_s: Sequence[float] | None = None,
) -> Path:
    """Compute and data wait stacked per bar, "% data" of their sum over each; `warmup_s` (a run's epochs, a
    sweep's configurations): a warm-up segment on top, outside that share, as the headline excludes it. At most
    bounds.MAX_BARS bars (the first; the title says so): a caller with more bins them (a run's epochs)."""
    n, title = _capped_title(title, len(labels))
    labels, data_s, compute_s = labels[:n], data_s[:n], compute_s[:n]
    warmup_s = warmup_s[:n] if warmup_s is not None else None
    fig = _figure(_width(len(labels)), 4.5)
    ax = fig.add_subplot()
    x = list(range(len(labels)))
    w = _bar_width(len(labels))
    ax.bar(x, compute_s, w, label="training (compute)", color=COMPUTE_COLOR)
    ax.bar(x, data_s, w, bottom=compute_s, label="data loading (wait)", color=DATA_COLOR)
    warm = list(warmup_s) if warmup_s is not None else [0.0] * len(labels)
    if warmup_s is not None:
        below = [d + c for d, c in zip(data_s, compute_s, strict=True)]
        ax.bar(x, warm, w, bottom=below, label="warm-up (excluded)", color=WARMUP_COLOR)
    for xi, d, c, u in zip(x, data_s, compute_s, warm, strict=True):
        total = d + c
        if total > 0:
            ax.annotate(f"{100 * d / total:.0f}% data", (xi, total + u), ha="center", va="bottom", fontsize=8)
    _xticks(ax, labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.legend(loc="outside upper center", ncol=3 if warmup_s is not None else 2, fontsize=8, frameon=False)
    top = max((d + c + u for d, c, u in zip(data_s, compute_s, warm, strict=True)), default=0.0)
    if top > 0:
        ax.set_ylim(0, top * 1.15)  # room for the "% data" labels under the title
    return _save(fig, path)


def throughput_bars(
    labels: Sequence[str],
    values: Sequence[float | None],
    lows: Sequence[float | None],
    highs: Sequence[float | None],
    path: Path,
    *,
    title: str,
    notes: Sequence[str] | None = None,
) -> Path:
    """Bars of the runs' throughput; whiskers show the 95% CI (kept >= 0); a bar-less cell shows its status. At
    most bounds.MAX_BARS bars, the first in the caller's order (the title says so; the tables list every one)."""
    n, title = _capped_title(title, len(labels))
    labels, values, lows, highs = labels[:n], values[:n], lows[:n], highs[:n]
    notes = notes[:n] if notes is not None else None
    fig = _figure(_width(len(labels)), 4.5)
    ax = fig.add_subplot()
    x = list(range(len(labels)))
    heights = [v or 0.0 for v in values]
    ax.bar(x, heights, _bar_width(len(labels)), color=COMPUTE_COLOR)
    for xi, v, lo, hi in zip(x, values, lows, highs, strict=True):
        if v is not None and lo is not None and hi is not None:
            ax.errorbar([xi], [v], yerr=[[max(v - lo, 0.0)], [max(hi - v, 0.0)]], fmt="none", ecolor="black", capsize=4)
    for xi, note in zip(x, notes or [], strict=False):  # notes may be shorter
        if note:
            ax.annotate(note, (xi, 0), ha="center", va="bottom", color=OOM_COLOR, fontsize=9, fontweight="bold")
    _xticks(ax, labels)
    ax.set_ylabel("images / s (run throughput, 95% CI)")
    ax.set_title(title)
    return _save(fig, path)


def top1_per_epoch(
    series: Mapping[str, Mapping[str, Sequence[float | None]]], path: Path, *, title: str, target: float | None = None
) -> Path:
    """series: label -> {"train": [...], "val": [...]} per epoch (None where not measured); `target`: --target-top1,
    drawn as a horizontal line."""
    return _save(top1_figure(series, title=title, target=target), path)


TARGET_COLOR = "#d62728"  # the --target-top1 line: red, apart from the series' C0.. colours


def _target_line(ax: Any, target: float | None) -> None:
    """--target-top1 as a dotted line across the axes, in the legend; the axes stretched to show it."""
    if target is None:
        return
    ax.axhline(target, color=TARGET_COLOR, linestyle=":", linewidth=1.5, label=f"target val top-1 {target:g}")
    bottom, top = ax.get_ylim()
    if target * 1.05 > top:
        ax.set_ylim(bottom, target * 1.05)


def top1_as_bars(series: Mapping[str, Mapping[str, Sequence[float | None]]]) -> bool:
    """Whether top1_figure draws bars (one epoch each: a pair of bars per configuration) rather than lines."""
    return all(len(s.get("train") or []) <= 1 and len(s.get("val") or []) <= 1 for s in series.values())


def top1_figure(
    series: Mapping[str, Mapping[str, Sequence[float | None]]], *, title: str, target: float | None = None
) -> Any:
    """Lines per epoch; with one epoch each, bars with their values: a line of one point is a lone dot on an
    epoch axis matplotlib pads to 0.96..1.04. `target` (--target-top1): a horizontal line at it. A series longer than
    bounds.MAX_POINTS is drawn as the mean of each bin of consecutive epochs, at the bin's mean epoch (the title
    says so); at most bounds.MAX_BARS configurations (the first)."""
    series = _labelled(series)
    if top1_as_bars(series):
        return _top1_bars(series, title=title, target=target)
    n, title = _capped_title(title, len(series))
    series = dict(list(series.items())[:n])
    longest = max((len(s.get(kind) or []) for s in series.values() for kind in ("train", "val")), default=0)
    b = bounds.bins(longest, bounds.MAX_POINTS)
    if b.note():
        title = f"{title} ({b.note()})"
    epoch_at = [(span.start + span.stop + 1) / 2 for span in b.spans()]  # a bin's mean epoch, counted from 1
    crowded = len(series) > 3  # many lines: the legend goes beside the axes, not over the lines
    fig = _figure(9.5 if crowded else 7.0, 4.5)
    ax = fig.add_subplot()
    for i, (label, s) in enumerate(series.items()):
        color = f"C{i % 10}"
        for kind, style in (("train", "--"), ("val", "-")):
            ys = list(s.get(kind) or [])
            ys = bounds.means(ys, bounds.Bins(b.size, len(ys))) if b.size > 1 else ys
            pts = [(epoch_at[e] if b.size > 1 else e + 1, y) for e, y in enumerate(ys) if y is not None]
            if pts:
                marker = "o" if len(pts) <= bounds.MAX_BARS else None
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    style,
                    marker=marker,
                    color=color,
                    label=f"{label} ({kind})",
                )
    ax.set_xlabel("epoch")
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(bottom=0)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title)
    plotted = bool(ax.get_legend_handles_labels()[0])
    if plotted:
        _target_line(ax, target)
    if not plotted:  # e.g. a --data-only run: say so rather than draw empty axes
        ax.text(
            0.5,
            0.5,
            "no top-1 recorded (data-only run or no finished epoch)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    elif crowded:
        fig.legend(loc="outside right upper", fontsize=7)
    else:
        ax.legend(fontsize=7, loc="best")
    return fig


def _top1_bars(
    series: Mapping[str, Mapping[str, Sequence[float | None]]], *, title: str, target: float | None = None
) -> Any:
    """Train and validation top-1 of a single epoch: a pair of bars per configuration, each with its value (the
    first bounds.MAX_BARS configurations)."""
    n, title = _capped_title(title, len(series))
    labels = list(series)[:n]
    fig = _figure(_width(len(labels), 1.2), 4.5)
    ax = fig.add_subplot()
    w = 0.35
    top = 0.0
    for k, (kind, color) in enumerate((("train", TRAIN_COLOR), ("val", COMPUTE_COLOR))):
        for i, label in enumerate(labels):
            ys = series[label].get(kind) or []
            y = ys[0] if ys else None
            if y is None:
                continue
            x = i + (k - 0.5) * w
            ax.bar([x], [y], w, color=color, label=kind if i == 0 else None)
            ax.annotate(f"{y:.4f}", (x, y), ha="center", va="bottom", fontsize=8)
            top = max(top, y)
    _xticks(ax, labels)
    ax.set_xlim(-1, len(labels))  # a lone pair of bars is not stretched across the axes
    ax.set_ylabel("top-1 accuracy after epoch 1")
    ax.set_ylim(0, max(top * 1.2, 0.05))  # room for the value labels; a near-0 top-1 still shows its bar
    ax.set_title(f"{title} (one epoch)")
    if ax.get_legend_handles_labels()[0]:
        _target_line(ax, target)
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no top-1 recorded (data-only run or no finished epoch)", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
    return fig


def throughput_vs_batch(
    series: Mapping[str, Sequence[tuple[int, float | None, str]]], path: Path, *, title: str
) -> Path:
    """series: label -> [(batch per device, throughput or None, status)]; OOM cells as red crosses."""
    series = _labelled(series)
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    ok_values = [t for pts in series.values() for _, t, _ in pts if t]
    floor = min(ok_values) * 0.8 if ok_values else 1.0
    for i, (label, pts) in enumerate(series.items()):
        color = f"C{i % 10}"
        good = [(b, t) for b, t, s in pts if s == "ok" and t]
        if good:
            ax.plot([b for b, _ in good], [t for _, t in good], "-o", color=color, label=label)
        oom = [b for b, _, s in pts if s == "oom"]
        if oom:
            ax.scatter(oom, [floor] * len(oom), marker="x", s=80, color=OOM_COLOR, label=f"{label}: OOM", zorder=3)
            for b in oom:
                ax.annotate(
                    "OOM",
                    (b, floor),
                    textcoords="offset points",
                    xytext=(0, 8),
                    ha="center",
                    color=OOM_COLOR,
                    fontsize=8,
                )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size per device")
    ax.set_ylabel("images / s")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def data_time_vs_workers(series: Mapping[str, Sequence[tuple[int, float]]], path: Path, *, title: str) -> Path:
    series = _labelled(series)
    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    for i, (label, pts) in enumerate(series.items()):
        pts = sorted(pts)
        ax.plot([w for w, _ in pts], [d for _, d in pts], "-o", color=f"C{i % 10}", label=label)
    ax.set_xlabel("DataLoader workers")
    ax.set_ylabel("data wait per epoch, measured steps (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def scaling(
    series: Mapping[str, Sequence[tuple[int, float | None, float | None]]], path: Path, *, title: str, xlabel: str
) -> Path:
    """series: label -> [(devices, throughput, efficiency)]; ideal = linear from the smallest count."""
    series = _labelled(series)
    fig = _figure(11.0, 4.5)
    ax_t, ax_e = fig.subplots(1, 2)
    counts = sorted({n for pts in series.values() for n, _, _ in pts})
    for i, (label, pts) in enumerate(series.items()):
        color = f"C{i % 10}"
        good = sorted((n, t, e) for n, t, e in pts if t)
        if not good:
            continue
        n0, t0 = good[0][0], good[0][1]
        ax_t.plot([n for n, _, _ in good], [t for _, t, _ in good], "-o", color=color, label=label)
        ax_t.plot(counts, [t0 * n / n0 for n in counts], ":", color=color, label=f"{label}: ideal")
        eff = [(n, e) for n, _, e in good if e is not None]
        ax_e.plot([n for n, _ in eff], [e for _, e in eff], "-o", color=color, label=label)
    ax_e.axhline(1.0, linestyle=":", color="gray", label="ideal")
    for ax in (ax_t, ax_e):
        ax.set_xlabel(xlabel)
        ax.set_xticks(counts)
        ax.legend(fontsize=7, loc="best")
    ax_t.set_ylabel("images / s")
    ax_t.set_title(f"{title}: throughput")
    ax_e.set_ylabel("efficiency (speedup / ideal)")
    ax_e.set_ylim(0, 1.2)
    ax_e.set_title(f"{title}: efficiency")
    return _save(fig, path)


def throughput_and_time_to_target(
    series: Mapping[str, Sequence[tuple[int, float | None, float | None, str]]],
    path: Path,
    *,
    title: str,
    target: float,
) -> Path:
    """series: label -> [(batch per device, throughput, training seconds to the target or None, status)]; two
    panels side by side on one batch axis: images/s, and the time to the target (crosses: not reached)."""
    series = _labelled(series)
    fig = _figure(11.0, 4.5)
    ax_t, ax_a = fig.subplots(1, 2, sharex=True)  # one batch axis: a cell reads across both panels
    top = ax_a.get_xaxis_transform()  # x in data, y in axes fraction: a not-reached cell sits at the top edge
    for i, (label, pts) in enumerate(series.items()):
        color = f"C{i % 10}"
        good = sorted((b, t) for b, t, _, st in pts if st == "ok" and t)
        if good:
            ax_t.plot([b for b, _ in good], [t for _, t in good], "-o", color=color, label=label)
        hit = sorted((b, s) for b, _, s, st in pts if st == "ok" and s is not None)
        if hit:
            ax_a.plot([b for b, _ in hit], [s for _, s in hit], "-o", color=color, label=label)
        missed = [b for b, _, s, st in pts if st == "ok" and s is None]
        if missed:
            ax_a.scatter(missed, [0.95] * len(missed), transform=top, marker="x", s=80, color=OOM_COLOR)
            for b in missed:
                ax_a.annotate("not reached", (b, 0.95), xycoords=top, textcoords="offset points", xytext=(0, -14),
                              ha="center", color=OOM_COLOR, fontsize=8)  # fmt: skip
    for ax in (ax_t, ax_a):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size per device")
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    if not any(s is not None for pts in series.values() for _, _, s, _ in pts):
        ax_a.set_yticks([])  # no cell reached it: no seconds to scale
    ax_t.set_ylabel("images / s")
    ax_t.set_title(f"{title}: throughput")
    ax_a.set_ylabel(f"training s to val top-1 >= {target:g}")
    ax_a.set_title(f"{title}: time to accuracy")
    return _save(fig, path)


def roofline(
    points: Sequence[tuple[str, float, float, float]],
    path: Path,
    *,
    compute_flop_s: float,
    memory_byte_s: float,
    title: str,
    other_compute: Mapping[str, float] | None = None,
    min_intensity: float | None = None,
) -> Path:
    """The roofline (Williams, Waterman and Patterson 2009) on log-log axes: the memory roof (FLOP/s = intensity x
    bytes/s) up to the ridge point, the compute roof after it, and each kind as a point (kind, intensity FLOP/byte,
    achieved FLOP/s, share of step) whose area is its share of the step, named in the legend (and beside it when
    it has counted FLOPs). `other_compute`: further compute roofs drawn dashed (a matmul precision's);
    `min_intensity`: the intensity kinds with no counted FLOPs were placed at, marked by a dotted line."""
    fig = _figure(10.0, 5.5)
    ax = fig.add_subplot()
    intensities = [i for _, i, _, _ in points] or [1.0]
    ridge = compute_flop_s / memory_byte_s
    lo = min([*intensities, ridge]) / 10
    hi = max([*intensities, ridge]) * 10
    ax.plot([lo, ridge], [lo * memory_byte_s, compute_flop_s], color="black", lw=2,
            label=f"memory roof, {memory_byte_s / 1e9:,.1f} GB/s")  # fmt: skip
    ax.plot([ridge, hi], [compute_flop_s, compute_flop_s], color="black", lw=2, ls="-.",
            label=f"compute roof, {compute_flop_s / 1e9:,.1f} GFLOP/s")  # fmt: skip
    for label, flop_s in (other_compute or {}).items():
        ax.plot([flop_s / memory_byte_s, hi], [flop_s, flop_s], color="gray", lw=1, ls="--",
                label=f"{label}, {flop_s / 1e9:,.1f} GFLOP/s")  # fmt: skip
    for i, (kind, intensity, flop_s, share) in enumerate(points):
        ax.scatter([intensity], [flop_s], s=40 + 2000 * max(share, 0.0), color=f"C{i % 10}", alpha=0.6,
                   edgecolors="black", linewidths=0.5, label=f"{kind} ({100 * share:.0f}% of step)")  # fmt: skip
        if intensity != min_intensity:
            ax.annotate(kind, (intensity, flop_s), textcoords="offset points", xytext=(8, 4), fontsize=8)
    if min_intensity is not None and any(i == min_intensity for _, i, _, _ in points):
        ax.axvline(min_intensity, color="gray", lw=0.5, ls=":")
        ax.annotate("no counted FLOPs:\nat their bandwidth", (min_intensity, 0.02), xycoords=("data", "axes fraction"),
                    textcoords="offset points", xytext=(4, 0), fontsize=7, color="gray")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of minimum traffic)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize=7, markerscale=0.4, frameon=False)
    return _save(fig, path)

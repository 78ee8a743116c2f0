"""Pure: a sweep's cells and their results -> rows, tables per varied dimension, verdicts.

    rows = [cell_row(cell, record, steps) for ...]      one CellRow per cell (record None: never ran)
    render(rows, dims, fmt="text" | "md")                 summary + per-dimension tables + verdicts
    verdicts(rows, dims)                                   one line per finding ("best workers: 4 ...")

Throughput is the run's own figure (analysis/throughput, as `report` and `compare` print it) with the 95%
CI of its windows' mean (windows.py); "within noise" means Welch's 95% interval of the difference includes 0 (stats.py). No torch, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any


from effbench.results import StepRow
from effbench.analysis import epoch_time
from effbench.analysis import rounds as across_rounds
from effbench.analysis import scaling as scaling_table
from effbench.analysis import stats
from effbench.analysis import time_to_accuracy
from effbench.analysis import windows
from effbench.analysis.steady_state import DRIFT_R
from effbench.analysis.efficiency import CONTENDED
from effbench.datasets import chance_note
from effbench.fmt import fit_report_table, fmt_value, grid, interval, md, printable, wrap_text
from effbench.report import roofline_tables
from effbench.sweep.spec import ROUND, configuration_key, dim_option, run_params, show, varied

if TYPE_CHECKING:
    from effbench import schema


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


@dataclasses.dataclass
class CellRow:
    """Everything the tables and plots need about one cell; its fields, in this order, are summary.json's
    (`summary()`). A cell that never ran has only the manifest's first six."""

    key: str
    params: dict[str, Any]
    status: str | None = None
    run_dir: str | None = None
    error: str | None = None
    batch_size_per_device: int | None = None
    # from the record (a cell that ran)
    throughput_img_s: float | None = None
    thr_median: float | None = None
    thr_ci_low: float | None = None
    thr_ci_high: float | None = None
    thr_samples: list[float] = dataclasses.field(default_factory=list)
    share_samples: list[float] = dataclasses.field(default_factory=list)
    no_effect: dict[str, str] = dataclasses.field(default_factory=dict)
    resolved: dict[str, Any] = dataclasses.field(default_factory=dict)
    windows: int | None = None
    # every step, warm-up included (summary.json only; epochs.csv's data_time_s / compute_time_s)
    data_time_per_epoch_s: float | None = None
    compute_time_per_epoch_s: float | None = None
    # what the tables and charts show: the measured steps (the headline's), warm-up apart, and their source
    # (analysis/epoch_time.per_epoch)
    measured_data_time_per_epoch_s: float | None = None
    measured_compute_time_per_epoch_s: float | None = None
    warmup_time_per_epoch_s: float | None = None
    time_split: str | None = None
    data_time_share: float | None = None
    train_loss: float | None = None
    train_top1: float | None = None
    val_top1: float | None = None
    train_top1_per_epoch: list[float | None] = dataclasses.field(default_factory=list)
    val_top1_per_epoch: list[float | None] = dataclasses.field(default_factory=list)
    global_batch_size: int | None = None
    devices: int | None = None
    peak_mem_gib: float | None = None
    peak_host_gib: float | None = None
    wall_time_s: float | None = None
    device: str | None = None
    # --target-top1: time and epochs to it, None without (analysis/time_to_accuracy.cell_fields)
    target_top1: float | None = None
    reached_target: bool | None = None
    time_to_target_s: float | None = None
    epochs_to_target: int | None = None
    best_val_top1: float | None = None
    # the run's own verdict: a busy host set its pace (analysis/efficiency.py), so its figures rank nothing
    contended: bool = False
    # --until ci:X%: the interval that stopped the cell (schema.Until), None without
    until_target: str | None = None
    until_half_width_pct: float | None = None
    until_windows: int | None = None
    until_reached: bool | None = None
    until_lag1_autocorrelation: float | None = None
    # what thr_samples and share_samples are: the run's windows, or (a configuration pooled over --rounds,
    # pooled_rows) its rounds' figures; not in summary.json
    samples: str = "windows"
    # the run's record, its windows with it (compare.py); not in summary.json
    record: schema.Results | None = None
    # why a reader shows its status (liveness.py: "last written T" beside `dead`); not in summary.json
    status_note: str | None = None

    def summary(self) -> dict[str, Any]:
        """The cell as summary.json holds it: every field but the record and the note, in order; the manifest's
        six alone when the cell never ran."""
        names = [f.name for f in dataclasses.fields(self) if f.name not in _NOT_SUMMARY]
        names = names[:_MANIFEST_FIELDS] if self.record is None else names
        return {n: getattr(self, n) for n in names}

    @property
    def shown_status(self) -> str:
        """The status as the tables print it: `dead (last written T)`, `running (on HOST, last written T)`, `ok`."""
        status = str(self.status or "-")
        return f"{status} ({self.status_note})" if self.status_note else status


_MANIFEST_FIELDS = 6  # key .. batch_size_per_device: all a cell that never ran has
_NOT_SUMMARY = ("record", "status_note", "samples")


def cell_row(cell: schema.Cell, record: schema.Results | None, steps: Sequence[StepRow] | None = None) -> CellRow:
    """One cell's row: the manifest's cell, and its record's figures when it ran (record None: never ran)."""
    row = CellRow(
        key=cell.key,
        params=dict(cell.params),
        status=cell.status,
        status_note=cell.status_note,
        run_dir=cell.run_dir,
        error=cell.error.message if cell.error else None,
        batch_size_per_device=cell.config.get("batch_size"),  # the config identity: a plain dict
    )
    if record is None:
        return row
    from effbench import schema

    # the windows' summary is keyed by the name of the list it summarises
    thr_key = schema.field_path(schema.Windows, _thr_of)
    epochs = record.epochs
    w = windows.windows_of(record, steps)
    typed_windows = schema.Windows.model_validate(w)
    summ = typed_windows.summary.get(thr_key) if typed_windows.summary else None
    final = record.final
    config = record.config.model_dump(exclude_unset=True)  # the values that ran (config.json is resolved)
    return dataclasses.replace(
        row,
        status=record.status,
        status_note=record.status_note,
        error=(record.error.message if record.error else None) or row.error,
        throughput_img_s=record.throughput_img_s,
        thr_median=summ.median if summ else None,
        thr_ci_low=summ.ci_low if summ else None,
        thr_ci_high=summ.ci_high if summ else None,
        thr_samples=list(_thr_of(typed_windows) or []),
        share_samples=list(_share_of(typed_windows) or []),
        no_effect=dict(config.get(NO_EFFECT, {})),
        resolved=config,
        windows=typed_windows.windows,
        data_time_per_epoch_s=_mean([e.data_time_s for e in epochs]),
        compute_time_per_epoch_s=_mean([e.compute_time_s for e in epochs]),
        **epoch_time.per_epoch(record),
        data_time_share=record.data_time_share,
        train_loss=final.train_loss,
        train_top1=final.train_top1,
        val_top1=final.val_top1,
        train_top1_per_epoch=[e.train_top1 for e in epochs],
        val_top1_per_epoch=[e.val_top1 for e in epochs],
        batch_size_per_device=record.batch_size_per_device or row.batch_size_per_device,
        global_batch_size=record.global_batch_size,
        devices=record.devices or record.world_size,
        until_target=record.until.target if record.until else None,
        until_half_width_pct=record.until.half_width_pct if record.until else None,
        until_windows=record.until.windows if record.until else None,
        until_reached=record.until.reached if record.until else None,
        until_lag1_autocorrelation=record.until.lag1_autocorrelation if record.until else None,
        peak_mem_gib=record.peak_mem_gib,
        peak_host_gib=host_peak_gib(record),
        wall_time_s=whole_run_wall_s(record),
        device=record.device,
        **time_to_accuracy.cell_fields(record),
        contended=record.verdict is not None and record.verdict.bottleneck == CONTENDED,
        record=record.model_copy(update={schema.field_path(schema.Results, _windows_of): typed_windows}),
    )


def _windows_of(r: schema.Results) -> Any:
    return r.throughput_windows


def _thr_of(w: schema.Windows) -> Any:
    return w.throughput_img_s


def _share_of(w: schema.Windows) -> Any:
    return w.data_time_share


# config.json's note of the options that changed nothing, and why (config.py); not a field of schema.Config.
NO_EFFECT = "no_effect"


def throughput_cell(row: CellRow) -> str:
    """`412.3 [398.1, 421.0]`: the run's throughput (the headline, as `report` and `compare` print it) and
    the 95% CI of its windows' mean; the status instead when the cell has no figure."""
    if row.status != "ok":
        return row.shown_status
    med = _thr(row) or None
    if med is None:
        return "-"
    if row.thr_ci_low is None:
        return f"{med:,.1f}"
    return f"{med:,.1f} {interval(row.thr_ci_low, row.thr_ci_high)}"


def ran(row: CellRow, dim: str) -> Any:
    """The value of `dim` the cell ran with (its config.json), else the one the sweep asked for."""
    resolved = row.resolved
    return resolved[dim] if dim in resolved else row.params.get(dim)


def shown(row: CellRow, dim: str) -> str:
    """A swept value as the tables print it: what ran, and what was asked when that differs
    (`0 (asked 4, no effect)`), so a column never names a value the run did not use."""
    asked, value = show(row.params.get(dim)), show(ran(row, dim))
    if value == asked:
        return value
    mark = ", no effect" if dim in row.no_effect else ""
    return f"{value} (asked {asked}{mark})"


def label(row: CellRow, dims: Sequence[str]) -> str:
    """Short label of a cell from the values it ran with, e.g. `workers=2 optimizer=adam`."""
    parts = [f"{k.replace('_', '-')}={show(ran(row, k))}" for k in dims if k in row.params]
    return " ".join(parts) or row.key


def chart_labels(rows: Sequence[CellRow], dims: Sequence[str]) -> list[str]:
    """`label` of each row; rows that ran the same values (they differ only along an option that had
    no effect) are repeats of one configuration, told apart by their cell number, e.g. `batch-size=4 [001]`."""
    labels = [label(r, dims) if dims else "" for r in rows]
    return [f"{x} [{r.key[:3]}]".strip() if labels.count(x) > 1 else x for x, r in zip(labels, rows, strict=True)]


def chart_groups(
    rows: Sequence[CellRow], dims: Sequence[str], dim: str, skipped: Sequence[str]
) -> dict[str, list[CellRow]]:
    """`groups` for a chart along `dim`: labelled by the values that ran, without the dimensions in
    `skipped` (no effect); groups that differ only along those are repeats, numbered."""
    out: dict[str, list[CellRow]] = {}
    for members in groups(rows, dims, dim).values():
        shown_dims = [d for d in dims if d != dim and d not in skipped]
        name = label(members[0], shown_dims) if shown_dims else "all"
        k, key = 1, name
        while key in out:
            k += 1
            key = f"{name} (repeat {k})"
        out[key] = members
    return out


def host_peak_gib(record: schema.Results) -> float | None:
    """Peak host memory of a run's process tree: PSS when sampled (shared pages counted once), else RSS."""
    host = record.utilization.host
    for sampled in (host.pss_gib, host.rss_gib):
        if sampled is not None and sampled.max is not None:
            return sampled.max
    return None


def whole_run_wall_s(record: schema.Results) -> float | None:
    """The run's whole wall time (setup to report), or None for a run folder made before effbench timed the run by
    phase: its wall_time_s began after setup, dataset and model, so beside newer cells it would read short."""
    return record.wall_time_s if record.wall_time_by_phase_s is not None else None


TIME_NOTE = epoch_time.TIME_NOTE  # said under the tables and on the sweep page
# --target-top1 (analysis/time_to_accuracy.py), said under the tables and on the sweep page when a cell has it
TARGET_NOTE = (
    "Time to target: the timed training steps' seconds (warm-up included, validation excluded) up to the first "
    "epoch whose validation top-1 reached the target (docs/time-to-accuracy.md). "
)

# Said under a no-effect dimension's table (and on the sweep page): why it has no deltas and no chart.
IDLE_NOTE = "every cell ran the same value, so its differences are noise: no deltas, no chart along it"

METRIC_HEADERS = (
    "status",
    "img/s [95% CI]",
    "data s/epoch (measured)",
    "compute s/epoch (measured)",
    "data % (measured)",
    "warm-up s/epoch",
    "train loss",
    "train top-1",
    "val top-1",
    "peak mem GiB",
)


def _metrics(row: CellRow) -> list[str]:
    share = row.data_time_share
    mem = row.peak_mem_gib
    mem_text = (
        fmt_value(mem)
        if mem is not None
        else (f"{row.peak_host_gib:.2f} host" if row.peak_host_gib is not None else "-")
    )
    return [
        row.shown_status + (f" ({CONTENDED})" if row.contended else ""),
        throughput_cell(row),
        fmt_value(row.measured_data_time_per_epoch_s, 3),
        fmt_value(row.measured_compute_time_per_epoch_s, 3),
        "-" if share is None else f"{100 * share:.1f}%",  # the headline's data wait share: the same steps
        fmt_value(row.warmup_time_per_epoch_s, 3),
        fmt_value(row.train_loss, 4),
        fmt_value(row.train_top1, 4),
        fmt_value(row.val_top1, 4),
        mem_text,
    ]


def target_of(rows: Sequence[CellRow]) -> float | None:
    """The sweep's --target-top1 (one value for every cell), None when no cell recorded one."""
    return next((r.target_top1 for r in rows if r.target_top1 is not None), None)


def target_headers(rows: Sequence[CellRow]) -> list[str]:
    """The time-to-accuracy columns, beside img/s, when the sweep has a target; none without."""
    target = target_of(rows)
    return [] if target is None else [f"train s to val top-1 >= {target:g}", "epochs to target"]


def _target_cells(row: CellRow, rows: Sequence[CellRow]) -> list[str]:
    if target_of(rows) is None:
        return []
    if row.reached_target:
        return [fmt_value(row.time_to_target_s, 3), fmt_value(row.epochs_to_target)]
    if row.reached_target is False:  # ran with the target and never reached it: the best it got
        best = row.best_val_top1
        return ["not reached" + ("" if best is None else f" (best {best:.4f})"), "-"]
    return ["-", "-"]  # never ran, or ended before its record had a first epoch


def until_headers(rows: Sequence[CellRow]) -> list[str]:
    """The --until column, beside img/s, when a cell ran with it: the interval that stopped it, which is on the
    windows of --log-interval steps, not the table's --repeats windows."""
    return ["until: interval reached"] if any(r.until_target for r in rows) else []


def _until_cells(row: CellRow, rows: Sequence[CellRow]) -> list[str]:
    if not until_headers(rows):
        return []
    if row.until_target is None:
        return ["-"]
    pct = "-" if row.until_half_width_pct is None else f"+/-{row.until_half_width_pct:.2f}%"
    how = "reached" if row.until_reached else "cap, not reached"
    r = row.until_lag1_autocorrelation
    drift = f", drifted: r {r:+.2f}" if r is not None and r > DRIFT_R else ""  # docs/methodology.md, "Slow drift"
    return [f"{pct} ({how}, {row.until_windows or 0} windows{drift})"]


def time_split_notes(rows: Sequence[CellRow]) -> list[str]:
    """One line per cell whose seconds per epoch do not come from its epochs' measured split (epoch_time)."""
    notes = (epoch_time.source_note(r.time_split, f"cell {r.key[:3]}") for r in rows)
    return [n for n in notes if n]


def chance_notes(rows: Sequence[CellRow]) -> list[str]:
    """What the top-1 columns mean where the cells trained on generated data (datasets.chance_note)."""
    notes = dict.fromkeys(chance_note(r.record.config.dataset) for r in rows if r.record is not None)
    return [f"top-1: {n}" for n in notes if n]


def summary_table(rows: Sequence[CellRow], dims: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "cell",
        *[dim_option(d)[2:] for d in dims],
        *METRIC_HEADERS[:2],
        *until_headers(rows),
        *target_headers(rows),
        *METRIC_HEADERS[2:],
    ]
    body = [
        [
            r.key[:3],
            *[shown(r, d) for d in dims],
            *_metrics(r)[:2],
            *_until_cells(r, rows),
            *_target_cells(r, rows),
            *_metrics(r)[2:],
        ]  # fmt: skip
        for r in rows
    ]
    return headers, body


def dimension_table(rows: Sequence[CellRow], dims: Sequence[str], dim: str) -> tuple[list[str], list[list[str]]]:
    """Cells grouped by the other swept values, ordered by `dim`; `vs first` is the throughput
    relative to the group's first value of `dim` (marked when the windows cannot tell it from noise),
    and `no effect` where `dim` changed nothing in the
    group (every cell ran the same value): a difference there is noise, not the option's doing."""
    others = [d for d in dims if d != dim]
    order = {d: {str(v): i for i, v in enumerate(dict.fromkeys(r.params.get(d) for r in rows))} for d in dims}

    def sort_key(r: CellRow) -> tuple[int, ...]:
        return tuple(order[d][str(r.params.get(d))] for d in [*others, dim])

    def group_of(r: CellRow) -> tuple[str, ...]:
        return tuple(show(r.params.get(d)) for d in others)

    members: dict[tuple[str, ...], list[CellRow]] = {}
    for r in rows:
        members.setdefault(group_of(r), []).append(r)
    idle = {g for g, m in members.items() if no_effect(dim, m)}
    body = []
    first: dict[tuple[str, ...], CellRow] = {}
    for r in sorted(rows, key=sort_key):
        group = group_of(r)
        thr = _thr(r) or None if r.status == "ok" else None
        head = first.setdefault(group, r)
        base = _thr(head) or None if head.status == "ok" else None
        rel = "-" if not thr or not base else f"{100 * (thr / base - 1):+.1f}%"
        if rel != "-" and head is not r:  # a delta the windows cannot tell from noise says so beside it
            why = separated(head.thr_samples, r.thr_samples)
            rel += "" if why is None else " (within noise)" if why.startswith("within") else " (too few windows)"
        if group in idle:
            rel = "no effect"
        body.append(
            [
                *[shown(r, d) for d in others],
                shown(r, dim),
                *_metrics(r)[:2],
                rel,
                *_target_cells(r, rows),
                *_metrics(r)[2:],
            ]
        )
    headers = [
        *[dim_option(d)[2:] for d in others],
        dim_option(dim)[2:],
        *METRIC_HEADERS[:2],
        "vs first",
        *target_headers(rows),
        *METRIC_HEADERS[2:],
    ]
    return headers, body


def groups(rows: Sequence[CellRow], dims: Sequence[str], dim: str) -> dict[str, list[CellRow]]:
    """Rows split by the values of every other swept dimension (label -> rows in sweep order)."""
    others = [d for d in dims if d != dim]
    out: dict[str, list[CellRow]] = {}
    for r in rows:
        out.setdefault(" ".join(f"{d.replace('_', '-')}={show(r.params.get(d))}" for d in others), []).append(r)
    return out


def _ok(rows: Sequence[CellRow]) -> list[CellRow]:
    return [r for r in rows if r.status == "ok" and (r.thr_median or r.throughput_img_s)]


def _thr(r: CellRow) -> float:
    """The cell's throughput: the run's headline (one definition with `report` and `compare`)."""
    return float(r.throughput_img_s or r.thr_median or 0.0)


def no_effect(dim: str, rows: Sequence[CellRow]) -> str | None:
    """Why `dim` changed nothing in these cells, else None: the cells asked for different values but
    every one ran with the same (config.json holds the value that ran; `no_effect` says why)."""
    ran = [r for r in rows if dim in r.resolved]
    asked = {str(r.params.get(dim)) for r in ran}
    values = {str(r.resolved[dim]) for r in ran}
    if len(ran) < 2 or len(ran) < len(rows) or len(asked) < 2 or len(values) != 1:
        return None
    reasons = [r.no_effect.get(dim) for r in ran]
    why = next((str(x) for x in reasons if x), None)
    return why or f"every cell ran with --{dim.replace('_', '-')} {values.pop()}"


def separated(best: Sequence[float], other: Sequence[float], samples: str = "windows") -> str | None:
    """None when the two samples (windows, or rounds) differ outside noise, else why a winner cannot be named."""
    too_few = stats.too_few_to_judge(len(best), len(other), samples=samples)
    if too_few:
        return too_few
    if not stats.difference(other, best).significant:
        return "within noise (Welch's 95% interval of the difference includes 0)"
    return None


def no_effect_dims(rows: Sequence[CellRow], dims: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    """The varied dimensions that changed nothing in any group of the other swept values, each with
    why: nothing is charted or differenced along them (every cell ran the same value)."""
    out: dict[str, str] = {}
    for dim in varied(dims):
        whys = [no_effect(dim, members) for members in groups(rows, list(dims), dim).values()]
        if whys and all(whys):
            out[dim] = f"--{dim.replace('_', '-')} had no effect on these runs ({whys[0]})"
    return out


def contended_reason(rows: Sequence[CellRow]) -> str | None:
    """Why no best can be named from these cells' timings when any of them ran on a busy host, else None: such
    a cell's throughput and data wait measure the other processes' load (two cells of the same work read 57.5
    and 6.8 img/s on a loaded 2-core machine)."""
    busy = [r for r in _ok(rows) if r.contended]
    if not busy:
        return None
    keys = ", ".join(r.key[:3] for r in busy)
    return (
        f"{len(busy)} of {len(_ok(rows))} cells ran {CONTENDED} (cell {keys}: their own verdict says other "
        "processes took the CPU), so their timings rank nothing; rerun on an idle machine"
    )


def winner_reason(dim: str, rows: Sequence[CellRow]) -> str | None:
    """None when a best value of `dim` by throughput can be named in these cells, else why not."""
    why = no_effect(dim, rows)
    if why:
        return f"--{dim.replace('_', '-')} had no effect: {why}"
    busy = contended_reason(rows)
    if busy:
        return busy
    ranked = sorted(_ok(rows), key=_thr, reverse=True)
    if len(ranked) < 2:
        return "fewer than 2 cells ran"
    return separated(ranked[0].thr_samples, ranked[1].thr_samples, ranked[0].samples)


def workers_reason(rows: Sequence[CellRow]) -> str | None:
    """None when a best worker count by data wait can be named (and charted), else why not."""
    why = no_effect("workers", rows)
    if why:
        return f"--workers had no effect: {why}"
    busy = contended_reason(rows)
    if busy:
        return busy
    timed = sorted((r for r in _ok(rows) if r.share_samples), key=lambda r: stats.mean(r.share_samples))
    if len(timed) < 2:
        return "fewer than 2 cells with a measured data wait"
    # the least and the most data wait: if even they are within noise, workers changed nothing measurable
    return separated(timed[0].share_samples, timed[-1].share_samples, timed[0].samples)


def verdicts(rows: Sequence[CellRow], dims: Mapping[str, Sequence[Any]]) -> list[str]:
    """One line per finding along each varied dimension, per group of the other swept values."""
    lines: list[str] = []
    judged, pooled_over = rows, ""
    if ROUND in varied(dims):  # no "best round": the rounds are repeats, and the other options are judged on
        lines += rounds_verdicts(rows)  # each configuration's mean over them, its noise the rounds'
        judged, pooled_over = pooled_rows(rows), "mean of rounds"
        dims = {k: v for k, v in dims.items() if k != ROUND}
    names = list(dims)
    for dim in varied(dims):
        for group, members in groups(judged, names, dim).items():
            if len({show(r.params.get(dim)) for r in members}) < 2:  # a preset left out the others (keep)
                continue
            where = "; ".join(x for x in (group, pooled_over) if x)
            where = f" [{where}]" if where else ""
            lines += [f"{line}{where}" for line in _dimension_verdicts(dim, members)]
            if target_of(members) is not None and no_effect(dim, members) is None:
                lines.append(f"{_target_verdict(dim, members)}{where}")
    bad = [
        r for r in rows if r.status in ("failed", "diverged", "skipped", "interrupted", "pending", "running", "dead")
    ]
    for r in bad:
        lines.append(f"cell {r.key}: {r.shown_status}" + (f" ({r.error})" if r.error else ""))
    return lines


def round_groups(rows: Sequence[CellRow]) -> dict[str, list[CellRow]]:
    """A sweep's rows by configuration (every swept value but the round), in first-run order: the repeats
    `--rounds` made of each."""
    out: dict[str, list[CellRow]] = {}
    for r in rows:
        out.setdefault(configuration_key(r.params), []).append(r)
    return out


def pooled(members: Sequence[CellRow]) -> across_rounds.Pooled:
    """One configuration's rounds: the ok runs' headlines and their own intervals (analysis/rounds.py)."""
    return across_rounds.pool(
        [
            across_rounds.RoundFigure(
                int(r.params.get(ROUND, 1)),
                (_thr(r) or None) if r.status == "ok" else None,
                r.thr_ci_low if r.status == "ok" else None,
                r.thr_ci_high if r.status == "ok" else None,
            )
            for r in members
        ]
    )


def pooled_rows(rows: Sequence[CellRow]) -> list[CellRow]:
    """One row per configuration over its rounds, for the verdicts: its first ok run's row with the round left out
    of its values, its throughput the mean over the ok rounds with their interval, and the rounds' figures as
    its samples, so "within noise" is judged on the noise between runs; a configuration with no ok round keeps
    its first run's row (its status)."""
    out = []
    for members in round_groups(rows).values():
        ok = [r for r in members if r.status == "ok" and _thr(r)]
        if not ok:
            out.append(dataclasses.replace(members[0], params=run_params(members[0].params)))
            continue
        p = pooled(members)
        s = p.summary
        assert s is not None  # an ok round has a figure
        out.append(dataclasses.replace(
            ok[0],
            params=run_params(ok[0].params),
            throughput_img_s=s.mean, thr_median=s.median, thr_ci_low=s.ci_low, thr_ci_high=s.ci_high,
            thr_samples=p.finished,
            share_samples=[r.data_time_share for r in ok if r.data_time_share is not None],
            samples="rounds",
            contended=any(r.contended for r in ok),
        ))  # fmt: skip
    return out


def rounds_pooled(rows: Sequence[CellRow]) -> list[dict[str, Any]]:
    """summary.json's `rounds`: per configuration, its swept values, each round's figure, and the mean over rounds
    with its 95% interval; [] for a sweep of one round."""
    if not any(ROUND in r.params for r in rows):
        return []
    out = []
    for members in round_groups(rows).values():
        p = pooled(members)
        s = p.summary
        out.append({
            "params": run_params(members[0].params),
            "rounds": len(p.rounds),
            "finished": len(p.finished),
            "throughput_by_round_img_s": [r.throughput_img_s for r in p.rounds],
            "throughput_mean_img_s": s.mean if s else None,
            "throughput_mean_ci95_img_s": [s.ci_low, s.ci_high] if s and s.ci_low is not None else None,
            "half_width_pct": p.half_width_pct,
            "round_spread_pct": p.spread_pct,
            "rounds_missing_mean": p.missed,
            "rounds_with_interval": p.with_interval,
        })  # fmt: skip
    return out


ROUNDS_TITLE = "Across rounds"
ROUNDS_NOTE = (
    "Across rounds: each configuration's runs in --rounds, the mean of their img/s with the 95% Student's t interval "
    "across the runs (df = rounds - 1; none below 3 rounds). A run's own interval (its windows) sees how the speed "
    "varied while it ran; the rounds see changes slower than one run. 'own CI misses mean' counts the runs whose own "
    "interval leaves out the mean over rounds: the machine moved between them by more than any one run saw."
)


def rounds_table(rows: Sequence[CellRow], dims: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """One row per configuration over its rounds (pooled): rounds finished, mean img/s [95% CI across rounds],
    its half-width, each round's img/s in round order, the spread, and the runs whose own CI misses the mean."""
    others = [d for d in dims if d != ROUND]
    headers = [*[dim_option(d)[2:] for d in others], "rounds ok", "img/s over rounds [95% CI]", "±",
               "img/s by round", "spread", "own CI misses mean"]  # fmt: skip
    body = []
    for members in round_groups(rows).values():
        p = pooled(members)
        s = p.summary
        figure = (
            "-"
            if s is None
            else f"{s.mean:,.1f}" + (f" {interval(s.ci_low, s.ci_high)}" if s.ci_low is not None else "")
        )
        by_round = ", ".join("-" if r.throughput_img_s is None else f"{r.throughput_img_s:,.1f}" for r in p.rounds)
        body.append([
            *[show(members[0].params.get(d)) for d in others],
            f"{len(p.finished)} of {len(p.rounds)}",
            figure,
            "-" if p.half_width_pct is None else f"±{p.half_width_pct:.1f}%",
            by_round,
            "-" if p.spread_pct is None else f"{p.spread_pct:.1f}%",
            f"{p.missed} of {p.with_interval}" if p.with_interval else "-",
        ])  # fmt: skip
    return headers, body


def rounds_verdicts(rows: Sequence[CellRow]) -> list[str]:
    """What the rounds say about the machine: how far each configuration moved between rounds, and whether the
    runs' own intervals held their mean over rounds."""
    by_config = [(pooled(members), members) for members in round_groups(rows).values()]
    compared = [(p, members) for p, members in by_config if p.spread_pct is not None]
    if not compared:
        return ["across rounds: no configuration finished 2 rounds or more, so nothing to compare"]
    widest, members = max(compared, key=lambda x: x[0].spread_pct or 0.0)
    name = label(members[0], list(run_params(members[0].params))) or "the configuration"
    line = (
        f"across rounds, a configuration's img/s moved by up to {widest.spread_pct:.1f}% of its mean between rounds "
        f"({name}: {min(widest.finished):,.1f} .. {max(widest.finished):,.1f})"
    )
    missed = sum(p.missed for p, _ in by_config)
    judged = sum(p.with_interval for p, _ in by_config)
    if judged and missed:
        line += (
            f"; {missed} of {judged} runs' own 95% intervals leave out their configuration's mean over rounds: the "
            "machine's speed changed between runs by more than one run's windows saw, so read the across-rounds "
            "interval"
        )
    elif judged:
        line += f"; every run's own 95% interval holds its configuration's mean over rounds ({judged} runs)"
    return [line]


def _workers_verdicts(rows: Sequence[CellRow]) -> list[str]:
    """The fewest workers whose data wait is within noise of the least (none when workers changed nothing)."""
    ok = _ok(rows)
    out: list[str] = []
    timed = [r for r in ok if r.data_time_per_epoch_s is not None]  # ran epochs; judged on share_samples
    reason = workers_reason(rows)
    if timed and reason:
        out.append(f"no best workers by data wait: {reason}")
    elif timed:
        by_wait = sorted((r for r in ok if r.share_samples), key=lambda r: stats.mean(r.share_samples))
        least = by_wait[0]
        same = [r for r in by_wait if r is least or separated(least.share_samples, r.share_samples, r.samples)]
        enough = min(same, key=lambda r: r.params["workers"])
        out.append(
            f"fewest workers within noise of the least data wait: {enough.params['workers']} "
            f"(data wait {100 * stats.mean(enough.share_samples):.1f}% of step time; least "
            f"{100 * stats.mean(least.share_samples):.1f}% with {least.params['workers']})"
        )
    return out


def _throughput_verdict(dim: str, rows: Sequence[CellRow]) -> str:
    """The highest throughput along `dim`, named only when it is outside noise of the runner-up."""
    name = dim.replace("_", "-")
    ranked = sorted(_ok(rows), key=_thr, reverse=True)
    best = ranked[0]
    reason = winner_reason(dim, rows) if len(ranked) > 1 else None
    if reason:
        return f"no highest throughput along {name}: {reason}; top {_thr(best):,.1f} img/s"
    return f"highest throughput along {name}: {show(best.params.get(dim))} ({_thr(best):,.1f} img/s)"


def _known(value: float | None) -> float:
    """A figure the caller kept only where it is known (rows filtered on it), as a sort key."""
    assert value is not None
    return value


def _target_verdict(dim: str, rows: Sequence[CellRow]) -> str:
    """The shortest training time to the target along `dim` (one run per cell: no interval, said so), or the
    best top-1 when no cell reached it. Throughput alone rewards a batch size that stops converging."""
    name, target = dim.replace("_", "-"), target_of(rows)
    hit = [r for r in rows if r.status == "ok" and r.reached_target and r.time_to_target_s is not None]
    if not hit:
        tried = [r for r in rows if r.best_val_top1 is not None]
        best = max(tried, key=lambda r: _known(r.best_val_top1), default=None)
        return f"no cell along {name} reached val top-1 >= {target:g}" + (
            "" if best is None else f"; best {best.best_val_top1:.4f} with {show(best.params.get(dim))}"
        )
    fast = min(hit, key=lambda r: _known(r.time_to_target_s))
    return (
        f"shortest training time to val top-1 >= {target:g} along {name}: {show(fast.params.get(dim))} "
        f"({fast.time_to_target_s:.3f} s in {fast.epochs_to_target} epoch(s); one run each, no CI)"
    )


def _dimension_verdicts(dim: str, rows: Sequence[CellRow]) -> list[str]:
    name = dim.replace("_", "-")
    ok = _ok(rows)
    out: list[str] = []
    why_not = no_effect(dim, rows)
    if why_not:  # nothing along this dimension can be a winner
        return [f"no best {name}: --{name} had no effect on these runs ({why_not})"]
    if len(ok) >= 1 and dim not in ("gpus", "nproc"):
        out.append(_throughput_verdict(dim, rows))
    if dim == "workers":
        out += _workers_verdicts(rows)
    if dim in ("optimizer", "batch_norm", "arch"):
        with_loss = [r for r in ok if r.train_loss is not None]
        if with_loss:
            lo = min(with_loss, key=lambda r: _known(r.train_loss))
            out.append(f"lowest final train loss along {name}: {show(lo.params.get(dim))} ({lo.train_loss:.4f})")
        validated = any(r.val_top1 is not None for r in ok)
        score: Callable[[CellRow], float | None] = (lambda r: r.val_top1) if validated else (lambda r: r.train_top1)
        scored = [r for r in ok if score(r) is not None]
        if scored:
            hi = max(scored, key=lambda r: _known(score(r)))
            ties = [show(r.params.get(dim)) for r in scored if score(r) == score(hi) and r is not hi]
            tie = f" (tied with {', '.join(ties)})" if ties else ""
            what = "validation top-1" if validated else "train top-1"
            out.append(f"best final {what} along {name}: {show(hi.params.get(dim))} ({score(hi):.4f}){tie}")
    if dim == "device":
        by = {r.params.get("device"): r for r in ok}
        if "cpu" in by and "cuda" in by and not contended_reason(rows):
            out.append(
                f"cuda trains {_thr(by['cuda']) / _thr(by['cpu']):.1f}x as fast as cpu ({_thr(by['cuda']):,.1f} vs {_thr(by['cpu']):,.1f} img/s)"
            )
    if dim == "batch_size":
        fit = [r for r in rows if r.status == "ok"]
        oom = [r for r in rows if r.status == "oom"]
        if fit:
            largest = max(fit, key=lambda r: r.params["batch_size"])
            bigger = [r for r in oom if r.params["batch_size"] > largest.params["batch_size"]]
            # "the largest that fit" only when a larger one was tried and did not: else it is the largest tried
            text = (f"largest batch per device that fit: {largest.params['batch_size']}" if bigger else
                    f"every batch size tried fit, up to {largest.params['batch_size']} per device (none larger tried)")  # fmt: skip
            if oom:
                first_oom = min(oom, key=lambda r: r.params["batch_size"])
                mem = first_oom.peak_mem_gib
                text += f"; out of memory from {first_oom.params['batch_size']}" + (
                    f" (peak {mem:.2f} GiB)" if mem is not None else ""
                )
            out.append(text)
        elif oom:
            out.append(
                f"every batch size ran out of memory (smallest tried: {min(r.params['batch_size'] for r in oom)})"
            )
    if dim in ("gpus", "nproc"):
        srows = scaling_rows(rows)
        last = next((r for r in reversed(srows) if r.get("efficiency") is not None), None)
        if last is not None and last["devices"] > 1:
            unit = "GPUs" if dim == "gpus" else "processes"
            out.append(
                f"at {last['devices']} {unit}: speedup {last['speedup']:.2f} of ideal {last['ideal_speedup']:.2f} (efficiency {last['efficiency']:.2f})"
            )
    return out


def scaling_rows(rows: Sequence[CellRow]) -> list[dict[str, Any]]:
    """scaling.py's rows from the cells' results (cells that never ran are left out)."""
    return scaling_table.scaling_rows([r.record for r in rows if r.record])


# The columns a terminal too narrow for every column leaves out first (render's `width`); sweep.txt, sweep.md and
# report.html keep them all.
TERMINAL_DROP = (
    "warm-up s/epoch",
    "train loss",
    "train top-1",
    "peak mem GiB",
    "compute s/epoch (measured)",
    "data s/epoch (measured)",
    "epochs to target",
)


def _roofline_cells(rows: Sequence[CellRow], dims: Mapping[str, Sequence[Any]]) -> tuple[list[str], list[Any]]:
    """The cells that have a roofline (a profiling pass), labelled by their varied values."""
    ran_rows = [r for r in rows if r.record is not None and r.record.roofline is not None]
    labels = chart_labels(ran_rows, varied(dims) or list(dims))
    return labels, [r.record.roofline for r in ran_rows if r.record is not None]


def roofline_table(rows: Sequence[CellRow], dims: Mapping[str, Sequence[Any]]) -> tuple[list[str], list[list[str]]]:
    """Each kind's time per step and fraction of its roof, a column per cell (report/roofline_tables.py)."""
    return roofline_tables.sweep_table(*_roofline_cells(rows, dims))


def roofline_moved(rows: Sequence[CellRow], dims: Mapping[str, Sequence[Any]]) -> str | None:
    """Which kinds' time moved most across the cells (what --channels-last or --compile changed)."""
    return roofline_tables.moved_line(*_roofline_cells(rows, dims))


def _table(
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    fmt: str,
    width: int | None = None,
    left: list[str] | None = None,
    keep: int = 1,
) -> str:
    """A table in `fmt`; in text with a `width`, within it (fmt.fit_report_table): given `left` (the terminal's
    copy), the columns in TERMINAL_DROP left out first and added to `left`; without, every column kept, a table too
    wide split into parts that each repeat its first `keep` columns."""
    if fmt == "md" or width is None:
        return grid(body, headers, fmt)
    return fit_report_table(headers, body, width, left=left, drop=TERMINAL_DROP, keep=keep)


def render(
    rows: Sequence[CellRow],
    dims: Mapping[str, Sequence[Any]],
    *,
    title: str,
    fmt: str = "text",
    width: int | None = None,
    leave_out: bool = False,
) -> str:
    """The sweep report: verdicts, every cell, one table per varied dimension, scaling tables. `width` (text only):
    every line within that many columns, sentences wrapped and each table too wide split into parts that repeat
    the row's name (sweep.txt, at fmt.REPORT_WIDTH); with `leave_out` (the terminal's copy), a table's least needed
    columns left out first instead, named at the end (sweep.txt, sweep.md and report.html hold them all)."""
    names = list(dims)
    shown = md if fmt == "md" else printable  # cell keys, values, names from disk: shown, never obeyed
    h = (lambda t: f"## {shown(t)}") if fmt == "md" else (lambda t: f"{shown(t)}\n{'-' * len(shown(t))}")
    left: list[str] | None = [] if leave_out else None  # the headers left out; None: every column kept
    parts = [f"# {shown(title)}" if fmt == "md" else shown(title)]
    lines = verdicts(rows, dims)
    if lines:
        parts += [h("Verdicts"), "\n".join(f"- {shown(v)}" for v in lines)]
    parts += [h("Cells"), _table(*summary_table(rows, names), fmt, width, left)]
    split_notes = time_split_notes(rows) + chance_notes(rows)
    if split_notes:
        parts.append("\n".join(f"- {shown(line)}" for line in split_notes))
    if ROUND in varied(dims):
        others = len([d for d in names if d != ROUND])
        parts += [h(ROUNDS_TITLE), _table(*rounds_table(rows, names), fmt, width, left, keep=max(others, 1)),
                  shown(ROUNDS_NOTE)]  # fmt: skip
    idle = no_effect_dims(rows, dims)
    for dim in varied(dims):
        # a row of a dimension's table is named by its swept values: every split part repeats them
        by = _table(*dimension_table(rows, names, dim), fmt, width, left, keep=len(names))
        parts += [h(f"By {dim_option(dim)}"), by]
        if dim in idle:
            parts.append(shown(f"{idle[dim]}: {IDLE_NOTE}"))
        elif dim in ("gpus", "nproc"):  # no speedup along devices that changed nothing
            for group, members in groups(rows, names, dim).items():
                srows = scaling_rows(members)
                if srows:
                    record = members[0].record
                    mode = members[0].params.get("scaling") or (record and record.config.scaling) or "weak"
                    text = scaling_table.render(srows, scaling=mode, fmt=fmt, width=width, left=left)
                    parts += [h(f"Scaling [{group}]" if group else "Scaling"), text.split("\n", 2)[-1].strip("\n")]
    roof_headers, roof_body = roofline_table(rows, dims)
    if roof_body:
        parts += [h(roofline_tables.SWEEP_TITLE), _table(roof_headers, roof_body, fmt, width, left)]
        moved = roofline_moved(rows, dims)
        parts.append(shown((f"{moved}. " if moved else "") + roofline_tables.SWEEP_NOTE))
    parts.append(
        "img/s: the cell's throughput (all measured images over the slowest rank's time, warm-up excluded), with the "
        "95% Student's t interval of its windows' mean (--repeats; none below 3 windows). No best is named along an "
        "option that had no effect or whose differences are within noise. "
        f"{TIME_NOTE} {TARGET_NOTE if target_of(rows) is not None else ''}Peak mem is device memory (on the CPU: the run's process tree, PSS, so forked workers' shared "
        "pages count once)."
    )
    if left:
        parts.append(
            f"Left out to fit {width} columns: {', '.join(left)}; sweep.txt, sweep.md and report.html hold every column."
        )
    return wrap_text("\n\n".join(parts), width) + "\n"

"""Pure: the results of one configuration at several device counts -> a scaling table.

speedup = throughput / throughput at the smallest count; ideal = count / smallest count;
efficiency = speedup / ideal. Under weak scaling the batch per device is fixed, so this is the
scaled speedup; under strong scaling the global batch is fixed (the seeds' ResNet-18 lab).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


from effbench import schema
from effbench.analysis import epoch_time
from effbench.fmt import fit_report_table, fmt_value, grid, wrap_text

HEADERS = (
    "devices",
    "global batch",
    "status",
    "img/s",
    "speedup",
    "ideal",
    "efficiency",
    "data s/epoch (measured)",
    "compute s/epoch (measured)",
    "total s/epoch (measured)",
    "warm-up s/epoch",
    "straggler spread %",
)
# The seconds per epoch: the measured steps' (warm-up excluded, as img/s), a run's epoch table averaged
# (epoch_time.per_epoch), the warm-up apart; the rows keep every step's too (data_time_per_epoch_s ...), unshown.


# Row keys that are the record's own fields, named from the model (never retyped)
DEVICES = schema.field_path(schema.Results, lambda r: r.devices)
GLOBAL_BATCH = schema.field_path(schema.Results, lambda r: r.global_batch_size)
STATUS = schema.field_path(schema.Results, lambda r: r.status)
THROUGHPUT = schema.field_path(schema.Results, lambda r: r.throughput_img_s)
RUN_NAME = schema.field_path(schema.Results, lambda r: r.run_name)


def _per_epoch(record: schema.Results, seconds: Callable[[schema.Epoch], float | None]) -> float | None:
    values = [v for v in (seconds(e) for e in record.epochs) if v is not None]
    return sum(values) / len(values) if values else None


def _devices(record: schema.Results) -> int:
    return record.devices or record.world_size or 1


def scaling_rows(runs: Sequence[schema.Results]) -> list[dict[str, Any]]:
    """One row per run, ordered by device count; runs that did not finish keep their status."""
    ordered = sorted(runs, key=_devices)
    base = next((r for r in ordered if r.status == "ok" and r.throughput_img_s), None)
    rows = []
    for r in ordered:
        n = _devices(r)
        thr = r.throughput_img_s if r.status == "ok" else None
        split = epoch_time.per_epoch(r)
        data, compute = split["measured_data_time_per_epoch_s"], split["measured_compute_time_per_epoch_s"]
        measured_total = data + compute if data is not None and compute is not None else None
        row: dict[str, Any] = {
            DEVICES: n,
            GLOBAL_BATCH: r.global_batch_size,
            STATUS: r.status,
            THROUGHPUT: thr,
            "speedup": None,
            "ideal_speedup": None,
            "efficiency": None,
            # every step, warm-up included (scaling.json only, as epochs.csv's data_time_s ...)
            "data_time_per_epoch_s": _per_epoch(r, lambda e: e.data_time_s),
            "compute_time_per_epoch_s": _per_epoch(r, lambda e: e.compute_time_s),
            "total_time_per_epoch_s": _per_epoch(r, lambda e: e.total_time_s),
            # what the table shows: the measured steps (the headline's), warm-up apart, and their source
            **split,
            "measured_time_per_epoch_s": measured_total,
            "straggler_spread_pct": r.stragglers.spread_pct if r.stragglers else None,
            RUN_NAME: r.run_name,
        }
        if base is not None and base.throughput_img_s and thr:
            row["speedup"] = thr / base.throughput_img_s
            row["ideal_speedup"] = n / _devices(base)
            row["efficiency"] = row["speedup"] / row["ideal_speedup"]
        rows.append(row)
    return rows


# (row key, decimals) of each HEADERS column, in order
COLUMNS = (
    (DEVICES, 2),
    (GLOBAL_BATCH, 2),
    (STATUS, 2),
    (THROUGHPUT, 1),
    ("speedup", 2),
    ("ideal_speedup", 2),
    ("efficiency", 2),
    ("measured_data_time_per_epoch_s", 2),
    ("measured_compute_time_per_epoch_s", 2),
    ("measured_time_per_epoch_s", 2),
    ("warmup_time_per_epoch_s", 2),
    ("straggler_spread_pct", 1),
)


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The scaling table's cells, one list per row under HEADERS (the text, markdown and HTML tables)."""
    return [[fmt_value(r[key], digits) for key, digits in COLUMNS] for r in rows]


# The columns a terminal too narrow for every column leaves out first (render's `width`).
TERMINAL_DROP = (
    "straggler spread %",
    "warm-up s/epoch",
    "total s/epoch (measured)",
    "compute s/epoch (measured)",
    "data s/epoch (measured)",
    "ideal",
)


def render(
    rows: Sequence[Mapping[str, Any]],
    *,
    scaling: str,
    fmt: str = "text",
    width: int | None = None,
    left: list[str] | None = None,
) -> str:
    """The scaling table and its notes. `width` (text only): the notes wrapped, the table within that many columns (fmt.fit_report_table): given
    `left`, the columns in TERMINAL_DROP left out first and added to `left`; without, every column kept, the table
    split into parts that each start with the devices."""
    if fmt == "md" or width is None:
        table = grid(table_rows(rows), HEADERS, fmt)
    else:
        table = fit_report_table(HEADERS, table_rows(rows), width, left=left, drop=TERMINAL_DROP)
    note = f"{scaling} scaling: " + (
        "batch per device fixed, so the global batch grows with the devices."
        if scaling == "weak"
        else "global batch fixed and split across the devices."
    )
    title = "# Scaling" if fmt == "md" else "Scaling"
    notes = "".join(f"\n{line}" for line in split_notes(rows))
    notes = wrap_text(f"{note} Efficiency = speedup / ideal speedup. {epoch_time.TIME_NOTE}{notes}", width)
    return f"{title}\n\n{table}\n\n{notes}\n"


def split_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per row whose seconds per epoch are not its epochs' measured split (epoch_time.source_note)."""
    notes = (epoch_time.source_note(r.get("time_split"), f"{r[DEVICES]} devices") for r in rows)
    return [n for n in notes if n]

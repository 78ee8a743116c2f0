"""Pure: the results of one configuration at several device counts -> a scaling table.

speedup = throughput / throughput at the smallest count; ideal = count / smallest count;
efficiency = speedup / ideal. Under weak scaling the batch per device is fixed, so this is the
scaled speedup; under strong scaling the global batch is fixed (the seeds' ResNet-18 lab).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from effbench import results
from effbench.analysis import epoch_time
from effbench.fmt import fmt_value

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


def _per_epoch(results: Mapping[str, Any], key: str) -> float | None:
    values = [e.get(key) for e in results.get("epochs", []) if e.get(key) is not None]
    return sum(values) / len(values) if values else None


def scaling_rows(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per run, ordered by device count; runs that did not finish keep their status."""
    ordered = sorted(runs, key=lambda r: r.get("devices") or r.get("world_size") or 1)
    base = next((r for r in ordered if r.get("status") == "ok" and r.get("throughput_img_s")), None)
    rows = []
    for r in ordered:
        n = r.get("devices") or r.get("world_size") or 1
        thr = r.get("throughput_img_s") if r.get("status") == "ok" else None
        split = epoch_time.per_epoch(results.record_of(r))
        data, compute = split["measured_data_time_per_epoch_s"], split["measured_compute_time_per_epoch_s"]
        measured_total = data + compute if data is not None and compute is not None else None
        row: dict[str, Any] = {
            "devices": n,
            "global_batch_size": r.get("global_batch_size"),
            "status": r.get("status"),
            "throughput_img_s": thr,
            "speedup": None,
            "ideal_speedup": None,
            "efficiency": None,
            # every step, warm-up included (scaling.json only, as epochs.csv's data_time_s ...)
            "data_time_per_epoch_s": _per_epoch(r, "data_time_s"),
            "compute_time_per_epoch_s": _per_epoch(r, "compute_time_s"),
            "total_time_per_epoch_s": _per_epoch(r, "total_time_s"),
            # what the table shows: the measured steps (the headline's), warm-up apart, and their source
            **split,
            "measured_time_per_epoch_s": measured_total,
            "straggler_spread_pct": (r.get("stragglers") or {}).get("spread_pct"),
            "run_name": r.get("run_name"),
        }
        if base is not None and thr:
            base_n = base.get("devices") or base.get("world_size") or 1
            row["speedup"] = thr / base["throughput_img_s"]
            row["ideal_speedup"] = n / base_n
            row["efficiency"] = row["speedup"] / row["ideal_speedup"]
        rows.append(row)
    return rows


# (row key, decimals) of each HEADERS column, in order
COLUMNS = (
    ("devices", 2),
    ("global_batch_size", 2),
    ("status", 2),
    ("throughput_img_s", 1),
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


def render(rows: Sequence[Mapping[str, Any]], *, scaling: str, fmt: str = "text") -> str:
    table = tabulate(
        table_rows(rows),
        headers=HEADERS,
        tablefmt="github" if fmt == "md" else "simple",
        disable_numparse=True,
    )
    note = f"{scaling} scaling: " + (
        "batch per device fixed, so the global batch grows with the devices."
        if scaling == "weak"
        else "global batch fixed and split across the devices."
    )
    title = "# Scaling" if fmt == "md" else "Scaling"
    notes = "".join(f"\n{line}" for line in split_notes(rows))
    return f"{title}\n\n{table}\n\n{note} Efficiency = speedup / ideal speedup. {epoch_time.TIME_NOTE}{notes}\n"


def split_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per row whose seconds per epoch are not its epochs' measured split (epoch_time.source_note)."""
    notes = (epoch_time.source_note(r.get("time_split"), f"{r['devices']} devices") for r in rows)
    return [n for n in notes if n]

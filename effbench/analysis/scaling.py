"""Pure: the results of one configuration at several device counts -> a scaling table.

speedup = throughput / throughput at the smallest count; ideal = count / smallest count;
efficiency = speedup / ideal. Under weak scaling the batch per device is fixed, so this is the
scaled speedup; under strong scaling the global batch is fixed (the seeds' ResNet-18 lab).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from effbench.fmt import fmt_value

HEADERS = (
    "devices",
    "global batch",
    "status",
    "img/s",
    "speedup",
    "ideal",
    "efficiency",
    "data s/epoch",
    "compute s/epoch",
    "total s/epoch",
    "straggler spread %",
)


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
        row: dict[str, Any] = {
            "devices": n,
            "global_batch_size": r.get("global_batch_size"),
            "status": r.get("status"),
            "throughput_img_s": thr,
            "speedup": None,
            "ideal_speedup": None,
            "efficiency": None,
            "data_time_per_epoch_s": _per_epoch(r, "data_time_s"),
            "compute_time_per_epoch_s": _per_epoch(r, "compute_time_s"),
            "total_time_per_epoch_s": _per_epoch(r, "total_time_s"),
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
    ("data_time_per_epoch_s", 2),
    ("compute_time_per_epoch_s", 2),
    ("total_time_per_epoch_s", 2),
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
    return f"{title}\n\n{table}\n\n{note} Efficiency = speedup / ideal speedup.\n"

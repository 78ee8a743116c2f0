"""Pure: measured steps -> K throughput windows -> median and 95% CI (`--repeats K`).

Why windows of one run rather than K runs: a cell is measured once, so its K samples come from
splitting its measured steps (warm-up excluded, epochs in order) into K contiguous windows of equal
step count; each window's throughput is its images over its data wait + compute time, the same
definition as the run's throughput. K defaults to min(5, measured steps). With several ranks the
steps are rank 0's and a window's throughput is scaled by the world size (like a one-rank run's
headline figure), so the interval reflects rank 0's variation only.

Works on the step rows the training loop yields and on rows read back from steps.csv (strings).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from effbench.analysis import stats
from effbench.errors import EffbenchError

DEFAULT_WINDOWS = 5
STEPS_FILE = "steps.csv"


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1", "yes")


def _float(v: Any) -> float:
    return float(v) if v not in (None, "") else 0.0


def measured_steps(step_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
    """The steps that count (warm-up flag false), as numbers, in the order they ran."""
    rows = []
    for r in step_rows:
        if _bool(r.get("warmup")):
            continue
        rows.append(
            {
                "images": _float(r.get("images")),
                "data_time_s": _float(r.get("data_time_s")),
                "compute_time_s": _float(r.get("compute_time_s")),
            }
        )
    return rows


def throughput_windows(
    step_rows: Iterable[Mapping[str, Any]], repeats: int | None, world_size: int = 1
) -> dict[str, Any]:
    """Per-window samples and their summaries; {"windows": 0} when nothing was measured."""
    steps = measured_steps(step_rows)
    k = repeats if repeats is not None else DEFAULT_WINDOWS
    bounds = stats.window_bounds(len(steps), k)
    thr, step_ms, share = [], [], []
    for start, end in bounds:
        part = steps[start:end]
        images = sum(s["images"] for s in part)
        data = sum(s["data_time_s"] for s in part)
        total = data + sum(s["compute_time_s"] for s in part)
        if total <= 0:
            continue
        thr.append(world_size * images / total)
        step_ms.append(1000.0 * total / len(part))
        share.append(data / total)
    out: dict[str, Any] = {"requested": k, "windows": len(thr), "steps": len(steps)}
    if thr:
        out["throughput_img_s"] = thr
        out["step_time_ms"] = step_ms
        out["data_time_share"] = share
        out["summary"] = {
            "throughput_img_s": stats.summarize(thr).to_dict(),
            "step_time_ms": stats.summarize(step_ms).to_dict(),
            "data_time_share": stats.summarize(share).to_dict(),
        }
    return out


def read_steps(run_dir: Path) -> list[dict[str, str]]:
    """steps.csv of a run folder as rows of strings; [] when absent (a run that never stepped)."""
    path = Path(run_dir) / STEPS_FILE
    if not path.is_file():
        return []
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise EffbenchError(str(path), f"is not a readable CSV ({e}); rerun the benchmark") from None
    for i, row in enumerate(rows, start=2):  # line 1 is the header
        for key in _STEP_NUMBERS:
            value = row.get(key)
            if value in (None, ""):
                continue
            try:
                ok = math.isfinite(float(value))
            except ValueError:
                ok = False
            if not ok:
                raise EffbenchError(
                    str(path), f"line {i}, column {key}: {value!r} is not a finite number; rerun the benchmark"
                )
    return rows


# The columns the windows read as numbers: a hand-edited steps.csv is input too.
_STEP_NUMBERS = ("images", "data_time_s", "compute_time_s")  # not loss: a diverged run writes nan there


def windows_of(record: Mapping[str, Any], step_rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The run's windows: recorded in results.json when the run wrote them, else from its steps."""
    saved = record.get("throughput_windows")
    if isinstance(saved, Mapping) and saved.get("windows") is not None:
        return dict(saved)
    repeats = (record.get("config") or {}).get("repeats")
    return throughput_windows(step_rows or [], repeats, int(record.get("world_size") or 1))


def throughput_summary(
    record: Mapping[str, Any], step_rows: Sequence[Mapping[str, Any]] | None = None
) -> stats.Summary | None:
    s = (windows_of(record, step_rows).get("summary") or {}).get("throughput_img_s")
    return stats.Summary.from_dict(s) if s else None

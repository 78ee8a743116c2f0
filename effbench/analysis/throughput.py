"""Pure: the one definition of throughput, used by every figure that says img/s.

    job_throughput(parts)   sum of the parts' images / the slowest part's time (data wait + compute)

A part is one rank's measured steps (warm-up excluded): its images and its time. With one rank this is
images / time; with several, the job ends when its slowest rank ends, so the job's rate is all images over
that rank's time. The step timer (run/timing.Tally), the epoch rows (run/train.EpochResult and
run/record.merge_epoch), the headline (run/record.headline, in progress and at the end) and the --repeats
windows (analysis/windows) all call this function, so they cannot disagree on the same rank rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def job_throughput(parts: Iterable[Mapping[str, Any]]) -> float | None:
    """Images per second of a job whose ranks measured `parts` ({"images", "time_s"} each).

    None when no part has a positive time (nothing measured): a rate of 0 would claim a measurement.
    """
    rows = list(parts)
    timed = [r for r in rows if (r.get("time_s") or 0.0) > 0]
    if not timed:
        return None
    images = sum(r.get("images") or 0 for r in rows)
    return images / max(r["time_s"] for r in timed)


def slowest(parts: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The part whose time bounds the job (the one `job_throughput` divides by); None when none timed."""
    timed = [r for r in parts if (r.get("time_s") or 0.0) > 0]
    return max(timed, key=lambda r: r["time_s"]) if timed else None

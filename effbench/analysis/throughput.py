"""Pure: the one definition of throughput, used by every figure that says img/s.

    job_throughput(parts)   sum of the parts' images / the slowest part's time (data wait + compute)

A part is one rank's measured steps (warm-up excluded): its images and its time. With one rank this is
images / time; with several, the job ends when its slowest rank ends, so the job's rate is all images over
that rank's time. The step timer (run/timing.Tally), the epoch rows (run/train.EpochResult and
run/record.merge_epoch), the headline (run/record.headline, in progress and at the end) and the --repeats
windows (analysis/windows) all call this function, so they cannot disagree on the same rank rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol, TypeVar


class Timed(Protocol):
    """A rank's measured images and time: a schema.Rank, a schema.Tally, or a `Part`."""

    @property
    def images(self) -> int | float | None: ...
    @property
    def time_s(self) -> float | None: ...


class Part(NamedTuple):
    images: int | float | None
    time_s: float | None


T = TypeVar("T", bound=Timed)


def _part(r: Timed) -> Part:
    return Part(r.images, r.time_s)


def job_throughput(parts: Iterable[Timed]) -> float | None:
    """Images per second of a job whose ranks measured `parts` (images and time_s each).

    None when no part has a positive time (nothing measured): a rate of 0 would claim a measurement.
    """
    rows = [_part(r) for r in parts]
    timed = [r.time_s for r in rows if r.time_s is not None and r.time_s > 0]
    if not timed:
        return None
    images = sum(r.images or 0 for r in rows)
    return images / max(timed)


def slowest(parts: Iterable[T]) -> T | None:
    """The part whose time bounds the job (the one `job_throughput` divides by); None when none timed."""
    timed = [r for r in parts if (_part(r).time_s or 0.0) > 0]
    return max(timed, key=lambda r: _part(r).time_s or 0.0) if timed else None

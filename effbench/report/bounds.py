"""Pure: how much of a long series a report draws or prints, so a reader's work is bounded by these numbers
and not by the record's length (`--epochs` allows 100,000; a results.json of 107,719 epoch rows fits under
the 64 MiB read cap, and one matplotlib bar per epoch took minutes).

    bins(100_000)         Bins(size=2000, n=100000): 50 bars of 2,000 epochs each
    means(values, b)      the mean of each bin (None where a bin holds no value)
    head_tail(100_000)    (range(0, 25), 99950, range(99975, 100000)): the rows a table shows, and how many it skips

Charts state their binning in the title (`Bins.note`), tables say how many rows they skip; the files
(epochs.csv, results.json) keep every row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from effbench.fmt import fmt_value

MAX_BARS = 50
"""Bars in one bar chart: categories (cells, runs) beyond it are left out and the title says so; epochs are binned."""
MAX_POINTS = 200
"""Points in one line of a line chart: a longer series is binned."""
TABLE_EDGE = 25
"""Rows a long table shows at each end."""


@dataclass(frozen=True)
class Bins:
    """`n` consecutive items in bins of `size` (the last may hold fewer)."""

    size: int
    n: int

    @property
    def count(self) -> int:
        return math.ceil(self.n / self.size) if self.n else 0

    def spans(self) -> list[range]:
        """Each bin's item indices."""
        return [range(start, min(start + self.size, self.n)) for start in range(0, self.n, self.size)]

    def note(self, unit: str = "epochs") -> str:
        """What a binned chart's title adds (empty when every item is its own bin)."""
        if self.size == 1:
            return ""
        return f"mean per bin of {self.size:,} {unit}: {self.n:,} {unit} in {self.count} bins"


def bins(n: int, most: int = MAX_BARS) -> Bins:
    """The fewest equal bins of consecutive items, at most `most` of them."""
    return Bins(max(1, math.ceil(n / most)), n)


def means(values: Sequence[float | None], b: Bins) -> list[float | None]:
    """The mean of each bin's values, None left out; None for a bin with no value."""
    out: list[float | None] = []
    for span in b.spans():
        got = [v for v in (values[i] for i in span) if v is not None]
        out.append(math.fsum(got) / len(got) if got else None)
    return out


def span_label(lo: object, hi: object, unit: str = "epoch") -> str:
    """`epoch 7` for one item, `epochs 1-2,000` for a bin from item `lo` to item `hi`."""
    return f"{unit} {fmt_value(lo)}" if lo == hi else f"{unit}s {fmt_value(lo)}-{fmt_value(hi)}"


def head_tail(n: int, edge: int = TABLE_EDGE) -> tuple[range, int, range]:
    """The rows a table of `n` shows: the first and last `edge`, and how many lie between (0: all shown)."""
    if n <= 2 * edge + 1:  # skipping one row would save nothing
        return range(n), 0, range(n, n)
    return range(edge), n - 2 * edge, range(n - edge, n)


def capped(n: int, most: int = MAX_BARS, unit: str = "runs") -> tuple[int, str]:
    """Categories a bar chart draws (the first `most`) and what its title adds ("" when all are drawn)."""
    if n <= most:
        return n, ""
    return most, f"the first {most} of {n:,} {unit} (the tables list every one)"

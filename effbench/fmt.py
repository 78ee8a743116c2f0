"""Units and how every report prints a value: one formatter, so a figure reads the same in the run
summary, the sweep tables, the HTML page, the leaderboard and `compare`. Pure, imports nothing of effbench.

    num(3.14159, 2) -> "3.14"   fmt_value(None) -> "-"   fmt_value(True) -> "on"   fmt_value(12345) -> "12,345"
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# IEC binary prefixes: every *_gib figure (memory, shm, disk) is bytes / GIB.
GIB = 2**30
MIB = 2**20


def num(value: float | None, digits: int = 2) -> str:
    """A figure: "-" when there is none, else `digits` decimals with thousands separators."""
    return "-" if value is None else f"{value:,.{digits}f}"


def fmt_value(value: Any, digits: int = 2) -> str:
    """Any report cell: "-" for no value; on/off for a boolean (the words the options take, as in
    `--batch-norm on,off`, and the sweep tables' swept values); floats as `num`; ints with thousands
    separators; anything else as str()."""
    if value is None:
        return "-"
    if isinstance(value, bool):  # before int: bool is a subclass of int
        return "on" if value else "off"
    if isinstance(value, float):
        return num(value, digits)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def decimals(values: Iterable[float | None], least: int = 2, most: int = 6) -> int:
    """Decimals that keep two significant digits of the smallest non-zero magnitude among `values`
    (at least `least`, at most `most`): a data-wait share of 0.0012% must not print as 0.00."""
    small = min((abs(v) for v in values if v), default=None)
    if small is None:
        return least
    return max(least, min(most, 1 - math.floor(math.log10(small))))


def interval(low: float | None, high: float | None, digits: int = 1, *, signed: bool = False) -> str:
    """A 95% CI as every report prints it, `[low, high]`; `signed` for a difference (`[-2.5, +0.9]`);
    "-" when there is no interval."""
    if low is None or high is None:
        return "-"
    sign = "+" if signed else ""
    return f"[{low:{sign},.{digits}f}, {high:{sign},.{digits}f}]"

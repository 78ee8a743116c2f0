"""Units and how every report prints a value: one formatter, so a figure reads the same in the run
summary, the sweep tables, the HTML page, the leaderboard and `compare`. Pure, imports nothing of effbench.

    num(3.14159, 2) -> "3.14"   fmt_value(None) -> "-"   fmt_value(True) -> "on"   fmt_value(12345) -> "12,345"
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
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


# --- tables that fit a terminal ---------------------------------------------------------------------------
# The narrowest a wrapped column gets: narrower, a figure with its interval ("1,234.5 [1,200.1, 1,300.2]") breaks
# inside a number.
MIN_WRAP = 8


def terminal_width() -> int | None:
    """The width to fit a table to: $COLUMNS when set, else the terminal's; None when stdout is no terminal (a pipe
    or a file keeps every column). shutil.get_terminal_size reads COLUMNS first, then the terminal."""
    import os
    import shutil
    import sys

    if not os.environ.get("COLUMNS") and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def fit_table(
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    width: int | None,
    *,
    drop: Sequence[str] = (),
    maxcolwidths: Sequence[int | None] | None = None,
    tablefmt: str = "simple",
) -> tuple[str, list[str]]:
    """A tabulate table of text cells no wider than `width` (None: as wide as it is): the columns named in `drop`
    are left out, in that order, while it is too wide; then the widest columns wrap, none below MIN_WRAP.
    Returns the table and the headers left out (say where they are). Pure."""
    from tabulate import tabulate

    keep = list(range(len(headers)))
    limits: list[int | None] = list(maxcolwidths) if maxcolwidths is not None else [None] * len(headers)
    left_out: list[str] = []

    def render() -> str:
        cols = [limits[i] for i in keep]
        return tabulate(
            [[row[i] for i in keep] for row in body],
            headers=[headers[i] for i in keep],
            tablefmt=tablefmt,
            disable_numparse=True,
            maxcolwidths=cols,
            maxheadercolwidths=cols,
        )

    text = render()
    if width is None:
        return text, left_out
    for name in drop:
        if _widest(text) <= width:
            break
        if name in headers and headers.index(name) in keep:
            keep.remove(headers.index(name))
            left_out.append(name)
            text = render()

    def shown(i: int) -> int:  # a column's width as drawn: its longest line, within its limit
        lines = [len(line) for cell in [headers[i], *(row[i] for row in body)] for line in str(cell).splitlines()]
        natural = max(lines, default=0)
        limit = limits[i]
        return natural if limit is None else min(natural, limit)

    while _widest(text) > width:
        wrappable = [i for i in keep if shown(i) > MIN_WRAP]
        if not wrappable:
            break
        i = max(wrappable, key=shown)
        limits[i] = max(MIN_WRAP, shown(i) - (_widest(text) - width))
        text = render()
    return text, left_out


def wrap_text(text: str, width: int | None) -> str:
    """Every line longer than `width` wrapped (a "- " bullet's continuation indented under its text); shorter lines,
    tables fitted to `width` among them, as they are."""
    import textwrap

    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = "  " if line.startswith("- ") else ""
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False) or [
            ""
        ]
    return "\n".join(out)

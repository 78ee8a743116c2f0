"""Units and how every report prints a value: one formatter, so a figure reads the same in the run
summary, the sweep tables, the HTML page, the leaderboard and `compare`. Pure, imports nothing of effbench.

    num(3.14159, 2) -> "3.14"   fmt_value(None) -> "-"   fmt_value(True) -> "on"   fmt_value(12345) -> "12,345"

Text that came from disk (folder and file names, hostnames, a results.json's strings) is shown through one
escaper per medium: `printable` for the terminal, `md` for markdown (`grid` makes every table with it);
report.html escapes its own (report/html.py).
"""

from __future__ import annotations

import math
import re
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


# The width of report.txt and of the run report on a terminal: a 100-column terminal (a tmux pane, a CI log
# viewer) shows it unwrapped; a wider terminal gets its own width (report_width).
REPORT_WIDTH = 100
# A key-value table's label column wraps beyond this, so a long label leaves its value room.
LABEL_WIDTH = 40


def report_width() -> int:
    """The columns a report printed now may use: REPORT_WIDTH, or the terminal's width when it is wider.
    shutil.get_terminal_size reads $COLUMNS first, then the terminal, and says 80 for a pipe or a file."""
    import shutil

    return max(REPORT_WIDTH, shutil.get_terminal_size().columns)


def widest(text: str) -> int:
    """The longest line of `text`, in characters: what a width is checked against."""
    return max((len(line) for line in text.splitlines()), default=0)


def wrap_cell(text: str, width: int | None) -> str:
    """A table cell with each of its lines wrapped at `width` (at spaces, never at a hyphen: "[-2.5, +0.9]" stays
    whole; a word longer than `width` is broken); None: as it is. The one wrap of a table's cells: tabulate's own
    (maxcolwidths, 0.9 and 0.10) passes every cell of a limited column through its number parser whatever
    disable_numparse says, and float("5,798.9") raises."""
    import textwrap

    if width is None:
        return str(text)
    return "\n".join(
        part for line in str(text).splitlines() for part in textwrap.wrap(line, width, break_on_hyphens=False) or [""]
    )


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
    are left out, in that order, while it is too wide; then the widest columns wrap (wrap_cell), none below MIN_WRAP.
    Returns the table and the headers left out (say where they are). Pure."""
    from tabulate import tabulate

    keep = list(range(len(headers)))
    limits: list[int | None] = list(maxcolwidths) if maxcolwidths is not None else [None] * len(headers)
    left_out: list[str] = []

    def render() -> str:
        return tabulate(
            [[wrap_cell(row[i], limits[i]) for i in keep] for row in body],
            headers=[wrap_cell(headers[i], limits[i]) for i in keep],
            tablefmt=tablefmt,
            disable_numparse=True,
        )

    text = render()
    if width is None:
        return text, left_out
    for name in drop:
        if widest(text) <= width:
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

    while widest(text) > width:
        wrappable = [i for i in keep if shown(i) > MIN_WRAP]
        if not wrappable:
            break
        i = max(wrappable, key=shown)
        limits[i] = max(MIN_WRAP, shown(i) - (widest(text) - width))
        text = render()
    return text, left_out


def fit_report_table(
    headers: Sequence[str],
    body: Sequence[Sequence[str]],
    width: int,
    *,
    left: list[str] | None = None,
    drop: Sequence[str] = (),
    keep: int = 1,
) -> str:
    """A report's text table within `width`, its cells through `printable`: given `left` (a terminal's copy), the
    columns named in `drop` left out first (fit_table), the headers left out added to `left`; then, or without
    `left`, a table still too wide keeps its columns, its headers wrapped at their words, split into parts that
    each repeat its first `keep` columns (grid, fit_columns); when even that does not fit, fit_table's, its widest
    cells wrapped. Pure but for `left`."""
    cells = [[printable(c) for c in row] for row in body]
    kept = list(range(len(headers)))
    fitted: str | None = None
    if left is not None:
        fitted, dropped = fit_table(headers, cells, width, drop=drop)
        kept = [i for i, h in enumerate(headers) if h not in dropped]
        left.extend(d for d in dropped if d not in left)
        if widest(fit_table([headers[i] for i in kept], [[r[i] for i in kept] for r in cells], None)[0]) <= width:
            return fitted  # the columns left out were enough: nothing wrapped
    split = grid([[row[i] for i in kept] for row in body], [headers[i] for i in kept], width=width, keep=keep)
    if fitted is not None and widest(split) > width and widest(fitted) <= width:
        return fitted  # a cell wider than the width: only wrapping it fits
    return split


def key_values(rows: Sequence[Sequence[str]], headers: Sequence[str], width: int) -> str:
    """A two-column text table (label, value) no wider than `width`, drawn as tabulate's `simple`: a label longer
    than LABEL_WIDTH wraps in its column, its next lines indented 2 (a reader, or a parser, tells them from a new
    row), and a long value wraps under its own start, beside its label. Wrapped here at word boundaries, not by
    tabulate's maxcolwidths: tabulate 0.9 turns a wrapped cell with a thousands separator ("5,798.9") into a float
    and fails. Pure."""
    import textwrap

    labels = max((len(h) for h in [headers[0], *(r[0] for r in rows)]), default=0)
    label_width = min(labels, LABEL_WIDTH)
    value_width = max(MIN_WRAP, width - label_width - 2)

    def wrap(text: str, at: int, indent: str = "") -> list[str]:
        return textwrap.wrap(text, at, subsequent_indent=indent, break_on_hyphens=False) or [""]

    cells = [(wrap(str(k), label_width, "  "), wrap(str(v), value_width)) for k, v in rows]
    widths = (
        max([len(headers[0]), *(len(line) for k, _ in cells for line in k)]),
        max([len(headers[1]), *(len(line) for _, v in cells for line in v)]),
    )
    out = [f"{headers[0].ljust(widths[0])}  {headers[1]}".rstrip(), f"{'-' * widths[0]}  {'-' * widths[1]}"]
    for k, v in cells:
        for i in range(max(len(k), len(v))):
            left = k[i] if i < len(k) else ""
            out.append(f"{left.ljust(widths[0])}  {v[i] if i < len(v) else ''}".rstrip())
    return "\n".join(out)


def fit_columns(headers: Sequence[str], body: Sequence[Sequence[str]], width: int, *, keep: int = 1) -> str:
    """A text table of many narrow columns no wider than `width`, every column kept: each header wraps at its
    words to its column's widest value (never narrower than its longest word); when the columns still do not fit,
    the table is split into several, one under another, each repeating the first `keep` columns (the row's
    name). Drawn as tabulate's `simple` (left-aligned, 2 spaces apart, a dashed rule), without its 2 columns of
    padding beside every header. Pure."""
    import textwrap

    cells = [[str(c).splitlines() or [""] for c in row] for row in body]

    def values(i: int) -> int:
        return max((len(line) for row in cells for line in row[i]), default=0)

    def wrapped(i: int) -> list[str]:
        word = max((len(w) for w in headers[i].split()), default=0)
        return textwrap.wrap(headers[i], max(values(i), word, 1), break_long_words=False,
                             break_on_hyphens=False) or [headers[i]]  # fmt: skip

    heads = [wrapped(i) for i in range(len(headers))]
    widths = [max(values(i), *(len(line) for line in heads[i])) for i in range(len(headers))]
    key = list(range(min(keep, len(headers))))
    groups: list[list[int]] = []
    for i in range(len(key), len(headers)):
        if not groups or sum(widths[j] + 2 for j in [*groups[-1], i]) - 2 > width:
            groups.append([*key, i])
        else:
            groups[-1].append(i)

    def lines(group: list[int], column: list[list[str]], bottom: bool) -> list[str]:
        depth = max(len(c) for c in column)
        # a header sits on its last line (its words end above the rule), a cell starts on the row's first
        padded = [([""] * (depth - len(c)) + c) if bottom else (c + [""] * (depth - len(c))) for c in column]
        return ["  ".join(p[k].ljust(widths[i]) for i, p in zip(group, padded, strict=True)).rstrip()
                for k in range(depth)]  # fmt: skip

    tables = []
    for g in groups or [key]:
        out = lines(g, [heads[i] for i in g], True)
        out.append("  ".join("-" * widths[i] for i in g))
        for row in cells:
            out += lines(g, [row[i] for i in g], False)
        tables.append("\n".join(out))
    return "\n\n".join(tables)


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


# Characters a terminal acts on instead of showing: C0 controls (ESC starts the escape sequences that retitle
# a window or clear the screen, BEL, CR, newline), DEL, the C1 controls (U+0080-U+009F: U+009B is a one-byte
# CSI), the line and paragraph separators, and the bidirectional overrides that reorder what is shown.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
_CONTROLS_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")


def printable(text: Any, *, newlines: bool = False) -> str:
    r"""`text` safe to print on a terminal: each control character shown as Python's repr shows it (ESC as
    `\x1b`, a newline as `\n`, U+202E as `\u202e`), every other character as it is. With `newlines`, a newline
    stays one (a table or a report printed whole). Every name found on disk that reaches the terminal goes
    through here (errors.EffbenchError, warnings, the CLI's output)."""
    pattern = _CONTROLS_BUT_NEWLINE if newlines else _CONTROLS
    return pattern.sub(lambda m: repr(m.group())[1:-1], str(text))


# Markdown that would act instead of showing: HTML (`<script>`, an entity), a table cell's end (`|`), emphasis,
# code, links and images, strike-through, a backslash (so the escapes added stay escapes). An underscore
# between two letters or digits (`batch_size`) is left alone: CommonMark never opens emphasis inside a word.
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_SPECIALS = re.compile(r"[\\`*\[\]|~#!]|(?<![^\W_])_|_(?![^\W_])")


def md(text: Any) -> str:
    """`text` as literal text in markdown (report.md, sweep.md, leaderboard.md): control characters as
    `printable` shows them, `&`, `<`, `>` as entities, and markdown's specials (`|`, `*`, `_` but inside a word,
    `` ` ``, `[`, `]`, `~`, `#`, `!`, a backslash) backslash-escaped, so a name renders as written and never ends
    a table cell."""
    shown = _MD_SPECIALS.sub(lambda m: "\\" + m.group(), printable(text))
    return "".join(_MD_ENTITIES.get(c, c) for c in shown)


def grid(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    fmt: str = "text",
    *,
    numparse: bool = False,
    width: int | None = None,
    keep: int = 1,
) -> str:
    """A report table: tabulate's `simple` for text, `github` for markdown (`fmt="md"`), every cell and header
    through `md` or `printable` (so a column is as wide as what is shown, and `cat report.txt` is as safe as
    the terminal's own output). The one way report.txt/.md, sweep.txt/.md, leaderboard.txt/.md and the
    scaling tables make theirs. Text with a `width`: fitted to it, every column kept, each part of a split table
    repeating the first `keep` columns (fit_columns)."""
    from tabulate import tabulate

    shown = md if fmt == "md" else printable
    rows = [[c if c is None else shown(c) for c in row] for row in rows]
    headers = [shown(h) for h in headers]
    if fmt != "md" and width is not None:  # every column kept, headers wrapped, split when still too wide
        return fit_columns(headers, [["-" if c is None else c for c in row] for row in rows], width, keep=keep)
    return tabulate(
        rows, headers=list(headers), tablefmt="github" if fmt == "md" else "simple", disable_numparse=not numparse
    )

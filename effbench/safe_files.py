"""The one reader of every file effbench reads back (results.json, sweep.json, env.json, config.json, the CSVs).

A run or sweep folder is input like any option: copied, shared, edited by hand, or built by someone who means
harm. Every file is read here, and anything but a small regular file of plain JSON or CSV is one
EffbenchError naming the file, at once:

    read_bytes(path)        a regular file only (a FIFO, device or folder is refused without blocking: the file
                            is opened O_NONBLOCK and fstat'ed), at most MAX_JSON_BYTES / MAX_CSV_BYTES
    load_json(path)         nesting at most MAX_DEPTH (counted before json.loads: its recursion dies near
                            1,000 levels), integers of at most MAX_INT_DIGITS digits (int() refuses more,
                            sys.int_max_str_digits), no NaN / Infinity, no number beyond FIGURE_MAX (1e50)
    read_csv_rows(path)     the same bounds on a CSV, rows as dicts of strings
    check_figure(x)         a number a figure may hold (finite, |x| <= FIGURE_MAX)

No torch import.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from effbench.errors import EffbenchError

# results.json of a long run with --repeats windows is a few MB; 64 MiB is far past any file effbench writes.
MAX_JSON_BYTES = 64 * 2**20
# steps.csv holds one ~80-byte row per step: 1 GiB is over ten million steps.
MAX_CSV_BYTES = 2**30
# effbench's own files nest under 10 levels; json's C decoder recurses per level (RecursionError near 1,000).
MAX_DEPTH = 100
# CPython refuses to parse longer integers (sys.int_max_str_digits, 4,300 by default) with a ValueError.
MAX_INT_DIGITS = 4300
# No figure a run records comes near 1e50 (a run's FLOPs are below 1e25, its bytes below 1e20). Statistics
# raise figures to the 4th power (Welch's degrees of freedom square a variance): 1e50**4 = 1e200 still fits a
# float, while 1e96 overflowed in `compare` (and 1.7e308 passed the schema, then `compare` died).
FIGURE_MAX = 1e50

# A JSON string, linear-time (no nested quantifier can backtrack): its brackets are not structure.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def file_kind(mode: int) -> str:
    """What a file is, in words, from its st_mode: "a FIFO", "a character device", ... (for one-line errors)."""
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path | str, *, limit: int = MAX_JSON_BYTES, fix: str = "pass the file effbench wrote") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; FileNotFoundError passes through (callers
    word a missing file their own way), any other problem is an EffbenchError naming the file and `fix`."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer would wait forever; the fstat below refuses it anyway
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise EffbenchError(str(path), f"is a folder, not a file; {fix}") from None
    except OSError as e:
        raise EffbenchError(str(path), f"cannot be read ({e.strerror}); {fix}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise EffbenchError(str(path), f"is {file_kind(st.st_mode)}, not a regular file; {fix}")
        if st.st_size > limit:
            raise EffbenchError(str(path), f"is {st.st_size:,} bytes, more than effbench reads ({limit:,}); {fix}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise EffbenchError(str(path), f"cannot be read ({e.strerror}); {fix}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew after the fstat
        raise EffbenchError(str(path), f"is more than {limit:,} bytes, more than effbench reads; {fix}")
    return data


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest, strings skipped, in linear time."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class _Refused(ValueError):
    """A number json.loads met that no effbench file holds (raised from the parse hooks)."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-')):,} digits (at most {MAX_INT_DIGITS:,})")
    value = int(text)
    if abs(value) > FIGURE_MAX:
        raise _Refused(f"the number {text[:20]}{'...' if len(text) > 20 else ''}, beyond any figure (at most 1e50)")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or abs(value) > FIGURE_MAX:
        raise _Refused(f"the number {text[:40]}, beyond any figure a run records (at most 1e50)")
    return value


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name}, which is not JSON (effbench writes null for a value it could not measure)")


def loads(text: str, *, where: str, fix: str) -> Any:
    """JSON text (from `where`, for the error) under the bounds above."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise EffbenchError(where, f"nests {depth:,} levels deep, more than effbench reads ({MAX_DEPTH}); {fix}")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except _Refused as e:
        raise EffbenchError(where, f"holds {e}; {fix}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise EffbenchError(where, f"is not readable JSON ({e}); {fix}") from None


def load_json(path: Path | str, *, fix: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON in a regular file, under every bound; FileNotFoundError passes through."""
    data = read_bytes(path, limit=limit, fix=fix)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EffbenchError(str(path), f"is not readable JSON ({e}); {fix}") from None
    return loads(text, where=str(path), fix=fix)


def read_csv_rows(path: Path | str, *, fix: str, limit: int = MAX_CSV_BYTES) -> list[dict[str, str]]:
    """A CSV file with a header, as rows of strings; FileNotFoundError passes through. A row's missing
    fields are None and its extra ones sit under the key None (csv.DictReader), for the caller to check."""
    data = read_bytes(path, limit=limit, fix=fix)
    try:
        return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as e:
        raise EffbenchError(str(path), f"is not a readable CSV ({e}); {fix}") from None


def check_figure(value: float) -> bool:
    """Whether a number read from a file can be a figure: finite and at most FIGURE_MAX in size."""
    return math.isfinite(value) and abs(value) <= FIGURE_MAX

"""A page section generated between two marker lines, and the write / `--check` command every generator offers
(tools/gen_cli_docs.py, tools/gen_record_docs.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def splice(page: str, begin: str, end: str, body: str) -> str:
    """`page` with what lies between the `begin` and `end` lines replaced by `body`."""
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n\n{body}\n\n{end}{tail}"


def run(argv: list[str], page_path: Path, begin: str, end: str, render: Callable[[str], str], script: str) -> int:
    """Rewrite the generated section of `page_path`; with --check, exit 1 when it is stale instead."""
    page = page_path.read_text(encoding="utf-8")
    if begin not in page or end not in page:
        print(f"{page_path}: the marker lines are missing", file=sys.stderr)
        return 1
    new = render(page)
    if "--check" in argv:
        if new != page:
            print(f"{page_path.relative_to(ROOT)} is stale: run .venv/bin/python tools/{script}", file=sys.stderr)
            return 1
        return 0
    page_path.write_text(new, encoding="utf-8")
    return 0

"""Pure: tables, PNG bytes and text -> one self-contained HTML page (report.html).

Everything is inline: CSS in a <style> element, images as base64 `data:` URIs, no scripts, no fonts,
no links to other hosts, so the file opens offline, from an e-mail or an archive. Every value is
HTML-escaped here; callers pass plain text.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from effbench import schema

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1b1b1b; overflow-wrap: break-word; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
.sub { color: #555; margin-top: 0; }
.headline { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 0.6em 2em; margin: 1em 0; }
.headline div { max-width: 100%; } .headline dt { color: #555; font-size: 0.85em; }
.headline dd { margin: 0; font-size: 1.15em; font-weight: 600; overflow-wrap: anywhere; }
.headline div:first-child dd { font-size: 2.2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; max-width: 100%; }
table.kv { max-width: min(100%, 64em); } table.kv td:first-child { min-width: 14em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; } td.num { white-space: nowrap; }
td.long { overflow-wrap: anywhere; }
th { background: #f0f3f7; }
tr.oom td { background: #fde8e8; } tr.failed td, tr.skipped td, tr.interrupted td { background: #fff4d6; }
.verdicts li { margin: 0.2em 0; } figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
pre { background: #f6f8fa; padding: 0.6em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85em; }
.note { color: #555; font-size: 0.9em; } .error { color: #a00000; font-weight: bold; }
.scroll { overflow-x: auto; }
"""


@dataclass
class Section:
    """One <h2> section; `blocks` are HTML fragments made by the helpers below."""

    heading: str
    blocks: list[str] = field(default_factory=list)


def esc(value: Any) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


# A figure as the tables print it: `1,234.5`, `-0.25`, `12.0%`, `3e-05`, or several joined by ` / `
# (`11,220,132 / 11,220,132`). Anything else (`1 in 0.253 s`, `65.7 [8.7, 102.7] over 3 windows`) is words.
_NUMBER = r"[-+\u2212]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?"
NUMERIC = re.compile(rf"{_NUMBER}(?: / {_NUMBER})*")
# A word longer than this (a path, a URL, a run name) may break anywhere: otherwise the table is at least as wide
# as its longest word, and one dataset path pushes every column of the page past a laptop's screen.
LONG_WORD = 40
MISSING = ("", "-")


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def is_number(value: Any) -> bool:
    return NUMERIC.fullmatch(_text(value).strip()) is not None


def _cell(value: Any, *, numeric: bool) -> str:
    """One <td>: numbers right-aligned on one line, words left-aligned and wrapped (table's CSS)."""
    text = _text(value)
    if numeric:
        return f'<td class="num">{esc(value)}</td>'
    if any(len(word) > LONG_WORD for word in text.split()):
        return f'<td class="long">{esc(value)}</td>'
    return f"<td>{esc(value)}</td>"


def numeric_columns(rows: Sequence[Sequence[Any]], width: int) -> list[bool]:
    """Per column: True when every cell that holds a value is a number (a `-` is a number missing)."""
    cols = []
    for i in range(width):
        given = [_text(r[i]).strip() for r in rows if i < len(r) and _text(r[i]).strip() not in MISSING]
        cols.append(bool(given) and all(is_number(v) for v in given))
    return cols


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    row_classes: Sequence[str] | None = None,
    table_id: str | None = None,
) -> str:
    """A table whose number columns (header included) are right-aligned and whose word columns wrap."""
    numeric = numeric_columns(rows, max([len(headers), *(len(r) for r in rows)]))
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if numeric[i] else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    for i, row in enumerate(rows):
        cls = (row_classes or [])[i] if row_classes and i < len(row_classes) else ""
        cls_attr = f' class="{esc(cls)}"' if cls else ""
        body.append(f"<tr{cls_attr}>" + "".join(_cell(c, numeric=numeric[j]) for j, c in enumerate(row)) + "</tr>")
    return _wrapped(f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>", table_id)


def key_values(pairs: Sequence[tuple[str, Any]], *, table_id: str | None = None) -> str:
    """Label | value rows, no header; each value aligned as what it is (a column of mixed figures and words)."""
    body = "".join(
        f"<tr>{_cell(label, numeric=False)}{_cell(value, numeric=is_number(value))}</tr>" for label, value in pairs
    )
    return _wrapped(f"<tbody>{body}</tbody>", table_id, cls="kv")


def _wrapped(inner: str, table_id: str | None, *, cls: str | None = None) -> str:
    # the scroll box is for a phone's width; at a laptop's the columns wrap instead (tests/e2e/test_report_html.py)
    id_attr = f' id="{esc(table_id)}"' if table_id else ""
    cls_attr = f' class="{esc(cls)}"' if cls else ""
    return f'<div class="scroll"><table{id_attr}{cls_attr}>{inner}</table></div>'


def figures(pairs: Sequence[tuple[str, Any]], *, element_id: str = "headline") -> str:
    """The figures a page opens with, large, above every table: the first is the headline (id `<element_id>-figure`)."""
    items = []
    for i, (label, value) in enumerate(pairs):
        dd_id = f' id="{esc(element_id)}-figure"' if i == 0 else ""
        items.append(f"<div><dt>{esc(label)}</dt><dd{dd_id}>{esc(value)}</dd></div>")
    return f'<dl class="headline" id="{esc(element_id)}">{"".join(items)}</dl>'


def image(png: bytes, *, alt: str, caption: str | None = None) -> str:
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def bullets(lines: Sequence[str], *, cls: str = "verdicts", element_id: str | None = None) -> str:
    id_attr = f' id="{esc(element_id)}"' if element_id else ""
    return f'<ul class="{esc(cls)}"{id_attr}>' + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


def paragraph(text: str, *, cls: str = "note") -> str:
    return f'<p class="{esc(cls)}">{esc(text)}</p>'


def preformatted(text: str) -> str:
    return f"<pre>{esc(text)}</pre>"


def local_href(path: str) -> str | None:
    """`path` (relative, `/`-separated: a cell's `cells/<key>/<run>/report.html`) as an href that can only
    name a file inside the report's folder, or None when it could name anything else.

    Each segment is percent-encoded whole (urllib.parse.quote with no safe character: `:` `/` `?` `#` `%` and
    every control included) and the href starts with `./`, so a folder named `javascript:alert(1)` or
    `https:` reads as a file name, never as a scheme, a host or a query. An absolute path, an empty segment
    (`a//b`, a protocol-relative `//host`) and `..` could leave the folder: None."""
    if not path or path.startswith("/"):
        return None
    segments = [s for s in path.split("/") if s != "."]
    if not segments or any(s in ("", "..") for s in segments):
        return None
    return "./" + "/".join(quote(s, safe="") for s in segments)


def link(path: str, text: str) -> str:
    """A link to a file inside the report's folder (a cell's report.html, `local_href`); any other target is
    plain text, never a link (report.html links to no host and runs no script)."""
    href = local_href(path)
    if href is None:
        return esc(text)
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def page(title: str, subtitle: str, sections: Sequence[Section], lead: Sequence[str] = ()) -> str:
    """The whole page: title, subtitle, the `lead` blocks (figures()), then each section that has blocks."""
    body = "".join(f"<section><h2>{esc(s.heading)}</h2>{''.join(s.blocks)}</section>" for s in sections if s.blocks)
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{CSS}</style></head>"
        f'<body><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)}</p>{"".join(lead)}{body}</body></html>\n'
    )


# (label, figure) of the page's Environment table, in order
ENV_ROWS: tuple[tuple[str, Callable[[schema.Env], Any]], ...] = (
    ("effbench", lambda e: e.effbench),
    ("python", lambda e: e.python),
    ("torch", lambda e: e.torch),
    ("torchvision", lambda e: e.torchvision),
    ("CUDA build", lambda e: e.cuda_build),
    ("cuDNN", lambda e: e.cudnn),
    ("CPU", lambda e: e.cpu_model),
    ("CPU cores usable / total", lambda e: f"{_or_dash(e.cpu_cores_usable)} / {_or_dash(e.cpu_cores_total)}"),
    ("GPUs", lambda e: ", ".join(str(g.name) for g in e.gpus) or "none"),
    ("driver", lambda e: e.driver_version),
    ("container runtime", lambda e: e.container_runtime),
    ("host", lambda e: e.hostname),
    # what the leaderboard calls it: under docker or podman the hostname is the container's id (system/machine.py)
    ("machine", lambda e: f"{e.machine} (from {e.machine_source})" if e.machine else None),
    ("platform", lambda e: e.platform),
)


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def environment_pairs(env: schema.Env) -> list[tuple[str, Any]]:
    """env.json as (label, value) rows; absent values show as '-'."""
    pairs: list[tuple[str, Any]] = [(label, figure(env)) for label, figure in ENV_ROWS]
    pairs += sorted(env.env_vars.items()) if env.env_vars else []
    return pairs

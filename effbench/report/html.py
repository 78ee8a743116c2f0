"""Pure: tables, PNG bytes and text -> one self-contained HTML page (report.html).

Everything is inline: CSS in a <style> element, images as base64 `data:` URIs, no scripts, no fonts,
no links to other hosts, so the file opens offline, from an e-mail or an archive. Every value is
HTML-escaped here; callers pass plain text.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from effbench import schema

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f0f3f7; } td:first-child, th:first-child { text-align: left; }
tr.oom td { background: #fde8e8; } tr.failed td, tr.skipped td, tr.interrupted td { background: #fff4d6; }
.verdicts li { margin: 0.2em 0; } figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
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


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    row_classes: Sequence[str] | None = None,
    table_id: str | None = None,
) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = (row_classes or [])[i] if row_classes and i < len(row_classes) else ""
        cls_attr = f' class="{esc(cls)}"' if cls else ""
        body.append(f"<tr{cls_attr}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    id_attr = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table{id_attr}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def key_values(pairs: Sequence[tuple[str, Any]], *, table_id: str | None = None) -> str:
    return table(("", ""), list(pairs), table_id=table_id).replace("<thead><tr><th></th><th></th></tr></thead>", "")


def image(png: bytes, *, alt: str, caption: str | None = None) -> str:
    data = base64.b64encode(png).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">{cap}</figure>'


def bullets(lines: Sequence[str], *, cls: str = "verdicts") -> str:
    return f'<ul class="{esc(cls)}">' + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


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


def page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    body = "".join(f"<section><h2>{esc(s.heading)}</h2>{''.join(s.blocks)}</section>" for s in sections if s.blocks)
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{CSS}</style></head>"
        f'<body><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)}</p>{body}</body></html>\n'
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
    ("platform", lambda e: e.platform),
)


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def environment_pairs(env: schema.Env) -> list[tuple[str, Any]]:
    """env.json as (label, value) rows; absent values show as '-'."""
    pairs: list[tuple[str, Any]] = [(label, figure(env)) for label, figure in ENV_ROWS]
    pairs += sorted(env.env_vars.items()) if env.env_vars else []
    return pairs

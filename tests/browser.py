"""Headless Chromium for the HTML report tests: on PATH, or the test is skipped (CI installs it: .ci/run).

    chromium_command(profile)          the browser and its flags, a fresh profile folder per test
    layout(page, tmp_path, 1280, 900)  where the page's tables and marked elements sit in such a window

report.html runs no script, so `layout` lays out a copy with one script added at the end of its body: it writes
each table's and each element-with-an-id's getBoundingClientRect() into the DOM, which `--dump-dom` prints.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]  # fmt: skip

# Runs where it stands, after everything above it is parsed and laid out; the page's images are data: URIs
# below the elements measured, so an image still decoding moves nothing measured.
_MEASURE = """<script>
(function () {
  function box(el) {
    var r = el.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, text: el.textContent};
  }
  var root = document.documentElement, out = {viewport_width: root.clientWidth, page_width: root.scrollWidth,
                                               tables: [], ids: {}};
  document.querySelectorAll("table").forEach(function (t) {
    var b = box(t), box_of = t.parentElement;
    out.tables.push({id: t.id, left: b.left, right: b.right,
                     scrolls: box_of.scrollWidth > box_of.clientWidth});
  });
  document.querySelectorAll("[id]").forEach(function (el) { out.ids[el.id] = box(el); });
  out.align = {figures: {}, words: {}};  // text-align as laid out: cells of figures (td.num), of words (the rest)
  document.querySelectorAll("td").forEach(function (td) {
    out.align[td.classList.contains("num") ? "figures" : "words"][getComputedStyle(td).textAlign] = true;
  });
  var pre = document.createElement("pre");
  pre.id = "effbench-layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def chromium_command(profile: Path) -> list[str]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return [found, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]


def layout(page: Path, tmp_path: Path, width: int, height: int) -> dict[str, Any]:
    """`page` laid out in a `width` x `height` window: viewport_width (the window less its scroll bar),
    page_width (the document's, wider when the page scrolls sideways), tables [{id, left, right, scrolls}],
    ids {id: {left, top, right, bottom, text}} in CSS px from the page's top left, and align {figures: {left,
    right...}, words: {...}}: the text-align values the cells of figures (td.num) and of words have."""
    source = Path(page).read_text()
    assert "<script" not in source and source.count("</body>") == 1
    measured = tmp_path / f"measured-{Path(page).name}"
    measured.write_text(source.replace("</body>", _MEASURE + "</body>"))
    command = [*chromium_command(tmp_path / "profile"), f"--window-size={width},{height}", "--dump-dom"]
    proc = subprocess.run([*command, measured.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="effbench-layout">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"chromium printed no layout (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def overflowing(shown: dict[str, Any]) -> list[dict[str, Any]]:
    """From `layout`: each table that reaches past the window or scrolls inside its box, and the page itself
    when it is wider than the window. Empty when nothing scrolls sideways."""
    width = shown["viewport_width"]
    wide = [t for t in shown["tables"] if t["left"] < 0 or t["right"] > width + 0.5 or t["scrolls"]]
    return wide + ([{"id": "the page", "right": shown["page_width"]}] if shown["page_width"] > width else [])

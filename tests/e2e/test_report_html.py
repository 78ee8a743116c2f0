"""report.html in a laptop's window (issue 47): at 1280 x 900 px in headless Chromium the headline figures sit on
the first screen and no table is wider than the page, for a real smoke run's folder and for one whose values are
long (a dataset path holding a 200-character word, a verdict of several lines); figures right-aligned, words left.
Before, every cell was one line (`white-space: nowrap`): the Summary table grew to 2,069 px on a smoke run, its
values off the screen's right.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from browser import layout, overflowing
from clitools import invoke
from effbench.report import html as H

pytestmark = pytest.mark.timeout(900)  # the session's smoke run (conftest.py) may be made inside the first test

WIDTH, HEIGHT = 1280, 900  # a laptop's browser window; HEIGHT is the first screen
# a folder name of 200 characters with no place to break a line (no space, `-` or `/`: underscores only)
LONG_PATH = "/mnt/shared/" + "_".join(f"sklearn_digits_as_an_image_folder_part{i}" for i in range(5)) + "/train"


def assert_fits(shown: dict[str, Any]) -> None:
    """No table wider than the window, none scrolling inside its box, and the page itself never sideways."""
    assert 1200 <= shown["viewport_width"] <= WIDTH  # the window less its scroll bar: the size asked for took
    assert overflowing(shown) == []
    assert shown["align"] == {"figures": {"right": True}, "words": {"left": True}}
    assert {t["id"] for t in shown["tables"]} >= {"summary", "epochs", "environment", "config"}


def assert_headline_on_first_screen(shown: dict[str, Any], record: dict[str, Any]) -> None:
    ids, width = shown["ids"], shown["viewport_width"]
    figure, headline, verdict = ids["headline-figure"], ids["headline"], ids["verdict"]
    # the figure to quote, as results.json has it, in the first screen's top left
    assert float(figure["text"].replace(",", "")) == pytest.approx(record["throughput_img_s"], abs=0.05)
    assert figure["left"] >= 0 and figure["right"] <= width and figure["top"] >= 0 and figure["bottom"] <= HEIGHT
    # the figures beside it (status, arch, device...) all inside the screen, the verdict starting on it
    assert headline["right"] <= width and headline["bottom"] <= HEIGHT, headline
    for value in (record["status"], record["config"]["arch"], record["device"]):
        assert value in headline["text"]
    assert verdict["top"] < HEIGHT - 50 and verdict["right"] <= width, verdict
    assert record["verdict"]["bottleneck"] in verdict["text"]


def test_a_smoke_runs_report_fits_1280_px_with_its_headline_on_the_first_screen(smoke_dir, tmp_path):
    record = json.loads((smoke_dir / "results.json").read_text())
    shown = layout(smoke_dir / "report.html", tmp_path, WIDTH, HEIGHT)
    assert_fits(shown)
    assert_headline_on_first_screen(shown, record)


def test_long_values_wrap_inside_the_page(smoke_dir, tmp_path, capsys):
    run = tmp_path / smoke_dir.name
    shutil.copytree(smoke_dir, run)
    record = json.loads((run / "results.json").read_text())
    record["data"]["shape"] = f"imagefolder {LONG_PATH}"  # a word of 200 characters in the dataset row
    record["data"]["root"] = record["config"]["data_dir"] = LONG_PATH
    v = record["verdict"]
    v["evidence"] = " ".join([v["evidence"]] * 4) + f"; read from {LONG_PATH}"
    v["advice"] = " ".join([v["advice"]] * 2)
    record["wall_time_by_phase_s"] |= {f"phase-{i}-with-a-long-name": 0.5 for i in range(12)}
    (run / "results.json").write_text(json.dumps(record))
    code, _, err = invoke(["report", run], capsys)
    assert code == 0, err
    page = (run / "report.html").read_text()
    assert page.count(LONG_PATH) >= 3 and "phase-11-with-a-long-name" in page  # the long values are drawn
    shown = layout(run / "report.html", tmp_path, WIDTH, HEIGHT)
    assert_fits(shown)
    assert_headline_on_first_screen(shown, record)


def test_figures_are_told_from_words_cell_by_cell():
    page = H.table(
        ("epoch", "status", "img/s", "params"),
        [[1, "ok", "1,234.5", "11,220,132 / 11,220,132"], [2, "failed", "-", "-"], [3, "oom", "-0.5%", "1e-05"]],
    )
    assert '<th class="num">epoch</th><th>status</th><th class="num">img/s</th>' in page  # a column's kind
    assert '<td class="num">1</td><td>ok</td><td class="num">1,234.5</td>' in page
    assert '<td class="num">-</td><td class="num">-</td></tr>' in page  # a figure missing, in a column of figures
    assert '<td class="num">-0.5%</td><td class="num">1e-05</td>' in page
    kv = H.key_values([("measured", "3 / 12"), ("warm-up", "1 in 0.253 s"), ("dataset", f"imagefolder {LONG_PATH}")])
    assert '<td class="num">3 / 12</td>' in kv and "<td>1 in 0.253 s</td>" in kv  # a column of both: each cell
    assert '<td class="long">imagefolder /mnt/' in kv  # may break inside its long word

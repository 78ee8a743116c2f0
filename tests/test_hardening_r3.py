"""Hardening, round three (issue 28, the red team's breaks): each test covers a class of input, not
only the red team's example, and each goes through the code the red team's command ran.

Every bad input ends in one `error:` line and exit 2 (or the behaviour docs/guarantees.md names), with
nothing written outside the run or sweep folder.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from clitools import invoke
from test_across_runs import _config, make_run

from effbench.analysis import export as ex


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


# --- 6. CSV formula injection ---------------------------------------------------------------------
FORMULAS = ["=cmd|' /C calc'!A0", "+SUM(A1)", "-2+3", "@SUM(A1)", "\t=1", "\r=1", "=1+1"]


@pytest.mark.parametrize("text", FORMULAS)
def test_export_csv_quotes_every_text_cell_a_spreadsheet_would_run(tmp_path, capsys, text):
    # the run name, the arch and a free config value all reach the CSV from files a user can write
    run = make_run(tmp_path / "runs" / "r", [100.0, 100.0], config=_config(arch=text, note=text, lr=-0.5))
    record = json.loads((run / "results.json").read_text())
    record["run_name"] = text
    (run / "results.json").write_text(json.dumps(record))
    code, out, err = invoke(["export", tmp_path / "runs"], capsys)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    header, row = rows[0], rows[1]
    cells = dict(zip(header, row))
    for col in ("run_name", "config.arch", "config.note"):
        assert cells[col] == "'" + text, (col, cells[col])
    # no text cell of the file starts a formula, whatever its column
    assert not [c for r in rows for c in r if c[:1] in ("=", "+", "@", "\t", "\r")]
    # numbers stay numbers: a negative figure is not quoted
    assert cells["config.lr"] == "-0.5"
    # JSON lines keep the exact text
    code, out, _ = invoke(["export", tmp_path / "runs", "--format", "jsonl"], capsys)
    line = json.loads(out.splitlines()[0])
    assert line["run_name"] == text and line["config.arch"] == text


def test_csv_cell_keeps_numbers_and_numeric_text_unquoted():
    assert ex.csv_cell(-3) == -3 and ex.csv_cell(-1.5e-3) == -1.5e-3
    assert ex.csv_cell("-3") == "-3" and ex.csv_cell("-1.5e-3") == "-1.5e-3" and ex.csv_cell("+2") == "+2"
    assert ex.csv_cell("-x") == "'-x" and ex.csv_cell("-") == "'-" and ex.csv_cell(None) == ""
    assert ex.csv_cell("plain") == "plain"

"""The run report within 100 columns (issue 47 item 2): report.txt, the terminal's copy, `run --quiet`, compare.

A 100x40 tmux window wrapped every row of the summary, epoch and roofline tables (31 of report.txt's 78 lines
were over 100 columns, the longest 579). Nothing may be lost to the fitting: every word a table held is still
in the text.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clitools import invoke
from effbench import results, schema
from effbench.fmt import REPORT_WIDTH, fit_columns, key_values, report_width
from effbench.report import tables

# A real smoke run's results.json (effbench run --smoke, commit aef98bb), as the record tests read it.
SMOKE_RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1-smoke-aef98bb.json"


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def words(text: str) -> list[str]:
    return text.split()


def test_report_txt_of_a_real_smoke_run_fits_100_columns_and_keeps_every_word(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SMOKE_RECORD, run / results.RESULTS_FILE)
    code, _, err = invoke(["report", run], capsys)
    assert code == 0, err
    text = (run / results.REPORT_TXT).read_text()
    assert widest(text) <= REPORT_WIDTH, [line for line in text.splitlines() if len(line) > REPORT_WIDTH]
    record = results.load_record(run)
    # every summary value, word for word, in the order the report gives them (a wrapped value reads on)
    shown = " ".join(words(text))
    for label, value in tables.summary_rows(record):
        assert " ".join(words(value)) in shown or all(w in shown for w in words(value)), (label, value)
    # the epoch table keeps every column: each header's words and the epoch's figures
    for header in tables.EPOCH_HEADERS:
        assert all(w in shown for w in words(header)), header
    for cell in tables.epoch_rows(record)[0]:
        assert cell in shown
    assert f"Verdict: {record.verdict.bottleneck}:" in text


def test_a_roofline_table_of_eleven_columns_fits_and_keeps_its_rows():
    from test_roofline_report import kinds, record

    from effbench.report import roofline_tables

    r = kinds(dw_ms=6.0, conv_ms=2.0)
    text = tables.render(record(r), "text")
    assert widest(text) <= REPORT_WIDTH
    table = text.split(roofline_tables.TITLE + "\n", 1)[1].split("\n\n", 1)[0]
    for row in roofline_tables.rows(r):  # every row on one line, its cells in order
        assert any(line.split() == " ".join(row).split() for line in table.splitlines()), row


def test_a_table_too_wide_for_its_width_splits_and_repeats_the_row_name():
    headers = ["epoch", *(f"column number {i} (s, measured)" for i in range(12))]
    body = [["1", *(f"{i}.000" for i in range(12))], ["2", *(f"{i}.500" for i in range(12))]]
    text = fit_columns(headers, body, 60)
    assert widest(text) <= 60
    parts = text.split("\n\n")
    assert len(parts) > 1 and all(p.splitlines()[-2].startswith("1 ") for p in parts)  # each names its rows
    flat = " ".join(text.split())
    assert all(f"{i}.500" in flat for i in range(12))
    # a header wraps at its words, never inside one
    assert "measured)" in flat and "measur" not in flat.replace("measured)", "")


def test_a_wrapped_value_with_thousands_separators_stays_text():
    # tabulate 0.9's maxcolwidths turned "1,475.2" into a float and raised (a data-only run's report, issue 47)
    text = key_values([("throughput (img/s), the figure to quote", "1,475.2 " * 12)], ("metric", "value"), 60)
    assert widest(text) <= 60 and text.count("1,475.2") == 12
    label = "a label longer than forty columns that has to wrap"
    lines = key_values([(label, "1")], ("metric", "value"), 60).splitlines()[2:]
    assert lines[1].startswith("  ")  # the label's next line indented: a reader tells it from a new row
    assert [w for w in " ".join(lines).split() if w != "1"] == label.split()


def test_report_width_is_100_or_the_terminals_when_wider(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert report_width() == 100
    monkeypatch.setenv("COLUMNS", "160")
    assert report_width() == 160


def _long_verdict() -> schema.Results:
    data = json.loads(SMOKE_RECORD.read_text())
    data["verdict"] = {"bottleneck": "cpu-underused", "evidence": "word " * 200, "advice": "advice " * 50}
    return results.record_of(data)


def test_quiet_is_at_most_five_lines_whatever_the_verdict():
    lines = tables.quiet_lines(_long_verdict(), Path("results/run/report.txt"), REPORT_WIDTH)
    assert len(lines) <= 5 and all(len(line) <= REPORT_WIDTH for line in lines)
    assert lines[0] == "status ok" and lines[1].startswith("throughput ") and "the figure to quote" in lines[1]
    assert lines[2].startswith("Verdict: cpu-underused: word") and lines[-1] == "report: results/run/report.txt"
    assert not any("advice" in line for line in lines)  # the advice is the report's


@pytest.mark.timeout(900)  # the session's smoke run (conftest.py) may be set up inside this test
def test_a_real_smoke_run_quiet_prints_its_headline_and_report_within_100_columns(smoke_dir):
    # --quiet printed the whole ~45-line report into a CI log; report.txt had lines of 579 columns
    from conftest import SMOKE_STDOUT

    printed = (smoke_dir.parent / SMOKE_STDOUT).read_text().splitlines()
    assert 3 <= len(printed) <= 5, printed
    assert printed[0] == "status ok" and printed[1].startswith("throughput ")
    assert printed[-1] == f"report: {smoke_dir / results.REPORT_TXT}"
    report = (smoke_dir / results.REPORT_TXT).read_text()
    assert widest(report) <= REPORT_WIDTH, [line for line in report.splitlines() if len(line) > REPORT_WIDTH]
    assert "Epochs" in report

"""Reports within 100 columns (issue 47 item 2): report.txt, the terminal's copy, `run --quiet`, compare; a sweep's
sweep.txt, what `effbench sweep` prints and `compare SWEEP_A SWEEP_B`.

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


# --- sweeps -------------------------------------------------------------------------------------------------------
SWEEP_DIMS = {"batch_size": [32, 128, 512], "workers": [0, 4]}


def _sweep(root: Path, speedup: float = 1.0) -> Path:
    """A 3 x 2 sweep as the runner leaves it: figures in the thousands (img/s "5,798.9", 5 windows each) and batch
    512 out of memory at both worker counts."""
    from test_sweep_report import make_sweep

    cells = [
        ({"batch_size": b, "workers": w}, {"devices": 1, "batch": b, "throughput": thr * speedup if thr else None,
                                           "data_s": d, "status": "ok" if thr else "oom"})
        for b, w, thr, d in ((32, 0, 5798.9, 0.4), (32, 4, 6012.3, 0.1), (128, 0, 12345.6, 0.3),
                             (128, 4, 13001.2, 0.05), (512, 0, None, 0.0), (512, 4, None, 0.0))
    ]  # fmt: skip
    return make_sweep(root, SWEEP_DIMS, cells)


def _row_lines(text: str, start: str) -> str:
    """The row whose first cell is `start`, its parts joined: each part of a split table repeats that cell."""
    parts = [line.split(maxsplit=1)[1] for line in text.splitlines() if line.startswith(start + " ")]
    return " ".join([start, *parts])


def test_sweep_txt_and_the_printed_sweep_fit_100_columns_and_keep_every_value(tmp_path, capsys, monkeypatch):
    # sweep.txt was 630 columns wide (its Cells table 204), and `effbench sweep` into a pipe or a CI log printed it whole
    from effbench.report import render
    from effbench.report import sweep_tables
    from effbench.sweep import manifest, runner

    folder = _sweep(tmp_path)
    render.write_sweep_reports(folder)
    text = (folder / "sweep.txt").read_text()
    assert widest(text) <= REPORT_WIDTH, [line for line in text.splitlines() if len(line) > REPORT_WIDTH]
    _, rows = render.load_sweep(folder)
    headers, body = sweep_tables.summary_table(rows, list(SWEEP_DIMS))
    for header in headers:  # every column, its header wrapped at its words
        assert all(w in words(text) for w in words(header)), header
    cells = text.split("Cells\n")[1].split("By --")[0]
    for row in body:  # every value, whole, on its cell's lines, in order
        assert " ".join(words(_row_lines(cells, row[0]))) == " ".join(words(" ".join(row))), row
    assert "5,798.9" in cells and "oom" in cells
    for dim in SWEEP_DIMS:  # a dimension's table: each part repeats the row's swept values
        h, b = sweep_tables.dimension_table(rows, list(SWEEP_DIMS), dim)
        table = text.split(f"By --{dim.replace('_', '-')}\n")[1].split("\n\n\n")[0]
        for r in b:
            assert all(cell in table for cell in r), r

    # `effbench sweep`, its runner (the leaf) patched, into a pipe: 100 columns, the columns left out named
    outcome = runner.SweepOutcome(folder, manifest.load_manifest(folder))
    monkeypatch.setattr(runner, "run_sweep", lambda *_a, **_k: outcome)
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = invoke(["sweep", "--batch-size", "32,128,512", "--workers", "0,4", "--device", "cpu"], capsys)
    assert code == 0, err
    printed = out.split("sweep folder: ")[0]
    assert widest(printed) <= REPORT_WIDTH, [line for line in printed.splitlines() if len(line) > REPORT_WIDTH]
    left = " ".join(words(printed.split(f"Left out to fit {REPORT_WIDTH} columns: ")[1].split(";")[0]))
    shown = " ".join(words(printed))
    for i, header in enumerate(headers):
        if header in left:
            continue
        for row in body:  # a kept column's every value, wrapped at its spaces
            assert " ".join(words(row[i])) in shown or all(w in shown for w in words(row[i])), (header, row[i])
    assert "5,798.9" in shown and "img/s [95% CI]" not in left and "val top-1" not in left


def test_the_printed_sweep_splits_a_table_it_cannot_shorten_and_breaks_no_word():
    # a table with no column to leave out (the roofline's, a column per cell) was wrapped by fit_table's widest
    # column first: "channels-last=off batch-size=32" came out as "channels" / "-last=of" / "f batch-"
    from test_roofline_report import kinds, record

    from effbench.report import roofline_tables, sweep_tables

    runs = ((False, 32, 6.0), (True, 32, 2.0), (False, 128, 5.0), (True, 128, 1.5), (False, 512, 4.0))
    rows = [
        sweep_tables.CellRow(key=f"00{i}", params={"channels_last": on, "batch_size": b}, status="ok",
                             record=record(kinds(dw_ms=dw, conv_ms=2.0)))
        for i, (on, b, dw) in enumerate(runs)
    ]  # fmt: skip
    dims = {"channels_last": [False, True], "batch_size": [32, 128, 512]}
    text = sweep_tables.render(rows, dims, title="t", fmt="text", width=REPORT_WIDTH, leave_out=True)
    assert widest(text) <= REPORT_WIDTH
    table = text.split(roofline_tables.SWEEP_TITLE)[1].split("kinds whose time moved most")[0]
    labels = sweep_tables.chart_labels(rows, list(dims))
    for label in labels:  # each cell's label, its words whole
        assert all(w in table.split() for w in label.split()), label
    assert len([line for line in table.splitlines() if line.startswith("convolution ")]) == 2  # split in two
    assert all(f"{ms:.2f} ms," in table for ms in (6.0, 2.0, 5.0, 1.5, 4.0))


def test_compare_of_two_sweeps_fits_100_columns_and_keeps_every_figure(tmp_path, capsys):
    # `compare SWEEP_A SWEEP_B` printed a 199-column table (each cell's throughput, step time and data wait)
    from effbench.analysis import compare as cmp
    from effbench.report import render

    a, b = _sweep(tmp_path / "a"), _sweep(tmp_path / "b", speedup=1.07)
    code, out, err = invoke(["compare", a, b], capsys)
    assert code == 0, err
    lines = [line for line in out.splitlines() if not line.startswith(("A: ", "B: "))]  # the paths as they are
    assert max(len(line) for line in lines) <= REPORT_WIDTH, [x for x in lines if len(x) > REPORT_WIDTH]
    assert f"A: {a}" in out and f"B: {b}" in out and "6 cells matched by their swept values" in out
    shown = " ".join(words(out))
    (_, rows_a), (_, rows_b) = render.load_sweep(a), render.load_sweep(b)
    for ra, rb in zip(rows_a, rows_b, strict=True):
        assert any(line.startswith(f"{ra.key} ") for line in lines), ra.key
        if ra.status != "ok":  # oom on both: its row says so
            continue
        for d in cmp.compare_runs(ra.record, [], rb.record, [])[: len(cmp.WINDOW_METRICS)]:
            # each side's figure (its interval is in its own sweep's report), the change and its interval, the
            # verdict: every word, wrapped
            for value in (d.metric, d.a.split(" [")[0], d.b.split(" [")[0], d.delta_pct, d.ci, d.verdict):
                assert all(w in shown for w in words(value)), (ra.key, d.metric, value)
    assert "Throughput: 4 of 6 matched cells differ outside noise." in out
    assert out.count("not ok on both") == 2

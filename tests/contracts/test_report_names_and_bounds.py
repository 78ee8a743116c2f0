"""Hardening, round four (issue 33), sections 5-8: what a name found on disk may do to a report or a terminal,
how much work a long record may cost a reader, a gate that "cannot tell", a run folder that vanishes, and a
leaderboard of many runs. Each test goes through the code the red team's command ran; each class has a case
of its own beside the red team's.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import warnings
from pathlib import Path

import pytest
from clitools import invoke
from test_across_runs import BASE, make_run
from test_sweep_report import fake_run

from effbench import fmt, results
from effbench.report import html as H
from effbench.sweep import manifest


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


# Everything a terminal acts on: C0 but newline, DEL, C1 (U+009B is a one-byte CSI), the bidi overrides.
TERMINAL_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _sweep_with_cells(root: Path, run_dirs: list[str]) -> Path:
    """A sweep folder whose cells ran into the given folders (as sweep.json names them)."""
    folder = root / "sweep-x"
    entries = [{"key": f"{i:03d}", "params": {"batch_size": 8 * (i + 1)}, "config": {}} for i in range(len(run_dirs))]
    m = manifest.new_manifest(
        name="sweep-x", preset=None, dims={"batch_size": [8 * (i + 1) for i in range(len(run_dirs))]}, zipped=False,
        cells=entries, command=["effbench", "sweep"],
    )  # fmt: skip
    for i, run_dir in enumerate(run_dirs):
        fake_run(folder / run_dir, devices=1, batch=8 * (i + 1), throughput=100.0 + i)
        m = manifest.update_cell(m, f"{i:03d}", status="ok", run_dir=run_dir)
    manifest.write_manifest(folder, m)
    return folder


# --- 5. Links in report.html ------------------------------------------------------------------------
def _hrefs(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


@pytest.mark.parametrize(
    "run_dir",
    [
        "javascript:alert(document.domain)",  # the red team's: a cell folder that is a URL scheme
        "cells/000/javascript:alert(document.domain)",
        "cells/000/JaVaScRiPt:alert(1)",  # schemes are case-insensitive
        "cells/000/data:text,x",  # another scheme that runs in some browsers
        "cells/000/https:",  # a scheme with no host: a link off the page
        "cells/000/a b%2e?x=1#frag",  # percent, query and fragment signs: a file name, never a query
    ],
)
def test_a_cell_folder_named_like_a_url_is_linked_as_a_percent_encoded_path_inside_the_report(
    tmp_path, capsys, run_dir
):
    folder = _sweep_with_cells(tmp_path, [run_dir])
    code, _, err = invoke(["report", folder], capsys)
    assert code == 0, err
    page = (folder / "report.html").read_text()
    hrefs = _hrefs(page)
    assert hrefs, "the cell's report.html is linked"
    for href in hrefs:
        # a relative path from `./`: no scheme can be read in it, whatever the folder's name
        assert href.startswith("./") and ":" not in href and "?" not in href and "#" not in href, href
        target = folder / urllib.parse.unquote(href)
        assert target.resolve().is_relative_to(folder.resolve()) and target.is_file(), href
    assert (folder / run_dir / "report.html").resolve() in [(folder / urllib.parse.unquote(h)).resolve() for h in hrefs]


@pytest.mark.parametrize(
    "path",
    ["https://example.com/x", "//example.com/x", "/etc/passwd", "../outside/report.html", "a/../../x", "a//b", "", "."],
)
def test_a_link_that_could_leave_the_reports_folder_is_plain_text(path):
    shown = H.link(path, "cell <1>")
    assert shown == "cell &lt;1&gt;" and "<a" not in shown


@pytest.mark.parametrize(
    "path",
    ["cells/k/r/report.html", "x:y/report.html", "tab\there/a", "new\nline/a", "back\\slash/a", "é/ü.html", "%41"],
)
def test_a_local_link_decodes_to_exactly_the_path_it_was_given(path):
    href = H.local_href(path)
    assert href is not None and href.startswith("./")
    assert re.fullmatch(r"\./[A-Za-z0-9%._~/-]*", href), href  # nothing but unreserved characters and escapes
    assert urllib.parse.unquote(href[2:]) == path


# --- 5. Names in report.md, sweep.md and leaderboard.md -------------------------------------------
MD_NAMES = ["<script>alert(1)</script>", "a|b|c", "**bold** _it_ `code` [x](javascript:alert(1)) ![i](x) ~~s~~", "&lt;"]


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _table_rows_are_whole(md: str) -> None:
    """Every row of every markdown table has as many cell borders as its header."""
    for block in re.split(r"\n\s*\n", md):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if lines:
            assert len({_unescaped_pipes(ln) for ln in lines}) == 1, block


@pytest.mark.parametrize("name", MD_NAMES)
def test_a_run_name_in_report_md_is_literal_text(tmp_path, capsys, name):
    run = make_run(tmp_path / "r", BASE)
    record = json.loads((run / "results.json").read_text())
    record["run_name"], record["config"]["arch"] = name, name
    (run / "results.json").write_text(json.dumps(record))
    code, _, err = invoke(["report", run], capsys)
    assert code == 0, err
    md = (run / "report.md").read_text()
    assert "<script" not in md and not re.search(r"(?<!\\)\]\(", md) and "**bold**" not in md and "`code`" not in md
    assert md.startswith("# effbench run " + fmt.md(name) + "\n")
    _table_rows_are_whole(md)


@pytest.mark.parametrize("name", MD_NAMES)
def test_a_hostname_in_leaderboard_md_is_literal_text(tmp_path, capsys, name):
    root = tmp_path / "nodes"
    make_run(root / "a", BASE, host=name)
    make_run(root / "b", [x + 50 for x in BASE], host="node-b")
    code, _, err = invoke(["report", root], capsys)
    assert code == 0, err
    md = (root / "leaderboard.md").read_text()
    assert "<script" not in md and not re.search(r"(?<!\\)\]\(", md) and fmt.md(name) in md
    _table_rows_are_whole(md)


def test_a_cell_value_in_sweep_md_is_literal_text(tmp_path, capsys):
    folder = _sweep_with_cells(tmp_path, ["cells/000/run", "cells/001/run"])
    m = manifest.load_manifest(folder)
    data = m.model_dump(exclude_unset=True)
    data["dims"] = {"note": ["<img src=x onerror=alert(1)>|", "b"]}
    for cell, value in zip(data["cells"], data["dims"]["note"], strict=True):
        cell["params"] = {"note": value}
    results.write_json(folder / manifest.MANIFEST_FILE, data)
    code, _, err = invoke(["report", folder], capsys)
    assert code == 0, err
    md = (folder / "sweep.md").read_text()
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;\\|" in md
    _table_rows_are_whole(md)


def test_the_markdown_escape_reads_back_as_the_text_it_was_given():
    """An independent reading: CommonMark's rule that a backslash before ASCII punctuation is that character,
    and HTML's three entities; the escaped text holds no raw `<`, `|`, `*`, `` ` `` or `[`."""
    for text in [*MD_NAMES, "back\\slash", "batch_size=32", "__init__", "C:\\x #1 !"]:
        shown = fmt.md(text)
        assert not re.search(r"(?<!\\)[|*`\[\]<]", shown), shown
        read = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", shown).replace("&lt;", "<").replace("&gt;", ">")
        assert read.replace("&amp;", "&") == text
    assert fmt.md("batch_size=32") == "batch_size=32"  # inside a word an underscore never opens emphasis


# --- 7. Names from disk on the terminal ---------------------------------------------------------------
HOSTILE = "z\x1b]0;TITLE\x07\x1b[2J\u202etxt.exe\x9b31m"


def test_an_empty_class_folder_named_with_escape_sequences_is_shown_escaped_in_the_warning(tmp_path, capsys):
    import fakedata

    from effbench.data import imagefolder

    root = fakedata.make_imagefolder(tmp_path / "data", classes=2, per_class=3)
    (root / HOSTILE).mkdir()
    imagefolder.load(root, val_fraction=0.5)
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "hold no image" in ln]
    assert not TERMINAL_CONTROLS.search(line), repr(line)
    assert fmt.printable(HOSTILE) in line and "\\x1b]0;TITLE\\x07\\x1b[2J\\u202etxt.exe\\x9b31m" in line


def test_a_hostname_and_a_folder_name_reach_report_and_compare_escaped(tmp_path, capsys):
    root = tmp_path / "nodes"
    make_run(root / HOSTILE, BASE, host="node\x1b[31m-$x^$")  # two runs of one host: told apart by folder
    make_run(root / "b", [x + 50 for x in BASE], host="node\x1b[31m-$x^$")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Glyph 27 missing" for a raw ESC in a chart label
        code, out, err = invoke(["report", root], capsys)  # the leaderboard is printed, and every file written
    assert code == 0, err
    assert "node\\x1b[31m-$x^$" in out and fmt.printable(HOSTILE) in out
    assert not TERMINAL_CONTROLS.search(out + err), repr(out + err)
    assert (root / "plots" / "leaderboard.png").is_file()  # `$x^$` drawn as text, not refused as math
    txt = (root / "leaderboard.txt").read_text()  # `cat leaderboard.txt` is as safe, and its columns line up
    assert not TERMINAL_CONTROLS.search(txt)
    rows = [ln for ln in txt.splitlines() if ln.startswith("node") and " ok " in ln]
    assert len(rows) == 2 and len({ln.index(" ok ") for ln in rows}) == 1
    # the host's two runs pooled: one row of the per-machine table, escaped the same way
    (pooled,) = [ln for ln in txt.splitlines() if ln.startswith("node") and " ok " not in ln]
    assert pooled.startswith("node\\x1b[31m-$x^$") and "150.0, 100.0" in pooled
    code, out, err = invoke(["compare", root / HOSTILE, root / "b"], capsys)
    assert code == 0, err
    assert fmt.printable(HOSTILE) in out and not TERMINAL_CONTROLS.search(out + err)


def test_export_to_a_terminal_shows_names_escaped_and_to_a_pipe_writes_them_exactly(tmp_path, capsys, monkeypatch):
    import sys

    run = make_run(tmp_path / "runs" / "r", BASE)
    record = json.loads((run / "results.json").read_text())
    record["run_name"] = HOSTILE
    (run / "results.json").write_text(json.dumps(record))
    code, piped, _ = invoke(["export", tmp_path / "runs"], capsys)
    assert code == 0 and HOSTILE in piped  # data for a program: the exact text
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, shown, _ = invoke(["export", tmp_path / "runs"], capsys)
    assert code == 0 and fmt.printable(HOSTILE) in shown and not TERMINAL_CONTROLS.search(shown)
    assert shown.count("\n") == piped.count("\n") == 2  # the header and the run, one line each


def test_an_error_naming_a_file_found_on_disk_is_one_escaped_line(tmp_path, capsys):
    root = tmp_path / "nodes"
    make_run(root / "a", BASE)
    bad = root / f"b{HOSTILE}\nerror: forged"
    bad.mkdir(parents=True)
    (bad / "results.json").write_text("{not json")
    code, _, err = invoke(["report", root], capsys)
    line = one_error_line(err)
    assert code == 2 and not TERMINAL_CONTROLS.search(line) and fmt.printable(HOSTILE) in line


@pytest.mark.parametrize("char", ["\x1b", "\x07", "\r", "\x08", "\x7f", "\x9b", "\u202e", "\u2028", "\x00"])
def test_every_terminal_control_is_shown_as_repr_shows_it(char):
    from effbench.errors import EffbenchError

    shown = fmt.printable(f"a{char}b")
    assert shown == "a" + repr(char)[1:-1] + "b" and not TERMINAL_CONTROLS.search(shown)
    e = EffbenchError(f"x{char}", f"the file y{char} is bad")
    assert not TERMINAL_CONTROLS.search(str(e)) and repr(char)[1:-1] in str(e)
    assert fmt.printable("line\nnext\tx", newlines=True) == "line\nnext\\tx"
    assert fmt.printable("é ü 中 ✓") == "é ü 中 ✓"  # printable text is left as it is


# --- 6. Work bounded by the record's size, not only its bytes ------------------------------------------
def _long_run(folder: Path, n_epochs: int) -> list[tuple[float, float, float]]:
    """A run folder whose results.json holds `n_epochs` epoch rows (the fields the reports read); returns each
    epoch's (measured data s, measured compute s, val top-1) as written."""
    folder.mkdir(parents=True)
    rows = [(0.01 * (i % 7), 1.0 + 0.001 * (i % 13), min(1.0, i / n_epochs)) for i in range(n_epochs)]
    epochs = [{"epoch": i + 1, "images": 64, "measured_images": 64, "measured_data_time_s": d, "measured_compute_time_s": c,
               "train_top1": v, "val_top1": v} for i, (d, c, v) in enumerate(rows)]  # fmt: skip
    record = {"schema_version": results.SCHEMA_VERSION, "status": "ok", "run_name": folder.name, "device": "cpu",
              "config": {"arch": "resnet18", "epochs": n_epochs}, "throughput_img_s": 64.0, "epochs": epochs}  # fmt: skip
    (folder / "results.json").write_text(json.dumps(record, separators=(",", ":")))
    return rows


class _Drawn:
    """What matplotlib was asked to draw: bars per call, points per line."""

    def __init__(self, monkeypatch):
        from matplotlib.axes import Axes

        self.bars: list[int] = []
        self.lines: list[int] = []
        bar, plot = Axes.bar, Axes.plot

        def counted_bar(ax, x, *a, **k):
            self.bars.append(len(x))
            return bar(ax, x, *a, **k)

        def counted_plot(ax, x, *a, **k):
            self.lines.append(len(x))
            return plot(ax, x, *a, **k)

        monkeypatch.setattr(Axes, "bar", counted_bar)
        monkeypatch.setattr(Axes, "plot", counted_plot)


def test_a_run_of_100000_epochs_is_reported_with_bounded_work(tmp_path, capsys, monkeypatch):
    import math
    import statistics
    import time

    from effbench.report import bounds, plots

    run = tmp_path / "long"
    rows = _long_run(run, 100_000)
    drawn = _Drawn(monkeypatch)
    calls = []
    stacked = plots.stacked_time_bars
    monkeypatch.setattr(plots, "stacked_time_bars", lambda *a, **k: calls.append((a, k)) or stacked(*a, **k))
    t0 = time.process_time()
    code, _, err = invoke(["report", run], capsys)
    cpu_s = time.process_time() - t0
    assert code == 0, err
    # one bar per bin of 2,000 epochs (ceil(100,000 / MAX_BARS)), each the mean epoch of its bin
    size = math.ceil(100_000 / bounds.MAX_BARS)
    (labels, data_s, compute_s, _path), kw = calls[0]
    assert len(labels) == 50 and labels[0] == "epochs 1-2,000" and labels[-1] == "epochs 98,001-100,000"
    assert f"mean per bin of {size:,} epochs: 100,000 epochs in 50 bins" in kw["title"]
    for k in (0, 17, 49):
        span = rows[k * size : (k + 1) * size]
        assert data_s[k] == pytest.approx(statistics.fmean(d for d, _, _ in span), rel=1e-12)
        assert compute_s[k] == pytest.approx(statistics.fmean(c for _, c, _ in span), rel=1e-12)
    assert max(drawn.bars) <= bounds.MAX_BARS and max(drawn.lines) <= bounds.MAX_POINTS
    # the tables: the first and last 25 epochs, and how many lie between (epochs.csv and results.json keep all)
    text = (run / "report.txt").read_text()
    first = text.split("Epochs\n", 1)[1].split("\n\n")[0].splitlines()  # its first part: headers wrap, columns split
    rule = next(i for i, ln in enumerate(first) if ln and not ln.replace("-", "").strip())
    epoch_lines = first[rule + 1 :]
    assert len(epoch_lines) == 51 and "... 99,950 epochs more" in epoch_lines[25]
    assert epoch_lines[0].split()[0] == "1" and epoch_lines[-1].split()[0] == "100,000"
    page = (run / "report.html").read_text()
    epoch_table = page.split('id="epochs"', 1)[1].split("</table>", 1)[0]
    assert epoch_table.count("<tr") == 1 + 51
    md = (run / "report.md").read_text()
    assert md.count("\n| ") < 80  # summary and epochs: tens of rows, not 100,000
    # seconds, not minutes (the red team's 60 MB record ran past 300 s); CPU time, generous for a loaded machine
    assert cpu_s < 90, cpu_s


def test_long_epoch_series_in_a_sweep_are_binned(tmp_path, capsys, monkeypatch):
    from effbench.report import bounds

    folder = _sweep_with_cells(tmp_path, ["cells/000/run", "cells/001/run"])
    data = json.loads((folder / manifest.MANIFEST_FILE).read_text())
    cell = folder / data["cells"][0]["run_dir"] / "results.json"
    record = json.loads(cell.read_text())
    record["epochs"] = [{**record["epochs"][0], "epoch": i + 1, "val_top1": i / 5000} for i in range(5000)]
    cell.write_text(json.dumps(record))
    drawn = _Drawn(monkeypatch)
    code, _, err = invoke(["report", folder], capsys)
    assert code == 0, err
    # 5,000 epochs: 200 points of 25 epochs each, in the sweep's top-1 chart and the cell's own (bars: 50 bins)
    assert drawn.lines and max(drawn.lines) == bounds.MAX_POINTS and max(drawn.bars) == bounds.MAX_BARS


def test_a_bar_chart_of_more_categories_than_it_can_show_draws_the_first_and_says_so(tmp_path, monkeypatch):
    from effbench.report import bounds, plots

    titles = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: titles.append(fig.axes[0].get_title()) or path)
    n = bounds.MAX_BARS * 4
    plots.throughput_bars([f"r{i}" for i in range(n)], [1.0] * n, [None] * n, [None] * n, tmp_path / "t.png", title="T")
    plots.stacked_time_bars([f"r{i}" for i in range(n)], [1.0] * n, [1.0] * n, tmp_path / "s.png", title="S")
    assert titles == [f"{t} (the first {bounds.MAX_BARS} of {n:,} bars (the tables list every one))" for t in "TS"]


def test_bins_means_and_head_tail_against_hand_counts():
    from effbench.report import bounds

    b = bounds.bins(10, most=4)  # ceil(10 / 4) = 3 per bin: [0..2] [3..5] [6..8] [9]
    assert (b.size, b.count) == (3, 4) and [list(s) for s in b.spans()] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert bounds.means([1, 2, 3, 4, None, 6, None, None, None, 10], b) == [2.0, 5.0, None, 10.0]
    assert bounds.bins(50).size == 1 and bounds.bins(50).note() == ""
    assert bounds.head_tail(51, edge=25) == (range(51), 0, range(51, 51))
    assert bounds.head_tail(52, edge=25) == (range(25), 2, range(27, 52))


# --- 6. The gate when the windows are too few to give an interval -------------------------------------
def _gated(thr: float, windows: list[float], steps: int = 2):
    return results.record_of({"schema_version": 1, "status": "ok", "throughput_img_s": thr,
                              "measured": {"steps": steps, "images": 0, "data_time_s": 0.0, "compute_time_s": 0.0, "time_s": 0.0},
                              "throughput_windows": {"windows": len(windows), "steps": steps, "throughput_img_s": windows}})  # fmt: skip


def _gate_files(tmp_path: Path, a: tuple[float, list[float]], b: tuple[float, list[float]]) -> tuple[Path, Path]:
    paths = []
    for name, (thr, w) in (("a", a), ("b", b)):
        record = _gated(thr, w).model_dump(exclude_unset=True)
        record.update(run_name=name, config={"arch": "resnet18"})
        (tmp_path / name).mkdir()
        results.write_json(tmp_path / name / "results.json", record)
        paths.append(tmp_path / name)
    return paths[0], paths[1]


def test_a_gap_far_beyond_any_noise_fails_the_gate_even_with_two_windows(tmp_path, capsys):
    # the red team's: B at 1e-300 img/s, A at 25.7, two windows each
    a, b = _gate_files(tmp_path, (25.7, [25.5, 25.9]), (1e-300, [1e-300, 1e-300]))
    code, out, err = invoke(["compare", a, b, "--fail-if-slower", "5"], capsys)
    line = out.strip().splitlines()[-1]
    assert code == 1, (out, err)
    assert line.startswith("FAIL --fail-if-slower 5: B is 100.0% slower than A") and "too few windows" in line
    assert "B's fastest window is 100.0% below A's slowest, more than 15%" in line


@pytest.mark.parametrize(
    "a, b, pct, failed",
    [
        ((100.0, [100.0, 101.0]), (50.0, [49.0, 51.0]), 10.0, True),  # 49.5% apart > 10 + 10
        ((100.0, [100.0]), (70.0, [70.0]), 10.0, True),  # one window each: 30% apart > 20
        ((100.0, [100.0]), (85.0, [85.0]), 10.0, False),  # 15% slower, 15% apart: not clear of 10 + 10
        ((100.0, [100.0, 80.0]), (75.0, [75.0, 79.0]), 5.0, False),  # 25% slower, but the windows nearly meet
        ((100.0, [100.0, 101.0]), (99.0, [98.9, 99.1]), 0.0, False),  # a zero threshold: the 10-point floor
        ((100.0, [100.0, 101.0]), (85.0, [84.0, 86.0]), 0.0, True),  # ... which 15% clears
        ((21.0, [20.0, 21.0, 22.0]), (11.0, [10.0, 12.0]), 25.0, False),  # 40% apart, 25 + 25 needed
        ((50.0, [49.0, 51.0]), (100.0, [99.0, 101.0]), 5.0, False),  # B faster: never fails
    ],
)
def test_the_too_few_windows_rule_on_both_sides_of_the_clear_gap(a, b, pct, failed):
    from effbench.analysis import compare as cmp

    gate = cmp.slower_gate(_gated(*a), a[1], _gated(*b), b[1], pct)
    assert gate.failed is failed, gate.line
    # an independent reading of the documented rule: slower than the threshold by the runs' figures, and B's
    # fastest window below A's slowest by more than the threshold plus max(threshold, 10) points
    apart = 100 * (min(a[1]) - max(b[1])) / min(a[1])
    assert failed == (100 * (a[0] - b[0]) / a[0] > pct and apart > pct + max(pct, 10.0))
    assert ("cannot tell" in gate.line) is (not failed)


# --- 7. The run folder deleted or moved while the run trains -------------------------------------------
TINY_RUN = ["run", "--dataset", "synthetic", "--arch", "resnet18", "--image-size", "16", "--weights", "none",
            "--device", "cpu", "--workers", "0", "--max-steps", "3", "--warmup-steps", "1", "--epochs", "2",
            "--batch-size", "2", "--no-profile", "--quiet"]  # fmt: skip


@pytest.mark.parametrize(
    "phase, how",
    [("epochs", "delete"), ("model", "move")],  # the red team's: deleted while epoch 1 trains; moved while built
)
def test_a_run_folder_that_vanishes_mid_run_is_one_error_line_naming_it(tmp_path, capsys, monkeypatch, phase, how):
    import shutil
    import threading

    from effbench.run import faults

    out = tmp_path / "out"
    gone: list[Path] = []

    def hold(name, until, env=None):  # the hook each phase calls (faults.hold_phase), here deterministic
        if name == phase:
            (run,) = [p for p in out.iterdir() if p.is_dir()]
            shutil.rmtree(run) if how == "delete" else run.rename(tmp_path / "moved")
            gone.append(run)

    monkeypatch.setattr(faults, "hold_phase", hold)
    threads = threading.active_count()
    code, _, err = invoke([*TINY_RUN, "--output", out], capsys)
    (run,) = gone
    line = one_error_line(err)
    assert code == 2 and str(run) in line and "deleted or moved" in line, err
    assert not run.exists() and not list(out.iterdir())  # nothing written back, no temporary file left
    if how == "move":
        assert not [p for p in (tmp_path / "moved").iterdir() if p.name.endswith(".tmp")]
    assert threading.active_count() <= threads  # the sampler thread ended with the run


# --- 8. A leaderboard of many runs: work per run, not per pair ----------------------------------------
def _runs(n: int):
    import random

    from effbench.analysis.export import Run

    rng = random.Random(0)
    out = []
    for i in range(n):
        f = rng.uniform(100, 300)
        row = {"status": "ok", "throughput_img_s": f, "host": f"node-{i % 7}", "path": f"/r/run{i}",
               "config.arch": "resnet18" if i % 3 else "resnet50", "env.gpu_count": 1}  # fmt: skip
        out.append(Run(row, [f * rng.uniform(0.95, 1.05) for _ in range(3)]))
    return out


@pytest.mark.parametrize("n", [300, 1200])
def test_the_leaderboard_does_a_bounded_amount_of_work_per_run(monkeypatch, n):
    from effbench.analysis import leaderboard as lb
    from effbench.report import leaderboard as rl

    counts = {"difference": 0, "machine_label": 0, "env_differences": 0, "config_key": 0}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*a, **k):
            counts[name] += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, wrapper)

    counted(lb.stats, "difference")
    for name in ("machine_label", "env_differences", "config_key"):
        counted(lb, name)
    groups = lb.leaderboard(_runs(n))
    rl.render(groups, title="t", fmt="md")
    assert sum(len(g.entries) for g in groups) == n
    # at most once per run and once per machine over its runs (a pairwise loop would be n^2 / 2): 300 and 1,200
    # runs, the same bound
    assert counts["difference"] <= 2 * n and counts["env_differences"] <= 2 * n
    assert counts["machine_label"] <= n and counts["config_key"] <= n


def test_a_sweep_json_is_read_once_however_many_of_its_cells_are_exported(tmp_path, monkeypatch):
    from effbench.analysis import export as ex

    folder = _sweep_with_cells(tmp_path, [f"cells/{i:03d}/run" for i in range(40)])
    reads = []
    load = ex.M.load_manifest
    monkeypatch.setattr(ex.M, "load_manifest", lambda f: reads.append(f) or load(f))
    runs = ex.collect([folder])
    assert len(runs) == 40 and {r.row["kind"] for r in runs} == {"sweep-cell"}
    assert [r.row["swept.batch_size"] for r in runs] == [8 * (i + 1) for i in range(40)]
    assert len(reads) == 1  # read and scanned per cell, a sweep of n cells cost n^2 (250 cells: 10 s)


def test_a_leaderboard_of_many_runs_draws_a_bounded_chart(tmp_path, capsys, monkeypatch):
    from effbench.report import bounds

    root = tmp_path / "nodes"
    for i in range(bounds.MAX_BARS + 10):
        make_run(root / f"r{i:03d}", [x + i for x in BASE], host=f"node-{i}")
    drawn = _Drawn(monkeypatch)
    code, out, err = invoke(["report", root], capsys)
    assert code == 0, err
    assert drawn.bars == [bounds.MAX_BARS]  # one chart, the first 50 rows of the table
    assert out.count("node-") >= bounds.MAX_BARS + 10  # the table lists every run


def _parallel(monkeypatch, from_runs: int) -> None:
    """collect's parallel read, from `from_runs` runs on, with two readers whatever this machine has."""
    from effbench.analysis import export as ex
    from effbench.system import hardware

    monkeypatch.setattr(ex, "PARALLEL_FROM", from_runs)
    monkeypatch.setattr(hardware, "allowed_cores", lambda: 2.0)


def test_runs_read_in_parallel_are_the_runs_read_one_by_one_in_order(tmp_path, monkeypatch):
    from effbench.analysis import export as ex

    root = tmp_path / "many"
    for i in range(12):
        make_run(root / f"r{i:02d}", [x + i for x in BASE], host=f"node-{i % 3}")
    alone = ex.collect([root])
    _parallel(monkeypatch, 4)
    calls = []
    import concurrent.futures as cf

    class Counted(cf.ProcessPoolExecutor):
        def __init__(self, *a, **k):
            calls.append(a[0] if a else k.get("max_workers"))
            super().__init__(*a, **k)

    monkeypatch.setattr(cf, "ProcessPoolExecutor", Counted)
    together = ex.collect([root])
    assert calls == [2]  # the pool ran, with two readers
    assert [r.row for r in together] == [r.row for r in alone]
    assert [r.windows_img_s for r in together] == [r.windows_img_s for r in alone]


def test_a_bad_file_read_in_parallel_is_the_same_one_line_error(tmp_path, monkeypatch, capsys):
    root = tmp_path / "many"
    for i in range(12):
        make_run(root / f"r{i:02d}", [x + i for x in BASE])
    for bad in ("r05", "r09"):  # the first in order is the one named, as a sequential read names it
        (root / bad / "results.json").write_text('{"schema_version": 1, "status": "ok", "x": 1e999}')
    alone = invoke(["report", root, "-o", tmp_path / "a"], capsys)
    _parallel(monkeypatch, 4)
    together = invoke(["report", root, "-o", tmp_path / "b"], capsys)
    assert alone[0] == together[0] == 2
    assert together[2] == alone[2] and together[2].count("\n") == 1 and "r05" in together[2], together[2]
    assert "Traceback" not in together[2]

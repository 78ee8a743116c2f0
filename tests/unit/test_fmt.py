"""The one number formatter (effbench/fmt.py) and the one GIB / STEPS_FILE: expected strings written out by hand."""

from __future__ import annotations

import re
from pathlib import Path

from effbench import fmt, results
from effbench.analysis import windows
from effbench.measure import monitor
from effbench.system import hardware, preflight

PACKAGE = Path(__file__).resolve().parents[2] / "effbench"


def test_values_print_one_way():
    assert fmt.fmt_value(None) == "-" and fmt.num(None) == "-"
    assert fmt.fmt_value(True) == "on" and fmt.fmt_value(False) == "off"  # not 1/0: bool is an int
    assert fmt.fmt_value(1234567) == "1,234,567"
    assert fmt.fmt_value(1234.5678) == "1,234.57" and fmt.fmt_value(1234.5678, 3) == "1,234.568"
    assert fmt.num(0.5, 1) == "0.5" and fmt.num(3, 2) == "3.00"  # a figure is a figure even when an int
    assert fmt.fmt_value("resnet18") == "resnet18"
    assert fmt.interval(1398.14, 1421.06) == "[1,398.1, 1,421.1]" and fmt.interval(None, 2.0) == "-"
    assert fmt.interval(-2.54, 0.91, signed=True) == "[-2.5, +0.9]" and fmt.interval(0.1234, 0.5, 3) == "[0.123, 0.500]"


def test_one_gib_and_one_steps_file():
    assert fmt.GIB == 1024 * 1024 * 1024 and fmt.MIB == 1024 * 1024
    assert hardware.GIB is fmt.GIB and preflight.GIB is fmt.GIB and monitor.GIB is fmt.GIB
    assert windows.STEPS_FILE is results.STEPS_FILE == "steps.csv"


def test_no_module_defines_its_own_formatter_or_constant():
    """A second copy would drift (yes/no in one table, on/off in another): the copies folded into fmt.py.
    Report cells are made in report/ and analysis/; byte units and the steps file are package-wide."""
    formatter = re.compile(r"^def (_fmt|_f|_num)\(", re.M)
    constant = re.compile(r"^(GIB|MIB|STEPS_FILE) = ", re.M)
    found = [
        f"{p.relative_to(PACKAGE)}: {m.group(0)}"
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("fmt.py", "results.py")
        for pattern in ((formatter, constant) if p.parent.name in ("report", "analysis") else (constant,))
        for m in pattern.finditer(p.read_text())
    ]
    assert found == []


def test_fit_table_leaves_out_the_named_columns_first_then_wraps():
    from effbench.fmt import fit_table, wrap_text

    headers = ["cell", "img/s", "a long explanation", "extra one", "extra two"]
    body = [["000", "1,234.5 [1,200.1, 1,300.2]", "words " * 12, "x" * 30, "y" * 30]]
    full, left = fit_table(headers, body, None, drop=["extra two", "extra one"])
    assert left == [] and max(map(len, full.splitlines())) > 120  # no width: as wide as it is
    for width in (120, 80, 50):
        text, left = fit_table(headers, body, width, drop=["extra two", "extra one"])
        assert max(map(len, text.splitlines())) <= width, text
        assert left == ["extra two", "extra one"][: len(left)] and "y" * 30 not in text
        assert " ".join(text.split()).count("words") == 12  # wrapped, never cut
    assert fit_table(headers, body, 400, drop=["extra two"])[1] == []  # it fits: nothing left out
    said = wrap_text("short\n- " + "a bullet that goes on " * 6, 40)
    assert (
        all(len(line) <= 40 for line in said.splitlines())
        and said.splitlines()[2].startswith("  ")
        and said.splitlines()[1].startswith("- a")
    )


def test_fit_table_wraps_a_column_of_numbers_with_thousands_separators():
    # tabulate 0.9/0.10's maxcolwidths casts every cell of a limited column through its own number parser, whatever
    # disable_numparse says: "5,798.9" became float("5,798.9") and raised ValueError (a sweep's img/s column without
    # an interval beside one with, once the terminal was too narrow for it)
    from effbench.fmt import fit_table

    headers = ["cell", "img/s", "what ran"]
    figures = ["5,798.9", "12,345.6", "974.0 [970.1, 978.3]"]
    ran = ["workers=4 " * 6, "workers=8 " * 6, "-"]
    body = [[f"00{i}", figures[i], ran[i]] for i in range(3)]
    for width in (40, 28):  # 28: the img/s column too is wrapped, to 8
        text, left = fit_table(headers, body, width)
        lines = text.splitlines()
        assert max(map(len, lines)) <= width, text
        assert left == []
        start, end = lines[0].index("img/s"), lines[0].index("what ran")  # the figures start their column
        firsts = [line[start:end].split() for line in lines if line.startswith("00")]
        assert [f[0] for f in firsts] == ["5,798.9", "12,345.6", "974.0"]
        assert (len(firsts[2]) == 1) == (width == 28)  # at 28 the interval is wrapped under its figure
        assert " ".join(" ".join(line[start:end].split()) for line in lines[2:]).split() == " ".join(figures).split()
        assert "".join(line[end:] for line in lines[2:]).replace(" ", "") == "".join(ran).replace(" ", "")

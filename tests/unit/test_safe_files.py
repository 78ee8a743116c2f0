"""safe_files.loads refuses exactly the numbers beyond its bounds (the reference: the bound written out with
Decimal, apart from the code), and schema.inside resolves a recorded name as os.path.realpath does."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effbench import safe_files
from effbench.errors import EffbenchError

BOUND = Decimal("1e50")


def _expected(token: str) -> float | None:
    """The value a number token must load as, or None where effbench refuses it (beyond 1e50, or inf)."""
    digits = token.lstrip("-").split("e")[0].split("E")[0].split(".")[0]
    if len(digits) > safe_files.MAX_INT_DIGITS:
        return None
    exact = Decimal(token)
    if abs(exact) > BOUND:
        return None
    value = json.loads(token)
    return None if abs(value) > 1e50 else value


EDGES = ["9.99e49", "1e50", "1e+50", "1.0000001e50", "1" + "0" * 50, "1" + "0" * 49, "1e0051", "1e00049",
         "12345e46", "12345e45", "0.5e51", "0.0000001e56", "-1e51", "1e-400", "5" * 4301, "1e400",
         "1234567890123456789012345678901234567890123e9", "1.5e+16", "9.063804705004731e-05"]  # fmt: skip


@pytest.mark.parametrize("token", EDGES)
def test_a_number_near_a_bound_is_judged_as_written(token: str) -> None:
    text = f'{{"name": "1e999 is text", "x": [{token}]}}'
    want = _expected(token)
    if want is None:
        with pytest.raises(EffbenchError):
            safe_files.loads(text, where="f.json", fix="fix it")
    else:
        assert safe_files.loads(text, where="f.json", fix="fix it")["x"] == [want]


@given(
    whole=st.integers(min_value=0, max_value=10**60),
    fraction=st.none() | st.integers(min_value=0, max_value=10**6),
    exponent=st.none() | st.integers(min_value=-80, max_value=80),
    zeros=st.integers(min_value=0, max_value=3),
)
def test_any_number_is_judged_as_the_bound_says(
    whole: int, fraction: int | None, exponent: int | None, zeros: int
) -> None:
    token = str(whole) + ("" if fraction is None else f".{fraction}")
    if exponent is not None:
        token += "e" + ("-" if exponent < 0 else "+") + "0" * zeros + str(abs(exponent))
    want = _expected(token)
    try:
        got = safe_files.loads(f"[{token}]", where="f.json", fix="fix it")
    except EffbenchError:
        got = None
    assert got == (None if want is None else [want])


def test_strings_do_not_count_as_numbers() -> None:
    # a huge number inside a string is text: neither refused nor a reason for the slow path to refuse
    assert safe_files.loads('{"note": "1e999 and ' + "9" * 60 + '"}', where="f", fix="x") == {
        "note": "1e999 and " + "9" * 60
    }


def test_nan_is_refused_on_the_fast_path() -> None:
    with pytest.raises(EffbenchError, match="NaN"):
        safe_files.loads('{"x": NaN, "y": 1.0}', where="f.json", fix="fix it")


# --- schema.inside: a name recorded in a result file stays inside its folder -----------------------------------
def _reference_inside(folder, value):
    """The rule written out with os.path.realpath: the resolved target, or None when it leaves the folder."""
    import os

    base = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(base, value))
    return target if os.path.commonpath([base, target]) == base else None


@pytest.mark.parametrize(
    "value",
    ["trace.json.gz", "profile/by_cpu.txt", "./profile/../trace.json.gz", "../elsewhere/x", "inlink/x",
     "outlink/x", "outlink", "deep/outlink/x", "missing/deeper/x", "profile/../../elsewhere/x", "file.txt/x"],
)  # fmt: skip
def test_a_recorded_name_resolves_as_realpath_says(tmp_path, value):
    from effbench import schema

    folder = tmp_path / "run"
    (folder / "profile").mkdir(parents=True)
    (folder / "deep").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (folder / "file.txt").write_text("x")
    (folder / "inlink").symlink_to(folder / "profile")
    (folder / "outlink").symlink_to(tmp_path / "elsewhere")
    (folder / "deep" / "outlink").symlink_to(tmp_path / "elsewhere")
    want = _reference_inside(folder, value)
    if want is None:
        with pytest.raises(EffbenchError, match="points outside"):
            schema.inside(folder, value, "profile.trace", folder / "results.json")
    else:
        assert str(schema.inside(folder, value, "profile.trace", folder / "results.json")) == want

"""The typed run record's contracts (issue 24 item 2): results.json field names live in the record module only,
readers use attributes (no `(x or {}).get` chains), and the dict-style transition shim is gone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from effbench import schema

PACKAGE = Path(schema.__file__).parent
RECORD_MODULE = {"schema.py", "results.py"}  # the model, and the one module that reads and writes it
# the models whose field names are the record's vocabulary (the metrics and their sections)
VOCABULARY = (
    schema.Results, schema.Epoch, schema.Tally, schema.Rank, schema.Stragglers, schema.TimeToAccuracy,
    schema.Windows, schema.Stat, schema.Final, schema.Profile, schema.ProfilePhase, schema.Verdict,
    schema.Utilization, schema.HostUse, schema.GpuUse, schema.MeasuredWindowUse, schema.CellSummary,
    schema.Roofs, schema.RoofConditions, schema.ComputeRoof, schema.Roofline, schema.KindRow, schema.UnmodelledOp,
)  # fmt: skip
# a string equal to a field name that is not a read of the record: (file, name) -> why
ALLOWED: dict[tuple[str, str], str] = {
    ("selftest/checks.py", "warmup_steps"): "the selftest's own --warmup-steps option and its tiny run's setting",
    ("sweep/manifest.py", "schema_version"): "sweep.json's own version key, checked before the file is typed",
    ("sweep/manifest.py", "updated_at"): "sweep.json's own time of its last write, set by its one writer",
    ("report/render.py", "schema_version"): "summary.json's own version key, written there",
    ("sweep/series.py", "schema_version"): "scaling.json's own version key, written there",
    ("measure/roofs.py", "schema_version"): "the roofs cache's own version key, written and checked there",
    ("sweep/spec.py", "data_only"): "--data-only as a sweep dimension (a CLI option's name)",
    ("sweep/presets.py", "data_only"): "--data-only as a preset's dimension (a CLI option's name)",
    ("config.py", "warmup_steps"): "RunConfig's own field, set from its text (--warmup-steps auto|N)",
    ("run/folder.py", "reports_error"): "Results.unset's argument: a retry that drew every report clears it",
}


def _field_names() -> set[str]:
    # names with an underscore: "status" or "device" are words many files use for other things
    return {n for m in VOCABULARY for n in m.model_fields if "_" in n}


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not (p.parent == PACKAGE and p.name in RECORD_MODULE)]


def field_name_literals(names: set[str]) -> list[str]:
    found = []
    for path in _modules():
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (rel, node.value) not in ALLOWED:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def or_empty_get_chains() -> list[str]:
    """`(x or {}).get(...)`: a reader guessing at a dict's shape instead of reading a typed field."""
    found = []
    for path in [*_modules(), PACKAGE / "schema.py", PACKAGE / "results.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "get"
                and isinstance(node.value, ast.BoolOp)
                and isinstance(node.value.op, ast.Or)
                and isinstance(node.value.values[-1], ast.Dict)
                and not node.value.values[-1].keys
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_no_record_field_name_is_a_string_outside_the_record_module():
    assert field_name_literals(_field_names()) == []


def test_the_scan_finds_a_field_name_written_as_a_string(tmp_path, monkeypatch):
    (tmp_path / "reader.py").write_text('def f(r):\n    return r.get("throughput_img_s")\n')
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    assert field_name_literals(_field_names()) == ["reader.py:2: 'throughput_img_s'"]


def test_no_or_empty_dict_get_chains():
    assert or_empty_get_chains() == []


def test_the_scan_finds_an_or_empty_dict_chain(tmp_path, monkeypatch):
    (tmp_path / "schema.py").write_text("")
    (tmp_path / "results.py").write_text("")
    (tmp_path / "reader.py").write_text('def f(r):\n    return (r.get("a") or {}).get("b")\n')
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    assert or_empty_get_chains() == ["reader.py:2"]


@pytest.mark.parametrize("name", ["get", "__getitem__", "__contains__"])
def test_records_are_read_by_attribute_only(name):
    record = schema.Results(schema_version=1, status="ok")
    assert not hasattr(type(record), name)  # the transition shim (dict-style reads) is gone

"""The typed run record (effbench/schema.py Results): files written before it still read, and it declares
every key a run writes, so readers can use attributes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from effbench import results, schema

FIXTURES = Path(__file__).parents[1] / "fixtures" / "records"
# results.json of `effbench run --smoke` written by main at aef98bb, before the record was typed
SMOKE_V1 = FIXTURES / "v1-smoke-aef98bb.json"
# keys the model leaves undeclared on purpose: config.json's notes beside the resolved options
UNDECLARED = {"config.requested", "config.dataset_shape"}


def _undeclared(model: BaseModel, where: str) -> list[str]:
    out = [f"{where}{k}" for k in model.model_extra or {}]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, BaseModel):
                out += _undeclared(item, f"{where}{name}.")
    return out


def _empty(value: object) -> bool:
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value is None or value == []


def test_a_record_written_before_the_model_reads_with_its_values(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / results.RESULTS_FILE).write_bytes(SMOKE_V1.read_bytes())
    raw = json.loads(SMOKE_V1.read_text())
    rec = results.load_record(run)
    assert rec.schema_version == raw["schema_version"] == results.SCHEMA_VERSION
    assert rec.throughput_img_s == raw["throughput_img_s"] > 0
    assert rec.measured is not None and rec.measured.images == raw["measured"]["images"]
    assert rec.utilization.host.rss_gib is not None
    assert rec.utilization.host.rss_gib.max == raw["utilization"]["host"]["rss_gib"]["max"]
    assert rec.launch.device_type == raw["launch"]["device_type"] == "cpu"
    assert rec.env.torch == raw["env"]["torch"]
    assert [e.epoch for e in rec.epochs] == [e["epoch"] for e in raw["epochs"]]


def test_the_model_declares_every_key_a_run_writes() -> None:
    rec = results.record_of(json.loads(SMOKE_V1.read_text()))
    assert set(_undeclared(rec, "")) <= UNDECLARED


@pytest.mark.parametrize("section", ["utilization", "env", "launch", "model", "backend", "data", "final"])
def test_an_absent_or_null_section_reads_empty(section: str) -> None:
    base = {"schema_version": 1, "status": "failed"}
    for rec in (results.record_of(base), results.record_of({**base, section: None})):
        value = getattr(rec, section)
        assert isinstance(value, BaseModel)
        assert _empty(value.model_dump())
    assert results.record_of(base).utilization.host.rss_gib is None


def test_every_results_field_has_a_docstring() -> None:
    missing = [n for n, f in schema.Results.model_fields.items() if not f.description]
    assert not missing


def test_a_frozen_runs_trainable_stages_read_back() -> None:
    # models/__init__.py records the stages a --freeze run trains as a list of names ("all" unfrozen); the
    # model refused the list, so `effbench report` refused a --freeze run's own results.json
    stages = results.record_of({"schema_version": 1, "status": "ok", "model": {"trainable_stages": ["fc"]}})
    assert stages.model.trainable_stages == ["fc"]
    everything = results.record_of({"schema_version": 1, "status": "ok", "model": {"trainable_stages": "all"}})
    assert everything.model.trainable_stages == "all"

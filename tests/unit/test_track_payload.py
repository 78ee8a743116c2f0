"""The tracker's pure parts and its CLI edges, without a server (tests/e2e/test_tracking.py runs one): what a
run folder becomes (track/payload.py), the one-line errors before a run, the one warning line after it, and
MLflow never imported before the run's folder is final."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from effbench import results
from effbench.cli import track as cli_track
from effbench.track import bounded, mlflow_store, payload
from clitools import invoke

FIXTURE_RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1-smoke-aef98bb.json"
# MLflow's run statuses (mlflow/entities/run_status.py RunStatus: RUNNING, SCHEDULED, FINISHED, FAILED, KILLED)
MLFLOW_STATUSES = {"RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"}


def lone_run(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True)
    record = {**json.loads(FIXTURE_RECORD.read_text()), **changes}
    (folder / results.RESULTS_FILE).write_text(json.dumps(record))
    return folder


def test_every_effbench_status_has_an_mlflow_status():
    assert set(payload.MLFLOW_STATUS) == set(results.STATUSES)
    assert set(payload.MLFLOW_STATUS.values()) <= MLFLOW_STATUSES
    if importlib.util.find_spec("mlflow") is not None:
        from mlflow.entities import RunStatus

        assert set(RunStatus.all_status()) == {RunStatus.from_string(s) for s in MLFLOW_STATUSES}
    assert payload.MLFLOW_STATUS["interrupted"] == "KILLED" and payload.MLFLOW_STATUS["failed"] == "FAILED"


def test_a_run_s_key_is_its_own_wherever_its_folder_is_copied(tmp_path):
    a = lone_run(tmp_path / "a")
    copy = shutil.copytree(a, tmp_path / "elsewhere" / "a-copy")
    other = lone_run(tmp_path / "b", started_at="2026-01-01T00:00:00.000001+00:00")
    key = payload.collect([a], traces=False).runs[0].key
    assert payload.collect([copy], traces=False).runs[0].key == key
    assert payload.collect([other], traces=False).runs[0].key != key


def test_a_lone_results_json_is_logged_from_the_record(tmp_path):
    folder = lone_run(tmp_path / "r")
    (run,) = payload.collect([folder], traces=True).runs
    record = json.loads(FIXTURE_RECORD.read_text())
    assert run.metrics["throughput_img_s"] == record["throughput_img_s"]
    assert run.params["arch"] == record["config"]["arch"] and run.params["batch_size"] == str(
        record["config"]["batch_size"]
    )
    assert run.artifacts == [folder / "results.json"] and run.status == "FINISHED" and run.group is None
    assert [(k, v, s) for k, v, s in run.steps if k == "epoch/throughput_img_s"] == [
        ("epoch/throughput_img_s", e["throughput_img_s"], e["epoch"]) for e in record["epochs"]
    ]


def test_a_link_in_the_run_folder_is_never_uploaded(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    folder = lone_run(tmp_path / "r")
    (folder / "report.html").symlink_to(secret)
    (folder / "trace_rank1.json.gz").symlink_to(secret)  # the record names rank 0's; rank 1's is found by name
    (run,) = payload.collect([folder], traces=True).runs
    assert run.artifacts == [folder / "results.json"]


def test_flatten_spells_values_as_config_json_does():
    assert payload.flatten({"a": 1, "b": None, "c": True, "d": "x", "e": {"f": 0.5, "g": [1, 2]}, "h": {}}) == {
        "a": "1",
        "b": "null",
        "c": "true",
        "d": "x",
        "e.f": "0.5",
        "e.g": "[1, 2]",
        "h": "{}",
    }
    assert len(payload.flatten({"long": "x" * 7000})["long"]) == payload.MAX_PARAM_CHARS


def test_a_sweep_s_status_is_its_worst_unfinished_cell():
    assert payload.group_status(["ok", "oom", "diverged", "skipped"]) == "ok"
    assert payload.group_status(["ok", "failed"]) == "failed"
    assert payload.group_status(["failed", "pending"]) == "interrupted"
    assert payload.group_status(["ok", "interrupted"]) == "interrupted"


def test_the_reason_is_a_few_words():
    refused = "API request to http://x:1/api failed with exception HTTPConnectionPool(...): Max retries exceeded with url: (Caused by NewConnectionError(...: [Errno 111] Connection refused'))"
    assert mlflow_store.reason(Exception(refused)) == "connection refused"
    assert mlflow_store.reason(Exception("line one\nline two")) == "line one line two"
    assert len(mlflow_store.reason(Exception("y" * 500))) == bounded.EXCERPT_CHARS


def test_a_server_s_answer_is_named_by_its_status_and_never_echoed_raw():
    # the texts MLflow 3.17 raises: utils/rest_utils.py http_request wraps urllib3's MaxRetryError once the
    # retries on a 5xx (request_utils._TRANSIENT_FAILURE_RESPONSE_CODES) are spent; verify_rest_response
    # quotes the body of any other status as it came
    spent = "API request to http://h/api/2.0/mlflow/experiments/get-by-name failed with exception HTTPConnectionPool(host='h', port=80): Max retries exceeded with url: /api (Caused by ResponseError('too many 500 error responses'))"
    assert mlflow_store.reason(Exception(spent)) == "the server answered HTTP 500"
    body = "\x1b[2J<h1>no</h1> http://eve:PW46@h/ " + "z" * 400
    quoted = f"API request to endpoint /api/2.0/mlflow/runs/create failed with error code 403 != 200. Response body: '{body}'"
    said = mlflow_store.reason(Exception(quoted))
    assert said.startswith("the server answered HTTP 403: \\x1b[2J<h1>no</h1> http://eve:***@h/ z")
    assert "\x1b" not in said and "PW46" not in said and len(said) < 200


def test_the_tracking_child_s_settings_bound_mlflow_and_leave_exported_values(monkeypatch):
    """quiet_mlflow runs in the tracking child only (bounded.main); here on a copy of the environment."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.store.db import utils as db_utils

    monkeypatch.setattr(os, "environ", {"MLFLOW_HTTP_REQUEST_TIMEOUT": "7"})
    monkeypatch.setattr(db_utils, "MAX_RETRY_COUNT", db_utils.MAX_RETRY_COUNT)
    levels = {n: logging.getLogger(n).level for n in mlflow_store.QUIET_LOGGERS}
    try:
        mlflow_store.quiet_mlflow("sqlite:///m.db", 2.0)
        assert {n: logging.getLogger(n).level for n in levels} == dict.fromkeys(levels, logging.CRITICAL + 1)
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"  # the user's wins
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    assert db_utils.MAX_RETRY_COUNT == mlflow_store.SQL_TRIES


@pytest.mark.parametrize(
    "args, line",
    [
        (["--track", "mlruns"], "error: --track: 'mlruns' is not an MLflow tracking URI;"),
        (["--track-traces"], "error: --track-traces: logs to a tracking server: give one with --track URI"),
        (["--track-experiment", "x"], "error: --track-experiment: logs to a tracking server"),
    ],
)
def test_bad_tracking_options_are_one_line_before_the_run(args, line, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("effbench.run.launch.run", lambda *a, **k: pytest.fail("the run started"))
    code, _, err = invoke(["run", "--smoke", "--output", tmp_path, *args], capsys)
    assert code == 2 and err.startswith(line) and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


NEEDS_SQL_STORE = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("mlflow", "sqlalchemy", "alembic")),
    reason="needs MLflow's client and SQL store (effbench[tracking], sqlalchemy, alembic)",
)


@NEEDS_SQL_STORE
@pytest.mark.parametrize(
    "store, line",
    [
        # /proc takes no new file, root or not (os.access would say yes to root); MLflow's engine retried ~100 s
        ("sqlite:////proc/effbench-46/m.db", "error: --track: sqlite:////proc/effbench-46/m.db cannot be written: "
         "no file can be made in /proc ("),
        ("sqlite:///{tmp}/a-file/m.db", "error: --track: sqlite:///{tmp}/a-file/m.db cannot be written: "
         "no file can be made in {tmp}/a-file ("),
        ("file:///proc/effbench-46/mlruns", "error: --track: file:///proc/effbench-46/mlruns cannot be written: "),
    ],
)  # fmt: skip
def test_a_store_that_cannot_be_written_is_refused_before_the_run(store, line, tmp_path, capsys, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setattr("effbench.run.launch.run", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "out"
    for command in (["run", "--smoke"], ["sweep", "--smoke", "--batch-size", "4,8"]):
        code, _, err = invoke([*command, "--output", out, "--track", store.format(tmp=tmp_path)], capsys)
        assert code == 2 and err.startswith(line.format(tmp=tmp_path)) and err.count("\n") == 1, err
        assert "name a store in a folder you can write" in err
    assert not out.exists() and {p.name for p in tmp_path.iterdir()} == {"a-file"}


def test_an_experiment_name_mlflow_would_refuse_after_the_run_is_refused_before_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("effbench.run.launch.run", lambda *a, **k: pytest.fail("the run started"))
    args = ["run", "--smoke", "--output", tmp_path, "--track", "http://127.0.0.1:5000", "--track-experiment", "e" * 501]
    code, _, err = invoke(args, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: --track-experiment: is 501 characters; MLflow takes at most 500"), err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "1e9"])
def test_a_bad_track_timeout_is_refused_before_the_run(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EFFBENCH_TRACK_TIMEOUT", value)
    monkeypatch.setattr("effbench.run.launch.run", lambda *a, **k: pytest.fail("the run started"))
    code, _, err = invoke(["run", "--smoke", "--output", tmp_path, "--track", "http://127.0.0.1:5000"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: EFFBENCH_TRACK_TIMEOUT: '{value}' is not a number of seconds in (0, 86400]"), err
    assert not any(tmp_path.iterdir())


def test_without_mlflow_track_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    monkeypatch.setattr("effbench.run.launch.run", lambda *a, **k: pytest.fail("the run started"))
    for command in (["run", "--smoke"], ["sweep", "--smoke", "--batch-size", "4,8"]):
        code, _, err = invoke([*command, "--output", tmp_path, "--track", "http://127.0.0.1:5000"], capsys)
        assert code == 2 and err == (
            "error: --track: logging to MLflow needs its client, which is not installed: pip install 'effbench[tracking]'\n"
        )
    assert not any(tmp_path.iterdir())


def test_a_tracker_that_fails_or_is_interrupted_is_one_warning_line(tmp_path, capsys, monkeypatch):
    from effbench.run.phases import Interrupted

    t = cli_track.Tracking("http://127.0.0.1:5000", "effbench", False)
    for problem, said in ((RuntimeError("boom\nmore"), "(boom more)"), (Interrupted(15), "interrupted by SIGTERM")):

        def fail(*a, _p=problem, **k):
            raise _p

        monkeypatch.setattr(mlflow_store, "upload", fail)
        cli_track.after(tmp_path, t)
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("warning: --track: ") and said in err, err
        assert f"`effbench track {tmp_path} --track http://127.0.0.1:5000` logs it later" in err


@pytest.mark.parametrize(
    "args, line",
    [
        (["report"], "error: FOLDER: pass a run, sweep or results folder, or --from-tracking URI"),
        (["report", ".", "--from-tracking", "http://x:1"], "error: --from-tracking: reads the runs from http://x:1"),
        (["report", ".", "--experiment", "e"], "error: --experiment: names the experiment --from-tracking reads"),
        (["track", "."], "error: --track: give the tracking URI"),
    ],
)
def test_report_and_track_say_what_they_need(args, line, capsys, monkeypatch):
    monkeypatch.delenv("EFFBENCH_TRACK", raising=False)
    code, _, err = invoke(args, capsys)
    assert code == 2 and err.startswith(line), err


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs MLflow's client (effbench[tracking])")
def test_mlflow_is_not_imported_before_the_run_ends():
    """The tracker is never in the measured path: `run --track` checks its client is installed without importing
    it, and the upload imports it once the run has returned."""
    code = (
        "import sys\n"
        "import effbench.run.launch as L\n"
        "from effbench import schema\n"
        "from effbench.run.rank import RunOutcome\n"
        "seen = []\n"
        "def fake(cfg, **kw):\n"
        "    seen.append('mlflow' in sys.modules)\n"
        "    return RunOutcome(None, schema.Results(schema_version=1, status='ok'))\n"
        "L.run = fake\n"
        "from effbench.cli.app import main\n"
        "try:\n"
        "    main(['run', '--smoke', '--track', 'http://127.0.0.1:9'])\n"
        "except SystemExit as e:\n"
        "    print(seen, e.code)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "[False] 0", out.stdout + out.stderr


def test_a_scaling_series_is_a_parent_of_its_members(tmp_path):
    series = tmp_path / "20261127-000000_scaling_b0_synthetic_cpu_weak"
    lone_run(series / "m1", started_at="2026-11-27T00:00:01+00:00", status="ok")
    lone_run(series / "m2", started_at="2026-11-27T00:00:09+00:00", status="interrupted")
    (series / "scaling.json").write_text(json.dumps({"schema_version": 1, "scaling": "weak", "rows": []}))
    upload = payload.collect([series], traces=False)
    assert {r.tags[payload.KIND] for r in upload.runs} == {"scaling-member"}
    (parent,) = upload.groups.values()
    assert parent.tags[payload.KIND] == "scaling" and parent.name == series.name and parent.status == "KILLED"
    assert parent.params == {"scaling": "weak"} and parent.artifacts == [series / "scaling.json"]
    assert parent.start_ms == min(r.start_ms for r in upload.runs)
    assert {r.group for r in upload.runs} == {series}

"""The tracker's pure parts and its CLI edges, without a server (tests/e2e/test_tracking.py runs one): what a
run folder becomes (track/payload.py), the one-line errors before a run, the one warning line after it, and
MLflow never imported before the run's folder is final."""

from __future__ import annotations

import datetime as dt
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
    assert [(p.key, p.value, p.step) for p in run.points if p.key == "epoch/throughput_img_s"] == [
        ("epoch/throughput_img_s", e["throughput_img_s"], e["epoch"]) for e in record["epochs"]
    ]
    assert not [p for p in run.points if p.key.startswith(("step/", "system/"))]  # no steps.csv, utilization.csv


def test_a_link_in_the_run_folder_is_never_uploaded(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    folder = lone_run(tmp_path / "r")
    (folder / "report.html").symlink_to(secret)
    (folder / "trace_rank1.json.gz").symlink_to(secret)  # the record names rank 0's; rank 1's is found by name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "chart.png").write_bytes(b"x")
    (folder / "plots").symlink_to(elsewhere)  # a linked folder: its files are not the run's
    (run,) = payload.collect([folder], traces=True).runs
    assert run.artifacts == [folder / "results.json"]
    (folder / "plots").unlink()
    (folder / "plots").mkdir()
    (folder / "plots" / "chart.png").write_bytes(b"x")
    (folder / "plots" / "linked.png").symlink_to(secret)
    (run,) = payload.collect([folder], traces=True).runs
    assert run.artifacts == [folder / "results.json", folder / "plots" / "chart.png"]


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


def ms(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp() * 1000


def timed_run(folder: Path) -> Path:
    """A run whose training began at 10:00:04: it ended at 10:00:10, after 0.5 s warm-up, 2.5 s epochs, 1 s
    validation and 2 s profiling. Two epochs of three 0.5 s steps, 0.5 s of validation after each."""
    epoch = json.loads(FIXTURE_RECORD.read_text())["epochs"][0]
    epochs = [
        {**epoch, "epoch": 1, "steps": 3, "total_time_s": 1.5, "val_time_s": 0.4, "val_warmup_time_s": 0.1},
        {**epoch, "epoch": 2, "steps": 3, "total_time_s": 1.5, "val_time_s": 0.5, "val_warmup_time_s": None},
    ]
    phases = {"setup": 3.0, "dataset": 1.0, "model": 1.0, "warm-up": 0.5, "epochs": 2.5, "validation": 1.0,
              "profiling": 2.0}  # fmt: skip
    lone_run(folder, started_at="2026-11-25T09:59:59+00:00", finished_at="2026-11-25T10:00:10+00:00",
             wall_time_by_phase_s=phases, wall_time_s=sum(phases.values()), epochs=epochs)  # fmt: skip
    steps = [{"epoch": e, "step": s, "warmup": e == s == 1, "images": 8, "loss": 2.0 - e / 10 - s / 100,
              "top1": 0.1 * s, "data_time_s": 0.1, "compute_time_s": 0.4} for e in (1, 2) for s in (1, 2, 3)]  # fmt: skip
    results.write_csv(folder / results.STEPS_FILE, results.STEP_FIELDS, steps)
    return folder


def test_each_point_is_logged_at_the_time_it_happened(tmp_path):
    folder = timed_run(tmp_path / "r")
    (folder / "utilization.csv").write_text(
        "t_s,cpu_pct,proc_cpu_pct,rss_gib,gpu0_util_pct,gpu0_mem_used_gib,gpu0_power_w,gpu0_temp_c,gpu1_util_pct\n"
        "0.0,,,1.0,10,2.0,100,50,5\n"
        "0.5,50,150,1.5,20,,,51,6\n"
        "1.0,75,190,2.0,30,,120,52,\n"
    )
    (run,) = payload.collect([folder], traces=False).runs
    start = ms("2026-11-25T10:00:04+00:00")
    by_key: dict[str, list] = {}
    for p in run.points:
        by_key.setdefault(p.key, []).append((p.step, p.value, p.ms))
    # each step at its end: the steps' own times laid end to end, the first epoch's validation between epochs
    ends = [0.5, 1.0, 1.5, 2.5, 3.0, 3.5]
    assert by_key["step/time_s"] == [(i, 0.5, round(start + 1000 * t)) for i, t in enumerate(ends, 1)]
    assert [v for _, v, _ in by_key["step/loss"]] == pytest.approx([1.89, 1.88, 1.87, 1.79, 1.78, 1.77])
    assert [(s, t) for s, _, t in by_key["epoch/val_top1"]] == [(1, start + 2000), (2, start + 4000)]
    # utilization.csv as MLflow's system metrics, each row at its own second after the start, stepped by row
    assert by_key["system/cpu_utilization_percentage"] == [(1, 50.0, start + 500), (2, 75.0, start + 1000)]
    assert by_key["system/gpu_0_utilization_percentage"] == [(0, 10.0, start), (1, 20.0, start + 500),
                                                              (2, 30.0, start + 1000)]  # fmt: skip
    assert by_key["system/gpu_0_memory_usage_megabytes"] == [(0, 2.0 * 2**30 / 1e6, start)]
    assert [v for _, v, _ in by_key["system/gpu_0_power_usage_watts"]] == [100.0, 120.0]
    assert [v for _, v, _ in by_key["system/gpu_1_utilization_percentage"]] == [5.0, 6.0]
    assert [v for _, v, _ in by_key["system/process_cpu_utilization_percentage"]] == [150.0, 190.0]
    assert not [k for k in by_key if "temp" in k]  # no MLflow name for it: not a system metric
    assert {p.ms for p in run.points} >= {start, start + 4000} and run.end_ms == start + 6000


def test_a_long_run_logs_every_kth_step_and_always_the_last(tmp_path, monkeypatch):
    folder = timed_run(tmp_path / "r")
    monkeypatch.setattr(payload, "MAX_POINTS", 4)
    (run,) = payload.collect([folder], traces=False).runs
    assert [p.step for p in run.points if p.key == "step/loss"] == [1, 3, 5, 6]


def test_a_run_carries_mlflow_s_own_tags(tmp_path):
    command = ["effbench", "run", "--smoke", "--track", "http://alice:PW47@h:5000"]
    env = {**json.loads(FIXTURE_RECORD.read_text())["env"], "effbench_commit": "a" * 40}
    (run,) = payload.collect([lone_run(tmp_path / "r", command=command, env=env)], traces=False).runs
    t = run.tags
    assert t["mlflow.runName"] == "r" and t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.name"] == "effbench run --smoke --track 'http://alice:***@h:5000'"
    assert t["mlflow.source.git.commit"] == "a" * 40
    # a run in the image without a checkout: the image's revision is effbench's commit
    image_env = {**env, "effbench_commit": None, "image": {"revision": "b" * 40}}
    (run,) = payload.collect([lone_run(tmp_path / "i", env=image_env)], traces=False).runs
    assert run.tags["mlflow.source.git.commit"] == "b" * 40
    (run,) = payload.collect([lone_run(tmp_path / "n", env={**env, "effbench_commit": None})], traces=False).runs
    assert "mlflow.source.git.commit" not in run.tags  # never a made-up commit


def test_the_line_says_runs_and_parent_runs_apart():
    def line(counts, groups=None, kinds=None):
        return mlflow_store.Uploaded("http://h:5000", "e", "7", counts, groups or {}, kinds or {}).line()

    assert line({"created": 1}) == "tracked: 1 run (1 new) in experiment 'e': http://h:5000/#/experiments/7"
    assert line({"created": 2}, {"created": 1}, {"sweep": 1}).startswith(
        "tracked: 2 runs (2 new) and 1 sweep as a parent run (1 new) in experiment 'e'"
    )
    assert line({"present": 3, "replaced": 1}, {"updated": 2}, {"sweep": 1, "scaling": 1}).startswith(
        "tracked: 4 runs (0 new, 1 replaced, 3 already there) and 1 sweep and 1 scaling series as parent runs "
        "(0 new, 2 updated) in"
    )

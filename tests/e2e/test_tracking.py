"""`--track URI`, `effbench track` and `report --from-tracking` against a real `mlflow server` (SQLite store, on
127.0.0.1, started once for the module: ~20-40 s on 2 loaded cores), read back with MLflow's own client.

What is logged is checked against the run folder's files read here with json (params = config.json flattened,
metrics = results.json's figures), never against effbench's payload code; the leaderboard read back from the
server against the one `effbench report` writes from the folders.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import getpass
import importlib.util
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from effbench.cli import app as cli
from clitools import invoke, only_run

SERVER_MODULES = ("mlflow", "flask", "sqlalchemy", "alembic")
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in SERVER_MODULES),
    reason="needs MLflow's client and server packages: pip install -e '.[test]'",
)
TINY = ["--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu", "--dataset", "synthetic",
        "--max-steps", "4", "--warmup-steps", "1", "--epochs", "2", "--repeats", "3", "--quiet"]  # fmt: skip
RUN_FILES = {"report.html", "results.json", "env.json", "config.json", "steps.csv", "epochs.csv", "utilization.csv",
             "plots"}  # fmt: skip
FIXTURE_RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1-smoke-aef98bb.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` over a SQLite file in a fresh folder, its artifacts proxied (--artifacts-destination) as
    a remote client's would be; the URI. Stopped (its process group) after the module."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
           "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]  # fmt: skip
    log = open(root / "server.log", "w")  # noqa: SIM115  (open for the server's life)
    # mlflow/server/__init__.py: with huey installed the server starts 7 job consumers (~200 MB each); nothing
    # here runs a job
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        with_group = proc.poll() is None
        if with_group:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri: str, experiment: str) -> list:
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r}"
    return list(c.search_runs([exp.experiment_id], max_results=1000))


def flat(d: dict, prefix: str = "") -> dict[str, str]:
    """config.json flattened the way the test reads the issue: nested keys joined by dots, values as JSON spells
    them (a string as itself)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return out


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


def main(args: list) -> Ran:
    """The CLI in this process (no second torch import), for a module-scoped fixture where capsys is not at hand."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in args])
    return Ran(int(info.value.code or 0), out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def run_folder(server, tmp_path_factory):
    """One small run with --track (profiler on, so the folder has a trace that must not be uploaded)."""
    out = tmp_path_factory.mktemp("runs")
    ran = main(["run", *TINY, "--profile-steps", "1", "--output", out, "--track", server, "--track-experiment", "runs"])
    assert ran.code == 0, ran.stderr[-3000:]
    return only_run(out), ran


def test_a_tracked_run_logs_its_config_figures_tags_and_files(server, run_folder):
    folder, ran = run_folder
    assert "tracked: 1 run (1 new) in experiment 'runs': http://" in ran.stdout
    assert "warning" not in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
    (run,) = runs_of(server, "runs")
    r = json.loads((folder / "results.json").read_text())
    config = json.loads((folder / "config.json").read_text())

    assert run.info.status == "FINISHED" and run.info.run_name == folder.name
    assert run.data.params == flat(config)
    m = run.data.metrics
    summary = r["throughput_windows"]["summary"]["throughput_img_s"]
    assert m["throughput_img_s"] == r["throughput_img_s"]
    assert (m["throughput_ci_low_img_s"], m["throughput_ci_high_img_s"]) == (summary["ci_low"], summary["ci_high"])
    assert m["throughput_median_img_s"] == summary["median"]
    assert m["data_wait_share"] == r["data_time_share"]
    assert m["final_val_top1"] == r["final"]["val_top1"] and m["final_train_loss"] == r["final"]["train_loss"]
    # a CPU run has no MFU, device memory or energy: absent, never a zero
    assert not {"mfu", "peak_mem_gib", "energy_per_image_j"} & set(m) and r.get("mfu") is None
    history = client(server).get_metric_history(run.info.run_id, "epoch/throughput_img_s")
    assert sorted((h.step, h.value) for h in history) == [(e["epoch"], e["throughput_img_s"]) for e in r["epochs"]]
    assert len(r["epochs"]) == 2

    t = run.data.tags
    assert t["effbench.status"] == "ok" and t["effbench.verdict"] == r["verdict"]["bottleneck"]
    assert t["effbench.device"] == r["device"] and t["effbench.run_folder"] == folder.name
    env = json.loads((folder / "env.json").read_text())
    assert (t["effbench.host"], t["effbench.machine"]) == (env["hostname"], env["machine"])
    assert t["effbench.kind"] == "run" and "mlflow.parentRunId" not in t

    c = client(server)
    assert {a.path for a in c.list_artifacts(run.info.run_id)} == RUN_FILES  # no trace without --track-traces
    assert list(folder.glob("trace_rank*.json.gz")), "the run had a trace to leave out"
    got = Path(c.download_artifacts(run.info.run_id, "results.json", str(folder.parent / "dl")))
    assert got.read_bytes() == (folder / "results.json").read_bytes()


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_tracked_run_reads_as_the_usual_loggers_make_it(server, run_folder):
    """Issue 47: MLflow's own tags (user, source, git commit, run name); every point at the time it happened,
    read from the run's files here: the steps' series as long as steps.csv, utilization.csv as MLflow's system
    metrics, the CSVs and plots as artifacts."""
    folder, _ = run_folder
    (run,) = runs_of(server, "runs")
    c = client(server)
    r = json.loads((folder / "results.json").read_text())
    env = json.loads((folder / "env.json").read_text())

    t = run.data.tags
    assert t["mlflow.user"] == getpass.getuser()  # no MLFLOW_TRACKING_USERNAME here: the login, as MLflow's
    assert t["mlflow.runName"] == run.info.run_name == folder.name
    assert t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.name"] == shlex.join(r["command"]) and t["mlflow.source.name"].startswith("effbench run ")
    repo = Path(__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # this effbench runs from a checkout: its commit is the run's
        assert t["mlflow.source.git.commit"] == env["effbench_commit"] == head.stdout.strip()
    assert t["effbench.version"] == env["effbench"]

    start, end = run.info.start_time, run.info.end_time
    for ms, key in ((start, "started_at"), (end, "finished_at")):
        assert abs(ms - dt.datetime.fromisoformat(r[key]).timestamp() * 1000) <= 1
    (headline,) = c.get_metric_history(run.info.run_id, "throughput_img_s")
    assert headline.timestamp == end  # the figure of the whole run, made at its end

    steps = csv_rows(folder / "steps.csv")
    losses = sorted(c.get_metric_history(run.info.run_id, "step/loss"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in losses] == [(i, float(s["loss"])) for i, s in enumerate(steps, 1)]
    times = sorted(c.get_metric_history(run.info.run_id, "step/time_s"), key=lambda m: m.step)
    assert [m.value for m in times] == [float(s["data_time_s"]) + float(s["compute_time_s"]) for s in steps]
    stamps = [m.timestamp for m in losses]
    assert len(set(stamps)) == len(steps) and stamps == sorted(stamps)  # one instant per step, in order
    assert start <= stamps[0] and stamps[-1] <= end
    # consecutive steps of one epoch lie the second step's time apart (to the ms the timestamps keep)
    assert abs((stamps[2] - stamps[1]) - 1000 * times[2].value) <= 1
    epochs = sorted(c.get_metric_history(run.info.run_id, "epoch/val_top1"), key=lambda m: m.step)
    assert len(epochs) == 2 and stamps[3] < epochs[0].timestamp < stamps[4] < epochs[1].timestamp <= end

    util = [u for u in csv_rows(folder / "utilization.csv") if u["cpu_pct"]]
    cpu = sorted(c.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage"), key=lambda m: m.step)
    assert [m.value for m in cpu] == [float(u["cpu_pct"]) for u in util] and len(cpu) >= 2
    gaps = [b.timestamp - a.timestamp for a, b in zip(cpu, cpu[1:], strict=False)]
    rows = [float(b["t_s"]) - float(a["t_s"]) for a, b in zip(util, util[1:], strict=False)]
    assert all(abs(g - 1000 * s) <= 1 for g, s in zip(gaps, rows, strict=True)) and start <= cpu[0].timestamp < end
    rss = c.get_metric_history(run.info.run_id, "system/process_memory_rss_megabytes")
    assert len(rss) == len(csv_rows(folder / "utilization.csv"))

    assert (
        {a.path for a in c.list_artifacts(run.info.run_id, "plots")}
        == {f"plots/{p.name}" for p in (folder / "plots").glob("*.png")}
        != set()
    )
    got = Path(c.download_artifacts(run.info.run_id, "steps.csv", str(folder.parent / "dl-steps")))
    assert got.read_bytes() == (folder / "steps.csv").read_bytes()


def test_track_afterwards_is_idempotent_and_traces_are_opt_in(server, run_folder, capsys):
    folder, _ = run_folder
    code, out, err = invoke(["track", folder, "--track", server, "--track-experiment", "runs"], capsys)
    assert code == 0 and "(0 new, 1 already there)" in out, err
    assert len(runs_of(server, "runs")) == 1

    code, out, err = invoke(
        ["track", folder, "--track", server, "--track-experiment", "traces", "--track-traces"], capsys
    )
    assert code == 0, err
    (run,) = runs_of(server, "traces")
    names = {a.path for a in client(server).list_artifacts(run.info.run_id)}
    assert names == RUN_FILES | {p.name for p in folder.glob("trace_rank*.json.gz")}


@pytest.fixture(scope="module")
def sweep_folder(server, tmp_path_factory):
    """A two-cell sweep with --track, in a folder named like the experiment (the leaderboards' titles agree)."""
    out = tmp_path_factory.mktemp("sweeps") / "sweeps"
    ran = main(["sweep", *TINY, "--no-profile", "--batch-size", "4,8", "--output", out, "--name", "bs",
                "--track", server, "--track-experiment", "sweeps"])  # fmt: skip
    assert ran.code == 0, ran.stderr[-3000:]
    return out, ran


def test_a_tracked_sweep_is_a_parent_run_with_its_cells_as_children(server, sweep_folder):
    out, ran = sweep_folder
    # runs and parent runs apart: MLflow lists 3 runs, all new
    assert "tracked: 2 runs (2 new) and 1 sweep as a parent run (1 new) in experiment 'sweeps'" in ran.stdout, (
        ran.stdout[-2000:]
    )
    runs = runs_of(server, "sweeps")
    parents = [r for r in runs if r.data.tags.get("effbench.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("effbench.kind") == "sweep-cell"]
    assert len(parents) == 1 and len(children) == 2 and len(runs) == 3
    parent = parents[0]
    manifest = json.loads((out / "bs" / "sweep.json").read_text())
    assert parent.info.status == "FINISHED" and parent.info.run_name == "bs"
    assert json.loads(parent.data.params["swept.batch_size"]) == manifest["dims"]["batch_size"] == [4, 8]
    assert {a.path for a in client(server).list_artifacts(parent.info.run_id)} >= {"sweep.json", "report.html"}
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    by_name = {c.info.run_name: c for c in children}
    for cell in manifest["cells"]:
        run_dir = out / "bs" / cell["run_dir"]
        child = by_name[run_dir.name]
        r = json.loads((run_dir / "results.json").read_text())
        assert child.data.params["batch_size"] == str(cell["params"]["batch_size"])
        assert child.data.metrics["throughput_img_s"] == r["throughput_img_s"]
        assert child.data.tags["effbench.group"] == "bs" and child.info.status == "FINISHED"


def test_uploading_the_same_folders_twice_makes_no_duplicates(server, sweep_folder, capsys):
    out, _ = sweep_folder
    before = {r.info.run_id for r in runs_of(server, "sweeps")}
    for _ in range(2):
        code, printed, err = invoke(["track", out, "--track", server, "--track-experiment", "sweeps"], capsys)
        assert (
            code == 0 and "2 runs (0 new, 2 already there) and 1 sweep as a parent run (0 new, 1 updated)" in printed
        ), err
    assert {r.info.run_id for r in runs_of(server, "sweeps")} == before


def test_the_leaderboard_read_back_equals_the_one_from_the_folders(server, sweep_folder, tmp_path, capsys):
    out, _ = sweep_folder
    code, _, err = invoke(["report", out, "--output", tmp_path / "folders"], capsys)
    assert code == 0, err
    code, printed, err = invoke(
        ["report", "--from-tracking", server, "--experiment", "sweeps", "--output", tmp_path / "tracked"], capsys
    )
    assert code == 0, err
    assert "leaderboard of 2 runs from" in printed
    from_folders = (tmp_path / "folders" / "leaderboard.txt").read_text()
    assert from_folders.startswith("effbench leaderboard sweeps\n") and "batch_size=4" in from_folders
    assert (tmp_path / "tracked" / "leaderboard.txt").read_text() == from_folders
    assert (tmp_path / "tracked" / "leaderboard.md").read_text() == (
        tmp_path / "folders" / "leaderboard.md"
    ).read_text()
    # the records read back are run folders `compare` reads
    pulled = sorted(p for p in (tmp_path / "tracked" / "runs").iterdir() if p.is_dir())
    assert len(pulled) == 2
    code, printed, err = invoke(["compare", *pulled], capsys)
    assert code == 0 and "throughput (img/s)" in printed, err


def test_a_run_whose_record_cannot_be_read_is_left_out_with_one_line(server, sweep_folder, tmp_path, capsys):
    """Issue 46: one run whose results.json artifact is not JSON, and one with none, beside a sweep's two cells:
    the leaderboard of the two, one line for each run left out (its name, id and why), no progress bar."""
    out, _ = sweep_folder
    code, _, err = invoke(["track", out, "--track", server, "--track-experiment", "broken"], capsys)
    assert code == 0, err
    c = client(server)
    exp_id = c.get_experiment_by_name("broken").experiment_id
    bad = {}
    for name, text in (("not-json", "{ not json"), ("no-record", None)):
        run = c.create_run(exp_id, run_name=name, tags={"effbench.kind": "run", "effbench.upload": "complete"})
        if text is not None:
            (tmp_path / name).mkdir()
            (tmp_path / name / "results.json").write_text(text)
            c.log_artifact(run.info.run_id, str(tmp_path / name / "results.json"))
        c.set_terminated(run.info.run_id)
        bad[name] = run.info.run_id
    dest = tmp_path / "read"
    code, printed, err = invoke(["report", "--from-tracking", server, "--experiment", "broken", "--output", dest],
                                capsys)  # fmt: skip
    assert code == 0 and "leaderboard of 2 runs from" in printed, err
    lines = err.splitlines()
    assert len(lines) == 2, err  # nothing else: no download bars, no log lines
    for line, (name, run_id) in zip(sorted(lines), sorted(bad.items()), strict=True):
        assert line.startswith(f"warning: --from-tracking: run '{name}' ({run_id}) left out: "), line
    assert "not an effbench record" in err and "delete the folder" not in err
    cells = json.loads((out / "bs" / "sweep.json").read_text())["cells"]
    assert {p.name for p in (dest / "runs").iterdir() if p.is_dir()} == {Path(c["run_dir"]).name for c in cells}


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_stopped_server_costs_one_warning_line_not_the_run(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a server that has stopped
    # a process of its own: every line MLflow, urllib3 or effbench writes to its stderr is seen
    one_epoch = [*TINY, "--epochs", "1", "--max-steps", "3", "--repeats", "2", "--no-profile"]
    proc = subprocess.run(
        [sys.executable, "-m", "effbench", "run", *one_epoch, "--output", str(tmp_path), "--track", dead],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = only_run(tmp_path)
    assert json.loads((folder / "results.json").read_text())["status"] == "ok"
    assert {p.name for p in folder.iterdir()} >= RUN_FILES
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    tracking = [ln for ln in lines if "track" in ln or "mlflow" in ln.lower() or "Retry" in ln]
    assert len(tracking) == 1 and tracking[0].startswith("warning: --track: could not log to " + dead), lines
    assert f"`effbench track {folder} --track {dead}` logs it later" in tracking[0]


def test_failed_and_interrupted_runs_end_with_mlflow_s_matching_status(server, tmp_path, capsys):
    record = json.loads(FIXTURE_RECORD.read_text())
    for status, extra in (
        ("failed", {"error": {"type": "RuntimeError", "message": "x"}}),
        ("interrupted", {"signal": 15}),
    ):
        folder = tmp_path / "runs" / status
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({**record, **extra, "status": status, "run_name": status}))
    code, _, err = invoke(["track", tmp_path / "runs", "--track", server, "--track-experiment", "ends"], capsys)
    assert code == 0, err
    got = {r.info.run_name: (r.info.status, r.data.tags["effbench.status"]) for r in runs_of(server, "ends")}
    assert got == {"failed": ("FAILED", "failed"), "interrupted": ("KILLED", "interrupted")}


def test_a_sqlite_uri_needs_no_server(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "lone"
    folder.mkdir()
    shutil.copy(FIXTURE_RECORD, folder / "results.json")
    uri = f"sqlite:///{tmp_path}/m.db"
    # a process of its own: every line MLflow, alembic or SQLAlchemy writes while making the store is seen
    proc = subprocess.run([sys.executable, "-m", "effbench", "track", str(folder), "--track", uri],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0 and "tracked: 1 run (1 new)" in proc.stdout, proc.stderr
    assert proc.stderr == ""  # issue 46: no INFO lines ("Creating initial MLflow database tables...")
    (run,) = runs_of(uri, "effbench")
    record = json.loads(FIXTURE_RECORD.read_text())
    assert run.data.metrics["throughput_img_s"] == record["throughput_img_s"]
    assert run.data.params["arch"] == record["config"]["arch"]  # no config.json: the record's copy
    # the files go beside the database, not into ./mlruns of whatever folder this ran in
    assert {a.path for a in client(uri).list_artifacts(run.info.run_id)} == {"results.json"}  # nothing else there
    assert (tmp_path / "mlartifacts").is_dir() and not (tmp_path / "mlruns").exists()


def test_no_password_or_token_reaches_a_file_the_terminal_or_the_server(server, tmp_path, capsys, monkeypatch):
    """Issue 46: a password in `--track`'s URI and in EFFBENCH_TRACK, and tokens in the environment, are in no
    file of the run folder, no line printed, no artifact, param or tag on the server; the upload still gets the
    URI as given."""
    secrets = ("PW-opt-46", "PW-env-46", "TOKEN-mlflow-46", "TOKEN-effbench-46")
    host = server.removeprefix("http://")
    by_option, by_env = f"http://alice:{secrets[0]}@{host}", f"http://bob:{secrets[1]}@{host}"
    monkeypatch.setenv("EFFBENCH_TRACK", by_env)  # recorded (EFFBENCH_*) in env.json's env_vars
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", secrets[2])  # sent as a bearer token: this server ignores it
    monkeypatch.setenv("EFFBENCH_API_TOKEN", secrets[3])
    from effbench.track import mlflow_store

    real_upload, given = mlflow_store.upload, []

    def spy(paths, uri, *args, **kw):
        given.append(uri)
        return real_upload(paths, uri, *args, **kw)

    monkeypatch.setattr(mlflow_store, "upload", spy)
    out = tmp_path / "out"
    loud = [a for a in TINY if a != "--quiet"]  # every progress line printed too
    code, printed, err = invoke(["run", *loud, "--no-profile", "--output", out, "--track", by_option,
                                 "--track-experiment", "secrets"], capsys)  # fmt: skip
    assert code == 0 and "tracked: 1 run (1 new)" in printed, err[-3000:]
    folder = only_run(out)
    # the same folder again through the environment's URI alone (already there: looked up, not logged again)
    code, printed2, err2 = invoke(["track", folder, "--track-experiment", "secrets"], capsys)
    assert code == 0 and "(0 new, 1 already there)" in printed2, err2
    assert given == [by_option, by_env]  # the connection uses the real password

    (run,) = runs_of(server, "secrets")
    pulled = Path(client(server).download_artifacts(run.info.run_id, "", str(tmp_path / "pulled")))
    assert {"report.html", "results.json", "env.json"} <= {p.name for p in pulled.iterdir()}
    seen = {"stdout": printed + printed2, "stderr": err + err2, "params, tags": str([run.data.params, run.data.tags])}
    for p in [*out.rglob("*"), *pulled.rglob("*")]:
        if p.is_file():
            seen[str(p)] = p.read_bytes().decode("utf-8", "replace")
    assert [(where, s) for where, body in seen.items() for s in secrets if s in body] == []
    # still named, without the password: the terminal line, the command, the variable
    assert f"http://alice:***@{host}" in printed
    assert f"http://alice:***@{host}" in json.loads((folder / "results.json").read_text())["command"]
    assert json.loads((folder / "env.json").read_text())["env_vars"]["EFFBENCH_TRACK"] == f"http://bob:***@{host}"

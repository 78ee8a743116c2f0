"""MLflow as effbench's tracker: finished run folders uploaded (payload.py says what), and read back as records.

    upload([run_dir], "http://127.0.0.1:5000", "effbench")          # after a run, or `effbench track`
    read_back("http://127.0.0.1:5000", "effbench", Path("out"))     # `effbench report --from-tracking`

The only module that imports MLflow (`mlflow-skinny`, the client alone: `pip install 'effbench[tracking]'`), and
only inside its functions, so `effbench --help` and a run's measured steps never load it. An upload is
idempotent: each run is looked up by its key (tag effbench.run_id) before one is created; one that is there
complete is left as it is, one cut short (no effbench.upload tag) is replaced whole. A sweep or scaling series
is a parent run (looked up the same way, its status and files refreshed) with its runs as children
(tag mlflow.parentRunId, which MLflow's UI nests).

Each upload or read runs in a child process (bounded.py) with a wall-clock budget for every MLflow call; the
functions OPS names are what the child runs, the client they are handed already under that budget.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import results
from effbench.analysis import export as ex
from effbench.errors import EffbenchError
from effbench.track import bounded
from effbench.track import payload as P

INSTALL = "pip install 'effbench[tracking]'"
# Tracking URIs MLflow takes (mlflow/tracking/_tracking_service/utils.py registers a store per scheme); a
# database scheme may carry a driver (postgresql+psycopg2).
SCHEMES = ("http", "https", "file", "databricks", "sqlite", "postgresql", "mysql", "mssql")
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
GROUP_KINDS = ("sweep", "scaling")
PARENT = "mlflow.parentRunId"  # mlflow/utils/mlflow_tags.py MLFLOW_PARENT_RUN_ID: the UI nests the run under it
# mlflow/environment_variables.py defaults: 7 retries with exponential backoff (about 4 minutes). A run that has
# just ended should not wait minutes on a server that is down: 2 retries 1 s apart; a value the user exported
# wins. MLFLOW_HTTP_REQUEST_TIMEOUT is per socket read, not per request: it defaults to the budget of each call
# (bounded.py), which is what bounds a call's whole time.
CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    # MlflowClient.set_terminated prints "View run ... at" per run (tracking/_tracking_service/client.py
    # _log_url): effbench says once where the runs went
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # store/artifact/artifact_repo.py download_artifacts draws a tqdm bar per call (ArtifactProgressBar)
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}
# mlflow/store/tracking/file_store.py refuses a file: store unless this is set ("maintenance mode"); the
# user asked for one by naming it
FILE_STORE_ENV = {"MLFLOW_ALLOW_FILE_STORE": "true"}
# Loggers that would print retries, migrations ("Creating initial MLflow database tables...") and MLflow's own
# errors: the upload's outcome is effbench's one line.
QUIET_LOGGERS = ("mlflow", "alembic", "sqlalchemy", "urllib3")
# mlflow/store/db/utils.py create_sqlalchemy_engine_with_retry: MAX_RETRY_COUNT = 10 tries 0.1 * (2**n - 1) s
# apart (~100 s, a warning each) and no setting for it; one retry is enough for a database that is up.
SQL_TRIES = 2
MAX_EXPERIMENT_CHARS = 500  # mlflow/utils/validation.py MAX_EXPERIMENT_NAME_LENGTH: a longer name is refused
READ_FILES = (results.RESULTS_FILE, results.ENV_FILE, results.CONFIG_FILE)
READ_MARKER = ".effbench-tracking"
"""In the runs/ folder `read_back` fills: it may replace a folder holding it, never another one."""


def scheme(uri: str) -> str:
    head, sep, _ = uri.partition(":")
    return head.split("+")[0].lower() if sep else ""


def check(uri: str, option: str = "--track", *, write: bool = True) -> None:
    """Before a run starts: the URI is one MLflow takes, its client is installed, EFFBENCH_TRACK_TIMEOUT is a
    budget and, to `write`, a SQLite file's or file: store's folder takes a file (one line with the fix)."""
    if scheme(uri) not in SCHEMES:
        raise EffbenchError(
            option,
            f"{uri!r} is not an MLflow tracking URI; use a server (http://HOST:5000) or a database "
            "(sqlite:///PATH.db), e.g. --track http://127.0.0.1:5000",
        )
    if importlib.util.find_spec("mlflow") is None:
        raise EffbenchError(option, f"logging to MLflow needs its client, which is not installed: {INSTALL}")
    if scheme(uri) in DATABASES and any(importlib.util.find_spec(m) is None for m in ("sqlalchemy", "alembic")):
        raise EffbenchError(
            option,
            f"{uri} is a database: writing to one directly needs MLflow's SQL store (pip install sqlalchemy "
            "alembic, or the full `mlflow` package); or log to an MLflow server: --track http://HOST:5000",
        )
    bounded.budget_s()
    folder = _store_folder(uri) if write else None
    if folder is not None:
        _check_writable(folder, uri, option)


def _store_folder(uri: str) -> Path | None:
    """The folder a SQLite file or a file: store is written in; None for a server or another database."""
    if scheme(uri) == "sqlite" and uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        return Path(urllib.parse.unquote(uri[len("sqlite:///") :].split("?")[0])).parent
    if scheme(uri) == "file":
        return Path(urllib.request.url2pathname(urllib.parse.urlparse(uri).path))
    return None


def _check_writable(folder: Path, uri: str, option: str) -> None:
    """Before a run: a file written where the store will be (MLflow makes the missing folders, so the nearest
    existing one is tried). Tried, not os.access: root passes every permission check yet cannot write to a
    read-only mount or /proc; and MLflow's engine would retry an unwritable SQLite file for ~100 s."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{existing} is not a folder")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".effbench-probe-"):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        raise EffbenchError(
            option,
            f"{uri} cannot be written: no file can be made in {existing} ({why}); name a store in a folder you "
            "can write, "
            "e.g. --track sqlite:///$HOME/mlflow/mlflow.db",
        ) from None


def check_experiment(name: str, option: str = "--track-experiment") -> None:
    if not name.strip():
        raise EffbenchError(option, "is empty; name the MLflow experiment, e.g. --track-experiment effbench")
    if len(name) > MAX_EXPERIMENT_CHARS:
        raise EffbenchError(
            option, f"is {len(name)} characters; MLflow takes at most {MAX_EXPERIMENT_CHARS}: name a shorter one"
        )


def quiet_mlflow(uri: str, budget: float) -> None:
    """In the tracking child (bounded.py): MLflow's settings for our calls, its loggers, warnings and retry loops
    bounded and silenced. Only that process is touched: it ends with the operation."""
    # a read never times out before the call's budget does: the watchdog's line, naming it, is the one seen
    wanted = {**CLIENT_ENV, "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(budget) + 1)}
    for k, v in {**wanted, **(FILE_STORE_ENV if scheme(uri) == "file" else {})}.items():
        os.environ.setdefault(k, v)
    import mlflow  # noqa: F401  (its import sets its loggers' levels: quieted after it)

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    warnings.simplefilter("ignore")
    if scheme(uri) in DATABASES:
        from mlflow.store.db import utils as db_utils

        db_utils.MAX_RETRY_COUNT = SQL_TRIES


_STATUS = re.compile(r"too many (\d{3}) error responses|error code (\d{3})")
_BODY = re.compile(r"Response body: '(.*)'", re.DOTALL)


def reason(e: BaseException) -> str:
    """What went wrong, in a few words: MLflow's messages carry the whole request, urllib3's retry state and the
    server's answer as it came (bounded.excerpt shows a short, printable, redacted piece of it at most)."""
    text = " ".join(str(e).split())
    if m := _STATUS.search(text):
        said = f"the server answered HTTP {m.group(1) or m.group(2)}"
        body = _BODY.search(text)
        return said + (f": {bounded.excerpt(body.group(1))}" if body and body.group(1).strip() else "")
    for needle, said in (
        ("Connection refused", "connection refused"),
        ("not in a valid JSON format", "the server's answer is not MLflow's (not JSON)"),
        ("BadStatusLine", "the server's answer is not HTTP"),
        ("RemoteDisconnected", "the server closed the connection without an answer"),
        ("timed out", f"no answer within MLFLOW_HTTP_REQUEST_TIMEOUT={os.environ.get('MLFLOW_HTTP_REQUEST_TIMEOUT')} s"),
        ("Name or service not known", "host not found"),
        ("Failed to resolve", "host not found"),
        ("Max retries exceeded", "cannot connect"),
    ):  # fmt: skip
        if needle in text:
            return said
    return bounded.excerpt(text or type(e).__name__)


def _client(uri: str, watch: bounded.Watchdog) -> Any:
    from mlflow.tracking import MlflowClient

    with watch("connect"):  # a database store connects (and makes its tables) here
        return bounded.Watched(MlflowClient(tracking_uri=uri), watch)


def _artifact_location(uri: str) -> str | None:
    """Where a new experiment keeps its files: beside a SQLite file (MLflow's default is ./mlruns in whatever
    folder the command ran from); a server or other store: its own default."""
    if scheme(uri) != "sqlite" or not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///") :])
    return (db.resolve().parent / "mlartifacts").as_uri()


def _experiment_id(client: Any, name: str, uri: str, option: str) -> str:
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return str(client.create_experiment(name, artifact_location=_artifact_location(uri)))
        except MlflowException:  # another upload created it meanwhile
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        raise EffbenchError(
            option, f"experiment {name!r} at {uri} is deleted; restore it (mlflow experiments restore) or name another"
        )
    return str(exp.experiment_id)


def _find(client: Any, experiment_id: str, key: str) -> list[Any]:
    # the key is hex (payload._hash): nothing in it needs quoting in the filter
    found = client.search_runs([experiment_id], filter_string=f"tags.`{P.KEY}` = '{key}'", max_results=100)
    return list(found)


def _chunks(items: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _log(client: Any, run_id: str, run: P.TrackedRun, *, params: bool = True) -> None:
    from mlflow.entities import Metric, Param
    from mlflow.utils.time import get_current_time_millis

    now = get_current_time_millis()
    stamp = run.end_ms or now  # the headline figures are the run's at its end
    if params:  # mlflow/utils/validation.py: at most 100 params and 1000 metrics per batch
        for chunk in _chunks([Param(k, v) for k, v in run.params.items()], 100):
            client.log_batch(run_id, params=chunk)
    metrics = [Metric(k, v, stamp, 0) for k, v in run.metrics.items()]
    metrics += [Metric(p.key, p.value, p.ms if p.ms is not None else stamp, p.step) for p in run.points]
    for chunk in _chunks(metrics, 1000):
        client.log_batch(run_id, metrics=chunk)
    for f in run.artifacts:  # one in a folder of the run's (plots/) under that folder's name
        under = f.parent.relative_to(run.folder).as_posix() if run.folder is not None else "."
        client.log_artifact(run_id, str(f), None if under == "." else under)


def _user() -> str:
    """mlflow.user as MLflow's own client sets it (tracking/context/default_context.py): the tracking server's
    user name (MLFLOW_TRACKING_USERNAME or ~/.mlflow/credentials), else this login's."""
    from mlflow.tracking.context.default_context import DefaultRunContext

    return str(DefaultRunContext().tags()[P.MLFLOW_USER])


def _upsert_run(client: Any, experiment_id: str, run: P.TrackedRun, parent: str | None) -> str:
    """created, present (there complete: untouched but for its kind and parent) or replaced (cut short before)."""
    found = _find(client, experiment_id, run.key)
    done = next((r for r in found if r.data.tags.get(P.UPLOAD) == P.COMPLETE), None)
    if done is not None:
        # a cell rerun by a resumed sweep turns its first try into an attempt; an upload of the cell alone
        # before its sweep's gains the parent
        fresh = {P.KIND: run.tags.get(P.KIND), P.GROUP: run.tags.get(P.GROUP), PARENT: parent}
        for k, v in fresh.items():
            if v is not None and done.data.tags.get(k) != v:
                client.set_tag(done.info.run_id, k, v)
        return "present"
    for r in found:
        client.delete_run(r.info.run_id)
    tags = {**run.tags, P.MLFLOW_USER: _user(), **({PARENT: parent} if parent else {})}
    created = client.create_run(experiment_id, start_time=run.start_ms, tags=tags, run_name=run.name)
    run_id = created.info.run_id
    _log(client, run_id, run)
    if run.status != "RUNNING":  # a record never settled stays RUNNING and incomplete: the next upload replaces it
        client.set_terminated(run_id, run.status, end_time=run.end_ms)
        client.set_tag(run_id, P.UPLOAD, P.COMPLETE)
    return "replaced" if found else "created"


def _upsert_group(client: Any, experiment_id: str, group: P.TrackedRun) -> tuple[str, str]:
    """The parent run's id and what was done: found by its key, `updated` (its tags and files refreshed: a
    resumed sweep has more cells), else `created` with its params."""
    from mlflow.entities import RunTag

    found = _find(client, experiment_id, group.key)
    if found:
        run_id = str(found[0].info.run_id)
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in group.tags.items()])
        _log(client, run_id, group, params=False)
        return run_id, "updated"
    tags = {**group.tags, P.MLFLOW_USER: _user()}
    created = client.create_run(experiment_id, start_time=group.start_ms, tags=tags, run_name=group.name)
    _log(client, created.info.run_id, group)
    return str(created.info.run_id), "created"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _outcomes(counts: dict[str, int], there: str) -> str:
    """(2 new, 1 replaced, 3 already there): the new ones always, the rest when there are any."""
    said = [f"{counts.get('created', 0)} new"]
    said += [f"{counts[k]} {w}" for k, w in (("replaced", "replaced"), ("present", there), ("updated", "updated"))
             if counts.get(k)]  # fmt: skip
    return ", ".join(said)


@dataclass(frozen=True)
class Uploaded:
    uri: str
    experiment: str
    experiment_id: str
    counts: dict[str, int]
    """created / present / replaced -> runs."""
    groups: dict[str, int]
    """created / updated -> parent runs (sweeps and scaling series)."""
    kinds: dict[str, int]
    """sweep / scaling -> parent runs."""

    def line(self) -> str:
        """What MLflow now holds, runs and parent runs apart: `tracked: 2 runs (2 new) and 1 sweep as a parent
        run (1 new) in experiment 'sweeps': URL`; the UI lists 3 runs."""
        runs = f"{_plural(sum(self.counts.values()), 'run', 'runs')} ({_outcomes(self.counts, 'already there')})"
        if self.kinds:
            n = sum(self.kinds.values())
            kinds = " and ".join(
                _plural(k, *names)
                for kind, names in (("sweep", ("sweep", "sweeps")), ("scaling", ("scaling series", "scaling series")))
                if (k := self.kinds.get(kind))
            )
            runs += f" and {kinds} as {'a parent run' if n == 1 else 'parent runs'} ({_outcomes(self.groups, '')})"
        where = (
            f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}"
            if scheme(self.uri) in ("http", "https")
            else self.uri
        )
        return f"tracked: {runs} in experiment {self.experiment!r}: {where}"


def upload(
    paths: Sequence[Path], uri: str, experiment: str, *, traces: bool = False, option: str = "--track"
) -> Uploaded:
    """Log every run folder at or under `paths` (the same folders `effbench export` reads) to `uri`.

    A bad folder is an EffbenchError before anything is sent; a tracker that cannot be reached, refuses a
    request or outlives the budget of a call is an EffbenchError naming `option`, the URI and the reason."""
    P.collect(paths, traces=traces)  # here, before the child: a bad folder is its own error line
    args = {"paths": [str(Path(p).absolute()) for p in paths], "uri": uri, "experiment": experiment, "traces": traces}
    try:
        done = bounded.call("upload", args, bounded.budget_s())
    except bounded.Unanswered as e:
        raise EffbenchError(option, f"could not log to {uri} ({e})") from None
    return Uploaded(uri, experiment, done["experiment_id"], done["counts"], done["groups"], done["kinds"])


def _upload_here(
    *, paths: list[str], uri: str, experiment: str, traces: bool, watch: bounded.Watchdog
) -> dict[str, Any]:
    """upload's work, in the tracking child."""
    plan = P.collect([Path(p) for p in paths], traces=traces)
    counts: dict[str, int] = {}
    client = _client(uri, watch)
    experiment_id = _experiment_id(client, experiment, uri, "--track-experiment")
    parents: dict[Path, str] = {}
    groups: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for folder, g in plan.groups.items():
        parents[folder], outcome = _upsert_group(client, experiment_id, g)
        groups[outcome] = groups.get(outcome, 0) + 1
        kind = g.tags.get(P.KIND, "sweep")
        kinds[kind] = kinds.get(kind, 0) + 1
    for run in plan.runs:
        outcome = _upsert_run(client, experiment_id, run, parents.get(run.group) if run.group else None)
        counts[outcome] = counts.get(outcome, 0) + 1
    for folder, g in plan.groups.items():  # after its runs: a cut-short upload leaves it incomplete
        if g.status != "RUNNING":
            client.set_terminated(parents[folder], g.status, end_time=g.end_ms)
            client.set_tag(parents[folder], P.UPLOAD, P.COMPLETE)
    return {"experiment_id": experiment_id, "counts": counts, "groups": groups, "kinds": kinds}


def _all_runs(client: Any, experiment_id: str) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=f"tags.`{P.UPLOAD}` = '{P.COMPLETE}'", max_results=1000, page_token=token
        )
        runs += list(page)
        token = page.token
        if not token:
            return runs


def _runs_folder(dest: Path) -> Path:
    """dest/runs/, emptied: only a runs/ folder an earlier read back wrote (READ_MARKER) is replaced."""
    runs_dir = dest / "runs"
    if runs_dir.exists():
        if not (runs_dir / READ_MARKER).is_file():
            raise EffbenchError(
                "--output", f"{runs_dir} exists and was not written by `effbench report --from-tracking`; "
                "choose another --output"
            )  # fmt: skip
        shutil.rmtree(runs_dir)
    runs_dir.mkdir(parents=True)
    (runs_dir / READ_MARKER).write_text(
        "run folders read back from an MLflow tracking server; replaced on every read\n"
    )
    return runs_dir


def _download(client: Any, run_id: str, folder: Path) -> str | None:
    """results.json, env.json and config.json of one run into its folder; why not, when results.json is not."""
    folder.mkdir()
    for name in READ_FILES:
        try:
            client.download_artifacts(run_id, name, str(folder))
        except Exception as e:  # env.json and config.json may be absent: the record holds copies of both
            if name == results.RESULTS_FILE:
                return f"its {name} artifact could not be read ({reason(e)})"
    return None if (folder / results.RESULTS_FILE).is_file() else f"it has no {results.RESULTS_FILE} artifact"


def _read_here(*, uri: str, experiment: str, dest: str, watch: bounded.Watchdog) -> list[dict[str, Any]]:
    """read_back's downloads, in the tracking child: each run's id, name, folder, kind, group, and why it could
    not be read (None when it could)."""
    client = _client(uri, watch)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments(max_results=50))
        raise EffbenchError(
            "--experiment", f"{uri} has no experiment {experiment!r}; it has: {', '.join(names) or 'none'}"
        )
    found = [r for r in _all_runs(client, str(exp.experiment_id)) if r.data.tags.get(P.KIND) not in GROUP_KINDS]
    # in the order of their folders' paths when uploaded, as `effbench report FOLDER` finds them
    # (export.find_runs): the leaderboard lists its groups in the order it first meets them
    found.sort(key=lambda r: (Path(r.data.tags.get(P.PATH, "")), r.info.run_name or "", r.info.run_id))
    runs_dir = _runs_folder(Path(dest))
    folders: list[Path] = []
    taken: set[str] = set()
    for r in found:  # the run folder's own name; two of one name (two machines) told apart by run id
        base = results.safe_name(r.info.run_name or r.info.run_id)
        name = base if base not in taken else f"{base}-{r.info.run_id[:8]}"
        taken.add(name)
        folders.append(runs_dir / name)
    with ThreadPoolExecutor(max_workers=4) as pool:
        why = list(pool.map(lambda rf: _download(client, rf[0].info.run_id, rf[1]), zip(found, folders, strict=True)))
    return [
        {"id": r.info.run_id, "name": r.info.run_name or r.info.run_id, "folder": str(folder), "why": w,
         "kind": r.data.tags.get(P.KIND), "group": r.data.tags.get(P.GROUP)}
        for r, folder, w in zip(found, folders, why, strict=True)
    ]  # fmt: skip


def read_back(uri: str, experiment: str, dest: Path, option: str = "--from-tracking") -> tuple[list[ex.Run], list[str]]:
    """Every run logged complete to `experiment` (the parents of sweeps aside) as run folders under dest/runs/,
    and as the export rows the leaderboard reads (their kind and group as tagged); and, for each run left out
    because its results.json could not be downloaded or read, a line naming it and why (its folder removed)."""
    check(uri, option, write=False)  # a database copied read-only is still read
    try:
        got = bounded.call("read", {"uri": uri, "experiment": experiment, "dest": str(Path(dest).absolute())},
                           bounded.budget_s())  # fmt: skip
    except bounded.Unanswered as e:
        raise EffbenchError(option, f"could not read {uri} ({e})") from None
    out: list[ex.Run] = []
    left_out: list[str] = []
    for r in got:
        folder, why = Path(r["folder"]), r["why"]
        if why is None:
            try:
                run = ex.read_run(folder / results.RESULTS_FILE)
            except EffbenchError as e:  # its own line: one bad run must not sink the leaderboard
                why = f"its {results.RESULTS_FILE} is not an effbench record ({e.message.split('; ')[0]})"
            else:
                run.row[ex.KIND] = r["kind"] or run.row[ex.KIND]
                run.row[ex.GROUP] = r["group"]
                out.append(run)
                continue
        left_out.append(f"run {r['name']!r} ({r['id']}) left out: {why}")
        shutil.rmtree(folder, ignore_errors=True)  # runs/ holds only records compare and export can read
    return out, left_out


OPS: dict[str, Callable[..., Any]] = {"upload": _upload_here, "read": _read_here}
"""What the tracking child (bounded.py) runs, by name."""

"""`--track URI` on `run` and `sweep`, and `effbench track FOLDER...`: run folders into an MLflow tracking server.

    effbench run --smoke --track http://127.0.0.1:5000          # logged once the run folder is final
    effbench sweep --smoke --batch-size 16,32 --track http://127.0.0.1:5000    # a parent run, the cells its children
    effbench track results/ --track http://127.0.0.1:5000       # afterwards, e.g. from a login node; idempotent

One code path: `run` and `sweep` call the same upload as `effbench track`, after the run (or sweep) has
ended and its folder is final, in the process that launched it (rank 0's record, settled): the tracker is
never in the measured path, and a tracker that fails costs one warning line, never the run folder or the
exit code. Torch-free; MLflow is imported only by effbench/track/mlflow_store.py, once there is a run to log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from effbench.cli.common import latest_or_given, opt, say
from effbench.errors import EffbenchError

DEFAULT_EXPERIMENT = "effbench"
ENV = "EFFBENCH_TRACK"

TrackUri = Annotated[
    str | None,
    opt(
        "Log the run to this MLflow tracking URI once its folder is final: a server as http://HOST:5000 or a "
        "database as sqlite:///PATH.db. The run folder is written either way. Needs pip install "
        "'effbench[tracking]'.",
        "--track",
        metavar="URI",
        envvar=ENV,
    ),
]
TrackExperiment = Annotated[
    str,
    opt(f"The MLflow experiment the runs go in. [default: {DEFAULT_EXPERIMENT}]", "--track-experiment", metavar="NAME"),
]
TrackTraces = Annotated[
    bool, opt("Log the profiler traces too: trace_rank*.json.gz, megabytes each. [default: off]", "--track-traces")
]


@dataclass(frozen=True)
class Tracking:
    uri: str
    experiment: str
    traces: bool


def tracking(uri: str | None, experiment: str, traces: bool) -> Tracking | None:
    """Checked before anything runs: None without --track; a bad URI or no MLflow client is one error line."""
    if not uri:
        if traces or experiment != DEFAULT_EXPERIMENT:
            given = "--track-traces" if traces else "--track-experiment"
            raise EffbenchError(given, f"logs to a tracking server: give one with --track URI (or {ENV})")
        return None
    from effbench.track import mlflow_store

    mlflow_store.check_experiment(experiment)
    mlflow_store.check(uri)
    return Tracking(uri, experiment, traces)


def after(folder: Path | None, t: Tracking | None) -> None:
    """Log a finished run, series or sweep folder. Whatever goes wrong (the server down, a refusal, a signal)
    is one warning line: the folder is complete, and `effbench track` logs it later."""
    if t is None or folder is None:
        return
    from effbench.run.phases import Interrupted
    from effbench.track import mlflow_store

    try:
        done = mlflow_store.upload([folder], t.uri, t.experiment, traces=t.traces)
    except Interrupted as e:
        problem = f"--track: logging to {t.uri} interrupted by {e}"
    except Exception as e:  # the tracker must never cost a run
        problem = (
            str(e) if isinstance(e, EffbenchError) else f"--track: could not log to {t.uri} ({mlflow_store.reason(e)})"
        )
    else:
        say(done.line())
        return
    later = f"effbench track {folder} --track {t.uri}" + (
        f" --track-experiment {t.experiment}" if t.experiment != DEFAULT_EXPERIMENT else ""
    )
    say(f"warning: {problem}; {folder} is complete: `{later}` logs it later", err=True)


def track(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Run, sweep or results folders, as `effbench export` reads them. latest is the one that finished "
            "last.",
            show_default=False,
        ),
    ],
    uri: Annotated[
        str | None,
        opt("The MLflow tracking URI: http://HOST:5000 or sqlite:///PATH.db.", "--track", metavar="URI", envvar=ENV),
    ] = None,
    experiment: TrackExperiment = DEFAULT_EXPERIMENT,
    traces: TrackTraces = False,
) -> None:
    """Log finished run and sweep folders to an MLflow tracking server afterwards. Use it from a login node when
    the compute nodes have no network. A run already there complete is not logged again."""
    if not uri:
        raise EffbenchError("--track", f"give the tracking URI, e.g. --track http://127.0.0.1:5000 (or set {ENV})")
    t = tracking(uri, experiment, traces)
    assert t is not None
    from effbench.track import mlflow_store

    say(mlflow_store.upload([latest_or_given(p) for p in paths], t.uri, t.experiment, traces=t.traces).line())

"""effbench command line: thin Typer commands that build a config and make one call.

    effbench run --smoke                      # synthetic data, CPU, a full report in under a minute
    effbench run --arch b0 --dataset cifar100 --data-dir ./data --download
    effbench run --arch resnet18 --dataset cifar10 --no-batch-norm --optimizer adadelta --device cpu

torch is imported only inside the commands that train, so `effbench --help` is instant.
Every EffbenchError becomes one line on stderr and exit code 2; usage errors too.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from effbench import troubleshooting
from effbench.cli.common import invocation, say
from effbench.cli.common import opt as _opt
from effbench.cli.doctor import doctor
from effbench.cli.options import config_options, with_config_options
from effbench.cli.sweep import compare, report, sweep
from effbench.cli.track import DEFAULT_EXPERIMENT, TrackExperiment, TrackTraces, TrackUri, after, track, tracking
from effbench.errors import EffbenchError

# click's UsageError, wherever this Typer takes click from (recent Typer vendors it privately).
UsageError: Any = typer.BadParameter.__mro__[1]

app = typer.Typer(
    name="effbench",
    help="Benchmark PyTorch CNN training: throughput, data vs compute time, accuracy, and where the time goes.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from effbench.system.identity import version_text  # torch-free: reads versions from metadata

        say(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the versions of effbench, the image revision and lock, torch and CUDA, then exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """effbench: how fast does this model train here, and where does the time go."""


# Every RunConfig field is an option of `run`; --gpus and --nproc take a list (a scaling series), and only
# --smoke and --quiet are run's own.
RUN_OPTIONS = config_options(
    exclude=("smoke",),
    as_text=("gpus", "nproc"),
    extra={"gpus": "A list like 1,2,4 runs a scaling series.", "nproc": "A list like 1,2 runs a scaling series."},
)


@app.command()
@with_config_options(RUN_OPTIONS)
def run(
    ctx: typer.Context,
    *,
    smoke: Annotated[
        bool,
        _opt(
            "Run a small preset: synthetic data, random weights, b0 at 32 px, one short epoch on the CPU. Other "
            "options still override it."
        ),
    ] = False,
    quiet: Annotated[
        bool,
        _opt(
            "Print only the headline and the path to report.txt, at most 5 lines. The headline is the status, the "
            "throughput and the verdict."
        ),
    ] = False,
    track: TrackUri = None,
    track_experiment: TrackExperiment = DEFAULT_EXPERIMENT,
    track_traces: TrackTraces = False,
    **given: Any,
) -> None:
    """Train one model, measure it, and write a run folder with config, env, results and reports."""
    tracked = tracking(track, track_experiment, track_traces)  # before anything runs: one line if it cannot log
    from effbench.report.run_reports import RUN_REPORTS
    from effbench.run import launch
    from effbench.config import RunConfig, preset_conflicts, smoke_overrides
    from effbench.launch.plan import check_launch_env, kubeflow_settings, parse_counts, slurm_settings
    from effbench.system import machine

    gpus, nproc = given.pop("gpus"), given.pop("nproc")  # lists: one RunConfig per count
    explicit = {k: v for k, v in given.items() if v is not None}
    check_launch_env(os.environ)  # a rank variable that is not a number, Slurm and Kubeflow at odds: one line
    machine.given_name(os.environ)  # EFFBENCH_MACHINE names the machine in every comparison: printable
    slurm = slurm_settings(os.environ)
    if slurm is not None and slurm.nnodes > 1:  # srun on several nodes: rendezvous from the allocation
        explicit.setdefault("nnodes", slurm.nnodes)
        explicit.setdefault("node_rank", slurm.node_rank)
        if slurm.rdzv_endpoint is not None:  # no host named: plan_launch asks for --rdzv-endpoint, no guess
            explicit.setdefault("rdzv_endpoint", slurm.rdzv_endpoint)  # MASTER_PORT, else from the job id
        explicit.setdefault("rdzv_id", slurm.job_id)
    kubeflow = kubeflow_settings(os.environ) if slurm is None else None
    if kubeflow is not None:  # a Kubeflow PyTorchJob / TrainJob pod: the rendezvous from PET_* (docs/kubernetes.md)
        if kubeflow.nnodes > 1:
            explicit.setdefault("nnodes", kubeflow.nnodes)
            explicit.setdefault("node_rank", kubeflow.node_rank)
            assert kubeflow.rdzv_endpoint is not None  # kubeflow_settings refuses PET_NNODES > 1 with no master
            explicit.setdefault("rdzv_endpoint", kubeflow.rdzv_endpoint)
            explicit.setdefault("rdzv_id", kubeflow.rdzv_id)
        if kubeflow.nproc_per_node is not None and gpus is None and nproc is None:  # nprocPerNode: a number
            on_cpu = explicit.get("device", "cpu" if smoke else None) == "cpu"
            nproc, gpus = (str(kubeflow.nproc_per_node), None) if on_cpu else (None, str(kubeflow.nproc_per_node))
    gpu_counts = parse_counts("--gpus", gpus) if gpus is not None else [None]
    proc_counts = parse_counts("--nproc", nproc) if nproc is not None else [None]
    if len(gpu_counts) > 1 and len(proc_counts) > 1:
        raise EffbenchError("--gpus", "give a list to --gpus or to --nproc, not both")
    if smoke:
        preset_conflicts(explicit, gpus=gpus)
    base = {**smoke_overrides(), **explicit} if smoke else explicit
    configs = [RunConfig(**base, gpus=g, nproc=p) for g in gpu_counts for p in proc_counts]
    command = invocation(ctx)
    from effbench.system import wait_policy

    note = wait_policy.apply(configs[0].omp_wait_policy, configs[0].device)  # before torch loads (module docstring)
    if note:
        say(note, err=True)
    if len(configs) == 1:
        # --quiet: nothing from the run itself (its folder line, its report); its headline once it has ended
        echo = None if quiet else say
        outcome = launch.run(configs[0], command=command, echo=echo, progress=not quiet, reports=RUN_REPORTS)
        if quiet:
            from effbench.report.run_reports import quiet_text

            say(quiet_text(outcome.results, outcome.run_dir))
        after(outcome.run_dir, tracked)  # the settled record; a node without rank 0 has no folder to log
        _warn_if_output_is_lost(configs[0].output)
        _exit_for(outcome)
        return
    from effbench.sweep.series import run_scaling_series

    series = run_scaling_series(configs, command=command, echo=say, progress=not quiet)
    after(series.folder, tracked)
    _warn_if_output_is_lost(configs[0].output)
    worst = next((o for o in series.outcomes if o.results.status != "ok"), None)
    if worst is not None:
        _exit_for(worst)


def _warn_if_output_is_lost(output: Path) -> None:
    """Said again after the run: the warning before it has scrolled away under the progress lines."""
    from effbench.system.preflight import output_loss_warning

    warning = output_loss_warning(output)
    if warning:
        say(warning, err=True)


# Exceptions of a broken collective or rendezvous, matched by class name so this needs no torch:
# torch.distributed's DistError and its subclasses DistBackendError (an NCCL watchdog timeout),
# DistNetworkError, DistStoreError (torch/distributed/__init__.py: torch._C's classes, __name__ without
# the underscore), and torch/distributed/elastic/rendezvous/api.py's RendezvousError and its subclasses.
DIST_ERRORS = re.compile(r"^(Dist\w*Error|Rendezvous\w*Error)$")


def run_error_section(status: str, error_type: str | None) -> str | None:
    """The docs/troubleshooting.md section a failed run's closing line points to, if any."""
    if status == "oom":
        return troubleshooting.OOM
    if status == "failed" and error_type and DIST_ERRORS.match(error_type):
        return troubleshooting.NCCL
    return None


def _exit_for(outcome: Any) -> None:
    record = outcome.results  # schema.Results (run/rank.py RunOutcome)
    status = record.status
    if status == "ok":
        return
    err = record.error
    detail = f" ({err.type}: {err.message})" if err is not None else ""
    if status == "interrupted" and record.signal:
        phase = record.interrupted_phase
        detail = f" by {_signal_name(record.signal)}" + (f" during {phase}" if phase else "")
    what = "measurements so far are" if record.epochs else "nothing was measured; results.json is"
    where = f"; {what} in {outcome.run_dir}" if outcome.run_dir else ""
    see = run_error_section(status, err.type if err is not None else None)
    say(f"error: run {status}{detail}{where}" + (f"; {troubleshooting.see(see)}" if see else ""), err=True)
    raise typer.Exit(outcome.exit_code)


@app.command(hidden=True)
def worker(spec: Annotated[Path, typer.Option(help="Launch spec written by `effbench run`.")]) -> None:
    """One torchrun rank of `effbench run` (started by effbench itself, not by hand)."""
    from effbench.run.launch import worker_main

    raise typer.Exit(worker_main(spec))


app.command()(doctor)

from effbench.cli.models import models  # noqa: E402  (torch-free until it runs)

app.command()(models)

from effbench.cli.datasets import datasets as _datasets  # noqa: E402  (torch-free)

app.command(name="datasets")(_datasets)
app.command()(sweep)
app.command()(report)
app.command()(compare)

from effbench.cli.export import export  # noqa: E402  (torch-free)
from effbench.cli.selftest import selftest  # noqa: E402  (torch-free until it runs)

app.command()(selftest)

app.command()(export)
app.command()(track)


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _interrupted(e: Any) -> None:
    """A signal outside a run folder's life (nothing measured): one line, exit 128 + signum."""
    where = f" during {e.phase}, before anything was measured; no run folder was written" if e.phase else ""
    print(f"error: interrupted by {_signal_name(e.signum)}{where}", file=sys.stderr)
    sys.exit(128 + e.signum)


def main(argv: list[str] | None = None, held: Sequence[int] = ()) -> None:
    """The CLI: one-line errors and exit code 2 for every bad input. `held`: signals that came while
    effbench/__main__.py imported this module, raised first thing as if they came now."""
    from effbench.run.phases import Interrupted, install, restore

    # First: SIGTERM/SIGINT/SIGHUP raise from here on (as PID 1 in a container, SIGTERM would else be ignored).
    old_handlers = install()
    try:
        if held:
            raise Interrupted(held[0])
        _main(argv)
    except Interrupted as e:
        _interrupted(e)
    finally:
        restore(old_handlers)  # in-process callers (tests) get their own handlers back


def _main(argv: list[str] | None) -> None:
    command = typer.main.get_command(app)
    recorded = [str(a) for a in argv] if argv is not None else None  # what common.invocation records
    try:
        code = command.main(args=argv, prog_name="effbench", standalone_mode=False, obj=recorded)
    except EffbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:  # bare `effbench`: show help
            print(e.ctx.get_help())
            sys.exit(0)
        hint = f" (see `effbench {e.ctx.command.name} --help`)" if e.ctx and e.ctx.command.name != "effbench" else ""
        say(f"error: {' '.join(e.format_message().split())}{hint}", err=True)  # the argument as typed, shown
        sys.exit(2)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    except OSError as e:
        if not _stdout_refused(e):
            raise
        name = errno.errorcode.get(e.errno or 0, "")
        why = f"{e.strerror}, {name}" if name else e.strerror
        print(f"error: stdout: refused the write ({why}); redirect it elsewhere", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _stdout_refused(e: OSError) -> bool:
    """Whether `e` was a write to stdout that failed (`effbench export runs/ > /dev/full`, a full disk under
    `> file`): no file name, raised where stdout was written (typer.echo, the one way commands print). Its
    pending bytes are then dropped (stdout pointed at /dev/null, as Python's signal docs do after a
    BrokenPipeError) so the interpreter's own flush at exit prints no second traceback."""
    tb = e.__traceback__
    if e.filename is not None or tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    if not any(v is sys.stdout for v in tb.tb_frame.f_locals.values()):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return True

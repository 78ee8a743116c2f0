"""`effbench sweep`, `effbench report`, `effbench compare`: thin commands over sweep.py, render.py, compare.py.

    effbench sweep --preset optimizers --device cpu --dataset synthetic --arch resnet18 --image-size 32 --max-steps 10
    effbench sweep --batch-size 32,64 --workers 0,2 --device cpu --dataset synthetic --repeats 5
    effbench report results/sweep-optimizers          # re-render tables, plots, report.html (no torch)
    effbench compare results/runA results/runB        # deltas with 95% CIs, "within noise" when so
    effbench compare ci/baseline.json results/runB --fail-if-slower 5    # CI gate: exit 1 on a regression
    effbench report results/all-nodes                 # a folder of runs from many machines: a leaderboard

Registered on the app in cli.py. torch is imported only by `sweep`, inside sweep.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from effbench.cli.common import invocation, latest_or_given, results_folder, say, values_given
from effbench.cli.common import opt as _opt
from effbench.cli.options import config_options, field_kind, is_bool_field, with_config_options
from effbench.cli.track import DEFAULT_EXPERIMENT, TrackExperiment, TrackTraces, TrackUri, after, tracking
from effbench.sweep.presets import presets_help
from effbench.sweep.spec import DIMENSIONS, MAX_ROUNDS, PRESET_ONLY
from effbench.config import Range, RunConfig, option_name
from effbench.errors import EffbenchError
from effbench.fmt import report_width


# compare's gates, in percent and percentage points: a regression beyond 100 of either cannot happen
GATE_RANGE = Range(0.0, 100.0, hi_open=True)


# RunConfig's fields a sweep takes (effbench/cli/options.py), the swept dimensions (a comma list) first: all but
# the multi-node ones (a sweep runs on one node), and --smoke and --output, which mean the sweep's own here.
# The dimensions only a preset sweeps (--gpu-decode, --data-only) are single flags on the command line.
_NOT_SWEPT = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "smoke", "output")
LISTED = [d for d in DIMENSIONS if d not in PRESET_ONLY]
SWEEP_FIELDS = [*LISTED, *(f for f in RunConfig.__dataclass_fields__ if f not in LISTED and f not in _NOT_SWEPT)]


_FLAGS = [f for f in SWEEP_FIELDS if f not in LISTED and is_bool_field(f)]  # --profile/--no-profile, as run's
SWEEP_OPTIONS = config_options(
    SWEEP_FIELDS,
    as_text=[f for f in SWEEP_FIELDS if f not in _FLAGS],  # parsed here: a comma list, or exactly one value
    extra={f: "A comma list sweeps it." if f in LISTED else "One value for every cell." for f in SWEEP_FIELDS
           if f not in _FLAGS},
)  # fmt: skip


@with_config_options(SWEEP_OPTIONS)
def sweep(
    ctx: typer.Context,
    *,
    preset: Annotated[
        str | None,
        _opt(f"A seed experiment: {presets_help()}. Explicit options override it."),
    ] = None,
    zip_: Annotated[
        bool, _opt("Pair the lists element-wise instead of every combination: the i-th values go together.", "--zip")
    ] = False,
    output: Annotated[
        str | None,
        _opt("Parent folder of the sweep folder. [default: ./results; env EFFBENCH_OUTPUT]", envvar="EFFBENCH_OUTPUT"),
    ] = None,
    name: Annotated[
        str | None,
        _opt("Sweep folder name. The same name resumes the sweep. [default: sweep-<preset or swept options>]"),
    ] = None,
    fail_fast: Annotated[
        bool, _opt("Stop at the first failed cell. An OOM cell is data and never stops the sweep.", "--fail-fast")
    ] = False,
    smoke: Annotated[
        bool, _opt("Start every cell from the --smoke preset: CPU, synthetic data, tiny. Other options override it.")
    ] = False,
    rounds: Annotated[
        int,
        _opt(
            "Run the whole grid this many times, round after round, each later round in a shuffled order, so every "
            "cell meets the machine at several moments. The report's across-rounds table gives each cell's mean over "
            "its rounds with the 95% interval across them, which sees changes of the machine's speed slower than one "
            f"run (its windows' interval cannot). The same command with a larger K adds rounds and keeps those run. A "
            f"run's --repeats are windows within it. [range: 1..{MAX_ROUNDS}]",
            metavar="K",
        ),
    ] = 1,
    quiet: Annotated[bool, _opt("Print no per-step progress. One line per cell and the summary still print.")] = False,
    track: TrackUri = None,
    track_experiment: TrackExperiment = DEFAULT_EXPERIMENT,
    track_traces: TrackTraces = False,
    **given: Any,
) -> None:
    """Run every combination of the listed values (or a preset), one run folder per cell, resumable."""
    tracked = tracking(track, track_experiment, track_traces)  # before any cell runs
    from effbench.system import machine

    machine.given_name(os.environ)  # every cell would refuse it: refuse it once, before any runs
    from effbench.sweep import runner as sweeper
    from effbench.sweep.spec import SweepSpec, dim_option, one_value, parse_list

    presets = values_given(invocation(ctx), "--preset")
    if len(set(presets)) > 1:  # click would run the last one, silently
        raise EffbenchError(
            "--preset",
            f"given {len(presets)} times ({', '.join(map(repr, presets))}); a sweep runs one preset: pass one "
            "(options given beside it override its values)",
        )

    lists = {k: parse_list(dim_option(k), given.pop(k), DIMENSIONS[k]) for k in LISTED if given[k] is not None}
    # the rest takes one value (a list is an error naming the swept options), parsed as the field's type
    singles = {k: v if is_bool_field(k) or k == "data_dir" else one_value(option_name(k), v, field_kind(k))
               for k, v in given.items()}  # fmt: skip
    options = {k: v for k, v in singles.items() if v is not None}
    options.update({k: v[0] for k, v in lists.items() if len(v) == 1})  # one value: the same for every cell
    lists = {k: v for k, v in lists.items() if len(v) > 1}
    spec = SweepSpec(
        lists=lists,
        options=options,
        preset=preset,
        zip=zip_,
        smoke=smoke,
        output=output if output is not None else "results",
        name=name,
        fail_fast=fail_fast,
        rounds=rounds,
    )
    from effbench.system import wait_policy

    devices = lists.get("device") or [options.get("device", "cpu" if smoke else "auto")]
    note = wait_policy.apply(str(options.get("omp_wait_policy", "auto")),  # before torch loads: every cell's
                             "cpu" if set(map(str, devices)) == {"cpu"} else "auto")  # fmt: skip
    if note:
        say(note, err=True)
    outcome = sweeper.run_sweep(spec, command=invocation(ctx), echo=say, progress=not quiet)
    summary = outcome.folder / "sweep.txt"
    if summary.is_file():  # written: the report could be made
        from effbench.report import render

        say(render.sweep_terminal_text(outcome.folder, report_width()))
    say(f"sweep folder: {outcome.folder} (report.html, sweep.md, plots/)")
    if outcome.report_error:
        say(
            f"warning: the sweep report was not fully written ({outcome.report_error}); `effbench report {outcome.folder}` retries",
            err=True,
        )
    after(outcome.folder, tracked)  # the sweep as a parent run, its cells' folders as its children
    skipped = outcome.counts.get("skipped", 0)
    if skipped:
        say(f"warning: {skipped} cell(s) skipped: this machine cannot run them (see sweep.txt)", err=True)
    code, message = sweeper.exit_message(outcome)
    if message:
        say(message, err=True)
    if code:
        raise typer.Exit(code)


def report(
    folder: Annotated[
        Path | None,
        typer.Argument(
            help="The folder to report on: a run folder, a sweep folder, or a folder of runs from several machines or "
            "sweeps. A run folder holds results.json, a sweep folder sweep.json; a folder of runs gets a leaderboard. "
            "latest is the run or sweep in ./results or EFFBENCH_OUTPUT that finished last.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            show_default=False,
            help="Write the reports into this folder instead of FOLDER, which may be read-only. [default: FOLDER; "
            "with --from-tracking ./results/tracking-<experiment>, env EFFBENCH_OUTPUT for ./results]",
        ),
    ] = None,
    from_tracking: Annotated[
        str | None,
        _opt(
            "Report on the runs logged to this MLflow tracking URI instead of FOLDER, as a leaderboard per "
            "configuration. --track logs them there. Their results.json files are read into OUTPUT/runs/, where "
            "`effbench compare` reads them.",
            "--from-tracking",
            metavar="URI",
        ),
    ] = None,
    experiment: Annotated[
        str, _opt(f"The MLflow experiment --from-tracking reads. [default: {DEFAULT_EXPERIMENT}]", metavar="NAME")
    ] = DEFAULT_EXPERIMENT,
) -> None:
    """Re-render the tables, plots and report.html of a run or sweep folder from its saved JSON, without torch.
    For a folder of runs from several machines or sweeps, or an MLflow experiment's runs with --from-tracking,
    write a leaderboard per configuration."""
    from effbench.config import check_path
    from effbench.report import render

    dest = None
    if output is not None:
        check_path("--output", output, example="--output reports/")
        dest = Path(output)
        if dest.exists() and not dest.is_dir():  # a report is several files: /dev/null is no folder either
            from effbench.safe_files import file_kind

            kind = file_kind(dest.stat().st_mode)
            raise EffbenchError("--output", f"{dest} is {kind}; pass a folder to write the reports into")
    if from_tracking is not None:
        if folder is not None:
            raise EffbenchError("--from-tracking", f"reads the runs from {from_tracking}: pass no FOLDER with it")
        _report_from_tracking(from_tracking, experiment, dest)
        return
    if folder is None:
        raise EffbenchError("FOLDER", "pass a run, sweep or results folder, or --from-tracking URI")
    if experiment != DEFAULT_EXPERIMENT:
        raise EffbenchError("--experiment", "names the experiment --from-tracking reads; add --from-tracking URI")
    folder = latest_or_given(folder)
    kind, files = render.write_reports(folder, dest)
    if kind == "leaderboard":
        say(files[0].read_text(encoding="utf-8"))
    say(f"{kind} {folder}: wrote {len(files)} files")
    for f in files:
        say(f"  {f}")


def _report_from_tracking(uri: str, experiment: str, dest: Path | None) -> None:
    """The leaderboard of an MLflow experiment's runs, built from their logged results.json as from folders."""
    from effbench import results
    from effbench.report import leaderboard
    from effbench.track import mlflow_store

    out = dest or results_folder() / f"tracking-{results.safe_name(experiment)}"
    runs, left_out = mlflow_store.read_back(uri, experiment, out)
    for line in left_out:  # before the leaderboard: a left-out run is seen, not scrolled past
        say(f"warning: --from-tracking: {line}", err=True)
    if not runs:
        raise EffbenchError(
            "--experiment", f"{experiment!r} at {uri} holds no run logged by effbench; log some with --track URI"
        )
    files = leaderboard.write_leaderboard(runs, title=f"effbench leaderboard {experiment}", out=out)
    typer.echo(files[0].read_text(encoding="utf-8"))
    say(f"leaderboard of {len(runs)} runs from {uri} (experiment {experiment!r}): wrote {len(files)} files")
    for f in files:
        typer.echo(f"  {f}")


def compare(
    a: Annotated[
        Path,
        typer.Argument(
            help="The baseline A: a run or sweep folder, or a run's results.json. A unique start of a folder name in "
            "./results or EFFBENCH_OUTPUT works too. latest is the one that finished last, of the other argument's "
            "kind.",
            show_default=False,
        ),
    ],
    b: Annotated[
        Path,
        typer.Argument(
            help="The run compared with A: a run or sweep folder, or a run's results.json. A name's start or latest "
            "work as for A.",
            show_default=False,
        ),
    ],
    fail_if_slower: Annotated[
        float | None,
        _opt(
            "Exit 1 when B's throughput is below A's by more than PCT percent and outside the noise of the 95% CI. "
            f"[range: {GATE_RANGE.text()}]",
            metavar="PCT",
        ),
    ] = None,
    fail_if_less_accurate: Annotated[
        float | None,
        _opt(
            f"Exit 1 when B's final top-1 is below A's by more than POINTS percentage points. [range: {GATE_RANGE.text()}]",
            metavar="POINTS",
        ),
    ] = None,
) -> None:
    """Show each metric's delta of B against A with its 95% confidence interval, and say when it is within noise.
    With a --fail-if-* gate it is a CI check: exit 1 on a regression beyond the threshold and the noise, else 0."""
    from effbench.analysis import compare as cmp
    from effbench import liveness
    from effbench.analysis import roofline
    from effbench.report import render
    from effbench.analysis import windows

    for option, value in (("--fail-if-slower", fail_if_slower), ("--fail-if-less-accurate", fail_if_less_accurate)):
        if value is not None and not GATE_RANGE.contains(value):  # nan and inf too
            raise EffbenchError(
                option,
                f"must be a number >= 0 and below 100, got {value} (a throughput falls by at most 100%, a top-1 by "
                f"at most 100 points: a gate at 100 or more never fails); e.g. {option} 5",
            )
    gated = fail_if_slower is not None or fail_if_less_accurate is not None
    output = results_folder()  # where `run` writes by default

    def kind(p: Path) -> str:
        return "run" if p.is_file() else render.folder_kind(p)  # a file is a results.json, whatever its name

    # `latest` is the newest folder of the kind the other argument is (a gate's: a run), else of either kind
    needs = "run" if gated else None
    typed_a, typed_b = str(a), str(b)
    if str(a) == cmp.LATEST and str(b) != cmp.LATEST:
        b = cmp.resolve_folder(b, output, needs)
        a = cmp.resolve_folder(a, output, needs or kind(b))
    else:
        a = cmp.resolve_folder(a, output, needs)
        b = cmp.resolve_folder(b, output, needs or kind(a))

    def run_dir(p: Path) -> Path:
        return p.parent if p.is_file() else p

    kinds = (kind(a), kind(b))
    cmp.refuse_latest_itself((typed_a, a), (typed_b, b), kinds[0])
    if kinds[0] != kinds[1]:
        raise EffbenchError(
            str(b), f"is a {kinds[1]} folder but {a} is a {kinds[0]}; compare a run with a run or a sweep with a sweep"
        )
    if kinds[0] == "run":
        ra, rb = liveness.read(a), liveness.read(b)  # a `running` run whose process is gone: `dead`
        cmp.check_like_for_like(ra, rb)  # the same timing, the same kind of run
        sa, sb = windows.read_steps(run_dir(a)), windows.read_steps(run_dir(b))
        deltas = cmp.compare_runs(ra, sa, rb, sb)
        say(
            cmp.render_runs(
                deltas,
                a_name=cmp.run_label(str(a), ra),
                b_name=cmp.run_label(str(b), rb),
                differences=cmp.config_differences(ra, rb),
                width=report_width(),
            ),
            nl=False,
        )
        per_kind = cmp.render_kinds(roofline.kind_deltas(ra.roofline, rb.roofline), report_width())
        if per_kind:
            typer.echo(per_kind, nl=False)
        gates = []
        if fail_if_slower is not None:
            wa = [x for x in windows.windows_of(ra, sa).throughput_img_s or [] if x is not None]
            wb = [x for x in windows.windows_of(rb, sb).throughput_img_s or [] if x is not None]
            gates.append(cmp.slower_gate(ra, wa, rb, wb, fail_if_slower))
        if fail_if_less_accurate is not None:
            gates.append(cmp.accuracy_gate(ra, rb, fail_if_less_accurate))
        for g in gates:
            say(g.line)
        if any(g.failed for g in gates):
            raise typer.Exit(1)
        return
    if gated:
        raise EffbenchError(
            "--fail-if-slower" if fail_if_slower is not None else "--fail-if-less-accurate",
            "gates two runs; pass two run folders or results.json files (one cell of each sweep)",
        )
    _, rows_a = render.load_sweep(a)
    _, rows_b = render.load_sweep(b)
    say(cmp.render_sweeps(rows_a, rows_b, a_name=str(a), b_name=str(b), width=report_width()), nl=False)

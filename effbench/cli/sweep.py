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

from effbench.cli.common import invocation
from effbench.cli.common import opt as _opt
from effbench.datasets import datasets_help
from effbench.sweep.presets import presets_help
from effbench.config import Range, with_range
from effbench.errors import EffbenchError


# compare's gates, in percent and percentage points: a regression beyond 100 of either cannot happen
GATE_RANGE = Range(0.0, 100.0, hi_open=True)


def _list(help: str) -> Any:
    return _opt(f"{help} A comma list sweeps it.")


def _one(help: str, **kw: Any) -> Any:
    return _opt(f"{help} One value for every cell.", **kw)


def sweep(
    ctx: typer.Context,
    preset: Annotated[
        str | None,
        _opt(f"A seed experiment: {presets_help()}. Explicit options override it."),
    ] = None,
    arch: Annotated[
        str | None, _list("efficientnet-b0..b7 (b0..b7), resnet18, torchvision:NAME (bare: resnet50), timm:NAME.")
    ] = None,
    dataset: Annotated[str | None, _list(datasets_help())] = None,
    gpus: Annotated[str | None, _list(with_range("gpus", "GPUs per run."))] = None,
    nproc: Annotated[str | None, _list(with_range("nproc", "CPU processes per run (--device cpu)."))] = None,
    batch_size: Annotated[str | None, _list(with_range("batch_size", "Images per device per step."))] = None,
    workers: Annotated[str | None, _list(with_range("workers", "DataLoader workers."))] = None,
    optimizer: Annotated[str | None, _list("sgd, sgd-nesterov, adagrad, adadelta, adam, adamw.")] = None,
    batch_norm: Annotated[str | None, _list("resnet18 BatchNorm: on or off.")] = None,
    device: Annotated[str | None, _list("cpu, cuda or auto.")] = None,
    precision: Annotated[str | None, _list("auto, fp32, bf16, fp16.")] = None,
    freeze: Annotated[str | None, _list("classifier, none or last:N.")] = None,
    loader: Annotated[str | None, _list("Input pipeline.")] = None,
    scaling: Annotated[str | None, _list("weak or strong.")] = None,
    zip_: Annotated[
        bool, _opt("Pair the lists element-wise (i-th values together) instead of every combination.", "--zip")
    ] = False,
    repeats: Annotated[
        str | None,
        _one(
            with_range(
                "repeats", "Throughput windows per cell for the median and 95% CI. [default: min(5, measured steps)]"
            )
        ),
    ] = None,
    data_dir: Annotated[
        str | None,  # text as typed: Path("") would be "." (the cells refuse an empty one)
        _one("Folder with the extracted datasets. [default: ./data; env EFFBENCH_DATA]", envvar="EFFBENCH_DATA"),
    ] = None,
    download: Annotated[bool | None, _opt("Download a missing dataset.", "--download/--no-download")] = None,
    val_fraction: Annotated[
        str | None, _one(with_range("val_fraction", "Validate on a seeded fraction of the training set."))
    ] = None,
    image_size: Annotated[str | None, _one(with_range("image_size", "Input size in px."))] = None,
    epochs: Annotated[str | None, _one(with_range("epochs", "Epochs. [default: 5]"))] = None,
    max_steps: Annotated[str | None, _one(with_range("max_steps", "Cap on training steps per epoch."))] = None,
    max_val_steps: Annotated[
        str | None, _one(with_range("max_val_steps", "Cap on validation batches per epoch."))
    ] = None,
    warmup_steps: Annotated[
        str | None,
        _one(with_range("warmup_steps", "Steps excluded from throughput. [default: 5, at most half the steps]")),
    ] = None,
    lr: Annotated[str | None, _one(with_range("lr", "Learning rate. [default: per optimizer]"))] = None,
    momentum: Annotated[str | None, _one(with_range("momentum", "SGD momentum. [default: 0.9]"))] = None,
    weight_decay: Annotated[str | None, _one(with_range("weight_decay", "Weight decay. [default: 5e-4]"))] = None,
    weights: Annotated[str | None, _one("imagenet, none or a local file.")] = None,
    seed: Annotated[str | None, _one(with_range("seed", "Random seed. [default: 0]"))] = None,
    strategy: Annotated[str | None, _one("ddp or dp. [default: ddp]")] = None,
    channels_last: Annotated[
        bool | None, _opt("channels_last memory format.", "--channels-last/--no-channels-last")
    ] = None,
    cudnn_benchmark: Annotated[
        bool | None, _opt("cudnn.benchmark autotuning.", "--cudnn-benchmark/--no-cudnn-benchmark")
    ] = None,
    pin_memory: Annotated[bool | None, _opt("Pinned host memory for batches.", "--pin-memory/--no-pin-memory")] = None,
    gpu_decode: Annotated[
        bool | None, _opt("Decode JPEG batches on the GPU (nvjpeg).", "--gpu-decode/--no-gpu-decode")
    ] = None,
    optimizer_impl: Annotated[
        str | None, _one("auto, fused, foreach or for-loop optimizer kernels. [default: auto]")
    ] = None,
    augment: Annotated[
        str | None, _one("Training recipe in every cell: seed, imagenet or none (docs/recipes.md). [default: seed]")
    ] = None,
    compile_: Annotated[
        bool | None, _opt("torch.compile the model (compile time reported apart).", "--compile/--no-compile")
    ] = None,
    data_only: Annotated[
        bool | None, _opt("Time only the input pipeline (no model): images/s delivered.", "--data-only")
    ] = None,
    pg_timeout_s: Annotated[
        str | None, _one(with_range("pg_timeout_s", "Process-group timeout in seconds. [default: 300]"))
    ] = None,
    profile: Annotated[
        bool | None, _opt("Profiling pass after each cell's timed training. [default: on]", "--profile/--no-profile")
    ] = None,
    profile_steps: Annotated[
        str | None, _one(with_range("profile_steps", "Active steps in the profiling pass. [default: 3]"))
    ] = None,
    sample_interval_s: Annotated[
        str | None, _one(with_range("sample_interval_s", "Utilisation sampling interval in seconds. [default: 0.5]"))
    ] = None,
    log_interval: Annotated[
        str | None, _one(with_range("log_interval", "Steps between progress lines. [default: 10]"))
    ] = None,
    target_top1: Annotated[
        str | None,
        _one(with_range("target_top1", "Time-to-accuracy: time and epochs to the first val top-1 >= F."), metavar="F"),
    ] = None,
    stop_at_target: Annotated[
        bool | None,
        _opt("End each cell at the epoch that reaches --target-top1.", "--stop-at-target/--no-stop-at-target"),
    ] = None,
    output: Annotated[
        str | None,
        _opt("Parent folder of the sweep folder. [default: ./results; env EFFBENCH_OUTPUT]", envvar="EFFBENCH_OUTPUT"),
    ] = None,
    name: Annotated[
        str | None, _opt("Sweep folder name; the same name resumes. [default: sweep-<preset or swept options>]")
    ] = None,
    fail_fast: Annotated[
        bool, _opt("Stop at the first failed cell (OOM cells are data and never stop the sweep).", "--fail-fast")
    ] = False,
    smoke: Annotated[
        bool, _opt("Start every cell from the --smoke preset (CPU, synthetic, tiny); other options override.")
    ] = False,
    quiet: Annotated[bool, _opt("No per-step progress; one line per cell and the summary are still printed.")] = False,
) -> None:
    """Run every combination of the listed values (or a preset), one run folder per cell, resumable."""
    from effbench.sweep import runner as sweeper
    from effbench.sweep.spec import DIMENSIONS, SweepSpec, dim_option, one_value, parse_list

    lists_given = {"arch": arch, "dataset": dataset, "gpus": gpus, "nproc": nproc, "batch_size": batch_size, "workers": workers,
                   "optimizer": optimizer, "batch_norm": batch_norm, "device": device, "precision": precision, "freeze": freeze,
                   "loader": loader, "scaling": scaling}  # fmt: skip
    lists = {k: parse_list(dim_option(k), v, DIMENSIONS[k]) for k, v in lists_given.items() if v is not None}
    singles = {
        "repeats": one_value("--repeats", repeats, int), "val_fraction": one_value("--val-fraction", val_fraction, float),
        "image_size": one_value("--image-size", image_size, int), "epochs": one_value("--epochs", epochs, int),
        "max_steps": one_value("--max-steps", max_steps, int), "max_val_steps": one_value("--max-val-steps", max_val_steps, int),
        "warmup_steps": one_value("--warmup-steps", warmup_steps, int), "lr": one_value("--lr", lr, float),
        "momentum": one_value("--momentum", momentum, float), "weight_decay": one_value("--weight-decay", weight_decay, float),
        "weights": one_value("--weights", weights), "seed": one_value("--seed", seed, int), "strategy": one_value("--strategy", strategy),
        "pg_timeout_s": one_value("--pg-timeout-s", pg_timeout_s, float), "profile_steps": one_value("--profile-steps", profile_steps, int),
        "sample_interval_s": one_value("--sample-interval-s", sample_interval_s, float),
        "log_interval": one_value("--log-interval", log_interval, int),
        "optimizer_impl": one_value("--optimizer-impl", optimizer_impl),
        "augment": one_value("--augment", augment),
        "data_dir": data_dir, "download": download, "channels_last": channels_last, "profile": profile,
        "cudnn_benchmark": cudnn_benchmark, "pin_memory": pin_memory, "gpu_decode": gpu_decode,
        "compile": compile_, "data_only": data_only,
        "target_top1": one_value("--target-top1", target_top1, float), "stop_at_target": stop_at_target,
    }  # fmt: skip
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
    )
    outcome = sweeper.run_sweep(spec, command=invocation(ctx), echo=typer.echo, progress=not quiet)
    summary = outcome.folder / "sweep.txt"
    if summary.is_file():
        typer.echo(summary.read_text(encoding="utf-8"))
    typer.echo(f"sweep folder: {outcome.folder} (report.html, sweep.md, plots/)")
    if outcome.report_error:
        typer.echo(
            f"warning: the sweep report was not fully written ({outcome.report_error}); `effbench report {outcome.folder}` retries",
            err=True,
        )
    skipped = outcome.counts.get("skipped", 0)
    if skipped:
        typer.echo(f"warning: {skipped} cell(s) skipped: this machine cannot run them (see sweep.txt)", err=True)
    code, message = sweeper.exit_message(outcome)
    if message:
        typer.echo(message, err=True)
    if code:
        raise typer.Exit(code)


def report(
    folder: Annotated[
        Path,
        typer.Argument(
            help="A run folder (results.json), a sweep folder (sweep.json), or a folder of runs from several machines or sweeps (a leaderboard).",
            show_default=False,
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            show_default=False,
            help="Write the reports into this folder instead of FOLDER (FOLDER may be read-only). [default: FOLDER]",
        ),
    ] = None,
) -> None:
    """Re-render every table, plot and report.html of a run or sweep folder from its saved JSON (no torch);
    for a folder of runs from several machines or sweeps, write a leaderboard per configuration."""
    from effbench.config import check_path
    from effbench.report import render

    dest = None
    if output is not None:
        check_path("--output", output, example="--output reports/")
        dest = Path(output)
        if dest.exists() and not dest.is_dir():
            raise EffbenchError("--output", f"{dest} is a file; pass a folder to write the reports into")
    kind, files = render.write_reports(folder, dest)
    if kind == "leaderboard":
        typer.echo(files[0].read_text(encoding="utf-8"))
    typer.echo(f"{kind} {folder}: wrote {len(files)} files")
    for f in files:
        typer.echo(f"  {f}")


def compare(
    a: Annotated[
        Path,
        typer.Argument(
            help="Run or sweep folder A (the baseline), or a run's results.json; a unique start of a folder name in "
            "./results (or EFFBENCH_OUTPUT), or latest.",
            show_default=False,
        ),
    ],
    b: Annotated[
        Path,
        typer.Argument(
            help="Run or sweep folder B, or a run's results.json; a name's start, or latest.", show_default=False
        ),
    ],
    fail_if_slower: Annotated[
        float | None,
        _opt(
            "Exit 1 when B's throughput is below A's by more than PCT percent and outside noise (95% CI). "
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
    """Per-metric deltas of B against A with 95% confidence intervals; says when a difference is within noise.
    With a --fail-if-* gate it is a CI check: exit 1 on a regression beyond the threshold and noise, else 0."""
    from effbench.analysis import compare as cmp
    from effbench import results
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
    output = Path(os.environ.get("EFFBENCH_OUTPUT") or "results")  # where `run` writes by default
    a, b = cmp.resolve_folder(a, output), cmp.resolve_folder(b, output)

    def kind(p: Path) -> str:
        return "run" if p.is_file() else render.folder_kind(p)  # a file is a results.json, whatever its name

    def run_dir(p: Path) -> Path:
        return p.parent if p.is_file() else p

    kinds = (kind(a), kind(b))
    if kinds[0] != kinds[1]:
        raise EffbenchError(
            str(b), f"is a {kinds[1]} folder but {a} is a {kinds[0]}; compare a run with a run or a sweep with a sweep"
        )
    if kinds[0] == "run":
        ra, rb = results.read_results(a), results.read_results(b)
        sa, sb = windows.read_steps(run_dir(a)), windows.read_steps(run_dir(b))
        deltas = cmp.compare_runs(ra, sa, rb, sb)
        typer.echo(
            cmp.render_runs(deltas, a_name=str(a), b_name=str(b), differences=cmp.config_differences(ra, rb)), nl=False
        )
        gates = []
        if fail_if_slower is not None:
            wa = windows.windows_of(results.record_of(ra), sa).get("throughput_img_s") or []
            wb = windows.windows_of(results.record_of(rb), sb).get("throughput_img_s") or []
            gates.append(cmp.slower_gate(ra, wa, rb, wb, fail_if_slower))
        if fail_if_less_accurate is not None:
            gates.append(cmp.accuracy_gate(ra, rb, fail_if_less_accurate))
        for g in gates:
            typer.echo(g.line)
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
    typer.echo(cmp.render_sweeps(rows_a, rows_b, a_name=str(a), b_name=str(b)), nl=False)

"""effbench command line: thin Typer commands that build a config and make one call.

    effbench run --smoke                      # synthetic data, CPU, a full report in under a minute
    effbench run --arch b0 --dataset cifar100 --data-dir ./data --download
    effbench run --arch resnet18 --dataset cifar10 --no-batch-norm --optimizer adadelta --device cpu

torch is imported only inside the commands that train, so `effbench --help` is instant.
Every EffbenchError becomes one line on stderr and exit code 2; usage errors too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from effbench.cli.common import invocation
from effbench.cli.common import opt as _opt
from effbench.cli.doctor import doctor
from effbench.cli.sweep import compare, report, sweep
from effbench.datasets import datasets_help
from effbench.config import with_range
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

        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="effbench, image revision and lock, torch and CUDA versions; then exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """effbench: how fast does this model train here, and where does the time go."""


@app.command()
def run(
    ctx: typer.Context,
    arch: Annotated[
        str | None,
        _opt(
            "efficientnet-b0..b7 (b0..b7), resnet18, torchvision:NAME (or bare: resnet50), timm:NAME; "
            "`effbench models` lists them. [default: efficientnet-b0]"
        ),
    ] = None,
    dataset: Annotated[str | None, _opt(f"{datasets_help()} [default: cifar100]")] = None,
    data_dir: Annotated[
        str | None,  # text as typed: Path("") would be "." (RunConfig refuses an empty one)
        _opt("Folder with the extracted datasets. [default: ./data; env EFFBENCH_DATA]", envvar="EFFBENCH_DATA"),
    ] = None,
    download: Annotated[
        bool | None,
        _opt(
            "Download a missing dataset (base URL from EFFBENCH_MIRROR when set). [default: no]",
            "--download/--no-download",
        ),
    ] = None,
    val_fraction: Annotated[
        float | None,
        _opt(
            with_range(
                "val_fraction", "Validate on a seeded fraction of the training set instead of the official test split."
            )
        ),
    ] = None,
    image_size: Annotated[
        int | None,
        _opt(
            with_range(
                "image_size",
                "Input size in px. [default: the arch's native size; resnet18 32 on CIFAR and synthetic (CIFAR-shaped), "
                "224 on synthetic-imagenet]",
            )
        ),
    ] = None,
    loader: Annotated[
        str | None,
        _opt(
            "Input pipeline: fast (uint8 batches augmented on the device), torchvision (per-sample, as the seeds), dali (NVIDIA DALI on image files; effbench[dali], docs/dali.md), synthetic (generated data's own), auto. [default: auto = fast; synthetic on --dataset synthetic]"
        ),
    ] = None,
    augment: Annotated[
        str | None,
        _opt(
            "Training recipe, the same in both loaders: seed (the seeds': CIFAR crop+pad+flip, files resize+crop+flip+rotate 10), imagenet (random-resized crop+flip), none (resize + center crop); docs/recipes.md. [default: seed]"
        ),
    ] = None,
    gpu_decode: Annotated[
        bool | None,
        _opt(
            "Fast loader, food101/imagefolder: decode JPEGs on the GPU (nvjpeg). [default: no]",
            "--gpu-decode/--no-gpu-decode",
        ),
    ] = None,
    data_only: Annotated[
        bool | None,
        _opt(
            "Iterate the loader and copy to the device, no model: images/s delivered. [default: no]",
            "--data-only/--no-data-only",
        ),
    ] = None,
    workers: Annotated[int | None, _opt(with_range("workers", "DataLoader worker processes. [default: 2]"))] = None,
    batch_size: Annotated[
        int | None,
        _opt(with_range("batch_size", "Images per device per step. [default: 64 EfficientNet, 128 resnet18]")),
    ] = None,
    epochs: Annotated[int | None, _opt(with_range("epochs", "Epochs. [default: 5]"))] = None,
    max_steps: Annotated[int | None, _opt(with_range("max_steps", "Cap on training steps per epoch."))] = None,
    max_val_steps: Annotated[
        int | None, _opt(with_range("max_val_steps", "Cap on validation batches per epoch."))
    ] = None,
    warmup_steps: Annotated[
        int | None,
        _opt(
            with_range(
                "warmup_steps",
                "First steps excluded from throughput and reported apart. [default: 5, at most half the steps]",
            )
        ),
    ] = None,
    optimizer: Annotated[str | None, _opt("sgd, sgd-nesterov, adagrad, adadelta, adam, adamw. [default: sgd]")] = None,
    lr: Annotated[
        float | None,
        _opt(
            with_range(
                "lr", "Learning rate. [default: per optimizer: sgd 0.1, adagrad 0.01, adadelta 1.0, adam(w) 1e-3]"
            )
        ),
    ] = None,
    momentum: Annotated[float | None, _opt(with_range("momentum", "SGD momentum. [default: 0.9]"))] = None,
    weight_decay: Annotated[float | None, _opt(with_range("weight_decay", "Weight decay. [default: 5e-4]"))] = None,
    precision: Annotated[
        str | None, _opt("auto, fp32, bf16, fp16. [default: auto = bf16 on capable CUDA, fp32 on CPU]")
    ] = None,
    channels_last: Annotated[
        bool | None,
        _opt(
            "Use channels_last memory format. [default: on for CUDA, off on the CPU]",
            "--channels-last/--no-channels-last",
        ),
    ] = None,
    cudnn_benchmark: Annotated[
        bool | None,
        _opt(
            "cudnn.benchmark autotuning (in the warm-up steps). [default: on for CUDA]",
            "--cudnn-benchmark/--no-cudnn-benchmark",
        ),
    ] = None,
    pin_memory: Annotated[
        bool | None,
        _opt("Pinned loader batches, non_blocking copies. [default: on for CUDA]", "--pin-memory/--no-pin-memory"),
    ] = None,
    optimizer_impl: Annotated[
        str | None,
        _opt(
            "fused, foreach, for-loop or auto. [default: auto = fused on CUDA where available, else foreach; for-loop on CPU]"
        ),
    ] = None,
    compile: Annotated[
        bool | None,
        _opt(
            "torch.compile the model; compile time is reported apart (compile_time_s). [default: no]",
            "--compile/--no-compile",
        ),
    ] = None,
    device: Annotated[str | None, _opt("auto, cpu or cuda. [default: auto]")] = None,
    seed: Annotated[int | None, _opt(with_range("seed", "Random seed. [default: 0]"))] = None,
    freeze: Annotated[
        str | None, _opt("classifier, none or last:N. [default: classifier with pretrained weights, else none]")
    ] = None,
    weights: Annotated[
        str | None, _opt("imagenet, none or a local file. [default: imagenet for EfficientNet, none for resnet18]")
    ] = None,
    batch_norm: Annotated[
        bool | None, _opt("Build resnet18 with BatchNorm. [default: yes]", "--batch-norm/--no-batch-norm")
    ] = None,
    gpus: Annotated[
        str | None,
        _opt(
            with_range(
                "gpus",
                "GPUs, one process each (torchrun + DDP when > 1); a list like 1,2,4 runs a scaling series. [default: all visible]",
            )
        ),
    ] = None,
    nproc: Annotated[
        str | None,
        _opt(
            with_range(
                "nproc",
                "CPU processes (torchrun + gloo) with --device cpu; a list like 1,2 runs a scaling series. [default: 1]",
            )
        ),
    ] = None,
    strategy: Annotated[
        str | None, _opt("ddp (one process per device) or dp (DataParallel, as the seeds ran). [default: ddp]")
    ] = None,
    scaling: Annotated[
        str | None, _opt("weak (--batch-size per device) or strong (--batch-size global, split). [default: weak]")
    ] = None,
    nnodes: Annotated[
        int | None, _opt(with_range("nnodes", "Nodes in a multi-node run. [default: 1; SLURM_NNODES under srun]"))
    ] = None,
    node_rank: Annotated[
        int | None, _opt(with_range("node_rank", "This node's rank. [default: SLURM_NODEID under srun]"))
    ] = None,
    rdzv_endpoint: Annotated[
        str | None,
        _opt(
            "HOST:PORT of the c10d rendezvous. [default under srun: first Slurm host, port $MASTER_PORT or "
            "20000 + SLURM_JOB_ID % 10000]"
        ),
    ] = None,
    rdzv_id: Annotated[
        str | None, _opt("Rendezvous id shared by the nodes. [default: SLURM_JOB_ID under srun]")
    ] = None,
    pg_timeout_s: Annotated[
        float | None,
        _opt(
            with_range(
                "pg_timeout_s", "Process-group timeout in seconds (a dead peer ends the job within it). [default: 300]"
            )
        ),
    ] = None,
    output: Annotated[
        str | None,
        _opt("Parent folder of run folders. [default: ./results; env EFFBENCH_OUTPUT]", envvar="EFFBENCH_OUTPUT"),
    ] = None,
    profile: Annotated[
        bool | None,
        _opt("Profiling pass (torch.profiler) after the timed training. [default: on]", "--profile/--no-profile"),
    ] = None,
    profile_steps: Annotated[
        int | None, _opt(with_range("profile_steps", "Active steps in the profiling pass. [default: 3]"))
    ] = None,
    sample_interval_s: Annotated[
        float | None, _opt(with_range("sample_interval_s", "Utilisation sampling interval in seconds. [default: 0.5]"))
    ] = None,
    log_interval: Annotated[
        int | None, _opt(with_range("log_interval", "Steps between progress lines. [default: 10]"))
    ] = None,
    repeats: Annotated[
        int | None,
        _opt(
            with_range(
                "repeats",
                "Throughput windows: measured steps split into K for a median and 95% CI. [default: min(5, measured steps)]",
            )
        ),
    ] = None,
    target_top1: Annotated[
        float | None,
        _opt(
            with_range(
                "target_top1",
                "Time-to-accuracy: record the training time and epochs to the first val top-1 >= F "
                "(docs/time-to-accuracy.md).",
            ),
            metavar="F",
        ),
    ] = None,
    stop_at_target: Annotated[
        bool | None,
        _opt(
            "End the run at the epoch that reaches --target-top1. [default: no]",
            "--stop-at-target/--no-stop-at-target",
        ),
    ] = None,
    smoke: Annotated[
        bool,
        _opt(
            "Preset: synthetic data, random weights, b0 at 32 px, one short epoch on the CPU; other options still override."
        ),
    ] = False,
    quiet: Annotated[bool, _opt("No progress lines; the final report is still printed.")] = False,
) -> None:
    """Train one model, measure it, and write a run folder with config, env, results and reports."""
    from effbench.report.run_reports import RUN_REPORTS
    from effbench.run import launch
    from effbench.config import RunConfig, preset_conflicts, smoke_overrides
    from effbench.launch.plan import kubeflow_settings, parse_counts, slurm_settings

    given = {
        "arch": arch, "dataset": dataset, "data_dir": data_dir, "download": download, "val_fraction": val_fraction,
        "image_size": image_size, "loader": loader, "workers": workers, "batch_size": batch_size, "epochs": epochs,
        "max_steps": max_steps, "max_val_steps": max_val_steps, "warmup_steps": warmup_steps, "optimizer": optimizer,
        "lr": lr, "momentum": momentum, "weight_decay": weight_decay, "precision": precision,
        "channels_last": channels_last, "device": device, "seed": seed, "freeze": freeze, "weights": weights,
        "batch_norm": batch_norm, "output": output, "log_interval": log_interval, "strategy": strategy,
        "scaling": scaling, "nnodes": nnodes, "node_rank": node_rank, "rdzv_endpoint": rdzv_endpoint,
        "rdzv_id": rdzv_id, "pg_timeout_s": pg_timeout_s, "profile": profile, "profile_steps": profile_steps,
        "sample_interval_s": sample_interval_s, "repeats": repeats,
        "gpu_decode": gpu_decode, "augment": augment, "data_only": data_only, "cudnn_benchmark": cudnn_benchmark, "pin_memory": pin_memory,
        "optimizer_impl": optimizer_impl, "compile": compile,
        "target_top1": target_top1, "stop_at_target": stop_at_target,
    }  # fmt: skip
    explicit = {k: v for k, v in given.items() if v is not None}
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
    if len(configs) == 1:
        outcome = launch.run(configs[0], command=command, echo=typer.echo, progress=not quiet, reports=RUN_REPORTS)
        _warn_if_output_is_lost(configs[0].output)
        _exit_for(outcome)
        return
    from effbench.sweep.series import run_scaling_series

    series = run_scaling_series(configs, command=command, echo=typer.echo, progress=not quiet)
    _warn_if_output_is_lost(configs[0].output)
    worst = next((o for o in series.outcomes if o.results.get("status") != "ok"), None)
    if worst is not None:
        _exit_for(worst)


def _warn_if_output_is_lost(output: Path) -> None:
    """Said again after the run: the warning before it has scrolled away under the progress lines."""
    from effbench.system.preflight import output_loss_warning

    warning = output_loss_warning(output)
    if warning:
        typer.echo(warning, err=True)


def _exit_for(outcome: Any) -> None:
    status = outcome.results.get("status")
    if status == "ok":
        return
    err = outcome.results.get("error") or {}
    detail = f" ({err.get('type')}: {err.get('message')})" if err else ""
    if status == "interrupted" and outcome.results.get("signal"):
        phase = outcome.results.get("interrupted_phase")
        detail = f" by {_signal_name(outcome.results['signal'])}" + (f" during {phase}" if phase else "")
    what = "measurements so far are" if outcome.results.get("epochs") else "nothing was measured; results.json is"
    where = f"; {what} in {outcome.run_dir}" if outcome.run_dir else ""
    typer.echo(f"error: run {status}{detail}{where}", err=True)
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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one-line errors and exit code 2 for every bad input."""
    from effbench.run.phases import Interrupted, install, restore

    # First: SIGTERM/SIGINT raise from here on (as PID 1 in a container, SIGTERM would else be ignored).
    old_handlers = install()
    try:
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
        print(f"error: {' '.join(e.format_message().split())}{hint}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)

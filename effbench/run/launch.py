"""Launching a run: checks, the plan, then the rank's body in this process or under torchrun (or one isolated
`effbench worker`), supervised, and the outcome settled with how the child ended.

    run(cfg, command=...)   the entry of every command that runs a benchmark: preflight, plan, launch, outcome
    plan_for(cfg, argv)     the launch plan on this machine
    worker_main(spec)       `effbench worker --spec F`: what each torchrun rank runs (markers for the launcher)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effbench import results, schema
from effbench.analysis import windows
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.launch.plan import LaunchPlan, child_env
from effbench.run import folder
from effbench.run import record as rec
from effbench.run.folder import Echo, Reports
from effbench.run.phases import Interrupted
from effbench.run.rank import RunOutcome, per_device_batch, run_benchmark

__all__ = ["RunOutcome", "check_per_device_batch", "plan_for", "run", "worker_main"]


def plan_for(cfg: RunConfig, worker_args: list[str]) -> LaunchPlan:
    """The launch plan for `cfg` on this machine (needs torch only to count visible GPUs)."""
    import torch

    from effbench.system.hardware import usable_cores
    from effbench.launch.plan import plan_launch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return plan_launch(
        device=cfg.device,
        gpus=cfg.gpus,
        nproc=cfg.nproc,
        strategy=cfg.strategy,
        nnodes=cfg.nnodes,
        node_rank=cfg.node_rank,
        rdzv_endpoint=cfg.rdzv_endpoint,
        rdzv_id=cfg.rdzv_id,
        visible_gpus=visible,
        cores=usable_cores(),
        env=os.environ,
        python=sys.executable,
        worker_args=worker_args,
    )


def _silent(_message: str) -> None:
    return None


def run(
    cfg: RunConfig,
    *,
    command: list[str],
    echo: Echo | None = print,
    progress: bool = True,
    isolate: bool = False,
    said_warnings: set[str] | None = None,
    reports: Reports | None = None,
) -> RunOutcome:
    """Check, then run in-process or under torchrun; returns the run folder and its results.

    `echo`: where the run folder line and the final report go; None: nowhere, in this process and in a
    torchrun / worker child alike (a child prints on its own stdout, so a no-op echo here would not reach it:
    the selftest's and a sweep's runs printed rank 0's whole report between their own lines).
    `isolate`: a run that would be in this process (one device, or DataParallel) runs in a child
    `effbench worker` instead, so it neither inherits nor leaves behind a CUDA context and cached memory
    (a scaling series runs every member so: no member measures on memory another one holds).
    `reports`: the caller's reports (report/run_reports.py), drawn once from the settled record: by this
    process in one process, else here once the child has ended (a torchrun rank draws none); None: none.
    `said_warnings`: preflight's warnings already printed by the command that runs this run among others
    (preflight.raise_on_errors), so a sweep or the selftest says each once."""
    from effbench.system.preflight import raise_on_errors, run_checks

    # Container and environment checks (output, shm, GPUs, driver, caches, dataset mount) before any
    # folder exists; their messages carry the Docker / compose / Apptainer fix.
    raise_on_errors(run_checks(cfg), said=said_warnings)
    results.check_output_writable(cfg.output)
    spec_dir = Path(tempfile.mkdtemp(prefix="effbench-launch-"))
    try:
        spec_path = spec_dir / "spec.json"
        plan = plan_for(cfg, ["effbench", "worker", "--spec", str(spec_path)])
        _say_gpus_left_idle(cfg, plan, said_warnings)
        _say_cpu_busy(plan, said_warnings)
        check_per_device_batch(cfg, plan)
        if plan.mode == "torchrun":
            argv = plan.argv or []
        elif isolate:  # the worker outside torchrun (no RANK in its env) is one process: distributed.py
            argv = [sys.executable, "-m", "effbench", "worker", "--spec", str(spec_path)]
        else:
            return run_benchmark(
                cfg, plan=plan, command=command, echo=echo or _silent, progress=progress, reports=reports
            )
        return _run_in_child(cfg, plan, spec_path, argv, command=command, echo=echo, progress=progress, reports=reports)
    except Interrupted as e:  # in the checks above (main's handler), before any run folder
        e.phase = e.phase or "setup"
        raise
    finally:
        shutil.rmtree(spec_dir, ignore_errors=True)


def check_per_device_batch(cfg: RunConfig, plan: LaunchPlan) -> int:
    """The batch each device trains on (rank.per_device_batch), refused in one line naming --batch-size before any
    run folder when it does not split, or when it is 1 and a training BatchNorm would see one value per channel
    (models.check_batch_norm: PyTorch's ValueError at the first step, issue 46)."""
    per_device = per_device_batch(cfg, plan.devices)
    if per_device == 1:  # only a batch of 1 can fail so, and only then is the model built to check
        from effbench.models import check_batch_norm

        check_batch_norm(cfg, per_device, plan.devices)
    return per_device


def _say_gpus_left_idle(cfg: RunConfig, plan: LaunchPlan, said: set[str] | None) -> None:
    """`--nproc N` with `--device auto` runs N CPU processes (plan.py), and every rank trains on the CPU
    (_run_benchmark): where GPUs are visible, say once on stderr that they stay idle and how to use them."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.device != "auto" or plan.device_type != "cpu" or not visible:
        return
    line = (
        f"warning: --nproc: runs {plan.nproc_per_node} CPU process(es); the {visible} visible GPU(s) stay idle "
        "(use --gpus N for one process per GPU, or --device cpu to say so)"
    )
    if said is None or line not in said:
        print(line, file=sys.stderr)
        if said is not None:
            said.add(line)


# In `said_warnings` once the load was checked: a sweep or the selftest checks it before its first run only (later
# runs would read the load average its own earlier runs left).
LOAD_CHECKED = "load checked"


def _say_cpu_busy(plan: LaunchPlan, said: set[str] | None, env: Mapping[str, str] = os.environ) -> None:
    """A CPU run on a machine already busier than its cores, whose OpenMP threads spin while they wait: one
    `warning:` line with the cause and the fix (OMP_WAIT_POLICY=PASSIVE), before anything is timed. Nothing when
    the run is on a GPU or the policy is already PASSIVE (then the cpu-contended verdict says what the load did)."""
    from effbench.system import hardware, preflight

    if plan.device_type != "cpu" or not preflight.wait_policy_applies(plan.device_type, env):
        return
    if said is not None:
        if LOAD_CHECKED in said:
            return
        said.add(LOAD_CHECKED)
    found = preflight.check_load(hardware.read_cpu_load(), device_type=plan.device_type, env=env)
    if found.level != "ok":
        print(f"warning: {found.check}: {found.message} (fix: {found.fix})", file=sys.stderr)


def _run_in_child(
    cfg: RunConfig,
    plan: LaunchPlan,
    spec_path: Path,
    argv: list[str],
    *,
    command: list[str],
    echo: Echo | None,
    progress: bool,
    reports: Reports | None,
) -> RunOutcome:
    """Run `argv` (torchrun, or one `effbench worker`) on the spec, settle its record with how it ended, then
    draw the reports once from the settled record."""
    import torch

    from effbench.run.runtime import resolve_precision
    from effbench.launch.supervise import run_supervised

    precision, _ = resolve_precision(cfg.precision, torch.device(plan.device_type))
    run_dir = folder.fresh_path(
        cfg.output, folder.run_name(cfg, folder.device_label(plan), precision, dt.datetime.now())
    )
    spec = {
        "config": cfg.to_dict(),
        "run_dir": str(run_dir),
        "command": command,
        "plan": folder.plan_dict(plan),
        "progress": progress,
        "echo": echo is not None,  # rank 0 prints its run folder line only where the caller would
    }
    spec_path.write_text(json.dumps(spec))
    echo = echo or _silent
    echo(f"launching: {' '.join(argv)}")
    child = "torchrun" if plan.mode == "torchrun" else "the effbench worker"
    env = child_env(os.environ, plan.env)  # none of the job's RANK, MASTER_*, PET_*: torchrun's argv says it all
    log_name = "torchrun.log" if plan.mode == "torchrun" else "worker.log"
    with open(spec_path.parent / log_name, "w", encoding="utf-8", errors="replace") as log:
        outcome = run_supervised(argv, env, log=log)  # the terminal gets the ranks' lines, the log everything
    _keep_log(spec_path.parent / log_name, run_dir)
    user_errors = sorted(spec_path.parent.glob("error-rank*.txt"))
    if user_errors:  # a rank hit a bad input (missing dataset, weights...): report it like in-process
        _discard_unmeasured(run_dir)
        option, _, message = user_errors[0].read_text().partition("\t")
        raise EffbenchError(option or None, message)
    # the ranks of this node that ran out of memory (worker_main): torchrun names only the first rank to exit
    ooms = [
        rec.OomMarker.model_validate_json(p.read_text()) for p in sorted(spec_path.parent.glob(rec.OOM_MARKER_GLOB))
    ]
    diverged = [
        rec.DivergedMarker.model_validate_json(p.read_text())
        for p in sorted(spec_path.parent.glob(rec.DIVERGED_MARKER_GLOB))
    ]
    if not (run_dir / results.RESULTS_FILE).exists():
        if outcome.returncode == 0:
            echo(f"this node finished; the node that got rank 0 wrote the run folder ({cfg.nnodes} nodes)")
            return RunOutcome(None, schema.Results(schema_version=results.SCHEMA_VERSION, status="ok"))
        return RunOutcome(None, rec.record_without_results(outcome, ooms, child, diverged))
    written = results.load_record(run_dir)
    settled = rec.settle_with_torchrun(written, outcome, ooms)
    if settled.status == "failed" and settled.error and (run_dir / log_name).is_file():
        # the terminal had only the ranks' lines: say where torchrun's own tracebacks are
        error = settled.error.model_copy()
        error.message = f"{error.message}; {child}'s whole output is in {log_name}"
        settled.error = error
    # rank 0 reached its final write (utilization.csv comes first): the reports it would have drawn in one
    # process, drawn here once, with the end torchrun settled; results.json last, as in one process
    drawn = reports if (run_dir / folder.UTILIZATION_FILE).exists() else None
    if drawn is not None:  # one that cannot be written is a note in the record, as in one process
        folder.draw_reports(drawn, run_dir, settled, windows.read_steps(run_dir))
    try:
        results.write_record(run_dir, settled)
    except results.NoSpaceError as e:  # `failed` naming the file, as rank 0 records it in one process
        folder.record_no_space(run_dir, settled, e)
        raise
    if drawn is not None:
        echo(drawn.text(settled))
    return RunOutcome(run_dir, settled)


def _keep_log(log: Path, run_dir: Path) -> None:
    """torchrun's whole output (its tracebacks included) into the run folder, when rank 0 made one here."""
    if run_dir.is_dir() and log.stat().st_size:
        with contextlib.suppress(OSError):  # a full disk: the run's own one-line error says so
            results.atomic_write_bytes(run_dir / log.name, log.read_bytes())


def _discard_unmeasured(run_dir: Path) -> None:
    """After a bad input on some rank: rank 0's folder goes too when it holds no measurement (rank 0 was
    stopped while it built the run), so the input error leaves no folder, as in one process. A run that
    recorded the bad input itself (`failed`, data read) keeps its folder, as in one process."""
    try:
        record = results.load_record(run_dir)
    except EffbenchError:  # no folder, or nothing effbench wrote in it
        return
    if record.status in ("running", "interrupted") and not record.epochs:
        shutil.rmtree(run_dir, ignore_errors=True)


def _plan_from_dict(d: dict[str, Any]) -> LaunchPlan:
    return LaunchPlan(
        d["mode"],
        d["device_type"],
        d["nproc_per_node"],
        d["nnodes"],
        d["threads_per_proc"],
        d.get("argv"),
        d.get("env", {}),
    )


def worker_main(spec_path: Path) -> int:
    """`effbench worker --spec F`: what each torchrun rank runs. Returns the process exit code."""
    from effbench.launch.distributed import process_group
    from effbench.launch.supervise import exit_with_parent

    exit_with_parent()  # torchrun or effbench gone (SIGKILL): stop as if interrupted, never orphaned
    spec = json.loads(Path(spec_path).read_text())
    cfg = RunConfig.from_dict(spec["config"])
    plan = _plan_from_dict(spec["plan"])
    rank = int(os.environ.get("RANK", "0"))
    spec_dir = Path(spec_path).parent
    try:
        with process_group(plan.device_type, cfg.pg_timeout_s) as dist:
            try:
                outcome = run_benchmark(
                    cfg, plan=plan, dist=dist, run_dir=Path(spec["run_dir"]), command=spec["command"],
                    echo=print if rank == 0 and spec.get("echo", True) else _silent,
                    progress=spec.get("progress", True) and rank == 0,
                )  # fmt: skip
            except BaseException as e:  # out of memory while the run was built (model to device, DDP's broadcast)
                _leave_oom_marker(spec_dir, rank, rec.outcome_of(e, received=[], phase="setup"))
                raise
            # before this rank exits: torchrun then stops the others, and names whichever rank exited first
            _leave_oom_marker(spec_dir, rank, outcome.results)
            _leave_diverged_marker(spec_dir, rank, outcome.results)
            if outcome.results.status == "diverged":
                # The ranks agreed on it in a collective (train.py), so all are alive: wait for rank 0's record,
                # as torchrun stops the whole group at the first non-zero exit.
                dist.barrier()
    except EffbenchError as e:
        try:  # the launcher that wrote the spec raises it as its own one line (run/launch.py: _run_in_child)
            (Path(spec_path).parent / f"error-rank{rank}.txt").write_text(f"{e.option or ''}\t{e.message}")
        except OSError:  # it cannot hear of it: the terminal must
            print(f"error: rank {rank}: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        # torchrun stops the other ranks with SIGTERM when one fails, and effbench forwards a user's signal to the
        # ranks: the launcher says how the run ended, in one line. A signal that reached this rank outside the
        # run's phases (joining or leaving the process group, after its record) would print a second line.
        return 128 + e.signum
    return outcome.exit_code


def _leave_diverged_marker(spec_dir: Path, rank: int, outcome: rec.Outcome | schema.Results) -> None:
    """diverged-rank{N}.json beside the spec when this rank's run ended `diverged`: a node without rank 0
    has no results.json, and torchrun's exit code 1 says only that something failed."""
    marker = rec.diverged_marker(rank, outcome)
    if marker is not None:
        results.write_json(spec_dir / rec.diverged_marker_name(rank), marker)


def _leave_oom_marker(spec_dir: Path, rank: int, outcome: rec.Outcome | schema.Results) -> None:
    """oom-rank{N}.json beside the spec when this rank's run ended `oom`, for _run_in_child to read."""
    marker = rec.oom_marker(rank, outcome)
    if marker is not None:
        results.write_json(spec_dir / rec.oom_marker_name(rank), marker)

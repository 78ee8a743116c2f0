"""One benchmark run, start to finish: resolve, build, train, and write the run folder.

Order matters for honesty: everything that can be a user error (config, device, precision, output
folder, dataset, weights) is checked before the run folder exists, so a bad input never leaves a
folder behind. Once training starts, results.json is rewritten after every epoch, so an
interruption or a crash keeps what was measured and says how it ended.
"""

from __future__ import annotations

import datetime as dt
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import report, results
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.timing import Tally


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT during a run; carries the signal so the exit code can be 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into `Interrupted` for the duration, then restore the old handlers."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class RunOutcome:
    run_dir: Path
    results: dict[str, Any]

    @property
    def exit_code(self) -> int:
        status = self.results["status"]
        if status == "ok":
            return 0
        if status == "interrupted":
            return 128 + int(self.results.get("signal", signal.SIGINT))
        return 1


def run_name(cfg: RunConfig, device_label: str, precision: str, when: dt.datetime) -> str:
    """Conditions readable from the folder name: time, arch, dataset, device, precision, batch."""
    return results.safe_name(
        f"{when:%Y%m%d-%H%M%S}_{cfg.arch}_{cfg.dataset}_{device_label}_{precision}_bs{cfg.batch_size}"
    )


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run_benchmark(cfg: RunConfig, *, command: list[str] | None = None, echo: Callable[[str], None] = print, progress: bool = True) -> RunOutcome:
    """Validate, build, train and write one run folder; returns where it went and what it holds."""
    from effbench.data import build_data
    from effbench.hardware import env_snapshot
    from effbench.models import build_model, trainable_parameters
    from effbench.optim import build_optimizer, build_scheduler
    from effbench.progress import Progress
    from effbench.runtime import resolve_runtime
    from effbench.train import steps_per_epoch, train_epochs

    # --- everything that can be the user's mistake, before a folder exists ----------------------
    results.check_output_writable(cfg.output)
    rt = resolve_runtime(cfg)
    seed_everything(cfg.seed)
    data = build_data(cfg, rt.device)
    bundle = build_model(cfg, data.num_classes)
    n_steps = steps_per_epoch(cfg, data.steps_per_epoch)
    if cfg.warmup_steps >= cfg.epochs * n_steps:
        raise EffbenchError(
            "--warmup-steps",
            f"{cfg.warmup_steps} warm-up steps leave no measured step in {cfg.epochs} epoch(s) of {n_steps} steps; "
            "lower --warmup-steps or raise --max-steps / --epochs",
        )

    import torch

    model = bundle.model.to(rt.device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(cfg, trainable_parameters(model))
    scheduler = build_scheduler(optimizer, cfg.epochs * n_steps)

    started = dt.datetime.now(dt.timezone.utc)
    device_label = rt.device.type if rt.device.type == "cpu" else f"cuda{torch.cuda.device_count()}"
    run_dir = results.create_run_dir(cfg.output, run_name(cfg, device_label, rt.precision, started.astimezone()))
    record: dict[str, Any] = {
        "schema_version": results.SCHEMA_VERSION,
        "status": "running",
        "run_name": run_dir.name,
        "command": list(command if command is not None else sys.argv),
        "started_at": started.isoformat(),
        "config": cfg.to_dict(),
        "env": env_snapshot(),
        "device": rt.device_name,
        "world_size": 1,
        "precision": rt.precision,
        "model": {"arch": bundle.arch, "total_params": bundle.total_params, "trainable_params": bundle.trainable_params, **bundle.info},
        "data": {
            "name": data.name,
            "num_classes": data.num_classes,
            "image_size": data.image_size,
            "train_size": data.train_size,
            "val_size": data.val_size,
            "steps_per_epoch": n_steps,
            "batches_on_device": data.batches_on_device,
            **data.info,
        },
        "throughput_img_s": None,
        "epochs": [],
    }
    results.write_json(run_dir / results.CONFIG_FILE, record["config"])
    results.write_json(run_dir / results.ENV_FILE, record["env"])
    results.write_json(run_dir / results.RESULTS_FILE, record)
    echo(f"run folder: {run_dir}")

    epochs: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    warmup, measured = Tally(), Tally()
    t0 = time.perf_counter()
    try:
        with interrupt_on_signals(), Progress(cfg.epochs, enabled=progress) as prog:
            for er in train_epochs(model, data, optimizer, scheduler, rt, cfg, on_progress=prog.update):
                epochs.append(er.to_dict())
                steps.extend(er.step_rows)
                _merge(warmup, er.warmup)
                _merge(measured, er.measured)
                _fill(record, epochs, warmup, measured, data)
                _write_progress(run_dir, record, epochs, steps)
                prog.log(
                    f"epoch {er.epoch + 1}/{cfg.epochs}: loss {er.train_loss:.4f} top-1 {er.train_top1:.4f} "
                    f"val top-1 {_maybe(er.val_top1)} data {er.data_time_s:.2f}s compute {er.compute_time_s:.2f}s"
                )
        record["status"] = "ok"
    except Interrupted as e:
        record["status"] = "interrupted"
        record["signal"] = e.signum
    except KeyboardInterrupt:
        record["status"] = "interrupted"
        record["signal"] = int(signal.SIGINT)
    except torch.OutOfMemoryError as e:
        record["status"] = "oom"
        record["error"] = {"type": type(e).__name__, "message": str(e).splitlines()[0] if str(e) else "out of memory"}
    except Exception as e:  # noqa: BLE001 - a crash mid-run is recorded, then reported by the CLI
        record["status"] = "failed"
        record["error"] = {
            "type": type(e).__name__,
            "message": str(e).splitlines()[0] if str(e) else type(e).__name__,
            "traceback": traceback.format_exc(),
        }
    record["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
    record["wall_time_s"] = time.perf_counter() - t0
    _fill(record, epochs, warmup, measured, data)
    _write_progress(run_dir, record, epochs, steps)
    results.atomic_write_text(run_dir / results.REPORT_TXT, report.render(record, "text"))
    results.atomic_write_text(run_dir / results.REPORT_MD, report.render(record, "md"))
    echo(report.render(record, "text"))
    return RunOutcome(run_dir=run_dir, results=record)


def _maybe(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _merge(total: Tally, part: Tally) -> None:
    total.steps += part.steps
    total.images += part.images
    total.data_time_s += part.data_time_s
    total.compute_time_s += part.compute_time_s
    total.step_times_s.extend(part.step_times_s)


def _fill(record: dict[str, Any], epochs: list[dict[str, Any]], warmup: Tally, measured: Tally, data: Any) -> None:
    record["epochs"] = epochs
    record["warmup"] = warmup.to_dict()
    record["measured"] = measured.to_dict()
    record["throughput_img_s"] = measured.throughput_img_s
    record["data_time_share"] = measured.data_time_s / measured.time_s if measured.time_s > 0 else None
    record["data"].update(data.stats())
    if epochs:
        last = epochs[-1]
        record["final"] = {k: last.get(k) for k in ("train_loss", "train_top1", "val_loss", "val_top1")}


def _write_progress(run_dir: Path, record: dict[str, Any], epochs: list[dict[str, Any]], steps: list[dict[str, Any]]) -> None:
    results.write_csv(run_dir / results.EPOCHS_FILE, results.EPOCH_FIELDS, epochs)
    results.write_csv(run_dir / results.STEPS_FILE, results.STEP_FIELDS, steps)
    results.write_json(run_dir / results.RESULTS_FILE, record)


__all__ = ["RunOutcome", "run_benchmark", "Interrupted", "interrupt_on_signals"]

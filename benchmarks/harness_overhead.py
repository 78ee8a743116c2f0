"""effbench's training loop against a bare PyTorch loop: same model, batch, threads and steps.

    .venv/bin/python benchmarks/harness_overhead.py            # b0 at 32 px, batch 32, 20 measured steps, 3 A/B rounds
    .venv/bin/python benchmarks/harness_overhead.py --tiny     # seconds: resnet18 at 16 px, batch 4, 3 steps, 1 round (CI)
    .venv/bin/python benchmarks/harness_overhead.py --device cuda --arch b0 --image-size 224 --batch-size 128

effbench side: `effbench run` in this process (launch.run, synthetic data, no profiling pass) and
its reported `measured.throughput_img_s` (warm-up excluded). Reference: the same model built by
effbench.models.build_model from the same seed, the same optimizer and schedule, the same batches
already on the device, the same precision as effbench's run recorded (results.json `precision`: autocast
to that dtype, a GradScaler for fp16, as effbench's TrainStep), a plain `for` loop timed with perf_counter
around the measured steps (after a device sync on CUDA). The two alternate A/B/A/B; the table gives the median of the per-round ratios.
Goal: effbench / bare >= 0.97.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, alternate, fmt_rate, median_ratio, print_table, quiet_torch_warnings  # noqa: E402

GOAL = 0.97


# results.json `precision` -> the autocast dtype the bare loop runs in (None: fp32, autocast off). Written
# here rather than taken from effbench.run.runtime so the reference does not share effbench's code.
AUTOCAST_DTYPES = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


def bare_amp(precision: str, device_type: str) -> tuple[Any, Any]:
    """(autocast context, GradScaler) for `precision`, the one effbench's run recorded: both sides must run
    the same precision (no bf16 emulation on one side only)."""
    import torch

    name = AUTOCAST_DTYPES[precision]
    dtype = getattr(torch, name) if name else None
    amp = torch.autocast(device_type, dtype=dtype, enabled=dtype is not None)
    return amp, torch.amp.GradScaler(device_type, enabled=precision == "fp16")


def effbench_throughput(cfg_kw: dict, out: Path) -> tuple[float, int, str]:
    from effbench.run import launch
    from effbench.config import RunConfig

    outcome = launch.run(
        RunConfig(**cfg_kw, output=out), command=["harness_overhead.py"], echo=lambda _s: None, progress=False
    )
    r = outcome.results
    assert r.status == "ok" and r.measured is not None and r.launch.threads_per_proc is not None, r.error
    return float(r.measured.throughput_img_s or 0.0), int(r.launch.threads_per_proc), str(r.precision)


def bare_throughput(cfg_kw: dict, threads: int, precision: str) -> float:
    import torch

    from effbench.config import RunConfig, resolve_for_device
    from effbench.models import build_model, trainable_parameters
    from effbench.run.optim import build_optimizer, build_scheduler

    torch.set_num_threads(threads)
    device = torch.device(cfg_kw["device"])
    cfg = resolve_for_device(RunConfig(**cfg_kw), device.type)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, 100).model.to(device)
    fmt = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = build_optimizer(cfg, trainable_parameters(model))
    sched = build_scheduler(opt, cfg.max_steps)
    g = torch.Generator(device=device).manual_seed(cfg.seed)
    pool = [
        (torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, generator=g, device=device).contiguous(memory_format=fmt),
         torch.randint(0, 100, (cfg.batch_size,), generator=g, device=device))
        for _ in range(4)
    ]  # fmt: skip
    crit = torch.nn.CrossEntropyLoss()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    amp, scaler = bare_amp(precision, device.type)

    def step(i: int) -> None:
        x, y = pool[i % 4]
        with amp:
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()

    model.train()
    for i in range(cfg.warmup_steps):
        step(i)
    sync()
    n = cfg.max_steps - cfg.warmup_steps
    t0 = time.perf_counter()
    for i in range(n):
        step(cfg.warmup_steps + i)
    sync()
    return n * cfg.batch_size / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--arch", default=None)
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="measured steps per run")
    p.add_argument("--rounds", type=int, default=None, help="A/B rounds")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    quiet_torch_warnings()
    tiny = dict(arch="resnet18", image_size=16, batch_size=4, steps=3, warmup=1, rounds=1)
    real = dict(arch="b0", image_size=32, batch_size=32, steps=20, warmup=5, rounds=3)
    s = {**(tiny if a.tiny else real)}
    for k in ("arch", "image_size", "batch_size", "steps", "rounds"):
        if getattr(a, k) is not None:
            s[k] = getattr(a, k)
    cfg_kw = dict(
        arch=s["arch"], dataset="synthetic", weights="none", freeze="none", image_size=s["image_size"], batch_size=s["batch_size"],
        epochs=1, max_steps=s["warmup"] + s["steps"], warmup_steps=s["warmup"], device=a.device, profile=False, log_interval=10_000,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:
        threads: list[int] = []
        precisions: list[str] = []

        def eff() -> float:
            thr, n, precision = effbench_throughput(cfg_kw, Path(tmp))
            threads.append(n)
            precisions.append(precision)
            return thr

        effs, bares = alternate(eff, lambda: bare_throughput(cfg_kw, threads[-1], precisions[-1]), rounds=s["rounds"])
    what = (
        f"{cfg_kw['arch']} {s['image_size']} px, batch {s['batch_size']}, {s['steps']} steps, {threads[-1]} threads, "
        f"{a.device} {precisions[-1]} (both sides)"
    )
    row = Row("harness overhead (train img/s)", fmt_rate(effs), fmt_rate(bares), median_ratio(effs, bares), GOAL,
              f"{what}; median of {s['rounds']} A/B round(s)")  # fmt: skip
    print_table([row], "effbench run vs a bare PyTorch loop")


if __name__ == "__main__":
    main()

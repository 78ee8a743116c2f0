"""effbench against timm on a GPU: synthetic data, train img/s, with and without torch.compile.

    .venv/bin/pip install timm                      # not a dependency of effbench
    .venv/bin/python benchmarks/timm_compare.py     # b0, b3, b5, resnet18 at native size, batch 64 (resnet18 128)
    .venv/bin/python benchmarks/timm_compare.py --tiny   # b0 only, 10 steps (smoke test of the script)

effbench side: `effbench run --dataset synthetic --weights none --freeze none --device cuda` in this
process (bf16 autocast, channels_last, fused SGD, cudnn.benchmark: effbench's CUDA defaults), with
and without --compile. Reference: timm's model of the same architecture (efficientnet_b0/_b3/_b5,
resnet18) in a bare loop with the same settings (same batch, bf16 autocast, channels_last, fused
SGD, optionally torch.compile), timed with CUDA syncs around the measured steps. Ratio = effbench /
timm (the models differ: effbench's EfficientNet is efficientnet-pytorch's). Needs CUDA and timm;
without either it exits 2 with one line.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, print_table, quiet_torch_warnings  # noqa: E402

TIMM_NAMES = {"efficientnet-b0": "efficientnet_b0", "efficientnet-b3": "efficientnet_b3", "efficientnet-b5": "efficientnet_b5",
              "resnet18": "resnet18"}  # fmt: skip
GOAL = 0.9


def unavailable() -> str | None:
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "timm_compare.py needs a CUDA GPU (torch.cuda.is_available() is False)"
    if importlib.util.find_spec("timm") is None:
        return "timm_compare.py needs timm (pip install timm); it is not an effbench dependency"
    return None


def timm_img_s(arch: str, size: int, batch: int, steps: int, warmup: int, compile_: bool) -> float:
    import timm
    import torch

    dev = torch.device("cuda")
    model = timm.create_model(TIMM_NAMES[arch], num_classes=100).to(dev).to(memory_format=torch.channels_last).train()
    if compile_:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, fused=True)
    x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (batch,), device=dev)
    crit = torch.nn.CrossEntropyLoss()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - t0)


def effbench_img_s(arch: str, size: int, batch: int, steps: int, warmup: int, compile_: bool, out: Path) -> float:
    from effbench.run import launch
    from effbench.config import RunConfig

    cfg = RunConfig(arch=arch, dataset="synthetic", weights="none", freeze="none", image_size=size, batch_size=batch, epochs=1,
                    max_steps=warmup + steps, warmup_steps=warmup, device="cuda", gpus=1, compile=compile_, profile=False,
                    output=out, log_interval=10_000)  # fmt: skip
    r = launch.run(cfg, command=["timm_compare.py"], echo=lambda _s: None, progress=False).results
    assert r.status == "ok" and r.throughput_img_s is not None, r.error
    return float(r.throughput_img_s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    why = unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        sys.exit(2)
    quiet_torch_warnings()
    from effbench.config import default_image_size

    archs = ["efficientnet-b0"] if a.tiny else ["efficientnet-b0", "efficientnet-b3", "efficientnet-b5", "resnet18"]
    steps, warmup = (10, 5) if a.tiny else (a.steps, 10)
    rows = []
    with tempfile.TemporaryDirectory(prefix="effbench-bench-") as tmp:
        for arch in archs:
            # the native size (resnet18 224, as timm's): synthetic-imagenet's default, not CIFAR-shaped synthetic's 32
            size, batch = default_image_size(arch, "synthetic-imagenet"), 128 if arch == "resnet18" else 64
            for compile_ in (False, True):
                e = effbench_img_s(arch, size, batch, steps, warmup, compile_, Path(tmp))
                t = timm_img_s(arch, size, batch, steps, warmup, compile_)
                rows.append(Row(f"{arch}{' compiled' if compile_ else ''} (train img/s)", f"{e:,.1f} img/s", f"timm {t:,.1f} img/s",
                                e / t, GOAL, f"{size} px, batch {batch}, bf16, channels_last, {steps} steps"))  # fmt: skip
    print_table(rows, "effbench vs timm on this GPU")


if __name__ == "__main__":
    main()

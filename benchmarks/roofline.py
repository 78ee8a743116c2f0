"""Where the time goes, down to the roofline: each model's per-kind table against this machine's roofs, and the
two checks behind it (a matmul-only model against the compute roof, an element-wise-only one against memory).

    .venv/bin/python benchmarks/roofline.py                               # b0 and resnet50 at 224 px, batch 16, CPU
    .venv/bin/python benchmarks/roofline.py --output results/roofline     # keep the run folders (report.html, plots/roofline.png)
    .venv/bin/python benchmarks/roofline.py --device cuda --batch-size 128
    .venv/bin/python benchmarks/roofline.py --tiny                        # seconds: b0 and resnet18 at 32 px (CI)

Each model is one `effbench run` on synthetic data (weights none, every layer trained) whose profiling pass makes
the roofline (results.json `roofline`, analysis/roofline.py); its table, roofs, verdict and ceiling are printed as
report.md prints them. The ratio table holds the selftest's roofline check (effbench/selftest/checks.py
`model_against_roofs`): the fraction of its roof each reference model's kind reaches, goal >= 0.70 (matmul,
compute roof) and >= 0.50 (element-wise, memory roof). On a shared CPU note the load average it prints.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, print_table, quiet_torch_warnings  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="a few seconds (CI)")
    p.add_argument("--arch", default=None, help="comma list [default: efficientnet-b0,resnet50; --tiny: b0,resnet18]")
    p.add_argument("--device", default="cpu")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--output", default=None, help="keep the run folders here [default: a temporary folder]")
    a = p.parse_args()
    quiet_torch_warnings()
    import torch

    from effbench.analysis import roofline
    from effbench.config import RunConfig
    from effbench.measure import roofs
    from effbench.report import roofline_tables
    from effbench.run import launch
    from effbench.selftest import checks
    from effbench.selftest.reference import ElementwiseOnly, MatmulOnly

    archs = (a.arch or ("efficientnet-b0,resnet18" if a.tiny else "efficientnet-b0,resnet50")).split(",")
    size, batch = (32, 4) if a.tiny else (224, 16 if a.device == "cpu" else 128)
    size, batch = a.image_size or size, a.batch_size or batch
    device = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    with tempfile.TemporaryDirectory(prefix="effbench-roofline-") as tmp:
        out = Path(a.output) if a.output else Path(tmp)
        # the reference models against the roofs measured in the same loop (the selftest's check)
        cuda = device.type == "cuda"
        precision = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
        n = 256 if a.tiny else roofs.GPU_MATMUL_N if cuda else roofs.CPU_MATMUL_N
        nbytes = 8 * 2**20 if a.tiny else roofs.GPU_COPY_BYTES if cuda else 64 * 2**20
        rows = []
        for name, model, kind in (
            ("matmul-only model", MatmulOnly(device, getattr(torch, roofs.DTYPE_OF[precision]), n), roofline.MATMUL),
            ("elementwise-only model", ElementwiseOnly(device, nbytes), roofline.ELEMENTWISE),
        ):
            goal = checks.ROOFLINE_GOALS[name]
            fractions, bound = checks.model_against_roofs(
                device, model, kind, precision=precision, matmul_n=n, copy_bytes=nbytes, out_dir=out / "checks",
                goal=goal, attempts=1 if a.tiny else checks.ROOF_ATTEMPTS,
            )  # fmt: skip
            rows.append(Row(name, f"{kind}, {bound}-bound", f"{bound} roof, same loop", max(fractions), goal,
                            f"attempts {', '.join(f'{f:.2f}' for f in fractions)}"))  # fmt: skip
        print_table(
            rows, f"the roofline check on {device.type}: fraction of its roof the reference model's kind reaches"
        )
        for arch in archs:
            cfg = RunConfig(
                arch=arch, dataset="synthetic", device=a.device, weights="none", freeze="none", image_size=size,
                batch_size=batch, epochs=1, max_steps=3 if a.tiny else 4, warmup_steps=1, max_val_steps=1,
                profile_steps=1 if a.tiny else 3, workers=0, output=out,
            )  # fmt: skip
            done = launch.run(cfg, command=["benchmarks/roofline.py"], echo=lambda _s: None, progress=False)
            r = done.results
            assert r.status == "ok", r.error
            print(
                f"\n## {arch} at {size} px, batch {batch}, {r.device}, {r.precision}: {r.throughput_img_s:,.1f} img/s"
            )
            print(roofline_tables.block(r, "md") or f"no roofline ({r.profile_error or r.roofs_error})")
            if a.output:
                print(f"\nrun folder: {done.run_dir} (report.html, plots/roofline.png)")


if __name__ == "__main__":
    main()

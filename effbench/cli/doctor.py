"""`effbench doctor`: every preflight check as a table, with the fix for each failure.

    effbench doctor                                         # this environment, and which datasets are here
    effbench doctor --dataset cifar100                      # the checks `effbench run` would make
    effbench doctor --smoke                                 # ... for the smoke preset
    effbench doctor --gpus 4 --workers 8 --batch-size 256   # before a 4-GPU job
    docker run --rm --gpus all effbench doctor              # inside the image
    apptainer test effbench.sif                             # runs `effbench doctor` on the synthetic set

Exit code 0 when nothing fails (warnings allowed), 2 when a check fails, like every bad input. A machine busier
than its cores (load average, steal) fails nothing, since a run would work, but the last line then says that
figures measured now would be wrong, and the fix, instead of "all checks passed". With no
--dataset (nor --smoke) nothing was asked of the data: the catalog says which datasets are present under
--data-dir and how to get the others, and a missing one fails nothing.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from effbench.system import preflight
from effbench.cli.common import opt as _opt
from effbench.cli.common import say
from effbench.cli.options import config_options, with_config_options
from effbench.config import RunConfig, preset_conflicts, smoke_overrides

STATUS = {"ok": "ok", "warning": "WARN", "error": "FAIL"}
# Column widths that keep the table inside ~150 columns; tabulate wraps longer text.
COLUMN_WIDTHS = [9, 6, 60, 70]


def findings_table(findings: list[preflight.Finding]) -> str:
    """check | status | message | fix, one row per finding (pure: findings in, text out)."""
    from tabulate import tabulate

    rows = [(f.check, STATUS[f.level], f.message, _fix(f)) for f in findings]
    return tabulate(rows, headers=["check", "status", "message", "fix"], tablefmt="simple", maxcolwidths=COLUMN_WIDTHS)


def _fix(f: preflight.Finding) -> str:
    """The fix, led by the option to change when the finding blames one (as `run`'s error line does)."""
    if f.level == "ok":
        return ""
    return f"{f.option}: {f.fix_line}" if f.option and f.fix else f.fix_line


def _image_cuda(gpu: preflight.GpuState) -> str:
    image = gpu.image_cuda
    if image is None:
        return "-"
    base = f"base CUDA {image.base_cuda}" if image.base_cuda else "base without CUDA_VERSION (not nvidia/cuda)"
    compat = f"cuda-compat {image.compat_driver}" if image.compat_driver else "no cuda-compat"
    return f"torch CUDA {gpu.cuda_build or 'none'}, {base}, {compat}"


def environment_summary(gpu: preflight.GpuState) -> list[tuple[str, str]]:
    """The few facts that explain most findings: versions, GPUs, driver, container, uid."""
    from effbench.system.hardware import container_runtime, shm_size_gib

    shm = shm_size_gib()
    return [
        ("torch", gpu.torch_version or f"not importable ({gpu.torch_error})"),
        ("CUDA build", gpu.cuda_build or "none (CPU-only torch)"),
        ("arch list", " ".join(gpu.arch_list) or "-"),
        ("GPUs visible", str(gpu.visible) + (f" ({', '.join(d.name for d in gpu.devices)})" if gpu.devices else "")),
        ("driver", f"{gpu.driver_version} (CUDA {gpu.driver_cuda[0]}.{gpu.driver_cuda[1]})" if gpu.driver_version and gpu.driver_cuda else "no NVML (no NVIDIA driver visible)"),
        ("image CUDA", _image_cuda(gpu)),
        ("forward compat", preflight.compat_verdict(gpu).message),
        ("container", container_runtime()),
        ("uid:gid", f"{os.getuid()}:{os.getgid()}"),
        ("/dev/shm", f"{shm:.2f} GiB" if shm is not None else "missing"),
    ]  # fmt: skip


# The RunConfig fields whose checks doctor makes (effbench/cli/options.py); --gpus takes run's list.
DOCTOR_OPTIONS = config_options(
    ["output", "data_dir", "dataset", "download", "arch", "workers", "batch_size", "image_size", "device", "gpus"],
    as_text=["gpus"],
    extra={"gpus": "A list like 1,2,4 checks the largest.", "download": "doctor checks that it can be downloaded."},
)


@with_config_options(DOCTOR_OPTIONS)
def doctor(
    *,
    smoke: Annotated[bool, _opt("Check the `effbench run --smoke` preset; other options still override.")] = False,
    **given: Any,
) -> None:
    """Check this environment for a run: output, HOME and caches, /dev/shm, GPUs, driver, dataset."""
    from effbench.launch.plan import parse_counts

    gpus, dataset = given.pop("gpus"), given["dataset"]
    explicit = {k: v for k, v in given.items() if v is not None}
    requested = max(parse_counts("--gpus", gpus)) if gpus is not None else 0
    if requested:
        explicit["gpus"] = requested
    if smoke:
        preset_conflicts(explicit, gpus=gpus)
    cfg = RunConfig(**({**smoke_overrides(), **explicit} if smoke else explicit))
    gpu = preflight.probe_gpus()
    asked_data = smoke or dataset is not None  # a fresh clone has no CIFAR-100: not a failure unless asked for
    findings = preflight.run_checks(cfg, gpus_requested=requested, gpu=gpu, check_data=asked_data)
    from effbench.system import hardware

    # not one of run_checks': those decide whether a run works; this one whether its figures will be this machine's
    device_type = "cpu" if cfg.device == "cpu" or (cfg.device == "auto" and not gpu.visible) else "cuda"
    load = preflight.check_load(hardware.read_cpu_load(), device_type=device_type, env=os.environ)
    findings.append(load)
    from tabulate import tabulate

    say(tabulate(environment_summary(gpu), tablefmt="plain"))
    say("")
    say(findings_table(findings))
    if not asked_data:
        from effbench.cli.datasets import catalog_status, status_table

        say(f"\ndatasets under --data-dir {cfg.data_dir} (none asked for: check one with --dataset NAME):\n")
        say(status_table(catalog_status(cfg.data_dir)))
    failed = preflight.errors(findings)
    warned = sum(f.level == "warning" for f in findings)
    say("")
    if failed:
        say(
            f"doctor: {len(failed)} check(s) failed, {warned} warning(s); `effbench run` would stop at: {failed[0].check}"
        )
        raise typer.Exit(2)
    if load.level != "ok":  # the run would start, but what it measures would be the other processes' load too
        say(f"doctor: no check failed, but figures measured now would be wrong: {load.message}; fix: {load.fix}")
        return
    say(f"doctor: all checks passed ({warned} warning(s))")

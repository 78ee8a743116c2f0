"""The printed fixes that docs/troubleshooting.md explains end with a pointer to its section: preflight's
error and warning lines and doctor's fix column (by check), the bottleneck verdict's advice (by bottleneck),
and `effbench run`'s closing error line (by status). The sections exist: tests/contracts/test_docs.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from effbench import troubleshooting
from effbench.analysis import efficiency
from effbench.analysis.efficiency import Measurements, verdict
from effbench.cli.app import run_error_section
from effbench.cli.doctor import findings_table
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.system import preflight

SHM_POINTER = "; see docs/troubleshooting.md#shared-memory-too-small"


def small_shm_findings(tmp_path: Path) -> list[preflight.Finding]:
    cfg = RunConfig(dataset="cifar100", workers=4, batch_size=256, image_size=224, device="cpu", output=tmp_path)
    return preflight.check_shm(cfg, Path("/"), preflight.Probes(shm_free=lambda p: 64 * 2**20))


def test_a_failed_check_s_error_line_ends_with_its_section(tmp_path):
    with pytest.raises(EffbenchError) as info:
        preflight.raise_on_errors(small_shm_findings(tmp_path), environ={}, stream=io.StringIO())
    line = str(info.value)
    assert "\n" not in line and line.startswith("--workers: /dev/shm has 64 MiB free")
    assert line.endswith("or --workers 0" + SHM_POINTER)


def test_doctor_s_fix_column_points_to_the_section_and_an_ok_row_stays_empty(tmp_path):
    table = findings_table([*small_shm_findings(tmp_path), preflight.Finding("ok", "shm", "fine")])
    flat = " ".join(table.split())  # the column wraps
    assert "see docs/troubleshooting.md#shared-memory-too-small" in flat
    assert flat.count("see docs/") == 1


def test_a_check_without_a_section_gets_no_pointer():
    f = preflight.Finding("error", "output", "not writable", "pass --output")
    assert f.fix_line == "pass --output"


def test_warning_lines_carry_the_pointer_too():
    out = io.StringIO()
    warn = preflight.Finding("warning", "memlock", "locked-memory limit is 8 MiB", preflight.FIX_MEMLOCK)
    preflight.raise_on_errors([warn], environ={}, stream=out)
    assert (
        out.getvalue().rstrip().endswith("(Slurm: PropagateResourceLimits); see docs/troubleshooting.md#nccl-timeouts)")
    )


def cpu(**kw) -> Measurements:
    base = dict(data_time_share=0.0, gpu_util_pct_mean=None, allreduce_share=None, peak_mem_fraction=None,
                cpu_quota_cores=2.0, workers=0, processes=1, mfu=None, device_type="cpu",
                proc_cpu_pct_mean=16.0, host_cpu_pct_mean=100.0)  # fmt: skip
    return Measurements(**{**base, **kw})


def test_the_shared_cpu_verdicts_point_to_their_section_and_compute_bound_to_none():
    contended = verdict(cpu())
    assert contended is not None and contended.bottleneck == "cpu-contended"
    assert contended.advice.endswith("Slurm --exclusive); see docs/troubleshooting.md#shared-cpu")
    underused = verdict(cpu(host_cpu_pct_mean=10.0, threads_per_process=1))
    assert underused is not None and underused.bottleneck == "cpu-underused"
    assert underused.advice.endswith("; see docs/troubleshooting.md#shared-cpu")
    busy = verdict(cpu(proc_cpu_pct_mean=195.0))
    assert busy is not None and busy.bottleneck == "compute-bound" and "see docs/" not in busy.advice


def test_a_full_gpu_points_to_out_of_memory():
    full = verdict(cpu(device_type="cuda", gpu_util_pct_mean=99.0, peak_mem_fraction=0.95, proc_cpu_pct_mean=None))
    assert full is not None and full.bottleneck == "memory-capacity-bound"
    assert full.advice.endswith("; see docs/troubleshooting.md#out-of-memory")


@pytest.mark.parametrize(
    ("status", "error_type", "section"),
    [
        ("oom", "OutOfMemoryError", "out-of-memory"),
        ("failed", "DistBackendError", "nccl-timeouts"),  # NCCL's watchdog: torch.distributed.DistBackendError
        ("failed", "RendezvousTimeoutError", "nccl-timeouts"),
        ("failed", "ValueError", None),
        ("interrupted", None, None),
    ],
)
def test_a_failed_run_s_last_line_points_to_its_section(status, error_type, section):
    assert run_error_section(status, error_type) == section


def test_every_pointer_names_a_known_anchor():
    sections = {*preflight.SEE.values(), *efficiency.SEE.values()}
    assert sections <= set(troubleshooting.ANCHORS)
    with pytest.raises(AssertionError):
        troubleshooting.see("no-such-section")

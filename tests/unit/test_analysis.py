"""Pure analysis: peak table, efficiency math, the verdict's rules, thresholds and precedence."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

from effbench.analysis import efficiency as analysis
from effbench.analysis.efficiency import (
    COMM_BOUND_SHARE,
    INPUT_BOUND_SHARE,
    LOW_GPU_UTIL_PCT,
    MEMORY_BOUND_FRACTION,
    PEAK_TFLOPS,
    Measurements,
    compute_efficiency,
    gpu_model,
    images_per_joule,
    peak_precision,
    peak_tflops,
    profiler_overhead,
    verdict,
    verdict_dict,
)


def test_analysis_does_not_import_torch():
    tree = ast.parse(inspect.getsource(analysis))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    } | {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "torch" not in imported and "numpy" not in imported


# --------------------------------------------------------------------------------------------------
# Peak table
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10", "A10"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ],
)
def test_gpu_names_resolve(name, model):
    assert gpu_model(name) == model
    assert peak_tflops(name, "fp32") == PEAK_TFLOPS[model]["fp32"]


@pytest.mark.parametrize(
    "name",
    [
        None,
        "",
        "NVIDIA A10G",
        "NVIDIA H100",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA L40",
        "AMD Instinct MI300X",
        "NVIDIA B200",
        "Tesla V100-SXM3-32GB",
        "NVIDIA GeForce GTX 1080",
    ],
)
def test_unknown_gpus_get_no_peak(name):
    assert gpu_model(name) is None
    assert peak_tflops(name, "bf16") is None


def test_peak_values_and_precisions():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.5)
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == pytest.approx(67.0)
    assert peak_tflops("NVIDIA H100 80GB HBM3", "tf32") == pytest.approx(494.5)
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp16") == pytest.approx(312.0)
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "BF16") == pytest.approx(312.0)  # case-insensitive
    assert peak_tflops("NVIDIA H200", "bf16") == peak_tflops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak_tflops("Tesla V100-SXM2-32GB", "bf16") is None  # Volta has no BF16
    assert peak_tflops("Tesla T4", "tf32") is None
    assert peak_tflops("NVIDIA L4", "int8") is None
    # dense tensor rates are at least the non-tensor FP32 rate everywhere
    for model, peaks in PEAK_TFLOPS.items():
        for p in ("tf32", "bf16", "fp16"):
            if p in peaks:
                assert peaks[p] >= peaks["fp32"], model
        assert set(peaks) <= set(analysis.PRECISIONS)


def test_peak_precision():
    assert peak_precision("fp32", tf32_enabled=True) == "tf32"
    assert peak_precision("fp32", tf32_enabled=False) == "fp32"
    assert peak_precision("bf16", tf32_enabled=True) == "bf16"


# --------------------------------------------------------------------------------------------------
# Efficiency
# --------------------------------------------------------------------------------------------------


def test_compute_efficiency_math():
    # 1.1 GFLOP per image at 100k img/s = 110 TFLOP/s over 2 H100 SXM at bf16 (989.5 each)
    out = compute_efficiency(1.1e9, 100_000.0, gpu_name="NVIDIA H100 80GB HBM3", precision="bf16", world_size=2)
    assert out.achieved_tflops == pytest.approx(110.0)
    assert out.peak_tflops_per_device == pytest.approx(989.5)
    assert out.mfu == pytest.approx(110.0 / (989.5 * 2))
    assert out.gpu_model == "H100 SXM" and out.world_size == 2


def test_compute_efficiency_without_a_peak_has_no_mfu():
    out = compute_efficiency(1e9, 1000.0, gpu_name=None, precision="fp32", world_size=1)
    assert out.achieved_tflops == pytest.approx(1.0)
    assert out.mfu is None and out.peak_tflops_per_device is None
    out = compute_efficiency(1e9, 1000.0, gpu_name="Mystery GPU 9000", precision="bf16", world_size=1)
    assert out.mfu is None
    out = compute_efficiency(None, 1000.0, gpu_name="NVIDIA L4", precision="bf16", world_size=1)
    assert out.achieved_tflops is None and out.mfu is None and out.peak_tflops_per_device == 121.0


def test_images_per_joule_and_overhead():
    assert images_per_joule(1000, 250.0) == pytest.approx(4.0)
    assert images_per_joule(1000, None) is None
    assert images_per_joule(1000, 0.0) is None


def _overhead(prof, timed):
    return profiler_overhead(prof, timed)


def test_profiler_overhead_only_outside_the_noise_of_the_timed_steps():
    timed = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098]
    clear = _overhead([0.120, 0.121, 0.119], timed)
    assert clear.profiler_overhead == pytest.approx(0.120 / 0.100 - 1) and clear.profiler_overhead_note is None
    # the issue's -27%: a profiled mean below a noisy timed mean is "within noise", never a negative cost
    noisy = [0.05, 0.20, 0.06, 0.19, 0.07, 0.18]
    within = _overhead([0.095, 0.096, 0.094], noisy)
    assert 0.095 / (sum(noisy) / 6) - 1 < -0.2  # what the old ratio printed
    within_noise = "within noise (Welch's 95% interval of profiled - timed includes 0)"  # and no signed figure
    assert within.profiler_overhead is None and within.profiler_overhead_note == within_noise
    # the audit's case: means 0.1033 vs 0.1100 (-6%), Welch's interval includes 0: printed "within noise (-6%)"
    assert _overhead([0.10, 0.12, 0.09], [0.11, 0.10, 0.12, 0.105, 0.115]).profiler_overhead_note == within_noise
    faster = _overhead([0.080, 0.081, 0.079], timed)  # faster beyond noise: no cost, and not a negative one
    assert faster.profiler_overhead is None and "no measurable cost" in faster.profiler_overhead_note
    assert _overhead([0.12], timed).profiler_overhead is None  # one profiled step: cannot tell
    assert "cannot tell" in _overhead([0.12], timed).profiler_overhead_note
    assert _overhead([], timed).profiler_overhead is None


# --------------------------------------------------------------------------------------------------
# Verdict
# --------------------------------------------------------------------------------------------------

# A healthy multi-GPU run: nothing fires, so it is compute-bound.
HEALTHY = Measurements(
    data_time_share=0.02,
    gpu_util_pct_mean=97.0,
    allreduce_share=0.05,
    peak_mem_fraction=0.6,
    cpu_quota_cores=32.0,
    workers=16,
    processes=4,
    mfu=0.41,
    device_type="cuda",
)


def m(**kw) -> Measurements:
    return dataclasses.replace(HEALTHY, **kw)


def test_thresholds_are_the_documented_values():
    assert (INPUT_BOUND_SHARE, COMM_BOUND_SHARE, MEMORY_BOUND_FRACTION, LOW_GPU_UTIL_PCT) == (0.25, 0.25, 0.92, 70.0)


def test_compute_bound_cites_mfu():
    v = verdict(HEALTHY)
    assert v.bottleneck == "compute-bound"
    assert "MFU 41%" in v.evidence and "GPU utilisation 97%" in v.evidence
    v = verdict(m(mfu=None))
    assert v.bottleneck == "compute-bound" and "MFU unknown" in v.evidence


# A CPU run nothing else fires on: 1 process of 2 threads on 2 allowed cores, little data wait.
CPU = Measurements(0.001, None, None, None, 2.0, workers=0, processes=1, mfu=None, device_type="cpu",
                   proc_cpu_pct_mean=190.0, host_cpu_pct_mean=96.0, threads_per_process=2)  # fmt: skip


@pytest.mark.parametrize(
    "proc_cpu_pct, quota, data_share, threads, host, expected",
    [
        (190.0, 2.0, 0.001, 2, 96.0, "compute-bound"),  # 1.90 of 2 cores = 95% >= 90%
        (180.0, 2.0, 0.001, 2, 96.0, "compute-bound"),  # exactly 90%: the CPU_SATURATED_FRACTION bar
        (179.9, 2.0, 0.001, 2, 70.0, "cpu-underused"),  # 89.95%, the host not busy: cores sat idle
        (179.9, 2.0, 0.001, 2, 96.0, "cpu-contended"),  # 89.95% while the host was busy: others took the rest
        (138.0, 2.0, 0.0, 2, 70.0, "cpu-underused"),  # the audit's run: 1.38 of 2 cores, host 70% busy
        (720.0, 8.0, 0.2499, 8, 96.0, "compute-bound"),  # 90% of 8, data wait just under INPUT_BOUND_SHARE
        (720.0, 8.0, 0.25, 8, 96.0, "input-bound"),  # data wait at the bar comes first
        (110.0, 2.0, 0.001, 1, 96.0, "cpu-underused"),  # 55%: one thread on two cores, and it had its core
        (None, 2.0, 0.001, 2, 96.0, None),  # CPU use not sampled: no evidence, no verdict
        (190.0, None, 0.001, 2, 96.0, None),  # allowance unknown: 1.9 cores of what?
    ],
)  # fmt: skip
def test_a_cpu_run_is_compute_bound_only_when_its_cores_were_busy(
    proc_cpu_pct, quota, data_share, threads, host, expected
):
    v = verdict(dataclasses.replace(CPU, proc_cpu_pct_mean=proc_cpu_pct, cpu_quota_cores=quota,
                                    data_time_share=data_share, threads_per_process=threads,
                                    host_cpu_pct_mean=host))  # fmt: skip
    assert (v.bottleneck if v else None) == expected


def test_a_cpu_run_that_left_cores_idle_says_so_not_that_the_arithmetic_is_the_limit():
    # the audit's run: "used 1.38 cores of 2 allowed; the CPU's arithmetic is the limit" with the host 70% busy
    audit = dataclasses.replace(CPU, data_time_share=0.0, proc_cpu_pct_mean=138.0, host_cpu_pct_mean=70.0)
    v = verdict(audit)
    assert v.bottleneck == "cpu-underused"
    assert v.evidence == (
        "CPU run: run's processes used 1.38 cores of 2 allowed (69%, under 90%) with data wait 0.0% of step time, "
        "host CPU 70% busy; 1 process(es) x 2 thread(s): cores sat idle, so the CPU's arithmetic is not the limit"
    )
    assert "serial work" in v.advice  # 1 x 2 threads had the 2 cores: the threads waited, not too few of them
    one_thread = verdict(dataclasses.replace(audit, proc_cpu_pct_mean=100.0, threads_per_process=1))
    assert one_thread.bottleneck == "cpu-underused"
    assert one_thread.advice.startswith("give the run as many threads as allowed cores (2; it ran 1 process(es) x 1")
    busy = verdict(CPU)  # 1.90 of 2 cores
    assert busy.bottleneck == "compute-bound" and "--device cuda" in busy.advice
    assert busy.evidence == (
        "CPU run: data wait 0.1% of step time, run's processes used 1.90 cores of 2 allowed (95%): "
        "the CPU's arithmetic is the limit"
    )
    # a GPU run's compute-bound rests on the GPU's evidence, not on the host's cores
    assert verdict(m(proc_cpu_pct_mean=50.0, cpu_quota_cores=32.0)).bottleneck == "compute-bound"


STARVED = dict(data_time_share=0.4, proc_cpu_pct_mean=1900.0)  # tree uses 19 cores, data wait 40%


def test_cpu_starved_boundary():
    # 16 workers + 4 processes need 20 cores: exactly 20 is enough, 19.5 is not
    assert verdict(m(cpu_quota_cores=20.0, **STARVED)).bottleneck == "input-bound"
    v = verdict(m(cpu_quota_cores=19.5, **STARVED))
    assert v.bottleneck == "cpu-starved"
    assert "used 19.00 cores of 19.5 allowed" in v.evidence and "= 20" in v.evidence and "data wait 40%" in v.evidence
    assert verdict(m(cpu_quota_cores=None, **STARVED)).bottleneck == "input-bound"  # unlimited


def test_cpu_starved_needs_measured_evidence_not_a_count():
    # the run: 1 process + 2 workers on 2 cores, data wait 0.5% of the step: no starvation measured
    count_only = Measurements(0.005, None, None, None, 2.0, workers=2, processes=1, mfu=None, device_type="cpu",
                              proc_cpu_pct_mean=198.0)  # fmt: skip
    assert verdict(count_only).bottleneck == "compute-bound"
    assert "data wait 0.5% of step time" in verdict(count_only).evidence  # the evidence, printed beside it
    assert "run's processes used 1.98 cores of 2 allowed" in verdict(count_only).evidence
    # a symptom, but the tree left the cores idle (0.9 x 2 cores = 180% is the bar): not the CPU's fault
    idle_cpu = dataclasses.replace(count_only, data_time_share=0.5, proc_cpu_pct_mean=179.0)
    assert verdict(idle_cpu).bottleneck == "input-bound"
    assert verdict(dataclasses.replace(idle_cpu, proc_cpu_pct_mean=180.0)).bottleneck == "cpu-starved"
    # unsampled CPU use is no evidence either
    assert verdict(dataclasses.replace(idle_cpu, proc_cpu_pct_mean=None)).bottleneck == "input-bound"


def test_a_busy_host_that_starves_the_run_is_named_with_its_numbers():
    # the smoke run on this shared 2-core machine: host 100% busy, the run's tree got 0.16 cores of 2
    cpu = Measurements(0.0, None, None, None, 2.0, workers=0, processes=1, mfu=None, device_type="cpu",
                       proc_cpu_pct_mean=16.0, host_cpu_pct_mean=100.0)  # fmt: skip
    v = verdict(cpu)
    assert v.bottleneck == "cpu-contended"
    assert v.evidence.startswith("host CPU 100% busy while the run's processes used 0.16 cores of 2 allowed")
    # the bars: 90% host, and 90% of the cores the run's threads could use (its threads unknown: all 2 allowed)
    # (not contended, the tree still used under 90% of its cores: cpu-underused, never compute-bound)
    assert verdict(dataclasses.replace(cpu, host_cpu_pct_mean=89.9)).bottleneck == "cpu-underused"
    assert verdict(dataclasses.replace(cpu, host_cpu_pct_mean=None)).bottleneck == "cpu-underused"
    assert verdict(dataclasses.replace(cpu, proc_cpu_pct_mean=179.9)).bottleneck == "cpu-contended"
    assert verdict(dataclasses.replace(cpu, proc_cpu_pct_mean=180.0)).bottleneck == "compute-bound"
    # one thread on 2 cores wants one of them: it got it at 90% of one core, and the other went to other processes
    one = dataclasses.replace(cpu, threads_per_process=1)
    assert verdict(dataclasses.replace(one, proc_cpu_pct_mean=89.9)).bottleneck == "cpu-contended"
    had = verdict(dataclasses.replace(one, proc_cpu_pct_mean=90.0))
    assert had.bottleneck == "cpu-underused" and "cores sat idle" not in had.evidence
    assert had.evidence.endswith("host CPU 100% busy; 1 process(es) x 1 thread(s): its threads had their cores and "
                                 "other processes took the rest")  # fmt: skip
    assert had.advice.startswith("give the run as many threads as allowed cores (2; it ran 1 process(es) x 1")
    # a GPU run's threads mostly wait on the GPU: contended only below half its cores, as before
    gpu = dataclasses.replace(cpu, device_type="cuda", gpu_util_pct_mean=95.0)
    assert verdict(dataclasses.replace(gpu, proc_cpu_pct_mean=99.9)).bottleneck == "cpu-contended"
    assert verdict(dataclasses.replace(gpu, proc_cpu_pct_mean=100.0)).bottleneck == "compute-bound"


def test_a_busy_host_that_kept_the_run_from_its_cores_is_contended_never_underused():
    # issue 47: at load 6.5 on 2 cores a smoke run (1 process x 2 threads) got 1.2 of its 2 cores and read
    # "cpu-underused ... host CPU 93% busy ... cores sat idle": the host had no idle core, other processes had them
    smoke = Measurements(0.02, None, None, None, 2.0, workers=0, processes=1, mfu=None, device_type="cpu",
                         proc_cpu_pct_mean=120.0, host_cpu_pct_mean=93.0, threads_per_process=2)  # fmt: skip
    v = verdict(smoke)
    assert v.bottleneck == "cpu-contended"
    assert (
        v.evidence
        == "host CPU 93% busy while the run's processes used 1.20 cores of 2 allowed: other processes took the rest"
    )
    assert "rerun when it is idle" in v.advice and "--nproc" not in v.advice
    # the same run on an idle host: its cores did sit idle
    idle = verdict(dataclasses.replace(smoke, host_cpu_pct_mean=40.0))
    assert idle.bottleneck == "cpu-underused" and "cores sat idle" in idle.evidence
    # whatever the run's share and threads, a busy host never reads "cores sat idle", and a run whose threads
    # did not get the cores they could use (90% of them) is cpu-contended
    for host in (90.0, 93.0, 100.0):
        for processes, threads in ((1, None), (1, 1), (1, 2), (2, 1), (1, 4), (8, 1)):
            for proc in range(0, 200, 5):
                m = dataclasses.replace(smoke, host_cpu_pct_mean=host, processes=processes,
                                        threads_per_process=threads, proc_cpu_pct_mean=float(proc))  # fmt: skip
                v = verdict(m)
                assert "cores sat idle" not in v.evidence, (host, processes, threads, proc, v)
                wanted = min(2, processes * (threads or 2))
                assert (v.bottleneck == "cpu-contended") == (proc < 90 * wanted), (host, processes, threads, proc, v)


def test_more_processes_than_cores_is_named_in_the_verdict_and_its_fix():
    # issue 46: `--nproc 8` on 2 cores read both "host CPU 100% busy" and "cores sat idle"
    eight = Measurements(0.01, None, None, None, 2.0, workers=0, processes=8, mfu=None, device_type="cpu",
                         proc_cpu_pct_mean=150.0, host_cpu_pct_mean=100.0, threads_per_process=1)  # fmt: skip
    v = verdict(eight)
    assert v.bottleneck == "cpu-contended" and "cores sat idle" not in v.evidence
    assert v.evidence.endswith(
        "other processes took the rest; the run itself ran 8 process(es) x 1 thread(s) on 2 cores"
    )
    assert "run at most as many processes x threads as cores (--nproc, OMP_NUM_THREADS)" in v.advice
    # the host not busy: the cores did sit idle, and the fix still names the oversubscription
    calm = verdict(dataclasses.replace(eight, host_cpu_pct_mean=80.0))
    assert calm.bottleneck == "cpu-underused" and "cores sat idle" in calm.evidence
    assert calm.advice.startswith("run at most as many processes x threads as cores (--nproc, OMP_NUM_THREADS)")
    # as many processes as cores: nothing said of it
    two = verdict(dataclasses.replace(eight, processes=2))
    assert "--nproc, OMP_NUM_THREADS" not in two.advice and "the run itself ran" not in two.evidence


def test_the_contended_fix_names_the_passive_wait_policy_on_a_cpu_that_spins():
    # issue 34: on a loaded 2-core VM spinning OpenMP threads made the smoke run 10x slower than sleeping ones
    cpu = Measurements(0.0, None, None, None, 2.0, workers=0, processes=1, mfu=None, device_type="cpu",
                       proc_cpu_pct_mean=16.0, host_cpu_pct_mean=100.0)  # fmt: skip
    for policy in (None, "", "active", "ACTIVE"):
        v = verdict(dataclasses.replace(cpu, omp_wait_policy=policy))
        assert v.bottleneck == "cpu-contended" and v.advice.startswith("set OMP_WAIT_POLICY=PASSIVE"), policy
    for policy in ("PASSIVE", "passive", " Passive "):  # already applied: not offered again
        v = verdict(dataclasses.replace(cpu, omp_wait_policy=policy))
        assert "OMP_WAIT_POLICY" not in v.advice and "rerun when it is idle" in v.advice
    # a GPU run's threads do not do its arithmetic: the policy is not its fix
    gpu = dataclasses.replace(cpu, device_type="cuda", gpu_util_pct_mean=95.0)
    v = verdict(gpu)
    assert v.bottleneck == "cpu-contended" and "OMP_WAIT_POLICY" not in v.advice


def test_no_measured_step_gives_no_verdict():
    assert verdict(m(measured_steps=0)) is None
    assert verdict(m(measured_steps=1)) is not None


def test_input_bound_boundary():
    v = verdict(m(data_time_share=INPUT_BOUND_SHARE, workers=0, cpu_quota_cores=None))
    assert v.bottleneck == "input-bound"
    assert v.evidence.startswith("data wait 25% of step time with 0 worker(s)")
    assert "workers" in v.advice and "fast" in v.advice and "threads" in v.advice
    assert verdict(m(data_time_share=0.2499)).bottleneck == "compute-bound"
    v = verdict(m(data_time_share=0.62, workers=0, cpu_quota_cores=None))
    assert "data wait 62% of step time with 0 worker(s)" in v.evidence


def test_communication_bound_boundary():
    assert verdict(m(allreduce_share=COMM_BOUND_SHARE)).bottleneck == "communication-bound"
    assert "all-reduce 25% of step time" in verdict(m(allreduce_share=0.25)).evidence
    assert verdict(m(allreduce_share=0.2499)).bottleneck == "compute-bound"
    assert verdict(m(allreduce_share=None)).bottleneck == "compute-bound"


def test_memory_capacity_bound_boundary():
    v = verdict(m(peak_mem_fraction=MEMORY_BOUND_FRACTION))
    assert v.bottleneck == "memory-capacity-bound" and "92%" in v.evidence
    assert verdict(m(peak_mem_fraction=0.9199)).bottleneck == "compute-bound"


def test_host_launch_bound_boundary():
    v = verdict(m(gpu_util_pct_mean=69.9))
    assert v.bottleneck == "host/launch-bound"
    assert "GPU utilisation 69.9% with data wait only 2.0% of step time" in v.evidence
    assert "batch" in v.advice and "channels_last" in v.advice and "torch.compile" in v.advice
    assert verdict(m(gpu_util_pct_mean=LOW_GPU_UTIL_PCT)).bottleneck == "compute-bound"
    assert verdict(m(gpu_util_pct_mean=None)).bottleneck == "compute-bound"


def test_precedence_order():
    everything = m(
        cpu_quota_cores=4.0,
        data_time_share=0.5,
        allreduce_share=0.4,
        peak_mem_fraction=0.95,
        gpu_util_pct_mean=30.0,
        proc_cpu_pct_mean=400.0,
    )
    assert verdict(everything).bottleneck == "cpu-starved"
    assert verdict(dataclasses.replace(everything, cpu_quota_cores=None)).bottleneck == "input-bound"
    rest = dataclasses.replace(everything, cpu_quota_cores=None, data_time_share=0.1)
    assert verdict(rest).bottleneck == "communication-bound"
    assert verdict(dataclasses.replace(rest, allreduce_share=0.1)).bottleneck == "memory-capacity-bound"
    last = dataclasses.replace(rest, allreduce_share=0.1, peak_mem_fraction=0.5)
    assert verdict(last).bottleneck == "host/launch-bound"
    assert verdict(dataclasses.replace(last, gpu_util_pct_mean=99.0)).bottleneck == "compute-bound"
    assert analysis.BOTTLENECKS == (
        "cpu-starved",
        "cpu-contended",
        "input-bound",
        "communication-bound",
        "memory-capacity-bound",
        "host/launch-bound",
        "cpu-underused",
        "compute-bound",
    )


def test_low_util_with_heavy_data_wait_is_input_not_launch():
    v = verdict(m(data_time_share=0.4, gpu_util_pct_mean=40.0))
    assert v.bottleneck == "input-bound" and "host/launch-bound" not in v.evidence


def test_losing_rules_are_listed_as_also():
    v = verdict(m(cpu_quota_cores=4.0, data_time_share=0.5, proc_cpu_pct_mean=390.0))
    assert v.bottleneck == "cpu-starved"
    assert "; also input-bound: data wait 50%" in v.evidence


def test_verdict_dict():
    v = verdict(m(data_time_share=0.3))
    d = verdict_dict(v)
    assert d == {"bottleneck": "input-bound", "evidence": v.evidence, "advice": v.advice}
    assert d["bottleneck"] in analysis.BOTTLENECKS

"""Issue 27, items 3-9 and the pipelined question: what a GPU (or a multi-rank) run measures and how the
verdict reads it, each tested on the CPU with fakes (NVML, device names, allocator, profiler traces)."""

from __future__ import annotations

import gzip
import json
import types
from pathlib import Path

import pytest

import typedrec
from effbench.analysis import efficiency as eff
from effbench import schema
from effbench.measure import monitor, observe


def _rec(**fields):
    """A results.json record as the report reads it: typed, with the two fields every record has."""
    from effbench import results

    return results.record_of({"schema_version": 1, "status": "ok", **fields})


def _summ(record, **kw):
    args = dict(flops_image=None, utilization=None, memory=[], profile_info=None, cpu_quota_cores=None,
                workers_per_process=0, processes_per_node=1, tf32_enabled=False)  # fmt: skip
    args.update(kw)
    return typedrec.summarize(record, **args)


def _cuda_record(**kw):
    rec = {"precision": "fp32", "devices": 1, "world_size": 1, "throughput_img_s": 1000.0, "data_time_share": 0.02,
           "measured": {"steps": 50, "time_s": 1.0, "images": 1000}, "epochs": [{"images": 1200}],
           "launch": {"mode": "inprocess", "device_type": "cuda"},
           "env": {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}]}}  # fmt: skip
    rec.update(kw)
    return rec


# ------------------------------------------------------------------------------------------------
# 3. The CPU verdict under DDP: every local rank's process tree against the node's allowance
# ------------------------------------------------------------------------------------------------
def _rank_summary(proc_cpu_mean: float, host: str = "n1", cpu_pct: float = 99.0) -> dict:
    """One rank's sampler summary (monitor.UtilizationSampler.summary's keys): its own tree's CPU."""
    return {"hostname": host, "host": {"cpu_pct": {"mean": cpu_pct, "max": 100.0},
                                       "proc_cpu_pct": {"mean": proc_cpu_mean, "max": proc_cpu_mean + 5},
                                       "rss_gib": {"mean": 1.0, "max": 1.1}}}  # fmt: skip


def test_two_ranks_trees_are_summed_so_a_saturated_node_is_not_called_contended():
    # `--nproc 2 --device cpu` on 2 cores: each rank's tree used 0.95 cores. Rank 0's alone (today) read
    # 0.95 of 2 and "cpu-contended: other processes took the rest", the other process being rank 1.
    merged = typedrec.merge(_rank_summary(95.0), _rank_summary(95.0))
    assert merged["host"]["proc_cpu_pct"] == {"mean": 190.0, "ranks": 2}
    assert merged["host"]["cpu_pct"]["mean"] == 99.0  # host-wide: rank 0's, not summed
    rec = {"precision": "fp32", "devices": 2, "world_size": 2, "throughput_img_s": 10.0, "data_time_share": 0.4,
           "measured": {"steps": 10, "images": 100}, "launch": {"device_type": "cpu", "threads_per_proc": 1}}  # fmt: skip
    v = _summ(rec, utilization=merged, cpu_quota_cores=2.0, workers_per_process=1, processes_per_node=2)["verdict"]
    # 2 processes + 2 workers on 2 cores, 1.90 cores used, 40% data wait: cpu-starved fires with two ranks
    assert v["bottleneck"] == "cpu-starved", v
    assert "cpu-contended" not in v["evidence"]
    assert v["evidence"].startswith("run's processes used 1.90 cores of 2 allowed")


def test_ranks_on_another_host_stay_out_of_the_node_sum():
    merged = typedrec.merge(_rank_summary(80.0, "n1"), _rank_summary(70.0, "n1"), _rank_summary(90.0, "n2"))
    assert merged["host"]["proc_cpu_pct"]["mean"] == 150.0
    # a rank that did not sample its tree: no partial sum (it would understate the node's use)
    lost = _rank_summary(70.0)
    del lost["host"]["proc_cpu_pct"]
    assert "proc_cpu_pct" not in typedrec.merge(_rank_summary(80.0), lost)["host"]


def test_the_sampler_summary_names_its_host():
    import socket

    with monitor.UtilizationSampler(interval_s=10, gpu_indices=[]) as mon:
        pass
    assert mon.summary().hostname == socket.gethostname()


def test_summed_tree_cpu_renders_as_a_mean_of_ranks():
    from effbench.report.tables import observability_rows

    rows = dict(observability_rows(_rec(utilization=typedrec.merge(_rank_summary(60.0), _rank_summary(70.0)))))
    assert rows["run CPU % (process tree)"] == "130.0 mean, 2 ranks summed"


# ------------------------------------------------------------------------------------------------
# 4. MIG slices: their share of the parent GPU's peak (by the SMs CUDA reports), or none
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # NVML's / torch's name of a MIG device (1 of 7 GPCs)
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "NVIDIA H100 PCIe MIG 7g.80gb",
    ],
)
def test_mig_slices_get_no_peak_and_no_mfu(name):
    assert eff.gpu_model(name) is None and eff.peak_tflops(name, "bf16") is None
    rec = _cuda_record(precision="bf16", env={"gpus": [{"name": name, "capability": "8.0"}]})
    out = _summ(rec, flops_image=1e9)
    assert "mfu" not in out and out["achieved_tflops"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("name", "sms", "bf16_peak", "basis"),
    [
        # A100 datasheet BF16 312 TFLOP/s dense over the A100's 108 SMs (A100 whitepaper); a 1g.5gb slice
        # reports 14 SMs, a 3g.20gb 42, the whole GPU in MIG mode (7g.40gb) 98
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, 312.0 * 14 / 108, "A100 MIG (14/108 SMs)"),
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", 42, 312.0 * 42 / 108, "A100 MIG (42/108 SMs)"),
        ("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 98, 312.0 * 98 / 108, "A100 MIG (98/108 SMs)"),
        # H100 SXM5: 989.5 dense over 132 SMs (H100 whitepaper); H100 PCIe: 756.5 over 114
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, 989.5 * 16 / 132, "H100 SXM MIG (16/132 SMs)"),
        ("NVIDIA H100 PCIe MIG 2g.20gb", 32, 756.5 * 32 / 114, "H100 PCIe MIG (32/114 SMs)"),
    ],
)
def test_a_mig_slice_with_its_sm_count_gets_its_share_of_the_peak(name, sms, bf16_peak, basis):
    assert eff.peak_tflops(name, "bf16", sm_count=sms) == pytest.approx(bf16_peak)
    rec = _cuda_record(precision="bf16", env={"gpus": [{"name": name, "capability": "8.0", "sm_count": sms}]})
    out = _summ(rec, flops_image=1e9)  # 1000 img/s x 1 GFLOP = 1 TFLOP/s achieved
    assert out["mfu_peak_tflops_per_device"] == pytest.approx(bf16_peak)
    assert out["mfu"] == pytest.approx(1.0 / bf16_peak)
    assert out["mfu_peak_gpu"] == basis


@pytest.mark.parametrize(
    ("name", "sms"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 0),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 109),  # more SMs than the whole A100: not a slice of it
        ("NVIDIA H100 MIG 1g.10gb", 16),  # the parent's form factor (SXM, PCIe, NVL) unknown: no row
        ("NVIDIA A30 MIG 1g.6gb", 14),  # a MIG GPU whose datasheet is not in the table
    ],
)
def test_a_mig_slice_that_does_not_fit_a_known_parent_gets_no_peak(name, sms):
    assert eff.mig_share(name, sms) is None and eff.peak_tflops(name, "bf16", sm_count=sms) is None


def test_a_whole_gpu_s_peak_ignores_the_sm_count():
    """The datasheet is for the product's SMs; CUDA's count of a whole GPU changes nothing."""
    assert eff.peak_tflops("NVIDIA A100-SXM4-40GB", "bf16", sm_count=108) == eff.peak_tflops(
        "NVIDIA A100-SXM4-40GB", "bf16"
    )
    assert eff.mig_share("NVIDIA A100-SXM4-40GB", 108) is None


def test_whole_gpus_still_have_their_peak():
    assert eff.gpu_model("NVIDIA A100-SXM4-40GB") == "A100"
    assert eff.gpu_model("NVIDIA H100 80GB HBM3") == "H100 SXM"


# ------------------------------------------------------------------------------------------------
# 5. fp32 MFU: convolutions at the TF32 peak (cudnn.allow_tf32), matmuls at FP32 (cuda.matmul.allow_tf32)
# ------------------------------------------------------------------------------------------------
def test_step_flops_splits_matmuls_from_convolutions():
    import torch

    from effbench.measure.flops import step_flops

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
    x, y = torch.randn(2, 3, 16, 16), torch.tensor([1, 2])
    got = step_flops(model, x, y)
    # written apart: per image, the conv's forward 2 * (8*14*14) * (3*3*3) and its weight gradient (the input
    # is a leaf: no input gradient); the linear's forward 2 * 1568 * 10, its input and weight gradients
    conv = 2 * (8 * 14 * 14) * 27 * 2
    linear = 2 * 1568 * 10 * 3
    assert got.matmul_per_image == linear
    assert got.per_image == conv + linear


def test_torch_defaults_leave_matmuls_in_full_fp32():
    import torch

    # the pinned torch's defaults (torch/backends/cudnn/__init__.py flags(allow_tf32=True);
    # torch/backends/cuda/__init__.py reads cuBLAS's switch, which follows float32_matmul_precision "highest")
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.get_float32_matmul_precision() == "highest"


def test_fp32_vit_like_step_is_held_against_fp32_for_its_matmuls():
    # 90% of the FLOPs in matmuls (a ViT), 10% in the patch convolution, fp32 on an H100 SXM (datasheet:
    # FP32 67, TF32 494.5 dense) with torch's defaults: the convolution may use TF32, the matmuls may not.
    rec = _cuda_record(throughput_img_s=20_000.0)
    out = _summ(rec, flops_image=1e9, flops_matmul_image=0.9e9, tf32_enabled=True, tf32_matmul_enabled=False)
    peak = 1e9 / (0.1e9 / 494.5 + 0.9e9 / 67.0)  # the step's time at each part's own peak, written apart
    assert out["mfu_peak_tflops_per_device"] == pytest.approx(peak)
    assert out["mfu"] == pytest.approx(20.0 / peak)  # 20 TFLOP/s achieved
    assert out["mfu_peak_precision"] == "tf32 10% + fp32 90%"
    # today's code held all of it against TF32: MFU 20 / 494.5, 6.6x lower than the above
    assert out["mfu"] > 5 * 20.0 / 494.5
    # with set_float32_matmul_precision("high") the matmuls may use TF32 too
    high = _summ(rec, flops_image=1e9, flops_matmul_image=0.9e9, tf32_enabled=True, tf32_matmul_enabled=True)
    assert high["mfu_peak_tflops_per_device"] == pytest.approx(494.5) and high["mfu_peak_precision"] == "tf32"


def test_a_cnn_and_autocast_runs_keep_one_peak():
    rec = _cuda_record(throughput_img_s=20_000.0)
    cnn = _summ(rec, flops_image=1e9, flops_matmul_image=0.0, tf32_enabled=True)
    assert cnn["mfu_peak_tflops_per_device"] == pytest.approx(494.5)
    bf16 = _summ(_cuda_record(precision="bf16"), flops_image=1e9, flops_matmul_image=0.9e9, tf32_enabled=True)
    assert bf16["mfu_peak_tflops_per_device"] == pytest.approx(989.5) and bf16["mfu_peak_precision"] == "bf16"
    # a Volta has no TF32: both parts at FP32 whatever the switches say
    v100 = _cuda_record(env={"gpus": [{"name": "Tesla V100-SXM2-32GB", "capability": "7.0"}]})
    assert _summ(v100, flops_image=1e9, flops_matmul_image=0.5e9, tf32_enabled=True)["mfu_peak_precision"] == "fp32"


# ------------------------------------------------------------------------------------------------
# 6 + 8. Energy and GPU utilisation over the measured window only
# ------------------------------------------------------------------------------------------------
class EnergyNVML:
    """One GPU whose energy counter (mJ) and utilisation the test sets (pynvml's call names)."""

    def __init__(self) -> None:
        self.energy_mj = 1_000.0
        self.util = 10

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceIsMigDeviceHandle(self, h: int) -> int:
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> float:
        return self.energy_mj

    def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=self.util, memory=0)


def test_window_energy_is_read_at_the_windows_own_marks():
    nvml = EnergyNVML()
    with monitor.UtilizationSampler(interval_s=60, gpu_indices=[0], nvml=nvml) as mon:
        nvml.energy_mj = 5_000.0  # warm-up and compile: 4 J
        mon.window(True)
        nvml.energy_mj = 8_000.0  # measured steps of epoch 1: 3 J
        mon.window(False)
        nvml.energy_mj = 20_000.0  # validation: 12 J
        mon.window(True)
        mon.window(True)  # a repeated open changes nothing
        nvml.energy_mj = 21_000.0  # epoch 2's measured steps: 1 J
        mon.window(False)
        nvml.energy_mj = 30_000.0  # the last validation: 9 J
    s = mon.summary()
    assert s.gpus[0].energy_j == pytest.approx(29.0)  # the whole block
    w = s.measured_window
    assert w.spans == 2 and w.gpus[0].energy_j == pytest.approx(4.0)
    assert monitor.energy_j(typedrec.utilization({"gpus": w.model_dump()["gpus"]})) == pytest.approx(4.0)


def test_images_per_joule_uses_the_measured_windows_energy_and_images():
    whole = [{"index": 0, "util_pct": {"mean": 40.0, "max": 99.0}, "energy_j": 600.0}]
    window = [{"index": 0, "util_pct": {"mean": 96.0, "max": 99.0}, "energy_j": 250.0}]
    util = {"host": {}, "gpus": whole, "measured_window": {"host": {}, "gpus": window, "samples": 8}}
    out = _summ(_cuda_record(precision="bf16"), utilization=util)
    # 1000 measured images over the 250 J of the measured steps; today: the epochs' 1200 images (warm-up
    # included) over 600 J (warm-up, compile, validation included)
    assert out["energy_j"] == 250.0 and out["images_per_j"] == pytest.approx(1000 / 250)


def test_gpu_utilisation_for_the_verdict_is_the_measured_windows():
    # --compile: the whole block's utilisation (40%) is dragged down by compile, warm-up and validation,
    # while the measured steps kept the GPU 96% busy with 2% data wait: compute-bound, not host/launch-bound
    whole = [{"index": 0, "util_pct": {"mean": 40.0, "max": 99.0}}]
    window = [{"index": 0, "util_pct": {"mean": 96.0, "max": 99.0}}]
    util = {"host": {}, "gpus": whole, "measured_window": {"host": {}, "gpus": window, "samples": 8}}
    v = _summ(_cuda_record(precision="bf16"), utilization=util)["verdict"]
    assert v["bottleneck"] == "compute-bound" and "GPU utilisation 96%" in v["evidence"], v
    # and the other way round: a window that idled is host/launch-bound even if the block looked busy
    util = {"host": {}, "gpus": window, "measured_window": {"host": {}, "gpus": whole, "samples": 8}}
    assert _summ(_cuda_record(precision="bf16"), utilization=util)["verdict"]["bottleneck"] == "host/launch-bound"


def test_the_report_shows_the_windows_utilisation_beside_the_blocks():
    from effbench.report.tables import observability_rows

    whole = [{"index": 0, "util_pct": {"mean": 40.0, "max": 99.0}}]
    window = [{"index": 0, "util_pct": {"mean": 96.0, "max": 99.0}}]
    util = {"host": {}, "gpus": whole, "measured_window": {"host": {}, "gpus": window}}
    rows = dict(observability_rows(_rec(utilization=util)))
    assert rows["GPU 0 utilisation %"] == "40.0 mean / 99.0 max"
    assert rows["GPU 0 utilisation %, measured steps only"] == "96.0 mean / 99.0 max"


def test_window_utilisation_uses_only_rows_sampled_inside_it():
    nvml = EnergyNVML()
    with monitor.UtilizationSampler(interval_s=60, gpu_indices=[0], nvml=nvml) as mon:
        pass
    # rows as the thread would have taken them (t_s, util): 10% before, 95% inside, 5% after the window
    mon._rows = [{"t_s": t, "gpu0_util_pct": u} for t, u in ((0.5, 10.0), (1.5, 95.0), (2.5, 95.0), (3.5, 5.0))]
    mon._marks = [(1.0, True, {0: 0.0}), (3.0, False, {0: 2.0})]
    w = mon.summary().model_dump(exclude_unset=True)["measured_window"]
    assert w["samples"] == 2 and w["gpus"][0]["util_pct"] == {"mean": 95.0, "max": 95.0}


# ------------------------------------------------------------------------------------------------
# 7. Peak memory of the measured window: reset as it opens, read as it closes
# ------------------------------------------------------------------------------------------------
class FakeAllocator:
    """torch.cuda's peak counters as the caching allocator keeps them: reset_peak_memory_stats restarts the
    peak from the current value (torch/cuda/memory.py:381)."""

    def __init__(self) -> None:
        self.current = 1.0
        self.peak = 1.0
        self.events: list[str] = []

    def alloc(self, gib: float) -> None:
        self.peak = max(self.peak, self.current + gib)

    def reset(self, indices):
        self.events.append("reset")
        self.peak = self.current

    def read(self, indices):
        self.events.append("read")
        return [observe.PeakMemory(cuda_index=i, allocated_gib=self.peak, reserved_gib=self.peak + 2, total_gib=32.0)
                for i in indices]  # fmt: skip


def test_measured_window_excludes_autotuning_validation_and_profiling():
    a = FakeAllocator()
    with monitor.UtilizationSampler(interval_s=60, gpu_indices=[]) as mon:
        w = observe.MeasuredWindow(mon, [0], reset=a.reset, read=a.read)
        w.on_phase("warm-up")
        a.alloc(29.0)  # cuDNN autotuning workspaces in warm-up
        w.on_phase("epochs")
        a.alloc(4.0)  # the measured steps
        w.on_phase("validation")
        a.alloc(20.0)  # validation at a bigger batch
        w.on_phase("epochs")
        a.alloc(5.0)
        w.on_phase("validation")
    a.alloc(30.0)  # the profiling pass, after the timed run
    (peak,) = w.peak_memory()
    assert peak.allocated_gib == 6.0 and a.events == ["reset", "read", "reset", "read"]
    out = _summ(_cuda_record(), memory=[peak])
    assert out["peak_mem_gib"] == 6.0 and out["verdict"]["bottleneck"] != "memory-capacity-bound"


class _WindowOnly:
    """A sampler whose summary holds one GPU's NVML used memory over the measured window."""

    def __init__(self, used_max: float | None) -> None:
        self.used_max = used_max

    def window(self, _open: bool) -> None:
        pass

    def summary(self):
        gpu = (
            {"index": 0} if self.used_max is None else {"index": 0, "mem_used_gib": {"mean": 1.0, "max": self.used_max}}
        )
        return schema.Utilization.model_validate({"measured_window": {"gpus": [gpu]}})


def test_memory_torch_never_allocated_counts_toward_the_device_being_full():
    # GPU truth 3.7: DALI's and nvJPEG's buffers live outside torch's caching allocator, so its peaks do not
    # see them. 20 GiB allocated, 22 reserved on a 32 GiB device: not full by torch's count; NVML saw 30 GiB
    # in use, 8 of it outside torch's pool: (20 + 8) / 32 = 87.5%, and at 32 GiB in use 93.75%, memory-bound.
    a = FakeAllocator()
    a.current = a.peak = 20.0
    for used, bound in ((None, False), (30.0, False), (32.0, True)):
        w = observe.MeasuredWindow(_WindowOnly(used), [0], reset=lambda i: None,
                                   read=lambda i: [observe.PeakMemory(0, 20.0, 22.0, 32.0)])  # fmt: skip
        w.open()
        (peak,) = w.peak_memory()
        assert peak.nvml_used_gib == used
        out = _summ(_cuda_record(), memory=[peak])
        assert out.get("peak_mem_nvml_used_gib") == used and out["peak_mem_gib"] == 20.0
        assert (out["verdict"]["bottleneck"] == "memory-capacity-bound") is bound, (used, out["verdict"])
    assert "10.0 GiB of it outside torch's allocator" in out["verdict"]["evidence"]


def test_a_full_device_in_the_measured_steps_is_still_memory_capacity_bound():
    mem = [{"cuda_index": 0, "peak_mem_allocated_gib": 30.0, "peak_mem_reserved_gib": 31.0, "mem_total_gib": 32.0}]
    v = _summ(_cuda_record(), memory=mem)["verdict"]
    assert v["bottleneck"] == "memory-capacity-bound" and "during the measured steps" in v["evidence"]


def test_the_runner_resets_and_reads_peak_memory_at_the_windows_edges(tmp_path, capsys, monkeypatch):
    """A real 2-epoch CPU run with a fake GPU index: the runner resets the peak only as measured steps begin
    and reads it as they end (today: one reset before warm-up, one read after everything)."""
    from effbench.cli import app as cli
    from effbench.run import phases

    log: list[tuple[str, str]] = []
    enter = phases.Phase.enter

    def logged_enter(self, name):
        log.append(("phase", name))
        return enter(self, name)

    monkeypatch.setattr(phases.Phase, "enter", logged_enter)
    monkeypatch.setattr(observe, "job_cuda_indices", lambda *a: [0])
    monkeypatch.setattr(observe, "sampler_for", lambda idx, interval_s: monitor.UtilizationSampler(interval_s, []))
    monkeypatch.setattr(observe, "reset_peak_memory", lambda idx: log.append(("reset", "")))
    fake = [observe.PeakMemory(cuda_index=0, allocated_gib=1.0, reserved_gib=2.0, total_gib=32.0)]
    monkeypatch.setattr(observe, "peak_memory", lambda idx: log.append(("read", "")) or fake)
    args = ["run", "--dataset", "synthetic", "--arch", "resnet18", "--image-size", "16", "--weights", "none",
            "--device", "cpu", "--workers", "0", "--batch-size", "2", "--epochs", "2", "--max-steps", "3",
            "--warmup-steps", "1", "--no-profile", "--quiet", "--output", str(tmp_path)]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 0, capsys.readouterr().err
    events = [e for e in log if e[0] != "phase" or e[1] in ("warm-up", "epochs", "validation")]
    assert events == [
        ("phase", "warm-up"), ("phase", "epochs"), ("reset", ""), ("phase", "validation"), ("read", ""),
        ("phase", "epochs"), ("reset", ""), ("phase", "validation"), ("read", ""),
    ]  # fmt: skip
    (run,) = list(tmp_path.iterdir())
    r = json.loads((run / "results.json").read_text())
    assert r["peak_mem_gib"] == 1.0
    assert r["utilization"]["measured_window"]["spans"] == 2
    assert 0 < r["utilization"]["measured_window"]["duration_s"] < r["utilization"]["duration_s"]


# ------------------------------------------------------------------------------------------------
# 9. Exposed communication on the trace's device timeline
# ------------------------------------------------------------------------------------------------
def _kernel(name: str, ts: float, dur: float, stream: int, device: int = 0) -> dict:
    """A kernel event as torch.profiler's export_chrome_trace writes it (Kineto: cat "kernel", us)."""
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": stream}}  # fmt: skip


ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_an_allreduce_hidden_behind_backward_is_not_exposed():
    from effbench.measure.profiling import exposed_communication

    # backward kernels on stream 7 from 0 to 1000 us; DDP's bucketed all-reduces on NCCL's stream 21 inside it
    trace = [_kernel(f"sm90_xmma_dgrad_{i}", 100.0 * i, 100.0, 7) for i in range(10)]
    trace += [_kernel(ALLREDUCE, 200.0, 300.0, 21), _kernel(ALLREDUCE, 600.0, 350.0, 21)]
    trace += [{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": 0.0, "dur": 2000.0}]
    got = exposed_communication(trace)
    assert (got.comm_kernel_s, got.exposed_comm_s) == (pytest.approx(650e-6), pytest.approx(0.0))


def test_an_allreduce_after_backward_is_exposed():
    from effbench.measure.profiling import exposed_communication

    trace = [_kernel("volta_scudnn_128x64_relu", 0.0, 400.0, 7), _kernel("sgd_kernel", 900.0, 50.0, 7)]
    trace += [_kernel(ALLREDUCE, 300.0, 500.0, 21)]  # 100 us overlapped, 400 us alone
    trace += [_kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 950.0, 100.0, 21, device=0)]  # older NCCL's name
    trace += [_kernel("elementwise_kernel", 950.0, 100.0, 7, device=1)]  # another device's compute hides nothing
    got = exposed_communication(trace)
    assert got.comm_kernel_s == pytest.approx(600e-6) and got.exposed_comm_s == pytest.approx(500e-6)


def test_trace_file_round_trip(tmp_path):
    from effbench.measure.profiling import exposed_communication, read_trace_events

    path = tmp_path / "trace_rank0.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": [_kernel(ALLREDUCE, 0.0, 10.0, 21)]}, f)
    assert exposed_communication(read_trace_events(path)).exposed_comm_s == pytest.approx(10e-6)


def test_communication_bound_reads_exposed_time_not_all_nccl_time():
    rec = _cuda_record(devices=2, world_size=2, launch={"mode": "torchrun", "device_type": "cuda"})
    # the all_reduce phase's device time is half the step's (overlapped with backward); none of it exposed
    phases = [{"phase": "all_reduce", "calls": 3, "cpu_time_s": 0.01, "cpu_share_of_step": 0.1,
               "device_time_s": 0.05, "device_share_of_step": 0.5}]  # fmt: skip
    hidden = {"phases": phases, "exposed_comm_s": 0.0, "comm_kernel_s": 0.05, "active_steps": 3}
    timed = [0.1] * 10
    out = _summ(rec, profile_info=hidden, processes_per_node=2, timed_step_times_s=timed)
    assert out["verdict"]["bottleneck"] != "communication-bound", out["verdict"]
    assert out["profile"]["exposed_comm_share"] == 0.0 and out["profile"]["comm_kernel_s"] == 0.05
    exposed = {**hidden, "exposed_comm_s": 0.09}  # 30 ms a step over 3 steps, against 100 ms timed steps
    v = _summ(rec, profile_info=exposed, processes_per_node=2, timed_step_times_s=timed)["verdict"]
    assert v["bottleneck"] == "communication-bound" and "exposed all-reduce 30% of step time" in v["evidence"]


def test_exposed_communication_is_held_against_the_timed_step_not_the_profiled_one():
    # Item 31 (GPU truth 3.4): the profiler (record_shapes, profile_memory, with_flops) doubles these small
    # steps' host time, 200 ms against 100 ms timed. 30 ms exposed per step is 30% of the step the loop
    # really runs; over the profiled step it read 15%, under the 25% a verdict needs.
    rec = _cuda_record(devices=2, world_size=2, launch={"mode": "torchrun", "device_type": "cuda"})
    info = {"phases": [], "exposed_comm_s": 0.09, "comm_kernel_s": 0.2, "active_steps": 3,
            "profiled_step_times_s": [0.2, 0.2, 0.2], "profiled_step_time_s": 0.2}  # fmt: skip
    out = _summ(rec, profile_info=info, processes_per_node=2, timed_step_times_s=[0.1] * 10)
    assert out["profile"]["exposed_comm_share"] == pytest.approx(0.3)
    assert out["verdict"]["bottleneck"] == "communication-bound"
    # no timed step to hold it against: no share (never the profiled step's)
    assert "exposed_comm_share" not in _summ(rec, profile_info=info, processes_per_node=2)["profile"]


def _annotation(name: str, ts: float, dur: float, stream: int, device: int = 0) -> dict:
    """A record_function range on the device timeline (Kineto's "gpu_user_annotation")."""
    return {**_kernel(name, ts, dur, stream, device), "cat": "gpu_user_annotation"}


def test_only_the_training_streams_hide_communication():
    # Item 31: DALI decodes the next batches on its own stream while the all-reduce runs after backward;
    # its kernels overlap the all-reduce but the step waits for it all the same. The training stream is
    # the one the pass's `step` range marks on the device timeline.
    from effbench.measure.profiling import STEP, exposed_communication

    trace = [_annotation(STEP, 0.0, 1000.0, 7), _annotation(STEP, 300.0, 500.0, 21)]  # NCCL launched in the step
    trace += [_kernel("volta_scudnn_128x64_relu", 0.0, 300.0, 7), _kernel(ALLREDUCE, 300.0, 500.0, 21)]
    trace += [_kernel("dali::kernels::ResizeBatchedKernel", 250.0, 600.0, 30)]  # DALI's stream: no step range
    got = exposed_communication(trace)
    assert got.exposed_comm_s == pytest.approx(500e-6)
    # a trace without the pass's ranges (not effbench's): every other kernel counts, DALI's included
    plain = [e for e in trace if e["cat"] == "kernel"]
    assert exposed_communication(plain).exposed_comm_s == pytest.approx(0.0)


def test_the_agreements_between_profiled_steps_are_no_steps_communication():
    # N1 (round four): between steps the pass's ranks agree through one all_gather (NCCL under DDP); its
    # kernel, which also waits for the slowest rank, sat outside every step and read as 300 us of exposed
    # communication. Only the all-reduce launched inside the step (200 us, 100 of it beside backward) counts.
    from effbench.measure.profiling import STEP, exposed_communication

    trace = [_annotation(STEP, 0.0, 1000.0, 7), _annotation(STEP, 300.0, 500.0, 21)]
    trace += [_kernel("volta_scudnn_128x64_relu", 0.0, 400.0, 7), _kernel(ALLREDUCE, 300.0, 500.0, 21)]
    trace += [_kernel("ncclDevKernel_AllGather_RING_LL", 1100.0, 300.0, 21)]  # the agreement before step 2
    got = exposed_communication(trace)
    assert got.comm_kernel_s == pytest.approx(500e-6)  # the all-reduce's 500 us inside the step; not the 300 after
    assert got.exposed_comm_s == pytest.approx(400e-6)  # 800 - 400 us: its part beside no compute kernel


# ------------------------------------------------------------------------------------------------
# The measured question: a pipelined loop beside the harness (CUDA only)
# ------------------------------------------------------------------------------------------------
def test_pipelined_check_skips_on_the_cpu_with_its_reason(tmp_path):
    import torch

    from effbench.selftest import checks as st

    ctx = st.Context(cfg=st.SelftestConfig(device="cpu", output=tmp_path), device=torch.device("cpu"),
                     folder=tmp_path, echo=lambda _: None)  # fmt: skip
    (row,) = st.check_pipelined(ctx)
    assert row.name == st.PIPELINED_NAME and row.status == st.SKIP and row.reason.startswith("CUDA only")
    assert "pipelined" in st.CHECKS
    assert st.PIPELINED_NAME.startswith(st.GPU_ONLY)  # the CPU selftest test and CI let it SKIP
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "from effbench.selftest.checks import GPU_ONLY" in ci and "startswith(GPU_ONLY)" in ci


def test_harness_windows_are_cut_like_the_pipelined_loops():
    from effbench.selftest.checks import window_img_s

    steps = [(10, 0.0, 0.1)] * 5 + [(10, 0.05, 0.05)] * 5 + [(10, 0.0, 1.0)]  # the last, part of a window: dropped
    assert window_img_s(steps, 5) == [pytest.approx(100.0), pytest.approx(100.0)]


def test_pipelined_loop_syncs_once_a_window():
    import torch

    from effbench.selftest.reference import BareLoop

    loop = BareLoop(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)), batch=4, image_size=8,
                    classes=10, device=torch.device("cpu"))  # fmt: skip
    before = [p.detach().clone() for p in loop.model.parameters()]
    assert loop.pipelined_img_s(3) > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, loop.model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("measured", "config", "shown"),
    [
        ({"timing": "pipelined"}, {"timing": "pipelined"}, "pipelined: one wait per --log-interval steps"),
        ({"timing": "per-step"}, {"timing": "per-step"}, "per-step: two waits a step"),
        ({}, {}, "per-step: two waits a step"),  # a record from before --timing: those were timed per-step
    ],
)
def test_the_report_says_which_timing_the_headline_is(measured, config, shown):
    from effbench.report.tables import summary_rows

    tally = {"steps": 4, "images": 8, "data_time_s": 0.1, "compute_time_s": 0.3, "time_s": 0.4, **measured}
    rows = dict(summary_rows(_rec(throughput_img_s=100.0, data={}, config=config, measured=tally)))
    assert rows["throughput timing"].startswith(shown)


# ------------------------------------------------------------------------------------------------
# N12 (issue 45): the SM clock over the measured window against its maximum, with NVML's reasons
# ------------------------------------------------------------------------------------------------
class ClockNVML(EnergyNVML):
    """EnergyNVML with an SM clock, its maximum and the clock-event reasons the test sets. pynvml.py:3674-3687:
    nvmlDeviceGetClockInfo and nvmlDeviceGetMaxClockInfo take (handle, NVML_CLOCK_SM = 1, :177) and return a
    c_uint's value, MHz; :4672-4677: nvmlDeviceGetCurrentClocksEventReasons returns a c_ulonglong's value, a bitmask."""

    NVML_CLOCK_SM = 1
    MAX_MHZ = 1980  # an H100 SXM's maximum SM clock

    def __init__(self) -> None:
        super().__init__()
        self.clock_mhz = self.MAX_MHZ
        self.reasons = 0

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.MAX_MHZ

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.reasons


def _clocked_summary(window_clocks: list[tuple[int, int]]) -> schema.Utilization:
    """The sampler's summary where rows before and after the window idle at 300 MHz, and the window's rows read
    `window_clocks` ((MHz, reasons) each), every row read through the sampler's own NVML probe."""
    import pynvml

    nvml = ClockNVML()
    idle = (300, pynvml.nvmlClocksEventReasonGpuIdle)
    with monitor.UtilizationSampler(interval_s=60, gpu_indices=[0], nvml=nvml) as mon:
        rows = []
        for t, (mhz, reasons) in zip((0.5, 1.5, 2.5, 3.5), [idle, *window_clocks, idle], strict=True):
            nvml.clock_mhz, nvml.reasons = mhz, reasons
            rows.append({"t_s": t, **mon._gpus[0].read()})
    mon._rows, mon._marks = rows, [(1.0, True, {0: 0.0}), (3.0, False, {0: 2.0})]  # rows 1.5 and 2.5 inside
    return mon.summary()


def test_the_reason_names_are_pynvmls_bits():
    import pynvml

    # every single-bit reason constant the pinned nvidia-ml-py defines (pynvml.py:2190-2199, 2215-2226) is named
    named = [v for k, v in vars(pynvml).items() if k.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason"))]
    bits = {v for v in named if isinstance(v, int) and v and not v & (v - 1)}  # None and All left out
    assert bits == set(monitor.CLOCK_EVENT_REASONS)
    both = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert monitor.clock_event_reasons(both) == ["SW power cap", "HW thermal slowdown"]
    board = pynvml.nvmlClocksThrottleReasonBoardLimit
    assert monitor.clock_event_reasons(0x1000 | board) == ["board limit", "bits 0x1000"]  # a newer driver's bit


def test_a_clock_held_down_over_the_measured_steps_is_named_beside_mfu_and_in_the_verdict():
    import pynvml

    from effbench.report.tables import observability_rows

    cap, hot = pynvml.nvmlClocksEventReasonSwPowerCap, pynvml.nvmlClocksEventReasonHwThermalSlowdown
    util = _clocked_summary([(1380, cap), (1420, cap | hot)])
    g = util.measured_window.gpus[0]
    assert g.sm_clock_mhz.mean == pytest.approx(1400.0) and g.sm_clock_max_mhz == 1980.0
    assert g.clock_event_reasons == ["SW power cap", "HW thermal slowdown"]
    out = _summ(_cuda_record(precision="bf16"), utilization=util, flops_image=1e9)
    share = f"{100 * 1400 / 1980:.0f}%"  # 71%: under 90% of the maximum
    note = out["clock_note"]
    assert "1400 MHz" in note and f"{share} of its 1980 MHz maximum" in note
    assert "SW power cap, HW thermal slowdown" in note
    assert note in out["verdict"]["evidence"] and "mfu" in out
    rows = dict(observability_rows(_rec(**out)))
    assert rows["GPU clock"] == note and list(rows).index("GPU clock") == list(rows).index("MFU") + 1
    # 1900 MHz is 96% of 1980: no note, though the idle rows outside the window sat at 300 MHz (15%)
    healthy = _summ(_cuda_record(precision="bf16"), utilization=_clocked_summary([(1900, 0), (1900, 0)]))
    assert "clock_note" not in healthy and "clock" not in healthy["verdict"]["evidence"]

"""The roofs' cache (measure/roofs.py): a cached roof stands for a run only when measured under the load the run's
device is under now (issue 47 item 9: roofs cached on an idle CPU held a loaded run's steps against 227.6 GFLOP/s
while 25.6 was measured then), a GPU's are cached only when NVML shows it alone and unthrottled, keyed by its UUID
and power limit, and measured once per node (issue 45 N6)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import types
from pathlib import Path

import pynvml
import pytest
import torch

from effbench import schema
from effbench.measure import roofs
from effbench.report import roofline_tables

CPU = torch.device("cpu")
MEASURED_AT = "2026-01-01T00:00:00+00:00"
T0 = dt.datetime.fromisoformat(MEASURED_AT).timestamp()
IDLE = roofs.cpu_conditions(0.1, 2)
LOADED = roofs.cpu_conditions(1.8, 2)


def _entry(conditions: schema.RoofConditions | None, at: str = MEASURED_AT) -> schema.Roofs:
    return schema.Roofs(device="cpu (test)", memory_gb_s=19.3, measured_at=at, conditions=conditions)


# --- the rules, pure ------------------------------------------------------------------------------------------------
def test_the_cpu_load_class_is_other_processes_share_of_the_cores():
    assert roofs.cpu_load_class(0.2, 2) == "idle" and roofs.cpu_load_class(0.5, 2) == "loaded"
    assert roofs.cpu_load_class(1.5, 64) == "idle" and roofs.cpu_load_class(16, 64) == "loaded"
    assert LOADED.detail == "other processes used 1.8 of 2 cores"


def test_an_idle_entry_is_used_by_an_idle_run_within_a_day_only():
    assert roofs.cache_decision(_entry(IDLE), IDLE, T0 + 3600) is None
    assert "over a day old" in roofs.cache_decision(_entry(IDLE), IDLE, T0 + 25 * 3600)
    assert "no cached roofs" in roofs.cache_decision(None, IDLE, T0)


def test_an_idle_entry_is_not_a_loaded_runs_roof():
    why = roofs.cache_decision(_entry(IDLE), LOADED, T0 + 60)
    assert why == "the cached roofs were measured idle, the device is loaded now"


def test_an_entry_that_does_not_say_its_load_is_measured_over():
    assert "under which load" in roofs.cache_decision(_entry(None), IDLE, T0 + 60)


def test_only_an_idle_measurement_is_cached():
    assert roofs.cache_refusal(IDLE, IDLE) is None and roofs.cache_refusal(IDLE, None) is None
    assert roofs.cache_refusal(LOADED, IDLE) == "not cached: the device was loaded before the microbenchmarks"
    assert roofs.cache_refusal(IDLE, LOADED) == "not cached: the device was loaded during the microbenchmarks"


def test_a_gpus_key_holds_its_uuid_and_power_limit():
    base = dict(host="h", device="NVIDIA H100 80GB HBM3", torch_version="2.9", threads=1, precisions=["bf16"])
    a = roofs.cache_key(**base, gpu_uuid="GPU-a", power_limit_w=700.0)
    assert a.endswith("| GPU-a | 700 W")
    assert a != roofs.cache_key(**base, gpu_uuid="GPU-b", power_limit_w=700.0)
    assert a != roofs.cache_key(**base, gpu_uuid="GPU-a", power_limit_w=500.0)


# --- a GPU's conditions from a fake NVML --------------------------------------------------------------------------
class RoofNVML:
    """One GPU as pynvml shows it (the pinned nvidia-ml-py's names): nvmlDeviceGetHandleByUUID (pynvml.py:3588 reads
    the UUID back), nvmlDeviceGetEnforcedPowerLimit (:3955, mW), nvmlDeviceGetComputeRunningProcesses (:4228,
    objects with .pid and .usedGpuMemory), nvmlDeviceGetCurrentClocksEventReasons (:4672, a bitmask)."""

    UUID = "GPU-11111111-2222-3333-4444-555555555555"

    def __init__(self, pids=(), reasons=0, limit_mw=700_000) -> None:
        self.pids, self.reasons, self.limit_mw = list(pids), reasons, limit_mw

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        if uuid != self.UUID:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self.limit_mw

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.pids]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.reasons


def test_a_gpu_alone_and_unthrottled_is_idle_with_its_power_limit():
    got = roofs.read_gpu(RoofNVML(pids=[100]), RoofNVML.UUID.removeprefix("GPU-"), own_pid=100)
    assert got.load_class == "idle" and got.power_limit_w == 700.0 and got.other_processes == 0
    assert got.detail == "no other compute process, no clock-event reason"
    idle_clocks = pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonSwPowerCap
    assert roofs.read_gpu(RoofNVML(pids=[100], reasons=idle_clocks), RoofNVML.UUID, own_pid=100).load_class == "idle"


def test_another_compute_process_makes_a_gpu_loaded_and_its_roofs_uncached():
    got = roofs.read_gpu(RoofNVML(pids=[100, 200]), RoofNVML.UUID, own_pid=100)
    assert got.load_class == "loaded" and got.other_processes == 1 and "1 other compute process" in got.detail
    assert roofs.cache_refusal(got) is not None
    # inside a PID namespace NVML lists host pids: this process is one of the two it does not recognise
    assert roofs.read_gpu(RoofNVML(pids=[7001, 7002]), RoofNVML.UUID, own_pid=100).other_processes == 1
    assert roofs.read_gpu(RoofNVML(pids=[7001]), RoofNVML.UUID, own_pid=100).load_class == "idle"


@pytest.mark.parametrize(
    "bit, name",
    [
        (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "HW thermal slowdown"),
        (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "SW thermal slowdown"),
        (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "HW power brake slowdown"),
        (pynvml.nvmlClocksEventReasonHwSlowdown, "HW slowdown"),
        (pynvml.nvmlClocksEventReasonSyncBoost, "sync boost"),
    ],
)
def test_a_throttled_gpu_is_loaded_with_the_reason_named(bit, name):
    got = roofs.read_gpu(RoofNVML(pids=[100], reasons=bit), RoofNVML.UUID, own_pid=100)
    assert got.load_class == "loaded" and got.clock_event_reasons == [name] and name in got.detail


def test_a_gpu_nvml_cannot_read_is_never_cached():
    class NoProcesses(RoofNVML):
        def nvmlDeviceGetComputeRunningProcesses(self, h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    assert roofs.read_gpu(NoProcesses(), RoofNVML.UUID, own_pid=1).load_class == "loaded"
    assert roofs.read_gpu(RoofNVML(), "GPU-not-this-one", own_pid=1).load_class == "loaded"


# --- machine_roofs: the cache as a run meets it -------------------------------------------------------------------
def _run(path: Path, calls: list[str], load: schema.RoofConditions, *, hours_later: float = 1.0, environ=None, during=None):  # fmt: skip
    def measure(device, *, precisions, sm_count=None):
        calls.append("measured")
        return schema.Roofs(
            device="cpu (test)", threads=torch.get_num_threads(), memory_gb_s=19.3 if load is IDLE else 3.3,
            compute=[schema.ComputeRoof(precision=p, tflops=0.2276) for p in precisions],
            measured_at=dt.datetime.fromtimestamp(T0, dt.timezone.utc).isoformat(timespec="seconds"),
        )  # fmt: skip

    return roofs.machine_roofs(
        CPU, precisions=["fp32"], path=path, measure=measure, conditions=lambda _d: load,
        watch=lambda _d, run: (run(), during), now=lambda: T0 + 3600 * hours_later, environ=environ or {},
    )  # fmt: skip


def test_a_loaded_run_measures_afresh_beside_an_idle_cache_and_says_why(tmp_path):
    path, calls = tmp_path / "roofs.json", []
    _run(path, calls, IDLE)
    hit = _run(path, calls, IDLE, hours_later=3)
    assert calls == ["measured"] and hit.cached is True and hit.cache_age_s == pytest.approx(3 * 3600)
    assert hit.conditions.load_class == "idle"
    loaded = _run(path, calls, LOADED, hours_later=3)
    assert calls == ["measured"] * 2 and loaded.cached is False and loaded.memory_gb_s == 3.3
    assert loaded.why_measured == "the cached roofs were measured idle, the device is loaded now"
    assert loaded.cache_note.startswith("not cached") and loaded.conditions.load_class == "loaded"
    assert json.loads(path.read_text())["roofs"][hit.cache_key]["memory_gb_s"] == 19.3  # the idle entry stays


def test_a_load_that_arrives_during_the_measurement_keeps_it_out_of_the_cache(tmp_path):
    path, calls = tmp_path / "roofs.json", []
    got = _run(path, calls, IDLE, during=LOADED)
    assert got.cache_note == "not cached: the device was loaded during the microbenchmarks"
    assert got.conditions == LOADED and not path.exists()  # the reading that kept it out


def test_the_report_says_cached_with_age_and_load_or_measured_now_and_why(tmp_path):
    path, calls = tmp_path / "roofs.json", []
    _run(path, calls, IDLE)
    line = roofline_tables.roofs_source_line(_run(path, calls, IDLE, hours_later=3))
    assert line == "roofs cached: measured 3.0 h before this run, idle (other processes used 0.1 of 2 cores)"
    line = roofline_tables.roofs_source_line(_run(path, calls, LOADED, hours_later=3))
    assert line.startswith("roofs measured now, loaded (other processes used 1.8 of 2 cores); not from the cache: "
                           "the cached roofs were measured idle, the device is loaded now; not cached: the device was loaded before")  # fmt: skip
    assert roofline_tables.roofs_source_line(schema.Roofs(device="cpu", measured_at=MEASURED_AT)) is None  # older


def test_the_node_measures_once_local_rank_0_hands_its_roofs_to_the_others(tmp_path):
    path, calls = tmp_path / "roofs.json", []
    env = {"LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "job-1"}
    got: dict[int, schema.Roofs] = {}

    def rank(r: int) -> None:
        got[r] = _run(path, calls, LOADED, environ={**env, "LOCAL_RANK": str(r)})

    others = [threading.Thread(target=rank, args=(r,)) for r in (1, 2, 3)]
    for t in others:  # the others first: they wait for local rank 0 rather than measure
        t.start()
    rank(0)
    for t in others:
        t.join(timeout=30)
    assert calls == ["measured"], "each rank measured"
    assert all(got[r].node_shared for r in (1, 2, 3)) and got[0].node_shared is None
    assert {got[r].memory_gb_s for r in range(4)} == {3.3}


def test_local_rank_0s_failure_reaches_the_others_at_once(tmp_path):
    path = tmp_path / "roofs.json"
    env = {"LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job-2"}

    def broken(device, *, precisions, sm_count=None):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.cuda.OutOfMemoryError):
        roofs.machine_roofs(CPU, precisions=["fp32"], path=path, measure=broken, conditions=lambda _d: IDLE,
                            watch=lambda _d, run: (run(), None), environ={**env, "LOCAL_RANK": "0"})  # fmt: skip
    with pytest.raises(RuntimeError, match="local rank 0 could not measure the roofs .OutOfMemoryError"):
        _run(path, [], IDLE, environ={**env, "LOCAL_RANK": "1"})


def test_a_lone_process_hands_nothing_and_waits_for_no_one(tmp_path):
    path, calls = tmp_path / "roofs.json", []
    _run(path, calls, IDLE, environ={"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    assert calls == ["measured"] and json.loads(path.read_text())["handoff"] == {}


def test_a_gpus_roofs_give_their_buffers_back_before_the_profiling_pass(monkeypatch):
    # N7: the copy roof's two 1 GiB buffers stayed in torch's cache, reserved, through the profiling pass that
    # followed, where NCCL, cuDNN's workspaces and the profiler's own buffers allocate outside that cache.
    import torch

    calls: list[str] = []
    monkeypatch.setattr(roofs, "device_label", lambda device: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(roofs, "matmul_tflops", lambda device, p: (calls.append(f"matmul {p}"), (500.0, "mm"))[1])
    monkeypatch.setattr(roofs, "copy_gb_s", lambda device: (calls.append("copy"), (3000.0, "copy"))[1])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    got = roofs.measure_roofs(torch.device("cuda", 0), precisions=["bf16", "fp32"])
    assert calls == ["matmul bf16", "matmul fp32", "copy", "empty_cache"]
    assert got.memory_gb_s == 3000.0
    calls.clear()
    roofs.measure_roofs(torch.device("cpu"), precisions=["fp32"])  # the CPU has no device cache to empty
    assert "empty_cache" not in calls

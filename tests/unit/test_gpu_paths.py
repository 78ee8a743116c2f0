"""GPU code paths checked on the CPU against the pinned torch 2.14.1 / pynvml sources (issue 11, part 2).

Each test replays what the library does (its source line is cited) rather than mocking the code under test.
"""

from __future__ import annotations

from effbench.results import record_of

import inspect
import threading
import types
from pathlib import Path

import pytest
import torch
import typedrec

from effbench import schema
from effbench.run.data_parallel import ReplicaAutocast


class _DtypeProbe(torch.nn.Module):
    """A Linear that records the dtype its output really had (what autocast made of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        self.seen.append(out.dtype)
        return out


def _replica_thread_forward(module: torch.nn.Module, x: torch.Tensor, device_type: str) -> None:
    """What DataParallel does per replica: torch/nn/parallel/parallel_apply.py `_worker` reads
    `torch.is_autocast_enabled()` in the caller and re-enters `torch.amp.autocast(device_type,
    enabled=autocast_enabled)` in a fresh thread -- the caller's dtype is not passed on."""
    enabled = torch.is_autocast_enabled(device_type)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with torch.amp.autocast(device_type, enabled=enabled):
                module(x)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def test_parallel_apply_still_reenters_autocast_without_the_dtype():
    """The assumption the fix rests on, read from the pinned library (fails if torch changes it)."""
    from torch.nn.parallel.parallel_apply import parallel_apply

    src = inspect.getsource(parallel_apply)
    assert "torch.amp.autocast(device_type, enabled=autocast_enabled)" in src


def test_dp_replica_thread_loses_the_dtype_without_the_wrapper():
    # CPU autocast's default dtype is bfloat16 (torch.get_autocast_dtype("cpu")), so run in float16 to
    # tell the caller's dtype from the thread default (on CUDA the same happens to bf16 -> float16).
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    bare = _DtypeProbe()
    with torch.autocast("cpu", dtype=torch.float16):
        _replica_thread_forward(bare, torch.randn(2, 4), "cpu")
    assert bare.seen == [torch.bfloat16]  # the defect: not the run's float16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dp_replica_runs_in_the_runs_dtype(dtype):
    probe = _DtypeProbe()
    wrapped = ReplicaAutocast(probe, "cpu", dtype)
    with torch.autocast("cpu", dtype=dtype):
        _replica_thread_forward(wrapped, torch.randn(2, 4), "cpu")
    assert probe.seen == [dtype]


def test_dp_replica_fp32_stays_fp32_inside_an_outer_autocast():
    probe = _DtypeProbe()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _replica_thread_forward(ReplicaAutocast(probe, "cpu", None), torch.randn(2, 4), "cpu")
    assert probe.seen == [torch.float32]


def test_dp_wrapper_replicates_as_dataparallel_does():
    """DataParallel replicates the outermost module (torch/nn/parallel/replicate.py copies `__dict__`),
    so the wrapper's device type and dtype must travel with each replica."""
    from torch.nn.parallel.replicate import _replicatable_module

    wrapped = ReplicaAutocast(_DtypeProbe(), "cuda", torch.bfloat16)
    assert _replicatable_module(wrapped)
    clone = wrapped._replicate_for_data_parallel()
    assert (clone.device_type, clone.dtype) == ("cuda", torch.bfloat16)


def test_dp_replicas_draw_dropout_masks_from_generators_seeded_apart(monkeypatch):
    """torch.manual_seed leaves every device generator alike, so DataParallel's replicas dropped the same
    units; CPU generators stand in for torch.cuda.default_generators (one per device, read at call time)."""
    from effbench.run.data_parallel import seed_replica_generators
    from effbench.run.rank import rank_seed

    generators = tuple(torch.Generator().manual_seed(1234) for _ in range(3))  # as after torch.manual_seed
    monkeypatch.setattr(torch.cuda, "default_generators", generators)
    alike = [torch.bernoulli(torch.full((256,), 0.5), generator=g) for g in generators]
    assert torch.equal(alike[0], alike[1])  # the bug: the same masks on every replica

    seed_replica_generators({i: rank_seed(7, i) for i in range(3)})
    assert [g.initial_seed() for g in generators] == [rank_seed(7, i) for i in range(3)]
    masks = [torch.bernoulli(torch.full((256,), 0.5), generator=g) for g in generators]
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    assert len({rank_seed(7, i) for i in range(8)}) == 8


@pytest.mark.parametrize(
    "run_dtype, outer, expected",
    [
        (torch.float16, torch.float16, torch.float16),  # the thread default on the CPU is bf16: tells them apart
        (None, torch.bfloat16, torch.float32),  # fp32 stays fp32 in the replica whatever the thread default
    ],
)
def test_data_parallel_gives_its_replicas_the_runs_dtype(monkeypatch, run_dtype, outer, expected):
    """Through data_parallel(), what the runner calls (run/rank.py `_with_model`), not the wrapper alone."""
    import importlib
    import types

    from effbench.run.data_parallel import data_parallel

    # the module, not torch.nn.parallel's function of the same name (torch/nn/parallel/__init__.py imports it)
    torch_dp = importlib.import_module("torch.nn.parallel.data_parallel")

    # nn.DataParallel.__init__: `device_type = _get_available_device_type()`; None -> `self.module = module`,
    # no device ids, no replicas (torch/nn/parallel/data_parallel.py). Forced, so a GPU machine runs it alike.
    monkeypatch.setattr(torch_dp, "_get_available_device_type", lambda: None)
    probe = _DtypeProbe()
    rt = types.SimpleNamespace(device=torch.device("cpu"), autocast_dtype=run_dtype)
    dp = data_parallel(probe, rt, device_ids=[0, 1])
    assert isinstance(dp, torch.nn.DataParallel)
    # each replica is replicate.py's `module._replicate_for_data_parallel()` of DataParallel's `.module`, run
    # by parallel_apply's `_worker` in its own thread
    replica = dp.module._replicate_for_data_parallel()
    with torch.autocast("cpu", dtype=outer):
        _replica_thread_forward(replica, torch.randn(2, 4), "cpu")
    assert probe.seen == [expected]


@pytest.mark.parametrize("extra", [[], ["--gpus", "2"]])
def test_compile_with_dp_is_refused_in_one_line(capsys, extra):
    from clitools import invoke

    code, out, err = invoke(["run", "--device", "cuda", "--compile", "--strategy", "dp", *extra], capsys)
    assert code == 2 and err.startswith("error: --compile") and "--strategy ddp" in err
    assert err.strip().count("\n") == 0 and "Traceback" not in out + err


def test_compile_with_dp_refused_by_the_config_itself():
    from effbench.config import RunConfig
    from effbench.errors import EffbenchError

    with pytest.raises(EffbenchError) as info:
        RunConfig(device="cuda", compile=True, strategy="dp")
    assert info.value.option == "--compile"
    assert RunConfig(device="cuda", compile=True, strategy="ddp").compile  # the other strategy stays allowed


# --- item 6 / 3: CUDA -> NVML by UUID, every GPU of the job ----------------------------------------------


class FakeNVMLNotFound(Exception):
    """pynvml raises NVMLError_NotFound from nvmlDeviceGetHandleByUUID for a UUID it does not know."""


class UuidNVML:
    """A node of GPUs in NVML's PCI order; follows pynvml's signatures: nvmlDeviceGetHandleByUUID(uuid: str)
    takes NVML's spelling "GPU-<uuid>" / "MIG-<uuid>" (pynvml.py: c_char_p(uuid) after convertStrBytes),
    nvmlDeviceGetPowerUsage(handle) answers mW. Each GPU draws a different power, so a reading names its GPU."""

    def __init__(self, uuids: list[str]) -> None:
        self.uuids = uuids  # NVML order
        self.asked: list[str] = []

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        assert isinstance(uuid, str)
        self.asked.append(uuid)
        if uuid not in self.uuids:
            raise FakeNVMLNotFound("Not Found")
        return self.uuids.index(uuid)

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUUID(self, h: int) -> str:  # pynvml: str after convertStrBytes, NVML's own spelling
        return self.uuids[h]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 100_000 * (h + 1)  # GPU at NVML index h draws (h+1) * 100 W

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return 1_000_000 * (h + 1)


U = ["aaaa0000-0000-0000-0000-000000000000", "bbbb0000-0000-0000-0000-000000000000",
     "cccc0000-0000-0000-0000-000000000000", "dddd0000-0000-0000-0000-000000000000"]  # fmt: skip


def _power_by_column(summary) -> dict[int, float]:
    return {g.index: g.power_w.mean for g in summary.gpus}


def test_sampler_finds_each_cuda_device_by_uuid_not_by_position():
    from effbench.measure.monitor import UtilizationSampler

    # CUDA_VISIBLE_DEVICES=GPU-cccc...,GPU-aaaa... : torch's cuda:0 is NVML's index 2, cuda:1 NVML's 0.
    nvml = UuidNVML(["GPU-" + u for u in U])
    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[2], 1: U[0]}, nvml=nvml) as mon:
        pass
    s = mon.summary()
    assert _power_by_column(s) == {0: pytest.approx(300.0), 1: pytest.approx(100.0)}
    assert [g.uuid for g in s.gpus] == [U[2], U[0]] and "gpus_unmapped" not in s.model_dump(exclude_unset=True)
    # what NVML says of the handles it sampled (selftest's UUID check compares this with torch's)
    assert [g.nvml_uuid for g in s.gpus] == ["GPU-" + U[2], "GPU-" + U[0]]


def test_mig_uuids_map_through_the_mig_prefix():
    from effbench.measure.monitor import UtilizationSampler

    nvml = UuidNVML(["GPU-" + U[0], "MIG-" + U[3]])
    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[3]}, nvml=nvml) as mon:
        pass
    assert [(g.index, g.nvml_uuid) for g in mon.summary().gpus] == [(0, "MIG-" + U[3])]
    assert nvml.asked == ["GPU-" + U[3], "MIG-" + U[3]]


class MigNVMLNotSupported(UuidNVML):
    """NVML measures power per physical GPU: for a MIG device handle nvmlDeviceGetPowerUsage and
    nvmlDeviceGetTotalEnergyConsumption return NVML_ERROR_NOT_SUPPORTED (NVML API reference; not in the pinned
    sources), which pynvml raises as NVMLError(ret) -> NVMLError_NotSupported (pynvml.py `_nvmlCheckReturn`)."""

    def _mig(self, h: int) -> bool:
        return self.uuids[h].startswith("MIG-")

    def nvmlDeviceIsMigDeviceHandle(self, h: int):  # pynvml.py: returns the c_uint it filled, not its value
        import ctypes

        return ctypes.c_uint(int(self._mig(h)))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        import pynvml

        if self._mig(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return super().nvmlDeviceGetPowerUsage(h)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        import pynvml

        if self._mig(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return super().nvmlDeviceGetTotalEnergyConsumption(h)


@pytest.mark.parametrize("driver", [MigNVMLNotSupported, UuidNVML])  # UuidNVML: answers with the GPU's readings
def test_a_mig_instance_has_no_power_or_energy_never_zero_or_the_whole_gpus(driver):
    from effbench.measure.monitor import UtilizationSampler, energy_j

    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[3]}, nvml=driver(["GPU-" + U[0], "MIG-" + U[3]])) as mon:
        pass
    s = mon.summary()
    (gpu,) = s.model_dump(exclude_unset=True)["gpus"]
    assert "power_w" not in gpu and "energy_j" not in gpu
    assert not any(k.endswith(("_power_w", "_energy_j")) for row in mon.samples for k in row)
    assert energy_j(s) is None


def test_an_unknown_uuid_is_reported_and_voids_energy_never_another_gpu():
    from effbench.measure.monitor import UtilizationSampler, energy_j

    nvml = UuidNVML(["GPU-" + U[0], "GPU-" + U[1]])
    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[0], 1: U[2]}, nvml=nvml) as mon:
        pass
    s = mon.summary()
    assert [g.index for g in s.gpus] == [0]
    assert s.gpus_unmapped[0].index == 1 and U[2] in s.gpus_unmapped[0].reason
    assert energy_j(s) is None  # one GPU's energy is not the job's


class NVMLThatWillNotStart(UuidNVML):
    """pynvml.nvmlInit -> nvmlInitWithFlags -> _nvmlCheckReturn(ret) raises NVMLError(ret), which
    NVMLError.__new__ turns into the code's subclass (pynvml.py): here NVMLError_DriverNotLoaded."""

    def nvmlInit(self) -> None:
        import pynvml

        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


def test_a_rank_whose_nvml_fails_to_start_voids_the_jobs_energy():
    from effbench.measure.monitor import UtilizationSampler, energy_j
    from effbench.measure.observe import merge_utilization

    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[0]}, nvml=UuidNVML(["GPU-" + U[0]])) as rank0:
        pass
    with UtilizationSampler(interval_s=10, gpu_uuids={1: U[1]}, nvml=NVMLThatWillNotStart(["GPU-" + U[1]])) as rank1:
        pass
    s1 = rank1.summary()
    assert "gpus" not in s1.model_dump(exclude_unset=True)  # it sampled nothing...
    (unmapped,) = s1.gpus_unmapped  # ...and says which GPU of the job it lost, and why
    assert unmapped.index == 1 and unmapped.uuid == U[1] and "Driver Not Loaded" in unmapped.reason
    assert energy_j(rank0.summary()) == 0.0  # rank 0 alone has a reading (the fake's counter stands still)
    assert energy_j(merge_utilization([rank0.summary(), s1])) is None  # not rank 0's 0 J as the job's


def test_without_pynvml_every_gpu_of_the_job_is_unmapped(monkeypatch):
    from effbench.measure import monitor

    monkeypatch.setattr(monitor, "_load_nvml", lambda: None)  # `import pynvml` raised ImportError
    with monitor.UtilizationSampler(interval_s=10, gpu_uuids={0: U[0], 1: U[1]}) as mon:
        pass
    s = mon.summary()
    assert [(u.index, u.uuid) for u in s.gpus_unmapped] == [(0, U[0]), (1, U[1])]
    assert monitor.energy_j(s) is None
    # a sampler that was never asked for GPUs (a CPU run) has nothing unmapped
    with monitor.UtilizationSampler(interval_s=10, gpu_indices=[]) as cpu:
        pass
    assert "gpus_unmapped" not in cpu.summary().model_dump(exclude_unset=True)


def test_nvml_uuid_spellings():
    from effbench.system.hardware import nvml_uuid_candidates

    assert nvml_uuid_candidates(U[0]) == ("GPU-" + U[0], "MIG-" + U[0])
    assert nvml_uuid_candidates("MIG-" + U[0]) == ("MIG-" + U[0],)


@pytest.mark.parametrize(
    "mode, nproc, local_rank, expected",
    [("dp", 4, 0, [0, 1, 2, 3]), ("torchrun", 4, 2, [2]), ("inprocess", 1, 0, [0])],
)
def test_job_gpus_cover_every_dataparallel_device(mode, nproc, local_rank, expected):
    from effbench.measure import observe

    assert observe.job_cuda_indices("cuda", mode, nproc, local_rank) == expected
    assert observe.job_cuda_indices("cpu", mode, nproc, local_rank) == []


def test_sampler_for_samples_all_dp_gpus_by_uuid(monkeypatch):
    from effbench.measure import monitor, observe
    from effbench.system import hardware

    nvml = UuidNVML(["GPU-" + u for u in U])
    monkeypatch.setattr(monitor, "_load_nvml", lambda: nvml)
    # torch/_C/__init__.pyi: _CudaDeviceProperties.uuid prints bare; here cuda:i is the node's i-th from the end
    monkeypatch.setattr(hardware, "cuda_device_uuid", lambda i: U[3 - i])
    with observe.sampler_for(observe.job_cuda_indices("cuda", "dp", 2, 0), interval_s=10) as mon:
        pass
    s = mon.summary()
    assert _power_by_column(s) == {0: pytest.approx(400.0), 1: pytest.approx(300.0)}
    assert monitor.energy_j(s) is not None


def test_summary_memory_and_energy_cover_every_gpu_of_a_dp_run():
    record = {"device": "2 x cuda:0 (x) (DataParallel)", "strategy": "dp", "devices": 2, "precision": "bf16",
              "launch": {"mode": "dp", "device_type": "cuda"}, "env": {}, "epochs": [{"images": 1000}],
              "measured": {"images": 1000}}  # fmt: skip
    gpus = [{"index": 0, "energy_j": 50.0}, {"index": 1, "energy_j": 150.0}]
    util = {"host": {}, "gpus": gpus, "measured_window": {"host": {}, "gpus": gpus}}
    mem = [
        {"cuda_index": 0, "peak_mem_allocated_gib": 3.0, "peak_mem_reserved_gib": 4.0, "mem_total_gib": 80.0},
        {"cuda_index": 1, "peak_mem_allocated_gib": 5.0, "peak_mem_reserved_gib": 6.0, "mem_total_gib": 80.0},
    ]
    out = typedrec.summarize(record, flops_image=None, utilization=util, memory=mem, profile_info=None,
                             cpu_quota_cores=None, workers_per_process=0, processes_per_node=1,
                             tf32_enabled=False)  # fmt: skip
    assert out["energy_j"] == 200.0 and out["images_per_j"] == pytest.approx(1000 / 200.0)
    assert out["peak_mem_gib"] == 5.0 and out["peak_mem_reserved_gib"] == 6.0


def _two_rank_record(*, failed: bool) -> dict:
    """The final record of a 2-GPU DDP job on rank 0, through the runner's own `_measured` and record.finish:
    each rank's sampler saw its own GPU (rank 0: 100 J, rank 1: 120 J); every rank trained 500 images."""
    import types

    from effbench.run import rank
    from effbench.run import record as rec
    from effbench.run.phases import Phase

    rows = [schema.Rank(rank=r, local_rank=r, host="n1", device=f"cuda:{r}", images=500, steps=5, data_time_s=0.1,
                        compute_time_s=0.9, time_s=1.0, throughput_img_s=500.0) for r in (0, 1)]  # fmt: skip
    utils = [typedrec.utilization({"host": {}, "gpus": [{"index": r, "uuid": U[r], "energy_j": e}],
                                   "measured_window": {"host": {}, "gpus": [{"index": r, "energy_j": e}]}})
             for r, e in ((0, 100.0), (1, 120.0))]  # fmt: skip
    m = rank.Measurement(sampler=types.SimpleNamespace(summary=lambda: utils[0]), gpus=[])
    m.epochs, m.epoch_ranks = [schema.Epoch(epoch=1, images=1000)], rows  # the last epoch's gather: every rank's rows
    if failed:  # a peer died: no final gather (run/rank.py `_measure` keeps the failure)
        m.failure = RuntimeError("NCCL communicator was aborted")
        m.outcome = rec.outcome_of(m.failure, received=[], phase="epochs")
    else:
        m.gathered = [{"row": rows[r], "util": utils[r], "mem": [], "steps": []} for r in (0, 1)]
    prep = types.SimpleNamespace(rt=types.SimpleNamespace(device=torch.device("cuda", 0)),
                                 data=types.SimpleNamespace(stats=lambda: {}))  # fmt: skip
    dist = types.SimpleNamespace(rank=0, local_rank=0, world_size=2)
    opened = {**_launch_record("torchrun", "cuda", 2, "NVIDIA A100-SXM4-80GB"), "schema_version": 1, "status": "running",
              "data": {}}  # fmt: skip
    conditions = rec.Conditions(repeats=None, compile=False, data_only=False, flops_per_image=None,
                                flops_forward_per_image=None, flops_error=None, workers_per_process=0,
                                processes_per_node=2, tf32_enabled=False, cpu_quota_cores=None, run_dir=None)  # fmt: skip
    phase = Phase([])
    phase.enter("report")  # where the runner makes the record
    return rec.finish(opened, rank._measured(prep, dist, m, phase), conditions).model_dump(exclude_unset=True)


def test_a_failed_ddp_run_reports_no_energy_from_rank_0s_gpu_alone():
    ok = _two_rank_record(failed=False)
    assert ok["energy_j"] == 100.0 + 120.0 and ok["images_per_j"] == pytest.approx(1000 / 220.0)
    failed = _two_rank_record(failed=True)
    assert failed["status"] == "failed" and failed["measured"]["images"] == 1000  # every rank's images...
    assert failed["utilization"]["gpus"] == [{"index": 0, "uuid": U[0], "energy_j": 100.0}]  # ...rank 0's GPU
    # 1000 images / 100 J would be twice as good as the job was: not measured, never a partial sum
    assert "energy_j" not in failed and "images_per_j" not in failed
    assert failed["energy_note"] == "not measured on every GPU: 1 of the job's 2 sampled"
    from effbench.report.tables import observability_rows

    assert ("GPU energy (J)", "- (not measured on every GPU: 1 of the job's 2 sampled)") in observability_rows(
        record_of({"schema_version": 1, **failed})
    )


# --- items 5 and 9: out of memory stays out of memory ------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",  # cuDNN 8's AT_CUDNN_CHECK: "cuDNN error: " + cudnnGetErrorString
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",  # cuDNN 9's name for it
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",  # TORCH_CUDABLAS_CHECK
    ],
)
def test_cudnn_and_cublas_allocation_failures_are_oom(message):
    from effbench.run import faults

    assert faults.is_out_of_memory(RuntimeError(message))
    assert not faults.is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"))
    assert not faults.is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling x"))


def test_library_status_names_are_torchs_own():
    """The markers are the status names the pinned libtorch_cuda prints (strings of the shared object)."""
    from pathlib import Path

    from effbench.run import faults

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cuda.so"
    if not lib.exists():
        pytest.skip("CPU-only torch build: no libtorch_cuda.so to read")
    blob = lib.read_bytes()
    assert b"cuDNN error: " in blob
    for marker in faults._LIBRARY_OOM_MARKERS:
        if marker.startswith("CUBLAS"):
            assert marker.encode() in blob


def _pinned_cudnn():
    """The libcudnn torch's wheel ships (nvidia-cudnn), loaded without a GPU: cudnnGetErrorString needs none."""
    import ctypes
    import glob

    found = sorted(glob.glob(str(Path(torch.__file__).parents[1] / "nvidia" / "cudnn" / "lib" / "libcudnn.so.*")))
    if not found:
        pytest.skip("no libcudnn beside torch (a CPU-only build)")
    lib = ctypes.CDLL(found[0])
    lib.cudnnGetErrorString.restype = ctypes.c_char_p
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    return lib


def test_cudnns_own_allocation_failure_messages_are_oom():
    """The status strings come from the pinned cuDNN itself (cudnnGetErrorString), not from a message written
    here: cuDNN 9 says CUDNN_STATUS_INTERNAL_ERROR_{HOST,DEVICE}_ALLOCATION_FAILED (4003, 4004 in
    cudnn_graph_v9.h), which the cuDNN 8 marker CUDNN_STATUS_ALLOC_FAILED alone did not match."""
    from effbench.run import faults

    lib = _pinned_cudnn()
    if lib.cudnnGetVersion() < 90000:
        pytest.skip("cuDNN 8 numbers its statuses differently")
    host, device = (lib.cudnnGetErrorString(code).decode() for code in (4003, 4004))
    assert "ALLOCATION_FAILED" in host and "ALLOCATION_FAILED" in device  # the codes are the ones we think
    for status in (host, device):
        assert faults.is_out_of_memory(RuntimeError(f"cuDNN error: {status}"))
    for not_memory in (2000, 3000, 4000, 5000):  # BAD_PARAM, NOT_SUPPORTED, INTERNAL_ERROR, EXECUTION_FAILED
        assert not faults.is_out_of_memory(RuntimeError(f"cuDNN error: {lib.cudnnGetErrorString(not_memory).decode()}"))


def _jpeg_bytes() -> torch.Tensor:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "JPEG")
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def test_gpu_decode_out_of_memory_is_raised_not_marked_corrupt(monkeypatch):
    import torchcodec.decoders

    from effbench.data.fast_images import decode_on_device

    # torch.OutOfMemoryError (a RuntimeError subclass: torch.OutOfMemoryError.__mro__) from the decode; the
    # messages TorchCodec and nvJPEG raise instead are in tests/unit/test_decode.py
    def oom(*_a, **_k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(torchcodec.decoders, "decode_jpeg", oom)
    with pytest.raises(torch.OutOfMemoryError):
        decode_on_device([_jpeg_bytes(), _jpeg_bytes()], 8, torch.device("cpu"))


def test_gpu_decode_still_marks_undecodable_files_bad():
    from effbench.data.fast_images import decode_on_device

    good, bad = _jpeg_bytes(), torch.frombuffer(bytearray(b"\xff\xd8\xff" + b"\x00" * 40), dtype=torch.uint8)
    batch, bad_positions = decode_on_device([good, bad], 8, torch.device("cpu"))
    assert bad_positions == [1] and tuple(batch.shape) == (1, 3, 8, 8)


# --- item 4: TF32 peaks only where the device has TF32 ---------------------------------------------------


def _fp32_cuda_record(name: str, capability: str) -> dict:
    return {"device": "cuda:0 (x)", "strategy": "single", "devices": 1, "precision": "fp32",
            "launch": {"mode": "inprocess", "device_type": "cuda"}, "throughput_img_s": 1000.0, "epochs": [],
            "env": {"gpus": [{"name": name, "capability": capability}]}}  # fmt: skip


def _summary(record: dict) -> dict:
    return typedrec.summarize(record, flops_image=1e9, utilization=None, memory=[], profile_info=None,
                              cpu_quota_cores=None, workers_per_process=0, processes_per_node=1,
                              tf32_enabled=True)  # fmt: skip


def test_fp32_on_a_t4_gets_the_fp32_peak_not_none():
    # torch's default cudnn.allow_tf32 = True, but sm_75 has no TF32: T4's datasheet FP32 8.1 TFLOP/s
    out = _summary(_fp32_cuda_record("Tesla T4", "7.5"))
    assert out["mfu_peak_tflops_per_device"] == 8.1
    assert out["mfu"] == pytest.approx(1e9 * 1000.0 / 8.1e12)


def test_fp32_on_an_a100_gets_the_tf32_peak():
    out = _summary(_fp32_cuda_record("NVIDIA A100-SXM4-80GB", "8.0"))
    assert out["mfu_peak_tflops_per_device"] == 156.0  # A100 datasheet: TF32 156 dense


def _launch_record(mode: str, device_type: str, nproc: int, gpu: str) -> dict:
    """The record's launch keys as the runner writes them (run/folder.py `launch_facts`), on one A100 node."""
    import types

    from effbench.launch.plan import LaunchPlan
    from effbench.run import folder

    plan = LaunchPlan(mode, device_type, nproc, 1, 8)
    name = "cpu" if device_type == "cpu" else f"cuda:0 ({gpu})"
    rt = types.SimpleNamespace(device_name=name, precision="bf16")
    facts = folder.launch_facts(plan, types.SimpleNamespace(world_size=plan.world_size), rt, 64)
    return {**facts, "throughput_img_s": 2000.0, "epochs": [], "env": {"gpus": [{"name": gpu, "capability": "8.0"}]}}


def test_a_one_gpu_dataparallel_run_gets_its_mfu():
    # `--strategy dp --gpus 1` (the first member of `--gpus 1,2,4 --strategy dp`): its device label does not
    # start with "cuda" and its strategy is "single", which read it as a CPU run with no MFU
    record = _launch_record("dp", "cuda", 1, "NVIDIA A100-SXM4-80GB")
    assert record["device"].startswith("1 x cuda:0") and record["strategy"] == "single"
    out = _summary(record)
    # A100 datasheet: 312 TFLOP/s dense bf16 per GPU; 1 GFLOP per image at 2000 img/s on 1 GPU
    assert out["mfu_peak_tflops_per_device"] == 312.0
    assert out["mfu"] == pytest.approx(1e9 * 2000.0 / (312.0e12 * 1))


def test_a_cpu_run_on_a_gpu_machine_gets_no_mfu():
    # env.json lists the node's GPUs whatever the run trained on
    out = _summary(_launch_record("inprocess", "cpu", 1, "NVIDIA A100-SXM4-80GB"))
    assert "mfu" not in out and out["achieved_tflops"] == pytest.approx(1e9 * 2000.0 / 1e12)


def test_peak_precision_by_capability():
    from effbench.analysis.efficiency import parse_capability, peak_precision

    assert peak_precision("fp32", tf32_enabled=True, capability=(7, 0)) == "fp32"
    assert peak_precision("fp32", tf32_enabled=True, capability=(8, 6)) == "tf32"
    assert peak_precision("fp32", tf32_enabled=False, capability=(9, 0)) == "fp32"
    assert peak_precision("fp16", tf32_enabled=True, capability=(7, 5)) == "fp16"
    assert parse_capability("7.5") == (7, 5) and parse_capability(None) is None


# --- items 7 and 8: launch planning -----------------------------------------------------------------------

SLURM = {"SLURM_JOB_ID": "123457", "SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_PROCID": "0",
         "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NTASKS_PER_NODE": "1"}  # fmt: skip


def test_two_slurm_jobs_on_one_first_node_get_different_ports():
    from effbench.launch.plan import slurm_settings

    a = slurm_settings(SLURM)
    b = slurm_settings({**SLURM, "SLURM_JOB_ID": "123458"})
    assert a.rdzv_host == b.rdzv_host == "gpu01"
    assert a.rdzv_endpoint == "gpu01:23457" and b.rdzv_endpoint == "gpu01:23458"  # 20000 + id % 10000
    assert slurm_settings({**SLURM, "SLURM_JOB_ID": "j7"}).rdzv_port in range(20000, 30000)


def test_master_port_is_honoured_and_checked():
    from effbench.errors import EffbenchError
    from effbench.launch.plan import slurm_settings

    assert slurm_settings({**SLURM, "MASTER_PORT": "31234"}).rdzv_endpoint == "gpu01:31234"
    for bad in ("0", "70000", "port"):
        with pytest.raises(EffbenchError) as info:
            slurm_settings({**SLURM, "MASTER_PORT": bad})
        assert info.value.option == "MASTER_PORT"


def test_srun_run_uses_master_port(monkeypatch, capsys, tmp_path):
    from clitools import invoke

    from effbench.run import launch

    seen: dict = {}

    def fake_run(cfg, **kw):  # the side-effecting leaf, as tests/contracts/test_cli.py's `captured` patches it
        seen["cfg"] = cfg
        return launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    for k, v in {**SLURM, "MASTER_PORT": "31234"}.items():
        monkeypatch.setenv(k, v)
    assert invoke(["run", "--smoke"], capsys)[0] == 0
    assert seen["cfg"].rdzv_endpoint == "gpu01:31234" and seen["cfg"].rdzv_id == "123457"


def _slurm_env(monkeypatch, env: dict) -> None:
    import os

    for k in [k for k in os.environ if k.startswith("SLURM_") or k == "MASTER_PORT"]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def test_a_single_node_srun_run_ignores_a_master_port_it_never_uses(monkeypatch, capsys, tmp_path):
    from clitools import invoke

    from effbench.launch.plan import slurm_settings
    from effbench.run import launch

    seen: dict = {}

    def fake_run(cfg, **kw):  # the side-effecting leaf
        seen["cfg"] = cfg
        return launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    one_node = {**SLURM, "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "gpu01", "MASTER_PORT": "port"}
    _slurm_env(monkeypatch, one_node)
    assert slurm_settings(one_node).rdzv_port is None  # torchrun --standalone picks its own
    code, out, err = invoke(["run", "--smoke"], capsys)
    assert code == 0, err
    assert seen["cfg"].nnodes == 1 and seen["cfg"].rdzv_endpoint is None


def test_a_multi_node_srun_run_with_a_bad_master_port_is_one_line(monkeypatch, capsys, tmp_path):
    from clitools import invoke

    from effbench.run import launch

    def never(*_a, **_k):
        raise AssertionError("a bad MASTER_PORT must stop the run before it starts")

    monkeypatch.setattr(launch, "run", never)
    _slurm_env(monkeypatch, {**SLURM, "MASTER_PORT": "port"})
    code, out, err = invoke(["run", "--smoke", "--output", tmp_path], capsys)
    assert code == 2 and "Traceback" not in out + err
    assert err.strip().count("\n") == 0 and err.startswith("error: MASTER_PORT") and "unset it or set e.g." in err


def test_the_slurm_scripts_name_the_port_effbench_uses():
    # launch/plan.py slurm_rdzv_port: $MASTER_PORT, else RDZV_PORT_BASE + SLURM_JOB_ID % RDZV_PORT_SPAN
    from effbench.launch.plan import RDZV_PORT_BASE, RDZV_PORT_SPAN

    root = Path(__file__).resolve().parents[2] / "entrypoint"
    for name in ("slurm-multi-node.sbatch", "slurm-python-multinode.sbatch"):
        comments = " ".join(
            line.lstrip("# ").strip() for line in (root / name).read_text().splitlines() if line.startswith("# ")
        )
        assert "29500" not in comments, name
        assert "$MASTER_PORT" in comments and f"{RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORT_SPAN}" in comments, name


@pytest.mark.parametrize(
    "kw, threads",
    [
        (dict(device="cuda", visible_gpus=8, cores=32), 4),  # 8 GPU ranks share 32 cores
        (dict(device="cuda", visible_gpus=8, cores=4), 1),  # at least one thread
        (dict(device="cuda", visible_gpus=2, cores=32, strategy="dp"), 32),  # one DataParallel process
        (dict(device="cpu", nproc=2, cores=8), 4),
    ],
)
def test_each_rank_gets_its_share_of_the_cores(kw, threads):
    from effbench.launch.plan import plan_launch

    args = dict(device="auto", gpus=None, nproc=None, strategy="ddp", nnodes=1, node_rank=None, rdzv_endpoint=None,
                rdzv_id=None, visible_gpus=0, cores=16, env={}, python="py", worker_args=["effbench", "worker"])  # fmt: skip
    p = plan_launch(**{**args, **kw})
    assert p.threads_per_proc == threads and p.env["OMP_NUM_THREADS"] == str(threads)


# --- item 10: harness_overhead runs both sides in one precision ------------------------------------------


def _harness():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "harness_overhead.py"
    spec = importlib.util.spec_from_file_location("harness_overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bare_loop_runs_the_precision_effbench_recorded(monkeypatch):
    import types

    from effbench.run.runtime import resolve_precision

    h = _harness()
    # a T4: bf16 only through emulation (torch.cuda.is_bf16_supported: capability < 8 -> emulation check)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    recorded, _ = resolve_precision("auto", types.SimpleNamespace(type="cuda"))
    assert recorded == "fp32"
    amp, scaler = h.bare_amp(recorded, "cpu")
    assert not amp._enabled and not scaler.is_enabled()  # the old bare loop turned bf16 on here
    amp, _ = h.bare_amp("bf16", "cpu")
    assert amp._enabled and amp.fast_dtype == torch.bfloat16
    # effbench's TrainStep scales fp16 losses; so does the reference ("cpu": GradScaler("cuda") turns itself
    # off without CUDA, torch/amp/grad_scaler.py)
    _, scaler = h.bare_amp("fp16", "cpu")
    assert scaler.is_enabled()


# --- item 2: every member of a scaling series in a child process -----------------------------------------


def test_isolated_single_device_run_goes_to_a_child_worker(monkeypatch, tmp_path):
    import sys

    from effbench.config import RunConfig
    from effbench.launch import supervise
    from effbench.launch.supervise import SupervisedResult
    from effbench.run import launch

    def in_this_process(*_a, **_k):
        raise AssertionError("an isolated run must not train in the parent")

    launched: list[list[str]] = []

    def fake_supervised(argv, env, **_k):  # the side-effecting leaf: what would be started
        launched.append(list(argv))
        return SupervisedResult(returncode=1, signal=None, failure=None)

    monkeypatch.setattr(launch, "run_benchmark", in_this_process)
    monkeypatch.setattr(supervise, "run_supervised", fake_supervised)
    cfg = RunConfig(arch="resnet18", dataset="synthetic", device="cpu", weights="none", output=tmp_path)
    outcome = launch.run(cfg, command=["t"], echo=lambda _s: None, progress=False, isolate=True)
    (argv,) = launched
    assert argv[:5] == [sys.executable, "-m", "effbench", "worker", "--spec"]
    assert outcome.results.status == "failed"  # the child left no folder: reported, not hidden
    assert outcome.results.error.message == "the effbench worker exited with 1"


def test_scaling_series_isolates_every_member(monkeypatch, tmp_path):
    from effbench.config import RunConfig
    from effbench.run import launch
    from effbench.sweep import series

    seen: list[tuple[int | None, bool]] = []

    def fake_run(cfg, **kw):
        seen.append((cfg.nproc, kw.get("isolate", False)))
        return launch.RunOutcome(run_dir=None, results=record_of({"schema_version": 1, "status": "failed"}))

    monkeypatch.setattr(launch, "run", fake_run)
    monkeypatch.setattr("effbench.system.preflight.run_checks", lambda *a, **k: [])
    base = dict(arch="resnet18", dataset="synthetic", device="cpu", weights="none", output=tmp_path, batch_size=4)
    configs = [RunConfig(**base, nproc=1), RunConfig(**base, nproc=2)]
    series.run_scaling_series(configs, command=["t"], echo=lambda _s: None, progress=False)
    assert seen == [(1, True), (2, True)]


# ------------------------------------------------------------------------------------------------
# GPU truth 3.8: NVML's power on Ampere and Hopper is a 1 s average; the energy check must not trip on it
# ------------------------------------------------------------------------------------------------
class _Field:
    """pynvml's c_nvmlFieldValue_t as read: nvmlReturn, valueType and the value union's members."""

    def __init__(self, mw: int, ret: int = 0) -> None:
        self.nvmlReturn, self.valueType, self.value = ret, 1, types.SimpleNamespace(uiVal=mw)


class InstantPowerNVML(UuidNVML):
    def nvmlDeviceGetFieldValues(self, h: int, fields: list) -> list:
        assert fields == [186]  # NVML_FI_DEV_POWER_INSTANT (pynvml.py)
        return [_Field(250_000 + h)]


class NoFieldNVML(UuidNVML):
    def nvmlDeviceGetFieldValues(self, h: int, fields: list) -> list:
        return [_Field(0, ret=3)]  # NVML_ERROR_NOT_SUPPORTED


@pytest.mark.parametrize(("nvml_cls", "watts", "source"), [(InstantPowerNVML, 250.0, "instantaneous"),
                                                           (NoFieldNVML, 100.0, "1 s average")])  # fmt: skip
def test_power_is_the_instant_field_where_the_driver_has_it(nvml_cls, watts, source):
    from effbench.measure.monitor import UtilizationSampler

    nvml = nvml_cls(["GPU-" + U[0]])
    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[0]}, nvml=nvml) as mon:
        pass
    (gpu,) = mon.summary().gpus
    assert gpu.power_w.mean == pytest.approx(watts) and gpu.power_source.startswith(source)


def _step_block(edge_lag_s: float = 1.0, dt: float = 0.1, seconds: float = 4.5):
    """An idle (60 W) to load (400 W) step at t=0 sampled every dt: the energy counter integrates the true
    power; NVML's averaged reading is the mean of the last `edge_lag_s` of it."""
    t = [i * dt for i in range(int(seconds / dt) + 1)]
    true = [400.0 for _ in t]
    true[0] = 60.0
    avg = [(60.0 * max(0.0, edge_lag_s - ti) + 400.0 * min(ti, edge_lag_s)) / edge_lag_s for ti in t]
    energy = [400.0 * dt * i for i in range(len(t))]  # the counter: the true power's integral
    return t, true, avg, energy


def test_the_energy_check_leaves_the_averages_lag_out():
    from effbench.selftest.checks import AVERAGE_EDGE_S, energy_vs_power

    t, _true, avg, energy = _step_block()
    counter, integral, _ = energy_vs_power(t, avg, energy, edge_s=0.0)
    assert abs(integral - counter) / counter > 0.09  # the whole block: the lag alone is ~10%, the tolerance
    counter, integral, n = energy_vs_power(t, avg, energy, edge_s=AVERAGE_EDGE_S)
    assert abs(integral - counter) / counter < 0.01 and n >= 10
    assert energy_vs_power(t[:12], avg[:12], energy[:12], edge_s=AVERAGE_EDGE_S) is None  # too few samples


def test_a_mig_run_names_why_it_has_no_energy():
    # GPU truth 3.9: a MIG run's energy was dropped with no note
    from effbench.measure.monitor import UtilizationSampler

    with UtilizationSampler(interval_s=10, gpu_uuids={0: U[3]}, nvml=UuidNVML(["GPU-" + U[0], "MIG-" + U[3]])) as mon:
        mon.window(True)
        mon.window(False)
    rec = {"precision": "bf16", "devices": 1, "world_size": 1, "throughput_img_s": 100.0, "data_time_share": 0.1,
           "measured": {"steps": 5, "time_s": 1.0, "images": 100}, "launch": {"mode": "inprocess", "device_type": "cuda"},
           "env": {"gpus": [{"name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "capability": "8.0"}]}}  # fmt: skip
    out = typedrec.summarize(rec, flops_image=None, utilization=mon.summary(), memory=[], profile_info=None,
                             cpu_quota_cores=None, workers_per_process=0, processes_per_node=1, tf32_enabled=False)  # fmt: skip
    assert "energy_j" not in out and out["energy_note"].startswith("not measured on a MIG instance")


def test_a_job_over_two_gpu_models_is_held_against_both_peaks():
    # GPU truth 3.11: the MFU peak was rank 0's cuda:0 times the job's devices. Two A100 ranks and two H100
    # ranks, bf16 (datasheets: A100 SXM 312, H100 SXM 989 dense TFLOP/s): the job's peak is 2 x 312 + 2 x 989.5.
    ranks = [{"rank": r, "gpu_name": name, "gpu_capability": cap, "gpu_sm_count": sms}
             for r, (name, cap, sms) in enumerate([("NVIDIA A100-SXM4-80GB", "8.0", 108)] * 2
                                                  + [("NVIDIA H100 80GB HBM3", "9.0", 132)] * 2)]  # fmt: skip
    rec = {"precision": "bf16", "devices": 4, "world_size": 4, "throughput_img_s": 1000.0, "data_time_share": 0.02,
           "measured": {"steps": 50, "time_s": 1.0, "images": 1000}, "ranks": ranks,
           "launch": {"mode": "torchrun", "device_type": "cuda"},
           "env": {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "capability": "8.0", "sm_count": 108}]}}  # fmt: skip
    flops = 1e12  # 1 TFLOP per image: 1000 TFLOP/s achieved
    out = typedrec.summarize(rec, flops_image=flops, utilization=None, memory=[], profile_info=None,
                             cpu_quota_cores=None, workers_per_process=0, processes_per_node=2, tf32_enabled=True)  # fmt: skip
    assert out["mfu"] == pytest.approx(1000.0 / (2 * 312.0 + 2 * 989.5))
    assert out["mfu_peak_tflops_per_device"] == pytest.approx((2 * 312.0 + 2 * 989.5) / 4)
    assert "A100" in out["mfu_peak_gpu"] and "H100" in out["mfu_peak_gpu"] and "x 2" in out["mfu_peak_gpu"]
    # one rank's GPU unknown to the table: no MFU at all, never a partial peak
    ranks[3]["gpu_name"] = "NVIDIA Mystery GPU"
    out = typedrec.summarize(rec, flops_image=flops, utilization=None, memory=[], profile_info=None,
                             cpu_quota_cores=None, workers_per_process=0, processes_per_node=2, tf32_enabled=True)  # fmt: skip
    assert "mfu" not in out


# A100 SXM and H100 SXM datasheets: 312 and 989.5 dense bf16 TFLOP/s (efficiency.PEAK_TFLOPS cites them)
_A100, _H100 = ("NVIDIA A100-SXM4-80GB", "8.0", 108), ("NVIDIA H100 80GB HBM3", "9.0", 132)


def _mixed_node_record(mode: str, ranks: list[dict], **kw) -> dict:
    """A bf16 record on one node whose env.json lists cuda:0 an H100 and cuda:1 an A100."""
    gpus = [{"index": i, "name": n, "capability": c, "sm_count": s} for i, (n, c, s) in enumerate([_H100, _A100])]
    return {"precision": "bf16", "devices": 2, "world_size": 1 if mode == "dp" else 2, "throughput_img_s": 500.0,
            "data_time_share": 0.02, "measured": {"steps": 50, "time_s": 1.0, "images": 500}, "ranks": ranks,
            "launch": {"mode": mode, "device_type": "cuda", "nproc_per_node": 2, "nnodes": 1}, "env": {"gpus": gpus},
            **kw}  # fmt: skip


def _mfu_summary(rec: dict) -> dict:
    return typedrec.summarize(rec, flops_image=1e12, utilization=None, memory=[], profile_info=None,
                              cpu_quota_cores=None, workers_per_process=0, processes_per_node=2, tf32_enabled=True)  # fmt: skip


def _row(rank: int, gpu: tuple[str, str, int]) -> dict:
    return {"rank": rank, "local_rank": rank, "gpu_name": gpu[0], "gpu_capability": gpu[1], "gpu_sm_count": gpu[2]}


def test_dataparallel_and_a_failed_run_hold_each_device_against_its_own_peak():
    # GPU truth 3.11 residual: a device no rank row names took the node's first GPU's peak. 1 TFLOP per image at
    # 500 img/s is 500 TFLOP/s; the job's peak is the H100's and the A100's, 989.5 + 312 (before: 2 x 989.5).
    both = 989.5 + 312.0
    dp = _mfu_summary(_mixed_node_record("dp", [_row(0, _H100)]))  # one process: rank 0's row names cuda:0
    assert dp["mfu"] == pytest.approx(500.0 / both) and dp["mfu_peak_tflops_per_device"] == pytest.approx(both / 2)
    assert "A100" in dp["mfu_peak_gpu"] and "H100" in dp["mfu_peak_gpu"]
    # a DDP run that failed before the first epoch's gather keeps only rank 0's own row (record.ranks_after_failure):
    # rank 1 trained on cuda:1 of the same node
    failed = _mfu_summary(_mixed_node_record("torchrun", [_row(0, _H100)], status="failed"))
    assert failed["mfu"] == pytest.approx(500.0 / both)
    # on two nodes the other node's GPU is named by nothing that reached the record: no MFU, never a guess
    two_nodes = _mixed_node_record("torchrun", [_row(0, _H100)], status="failed")
    two_nodes["launch"]["nnodes"] = 2
    assert "mfu" not in _mfu_summary(two_nodes)


def test_a_two_node_job_counts_every_nodes_ranks_for_devices_the_split_and_the_mfu(monkeypatch):
    # GPU truth N11 (issue 45): rank 0's node sees 4 H100s, the other node 8; `devices`, the strong-scaling split
    # and the MFU's device list came from rank 0's plan, 4 per node x 2 nodes = 8, for a job of 12 ranks.
    from effbench.config import RunConfig
    from effbench.launch.distributed import DistContext, torchrun_env
    from effbench.launch.plan import plan_launch
    from effbench.run import folder, rank

    plan = plan_launch(device="cuda", gpus=None, nproc=None, strategy="ddp", nnodes=2, node_rank=0,
                       rdzv_endpoint="n1:29500", rdzv_id="j", visible_gpus=4, cores=16, env={}, python="python",
                       worker_args=["effbench", "worker"])  # fmt: skip
    assert plan.devices == 8  # this node's count x the nodes
    # what torchrun gives rank 0 (torch/distributed/run.py sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE)
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4"}.items():
        monkeypatch.setenv(k, v)
    env = torchrun_env()
    assert env is not None
    dist = DistContext(backend="nccl", **env._asdict())  # as launch.distributed.process_group yields it
    cfg = RunConfig(batch_size=384, scaling="strong")
    assert rank.rank_batch(cfg, plan, dist) == 384 // 12  # before: 384 // 8 = 48 a device, 576 a step in all
    rt = types.SimpleNamespace(device_name="cuda:0 (NVIDIA H100 80GB HBM3)", precision="bf16")
    facts = folder.launch_facts(plan, dist, rt, 32)
    assert facts["devices"] == 12 and facts["global_batch_size"] == 384 and facts["strategy"] == "ddp"
    # every rank names its GPU; 1 TFLOP per image at 1200 img/s is 1200 TFLOP/s against 12 H100 SXM peaks
    # (datasheet: 989.5 dense bf16); before, against 8 of them
    ranks = [_row(r, _H100) for r in range(12)]
    rec = {**facts, "throughput_img_s": 1200.0, "data_time_share": 0.02, "ranks": ranks,
           "measured": {"steps": 50, "time_s": 1.0, "images": 1200}, "epochs": [],
           "env": {"gpus": [{"index": i, "name": _H100[0], "capability": "9.0", "sm_count": 132} for i in range(4)]}}  # fmt: skip
    out = _mfu_summary(rec)
    assert out["mfu"] == pytest.approx(1200.0 / (12 * 989.5))
    # the scaling table's ideal speedup over a one-node run of 4 is 3, not 2
    from effbench.analysis import scaling

    one_node = {**rec, "devices": 4, "world_size": 4, "throughput_img_s": 400.0, "global_batch_size": 384}
    rows = scaling.scaling_rows([typedrec.record(one_node), typedrec.record(rec)])
    assert rows[-1]["ideal_speedup"] == pytest.approx(3.0)

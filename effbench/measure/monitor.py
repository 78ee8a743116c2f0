"""Utilisation sampling: a background thread samples GPUs (NVML) and the host (psutil) at a fixed
interval while a `with UtilizationSampler():` block runs.

    with UtilizationSampler(interval_s=0.5, gpu_uuids={local_rank: cuda_device_uuid(local_rank)}) as mon:
        train(...)
    mon.write_csv(run_dir / "utilization.csv")
    summary = mon.summary()            # mean/max per metric, energy and byte totals

Each row is flat: `t_s` (seconds since the sampler started), host columns (`cpu_pct`,
`proc_cpu_pct`, `rss_gib`, `net_sent_bytes`, `net_recv_bytes`, `disk_read_bytes`,
`disk_write_bytes`) and per GPU `gpu{i}_util_pct`, `gpu{i}_mem_used_gib`, `gpu{i}_power_w`,
`gpu{i}_temp_c`, `gpu{i}_sm_clock_mhz`, `gpu{i}_energy_j`, `gpu{i}_clock_event_reasons` (NVML's bitmask; the
summary names its bits, `clock_event_reasons`, and each GPU's maximum SM clock, `sm_clock_max_mhz`).

What is not measured is absent, never zero: without NVML (or without GPUs) there are no GPU
columns; a metric whose NVML call fails is missing from that row only; CPU percentages are absent
from the first row, which has no interval to average over, and from a row taken less than a
quarter interval after the previous one (the final sample, when the block ends just after one).

Units and scopes: byte counters and energy are deltas since the sampler started. `cpu_pct` is the
whole host's busy share (0-100, all cores). Network and disk counters are host-wide (psutil offers
no per-process network counters). `proc_cpu_pct` and `rss_gib` cover `pid` and all its descendants
(DataLoader workers included); 100 means one core busy; RSS counts pages shared between processes
once per process (forked workers share most of the parent's), so `pss_gib`, the tree's proportional
set size (each shared page split among its sharers; Linux smaps_rollup), is the memory the tree
really holds. It is read in the first and final sample and at most every PSS_EVERY_S between them,
less often where a read costs more than PSS_CPU_SHARE of a core; absent elsewhere.

Which GPUs: `gpu_uuids` maps torch's CUDA indices to their UUIDs (system.hardware.cuda_device_uuid),
and each is found in NVML by UUID (system.hardware.nvml_handle_for_uuid, the one CUDA -> NVML mapping):
CUDA's and NVML's integer orders differ (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, UUID and MIG entries),
the UUID does not. Columns are then named by the CUDA index (`gpu0_*` is cuda:0 of this process), and
a UUID NVML does not know is listed in the summary's `gpus_unmapped` (and voids the energy total).
Under torchrun each rank passes its own GPU; under DataParallel the process passes all of its GPUs.

The measured window: the trainer calls `window(True)` as the measured steps begin and `window(False)` as they
end (each epoch's validation, warm-up and compile lie outside). Each call reads every GPU's energy counter at
that moment, so `summary()["measured_window"]` holds the energy of the window alone (the sum over its spans
of counter(end) - counter(start)) and the means of the rows sampled inside it: the figures the verdict and
images per joule read, rather than the whole block's.
`gpu_indices` (NVML's own PCI-order indices) and the default (every GPU NVML sees) are for tools that
have no CUDA context. Without pynvml, or when nvmlInit fails, every UUID in `gpu_uuids` is unmapped: a
rank that sampled nothing voids the job's energy rather than drop out of its sum.

The sampler is a Python thread: while the training thread spins in pure Python (holding the GIL),
each file read or NVML call costs the sampler one GIL switch interval (5 ms), so a sample of a large
process tree can overrun a short interval; the thread then skips the missed slots rather than
bunching samples. Training loops spend most of their time in torch ops, which release the GIL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import operator
import os
import socket
import threading
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from effbench import schema
from effbench.fmt import GIB
from effbench.results import write_csv


@dataclass
class HostSample:
    """One sample of the host: utilization.csv's host columns, each summarised under the same name in the
    record's schema.HostUse (absent: not measured in this sample)."""

    cpu_pct: float | None = None
    proc_cpu_pct: float | None = None
    rss_gib: float | None = None
    pss_gib: float | None = None
    net_sent_bytes: float | None = None
    net_recv_bytes: float | None = None
    disk_read_bytes: float | None = None
    disk_write_bytes: float | None = None


@dataclass
class GpuSample:
    """One sample of a GPU: utilization.csv's gpu{i}_* columns, summarised under the same names in the
    record's schema.GpuUse."""

    util_pct: float | None = None
    mem_used_gib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    energy_j: float | None = None
    clock_event_reasons: int | None = None  # a bitmask: summarised as the names of its bits, not a mean


def _names(sample: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(sample))


def _present(sample: HostSample | GpuSample) -> dict[str, float]:
    return {k: v for k, v in dataclasses.asdict(sample).items() if v is not None}


def _mean_max_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The model's fields summarised as mean and max (schema.MeanMax): the rest are totals or labels."""
    return tuple(n for n, f in model.model_fields.items() if schema.MeanMax in typing.get_args(f.annotation))


HOST_COLUMNS = _names(HostSample)
GPU_METRICS = _names(GpuSample)
# How often the process tree is rediscovered with a full scan of /proc (see _HostProbe._tree);
# between scans it is followed through children files. Ten seconds: long against a 0.5 s interval,
# short against a training run.
TREE_RESCAN_S = 10.0
# How often the tree's proportional set size is read. /proc/<pid>/smaps_rollup walks every mapping and
# page table: 26 ms of CPU for one process of the CUDA torch build after a resnet18 step here (2.4 ms
# for a CPU build), so every 5 s it took 0.5% of a core, half of all the sampler's cost. So it is read
# at most every PSS_EVERY_S and no more often than keeps it under PSS_CPU_SHARE of a core (the cost of
# the last read decides when the next is due). The first and the final sample always have it.
PSS_EVERY_S = 5.0
PSS_CPU_SHARE = 0.001
_HOST_STATS = _mean_max_fields(schema.HostUse)  # cpu_pct, proc_cpu_pct, rss_gib, pss_gib
_HOST_TOTALS = tuple(c for c in HOST_COLUMNS if c not in _HOST_STATS)  # since-start byte counters
_GPU_STATS = _mean_max_fields(schema.GpuUse)  # every GPU metric but the energy counter and the reasons
_REASONS = schema.field_path(schema.GpuUse, lambda g: g.clock_event_reasons)

# NVML enum values (nvml.h): NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_SM = 1; used when a fake module
# does not define them.
_NVML_TEMPERATURE_GPU = 0
_NVML_CLOCK_SM = 1

# NVML's clock-event reason bits by name: nvidia-ml-py 13.615.71's pynvml.py:2190-2199 (nvmlClocksEventReason*)
# and :2225-2226 (BoardLimit, Reliability: only in the deprecated nvmlClocksThrottleReason* list, same bits).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x001: "GPU idle",
    0x002: "applications clocks setting",
    0x004: "SW power cap",
    0x008: "HW slowdown",
    0x010: "sync boost",
    0x020: "SW thermal slowdown",
    0x040: "HW thermal slowdown",
    0x080: "HW power brake slowdown",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}


def clock_event_reasons(mask: int) -> list[str]:
    """NVML's clock-event reasons bitmask by name; a bit this table lacks (a newer driver's) by its value."""
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"bits {rest:#x}"] if rest else [])


def _read_clock_event_reasons(nvml: Any, handle: Any) -> int | None:
    """The reasons bitmask now: nvmlDeviceGetCurrentClocksEventReasons (pynvml.py:4672-4677, a c_ulonglong);
    a driver without it has the deprecated nvmlDeviceGetCurrentClocksThrottleReasons (:4665-4670, same bits)."""
    for call in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        try:
            return int(getattr(nvml, call)(handle))
        except Exception:
            continue
    return None


def gpu_column(index: int, metric: str) -> str:
    return f"gpu{index}_{metric}"


def _load_nvml() -> Any | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


class _GpuProbe:
    """NVML reads for one GPU; every call may fail on its own and then yields nothing."""

    def __init__(self, nvml: Any, index: int, handle: Any, uuid: str | None = None) -> None:
        self.nvml = nvml
        self.index = index
        self.handle = handle
        self.uuid = uuid
        self.name: str | None = None
        self.nvml_uuid: str | None = None
        """What NVML itself says the sampled device is (nvmlDeviceGetUUID), for checks that it is the job's."""
        try:
            u = nvml.nvmlDeviceGetUUID(handle)
            self.nvml_uuid = u.decode() if isinstance(u, bytes) else str(u)
        except Exception:
            pass
        self._energy0_mj: float | None = None
        try:
            name = nvml.nvmlDeviceGetName(handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            pass
        self.mig = self._is_mig()
        """A MIG instance: it has no power sensor of its own, so no power or energy is read (see read())."""
        self._energy0_mj = self._energy_mj()
        self.power_source: str | None = None
        """Which power reading the samples hold: POWER_INSTANT or POWER_AVERAGE (set at the first read)."""
        sm = getattr(nvml, "NVML_CLOCK_SM", _NVML_CLOCK_SM)
        self.sm_clock_max_mhz = _attempt(lambda: float(nvml.nvmlDeviceGetMaxClockInfo(handle, sm)))
        """The SM clock's maximum (pynvml.py:3682-3687, nvmlDeviceGetMaxClockInfo): what a sampled clock is held to."""

    def _is_mig(self) -> bool:
        """pynvml.nvmlDeviceIsMigDeviceHandle(handle) returns the c_uint it filled (pynvml.py); where it
        fails (an older driver), NVML's own spelling of the device's UUID, "MIG-<uuid>", says it."""
        try:
            flag = self.nvml.nvmlDeviceIsMigDeviceHandle(self.handle)
            return bool(getattr(flag, "value", flag))
        except Exception:
            return bool(self.nvml_uuid and self.nvml_uuid.startswith("MIG-"))

    def _energy_mj(self) -> float | None:
        if self.mig:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # NVMLError_NotSupported on pre-Volta GPUs, or any transient failure
            return None

    def energy_j_now(self) -> float | None:
        """The energy counter since this probe started, J, read now (None without a counter)."""
        energy = self._energy_mj()
        if energy is None or self._energy0_mj is None:
            return None
        return (energy - self._energy0_mj) / 1000.0

    def read(self) -> dict[str, float]:
        nv, h = self.nvml, self.handle
        sample = GpuSample(
            util_pct=_attempt(lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
            mem_used_gib=_attempt(lambda: nv.nvmlDeviceGetMemoryInfo(h).used / GIB),
            temp_c=_attempt(
                lambda: float(
                    nv.nvmlDeviceGetTemperature(h, getattr(nv, "NVML_TEMPERATURE_GPU", _NVML_TEMPERATURE_GPU))
                )
            ),
            sm_clock_mhz=_attempt(
                lambda: float(nv.nvmlDeviceGetClockInfo(h, getattr(nv, "NVML_CLOCK_SM", _NVML_CLOCK_SM)))
            ),
            clock_event_reasons=_read_clock_event_reasons(nv, h),
        )
        # NVML measures power per physical GPU: a MIG handle answers NOT_SUPPORTED, and a driver that
        # answered with the GPU's would count the other instances' jobs. Absent, never another's watts.
        if not self.mig:
            sample.power_w = self._power_w()
        energy = self._energy_mj()
        if energy is not None:
            if self._energy0_mj is None:  # the counter answered late: count from its first answer
                self._energy0_mj = energy
            sample.energy_j = (energy - self._energy0_mj) / 1000.0  # mJ -> J
        return {gpu_column(self.index, metric): value for metric, value in _present(sample).items()}

    def _power_w(self) -> float | None:
        """The GPU's power, W: the instantaneous field where the driver has it (NVML_FI_DEV_POWER_INSTANT,
        nvml.h field 186), else nvmlDeviceGetPowerUsage, which on Ampere and newer is a 1 s average (NVML's
        API reference): its integral lags the energy counter by about half a second at every change of
        load. The first read decides which, and `power_source` says it."""
        if self.power_source != POWER_AVERAGE:
            watts = _instant_power_w(self.nvml, self.handle)
            if self.power_source is None:
                self.power_source = POWER_INSTANT if watts is not None else POWER_AVERAGE
            if self.power_source == POWER_INSTANT:
                return watts
        return _attempt(lambda: self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0)  # NVML reports mW


POWER_INSTANT = "instantaneous (NVML_FI_DEV_POWER_INSTANT)"
POWER_AVERAGE = "1 s average on Ampere and newer (nvmlDeviceGetPowerUsage)"
# pynvml.py: NVML_FI_DEV_POWER_INSTANT = 186; nvmlFieldValue_t's valueType names the union member set
_FI_DEV_POWER_INSTANT = 186
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _instant_power_w(nvml: Any, handle: Any) -> float | None:
    """NVML's instantaneous power field, W (it reports mW), or None where the driver or GPU lacks it."""
    try:
        (value,) = nvml.nvmlDeviceGetFieldValues(
            handle, [getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", _FI_DEV_POWER_INSTANT)]
        )
        if int(value.nvmlReturn) != 0:  # NVML_SUCCESS
            return None
        return float(getattr(value.value, _VALUE_MEMBER[int(value.valueType)])) / 1000.0
    except Exception:
        return None


def _attempt(read: Callable[[], float]) -> float | None:
    """One NVML read; a failed call drops one value, nothing else."""
    try:
        return read()
    except Exception:
        return None


class _HostProbe:
    """psutil reads: system CPU %, the process tree's CPU % and RSS, host network and disk bytes."""

    def __init__(self, psutil: Any, pid: int, min_window_s: float) -> None:
        self.ps = psutil
        self.pid = pid
        self.min_window_s = min_window_s  # shorter windows give noise, not a CPU percentage
        self._first = True
        self._last_wall = time.monotonic()
        self._last_epoch = time.time()
        self._proc_cpu_s: dict[tuple[int, float], float] = {}
        self._procs: dict[int, Any] = {}
        self._last_scan = -math.inf  # the first tree read is a full scan
        me = os.getpid()
        # /proc/<pid>/task/<tid>/children needs CONFIG_PROC_CHILDREN (Linux >= 3.5; most distros)
        self._children_files = os.path.exists(f"/proc/{me}/task/{me}/children")
        self._cpu_last = self._cpu_busy_total()
        self._next_pss = -math.inf
        self._net0 = self._net()
        self._disk0 = self._disk()

    def _cpu_busy_total(self) -> Any | None:
        """The host's CPU times (psutil's scputimes), kept here rather than in psutil's module-global
        cpu_percent state, which any other caller would reset; host_busy_pct turns two into a share."""
        try:
            return self.ps.cpu_times()
        except Exception:
            return None

    def _net(self) -> tuple[int, int] | None:
        try:
            c = self.ps.net_io_counters()
        except Exception:
            return None
        return None if c is None else (c.bytes_sent, c.bytes_recv)

    def _disk(self) -> tuple[int, int] | None:
        try:
            c = self.ps.disk_io_counters()
        except Exception:
            return None
        return None if c is None else (c.read_bytes, c.write_bytes)

    def _process(self, pid: int) -> Any:
        """A cached psutil.Process; one that exits is dropped when reading it fails (read())."""
        proc = self._procs.get(pid)
        return proc if proc is not None else self.ps.Process(pid)

    def _main_thread_children(self, pid: int) -> list[int] | None:
        """Children forked by `pid`'s main thread, from /proc/<pid>/task/<pid>/children (one small
        read); None when pid is gone."""
        try:
            with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return None

    def _tree(self) -> list[Any]:
        """The root process and its descendants; raises psutil.Error when the root is gone.

        psutil's children(recursive=True) reads /proc/<pid>/stat of every process on the host; each
        read hands the GIL back and forth, which under a busy training thread costs a switch
        interval (5 ms) per process. So between full scans (every TREE_RESCAN_S) the tree is
        followed through the children files of the processes already known, which catches every
        child forked from a main thread (DataLoader workers, torchrun ranks) with a few reads.
        """
        root = self._process(self.pid)
        now = time.monotonic()
        found = None
        if self._children_files and now - self._last_scan < TREE_RESCAN_S:
            found = {self.pid: root}
            queue = [self.pid]
            while queue:
                kids = self._main_thread_children(queue.pop())
                for kid in kids or ():  # None: that process is gone
                    if kid not in found:
                        try:
                            found[kid] = self._process(kid)
                        except self.ps.Error:  # exited since the parent listed it
                            continue
                        queue.append(kid)
        if found is None:
            self._last_scan = now
            found = {self.pid: root}
            try:
                for child in root.children(recursive=True):
                    found[child.pid] = child
            except self.ps.Error:
                pass
        # children forked from other threads are only seen by the full scan: keep them between scans
        for pid, proc in self._procs.items():
            found.setdefault(pid, proc)
        self._procs = found
        return list(found.values())

    @staticmethod
    def _pss_bytes(pid: int) -> int | None:
        """Proportional set size of one process from /proc/<pid>/smaps_rollup (Linux >= 4.14)."""
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        return int(line.split()[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            pass
        return None

    def read(self, final: bool = False) -> dict[str, float]:
        ps = self.ps
        row = HostSample()
        now, now_epoch = time.monotonic(), time.time()
        dt = now - self._last_wall
        cpu = self._cpu_busy_total()
        rate_ok = not self._first and dt >= self.min_window_s
        busy_pct = host_busy_pct(self._cpu_last, cpu) if cpu is not None and self._cpu_last is not None else None
        if rate_ok and busy_pct is not None:
            row.cpu_pct = busy_pct
        if cpu is not None:
            self._cpu_last = cpu
        try:
            procs = self._tree()
        except ps.Error:  # the watched process itself is gone
            procs = []
        rss = 0
        pss: int | None = 0 if (final or now >= self._next_pss) else None
        pss_cpu_s = 0.0  # what the smaps_rollup reads cost this thread
        delta_cpu_s = 0.0
        seen: dict[tuple[int, float], float] = {}
        root_read = False
        for p in procs:
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    t = p.cpu_times()
                    cpu_s = t.user + t.system  # children_* would double count reaped workers
                    rss += p.memory_info().rss
            except ps.Error:  # exited (or became unreadable) since it was listed
                self._procs.pop(p.pid, None)
                continue
            if pss is not None:
                cpu0 = time.thread_time()
                one = self._pss_bytes(p.pid)
                pss_cpu_s += time.thread_time() - cpu0
                pss = None if one is None else pss + one  # a partial sum would understate: all or nothing
            root_read = root_read or p.pid == self.pid
            seen[key] = cpu_s
            if key in self._proc_cpu_s:
                delta_cpu_s += cpu_s - self._proc_cpu_s[key]
            elif not self._first and key[1] >= self._last_epoch:
                delta_cpu_s += cpu_s  # started since the last sample: all its time is new
        self._proc_cpu_s = seen
        if root_read:  # without the root there is no tree to report: absent, not 0
            row.rss_gib = rss / GIB
            if pss is not None:
                row.pss_gib = pss / GIB
                self._next_pss = now + max(PSS_EVERY_S, pss_cpu_s / PSS_CPU_SHARE)
            if rate_ok:
                row.proc_cpu_pct = 100.0 * delta_cpu_s / dt  # 100 = one core busy
        net = self._net()
        if net is not None and self._net0 is not None:
            row.net_sent_bytes = float(net[0] - self._net0[0])
            row.net_recv_bytes = float(net[1] - self._net0[1])
        disk = self._disk()
        if disk is not None and self._disk0 is not None:
            row.disk_read_bytes = float(disk[0] - self._disk0[0])
            row.disk_write_bytes = float(disk[1] - self._disk0[1])
        self._first = False
        self._last_wall, self._last_epoch = now, now_epoch
        return _present(row)


def _stats(values: Sequence[float | None]) -> schema.MeanMax | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None
    return schema.MeanMax(mean=sum(vals) / len(vals), max=max(vals))


def _last(rows: list[dict[str, Any]], key: str) -> float | None:
    for row in reversed(rows):
        if row.get(key) is not None:
            return row[key]
    return None


def host_busy_pct(before: Any, after: Any) -> float | None:
    """The host's busy share in percent between two psutil.cpu_times() readings, as psutil.cpu_percent counts
    it: guest time is already inside user/nice (Linux), iowait is idle, and each field's delta is trimmed at 0
    (psutil/__init__.py `_cpu_times_deltas`: Linux's idle and iowait counters can go backwards, which made a
    busy/total ratio of the sums read above 100% or below 0 on a loaded machine). None when no time passed."""
    deltas = {f: max(0.0, getattr(after, f) - getattr(before, f)) for f in after._fields}
    total = sum(deltas.values()) - deltas.get("guest", 0.0) - deltas.get("guest_nice", 0.0)
    idle = deltas.get("idle", 0.0) + deltas.get("iowait", 0.0)
    if total <= 0:
        return None
    return 100.0 * min(1.0, max(0.0, (total - idle) / total))


class UtilizationSampler:
    """Samples GPUs and host every `interval_s` on a background thread inside a `with` block.

    `gpu_uuids`: {CUDA index: UUID} of the GPUs to watch, found in NVML by UUID. `gpu_indices`: NVML
    indices instead; neither: every GPU NVML sees (see the module docstring). `pid`: root of the process
    tree to account (default: this process). `nvml`: an NVML module (default: `pynvml`, imported
    lazily); tests pass a fake. Without NVML, or when nvmlInit fails, the GPU columns are absent (and
    each of `gpu_uuids` is listed in the summary's `gpus_unmapped`).
    """

    def __init__(
        self,
        interval_s: float = 0.5,
        gpu_indices: Sequence[int] | None = None,
        pid: int | None = None,
        gpu_uuids: Mapping[int, str] | None = None,
        nvml: Any | None = None,
    ) -> None:
        if not interval_s > 0:
            raise ValueError("monitor.interval_s must be greater than 0")
        self.interval_s = float(interval_s)
        if gpu_indices is not None and gpu_uuids is not None:
            raise ValueError("monitor: pass gpu_indices or gpu_uuids, not both")
        self._gpu_indices = None if gpu_indices is None else list(gpu_indices)
        self._gpu_uuids = None if gpu_uuids is None else dict(gpu_uuids)
        self.gpus_unmapped: list[schema.UnmappedGpu] = []
        self._pid = os.getpid() if pid is None else pid
        self._nvml_arg = nvml
        self._nvml: Any | None = None
        self._gpus: list[_GpuProbe] = []
        self._host: _HostProbe | None = None
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._marks: list[tuple[float, bool, dict[int, float | None]]] = []  # (t_s, opens, energy J per GPU)
        self.sample_errors = 0  # samples lost to an unexpected error (the thread keeps going)

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> UtilizationSampler:
        self._gpus, self._rows, self.gpus_unmapped = [], [], []  # a sampler used twice starts afresh
        self._marks = []
        self._start_nvml()
        try:
            import psutil
        except ImportError:
            psutil = None
        if psutil is not None:
            try:
                self._host = _HostProbe(psutil, self._pid, min_window_s=self.interval_s / 4)
            except Exception:
                self._host = None
        self._stop.clear()
        self._t0 = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="effbench-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.window(False)  # a window still open (a failure mid-epoch) ends with the block
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sample(final=True)  # the final state, so totals cover the whole block
        self._stop_nvml()

    def _start_nvml(self) -> None:
        nvml = self._nvml_arg if self._nvml_arg is not None else _load_nvml()
        if nvml is None:
            self._unmap_all("pynvml is not installed")
            return
        try:
            nvml.nvmlInit()
        except Exception as e:  # no driver, no GPU, no libnvidia-ml: GPU columns stay absent
            self._unmap_all(f"NVML did not start: {type(e).__name__}: {e}")
            return
        self._nvml = nvml
        if self._gpu_uuids is not None:
            from effbench.system.hardware import nvml_handle_for_uuid

            for cuda_index, uuid in self._gpu_uuids.items():
                try:
                    handle = nvml_handle_for_uuid(nvml, uuid)
                except LookupError as e:  # sampled nothing rather than another job's GPU
                    self.gpus_unmapped.append(schema.UnmappedGpu(index=cuda_index, uuid=uuid, reason=str(e)))
                    continue
                self._gpus.append(_GpuProbe(nvml, cuda_index, handle, uuid=uuid))
            return
        try:
            indices = self._gpu_indices
            if indices is None:
                indices = list(range(int(nvml.nvmlDeviceGetCount())))
        except Exception:
            indices = []
        for i in indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception:
                continue
            self._gpus.append(_GpuProbe(nvml, i, handle))

    def _unmap_all(self, reason: str) -> None:
        """The job's GPUs (when known) were not sampled at all: each is listed in `gpus_unmapped`, so the
        job's energy is None, not the sum of the ranks whose NVML did start (merge_utilization)."""
        for cuda_index, uuid in (self._gpu_uuids or {}).items():
            self.gpus_unmapped.append(schema.UnmappedGpu(index=cuda_index, uuid=uuid, reason=reason))

    def _stop_nvml(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def window(self, opens: bool) -> None:
        """The measured window opens (True) or closes (False) now: its time and every GPU's energy
        counter, read here (a few NVML calls, outside the step timers). A repeated call changes nothing."""
        is_open = bool(self._marks) and self._marks[-1][1]
        if opens == is_open:
            return
        t = time.monotonic() - self._t0
        energy = {g.index: g.energy_j_now() for g in self._gpus}
        with self._lock:
            self._marks.append((t, opens, energy))

    def window_spans(self) -> list[tuple[float, float]]:
        """The measured window's (start, end) spans in t_s seconds; an open one ends now."""
        with self._lock:
            marks = list(self._marks)
        spans, start = [], None
        for t, opens, _ in marks:
            if opens:
                start = t
            elif start is not None:
                spans.append((start, t))
                start = None
        if start is not None:
            spans.append((start, time.monotonic() - self._t0))
        return spans

    def _run(self) -> None:
        k = 1
        while True:
            delay = self._t0 + k * self.interval_s - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            self._sample()
            # fixed rate: a slow sample skips the slots it overran instead of bunching up
            k = max(k + 1, int((time.monotonic() - self._t0) / self.interval_s) + 1)

    def _sample(self, final: bool = False) -> None:
        try:
            row: dict[str, Any] = {"t_s": time.monotonic() - self._t0}
            if self._host is not None:
                row.update(self._host.read(final=final))
            for gpu in self._gpus:
                row.update(gpu.read())
        except Exception:
            self.sample_errors += 1
            return
        with self._lock:
            self._rows.append(row)

    # -- results -----------------------------------------------------------------------------------
    @property
    def samples(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._rows]

    @property
    def gpu_indices(self) -> list[int]:
        """The GPUs being sampled (empty without NVML)."""
        return [g.index for g in self._gpus]

    def columns(self) -> list[str]:
        """Every column seen in any row, in first-seen order (t_s first)."""
        cols: dict[str, None] = {}
        for row in self.samples:
            cols.update(dict.fromkeys(row))
        return list(cols)

    def write_csv(self, path: Path) -> None:
        """All rows as CSV (atomic write); a value missing from a row is an empty cell."""
        write_csv(Path(path), self.columns(), self.samples)

    def summary(self) -> schema.Utilization:
        """Mean/max per metric and totals of the since-start counters; unmeasured figures are absent."""
        rows = self.samples
        out = schema.Utilization(interval_s=self.interval_s, samples=len(rows), hostname=socket.gethostname())
        if rows:
            out.duration_s = rows[-1]["t_s"]
        figures: dict[str, schema.MeanMax | float] = {}  # keyed by HostSample's names, HostUse's fields
        for key in _HOST_STATS:
            s = _stats([r.get(key) for r in rows])
            if s is not None:
                figures[key] = s
        for key in _HOST_TOTALS:
            total = _last(rows, key)
            if total is not None:
                figures[key] = total
        out.host = schema.HostUse.model_validate(figures)
        if self._gpus:
            gpus = []
            for g in self._gpus:
                entry = _gpu_stats(rows, g.index)
                for label, value in ((n, getattr(g, n)) for n in _GPU_LABELS):
                    if value is not None:
                        setattr(entry, label, value)
                energy = _last(rows, gpu_column(g.index, _ENERGY))
                if energy is not None:
                    entry.energy_j = energy
                gpus.append(entry)
            out.gpus = gpus
        if self.gpus_unmapped:
            out.gpus_unmapped = [u.model_copy() for u in self.gpus_unmapped]
        window = self._window_summary(rows)
        if window is not None:
            out.measured_window = window
        return out

    def _window_summary(self, rows: list[dict[str, Any]]) -> schema.MeasuredWindowUse | None:
        """The rows sampled inside the measured window (a row's rates cover the interval before it, so a
        row in (start, end] of a span) and the energy counted between the window's own marks; None when
        no window was marked."""
        with self._lock:
            marks = list(self._marks)
        if not marks:
            return None
        spans = self.window_spans()
        inside = [r for r in rows if any(a < r["t_s"] <= b for a, b in spans)]
        out = schema.MeasuredWindowUse(
            duration_s=float(sum(b - a for a, b in spans)), spans=len(spans), samples=len(inside)
        )
        out.host = schema.HostUse.model_validate(
            {k: s for k in _HOST_STATS if (s := _stats([r.get(k) for r in inside])) is not None}
        )
        if self._gpus:
            gpus = []
            for g in self._gpus:
                entry = _gpu_stats(inside, g.index)
                if g.sm_clock_max_mhz is not None:  # what the window's clock is held to (analysis.clock_note)
                    entry.sm_clock_max_mhz = g.sm_clock_max_mhz
                energy = _window_energy_j(marks, g.index)
                if energy is not None:
                    entry.energy_j = energy
                gpus.append(entry)
            out.gpus = gpus
        return out


# the GPU's identity in its summary (set when known), and the energy counter's column
_GPU_LABELS = tuple(n for n in schema.GpuUse.model_fields if n not in GPU_METRICS and n != "index")
_ENERGY = next(m for m in GPU_METRICS if m not in _GPU_STATS and m != _REASONS)


def _gpu_stats(rows: Sequence[Mapping[str, Any]], index: int) -> schema.GpuUse:
    """GPU `index`'s summary: the mean/max of each sampled metric over `rows`; unmeasured metrics absent."""
    entry = schema.GpuUse(index=index)
    for metric in _GPU_STATS:
        s = _stats([r.get(gpu_column(index, metric)) for r in rows])
        if s is not None:
            setattr(entry, metric, s)
    col = gpu_column(index, _REASONS)
    masks = [int(r[col]) for r in rows if r.get(col) is not None]
    if masks:  # every reason any sample named: a bit set for one sample is the GPU's for that moment
        entry.clock_event_reasons = clock_event_reasons(functools.reduce(operator.or_, masks, 0))
    return entry


def _window_energy_j(marks: Sequence[tuple[float, bool, Mapping[int, float | None]]], index: int) -> float | None:
    """Energy of one GPU inside the window: the counter at each close minus at the open before it; None
    when any mark lacks the counter (a partial sum would understate it). An open span counts to no close."""
    total, start = 0.0, None
    for _, opens, energy in marks:
        value = energy.get(index)
        if value is None:
            return None
        if opens:
            start = value
        elif start is not None:
            total += value - start
            start = None
    return total


def energy_j(summary: schema.Utilization, job_gpus: int | None = None) -> float | None:
    """Total GPU energy in J over the sampled block; None unless every GPU of the job was sampled and
    has a counter (a partial sum would understate it). `job_gpus`: how many GPUs the job used, when the
    summary may hold fewer than all of them (a multi-rank run that failed has rank 0's sampler only)."""
    gpus = summary.gpus
    if not gpus or summary.gpus_unmapped or any(g.energy_j is None for g in gpus):
        return None
    if job_gpus is not None and len(gpus) < job_gpus:
        return None
    return float(sum(g.energy_j or 0.0 for g in gpus))

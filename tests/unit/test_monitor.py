"""The utilisation sampler: fixed-interval rows, GPU columns only where NVML answers, deltas."""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
import time
import types

import pytest

from effbench import schema
from effbench.measure import monitor
from effbench.measure.monitor import UtilizationSampler, energy_j


class FakeNVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNVML:
    """Two GPUs. GPU 1 has no power reading (every call raises); the energy counter of GPU 0 grows
    by 500 mJ per read, GPU 1 by 250 mJ; GPU 0's utilisation call fails on every 4th read."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.energy_mj = {0: 1_000_000.0, 1: 5_000_000.0}
        self.util_calls = 0
        self.inited = 0
        self.shutdown = 0

    def nvmlInit(self) -> None:
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.shutdown += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i >= self.count:
            raise FakeNVMLError("invalid argument")
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
        if h == 0:
            self.util_calls += 1
            if self.util_calls % 4 == 0:
                raise FakeNVMLError("GPU is lost")
        return types.SimpleNamespace(gpu=90 if h == 0 else 40, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30, free=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise FakeNVMLError("Not Supported")
        return 350_000  # mW

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 60 + h

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> float:
        self.energy_mj[h] += 500.0 if h == 0 else 250.0
        return self.energy_mj[h]


class NoDriverNVML(FakeNVML):
    def nvmlInit(self) -> None:
        raise FakeNVMLError("Driver Not Loaded")


def _busy(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


@pytest.fixture(scope="module")
def fake_run():
    """One 1.5 s busy loop sampled every 0.2 s with the fake NVML (shared by the tests below), and
    this process's CPU seconds over it from the kernel's own clock (CLOCK_PROCESS_CPUTIME_ID, not
    /proc/<pid>/stat that psutil reads): the reference for proc_cpu_pct."""
    nvml = FakeNVML()
    cpu0 = time.process_time()
    with UtilizationSampler(interval_s=0.2, gpu_indices=[0, 1], nvml=nvml) as mon:
        _busy(1.5)
    return mon, nvml, time.process_time() - cpu0


def test_rows_come_at_the_interval(fake_run):
    # Behaviour, not this machine's speed: a starved sampler thread takes fewer rows, never more,
    # and never two on one slot (fixed rate, missed slots skipped: monitor.py _run).
    mon, _, _ = fake_run
    rows = mon.samples
    ts = [r["t_s"] for r in rows]
    assert ts == sorted(ts) and ts[-1] >= 1.5  # the final sample at exit, after the 1.5 s block
    assert 3 <= len(rows) <= 1.5 / 0.2 + 3, ts  # entry, at most one per slot while the block ran (it may overrun), exit
    # a sample fires at or after its slot, and the next slot is after it: slot numbers strictly rise
    slots = [int((t + 0.005) / 0.2) for t in ts[1:-1]]
    assert all(a < b for a, b in zip(slots, slots[1:], strict=False)), ts
    assert all(s >= 1 for s in slots)  # no thread sample before the first interval has passed


def test_gpu_columns_present_and_failures_are_per_call(fake_run):
    mon, nvml, _ = fake_run
    rows = mon.samples
    assert mon.gpu_indices == [0, 1]
    for r in rows:
        assert r["gpu0_power_w"] == pytest.approx(350.0)
        assert "gpu1_power_w" not in r  # never zero: absent
        assert r["gpu1_mem_used_gib"] == pytest.approx(2.0)
        assert r["gpu1_temp_c"] == 61 and r["gpu0_sm_clock_mhz"] == 1980
    with_util = [r for r in rows if "gpu0_util_pct" in r]
    assert 0 < len(with_util) < len(rows)  # every 4th util call failed, the rest survived
    assert nvml.inited == 1 and nvml.shutdown == 1


def test_energy_is_the_delta_since_start(fake_run):
    mon, _, _ = fake_run
    rows = mon.samples
    n = len(rows)
    # one baseline read at start, then one read per sample
    assert [r["gpu0_energy_j"] for r in rows] == pytest.approx([0.5 * (k + 1) for k in range(n)])
    s = mon.summary()
    g0, g1 = s.gpus
    assert g0.energy_j == pytest.approx(0.5 * n) and g1.energy_j == pytest.approx(0.25 * n)
    assert energy_j(s) == pytest.approx(0.75 * n)


def test_summary_shape(fake_run):
    mon, _, _ = fake_run
    s = mon.summary().model_dump(exclude_unset=True)  # as results.json holds it
    assert s["interval_s"] == 0.2 and s["samples"] == len(mon.samples)
    g0, g1 = s["gpus"]
    assert g0["index"] == 0 and g0["name"] == "NVIDIA H100 80GB HBM3"
    assert g0["util_pct"] == {"mean": pytest.approx(90.0), "max": 90.0}
    assert g1["mem_used_gib"]["max"] == pytest.approx(2.0)
    assert "power_w" in g0 and "power_w" not in g1
    assert set(g0) >= {"util_pct", "mem_used_gib", "power_w", "temp_c", "sm_clock_mhz", "energy_j"}
    host = s["host"]
    for key in ("cpu_pct", "proc_cpu_pct", "rss_gib"):
        assert set(host[key]) == {"mean", "max"} and host[key]["max"] >= host[key]["mean"]
    assert host["rss_gib"]["mean"] > 0.01  # this Python process with torch imported


def test_host_columns_see_the_busy_loop(fake_run):
    mon, _, cpu_s = fake_run
    rows = mon.samples
    assert "cpu_pct" not in rows[0] and "proc_cpu_pct" not in rows[0]  # no interval yet
    # A row less than a quarter interval after the previous one has no rate (monitor.py docstring):
    # on a loaded machine a late sample can be followed closely by the next slot or the final one.
    rated = [(b, b["t_s"] - a["t_s"]) for a, b in zip(rows, rows[1:], strict=False) if "proc_cpu_pct" in b]
    assert rated, rows
    for a, b in zip(rows, rows[1:], strict=False):
        if b["t_s"] - a["t_s"] >= 0.2 / 2:  # clearly past the quarter-interval rule
            assert "proc_cpu_pct" in b, (a, b)
    # The CPU seconds the rows add up to are this process's (this loaded machine may give it far
    # less than a core); the windows too short to rate are the only CPU time they may miss.
    sampled_cpu_s = sum(r["proc_cpu_pct"] / 100 * dt for r, dt in rated)
    assert 0.6 * cpu_s - 0.05 <= sampled_cpu_s <= 1.25 * cpu_s + 0.05, (sampled_cpu_s, cpu_s)
    assert all(0 <= r["cpu_pct"] <= 100 for r in rows[1:] if "cpu_pct" in r)
    for key in ("net_sent_bytes", "net_recv_bytes"):
        if key in rows[0]:
            assert rows[0][key] >= 0


def test_csv_is_written_and_parseable(fake_run, tmp_path):
    mon, _, _ = fake_run
    path = tmp_path / "utilization.csv"
    mon.write_csv(path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        rows = list(reader)
    assert header[0] == "t_s" and "gpu0_util_pct" in header and "gpu1_power_w" not in header
    assert len(rows) == len(mon.samples)
    assert float(rows[-1]["gpu0_energy_j"]) == pytest.approx(mon.samples[-1]["gpu0_energy_j"])
    assert rows[0]["cpu_pct"] == ""  # absent in the first row is an empty cell, not 0


def test_without_nvml_gpu_columns_are_absent(monkeypatch):
    monkeypatch.setattr(monitor, "_load_nvml", lambda: None)
    with UtilizationSampler(interval_s=0.1) as mon:
        time.sleep(0.35)
    s = mon.summary()
    assert "gpus" not in s.model_dump(exclude_unset=True) and energy_j(s) is None
    assert mon.gpu_indices == []
    assert len(mon.samples) >= 3
    assert not any(k.startswith("gpu") for r in mon.samples for k in r)


def test_nvml_init_failure_means_no_gpus():
    with UtilizationSampler(interval_s=0.1, nvml=NoDriverNVML()) as mon:
        time.sleep(0.15)
    assert "gpus" not in mon.summary().model_dump(exclude_unset=True) and mon.samples and "rss_gib" in mon.samples[0]


def test_energy_needs_every_gpu():
    def summary(d):
        return schema.Utilization.model_validate(d)

    assert energy_j(summary({"gpus": [{"index": 0, "energy_j": 2.0}, {"index": 1, "energy_j": 3.0}]})) == 5.0
    assert energy_j(summary({"gpus": [{"index": 0, "energy_j": 2.0}, {"index": 1}]})) is None
    assert energy_j(summary({"host": {}})) is None
    unmapped = {"gpus": [{"index": 0, "energy_j": 2.0}], "gpus_unmapped": [{"index": 1, "reason": "no NVML"}]}
    assert energy_j(summary(unmapped)) is None  # a GPU of the job never sampled: no partial sum
    assert energy_j(summary({"gpus": [{"index": 0, "energy_j": 2.0}]}), job_gpus=2) is None


def test_default_gpus_come_from_nvml(monkeypatch):
    # without gpu_uuids / gpu_indices: every GPU NVML sees, whatever CUDA_VISIBLE_DEVICES says (a run
    # always passes its GPUs by UUID; tests/unit/test_gpu_paths.py)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with UtilizationSampler(interval_s=0.5, nvml=FakeNVML(count=3)) as mon:
        pass
    # the fake has no energy table for GPU 2, so its energy counter fails: absent, not zero
    assert mon.gpu_indices == [0, 1, 2]
    assert mon.summary().gpus[2].energy_j is None and energy_j(mon.summary()) is None
    assert "energy_j" not in mon.summary().gpus[2].model_dump(exclude_unset=True)


def test_children_that_exit_are_handled():
    """A watched child that exits mid-run drops out of the tree; the sampler keeps going."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.25)"])
    try:
        with UtilizationSampler(interval_s=0.1, nvml=NoDriverNVML()) as mon:
            time.sleep(0.15)
            child.wait()  # reaped while sampling: the pid vanishes from the tree
            time.sleep(0.3)
    finally:
        child.wait()
    rows = mon.samples
    assert len(rows) >= 3 and rows[-1]["t_s"] > 0.45  # sampled on past the child's exit
    assert all("rss_gib" in r for r in rows)
    for a, b in zip(rows, rows[1:-1], strict=False):  # the quarter-interval rule, with a margin for a loaded machine
        if b["t_s"] - a["t_s"] >= 0.1 / 2:
            assert "proc_cpu_pct" in b, (a, b)
    # once the child died, nothing more about it; when the watched pid itself is gone, no tree columns
    with UtilizationSampler(interval_s=0.1, pid=child.pid, nvml=NoDriverNVML()) as gone:
        time.sleep(0.15)
    assert gone.samples and all("rss_gib" not in r and "proc_cpu_pct" not in r for r in gone.samples)


def test_rejects_a_non_positive_interval():
    with pytest.raises(ValueError, match="interval_s"):
        UtilizationSampler(interval_s=0)


def test_the_thread_is_stopped_after_exit():
    with UtilizationSampler(interval_s=0.05, nvml=NoDriverNVML()) as mon:
        time.sleep(0.1)
    n = len(mon.samples)
    time.sleep(0.2)
    assert len(mon.samples) == n
    assert not any(t.name == "effbench-monitor" for t in threading.enumerate())


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "full-scan"])
def test_a_busy_child_counts_toward_the_process_tree(monkeypatch, children_files):
    """The tree's CPU % includes a child started while sampling (the main process only sleeps)."""
    if not children_files:
        monkeypatch.setattr(monitor, "TREE_RESCAN_S", 0.0)  # every sample rescans /proc with psutil
    with UtilizationSampler(interval_s=0.1, nvml=NoDriverNVML()) as mon:
        if not children_files:
            mon._host._children_files = False
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import time\nend = time.time() + 0.8\nwhile time.time() < end: pass\nprint(time.process_time())"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        child_cpu_s = float(child.communicate()[0])  # its own CPU seconds: the reference, whatever the load
    rows = mon.samples
    sampled_cpu_s = sum(
        b["proc_cpu_pct"] / 100 * (b["t_s"] - a["t_s"])
        for a, b in zip(rows, rows[1:], strict=False)
        if "proc_cpu_pct" in b
    )
    # ~100% of a core on an idle host, far less on a loaded one; 0 if the child were unseen
    assert sampled_cpu_s >= 0.5 * child_cpu_s - 0.02, (sampled_cpu_s, child_cpu_s, rows)


def test_pss_counts_pages_forked_children_share_once(monkeypatch):
    """Three forked children touching a 200 MiB buffer the parent filled: RSS sums it four times,
    PSS about once. PSS comes at its own slower cadence, and always in the first and final row."""
    import os

    if not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        pytest.skip("no /proc/<pid>/smaps_rollup (Linux >= 4.14)")
    monkeypatch.setattr(monitor, "PSS_EVERY_S", 0.3)
    code = (
        "import os, sys, time\n"
        "buf = bytearray(200 * 2**20)\n"
        "for i in range(0, len(buf), 4096): buf[i] = 1\n"  # resident in the parent before the forks
        "kids = []\n"
        "for _ in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        s = sum(buf[i] for i in range(0, len(buf), 4096)); time.sleep(3); os._exit(0)\n"  # read: stays shared
        "    kids.append(pid)\n"
        "print('ready', flush=True); time.sleep(3)\n"
        "for k in kids: os.waitpid(k, 0)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the children have read the buffer
        with UtilizationSampler(interval_s=0.1, pid=proc.pid, nvml=NoDriverNVML()) as mon:
            time.sleep(0.75)
    finally:
        proc.wait(timeout=30)
    rows = mon.samples
    with_pss = [r for r in rows if "pss_gib" in r]
    assert "pss_gib" in rows[0] and "pss_gib" in rows[-1]
    # the slower cadence, by time not by row count (a starved sampler takes few rows, all far apart):
    # between the first and the final row, PSS rows are at least PSS_EVERY_S apart
    inner = [r["t_s"] for r in with_pss[:-1]]
    assert all(b - a >= 0.3 - 0.01 for a, b in zip(inner, inner[1:], strict=False)), inner
    peak_rss = max(r["rss_gib"] for r in rows)
    peak_pss = max(r["pss_gib"] for r in with_pss)
    assert peak_rss > 0.75, peak_rss  # 4 x 200 MiB counted
    assert peak_pss < 0.45 * peak_rss, (peak_pss, peak_rss)  # ~200 MiB + interpreters
    assert mon.summary().host.pss_gib.max == peak_pss


def test_pss_reads_that_cost_more_come_less_often(monkeypatch):
    """A smaps_rollup read that takes 20 ms of CPU, with a budget of 1% of a core: the next read is due
    no sooner than 2 s later (PSS_EVERY_S alone would allow one every 10 ms); the final row has it anyway."""
    import os

    import psutil

    def costly_pss(pid):
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.02:  # CPU time, as the sampler counts it
            pass
        return 4096

    monkeypatch.setattr(monitor._HostProbe, "_pss_bytes", staticmethod(costly_pss))
    monkeypatch.setattr(monitor, "PSS_EVERY_S", 0.01)
    monkeypatch.setattr(monitor, "PSS_CPU_SHARE", 0.01)
    probe = monitor._HostProbe(psutil, os.getpid(), min_window_s=0.0)
    start = time.monotonic()
    rows = []
    while time.monotonic() - start < 0.5:
        rows.append(probe.read())
        time.sleep(0.02)
    assert "pss_gib" in rows[0] and len(rows) > 5
    assert not any("pss_gib" in r for r in rows[1:]), "read again within 2 s"
    assert "pss_gib" in probe.read(final=True)


def test_host_busy_share_trims_counters_that_go_backwards():
    """Linux's iowait can decrease between two /proc/stat reads (psutil issues 392, 645, 1210): psutil trims each
    field's delta at 0, and so does the sampler, so the share stays within 0..100. Worked by hand below."""
    from collections import namedtuple

    from effbench.measure.monitor import host_busy_pct

    T = namedtuple("T", "user nice system idle iowait irq softirq steal guest guest_nice")
    a = T(100.0, 0.0, 50.0, 800.0, 40.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    # 3 s user, 1 s system, 4 s idle; iowait went back 30 s (a sum-based ratio read (4 + 30) / (8 - 30): -155%)
    b = T(103.0, 0.0, 51.0, 804.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert host_busy_pct(a, b) == pytest.approx(100.0 * 4 / 8)
    assert host_busy_pct(a, a) is None  # no time passed: no rate
    # guest time is inside user (Linux): it is not counted twice
    c = T(104.0, 0.0, 50.0, 802.0, 40.0, 0.0, 0.0, 0.0, 4.0, 0.0)
    assert host_busy_pct(a, c) == pytest.approx(100.0 * 4 / 6)


def test_the_sample_columns_are_the_summarys_fields():
    # utilization.csv's host and GPU columns are summarised under the same names in results.json: a column
    # added to the sampler without a field in the record model (or the reverse) would be dropped silently
    assert set(monitor.HOST_COLUMNS) == set(schema.HostUse.model_fields)
    labels = {"index", "uuid", "nvml_uuid", "name", "power_source", "sm_clock_max_mhz"}  # the probe's, not a sample's
    gpu_fields = set(schema.GpuUse.model_fields) - labels
    assert set(monitor.GPU_METRICS) == gpu_fields
    assert set(monitor._HOST_STATS) == {"cpu_pct", "proc_cpu_pct", "rss_gib", "pss_gib"}  # mean/max, not totals

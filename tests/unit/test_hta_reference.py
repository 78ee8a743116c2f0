"""Exposed communication against an outside reference: Meta's HolisticTraceAnalysis (HTA) reads the same
Chrome trace files and computes the computation/communication overlap (hta/analyzers/
communication_analysis.py: merged communication kernels against merged computation kernels, per rank).
Its exposed time is the communication time it finds not overlapped: comm x (1 - overlap). The traces are
written here with a known schedule, in the shape torch.profiler exports them (tests/unit/
test_gpu_measurement.py `_kernel`); effbench's figure must agree with HTA's to 1% (GPU truth 3.4)."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

hta_trace_analysis = pytest.importorskip("hta.trace_analysis")

from effbench.measure.profiling import exposed_communication, read_trace_events  # noqa: E402

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _kernel(name: str, ts: float, dur: float, stream: int, corr: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr, "External id": corr}}  # fmt: skip


def _schedule(compute: list[tuple[float, float]], comm: list[tuple[float, float]]) -> list[dict]:
    """Compute kernels on stream 7, NCCL's on stream 21 (DDP's layout), (start, duration) in us, over
    three steps 10 ms apart. No ProfilerStep ranges: HTA then keeps only the kernels it can place in one
    of its iterations (through the launching runtime calls), which a hand-written trace does not hold."""
    events: list[dict] = []
    corr = 0
    for step in range(3):
        base = step * 10_000.0
        for start, dur in compute:
            corr += 1
            events.append(_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", base + start, dur, 7, corr))
        for start, dur in comm:
            corr += 1
            events.append(_kernel(ALLREDUCE, base + start, dur, 21, corr))
    return events


SCHEDULES = {
    # backward's kernels end at 4 ms, the all-reduce runs after them: all of it exposed
    "no overlap": ([(0.0, 4000.0)], [(4000.0, 1500.0)]),
    # two buckets' all-reduces inside backward: none exposed
    "full overlap": ([(0.0, 4000.0), (4200.0, 800.0)], [(1000.0, 1200.0), (2500.0, 1000.0)]),
    # the last bucket's all-reduce outlives backward by 700 us, another runs after the optimizer's kernel
    "partial overlap": ([(0.0, 3000.0), (3900.0, 300.0)], [(2000.0, 1700.0), (4300.0, 450.0)]),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_exposed_communication_agrees_with_hta(tmp_path, name, caplog):
    events = _schedule(*SCHEDULES[name])
    trace = tmp_path / "trace_rank0.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}, f)

    ours = exposed_communication(read_trace_events(trace))
    with caplog.at_level(logging.WARNING):
        analysis = hta_trace_analysis.TraceAnalysis(trace_dir=str(tmp_path))
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    assert "failed to create rank to trace map" not in caplog.text  # HTA found the rank in the file
    (pct,) = overlap.loc[overlap["rank"] == 0, "comp_comm_overlap_pctg"].tolist()
    comm_s = sum(dur for _, dur in SCHEDULES[name][1]) * 3 / 1e6
    hta_exposed_s = comm_s * (1 - pct / 100)
    assert ours.comm_kernel_s == pytest.approx(comm_s, rel=1e-9)
    assert ours.exposed_comm_s == pytest.approx(hta_exposed_s, rel=0.01, abs=0.01 * comm_s)


def test_the_schedules_cover_none_all_and_part_exposed():
    # the three traces above are not three copies of one case
    shares = {}
    for name, (compute, comm) in SCHEDULES.items():
        got = exposed_communication(_schedule(compute, comm))
        shares[name] = got.exposed_comm_s / got.comm_kernel_s
    assert shares["no overlap"] == pytest.approx(1.0)
    assert shares["full overlap"] == pytest.approx(0.0)
    assert shares["partial overlap"] == pytest.approx((700 + 450) / (1700 + 450))


def test_a_profiling_pass_trace_names_its_rank_for_hta(tmp_path, caplog):
    # HTA (and Perfetto) read the rank from distributedInfo, which torch writes only under a process group
    import torch

    from effbench.measure.profiling import run_profile_pass

    model = torch.nn.Linear(4, 2)

    def step(batch):
        model(batch).sum().backward()

    for rank in (0, 1):
        out = tmp_path / f"r{rank}"
        info = run_profile_pass(step, iter([torch.randn(2, 4)] * 5), device_type="cpu", out_dir=out, rank=rank)
        with gzip.open(info.trace, "rt") as f:
            assert json.load(f)["distributedInfo"]["rank"] == rank
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        analysis = hta_trace_analysis.TraceAnalysis(trace_dir=str(tmp_path / "r1"))
    assert list(analysis.t.traces) == [1]  # the rank HTA read from the file (not from its name)
    assert "failed to create rank to trace map" not in caplog.text

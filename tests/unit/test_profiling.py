"""The profiling pass on the CPU: tables, gzipped trace, phase breakdown."""

from __future__ import annotations

import gzip
import json

import pytest
import torch
from torch.profiler import record_function

from effbench.measure.profiling import DATA_WAIT, PHASES, run_profile_pass


def make_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch):
        x, y = batch
        with record_function("h2d_copy"):
            x, y = x.to("cpu"), y.to("cpu")
        with record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        return loss

    return step


def batches(n: int):
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        yield torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("prof")
    return run_profile_pass(make_step(), batches(10), device_type="cpu", out_dir=out), out


def test_phase_names_are_shared_constants():
    assert PHASES == ("h2d_copy", "forward", "backward", "optimizer", "all_reduce")
    assert DATA_WAIT == "data_wait"


def test_tables_exist_with_the_columns(profiled):
    info, out = profiled
    by_cpu = info.tables["by_cpu_time"]
    by_dev = info.tables["by_device_time"]
    assert by_cpu == out / "profile_ops_by_cpu_time.txt" and by_dev == out / "profile_ops_by_device_time.txt"
    for path in (by_cpu, by_dev):
        text = path.read_text()
        for col in ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"):
            assert col in text, (path, col)
        assert "aten::" in text
    assert "no table by device time" in by_dev.read_text()
    assert info.device_table is False


def test_trace_is_gzipped_json_with_our_labels(profiled):
    info, out = profiled
    assert info.trace == out / "trace_rank0.json.gz"
    assert not (out / "trace_rank0.json").exists()
    with gzip.open(info.trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name") for e in events}
    assert events and {"forward", "data_wait", "backward", "optimizer", "step"} <= names


def test_phases(profiled):
    info, out = profiled
    rows = {r.phase: r.model_dump(exclude_unset=True) for r in info.phases}
    assert list(rows) == ["data_wait", *PHASES]
    for name in ("forward", "backward", "optimizer"):
        assert rows[name]["calls"] == 3 and rows[name]["cpu_time_s"] > 0
        assert 0 < rows[name]["cpu_share_of_step"] < 1
    assert rows["all_reduce"]["calls"] == 0  # not DDP: looked for, not seen
    assert "device_time_s" not in rows["forward"]
    assert sum(r["cpu_share_of_step"] for n, r in rows.items() if n != "data_wait") <= 1.0 + 1e-6
    text = (out / "profile_phases.txt").read_text()
    assert "forward" in text and "cpu_share_of_step" in text and info.phase_table in text


def test_step_counts_and_time(profiled):
    info, _ = profiled
    assert (info.wait_steps, info.warmup_steps, info.active_steps) == (1, 1, 3)
    assert 0 < info.profiled_step_time_s < 5


def test_other_ranks_get_suffixed_files_and_short_iterators_stop(tmp_path):
    info = run_profile_pass(make_step(), batches(3), device_type="cpu", out_dir=tmp_path, rank=3, active=4)
    assert info.active_steps == 1  # 1 wait + 1 warm-up, then the batches ran out
    assert info.tables["by_cpu_time"].name == "profile_ops_by_cpu_time_rank3.txt"
    assert info.tables["by_device_time"].name == "profile_ops_by_device_time_rank3.txt"
    assert info.trace == tmp_path / "trace_rank3.json.gz" and info.trace.exists()
    empty = run_profile_pass(make_step(), batches(1), device_type="cpu", out_dir=tmp_path / "e")
    assert empty.active_steps == 0 and empty.profiled_step_time_s is None
    assert "no active profiler steps" in empty.tables["by_cpu_time"].read_text()


def test_rejects_zero_active_steps(tmp_path):
    with pytest.raises(ValueError, match="active"):
        run_profile_pass(make_step(), batches(3), device_type="cpu", out_dir=tmp_path, active=0)


def _evt(name, start_us, end_us, *, kernels_us=(), device="DeviceType.CPU", annotation=False, is_async=False):
    from types import SimpleNamespace

    return SimpleNamespace(
        name=name,
        device_type=device,
        is_async=is_async,
        is_user_annotation=annotation,
        time_range=SimpleNamespace(start=start_us, end=end_us),
        kernels=[SimpleNamespace(duration=d) for d in kernels_us],
    )


def test_device_time_is_credited_by_launch_window():
    """Synthetic CUDA events: backward's kernels come from ops on autograd's device thread, outside
    the "backward" range's tree; they still count for backward because they launch inside it."""
    from effbench.measure.profiling import phase_breakdown

    events = [
        _evt("data_wait", 0, 100),
        _evt("step", 100, 1100),
        _evt("forward", 100, 400, kernels_us=[999]),  # the range's own GPU annotation span: ignored
        _evt("aten::conv2d", 150, 200, kernels_us=[300, 20]),
        _evt("backward", 400, 900),
        _evt("aten::convolution_backward", 500, 550, kernels_us=[600]),  # another thread, same window
        _evt("forward", 100, 400, device="DeviceType.CUDA", annotation=True),  # GPU-side annotation row
        _evt("optimizer", 900, 1100),
        _evt("aten::_foreach_add_", 950, 960, kernels_us=[80]),
        _evt("cudaStreamSynchronize", 970, 980, is_async=True, kernels_us=[5000]),
        _evt("aten::mul", 1200, 1210, kernels_us=[7]),  # outside every window
    ]
    rows = {r.phase: r.model_dump(exclude_unset=True) for r in phase_breakdown(events, with_device=True)}
    assert rows["forward"]["calls"] == 1  # the CUDA-side annotation is not a second call
    assert rows["forward"]["cpu_time_s"] == pytest.approx(300e-6)
    assert rows["forward"]["device_time_s"] == pytest.approx(320e-6)
    assert rows["backward"]["device_time_s"] == pytest.approx(600e-6)
    assert rows["optimizer"]["device_time_s"] == pytest.approx(80e-6)
    assert rows["data_wait"]["device_time_s"] == 0
    assert rows["backward"]["device_share_of_step"] == pytest.approx(600 / 1000)
    assert rows["backward"]["cpu_share_of_step"] == pytest.approx(500 / 1100)
    assert rows["all_reduce"] == {
        "phase": "all_reduce",
        "calls": 0,
        "cpu_time_s": 0.0,
        "cpu_share_of_step": 0.0,
        "device_time_s": 0.0,
        "device_share_of_step": 0.0,
    }


def test_a_cpu_pass_prints_no_kineto_gpu_probe_error(tmp_path):
    # Kineto writes to fd 2 from C++, so this runs in a fresh process with the environment it would get.
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_profiling as t; from pathlib import Path\n"
        "info = t.run_profile_pass(t.make_step(), t.batches(4), device_type='cpu', out_dir=Path(sys.argv[2]), active=1)\n"
        "print('active', info.active_steps)"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    res = subprocess.run(
        [sys.executable, "-c", code, os.path.dirname(__file__), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0 and "active 1" in res.stdout, res.stderr[-2000:]
    assert "gpuGetDeviceCount" not in res.stderr and "profiler_start" not in res.stderr, res.stderr

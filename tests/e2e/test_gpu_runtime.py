"""GPU truth, round two (issue 27), the runtime items 1, 2, 10, 11, 12, checked on the CPU.

What CUDA would do is read from the pinned torch 2.14.1 sources (cited per test) and replayed with fakes:
a GPU made visible to one function, gloo ranks under torchrun, a counting torch.compile backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from effbench.config import RunConfig
from effbench.launch.distributed import DistContext
from effbench.run import folder, launch, rank, runtime

TINY = dict(dataset="synthetic", arch="resnet18", image_size=16, weights="none", workers=0, batch_size=4)


# --- item 1: --nproc N with --device auto on a GPU machine -------------------------------------------
class _OnAGpu(Exception):
    """The rank resolved a CUDA device: training on the faked GPU would crash further on, so stop there."""


def test_nproc_ranks_train_on_the_plans_cpu_even_where_gpus_are_visible(monkeypatch, tmp_path):
    """plan.py reads `--nproc 2 --device auto` as two CPU processes (gloo, "cpu2" in the folder name, fp32);
    each rank then resolved `auto` again, and torch.cuda.is_available() (True on a GPU machine) put it on
    cuda:<local_rank>. The rank must train on the plan's device."""
    cfg = RunConfig(**TINY, nproc=2, max_steps=2, epochs=1, warmup_steps=1, profile=False, output=tmp_path)
    with monkeypatch.context() as gpus:  # a machine with 2 GPUs (torch/cuda/__init__.py is_available, device_count)
        gpus.setattr(torch.cuda, "is_available", lambda: True)
        gpus.setattr(torch.cuda, "device_count", lambda: 2)
        plan = launch.plan_for(cfg, ["effbench", "worker"])
    assert (plan.mode, plan.device_type, plan.devices) == ("torchrun", "cpu", 2)

    real = runtime.resolve_device
    resolved = []

    def resolve_where_gpus_are_visible(*a, **kw):
        with monkeypatch.context() as gpus:
            gpus.setattr(torch.cuda, "is_available", lambda: True)
            device = real(*a, **kw)
        resolved.append(str(device))
        if device.type != "cpu":
            raise _OnAGpu(str(device))
        return device

    monkeypatch.setattr(runtime, "resolve_device", resolve_where_gpus_are_visible)
    # local rank 1 of the torchrun job, as worker_main runs it from the spec's plan (no process group here)
    try:
        outcome = rank.run_benchmark(
            cfg, plan=plan, dist=DistContext(rank=0, local_rank=1), echo=lambda _m: None, progress=False
        )
    except _OnAGpu as e:
        pytest.fail(f"the plan says cpu, but the rank resolved --device auto to {e} and would train there")
    assert resolved == ["cpu"]
    record = outcome.results
    assert record.status == "ok" and record.device == "cpu" and record.precision == "fp32"
    assert "_cpu2_fp32_" in outcome.run_dir.name


# --- item 12: fp16's profiling pass and the timed loop's GradScaler ------------------------------------
def _fp16_scaler_on_the_cpu(monkeypatch):
    """fp16 is refused on the CPU by runtime.resolve_precision (a choice of effbench's, not a library limit):
    here the run takes precision "fp16", so its GradScaler is active, with autocast left off (dtype None:
    train._autocast) since the test is about the scaler, and CPU fp16 convolutions are slow.
    torch.amp.GradScaler("cpu") is the class CUDA uses (torch/amp/grad_scaler.py:123-131): the same init_scale
    2**16, skip-on-overflow and backoff."""
    monkeypatch.setattr(runtime, "resolve_precision", lambda _requested, _device: ("fp16", None))


def test_fp16_profiling_pass_takes_the_timed_loops_scaler_at_its_scale(monkeypatch):
    """A scaler that backed off to 1024 in training: the profiling pass goes on from 1024. Before, it made a
    new GradScaler, which starts at init_scale 2**16 (grad_scaler.py:126; get_scale returns _init_scale
    until the first scale(), :564-576), so its first steps could overflow and be skipped (:371)."""
    from effbench.measure import observe
    from effbench.run.runtime import Runtime

    rt = Runtime(device=torch.device("cpu"), precision="fp16", autocast_dtype=torch.float16)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # its scale tensor exists from the first scale() on (grad_scaler.py:173-180)
    scaler.update(1024.0)  # where a few overflowing steps of the timed loop would have left it
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prep = rank.Prepared(
        cfg=RunConfig(**TINY), rt=rt, backend={}, batch=4, data=type("D", (), {"train": [(torch.ones(4, 4), torch.zeros(4, dtype=torch.long))]})(),
        n_steps=1, bundle=None, model=model, optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _s: 1.0), flops=None, flops_error=None,
    )  # fmt: skip
    prep.scaler = scaler  # the run's, as _with_model makes it
    seen = []
    monkeypatch.setattr(observe, "profile", lambda step, _loader, **_kw: seen.append(step.scaler.get_scale()) or {})
    info, error = rank._profile_pass(prep, DistContext(), None)
    assert error is None and seen == [1024.0]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_an_fp16_run_makes_one_scaler_for_its_timed_loop_and_its_profiling_pass(monkeypatch, tmp_path):
    from effbench.launch.plan import LaunchPlan
    from effbench.measure import observe

    _fp16_scaler_on_the_cpu(monkeypatch)
    made = []

    class CountedScaler(torch.amp.GradScaler):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(torch.amp, "GradScaler", CountedScaler)
    real_profile, profiled = observe.profile, []

    def profile(step, loader, **kw):
        profiled.append(step.scaler)
        return real_profile(step, loader, **kw)

    monkeypatch.setattr(observe, "profile", profile)
    cfg = RunConfig(**TINY, max_steps=2, max_val_steps=1, epochs=1, warmup_steps=1, profile_steps=1, output=tmp_path)
    outcome = rank.run_benchmark(
        cfg, plan=LaunchPlan("inprocess", "cpu", 1, 1, 1), echo=lambda _m: None, progress=False
    )
    assert outcome.results.status == "ok", outcome.results.error
    assert outcome.results.precision == "fp16"
    assert outcome.results.profile_error is None
    assert len(made) == 1 and made[0].is_enabled()  # one scaler for the run, active under fp16
    assert profiled == [made[0]] and made[0]._scale is not None  # stepped by the timed loop, then profiled


# --- item 11: dropout masks per DDP rank ----------------------------------------------------------------
_RANK_PROBE = """
import hashlib, json, sys
from pathlib import Path

import torch

from effbench.config import RunConfig, resolve_for_device
from effbench.launch.distributed import process_group
from effbench.launch.plan import LaunchPlan
from effbench.run import folder, launch, rank
from effbench.run.runtime import resolve_runtime

cfg = resolve_for_device(RunConfig.from_dict(json.loads(sys.argv[1])), "cpu")  # as the runner resolves it
out = Path(sys.argv[2])
with process_group("cpu", 120) as dist:  # gloo, as torchrun + effbench worker would
    rt = resolve_runtime(cfg, dist.local_rank, "cpu")
    prep = rank._prepare(cfg, LaunchPlan("torchrun", "cpu", 2, 1, 1), dist, rt, cfg.batch_size, lambda _p: None)
    weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in prep.model.module.state_dict().values()))
    # nn.Dropout's draw: bernoulli on the default generator of the tensor's device (CPU here, CUDA's there)
    mask = torch.nn.functional.dropout(torch.ones(256), 0.5, training=True).nonzero().flatten().tolist()
    prep.data.set_epoch(0)
    labels = [y.tolist() for _, (_x, y) in zip(range(3), prep.data.train, strict=False)]
    (out / f"rank{dist.rank}.json").write_text(json.dumps({"weights": weights.hexdigest(), "mask": mask, "labels": labels}))
"""


def _torchrun_two_ranks(script: Path, *args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-6000:]


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_ddp_ranks_draw_their_own_dropout_masks_from_the_same_weights_and_data_order(tmp_path, cifar10_dir):
    from effbench.config import resolve_for_device
    from effbench.data.build import build_data
    from effbench.run.rank import seed_everything

    cfg = RunConfig(**{**TINY, "dataset": "cifar10"}, data_dir=cifar10_dir, max_steps=3, epochs=1, output=tmp_path)
    script = tmp_path / "probe.py"
    script.write_text(_RANK_PROBE)
    _torchrun_two_ranks(script, json.dumps(cfg.to_dict()), str(tmp_path))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP's broadcast of rank 0's weights still holds
    assert ranks[0]["mask"] != ranks[1]["mask"]  # before: the same units dropped on every rank
    for r, got in enumerate(ranks):  # each rank's shard in the order a fresh build of it gives, reseed or not
        seed_everything(cfg.seed)
        data = build_data(
            resolve_for_device(cfg, "cpu"), torch.device("cpu"), rank=r, world_size=2, batch_size=cfg.batch_size
        )
        data.set_epoch(0)
        assert got["labels"] == [y.tolist() for _, (_x, y) in zip(range(3), data.train, strict=False)]
    assert ranks[0]["labels"] != ranks[1]["labels"]  # and the ranks read different shards


# --- item 2: rank 0's per-epoch writes and the other ranks' timed steps ----------------------------------
_SLOW_WRITER = """
import os, sys, time
from pathlib import Path

from effbench.run import folder, launch, rank

real, delay, done = folder.write_progress, float(sys.argv[2]), []


def slow_first_write(*a, **kw):  # rank 0's write after epoch 1, as on a slow disk: nothing else changes
    if os.environ["RANK"] == "0" and not done:
        done.append(True)
        time.sleep(delay)
    return real(*a, **kw)


folder.write_progress = slow_first_write
sys.exit(launch.worker_main(Path(sys.argv[1])))
"""


@pytest.mark.slow  # 15-100 s on 2 cores: run by `make test-slow` and CI's slow step
def test_a_slow_rank0_write_between_epochs_is_in_no_ranks_measured_time(tmp_path):
    """Two gloo ranks, rank 0's first per-epoch write held for DELAY_S. Before, rank 1 went on into epoch 2's
    first (measured) step and waited for rank 0 in its all-reduce: its measured time carried the write, and the
    straggler spread named it (spread >= DELAY_S). Now every rank waits for the write between epochs."""
    from effbench.launch.plan import LaunchPlan

    delay_s = 3.0
    out = tmp_path / "out"
    out.mkdir()
    cfg = RunConfig(**TINY, max_steps=3, epochs=2, warmup_steps=1, max_val_steps=1, profile=False, output=out)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "config": cfg.to_dict(), "run_dir": str(out / "run"), "command": ["effbench"], "progress": False,
        "echo": False, "plan": folder.plan_dict(LaunchPlan("torchrun", "cpu", 2, 1, 1)),
    }))  # fmt: skip
    script = tmp_path / "slow_writer.py"
    script.write_text(_SLOW_WRITER)
    _torchrun_two_ranks(script, str(spec), str(delay_s))
    record = json.loads((out / "run" / "results.json").read_text())
    assert record["status"] == "ok"
    times = {r["rank"]: r["time_s"] for r in record["ranks"]}
    spread = record["stragglers"]["spread_s"]
    # the ranks' measured times differ by far less than the write (before: rank 1's carried all of it)
    assert spread < delay_s / 2, (times, record["stragglers"])


# --- item 10: torch.compile's in-process caches across sweep cells ---------------------------------------
@pytest.mark.slow  # 8-13 s on 2 cores: run by `make test-slow` (CI's slow step for test_distributed)
def test_each_compiled_sweep_cell_compiles_as_it_would_in_a_fresh_process(monkeypatch, tmp_path):
    """A sweep runs its one-device cells in this process. Dynamo keeps per-code state between torch.compile
    calls (automatic-dynamic shapes in torch/_dynamo/pgo.py's code state, compiled code per code object), so
    the batch-8 cell after a batch-4 one traced its first graph with a dynamic batch, a graph no fresh process
    runs, and its compile_time_s was another compile's. torch._dynamo.reset() clears that state "as if you
    had started a fresh process" (torch/_dynamo/__init__.py:138-171). A counting backend (no Inductor, so
    no C++ toolchain) records each graph and whether its inputs had symbolic shapes."""
    from effbench.sweep.runner import run_sweep
    from effbench.sweep.spec import SweepSpec

    graphs: list[object] = []

    def counting_backend(gm, example_inputs):
        graphs.append(any(isinstance(d, torch.SymInt) for x in example_inputs if isinstance(x, torch.Tensor) for d in x.shape)
                      or any(isinstance(x, torch.SymInt) for x in example_inputs))  # fmt: skip
        return gm.forward

    real_compile, real_run = torch.compile, launch.run
    monkeypatch.setattr(torch, "compile", lambda model, **_kw: real_compile(model, backend=counting_backend))

    def cell(*a, **kw):
        graphs.append("cell")
        return real_run(*a, **kw)

    monkeypatch.setattr(launch, "run", cell)
    options = {k: v for k, v in TINY.items() if k != "batch_size"}
    spec = SweepSpec(
        lists={"batch_size": (4, 8)},
        options={**options, "compile": True, "device": "cpu", "max_steps": 2, "epochs": 1, "max_val_steps": 1,
                 "profile": False},
        output=tmp_path,
    )  # fmt: skip
    outcome = run_sweep(spec, command=["effbench", "sweep"], echo=lambda _m: None)
    assert [c.status for c in outcome.manifest.cells] == ["ok", "ok"]
    text = "".join("|" if g == "cell" else "D" if g else "s" for g in graphs)  # s: static graph, D: dynamic
    per_cell = text.strip("|").split("|")
    assert per_cell[0].startswith("s"), text  # a fresh process traces its first graph with static shapes
    # the batch-8 cell compiles what a fresh process would: the graphs of the first cell, from a static one
    assert per_cell[1] == per_cell[0], text


def test_nproc_with_device_auto_says_the_visible_gpus_stay_idle(monkeypatch, capsys, tmp_path):
    """The plan's CPU processes are what `--nproc` means (its help, plan.py); with GPUs visible the run says,
    once per command, that they stay idle and how to use them, and trains on the CPU (patched leaf)."""
    from effbench.system import preflight

    monkeypatch.setattr(preflight, "run_checks", lambda _cfg: [])  # its GPU probes would query the fake GPUs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    plans = []
    monkeypatch.setattr(launch, "run_benchmark", lambda _cfg, *, plan, **_kw: plans.append(plan))
    said: set[str] = set()
    for _ in range(2):  # two runs of one command (a sweep's cells): one line
        launch.run(RunConfig(**TINY, nproc=1, output=tmp_path), command=["effbench"], said_warnings=said)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "warning: --nproc: runs 1 CPU process(es); the 2 visible GPU(s) stay idle "
        "(use --gpus N for one process per GPU, or --device cpu to say so)"
    ]
    assert [p.device_type for p in plans] == ["cpu", "cpu"]
    launch.run(RunConfig(**TINY, nproc=1, device="cpu", output=tmp_path), command=["effbench"])
    assert capsys.readouterr().err == ""  # --device cpu asked for the CPU: nothing to say

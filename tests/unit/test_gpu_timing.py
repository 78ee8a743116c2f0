"""Which queued device work lands in which span: effbench's real training loop, TrainStep, StepTimer and
validation on the simulated asynchronous device (tests/simdevice.py; docs/gpu-truth.md items 28-30 and
round four's item 1). On the CPU every op is done when it returns, so only a device that queues can show a
span that waits for the wrong work, or for none, or a timer whose waits slow the loop it measures.

Each reference below is computed apart from the code under test: a bare training loop written here (one
wait at the end of its window, as timm's and NVIDIA's loops run), or the simulator's own log of which
kernel ran when."""

from __future__ import annotations

import time

import pytest
import torch

import simdevice as sd
from effbench.config import RunConfig, resolve_for_device
from effbench.run.optim import build_optimizer, build_scheduler
from effbench.run.timing import DeviceClock, StepTimer, device_clock
from effbench.run.train import data_epochs, evaluate, train_epochs

MS = 1e-3
US = 1e-6
BATCH = 4
TIMINGS = ("pipelined", "per-step")
# Device-bound: each op launches in 1 us and runs 10 us on the device, so the host runs far ahead.
DEVICE_BOUND = sd.OpCost(host_s=1 * US, device_s=10 * US, event_host_s=0.0)


def _cfg(steps: int, *, timing: str = "pipelined", warmup: int = 2, log_interval: int = 1, epochs: int = 1):
    return resolve_for_device(
        RunConfig(dataset="synthetic", epochs=epochs, warmup_steps=warmup, log_interval=log_interval,
                  max_steps=steps, timing=timing, optimizer_impl="foreach", batch_size=BATCH),
        "cpu",
    )  # fmt: skip


def _train(sim: sd.SimDevice, loader, *, steps: int, timing: str, blocks: int = 4, val=(), warmup: int = 2,
           log_interval: int = 1, model=None, epochs: int = 1):  # fmt: skip
    """effbench's real loop (TrainStep, StepTimer, validation) on `sim`: the list of epochs."""
    cfg = _cfg(steps, timing=timing, warmup=warmup, log_interval=log_interval, epochs=epochs)
    model = model if model is not None else sd.sim_model(blocks)
    opt = build_optimizer(cfg, model.parameters())
    data = sd.SimData(train=loader, val=val, steps_per_epoch=steps)
    with sim.installed():
        return list(train_epochs(model, data, opt, build_scheduler(opt, steps), sim.runtime(), cfg))


def _bare_img_s(sim: sd.SimDevice, loader, *, steps: int, warmup: int, blocks: int = 4, window: int | None = None,
                model=None) -> float:  # fmt: skip
    """A bare training loop on `sim`, written apart from effbench's: a wait where warm-up ends, one every
    `window` steps (as effbench's pipelined timing and the selftest's bare loop wait), and at the end."""
    cfg = _cfg(steps)
    model = model if model is not None else sd.sim_model(blocks)
    opt = build_optimizer(cfg, model.parameters())
    criterion = torch.nn.CrossEntropyLoss()
    with sim.installed():
        batches = iter(loader)
        for i in range(steps):
            if i == warmup:
                sim.sync_stream()
                t0, images = time.perf_counter(), 0
            x, y = next(batches)
            x = x.to("cuda", non_blocking=True)
            loss = criterion(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if i >= warmup:
                images += int(y.shape[0])
            if window and (i + 1) % window == 0:
                sim.sync_stream()
        sim.sync_stream()
        return images / (time.perf_counter() - t0)


def _model_s_per_step(blocks: int = 8, cost: sd.OpCost = DEVICE_BOUND) -> float:
    """Device seconds of one training step's kernels of sim_model(blocks): the bare loop's, from the
    simulator's log (forward, loss, backward, optimizer: the kernels of effbench's compute span)."""
    totals = []
    for steps in (3, 4):  # the fourth step alone: the first one also creates the optimizer's momentum buffers
        sim = sd.SimDevice(cost)
        _bare_img_s(sim, sd.HostLoader(sim, steps, host_s=0.0, copy_s=0.0), steps=steps, warmup=0, blocks=blocks)
        totals.append(sim.total(sd.MODEL))
    return totals[1] - totals[0]


def _per_step(epoch) -> tuple[float, float]:
    """The measured steps' mean data and compute seconds."""
    m = epoch.measured
    return m.data_time_s / m.steps, m.compute_time_s / m.steps


# --- round four, item 1: one wait per window -------------------------------------------------------------


def test_a_host_bound_model_reads_its_bare_loops_throughput_only_when_pipelined():
    # b0 on an H200 is host-bound: the host launches each op a little slower than the device runs it. Per-step
    # timing drains the device twice a step, so the batch's copy and the stream's last kernels run while the
    # host waits: 5% under the bare loop here (5-9% on the H200). The pipelined default reads within 1%.
    cost = sd.OpCost(host_s=10 * US, device_s=9 * US)
    steps, warmup, blocks = 30, 10, 30

    def loader(sim):
        return sd.HostLoader(sim, steps, host_s=50 * US, copy_s=200 * US)

    sim = sd.SimDevice(cost)
    bare = _bare_img_s(sim, loader(sim), steps=steps, warmup=warmup, blocks=blocks, window=10)
    got = {}
    for timing in TIMINGS:
        sim = sd.SimDevice(cost)
        (epoch,) = _train(sim, loader(sim), steps=steps, timing=timing, blocks=blocks, warmup=warmup, log_interval=10)
        got[timing] = epoch.measured.throughput_img_s / bare
    assert got["pipelined"] == pytest.approx(1.0, abs=0.01)
    assert got["per-step"] < 0.97


def test_a_slow_loaders_data_share_is_the_share_the_device_waited_for_it():
    # A device-bound step (its kernels run longer than the host takes to launch them) and a loader that
    # blocks the host 1.5 ms a batch (decoding in the training process). In a bare loop the host loads the
    # next batch while the device still runs the last step: the device waits only for the copy. The truth:
    # the share of the bare loop's measured window in which the training stream ran none of the model's
    # kernels, from the simulator's log (the bare loop waits once per 8 steps, as effbench's window does, so
    # one load a window is exposed in both). Pipelined reads it within 2 points; per-step, which drains the
    # device before every load, charges the whole load to data.
    steps, warmup = 24, 8

    def loader(sim):
        return sd.HostLoader(sim, steps, host_s=1.5 * MS, copy_s=0.1 * MS)

    sim = sd.SimDevice(DEVICE_BOUND)
    bare = _bare_img_s(sim, loader(sim), steps=steps, warmup=warmup, blocks=30, window=8)
    t1 = sim.now  # the bare loop's measured window: its images at its rate, ending at its last wait
    t0 = t1 - (steps - warmup) * BATCH / bare
    truth = 1 - sim.busy(sd.MODEL, t0, t1) / (t1 - t0)
    assert 0.02 < truth < 0.2  # most of each load is hidden behind the device's backlog

    share = {}
    for timing in TIMINGS:
        sim = sd.SimDevice(DEVICE_BOUND)
        (epoch,) = _train(sim, loader(sim), steps=steps, timing=timing, blocks=30, warmup=warmup, log_interval=8)
        share[timing] = epoch.measured.data_time_s / epoch.measured.time_s
    assert share["pipelined"] == pytest.approx(truth, abs=0.02)
    assert share["per-step"] > truth + 0.2


@pytest.mark.parametrize("timing", TIMINGS)
def test_dalis_prefetch_is_in_no_step_and_its_decode_rate_is_data_wait(timing):
    # Item 28 (GPU truth 3.1). DALI decodes 5 ms a batch on its own stream, 2 batches ahead, and queues the
    # next at each __next__; the step's kernels run `compute` on the training stream. The loop runs at DALI's
    # rate: compute, then the rest of the 5 ms waiting for the batch. A compute span that waited for the whole
    # device (torch.cuda.synchronize) would hold later batches' decodes.
    compute = _model_s_per_step()
    assert 0.5 * MS < compute < 4 * MS
    sim = sd.SimDevice(DEVICE_BOUND)
    (epoch,) = _train(sim, sd.PrefetchingLoader(sim, 10, decode_s=5 * MS), steps=10, timing=timing, blocks=8)
    data_s, compute_s = _per_step(epoch)
    assert compute_s == pytest.approx(compute, rel=0.02)
    assert data_s + compute_s == pytest.approx(5 * MS, rel=0.02)


def test_a_device_wide_wait_would_split_dalis_loop_otherwise():
    # The check above can fail: the same steps timed by a clock whose stream wait is the device-wide one
    # (round three's defect) wait for DALI's decodes of later batches, and the split moves.
    def split(wide: bool) -> tuple[float, float]:
        sim = sd.SimDevice(DEVICE_BOUND)
        clock = device_clock(torch.device("cpu"), sim)
        if wide:
            clock = DeviceClock(now=clock.now, sync_stream=sim.synchronize, sync_device=sim.synchronize)
        timer = StepTimer(clock, lambda b: (b[0].to("cuda"), b[1]))
        model, times = sd.sim_model(8), []
        with sim.installed():
            it = iter(sd.PrefetchingLoader(sim, 8, decode_s=5 * MS))
            for _ in range(8):
                x, _y = timer.wait_for(it)
                with timer.compute():
                    model(x).sum().backward()
                times.append(timer.lap())
        return sum(t.data_s for t in times[2:]) / 6, sum(t.compute_s for t in times[2:]) / 6

    right, wrong = split(False), split(True)
    assert wrong[0] != pytest.approx(right[0], rel=0.1)


@pytest.mark.parametrize(
    ("make_loader", "data_s"),
    [
        # torchvision: 1 ms waiting for a worker's batch (longer than the step's kernels: nothing hides it),
        # then its 0.5 ms copy to the device
        (lambda sim: sd.HostLoader(sim, 8, host_s=1 * MS, copy_s=0.5 * MS), {"per-step": 1.5 * MS}),
        # a prefetcher's copy stream: the copy ran ahead on its own stream; the training stream only waits
        (lambda sim: sd.CopyStreamLoader(sim, 8, host_s=0.0, copy_s=0.5 * MS), {"per-step": 0.0}),
        # fast: 0.7 ms of crop/flip/normalize kernels queued at next()
        (lambda sim: sd.DeviceAugmentLoader(sim, 8, augment_s=0.7 * MS), {"per-step": 0.7 * MS}),
        # DALI with decode to spare: only the copy out of its buffer is left when the batch is taken
        (lambda sim: sd.PrefetchingLoader(sim, 8, decode_s=0.1 * MS, copy_s=0.5 * MS), {"per-step": 0.5 * MS}),
    ],
    ids=["torchvision", "copy-stream", "fast", "dali"],
)
@pytest.mark.parametrize("timing", TIMINGS)
def test_one_rule_for_every_loader_the_batch_on_the_device_is_data(make_loader, data_s, timing):
    # Item 30 (GPU truth 3.3): the host-to-device copy was compute for torchvision and data for fast and
    # DALI. Data ends when the batch is on the device, for all; compute is the step's kernels alone. Under the
    # pipelined timing the host loads while the device still computes, so only what the device waited for
    # is data; here the step's kernels are too short to hide any of it (the slow-loader test hides some).
    compute = _model_s_per_step()
    sim = sd.SimDevice(DEVICE_BOUND)
    got_data, got_compute = _per_step(_train(sim, make_loader(sim), steps=8, timing=timing, blocks=8)[0])
    assert got_compute == pytest.approx(compute, rel=0.02)
    assert got_data == pytest.approx(data_s["per-step"], rel=0.05, abs=5 * US)


@pytest.mark.parametrize("timing", TIMINGS)
def test_an_all_reduce_the_training_stream_waits_for_is_the_steps_compute(timing):
    # DDP's reducer: an all-reduce on NCCL's stream after the gradients are ready, and the training stream
    # waits for it before backward returns. Its exposed 1 ms is the step's, under both timings.
    compute = _model_s_per_step()
    sim = sd.SimDevice(DEVICE_BOUND)
    model = sd.sim_model(8)
    model[0].weight.register_hook(sd.SimComm(sim, 1 * MS))  # the first layer's gradient is backward's last
    (epoch,) = _train(sim, sd.HostLoader(sim, 8, host_s=0.0, copy_s=0.0), steps=8, timing=timing, model=model)
    assert _per_step(epoch)[1] == pytest.approx(compute + 1 * MS, rel=0.02)
    assert sim.total("allreduce") == pytest.approx(8 * MS)


def test_an_implicit_device_wide_wait_costs_what_it_costs_the_bare_loop():
    # cudnn's autotuning or the allocator freeing a block in use waits for the whole device, here after every
    # convolution's weight gradient, with DALI decoding on its own stream. The step really waits for DALI
    # there; the timing must show that cost as it is, not hide or double it.
    cost = sd.OpCost(host_s=1 * US, device_s=10 * US, event_host_s=0.0,
                     device_wide_on=frozenset({"aten.convolution_backward"}))  # fmt: skip
    steps = 12

    def loader(sim):
        return sd.PrefetchingLoader(sim, steps, decode_s=1 * MS, depth=2)

    sim = sd.SimDevice(cost)
    bare = _bare_img_s(sim, loader(sim), steps=steps, warmup=4, window=4)
    sim = sd.SimDevice(cost)
    (epoch,) = _train(sim, loader(sim), steps=steps, timing="pipelined", warmup=4, log_interval=4)
    # within 3%: effbench's bookkeeping kernels (the loss and accuracy copies) run between its steps
    assert epoch.measured.throughput_img_s == pytest.approx(bare, rel=0.03)


def test_the_timings_agree_on_the_cpu():
    # No device queue: both timings read the host clock at the same points, so the same figures.
    got = {}
    for timing in TIMINGS:
        cfg = _cfg(6, timing=timing)
        model = sd.sim_model(2)
        opt = build_optimizer(cfg, model.parameters())
        batches = [(torch.randn(BATCH, 3, 8, 8), torch.zeros(BATCH, dtype=torch.int64))] * 6
        data = sd.SimData(train=batches, val=[], steps_per_epoch=6)
        rt = sd.SimDevice().runtime().__class__(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)
        (epoch,) = train_epochs(model, data, opt, build_scheduler(opt, 6), rt, cfg)
        got[timing] = epoch
    assert got["pipelined"].steps == got["per-step"].steps == 6
    for e in got.values():  # each step's two spans are real host time, none negative, none lost
        assert all(r.data_time_s >= 0 and r.compute_time_s > 0 for r in e.step_rows)


# --- validation ------------------------------------------------------------------------------------------


def test_validation_time_holds_the_validation_work_still_queued():
    # Item 29 (GPU truth 3.2): batches already on the device and a host that only queues: the loop ends
    # long before the device does. The clock is read after the training stream's last kernel.
    sim = sd.SimDevice(DEVICE_BOUND)
    val = sd.HostLoader(sim, 3, host_s=0.0, copy_s=0.1 * MS)
    model = sd.sim_model(8)
    with sim.installed():
        v = evaluate(model, val, sim.runtime(), _cfg(4), torch.nn.CrossEntropyLoss(), device_clock(
            torch.device("cpu"), sim), warm=frozenset({(4, 3, 8, 8)}))  # fmt: skip
    assert v.images == 12
    assert v.time_s == pytest.approx(sim.now) and sim.now == pytest.approx(max(w.end for w in sim.work))
    assert v.time_s > 3 * 0.1 * MS + sim.busy(sd.MODEL, 0, sim.now) * 0.99


class _Compiling(torch.nn.Module):
    """A real model whose first forward at an input shape first costs `compile_s` of host time (Dynamo tracing
    and Inductor) and queues `autotune_s` of kernels (cuDNN's benchmark mode timing its algorithms)."""

    def __init__(self, sim: sd.SimDevice, *, compile_s: float, autotune_s: float) -> None:
        super().__init__()
        self.sim, self.compile_s, self.autotune_s, self.shapes = sim, compile_s, autotune_s, set()
        self.net = sd.sim_model(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape not in self.shapes:
            self.shapes.add(x.shape)
            self.sim.host(self.compile_s)
            self.sim.kernel("autotune", self.autotune_s)
        return self.net(x)


class _SizedBatches:
    """Validation batches of the given sizes (the last one shorter, as a split's remainder), each copied to
    the device in `copy_s` by the loop's `.to()`."""

    def __init__(self, sim: sd.SimDevice, sizes: list[int], copy_s: float) -> None:
        self.sim, self.sizes, self.copy_s = sim, sizes, copy_s

    def __iter__(self):
        for n in self.sizes:
            yield sd.SimTensor(self.sim, n, on_device=False, copy_s=self.copy_s), sd.labels(self.sim, n)


def test_the_first_validations_compilation_and_autotuning_are_its_warm_up_not_its_time():
    # N8a (round four). The first forward at a shape compiles (50 ms on the host) and autotunes (5 ms on the
    # device): twice in epoch 1 (batches of 4, then the last batch of 2), never after. Now each new shape
    # gets one forward of its own, timed apart: both epochs' val_time_s are the same.
    sim = sd.SimDevice(DEVICE_BOUND)
    model = _Compiling(sim, compile_s=50 * MS, autotune_s=5 * MS)
    train = sd.HostLoader(sim, 8, host_s=0.0, copy_s=0.0)
    first, second = _train(sim, train, steps=4, timing="pipelined", model=model, epochs=2,
                           val=_SizedBatches(sim, [4, 4, 2], 0.1 * MS))  # fmt: skip
    assert first.val_time_s == pytest.approx(second.val_time_s, rel=0.01)
    assert first.val_time_s < 5 * MS
    # training compiled the batch of 4; the last batch's 2 is new to validation: one warm-up forward
    assert first.val_warmup_time_s > (50 + 5) * MS and second.val_warmup_time_s == 0.0
    assert first.val_images == second.val_images == 10  # the warm-up forward's output counts nowhere
    assert first.record().val_warmup_time_s == first.val_warmup_time_s


@pytest.mark.parametrize("timing", TIMINGS)
def test_data_only_delivers_each_batch_onto_the_device_as_training_does(timing):
    sim = sd.SimDevice(DEVICE_BOUND)
    data = sd.SimData(train=sd.HostLoader(sim, 6, host_s=1 * MS, copy_s=0.5 * MS), val=[], steps_per_epoch=6)
    with sim.installed():
        (epoch,) = data_epochs(data, sim.runtime(), _cfg(6, timing=timing))
    assert epoch.measured.data_time_s / epoch.measured.steps == pytest.approx(1.5 * MS)
    assert epoch.compute_time_s == 0.0 and all(r.compute_time_s == 0.0 for r in epoch.step_rows)


def test_the_per_step_timer_waits_for_the_training_stream_never_the_whole_device():
    # The seam itself: a timer never calls the device-wide wait (the simulator would count another
    # stream's work if it did).
    calls: list[str] = []
    clock = DeviceClock(now=lambda: 0.0, sync_stream=lambda: calls.append("stream"),
                        sync_device=lambda: calls.append("device"))  # fmt: skip
    timer = StepTimer(clock)
    timer.wait_for(iter([1]))
    with timer.compute():
        pass
    assert calls == ["stream", "stream"]


def test_the_pipelined_timer_waits_once_per_flush_and_never_inside_a_step():
    sim = sd.SimDevice(DEVICE_BOUND)
    waits: list[str] = []
    real = device_clock(torch.device("cpu"), sim)
    clock = DeviceClock(now=real.now, mark=real.mark, seconds_between=real.seconds_between, reached=real.reached,
                        sync_stream=lambda: waits.append("stream") or sim.sync_stream(),
                        sync_device=lambda: waits.append("device"))  # fmt: skip
    from effbench.run.timing import PipelinedTimer

    timer = PipelinedTimer(clock)
    with sim.installed():
        it = iter(range(5))
        for _ in range(5):
            timer.wait_for(it)
            with timer.compute():
                sim.kernel("step", 1 * MS)
            timer.end_step(None)
        assert waits == []
        steps = timer.flush()
    assert waits == ["stream"] and [t.compute_s for t, _ in steps] == pytest.approx([1 * MS] * 5)


def test_the_profiling_pass_times_each_step_to_its_own_last_kernel(tmp_path):
    # The pass starts each step with the device idle and ends it with the training stream's wait: a step is
    # its own kernels, not DALI's 5 ms decode of a later batch queued meanwhile on DALI's stream.
    from effbench.measure.profiling import run_profile_pass
    from effbench.run.train import TrainStep

    compute = _model_s_per_step()
    sim = sd.SimDevice(DEVICE_BOUND)
    cfg = _cfg(8)
    model = sd.sim_model(8)
    opt = build_optimizer(cfg, model.parameters())
    rt = sim.runtime()
    step = TrainStep(model, opt, build_scheduler(opt, 8), rt, channels_last=False)
    loader = sd.PrefetchingLoader(sim, 8, decode_s=5 * MS)
    with sim.installed():
        info = run_profile_pass(step, iter(loader), device_type="cpu", out_dir=tmp_path,
                                clock=device_clock(rt.device, sim), active=3)  # fmt: skip
    assert info.active_steps == 3
    assert info.profiled_step_times_s == pytest.approx([compute] * 3, rel=0.05)


def test_the_profiled_step_leaves_out_the_ranks_agreement(tmp_path):
    # N10 (round four): before each step the ranks agree (one all_gather), which waits for the slowest rank:
    # 5 ms here. The profiled step time held it (compute + 5 ms); it is the step's data and compute alone.
    from effbench.measure.profiling import run_profile_pass
    from effbench.run.train import TrainStep

    compute = _model_s_per_step()
    sim = sd.SimDevice(DEVICE_BOUND)
    cfg = _cfg(8)
    model = sd.sim_model(8)
    opt = build_optimizer(cfg, model.parameters())
    rt = sim.runtime()
    step = TrainStep(model, opt, build_scheduler(opt, 8), rt, channels_last=False)

    def slow_peer(obj):  # DistContext.gather's shape: every rank's object, after the slowest arrives
        sim.host(5 * MS)
        return [obj]

    loader = sd.HostLoader(sim, 8, host_s=0.0, copy_s=0.0)
    with sim.installed():
        info = run_profile_pass(step, iter(loader), device_type="cpu", out_dir=tmp_path,
                                clock=device_clock(rt.device, sim), active=3, agree=slow_peer)  # fmt: skip
    assert info.profiled_step_times_s == pytest.approx([compute] * 3, rel=0.05)


# --- the simulator itself ----------------------------------------------------------------------------------


@pytest.mark.parametrize("read", ["item", "float", "bool", "cpu", "tolist", "numpy"])
def test_every_read_of_a_device_value_waits_for_the_stream(read):
    sim = sd.SimDevice(sd.OpCost(host_s=0.0, device_s=1 * MS))
    with sim.installed():
        with sim.untracked():
            t = torch.ones(1)
        t = t * 2  # one kernel, 1 ms on the device; the host goes on at once
        assert sim.now == 0.0
        {"item": lambda: t.item(), "float": lambda: float(t), "bool": lambda: bool(t), "cpu": lambda: t.cpu(),
         "tolist": lambda: t.tolist(), "numpy": lambda: t.numpy()}[read]()  # fmt: skip
    assert sim.now == pytest.approx(1 * MS)


def test_events_fire_where_their_stream_reaches_them():
    sim = sd.SimDevice()
    start = sim.Event(enable_timing=True)
    start.record(sim.current_stream())
    sim.kernel("k", 2 * MS)
    end = sim.Event(enable_timing=True)
    end.record(sim.current_stream())
    assert not end.query()
    with pytest.raises(RuntimeError, match="not reached"):
        start.elapsed_time(end)
    sim.current_stream().synchronize()
    assert start.elapsed_time(end) == pytest.approx(2.0)


def test_the_selftests_bare_loop_times_the_device_work_it_queued():
    # The selftest's reference loop reads its own clock and waits for the device through its own seam: one
    # step timed alone is the step's device time; the pipelined loop holds every step's work and no more.
    from effbench.selftest.reference import BareLoop

    sim = sd.SimDevice(DEVICE_BOUND)
    with sim.installed():
        loop = BareLoop(sd.sim_model(4), batch=4, image_size=8, classes=10, device=torch.device("cpu"),
                        now=time.perf_counter, sync=sim.synchronize)  # fmt: skip
        loop.step()
        t0 = sim.now
        loop.step()
        one = sim.now - t0
        assert loop.timed_step_img_s() == pytest.approx(4 / one, rel=0.01)
        assert loop.pipelined_img_s(10) == pytest.approx(4 / one, rel=0.01)

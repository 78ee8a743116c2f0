"""Which queued device work lands in which span: the timers on the simulated asynchronous device
(tests/simdevice.py; docs/gpu-truth.md items 28-30). On the CPU every op is done when it returns, so only a
device that queues can show a span that waits for the wrong work, or for none."""

from __future__ import annotations

import pytest
import torch

import simdevice as sd
from effbench.config import RunConfig, resolve_for_device
from effbench.run.runtime import Runtime
from effbench.run.timing import DeviceClock, StepTimer
from effbench.run.train import data_epochs, evaluate, train_epochs

RT = Runtime(device=torch.device("cpu"), precision="fp32", autocast_dtype=None)
MS = 1e-3
COMPUTE = 2 * MS


def _cfg(steps: int, warmup: int = 2) -> RunConfig:
    return resolve_for_device(
        RunConfig(dataset="synthetic", epochs=1, warmup_steps=warmup, log_interval=1, max_steps=steps), "cpu"
    )


def _train(sim: sd.SimDevice, loader, *, clock: DeviceClock | None = None, steps: int = 8, val=()):
    data = sd.SimData(train=loader, val=list(val), steps_per_epoch=steps)
    with sim.patch_tensor_reads():
        (epoch,) = train_epochs(
            sd.SimModel(sim, 0.0), data, None, None, RT, _cfg(steps), clock=clock or sim.clock(),
            step_fn=sd.SimStep(sim, COMPUTE),
        )  # fmt: skip
    return epoch


def _per_step(epoch) -> tuple[float, float]:
    """The measured steps' mean data and compute seconds."""
    m = epoch.measured
    return m.data_time_s / m.steps, m.compute_time_s / m.steps


def test_dalis_prefetch_is_in_no_step_and_its_decode_rate_is_data_wait():
    # Item 28 (GPU truth 3.1). DALI decodes 5 ms a batch on its own stream, 2 batches ahead, and queues the
    # next at each __next__; the step computes 2 ms. The loop runs at DALI's rate (5 ms a step): 2 ms of
    # compute, 3 ms waiting for the batch. A compute span that waits for the whole device (HEAD's
    # torch.cuda.synchronize) waits for decodes of later batches too.
    sim = sd.SimDevice()
    epoch = _train(sim, sd.PrefetchingLoader(sim, 8, decode_s=5 * MS))
    data_s, compute_s = _per_step(epoch)
    assert compute_s == pytest.approx(COMPUTE)
    assert data_s == pytest.approx(3 * MS)
    # the spans tile the loop: 8 decodes back to back, then the last step's compute; nothing counted twice
    assert epoch.total_time_s == pytest.approx(sim.now) and sim.now == pytest.approx(8 * 5 * MS + COMPUTE)

    # The same loop timed with device-wide waits: the split is not the one above (the check can fail).
    sim = sd.SimDevice()
    device_wide = DeviceClock(now=lambda: sim.now, sync_stream=sim.synchronize, sync_device=sim.synchronize)
    wrong = _per_step(_train(sim, sd.PrefetchingLoader(sim, 8, decode_s=5 * MS), clock=device_wide))
    assert wrong != pytest.approx((3 * MS, COMPUTE))


@pytest.mark.parametrize(
    ("make_loader", "data_s"),
    [
        # torchvision: 1 ms waiting for a worker's batch, then its 0.5 ms copy to the device
        (lambda sim: sd.HostLoader(sim, 8, host_s=1 * MS, copy_s=0.5 * MS), 1.5 * MS),
        # fast: 0.7 ms of crop/flip/normalize kernels queued at next()
        (lambda sim: sd.DeviceAugmentLoader(sim, 8, augment_s=0.7 * MS), 0.7 * MS),
        # DALI with decode to spare: only the copy out of its buffer is left when the batch is taken
        (lambda sim: sd.PrefetchingLoader(sim, 8, decode_s=0.1 * MS, copy_s=0.5 * MS), 0.5 * MS),
    ],
    ids=["torchvision", "fast", "dali"],
)
def test_one_rule_for_every_loader_the_batch_on_the_device_is_data(make_loader, data_s):
    # Item 30 (GPU truth 3.3): the host-to-device copy was compute for torchvision and data for fast and
    # DALI. Now data ends when the batch is on the device, for all three; compute is the step's 2 ms alone.
    sim = sd.SimDevice()
    got_data, got_compute = _per_step(_train(sim, make_loader(sim)))
    assert got_compute == pytest.approx(COMPUTE)
    assert got_data == pytest.approx(data_s)


def test_validation_time_holds_the_validation_work_still_queued():
    # Item 29 (GPU truth 3.2): batches already on the device and a host that only queues: the loop ends
    # long before the device does. 3 batches x (0.1 ms copy + 2 ms forward) = 6.3 ms of validation.
    sim = sd.SimDevice()
    val = sd.HostLoader(sim, 3, host_s=0.0, copy_s=0.1 * MS)
    cfg = _cfg(4)
    with sim.patch_tensor_reads():
        v = evaluate(sd.SimModel(sim, 2 * MS), val, RT, cfg, torch.nn.CrossEntropyLoss(), sim.clock(),
                     warm=frozenset({(4, 3, 8, 8)}))  # fmt: skip
    assert v.images == 12 and v.time_s == pytest.approx(3 * 2.1 * MS)
    assert sim.busy("forward", 0.0, v.time_s) == pytest.approx(6 * MS)


def test_a_training_epochs_validation_is_timed_to_its_last_kernel():
    sim = sd.SimDevice()
    val = sd.HostLoader(sim, 2, host_s=0.0, copy_s=0.0)
    data = sd.SimData(train=sd.HostLoader(sim, 4, host_s=0.0, copy_s=0.0), val=val, steps_per_epoch=4)
    with sim.patch_tensor_reads():
        (epoch,) = train_epochs(sd.SimModel(sim, 3 * MS), data, None, None, RT, _cfg(4), clock=sim.clock(),
                                step_fn=sd.SimStep(sim, COMPUTE))  # fmt: skip
    assert epoch.val_time_s == pytest.approx(2 * 3 * MS) and epoch.val_images == 8


class _CompilingModel(sd.SimModel):
    """SimModel whose first forward at an input shape first costs `compile_s` of host time (Dynamo tracing and
    Inductor) and queues `autotune_s` of kernels (cuDNN's benchmark mode timing its algorithms)."""

    def __init__(self, sim: sd.SimDevice, forward_s: float, *, compile_s: float, autotune_s: float) -> None:
        super().__init__(sim, forward_s)
        self.compile_s, self.autotune_s, self.shapes = compile_s, autotune_s, set()

    def __call__(self, x):
        if x.shape not in self.shapes:
            self.shapes.add(x.shape)
            self.sim.host(self.compile_s)
            self.sim.kernel("autotune", self.autotune_s)
        return super().__call__(x)


class _SizedBatches:
    """Validation batches of the given sizes (the last one shorter, as a split's remainder), each copied to
    the device in `copy_s` by the loop's `.to()`."""

    def __init__(self, sim: sd.SimDevice, sizes: list[int], copy_s: float) -> None:
        self.sim, self.sizes, self.copy_s = sim, sizes, copy_s

    def __iter__(self):
        for n in self.sizes:
            yield sd.SimTensor(self.sim, n, on_device=False, copy_s=self.copy_s), sd.labels(n)


def test_the_first_validations_compilation_and_autotuning_are_its_warm_up_not_its_time():
    # N8a (round four). The first forward at a shape compiles (50 ms on the host) and autotunes (5 ms on the
    # device): twice in epoch 1 (batches of 4, then the last batch of 2), never after. Epoch 1's val_time_s
    # held 110 ms of them beside 6.3 ms of validation. Now each new shape gets one forward of its own, timed
    # apart: both epochs' val_time_s are the same 3 x (0.1 ms copy + 2 ms forward).
    sim = sd.SimDevice()
    model = _CompilingModel(sim, 2 * MS, compile_s=50 * MS, autotune_s=5 * MS)
    data = sd.SimData(train=sd.HostLoader(sim, 4, host_s=0.0, copy_s=0.0), val=_SizedBatches(sim, [4, 4, 2], 0.1 * MS),
                      steps_per_epoch=4)  # fmt: skip
    cfg = resolve_for_device(RunConfig(dataset="synthetic", epochs=2, warmup_steps=2, log_interval=1, max_steps=4),
                             "cpu")  # fmt: skip
    with sim.patch_tensor_reads():
        first, second = train_epochs(
            model, data, None, None, RT, cfg, clock=sim.clock(), step_fn=sd.SimStep(sim, COMPUTE)
        )
    assert first.val_time_s == pytest.approx(3 * 2.1 * MS) and second.val_time_s == pytest.approx(3 * 2.1 * MS)
    assert first.val_warmup_time_s == pytest.approx(2 * (50 + 5 + 2) * MS) and second.val_warmup_time_s == 0.0
    assert first.val_images == second.val_images == 10  # the warm-up forward's output counts nowhere
    assert first.record().val_warmup_time_s == first.val_warmup_time_s


def test_data_only_delivers_each_batch_onto_the_device_as_training_does():
    sim = sd.SimDevice()
    data = sd.SimData(train=sd.HostLoader(sim, 6, host_s=1 * MS, copy_s=0.5 * MS), val=[], steps_per_epoch=6)
    (epoch,) = data_epochs(data, RT, _cfg(6), clock=sim.clock())
    assert epoch.measured.data_time_s / epoch.measured.steps == pytest.approx(1.5 * MS)
    assert epoch.compute_time_s == 0.0


def test_the_step_timer_waits_for_the_training_stream_never_the_whole_device():
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


def test_the_profiling_pass_times_each_step_to_its_own_last_kernel(tmp_path):
    # The pass starts each step with the device idle and ends it with the training stream's wait: a step is
    # its 2 ms of compute, not DALI's 5 ms decode of a later batch queued meanwhile on DALI's stream.
    from effbench.measure.profiling import run_profile_pass

    sim = sd.SimDevice()
    loader = sd.PrefetchingLoader(sim, 8, decode_s=5 * MS)
    info = run_profile_pass(sd.SimStep(sim, COMPUTE), iter(loader), device_type="cpu", out_dir=tmp_path,
                            clock=sim.clock(), active=3)  # fmt: skip
    assert info.active_steps == 3
    assert info.profiled_step_times_s == pytest.approx([COMPUTE] * 3)


class _QueuedLinear(torch.nn.Module):
    """A real Linear whose forward also queues `forward_s` of simulated device work (the backward and the
    optimizer's, `backward_s`, through a hook on the loss's gradient)."""

    def __init__(self, sim: sd.SimDevice, forward_s: float) -> None:
        super().__init__()
        self.sim, self.forward_s = sim, forward_s
        self.fc = torch.nn.Linear(3 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sim.kernel("forward", self.forward_s)
        return self.fc(x.flatten(1))


def test_the_selftests_bare_loop_times_the_device_work_it_queued():
    # The selftest's reference loop reads its own clock and waits for the device through its own seam: one
    # step timed alone is the step's device time; the pipelined loop holds every step's work and no more.
    from effbench.selftest.reference import BareLoop

    sim = sd.SimDevice()
    loop = BareLoop(_QueuedLinear(sim, COMPUTE), batch=4, image_size=8, classes=10, device=torch.device("cpu"),
                    now=lambda: sim.now, sync=sim.synchronize)  # fmt: skip
    assert loop.timed_step_img_s() == pytest.approx(4 / COMPUTE)
    assert loop.pipelined_img_s(10) == pytest.approx(10 * 4 / (10 * COMPUTE))

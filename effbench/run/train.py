"""The step and epoch loop, timed through timing.py. No file I/O: the runner writes what this yields.

The measured step does only the step: per-step loss and correct counts are written into device
tensors and read back once per log interval (one host sync each) and at the end of the epoch.
Every clock read goes through the device's timing.DeviceClock (rt.device_api: torch.cuda on CUDA, the
asynchronous-device simulator's in tests/simdevice.py). Host syncs, all of them:
- `--timing pipelined` (the default): none inside a step. The spans' ends are CUDA events on the training
  stream (timing.PipelinedTimer), read after one wait for the stream per --log-interval steps, at the end
  of warm-up and of the epoch (`settle`), just before the interval's loss read that waits anyway;
- `--timing per-step` (CUDA only): the training stream after next() and the batch's delivery, and at the
  end of each step's compute span (timing.StepTimer), so both spans read the host clock;
- one `.tolist()` of the interval's losses per --log-interval steps, for the progress line and the
  divergence check (a non-finite loss stops the run: `Diverged`), and `.tolist()` once per epoch;
  under DDP the check adds one tiny all_gather per interval so every rank stops at the same step
  (launch/distributed.nonfinite_agreement);
- validation reads its sums once at the end, and waits for the training stream before and after the one
  untimed warm-up forward at each input shape the run had not validated yet (`evaluate`);
- fp16 only: one read of the loss scale per step, after the scaler's update (`TrainStep`), to learn whether
  the scaler skipped the step (the LR schedule must not advance on it); the non-fused optimizers' path of
  `GradScaler.step` already reads its inf check on the host (torch/amp/grad_scaler.py:371).
Profiler phase labels (record_function) are added only in the profiling pass, not in timed steps.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import statistics
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from effbench import schema
from effbench.results import StepRow
from effbench.config import AUTO_MIN_STEPS, RunConfig, auto_warmup_cap, few_steps_warmup
from effbench.errors import EffbenchError
from effbench.launch.distributed import AgreeFn, agree_alone, nonfinite_agreement, rank0_decides
from effbench.run import faults
from effbench.run.phases import Interrupted
from effbench.run.runtime import Runtime
from effbench.run.steady import UntilStop, WarmupEnd
from effbench.run.timing import DeviceClock, StepTime, StepTimer, Tally, device_clock, step_timer

# on_progress(epoch, step_in_epoch, steps_in_epoch, latest_loss)
ProgressFn = Callable[[int, int, int, float], None]
# on_phase(name): the run entered "warm-up", "epochs" or "validation" (run/phases.py)
PhaseFn = Callable[[str], None]
# on_step(warmup, step_time, images, skipped): a step just ended, as it was tallied; the runner counts the
# warm-up steps from these, so an epoch cut short (a signal, a non-finite loss) still reports the ones that
# ran. skipped: the loss scaler skipped its optimizer step (None: no loss scaler, TrainStep)
StepFn = Callable[[bool, StepTime, int, bool | None], None]

# on_cut_short(epoch): the epoch a signal stopped, with its measured steps that ended before it (no validation):
# the runner keeps them, so an interrupted run's record counts every completed measured step
CutShortFn = Callable[["EpochResult"], None]

# The selftest's interleave point (selftest/checks.py, harness vs bare loop): a function called after each
# training step, in the gap between the step's timer and the next one, so a reference loop's steps can
# alternate with the harness's one by one and both meet the same moment of a noisy machine. Unset in runs.
_BETWEEN_STEPS: ContextVar[Callable[[], None] | None] = ContextVar("between_steps", default=None)


@contextmanager
def between_steps(fn: Callable[[], None]) -> Iterator[None]:
    """Call `fn` after every training (or --data-only) step of the in-process runs made inside this block,
    untimed."""
    token = _BETWEEN_STEPS.set(fn)
    try:
        yield
    finally:
        _BETWEEN_STEPS.reset(token)


class Diverged(Exception):
    """The loss went non-finite (nan/inf): training stops there, and the run's status is `diverged`.

    `epoch`, `step` (of the epoch) and `global_step` (of the run, warm-up included) count from 1, as the
    progress lines ("epoch 2/2 step 3/6"), the tables and results.json do. The message names no file's
    rows: the epoch it stopped in never reaches steps.csv (its rows are written when an epoch ends).
    """

    def __init__(self, epoch: int, step: int, global_step: int, loss: float, rank: int | None = None) -> None:
        self.epoch, self.step, self.global_step, self.loss, self.rank = epoch, step, global_step, loss, rank
        on_rank = "" if rank is None else f" on rank {rank}"
        super().__init__(
            f"loss became {loss}{on_rank} at step {global_step} of the run (epoch {epoch}, step {step} of the "
            "epoch, counted from 1 as in the progress lines); lower --lr or check the data"
        )

    def record(self) -> schema.Diverged:
        # str(loss): JSON has no nan/inf; no rank when one process saw it (absent, not null)
        d = schema.Diverged(epoch=self.epoch, step=self.step, global_step=self.global_step, loss=str(self.loss))
        if self.rank is not None:
            d.rank = self.rank
        return d


def check_finite(
    losses: list[float], *, epoch: int, first_step: int, first_global_step: int, agree: AgreeFn = agree_alone
) -> None:
    """Raise Diverged at the first non-finite loss of `losses` (steps first_step.. of `epoch`), or at the one
    another rank found in the same window (`agree`: every rank calls it at the same check). The arguments
    are the loop's 0-based indices (the ranks agree on 0-based global steps); Diverged counts from 1."""
    mine = next(((first_global_step + i, v) for i, v in enumerate(losses) if not math.isfinite(v)), None)
    found = agree(mine)
    if found is not None:
        global_step, loss, rank = found
        raise Diverged(epoch + 1, first_step + global_step - first_global_step + 1, global_step + 1, loss, rank)


def no_training_images(data: Any) -> EffbenchError:
    """An epoch without one batch: every training file was unreadable (batch sizes were checked
    against the split's size before, so nothing else empties it). Bad input, not a measurement."""
    skipped = data.stats().get("corrupt_images_skipped", 0) if hasattr(data, "stats") else 0
    return EffbenchError(
        "--data-dir",
        f"no training image could be read ({skipped} file(s) skipped as unreadable); "
        "check the dataset files (results.json lists examples) or restore the copy",
    )


@dataclass
class EpochResult:
    epoch: int
    steps: int
    images: int
    data_time_s: float
    compute_time_s: float
    train_loss: float | None
    train_top1: float | None
    val_loss: float | None
    val_top1: float | None
    val_time_s: float
    val_images: int
    warmup: Tally
    measured: Tally
    step_rows: list[StepRow] = field(repr=False)
    val_warmup_time_s: float = 0.0
    warmup_rule: schema.WarmupRule | None = None
    """How the warm-up's length was chosen, as decided so far (run/steady.py)."""
    until: schema.Until | None = None
    """`--until`: the interval reached so far and whether it stopped the run."""

    @property
    def total_time_s(self) -> float:
        return self.data_time_s + self.compute_time_s

    def record(self) -> schema.Epoch:
        """The epoch's row of results.json and epochs.csv (this rank's; run/record.merge_epoch joins the ranks')."""
        row = schema.Epoch(
            epoch=self.epoch + 1,  # 1-based in every file and line (progress, tables, CSV, JSON, plots)
            steps=self.steps,
            images=self.images,
            data_time_s=self.data_time_s,
            compute_time_s=self.compute_time_s,
            total_time_s=self.total_time_s,
            train_loss=self.train_loss,
            train_top1=self.train_top1,
            val_loss=self.val_loss,
            val_top1=self.val_top1,
            val_time_s=self.val_time_s,
            val_images=self.val_images,
            val_warmup_time_s=self.val_warmup_time_s,
            # warm-up excluded, like the headline: the epoch's measured steps only (None: all warm-up)
            measured_images=self.measured.images,
            measured_time_s=self.measured.time_s,
            measured_data_time_s=self.measured.data_time_s,
            measured_compute_time_s=self.measured.compute_time_s,
            throughput_img_s=self.measured.throughput_img_s,
            warmup_steps=self.warmup.steps,
            warmup_time_s=self.warmup.time_s,
        )
        skipped = [t.skipped_steps for t in (self.warmup, self.measured) if t.skipped_steps is not None]
        if skipped:  # fp16: the loss scaler's skipped steps; absent without one
            row.skipped_steps = sum(skipped)
        return row


def steps_per_epoch(cfg: RunConfig, available: int) -> int:
    return min(available, cfg.max_steps) if cfg.max_steps else available


def _autocast(rt: Runtime) -> Any:
    import torch

    return torch.autocast(device_type=rt.device.type, dtype=rt.autocast_dtype, enabled=rt.autocast_dtype is not None)


def _to_device(batch: Any, rt: Runtime, channels_last: bool) -> tuple[Any, Any]:
    import torch

    x, y = batch
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = x.to(rt.device, non_blocking=True, memory_format=fmt)
    y = y.to(rt.device, non_blocking=True)
    return x, y


def grad_scaler(rt: Runtime) -> Any:
    """The run's loss scaler: active under fp16 only (a no-op otherwise). One per run: a new one starts at
    init_scale 2**16 (torch/amp/grad_scaler.py:126) and backs off by skipping steps whose gradients overflow
    (grad_scaler.py:371, 484-490), so a profiling pass with its own scaler could profile skipped steps the
    timed loop, its scale long settled, no longer takes."""
    import torch

    return torch.amp.GradScaler(rt.device.type, enabled=rt.precision == "fp16")


# Phase labels seen by torch.profiler in the profiling pass (profiling.py reads the same names).
PHASE_H2D = "h2d_copy"
PHASE_FORWARD = "forward"
PHASE_BACKWARD = "backward"
PHASE_OPTIMIZER = "optimizer"


class StepOutput(NamedTuple):
    """What one training step leaves on the device: the caller decides when (if ever) to pay a host sync to
    read it, and computes its own bookkeeping (`correct`) after the step's timed span."""

    loss: Any
    """The detached loss."""
    logits: Any
    """The detached logits."""
    labels: Any
    skipped: bool | None
    """The loss scaler skipped the optimizer step (None without a loss scaler: every precision but fp16)."""

    @property
    def images(self) -> int:
        return int(self.labels.shape[0])

    def correct(self) -> Any:
        """Count of correct predictions, a device tensor (argmax, compare, sum: three kernels)."""
        return (self.logits.argmax(1) == self.labels).sum()


@dataclass
class TrainStep:
    """One optimizer step on a batch, its phases labelled for the profiler; nothing else.

    Returns a StepOutput: the detached loss and logits, the labels and whether the loss scaler skipped the
    optimizer step. Nothing after the optimizer's step: the probe of the selftest's "timing vs CUDA events"
    ends its span there too (selftest/probe.py), and the accuracy's kernels are the loop's bookkeeping.
    """

    model: Any
    optimizer: Any
    scheduler: Any
    rt: Runtime
    channels_last: bool
    label_phases: bool = True
    """record_function ranges for the profiler; the timed loop turns them off (a few us per range)."""
    scaler: Any = None
    """The run's GradScaler (grad_scaler), shared by the timed loop and the profiling pass; None: a new one."""
    label_smoothing: float = 0.0
    """--label-smoothing, for the training loss only."""

    def __post_init__(self) -> None:
        import torch

        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=self.label_smoothing)
        if self.scaler is None:
            self.scaler = grad_scaler(self.rt)
        self._scale: float | None = None  # the loss scale after this step's last update: the next step's before

    def __call__(self, batch: Any) -> StepOutput:
        from torch.profiler import record_function

        phase = record_function if self.label_phases else (lambda _name: nullcontext())
        with phase(PHASE_H2D):
            x, y = _to_device(batch, self.rt, self.channels_last)
        with phase(PHASE_FORWARD), _autocast(self.rt):
            logits = self.model(x)
            loss = self.criterion(logits, y)
        with phase(PHASE_BACKWARD):
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()  # DDP's all-reduce overlaps this phase
        with phase(PHASE_OPTIMIZER):
            skipped = self._optimizer_step()
        return StepOutput(loss.detach(), logits.detach(), y, skipped)

    def _optimizer_step(self) -> bool | None:
        """The scaler's optimizer step and update, then the LR schedule's step unless the scaler skipped the
        optimizer's; whether it did (None without a loss scaler).

        A GradScaler skips the optimizer step when the gradients hold an inf or nan (torch/amp/grad_scaler.py:
        371, or the fused kernels' found_inf) and its update then multiplies the scale by backoff_factor < 1
        (:487-488, 549); any other update keeps or grows it. So a scale lower after update() than before
        is a skipped step (torch's AMP recipe compares get_scale() around update()). Stepping the schedule on
        it moved the LR on for a step that trained nothing. The scale before is the last update's, read then:
        one host read per fp16 step, after the step's work is queued, none mid-step."""
        if not self.scaler.is_enabled():  # its step() is optimizer.step(), its update() nothing
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.scheduler.step()
            return None
        before = self.scaler.get_scale() if self._scale is None else self._scale
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._scale = self.scaler.get_scale()
        skipped = self._scale < before
        if not skipped:
            self.scheduler.step()
        return skipped


@dataclass
class Controls:
    """The loop's data-driven decisions (run/steady.py): where warm-up ends, and `--until`'s stop."""

    warmup: WarmupEnd
    until: UntilStop | None = None

    def observe(self, warm: bool, t: StepTime, images: int) -> None:
        if warm:
            self.warmup.observe(t.total_s)
        elif self.until is not None:
            self.until.observe(t.total_s, images)

    def until_stops(self, steps_done: int) -> bool:
        """--until, at a window's wait once measuring (the same point on every rank): whether to stop now."""
        return self.until is not None and not self.warmup.is_warm(steps_done) and self.until.check()

    def records(self) -> tuple[schema.WarmupRule, schema.Until | None]:
        return self.warmup.record(), self.until.record() if self.until is not None else None


def controls(cfg: RunConfig, total_steps: int, decide: Callable[[bool], bool]) -> Controls:
    """The run's warm-up rule (fixed or auto, its cap half the run) and `--until`'s, if given."""
    from effbench.analysis import steady_state as ss

    if cfg.warmup_steps is None and total_steps < AUTO_MIN_STEPS:  # too short for the rule: as every run was
        n = few_steps_warmup(total_steps, cfg.compile)
        why = (f"{total_steps} steps: too few for MSER-5, which judges from {AUTO_MIN_STEPS}; the first {n} (5, at "
               "most half the steps)")  # fmt: skip
        warmup = WarmupEnd(n, few_steps=why)
    else:
        warmup = WarmupEnd(cfg.warmup_steps, cap=auto_warmup_cap(total_steps), decide=decide)
    until = None
    if cfg.until is not None:
        rule = ss.IntervalStop(relative_half_width=ss.parse_until(cfg.until))
        until = UntilStop(rule, cfg.until, window_steps=cfg.log_interval, decide=decide)
    return Controls(warmup, until)


@dataclass
class _Ledger:
    """One epoch's ended steps, tallied in order as the timer gives them back (`settle`: under the pipelined
    timing, after the window's one wait): warm-up and measured tallies, each step's times, `on_step`."""

    timer: StepTimer
    on_step: StepFn | None
    control: Controls
    data_only: bool = False
    """No model: the whole step is the batch's delivery (a pipelined step's few us between marks too)."""
    warmup: Tally = field(default_factory=Tally)
    measured: Tally = field(default_factory=Tally)
    steps: list[tuple[StepTime, bool, int]] = field(default_factory=list)
    """(times, warm-up, images) of each settled step."""

    @property
    def times(self) -> list[StepTime]:
        return [t for t, _, _ in self.steps]

    def settle(self, wait: bool = True) -> None:
        for t, (warm, images, skipped) in self.timer.flush(wait):
            if self.data_only:
                t = StepTime(t.data_s + t.compute_s, 0.0)
            (self.warmup if warm else self.measured).add(t, images, skipped)
            self.control.observe(warm, t, images)
            if self.on_step:
                self.on_step(warm, t, images, skipped)
            self.steps.append((t, warm, images))

    def settle_after_error(self) -> None:
        """The steps that ended before an error still count (the runner's warm-up tally, through on_step);
        no wait: a peer may be gone, and the device with it."""
        with contextlib.suppress(Exception):
            self.settle(wait=False)


def train_epochs(
    model: Any,
    data: Any,
    optimizer: Any,
    scheduler: Any,
    rt: Runtime,
    cfg: RunConfig,
    *,
    on_progress: ProgressFn | None = None,
    on_phase: PhaseFn | None = None,
    on_step: StepFn | None = None,
    scaler: Any = None,
    step_fn: Callable[[Any], StepOutput] | None = None,
    on_cut_short: CutShortFn | None = None,
) -> Generator[EpochResult, None, None]:
    """Train for cfg.epochs, yielding each finished epoch (train + validation). `scaler`: the run's
    (grad_scaler), so the profiling pass goes on from its scale; None: one of its own. The clock is the
    device's (timing.device_clock of rt.device and rt.device_api); `step_fn`: TrainStep unless a test gives
    its own, returning a StepOutput as TrainStep does. `on_cut_short`: given the epoch a signal (Ctrl-C,
    SIGTERM, SIGHUP) stopped, its completed steps, before the signal goes on up."""
    import torch

    if step_fn is None:
        step_fn = TrainStep(
            model, optimizer, scheduler, rt, bool(cfg.channels_last), label_phases=False, scaler=scaler,
            label_smoothing=cfg.label_smoothing,
        )  # fmt: skip
    validation_loss = torch.nn.CrossEntropyLoss()  # without --label-smoothing: comparable across values
    clock = device_clock(rt.device, rt.device_api)
    deliver = functools.partial(_to_device, rt=rt, channels_last=bool(cfg.channels_last))
    n_steps = steps_per_epoch(cfg, data.steps_per_epoch)
    global_step = 0
    agree = nonfinite_agreement(rt.device)  # under DDP: one all_gather per check, so the ranks stop together
    control = controls(cfg, cfg.epochs * n_steps, rank0_decides(rt.device))
    warm_rule = control.warmup
    nan_from = faults.nan_loss_from()  # test hook EFFBENCH_FAULT_NAN_LOSS (faults.py); None unless set
    between = _BETWEEN_STEPS.get()
    val_model = validation_module(model)
    val_shapes: frozenset[tuple[int, ...]] = frozenset()  # input shapes validated so far: warm (evaluate)

    for epoch in range(cfg.epochs):
        data.set_epoch(epoch)
        model.train()
        _phase_of(on_phase, warm_rule.is_warm(global_step))
        ledger = _Ledger(step_timer(clock, deliver, cfg.timing), on_step, control)
        stop = False
        timer, warmup, measured = ledger.timer, ledger.warmup, ledger.measured
        losses = torch.zeros(n_steps, device=rt.device)
        correct = torch.zeros(n_steps, device=rt.device, dtype=torch.int64)
        counts: list[int] = []
        epoch_start, checked, done = global_step, 0, 0
        settle = ledger.settle

        try:
            it = timer.time_data(lambda: iter(data.train))
            for step in range(n_steps):
                try:
                    batch = timer.wait_for(it)
                except StopIteration:
                    timer.discard()
                    break
                with timer.compute():
                    out = step_fn(batch)
                timer.end_step((warm_rule.is_warm(global_step), out.images, out.skipped))
                loss = out.loss
                if nan_from is not None and global_step >= nan_from:
                    loss = loss * float("nan")
                losses[step] = loss  # bookkeeping after the step's end: in no span
                correct[step] = out.correct()
                counts.append(out.images)
                done += 1
                global_step += 1
                if _warmup_ends(warm_rule, global_step, settle):  # in a wait: measuring starts from an idle stream
                    _phase_of(on_phase, False)
                if (step + 1) % cfg.log_interval == 0 or step + 1 == n_steps:
                    settle()  # the window's one wait (pipelined), before the read below that waits anyway
                    window = losses[checked : step + 1].tolist()  # one sync per interval: progress + divergence
                    check_finite(
                        window, epoch=epoch, first_step=checked, first_global_step=epoch_start + checked, agree=agree
                    )
                    checked = step + 1
                    if on_progress:
                        on_progress(epoch, step + 1, n_steps, window[-1])
                    # --until: at the window's wait, once measuring (the same point on every rank)
                    stop = control.until_stops(global_step)
                if between is not None:
                    between()
                if stop:
                    break
            settle()
        except BaseException as e:
            _after_error(e, epoch, ledger, on_cut_short, rt, losses, correct)
            raise
        if done == 0:
            raise no_training_images(data)
        loss_list = losses[:done].tolist()
        _check_tail(loss_list, checked, epoch=epoch, epoch_start=epoch_start, agree=agree)
        correct_list = correct[:done].tolist()
        images = sum(counts)
        step_rows = _rows(epoch, ledger, loss_list, correct_list)
        _enter(on_phase, "validation")
        sync_buffers_for_validation(model)  # every rank, before its first batch: a rank may have none
        val = evaluate(val_model, data.val, rt, cfg, validation_loss, clock, warm=val_shapes)
        val_shapes = val.shapes
        yield EpochResult(
            epoch=epoch,
            steps=done,
            images=images,
            data_time_s=warmup.data_time_s + measured.data_time_s,
            compute_time_s=warmup.compute_time_s + measured.compute_time_s,
            train_loss=_mean_over_images(loss_list, counts),
            train_top1=sum(correct_list) / images,  # > 0: an epoch without an image raised above
            val_loss=val.loss,
            val_top1=val.top1,
            val_time_s=val.time_s,
            val_images=val.images,
            warmup=warmup,
            measured=measured,
            step_rows=step_rows,
            val_warmup_time_s=val.warmup_time_s,
            warmup_rule=control.records()[0],
            until=control.records()[1],
        )
        if stop:  # --until: the interval is known; the epochs after this one are not run
            return


def _rows(epoch: int, ledger: _Ledger, losses: list[float] | None, correct: list[int] | None) -> list[StepRow]:
    """The epoch's steps.csv rows, 1-based as every file and line counts; no losses: empty loss and top-1."""
    return [
        StepRow(
            epoch=epoch + 1,
            step=i + 1,
            warmup=warm,
            images=images,
            loss=None if losses is None else losses[i],
            top1=None if correct is None else correct[i] / images,
            data_time_s=t.data_s,
            compute_time_s=0.0 if ledger.data_only else t.compute_s,
        )  # fmt: skip
        for i, (t, warm, images) in enumerate(ledger.steps)
    ]


def _mean_over_images(values: list[float], counts: list[int]) -> float:
    return sum(v * c for v, c in zip(values, counts, strict=True)) / sum(counts)


def _after_error(e: BaseException, epoch: int, ledger: _Ledger, on_cut_short: CutShortFn | None, rt: Runtime,
                 losses: Any = None, correct: Any = None) -> None:  # fmt: skip
    """The steps that ended before an error still count (ledger.settle_after_error); when a signal (Ctrl-C,
    SIGTERM, SIGHUP) stopped the epoch, the runner keeps them too (on_cut_short)."""
    ledger.settle_after_error()
    if on_cut_short is not None and isinstance(e, (KeyboardInterrupt, Interrupted)) and ledger.steps:
        on_cut_short(_cut_short(epoch, ledger, losses, correct, rt))


def _cut_short(epoch: int, ledger: _Ledger, losses: Any, correct: Any, rt: Runtime) -> EpochResult:
    """The epoch a signal stopped: its settled steps, no validation. Their losses and top-1 are read on the CPU
    only: on a GPU the read would wait for the device, and under DDP for a peer that may be gone."""
    n = len(ledger.steps)
    readable = losses is not None and rt.device.type == "cpu"  # --data-only has no losses
    rows = _rows(epoch, ledger, losses[:n].tolist() if readable else None, correct[:n].tolist() if readable else None)
    warmup, measured = ledger.warmup, ledger.measured
    return EpochResult(
        epoch=epoch, steps=n, images=sum(images for _, _, images in ledger.steps),
        data_time_s=warmup.data_time_s + measured.data_time_s,
        compute_time_s=warmup.compute_time_s + measured.compute_time_s,
        train_loss=None, train_top1=None, val_loss=None, val_top1=None, val_time_s=0.0, val_images=0,
        warmup=warmup, measured=measured, step_rows=rows, warmup_rule=ledger.control.records()[0],
        until=ledger.control.records()[1],
    )  # fmt: skip


def _check_tail(loss_list: list[float], checked: int, *, epoch: int, epoch_start: int, agree: AgreeFn) -> None:
    """The steps after the last interval's check (a loader shorter than n_steps), from the read made anyway; every
    rank has the same steps (DistributedSampler's equal shards), so all call agree() here or none."""
    if checked < len(loss_list):
        check_finite(loss_list[checked:], epoch=epoch, first_step=checked, first_global_step=epoch_start + checked,
                     agree=agree)  # fmt: skip


def _enter(on_phase: PhaseFn | None, name: str) -> None:
    if on_phase:
        on_phase(name)


def _phase_of(on_phase: PhaseFn | None, warm: bool) -> None:
    """Tell the runner whether the next step is warm-up or measured (run/phases.py: for signals)."""
    if on_phase:
        on_phase("warm-up" if warm else "epochs")


def _warmup_ends(rule: WarmupEnd, steps_done: int, settle: Callable[[], None]) -> bool:
    """Whether the warm-up ends after `steps_done` steps: a fixed count reached, or (auto, at its check points)
    the settled step times found settled. Settles the ended steps first: the rule reads their times, and the
    measured window starts after a wait."""
    if rule.fixed is not None:
        if steps_done != rule.fixed:
            return False
        settle()
        return True
    if not rule.due(steps_done):
        return False
    settle()
    return rule.check(steps_done)


def validation_module(model: Any) -> Any:
    """The module validation runs, chosen once per run: the model as trained, but under DDP its bare module
    (see `sync_buffers_for_validation`), under the model's own compiler when the DDP module was compiled.

    run/rank.py compiles the DDP wrapper, so the bare module `ddp.module` is plain eager code: validation of a
    `--compile` DDP run measured eager inference. The compiled bare module is built as OptimizedModule's own
    `__reduce__` rebuilds one, (module, dynamo_ctx) (torch/_dynamo/eval_frame.py:621-624): the same backend
    and options as training's. Built once, so its eval graph compiles once, in the first validation."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = getattr(model, "_orig_mod", model)  # torch.compile wraps the DDP module (run/rank.py)
    if not isinstance(ddp, DistributedDataParallel):
        return model
    if ddp is model:
        return ddp.module
    return type(model)(ddp.module, model.dynamo_ctx)


def sync_buffers_for_validation(model: Any) -> None:
    """Under DDP, the one buffer broadcast that DDP's first no-grad forward would have made (rank 0's running
    statistics, as before); validation then runs the bare module (`validation_module`).

    DDP broadcasts its buffers from rank 0 in the first forward after a training forward
    (torch/nn/parallel/distributed.py:1782-1783 `_sync_buffers`, 1829-1842 `require_forward_param_sync`). A
    rank whose validation shard is empty (fewer images than ranks: the shards are not padded) or whose images
    were all unreadable never made that forward: the others waited in the broadcast, it waited in the next
    gather, and the job hung until the process-group timeout. Here every rank makes the broadcast, whatever
    its shard holds, and validation itself holds no collective. Called every epoch, by every rank."""
    from torch.nn.parallel import DistributedDataParallel

    ddp = getattr(model, "_orig_mod", model)
    if isinstance(ddp, DistributedDataParallel) and ddp.will_sync_module_buffers():
        ddp._sync_buffers()


@dataclass(frozen=True)
class Validation:
    """One validation pass (`evaluate`)."""

    loss: float | None
    top1: float | None
    images: int
    time_s: float
    """From the first batch to the training stream's end of the last, the warm-up forwards left out."""
    warmup_time_s: float
    """The warm-up forwards: one per input shape the run had not validated yet, its output dropped."""
    shapes: frozenset[tuple[int, ...]]
    """The input shapes validated in the run so far (`warm` and this pass's): the next pass's `warm`."""


def _warm_up(model: Any, x: Any, rt: Runtime, clock: DeviceClock) -> float:
    """One forward of `x` whose output is dropped, between two waits for the training stream: its seconds."""
    clock.sync_stream()  # the batches before it, and this batch's copy, are validation time
    t0 = clock.now()
    with _autocast(rt):
        model(x)
    clock.sync_stream()  # its compilation, autotuning and kernels end here
    return clock.now() - t0


def evaluate(
    model: Any,
    loader: Any,
    rt: Runtime,
    cfg: RunConfig,
    criterion: Any,
    clock: DeviceClock | None = None,
    *,
    warm: frozenset[tuple[int, ...]] = frozenset(),
) -> Validation:
    """Mean loss, top-1, images seen and seconds over the validation loader (capped by --max-val-steps).

    The seconds run from the first batch to the training stream's end of the last one: the clock is read
    after that wait, so the validation kernels still queued when the loop ends are in them.

    The first forward at an input shape (the first validation's first batch, its last and shorter one) also
    holds one-off costs: torch.compile traces and compiles the eval graph (and again for a new batch size),
    cuDNN's benchmark mode times its algorithms for the new shape. Epoch 1's val_time_s held them. Such a
    batch, a shape not in `warm`, now first runs one forward of its own, output dropped, timed apart as
    `warmup_time_s`; then it is validated as every other batch. So every pass's `time_s` times the same work,
    and the warm-up is reported apart, as the training warm-up is (inference mode and eval mode: the extra
    forward changes no weight and no statistic)."""
    import torch

    clock = clock if clock is not None else device_clock(rt.device, rt.device_api)
    t0 = clock.now()
    model.eval()
    loss_sum = torch.zeros((), device=rt.device)
    correct = torch.zeros((), device=rt.device, dtype=torch.int64)
    seen = 0
    shapes = set(warm)
    warmup_s = 0.0
    with torch.inference_mode():
        # islice stops before it asks for the batch past --max-val-steps: a fetched and dropped batch was a
        # decode inside val_time_s (DALI queues the next run at each __next__)
        for batch in itertools.islice(loader, cfg.max_val_steps):
            x, y = _to_device(batch, rt, bool(cfg.channels_last))
            if tuple(x.shape) not in shapes:
                warmup_s += _warm_up(model, x, rt, clock)
                shapes.add(tuple(x.shape))
            with _autocast(rt):
                logits = model(x)
                loss_sum += criterion(logits.float(), y) * y.shape[0]
            correct += (logits.argmax(1) == y).sum()
            seen += int(y.shape[0])
    clock.sync_stream()  # the queued validation work is validation time
    elapsed = clock.now() - t0 - warmup_s
    model.train()
    done = frozenset(shapes)
    if seen == 0:
        return Validation(None, None, 0, elapsed, warmup_s, done)
    return Validation(loss_sum.item() / seen, correct.item() / seen, seen, elapsed, warmup_s, done)


def data_epochs(
    data: Any,
    rt: Runtime,
    cfg: RunConfig,
    *,
    on_progress: ProgressFn | None = None,
    on_phase: PhaseFn | None = None,
    on_step: StepFn | None = None,
    on_cut_short: CutShortFn | None = None,
) -> Generator[EpochResult, None, None]:
    """--data-only: the training loader's epochs, delivered to the device, with no model.

    Each step is the training loop's data span (timing.StepTimer.wait_for: next(), the copy to the device,
    a no-op for batches made there), timed as training's under the same --timing: throughput is images/s
    delivered, warm-up excluded as in training.
    """
    clock = device_clock(rt.device, rt.device_api)
    deliver = functools.partial(_to_device, rt=rt, channels_last=bool(cfg.channels_last))
    n_steps = steps_per_epoch(cfg, data.steps_per_epoch)
    global_step = 0
    between = _BETWEEN_STEPS.get()
    control = controls(cfg, cfg.epochs * n_steps, rank0_decides(rt.device))
    warm_rule = control.warmup

    for epoch in range(cfg.epochs):
        data.set_epoch(epoch)
        _phase_of(on_phase, warm_rule.is_warm(global_step))
        ledger = _Ledger(step_timer(clock, deliver, cfg.timing), on_step, control, data_only=True)
        stop = False
        timer, warmup, measured, settle = ledger.timer, ledger.warmup, ledger.measured, ledger.settle

        try:
            it = timer.time_data(lambda: iter(data.train))
            for step in range(n_steps):
                try:
                    images = int(timer.wait_for(it)[1].shape[0])  # the same data span as training's
                except StopIteration:
                    timer.discard()
                    break
                with timer.compute():
                    pass  # nothing to compute: the step ends with its batch on the device
                timer.end_step((warm_rule.is_warm(global_step), images, None))
                global_step += 1
                if _warmup_ends(warm_rule, global_step, settle):
                    _phase_of(on_phase, False)
                if (step + 1) % cfg.log_interval == 0 or step + 1 == n_steps:
                    settle()
                    if on_progress:
                        on_progress(epoch, step + 1, n_steps, float("nan"))
                    stop = control.until_stops(global_step)
                if between is not None:
                    between()
                if stop:
                    break
            settle()
        except BaseException as e:
            _after_error(e, epoch, ledger, on_cut_short, rt)
            raise
        rows = [
            StepRow(epoch=epoch + 1, step=i + 1, warmup=warm, images=images, loss=None, top1=None,
                    data_time_s=t.data_s, compute_time_s=0.0)
            for i, (t, warm, images) in enumerate(ledger.steps)
        ]  # fmt: skip
        if not rows:
            raise no_training_images(data)
        yield EpochResult(
            epoch=epoch,
            steps=len(rows),
            images=int(sum(r.images for r in rows)),
            data_time_s=warmup.data_time_s + measured.data_time_s,
            compute_time_s=0.0,
            train_loss=None,
            train_top1=None,
            val_loss=None,
            val_top1=None,
            val_time_s=0.0,
            val_images=0,
            warmup=warmup,
            measured=measured,
            step_rows=rows,
            warmup_rule=control.records()[0],
            until=control.records()[1],
        )
        if stop:
            return


def compile_time_s(warmup_step_times_s: list[float], measured_step_times_s: list[float]) -> float | None:
    """torch.compile's cost, estimated as the first step's time (where compilation happens) minus
    the median measured step; None without both. Pure."""
    if not warmup_step_times_s or not measured_step_times_s:
        return None
    return max(0.0, warmup_step_times_s[0] - statistics.median(measured_step_times_s))

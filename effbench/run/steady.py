"""The training loop's two data-driven decisions (analysis/steady_state.py decides, this applies): where the
warm-up ends (`--warmup-steps auto`, MSER-5) and when the measurement stops (`--until ci:X%`).

Both are taken at fixed points of the loop, the same on every rank (the warm-up every BATCH_STEPS steps, the
stop at each --log-interval window's wait), and under DDP they are rank 0's (launch/distributed.rank0_decides),
so every rank's measured window starts and ends at the same step. The warm-up ends *at the check* that found
the step times settled, not back at MSER-5's cut: the steps between stay warm-up, so the measured window's
every figure (throughput, utilisation, peak memory) covers the same steps from the phase change on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from effbench import schema
from effbench.analysis import steady_state as ss


@dataclass
class WarmupEnd:
    """Where the run's warm-up ends: `fixed` steps (--warmup-steps N), or found from the step times (auto)."""

    fixed: int | None
    """--warmup-steps N; None: auto."""
    few_steps: str | None = None
    """auto on a run too short for the rule: why `fixed` holds the short run's count instead."""
    cap: int = 0
    """auto: the most warm-up steps (auto_warmup_cap)."""
    floor: int = ss.MIN_WARMUP_STEPS
    """auto: steps always excluded (the first: compilation, lazy initialisation)."""
    decide: Callable[[bool], bool] = lambda mine: mine
    times_s: list[float] = field(default_factory=list)
    """The warm-up steps' times so far, in order."""
    end: int | None = None
    """The global step where warm-up ended (the first measured step's index); None while undecided."""
    found: ss.Warmup | None = None
    last: ss.Warmup | None = None
    """MSER-5's finding at the previous check."""

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def is_warm(self, global_step: int) -> bool:
        """Whether the step at this 0-based index of the run is warm-up."""
        if self.fixed is not None:
            return global_step < self.fixed
        return self.end is None or global_step < self.end

    def due(self, steps_done: int) -> bool:
        """Whether the loop must check (after `steps_done` steps, its ended steps settled): auto, undecided, at a
        multiple of BATCH_STEPS or at the cap."""
        return self.auto and self.end is None and (steps_done % ss.BATCH_STEPS == 0 or steps_done >= self.cap)

    def observe(self, step_s: float) -> None:
        if self.auto and self.end is None:
            self.times_s.append(step_s)

    def check(self, steps_done: int) -> bool:
        """After `steps_done` settled steps: whether the warm-up ends here (then `end` and `found` are set).

        MSER-5 reads the steps so far, not the whole run: on a few batches of a slow start it can read the slow
        part as steady. So the times count as settled only when MSER-5 finds them so (a cut in the first half)
        at two checks in a row, with the same cut: a slow start still under way moves the cut as it ends."""
        found = ss.mser5(
            self.times_s, min_steps=min(self.floor, len(self.times_s)), max_steps=max(self.cap, self.floor)
        )
        previous, self.last = self.last, found
        stable = (
            found.settled and previous is not None and previous.settled and previous.warmup_steps == found.warmup_steps
        )
        at_cap = steps_done >= self.cap
        if self.decide(stable or at_cap):
            self.end, self.found = steps_done, found if stable or found.settled is False else _unsettled(found)
            return True
        return False

    def record(self) -> schema.WarmupRule:
        if self.few_steps is not None:
            return schema.WarmupRule(rule="auto, too few steps", steps=self.fixed, settled=None, reason=self.few_steps)
        if self.fixed is not None:
            return schema.WarmupRule(rule="fixed", steps=self.fixed, settled=None,
                                     reason=f"--warmup-steps {self.fixed}")  # fmt: skip
        found = self.found
        if found is None:  # the run ended (or was stopped) before the rule decided
            steps = len(self.times_s)
            return schema.WarmupRule(rule=ss.RULE_MSER5, steps=steps, settled=False, cap=self.cap,
                                     reason=f"the run ended after {steps} step(s), before the step times settled")  # fmt: skip
        if found.settled:
            reason = (f"{found.reason}; checked every {ss.BATCH_STEPS} steps, so warm-up ended at step {self.end}, "
                      "the first check that found them settled")  # fmt: skip
        else:
            reason = f"the cap of {self.cap} warm-up steps (half the run) was reached: {found.reason}"
        return schema.WarmupRule(rule=ss.RULE_MSER5, steps=self.end, settled=found.settled, cut_at_step=found.warmup_steps,
                                 cap=self.cap, reason=reason)  # fmt: skip


def _unsettled(found: ss.Warmup) -> ss.Warmup:
    """A finding MSER-5 called settled at the cap's check only, not yet at two checks in a row."""
    return ss.Warmup(found.warmup_steps, found.rule, False, f"{found.reason}, found at the cap's check only")


@dataclass
class UntilStop:
    """`--until ci:X%`: measured windows of `window_steps` steps, and whether their interval has said enough."""

    rule: ss.IntervalStop
    target: str
    """The option as given, canonical: `ci:1%`."""
    window_steps: int
    decide: Callable[[bool], bool] = lambda mine: mine
    windows_img_s: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    _images: float = 0.0
    _time_s: float = 0.0
    _in_window: int = 0
    last: ss.StopDecision | None = None
    stopped: bool = False

    def observe(self, step_s: float, images: int) -> None:
        """A measured step, as tallied."""
        self.steps += 1
        self.seconds += step_s
        self._images += images
        self._time_s += step_s
        self._in_window += 1

    def _close_window(self) -> None:
        """At a wait: the steps since the previous wait are one window when they are a whole window_steps. Windows
        end at the waits, where the checks are: counted from the warm-up's end instead, a warm-up ending between
        two waits left every check judging windows that had ended steps before. A part window (from the warm-up's
        end to the next wait, or an epoch's short last one) counts in the headline, not in the interval."""
        if self._in_window == self.window_steps and self._time_s > 0:
            self.windows_img_s.append(self._images / self._time_s)
        self._images, self._time_s, self._in_window = 0.0, 0.0, 0

    def check(self) -> bool:
        """At a window's wait: whether to stop measuring now (rank 0's decision under DDP)."""
        self._close_window()
        self.last = ss.stop_decision(self.rule, self.windows_img_s, steps=self.steps, elapsed_s=self.seconds)
        self.stopped = self.decide(self.last.done)
        return self.stopped

    def record(self) -> schema.Until:
        last = self.last or ss.stop_decision(self.rule, self.windows_img_s, steps=self.steps, elapsed_s=self.seconds)
        reason = last.reason if self.stopped else "the run's steps ran out before the interval was reached"
        got = last.interval
        return schema.Until(target=self.target, half_width_pct=last.half_width_pct,
                            throughput_img_s=got.throughput_img_s if got else None,
                            ci_low_img_s=got.ci_low_img_s if got else None,
                            ci_high_img_s=got.ci_high_img_s if got and math.isfinite(got.ci_high_img_s) else None,
                            lag1_autocorrelation=got.lag1_autocorrelation if got else None,
                            windows=len(self.windows_img_s), window_steps=self.window_steps, steps=self.steps,
                            reached=self.stopped and last.reason == "interval reached", reason=reason)  # fmt: skip

"""Pure: measured steps -> K throughput windows -> median and 95% CI (`--repeats K`).

Why windows of one run rather than K runs: a cell is measured once, so its K samples come from
splitting its measured steps (warm-up excluded, epochs in order) into K contiguous windows as equal as
the count allows (stats.window_bounds: n // K steps each, the first n % K one step more, so 7 steps in 5
windows are 2, 2, 1, 1, 1; no step is dropped), recorded as `window_steps`; each window's throughput is
`analysis.throughput.job_throughput` of every rank's images and time in it (all ranks' images over the
slowest rank's time), the same definition as the run's headline. K defaults to min(5, measured steps).

Works on steps.csv's typed rows (results.StepRow, read_steps) and on the step rows the training loop yields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from effbench import safe_files
from effbench.analysis import stats
from effbench.analysis.throughput import job_throughput, slowest
from effbench.errors import EffbenchError
from effbench.results import STEPS_FILE, StepRow, StepValueError

if TYPE_CHECKING:
    from effbench import schema

DEFAULT_WINDOWS = 5


def measured_steps(step_rows: Iterable[StepRow | Mapping[str, Any]]) -> list[StepRow]:
    """The steps that count (warm-up flag false), typed, in the order they ran."""
    return [r for r in _typed(step_rows) if not r.warmup]


def _typed(step_rows: Iterable[StepRow | Mapping[str, Any]]) -> list[StepRow]:
    """Step rows typed: the loop's and steps.csv's already are (results.StepRow); a mapping is read by name."""
    return [r if isinstance(r, StepRow) else StepRow.of(r) for r in step_rows]


class _WindowPart(NamedTuple):
    """One rank's steps inside one window: a part for analysis/throughput (images, time_s) and its data wait."""

    images: float
    data_time_s: float
    time_s: float


def rank_windows(steps_by_rank: Sequence[Sequence[StepRow | Mapping[str, Any]]], repeats: int | None) -> dict[str, Any]:
    """Per-window samples and their summaries (results.json's throughput_windows, built through schema.Windows);
    no window when nothing was measured.

    `steps_by_rank`: each rank's measured steps in order. Window i covers the same step indices on every
    rank, and its throughput is `job_throughput` of the ranks' images and times in it: the headline's
    definition, so one window over all steps gives the headline figure exactly.
    """
    ranks = [_typed(r) for r in steps_by_rank if r]
    n = min((len(r) for r in ranks), default=0)
    k = repeats if repeats is not None else DEFAULT_WINDOWS
    thr, step_ms, share, sizes = [], [], [], []
    for start, end in stats.window_bounds(n, k):
        parts = []
        for r in ranks:
            part = r[start:end]
            data = sum(s.data_time_s for s in part)
            parts.append(_WindowPart(sum(s.images for s in part), data, data + sum(s.compute_time_s for s in part)))
        rate = job_throughput(parts)
        slow = slowest(parts)
        if rate is None or slow is None:
            continue
        thr.append(rate)
        sizes.append(end - start)
        step_ms.append(1000.0 * slow.time_s / (end - start))
        share.append(slow.data_time_s / slow.time_s)
    from effbench import schema

    if not thr:
        return schema.Windows(requested=k, windows=0, steps=n, ranks=len(ranks)).model_dump(exclude_unset=True)
    fix = more_windows_fix(n, stats.MIN_SAMPLES_FOR_CI)

    def stat(samples: list[float], upper: float | None = None) -> schema.Stat:
        return schema.Stat(**stats.summarize(samples, lower=0.0, upper=upper, too_few_fix=fix).to_dict())

    def key(samples: Callable[[schema.Windows], Any]) -> str:  # a summary is keyed by its samples' field
        return schema.field_path(schema.Windows, samples)

    w = schema.Windows(
        requested=k, windows=len(thr), steps=n, ranks=len(ranks), window_steps=sizes,
        # the record's lists may hold null (a NaN written by an older run); these never do
        throughput_img_s=list[float | None](thr), step_time_ms=list[float | None](step_ms),
        data_time_share=list[float | None](share),
        summary={
            key(lambda w: w.throughput_img_s): stat(thr),
            key(lambda w: w.step_time_ms): stat(step_ms),
            key(lambda w: w.data_time_share): stat(share, upper=1.0),
        },
    )  # fmt: skip
    return w.model_dump(exclude_unset=True)  # results.json's section, as the run writes it (a dict)


def wait_windows(step_rows: Iterable[StepRow | Mapping[str, Any]], window_steps: int) -> list[float]:
    """The windows `--until` judges, read back from one rank's steps (steps.csv): per epoch, the steps between
    two of the loop's waits (after every `window_steps` steps of the epoch, by steps.csv's 1-based `step`), each
    images / time. A window holding a warm-up step, or an epoch's short last one, is left out, as the loop
    leaves it out (run/steady.py UntilStop)."""
    groups: dict[tuple[int | None, int], list[StepRow]] = {}
    for r in _typed(step_rows):
        if r.step is None:
            raise ValueError("step rows without a step number cannot be placed between the waits")
        groups.setdefault((r.epoch, (r.step - 1) // window_steps), []).append(r)
    rates = []
    for part in groups.values():
        time_s = sum(r.data_time_s + r.compute_time_s for r in part)
        if len(part) == window_steps and not any(r.warmup for r in part) and time_s > 0:
            rates.append(sum(r.images for r in part) / time_s)
    return rates


def more_windows_fix(steps: int | None, needed: int) -> str:
    """What gives `needed` windows: --repeats while the measured steps allow it; when they are fewer (a window
    holds at least one step, and config refuses --repeats above the measured steps), more measured steps."""
    if steps is not None and steps < needed:
        return (
            f"only {steps} measured step(s), at most one window each: raise --max-steps or --epochs, "
            "or lower --warmup-steps"
        )
    return f"raise --repeats to {needed} or more"


def window_sizes(w: schema.Windows) -> list[int] | None:
    """The measured steps in each window: recorded, or for a record written before `window_steps` existed,
    the split that made them (stats.window_bounds of its steps and requested windows); None when unknown."""
    if w.window_steps is not None:
        return list(w.window_steps)
    if w.steps is None or w.requested is None or not w.windows:
        return None
    bounds = stats.window_bounds(w.steps, w.requested)
    return [e - b for b, e in bounds] if len(bounds) == w.windows else None


def describe_windows(w: schema.Windows) -> str:
    """ "5 windows of 2 measured steps each", or "5 windows (2 of 2 measured steps, 3 of 1)" when the steps
    do not divide evenly: what each window's throughput sample covers."""
    n = w.windows
    sizes = window_sizes(w)
    if not sizes:
        return f"{n} windows"
    hi, lo = max(sizes), min(sizes)
    if hi == lo:
        return f"{n} windows of {hi} measured step{'s' if hi != 1 else ''} each"
    return f"{n} windows ({sizes.count(hi)} of {hi} measured steps, {sizes.count(lo)} of {lo})"


def summary_of(w: schema.Windows, samples: Callable[[schema.Windows], Any]) -> schema.Stat | None:
    """The summary of one of the windows' sample lists: `summary_of(w, lambda w: w.throughput_img_s)`
    (the summary is keyed by the samples' field name, as rank_windows writes it)."""
    from effbench import schema

    return w.summary.get(schema.field_path(schema.Windows, samples)) if w.summary else None


def throughput_windows(step_rows: Iterable[StepRow | Mapping[str, Any]], repeats: int | None) -> dict[str, Any]:
    """Windows of one rank's step rows (a one-process run, or steps.csv read back)."""
    return rank_windows([measured_steps(step_rows)], repeats)


def read_steps(run_dir: Path) -> list[StepRow]:
    """steps.csv of a run folder, typed; [] when absent (a run that never stepped)."""
    path = Path(run_dir) / STEPS_FILE
    if not path.exists() and not path.is_symlink():
        return []
    try:  # a regular file of bounded size only (a FIFO would block the reader forever)
        rows = safe_files.read_csv_rows(path, fix="rerun the benchmark")
    except FileNotFoundError:
        return []
    typed = []
    for i, row in enumerate(rows, start=2):  # line 1 is the header
        if None in row or None in row.values():  # DictReader: extra fields under None, missing ones as None
            raise EffbenchError(
                str(path), f"line {i} does not have the header's {len(row) - (None in row)} fields: the file is "
                "truncated or not effbench's; rerun the benchmark",
            )  # fmt: skip
        try:  # the figures the windows read must be numbers: a hand-edited steps.csv is input too
            typed.append(StepRow.of(row))
        except StepValueError as e:
            raise EffbenchError(str(path), f"line {i}, {e}; rerun the benchmark") from None
    return typed


def windows_of(
    record: schema.Results, step_rows: Sequence[StepRow | Mapping[str, Any]] | None = None
) -> schema.Windows:
    """The run's windows: recorded in results.json when the run wrote them, else from its steps.

    steps.csv holds rank 0's steps only, so a multi-rank run without recorded windows gets none rather
    than rank 0's figures passed off as the job's.
    """
    from effbench import schema

    saved = record.throughput_windows
    if saved is not None and saved.windows is not None:
        return saved
    if (record.world_size or 1) > 1:
        return schema.Windows(windows=0, steps=0, note="multi-rank run without recorded windows")
    return schema.Windows.model_validate(throughput_windows(step_rows or [], record.config.repeats))


def throughput_summary(
    record: schema.Results, step_rows: Sequence[StepRow | Mapping[str, Any]] | None = None
) -> stats.Summary | None:
    s = summary_of(windows_of(record, step_rows), lambda w: w.throughput_img_s)
    return stats.Summary.from_stat(s) if s else None

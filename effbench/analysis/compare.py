"""Pure: two runs (or two sweeps) -> per-metric deltas with 95% CIs and a plain verdict.

    effbench compare results/A results/B             two run folders
    effbench compare results/sweep-x results/sweep-y two sweep folders: cells matched by their swept values
    effbench compare 20261125-0612 latest            a unique start of a name in ./results, and the run that
                                                     finished last (a sweep's: the sweep that did)

Throughput and the data-wait share, measured per throughput window, get Welch's 95% interval for
mean(B) - mean(A) over the windows; when it includes 0 the difference is called "within noise". The throughput
shown is each run's own figure (the one `report` prints); its windows give the interval. The step time is the
same measurement seen per step, so it gets no test of its own: its row carries the throughput's answer (one
answer per pair), or says the runs' images per step differ.
Single-valued metrics (final loss and top-1, peak memory) get their delta and no interval: one run
cannot say how much they vary. No torch import; only `resolve_folder` reads the disk (a folder listing, and for
`latest` each candidate's end time).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from effbench import results
from effbench.results import StepRow
from effbench.analysis import roofline, stats
from effbench.analysis import windows
from effbench.datasets import chance_note
from effbench.errors import EffbenchError
from effbench.fmt import decimals, fit_columns, interval, num, widest, wrap_cell, wrap_text
from effbench.sweep.manifest import MANIFEST_FILE
from effbench.sweep.spec import ROUND, configuration_key

if TYPE_CHECKING:
    from effbench import schema
    from effbench.report.sweep_tables import CellRow


@dataclass(frozen=True)
class WindowMetric:
    """A figure measured per throughput window: its list in the windows (schema.Windows)."""

    of: Callable[[schema.Windows], Any]
    label: str
    higher_better: bool
    percent: bool = False
    """A share: a fraction in the windows, printed in percent (units in the label), so the delta is in percentage
    points and `decimals` keeps the digits a share of 0.0012% needs."""

    @property
    def key(self) -> str:
        from effbench import schema

        return schema.field_path(schema.Windows, self.of)


WINDOW_METRICS = (
    WindowMetric(lambda w: w.throughput_img_s, "throughput (img/s)", True),
    WindowMetric(lambda w: w.step_time_ms, "step time (ms)", False),
    WindowMetric(lambda w: w.data_time_share, "data-wait share (% of step time)", False, percent=True),
)
STEP_TIME = WINDOW_METRICS[1]  # decided by the throughput's test (step_time_delta)
# (the run's figure, label, higher is better)
SINGLE_METRICS: tuple[tuple[Callable[[schema.Results], float | None], str, bool], ...] = (
    (lambda r: r.final.train_loss, "final train loss", False),
    (lambda r: r.final.train_top1, "final train top-1", True),
    (lambda r: r.final.val_top1, "final val top-1", True),
    (lambda r: r.peak_mem_gib, "peak device memory (GiB)", False),
)
# config.json's notes beside the values that ran: what was asked and why it did not take effect (config.py)
CONFIG_NOTES = ("requested", "no_effect")


@dataclass(frozen=True)
class MetricDelta:
    metric: str
    a: str
    b: str
    delta: str
    delta_pct: str
    ci: str
    verdict: str
    significant: bool | None
    """True: outside noise; False: within noise; None: no interval (one value on a side)."""


def _digits(metric: str) -> int:
    return 4 if "top-1" in metric or "loss" in metric else 2


# A change in the data-wait share smaller than this (0.1 percentage point of the step) moves throughput by
# at most 0.1%, below any figure this tool prints: such a change is "negligible", however tight its interval.
NEGLIGIBLE_SHARE = 0.001


def _side(point: float, s: stats.Summary, k: int) -> str:
    """One run's figure as a side column shows it: the figure, then its windows' 95% interval when it has one."""
    ci = f" {interval(s.ci_low, s.ci_high, k)}" if s.ci_low is not None else ""
    return f"{num(point, k)}{ci}"


def _pct(delta: float, base: float | None) -> str:
    return f"{100 * delta / base:+.1f}%" if base else "-"


def window_delta(
    label: str,
    a: Sequence[float],
    b: Sequence[float],
    higher_better: bool,
    *,
    points: tuple[float | None, float | None] = (None, None),
    lower: float | None = 0.0,
    upper: float | None = None,
    samples: str = "windows",
) -> MetricDelta:
    """B - A of one windowed metric, from Welch's 95% interval over its windows. `points`: the runs' own figures
    (the throughput headline) shown and differenced in place of the window means, so compare prints what `report`
    prints; the windows give the interval and decide noise. When the figures and an interval that excludes 0 point
    opposite ways, nothing is called a change ("cannot tell"). A share comes in percent, its delta in percentage
    points (pp)."""
    d = stats.difference(a, b)
    sa, sb = stats.summarize(a, lower=lower, upper=upper), stats.summarize(b, lower=lower, upper=upper)
    pa = points[0] if points[0] is not None else sa.mean
    pb = points[1] if points[1] is not None else sb.mean
    share = "share" in label
    k = decimals((pa, pb, pb - pa)) if share else _digits(label)
    delta = pb - pa
    too_few = stats.too_few_to_judge(len(a), len(b), samples=samples)
    ci = "-" if d.ci_low is None or too_few else interval(d.ci_low, d.ci_high, k, signed=True)
    significant = None if too_few else d.significant
    if too_few:  # the run report prints no interval for such a run: neither may compare
        verdict = too_few
    elif share and abs(d.delta) < 100 * NEGLIGIBLE_SHARE:  # in percentage points
        verdict, significant = f"negligible (under {100 * NEGLIGIBLE_SHARE:.1f} percentage point)", False
    elif not d.significant:
        verdict = "within noise"
    elif delta * d.delta <= 0:  # the figures say one way (or no way), the windows' interval the other
        verdict, significant = (
            f"cannot tell: {_higher(delta)} by the runs' figures, {_higher(d.delta)} by their windows",
            None,
        )
    else:
        verdict = f"B {_higher(d.delta)} ({'better' if (d.delta > 0) == higher_better else 'worse'}), outside noise"
    shown = f"{delta:+,.{k}f}" + (" pp" if share else "")
    return MetricDelta(label, _side(pa, sa, k), _side(pb, sb, k), shown, _pct(delta, pa), ci, verdict, significant)


def _higher(delta: float) -> str:
    return "higher" if delta > 0 else "lower" if delta < 0 else "equal"


def images_per_step(record: schema.Results) -> float | None:
    """The measured steps' images per step, all ranks together (measured images / measured steps), else the
    global batch size; None when neither is known."""
    m = record.measured
    if m is not None and m.steps and m.images:
        return m.images / m.steps
    return record.global_batch_size or None


def step_time_delta(
    label: str,
    a: Sequence[float],
    b: Sequence[float],
    throughput: MetricDelta,
    per_step: tuple[float | None, float | None],
    sizes: tuple[Sequence[int] | None, Sequence[int] | None],
) -> MetricDelta:
    """B - A of the step time, decided by the throughput row's test (`throughput`), never by a test of its own:
    at equal images per step a step time is images per step over the throughput, so the two rows are one
    measurement and give one answer (a second test, in the other unit, once called the same pair within noise
    and outside it). Each side is the run's mean step time over its measured steps (the windows' mean weighted by
    their steps). Runs of different images per step have no step time to compare: the row says so."""
    sa, sb = stats.summarize(a, lower=0.0), stats.summarize(b, lower=0.0)

    def mean_step(xs: Sequence[float], n: Sequence[int] | None) -> float:
        if n is None or len(n) != len(xs) or not sum(n):
            return stats.mean(xs)
        return math.fsum(x * k for x, k in zip(xs, n, strict=True)) / sum(n)

    pa, pb = mean_step(a, sizes[0]), mean_step(b, sizes[1])
    k = _digits(label)
    delta = pb - pa
    ia, ib = per_step
    ci = "-"
    if throughput.significant is None:  # too few windows, no measured step, figures against windows
        verdict, significant = throughput.verdict, None
    elif ia is None or ib is None or not math.isclose(ia, ib, rel_tol=1e-9):
        shown = ", ".join(f"{s} {'?' if i is None else f'{i:,.4g}'}" for s, i in (("A", ia), ("B", ib)))
        verdict, significant = f"images per step differ or unknown ({shown}): throughput decides", None
    elif not throughput.significant:
        verdict, significant, ci = throughput.verdict, False, SAME_TEST
    else:  # outside noise: the throughput's direction, turned over (higher throughput: shorter steps)
        slower = throughput.verdict.startswith("B lower")
        verdict, significant, ci = (
            f"B {'higher (worse)' if slower else 'lower (better)'}, outside noise",
            True,
            SAME_TEST,
        )
    return MetricDelta(
        label, _side(pa, sa, k), _side(pb, sb, k), f"{delta:+,.{k}f}", _pct(delta, pa), ci, verdict, significant
    )


# The step-time row's interval column: its answer is the throughput row's
SAME_TEST = "throughput's"


def _measured_steps(record: schema.Results) -> int | None:
    return record.measured.steps if record.measured else None


def no_measurement(record: schema.Results) -> str | None:
    """Why a run has no windowed figures, in the run's own terms; None when it has measured steps."""
    steps = _measured_steps(record)
    if steps:
        return None
    status = record.shown_status or "unknown"
    return f"no measured step (status {status})" if steps == 0 or status != "ok" else "no measured step"


@dataclass(frozen=True)
class LikeForLike:
    """A condition two runs must share for compare to weigh one against the other: when `of` differs, compare
    refuses the pair (one line naming `option`, exit 2) rather than print a difference that measures the
    condition. `refusal(a_value, b_value)`: the line's text, what differs and the fix."""

    option: str
    of: Callable[[schema.Results], object]
    refusal: Callable[[Any, Any], str]


def _timing_refusal(ta: object, tb: object) -> str:
    # per-step timing drains the device twice a step (5-9% of a host-bound model's throughput on a GPU), so a
    # difference between the two timings is partly the timer's
    return (
        f'A was timed {ta} and B {tb}: their figures are not like for like (docs/methodology.md, "What each span '
        f'holds"); rerun B with --timing {ta}, or A with --timing {tb}'
    )


def _data_only_refusal(a_only: object, b_only: object) -> str:
    def kind(only: object) -> str:
        return "a data-only run" if only else "a training run"

    return (
        f"A is {kind(a_only)} and B {kind(b_only)}: a data-only run's img/s is the loader's delivery, a training "
        "run's the whole step's; compare two runs of one kind"
    )


# Every condition a pair of runs must share; a new one is one more entry.
LIKE_FOR_LIKE: tuple[LikeForLike, ...] = (
    LikeForLike("--timing", results.timing_of, _timing_refusal),
    LikeForLike("--data-only", lambda r: bool(r.data_only), _data_only_refusal),
)


def check_like_for_like(a: schema.Results, b: schema.Results) -> None:
    """Refuse a pair that differs in a condition of LIKE_FOR_LIKE: one line naming its option, exit 2."""
    for check in LIKE_FOR_LIKE:
        va, vb = check.of(a), check.of(b)
        if va != vb:
            raise EffbenchError(check.option, check.refusal(va, vb))


def run_label(name: str, record: schema.Results) -> str:
    """A run as compare's header names it: its path, and its status when it did not end `ok` (a `dead` or
    `running` run's figures are those of the epochs it wrote)."""
    return name if record.status == "ok" else f"{name} (status {record.shown_status})"


def single_delta(label: str, a: float | None, b: float | None) -> MetricDelta:
    k = _digits(label)
    if a is None or b is None:
        return MetricDelta(label, num(a, k), num(b, k), "-", "-", "-", "not measured on both", None)
    delta = b - a
    pct = f"{100 * delta / a:+.1f}%" if a else "-"
    verdict = "equal" if delta == 0 else "one value each: no CI, cannot tell noise from change"
    return MetricDelta(label, num(a, k), num(b, k), f"{delta:+,.{k}f}", pct, "-", verdict, None if delta else False)


def compare_runs(
    a: schema.Results,
    a_steps: Sequence[StepRow],
    b: schema.Results,
    b_steps: Sequence[StepRow],
) -> list[MetricDelta]:
    """Every row of a run pair, one answer for throughput and step time (step_time_delta)."""
    wa, wb = windows.windows_of(results.record_of(a), a_steps), windows.windows_of(results.record_of(b), b_steps)
    why_a, why_b = no_measurement(a), no_measurement(b)
    rows: list[MetricDelta] = []
    for metric in WINDOW_METRICS:
        label = metric.label
        scale = 100.0 if metric.percent else 1.0
        xa = [scale * x for x in metric.of(wa) or [] if x is not None]
        xb = [scale * x for x in metric.of(wb) or [] if x is not None]
        # throughput: each run's own figure, the one `report` prints (never the mean of its windows)
        throughput = metric is WINDOW_METRICS[0]
        pa, pb = (a.throughput_img_s, b.throughput_img_s) if throughput else (None, None)
        if xa and xb and metric is STEP_TIME:
            sizes = (windows.window_sizes(wa), windows.window_sizes(wb))
            rows.append(step_time_delta(label, xa, xb, rows[0], (images_per_step(a), images_per_step(b)), sizes))
        elif xa and xb:
            rows.append(
                window_delta(
                    label, xa, xb, metric.higher_better, points=(pa, pb), upper=scale if metric.percent else None
                )
            )
        else:
            reasons = [f"{n}: {w}" for n, w in (("A", why_a), ("B", why_b)) if w]
            means = [stats.mean(x) if x else None for x in (xa, xb)]
            shown = [p if p is not None else m for p, m in zip((pa, pb), means, strict=True)]
            k = decimals(shown) if metric.percent else _digits(label)
            verdict = "; ".join(reasons) if reasons else "not measured on both"
            rows.append(MetricDelta(label, num(shown[0], k), num(shown[1], k), "-", "-", "-", verdict, None))
    for figure, label, _higher in SINGLE_METRICS:
        rows.append(single_delta(label, figure(a), figure(b)))
    return rows + target_deltas(a, b)


TARGET_METRIC = "time to target"  # the label's start: render_sweeps shows these rows beside throughput


def target_deltas(a: schema.Results, b: schema.Results) -> list[MetricDelta]:
    """--target-top1 (analysis/time_to_accuracy): training seconds and epochs to the target, B - A, when
    either run has one; one value per run, so no interval. Different targets are not compared."""
    ta, tb = a.time_to_accuracy, b.time_to_accuracy
    if ta is None and tb is None:
        return []
    targets = [t.target_top1 if t else None for t in (ta, tb)]
    label = f"{TARGET_METRIC}: train s to val top-1 >= {targets[0] if targets[0] is not None else targets[1]:g}"
    if targets[0] != targets[1]:
        shown = ["-" if t is None else f"target {t:g}" for t in targets]
        return [
            MetricDelta(label, shown[0], shown[1], "-", "-", "-", "different targets (or none): not compared", None)
        ]

    def side(t: schema.TimeToAccuracy | None, figure: Callable[[schema.TimeToAccuracy], Any], k: int) -> str:
        if t is not None and t.reached_target:
            return num(figure(t), k)
        best = t.best_val_top1 if t is not None else None
        return "not reached" + ("" if best is None else f" (best {best:.4f})")

    out = []
    figures: tuple[tuple[Callable[[schema.TimeToAccuracy], Any], str, int], ...] = (
        (lambda t: t.train_time_to_target_s, label, 3),
        (lambda t: t.epochs_to_target, f"{TARGET_METRIC}: epochs", 0),
    )
    for figure, what, k in figures:
        xa, xb = (figure(t) if t is not None else None for t in (ta, tb))
        if xa is None or xb is None:
            out.append(
                MetricDelta(what, side(ta, figure, k), side(tb, figure, k), "-", "-", "-", "not reached on both", None)
            )
            continue
        delta = xb - xa
        pct = f"{100 * delta / xa:+.1f}%" if xa else "-"
        verdict = "equal" if delta == 0 else "one value each: no CI, cannot tell noise from change"
        out.append(
            MetricDelta(what, num(xa, k), num(xb, k), f"{delta:+,.{k}f}", pct, "-", verdict, None if delta else False)
        )
    return out


def config_differences(a: schema.Results, b: schema.Results) -> list[str]:
    """The resolved configuration's values that differ, but for where the run wrote (output) and the notes beside
    them: the values that ran are compared."""
    from effbench import schema

    ignored = (schema.field_path(schema.Config, lambda c: c.output), *CONFIG_NOTES)
    ca, cb = a.config.model_dump(exclude_unset=True), b.config.model_dump(exclude_unset=True)
    out = []
    for k in sorted(set(ca) | set(cb)):
        if k not in ignored and ca.get(k) != cb.get(k):
            out.append(f"{k}: {json.dumps(ca.get(k))} -> {json.dumps(cb.get(k))}")
    return out


def conclusion(deltas: Sequence[MetricDelta]) -> str:
    thr = next((d for d in deltas if d.metric.startswith("throughput")), None)
    if thr is None:
        return "Throughput: not measured."
    if thr.significant is None:
        return f"Throughput: cannot tell ({thr.verdict})."
    if not thr.significant:
        return f"Throughput: no significant difference (within noise; 95% CI of B - A {thr.ci} img/s includes 0)."
    return f"Throughput: B differs from A by {thr.delta_pct} (95% CI of B - A {thr.ci} img/s excludes 0)."


HEADERS = ("metric", "A [95% CI]", "B [95% CI]", "B - A", "B - A, % of A", "95% CI of B - A", "verdict")


# compare's table where the full one does not fit: each run's figure without its own interval (its report has
# it), and the change in percent of A beside the interval of B - A
NARROW_HEADERS = ("metric", "A", "B", "B - A, % of A", "95% CI of B - A", "verdict")
NARROW_METRIC = 20  # the metric column wraps beyond this
NARROW_PCT = 8  # its header wraps: "B - A, %" over "of A"
NARROW_VERDICT = 12  # the verdict column wraps no narrower: "within noise" on one line


def render_runs(
    deltas: Sequence[MetricDelta],
    *,
    a_name: str,
    b_name: str,
    differences: Sequence[str],
    width: int | None = None,
) -> str:
    """compare's text for two runs; with a `width`, every line within it: the full table when it fits, else the
    narrow one (NARROW_HEADERS), its metric and verdict columns wrapped."""
    full = [[d.metric, d.a, d.b, d.delta, d.delta_pct, d.ci, d.verdict] for d in deltas]
    table = tabulate(full, headers=HEADERS, tablefmt="simple", disable_numparse=True)
    if width is not None and widest(table) > width:
        table = _narrow_table(deltas, width)
    diff = "configuration differences: " + ("; ".join(differences) if differences else "none")
    # the runs' paths as they are (a path has no place to wrap); the rest within the width
    return f"A: {a_name}\nB: {b_name}\n" + wrap_text(f"{diff}\n\n{table}\n\n{conclusion(deltas)}", width) + "\n"


def _narrow_table(deltas: Sequence[MetricDelta], width: int, cells: Sequence[str] | None = None) -> str:
    """NARROW_HEADERS' table within `width`: the metric wraps at NARROW_METRIC, the verdict in what is left (its
    words kept whole); `cells`: a first column naming each delta's sweep cell. Cells are wrapped by fmt.wrap_cell,
    not by tabulate's maxcolwidths: tabulate 0.9 turns a wrapped cell with a thousands separator ("4,000.00")
    into a float and fails."""
    first = [] if cells is None else ["cell"]
    headers = [*first, *NARROW_HEADERS[:3], wrap_cell(NARROW_HEADERS[3], NARROW_PCT), *NARROW_HEADERS[4:]]

    def draw(verdict_width: int) -> str:
        body = [[wrap_cell(d.metric, NARROW_METRIC), _figure(d.a), _figure(d.b), d.delta_pct, d.ci,
                 wrap_cell(d.verdict, max(verdict_width, 1))] for d in deltas]  # fmt: skip
        if cells is not None:
            body = [[cell, *row] for cell, row in zip(cells, body, strict=True)]
        return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True)

    verdict_width = max((len(d.verdict) for d in deltas), default=0)
    table = draw(verdict_width)
    while widest(table) > width and verdict_width > NARROW_VERDICT:
        verdict_width = max(NARROW_VERDICT, verdict_width - (widest(table) - width))
        table = draw(verdict_width)
    return table


def _figure(side: str) -> str:
    """A side column's figure without its interval ("271.98 [265.50, 278.64]" -> "271.98")."""
    return side.split(" [", 1)[0]


KIND_HEADERS = ("kind", "A ms / step", "B ms / step", "B - A ms", "B - A %", "A % of roof", "B % of roof")
KIND_NOTE = (
    "Per kind of operation: each run's profiling pass (a few steps under the profiler, analysis/roofline.py), one "
    "figure a side, so no interval: a small difference may be noise."
)


def kind_rows(deltas: Sequence[roofline.KindDelta]) -> list[list[str]]:
    """compare's per-kind rows: each kind's time per step in A and B, B - A, and the fraction of its roof."""

    def ms(s: float | None) -> str:
        return "-" if s is None else f"{1e3 * s:,.{decimals([1e3 * s], least=2, most=4)}f}"

    def pct(f: float | None) -> str:
        return "-" if f is None else f"{100 * f:.1f}%" if f < 0.1 else f"{100 * f:.0f}%"

    out = []
    for d in deltas:
        change = d.delta_s
        rel = f"{100 * change / d.a_s:+.0f}%" if change is not None and d.a_s else "-"
        shown = "-" if change is None else f"{1e3 * change:+,.{decimals([1e3 * change], least=2, most=4)}f}"
        out.append([d.kind, ms(d.a_s), ms(d.b_s), shown, rel, pct(d.a_roof), pct(d.b_roof)])
    return out


def render_kinds(deltas: Sequence[roofline.KindDelta], width: int | None = None) -> str:
    """B - A per kind (`roofline.kind_deltas`) as a table with its note; "" when a run has no roofline. With a
    `width`, fitted to it (headers wrapped, fmt.fit_columns) and the note wrapped."""
    if not deltas:
        return ""
    if width is None:
        table = tabulate(kind_rows(deltas), headers=KIND_HEADERS, tablefmt="simple", disable_numparse=True)
    else:
        table = fit_columns(KIND_HEADERS, kind_rows(deltas), width)
    return "\n" + wrap_text(f"{table}\n\n{KIND_NOTE}", width) + "\n"


def match_cells(
    a_rows: Sequence[CellRow], b_rows: Sequence[CellRow]
) -> tuple[list[tuple[CellRow, CellRow]], list[str]]:
    """Pairs of cells with the same swept values; the labels of cells found on one side only."""

    def ident(r: CellRow) -> str:
        return json.dumps(r.params, sort_keys=True, default=str)

    b_by = {ident(r): r for r in b_rows}
    a_ids = {ident(r) for r in a_rows}
    pairs = [(r, b_by[ident(r)]) for r in a_rows if ident(r) in b_by]
    alone = [f"A only: {r.key}" for r in a_rows if ident(r) not in b_by] + [
        f"B only: {r.key}" for r in b_rows if ident(r) not in a_ids
    ]
    return pairs, alone


def _by_configuration(rows: Sequence[CellRow]) -> dict[str, list[float]]:
    """A sweep in rounds: each configuration (its swept values but the round) -> its ok rounds' img/s."""
    out: dict[str, list[float]] = {}
    for r in rows:
        figures = out.setdefault(configuration_key(r.params), [])
        if r.status == "ok" and r.throughput_img_s:
            figures.append(r.throughput_img_s)
    return out


ROUNDS_NOTE = (
    "Across rounds: each configuration's mean img/s over its rounds (sweep --rounds), its interval across them, and "
    "Welch's 95% interval of B - A on the rounds' figures: the noise between runs, which one run's windows do not see."
)


def rounds_table(a_rows: Sequence[CellRow], b_rows: Sequence[CellRow]) -> tuple[list[list[str]], int, int]:
    """Two sweeps in rounds: per configuration on both sides, B - A of the mean img/s over rounds (window_delta on
    the rounds' figures); the rows, how many were compared, how many differ outside noise. Empty unless both
    sides ran --rounds."""
    if not any(ROUND in r.params for r in a_rows) or not any(ROUND in r.params for r in b_rows):
        return [], 0, 0
    a, b = _by_configuration(a_rows), _by_configuration(b_rows)
    body, outside = [], 0
    for config in (c for c in a if c in b):
        name = " ".join(f"{k.replace('_', '-')}={v}" for k, v in json.loads(config).items()) or "all"
        if not a[config] or not b[config]:
            body.append([name, "-", "-", "-", "-", "-", "no ok round on both sides"])
            continue
        d = window_delta(WINDOW_METRICS[0].label, a[config], b[config], True, samples="rounds")
        body.append([name, d.a, d.b, d.delta, d.delta_pct, d.ci, d.verdict])
        outside += bool(d.significant)
    return body, len(body), outside


def render_sweeps(
    a_rows: Sequence[CellRow], b_rows: Sequence[CellRow], *, a_name: str, b_name: str, width: int | None = None
) -> str:
    """compare's text for two sweeps: B - A in each pair of cells with the same swept values. With a `width`, every
    line within it as `render_runs` fits its own (the narrow table, and the per-kind table split by
    fmt.fit_columns, each part repeating the cell and the kind); the folders' paths as they are."""
    pairs, alone = match_cells(a_rows, b_rows)
    compared: list[tuple[str, MetricDelta]] = []
    significant = 0
    for ra, rb in pairs:
        if ra.status != "ok" or rb.status != "ok" or ra.record is None or rb.record is None:
            both = MetricDelta(WINDOW_METRICS[0].label, ra.shown_status, rb.shown_status, "-", "-", "-",
                               "not ok on both", None)  # fmt: skip
            compared.append((ra.key, both))
            continue
        deltas = compare_runs(ra.record, [], rb.record, [])
        for d in [*deltas[: len(WINDOW_METRICS)], *(d for d in deltas if d.metric.startswith(TARGET_METRIC))]:
            compared.append((ra.key, d))
            significant += bool(d.significant) and d.metric.startswith("throughput")
    body = [[key, d.metric, d.a, d.b, d.delta, d.delta_pct, d.ci, d.verdict] for key, d in compared]
    table = tabulate(body, headers=("cell", *HEADERS), tablefmt="simple", disable_numparse=True)
    if width is not None and widest(table) > width:
        table = _narrow_table([d for _, d in compared], width, [key for key, _ in compared])
    lines = [f"{len(pairs)} cells matched by their swept values", "", table, ""]
    kinds = [
        [ra.key, *row]
        for ra, rb in pairs
        if ra.record is not None and rb.record is not None
        for row in kind_rows(roofline.kind_deltas(ra.record.roofline, rb.record.roofline))
    ]
    if kinds:
        kind_headers = ("cell", *KIND_HEADERS)
        if width is None:
            kind_table = tabulate(kinds, headers=kind_headers, tablefmt="simple", disable_numparse=True)
        else:
            kind_table = fit_columns(kind_headers, kinds, width, keep=2)
        lines += [kind_table, "", KIND_NOTE, ""]
    if alone:
        lines += ["not compared: " + "; ".join(alone), ""]
    pooled, n_pooled, n_outside = rounds_table(a_rows, b_rows)
    if pooled:
        headers = ("configuration", "A over rounds [95% CI]", "B over rounds [95% CI]", "B - A", "B - A, % of A",
                   "95% CI of B - A", "verdict")  # fmt: skip
        if width is None:
            rounds_text = tabulate(pooled, headers=headers, tablefmt="simple", disable_numparse=True)
        else:
            rounds_text = fit_columns(headers, pooled, width)
        lines += [rounds_text, "", ROUNDS_NOTE, "",
                  f"Across rounds: {n_outside} of {n_pooled} configurations differ outside the noise between rounds.",
                  ""]  # fmt: skip
    if not pairs:
        lines.append("Throughput: nothing to compare: no cell of A has the swept values of a cell of B.")
    elif significant:
        lines.append(f"Throughput: {significant} of {len(pairs)} matched cells differ outside noise.")
    else:
        lines.append(f"Throughput: no significant difference in any of the {len(pairs)} matched cells (within noise).")
    return f"A: {a_name}\nB: {b_name}\n" + wrap_text("\n".join(lines), width) + "\n"


# --------------------------------------------------------------------------------------------------
# Regression gates (`--fail-if-slower PCT`, `--fail-if-less-accurate POINTS`): exit 1 only on a change
# larger than the threshold that is also outside noise, so a noisy CI machine never fails a build.
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GateOutcome:
    failed: bool
    line: str
    """The one line that decided, for the CI log."""


CLEAR_MARGIN_FLOOR = 10.0
"""Below 3 windows on a side there is no interval (stats.MIN_SAMPLES_FOR_CI) and the gate passes as "cannot
tell", unless the gap is clear of the windows themselves: B's fastest window below A's slowest by more than the
threshold plus a margin as large again, and at least this many percentage points (so `--fail-if-slower 0` does
not fail on the chance order of two windows each). docs/sweeps-and-reports.md, Regression gate. A run at 1e-300
img/s against one at 25.7 is not noise however few its windows."""


def clear_gap(pct: float) -> float:
    """How far apart (percent of A's slowest window) the windows must lie for too few of them to fail the gate."""
    return pct + max(pct, CLEAR_MARGIN_FLOOR)


def _windows_apart(a_windows: Sequence[float], b_windows: Sequence[float]) -> float:
    """How far, in percent of A's slowest window, B's fastest window lies below it (<= 0: the ranges meet)."""
    slowest_a, fastest_b = min(a_windows), max(b_windows)
    return 100.0 * (slowest_a - fastest_b) / slowest_a if slowest_a > 0 else 0.0


def slower_gate(a: schema.Results, a_windows: Sequence[float], b: schema.Results, b_windows: Sequence[float], pct: float) -> GateOutcome:  # fmt: skip
    """Fail when B's throughput is below A's by more than `pct` percent and Welch's 95% interval of
    mean(B) - mean(A) over the throughput windows lies below 0.

    The slowdown is computed from the runs' own figures (results.json `throughput_img_s`, the one
    definition in analysis/throughput that `report` and `compare` print), not from the window means,
    so the gate judges the number the user reads. The windows only decide noise (stats.difference, the
    interval `compare` prints): a run figure that says slower while the interval says faster passes. Below 3
    windows on a side there is no interval: "cannot tell" passes, but a slowdown beyond `pct` whose windows lie
    apart by more than `clear_gap(pct)` fails, with that reason.
    """
    opt = f"--fail-if-slower {pct:g}"
    tb = b.throughput_img_s
    if b.status != "ok" or not b_windows or not tb:
        return GateOutcome(True, f"FAIL {opt}: B measured no throughput (status {b.status})")
    ta = a.throughput_img_s
    if not a_windows:  # a bad baseline is bad input (exit 2), not a regression of B
        raise EffbenchError(
            "--fail-if-slower",
            "the baseline A has no throughput windows (no throughput_windows in its results.json and no steps.csv "
            "beside it); use a results.json written by `effbench run` with measured steps",
        )
    if not ta:
        raise EffbenchError(
            "--fail-if-slower",
            "the baseline A has no throughput_img_s in its results.json; use a results.json written by "
            "`effbench run` with measured steps",
        )
    rel = 100.0 * (tb - ta) / ta
    figures = f"A {ta:,.1f} img/s, B {tb:,.1f} img/s"
    d = stats.difference(a_windows, b_windows)
    too_few = stats.too_few_to_judge(len(a_windows), len(b_windows))
    if too_few:
        # per side, what gives it the windows: --repeats while its measured steps allow, else more steps
        fixes = "; ".join(
            f"{side}: {windows.more_windows_fix(_measured_steps(r), stats.MIN_SAMPLES_FOR_CI)}"
            for side, r, w in (("A", a, a_windows), ("B", b, b_windows))
            if len(w) < stats.MIN_SAMPLES_FOR_CI
        )
        apart = _windows_apart(a_windows, b_windows)
        if -rel > pct and apart > clear_gap(pct):
            return GateOutcome(
                True,
                f"FAIL {opt}: B is {-rel:.1f}% slower than A ({figures}); {too_few}, but B's fastest window is "
                f"{apart:.1f}% below A's slowest, more than {clear_gap(pct):g}% (the threshold and a clear margin): "
                f"no spread of its windows explains that ({fixes})",
            )
        return GateOutcome(False, f"PASS {opt}: cannot tell ({figures}): {too_few}: {fixes}")
    ci = f"windows' 95% CI of B - A {interval(d.ci_low, d.ci_high, signed=True)} img/s"
    if rel >= 0:
        return GateOutcome(False, f"PASS {opt}: B is not slower than A ({rel:+.1f}%; {figures})")
    if -rel <= pct:
        return GateOutcome(False, f"PASS {opt}: B is {-rel:.1f}% slower than A, not more than {pct:g}% ({figures})")
    if not d.significant:
        return GateOutcome(
            False, f"PASS {opt}: B is {-rel:.1f}% slower than A but within noise ({figures}; {ci} includes 0)"
        )
    if d.ci_low is not None and d.ci_low > 0:
        return GateOutcome(
            False,
            f"PASS {opt}: B is {-rel:.1f}% slower than A by the runs' figures but faster by its windows "
            f"({figures}; {ci} lies above 0)",
        )
    return GateOutcome(True, f"FAIL {opt}: B is {-rel:.1f}% slower than A ({figures}; {ci} excludes 0)")


def accuracy_gate(a: schema.Results, b: schema.Results, points: float) -> GateOutcome:
    """Fail when B's final top-1 is below A's by more than `points` percentage points. Validation
    top-1 when both runs have it, else train top-1. One value per run: no interval exists, so the
    threshold is the only noise allowance (set it above the run-to-run spread of your seed). Generated data has no
    accuracy to gate (datasets.chance_note): the gate passes and says so."""
    from effbench import schema

    opt = f"--fail-if-less-accurate {points:g}"
    chance = chance_note(a.config.dataset) or chance_note(b.config.dataset)
    if chance is not None:  # a held-out top-1 on random labels moves by one image's share, whatever the change
        return GateOutcome(False, f"PASS {opt}: nothing to gate, {chance}")

    def val(r: schema.Results) -> float | None:
        return r.final.val_top1

    def train(r: schema.Results) -> float | None:
        return r.final.train_top1

    top1 = val if val(a) is not None and val(b) is not None else train
    key = schema.field_path(schema.Results, top1).rsplit(".", 1)[-1]  # the lines name the field, val_top1
    ta, tb = top1(a), top1(b)
    if ta is None:
        return GateOutcome(True, f"FAIL {opt}: the baseline A has no final {key}")
    if tb is None:
        return GateOutcome(True, f"FAIL {opt}: B has no final {key} (status {b.status})")
    drop = 100.0 * (ta - tb)
    values = f"{key} A {100 * ta:.2f}%, B {100 * tb:.2f}%"
    if drop > points:
        return GateOutcome(True, f"FAIL {opt}: B's {key} is {drop:.2f} points below A's ({values})")
    return GateOutcome(False, f"PASS {opt}: B's {key} is within {points:g} points of A's ({values})")


# `compare`'s arguments past the folders as typed: the newest run or sweep, or a unique start of a folder name.
LATEST = "latest"
# Files that make a folder one `compare` takes: results.json (a run), sweep.json (a sweep).
COMPARABLE_FILES = (results.RESULTS_FILE, MANIFEST_FILE)
KIND_FILES = {"run": results.RESULTS_FILE, "sweep": MANIFEST_FILE}


def comparable_folders(parent: Path, kind: str | None = None) -> list[Path]:
    """The run and sweep folders directly in `parent` (only runs or only sweeps with `kind`), by name."""
    if not parent.is_dir():
        return []
    files = (KIND_FILES[kind],) if kind is not None else COMPARABLE_FILES
    return sorted(d for d in parent.iterdir() if d.is_dir() and any((d / f).is_file() for f in files))


def _posix(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return dt.datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def finished_time(folder: Path) -> float:
    """When a run or sweep folder finished, as a POSIX time: a run's finished_at, a sweep's last cell's (else its
    last change); without one (still running, killed, a file it cannot read), the mtime of its results.json or
    sweep.json, which every write replaces."""
    from effbench.sweep.manifest import load_manifest

    marker = folder / (MANIFEST_FILE if (folder / MANIFEST_FILE).is_file() else results.RESULTS_FILE)
    when = None
    try:
        if marker.name == MANIFEST_FILE:
            m = load_manifest(folder)
            ends = [t for t in (_posix(c.finished_at) for c in m.cells) if t is not None]
            when = max(ends) if ends else _posix(m.updated_at)
        else:
            when = _posix(results.load_record(folder).finished_at)
    except EffbenchError:  # a file it cannot read still has a time: when it was last written
        when = None
    return when if when is not None else marker.stat().st_mtime


def newest(parent: Path, kind: str | None = None) -> Path | None:
    """The run or sweep folder in `parent` that finished last (only runs or only sweeps with `kind`); folders that
    finished at the same time, by name (run and sweep names start with their start time)."""
    found = comparable_folders(parent, kind)
    return max(found, key=lambda d: (finished_time(d), d.name)) if found else None


def resolve_folder(arg: Path, output: Path, kind: str | None = None) -> Path:
    """A folder `compare` was given: as typed when it exists; `latest`, the run or sweep folder in `output`
    (--output's default, ./results or EFFBENCH_OUTPUT) that finished last, only runs or only sweeps with `kind`
    (the other argument's, or a gate's run); else a unique start of a folder's name, looked up in the folder typed
    before it (results/2026112) or in `output` (2026112). One line, exit 2, when none or several match."""
    if arg.exists():
        return arg
    parent = arg.parent if arg.parent != Path(".") else output
    if str(arg) == LATEST:
        found = newest(output, kind)
        if found is None:
            what = f"{kind} folder" if kind is not None else "run or sweep folder"
            raise EffbenchError(LATEST, f"{output} holds no {what}; pass a folder, or run one first")
        return found
    matches = [d for d in comparable_folders(parent) if d.name.startswith(arg.name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise EffbenchError(
            str(arg), f"does not exist, and no run or sweep folder in {parent} starts with {arg.name!r}; pass a run "
            "folder (results.json), a sweep folder (sweep.json), a unique start of one's name, or latest"
        )  # fmt: skip
    shown = ", ".join(d.name for d in matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
    raise EffbenchError(str(arg), f"matches {len(matches)} folders in {parent}: {shown}; type more of the name")


def _same(a: Path, b: Path) -> bool:
    """Whether two arguments name one run or sweep (a run folder and its results.json are one run)."""
    ra, rb = (p.parent if p.is_file() else p for p in (a, b))
    try:
        return ra.samefile(rb)
    except OSError:
        return False


def refuse_latest_itself(a: tuple[str, Path], b: tuple[str, Path], kind: str) -> None:
    """`compare X latest` where X is the latest: the run compared with itself reads "equal" everywhere, which is
    no answer. One line, exit 2, when a `latest` resolved to the folder the other argument names (both typed
    alike is the user's own choice, and allowed)."""
    (typed_a, path_a), (typed_b, path_b) = a, b
    if LATEST not in (typed_a, typed_b) or not _same(path_a, path_b):
        return
    other = typed_b if typed_a == LATEST else typed_a
    newest_one = path_a if typed_a == LATEST else path_b
    which = "both times" if other == LATEST else f"and {other} names it too"
    raise EffbenchError(
        LATEST,
        f"is {newest_one}, the {kind} that finished last, {which}: A and B would be one {kind}; name another "
        f"{kind} to compare with it",
    )

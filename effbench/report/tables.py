"""Pure reporting: a typed run record (schema.Results) in, tables out (tabulate text and markdown). No torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effbench.analysis.efficiency import WITHIN_NOISE
from effbench.analysis.epoch_time import epoch_measured, epoch_warmup_s
from effbench.analysis import roofline, stats
from effbench.analysis.steady_state import DRIFT_R
from effbench.analysis.time_to_accuracy import describe as describe_tta
from effbench.config import typed_option
from effbench.datasets import CATALOG, chance_note
from effbench.analysis.windows import describe_windows, more_windows_fix, summary_of
from effbench.report import bounds, roofline_tables
from effbench.fmt import REPORT_WIDTH, decimals, fmt_value, grid, interval, key_values, md, printable, wrap_text

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel

    from effbench import schema


def _pct(part: float | None, whole: float | None) -> str:
    """part / whole in percent; "-" when either is unknown or nothing was timed (whole 0: no share of it)."""
    if part is None or not whole:
        return "-"
    return f"{100.0 * part / whole:.1f}%"


def summary_rows(results: schema.Results) -> list[tuple[str, str]]:
    cfg, model, data = results.config, results.model, results.data
    measured, warmup = results.measured, results.warmup
    # what fed the run, as results.json's data section says (synthetic: "synthetic (on device)", 0 workers)
    loader = data.loader if data.loader is not None else cfg.loader
    workers = data.workers if data.workers is not None else cfg.workers
    epochs = results.epochs
    val_used = epochs[-1].val_images if epochs else None
    rows = [
        ("status", results.shown_status),  # a `running` one whose process is gone: `dead` (liveness.py)
        ("arch", fmt_value(cfg.arch)),
        ("dataset", _dataset(cfg, data, epochs)),
        ("validation images per epoch (used)", fmt_value(val_used)),
        ("device", fmt_value(results.device)),
        ("world size", fmt_value(results.world_size)),
        ("precision", fmt_value(results.precision)),
        ("batch size per device", fmt_value(cfg.batch_size)),
        ("image size (px)", fmt_value(cfg.image_size)),
        ("optimizer / lr", f"{fmt_value(cfg.optimizer)} / {fmt_value(cfg.lr, 4)}"),
        ("freeze / weights", f"{fmt_value(cfg.freeze)} / {fmt_value(cfg.weights)}"),
        ("params trainable / total", f"{fmt_value(model.trainable_params)} / {fmt_value(model.total_params)}"),
        ("loader / workers", f"{fmt_value(loader)} / {fmt_value(workers)}"),
        (HEADLINE_ROW, fmt_value(results.throughput_img_s, 1)),
        ("throughput timing", headline_timing(results)),
        (WINDOWS_ROW, _windows(results)),
        (
            "measured steps / images",
            f"{fmt_value(measured.steps if measured else None)} / {fmt_value(measured.images if measured else None, 3)}",
        ),
        # results.json's data_time_share (the headline's: null without a measured step), never a 0% nobody measured
        ("data wait share", _pct(results.data_time_share, 1.0)),
        (
            "warm-up steps (excluded)",
            f"{fmt_value(warmup.steps if warmup else None)} in {fmt_value(warmup.time_s if warmup else None, 3)} s"
            + _warmup_rule(results.warmup_rule),
        ),
        ("final val top-1", _top1(results)),
    ]
    if results.status == "interrupted" and measured is not None and measured.steps:
        # a signal cut an epoch short: the figures are those of the steps that ended before it
        at = next(i for i, (label, _) in enumerate(rows) if label == "measured steps / images") + 1
        rows.insert(at, ("interrupted", f"the figures rest on the {measured.steps} measured step(s) that ended "
                                        "before the signal"))  # fmt: skip
    if results.until is not None:  # --until ci:X%: the interval reached and what ended the measurement
        rows.append(("until " + results.until.target, _until(results.until)))
    if results.wall_time_by_phase_s:  # where the run's own wall time went, the model's build and FLOP count included
        rows.append(("wall time by phase (s)", _by_phase(results.wall_time_by_phase_s, results.wall_time_s)))
    tta = describe_tta(results.time_to_accuracy)
    if tta:  # --target-top1: training seconds (validation apart) and epochs to the target
        rows.append(("time to accuracy", tta))
    dropped = _dropped(results)
    if dropped is not None:  # beside the dataset row: why an epoch trains fewer images than the split holds
        rows.insert(3, ("dropped per epoch", dropped))
    if results.data_only:
        rows.insert(1, ("mode", "data-only: loader, augmentation and copy to the device; no model, img/s delivered"))
    if results.compile_time_s is not None:
        rows.append(("torch.compile time (s, excluded)", fmt_value(results.compile_time_s, 1)))
    rows += observability_rows(results)
    command = results.command
    for option, why in cfg.no_effect.items() if cfg.no_effect else ():
        if command is None or typed_option([str(t) for t in command], option):  # a default is not theirs
            rows.append((f"--{option.replace('_', '-')}: no effect", str(why)))
    if results.error is not None and _given(results.error):
        rows.append(("error", fmt_value(results.error.message)))
    return rows


def _until(u: schema.Until) -> str:
    """The interval --until reached, its ends, the windows' autocorrelation (widened for, and above DRIFT_R a sign
    the machine drifted while measuring: docs/methodology.md) and why the measurement ended."""
    reached = "-" if u.half_width_pct is None else f"+/-{u.half_width_pct:.2f}%"
    if u.ci_low_img_s is not None:
        high = "inf" if u.ci_high_img_s is None else f"{u.ci_high_img_s:,.1f}"
        reached += f" [{u.ci_low_img_s:,.1f}, {high}] img/s"
    text = f"{reached} over {fmt_value(u.windows)} windows of {fmt_value(u.window_steps)} steps"
    if u.lag1_autocorrelation is not None:
        r = u.lag1_autocorrelation
        text += f", lag-1 autocorrelation {r:+.2f}" + (" (the speed drifted while measuring)" if r > DRIFT_R else "")
    return f"{text}; {u.reason}"


def _by_phase(seconds: dict[str, float], total: float | None) -> str:
    parts = ", ".join(f"{name} {fmt_value(s, 1)}" for name, s in seconds.items())
    return f"{parts}; {fmt_value(total, 1)} in all" if total is not None else parts


def _dropped(results: schema.Results) -> str | None:
    """The training images an epoch leaves out because every step takes a whole batch (the loaders' drop_last, and
    DistributedSampler's even split over ranks), when an epoch ran all its steps; None when none are, or when the
    data is generated (its epoch is a count, not a split)."""
    data, batch, epochs = results.data, results.global_batch_size, results.epochs
    spec = CATALOG.get(results.config.dataset or "")
    if data.train_size is None or data.steps_per_epoch is None or not batch or (spec and spec.storage == "generated"):
        return None
    if not epochs or epochs[-1].steps != data.steps_per_epoch:  # --max-steps cut the epoch short: not the cause
        return None
    dropped = data.train_size - data.steps_per_epoch * batch
    if dropped <= 0:
        return None
    ranks = f" = {results.batch_size_per_device} x {results.world_size} ranks" if (results.world_size or 1) > 1 else ""
    return f"{dropped:,} images dropped by drop_last (batch {batch:,}{ranks})"


def _top1(results: schema.Results) -> str:
    """The final validation top-1, with what it means beside it where that is nothing (generated data)."""
    value = fmt_value(results.final.val_top1, 4)
    note = chance_note(results.config.dataset)
    return f"{value} ({note})" if note and results.final.val_top1 is not None else value


# The headline is all measured images over all their time; the windows' median weighs each window alike, so
# under load (one slow window) the two part widely: the labels say which is the figure and what the other is for.
HEADLINE_ROW = "throughput (img/s), the figure to quote"
WINDOWS_ROW = "throughput windows: median [95% CI of the mean], a noise check"


def _dataset(cfg: schema.Config, data: schema.Data, epochs: list[schema.Epoch]) -> str:
    """What ran: the training images of an epoch that ran (a --max-steps run uses a part of the split), of the
    split's; the shape of generated data in words."""
    name = data.shape or cfg.dataset  # synthetic: "synthetic, CIFAR-100-shaped"
    size, ran = data.train_size, epochs[-1].images if epochs else None
    train = f"{fmt_value(size)} train" if ran is None or ran == size else f"{fmt_value(ran)} of {fmt_value(size)} train"
    return f"{fmt_value(name)} ({train} images per epoch / {fmt_value(data.val_size)} val)"


def _windows(results: schema.Results) -> str:
    """`--repeats`: the median over the throughput windows and the 95% CI of their mean (windows.py)."""
    w = results.throughput_windows
    s = summary_of(w, lambda w: w.throughput_img_s) if w is not None else None
    if w is None or s is None or s.median is None:
        return "-"
    ci = f" {interval(s.ci_low, s.ci_high)}" if s.ci_low is not None else f" ({_no_ci(s, w)})"
    return f"{s.median:,.1f}{ci} over {describe_windows(w)}"


def _no_ci(s: schema.Stat, w: schema.Windows) -> str:
    """Why a summary has no interval (stats.MIN_SAMPLES_FOR_CI) and what gives one: from the windows' measured
    steps, so a record written when the note said "raise --repeats" whatever the steps says what works."""
    if s.n is not None and w.steps is not None:
        return stats.too_few_note(s.n, more_windows_fix(w.steps, stats.MIN_SAMPLES_FOR_CI))
    return str(s.note or f"{s.n} window(s): no CI")


def _stat(v: schema.MeanMax | None, digits: int = 1) -> str:
    if v is None or v.mean is None:
        return "-"
    if v.max is None:  # summed over ranks (observe.merge_utilization): a mean, no max of the sum
        return f"{v.mean:.{digits}f} mean, {v.ranks if v.ranks is not None else '?'} ranks summed"
    return f"{v.mean:.{digits}f} mean / {v.max:.{digits}f} max"


# Which timing the headline is (docs/gpu-truth.md, "Pipelined timing"): every step ends with a host sync
# (torch.cuda.synchronize on CUDA; run/timing.py), as timm's benchmark.py times; a pipelined loop (one sync per
# window) may be faster on CUDA for steps of a few ms, and the selftest's 'pipelined loop vs harness' measures it.
TIMING_WORDS = {
    "pipelined": "pipelined: one wait per --log-interval steps, spans from CUDA events",
    "per-step": "per-step: two waits a step (exact split; slower on a GPU)",
}


def _warmup_rule(rule: schema.WarmupRule | None) -> str:
    """How the warm-up's length was chosen, after its count: auto's rule and whether the times settled."""
    if rule is None or rule.rule == "fixed":
        return ""
    if rule.settled:
        return f" (auto, {rule.rule}: settled)"
    return f" (auto, {rule.rule}: not settled; {rule.reason})"


def headline_timing(results: schema.Results) -> str:
    """How the headline's steps were timed (--timing), in words; records from before the option: per-step."""
    from effbench.results import timing_of

    timing = timing_of(results)
    return TIMING_WORDS.get(timing, timing)


def observability_rows(results: schema.Results) -> list[tuple[str, str]]:
    """Efficiency, utilisation, memory, energy and the profiler's own cost; absent stays '-'."""
    rows: list[tuple[str, str]] = []
    if results.flops_per_image is not None:
        uncounted = roofline.uncounted_ops(results.roofline)  # ops with no FLOP formula: their work is not in it
        omits = f" (omits {', '.join(uncounted)}: no FLOP formula; see the roofline)" if uncounted else ""
        rows.append(("GFLOP per training image", fmt_value(results.flops_per_image / 1e9, 3) + omits))
    if results.flops_forward_per_image is not None:
        rows.append(("GFLOP per image, forward only", fmt_value(results.flops_forward_per_image / 1e9, 3)))
    if results.achieved_tflops is not None:
        tflops = results.achieved_tflops  # a CPU's 0.002 would print as 0.000 at a fixed 3 decimals
        rows.append(("achieved TFLOP/s", fmt_value(tflops, max(3, decimals([tflops])))))
    if results.mfu is not None:
        rows.append(
            (
                "MFU",
                f"{100 * results.mfu:.1f}% of {fmt_value(results.mfu_peak_tflops_per_device, 1)} TFLOP/s per device"
                + (f" ({results.mfu_peak_precision})" if results.mfu_peak_precision else "")
                + (f", {results.mfu_peak_gpu}" if results.mfu_peak_gpu else ""),
            )
        )
    if results.clock_note:  # beside MFU, whose peak assumes the maximum clock
        rows.append(("GPU clock", results.clock_note))
    rows += _utilization_rows(results.utilization)
    if results.peak_mem_gib is not None:
        rows.append(
            (
                "peak device memory, measured steps (GiB)",
                f"{results.peak_mem_gib:.2f} allocated / {results.peak_mem_reserved_gib or 0:.2f} reserved"
                + (
                    f" / {results.peak_mem_nvml_used_gib:.2f} in use on the device (NVML)"
                    if results.peak_mem_nvml_used_gib is not None
                    else ""
                ),
            )
        )
    if results.energy_j is not None:
        rows.append(("GPU energy (J)", fmt_value(results.energy_j, 0)))
    elif results.energy_note:
        rows.append(("GPU energy (J)", f"- ({results.energy_note})"))
    if results.images_per_j is not None:
        rows.append(("images per joule", fmt_value(results.images_per_j, 2)))
    prof = results.profile
    if prof is not None and prof.profiler_overhead is not None:
        rows.append(("profiler overhead", f"+{100 * prof.profiler_overhead:.0f}% step time under the profiler"))
    elif prof is not None and prof.profiler_overhead_note:
        note = prof.profiler_overhead_note
        # an older record's "within noise (-27%)" carried a signed figure the interval did not support
        rows.append(("profiler overhead", WITHIN_NOISE if note.startswith("within noise") else note))
    verdict = results.verdict
    if verdict is not None:  # never a label without the measurements behind it
        rows.append(("bottleneck", f"{verdict.bottleneck} ({'' if verdict.evidence is None else verdict.evidence})"))
    return rows


def _given(m: BaseModel | None) -> bool:
    """A section that holds something (an absent or empty one, `{}` in the file, reads as empty: shown as none)."""
    return m is not None and bool(m.model_fields_set or m.model_extra)


def _utilization_rows(util: schema.Utilization) -> list[tuple[str, str]]:
    """The sampler's host and GPU figures over the whole block, then the measured window's (the verdict's)."""
    rows: list[tuple[str, str]] = []
    host = util.host
    if _given(host):
        rows.append(("host CPU % (system)", _stat(host.cpu_pct)))
        rows.append(("run CPU % (process tree)", _stat(host.proc_cpu_pct)))
        rows.append(("run resident memory, RSS summed (GiB)", _stat(host.rss_gib, 2)))
        if _given(host.pss_gib):
            rows.append(("run memory, PSS (GiB)", _stat(host.pss_gib, 2)))
    for g in util.gpus:
        rows.append((f"GPU {g.index} utilisation %", _stat(g.util_pct)))
        rows.append((f"GPU {g.index} power (W)", _stat(g.power_w)))
    window = util.measured_window  # what the verdict reads (observe.summarize)
    if window is None:
        return rows
    if _given(window.host.proc_cpu_pct):
        rows.append(("run CPU %, measured steps only", _stat(window.host.proc_cpu_pct)))
    for g in window.gpus:
        if _given(g.util_pct):
            rows.append((f"GPU {g.index} utilisation %, measured steps only", _stat(g.util_pct)))
    return rows


PHASE_HEADERS = ("phase", "calls", "CPU (s)", "CPU share", "device (s)", "device share")


def phase_rows(results: schema.Results) -> list[list[str]]:
    rows = []
    for p in (results.profile.phases if results.profile else None) or []:
        rows.append(
            [
                p.phase,
                fmt_value(p.calls),
                fmt_value(p.cpu_time_s, 4),
                _pct(p.cpu_share_of_step, 1.0) if p.cpu_share_of_step is not None else "-",
                fmt_value(p.device_time_s, 4),
                _pct(p.device_share_of_step, 1.0) if p.device_share_of_step is not None else "-",
            ]
        )
    return rows


def verdict_line(results: schema.Results) -> str | None:
    v = results.verdict
    if v is None:
        return None
    return f"Verdict: {v.bottleneck}: {v.evidence}. Try: {v.advice}"


# `run --quiet`: at most this many lines of the verdict; the rest, and its advice, are in report.txt
QUIET_VERDICT_LINES = 2


def quiet_lines(results: schema.Results, report: Path | None, width: int) -> list[str]:
    """What `run --quiet` prints, at most 5 lines of at most `width` columns: the status (the summary's row), the
    figure to quote with its windows' median and interval (the noise check), the verdict's finding
    (QUIET_VERDICT_LINES at most; its advice and every table are in the report), and the path to report.txt
    (`report`; None: a node whose rank 0 ran elsewhere wrote none)."""
    import textwrap

    def wrapped(text: str, most: int) -> list[str]:
        return textwrap.wrap(printable(text), width, max_lines=most, placeholder=" [...]", break_on_hyphens=False)

    lines = [f"status {printable(results.shown_status)}"]
    if results.throughput_img_s is not None:
        what = " delivered, data-only (no model)" if results.data_only else ""
        figure = f"throughput {fmt_value(results.throughput_img_s, 1)} img/s{what}, the figure to quote"
        w = results.throughput_windows
        s = summary_of(w, lambda w: w.throughput_img_s) if w is not None else None
        if s is not None and s.median is not None and s.ci_low is not None:
            figure += f" (windows' median {s.median:,.1f} {interval(s.ci_low, s.ci_high)})"
        lines += wrapped(figure, 1)
    else:
        lines.append("throughput: not measured")
    v = results.verdict
    if v is not None:
        lines += wrapped(f"Verdict: {v.bottleneck}: {v.evidence}", QUIET_VERDICT_LINES)
    lines.append(
        "report: written by the node that ran rank 0" if report is None else f"report: {printable(str(report))}"
    )
    return lines


EPOCH_HEADERS = (
    "epoch",
    "images",
    "warm-up steps",
    "warm-up (s)",
    "data (s, measured)",
    "compute (s, measured)",
    "total (s, measured)",
    "data % (measured)",
    "img/s (measured)",
    "train loss",
    "train top-1",
    "val top-1",
    "val (s)",
)


def epoch_rows(results: schema.Results) -> list[list[str]]:
    """The epoch table's rows: every epoch of a short run; of a long one the first and last
    bounds.TABLE_EDGE with a `... N epochs more` row between (epochs.csv and results.json hold every one),
    so the table costs the same at 100,000 epochs as at 50."""
    epochs = results.epochs
    head, skipped, tail = bounds.head_tail(len(epochs))
    rows = [_epoch_row(epochs[i]) for i in head]
    if skipped:
        rows.append([f"... {skipped:,} epochs more", *[""] * (len(EPOCH_HEADERS) - 1)])
    return rows + [_epoch_row(epochs[i]) for i in tail]


def _epoch_row(e: schema.Epoch) -> list[str]:
    data, compute = epoch_measured(e)
    total = data + compute if data is not None and compute is not None else None
    return [
        fmt_value(e.epoch),
        fmt_value(e.images, 3),
        fmt_value(e.warmup_steps),
        fmt_value(epoch_warmup_s(e), 3),
        fmt_value(data, 3),
        fmt_value(compute, 3),
        fmt_value(total, 3),
        _pct(data, total),  # as the summary's data wait share: "-" when no step was measured
        fmt_value(e.throughput_img_s, 1),  # warm-up excluded, like the headline
        fmt_value(e.train_loss, 4),
        fmt_value(e.train_top1, 4),
        fmt_value(e.val_top1, 4),
        fmt_value(e.val_time_s, 3),
    ]


# Above this share of unreadable images the figures describe a different dataset: say so in the report.
SKIPPED_WARN_SHARE = 0.10


def skipped_images_warning(results: schema.Results) -> str | None:
    """A warning line when more than SKIPPED_WARN_SHARE of the dataset's images were skipped. Pure."""
    data = results.data
    skipped = data.corrupt_images_skipped or 0
    # the files the listing left out are skipped but outside the split sizes: the dataset listed them all
    total = (data.train_size or 0) + (data.val_size or 0) + (data.files_refused or 0)
    if total <= 0 or skipped <= total * SKIPPED_WARN_SHARE:
        return None
    return (
        f"warning: {skipped} of {total} images ({skipped / total:.0%}) were unreadable and skipped, more than "
        f"{SKIPPED_WARN_SHARE:.0%}: these figures are for a smaller dataset; see data.corrupt_image_reasons"
    )


def render(results: schema.Results, fmt: str = "text", width: int | None = REPORT_WIDTH) -> str:
    """The run report as text (`fmt="text"`) or markdown (`fmt="md"`). Text fits `width` columns (report.txt:
    fmt.REPORT_WIDTH; the terminal: fmt.report_width()): tables fitted, long values and sentences wrapped; None:
    every line as long as it is."""
    if fmt == "md" or width is None:
        summary = grid(summary_rows(results), ("metric", "value"), fmt, numparse=True)
    else:
        summary = key_values(
            [(printable(k), printable(v)) for k, v in summary_rows(results)], ("metric", "value"), width
        )
    epochs = grid(epoch_rows(results), EPOCH_HEADERS, fmt, width=width)
    phases = phase_rows(results)
    phase_table = grid(phases, PHASE_HEADERS, fmt, width=width) if phases else ""
    verdict = verdict_line(results) or ""
    roof = roofline_tables.block(results, fmt, width=width)
    skipped = skipped_images_warning(results)
    title = f"effbench run {results.run_name or ''}".strip()
    notes = (
        "Throughput counts measured steps only (warm-up excluded): images / (data wait + compute), with several "
        "ranks all ranks' images over the slowest rank's time; the epoch table's measured columns are the same "
        "per epoch (images, loss and top-1 count every step). Data wait runs from asking the loader for a batch "
        "to the batch on the device; compute from there to the end of the optimizer step (docs/methodology.md)."
    )
    if results.data_only:
        notes = (
            "Data-only run: no model. Throughput is images delivered to the device per second over the "
            "measured steps (warm-up excluded): next() on the loader and the copy to the device."
        )
    if fmt == "md":  # the run name, the verdict's evidence: literal text
        parts = [f"# {md(title)}", f"**{md(skipped)}**" if skipped else "", f"**{md(verdict)}**" if verdict else ""]
        parts += ["## Summary", summary, "## Epochs", epochs]
        if phase_table:
            parts += ["## Profiling pass: phases", phase_table]
        if roof:
            parts.append(roof)
        return "\n\n".join(p for p in parts if p) + f"\n\n{notes}\n"
    title, skipped, verdict = printable(title), skipped and printable(skipped), verdict and printable(verdict)
    parts = [title, *([skipped] if skipped else []), summary, f"Epochs\n{epochs}"]
    if phase_table:
        parts.append(f"Profiling pass: phases of the step\n{phase_table}")
    if roof:
        parts.append(roof)
    if verdict:
        parts.append(verdict)
    return wrap_text("\n\n".join(parts) + f"\n\n{notes}", width) + "\n"

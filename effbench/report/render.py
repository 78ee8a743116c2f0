"""Saved JSON -> every table, plot and report.html of a run folder or a sweep folder. No torch import.

    effbench report DIR           write_reports(DIR): a run folder (results.json) or a sweep (sweep.json)
    runner (end of every run)     write_run_html(...): plots + report.html (run_reports.py: a failure is a note)
    sweep (end of every sweep)    write_sweep_reports(folder)

Tables come from report.py / sweep_report.py, charts from plots.py (matplotlib, imported there
lazily), the page from html_report.py. A chart that cannot be drawn (matplotlib missing, a bad
value) is named in the report instead; it never stops the others.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench.results import StepRow
from effbench.report import html as H
from effbench.report.charts import Plot
from effbench.report.charts import draw as _draw
from effbench.report.charts import images as _images
from effbench.report import bounds, outputs
from effbench.sweep import manifest as M
from effbench import liveness, results, safe_files
from effbench.report import tables as report
from effbench.report import roofline_tables
from effbench.report import sweep_tables as sweep_report
from effbench.analysis import epoch_time, scaling, windows
from effbench.errors import EffbenchError
from effbench.fmt import REPORT_WIDTH, interval, printable
from effbench.sweep.spec import ROUND, dim_option, show, varied

if TYPE_CHECKING:
    from effbench import schema

REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
SWEEP_TXT = "sweep.txt"
SWEEP_MD = "sweep.md"
SWEEP_SUMMARY = "summary.json"

# Every chart sweep_plots may draw under plots/.
SWEEP_CHARTS = ("time_breakdown.png", "throughput.png", "top1_per_epoch.png", "throughput_vs_batch.png",
                "data_time_vs_workers.png", "scaling.png", "time_to_accuracy_vs_batch.png")  # fmt: skip


def warn(message: str) -> None:
    """Warnings go to stderr, one line, so stdout holds only what was asked for; a name from disk in it is
    shown, not obeyed (fmt.printable)."""
    print("warning: " + printable(" ".join(message.split())), file=sys.stderr)


# --------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------
def run_plots(record: schema.Results, out_dir: Path) -> tuple[list[Plot], list[str]]:
    from effbench.report import plots

    epochs = record.epochs
    made: list[Plot] = []
    problems: list[str] = []
    if epochs:
        # one bar per epoch up to bounds.MAX_BARS, else per bin of consecutive epochs (the mean epoch of each, the
        # title says so): 100,000 epochs draw as fast as 50
        b = bounds.bins(len(epochs))
        labels = [bounds.span_label(epochs[s.start].epoch, epochs[s.stop - 1].epoch) for s in b.spans()]  # 1-based
        # the measured steps' split (the headline's data wait share, the epoch table's data %), warm-up apart
        measured = [epoch_time.epoch_measured(e) for e in epochs]
        data_s, compute_s = bounds.means([d for d, _ in measured], b), bounds.means([c for _, c in measured], b)
        warmup_s = bounds.means([epoch_time.epoch_warmup_s(e) for e in epochs], b)
        title = "Where each epoch's time goes" + (f" ({b.note()})" if b.note() else "")
        _draw(made, problems, "Data loading vs training time per epoch: measured steps, warm-up apart", lambda: plots.stacked_time_bars(
            labels, [d or 0.0 for d in data_s], [c or 0.0 for c in compute_s],
            out_dir / "time_per_epoch.png", title=title, ylabel="seconds" + (" per epoch" if b.size > 1 else ""),
            warmup_s=[u or 0.0 for u in warmup_s]))  # fmt: skip
        target = record.time_to_accuracy.target_top1 if record.time_to_accuracy else None
        _draw(made, problems, "Top-1 accuracy per epoch" + (f" (dotted: the target, {target:g})" if target else ""), lambda: plots.top1_per_epoch(
            {str(record.config.arch or "run"): {"train": [e.train_top1 for e in epochs], "val": [e.val_top1 for e in epochs]}},
            out_dir / "top1_per_epoch.png", title="Top-1 per epoch", target=target))  # fmt: skip
    roofline_chart(record.roofline, out_dir, made, problems)
    return made, problems


ROOFLINE_PNG = "roofline.png"


def roofline_chart(r: schema.Roofline | None, out_dir: Path, made: list[Plot], problems: list[str]) -> None:
    """The run's roofline chart (plots.roofline) when its roofs were measured."""
    from effbench.report import plots

    if r is None or not r.compute_roof_tflops or not r.memory_roof_gb_s:
        return
    points = roofline_tables.chart_points(r)
    other = {f"matmul roof ({'fp32' if r.compute_roof_precision == 'tf32' else 'matmul precision'})": r.matmul_roof_tflops * 1e12} if r.matmul_roof_tflops else None  # fmt: skip
    caption = (
        f"{roofline_tables.TITLE}: each kind at its arithmetic intensity and achieved FLOP/s, its area its share of "
        "the step; kinds with no counted FLOPs sit at their bandwidth on the memory side"
    )
    _draw(made, problems, caption, lambda: plots.roofline(
        points, out_dir / ROOFLINE_PNG, compute_flop_s=float(r.compute_roof_tflops or 0) * 1e12,
        memory_byte_s=float(r.memory_roof_gb_s or 0) * 1e9, title=f"Roofline ({r.compute_roof_precision})",
        other_compute=other, min_intensity=roofline_tables.MIN_INTENSITY))  # fmt: skip


def window_rows(w: schema.Windows) -> list[list[str]]:
    thr, ms, share = w.throughput_img_s or [], w.step_time_ms or [], w.data_time_share or []
    sizes = windows.window_sizes(w) or []
    return [
        [
            str(i + 1),
            str(sizes[i]) if i < len(sizes) else "-",
            f"{t:,.1f}",
            f"{m:,.2f}",
            f"{100 * s:.1f}%" if s is not None else "-",
        ]
        for i, (t, m, s) in enumerate(zip(thr, ms, share, strict=False))
    ]


def window_line(w: schema.Windows) -> str:
    s = windows.summary_of(w, lambda w: w.throughput_img_s)
    if s is None or s.median is None:
        return "no measured steps: no throughput windows"
    ci = f", 95% CI of the mean {interval(s.ci_low, s.ci_high)}" if s.ci_low is not None else f" ({s.note or 'no CI'})"
    return (
        f"throughput over {windows.describe_windows(w)}, {w.steps} measured steps in all: "
        f"median {s.median:,.1f} img/s{ci}"
    )


def run_html(
    record: schema.Results,
    steps: Sequence[StepRow],
    plots: Sequence[Plot],
    problems: Sequence[str],
    env: schema.Env | None = None,
) -> str:
    w = windows.windows_of(record, steps)
    sections = []
    verdict = report.verdict_line(record)
    lines = [line for line in (verdict, *roofline_tables.verdict_lines(record)) if line]
    top = [H.bullets(lines, element_id="verdict")] if lines else []
    err = record.error
    if err is not None and (err.model_fields_set or err.model_extra):
        top.append(H.paragraph(f"{record.status}: {err.type}: {err.message}", cls="error"))
    sections.append(H.Section("Verdict", top))
    summary = report.summary_rows(record)
    sections.append(H.Section("Summary", [H.key_values(summary, table_id="summary")]))
    sections.append(
        H.Section(
            "Throughput windows",
            [
                H.paragraph(window_line(w)),
                H.table(("window", "measured steps", "img/s", "step ms", "data %"), window_rows(w), table_id="windows"),
            ]
            if w.windows
            else [],
        )
    )
    sections.append(H.Section("Epochs", [H.table(report.EPOCH_HEADERS, report.epoch_rows(record), table_id="epochs")]))
    phases = report.phase_rows(record)
    if phases:
        sections.append(
            H.Section(
                "Profiling pass: phases",
                [H.table(report.PHASE_HEADERS, phases)],
            )
        )
    r = record.roofline
    if r is not None and r.kinds:
        roof_png = [p for p in plots if p[0].name == ROOFLINE_PNG]
        sections.append(
            H.Section(
                roofline_tables.TITLE,
                [H.table(roofline_tables.headers(r), roofline_tables.rows(r), table_id="roofline")]
                + _images(roof_png)
                + [H.paragraph(line) for line in roofline_tables.notes(record)],
            )
        )
        plots = [p for p in plots if p[0].name != ROOFLINE_PNG]
    sections.append(H.Section("Charts", _images(plots) + [H.paragraph(p) for p in problems]))
    sections.append(
        H.Section("Environment", [H.key_values(H.environment_pairs(env or record.env), table_id="environment")])
    )
    sections.append(
        H.Section(
            "Configuration",
            [
                # every option as it ran, the notes beside them (requested, no_effect): the section as written
                H.key_values(sorted(record.config.model_dump(exclude_unset=True).items()), table_id="config"),
                H.preformatted(" ".join(record.command or [])),
            ],
        )
    )
    title = f"effbench run {record.run_name or ''}".strip()
    subtitle = f"status {record.shown_status} · {record.device} · started {record.started_at}"
    return H.page(title, subtitle, sections, lead=[H.figures(headline_pairs(summary))])


# The figures report.html opens with, above the verdict, in this order: the first is the one to quote.
HEADLINE_LABELS = (
    report.HEADLINE_ROW,
    report.WINDOWS_ROW,
    "status",
    "arch",
    "device",
    "precision",
    "batch size per device",
    "data wait share",
)


def headline_pairs(summary: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """HEADLINE_LABELS' rows of the Summary table, worded and rounded as the table has them (one source)."""
    by_label = dict(summary)
    return [(label, by_label[label]) for label in HEADLINE_LABELS if label in by_label]


def write_run_html(
    run_dir: Path, record: schema.Results, steps: Sequence[StepRow], dest: Path | None = None
) -> list[Path]:
    """Charts under plots/ and report.html in a run folder (or in `dest`), never through a link leaving it."""
    run_dir = Path(run_dir)
    dest = Path(dest) if dest is not None else run_dir
    plots, problems = run_plots(record, outputs.folder(dest, PLOTS_DIR))
    env = _read_env(run_dir / results.ENV_FILE) or record.env
    html_file = outputs.file(dest, REPORT_HTML)
    results.atomic_write_text(html_file, run_html(record, steps, plots, problems, env))
    return [p for p, _ in plots] + [html_file]


def write_run_reports(run_dir: Path, dest: Path | None = None) -> list[Path]:
    """Everything a run folder's reports hold, re-rendered from results.json and steps.csv, into the run
    folder or `dest` (`report --output`: the run folder may be on a read-only share)."""
    run_dir = Path(run_dir)
    dest = Path(dest) if dest is not None else run_dir
    record = liveness.read(run_dir)  # a run whose process is gone reads `dead`, not `running`
    steps = windows.read_steps(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    txt, md = outputs.file(dest, results.REPORT_TXT), outputs.file(dest, results.REPORT_MD)
    results.atomic_write_text(txt, report.render(record, "text"))
    results.atomic_write_text(md, report.render(record, "md"))
    return [txt, md, *write_run_html(run_dir, record, steps, dest)]


def _read_env(path: Path) -> schema.Env | None:
    """env.json, the snapshot the run wrote beside results.json, typed; None when absent (results.json has a
    copy). Anything but a small regular file of plain JSON is one line (safe_files), as is a value the model
    refuses (schema.check), as for results.json."""
    from effbench import schema

    data = _read_json(path)
    if data is None:
        return None
    schema.check(schema.Env, data, path, "restore the file the run wrote, or delete it")
    return schema.Env.model_validate(data)


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object the run wrote beside results.json (env.json); None when absent (results.json has a copy).
    Anything but a small regular file of plain JSON is one line (safe_files), as for results.json."""
    try:
        data = safe_files.load_json(path, fix="restore the file the run wrote, or delete it")
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------------------
# A sweep
# --------------------------------------------------------------------------------------------------
def load_sweep(folder: Path) -> tuple[schema.Manifest, list[sweep_report.CellRow]]:
    """The manifest and one row per cell (results read from each cell's run folder)."""
    folder = Path(folder)
    m = liveness.observe_manifest(M.load_manifest(folder))  # a cell whose sweep process is gone: `dead`
    rows = []
    for cell in m.cells:
        record, steps = None, None
        if cell.run_dir:
            run_dir = folder / cell.run_dir
            if cell.status == M.DONE and not os.path.lexists(run_dir / results.RESULTS_FILE):
                raise EffbenchError(
                    str(run_dir), f"is gone, yet {M.MANIFEST_FILE} holds cell {cell.key} ok there; run the sweep's "
                    "command again: it runs the cell again"
                )  # fmt: skip
            if (run_dir / results.RESULTS_FILE).exists() or cell.status == "ok":
                record = liveness.read(run_dir)
                steps = windows.read_steps(run_dir)
        rows.append(sweep_report.cell_row(cell, record, steps))
    return m, rows


def _dims(m: schema.Manifest) -> dict[str, list[Any]]:
    return {k: list(v) for k, v in m.dims.items()}


def sweep_plots(
    rows: Sequence[sweep_report.CellRow], dims: Mapping[str, Sequence[Any]], out_dir: Path
) -> tuple[list[Plot], list[str]]:
    from effbench.report import plots

    made: list[Plot] = []
    problems: list[str] = []
    names = list(dims)
    # a dimension that had no effect is charted along nowhere: its cells ran one configuration, and bars
    # labelled by the values asked for would present noise as the option's doing
    idle = sweep_report.no_effect_dims(rows, dims)
    show_dims = [d for d in (varied(dims) or names) if d not in idle]
    for why in idle.values():
        problems.append(
            f"{why}: no chart along it"
            + ("" if show_dims else "; no per-configuration chart (throughput, time breakdown, top-1) either")
        )
    charted = rows if show_dims or not idle else []  # every varied dimension had no effect: none per configuration
    ran = [r for r in charted if r.record and r.status == "ok"]
    # the measured steps' split (the headline's, the tables' data and compute s/epoch), warm-up apart; a cell
    # whose record cannot tell its measured steps from its warm-up gets no bar, and is named
    split = [r for r in ran if r.measured_data_time_per_epoch_s is not None]
    problems += sweep_report.time_split_notes([r for r in ran if r not in split])
    if split:
        labels = sweep_report.chart_labels(split, show_dims)
        _draw(made, problems, "Data loading vs training time per configuration (seconds per epoch): measured steps, warm-up apart", lambda: plots.stacked_time_bars(
            labels, [r.measured_data_time_per_epoch_s or 0.0 for r in split], [r.measured_compute_time_per_epoch_s or 0.0 for r in split],
            out_dir / "time_breakdown.png", title="Data loading vs training time", ylabel="seconds per epoch",
            warmup_s=[r.warmup_time_per_epoch_s or 0.0 for r in split]))  # fmt: skip
    if charted:
        labels = sweep_report.chart_labels(charted, show_dims)
        _draw(made, problems, "Throughput per configuration: the run's throughput and the 95% CI of its windows' mean", lambda: plots.throughput_bars(
            labels, [r.throughput_img_s or r.thr_median if r.status == "ok" else None for r in charted],
            [r.thr_ci_low for r in charted], [r.thr_ci_high for r in charted], out_dir / "throughput.png",
            title="Throughput", notes=[("" if r.status == "ok" else str(r.status).upper()) for r in charted]))  # fmt: skip
    if ran and any(r.train_top1_per_epoch for r in ran):
        target = sweep_report.target_of(rows)
        series = {
            name: {"train": r.train_top1_per_epoch, "val": r.val_top1_per_epoch}
            for name, r in zip(sweep_report.chart_labels(ran, show_dims), ran, strict=True)
        }
        _draw(
            made,
            problems,
            top1_caption(series, target),
            lambda: plots.top1_per_epoch(
                series, out_dir / "top1_per_epoch.png", title="Top-1 per epoch", target=target
            ),
        )
    # a chart along a dimension needs a cell that finished: with none (every cell failed on the same bad input)
    # its axes were empty and matplotlib warned on stderr that the legend had nothing to show
    finished = {r.status for r in rows} & {"ok", "oom"}
    for dim in ("batch_size", "workers", "gpus", "nproc"):
        if dim in show_dims and not (finished - ({"oom"} if dim != "batch_size" else set())):
            problems.append(f"no {dim.replace('_', '-')} chart: no cell finished")
    if "batch_size" in show_dims and finished:
        series_b = {
            g: [
                (
                    int(sweep_report.ran(r, "batch_size")),
                    (r.throughput_img_s or r.thr_median),
                    str(r.status),
                )
                for r in members
            ]
            for g, members in sweep_report.chart_groups(rows, names, "batch_size", list(idle)).items()
        }
        _draw(
            made,
            problems,
            "Throughput vs batch size per device (red crosses: out of memory)",
            lambda: plots.throughput_vs_batch(
                series_b, out_dir / "throughput_vs_batch.png", title="Throughput vs batch size"
            ),
        )
    target = sweep_report.target_of(rows)
    if "batch_size" in show_dims and "ok" in finished and target is not None:  # throughput and time to accuracy
        series_a = {
            g: [(int(sweep_report.ran(r, "batch_size")), r.throughput_img_s or r.thr_median,
                 r.time_to_target_s if r.reached_target else None, str(r.status)) for r in members]
            for g, members in sweep_report.chart_groups(rows, names, "batch_size", list(idle)).items()
        }  # fmt: skip
        _draw(made, problems, f"Throughput and training time to val top-1 >= {target:g} vs batch size per device "
              "(crosses: not reached)", lambda: plots.throughput_and_time_to_target(
                  series_a, out_dir / "time_to_accuracy_vs_batch.png", title="Batch size", target=target))  # fmt: skip
    if "workers" in show_dims and "ok" in finished:
        series_w = {
            g: [
                (int(sweep_report.ran(r, "workers")), r.measured_data_time_per_epoch_s)
                for r in members
                if r.status == "ok" and r.measured_data_time_per_epoch_s is not None
            ]
            for g, members in sweep_report.chart_groups(rows, names, "workers", list(idle)).items()
            if sweep_report.workers_reason(members) is None  # no chart of an option that changed nothing
        }
        if not series_w:
            problems.append(
                "no workers chart: workers had no effect, cells ran cpu-contended, or their data-wait differences are "
                "within noise (the verdicts say which)"
            )
        else:
            _draw(
                made,
                problems,
                "Data-loading time per epoch (measured steps, warm-up excluded) vs DataLoader workers",
                lambda: plots.data_time_vs_workers(
                    series_w, out_dir / "data_time_vs_workers.png", title="Data-loading time vs workers"
                ),
            )
    for dim in ("gpus", "nproc"):
        if dim in show_dims and "ok" in finished:
            series_s = {}
            for g, members in sweep_report.chart_groups(rows, names, dim, list(idle)).items():
                series_s[g] = [
                    (r[scaling.DEVICES], r[scaling.THROUGHPUT], r["efficiency"])
                    for r in sweep_report.scaling_rows(members)
                ]
            xlabel = "GPUs" if dim == "gpus" else "CPU processes"
            draw = functools.partial(
                plots.scaling, series_s, out_dir / "scaling.png", title="Scaling", xlabel=xlabel
            )  # bound now, not a closure over the loop's names
            _draw(made, problems, f"Throughput and efficiency vs {xlabel} (dotted: ideal)", draw)
    return made, problems


def sweep_html(
    m: schema.Manifest,
    rows: Sequence[sweep_report.CellRow],
    plots: Sequence[Plot],
    problems: Sequence[str],
    folder: Path,
) -> str:
    dims = _dims(m)
    names = list(dims)
    sections = [H.Section("Verdicts", [H.bullets(sweep_report.verdicts(rows, dims))] if rows else [])]
    headers, body = sweep_report.summary_table(rows, names)
    links = []
    for r in rows:
        if r.run_dir and (folder / r.run_dir / REPORT_HTML).is_file():
            href = f"{r.run_dir}/{REPORT_HTML}"
            links.append(f"<li>{H.link(href, r.key)}: {H.esc(r.shown_status)}</li>")
    cells = [H.table(headers, body, row_classes=[str(r.status) for r in rows], table_id="cells")]
    cells += [H.paragraph(line) for line in sweep_report.time_split_notes(rows) + sweep_report.chance_notes(rows)]
    if links:
        cells.append("<ul>" + "".join(links) + "</ul>")
    sections.append(H.Section("Cells", cells))
    if ROUND in varied(dims):
        rh, rb = sweep_report.rounds_table(rows, names)
        sections.append(H.Section(sweep_report.ROUNDS_TITLE, [H.table(rh, rb, table_id="rounds"),
                                                              H.paragraph(sweep_report.ROUNDS_NOTE)]))  # fmt: skip
    sections.append(H.Section("Charts", _images(plots) + [H.paragraph(p) for p in problems]))
    idle = sweep_report.no_effect_dims(rows, dims)
    for dim in varied(dims):
        h, b = sweep_report.dimension_table(rows, names, dim)
        parts = [H.table(h, b, table_id=f"by-{dim.replace('_', '-')}")]
        if dim in idle:
            parts.append(H.paragraph(f"{idle[dim]}: {sweep_report.IDLE_NOTE}"))
        sections.append(H.Section(f"By {dim_option(dim)}", parts))
    roof_headers, roof_body = sweep_report.roofline_table(rows, dims)
    if roof_body:
        moved = sweep_report.roofline_moved(rows, dims)
        sections.append(
            H.Section(
                roofline_tables.SWEEP_TITLE,
                [H.table(roof_headers, roof_body, table_id="roofline")]
                + [H.paragraph(line) for line in (moved, roofline_tables.SWEEP_NOTE) if line],
            )
        )
    for dim in ("gpus", "nproc"):
        if dim in varied(dims) and dim not in idle:  # no speedup along devices that changed nothing
            for g, members in sweep_report.groups(rows, names, dim).items():
                srows = sweep_report.scaling_rows(members)
                if srows:
                    table = H.table(scaling.HEADERS, scaling.table_rows(srows))
                    sections.append(H.Section(f"Scaling [{g}]" if g else "Scaling", [table]))
    first = next((r.record for r in rows if r.record), None)
    if first is not None:
        sections.append(
            H.Section(
                "Environment",
                [H.key_values(H.environment_pairs(results.record_of(first).env), table_id="environment")],
            )
        )
    info = [("preset", m.preset or "-"), ("swept", ", ".join(f"{dim_option(k)} {','.join(show(v) for v in vals)}" for k, vals in dims.items())),
            ("pairing", "zip" if m.zip else "Cartesian product"), ("cells", len(rows)),
            ("status", ", ".join(f"{k} {v}" for k, v in M.counts(m).items())), ("fingerprint", m.fingerprint),
            ("created", m.created_at), ("updated", m.updated_at)]  # fmt: skip
    sections.append(
        H.Section("Sweep", [H.key_values(info, table_id="sweep"), H.preformatted(" ".join(m.command or []))])
    )
    sections.append(H.Section("How to read this", [H.paragraph(
        "img/s is each cell's throughput (the run's own figure) with the 95% Student's t interval of its windows' mean (--repeats); "
        "'within noise' means Welch's 95% interval of the difference includes 0. " + sweep_report.TIME_NOTE
        + (" " + sweep_report.TARGET_NOTE if sweep_report.target_of(rows) is not None else ""))]))  # fmt: skip
    return H.page(
        f"effbench sweep {m.name}",
        f"{len(rows)} cells · {', '.join(f'{k} {v}' for k, v in M.counts(m).items())}",
        sections,
    )


def sweep_terminal_text(folder: Path, width: int) -> str:
    """The sweep report as `effbench sweep` prints it: sweep.txt's text within `width` columns (fmt.report_width),
    its least needed columns left out first and named (sweep.txt, sweep.md and report.html keep every column)."""
    m, rows = load_sweep(folder)
    return sweep_report.render(
        rows, _dims(m), title=f"effbench sweep {m.name}", fmt="text", width=width, leave_out=True
    )


def top1_caption(series: Any, target: float | None) -> str:
    """The top-1 chart's caption, as the chart is drawn: bars for one epoch, lines for more (plots.top1_figure)."""
    from effbench.report.plots import top1_as_bars

    dotted = f", dotted: the target {target:g}" if target is not None else ""
    if top1_as_bars(series):
        return f"Top-1 accuracy after one epoch (bars: train and validation side by side{dotted})"
    return f"Top-1 accuracy per epoch (dashed: train, solid: validation{dotted})"


def write_sweep_reports(folder: Path, *, cells: bool = False, dest: Path | None = None) -> list[Path]:
    """sweep.txt, sweep.md, summary.json, plots/ and report.html of a sweep folder (and, with
    `cells`, every cell's own reports), into the folder or `dest` (cells under dest/<their run folder>)."""
    folder = Path(folder)
    dest = Path(dest) if dest is not None else folder
    m, rows = load_sweep(folder)
    written: list[Path] = []
    if cells:
        for r in rows:
            if r.record is not None and r.run_dir:
                written += write_run_reports(folder / r.run_dir, outputs.folder(dest, r.run_dir))
    dims = _dims(m)
    title = f"effbench sweep {m.name}"
    dest.mkdir(parents=True, exist_ok=True)
    txt, md, summary, html_file = (outputs.file(dest, n) for n in (SWEEP_TXT, SWEEP_MD, SWEEP_SUMMARY, REPORT_HTML))
    plots_dir = outputs.folder(dest, PLOTS_DIR)
    results.atomic_write_text(txt, sweep_report.render(rows, dims, title=title, fmt="text", width=REPORT_WIDTH))
    results.atomic_write_text(md, sweep_report.render(rows, dims, title=title, fmt="md"))
    results.write_json(summary, {"schema_version": M.MANIFEST_SCHEMA, "name": m.name, "dims": dims,
                                 "verdicts": sweep_report.verdicts(rows, dims),
                                 "cells": [r.summary() for r in rows],
                                 "rounds": sweep_report.rounds_pooled(rows)})  # fmt: skip
    plots, problems = sweep_plots(rows, dims, plots_dir)
    for name in SWEEP_CHARTS:  # a chart this report did not draw (an earlier render's) must not outlive it
        stale = plots_dir / name
        if stale not in [p for p, _ in plots]:
            stale.unlink(missing_ok=True)
    results.atomic_write_text(html_file, sweep_html(m, rows, plots, problems, folder))
    return written + [txt, md, summary, *[p for p, _ in plots], html_file]


def folder_kind(path: Path) -> str:
    """'sweep' or 'run'; anything else is a one-line error naming the folder."""
    path = Path(path)
    # present in any form (a FIFO, a folder, a link): the reader then says what is wrong with it
    if os.path.lexists(path / M.MANIFEST_FILE):
        return "sweep"
    if os.path.lexists(path / results.RESULTS_FILE):
        return "run"
    if not path.exists():
        raise EffbenchError(
            str(path), "does not exist; pass a run folder (results.json) or a sweep folder (sweep.json)"
        )
    raise EffbenchError(
        str(path), "holds neither results.json (a run) nor sweep.json (a sweep); pass one of those folders"
    )


def write_reports(path: Path, dest: Path | None = None) -> tuple[str, list[Path]]:
    """`effbench report DIR [--output OUT]`: re-render everything from the saved JSON, into DIR or OUT; a
    folder of runs from several machines or sweeps (neither a run nor a sweep itself) gets a leaderboard.
    A file the filesystem will not take (a read-only share) is one line naming it and --output."""
    from effbench.report import leaderboard

    with outputs.writing(Path(dest if dest is not None else path)):
        if leaderboard.is_collection(path):
            return "leaderboard", leaderboard.write_reports(path, dest)
        kind = folder_kind(path)
        if kind == "sweep":
            return kind, write_sweep_reports(path, cells=True, dest=dest)
        return kind, write_run_reports(path, dest)

"""A folder of runs from several machines or sweeps -> leaderboard.txt, leaderboard.md, a chart and
report.html (`effbench report DIR` when DIR is neither a run nor a sweep folder). No torch import;
matplotlib only inside plots.py."""

from __future__ import annotations

from collections.abc import Sequence
import os
from pathlib import Path

from effbench import results, schema
from effbench.analysis import export
from effbench.analysis import leaderboard as lb
from effbench.fmt import grid, interval, md, num, printable
from effbench.report import html as H
from effbench.sweep import manifest as M

LEADERBOARD_TXT = "leaderboard.txt"
LEADERBOARD_MD = "leaderboard.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
HEADERS = ("machine", "status", "img/s", "95% CI", "vs best", "gap to best", "environment differs from best")
MACHINE_HEADERS = ("machine", "runs", "mean img/s", "95% CI across runs", "img/s by run", "spread",
                   "own CI misses mean", "vs best", "gap to best", "environment differs from best")  # fmt: skip
MACHINES_TITLE = "Per machine, over its runs"


def is_collection(path: Path) -> bool:
    """A folder that is neither a run nor a sweep but holds run folders below it."""
    path = Path(path)
    # a results.json or sweep.json present in any form (a FIFO, a link) makes it a run or sweep, whose reader
    # then says what is wrong with the file
    if not path.is_dir() or any(os.path.lexists(path / f) for f in (results.RESULTS_FILE, M.MANIFEST_FILE)):
        return False
    return next(path.rglob(results.RESULTS_FILE), None) is not None


def _short(text: str, n: int = 32) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _target(group: lb.Group) -> str | None:
    """The group's --target-top1 column header (every run of a group has the same configuration), else None."""
    target = group.config.get(schema.field_path(schema.Config, lambda c: c.target_top1))
    return None if target is None else f"train s to val top-1 >= {target:g}"


def headers(group: lb.Group) -> tuple[str, ...]:
    """HEADERS, with the time to the target beside img/s when the group's runs had one."""
    column = _target(group)
    return HEADERS if column is None else (*HEADERS[:4], column, *HEADERS[4:])


def rows(group: lb.Group) -> list[list[str]]:
    out = []
    for e in group.entries:
        ci = interval(e.ci_low, e.ci_high, 1) if e.ci_low is not None else "-"
        rel = "-" if e.relative is None else f"{100 * e.relative:.1f}%"
        target = [e.time_to_target or "-"] if _target(group) else []
        out.append(
            [e.machine, e.status, num(e.throughput, 1), ci, *target, rel, e.gap, "; ".join(e.differences) or "-"]
        )
    return out


def machine_rows(group: lb.Group) -> list[list[str]]:
    """The group's machines over their runs (empty unless one ran the configuration more than once)."""
    out = []
    for m in group.machines:
        s = m.pooled.summary
        ci = interval(s.ci_low, s.ci_high, 1) if s is not None and s.ci_low is not None else "-"
        spread = "-" if m.pooled.spread_pct is None else f"{m.pooled.spread_pct:.1f}%"
        misses = f"{m.pooled.missed} of {m.pooled.with_interval}" if m.pooled.with_interval else "-"
        rel = "-" if m.relative is None else f"{100 * m.relative:.1f}%"
        by_run = ", ".join(f"{x:,.1f}" for x in m.pooled.finished)
        out.append(
            [m.machine, str(m.runs), num(m.mean, 1), ci, by_run, spread, misses, rel, m.gap,
             "; ".join(m.differences) or "-"]
        )  # fmt: skip
    return out


MACHINES_NOTE = (
    "Per machine: the mean of its runs' img/s, each run one sample, with the Student's t interval across them "
    "(3 runs or more); spread: slowest .. fastest run over the mean; own CI misses mean: runs whose own interval "
    "leaves that mean out, so the machine's speed moved between runs; gap to best: Welch's test on the runs' "
    "figures. The verdict then compares machines on these means."
)


def render(groups: Sequence[lb.Group], *, title: str, fmt: str) -> str:
    text = md if fmt == "md" else printable  # names from disk (hosts, folders): shown, never obeyed
    head = f"# {text(title)}" if fmt == "md" else text(title)
    parts = [head, "", *(f"- {text(g.verdict)}" for g in groups), ""]
    for i, g in enumerate(groups):
        parts += [f"## {i + 1}. {text(g.label)}" if fmt == "md" else f"{i + 1}. {text(g.label)}", ""]
        parts += [grid(rows(g), headers(g), fmt), ""]
        if g.machines:
            parts += [f"### {MACHINES_TITLE}" if fmt == "md" else f"{MACHINES_TITLE}:", ""]
            parts += [grid(machine_rows(g), MACHINE_HEADERS, fmt), ""]
    parts.append(
        "img/s: each run's throughput, the figure its own report prints (all measured images over the slowest "
        "rank's time, warm-up excluded), and the rows' order; 95% CI: Student's t interval of its windows' mean; "
        "gap to best: Welch's 95% interval of the difference (within noise when it includes 0)."
    )
    if any(g.machines for g in groups):
        parts.append(MACHINES_NOTE)
    return "\n".join(parts) + "\n"


def html(groups: Sequence[lb.Group], *, title: str, charts: Sequence[str], problems: Sequence[str]) -> str:
    sections = [H.Section("Verdicts", [H.bullets([g.verdict for g in groups])])]
    for i, g in enumerate(groups):
        blocks = [H.table(headers(g), rows(g), row_classes=[e.status for e in g.entries], table_id=f"group-{i}")]
        if g.machines:
            blocks += [
                H.paragraph(MACHINES_TITLE),
                H.table(MACHINE_HEADERS, machine_rows(g), table_id=f"group-{i}-machines"),
            ]
        sections.append(H.Section(g.label, blocks))
    if any(g.machines for g in groups):
        sections.append(H.Section("Notes", [H.paragraph(MACHINES_NOTE)]))
    sections.append(H.Section("Charts", [*charts, *(H.paragraph(p) for p in problems)]))
    n = sum(len(g.entries) for g in groups)
    return H.page(title, f"{n} runs in {len(groups)} configurations", sections)


def write_reports(folder: Path, dest: Path | None = None) -> list[Path]:
    """leaderboard.txt/.md, its chart and report.html, into the folder or `dest`, never through a link leaving it."""
    folder = Path(folder)
    out = Path(dest) if dest is not None else folder
    return write_leaderboard(export.collect([folder]), title=f"effbench leaderboard {folder.name}", out=out)


def write_leaderboard(runs: Sequence[export.Run], *, title: str, out: Path) -> list[Path]:
    """The leaderboard of exported runs (a folder's, or those read back from a tracking server) into `out`."""
    from effbench.report import outputs

    groups = lb.leaderboard(runs)
    out.mkdir(parents=True, exist_ok=True)
    txt, md, html_file = (outputs.file(out, n) for n in (LEADERBOARD_TXT, LEADERBOARD_MD, REPORT_HTML))
    plots_dir = outputs.folder(out, PLOTS_DIR)
    results.atomic_write_text(txt, render(groups, title=title, fmt="text"))
    results.atomic_write_text(md, render(groups, title=title, fmt="md"))
    written = [txt, md]
    from effbench.report import plots
    from effbench.report.charts import Plot, draw, images

    entries = [(g, e) for g in groups for e in g.entries]
    # short tick labels "group.row machine" (the tables number groups the same way); long ones squeeze the axes
    labels = [_short(f"{gi + 1}.{ri + 1} {e.machine}") for gi, g in enumerate(groups) for ri, e in enumerate(g.entries)]
    made: list[Plot] = []
    problems: list[str] = []
    # one chart that cannot be drawn (no matplotlib, a bad value) is named on the page, never fatal
    draw(made, problems, "Throughput per machine (each run's own figure), 95% CI whiskers", lambda: plots.throughput_bars(
        labels, [e.throughput for _, e in entries], [e.ci_low for _, e in entries], [e.ci_high for _, e in entries],
        plots_dir / "leaderboard.png", title="Throughput per machine",
        notes=["" if e.throughput is not None else e.status.upper() for _, e in entries]))  # fmt: skip
    written += [p for p, _ in made]
    charts = images(made)
    results.atomic_write_text(html_file, html(groups, title=title, charts=charts, problems=problems))
    return [*written, html_file]

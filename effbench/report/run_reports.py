"""A run's reports, drawn once by whoever launched the run, from its settled record; run/ calls them through
run/folder.py's `Reports` and imports nothing from report/.

    RUN_REPORTS.write(run_dir, record, steps)   report.txt, report.md, the charts and report.html
    RUN_REPORTS.text(record)                    the report printed on the terminal (report.txt's, as wide as it)
    quiet_text(record, run_dir)                 `run --quiet`: the headline lines and the path to report.txt
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from pathlib import Path

from effbench.results import StepRow
from effbench import results, schema
from effbench.errors import EffbenchError
from effbench.fmt import report_width
from effbench.report import render, tables


class RunReports:
    """What `effbench run`, a sweep and the selftest hand run/launch.run as `reports`."""

    def write(self, run_dir: Path, record: schema.Results, steps: Sequence[StepRow]) -> list[str]:
        """report.txt, report.md, then the charts and report.html, each tried whatever befell the one before.
        Returns those not written, each as `<file> not written (<why>)`: a full disk, a refused write, a chart
        value the page cannot draw. None of them makes the measurement `failed` (run/folder.py notes them)."""
        text, md = tables.render(record, "text"), tables.render(record, "md")
        pages: tuple[tuple[str, Callable[[], object]], ...] = (
            (results.REPORT_TXT, lambda: results.atomic_write_text(run_dir / results.REPORT_TXT, text)),
            (results.REPORT_MD, lambda: results.atomic_write_text(run_dir / results.REPORT_MD, md)),
            (render.REPORT_HTML, lambda: render.write_run_html(run_dir, record, steps)),
        )
        missed = []
        for name, write in pages:
            try:
                write()
            except Exception as e:  # noqa: BLE001 - a report must never cost the measurement it reports
                missed.append(f"{name} not written ({why_not_written(e)})")
        return missed

    def text(self, record: schema.Results) -> str:
        """The report for the terminal: report.txt's, as wide as the terminal when it is wider (fmt.report_width)."""
        return tables.render(record, "text", width=report_width())


def why_not_written(e: Exception) -> str:
    """The reason in a few words: results.NoSpaceError's own line names --output and the fix, too long for a note."""
    if isinstance(e, results.NoSpaceError):
        return "no space left on the device"
    if isinstance(e, EffbenchError):
        return e.message
    if isinstance(e, OSError) and e.strerror:
        name = errno.errorcode.get(e.errno or 0, "")
        return f"{e.strerror}, {name}" if name else e.strerror
    return f"{type(e).__name__}: {e}".splitlines()[0]


RUN_REPORTS = RunReports()


def quiet_text(record: schema.Results, run_dir: Path | None) -> str:
    """`run --quiet`'s whole output: at most 5 lines (tables.quiet_lines)."""
    report = run_dir / results.REPORT_TXT if run_dir is not None else None
    return "\n".join(tables.quiet_lines(record, report, report_width()))

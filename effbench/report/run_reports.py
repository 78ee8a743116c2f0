"""A run's reports, drawn once by whoever launched the run, from its settled record; run/ calls them through
run/folder.py's `Reports` and imports nothing from report/.

    RUN_REPORTS.write(run_dir, record, steps)   report.txt, report.md, the charts and report.html
    RUN_REPORTS.text(record)                    the report printed on the terminal
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from effbench.results import StepRow
from effbench import results, schema
from effbench.report import render, tables


class RunReports:
    """What `effbench run`, a sweep and the selftest hand run/launch.run as `reports`."""

    def write(self, run_dir: Path, record: schema.Results, steps: Sequence[StepRow]) -> None:
        """A full disk raises results.NoSpaceError (run/ records it); a chart that cannot be drawn is a warning."""
        results.atomic_write_text(run_dir / results.REPORT_TXT, tables.render(record, "text"))
        results.atomic_write_text(run_dir / results.REPORT_MD, tables.render(record, "md"))
        render.write_run_html_safely(run_dir, record, steps)  # plots + report.html; a warning if not, on stderr

    def text(self, record: schema.Results) -> str:
        return tables.render(record, "text")


RUN_REPORTS = RunReports()

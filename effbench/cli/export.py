"""`effbench export`: every run under the paths as one flat row (CSV or JSON lines). No torch import.

    effbench export results/ -o runs.csv                       runs, sweep cells, scaling members
    effbench export results/ nodes/ --format jsonl -o runs.jsonl
    effbench export results/ -o /dev/stdout                   a device or FIFO is written through, never replaced
    effbench export results/ | duckdb -c "select host, throughput_median_img_s from read_csv('/dev/stdin')"

Column names: docs/sweeps-and-reports.md, "Export columns" (analysis/export.py COLUMN_DOCS).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from effbench.cli.common import latest_or_given, say


def export(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Run, sweep or results folders, or results.json files; latest: the run or sweep that finished last.",
            show_default=False,
        ),
    ],
    format_: Annotated[
        str,
        typer.Option("--format", help="Output format: csv, or jsonl with one JSON object per line.", show_default=True),
    ] = "csv",
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write; - is stdout. A device or FIFO is written through. [default: stdout]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """One row per run folder found under PATHS: status, machine, figures, swept values and resolved config."""
    from effbench import results
    from effbench.analysis import export as ex
    from effbench.config import check_path
    from effbench.errors import EffbenchError
    from effbench.sweep.manifest import MANIFEST_FILE

    if format_ not in ex.FORMATS:
        raise EffbenchError("--format", f"{format_!r} is not a format; use {' or '.join(ex.FORMATS)}")
    target = None
    if output is not None and output != "-":  # `-o -`: stdout, as with no -o
        check_path("--output", output, example="--output runs.csv")
        target = Path(output)
        if target.is_dir():
            raise EffbenchError("--output", f"{target} is a folder; pass a file path such as {target / 'runs.csv'}")
        if not target.parent.is_dir():
            what = "is a file, not a folder" if target.parent.exists() else "does not exist"
            raise EffbenchError("--output", f"the folder {target.parent} {what}; create it or write elsewhere")
        holder = next((f for f in (results.RESULTS_FILE, MANIFEST_FILE) if (target.parent / f).is_file()), None)
        if target.exists() and holder is not None:  # -o run/results.json replaced the run's results with the CSV
            raise EffbenchError(
                "--output",
                f"{target} is a file of the run or sweep folder {target.parent} (it holds {holder}); exporting "
                "would overwrite it: write to a new file, e.g. --output runs.csv",
            )
    runs = ex.collect([latest_or_given(p) for p in paths])
    text = ex.render([r.row for r in runs], format_)
    if target is None:
        # to a terminal the names in it are shown, not obeyed (fmt.printable); to a pipe or file the exact text,
        # written as is (click.echo strips ANSI sequences from output that is not a terminal)
        if sys.stdout.isatty():
            say(text, nl=False)
        else:
            out = sys.stdout  # a local: app._stdout_refused knows a failed write by the frame holding stdout
            out.write(text)
            out.flush()
        return
    try:
        results.atomic_write_text(target, text)
    except OSError as e:  # a read-only mount, /proc, no permission: where, and what to do
        raise EffbenchError(
            "--output", f"cannot write {target} ({e.strerror}); write to a file on a writable filesystem"
        ) from None
    say(f"exported {len(runs)} runs to {target}", err=True)

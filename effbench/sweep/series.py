"""A scaling series: one configuration at several device counts (`--gpus 1,2,4`, `--nproc 1,2`),
each an ordinary run folder inside one series folder that also holds the scaling table."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench import results
from effbench.fmt import REPORT_WIDTH, report_width
from effbench.analysis import scaling
from effbench.config import RunConfig

SCALING_JSON = "scaling.json"
SCALING_TXT = "scaling.txt"
SCALING_MD = "scaling.md"


@dataclass
class SeriesOutcome:
    folder: Path
    outcomes: list[Any]
    rows: list[dict[str, Any]]


def run_scaling_series(
    configs: Sequence[RunConfig], *, command: list[str], echo: Callable[[str], None], progress: bool
) -> SeriesOutcome:
    from effbench.report.run_reports import RUN_REPORTS
    from effbench.run import launch
    from effbench.system.preflight import raise_on_errors, run_checks

    first = configs[0]
    said: set[str] = set()  # each preflight warning once for the series, not again for every member
    raise_on_errors(run_checks(first, gpus_requested=max(c.gpus or 0 for c in configs)), said=said)
    results.check_output_writable(first.output)
    for cfg in configs:  # every count must be launchable before the first one runs
        plan = launch.plan_for(cfg, ["effbench", "worker"])
        launch.check_per_device_batch(cfg, plan)
    kind = "cpu" if first.device == "cpu" or first.nproc is not None else "gpu"
    name = f"{dt.datetime.now():%Y%m%d-%H%M%S}_scaling_{first.arch}_{first.dataset}_{kind}_{first.scaling}"
    folder = results.create_run_dir(first.output, name)
    echo(f"scaling series: {len(configs)} runs into {folder}")
    outcomes = []
    for cfg in configs:  # each member in its own child process(es): none inherits another's CUDA context or memory
        outcome = launch.run(
            dataclasses.replace(cfg, output=folder),
            command=command,
            echo=echo,
            progress=progress,
            isolate=True,
            said_warnings=said,
            reports=RUN_REPORTS,
        )
        outcomes.append(outcome)
    records = [o.results for o in outcomes]
    rows = scaling.scaling_rows(records)
    results.write_json(
        folder / SCALING_JSON,
        {
            "schema_version": results.SCHEMA_VERSION,
            "scaling": first.scaling,
            "config": first.to_dict(),
            "command": command,
            "rows": rows,
        },
    )
    # within 100 columns, every column kept (the table split into parts); printed, the terminal's width when wider
    results.atomic_write_text(folder / SCALING_TXT, scaling.render(rows, scaling=first.scaling, width=REPORT_WIDTH))
    results.atomic_write_text(folder / SCALING_MD, scaling.render(rows, scaling=first.scaling, fmt="md"))
    echo(scaling.render(rows, scaling=first.scaling, width=report_width()))
    return SeriesOutcome(folder=folder, outcomes=outcomes, rows=rows)

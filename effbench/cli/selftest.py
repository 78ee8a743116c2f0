"""`effbench selftest`: effbench's figures on this machine checked against independent references.

    effbench selftest                       # the first command on a new GPU machine (auto = cuda when visible)
    effbench selftest --device cpu          # what CI runs: CPU checks PASS, GPU checks SKIP with the reason
    effbench selftest --only data --data-loaders fast,dali   # any two loaders on the same recipe
    docker run --rm --gpus all effbench selftest
    singularity exec --nv effbench.sif effbench selftest

Prints a table (check, status, measured, reference, tolerance, reason) fitted to the terminal, writes selftest.json
into a new folder under --output, ends with one line (`selftest: 8 PASS, 5 SKIP, 0 FAIL`), exits 1 when any check
FAILs, 0 otherwise, 2 on a bad option.
"""

from __future__ import annotations

from typing import Annotated

import typer

from effbench.cli.common import opt as _opt
from effbench.cli.common import say


def selftest(
    device: Annotated[str, _opt("Device to check: auto, cpu or cuda. [default: auto = cuda when visible]")] = "auto",
    output: Annotated[
        str | None,  # text as typed: Path("") would be "." (SelftestConfig refuses an empty one)
        _opt(
            "Parent folder of the selftest folder. [default: ./results; env EFFBENCH_OUTPUT]", envvar="EFFBENCH_OUTPUT"
        ),
    ] = None,
    pairs: Annotated[
        int,
        _opt(
            "Steps on each side of the harness and bare-loop check, interleaved one by one; at least 120. "
            "[default: 600]"
        ),
    ] = 600,
    only: Annotated[
        str | None,
        _opt("Comma-separated checks to run: flops, harness, precision, dp, nvml, ddp, data. [default: all]"),
    ] = None,
    data_loaders: Annotated[
        str | None,
        _opt("The two loaders the data check compares on one recipe, e.g. fast,dali. [default: fast,torchvision]"),
    ] = None,
) -> None:
    """Check effbench's figures here against references that share none of its code."""
    from effbench.fmt import report_width
    from effbench.selftest.checks import DATA_LOADERS, SelftestConfig, run_selftest, summary_line, table

    cfg = SelftestConfig(
        device=device,
        output=output if output is not None else "results",
        pairs=pairs,
        only=tuple(s.strip() for s in only.split(",")) if only is not None else (),
        data_loaders=tuple(s.strip() for s in data_loaders.split(",")) if data_loaders is not None else DATA_LOADERS,
    )
    outcome = run_selftest(cfg, echo=say)
    say(table(outcome.checks, report_width()))  # 100 columns, or the terminal's when wider
    say(f"\nselftest.json: {outcome.folder / 'selftest.json'}")
    say(summary_line(outcome.checks))
    raise typer.Exit(outcome.exit_code)

"""Running the real CLI entry point inside a test, the way every end-to-end test does."""

from __future__ import annotations

from pathlib import Path

import pytest

from effbench.cli import app as cli


def invoke(args, capsys) -> tuple[int, str, str]:
    """cli.main(args) -> (exit code, stdout, stderr); args may hold Paths."""
    with pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def only_run(output: Path) -> Path:
    """The one run folder under output."""
    runs = [p for p in Path(output).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]

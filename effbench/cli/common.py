"""What every command shares: the option helper and the exact command line for the record.

Torch-free, like every module of cli/ at import time.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from effbench import redact
from effbench.fmt import printable


def opt(help: str, *names: str, **kw: Any) -> Any:
    """An option whose help states its default in words ('[default: ...]'), not typer's repr."""
    return typer.Option(*names, help=help, show_default=False, **kw)


def values_given(command: list[str], option: str) -> list[str]:
    """Every value the command line gives `option` (`--preset a`, `--preset=a`), in order: click keeps the last of
    a repeated option without a word. A token after `--` is an argument, never an option."""
    args = command[: command.index("--")] if "--" in command else command
    found = []
    for i, tok in enumerate(args):
        if tok == option and i + 1 < len(args):
            found.append(args[i + 1])
        elif tok.startswith(f"{option}="):
            found.append(tok.partition("=")[2])
    return found


def say(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Every line the CLI prints (stdout, or stderr with `err`): control characters in it shown, not obeyed
    (fmt.printable), newlines kept. A run folder, a cell, a class folder or a hostname may be named with an
    escape sequence; the terminal gets `\\x1b`, never the sequence. A URI's password or a secret's value is
    shown as *** (redact.text)."""
    typer.echo(printable(redact.text(text), newlines=True), err=err, nl=nl)


def invocation(ctx: typer.Context) -> list[str]:
    """The exact command line, recorded in results.json so a run can be repeated: the argv that `main` was
    given (it hands it to click as the root context's `obj`), else the process's own; its passwords and tokens
    as *** (redact.argv): every record, report and upload of it is shown to others."""
    argv = ctx.find_root().obj
    return redact.argv(["effbench", *(argv if argv is not None else sys.argv[1:])])


def results_folder() -> Path:
    """Where `run` and `sweep` write by default (--output's default): EFFBENCH_OUTPUT, else ./results; where
    `latest` and a name's start are looked up."""
    return Path(os.environ.get("EFFBENCH_OUTPUT") or "results")


def latest_or_given(path: Path) -> Path:
    """A folder argument as typed, or for `latest` the run or sweep folder in results_folder() that finished last
    (analysis/compare.resolve_folder): every command that names a run folder takes it."""
    from effbench.analysis import compare as cmp

    return cmp.resolve_folder(path, results_folder()) if str(path) == cmp.LATEST else path

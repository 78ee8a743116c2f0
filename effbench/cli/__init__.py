"""Typer commands only: options -> config -> one call (run, sweep, report, compare, doctor).
Must not import torch at module level: `effbench --help` stays instant."""

from effbench.cli.app import main

__all__ = ["main"]

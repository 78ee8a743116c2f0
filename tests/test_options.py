"""One source of truth for options: every RunConfig field is an option of `run` and of `sweep` (minus the
multi-node ones, which a one-node sweep does not take), and no option of either names a field that is gone."""

from __future__ import annotations

import dataclasses

import pytest
import typer

from effbench.cli.app import app
from effbench.config import RunConfig, option_name

FIELDS = {option_name(f.name) for f in dataclasses.fields(RunConfig)}
RUN_ONLY = {"--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id"}  # README: multi-node options are run-only
# Options that steer the command, not the run's configuration.
COMMAND_OPTIONS = {
    "run": {"--quiet", "--smoke"},
    "sweep": {"--quiet", "--smoke", "--preset", "--zip", "--name", "--fail-fast"},
}


def _options(command: str) -> set[str]:
    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return {o for p in params for o in p.opts if o.startswith("--")}


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_config_field_is_an_option(command):
    expected = FIELDS - (RUN_ONLY if command == "sweep" else set())
    assert expected - _options(command) == set()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_option_is_a_config_field_or_steers_the_command(command):
    assert _options(command) - FIELDS - COMMAND_OPTIONS[command] == set()

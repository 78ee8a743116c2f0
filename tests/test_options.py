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


def test_preset_help_lists_every_preset():
    params = typer.main.get_command(app).commands["sweep"].params  # type: ignore[attr-defined]
    (preset,) = [p for p in params if "--preset" in p.opts]
    from effbench.sweep.presets import PRESETS

    assert all(name in preset.help for name in PRESETS)


def test_machine_dependent_device_counts_come_from_a_field_not_a_name():
    from effbench.sweep.presets import Preset, preset_dims

    renamed = Preset("my-scaling", "x", {"scaling": ("strong",)}, device_counts_from_machine=True)
    dims, fixed = preset_dims(renamed, given={"device": "cpu"}, visible_gpus=0, cores=4)
    assert dims["nproc"] == (1, 2, 4) and fixed["device"] == "cpu"
    dims, _ = preset_dims(renamed, given={}, visible_gpus=8, cores=4)
    assert dims["gpus"] == (1, 2, 4, 8)
    plain = Preset("scaling", "x", {"scaling": ("strong",)})  # the name alone no longer changes anything
    assert preset_dims(plain, given={}, visible_gpus=8, cores=4)[0] == {"scaling": ("strong",)}

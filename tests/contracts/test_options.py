"""One declaration of the options: `run`, `sweep` and `doctor` take their options from RunConfig's fields
(effbench/cli/options.py), docs/cli.md's tables are drawn from the commands (tools/gen_cli_docs.py, kept fresh
by tests/contracts/test_docs.py), and config.json's model is derived from the same fields (schema.Config). Checked on what
a user sees: the rendered --help, what a sweep receives, and a new field added to a copy of the package."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from effbench.cli.app import app
from effbench.config import RunConfig, option_name
from clitools import invoke

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {option_name(f.name) for f in dataclasses.fields(RunConfig)} - {"--smoke"}  # --smoke: each command's own
RUN_ONLY = {"--nnodes", "--node-rank", "--rdzv-endpoint", "--rdzv-id"}  # a sweep runs on one node
TRACK = {"--track", "--track-experiment", "--track-traces"}  # effbench/cli/track.py, the same on both
# What each command declares itself, beside RunConfig's fields (and --help).
OWN = {
    "run": {"--smoke", "--quiet", *TRACK},
    "sweep": {"--smoke", "--quiet", "--preset", "--zip", "--name", "--fail-fast", "--output", "--rounds", *TRACK},
    "doctor": {"--smoke"},
}
DOCTOR_FIELDS = {"--output", "--data-dir", "--dataset", "--download", "--arch", "--workers", "--batch-size",
                 "--image-size", "--device", "--gpus"}  # fmt: skip


def _options(command: str) -> set[str]:
    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return {o for p in params for o in p.opts if o.startswith("--")}


@pytest.mark.parametrize("command", ["run", "sweep", "doctor"])
def test_a_command_s_options_are_the_config_fields_and_its_own(command):
    expected = {"run": FIELDS, "sweep": FIELDS - RUN_ONLY, "doctor": DOCTOR_FIELDS}[command] | OWN[command]
    assert _options(command) - {"--help"} == expected


def _help(command: str, capsys) -> str:
    code, out, _ = invoke([command, "--help"], capsys)
    assert code == 0
    return " ".join(out.split())  # click wraps the text


def _docstrings() -> dict[str, str]:
    """The first paragraph of the string under each RunConfig field, read here from the source with ast."""
    body = ast.parse(inspect.getsource(RunConfig)).body[0].body  # type: ignore[attr-defined]
    return {a.target.id: " ".join(b.value.value.split("\n\n")[0].split()) for a, b in zip(body, body[1:], strict=False)
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value.value, str)}  # fmt: skip


def test_every_field_has_a_docstring():
    assert set(_docstrings()) == {f.name for f in dataclasses.fields(RunConfig)}, "a field's docstring is its help"


@pytest.mark.parametrize("command", ["run", "sweep", "doctor"])
def test_each_option_s_help_is_its_field_s_docstring(command, capsys):
    docs = _docstrings()
    text = _help(command, capsys)
    taken = [n for n in docs if option_name(n) in _options(command) - OWN[command]]
    assert len(taken) >= len(DOCTOR_FIELDS)
    bare = re.sub(r"\s", "", text)  # click breaks lines after a hyphen too (per- sample)
    for name in taken:
        sentence = re.sub(r"\s*\[default: .*?\]", "", docs[name])
        assert re.sub(r"\s", "", sentence) in bare, (command, name, sentence)


def test_a_default_is_shown_from_the_field_or_in_the_docstring_s_words(capsys):
    text = _help("run", capsys)
    for shown in ("[default: 5]", "[default: 0.9]", "[default: ./results; env EFFBENCH_OUTPUT]", "[default: ddp]",
                  "[default: 64 EfficientNet, 128 resnet18]", "[default: on]", "[default: off]",
                  "[range: 1..100000]", "[range: (0, 1000]]"):  # fmt: skip
        assert shown in text, shown


@pytest.fixture
def sweep_spec(monkeypatch):
    """What `effbench sweep` hands the sweep runner, which is stopped there."""
    from effbench.sweep import runner as sweeper

    seen: dict = {}

    def fake(spec, **kw):
        seen["spec"] = spec
        raise typer.Exit(0)

    monkeypatch.setattr(sweeper, "run_sweep", fake)
    return seen


def test_sweep_parses_each_generated_option_as_its_field_s_type(sweep_spec, capsys, tmp_path):
    argv = ["sweep", "--batch-size", "4,8", "--batch-norm", "on,off", "--workers", "0", "--epochs", "3", "--lr", "0.5",
            "--weights", "none", "--no-profile", "--data-only", "--no-gpu-decode", "--data-dir", "a,b",
            "--target-top1", "0.4", "--output", str(tmp_path)]  # fmt: skip
    assert invoke(argv, capsys)[0] == 0
    spec = sweep_spec["spec"]
    assert dict(spec.lists) == {"batch_size": (4, 8), "batch_norm": (True, False)}
    assert spec.options == {"workers": 0, "epochs": 3, "lr": 0.5, "weights": "none", "profile": False,
                            "data_only": True, "gpu_decode": False, "data_dir": "a,b", "target_top1": 0.4}  # fmt: skip
    assert Path(spec.output) == tmp_path


@pytest.mark.parametrize("option", ["--epochs", "--lr", "--weights", "--augment", "--seed", "--pg-timeout-s"])
def test_a_sweep_option_that_takes_one_value_refuses_a_list_naming_the_swept_ones(option, capsys):
    code, _, err = invoke(["sweep", option, "1,2"], capsys)
    assert code == 2 and err.startswith(f"error: {option}: takes one value") and "--batch-size" in err


def test_config_json_types_every_run_option_without_a_copy(tmp_path):
    """schema.Config is derived from RunConfig: a resolved config validates, and each field given a value of
    another type (a number as text, text where a number or flag goes) is refused naming that field."""
    from effbench import schema
    from effbench.config import smoke_overrides
    from effbench.errors import EffbenchError

    good = RunConfig(**smoke_overrides()).to_dict()
    schema.check(schema.Config, good, tmp_path / "config.json", "fix")
    for f in dataclasses.fields(RunConfig):
        wrong = "1" if f.type not in ("str", "str | None", "Path") else 1
        with pytest.raises(EffbenchError, match=rf"field {f.name}\b"):
            schema.check(schema.Config, {**good, f.name: wrong}, tmp_path / "config.json", "fix")


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


# A developer's whole change to add a run option (tests the done-when of issue 24: "adding a run option touches
# RunConfig and its use only"): these two lines in RunConfig, nothing in cli/, schema.py or docs/ by hand.
NEW_FIELD = '''    grad_accum: int = _ranged(1, 1, 64)
    """Micro-batches accumulated per optimizer step."""
'''
NEW_HELP = "Micro-batches accumulated per optimizer step. [default: 1] [range: 1..64]"
PROBE = r"""
import contextlib, io, json, sys
from pathlib import Path
sys.path.insert(0, "tools")
import gen_cli_docs
from effbench import schema
from effbench.cli import app as cli
from effbench.errors import EffbenchError
from effbench.run import launch

seen = []
def fake_run(cfg, **kw):  # the leaf: what reaches the runner
    seen.append(cfg.grad_accum)
    raise SystemExit(0)
launch.run = fake_run

def invoke(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code
    return code, " ".join(out.getvalue().split()), err.getvalue()

try:
    schema.check(schema.Config, {"grad_accum": "3"}, Path("config.json"), "fix")
    refused = ""
except EffbenchError as e:
    refused = str(e)
page = gen_cli_docs.PAGE.read_text()
print(json.dumps({
    "help": {c: invoke(c, "--help")[1] for c in ("run", "sweep", "doctor")},
    "ok": invoke("run", "--smoke", "--grad-accum", "3")[0], "seen": seen,
    "bad": invoke("run", "--smoke", "--grad-accum", "0"),
    "schema": str(schema.Config.model_fields["grad_accum"].annotation), "refused": refused,
    "stale": gen_cli_docs.main(["--check"]), "old_page": page,
    "written": gen_cli_docs.main([]), "fresh": gen_cli_docs.main(["--check"]), "page": gen_cli_docs.PAGE.read_text(),
}))
"""


def test_adding_a_run_option_is_one_field_in_runconfig(tmp_path):
    """Add a field to RunConfig in a copy of the package, as a developer would, and nothing else: run and sweep
    grow the option with its docstring, default and range as help, the range is enforced with the usual one-line
    error, the value reaches the runner, config.json's model types it, and docs/cli.md is stale until
    tools/gen_cli_docs.py rewrites it with the new rows and nothing else changed."""
    shutil.copytree(ROOT / "effbench", tmp_path / "effbench", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tools").mkdir()
    (tmp_path / "docs").mkdir()
    for tool in ("gen_cli_docs.py", "generated_section.py"):
        shutil.copy(ROOT / "tools" / tool, tmp_path / "tools")
    shutil.copy(ROOT / "docs" / "cli.md", tmp_path / "docs")
    config = tmp_path / "effbench" / "config.py"
    marker = "    # --- derived helpers (not options)"
    source = config.read_text()
    assert source.count(marker) == 1
    config.write_text(source.replace(marker, NEW_FIELD + "\n" + marker))

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("EFFBENCH_OUTPUT", None)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import json

    got = json.loads(done.stdout)
    assert "--grad-accum" in got["help"]["run"] and NEW_HELP in got["help"]["run"]
    assert NEW_HELP.replace("[default", "One value for every cell. [default") in got["help"]["sweep"]
    assert "--grad-accum" not in got["help"]["doctor"]  # doctor takes the fields its checks need, by name
    assert (got["ok"], got["seen"]) == (0, [3])
    code, _, err = got["bad"]
    assert code == 2 and err == "error: --grad-accum: must be 1 or more (got 0); range 1..64\n"
    assert got["schema"] == "int | None" and "grad_accum" in got["refused"]
    assert (got["stale"], got["written"], got["fresh"]) == (1, 0, 0)
    old, new = got["old_page"].splitlines(), got["page"].splitlines()
    added = [line for line in new if line not in old]
    assert added == [f"| `--grad-accum <int>` | {NEW_HELP} |",
                     f"| `--grad-accum <str>` | {NEW_HELP.replace('[default', 'One value for every cell. [default')} |"]  # fmt: skip
    assert [line for line in old if line not in new] == []

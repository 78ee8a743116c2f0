"""The CLI is a thin adapter: options -> RunConfig -> run_benchmark; errors are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from effbench.cli import app as cli
from effbench.run import launch
from effbench.config import RunConfig
from effbench.results import record_of
from clitools import invoke


@pytest.fixture
def captured(monkeypatch, tmp_path):
    """Patch the side-effecting leaf and record the config it received."""
    seen: dict = {}

    def fake_run(cfg, **kw):
        seen["cfg"] = cfg
        seen.update(kw)
        return launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    return seen


def test_options_map_to_config_fields(captured, capsys, tmp_path):
    argv = ["run", "--arch", "b5", "--dataset", "food", "--batch-size", "32", "--workers", "4", "--optimizer", "adam",
            "--freeze", "last:2", "--weights", "none", "--precision", "bf16", "--channels-last", "--val-fraction", "0.25",
            "--output", str(tmp_path / "o"), "--data-dir", str(tmp_path / "d"), "--max-steps", "7", "--seed", "3"]  # fmt: skip
    code, _, _ = invoke(argv, capsys)
    assert code == 0
    cfg: RunConfig = captured["cfg"]
    assert (cfg.arch, cfg.dataset, cfg.batch_size, cfg.workers, cfg.optimizer) == (
        "efficientnet-b5",
        "food101",
        32,
        4,
        "adam",
    )
    assert (cfg.freeze, cfg.weights, cfg.precision, cfg.channels_last, cfg.val_fraction) == (
        "last:2",
        "none",
        "bf16",
        True,
        0.25,
    )
    assert (cfg.output, cfg.data_dir, cfg.max_steps, cfg.seed) == (tmp_path / "o", tmp_path / "d", 7, 3)
    assert captured["command"] == ["effbench", *argv]  # the exact command, to rerun it


def test_smoke_preset_applies_and_explicit_options_override_it(captured, capsys):
    assert invoke(["run", "--smoke", "--batch-size", "8"], capsys)[0] == 0
    cfg = captured["cfg"]
    assert cfg.smoke and cfg.dataset == "synthetic" and cfg.device == "cpu" and cfg.batch_size == 8


def test_env_vars_give_path_defaults(captured, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EFFBENCH_DATA", str(tmp_path / "data-env"))
    monkeypatch.setenv("EFFBENCH_OUTPUT", str(tmp_path / "out-env"))
    assert invoke(["run", "--smoke"], capsys)[0] == 0
    assert captured["cfg"].data_dir == tmp_path / "data-env"
    assert captured["cfg"].output == tmp_path / "out-env"


def test_non_ok_run_exits_non_zero_with_one_line(monkeypatch, capsys, tmp_path):
    def failed(cfg, **kw):
        return launch.RunOutcome(
            tmp_path,
            record_of({"schema_version": 1, "status": "failed", "error": {"type": "RuntimeError", "message": "boom"}}),
        )

    monkeypatch.setattr(launch, "run", failed)
    code, _, err = invoke(["run", "--smoke"], capsys)
    assert code == 1
    assert err.strip().count("\n") == 0 and "run failed (RuntimeError: boom)" in err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--arch", "vgg"], "--arch: unknown architecture 'vgg'; did you mean vgg"),
        (["run", "--arch", "resnet-18"], "did you mean resnet18, resnet152, resnet101?"),  # was resnet18 twice
        (["run", "--arch", ""], "--arch: '' names no model; pass one such as resnet18"),
        (["run", "--arch", "torchvision:"], "--arch: 'torchvision:' names no model"),
        (["run", "--dataset", "mnist"], "--dataset: unknown value"),
        (["run", "--optimizer", "lion"], "--optimizer: unknown value"),
        (["run", "--batch-size", "0"], "--batch-size: must be 1 or more"),
        (["run", "--batch-size", "-3"], "--batch-size"),
        (["run", "--epochs", "0"], "--epochs"),
        (["run", "--image-size", "0"], "--image-size"),
        (["run", "--freeze", "sometimes"], "--freeze: bad spec"),
        (["run", "--batch-size", "many"], "--batch-size"),
        (["run", "--no-such-option"], "No such option"),
        (["run", "--arch", "b0", "--no-batch-norm"], "--no-batch-norm"),
        (["nonsense"], "No such command"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_runs_nothing(captured, capsys, args, needle):
    code, out, err = invoke(args, capsys)
    assert code == 2
    assert needle in err
    assert err.startswith("error: ") and err.strip().count("\n") == 0
    assert "Traceback" not in out + err
    assert "cfg" not in captured


def test_help_does_not_import_torch():
    code = "import sys; from effbench.cli.app import main\ntry:\n main(['--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")
    assert "run" in out


def test_python_dash_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "effbench", "run", "--arch", "nope"], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.startswith("error: --arch")
    assert Path(cli.__file__).name == "app.py"


def test_distributed_options_reach_the_config(captured, capsys):
    code, _, _ = invoke(
        ["run", "--smoke", "--nproc", "2", "--scaling", "strong", "--batch-size", "16", "--nnodes", "2",
         "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:29511", "--rdzv-id", "job7", "--pg-timeout-s", "30"],
        capsys,
    )  # fmt: skip
    assert code == 0
    cfg = captured["cfg"]
    assert (cfg.nproc, cfg.scaling, cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint, cfg.rdzv_id, cfg.pg_timeout_s) == (
        2, "strong", 2, 1, "127.0.0.1:29511", "job7", 30.0,
    )  # fmt: skip


def test_srun_on_two_nodes_fills_the_rendezvous(captured, capsys, monkeypatch):
    for k, v in {"SLURM_JOB_ID": "99", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
                 "SLURM_JOB_NODELIST": "n[3-4]", "SLURM_NTASKS_PER_NODE": "1"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    assert invoke(["run", "--smoke"], capsys)[0] == 0
    cfg = captured["cfg"]
    assert (cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint, cfg.rdzv_id) == (
        2,
        1,
        "n3:20099",
        "99",
    )  # port from the job id


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--smoke", "--nproc", "0"], "--nproc"),
        (["run", "--smoke", "--nproc", "1,,2"], "--nproc"),
        (["run", "--smoke", "--gpus", "2"], "--gpus"),
        (["run", "--smoke", "--rdzv-endpoint", "nohost"], "--rdzv-endpoint"),
        (["run", "--smoke", "--nnodes", "2"], "--rdzv-endpoint"),
        (["run", "--smoke", "--strategy", "dp"], "--strategy"),
        (["run", "--smoke", "--scaling", "sideways"], "--scaling"),
        (["run", "--smoke", "--node-rank", "3", "--nnodes", "2", "--rdzv-endpoint", "h:1"], "--node-rank"),
        (["run", "--device", "cuda", "--nproc", "2"], "--nproc"),
    ],
)
def test_bad_distributed_input(captured, capsys, args, needle):
    code, out, err = invoke(args, capsys)
    assert code == 2 and needle in err and err.strip().count("\n") == 0 and "Traceback" not in out + err

"""What a user sees around a run: `--version`, progress lines with rates, preset wording, the
warning when the results would die with the container. No torch import needed for any of it."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clitools import invoke
from effbench.run import launch
from effbench.run.progress import Progress, fmt_duration
from effbench.system import identity, preflight
from effbench.results import record_of

ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_lines_show_img_s_step_time_and_eta():
    clock, out = FakeClock(), io.StringIO()
    with Progress(2, stream=out, clock=clock) as prog:
        for _ in range(4):  # 4 measured steps of 64 images, timed 0.4 s each; 0.5 s each on the wall clock
            prog.step(False, 0.4, 64)
        clock.t += 4 * 0.5
        prog.update(0, 4, 10, 2.5)
        for _ in range(6):  # then 6 steps timed 0.2 s, 0.25 s on the wall clock
            prog.step(False, 0.2, 64)
        clock.t += 6 * 0.25
        prog.update(0, 10, 10, 2.0)
    first, second = out.getvalue().splitlines()
    # 4 x 64 images / 1.6 s timed = 160 img/s; 16 steps left (6 in epoch 1, 10 in epoch 2) x 0.5 s wall = 8 s
    assert first == "epoch 1/2 step 4/10 loss 2.5000 (160.0 img/s measured, 500 ms/step, ETA 8s)"
    # 6 x 64 / 1.2 s = 320 img/s; 10 steps left x 0.25 s = 2.5 s, shown rounded
    assert second == "epoch 1/2 step 10/10 loss 2.0000 (320.0 img/s measured, 250 ms/step, ETA 2s)"


def test_progress_img_s_excludes_warm_up_as_the_headline_does():
    # the audit's line: 38.7 img/s on the wall clock, warm-up in it, beside a 58.2 img/s headline
    clock, out = FakeClock(), io.StringIO()
    with Progress(1, stream=out, clock=clock, ranks=2) as prog:
        prog.step(True, 1.0, 8)  # a warm-up step (cudnn autotuning, a compile): slow, and excluded
        prog.step(True, 0.9, 8)
        clock.t += 2.0
        prog.update(0, 2, 6, 3.0)
        prog.step(True, 0.9, 8)
        prog.step(False, 0.1, 8)  # the first measured step
        clock.t += 1.2
        prog.update(0, 4, 6, 2.0)
    only_warmup, mixed = out.getvalue().splitlines()
    assert only_warmup == "epoch 1/1 step 2/6 loss 3.0000 (warm-up, 1000 ms/step, ETA 4s)"
    # 2 ranks x 8 images / 0.1 s measured = 160 img/s; the warm-up step's 0.9 s is not in it
    assert mixed.startswith("epoch 1/1 step 4/6 loss 2.0000 (160.0 img/s measured, 600 ms/step, ")


def test_progress_without_a_timed_step_still_shows_step_time():
    clock, out = FakeClock(), io.StringIO()
    with Progress(1, stream=out, clock=clock) as prog:
        clock.t += 3.0
        prog.update(0, 3, 3, float("nan"))
    assert out.getvalue().strip().endswith("(1000 ms/step, ETA 0s)")


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0s"), (59.6, "1m00s"), (185, "3m05s"), (3720, "1h02m")])
def test_durations_are_short(seconds, text):
    assert fmt_duration(seconds) == text


def test_progress_bar_on_a_terminal_shows_the_rate():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock, out = FakeClock(), Tty()
    with Progress(1, stream=out, clock=clock) as prog:
        prog.step(False, 0.5, 10)
        prog.step(False, 1.5, 10)
        clock.t += 2.0
        prog.update(0, 2, 4, 1.0)
    text = out.getvalue()
    assert "epoch 1/1" in text and "10.0 img/s measured" in text and "1000 ms/step" in text and "loss 1.0000" in text


def test_smoke_preset_device_is_not_reported_as_given(capsys):
    code, _, err = invoke(["run", "--smoke", "--gpus", "2"], capsys)
    assert code == 2 and "--device cpu was given" not in err
    assert err.startswith("error: --gpus:") and "the preset's --device cpu" in err and "--device cuda" in err


def test_a_device_the_user_gave_is_still_blamed(capsys):
    code, _, err = invoke(["run", "--smoke", "--device", "cpu", "--gpus", "2"], capsys)
    assert code == 2 and "--device cpu was given" in err


def test_version_names_effbench_torch_and_cuda_without_importing_torch(tmp_path):
    info = tmp_path / "image.json"
    info.write_text(json.dumps({"revision": "abc1234", "flavour": "cu130", "lock_sha256": "f" * 64, "created": "x"}))
    code = "import sys; from effbench.cli.app import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n    print('torch' in sys.modules, e.code)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), identity.IMAGE_INFO_ENV: str(info)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    lines = out.stdout.splitlines()
    assert lines[-1] == "False 0", out
    assert re.fullmatch(r"effbench \S+", lines[0])
    assert "image revision abc1234, flavour cu130, lock sha256 ffffffffffffffff" in lines[1]
    import torch  # the reference: torch's own answer, read after the fact in this process

    assert f"torch {__import__('importlib.metadata').metadata.version('torch')}" in lines[2]
    assert f"CUDA {torch.version.cuda or 'none (CPU-only build)'}" in lines[2]


def test_version_outside_the_image_says_so(tmp_path):
    assert "image: none" in identity.version_text({identity.IMAGE_INFO_ENV: str(tmp_path / "absent.json")})


def test_lost_output_is_warned_again_after_the_run(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(
        launch,
        "run",
        lambda cfg, **kw: launch.RunOutcome(run_dir=tmp_path, results=record_of({"schema_version": 1, "status": "ok"})),
    )
    monkeypatch.setattr(preflight, "output_loss_warning", lambda output: f"warning: output-mount: {output} lost")
    code, _, err = invoke(["run", "--smoke", "--output", "/results"], capsys)
    assert code == 0 and err.strip().splitlines()[-1] == "warning: output-mount: /results lost"


def test_env_json_records_the_image_identity(monkeypatch, tmp_path):
    from effbench.system.hardware import env_snapshot

    info = {"revision": "abc1234", "flavour": "cu130", "lock_sha256": "0" * 64}
    (tmp_path / "image.json").write_text(json.dumps(info))
    monkeypatch.setenv(identity.IMAGE_INFO_ENV, str(tmp_path / "image.json"))
    assert env_snapshot()["image"] == info
    monkeypatch.setenv(identity.IMAGE_INFO_ENV, str(tmp_path / "absent.json"))
    assert env_snapshot()["image"] is None

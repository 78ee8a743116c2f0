"""A run's reports are drawn once, by its caller, from the settled record: in one process at rank 0's final
write, under torchrun by the launcher once torchrun has ended (the ranks draw none; run/ imports nothing from
report/, tests/contracts/test_package.py). Before, rank 0 drew them inside torchrun and the launcher drew them again
whenever torchrun's end changed the record (a `failed` report printed, an `oom` report.txt)."""

from __future__ import annotations

import json
import re

import pytest

from clitools import invoke, only_run
from effbench.report.run_reports import RUN_REPORTS, RunReports

TINY = ["--dataset", "synthetic", "--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu",
        "--workers", "0", "--max-steps", "3", "--max-val-steps", "1", "--warmup-steps", "1", "--epochs", "1",
        "--batch-size", "4", "--no-profile", "--quiet"]  # fmt: skip


_WRITE, _TEXT = RunReports.write, RunReports.text  # the real ones, before a test patches the class


class Counting:
    """RUN_REPORTS, with each call recorded: the status drawn, and whether report.txt was already there."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, bool]] = []
        self.texts: list[str] = []

    def write(self, run_dir, record, steps):
        self.writes.append((record.status, (run_dir / "report.txt").exists()))
        return _WRITE(RUN_REPORTS, run_dir, record, steps)

    def text(self, record):
        self.texts.append(record.status)
        return _TEXT(RUN_REPORTS, record)


def _status_rows(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if re.match(r"status\s", line)]


def test_the_run_command_draws_the_reports_once_in_one_process(monkeypatch, capsys, tmp_path):
    seen = Counting()
    monkeypatch.setattr(RunReports, "write", lambda _self, *a: seen.write(*a))
    monkeypatch.setattr(RunReports, "text", lambda _self, r: seen.text(r))
    code, out, err = invoke(["run", *TINY, "--output", tmp_path], capsys)
    assert code == 0, err
    run = only_run(tmp_path)
    assert seen.writes == [("ok", False)] and seen.texts == ["ok"]
    assert _status_rows(out) == ["ok"] and _status_rows((run / "report.txt").read_text()) == ["ok"]
    assert (run / "report.md").is_file() and (run / "report.html").is_file()


@pytest.mark.slow  # 8-13 s on 2 cores: run by `make test-slow` (CI's slow step for test_distributed)
@pytest.mark.timeout(600)
def test_a_two_rank_run_is_drawn_once_by_the_launcher_with_the_end_torchrun_settled(monkeypatch, tmp_path):
    # Rank 1 runs out of memory (faults.py hook, RANK:N); rank 0 then ends `failed` or `interrupted` on its own,
    # and the launcher settles the job `oom` from the markers (run/record.py settle_with_torchrun).
    from effbench.config import RunConfig
    from effbench.run import launch

    monkeypatch.setenv("EFFBENCH_FAULT_OOM_AT_BATCH", "1:4")  # the torchrun children inherit it
    cfg = RunConfig(
        arch="resnet18", dataset="synthetic", image_size=16, weights="none", device="cpu", workers=0, batch_size=4,
        max_steps=4, epochs=1, warmup_steps=1, nproc=2, pg_timeout_s=20, profile=False, output=tmp_path,
    )  # fmt: skip
    seen, lines = Counting(), []
    outcome = launch.run(cfg, command=["t"], echo=lines.append, progress=False, reports=seen)
    assert outcome.results.status == "oom" and outcome.exit_code == 1
    # once, with the settled end, into a folder no rank had drawn a report in
    assert seen.writes == [("oom", False)] and seen.texts == ["oom"]
    run = outcome.run_dir
    assert json.loads((run / "results.json").read_text())["status"] == "oom"
    assert _status_rows((run / "report.txt").read_text()) == ["oom"]
    printed = [line for line in lines if _status_rows(line)]
    assert len(printed) == 1 and _status_rows(printed[0]) == ["oom"]

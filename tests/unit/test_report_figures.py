"""Issue 11 section 3: verdicts and reports say only what the measurements show.

Every figure here is checked against arithmetic written in the test (sums and maxima by hand, rows read
back from the CSV files), never against the function that produced it.
"""

from __future__ import annotations

import csv
import json
import re

import pytest

from clitools import invoke, only_run
from effbench import config as config_mod
from effbench import results
from effbench.analysis import compare, stats, windows
from effbench.analysis.throughput import job_throughput
from effbench.config import RunConfig
from effbench import schema
from effbench.report import tables
from effbench.schema import Epoch
from effbench.run import record
from effbench.run.timing import StepTime, Tally
from effbench.run.train import EpochResult


def _steps(times: list[tuple[float, float]], images: int) -> list[dict]:
    return [{"warmup": False, "images": images, "data_time_s": d, "compute_time_s": c} for d, c in times]


# Two ranks, three measured steps each: rank 1 is the slower one.
RANK0 = _steps([(0.01, 0.10), (0.02, 0.11), (0.01, 0.09)], images=8)
RANK1 = _steps([(0.03, 0.12), (0.02, 0.13), (0.04, 0.12)], images=8)


def _row(rank: int, steps: list[dict]) -> dict:
    data = sum(s["data_time_s"] for s in steps)
    comp = sum(s["compute_time_s"] for s in steps)
    return {"rank": rank, "images": 8 * len(steps), "steps": len(steps), "data_time_s": data,
            "compute_time_s": comp, "time_s": data + comp}  # fmt: skip


def test_in_progress_final_epoch_and_window_throughput_agree_on_the_same_rank_rows():
    rows = [_row(0, RANK0), _row(1, RANK1)]
    by_hand = (24 + 24) / (0.03 + 0.12 + 0.02 + 0.13 + 0.04 + 0.12)  # all images / the slow rank's time
    # in progress: results.json after an epoch holds the ranks gathered with it (runner's epoch loop)
    tally = Tally()
    for s in RANK0:
        tally.add(StepTime(s["data_time_s"], s["compute_time_s"]), 8)
    opened = {"schema_version": 1, "status": "running", "world_size": 2, "data": {}}
    typed = [schema.Rank(**r) for r in rows]
    in_progress = record.with_headline(opened, typed, [], Tally(), tally, {})
    # at the end: the same rows gathered once more; the old code gave rank 0 x world size here
    final = record.with_headline(opened, record.rank_rows(list(reversed(typed))), [], Tally(), tally, {})
    rank0_times_two = 2 * 24 / sum(s["data_time_s"] + s["compute_time_s"] for s in RANK0)
    assert in_progress.throughput_img_s == pytest.approx(by_hand) == final.throughput_img_s
    assert by_hand != pytest.approx(rank0_times_two, rel=0.05)  # the two old definitions really differed
    assert final.measured.images == 48 and final.measured.time_s == pytest.approx(rows[1]["time_s"])
    # one window over every step is the headline; the epoch row of the same steps is too
    ranks = [windows.measured_steps(RANK0), windows.measured_steps(RANK1)]
    one = windows.rank_windows(ranks, repeats=1)
    assert one["throughput_img_s"] == [pytest.approx(by_hand)]
    epoch_rows = [schema.Epoch(epoch=1, measured_images=r["images"], measured_time_s=r["time_s"], images=r["images"],
                               total_time_s=r["time_s"], val_images=0, val_time_s=0.0) for r in rows]  # fmt: skip
    assert record.merge_epoch(epoch_rows).throughput_img_s == pytest.approx(by_hand)
    # three windows: each window's steps of both ranks, by hand
    three = windows.rank_windows(ranks, repeats=3)
    for i, got in enumerate(three["throughput_img_s"]):
        slow = max(sum(RANK0[i].values()) - 8, sum(RANK1[i].values()) - 8)  # data + compute of step i
        assert got == pytest.approx(16 / slow)


def test_one_rank_throughput_is_a_bare_loops_images_over_time():
    tally = Tally()
    total_t, total_i = 0.0, 0
    for d, c, n in ((0.01, 0.2, 4), (0.0, 0.25, 4), (0.02, 0.18, 3)):
        tally.add(StepTime(d, c), n)
        total_t += d + c
        total_i += n
    assert tally.throughput_img_s == pytest.approx(total_i / total_t)
    assert Tally().throughput_img_s is None and job_throughput([]) is None  # nothing measured: no rate


def _epoch(warm: list[tuple[float, float]], meas: list[tuple[float, float]], images: int = 4) -> EpochResult:
    w, m = Tally(), Tally()
    for d, c in warm:
        w.add(StepTime(d, c), images)
    for d, c in meas:
        m.add(StepTime(d, c), images)
    return EpochResult(epoch=0, steps=w.steps + m.steps, images=w.images + m.images,
                       data_time_s=w.data_time_s + m.data_time_s, compute_time_s=w.compute_time_s + m.compute_time_s,
                       train_loss=1.0, train_top1=0.5, val_loss=None, val_top1=None, val_time_s=0.0, val_images=16,
                       warmup=w, measured=m, step_rows=[])  # fmt: skip


def _rec(**fields):
    """A results.json record as the reports read it: typed, with the two fields every record has."""
    return results.record_of({"schema_version": 1, "status": "ok", **fields})


def test_epoch_img_s_excludes_warmup_like_the_headline_and_epochs_are_one_based():
    typed = _epoch(warm=[(0.5, 2.0)], meas=[(0.01, 0.1), (0.01, 0.1)]).record()
    assert typed.epoch == 1  # 1-based like the progress line "epoch 1/N" and the plots
    assert typed.throughput_img_s == pytest.approx(8 / 0.22)  # the 2.5 s warm-up step is not in it
    assert typed.warmup_steps == 1
    only_warmup = _epoch(warm=[(0.5, 2.0)], meas=[]).record()
    assert only_warmup.throughput_img_s is None  # no measured step: "-", never a warm-up figure
    e = typed.model_dump(exclude_unset=True)  # the row as results.json holds it
    row = tables.epoch_rows(_rec(epochs=[e]))[0]
    assert row[0] == "1" and row[tables.EPOCH_HEADERS.index("img/s (measured)")] == f"{8 / 0.22:,.1f}"


def test_the_epoch_tables_data_share_is_the_headlines_measured_steps_only():
    # 1 warm-up step (0.5 s data + 2.0 s compute) and 2 measured steps (0.01 + 0.1 each): by hand the
    # measured data share is 0.02 / 0.22 = 9.1%; over every step it was 0.52 / 2.72 = 19.1%
    typed = _epoch(warm=[(0.5, 2.0)], meas=[(0.01, 0.1), (0.01, 0.1)]).record()
    e = typed.model_dump(exclude_unset=True)  # the row as results.json holds it
    tally = Tally()
    for d, c in [(0.01, 0.1), (0.01, 0.1)]:
        tally.add(StepTime(d, c), 4)
    head = record.with_headline({"schema_version": 1, "status": "running"}, [], [typed], Tally(), tally, {})
    assert head.data_time_share == pytest.approx(0.02 / 0.22)
    row = dict(zip(tables.EPOCH_HEADERS, tables.epoch_rows(_rec(epochs=[e]))[0], strict=True))
    assert row["data % (measured)"] == f"{100 * 0.02 / 0.22:.1f}%" == "9.1%"
    assert (row["data (s, measured)"], row["compute (s, measured)"], row["total (s, measured)"]) == (
        "0.020", "0.200", "0.220",
    )  # fmt: skip
    assert (row["warm-up steps"], row["warm-up (s)"]) == ("1", "2.500")
    # an epoch all warm-up measured nothing: "-", as the summary's data wait share
    warm_row = tables.epoch_rows(_rec(epochs=[_epoch([(0.5, 2.0)], []).record().model_dump(exclude_unset=True)]))[0]
    only_warmup = dict(zip(tables.EPOCH_HEADERS, warm_row, strict=True))
    assert only_warmup["data % (measured)"] == "-"
    # a record written before the epochs held the measured split: its warm-up-free epochs only
    old = {k: v for k, v in e.items() if not k.startswith("measured_data") and not k.startswith("measured_compute")}
    assert tables.epoch_measured(Epoch.model_validate(old)) == (None, None)
    no_warmup = Epoch.model_validate({**old, "warmup_steps": 0})
    assert tables.epoch_measured(no_warmup) == (old["data_time_s"], old["compute_time_s"])
    # two ranks: the split of the rank whose measured steps took longest, as the headline takes the slowest's
    slow = _epoch(warm=[], meas=[(0.05, 0.1), (0.05, 0.1)]).record()
    merged = record.merge_epoch([typed, slow])
    assert (merged.measured_data_time_s, merged.measured_compute_time_s) == pytest.approx((0.1, 0.2))


def test_the_time_per_epoch_chart_splits_the_measured_steps_and_shows_warm_up_apart(tmp_path, monkeypatch):
    from effbench.report import plots, render

    got = {}

    def stacked_time_bars(labels, data_s, compute_s, path, **kw):  # the leaf: what the chart is drawn from
        got.update(labels=labels, data=data_s, compute=compute_s, warmup=kw.get("warmup_s"))
        return path

    monkeypatch.setattr(plots, "stacked_time_bars", stacked_time_bars)
    e = _epoch(warm=[(0.5, 2.0)], meas=[(0.01, 0.1), (0.01, 0.1)]).record().model_dump(exclude_unset=True)
    render.run_plots(_rec(epochs=[e], config={"arch": "resnet18"}), tmp_path)
    # by hand: measured data 0.02 s and compute 0.2 s (the 9.1% of the table), the 2.5 s warm-up step apart
    assert got["labels"] == ["epoch 1"]
    assert got["data"] == [pytest.approx(0.02)] and got["compute"] == [pytest.approx(0.2)]
    assert got["warmup"] == [pytest.approx(2.5)]


def test_config_json_holds_resolved_values_and_what_had_no_effect():
    cfg = RunConfig(dataset="synthetic", workers=4, device="auto", precision="auto")
    d = config_mod.resolved_record(
        cfg, device_type="cpu", precision="fp32", repeats=5, data_info={"loader": "synthetic (on device)", "workers": 0}
    )
    assert (d["device"], d["precision"], d["repeats"], d["workers"]) == ("cpu", "fp32", 5, 0)
    assert d["requested"] == {"device": "auto", "precision": "auto", "repeats": None, "workers": 4}
    assert RunConfig.from_dict(d).workers == 0  # still a valid config: every value is an option value
    assert "--workers 4 ran as 0" in d["no_effect"]["workers"]
    assert "loader" not in d["no_effect"]  # auto resolves to synthetic on synthetic data: what ran
    explicit = config_mod.resolved_record(
        RunConfig(dataset="synthetic", loader="torchvision", workers=0, repeats=3),
        device_type="cpu", precision="fp32", repeats=3, data_info={"loader": "synthetic (on device)", "workers": 0},
    )  # fmt: skip
    assert set(explicit["no_effect"]) == {"loader"}
    # two CPU runs, one asked for auto and one for cpu: compare sees no device difference
    a = _typed({"config": d})
    b = _typed({"config": {**d, "requested": {"precision": "auto"}}})
    assert compare.config_differences(a, b) == []


def _typed(record: dict):
    """A record held in memory, typed as the readers take it (results.record_of)."""
    return results.record_of({"schema_version": results.SCHEMA_VERSION, "status": "ok", **record})


def _record(thr: float, windows_thr: list[float], shares: list[float], steps: int = 10, status: str = "ok"):
    w = {"windows": len(windows_thr), "throughput_img_s": windows_thr, "step_time_ms": [10.0] * len(windows_thr),
         "data_time_share": shares}  # fmt: skip
    tally = {"steps": steps, "images": 0, "data_time_s": 0.0, "compute_time_s": 0.0, "time_s": 0.0}
    return _typed({"status": status, "throughput_img_s": thr, "throughput_windows": w, "measured": tally})


def test_compare_prints_the_reports_throughput_and_no_share_change_of_1e6_outside_noise():
    # pooled 4.4 (the report's figure) while the windows' mean is 4.67: compare shows 4.4
    shares = [0.0100000000, 0.0100000001, 0.0100000002]
    a = _record(4.4, [4.0, 4.5, 5.5], shares)
    b = _record(4.4, [4.0, 4.5, 5.5], [x + 1e-6 for x in shares])
    assert stats.difference(shares, [x + 1e-6 for x in shares]).significant  # Welch alone calls it a change
    rows = compare.compare_runs(a, [], b, [])
    assert rows[0].a.startswith("4.40 [") and rows[0].delta == "+0.00"
    share = next(r for r in rows if "share" in r.metric)
    assert share.significant is False and share.verdict.startswith("negligible")


def test_compare_on_a_run_with_no_measured_step_names_that_reason():
    a = _record(4.4, [4.0, 4.5, 5.5], [0.1, 0.1, 0.1])
    b = _record(0.0, [], [], steps=0, status="interrupted").model_copy(update={"throughput_img_s": None})
    rows = compare.compare_runs(a, [], b, [])
    assert rows[0].verdict == "B: no measured step (status interrupted)"
    assert compare.conclusion(rows) == "Throughput: cannot tell (B: no measured step (status interrupted))."


def test_report_rows_show_what_fed_the_run_the_images_validated_and_the_evidence():
    record = results.record_of({
        "schema_version": 1,
        "status": "ok",
        "config": {"loader": "fast", "workers": 0, "dataset": "synthetic",
                   "no_effect": {"workers": "synthetic (on device) starts no DataLoader worker processes"}},
        "data": {"loader": "synthetic (on device)", "workers": 0, "train_size": 1024, "val_size": 32},
        "epochs": [{"epoch": 1, "val_images": 16}],
        "verdict": {"bottleneck": "compute-bound", "evidence": "CPU run: data wait 0.5% of step time", "advice": "x"},
        "profile": {"profiler_overhead": None, "profiler_overhead_note": "within noise (-27%)"},
    })  # fmt: skip
    rows = dict(tables.summary_rows(record))
    assert rows["loader / workers"] == "synthetic (on device) / 0"  # as results.json's data section says
    assert rows["validation images per epoch (used)"] == "16"  # not the split's 32
    assert rows["bottleneck"] == "compute-bound (CPU run: data wait 0.5% of step time)"
    # an older record's signed note: the report says within noise and no figure the interval did not support
    assert rows["profiler overhead"] == "within noise (Welch's 95% interval of profiled - timed includes 0)"
    assert "no effect" in rows["--workers: no effect"] or "DataLoader" in rows["--workers: no effect"]


def test_the_until_row_gives_the_interval_its_ends_and_a_drift():
    def row(**until) -> str:
        record = _typed({"until": {"target": "ci:2%", "windows": 14, "window_steps": 10, "steps": 145,
                                   "reached": True, "reason": "interval reached", **until}})  # fmt: skip
        return dict(tables.summary_rows(record))["until ci:2%"]

    steady = row(half_width_pct=1.84, ci_low_img_s=1180.25, ci_high_img_s=1224.5, lag1_autocorrelation=0.12)
    assert steady == ("+/-1.84% [1,180.2, 1,224.5] img/s over 14 windows of 10 steps, lag-1 autocorrelation +0.12; "
                      "interval reached")  # fmt: skip
    drift = row(half_width_pct=1.9, ci_low_img_s=40.0, ci_high_img_s=None, lag1_autocorrelation=0.71)
    assert "[40.0, inf] img/s" in drift and "+0.71 (the speed drifted while measuring)" in drift
    older = row(half_width_pct=1.9)  # a record from before the interval's ends were kept
    assert older == "+/-1.90% over 14 windows of 10 steps; interval reached"


def _digits(steps_run: int, *, dataset: str = "imagefolder", world: int = 1) -> dict:
    # the digits run: 1,438 training images, batch 32 -> 44 steps of 32 = 1,408 trained, 30 left out
    per_device = 32 // world
    return {
        "schema_version": 1, "status": "ok", "config": {"dataset": dataset, "batch_size": per_device},
        "batch_size_per_device": per_device, "global_batch_size": 32, "world_size": world,
        "data": {"train_size": 1438, "val_size": 359, "steps_per_epoch": 44},
        "epochs": [{"epoch": 1, "steps": steps_run, "images": 32 * steps_run}],
    }  # fmt: skip


def test_the_report_says_how_many_images_drop_last_left_out():
    # issue 34: a drop_last of 30 images was not explained; the figure is written out by hand (1,438 - 44 x 32)
    rows = tables.summary_rows(results.record_of(_digits(44)))
    labels = [label for label, _ in rows]
    assert dict(rows)["dropped per epoch"] == "30 images dropped by drop_last (batch 32)"
    assert labels.index("dropped per epoch") == labels.index("dataset") + 1  # said beside the dataset row
    two = dict(tables.summary_rows(results.record_of(_digits(44, world=2))))
    assert two["dropped per epoch"] == "30 images dropped by drop_last (batch 32 = 16 x 2 ranks)"
    # an epoch --max-steps cut short, and generated data (an epoch is a count), say nothing of it
    assert "dropped per epoch" not in dict(tables.summary_rows(results.record_of(_digits(12))))
    synthetic = results.record_of(_digits(44, dataset="synthetic"))
    assert "dropped per epoch" not in dict(tables.summary_rows(synthetic))


def test_run_records_resolved_config_one_based_epochs_and_warns_about_ignored_workers(tmp_path, capsys):
    code, _, err = invoke(
        ["run", "--smoke", "--arch", "resnet18", "--batch-size", "4", "--max-steps", "4", "--warmup-steps", "1",
         "--max-val-steps", "1", "--no-profile", "--workers", "4", "--output", tmp_path, "--quiet"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    run = only_run(tmp_path)
    r = json.loads((run / "results.json").read_text())
    cfg = json.loads((run / "config.json").read_text())
    assert "warning: --workers had no effect on this run" in err
    assert cfg["workers"] == 0 and cfg["requested"]["workers"] == 4 and "workers" in cfg["no_effect"]
    assert (cfg["device"], cfg["precision"], cfg["repeats"]) == ("cpu", "fp32", 3)  # min(5, 4 steps - 1 warm-up)
    assert r["throughput_windows"]["windows"] == 3
    # epochs 1-based in results.json, epochs.csv and steps.csv
    assert [e["epoch"] for e in r["epochs"]] == [1]
    assert [row["epoch"] for row in csv.DictReader((run / "epochs.csv").open())] == ["1"]
    steps = list(csv.DictReader((run / "steps.csv").open()))
    assert {row["epoch"] for row in steps} == {"1"}
    # the headline and the epoch's img/s from the measured rows of steps.csv, summed here
    measured = [s for s in steps if s["warmup"] == "False"]
    images = sum(int(s["images"]) for s in measured)
    secs = sum(float(s["data_time_s"]) + float(s["compute_time_s"]) for s in measured)
    assert r["throughput_img_s"] == pytest.approx(images / secs, rel=1e-9)
    assert r["epochs"][0]["throughput_img_s"] == pytest.approx(images / secs, rel=1e-9)
    # --max-val-steps 1 validated one batch of 4: the report says 4, not the split's size
    assert r["epochs"][0]["val_images"] == 4
    report = (run / "report.txt").read_text()
    assert re.search(r"validation images per epoch \(used\) +4\n", report)
    assert re.search(r"loader / workers +synthetic \(on device\) / 0\n", report)


TOO_FEW = "too few windows to judge (needs 3 per run, has 2)"


def test_two_windows_are_too_few_to_judge_anywhere_as_they_are_too_few_for_the_run_reports_interval():
    from effbench.analysis import leaderboard
    from effbench.analysis.export import Run
    from effbench.report import sweep_tables

    two, three = [10.0, 12.0], [20.0, 21.0, 22.0]
    # the run report: no interval from 2 windows, one from 3 (the 95% t quantile at df 1 is 12.7)
    assert stats.summarize(two).ci_low is None and stats.summarize(three).ci_low is not None
    # Welch alone would call these apart: delta 10, se^2 = 2/2 + 1/3 = 4/3, df = (4/3)^2 / (1 + (1/3)^2 / 2)
    # = 1.68, and the half-width t * 1.155 stays below 10 for any t under 8.7 (t at df 1.68 is about 5.6)
    assert stats.difference(two, three).significant is True
    rows = compare.compare_runs(_record(11.0, two, [0.1, 0.2]), [], _record(21.0, three, [0.1, 0.2, 0.3]), [])
    for r in rows[:3]:  # throughput, step time, data-wait share: every windowed metric
        assert (r.verdict, r.significant, r.ci) == (TOO_FEW, None, "-")
    assert compare.conclusion(rows) == f"Throughput: cannot tell ({TOO_FEW})."
    # the CI gate: B 48% slower by the runs' figures, but 2 windows cannot say it is outside noise; its windows lie
    # 40% apart, short of the clear gap a 25% threshold needs (25 + 25: compare.clear_gap; issue 33)
    gate = compare.slower_gate(_typed({"throughput_img_s": 21.0}), three, _typed({"throughput_img_s": 11.0}), two, 25.0)
    assert not gate.failed and gate.line.endswith(f"{TOO_FEW}: B: raise --repeats to 3 or more")
    # a sweep's verdict
    cells = [sweep_tables.CellRow(key=k, params={"optimizer": k}, status="ok", throughput_img_s=t, thr_samples=w)
             for k, t, w in (("sgd", 11.0, two), ("adam", 21.0, three))]  # fmt: skip
    assert sweep_tables.verdicts(cells, {"optimizer": ["sgd", "adam"]}) == [
        f"no highest throughput along optimizer: {TOO_FEW}; top 21.0 img/s"
    ]
    # the leaderboard's gap to the best
    runs = [Run({"status": "ok", "throughput_img_s": t, "throughput_median_img_s": t, "host": h}, w)
            for h, t, w in (("a", 21.0, three), ("b", 11.0, two))]  # fmt: skip
    assert [e.gap for e in leaderboard.leaderboard(runs)[0].entries] == ["best", TOO_FEW]


def test_compare_shows_the_runs_own_throughput_beside_an_unmeasured_run_and_shares_in_percent():
    # A's figure is 4.4 (the report's headline); its windows' mean is (4.0 + 4.5 + 5.5) / 3 = 4.67
    a = _record(4.4, [4.0, 4.5, 5.5], [0.00001, 0.00002, 0.00003])
    b = _record(0.0, [], [], steps=0, status="interrupted").model_copy(update={"throughput_img_s": None})
    rows = compare.compare_runs(a, [], b, [])
    assert (rows[0].a, rows[0].b) == ("4.40", "-")
    # shares 0.001%, 0.002%, 0.003% of the step: mean 0.002%, not "0.00" (nor "0.0000")
    share = next(r for r in rows if "share" in r.metric)
    assert share.metric == "data-wait share (% of step time)" and share.a == "0.0020"
    # both measured: the mean 0.002% with its 95% interval, by hand: s = 0.001, t(0.975, 2) = 4.303,
    # half-width 4.303 * 0.001 / sqrt(3) = 0.00248, so [0 (a share is never below 0), 0.00448]
    b2 = _record(4.4, [4.0, 4.5, 5.5], [0.00002, 0.00003, 0.00004])  # mean 0.003%: +0.001 percentage point
    share = next(r for r in compare.compare_runs(a, [], b2, []) if "share" in r.metric)
    assert (share.a, share.b, share.delta) == ("0.0020 [0.0000, 0.0045]", "0.0030 [0.0005, 0.0055]", "+0.0010 pp")
    assert share.verdict.startswith("negligible (under 0.1 percentage point)")  # 0.001 points of the step


def _windowed(thr: list[float], batch: int = 16, steps_each: int = 2):
    """A run of `batch` images per step, its measured steps in windows of `steps_each`: window i's throughput
    thr[i], so its step time is 1000 * batch / thr[i] ms; the headline is all images over all time, by hand."""
    step_ms = [1000.0 * batch / t for t in thr]
    steps = steps_each * len(thr)
    time_s = sum(steps_each * ms / 1000.0 for ms in step_ms)
    w = {"windows": len(thr), "window_steps": [steps_each] * len(thr), "throughput_img_s": thr,
         "step_time_ms": step_ms, "data_time_share": [0.01] * len(thr)}  # fmt: skip
    tally = {"steps": steps, "images": batch * steps, "data_time_s": 0.0, "compute_time_s": time_s, "time_s": time_s}
    return _typed({"throughput_img_s": batch * steps / time_s, "throughput_windows": w, "measured": tally})


def test_compare_gives_one_answer_for_throughput_and_step_time():
    # issue 47: one pair read "-52.0% ... within noise" on throughput and "+108.5% ... B higher (worse), outside
    # noise" on step time: two tests, one on the windows' img/s and one on their ms. B here has one fast window:
    # Welch on img/s calls it noise, Welch on ms (the same windows, turned over) calls it a change.
    a, b = _windowed([100.0, 102.0, 98.0, 101.0, 99.0]), _windowed([46.0, 47.0, 45.0, 46.0, 140.0])
    wa, wb = a.throughput_windows, b.throughput_windows
    assert not stats.difference(wa.throughput_img_s, wb.throughput_img_s).significant
    assert stats.difference(wa.step_time_ms, wb.step_time_ms).significant
    thr, step = compare.compare_runs(a, [], b, [])[:2]
    assert thr.metric.startswith("throughput") and step.metric.startswith("step time")
    assert (thr.significant, step.significant) == (False, False)
    assert thr.verdict == step.verdict == "within noise"
    # the directions agree: B's throughput lower, its step time higher, by the same ratio (same images per step)
    assert thr.delta_pct.startswith("-") and step.delta_pct.startswith("+")
    ratio = b.throughput_img_s / a.throughput_img_s
    assert float(step.delta_pct.rstrip("%")) == pytest.approx(100 * (1 / ratio - 1), abs=0.05)
    # outside noise, both rows say so, each in its own direction
    c = _windowed([50.0, 51.0, 49.0, 50.0, 50.0])
    thr, step = compare.compare_runs(a, [], c, [])[:2]
    assert thr.verdict == "B lower (worse), outside noise" and step.verdict == "B higher (worse), outside noise"
    assert compare.render_runs(compare.compare_runs(a, [], c, []), a_name="A", b_name="B", differences=[])
    # a different batch: no step time to weigh against throughput, and the row says so rather than judge
    d = _windowed([50.0, 51.0, 49.0, 50.0, 50.0], batch=32)
    step = compare.compare_runs(a, [], d, [])[1]
    assert (
        step.significant is None
        and step.verdict == "images per step differ or unknown (A 16, B 32): throughput decides"
    )


def test_compare_says_cannot_tell_when_the_figures_and_the_windows_point_opposite_ways():
    # the headline says B is faster, the windows' interval (excluding 0) says slower: no answer is the answer
    a = _record(10.0, [10.0, 10.1, 9.9], [0.1] * 3)
    b = _record(10.5, [8.0, 8.1, 7.9], [0.1] * 3)
    thr = compare.compare_runs(a, [], b, [])[0]
    assert thr.significant is None and thr.verdict.startswith("cannot tell: higher by the runs' figures, lower by")


def test_compare_refuses_a_data_only_run_against_a_training_run(tmp_path, capsys):
    # a data-only run's img/s is the loader's delivery: against a training run's it would read "B lower (worse)"
    from test_across_runs import make_run

    a = make_run(tmp_path / "a", [100.0] * 3)
    b = make_run(tmp_path / "b", [2000.0] * 3)
    record = json.loads((b / "results.json").read_text())
    (b / "results.json").write_text(json.dumps({**record, "data_only": True}))
    compare.check_like_for_like(results.load_record(a), results.load_record(a))  # a run is like itself
    code, out, err = invoke(["compare", a, b], capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("error: --data-only: A is a training run and B a data-only run: ")


def test_loader_on_synthetic_data_records_the_loader_that_ran_so_compare_and_sweep_see_no_difference():
    from effbench.errors import EffbenchError
    from effbench.report import sweep_tables

    ran = {"loader": "synthetic (on device)", "workers": 0}  # results.json's data section of a synthetic run
    asked = ("fast", "torchvision")
    cfgs = [config_mod.resolved_record(RunConfig(dataset="synthetic", loader=x, workers=0, repeats=3),
                                       device_type="cpu", precision="fp32", repeats=3, data_info=ran) for x in asked]  # fmt: skip
    assert [c["loader"] for c in cfgs] == ["synthetic", "synthetic"]
    assert [c["requested"]["loader"] for c in cfgs] == ["fast", "torchvision"]
    assert cfgs[1]["no_effect"]["loader"] == (
        "--loader torchvision does not apply to synthetic data: synthetic (on device) fed the run"
    )
    assert RunConfig.from_dict(cfgs[0]).loader == "synthetic"  # still a valid config
    assert compare.config_differences(_typed({"config": cfgs[0]}), _typed({"config": cfgs[1]})) == []
    # a sweep --loader fast,torchvision on synthetic data: no effect, not "within noise" nor a winner
    rows = [sweep_tables.CellRow(key=f"00{i}", params={"loader": x}, status="ok", throughput_img_s=t,
                                 thr_samples=[t - 1, t, t + 1], resolved=c, no_effect=c["no_effect"])
            for i, (x, t, c) in enumerate(zip(asked, (64.0, 52.0), cfgs, strict=True))]  # fmt: skip
    assert sweep_tables.verdicts(rows, {"loader": list(asked)}) == [
        "no best loader: --loader had no effect on these runs "
        "(--loader fast does not apply to synthetic data: synthetic (on device) fed the run)"
    ]
    # nothing asked: the dataset's own loader, no warning; files keep the fast default
    default = config_mod.resolved_record(RunConfig(dataset="synthetic", workers=0, repeats=3), device_type="cpu",
                                         precision="fp32", repeats=3, data_info=ran)  # fmt: skip
    assert default["loader"] == "synthetic" and "no_effect" not in default and "loader" not in default["requested"]
    assert RunConfig(dataset="cifar10").loader == "fast"
    with pytest.raises(EffbenchError) as info:
        RunConfig(dataset="cifar10", loader="synthetic")
    assert info.value.option == "--loader"


@pytest.mark.parametrize(
    "asked, dataset, device, ran, why",
    [
        ({"val_fraction": 0.5}, "synthetic", "cpu", None, "no training set to split"),
        ({"download": True}, "synthetic", "cpu", False, "nothing to download"),
        ({"cudnn_benchmark": True}, "cifar10", "cpu", False, "a CPU run has none"),
        ({"pin_memory": True}, "cifar10", "cpu", False, "a CPU run makes none"),
    ],
)
def test_an_option_the_run_could_not_use_is_in_no_effect_and_warned(asked, dataset, device, ran, why):
    # --val-fraction 0.5 on synthetic data, --cudnn-benchmark on the CPU: nothing said, and config.json claimed
    # the run had used them (README: no_effect holds "each option the run could not use and why")
    from effbench.config import resolve_for_device

    (name, value), *_ = asked.items()
    cfg = resolve_for_device(RunConfig(dataset=dataset, device=device, workers=0, repeats=3, **asked), device)
    d = config_mod.resolved_record(cfg, device_type=device, precision="fp32", repeats=3,
                                   data_info={"loader": "fast", "workers": 0})  # fmt: skip
    assert d[name] == ran and d["requested"][name] == value and why in d["no_effect"][name]
    assert RunConfig.from_dict(d).to_dict()[name] == ran  # still a valid config
    # where the option acts it is no such thing
    fine = (
        {"dataset": "cifar10", "device": device} if dataset == "synthetic" else {"dataset": dataset, "device": "cuda"}
    )
    cfg = resolve_for_device(RunConfig(workers=0, repeats=3, **fine, **asked), fine["device"])
    d = config_mod.resolved_record(cfg, device_type=fine["device"], precision="fp32", repeats=3,
                                   data_info={"loader": "fast", "workers": 0})  # fmt: skip
    assert d[name] == value and "no_effect" not in d


def test_a_cpu_run_asked_to_pin_says_so_once_and_pins_nothing(tmp_path, capsys, cifar10_dir):
    # torch's DataLoader warned in two lines of its own ("no accelerator is found") beside a config.json that
    # recorded pin_memory true
    code, _, err = invoke(["run", "--arch", "resnet18", "--image-size", "16", "--weights", "none", "--device", "cpu",
                           "--dataset", "cifar10", "--data-dir", cifar10_dir, "--loader", "torchvision", "--workers", "0",
                           "--max-steps", "2", "--warmup-steps", "1", "--epochs", "1", "--batch-size", "4", "--no-profile",
                           "--quiet", "--pin-memory", "--cudnn-benchmark", "--output", tmp_path], capsys)  # fmt: skip
    assert code == 0, err
    assert err.strip().splitlines() == [
        "warning: --cudnn-benchmark had no effect on this run: cudnn.benchmark autotunes cuDNN's CUDA convolutions; "
        "a CPU run has none",
        "warning: --pin-memory had no effect on this run: page-locked batches speed copies to a GPU; a CPU run makes none",
    ]
    run = only_run(tmp_path)
    config = json.loads((run / "config.json").read_text())
    assert (config["pin_memory"], config["cudnn_benchmark"]) == (False, False)
    assert json.loads((run / "results.json").read_text())["data"]["pin_memory"] is False


def test_workers_beyond_the_cores_are_no_option_without_effect():
    # --workers 8 on a 2-core machine starts 8 (data.say_workers_beyond_cores said so once): config.json keeps 8
    d = config_mod.resolved_record(
        RunConfig(dataset="cifar10", loader="torchvision", workers=8, repeats=3),
        device_type="cpu", precision="fp32", repeats=3, data_info={"loader": "torchvision", "workers": 8},
    )  # fmt: skip
    assert d["workers"] == 8 and "workers" not in d.get("requested", {}) and "workers" not in d.get("no_effect", {})


def test_a_step_row_has_steps_csvs_columns_in_order():
    from effbench import results
    from effbench.run.train import StepRow

    assert StepRow._fields == results.STEP_FIELDS

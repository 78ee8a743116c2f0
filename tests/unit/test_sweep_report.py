"""Sweep reports from recorded results (no training): scaling and batch-size sweeps, tables, verdicts, charts."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from effbench import results, schema
from effbench.sweep import manifest
from effbench.report import render
from effbench.report import sweep_tables as sweep_report

WINDOW_NOISE = (0.98, 1.0, 1.02, 0.99, 1.01)


def fake_run(
    folder: Path,
    *,
    devices: int,
    batch: int,
    throughput: float | None,
    status: str = "ok",
    scaling: str = "weak",
    data_s: float = 0.2,
    no_effect: dict | None = None,
    ran_workers: int | None = None,
    own_ci_pct: float | None = None,
) -> dict:
    """A results.json as the runner writes it, reduced to what reports read."""
    folder.mkdir(parents=True)
    epochs = [] if status != "ok" else [
        {"epoch": e, "images": 1000, "data_time_s": data_s, "compute_time_s": 1.0, "total_time_s": 1.0 + data_s,
         "warmup_steps": 0, "warmup_time_s": 0.0, "measured_time_s": 1.0 + data_s, "measured_data_time_s": data_s,
         "measured_compute_time_s": 1.0, "train_loss": 2.0 - 0.3 * e, "train_top1": 0.2 + 0.1 * e, "val_top1": 0.15 + 0.1 * e, "val_time_s": 0.1}
        for e in range(2)
    ]  # fmt: skip
    record = {
        "schema_version": results.SCHEMA_VERSION, "status": status, "run_name": folder.name, "device": "cpu",
        "config": {"batch_size": batch, "scaling": scaling, "arch": "resnet18"}, "env": {"python": "3.11", "torch": "2.14.1"},
        "world_size": devices, "devices": devices, "batch_size_per_device": batch, "global_batch_size": batch * devices,
        "throughput_img_s": throughput, "epochs": epochs, "final": {"train_loss": 1.7, "train_top1": 0.3, "val_top1": 0.25} if epochs else {},
        "data_time_share": data_s / (1 + data_s) if epochs else None, "peak_mem_gib": 3.5 if status == "oom" else 1.0,
        "throughput_windows": {"windows": 5, "steps": 10, "throughput_img_s": [throughput * k for k in WINDOW_NOISE],
                               "data_time_share": [data_s / (1 + data_s) * k for k in WINDOW_NOISE]} if throughput else {"windows": 0},
    }  # fmt: skip
    if own_ci_pct is not None:  # the run's own 95% interval, as its windows' summary records it
        lo, hi = throughput * (1 - own_ci_pct / 100), throughput * (1 + own_ci_pct / 100)
        stat = {
            "n": 5,
            "median": throughput,
            "mean": throughput,
            "stdev": throughput / 100,
            "ci_low": lo,
            "ci_high": hi,
        }
        record["throughput_windows"]["summary"] = {"throughput_img_s": stat}
    if no_effect:
        record["config"]["no_effect"] = no_effect
    if ran_workers is not None:
        record["config"]["workers"] = ran_workers
    if status == "oom":
        record["error"] = {"type": "OutOfMemoryError", "message": "CUDA out of memory"}
    results.write_json(folder / "results.json", record)
    return record


def make_sweep(root: Path, dims: dict, cells: list[tuple[dict, dict]]) -> Path:
    folder = root / "sweep-x"
    entries = [{"key": f"{i:03d}", "params": params, "config": {}} for i, (params, _) in enumerate(cells)]
    m = manifest.new_manifest(
        name="sweep-x", preset=None, dims=dims, zipped=False, cells=entries, command=["effbench", "sweep"]
    )
    for i, (_params, run) in enumerate(cells):
        run_dir = f"cells/{i:03d}/run"
        fake_run(folder / run_dir, **run)
        m = manifest.update_cell(m, f"{i:03d}", status=run.get("status", "ok"), run_dir=run_dir)
    manifest.write_manifest(folder, m)
    return folder


def test_scaling_sweep_report_has_speedup_efficiency_and_chart(tmp_path):
    cells = []
    for mode in ("strong", "weak"):
        for n, thr in ((1, 100.0), (2, 180.0), (4, 300.0)):
            cells.append(
                ({"gpus": n, "scaling": mode}, {"devices": n, "batch": 64, "throughput": thr, "scaling": mode})
            )
    folder = make_sweep(tmp_path, {"gpus": [1, 2, 4], "scaling": ["strong", "weak"]}, cells)
    files = render.write_sweep_reports(folder)
    text = (folder / "sweep.txt").read_text()
    assert "at 4 GPUs: speedup 3.00 of ideal 4.00 (efficiency 0.75)" in text
    assert "Scaling [scaling=strong]" in text and "Scaling [scaling=weak]" in text and "efficiency" in text
    assert folder / "plots" / "scaling.png" in files and (folder / "plots" / "scaling.png").stat().st_size > 10_000
    html = (folder / "report.html").read_text()
    assert html.count("<img") == len(list((folder / "plots").glob("*.png"))) and "Scaling [scaling=weak]" in html
    # one scaling table: the page prints each row's cells as sweep.txt does (img/s to 0.1, speedup to 0.01)
    num = "".join(f'<td class="num">{v}</td>' for v in ("180.0", "1.80", "2.00", "0.90"))  # right-aligned figures
    assert f'<td class="num">2</td><td class="num">128</td><td>ok</td>{num}' in html
    assert re.search(r"^2 +128 +ok +180\.0 +1\.80 +2\.00 +0\.90 ", text, re.M)


def test_batch_size_sweep_marks_oom_and_names_the_largest_fit(tmp_path):
    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": thr, "status": st})
             for b, thr, st in ((32, 100.0, "ok"), (128, 210.0, "ok"), (512, None, "oom"))]  # fmt: skip
    folder = make_sweep(tmp_path, {"batch_size": [32, 128, 512]}, cells)
    render.write_sweep_reports(folder)
    lines = json.loads((folder / "summary.json").read_text())["verdicts"]
    assert "largest batch per device that fit: 128; out of memory from 512 (peak 3.50 GiB)" in lines
    assert any(line.startswith("highest throughput along batch-size: 128") for line in lines)
    assert (folder / "plots" / "throughput_vs_batch.png").is_file()
    assert '<tr class="oom">' in (folder / "report.html").read_text()


def test_a_batch_sweep_where_every_size_fit_names_no_largest_that_fit(tmp_path):
    # issue 47: "largest batch per device that fit: 16" on a CPU where nothing larger was tried
    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": thr, "status": "ok"})
             for b, thr in ((8, 100.0), (16, 150.0))]  # fmt: skip
    folder = make_sweep(tmp_path, {"batch_size": [8, 16]}, cells)
    render.write_sweep_reports(folder)
    lines = json.loads((folder / "summary.json").read_text())["verdicts"]
    assert "every batch size tried fit, up to 16 per device (none larger tried)" in lines
    assert not any("largest batch per device that fit" in line for line in lines)


def test_workers_verdict_names_the_best_and_the_fewest_good_enough(tmp_path):
    cells = [({"workers": w}, {"devices": 1, "batch": 32, "throughput": 100.0 + 0.1 * w, "data_s": d})
             for w, d in ((0, 2.0), (2, 0.49), (4, 0.46), (8, 0.45))]  # fmt: skip
    folder = make_sweep(tmp_path, {"workers": [0, 2, 4, 8]}, cells)
    _, rows = render.load_sweep(folder)
    lines = sweep_report.verdicts(rows, {"workers": [0, 2, 4, 8]})
    # shares 0.667, 0.329, 0.315, 0.310 (data_s / (1 + data_s)) with +-2% window noise: 4 and 8 are within
    # noise of each other (Welch), 2 is not (0.019 apart against a 95% half-width of about 0.008)
    assert (
        "fewest workers within noise of the least data wait: 4 (data wait 31.5% of step time; least 31.0% with 8)"
        in lines
    )
    # throughputs 100.0 .. 100.8 with +-2% noise: no winner is named
    assert any(line.startswith("no highest throughput along workers: within noise") for line in lines)
    assert not any(line.startswith("highest throughput") for line in lines)


def test_sweep_names_no_best_along_an_option_that_had_no_effect(tmp_path):
    # the README's sweep on synthetic data: --workers 0/2/4 all ran with 0 workers; throughput differs
    # by 39% between windows that are pure noise, and each cell's config.json says workers had no effect
    why = "synthetic (on device) starts no DataLoader worker processes, so --workers 2 ran as 0"
    # asking for 0 workers and getting 0 is no "no effect" on its own: the cell just ran as asked
    cells = [({"workers": w}, {"devices": 1, "batch": 32, "throughput": thr, "data_s": 1e-5, "ran_workers": 0,
                               "no_effect": {"workers": why} if w else None})
             for w, thr in ((0, 3.3), (2, 4.6), (4, 3.9))]  # fmt: skip
    folder = make_sweep(tmp_path, {"workers": [0, 2, 4]}, cells)
    render.write_sweep_reports(folder)
    lines = json.loads((folder / "summary.json").read_text())["verdicts"]
    assert lines == [f"no best workers: --workers had no effect on these runs ({why})"]
    assert not (folder / "plots" / "data_time_vs_workers.png").exists()  # no chart claiming a best either
    assert f"--workers had no effect on these runs ({why}): no chart along it" in (folder / "report.html").read_text()


def test_a_dimension_with_no_effect_gets_the_values_that_ran_no_deltas_and_no_chart(tmp_path):
    # `sweep --preset workers` on synthetic data: --workers 0/2/4 all ran with 0 (config.json), and the
    # throughputs 3.3 / 4.6 / 3.9 img/s differ by noise alone (4.6 / 3.3 - 1 = +39.4%, 3.9 / 3.3 - 1 = +18.2%)
    why = "synthetic (on device) starts no DataLoader worker processes"
    cells = [({"workers": w}, {"devices": 1, "batch": 32, "throughput": thr, "data_s": 1e-5, "ran_workers": 0,
                               "no_effect": {"workers": why} if w else None})
             for w, thr in ((0, 3.3), (2, 4.6), (4, 3.9))]  # fmt: skip
    folder = make_sweep(tmp_path, {"workers": [0, 2, 4]}, cells)
    (folder / "plots").mkdir()
    (folder / "plots" / "throughput.png").write_bytes(b"an earlier render's chart")
    render.write_sweep_reports(folder)
    assert not list((folder / "plots").glob("*.png"))  # no bars labelled workers=0..4 for one configuration
    html = (folder / "report.html").read_text()
    assert f"--workers had no effect on these runs ({why}): no chart along it; no per-configuration chart" in html
    text = (folder / "sweep.txt").read_text()
    by = text.split("By --workers")[1]
    for line in ("0 +ok", r"0 \(asked 2, no effect\) +ok", r"0 \(asked 4, no effect\) +ok"):
        assert re.search(rf"^{line} +[\d.]+ +no effect ", by, re.M), line
    assert "+39.4%" not in text and "+18.2%" not in text  # no delta along it, anywhere
    assert "every cell ran the same value, so its differences are noise: no deltas, no chart along it" in by
    assert re.search(r"^001 +0 \(asked 2, no effect\) +ok ", text, re.M)  # the cells table: what ran, too


def test_charts_beside_a_no_effect_dimension_label_its_cells_as_repeats(tmp_path, monkeypatch):
    from effbench.report import plots

    drawn: dict[str, object] = {}
    real_bars, real_batch = plots.throughput_bars, plots.throughput_vs_batch

    def bars(labels, *a, **k):  # what the chart was given, then the real chart
        drawn["bars"] = list(labels)
        return real_bars(labels, *a, **k)

    def batch(series, *a, **k):
        drawn["batch"] = dict(series)
        return real_batch(series, *a, **k)

    monkeypatch.setattr(plots, "throughput_bars", bars)
    monkeypatch.setattr(plots, "throughput_vs_batch", batch)
    why = "synthetic (on device) starts no DataLoader worker processes"
    cells = [({"batch_size": b, "workers": w}, {"devices": 1, "batch": b, "throughput": thr, "ran_workers": 0,
                                                "no_effect": {"workers": why} if w else None})
             for b, w, thr in ((32, 0, 100.0), (32, 2, 120.0), (64, 0, 180.0), (64, 2, 150.0))]  # fmt: skip
    folder = make_sweep(tmp_path, {"batch_size": [32, 64], "workers": [0, 2]}, cells)
    render.write_sweep_reports(folder)
    # batch size had an effect: charted along it, the cells that differ only in --workers named as repeats
    assert drawn["bars"] == ["batch-size=32 [000]", "batch-size=32 [001]", "batch-size=64 [002]", "batch-size=64 [003]"]
    assert drawn["batch"] == {"all": [(32, 100.0, "ok"), (64, 180.0, "ok")],
                              "all (repeat 2)": [(32, 120.0, "ok"), (64, 150.0, "ok")]}  # fmt: skip
    assert "workers=" not in "".join(drawn["bars"])  # type: ignore[arg-type]


def test_sweep_names_the_best_only_outside_noise(tmp_path):
    cells = [
        ({"optimizer": o}, {"devices": 1, "batch": 32, "throughput": thr})
        for o, thr in (("sgd", 100.0), ("adam", 150.0))
    ]
    folder = make_sweep(tmp_path, {"optimizer": ["sgd", "adam"]}, cells)
    _, rows = render.load_sweep(folder)
    assert "highest throughput along optimizer: adam (150.0 img/s)" in sweep_report.verdicts(
        rows, {"optimizer": ["sgd", "adam"]}
    )
    close = [
        ({"optimizer": o}, {"devices": 1, "batch": 32, "throughput": thr})
        for o, thr in (("sgd", 100.0), ("adam", 101.0))
    ]
    _, rows = render.load_sweep(make_sweep(tmp_path / "b", {"optimizer": ["sgd", "adam"]}, close))
    line = sweep_report.verdicts(rows, {"optimizer": ["sgd", "adam"]})[0]
    assert line.startswith("no highest throughput along optimizer: within noise")
    # the table's `vs first`: 101 / 100 - 1 = +1.0%, inside the windows' +-2% noise, and says so
    _, body = sweep_report.dimension_table(rows, ["optimizer"], "optimizer")
    assert [b[3] for b in body] == ["+0.0%", "+1.0% (within noise)"]
    _, far = render.load_sweep(tmp_path / "sweep-x")  # 150 / 100 - 1 = +50.0%: outside noise, unmarked
    assert [b[3] for b in sweep_report.dimension_table(far, ["optimizer"], "optimizer")[1]] == ["+0.0%", "+50.0%"]


def test_a_chart_that_fails_is_named_not_fatal(tmp_path, monkeypatch):
    from effbench.report import plots

    def boom(*a, **k):
        raise ValueError("bad data")

    monkeypatch.setattr(plots, "throughput_bars", boom)
    folder = make_sweep(
        tmp_path,
        {"workers": [0, 2]},
        [({"workers": w}, {"devices": 1, "batch": 8, "throughput": 50.0}) for w in (0, 2)],
    )
    render.write_sweep_reports(folder)
    assert "not drawn (ValueError: bad data)" in (folder / "report.html").read_text()
    assert (folder / "plots" / "time_breakdown.png").is_file()


@pytest.mark.parametrize("kind", ["run", "sweep"])
def test_report_of_a_folder_that_is_neither(tmp_path, kind):
    from effbench.errors import EffbenchError

    with pytest.raises(EffbenchError) as info:
        render.write_reports(tmp_path)
    assert info.value.option == str(tmp_path) and "sweep.json" in info.value.message


def _split_record(optimizer: str, *, old: bool = False, totals: bool = True) -> dict:
    """A cell's results.json by hand: epoch 1 one warm-up step (0.5 s data + 2.0 s compute) and measured
    steps of 0.02 s data + 0.2 s compute, epoch 2 no warm-up and 0.04 + 0.36 s measured. `old`: written
    before the epochs held their measured split; `totals`: with the run's `measured` / `warmup` totals."""
    epochs = [
        {"epoch": 1, "images": 12, "data_time_s": 0.52, "compute_time_s": 2.2, "total_time_s": 2.72,
         "warmup_steps": 1, "warmup_time_s": 2.5, "measured_time_s": 0.22,
         "measured_data_time_s": 0.02, "measured_compute_time_s": 0.2, "train_top1": 0.5},
        {"epoch": 2, "images": 12, "data_time_s": 0.04, "compute_time_s": 0.36, "total_time_s": 0.4,
         "warmup_steps": 0, "warmup_time_s": 0.0, "measured_time_s": 0.4,
         "measured_data_time_s": 0.04, "measured_compute_time_s": 0.36, "train_top1": 0.6},
    ]  # fmt: skip
    if old:
        drop = ("warmup_time_s", "measured_data_time_s", "measured_compute_time_s")
        epochs = [{k: v for k, v in e.items() if k not in drop} for e in epochs]
    record = {"schema_version": 1, "status": "ok", "throughput_img_s": 40.0, "epochs": epochs, "data_time_share": 0.06 / 0.62,
              "config": {"optimizer": optimizer}, "throughput_windows": {"windows": 0}}  # fmt: skip
    if totals:
        record["measured"] = {"steps": 5, "images": 20, "data_time_s": 0.06, "compute_time_s": 0.56, "time_s": 0.62}
        record["warmup"] = {"steps": 1, "images": 4, "data_time_s": 0.5, "compute_time_s": 2.0, "time_s": 2.5}
    return record


def test_the_sweeps_time_columns_and_chart_split_the_measured_steps_with_warm_up_apart(tmp_path, monkeypatch):
    from effbench.report import plots

    # by hand, per epoch over the 2 epochs: measured data (0.02 + 0.04) / 2 = 0.030 s, compute (0.2 + 0.36) / 2
    # = 0.280 s, their data share 0.06 / 0.62 = 9.7% (the headline's); warm-up 2.5 / 2 = 1.250 s apart. Over
    # every step they were 0.280 and 1.280 s: a 17.9% data share beside a 9.7% headline
    cells = [({"key": "000", "params": {"optimizer": "sgd"}}, _split_record("sgd")),
             ({"key": "001", "params": {"optimizer": "adam"}}, _split_record("adam", old=True)),
             ({"key": "002", "params": {"optimizer": "adagrad"}}, _split_record("adagrad", old=True, totals=False))]  # fmt: skip
    rows = [
        sweep_report.cell_row(
            schema.Cell.model_validate({**cell, "index": i, "config": {}, "status": "ok"}),
            results.record_of({"schema_version": 1, **record}),
        )
        for i, (cell, record) in enumerate(cells)
    ]
    headers, body = sweep_report.summary_table(rows, ["optimizer"])
    new, old, unknown = (dict(zip(headers, b, strict=True)) for b in body)
    measured = ("data s/epoch (measured)", "compute s/epoch (measured)", "data % (measured)", "warm-up s/epoch")
    assert [new[h] for h in measured] == ["0.030", "0.280", "9.7%", "1.250"]
    # written before the epochs held the split: the run's measured and warm-up totals over its 2 epochs, said so
    assert [old[h] for h in measured] == ["0.030", "0.280", "9.7%", "1.250"]
    assert [unknown[h] for h in measured] == ["-", "-", "9.7%", "-"]  # never the warm-up-included 0.280 / 1.280
    text = sweep_report.render(rows, {"optimizer": ["sgd", "adam", "adagrad"]}, title="t")
    assert "cell 001: recorded before its epochs held their measured split" in text
    assert "cell 002: no measured split recorded" in text
    assert "1.280" not in text  # the compute per epoch with warm-up, anywhere

    got: dict = {}

    def stacked_time_bars(labels, data_s, compute_s, path, **kw):  # the leaf: what the chart is drawn from
        got.update(labels=labels, data=data_s, compute=compute_s, warmup=kw.get("warmup_s"))
        return path

    monkeypatch.setattr(plots, "stacked_time_bars", stacked_time_bars)
    made, problems = render.sweep_plots(rows, {"optimizer": ["sgd", "adam", "adagrad"]}, tmp_path)
    assert got["labels"] == ["optimizer=sgd", "optimizer=adam"]  # the cell with no split is left out, and named
    assert got["data"] == [pytest.approx(0.03)] * 2 and got["compute"] == [pytest.approx(0.28)] * 2
    assert got["warmup"] == [pytest.approx(1.25)] * 2
    assert any(p.startswith("cell 002: no measured split recorded") for p in problems)
    assert any("measured steps, warm-up apart" in caption for _, caption in made)


def test_the_scaling_tables_seconds_per_epoch_split_the_measured_steps_with_warm_up_apart():
    from effbench.analysis import scaling

    # the same hand-built runs at 1 and 2 processes (the second recorded before its epochs held the split):
    # measured data 0.03, compute 0.28, total 0.31 s per epoch and warm-up 1.25 s apart; over every step
    # the table said 0.28, 1.28 and 1.56
    runs = [{**_split_record("sgd"), "devices": 1, "global_batch_size": 4},
            {**_split_record("sgd", old=True), "devices": 2, "global_batch_size": 8, "throughput_img_s": 60.0}]  # fmt: skip
    rows = scaling.scaling_rows([results.record_of(r) for r in runs])
    cols = [dict(zip(scaling.HEADERS, r, strict=True)) for r in scaling.table_rows(rows)]
    shown = ("data s/epoch (measured)", "compute s/epoch (measured)", "total s/epoch (measured)", "warm-up s/epoch")
    assert [[c[h] for h in shown] for c in cols] == [["0.03", "0.28", "0.31", "1.25"]] * 2
    text = scaling.render(rows, scaling="weak")
    assert "2 devices: recorded before its epochs held their measured split" in text and "1.56" not in text


@pytest.mark.parametrize("dims", [{"batch_size": [4, 8]}, {"nproc": [1, 2]}, {"workers": [0, 2]}])
def test_a_sweep_whose_every_cell_failed_draws_no_empty_chart_and_warns_nothing(tmp_path, dims):
    # every cell failed (a bad input each cell met): matplotlib's "No artists with labels found to put in
    # legend" went to stderr, two lines of Python warning above the sweep's one-line error
    import warnings

    (dim, values), *_ = dims.items()
    cells = [({dim: v}, {"devices": v if dim == "nproc" else 1, "batch": v if dim == "batch_size" else 4,
                         "throughput": None, "status": "failed"}) for v in values]  # fmt: skip
    folder = make_sweep(tmp_path, dims, cells)
    with warnings.catch_warnings(record=True) as caught:  # not "error": _draw would catch it as a chart problem
        warnings.simplefilter("always")
        render.write_sweep_reports(folder)
    assert [str(w.message) for w in caught] == []
    assert not [p.name for p in (folder / "plots").glob("*.png") if p.name != "throughput.png"]
    assert "no cell finished" in (folder / "report.html").read_text()


# summary.json's cell keys, in order, as main wrote them when a row was a dict (before CellRow): a reader of
# the file sees the same object whatever holds the row in memory
RAN_CELL_KEYS = [
    "key", "params", "status", "run_dir", "error", "batch_size_per_device", "throughput_img_s", "thr_median",
    "thr_ci_low", "thr_ci_high", "thr_samples", "share_samples", "no_effect", "resolved", "windows",
    "data_time_per_epoch_s", "compute_time_per_epoch_s", "measured_data_time_per_epoch_s",
    "measured_compute_time_per_epoch_s", "warmup_time_per_epoch_s", "time_split", "data_time_share", "train_loss",
    "train_top1", "val_top1", "train_top1_per_epoch", "val_top1_per_epoch", "global_batch_size", "devices",
    "peak_mem_gib", "peak_host_gib", "wall_time_s", "device", "target_top1", "reached_target", "time_to_target_s",
    "epochs_to_target", "best_val_top1", "contended", "until_target", "until_half_width_pct", "until_windows",
    "until_reached", "until_lag1_autocorrelation",
]  # fmt: skip


def test_summary_json_keeps_its_cell_keys_and_a_cell_that_never_ran_has_the_manifests_six(tmp_path):
    folder = tmp_path / "sweep-x"
    entries = [
        {"key": f"00{i}", "params": {"batch_size": b}, "config": {"batch_size": b}} for i, b in enumerate((8, 16))
    ]
    m = manifest.new_manifest(name="sweep-x", preset=None, dims={"batch_size": [8, 16]}, zipped=False, cells=entries,
                              command=["effbench", "sweep"])  # fmt: skip
    fake_run(folder / "cells/000/run", devices=1, batch=8, throughput=100.0)
    m = manifest.update_cell(m, "000", status="ok", run_dir="cells/000/run")
    manifest.write_manifest(folder, m)  # 001 still pending: it never ran
    render.write_sweep_reports(folder)
    summary = json.loads((folder / "summary.json").read_text())
    assert list(summary) == ["schema_version", "name", "dims", "verdicts", "cells", "rounds"]
    ran, pending = summary["cells"]
    assert list(ran) == RAN_CELL_KEYS and ran["throughput_img_s"] == 100.0 and ran["batch_size_per_device"] == 8
    assert pending == {"key": "001", "params": {"batch_size": 16}, "status": "pending", "run_dir": None,
                       "error": None, "batch_size_per_device": 16}  # fmt: skip


def test_a_sweep_on_synthetic_data_says_its_top1_is_chance(tmp_path):
    # issue 34: synthetic labels are random and validation is held out, so the val top-1 column is chance
    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": 100.0}) for b in (32, 64)]
    folder = make_sweep(tmp_path, {"batch_size": [32, 64]}, cells)
    note = "top-1: synthetic: random labels, accuracy is chance by construction (1/100)"
    render.write_sweep_reports(folder)
    assert note not in (folder / "sweep.txt").read_text()  # fake_run's records name no dataset: real data
    for run in folder.glob("cells/*/run/results.json"):
        record = json.loads(run.read_text())
        record["config"]["dataset"] = "synthetic"
        results.write_json(run, record)
    render.write_sweep_reports(folder)
    assert (folder / "sweep.txt").read_text().count(f"- {note}") == 1  # once, not once per cell
    assert note in (folder / "report.html").read_text()


def test_a_sweep_under_until_shows_each_cells_interval_reached(tmp_path):
    # issue 48: the table's img/s interval is over its --repeats windows; the interval that stopped a cell is
    # over windows of --log-interval steps, and the table never showed it (a cell stopped at +/-28.2% by its cap
    # read [5.0, 14.3] there and nothing else)
    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": 100.0}) for b in (8, 16)]
    folder = make_sweep(tmp_path, {"batch_size": [8, 16]}, cells)
    render.write_sweep_reports(folder)
    assert "until" not in (folder / "sweep.md").read_text()  # no cell ran with --until: no column
    untils = {"8": dict(half_width_pct=1.84, windows=12, reached=True, lag1_autocorrelation=0.12),
              "16": dict(half_width_pct=28.2, windows=196, reached=False, lag1_autocorrelation=0.71)}  # fmt: skip
    for run in folder.glob("cells/*/run/results.json"):
        record = json.loads(run.read_text())
        record["until"] = {"target": "ci:2%", "window_steps": 10, **untils[str(record["batch_size_per_device"])]}
        results.write_json(run, record)
    render.write_sweep_reports(folder)
    md = (folder / "sweep.md").read_text()
    assert "until: interval reached" in md
    assert "+/-1.84% (reached, 12 windows)" in md  # r 0.12: steady, nothing said
    assert "+/-28.20% (cap, not reached, 196 windows, drifted: r +0.71)" in md
    cells_json = json.loads((folder / "summary.json").read_text())["cells"]
    assert [(c["until_half_width_pct"], c["until_reached"]) for c in cells_json] == [(1.84, True), (28.2, False)]


@pytest.mark.parametrize("columns", [80, 200])
def test_sweep_prints_its_report_fitted_to_the_terminal(columns, tmp_path, capsys, monkeypatch):
    """issue 34: the sweep's tables were 160-250 columns wide in the terminal. `effbench sweep` (its runner, the
    leaf, patched) prints them within 100 columns, or $COLUMNS when wider (issue 47 item 2), naming what it left
    out; sweep.txt keeps every column within 100, and sweep.md keeps it all."""
    from effbench.analysis import scaling

    from clitools import invoke

    from effbench.sweep import runner

    cells = []
    for mode in ("strong", "weak"):
        for n, thr in ((1, 100.0), (2, 180.0), (4, 300.0)):
            cells.append(
                ({"gpus": n, "scaling": mode}, {"devices": n, "batch": 64, "throughput": thr, "scaling": mode})
            )
    folder = make_sweep(tmp_path, {"gpus": [1, 2, 4], "scaling": ["strong", "weak"]}, cells)
    render.write_sweep_reports(folder)
    outcome = runner.SweepOutcome(folder, manifest.load_manifest(folder))
    monkeypatch.setattr(runner, "run_sweep", lambda *_a, **_k: outcome)
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = invoke(["sweep", "--gpus", "1,2,4", "--device", "cpu", "--dataset", "synthetic"], capsys)
    assert code == 0, err
    width = max(100, columns)  # an 80-column terminal gets 100, as report.txt
    printed = out.splitlines()
    assert max(len(line) for line in printed if not line.startswith("sweep folder: ")) <= width
    full = (folder / "sweep.txt").read_text()
    assert max(len(line) for line in full.splitlines()) <= 100
    for header in (*sweep_report.METRIC_HEADERS, *scaling.HEADERS):  # the file keeps every column, split
        assert all(w in full.split() for w in header.split()), header
    heads = []  # every table's header lines: the lines above a rule of dashes, up to the blank line
    for i, line in enumerate(printed):
        if line.startswith("---") and "  " in line:
            j = i - 1
            while j >= 0 and printed[j].strip():
                heads.append(printed[j])
                j -= 1
    dropped = ("warm-up s/epoch", "train loss", "straggler spread %") if columns == 80 else ("straggler spread %",)
    for header in dropped:  # at 200 the scaling table (202 wide) still loses its last column
        assert header not in " ".join(heads), header
    note = " ".join(out.split(f"Left out to fit {width} columns: ")[1].split())
    assert "sweep.txt, sweep.md and report.html hold every column" in note
    assert ("peak mem GiB" in note) == (columns == 80)  # 200 columns keep more of them
    for kept in ("cell", "status", "val top-1", "speedup", "efficiency"):
        assert kept in out, kept


def test_a_cell_recorded_before_runs_were_timed_by_phase_shows_no_whole_run_wall_time(tmp_path):
    # before wall_time_by_phase_s, a record's wall_time_s began after setup, dataset and model: beside a newer
    # cell's setup-to-report figure it would read short, so neither the table row nor sweep.json carries it
    from effbench.sweep.runner import cell_summary

    base = fake_run(tmp_path / "run", devices=1, batch=8, throughput=100.0)
    phases = {"setup": 2.0, "dataset": 1.0, "model": 0.5, "warm-up": 0.5, "epochs": 50.0, "validation": 6.0}
    new = results.record_of({**base, "wall_time_s": 60.0, "wall_time_by_phase_s": phases})
    old = results.record_of({**base, "wall_time_s": 56.5})
    cell = schema.Cell.model_validate({"key": "000", "params": {}, "index": 0, "config": {}, "status": "ok"})
    assert sweep_report.cell_row(cell, new).wall_time_s == 60.0 and cell_summary(new).wall_time_s == 60.0
    assert sweep_report.cell_row(cell, old).wall_time_s is None and cell_summary(old).wall_time_s is None


def test_the_top1_chart_is_captioned_as_it_is_drawn():
    # issue 47: one epoch per cell draws bars, captioned "dashed: train, solid: validation"
    from effbench.report.plots import top1_as_bars
    from effbench.report.render import top1_caption

    one = {"a": {"train": [0.2], "val": [0.1]}, "b": {"train": [0.3], "val": [0.2]}}
    two = {"a": {"train": [0.2, 0.3], "val": [0.1, 0.2]}}
    assert top1_as_bars(one) and not top1_as_bars(two)
    assert top1_caption(one, None) == "Top-1 accuracy after one epoch (bars: train and validation side by side)"
    assert "dashed" not in top1_caption(one, 0.5) and top1_caption(one, 0.5).endswith(", dotted: the target 0.5)")
    assert top1_caption(two, None) == "Top-1 accuracy per epoch (dashed: train, solid: validation)"


def test_a_sweep_in_rounds_pools_each_configuration_and_says_when_runs_missed_the_mean(tmp_path):
    # batch 4 ran 100, 100, 70 (the machine slowed in round 3), batch 8 ran 200, 202, 198; each run's own
    # interval is +-2%: batch 4's mean 90 is outside all three, batch 8's 200 inside all three
    runs = {(1, 4): 100.0, (1, 8): 200.0, (2, 8): 202.0, (2, 4): 100.0, (3, 4): 70.0, (3, 8): 198.0}
    cells = [({"round": r, "batch_size": b}, {"devices": 1, "batch": b, "throughput": thr, "own_ci_pct": 2.0})
             for (r, b), thr in runs.items()]  # fmt: skip
    folder = make_sweep(tmp_path, {"round": [1, 2, 3], "batch_size": [4, 8]}, cells)
    render.write_sweep_reports(folder)
    text = (folder / "sweep.txt").read_text()
    summary = json.loads((folder / "summary.json").read_text())
    t975_df2 = 4.302653  # a t table's, apart from stats.t_ppf
    for batch, xs in ((4, [100.0, 100.0, 70.0]), (8, [200.0, 202.0, 198.0])):
        m = sum(xs) / 3
        h = t975_df2 * (sum((x - m) ** 2 for x in xs) / 2) ** 0.5 / 3**0.5
        row = next(r for r in summary["rounds"] if r["params"] == {"batch_size": batch})
        assert row["throughput_by_round_img_s"] == pytest.approx(xs)  # in round order, not run order
        assert row["throughput_mean_img_s"] == pytest.approx(m)
        assert row["throughput_mean_ci95_img_s"] == pytest.approx([max(m - h, 0.0), m + h], rel=1e-5)
        assert row["round_spread_pct"] == pytest.approx(100 * (max(xs) - min(xs)) / m)
        shown = f"{m:,.1f} [{max(m - h, 0.0):,.1f}, {m + h:,.1f}]"
        assert re.search(rf"^{batch} +3 of 3 +{re.escape(shown)} +±{100 * h / m:.1f}% ", text, re.M), text
    rows = {tuple(r["params"].values()): r for r in summary["rounds"]}
    assert [rows[(b,)]["rounds_missing_mean"] for b in (4, 8)] == [3, 0]
    assert re.search(r"^4 +3 of 3 .* 33\.3% +3 of 3$", text, re.M) and re.search(r"^8 .* 2\.0% +0 of 3$", text, re.M)
    verdicts = summary["verdicts"]
    assert not any("along round" in v for v in verdicts)  # rounds are repeats: no best round
    assert any(
        v.startswith("across rounds, a configuration's img/s moved by up to 33.3% of its mean between rounds "
                     "(batch-size=4: 70.0 .. 100.0); 3 of 6 runs' own 95% intervals leave out") for v in verdicts
    ), verdicts  # fmt: skip
    assert "Across rounds" in text and 'id="rounds"' in (folder / "report.html").read_text()
    # the other options are judged once, on each configuration's mean over rounds and the rounds' noise (Welch on
    # 100, 100, 70 against 200, 202, 198: the difference 110 +- 43), not once per round on its windows
    assert "highest throughput along batch-size: 8 (200.0 img/s) [mean of rounds]" in verdicts
    assert not any("[round=" in v for v in verdicts)


def test_two_rounds_are_too_few_to_name_a_best_and_say_so_in_rounds(tmp_path):
    runs = {(1, 4): 100.0, (1, 8): 200.0, (2, 4): 101.0, (2, 8): 199.0}
    cells = [({"round": r, "batch_size": b}, {"devices": 1, "batch": b, "throughput": thr, "own_ci_pct": 2.0})
             for (r, b), thr in runs.items()]  # fmt: skip
    folder = make_sweep(tmp_path, {"round": [1, 2], "batch_size": [4, 8]}, cells)
    render.write_sweep_reports(folder)
    verdicts = json.loads((folder / "summary.json").read_text())["verdicts"]
    assert (
        "no highest throughput along batch-size: too few rounds to judge (needs 3 per configuration, has 2); "
        "top 199.5 img/s [mean of rounds]" in verdicts
    ), verdicts
    assert any(v.startswith("across rounds, a configuration's img/s moved by up to 1.0% ") for v in verdicts)


def test_a_sweep_of_one_round_has_no_rounds_table(tmp_path):
    cells = [({"batch_size": b}, {"devices": 1, "batch": b, "throughput": 100.0 * b}) for b in (4, 8)]
    folder = make_sweep(tmp_path, {"batch_size": [4, 8]}, cells)
    render.write_sweep_reports(folder)
    assert "Across rounds" not in (folder / "sweep.txt").read_text()
    assert json.loads((folder / "summary.json").read_text())["rounds"] == []


def test_compare_of_two_sweeps_in_rounds_judges_each_configuration_on_the_noise_between_rounds(tmp_path):
    from effbench.analysis import compare

    def sweep(root, figures):
        cells = [({"round": r, "batch_size": b}, {"devices": 1, "batch": b, "throughput": x, "own_ci_pct": 1.0})
                 for b, xs in figures.items() for r, x in enumerate(xs, start=1)]  # fmt: skip
        root.mkdir()
        rounds = list(range(1, max(len(xs) for xs in figures.values()) + 1))
        return render.load_sweep(make_sweep(root, {"round": rounds, "batch_size": list(figures)}, cells))[1]

    # batch 4: A and B overlap round for round (within noise however tight each run); batch 8: B is 20% faster
    a = sweep(tmp_path / "a", {4: [100.0, 90.0, 110.0], 8: [200.0, 204.0, 196.0]})
    b = sweep(tmp_path / "b", {4: [95.0, 115.0, 101.0], 8: [240.0, 236.0, 244.0]})
    body, n, outside = compare.rounds_table(a, b)
    assert (n, outside) == (2, 1)
    rows = {r[0]: r for r in body}
    # Welch on [200, 204, 196] vs [240, 236, 244]: delta 40, each side's variance 16, df 4, t(0.975, 4) = 2.776445
    h = 2.776445 * (16 / 3 + 16 / 3) ** 0.5
    assert rows["batch-size=8"][3] == "+40.00" and rows["batch-size=8"][4] == "+20.0%"
    assert rows["batch-size=8"][5] == f"[{40 - h:+,.2f}, {40 + h:+,.2f}]"
    assert rows["batch-size=8"][6].startswith("B higher (better), outside noise")
    assert rows["batch-size=4"][6] == "within noise"
    text = compare.render_sweeps(a, b, a_name="a", b_name="b")
    assert "Across rounds: 1 of 2 configurations differ outside the noise between rounds." in text
    # two rounds a side: nothing judged, and it says rounds
    a2 = sweep(tmp_path / "a2", {4: [100.0, 90.0]})
    b2 = sweep(tmp_path / "b2", {4: [300.0, 310.0]})
    (row,), _, outside = compare.rounds_table(a2, b2)
    assert outside == 0 and row[6] == "too few rounds to judge (needs 3 per configuration, has 2)"
    one_round = [dataclasses.replace(r, params={"batch_size": r.params["batch_size"]}) for r in b]  # no --rounds
    assert compare.rounds_table(a, one_round) == ([], 0, 0)

"""Pure reporting: a results dict in, tables out (tabulate text and markdown). No torch import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tabulate import tabulate


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _pct(part: float | None, whole: float | None) -> str:
    if not part or not whole:
        return "-" if part is None or whole is None else "0.0%"
    return f"{100.0 * part / whole:.1f}%"


def summary_rows(results: Mapping[str, Any]) -> list[tuple[str, str]]:
    cfg = results.get("config", {})
    model = results.get("model", {})
    data = results.get("data", {})
    measured = results.get("measured", {})
    warmup = results.get("warmup", {})
    rows = [
        ("status", _fmt(results.get("status"))),
        ("arch", _fmt(cfg.get("arch"))),
        ("dataset", f"{_fmt(cfg.get('dataset'))} ({_fmt(data.get('train_size'))} train / {_fmt(data.get('val_size'))} val)"),
        ("device", _fmt(results.get("device"))),
        ("world size", _fmt(results.get("world_size"))),
        ("precision", _fmt(results.get("precision"))),
        ("batch size per device", _fmt(cfg.get("batch_size"))),
        ("image size (px)", _fmt(cfg.get("image_size"))),
        ("optimizer / lr", f"{_fmt(cfg.get('optimizer'))} / {_fmt(cfg.get('lr'), 4)}"),
        ("freeze / weights", f"{_fmt(cfg.get('freeze'))} / {_fmt(cfg.get('weights'))}"),
        ("params trainable / total", f"{_fmt(model.get('trainable_params'))} / {_fmt(model.get('total_params'))}"),
        ("loader / workers", f"{_fmt(cfg.get('loader'))} / {_fmt(cfg.get('workers'))}"),
        ("throughput (img/s)", _fmt(results.get("throughput_img_s"), 1)),
        ("measured steps / images", f"{_fmt(measured.get('steps'))} / {_fmt(measured.get('images'))}"),
        ("data wait share", _pct(measured.get("data_time_s"), measured.get("time_s"))),
        ("warm-up steps (excluded)", f"{_fmt(warmup.get('steps'))} in {_fmt(warmup.get('time_s'))} s"),
        ("final val top-1", _fmt(results.get("final", {}).get("val_top1"), 4)),
    ]
    if results.get("error"):
        rows.append(("error", _fmt(results["error"].get("message"))))
    return rows


EPOCH_HEADERS = (
    "epoch",
    "images",
    "data (s)",
    "compute (s)",
    "total (s)",
    "data %",
    "img/s",
    "train loss",
    "train top-1",
    "val top-1",
    "val (s)",
)


def epoch_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for e in results.get("epochs", []):
        rows.append(
            [
                _fmt(e.get("epoch")),
                _fmt(e.get("images")),
                _fmt(e.get("data_time_s")),
                _fmt(e.get("compute_time_s")),
                _fmt(e.get("total_time_s")),
                _pct(e.get("data_time_s"), e.get("total_time_s")),
                _fmt(e.get("throughput_img_s"), 1),
                _fmt(e.get("train_loss"), 4),
                _fmt(e.get("train_top1"), 4),
                _fmt(e.get("val_top1"), 4),
                _fmt(e.get("val_time_s")),
            ]
        )
    return rows


def render(results: Mapping[str, Any], fmt: str = "text") -> str:
    """The run report as text (`fmt="text"`) or markdown (`fmt="md"`)."""
    table_fmt = "github" if fmt == "md" else "simple"
    summary = tabulate(summary_rows(results), headers=("metric", "value"), tablefmt=table_fmt)
    epochs = tabulate(epoch_rows(results), headers=EPOCH_HEADERS, tablefmt=table_fmt, disable_numparse=True)
    title = f"effbench run {results.get('run_name', '')}".strip()
    notes = (
        "Throughput counts measured steps only (warm-up excluded): images / (data wait + compute). "
        "Data wait is host time blocked on the loader; compute ends with a device sync."
    )
    if fmt == "md":
        return f"# {title}\n\n## Summary\n\n{summary}\n\n## Epochs\n\n{epochs}\n\n{notes}\n"
    return f"{title}\n\n{summary}\n\nEpochs\n{epochs}\n\n{notes}\n"

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
    # what fed the run, as results.json's data section says (synthetic: "synthetic (on device)", 0 workers)
    loader = data.get("loader", cfg.get("loader"))
    workers = data.get("workers", cfg.get("workers"))
    epochs = results.get("epochs") or []
    val_used = epochs[-1].get("val_images") if epochs else None
    rows = [
        ("status", _fmt(results.get("status"))),
        ("arch", _fmt(cfg.get("arch"))),
        (
            "dataset",
            f"{_fmt(cfg.get('dataset'))} ({_fmt(data.get('train_size'))} train / {_fmt(data.get('val_size'))} val)",
        ),
        ("validation images per epoch (used)", _fmt(val_used)),
        ("device", _fmt(results.get("device"))),
        ("world size", _fmt(results.get("world_size"))),
        ("precision", _fmt(results.get("precision"))),
        ("batch size per device", _fmt(cfg.get("batch_size"))),
        ("image size (px)", _fmt(cfg.get("image_size"))),
        ("optimizer / lr", f"{_fmt(cfg.get('optimizer'))} / {_fmt(cfg.get('lr'), 4)}"),
        ("freeze / weights", f"{_fmt(cfg.get('freeze'))} / {_fmt(cfg.get('weights'))}"),
        ("params trainable / total", f"{_fmt(model.get('trainable_params'))} / {_fmt(model.get('total_params'))}"),
        ("loader / workers", f"{_fmt(loader)} / {_fmt(workers)}"),
        ("throughput (img/s)", _fmt(results.get("throughput_img_s"), 1)),
        ("throughput windows: median [95% CI]", _windows(results)),
        ("measured steps / images", f"{_fmt(measured.get('steps'))} / {_fmt(measured.get('images'))}"),
        ("data wait share", _pct(measured.get("data_time_s"), measured.get("time_s"))),
        ("warm-up steps (excluded)", f"{_fmt(warmup.get('steps'))} in {_fmt(warmup.get('time_s'))} s"),
        ("final val top-1", _fmt(results.get("final", {}).get("val_top1"), 4)),
    ]
    if results.get("data_only"):
        rows.insert(1, ("mode", "data-only: loader, augmentation and copy to the device; no model, img/s delivered"))
    if results.get("compile_time_s") is not None:
        rows.append(("torch.compile time (s, excluded)", _fmt(results["compile_time_s"], 1)))
    rows += observability_rows(results)
    for option, why in (cfg.get("no_effect") or {}).items():
        rows.append((f"--{option.replace('_', '-')}: no effect", str(why)))
    if results.get("error"):
        rows.append(("error", _fmt(results["error"].get("message"))))
    return rows


def _windows(results: Mapping[str, Any]) -> str:
    """`--repeats`: the median over the throughput windows and the 95% CI of their mean (windows.py)."""
    w = results.get("throughput_windows") or {}
    s = (w.get("summary") or {}).get("throughput_img_s")
    if not s:
        return "-"
    ci = f" [{s['ci_low']:,.1f}, {s['ci_high']:,.1f}]" if s.get("ci_low") is not None else f" ({_no_ci(s)})"
    return f"{s['median']:,.1f}{ci} over {w.get('windows')} windows"


def _no_ci(s: Mapping[str, Any]) -> str:
    """Why a summary has no interval (stats.MIN_SAMPLES_FOR_CI)."""
    return str(s.get("note") or f"{s.get('n')} window(s): no CI")


def _stat(d: Mapping[str, Any] | None, key: str, digits: int = 1) -> str:
    v = (d or {}).get(key)
    return "-" if not v else f"{v['mean']:.{digits}f} mean / {v['max']:.{digits}f} max"


def observability_rows(results: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Efficiency, utilisation, memory, energy and the profiler's own cost; absent stays '-'."""
    rows: list[tuple[str, str]] = []
    if results.get("flops_per_image") is not None:
        rows.append(("GFLOP per training image", _fmt(results["flops_per_image"] / 1e9, 3)))
    if results.get("flops_forward_per_image") is not None:
        rows.append(("GFLOP per image, forward only", _fmt(results["flops_forward_per_image"] / 1e9, 3)))
    if results.get("achieved_tflops") is not None:
        rows.append(("achieved TFLOP/s", _fmt(results["achieved_tflops"], 3)))
    if results.get("mfu") is not None:
        rows.append(
            (
                "MFU",
                f"{100 * results['mfu']:.1f}% of {_fmt(results.get('mfu_peak_tflops_per_device'), 1)} TFLOP/s per device",
            )
        )
    util = results.get("utilization") or {}
    host = util.get("host") or {}
    if host:
        rows.append(("host CPU % (system)", _stat(host, "cpu_pct")))
        rows.append(("run CPU % (process tree)", _stat(host, "proc_cpu_pct")))
        rows.append(("run resident memory, RSS summed (GiB)", _stat(host, "rss_gib", 2)))
        if host.get("pss_gib"):
            rows.append(("run memory, PSS (GiB)", _stat(host, "pss_gib", 2)))
    for g in util.get("gpus", []):
        rows.append((f"GPU {g.get('index')} utilisation %", _stat(g, "util_pct")))
        rows.append((f"GPU {g.get('index')} power (W)", _stat(g, "power_w")))
    if results.get("peak_mem_gib") is not None:
        rows.append(
            (
                "peak device memory (GiB)",
                f"{results['peak_mem_gib']:.2f} allocated / {results.get('peak_mem_reserved_gib', 0):.2f} reserved",
            )
        )
    if results.get("energy_j") is not None:
        rows.append(("GPU energy (J)", _fmt(results["energy_j"], 0)))
    if results.get("images_per_j") is not None:
        rows.append(("images per joule", _fmt(results["images_per_j"], 2)))
    prof = results.get("profile") or {}
    if prof.get("profiler_overhead") is not None:
        rows.append(("profiler overhead", f"+{100 * prof['profiler_overhead']:.0f}% step time under the profiler"))
    elif prof.get("profiler_overhead_note"):
        rows.append(("profiler overhead", str(prof["profiler_overhead_note"])))
    verdict = results.get("verdict")
    if verdict:  # never a label without the measurements behind it
        rows.append(("bottleneck", f"{verdict.get('bottleneck', '-')} ({verdict.get('evidence', '')})"))
    return rows


def phase_rows(results: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for p in (results.get("profile") or {}).get("phases") or []:
        rows.append(
            [
                p.get("phase"),
                _fmt(p.get("calls")),
                _fmt(p.get("cpu_time_s"), 4),
                _pct(p.get("cpu_share_of_step"), 1.0) if p.get("cpu_share_of_step") is not None else "-",
                _fmt(p.get("device_time_s"), 4),
                _pct(p.get("device_share_of_step"), 1.0) if p.get("device_share_of_step") is not None else "-",
            ]
        )
    return rows


def verdict_line(results: Mapping[str, Any]) -> str | None:
    v = results.get("verdict")
    if not v:
        return None
    return f"Verdict: {v.get('bottleneck')}: {v.get('evidence')}. Try: {v.get('advice')}"


EPOCH_HEADERS = (
    "epoch",
    "images",
    "data (s)",
    "compute (s)",
    "total (s)",
    "data %",
    "warm-up steps",
    "img/s (measured)",
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
                _fmt(e.get("warmup_steps")),
                _fmt(e.get("throughput_img_s"), 1),  # warm-up excluded, like the headline
                _fmt(e.get("train_loss"), 4),
                _fmt(e.get("train_top1"), 4),
                _fmt(e.get("val_top1"), 4),
                _fmt(e.get("val_time_s")),
            ]
        )
    return rows


# Above this share of unreadable images the figures describe a different dataset: say so in the report.
SKIPPED_WARN_SHARE = 0.10


def skipped_images_warning(results: Mapping[str, Any]) -> str | None:
    """A warning line when more than SKIPPED_WARN_SHARE of the dataset's images were skipped. Pure."""
    data = results.get("data") or {}
    skipped = data.get("corrupt_images_skipped") or 0
    total = (data.get("train_size") or 0) + (data.get("val_size") or 0)
    if (
        not isinstance(skipped, int)
        or not isinstance(total, int)
        or total <= 0
        or skipped <= total * SKIPPED_WARN_SHARE
    ):
        return None
    return (
        f"warning: {skipped} of {total} images ({skipped / total:.0%}) were unreadable and skipped, more than "
        f"{SKIPPED_WARN_SHARE:.0%}: these figures are for a smaller dataset; see data.corrupt_image_reasons"
    )


def render(results: Mapping[str, Any], fmt: str = "text") -> str:
    """The run report as text (`fmt="text"`) or markdown (`fmt="md"`)."""
    table_fmt = "github" if fmt == "md" else "simple"
    summary = tabulate(summary_rows(results), headers=("metric", "value"), tablefmt=table_fmt)
    epochs = tabulate(epoch_rows(results), headers=EPOCH_HEADERS, tablefmt=table_fmt, disable_numparse=True)
    phases = phase_rows(results)
    phase_table = (
        tabulate(
            phases,
            headers=("phase", "calls", "CPU (s)", "CPU share", "device (s)", "device share"),
            tablefmt=table_fmt,
            disable_numparse=True,
        )
        if phases
        else ""
    )
    verdict = verdict_line(results) or ""
    skipped = skipped_images_warning(results)
    title = f"effbench run {results.get('run_name', '')}".strip()
    notes = (
        "Throughput counts measured steps only (warm-up excluded): images / (data wait + compute), with several "
        "ranks all ranks' images over the slowest rank's time; the epoch table's img/s is the same per epoch. "
        "Data wait is host time blocked on the loader; compute ends with a device sync."
    )
    if results.get("data_only"):
        notes = (
            "Data-only run: no model. Throughput is images delivered to the device per second over the "
            "measured steps (warm-up excluded): next() on the loader, the copy and a device sync."
        )
    if fmt == "md":
        parts = [f"# {title}", f"**{skipped}**" if skipped else "", f"**{verdict}**" if verdict else ""]
        parts += ["## Summary", summary, "## Epochs", epochs]
        if phase_table:
            parts += ["## Profiling pass: phases", phase_table]
        return "\n\n".join(p for p in parts if p) + f"\n\n{notes}\n"
    parts = [title, *([skipped] if skipped else []), summary, f"Epochs\n{epochs}"]
    if phase_table:
        parts.append(f"Profiling pass: phases of the step\n{phase_table}")
    if verdict:
        parts.append(verdict)
    return "\n\n".join(parts) + f"\n\n{notes}\n"

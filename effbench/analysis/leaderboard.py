"""Pure: exported runs from several machines -> a leaderboard per configuration. No torch import.

    effbench report results/cluster-week-47     a folder of runs (and sweeps) from several machines

Runs are grouped by their resolved configuration (where they wrote and read excluded); inside a
group each run is a row: its machine, its throughput (results.json `throughput_img_s`, the figure its
own report prints; rows are ranked by it) and the 95% interval of its windows' mean, speed relative to
the best row, Welch's test of its gap to the best (the same `stats.difference` as
`effbench compare`), and the environment fields that differ from the best row's (driver, clocks,
container, shm, CPU quota...), which are where a gap's explanation usually starts.

A machine that ran a configuration more than once (a sweep's --rounds, a nightly run) is also pooled: its
runs' mean with the Student's t interval across them (analysis/rounds.py), and the group's verdict then
compares machines on those means, Welch's test on the runs' figures, not on one run's windows.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from effbench import schema
from effbench.analysis import export as ex
from effbench.analysis import rounds, stats
from effbench.analysis.export import Run

# Config keys that say where a run read and wrote or how it logged, not what it measured; and what was
# asked for where it differs from what ran (requested, no_effect): runs are grouped by what ran.
IGNORED_CONFIG = (
    *(schema.field_path(schema.Config, f) for f in (
        lambda c: c.output, lambda c: c.data_dir, lambda c: c.download, lambda c: c.log_interval,
        lambda c: c.node_rank, lambda c: c.rdzv_endpoint, lambda c: c.rdzv_id,
    )),
    "requested", "no_effect",  # config.json's notes beside the values (config.py), not fields
)  # fmt: skip
# Keys named in every group label, then whatever else differs between groups.
LABEL_KEYS = tuple(
    schema.field_path(schema.Config, f)
    for f in (lambda c: c.arch, lambda c: c.dataset, lambda c: c.batch_size, lambda c: c.precision, lambda c: c.device)
)
# The export columns a leaderboard row reads (analysis/export.py)
STATUS = ex.column_name(lambda r: r.status)
HEADLINE = ex.column_name(lambda r: r.throughput_img_s)
GPU_COUNT = ex.env_column(lambda e: e.gpu_count)
CPU_MODEL = ex.env_column(lambda e: e.cpu_model)
CPU_CORES = ex.env_column(lambda e: e.cpu_cores_usable)
TARGET = ex.tta_column(lambda t: t.target_top1)
REACHED = ex.tta_column(lambda t: t.reached_target)
EPOCHS_TO_TARGET = ex.tta_column(lambda t: t.epochs_to_target)
BEST_VAL_TOP1 = ex.tta_column(lambda t: t.best_val_top1)


def _shown(v: Any, digits: int = 1) -> str:
    if v is None or v == "":
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


# (label, export column, digits): compared as shown, so a difference below the printed precision
# (clock jitter of a few MHz, shm 23.54 vs 23.55 GiB) is not called a difference.
ENV_FIELDS = (
    ("GPU", ex.GPU_MODEL, 0),
    ("GPUs", GPU_COUNT, 0),
    ("driver", ex.env_column(lambda e: e.driver_version), 0),
    ("SM clock MHz", ex.SM_CLOCK_MHZ, 0),
    ("CUDA build", ex.env_column(lambda e: e.cuda_build), 0),
    ("torch", ex.env_column(lambda e: e.torch), 0),
    ("container", ex.env_column(lambda e: e.container_runtime), 0),
    ("image", ex.IMAGE_REVISION, 0),
    ("shm GiB", ex.SHM_GIB, 1),
    ("CPU quota cores", ex.CPU_QUOTA_CORES, 1),
    ("CPU cores", CPU_CORES, 0),
    ("CPU", CPU_MODEL, 0),
)


def config_key(row: Mapping[str, Any]) -> str:
    cfg = {k[7:]: v for k, v in row.items() if k.startswith("config.") and k[7:] not in IGNORED_CONFIG}
    return json.dumps(cfg, sort_keys=True, default=str)


def machine_label(row: Mapping[str, Any]) -> str:
    host = row.get(ex.MACHINE) or row.get(ex.HOST) or "?"  # a container's made-up hostname names no machine
    if row.get(GPU_COUNT):
        return f"{host} ({row[GPU_COUNT]}x {row.get(ex.GPU_MODEL) or 'GPU'})"
    return f"{host} ({row.get(CPU_MODEL) or 'CPU'}, {_shown(row.get(CPU_CORES))} cores)"


def env_differences(row: Mapping[str, Any], best: Mapping[str, Any]) -> list[str]:
    out = []
    for label, key, digits in ENV_FIELDS:
        mine, theirs = _shown(row.get(key), digits), _shown(best.get(key), digits)
        if mine != theirs:
            out.append(f"{label} {mine} (best: {theirs})")
    return out


@dataclass(frozen=True)
class Entry:
    machine: str
    path: str
    status: str
    throughput: float | None
    """The run's own throughput_img_s: the figure its report prints, and what the rows are ranked by."""
    ci_low: float | None
    ci_high: float | None
    relative: float | None
    """throughput / the best throughput of the group (1.0 for the best)."""
    gap: str
    """Welch's verdict on mean(this) - mean(best): 'best', 'within noise', 'slower, outside noise', ..."""
    differences: list[str] = field(default_factory=list)
    time_to_target: str | None = None
    """--target-top1: `12.345 s, 3 epochs` or `not reached (best 0.8123)`; None when the run had no target."""


SLOWER = "slower, outside noise"
"""The one gap that lets a group's verdict name a fastest and a slowest machine."""


@dataclass(frozen=True)
class MachineMean:
    """One machine's measured runs of a configuration, pooled: each run's figure is one sample of the machine."""

    machine: str
    pooled: rounds.Pooled
    """The runs' figures (in the group's run order), their mean and the 95% t interval across them."""
    relative: float | None
    """mean / the best machine's mean (1.0 for the best)."""
    gap: str
    """Welch's verdict on the runs' figures against the best machine's: 'best', 'within noise', ..."""
    differences: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.pooled.finished)

    @property
    def mean(self) -> float:
        assert self.pooled.summary is not None, "a machine is pooled from its measured runs"
        return self.pooled.summary.mean


@dataclass(frozen=True)
class Group:
    label: str
    config: dict[str, Any]
    entries: list[Entry]
    machines: list[MachineMean] = field(default_factory=list)
    """Each machine over its measured runs, highest mean first; empty unless a machine ran this more than once."""

    @property
    def verdict(self) -> str:
        if self.machines:
            best = self.machines[0]
            return _ends_verdict(
                self.label,
                [Ranked(m.machine, m.mean, m.relative, m.gap, m.differences) for m in self.machines],
                of=f"mean of {best.runs} runs" if best.runs > 1 else "1 run",
                suffix=" [mean of runs]",
            )
        ranked = [
            Ranked(e.machine, e.throughput, e.relative, e.gap, e.differences)
            for e in self.entries
            if e.throughput is not None
        ]
        if not ranked:
            return f"{self.label}: no run measured throughput"
        return _ends_verdict(self.label, ranked)


class Ranked(NamedTuple):
    """A row of a group's ranking as its verdict reads it: a run's own, or a machine's over its runs."""

    machine: str
    img_s: float
    relative: float | None
    gap: str
    differences: list[str]


def _ends_verdict(label: str, ranked: Sequence[Ranked], *, of: str = "", suffix: str = "") -> str:
    """The group's verdict from its fastest and slowest rows: a winner is named only outside noise."""
    best = ranked[0]
    figure = f"{best.img_s:,.1f} img/s"
    if len(ranked) == 1:
        return f"{label}: only {best.machine} measured ({figure}{', ' + of if of else ''})"
    last = ranked[-1]
    assert last.relative is not None
    figure += f" ({of})" if of else ""
    why = f"; differs in {', '.join(last.differences)}" if last.differences else "; same environment fields"
    lower = f"{100 * (1 - last.relative):.1f}%"
    if last.gap != SLOWER:
        # the samples cannot tell the ends apart (or disagree with the figures): no winner is named
        return f"{label}: no fastest machine ({last.gap}): {best.machine} {figure}, {last.machine} {lower} lower{why}{suffix}"
    return f"{label}: fastest {best.machine} {figure}; slowest {last.machine} {lower} slower ({last.gap}){why}{suffix}"


def _headline(run: Run) -> float | None:
    """The run's throughput as its report prints it (one definition, analysis/throughput): ranking by
    the windows' median instead could order two machines opposite to their own reports."""
    return run.row.get(HEADLINE)


def _gap(best: Run, run: Run) -> str:
    return "best" if run is best else _gap_of(best.windows_img_s, run.windows_img_s, "windows")


def _gap_of(best: Sequence[float], mine: Sequence[float], samples: str) -> str:
    """Welch's verdict on mean(mine) - mean(best): a run's windows, or a machine's runs (`samples="runs"`)."""
    too_few = stats.too_few_to_judge(len(best), len(mine), samples=samples)
    if too_few:
        return too_few
    d = stats.difference(best, mine)
    if not d.significant:
        return "within noise"
    return SLOWER if d.delta < 0 else "faster, outside noise"


def _time_to_target(row: Mapping[str, Any]) -> str | None:
    """An export row's time-to-accuracy figures as the leaderboard prints them (None: no target)."""
    if row.get(TARGET) in (None, ""):
        return None
    if row.get(REACHED) is True and row.get(ex.TIME_TO_TARGET_S) is not None:
        return f"{row[ex.TIME_TO_TARGET_S]:.3f} s, {row[EPOCHS_TO_TARGET]} epoch(s)"
    best = row.get(BEST_VAL_TOP1)
    return "not reached" + ("" if best in (None, "") else f" (best {best:.4f})")


def _labels(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    varying = sorted(k for k in set().union(*configs) if len({json.dumps(c.get(k), default=str) for c in configs}) > 1)
    keys = list(LABEL_KEYS) + [k for k in varying if k not in LABEL_KEYS]
    return [" ".join(f"{k}={_shown(c.get(k))}" for k in keys if k in c) or "all runs" for c in configs]


def leaderboard(runs: Sequence[Run]) -> list[Group]:
    """Groups in order of first appearance; rows by the runs' throughput, fastest first, unmeasured last."""
    by: dict[str, list[Run]] = {}
    for r in runs:
        if r.row.get(ex.KIND) == "sweep-attempt":  # superseded by the cell's rerun
            continue
        by.setdefault(config_key(r.row), []).append(r)
    configs = [json.loads(k) for k in by]
    groups = []
    for label, cfg, members in zip(_labels(configs), configs, by.values(), strict=True):
        figures = {id(m): v for m in members if m.row.get(STATUS) == "ok" and (v := _headline(m))}
        measured = sorted((m for m in members if id(m) in figures), key=lambda m: -figures[id(m)])
        rest = [m for m in members if id(m) not in figures]
        best = measured[0] if measured else None
        names = [machine_label(m.row) for m in measured + rest]
        runs_of = Counter(names)  # counted once: names.count per row made a group of n runs cost n^2
        entries = []
        for m, name in zip(measured + rest, names, strict=True):
            thr = figures.get(id(m))
            if runs_of[name] > 1:  # several runs of one machine: tell them apart by folder
                name = f"{name} {Path(str(m.row.get(ex.PATH))).name}"
            entries.append(
                Entry(
                    machine=name,
                    path=str(m.row.get(ex.PATH)),
                    status=str(m.row.get(STATUS)),
                    throughput=thr,
                    ci_low=m.row.get(ex.CI_LOW) if thr is not None else None,
                    ci_high=m.row.get(ex.CI_HIGH) if thr is not None else None,
                    relative=thr / figures[id(best)] if thr is not None and best is not None else None,
                    gap=_gap(best, m) if thr is not None and best is not None else "not measured",
                    differences=env_differences(m.row, best.row) if best is not None and m is not best else [],
                    time_to_target=_time_to_target(m.row),
                )
            )
        groups.append(Group(label, cfg, entries, _pooled(measured, names[: len(measured)], figures)))
    return groups


def _pooled(measured: Sequence[Run], names: Sequence[str], figures: Mapping[int, float]) -> list[MachineMean]:
    """Each machine over its measured runs (`measured` fastest first, `names` their machines), when one ran more
    than once; else []. Machines are ranked by mean and judged against the best mean with Welch on the runs."""
    runs_by: dict[str, list[Run]] = {}
    for m, name in zip(measured, names, strict=True):
        runs_by.setdefault(name, []).append(m)
    if all(len(ms) < 2 for ms in runs_by.values()):
        return []
    pools = {
        name: rounds.pool(
            [
                rounds.RoundFigure(i + 1, figures[id(m)], m.row.get(ex.CI_LOW), m.row.get(ex.CI_HIGH))
                for i, m in enumerate(ms)
            ]
        )
        for name, ms in runs_by.items()
    }
    order = sorted(pools, key=lambda n: -_mean(pools[n]))
    best = order[0]
    best_row = runs_by[best][0].row
    out = []
    for name in order:
        p = pools[name]
        out.append(
            MachineMean(
                machine=name,
                pooled=p,
                relative=_mean(p) / _mean(pools[best]),
                gap="best" if name == best else _gap_of(pools[best].finished, p.finished, "runs"),
                differences=[] if name == best else env_differences(runs_by[name][0].row, best_row),
            )
        )
    return out


def _mean(p: rounds.Pooled) -> float:
    assert p.summary is not None
    return p.summary.mean

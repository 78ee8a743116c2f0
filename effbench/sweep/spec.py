"""Pure: what a sweep runs. Comma lists and presets -> the cells, each a validated RunConfig.

    parse_list("--batch-size", "32,64,128")         -> (32, 64, 128)
    SweepSpec(lists={"workers": (0, 2)}, options={"dataset": "synthetic"}, ...)
    plan_cells(spec, visible_gpus=0, cores=2)        -> SweepPlan(name, dims, cells)

Cells are the Cartesian product of the swept dimensions in DIMENSIONS order (the first varies
slowest), or with `zip` the i-th value of every list together. With `rounds` K > 1 the whole grid runs
K times, round after round, each round after the first in its own seeded shuffle (ROUND, the outermost
dimension; not a run option): each configuration meets the machine at K moments. Every cell's RunConfig
is built here, before anything runs, so a bad value in any cell is a one-line error before the first
cell starts.
No torch import.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effbench import results
from effbench.sweep import presets
from effbench.config import RunConfig, check_field_range, check_path, option_name, smoke_overrides
from effbench.errors import EffbenchError

# Swept config fields, in product order (outermost first), and how their values parse.
DIMENSIONS: dict[str, str] = {
    "arch": "str",
    "dataset": "str",
    "device": "str",
    "gpus": "count",
    "nproc": "count",
    "scaling": "str",
    "batch_size": "count",
    "workers": "int",
    "optimizer": "str",
    "batch_norm": "onoff",
    "precision": "str",
    "channels_last": "onoff",
    "compile": "onoff",
    "freeze": "str",
    "loader": "str",
    "gpu_decode": "onoff",
    "data_only": "onoff",
}
# Swept by presets only (the loaders preset); on the command line they are single flags.
PRESET_ONLY = ("gpu_decode", "data_only")

_ON = ("on", "yes", "true", "with", "1")
_OFF = ("off", "no", "false", "without", "0")
CELLS_DIR = "cells"
# --rounds: a sweep dimension of its own, outermost, that is no run option (RunConfig has no field of it)
ROUND = "round"
MAX_ROUNDS = 100
# The most cells one sweep may plan: each cell is a whole run (minutes), so 10,000 is weeks of machine time,
# and planning a million cells took 2.1 GB and a minute before anything was said (issue 28).
MAX_CELLS = 10_000


def dim_option(field_name: str) -> str:
    return option_name(field_name)


def list_options() -> str:
    return ", ".join(dim_option(d) for d in DIMENSIONS if d not in PRESET_ONLY)


def _parse_item(option: str, item: str, kind: str) -> Any:
    if kind in ("int", "count"):
        if not re.fullmatch(r"\d+", item):
            raise EffbenchError(option, f"{item!r} is not a whole number; use a list like 32,64,128")
        n = int(item)
        field_name = option[2:].replace("-", "_")
        # the range `run` holds the option to, in its words; run parses --gpus and --nproc lists itself
        # (launch/plan.parse_counts), in the words below
        if field_name in RunConfig.__dataclass_fields__ and field_name not in ("gpus", "nproc"):
            check_field_range(field_name, n)
        if kind == "count" and n < 1:
            raise EffbenchError(option, f"{n} must be 1 or more")
        return n
    if kind == "onoff":
        key = item.lower()
        if key in _ON:
            return True
        if key in _OFF:
            return False
        raise EffbenchError(option, f"{item!r} is not on or off; use --batch-norm on,off")
    return item


def parse_list(option: str, text: str, kind: str = "str") -> tuple[Any, ...]:
    """`"32,64"` -> (32, 64). An empty item (`32,,64`) or a repeated value is an error."""
    items = [t.strip() for t in str(text).split(",")]
    if len(items) > MAX_CELLS:
        raise EffbenchError(
            option, f"lists {len(items):,} values, more than a sweep may run ({MAX_CELLS:,} cells); list fewer"
        )
    if any(not t for t in items):
        raise EffbenchError(option, f"{text!r} has an empty item; separate values with single commas, like 32,64,128")
    values = tuple(_parse_item(option, t, kind) for t in items)
    seen: set[str] = set()
    for key in (str(v).lower() for v in values):
        if key in seen:
            raise EffbenchError(option, f"{text!r} lists {key} twice; list each value once")
        seen.add(key)
    return values


def one_value(option: str, text: str | None, kind: type = str) -> Any:
    """A pass-through option of `effbench sweep`: exactly one value, never a list."""
    if text is None:
        return None
    if "," in str(text):
        raise EffbenchError(
            option, f"takes one value, not the list {text!r}; only {list_options()} take lists in a sweep"
        )
    if kind is str:
        return text
    try:
        return kind(str(text).strip())
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise EffbenchError(option, f"{text!r} is not {what}") from None


def show(value: Any) -> str:
    """A swept value as the report shows it (BatchNorm on/off)."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class SweepSpec:
    """One `effbench sweep` invocation, validated. Field names match the config fields."""

    lists: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Swept dimensions given on the command line (config field -> values); they replace a preset's."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Single-valued run options (config field -> value), passed to every cell; they replace a preset's."""
    preset: str | None = None
    """A seed experiment from presets.PRESETS."""
    zip: bool = False
    """Pair the lists element-wise (the i-th values together) instead of the Cartesian product."""
    smoke: bool = False
    """Start every cell from the --smoke preset (it overrides a preset's fixed options; explicit options override it)."""
    output: Path | str = Path("results")
    """Parent folder of the sweep folder (the text as typed is checked, then held as a Path)."""
    name: str | None = None
    """Sweep folder name; default sweep-<preset or swept options>. The same name resumes."""
    fail_fast: bool = False
    """Stop at the first failed cell (OOM is data, not a failure)."""
    rounds: int = 1
    """Run the whole grid this many times, round after round (ROUND)."""

    def __post_init__(self) -> None:
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or not 1 <= self.rounds <= MAX_ROUNDS:
            raise EffbenchError(
                "--rounds", f"must be a whole number from 1 to {MAX_ROUNDS}, got {self.rounds!r}; e.g. --rounds 3"
            )
        if self.preset is not None:
            object.__setattr__(self, "preset", presets.get_preset(self.preset).name)
        for key, values in self.lists.items():
            if key not in DIMENSIONS:
                raise EffbenchError(option_name(key), f"cannot be swept; lists are for {list_options()}")
            if not values:
                raise EffbenchError(dim_option(key), "needs at least one value")
        overlap = set(self.lists) & set(self.options)
        if overlap:
            raise EffbenchError(dim_option(sorted(overlap)[0]), "given both as a list and as one value; give it once")
        if self.preset is None and not self.lists and self.rounds == 1:
            raise EffbenchError(
                "--preset",
                f"nothing to sweep; give --preset ({', '.join(presets.PRESETS)}), a list such as --batch-size 32,64, "
                "or --rounds 3 to run one configuration three times",
            )
        if self.name is not None and results.safe_name(self.name) != self.name:
            raise EffbenchError(
                "--name", f"{self.name!r} is not a plain folder name; use letters, digits, '.', '_' and '-'"
            )
        check_path("--output", self.output)
        object.__setattr__(self, "output", Path(self.output))


@dataclass(frozen=True)
class Cell:
    index: int
    key: str
    """Stable folder-safe id: 000_batch-size-32_workers-0."""
    params: dict[str, Any]
    """The swept values of this cell (config field -> value)."""
    config: RunConfig


@dataclass(frozen=True)
class SweepPlan:
    name: str
    folder: Path
    dims: dict[str, tuple[Any, ...]]
    """Every swept dimension (preset and command line), in product order."""
    fixed: dict[str, Any]
    cells: list[Cell]


def default_name(spec: SweepSpec, dims: Mapping[str, Any]) -> str:
    if spec.preset:
        return f"sweep-{spec.preset}"
    return results.safe_name("sweep-" + "-".join(k.replace("_", "-") for k in dims))


def cell_count(dims: Mapping[str, tuple[Any, ...]], zipped: bool, rounds: int = 1) -> int:
    """How many cells the lists make, every round counted, before any is built."""
    if zipped:
        return rounds * max((len(v) for v in dims.values()), default=1)
    return rounds * math.prod(len(v) for v in dims.values())


def check_size(dims: Mapping[str, tuple[Any, ...]], zipped: bool, rounds: int = 1) -> None:
    """Refuse a sweep of more than MAX_CELLS cells in one line, before planning any of them."""
    n = cell_count(dims, zipped, rounds)
    if n > MAX_CELLS:
        sizes = " x ".join(
            [f"{len(v):,} {dim_option(k)}" for k, v in dims.items() if len(v) > 1]
            + ([f"{rounds} rounds"] if rounds > 1 else [])
        )
        raise EffbenchError(
            dim_option(max(dims, key=lambda k: len(dims[k]))) if dims else "--rounds",
            f"the sweep would run {n:,} cells ({sizes}), more than {MAX_CELLS:,}; list fewer values, run fewer "
            "--rounds, or split it into several sweeps",
        )


def _combinations(dims: Mapping[str, tuple[Any, ...]], zipped: bool, rounds: int = 1) -> list[dict[str, Any]]:
    check_size(dims, zipped, rounds)
    keys = list(dims)
    if not zipped:
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(dims[k] for k in keys))]
    lengths = {k: len(v) for k, v in dims.items() if len(v) > 1}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{dim_option(k)} has {n}" for k, n in lengths.items())
        raise EffbenchError(
            "--zip", f"pairs lists element-wise, so they need the same length ({detail}); fix the lists or drop --zip"
        )
    n = max(lengths.values(), default=1)
    return [{k: (v[i] if len(v) > 1 else v[0]) for k, v in dims.items()} for i in range(n)]


def in_rounds(combos: Sequence[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """The grid run `rounds` times, each combination with its ROUND first: round 1 in grid order, each later
    round shuffled by a generator seeded with its number, so a resumed sweep plans the same order. The shuffle
    is Google Benchmark's random interleaving: no cell always follows the same one, so what a cell inherits from
    the one before it (heat, caches, a loader's leftovers) varies between rounds instead of biasing them."""
    if rounds == 1:
        return [dict(c) for c in combos]
    out: list[dict[str, Any]] = []
    for r in range(1, rounds + 1):
        order = list(combos)
        if r > 1:
            random.Random(f"effbench-round-{r}").shuffle(order)
        out += [{ROUND: r, **c} for c in order]
    return out


def run_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's swept values that are run options: all but its ROUND."""
    return {k: v for k, v in params.items() if k != ROUND}


def configuration_key(params: Mapping[str, Any]) -> str:
    """What a cell's rounds share: its run options' swept values, as one comparable text."""
    return json.dumps(run_params(params), sort_keys=True, default=str)


def cell_key(index: int, params: Mapping[str, Any]) -> str:
    parts = [f"{k.replace('_', '-')}-{show(v)}" for k, v in params.items()]
    return results.safe_name(f"{index:03d}_" + "_".join(parts))


def config_identity(cfg: RunConfig) -> dict[str, Any]:
    """What makes two cells the same measurement: the resolved config without where it is written."""
    d = cfg.to_dict()
    d.pop("output", None)
    return d


def plan_cells(spec: SweepSpec, *, visible_gpus: int = 0, cores: int = 1) -> SweepPlan:
    """Resolve the preset for this machine, expand the lists and validate every cell's RunConfig."""
    given = {**spec.options, **{k: v[0] for k, v in spec.lists.items()}}
    dims: dict[str, tuple[Any, ...]] = {}
    fixed: dict[str, Any] = {}
    if spec.preset:
        dims, fixed = presets.preset_dims(
            presets.get_preset(spec.preset), given=given, visible_gpus=visible_gpus, cores=cores
        )
    for key in spec.lists:  # the command line replaces the preset: a list a dimension, a value a fixed option
        dims.pop(key, None)
    for key in spec.options:
        dims.pop(key, None)
    dims.update(spec.lists)
    fixed = {k: v for k, v in fixed.items() if k not in spec.options and k not in dims}
    dims = {k: tuple(dims[k]) for k in DIMENSIONS if k in dims}
    if "gpus" in dims and "nproc" in dims:
        raise EffbenchError("--gpus", "sweep --gpus or --nproc, not both (GPUs or CPU processes)")
    name = spec.name or default_name(spec, dims or ({ROUND: ()} if spec.rounds > 1 else {}))
    folder = Path(spec.output) / name
    # --smoke after the preset: it is asked for to make every cell tiny and offline (synthetic data)
    base = {**fixed, **(smoke_overrides() if spec.smoke else {}), **spec.options}
    cells: list[Cell] = []
    seen: dict[str, str] = {}
    combos = _combinations(dims, spec.zip, spec.rounds)
    keep = presets.get_preset(spec.preset).keep if spec.preset else None
    if keep is not None:  # a preset may leave out combinations that are not runs (gpu-decode on another loader)
        combos = [c for c in combos if keep({**base, **c})]
    for i, params in enumerate(in_rounds(combos, spec.rounds)):
        key = cell_key(i, params)
        cfg = RunConfig(**{**base, **run_params(params), "output": folder / CELLS_DIR / key})
        identity = json.dumps([params.get(ROUND), config_identity(cfg)], sort_keys=True)
        if identity in seen:
            swept = run_params(params)
            raise EffbenchError(
                dim_option(next(iter(swept), "arch")),
                f"cells {seen[identity]} and {key} are the same run (aliases of one value?); list each value once",
            )
        seen[identity] = key
        cells.append(Cell(i, key, dict(params), cfg))
    if spec.rounds > 1:
        dims = {ROUND: tuple(range(1, spec.rounds + 1)), **dims}
    return SweepPlan(name=name, folder=folder, dims=dims, fixed=fixed, cells=cells)


def varied(dims: Mapping[str, Sequence[Any]]) -> list[str]:
    """The dimensions with more than one value: the ones a report compares along."""
    return [k for k, v in dims.items() if len(v) > 1]

"""OMP_WAIT_POLICY for a CPU run, set before torch loads (`--omp-wait-policy`, issue 47).

OpenMP's threads spin while they wait by default (libgomp's ACTIVE); on a host where other processes already
want every core, a spinning thread holds a core another thread of the run needs, and a 2-core VM at load 3-6
ran the smoke run 10x slower than with PASSIVE (docs/troubleshooting.md#shared-cpu). libgomp reads the variable
once, when it loads with torch, so the CLI decides before any torch import; a torchrun or worker child inherits
it. `decide` is pure; `apply` reads the machine and sets the variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "OMP_WAIT_POLICY"


@dataclass(frozen=True)
class Decision:
    value: str | None
    """What to set OMP_WAIT_POLICY to; None: leave the environment as it is."""
    note: str | None
    """The one line that says what was set and why; None when nothing was set."""


def decide(option: str, *, device: str, env: Mapping[str, str], load_1m: float | None, cores: int) -> Decision:
    """What `--omp-wait-policy option` sets for a run on `device` (cpu, cuda or auto with `cuda` meaning a GPU
    is visible) given the environment and the load average over the machine's cores. Pure."""
    if option in ("passive", "active"):
        value = option.upper()
        if env.get(VARIABLE, "").strip().upper() == value:
            return Decision(None, None)
        return Decision(value, f"note: {VARIABLE}={value} for this run (--omp-wait-policy {option})")
    if device != "cpu" or env.get(VARIABLE, "").strip():  # a GPU's run waits on the GPU; the user's own value wins
        return Decision(None, None)
    if load_1m is None or load_1m <= cores:
        return Decision(None, None)
    return Decision(
        "PASSIVE",
        f"note: {VARIABLE}=PASSIVE for this run: the load average is {load_1m:.2f} on {cores} cores, so spinning "
        "OpenMP threads would hold cores the run's other threads need (--omp-wait-policy active keeps them "
        "spinning)",
    )


def device_of(requested: str) -> str:
    """The device a run will use, without importing torch: `auto` is cuda where an NVIDIA device node exists
    (a GPU the container or host exposes), else cpu."""
    if requested != "auto":
        return requested
    return "cuda" if any(Path("/dev").glob("nvidia[0-9]*")) else "cpu"


def apply(option: str, device: str) -> str | None:
    """Set OMP_WAIT_POLICY for the run as `decide` says; the note to print, or None. Must run before torch
    loads in this process (its own OpenMP reads the variable then); after, only child processes see it."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    decision = decide(option, device=device_of(device), env=os.environ, load_1m=load, cores=os.cpu_count() or 1)
    if decision.value is None:
        return None
    os.environ[VARIABLE] = decision.value
    if "torch" in sys.modules:  # this process's OpenMP has read it already (a sweep's later cells, the selftest)
        return f"{decision.note}; this process loaded torch before, so it applies to its child processes"
    return decision.note

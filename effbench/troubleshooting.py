"""Where a printed fix is explained at length: docs/troubleshooting.md, one section per problem.

A fix whose problem has a section there ends with `see docs/troubleshooting.md#ANCHOR` (`see()`): doctor's
fix column and preflight's error lines (system/preflight.py, by check name), the bottleneck verdict's advice
(analysis/efficiency.py, by bottleneck) and `effbench run`'s closing error line (cli/app.py, by status). The
anchors are the page's headings under GitHub's rule; tests/contracts/test_docs.py checks that each exists.
Torch-free, like everything preflight imports.
"""

from __future__ import annotations

PAGE = "docs/troubleshooting.md"

SHARED_CPU = "shared-cpu"
SHM = "shared-memory-too-small"
OLD_DRIVER = "old-nvidia-driver"
NO_GPU = "no-gpu-visible"
NCCL = "nccl-timeouts"
DATASET = "dataset-not-found"
OOM = "out-of-memory"

ANCHORS = (SHARED_CPU, SHM, OLD_DRIVER, NO_GPU, NCCL, DATASET, OOM)


def see(anchor: str) -> str:
    """The pointer a one-line fix ends with."""
    assert anchor in ANCHORS, anchor
    return f"see {PAGE}#{anchor}"


def pointed(fix: str, anchor: str | None) -> str:
    """`fix` followed by the pointer to its section ("; see ..."), or `fix` alone without one."""
    if anchor is None:
        return fix
    return f"{fix}; {see(anchor)}" if fix else see(anchor)

"""NVML (nvidia-ml-py's pynvml) opened and closed around a block: the one way effbench talks to NVML.

Below hardware.py, cuda_compat.py, preflight.py and the selftest, and importing none of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """pynvml, initialised, or None when there is no NVML (no library, driver or GPU); shut down
    on exit. Any NVML error inside the block ends the block only: callers get what they had."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError and friends: NVML is simply absent
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()

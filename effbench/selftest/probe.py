"""What a training process really did, seen from outside effbench's code: global module and optimizer hooks.

Installed in-process by the selftest, or in torchrun's ranks through a `sitecustomize.py` that the
selftest puts first on PYTHONPATH (Python imports `sitecustomize` at start-up, site.py), so
effbench's code carries no selftest hook. Per process it records:
- the dtypes of Conv2d/Linear outputs in forwards run with autograd on (training, not validation);
- one interval per training step: from the model's forward (the first root module with trainable parameters
  entered after the previous `optimizer.step()`) to the end of `optimizer.step()`, timed by CUDA events on
  CUDA, by perf_counter on the CPU.
`dump()` writes them as probe-<pid>.json into the folder named by EFFBENCH_SELFTEST_PROBE_DIR.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PROBE_DIR_ENV = "EFFBENCH_SELFTEST_PROBE_DIR"


class Probe:
    def __init__(self) -> None:
        self.dtypes: dict[str, int] = {}
        self.steps: list[Any] = []  # (start, end) pairs: CUDA events or perf_counter floats
        self._depth = 0
        self._start: Any = None
        self._handles: list[Any] = []

    def install(self) -> Probe:
        import torch
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def now() -> Any:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                return event
            return time.perf_counter()

        def pre(module: Any, _args: Any) -> None:
            # The step starts at the model's forward: the first root forward with trainable parameters since the
            # last optimizer step. Not any root forward: the loss module (nn.CrossEntropyLoss) is one, and
            # taking its start left the model's forward out of every step; torchvision's v1 transforms are
            # modules too, run in this thread while a batch loads (--workers 0). A forward that no step
            # follows (the FLOPs count) opens the first step, a warm-up step.
            if self._depth == 0 and self._start is None and torch.is_grad_enabled() and _trains(module):
                self._start = now()
            self._depth += 1

        def post(module: Any, _args: Any, out: Any) -> None:
            self._depth -= 1
            layer = isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)) and isinstance(out, torch.Tensor)
            if layer and torch.is_grad_enabled():  # training forwards only, not validation
                key = str(out.dtype).removeprefix("torch.")
                self.dtypes[key] = self.dtypes.get(key, 0) + 1

        def step_end(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
            if self._start is not None:
                self.steps.append((self._start, now()))
                self._start = None

        self._handles = [
            register_module_forward_pre_hook(pre),
            register_module_forward_hook(post, always_call=True),  # a forward that raises still leaves its depth
            register_optimizer_step_post_hook(step_end),
        ]
        return self

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def step_times_s(self) -> list[float]:
        out = []
        for start, end in self.steps:
            if isinstance(start, float):
                out.append(end - start)
            else:
                end.synchronize()
                out.append(start.elapsed_time(end) / 1000.0)  # CUDA events give milliseconds
        return out

    def record(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "rank": os.environ.get("RANK"),
            "dtypes": dict(self.dtypes),
            "step_times_s": self.step_times_s(),
        }

    def dump(self, folder: str | Path) -> None:
        path = Path(folder) / f"probe-{os.getpid()}.json"
        path.write_text(json.dumps(self.record()))


def _trains(module: Any) -> bool:
    return any(p.requires_grad for p in module.parameters())


def install_from_env() -> None:
    """sitecustomize's entry: in a process started with EFFBENCH_SELFTEST_PROBE_DIR, hook it and dump at exit."""
    folder = os.environ.get(PROBE_DIR_ENV)
    if not folder or os.environ.get("RANK") is None:  # torchrun's ranks only, not torchrun itself
        return
    import atexit

    probe = Probe().install()
    atexit.register(probe.dump, folder)


SITECUSTOMIZE = "from effbench.selftest.probe import install_from_env\n\ninstall_from_env()\n"

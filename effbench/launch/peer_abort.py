"""Ending the collectives a failed rank will never join in seconds, not at the process-group timeout.

Inside a training step DDP's collectives (the forward's buffer broadcast, backward's bucket all-reduces) pair
every rank with every other. A rank that raises there (out of memory in its forward under the profiler) leaves
its peers in a collective it never makes, until the process-group timeout (300 s by default), and any later
collective of its own would pair with theirs out of order. So, while a pass runs (`StepAbort`):

- the failing rank posts its error to the job's store (the first post wins) and tears its communicators down;
- every rank watches the store from a thread and tears its own down when a peer posts, then reads the
  peer's error;
- the process group is then gone, and the run's last gather goes through the store (`StoreLink.gather`).

Tearing down, by backend:
- NCCL: `_abort_process_group` (torch/distributed/distributed_c10d.py:3085), ncclCommAbort on every
  communicator: a kernel waiting for a peer exits. Device check: docs/gpu-truth.md, N7.
- gloo: its `abort()` does not end an operation in flight (torch 2.14.1, measured here: a pending all_reduce
  returned only when the peer's process exited, 10.6 s later). A closed connection does: the waiting side
  raises "Connection closed by peer" at once (gloo/transport/tcp/pair.cc:561). So the rank shuts its gloo
  connections down, as its exit would: every TCP connection of the process but the store's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pickle
import socket
import threading
from typing import Any

POLL_S = 0.1  # the watcher's store check: one round trip to the store (~0.1 ms on a LAN) per poll


class StoreLink:
    """The job's store, kept from the process group's start, and whether the group was torn down (`broken`):
    then gathers go through the store."""

    def __init__(self, store: Any, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.timeout = dt.timedelta(seconds=timeout_s)
        self.broken = False
        self._gathers = 0
        self._lock = threading.Lock()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` in rank order, through the store (each rank makes the same calls in the same order,
        as for a collective): for after the process group was torn down."""
        n = self._gathers
        self._gathers += 1
        keys = [f"effbench/gather/{n}/{r}" for r in range(self.world_size)]
        self.store.set(keys[self.rank], pickle.dumps(obj))
        self.store.wait(keys, self.timeout)
        return [pickle.loads(self.store.get(k)) for k in keys]

    def tear_down(self) -> None:
        """This rank's communicators, once: NCCL's aborted, gloo's connections shut (the module's docstring)."""
        with self._lock:
            if self.broken:
                return
            self.broken = True
        if self.backend == "nccl":
            import torch.distributed as dist

            with contextlib.suppress(Exception):  # already torn down by the other thread's call
                dist.distributed_c10d._abort_process_group()
        else:
            shut_tcp_connections(except_port=_store_port())


def _store_port() -> int | None:
    port = os.environ.get("MASTER_PORT", "")
    return int(port) if port.isdigit() else None


def shut_tcp_connections(except_port: int | None) -> int:
    """Shut down (not close: the owner closes its descriptor) every connected TCP socket of this process whose
    either end is not on `except_port` (the store's); the count shut."""
    shut = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with s:
            try:
                if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                local, peer = s.getsockname()[1], s.getpeername()[1]  # a listener has no peer: OSError
                if except_port in (local, peer):
                    continue
                s.shutdown(socket.SHUT_RDWR)
                shut += 1
            except OSError:
                continue
    return shut


class StepAbort:
    """One pass's failure channel (a context manager: the watcher runs inside it). `fail(error)` from a rank
    whose step raised; `peer_failure()` after a step that returned, in case the step ran on torn-down
    communicators."""

    def __init__(self, link: StoreLink, name: str, poll_s: float = POLL_S) -> None:
        self.link = link
        self.key = f"effbench/abort/{name}"
        self.poll_s = poll_s
        self._posted: str | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> StepAbort:
        watch_store = self.link.store.clone()  # a store client of its own: one is not safe from two threads
        self._watcher = threading.Thread(target=self._watch, args=(watch_store,), name="effbench-step-abort",
                                         daemon=True)  # fmt: skip
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def _watch(self, store: Any) -> None:
        while not self._stop.wait(self.poll_s):
            if store.check([self.key]):
                self._posted = store.get(self.key).decode()
                self.link.tear_down()
                return

    def fail(self, error: str) -> str:
        """Post this rank's error unless a peer's came first, tear this rank's communicators down, and return the
        job's failure: the first posted ("rank 1: RuntimeError: ..."), which may be a peer's whose tear-down
        made this rank's step raise."""
        mine = f"rank {self.link.rank}: {error}"
        first = self.link.store.compare_set(self.key, "", mine).decode()
        self._posted = first
        self.link.tear_down()
        return first

    def peer_failure(self) -> str | None:
        """A peer's posted failure, once the watcher has seen it (its tear-down may let a step return)."""
        return self._posted if self.link.broken else None

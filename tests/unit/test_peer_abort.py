"""A rank failing inside a step ends its peers' collectives through the store (launch/peer_abort.py, N7).

Two ranks are threads over a real TCPStore on 127.0.0.1; the tear-down is a recorder here (the gloo one is
checked in a subprocess, as it shuts every TCP connection of its process), and the whole path with gloo is
tests/e2e/test_distributed.py::test_a_rank_failing_inside_a_profiled_step_voids_the_profile_in_seconds.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist

from effbench.launch.distributed import DistContext
from effbench.launch.peer_abort import StepAbort, StoreLink
from effbench.measure.profiling import ProfilePassFailed, run_profile_pass


@pytest.fixture()
def stores():
    """A TCPStore server and one client per rank, as torchrun's workers each hold one."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", server.port, is_master=False) for _ in range(2)]
    yield clients
    del clients, server


class Recorder(StoreLink):
    """A link whose tear-down is recorded, not done (the tests run in pytest's own process)."""

    def __init__(self, store, rank):
        super().__init__(store, rank, world_size=2, backend="gloo", timeout_s=10)
        self.torn_down_at: float | None = None

    def tear_down(self) -> None:
        if not self.broken:
            self.broken, self.torn_down_at = True, time.monotonic()


def test_once_torn_down_the_ranks_gather_through_the_store(stores):
    links = [Recorder(s, r) for r, s in enumerate(stores)]
    for link in links:
        link.broken = True
    out: dict[int, list] = {}

    def rank(r):
        ctx = DistContext(rank=r, world_size=2, backend="gloo", link=links[r])
        out[r] = [ctx.gather({"row": r}), ctx.gather(f"second {r}")]  # two gathers: keys never collide

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert out[0] == out[1] == [[{"row": 0}, {"row": 1}], ["second 0", "second 1"]]


def test_a_ranks_failure_reaches_its_peer_which_tears_down_and_reads_it(stores):
    links = [Recorder(s, r) for r, s in enumerate(stores)]
    with StepAbort(links[0], "pass", poll_s=0.01) as peer, StepAbort(links[1], "pass", poll_s=0.01) as failing:
        posted_at = time.monotonic()
        assert failing.fail("OutOfMemoryError: CUDA out of memory") == "rank 1: OutOfMemoryError: CUDA out of memory"
        assert links[1].broken  # the failing rank tears its own communicators down
        deadline = time.monotonic() + 10
        while peer.peer_failure() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert peer.peer_failure() == "rank 1: OutOfMemoryError: CUDA out of memory"
    assert links[0].torn_down_at is not None and links[0].torn_down_at - posted_at < 5
    # the peer's own step then raised (its collective ended): the job's failure stays the first one posted
    assert peer.fail("RuntimeError: Connection closed by peer") == "rank 1: OutOfMemoryError: CUDA out of memory"


def test_no_failure_no_tear_down(stores):
    link = Recorder(stores[0], 0)
    with StepAbort(link, "pass", poll_s=0.01) as abort:
        time.sleep(0.05)
    assert abort.peer_failure() is None and not link.broken and link.torn_down_at is None


def test_a_failure_inside_a_profiled_step_makes_no_further_collective(tmp_path):
    # Before, the step's error went to the pass's closing agreement (one all_gather) while the peers waited in
    # the step's all-reduce: the two collectives paired out of order. Now it goes through `abort` alone.
    agreements: list = []

    def agree(error):
        agreements.append(error)
        return [error, None]

    class Abort:
        def fail(self, error):
            self.failed = error
            return f"rank 0: {error}"

        def peer_failure(self):
            return None

    def step(batch):
        raise RuntimeError("out of memory in the forward")

    abort = Abort()
    with pytest.raises(ProfilePassFailed, match="^rank 0: RuntimeError: out of memory in the forward$"):
        run_profile_pass(step, iter([torch.zeros(1)] * 5), device_type="cpu", out_dir=tmp_path, wait=0,
                         warmup=1, active=2, agree=agree, abort=abort)  # fmt: skip
    assert agreements == [None, None]  # the profiler's start and the step's batch; none after the step
    assert abort.failed == "RuntimeError: out of memory in the forward"


def test_a_step_that_returned_on_a_peers_abort_voids_the_pass(tmp_path):
    # NCCL: ncclCommAbort lets the waiting kernel exit, so the step can return (on garbage): the watcher's
    # record of the peer's failure still ends the pass, with the peer's error.
    class Abort:
        def fail(self, error):
            raise AssertionError("this rank's step did not fail")

        def peer_failure(self):
            return "rank 1: OutOfMemoryError: CUDA out of memory"

    with pytest.raises(ProfilePassFailed, match="^rank 1: OutOfMemoryError"):
        run_profile_pass(lambda b: None, iter([torch.zeros(1)] * 5), device_type="cpu", out_dir=tmp_path, wait=0,
                         warmup=1, active=2, agree=lambda e: [e, None], abort=Abort())  # fmt: skip


def test_gloos_tear_down_shuts_every_connection_but_the_stores():
    # In a process of its own: the tear-down shuts every TCP connection of the process it runs in.
    code = textwrap.dedent(
        """
        import socket
        from effbench.launch.peer_abort import shut_tcp_connections

        def pair(server):
            c = socket.create_connection(server.getsockname())
            s, _ = server.accept()
            return c, s

        store_server, other_server = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
        store_c, store_s = pair(store_server)
        gloo_c, gloo_s = pair(other_server)
        n = shut_tcp_connections(except_port=store_server.getsockname()[1])
        gloo_s.settimeout(5)
        assert gloo_s.recv(1) == b"", "the peer's end reads end-of-stream, as after the process's exit"
        store_c.sendall(b"x")
        assert store_s.recv(1) == b"x", "the store's connection still works"
        print(n)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) == 2  # both ends of the non-store connection (both live in this process)


def test_alone_there_is_no_abort_channel():
    with DistContext().step_abort("profile") as abort:
        assert abort is None

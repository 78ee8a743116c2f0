"""One Ctrl-C stops the test run, even when it lands inside an effbench run a test started in this process.

effbench's CLI handles SIGINT itself (run/phases.py: the run records `interrupted` and exits 130), so a Ctrl-C
that arrives while a test is inside `cli.main` reaches the test as `SystemExit(130)`: the test reads it as the
run's answer and pytest goes on to the next one; a second Ctrl-C was needed to stop the suite.

Every signal that has a Python handler, whichever handler that is, also writes its number to the wakeup fd
(signal.set_wakeup_fd: the C-level handler writes it before any Python code runs). After each test phase this
plugin reads that fd; a SIGINT the test did not send to itself (tests that do send one go through `os.kill`,
counted here) is the user's Ctrl-C, and it is raised again as KeyboardInterrupt, which pytest answers by
stopping the session (exit 2). Loaded by conftest.py (`pytest_plugins`); `pytest -p ctrl_c` loads it alone.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

_self_sent = 0  # SIGINTs this process sent itself (a test's own signal, not the user's)


def _counting_kill(real: Callable[[int, int], None]) -> Callable[[int, int], None]:
    def kill(pid: int, sig: int) -> None:
        global _self_sent
        if sig == signal.SIGINT and pid in (0, os.getpid()):
            _self_sent += 1
        real(pid, sig)

    return kill


_reader, _writer = socket.socketpair()
_reader.setblocking(False)
_writer.setblocking(False)


def pytest_configure(config: pytest.Config) -> None:
    signal.set_wakeup_fd(_writer.fileno(), warn_on_full_buffer=False)
    os.kill = _counting_kill(os.kill)


def _sigints_received() -> int:
    """SIGINTs delivered since the last call (the wakeup fd's bytes are signal numbers)."""
    count = 0
    while True:
        try:
            data = _reader.recv(4096)
        except BlockingIOError:
            return count
        count += data.count(bytes([signal.SIGINT]))


@contextmanager
def _stop_on_the_users_ctrl_c() -> Iterator[None]:
    global _self_sent
    _sigints_received()
    _self_sent = 0
    try:
        yield
    finally:
        if _sigints_received() > _self_sent:
            raise KeyboardInterrupt("Ctrl-C during a test (an in-process effbench run had caught it)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _stop_on_the_users_ctrl_c():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _stop_on_the_users_ctrl_c():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _stop_on_the_users_ctrl_c():
        return (yield)

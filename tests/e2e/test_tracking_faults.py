"""Issue 46: tracking servers that misbehave, written here as small sockets on 127.0.0.1: one that accepts and never
answers, one that sends headers and then trickles a byte at a time, one that answers 500, one that answers junk.
Each serves a bounded number of connections and stops by itself after SERVE_S.

The budget of each call is set small (EFFBENCH_TRACK_TIMEOUT=2) and the command must end well inside a generous
margin (30 s): MLflow alone waited 88 s on the silent server and for ever on the trickling one, so the verdict
holds on a loaded machine. What MLflow does with each answer is its own code, run for real (its client is
needed: pip install 'effbench[tracking]').
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clitools import invoke

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs MLflow's client")
FIXTURE_RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "v1-smoke-aef98bb.json"
SERVE_S = 40.0  # each server stops by itself after this; a command ends long before
MAX_CONNECTIONS = 50
BUDGET_S = "2"
MARGIN_S = 30.0
SECRET = "PW-answer-46"
JUNK_BODY = f"\x1b[2J\x1b]0;owned\x07 http://eve:{SECRET}@evil/ {'x' * 500}"


def _read_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk


def silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait()  # the connection is held open, never answered


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(0.5):  # one byte every half second: each socket read is answered in time
        conn.sendall(b" ")


def status_500(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    body = JUNK_BODY.encode()
    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip


def status_404(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    body = JUNK_BODY.encode()
    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip


def not_http(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    conn.sendall(b"\x1b[31m\xff\xfe" + JUNK_BODY.encode() + b"\r\n\r\n")


def not_json(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    body = b"\xff\xfe" + JUNK_BODY.encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket, threading.Event], None]], str]]:
    """serve(handler) -> its URI; every server stops (its sockets closed) after SERVE_S or at the test's end."""
    stop = threading.Event()

    def start(handler: Callable[[socket.socket, threading.Event], None]) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.2)
        deadline = time.monotonic() + SERVE_S

        def handle(conn: socket.socket) -> None:
            with conn, contextlib.suppress(OSError):  # the client hung up: this connection is done
                handler(conn, stop)

        def accept() -> None:
            with listener:
                for _ in range(MAX_CONNECTIONS):
                    while not stop.is_set() and time.monotonic() < deadline:
                        try:
                            conn, _ = listener.accept()
                        except TimeoutError:
                            continue
                        threading.Thread(target=handle, args=(conn,), daemon=True).start()
                        break
            stop.wait(max(0.0, deadline - time.monotonic()))
            stop.set()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    stop.set()


@pytest.fixture
def lone(tmp_path: Path) -> Path:
    folder = tmp_path / "lone"
    folder.mkdir()
    shutil.copy(FIXTURE_RECORD, folder / "results.json")
    return folder


def track(folder: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    code, _, err = invoke(["track", folder, "--track", uri], capsys)
    return code, err, time.monotonic() - start


@pytest.mark.parametrize("handler", [silent, trickle], ids=["never-answers", "trickles"])
def test_a_server_that_never_finishes_answering_costs_the_budget_it_names(handler, serve, lone, capsys, monkeypatch):
    monkeypatch.setenv("EFFBENCH_TRACK_TIMEOUT", BUDGET_S)
    uri = serve(handler)
    code, err, took = track(lone, uri, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --track: could not log to {uri} (no complete answer within 2 s,"), err
    assert "EFFBENCH_TRACK_TIMEOUT" in err
    assert took < MARGIN_S, took


@pytest.mark.parametrize("handler, said", [(status_500, "HTTP 500"), (status_404, "HTTP 404")], ids=["500", "404"])
def test_a_server_error_is_named_as_the_server_s_answer(handler, said, serve, lone, capsys):
    uri = serve(handler)
    code, err, took = track(lone, uri, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"(the server answered {said}" in err and "cannot connect" not in err, err
    assert "\x1b" not in err and SECRET not in err and "x" * 200 not in err, err  # never the body as it came
    assert took < MARGIN_S


@pytest.mark.parametrize(
    "handler, said",
    [(not_http, "the server's answer is not HTTP"), (not_json, "the server's answer is not MLflow's (not JSON)")],
    ids=["not-http", "not-json"],
)
def test_junk_from_a_server_is_named_never_echoed(handler, said, serve, lone, capsys):
    uri = serve(handler)
    code, err, _ = track(lone, uri, capsys)
    assert code == 2 and err == f"error: --track: could not log to {uri} ({said})\n", err

"""The dashboard's HTTP layer (services.dashboard_http) answers every malformed request with a
status and a line, never a connection closed without an answer (issue 65): each case below was
once a closed connection; and a reader that stops reading an event stream holds bounded memory.
A server of the same handler base on loopback; no hierarchy."""

from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus
from http.server import ThreadingHTTPServer

import pytest

from services.dashboard_http import STREAM_BACKLOG, JsonExchange, host_name

EVENT_BYTES = 64 * 1024
drawn = [0]   # events the stream's source has produced


class _Echo(JsonExchange):
    """POST: the body's `sql` encoded (as the dashboard hands it to gRPC); GET: the Host's name."""

    def do_POST(self) -> None:  # noqa: N802
        self.guarded(self._post)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/stream":
            return self._stream(_endless(), threading.Event())
        self.guarded(lambda: self._json({"host": host_name(self.headers.get("Host"))}))

    def _post(self) -> None:
        body = self._body()
        if body is not None:
            self._json({"bytes": len(str(body.get("sql", "")).encode())})


def _endless():
    """As fast as it is asked: a source far faster than any reader (a busy view's rows)."""
    while True:
        drawn[0] += 1
        yield "row", {"pad": "x" * EVENT_BYTES}


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def _ask(port: int, request: bytes) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head, "the connection closed without an answer"
    return int(head.split()[1]), body.decode()


def _post(body: bytes, length: str | None = None) -> bytes:
    return (f"POST /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: "
            f"{len(body) if length is None else length}\r\n\r\n").encode() + body


@pytest.mark.parametrize("request_bytes, status", [
    (_post(b'{"sql": "SELECT 1"}'), HTTPStatus.OK),
    (_post(b"{}", length="\u00b2".encode().decode("latin-1")), HTTPStatus.BAD_REQUEST),   # `²`: a digit to isdigit
    (_post(b"[" * 200_000 + b"]" * 200_000), HTTPStatus.BAD_REQUEST),                     # deeper than json goes
    (_post(json.dumps({"sql": "SELECT \ud800"}).encode()), HTTPStatus.BAD_REQUEST),       # a lone surrogate
    (b"GET /x HTTP/1.1\r\nHost: [\r\nConnection: close\r\n\r\n", HTTPStatus.OK),
])
def test_a_malformed_request_gets_a_status_and_a_line(server, request_bytes, status):
    got, body = _ask(server, request_bytes)
    assert got == status, body
    if status != HTTPStatus.OK:
        assert json.loads(body)["error"]


def test_a_reader_that_stops_reading_holds_a_bounded_number_of_events(server):
    """The events a stream draws from its source while its reader reads nothing stop at its
    backlog plus what the sockets' buffers hold (issue 65: a slow reader's events were queued
    without bound), and the stream ends when the reader goes."""
    drawn[0] = 0
    conn = socket.create_connection(("127.0.0.1", server), timeout=10)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    conn.sendall(b"GET /stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert conn.recv(12).startswith(b"HTTP/1.1 200")
    time.sleep(2.0)   # the reader reads nothing more
    stalled = drawn[0]
    time.sleep(1.5)
    assert drawn[0] == stalled > STREAM_BACKLOG, f"{stalled} events drawn, then {drawn[0]}"
    assert stalled * EVENT_BYTES < 32 * 1024 * 1024, f"{stalled} events of {EVENT_BYTES} bytes held"
    conn.close()

"""The dashboard's HTTP handler under generated requests (issue 65): every request a client can
send — any method, path, query string, header and body, with a token or without — is answered
with a status line (no 500, never a connection closed unanswered), and the dashboard serves on
after them. A seeded generator; the real handler on a real MDR, no placement service (a query
submitted is answered 503)."""

from __future__ import annotations

import json
import random
import socket

import pytest

from services.auth import Security, mint_token
from services.dashboard import Dashboard

ROUTES = ["/", "/index.html", "/static/app.js", "/static/../dashboard.py", "/static/%2e%2e/x", "/metrics",
          "/api/me", "/api/snapshot", "/api/prometheus-targets", "/api/results", "/api/results?view=",
          "/api/results?query=", "/api/queries", "/api/queries/", "/api/explain", "/api/login", "/api/logout",
          "/nowhere", "//", "/api/../api/me", "*"]
TEXTS = ["", " ", "x", "\x00", "\udcff", "\u00b2", "\ud800", "%00", "%ff%fe", "[", "]", "a" * 9000, "' OR 1=1 --",
         "SELECT tag_id FROM rfid_stream", "SELECT count(*) FROM rfid_stream GROUP BY WINDOW(3 seconds)",
         "9" * 400, "-1", "1e400", "nan", "99999999999999 days", "door1.smoothed_rfid_stream", "null"]


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 3 else 4)
    return [lambda: rng.choice(TEXTS), lambda: rng.randint(-2**70, 2**70),
            lambda: rng.random() * 10.0 ** rng.randint(0, 300), lambda: None,
            lambda: [_value(rng, depth + 1) for _ in range(rng.randrange(3))],
            lambda: {rng.choice(["sql", "token", "since", "until", "x"]): _value(rng, depth + 1)
                     for _ in range(rng.randrange(4))},
            lambda: "[" * rng.randrange(1, 5000)][kind]()


def _request(rng: random.Random, token: str) -> bytes:
    method = rng.choices(["GET", "POST", "DELETE", "PUT", "BREW"], [8, 8, 2, 1, 1])[0]
    path = rng.choice(ROUTES) + rng.choice(["", "", "", rng.choice(TEXTS).encode("utf-8", "surrogatepass").hex(),
                                            "?" + rng.choice(TEXTS), "?view=" + rng.choice(TEXTS)[:50]])
    body = json.dumps(_value(rng), ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass") \
        if rng.random() < 0.8 else bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
    headers = {"Host": "localhost" if rng.random() < 0.85 else rng.choice(["127.0.0.1:1", "[", "evil.example",
                                                                             "a" * 5000, ""]),
               "Content-Length": rng.choice([str(len(body))] * 4 + ["0", "-1", "\u00b2", "abc", "99999999999"]),
               "Connection": "close"}
    choice = rng.random()
    if choice < 0.5:
        headers["Authorization"] = f"Bearer {token}"
    elif choice < 0.7:
        headers["Authorization"] = rng.choice(["Bearer ", "Bearer hifi_x", "Basic eA==", rng.choice(TEXTS)[:100]])
    if rng.random() < 0.3:
        headers["Cookie"] = rng.choice(["hifi_session=" + rng.choice(TEXTS)[:100], "=;;=", "a" * 3000])
    if rng.random() < 0.15:
        headers["Origin"] = rng.choice(["http://localhost", "null", "http://evil.example", "[", ""])
    head = f"{method} {path.replace(' ', '%20')} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1", "replace") + b"\r\n" + body


def _status(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while b"\r\n" not in answer:
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1."), f"no answer to {request[:300]!r}: {answer[:200]!r}"
    return int(answer.split()[1])


@pytest.fixture()
def dashboard(mdr, servers, tmp_path):
    board = Dashboard(mdr, servers.bootstrap, Security(str(tmp_path)))
    board.serve("127.0.0.1:0")
    yield board
    board.close()


def test_every_generated_request_is_answered_and_the_dashboard_serves_on(dashboard, mdr):
    port = int(dashboard.url.rstrip("/").rsplit(":", 1)[1])
    token = mint_token(mdr, "root", ("admin",))
    rng = random.Random(65)
    statuses: dict[int, int] = {}
    for _ in range(400):
        request = _request(rng, token)
        status = _status(port, request)
        assert status != 500, f"500 for {request[:300]!r}"
        statuses[status] = statuses.get(status, 0) + 1
    assert {200, 400, 401, 404, 503} <= set(statuses), statuses   # the generator reaches the handler's paths
    assert _status(port, b"GET /api/me HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "
                   + token.encode() + b"\r\nConnection: close\r\n\r\n") == 200

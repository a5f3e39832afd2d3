"""The dashboard's HTTP plumbing (services.dashboard serves the pages and the API on it): JSON
answers and errors, bounded request bodies, server-sent event streams, the security headers of
every answer, and the host and origin checks (its server, bounded, is services.http_server's)."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("hifi.dashboard")

MAX_BODY_BYTES = 1 << 20   # a query's text is at most 64 KiB (glue.limits); this leaves room
KEEPALIVE_S = 5.0   # a comment line this often finds an event stream's client that left
STREAM_BACKLOG = 16   # events queued for a stream's reader: a slower one makes its events wait, memory bounded


# every answer: scripts, styles and connections from this server only (the page has no inline
# script or style), never framed, types as declared, no referrer to elsewhere
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def loopback(host: str) -> bool:
    """Whether listening on `host` keeps the dashboard on this machine.

    >>> [loopback(h) for h in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "", "dashboard")]
    [True, True, True, False, False, False]
    """
    return host in LOCAL_HOSTS


def allowed_hosts(listen_host: str, advertise_host: str = "", extra: str = "") -> frozenset[str]:
    """The host names a request may ask for (its `Host`, the port aside): the advertised and listened
    names, the loopback names, and `extra` (comma-separated, HIFI_DASHBOARD_HOSTS). A name outside
    them is a page of another site whose name was pointed at this server (DNS rebinding): its
    requests would pass as same-origin.

    >>> sorted(allowed_hosts("0.0.0.0", "dashboard", "ops.example.com"))
    ['127.0.0.1', '::1', 'dashboard', 'localhost', 'ops.example.com']
    """
    names = {advertise_host, *LOCAL_HOSTS, *(n.strip() for n in extra.split(","))}
    if listen_host not in ("", "0.0.0.0", "::"):
        names.add(listen_host)
    return frozenset(n.lower() for n in names if n)


def host_name(host: str | None) -> str:
    """The name of a `Host` header, without its port.

    >>> host_name("Dashboard:8470"), host_name("[::1]:80"), host_name("localhost"), host_name("[")
    ('dashboard', '::1', 'localhost', '')
    """
    try:
        return urlsplit(f"//{host or ''}").hostname or ""
    except ValueError:   # not a host name at all (`[`): no host this server answers to
        return ""


def same_origin(origin: str | None, host: str | None, fetch_site: str | None = None) -> bool:
    """Whether a request may change something: sent by no browser (no Origin, no Sec-Fetch-Site),
    or by a page whose origin is this server's (`Origin`'s host:port is the `Host` asked for, and
    the browser does not call it cross-site)."""
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return bool(parts.scheme in ("http", "https") and parts.netloc and host) and parts.netloc.lower() == host.lower()


class JsonExchange(BaseHTTPRequestHandler):
    """A request answered in JSON or as a stream of server-sent events."""

    timeout = 60   # seconds a socket may stall (a body promised and never sent must not hold a thread)
    protocol_version = "HTTP/1.1"
    stopping = threading.Event()   # set when the server stops: its event streams end

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        log.debug("dashboard: " + format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, value: Any, status: int = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json({"error": message}, status)

    def guarded(self, answer: Callable[[], None]) -> None:
        """Answer the request; what its content makes fail (a value out of range, text that is not
        text) is a 400 naming the problem, never a connection closed without an answer."""
        try:
            answer()
        except (ValueError, UnicodeError, OverflowError, RecursionError) as exc:
            log.info("dashboard: a malformed request (%s): %s", self.path[:200], exc)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._error(HTTPStatus.BAD_REQUEST, f"a malformed request: {' '.join(str(exc).split())[:200]}")

    def _body(self) -> dict | None:
        """The request's JSON object; None after answering 400 / 413 to a malformed request (a
        missing, negative or non-numeric Content-Length would block a read until the client
        hangs up)."""
        text = self.headers.get("Content-Length")
        keep_open, self.close_connection = self.close_connection, True   # until the body is read, where
        # the next request would start is unknown
        if text is None or not text.strip().isascii() or not text.strip().isdigit():   # `²` is a digit too
            self._error(HTTPStatus.BAD_REQUEST, "the request needs a Content-Length of 0 or more bytes")
            return None
        length = int(text)
        if length > MAX_BODY_BYTES:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request body is at most {MAX_BODY_BYTES} bytes")
            return None
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, RecursionError):   # not JSON, or nested deeper than the parser goes
            body = None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the request body must be a JSON object")
            return None
        self.close_connection = keep_open
        return body

    def _stream(self, events: Iterator[tuple[str, Any]], stop: threading.Event) -> None:
        """Server-sent events until the client goes away (then `stop` is set, which ends `events`).
        A comment line every KEEPALIVE_S finds a client that left while nothing was sent."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        pending: queue.Queue = queue.Queue(maxsize=STREAM_BACKLOG)   # a slow reader slows its events

        def put(event) -> bool:   # noqa: ANN001
            """Queue an event for the reader, waiting while its backlog is full; False: it left."""
            while not stop.is_set():
                with contextlib.suppress(queue.Full):
                    pending.put(event, timeout=1)
                    return True
            return False

        def pump() -> None:
            try:
                for event in events:
                    if not put(event):
                        break
            except Exception as exc:  # noqa: BLE001 - reported to the page, not raised into a dead thread
                put(("failure", {"error": str(exc)}))
            finally:
                put(None)

        threading.Thread(target=pump, name="dashboard-sse", daemon=True).start()
        try:
            self.wfile.write(b"retry: 2000\n\n")
            self.wfile.flush()
            while not self.stopping.is_set():
                try:
                    event = pending.get(timeout=KEEPALIVE_S)
                except queue.Empty:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                if event is None:
                    break
                name, data = event
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            stop.set()

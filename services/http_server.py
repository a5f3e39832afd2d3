"""A threaded HTTP server that holds a bounded number of threads (the dashboard's and every
service's /metrics): at most `max_connections` connections are served at once, one more is
answered 503 and closed, and a client that hangs up early is logged, not printed as a trace. Its
TLS variant does each handshake in the connection's own thread."""

from __future__ import annotations

import contextlib
import logging
import ssl
import sys
import threading
from http.server import ThreadingHTTPServer

log = logging.getLogger("hifi.http")


class BoundedServer(ThreadingHTTPServer):
    """A connection is served by a thread of its own, at most `max_connections` at once: one more
    is answered 503 and closed, so connections opened and left idle hold a bounded number of
    threads (each for its handler's socket timeout at most). A client that hangs up before its
    answer is written is logged, not printed to stderr as a trace (socketserver's default)."""

    max_connections = 128
    request_queue_size = 128   # connections the kernel holds until accepted (socketserver's 5 overflowed in bursts)

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 (socketserver's)
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(self.max_connections)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            log.debug("http: %d connections open, %s refused", self.max_connections, client_address)
            self.refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def refuse(self, request) -> None:
        """Answer a connection beyond the limit: 503, try again shortly."""
        with contextlib.suppress(OSError):
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
                            b"Connection: close\r\n\r\n")

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            log.debug("http: %s left before its answer: %s", client_address, error)
        else:
            log.warning("http: a request from %s failed: %r", client_address, error, exc_info=True)


class TLSServer(BoundedServer):
    """Over TLS: each connection's handshake in its own thread (a client that never finishes one
    holds only that thread, for `handshake_timeout_s` at most)."""

    context: ssl.SSLContext
    handshake_timeout_s = 60.0

    def refuse(self, request) -> None:
        """A connection beyond the limit is closed (its TLS not yet begun: no answer it could read)."""

    def finish_request(self, request, client_address) -> None:
        request.settimeout(self.handshake_timeout_s)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:   # plain HTTP, or no handshake: nothing to answer
            log.debug("http: no TLS from %s: %s", client_address, exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()

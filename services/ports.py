"""A free TCP port on this machine, for a server started here (the embedded Redis and broker, a
test's or a benchmark's own)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

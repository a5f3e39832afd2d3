"""The embedded default: a private Redis server and Apache Kafka broker on free loopback ports.

Used when `HIFI_REDIS_URL` / `HIFI_KAFKA_BOOTSTRAP` are not set. Both servers are children of
this process, live in a temporary directory, and are stopped (and their ports freed) on exit.
Redis runs in protected mode behind a password generated for the run (its URL carries it; shown
redacted, `redacted_url`). The broker (services.kafka_broker) takes SASL_SSL clients with SCRAM
users only; while it runs, this process's clients (and the processes it starts) are its admin
through the HIFI_KAFKA_* variables (wire.kafka.config.client_security), and every other user has the
rights services.kafka_acls gives it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from glue.topology import Topology
from services import kafka_acls, kafka_broker, kafka_setup
from services.ports import free_port
from wire.errors import HiFiError
from wire.kafka import clients, config


class EmbeddedError(HiFiError, RuntimeError):
    """An embedded server could not be started; the message says what to install or check."""


def _wait_for_port(port: int, proc: subprocess.Popen, name: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmbeddedError(f"{name} exited with code {proc.returncode} during start-up")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise EmbeddedError(f"{name} did not accept connections on port {port} within {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@dataclass
class EmbeddedServers:
    """Handles to the embedded Redis and broker; `redis_url` and `bootstrap` are what clients use."""

    redis_url: str = ""
    bootstrap: str = ""
    workdir: str = ""
    broker: kafka_broker.Broker | None = None   # started here (not HIFI_KAFKA_BOOTSTRAP's): stopped with these
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _environ_before: dict[str, str | None] = field(default_factory=dict)
    kafka_passwords: dict[str, str] = field(default_factory=dict)   # the embedded broker's users (authorize)

    @property
    def own_broker(self) -> bool:
        return self.broker is not None

    def start_broker(self) -> None:
        """Start the embedded broker and make this process's Kafka clients its admin."""
        self.broker = start_broker(self.workdir)
        self._procs.append(self.broker.proc)
        self.bootstrap = self.broker.bootstrap
        for key, value in self.broker.client_environment().items():
            self._environ_before.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    @property
    def pids(self) -> set[int]:
        """The processes of the embedded servers (benchmarks leave their CPU out)."""
        return {proc.pid for proc in self._procs}

    def restart_redis(self, down_s: float = 0.0) -> None:
        """Kill the embedded Redis (SIGKILL, as a crash) and start it again on its port and
        directory after `down_s`: it comes back from its append-only file (drills, tests)."""
        old = next(proc for proc in self._procs if "redis-server" in str(proc.args[0]))
        old.kill()
        old.wait(timeout=5)
        time.sleep(down_s)
        url = urlsplit(self.redis_url)
        _, proc = start_redis(self.workdir, url.port or 0, url.password or "")
        self._procs[self._procs.index(old)] = proc

    def authorize(self, topology: Topology) -> dict[str, str]:
        """Give `topology`'s Kafka users (a new password each, kept for the run) and ACLs to the
        embedded broker (services.kafka_setup, as its admin); returns every user's password. A
        broker not started here (HIFI_KAFKA_BOOTSTRAP) is its operator's: nothing is changed."""
        if self.broker is None:
            return {}
        for user in kafka_acls.users(topology):
            if user != kafka_acls.ADMIN_USER:
                self.kafka_passwords.setdefault(user, secrets.token_urlsafe(18))
        kafka_setup.apply(config.librdkafka_client(self.bootstrap), topology, self.kafka_passwords)
        return dict(self.kafka_passwords)

    def _broker(self) -> subprocess.Popen:
        if self.broker is None:
            raise EmbeddedError("the broker is not the embedded one (HIFI_KAFKA_BOOTSTRAP is set)")
        return self.broker.proc

    def freeze_broker(self) -> None:
        """Stop the embedded broker where it stands (SIGSTOP): to every client it is unreachable,
        and it keeps what it holds."""
        self._broker().send_signal(signal.SIGSTOP)

    def thaw_broker(self) -> None:
        self._broker().send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.own_broker:   # ours to stop: this process's clients of it go first
            clients.drop_clients(self.bootstrap)
            clients.drop_clients(self.bootstrap)
        for proc in reversed(self._procs):
            if self.broker is not None and proc is self.broker.proc:
                kafka_broker.stop(proc)   # a controlled shutdown takes longer than _stop waits
            else:
                _stop(proc)
        self._procs.clear()
        for key, value in self._environ_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._environ_before.clear()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def redacted_url(url: str) -> str:
    """A URL to show: its password replaced by ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


USERS_FILE = "users.acl"


def start_redis(workdir: str, port: int = 0, password: str = "") -> tuple[str, subprocess.Popen]:
    """A Redis on `port` (a free one by default) keeping an append-only file in `workdir`, so a
    Redis restarted on the same directory comes back with the metadata (fsync once a second:
    a crash loses at most the last second's statistics, which the nodes write again); in
    protected mode, behind `password` (a new random one by default), which its URL carries."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise EmbeddedError("redis-server is not installed (Debian: apt-get install redis-server), "
                            "or set HIFI_REDIS_URL to an existing Redis")
    port = port or free_port()
    password = password or secrets.token_urlsafe(24)
    # Users live in an ACL file (the default user, behind `password`, and the services' own users,
    # services.redis_acls, which `ACL SAVE` writes there): a Redis restarted on the directory
    # comes back with them. Its path goes in on stdin, not on the command line.
    users = os.path.join(workdir, USERS_FILE)
    if not os.path.exists(users):
        fd = os.open(users, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"user default on >{password} ~* &* +@all\n")
    proc = subprocess.Popen(
        [binary, "-", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
         "--appendfsync", "everysec", "--dir", workdir, "--protected-mode", "yes"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(f'aclfile "{users}"\n'.encode())
    proc.stdin.close()
    _wait_for_port(port, proc, "redis-server")
    return f"redis://:{password}@127.0.0.1:{port}/0", proc


def start_broker(workdir: str) -> kafka_broker.Broker:
    """The embedded Apache Kafka broker in `workdir` (services.kafka_broker)."""
    try:
        return kafka_broker.start_kafka(workdir, free_port(), free_port())
    except kafka_broker.BrokerError as exc:
        raise EmbeddedError(str(exc)) from exc


@contextlib.contextmanager
def embedded_or_external() -> Iterator[EmbeddedServers]:
    """Yield Redis and Kafka endpoints: external ones from the environment, else embedded ones."""
    servers = EmbeddedServers(redis_url=os.environ.get("HIFI_REDIS_URL", ""),
                              bootstrap=os.environ.get("HIFI_KAFKA_BOOTSTRAP", ""))
    try:
        if not servers.redis_url or not servers.bootstrap:
            servers.workdir = tempfile.mkdtemp(prefix="hifi-embedded-")
        if not servers.redis_url:
            servers.redis_url, proc = start_redis(servers.workdir)
            servers._procs.append(proc)
        if not servers.bootstrap:
            servers.start_broker()
        yield servers
    finally:
        servers.stop()

"""What every `hifi` command shares: its one-line error, its output, how it finds the running
hierarchy (the MDR, the broker, the placement service, the TLS material) and the options many
commands take."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence

from services.embedded import redacted_url
from services.listing import FORMATS
from services.paths import DEFAULT_TOPOLOGY
from wire.errors import HiFiError


class CLIError(HiFiError):
    """A problem the user can fix; printed as one line, no stack trace."""


def say(message: str) -> None:
    print(message, flush=True)


def progress(message: str) -> None:
    print(f"[hifi] {message}", file=sys.stderr, flush=True)


def connect_mdr():
    from mdr.repository import MDR

    url = os.environ.get("HIFI_REDIS_URL") or run_info().get("redis_url")
    if not url:
        raise CLIError("no running hierarchy found: start one with `hifi up`, or set HIFI_REDIS_URL")
    mdr = MDR.connect(url)
    try:
        mdr.r.ping()
    except Exception as exc:  # noqa: BLE001 - any connection failure means the same to the user
        raise CLIError(f"cannot reach the MDR at {redacted_url(url)}: {exc}") from None
    return mdr


def cli_security():
    """The TLS material and token the CLI's calls use: HIFI_TLS_DIR and HIFI_TOKEN, else those of
    the running `hifi up` (its run file: its certificates and its admin token)."""
    from services.auth import Security

    info = run_info()
    tls_dir = os.environ.get("HIFI_TLS_DIR") or info.get("tls_dir", "")
    if not tls_dir:
        raise CLIError("no certificates known: set HIFI_TLS_DIR to the deployment's (`hifi certs DIR` makes them), "
                       "or run `hifi up`")
    return Security(tls_dir, os.environ.get("HIFI_TOKEN") or info.get("token", ""))


def print_listing(args: argparse.Namespace, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A listing command's rows, in the format it was asked for (services.listing)."""
    from services.listing import render

    if rows or args.format == "table":
        say(render(headers, rows, args.format))


def run_info() -> dict:
    from services.hierarchy import run_file

    try:
        with open(run_file()) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def broker_bootstrap() -> str:
    """The broker: HIFI_KAFKA_BOOTSTRAP's, else the running `hifi up`'s, whose credentials (its run
    file's) this process's clients then use."""
    if os.environ.get("HIFI_KAFKA_BOOTSTRAP"):
        return os.environ["HIFI_KAFKA_BOOTSTRAP"]
    info = run_info()
    if not info.get("bootstrap"):
        raise CLIError("no broker known: set HIFI_KAFKA_BOOTSTRAP or run `hifi up`")
    for name, value in info.get("kafka", {}).items():
        os.environ.setdefault(name, value)
    return info["bootstrap"]


def stop_spark() -> None:
    from dsp.spark.session import stop_session

    stop_session()


def placement_stub():
    from protos import hifi_pb2_grpc
    from services.auth import open_channel

    address = os.environ.get("HIFI_PLACEMENT") or connect_mdr().placement_address()
    if not address:
        raise CLIError("no placement service found: start the hierarchy with `hifi up`, or set HIFI_PLACEMENT")
    security = cli_security()
    if not security.token:
        raise CLIError("no token: set HIFI_TOKEN to yours (an admin makes one with `hifi users add`)")
    return hifi_pb2_grpc.PlacementStub(open_channel(address, security))


def rpc_error(exc) -> CLIError:
    return CLIError(exc.details() or str(exc.code()))


def env_or(name: str, fallback: str) -> str:
    return os.environ.get(name) or fallback


def topology_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", default=env_or("HIFI_TOPOLOGY", DEFAULT_TOPOLOGY),
                        help="topology YAML (default $HIFI_TOPOLOGY, else supply-chain)")


def advertise_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--advertise", default=env_or("HIFI_ADVERTISE_HOST", ""),
                        help="the host others reach this service at, recorded in the MDR (default "
                             "$HIFI_ADVERTISE_HOST, else the listen host; set it when listening on 0.0.0.0)")


def format_option(parser: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    """`--format`: the one spelling of how a command prints its rows (services.listing)."""
    parser.add_argument("--format", choices=list(formats), default="table",
                        help="table for people (default), json: a JSON object a line, csv: a header and rows; "
                             "times in JSON and CSV are ISO 8601 with their offset")


def serve_until_stopped(close) -> None:
    """Block until SIGTERM or Ctrl-C, then `close()`: the services' (containers') main loop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        progress("stopping")
        close()

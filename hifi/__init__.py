"""HiFi's Python API for programs and notebooks (`hifi.client`); the `hifi` command is services.cli."""

from hifi.client import Client, ClientError, Query

__all__ = ["Client", "ClientError", "Query"]

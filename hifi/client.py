"""HiFi from a program or a notebook: submit, explain, list and cancel queries on a deployment's
placement service (gRPC, TLS, the caller's token) and read their results as dicts, Arrow record
batches or a pandas DataFrame.

    from hifi import Client
    with Client.connect() as hifi:               # arguments, else HIFI_*, else the running `hifi up`
        frame = hifi.frame("SELECT location, count(DISTINCT tag_id) AS tags FROM rfid_stream "
                           "[range by '2 seconds'] JOIN receptor_locations USING (receptor_id) "
                           "GROUP BY location", limit=10)

A client of the system, as the CLI is: it speaks the placement service's API only (protos) over
TLS trusting the deployment's CA, and knows nothing of the nodes or the MDR (import-linter holds
it so: it imports no server module).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
import pyarrow as pa

from hifi.profiles import profile_settings
from protos import hifi_pb2, hifi_pb2_grpc
from wire.codec import from_value
from wire.errors import HiFiError


class ClientError(HiFiError):
    """What the deployment answered, or why it could not be reached, in one line."""


@dataclass(frozen=True)
class Query:
    """A submitted query: its id, where it was placed, where its results go, its columns, its plan."""

    id: str
    root: str
    result_topic: str
    columns: tuple[str, ...]
    plan: str


def run_file() -> dict:
    """The running `hifi up`'s run file (its placement address, certificates, admin token), or {}."""
    path = os.path.join(os.environ.get("HIFI_HOME", os.path.join(os.path.expanduser("~"), ".hifi")), "run.json")
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


class Client:
    """One connection to a placement service; close it (or use it in a `with`) when done."""

    def __init__(self, address: str, tls_dir: str, token: str) -> None:
        if not address:
            raise ClientError("no placement address: give one, set HIFI_PLACEMENT, or run `hifi up`")
        if not os.path.exists(os.path.join(tls_dir, "ca.pem")):
            raise ClientError(f"no ca.pem in {tls_dir!r}: give the deployment's certificates directory "
                              "(`hifi certs` makes it), set HIFI_TLS_DIR, or run `hifi up`")
        if not token:
            raise ClientError("no token: give yours, or set HIFI_TOKEN (an admin makes one with `hifi users add`)")
        self.address = address
        with open(os.path.join(tls_dir, "ca.pem"), "rb") as fh:
            trusted = grpc.ssl_channel_credentials(root_certificates=fh.read())
        self._channel = grpc.secure_channel(address, grpc.composite_channel_credentials(
            trusted, grpc.access_token_call_credentials(token)))
        self._placement = hifi_pb2_grpc.PlacementStub(self._channel)

    @classmethod
    def connect(cls, address: str = "", tls_dir: str = "", token: str = "", profile: str = "") -> Client:
        """Each setting from the argument, else `profile`'s (hifi.profiles) if one is named, else
        its HIFI_PLACEMENT / HIFI_TLS_DIR / HIFI_TOKEN, else the implicit profile's, else the
        running `hifi up`'s (its run file: admin, on this machine)."""
        chosen = profile_settings(profile)
        found = {**chosen, **os.environ} if not profile else {**os.environ, **chosen}
        local = run_file()
        return cls(address or found.get("HIFI_PLACEMENT") or local.get("placement", ""),
                   tls_dir or found.get("HIFI_TLS_DIR") or local.get("tls_dir", ""),
                   token or found.get("HIFI_TOKEN") or local.get("token", ""))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    # ------------------------------------------------------------ queries

    def submit(self, sql: str, *, replay: bool = False, since_ms: int = 0, until_ms: int = 0,
               readers: Sequence[str] = (), priority: int = 0) -> Query:
        """Place `sql`; its results flow from now on (`since_ms`: from then, the past from the
        archives) until it is cancelled (`until_ms`: only windows starting before then)."""
        reply = self._call(self._placement.Submit, hifi_pb2.SubmitRequest(
            sql=sql, replay=replay, since_ms=since_ms, until_ms=until_ms, readers=list(readers), priority=priority))
        return Query(reply.query_id, reply.root_node, reply.result_topic, tuple(reply.columns), reply.plan)

    def explain(self, sql: str) -> str:
        """The hierarchical plan of `sql`, without running it."""
        return self._call(self._placement.Submit, hifi_pb2.SubmitRequest(sql=sql, explain_only=True)).plan

    def cancel(self, query: Query | str) -> None:
        self._call(self._placement.Cancel, hifi_pb2.QueryRef(query_id=_id(query)))

    def queries(self) -> list[dict[str, Any]]:
        """The running queries the caller may see, each a dict of its fields (query_id, status,
        root, text, output_topic, plan, error)."""
        listed = self._call(self._placement.List, hifi_pb2.Empty())
        return [{field.name: getattr(q, field.name) for field in q.DESCRIPTOR.fields} for q in listed.queries]

    def listing(self, what: str, node: str = "") -> dict[str, list[dict[str, Any]]]:
        """The hierarchy's `what` ("nodes", "views", "motes" or "status", as `hifi <what>` lists
        it; `node`: only its views or motes): table name -> its rows as dicts, times as datetimes.
        Views are those the caller may read; status's queries those it may touch."""
        reply = self._call(self._placement.Listing, hifi_pb2.ListingRequest(what=what, node=node))
        found = json.loads(reply.tables)

        def row(table: dict, values: list) -> dict[str, Any]:
            times = set(table["times"])
            return {header: (datetime.fromtimestamp(v / 1000, UTC) if i in times and v is not None else v)
                    for i, (header, v) in enumerate(zip(table["headers"], values, strict=True))}

        return {name: [row(table, values) for values in table["rows"]] for name, table in found["tables"].items()}

    # ------------------------------------------------------------ results

    def results(self, query: Query | str, limit: int | None = None, timeout: float | None = None
                ) -> Iterator[dict[str, Any]]:
        """`query`'s result rows as they come, each a dict of column -> value (windows as
        datetimes), `limit` of them or for `timeout` seconds (None: until the iterator is closed)."""
        stream = self._placement.Results(hifi_pb2.QueryRef(query_id=_id(query)), timeout=timeout)
        taken = 0
        try:
            for result in ([] if limit == 0 else stream):
                yield dict(zip(result.columns, (from_value(v) for v in result.row.values), strict=True))
                taken += 1
                if limit is not None and taken >= limit:
                    return
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise _error(exc) from None
        finally:
            stream.cancel()

    def batches(self, query: Query | str, rows_per_batch: int = 1000, limit: int | None = None,
                timeout: float | None = None) -> Iterator[pa.RecordBatch]:
        """`query`'s results as Arrow record batches of up to `rows_per_batch` rows each."""
        pending: list[dict[str, Any]] = []
        for row in self.results(query, limit, timeout):
            pending.append(row)
            if len(pending) >= rows_per_batch:
                yield pa.RecordBatch.from_pylist(pending)
                pending = []
        if pending:
            yield pa.RecordBatch.from_pylist(pending)

    def rows(self, sql: str, limit: int, timeout: float | None = None, **options: Any) -> list[dict[str, Any]]:
        """A bounded answer: submit `sql` (with `submit`'s `options`: replay, since_ms, ...), take
        `limit` rows (or what `timeout` gives), cancel it."""
        query = self.submit(sql, **options)
        try:
            return list(self.results(query, limit, timeout))
        finally:
            self.cancel(query)

    def frame(self, sql: str, limit: int, timeout: float | None = None, **options: Any):   # -> pandas.DataFrame
        """`rows` as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows(sql, limit, timeout, **options))

    def _call(self, method, request):   # noqa: ANN001, ANN202 (a stub's method, its reply)
        try:
            return method(request, timeout=120)
        except grpc.RpcError as exc:
            raise _error(exc) from None


def _id(query: Query | str) -> str:
    return query.id if isinstance(query, Query) else query


def _error(exc: grpc.RpcError) -> ClientError:
    return ClientError(f"{exc.code().name}: {exc.details()}")

"""Trust, tried as a hostile caller would, on a live hierarchy: every gRPC method (placement and
node) and every dashboard endpoint without credentials, with a wrong token, with an expired one
and with a principal lacking the right -- each refused with the right status, and nothing changed;
the same calls with the right credentials work. A principal who may read only the core's
`location_reads` gets its rows and is refused the raw stream and the doors' views.

Topology of its own (node ids tr-*): a core over two doors; rfid_stream and the doors' views are
the operators', `location_reads` is also the analyst's."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from urllib.parse import urlsplit

import grpc
import pytest

from base.part_spec import PartSpec
from base.plan import PLAN_FORMAT, RAW_RFID_SOURCE_COLUMNS, Source
from glue.topology import parse_topology
from mdr.repository import now_ms
from protos import hifi_pb2, hifi_pb2_grpc
from services.auth import mint_token, open_channel
from services.http_server import BoundedServer
from services.node import RECONCILE_INTERVAL_S
from services.part_signing import PartSigner
from services.placement import TOPIC_GRACE_MS
from tests.conftest import running_hierarchy, topic_names, wait_for
from wire.codec import from_value
from wire.kafka import consumers
from wire.topics import raw_topic, view_topic

TOPOLOGY = """
name: trust
parameters: {strength_T: 0.2, count_T: 1, t1: 2 seconds, t2: 2 seconds, level_lateness: 2 seconds}
nodes:
  - {id: tr-core, tier: core}
  - {id: tr-a, tier: edge, parent: tr-core}
  - {id: tr-b, tier: edge, parent: tr-core}
receptors:
  - {id: tr-a-r1, kind: rfid, node: tr-a, location: inbound-dock, x: 0.0, y: 0.0}
  - {id: tr-b-r1, kind: rfid, node: tr-b, location: outbound-door, x: 10.0, y: 0.0}
relations:
  - name: receptor_locations
    columns: [[receptor_id, string], [location, string]]
    replicas: ["*"]
stream_readers:
  rfid_stream: [role:operator]
  receptor_stream: [role:operator]
views:
  - tiers: [edge]
    readers: [role:operator]
    sql: |
      CREATE VIEW door_reads AS
      SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by 't1'] GROUP BY receptor_id
  - nodes: [tr-core]
    readers: [analyst, role:operator]
    sql: |
      CREATE VIEW location_reads AS
      SELECT location, sum(reads) AS reads FROM door_reads JOIN receptor_locations USING (receptor_id)
      GROUP BY location
scenario:
  name: trust
  seed: 5
  cycle: 200 ms
  world: {pallets: 3, arrival_gap: 8 seconds, dwell: 8 seconds, repeat: true}
  readers:
    - {id: tr-a-r1, node: tr-a, location: inbound-dock, antennas: 2}
    - {id: tr-b-r1, node: tr-b, location: outbound-door, antennas: 2}
"""
ADMIN_QUERY = "SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id"


@pytest.fixture(scope="module")
def hierarchy(servers, spark, tmp_path_factory):
    for running in running_hierarchy(parse_topology(TOPOLOGY), servers, str(tmp_path_factory.mktemp("state"))):
        running.start_dashboard()
        yield running


@pytest.fixture(scope="module")
def tokens(hierarchy) -> dict[str, str]:
    """A caller of each kind: none, a token nobody issued, an expired one, two users, the admin."""
    mdr = hierarchy.mdr
    return {"none": "", "wrong": "hifi_" + "x" * 43,
            "expired": mint_token(mdr, "analyst", ("user",), expires_ms=int(time.time() * 1000) - 1),
            "analyst": mint_token(mdr, "analyst", ("user",)), "mallory": mint_token(mdr, "mallory", ("user",)),
            "admin": hierarchy.admin_token}


def _node_calls(node: str) -> dict[str, tuple]:
    plan = hifi_pb2.Plan(format=PLAN_FORMAT, body="{}")
    view_part = "view.door_reads"
    return {"Deploy": ("unary", hifi_pb2.DeployRequest(query_id="evil", plan=plan, output_topic="hifi.results.evil")),
            "Cancel": ("unary", hifi_pb2.CancelRequest(query_id=view_part)),
            "Suspend": ("unary", hifi_pb2.QueryRef(query_id=view_part)),
            "Resume": ("unary", hifi_pb2.QueryRef(query_id=view_part)),
            "ListViews": ("unary", hifi_pb2.Empty()), "ListQueries": ("unary", hifi_pb2.Empty()),
            "Status": ("unary", hifi_pb2.Empty())}


def _call(stub, method: str, request, stream: bool = False):
    """The call's answer, or its refusal's (code, details)."""
    try:
        answer = getattr(stub, method)(request, timeout=20)
        return list(answer) if stream else answer
    except grpc.RpcError as exc:
        return exc.code(), exc.details()


def _state(hierarchy) -> tuple:
    """What a refused call must not change: the MDR's queries, views and tokens, every node's parts."""
    mdr = hierarchy.mdr
    return (sorted(q.id for q in mdr.queries()), sorted(v.key for v in mdr.views()),
            {n: sorted((q.query_id, q.status) for q in node.dsp.queries()) for n, node in hierarchy.nodes.items()})


def test_every_grpc_method_refuses_a_caller_without_the_right_and_changes_nothing(hierarchy, tokens):
    admin = hierarchy.placement_stub()
    running = admin.Submit(hifi_pb2.SubmitRequest(sql=ADMIN_QUERY), timeout=60)
    before = _state(hierarchy)
    placement_calls = {"Submit": (hifi_pb2.SubmitRequest(sql=ADMIN_QUERY), False),
                       "Cancel": (hifi_pb2.QueryRef(query_id=running.query_id), False),
                       "List": (hifi_pb2.Empty(), False),
                       "Results": (hifi_pb2.QueryRef(query_id=running.query_id), True),
                       "Listing": (hifi_pb2.ListingRequest(what="status"), False)}
    node_address = hierarchy.nodes["tr-a"].address
    for who in ("none", "wrong", "expired"):
        stub = hierarchy.placement_stub(tokens[who])
        for method, (request, stream) in placement_calls.items():
            code, details = _call(stub, method, request, stream)
            assert code == grpc.StatusCode.UNAUTHENTICATED, (who, method, details)
            assert "bearer token" in details
        node = hifi_pb2_grpc.NodeStub(open_channel(node_address, hierarchy.security.with_token(tokens[who])))
        for method, (_, request) in _node_calls("tr-a").items():
            assert _call(node, method, request)[0] == grpc.StatusCode.UNAUTHENTICATED, (who, method)
    # a user may call no node method, and may not touch another's query
    node = hifi_pb2_grpc.NodeStub(open_channel(node_address, hierarchy.security.with_token(tokens["mallory"])))
    for method, (_, request) in _node_calls("tr-a").items():
        code, details = _call(node, method, request)
        assert code == grpc.StatusCode.PERMISSION_DENIED, method
        assert details.startswith(f"mallory may not call {method}: it needs the ")
    mallory = hierarchy.placement_stub(tokens["mallory"])
    for method in ("Cancel", "Results"):
        request, stream = placement_calls[method]
        code, details = _call(mallory, method, request, stream)
        assert code == grpc.StatusCode.PERMISSION_DENIED and running.query_id in details, (method, details)
    assert _call(mallory, "List", hifi_pb2.Empty()).queries == []   # another's queries are not listed
    status = json.loads(_call(mallory, "Listing", hifi_pb2.ListingRequest(what="status")).tables)
    assert status["tables"]["nodes"]["rows"] and status["tables"]["queries"]["rows"] == []   # health: everyone's
    assert _call(mallory, "Listing", hifi_pb2.ListingRequest(what="users"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    code, details = _call(mallory, "Submit", hifi_pb2.SubmitRequest(sql=ADMIN_QUERY, principal="admin"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "may not ask as 'admin'" in details
    # nothing changed
    assert _state(hierarchy) == before
    assert hierarchy.mdr.token("0" * 64) is None and len(hierarchy.mdr.tokens()) >= 5

    # with the right credentials the same calls work
    assert [q.query_id for q in admin.List(hifi_pb2.Empty()).queries] == [running.query_id]
    operator_node = hifi_pb2_grpc.NodeStub(open_channel(node_address, hierarchy.security))
    assert operator_node.Status(hifi_pb2.Empty(), timeout=20).node == "tr-a"
    assert operator_node.Suspend(hifi_pb2.QueryRef(query_id="view.door_reads"), timeout=60).ok
    assert operator_node.Resume(hifi_pb2.QueryRef(query_id="view.door_reads"), timeout=60).ok
    results = admin.Results(hifi_pb2.QueryRef(query_id=running.query_id), timeout=120)
    assert next(results).query_id == running.query_id
    results.cancel()
    (record,) = hierarchy.mdr.queries()
    parts_topics = {PartSpec.from_json(part, hierarchy.mdr.desired(node)[part], node).topic
                    for node, parts in record.remote.items() for part in parts if part in hierarchy.mdr.desired(node)}
    ended = {running.result_topic, *parts_topics}
    assert parts_topics and ended <= topic_names(hierarchy.bootstrap)
    assert admin.Cancel(hifi_pb2.QueryRef(query_id=running.query_id), timeout=60).ok
    assert hierarchy.mdr.queries() == []
    # its topics go a grace later (the nodes' streams no longer list them, and a batch that read
    # them before the cancel is done: the service waits a minute, the test a few seconds), the views' stay
    cancelled = now_ms()
    time.sleep(5)
    assert hierarchy.placement.delete_retired_topics(cancelled) == []
    assert ended <= topic_names(hierarchy.bootstrap)
    assert set(hierarchy.placement.delete_retired_topics(cancelled + TOPIC_GRACE_MS + 1)) == ended
    assert hierarchy.mdr.retired_topics(cancelled + TOPIC_GRACE_MS + 1) == []
    # their records are gone (a reader still asking about one may have the embedded broker make it
    # again, empty), the standing views' topics are not
    assert all(consumers.topic_bytes(hierarchy.bootstrap, [t]) == 0 for t in ended & topic_names(hierarchy.bootstrap))
    assert view_topic("tr-a", "door_reads") in topic_names(hierarchy.bootstrap)
    # what the cancel ended leaves no metric series and no delivery fence behind
    series = [m for node in hierarchy.nodes.values() for m in node.metrics.registry.collect()
              for sample in m.samples if sample.labels.get("query") == running.query_id]
    assert series == []
    fenced = [node for node in hierarchy.nodes if any(
        field.endswith(running.query_id) for field in hierarchy.mdr.r.hkeys(hierarchy.mdr.k("stats", node, "fence")))]
    assert fenced == []


def test_a_node_runs_only_what_the_placement_service_signed_and_never_a_topic_not_its_own(hierarchy, tokens):
    """Even from a caller with every right, and from the MDR: a part runs only as the placement
    service signed it for that node; a signed part still writes its view's topic or its query's
    results, never another query's (it would forge that query's answers); its id names no path."""
    source = Source((raw_topic("tr-a"),), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
    signer = PartSigner(hierarchy.security.tls_dir)
    node = hifi_pb2_grpc.NodeStub(open_channel(hierarchy.nodes["tr-a"].address,
                                               hierarchy.security.with_token(tokens["admin"])))
    before = _state(hierarchy)
    own = PartSpec("q1", source, "hifi.results.tr-a.q1", "tr-a")
    unsigned = _call(node, "Deploy", own.to_proto())
    assert unsigned[0] == grpc.StatusCode.PERMISSION_DENIED and "is not signed" in unsigned[1]
    elsewhere = replace(own, node="tr-b")   # signed for another node
    moved = _call(node, "Deploy", own.to_proto(signature=signer.sign(elsewhere)))
    assert moved[0] == grpc.StatusCode.PERMISSION_DENIED and "signed for another node" in moved[1]
    forged = replace(own, topic="hifi.results.tr-a.q2")
    wrong_topic = _call(node, "Deploy", forged.to_proto(signature=signer.sign(forged)))
    assert wrong_topic[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "may not write 'hifi.results.tr-a.q2'" in wrong_topic[1]
    other_view = replace(own, query_id="view.v", export_as="v", topic="hifi.view.tr-b.v")
    assert _call(node, "Deploy", other_view.to_proto(signature=signer.sign(other_view)))[0] == \
        grpc.StatusCode.INVALID_ARGUMENT
    outside = replace(own, query_id="..", topic="hifi.results.tr-a..")
    outside_call = _call(node, "Deploy", outside.to_proto(signature=signer.sign(outside)))
    assert outside_call[0] == grpc.StatusCode.INVALID_ARGUMENT and "not a part's name" in outside_call[1]

    # nor stops one but on the placement service's word, said lately, for this node and part
    now = int(time.time() * 1000)
    for request in (hifi_pb2.CancelRequest(query_id="view.door_reads"),
                    hifi_pb2.CancelRequest(query_id="view.door_reads", issued_ms=now,
                                           signature=signer.sign_cancel("tr-b", "view.door_reads", now)),
                    hifi_pb2.CancelRequest(query_id="view.door_reads", issued_ms=now - 600_000,
                                           signature=signer.sign_cancel("tr-a", "view.door_reads", now - 600_000))):
        code, details = _call(node, "Cancel", request)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "the cancel of view.door_reads" in details, details
    assert _state(hierarchy) == before

    hierarchy.mdr.put_desired({"tr-a": {"q1": own.to_json()}})   # as whoever could write the MDR
    try:
        time.sleep(3 * RECONCILE_INTERVAL_S)
        assert _state(hierarchy) == before, "an unsigned desired part is not run"
    finally:
        hierarchy.mdr.drop_desired("tr-a", ["q1"])


def test_an_analyst_reads_its_view_and_is_refused_the_raw_stream_and_the_doors_views(hierarchy, tokens):
    analyst = hierarchy.placement_stub(tokens["analyst"])
    code, details = _call(analyst, "Submit", hifi_pb2.SubmitRequest(sql="SELECT receptor_id FROM rfid_stream"))
    assert code == grpc.StatusCode.PERMISSION_DENIED   # a stream's name is no secret
    assert details.startswith("line 1, column 25: stream 'rfid_stream' is not ") and "'analyst'" in details
    # a view it may not read: answered as one that does not exist
    code, details = _call(analyst, "Submit", hifi_pb2.SubmitRequest(sql="SELECT receptor_id, reads FROM door_reads"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "line 1, column 32: unknown stream or view 'door_reads' (or a view not exported to 'analyst')"
    assert hierarchy.mdr.queries() == []

    reply = analyst.Submit(hifi_pb2.SubmitRequest(sql="SELECT location, reads FROM location_reads"), timeout=60)
    try:
        assert [q.query_id for q in analyst.List(hifi_pb2.Empty()).queries] == [reply.query_id]
        rows = []
        for result in analyst.Results(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=120):
            rows.append(result)
            if len(rows) >= 2:
                break
        found = [dict(zip(r.columns, (from_value(v) for v in r.row.values), strict=True)) for r in rows]
        assert {row["location"] for row in found} <= {"inbound-dock", "outbound-door"}
        assert all(row["reads"] > 0 for row in found), found
        # the admin sees every query; the analyst's own is the analyst's to cancel
        assert reply.query_id in {q.query_id for q in hierarchy.placement_stub().List(hifi_pb2.Empty()).queries}
    finally:
        assert analyst.Cancel(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=60).ok

    # a view a query creates is its principal's and the readers it names
    admin = hierarchy.placement_stub()
    for readers, sql, says in ((["role:root"], "CREATE VIEW x AS SELECT location FROM location_reads", "a role is one"),
                               (["analyst"], "SELECT location FROM location_reads", "CREATE VIEW only")):
        code, details = _call(admin, "Submit", hifi_pb2.SubmitRequest(sql=sql, readers=readers))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and says in details
    created = admin.Submit(hifi_pb2.SubmitRequest(
        sql="CREATE VIEW busy_locations AS SELECT window_start, window_end, location, reads FROM location_reads "
            "WHERE reads > 1",
        readers=["analyst"]), timeout=60)
    try:
        assert next(v for v in hierarchy.mdr.views() if v.name == "busy_locations").readers == \
            ("admin", "role:operator", "analyst")
        explain = hifi_pb2.SubmitRequest(sql="SELECT location FROM busy_locations", explain_only=True)
        assert analyst.Submit(explain, timeout=60).plan
        code, details = _call(hierarchy.placement_stub(tokens["mallory"]), "Submit", explain)
        # answered as a view that does not exist: nothing said of whether it does
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        assert "unknown stream or view 'busy_locations' (or a view not exported to 'mallory')" in details
    finally:
        admin.Cancel(hifi_pb2.QueryRef(query_id=created.query_id), timeout=60)


def _http(url: str, method: str = "GET", body: dict | None = None, token: str = "", cookie: str = "",
          read: bool = True) -> tuple[int, dict, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = cookie
    data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            text = reply.read().decode() if read else ""
            return reply.status, dict(reply.headers), text
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers), refused.read().decode()


def test_every_dashboard_endpoint_refuses_a_caller_without_the_right(hierarchy, tokens):
    base = hierarchy.dashboard.url.rstrip("/")
    admin = hierarchy.placement_stub()
    running = admin.Submit(hifi_pb2.SubmitRequest(sql=ADMIN_QUERY), timeout=60)
    try:
        endpoints = [("GET", "/api/me", None), ("GET", "/api/snapshot", None), ("GET", "/api/stream", None),
                     ("GET", "/api/results?view=tr-a.door_reads", None),
                     ("GET", f"/api/results?query={running.query_id}", None),
                     ("POST", "/api/explain", {"sql": ADMIN_QUERY}), ("POST", "/api/queries", {"sql": ADMIN_QUERY}),
                     ("DELETE", f"/api/queries/{running.query_id}", None)]
        for who in ("none", "wrong", "expired"):
            for method, path, body in endpoints:
                status, _, text = _http(base + path, method, body, tokens[who])
                assert status == 401, (who, method, path, text)
                assert "log in" in json.loads(text)["error"]
            if tokens[who]:
                assert _http(base + "/api/login", "POST", {"token": tokens[who]})[0] == 401
        # a user: not the doors' view, not another's query (neither its rows nor its cancel)
        mallory = tokens["mallory"]
        status, _, text = _http(base + "/api/results?view=tr-a.door_reads", token=mallory)
        assert status == 404 and "no materialized view 'tr-a.door_reads' exported to mallory" in text
        assert _http(base + "/api/results?view=tr-a.no_such_view", token=mallory)[0] == 404   # the same answer
        assert _http(base + f"/api/results?query={running.query_id}", token=mallory)[0] == 403
        status, _, text = _http(base + f"/api/queries/{running.query_id}", "DELETE", token=mallory)
        assert status == 403 and running.query_id in text
        status, _, text = _http(base + "/api/explain", "POST", {"sql": "SELECT receptor_id FROM rfid_stream"},
                                token=mallory)
        assert status == 403 and "stream 'rfid_stream' is not readable by 'mallory'" in text
        snapshot = json.loads(_http(base + "/api/snapshot", token=mallory)[2])
        assert snapshot["queries"] == [] and snapshot["views"] == []    # neither the admin's query nor a view
        assert [q.id for q in hierarchy.mdr.queries()] == [running.query_id]

        # a session from a token: the cookie is HttpOnly and SameSite=Strict, and works like the token
        status, headers, text = _http(base + "/api/login", "POST", {"token": tokens["analyst"]})
        assert status == 200 and json.loads(text) == {"principal": "analyst", "roles": ["user"]}
        cookie = headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        session = cookie.split(";")[0]
        assert json.loads(_http(base + "/api/me", cookie=session)[2])["principal"] == "analyst"
        views = json.loads(_http(base + "/api/snapshot", cookie=session)[2])["views"]
        assert [(v["node"], v["name"]) for v in views] == [("tr-core", "location_reads")]
        # the admin sees every query and view
        snapshot = json.loads(_http(base + "/api/snapshot", token=tokens["admin"])[2])
        assert [q["id"] for q in snapshot["queries"]] == [running.query_id]
        assert {v["name"] for v in snapshot["views"]} >= {"door_reads", "location_reads"}
        # once its token is removed, a session ends at once
        hierarchy.mdr.drop_tokens("analyst")
        assert _http(base + "/api/me", cookie=session)[0] == 401
    finally:
        admin.Cancel(hifi_pb2.QueryRef(query_id=running.query_id), timeout=60)


def test_hifi_up_prints_its_login_link_to_a_terminal_only_and_keeps_it_in_a_file_of_its_owners(tmp_path, monkeypatch):
    import os
    import stat

    from services.cli.run import login_notice

    monkeypatch.setenv("HIFI_HOME", str(tmp_path))
    logged = login_notice("http://127.0.0.1:8470/", "hifi_secret", terminal=False)
    assert "hifi_secret" not in logged and str(tmp_path / "login.url") in logged
    assert (tmp_path / "login.url").read_text() == "http://127.0.0.1:8470/#token=hifi_secret\n"
    assert stat.S_IMODE(os.stat(tmp_path / "login.url").st_mode) == 0o600
    assert login_notice("http://127.0.0.1:8470/", "hifi_secret", terminal=True).endswith("#token=hifi_secret")


def test_the_admin_token_of_a_run_expires(hierarchy):
    from mdr.repository import now_ms
    from services.hierarchy import ADMIN_TOKEN_S
    from wire.identity import token_hash

    record = hierarchy.mdr.token(token_hash(hierarchy.admin_token))
    assert 0 < record.expires_ms - now_ms() <= ADMIN_TOKEN_S * 1000


def _open_stream(base: str, path: str, token: str):
    """(the open connection, its HTTP status) of a GET that streams."""
    host, port = urlsplit(base).netloc.split(":")
    conn = socket.create_connection((host, int(port)), timeout=20)
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return conn, conn.recv(64).decode().split(" ")[1]


def test_a_users_queries_and_result_streams_stop_at_its_quota_and_others_are_still_served(hierarchy, monkeypatch):
    from services.quotas import QUOTAS, Quota

    monkeypatch.setitem(QUOTAS, "user", Quota(queries=1, streams=2))
    # a user of its own: the tests before may have revoked the others' tokens
    analyst = hierarchy.placement_stub(mint_token(hierarchy.mdr, "analyst", ("user",)))
    admin = hierarchy.placement_stub()
    sql = "SELECT location, reads FROM location_reads"
    reply = analyst.Submit(hifi_pb2.SubmitRequest(sql=sql), timeout=60)
    streams = []
    try:
        code, details = _call(analyst, "Submit", hifi_pb2.SubmitRequest(sql=sql))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith("analyst runs 1 queries"), details
        assert [q.id for q in hierarchy.mdr.queries()] == [reply.query_id]

        streams = [analyst.Results(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=120) for _ in range(6)]
        time.sleep(3)
        refused = [s for s in streams if s.done() and s.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
        assert len(refused) == 4 and "2 result streams open" in refused[0].details()
        assert sum(1 for s in streams if not s.done()) == 2, "the streams within the quota stay open"
        # another caller is served meanwhile, at once
        asked = time.monotonic()
        assert reply.query_id in {q.query_id for q in admin.List(hifi_pb2.Empty(), timeout=10).queries}
        assert time.monotonic() - asked < 1.0
        # a stream closed gives its place back
        for stream in streams:
            stream.cancel()

        def first_row():
            streams.append(analyst.Results(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=60))
            try:
                return next(iter(streams[-1]))
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                return None   # the cancelled ones not closed yet

        assert wait_for(first_row, 30, "a stream after the others closed").query_id == reply.query_id

        # the dashboard's streams of a view (placement counts a query's): two open, the third refused
        token = mint_token(hierarchy.mdr, "analyst", ("user",))
        opened = [_open_stream(hierarchy.dashboard.url, "/api/results?view=tr-core.location_reads", token)
                  for _ in range(3)]
        try:
            assert [status for _, status in opened] == ["200", "200", "429"], opened
        finally:
            for conn, _ in opened:
                conn.close()
        # and of the snapshots, a kind of its own (each holds a thread of the dashboard's)
        opened = [_open_stream(hierarchy.dashboard.url, "/api/stream", token) for _ in range(3)]
        try:
            assert [status for _, status in opened] == ["200", "200", "429"], opened
        finally:
            for conn, _ in opened:
                conn.close()
    finally:
        for stream in streams:
            stream.cancel()
        analyst.Cancel(hifi_pb2.QueryRef(query_id=reply.query_id), timeout=60)


def _half_open(channel: grpc.Channel, method: str, stop) -> grpc.Future:
    """A call that sends its headers and never its message (a client stream that never yields),
    as an attacker holding connections open would."""
    def never():
        stop.wait()
        yield from ()
    call = channel.stream_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=lambda b: b)
    return call.future(never(), timeout=60)


@pytest.mark.parametrize("service", ["placement", "node"])
def test_calls_that_never_send_their_message_hold_no_worker_from_a_token_holder(hierarchy, tokens, service):
    """40 unauthenticated calls that send headers and never a message (grpcio gives a call a
    worker while it waits for its message) beside which the admin's call answers within 1 s: the
    token is checked as the call arrives, and a refused call answers at once."""
    if service == "placement":
        address, method = hierarchy.placement_address, "/hifi.Placement/List"
        admin = lambda: hierarchy.placement_stub().List(hifi_pb2.Empty(), timeout=1)   # noqa: E731
    else:
        address, method = hierarchy.nodes["tr-a"].address, "/hifi.Node/Status"
        stub = hifi_pb2_grpc.NodeStub(open_channel(address, hierarchy.security.with_token(tokens["admin"])))
        admin = lambda: stub.Status(hifi_pb2.Empty(), timeout=1)   # noqa: E731
    stop = threading.Event()
    channels = [open_channel(address, hierarchy.security.with_token(tokens[who]))
                for who in ("none", "wrong") for _ in range(20)]
    try:
        held = [_half_open(channel, method, stop) for channel in channels]
        time.sleep(1)   # every one of them arrived
        started = time.monotonic()
        admin()
        assert time.monotonic() - started < 1
        refused = [call.exception() for call in held]
        assert all(isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.UNAUTHENTICATED for e in refused)
    finally:
        stop.set()
        for channel in channels:
            channel.close()


def test_connections_left_idle_hold_a_bounded_number_of_the_dashboards_threads(hierarchy):
    """400 connections opened to the dashboard and never sent a request: the dashboard serves at
    most BoundedServer.max_connections at once (a thread each, for its timeout at most) and
    answers the others 503; once they close, a request is served again."""
    url = urlsplit(hierarchy.dashboard.url)
    before = threading.active_count()
    idle = [socket.create_connection((url.hostname, url.port), timeout=60) for _ in range(400)]
    try:
        time.sleep(3)   # each accepted, given a thread or refused
        assert threading.active_count() - before <= BoundedServer.max_connections + 4
        refused = idle[-1].recv(200)
        assert refused.startswith(b"HTTP/1.1 503"), refused
    finally:
        for connection in idle:
            connection.close()
    status = wait_for(lambda: _http(hierarchy.dashboard.url.rstrip("/") + "/api/me")[0] == 401 or None, 30,
                      "the dashboard answering again")
    assert status


def test_a_view_suspended_and_resumed_has_every_window_as_if_it_had_run_through(hierarchy):
    """An operator suspends a door's view for 7 s and resumes it: on resume the part is first fed
    what its node archived meanwhile, so every window across the pause has its rows, equal to the
    view's SQL evaluated over the agents' readings (before: the windows inside the pause had none,
    and nothing said so)."""
    from edge.agent import JsonlLog
    from glue.analyzer import analyze
    from glue.reference import Reference
    from services.judge import as_ms, same_rows, topic_rows
    from services.placement import load_catalog

    node = hifi_pb2_grpc.NodeStub(open_channel(hierarchy.nodes["tr-a"].address, hierarchy.security))
    topic = view_topic("tr-a", "door_reads")

    def starts() -> list[int]:
        return sorted({as_ms(r["window_start"]) for r in topic_rows(hierarchy.bootstrap, topic)})

    wait_for(lambda: len(starts()) >= 2, 120, "the door's first windows")
    assert node.Suspend(hifi_pb2.QueryRef(query_id="view.door_reads"), timeout=60).ok
    paused_ms = now_ms()
    time.sleep(7)
    assert node.Resume(hifi_pb2.QueryRef(query_id="view.door_reads"), timeout=60).ok
    resumed_ms = now_ms()
    wait_for(lambda: starts()[-1] >= resumed_ms + 4_000 or None, 120, "windows after the resume")
    span = (paused_ms // 2000 * 2000 - 2000, resumed_ms // 2000 * 2000 + 2000)
    got = [(as_ms(r["window_start"]), r["receptor_id"], r["reads"]) for r in topic_rows(hierarchy.bootstrap, topic)
           if span[0] <= as_ms(r["window_start"]) <= span[1]]
    catalog = load_catalog(hierarchy.mdr)
    view = next(v for v in catalog.views if v.name == "door_reads" and v.node == "tr-a")
    reference = Reference.from_log(JsonlLog(hierarchy.readings_path).until(span[1] + 60_000), catalog)
    want = [(r["window_start"], r["receptor_id"], r["reads"]) for r in reference.run(analyze(view.definition, catalog))
            if r["receptor_id"] == "tr-a-r1" and span[0] <= r["window_start"] <= span[1]]
    assert len(want) >= 4 and same_rows(got, want), (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5])

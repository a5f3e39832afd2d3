"""What a service's Redis user may write (services.redis_acls), on the real Redis: a node writes
its own records and what it may adopt, and is refused a token, another node's desired state,
registration or views, and a node it could never adopt; the dashboard writes where it is scraped
only; placement writes everything. The users survive a Redis restart (its ACL file)."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from glue.topology import load_topology
from mdr.repository import MDR, ViewRecord
from services.deploy_names import node_service
from services.paths import DEFAULT_TOPOLOGY
from services.redis_acls import rules_by_user
from wire.identity import TokenRecord

TOPOLOGY = load_topology(DEFAULT_TOPOLOGY)
PREFIX = "hifi-acl-test:"


def _as(servers, admin: MDR, user: str) -> MDR:
    password = secrets.token_urlsafe(16)
    assert admin.set_user(user, password, rules_by_user(TOPOLOGY, PREFIX)[user])
    url = urlsplit(servers.redis_url)
    return MDR.connect(urlunsplit(url._replace(netloc=f"{user}:{password}@{url.hostname}:{url.port}")), PREFIX)


def _view(node: str) -> ViewRecord:
    return ViewRecord("v", node, f"hifi.view.{node}.v", "", "", "{}", (("a", "long"),), ("*",), 1)


def _refused(action) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        action()


def test_each_service_writes_only_its_own_records(servers):
    admin = MDR.connect(servers.redis_url, PREFIX)
    region = _as(servers, admin, node_service("region"))   # it may adopt the warehouse (its child)
    region.register_node("region", "aggregation", "hq", (), "127.0.0.1:1", {}, 1)
    region.heartbeat("region", 5000)
    region.export_view(_view("region"))
    region.set_gauges("region", {"input_rate": 1.0})
    assert region.add_counts("region", "q", 1, {"rows_in": 3})
    region.put_endpoints("node:region", {"grpc": "127.0.0.1:1"})
    region.put_part_states("region", {"q": {"status": "failed"}})
    region.put_round("region", {}, {"input_rate": 2.0}, {"input_rate": 2.0})   # a node's second of statistics
    assert region.claim_adoption("warehouse", "region", ["door1", "door2"])
    region.end_adoption("warehouse")
    assert [n.id for n in region.nodes()] == ["region"] and region.stats("region")["rows_in"] == 3

    _refused(lambda: region.put_token("x" * 64, TokenRecord("mallory", ("admin",), 0)))
    _refused(lambda: region.put_desired({"warehouse": {"q1": "{}"}}))
    _refused(lambda: region.register_node("warehouse", "aggregation", "region", (), "10.0.0.1:1", {}, 1))
    _refused(lambda: region.export_view(_view("warehouse")))
    _refused(lambda: region.set_gauges("hq", {"input_rate": 1.0}))
    _refused(lambda: region.put_round("hq", {}, {"input_rate": 1.0}, {"input_rate": 1.0}))
    _refused(lambda: region.claim_adoption("hq", "region", ["region"]))   # nobody adopts the top
    # nothing shared to rewrite: another node's metrics URL, or its place in the list of nodes
    _refused(lambda: region.put_endpoints("node:hq", {"metrics": "http://evil/"}))
    _refused(lambda: region.r.delete(region.k("node", "hq")))
    _refused(lambda: region.r.delete(region.k("endpoint", "placement")))

    dashboard = _as(servers, admin, "dashboard")
    dashboard.put_endpoints("dashboard", {"http": "http://127.0.0.1:1/"})
    _refused(lambda: dashboard.put_endpoints("node:region", {"metrics": "http://evil/"}))
    assert set(admin.endpoints()) == {"node:region", "dashboard"}
    _refused(lambda: dashboard.put_token("y" * 64, TokenRecord("mallory", ("admin",), 0)))
    placement = _as(servers, admin, "placement")
    placement.put_desired({"warehouse": {"q1": "{}"}})
    assert region.desired("warehouse") == {"q1": "{}"}, "every service reads the whole MDR"
    admin.clear()

"""Who may call what and read what (wire.identity), the certificates (services.certs), and the
planner's readers checks: pure, and files in a temporary directory."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography import x509

from glue.analyzer import analyze
from glue.binder import AccessError
from glue.sql.lexer import SqlError
from glue.standing import topology_catalog
from glue.topology import TopologyError, parse_topology
from services import certs
from wire.identity import (
    METHOD_ROLES,
    Identity,
    IdentityError,
    TokenRecord,
    authorize,
    checked_principal,
    checked_roles,
    new_token,
    readable_by,
    required_role,
    token_hash,
)

USER = Identity("analyst", frozenset({"user"}))
OPERATOR = Identity("olga", frozenset({"operator"}))
SERVICE = Identity("placement", frozenset({"service"}))
ADMIN = Identity("root", frozenset({"admin"}))


def test_each_method_needs_its_role_and_admin_may_call_every_one():
    assert authorize("/hifi.Placement/Submit", USER) == (True, "")
    allowed, why = authorize("/hifi.Node/Deploy", USER)
    assert not allowed and why == "analyst may not call Deploy: it needs the service role"
    assert authorize("/hifi.Node/Status", USER)[0] is False
    assert authorize("/hifi.Node/Status", OPERATOR)[0] and not authorize("/hifi.Node/Deploy", OPERATOR)[0]
    assert authorize("/hifi.Node/Deploy", SERVICE)[0] and authorize("/hifi.Node/Suspend", SERVICE)[0]
    assert all(authorize(method, ADMIN)[0] for method in METHOD_ROLES)
    assert authorize("/hifi.Placement/List", None) == (False, "unauthenticated")


def test_every_rpc_of_the_api_has_a_rule_and_a_new_one_is_closed_until_given_one():
    from protos import hifi_pb2

    methods = {f"/hifi.{service.name}/{method.name}" for service in hifi_pb2.DESCRIPTOR.services_by_name.values()
               for method in service.methods}
    assert methods == set(METHOD_ROLES)
    assert required_role("/hifi.Node/SomethingNew") == "admin"
    assert required_role("/grpc.health.v1.Health/Check") is None


def test_a_query_is_touched_by_its_owner_or_an_operator_only():
    assert USER.may_touch("analyst") and not USER.may_touch("someone")
    assert OPERATOR.may_touch("someone") and ADMIN.may_touch("") and not USER.may_touch("")


def test_readers_admit_by_name_role_or_everyone_and_admin_reads_everything():
    assert readable_by(("*",), "x") and readable_by(("analyst",), "analyst")
    assert readable_by(("role:operator",), "olga", {"operator"}) and not readable_by(("role:operator",), "analyst",
                                                                                    {"user"})
    assert USER.may_read(("analyst", "role:operator")) and not USER.may_read(("role:operator",))
    assert ADMIN.may_read(("nobody",))


def test_a_token_is_stored_only_as_its_hash_and_expires():
    token = new_token()
    assert token.startswith("hifi_") and len(token) > 40 and new_token() != token
    assert token_hash(token) != token and len(token_hash(token)) == 64
    record = TokenRecord("analyst", ("user",), 1_000, expires_ms=5_000)
    assert TokenRecord.from_json(record.to_json()) == record
    assert not record.expired(4_999) and record.expired(5_000)
    assert not TokenRecord("a", ("user",), 1_000).expired(10**15)   # 0: never
    with pytest.raises(IdentityError):
        TokenRecord.from_json('{"principal": "a"}')


def test_readers_a_user_gives_are_checked():
    from wire.identity import checked_readers

    assert checked_readers(["analyst", "role:user", "*", "analyst"]) == ("analyst", "role:user", "*")
    for bad in (["role:root"], ["a b"], [""]):
        with pytest.raises(IdentityError):
            checked_readers(bad)


def test_principals_and_roles_are_checked():
    assert checked_principal("alice@example.com") == "alice@example.com"
    for bad in ("", "*", "role:admin", "a b", "x" * 65):
        with pytest.raises(IdentityError):
            checked_principal(bad)
    assert checked_roles(["user", "operator", "user"]) == ("user", "operator")
    with pytest.raises(IdentityError, match="roles are user, operator, service, admin"):
        checked_roles(["root"])


TOPOLOGY = """
name: readers
parameters: {t1: 2 seconds}
nodes:
  - {id: rd-core, tier: core}
  - {id: rd-a, tier: edge, parent: rd-core}
receptors:
  - {id: rd-a-r1, kind: rfid, node: rd-a}
stream_readers: {rfid_stream: [role:operator]}
views:
  - tiers: [edge]
    readers: [role:operator]
    sql: >-
      CREATE VIEW door_reads AS SELECT receptor_id, count(*) AS reads FROM rfid_stream [range by 't1']
      GROUP BY receptor_id
  - nodes: [rd-core]
    readers: [analyst, role:operator]
    sql: CREATE VIEW all_reads AS SELECT sum(reads) AS reads FROM door_reads GROUP BY receptor_id
"""


def _catalog():
    from glue.standing import standing_views

    topology = parse_topology(TOPOLOGY)
    catalog = topology_catalog(topology)
    catalog.views.extend(s.export for s in standing_views(topology, catalog))
    return catalog


def test_the_planner_refuses_a_stream_or_view_its_principal_may_not_read_at_its_name():
    catalog = _catalog()   # the standing views were planned over the protected stream: the topology may
    assert analyze("SELECT reads FROM all_reads", catalog, USER).source == "all_reads"
    with pytest.raises(AccessError) as refused:
        analyze("SELECT receptor_id FROM rfid_stream", catalog, USER)
    assert str(refused.value) == ("line 1, column 25: stream 'rfid_stream' is not readable by 'analyst' "
                                  "(its readers: role:operator)")
    # a view it may not read is answered as one that does not exist: the answer is no oracle
    with pytest.raises(SqlError) as hidden:
        analyze("SELECT reads FROM door_reads", catalog, USER)
    with pytest.raises(SqlError) as missing:
        analyze("SELECT reads FROM door_readz", catalog, USER)
    assert str(hidden.value) == str(missing.value).replace("door_readz", "door_reads") == \
        "line 1, column 19: unknown stream or view 'door_reads' (or a view not exported to 'analyst')"
    assert type(hidden.value) is type(missing.value) is SqlError
    with pytest.raises(SqlError, match="unknown stream or view 'all_reads'"):
        analyze("SELECT reads FROM all_reads", catalog, Identity("mallory", frozenset({"user"})))
    assert analyze("SELECT receptor_id FROM rfid_stream", catalog, OPERATOR).source == "rfid_stream"
    assert isinstance(AccessError("x", 1, 1), SqlError)   # still a query error with its position


def test_stream_readers_name_raw_streams_only():
    with pytest.raises(TopologyError, match="not a raw stream"):
        parse_topology(TOPOLOGY.replace("stream_readers: {rfid_stream:", "stream_readers: {rfid:"))


def test_certificates_a_ca_once_and_each_service_valid_for_its_names(tmp_path):
    directory = str(tmp_path / "tls")
    written = certs.make_certificates(directory, ["placement", "door1"], ["node-door1"])
    assert [os.path.basename(p) for p in written] == ["ca.pem", "placement.pem", "door1.pem"]
    assert stat.S_IMODE(os.stat(os.path.join(directory, "ca.key")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(directory, "door1.key")).st_mode) == 0o600
    with open(os.path.join(directory, "door1.pem"), "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"door1", "node-door1", "localhost"} <= set(names.get_values_for_type(x509.DNSName))
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    ca = certs.ca_bytes(directory)
    # made again: the same CA (clients keep trusting it), new service certificates (a rotation)
    certs.make_certificates(directory, ["door1"])
    assert certs.ca_bytes(directory) == ca
    with open(os.path.join(directory, "door1.pem"), "rb") as fh:
        assert x509.load_pem_x509_certificate(fh.read()).serial_number != cert.serial_number
    # a service without its own certificate serves the shared one
    certs.ensure_certificates(directory)
    assert certs.server_files(directory, "hq") == certs.server_files(directory, "hifi")


def test_hifi_users_adds_lists_and_removes_tokens_in_the_mdr(mdr, monkeypatch, capsys):
    from services.auth import Authenticator
    from services.cli import main

    monkeypatch.setenv("HIFI_REDIS_URL", mdr.url)
    assert main(["users", "add", "bob", "--role", "operator", "--expires", "1 hours"]) == 0
    token = capsys.readouterr().out.strip()
    identity = Authenticator(mdr).identify(token)
    assert identity == Identity("bob", frozenset({"operator"}))
    assert main(["users", "list"]) == 0
    listing = capsys.readouterr().out
    assert "bob" in listing and "operator" in listing and token not in listing and token_hash(token)[:12] in listing
    assert main(["users", "add", "eve", "--expires", "soon"]) == 2
    assert "not a duration: 'soon'" in capsys.readouterr().err
    assert main(["users", "add", "role:admin"]) == 2
    assert "a principal is a letter" in capsys.readouterr().err
    assert main(["users", "remove", "bob"]) == 0
    assert Authenticator(mdr).identify(token) is None   # at once
    assert main(["users", "remove", "bob"]) == 2


def test_hifi_deploy_secrets_writes_every_secret_privately_and_never_over_an_existing_file(tmp_path, capsys):
    from glue.topology import load_topology
    from services.cli import main
    from services.compose import secret_variables
    from services.paths import DEFAULT_TOPOLOGY

    path = tmp_path / ".env"
    assert main(["deploy", "secrets", "--output", str(path)]) == 0
    values = dict(line.split("=", 1) for line in path.read_text().splitlines() if not line.startswith("#"))
    assert list(values) == secret_variables(load_topology(DEFAULT_TOPOLOGY))
    assert len(set(values.values())) == len(values) and all(len(v) >= 32 for v in values.values())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert main(["deploy", "secrets", "--output", str(path)]) == 2
    assert "exists" in capsys.readouterr().err


def test_the_spark_driver_listens_on_loopback_or_authenticated_and_encrypted():
    from dsp.spark.session import SparkSecretMissing, network_settings

    assert network_settings("local[2]", {}) == {"spark.driver.bindAddress": "127.0.0.1",
                                                "spark.driver.host": "127.0.0.1"}
    with pytest.raises(SparkSecretMissing, match="set HIFI_SPARK_SECRET"):
        network_settings("spark://spark-master:7077", {})
    cluster = network_settings("spark://spark-master:7077", {"HIFI_SPARK_SECRET": "s3cret"})
    assert cluster == {"spark.authenticate": "true", "spark.authenticate.secret": "s3cret",
                       "spark.network.crypto.enabled": "true"}


def test_a_node_on_a_spark_cluster_holds_a_share_of_its_cores_not_all():
    import doctest

    import dsp.spark.session
    from dsp.spark.session import cluster_share

    assert cluster_share("spark://spark-master:7077", {"HIFI_SPARK_CORES_MAX": "1"}) == {"spark.cores.max": "1"}
    assert doctest.testmod(dsp.spark.session).failed == 0


def test_open_health_watches_hold_no_worker_thread_of_a_service(servers, tmp_path):
    """A Watch of grpc health needs no token (orchestrators ask it); it must not hold one of the
    placement service's 16 worker threads while it waits, or 16 strangers stop the service."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from mdr.repository import MDR
    from services.auth import Security, open_channel
    from services.certs import ensure_certificates
    from services.placement_service import start_placement_service

    security = Security(ensure_certificates(str(tmp_path / "tls")))
    service = start_placement_service(MDR.connect(servers.redis_url), servers.bootstrap, security)
    channel = open_channel(service.address, security)   # no token
    try:
        health = health_pb2_grpc.HealthStub(channel)
        # (a deadline each: a watch the service cannot serve fails the test instead of hanging it)
        watches = [health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=20) for _ in range(24)]
        assert all(next(w).status == health_pb2.HealthCheckResponse.SERVING for w in watches)
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        for watch in watches:
            watch.cancel()
    finally:
        channel.close()
        service.close()

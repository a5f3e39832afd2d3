"""Who may read and write which Kafka topics: SCRAM users and ACLs. Pure.

The broker (the embedded one, services.kafka_broker, and compose's `kafka`) takes clients only
over SASL/SCRAM-SHA-512 and denies what no ACL allows; services.kafka_setup creates the users and
applies `acls(topology)` (at `hifi up`, and as compose's `kafka-setup` service).
Principals:
  node-<id>   reads its raw topic and writes its motes' settings (an edge); reads and writes its own
              views and partials and those of the nodes below it (a parent reads its children's
              exports; one adopting a dead child's children reads theirs, and writes a dead child's
              while it runs its parts), writes its own and those nodes' results and its dead letters
  placement   describes every topic (a query starts from the ends its sources have), reads
              results and may delete the views', partials' and results' topics of what a cancel
              ended (services.placement's delete_retired_topics); agents write the edges' raw topics and
              read their control topics; dashboard reads views and dead letters (it checks each
              view's readers before streaming it, as the placement API does)
  operator    reads every topic (for an operator's own tools)
  <principal> a principal a view's readers name reads that view's topic, and nothing else
  admin       the super user kafka-setup acts as (besides the broker's own loopback listener)
A role (`role:user`) grants rights through the API only: to read a topic directly a principal
must be named. A node's topics are named by the node first (`hifi.view.<node>.`, `hifi.rqs.<node>.`,
`hifi.results.<node>.`, wire.topics), so every right on them is a prefix ACL fixed by the topology
(a node writes the topics of every query it runs, and no other node's): the broker needs no ACL
per query, and the placement service no right to change ACLs.
"""

from __future__ import annotations

from dataclasses import dataclass

from glue.topology import Topology
from services.deploy_names import node_service, secret_variable
from wire.topics import control_topic, dead_topic, raw_topic, view_topic

SERVICE_USERS = ("placement", "agents", "dashboard")
OPERATOR_USER = "operator"
ADMIN_USER = "admin"
MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Acl:
    principal: str          # a user name (User:<name> to the broker)
    operation: str          # Read, Write, Create, Describe, Delete
    name: str               # a topic's (or group's) name, or a prefix when `prefixed`
    prefixed: bool = False
    resource: str = "topic"   # or "group": a consumer group (librdkafka's consumers look up theirs)


PROJECT_GROUPS = "hifi-"   # the group ids of the project's own consumers (wire.kafka.ranges, wire.kafka.end_watch)


def groups(user: str) -> list[Acl]:
    """The consumer groups `user` may use: the project's own consumers' (they assign partitions
    and never join, but librdkafka looks their coordinator up) and those named `<user>.…`, for its
    own tools (kcat -G, the console consumer)."""
    return [Acl(user, "Read", PROJECT_GROUPS, True, "group"), Acl(user, "Read", f"{user}.", True, "group")]


def named_readers(topology: Topology) -> list[str]:
    """The principals (not roles, not everyone) that any view's readers or stream_readers name."""
    names = [r for v in topology.views for r in v.readers] + [r for rs in topology.stream_readers.values() for r in rs]
    return sorted({r for r in names if r != "*" and not r.startswith("role:")})


def users(topology: Topology) -> list[str]:
    """Every SCRAM user of the deployment."""
    return [ADMIN_USER, OPERATOR_USER, *SERVICE_USERS, *(node_service(n) for n in topology.nodes),
            *named_readers(topology)]


def password_variable(user: str) -> str:
    """The environment variable holding `user`'s password (compose refuses to start without it)."""
    return secret_variable("KAFKA", user)


def _below(topology: Topology, node: str) -> list[str]:
    """The nodes whose exports `node` may read or, adopting them, write: those under it, and
    those under a node that names it an alternate parent."""
    def under(of: str) -> list[str]:
        return [n for n, spec in topology.nodes.items() if spec.parent == of or of in spec.alternates]
    found: set[str] = set()
    todo = under(node)
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(under(child))
    return sorted(found)


def acls(topology: Topology) -> list[Acl]:
    rules = [Acl("placement", "Describe", "hifi.", True), Acl("placement", "Read", "hifi.results.", True),
             *(Acl("placement", "Delete", f"hifi.{kind}.", True) for kind in ("results", "rqs", "view")),
             Acl("dashboard", "Read", "hifi.view.", True), Acl("dashboard", "Read", "hifi.dead.", True),
             Acl(OPERATOR_USER, "Read", "hifi.", True)]
    for node, spec in topology.nodes.items():
        user = node_service(node)
        if spec.tier == "edge":
            rules += [Acl("agents", "Write", raw_topic(node)), Acl("agents", "Create", raw_topic(node)),
                      Acl(user, "Read", raw_topic(node)), Acl(user, "Create", raw_topic(node)),
                      # the sensor proxy: the node tells its motes, the agents follow
                      Acl(user, "Write", control_topic(node)), Acl(user, "Create", control_topic(node)),
                      Acl("agents", "Read", control_topic(node)), Acl("agents", "Create", control_topic(node))]
        below = _below(topology, node)
        # its own views, partials and results, and those of the nodes below it (it reads their
        # exports, and runs a dead child's parts meanwhile): never another branch's or a parent's
        prefixes = [f"hifi.{kind}.{n}." for n in (node, *below) for kind in ("view", "rqs", "results")]
        rules += [Acl(user, op, prefix, True) for prefix in prefixes for op in ("Read", "Write", "Create")
                  if not (op == "Read" and prefix.startswith("hifi.results."))]
        rules += [Acl(user, op, dead_topic(node)) for op in ("Write", "Create")]
    rules += [rule for user in users(topology) if user != ADMIN_USER for rule in groups(user)]
    for node in topology.nodes:
        for view in topology.views_at(node):
            if view.materialize:
                rules += [Acl(reader, "Read", view_topic(node, view.name)) for reader in view.readers
                          if reader != "*" and not reader.startswith("role:")]
    return rules

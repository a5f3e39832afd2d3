"""The catalog no node can forge and no reader can widen (issue 65): an export is what its MDR key
vouches for, a plan reads only the exports its asker may read, readers fail closed wherever they
enter, and the planner's own names are its own."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from glue.analyzer import analyze_statement, refuse_taken_view_name
from glue.planner import plan_query
from glue.sql.lexer import SqlError
from glue.sql.parser import parse
from glue.topology import TopologyError, parse_topology
from mdr.records import ViewRecord
from tests.catalogs import supply_chain_catalog
from wire.identity import Identity, IdentityError, checked_readers, named_readers
from wire.topics import view_topic

SMOOTHED = "smoothed_rfid_stream"
USER = Identity("ann", frozenset({"user"}))


def _export(node: str, name: str = SMOOTHED, readers: tuple[str, ...] = ("role:operator",)) -> ViewRecord:
    return ViewRecord(name, node, view_topic(node, name), "", "", "", (("tag_id", "string"),), readers, 1)


def test_an_export_a_node_writes_under_its_own_key_naming_anothers_topic_is_ignored(mdr):
    mdr.export_view(_export("door1"))
    forged = {"name": "smoothed_rfid_stream", "node": "door2", "topic": view_topic("door1", SMOOTHED),
              "readers": json.dumps(["*"]), "columns": "[]"}
    mdr.r.sadd(mdr.k("views"), f"door2.{SMOOTHED}")
    mdr.r.hset(mdr.k("view", f"door2.{SMOOTHED}"), mapping=forged)
    # one naming another node than its key's, one without readers, one whose readers are a string
    mdr.r.sadd(mdr.k("views"), "door2.other", "door2.open", "door2.alice")
    mdr.r.hset(mdr.k("view", "door2.other"), mapping={**forged, "name": "other", "node": "door1",
                                                        "topic": view_topic("door1", "other")})
    mdr.r.hset(mdr.k("view", "door2.open"), mapping={"name": "open", "node": "door2",
                                                      "topic": view_topic("door2", "open")})
    mdr.r.hset(mdr.k("view", "door2.alice"), mapping={"name": "alice", "node": "door2", "readers": '"alice"',
                                                       "topic": view_topic("door2", "alice")})
    assert [(v.node, v.name, v.topic) for v in mdr.views()] == [("door1", SMOOTHED, view_topic("door1", SMOOTHED))]
    assert set(mdr.refused_views) == {f"door2.{SMOOTHED}", "door2.other", "door2.open", "door2.alice"}
    mdr.views()
    assert mdr.refused_views[f"door2.{SMOOTHED}"] == 2   # counted every time it is read, logged once


def test_one_readable_export_of_a_name_does_not_open_the_others():
    """door1's smoothed view is the operators'; a second export of the name at door2, open to
    everyone, lets a plain user read door2's, never door1's topic."""
    catalog = supply_chain_catalog()
    door2 = next(v for v in catalog.exports_of(SMOOTHED) if v.node == "door2")
    catalog = replace(catalog, views=[v for v in catalog.views if v is not door2] + [replace(door2, readers=("*",))])
    sql = f"SELECT tag_id FROM {SMOOTHED}"
    plan = plan_query(analyze_statement(parse(sql), catalog.as_read_by(USER), USER, sql),
                      catalog.as_read_by(USER), "q1")
    read = {topic for part in plan.tasks for source in _topics(part.plan) for topic in source}
    assert view_topic("door2", SMOOTHED) in read and view_topic("door1", SMOOTHED) not in read, read
    # without the filter (the tree before), the plan read door1's topic too
    unfiltered = plan_query(analyze_statement(parse(sql), catalog, USER, sql), catalog, "q1")
    assert view_topic("door1", SMOOTHED) in {t for part in unfiltered.tasks for s in _topics(part.plan) for t in s}
    # none readable: answered as a missing view (nothing said of whether it exists)
    closed = replace(catalog, views=[replace(v, readers=("role:operator",)) if v.name == SMOOTHED else v
                                     for v in catalog.views])
    with pytest.raises(SqlError, match=rf"unknown stream or view '{SMOOTHED}' \(or a view not exported to 'ann'\)"):
        analyze_statement(parse(sql), closed.as_read_by(USER), USER, sql)


def _topics(plan) -> list[tuple[str, ...]]:
    found = [plan.topics] if hasattr(plan, "topics") else []
    for name in ("child", "left", "right"):
        if hasattr(plan, name):
            found += _topics(getattr(plan, name))
    for child in getattr(plan, "children", ()) or ():
        found += _topics(child)
    return found


@pytest.mark.parametrize("readers", [[], "alice", None, ["role:opertor"], [""], [3]])
def test_a_standing_views_readers_fail_closed_with_one_line(readers):
    text = ("name: t\nnodes:\n  - {id: hq, tier: core}\nviews:\n  - tiers: [core]\n"
            f"    readers: {json.dumps(readers)}\n    sql: CREATE VIEW v AS SELECT tag_id FROM rfid_stream\n")
    with pytest.raises(TopologyError) as refused:
        parse_topology(text, "t.yaml")
    assert str(refused.value).startswith("line ") and "readers" in str(refused.value), refused.value


def test_a_readers_list_names_someone_and_only_known_roles():
    assert named_readers(["role:operator", "alice", "alice"]) == ("role:operator", "alice")
    assert checked_readers([]) == ()   # a query's extra readers: none beyond its asker and operators
    for bad in ([], "alice", ["role:opertor"]):
        with pytest.raises(IdentityError):
            named_readers(bad)
    with pytest.raises(IdentityError):
        checked_readers("alice")


@pytest.mark.parametrize("name", ["join_0123456789ab", "smooth_q1a2b3c4d", "producer_0123456789ab"])
def test_the_planners_own_names_cannot_be_taken(name):
    sql = f"CREATE VIEW {name} AS SELECT tag_id FROM rfid_stream"
    with pytest.raises(SqlError, match="planner gives"):
        refuse_taken_view_name(parse(sql), supply_chain_catalog())

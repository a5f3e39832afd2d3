"""The names of the data plane's Kafka topics (DESIGN §3). Pure: build them here, never by hand."""

from __future__ import annotations

import re


def raw_topic(edge_node: str) -> str:
    return f"hifi.raw.{edge_node}"


def view_topic(node: str, view: str) -> str:
    return f"hifi.view.{node}.{view}"


def rqs_topic(query_id: str, node: str) -> str:
    """A remote query's partials on `node`: named by the node first, so the broker's ACLs give a
    node (by prefix) the partials it writes and its parent those it reads (services.kafka_acls)."""
    return f"hifi.rqs.{node}.{query_id}"


def part_topic(node: str, query_id: str, export_as: str = "", output_topic: str = "") -> str:
    """Where a query part on `node` writes: the view it exports, else the topic it was given, else
    its remote query's own."""
    return view_topic(node, export_as) if export_as else output_topic or rqs_topic(query_id, node)


def topic_problem(node: str, query_id: str, export_as: str, topic: str) -> str | None:
    """Why part `query_id` on `node` may not write `topic`, or None: a part writes the view it
    exports, else its query's results (or its remote query's own topic), never another's.

    >>> topic_problem("door1", "view.v", "v", "hifi.view.door1.v") is None
    True
    >>> topic_problem("door1", "q1", "", "hifi.results.door1.q1") is None
    True
    >>> topic_problem("door1", "q1", "", "hifi.results.door2.q2")
    "part q1 on door1 may not write 'hifi.results.door2.q2' (its topic is 'hifi.results.door1.q1')"
    """
    own = view_topic(node, export_as) if export_as else results_topic(query_id, node)
    if topic == own or (not export_as and topic == rqs_topic(query_id, node)):
        return None
    return f"part {query_id} on {node} may not write {topic[:120]!r} (its topic is {own!r})"


def results_topic(query_id: str, node: str) -> str:
    """A query's results, written by its final part on `node` (by the node first, as `rqs_topic`)."""
    return f"hifi.results.{node}.{query_id}"


def dead_topic(node: str) -> str:
    return f"hifi.dead.{node}"


def control_topic(edge_node: str) -> str:
    """What an edge node's sensor proxy tells its receptors (wire.receptor_settings)."""
    return f"hifi.control.{edge_node}"


PART_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,199}")


def part_id_problem(query_id: str) -> str | None:
    """Why `query_id` cannot name a query's part on a node (it names the part's checkpoint directory
    and topics), or None. The planner's ids are `q<hex>`, `view.<name>` and `<owner>:<id>`.

    >>> [part_id_problem(i) for i in ("q1a2b3c4d", "view.smoothed_rfid_stream", "door1:q1a2b3c4d")]
    [None, None, None]
    >>> part_id_problem("..")
    "query id '..' is not a part's name (letters, digits and _ . : @ -, no '..', at most 200)"
    >>> part_id_problem("view/../../etc") is not None, part_id_problem("") is not None
    (True, True)
    """
    if PART_ID.fullmatch(query_id) and ".." not in query_id:
        return None
    return f"query id {query_id[:60]!r} is not a part's name (letters, digits and _ . : @ -, no '..', at most 200)"

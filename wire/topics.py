"""The names of the data plane's Kafka topics (DESIGN §3). Pure: build them here, never by hand."""

from __future__ import annotations


def raw_topic(edge_node: str) -> str:
    return f"hifi.raw.{edge_node}"


def view_topic(node: str, view: str) -> str:
    return f"hifi.view.{node}.{view}"


def rqs_topic(query_id: str, node: str) -> str:
    return f"hifi.rqs.{query_id}.{node}"


def part_topic(node: str, query_id: str, export_as: str = "", output_topic: str = "") -> str:
    """Where a query part on `node` writes: the view it exports, else the topic it was given, else
    its remote query's own."""
    return view_topic(node, export_as) if export_as else output_topic or rqs_topic(query_id, node)


def results_topic(query_id: str) -> str:
    return f"hifi.results.{query_id}"


def dead_topic(node: str) -> str:
    return f"hifi.dead.{node}"


def control_topic(edge_node: str) -> str:
    """What an edge node's sensor proxy tells its receptors (wire.receptor_settings)."""
    return f"hifi.control.{edge_node}"

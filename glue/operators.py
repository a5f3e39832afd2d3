"""The views SQL cannot say, as named operators of a topology (`operator:`). Pure.

  qualify    edge   mote_quality: the motes' samples per sampling period with a verdict (faulty,
                    why) and a confidence per mote (base.mote_quality), positions from mote_positions;
                    with `calibration`, values first corrected by each mote's offsets (a relation
                    receptor_id, temperature_offset, humidity_offset)

Every other standing view is HiFi SQL, planned like a user's query (glue.standing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from base.part_spec import PartSpec
from base.plan import RAW_SAMPLE_SOURCE_COLUMNS, BinOp, Col, LookupJoin, Plan, Project, Qualify, Source
from glue.topology import Topology, TopologyError
from wire.topics import raw_topic, view_topic
from wire.windows import duration_ms

CALIBRATED = ("temperature", "humidity")   # the quantities a calibration relation corrects


def _param(topology: Topology, options: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """An option of the view, which may name a deployment parameter (e.g. 'sample_period')."""
    value = options.get(name, default)
    if isinstance(value, str) and value in topology.parameters:
        value = topology.parameters[value]
    if value is None:
        raise TopologyError(f"parameter {name!r} is not set (give it in the view or in 'parameters')")
    return value


def _qualify(topology: Topology, node_id: str, options: Mapping[str, Any]) -> Plan:
    samples: Plan = Source((raw_topic(node_id),), "samples", RAW_SAMPLE_SOURCE_COLUMNS, "ts",
                           duration_ms(options.get("lateness", "1 second")))
    if options.get("calibration"):
        # per-receptor calibration from the MDR: each value minus the mote's known offset
        offsets = tuple((f"{q}_offset", "double") for q in CALIBRATED)
        joined = LookupJoin(samples, str(options["calibration"]), "receptor_id", offsets)
        samples = Project(joined, tuple((name, BinOp("-", Col(name), Col(f"{name}_offset")) if name in CALIBRATED
                                         else Col(name)) for name, _ in RAW_SAMPLE_SOURCE_COLUMNS))
    located = LookupJoin(samples, str(options.get("positions", "mote_positions")), "receptor_id",
                         (("x", "double"), ("y", "double")))
    return Qualify(located, duration_ms(_param(topology, options, "period", "sample_period")))


OPERATORS: dict[str, Callable[[Topology, str, Mapping[str, Any]], Plan]] = {"qualify": _qualify}


def operator_parts(topology: Topology, node_id: str) -> list[PartSpec]:
    """The parts computing the operator views `node_id` exports."""
    return [PartSpec(f"view.{view.name}", OPERATORS[view.operator](topology, node_id, view.options),
                     view_topic(node_id, view.name), node_id, "view", view.name, view.readers, view.definition,
                     priority=view.priority)
            for view in topology.views_at(node_id) if view.operator]

"""The CSAVA views of a topology as node-local plans (clean, smooth, arbitrate, totals). Pure.

Until the HiFi SQL front end exists, each view in a topology names a `stage`; this module builds
that stage's plan over the node's inputs: its raw topic at the edge, its children's exported
views above. The SQL text in the topology (`definition`) is what the plan computes, as the paper
prints it.

  clean      edge   cleaned_rfid_stream: readings with read_strength >= strength_T
  smooth     edge   smoothed_rfid_stream: (receptor, tag) seen >= count_T times in a window
  arbitrate  above  product_counts: each tag once per window, at the receptor that saw it most
                    (ties: smallest receptor id), counted per receptor
  totals     above  location_counts: product counts joined with receptor_locations, per location
  validate   above  stock_alerts: the (window, location) counts outside the range a static
                    relation expects (expected_stock: location, min_tags, max_tags) — an alert stream
  analyze    above  location_trends: per location over long windows (trend_range), the mean,
                    fewest and most tags of its count windows and how many there were
  qualify    edge   mote_quality: the motes' samples per sampling period with a verdict (faulty,
                    why) and a confidence per mote (dsp.mote_quality), positions from mote_positions;
                    with `calibration`, values first corrected by each mote's offsets (a relation
                    receptor_id, temperature_offset, humidity_offset)

A stage's `input` is a view of the node's children, or one the node itself exports earlier in the
topology's list (validate reads the node's own location_counts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dsp.plan import (
    RAW_RFID_SOURCE_COLUMNS,
    RAW_SAMPLE_SOURCE_COLUMNS,
    Aggregate,
    AggSpec,
    BinOp,
    Col,
    Filter,
    Lit,
    LookupJoin,
    Plan,
    Project,
    Qualify,
    Source,
    Window,
    output_columns,
)
from glue.topology import Topology, TopologyError, ViewSpec
from wire.topics import raw_topic, view_topic
from wire.windows import duration_ms

CALIBRATED = ("temperature", "humidity")   # the quantities a calibration relation corrects


@dataclass(frozen=True)
class ViewPlan:
    view: ViewSpec
    plan: Plan
    topic: str


def _param(topology: Topology, options: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """An option of the view, which may name a deployment parameter (e.g. 'strength_T')."""
    value = options.get(name, default)
    if isinstance(value, str) and value in topology.parameters:
        value = topology.parameters[value]
    if value is None:
        raise TopologyError(f"parameter {name!r} is not set (give it in the view or in 'parameters')")
    return value


def _raw_valid(topology: Topology, node_id: str, options: Mapping[str, Any]) -> Plan:
    """Readings of the node's raw topic that pass the read-strength threshold (the clean stage)."""
    source = Source((raw_topic(node_id),), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts",
                    duration_ms(options.get("lateness", "1 second")))
    threshold = float(_param(topology, options, "strength_T", "strength_T"))
    return Filter(source, BinOp(">=", Col("read_strength"), Lit(threshold)))


def _clean(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    return Project(_raw_valid(topology, node_id, options),
                   tuple((c, Col(c)) for c in ("receptor_id", "tag_id", "read_strength", "ts")))


def _smooth(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    range_ms = duration_ms(_param(topology, options, "range", "t1"))
    slide_ms = duration_ms(_param(topology, options, "slide", "t2")) if "slide" in options else range_ms
    count_t = int(_param(topology, options, "count_T", "count_T"))
    return Aggregate(_raw_valid(topology, node_id, options), ("receptor_id", "tag_id"),
                     (AggSpec("reads", "count"),), BinOp(">=", Col("reads"), Lit(count_t)),
                     Window(range_ms, slide_ms))


def _arbitrate(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    smoothed = inputs(str(options.get("input", "smoothed_rfid_stream")))
    winner = Aggregate(smoothed, ("window_start", "window_end", "tag_id"),
                       (AggSpec("receptor_id", "argmax", "receptor_id", "reads"),))
    return Aggregate(winner, ("window_start", "window_end", "receptor_id"), (AggSpec("tags", "count"),))


def _totals(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    counts = inputs(str(options.get("input", "product_counts")))
    located = LookupJoin(counts, "receptor_locations", "receptor_id", (("location", "string"),))
    return Aggregate(located, ("window_start", "window_end", "location"), (AggSpec("tags", "sum", "tags"),))


def _validate(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    counts = inputs(str(options.get("input", "location_counts")))
    relation = str(options.get("relation", "expected_stock"))
    key, value = str(options.get("key", "location")), str(options.get("value", "tags"))
    low, high = str(options.get("low", "min_tags")), str(options.get("high", "max_tags"))
    spec = next((r for r in topology.relations if r.name == relation), None)
    if spec is None:
        raise TopologyError(f"view stage validate: no static relation {relation!r} in the topology")
    types = dict(spec.columns)
    if not {key, low, high} <= set(types):
        raise TopologyError(f"view stage validate: relation {relation!r} needs columns {key}, {low}, {high}")
    joined = LookupJoin(counts, relation, key, ((low, types[low]), (high, types[high])))
    outside = Filter(joined, BinOp("OR", BinOp("<", Col(value), Col(low)), BinOp(">", Col(value), Col(high))))
    return Project(outside, tuple((c, Col(c)) for c in ("window_start", "window_end", key, value, low, high)))


def _analyze(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
    counts = inputs(str(options.get("input", "location_counts")))
    range_ms = duration_ms(_param(topology, options, "range", "trend_range"))
    key, value = str(options.get("key", "location")), str(options.get("value", "tags"))
    return Aggregate(counts, (key,), (AggSpec(f"mean_{value}", "avg", value), AggSpec(f"fewest_{value}", "min", value),
                                      AggSpec(f"most_{value}", "max", value), AggSpec("windows", "count")),
                     None, Window(range_ms, range_ms))


def _qualify(topology: Topology, node_id: str, options: Mapping[str, Any], inputs: Callable) -> Plan:
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


STAGES: dict[str, Callable[..., Plan]] = {"clean": _clean, "smooth": _smooth, "arbitrate": _arbitrate,
                                          "totals": _totals, "validate": _validate, "analyze": _analyze,
                                          "qualify": _qualify}


ChildViews = Callable[[str, str], tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]


def view_plans(topology: Topology, node_id: str, child_views: ChildViews) -> list[ViewPlan]:
    """Plans of the views `node_id` exports. `child_views(node, view)` gives (topics, columns) of a
    view exported by the node's children, as the MDR lists it."""
    plans: list[ViewPlan] = []
    for view in topology.views_at(node_id):
        builder = STAGES.get(view.stage)
        if builder is None:
            raise TopologyError(f"view {view.name!r}: unknown stage {view.stage!r} (one of {', '.join(STAGES)})")

        def inputs(name: str) -> Plan:
            # Each input topic's progress markers bound its window starts: a window closes here as
            # soon as every child has passed it (dsp.engine), with no slack per level.
            own = next((p for p in plans if p.view.name == name and p.view.materialize), None)
            if own is not None:
                topics, columns = (own.topic,), output_columns(own.plan)
            else:
                topics, columns = child_views(node_id, name)
            return Source(topics, "rows", columns, "window_start", 0, markers=True)

        plans.append(ViewPlan(view, builder(topology, node_id, view.options, inputs),
                              view_topic(node_id, view.name)))
    return plans

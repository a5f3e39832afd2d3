"""The rules of re-parenting (glue.adoption), the output bounds that split a topic between two
writers (dsp.runtime.bounds), and how a move is shown (services.health.moves): pure."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from base.part_spec import PartSpec
from base.plan_json import to_json
from dsp.runtime.bounds import OutputBounds, bounded_column
from glue.adoption import HANDBACK_SLACK_MS, TailBatch, adopt_after_ms, adopter, handback_at, resume_point
from glue.standing import standing_views
from glue.topology import load_topology, parse_topology
from mdr.repository import Adoption
from services.adoption import adopted_id, parts_of
from services.certs import make_certificates
from services.health import moves
from services.part_signing import PartSigner, PartVerifier, Refusals
from services.paths import DEFAULT_TOPOLOGY
from wire.topics import rqs_topic, view_topic

TOPOLOGY = """
name: fluid
parameters: {adopt_after: 3 seconds}
nodes:
  - {id: hq, tier: core}
  - {id: region, tier: aggregation, parent: hq}
  - {id: w1, tier: aggregation, parent: region}
  - {id: w2, tier: aggregation, parent: region}
  - {id: d1, tier: edge, parent: w1, alternates: [w2]}
  - {id: d2, tier: edge, parent: w1}
  - {id: d3, tier: edge, parent: w2}
"""


def topology():
    return parse_topology(TOPOLOGY)


def test_the_first_live_alternate_a_child_names_adopts_else_the_nearest_live_ancestor():
    t = topology()
    everyone = set(t.nodes)
    assert adopter(t, "w1", everyone - {"w1"}) == "w2"                  # d1 names w2
    assert adopter(t, "w1", everyone - {"w1", "w2"}) == "region"       # w2 dead too: the nearest ancestor
    assert adopter(t, "w1", everyone - {"w1", "w2", "region"}) == "hq"
    assert adopter(t, "w2", everyone - {"w2"}) == "region"             # no child of w2 names an alternate
    assert adopter(t, "w1", set()) is None                             # nobody lives
    assert adopter(t, "d1", everyone - {"d1"}) is None                 # an edge's readings reach only it
    assert adopter(t, "hq", everyone - {"hq"}) is None                 # the core has no ancestor
    assert adopt_after_ms(t) == 3000
    assert adopt_after_ms(parse_topology(TOPOLOGY.replace("parameters: {adopt_after: 3 seconds}", ""))) == 10_000


def test_the_resume_point_is_past_every_promise_and_every_row_already_written():
    assert resume_point([]) == 0
    assert resume_point([TailBatch(10_000, ()), TailBatch(0, (10_000, 12_000)), TailBatch(0, (8_000,))]) == 12_001
    assert resume_point([TailBatch(0, (4_000,)), TailBatch(20_000, ())]) == 20_000


def test_the_hand_back_lies_ahead_of_the_clock_and_of_where_the_adopter_began():
    assert handback_at(1_000_000, {}) == 1_000_000 + HANDBACK_SLACK_MS
    assert handback_at(1_000_000, {"a": 2_000_000, "b": -1}) == 2_000_000


def ms(value: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(value / 1000, dt.UTC)


@given(st.lists(st.integers(0, 100), max_size=30), st.integers(0, 100), st.integers(0, 100))
def test_two_writers_bounded_at_one_boundary_emit_every_window_exactly_once(starts, resume, boundary):
    """The adopter [resume, boundary) and the returned node [boundary, ...): together every
    window from the resume point on, once (the dead node emitted those before it)."""
    rows = [(ms(s * 1000), "r1", 1) for s in starts]
    columns = ["window_start", "receptor_id", "reads"]
    adopter_rows = OutputBounds("window_start", resume * 1000, boundary * 1000).keep(rows, columns)
    returned_rows = OutputBounds("window_start", boundary * 1000).keep(rows, columns)
    # (a resume point past the boundary: the node came back before the adopter owed anything)
    expected = [r for r in rows if r[0] >= ms(min(resume, boundary) * 1000)]
    assert sorted(adopter_rows + returned_rows) == sorted(expected)


def test_markers_never_promise_past_the_boundary_until_the_adopter_has_drained():
    adopter_side = OutputBounds("window_start", 0, 50_000)
    returned = OutputBounds("window_start", 50_000, None, 50_000)
    assert adopter_side.cap(80_000) == 50_000 and returned.cap(80_000) == 50_000
    assert adopter_side.cap(40_000) == 40_000
    assert not adopter_side.drained(40_000) and adopter_side.drained(50_000)
    returned.marker_cap_ms = None   # the adopter drained
    assert returned.cap(80_000) == 80_000
    assert bounded_column(["window_start", "x"]) == "window_start"
    assert bounded_column(["tag_id", "__ts"]) == "__ts"
    assert bounded_column(["tag_id"]) is None


def test_a_move_names_where_the_children_went_and_where_the_parts_run():
    clock = str
    found = moves({"w1": Adoption("w1", "w2", 5, ("d1", "d2"), {})}, clock)
    assert found == {"w1": ("w2", "parts at w2 since 5"), "d1": ("w2", "moved to w2 (w1 dead)"),
                     "d2": ("w2", "moved to w2 (w1 dead)")}
    back = moves({"w1": Adoption("w1", "w2", 5, ("d1",), {}, handback_ms=9)}, clock)
    assert back["w1"] == ("w2", "parts at w2; takes them back from 9")
    drained = moves({"w1": Adoption("w1", "w2", 5, ("d1",), {}, handback_ms=9, drained_ms=10)}, clock)
    assert drained == {"w1": ("w2", "taking its parts back from w2")}


def test_a_dead_nodes_parts_are_its_standing_tasks_and_its_desired_query_parts_writing_its_topics(tmp_path):
    topology = load_topology(DEFAULT_TOPOLOGY)
    standing = standing_views(topology)
    mine = [task for view in standing for task in view.tasks if task.node == "warehouse"]
    assert mine, "the warehouse runs standing parts"
    query_plan = mine[0].plan
    make_certificates(str(tmp_path))
    signer = PartSigner(str(tmp_path))
    final = PartSpec("q1-final", query_plan, rqs_topic("q1-final", "warehouse"), "warehouse",
                     start_offsets={"t:0": 5})
    view = PartSpec("view.mine", query_plan, view_topic("warehouse", "mine"), "warehouse", export_as="mine")
    desired = {   # as the placement writes parts; one written by whoever else could write the MDR is not adopted
        "q1-final": final.to_json(signer.sign(final)), "view.mine": view.to_json(signer.sign(view)),
        "q2-final": json.dumps({"plan": to_json(query_plan), "topic": rqs_topic("q2-final", "warehouse")})}
    node = SimpleNamespace(id="w2", standing=standing, topology=topology, verifier=PartVerifier(str(tmp_path)),
                           refusals=Refusals("w2"),
                           mdr=SimpleNamespace(desired=lambda owner: desired if owner == "warehouse" else {}))
    parts = parts_of(node, "warehouse")
    assert [(p.query_id, p.topic) for p in parts[:len(mine)]] == [(t.query_id, t.topic) for t in mine]
    assert [(p.query_id, p.topic, p.start_offsets) for p in parts[len(mine):]] == [
        ("q1-final", rqs_topic("q1-final", "warehouse"), {"t:0": 5}),
        ("view.mine", view_topic("warehouse", "mine"), {})]
    assert adopted_id("warehouse", "view.x") == "warehouse:view.x"

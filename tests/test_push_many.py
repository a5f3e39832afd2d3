"""A batch of several topics pushed at once (engine `push_many`) equals each topic pushed in turn.

A shared reader's micro-batch holds many children's topics; the runtime hands a part all the
topics it reads in one `push_many` (an aggregate folds and emits once, not once a topic). For
every part of generated plans (tests/test_equivalence.py's grammar: the standing chain's parts,
whose parents read both edges' views, and each query's own), every round's batches go both ways
into twin evaluators: the rows each returns and the state each keeps must agree after every round
(doubles to 1e-9: one group-by sums in another order than several). The last raw batch brings
readings late by then, so the late bounds per topic are compared too.
"""

from __future__ import annotations

import copy

import pyarrow as pa
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from base.plan_schema import output_columns, sources
from dsp.bottom_up import pushed
from dsp.operators.aggregate import AggregateOp
from dsp.operators.build import build
from dsp.operators.core import Operator
from dsp.operators.topic_batch import TOPIC_COLUMN, TopicBatch
from dsp.operators.tree import takes_whole
from glue.analyzer import analyze
from glue.planner import plan_query
from glue.sql.lexer import SqlError
from tests.test_engine import _ts, raw_batch, view_batch
from tests.test_equivalence import (
    CATALOG,
    START_MS,
    close,
    evaluator_state,
    queries,
    readings,
    run_bottom_up,
    same_table,
    standing_tasks,
)
from tests.test_spark_partials import late_too, weighted


class ManyAtOnce:
    """run_bottom_up's push: each topic in turn (returned), and the same batches at once into a
    twin (`push_many`) and, as one table with each row's topic (a shared reader's batch), into
    another (`push_tagged`: an aggregate over views takes it whole)."""

    def __init__(self) -> None:
        self.twins: dict[tuple[int, str], Operator] = {}
        self.many = 0    # pushes of several topics compared
        self.whole = 0   # of which an aggregate took whole

    def __call__(self, root: Operator, batches: list[tuple[str, pa.Table]]) -> list[pa.Table | None]:
        if not batches:   # a view over an operator's (mote quality's), which these runs do not feed
            return pushed(root, batches)
        twins = {how: self.twins.setdefault((id(root), how), copy.deepcopy(root)) for how in ("many", "tagged")}
        outs = pushed(root, batches)
        found = [out for out in outs if out is not None]
        want = pa.concat_tables(found, promote_options="default") if found else None
        for how, twin in twins.items():
            got = twin.push_many(batches) if how == "many" else twin.push_tagged(one_table(batches))
            assert same_table(got, want), (how, [t for t, _ in batches], got, want)
            assert close(evaluator_state(twin), evaluator_state(root)), (how, [t for t, _ in batches], twin, root)
        several = len({topic for topic, table in batches if table.num_rows}) > 1
        self.many += several
        self.whole += several and isinstance(root, AggregateOp) and takes_whole(root.child)
        return outs


def one_table(batches: list[tuple[str, pa.Table]]) -> TopicBatch:
    """Batches of one shape (a shared reader's: children's views) as one table, each row with its
    topic; batches of several shapes (a raw topic's two readers) are never one reader's: as they are."""
    topics = list(dict.fromkeys(topic for topic, _ in batches))
    if len({table.schema for _, table in batches}) != 1 or len(topics) < 2:
        return TopicBatch(batches[0][1], topics) if len(batches) == 1 else Pieces(batches)
    tagged = [table.append_column(TOPIC_COLUMN, pa.array([topic] * table.num_rows, pa.string()))
              for topic, table in batches]
    return TopicBatch(pa.concat_tables(tagged), topics)


class Pieces(TopicBatch):
    """Batches that are not one reader's, handed as they are."""

    def __init__(self, batches: list[tuple[str, pa.Table]]) -> None:
        super().__init__(batches[0][1], [])
        self.__dict__["pieces"] = batches


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sql=queries(), seed=st.integers(0, 3))
def test_a_batch_of_several_topics_pushed_at_once_equals_each_topic_pushed_in_turn(sql, seed):
    try:
        plan = plan_query(analyze(sql, CATALOG), CATALOG, "q")
    except SqlError:
        reject()
    # the whole standing chain: its parents read both edges' views (several topics a batch)
    tasks = [*standing_tasks(), *[(task.topic, task.plan) for task in plan.tasks]]
    both = ManyAtOnce()
    run_bottom_up(tasks, readings(seed), raw=late_too(weighted if seed % 2 else raw_batch), batches=3, push=both)
    assert both.many, "no part took a batch of several topics"
    assert both.whole, "no aggregate took a batch of several topics whole"


def test_rows_a_child_sends_behind_its_own_promise_are_late_against_the_bound_before_their_topic():
    """The one case where each topic's own bound matters: door2 promised 8 s, door1 had promised
    2 s; a batch brings door1's promise of 10 s, then door2's rows of [4 s, 6 s). In turn, those
    rows meet the bound min(10, 8) = 8 s: late. At once, and as one table, they must meet the same bound."""
    plan = plan_query(analyze("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
                              "GROUP BY receptor_id", CATALOG), CATALOG, "q")
    root = next(task for task in plan.tasks if task.node == "warehouse")
    door1, door2 = sorted(topic for source in sources(root.plan) for topic in source.topics)
    columns = output_columns(next(task.plan for task in plan.tasks if task.topic == door1))
    at = START_MS
    first = [(door1, view_batch(columns, None, at + 2_000)), (door2, view_batch(columns, None, at + 8_000))]
    stale = [(door1, view_batch(columns, None, at + 10_000)),
             (door2, view_batch(columns, [(_ts(at + 4_000), _ts(at + 6_000), "door2-r1", 3)]))]
    in_turn, at_once, whole = build(root.plan, {}), build(root.plan, {}), build(root.plan, {})
    for batches in (first, stale):
        pushed(in_turn, batches), at_once.push_many(batches), whole.push_tagged(one_table(batches))
    assert in_turn.late_rows() == at_once.late_rows() == whole.late_rows() == 1
    assert evaluator_state(in_turn) == evaluator_state(at_once) == evaluator_state(whole)

"""The planner: a bound query (glue.analyzer) to its hierarchical plan, as ordered passes. Pure.

Each pass takes a `Planning` and returns the next one; `PLAN_PASSES` is the order, and
`plan_query` runs them. What the placement service knows only from the outside world comes in
as values: the query id, the root it is pinned to, and the time it answers from (`start_ms`, the
submission's or a `--since`) and until. A live query's start is taken only once the service has
read its inputs' ends, and the ends are those of the topics the plan reads: the service plans it
once without a start, reads the ends, and `start_from` applies the start to that one plan (the
passes that read the start come last: `START_PASSES`).

>>> from glue.analyzer import analyze
>>> from tests.catalogs import supply_chain_catalog
>>> catalog = supply_chain_catalog()
>>> query = analyze("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '10 seconds'] "
...                 "GROUP BY receptor_id", catalog)
>>> plan = plan_query(query, catalog, "q1")
>>> plan.placement.root, [(part.node, part.role) for part in plan.tasks]
('warehouse', [('door1', 'producer'), ('door2', 'producer'), ('warehouse', 'final')])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from base.plan import Changes
from base.plan_schema import output_columns, window_of
from glue.catalog import Catalog
from glue.logical_query import LogicalQuery
from glue.rewrite.distribute import DistributedPlan, Rollup, answering_from, build_parts, rollups_for
from glue.rewrite.placement import Placement, place
from glue.rewrite.selectivity import Estimate, order_terms
from glue.sql.lexer import SqlError


@dataclass(frozen=True)
class Planning:
    """A query on its way to a plan: what the passes so far found."""

    query: LogicalQuery
    catalog: Catalog
    query_id: str
    at: str | None = None            # the root it is pinned to (a topology's standing view)
    naive: bool = False              # the lag benchmark's baseline
    start_ms: int | None = None      # it answers windows (rows) from then on
    until_ms: int | None = None      # ... and starting before then
    now_ms: int | None = None        # with start_ms: a query over the past (its answers from the archives)
    estimates: tuple[Estimate, ...] = ()
    placement: Placement | None = None
    rollups: Mapping[str, Rollup] = field(default_factory=dict)   # producers that read a running view instead
    plan: DistributedPlan | None = None


def order_where_terms(planning: Planning) -> Planning:
    """The WHERE's terms, most selective first, from the receptors' histograms (a stream join's
    inputs are ordered each when it is built).

    >>> from glue.analyzer import analyze
    >>> from tests.catalogs import supply_chain_catalog
    >>> catalog = supply_chain_catalog()
    >>> query = analyze("SELECT * FROM rfid_stream WHERE tag_id = 'x'", catalog)
    >>> order_where_terms(Planning(query, catalog, "q")).estimates   # not over sensor_stream: as written
    ()
    """
    if planning.query.stream_join is not None:
        return planning
    query, estimates = order_terms(planning.query, planning.catalog)
    return replace(planning, query=query, estimates=tuple(estimates))


def place_root(planning: Planning) -> Planning:
    """Where it runs: the lowest common ancestor of the nodes its data comes from, or its pin (a
    stream join's inputs and root are placed when it is built).

    >>> from glue.analyzer import analyze
    >>> from tests.catalogs import supply_chain_catalog
    >>> catalog = supply_chain_catalog()
    >>> query = analyze("SELECT * FROM rfid_stream WHERE receptor_id = 'door1-r1'", catalog)
    >>> place_root(Planning(query, catalog, "q")).placement.root
    'door1'
    """
    if planning.query.stream_join is not None:
        return planning
    if planning.naive and planning.query.arbitration is not None:
        raise SqlError("the naive baseline does not plan arbitration")
    return replace(planning, placement=place(planning.query, planning.catalog, planning.at))


def reuse_running_views(planning: Planning) -> Planning:
    """The producers whose partials a running view holds already (same node, a finer grouping and
    panes, every partial it needs, no row it keeps left out: glue.rewrite.reuse): they roll that
    view up instead of reading the stream again. Before the build: a part's topic is named after
    its plan, and its parent's plan names that topic (a stream join's inputs are matched when it
    is built).

    >>> from glue.analyzer import analyze
    >>> from tests.catalogs import supply_chain_catalog
    >>> catalog = supply_chain_catalog()
    >>> query = analyze("SELECT count(*) AS n FROM rfid_stream [range by '4 seconds']", catalog)
    >>> reuse_running_views(place_root(Planning(query, catalog, "q"))).rollups   # no view runs yet
    {}
    """
    if planning.query.stream_join is not None:
        return planning
    assert planning.placement is not None
    return replace(planning, rollups=rollups_for(planning.query, planning.catalog, planning.query_id,
                                                 planning.placement, planning.naive))


def build(planning: Planning) -> Planning:
    """Every node's part, bottom up (glue.rewrite.distribute): producers (or their rollups),
    merges, the root's; a part whose running twin (same name, same plan) exists is marked reused."""
    return replace(planning, plan=build_parts(planning.query, planning.catalog, planning.query_id, planning.placement,
                                              list(planning.estimates), planning.naive, planning.at, planning.rollups))


def answer_from(planning: Planning) -> Planning:
    """With `start_ms`: the root drops what started before it (and from `until_ms` on), every
    window join joins only rows from it on; with `now_ms` too, a query over the past, answered
    from the nodes' archives (SqlError for a span that is not one).

    >>> from glue.analyzer import analyze
    >>> from tests.catalogs import supply_chain_catalog
    >>> catalog = supply_chain_catalog()
    >>> query = analyze("SELECT * FROM rfid_stream WHERE receptor_id = 'door1-r1'", catalog)
    >>> answer_from(Planning(query, catalog, "q", start_ms=10, until_ms=5, now_ms=20))
    Traceback (most recent call last):
    ...
    glue.sql.lexer.SqlError: a query over the past needs a time since before now and an until after it
    """
    if planning.start_ms is None:
        return planning
    past = planning.now_ms is not None
    if past and (planning.start_ms > planning.now_ms or
                 (planning.until_ms is not None and planning.until_ms <= planning.start_ms)):
        raise SqlError("a query over the past needs a time since before now and an until after it")
    assert planning.plan is not None
    plan = answering_from(planning.plan, planning.start_ms, planning.until_ms)
    return replace(planning, plan=replace(plan, from_archive=True) if past else plan)


def emit_changes(planning: Planning) -> Planning:
    """EMIT CHANGES: the root's rows, whole windows already, become each key's starts and ends
    there (base.plan.Changes): what has to see every window of a key runs where they all are.

    >>> from glue.analyzer import analyze
    >>> from tests.catalogs import supply_chain_catalog
    >>> catalog = supply_chain_catalog()
    >>> query = analyze("SELECT receptor_id, count(*) AS n FROM rfid_stream [range by '10 seconds', "
    ...                 "slide by '5 seconds'] GROUP BY receptor_id HAVING count(*) > 100 EMIT CHANGES", catalog)
    >>> root = plan_query(query, catalog, "q1").tasks[-1].plan
    >>> type(root).__name__, root.keys, root.slide_ms
    ('Changes', ('receptor_id',), 5000)
    """
    if planning.query.changes is None:
        return planning
    assert planning.plan is not None
    final = planning.plan.tasks[-1]
    window = window_of(final.plan)
    if window is None:
        raise SqlError("EMIT CHANGES is for windowed rows: this query's answer has no windows")
    changed = replace(final, plan=Changes(final.plan, planning.query.changes, window.slide_ms))
    return replace(planning, plan=replace(planning.plan, tasks=[*planning.plan.tasks[:-1], changed]))


def type_check(planning: Planning) -> Planning:
    """Every part's plan type-checks before anything is deployed (PlanError names the operator)."""
    assert planning.plan is not None
    for part in planning.plan.tasks:
        output_columns(part.plan)
    return planning


# The passes, in order: each reads what the earlier ones found.
# the passes that read the start, last: a live query's start is applied to its one plan (start_from)
START_PASSES: tuple[Callable[[Planning], Planning], ...] = (answer_from, type_check)
PLAN_PASSES: tuple[Callable[[Planning], Planning], ...] = (order_where_terms, place_root, reuse_running_views, build,
                                                           emit_changes, *START_PASSES)


def plan_query(query: LogicalQuery, catalog: Catalog, query_id: str, *, at: str | None = None, naive: bool = False,
               start_ms: int | None = None, until_ms: int | None = None,
               now_ms: int | None = None) -> DistributedPlan:
    """`query`'s hierarchical plan (see Planning for the arguments); SqlError when it cannot be
    planned."""
    planning = Planning(query, catalog, query_id, at, naive, start_ms, until_ms, now_ms)
    for planning_pass in PLAN_PASSES:
        planning = planning_pass(planning)
    assert planning.plan is not None
    return planning.plan


def start_from(plan: DistributedPlan, catalog: Catalog, start_ms: int, until_ms: int | None = None) -> DistributedPlan:
    """A live query's plan (made without a start) answering from `start_ms` until `until_ms`: the
    START_PASSES over it, so it is planned once however its start is learnt."""
    assert plan.start_ms is None, "a plan has one start"
    planning = Planning(plan.query, catalog, plan.query_id, start_ms=start_ms, until_ms=until_ms, plan=plan)
    for planning_pass in START_PASSES:
        planning = planning_pass(planning)
    assert planning.plan is not None
    return planning.plan

"""The hierarchical plan of a query: one node-local plan per node of the root's subtree. Pure.

    smooth     (adaptive windows) an edge node's readings, filtered, through adaptive smoothing
    producer   reads the source (a raw topic, or a child-exported view), joins static relations,
               filters, and emits tumbling pane partials (aggregates) or the selected rows
    merge      a node between the root and the producers: merges its children's panes per pane
               (or passes rows through), so each level sends one row per pane and key upward
    join       a window join's, at the root: joins its inputs' selections (each input a producer
               up to there); the final part reads the joined rows
    final      the root: assembles range/slide windows from panes, finishes the aggregates,
               applies HAVING, and projects the select list; with arbitration a second root
               query ("window" -> "final") runs the contest over the windowed counts

Producer, merge and join outputs are exported as views named after a hash of their plan, so a
second query that needs the same partial stream (or joined rows) reuses it instead of deploying it
again (the shared view infrastructure). Every parent reads each child as its own stream with
progress markers, so it closes a window as soon as the slowest child has passed it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from base.part_spec import PartSpec
from base.plan import (
    EVENT_TIME,
    JOIN_OLDEST,
    JOIN_TIME,
    RAW_RFID_SOURCE_COLUMNS,
    SMOOTH_COLUMNS,
    TRIAGE_COLUMNS,
    Aggregate,
    AggSpec,
    BinOp,
    Changes,
    Col,
    Filter,
    Func,
    Lit,
    LookupJoin,
    Match,
    Plan,
    Project,
    Smooth,
    Source,
    Window,
    WindowJoin,
    expr_columns,
)
from base.plan_schema import event_time_column, output_columns, raw_stream_plan, sources
from glue.catalog import Catalog, ExportedView
from glue.logical_query import LogicalQuery
from glue.rewrite import join_order
from glue.rewrite.join_inputs import input_query
from glue.rewrite.part_names import PartNames
from glue.rewrite.partials import split_all
from glue.rewrite.placement import Placement, place_join
from glue.rewrite.reuse import subsuming
from glue.rewrite.selectivity import Estimate, order_terms
from glue.sql.lexer import SqlError
from wire.topics import raw_topic, results_topic, view_topic
from wire.windows import duration_ms, pane_of

WINDOW_BOUNDS = (("window_start", Col("window_start")), ("window_end", Col("window_end")))
# The topology's parameters `lateness` (how late a raw reading may come: its stream's watermark) and
# `level_lateness` (what a parent waits for its children's rows), when it does not set them
LATENESS, LEVEL_LATENESS = "1 second", "2 seconds"
Rollup = tuple[Plan, ExportedView]   # a producer's rollup over a running view's partials, and that view


@dataclass
class DistributedPlan:
    query_id: str
    query: LogicalQuery
    placement: Placement
    tasks: list[PartSpec] = field(default_factory=list)   # bottom up: children before parents
    start_ms: int | None = None   # answers windows (rows) starting here on; None: since the sources began
    until_ms: int | None = None   # and before this; None: for as long as it runs
    from_archive: bool = False    # a query over the past: its parts are fed the nodes' archives first
    archive_begins: dict[str, int] = field(default_factory=dict)   # its nodes whose archives begin after it
    archive_gaps: dict[str, tuple[int, int]] = field(default_factory=dict)   # nodes that failed to archive some
    uses: list[tuple[str, str]] = field(default_factory=list)   # (node, query id) of other views its parts read
    estimates: list[Estimate] = field(default_factory=list)      # its WHERE's terms, in evaluation order
    join_rates: dict[str, float | None] = field(default_factory=dict)   # a join's inputs' estimated rows/s

    @property
    def result_topic(self) -> str:
        return self.tasks[-1].topic

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in output_columns(self.tasks[-1].plan)]

    def topics_read(self) -> list[str]:
        return sorted({topic for task in self.tasks for source in sources(task.plan) for topic in source.topics})

    def explain(self) -> str:
        q = self.query
        lines = [f"query {self.query_id}: root {self.placement.root}, producers {', '.join(self.placement.producers)}"]
        if q.stream_join is not None:
            lines.append(f"  join {q.stream_join.describe()}: at {self.placement.root}")
            lines += join_order.explain(q.stream_join, self.join_rates)
        if q.window is not None:
            lines.append(f"  window {q.window.describe()}, panes {pane_of(q.window).describe()}")
        if q.pattern is not None:
            steps = ", ".join(("NOT " if s.negated else "") + (s.names[0] if len(s.names) == 1 else
                                                                f"AND({', '.join(s.names)})") for s in q.pattern.steps)
            within = f" within {q.pattern.within_ms / 1000:g} s" if q.pattern.within_ms else ""
            by = f", partition by {', '.join(q.pattern.partition)}" if q.pattern.partition else ""
            lines.append(f"  pattern SEQ({steps}){within}{by}: matched at {self.placement.root}")
        if self.estimates:
            lines.append("  filter, most selective first (the motes' recent values): "
                         + ", ".join(e.describe() for e in self.estimates))
        if self.start_ms is not None:
            how = "the nodes' archives, then live" if self.from_archive else "its start"
            until = f" until {_iso(self.until_ms)}" if self.until_ms is not None else ""
            what = "windows" if q.is_aggregate else "rows"
            lines.append(f"  answers {what} from {_iso(self.start_ms)}{until} ({how})")
        for node, begins in sorted(self.archive_begins.items()):
            lines.append(f"  warning: {node}'s archive begins at {_iso(begins)}: windows before lack what it took in")
        for node, (first, last) in sorted(self.archive_gaps.items()):
            lines.append(f"  warning: {node} could not archive batches of events from {_iso(first)} to {_iso(last)}: "
                         "windows then may lack what it took in")
        for task in reversed(self.tasks):
            what = "reuses view" if task.reused else ("exports view" if task.export_as else "writes")
            target = task.export_as or task.topic
            lines.append(f"  {task.node:<12} {task.role:<8} {what} {target} -> {task.topic}")
        for node, query_id in self.uses:
            lines.append(f"  {node:<12} {'':<8} rolls up view {query_id.removeprefix('view.')}")
        return "\n".join(lines)


class _Builder:
    def __init__(self, query: LogicalQuery, catalog: Catalog, query_id: str, placement: Placement,
                 naive: bool = False, join: Source | None = None, rollups: Mapping[str, Rollup] | None = None
                 ) -> None:
        self.q, self.catalog, self.query_id, self.placement = query, catalog, query_id, placement
        self.join = join    # a stream join's joined rows: what its root reads instead of a source
        self.rollups = rollups or {}   # producers whose partials a running view holds (rollups_for)
        self.nodes = placement.path_nodes(catalog)
        self.uses: list[tuple[str, str]] = []     # (node, query id) of running views the parts read
        self.smoothing: dict[str, PartSpec] = {}  # each producer's smoothing part, made with its plan
        self.naive = naive
        self.pane = (query.window if naive else pane_of(query.window)) if query.window is not None else None
        self.lateness_ms = duration_ms(catalog.parameter("lateness") or LATENESS)
        self.level_lateness_ms = duration_ms(catalog.parameter("level_lateness") or LEVEL_LATENESS)
        # each node's running views, looked through for every part (a scan of all of them per part
        # took half of a 1 000-node plan)
        self.names = PartNames()
        self.running: dict[str, list[ExportedView]] = defaultdict(list)
        for view in catalog.views:
            self.running[view.node].append(view)
        self.children: dict[str, list[str]] = defaultdict(list)   # the tree's, indexed once (Catalog.children scans)
        for info in sorted(catalog.nodes.values(), key=lambda n: n.id):
            if info.id in self.nodes:
                self.children[info.parent].append(info.id)

    # ------------------------------------------------------------ leaves

    def source(self, node: str) -> Plan:
        q = self.q
        if self.join is not None:
            return self.join
        if q.smoothing is not None:
            return Source((self.smoothed(node).topic,), "rows", SMOOTH_COLUMNS, "window_start", 0, True,
                          Window(q.smoothing.epoch_ms, q.smoothing.epoch_ms))
        if q.source_kind == "stream":
            read = raw_stream_plan(q.source, raw_topic(node), self.lateness_ms)
            return replace(read, sample_ms=q.sample_ms) if q.sample_ms else read   # sensor_stream only (analyzer)
        view = next(v for v in self.catalog.exports_of(q.source) if v.node == node and v.topic)
        return Source((view.topic,), "rows", view.columns, q.event_time, 0, True, view.window)

    def smoothed(self, node: str) -> PartSpec:
        """The node's readings that WHERE keeps, through adaptive smoothing: a task of its own on
        the edge node (its rows are stamped with their epoch, and an aggregate over them needs a
        watermark on that stamp, which only a stream read anew carries). Named after the query,
        not shared: smoothing state depends on where in the stream it began (the query's start)."""
        if node not in self.smoothing:
            assert self.q.smoothing is not None
            raw = self.joined(Source((raw_topic(node),), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", self.lateness_ms),
                              node)
            if self.q.predicate is not None:
                raw = Filter(raw, self.q.predicate)
            name = f"smooth_{self.query_id}"
            self.smoothing[node] = PartSpec(f"view.{name}", Smooth(raw, self.q.smoothing.epoch_ms,
                                                                   self.q.smoothing.delta),
                                            view_topic(node, name), node, "smooth", name)
        return self.smoothing[node]

    def smoothing_of(self, node: str) -> list[PartSpec]:
        """The node's smoothing part, if its producer's plan made one (it goes first)."""
        return [self.smoothing[node]] if node in self.smoothing else []

    def joined(self, plan: Plan, node: str) -> Plan:
        for join in self.q.joins:
            relation = self.catalog.relations[join.relation]
            if not relation.replicated_at(node):
                raise SqlError(f"static relation {join.relation!r} is not replicated at {node}, where "
                               f"{self.q.source!r} is read")
            plan = LookupJoin(plan, join.relation, join.on, join.columns)
        return plan

    def selection(self, node: str) -> Plan:
        plan = self.joined(self.source(node), node)
        if self.q.predicate is not None and self.q.smoothing is None:   # smoothing: WHERE came before it
            plan = Filter(plan, self.q.predicate)
        if self.q.derived:   # grouping columns computed from each row, beside the others
            kept = tuple((name, Col(name)) for name, _ in output_columns(plan))
            plan = Project(plan, kept + self.q.derived)
        return plan

    def producer_plan(self, node: str, window: Window | None = None) -> Plan:
        """The selection with its event time, or its partials per pane (per `window` if given)."""
        q = self.q
        if q.pattern is not None:   # the rows any step may meet, with what the pattern reads of them
            conditions = [c for step in q.pattern.steps for c in step.conditions]
            kept = Filter(self.selection(node), functools.reduce(lambda a, b: BinOp("OR", a, b), conditions))
            read = sorted({c for cond in conditions for c in expr_columns(cond)} | set(q.pattern.partition)
                          | {column for _, _, column in q.pattern.outputs})
            return Project(kept, (*((c, Col(c)) for c in read), (EVENT_TIME, Col(q.event_time))))
        if not q.is_aggregate:
            outputs = [(name, expr) for name, expr in q.outputs]
            return Project(self.selection(node), (*outputs, (EVENT_TIME, Col(q.event_time))))
        keys, _ = self.merge_specs()
        return Aggregate(self.selection(node), keys, self.partial_specs(), None, window or self.pane,
                         self.q.approximate)

    # ------------------------------------------------------------ inner levels

    def children_source(self, child_tasks: list[PartSpec]) -> Source:
        columns = output_columns(child_tasks[0].plan)
        topics = tuple(t.topic for t in child_tasks)
        if self.naive and self.q.is_aggregate:
            # The baseline of the lag benchmark: whole windows, a guessed slack per level.
            return Source(topics, "rows", columns, "window_end", self.level_lateness_ms, window=self.q.window)
        event_time = "window_start" if self.q.is_aggregate else EVENT_TIME
        window = self.pane if self.q.is_aggregate else self.q.source_window   # what the children's rows stand for
        return Source(topics, "rows", columns, event_time, 0, True, window)

    def combine(self, source: Source, window: Window | None) -> Aggregate:
        """Merge the children's partials: per pane (or per window at the root); naive: per window
        the children already formed."""
        keys, merges = self.merge_specs()
        if self.naive:
            return Aggregate(source, ("window_start", "window_end", *keys), merges, annotate=self.q.approximate)
        return Aggregate(source, keys, merges, None, window, self.q.approximate)

    def partial_specs(self) -> tuple[AggSpec, ...]:
        """What a producer computes per group (arbitration: each contender's rows, or their weight)."""
        arb = self.q.arbitration
        if arb is None:
            return split_all(self.q.aggregates)[0]
        return (AggSpec("__rows", "sum", arb.weight) if arb.weight else AggSpec("__rows", "count"),)

    def merge_specs(self) -> tuple[tuple[str, ...], tuple[AggSpec, ...]]:
        """Grouping keys and merge aggregates of the partial streams (arbitration: rows per contender)."""
        q = self.q
        if q.arbitration:
            return tuple(dict.fromkeys((*q.keys, q.arbitration.winner, q.arbitration.by))), (
                AggSpec("__rows", "sum", "__rows"),)
        return q.keys, split_all(q.aggregates)[1]

    def merge_plan(self, child_tasks: list[PartSpec]) -> Plan:
        source = self.children_source(child_tasks)
        if not self.q.is_aggregate:
            return Project(source, tuple((name, Col(name)) for name, _ in source.columns))
        return self.combine(source, self.pane)

    def final_plan(self, child_tasks: list[PartSpec]) -> Plan:
        q = self.q
        source = self.children_source(child_tasks)
        if q.pattern is not None:
            return self.matched(source)
        if not q.is_aggregate:
            return Project(source, tuple((name, Col(name)) for name, _ in q.outputs))
        return self.finish(self.combine(source, q.window))

    def matched(self, rows: Plan) -> Plan:
        """The event pattern over `rows` (each step's candidates, in event-time order), its
        matches as the select list."""
        pattern = self.q.pattern
        assert pattern is not None
        match = Match(rows, pattern.partition, pattern.steps, pattern.within_ms, pattern.outputs)
        # an event view's rows carry their match's end: the time a query over the view reads them by
        ended = ((EVENT_TIME, Col(EVENT_TIME)),) if self.q.view_name else ()
        return Project(match, (*((name, Col(name)) for name, _ in self.q.outputs), *ended))

    def local_plan(self, node: str) -> Plan:
        """The whole query on its only producer, in one part: the producer's plan over the query's
        own windows instead of panes, finished where it is read (no partial stream to send)."""
        q = self.q
        produced = self.producer_plan(node, q.window)
        if q.pattern is not None:
            return self.matched(produced)
        if not q.is_aggregate:
            return Project(produced, tuple((name, Col(name)) for name, _ in q.outputs))
        assert isinstance(produced, Aggregate)
        return self.finish(produced)

    def finish(self, windowed: Aggregate) -> Plan:
        """Whole windows of partials -> the select list: finals, HAVING, output names."""
        q = self.q
        if q.arbitration is not None:
            return windowed  # the contest runs in a second query on the root (arbitration_plan)
        _, _, finals = split_all(q.aggregates)
        triage = tuple((name, Col(name)) for name, _ in TRIAGE_COLUMNS) if q.approximate else ()
        finished = Project(windowed, (*WINDOW_BOUNDS, *((k, Col(k)) for k in q.keys), *finals, *triage))
        kept: Plan = Filter(finished, q.having) if q.having is not None else finished
        return Project(kept, (*WINDOW_BOUNDS, *q.outputs, *triage))

    def arbitration_plan(self, windowed: PartSpec) -> Plan:
        """Each `by` value once per window, at the `winner` with the most rows (ties: smallest),
        then the select list per winner. Reads the root's windowed counts as a stream of its own:
        chained aggregations need their grouping time to carry a watermark."""
        q = self.q
        arb = q.arbitration
        assert arb is not None
        for call in q.aggregates:
            if call.fn != "count_distinct" or call.column != arb.by:
                raise SqlError(f"with arbitration the select list holds {arb.winner} and count(DISTINCT {arb.by}) "
                               f"(not {call.fn}({call.column or '*'}))")
        # Rows carry window_start; a 1 ms delay lets a group keyed by it close exactly when the
        # child promises nothing earlier than the next window start.
        source = Source((windowed.topic,), "rows", output_columns(windowed.plan), "window_start", 1, True, q.window)
        contest = Aggregate(source, ("window_start", "window_end", arb.by),
                            (AggSpec(arb.winner, "argmax", arb.winner, "__rows"),))
        won = Aggregate(contest, ("window_start", "window_end", arb.winner),
                        tuple(AggSpec(call.name, "count") for call in q.aggregates))
        return Project(won, (*WINDOW_BOUNDS, *q.outputs))

    # ------------------------------------------------------------ the walk

    def task(self, node: str, role: str, plan: Plan) -> PartSpec:
        if role == "final":
            if self.q.view_name:
                return PartSpec(f"view.{self.q.view_name}", plan, view_topic(node, self.q.view_name), node, role,
                                self.q.view_name)
            return PartSpec(self.query_id, plan, results_topic(self.query_id, node), node, role)
        name = self.names.name(role, plan)
        # the same name and the same plan: a view of another name-alike is never read as this part
        # (a running join's from its own query's start: the reader keeps what it would have joined)
        reused = any(v.name == name and _joining_from(v.plan, 0) == plan for v in self.running.get(node, ()))
        return PartSpec(f"view.{name}", plan, view_topic(node, name), node, role, name, reused=reused)

    def build(self, node: str) -> list[PartSpec]:
        """The parts of `node` and, first, of every child on the way to the producers, in the
        order they are deployed: `node`'s own last."""
        root = node == self.placement.root
        if root and self.placement.producers == (node,) and not self.naive:
            local = self.local_plan(node)
            return [*self.smoothing_of(node), *self.root_parts(node, local)]
        feeds, parts = self.feeding(node)
        if root:
            return [*parts, *self.root_parts(node, self.final_plan(feeds))]
        if node in self.placement.producers:
            return parts
        return [*parts, self.task(node, "merge", self.merge_plan(feeds))]

    def feeding(self, node: str) -> tuple[list[PartSpec], list[PartSpec]]:
        """The parts whose rows `node` reads — its own producer's (rolled up from a running view
        that holds its partials already) when it is a producer, else its children's — and every
        part that takes, in the order they are deployed."""
        if node not in self.placement.producers:
            built = [self.build(child) for child in self.children[node]]
            return [parts[-1] for parts in built], [part for parts in built for part in parts]
        produced = self.task(node, "producer", self.producer_plan(node))
        if node in self.rollups:   # a running view holds these partials already: roll them up
            rollup, view = self.rollups[node]
            produced = self.task(node, "producer", rollup)
            self.uses.append((view.node, f"view.{view.name}"))
        return [produced], [*self.smoothing_of(node), produced]

    def root_parts(self, node: str, plan: Plan) -> list[PartSpec]:
        """The root's parts: its final one (with arbitration, first its windowed counts, then the
        contest over them)."""
        if self.q.arbitration is None:
            return [self.task(node, "final", plan)]
        windowed = self.task(node, "window", plan)
        return [windowed, self.task(node, "final", self.arbitration_plan(windowed))]


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def answering_from(plan: DistributedPlan, start_ms: int, until_ms: int | None = None) -> DistributedPlan:
    """`plan` with a root that drops windows (rows) starting before `start_ms` (and, with
    `until_ms`, from it on): a query whose sources are read from what they received after its
    start answers only what it saw whole. Adaptive smoothing starts at the first epoch from
    `start_ms` on (the reference does too). With EMIT CHANGES, the changes of those windows."""
    tasks = [replace(t, plan=replace(t.plan, from_ms=start_ms)) if isinstance(t.plan, Smooth) else
             replace(t, plan=_joining_from(t.plan, start_ms)) for t in plan.tasks]
    final = tasks[-1]
    if isinstance(final.plan, Changes):
        body: Plan = replace(final.plan, child=_root_from(plan.query, final.plan.child, start_ms, until_ms))
    else:
        body = _root_from(plan.query, final.plan, start_ms, until_ms)
    return replace(plan, tasks=[*tasks[:-1], replace(final, plan=body)], start_ms=start_ms, until_ms=until_ms)


def _root_from(query: LogicalQuery, root: Plan, start_ms: int, until_ms: int | None) -> Plan:
    """The root's plan keeping what starts in [start, until)."""
    if query.pattern is not None:   # matches of the rows from the start on (the reference's too)
        assert isinstance(root, Project) and isinstance(root.child, Match)
        match = root.child
        time = event_time_column(match.child) or EVENT_TIME
        return Project(replace(match, child=Filter(match.child, _between(time, start_ms, until_ms))), root.outputs)
    if query.is_aggregate:
        return Filter(root, _between("window_start", start_ms, until_ms))
    assert isinstance(root, Project)  # final_plan: the select list over the children's rows
    return Project(Filter(root.child, _between(EVENT_TIME, start_ms, until_ms)), root.outputs)


def _joining_from(plan: Plan, start_ms: int) -> Plan:
    """`plan` with its window join, if any, joining only rows from `start_ms` on, and its reader of
    joined rows keeping only those: a query's joined rows are those of rows it saw whole (the
    reference's too), also when it reads a join another query started earlier."""
    if isinstance(plan, WindowJoin):
        return replace(plan, from_ms=start_ms)
    if isinstance(plan, Source) and JOIN_OLDEST in dict(plan.columns):
        return Filter(plan, BinOp(">=", Func("epoch_ms", (Col(JOIN_OLDEST),)), Lit(start_ms))) if start_ms else plan
    child = getattr(plan, "child", None)
    return plan if child is None else replace(plan, child=_joining_from(child, start_ms))


def _between(column: str, start_ms: int, until_ms: int | None) -> BinOp:
    at = Func("epoch_ms", (Col(column),))
    after = BinOp(">=", at, Lit(start_ms))
    return after if until_ms is None else BinOp("AND", after, BinOp("<", at, Lit(until_ms)))


def rollups_for(query: LogicalQuery, catalog: Catalog, query_id: str, placement: Placement,
                naive: bool = False) -> dict[str, Rollup]:
    """The producers of `query` whose partials a running view holds already (glue.rewrite.reuse),
    each with the rollup that reads them instead: not one whose own part runs already (reused
    as it is), nor the naive baseline's, nor an approximate query's (a running view's partials
    carry no triage annotations)."""
    if naive or query.approximate:
        return {}
    builder = _Builder(query, catalog, query_id, placement)
    found = {}
    for node in placement.producers:
        if not any(view.plan is not None for view in builder.running.get(node, ())):
            continue   # no running view there to roll up (a plan's name is a hash: not made for nothing)
        produced = builder.task(node, "producer", builder.producer_plan(node))
        rollup = None if produced.reused else subsuming(produced.plan, node, builder.running.get(node, ()))
        if rollup is not None:
            found[node] = rollup
    return found


def build_parts(query: LogicalQuery, catalog: Catalog, query_id: str, placement: Placement | None,
                estimates: list[Estimate], naive: bool = False, at: str | None = None,
                rollups: Mapping[str, Rollup] | None = None) -> DistributedPlan:
    """Every node's part of `query` placed at `placement`, bottom up (a stream join is placed
    here, input by input: glue.planner's passes leave it to this); SqlError when it cannot be
    planned. `naive` builds the baseline the lag benchmark compares with: every level re-forms
    the whole range/slide windows and waits a fixed slack (`level_lateness`) for its children."""
    if query.stream_join is not None:
        if naive:
            raise SqlError("the naive baseline does not plan joins")
        return _distribute_join(query, catalog, query_id, at)
    assert placement is not None
    builder = _Builder(query, catalog, query_id, placement, naive, rollups=rollups)
    parts = builder.build(placement.root)
    return DistributedPlan(query_id, query, placement, parts, uses=builder.uses, estimates=estimates)


def _distribute_join(query: LogicalQuery, catalog: Catalog, query_id: str, at: str | None) -> DistributedPlan:
    """Each input planned as a selection of its own up to the join's root (an input read twice,
    a self-join's, once); the root joins their rows, then filters, groups and selects."""
    join = query.stream_join
    assert join is not None
    placement, placements = place_join(query, catalog, at)
    tasks: dict[str, PartSpec] = {}
    children, uses, estimates, rates = [], [], [], {}
    for given, where in zip(join.inputs, placements, strict=True):
        selection, terms = order_terms(input_query(query, given), catalog)
        rates[given.alias] = join_order.input_rate(where, given.predicate, catalog)
        rollups = rollups_for(selection, catalog, query_id, where)
        builder = _Builder(selection, catalog, query_id, where, rollups=rollups)
        feeds, parts = builder.feeding(placement.root)
        tasks.update((task.topic, task) for task in parts if task.topic not in tasks)
        children.append(builder.children_source(feeds))
        uses += builder.uses
        estimates += terms
    joined = _Builder(query, catalog, query_id, placement).task(
        placement.root, "join", WindowJoin(tuple(children), join.aliases, join.keys, join.bounds))
    rows = Source((joined.topic,), "rows", output_columns(joined.plan), JOIN_TIME, 0, True)
    root = _Builder(query, catalog, query_id, placement, join=rows)
    root_parts = root.root_parts(placement.root, root.local_plan(placement.root))
    return DistributedPlan(query_id, query, placement, [*tasks.values(), joined, *root_parts], uses=uses,
                           estimates=estimates, join_rates=rates)

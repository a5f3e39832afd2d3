"""The centralized reference evaluator: any supported query computed in one place over the raw
readings of a run, with the windows and semantics of glue.analyzer. It is the judge the
hierarchy's answers must equal (DESIGN §7), and `hifi query --reference` shows it to users. Pure.

Readings are the rows of `rfid_stream` (receptor_id, tag_id, antenna, read_strength, ts) and samples
those of `sensor_stream` (receptor_id, temperature, humidity, light, sound, voltage, ts), with `ts`
in epoch milliseconds (`receptor_stream` holds both, NULL where a kind has no column); times in
results are epoch milliseconds too. A materialized view used as a source is recomputed from its
exported definition over the same readings.
"""

from __future__ import annotations

import math
import operator
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from base.events import order_key, ordering_columns
from base.mote_quality import MoteQuality, judge_periods
from base.plan import (
    EPC_SCHEME,
    EVENT_TIME,
    JOIN_TIME,
    RAW_STREAMS,
    SAMPLE_QUANTITIES,
    SGTIN_INDICATOR,
    BinOp,
    Col,
    Expr,
    Func,
    Lit,
    Match,
    Source,
)
from base.smurf import ReaderSmoother
from glue.analyzer import analyze
from glue.catalog import Catalog
from glue.logical_query import AggCall, EventPattern, LogicalQuery
from glue.sql.parser import TAG_ESTIMATES
from glue.stream_join import StreamJoin
from wire.windows import window_starts

Row = dict[str, Any]

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
}


def _product(tag: str) -> str:
    """base.plan's product(): the URI up to its second '.', without the EPC scheme."""
    return re.sub(EPC_SCHEME, "", ".".join(tag.split(".")[:2]))


def evaluate_expr(expr: Expr, row: Row) -> Any:
    """SQL semantics: NULL in, NULL out; AND/OR with NULL as in three-valued logic."""
    if isinstance(expr, Col):
        return row.get(expr.name)
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, Func):
        args = [evaluate_expr(a, row) for a in expr.args]
        if any(a is None for a in args):
            return None
        if expr.name == "read_key":
            return "|".join(str(a) for a in args)
        return {"not": lambda v: not v, "size": len, "double": float, "epoch_ms": int,
                "product": _product, "indicator": lambda tag: re.sub(SGTIN_INDICATOR, r"\1", tag)}[expr.name](args[0])
    assert isinstance(expr, BinOp)
    left, right = evaluate_expr(expr.left, row), evaluate_expr(expr.right, row)
    if expr.op == "AND":
        return False if left is False or right is False else (None if left is None or right is None else True)
    if expr.op == "OR":
        return True if left is True or right is True else (None if left is None or right is None else False)
    if left is None or right is None:
        return None
    if expr.op in _COMPARE:
        return _COMPARE[expr.op](left, right)
    if expr.op == "/" and right == 0:
        return None
    return _ARITHMETIC[expr.op](left, right)


def _aggregate(call: AggCall, rows: Sequence[Row]) -> Any:
    if call.column is None:
        return len(rows)
    values = [r[call.column] for r in rows if r.get(call.column) is not None]
    if call.fn == "count":
        return len(values)
    if call.fn == "count_distinct":
        return len(set(values))
    if call.fn in TAG_ESTIMATES:
        return _tag_estimate(set(values), TAG_ESTIMATES.index(call.fn))
    if not values:
        return None
    if call.fn == "avg":
        return sum(values) / len(values)
    return {"sum": sum, "min": min, "max": max}[call.fn](values)


def _tag_estimate(reads: set[str], which: int) -> float:
    """The π-estimate of the tags in range (which 0), or its 95 % interval's low (1) or high (2)
    end, from the window's reads "receptor|cycle|tag" (written apart from base.tag_count)."""
    cycles: dict[str, set[str]] = defaultdict(set)
    per_tag: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for receptor, cycle, tag in (read.split("|", 2) for read in reads):
        cycles[receptor].add(cycle)
        per_tag[tag][receptor] += 1
    estimate = variance = 0.0
    for readers in per_tag.values():
        rates = [(k / len(cycles[r]), len(cycles[r])) for r, k in readers.items()]
        gone = math.prod((1 - p) ** w for p, w in rates)   # missed by every reader in every cycle
        pi = 1 - gone
        estimate += 1 / pi
        # each rate estimated from its w cycles: d(1/pi)/dp = w (1-p)^(w-1) (the others' misses) / pi^2
        variance += (1 - pi) / pi ** 2 + sum((w * gone / (1 - p) / pi ** 2) ** 2 * p * (1 - p) / w
                                             for p, w in rates if p < 1)
    half = 1.959963984540054 * math.sqrt(variance)
    return [estimate, max(float(len(per_tag)), estimate - half), estimate + half][which]


class Reference:
    """Evaluates queries over one run's readings; `catalog` resolves names and view definitions."""

    def __init__(self, readings: Iterable[Row], catalog: Catalog, start_ms: int | None = None,
                 samples: Iterable[Row] = ()) -> None:
        self.readings = list(readings)
        self.samples = list(samples)
        self.catalog = catalog
        self.start_ms = start_ms   # where a query's reading began (adaptive smoothing starts there)

    @classmethod
    def from_log(cls, logged: Iterable[dict[str, Any]], catalog: Catalog, start_ms: int | None = None) -> Reference:
        """Over every reading and sample of the agents' readings log (edge.agent)."""
        lines = list(logged)
        return cls(rfid_readings(lines), catalog, start_ms, sensor_samples(lines))

    def source_rows(self, query: LogicalQuery) -> list[Row]:
        if query.stream_join is not None:
            return self.joined_streams(query.stream_join)
        return self.rows_of(query.source, query.source_kind)

    def rows_of(self, source: str, kind: str) -> list[Row]:
        """A stream's rows, or a materialized view's (its definition evaluated)."""
        if kind == "stream":
            return self.stream_rows(source)
        export = next(v for v in self.catalog.exports_of(source) if v.topic)
        inner = analyze(export.definition, self.catalog)
        if inner.pattern is not None:   # an event view's matches since its beginning (one made with replay)
            return Reference(self.readings, self.catalog, None, self.samples).run(inner)
        return self.run(inner)

    def stream_rows(self, name: str) -> list[Row]:
        """A raw stream's rows (a union's: those of its streams with its columns, NULL where absent)."""
        raw = RAW_STREAMS[name]
        if raw.union_of:
            return [{column: row.get(column) for column, _ in raw.columns}
                    for part in raw.union_of for row in self.stream_rows(part)]
        return self.samples if name == "sensor_stream" else self.readings

    def joined_streams(self, join: StreamJoin) -> list[Row]:
        """Every combination of one row per input (each input's own condition met) whose keys are
        equal and whose times meet every bound, as `<alias>.<column>` and `ts`, the newest time;
        built input by input, each step keeping the combinations the inputs so far allow. With a
        start, only rows from it on join."""
        combos: list[dict[str, Row]] = [{}]
        for position, given in enumerate(join.inputs):   # from the query's start on, if given (WindowJoin.from_ms)
            rows = [row for row in self.rows_of(given.source, given.source_kind)
                    if (given.predicate is None or evaluate_expr(given.predicate, row) is True)
                    and (self.start_ms is None or row[given.event_time] >= self.start_ms)]
            partners = _partners(join, given.alias, rows, joined=set(join.aliases[:position]))
            combos = [{**combo, given.alias: row} for combo in combos for row in partners(combo)
                      if _allowed({**combo, given.alias: row}, join)]
        times = {given.alias: given.event_time for given in join.inputs}
        return [{**{f"{alias}.{name}": value for alias, row in combo.items() for name, value in row.items()},
                 JOIN_TIME: max(row[times[alias]] for alias, row in combo.items())} for combo in combos]

    def joined(self, rows: list[Row], query: LogicalQuery) -> list[Row]:
        for join in query.joins:
            relation = self.catalog.relations[join.relation]
            names = [name for name, _ in relation.columns]
            index = {r[names.index(join.on)]: dict(zip(names, r, strict=True)) for r in relation.rows}
            rows = [{**row, **{name: index.get(row[join.on], {}).get(name) for name, _ in join.columns}}
                    for row in rows]
        return rows

    def run(self, query: LogicalQuery) -> list[Row]:
        """The query's rows (EMIT CHANGES: each key's runs of windows, as starts and ends)."""
        rows = self.rows(query)
        if query.changes is None:
            return rows
        window = query.window or query.source_window
        slide_ms = window.slide_ms if window is not None else query.smoothing.epoch_ms if query.smoothing else 0
        return runs_of_windows(rows, query.changes, slide_ms)

    def rows(self, query: LogicalQuery) -> list[Row]:
        rows = self.source_rows(query)
        if query.sample_ms:   # `sample every`: the samples whose time is a multiple of the period
            rows = [row for row in rows if row["ts"] % query.sample_ms == 0]
        rows = self.joined(rows, query)
        if query.predicate is not None:
            rows = [row for row in rows if evaluate_expr(query.predicate, row) is True]
        if query.smoothing is not None:   # WHERE filtered the readings; the rest sees smoothed rows
            rows = self.joined(adaptive_smoothed(rows, query.smoothing.epoch_ms, query.smoothing.delta,
                                                 self.start_ms), query)
        if query.derived:
            rows = [{**row, **{name: evaluate_expr(expr, row) for name, expr in query.derived}} for row in rows]
        if query.pattern is not None:
            if self.start_ms is not None:   # what the hierarchy reads from the query's start
                rows = [row for row in rows if row[query.event_time] >= self.start_ms]
            return matches(rows, query.pattern, query.event_time, dict(query.visible_columns))
        if not query.is_aggregate:
            return [{name: evaluate_expr(expr, row) for name, expr in query.outputs} for row in rows]
        assert query.window is not None
        groups: dict[tuple, list[Row]] = defaultdict(list)
        keys = tuple(dict.fromkeys(query.keys + ((query.arbitration.winner, query.arbitration.by)
                                                 if query.arbitration else ())))
        for row in rows:
            for start in window_starts(row[query.event_time], query.window):
                groups[(start, *(row.get(k) for k in keys))].append(row)
        if query.arbitration is not None:
            groups = _arbitrate(groups, query.arbitration.weight)
        results = []
        for group, members in sorted(groups.items(), key=lambda item: repr(item[0])):
            start = group[0]
            values: Row = {"window_start": start, "window_end": start + query.window.range_ms}
            values.update(zip(query.keys, group[1:1 + len(query.keys)], strict=True))
            values.update({call.name: _aggregate(call, members) for call in query.aggregates})
            if query.having is not None and evaluate_expr(query.having, values) is not True:
                continue
            results.append({"window_start": values["window_start"], "window_end": values["window_end"],
                            **{name: evaluate_expr(expr, values) for name, expr in query.outputs}})
        return results


def runs_of_windows(rows: list[Row], keys: Sequence[str], slide_ms: int) -> list[Row]:
    """EMIT CHANGES: per key, each run of windows one slide apart it has rows in is a `start` row
    in its first window and an `end` row in the window after its last (every window after the
    data is closed), with `since`, the run's start, and `held_seconds`, to the end of its last."""
    by_key: dict[tuple, dict[int, Row]] = defaultdict(dict)
    for row in rows:
        by_key[tuple(row[k] for k in keys)][row["window_start"]] = row
    out = []
    for windows in by_key.values():
        starts = sorted(windows)
        runs = [[starts[0]]]
        for start in starts[1:]:
            if start - runs[-1][-1] == slide_ms:
                runs[-1].append(start)
            else:
                runs.append([start])
        for run in runs:
            first, last = windows[run[0]], windows[run[-1]]
            length = last["window_end"] - last["window_start"]
            out.append({**first, "change": "start", "since": run[0],
                        "held_seconds": (first["window_end"] - run[0]) / 1000})
            out.append({**last, "window_start": run[-1] + slide_ms, "window_end": run[-1] + slide_ms + length,
                        "change": "end", "since": run[0], "held_seconds": (last["window_end"] - run[0]) / 1000})
    return out


def _partners(join: StreamJoin, alias: str, rows: list[Row], joined: set[str]) -> Callable[[dict], Sequence[Row]]:
    """The rows of input `alias` worth trying beside a combination of the inputs `joined`: those
    whose key equals the combination's, by the first key linking `alias` to a joined input (a hash
    join: pairing every row with every row made one comparison of test_queries' window joins take
    23-65 s), or every row when no key links them. `_allowed` still checks each pair.

    >>> join = StreamJoin(inputs=(), keys=(("a.tag", "b.tag"),), bounds=())
    >>> rows = [{"tag": 1}, {"tag": 2}, {"tag": None}]
    >>> _partners(join, "b", rows, {"a"})({"a": {"tag": 2}}), _partners(join, "b", rows, {"a"})({"a": {"tag": None}})
    ([{'tag': 2}], ())
    >>> len(_partners(join, "a", rows, set())({}))
    3
    """
    for pair in join.keys:
        for mine, theirs in (pair, pair[::-1]):
            (own_alias, own_column), (other_alias, other_column) = mine.split(".", 1), theirs.split(".", 1)
            if own_alias == alias and other_alias in joined:
                by_key: dict[Any, list[Row]] = defaultdict(list)
                for row in rows:
                    if row.get(own_column) is not None:   # a null key equals nothing
                        by_key[row[own_column]].append(row)
                return lambda combo: by_key.get(combo[other_alias].get(other_column), ())
    return lambda combo: rows


def _allowed(combo: dict[str, Row], join: StreamJoin) -> bool:
    """Whether the keys and bounds between the inputs in `combo` hold."""
    def value(qualified: str) -> Any:
        alias, name = qualified.split(".", 1)
        return combo[alias].get(name) if alias in combo else _ABSENT
    for left, right in join.keys:
        a, b = value(left), value(right)
        if a is not _ABSENT and b is not _ABSENT and (a is None or a != b):
            return False
    times = {given.alias: given.event_time for given in join.inputs}
    for bound in join.bounds:
        if bound.left in combo and bound.right in combo:
            gap = combo[bound.right][times[bound.right]] - combo[bound.left][times[bound.left]]
            if (bound.low_ms is not None and gap < bound.low_ms) or (bound.high_ms is not None and gap > bound.high_ms):
                return False
    return True


_ABSENT = object()


def matches(rows: list[Row], pattern: EventPattern, time: str, types: dict[str, str]) -> list[Row]:
    """Every match of `pattern` (base.events has the semantics) found by search: per partition, of
    the candidates that begin after the last match, the one that completes first (by its end,
    a row before a bound, then its start) is the next match. Rows carry `time` in epoch ms."""
    ordering = ordering_columns(Match(Source((), "rows", (), time, 0), pattern.partition, pattern.steps,
                                      pattern.within_ms, pattern.outputs), types)
    names = {name: cond for step in pattern.steps for name, cond in zip(step.names, step.conditions, strict=True)}
    partitions: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        partitions[tuple(row[k] for k in pattern.partition)].append(row)
    found = []
    for key, members in partitions.items():
        members.sort(key=lambda r: order_key(r, r[time], ordering))
        met = [{name: evaluate_expr(cond, row) is True for name, cond in names.items()} for row in members]
        resume: int | None = None
        while True:
            best = None
            for i, row in enumerate(members):
                if resume is not None and row[time] <= resume or not any(met[i][n] for n in pattern.steps[0].names):
                    continue
                completion = _complete(members, met, i, pattern, time)
                if completion is not None and (best is None or (*completion[:2], i) < (*best[:2], best[3])):
                    best = (*completion, i)
            if best is None:
                break
            end, _, captured, _ = best
            values = dict(zip(pattern.partition, key, strict=True))
            found.append({**{name: values[column] if not step else captured[step][column]
                             for name, step, column in pattern.outputs}, EVENT_TIME: end})
            resume = end
    return sorted(found, key=lambda r: r[EVENT_TIME])


def _complete(rows: list[Row], met: list[dict[str, bool]], first: int, pattern: EventPattern,
              time: str) -> tuple[int, int, dict[str, Row]] | None:
    """(end, 0 for a row / 1 for a bound, rows per step) of the candidate beginning at rows[first],
    each step taking the first later row meeting it; None when it cannot complete."""
    steps, start = pattern.steps, rows[first][time]
    captured = {next(n for n in steps[0].names if met[first][n]): rows[first]}
    k = 0   # the step being met
    while k < len(steps) and all(n in captured for n in steps[k].names):
        k += 1
        while k < len(steps) and steps[k].negated:
            k += 1
    done = k >= len(steps)
    if done and not steps[-1].negated:   # a one-step pattern
        return start, 0, captured
    last_positive = 0 if all(n in captured for n in steps[0].names) else -1
    for j in range(first + 1, len(rows)):
        if pattern.within_ms and rows[j][time] > start + pattern.within_ms:
            break
        guards = [s.names[0] for s in steps[last_positive + 1:k if not done else len(steps)] if s.negated]
        if any(met[j][g] for g in guards):
            return None
        if done:
            continue
        name = next((n for n in steps[k].names if n not in captured and met[j][n]), None)
        if name is None:
            continue
        captured[name] = rows[j]
        if all(n in captured for n in steps[k].names):
            last_positive = k
            k += 1
            while k < len(steps) and steps[k].negated:
                k += 1
            if k >= len(steps):
                if not steps[-1].negated:
                    return rows[j][time], 0, captured
                done = True
    if done and steps[-1].negated:
        return start + pattern.within_ms, 1, captured
    return None


def _arbitrate(groups: dict[tuple, list[Row]], weight: str | None) -> dict[tuple, list[Row]]:
    """(window, .., winner, by) groups -> (window, winner) groups of the rows each winner won: the
    most rows (or the largest sum of `weight`), ties to the smallest winner."""
    best: dict[tuple, tuple[Any, Any]] = {}
    for group, members in groups.items():
        start, winner, by = group[0], group[-2], group[-1]
        measure = len(members) if weight is None else sum(m[weight] or 0 for m in members)
        contender = (-measure, winner)
        if (start, by) not in best or contender < best[(start, by)]:
            best[(start, by)] = contender
    won: dict[tuple, list[Row]] = defaultdict(list)
    for group, members in groups.items():
        start, winner, by = group[0], group[-2], group[-1]
        if best[(start, by)][1] == winner:
            won[(start, winner)].extend(members)
    return won


def adaptive_smoothed(readings: Iterable[Row], epoch_ms: int, delta: float, from_ms: int | None = None) -> list[Row]:
    """Adaptive smoothing (base.smurf.ReaderSmoother, the DSP's Smooth operator) centrally: per
    receptor, from the epoch of its first reading (at or after `from_ms`) to the last epoch of any
    reading, one row per epoch and tag reported present."""
    first_epoch = -(-from_ms // epoch_ms) if from_ms else None
    epochs: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for r in readings:
        epoch = r["ts"] // epoch_ms
        if first_epoch is None or epoch >= first_epoch:
            epochs[r["receptor_id"]][epoch][r["tag_id"]] += 1
    last = max((max(by_epoch) for by_epoch in epochs.values()), default=-1)
    rows = []
    for receptor, by_epoch in sorted(epochs.items()):
        smoother = ReaderSmoother(delta)
        for epoch in range(min(by_epoch), last + 1):
            for tag, reads, window in smoother.step(by_epoch.get(epoch, {})):
                rows.append({"window_start": epoch * epoch_ms, "window_end": (epoch + 1) * epoch_ms,
                             "receptor_id": receptor, "tag_id": tag, "reads": reads, "epochs": window})
    return rows


def rfid_readings(logged: Iterable[dict[str, Any]]) -> list[Row]:
    """rfid_stream rows from the agent's readings log (edge.agent): one per emitted read."""
    return [{"receptor_id": cycle["receptor"], "tag_id": tag, "antenna": antenna, "read_strength": strength,
             "ts": cycle["t"]} for cycle in logged if "reads" in cycle for tag, antenna, strength in cycle["reads"]]


def sensor_samples(logged: Iterable[dict[str, Any]]) -> list[Row]:
    """sensor_stream rows from the agent's readings log: one per sample a node accepts (one with a
    value that is not a finite number is refused, wire.codec), a quantity it lacks None."""
    return [{"receptor_id": s["receptor_id"], **{q: s["values"].get(q) for q in SAMPLE_QUANTITIES},
             "ts": s["timestamp_ms"]}
            for line in logged for s in line.get("samples", ())
            if s["receptor_id"] and all(math.isfinite(v) for v in s["values"].values())]


def mote_quality_rows(logged: Iterable[dict[str, Any]], period_ms: int, positions: dict[str, tuple[float, float]],
                      offsets: dict[str, dict[str, float]] | None = None, from_ms: int | None = None) -> list[tuple]:
    """The qualify stage centrally over the agent's readings log (its sample batches), for the
    motes with a position: base.plan.QUALITY_COLUMNS rows, each mote's values the period's mean,
    less its calibration `offsets` ({mote: {quantity: offset}}) if given."""
    sums: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    first_period = -(-from_ms // period_ms) if from_ms else None
    for line in logged:
        for sample in line.get("samples", ()):
            period = sample["timestamp_ms"] // period_ms
            if sample["receptor_id"] in positions and (first_period is None or period >= first_period):
                for quantity, value in sample["values"].items():
                    if quantity in SAMPLE_QUANTITIES:
                        if offsets is not None and quantity in offsets.get(sample["receptor_id"], {}):
                            value = value - offsets[sample["receptor_id"]][quantity]
                        sums[(period, sample["receptor_id"])][quantity].append(value)
    samples: dict[int, dict[str, tuple[float, float, dict[str, float]]]] = defaultdict(dict)
    for (period, mote), values in sums.items():
        samples[period][mote] = (*positions[mote], {q: sum(v) / len(v) for q, v in values.items()})
    if not samples:
        return []
    return judge_periods(MoteQuality({}), samples, min(samples), max(samples), period_ms)

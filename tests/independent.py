"""The independent judge: the suite's reference queries written by hand in DuckDB SQL over the
agents' readings log, sharing no code with the planner, the engine or glue.reference.

The project's reference evaluator (glue.reference) shares the analyzer, the window arithmetic and
the EPC functions with the code it judges, so a bug in any of them cannot show as "differs from
the reference". This judge reads the same `readings.jsonl` with its own loader and computes each
query from SQL a person wrote for DuckDB, with HiFi's semantics spelled out in that SQL:

- `rfid_stream`: one row per read of a read cycle (receptor, tag, antenna, strength, the cycle's
  time in epoch ms); `sensor_stream`: one row per sample whose values are all finite numbers (a
  node refuses any other), a quantity the mote lacks NULL.
- A window `[range by R, slide by S]` holds a row at time t in every window [s, s + R) whose start s
  is a multiple of S: s from the first multiple of S after t - R up to the last one at or before t
  (`window_starts` below). A result row carries window_start and window_end in epoch ms.
- A view read as a stream (the edges' smoothed_rfid_stream) is its rows with window_start as their
  time; the definition-only cleaned_rfid_stream is its filter over rfid_stream.
- `HAVING count(*) >= ALL (SELECT count(*) ... WHERE k = alias.k GROUP BY c)` keeps each k once per
  window, at the c with the most rows, ties to the smallest c (docs/sql.md).

Only the topology's parameters and receptors are read, from the YAML file itself.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterable
from typing import Any

import duckdb
import pyarrow as pa
import yaml

QUANTITIES = ("temperature", "humidity", "light", "sound", "voltage")


def _readings(lines: Iterable[dict[str, Any]]) -> pa.Table:
    rows = [(line["receptor"], tag, antenna, strength, line["t"])
            for line in lines if "reads" in line for tag, antenna, strength in line["reads"]]
    names = ("receptor_id", "tag_id", "antenna", "read_strength", "ts")
    types = (pa.string(), pa.string(), pa.int64(), pa.float64(), pa.int64())
    return pa.table({name: pa.array([r[i] for r in rows], kind)
                     for i, (name, kind) in enumerate(zip(names, types, strict=True))})


def _samples(lines: Iterable[dict[str, Any]]) -> pa.Table:
    rows = [sample for line in lines for sample in line.get("samples", ())
            if sample["receptor_id"] and all(isinstance(v, int | float) and math.isfinite(v)
                                             for v in sample["values"].values())]
    columns: dict[str, pa.Array] = {"receptor_id": pa.array([s["receptor_id"] for s in rows], pa.string())}
    for quantity in QUANTITIES:
        columns[quantity] = pa.array([s["values"].get(quantity) for s in rows], pa.float64())
    columns["ts"] = pa.array([s["timestamp_ms"] for s in rows], pa.int64())
    return pa.table(columns)


def _duration_ms(text: str) -> int:
    """'2 seconds' -> 2000, '500 ms' -> 500: the forms the topologies' window parameters take."""
    value, unit = str(text).split()
    scale = {"ms": 1, "second": 1000, "seconds": 1000}[unit]
    return int(float(value) * scale)


def topology_parameters(path: str) -> dict[str, Any]:
    """The topology file's parameters, windows in ms (t1_ms, t2_ms), its receptor locations, and
    `start` 0: when the query started (a window join joins rows from its start on)."""
    with open(path) as fh:
        topology = yaml.safe_load(fh)
    parameters = dict(topology.get("parameters", {}))
    parameters["t1_ms"], parameters["t2_ms"] = _duration_ms(parameters["t1"]), _duration_ms(parameters["t2"])
    parameters["locations"] = [(r["id"], r["location"]) for r in topology["receptors"] if "location" in r]
    parameters["start"] = 0
    return parameters


_SETUP = """
CREATE MACRO window_starts(t, r, s) AS range(((t - r) // s) * s + s, (t // s) * s + 1, s);
CREATE VIEW cleaned_rfid_stream AS
    SELECT receptor_id, tag_id, antenna, read_strength, ts FROM rfid_stream WHERE read_strength >= {strength_T};
CREATE VIEW smoothed_rfid_stream AS
    SELECT window_start, window_start + {t1_ms} AS window_end, receptor_id, tag_id, count(*) AS reads
    FROM (SELECT *, unnest(window_starts(ts, {t1_ms}, {t2_ms})) AS window_start FROM cleaned_rfid_stream)
    GROUP BY window_start, receptor_id, tag_id HAVING count(*) >= {count_T};
"""


def evaluate(sql: str, lines: Iterable[dict[str, Any]], parameters: dict[str, Any]) -> list[dict[str, Any]]:
    """`sql` (DuckDB, over rfid_stream, sensor_stream, receptor_locations, cleaned_rfid_stream,
    smoothed_rfid_stream and the macro window_starts; `{name}` a topology parameter or `start`) over the
    logged readings, as dicts."""
    lines = list(lines)
    con = duckdb.connect()
    try:
        con.register("rfid_stream", _readings(lines))
        con.register("sensor_stream", _samples(lines))
        receptors, locations = zip(*parameters["locations"], strict=True)
        con.register("receptor_locations", pa.table({"receptor_id": receptors, "location": locations}))
        con.execute(_SETUP.format(**parameters))
        result = con.execute(sql.format(**parameters))
        names = [d[0] for d in result.description]
        return [dict(zip(names, row, strict=True)) for row in result.fetchall()]
    finally:
        con.close()


_LOGS: dict[str, tuple[int, list[dict[str, Any]]]] = {}   # path -> (bytes read, lines): a growing log


def read_log(path: str, until_ms: int) -> list[dict[str, Any]]:
    """The readings log's lines up to the first one later than `until_ms` (its own reader; a log
    checked again and again as it grows is read on from where the last read stopped)."""
    offset, lines = _LOGS.get(path, (0, []))
    if os.path.getsize(path) < offset:   # written anew by another run
        offset, lines = 0, []
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    whole = data.rfind(b"\n") + 1   # a line still being written is read next time
    lines = lines + [json.loads(text) for text in data[:whole].splitlines() if text.strip()]
    _LOGS[path] = (offset + whole, lines)
    return list(itertools.takewhile(lambda line: line["t"] <= until_ms, lines))


# Each suite query's DuckDB twin, by the name it has in tests/test_queries.QUERIES. An aggregate's
# rows carry window_start and window_end; every twin names its columns as the query does.
def _windowed(range_ms: int, slide_ms: int, source: str = "rfid_stream", where: str = "TRUE") -> str:
    return (f"(SELECT *, unnest(window_starts(ts, {range_ms}, {slide_ms})) AS window_start FROM {source} "
            f"WHERE {where})")


def _view_windowed(range_ms: int, slide_ms: int, where: str = "TRUE") -> str:
    """The smoothed view read as a stream: its rows' time is their window_start."""
    return (f"(SELECT receptor_id, tag_id, reads, unnest(window_starts(window_start, {range_ms}, {slide_ms})) "
            f"AS window_start FROM smoothed_rfid_stream WHERE {where})")


def _pairs_across_doors(range_ms: int, aggregates: str) -> str:
    """A tag's reads at door1 and at door2 within a second of each other, both from the query's
    start on, per tumbling window of the pair's time (its newer read's)."""
    return (f"SELECT window_start, window_start + {range_ms} AS window_end, {aggregates} FROM ("
            f"SELECT a.tag_id AS a_tag, unnest(window_starts(greatest(a.ts, b.ts), {range_ms}, {range_ms})) "
            "AS window_start FROM rfid_stream a, rfid_stream b WHERE a.tag_id = b.tag_id "
            "AND b.ts BETWEEN a.ts - 1000 AND a.ts + 1000 AND a.receptor_id IN ('door1-r1', 'door1-r2') "
            "AND b.receptor_id IN ('door2-r1', 'door2-r2') AND a.ts >= {start} AND b.ts >= {start}) "
            "GROUP BY window_start")


ONE_RECEPTOR, OTHER_RECEPTOR = "receptor_id = 'door1-r1'", "receptor_id = 'door1-r2'"
TWO_DOORS = "receptor_id IN ('door1-r2', 'door2-r1')"
TWINS: dict[str, str] = {
    "sliding, range a multiple of slide":
        f"SELECT window_start, window_start + 4000 AS window_end, tag_id, count(*) AS n FROM {_windowed(4000, 2000)} "
        "GROUP BY window_start, tag_id",
    "static-relation join at the edge":
        "SELECT window_start, window_start + 2000 AS window_end, location, count(DISTINCT tag_id) AS tags "
        f"FROM {_windowed(2000, 2000)} w LEFT JOIN receptor_locations USING (receptor_id) "
        "GROUP BY window_start, location",
    "scope of one receptor: root at its edge":
        "SELECT window_start, window_start + 2000 AS window_end, tag_id, count(*) AS n "
        f"FROM {_windowed(2000, 2000, where=ONE_RECEPTOR)} GROUP BY window_start, tag_id",
    "the paper's product_counts over the edges' smoothed view":
        # each tag goes, per window, to the receptor with the most smoothed rows of it (ties: the
        # smallest id); each receptor's row counts the tags it won
        "SELECT window_start, window_start + 2000 AS window_end, receptor_id, "
        "count(DISTINCT tag_id) AS count_distinct_tag_id FROM ("
        "  SELECT window_start, receptor_id, tag_id, row_number() OVER (PARTITION BY window_start, tag_id "
        "    ORDER BY count(*) DESC, receptor_id) AS place "
        f"  FROM {_view_windowed(2000, 2000)} GROUP BY window_start, receptor_id, tag_id) WHERE place = 1 "
        "GROUP BY window_start, receptor_id",
    "a view as source, a coarser window":
        "SELECT window_start, window_start + 4000 AS window_end, receptor_id, count(*) AS seen "
        f"FROM {_view_windowed(4000, 4000)} GROUP BY window_start, receptor_id",
    "scope by location through the join: root at that door":
        "SELECT window_start, window_start + 4000 AS window_end, location, min(read_strength) AS weakest "
        f"FROM {_windowed(4000, 2000)} w JOIN receptor_locations USING (receptor_id) "
        "WHERE location = 'outbound-door' GROUP BY window_start, location",
    "the paper's smoothed view as CREATE VIEW over the definition-only cleaned view":
        "SELECT window_start, window_start + 2000 AS window_end, receptor_id, tag_id "
        f"FROM {_windowed(2000, 2000, 'cleaned_rfid_stream')} GROUP BY window_start, receptor_id, tag_id "
        "HAVING count(*) >= {count_T}",
    "selection and projection only":
        "SELECT receptor_id, tag_id, read_strength, ts FROM rfid_stream WHERE read_strength > 0.75",
    "selection with arithmetic, NOT and a scope of one receptor":
        "SELECT tag_id, read_strength * 100 AS pct, ts FROM rfid_stream "
        "WHERE receptor_id = 'door2-r1' AND NOT antenna = 2",
    "scope by IN across doors: root at their ancestor":
        "SELECT window_start, window_start + 2000 AS window_end, tag_id, count(*) AS n "
        f"FROM {_windowed(2000, 2000, where=TWO_DOORS)} GROUP BY window_start, tag_id",
    "a view as source, sliding over its tumbling windows":
        "SELECT window_start, window_start + 6000 AS window_end, tag_id, count(*) AS receptors "
        f"FROM {_view_windowed(6000, 2000)} GROUP BY window_start, tag_id",
    "a view as source scoped to one receptor: root at its edge":
        "SELECT window_start, window_start + 4000 AS window_end, tag_id, count(*) AS windows "
        f"FROM {_view_windowed(4000, 4000, OTHER_RECEPTOR)} GROUP BY window_start, tag_id",
    "EPC decoding: distinct units per product, grouped by a computed key":
        # product(tag): the EPC URI without its scheme (urn:epc:id:<scheme>:), up to its second '.'
        "SELECT window_start, window_start + 4000 AS window_end, product, count(DISTINCT tag_id) AS units FROM ("
        "  SELECT *, regexp_extract(regexp_replace(tag_id, '^urn:epc:id:[a-z0-9]+:', ''), '^[^.]*(\\.[^.]*)?', 0) "
        f"  AS product FROM {_windowed(4000, 4000, where='read_strength >= 0.2')}) GROUP BY window_start, product",
    "a definition-only view as source (cleaned), ratio of two aggregates":
        "SELECT window_start, window_start + 2000 AS window_end, receptor_id, "
        "count(DISTINCT tag_id)::DOUBLE / count(*) AS distinct_share "
        f"FROM {_windowed(2000, 2000, 'cleaned_rfid_stream')} GROUP BY window_start, receptor_id",
    "a window join: tags read at door1 and at door2 within a second, counted per window":
        _pairs_across_doors(4000, "count(DISTINCT a_tag) AS tags, count(*) AS pairs"),
    "a second window join over the same inputs, windows of its own: it reads the first one's joined rows":
        _pairs_across_doors(2000, "count(*) AS pairs"),
    "sensor_stream: the dock motes' temperature and humidity per mote (their door is the root)":
        "SELECT window_start, window_start + 4000 AS window_end, receptor_id, avg(temperature) AS temperature, "
        f"max(humidity) AS humidity, count(*) AS samples FROM {_windowed(4000, 2000, 'sensor_stream')} "
        "GROUP BY window_start, receptor_id",
}


# Each window join's DuckDB twin (tests/test_stream_joins.py's SENSOR_JOINS and RFID_JOINS, by
# name), its columns named and ordered as the query's. A joined row's time is the newest of its rows' times (a
# view's rows: their window_start); a window on the first source windows the joined rows by it.
def _joined_windows(range_ms: int, slide_ms: int, rows: str, times: str) -> str:
    return f"(SELECT *, unnest(window_starts(greatest({times}), {range_ms}, {slide_ms})) AS window_start FROM {rows})"


def _product_counts() -> str:
    """The default topology's product_counts view: per window, each tag goes to the receptor with
    the most smoothed reads of it (ties: the smallest id); a receptor's row counts the tags it won."""
    return ("(SELECT window_start, receptor_id, count(DISTINCT tag_id) AS tags FROM ("
            "  SELECT window_start, receptor_id, tag_id, row_number() OVER (PARTITION BY window_start, tag_id "
            "    ORDER BY sum(reads) DESC, receptor_id) AS place "
            "  FROM smoothed_rfid_stream GROUP BY window_start, receptor_id, tag_id) WHERE place = 1 "
            "GROUP BY window_start, receptor_id)")


JOIN_TWINS: dict[str, str] = {
    "2-way, a mote hotter than another within a second after":
        "SELECT a.receptor_id, b.receptor_id AS other, a.temperature, b.temperature AS hotter, "
        "greatest(a.ts, b.ts) AS ts FROM sensor_stream a, sensor_stream b WHERE b.ts >= a.ts AND b.ts <= a.ts + 1000 "
        "AND a.temperature > 35 AND b.temperature > a.temperature AND a.receptor_id != b.receptor_id",
    "2-way symmetric window, aggregated per mote":
        "SELECT window_start, window_start + 4000 AS window_end, a_mote AS receptor_id, count(*) AS pairs, "
        "avg(b_temperature) AS near FROM " + _joined_windows(
            4000, 4000, "(SELECT a.receptor_id AS a_mote, b.temperature AS b_temperature, a.ts AS a_ts, b.ts AS b_ts "
            "FROM sensor_stream a, sensor_stream b WHERE b.ts >= a.ts - 500 AND b.ts <= a.ts + 500 "
            "AND a.receptor_id != b.receptor_id)", "a_ts, b_ts") + " GROUP BY window_start, a_mote",
    "2-way on an equal key, sliding windows, HAVING":
        "SELECT window_start, window_start + 6000 AS window_end, mote AS receptor_id, "
        "max(b_humidity) - min(a_humidity) AS rise FROM " + _joined_windows(
            6000, 2000, "(SELECT a.receptor_id AS mote, a.humidity AS a_humidity, b.humidity AS b_humidity, "
            "a.ts AS a_ts, b.ts AS b_ts FROM sensor_stream a, sensor_stream b WHERE a.receptor_id = b.receptor_id "
            "AND b.ts > a.ts AND b.ts <= a.ts + 2000)", "a_ts, b_ts") +
        " GROUP BY window_start, mote HAVING count(*) >= 3",
    "2-way, the time said in WHERE and the other way round":
        "SELECT a.receptor_id, b.receptor_id AS other, greatest(a.ts, b.ts) AS ts "
        "FROM sensor_stream a, sensor_stream b WHERE a.ts >= b.ts - 300 AND a.ts <= b.ts "
        "AND a.humidity > 55 AND b.humidity < 35",
    "3-way chain, a uniform window":
        "SELECT a.receptor_id, c.humidity, greatest(a.ts, b.ts, c.ts) AS ts FROM sensor_stream a, sensor_stream b, "
        "sensor_stream c WHERE b.ts BETWEEN a.ts AND a.ts + 1000 AND c.ts BETWEEN b.ts AND b.ts + 1000 "
        "AND a.temperature > 38 AND b.temperature > 38 AND c.humidity > 68",
    "3-way, a window per pair, a key between two":
        "SELECT a.receptor_id, c.humidity, greatest(a.ts, b.ts, c.ts) AS ts FROM sensor_stream a, sensor_stream b, "
        "sensor_stream c WHERE b.receptor_id = a.receptor_id AND b.ts > a.ts AND b.ts <= a.ts + 1000 "
        "AND c.ts BETWEEN b.ts AND b.ts + 600 AND a.temperature > 30 AND b.temperature > 30 AND c.humidity > 60",
    "3-way, no bound between b and c (bounded through a), counted":
        "SELECT window_start, window_start + 4000 AS window_end, count(*) AS n, max(c_temperature) AS top "
        "FROM " + _joined_windows(
            4000, 4000, "(SELECT c.temperature AS c_temperature, a.ts AS a_ts, b.ts AS b_ts, c.ts AS c_ts "
            "FROM sensor_stream a, sensor_stream b, sensor_stream c WHERE b.ts BETWEEN a.ts AND a.ts + 1000 "
            "AND c.ts BETWEEN a.ts - 1000 AND a.ts AND a.temperature > 37 AND b.humidity > 60 AND c.humidity < 30)",
            "a_ts, b_ts, c_ts") + " GROUP BY window_start",
    "4-way STEAM spread: door1's motes, then door2's, within travel times":
        "SELECT a.receptor_id, d.temperature, greatest(a.ts, b.ts, c.ts, d.ts) AS ts FROM sensor_stream a, "
        "sensor_stream b, sensor_stream c, sensor_stream d WHERE b.ts BETWEEN a.ts AND a.ts + 1000 "
        "AND c.ts BETWEEN b.ts AND b.ts + 2000 AND d.ts BETWEEN a.ts AND a.ts + 3000 "
        "AND d.receptor_id = c.receptor_id AND a.receptor_id = 'door1-m1' AND b.receptor_id = 'door1-m2' "
        "AND c.receptor_id = 'door2-m1' AND a.temperature > 30 AND b.temperature > 30 AND c.temperature > 30",
    "2-way on a key, a rise between a mote's next samples, the residual over both inputs":
        "SELECT a.receptor_id, b.temperature - a.temperature AS rise, greatest(a.ts, b.ts) AS ts FROM sensor_stream a, "
        "sensor_stream b WHERE a.receptor_id = b.receptor_id AND b.ts BETWEEN a.ts + 400 AND a.ts + 600 "
        "AND b.temperature - a.temperature > 15",
    "2-way, scoped to one door: placed at that door":
        "SELECT a.receptor_id, b.receptor_id AS other, greatest(a.ts, b.ts) AS ts "
        "FROM sensor_stream a, sensor_stream b WHERE b.ts BETWEEN a.ts AND a.ts + 250 "
        "AND a.receptor_id = 'door1-m1' AND b.receptor_id = 'door1-m2' "
        "AND a.temperature > b.temperature",
    "a tag read at door1, then at door2 within 1-3 s":
        "SELECT a.tag_id, a.receptor_id AS first, b.receptor_id AS then, greatest(a.ts, b.ts) AS ts "
        "FROM rfid_stream a, rfid_stream b "
        "WHERE a.tag_id = b.tag_id AND b.ts BETWEEN a.ts + 1000 AND a.ts + 3000 "
        "AND a.receptor_id = 'door1-r1' AND b.receptor_id = 'door2-r2'",
    "tags read at both doors within half a second, counted per window":
        "SELECT window_start, window_start + 4000 AS window_end, count(DISTINCT a_tag) AS tags, count(*) AS pairs "
        "FROM " + _joined_windows(
            4000, 4000, "(SELECT a.tag_id AS a_tag, a.ts AS a_ts, b.ts AS b_ts FROM rfid_stream a, rfid_stream b "
            "WHERE a.tag_id = b.tag_id AND b.ts BETWEEN a.ts - 500 AND a.ts + 500 "
            "AND a.receptor_id IN ('door1-r1', 'door1-r2') AND b.receptor_id IN ('door2-r1', 'door2-r2'))",
            "a_ts, b_ts") + " GROUP BY window_start",
    "a view joined with itself: smoothed at door1, then at door2":
        "SELECT a.tag_id, b.window_start AS seen, greatest(a.window_start, b.window_start) AS ts "
        "FROM smoothed_rfid_stream a, "
        "smoothed_rfid_stream b WHERE a.tag_id = b.tag_id "
        "AND b.window_start BETWEEN a.window_start + 2000 AND a.window_start + 4000 "
        "AND a.receptor_id = 'door1-r1' AND b.receptor_id = 'door2-r1'",
    "a definition-only view (cleaned readings) joined with the raw stream, per-pair sliding windows":
        "SELECT window_start, window_start + 4000 AS window_end, c_receptor AS receptor_id, "
        "max(r_strength) AS strongest, count(*) AS pairs FROM " + _joined_windows(
            4000, 2000, "(SELECT c.receptor_id AS c_receptor, r.read_strength AS r_strength, c.ts AS c_ts, "
            "r.ts AS r_ts FROM cleaned_rfid_stream c, rfid_stream r WHERE c.tag_id = r.tag_id "
            "AND r.ts BETWEEN c.ts - 250 AND c.ts AND c.receptor_id != r.receptor_id)", "c_ts, r_ts") +
        " GROUP BY window_start, c_receptor",
    "a view joined with a raw stream: each window's counts beside the reads in it":
        "SELECT p.receptor_id, p.tags, r.tag_id, greatest(p.window_start, r.ts) AS ts FROM " + _product_counts() +
        " p, rfid_stream r WHERE p.receptor_id = r.receptor_id AND r.ts >= p.window_start "
        "AND r.ts < p.window_start + 2000 AND r.read_strength > 0.9",
}


def reading_lines(rows: Iterable[tuple[str, str, float, int]], antenna: int = 1) -> list[dict[str, Any]]:
    """(receptor, tag, strength, ts ms) rows as the readings log has them: one read cycle each."""
    return [{"receptor": receptor, "t": ts, "reads": [[tag, antenna, strength]]}
            for receptor, tag, strength, ts in rows]


def sample_lines(rows: Iterable[tuple[str, dict[str, float], int]]) -> list[dict[str, Any]]:
    """(mote, {quantity: value}, ts ms) rows as the readings log has them: one sample each."""
    return [{"t": ts, "samples": [{"receptor_id": mote, "values": values, "timestamp_ms": ts}]}
            for mote, values, ts in rows]

"""Distinct user queries for `hifi bench sharing`, bound to a topology's catalog: each one a
different window, slide, grouping, filter, aggregate list and HAVING, drawn so that it has rows
(filters the readings pass, keys the catalog holds). Pure.

>>> queries = distinct_queries(50, ["r1", "r2"])
>>> len(set(queries)) == 50 and len({q.split(" FROM ")[1].split("]")[0] for q in queries}) > 3
True
>>> distinct_queries(3, ["r1"]) == distinct_queries(3, ["r1"])   # the same seed, the same queries
True
"""

from __future__ import annotations

import random
from collections.abc import Sequence

WINDOWS = ("[range by '2 seconds']", "[range by '3 seconds']", "[range by '4 seconds']",
           "[range by '4 seconds', slide by '2 seconds']", "[range by '6 seconds', slide by '3 seconds']",
           "[range by '2 seconds', slide by '1 second']", "[range by '5 seconds']")
KEYS = ((), ("tag_id",), ("receptor_id",), ("location",), ("receptor_id", "tag_id"))
AGGREGATES = ("count(*)", "count(DISTINCT tag_id)", "sum(read_strength)", "avg(read_strength)",
              "min(read_strength)", "max(read_strength)", "count(DISTINCT receptor_id)")
HAVINGS = ("count(*) >= 1", "count(*) >= 2", "max(read_strength) >= 0.3")


def distinct_queries(n: int, receptors: Sequence[str], seed: int = 7) -> list[str]:
    """`n` different HiFi SQL queries over rfid_stream (readings of strength about 0.2-1 from
    `receptors`), the same ones for the same arguments."""
    rng = random.Random(seed)
    found: dict[str, None] = {}
    while len(found) < n:
        found.setdefault(_query(rng, receptors))
    return list(found)


def _query(rng: random.Random, receptors: Sequence[str]) -> str:
    keys = rng.choice(KEYS)
    aggregates = rng.sample(AGGREGATES, rng.randint(1, 3))
    conditions = [f"read_strength >= {rng.randint(20, 55) / 100:.2f}"]
    if rng.random() < 0.4:
        chosen = rng.sample(list(receptors), rng.randint(1, len(receptors)))
        conditions.append(f"receptor_id = '{chosen[0]}'" if len(chosen) == 1
                          else f"receptor_id IN ({', '.join(repr(r) for r in chosen)})")
    sql = (f"SELECT {', '.join([*keys, *(f'{a} AS a{i}' for i, a in enumerate(aggregates))])} "
           f"FROM rfid_stream {rng.choice(WINDOWS)}")
    if "location" in keys:
        sql += " JOIN receptor_locations USING (receptor_id)"
    sql += " WHERE " + " AND ".join(conditions)
    if keys:
        sql += " GROUP BY " + ", ".join(keys)
        if rng.random() < 0.5:
            sql += " HAVING " + rng.choice(HAVINGS)
    return sql

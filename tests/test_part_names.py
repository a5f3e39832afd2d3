"""A part's name is its role and the hash of its plan's JSON, however PartNames gets the text
(glue.rewrite.part_names). Pure."""

from __future__ import annotations

import hashlib

from base.plan import RAW_RFID_SOURCE_COLUMNS, Aggregate, AggSpec, BinOp, Col, Filter, Lit, Source, Union_
from base.plan_json import to_json
from glue.rewrite.part_names import PartNames
from wire.windows import Window


def _named(role: str, plan) -> str:
    return f"{role}_{hashlib.sha1(to_json(plan).encode()).hexdigest()[:12]}"


def _producer(topic: str, threshold: float = 0.5, window: int = 2000):
    source = Source((topic,), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000)
    kept = Filter(source, BinOp(">=", Col("read_strength"), Lit(threshold)))
    return Aggregate(kept, ("tag_id",), (AggSpec("n", "count"),), None, Window(window, window))


def test_every_part_gets_the_name_of_its_own_plan_whichever_came_first():
    names = PartNames()
    plans = [("producer", _producer(f"hifi.raw.door{n}")) for n in range(5)]
    plans += [("producer", _producer("hifi.raw.door1", 0.7)), ("producer", _producer("hifi.raw.door2", window=4000)),
              ("merge", _producer("hifi.view.w1.a")), ("producer", _producer("hifi.raw.door9")),
              ("producer", Union_((_producer("hifi.raw.a"), _producer("hifi.raw.b"))))]
    got = [names.name(role, plan) for role, plan in plans]
    assert got == [_named(role, plan) for role, plan in plans]
    assert len(set(got)) == len(got)   # no two of these plans alike

"""dsp.spark.columns: what a part asks of Spark is built once a session, and a new session (another
gateway) builds its own. Pure: the gateway is a stand-in object, nothing reaches a JVM."""

from __future__ import annotations

from pyspark import SparkContext

from dsp.spark import columns


def test_a_key_is_built_once_a_session_and_again_in_a_new_one(monkeypatch):
    built: list[str] = []

    def build() -> str:
        built.append("x")
        return f"column {len(built)}"

    monkeypatch.setattr(SparkContext, "_gateway", object())
    first = columns.cached(("term", 1), build)
    assert columns.cached(("term", 1), build) == first == "column 1" and len(built) == 1
    assert columns.cached(("term", 2), build) == "column 2"   # another key: its own
    monkeypatch.setattr(SparkContext, "_gateway", object())   # a new session
    assert columns.cached(("term", 1), build) == "column 3"


def test_the_cache_starts_over_when_full(monkeypatch):
    monkeypatch.setattr(SparkContext, "_gateway", object())
    monkeypatch.setattr(columns, "MAX_KEPT", 3)
    for key in range(3):
        columns.cached(key, lambda key=key: key)
    assert columns.cached(0, lambda: "again") == 0
    columns.cached(99, lambda: 99)   # a fourth: the cache was full
    assert columns.cached(0, lambda: "again") == "again"

"""Spark Columns built once a session and reused batch after batch.

A Column is an unresolved expression, good for any DataFrame with the columns it names, and
building one through PySpark costs py4j round trips to the driver's JVM (a function looked up,
called, its arguments sent): a part's stateless prefix and partials took hundreds a batch. What
does not change from batch to batch (a part's filters, projections, windows and aggregates) is
built at its first batch and kept, keyed by plain values of its plan; what a batch brings (its
topics, the bounds its rows are late against) is built with the batch. Kept per Spark session (its
gateway): a new session builds its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from pyspark import SparkContext

T = TypeVar("T")

MAX_KEPT = 20_000   # entries before the cache starts over (parts come and go; a part's are ~20)

_kept: dict[Hashable, Any] = {}
_session: list[Any] = [None]   # the gateway the kept Columns belong to
_lock = threading.Lock()


def cached(key: Hashable, build: Callable[[], T]) -> T:
    """What `build()` made for `key` in this Spark session, made now if it has not been."""
    gateway = SparkContext._gateway
    with _lock:
        if _session[0] is not gateway:
            _kept.clear()
            _session[0] = gateway
        found = _kept.get(key, _kept)
    if found is not _kept:
        return found
    made = build()
    with _lock:
        if _session[0] is gateway:
            if len(_kept) >= MAX_KEPT:
                _kept.clear()
            _kept[key] = made
    return made
